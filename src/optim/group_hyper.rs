//! One parameter group's hyperparameters by torch's key
//! (`optimizer.param_groups[i]["weight_decay"] = 0.0`), for the usual
//! set-ups such as no weight decay on biases and norms, or a smaller `eps`
//! and `betas[1]` for one group.
use super::state::FLAG_KEYS;
use super::{momentum_key, Optimizer};
use crate::error::{Error, ErrorCode, Result};

/// A hyperparameter of a fulmen param group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hyper {
    Lr,
    WeightDecay,
    /// SGD's and RMSprop's `momentum`; the Adam family's `betas[0]`.
    Momentum,
    /// The optimizer kind's other constant number `i` (`betas.1`, `eps`,
    /// a flag, ...).
    Extra(usize),
}

/// torch's keys of `opt`'s groups, for messages.
fn keys(opt: &dyn Optimizer) -> String {
    let mut keys = vec!["lr", "weight_decay"];
    keys.extend(momentum_key(opt.name()));
    keys.extend(opt.group_extras().iter().copied());
    keys.iter().map(|k| format!("{k:?}")).collect::<Vec<_>>().join(", ")
}

fn parse(opt: &dyn Optimizer, name: &str) -> Result<Hyper> {
    let kind = opt.name();
    let momentum = momentum_key(kind);
    let name = match (name, momentum) {
        ("beta1", Some("betas.0")) => "betas.0",
        ("beta2", Some("betas.0")) => "betas.1",
        _ => name,
    };
    match name {
        "lr" => Ok(Hyper::Lr),
        "weight_decay" => Ok(Hyper::WeightDecay),
        _ if momentum == Some(name) => Ok(Hyper::Momentum),
        _ => match opt.group_extras().iter().position(|k| *k == name) {
            Some(i) => Ok(Hyper::Extra(i)),
            None => Err(Error::invalid(format!("{kind} param groups have no {name:?}: their keys are {}", keys(opt)))),
        },
    }
}

fn check_group(opt: &dyn Optimizer, group: usize) -> Result<()> {
    let n = opt.param_groups().len();
    if group >= n {
        return Err(Error::new(ErrorCode::OutOfRange, format!("param group {group} of an optimizer with {n}")));
    }
    Ok(())
}

/// The value of `name` in group `group`: `"lr"`, `"weight_decay"`, the
/// momentum as the optimizer names it (`"momentum"`, or `"betas.0"` /
/// `"beta1"`), and the kind's other constants by torch's key
/// (`Optimizer::group_extras`: `"betas.1"` / `"beta2"`, `"eps"`,
/// `"alpha"`, ...; flags such as `"amsgrad"` read 0 or 1).
pub fn get(opt: &dyn Optimizer, group: usize, name: &str) -> Result<f64> {
    let hyper = parse(opt, name)?;
    check_group(opt, group)?;
    let g = &opt.param_groups()[group];
    Ok(match hyper {
        Hyper::Lr => g.lr,
        Hyper::WeightDecay => g.weight_decay,
        Hyper::Momentum => g.momentum,
        Hyper::Extra(i) => match g.extras.get(i) {
            Some(v) => *v,
            None => return Err(Error::state(format!("{} param group {group} lacks its {name}", opt.name()))),
        },
    })
}

/// Sets `name` (as in [`get`]) in group `group`, validated as torch's
/// constructors validate that option: finite; `lr`, `weight_decay`, `eps`,
/// `alpha`, `lr_decay`, `momentum_decay` and SGD's / RMSprop's momentum at
/// least 0; betas in [0, 1); flags 0 or 1; SGD's `dampening` any finite
/// value, and `nesterov` without torch's constructor-only check of momentum
/// and dampening. A scheduler computes `lr` (and a cycling one momentum)
/// from the group's base learning rate at each step: an `lr` set here lasts
/// until the scheduler's next step.
pub fn set(opt: &mut dyn Optimizer, group: usize, name: &str, value: f64) -> Result<()> {
    let hyper = parse(opt, name)?;
    check_group(opt, group)?;
    let kind = opt.name();
    let bad = |why: &str| Error::invalid(format!("{kind} {name} {value} of param group {group} {why}"));
    if !value.is_finite() {
        return Err(bad("must be finite"));
    }
    if let Hyper::Extra(i) = hyper {
        if FLAG_KEYS.contains(&opt.group_extras()[i]) && value != 0.0 && value != 1.0 {
            return Err(bad("must be 0 or 1 (a flag)"));
        }
    }
    // The new values, checked whole before any is kept; a momentum a
    // cycling scheduler wrote (torch's may write beta1 >= 1) is checked
    // only when it is the value set.
    let g = &opt.param_groups()[group];
    let mut probe = g.hypers();
    let written_momentum = probe.momentum;
    if hyper != Hyper::Momentum {
        probe.momentum = 0.0;
    }
    match hyper {
        Hyper::Lr => probe.lr = value,
        Hyper::WeightDecay => probe.weight_decay = value,
        Hyper::Momentum => probe.momentum = value,
        Hyper::Extra(i) => match probe.extras.get_mut(i) {
            Some(slot) => *slot = value,
            None => return Err(Error::state(format!("{kind} param group {group} lacks its {name}"))),
        },
    }
    // A value out of range is the caller's; an optimizer that cannot be
    // changed now (one stepping with a closure) says so as it is.
    opt.check_group(&probe).map_err(|e| match e.code {
        crate::error::ErrorCode::InvalidState => e,
        _ => bad(&format!("is refused: {}", e.message)),
    })?;
    if hyper != Hyper::Momentum {
        probe.momentum = written_momentum;
    }
    let g = &mut opt.param_groups_mut()[group];
    g.lr = probe.lr;
    g.weight_decay = probe.weight_decay;
    g.momentum = probe.momentum;
    g.extras = probe.extras;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::optim::{Adagrad, AdagradOptions, AdamOptions, AdamW, Sgd, SgdOptions};
    use tch::{Kind, Tensor};

    fn param() -> Tensor {
        Tensor::zeros([2], (Kind::Float, tch::Device::Cpu)).set_requires_grad(true)
    }

    #[test]
    fn groups_keep_their_own_hyperparameters() {
        let mut sgd =
            Sgd::new(vec![param()], SgdOptions { lr: 0.1, weight_decay: 0.01, ..Default::default() }).unwrap();
        sgd.add_param_group(vec![param()], None).unwrap();
        set(&mut sgd, 1, "weight_decay", 0.0).unwrap();
        set(&mut sgd, 1, "momentum", 0.9).unwrap();
        assert_eq!(get(&sgd, 0, "weight_decay").unwrap(), 0.01);
        assert_eq!(get(&sgd, 1, "weight_decay").unwrap(), 0.0);
        assert_eq!(get(&sgd, 1, "momentum").unwrap(), 0.9);
        assert_eq!(get(&sgd, 0, "momentum").unwrap(), 0.0);
        assert_eq!(get(&sgd, 2, "lr").unwrap_err().code, ErrorCode::OutOfRange);
        assert_eq!(set(&mut sgd, 0, "betas.0", 0.9).unwrap_err().code, ErrorCode::InvalidArgument);
        for bad in [-0.1, f64::NAN, f64::INFINITY] {
            assert_eq!(set(&mut sgd, 0, "lr", bad).unwrap_err().code, ErrorCode::InvalidArgument);
        }
        assert_eq!(get(&sgd, 0, "lr").unwrap(), 0.1);

        let mut adamw = AdamW::new(vec![param()], AdamOptions::adamw()).unwrap();
        set(&mut adamw, 0, "beta1", 0.5).unwrap();
        assert_eq!(get(&adamw, 0, "betas.0").unwrap(), 0.5);
        assert_eq!(set(&mut adamw, 0, "betas.0", 1.0).unwrap_err().code, ErrorCode::InvalidArgument);
        assert!(set(&mut adamw, 0, "momentum", 0.9).unwrap_err().message.contains("\"betas.0\""));

        let mut adagrad = Adagrad::new(vec![param()], AdagradOptions::default()).unwrap();
        assert_eq!(set(&mut adagrad, 0, "momentum", 0.9).unwrap_err().code, ErrorCode::InvalidArgument);
        set(&mut adagrad, 0, "weight_decay", 0.5).unwrap();
    }
}

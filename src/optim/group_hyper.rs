//! One parameter group's hyperparameters by torch's key
//! (`optimizer.param_groups[i]["weight_decay"] = 0.0`), for the usual
//! set-ups such as no weight decay on biases and norms.
use super::{momentum_key, Optimizer};
use crate::error::{Error, ErrorCode, Result};

/// A schedulable hyperparameter every fulmen param group keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hyper {
    Lr,
    WeightDecay,
    /// SGD's and RMSprop's `momentum`; the Adam family's `betas[0]`.
    Momentum,
}

fn parse(opt: &dyn Optimizer, name: &str) -> Result<Hyper> {
    let kind = opt.name();
    match name {
        "lr" => Ok(Hyper::Lr),
        "weight_decay" => Ok(Hyper::WeightDecay),
        _ => match momentum_key(kind) {
            Some(key) if name == key || (key == "betas.0" && name == "beta1") => Ok(Hyper::Momentum),
            Some(key) => Err(Error::invalid(format!(
                "{kind} param groups have no {name:?}: the per-group keys are \"lr\", \"weight_decay\" and {key:?}"
            ))),
            None => Err(Error::invalid(format!(
                "{kind} param groups have no {name:?}: the per-group keys are \"lr\" and \"weight_decay\""
            ))),
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

/// The value of `name` (`"lr"`, `"weight_decay"`, `"momentum"` or
/// `"betas.0"` / `"beta1"` as the optimizer names it) in group `group`.
pub fn get(opt: &dyn Optimizer, group: usize, name: &str) -> Result<f64> {
    let hyper = parse(opt, name)?;
    check_group(opt, group)?;
    let g = &opt.param_groups()[group];
    Ok(match hyper {
        Hyper::Lr => g.lr,
        Hyper::WeightDecay => g.weight_decay,
        Hyper::Momentum => g.momentum,
    })
}

/// Sets `name` in group `group`, validated as torch's constructors do:
/// finite, `lr`, `weight_decay` and `momentum` >= 0, `betas[0]` in [0, 1).
/// A scheduler computes `lr` (and a cycling one momentum) from the group's
/// base learning rate at each step: an `lr` set here lasts until the
/// scheduler's next step.
pub fn set(opt: &mut dyn Optimizer, group: usize, name: &str, value: f64) -> Result<()> {
    let hyper = parse(opt, name)?;
    check_group(opt, group)?;
    let beta = momentum_key(opt.name()) == Some("betas.0");
    let valid = value.is_finite()
        && value >= 0.0
        && match hyper {
            Hyper::Momentum if beta => value < 1.0,
            _ => true,
        };
    if !valid {
        let range = if hyper == Hyper::Momentum && beta { "in [0, 1)" } else { "finite and >= 0" };
        return Err(Error::invalid(format!("{} {name} {value} of param group {group} must be {range}", opt.name())));
    }
    let g = &mut opt.param_groups_mut()[group];
    match hyper {
        Hyper::Lr => g.lr = value,
        Hyper::WeightDecay => g.weight_decay = value,
        Hyper::Momentum => g.momentum = value,
    }
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

//! BackboneFinetuning's learning rates, epoch by epoch, with a StepLR that
//! takes the appended group as torch's does; its state round trip.
use super::backbone_finetuning::{BackboneFinetuning, BackboneFinetuningOptions};
use crate::nn::Module;
use crate::optim::{LrScheduler, Sgd, SgdOptions, StepLr};
use crate::trainer::hooks::{Callback, Hook, HookContext, TrainerState};
use crate::trainer::module::OptimizerConfig;
use crate::trainer::SharedModel;
use std::sync::{Arc, Mutex};

fn model() -> SharedModel {
    let mut m = Module::sequential();
    m.push(Module::linear(2, 3, true).unwrap()).unwrap();
    m.push(Module::linear(3, 2, true).unwrap()).unwrap();
    Arc::new(Mutex::new(m))
}

fn hook(cb: &mut BackboneFinetuning, hook: Hook, epoch: i64, model: &SharedModel, opts: &mut [OptimizerConfig]) {
    let mut state = TrainerState { epoch, ..Default::default() };
    let mut ctx = HookContext::new(hook, "fit", &mut state);
    ctx.model = Some(model.clone());
    ctx.optimizers = Some(opts);
    cb.on_hook(&mut ctx).unwrap();
}

fn lrs(cfg: &OptimizerConfig) -> Vec<f64> {
    cfg.optimizer.param_groups().iter().map(|g| g.lr).collect()
}

#[test]
fn backbone_lr_grows_until_it_meets_the_head() {
    let m = model();
    let opts = BackboneFinetuningOptions { backbone: "0".into(), unfreeze_backbone_at_epoch: 1, ..Default::default() };
    let mut cb = BackboneFinetuning::new(opts).unwrap();
    let mut cfgs: Vec<OptimizerConfig> = Vec::new();
    hook(&mut cb, Hook::Setup, 0, &m, &mut cfgs);
    let trainable: Vec<_> = m.lock().unwrap().parameters().into_iter().filter(|p| p.requires_grad()).collect();
    assert_eq!(trainable.len(), 2, "only the head trains before the unfreeze");
    let sgd = Sgd::new(trainable, SgdOptions { lr: 0.1, ..Default::default() }).unwrap();
    cfgs.push(OptimizerConfig::new(Box::new(sgd), None));
    let mut sched = StepLr::new(&mut *cfgs[0].optimizer, 1, 0.5).unwrap();
    // (epoch, lrs after its start hook, lrs after its scheduler step)
    // (Python's arithmetic: 0.05 * 0.1 is 0.005000000000000001.)
    let first = 0.05 * 0.1;
    let want: [(i64, Vec<f64>, Vec<f64>); 4] = [
        (0, vec![0.1], vec![0.05]),
        (1, vec![0.05, first], vec![0.025, first * 0.5]),
        (2, vec![0.025, 2.0 * first], vec![0.0125, 2.0 * first * 0.5]),
        // 4 * first passes the head's lr: aligned.
        (3, vec![0.0125, 0.0125], vec![0.00625, 0.00625]),
    ];
    for (epoch, at_start, after_step) in want {
        hook(&mut cb, Hook::TrainEpochStart, epoch, &m, &mut cfgs);
        assert_eq!(lrs(&cfgs[0]), at_start, "epoch {epoch} start");
        sched.step(&mut *cfgs[0].optimizer, None).unwrap();
        assert_eq!(lrs(&cfgs[0]), after_step, "epoch {epoch} after the step");
        assert_eq!(sched.last_lr(), after_step);
    }
    assert!(m.lock().unwrap().parameters().iter().all(|p| p.requires_grad()));
    // The scheduler's state lists both groups' last lrs and loads back.
    let state = sched.state_dict();
    assert!(state.iter().any(|(k, _)| k == "last_lr.1"));
    // (As on a resume: built on the one group configure_optimizers made.)
    let head = m.lock().unwrap().parameters()[2].shallow_clone();
    let mut one_group = Sgd::new(vec![head], SgdOptions { lr: 0.1, ..Default::default() }).unwrap();
    let mut again = StepLr::new(&mut one_group, 1, 0.5).unwrap();
    again.load_state_dict(&state).unwrap();
    assert_eq!(again.last_lr(), vec![0.00625, 0.00625]);

    // The callback's state puts the group back into a fresh optimizer.
    let saved = cb.state_dict();
    assert_eq!(saved.get("params.0.0").map(String::as_str), Some("1.weight\n1.bias"));
    assert_eq!(saved.get("params.0.1").map(String::as_str), Some("0.weight\n0.bias"));
    assert_eq!(saved.get("lr.0.1").map(String::as_str), Some(first.to_string().as_str()));
    let fresh_model = model();
    let mut restored = BackboneFinetuning::new(BackboneFinetuningOptions {
        backbone: "0".into(),
        unfreeze_backbone_at_epoch: 1,
        ..Default::default()
    })
    .unwrap();
    hook(&mut restored, Hook::Setup, 0, &fresh_model, &mut []);
    let head: Vec<_> = fresh_model.lock().unwrap().parameters().into_iter().filter(|p| p.requires_grad()).collect();
    let mut fresh = vec![OptimizerConfig::new(Box::new(Sgd::new(head, SgdOptions::default()).unwrap()), None)];
    restored.load_state_dict(&saved).unwrap();
    restored.restore_param_groups(&fresh_model, &mut fresh, "").unwrap();
    assert_eq!(fresh[0].optimizer.param_groups().len(), 2);
    assert!(fresh_model.lock().unwrap().parameters().iter().all(|p| p.requires_grad()));
    // A checkpoint from another set-up is refused: the optimizer now has
    // both groups (nothing to add, the recorded first group is not its).
    restored.load_state_dict(&saved).unwrap();
    let mut swapped = saved.clone();
    swapped.insert("params.0.0".into(), "0.weight\n0.bias".into());
    restored.load_state_dict(&swapped).unwrap();
    assert!(restored.restore_param_groups(&fresh_model, &mut fresh, "").is_err());
    let mut unknown = saved.clone();
    unknown.insert("params.0.1".into(), "no.such".into());
    restored.load_state_dict(&unknown).unwrap();
    let mut one = vec![OptimizerConfig::new(
        Box::new(
            Sgd::new(vec![fresh_model.lock().unwrap().parameters()[2].shallow_clone()], SgdOptions::default()).unwrap(),
        ),
        None,
    )];
    assert!(restored.restore_param_groups(&fresh_model, &mut one, "").is_err());
    // Prefixed names (a Lightning file's "model.") are found too.
    let prefixed: std::collections::BTreeMap<String, String> = saved
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                if k.starts_with("params.") {
                    v.split('\n').map(|n| format!("model.{n}")).collect::<Vec<_>>().join("\n")
                } else {
                    v.clone()
                },
            )
        })
        .collect();
    restored.load_state_dict(&prefixed).unwrap();
    let head: Vec<_> = fresh_model.lock().unwrap().parameters()[2..].iter().map(|t| t.shallow_clone()).collect();
    let mut again = vec![OptimizerConfig::new(Box::new(Sgd::new(head, SgdOptions::default()).unwrap()), None)];
    restored.restore_param_groups(&fresh_model, &mut again, "model.").unwrap();
    assert_eq!(again[0].optimizer.param_groups().len(), 2);
    // ... and recorded under the model's own names from then on.
    assert_eq!(restored.state_dict(), saved);
    // A new fit's setup starts a new record.
    hook(&mut restored, Hook::Setup, 0, &fresh_model, &mut []);
    assert_eq!(restored.state_dict().len(), 1, "{:?}", restored.state_dict());
    let empty = BackboneFinetuningOptions { backbone: String::new(), ..Default::default() };
    assert!(BackboneFinetuning::new(empty).is_err());
    for (key, value) in [("what", "1"), ("params.0.x", "a"), ("lr.0.5", "0.1"), ("params.0.999999999", "a")] {
        let mut junk = saved.clone();
        junk.insert(key.into(), value.into());
        assert!(restored.load_state_dict(&junk).is_err(), "{key}");
    }
}

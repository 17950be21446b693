//! Lightning's `BackboneFinetuning`: the backbone (a module of the model,
//! by its dotted path) is frozen at setup, so `configure_optimizers` can
//! build the optimizers over the trainable parameters only; at the start of
//! epoch `unfreeze_backbone_at_epoch` it becomes trainable and joins every
//! optimizer as a new param group with a small learning rate, which then
//! grows by a factor each epoch until it meets the first group's.
use crate::error::{Error, Result};
use crate::optim::{same_param, Optimizer};
use crate::trainer::hooks::{Callback, Hook, HookContext};
use crate::trainer::module::OptimizerConfig;
use crate::trainer::SharedModel;
use std::collections::BTreeMap;
use tch::Tensor;

/// The callback's options (Lightning's arguments and defaults; the
/// backbone is named by path where Lightning reads `pl_module.backbone`).
#[derive(Debug, Clone, PartialEq)]
pub struct BackboneFinetuningOptions {
    /// The backbone's dotted path in the model (default "backbone").
    pub backbone: String,
    /// The epoch whose start unfreezes the backbone (default 10).
    pub unfreeze_backbone_at_epoch: i64,
    /// Each later epoch multiplies the backbone's lr by this (Lightning's
    /// default `lambda_func`, `multiplicative`, returns 2); a callback made
    /// with [`BackboneFinetuning::with_lambda`] asks its function instead.
    pub lambda_factor: f64,
    /// The backbone's first lr as a fraction of the first group's (0.1).
    pub backbone_initial_ratio_lr: f64,
    /// The backbone's first lr, instead of the ratio (default none).
    pub backbone_initial_lr: Option<f64>,
    /// Keep the backbone's lr at most the first group's (default true).
    pub should_align: bool,
    /// Train the backbone's BatchNorms all along (default true): they stay
    /// trainable, and tracking, while the rest is frozen.
    pub train_bn: bool,
    /// Print the learning rates at each change (default false).
    pub verbose: bool,
    /// Decimals printed (default 12).
    pub rounding: i32,
}

impl Default for BackboneFinetuningOptions {
    fn default() -> Self {
        BackboneFinetuningOptions {
            backbone: "backbone".into(),
            unfreeze_backbone_at_epoch: 10,
            lambda_factor: 2.0,
            backbone_initial_ratio_lr: 0.1,
            backbone_initial_lr: None,
            should_align: true,
            train_bn: true,
            verbose: false,
            rounding: 12,
        }
    }
}

impl BackboneFinetuningOptions {
    /// Refuses what cannot give a learning rate.
    pub fn validate(&self) -> Result<()> {
        let bad =
            |what: &str, v: f64| Error::invalid(format!("BackboneFinetuning: {what} {v} must be finite and >= 0"));
        for (what, v) in
            [("lambda_factor", self.lambda_factor), ("backbone_initial_ratio_lr", self.backbone_initial_ratio_lr)]
        {
            if !(v.is_finite() && v >= 0.0) {
                return Err(bad(what, v));
            }
        }
        if let Some(v) = self.backbone_initial_lr.filter(|v| !(v.is_finite() && *v >= 0.0)) {
            return Err(bad("backbone_initial_lr", v));
        }
        if self.backbone.is_empty() {
            return Err(Error::invalid(
                "BackboneFinetuning: the backbone path is empty (that would be the whole model)",
            ));
        }
        if self.unfreeze_backbone_at_epoch < 0 {
            return Err(Error::invalid("BackboneFinetuning: unfreeze_backbone_at_epoch must be >= 0"));
        }
        if !(0..=17).contains(&self.rounding) {
            return Err(Error::invalid("BackboneFinetuning: rounding must be in 0..=17"));
        }
        Ok(())
    }
}

/// One param group as the callback recorded it (Lightning's
/// `_internal_optimizer_metadata` entry): its parameters' names and its lr
/// when recorded.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct GroupRecord {
    /// The parameters' names (empty for a tensor outside the model).
    pub params: Vec<String>,
    /// The group's lr when recorded.
    pub lr: f64,
}

/// The recorded groups by optimizer index.
pub(crate) type Records = BTreeMap<usize, Vec<GroupRecord>>;

/// The callback's checkpoint state as text: `previous_backbone_lr` ("none"
/// or a number), and per recorded group `params.I.J` (names, one per line)
/// and `lr.I.J`.
pub(crate) fn state_to_text(previous_backbone_lr: Option<f64>, records: &Records) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    out.insert("previous_backbone_lr".into(), previous_backbone_lr.map_or_else(|| "none".into(), |v| v.to_string()));
    for (i, groups) in records {
        for (j, g) in groups.iter().enumerate() {
            out.insert(format!("params.{i}.{j}"), g.params.join("\n"));
            out.insert(format!("lr.{i}.{j}"), g.lr.to_string());
        }
    }
    out
}

/// Reads what [`state_to_text`] wrote; a `Format` error on an unknown key,
/// a bad number, a group without its lr (or an lr without its group), or a
/// missing group index.
pub(crate) fn state_from_text(state: &BTreeMap<String, String>) -> Result<(Option<f64>, Records)> {
    let bad = |k: &str| Error::format(format!("BackboneFinetuning state: invalid '{k}'"));
    let float = |k: &str, v: &str| {
        use crate::checkpoint::numbers::{parse, Infinity};
        parse(v, Infinity::Refused, &format!("BackboneFinetuning state: '{k}'"))
    };
    let previous = match state.get("previous_backbone_lr").map(String::as_str) {
        None | Some("none") => None,
        Some(v) => Some(float("previous_backbone_lr", v)?),
    };
    let mut records: Records = BTreeMap::new();
    for (k, v) in state {
        let Some(at) = k.strip_prefix("params.") else {
            if k == "previous_backbone_lr" || k.starts_with("lr.") {
                continue;
            }
            return Err(Error::format(format!("BackboneFinetuning state: unexpected key '{k}'")));
        };
        let (i, j) = at.split_once('.').ok_or_else(|| bad(k))?;
        let (i, j): (usize, usize) = (i.parse().map_err(|_| bad(k))?, j.parse().map_err(|_| bad(k))?);
        let lr_key = format!("lr.{i}.{j}");
        let lr = float(&lr_key, state.get(&lr_key).ok_or_else(|| bad(&lr_key))?)?;
        let params = v.split('\n').map(str::to_string).collect();
        // Placed by index ("params.0.10" sorts before "params.0.2"); an
        // index is bounded by the state's own size.
        if j >= state.len() {
            return Err(bad(k));
        }
        let groups = records.entry(i).or_default();
        if groups.len() <= j {
            groups.resize(j + 1, GroupRecord { params: Vec::new(), lr: f64::NAN });
        }
        groups[j] = GroupRecord { params, lr };
    }
    if records.values().flatten().any(|g| g.lr.is_nan()) {
        return Err(Error::format("BackboneFinetuning state: a param group index is missing"));
    }
    if let Some(k) = state.keys().find(|k| k.starts_with("lr.") && !state.contains_key(&format!("params.{}", &k[3..])))
    {
        return Err(bad(k));
    }
    Ok((previous, records))
}

/// The names of `params` in `named` (empty for one the model lacks).
fn names_of(params: &[Tensor], named: &[(String, Tensor)]) -> Vec<String> {
    params
        .iter()
        .map(|p| named.iter().find(|(_, t)| same_param(t, p)).map(|(n, _)| n.clone()).unwrap_or_default())
        .collect()
}

/// Lightning's `lambda_func`: the factor of the backbone's lr for an epoch
/// (called with the epoch + 1, as Lightning calls it, once per optimizer).
pub type BackboneLambda = Box<dyn FnMut(i64) -> Result<f64> + Send>;

/// The callback.
pub struct BackboneFinetuning {
    opts: BackboneFinetuningOptions,
    /// The host's `lambda_func`, in place of `opts.lambda_factor`.
    lambda: Option<BackboneLambda>,
    /// Lightning's `previous_backbone_lr`.
    previous_backbone_lr: Option<f64>,
    /// Lightning's `_internal_optimizer_metadata`, by optimizer index:
    /// the groups `configure_optimizers` made (at the first epoch start),
    /// then the group the callback added.
    records: Records,
    /// Whether this fit put an added group back from a checkpoint.
    restored: bool,
}

impl BackboneFinetuning {
    /// The callback with checked options.
    pub fn new(opts: BackboneFinetuningOptions) -> Result<Self> {
        opts.validate()?;
        Ok(BackboneFinetuning {
            opts,
            lambda: None,
            previous_backbone_lr: None,
            records: BTreeMap::new(),
            restored: false,
        })
    }

    /// The callback whose backbone lr grows by `lambda(epoch + 1)` at each
    /// epoch start after the unfreeze (Lightning's `lambda_func`), in place
    /// of `opts.lambda_factor`.
    pub fn with_lambda(self, lambda: BackboneLambda) -> Self {
        BackboneFinetuning { lambda: Some(lambda), ..self }
    }

    /// The factor for epoch `epoch` (Lightning's `lambda_func(epoch)`): the
    /// host's function's, which must be finite and >= 0, or the constant.
    fn factor(&mut self, epoch: i64) -> Result<f64> {
        let Some(f) = self.lambda.as_mut() else {
            return Ok(self.opts.lambda_factor);
        };
        let v = f(epoch)?;
        if !(v.is_finite() && v >= 0.0) {
            return Err(Error::invalid(format!(
                "BackboneFinetuning: lambda_func({epoch}) returned {v} (expected a finite factor >= 0)"
            )));
        }
        Ok(v)
    }

    fn model(ctx: &HookContext) -> Result<SharedModel> {
        ctx.model.clone().ok_or_else(|| Error::state("BackboneFinetuning needs a LightningModule with a model"))
    }

    fn say(&self, current: f64, backbone: f64) {
        if self.opts.verbose {
            let d = self.opts.rounding as usize;
            eprintln!("Current lr: {current:.d$}, Backbone lr: {backbone:.d$}");
        }
    }

    /// Lightning's `unfreeze_and_add_param_group` with the lr given: the
    /// backbone becomes trainable and its trainable parameters that no
    /// group holds yet form a new group.
    fn unfreeze_into(&mut self, model: &SharedModel, opt: &mut dyn Optimizer, lr: f64) -> Result<Option<GroupRecord>> {
        let params = {
            let mut m = model.lock().unwrap_or_else(|p| p.into_inner());
            m.make_trainable(&self.opts.backbone)?;
            m.trainable_params_under(&self.opts.backbone, self.opts.train_bn)?
        };
        let held = |p: &Tensor| opt.param_groups().iter().any(|g| g.params.iter().any(|q| same_param(q, p)));
        let (names, fresh): (Vec<String>, Vec<Tensor>) = params.into_iter().filter(|(_, p)| !held(p)).unzip();
        if fresh.is_empty() {
            if self.restored {
                return Ok(None);
            }
            // Frozen again, as the failed unfreeze found it.
            let mut m = model.lock().unwrap_or_else(|p| p.into_inner());
            m.freeze(&self.opts.backbone, self.opts.train_bn)?;
            return Err(Error::state(format!(
                "BackboneFinetuning: every trainable parameter of `{}` is already in optimizer {}'s groups, so \
                 none can form the backbone's group; build the optimizer over the trainable parameters only \
                 (the backbone is frozen when configure_optimizers runs: fulmen_model_parameters with \
                 trainable_only)",
                self.opts.backbone,
                opt.name()
            )));
        }
        opt.add_param_group(fresh, Some(lr))?;
        Ok(Some(GroupRecord { params: names, lr }))
    }

    /// Lightning's `finetune_function` for one optimizer.
    fn finetune(&mut self, model: &SharedModel, epoch: i64, i: usize, opt: &mut dyn Optimizer) -> Result<()> {
        let at = self.opts.unfreeze_backbone_at_epoch;
        let current =
            opt.param_groups().first().map(|g| g.lr).ok_or_else(|| Error::state("an optimizer without groups"))?;
        if epoch == at {
            let initial = self.opts.backbone_initial_lr.unwrap_or(current * self.opts.backbone_initial_ratio_lr);
            self.previous_backbone_lr = Some(initial);
            if let Some(group) = self.unfreeze_into(model, opt, initial)? {
                self.records.entry(i).or_default().push(group);
            }
            self.say(current, initial);
        } else if epoch > at {
            let previous = self.previous_backbone_lr.ok_or_else(|| {
                Error::state(format!(
                    "BackboneFinetuning: epoch {epoch} is past the unfreeze epoch {at}, but the backbone's lr is \
                     unknown (resumed from a checkpoint without this callback's state, or a fit that goes on from \
                     the trainer's last one: its new optimizers lack the backbone's param group; resume from a \
                     checkpoint of that fit instead)"
                ))
            })?;
            let mut next = self.factor(epoch + 1)? * previous;
            if self.opts.should_align && next > current {
                next = current;
            }
            if let Some(g) = opt.param_groups_mut().last_mut() {
                g.lr = next;
            }
            self.previous_backbone_lr = Some(next);
            self.say(current, next);
        }
        Ok(())
    }

    fn epoch_start(&mut self, ctx: &mut HookContext) -> Result<()> {
        let model = Self::model(ctx)?;
        let epoch = ctx.state.epoch;
        let optimizers = ctx.optimizers.as_deref_mut().unwrap_or_default();
        for (i, cfg) in optimizers.iter_mut().enumerate() {
            if let std::collections::btree_map::Entry::Vacant(slot) = self.records.entry(i) {
                let named = model.lock().unwrap_or_else(|p| p.into_inner()).named_parameters();
                let groups = cfg
                    .optimizer
                    .param_groups()
                    .iter()
                    .map(|g| GroupRecord { params: names_of(&g.params, &named), lr: g.lr });
                slot.insert(groups.collect());
            }
            self.finetune(&model, epoch, i, &mut *cfg.optimizer).map_err(|e| e.context(format!("optimizer {i}")))?;
        }
        Ok(())
    }
}

impl Callback for BackboneFinetuning {
    fn name(&self) -> String {
        "BackboneFinetuning".into()
    }

    fn on_hook(&mut self, ctx: &mut HookContext) -> Result<()> {
        match ctx.hook {
            Hook::Setup => {
                if ctx.stage == "fit" && ctx.state.world_size > 1 {
                    return Err(Error::unsupported(
                        "BackboneFinetuning with several processes: DDP reduces the gradients of the parameters \
                         that were trainable when it wrapped the model, so an unfrozen backbone would drift apart \
                         on each rank",
                    ));
                }
                self.restored = false;
                if ctx.stage == "fit" {
                    // A new fit records anew (a resume loads the state after
                    // this).
                    self.records.clear();
                    self.previous_backbone_lr = None;
                }
                let model = Self::model(ctx)?;
                let mut m = model.lock().unwrap_or_else(|p| p.into_inner());
                m.freeze(&self.opts.backbone, self.opts.train_bn).map_err(|e| e.context("BackboneFinetuning"))
            }
            Hook::TrainEpochStart => self.epoch_start(ctx),
            _ => Ok(()),
        }
    }

    fn state_dict(&self) -> BTreeMap<String, String> {
        state_to_text(self.previous_backbone_lr, &self.records)
    }

    fn load_state_dict(&mut self, state: &BTreeMap<String, String>) -> Result<()> {
        (self.previous_backbone_lr, self.records) = state_from_text(state)?;
        Ok(())
    }

    fn lightning_state_key(&self) -> Option<String> {
        Some("BackboneFinetuning".into())
    }

    /// Puts the groups the callback added back into the optimizers, with
    /// the backbone trainable again (Lightning's own resume leaves it
    /// frozen: there the parameters rejoin the optimizer, but no gradient
    /// reaches them). The recorded groups before them must be the
    /// optimizer's own; names may carry the checkpoint's `prefix`.
    fn restore_param_groups(
        &mut self,
        model: &SharedModel,
        optimizers: &mut [OptimizerConfig],
        prefix: &str,
    ) -> Result<()> {
        let named = model.lock().unwrap_or_else(|p| p.into_inner()).named_parameters();
        let by_name: BTreeMap<&str, &Tensor> = named.iter().map(|(n, t)| (n.as_str(), t)).collect();
        // The model's own name of a recorded one, and its parameter.
        let find = |n: &str| {
            by_name
                .get_key_value(n)
                .or_else(|| n.strip_prefix(prefix).and_then(|m| by_name.get_key_value(m)))
                .map(|(k, t)| (k.to_string(), *t))
        };
        for (i, groups) in self.records.iter_mut() {
            let bad = |what: String| Error::format(format!("BackboneFinetuning state: optimizer {i}: {what}"));
            let cfg = optimizers.get_mut(*i).ok_or_else(|| bad("configure_optimizers made fewer optimizers".into()))?;
            let have = cfg.optimizer.param_groups().len();
            if groups.len() < have {
                return Err(bad(format!("{} param groups recorded, configure_optimizers made {have}", groups.len())));
            }
            for (j, (g, now)) in groups.iter().zip(cfg.optimizer.param_groups()).enumerate() {
                let same = g.params.len() == now.params.len()
                    && g.params.iter().zip(&now.params).all(|(n, p)| {
                        // (A tensor outside the model has no name.)
                        if n.is_empty() {
                            named.iter().all(|(_, t)| !same_param(t, p))
                        } else {
                            find(n).is_some_and(|(_, t)| same_param(t, p))
                        }
                    });
                if !same {
                    return Err(bad(format!("param group {j} holds other parameters than the checkpoint's")));
                }
            }
            for g in groups[have..].iter_mut() {
                let found = g
                    .params
                    .iter()
                    .map(|n| find(n).ok_or_else(|| bad(format!("no parameter '{n}'"))))
                    .collect::<Result<Vec<_>>>()?;
                model.lock().unwrap_or_else(|p| p.into_inner()).make_trainable(&self.opts.backbone)?;
                let params = found.iter().map(|(_, t)| t.shallow_clone()).collect();
                // The lr comes with the optimizer's state, loaded next.
                cfg.optimizer.add_param_group(params, Some(g.lr))?;
                self.restored = true;
            }
            // From now on under the model's own names (a Lightning file's
            // carry its attribute prefix), as the next checkpoint needs.
            for g in groups.iter_mut() {
                for n in g.params.iter_mut().filter(|n| !n.is_empty()) {
                    if let Some((own, _)) = find(n) {
                        *n = own;
                    }
                }
            }
        }
        Ok(())
    }
}

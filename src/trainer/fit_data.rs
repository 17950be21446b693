//! Where a fit's batches come from: the loaders passed to fit (sharded
//! once), or the module's `train_dataloader` / `val_dataloader`, called
//! when the data is first needed and again every
//! `reload_dataloaders_every_n_epochs` epochs, as Lightning's fit loop and
//! validation loop do.
use super::module::LightningModule;
use super::options::TrainerOptions;
use super::source::BatchSource;
use super::strategy::RunStrategy;
use crate::error::{Error, Result, ResultExt};
use crate::strategies::Sharded;

/// The most validation loaders a run takes (FULMEN_LOADERS_MAX).
pub(crate) const LOADERS_MAX: usize = 64;

/// The training and validation sources of one fit.
pub(crate) struct FitData<'a> {
    train: Option<Sharded<'a>>,
    vals: Vec<Sharded<'a>>,
    /// The sources come from the module's hooks (else they were passed).
    train_from_module: bool,
    vals_from_module: bool,
    /// The epoch each was last loaded for (`None`: not yet).
    train_loaded_at: Option<i64>,
    /// Whether the module's validation loaders were loaded, and the epoch
    /// recorded for their reloads (Lightning records none for a sanity
    /// check in an epoch that does not validate).
    vals_loaded: bool,
    vals_loaded_at: Option<i64>,
    /// Whether validation runs at all (a validation_step, a loader or the
    /// module's hook, `limit_val_batches` not 0).
    validating: bool,
    every_n: i64,
    sampler: bool,
}

impl<'a> FitData<'a> {
    /// The passed sources, sharded for this rank; `None` takes the
    /// module's hook instead (for training, the caller checks it has one;
    /// no validation when it has no `val_dataloader`).
    pub fn new(
        module: &dyn LightningModule,
        strategy: &RunStrategy,
        opts: &TrainerOptions,
        train: Option<&'a dyn BatchSource>,
        vals: Option<&[&'a dyn BatchSource]>,
    ) -> Self {
        let sampler = opts.use_distributed_sampler;
        let vals_from_module = vals.is_none() && module.has_val_dataloader();
        let has_vals = vals.is_some_and(|v| !v.is_empty()) || vals_from_module;
        let val_limit = opts.effective_limit(opts.limit_val_batches);
        FitData {
            train: train.map(|t| strategy.shard(t, sampler)),
            vals: vals.unwrap_or_default().iter().map(|v| strategy.shard(*v, sampler)).collect(),
            train_from_module: train.is_none(),
            vals_from_module,
            train_loaded_at: None,
            vals_loaded: false,
            vals_loaded_at: None,
            validating: has_vals && module.has_validation_step() && !val_limit.is_zero(),
            every_n: opts.reload_dataloaders_every_n_epochs,
            sampler,
        }
    }

    /// The training source (loaded by [`FitData::prepare_train`]).
    pub fn train(&self) -> Result<&dyn BatchSource> {
        self.train.as_ref().map(Sharded::get).ok_or_else(|| Error::state("the training data is not loaded yet"))
    }

    /// The validation sources (none when the run does not validate, or
    /// the module's are not loaded yet).
    pub fn vals(&self) -> Vec<&dyn BatchSource> {
        if !self.validating {
            return Vec::new();
        }
        self.vals.iter().map(Sharded::get).collect()
    }

    /// Whether the run validates at all.
    pub fn validating(&self) -> bool {
        self.validating
    }

    /// Whether a source is due for reloading at `epoch`, given the epoch
    /// recorded at its last load (Lightning's `_should_reload_*_dl`; no
    /// epoch recorded counts as long ago).
    fn due(&self, recorded: Option<i64>, epoch: i64) -> bool {
        self.every_n > 0 && recorded.is_none_or(|at| epoch - at >= self.every_n)
    }

    /// Calls the module's `train_dataloader` for `epoch` when it has not
    /// been called yet or a reload is due; returns whether it was called.
    pub fn prepare_train(
        &mut self,
        module: &mut dyn LightningModule,
        strategy: &RunStrategy,
        epoch: i64,
    ) -> Result<bool> {
        let loaded = self.train_loaded_at.is_some();
        if !self.train_from_module || (loaded && !self.due(self.train_loaded_at, epoch)) {
            return Ok(false);
        }
        let source = module.train_dataloader(epoch).ctx(format!("train_dataloader (epoch {epoch})"))?;
        self.train = Some(Sharded::Owned(strategy.shard_owned(source, self.sampler)));
        self.train_loaded_at = Some(epoch);
        Ok(true)
    }

    /// Loads the validation loaders for `epoch` when the run validates
    /// and they were not loaded yet or a reload is due (Lightning's
    /// evaluation `setup_data`): the module's `val_dataloader` is called
    /// again, loaders given to fit are kept as they are. Returns whether
    /// they were (re)loaded. `record` false (a sanity check in an epoch that
    /// does not validate) leaves the reload epoch unrecorded, as
    /// Lightning's evaluation loop does.
    pub fn prepare_vals(
        &mut self,
        module: &mut dyn LightningModule,
        strategy: &RunStrategy,
        epoch: i64,
        record: bool,
    ) -> Result<bool> {
        let due = !self.vals_loaded || self.due(self.vals_loaded_at, epoch);
        if !self.validating || !due {
            return Ok(false);
        }
        if !self.vals_from_module {
            self.vals_loaded = true;
            if record {
                self.vals_loaded_at = Some(epoch);
            }
            return Ok(true);
        }
        let sources = module.val_dataloader(epoch).ctx(format!("val_dataloader (epoch {epoch})"))?;
        if sources.len() > LOADERS_MAX {
            return Err(Error::invalid(format!(
                "val_dataloader (epoch {epoch}) gave {} loaders; at most {LOADERS_MAX}",
                sources.len()
            )));
        }
        self.vals = sources.into_iter().map(|s| Sharded::Owned(strategy.shard_owned(s, self.sampler))).collect();
        self.vals_loaded = true;
        if record {
            self.vals_loaded_at = Some(epoch);
        }
        Ok(true)
    }
}

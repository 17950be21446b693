//! Fully sharded data parallel across real processes on loopback (gloo):
//! this test binary re-executes itself (the ignored `fsdp_rank_main` test)
//! once per rank with torchrun's environment, and compares what the ranks
//! saw with one process training the same global batches; DDP's
//! SyncBatchNorm runs on the same harness.
use fulmen::data::{DataLoader, DataLoaderOptions, TensorDataset};
use fulmen::distributed::JoinOptions;
use fulmen::nn::{Activation, Module, TransformerConfig};
use fulmen::optim::{AdamOptions, AdamW, Lbfgs, LbfgsOptions, Optimizer, Sgd, SgdOptions};
use fulmen::strategies::fsdp::FsdpHostLoop;
use fulmen::trainer::{
    LightningModule, OptimizerConfig, OptimizerSetup, SharedModel, StepContext, Trainer, TrainerOptions,
};
use fulmen::Result;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use tch::{Kind, Tensor};

const SAMPLES: i64 = 48;
const RANK_BATCH: i64 = 4;
const FEATURES: i64 = 6;

/// The models the scenarios train.
#[derive(Clone, Copy, PartialEq)]
enum Kind2 {
    /// `Sequential(Linear, LayerNorm, Sequential(Linear, Tanh) x 3, Linear)`.
    Mlp,
    /// The same with BatchNorm1d in place of the LayerNorm.
    BatchNorm,
    /// The MLP with `Dropout(0.2)` in every block, after its Linear.
    Dropout,
    /// `Sequential(Unflatten(1, [3, 2]), Linear(2, 8),
    /// TransformerEncoderLayer(8, 2, 16) x 2, Flatten, Linear(24, 1))`.
    Transformer,
    /// tests/fixtures/exported_blocks.pt2 (a torch.export program): Linear(6,
    /// 8), three residual Blocks (LayerNorm, Linear, tanh), Linear(8, 1).
    Exported,
}

/// The scenario's model, seeded. With the wrap policy "Sequential" each
/// inner block of the MLPs is a unit (the root owns the rest); with
/// "TransformerEncoderLayer" each encoder layer.
fn model(kind: Kind2) -> Module {
    tch::manual_seed(7);
    if kind == Kind2::Transformer {
        return transformer();
    }
    if kind == Kind2::Exported {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/exported_blocks.pt2");
        return Module::load_exported(&path, tch::Device::Cpu).unwrap();
    }
    let mut root = Module::sequential();
    root.push(Module::linear(FEATURES, 10, true).unwrap()).unwrap();
    if kind == Kind2::BatchNorm {
        root.push(Module::batch_norm(10, 1e-5, 0.1, true, true).unwrap()).unwrap();
    } else {
        root.push(Module::layer_norm(&[10], 1e-5, true).unwrap()).unwrap();
    }
    for _ in 0..3 {
        let mut block = Module::sequential();
        block.push(Module::linear(10, 10, true).unwrap()).unwrap();
        if kind == Kind2::Dropout {
            block.push(Module::dropout(0.2).unwrap()).unwrap();
        }
        block.push(Module::activation(Activation::Tanh)).unwrap();
        root.push(block).unwrap();
    }
    root.push(Module::linear(10, 1, true).unwrap()).unwrap();
    root
}

/// The scenario's model; on the meta device for the `meta` scenarios.
fn built(name: &str, kind: Kind2) -> Module {
    if name.contains("meta") {
        let _scope = fulmen::nn::meta_init::MetaInitScope::new().unwrap();
        let m = model(kind);
        assert!(m.holds_meta());
        return m;
    }
    model(kind)
}

/// Two encoder layers over the 6 features read as 3 tokens of 2.
fn transformer() -> Module {
    let mut root = Module::sequential();
    root.push(Module::unflatten(1, &[3, 2]).unwrap()).unwrap();
    root.push(Module::linear(2, 8, true).unwrap()).unwrap();
    for _ in 0..2 {
        let cfg = TransformerConfig {
            d_model: 8,
            nhead: 2,
            dim_feedforward: 16,
            dropout: 0.0,
            activation: Activation::Relu,
            layer_norm_eps: 1e-5,
            batch_first: true,
            norm_first: false,
            bias: true,
            causal: false,
        };
        root.push(Module::transformer_encoder_layer(cfg).unwrap()).unwrap();
    }
    root.push(Module::flatten(1, -1)).unwrap();
    root.push(Module::linear(24, 1, true).unwrap()).unwrap();
    root
}

/// The parameter whose rows the steps record, and its full rows.
fn probe(kind: Kind2) -> (&'static str, i64) {
    match kind {
        Kind2::Transformer => ("2.linear1.weight", 16),
        Kind2::Exported => ("blocks.0.fc.weight", 8),
        _ => ("2.0.weight", 10),
    }
}

/// The regression, recording every training step's loss.
struct Regression {
    model: SharedModel,
    losses: Vec<f64>,
    /// Rows of the first block's weight as the step found it, before its
    /// forward (10 on one device; its shard's under FSDP).
    block_rows: Vec<i64>,
    /// The same after the forward (FULL_SHARD frees a unit after its
    /// forward: its rows again).
    rows_after_forward: Vec<i64>,
    /// Configure LBFGS (which re-evaluates the loss) instead of AdamW.
    lbfgs: bool,
    /// The parameter whose rows are recorded.
    probe: &'static str,
    /// SGD with this momentum instead of AdamW: attention's key bias (and
    /// a bias before a BatchNorm) has a zero gradient up to rounding, which
    /// AdamW's normalisation would blow up into different weights from
    /// rounding alone. Momentum 0 keeps no per-parameter state.
    sgd: Option<f64>,
}

/// Sleeps 300 ms in rank 1's on_train_start, before the callbacks after
/// it start their clocks: rank 1's clocks run 300 ms behind rank 0's.
struct LateRankOne;

impl fulmen::trainer::Callback for LateRankOne {
    fn name(&self) -> String {
        "LateRankOne".into()
    }
    fn on_hook(&mut self, ctx: &mut fulmen::trainer::HookContext) -> Result<()> {
        if ctx.hook == fulmen::trainer::Hook::TrainStart && std::env::var("RANK").as_deref() == Ok("1") {
            std::thread::sleep(std::time::Duration::from_millis(300));
        }
        Ok(())
    }
}

impl LightningModule for Regression {
    fn model(&self) -> Option<SharedModel> {
        Some(Arc::clone(&self.model))
    }

    fn training_step(&mut self, _ctx: &mut StepContext, batch: &[Tensor]) -> Result<Option<Tensor>> {
        let m = self.model.lock().unwrap();
        let block = m.named_parameters().into_iter().find(|(k, _)| k == self.probe).unwrap().1;
        self.block_rows.push(block.size()[0]);
        drop(m);
        let m = self.model.lock().unwrap();
        let out = m.forward(&batch[0])?;
        let block = m.named_parameters().into_iter().find(|(k, _)| k == self.probe).unwrap().1;
        self.rows_after_forward.push(block.size()[0]);
        drop(m);
        let loss = (out - &batch[1]).square().mean(Kind::Float);
        self.losses.push(loss.double_value(&[]));
        Ok(Some(loss))
    }

    fn predict_step(&mut self, _ctx: &mut StepContext, _batch: &[Tensor]) -> Result<Option<Tensor>> {
        Ok(None)
    }

    fn configure_optimizers(&mut self, _setup: &OptimizerSetup) -> Result<Vec<OptimizerConfig>> {
        let params = self.model.lock().unwrap().parameters();
        if self.lbfgs {
            let lbfgs = Lbfgs::new(params, LbfgsOptions::default())?;
            return Ok(vec![OptimizerConfig::new(Box::new(lbfgs), None)]);
        }
        if let Some(momentum) = self.sgd {
            let sgd = Sgd::new(params, SgdOptions { lr: 0.05, momentum, ..Default::default() })?;
            return Ok(vec![OptimizerConfig::new(Box::new(sgd), None)]);
        }
        let opts = AdamOptions { lr: 0.01, weight_decay: 0.01, ..Default::default() };
        Ok(vec![OptimizerConfig::new(Box::new(AdamW::new(params, opts)?), None)])
    }
}

/// The same samples in every process.
fn loader(batch: i64) -> DataLoader {
    tch::manual_seed(11);
    let opts = (Kind::Float, tch::Device::Cpu);
    let x = Tensor::randn([SAMPLES, FEATURES], opts);
    let y = Tensor::randn([SAMPLES, 1], opts);
    let ds = TensorDataset::new(vec![x, y]).unwrap();
    DataLoader::new(Arc::new(ds), DataLoaderOptions { batch_size: batch as usize, ..Default::default() }).unwrap()
}

/// The same samples reordered so that batches of `batch` follow the
/// distributed sampler's ranks in turn: step k's batch of rank 0, then of
/// rank 1, ... (rank r reads rows r, r + world, ...).
fn interleaved_loader(batch: i64, world: i64) -> DataLoader {
    tch::manual_seed(11);
    let opts = (Kind::Float, tch::Device::Cpu);
    let x = Tensor::randn([SAMPLES, FEATURES], opts);
    let y = Tensor::randn([SAMPLES, 1], opts);
    let mut order = Vec::new();
    for k in 0..SAMPLES / (batch * world) {
        for r in 0..world {
            order.extend((0..batch).map(|j| k * batch * world + r + world * j));
        }
    }
    let idx = Tensor::from_slice(&order);
    let ds = TensorDataset::new(vec![x.index_select(0, &idx), y.index_select(0, &idx)]).unwrap();
    DataLoader::new(Arc::new(ds), DataLoaderOptions { batch_size: batch as usize, ..Default::default() }).unwrap()
}

/// A scenario: its name gives the strategy settings and the trainer options.
struct Scenario {
    settings: Vec<(&'static str, &'static str)>,
    kind: Kind2,
    /// The ranks' strategy: "fsdp", or "ddp" for what the two share.
    strategy: &'static str,
}

/// The FULL_SHARD setting.
fn full_shard() -> (&'static str, &'static str) {
    ("fsdp_sharding_strategy", "FULL_SHARD")
}

fn scenario(name: &str) -> Scenario {
    let full = full_shard();
    let wrap = ("fsdp_auto_wrap_policy", "Sequential");
    let layers = ("fsdp_auto_wrap_policy", "TransformerEncoderLayer");
    let layers_checkpointed = ("fsdp_activation_checkpointing_policy", "TransformerEncoderLayer");
    let mlp = Kind2::Mlp;
    let (settings, kind) = match name {
        "full" => (vec![full, wrap], mlp),
        "grad_op" => (vec![("fsdp_sharding_strategy", "SHARD_GRAD_OP"), wrap], mlp),
        "no_shard" | "host_no_shard" => (vec![("fsdp_sharding_strategy", "NO_SHARD")], mlp),
        "size" => (vec![full, ("fsdp_min_num_params", "100")], mlp),
        "clip_accumulate" | "host_clip_accumulate" => {
            (vec![full, wrap, ("gradient_clip_val", "0.3"), ("accumulate_grad_batches", "2")], mlp)
        }
        "no_shard_clip" => (vec![("fsdp_sharding_strategy", "NO_SHARD"), ("gradient_clip_val", "0.3")], mlp),
        "lbfgs" => (vec![full, wrap], mlp),
        "transformer" | "host_transformer" => (vec![full, layers, ("gradient_clip_val", "0.5")], Kind2::Transformer),
        "batch_norm" => (vec![full, wrap], Kind2::BatchNorm),
        // Every encoder layer's forward run again in backward.
        "checkpointed" => (vec![full, layers, layers_checkpointed, ("gradient_clip_val", "0.5")], Kind2::Transformer),
        // Every unit's gather started ahead in forward and backward, and
        // none: the numbers are the same bit for bit.
        "prefetch" => (
            vec![
                full,
                layers,
                layers_checkpointed,
                ("fsdp_forward_prefetch", "true"),
                ("accumulate_grad_batches", "2"),
            ],
            Kind2::Transformer,
        ),
        "no_prefetch" => (
            vec![
                full,
                layers,
                layers_checkpointed,
                ("fsdp_backward_prefetch", "none"),
                ("accumulate_grad_batches", "2"),
            ],
            Kind2::Transformer,
        ),
        "dropout" => (vec![full, wrap], Kind2::Dropout),
        "dropout_checkpointed" => {
            (vec![full, wrap, ("fsdp_activation_checkpointing_policy", "Sequential")], Kind2::Dropout)
        }
        // DDP with SyncBatchNorm (Lightning's sync_batchnorm).
        "sync_batch_norm" => {
            return Scenario { settings: vec![("sync_batchnorm", "true")], kind: Kind2::BatchNorm, strategy: "ddp" }
        }
        "sync_batch_norm_fsdp" => (vec![full, wrap, ("sync_batchnorm", "true")], Kind2::BatchNorm),
        // DDP with every encoder layer's activations checkpointed (set on
        // the model in train_with: the policy option is FSDP's).
        "checkpointed_ddp" => {
            return Scenario { settings: vec![("gradient_clip_val", "0.5")], kind: Kind2::Transformer, strategy: "ddp" }
        }
        // DDP with StochasticWeightAveraging from epoch 1 of 2 (added in
        // train_with): SWALR and the average of the replicated weights.
        "swa_ddp" => return Scenario { settings: vec![], kind: mlp, strategy: "ddp" },
        // The same layers checkpointed under DDP's search for unused
        // parameters: refused.
        "checkpointed_unused" => {
            return Scenario { settings: vec![], kind: Kind2::Transformer, strategy: "ddp_find_unused_parameters_true" }
        }
        "sharded" => (vec![full, wrap, ("fsdp_state_dict_type", "sharded")], mlp),
        // predict with ckpt_path instead of fit.
        "sharded_predict" => (vec![full, wrap, ("fsdp_state_dict_type", "sharded")], mlp),
        // Block 2's weight under a second name (one tensor, as a tied
        // embedding): the root unit shards it.
        "sharded_tied" => (vec![full, wrap, ("fsdp_state_dict_type", "sharded")], mlp),
        // SGD without momentum: an optimizer state with no per-parameter entry.
        "sharded_sgd" => (vec![full, wrap, ("fsdp_state_dict_type", "sharded")], mlp),
        // Two nodes of two ranks ([`nodes_of`]): sharded within a node,
        // replicated across; clipping by the norm over one node's shards.
        "hybrid" => (
            vec![("fsdp_sharding_strategy", "HYBRID_SHARD"), wrap, ("num_nodes", "2"), ("gradient_clip_val", "0.3")],
            mlp,
        ),
        // The same, saving sharded checkpoints: the first node's ranks
        // write the rows, every node holding the same ones.
        "hybrid_sharded" => (
            vec![
                ("fsdp_sharding_strategy", "HYBRID_SHARD"),
                wrap,
                ("num_nodes", "2"),
                ("gradient_clip_val", "0.3"),
                ("fsdp_state_dict_type", "sharded"),
            ],
            mlp,
        ),
        "hybrid_zero2" => {
            (vec![("fsdp_sharding_strategy", "_HYBRID_SHARD_ZERO2"), layers, ("num_nodes", "2")], Kind2::Transformer)
        }
        // A ModelCheckpoint on a 50 ms clock (added in train_with) and rank
        // 1 starting 300 ms late: the ranks' clocks disagree at the first
        // batch; rank 0's decides for both.
        "timed" => (vec![full, wrap, ("fsdp_state_dict_type", "sharded"), ("ddp_timeout", "60")], mlp),
        // FSDP2's wire ([`wire_rank`]): no synchronisation before
        // sharding; unused parameters given zeros, or (the default) none.
        "wire_zeros" => {
            (vec![("fsdp_sync_module_states", "false"), ("fsdp_reduce_scatter_unused_params", "true")], mlp)
        }
        "wire_flags" => (vec![("fsdp_sync_module_states", "false")], mlp),
        // The host loop of the MLP on FSDP2's wire.
        "host_wire" => (
            vec![
                full,
                wrap,
                ("fsdp_sync_module_states", "false"),
                ("fsdp_reduce_scatter_unused_params", "true"),
                ("accumulate_grad_batches", "2"),
            ],
            mlp,
        ),
        // Units inside a torch.export program: each Block (a ModuleList's
        // items), by class and by size.
        "exported" => (vec![full, ("fsdp_auto_wrap_policy", "Block"), ("gradient_clip_val", "0.3")], Kind2::Exported),
        "exported_sharded" => {
            (vec![full, ("fsdp_auto_wrap_policy", "Block"), ("fsdp_state_dict_type", "sharded")], Kind2::Exported)
        }
        "exported_size" => (vec![full, ("fsdp_min_num_params", "80")], Kind2::Exported),
        "exported_grad_op" => (
            vec![
                ("fsdp_sharding_strategy", "SHARD_GRAD_OP"),
                ("fsdp_auto_wrap_policy", "Block"),
                ("accumulate_grad_batches", "2"),
            ],
            Kind2::Exported,
        ),
        // Built on the meta device ([`built`]): each unit gets its values
        // just before it is sharded; a host loop's in host memory.
        "meta_transformer" | "host_meta" => (vec![full, layers, ("gradient_clip_val", "0.5")], Kind2::Transformer),
        "meta_batch_norm" => (vec![full, wrap], Kind2::BatchNorm),
        _ => panic!("unknown scenario {name}"),
    };
    Scenario { settings, kind, strategy: "fsdp" }
}

/// A run's per-step losses and final weights.
type Trained = (Vec<f64>, Vec<(String, Tensor)>);

/// Trains `epochs` epochs with `strategy` and the scenario's options;
/// returns the per-step losses and the final weights.
fn train(name: &str, strategy: &str, batch: i64, epochs: i64, root: &Path, resume: Option<&str>) -> Trained {
    train_with(name, strategy, batch, epochs, root, resume, None, None).unwrap()
}

/// [`train`], also saving a checkpoint after the run to `save_after`
/// (rank 0), and returning fit's error instead of panicking. With
/// `micro_batches_of` = world, one process trains the ranks' batches of a
/// step as micro-batches of gradient accumulation, in rank order (the
/// reference of a model whose forward depends on its batch: BatchNorm).
#[allow(clippy::too_many_arguments)]
fn train_with(
    name: &str,
    strategy: &str,
    batch: i64,
    epochs: i64,
    root: &Path,
    resume: Option<&str>,
    save_after: Option<&Path>,
    micro_batches_of: Option<i64>,
) -> Result<Trained> {
    // The model's values, its dropout masks and a meta build's replays all
    // come from libtorch's one global generator: one training at a time in
    // this process (the ranks are processes of their own).
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _generator = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let sc = scenario(name);
    let mut o = TrainerOptions::default();
    let epochs = epochs.to_string();
    let root = root.to_string_lossy().to_string();
    let checkpointing = if strategy == "fsdp" { "true" } else { "false" };
    for (k, v) in [
        ("max_epochs", epochs.as_str()),
        ("accelerator", "cpu"),
        ("strategy", strategy),
        ("logger", "false"),
        ("enable_checkpointing", checkpointing),
        ("enable_progress_bar", "false"),
        ("enable_model_summary", "false"),
        ("handle_signals", "false"),
        ("default_root_dir", root.as_str()),
    ] {
        o.set(k, v).unwrap();
    }
    for (k, v) in &sc.settings {
        if strategy == "fsdp" || !(k.starts_with("fsdp_") || *k == "num_nodes") {
            o.set(k, v).unwrap();
        }
    }
    if let Some(world) = micro_batches_of {
        o.set("accumulate_grad_batches", &world.to_string()).unwrap();
    }
    let mut t = Trainer::new(o).unwrap();
    if name == "timed" && strategy == "fsdp" {
        let opts = fulmen::callbacks::ModelCheckpointOptions {
            dirpath: Some(Path::new(&root).join("timed")),
            train_time_interval: Some(0.05),
            save_top_k: -1,
            ..Default::default()
        };
        t.add_callback(Box::new(LateRankOne));
        t.add_callback(Box::new(fulmen::callbacks::ModelCheckpoint::new(opts).unwrap()));
    }
    if name == "swa_ddp" {
        let opts = fulmen::callbacks::StochasticWeightAveragingOptions::new(vec![0.02]);
        t.add_callback(Box::new(fulmen::callbacks::StochasticWeightAveraging::new(opts).unwrap()));
    }
    let mut net = built(name, sc.kind);
    if name == "checkpointed_ddp" || name == "checkpointed_unused" {
        for layer in ["2", "3"] {
            net.set_activation_checkpointing(layer, true).unwrap();
        }
    }
    if name == "sharded_tied" {
        let w = net.state_dict().into_iter().find(|(n, _)| n == "2.0.weight").unwrap().1;
        net.register_parameter_at("4", "tied_weight", &w).unwrap();
    }
    let mut m = Regression {
        model: Arc::new(Mutex::new(net)),
        losses: Vec::new(),
        block_rows: Vec::new(),
        rows_after_forward: Vec::new(),
        lbfgs: name == "lbfgs",
        probe: probe(sc.kind).0,
        // The bias before a BatchNorm has a zero gradient up to rounding,
        // which differs between one process and synchronized ranks.
        sgd: if name == "sharded_sgd" {
            Some(0.0)
        } else {
            (sc.kind == Kind2::Transformer || name.starts_with("sync_batch_norm")).then_some(0.9)
        },
    };
    match micro_batches_of {
        _ if name == "sharded_predict" => {
            t.predict(&mut m, &loader(batch), resume)?;
        }
        Some(world) => {
            t.fit(&mut m, &interleaved_loader(batch, world), None, resume)?;
        }
        None => t.fit(&mut m, &loader(batch), None, resume)?,
    }
    if let Some(path) = save_after.filter(|_| name != "sharded_predict") {
        if std::env::var("RANK").as_deref() == Ok("0") {
            t.save_checkpoint(&mut m, path, false)?;
        }
    }
    let weights = m.model.lock().unwrap().state_dict();
    if strategy == "fsdp" {
        // Between steps a unit's parameters hold this rank's rows only.
        let world: i64 = std::env::var("WORLD_SIZE").unwrap().parse().unwrap();
        // Under a hybrid sharding a unit is sharded across one node's ranks.
        let world = world / nodes_of(name) as i64;
        let sharded = sc.settings.iter().all(|(_, v)| *v != "NO_SHARD");
        let rows = probe(sc.kind).1;
        let want = if sharded { (rows + world - 1) / world } else { rows };
        assert!(m.block_rows.iter().all(|r| *r == want), "{name}: block rows {:?}, want {want}", m.block_rows);
        if sc.kind == Kind2::Exported {
            // A unit inside the program: freed after its forward under
            // FULL_SHARD, kept gathered for backward under SHARD_GRAD_OP.
            let after = if sc.settings.contains(&full_shard()) { want } else { rows };
            assert!(
                m.rows_after_forward.iter().all(|r| *r == after),
                "{name}: rows after the forward {:?}, want {after}",
                m.rows_after_forward
            );
        }
    }
    Ok((m.losses, weights))
}

fn rank_dir(work: &Path, rank: usize) -> PathBuf {
    work.join(format!("rank{rank}"))
}

/// Starts `world` ranks of `name` (each trains `epochs` epochs, resuming
/// from `resume` when given) and waits for them.
fn run_ranks(world: usize, name: &str, work: &Path, epochs: i64, resume: Option<&Path>) {
    run_ranks_with(world, RANK_BATCH, name, work, epochs, resume)
}

/// The nodes a scenario's ranks are spread over (its `num_nodes`).
fn nodes_of(name: &str) -> usize {
    scenario(name).settings.iter().find(|(k, _)| *k == "num_nodes").map_or(1, |(_, v)| v.parse().unwrap())
}

/// [`run_ranks`] with `batch` samples per rank and step.
fn run_ranks_with(world: usize, batch: i64, name: &str, work: &Path, epochs: i64, resume: Option<&Path>) {
    let port = fulmen::distributed::launcher::free_port().unwrap();
    let exe = std::env::current_exe().unwrap();
    let per_node = world / nodes_of(name);
    let children: Vec<_> = (0..world)
        .map(|rank| {
            let mut c = Command::new(&exe);
            c.args(["--ignored", "--exact", "fsdp_rank_main", "--nocapture", "--test-threads=1"])
                .env("FULMEN_TEST_SCENARIO", name)
                .env("FULMEN_TEST_WORK", work)
                .env("FULMEN_TEST_EPOCHS", epochs.to_string())
                .env("FULMEN_TEST_BATCH", batch.to_string())
                .env("RANK", rank.to_string())
                .env("LOCAL_RANK", (rank % per_node).to_string())
                .env("GROUP_RANK", (rank / per_node).to_string())
                .env("WORLD_SIZE", world.to_string())
                .env("LOCAL_WORLD_SIZE", per_node.to_string())
                .env("MASTER_ADDR", "127.0.0.1")
                .env("MASTER_PORT", port.to_string())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            if let Some(r) = resume {
                c.env("FULMEN_TEST_RESUME", r);
            }
            c.spawn().unwrap()
        })
        .collect();
    // Every rank's output, then every failure (a rank that failed first
    // makes the others fail too).
    let mut failed = String::new();
    for (rank, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
        if !(out.status.success() && text.contains("RANK-OK")) {
            failed += &format!("rank {rank} failed:\n{text}\n");
        }
    }
    assert!(failed.is_empty(), "{name}: {failed}");
}

/// One rank: trains and leaves its losses and weights in its folder.
#[test]
#[ignore]
fn fsdp_rank_main() {
    let (Ok(name), Ok(work)) = (std::env::var("FULMEN_TEST_SCENARIO"), std::env::var("FULMEN_TEST_WORK")) else {
        return;
    };
    let rank: usize = std::env::var("RANK").unwrap().parse().unwrap();
    let epochs: i64 = std::env::var("FULMEN_TEST_EPOCHS").unwrap().parse().unwrap();
    let batch: i64 = std::env::var("FULMEN_TEST_BATCH").unwrap().parse().unwrap();
    let resume = std::env::var("FULMEN_TEST_RESUME").ok();
    let dir = rank_dir(Path::new(&work), rank);
    std::fs::create_dir_all(&dir).unwrap();
    let after = Path::new(&work).join("after-run.ckpt");
    let strategy = scenario(&name).strategy;
    if name.starts_with("wire_") {
        wire_rank(&name).unwrap();
        println!("RANK-OK");
        return;
    }
    let trained = if name.starts_with("host_") {
        host_loop(&name, batch, epochs)
    } else {
        train_with(&name, strategy, batch, epochs, Path::new(&work), resume.as_deref(), Some(&after), None)
    };
    if name == "lbfgs" || name == "checkpointed_unused" {
        let e = trained.expect_err("an unsupported run trained");
        assert_eq!(e.code, fulmen::ErrorCode::Unsupported, "{e}");
        let names = if name == "lbfgs" { "fsdp" } else { "find_unused_parameters" };
        assert!(e.message.contains(names), "{e}");
        println!("RANK-OK");
        return;
    }
    let (losses, weights) = trained.unwrap();
    let text: Vec<String> = losses.iter().map(|l| format!("{l:.17e}")).collect();
    std::fs::write(dir.join("losses.txt"), text.join("\n")).unwrap();
    Tensor::write_npz(&weights, dir.join("weights.npz")).unwrap();
    println!("RANK-OK");
}

/// The scenario's training as a host-owned loop on [`FsdpHostLoop`]
/// (`fulmen_fsdp`): the trainer's model, batches, optimizer, gradient
/// accumulation (`set_sync(false)` on the micro-batches that do not step)
/// and clipping, driven by hand.
fn host_loop(name: &str, batch: i64, epochs: i64) -> Result<Trained> {
    let sc = scenario(name);
    let setting = |k: &str| sc.settings.iter().find(|(key, _)| *key == k).map(|(_, v)| *v);
    let mut spec = fulmen::strategies::lookup("fsdp")?;
    for (k, v) in &sc.settings {
        if let Some(key) = k.strip_prefix("fsdp_") {
            spec.set(key, v)?;
        }
    }
    let rank: usize = std::env::var("RANK").unwrap().parse().unwrap();
    let world: usize = std::env::var("WORLD_SIZE").unwrap().parse().unwrap();
    let join = JoinOptions { devices_per_node: world, ..Default::default() };
    let ctx = fulmen::distributed::join(&join)?;
    let model: SharedModel = Arc::new(Mutex::new(built(name, sc.kind)));
    let mut fsdp = FsdpHostLoop::new(ctx, Arc::clone(&model), &spec)?;
    let params = model.lock().unwrap().parameters();
    let mut opt: Box<dyn Optimizer> = if sc.kind == Kind2::Transformer {
        Box::new(Sgd::new(params, SgdOptions { lr: 0.05, momentum: 0.9, ..Default::default() })?)
    } else {
        Box::new(AdamW::new(params, AdamOptions { lr: 0.01, weight_decay: 0.01, ..Default::default() })?)
    };
    let accumulate: usize = setting("accumulate_grad_batches").map_or(1, |v| v.parse().unwrap());
    let clip: Option<f64> = setting("gradient_clip_val").map(|v| v.parse().unwrap());
    let (probe_name, rows) = probe(sc.kind);
    let sharded = sc.settings.iter().all(|(_, v)| *v != "NO_SHARD");
    let shard_rows = if sharded { (rows + world as i64 - 1) / world as i64 } else { rows };
    let data = loader(batch).sharded(rank, world)?;
    let mut losses = Vec::new();
    for epoch in 0..epochs as u64 {
        for i in 0..data.len() {
            let b = data.get(epoch, i)?;
            let steps = (i + 1) % accumulate == 0 || i + 1 == data.len();
            fsdp.set_sync(steps)?;
            fsdp.prepare_forward(true)?;
            let m = model.lock().unwrap();
            let probe_rows = m.named_parameters().into_iter().find(|(k, _)| k == probe_name).unwrap().1.size()[0];
            assert_eq!(probe_rows, shard_rows, "{name}: the probe holds this rank's rows between steps");
            let out = m.forward(&b[0])?;
            drop(m);
            let loss = (out - &b[1]).square().mean(Kind::Float);
            losses.push(loss.double_value(&[]));
            (loss / accumulate as f64).backward();
            if steps && epoch == 0 && i + 1 == accumulate {
                // A forgotten finish_backward is refused, under every sharding.
                let e = fsdp.prepare_forward(true).expect_err("a step began before the gradients were averaged");
                assert_eq!(e.code, fulmen::ErrorCode::InvalidState, "{e}");
            }
            fsdp.finish_backward()?;
            if steps {
                if let Some(max_norm) = clip {
                    fsdp.clip_grad_norm(max_norm)?;
                }
                opt.step()?;
                fsdp.zero_grad(true)?;
            }
        }
    }
    fsdp.unshard(&mut [opt.as_mut()])?;
    drop(fsdp);
    let weights = model.lock().unwrap().state_dict();
    Ok((losses, weights))
}

/// One rank of the `wire_*` scenarios: a model `{net: Linear(6, 4),
/// unused: Linear(6, 4)}` seeded per rank, one unit (the root), sharded
/// with `fsdp_sync_module_states` false, then one step through `net`
/// only. Each rank keeps the rows of its own initial weights (nothing was
/// copied from rank 0); `net.weight`'s gradient is the average over the
/// ranks; `unused`'s are zeros with `fsdp_reduce_scatter_unused_params`
/// and none without; the frozen `net.bias` gets none either way.
fn wire_rank(name: &str) -> Result<()> {
    let zeros = name == "wire_zeros";
    let mut spec = fulmen::strategies::lookup("fsdp")?;
    for (k, v) in &scenario(name).settings {
        spec.set(k.strip_prefix("fsdp_").unwrap(), v)?;
    }
    let rank: usize = std::env::var("RANK").unwrap().parse().unwrap();
    let world: usize = std::env::var("WORLD_SIZE").unwrap().parse().unwrap();
    let ctx = fulmen::distributed::join(&JoinOptions { devices_per_node: world, ..Default::default() })?;
    tch::manual_seed(100 + rank as i64);
    let mut root = Module::named();
    root.add("net", Module::linear(FEATURES, 4, true)?)?;
    root.add("unused", Module::linear(FEATURES, 4, true)?)?;
    let initial: Vec<(String, Tensor)> = root.named_parameters().into_iter().map(|(k, t)| (k, t.copy())).collect();
    // Frozen in the middle: the parameters after it are carried at the
    // right offsets.
    let frozen = root.named_parameters().into_iter().find(|(k, _)| k == "net.bias").unwrap().1;
    let _ = frozen.shallow_clone().set_requires_grad(false);
    let model: SharedModel = Arc::new(Mutex::new(root));
    let mut fsdp = FsdpHostLoop::new(ctx, Arc::clone(&model), &spec)?;
    // Each rank's shards are the rows of its own initial values.
    for ((k, shard), (_, start)) in model.lock().unwrap().named_parameters().iter().zip(&initial) {
        let rows = shard.size()[0];
        let first = rank as i64 * rows;
        let real = (start.size()[0] - first).clamp(0, rows);
        let want = start.narrow(0, first.min(start.size()[0]), real);
        assert!(shard.narrow(0, 0, real).equal(&want), "{name} rank {rank}: {k} is not this rank's own rows");
    }
    let x = Tensor::ones([2, FEATURES], (Kind::Float, tch::Device::Cpu)) * (rank as f64 + 1.0);
    fsdp.prepare_forward(true)?;
    let out = model.lock().unwrap().forward_child("net", &x)?;
    out.sum(Kind::Float).backward();
    fsdp.finish_backward()?;
    let grads: Vec<(String, Tensor)> =
        model.lock().unwrap().named_parameters().into_iter().map(|(k, p)| (k, p.grad())).collect();
    for (k, g) in &grads {
        match k.as_str() {
            // d(sum(x W^T + b))/dW = the column sums of x: 2 (rank + 1) per
            // rank, averaged over the ranks.
            "net.weight" => {
                let want = 2.0 * (1..=world).sum::<usize>() as f64 / world as f64;
                assert!(g.defined(), "{name}: {k} has no gradient");
                let diff = (g - want).abs().max().double_value(&[]);
                assert!(diff < 1e-6, "{name} rank {rank}: {k} gradient off by {diff}");
            }
            "unused.weight" | "unused.bias" if zeros => {
                assert!(g.defined(), "{name}: {k} got no gradient");
                assert_eq!(g.abs().max().double_value(&[]), 0.0, "{name}: {k}");
            }
            _ => assert!(!g.defined(), "{name}: {k} got a gradient"),
        }
    }
    drop(fsdp);
    Ok(())
}

fn read_losses(dir: &Path) -> Vec<f64> {
    std::fs::read_to_string(dir.join("losses.txt")).unwrap().lines().map(|l| l.parse().unwrap()).collect()
}

fn read_weights(dir: &Path) -> Vec<(String, Tensor)> {
    Tensor::read_npz(dir.join("weights.npz")).unwrap()
}

fn assert_close(what: &str, a: f64, b: f64, rel: f64) {
    assert!((a - b).abs() <= rel * a.abs().max(b.abs()).max(1e-3), "{what}: {a} vs {b}");
}

/// The ranks' mean loss per step equals one process's loss on the global
/// batch, and every rank ends with the weights of that process.
fn check_against_one_process(name: &str, world: usize) {
    let work = tempdir(&format!("fsdp-{name}-{world}"));
    let epochs = 2;
    run_ranks(world, name, &work, epochs, None);
    let global = RANK_BATCH * world as i64;
    let reference_dir = work.join("reference");
    let (ref_losses, ref_weights) = train(name, "auto", global, epochs, &reference_dir, None);
    let ranks: Vec<Vec<f64>> = (0..world).map(|r| read_losses(&rank_dir(&work, r))).collect();
    assert_eq!(ranks[0].len(), ref_losses.len(), "{name}: steps");
    for (step, want) in ref_losses.iter().enumerate() {
        let mean = ranks.iter().map(|l| l[step]).sum::<f64>() / world as f64;
        assert_close(&format!("{name} world {world} step {step} loss"), mean, *want, 1e-6);
    }
    for r in 0..world {
        let weights = read_weights(&rank_dir(&work, r));
        assert_eq!(weights.len(), ref_weights.len());
        for ((k, w), (rk, rw)) in weights.iter().zip(&ref_weights) {
            assert_eq!(k, rk);
            assert_eq!(w.size(), rw.size(), "{name}: {k} shape");
            let diff = (w - rw).abs().max().double_value(&[]);
            assert!(diff < 1e-5, "{name} world {world} rank {r}: {k} differs by {diff}");
        }
    }
    let _ = std::fs::remove_dir_all(&work);
}

fn tempdir(name: &str) -> PathBuf {
    let base = std::env::var_os("CARGO_TARGET_TMPDIR").map(PathBuf::from).unwrap_or_else(std::env::temp_dir);
    let dir = base.join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn full_shard_on_two_ranks_equals_one_process() {
    check_against_one_process("full", 2);
}

#[test]
fn units_inside_an_exported_program_equal_one_process() {
    check_against_one_process("exported", 2);
    check_against_one_process("exported_size", 2);
    check_against_one_process("exported_grad_op", 2);
}

#[test]
fn full_shard_on_four_ranks_equals_one_process() {
    check_against_one_process("full", 4);
}

#[test]
fn shard_grad_op_and_no_shard_equal_one_process() {
    check_against_one_process("grad_op", 2);
    check_against_one_process("no_shard", 2);
}

#[test]
fn the_size_policy_equals_one_process() {
    check_against_one_process("size", 3);
}

#[test]
fn clipping_and_accumulation_equal_one_process() {
    check_against_one_process("clip_accumulate", 2);
}

/// A host-owned loop on `fulmen_fsdp`'s core trains as the trainer's
/// one process does: accumulation without communication, clipping by the
/// norm over the shards, the model whole after unshard.
#[test]
fn a_model_built_on_the_meta_device_trains_as_the_eager_build() {
    // One process: materialized as the strategy places it, the very run
    // of the eager build.
    let work = tempdir("fsdp-meta");
    for (eager, meta) in [("transformer", "meta_transformer"), ("batch_norm", "meta_batch_norm")] {
        let (eager_losses, eager_weights) = train(eager, "auto", 8, 2, &work.join(eager), None);
        let (meta_losses, meta_weights) = train(meta, "auto", 8, 2, &work.join(meta), None);
        assert_eq!(eager_losses, meta_losses, "{meta}");
        for ((k, a), (_, b)) in eager_weights.iter().zip(&meta_weights) {
            assert!(a.equal(b), "{meta}: {k}");
        }
    }
    let _ = std::fs::remove_dir_all(&work);
    // Ranks: each unit's values made just before it is sharded, from the
    // trainer and from a host loop.
    check_against_one_process("meta_transformer", 2);
    check_against_one_process("host_meta", 2);
}

#[test]
fn a_host_loop_equals_one_process() {
    check_against_one_process("host_clip_accumulate", 2);
    check_against_one_process("host_transformer", 3);
    check_against_one_process("host_no_shard", 2);
}

/// FSDP2's wire settings: without the synchronisation each rank keeps
/// its own initial values; an unused parameter gets a zero gradient with
/// `reduce_scatter_unused_params` and none without (a frozen one none
/// either way); the MLP's host loop on that wire equals one process.
#[test]
fn fsdp2_wire_settings_do_what_they_say() {
    for name in ["wire_zeros", "wire_flags"] {
        let work = tempdir(&format!("fsdp-{name}"));
        run_ranks(2, name, &work, 1, None);
        let _ = std::fs::remove_dir_all(&work);
    }
    check_against_one_process("host_wire", 2);
}

/// The checkpoints under `dir`: files, and sharded checkpoint directories.
fn checkpoints(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.join(".metadata").is_file() {
            out.push(p);
        } else if p.is_dir() {
            out.extend(checkpoints(&p));
        } else if p.extension().is_some_and(|x| x == "ckpt") {
            out.push(p);
        }
    }
    out
}

#[test]
fn a_resume_from_a_gathered_checkpoint_equals_the_uninterrupted_run() {
    let work = tempdir("fsdp-resume");
    let (whole, first, resumed) = (work.join("whole"), work.join("first"), work.join("resumed"));
    run_ranks(2, "full", &whole, 2, None);
    run_ranks(2, "full", &first, 1, None);
    let ckpt = checkpoints(&first.join("checkpoints"));
    assert_eq!(ckpt.len(), 1, "{ckpt:?}");
    run_ranks(2, "full", &resumed, 2, Some(&ckpt[0]));
    // The checkpoint rank 0 saved after the run (the model whole again,
    // the optimizer's state gathered at teardown) resumes the same way.
    let after_run = work.join("after");
    run_ranks(2, "full", &after_run, 2, Some(&first.join("after-run.ckpt")));
    for r in 0..2 {
        let a = read_weights(&rank_dir(&whole, r));
        for run in [&resumed, &after_run] {
            let b = read_weights(&rank_dir(run, r));
            for ((k, x), (_, y)) in a.iter().zip(&b) {
                let diff = (x - y).abs().max().double_value(&[]);
                assert!(diff == 0.0, "rank {r}: {k} differs by {diff} after the resume from {}", run.display());
            }
        }
    }
    let _ = std::fs::remove_dir_all(&work);
}

/// A sharded checkpoint (each rank writes its shards, torch's
/// distributed checkpoint layout) resumes the run exactly on the same
/// ranks, and on two ranks when four wrote it (the same global batches:
/// four ranks of 2 samples, two of 4).
#[test]
fn a_sharded_checkpoint_resumes_exactly_and_on_another_world_size() {
    let work = tempdir("fsdp-sharded");
    let (whole, first, resumed) = (work.join("whole"), work.join("first"), work.join("resumed"));
    run_ranks(2, "sharded", &whole, 2, None);
    run_ranks(2, "sharded", &first, 1, None);
    let ckpt = checkpoints(&first.join("checkpoints"));
    assert_eq!(ckpt.len(), 1, "{ckpt:?}");
    let files: Vec<String> =
        std::fs::read_dir(&ckpt[0]).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into()).collect();
    for f in [".metadata", "meta.pt", "__0_0.distcp", "__1_0.distcp"] {
        assert!(files.iter().any(|x| x == f), "{f} missing from {files:?}");
    }
    run_ranks(2, "sharded", &resumed, 2, Some(&ckpt[0]));
    let (four, from_four) = (work.join("four"), work.join("from-four"));
    run_ranks_with(4, RANK_BATCH / 2, "sharded", &four, 1, None);
    let ckpt4 = checkpoints(&four.join("checkpoints"));
    assert_eq!(ckpt4.len(), 1, "{ckpt4:?}");
    run_ranks(2, "sharded", &from_four, 2, Some(&ckpt4[0]));
    for r in 0..2 {
        let a = read_weights(&rank_dir(&whole, r));
        let same = read_weights(&rank_dir(&resumed, r));
        let other = read_weights(&rank_dir(&from_four, r));
        for (((k, x), (_, y)), (_, z)) in a.iter().zip(&same).zip(&other) {
            let diff = (x - y).abs().max().double_value(&[]);
            assert!(diff == 0.0, "rank {r}: {k} differs by {diff} after the resume on the same ranks");
            let diff = (x - z).abs().max().double_value(&[]);
            assert!(diff < 1e-5, "rank {r}: {k} differs by {diff} after the resume of four ranks' checkpoint");
        }
    }
    let _ = std::fs::remove_dir_all(&work);
}

/// Units inside an exported program resume exactly from the run's sharded
/// checkpoint and from the full one saved after it.
#[test]
fn units_inside_an_exported_program_resume_exactly() {
    let work = tempdir("fsdp-exported-resume");
    let (whole, first, resumed) = (work.join("whole"), work.join("first"), work.join("resumed"));
    run_ranks(2, "exported_sharded", &whole, 2, None);
    run_ranks(2, "exported_sharded", &first, 1, None);
    let ckpt = checkpoints(&first.join("checkpoints"));
    assert_eq!(ckpt.len(), 1, "{ckpt:?}");
    assert!(ckpt[0].join(".metadata").is_file(), "{ckpt:?} is not a sharded checkpoint");
    run_ranks(2, "exported_sharded", &resumed, 2, Some(&ckpt[0]));
    let after_run = work.join("after");
    run_ranks(2, "exported_sharded", &after_run, 2, Some(&first.join("after-run.ckpt")));
    for r in 0..2 {
        let a = read_weights(&rank_dir(&whole, r));
        for run in [&resumed, &after_run] {
            let b = read_weights(&rank_dir(run, r));
            assert_eq!(a.len(), b.len());
            for ((k, x), (_, y)) in a.iter().zip(&b) {
                let diff = (x - y).abs().max().double_value(&[]);
                assert!(diff == 0.0, "rank {r}: {k} differs by {diff} after the resume from {}", run.display());
            }
        }
    }
    let _ = std::fs::remove_dir_all(&work);
}

/// A ModelCheckpoint's time trigger fires on rank 0's clock on every rank
/// (Lightning broadcasts it): every save gathers on all ranks, so a rank
/// deciding alone would leave the others waiting.
#[test]
fn a_time_triggered_checkpoint_is_decided_by_rank_zero() {
    let work = tempdir("fsdp-timed");
    let (timed, plain) = (work.join("timed-run"), work.join("plain"));
    run_ranks(2, "timed", &timed, 2, None);
    assert!(!checkpoints(&timed.join("timed")).is_empty());
    // Saving changed nothing in the training.
    run_ranks(2, "sharded", &plain, 2, None);
    for r in 0..2 {
        for ((k, x), (_, y)) in read_weights(&rank_dir(&timed, r)).iter().zip(&read_weights(&rank_dir(&plain, r))) {
            let diff = (x - y).abs().max().double_value(&[]);
            assert!(diff == 0.0, "rank {r}: {k} differs by {diff} from the run without time-triggered saves");
        }
    }
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn hybrid_shard_on_two_nodes_equals_one_process() {
    check_against_one_process("hybrid", 4);
    check_against_one_process("hybrid_zero2", 4);
}

#[test]
fn a_hybrid_run_resumes_from_its_gathered_checkpoint_exactly() {
    let work = tempdir("fsdp-hybrid-resume");
    let (whole, first, resumed) = (work.join("whole"), work.join("first"), work.join("resumed"));
    run_ranks(4, "hybrid", &whole, 2, None);
    run_ranks(4, "hybrid", &first, 1, None);
    let ckpt = checkpoints(&first.join("checkpoints"));
    assert_eq!(ckpt.len(), 1, "{ckpt:?}");
    run_ranks(4, "hybrid", &resumed, 2, Some(&ckpt[0]));
    for r in 0..4 {
        let (a, b) = (read_weights(&rank_dir(&whole, r)), read_weights(&rank_dir(&resumed, r)));
        for ((k, x), (_, y)) in a.iter().zip(&b) {
            let diff = (x - y).abs().max().double_value(&[]);
            assert!(diff == 0.0, "rank {r}: {k} differs by {diff} after the resume");
        }
    }
    let _ = std::fs::remove_dir_all(&work);
}

/// Under HYBRID_SHARD a sharded checkpoint holds each row once (written
/// by the first node's ranks; the second node's files hold none) and
/// resumes the hybrid run exactly.
#[test]
fn a_hybrid_run_resumes_from_its_sharded_checkpoint_exactly() {
    let work = tempdir("fsdp-hybrid-sharded");
    let (whole, first, resumed) = (work.join("whole"), work.join("first"), work.join("resumed"));
    run_ranks(4, "hybrid_sharded", &whole, 2, None);
    run_ranks(4, "hybrid_sharded", &first, 1, None);
    let ckpt = checkpoints(&first.join("checkpoints"));
    assert_eq!(ckpt.len(), 1, "{ckpt:?}");
    let size = |r: usize| std::fs::metadata(ckpt[0].join(format!("__{r}_0.distcp"))).map(|m| m.len()).unwrap_or(0);
    assert!(
        size(1) > 0 && size(2) < size(1) / 4 && size(3) < size(1) / 4,
        "{:?}",
        (0..4).map(size).collect::<Vec<_>>()
    );
    run_ranks(4, "hybrid_sharded", &resumed, 2, Some(&ckpt[0]));
    for r in 0..4 {
        let (a, b) = (read_weights(&rank_dir(&whole, r)), read_weights(&rank_dir(&resumed, r)));
        for ((k, x), (_, y)) in a.iter().zip(&b) {
            let diff = (x - y).abs().max().double_value(&[]);
            assert!(diff == 0.0, "rank {r}: {k} differs by {diff} after the resume");
        }
    }
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn no_shard_clips_by_the_replicated_norm() {
    check_against_one_process("no_shard_clip", 2);
}

#[test]
fn an_optimizer_that_re_evaluates_the_loss_is_refused() {
    let work = tempdir("fsdp-lbfgs");
    run_ranks(2, "lbfgs", &work, 1, None);
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn an_encoder_stack_on_two_ranks_equals_one_process() {
    check_against_one_process("transformer", 2);
}

/// SyncBatchNorm: two DDP (then FSDP) ranks normalise over their joint
/// batch, so their
/// losses, weights and running statistics are those of one process on the
/// global batch.
#[test]
fn sync_batch_norm_on_two_ranks_equals_one_process() {
    check_against_one_process("sync_batch_norm", 2);
    check_against_one_process("sync_batch_norm_fsdp", 2);
}

#[test]
fn checkpointed_encoder_layers_on_two_ranks_equal_one_process() {
    check_against_one_process("checkpointed", 2);
}

/// DDP's reducer over encoder layers whose activations are recomputed in
/// backward (torch's non-reentrant checkpoint, where every parameter's
/// gradient hook still fires once): the ranks equal one process.
#[test]
fn checkpointed_layers_under_ddp_equal_one_process() {
    check_against_one_process("checkpointed_ddp", 2);
}

/// DDP's search for unused parameters cannot see inside a checkpointed
/// module: refused before the first step.
#[test]
fn checkpointed_layers_under_ddp_searching_unused_parameters_are_refused() {
    let work = tempdir("ddp-checkpointed-unused");
    run_ranks(2, "checkpointed_unused", &work, 1, None);
    let _ = std::fs::remove_dir_all(&work);
}

/// StochasticWeightAveraging under DDP: SWALR, and an average of weights
/// the ranks share, so every rank ends with one process's average.
#[test]
fn stochastic_weight_averaging_under_ddp_equals_one_process() {
    check_against_one_process("swa_ddp", 2);
}

/// Gathering the next unit ahead (forward and backward, with recomputed
/// checkpointed layers and accumulation) changes no number: every rank's
/// losses and weights equal those of the run that gathers each unit when
/// it runs, bit for bit.
#[test]
fn prefetching_changes_no_number() {
    let work = tempdir("fsdp-prefetch");
    let (ahead, plain) = (work.join("ahead"), work.join("plain"));
    run_ranks(2, "prefetch", &ahead, 2, None);
    run_ranks(2, "no_prefetch", &plain, 2, None);
    for r in 0..2 {
        let (a, b) = (read_losses(&rank_dir(&ahead, r)), read_losses(&rank_dir(&plain, r)));
        assert!(!a.is_empty() && a.len() == b.len(), "rank {r}: {} and {} steps", a.len(), b.len());
        for (step, (x, y)) in a.iter().zip(&b).enumerate() {
            assert_eq!(x.to_bits(), y.to_bits(), "rank {r} step {step}: loss {x} with prefetch, {y} without");
        }
    }
    assert_same_weights(&ahead, &plain, 2, 0.0, "with and without prefetch");
    let _ = std::fs::remove_dir_all(&work);
}

/// Every rank of the runs in `a` and `b` ends with the same weights, within
/// `tol` (0: bit for bit).
fn assert_same_weights(a: &Path, b: &Path, world: usize, tol: f64, what: &str) {
    for r in 0..world {
        let (x, y) = (read_weights(&rank_dir(a, r)), read_weights(&rank_dir(b, r)));
        assert_eq!(x.len(), y.len(), "{what}: rank {r}'s weights");
        for ((k, v), (_, w)) in x.iter().zip(&y) {
            let diff = (v - w).abs().max().double_value(&[]);
            assert!(diff <= tol, "{what}: rank {r}'s {k} differs by {diff}");
        }
    }
}

/// The one checkpoint a run left in `dir`.
fn only_checkpoint(dir: &Path) -> PathBuf {
    let ckpt = checkpoints(dir);
    assert_eq!(ckpt.len(), 1, "{ckpt:?}");
    ckpt.into_iter().next().unwrap()
}

/// `predict` with a sharded checkpoint as `ckpt_path` under fsdp reads it
/// rank-locally into the shards: the model ends with the checkpoint's
/// weights, from a checkpoint of as many ranks and of four.
#[test]
fn predict_loads_a_sharded_checkpoint_rank_locally() {
    let work = tempdir("fsdp-sharded-predict");
    let (two, four) = (work.join("two"), work.join("four"));
    run_ranks(2, "sharded", &two, 1, None);
    run_ranks_with(4, RANK_BATCH / 2, "sharded", &four, 1, None);
    for (trained, what) in [(&two, "two ranks'"), (&four, "four ranks'")] {
        let predicted = work.join(format!("predicted-{}", trained.file_name().unwrap().to_string_lossy()));
        run_ranks(2, "sharded_predict", &predicted, 1, Some(&only_checkpoint(&trained.join("checkpoints"))));
        assert_same_weights(trained, &predicted, 2, 0.0, &format!("predict from {what} checkpoint"));
    }
    let _ = std::fs::remove_dir_all(&work);
}

/// A parameter under two names (tied) is sharded under both in a sharded
/// checkpoint, and a checkpoint of four ranks resumes on two, each rank
/// reading its own rows under either name.
#[test]
fn a_sharded_checkpoint_of_a_tied_parameter_resumes_on_another_world_size() {
    let work = tempdir("fsdp-sharded-tied");
    let (whole, four, from_four) = (work.join("whole"), work.join("four"), work.join("from-four"));
    run_ranks(2, "sharded_tied", &whole, 2, None);
    run_ranks_with(4, RANK_BATCH / 2, "sharded_tied", &four, 1, None);
    run_ranks(2, "sharded_tied", &from_four, 2, Some(&only_checkpoint(&four.join("checkpoints"))));
    assert!(read_weights(&rank_dir(&whole, 0)).iter().any(|(k, _)| k == "4.tied_weight"), "no tied name");
    assert_same_weights(&whole, &from_four, 2, 1e-5, "the resume of four ranks' checkpoint");
    let _ = std::fs::remove_dir_all(&work);
}

/// An optimizer without per-parameter state (SGD without momentum) saves
/// its param groups alone in a sharded checkpoint (torch keeps no leaf of
/// an empty dict), and the run resumes from it exactly.
#[test]
fn a_sharded_checkpoint_of_an_optimizer_without_state_resumes_exactly() {
    let work = tempdir("fsdp-sharded-sgd");
    let (whole, first, resumed) = (work.join("whole"), work.join("first"), work.join("resumed"));
    run_ranks(2, "sharded_sgd", &whole, 2, None);
    run_ranks(2, "sharded_sgd", &first, 1, None);
    run_ranks(2, "sharded_sgd", &resumed, 2, Some(&only_checkpoint(&first.join("checkpoints"))));
    assert_same_weights(&whole, &resumed, 2, 0.0, "the resume");
    let _ = std::fs::remove_dir_all(&work);
}

/// The blocks' forwards run again in backward draw the dropout masks of
/// their first run: every rank's losses and weights equal those of the
/// same job without checkpointing, bit for bit.
#[test]
fn checkpointed_blocks_with_dropout_equal_the_plain_run_exactly() {
    let work = tempdir("fsdp-dropout");
    let (plain, checkpointed) = (work.join("plain"), work.join("checkpointed"));
    run_ranks(2, "dropout", &plain, 2, None);
    run_ranks(2, "dropout_checkpointed", &checkpointed, 2, None);
    for r in 0..2 {
        let (a, b) = (read_losses(&rank_dir(&plain, r)), read_losses(&rank_dir(&checkpointed, r)));
        assert!(!a.is_empty() && a.len() == b.len(), "rank {r}: {} and {} steps", a.len(), b.len());
        for (step, (x, y)) in a.iter().zip(&b).enumerate() {
            assert_eq!(x.to_bits(), y.to_bits(), "rank {r} step {step}: loss {x} plain, {y} checkpointed");
        }
        for ((k, w), (_, v)) in
            read_weights(&rank_dir(&plain, r)).iter().zip(&read_weights(&rank_dir(&checkpointed, r)))
        {
            assert!(w.equal(v), "rank {r}: {k} differs");
        }
    }
    let _ = std::fs::remove_dir_all(&work);
}

/// BatchNorm normalises each rank's batch: one process training the ranks'
/// batches as micro-batches gives every rank's losses and the same weights.
#[test]
fn batch_norm_on_two_ranks_equals_micro_batches_of_one_process() {
    let world = 2;
    let work = tempdir("fsdp-batch-norm");
    run_ranks(world, "batch_norm", &work, 2, None);
    let reference = work.join("reference");
    let (losses, ref_weights) =
        train_with("batch_norm", "auto", RANK_BATCH, 2, &reference, None, None, Some(world as i64)).unwrap();
    for r in 0..world {
        let got = read_losses(&rank_dir(&work, r));
        let want: Vec<f64> = losses.iter().skip(r).step_by(world).copied().collect();
        assert_eq!(got.len(), want.len());
        for (step, (a, b)) in got.iter().zip(&want).enumerate() {
            assert_close(&format!("batch_norm rank {r} step {step} loss"), *a, *b, 1e-6);
        }
        // The parameters (each rank keeps its own running statistics).
        let weights = read_weights(&rank_dir(&work, r));
        for ((k, w), (_, rw)) in weights.iter().zip(&ref_weights) {
            if k.contains("running_") || k.contains("num_batches") {
                continue;
            }
            let diff = (w - rw).abs().max().double_value(&[]);
            assert!(diff < 1e-5, "batch_norm rank {r}: {k} differs by {diff}");
        }
    }
    let _ = std::fs::remove_dir_all(&work);
}

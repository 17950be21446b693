//! Tensor parallelism across real processes on loopback (gloo): this test
//! binary re-executes itself (the ignored `tp_rank_main` test) once per
//! rank with torchrun's environment; every rank trains the same batches
//! through a model whose layers are split across the ranks, and its losses,
//! full weights and optimizer state after `unshard` equal one process
//! training the plain model.
use fulmen::checkpoint::io::CheckpointIo;
use fulmen::data::{DataLoader, DataLoaderOptions, TensorDataset};
use fulmen::distributed::JoinOptions;
use fulmen::nn::{Activation, Module, ParallelStyle};
use fulmen::optim::{AdamOptions, AdamW, Optimizer};
use fulmen::strategies::model_parallel::TensorParallel;
use fulmen::trainer::{
    LightningModule, OptimizerConfig, OptimizerSetup, SharedModel, StepContext, Trainer, TrainerOptions,
};
use fulmen::{ErrorCode, Result};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tch::{Kind, Tensor};

const VOCAB: i64 = 16;
const STEPS: usize = 6;
const MORE_STEPS: usize = 2;
const MAX_NORM: f64 = 0.5;

/// `Sequential(Embedding(16, 8, padding_idx=3), Linear(8, 12), Tanh,
/// Linear(12, 8), LayerNorm(8), Linear(8, 16))`, seeded.
fn mlp() -> Module {
    tch::manual_seed(11);
    let mut m = Module::sequential();
    m.push(Module::embedding_padded(VOCAB, 8, 3).unwrap()).unwrap();
    m.push(Module::linear(8, 12, true).unwrap()).unwrap();
    m.push(Module::activation(Activation::Tanh)).unwrap();
    m.push(Module::linear(12, 8, true).unwrap()).unwrap();
    m.push(Module::layer_norm(&[8], 1e-5, true).unwrap()).unwrap();
    m.push(Module::linear(8, VOCAB, false).unwrap()).unwrap();
    m
}

/// `Sequential(Embedding(16, 8), Linear(8, 12), Tanh, Linear(12, 16))`,
/// seeded: the embedding's columns feed a row-split Linear.
fn columns() -> Module {
    tch::manual_seed(12);
    let mut m = Module::sequential();
    m.push(Module::embedding(VOCAB, 8).unwrap()).unwrap();
    m.push(Module::linear(8, 12, false).unwrap()).unwrap();
    m.push(Module::activation(Activation::Tanh)).unwrap();
    m.push(Module::linear(12, VOCAB, true).unwrap()).unwrap();
    m
}

/// Sizes that do not divide by 2 or 4 ranks (torch.chunk's parts, as
/// DTensor cuts them: 17 rows as 9 + 8 or 5 + 5 + 5 + 2, 9 columns over 4
/// ranks as 3 + 3 + 3 + 0): `Sequential(Embedding(17, 7), Linear(7, 10),
/// Tanh, Linear(10, 9), Linear(9, 11), Linear(11, 16))` and
/// `Sequential(Embedding(16, 9), Linear(9, 16))`, seeded.
fn uneven(columns: bool) -> Module {
    tch::manual_seed(13);
    let mut m = Module::sequential();
    if columns {
        m.push(Module::embedding(VOCAB, 9).unwrap()).unwrap();
        m.push(Module::linear(9, VOCAB, true).unwrap()).unwrap();
        return m;
    }
    m.push(Module::embedding(VOCAB + 1, 7).unwrap()).unwrap();
    m.push(Module::linear(7, 10, true).unwrap()).unwrap();
    m.push(Module::activation(Activation::Tanh)).unwrap();
    m.push(Module::linear(10, 9, true).unwrap()).unwrap();
    m.push(Module::linear(9, 11, true).unwrap()).unwrap();
    m.push(Module::linear(11, VOCAB, true).unwrap()).unwrap();
    m
}

/// The scenario's model and plan.
fn scenario(name: &str) -> (Module, Vec<(String, ParallelStyle)>) {
    use ParallelStyle::*;
    let plan = |p: &[(&str, ParallelStyle)]| p.iter().map(|(k, s)| (k.to_string(), *s)).collect();
    match name {
        "mlp" => (
            mlp(),
            plan(&[("0", RowwiseReplicatedInput), ("1", Colwise), ("3", Rowwise), ("5", ColwiseReplicatedOutput)]),
        ),
        "columns" => (columns(), plan(&[("0", Colwise), ("1", Rowwise), ("3", ColwiseReplicatedOutput)])),
        "uneven" => (
            uneven(false),
            plan(&[
                ("0", RowwiseReplicatedInput),
                ("1", Colwise),
                ("3", Rowwise),
                ("4", ColwiseReplicatedOutput),
                ("5", RowwiseReplicatedInput),
            ]),
        ),
        "uneven_columns" => (uneven(true), plan(&[("0", Colwise), ("1", Rowwise)])),
        _ => panic!("unknown scenario {name}"),
    }
}

/// Batch `step`: token ids `[4, 5]` and next-token targets, the same on
/// every rank (padding index 3 included).
fn batch(step: usize) -> (Tensor, Tensor) {
    let g = Tensor::arange(21, (Kind::Int64, tch::Device::Cpu));
    let ids = (g.shallow_clone() * (step as i64 * 5 + 3) + step as i64).remainder(VOCAB);
    let x = ids.narrow(0, 0, 20).view([4, 5]);
    let y = ids.narrow(0, 1, 20).view([4, 5]);
    (x, y)
}

/// One step: forward, loss, backward, clipping by `clip`, the optimizer.
fn step(model: &SharedModel, opt: &mut dyn Optimizer, s: usize, clip: &dyn Fn() -> Result<f64>) -> Result<(f64, f64)> {
    let (x, y) = batch(s);
    let logits = model.lock().unwrap().forward(&x)?;
    let loss = logits.view([-1, VOCAB]).cross_entropy_for_logits(&y.view([-1]));
    let value = loss.double_value(&[]);
    loss.backward();
    let norm = clip()?;
    opt.step()?;
    opt.zero_grad();
    Ok((value, norm))
}

fn optimizer(model: &SharedModel) -> Result<AdamW> {
    let params = model.lock().unwrap().parameters();
    AdamW::new(params, AdamOptions { lr: 0.02, weight_decay: 0.01, ..Default::default() })
}

/// What a run leaves: losses and norms per step, the weights and the
/// optimizer's state after `STEPS`, the losses of `MORE_STEPS` more.
struct Trained {
    losses: Vec<f64>,
    norms: Vec<f64>,
    weights: Vec<(String, Tensor)>,
    state: Vec<(String, Tensor)>,
}

/// Copies of `tensors`, which training changes in place.
fn copied(tensors: Vec<(String, Tensor)>) -> Vec<(String, Tensor)> {
    tensors.into_iter().map(|(k, t)| (k, t.detach().copy())).collect()
}

/// One process training the plain model.
fn reference(name: &str) -> Trained {
    let (m, _) = scenario(name);
    let model: SharedModel = Arc::new(Mutex::new(m));
    let mut opt = optimizer(&model).unwrap();
    let params = model.lock().unwrap().parameters();
    let clip = || fulmen::tensor::grad::clip_grad_norm(&params, MAX_NORM, 2.0);
    let (mut losses, mut norms, mut weights, mut state) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for s in 0..STEPS + MORE_STEPS {
        if s == STEPS {
            weights = copied(model.lock().unwrap().state_dict());
            state = copied(opt.state_dict().unwrap());
        }
        let (l, n) = step(&model, &mut opt, s, &clip).unwrap();
        losses.push(l);
        norms.push(n);
    }
    Trained { losses, norms, weights, state }
}

/// One rank: the split model trained `STEPS`, unsharded (weights and
/// optimizer state read whole), split again and trained on.
fn rank_run(name: &str) -> Result<Trained> {
    let world: usize = std::env::var("WORLD_SIZE").unwrap().parse().unwrap();
    let ctx = fulmen::distributed::join(&JoinOptions { devices_per_node: world, ..Default::default() })?;
    let (m, plan) = scenario(name);
    if ctx.rank() > 0 {
        // Other values than rank 0's: splitting copies rank 0's first.
        for p in m.parameters() {
            let _ = tch::no_grad(|| p.shallow_clone().fill_(0.25));
        }
    }
    let model: SharedModel = Arc::new(Mutex::new(m));
    let mut tp = TensorParallel::new(ctx, Arc::clone(&model), &plan)?;
    let mut opt = optimizer(&model)?;
    let (mut losses, mut norms, mut weights, mut state) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for s in 0..STEPS + MORE_STEPS {
        if s == STEPS {
            tp.unshard(&mut [&mut opt])?;
            weights = copied(model.lock().unwrap().state_dict());
            state = copied(opt.state_dict()?);
            // The whole model runs as the plain one meanwhile.
            let (x, _) = batch(0);
            let _ = model.lock().unwrap().forward(&x)?;
            tp.reshard(&mut [&mut opt])?;
        }
        let (l, n) = step(&model, &mut opt, s, &|| tp.clip_grad_norm(MAX_NORM))?;
        losses.push(l);
        norms.push(n);
    }
    tp.unshard(&mut [&mut opt])?;
    drop(tp);
    Ok(Trained { losses, norms, weights, state })
}

/// Refusals, each leaving the model whole and unchanged; then a wrapper
/// freed while split leaves layers that refuse to run.
fn refusals_run() -> Result<()> {
    use ParallelStyle::*;
    let world: usize = std::env::var("WORLD_SIZE").unwrap().parse().unwrap();
    let ctx = fulmen::distributed::join(&JoinOptions { devices_per_node: world, ..Default::default() })?;
    let model: SharedModel = Arc::new(Mutex::new(mlp()));
    let (x, _) = batch(0);
    let before = model.lock().unwrap().forward(&x)?;
    let refused = |plan: &[(&str, ParallelStyle)], code: ErrorCode, words: &str| {
        let plan: Vec<(String, ParallelStyle)> = plan.iter().map(|(k, s)| (k.to_string(), *s)).collect();
        let e =
            TensorParallel::new(Arc::clone(&ctx), Arc::clone(&model), &plan).err().expect("a bad plan split the model");
        assert!(e.code == code || e.code == ErrorCode::Distributed, "{e}");
        assert!(e.message.contains(words), "{words:?} not in {e}");
        let after = model.lock().unwrap().forward(&x).unwrap();
        assert!(after.allclose(&before, 0.0, 0.0, false), "a refused plan changed the model");
    };
    refused(&[], ErrorCode::InvalidArgument, "names no layer");
    refused(&[("4", Colwise)], ErrorCode::Unsupported, "LayerNorm");
    refused(&[("9", Colwise)], ErrorCode::InvalidArgument, "no child");
    refused(&[("1", Colwise), ("1", Rowwise)], ErrorCode::InvalidArgument, "twice");
    refused(&[("0", Rowwise)], ErrorCode::InvalidArgument, "input_layouts=Replicate()");
    refused(
        &[("1", Colwise), ("5", if ctx.rank() == 0 { Colwise } else { Rowwise })],
        ErrorCode::InvalidArgument,
        "plan differs",
    );
    let plan = vec![("1".to_string(), Colwise), ("3".to_string(), Rowwise)];
    let tp = TensorParallel::new(Arc::clone(&ctx), Arc::clone(&model), &plan)?;
    let e = TensorParallel::new(Arc::clone(&ctx), Arc::clone(&model), &plan).err().expect("split twice");
    assert!(e.message.contains("split already"), "{e}");
    let split = model.lock().unwrap().forward(&x)?;
    assert!(split.allclose(&before, 1e-5, 1e-6, false), "the split model computes what the plain one does");
    {
        // Under bf16 autocast a row-split Linear sums (and returns) bf16,
        // as the plain layer computes in it.
        let _autocast =
            fulmen::precision::autocast::AutocastGuard::enter(fulmen::tensor::device::DeviceType::Cpu, Kind::BFloat16)?;
        let m = model.lock().unwrap();
        let hidden = m.forward_child("1", &m.forward_child("0", &x)?)?;
        let out = m.forward_child("3", &hidden.tanh())?;
        assert_eq!(out.kind(), Kind::BFloat16, "the row-split Linear's result under autocast");
    }
    drop(tp);
    let e = model.lock().unwrap().forward(&x).expect_err("a layer left split ran");
    assert_eq!(e.code, ErrorCode::InvalidState, "{e}");
    assert!(e.message.contains("wrapper was freed"), "{e}");
    Ok(())
}

/// The mlp on next-token batches for the trainer.
struct NextToken {
    model: SharedModel,
    losses: Vec<f64>,
    /// The rows of the column-split Linear's weight at each step.
    rows: Vec<i64>,
}

impl LightningModule for NextToken {
    fn model(&self) -> Option<SharedModel> {
        Some(Arc::clone(&self.model))
    }

    fn training_step(&mut self, _ctx: &mut StepContext, batch: &[Tensor]) -> Result<Option<Tensor>> {
        let m = self.model.lock().unwrap();
        self.rows.push(m.named_parameters().into_iter().find(|(k, _)| k == "1.weight").unwrap().1.size()[0]);
        let logits = m.forward(&batch[0])?;
        drop(m);
        let loss = logits.view([-1, VOCAB]).cross_entropy_for_logits(&batch[1].view([-1]));
        self.losses.push(loss.double_value(&[]));
        Ok(Some(loss))
    }

    fn predict_step(&mut self, _ctx: &mut StepContext, batch: &[Tensor]) -> Result<Option<Tensor>> {
        Ok(Some(self.model.lock().unwrap().forward(&batch[0])?))
    }

    fn configure_optimizers(&mut self, _setup: &OptimizerSetup) -> Result<Vec<OptimizerConfig>> {
        let params = self.model.lock().unwrap().parameters();
        let opts = AdamOptions { lr: 0.02, weight_decay: 0.01, ..Default::default() };
        Ok(vec![OptimizerConfig::new(Box::new(AdamW::new(params, opts)?), None)])
    }
}

/// `STEPS` batches of 4 sequences (every rank reads all of them).
fn token_loader() -> DataLoader {
    let (xs, ys): (Vec<Tensor>, Vec<Tensor>) = (0..STEPS).map(batch).unzip();
    let ds = TensorDataset::new(vec![Tensor::cat(&xs, 0), Tensor::cat(&ys, 0)]).unwrap();
    DataLoader::new(Arc::new(ds), DataLoaderOptions { batch_size: 4, ..Default::default() }).unwrap()
}

/// A fit's losses and the weights after it.
type Fitted = (Vec<f64>, Vec<(String, Tensor)>);

/// Fits the mlp for `epochs` epochs with `strategy` (checkpoints under
/// `root`, clipping by norm; model_parallel's checkpoints sharded
/// directories unless `whole_checkpoints`), from `resume` when given; the
/// losses and the weights after the fit.
fn fit(strategy: &str, epochs: i64, root: &Path, resume: Option<&str>, whole_checkpoints: bool) -> Result<Fitted> {
    let mut t = trainer(strategy, epochs, root, whole_checkpoints)?;
    let mut m = NextToken { model: Arc::new(Mutex::new(scenario("mlp").0)), losses: Vec::new(), rows: Vec::new() };
    t.fit(&mut m, &token_loader(), None, resume)?;
    // Split during the fit (12 rows over the ranks), whole after it.
    let world: i64 = std::env::var("WORLD_SIZE").map_or(1, |w| w.parse().unwrap());
    let split = if strategy == "model_parallel" { 12 / world } else { 12 };
    assert!(m.rows.iter().all(|r| *r == split), "rows {:?}, want {split}", m.rows);
    let weights = copied(m.model.lock().unwrap().state_dict());
    Ok((m.losses, weights))
}

/// [`fit`]'s trainer.
fn trainer(strategy: &str, epochs: i64, root: &Path, whole_checkpoints: bool) -> Result<Trainer> {
    let mut o = TrainerOptions::default();
    let (epochs, root) = (epochs.to_string(), root.to_string_lossy().to_string());
    for (k, v) in [
        ("max_epochs", epochs.as_str()),
        ("accelerator", "cpu"),
        ("strategy", strategy),
        ("logger", "false"),
        ("enable_progress_bar", "false"),
        ("enable_model_summary", "false"),
        ("handle_signals", "false"),
        ("gradient_clip_val", "0.5"),
        ("default_root_dir", root.as_str()),
    ] {
        o.set(k, v)?;
    }
    if strategy == "model_parallel" {
        o.set("tensor_parallel_plan", "0=rowwise_replicated_input, 1=colwise, 3=rowwise, 5=colwise_replicated_output")?;
        o.set("save_distributed_checkpoint", if whole_checkpoints { "false" } else { "true" })?;
    }
    Trainer::new(o)
}

/// A checkpoint_io plugin that counts the saves it is given.
struct CountingIo(AtomicUsize);

impl CheckpointIo for CountingIo {
    fn save(&self, _bytes: &[u8], _path: &Path) -> Result<()> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    fn load(&self, path: &Path) -> Result<Vec<u8>> {
        Err(fulmen::Error::io(format!("{} is not stored here", path.display())))
    }

    fn remove(&self, _path: &Path) -> Result<()> {
        Ok(())
    }
}

/// A checkpoint_io plugin beside sharded checkpoints is refused when the
/// fit starts, before any step or save.
fn plugin_refused(work: &Path) -> Result<()> {
    let mut t = trainer("model_parallel", 1, &work.join("plugin"), false)?;
    let io = Arc::new(CountingIo(AtomicUsize::new(0)));
    t.set_checkpoint_io(Some(io.clone()));
    let mut m = NextToken { model: Arc::new(Mutex::new(scenario("mlp").0)), losses: Vec::new(), rows: Vec::new() };
    let e = t.fit(&mut m, &token_loader(), None, None).expect_err("a plugin beside sharded checkpoints ran");
    assert_eq!(e.code, ErrorCode::Unsupported, "{e}");
    assert!(e.message.contains("checkpoint_io plugin"), "{e}");
    assert!(m.losses.is_empty() && io.0.load(Ordering::SeqCst) == 0, "the refused fit ran");
    Ok(())
}

/// The checkpoint a fit under `root` saved last.
fn last_checkpoint(root: &Path) -> String {
    let dir = root.join("checkpoints");
    let mut found: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    found.sort();
    found.pop().expect("no checkpoint").to_string_lossy().to_string()
}

/// One rank of the trainer's model_parallel: two epochs, or one and then a
/// resume from its checkpoint for the second (`resume`), the checkpoints
/// sharded directories unless `whole_checkpoints`.
fn trainer_run(work: &Path, resume: bool, whole_checkpoints: bool) -> Result<Fitted> {
    let root = work.join("fit");
    if !resume {
        return fit("model_parallel", 2, &root, None, whole_checkpoints);
    }
    let (mut first, _) = fit("model_parallel", 1, &root, None, whole_checkpoints)?;
    let resumed = work.join("resumed");
    let (second, weights) = fit("model_parallel", 2, &resumed, Some(&last_checkpoint(&root)), whole_checkpoints)?;
    first.extend(second);
    Ok((first, weights))
}

/// One rank of a scenario; leaves its results in its folder.
#[test]
#[ignore]
fn tp_rank_main() {
    let (Ok(name), Ok(work)) = (std::env::var("FULMEN_TEST_SCENARIO"), std::env::var("FULMEN_TEST_WORK")) else {
        return;
    };
    let rank: usize = std::env::var("RANK").unwrap().parse().unwrap();
    let dir = Path::new(&work).join(format!("rank{rank}"));
    std::fs::create_dir_all(&dir).unwrap();
    if name == "refusals" {
        refusals_run().unwrap();
        println!("RANK-OK");
        return;
    }
    if name.starts_with("trainer") {
        if name == "trainer" {
            plugin_refused(Path::new(&work)).unwrap();
        }
        let (losses, weights) = match std::env::var("FULMEN_TEST_RESUME") {
            // Another job's checkpoint, resumed on this job's ranks.
            Ok(ck) => fit("model_parallel", 2, &Path::new(&work).join("elsewhere"), Some(&ck), false).unwrap(),
            Err(_) => trainer_run(Path::new(&work), name != "trainer", name == "trainer_resume_whole").unwrap(),
        };
        let text = losses.iter().map(|l| format!("{l:.17e}")).collect::<Vec<_>>().join("\n");
        std::fs::write(dir.join("losses.txt"), text).unwrap();
        Tensor::write_npz(&weights, dir.join("weights.npz")).unwrap();
        println!("RANK-OK");
        return;
    }
    let t = rank_run(&name).unwrap();
    let text = |v: &[f64]| v.iter().map(|l| format!("{l:.17e}")).collect::<Vec<_>>().join("\n");
    std::fs::write(dir.join("losses.txt"), text(&t.losses)).unwrap();
    std::fs::write(dir.join("norms.txt"), text(&t.norms)).unwrap();
    Tensor::write_npz(&t.weights, dir.join("weights.npz")).unwrap();
    Tensor::write_npz(&t.state, dir.join("state.npz")).unwrap();
    println!("RANK-OK");
}

/// Starts `world` ranks of `name` and waits for them.
fn run_ranks(world: usize, name: &str, work: &Path) {
    run_ranks_with(world, name, work, &[]);
}

/// [`run_ranks`] with more environment variables.
fn run_ranks_with(world: usize, name: &str, work: &Path, env: &[(&str, &str)]) {
    let port = fulmen::distributed::launcher::free_port().unwrap();
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..world)
        .map(|rank| {
            Command::new(&exe)
                .envs(env.iter().copied())
                .args(["--ignored", "--exact", "tp_rank_main", "--nocapture", "--test-threads=1"])
                .env("FULMEN_TEST_SCENARIO", name)
                .env("FULMEN_TEST_WORK", work)
                .env("RANK", rank.to_string())
                .env("LOCAL_RANK", rank.to_string())
                .env("GROUP_RANK", "0")
                .env("WORLD_SIZE", world.to_string())
                .env("LOCAL_WORLD_SIZE", world.to_string())
                .env("MASTER_ADDR", "127.0.0.1")
                .env("MASTER_PORT", port.to_string())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
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

fn tempdir(name: &str) -> PathBuf {
    let base = std::env::var_os("CARGO_TARGET_TMPDIR").map(PathBuf::from).unwrap_or_else(std::env::temp_dir);
    let dir = base.join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn read(dir: &Path, file: &str) -> Vec<f64> {
    std::fs::read_to_string(dir.join(file)).unwrap().lines().map(|l| l.parse().unwrap()).collect()
}

fn assert_same_tensors(what: &str, got: &[(String, Tensor)], want: &[(String, Tensor)]) {
    assert_eq!(got.len(), want.len(), "{what}: entries");
    for ((k, a), (wk, b)) in got.iter().zip(want) {
        assert_eq!(k, wk, "{what}");
        assert_eq!(a.size(), b.size(), "{what}: {k} shape");
        if a.kind() == Kind::Float {
            let diff = (a - b).abs().max().double_value(&[]);
            assert!(diff < 2e-5, "{what}: {k} differs by {diff}");
        } else {
            assert!(a.equal(b), "{what}: {k}");
        }
    }
}

/// Every rank's losses, clipping norms, full weights and optimizer state
/// equal one process training the plain model.
fn check_against_one_process(name: &str, world: usize) {
    let work = tempdir(&format!("tp-{name}-{world}"));
    run_ranks(world, name, &work);
    let want = reference(name);
    for r in 0..world {
        let dir = work.join(format!("rank{r}"));
        for (file, reference) in [("losses.txt", &want.losses), ("norms.txt", &want.norms)] {
            let got = read(&dir, file);
            assert_eq!(got.len(), reference.len(), "{name}: {file}");
            for (s, (a, b)) in got.iter().zip(reference.iter()).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-5 * b.abs().max(1.0),
                    "{name} world {world} rank {r} step {s} {file}: {a} vs {b}"
                );
            }
        }
        assert_same_tensors(
            &format!("{name} rank {r} weights"),
            &Tensor::read_npz(dir.join("weights.npz")).unwrap(),
            &want.weights,
        );
        assert_same_tensors(
            &format!("{name} rank {r} optimizer"),
            &Tensor::read_npz(dir.join("state.npz")).unwrap(),
            &want.state,
        );
    }
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn split_layers_on_two_ranks_equal_one_process() {
    check_against_one_process("mlp", 2);
    check_against_one_process("columns", 2);
}

#[test]
fn split_layers_on_four_ranks_equal_one_process() {
    check_against_one_process("mlp", 4);
}

/// Sizes that do not divide by the ranks split as DTensor splits them
/// (the last ranks' parts shorter, or empty).
#[test]
fn uneven_splits_equal_one_process() {
    for world in [2, 4] {
        check_against_one_process("uneven", world);
        check_against_one_process("uneven_columns", world);
    }
}

/// The trainer's model_parallel on 2 ranks (clipping, a checkpoint each
/// epoch, the model whole after the fit), and resumed from its checkpoint
/// (a sharded directory, or one file), equals one process fitting the
/// plain model; one process resumes the sharded directory too.
#[test]
fn the_trainers_model_parallel_equals_one_process() {
    let reference_root = tempdir("tp-trainer-reference");
    let (want_losses, want_weights) = fit("auto", 2, &reference_root, None, false).unwrap();
    assert_eq!(want_losses.len(), 2 * STEPS);
    for name in ["trainer", "trainer_resume", "trainer_resume_whole"] {
        let work = tempdir(&format!("tp-{name}"));
        run_ranks(2, name, &work);
        for r in 0..2 {
            let dir = work.join(format!("rank{r}"));
            let got = read(&dir, "losses.txt");
            assert_eq!(got.len(), want_losses.len(), "{name}: steps");
            for (s, (a, b)) in got.iter().zip(&want_losses).enumerate() {
                assert!((a - b).abs() <= 1e-5 * b.abs().max(1.0), "{name} rank {r} step {s}: {a} vs {b}");
            }
            let weights = Tensor::read_npz(dir.join("weights.npz")).unwrap();
            assert_same_tensors(&format!("{name} rank {r} weights"), &weights, &want_weights);
        }
        if name != "trainer" {
            resumed_elsewhere(name, &work, &want_losses[STEPS..], &want_weights);
        }
        let _ = std::fs::remove_dir_all(&work);
    }
    let _ = std::fs::remove_dir_all(&reference_root);
}

/// The first epoch's checkpoint of `name`'s job: a sharded directory
/// (each rank's parts, `.metadata`, `meta.pt`) or, with whole checkpoints,
/// one file; one process resumed from it takes the second epoch's steps
/// of the reference (`want_losses`) to its weights, and so do three ranks
/// resuming the directory (each reading its uneven parts of the two
/// ranks' chunks).
fn resumed_elsewhere(name: &str, work: &Path, want_losses: &[f64], want_weights: &[(String, Tensor)]) {
    let ck = last_checkpoint(&work.join("fit"));
    let sharded = Path::new(&ck).is_dir();
    assert_eq!(sharded, name == "trainer_resume", "{name}: {ck} a directory: {sharded}");
    if sharded {
        let mut files: Vec<String> =
            std::fs::read_dir(&ck).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        files.sort();
        assert_eq!(files, [".metadata", "__0_0.distcp", "__1_0.distcp", "meta.pt"], "{name}: {ck}");
        let three = work.join("three-ranks");
        std::fs::create_dir_all(&three).unwrap();
        run_ranks_with(3, "trainer_resumed", &three, &[("FULMEN_TEST_RESUME", ck.as_str())]);
        for r in 0..3 {
            let dir = three.join(format!("rank{r}"));
            let got = read(&dir, "losses.txt");
            assert_eq!(got.len(), want_losses.len(), "{name} on 3 ranks: steps");
            for (s, (a, b)) in got.iter().zip(want_losses).enumerate() {
                assert!((a - b).abs() <= 1e-5 * b.abs().max(1.0), "{name} on 3 ranks, rank {r} step {s}: {a} vs {b}");
            }
            let weights = Tensor::read_npz(dir.join("weights.npz")).unwrap();
            assert_same_tensors(&format!("{name} on 3 ranks, rank {r}"), &weights, want_weights);
        }
    }
    let (losses, weights) = fit("auto", 2, &work.join("one-process"), Some(&ck), false).unwrap();
    assert_eq!(losses.len(), want_losses.len(), "{name}: steps resumed in one process");
    for (s, (a, b)) in losses.iter().zip(want_losses).enumerate() {
        assert!((a - b).abs() <= 1e-5 * b.abs().max(1.0), "{name} in one process, step {s}: {a} vs {b}");
    }
    assert_same_tensors(&format!("{name} resumed in one process"), &weights, want_weights);
}

#[test]
fn bad_plans_are_refused_on_every_rank() {
    let work = tempdir("tp-refusals");
    run_ranks(2, "refusals", &work);
    let _ = std::fs::remove_dir_all(&work);
}

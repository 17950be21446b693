//! Sharded checkpoints in `torch.distributed.checkpoint`'s own format, as
//! Lightning's FSDP strategies write them with `state_dict_type="sharded"`
//! and its ModelParallelStrategy with `save_distributed_checkpoint=True`:
//! a directory holding each rank's `__<rank>_0.distcp` (its shards of the
//! model and optimizer states), a `.metadata` file (where every chunk
//! lies) and `meta.pt` (the rest of the checkpoint: loops, callbacks,
//! schedulers, as a `torch.save` file).
//!
//! Saving writes no gathered tensor: each rank writes the part it holds
//! of each sharded tensor (FSDP's rows, tensor parallelism's columns or
//! rows; under a hybrid sharding, the first node's ranks only), rank 0 the
//! values every rank holds whole, then the metadata. Reading
//! puts each tensor together whole from whatever chunks the directory has,
//! so a checkpoint saved by any number of ranks loads on any other (and
//! without a process group), and PyTorch's `dcp.load` reads fulmen's.
mod cut;
mod local;
mod metadata;
mod store;
mod tree;

use super::torch_save::{self, Value};
use super::Checkpoint;
use crate::distributed::ProcessGroup;
use crate::error::{Error, Result};
use metadata::{Chunk, Entry, Location, Metadata, METADATA_FILE};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;
use tch::Tensor;
use tree::PathItem;

pub(crate) use cut::Cut;
pub(crate) use local::LocalRows;

/// The file holding everything but the model and optimizer states
/// (Lightning's `_METADATA_FILENAME`).
pub const META_FILE: &str = "meta.pt";

/// A parameter cut across the ranks.
pub(crate) struct ShardedParam {
    /// The parameter (its data: this rank's part, shaped as `cut` says).
    pub param: Tensor,
    /// Its full shape and where it is cut.
    pub cut: Cut,
}

/// A tensor's identity in a state dict: where its data lies and its
/// shape (a tied parameter, listed under several names, is one).
pub(crate) type TensorKey = (usize, Vec<i64>);

fn tensor_key(t: &Tensor) -> TensorKey {
    (t.data_ptr() as usize, t.size())
}

/// Every name of each tensor of `state_dict`, in the state dict's order
/// (a tied parameter has several), each prefixed with `prefix`.
pub(crate) fn names_by_tensor<'a>(
    state_dict: impl IntoIterator<Item = &'a (String, Tensor)>,
    prefix: &str,
) -> HashMap<TensorKey, Vec<String>> {
    let mut names: HashMap<TensorKey, Vec<String>> = HashMap::new();
    for (n, t) in state_dict {
        names.entry(tensor_key(t)).or_default().push(format!("{prefix}{n}"));
    }
    names
}

/// Each sharded parameter of `sharding` under each of its `names`
/// ([`names_by_tensor`]), with its cut.
pub(crate) fn sharded_names(sharding: &Sharding, names: &HashMap<TensorKey, Vec<String>>) -> Vec<(String, Cut)> {
    let named = |sp: &ShardedParam| names.get(&tensor_key(&sp.param)).map(Vec::as_slice).unwrap_or_default();
    sharding.params.iter().flat_map(|sp| named(sp).iter().map(|n| (n.clone(), sp.cut.clone()))).collect()
}

/// What a sharded save needs from the strategy: the job's group, the
/// parameters that are sharded (every other tensor is whole on each rank),
/// and where this rank's parts lie.
pub(crate) struct Sharding {
    pub group: Arc<ProcessGroup>,
    pub params: Vec<ShardedParam>,
    /// The key the model's states go under: `"model"` (Lightning's
    /// FSDPStrategy) or `"state_dict"` (its ModelParallelStrategy).
    pub model_key: &'static str,
    /// This rank's index among the ranks a parameter is sharded across
    /// (the job's rank, or under a hybrid sharding its rank in its node).
    pub shard_rank: usize,
    /// Whether this rank writes its parts: under a hybrid sharding every
    /// node holds the same rows, and only the first node's ranks write them
    /// (as torch's planner keeps one copy of replicated shards).
    pub writes_shards: bool,
}

/// Whether `path` is a sharded checkpoint directory (holds `.metadata`).
pub fn is_sharded_dir(path: &Path) -> bool {
    path.is_dir() && std::fs::symlink_metadata(path.join(METADATA_FILE)).is_ok_and(|m| m.is_file())
}

/// Where a leaf goes: the cut of a sharded tensor, or `None` (the value
/// is whole on every rank; rank 0 writes it).
type Placement = Option<Cut>;

/// Each sharded parameter's cut, by its name.
type Shapes = HashMap<String, Cut>;

/// Saves `ck` as the sharded checkpoint directory `dir`; every rank of
/// `sharding.group` calls it together. `prefix` prefixes the model's names
/// (as in a `.ckpt`), `optimizer_params` lists each optimizer's parameters
/// in its state's order (they are named by the model's names). A failure
/// on any rank fails the save on every rank; `.metadata`, written last,
/// is removed first, so a directory without it is never taken for a
/// finished checkpoint.
pub(crate) fn save(
    ck: &Checkpoint,
    prefix: &str,
    optimizer_params: &[Vec<Tensor>],
    sharding: &Sharding,
    dir: &Path,
) -> Result<()> {
    let group = &*sharding.group;
    let (rank, world) = (group.rank(), group.world_size());
    // Rank 0's path (Lightning broadcasts it): the others may have named
    // it otherwise (a version suffix for a directory rank 0 just made).
    let chosen = group.all_gather_bytes(dir.as_os_str().as_encoded_bytes())?.swap_remove(0);
    let dir: &Path =
        &std::path::PathBuf::from(<std::ffi::OsString as std::os::unix::ffi::OsStringExt>::from_vec(chosen));
    let planned = plan(ck, prefix, optimizer_params, sharding);
    let prepared = match (&planned, rank) {
        (Ok(_), 0) => prepare_dir(dir, world),
        _ => Ok(()),
    };
    let ready = planned.and_then(|p| prepared.map(|()| p));
    let (meta, converted, shapes) = group.agree(ready, "preparing the sharded checkpoint")?;
    // The same tree on every rank: an error here is every rank's.
    let leaves = tree::flatten(&converted)?;
    let placements: Vec<Placement> = leaves.iter().map(|leaf| placement(leaf, &shapes, sharding.shard_rank)).collect();
    // This rank's pieces: the part it holds of each sharded tensor, and on
    // rank 0 every whole value.
    let mut owned: Vec<(usize, Vec<i64>, Value)> = Vec::new();
    let mut whole: Vec<usize> = Vec::new();
    for (i, leaf) in leaves.iter().enumerate() {
        match (leaf.value, &placements[i]) {
            (Value::Tensor(_), Some(_)) if !sharding.writes_shards => {}
            (Value::Tensor(t), Some(cut)) => {
                let span = cut.span(sharding.shard_rank);
                // Past the end under FSDP's padding: nothing real.
                let real = (cut.shape[span.dim] - span.first).clamp(0, span.len);
                if real > 0 {
                    let mut offsets = vec![0i64; cut.shape.len()];
                    offsets[span.dim] = span.first;
                    let piece = tch::no_grad(|| t.f_narrow(span.dim as i64, 0, real)?.f_contiguous())?;
                    owned.push((i, offsets, Value::Tensor(piece)));
                }
            }
            _ if rank == 0 => whole.push(i),
            _ => {}
        }
    }
    let pieces: Vec<&Value> = owned.iter().map(|(_, _, v)| v).chain(whole.iter().map(|i| leaves[*i].value)).collect();
    let written = store::write_pieces(&dir.join(store::rank_file(rank)), &pieces).map(|places| {
        let records: Vec<Value> = owned
            .iter()
            .map(|(i, offsets, v)| (*i, Some(offsets.clone()), v))
            .chain(whole.iter().map(|i| (*i, None, leaves[*i].value)))
            .zip(places)
            .map(|((i, offsets, v), (at, len))| record(i, offsets, v, at, len))
            .collect();
        Value::List(records)
    });
    let records = group.agree(written.and_then(|r| torch_save::to_bytes(&r)), "writing the sharded checkpoint")?;
    let all = group.all_gather_bytes(&records)?;
    let finished = if rank == 0 {
        describe(&leaves, &placements, &all).and_then(|m| metadata::write(&m, &save_id())).and_then(|bytes| {
            torch_save::save(&dir.join(META_FILE), &meta)?;
            crate::fs_safe::write_atomic(&dir.join(METADATA_FILE), &bytes)
        })
    } else {
        Ok(())
    };
    group.agree(finished, "writing the sharded checkpoint's metadata")
}

/// The checkpoint's parts: what `meta.pt` holds, the model and optimizer
/// states by name (`{"model": ..., "optimizer_0": ...}`, the model under
/// `sharding.model_key`), and each sharded parameter's cut, by name.
fn plan(
    ck: &Checkpoint,
    prefix: &str,
    optimizer_params: &[Vec<Tensor>],
    sharding: &Sharding,
) -> Result<(Value, Value, Shapes)> {
    if ck.current_model_state.is_some() || !ck.callback_tensors.is_empty() {
        return Err(Error::unsupported(
            "a sharded checkpoint cannot hold weight averaging's or a callback's tensors; set fsdp_state_dict_type \
             \"full\" (model_parallel: save_distributed_checkpoint false)",
        ));
    }
    let Value::Dict(top) = super::lightning::to_lightning(ck, prefix)? else {
        return Err(Error::state("a Lightning checkpoint that is not a dict"));
    };
    // A tied parameter's names: the optimizer states go by the first (as
    // torch's named_parameters), the placement of its model entries by
    // every one.
    let all_names = names_by_tensor(&ck.state_dict, prefix);
    let names: HashMap<&TensorKey, &String> = all_names.iter().map(|(k, v)| (k, &v[0])).collect();
    let mut model = None;
    let mut optimizers = Vec::new();
    let mut meta = Vec::new();
    for (k, v) in top {
        match (&k, v) {
            (Value::Str(s), v) if s == "state_dict" => model = Some(v),
            (Value::Str(s), Value::List(states)) if s == "optimizer_states" => optimizers = states,
            (_, v) => meta.push((k, v)),
        }
    }
    let mut converted = vec![(Value::Str(sharding.model_key.into()), model.unwrap_or(Value::Dict(Vec::new())))];
    for (i, state) in optimizers.into_iter().enumerate() {
        let params = optimizer_params.get(i).map(Vec::as_slice).unwrap_or_default();
        let named = params
            .iter()
            .map(|p| {
                names.get(&tensor_key(p)).map(|n| (*n).clone()).ok_or_else(|| {
                    Error::unsupported(format!(
                        "optimizer {i} steps a tensor that is not one of the model's parameters; a sharded \
                         checkpoint names optimizer states by parameter"
                    ))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        converted.push((Value::Str(format!("optimizer_{i}")), by_name(state, &named)?));
    }
    let converted = Value::Dict(converted);
    let shapes: Shapes = sharded_names(sharding, &all_names).into_iter().collect();
    Ok((Value::Dict(meta), converted, shapes))
}

/// A leaf's placement: a model parameter that is sharded, or an
/// optimizer state of one shaped as its part (`rank`'s).
fn placement(leaf: &tree::Leaf<'_>, shapes: &Shapes, rank: usize) -> Placement {
    let Value::Tensor(t) = leaf.value else { return None };
    let param = match leaf.path.as_slice() {
        [PathItem::Key(m), PathItem::Key(fqn)] if m == "model" || m == "state_dict" => fqn,
        [PathItem::Key(o), PathItem::Key(s), PathItem::Key(fqn), PathItem::Key(_)]
            if o.starts_with("optimizer_") && s == "state" =>
        {
            fqn
        }
        _ => return None,
    };
    let cut = shapes.get(param)?;
    cut.is_part_shaped(&t.size(), rank).then(|| cut.clone())
}

/// An optimizer's torch state with its parameters named: `state` keyed by
/// `names[i]` instead of `i`, and each group's `params` listing names.
fn by_name(state: Value, names: &[String]) -> Result<Value> {
    let name = |v: &Value| -> Result<Value> {
        match v {
            Value::Int(i) => {
                usize::try_from(*i).ok().and_then(|i| names.get(i)).map(|n| Value::Str(n.clone())).ok_or_else(|| {
                    Error::state(format!("an optimizer state names parameter {i}, which it does not step"))
                })
            }
            other => Err(Error::state(format!("an optimizer state's parameter id {other:?} is not a number"))),
        }
    };
    rename(state, &name)
}

/// An optimizer's torch state read from a sharded checkpoint, its
/// parameters numbered again: in the order its groups list them.
fn by_number(state: Value, what: &str) -> Result<Value> {
    let mut numbers: HashMap<String, i64> = HashMap::new();
    if let Some(Value::List(groups)) = state.get("param_groups") {
        for g in groups {
            if let Some(Value::List(params)) = g.get("params") {
                for p in params {
                    if let Value::Str(n) = p {
                        let next = numbers.len() as i64;
                        numbers.entry(n.clone()).or_insert(next);
                    }
                }
            }
        }
    }
    let number = |v: &Value| -> Result<Value> {
        match v {
            Value::Str(n) => numbers
                .get(n)
                .map(|i| Value::Int(*i))
                .ok_or_else(|| Error::format(format!("{what}: state of {n:?}, which no param group lists"))),
            Value::Int(i) => Ok(Value::Int(*i)),
            other => Err(Error::format(format!("{what}: a parameter named by {other:?}"))),
        }
    };
    rename(state, &number)
}

/// An optimizer's state with its `state` entry, empty when the directory
/// holds none: torch's flattening keeps no leaf of an empty dict, so an
/// optimizer without per-parameter state (SGD without momentum) is saved
/// with its `param_groups` alone.
fn with_state(optimizer: Value) -> Value {
    match optimizer {
        Value::Dict(mut entries) => {
            if !entries.iter().any(|(k, _)| matches!(k, Value::Str(s) if s == "state")) {
                entries.insert(0, (Value::Str("state".into()), Value::Dict(Vec::new())));
            }
            Value::Dict(entries)
        }
        other => other,
    }
}

/// `state` with its `state` keys and each group's `params` mapped by `f`.
fn rename(state: Value, f: &dyn Fn(&Value) -> Result<Value>) -> Result<Value> {
    let Value::Dict(entries) = state else { return Err(Error::format("an optimizer state that is not a dict")) };
    let mut out = Vec::with_capacity(entries.len());
    for (k, v) in entries {
        let v = match (&k, v) {
            (Value::Str(s), Value::Dict(per_param)) if s == "state" => {
                Value::Dict(per_param.into_iter().map(|(p, x)| Ok((f(&p)?, x))).collect::<Result<_>>()?)
            }
            (Value::Str(s), Value::List(groups)) if s == "param_groups" => Value::List(
                groups
                    .into_iter()
                    .map(|g| {
                        let Value::Dict(g) = g else { return Ok(g) };
                        Ok(Value::Dict(
                            g.into_iter()
                                .map(|(gk, gv)| match (&gk, gv) {
                                    (Value::Str(n), Value::List(ps)) if n == "params" => {
                                        Ok((gk, Value::List(ps.iter().map(f).collect::<Result<_>>()?)))
                                    }
                                    (_, gv) => Ok((gk, gv)),
                                })
                                .collect::<Result<_>>()?,
                        ))
                    })
                    .collect::<Result<_>>()?,
            ),
            (_, v) => v,
        };
        out.push((k, v));
    }
    Ok(Value::Dict(out))
}

/// One piece a rank wrote: (leaf, chunk offsets or none for a whole
/// value, chunk sizes, offset, length).
fn record(leaf: usize, offsets: Option<Vec<i64>>, v: &Value, at: u64, len: u64) -> Value {
    let ints = |v: &[i64]| Value::Tuple(v.iter().map(|x| Value::Int(*x)).collect());
    let (offsets, sizes) = match (offsets, v) {
        (Some(o), Value::Tensor(t)) => (ints(&o), ints(&t.size())),
        (None, Value::Tensor(t)) => (ints(&vec![0; t.dim()]), ints(&t.size())),
        _ => (Value::None, Value::None),
    };
    Value::Tuple(vec![Value::Int(leaf as i64), offsets, sizes, Value::Int(at as i64), Value::Int(len as i64)])
}

/// The metadata of the leaves from every rank's records.
fn describe(leaves: &[tree::Leaf<'_>], placements: &[Placement], all: &[Vec<u8>]) -> Result<Metadata> {
    let mut chunks: Vec<Vec<Chunk>> = leaves.iter().map(|_| Vec::new()).collect();
    let mut values: Vec<Option<Location>> = leaves.iter().map(|_| None).collect();
    let ints = |v: &Value| -> Option<Vec<i64>> {
        match v {
            Value::Tuple(x) => x.iter().map(|i| if let Value::Int(i) = i { Some(*i) } else { None }).collect(),
            _ => None,
        }
    };
    for (rank, bytes) in all.iter().enumerate() {
        let Value::List(records) = torch_save::read_bytes(bytes, "a rank's checkpoint records")? else {
            return Err(Error::distributed("a rank sent checkpoint records that are not a list"));
        };
        for r in &records {
            let Value::Tuple(f) = r else { return Err(Error::distributed("a malformed checkpoint record")) };
            let (Some(Value::Int(i)), Some(o), Some(s), Some(Value::Int(at)), Some(Value::Int(len))) =
                (f.first(), f.get(1), f.get(2), f.get(3), f.get(4))
            else {
                return Err(Error::distributed("a malformed checkpoint record"));
            };
            let i = usize::try_from(*i).ok().filter(|i| *i < leaves.len());
            let i = i.ok_or_else(|| Error::distributed("a checkpoint record names no leaf"))?;
            let at = Location { file: store::rank_file(rank), offset: *at as u64, length: *len as u64 };
            match (ints(o), ints(s)) {
                (Some(offsets), Some(sizes)) => chunks[i].push(Chunk { offsets, sizes, at }),
                _ => values[i] = Some(at),
            }
        }
    }
    let mut entries = Vec::with_capacity(leaves.len());
    for (i, leaf) in leaves.iter().enumerate() {
        let entry = match leaf.value {
            Value::Tensor(t) => Entry::Tensor {
                kind: t.kind(),
                size: placements[i].as_ref().map(|c| c.shape.clone()).unwrap_or_else(|| t.size()),
                chunks: std::mem::take(&mut chunks[i]),
            },
            _ => Entry::Bytes(
                values[i].take().ok_or_else(|| Error::distributed(format!("no rank wrote {:?}", leaf.fqn)))?,
            ),
        };
        entries.push((leaf.fqn.clone(), entry, leaf.path.clone()));
    }
    Ok(Metadata { entries })
}

/// Makes `dir` ready for a save by `world` ranks (rank 0 alone): a file
/// there is replaced (as Lightning does), the old `.metadata` and data
/// files of ranks beyond `world` removed. A symlink at `dir` is refused.
fn prepare_dir(dir: &Path, world: usize) -> Result<()> {
    let io = |what: &str, p: &Path, e: std::io::Error| Error::io(format!("{what} {}: {e}", p.display()));
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.file_type().is_symlink() => {
            return Err(Error::io(format!(
                "{} is a symlink; a sharded checkpoint is written into a real directory only",
                dir.display()
            )))
        }
        Ok(m) if m.is_file() => std::fs::remove_file(dir).map_err(|e| io("replacing", dir, e))?,
        Ok(m) if !m.is_dir() => return Err(Error::io(format!("{} is neither a file nor a directory", dir.display()))),
        _ => {}
    }
    std::fs::create_dir_all(dir).map_err(|e| io("creating", dir, e))?;
    remove_if_there(&dir.join(METADATA_FILE))?;
    for entry in std::fs::read_dir(dir).map_err(|e| io("listing", dir, e))? {
        let entry = entry.map_err(|e| io("listing", dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let stale = store::is_data_file(&name)
            && name[2..].split('_').next().and_then(|r| r.parse::<usize>().ok()).is_none_or(|r| r >= world);
        if stale {
            remove_if_there(&entry.path())?;
        }
    }
    Ok(())
}

fn remove_if_there(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(format!("removing {}: {e}", path.display()))),
    }
}

/// Removes the sharded checkpoint directory `dir` (ModelCheckpoint's older
/// top-k): its `.metadata`, `meta.pt` and data files, then the directory
/// if nothing else is left in it (anything else stays, untouched).
pub(crate) fn remove(dir: &Path) -> Result<()> {
    remove_if_there(&dir.join(METADATA_FILE))?;
    remove_if_there(&dir.join(META_FILE))?;
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io(format!("listing {}: {e}", dir.display())))?;
    for entry in entries.flatten() {
        if store::is_data_file(&entry.file_name().to_string_lossy()) {
            remove_if_there(&entry.path())?;
        }
    }
    match std::fs::remove_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        // Something else lives there: the checkpoint's own files are gone.
        Err(_) => Ok(()),
    }
}

/// A name for this save (the metadata's `save_id`).
fn save_id() -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    format!("fulmen-{}-{nanos:x}", std::process::id())
}

/// Reads the sharded checkpoint directory `dir` into the dict a Lightning
/// `.ckpt` holds (`meta.pt`'s entries, `state_dict` and `optimizer_states`
/// put together whole from the chunks); with `weights_only`, the model's
/// entries alone are read. The model's states may be under `model`
/// (Lightning's FSDPStrategy) or `state_dict` (its ModelParallelStrategy).
/// With `local`, the tensors of the model's sharded parameters (and the
/// optimizer states shaped as one) hold only this rank's part, read from
/// the chunks that overlap it.
pub(crate) fn load(dir: &Path, weights_only: bool, local: Option<&LocalRows>) -> Result<Value> {
    let what = dir.display().to_string();
    let meta_path = dir.join(METADATA_FILE);
    let md = metadata::read(&crate::fs_safe::read_regular(&meta_path)?, &meta_path.display().to_string())?;
    let rest_path = dir.join(META_FILE);
    if std::fs::symlink_metadata(&rest_path).is_err() {
        return Err(Error::format(format!(
            "{what} holds no {META_FILE}: it is a torch.distributed.checkpoint directory but not a Lightning \
             checkpoint (no loops, callbacks or schedulers to resume)"
        )));
    }
    let mut top = match torch_save::load(&rest_path)? {
        Value::Dict(entries) => entries,
        _ => return Err(Error::format(format!("{}: not a dict", rest_path.display()))),
    };
    let mut files = store::DataFiles::new(dir);
    let mut leaves = Vec::new();
    for (fqn, entry, path) in md.entries {
        let part = match path.first() {
            Some(PathItem::Key(k)) => k.as_str(),
            _ => "",
        };
        if weights_only && part != "model" && part != "state_dict" {
            continue;
        }
        let value = match entry {
            Entry::Tensor { kind, size, chunks } => match local.map(|l| l.span_of(&path, &size)).transpose()?.flatten()
            {
                Some(span) => Value::Tensor(files.span(&fqn, kind, &size, &chunks, span)?),
                None => Value::Tensor(files.tensor(&fqn, kind, &size, &chunks)?),
            },
            Entry::Bytes(at) => files.entry_value(&fqn, &at)?,
        };
        leaves.push((path, value));
    }
    let Value::Dict(parts) = tree::unflatten(leaves)? else {
        return Err(Error::format(format!("{what}: its entries do not make a dict")));
    };
    let mut model = None;
    let mut optimizers: BTreeMap<usize, Value> = BTreeMap::new();
    for (k, v) in parts {
        let Value::Str(k) = k else { continue };
        if k == "model" || k == "state_dict" {
            model = Some(v);
        } else if let Some(i) = k.strip_prefix("optimizer_").and_then(|i| i.parse::<usize>().ok()) {
            optimizers.insert(i, by_number(with_state(v), &format!("{what}: {k}"))?);
        }
    }
    if optimizers.keys().enumerate().any(|(n, i)| n != *i) {
        return Err(Error::format(format!("{what}: its optimizer states are not numbered 0, 1, ...")));
    }
    top.retain(|(k, _)| !matches!(k, Value::Str(s) if s == "state_dict" || s == "optimizer_states"));
    let model = model.ok_or_else(|| Error::format(format!("{what} holds no model state (`model` or `state_dict`)")))?;
    top.push((Value::Str("state_dict".into()), model));
    if !weights_only {
        top.push((Value::Str("optimizer_states".into()), Value::List(optimizers.into_values().collect())));
    }
    Ok(Value::Dict(top))
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;

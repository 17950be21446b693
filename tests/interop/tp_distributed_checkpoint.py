"""fulmen's model_parallel checkpoints (torch.distributed.checkpoint
directories of tensor-parallel parts) against PyTorch's and Lightning's own.

    python tp_distributed_checkpoint.py --binary build/interop/fsdp_rank [--work DIR]

The model, data and optimizer are fsdp2_parity.py's (AdamW); the job is
two ranks on gloo under Lightning's ModelParallelStrategy
(data_parallel_size 1, tensor_parallel_size 2, save_distributed_checkpoint
True) with parallelize_module's plan {"2.0": ColwiseParallel(), "3.0":
RowwiseParallel()}: each inner block's Linear split, the first by output
rows, the second by input columns. Every rank trains on every batch, in
order. fulmen's side is fsdp_rank with SHARDING MODEL_PARALLEL (its
tensor_parallel_plan "2.0=colwise, 3.0=rowwise") and checkpoint_prefix
"model.", Lightning's names.

1. fulmen fits as Lightning does: two epochs of fulmen and of Lightning
   from the same weights; every rank's losses within 1e-6 (relative), the
   final weights within 1e-5.
2. fulmen writes, PyTorch reads. fulmen's ModelCheckpoint leaves one
   directory, holding `.metadata`, `meta.pt` and one `__<rank>_0.distcp`
   per rank, the model under "state_dict" as Lightning's
   ModelParallelStrategy saves it; `dcp.load` (PyTorch's reader, in a
   plain process) fills a fresh model with fulmen's final weights bit for
   bit; `dcp_to_torch_save` gives AdamW's state in every parameter's full
   shape with the step count.
3. fulmen writes, Lightning resumes. fulmen's first-epoch directory,
   resumed by Lightning's own Trainer (its DTensors read from fulmen's
   column and row parts): Lightning's second epoch equals fulmen's
   (losses within 1e-6, weights within 1e-5).
4. Lightning writes, fulmen resumes. Lightning's first-epoch directory,
   resumed by fulmen on two ranks: fulmen's second epoch equals
   Lightning's.

Exit code non-zero on any mismatch.
"""
import argparse
import os
import shutil
import sys
import tempfile
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fsdp2_parity as base  # noqa: E402
from fsdp_sharded_checkpoint import lightning_job, run_fulmen, run_lightning as run_lightning_of  # noqa: E402

STEPS_PER_EPOCH = -(-base.SAMPLES // base.BATCH)
FULMEN_ENV = {"FSDP_CHECKPOINT_PREFIX": "model."}


def lightning_main(argv):
    """Tensor parallelism through ModelParallelStrategy: the plan above,
    every rank on every batch."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    def parallelize(model, device_mesh):
        plan = {"2.0": ColwiseParallel(), "3.0": RowwiseParallel()}
        parallelize_module(model, device_mesh["tensor_parallel"], plan)

    lightning_job(argv, parallelize, 1, base.WORLD, rank_rows=False)


def run_lightning(work, epochs, tag, save=None, resume=None):
    """This file's Lightning job; its final weights and every rank's losses."""
    return run_lightning_of(work, epochs, tag, save=save, resume=resume, script=__file__)


def fulmen(work, binary, name, epochs, env_extra=None):
    return run_fulmen(work, binary, name, epochs, dict(FULMEN_ENV, **(env_extra or {})), sharding="MODEL_PARALLEL")


def compare(label, losses, ref_losses, weights, ref_weights):
    """Every rank's losses against the reference's, and every rank's final
    weights; the problems found."""
    problems, worst = [], 0.0
    for rank, (got, ref) in enumerate(zip(losses, ref_losses)):
        if len(got) != len(ref):
            problems.append(f"{label}: rank {rank} made {len(got)} steps, the reference {len(ref)}")
            continue
        for step, (g, r) in enumerate(zip(got, ref)):
            rel = abs(g - r) / max(1.0, abs(r))
            worst = max(worst, rel)
            if not rel <= base.LOSS_RTOL:
                problems.append(f"{label}: rank {rank} step {step}: loss {g!r}, reference {r!r}")
    plain = {k.removeprefix("model."): v for k, v in ref_weights.items()}
    diffs = [base.max_diff(plain, {k.removeprefix("model."): v for k, v in w.items()}) for w in weights]
    if not max(diffs) <= base.WEIGHT_ATOL:
        problems.append(f"{label}: final weights per rank: max |w - w_reference| = {diffs}")
    print(f"{'ok  ' if not problems else 'FAIL'} {label}: max |loss - reference| / max(1, |reference|) = "
          f"{worst:.3g}, max |w - w_reference| = {max(diffs):.3g}", flush=True)
    return problems[:10]


def checkpoint_dir(root, epoch):
    return os.path.join(root, "checkpoints", f"epoch={epoch}-step={(epoch + 1) * STEPS_PER_EPOCH}.ckpt")


def check_directory(work, ck, weights):
    """What PyTorch reads of fulmen's final checkpoint `ck`."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    problems = []
    kept = sorted(os.listdir(os.path.dirname(ck)))
    if kept != [os.path.basename(ck)]:
        return [f"checkpoints left: {kept}, expected [{os.path.basename(ck)!r}]"]
    files = sorted(os.listdir(ck))
    expected = sorted([".metadata", "meta.pt"] + [f"__{r}_0.distcp" for r in range(base.WORLD)])
    if files != expected:
        problems.append(f"{ck} holds {files}, expected {expected}")
    model = base.build()
    state = {"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.load(state, checkpoint_id=ck)
    loaded = {k.removeprefix("model."): v.detach().clone() for k, v in state["state_dict"].items()}
    diff = base.max_diff(loaded, {k.removeprefix("model."): v for k, v in weights[0].items()})
    if diff != 0:
        problems.append(f"dcp.load's weights differ from fulmen's final weights by {diff}")
    converted = os.path.join(work, "fulmen-tp-ck.pt")
    dcp_to_torch_save(ck, converted)
    whole = torch.load(converted, weights_only=False)
    opt = whole.get("optimizer_0", {})
    for n, w in loaded.items():
        s = opt.get("state", {}).get(f"model.{n}", {})
        if s.get("exp_avg") is None or tuple(s["exp_avg"].shape) != tuple(w.shape):
            problems.append(f"optimizer_0's exp_avg of {n}: {None if s.get('exp_avg') is None else s['exp_avg'].shape}")
        if float(s.get("step", -1)) != base.EPOCHS * STEPS_PER_EPOCH:
            problems.append(f"optimizer_0's step of {n}: {s.get('step')}")
    print(f"{'ok  ' if not problems else 'FAIL'} fulmen writes, dcp.load reads: {os.path.basename(ck)} with "
          f"{len(whole.get('state_dict', {}))} weights, AdamW's state of {len(opt.get('state', {}))} parameters",
          flush=True)
    return problems


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "lightning":
        return lightning_main(sys.argv[2:])
    p = argparse.ArgumentParser()
    p.add_argument("--binary", required=True, help="build/interop/fsdp_rank")
    p.add_argument("--work")
    a = p.parse_args()
    work = a.work or tempfile.mkdtemp(prefix="fulmen-tp-dcp.")
    os.makedirs(work, exist_ok=True)
    base.write_inputs(work)
    sharded = {"FSDP_STATE_DICT_TYPE": "sharded"}
    for old in ("fulmen-ck", "fulmen-first", "lightning-ck"):
        shutil.rmtree(os.path.join(work, old), ignore_errors=True)

    root = os.path.join(work, "fulmen-ck")
    weights, losses = fulmen(work, a.binary, "whole", base.EPOCHS, dict(sharded, FSDP_CHECKPOINT_DIR=root))
    ref_w, ref_l = run_lightning(work, base.EPOCHS, "whole")
    problems = compare("fulmen's model_parallel fit against Lightning's", losses, ref_l, weights, ref_w)
    problems += check_directory(work, checkpoint_dir(root, base.EPOCHS - 1), weights)

    first = os.path.join(work, "fulmen-first")
    fulmen(work, a.binary, "first", 1, dict(sharded, FSDP_CHECKPOINT_DIR=first))
    got_w, got_l = run_lightning(work, base.EPOCHS, "resumed", resume=checkpoint_dir(first, 0))
    second = [ls[STEPS_PER_EPOCH:] for ls in losses]
    problems += compare("fulmen writes, Lightning resumes", got_l, second, [got_w], weights[0])

    ck = os.path.join(work, "lightning-ck")
    run_lightning(work, 1, "first", save=ck)
    got_w, got_l = fulmen(work, a.binary, "resumed", base.EPOCHS, {"FSDP_RESUME": ck})
    problems += compare("Lightning writes, fulmen resumes", got_l, [ls[STEPS_PER_EPOCH:] for ls in ref_l], got_w,
                        ref_w)
    for line in problems:
        print(f"  {line}", flush=True)
    print(f"tp_distributed_checkpoint: {'passed' if not problems else 'FAILED'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

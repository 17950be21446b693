"""FSDP jobs that mix a fulmen rank with a PyTorch FSDP2 rank
(torch.distributed.fsdp.fully_shard), checked against all-Python jobs.

    python fsdp2_mixed.py --binary build/interop/fsdp_rank [--work DIR]

Each job has two ranks on gloo, started with torchrun's environment, and
trains fsdp2_parity.py's model (Linear(10, 16), LayerNorm(16), two
Sequential(Linear(16, 16), Tanh()) blocks, Linear(16, 3): the last
layer's 3 rows padded to 4 for sharding) from the same initial weights on
every rank, each inner block a sharding unit and the root the rest, with
AdamW (lr 1e-2, weight decay 1e-2, built after sharding) and the mean
cross-entropy; rank r trains on rows r, r + 2, ... in batches of 16, the
last of an epoch shorter, two epochs.

- Python ranks (this script with `rank` first): fully_shard on each block
  (in the data-fed jobs on each Linear instead, so the first unit is fed
  the data and the root holds the LayerNorm only), then the root, on
  init_device_mesh("cpu", (2,)), reshard_after_forward as the case's
  sharding strategy asks (the root keeps its parameters from forward to
  backward), set_force_sum_reduction_for_comms(True) (reduce-scatter SUM,
  then / world) and set_reduce_scatter_unused_params(True) (zeros for a
  parameter without a gradient), MixedPrecisionPolicy where the case
  has one, set_requires_gradient_sync(False) on the micro-batches that do
  not step where it accumulates, the first block's weight frozen
  (requires_grad False) in the frozen job.
- The fulmen rank: fsdp_rank with FSDP_HOST_LOOP (a host loop on
  fulmen_fsdp, the same loop) and the strategy's sync_module_states false
  and reduce_scatter_unused_params true, which put FSDP2's collectives on
  the wire: nothing before the first forward, one all_gather_into_tensor
  per unit of its padded dimension-0 shards (forward, then backward with
  the next unit's gather started ahead, as FSDP2's pre-backward prefetch),
  one reduce_scatter_tensor per unit of exactly its gradients, in
  backward for a unit whose inputs require a gradient and at the end of
  the backward, root first, for the others.

Every rank writes every step's loss and, at the end, its own shards (no
collective: FSDP2's to_local(), fulmen's parameters as sharded; a shard's
padding rows are not compared). In each mixed job the fulmen rank and the
Python rank must equal the same ranks of the all-Python job exactly: every
loss bit for bit and every shard (max abs diff 0). The gradients each rank
steps with are the reduce-scatter of both ranks' gradients, so any
collective that did not pair up as FSDP2's would fail, hang into the
timeout, or change the numbers. A summary line per job; the exit code is
non-zero on any mismatch.

Run with `rank` as the first argument, it is one Python rank of a job.
"""
import argparse
import os
import subprocess
import sys
import tempfile
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fsdp2_parity import BATCH, DTYPES, EPOCHS, FEATURES, LR, SAMPLES, STEPS, WEIGHT_DECAY, WORLD  # noqa: E402
from fsdp2_parity import build, finish_job, free_port, leave_rank, read_losses, write_inputs  # noqa: E402

TIMEOUT_S = 60
# (name, sharding strategy, FSDP mixed precision (param_dtype, reduce_dtype)
# or None, micro-batches per optimizer step, the fulmen rank)
JOBS = (
    ("FULL_SHARD", "FULL_SHARD", None, 1, 0),
    ("FULL_SHARD", "FULL_SHARD", None, 1, 1),
    ("SHARD_GRAD_OP", "SHARD_GRAD_OP", None, 1, 1),
    ("FULL_SHARD-mp-bf16-fp32", "FULL_SHARD", ("bf16", "fp32"), 1, 0),
    ("FULL_SHARD-accumulate", "FULL_SHARD", None, 2, 1),
    ("FULL_SHARD-frozen", "FULL_SHARD", None, 1, 0),
    ("FULL_SHARD-data-fed", "FULL_SHARD", None, 1, 1),
    ("SHARD_GRAD_OP-data-fed", "SHARD_GRAD_OP", None, 1, 0),
)
# Jobs whose name ends so make every Linear a unit (fulmen's wrap policy
# "Linear") and the root the LayerNorm: the first Linear, fed the data,
# and the root reduce at the end of the backward (FSDP2's final callback,
# the root first), the others as their inputs' gradients are computed.
# Jobs whose name ends so freeze this parameter before sharding (gathered
# with its unit, left out of its reduce-scatter).
FROZEN = "2.0.weight"


def python_rank(argv):
    """One rank: fully_shard and a plain loop."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.distributed.tensor import DTensor

    p = argparse.ArgumentParser()
    for name in ("sharding", "mp", "accumulate", "freeze", "wrap", "init", "x", "y", "out"):
        p.add_argument(name)
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=timedelta(seconds=TIMEOUT_S))
    rank, world = dist.get_rank(), dist.get_world_size()
    model = build()
    model.load_state_dict(load_file(a.init))
    if a.freeze != "none":
        model.get_parameter(a.freeze).requires_grad_(False)
    mesh = init_device_mesh("cpu", (world,))
    mp = a.mp.split(",") if a.mp != "none" else None
    policy = MixedPrecisionPolicy(param_dtype=DTYPES[mp[0]], reduce_dtype=DTYPES[mp[1]]) if mp else MixedPrecisionPolicy()
    units = [model[0], model[2][0], model[3][0], model[4]] if a.wrap == "Linear" else [model[2], model[3]]
    for unit in units:
        fully_shard(unit, mesh=mesh, reshard_after_forward=a.sharding == "FULL_SHARD", mp_policy=policy)
    fully_shard(model, mesh=mesh, reshard_after_forward=False, mp_policy=policy)
    for unit in units + [model]:
        unit.set_force_sum_reduction_for_comms(True)
        unit.set_reduce_scatter_unused_params(True, recurse=False)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    x = torch.from_numpy(np.fromfile(a.x, dtype=np.float32).reshape(-1, FEATURES))[rank::world].contiguous()
    y = torch.from_numpy(np.fromfile(a.y, dtype=np.int64))[rank::world].contiguous()
    accumulate = int(a.accumulate)
    starts = range(0, len(x), BATCH)
    model.train()
    losses = []
    for _ in range(EPOCHS):
        for i, start in enumerate(starts):
            window_end = (i + 1) % accumulate == 0 or i == len(starts) - 1
            if i % accumulate == 0:
                opt.zero_grad(set_to_none=True)
            model.set_requires_gradient_sync(window_end)
            loss = F.cross_entropy(model(x[start : start + BATCH]), y[start : start + BATCH])
            losses.append(loss.item())
            (loss / accumulate).backward()
            if window_end:
                opt.step()
    shards = {}
    for k, v in model.state_dict().items():
        v = v.to_local() if isinstance(v, DTensor) else v
        shards[k] = v.detach().clone().contiguous()
    leave_rank(shards, a.out, a.out + ".losses", losses)


def run_job(work, binary, job, fulmen_rank, retried=False):
    """Runs one job (`fulmen_rank` None: all Python). Returns each rank's
    shards and losses."""
    name, sharding, mp, accumulate, _ = job
    tag = "python" if fulmen_rank is None else f"fulmen{fulmen_rank}"
    port = free_port()
    x, y, init = (os.path.join(work, n) for n in ("x.f32", "y.i64", "init.safetensors"))
    procs, outs = [], []
    for rank in range(WORLD):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                   WORLD_SIZE=str(WORLD), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(WORLD),
                   GROUP_RANK="0", OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
        out = os.path.join(work, f"{name}-{tag}-{rank}.safetensors")
        freeze = FROZEN if name.endswith("-frozen") else None
        wrap = "Linear" if name.endswith("-data-fed") else "Sequential"
        if rank == fulmen_rank:
            env["FSDP_HOST_LOOP"] = "1"
            env["FSDP_WRAP"] = wrap
            if freeze:
                env["FSDP_FREEZE"] = freeze
            env["FSDP_ACCUMULATE"] = str(accumulate)
            if mp:
                env["FSDP_PARAM_DTYPE"], env["FSDP_REDUCE_DTYPE"] = mp
            cmd = [binary, sharding, init, x, y, str(SAMPLES), str(EPOCHS), str(BATCH), out + ".losses", out,
                   "32-true", "0"]
        else:
            cmd = [sys.executable, os.path.abspath(__file__), "rank", sharding, ",".join(mp) if mp else "none",
                   str(accumulate), freeze or "none", wrap, init, x, y, out]
        procs.append(subprocess.Popen(cmd, env=env))
        outs.append(out)
    if finish_job(procs, outs, f"{name} {tag}", retried):
        return run_job(work, binary, job, fulmen_rank, retried=True)
    return [load_file(o) for o in outs], [read_losses(o + ".losses") for o in outs]


def shard_diff(got, ref):
    """The largest difference between a fulmen rank's shards and the
    all-Python rank's (fulmen's padding rows not compared); inf when names
    or shapes differ."""
    if got.keys() != ref.keys():
        print(f"  shard names differ: {sorted(got)} vs {sorted(ref)}", flush=True)
        return float("inf")
    worst = 0.0
    for k in ref:
        g, r = got[k], ref[k]
        if g.shape[1:] != r.shape[1:] or g.dtype != r.dtype:
            print(f"  {k}: shard {tuple(g.shape)} {g.dtype} vs {tuple(r.shape)} {r.dtype}", flush=True)
            return float("inf")
        if g.dim():
            # FSDP2's to_local() leaves out the padding rows fulmen's shard
            # keeps: at most world - 1 of them.
            if not r.shape[0] <= g.shape[0] < r.shape[0] + WORLD:
                print(f"  {k}: {g.shape[0]} rows, the all-Python shard {r.shape[0]}", flush=True)
                return float("inf")
            g = g[: r.shape[0]]
        if g.numel():
            worst = max(worst, (g.double() - r.double()).abs().max().item())
    return worst


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "rank":
        return python_rank(sys.argv[2:])
    p = argparse.ArgumentParser()
    p.add_argument("--binary", required=True, help="build/interop/fsdp_rank")
    p.add_argument("--work")
    a = p.parse_args()
    work = a.work or tempfile.mkdtemp(prefix="fulmen-fsdp2-mixed.")
    os.makedirs(work, exist_ok=True)
    init = write_inputs(work)
    references, failed = {}, 0
    for job in JOBS:
        name, fulmen_rank = job[0], job[4]
        if name not in references:
            ref_shards, ref_losses = run_job(work, a.binary, job, None)
            trained = any(shard_diff({k: v}, {k: init[k][: v.shape[0]] if v.dim() else init[k]}) > 0
                          for k, v in ref_shards[0].items())
            if not trained or any(len(l) != STEPS for l in ref_losses):
                raise SystemExit(f"the all-Python job {name} did not train {STEPS} steps")
            references[name] = ref_shards, ref_losses
        ref_shards, ref_losses = references[name]
        shards, losses = run_job(work, a.binary, job, fulmen_rank)
        diffs = [shard_diff(g, r) for g, r in zip(shards, ref_shards)]
        same_losses = losses == ref_losses
        ok = same_losses and all(d == 0 for d in diffs)
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {name:24} fulmen as rank {fulmen_rank}, PyTorch FSDP2 as rank "
              f"{1 - fulmen_rank}: {'the same' if same_losses else 'OTHER'} {STEPS} losses per rank, "
              f"max |shard - all-Python shard| = {max(diffs):.3g}", flush=True)
        if not same_losses:
            for r in range(WORLD):
                print(f"  rank {r}: losses {losses[r][:4]}..., all-Python {ref_losses[r][:4]}...", flush=True)
    print(f"fsdp2_mixed: {len(JOBS) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

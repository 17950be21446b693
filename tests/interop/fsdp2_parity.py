"""fulmen's strategy "fsdp" against PyTorch's own FSDP2 (fully_shard).

    python fsdp2_parity.py --binary build/interop/fsdp_rank [--work DIR]

For each case of CASES (FULL_SHARD and SHARD_GRAD_OP in float32,
FULL_SHARD under bf16-mixed autocast, FULL_SHARD with gradient clipping by
norm, FULL_SHARD under bf16-mixed with the inner blocks' activations
checkpointed, FULL_SHARD and SHARD_GRAD_OP with FSDP2's mixed precision:
parameters gathered and computed in bfloat16, gradients reduced in
float32 or in bfloat16, also with gradient accumulation, and all in
float16, its gradients divided before and after the reduction; FULL_SHARD
under 16-mixed with torch's
GradScaler and clipping; and, with the model exported by torch.export on
fulmen's side, FULL_SHARD with clipping and SHARD_GRAD_OP with bfloat16
parameters), two jobs of two ranks on gloo, one thread per
rank, train the same model from the same initial weights on the same rows:

  Sequential(Linear(10, 16), LayerNorm(16), Sequential(Linear(16, 16), Tanh()),
             Sequential(Linear(16, 16), Tanh()), Linear(16, 3))

- fulmen: two processes of fsdp_rank (tests/interop/fsdp_rank.c) started
  with torchrun's environment; fulmen's Trainer with strategy "fsdp",
  fsdp_auto_wrap_policy "Sequential" (each inner block a unit, the root
  the rest) and the sharding strategy under test;
  fsdp_activation_checkpointing_policy "Sequential" where the case
  checkpoints (every inner block, not the root).
- torch: two processes of this script (`rank` as the first argument); each
  inner block is fully_shard-ed, then the root, on init_device_mesh("cpu",
  (2,)), reshard_after_forward True for FULL_SHARD and False for
  SHARD_GRAD_OP (the root keeps its parameters from forward to backward in
  both, as FSDP2 does by default and as fulmen's root unit does); where the
  case checkpoints, torch.distributed._composable.checkpoint is applied to
  each inner block first (torch's non-reentrant checkpoint, FSDP2's
  companion); where it has a mixed precision, every fully_shard gets
  MixedPrecisionPolicy(param_dtype, reduce_dtype) and fulmen
  fsdp_param_dtype / fsdp_reduce_dtype.

Both use AdamW (lr 1e-2, weight decay 1e-2, built after sharding) and the
mean cross-entropy of the rank's batch; rank r trains on rows r, r + 2, ...
in order (fulmen's distributed sampler without shuffling), BATCH rows a
step, the last batch of an epoch shorter. Every rank writes every step's
loss and, at the end, the full weights (fulmen: the model is whole after
the fit; torch: each DTensor's full_tensor()).

Checked for every rank and step: |loss_fulmen - loss_torch| <= 1e-6 *
max(1, |loss_torch|); and for every rank's final weights: max |w_fulmen -
w_torch| <= 1e-5. A summary line per case; the exit code is
non-zero on any mismatch.
"""
import argparse
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

FEATURES = 10
HIDDEN = 16
CLASSES = 3
WORLD = 2
BATCH = 16
# 150 rows per rank: 9 batches of 16 and one of 6 per epoch.
SAMPLES = 300
EPOCHS = 2
STEPS = EPOCHS * -(-(SAMPLES // WORLD) // BATCH)
LR = 1e-2
WEIGHT_DECAY = 1e-2
LOSS_RTOL = 1e-6
WEIGHT_ATOL = 1e-5
TIMEOUT_S = 60
# The cases: (name, sharding strategy, precision, gradient_clip_val by norm
# or 0, inner blocks checkpointed, FSDP mixed precision (param_dtype,
# reduce_dtype) or None). bf16-mixed runs the forward under CPU autocast on
# both sides (Lightning's "bf16-mixed"); 16-mixed under float16 autocast
# with torch's GradScaler (a scale of 2^24, so the first steps overflow
# and are skipped on every rank, growing every 4 clean steps), unscaled
# before clipping;
# clipping is torch's clip_grad_norm_ over the sharded parameters (the
# norm over every rank's shards).
CASES = (
    ("FULL_SHARD", "FULL_SHARD", "32-true", 0.0, False, None),
    ("SHARD_GRAD_OP", "SHARD_GRAD_OP", "32-true", 0.0, False, None),
    ("FULL_SHARD-bf16", "FULL_SHARD", "bf16-mixed", 0.0, False, None),
    ("FULL_SHARD-clip", "FULL_SHARD", "32-true", 0.05, False, None),
    ("FULL_SHARD-ckpt-bf16", "FULL_SHARD", "bf16-mixed", 0.0, True, None),
    ("FULL_SHARD-mp-bf16-fp32", "FULL_SHARD", "32-true", 0.0, False, ("bf16", "fp32")),
    ("SHARD_GRAD_OP-mp-bf16", "SHARD_GRAD_OP", "32-true", 0.0, False, ("bf16", "bf16")),
    ("FULL_SHARD-16-clip", "FULL_SHARD", "16-mixed", 0.5, False, None),
    ("FULL_SHARD-mp-bf16-fp32-accumulate", "FULL_SHARD", "32-true", 0.0, False, ("bf16", "fp32")),
    ("FULL_SHARD-mp-fp16", "FULL_SHARD", "32-true", 0.0, False, ("fp16", "fp16")),
    ("FULL_SHARD-clip-exported", "FULL_SHARD", "32-true", 0.05, False, None),
    ("SHARD_GRAD_OP-mp-bf16-fp32-exported", "SHARD_GRAD_OP", "32-true", 0.0, False, ("bf16", "fp32")),
)
# Cases whose name ends so accumulate gradients over 2 micro-batches
# (fulmen's accumulate_grad_batches; torch: set_requires_gradient_sync
# off but on the window's last micro-batch, the loss divided by 2 as
# Lightning divides it): with a reduce dtype above the compute dtype the
# unreduced gradients accumulate in the reduce dtype.
ACCUMULATE = 2


def accumulates(name):
    return name.endswith("-accumulate")


# Cases whose name ends so train, on fulmen's side, the model exported with
# torch.export (model.pt2, from the same initial weights): its inner blocks
# are units inside the program.
def exported(name):
    return name.endswith("-exported")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
INIT_SCALE, GROWTH_INTERVAL = "16777216", "4"


def build():
    """The model fsdp_rank.c builds, with the same state_dict names."""
    def block():
        return nn.Sequential(nn.Linear(HIDDEN, HIDDEN), nn.Tanh())

    return nn.Sequential(
        nn.Linear(FEATURES, HIDDEN), nn.LayerNorm(HIDDEN), block(), block(), nn.Linear(HIDDEN, CLASSES)
    )


def gloo_reduce_scatter_averages(world):
    """Whether gloo's reduce_scatter_tensor with ReduceOp.AVG returns the
    mean here (some torch releases return the sum: pytorch#162338)."""
    rank = dist.get_rank()
    base = torch.arange(2 * world, dtype=torch.float32) + 1.0
    out = torch.empty(2)
    try:
        dist.reduce_scatter_tensor(out, base + rank, op=dist.ReduceOp.AVG)
    except (RuntimeError, ValueError):
        return False
    mean = base[2 * rank : 2 * rank + 2] + (world - 1) / 2
    return torch.equal(out, mean)


def shard_with_fsdp2(model, sharding, world, checkpointed, mp):
    """fully_shard on each inner block (checkpointed first when asked),
    then the root, with MixedPrecisionPolicy(*mp) where given; the
    gradients are averaged over the ranks (reduce-scatter, AVG or SUM then
    / world). Returns how they are averaged."""
    from torch.distributed._composable import checkpoint
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh("cpu", (world,))
    reshard = sharding == "FULL_SHARD"
    policy = MixedPrecisionPolicy(param_dtype=DTYPES[mp[0]], reduce_dtype=DTYPES[mp[1]]) if mp else MixedPrecisionPolicy()
    units = [model[2], model[3]]
    for block in units:
        if checkpointed:
            checkpoint(block)
        fully_shard(block, mesh=mesh, reshard_after_forward=reshard, mp_policy=policy)
    fully_shard(model, mesh=mesh, reshard_after_forward=False, mp_policy=policy)
    units.append(model)
    if gloo_reduce_scatter_averages(world):
        return "reduce-scatter AVG"
    # FSDP2's own setting for collectives that only sum: reduce-scatter
    # with SUM, then divide by the world size.
    for unit in units:
        unit.set_force_sum_reduction_for_comms(True)
    return "reduce-scatter SUM, then / world (gloo's AVG does not average here)"


def check_sharded(model, world):
    """The first block's weight is a DTensor sharded on dim 0, this rank
    holding HIDDEN / world rows."""
    from torch.distributed.tensor import DTensor, Shard

    w = model[2][0].weight
    if not isinstance(w, DTensor) or tuple(w.placements) != (Shard(0),) or w.to_local().shape[0] != HIDDEN // world:
        raise SystemExit(f"FSDP2 did not shard 2.0.weight on dim 0 across {world} ranks: {type(w).__name__}")


def check_after_forward(model, sharding):
    """After a training forward, FULL_SHARD has freed the blocks' gathered
    parameters (DTensor shards again); SHARD_GRAD_OP keeps them whole."""
    from torch.distributed.tensor import DTensor

    resharded = isinstance(model[2][0].weight, DTensor)
    if resharded != (sharding == "FULL_SHARD"):
        raise SystemExit(f"{sharding}: after the forward 2.0.weight is {'' if resharded else 'not '}sharded")


def full_state(model):
    """The full weights: every DTensor gathered (a collective on all ranks)."""
    from torch.distributed.tensor import DTensor

    state = {}
    for k, v in model.state_dict().items():
        v = v.full_tensor() if isinstance(v, DTensor) else v
        state[k] = v.detach().clone().contiguous()
    return state


def python_rank(argv):
    """One rank of torch's FSDP2 job."""
    p = argparse.ArgumentParser()
    for name in ("sharding", "precision", "clip", "checkpointed", "mp", "accumulate", "init", "x", "y", "losses",
                 "out"):
        p.add_argument(name)
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=timedelta(seconds=TIMEOUT_S))
    rank, world = dist.get_rank(), dist.get_world_size()
    model = build()
    model.load_state_dict(load_file(a.init))
    mp = tuple(a.mp.split(",")) if a.mp != "none" else None
    averaging = shard_with_fsdp2(model, a.sharding, world, a.checkpointed == "1", mp)
    if rank == 0:
        print(f"torch FSDP2 {a.sharding}: gradients averaged by {averaging}", flush=True)
    check_sharded(model, world)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    # This rank's rows, contiguous as the batches fulmen's loader makes.
    x = torch.from_numpy(np.fromfile(a.x, dtype=np.float32).reshape(-1, FEATURES))[rank::world].contiguous()
    y = torch.from_numpy(np.fromfile(a.y, dtype=np.int64))[rank::world].contiguous()
    scaler = None
    if a.precision == "16-mixed":
        scaler = torch.amp.GradScaler("cpu", init_scale=float(os.environ["FSDP_INIT_SCALE"]),
                                      growth_interval=int(os.environ["FSDP_GROWTH_INTERVAL"]))
    model.train()
    losses = []
    accumulate = int(a.accumulate)
    starts = range(0, len(x), BATCH)
    for _ in range(EPOCHS):
        for i, start in enumerate(starts):
            xb, yb = x[start : start + BATCH], y[start : start + BATCH]
            window_end = (i + 1) % accumulate == 0 or i == len(starts) - 1
            if accumulate > 1:
                model.set_requires_gradient_sync(window_end)
            if i % accumulate == 0:
                opt.zero_grad(set_to_none=True)
            autocast = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}.get(a.precision)
            with torch.autocast("cpu", dtype=autocast or torch.bfloat16, enabled=autocast is not None):
                loss = F.cross_entropy(model(xb), yb)
            if not losses:
                check_after_forward(model, a.sharding)
            losses.append(loss.item())
            if accumulate > 1:
                loss = loss / accumulate
            (scaler.scale(loss) if scaler else loss).backward()
            if not window_end:
                continue
            if scaler:
                scaler.unscale_(opt)
            if float(a.clip) > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), float(a.clip))
            if scaler:
                scaler.step(opt)
                scaler.update()
            else:
                opt.step()
    if scaler and rank == 0:
        print(f"torch GradScaler: scale {scaler.get_scale():g} after {len(losses)} steps", flush=True)
    leave_rank(full_state(model), a.out, a.losses, losses)


def leave_rank(state, out, losses_path, losses):
    """Writes a Python rank's weights to `out` and its losses, one a line,
    to `losses_path`, leaves the group and exits at once: without the
    interpreter's teardown, where gloo's threads now and then abort the
    process (std::terminate) after the work is done."""
    save_file(state, out)
    with open(losses_path, "w") as f:
        f.write("".join(f"{v!r}\n" for v in losses))
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_losses(path):
    with open(path) as f:
        return [float(line) for line in f if line.strip()]


def finish_job(procs, outs, label, retried):
    """Waits for a job's ranks (all killed when one outlives 3 * TIMEOUT_S),
    each of which writes `out` and `out.losses` for its entry of `outs`.
    Returns True when the job is to run once more: gloo's teardown at
    process exit now and then aborts a rank that has finished and written
    its results (SIGABRT), and such a job (not `retried` yet) runs again
    with its files removed, and must then pass in full. Any other failure
    is a SystemExit naming `label`."""
    codes = []
    for p in procs:
        try:
            p.wait(timeout=3 * TIMEOUT_S)
            codes.append(p.returncode)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
                q.wait()
            codes.append("timeout")
    written = all(os.path.exists(o) and os.path.exists(o + ".losses") for o in outs)
    if any(c != 0 for c in codes) and all(c in (0, -6) for c in codes) and written and not retried:
        print(f"{label}: a rank aborted at exit after writing its results (exit codes {codes}); "
              "running the job once more", flush=True)
        for o in outs:
            for path in (o, o + ".losses"):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(path)
        return True
    if any(c != 0 for c in codes):
        raise SystemExit(f"{label}: exit codes {codes}")
    return False


def run_job(work, binary, case, retried=False):
    """Runs one job of WORLD ranks: fulmen's (binary) or torch's (None).
    Returns each rank's final weights and its losses."""
    side = "torch" if binary is None else "fulmen"
    name, sharding, precision, clip, checkpointed, mp = case
    port = free_port()
    x, y, init = (os.path.join(work, n) for n in ("x.f32", "y.i64", "init.safetensors"))
    procs, outs = [], []
    for rank in range(WORLD):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                   WORLD_SIZE=str(WORLD), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(WORLD),
                   GROUP_RANK="0", OMP_NUM_THREADS="1")
        if checkpointed:
            env["FSDP_ACTIVATION_CHECKPOINTING"] = "Sequential"
        if mp:
            env["FSDP_PARAM_DTYPE"], env["FSDP_REDUCE_DTYPE"] = mp
        if precision == "16-mixed":
            env["FSDP_INIT_SCALE"], env["FSDP_GROWTH_INTERVAL"] = INIT_SCALE, GROWTH_INTERVAL
        accumulate = ACCUMULATE if accumulates(name) else 1
        if accumulate > 1:
            env["FSDP_ACCUMULATE"] = str(accumulate)
        if exported(name):
            env["FSDP_EXPORTED"] = os.path.join(work, "model.pt2")
        out = os.path.join(work, f"{side}-{name}-{rank}.safetensors")
        losses = out + ".losses"
        if binary is None:
            cmd = [sys.executable, os.path.abspath(__file__), "rank", sharding, precision, str(clip),
                   "1" if checkpointed else "0", ",".join(mp) if mp else "none", str(accumulate), init, x, y,
                   losses, out]
        else:
            cmd = [binary, sharding, init, x, y, str(SAMPLES), str(EPOCHS), str(BATCH), losses, out, precision,
                   str(clip)]
        procs.append(subprocess.Popen(cmd, env=env))
        outs.append(out)
    if finish_job(procs, outs, f"{side} {name}", retried):
        return run_job(work, binary, case, retried=True)
    return [load_file(o) for o in outs], [read_losses(o + ".losses") for o in outs]


def max_diff(a, b):
    if a.keys() != b.keys():
        raise SystemExit(f"different state_dict names: {sorted(a)} vs {sorted(b)}")
    return max((a[k].double() - b[k].double()).abs().max().item() for k in a)


def loss_mismatches(got, ref):
    """(rank, step, fulmen, torch) where the losses differ beyond the
    tolerance, and the largest relative difference."""
    bad, worst = [], 0.0
    for rank, (g, r) in enumerate(zip(got, ref)):
        for step, (gv, rv) in enumerate(zip(g, r)):
            rel = abs(gv - rv) / max(1.0, abs(rv))
            worst = max(worst, rel)
            if not rel <= LOSS_RTOL:
                bad.append((rank, step, gv, rv))
    return bad, worst


def compare(sharding, fulmen, torch_job, init):
    """Checks one strategy; prints its summary line; True when it passes."""
    (got_w, got_l), (ref_w, ref_l) = fulmen, torch_job
    problems = []
    counts = [len(l) for l in got_l + ref_l]
    if any(c != STEPS for c in counts):
        problems.append(f"losses per rank (fulmen, then torch) {counts}, expected {STEPS}")
    if max_diff(ref_w[0], ref_w[1]) != 0:
        problems.append("torch's ranks ended with different full weights")
    if max_diff(ref_w[0], init) == 0:
        problems.append("torch's job did not change the weights")
    bad, worst_loss = loss_mismatches(got_l, ref_l)
    for rank, step, gv, rv in bad[:5]:
        problems.append(f"rank {rank} step {step}: loss {gv!r}, torch {rv!r}")
    if len(bad) > 5:
        problems.append(f"... {len(bad) - 5} more loss mismatches")
    weight_diffs = [max_diff(g, r) for g, r in zip(got_w, ref_w)]
    worst_w = max(weight_diffs)
    if not worst_w <= WEIGHT_ATOL:
        problems.append(f"final weights per rank: max |w - w_torch| = {weight_diffs}")
    ok = not problems
    print(f"{'ok  ' if ok else 'FAIL'} {sharding:13} {WORLD} ranks x {STEPS} steps: "
          f"max |loss - torch| / max(1, |torch|) = {worst_loss:.3g}, max |w - w_torch| = {worst_w:.3g}", flush=True)
    for line in problems:
        print(f"  {line}", flush=True)
    return ok


def write_inputs(work):
    """Writes the rows (x.f32, y.i64) and the initial weights
    (init.safetensors) into `work`; returns the weights."""
    gen = torch.Generator().manual_seed(5)
    torch.randn(SAMPLES, FEATURES, generator=gen).numpy().tofile(os.path.join(work, "x.f32"))
    torch.randint(0, CLASSES, (SAMPLES,), generator=gen).numpy().tofile(os.path.join(work, "y.i64"))
    torch.manual_seed(17)
    start = build()
    with torch.no_grad():
        # A LayerNorm away from its ones / zeros, so loading it is seen.
        start[1].weight.normal_(1.0, 0.1)
        start[1].bias.normal_(0.0, 0.1)
    init = {k: v.detach().clone().contiguous() for k, v in start.state_dict().items()}
    save_file(init, os.path.join(work, "init.safetensors"))
    example = torch.randn(4, FEATURES)
    program = torch.export.export(start, (example,), dynamic_shapes=({0: torch.export.Dim("batch", min=2)},))
    torch.export.save(program, os.path.join(work, "model.pt2"))
    return init


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "rank":
        return python_rank(sys.argv[2:])
    p = argparse.ArgumentParser()
    p.add_argument("--binary", required=True, help="build/interop/fsdp_rank")
    p.add_argument("--work")
    a = p.parse_args()
    work = a.work or tempfile.mkdtemp(prefix="fulmen-fsdp2-parity.")
    os.makedirs(work, exist_ok=True)
    init = write_inputs(work)
    failed = 0
    for case in CASES:
        torch_job = run_job(work, None, case)
        fulmen = run_job(work, a.binary, case)
        failed += not compare(case[0], fulmen, torch_job, init)
    print(f"fsdp2_parity: {len(CASES) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

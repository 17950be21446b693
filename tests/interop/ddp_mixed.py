#!/usr/bin/env python3
"""DDP jobs that mix fulmen ranks with Python ranks running
torch.nn.parallel.DistributedDataParallel, checked against all-Python jobs.

    python ddp_mixed.py --rank-binary build/interop/ddp_rank [--work DIR]

Each job has two ranks on gloo, started with torchrun's environment. Every
model starts from a different initial state per rank (DDP must copy rank
0's parameters and buffers to all), trains on its rank's rows
(rank, rank + 2, ...) with SGD and cross-entropy on one thread (some jobs accumulate two
micro-batches per step, the first under DDP's no_sync), and writes
its final weights and buffers, and every step's loss. Those of every rank
of a mixed job must equal those of the same rank of the all-Python job
exactly (max abs diff 0, every loss bit for bit).

The "exported" model is the bn one (Linear, BatchNorm1d, ReLU, Linear)
with a training_step(batch) that returns the cross-entropy; the fulmen
rank loads it from a .pt2 that python/fulmen_export.py wrote from that
rank's initial module (its parameters and BatchNorm statistics, which
differ per rank, num_batches_tracked included) and calls its exported
training_step program. The Python ranks train the eager module under
DistributedDataParallel (broadcast_buffers=True, as fulmen's default: rank
0's BatchNorm statistics are copied to every rank before each forward).

Run with `rank` as the first argument, it is one Python rank of a job.
"""
import argparse
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from fulmen_export import export_for_fulmen, load_programs  # noqa: E402

FEATURES = 784
WORLD = 2
STEPS = 6
BATCH = 16
SAMPLES = WORLD * STEPS * BATCH
TIMEOUT_S = 60
# The stalled jobs: fulmen's timeout, and how long the Python rank stalls.
STALL_TIMEOUT_S = 5
STALL_S = 12

# (model, fulmen's side, find_unused_parameters, fulmen's rank, micro-batches
# per optimizer step: the others under no_sync)
JOBS = [
    ("mlp", "host", False, 0, 1),
    ("mlp", "trainer", False, 1, 1),
    ("mlp", "trainer", True, 0, 1),
    ("mlp", "host", True, 1, 1),
    ("bn", "trainer", False, 0, 1),
    ("bn", "host", False, 1, 1),
    ("frozen", "host", True, 0, 1),
    ("frozen", "trainer", True, 1, 1),
    ("bn", "trainer", False, 1, 2),
    ("bn", "host", False, 0, 2),
    ("exported", "trainer", False, 0, 1),
    ("exported", "trainer", False, 1, 1),
    ("exported", "trainer", True, 1, 1),
    ("exported", "trainer", False, 0, 2),
    ("exported", "host", False, 1, 1),
]


class Frozen(nn.Module):
    """A frozen first weight and a head the forward never uses."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(FEATURES, 128), nn.ReLU())
        self.head = nn.Linear(128, 10)
        self.unused = nn.Linear(128, 10)
        self.body[0].weight.requires_grad_(False)

    def forward(self, x):
        return self.head(self.body(x))


class BnClassifier(nn.Sequential):
    """The bn model with a training_step, for export."""

    def __init__(self):
        super().__init__(nn.Linear(FEATURES, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Linear(64, 10))

    def training_step(self, batch):
        x, y = batch
        return F.cross_entropy(self(x), y)


def build(kind):
    """The model ddp_rank.c builds (or loads, exported) for `kind`, with the
    same names."""
    if kind == "frozen":
        return Frozen()
    if kind == "exported":
        return BnClassifier()
    if kind == "bn":
        return nn.Sequential(nn.Linear(FEATURES, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Linear(64, 10))
    return nn.Sequential(
        nn.Linear(FEATURES, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)
    )


def python_rank(argv):
    """One rank: DistributedDataParallel and a plain loop."""
    p = argparse.ArgumentParser()
    for name in ("kind", "init", "x", "y", "out"):
        p.add_argument(name)
    p.add_argument("--find-unused", action="store_true")
    p.add_argument("--beside-trainer", action="store_true")
    p.add_argument("--stall-after", type=int, default=None)
    p.add_argument("--accumulate", type=int, default=1)
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=timedelta(seconds=TIMEOUT_S))
    rank, world = dist.get_rank(), dist.get_world_size()
    model = build(a.kind)
    model.load_state_dict(load_file(a.init))
    ddp = nn.parallel.DistributedDataParallel(model, find_unused_parameters=a.find_unused)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x = torch.from_numpy(np.fromfile(a.x, dtype=np.float32).reshape(-1, FEATURES))[rank::world]
    y = torch.from_numpy(np.fromfile(a.y, dtype=np.int64))[rank::world]
    model.train()
    losses = []
    for s in range(STEPS):
        if s == a.stall_after:
            # Alive but gone from the job: the other rank's all-reduce waits.
            time.sleep(STALL_S)
            return
        xb, yb = x[s * BATCH : (s + 1) * BATCH], y[s * BATCH : (s + 1) * BATCH]
        sync = (s + 1) % a.accumulate == 0
        if s % a.accumulate == 0:
            opt.zero_grad()
        with contextlib.nullcontext() if sync else ddp.no_sync():
            loss = F.cross_entropy(ddp(xb), yb)
            losses.append(loss.item())
            (loss / a.accumulate if a.accumulate > 1 else loss).backward()
        if sync:
            opt.step()
    if a.beside_trainer:
        # A Trainer (fulmen's, as Lightning's) agrees on stopping at the end
        # of each epoch: reduce_boolean_decision, an all-reduce (max).
        decision = torch.tensor([0], dtype=torch.int64)
        dist.all_reduce(decision, op=dist.ReduceOp.MAX)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, a.out)
    with open(a.out + ".losses", "w") as f:
        f.write("".join(f"{v!r}\n" for v in losses))
    dist.destroy_process_group()
    # Leave without the interpreter's teardown, where gloo's threads now and
    # then abort the process (std::terminate) after the work is done.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_path(work, kind, rank, fulmen_here=False):
    """A rank's initial state: safetensors, or for fulmen's rank of the
    exported model the .pt2 made from it."""
    ext = "pt2" if fulmen_here and kind == "exported" else "safetensors"
    return os.path.join(work, f"init-{kind}-{rank}.{ext}")


def make_init(work, kind, rank, example):
    """Writes rank `rank`'s initial state of `kind` (seeded per rank); for
    the exported model, with BatchNorm statistics of its own, and its .pt2
    (the training_step program), whose state must be that initial state."""
    torch.manual_seed(100 + rank)
    module = build(kind)
    if kind == "exported":
        with torch.no_grad():
            module[1].running_mean.normal_(0.0, 0.1)
            module[1].running_var.uniform_(0.5, 1.5)
            module[1].num_batches_tracked.fill_(10 * (rank + 1))
    state = {k: v.clone() for k, v in module.state_dict().items()}
    save_file(state, init_path(work, kind, rank))
    if kind != "exported":
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        export_for_fulmen(module, example, init_path(work, kind, rank, True), programs=("training_step",))
    stored = load_programs(init_path(work, kind, rank, True))["training_step"].state_dict
    if sorted(stored) != sorted(state) or max_diff(dict(stored), state) != 0:
        raise SystemExit(f"the .pt2 of rank {rank} does not hold the module's initial state_dict")


def read_losses(out):
    with open(out + ".losses") as f:
        return [float(line) for line in f if line.strip()]


def run_job(work, binary, kind, find_unused, fulmen=None, stall=False, accumulate=1, retried=False):
    """Runs one job; `fulmen` is None (all Python) or (side, rank). Returns
    each rank's final weights and its losses (two lists); with `stall`, the
    Python rank stops taking part after two steps and this returns fulmen's
    exit code and stderr."""
    port = free_port()
    procs, outs = [], []
    tag = "python" if fulmen is None else f"{fulmen[0]}-rank{fulmen[1]}"
    for rank in range(WORLD):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                   WORLD_SIZE=str(WORLD), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(WORLD),
                   GROUP_RANK="0", OMP_NUM_THREADS="1", DDP_RANK_TIMEOUT=str(STALL_TIMEOUT_S if stall else 120))
        fulmen_here = fulmen is not None and fulmen[1] == rank
        init = init_path(work, kind, rank, fulmen_here)
        out = os.path.join(work, f"out-{kind}-{int(find_unused)}-{accumulate}-{tag}-{rank}.safetensors")
        x, y = os.path.join(work, "x.f32"), os.path.join(work, "y.i64")
        if fulmen_here:
            cmd = [binary, kind, fulmen[0], "true" if find_unused else "false", init, x, y,
                   str(SAMPLES), str(STEPS), str(BATCH), out, str(accumulate)]
        else:
            cmd = [sys.executable, __file__, "rank", kind, init, x, y, out]
            cmd += ["--find-unused"] if find_unused else []
            cmd += ["--beside-trainer"] if fulmen is not None and fulmen[0] == "trainer" else []
            cmd += ["--stall-after", "2"] if stall else []
            cmd += ["--accumulate", str(accumulate)]
        procs.append(subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE if stall and fulmen_here else None,
                                      text=True))
        outs.append(out)
    codes, errors = [], []
    for p in procs:
        try:
            _, err = p.communicate(timeout=3 * TIMEOUT_S)
            codes.append(p.returncode)
            errors.append(err)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            codes.append("timeout")
    if stall:
        return codes[fulmen[1]], errors[fulmen[1]] or ""
    # gloo's teardown at process exit now and then aborts a rank that has
    # finished and written its weights ("terminate called without an active
    # exception", SIGABRT), in all-Python jobs too: such a job runs once
    # more, and must then pass in full.
    aborted_at_exit = all(c in (0, -6) for c in codes) and all(os.path.exists(o) for o in outs)
    if any(c != 0 for c in codes) and aborted_at_exit and not retried:
        print(f"job {kind} find_unused={find_unused} {tag}: a rank aborted at exit after writing its weights "
              f"(exit codes {codes}); running the job once more", flush=True)
        for o in outs:
            os.remove(o)
            with contextlib.suppress(FileNotFoundError):
                os.remove(o + ".losses")
        return run_job(work, binary, kind, find_unused, fulmen, stall, accumulate, retried=True)
    if any(c != 0 for c in codes):
        raise SystemExit(f"job {kind} find_unused={find_unused} {tag}: exit codes {codes}")
    return [load_file(o) for o in outs], [read_losses(o) for o in outs]


def max_diff(a, b, keys=None):
    if a.keys() != b.keys():
        raise SystemExit(f"different state_dict names: {sorted(a)} vs {sorted(b)}")
    return max((a[k].double() - b[k].double()).abs().max().item() for k in (keys or a))


def parameters(state, kind):
    """The names of parameters (not buffers: a rank's BatchNorm statistics
    of its last batch are its own)."""
    buffers = {n for n, _ in build(kind).named_buffers()}
    return [k for k in state if k not in buffers]


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "rank":
        return python_rank(sys.argv[2:])
    p = argparse.ArgumentParser()
    p.add_argument("--rank-binary", required=True)
    p.add_argument("--work")
    a = p.parse_args()
    work = a.work or tempfile.mkdtemp(prefix="fulmen-ddp-mixed.")
    os.makedirs(work, exist_ok=True)
    gen = torch.Generator().manual_seed(7)
    xs = torch.randn(SAMPLES, FEATURES, generator=gen)
    ys = torch.randint(0, 10, (SAMPLES,), generator=gen)
    xs.numpy().tofile(os.path.join(work, "x.f32"))
    ys.numpy().tofile(os.path.join(work, "y.i64"))
    for kind in sorted({j[0] for j in JOBS}):
        for rank in range(WORLD):
            make_init(work, kind, rank, (xs[:BATCH], ys[:BATCH]))
    references = {}
    failed = 0
    for kind, side, find_unused, fulmen_rank, accumulate in JOBS:
        key = (kind, find_unused, accumulate)
        if key not in references:
            ref, ref_losses = run_job(work, a.rank_binary, kind, find_unused, accumulate=accumulate)
            if max_diff(ref[0], ref[1], parameters(ref[0], kind)) != 0:
                raise SystemExit(f"the all-Python job {key} ended with different weights on its ranks")
            start = load_file(init_path(work, kind, 0))
            if max_diff(ref[0], start) == 0:
                raise SystemExit(f"the all-Python job {key} did not train")
            if any(len(l) != STEPS for l in ref_losses):
                raise SystemExit(f"the all-Python job {key} logged {[len(l) for l in ref_losses]} losses")
            references[key] = ref, ref_losses
        got, got_losses = run_job(work, a.rank_binary, kind, find_unused, (side, fulmen_rank), accumulate=accumulate)
        ref, ref_losses = references[key]
        diffs = [max_diff(r, g) for r, g in zip(ref, got)]
        same_losses = got_losses == ref_losses
        ok = all(d == 0 for d in diffs) and same_losses
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {kind:8} find_unused={str(find_unused):5} accumulate={accumulate} "
              f"fulmen {side:7} as rank {fulmen_rank}: max |w - w_python| = {max(diffs):.3g}, "
              f"{'the same' if same_losses else 'OTHER'} {STEPS} losses per rank", flush=True)
        if not same_losses:
            for r in range(WORLD):
                print(f"  rank {r}: losses {got_losses[r]}, all-Python {ref_losses[r]}", flush=True)
    # A rank that stops taking part: fulmen's all-reduce in backward times
    # out, reported as FULMEN_CODE_DISTRIBUTED (16), on both sides.
    for side in ("host", "trainer"):
        code, err = run_job(work, a.rank_binary, "mlp", False, (side, 0), stall=True)
        ok = code == 1 and ": code 16: " in err
        failed += not ok
        line = next((l for l in err.splitlines() if l.startswith("ddp_rank:")), err.strip()[-300:])
        print(f"{'ok  ' if ok else 'FAIL'} a stalled Python rank beside fulmen's {side}: {line[:240]}", flush=True)
    print(f"ddp_mixed: {len(JOBS) + 2 - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

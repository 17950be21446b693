"""Tensor-parallel jobs that mix a fulmen rank with a PyTorch rank running
torch.distributed.tensor.parallel.parallelize_module, checked against
all-Python and all-fulmen jobs.

    python tensor_parallel_mixed.py --binary build/interop/tp_rank [--work DIR]

Each job has two ranks on gloo, started with torchrun's environment, and
trains Sequential(Embedding(16, 8), Linear(8, 12), Tanh(), Linear(12, 8),
Linear(8, 16, bias=False)), and again Sequential(Embedding(17, 7),
Linear(7, 12), Tanh(), Linear(12, 9), Linear(9, 17, bias=False)) whose
Embedding rows and last outputs do not divide by two (DTensor's uneven
shards: the second rank's part shorter, its all-gathers padded; an uneven
ColwiseParallel output handed to RowwiseParallel as a local tensor is not
among them, as DTensor's from_local cannot rebuild its global shape), from the same initial weights with the plan
{"0": RowwiseParallel(input_layouts=Replicate()), "1": ColwiseParallel(),
"3": RowwiseParallel(), "4": ColwiseParallel(output_layouts=Replicate())},
SGD (lr 0.2, momentum 0.9) and the mean cross-entropy, every rank on the
same batches of token ids (the next ids as targets).

- Python ranks (this script with `rank` first): init_process_group("gloo"),
  the collectives fulmen_tensor_parallel_new puts on the wire before it
  splits (two all-gathers of each rank's error text, empty on success; two
  of the plan's text; c10d's verify_params_across_processes; the
  broadcast_coalesced of rank 0's parameters and buffers, 250 MiB
  buckets; two all-gathers of the error text of cutting each rank's
  parts), then parallelize_module on init_device_mesh("cpu", (2,)) with
  src_data_rank=None (each rank cuts its part of the values it holds, now
  rank 0's), and a plain loop.
- The fulmen rank: tp_rank, a host loop on fulmen_tensor_parallel.

On the wire, each step is then DTensor's: the all-reduce of the
Embedding's masked partial lookups and of Linear 3's partial sums, the
all-gather of Linear 4's columns, and in backward the all-reduce of the
gradient that Linear 1's input gets. Every rank writes every step's loss
and, at the end, the whole model (DTensor's full_tensor() of the
momentum buffers, then of the parameters; fulmen's
fulmen_tensor_parallel_unshard, which gathers in that order). Each rank of a mixed job and of the
all-fulmen job must match the same rank of the all-Python job: losses
within 1e-6 (relative) and weights within 1e-6; the steps' values depend
on both ranks' collectives, so a collective that did not pair up would
fail, hang into the timeout or change the numbers. The exit code is
non-zero on any mismatch.
"""
import argparse
import os
import subprocess
import sys
import tempfile
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fsdp2_parity import finish_job, free_port, leave_rank, read_losses  # noqa: E402

VOCAB, BATCH, STEPS, WORLD, TIMEOUT_S = 16, 12, 8, 2, 60
PLAN_TEXT = [
    ("0", "RowwiseParallel(input_layouts=Replicate())"),
    ("1", "ColwiseParallel()"),
    ("3", "RowwiseParallel()"),
    ("4", "ColwiseParallel(output_layouts=Replicate())"),
]
JOBS = [None, ("fulmen", 0), ("fulmen", 1), ("fulmen", "all")]


SIZES = {"even": (VOCAB, 8, 12, 8, VOCAB), "uneven": (VOCAB + 1, 7, 12, 9, VOCAB + 1)}


def build(shape):
    rows, dim, hidden, mid, out = SIZES[shape]
    return nn.Sequential(nn.Embedding(rows, dim), nn.Linear(dim, hidden), nn.Tanh(), nn.Linear(hidden, mid),
                         nn.Linear(mid, out, bias=False))


def batch(step):
    x = torch.tensor([(i * (step * 5 + 3) + step) % VOCAB for i in range(BATCH)], dtype=torch.int64)
    return x, (x * 7 + 1) % VOCAB


def all_gather_bytes(data):
    """fulmen's all_gather_bytes: the lengths, then the bytes padded to the
    longest (at least 1)."""
    n = torch.tensor([len(data)], dtype=torch.int64)
    lens = [torch.zeros(1, dtype=torch.int64) for _ in range(WORLD)]
    dist.all_gather(lens, n)
    longest = max(1, max(int(t.item()) for t in lens))
    padded = torch.zeros(longest, dtype=torch.uint8)
    padded[: len(data)] = torch.tensor(list(data), dtype=torch.uint8)
    out = [torch.zeros(longest, dtype=torch.uint8) for _ in range(WORLD)]
    dist.all_gather(out, padded)
    return [bytes(o[: int(n.item())].tolist()) for o, n in zip(out, lens)]


def python_rank(argv):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    p = argparse.ArgumentParser()
    p.add_argument("init")
    p.add_argument("out")
    p.add_argument("shape")
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=timedelta(seconds=TIMEOUT_S))
    model = build(a.shape)
    model.load_state_dict(load_file(a.init))
    # What fulmen_tensor_parallel_new puts on the wire before it splits.
    if any(all_gather_bytes(b"")):
        raise SystemExit("a rank refused the plan")
    text = "".join(f"{k}={v}\n" for k, v in PLAN_TEXT).encode()
    if any(t != text for t in all_gather_bytes(text)):
        raise SystemExit("the ranks' plans differ")
    pg = dist.group.WORLD
    params = list(model.parameters())
    dist._verify_params_across_processes(pg, params, None)
    with torch.no_grad():
        dist._broadcast_coalesced(pg, params + list(model.buffers()), 250 * 1024 * 1024, 0)
    # Every rank cut its parts (fulmen agrees on that before it splits).
    if any(all_gather_bytes(b"")):
        raise SystemExit("a rank could not cut its parts")
    mesh = init_device_mesh("cpu", (WORLD,))
    plan = {"0": RowwiseParallel(input_layouts=Replicate()), "1": ColwiseParallel(), "3": RowwiseParallel(),
            "4": ColwiseParallel(output_layouts=Replicate())}
    parallelize_module(model, mesh, plan, src_data_rank=None)
    opt = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
    losses = []
    for s in range(STEPS):
        x, y = batch(s)
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        losses.append(loss.item())
        loss.backward()
        opt.step()
    # fulmen_tensor_parallel_unshard gathers the optimizer's state first
    # (each split parameter's momentum along the parameter's split, in
    # parameter order), then the parameters: the same all-gathers here.
    # (DTensor keeps the Embedding's momentum whole, Replicate: cut to the
    # parameter's placement first, without communication.)
    for param in model.parameters():
        buf = opt.state[param].get("momentum_buffer")
        if isinstance(buf, DTensor) and any(not pl.is_replicate() for pl in param.placements):
            buf.redistribute(placements=param.placements).full_tensor()
    full = {k: (v.full_tensor() if isinstance(v, DTensor) else v).detach().contiguous()
            for k, v in model.state_dict().items()}
    leave_rank(full, a.out, a.out + ".losses", losses)


def run_job(work, binary, init, shape, fulmen, retried=False):
    """One job of the `shape` model; `fulmen` None (all Python), (side,
    rank) or (side, "all"). Returns each rank's final weights and losses."""
    port = free_port()
    tag = ("python" if fulmen is None else f"fulmen-{fulmen[1]}") + f"-{shape}"
    procs, outs = [], []
    for rank in range(WORLD):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                   WORLD_SIZE=str(WORLD), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(WORLD), GROUP_RANK="0",
                   OMP_NUM_THREADS="1")
        out = os.path.join(work, f"out-{tag}-{rank}.safetensors")
        here = fulmen is not None and fulmen[1] in (rank, "all")
        cmd = [binary, init, out, str(STEPS)] + (["uneven"] if shape == "uneven" else [])
        if not here:
            cmd = [sys.executable, __file__, "rank", init, out, shape]
        procs.append(subprocess.Popen(cmd, env=env))
        outs.append(out)
    if finish_job(procs, outs, f"job {tag}", retried):
        return run_job(work, binary, init, shape, fulmen, retried=True)
    return [load_file(o) for o in outs], [read_losses(o + ".losses") for o in outs]


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "rank":
        return python_rank(sys.argv[2:])
    p = argparse.ArgumentParser()
    p.add_argument("--binary", required=True)
    p.add_argument("--work")
    a = p.parse_args()
    work = a.work or tempfile.mkdtemp(prefix="fulmen-tp-mixed.")
    os.makedirs(work, exist_ok=True)
    failed = 0
    for shape in SIZES:
        failed += check_shape(work, a.binary, shape)
    if failed:
        raise SystemExit(f"{failed} job(s) differ from the all-Python job")
    print("tensor parallel mixed: every job equals the all-Python job")


def check_shape(work, binary, shape):
    """The jobs of the `shape` model against its all-Python job; the number
    that differ."""
    torch.manual_seed(3)
    init = os.path.join(work, f"init-{shape}.safetensors")
    save_file({k: v.contiguous() for k, v in build(shape).state_dict().items()}, init)
    reference = None
    failed = 0
    for job in JOBS:
        weights, losses = run_job(work, binary, init, shape, job)
        tag = ("python" if job is None else f"fulmen on rank {job[1]}") + f", {shape} sizes"
        if reference is None:
            reference = (weights, losses)
            if losses[0] != losses[1] or len(losses[0]) != STEPS:
                raise SystemExit(f"the all-Python job's ranks disagree: {losses}")
            print(f"job {tag}: losses {losses[0][0]:.6f} -> {losses[0][-1]:.6f}", flush=True)
            continue
        worst_loss = max(abs(x - y) / max(1.0, abs(y)) for r in range(WORLD)
                         for x, y in zip(losses[r], reference[1][r]))
        worst_weight = max((weights[r][k].double() - reference[0][r][k].double()).abs().max().item()
                           for r in range(WORLD) for k in reference[0][r])
        same_names = all(sorted(weights[r]) == sorted(reference[0][r]) for r in range(WORLD))
        ok = same_names and all(len(l) == STEPS for l in losses) and worst_loss <= 1e-6 and worst_weight <= 1e-6
        failed += not ok
        print(f"job {tag}: {'ok' if ok else 'MISMATCH'} (losses within {worst_loss:.2e}, weights within "
              f"{worst_weight:.2e}, names {'the same' if same_names else 'differ'})", flush=True)
    return failed


if __name__ == "__main__":
    main()

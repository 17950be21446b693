"""What the Python contenders share (bench/PROTOCOL.md): arguments, thread
setup, the device, the data set, the three models and the JSON-lines output.

`setup()` must run before torch is imported by anything else: it pins
OMP_NUM_THREADS to --threads (Lightning's launchers otherwise pick their own
count) and moves the process's stdout to stderr, keeping a private handle on
the real stdout for the protocol lines, so that nothing a framework prints
(Lightning's progress bar writes to stdout) can mix with them.
"""
import argparse
import gzip
import json
import os
import sys

WORKLOADS = ("mlp64", "mlp1024", "cnn")
BATCH = 64
LR = 0.05

_out = None


def parse_args(description, extra=None):
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--workload", choices=WORKLOADS, default="mlp64")
    p.add_argument("--data", default=".deps/data/mnist_5k.csv.gz")
    p.add_argument("--epochs", type=int, default=5, help="measured epochs")
    p.add_argument("--warmup", type=int, default=1, help="epochs run first, not reported")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads (per rank)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ranks", type=int, choices=(1, 2), default=None,
                   help="DDP over gloo with this many processes (default: no DDP)")
    p.add_argument("--accelerator", choices=("cpu", "cuda"), default="cpu",
                   help="where the model trains; batches move there from the host each step")
    if extra:
        extra(p)
    return p.parse_args()


def setup(args, redirect=True):
    """Pin the thread count and (redirect) reserve the real stdout for protocol lines."""
    global _out
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    os.environ["MKL_NUM_THREADS"] = str(args.threads)
    if redirect and _out is None:
        sys.stdout.flush()
        _out = os.fdopen(os.dup(1), "w", buffering=1)
        os.dup2(2, 1)
        sys.stdout = sys.stderr
    import torch
    torch.set_num_threads(args.threads)


def device(args):
    """The torch device the model trains on."""
    import torch
    return torch.device("cuda:0" if args.accelerator == "cuda" else "cpu")


def sync(args):
    """Wait for the GPU's queued work, so that a clock read after it is honest."""
    if args.accelerator == "cuda":
        import torch
        torch.cuda.synchronize()


def emit(record):
    """Print one protocol line on the real stdout."""
    (_out or sys.__stdout__).write(json.dumps(record) + "\n")
    (_out or sys.__stdout__).flush()


def epoch_line(contender, workload, epoch, seconds, steps):
    emit({"contender": contender, "workload": workload, "epoch": epoch,
          "seconds": round(seconds, 6), "steps": steps})


def done_line(contender, workload):
    emit({"contender": contender, "workload": workload, "done": True})


def load_data(path):
    """(x float32 [N, 784] scaled by 1/255, y int64 [N]); label in the last column."""
    import numpy as np
    import torch
    with gzip.open(path, "rt") as f:
        raw = np.loadtxt(f, delimiter=",", dtype=np.float32, ndmin=2)
    x = torch.from_numpy(raw[:, :-1].copy()).mul_(1.0 / 255.0)
    y = torch.from_numpy(raw[:, -1].astype(np.int64))
    return x, y


def build_model(workload):
    from torch import nn
    if workload == "mlp64":
        return nn.Sequential(nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10))
    if workload == "mlp1024":
        return nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 10))
    return nn.Sequential(
        nn.Unflatten(1, (1, 28, 28)),
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 7 * 7, 10))

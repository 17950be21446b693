#!/usr/bin/env python3
"""A model fulmen traced (fulmen_model_to_torchscript) is what Lightning's
own `to_torchscript(method="trace")` makes of the same model.

    python trace_parity.py --binary build/interop/trace_parity [--work DIR]

trace_parity (C) builds an MLP with BatchNorm and Dropout, moves its
running statistics, saves its weights, and saves its trace. Here PyTorch's
`torch.jit.load` reads the trace: it is in evaluation mode, holds the
saved weights under the same names, gives fulmen's own evaluation output
for the example input, and gives what Lightning's trace of the same
module (weights loaded from the saved file) gives on new inputs, within
1e-6; its parameters train (a backward reaches every one).
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch
from safetensors.torch import load_file
from torch import nn

TOLERANCE = 1e-6


def fail(msg):
    print(f"trace_parity: FAIL: {msg}")
    sys.exit(1)


def lightning_trace(weights, x):
    import lightning.pytorch as pl

    class Net(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(4, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 3))

        def forward(self, x):
            return self.net(x)

    module = Net()
    module.net.load_state_dict(weights)
    return module.to_torchscript(method="trace", example_inputs=x)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--work")
    args = ap.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="fulmen-trace-parity-")
    os.makedirs(work, exist_ok=True)
    subprocess.run([args.binary, work], check=True)

    weights = load_file(os.path.join(work, "mlp.safetensors"))
    x = torch.from_numpy(np.fromfile(os.path.join(work, "x.f32"), dtype=np.float32).reshape(5, 4))
    y = torch.from_numpy(np.fromfile(os.path.join(work, "y.f32"), dtype=np.float32).reshape(5, 3))
    ours = torch.jit.load(os.path.join(work, "mlp_traced.pt"))
    theirs = lightning_trace(weights, x)

    if ours.training or theirs.training:
        fail(f"traces in training mode: fulmen {ours.training}, Lightning {theirs.training}")
    state = ours.state_dict()
    if sorted(state) != sorted(weights):  # a safetensors file keeps its names sorted
        fail(f"state_dict names {list(state)} != the saved weights' {list(weights)}")
    for name, t in weights.items():
        if not torch.equal(state[name], t):
            fail(f"{name} differs from the saved weight")
    theirs_state = {k.removeprefix("net."): v for k, v in theirs.state_dict().items()}
    if list(theirs_state) != list(state):
        fail(f"names {list(state)} != Lightning's trace's {list(theirs_state)}")
    with torch.no_grad():
        if not torch.allclose(ours(x), y, rtol=0, atol=TOLERANCE):
            fail(f"the trace gives {ours(x)}, fulmen's evaluation forward {y}")
        gen = torch.Generator().manual_seed(0)
        for i in range(5):
            fresh = torch.randn(7, 4, generator=gen) * (i + 1)
            a, b = ours(fresh), theirs(fresh)
            if not torch.allclose(a, b, rtol=0, atol=TOLERANCE):
                fail(f"on new inputs {i}: fulmen's trace {a} != Lightning's {b}")
    ours.zero_grad()
    ours(x).sum().backward()
    missing = [n for n, p in ours.named_parameters() if p.grad is None or not p.requires_grad]
    if missing:
        fail(f"parameters without gradients: {missing}")
    if not args.work:
        shutil.rmtree(work)
    print(f"trace_parity: fulmen's trace equals Lightning's to_torchscript(method='trace') "
          f"({len(state)} tensors, within {TOLERANCE})")


if __name__ == "__main__":
    main()

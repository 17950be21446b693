#!/usr/bin/env python3
"""PyTorch's side of gpu_optim_check's foreach updates on cuda:0.

    python torch_cuda_optim.py DIR

Writes, with torch.save, DIR/init.pt: the starting state_dict of the blobs
MLP (Linear(2, 32), Tanh, Linear(32, 2), as tests/c/fixture.h builds it),
and for each optimizer of gpu_optim_check's foreach check, DIR/optim_K.pt:
the weights after 8 steps on cuda:0 from those, with torch's default
updates there (foreach), on the batch gpu_optim_check builds, and for its
first three (AdamW, SGD, Adagrad) DIR/fused_K.pt, the same with
fused=True. K is the check's kind number; the options are its.
"""
import os
import sys

import torch
import torch.nn as nn

# gpu_optim_check's kinds, in its order (the first three have fused
# updates).
OPTIMIZERS = [
    lambda p, **kw: torch.optim.AdamW(p, lr=0.01, **kw),
    lambda p, **kw: torch.optim.SGD(p, lr=0.1, momentum=0.9, **kw),
    lambda p, **kw: torch.optim.Adagrad(p, lr=0.05, lr_decay=0.01, **kw),
    lambda p, **kw: torch.optim.RMSprop(p, momentum=0.9, centered=True, **kw),
    lambda p, **kw: torch.optim.Adamax(p, weight_decay=0.01, **kw),
    lambda p, **kw: torch.optim.NAdam(p, weight_decay=0.01, decoupled_weight_decay=True, **kw),
    lambda p, **kw: torch.optim.RAdam(p, lr=0.01, **kw),
]
FUSED_KINDS = 3


def blobs_mlp():
    return nn.Sequential(nn.Linear(2, 32), nn.Tanh(), nn.Linear(32, 2)).to("cuda:0")


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(7)
    init = blobs_mlp().state_dict()
    torch.save(init, os.path.join(out, "init.pt"))
    x = torch.tensor([[i / 8 - 1, (i % 5) / 2] for i in range(16)], dtype=torch.float32, device="cuda:0")
    y = torch.tensor([i % 2 for i in range(16)], dtype=torch.int64, device="cuda:0")
    runs = [(kind, make, {}, "optim") for kind, make in enumerate(OPTIMIZERS)]
    runs += [(kind, OPTIMIZERS[kind], {"fused": True}, "fused") for kind in range(FUSED_KINDS)]
    for kind, make, kw, name in runs:
        model = blobs_mlp()
        model.load_state_dict(init)
        opt = make(model.parameters(), **kw)
        for _ in range(8):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
        torch.save(model.state_dict(), os.path.join(out, f"{name}_{kind}.pt"))
        how = "fused" if kw else "foreach by default"
        print(f"{type(opt).__name__} ({how} on cuda:0): 8 steps, last loss {loss.item():.9g}")


if __name__ == "__main__":
    main()

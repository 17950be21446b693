#!/usr/bin/env python3
"""PyTorch's side of gpu_check's weights saved from cuda:0.

    python torch_cuda_weights.py PATH

Writes, with torch.save, the state_dict of the blobs MLP (Linear(2, 32),
Tanh, Linear(32, 2), as tests/c/fixture.h builds it) held on cuda:0, so
the archive's storages are located on "cuda:0", and PATH.sum with the sum
of every value, which gpu_check compares after fulmen_model_load.
"""
import sys

import torch
import torch.nn as nn


def main():
    path = sys.argv[1]
    torch.manual_seed(5)
    model = nn.Sequential(nn.Linear(2, 32), nn.Tanh(), nn.Linear(32, 2)).to("cuda:0")
    state = model.state_dict()
    assert all(t.device.type == "cuda" for t in state.values())
    torch.save(state, path)
    total = sum(float(t.double().sum()) for t in state.values())
    with open(path + ".sum", "w") as f:
        f.write(f"{total:.17g}\n")
    print(f"torch.save of {len(state)} tensors on cuda:0 to {path}, sum {total:.9g}")


if __name__ == "__main__":
    main()

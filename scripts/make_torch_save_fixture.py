"""Writes tests/fixtures/torch_save_mlp.pt, `torch.save(model.state_dict())`
of PyTorch's Sequential(Linear(2, 8), Tanh(), Linear(8, 2)) seeded with 0,
and tests/fixtures/torch_save_mlp.safetensors: the same weights, and an input
`x` with the model's output `y`, for the tests that read the file without
Python (src/checkpoint/torch_save/tests.rs, tests/c/test_model.c).

    .deps/venv/bin/python scripts/make_torch_save_fixture.py
"""
import os

import torch
from safetensors.torch import save_file

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures")
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(2, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
torch.save(model.state_dict(), os.path.join(root, "torch_save_mlp.pt"))
x = torch.randn(5, 2)
with torch.no_grad():
    y = model(x)
tensors = {k: v.detach().clone() for k, v in model.state_dict().items()}
tensors.update(x=x, y=y)
save_file(tensors, os.path.join(root, "torch_save_mlp.safetensors"))

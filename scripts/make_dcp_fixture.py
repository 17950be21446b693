"""Writes tests/fixtures/dcp_torch/: a sharded checkpoint directory as
PyTorch's `torch.distributed.checkpoint.save` writes it (one process), with
a Lightning-style `meta.pt` beside it, for the tests that read it without
Python (src/checkpoint/dcp/tests.rs).

    .deps/venv/bin/python scripts/make_dcp_fixture.py
"""
import os
import shutil
import warnings

import torch
import torch.distributed.checkpoint as dcp

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "dcp_torch")
shutil.rmtree(root, ignore_errors=True)
state = {
    "model": {"net.w": torch.arange(6.0).reshape(2, 3), "net.b": torch.tensor(3.0)},
    "optimizer_0": {
        "state": {"net.w": {"step": torch.tensor(2.0), "exp_avg": torch.full((2, 3), 0.5)}},
        "param_groups": [{"lr": 0.1, "betas": (0.9, 0.99), "foreach": None, "params": ["net.w", "net.b"]}],
    },
}
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    dcp.save(state, checkpoint_id=root)
torch.save({"epoch": 3, "global_step": 6, "pytorch-lightning_version": "2.6.6"}, os.path.join(root, "meta.pt"))

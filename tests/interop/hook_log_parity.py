#!/usr/bin/env python3
"""Logging from hooks with Lightning's default flags against Lightning's Trainer.

    python hook_log_parity.py --binary build/interop/hook_log_parity [--work DIR]

The binary (tests/interop/hook_log_parity.c) fits a linear model for 2
epochs over 40 samples (batches 16, 16, 8), validating on the same loader,
and logs from on_train_batch_end (default: on_step; and on_step +
on_epoch), on_before_optimizer_step (default: on_step),
on_validation_batch_end (default: on_epoch, the mean weighted by batch
size), on_train_epoch_start (on_epoch), on_validation_epoch_end,
training_step and validation_step (on_step + on_epoch, a sum, a
logger=False value), values that depend only on the loop's position. Then
the same trainer validates over two loaders, tests over one, and fits
again with max_epochs raised to 3 (Lightning's trainer.fit_loop.max_epochs),
going on with epoch 2 and logging on in the same folder. The same
module on Lightning's Trainer must give, after each run, the same
trainer.logged_metrics and trainer.callback_metrics (same names, values
equal to float32 precision), validate and test must return the same
dicts, and every column of metrics.csv must hold the same (step, value)
series.
"""
import argparse
import csv
import math
import os
import shutil
import subprocess
import sys
import tempfile
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import lightning.pytorch as pl
from lightning.pytorch.loggers import CSVLogger

def data(batch_size=16):
    y = torch.tensor([i % 2 for i in range(40)], dtype=torch.int64)
    x = torch.tensor([[(1.5 if i % 2 else -1.5) + math.sin(i * 1.7), (1.5 if i % 2 else -1.5) + math.cos(i * 2.3)]
                      for i in range(40)], dtype=torch.float32)
    return DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=False)


class Module(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2, 2))

    def training_step(self, batch, batch_idx):
        self.log("ts", float(batch_idx))
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        self.log("vs", float(batch_idx + 10 * dataloader_idx), on_step=True, on_epoch=True)
        self.log("vn", 1.0, reduce_fx="sum")
        self.log("vq", float(batch_idx), logger=False)

    def test_step(self, batch, batch_idx, dataloader_idx=0):
        self.validation_step(batch, batch_idx, dataloader_idx)

    def on_validation_epoch_end(self):
        self.log("vee", 3.0)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def on_train_batch_end(self, outputs, batch, batch_idx):
        v = float(batch_idx + 1 + 10 * self.current_epoch)
        self.log("tbe", v)
        self.log("tbe2", v, on_step=True, on_epoch=True)

    def on_before_optimizer_step(self, optimizer):
        self.log("bos", float(self.trainer.global_step))

    def on_validation_batch_end(self, outputs, batch, batch_idx, dataloader_idx=0):
        self.log("vbe", float(batch_idx))

    def on_train_epoch_start(self):
        self.log("tes", float(10 * self.current_epoch))


def lightning_side(work):
    torch.manual_seed(0)
    logger = CSVLogger(work, name="lightning")
    trainer = pl.Trainer(max_epochs=2, log_every_n_steps=1, num_sanity_val_steps=0, logger=logger,
                         enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
                         accelerator="cpu", devices=1)
    loader, tens = data(), data(10)
    module = Module()
    as_floats = lambda d: {k: float(v) for k, v in d.items()}
    runs = {}

    def record(prefix, results):
        runs[prefix + "logged"] = as_floats(trainer.logged_metrics)
        runs[prefix + "callback"] = as_floats(trainer.callback_metrics)
        for i, r in enumerate(results):
            runs[f"{prefix}result{i}"] = as_floats(r)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(module, loader, loader)
        record("", [])
        record("validate_", trainer.validate(module, [loader, tens], verbose=False))
        record("test_", trainer.test(module, loader, verbose=False))
        trainer.fit_loop.max_epochs = 3
        trainer.fit(module, loader, loader)
        record("refit_", [])
    return runs, logger.log_dir


def fulmen_side(binary, work):
    proc = subprocess.run([binary, work], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{binary} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    runs, log_dir = {}, None
    for line in proc.stdout.splitlines():
        kind, rest = line.split(" ", 1)
        if kind == "log_dir":
            log_dir = rest
            continue
        name, value = rest.rsplit(" ", 1)
        runs.setdefault(kind, {})[name] = float(value)
    for prefix in ("", "validate_", "test_", "refit_"):
        for kind in ("logged", "callback"):
            runs.setdefault(prefix + kind, {})
    return runs, log_dir


def same(label, ours, theirs):
    assert sorted(ours) == sorted(theirs), f"{label}: fulmen {sorted(ours)} vs Lightning {sorted(theirs)}"
    for k in ours:
        assert math.isclose(ours[k], theirs[k], rel_tol=1e-6, abs_tol=1e-6), \
            f"{label} {k}: fulmen {ours[k]} vs Lightning {theirs[k]}"
    print(f"ok   {label}: {len(ours)} metrics equal: {sorted(ours)}")


def series(log_dir):
    """Every column of metrics.csv but step, as its (step, value) pairs in
    row order."""
    with open(os.path.join(log_dir, "metrics.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    columns = [c for c in rows[0] if c != "step"] if rows else []
    return {c: [(int(r["step"]), round(float(r[c]), 5)) for r in rows if r.get(c, "") != ""] for c in columns}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--binary", required=True)
    p.add_argument("--work")
    a = p.parse_args()
    if a.work:
        shutil.rmtree(a.work, ignore_errors=True)
        os.makedirs(a.work)
        work = a.work
    else:
        work = tempfile.mkdtemp(prefix="fulmen-hook-log-parity-")
    ours = fulmen_side(os.path.abspath(a.binary), os.path.join(work, "fulmen"))
    theirs = lightning_side(os.path.join(work, "lightning"))
    assert sorted(ours[0]) == sorted(theirs[0]), f"runs: fulmen {sorted(ours[0])} vs Lightning {sorted(theirs[0])}"
    for label in sorted(theirs[0]):
        same(label, ours[0][label], theirs[0][label])
    s_ours, s_theirs = series(ours[1]), series(theirs[1])
    assert sorted(s_ours) == sorted(s_theirs), f"metrics.csv columns: fulmen {sorted(s_ours)} vs Lightning {sorted(s_theirs)}"
    for c in s_theirs:
        assert s_ours[c] == s_theirs[c], f"metrics.csv column {c}: fulmen {s_ours[c]} vs Lightning {s_theirs[c]}"
    print(f"ok   metrics.csv: the (step, value) series of all {len(s_theirs)} columns equal")
    print(f"hook log parity: {len(theirs[0]) + 1} passed, 0 failed")


if __name__ == "__main__":
    main()

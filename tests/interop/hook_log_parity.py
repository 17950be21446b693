#!/usr/bin/env python3
"""Logging from hooks with Lightning's default flags against Lightning's Trainer.

    python hook_log_parity.py --binary build/interop/hook_log_parity [--work DIR]

The binary (tests/interop/hook_log_parity.c) fits a linear model for 2
epochs over 40 samples (batches 16, 16, 8), validating on the same loader,
and logs from on_train_batch_end (default: on_step; and on_step +
on_epoch), on_before_optimizer_step (default: on_step),
on_validation_batch_end (default: on_epoch, the mean weighted by batch
size), on_train_epoch_start (on_epoch) and training_step, values that
depend only on the loop's position. The same module on Lightning's Trainer
must give the same trainer.logged_metrics and trainer.callback_metrics
(same names, values equal to float32 precision) and the same (step, value)
series of every hook-logged column in metrics.csv.
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

COLUMNS = ["tbe", "tbe2_step", "tbe2_epoch", "bos", "vbe", "tes", "ts"]


def data():
    y = torch.tensor([i % 2 for i in range(40)], dtype=torch.int64)
    x = torch.tensor([[(1.5 if i % 2 else -1.5) + math.sin(i * 1.7), (1.5 if i % 2 else -1.5) + math.cos(i * 2.3)]
                      for i in range(40)], dtype=torch.float32)
    return DataLoader(TensorDataset(x, y), batch_size=16, shuffle=False)


class Module(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2, 2))

    def training_step(self, batch, batch_idx):
        self.log("ts", float(batch_idx))
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def validation_step(self, batch, batch_idx):
        return None

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
    loader = data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(Module(), loader, loader)
    as_floats = lambda d: {k: float(v) for k, v in d.items()}
    return as_floats(trainer.logged_metrics), as_floats(trainer.callback_metrics), logger.log_dir


def fulmen_side(binary, work):
    proc = subprocess.run([binary, work], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{binary} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    logged, callback, log_dir = {}, {}, None
    for line in proc.stdout.splitlines():
        kind, rest = line.split(" ", 1)
        if kind == "log_dir":
            log_dir = rest
            continue
        name, value = rest.rsplit(" ", 1)
        (logged if kind == "logged" else callback)[name] = float(value)
    return logged, callback, log_dir


def same(label, ours, theirs):
    assert sorted(ours) == sorted(theirs), f"{label}: fulmen {sorted(ours)} vs Lightning {sorted(theirs)}"
    for k in ours:
        assert math.isclose(ours[k], theirs[k], rel_tol=1e-6, abs_tol=1e-6), \
            f"{label} {k}: fulmen {ours[k]} vs Lightning {theirs[k]}"
    print(f"ok   {label}: {len(ours)} metrics equal: {sorted(ours)}")


def series(log_dir):
    with open(os.path.join(log_dir, "metrics.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    return {c: [(int(r["step"]), round(float(r[c]), 5)) for r in rows if r.get(c, "") != ""] for c in COLUMNS}


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
    same("logged_metrics", ours[0], theirs[0])
    same("callback_metrics", ours[1], theirs[1])
    s_ours, s_theirs = series(ours[2]), series(theirs[2])
    for c in COLUMNS:
        assert s_ours[c] == s_theirs[c], f"metrics.csv column {c}: fulmen {s_ours[c]} vs Lightning {s_theirs[c]}"
    print(f"ok   metrics.csv: the (step, value) series of {COLUMNS} equal")
    print("hook log parity: 3 passed, 0 failed")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The files fulmen's ModelCheckpoint writes against Lightning's own.

    python checkpoint_names_parity.py --binary build/interop/checkpoint_names_parity [--work DIR]

For each case, Lightning's Trainer and fulmen's (tests/interop/
checkpoint_names_parity.c) fit a small classifier on 32 samples in batches
of 8 (4 steps per epoch, no validation) with the same ModelCheckpoint
options, into a fresh folder each; the folders must then hold the same
names, and a symlink in one must be a symlink to the same name in the
other:

- "versions": filename "fixed", two fits into the same folder (fixed.ckpt,
  fixed-v1.ckpt);
- "no_versions": the same with enable_version_counter=False (fixed.ckpt,
  overwritten);
- "link": save_last="link", 2 epochs (last.ckpt links to the newest);
- "exception": save_on_exception=True, save_last=True, the training step
  failing at global step 2;
- "time": train_time_interval of one microsecond, save_top_k=-1 (every
  training batch saves).
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from datetime import timedelta

import torch
import torch.nn as nn
import torch.nn.functional as F

SAMPLES = 32
BATCH = 8
FAIL_AT = 2

# case: (epochs, fits, ModelCheckpoint kwargs, fail at step)
CASES = {
    "versions": (1, 2, dict(filename="fixed"), None),
    "no_versions": (1, 2, dict(filename="fixed", enable_version_counter=False), None),
    "link": (2, 1, dict(save_last="link"), None),
    "exception": (1, 1, dict(save_on_exception=True, save_last=True), FAIL_AT),
    "time": (1, 1, dict(train_time_interval=timedelta(microseconds=1), save_top_k=-1), None),
}


def listing(folder):
    """{name: link target or None} of the folder's entries."""
    out = {}
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        out[name] = os.readlink(path) if os.path.islink(path) else None
    return out


def lightning_fit(folder, epochs, kwargs, fail_at):
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import ModelCheckpoint

    class Net(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(2, 2)

        def training_step(self, batch, _):
            if fail_at is not None and self.trainer.global_step == fail_at:
                raise RuntimeError("planned failure")
            x, y = batch
            return F.cross_entropy(self.layer(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    torch.manual_seed(0)
    x = torch.randn(SAMPLES, 2)
    y = torch.arange(SAMPLES) % 2
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=BATCH)
    trainer = pl.Trainer(max_epochs=epochs, logger=False, enable_progress_bar=False, enable_model_summary=False,
                         callbacks=[ModelCheckpoint(dirpath=folder, **kwargs)], accelerator="cpu", devices=1)
    try:
        trainer.fit(Net(), loader)
    except RuntimeError as e:
        if "planned failure" not in str(e):
            raise


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--work", default=None)
    args = ap.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="fulmen-ckpt-names-")
    os.makedirs(work, exist_ok=True)
    failed = False
    for case, (epochs, fits, kwargs, fail_at) in CASES.items():
        theirs, ours = os.path.join(work, case, "lightning"), os.path.join(work, case, "fulmen")
        for d in (theirs, ours):
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(d)
        for _ in range(fits):
            lightning_fit(theirs, epochs, kwargs, fail_at)
        run = subprocess.run([args.binary, case, ours], capture_output=True, text=True)
        if run.returncode != 0:
            print(f"{case}: fulmen failed ({run.returncode}): {run.stderr.strip()}")
            failed = True
            continue
        want, got = listing(theirs), listing(ours)
        if want != got:
            print(f"{case}: Lightning wrote {want}, fulmen {got}")
            failed = True
        else:
            print(f"{case}: {got}")
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    if failed:
        sys.exit(1)
    print("checkpoint names: fulmen writes what Lightning writes")


if __name__ == "__main__":
    main()

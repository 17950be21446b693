#!/usr/bin/env python3
"""fulmen's LightningDataModule against Lightning's own Trainer.

    python datamodule_parity.py --binary build/interop/datamodule_parity [--work DIR]

An MLP (Linear(32, 64), ReLU, Linear(64, 10)) with the same first weights,
trained by SGD with momentum (one CPU thread) for 2 epochs on a datamodule's
train_dataloader (176 samples, batches of 16, in order) and validated on its
val_dataloader (the first 64), then validated, tested and predicted with
the same datamodule. Both sides record the datamodule's calls (name and
stage) and every training step's loss: the call sequences must be equal
and the losses equal to 1e-6. No sanity check runs (Lightning calls
val_dataloader for it before train_dataloader; fulmen calls
train_dataloader first, for estimated_stepping_batches).
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

FEATURES = 32
CLASSES = 10
SAMPLES = 176
VAL = 64
BATCH = 16
EPOCHS = 2


def build():
    return nn.Sequential(nn.Linear(FEATURES, 64), nn.ReLU(), nn.Linear(64, CLASSES))


def lightning_run(init, x, y):
    """Lightning's datamodule calls and training losses."""
    import lightning.pytorch as pl
    from torch.utils.data import DataLoader, TensorDataset

    events, losses = [], []

    class ParityData(pl.LightningDataModule):
        def prepare_data(self):
            events.append("prepare_data")

        def setup(self, stage):
            events.append(f"setup {getattr(stage, 'value', stage)}")

        def teardown(self, stage):
            events.append(f"teardown {getattr(stage, 'value', stage)}")

        def train_dataloader(self):
            events.append("train_dataloader")
            return DataLoader(TensorDataset(x, y), batch_size=BATCH)

        def val_dataloader(self):
            events.append("val_dataloader")
            return DataLoader(TensorDataset(x[:VAL], y[:VAL]), batch_size=BATCH)

        def test_dataloader(self):
            events.append("test_dataloader")
            return DataLoader(TensorDataset(x[:VAL], y[:VAL]), batch_size=BATCH)

        def predict_dataloader(self):
            events.append("predict_dataloader")
            return DataLoader(TensorDataset(x[:VAL], y[:VAL]), batch_size=BATCH)

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = build()
            self.model.load_state_dict(load_file(init))

        def training_step(self, batch, batch_idx):
            loss = F.cross_entropy(self.model(batch[0]), batch[1])
            losses.append(loss.item())
            return loss

        def validation_step(self, batch, batch_idx):
            self.log("val_loss", F.cross_entropy(self.model(batch[0]), batch[1]))

        def test_step(self, batch, batch_idx):
            self.log("test_loss", F.cross_entropy(self.model(batch[0]), batch[1]))

        def predict_step(self, batch, batch_idx):
            return self.model(batch[0])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)

    trainer = pl.Trainer(max_epochs=EPOCHS, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                         num_sanity_val_steps=0, enable_progress_bar=False, enable_model_summary=False)
    module, data = Module(), ParityData()
    trainer.fit(module, datamodule=data)
    trainer.validate(module, datamodule=data, verbose=False)
    trainer.test(module, datamodule=data, verbose=False)
    trainer.predict(module, datamodule=data)
    return events, losses


def fulmen_run(binary, work):
    events = os.path.join(work, "events.txt")
    losses = os.path.join(work, "losses.txt")
    args = [binary, os.path.join(work, "init.safetensors"), os.path.join(work, "x.f32"), os.path.join(work, "y.i64"),
            str(SAMPLES), str(VAL), str(BATCH), str(EPOCHS), events, losses]
    done = subprocess.run(args, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"datamodule_parity failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    with open(events) as f:
        got_events = [line.rstrip("\n") for line in f]
    with open(losses) as f:
        got_losses = [float(line) for line in f]
    return got_events, got_losses


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--work")
    args = parser.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="datamodule-parity-")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    torch.set_num_threads(1)
    torch.manual_seed(11)
    x = torch.randn(SAMPLES, FEATURES)
    y = torch.randint(0, CLASSES, (SAMPLES,))
    x.numpy().tofile(os.path.join(work, "x.f32"))
    y.numpy().tofile(os.path.join(work, "y.i64"))
    init = os.path.join(work, "init.safetensors")
    save_file({k: v.contiguous() for k, v in build().state_dict().items()}, init)
    want_events, want_losses = lightning_run(init, x, y)
    events, losses = fulmen_run(args.binary, work)
    if events != want_events:
        raise SystemExit(f"datamodule calls differ:\n  fulmen:    {events}\n  Lightning: {want_events}")
    print(f"datamodule calls: {len(events)} equal ({', '.join(events)})")
    if len(losses) != len(want_losses) or len(losses) != EPOCHS * SAMPLES // BATCH:
        raise SystemExit(f"{len(losses)} training losses, Lightning {len(want_losses)}")
    worst = max(abs(a - b) for a, b in zip(losses, want_losses))
    print(f"losses: {len(losses)} steps, largest difference {worst:g}")
    if worst > 1e-6:
        raise SystemExit("losses differ from Lightning's")
    print("datamodule parity: ok")


if __name__ == "__main__":
    sys.exit(main())

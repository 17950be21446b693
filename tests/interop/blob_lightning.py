"""What the logger checks share: the Lightning twin of
tests/interop/blob_fit.h's fit (an MLP 2-8-2 with tanh on 32 two-blob
points in batches of 8, train_loss logged on step and epoch, val_loss, SGD
with lr 0.1, 2 epochs with every step logged, seed 3, one thread), running
the C side, and reading a CSVLogger's rows."""
import csv
import math
import os
import subprocess
import sys

import torch
import torch.nn.functional as F


def blob_fit(save, loggers):
    """Fits the blob MLP in Lightning under `save` with `loggers`; returns
    the trainer."""
    import lightning as L
    from torch.utils.data import DataLoader, TensorDataset

    class Blob(L.LightningModule):
        def __init__(self, lr=0.1, hidden=8):
            super().__init__()
            self.save_hyperparameters()
            self.net = torch.nn.Sequential(torch.nn.Linear(2, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))

        def training_step(self, batch, _):
            x, y = batch
            loss = F.cross_entropy(self.net(x), y)
            self.log("train_loss", loss, on_step=True, on_epoch=True)
            return loss

        def validation_step(self, batch, _):
            x, y = batch
            self.log("val_loss", F.cross_entropy(self.net(x), y))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    y = torch.tensor([i % 2 for i in range(32)], dtype=torch.int64)
    x = torch.tensor([[(1.5 if i % 2 else -1.5) + math.sin(i * 1.7), (1.5 if i % 2 else -1.5) + math.cos(i * 2.3)]
                      for i in range(32)], dtype=torch.float32)
    loader = DataLoader(TensorDataset(x, y), batch_size=8)
    torch.set_num_threads(1)
    L.seed_everything(3, verbose=False)
    trainer = L.Trainer(default_root_dir=save, max_epochs=2, log_every_n_steps=1, enable_progress_bar=False,
                        enable_model_summary=False, logger=loggers)
    trainer.fit(Blob(), loader, loader)
    return trainer


def run_binary(binary, out, mode):
    """Runs `binary OUT MODE`; its "key value" lines as {key: [values]}
    (a failure prints its output and exits 1)."""
    os.makedirs(out, exist_ok=True)
    res = subprocess.run([binary, out, mode], capture_output=True, text=True, timeout=300)
    if res.returncode != 0:
        print(res.stdout, res.stderr)
        sys.exit(1)
    lines = {}
    for line in res.stdout.splitlines():
        key, _, value = line.partition(" ")
        lines.setdefault(key, []).append(value)
    return lines


def csv_rows(log_dir):
    """The rows of a CSVLogger's metrics.csv, as floats."""
    with open(os.path.join(log_dir, "metrics.csv"), newline="") as f:
        return [{k: float(v) for k, v in row.items() if v != ""} for row in csv.DictReader(f)]

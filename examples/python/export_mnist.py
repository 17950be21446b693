"""Exports a Lightning MNIST classifier as a torch.export archive (.pt2)
for fulmen's C++ and Go examples (examples/cpp/train_exported.cpp,
examples/go/train_exported) to train.

The module is an ordinary LightningModule: a small CNN (two convolutions
with BatchNorm, dropout before the classifier) on 784 pixels scaled to
[0, 1], as fulmen's CSV loader gives MNIST-5k. python/fulmen_export.py
writes three programs sharing one state:

  training_step(batch)    -> {"loss": ..., "acc": ...}   (training mode)
  validation_step(batch)  -> {"loss": ..., "acc": ...}   (evaluation mode)
  forward(pixels)         -> logits [N, 10]              (evaluation mode)

where batch = (pixels [N, 784] float32, labels [N] int64), any N >= 1.
The optimizer is the host's: the C++ and Go programs build Adam with the
learning rate configure_optimizers gives here.

    python examples/python/export_mnist.py --out mnist.pt2 [--seed 0]
"""
import argparse
import os
import sys

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from fulmen_export import export_for_fulmen  # noqa: E402

LEARNING_RATE = 2e-3


class MnistNet(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        )
        self.head = nn.Sequential(nn.Flatten(), nn.Dropout(0.1), nn.Linear(16 * 7 * 7, 10))

    def forward(self, pixels):
        return self.head(self.features(pixels.reshape(-1, 1, 28, 28)))

    def _step(self, batch):
        pixels, labels = batch
        logits = self(pixels)
        loss = F.cross_entropy(logits, labels)
        acc = (logits.argmax(dim=1) == labels).float().mean()
        return loss, acc

    def training_step(self, batch, batch_idx):
        loss, acc = self._step(batch)
        self.log("train_loss", loss)
        return {"loss": loss, "acc": acc}

    def validation_step(self, batch, batch_idx):
        loss, acc = self._step(batch)
        self.log_dict({"val_loss": loss, "val_acc": acc})
        return {"loss": loss, "acc": acc}

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=LEARNING_RATE)


def export(path, seed=0):
    """Builds the module from `seed`, writes its programs to `path` and
    returns the module."""
    torch.manual_seed(seed)
    module = MnistNet()
    example = (torch.rand(8, 784), torch.randint(0, 10, (8,)))
    export_for_fulmen(module, example, path, programs=("training_step", "validation_step", "forward"))
    return module


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="the .pt2 to write")
    parser.add_argument("--seed", type=int, default=0, help="seeds the initial weights")
    args = parser.parse_args()
    export(args.out, args.seed)
    print(f"export_mnist: wrote {args.out}")


if __name__ == "__main__":
    main()

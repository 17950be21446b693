"""Exports a tabular classifier as TorchScript for fulmen to fine-tune.

The model takes two inputs, a categorical column (int64 indices, through an
nn.Embedding) and numeric features (float32, through nn.BatchNorm1d), and
has dropout, so it shows everything a TorchScript model brings along:
buffers (the BatchNorm's running statistics), train/eval behaviour, and
several scripted methods. Besides `forward`, it scripts Lightning-style
steps that a C, C++ or Go program calls by name:

  training_step(batch, batch_idx)   -> {"loss": ..., "acc": ...}
  validation_step(batch, batch_idx) -> {"loss": ..., "acc": ...}
  predict_step(category, numeric)   -> (probabilities, classes)

where batch = (category, numeric, target).

    python examples/python/export_tabular.py --out tabular.pt \
        --categories 6 --numeric 7 --classes 2 [--seed 0]
"""
import argparse
from typing import Dict, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class TabularNet(nn.Module):
    def __init__(self, categories: int, numeric: int, classes: int, embed: int = 4, hidden: int = 32):
        super().__init__()
        self.embedding = nn.Embedding(categories, embed)
        self.norm = nn.BatchNorm1d(numeric)
        self.body = nn.Sequential(
            nn.Linear(embed + numeric, hidden),
            nn.ReLU(),
            nn.Dropout(0.1),
            nn.Linear(hidden, classes),
        )

    def forward(self, category: Tensor, numeric: Tensor) -> Tensor:
        x = torch.cat([self.embedding(category), self.norm(numeric)], dim=1)
        return self.body(x)

    def _step(self, batch: Tuple[Tensor, Tensor, Tensor]) -> Dict[str, Tensor]:
        category, numeric, target = batch
        logits = self.forward(category, numeric)
        loss = F.cross_entropy(logits, target)
        acc = (logits.argmax(dim=1) == target).float().mean()
        return {"loss": loss, "acc": acc}

    @torch.jit.export
    def training_step(self, batch: Tuple[Tensor, Tensor, Tensor], batch_idx: int) -> Dict[str, Tensor]:
        return self._step(batch)

    @torch.jit.export
    def validation_step(self, batch: Tuple[Tensor, Tensor, Tensor], batch_idx: int) -> Dict[str, Tensor]:
        return self._step(batch)

    @torch.jit.export
    def predict_step(self, category: Tensor, numeric: Tensor) -> Tuple[Tensor, Tensor]:
        probs = torch.softmax(self.forward(category, numeric), dim=1)
        return probs, probs.argmax(dim=1)


def export(path: str, categories: int, numeric: int, classes: int, seed: int = 0) -> nn.Module:
    """Builds the model from `seed`, saves it scripted to `path`, returns it."""
    torch.manual_seed(seed)
    model = TabularNet(categories, numeric, classes)
    torch.jit.script(model).save(path)
    return model


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--categories", type=int, required=True)
    parser.add_argument("--numeric", type=int, required=True)
    parser.add_argument("--classes", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    export(args.out, args.categories, args.numeric, args.classes, args.seed)


if __name__ == "__main__":
    main()

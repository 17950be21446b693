"""Exports a tabular classifier for fulmen to fine-tune: as a torch.export
archive (.pt2, the recommended form) or as TorchScript (.pt).

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

An --out ending in .pt2 writes the model with python/fulmen_export.py
instead (torch.jit.script is deprecated upstream): programs training_step
and validation_step taking the batch only (batch_idx is baked in as 0),
and forward(category, numeric), each in the mode it runs in (training
mode for training_step, evaluation mode for the others). predict_step,
whose arguments are not a batch, is left out: the probabilities are
softmax(forward(...)). Any batch size from 1 runs.

    python examples/python/export_tabular.py --out tabular.pt2 \
        --categories 6 --numeric 7 --classes 2 [--seed 0]
"""
import argparse
import os
import sys
from typing import Dict, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from fulmen_export import export_for_fulmen  # noqa: E402


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
    """Builds the model from `seed`, saves it to `path` (a torch.export
    archive when `path` ends in .pt2, else TorchScript), returns it."""
    torch.manual_seed(seed)
    model = TabularNet(categories, numeric, classes)
    if path.endswith(".pt2"):
        export_pt2(model, path, categories, numeric, classes)
    else:
        torch.jit.script(model).save(path)
    return model


def export_pt2(model: nn.Module, path: str, categories: int, numeric: int, classes: int) -> None:
    """Writes `model`'s training_step, validation_step and forward to the
    .pt2 at `path` (python/fulmen_export.py); the example batch only gives
    the shapes and dtypes, and the model's weights are left as they were."""
    g = torch.Generator().manual_seed(0)
    category = torch.randint(0, categories, (8,), generator=g)
    values = torch.randn(8, numeric, generator=g)
    target = torch.randint(0, classes, (8,), generator=g)
    export_for_fulmen(model, (category, values, target), path,
                      programs=("training_step", "validation_step", "forward"), forward_example=(category, values))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="a .pt2 (torch.export) or .pt (TorchScript) file")
    parser.add_argument("--categories", type=int, required=True)
    parser.add_argument("--numeric", type=int, required=True)
    parser.add_argument("--classes", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    export(args.out, args.categories, args.numeric, args.classes, args.seed)


if __name__ == "__main__":
    main()

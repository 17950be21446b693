#!/usr/bin/env python3
"""The order of the hooks fulmen calls against Lightning's own Trainer.

    python hook_order_parity.py --binary build/interop/hook_order_parity [--work DIR]

The same run on both sides (tests/interop/hook_order_parity.c): a 4-8-2
MLP fit for 2 epochs over 3 training batches validating on 2 (with the
sanity check), then validate, test and predict over 2 batches each. A
callback records every Callback hook ("cb:<name>") and the module every
LightningModule hook it overrides ("lm:<name>"; fulmen's module also
receives the Callback-only hooks, which are left out), as Lightning's own
tests_pytorch/models/test_hooks.py does: every hook is overridden to record
the call and then run Lightning's default. The two sequences, restricted
to the hooks fulmen implements, must be equal; the Lightning hooks fulmen
does not have are listed for information.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.core.hooks import CheckpointHooks, DataHooks, ModelHooks

# Hooks fulmen names besides its fulmen_hook values (module slots).
FULMEN_SLOTS = {"configure_callbacks", "configure_model", "configure_optimizers"}
# LightningModule hooks not recorded: the loaders come from the Trainer's
# arguments, and the legacy sharded hook must not be overridden with
# configure_model.
NOT_WRAPPED = {
    "train_dataloader",
    "val_dataloader",
    "test_dataloader",
    "predict_dataloader",
    "configure_sharded_model",
}


def module_hook_names():
    names = set()
    for cls in (ModelHooks, DataHooks, CheckpointHooks):
        names |= {n for n, v in vars(cls).items() if callable(v) and not n.startswith("_")}
    names |= FULMEN_SLOTS
    return sorted(names - NOT_WRAPPED)


def callback_hook_names():
    return sorted(
        n
        for n, v in vars(Callback).items()
        if callable(v) and (n.startswith("on_") or n in ("setup", "teardown"))
    )


def recording_class(base, names, prefix, log):
    """A subclass of `base` whose hooks `names` append "<prefix>:<name>" to
    `log`, then run the base's own."""

    def wrap(name):
        def hook(self, *args, **kwargs):
            log.append(f"{prefix}:{name}")
            return getattr(super(cls, self), name)(*args, **kwargs)

        hook.__name__ = name
        return hook

    cls = type(f"Recording{base.__name__}", (base,), {n: wrap(n) for n in names})
    return cls


class MLP(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))

    def _loss(self, batch):
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def training_step(self, batch, batch_idx):
        return self._loss(batch)

    def validation_step(self, batch, batch_idx):
        self.log("loss", self._loss(batch))

    def test_step(self, batch, batch_idx):
        self.log("loss", self._loss(batch))

    def predict_step(self, batch, batch_idx):
        return self.net(batch[0])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def loader(n):
    x = torch.randn(n, 4)
    y = torch.arange(n) % 2
    return DataLoader(TensorDataset(x, y), batch_size=4)


def lightning_sequence(work):
    torch.manual_seed(0)
    log = []
    module = recording_class(MLP, module_hook_names(), "lm", log)()
    recorder = recording_class(Callback, callback_hook_names(), "cb", log)()
    train, evaluation = loader(12), loader(8)
    trainer = pl.Trainer(
        max_epochs=2,
        accelerator="cpu",
        devices=1,
        callbacks=[recorder],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=2,
        default_root_dir=work,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        log.append("run:fit")
        trainer.fit(module, train, evaluation)
        log.append("run:validate")
        trainer.validate(module, evaluation, verbose=False)
        log.append("run:test")
        trainer.test(module, evaluation, verbose=False)
        log.append("run:predict")
        trainer.predict(module, evaluation)
    return log


def fulmen_sequence(binary, work):
    out = subprocess.run([binary], cwd=work, check=True, capture_output=True, text=True)
    return [line for line in out.stdout.splitlines() if line]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--work")
    args = ap.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="fulmen-hook-order-")
    os.makedirs(work, exist_ok=True)
    binary = os.path.abspath(args.binary)

    theirs = lightning_sequence(work)
    lines = fulmen_sequence(binary, work)
    known = {line.split(":", 1)[1] for line in lines if line.startswith("known:")} | FULMEN_SLOTS
    # fulmen's module's on_hook receives every fulmen_hook; Lightning's
    # LightningModule lacks some (on_sanity_check_start, ...): those calls
    # are left out, and listed.
    has = {"lm": set(module_hook_names()), "cb": set(callback_hook_names())}
    calls = [line for line in lines if not line.startswith("known:")]
    ours = [c for c in calls if c.startswith("run:") or c.split(":", 1)[1] in has[c.split(":", 1)[0]]]
    beyond = sorted({c for c in calls if c not in ours})
    if beyond:
        print("fulmen hooks Lightning's classes do not have (not compared):", ", ".join(beyond))
    expected = [e for e in theirs if e.split(":", 1)[1] in known or e.startswith("run:")]
    missing = sorted({e.split(":", 1)[1] for e in theirs} - known - {"fit", "validate", "test", "predict"})
    if missing:
        print("Lightning hooks called in this run that fulmen does not have:", ", ".join(missing))
    # Every hook fulmen has must be one Lightning called (a fulmen-only name
    # would be a wrong name).
    extra = sorted({e for e in ours} - set(theirs))
    if extra:
        print("fulmen called hooks Lightning did not:", ", ".join(extra))
        return 1
    if ours != expected:
        n = next((i for i, (a, b) in enumerate(zip(ours, expected)) if a != b), min(len(ours), len(expected)))
        print(f"hook order differs at call {n} (fulmen {len(ours)} calls, Lightning {len(expected)}):")
        for i in range(max(0, n - 5), min(max(len(ours), len(expected)), n + 6)):
            a = ours[i] if i < len(ours) else "-"
            b = expected[i] if i < len(expected) else "-"
            print(f"  {i:4d} {'  ' if a == b else '!='} fulmen {a:45s} lightning {b}")
        return 1
    print(f"hook order parity: {len(ours)} calls in fit, validate, test and predict match Lightning's")
    return 0


if __name__ == "__main__":
    sys.exit(main())

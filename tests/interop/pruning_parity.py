#!/usr/bin/env python3
"""fulmen's ModelPruning against Lightning's own callback.

    python pruning_parity.py --binary build/interop/pruning_parity [--work DIR]

An MLP (Linear(32, 64), ReLU, Linear(64, 10)) trained by SGD with momentum
on the same weights and batches (one CPU thread), validated on 64 samples
at each epoch end (so torch's pruned `weight` attribute, recomputed by each
forward, holds the latest weights when the epoch-end pruning ranks them):

- "l1_global": l1_unstructured, amount 0.3, global over every weight and
  bias, no lottery ticket reset, 3 epochs;
- "l1_local_count": l1_unstructured, 50 entries of each weight by itself,
  no reset, 3 epochs;
- "random_lth": random_unstructured, amount 0.25, global, Lightning's
  lottery ticket reset, 2 epochs, the same seed before fit.

Every training step's loss equals Lightning's bit for bit, and the final
weights equal Lightning's permanent ones. For "random_lth" only the masks
(which entries are 0) are compared at the end: Lightning 2.6 on the CPU
resets the weights to their first values only at the first pruning (its
copy of them then shares the trained weights' memory), fulmen at each
(as Lightning on a GPU), so the last reset differs by design.
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
SEED = 1234

CASES = {
    "l1_global": (3, dict(pruning_fn="l1_unstructured", amount=0.3, use_lottery_ticket_hypothesis=False)),
    "l1_local_count": (3, dict(pruning_fn="l1_unstructured", amount=50, parameter_names=["weight"],
                               use_global_unstructured=False, use_lottery_ticket_hypothesis=False)),
    "random_lth": (2, dict(pruning_fn="random_unstructured", amount=0.25)),
}


def build():
    return nn.Sequential(nn.Linear(FEATURES, 64), nn.ReLU(), nn.Linear(64, CLASSES))


def lightning_run(case, init, x, y):
    """Lightning's losses and final weights."""
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import ModelPruning

    losses = []

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

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)

    epochs, kwargs = CASES[case]
    # Loaders with their own generators: starting an epoch's iteration
    # draws their base seed from it, not from the global one that
    # random_unstructured draws its masks from.
    data = torch.utils.data.TensorDataset(x, y)
    val = torch.utils.data.TensorDataset(x[:VAL], y[:VAL])
    train_loader = torch.utils.data.DataLoader(data, batch_size=BATCH, generator=torch.Generator())
    val_loader = torch.utils.data.DataLoader(val, batch_size=BATCH, generator=torch.Generator())
    trainer = pl.Trainer(max_epochs=epochs, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                         callbacks=[ModelPruning(**kwargs)], enable_progress_bar=False, enable_model_summary=False)
    module = Module()
    torch.manual_seed(SEED)
    trainer.fit(module, train_loader, val_loader)
    return losses, {k: v.detach().clone().contiguous() for k, v in module.model.state_dict().items()}


def fulmen_run(binary, case, work):
    losses = os.path.join(work, f"{case}.losses")
    weights = os.path.join(work, f"{case}.safetensors")
    if os.path.exists(losses):
        os.remove(losses)
    args = [binary, case, os.path.join(work, "init.safetensors"), os.path.join(work, "x.f32"),
            os.path.join(work, "y.i64"), str(SAMPLES), str(VAL), str(BATCH), str(CASES[case][0]), str(SEED), losses,
            weights]
    done = subprocess.run(args, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{case}: pruning_parity failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    with open(losses) as f:
        return [float(line) for line in f], load_file(weights)


def compare(what, got, want):
    if len(got) != len(want):
        raise SystemExit(f"{what}: {len(got)} losses, want {len(want)}")
    worst = max((abs(a - b) for a, b in zip(got, want)), default=0.0)
    print(f"{what}: {len(got)} steps, largest difference {worst:g}")
    if worst != 0.0:
        raise SystemExit(f"{what}: losses differ from Lightning's")


def compare_weights(what, got, want, masks_only):
    if set(got) != set(want):
        raise SystemExit(f"{what}: weights {sorted(got)} != {sorted(want)}")
    for k in want:
        if masks_only:
            same = torch.equal(got[k] == 0, want[k] == 0)
            pruned = int((want[k] == 0).sum())
            if not same:
                raise SystemExit(f"{what}: {k} is pruned elsewhere ({pruned} zeros in Lightning's)")
        elif got[k].dtype != want[k].dtype or not torch.equal(got[k], want[k]):
            raise SystemExit(f"{what}: {k} differs by {(got[k].double() - want[k].double()).abs().max().item()}")
    print(f"{what}: {len(want)} tensors {'pruned alike' if masks_only else 'equal'}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--work")
    args = parser.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="pruning-parity-")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    torch.set_num_threads(1)
    torch.manual_seed(7)
    x = torch.randn(SAMPLES, FEATURES)
    y = torch.randint(0, CLASSES, (SAMPLES,))
    x.numpy().tofile(os.path.join(work, "x.f32"))
    y.numpy().tofile(os.path.join(work, "y.i64"))
    init = os.path.join(work, "init.safetensors")
    save_file({k: v.contiguous() for k, v in build().state_dict().items()}, init)
    for case, (epochs, _) in CASES.items():
        ref_losses, ref_weights = lightning_run(case, init, x, y)
        if len(ref_losses) != epochs * SAMPLES // BATCH:
            raise SystemExit(f"{case}: Lightning ran {len(ref_losses)} steps")
        if not any(bool((w == 0).any()) for w in ref_weights.values()):
            raise SystemExit(f"{case}: Lightning pruned nothing")
        losses, weights = fulmen_run(args.binary, case, work)
        compare(case, losses, ref_losses)
        compare_weights(case, weights, ref_weights, masks_only=case == "random_lth")
    print("pruning parity: ok")


if __name__ == "__main__":
    sys.exit(main())

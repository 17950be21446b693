#!/usr/bin/env python3
"""fulmen's StochasticWeightAveraging against Lightning's own callback.

    python swa_parity.py --binary build/interop/swa_parity [--work DIR]

For an MLP with a BatchNorm ("bn") and one without ("mlp"), the same
weights and batches (one CPU thread), SGD with momentum and a StepLR that
the callback swaps for SWALR (swa_lr 0.05 from epoch 2, 2 cosine
annealing epochs):

1. Every training step's loss equals Lightning's, bit for bit: the
   annealed learning rates, the epochs averaged and, with the BatchNorm,
   the extra forward-only epoch that recomputes its statistics.
2. The final weights equal Lightning's averaged parameters, and the
   BatchNorm's buffers Lightning's recomputed ones. (Lightning's own model
   then takes one optimizer step on stale gradients at the end of that
   epoch, moving it off the average; fulmen does not, see
   fulmen_trainer_add_stochastic_weight_averaging.)
3. A fit resumed from a checkpoint of epoch 1 (SWALR in place, one model
   averaged) gives the uninterrupted run's losses and weights: fulmen's
   from its safetensors file, from its Lightning-format file and from
   Lightning's own; Lightning's from fulmen's Lightning-format file and
   from its own.
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
BATCH = 16
EPOCHS = 4


def build(config):
    layers = [nn.Linear(FEATURES, 64)]
    if config == "bn":
        layers.append(nn.BatchNorm1d(64))
    return nn.Sequential(*layers, nn.ReLU(), nn.Linear(64, CLASSES))


def lightning_run(config, init, x, y, ckpt_dir=None, resume=None):
    """Lightning's losses, and the weights fulmen must end with."""
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import StochasticWeightAveraging

    losses = []

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = build(config)
            self.model.load_state_dict(load_file(init))

        def training_step(self, batch, batch_idx):
            loss = F.cross_entropy(self.model(batch[0]), batch[1])
            losses.append(loss.item())
            return loss

        def configure_optimizers(self):
            opt = torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)
            sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "epoch"}}

    swa = StochasticWeightAveraging(swa_lrs=0.05, swa_epoch_start=2, annealing_epochs=2)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=BATCH, shuffle=False)
    keep = [pl.callbacks.ModelCheckpoint(dirpath=ckpt_dir, filename="{epoch}", save_top_k=-1)] if ckpt_dir else []
    trainer = pl.Trainer(max_epochs=EPOCHS, accelerator="cpu", devices=1, logger=False,
                         enable_checkpointing=ckpt_dir is not None, callbacks=[swa, *keep], enable_progress_bar=False,
                         enable_model_summary=False)
    module = Module()
    trainer.fit(module, loader, ckpt_path=resume)
    # The averaged parameters; the buffers as the model holds them (the
    # BatchNorm's recomputed statistics).
    average = {k.removeprefix("model."): v for k, v in swa._average_model.state_dict().items()}
    params = {n for n, _ in module.model.named_parameters()}
    want = {k: (average[k] if k in params else v).detach().clone() for k, v in module.model.state_dict().items()}
    return losses, want


def fulmen_run(binary, config, work, name, extra=()):
    losses = os.path.join(work, f"{config}-{name}.losses")
    weights = os.path.join(work, f"{config}-{name}.safetensors")
    if os.path.exists(losses):
        os.remove(losses)
    args = [binary, config, os.path.join(work, f"{config}-init.safetensors"), os.path.join(work, "x.f32"),
            os.path.join(work, "y.i64"), str(SAMPLES), str(BATCH), str(EPOCHS), losses, weights, *extra]
    done = subprocess.run(args, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{config} {name}: swa_parity failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    with open(losses) as f:
        return [float(line) for line in f], load_file(weights)


def compare(what, got, want):
    if len(got) != len(want):
        raise SystemExit(f"{what}: {len(got)} losses, want {len(want)}")
    worst = max((abs(a - b) for a, b in zip(got, want)), default=0.0)
    print(f"{what}: {len(got)} steps, largest difference {worst:g}")
    if worst != 0.0:
        raise SystemExit(f"{what}: losses differ from Lightning's")


def compare_weights(what, got, want):
    if set(got) != set(want):
        raise SystemExit(f"{what}: weights {sorted(got)} != {sorted(want)}")
    for k in want:
        if got[k].dtype != want[k].dtype or not torch.equal(got[k], want[k]):
            raise SystemExit(f"{what}: {k} differs by {(got[k].double() - want[k].double()).abs().max().item()}")
    print(f"{what}: {len(want)} tensors equal")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--work")
    args = parser.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="swa-parity-")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    torch.set_num_threads(1)
    torch.manual_seed(7)
    x = torch.randn(SAMPLES, FEATURES)
    y = torch.randint(0, CLASSES, (SAMPLES,))
    x.numpy().tofile(os.path.join(work, "x.f32"))
    y.numpy().tofile(os.path.join(work, "y.i64"))
    for config in ("bn", "mlp"):
        init = os.path.join(work, f"{config}-init.safetensors")
        save_file({k: v.contiguous() for k, v in build(config).state_dict().items()}, init)
        ref_losses, ref_weights = lightning_run(config, init, x, y)
        epochs = EPOCHS + (config == "bn")
        if len(ref_losses) != epochs * SAMPLES // BATCH:
            raise SystemExit(f"{config}: Lightning ran {len(ref_losses)} steps")
        losses, weights = fulmen_run(args.binary, config, work, "whole")
        compare(f"{config} whole", losses, ref_losses)
        compare_weights(f"{config} whole", weights, ref_weights)
        tail = ref_losses[2 * SAMPLES // BATCH:]
        unused = os.path.join(work, "unused")
        for fmt in ("safetensors", "lightning"):
            ckpts = os.path.join(work, f"{config}-{fmt}")
            fulmen_run(args.binary, config, work, f"kept-{fmt}", [ckpts, "-", fmt])
            first = os.path.join(ckpts, "epoch=1.ckpt")
            losses, weights = fulmen_run(args.binary, config, work, f"resumed-{fmt}", [unused, first, fmt])
            compare(f"{config} resumed from its {fmt} epoch 1", losses, tail)
            compare_weights(f"{config} resumed from its {fmt} epoch 1", weights, ref_weights)
        theirs = os.path.join(work, f"{config}-theirs")
        lightning_run(config, init, x, y, ckpt_dir=theirs)
        first = os.path.join(theirs, "epoch=1.ckpt")
        losses, weights = fulmen_run(args.binary, config, work, "from-lightning", [unused, first, "lightning"])
        compare(f"{config} resumed from Lightning's epoch 1", losses, tail)
        compare_weights(f"{config} resumed from Lightning's epoch 1", weights, ref_weights)
        for name, path in (("its own", first), ("fulmen's", os.path.join(work, f"{config}-lightning", "epoch=1.ckpt"))):
            losses, weights = lightning_run(config, init, x, y, resume=path)
            compare(f"{config} Lightning resumed from {name} epoch 1", losses, tail)
            compare_weights(f"{config} Lightning resumed from {name} epoch 1", weights, ref_weights)
    print("swa parity: ok")


if __name__ == "__main__":
    sys.exit(main())

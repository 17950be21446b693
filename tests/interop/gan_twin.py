#!/usr/bin/env python3
"""Lightning's own Trainer as the twin of examples/c/gan.c, and their
per-step parity under manual optimization.

    python gan_twin.py --binary build/examples/gan --data mnist_5k.csv.gz
                       [--work DIR] [--batches 30]

fulmen's gan trains on the first BATCHES batches of MNIST-5k (no shuffle,
one thread) and writes its initial weights and each batch's generator
and discriminator losses. The same GAN as a LightningModule with
`automatic_optimization = False` (Lightning's GAN example: two Adam
optimizers, toggle_optimizer, manual_backward, step, zero_grad,
untoggle_optimizer) loads those weights with a strict load_state_dict and
is fitted by `lightning.pytorch.Trainer` on the same batches, drawing the
noise from the same seed: every loss must match fulmen's within 1e-5
relative. The optimizer step count (global_step) must match too.
"""
import argparse
import gzip
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from twin import compare, run_fulmen  # noqa: E402

NOISE, HIDDEN, PIXELS = 64, 256, 784
SEED, BATCH, LR = 42, 64, 2e-4


def mlp(n_in, n_out, last=None):
    layers = [nn.Linear(n_in, HIDDEN), nn.LeakyReLU(0.2), nn.Linear(HIDDEN, n_out)]
    return nn.Sequential(*layers, *([last] if last is not None else []))


def lightning_losses(init, pixels, batches):
    import lightning.pytorch as pl

    losses = []

    class Gan(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False
            self.generator = mlp(NOISE, PIXELS, nn.Tanh())
            self.discriminator = mlp(PIXELS, 1)
            self.load_state_dict(load_file(init), strict=True)

        def training_step(self, batch, batch_idx):
            (x,) = batch
            opt_g, opt_d = self.optimizers()
            real = x * 2.0 + -1.0
            z = torch.randn(x.shape[0], NOISE)
            ones = torch.full((x.shape[0], 1), 1.0)
            zeros = torch.full((x.shape[0], 1), 0.0)

            self.toggle_optimizer(opt_g)
            fake = self.generator(z)
            g_loss = F.binary_cross_entropy_with_logits(self.discriminator(fake), ones)
            self.manual_backward(g_loss)
            opt_g.step()
            opt_g.zero_grad()
            self.untoggle_optimizer(opt_g)

            self.toggle_optimizer(opt_d)
            real_loss = F.binary_cross_entropy_with_logits(self.discriminator(real), ones)
            fake_loss = F.binary_cross_entropy_with_logits(self.discriminator(fake.detach()), zeros)
            d_loss = (real_loss + fake_loss) * 0.5
            self.manual_backward(d_loss)
            opt_d.step()
            opt_d.zero_grad()
            self.untoggle_optimizer(opt_d)
            losses.extend([g_loss.item(), d_loss.item()])

        def configure_optimizers(self):
            return (torch.optim.Adam(self.generator.parameters(), lr=LR, betas=(0.5, 0.999)),
                    torch.optim.Adam(self.discriminator.parameters(), lr=LR, betas=(0.5, 0.999)))

    # The loader has its own generator so that it draws nothing from the
    # global one, which makes the noise (as fulmen's loader draws nothing).
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(pixels), batch_size=BATCH, shuffle=False,
                                         generator=torch.Generator())
    trainer = pl.Trainer(max_epochs=1, limit_train_batches=batches, accelerator="cpu", devices=1, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    module = Gan()
    torch.manual_seed(SEED)
    trainer.fit(module, loader)
    return losses, trainer.global_step


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--binary", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--work")
    p.add_argument("--batches", type=int, default=30)
    a = p.parse_args()
    torch.set_num_threads(1)
    os.environ["OMP_NUM_THREADS"] = "1"
    init, theirs = run_fulmen(a.binary, a.work, ["--data", a.data, "--epochs", "1", "--limit-batches", str(a.batches),
                                                 "--seed", str(SEED), "--threads", "1", "--no-shuffle"])
    with gzip.open(a.data, "rt") as f:
        rows = np.loadtxt(f, delimiter=",", dtype=np.float64)
    # fulmen's CSV scaling: each value / 255 in double, stored as float32.
    pixels = torch.from_numpy((rows[:, :PIXELS] / 255.0).astype(np.float32))
    ours, steps = lightning_losses(init, pixels, a.batches)
    if steps != 2 * a.batches:
        sys.exit(f"Lightning took {steps} optimizer steps, expected {2 * a.batches}")
    compare("gan (Lightning manual optimization)", theirs, ours, f", {steps} optimizer steps")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The MNIST example's checkpoints in Lightning's format, both ways.

    python mnist_lightning_check.py --binary build/examples/mnist --data mnist_5k.csv.gz [--work DIR]
                                    [--accelerator cuda]

1. The example (C, or its Go twin) trains one epoch with its default
   checkpoint format, which is Lightning's.
2. torch.load(weights_only=True) reads its last.ckpt, and Lightning's own
   Trainer resumes it for a second epoch with the example's twin (the MLP
   held as `self.model`, SGD lr 0.1): the run starts at epoch 1 and global
   step 63 with fulmen's weights (its first loss is the trained model's,
   far below a fresh one's) and ends at step 126.
   With --accelerator cuda (the GPU kit) all three runs train on the GPU,
   and the checkpoints hold what each wrote from there (Lightning's tensors
   are saved located on cuda:0).
3. The example resumes Lightning's checkpoint (--resume PATH) for a third
   epoch: it trains that epoch only and improves on nothing it forgot (the
   accuracy stays that of a trained model).
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

STEPS_PER_EPOCH = 63  # 4,000 training rows in batches of 64


def run(args):
    done = subprocess.run(args, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return done.stdout


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--binary", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--work")
    p.add_argument("--accelerator", default="cpu")
    a = p.parse_args()
    work = a.work or tempfile.mkdtemp(prefix="fulmen-mnist-lightning.")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    torch.set_num_threads(2)

    ours = os.path.join(work, "fulmen")
    run([a.binary, "--data", a.data, "--epochs", "1", "--threads", "2", "--accelerator", a.accelerator, "--out", ours])
    last = os.path.join(ours, "checkpoints", "last.ckpt")
    ckpt = torch.load(last, weights_only=True)
    assert ckpt["epoch"] == 0 and ckpt["global_step"] == STEPS_PER_EPOCH, (ckpt["epoch"], ckpt["global_step"])
    assert sorted(ckpt["state_dict"]) == ["model.0.bias", "model.0.weight", "model.2.bias", "model.2.weight"]
    print(f"ok   torch.load reads fulmen's {os.path.basename(last)}: {sorted(ckpt)}")

    import lightning.pytorch as pl

    table = np.loadtxt(a.data, delimiter=",", dtype=np.float32)
    x = torch.from_numpy(table[:, :784] / 255.0)
    y = torch.from_numpy(table[:, 784]).long()
    held_out = torch.arange(len(y)) % 5 == 0
    losses = []

    class Twin(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))

        def training_step(self, batch, batch_idx):
            loss = F.cross_entropy(self.model(batch[0]), batch[1])
            losses.append(loss.item())
            return loss

        def validation_step(self, batch, batch_idx):
            logits = self.model(batch[0])
            self.log("val_acc", (logits.argmax(1) == batch[1]).float().mean())

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    def loader(mask, shuffle):
        return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x[mask], y[mask]), batch_size=64,
                                           shuffle=shuffle)

    theirs = os.path.join(work, "lightning")
    trainer = pl.Trainer(max_epochs=2, accelerator=a.accelerator, devices=1, logger=False, enable_progress_bar=False,
                         enable_model_summary=False,
                         callbacks=[pl.callbacks.ModelCheckpoint(dirpath=theirs, monitor="val_acc", mode="max",
                                                                 save_last=True)])
    trainer.fit(Twin(), loader(~held_out, True), loader(held_out, False), ckpt_path=last)
    assert trainer.global_step == 2 * STEPS_PER_EPOCH, trainer.global_step
    assert len(losses) == STEPS_PER_EPOCH, len(losses)
    assert losses[0] < 1.2, f"the resumed run starts from a loss of {losses[0]}: fulmen's weights were not used"
    print(f"ok   Lightning resumed fulmen's checkpoint: epoch 2 only, first loss {losses[0]:.3f}, "
          f"global step {trainer.global_step}")

    again = os.path.join(work, "fulmen-again")
    out = run([a.binary, "--data", a.data, "--epochs", "3", "--threads", "2", "--accelerator", a.accelerator,
               "--out", again,
               "--resume", os.path.join(theirs, "last.ckpt")])
    accuracy = float(re.search(r"final validation accuracy: ([0-9.]+)%", out).group(1))
    metrics = open(os.path.join(again, "lightning_logs", "version_0", "metrics.csv")).read().splitlines()
    epochs = {row.split(",")[metrics[0].split(",").index("epoch")] for row in metrics[1:]}
    assert epochs == {"2"}, f"fulmen trained epochs {sorted(epochs)}, expected only epoch 2"
    assert accuracy > 85.0, f"accuracy {accuracy}% after resuming two trained epochs"
    print(f"ok   fulmen resumed Lightning's checkpoint: epoch 3 only, validation accuracy {accuracy:.2f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())

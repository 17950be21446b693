#!/usr/bin/env python3
"""A LightningModule exported with Lightning's own `to_torchscript`, trained
by fulmen through its scripted training_step, loses exactly what
Lightning's Trainer loses training the module itself.

    python script_parity.py --binary build/interop/script_parity [--work DIR]

The module (an MLP with BatchNorm, its training_step exported with
@torch.jit.export) is seeded, exported, then trained EPOCHS epochs by
Lightning's Trainer on CPU (SGD lr 0.1, momentum 0.9, batches in order).
fulmen's script_parity loads the export and trains it the same way on the
same data: every step's loss must agree (relative 1e-6), and the trained
state_dict fulmen saves (BatchNorm statistics included) must hold the
weights Lightning's module ends with (1e-5).
"""
import argparse
import math
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from typing import Dict, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from twin import compare  # noqa: E402

ROWS = 96
FEATURES = 2
BATCH = 16
EPOCHS = 3
TOLERANCE = 1e-6


def build_module(losses):
    import lightning.pytorch as pl

    class Classifier(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(FEATURES, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 2))

        def forward(self, x: Tensor) -> Tensor:
            return self.net(x)

        @torch.jit.export
        def training_step(self, batch: Tuple[Tensor, Tensor], batch_idx: int) -> Dict[str, Tensor]:
            x, y = batch
            return {"loss": F.cross_entropy(self.forward(x), y)}

        def on_train_batch_end(self, outputs, batch, batch_idx):
            losses.append(outputs["loss"].item())

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)

    return Classifier()


def data():
    """Two features from sin / cos, as float32: class 1 where their sum is
    positive (handed to fulmen as raw files)."""
    x = torch.tensor([[math.sin(0.37 * i), math.cos(1.7 * i)] for i in range(ROWS)], dtype=torch.float32)
    y = (x.sum(dim=1) > 0).long()
    return x, y


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--binary", required=True)
    ap.add_argument("--work")
    args = ap.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="fulmen-script-parity-")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    torch.set_num_threads(1)
    import lightning.pytorch as pl

    ours = []
    torch.manual_seed(0)
    module = build_module(ours)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # to_torchscript is deprecated in Lightning 2.7
        scripted = module.to_torchscript()
    model_path = os.path.join(work, "model.pt")
    scripted.save(model_path)
    x, y = data()
    x.numpy().tofile(os.path.join(work, "x.f32"))
    y.numpy().tofile(os.path.join(work, "y.i64"))

    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=BATCH, shuffle=False)
    trainer = pl.Trainer(max_epochs=EPOCHS, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(module, loader)

    log, state = os.path.join(work, "losses.txt"), os.path.join(work, "state.safetensors")
    subprocess.run([args.binary, model_path, os.path.join(work, "x.f32"), os.path.join(work, "y.i64"), str(ROWS),
                    str(FEATURES), str(BATCH), str(EPOCHS), log, state], check=True,
                   env=dict(os.environ, OMP_NUM_THREADS="1"))
    with open(log) as f:
        theirs = [float(line) for line in f if line.strip()]
    if not ours:
        sys.exit("script_parity: Lightning ran no step")
    compare("script_parity", theirs, ours, tolerance=TOLERANCE)
    from safetensors.torch import load_file

    saved = load_file(state)
    mine = module.state_dict()
    if sorted(saved) != sorted(mine):
        sys.exit(f"script_parity: fulmen saved {sorted(saved)}, Lightning's module has {sorted(mine)}")
    far = max((saved[k].double() - mine[k].double()).abs().max().item() for k in mine)
    print(f"script_parity: trained state_dicts (BatchNorm buffers included) differ by {far:.2e}")
    if far > 1e-5 or int(saved["net.1.num_batches_tracked"]) != EPOCHS * (ROWS // BATCH):
        sys.exit("script_parity: fulmen's trained state differs from Lightning's")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The C++ and Go examples that train a torch.export archive
(examples/cpp/train_exported.cpp, examples/go/train_exported) end to end,
checked by PyTorch.

    python train_exported_check.py --binary build/examples/train_exported_cpp
                                   --data mnist_5k.csv.gz [--work DIR] [--epochs 2]

Exports examples/python/export_mnist.py's LightningModule (seed 0) with
python/fulmen_export.py, has the example train it on MNIST-5k for EPOCHS
epochs, then checks:
- it printed a line per epoch and its final validation accuracy, above
  MIN_ACCURACY (a tenth is chance);
- the model.safetensors it wrote loads strictly into the eager MnistNet
  (BatchNorm statistics included), whose loss and accuracy on the same
  validation rows (every fifth) are the ones the example printed;
- the weights were trained (they differ from the exported ones) and each
  BatchNorm tracked every training batch (EPOCHS * 63 for 4,000 rows).
"""
import argparse
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "python"))
import export_mnist  # noqa: E402

MIN_ACCURACY = 80.0
BATCH = 64
VAL_BATCH = 500
# Percentage points: two of the 1,000 validation rows (float rounding may
# flip a near tie of the argmax).
ACCURACY_TOLERANCE = 0.2
LOSS_TOLERANCE = 1e-4
# The example prints the loss with 4 decimals.
PRINTED_LOSS_ROUNDING = 5e-5


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--binary", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--work")
    ap.add_argument("--epochs", type=int, default=2)
    args = ap.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="fulmen-train-exported-")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    name = os.path.basename(args.binary)

    archive = os.path.join(work, "mnist.pt2")
    initial = export_mnist.export(archive, seed=0)
    out = os.path.join(work, "run")
    # Go's flag package takes --name as well as -name.
    result = subprocess.run([args.binary, "--model", archive, "--data", args.data, "--epochs", str(args.epochs),
                             "--threads", "2", "--out", out], check=True, stdout=subprocess.PIPE, text=True)
    print(result.stdout, end="")
    epochs = re.findall(r"^epoch (\d+):.* val_acc ", result.stdout, re.M)
    if epochs != [str(e + 1) for e in range(args.epochs)]:
        sys.exit(f"{name}: printed epochs {epochs}, not 1..{args.epochs} with their validation accuracy")
    final = re.search(r"^final validation accuracy: ([0-9.]+)% \(loss ([0-9.]+)\)", result.stdout, re.M)
    if final is None:
        sys.exit(f"{name}: no final validation accuracy printed")
    accuracy, loss = float(final.group(1)), float(final.group(2))
    if accuracy < MIN_ACCURACY:
        sys.exit(f"{name}: validation accuracy {accuracy}% after {args.epochs} epochs, below {MIN_ACCURACY}%")

    state = load_file(os.path.join(out, "model.safetensors"))
    model = export_mnist.MnistNet()
    model.load_state_dict(state, strict=True)
    model.eval()
    table = np.loadtxt(args.data, delimiter=",", dtype=np.float32)
    held_out = np.arange(len(table)) % 5 == 0
    x = torch.from_numpy(table[held_out, :784] / np.float32(255.0))
    y = torch.from_numpy(table[held_out, 784]).long()
    with torch.no_grad():
        logits = model(x)
    theirs_acc = 100.0 * (logits.argmax(1) == y).float().mean().item()
    # fulmen's val_loss: the mean of the batches' mean losses.
    batch_losses = [F.cross_entropy(logits[i:i + VAL_BATCH], y[i:i + VAL_BATCH]).item()
                    for i in range(0, len(y), VAL_BATCH)]
    theirs_loss = sum(batch_losses) / len(batch_losses)
    print(f"{name}: PyTorch with the trained weights: accuracy {theirs_acc:.2f}% (loss {theirs_loss:.4f}); "
          f"the example printed {accuracy:.2f}% (loss {loss:.4f})")
    if abs(theirs_acc - accuracy) > ACCURACY_TOLERANCE:
        sys.exit(f"{name}: PyTorch's accuracy with the saved weights differs from the printed one")
    if abs(theirs_loss - loss) > PRINTED_LOSS_ROUNDING + LOSS_TOLERANCE * theirs_loss:
        sys.exit(f"{name}: PyTorch's loss with the saved weights differs from the printed one")

    before = initial.state_dict()
    if all(torch.equal(before[k], state[k]) for k in before):
        sys.exit(f"{name}: the saved weights are the exported ones: nothing was trained")
    want = args.epochs * math.ceil(int((~held_out).sum()) / BATCH)
    tracked = {k: int(v) for k, v in state.items() if k.endswith("num_batches_tracked")}
    if sorted(set(tracked.values())) != [want]:
        sys.exit(f"{name}: num_batches_tracked {tracked}, want {want} each")
    print(f"{name}: trained {args.epochs} epochs; the saved state loads into the Python module and predicts "
          f"what fulmen validated")


if __name__ == "__main__":
    main()

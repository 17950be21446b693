#!/usr/bin/env python3
"""PyTorch reads what examples/c/finetune.c wrote, and predicts the same.

    python finetune_check.py --binary build/examples/finetune --data fair.csv
                             [--work DIR] [--epochs 8]

Exports examples/python/export_tabular.py's model as TorchScript, has
fulmen's finetune fine-tune it from C, then checks with PyTorch:
- torch.jit.load of the saved model.pt gives the probabilities fulmen
  wrote for every validation row (max abs difference <= 1e-6);
- the saved model.safetensors loads strictly (BatchNorm buffers included)
  into the eager TabularNet, which predicts the same;
- both hold the fine-tuned weights: they differ from the exported ones,
  and the BatchNorm tracked the batches it was trained on.
"""
import argparse
import csv
import os
import shutil
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import load_file

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "python"))
import export_tabular  # noqa: E402

TOLERANCE = 1e-6


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--binary", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--work")
    ap.add_argument("--epochs", type=int, default=8)
    args = ap.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="fulmen-finetune-")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    exported = os.path.join(work, "tabular.pt")
    original = export_tabular.export(exported, categories=6, numeric=7, classes=2, seed=0)
    run = os.path.join(work, "run")
    subprocess.run([args.binary, "--model", exported, "--data", args.data, "--out", run,
                    "--epochs", str(args.epochs)], check=True, stdout=subprocess.DEVNULL)

    with open(os.path.join(run, "predictions.csv")) as f:
        rows = list(csv.reader(f))[1:]
    category = torch.tensor([int(r[0]) for r in rows])
    numeric = torch.tensor([[float(v) for v in r[1:8]] for r in rows], dtype=torch.float32)
    theirs = torch.tensor([[float(v) for v in r[8:10]] for r in rows], dtype=torch.float32)

    scripted = torch.jit.load(os.path.join(run, "model.pt")).eval()
    with torch.no_grad():
        probs, _ = scripted.predict_step(category, numeric)
    check("torch.jit.load(model.pt)", probs, theirs)

    eager = export_tabular.TabularNet(6, 7, 2)
    state = load_file(os.path.join(run, "model.safetensors"))
    eager.load_state_dict(state, strict=True)
    eager.eval()
    with torch.no_grad():
        probs = torch.softmax(eager(category, numeric), dim=1)
    check("TabularNet + model.safetensors (strict)", probs, theirs)

    for name, t in scripted.state_dict().items():
        if not torch.equal(t, state[name]):
            sys.exit(f"model.pt and model.safetensors differ in {name}")
    before = original.state_dict()
    if all(torch.equal(before[k], state[k]) for k in before):
        sys.exit("the saved weights are the exported ones: nothing was fine-tuned")
    tracked = int(state["norm.num_batches_tracked"])
    if tracked == 0:
        sys.exit("the BatchNorm tracked no batch")
    print(f"finetune: {len(rows)} validation rows; the BatchNorm tracked {tracked} batches")


def check(name, ours, theirs):
    worst = (ours - theirs).abs().max().item()
    print(f"{name}: largest difference {worst:.2e}")
    if worst > TOLERANCE:
        sys.exit(f"{name}: predictions differ by {worst:.2e} > {TOLERANCE}")


if __name__ == "__main__":
    main()

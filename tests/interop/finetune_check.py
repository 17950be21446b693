#!/usr/bin/env python3
"""PyTorch reads what examples/c/finetune.c wrote, and predicts the same,
for the model given as a torch.export archive (.pt2) and as TorchScript.

    python finetune_check.py --binary build/examples/finetune --data fair.csv
                             [--work DIR] [--epochs 8] [--formats pt2,pt]

Writes examples/python/export_tabular.py's model (seed 0) as tabular.pt2
(python/fulmen_export.py) and as tabular.pt (torch.jit.script), has
fulmen's finetune fine-tune each from C, then checks with PyTorch, for
each:
- the saved model.safetensors loads strictly (BatchNorm buffers included)
  into the eager TabularNet, which gives the probabilities fulmen wrote for
  every validation row (max abs difference <= 1e-6);
- it holds the fine-tuned weights: they differ from the exported ones,
  and the BatchNorm tracked the batches it was trained on;
for the .pt2, the archive's own forward program, run by PyTorch with the
trained state_dict, gives the same probabilities; for the .pt,
torch.jit.load of the saved model.pt does, and its state equals
model.safetensors. Both runs train the same model with the same seed,
batches and ATen operators, so their probabilities agree within 1e-4.
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
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
import export_tabular  # noqa: E402
from fulmen_export import load_programs  # noqa: E402

TOLERANCE = 1e-6
# Between the .pt2 and the .pt runs: the same training, op for op, whose
# float rounding may differ (TorchScript's autodiff formulas).
CROSS_TOLERANCE = 1e-4
FORMATS = ("pt2", "pt")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--binary", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--work")
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--formats", default=",".join(FORMATS), help="comma-separated, of %(default)s")
    args = ap.parse_args()
    formats = [f for f in args.formats.split(",") if f]
    if not formats or any(f not in FORMATS for f in formats):
        ap.error(f"--formats takes some of {FORMATS}, got {args.formats!r}")
    work = args.work or tempfile.mkdtemp(prefix="fulmen-finetune-")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    probs = {fmt: check_run(args, work, fmt) for fmt in formats}
    if len(probs) == 2:
        worst = (probs["pt2"] - probs["pt"]).abs().max().item()
        print(f"finetune: the .pt2 and the .pt runs' probabilities differ by {worst:.2e}")
        if worst > CROSS_TOLERANCE:
            sys.exit(f"finetune: the .pt2 and the .pt runs differ by {worst:.2e} > {CROSS_TOLERANCE}: "
                     "the same model, seed and batches should train the same")


def check_run(args, work, fmt):
    """Exports the model as `fmt`, fine-tunes it with fulmen, checks what
    was written; returns the validation probabilities fulmen wrote."""
    exported = os.path.join(work, f"tabular.{fmt}")
    original = export_tabular.export(exported, categories=6, numeric=7, classes=2, seed=0)
    run = os.path.join(work, f"run-{fmt}")
    subprocess.run([args.binary, "--model", exported, "--data", args.data, "--out", run,
                    "--epochs", str(args.epochs)], check=True, stdout=subprocess.DEVNULL)

    with open(os.path.join(run, "predictions.csv")) as f:
        rows = list(csv.reader(f))[1:]
    category = torch.tensor([int(r[0]) for r in rows])
    numeric = torch.tensor([[float(v) for v in r[1:8]] for r in rows], dtype=torch.float32)
    theirs = torch.tensor([[float(v) for v in r[8:10]] for r in rows], dtype=torch.float32)

    state = load_file(os.path.join(run, "model.safetensors"))
    eager = export_tabular.TabularNet(6, 7, 2)
    eager.load_state_dict(state, strict=True)
    eager.eval()
    with torch.no_grad():
        probs = torch.softmax(eager(category, numeric), dim=1)
    check(f"{fmt}: TabularNet + model.safetensors (strict)", probs, theirs)

    if fmt == "pt":
        scripted = torch.jit.load(os.path.join(run, "model.pt")).eval()
        with torch.no_grad():
            probs, _ = scripted.predict_step(category, numeric)
        check("pt: torch.jit.load(model.pt)", probs, theirs)
        for name, t in scripted.state_dict().items():
            if not torch.equal(t, state[name]):
                sys.exit(f"model.pt and model.safetensors differ in {name}")
    else:
        forward = load_programs(exported)["forward"].module()
        forward.load_state_dict(state, strict=True)
        with torch.no_grad():
            probs = torch.softmax(forward(category, numeric), dim=1)
        check("pt2: the archive's forward + model.safetensors (strict)", probs, theirs)

    before = original.state_dict()
    if all(torch.equal(before[k], state[k]) for k in before):
        sys.exit(f"{fmt}: the saved weights are the exported ones: nothing was fine-tuned")
    tracked = int(state["norm.num_batches_tracked"])
    if tracked == 0:
        sys.exit(f"{fmt}: the BatchNorm tracked no batch")
    print(f"finetune ({fmt}): {len(rows)} validation rows; the BatchNorm tracked {tracked} batches")
    return theirs


def check(name, ours, theirs):
    worst = (ours - theirs).abs().max().item()
    print(f"{name}: largest difference {worst:.2e}")
    if worst > TOLERANCE:
        sys.exit(f"{name}: predictions differ by {worst:.2e} > {TOLERANCE}")


if __name__ == "__main__":
    main()

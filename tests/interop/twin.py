"""What the PyTorch twins of the examples share: running fulmen's program
with its initial weights and loss log, and comparing per-step losses."""
import os
import shutil
import subprocess
import sys
import tempfile

TOLERANCE = 1e-5


def run_fulmen(binary, work, flags):
    """Runs `binary` with `flags` plus --init-out / --loss-log / --out under a
    fresh `work` folder; returns (initial weights path, fulmen's losses)."""
    work = work or tempfile.mkdtemp(prefix="fulmen-twin-")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    init, log = os.path.join(work, "init.safetensors"), os.path.join(work, "losses.txt")
    subprocess.run([binary, *flags, "--init-out", init, "--loss-log", log, "--out", os.path.join(work, "run")],
                   check=True, stdout=subprocess.DEVNULL)
    with open(log) as f:
        return init, [float(line) for line in f if line.strip()]


def compare(name, theirs, ours, summary="", tolerance=TOLERANCE):
    """Exits with a message unless every step's loss agrees within `tolerance` (relative)."""
    if len(theirs) != len(ours):
        sys.exit(f"{name}: fulmen logged {len(theirs)} steps, the twin ran {len(ours)}")
    worst = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(theirs, ours))
    print(f"{name}: {len(ours)} steps, loss {ours[0]:.4f} -> {ours[-1]:.4f}{summary}; "
          f"largest relative difference {worst:.2e}")
    if worst > tolerance:
        for i, (a, b) in enumerate(zip(theirs, ours)):
            print(f"  step {i}: fulmen {a:.9g} torch {b:.9g}")
        sys.exit(f"{name}: losses differ by {worst:.2e} > {tolerance}")

#!/usr/bin/env python3
"""Saving 403 MB of weights: fulmen (torch.save's format, safetensors) and
the references (torch.save, safetensors.torch.save_file) side by side.

    python bench/save.py --binary build/bench/save_bench [--repeats 3] [--out bench/RESULTS-save.md]

Each contender runs in its own process: it builds a stack of six
4096x4096 linear layers (float32, 100.7M parameters), saves it REPEATS
times to a temporary folder and prints its best time; the peak RSS comes
from wait4 (the whole process: the model, libtorch, and whatever copies
the save makes). Nothing is timed in the tests; this only records.
"""
import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time

TORCH_SAVER = r"""
import sys, time, torch
from safetensors.torch import save_file
torch.set_num_threads(1)
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Linear(4096, 4096) for _ in range(6)])
state = model.state_dict()
path, repeats = sys.argv[1], int(sys.argv[2])
best = 1e30
for _ in range(repeats):
    start = time.perf_counter()
    if path.endswith(".pt"):
        torch.save(state, path)
    else:
        save_file(state, path)
    best = min(best, time.perf_counter() - start)
print(f"best_s {best:.4f}")
"""


def run(cmd):
    """(best seconds, peak RSS in MiB) of one contender's process."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    out = proc.stdout.read()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{cmd[0]} failed: {out}")
    best = float(next(line.split()[1] for line in out.splitlines() if line.startswith("best_s")))
    return best, usage.ru_maxrss / 1024


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--binary", required=True)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "RESULTS-save.md"))
    a = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="fulmen-save-bench.") as work:
        for name, cmd in [
            ("fulmen, torch.save format (.pt)", [a.binary, os.path.join(work, "f.pt"), str(a.repeats)]),
            ("fulmen, safetensors", [a.binary, os.path.join(work, "f.safetensors"), str(a.repeats)]),
            ("torch.save", [sys.executable, "-c", TORCH_SAVER, os.path.join(work, "t.pt"), str(a.repeats)]),
            ("safetensors.torch.save_file",
             [sys.executable, "-c", TORCH_SAVER, os.path.join(work, "t.safetensors"), str(a.repeats)]),
        ]:
            best, rss = run(cmd)
            rows.append((name, best, rss))
            print(f"{name}: best {best:.3f} s, peak RSS {rss:.0f} MiB")
    cmdline = " ".join(["python", "bench/save.py", "--binary", a.binary, "--repeats", str(a.repeats)])
    with open(a.out, "w") as f:
        f.write("# Saving weights: fulmen and the references\n\n")
        f.write("`bench/c/save_bench.c` saves a stack of six 4096x4096 linear layers (100.7M float32\n")
        f.write("parameters, 403 MB) with `fulmen_model_save`; the references save the same\n")
        f.write("state_dict with `torch.save` and `safetensors.torch.save_file`. Each contender is\n")
        f.write("its own process; best of the repeats, peak RSS of the whole process (wait4).\n")
        f.write("fulmen writes a temporary file, fsyncs it and renames it over the target (a crash\n")
        f.write("never leaves a torn checkpoint), and copies one tensor at a time to the host; the\n")
        f.write("references write in place without an fsync.\n\n")
        f.write(f"```\nmake bench   # or: {cmdline}\n```\n\n")
        f.write(f"{time.strftime('%Y-%m-%d', time.gmtime())}, {platform.machine()}, "
                f"{os.cpu_count()} logical cores, one libtorch thread:\n\n")
        f.write("| contender | best save (s) | peak RSS (MiB) |\n|---|---|---|\n")
        for name, best, rss in rows:
            f.write(f"| {name} | {best:.3f} | {rss:.0f} |\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()

"""One optimizer step, fulmen beside PyTorch: for-loop, foreach and fused updates.

Runs build/bench/optim_bench (fulmen's C API) and the same steps in
PyTorch (torch.optim.AdamW / SGD with foreach=False, foreach=True and
fused=True) over the
same MLP (LAYERS Linear(WIDTH, WIDTH) layers, gradients from one backward,
kept), on the same number of threads and device (`--device cuda`: cuda:0,
each timed step ending with the device synchronized), and prints the
median milliseconds per step of each, as a markdown table (written with
--write to bench/RESULTS-optim.md, or RESULTS-optim-gpu.md on cuda; --out
PATH writes it there instead).

    .deps/venv/bin/python bench/optim_step.py --binary build/bench/optim_bench [--write] [--device cuda]
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import time

import torch


def torch_step_ms(kind, update, width, layers, steps, device):
    torch.manual_seed(0)
    mods = []
    for i in range(layers):
        mods.append(torch.nn.Linear(width, width))
        if i + 1 < layers:
            mods.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*mods).to(device)
    model(torch.randn(64, width).to(device)).sum().backward()
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    choice = {"for-loop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}[update]
    if kind == "adamw":
        opt = torch.optim.AdamW(model.parameters(), **choice)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, **choice)
    for _ in range(5):
        opt.step()
    sync()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        opt.step()
        sync()
        times.append(1e3 * (time.perf_counter() - start))
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--binary", required=True)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--write", action="store_true", help="write bench/RESULTS-optim.md (-gpu.md on cuda)")
    p.add_argument("--out", help="write the table to this file")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    run = subprocess.run([a.binary, "--width", str(a.width), "--layers", str(a.layers), "--steps", str(a.steps),
                          "--threads", str(a.threads), "--device", a.device], capture_output=True, text=True,
                         check=True)
    ours = {(r["optimizer"], r["update"]): r["step_ms"] for r in map(json.loads, run.stdout.splitlines())}
    params = a.layers * (a.width * a.width + a.width)
    where = f"{platform.machine()}, {os.cpu_count()} CPUs"
    if a.device == "cuda":
        where = f"{torch.cuda.get_device_name(0)} ({where})"
    lines = [
        "# One optimizer step: for-loop, foreach and fused updates",
        "",
        f"`{' '.join(['python', 'bench/optim_step.py', '--binary', a.binary, '--device', a.device, '--write'])}` "
        f"on {where}, {a.threads} thread(s), torch {torch.__version__}: "
        f"an MLP of {a.layers} Linear({a.width}, {a.width}) layers ({params} parameters in {2 * a.layers} tensors), "
        f"median of {a.steps} steps after 5 warm-up steps, the gradients of one backward kept.",
        "",
        "| optimizer | update | fulmen ms/step | PyTorch ms/step |",
        "|---|---|---|---|",
    ]
    for kind in ("adamw", "sgd"):
        for update in ("for-loop", "foreach", "fused"):
            theirs = torch_step_ms(kind, update, a.width, a.layers, a.steps, a.device)
            lines.append(f"| {kind} | {update} | {ours[(kind, update)]:.3f} | {theirs:.3f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    out = a.out
    if a.write and out is None:
        name = "RESULTS-optim-gpu.md" if a.device == "cuda" else "RESULTS-optim.md"
        out = os.path.join(os.path.dirname(os.path.abspath(__file__)), name)
    if out is not None:
        with open(out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()

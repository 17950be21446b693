#!/usr/bin/env python3
"""Side-by-side training speed of the GPT character model of
examples/c/charlm.c: fulmen from C and from Go (the example programs),
a PyTorch eager loop and Lightning's Trainer, on the same model (2 pre-norm
blocks, d_model 64, 4 heads, context 64, AdamW), the same batches (the
first --batches windows of the Lee corpus, in order, batch 32), no dropout,
no validation and one intra-op thread. Each contender runs --repeats times
as its own process, round-robin; each run does 1 warm-up epoch and
--epochs measured ones of --batches steps. Writes bench/RESULTS-charlm.md.

    .deps/venv/bin/python bench/charlm.py --data .deps/data/lee_background.txt [--repeats 3]

fulmen's epoch time is the one its progress output prints (train epoch
start to end, two decimals); Lightning's is measured the same way by a
callback; the PyTorch loop times its own epoch.
"""
import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import report  # noqa: E402
from run import run_process, versions  # noqa: E402

ROOT = os.path.dirname(HERE)
PROGRAMS = {"fulmen-c": "build/examples/charlm", "fulmen-go": "build/bench/charlm_go"}
EPOCH_LINE = re.compile(r"Epoch (\d+)/\d+: (\d+) batches in ([0-9.]+)s")
BATCH, CONTEXT, D_MODEL, HEADS, LAYERS, LR = 32, 64, 64, 4, 2, 3e-3


def python_contender(args):
    """Runs the PyTorch or Lightning contender in this process; JSON lines on stdout."""
    import torch
    import torch.nn.functional as F
    sys.path.insert(0, os.path.join(ROOT, "tests", "interop"))
    from charlm_twin import Gpt, windows

    torch.set_num_threads(1)
    torch.manual_seed(0)
    text = open(args.data, "rb").read()
    alphabet = sorted(set(text))
    index = {b: i for i, b in enumerate(alphabet)}
    ids = torch.tensor([index[b] for b in text], dtype=torch.int64)
    x, y = windows(ids[: len(ids) // 10 * 9], CONTEXT)
    n = args.batches * BATCH
    x, y = x[:n], y[:n]
    vocab = len(alphabet)
    model = Gpt(vocab, CONTEXT, D_MODEL, HEADS, LAYERS)
    total = 1 + args.epochs

    def emit(epoch, seconds):
        if epoch >= 1:
            print(json.dumps({"epoch": epoch, "seconds": seconds, "steps": args.batches}), flush=True)

    if args.contender == "pytorch":
        opt = torch.optim.AdamW(model.parameters(), lr=LR)
        for epoch in range(total):
            t0 = time.perf_counter()
            for i in range(0, n, BATCH):
                loss = F.cross_entropy(model(x[i:i + BATCH]).reshape(-1, vocab), y[i:i + BATCH].reshape(-1))
                opt.zero_grad()
                loss.backward()
                opt.step()
            emit(epoch, time.perf_counter() - t0)
        return
    import lightning as L
    from torch.utils.data import DataLoader, TensorDataset

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.gpt = model

        def training_step(self, batch, _):
            xb, yb = batch
            loss = F.cross_entropy(self.gpt(xb).reshape(-1, vocab), yb.reshape(-1))
            self.log("train_loss", loss, on_step=True, on_epoch=True)
            return loss

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=LR)

    class Timer(L.Callback):
        def on_train_epoch_start(self, trainer, module):
            self.t0 = time.perf_counter()

        def on_train_epoch_end(self, trainer, module):
            emit(trainer.current_epoch, time.perf_counter() - self.t0)

    trainer = L.Trainer(max_epochs=total, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                        limit_val_batches=0, callbacks=[Timer()])
    trainer.fit(Module(), DataLoader(TensorDataset(x, y), batch_size=BATCH, shuffle=False))


def fulmen_epochs(program, args, work):
    """Measured epochs of one fulmen example run, from its progress output."""
    cmd = [os.path.join(ROOT, program), "--data", args.data, "--epochs", str(1 + args.epochs),
           "--limit-batches", str(args.batches), "--val-batches", "0", "--threads", "1", "--no-shuffle",
           "--dropout", "0", "--sample", "0", "--out", work]
    _, tail, code, rss, _ = run_process(cmd, args.timeout)
    epochs = [dict(epoch=int(m[0]) - 1, seconds=float(m[2]), steps=int(m[1])) for m in EPOCH_LINE.findall(tail)]
    return [e for e in epochs if e["epoch"] >= 1], code, rss, tail


def python_epochs(name, args):
    cmd = [args.python, os.path.abspath(__file__), "--contender", name, "--data", args.data,
           "--epochs", str(args.epochs), "--batches", str(args.batches)]
    out, tail, code, rss, _ = run_process(cmd, args.timeout)
    epochs = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return epochs, code, rss, tail


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=os.path.join(ROOT, ".deps", "data", "lee_background.txt"))
    p.add_argument("--contenders", default="fulmen-c,fulmen-go,pytorch,lightning")
    p.add_argument("--contender", help=argparse.SUPPRESS)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batches", type=int, default=40)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--out", default=os.path.join(HERE, "RESULTS-charlm.md"))
    args = p.parse_args()
    if args.contender:
        return python_contender(args)
    names = [c for c in args.contenders.split(",") if c]
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    load = os.getloadavg()[0]
    runs = {n: dict(secs=[], rss=0, notes=[]) for n in names}
    with tempfile.TemporaryDirectory(prefix="fulmen-charlm-bench-") as work:
        for repeat in range(args.repeats):
            for name in names:
                if name in PROGRAMS and not os.access(os.path.join(ROOT, PROGRAMS[name]), os.X_OK):
                    runs[name]["notes"].append(f"{PROGRAMS[name]} not built")
                    continue
                if name in PROGRAMS:
                    epochs, code, rss, tail = fulmen_epochs(PROGRAMS[name], args, os.path.join(work, name))
                else:
                    epochs, code, rss, tail = python_epochs(name, args)
                if code != 0 or len(epochs) != args.epochs:
                    runs[name]["notes"].append(f"repeat {repeat} failed (exit {code}): {tail.strip()[-300:]}")
                    continue
                runs[name]["secs"] += [e["seconds"] for e in epochs]
                runs[name]["rss"] = max(runs[name]["rss"], rss)
                print(f"{name} repeat {repeat}: " + ", ".join(f"{e['seconds'] * 1e3:.0f} ms" for e in epochs),
                      file=sys.stderr)
    v = versions(args)
    lines = ["# fulmen benchmark: GPT character model", "",
             f"Produced on {started} by:", "", "```", " ".join(["python", "bench/charlm.py"] + sys.argv[1:]), "```", "",
             f"- machine: {report.machine()}; load average {load:.2f} when started",
             f"- versions: fulmen {v['fulmen']}, torch {v['torch']}, lightning {v['lightning']}, Python {v['python']}",
             f"- workload: examples/c/charlm.c's GPT ({LAYERS} pre-norm blocks, d_model {D_MODEL}, {HEADS} heads, "
             f"context {CONTEXT}, AdamW lr {LR}), {args.batches} batches of {BATCH} windows per epoch in order, "
             f"no dropout, no validation, 1 intra-op thread; 1 warm-up epoch, {args.epochs} measured, "
             f"{args.repeats} repeats per contender, each a separate process, round-robin", "",
             "| contender | median epoch (ms) | min–max (ms) | ms/step | peak RSS (MiB) | epochs |", "|---|---|---|---|---|---|"]
    medians = {}
    for name in names:
        secs = sorted(runs[name]["secs"])
        if not secs:
            continue
        med = medians[name] = statistics.median(secs)
        lines.append(f"| {name} | {med * 1e3:.0f} | {secs[0] * 1e3:.0f}–{secs[-1] * 1e3:.0f} | "
                     f"{med / args.batches * 1e3:.1f} | {runs[name]['rss'] / 1024:.0f} | {len(secs)} |")
    lines.append("")
    for a, b in (("fulmen-c", "pytorch"), ("fulmen-c", "lightning"), ("fulmen-go", "fulmen-c")):
        if a in medians and b in medians:
            lines.append(f"- {a} / {b}: {medians[a] / medians[b]:.2f} (below 1: {a} is faster)")
    for name in names:
        lines += [f"- {name}: {n}" for n in runs[name]["notes"]]
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Training steps of real workloads, fulmen beside PyTorch, torch.compile and
Lightning: the MNIST-shaped MLP and CNN (host-bound), a char-level GPT of
examples/c/charlm.c's shape (tied head, no dropout), a GPT-2-small-sized model (124M parameters, context
1024, bf16-mixed, causal attention through SDPA) and a ResNet-18 on 32x32
images in bf16-mixed (bench/python/workload_models.py; fulmen's side is
bench/c/workload_bench.c, built from fulmen's own layers).

Contenders, each its own process, round-robin over --repeats:
  fulmen-c            fulmen's Trainer from C, eager
  fulmen-c-graphs     ... with cuda_graphs (CUDA only)
  pytorch             a plain PyTorch loop
  pytorch-compile     ... with the model torch.compile'd (CUDA only)
  pytorch-compile-ro  ... mode="reduce-overhead", CUDA graphs (CUDA only)
  lightning           Lightning's Trainer.fit

Every contender trains on the same --batches fixed batches (a counter hash,
in order), --warmup epochs then --epochs measured ones, with the same
optimizer (fused on CUDA). Reported per workload: µs per step (median over
all measured epochs), samples or tokens per second, model FLOPs utilization
against the GPU's dense bf16 peak (--peak-tflops, or known from the GPU's
name), peak memory (CUDA: the allocator's peak, torch.cuda.
max_memory_allocated; CPU: peak RSS) and each contender's speed-up over
PyTorch eager.

    python3 bench/workloads.py --accelerator cuda                 # the GPU kit
    .deps/venv/bin/python bench/workloads.py --size tiny --repeats 1 --out /tmp/w.md   # CPU check

A contender that fails stops the benchmark with its command and stderr,
unless --optional names it (its rows then say why); stopped so, or by
SIGTERM or SIGINT (a time limit), it still writes the table of what it
measured, with why it stopped, and exits with 1. --jsonl gets each run as
it ends.
`--check-graphs` runs fulmen-c-graphs on fulmen's fake device first (each
workload; its capture records and replays as CUDA's) and fails unless it
trains: the harness's own test on a machine without a GPU.
"""
import argparse
import datetime
import json
import os
import shlex
import signal
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "python"))
import report  # noqa: E402
import workload_models as wm  # noqa: E402
from run import TAIL, json_records, run_process, versions  # noqa: E402

CONTENDERS = ("fulmen-c", "fulmen-c-graphs", "pytorch", "pytorch-compile", "pytorch-compile-ro", "lightning")
CUDA_ONLY = ("fulmen-c-graphs", "pytorch-compile", "pytorch-compile-ro")
# Dense bf16 tensor-core peaks (FLOP/s) from NVIDIA's data sheets, by a
# part of the GPU's name, the more specific names first.
BF16_PEAKS = (("H100 PCIe", 756e12), ("H100 NVL", 835e12), ("H200", 989.4e12), ("H100", 989.4e12),
              ("H800", 989.4e12), ("A100", 312e12), ("A800", 312e12), ("L40S", 362.05e12), ("L40", 181.05e12),
              ("L4", 121e12))


class Failed(Exception):
    pass


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--accelerator", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--size", choices=("full", "tiny"), default="full",
                   help="tiny: gpt2 and resnet18 shrunk for a run on the CPU")
    p.add_argument("--workloads", default=",".join(wm.WORKLOADS))
    p.add_argument("--contenders", default=None, help="default: all that run on the accelerator")
    p.add_argument("--optional", default="", help="contenders whose failure is noted, not fatal")
    p.add_argument("--binary", default=os.path.join(ROOT, "build", "bench", "workload_bench"))
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--batches", type=int, default=20)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--peak-tflops", type=float, default=None, help="the GPU's dense bf16 peak")
    p.add_argument("--check-graphs", action="store_true")
    p.add_argument("--out", default=None)
    p.add_argument("--jsonl", default=None)
    a = p.parse_args()
    a.workloads = [w for w in a.workloads.split(",") if w]
    for w in a.workloads:
        if w not in wm.WORKLOADS:
            p.error(f"unknown workload {w}; known: {', '.join(wm.WORKLOADS)}")
    default = [c for c in CONTENDERS if a.accelerator == "cuda" or c not in CUDA_ONLY]
    a.contenders = a.contenders.split(",") if a.contenders else default
    for c in a.contenders:
        if c not in CONTENDERS:
            p.error(f"unknown contender {c}; known: {', '.join(CONTENDERS)}")
        if c in CUDA_ONLY and a.accelerator != "cuda":
            p.error(f"{c} runs on cuda only")
    a.optional = {c for c in a.optional.split(",") if c}
    if a.out is None:
        a.out = os.path.join(HERE, "RESULTS-workloads-gpu.md" if a.accelerator == "cuda" else "RESULTS-workloads.md")
    if a.batches < 1 or a.epochs < 1 or a.warmup < 0 or a.repeats < 1:
        p.error("--batches, --epochs and --repeats must be positive, --warmup not negative")
    return a


def command(a, contender, workload, accelerator=None, epochs=None, warmup=None, batches=None):
    accelerator = accelerator or a.accelerator
    common = ["--workload", workload, "--size", a.size, "--batches", str(batches or a.batches),
              "--epochs", str(epochs or a.epochs), "--warmup", str(a.warmup if warmup is None else warmup),
              "--threads", str(a.threads), "--accelerator", accelerator, "--precision", wm.precision(workload)]
    if contender.startswith("fulmen-c"):
        return [a.binary, *common, "--cuda-graphs", "1" if contender == "fulmen-c-graphs" else "0"]
    return [a.python, os.path.join(HERE, "python", "workload_fit.py"), "--contender", contender, *common]


def run(a, contender, workload, repeat, argv=None, epochs=None):
    argv = argv or command(a, contender, workload)
    out, tail, code, rss, wall = run_process(argv, a.timeout)
    epochs_seen, done = [], None
    for rec in json_records(out, workload=workload):
        if rec.get("done"):
            done = rec
        elif "seconds" in rec and rec.get("steps"):
            epochs_seen.append(rec)
    want = epochs or a.epochs
    ok = code == 0 and done is not None and len(epochs_seen) == want
    why = None if ok else (f"exit status {code}, {len(epochs_seen)} of {want} epochs"
                           f"{'' if done else ', no done line'}\n  command: {shlex.join(argv)}\n"
                           f"  stderr (end): {tail[-TAIL:]}")
    return dict(contender=contender, workload=workload, repeat=repeat, ok=ok, why=why, epochs=epochs_seen,
                peak_bytes=(done or {}).get("peak_bytes"), rss_kib=rss, wall=wall)


def check_graphs(a):
    """fulmen-c-graphs on the fake device: each workload trains."""
    for w in a.workloads:
        # 8 steps: 3 eager warm-up steps, the capture, 4 replays.
        argv = command(a, "fulmen-c-graphs", w, accelerator="npu", epochs=1, warmup=1, batches=4)
        r = run(a, "fulmen-c-graphs", w, 0, argv=argv, epochs=1)
        if not r["ok"]:
            raise Failed(f"fulmen-c-graphs on the fake device, {w}: {r['why']}")
        print(f"graphs on the fake device: {w} trained", file=sys.stderr)


def peak_flops(a):
    if a.peak_tflops:
        return a.peak_tflops * 1e12, f"{a.peak_tflops:g} TFLOP/s (given)"
    if a.accelerator != "cuda":
        return None, "not reported on the CPU"
    import torch
    name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else ""
    for part, peak in BF16_PEAKS:
        if part in name:
            return peak, f"{peak / 1e12:g} TFLOP/s dense bf16 ({name})"
    return None, f"unknown for {name or 'this GPU'} (give --peak-tflops)"


def summarize(runs, a, peak):
    stats = {}
    for (c, w) in {(r["contender"], r["workload"]) for r in runs if r["ok"]}:
        rs = [r for r in runs if r["ok"] and r["contender"] == c and r["workload"] == w]
        per_step = sorted(e["seconds"] / e["steps"] for r in rs for e in r["epochs"])
        step = statistics.median(per_step)
        batch = wm.batch_size(w, a.size)
        units = batch * (wm.GPT_SHAPES[(w, a.size)][2] if w in ("chargpt", "gpt2") else 1)
        flops = wm.step_flops(w, a.size)
        peaks = [r["peak_bytes"] for r in rs if r["peak_bytes"] is not None]
        stats[(c, w)] = dict(us=step * 1e6, lo=per_step[0] * 1e6, hi=per_step[-1] * 1e6, per_s=units / step,
                             mfu=flops / step / peak if peak else None,
                             mem_mib=(max(peaks) if peaks else max(r["rss_kib"] for r in rs) * 1024) / 2**20,
                             epochs=len(per_step))
    return stats


def markdown(a, runs, stats, peak_text, meta, failed):
    mem = "peak GPU memory (MiB)" if a.accelerator == "cuda" else "peak RSS (MiB)"
    lines = [f"# fulmen benchmark: training steps of real workloads ({a.accelerator})", "",
             f"Produced on {meta['when']} by:", "", "```", meta["command"], "```", "",
             f"- machine: {report.machine(a.accelerator)}",
             f"- versions: fulmen {meta['versions']['fulmen']}, torch {meta['versions']['torch']}, "
             f"lightning {meta['versions']['lightning']}, Python {meta['versions']['python']}",
             f"- size: {a.size}; {a.batches} fixed batches per epoch, {a.warmup} warm-up epoch(s), {a.epochs} "
             f"measured, {a.repeats} repeat(s) per contender, each its own process, round-robin; "
             f"{a.threads} intra-op thread(s)",
             f"- MFU: model FLOPs per step (bench/python/workload_models.py `step_flops`) over the step time "
             f"and the GPU's dense bf16 peak, for every workload (the 32-true ones too, which cannot reach "
             f"it): {peak_text}", ""]
    for w in a.workloads:
        params = wm.parameter_count(w, a.size)
        unit = "tokens/s" if w in ("chargpt", "gpt2") else "samples/s"
        lines += [f"## {w}", "",
                  f"{params / 1e6:.2f}M parameters, batch {wm.batch_size(w, a.size)}, {wm.precision(w)}, "
                  f"{wm.step_flops(w, a.size) / 1e9:.3g} GFLOP per step", "",
                  f"| contender | µs/step (median) | min–max | {unit} | MFU (of the bf16 peak) | {mem} | "
                  "speed-up over pytorch |",
                  "|---|---|---|---|---|---|---|"]
        base = stats.get(("pytorch", w))
        for c in a.contenders:
            s = stats.get((c, w))
            if s is None:
                lines.append(f"| {c} | not measured: {failed.get((c, w), 'no run')} | | | | | |")
                continue
            mfu = f"{s['mfu'] * 100:.1f}%" if s["mfu"] is not None else "–"
            speed = f"{base['us'] / s['us']:.2f}x" if base else "n/a"
            lines.append(f"| {c} | {s['us']:.0f} | {s['lo']:.0f}–{s['hi']:.0f} | {s['per_s']:.4g} | {mfu} | "
                         f"{s['mem_mib']:.0f} | {speed} |")
        lines.append("")
    return "\n".join(lines)


def stop_on_signal(signum, _frame):
    raise Failed(f"stopped by {signal.Signals(signum).name}")


def main():
    a = parse_args()
    if not os.path.exists(a.binary) and any(c.startswith("fulmen") for c in a.contenders):
        print(f"workloads: {a.binary} is missing (make {os.path.relpath(a.binary, ROOT)})", file=sys.stderr)
        return 1
    signal.signal(signal.SIGTERM, stop_on_signal)
    signal.signal(signal.SIGINT, stop_on_signal)
    runs, failed, stopped = [], {}, None
    jsonl = open(a.jsonl, "w") if a.jsonl else None
    try:
        if a.check_graphs:
            check_graphs(a)
        for repeat in range(a.repeats):
            for w in a.workloads:
                for c in a.contenders:
                    if (c, w) in failed:
                        continue
                    r = run(a, c, w, repeat)
                    runs.append(r)
                    if jsonl:
                        jsonl.write(json.dumps(r) + "\n")
                        jsonl.flush()
                    print(f"{c} {w} repeat {repeat}: {'ok' if r['ok'] else 'FAILED'} ({r['wall']:.1f} s)",
                          file=sys.stderr)
                    if not r["ok"]:
                        if c not in a.optional:
                            raise Failed(f"{c} on {w} failed: {r['why']}")
                        failed[(c, w)] = r["why"].splitlines()[0]
    except Failed as e:
        stopped = str(e)
        print(f"workloads: {e}", file=sys.stderr)
    finally:
        if jsonl:
            jsonl.close()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    if a.out and (runs or not stopped):
        peak, peak_text = peak_flops(a)
        stats = summarize(runs, a, peak)
        meta = dict(when=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                    command="python " + shlex.join([os.path.relpath(sys.argv[0], ROOT), *sys.argv[1:]]),
                    versions=versions(argparse.Namespace(python=a.python)))
        text = markdown(a, runs, stats, peak_text, meta, failed)
        if stopped:
            first = stopped.splitlines()[0]
            text += f"\n**Incomplete**: the benchmark stopped ({first}); the rows without numbers were not run.\n"
        with open(a.out, "w") as f:
            f.write(text)
        print(f"wrote {a.out}", file=sys.stderr)
    return 1 if stopped else 0


if __name__ == "__main__":
    sys.exit(main())

"""Statistics and the markdown of bench/RESULTS.md, from the runs that
bench/run.py collected. Pure functions of their inputs, no I/O but /proc."""
import os
import platform
import statistics
import subprocess

RATIOS = (("fulmen-c", "tch-loop", "fulmen-c / tch-loop"),
          ("fulmen-c", "lightning", "fulmen-c / lightning"),
          ("lightning", "fulmen-c", "lightning / fulmen-c (speedup)"),
          # On a GPU: graphed steps against eager ones and torch.compile's
          # CUDA graphs (n/a where a contender did not run).
          ("fulmen-c-graphs", "fulmen-c", "fulmen-c-graphs / fulmen-c"),
          ("fulmen-c-graphs", "pytorch", "fulmen-c-graphs / pytorch"),
          ("fulmen-c-graphs", "pytorch-compile-ro", "fulmen-c-graphs / pytorch-compile-ro"))


def summarize(runs):
    """Per (contender, workload, ranks): statistics over all measured epochs of all repeats."""
    groups = {}
    for run in runs:
        if run["ok"]:
            groups.setdefault((run["contender"], run["workload"], run["ranks"]), []).append(run)
    stats = {}
    for key, rs in groups.items():
        secs = sorted(e["seconds"] for r in rs for e in r["epochs"])
        steps = statistics.median(e["steps"] for r in rs for e in r["epochs"])
        q1, _, q3 = (statistics.quantiles(secs, n=4, method="inclusive") if len(secs) > 1
                     else secs * 3)
        med = statistics.median(secs)
        stats[key] = dict(median=med, min=secs[0], max=secs[-1], q1=q1, q3=q3,
                          steps=steps, us_per_step=med / steps * 1e6,
                          steps_per_s=steps / med, samples_per_s=5000 / med,
                          rss_mib=max(r["rss_kib"] for r in rs) / 1024,
                          epochs=len(secs), repeats=len(rs))
    return stats


def machine(accelerator="cpu"):
    """The processor, memory and OS, and with cuda the GPU as nvidia-smi names it."""
    model, mem = "unknown", 0
    try:
        with open("/proc/cpuinfo") as f:
            model = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), model)
        with open("/proc/meminfo") as f:
            mem = next(int(l.split()[1]) for l in f if l.startswith("MemTotal"))
    except (OSError, StopIteration):
        pass
    text = (f"{model}, {os.cpu_count()} logical cores, {mem / 2**20:.1f} GiB memory, "
            f"{platform.system()} {platform.release()}")
    if accelerator == "cuda":
        try:
            gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
                                  "--format=csv,noheader"], capture_output=True, text=True,
                                 timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            gpu = "unknown"
        text += f"; GPU: {gpu or 'unknown'}"
    return text


def _ms(s):
    return f"{s * 1e3:.1f}"


def _table(head, rows):
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines


def _instructions(counts, contender, workload):
    """The contender's instructions per step, and their ratio to the tch loop's."""
    ir, floor = counts.get((contender, workload)), counts.get(("tch-loop", workload))
    if ir is None:
        return ["n/a", "n/a"]
    return [f"{ir:,.0f}", f"{ir / floor:.2f}" if floor else "n/a"]


def _ratio(stats, a, b, workload, ranks=None):
    sa, sb = stats.get((a, workload, ranks)), stats.get((b, workload, ranks))
    return f"{sa['median'] / sb['median']:.2f}" if sa and sb else "n/a"


def markdown(meta, stats, contenders, workloads, ddp_contenders, micro, notes, ir_per_step=None):
    """RESULTS.md; `ir_per_step` maps (contender, workload) to the
    instructions per step callgrind counted, if it ran."""
    ir_per_step = ir_per_step or {}
    out = ["# fulmen benchmark results", "",
           f"Produced on {meta['date']} by:", "", "```", meta["command"], "```", "",
           "## Machine and versions", "",
           f"- machine: {meta['machine']}; load average {meta['load']} when started",
           f"- versions: fulmen {meta['fulmen']}, torch {meta['torch']}, "
           f"lightning {meta['lightning']}, Python {meta['python']}",
           f"- settings: {meta['epochs']} measured epochs after {meta['warmup']} warm-up "
           f"epoch(s), training on {meta.get('accelerator', 'cpu')}, "
           f"{meta['threads']} intra-op thread(s), {meta['repeats']} repeat(s) "
           "per contender and workload, each a separate process, run round-robin across "
           "contenders",
           "", "Protocol: bench/PROTOCOL.md (5,000 MNIST samples, batch 64, SGD lr 0.05). "
           "Median, min–max and IQR are over all measured epochs of all repeats; µs/step "
           "and steps/s come from the median epoch; peak RSS is the largest over the "
           "repeats of the largest single process (rusage from wait4, which covers the "
           "process and its waited-for children, as a maximum, not a sum). Ratios are of "
           "median epoch times (below 1: the first is faster).", ""]
    if ir_per_step:
        out += ["Instructions / step: counted by valgrind's callgrind (bench/run.py --callgrind) "
                "as the instructions of a run of 2 epochs minus those of a run of 1, over the "
                "steps of that epoch: one warm epoch, start-up and loading cancelled out; "
                "÷ tch-loop is their ratio to the hand-written tch loop's, the floor (below 1: "
                "fewer instructions). Unlike times, they hardly depend on the machine's load.", ""]
    head = ["contender", "median epoch (ms)", "min–max (ms)", "IQR (ms)", "µs/step",
            "steps/s", "peak RSS (MiB)", "epochs"]
    for w in workloads:
        counted = any((c, w) in ir_per_step for c in contenders)
        rows = [[c, _ms(s["median"]), f"{_ms(s['min'])}–{_ms(s['max'])}",
                 f"{_ms(s['q1'])}–{_ms(s['q3'])}", f"{s['us_per_step']:.0f}",
                 f"{s['steps_per_s']:.0f}", f"{s['rss_mib']:.0f}", s["epochs"]]
                + (_instructions(ir_per_step, c, w) if counted else [])
                for c in contenders if (s := stats.get((c, w, None)))]
        if rows:
            cols = head + (["instructions / step", "÷ tch-loop"] if counted else [])
            out += [f"## {w}", ""] + _table(cols, rows) + [""]
    # Only the ratios some workload has both contenders of.
    ratios = [r for r in RATIOS if any(_ratio(stats, r[0], r[1], w) != "n/a" for w in workloads)]
    rows = [[w] + [_ratio(stats, a, b, w) for a, b, _ in ratios] for w in workloads]
    if ratios:
        out += ["## Ratios", ""] + _table(["workload"] + [t for _, _, t in ratios], rows) + [""]
    rows = []
    for c in ddp_contenders:
        base = stats.get((c, "mlp64", 1))
        for ranks in (1, 2):
            if s := stats.get((c, "mlp64", ranks)):
                speed = f"{base['median'] / s['median']:.2f}" if base else "n/a"
                rows.append([c, ranks, _ms(s["median"]), f"{_ms(s['min'])}–{_ms(s['max'])}",
                             f"{s['us_per_step']:.0f}", f"{s['steps_per_s']:.0f}",
                             f"{s['samples_per_s']:.0f}", speed, f"{s['rss_mib']:.0f}"])
    if rows:
        out += ["## DDP (mlp64, gloo on loopback, 1 thread per rank)", "",
                "Steps are rank 0's (each rank trains on its half); samples/s counts "
                "all 5,000 samples of an epoch; speed-up is the 1-rank median epoch over "
                "this one.", ""]
        out += _table(["contender", "ranks", "median epoch (ms)", "min–max (ms)",
                       "µs/step", "steps/s", "samples/s", "speed-up vs 1 rank",
                       "peak RSS (MiB)"], rows) + [""]
    if micro:
        out += ["## Micro-benchmarks (build/bench/fulmen_micro)", ""]
        out += _table(["micro", "ns per call (median of runs)"],
                      [[k, f"{statistics.median(v):.1f}"] for k, v in micro.items()]) + [""]
    if notes:
        out += ["## Not measured", ""] + [f"- {n}" for n in notes] + [""]
    return "\n".join(out)

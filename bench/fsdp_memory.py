#!/usr/bin/env python3
"""FSDP against DDP: memory and step time of a ~100M-parameter transformer
on 4 CPU ranks (gloo), fulmen's strategies "ddp" and "fsdp" (FULL_SHARD and
SHARD_GRAD_OP, every TransformerEncoderLayer a unit).

    python bench/fsdp_memory.py --binary build/bench/fsdp_memory [--steps 6] [--timeout 1800]
                                [--mmap-threshold BYTES] [--out bench/RESULTS-fsdp.md]

Each strategy is one job: the binary is started once and fulmen's launcher
starts ranks 1..3 as copies of it; every rank prints one JSON line
(bench/c/fsdp_memory.c says what each field is), all on the first
process's stdout. The jobs run one after another, each in its own
temporary working folder, with OMP_NUM_THREADS=1. A job that fails, times
out or does not give 4 consistent lines stops the benchmark with its
stderr and writes nothing. Nothing is timed in the tests; this only
records.
"""
import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time

WORLD = 4
STRATEGIES = ["ddp", "fsdp_full", "fsdp_full_no_prefetch", "fsdp_full_forward_prefetch", "fsdp_grad_op",
              "fsdp_full_checkpointed", "fsdp_full_meta"]
LABELS = {
    "ddp": "ddp",
    "fsdp_full": "fsdp, FULL_SHARD",
    "fsdp_full_no_prefetch": "fsdp, FULL_SHARD, no prefetch",
    "fsdp_full_forward_prefetch": "fsdp, FULL_SHARD, forward prefetch too",
    "fsdp_grad_op": "fsdp, SHARD_GRAD_OP",
    "fsdp_full_checkpointed": "fsdp, FULL_SHARD, activations checkpointed",
    "fsdp_full_meta": "fsdp, FULL_SHARD, built on the meta device",
}
# Variables of a job the runner's own environment might carry (an outer
# launcher, SLURM): the ranks must see none of them.
JOB_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "MASTER_ADDR",
            "MASTER_PORT", "FULMEN_LAUNCHER_PID")
MIB = 1024 * 1024


def job_env(mmap_threshold):
    """The environment of a job: one thread, no outer job's variables."""
    env = {k: v for k, v in os.environ.items() if k not in JOB_VARS and not k.startswith("SLURM_")}
    env["OMP_NUM_THREADS"] = "1"
    if mmap_threshold is not None:
        env["MALLOC_MMAP_THRESHOLD_"] = str(mmap_threshold)
    return env


def tail(text, lines=40):
    return "\n".join(text.splitlines()[-lines:])


def run_job(binary, strategy, steps, timeout, env):
    """Every rank's line of one job, by rank."""
    cmd = [binary, strategy, str(steps)]
    with tempfile.TemporaryDirectory(prefix="fulmen-fsdp-bench.") as work:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=work,
                                start_new_session=True)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            # The ranks are in the session this runner started for the job.
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            raise SystemExit(f"{' '.join(cmd)}: no end after {timeout} s; ended.\n{tail(err)}")
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed with status {proc.returncode}:\n{tail(err)}")
    rows = {}
    for line in out.splitlines():
        if not line.startswith("{"):
            continue
        row = json.loads(line)
        if row.get("strategy") != strategy:
            continue
        if row["rank"] in rows:
            raise SystemExit(f"{' '.join(cmd)}: two lines for rank {row['rank']}")
        rows[row["rank"]] = row
    if sorted(rows) != list(range(WORLD)) or any(r["world"] != WORLD for r in rows.values()):
        raise SystemExit(f"{' '.join(cmd)}: expected one line from each of {WORLD} ranks, got ranks "
                         f"{sorted(rows)}:\n{out}\n{tail(err)}")
    check_state(strategy, rows)
    return [rows[r] for r in range(WORLD)]


def check_state(strategy, rows):
    """What the ranks hold must be the model (ddp) or shards of it (fsdp)."""
    params = rows[0]["params"]
    if any(r["params"] != params for r in rows.values()):
        raise SystemExit(f"{strategy}: the ranks count different models")
    held = [r["local_params"] for r in rows.values()]
    if strategy == "ddp":
        if any(h != params for h in held):
            raise SystemExit(f"ddp: a rank holds {held} parameter elements, the model has {params}")
    elif sum(held) < params or max(held) >= params:
        raise SystemExit(f"{strategy}: the ranks hold {held} parameter elements, not shards of {params}")


def machine():
    """CPU model, logical cores and RAM, from /proc."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), cpu)
    except OSError:
        pass
    ram = "unknown RAM"
    try:
        with open("/proc/meminfo") as f:
            kib = next((int(l.split()[1]) for l in f if l.startswith("MemTotal:")), None)
        if kib is not None:
            ram = f"{kib / MIB:.1f} GiB RAM"
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} logical cores, {ram}"


def mib(n):
    return n / MIB


def ratio(x, base):
    return f"{x / base:.2f}" if base > 0 else "-"


def strategy_table(strategy, rows, ddp):
    """Per-rank rows of one strategy, with ratios to the same rank under ddp."""
    out = [
        f"### {LABELS[strategy]}",
        "",
        "| rank | parameter elements held | state (MiB) | / ddp | peak RSS - pre-model (MiB) | / ddp "
        "| steps' peak RSS - pre-model (MiB) | / ddp | RSS at first step - pre-model (MiB) | step (s) | / ddp |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r, d in zip(rows, ddp):
        base = r["rss_before_model_bytes"]
        dbase = d["rss_before_model_bytes"]
        peak, dpeak = r["rss_peak_bytes"] - base, d["rss_peak_bytes"] - dbase
        train, dtrain = r["rss_train_peak_bytes"] - base, d["rss_train_peak_bytes"] - dbase
        out.append(
            f"| {r['rank']} | {r['local_params']:,} | {mib(r['state_bytes']):.0f} | "
            f"{ratio(r['state_bytes'], d['state_bytes'])} | {mib(peak):.0f} | {ratio(peak, dpeak)} | "
            f"{mib(train):.0f} | {ratio(train, dtrain)} | {mib(r['rss_first_step_bytes'] - base):.0f} | "
            f"{r['step_seconds']:.3f} | {ratio(r['step_seconds'], d['step_seconds'])} |")
    return out


def summary_table(results):
    """One line per strategy: means over the ranks, ratios to ddp's."""
    def mean(rows, f):
        return statistics.mean(f(r) for r in rows)

    def peak(r):
        return r["rss_peak_bytes"] - r["rss_before_model_bytes"]

    def train(r):
        return r["rss_train_peak_bytes"] - r["rss_before_model_bytes"]

    def setup(r):
        return r["rss_setup_peak_bytes"] - r["rss_before_model_bytes"]

    ddp = results["ddp"]
    out = [
        "| strategy | state per rank (MiB) | / ddp | setup's peak RSS - pre-model (MiB) | / ddp "
        "| peak RSS - pre-model (MiB) | / ddp "
        "| steps' peak RSS - pre-model (MiB) | / ddp | step (s) | / ddp |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in STRATEGIES:
        rows = results[s]
        cells = []
        for f in (lambda r: r["state_bytes"], setup, peak, train):
            v, base = mean(rows, f), mean(ddp, f)
            cells += [f"{mib(v):.0f}", ratio(v, base)]
        step, dstep = mean(rows, lambda r: r["step_seconds"]), mean(ddp, lambda r: r["step_seconds"])
        cells += [f"{step:.3f}", ratio(step, dstep)]
        out.append(f"| {LABELS[s]} | " + " | ".join(cells) + " |")
    return out


def write_results(path, results, cmdline, steps, mmap_threshold):
    params = results["ddp"][0]["params"]
    reset = all(r["hwm_reset"] for rows in results.values() for r in rows)
    lines = [
        "# FSDP against DDP: memory and step time on 4 CPU ranks",
        "",
        "`bench/c/fsdp_memory.c` trains a GPT-like stack, Embedding(8192, 768) -> 12 x",
        "TransformerEncoderLayer(768, 12 heads, feed-forward 3072, dropout 0, pre-norm, causal",
        f"mask) -> LayerNorm -> Linear(768, 8192), {params:,} float32 parameters, on seeded random",
        f"tokens (sequences of 64, batch 2 per rank, next-token cross-entropy) with AdamW for {steps}",
        "steps, on 4 ranks of fulmen's launcher (gloo on loopback, one intra-op thread per rank),",
        "under `ddp` and under `fsdp` with every TransformerEncoderLayer a unit (the root unit holds",
        "the embedding, the final norm and the head). Under FULL_SHARD each unit's backward",
        "starts gathering the unit whose backward comes next (`fsdp_backward_prefetch`, on by",
        "default as in torch); the rows \"no prefetch\" and \"forward prefetch too\" turn it off, or",
        "gather ahead in the forward as well (`fsdp_forward_prefetch`). The last row checkpoints",
        "every TransformerEncoderLayer's forward (`fsdp_activation_checkpointing_policy`): its",
        "activations are not kept, and backward runs the layer again. The row \"built on the meta",
        "device\" builds the model in a meta-init scope (`fulmen_meta_init_begin`): each unit gets",
        "its values, those of the eager build, just before it is sharded.",
        "",
        "- state: parameters, gradients and AdamW's two moments a rank holds between steps,",
        "  4 x 4 bytes per parameter element it holds (all of them under ddp, its shards under fsdp,",
        "  counted from the parameters at the first step's start).",
        "- setup's peak RSS - pre-model: the rank's VmHWM at the first step's start minus its RSS",
        "  before the model was built: building, placing and sharding the model, and the optimizer.",
        "- peak RSS - pre-model: the rank's VmHWM over the whole run minus its RSS before the model",
        "  was built. Under fsdp every rank builds the whole model first (unless it is built on the meta device),",
        "  and the end of fit gathers the full parameters and optimizer state again (the model is",
        "  whole after the run), so this peak holds them.",
        "- steps' peak RSS - pre-model: the peak from the first step's start to the last step's end",
        "  (VmHWM reset through /proc/self/clear_refs at the first step's start)"
        + ("." if reset else "; the reset failed on at least one rank, so there it is the peak "
           "since the start of the process."),
        "- step: median wall time of the steps after the first (on_train_batch_start to",
        "  on_train_batch_end), per rank.",
        "",
        f"```\nmake bench-fsdp   # or: {cmdline}\n```",
        "",
        f"{time.strftime('%Y-%m-%d', time.gmtime())}; {machine()}; "
        + (f"MALLOC_MMAP_THRESHOLD_={mmap_threshold}" if mmap_threshold is not None else "glibc's default malloc")
        + ".",
        "",
        "## Means over the ranks",
        "",
    ]
    lines += summary_table(results)
    lines += ["", "## Per rank", ""]
    for s in STRATEGIES:
        lines += strategy_table(s, results[s], results["ddp"]) + [""]
    lines += ["## Raw lines", "", "```"]
    lines += [json.dumps(r) for s in STRATEGIES for r in results[s]]
    lines += ["```", ""]
    with open(path, "w") as f:
        f.write("\n".join(lines))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--binary", required=True)
    p.add_argument("--steps", type=int, default=6, help="optimizer steps per job (2..1000; the first is not timed)")
    p.add_argument("--timeout", type=int, default=1800, help="seconds one job may take")
    p.add_argument("--mmap-threshold", type=int, help="MALLOC_MMAP_THRESHOLD_ for the ranks (default: glibc's)")
    p.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "RESULTS-fsdp.md"))
    a = p.parse_args()
    if not 2 <= a.steps <= 1000:
        raise SystemExit("--steps: 2 to 1000")
    binary = os.path.abspath(a.binary)
    env = job_env(a.mmap_threshold)
    results = {}
    for s in STRATEGIES:
        start = time.monotonic()
        rows = run_job(binary, s, a.steps, a.timeout, env)
        results[s] = rows
        peaks = ", ".join(f"{mib(r['rss_peak_bytes'] - r['rss_before_model_bytes']):.0f}" for r in rows)
        times = ", ".join(f"{r['step_seconds']:.3f}" for r in rows)
        print(f"{LABELS[s]}: {time.monotonic() - start:.0f} s; peak RSS - pre-model per rank (MiB) {peaks}; "
              f"step (s) {times}", flush=True)
    cmdline = " ".join(["python", "bench/fsdp_memory.py", "--binary", a.binary, "--steps", str(a.steps)]
                       + (["--mmap-threshold", str(a.mmap_threshold)] if a.mmap_threshold is not None else []))
    write_results(a.out, results, cmdline, a.steps, a.mmap_threshold)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    sys.exit(main())

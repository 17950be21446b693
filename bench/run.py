#!/usr/bin/env python3
"""Benchmark harness (bench/PROTOCOL.md): runs each contender x workload
--repeats times as separate processes, round-robin across contenders, reads
their JSON lines and peak RSS (os.wait4), and writes bench/RESULTS.md and the
raw lines to bench/results.jsonl. Contenders whose program is missing are
skipped with a message; a contender that fails (an exit status other than 0,
or fewer lines than the protocol asks) stops the benchmark with its stderr,
and run.py exits 1 without writing results. --callgrind also counts each
contender's instructions per step under valgrind's callgrind. Python
contenders run with --python (default: the venv made by bench/setup-venv.sh,
else this interpreter).

    .deps/venv/bin/python bench/run.py --repeats 3 --callgrind
    python3 bench/run.py --contenders pytorch,lightning --workloads mlp64 --micro
"""
import argparse
import datetime
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import report  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV_PY = os.path.join(ROOT, ".deps", "venv", "bin", "python")
WORKLOADS = ("mlp64", "mlp1024", "cnn")
# name -> (program relative to ROOT, extra arguments, python script?, supports --ranks)
CONTENDERS = {
    "fulmen-c": ("build/bench/fulmen_bench", [], False, True),
    "fulmen-c-graphs": ("build/bench/fulmen_bench", ["--cuda-graphs", "1"], False, False),
    "fulmen-go": ("build/bench/fulmen_bench_go", [], False, True),
    "tch-loop": ("target/release/examples/tch_loop", [], False, False),
    "pytorch": ("bench/python/pytorch_loop.py", [], True, True),
    "pytorch-compile": ("bench/python/pytorch_loop.py", ["--compile", "default"], True, False),
    "pytorch-compile-ro": ("bench/python/pytorch_loop.py", ["--compile", "reduce-overhead"], True, False),
    "lightning": ("bench/python/lightning_fit.py", [], True, True),
    "lightning-full": ("bench/python/lightning_fit.py", ["--full"], True, False),
}
# Contenders measured only on a GPU: graphed steps are refused on the CPU,
# and torch.compile's CPU code (C++ compiled at start-up) is another race.
CUDA_ONLY = ("fulmen-c-graphs", "pytorch-compile", "pytorch-compile-ro")
MICRO = "build/bench/fulmen_micro"
TAIL = 4000  # bytes of a failed run's stderr shown


class Failed(Exception):
    """A contender (or the micro-benchmarks) failed: the benchmark stops."""


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--contenders", default=None,
                   help="default: every contender (on the CPU, those not in CUDA_ONLY)")
    p.add_argument("--workloads", default=",".join(WORKLOADS))
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data", default=os.path.join(ROOT, ".deps", "data", "mnist_5k.csv.gz"))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--no-ddp", action="store_true", help="skip the DDP table (mlp64, 1 and 2 ranks)")
    p.add_argument("--micro", action="store_true", help=f"also run {MICRO}")
    p.add_argument("--python", default=VENV_PY if os.path.exists(VENV_PY) else sys.executable)
    p.add_argument("--accelerator", choices=("cpu", "cuda"), default="cpu",
                   help="where every contender trains (cuda: one GPU; no DDP table)")
    p.add_argument("--timeout", type=float, default=900, help="seconds allowed per run")
    p.add_argument("--callgrind", action="store_true",
                   help="also count instructions per step under valgrind's callgrind (skipped without valgrind)")
    p.add_argument("--callgrind-workloads", default="mlp64",
                   help="workloads counted under callgrind (each run is some 50 times slower there)")
    p.add_argument("--callgrind-timeout", type=float, default=3600, help="seconds allowed per callgrind run")
    p.add_argument("--out", default=os.path.join(ROOT, "bench", "RESULTS.md"))
    p.add_argument("--jsonl", default=os.path.join(ROOT, "bench", "results.jsonl"))
    a = p.parse_args()
    a.data = os.path.abspath(a.data)  # contenders run in ROOT
    if a.contenders is None:
        a.contenders = ",".join(c for c in CONTENDERS if a.accelerator == "cuda" or c not in CUDA_ONLY)
    a.contenders = [c for c in a.contenders.split(",") if c]
    a.workloads = [w for w in a.workloads.split(",") if w]
    a.callgrind_workloads = [w for w in a.callgrind_workloads.split(",") if w]
    for c in a.contenders:
        if c not in CONTENDERS:
            p.error(f"unknown contender {c!r}; known: {', '.join(CONTENDERS)}")
    for w in a.workloads + a.callgrind_workloads:
        if w not in WORKLOADS:
            p.error(f"unknown workload {w!r}")
    return a


def python_has(python, *modules):
    probe = "import importlib.util as u, sys; sys.exit(any(u.find_spec(m) is None for m in sys.argv[1:]))"
    return subprocess.run([python, "-c", probe, *modules]).returncode == 0


def command(name, args):
    """The contender's argv without per-run arguments, or None (and why) if missing."""
    prog, extra, is_py, _ = CONTENDERS[name]
    if name in CUDA_ONLY and args.accelerator != "cuda":
        return None, f"{name}: measured with --accelerator cuda only"
    path = os.path.join(ROOT, prog)
    if is_py:
        mods = ("torch", "lightning") if "lightning" in name else ("torch",)
        if not python_has(args.python, *mods):
            return None, f"{name}: {args.python} lacks {' or '.join(mods)} (run bench/setup-venv.sh)"
        return [args.python, path, *extra], None
    if not os.access(path, os.X_OK):
        return None, f"{name}: {prog} not found (not built)"
    return [path, *extra], None


def _kill_group(pid):
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_process(argv, timeout, env=None):
    """(stdout text, stderr tail, exit code, peak RSS KiB, wall s) of one run
    (`env`: its environment, None for this one's)."""
    with tempfile.TemporaryFile() as err:
        start = datetime.datetime.now()
        p = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=err,
                             text=True, start_new_session=True, env=env)
        timer = threading.Timer(timeout, _kill_group, (p.pid,))
        timer.start()
        try:
            out = p.stdout.read()
            _, status, usage = os.wait4(p.pid, 0)
        finally:
            timer.cancel()
            _kill_group(p.pid)  # leftover rank processes, or all of it if interrupted
        p.returncode = os.waitstatus_to_exitcode(status)
        p.stdout.close()
        wall = (datetime.datetime.now() - start).total_seconds()
        err.seek(0)
        tail = err.read()[-TAIL:].decode(errors="replace")
    return out, tail, p.returncode, usage.ru_maxrss, wall


def json_records(out, **match):
    """The JSON objects among a contender's output lines whose entries
    equal `match` (other lines, such as warnings, are skipped)."""
    for line in out.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and all(rec.get(k) == v for k, v in match.items()):
            yield rec


def run_one(name, argv, workload, ranks, threads, args, repeat, env=None):
    cmd = argv + ["--workload", workload, "--data", args.data, "--epochs", str(args.epochs),
                  "--warmup", str(args.warmup), "--threads", str(threads), "--seed", str(args.seed),
                  "--accelerator", args.accelerator]
    if ranks is not None:
        cmd += ["--ranks", str(ranks)]
    out, tail, code, rss, wall = run_process(cmd, args.timeout, env)
    lines, epochs, done = [], [], False
    for rec in json_records(out, workload=workload):
        rec.update(repeat=repeat, ranks=ranks, threads=threads)
        lines.append(rec)
        if rec.get("done"):
            done = True
        elif "seconds" in rec:
            epochs.append(rec)
    ok = code == 0 and done and len(epochs) == args.epochs
    if lines:
        lines[-1].update(peak_rss_kib=rss, exit_code=code, wall_s=round(wall, 2))
    return dict(contender=name, workload=workload, ranks=ranks, ok=ok, epochs=epochs, done=done,
                rss_kib=rss, lines=lines, code=code, tail=tail, cmd=cmd)


def failure(label, run, expected_epochs):
    """The Failed of a run that did not deliver what the protocol asks."""
    got = f"{len(run['epochs'])} of {expected_epochs} epoch lines" + ("" if run["done"] else ", no done line")
    return Failed(f"{label} failed: exit status {run['code']}, {got}\n"
                  f"  command: {shlex.join(run['cmd'])}\n"
                  f"--- its stderr (last {TAIL} bytes) ---\n{run['tail'].rstrip()}\n---")


def timed_runs(plan, commands, args):
    """Runs the plan's (repeat, workload, ranks, threads, contender) in turn."""
    runs = []
    for i, (r, w, ranks, t, c) in enumerate(plan, 1):
        label = f"{c} {w}" + (f" ranks={ranks}" if ranks else "") + f" repeat {r + 1}/{args.repeats}"
        print(f"[{i}/{len(plan)}] {label}", file=sys.stderr, flush=True)
        run = run_one(c, commands[c], w, ranks, t, args, r)
        if not run["ok"]:
            raise failure(label, run, args.epochs)
        runs.append(run)
    return runs


def preflight(commands, jobs, args):
    """One short run (an epoch, no warm-up) of each contender on each job,
    with the arguments the timed runs pass: a contender that cannot run
    stops the benchmark in seconds, not after hours of timed runs."""
    short = argparse.Namespace(**{**vars(args), "epochs": 1, "warmup": 0})
    for w, ranks, threads in jobs:
        for c, argv in commands.items():
            if ranks is not None and not CONTENDERS[c][3]:
                continue
            print(f"[preflight] {c} {w} ranks={ranks}", file=sys.stderr, flush=True)
            run = run_one(c, argv, w, ranks, threads, short, 0)
            if not run["ok"]:
                raise failure(f"{c} {w} (preflight)", run, 1)


def callgrind_total(path):
    """The instructions (Ir) a callgrind output file counts, or None."""
    with open(path, errors="replace") as f:
        m = re.search(r"^(?:summary|totals):\s*(\d+)", f.read(), re.M)
    return int(m.group(1)) if m else None


def callgrind_run(name, argv, workload, epochs, args):
    """(instructions, steps of the last epoch) of `epochs` epochs without
    warm-up, the contender run under valgrind's callgrind."""
    label = f"{name} {workload} under callgrind, {epochs} epoch(s)"
    print(f"[callgrind] {label}", file=sys.stderr, flush=True)
    run_args = argparse.Namespace(**{**vars(args), "epochs": epochs, "warmup": 0, "timeout": args.callgrind_timeout})
    # The same for every contender: oneDNN's AVX JIT kernels exhaust
    # valgrind's translation storage (as in `make test-valgrind`), and a
    # fixed hash seed keeps Python's dict work the same from run to run.
    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": "SSE41", "PYTHONHASHSEED": "0"}
    with tempfile.TemporaryDirectory() as d:
        valgrind = ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + os.path.join(d, "callgrind.%p")]
        run = run_one(name, valgrind + argv, workload, None, args.threads, run_args, 0, env)
        if not run["ok"]:
            raise failure(label, run, epochs)
        totals = [callgrind_total(os.path.join(d, f)) for f in os.listdir(d)]
    if not totals or None in totals:
        raise Failed(f"{label}: callgrind wrote no instruction count")
    # A process the contender forked writes a file of its own; the training
    # ran in the one with the most instructions.
    return max(totals), run["epochs"][-1]["steps"]


def callgrind_unavailable(args):
    """Why instructions cannot be counted here, or None."""
    if shutil.which("valgrind") is None:
        return "instructions per step: valgrind is not installed (apt-get install valgrind); not counted"
    if args.accelerator != "cpu":
        return "instructions per step: counted on the CPU only (valgrind runs no GPU code); not counted"
    return None


# Contenders valgrind cannot run, and why (written under the tables).
CALLGRIND_CANNOT = {
    "fulmen-go": "fulmen-go: not counted: valgrind 3.19 cannot run Go's runtime "
                 "(\"brk segment overflow\", then valgrind itself crashes)",
}


def callgrind_counts(commands, args, notes):
    """Instructions per step of each contender on the callgrind workloads:
    a run of 2 epochs minus a run of 1 is one warm epoch (start-up, loading
    and the first epoch cancel out), divided by its steps."""
    counts = {}
    for c in commands:
        if c in CALLGRIND_CANNOT:
            print(f"[callgrind] skipping {CALLGRIND_CANNOT[c]}", file=sys.stderr)
            notes.append("instructions per step: " + CALLGRIND_CANNOT[c])
    for w in [w for w in args.callgrind_workloads if w in args.workloads]:
        for c, argv in [(c, argv) for c, argv in commands.items() if c not in CALLGRIND_CANNOT]:
            one, _ = callgrind_run(c, argv, w, 1, args)
            two, steps = callgrind_run(c, argv, w, 2, args)
            if two <= one or steps <= 0:
                raise Failed(f"{c} {w}: 2 epochs counted {two} instructions, 1 epoch {one}; steps {steps}")
            counts[(c, w)] = dict(instructions_per_step=(two - one) / steps, epoch_instructions=two - one,
                                  steps=steps)
    return counts


def micro_runs(args):
    path = os.path.join(ROOT, MICRO)
    if not os.access(path, os.X_OK):
        return {}, [f"micro: {MICRO} not found (not built)"]
    results, lines = {}, []
    for _ in range(args.repeats):
        out, tail, code, _, _ = run_process([path], args.timeout)
        if code != 0:
            raise Failed(f"{MICRO} failed: exit status {code}\n--- its stderr (last {TAIL} bytes) ---\n"
                         f"{tail.rstrip()}\n---")
        for line in out.splitlines():
            try:
                rec = json.loads(line)
                results.setdefault(rec["micro"], []).append(float(rec["ns_per_call"]))
            except (ValueError, KeyError, TypeError):
                continue
    return results, []


def versions(args):
    probe = ("import importlib.metadata as m, platform\nprint(platform.python_version())\n"
             "for p in ('torch', 'lightning'):\n"
             "    try: print(m.version(p))\n    except Exception: print('n/a')")
    try:
        python, torch, lightning = subprocess.run([args.python, "-c", probe], capture_output=True,
                                                  text=True).stdout.split()
    except (ValueError, OSError):
        python = torch = lightning = "n/a"
    with open(os.path.join(ROOT, "Cargo.toml")) as f:
        m = re.search(r'^\[package\][^\[]*?^version\s*=\s*"([^"]+)"', f.read(), re.M | re.S)
    rev = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"],
                         capture_output=True, text=True).stdout.strip()
    fulmen = (m.group(1) if m else "n/a") + (f" ({rev})" if rev else "")
    return dict(python=python, torch=torch, lightning=lightning, fulmen=fulmen)


def main():
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so a run's processes get killed
    args = parse_args()
    load = os.getloadavg()[0]  # other work on the machine makes timings noisy
    notes, commands = [], {}
    for name in args.contenders:
        argv, why = command(name, args)
        if argv is None:
            print(f"skipping {why}", file=sys.stderr)
            notes.append(why)
        else:
            commands[name] = argv
    jobs = [(w, None, args.threads) for w in args.workloads]
    ddp = [c for c in commands if CONTENDERS[c][3]] if not args.no_ddp and args.accelerator == "cpu" else []
    if ddp:
        jobs += [("mlp64", 1, 1), ("mlp64", 2, 1)]
    plan = [(r, w, ranks, t, c) for r in range(args.repeats) for w, ranks, t in jobs
            for c in commands if ranks is None or c in ddp]
    if args.callgrind and (why := callgrind_unavailable(args)):
        print(f"skipping {why}", file=sys.stderr)
        notes.append(why)
        args.callgrind = False
    try:
        preflight(commands, jobs, args)
        runs = timed_runs(plan, commands, args)
        counts = callgrind_counts(commands, args, notes) if args.callgrind else {}
        micro = {}
        if args.micro:
            micro, why = micro_runs(args)
            notes += why
    except Failed as e:
        print(f"run.py: {e}\nrun.py: no results written", file=sys.stderr)
        return 1
    with open(args.jsonl, "w") as f:
        for run in runs:
            for rec in run["lines"]:
                f.write(json.dumps(rec) + "\n")
        for (c, w), rec in counts.items():
            f.write(json.dumps({"contender": c, "workload": w, "callgrind": True, **rec}) + "\n")
        for name, values in micro.items():
            for v in values:
                f.write(json.dumps({"micro": name, "ns_per_call": v}) + "\n")
    py = os.path.relpath(sys.executable, ROOT) if sys.executable.startswith(ROOT) else "python3"
    meta = dict(date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                command=shlex.join([py, os.path.relpath(os.path.abspath(sys.argv[0]), ROOT),
                                    *sys.argv[1:]]),
                machine=report.machine(args.accelerator), accelerator=args.accelerator, load=f"{load:.2f}", epochs=args.epochs,
                warmup=args.warmup, threads=args.threads, repeats=args.repeats, **versions(args))
    ir_per_step = {key: rec["instructions_per_step"] for key, rec in counts.items()}
    md = report.markdown(meta, report.summarize(runs), list(commands), args.workloads, ddp,
                         micro, notes, ir_per_step)
    with open(args.out, "w") as f:
        f.write(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())

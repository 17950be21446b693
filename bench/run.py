#!/usr/bin/env python3
"""Benchmark harness (bench/PROTOCOL.md): runs each contender x workload
--repeats times as separate processes, round-robin across contenders, reads
their JSON lines and peak RSS (os.wait4), and writes bench/RESULTS.md and the
raw lines to bench/results.jsonl. Contenders whose program is missing are
skipped with a message. Python contenders run with --python (default: the
venv made by bench/setup-venv.sh, else this interpreter).

    .deps/venv/bin/python bench/run.py --repeats 3
    python3 bench/run.py --contenders pytorch,lightning --workloads mlp64 --micro
"""
import argparse
import datetime
import json
import os
import re
import shlex
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
    "fulmen-go": ("build/bench/fulmen_bench_go", [], False, True),
    "tch-loop": ("target/release/examples/tch_loop", [], False, False),
    "pytorch": ("bench/python/pytorch_loop.py", [], True, True),
    "lightning": ("bench/python/lightning_fit.py", [], True, True),
    "lightning-full": ("bench/python/lightning_fit.py", ["--full"], True, False),
}
MICRO = "build/bench/fulmen_micro"


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--contenders", default=",".join(CONTENDERS))
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
    p.add_argument("--out", default=os.path.join(ROOT, "bench", "RESULTS.md"))
    p.add_argument("--jsonl", default=os.path.join(ROOT, "bench", "results.jsonl"))
    a = p.parse_args()
    a.data = os.path.abspath(a.data)  # contenders run in ROOT
    a.contenders = [c for c in a.contenders.split(",") if c]
    a.workloads = [w for w in a.workloads.split(",") if w]
    for c in a.contenders:
        if c not in CONTENDERS:
            p.error(f"unknown contender {c!r}; known: {', '.join(CONTENDERS)}")
    for w in a.workloads:
        if w not in WORKLOADS:
            p.error(f"unknown workload {w!r}")
    return a


def python_has(python, *modules):
    probe = "import importlib.util as u, sys; sys.exit(any(u.find_spec(m) is None for m in sys.argv[1:]))"
    return subprocess.run([python, "-c", probe, *modules]).returncode == 0


def command(name, args):
    """The contender's argv without per-run arguments, or None (and why) if missing."""
    prog, extra, is_py, _ = CONTENDERS[name]
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


def run_process(argv, timeout):
    """(stdout text, stderr tail, exit code, peak RSS KiB, wall s) of one run."""
    with tempfile.TemporaryFile() as err:
        start = datetime.datetime.now()
        p = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=err,
                             text=True, start_new_session=True)
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
        tail = err.read()[-1500:].decode(errors="replace")
    return out, tail, p.returncode, usage.ru_maxrss, wall


def run_one(name, argv, workload, ranks, threads, args, repeat):
    cmd = argv + ["--workload", workload, "--data", args.data, "--epochs", str(args.epochs),
                  "--warmup", str(args.warmup), "--threads", str(threads), "--seed", str(args.seed),
                  "--accelerator", args.accelerator]
    if ranks is not None:
        cmd += ["--ranks", str(ranks)]
    out, tail, code, rss, wall = run_process(cmd, args.timeout)
    lines, epochs, done = [], [], False
    for line in out.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if not isinstance(rec, dict) or rec.get("workload") != workload:
            continue
        rec.update(repeat=repeat, ranks=ranks, threads=threads)
        lines.append(rec)
        if rec.get("done"):
            done = True
        elif "seconds" in rec:
            epochs.append(rec)
    ok = code == 0 and done and len(epochs) == args.epochs
    if lines:
        lines[-1].update(peak_rss_kib=rss, exit_code=code, wall_s=round(wall, 2))
    return dict(contender=name, workload=workload, ranks=ranks, ok=ok, epochs=epochs,
                rss_kib=rss, lines=lines, code=code, tail=tail, cmd=cmd)


def micro_runs(args):
    path = os.path.join(ROOT, MICRO)
    if not os.access(path, os.X_OK):
        return {}, [f"micro: {MICRO} not found (not built)"]
    results, lines = {}, []
    for _ in range(args.repeats):
        out, tail, code, _, _ = run_process([path], args.timeout)
        if code != 0:
            return results, [f"micro: {MICRO} exited {code}: {tail.strip()[-300:]}"]
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
    runs = []
    for i, (r, w, ranks, t, c) in enumerate(plan, 1):
        label = f"{c} {w}" + (f" ranks={ranks}" if ranks else "")
        print(f"[{i}/{len(plan)}] {label} repeat {r + 1}/{args.repeats}", file=sys.stderr, flush=True)
        run = run_one(c, commands[c], w, ranks, t, args, r)
        runs.append(run)
        if not run["ok"]:
            msg = f"{label} repeat {r + 1} failed (exit {run['code']}): {run['tail'].strip()[-300:]}"
            print("  " + msg, file=sys.stderr)
            notes.append(msg.replace("\n", " "))
    micro = {}
    if args.micro:
        micro, why = micro_runs(args)
        notes += why
    with open(args.jsonl, "w") as f:
        for run in runs:
            for rec in run["lines"]:
                f.write(json.dumps(rec) + "\n")
        for name, values in micro.items():
            for v in values:
                f.write(json.dumps({"micro": name, "ns_per_call": v}) + "\n")
    py = os.path.relpath(sys.executable, ROOT) if sys.executable.startswith(ROOT) else "python3"
    meta = dict(date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                command=shlex.join([py, os.path.relpath(os.path.abspath(sys.argv[0]), ROOT),
                                    *sys.argv[1:]]),
                machine=report.machine(args.accelerator), accelerator=args.accelerator, load=f"{load:.2f}", epochs=args.epochs,
                warmup=args.warmup, threads=args.threads, repeats=args.repeats, **versions(args))
    md = report.markdown(meta, report.summarize(runs), list(commands), args.workloads, ddp,
                         micro, notes)
    with open(args.out, "w") as f:
        f.write(md)
    print(md)
    return 0 if all(r["ok"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""One training step of exported models, four ways, on the same batches:

- fulmen-exported: fulmen runs the model's exported training_step (a .pt2
  of python/fulmen_export.py, its ATen graph interpreted), build/bench/
  exported_step;
- fulmen-compiled: the same program with the AOTInductor package of
  export_compiled_step (joint forward and backward, compiled for the batch
  shape) answering the step;
- pytorch: the module's training_step in eager PyTorch;
- torch-compile: torch.compile(module.training_step) (default mode), its
  backward compiled by AOTAutograd; compiling happens in the first step,
  which is timed apart.

The models are tests/interop/export_parity.py's mlp (a LightningModule:
Linear, BatchNorm1d, ReLU, Linear), cnn (Conv2d, BatchNorm2d, MaxPool2d,
Linear) and gpt (the character-level GPT, dropout 0.1), built there and
imported; each starts from the same seeded weights (saved once, loaded by
every contender). Every contender is a plain loop over --batches fixed
in-memory batches of --batch rows (default 16 of 64), read from the same
files: the step, then zero_grad (set_to_none, as fulmen's Trainer does),
backward and an SGD step (lr 0.05), no .item() until the end (the
Trainer's own cost per step is run.py's fulmen-c against its pytorch);
--warmup epochs first, then --epochs measured ones, each printed as a
line of bench/PROTOCOL.md's format. Each contender runs
--repeats times as its own process, round-robin, for every thread count of
--threads (default 1 and this machine's count; Inductor's kernels, and so
the compiled packages, are built for each count). Writes
bench/RESULTS-exported.md (--out).

    .deps/venv/bin/python bench/exported.py --binary build/bench/exported_step
    .deps/venv/bin/python bench/exported.py --contenders pytorch,torch-compile --models mlp --repeats 1
    python3 bench/exported.py --device cuda --threads 1 --optional fulmen-compiled,torch-compile  # GPU kit

A contender that fails (before the timed runs: one short run of each)
stops the benchmark with its command and stderr, and nothing is written;
--optional names contenders whose build or first run may fail instead:
their rows then say why they were not measured (the GPU kit: a CUDA
AOTInductor package needs a CUDA toolchain beside PyTorch).
"""
import argparse
import datetime
import json
import math
import os
import shlex
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import report  # noqa: E402
from run import TAIL, json_records, run_process, versions  # noqa: E402

MODELS = ("mlp", "cnn", "gpt")
CONTENDERS = ("fulmen-exported", "fulmen-compiled", "pytorch", "torch-compile")
FULMEN = ("fulmen-exported", "fulmen-compiled")
BASELINE = "pytorch"
LR = 0.05
SEED = 0
DTYPES = {"float32": "f32", "int64": "i64"}


class Failed(Exception):
    """A contender failed: the benchmark stops, writing nothing."""


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--contenders", default=",".join(CONTENDERS))
    p.add_argument("--binary", default=os.path.join(ROOT, "build", "bench", "exported_step"))
    p.add_argument("--batch", type=int, default=64, help="rows per batch")
    p.add_argument("--batches", type=int, default=16, help="fixed batches, the steps of one epoch")
    p.add_argument("--epochs", type=int, default=5, help="measured epochs")
    p.add_argument("--warmup", type=int, default=1, help="epochs run first, not measured")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", default=None,
                   help="comma-separated intra-op thread counts (default: 1 and this machine's count; 1 on cuda)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--compiled-random", choices=("eager", "inductor"), default="eager",
                   help="the compiled steps' dropout: ATen's, eager PyTorch's masks (export_compiled_step's "
                        "default), or Inductor's own generator, as torch.compile's")
    p.add_argument("--optional", default="", help="contenders whose build or first run may fail (noted)")
    p.add_argument("--python", default=sys.executable, help="the Python of the PyTorch contenders")
    p.add_argument("--timeout", type=float, default=900, help="seconds allowed per run")
    p.add_argument("--work", help="folder for the exports and data, kept (default: a temporary one, removed)")
    p.add_argument("--out", default=os.path.join(HERE, "RESULTS-exported.md"))
    # One Python contender's run (the harness starts these):
    p.add_argument("--contender", choices=("pytorch", "torch-compile"), help=argparse.SUPPRESS)
    p.add_argument("--workload", choices=MODELS, help=argparse.SUPPRESS)
    p.add_argument("--data", help=argparse.SUPPRESS)
    p.add_argument("--init", help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=SEED, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    a.models = [m for m in a.models.split(",") if m]
    a.contenders = [c for c in a.contenders.split(",") if c]
    a.optional = {c for c in a.optional.split(",") if c}
    for m in a.models:
        if m not in MODELS:
            p.error(f"unknown model {m!r}; known: {', '.join(MODELS)}")
    for c in a.contenders + sorted(a.optional):
        if c not in CONTENDERS:
            p.error(f"unknown contender {c!r}; known: {', '.join(CONTENDERS)}")
    if min(a.batch, a.batches, a.epochs, a.repeats) < 1 or a.warmup < 0:
        p.error("--batch, --batches, --epochs and --repeats must be >= 1, --warmup >= 0")
    if a.batch < 2:
        p.error("--batch must be >= 2 (torch.export takes a size of 1 for a constant)")
    if a.threads is None:
        a.threads = "1" if a.device == "cuda" else f"1,{os.cpu_count() or 1}"
    try:
        a.threads = sorted({int(t) for t in str(a.threads).split(",") if t})
    except ValueError:
        p.error(f"--threads takes comma-separated counts, got {a.threads!r}")
    if not a.threads or a.threads[0] < 1:
        p.error("--threads counts must be >= 1")
    return a


def export_parity():
    """tests/interop/export_parity.py, whose models these are."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "interop"))
    import export_parity as ep

    return ep


# ---------------------------------------------------------------- data


def write_data(folder, x, y, batch):
    """x.bin, y.bin (raw, row-major) and spec.txt: "ROWS BATCH", then for x
    and y "DTYPE RANK DIMS..." of one row (what exported_step reads)."""
    os.makedirs(folder, exist_ok=True)
    cols = []
    for name, t in (("x.bin", x), ("y.bin", y)):
        dtype = DTYPES[str(t.dtype).removeprefix("torch.")]
        t.contiguous().numpy().tofile(os.path.join(folder, name))
        cols.append(f"{dtype} {t.dim() - 1} {' '.join(str(d) for d in t.shape[1:])}".strip())
    with open(os.path.join(folder, "spec.txt"), "w") as f:
        f.write(f"{x.shape[0]} {batch}\n{cols[0]}\n{cols[1]}\n")


def read_batches(folder, device):
    """The fixed batches of write_data's folder, as [(x, y), ...] on `device`."""
    import numpy
    import torch

    with open(os.path.join(folder, "spec.txt")) as f:
        words = f.read().split()
    rows, batch = int(words[0]), int(words[1])
    cols, i = [], 2
    for _ in range(2):
        dtype, rank = words[i], int(words[i + 1])
        cols.append((dtype, [int(d) for d in words[i + 2:i + 2 + rank]]))
        i += 2 + rank
    tensors = []
    for name, (dtype, dims) in zip(("x.bin", "y.bin"), cols):
        raw = numpy.fromfile(os.path.join(folder, name), dtype={"f32": "float32", "i64": "int64"}[dtype])
        tensors.append(torch.from_numpy(raw).reshape(rows, *dims))
    x, y = tensors
    return [(x[s:s + batch].contiguous().to(device), y[s:s + batch].contiguous().to(device))
            for s in range(0, rows, batch)]


# ---------------------------------------------------------------- the Python contenders


def python_contender(args):
    """Runs contender args.contender (pytorch or torch-compile) on one model in
    this process; PROTOCOL.md's lines on stdout."""
    sys.path.insert(0, os.path.join(HERE, "python"))
    import common

    args.accelerator = args.device
    args.threads = args.threads[0]
    common.setup(args)  # threads pinned, stdout kept for the protocol lines
    import warnings

    import torch

    warnings.simplefilter("ignore")  # self.log without a Trainer, in mlp's training_step
    build, _, with_idx, _ = export_parity().MODELS[args.workload]
    # Imports are not part of the load: mlp is a LightningModule, and
    # torch.optim and torch.compile import torch._dynamo on first use.
    import torch._dynamo  # noqa: F401
    if args.workload == "mlp":
        import lightning.pytorch  # noqa: F401
    device = common.device(args)
    batches = read_batches(args.data, device)
    started = time.perf_counter()
    module = build()
    module.load_state_dict(torch.load(args.init, weights_only=True))
    module.to(device).train()
    opt = torch.optim.SGD(module.parameters(), lr=LR)
    step = module.training_step
    if args.contender == "torch-compile":
        step = torch.compile(module.training_step)
    common.sync(args)
    load = time.perf_counter() - started

    def one(batch):
        # batch_idx is the constant 0, as in the export (and a changing int
        # would make torch.compile recompile).
        out = step(batch, 0) if with_idx else step(batch)
        loss = out["loss"] if isinstance(out, dict) else out
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    torch.manual_seed(args.seed)
    first, loss = None, None
    for epoch in range(args.warmup + args.epochs):
        common.sync(args)
        t0 = time.perf_counter()
        for batch in batches:
            loss = one(batch)
            if first is None:
                common.sync(args)
                first = time.perf_counter() - t0
        common.sync(args)
        seconds = time.perf_counter() - t0
        if epoch >= args.warmup:
            common.epoch_line(args.contender, args.workload, epoch, seconds, len(batches))
    common.emit({"contender": args.contender, "workload": args.workload, "done": True, "loss": loss.item(),
                 "load_seconds": round(load, 6), "first_step_seconds": round(first, 6)})


# ---------------------------------------------------------------- preparing a model


def prepare(args, name, work, notes):
    """Builds `name` (seeded), writes its batches, initial weights and
    exports; returns {"data", "init", "archive", "packages": {threads:
    path}, "build": {contender: seconds or {threads: seconds}}}."""
    import torch

    ep = export_parity()
    build, make_data, _, decompose = ep.MODELS[name]
    torch.manual_seed(0)
    module = build()
    x, y = make_data(args.batch * args.batches, 0)
    folder = os.path.join(work, name)
    data = os.path.join(folder, "data")
    write_data(data, x, y, args.batch)
    init = os.path.join(folder, "init.pt")
    state = {k: v.detach().clone() for k, v in module.state_dict().items()}
    torch.save(state, init)
    example = (x[:args.batch], y[:args.batch])
    archive = os.path.join(folder, f"{name}.pt2")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        ep.export_for_fulmen(module, example, archive, programs=("training_step", "forward"), decompose=decompose)
        built = {"fulmen-exported": time.perf_counter() - t0}
        packages = {}
        if "fulmen-compiled" in args.contenders:
            packages, built["fulmen-compiled"] = compiled_packages(args, name, module, example, folder, notes)
    after = module.state_dict()
    changed = [k for k in state if not torch.equal(state[k], after[k].detach().cpu())]
    if changed:
        raise Failed(f"{name}: exporting changed the module's state ({changed}); the contenders would not "
                     f"start from the same weights")
    return dict(data=data, init=init, archive=archive, packages=packages, build=built)


def compiled_packages(args, name, module, example, folder, notes):
    """The AOTInductor package of `module`'s training step for each thread
    count (Inductor writes its CPU kernels for the count torch has), or one
    for cuda: ({threads: path}, {threads: seconds}). A failure stops the
    benchmark unless fulmen-compiled is --optional (then noted, {})."""
    import copy

    import torch

    ep = export_parity()
    counts = args.threads if args.device == "cpu" else [args.threads[0]]
    packages, seconds = {}, {}
    before = torch.get_num_threads()
    try:
        target = module
        if args.device == "cuda":
            target = copy.deepcopy(module).to("cuda")
            example = tuple(t.to("cuda") for t in example)
        for t in counts:
            torch.set_num_threads(t)
            path = os.path.join(folder, f"{name}-step-{t}threads.pt2")
            t0 = time.perf_counter()
            ep.export_compiled_step(target, example, path, eager_random=args.compiled_random == "eager")
            seconds[t] = time.perf_counter() - t0
            packages[t] = path
            print(f"{name}: compiled step for {t} thread(s) in {seconds[t]:.1f} s", file=sys.stderr, flush=True)
    except Exception as e:  # noqa: BLE001 - reported, or raised as Failed
        why = f"fulmen-compiled {name}: building the {args.device} package failed: {type(e).__name__}: {e}"
        if "fulmen-compiled" not in args.optional:
            raise Failed(why) from e
        notes.setdefault(("fulmen-compiled", name), " ".join(why.split())[-600:])
        return {}, {}
    finally:
        torch.set_num_threads(before)
    return packages, seconds


# ---------------------------------------------------------------- running contenders


def command(args, contender, name, prepared, threads, epochs, warmup):
    """argv of one run."""
    common = ["--workload", name, "--data", prepared["data"], "--epochs", str(epochs), "--warmup", str(warmup),
              "--threads", str(threads), "--seed", str(SEED)]
    if contender in FULMEN:
        argv = [args.binary, "--model", prepared["archive"], "--lr", str(LR), "--accelerator", args.device]
        if contender == "fulmen-compiled":
            argv += ["--compiled", prepared["packages"][threads if args.device == "cpu" else args.threads[0]]]
        return argv + common
    return [args.python, os.path.abspath(__file__), "--contender", contender, "--init", prepared["init"],
            "--device", args.device] + common


def run_one(args, contender, name, prepared, threads, epochs, warmup):
    """One run's {"epochs": [...], "done": {...}, "rss_kib", ...}; Failed when
    it does not deliver every line PROTOCOL.md asks."""
    cmd = command(args, contender, name, prepared, threads, epochs, warmup)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    out, tail, code, rss, _ = run_process(cmd, args.timeout, env)
    lines, done = [], None
    for rec in json_records(out, workload=name, contender=contender):
        if rec.get("done"):
            done = rec
        elif "seconds" in rec:
            lines.append(rec)
    ok = code == 0 and done is not None and len(lines) == epochs and math.isfinite(done.get("loss", math.nan))
    if not ok:
        got = f"{len(lines)} of {epochs} epoch lines" + (", no done line" if done is None else
                                                           f", final loss {done.get('loss')}")
        raise Failed(f"{contender} {name} ({threads} thread(s)) failed: exit status {code}, {got}\n"
                     f"  command: {shlex.join(cmd)}\n"
                     f"--- its stderr (last {TAIL} bytes) ---\n{tail.rstrip()}\n---")
    return dict(epochs=lines, done=done, rss_kib=rss)


def preflight(args, prepared, notes):
    """One short run (1 epoch, no warm-up, the first thread count) of each
    contender on each model: one that cannot run stops the benchmark
    before the timed runs (an --optional one is dropped for that model,
    noted). Returns {(contender, model): its run} of those that ran (their
    first step is the cold one: nothing compiled yet)."""
    first = {}
    for name in args.models:
        for c in args.contenders:
            if (c, name) in notes:
                continue
            print(f"[preflight] {c} {name}", file=sys.stderr, flush=True)
            try:
                first[(c, name)] = run_one(args, c, name, prepared[name], args.threads[0], 1, 0)
            except Failed as e:
                if c not in args.optional:
                    raise
                notes[(c, name)] = f"{c} {name}: not measured: its first run failed: {' '.join(str(e).split())[-600:]}"
    return first


def timed_runs(args, prepared, pairs):
    """{(threads, model, contender): [run, ...]}, round-robin over the
    contenders in every repeat."""
    runs = {}
    plan = [(r, t, name, c) for r in range(args.repeats) for t in args.threads for name in args.models
            for c in args.contenders if (c, name) in pairs]
    for i, (r, t, name, c) in enumerate(plan, 1):
        print(f"[{i}/{len(plan)}] {c} {name} threads={t} repeat {r + 1}/{args.repeats}", file=sys.stderr,
              flush=True)
        runs.setdefault((t, name, c), []).append(run_one(args, c, name, prepared[name], t, args.epochs,
                                                         args.warmup))
    return runs


# ---------------------------------------------------------------- the table

WHAT = {
    "mlp": "Linear(4, 16), BatchNorm1d, ReLU, Linear(16, 3); a LightningModule whose training_step "
           "logs and returns loss and accuracy (its two self.log calls run in pytorch and torch-compile, "
           "returning at once without a Trainer; the export recorded them once)",
    "cnn": "Conv2d(1, 4, 3), BatchNorm2d, ReLU, MaxPool2d(2), Linear(64, 4) on 1x8x8 images "
           "(exported decomposed)",
    "gpt": "character GPT: vocabulary 32, context 16, width 32, 2 blocks of 2 heads, tied embedding, dropout 0.1",
}


RANDOM = {"eager": "its dropout calling ATen's (eager_random, eager PyTorch's masks)",
          "inductor": "its dropout drawn by Inductor's own generator (eager_random=False, as torch.compile's)"}


def step_ms(run_list):
    """Every measured epoch's ms per step, over all runs."""
    return [1e3 * e["seconds"] / e["steps"] for run in run_list for e in run["epochs"]]


def cell_build(build, contender, threads):
    value = build.get(contender)
    if isinstance(value, dict):
        value = value.get(threads)
    return "–" if value is None else f"{value:.1f}"


def table(args, prepared, first, runs, threads):
    lines = [f"| model | contender | ms/step (median) | min–max | / {BASELINE} | build (s) | load (ms) | "
             f"first step (ms) | loss at the end |", "|---|---|---|---|---|---|---|---|---|"]
    for name in args.models:
        base = runs.get((threads, name, BASELINE))
        base_ms = statistics.median(step_ms(base)) if base else None
        for c in args.contenders:
            rl = runs.get((threads, name, c))
            if not rl:
                lines.append(f"| {name} | {c} | not measured (below) | | | | | | |")
                continue
            ms = sorted(step_ms(rl))
            med = statistics.median(ms)
            ratio = f"{med / base_ms:.2f}" if base_ms else "–"
            load = statistics.median(r["done"]["load_seconds"] for r in rl) * 1e3
            warm = statistics.median(r["done"]["first_step_seconds"] for r in rl) * 1e3
            cold = first[(c, name)]["done"]["first_step_seconds"] * 1e3
            first_text = f"{cold:.0f} ({warm:.0f})"
            loss = rl[0]["done"]["loss"]
            lines.append(f"| {name} | {c} | {med:.3f} | {ms[0]:.3f}–{ms[-1]:.3f} | {ratio} | "
                         f"{cell_build(prepared[name]['build'], c, threads)} | {load:.0f} | {first_text} | "
                         f"{loss:.5g} |")
    return lines


def markdown(args, prepared, first, runs, notes, started, load, argv):
    v = versions(args)
    where = "the CPU" if args.device == "cpu" else "cuda:0 (batches there before the loop)"
    lines = ["# fulmen benchmark: exported models, one training step four ways", "",
             f"Produced on {started} by:", "", "```", shlex.join(["python", "bench/exported.py", *argv]), "```", "",
             f"- machine: {report.machine(args.device)}; load average {load:.2f} when started",
             f"- versions: fulmen {v['fulmen']}, torch {v['torch']}, lightning {v['lightning']}, Python {v['python']}",
             f"- device: {where}; {args.batches} fixed batches of {args.batch} rows per epoch, in order, the same "
             f"files for every contender; {args.warmup} warm-up epoch(s), {args.epochs} measured, "
             f"{args.repeats} repeat(s) per contender, each its own process, round-robin; "
             f"SGD lr {LR}, zero_grad(set_to_none) before backward, seed {SEED}",
             "- models (tests/interop/export_parity.py, seeded weights shared by every contender):"]
    lines += [f"  - {m}: {WHAT[m]}" for m in args.models]
    lines += ["- contenders: fulmen-exported runs the exported training_step program "
              "(build/bench/exported_step: fulmen_model_call_method, fulmen_tensor_backward, "
              "fulmen_optimizer_zero_grad / _step); fulmen-compiled adds export_compiled_step's AOTInductor "
              f"package (fulmen_model_add_compiled_step), built for each thread count, "
              f"{RANDOM[args.compiled_random]}; pytorch calls training_step eagerly; torch-compile calls "
              "torch.compile(module.training_step) (default mode, Inductor's own random numbers), which "
              "compiles in its first step",
              "- ms/step: each measured epoch's time over its steps, median over epochs and repeats; "
              f"/ {BASELINE}: that median over {BASELINE}'s on the same model and threads (below 1: faster)",
              "- build: seconds spent in Python before the run (export_for_fulmen of training_step and forward; "
              "export_compiled_step of one package); load: the model ready to train in the contender's process "
              "(fulmen: load_exported and add_compiled_step); first step: the first step of the first run of the "
              "contender on that model (the preflight, with the first thread count; torch-compile compiles "
              "there, its Inductor cache still empty), then in parentheses the median first step of the timed "
              "runs (torch-compile: compiling again, from a warm cache)",
              "- loss at the end: the last step's loss of the first run (the same for fulmen-exported and "
              "pytorch up to float rounding; compiled steps reorder the arithmetic, and gpt's dropout masks "
              "differ under torch.compile)", ""]
    for t in args.threads:
        lines += [f"## {t} thread{'s' if t > 1 else ''}", ""] + table(args, prepared, first, runs, t) + [""]
    if notes:
        lines += ["## Not measured", ""] + [f"- {n}" for n in notes.values()] + [""]
    return "\n".join(lines)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.contender:
        return python_contender(args)
    if any(c in FULMEN for c in args.contenders) and not os.access(args.binary, os.X_OK):
        print(f"exported.py: {args.binary} is not built (make {os.path.relpath(args.binary, ROOT)}); "
              f"leave the fulmen contenders out with --contenders pytorch,torch-compile", file=sys.stderr)
        return 1
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    load = os.getloadavg()[0]
    work = args.work or tempfile.mkdtemp(prefix="fulmen-exported-bench-")
    os.makedirs(work, exist_ok=True)
    # One Inductor cache for this benchmark's compiles (the exports here and
    # torch.compile in the contenders): cold at the first compile of each.
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(work, "inductor-cache")
    notes = {}
    try:
        prepared = {name: prepare(args, name, work, notes) for name in args.models}
        first = preflight(args, prepared, notes)
        runs = timed_runs(args, prepared, first)
    except Failed as e:
        print(f"exported.py: {e}\nexported.py: no results written", file=sys.stderr)
        return 1
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    text = markdown(args, prepared, first, runs, notes, started, load, argv)
    with open(args.out, "w") as f:
        f.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Compiled training steps (python/fulmen_export.py's export_compiled_step:
training_step's forward and backward compiled by AOTInductor) give what
eager PyTorch gives, and how much faster they run.

    python compiled_step_check.py [--work DIR] [--models mlp,cnn,...] [--steps 50] [--threads N]
                                  [--export-twice]

Each model is seeded, exported to a package, loaded back through
``torch._C._aoti.AOTIModelPackageLoader`` (the loader fulmen's C++ side
uses; load_compiled_step) and run on the inputs the package's contract
names: parameters, buffers, then the batch's tensors. Checked against
eager PyTorch's ``training_step`` + ``loss.backward()`` on the same batch,
same seed:
- the metadata read back (get_metadata of the loaded model, and
  load_metadata_from_package, which does not load it) is what the export
  returned and names the module's parameters, buffers, shapes and the
  loss's index;
- the loss within 1e-5 (relative), every gradient within 1e-4 of eager's
  (relative to its largest magnitude, at least 1), a tied weight's one
  gradient eager's sum, a parameter the loss does not reach (or a frozen
  one) exactly zeros; the new buffers (BatchNorm's running statistics,
  num_batches_tracked) within 1e-5 and the others unchanged in eager;
- the inputs unchanged, every output contiguous and sharing storage with
  no input and no other output;
- the default generator left as eager leaves it;
- STEPS_SGD steps of SGD fed by the package (new buffers copied back) lose
  what eager's do, step by step, and end in the same state.
Models: mlp (a LightningModule: Linear, BatchNorm1d; returns {"loss",
"accuracy"}, logs), cnn (Conv2d, BatchNorm2d, MaxPool2d, Linear), gpt (a
character GPT, token embedding tied to the output layer, views of
transposed tensors, dropout 0), edge (an unused parameter, a frozen one,
two parameters whose gradients are the same expression, one whose gradient
is a broadcast, a buffer that takes another's value), dropout (gpt with
dropout 0.1: the default eager_random draws eager's masks, so it must
match too) and dropout_inductor (eager_random=False: Inductor's generator;
it must run, repeat itself for a seed and change with the seed; its
difference from eager is printed, not checked).

Also: arguments and steps it refuses (no training_step, a path not .pt2,
a bad model name, a non-tensor in the batch, a loss of several values, a
loss that reaches no parameter) are refused before compiling, with the
module's mode restored.

Then the time of one step (forward + backward; no optimizer), eager vs
compiled, over --steps steps after 3 of warm-up, with --threads threads
(also during the export: Inductor writes serial kernels when torch has one
thread; the package's kernels share torch's OpenMP threads; more threads
than free cores makes both slow and noisy), and the time each export took
(--export-twice exports again, to show what Inductor's cache saves; set
TORCHINDUCTOR_CACHE_DIR for a cold or a shared cache). Exits 1 on a
mismatch.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import warnings

import torch
from torch import nn
from torch.utils import _pytree as pytree

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
from fulmen_export import _takes_batch_idx, export_compiled_step, load_compiled_step  # noqa: E402

sys.path.insert(0, HERE)
# The models and data of the exported-program parity test.
from export_parity import CharGPT, SmallCNN, build_mlp, cnn_data, gpt_data, mlp_data  # noqa: E402

BATCH = 8
SEED = 1234
LOSS_TOLERANCE = 1e-5
GRAD_TOLERANCE = 1e-4
BUFFER_TOLERANCE = 1e-5
REPEAT_TOLERANCE = 1e-6
STEPS_SGD = 4
LR = 0.1


class Edge(nn.Module):
    """An unused parameter, a frozen one, two parameters with the same
    gradient expression, one whose gradient is a broadcast of the loss's,
    a buffer written in place and one given another's value."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(3, 5))
        self.a = nn.Parameter(torch.randn(5))
        self.b = nn.Parameter(torch.randn(5))
        self.flat = nn.Parameter(torch.randn(2, 3))
        self.frozen = nn.Parameter(torch.randn(5), requires_grad=False)
        self.unused = nn.Parameter(torch.randn(4))
        self.register_buffer("calls", torch.zeros((), dtype=torch.int64))
        self.register_buffer("scale", torch.full((5,), 0.5))
        self.register_buffer("last_scale", torch.zeros(5))

    def training_step(self, batch):
        self.calls += 1
        self.last_scale.copy_(self.scale)
        x = batch["x"]
        h = x @ self.w * self.scale + self.frozen
        return (h * (self.a + self.b)).square().mean() + self.flat.sum()


def edge_data(rows, offset):
    g = torch.Generator().manual_seed(300 + offset)
    return {"x": torch.randn(rows, 3, generator=g)}


MODELS = {
    # name: (builder, data, eager_random, compared with eager)
    "mlp": (build_mlp, mlp_data, True, True),
    "cnn": (SmallCNN, cnn_data, True, True),
    "gpt": (lambda: CharGPT(0.0), gpt_data, True, True),
    "edge": (Edge, edge_data, True, True),
    "dropout": (lambda: CharGPT(0.1), gpt_data, True, True),
    "dropout_inductor": (lambda: CharGPT(0.1), gpt_data, False, False),
}


class Mismatch(Exception):
    pass


def check(ok, message):
    if not ok:
        raise Mismatch(message)


def eager_step(module, batch):
    """training_step + backward on `module` (grads set, buffers updated);
    returns the loss."""
    module.train()
    for p in module.parameters():
        p.grad = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # self.log without a Trainer
        out = module.training_step(batch, 0) if _takes_batch_idx(module.training_step) else module.training_step(batch)
    loss = out["loss"] if isinstance(out, dict) else out
    loss.backward()
    return loss.detach()


def package_inputs(module, batch):
    """INPUTS of the contract: parameters, buffers, batch leaves (copies)."""
    params = [p.detach().clone() for p in module.parameters()]
    buffers = [b.detach().clone() for b in module.buffers()]
    return params, buffers, [t.clone().contiguous() for t in pytree.tree_leaves(batch)]


def rel(a, b):
    """|a - b| over the larger of 1 and |b|'s largest entry."""
    a, b = a.double(), b.double()
    return ((a - b).abs().max() / max(1.0, b.abs().max().item())).item() if b.numel() else 0.0


def check_metadata(name, module, batch, meta, loaded, path):
    """The metadata read back (from the loaded model, and from the package
    without loading it) holds what the export returned and describes the
    module."""
    unloaded = torch._C._aoti.AOTIModelPackageLoader.load_metadata_from_package(path, "training_step")
    for key, value in meta.items():
        check(loaded.get(key) == value, f"{name}: metadata {key} reads back {loaded.get(key)!r}, wrote {value!r}")
        check(unloaded.get(key) == value, f"{name}: metadata {key} reads {unloaded.get(key)!r} from the package")
    check(meta["fulmen.format"] == "compiled_step/1", f"{name}: format {meta['fulmen.format']}")
    names = [n for n, _ in module.named_parameters()]
    check(json.loads(meta["fulmen.parameters"]) == names, f"{name}: fulmen.parameters {meta['fulmen.parameters']}")
    buffers = [n for n, _ in module.named_buffers()]
    check(json.loads(meta["fulmen.buffers"]) == buffers, f"{name}: fulmen.buffers {meta['fulmen.buffers']}")
    mutated = json.loads(meta["fulmen.mutated_buffers"])
    check([b for b in buffers if b in mutated] == mutated, f"{name}: mutated buffers {mutated} out of order")
    check(int(meta["fulmen.loss_index"]) == len(mutated), f"{name}: loss_index {meta['fulmen.loss_index']}")
    shapes = [[str(t.dtype).removeprefix("torch."), list(t.shape)] for t in pytree.tree_leaves(batch)]
    check(json.loads(meta["fulmen.batch_shapes"]) == shapes, f"{name}: batch_shapes {meta['fulmen.batch_shapes']}")
    shapes = [[str(p.dtype).removeprefix("torch."), list(p.shape)] for p in module.parameters()]
    check(json.loads(meta["fulmen.parameter_shapes"]) == shapes, f"{name}: parameter_shapes")
    shapes = [[str(b.dtype).removeprefix("torch."), list(b.shape)] for b in module.buffers()]
    check(json.loads(meta["fulmen.buffer_shapes"]) == shapes, f"{name}: buffer_shapes")
    return mutated


def check_outputs_own_storage(name, inputs, outputs):
    """Every output contiguous, its storage no input's nor another output's."""
    seen = {t.untyped_storage().data_ptr() for t in inputs if t.numel()}
    for i, t in enumerate(outputs):
        check(t.is_contiguous(), f"{name}: output {i} is not contiguous (strides {t.stride()})")
        if not t.numel():
            continue
        ptr = t.untyped_storage().data_ptr()
        check(ptr not in seen, f"{name}: output {i} shares storage with an input or another output")
        seen.add(ptr)


def check_step(name, module, batch, loader, meta, compared, path):
    """One step, compiled vs eager, on the same batch and seed. Returns
    (loss difference, gradient difference, buffer difference)."""
    mutated = check_metadata(name, module, batch, meta, loader.get_metadata(), path)
    params, buffers, leaves = package_inputs(module, batch)
    inputs = params + buffers + leaves
    before = [t.clone() for t in inputs]
    torch.manual_seed(SEED)
    outputs = loader.run(inputs)
    generator_after = torch.get_rng_state()
    n_mut = len(mutated)
    check(len(outputs) == n_mut + 1 + len(params), f"{name}: {len(outputs)} outputs, want {n_mut + 1 + len(params)}")
    check(all(torch.equal(a, b) for a, b in zip(inputs, before)), f"{name}: the package wrote its inputs")
    check_outputs_own_storage(name, inputs, outputs)
    loss = outputs[n_mut]
    check(loss.dim() == 0 and loss.is_floating_point(), f"{name}: the loss is {loss.dtype} {list(loss.shape)}")
    for p, g in zip(params, outputs[n_mut + 1:]):
        check(g.shape == p.shape and g.dtype == p.dtype, f"{name}: a gradient of {list(g.shape)} for {list(p.shape)}")
    if not compared:
        return None
    torch.manual_seed(SEED)
    eager_loss = eager_step(module, batch)
    check(torch.equal(torch.get_rng_state(), generator_after), f"{name}: the generator ends elsewhere than eager's")
    loss_diff = abs(loss.item() - eager_loss.item()) / max(abs(eager_loss.item()), 1e-12)
    check(loss_diff <= LOSS_TOLERANCE, f"{name}: loss {loss.item()!r}, eager {eager_loss.item()!r}")
    grad_diff = 0.0
    for (pname, p), g in zip(module.named_parameters(), outputs[n_mut + 1:]):
        if p.grad is None:
            check(torch.count_nonzero(g).item() == 0, f"{name}: {pname} is not reached, its gradient is not zeros")
            continue
        d = rel(g, p.grad)
        check(d <= GRAD_TOLERANCE, f"{name}: gradient of {pname} differs from eager's by {d:.2e}")
        grad_diff = max(grad_diff, d)
    buffer_diff = 0.0
    new = dict(zip(mutated, outputs[:n_mut]))
    for (bname, b), old in zip(module.named_buffers(), buffers):
        if bname in new:
            d = rel(new[bname], b)
            check(new[bname].dtype == b.dtype and d <= BUFFER_TOLERANCE,
                  f"{name}: new {bname} differs from eager's by {d:.2e}")
            buffer_diff = max(buffer_diff, d)
        else:
            check(torch.equal(b, old), f"{name}: eager changed {bname}, which the package does not return")
    return loss_diff, grad_diff, buffer_diff


def check_sgd(name, module, data, loader, meta):
    """STEPS_SGD steps of SGD on new batches: the package's losses (its new
    buffers copied back) are eager's, and so is the final state."""
    n_mut = int(meta["fulmen.loss_index"])
    mutated = json.loads(meta["fulmen.mutated_buffers"])
    buffer_names = [n for n, _ in module.named_buffers()]
    params, buffers, _ = package_inputs(module, data(BATCH, 0))
    worst = 0.0
    for step in range(STEPS_SGD):
        batch = data(BATCH, BATCH * (step + 1))
        torch.manual_seed(SEED + step)
        outputs = loader.run(params + buffers + [t.contiguous() for t in pytree.tree_leaves(batch)])
        for bname, value in zip(mutated, outputs[:n_mut]):
            buffers[buffer_names.index(bname)].copy_(value)
        for p, g in zip(params, outputs[n_mut + 1:]):
            p.sub_(LR * g)
        torch.manual_seed(SEED + step)
        eager_loss = eager_step(module, batch)
        with torch.no_grad():
            for p in module.parameters():
                if p.grad is not None:
                    p.sub_(LR * p.grad)
        d = abs(outputs[n_mut].item() - eager_loss.item()) / max(abs(eager_loss.item()), 1e-12)
        check(d <= LOSS_TOLERANCE, f"{name}: SGD step {step} loss {outputs[n_mut].item()!r}, "
                                   f"eager {eager_loss.item()!r}")
        worst = max(worst, d)
    for (pname, p), mine in zip(module.named_parameters(), params):
        check(rel(mine, p.detach()) <= GRAD_TOLERANCE, f"{name}: after SGD {pname} differs from eager's")
    for (bname, b), mine in zip(module.named_buffers(), buffers):
        check(rel(mine, b) <= BUFFER_TOLERANCE, f"{name}: after SGD {bname} differs from eager's")
    return worst


def check_inductor_random(name, module, batch, loader, meta):
    """Inductor's generator: a seed repeats the run (within REPEAT_TOLERANCE:
    with several threads a reduction may add in another order), another
    seed changes it. Returns the loss's relative difference from eager's."""
    params, buffers, leaves = package_inputs(module, batch)
    inputs = params + buffers + leaves
    n_mut = int(meta["fulmen.loss_index"])
    runs = []
    for seed in (SEED, SEED, SEED + 1):
        torch.manual_seed(seed)
        runs.append(loader.run(inputs))
    repeat = max(rel(a, b) for a, b in zip(runs[1], runs[0]))
    check(repeat <= REPEAT_TOLERANCE, f"{name}: the same seed ran differently ({repeat:.1e})")
    moved = rel(runs[2][n_mut], runs[0][n_mut])
    check(moved > 100 * REPEAT_TOLERANCE, f"{name}: another seed drew the same masks ({moved:.1e})")
    check(all(bool(torch.isfinite(t.float()).all()) for t in runs[0]), f"{name}: outputs not finite")
    torch.manual_seed(SEED)
    eager_loss = eager_step(module, batch)
    return abs(runs[0][n_mut].item() - eager_loss.item()) / abs(eager_loss.item())


def time_steps(module, batch, loader, steps):
    """Milliseconds per step: eager forward + backward, and the package's
    run, each over `steps` steps after 3 of warm-up."""
    params, buffers, leaves = package_inputs(module, batch)
    inputs = params + buffers + leaves
    result = []
    for run in (lambda: eager_step(module, batch), lambda: loader.run(inputs)):
        for _ in range(3):
            run()
        start = time.perf_counter()
        for _ in range(steps):
            run()
        result.append((time.perf_counter() - start) * 1000 / steps)
    return result


class Returns(nn.Module):
    """training_step returns what `make(self, x)` makes."""

    def __init__(self, make):
        super().__init__()
        self.w = nn.Parameter(torch.ones(3))
        self.make = make

    def training_step(self, batch):
        return self.make(self, batch[0])


def check_refusals(work):
    """Arguments and steps export_compiled_step refuses, before compiling,
    with a message that says why; the module's mode is left as it was."""
    x = torch.randn(4, 3)
    cases = [
        ("no training_step", nn.Linear(3, 1), (x,), "x.pt2", {}, "defines no training_step"),
        ("a path not .pt2", Returns(lambda m, x: (x * m.w).sum()), (x,), "x.bin", {}, "must end in .pt2"),
        ("a model name with /", Returns(lambda m, x: (x * m.w).sum()), (x,), "x.pt2", {"model_name": "a/b"},
         "letters, digits and _"),
        ("an int in the batch", Returns(lambda m, x: (x * m.w).sum()), (x, 3), "x.pt2", {}, "is a int"),
        ("a loss of 4 values", Returns(lambda m, x: x @ m.w), (x,), "x.pt2", {}, "one floating-point value"),
        ("a loss that reaches no parameter", Returns(lambda m, x: x.sum()), (x,), "x.pt2", {},
         "reaches no parameter"),
    ]
    for label, module, batch, path, kwargs, words in cases:
        module.eval()
        try:
            export_compiled_step(module, batch, os.path.join(work, path), **kwargs)
        except ValueError as e:
            check(words in str(e), f"refusing {label}: {e}")
        else:
            raise Mismatch(f"export_compiled_step took {label}")
        check(not module.training, f"refusing {label} left the module in training mode")
        check(not os.path.exists(os.path.join(work, path)), f"refusing {label} wrote {path}")
    print(f"refusals: {len(cases)} refused before compiling", flush=True)


def run_model(name, work, steps, export_twice):
    builder, data, eager_random, compared = MODELS[name]
    torch.manual_seed(SEED)
    module = builder()
    batch = data(BATCH, 0)
    path = os.path.join(work, f"{name}.pt2")
    start = time.perf_counter()
    meta = export_compiled_step(module, batch, path, eager_random=eager_random)
    export_s = [time.perf_counter() - start]
    if export_twice:
        start = time.perf_counter()
        export_compiled_step(module, batch, os.path.join(work, f"{name}-again.pt2"), eager_random=eager_random)
        export_s.append(time.perf_counter() - start)
    loader = load_compiled_step(path)
    diffs = check_step(name, module, batch, loader, meta, compared, path)
    if compared:
        sgd = check_sgd(name, module, data, loader, meta)
        result = (f"loss {diffs[0]:.1e}, gradients {diffs[1]:.1e}, buffers {diffs[2]:.1e}, "
                  f"{STEPS_SGD} SGD steps {sgd:.1e}")
    else:
        off = check_inductor_random(name, module, batch, loader, meta)
        result = f"runs, repeats per seed; its loss is {off:.1e} off eager's (other masks)"
    eager_ms, compiled_ms = time_steps(module, batch, loader, steps)
    exports = " then ".join(f"{s:.1f} s" for s in export_s)
    print(f"{name}: export {exports}; {result}; eager {eager_ms:.3f} ms/step, compiled {compiled_ms:.3f} ms/step "
          f"({eager_ms / compiled_ms:.1f}x)", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", help="where the packages go (default: a temporary folder, removed)")
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated (default: %(default)s)")
    ap.add_argument("--steps", type=int, default=50, help="timed steps per model (default: %(default)s)")
    ap.add_argument("--export-twice", action="store_true", help="export each model again, timed")
    ap.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's choice)")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    names = [n for n in a.models.split(",") if n]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        ap.error(f"unknown models {unknown}; known: {list(MODELS)}")
    work = a.work or tempfile.mkdtemp(prefix="fulmen-compiled-step-")
    os.makedirs(work, exist_ok=True)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, packages in {work}", flush=True)
    failed = []
    try:
        try:
            check_refusals(work)
        except Mismatch as e:
            print(f"MISMATCH {e}", flush=True)
            failed.append("refusals")
        for name in names:
            try:
                run_model(name, work, a.steps, a.export_twice)
            except Mismatch as e:
                print(f"MISMATCH {e}", flush=True)
                failed.append(name)
    finally:
        if not a.work:
            shutil.rmtree(work, ignore_errors=True)
    if failed:
        sys.exit(f"compiled_step_check: {', '.join(failed)} differ from eager PyTorch")
    print("compiled_step_check: all match")


if __name__ == "__main__":
    main()

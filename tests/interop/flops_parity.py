#!/usr/bin/env python3
"""fulmen counts a model's FLOPs as PyTorch's FlopCounterMode does
(Lightning's `measure_flops`).

    python flops_parity.py --binary build/interop/flops_parity [--work DIR] [--device cuda]

Each model (an MLP with BatchNorm, a CNN, a transposed convolution,
layers in a ModuleList and a ModuleDict, a GPT block with scaled_dot_product_attention and one with attention as
matrix products) is measured in PyTorch with
`lightning.fabric.utilities.throughput.measure_flops`, forward only and
with the backward of the output's sum (and, for float inputs, with the
input requiring a gradient too). fulmen loads the same module as
TorchScript and as a torch.export program and measures it through
`fulmen_model_measure_flops`, and through
`fulmen_measure_flops` around a host's forward and backward: every count
must equal PyTorch's exactly. The counts by module of the forward and
backward (`fulmen_model_measure_flops_by_module`,
`fulmen_measure_flops_by_module`) must equal those of torch's
`FlopCounterMode.get_flop_counts()`, and fulmen's table its `get_table()`
(tabulate 0.9, as the venv holds). The MLP, the layers in containers and
the GPT block with attention as matrix products are measured again with
formulas of the host's (FORMULAS: FlopCounterMode's custom_mapping in
PyTorch, `fulmen_flops_register_formula` in fulmen) for operators torch
counts as 0 and in place of its formula for `aten::mm`. With --device cuda (the GPU kit's
flops-cuda) both sides run on cuda:0, where attention takes CUDA's fused
kernels and their formulas.
"""
import argparse
import math
import os
import shutil
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from fulmen_export import export_for_fulmen  # noqa: E402


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(20, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Linear(64, 10))

    def forward(self, x):
        return self.net(x)


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, stride=2, groups=2), nn.ReLU())
        self.head = nn.Linear(16 * 6 * 6, 10)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


class Upsampler(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose2d(4, 2, 3, stride=2, padding=1, output_padding=1)
        self.conv = nn.Conv1d(2, 3, 5)

    def forward(self, x):
        y = self.up(x)
        return self.conv(y.flatten(2))


class Stack(nn.Module):
    """Layers in a ModuleList and a ModuleDict, which TorchScript's module
    hierarchy leaves out (they have no forward)."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(20, 32), nn.Linear(32, 32)])
        self.heads = nn.ModuleDict({"out": nn.Linear(32, 10)})

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return self.heads["out"](x)


class Block(nn.Module):
    """A GPT block: causal self-attention, through SDPA or as matrix products."""

    def __init__(self, fused):
        super().__init__()
        self.fused = fused
        self.embed = nn.Embedding(50, 32)
        self.qkv = nn.Linear(32, 96)
        self.proj = nn.Linear(32, 32)
        self.mlp = nn.Sequential(nn.Linear(32, 128), nn.GELU(), nn.Linear(128, 32))
        self.norm = nn.LayerNorm(32)
        self.head = nn.Linear(32, 50, bias=False)

    def forward(self, idx):
        x = self.embed(idx)
        b, t, c = x.shape
        q, k, v = self.qkv(self.norm(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, 4, c // 4).transpose(1, 2) for z in (q, k, v))
        if self.fused:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(c // 4)
            mask = torch.ones(t, t, dtype=torch.bool).tril()
            a = scores.masked_fill(~mask, float("-inf")).softmax(-1) @ v
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, c))
        x = x + self.mlp(self.norm(x))
        return self.head(x)


def numel(shape):
    return math.prod(shape)


# Formulas of a host's own (flops_parity.c registers the same), with
# torch's signature: the arguments' shapes, then out_shape. Not aten::add:
# under torch's mode autograd sums the gradients of a tensor used twice out
# of place (aten::add; the mode holds references to them), where it sums
# them in place without it (aten::add_), as in fulmen.
FORMULAS = {
    torch.ops.aten.gelu: lambda x, *a, out_shape=None, **k: 8 * numel(x),
    torch.ops.aten.gelu_backward: lambda g, x, *a, out_shape=None, **k: 10 * numel(x),
    torch.ops.aten.native_layer_norm: lambda x, shape, *a, out_shape=None, **k: 5 * numel(x) + len(shape),
    torch.ops.aten.native_layer_norm_backward: lambda g, *a, out_shape=None, **k: 7 * numel(g),
    torch.ops.aten._softmax: lambda x, *a, out_shape=None, **k: 3 * numel(x),
    torch.ops.aten.relu: lambda x, out_shape=None, **k: numel(out_shape),
    torch.ops.aten.mm: lambda a, b, out_shape=None, **k: 2 * a[0] * a[1] * b[1] + numel(out_shape),
}

# The models measured with FORMULAS too.
WITH_FORMULAS = ("mlp", "stack", "gpt_matmul", "encoder_layer", "encoder_layer_norm_first")

# fulmen's own layers beside torch's (flops_parity.c builds them by name):
# (name, torch's module, input shape). Their sub-modules count as torch's.
BUILT_IN = [
    ("encoder_layer", lambda: nn.TransformerEncoderLayer(32, 4, 64, 0.1, activation="gelu", batch_first=True),
     [4, 16, 32]),
    ("encoder_layer_norm_first",
     lambda: nn.TransformerEncoderLayer(32, 4, 64, 0.1, activation="gelu", batch_first=True, norm_first=True),
     [4, 16, 32]),
]

# (name, module, input dtype, input shape)
MODELS = [
    ("mlp", MLP, "float", [32, 20]),
    ("cnn", CNN, "float", [16, 1, 28, 28]),
    ("upsampler", Upsampler, "float", [2, 4, 8, 8]),
    ("stack", Stack, "float", [8, 20]),
    ("gpt_sdpa", lambda: Block(True), "long", [4, 16]),
    ("gpt_matmul", lambda: Block(False), "long", [4, 16]),
]


def measure_flops_with(mapping):
    """Lightning's measure_flops, with FlopCounterMode's custom_mapping
    `mapping`."""
    from torch.utils.flop_counter import FlopCounterMode

    def measure(module, forward_fn, loss_fn=None):
        with FlopCounterMode(display=False, custom_mapping=mapping) as mode:
            y = forward_fn()
            if loss_fn is not None:
                loss_fn(y).backward()
        return mode.get_total_flops()

    return measure


def torch_counts(module, x, mapping=None):
    """Forward only, with backward, and (float inputs) with backward to an
    input that requires a gradient too."""
    from lightning.fabric.utilities.throughput import measure_flops

    if mapping is not None:
        measure_flops = measure_flops_with(mapping)  # noqa: F811
    forward = measure_flops(module, lambda: module(x))
    backward = measure_flops(module, lambda: module(x), lambda y: y.sum())
    if not x.is_floating_point():
        return forward, backward, None
    x_grad = x.clone().requires_grad_()
    return forward, backward, measure_flops(module, lambda: module(x_grad), lambda y: y.sum())


def torch_by_module(module, x, mapping=None):
    """FlopCounterMode around a forward and the backward of its sum: the
    counts by module ("aten::mm" names, Global and zeros left out) and the
    table of get_table(2)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False, custom_mapping=mapping) as mode:
        module(x).sum().backward()
    module.zero_grad(set_to_none=True)
    by_module = {}
    for name, ops in mode.get_flop_counts().items():
        kept = {str(op).replace(".", "::", 1): n for op, n in ops.items() if n}
        if name != "Global" and kept:
            by_module[name] = kept
    return by_module, mode.get_table(2)


def fulmen_counts(binary, device, path, kind, dtype, shape, formulas=False):
    """The totals, the counts by module of the backward and host
    measurements, and the table."""
    flags = (["--cuda"] if device == "cuda" else []) + (["--formulas"] if formulas else [])
    out = subprocess.run([binary, *flags, path, kind, dtype, *map(str, shape)], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"flops_parity: {kind} {path} failed:\n{out.stderr}")
    totals, by_module, table = {}, {"backward": {}, "host": {}}, []
    for line in out.stdout.split("\n"):
        if line.startswith("table|"):
            table.append(line[len("table|"):])
        elif line.startswith("by_module "):
            _, what, module, op, n = line.split()
            by_module[what].setdefault(module, {})[op] = int(n)
        elif line:
            k, v = line.split()
            totals[k] = int(v)
    return totals, by_module, "\n".join(table)


def expected(name, module, x, device, mapping, input_grad_adds=True):
    """PyTorch's totals (as fulmen_counts names them), counts by module and
    table for `module` on `x`, with FlopCounterMode's custom_mapping
    `mapping`; the module ends on the CPU. `input_grad_adds`: the input's
    gradient needs products of its own (not where a norm comes first)."""
    forward, backward, backward_input = torch_counts(module.to(device), x.to(device), mapping)
    want_modules, want_table = torch_by_module(module, x.to(device), mapping)
    module.to("cpu")
    if len(want_modules) < 2:
        sys.exit(f"flops_parity: {name}: PyTorch counted by {list(want_modules)} only")
    if forward <= 0 or backward <= forward:
        sys.exit(f"flops_parity: {name}: PyTorch counted {forward} / {backward}")
    want = {"forward": forward, "backward": backward, "host": backward}
    if backward_input is not None:
        if input_grad_adds and backward_input <= backward:
            sys.exit(f"flops_parity: {name}: the input's gradient added nothing ({backward_input})")
        want["backward_input"] = backward_input
    return want, want_modules, want_table


def compare(what, got, want):
    """Exits unless fulmen's totals, counts by module (of every run) and
    table (`got`, as fulmen_counts gives them) equal PyTorch's (`want`, as
    expected gives them)."""
    (totals, by_module, table), (want_totals, want_modules, want_table) = got, want
    if totals != want_totals:
        sys.exit(f"flops_parity: {what}: fulmen counted {totals}, PyTorch {want_totals}")
    for run, counted in by_module.items():
        if counted != want_modules:
            sys.exit(f"flops_parity: {what} ({run}): fulmen counted by module\n{counted}\nPyTorch\n{want_modules}")
    if table != want_table:
        sys.exit(f"flops_parity: {what}: fulmen's table\n{table}\nPyTorch's\n{want_table}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--work")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = ap.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="fulmen-flops-")
    os.makedirs(work, exist_ok=True)
    try:
        for name, build, dtype, shape in MODELS:
            torch.manual_seed(0)
            module = build().train()
            x = torch.ones(shape, dtype=torch.long if dtype == "long" else torch.float32)
            script = os.path.join(work, f"{name}.pt")
            torch.jit.script(module).save(script)
            exported = os.path.join(work, f"{name}.pt2")
            export_for_fulmen(module, (x,), exported, programs=("forward",), forward_example=(x,))
            for mapping in (None, FORMULAS) if name in WITH_FORMULAS else (None,):
                want, want_modules, want_table = expected(name, module, x, args.device, mapping)
                for kind, path in (("torchscript", script), ("exported", exported)):
                    what = f"{name} as {kind}" + (" with the host's formulas" if mapping else "")
                    got = fulmen_counts(args.binary, args.device, path, kind, dtype, shape, mapping is not None)
                    compare(what, got, (want, want_modules, want_table))
                print(f"flops_parity: {name}{' with the host formulas' if mapping else ''}: {want['forward']} "
                      f"forward, {want['backward']} with backward, and by module over {len(want_modules)} modules, "
                      f"equal in fulmen (TorchScript and torch.export, {args.device})")
        for name, build, shape in BUILT_IN:
            torch.manual_seed(0)
            module = build().train()
            x = torch.ones(shape)
            for mapping in (None, FORMULAS) if name in WITH_FORMULAS else (None,):
                want, want_modules, want_table = expected(name, module, x, args.device, mapping,
                                                          input_grad_adds="norm_first" not in name)
                what = f"fulmen's {name}" + (" with the host's formulas" if mapping else "")
                got = fulmen_counts(args.binary, args.device, "-", name, "float", shape, mapping is not None)
                compare(what, got, (want, want_modules, want_table))
                print(f"flops_parity: {what}: {want['forward']} forward, {want['backward']} with backward, and by "
                      f"module over {len(want_modules)} modules, equal to torch's ({args.device})")
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    print("flops_parity: every count equals PyTorch's FlopCounterMode")


if __name__ == "__main__":
    main()

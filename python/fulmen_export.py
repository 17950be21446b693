#!/usr/bin/env python3
"""Turns a PyTorch model into a torch.export archive (``.pt2``) that fulmen
loads with ``fulmen_model_load_exported`` and trains from C, C++ or Go.

Run once, in Python, where the model's code lives::

    from fulmen_export import export_for_fulmen

    module = MyLightningModule()                 # or any nn.Module
    export_for_fulmen(module, (x[:8], y[:8]), "model.pt2")

or from the shell, with a factory that builds the module and an example
batch saved by ``torch.save``::

    python fulmen_export.py mypackage.models:make_model batch.pt model.pt2
    python fulmen_export.py --describe model.pt2     # programs, specs, state

A compiled training step, training_step's forward and backward compiled
ahead of time by AOTInductor for one batch shape, is a package of its own::

    export_compiled_step(module, (x[:8], y[:8]), "step.pt2")

(see export_compiled_step for what it takes, returns and needs to load).

What the archive holds
    One program per step the module defines, among ``programs`` (default
    ``training_step``, ``validation_step``, ``predict_step``, ``forward``):

    - ``training_step``: ``module.training_step(batch, 0)`` (or
      ``(batch)`` when the method takes the batch only), traced with the
      module in training mode (dropout on, BatchNorm updating its running
      statistics). It takes the batch and returns the loss: a tensor, or a
      dict holding ``"loss"`` (and whatever else the step returns).
    - ``validation_step`` / ``predict_step``: the same call, traced in
      evaluation mode. A step that returns nothing returns what it logged
      instead (below); one that neither returns nor logs a tensor is left
      out, with a warning.
    - ``forward``: ``module(*forward_example)`` in evaluation mode, for
      ``fulmen_model_forward``. ``forward_example`` defaults to the batch's
      first element when the batch is a tuple or list (Lightning's
      ``x, y = batch``), else to the batch itself (a dict batch needs
      ``forward_example``).

    Every program shares one state: the parameters and buffers under the
    module's own ``state_dict`` names ("net.0.weight", never a wrapper's
    "module.net.0.weight"), so fulmen's checkpoints and saved state_dicts
    match PyTorch's. Weights tied to one Parameter (an embedding and the
    output layer sharing it) are stored once per program: both names point
    to the same weight file in ``<root>/data/weights/<program>_weights_config.json``
    (``<root>``: the file's name without ``.pt2``).
    A lone ``forward`` program is written by ``torch.export.save`` (named
    "model", which ``torch.export.load`` reads back); several are written
    by ``package_pt2``, one per name (read back by
    ``torch.export.pt2_archive._package.load_pt2``).

What the programs take
    The batch only: its tensors (the pytree leaves of tuples, lists and
    dicts, lists written as tuples, as ``fulmen_value_from_batch`` makes
    them) are the program's inputs, in order. ``batch_idx`` is the constant
    0; ints, floats and bools are baked in at export time, so the batch may
    hold tensors only. With ``dynamic_batch`` (the default) dimension 0 of
    every tensor in the batch is one symbolic size, ``Dim("batch",
    min=1)``: any batch size from 1 runs (a last, smaller batch included).
    torch.export takes an example size of 0 or 1 for a constant, so the
    example batch needs at least 2 rows. Every other dimension is fixed at
    the example's size: sequence length, image size and feature count are
    part of the program. ``dynamic_batch=False`` fixes the batch size too.

Limits
    - Python-only code in a step (prints, NumPy, ``.item()`` driving
      control flow, reading files) runs once, at export time; what it
      computed is baked in as constants. Data-dependent control flow fails
      to export.
    - Logging stays on the host: while the steps are traced,
      ``self.log`` and ``self.log_dict`` of a LightningModule only record
      the tensors logged (nothing reaches a logger). They are not outputs
      of the program unless the step returns nothing; then the program
      returns ``{name: tensor}`` of what it logged. Values read from a
      Trainer (``self.current_epoch``, ``self.global_step``) are those of
      export time.
    - ``self.trainer``, ``self.optimizers()`` and manual optimization are
      not part of a program: fulmen's trainer does the optimization.
    - The graph fulmen runs is ATen: when tracing leaves other nodes
      (custom or higher-order operators such as an autocast region), the
      program is decomposed with ``run_decompositions({})``;
      ``decompose=True`` always decomposes, ``decompose=False`` never. A
      decomposed program is functional: BatchNorm's new running statistics
      and ``num_batches_tracked`` are outputs of the program, which the
      loader writes back, where the undecomposed one updates the buffers in
      place. Decomposing also inlines ``torch.no_grad()`` blocks as plain
      operators that gradients flow through, so a training_step keeps them
      (as ``wrap_with_set_grad_enabled`` nodes, run under the grad mode
      they name) unless ``decompose=True``, and refuses when it would have
      to decompose other nodes as well. Custom operators stay as they are
      and are reported in a warning.
"""
import argparse
import contextlib
import importlib
import inspect
import os
import re
import sys
import tempfile
import warnings

import torch
from torch import nn
from torch.utils import _pytree as pytree

PROGRAMS = ("training_step", "validation_step", "predict_step", "forward")

# Classes whose methods are defaults, not the user's: a step or forward
# found only there is left out.
_FRAMEWORK_PACKAGES = ("lightning", "pytorch_lightning")


def export_for_fulmen(module, example_batch, path, *, programs=PROGRAMS, dynamic_batch=True, decompose=None,
                      forward_example=None):
    """Exports `module`'s steps and forward as programs of one ``.pt2`` at
    `path` (see the module docstring) and returns them as a dict
    {name: ExportedProgram}. The module's modes (train / eval of every
    submodule) and state are as they were afterwards.

    programs: which of training_step, validation_step, predict_step and
      forward to export; those the module does not define are left out.
    dynamic_batch: dimension 0 of every tensor in the batch is symbolic
      (min 1); False fixes every size at the example's.
    decompose: None runs ``run_decompositions({})`` when the traced graph
      holds nodes other than ATen operators; True always; False never.
    forward_example: the positional arguments of forward (a tuple, or one
      tensor); None takes the batch's first element (see above).
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"export_for_fulmen: module must be an nn.Module, got {type(module).__name__}")
    unknown = [p for p in programs if p not in PROGRAMS]
    if unknown or not programs:
        raise ValueError(f"export_for_fulmen: programs must be some of {PROGRAMS}, got {tuple(programs)}")
    batch = _as_tuples(example_batch)
    _check_leaves("example_batch", batch, dynamic_batch)
    modes = [(m, m.training) for m in module.modules()]
    exported = {}
    try:
        for name in PROGRAMS:
            if name not in programs:
                continue
            if name == "forward":
                ep = _export_forward(module, batch, forward_example, dynamic_batch)
            else:
                ep = _export_step(module, name, batch, dynamic_batch)
            if ep is None:
                continue
            ep = _decomposed(name, ep, decompose)
            _check_state_names(name, ep, module)
            exported[name] = ep
    finally:
        for m, training in modes:
            m.training = training
    if not exported:
        raise ValueError(f"export_for_fulmen: {type(module).__name__} defines none of {tuple(programs)}")
    _write(exported, path)
    return exported


def _as_tuples(obj):
    """The batch with its lists as tuples (what fulmen_value_from_batch
    makes); tuples (named ones kept), dicts and leaves as they are."""
    if isinstance(obj, list):
        return tuple(_as_tuples(v) for v in obj)
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(_as_tuples(v) for v in obj)
    if isinstance(obj, dict):
        return {k: _as_tuples(v) for k, v in obj.items()}
    return obj


def _check_leaves(what, obj, dynamic_batch, who="export_for_fulmen"):
    """Refuses leaves that are not tensors and, with a dynamic batch,
    batch sizes that differ or are below 2."""
    leaves, _ = pytree.tree_flatten_with_path(obj)
    if not leaves:
        raise ValueError(f"{who}: {what} holds no tensor")
    for keypath, leaf in leaves:
        if not isinstance(leaf, torch.Tensor):
            raise ValueError(f"{who}: {what}{pytree.keystr(keypath)} is a {type(leaf).__name__}; "
                             "fulmen's programs take tensors only (other values would be baked in)")
    if not dynamic_batch:
        return
    sizes = {pytree.keystr(k): t.shape[0] for k, t in leaves if t.dim() >= 1}
    if len(set(sizes.values())) > 1:
        raise ValueError(f"export_for_fulmen: with dynamic_batch every tensor of {what} has the batch as "
                         f"dimension 0, but their sizes differ: {sizes}; pass dynamic_batch=False for fixed sizes")
    if sizes and min(sizes.values()) < 2:
        raise ValueError(f"export_for_fulmen: {what} has {min(sizes.values())} row(s); torch.export takes a "
                         "size of 0 or 1 for a constant, so a dynamic batch needs an example of at least 2 rows")


def _batch_shapes(args, dynamic_batch):
    """The dynamic_shapes of `args`: dimension 0 of every tensor of rank 1
    or more is the one symbolic batch size."""
    if not dynamic_batch:
        return None
    batch = torch.export.Dim("batch", min=1)
    return pytree.tree_map(lambda t: {0: batch} if t.dim() >= 1 else None, args)


def _defined_by_user(module, name):
    """Whether `name` is a method the module's own class (or a library class
    that implements it, like nn.Sequential's forward) defines, rather than
    nn.Module's or Lightning's placeholder."""
    for cls in type(module).__mro__:
        if name in cls.__dict__:
            top = (cls.__module__ or "").split(".")[0]
            return top not in _FRAMEWORK_PACKAGES and cls is not nn.Module
    return False


def _is_lightning(module):
    """Whether the module is a LightningModule (its class derives from one
    of Lightning's)."""
    return any((cls.__module__ or "").split(".")[0] in _FRAMEWORK_PACKAGES for cls in type(module).__mro__)


def _takes_batch_idx(method):
    """Whether a step takes `batch_idx` after the batch, as Lightning
    decides: a second positional parameter or *args."""
    try:
        params = list(inspect.signature(method).parameters.values())
    except (TypeError, ValueError):
        return True
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return True
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2


class _Step(nn.Module):
    """forward(batch) = module.<step>(batch[, 0]). It holds the module's own
    parameters, buffers and children (the same dicts), not the module, so
    the exported state names are the module's state_dict names."""

    def __init__(self, module, step, with_idx):
        super().__init__()
        object.__setattr__(self, "_parameters", module._parameters)
        object.__setattr__(self, "_buffers", module._buffers)
        object.__setattr__(self, "_non_persistent_buffers_set", module._non_persistent_buffers_set)
        object.__setattr__(self, "_modules", module._modules)
        object.__setattr__(self, "_fulmen_module", module)
        object.__setattr__(self, "_fulmen_step", step)
        object.__setattr__(self, "_fulmen_with_idx", with_idx)

    def forward(self, batch):
        logged = {}
        with _recorded_logging(self._fulmen_module, logged):
            out = self._fulmen_step(batch, 0) if self._fulmen_with_idx else self._fulmen_step(batch)
        return logged if out is None and logged else out


@contextlib.contextmanager
def _recorded_logging(module, logged):
    """Replaces a LightningModule's `log` / `log_dict` by recorders of the
    tensors logged into `logged`, while a step is traced: Lightning's own
    would warn (no Trainer) or fail (a Trainer's result collection outside
    its loop)."""
    names = [n for n in ("log", "log_dict") if _is_lightning(module) and callable(getattr(module, n, None))]
    saved = {n: module.__dict__[n] for n in names if n in module.__dict__}

    def log(name, value, *args, **kwargs):
        if isinstance(value, torch.Tensor):
            logged[name] = value

    def log_dict(dictionary, *args, **kwargs):
        for name, value in dictionary.items():
            log(name, value)

    for n, fn in (("log", log), ("log_dict", log_dict)):
        if n in names:
            object.__setattr__(module, n, fn)
    try:
        yield
    finally:
        for n in names:
            module.__dict__.pop(n, None)
        module.__dict__.update(saved)


def _export_step(module, name, batch, dynamic_batch):
    """Exports `module.<name>` (training_step in training mode, the others
    in evaluation mode); None when the module does not define it or it
    gives nothing."""
    if not _defined_by_user(module, name):
        return None
    method = getattr(module, name)
    wrapper = _Step(module, method, _takes_batch_idx(method))
    module.train(name == "training_step")
    wrapper.training = module.training
    shapes = _batch_shapes(batch, dynamic_batch)
    ep = _export(name, wrapper, (batch,), None if shapes is None else (shapes,))
    out_spec = ep.call_spec.out_spec
    if out_spec is None or (out_spec.num_leaves == 0):
        warnings.warn(f"export_for_fulmen: {name} returns no tensor and logs none; left out", stacklevel=3)
        return None
    if name == "training_step" and not out_spec.is_leaf():
        if out_spec.type is not dict or "loss" not in out_spec.context:
            raise ValueError(f"export_for_fulmen: training_step must return the loss, a tensor or a dict with "
                             f"\"loss\"; it returns {out_spec}")
    return ep


def _export_forward(module, batch, forward_example, dynamic_batch):
    """Exports `module(*args)` in evaluation mode; None when the module has
    no forward of its own."""
    if not _defined_by_user(module, "forward"):
        return None
    if forward_example is None:
        forward_example = batch[0] if isinstance(batch, tuple) and not hasattr(batch, "_fields") else batch
    args = _as_tuples(forward_example)
    args = args if isinstance(args, tuple) and not hasattr(args, "_fields") else (args,)
    _check_leaves("forward_example", args, dynamic_batch)
    module.eval()
    with _recorded_logging(module, {}):
        return _export("forward", module, args, _batch_shapes(args, dynamic_batch))


def _export(name, root, args, shapes):
    """torch.export.export with a message that names the program."""
    try:
        return torch.export.export(root, args, dynamic_shapes=shapes)
    except Exception as e:
        hint = ""
        if "Constraints violated" in str(e) or "specialized" in str(e):
            hint = (" (the code fixes the batch size; pass dynamic_batch=False to export that size only, "
                    "and train with drop_last)")
        elif name == "forward":
            hint = " (forward_example gives forward's positional arguments)"
        raise RuntimeError(f"export_for_fulmen: exporting {name} failed{hint}: {e}") from e


def _aten_or_symbolic(target):
    """Whether a call_function target is an ATen operator, or Python's
    getitem / SymInt arithmetic, which fulmen's loader runs."""
    if isinstance(target, torch._ops.OpOverload):
        return target.namespace == "aten"
    module = getattr(target, "__module__", None)
    if module in ("_operator", "operator", "math"):
        return True
    return module == "torch" and getattr(target, "__name__", "").startswith("sym_")


# A `torch.no_grad()` / `torch.enable_grad()` block of the training IR.
_GRAD_REGION = torch.ops.higher_order.wrap_with_set_grad_enabled


def foreign_nodes(ep):
    """The nodes of `ep`'s graph that are not ATen operators (nor getitem /
    SymInt arithmetic), as sorted strings: higher-order ops, custom ops,
    submodule calls."""
    out = set()
    for node in ep.graph.nodes:
        if node.op == "call_function" and not _aten_or_symbolic(node.target):
            out.add(str(node.target))
        elif node.op in ("call_module", "call_method"):
            out.add(f"{node.op} {node.target}")
    return sorted(out)


def _grad_mode_regions(ep):
    """How many no_grad / enable_grad blocks `ep`'s graph holds."""
    return sum(1 for n in ep.graph.nodes if n.op == "call_function" and n.target is _GRAD_REGION)


def _decomposed(name, ep, decompose):
    """`ep`, run through run_decompositions({}) as `decompose` says; warns
    of nodes fulmen will not run.

    Decomposing inlines a no_grad block as plain operators: gradients then
    reach what it computed. So training_step keeps its no_grad blocks as
    wrap_with_set_grad_enabled nodes (which the loader runs under the
    grad mode they name) unless told to decompose, and refuses to lose them
    when other nodes would need decomposing."""
    foreign = foreign_nodes(ep)
    regions = _grad_mode_regions(ep) if name == "training_step" else 0
    if decompose is None:
        others = [f for f in foreign if f != str(_GRAD_REGION)]
        if regions and others:
            raise ValueError(f"export_for_fulmen: training_step holds {others}, which need decomposing, and "
                             f"{regions} no_grad / enable_grad block(s), which decomposing would turn into plain "
                             "operators that gradients flow through; pass decompose=True to accept that, or "
                             "move the other operations out of training_step")
        decompose = bool(others if regions else foreign)
    elif decompose and regions:
        warnings.warn(f"export_for_fulmen: decomposing training_step turns its {regions} no_grad / enable_grad "
                      "block(s) into plain operators: gradients flow through them", stacklevel=3)
    if decompose:
        ep = ep.run_decompositions({})
    left = [f for f in foreign_nodes(ep) if f != str(_GRAD_REGION)]
    if left:
        warnings.warn(f"export_for_fulmen: {name} holds nodes that are not ATen operators, which fulmen's "
                      f"loader refuses: {left}", stacklevel=3)
    return ep


def _check_state_names(name, ep, module):
    """The program's parameters and persistent buffers must be exactly the
    module's state_dict names."""
    sig = ep.graph_signature
    persistent_buffers = [b for b in sig.buffers if b not in sig.non_persistent_buffers]
    names = set(sig.parameters) | set(persistent_buffers)
    want = set(module.state_dict().keys())
    if names != want:
        raise RuntimeError(f"export_for_fulmen: {name}'s state names differ from the module's state_dict: "
                           f"extra {sorted(names - want)}, missing {sorted(want - names)}")


def _write(exported, path):
    """Writes the programs to `path` through a temporary folder beside it
    (the file keeps its name, which is the archive's root folder) renamed
    into place: a lone forward by torch.export.save, several by
    package_pt2."""
    path = os.path.abspath(os.fspath(path))
    folder = tempfile.mkdtemp(prefix=".fulmen-export-", dir=os.path.dirname(path))
    tmp = os.path.join(folder, os.path.basename(path))
    try:
        if list(exported) == ["forward"]:
            torch.export.save(exported["forward"], tmp)
        else:
            from torch.export.pt2_archive._package import package_pt2

            package_pt2(tmp, exported_programs=exported)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        os.rmdir(folder)


# What a compiled step package holds (its "fulmen.format" metadata).
COMPILED_STEP_FORMAT = "compiled_step/1"


def export_compiled_step(module, example_batch, path, *, model_name="training_step", eager_random=True):
    """Compiles `module`'s training_step, its forward and backward together,
    ahead of time with AOTInductor for the example batch's exact shapes, into
    an AOTInductor package at `path` (a ``.pt2``, written through a temporary
    file renamed into place). Returns the package's "fulmen.*" metadata. The
    module's modes and state are as they were.

    The step is taken as export_for_fulmen takes it: ``training_step(batch,
    0)`` (or ``(batch)``) of a LightningModule or a module, in training mode
    (BatchNorm updates its running statistics), its loss the tensor it
    returns or the "loss" of the dict it returns (other values are dropped;
    ``self.log`` records nothing). The batch holds tensors only (tuples,
    lists, dicts of them), on the device the module is on.

    The package holds one model, `model_name`, for
    ``torch::inductor::AOTIModelPackageLoader(path, model_name)``
    (``load_compiled_step`` in Python):

    - ``run(INPUTS)`` takes the flat list INPUTS = every parameter in
      ``module.named_parameters()`` order (a tied weight once, under its
      first name), every buffer in ``module.named_buffers()`` order, then
      the batch's tensor leaves in pytree order (dict values by sorted key,
      lists as tuples). Every input must have the example's shape and dtype,
      be contiguous and on the example's device: the compiled code indexes
      them as such, and checks them only when the environment variable
      AOTI_RUNTIME_CHECK_INPUTS=1 is set, so the caller checks them against
      the metadata below. Inputs are only read.
    - It returns OUTPUTS = the new value of each MUTATED buffer (in
      named_buffers order), then the loss (a 0-dim float tensor), then one
      gradient per parameter, in INPUTS' order: a tied weight's gradient is
      the sum over every place it is used; a parameter the loss does not
      reach (or one with requires_grad False) gets a tensor of zeros, never
      an undefined tensor. Outputs are contiguous and none shares storage
      with an input or another output: the caller may write them in place,
      and copies the new buffers into its own.
    - ``get_metadata()`` (also ``AOTIModelPackageLoader::
      load_metadata_from_package(path, model_name)``, which reads it
      without loading the library) holds AOTInductor's keys (AOTI_DEVICE_KEY,
      AOTI_PLATFORM, AOTI_MACHINE, AOTI_CPU_ISA, ...) and these strings:
      "fulmen.format" = "compiled_step/1"; "fulmen.parameters",
      "fulmen.buffers", "fulmen.mutated_buffers" = JSON lists of names (the
      mutated buffers in output order); "fulmen.parameter_shapes",
      "fulmen.buffer_shapes", "fulmen.batch_shapes" = JSON lists of [dtype,
      shape] per input of that kind, dtype as "float32" / "int64";
      "fulmen.tied_parameters" = JSON {other name: its name in
      fulmen.parameters} for each weight known under several names;
      "fulmen.loss_index" = the loss's index in OUTPUTS (the number of
      mutated buffers); "fulmen.random" = "eager" or "inductor" (below).

    Loading: the package's shared library does not name libtorch (whose
    libtorch.so may be a linker script): it takes libtorch's symbols
    (``aoti_torch_*``, from libtorch_cpu) from the process, so they must be
    global there. A program linked with libtorch_cpu has them; a process
    that loaded libtorch locally (Python, a plugin) first calls
    ``dlopen("libtorch_cpu.so", RTLD_LAZY | RTLD_NOLOAD | RTLD_GLOBAL)``, as
    load_compiled_step does. It also needs libstdc++, libm, libgcc_s, libc
    and, when its kernels are parallel (below), libgomp.so.1 (the one
    libtorch_cpu loaded).

    eager_random: random operators (dropout) call ATen's, which draw from
    the default generator as eager PyTorch does: with the same seed the
    same masks and the generator left in the same state (Inductor's
    ``fallback_random``). False uses Inductor's own generator (faster
    fused kernels, seeded from the default generator at every run: the
    same seed repeats a run, but its masks are not eager PyTorch's).

    Limits: every shape is fixed (another batch size needs its own
    package); the device, CPU features (AOTI_CPU_ISA) and torch version
    are those of the export (packages for the CPU are the ones checked, by
    tests/interop/compiled_step_check.py). Inductor writes its kernels for
    the thread count torch has at export: with one thread they are serial
    (no OpenMP, no libgomp) whatever the thread count at run time; with
    more, a run is not bit for bit repeatable (a reduction may add in
    another order). Compiling takes seconds to minutes; Inductor
    caches part of its work (TORCHINDUCTOR_CACHE_DIR), the C++ compile of
    the package is done again every time.
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"export_compiled_step: module must be an nn.Module, got {type(module).__name__}")
    if not isinstance(model_name, str) or not re.fullmatch(r"[A-Za-z0-9_]+", model_name):
        raise ValueError(f"export_compiled_step: model_name must be letters, digits and _, got {model_name!r}")
    if not os.fspath(path).endswith(".pt2"):
        raise ValueError(f"export_compiled_step: the package's name must end in .pt2, got {os.fspath(path)!r}")
    if not _defined_by_user(module, "training_step"):
        raise ValueError(f"export_compiled_step: {type(module).__name__} defines no training_step")
    batch = _as_tuples(example_batch)
    _check_leaves("example_batch", batch, False, who="export_compiled_step")
    leaves, spec = pytree.tree_flatten(batch)
    leaves = [t.detach().contiguous() for t in leaves]
    params = list(module.named_parameters())
    buffers = list(module.named_buffers())
    modes = [(m, m.training) for m in module.modules()]
    try:
        module.train()
        method = module.training_step
        step = _Step(module, method, _takes_batch_idx(method))
        step.training = True
        reached = _reached_parameters(step, batch, params, buffers)
        traced = _LossStep(step, spec, module, params, buffers, reached)
        joint_step = _joint_step(traced, leaves, params, buffers, reached)
        inputs = tuple(t.detach().contiguous() for _, t in (params + buffers)) + tuple(leaves)
        try:
            ep = torch.export.export(joint_step, inputs, strict=False)
        except Exception as e:
            raise RuntimeError(f"export_compiled_step: exporting the joint graph failed: {e}") from e
    finally:
        for m, training in modes:
            m.training = training
    metadata = _compiled_metadata(module, params, buffers, joint_step.mutated, leaves, eager_random)
    _compile_package(ep, path, model_name, metadata, eager_random)
    return metadata


def _loss_of(out):
    """The loss a training_step returned (the tensor, or its dict's "loss"),
    as a 0-dim tensor."""
    loss = out["loss"] if isinstance(out, dict) and "loss" in out else out
    if not isinstance(loss, torch.Tensor):
        raise ValueError(f"export_compiled_step: training_step must return the loss, a tensor or a dict with "
                         f"\"loss\"; it returns {type(out).__name__}")
    if loss.numel() != 1 or not loss.is_floating_point():
        raise ValueError(f"export_compiled_step: the loss must be one floating-point value, got a {loss.dtype} "
                         f"tensor of shape {list(loss.shape)}")
    return loss.reshape(())


def _reached_parameters(step, batch, params, buffers):
    """The indices (into `params`) of the parameters that require grad and
    that the loss reaches, found by running the step once, eagerly, on
    copies of the buffers and with the random generator restored after."""
    with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        state = {name: b.detach().clone() for name, b in buffers}
        loss = _loss_of(torch.func.functional_call(step, state, (batch,), strict=False))
        wanted = [i for i, (_, p) in enumerate(params) if p.requires_grad]
        if not loss.requires_grad or not wanted:
            raise ValueError("export_compiled_step: the loss reaches no parameter that requires grad")
        grads = torch.autograd.grad(loss, [params[i][1] for i in wanted], allow_unused=True)
    return [i for i, g in zip(wanted, grads) if g is not None]


class _LossStep(nn.Module):
    """forward(*leaves) = (the step's loss,), the step run through
    functional_call on this module's own state: the reached parameters
    p0, p1, ... (in `params` order), the buffers b0, b1, ..., and the
    other parameters, detached, as buffers u0, u1, ... (so the joint
    graph computes gradients of the reached parameters only). A weight
    tied under several names is one input."""

    def __init__(self, step, spec, module, params, buffers, reached):
        super().__init__()
        slot = {}
        for k, i in enumerate(reached):
            self.register_parameter(f"p{k}", params[i][1])
            slot[id(params[i][1])] = f"p{k}"
        for k, (_, b) in enumerate(buffers):
            self.register_buffer(f"b{k}", b)
            slot.setdefault(id(b), f"b{k}")
        others = [i for i in range(len(params)) if i not in set(reached)]
        for k, i in enumerate(others):
            self.register_buffer(f"u{k}", params[i][1].detach())
            slot[id(params[i][1])] = f"u{k}"
        names = [(n, slot[id(t)]) for n, t in module.named_parameters(remove_duplicate=False)]
        names += [(n, slot[id(t)]) for n, t in module.named_buffers(remove_duplicate=False)]
        object.__setattr__(self, "_fulmen_step", step)
        object.__setattr__(self, "_fulmen_spec", spec)
        object.__setattr__(self, "_fulmen_names", names)

    def forward(self, *leaves):
        state = {name: getattr(self, attr) for name, attr in self._fulmen_names}
        batch = pytree.tree_unflatten(list(leaves), self._fulmen_spec)
        return (_loss_of(torch.func.functional_call(self._fulmen_step, state, (batch,), strict=True)),)


def _joint_step(traced, leaves, params, buffers, reached):
    """The joint forward + backward graph of `traced` (aot_export_module),
    its views made reshapes, wrapped as a _JointStep."""
    from torch._functorch.aot_autograd import aot_export_module

    try:
        with warnings.catch_warnings(), _distinct_graph_outputs(), _tracing_for_export():
            warnings.simplefilter("ignore")
            joint, sig = aot_export_module(traced, tuple(leaves), trace_joint=True, output_loss_index=0)
    except Exception as e:
        raise RuntimeError(f"export_compiled_step: tracing training_step's forward and backward failed: {e}") from e
    if sig.parameters_to_mutate:
        raise ValueError(f"export_compiled_step: training_step writes parameters in place "
                         f"({sorted(sig.parameters_to_mutate.values())}); only buffers may change")
    if sig.input_tokens or sig.output_tokens:
        raise ValueError("export_compiled_step: training_step has side-effecting operators")
    mutated = sorted(int(name[1:]) for name in sig.buffers_to_mutate.values() if name.startswith("b"))
    if len(mutated) != len(sig.buffers_to_mutate):
        raise ValueError("export_compiled_step: training_step writes a parameter that the loss does not reach")
    _views_as_reshapes(joint)
    skip = len(sig.buffers_to_mutate) + len(sig.user_inputs_to_mutate)
    return _JointStep(joint, len(params), len(buffers), reached, mutated, skip)


@contextlib.contextmanager
def _tracing_for_export():
    """torch.compiler.is_compiling() and is_exporting() true, as
    torch.export's own tracing makes them: models that take another path
    when traced (transformers' masks skip a data-dependent check) take it
    here too."""
    old = torch.compiler._is_compiling_flag, torch.compiler._is_exporting_flag
    torch.compiler._is_compiling_flag = torch.compiler._is_exporting_flag = True
    try:
        yield
    finally:
        torch.compiler._is_compiling_flag, torch.compiler._is_exporting_flag = old


@contextlib.contextmanager
def _distinct_graph_outputs():
    """While it lasts, aot_export_module's joint graph returns a node at most
    once (a repeat is cloned) before its signature is made: two gradients
    that are one tensor (parameters added as they are) would otherwise be
    one name there, and the signature fails to count them."""
    import torch._functorch.aot_autograd as aot_autograd

    make_signature = aot_autograd.create_graph_signature

    def distinct_then_sign(gm, *args, **kwargs):
        output = next(iter(reversed(gm.graph.nodes)))
        seen = set()
        results = []
        for arg in output.args[0]:
            if isinstance(arg, torch.fx.Node) and arg in seen:
                with gm.graph.inserting_before(output):
                    copy = gm.graph.call_function(torch.ops.aten.clone.default, (arg,))
                copy.meta = dict(arg.meta)
                arg = copy
            seen.add(arg)
            results.append(arg)
        output.args = (type(output.args[0])(results),)
        gm.recompile()
        return make_signature(gm, *args, **kwargs)

    aot_autograd.create_graph_signature = distinct_then_sign
    try:
        yield
    finally:
        aot_autograd.create_graph_signature = make_signature


def _views_as_reshapes(gm):
    """Replaces aten.view by aten.reshape in `gm`: Inductor lays tensors out
    its own way, and a view of what it made non-contiguous would fail where
    a reshape copies."""
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is torch.ops.aten.view.default:
            node.target = torch.ops.aten.reshape.default
    gm.recompile()


class _JointStep(nn.Module):
    """forward(*params, *buffers, *leaves) = (*new mutated buffers, loss,
    *one gradient per parameter): the joint graph's inputs put in its
    order, its gradients in `params` order with zeros for the unreached
    parameters, every output made contiguous and its own storage."""

    def __init__(self, joint, n_params, n_buffers, reached, mutated, skip):
        super().__init__()
        self.joint = joint
        self.n_params = n_params
        self.n_buffers = n_buffers
        self.reached = list(reached)
        self.others = [i for i in range(n_params) if i not in set(reached)]
        self.mutated = list(mutated)
        self.skip = skip

    def forward(self, *inputs):
        params = inputs[:self.n_params]
        buffers = inputs[self.n_params:self.n_params + self.n_buffers]
        leaves = inputs[self.n_params + self.n_buffers:]
        outs = self.joint(*[params[i] for i in self.reached], *buffers, *[params[i] for i in self.others], *leaves)
        loss = outs[self.skip]
        grads = [None] * self.n_params
        for i, g in zip(self.reached, outs[self.skip + 1:]):
            grads[i] = g
        for i in self.others:
            grads[i] = torch.zeros_like(params[i], memory_format=torch.contiguous_format)
        return _own_storage(inputs, [*outs[:len(self.mutated)], loss, *grads])


def _own_storage(inputs, outputs):
    """`outputs` as a tuple of contiguous tensors that share storage with
    no input and no other output (copies where needed)."""
    from torch.multiprocessing.reductions import StorageWeakRef

    seen = {StorageWeakRef(t.untyped_storage()) for t in inputs}
    out = []
    for t in outputs:
        t = t.contiguous()
        ref = StorageWeakRef(t.untyped_storage())
        if ref in seen:
            t = t.clone()
            ref = StorageWeakRef(t.untyped_storage())
        seen.add(ref)
        out.append(t)
    return tuple(out)


def _shapes(tensors):
    """[[dtype, shape], ...] of `tensors`, dtype as "float32"."""
    return [[str(t.dtype).removeprefix("torch."), list(t.shape)] for t in tensors]


def _compiled_metadata(module, params, buffers, mutated, leaves, eager_random):
    """The package's "fulmen.*" metadata (strings)."""
    import json

    first = {}
    tied = {}
    for name, p in module.named_parameters(remove_duplicate=False):
        if id(p) in first:
            tied[name] = first[id(p)]
        else:
            first[id(p)] = name
    return {
        "fulmen.format": COMPILED_STEP_FORMAT,
        "fulmen.parameters": json.dumps([n for n, _ in params]),
        "fulmen.buffers": json.dumps([n for n, _ in buffers]),
        "fulmen.mutated_buffers": json.dumps([buffers[i][0] for i in mutated]),
        "fulmen.parameter_shapes": json.dumps(_shapes(t for _, t in params)),
        "fulmen.buffer_shapes": json.dumps(_shapes(t for _, t in buffers)),
        "fulmen.tied_parameters": json.dumps(tied),
        "fulmen.batch_shapes": json.dumps(_shapes(leaves)),
        "fulmen.loss_index": str(len(mutated)),
        "fulmen.random": "eager" if eager_random else "inductor",
    }


def _compile_package(ep, path, model_name, metadata, eager_random):
    """Compiles `ep` with AOTInductor and writes the package (the model under
    `model_name`, `metadata` embedded) to `path` through a temporary file
    beside it renamed into place. `eager_random`: random operators call
    ATen's (Inductor's fallback_random)."""
    from torch._inductor import aot_compile
    from torch.export.pt2_archive._package import package_pt2

    gm = ep.module(check_guards=False)
    args, kwargs = ep.example_inputs
    options = {
        "aot_inductor.package": True,
        # Inductor writes its own keys into the dict it is given.
        "aot_inductor.metadata": dict(metadata),
        # The library resolves libtorch's symbols in the process that loads
        # it, rather than naming libtorch.so, which a libtorch assembled
        # from the wheels does not have as a library.
        "aot_inductor.link_libtorch": False,
        "fallback_random": eager_random,
    }
    try:
        files = aot_compile(gm, args, kwargs, options=options)
    except Exception as e:
        raise RuntimeError(f"export_compiled_step: AOTInductor failed to compile the step: {e}") from e
    path = os.path.abspath(os.fspath(path))
    folder = tempfile.mkdtemp(prefix=".fulmen-compile-", dir=os.path.dirname(path))
    tmp = os.path.join(folder, os.path.basename(path))
    try:
        package_pt2(tmp, aoti_files={model_name: files})
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        os.rmdir(folder)


def load_compiled_step(path, model_name="training_step"):
    """The model `model_name` of a package export_compiled_step wrote, as
    ``torch._C._aoti.AOTIModelPackageLoader``: ``run(list of tensors)``
    returns the outputs, ``get_metadata()`` the metadata. libtorch_cpu's
    symbols are made global first (the package's library takes them from
    the process)."""
    import ctypes

    mode = os.RTLD_LAZY | os.RTLD_GLOBAL
    try:
        ctypes.CDLL("libtorch_cpu.so", mode=mode | os.RTLD_NOLOAD)
    except OSError:
        ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"), mode=mode)
    return torch._C._aoti.AOTIModelPackageLoader(os.fspath(path), model_name, False, 1, -1)


def load_programs(path):
    """The programs of an archive this module wrote, as {name:
    ExportedProgram} (a lone "model" is the forward)."""
    from torch.export.pt2_archive._package import load_pt2

    programs = dict(load_pt2(path).exported_programs)
    if list(programs) == ["model"]:
        programs = {"forward": programs["model"]}
    return programs


def describe(path, out=sys.stdout):
    """Prints each program of an archive: its inputs and outputs (pytree
    specs), state names, and nodes fulmen does not run."""
    for name, ep in load_programs(path).items():
        spec = ep.call_spec
        sig = ep.graph_signature
        print(f"{name}:", file=out)
        print(f"  in_spec:  {spec.in_spec}", file=out)
        print(f"  out_spec: {spec.out_spec}", file=out)
        print(f"  parameters: {list(sig.parameters)}", file=out)
        print(f"  buffers: {list(sig.buffers)}", file=out)
        if sig.buffers_to_mutate:
            print(f"  buffers written back: {sorted(set(sig.buffers_to_mutate.values()))}", file=out)
        foreign = foreign_nodes(ep)
        if foreign:
            print(f"  not ATen: {foreign}", file=out)


def _factory(spec):
    """The callable named by "package.module:attribute"."""
    mod, sep, attr = spec.partition(":")
    if not sep or not mod or not attr:
        raise SystemExit(f"fulmen_export: {spec!r} is not package.module:factory")
    obj = importlib.import_module(mod)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="fulmen_export",
        description="Exports a model's training_step / validation_step / predict_step / forward as a .pt2 "
                    "archive for fulmen_model_load_exported, or describes one (--describe).")
    ap.add_argument("factory", nargs="?", help="package.module:callable that returns the nn.Module")
    ap.add_argument("batch", nargs="?", help="an example batch saved by torch.save (at least 2 rows)")
    ap.add_argument("out", nargs="?", help="the .pt2 to write")
    ap.add_argument("--programs", default=",".join(PROGRAMS), help="comma-separated (default: %(default)s)")
    ap.add_argument("--static-batch", action="store_true", help="fix the batch size at the example's")
    ap.add_argument("--decompose", choices=("auto", "always", "never"), default="auto",
                    help="run_decompositions({}): when non-ATen nodes remain (auto), always or never")
    ap.add_argument("--describe", metavar="PT2", help="print an archive's programs, specs and state names")
    a = ap.parse_args(argv)
    if a.describe:
        describe(a.describe)
        return 0
    if not (a.factory and a.batch and a.out):
        ap.error("factory, batch and out are required (or --describe PT2)")
    sys.path.insert(0, os.getcwd())
    module = _factory(a.factory)()
    batch = torch.load(a.batch, weights_only=True)
    decompose = {"auto": None, "always": True, "never": False}[a.decompose]
    done = export_for_fulmen(module, batch, a.out, programs=tuple(p for p in a.programs.split(",") if p),
                             dynamic_batch=not a.static_batch, decompose=decompose)
    print(f"fulmen_export: wrote {a.out} with {', '.join(done)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

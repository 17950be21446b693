#!/usr/bin/env python3
"""Models exported by python/fulmen_export.py (torch.export programs in a
.pt2), trained by fulmen through their exported training_step, lose exactly
what the same modules lose trained by PyTorch itself.

    python export_parity.py --binary build/interop/export_parity [--work DIR]
        [--models NAME,...]

Six seeded, randomly initialised models, each exported with
training_step and forward:
- mlp: a LightningModule (Linear, BatchNorm1d, ReLU, Linear) whose
  training_step logs and returns {"loss": ..., "accuracy": ...}, the
  accuracy computed under torch.no_grad() (a wrap_with_set_grad_enabled
  block in the program);
- cnn: an nn.Module (Conv2d, BatchNorm2d, MaxPool2d, Linear) on 1x8x8
  images whose training_step(batch) returns the loss tensor, exported
  decomposed (its BatchNorm statistics come back as program outputs);
- gpt: a character-level GPT (vocabulary 32, block 16, 2 layers; the token
  embedding tied to the output layer, a root-level position parameter,
  LayerNorm, causal self-attention, dropout 0.1 in training) on next-token
  loss;
- resnet18: timm's resnet18 (its layers, BatchNorms and downsampling;
  stages of RESNET_WIDTHS channels instead of 64 to 512) classifying
  3x32x32 images into 4 classes;
- vit_tiny: timm's vit_tiny_patch16_224 (width 192, 3 heads; VIT_DEPTH
  blocks instead of 12) built for 3x32x32 images (16x16 patches: 4 tokens
  and the class token), 4 classes, with timm's own dropout layers at 0.1
  (position, projection, attention inside scaled_dot_product_attention,
  head);
- gpt2: transformers' GPT2LMHeadModel (2 layers, width 64, 4 heads,
  vocabulary 64; the token embedding tied to lm_head, its default dropout
  0.1 on embeddings, attention and residuals) whose training_step returns
  the model's own shifted language-model loss (labels = input ids).
timm and transformers build from their configs, offline (HF_HUB_OFFLINE):
nothing is downloaded; the venv holds them (scripts/setup-venv.sh).

fulmen's export_parity trains each EPOCHS epochs of ROWS rows in batches of
BATCH, in order (ROWS is not a multiple of BATCH: every epoch ends with a
smaller batch), once with SGD (momentum 0.9) and once with AdamW, seeded
with SEED as the eager loop is (dropout draws the same masks). Checks:
- the training_step of the models that train with dropout holds it (and
  attention dropout where the model has it), so the losses depend on it;
- every step's loss within 1e-6 (relative) of eager PyTorch's;
- the trained state_dict fulmen saves (BatchNorm running statistics and
  num_batches_tracked, both names of the tied weight) equals eager's
  (1e-5);
- the forward program on EVAL_ROWS held-out rows, after training, gives
  eager's eval outputs (1e-5 of their largest magnitude);
- a run of FIRST epochs that checkpoints, resumed from that checkpoint in a
  new process for the rest, logs the uninterrupted run's losses exactly
  (optimizer state and the random generator included).
The exported archives also load back in PyTorch (load_pt2; torch.export.load
for a forward-only archive) and store the tied weight once per program (both
names point to one weight file).
"""
import argparse
import copy
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
import zipfile

import numpy
import torch
import torch.nn.functional as F
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
from fulmen_export import export_compiled_step, export_for_fulmen, load_programs  # noqa: E402
from twin import compare  # noqa: E402

# timm and transformers (imported by the builders below, and by Lightning's
# torchmetrics) build from configs only: any download fails.
os.environ["HF_HUB_OFFLINE"] = "1"

ROWS = 36
BATCH = 8
EVAL_ROWS = 6
EPOCHS = 4
FIRST = 2
SEED = 1234
TOLERANCE = 1e-6
# Compiled steps (AOTInductor) fuse and reorder the float arithmetic.
COMPILED_TOLERANCE = 1e-5
# The models also trained through compiled steps (with --compiled).
COMPILED = ("mlp", "gpt", "gpt2")
STATE_TOLERANCE = 1e-5
VOCAB = 32
BLOCK = 16
WIDTH = 32
HEADS = 2
LAYERS = 2
HF_VOCAB = 64
IMAGE = 32
CLASSES = 4
# resnet18's four stages (timm's are 64, 128, 256, 512): the same layers,
# fewer channels.
RESNET_WIDTHS = (16, 32, 64, 128)
# vit_tiny's blocks (timm's are 12 of the same block): its width 192 and 3
# heads, fewer blocks.
VIT_DEPTH = 4
SGD = dict(lr=0.05, momentum=0.9)
ADAMW = dict(lr=3e-3, weight_decay=0.01)


def build_mlp():
    import lightning.pytorch as pl

    class Classifier(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(4, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 3))

        def forward(self, x):
            return self.net(x)

        def training_step(self, batch, batch_idx):
            x, y = batch
            logits = self(x)
            loss = F.cross_entropy(logits, y)
            with torch.no_grad():
                accuracy = (logits.argmax(1) == y).float().mean()
            self.log("train_loss", loss)
            self.log("train_acc", accuracy)
            return {"loss": loss, "accuracy": accuracy}

    return Classifier()


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2))
        self.head = nn.Linear(4 * 4 * 4, 4)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))

    def training_step(self, batch):
        x, y = batch
        return F.cross_entropy(self(x), y)


class Block(nn.Module):
    def __init__(self, dropout=0.1):
        super().__init__()
        self.ln1 = nn.LayerNorm(WIDTH)
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH)
        self.proj = nn.Linear(WIDTH, WIDTH)
        self.attn_drop = nn.Dropout(dropout)
        self.resid_drop = nn.Dropout(dropout)
        self.ln2 = nn.LayerNorm(WIDTH)
        self.mlp = nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH),
                                 nn.Dropout(dropout))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(WIDTH, dim=2)
        q, k, v = (z.view(b, t, HEADS, c // HEADS).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(c // HEADS))
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        att = self.attn_drop(att.masked_fill(~causal, float("-inf")).softmax(dim=-1))
        y = (att @ v).transpose(1, 2).reshape(b, t, c)
        x = x + self.resid_drop(self.proj(y))
        return x + self.mlp(self.ln2(x))


class CharGPT(nn.Module):
    def __init__(self, dropout=0.1):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, WIDTH)
        self.pos = nn.Parameter(torch.randn(1, BLOCK, WIDTH) * 0.02)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.Sequential(*[Block(dropout) for _ in range(LAYERS)])
        self.ln_f = nn.LayerNorm(WIDTH)
        self.lm_head = nn.Linear(WIDTH, VOCAB, bias=False)
        self.lm_head.weight = self.tok.weight
        nn.init.normal_(self.tok.weight, std=0.02)

    def forward(self, idx):
        x = self.drop(self.tok(idx) + self.pos[:, : idx.shape[1]])
        return self.lm_head(self.ln_f(self.blocks(x)))

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        return {"loss": F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))}


class ImageClassifier(nn.Module):
    """A timm model whose training_step is cross-entropy on (images,
    labels); state names are the timm model's under "net."."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch):
        x, y = batch
        return F.cross_entropy(self.net(x), y)


def _import(name):
    """The module `name`, or an exit that says how to get it."""
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError as e:
        sys.exit(f"export_parity: cannot import {name} ({e}); scripts/setup-venv.sh installs it in the venv")


def build_resnet18():
    timm = _import("timm")
    return ImageClassifier(timm.create_model("resnet18", pretrained=False, num_classes=CLASSES,
                                             stem_width=RESNET_WIDTHS[0], channels=RESNET_WIDTHS))


def build_vit_tiny():
    timm = _import("timm")
    return ImageClassifier(timm.create_model(
        "vit_tiny_patch16_224", pretrained=False, num_classes=CLASSES, img_size=IMAGE, depth=VIT_DEPTH,
        drop_rate=0.1, pos_drop_rate=0.1, proj_drop_rate=0.1, attn_drop_rate=0.1))


class HFGPT2(nn.Module):
    """transformers' GPT2LMHeadModel: forward gives the logits, training_step
    the model's own language-model loss on labels = input ids."""

    def __init__(self):
        super().__init__()
        transformers = _import("transformers")
        config = transformers.GPT2Config(
            n_layer=2, n_embd=64, n_head=4, vocab_size=HF_VOCAB, n_positions=32, use_cache=False,
            bos_token_id=0, eos_token_id=0,
            resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.1, tie_word_embeddings=True)
        self.gpt = transformers.GPT2LMHeadModel(config)
        # Its class name matches no entry of transformers' loss table (it
        # warns, then takes this loss): named here, without the warning.
        self.gpt.loss_type = "ForCausalLM"

    def forward(self, ids):
        return self.gpt(input_ids=ids).logits

    def training_step(self, batch, batch_idx):
        ids, labels = batch
        return self.gpt(input_ids=ids, labels=labels).loss


TEXT = ("the quick brown fox jumps over the lazy dog. a stitch in time saves nine, "
        "and many hands make light work. it's a long road that has no turning.\n")
ALPHABET = " abcdefghijklmnopqrstuvwxyz.,'-\n"


def mlp_data(rows, offset):
    i = torch.arange(offset, offset + rows, dtype=torch.float64)
    x = torch.stack([torch.sin(0.37 * i), torch.cos(1.7 * i), torch.sin(0.11 * i + 1), torch.cos(0.53 * i)], 1)
    y = ((x[:, 0] + x[:, 1] > 0).long() + (x[:, 2] > 0.5).long())
    return x.float(), y


def cnn_data(rows, offset):
    g = torch.Generator().manual_seed(100 + offset)
    x = torch.randn(rows, 1, 8, 8, generator=g)
    quadrants = torch.stack([x[:, 0, :4, :4].mean((1, 2)), x[:, 0, :4, 4:].mean((1, 2)),
                             x[:, 0, 4:, :4].mean((1, 2)), x[:, 0, 4:, 4:].mean((1, 2))], 1)
    return x, quadrants.argmax(1)


def gpt_data(rows, offset):
    assert len(ALPHABET) == VOCAB
    ids = torch.tensor([ALPHABET.index(c) for c in TEXT * 4], dtype=torch.int64)
    starts = [(offset + 5 * r) % (len(ids) - BLOCK - 1) for r in range(rows)]
    windows = torch.stack([ids[s:s + BLOCK + 1] for s in starts])
    return windows[:, :-1].contiguous(), windows[:, 1:].contiguous()


def image_data(rows, offset):
    """3xIMAGExIMAGE images labelled by the brightest quadrant."""
    g = torch.Generator().manual_seed(200 + offset)
    x = torch.randn(rows, 3, IMAGE, IMAGE, generator=g)
    h = IMAGE // 2
    m = x.mean(1)
    quadrants = torch.stack([m[:, :h, :h].mean((1, 2)), m[:, :h, h:].mean((1, 2)),
                             m[:, h:, :h].mean((1, 2)), m[:, h:, h:].mean((1, 2))], 1)
    return x, quadrants.argmax(1)


def hf_gpt_data(rows, offset):
    """Windows of TEXT as token ids; the labels are the ids themselves
    (GPT2LMHeadModel shifts them)."""
    x, _ = gpt_data(rows, offset)
    return x, x.clone()


MODELS = {
    # name: (builder, data, training_step takes batch_idx, decompose)
    "mlp": (build_mlp, mlp_data, True, None),
    "cnn": (SmallCNN, cnn_data, False, True),
    "gpt": (CharGPT, gpt_data, True, None),
    "resnet18": (build_resnet18, image_data, False, None),
    "vit_tiny": (build_vit_tiny, image_data, False, None),
    "gpt2": (HFGPT2, hf_gpt_data, True, None),
}

DTYPES = {torch.float32: "f32", torch.int64: "i64"}
# The models that train with dropout: their training_step must hold
# dropout (and, for "attention", scaled_dot_product_attention with a
# dropout_p), so the losses compared depend on the masks drawn.
DROPOUT = {"gpt": ("dropout",), "vit_tiny": ("dropout", "attention"), "gpt2": ("dropout", "attention")}
# The state names that are one Parameter.
TIED = {"gpt": [("tok.weight", "lm_head.weight")],
        "gpt2": [("gpt.transformer.wte.weight", "gpt.lm_head.weight")]}


def write_data(folder, x, y, eval_x):
    """x.bin, y.bin, eval_x.bin (raw, row-major) and spec.txt:
    "ROWS BATCH EVAL_ROWS SEED" then, for x and y, "DTYPE RANK DIMS..." of
    one row."""
    os.makedirs(folder, exist_ok=True)
    for name, t in (("x.bin", x), ("y.bin", y), ("eval_x.bin", eval_x)):
        t.contiguous().numpy().tofile(os.path.join(folder, name))
    cols = [f"{DTYPES[t.dtype]} {t.dim() - 1} {' '.join(str(d) for d in t.shape[1:])}".strip() for t in (x, y)]
    with open(os.path.join(folder, "spec.txt"), "w") as f:
        f.write(f"{ROWS} {BATCH} {EVAL_ROWS} {SEED} {cols[0]} {cols[1]}\n")


def eager_losses(module, with_idx, optimizer, x, y, epochs):
    """Trains `module` (in place) as fulmen's Trainer does: batches in
    order, zero_grad / backward / step, seeded with SEED first."""
    module.train()
    opt = (torch.optim.SGD(module.parameters(), **SGD) if optimizer == "sgd"
           else torch.optim.AdamW(module.parameters(), **ADAMW))
    torch.manual_seed(SEED)
    losses = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # self.log without a Trainer
        for _ in range(epochs):
            for i, start in enumerate(range(0, ROWS, BATCH)):
                batch = (x[start:start + BATCH], y[start:start + BATCH])
                out = module.training_step(batch, i) if with_idx else module.training_step(batch)
                loss = out["loss"] if isinstance(out, dict) else out
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses.append(loss.item())
    return losses


def fulmen_run(binary, work, name, archive, data, optimizer, epochs, tag, ckpt_dir="-", resume="-", compiled="-"):
    """Runs export_parity; returns (losses, state path, eval outputs path)."""
    out = os.path.join(work, f"{name}-{optimizer}-{tag}")
    os.makedirs(out)
    subprocess.run([binary, archive, data, optimizer, str(epochs), ckpt_dir, resume, out, compiled], check=True,
                   env=dict(os.environ, OMP_NUM_THREADS="1"))
    with open(os.path.join(out, "losses.txt")) as f:
        losses = [float(line) for line in f if line.strip()]
    return losses, os.path.join(out, "state.safetensors"), os.path.join(out, "eval.f32")


def check_state(label, saved_path, module):
    from safetensors.torch import load_file

    saved = load_file(saved_path)
    mine = module.state_dict()
    if sorted(saved) != sorted(mine):
        sys.exit(f"{label}: fulmen saved {sorted(saved)}, the module's state_dict has {sorted(mine)}")
    far = max((saved[k].double() - mine[k].double()).abs().max().item() for k in mine)
    counts = {k: int(v) for k, v in saved.items() if k.endswith("num_batches_tracked")}
    want = {k: int(mine[k]) for k in counts}
    tracked = f"; {len(counts)} num_batches_tracked at {sorted(set(counts.values()))}" if counts else ""
    print(f"{label}: trained state_dicts differ by {far:.2e}{tracked}")
    if far > STATE_TOLERANCE or counts != want:
        sys.exit(f"{label}: fulmen's trained state differs from PyTorch's by {far:.2e} "
                 f"(num_batches_tracked {counts}, PyTorch's {want})")


def check_eval(label, eval_path, module, eval_x):
    module.eval()
    with torch.no_grad():
        want = module(eval_x)
    got = torch.from_numpy(numpy.fromfile(eval_path, dtype="float32"))
    if got.numel() != want.numel():
        sys.exit(f"{label}: fulmen's forward gave {got.numel()} values, PyTorch's {want.numel()}")
    got = got.reshape(want.shape)
    scale = max(want.abs().max().item(), 1e-12)
    far = (got.double() - want.double()).abs().max().item() / scale
    print(f"{label}: eval outputs {tuple(want.shape)} differ by {far:.2e} (relative to the largest)")
    if far > STATE_TOLERANCE:
        sys.exit(f"{label}: fulmen's forward after training differs from PyTorch's eval outputs")


def check_archive(name, archive, eps):
    """The archive reads back in PyTorch with the programs and state names
    exported, and stores weights tied to one Parameter once per program:
    every name of a tied group points to the same weight file."""
    back = load_programs(archive)
    if sorted(back) != sorted(eps):
        sys.exit(f"{name}: {archive} holds {sorted(back)}, exported {sorted(eps)}")
    for program, ep in back.items():
        if sorted(ep.state_dict) != sorted(eps[program].state_dict):
            sys.exit(f"{name}: {program}'s state names changed on the way through the archive")
    with zipfile.ZipFile(archive) as z:
        for program in eps:
            config = [n for n in z.namelist() if n.endswith(f"/data/weights/{program}_weights_config.json")]
            if len(config) != 1:
                sys.exit(f"{name}: {archive} has {len(config)} weight configs for {program}")
            files = {k: v["path_name"] for k, v in json.loads(z.read(config[0]))["config"].items()}
            for group in TIED.get(name, []):
                if len({files.get(k) for k in group}) != 1 or None in {files.get(k) for k in group}:
                    sys.exit(f"{name}: {program} stores the tied {group} as {[files.get(k) for k in group]}")


def check_dropout(name, ep):
    """`name`'s training_step draws the dropout DROPOUT says: dropout in
    training mode with p > 0 and, for "attention", attention with a
    dropout_p > 0."""
    dropout = attention = 0
    for node in ep.graph.nodes:
        if node.op != "call_function":
            continue
        if node.target is torch.ops.aten.dropout.default and node.args[1] > 0 and node.args[2]:
            dropout += 1
        elif node.target is torch.ops.aten.scaled_dot_product_attention.default:
            p = node.args[4] if len(node.args) > 4 else node.kwargs.get("dropout_p", 0.0)
            attention += p > 0
    want = DROPOUT.get(name, ())
    if want or dropout or attention:
        print(f"{name}: training_step draws {dropout} dropout(s) and {attention} attention dropout(s)")
    if ("dropout" in want and not dropout) or ("attention" in want and not attention):
        sys.exit(f"{name}: training_step should draw {want}; it has {dropout} dropout(s) and "
                 f"{attention} attention dropout(s)")


def check_forward_only(work):
    """A forward-only export is one program that torch.export.load reads."""
    torch.manual_seed(0)
    module = SmallCNN()
    x, y = cnn_data(ROWS, 0)
    path = os.path.join(work, "forward-only.pt2")
    export_for_fulmen(module, (x[:BATCH], y[:BATCH]), path, programs=("forward",))
    ep = torch.export.load(path)
    module.eval()
    with torch.no_grad():
        if not torch.allclose(ep.module()(x[:3]), module(x[:3])):
            sys.exit("export_parity: the forward-only archive computes another forward")
    print("export_parity: a forward-only archive loads with torch.export.load")


def check_compiled(binary, work, name):
    """fulmen trains `name` through compiled steps (one per batch shape:
    the full batches and the smaller last one): its losses are eager
    PyTorch's within COMPILED_TOLERANCE."""
    build, make_data, with_idx, _ = MODELS[name]
    torch.manual_seed(0)
    initial = build()
    x, y = make_data(ROWS, 0)
    eval_x, _ = make_data(EVAL_ROWS, 1003)
    data = os.path.join(work, f"{name}-compiled-data")
    write_data(data, x, y, eval_x)
    archive = os.path.join(work, f"{name}-compiled.pt2")
    packages = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        export_for_fulmen(initial, (x[:BATCH], y[:BATCH]), archive, programs=("training_step", "forward"))
        for rows in sorted({BATCH, ROWS % BATCH or BATCH}):
            package = os.path.join(work, f"{name}-step-{rows}.pt2")
            export_compiled_step(initial, (x[:rows], y[:rows]), package)
            packages.append(package)
    label = f"export_parity {name} compiled sgd"
    module = copy.deepcopy(initial)
    ours = eager_losses(module, with_idx, "sgd", x, y, EPOCHS)
    theirs, _, _ = fulmen_run(binary, work, name, archive, data, "sgd", EPOCHS, "compiled",
                              compiled=",".join(packages))
    compare(label, theirs, ours, tolerance=COMPILED_TOLERANCE)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--binary", required=True)
    ap.add_argument("--work")
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated (default: %(default)s)")
    ap.add_argument("--compiled", action="store_true", help="also train %s through compiled steps" % ", ".join(COMPILED))
    args = ap.parse_args()
    names = [n for n in args.models.split(",") if n]
    unknown = [n for n in names if n not in MODELS]
    if unknown or not names:
        ap.error(f"--models takes some of {', '.join(MODELS)}, got {args.models!r}")
    work = args.work or tempfile.mkdtemp(prefix="fulmen-export-parity-")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    torch.set_num_threads(1)
    check_forward_only(work)

    for name in names:
        build, make_data, with_idx, decompose = MODELS[name]
        torch.manual_seed(0)
        initial = build()
        x, y = make_data(ROWS, 0)
        eval_x, _ = make_data(EVAL_ROWS, 1003)
        data = os.path.join(work, f"{name}-data")
        write_data(data, x, y, eval_x)
        archive = os.path.join(work, f"{name}.pt2")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            eps = export_for_fulmen(initial, (x[:BATCH], y[:BATCH]), archive,
                                    programs=("training_step", "forward"), decompose=decompose)
        if sorted(eps) != ["forward", "training_step"]:
            sys.exit(f"{name}: exported {sorted(eps)}, not training_step and forward")
        check_archive(name, archive, eps)
        check_dropout(name, eps["training_step"])
        for optimizer in ("sgd", "adamw"):
            label = f"export_parity {name} {optimizer}"
            module = copy.deepcopy(initial)
            ours = eager_losses(module, with_idx, optimizer, x, y, EPOCHS)
            if not all(math.isfinite(v) for v in ours):
                sys.exit(f"{label}: PyTorch's losses are not all finite, nothing to compare: {ours}")
            theirs, state, evals = fulmen_run(args.binary, work, name, archive, data, optimizer, EPOCHS, "full")
            compare(label, theirs, ours, tolerance=TOLERANCE)
            check_state(label, state, module)
            check_eval(label, evals, module, eval_x)
            if optimizer == "adamw":
                ckpts = os.path.join(work, f"{name}-checkpoints")
                first, _, _ = fulmen_run(args.binary, work, name, archive, data, optimizer, FIRST, "first", ckpts)
                rest, state, _ = fulmen_run(args.binary, work, name, archive, data, optimizer, EPOCHS, "resumed",
                                            resume=os.path.join(ckpts, f"epoch={FIRST - 1}.ckpt"))
                if first + rest != theirs:
                    for i, (a, b) in enumerate(zip(first + rest, theirs)):
                        print(f"  step {i}: resumed {a:.9g} uninterrupted {b:.9g}")
                    sys.exit(f"{label}: the resumed run's {len(first)}+{len(rest)} losses are not the "
                             f"uninterrupted run's {len(theirs)}")
                check_state(f"{label} resumed", state, module)
                print(f"{label}: resumed after {FIRST} epochs, the same {len(theirs)} losses")
    if args.compiled:
        for name in COMPILED:
            if name in names:
                check_compiled(args.binary, work, name)


if __name__ == "__main__":
    main()

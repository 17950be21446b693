"""The workloads of bench/workloads.py in PyTorch: the same models, batches
and optimizers as bench/c/workload_bench.c builds from fulmen's layers, and
the model FLOPs of one training step.

- mlp:      Linear(784, 1024) -> ReLU -> Linear(1024, 10), batch 64, SGD 0.05
- cnn:      bench/PROTOCOL.md's CNN on (N, 1, 28, 28), batch 64, SGD 0.05
- chargpt:  a GPT of examples/c/charlm.c's shape (2 pre-norm blocks, d_model
            64, 4 heads, context 64, vocabulary 96), built as gpt2 is (head
            tied to the token embedding, no dropout), batch 32, AdamW 3e-3
- gpt2:     GPT-2 small (12 pre-norm blocks, d_model 768, 12 heads, context
            1024, vocabulary 50304, head tied to the token embedding: 124M
            parameters), batch 8, AdamW 6e-4
- resnet18: ResNet-18 for 32x32 images (3x3 stem, no max-pool), 10 classes,
            batch 256, SGD momentum 0.9 lr 0.1 weight decay 5e-4

The transformer blocks are nn.TransformerEncoderLayer(norm_first, GELU,
dropout 0) run with is_causal=True, which hands attention to
scaled_dot_product_attention(is_causal=True) as fulmen's causal layers do.
"""
import torch
from torch import nn
import torch.nn.functional as F

WORKLOADS = ("mlp", "cnn", "chargpt", "gpt2", "resnet18")
GPT_SHAPES = {  # batch, vocab, context, d_model, heads, layers
    ("chargpt", "full"): (32, 96, 64, 64, 4, 2),
    ("chargpt", "tiny"): (32, 96, 64, 64, 4, 2),
    ("gpt2", "full"): (8, 50304, 1024, 768, 12, 12),
    ("gpt2", "tiny"): (2, 512, 64, 64, 4, 2),
}
RESNET_SHAPES = {"full": (256, 64), "tiny": (8, 8)}  # batch, first width
PRECISION = {"gpt2": "bf16-mixed", "resnet18": "bf16-mixed"}  # others 32-true


def precision(workload):
    """The trainer precision a workload runs in."""
    return PRECISION.get(workload, "32-true")


def batch_size(workload, size):
    if workload in ("chargpt", "gpt2"):
        return GPT_SHAPES[(workload, size)][0]
    if workload == "resnet18":
        return RESNET_SHAPES[size][0]
    return 64


def mul32(x, c):
    """(x * c) mod 2^32 for x in [0, 2^32) without an int64 product past
    2^48: c split in 16-bit halves."""
    return (x * (c & 0xFFFF) + (((x * (c >> 16)) & 0xFFFF) << 16)) & 0xFFFFFFFF


def hash32(i):
    """workload_bench.c's counter hash (uint32 arithmetic), on an int64
    tensor of non-negative counters."""
    x = (mul32(i & 0xFFFFFFFF, 2654435761) + 12345) & 0xFFFFFFFF
    x ^= x >> 15
    x = mul32(x, 2246822519)
    x ^= x >> 13
    return x


def batches(workload, size, count):
    """`count` batches (inputs, targets) as workload_bench.c makes them."""
    n = count * batch_size(workload, size)
    if workload in ("chargpt", "gpt2"):
        _, vocab, context, _, _, _ = GPT_SHAPES[(workload, size)]
        ids = hash32(torch.arange(n * context + 1, dtype=torch.int64)) % vocab
        x, y = ids[:-1].view(n, context), ids[1:].view(n, context)
    else:
        dims = {"mlp": (784,), "cnn": (1, 28, 28), "resnet18": (3, 32, 32)}[workload]
        count_px = n
        for d in dims:
            count_px *= d
        x = ((hash32(torch.arange(count_px, dtype=torch.int64)) >> 8).float() / 16777216.0 - 0.5).view(n, *dims)
        y = hash32(torch.arange(n, dtype=torch.int64) + 7777777) % 10
    b = batch_size(workload, size)
    return [(x[i:i + b].contiguous(), y[i:i + b].contiguous()) for i in range(0, n, b)]


class Gpt(nn.Module):
    def __init__(self, vocab, context, d_model, heads, layers):
        super().__init__()
        self.vocab = vocab
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(context, d_model)
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(d_model, heads, 4 * d_model, dropout=0.0, activation="gelu",
                                       batch_first=True, norm_first=True) for _ in range(layers))
        self.ln = nn.LayerNorm(d_model)
        mask = torch.triu(torch.ones(context, context, dtype=torch.bool), 1)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, ids):
        h = self.tok(ids) + self.pos.weight
        for block in self.blocks:
            # The mask only satisfies the layer's check: with is_causal and
            # no weights, attention is SDPA's is_causal, without the mask.
            h = block(h, src_mask=self.mask, is_causal=True)
        return F.linear(self.ln(h), self.tok.weight)


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = None
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, 0, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = self.bn2(self.conv2(h))
        return F.relu(h + (x if self.shortcut is None else self.shortcut(x)))


class ResNet18(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        layers, cin = [], width
        for i in range(4):
            cout = width << i
            layers.append(nn.Sequential(BasicBlock(cin, cout, 2 if i else 1), BasicBlock(cout, cout, 1)))
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, 10)

    def forward(self, x):
        h = self.layers(F.relu(self.bn1(self.conv1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(h, 1), 1))


def build(workload, size):
    if workload in ("chargpt", "gpt2"):
        return Gpt(*GPT_SHAPES[(workload, size)][1:])
    if workload == "resnet18":
        return ResNet18(RESNET_SHAPES[size][1])
    if workload == "cnn":
        return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Linear(32 * 7 * 7, 10))
    return nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 10))


def loss_of(workload, model, x, y):
    logits = model(x)
    if workload in ("chargpt", "gpt2"):
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    return F.cross_entropy(logits, y)


def optimizer(workload, params, fused):
    """The workload's optimizer; `fused` on CUDA (fulmen's is fused there too)."""
    extra = {"fused": True} if fused else {}
    if workload == "gpt2":
        return torch.optim.AdamW(params, lr=6e-4, **extra)
    if workload == "chargpt":
        return torch.optim.AdamW(params, lr=3e-3, **extra)
    if workload == "resnet18":
        return torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=5e-4, **extra)
    return torch.optim.SGD(params, lr=0.05, **extra)


def step_flops(workload, size):
    """Model FLOPs of one training step (forward and backward), the numerator
    of MFU. Transformers: 6 FLOPs per parameter of every matrix product per
    token (the tied head counted, embeddings' lookups not) plus attention's
    12 * layers * context * d_model per token, as PaLM's appendix counts
    (without the causal half). Others: torch's FlopCounterMode over one
    forward and backward of one sample, times the batch."""
    if workload in ("chargpt", "gpt2"):
        batch, vocab, context, d, _, layers = GPT_SHAPES[(workload, size)]
        matmul_params = layers * 12 * d * d + vocab * d  # qkv 3d^2, proj d^2, mlp 8d^2; head
        tokens = batch * context
        return 6 * matmul_params * tokens + 12 * layers * context * d * tokens
    from torch.utils.flop_counter import FlopCounterMode
    model = build(workload, size)
    x, y = batches(workload, size, 1)[0]
    counter = FlopCounterMode(display=False)
    with counter:
        loss_of(workload, model, x[:1], y[:1]).backward()
    return counter.get_total_flops() * batch_size(workload, size)


def parameter_count(workload, size):
    return sum(p.numel() for p in build(workload, size).parameters())

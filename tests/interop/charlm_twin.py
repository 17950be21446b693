#!/usr/bin/env python3
"""The PyTorch twin of examples/c/charlm.c, and their per-step parity.

    python charlm_twin.py --binary build/examples/charlm --data lee_background.txt
                          [--work DIR] [--steps 20] [--layers 2]

fulmen's charlm trains STEPS steps (no shuffle, no dropout, one thread)
and writes its initial weights and every step's loss. The same GPT in
torch.nn (Embedding, TransformerEncoderLayer with norm_first and GELU, a
causal mask, LayerNorm, Linear) loads those weights with a strict
load_state_dict, builds the same windows and batches from the same text,
and trains with AdamW: every step's loss must match fulmen's within 1e-5
relative. The largest difference is printed.
"""
import argparse
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from twin import compare, run_fulmen  # noqa: E402


class Gpt(nn.Module):
    """charlm.c's model, with the same child names."""

    def __init__(self, vocab, context, d_model, heads, layers):
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(context, d_model)
        self.blocks = nn.Sequential(*[
            nn.TransformerEncoderLayer(d_model, heads, 4 * d_model, dropout=0.0, activation="gelu",
                                       batch_first=True, norm_first=True) for _ in range(layers)
        ])
        self.ln = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, ids):
        steps = ids.shape[1]
        h = self.tok(ids) + self.pos(torch.arange(steps))
        mask = torch.triu(torch.ones(steps, steps, dtype=torch.bool), diagonal=1)
        for block in self.blocks:
            h = block(h, src_mask=mask)
        return self.head(self.ln(h))


def windows(ids, context):
    """[count, context] inputs and targets shifted by one, as charlm.c cuts them."""
    count = (len(ids) - 1) // context
    x = ids[: count * context].reshape(count, context)
    y = ids[1 : count * context + 1].reshape(count, context)
    return x, y


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--work")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--lr", type=float, default=3e-3)
    args = ap.parse_args()
    init, theirs = run_fulmen(args.binary, args.work, [
        "--data", args.data, "--epochs", "1", "--limit-batches", str(args.steps), "--no-shuffle",
        "--dropout", "0", "--threads", "1", "--sample", "0", "--layers", str(args.layers),
        "--batch-size", str(args.batch_size), "--context", str(args.context), "--d-model", str(args.d_model),
        "--heads", str(args.heads), "--lr", str(args.lr),
    ])

    torch.set_num_threads(1)
    text = open(args.data, "rb").read()
    alphabet = sorted(set(text))
    index = {b: i for i, b in enumerate(alphabet)}
    ids = torch.tensor([index[b] for b in text], dtype=torch.int64)
    n_train = len(ids) // 10 * 9
    x, y = windows(ids[:n_train], args.context)

    model = Gpt(len(alphabet), args.context, args.d_model, args.heads, args.layers)
    model.load_state_dict(load_file(init), strict=True)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    ours = []
    for step in range(args.steps):
        rows = slice(step * args.batch_size, (step + 1) * args.batch_size)
        logits = model(x[rows])
        loss = F.cross_entropy(logits.reshape(-1, len(alphabet)), y[rows].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        ours.append(loss.item())

    compare("charlm twin", theirs, ours, f" ({ours[-1] / math.log(2):.3f} bits/char)")


if __name__ == "__main__":
    main()

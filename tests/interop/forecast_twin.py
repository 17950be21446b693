#!/usr/bin/env python3
"""The PyTorch twin of examples/c/forecast.c, and their per-step parity.

    python forecast_twin.py --binary build/examples/forecast --data elnino.csv
                            [--work DIR] [--epochs 5]

fulmen's forecast trains EPOCHS epochs (no shuffle, one thread) and writes
its initial weights and every step's loss. The same model in torch.nn (an
LSTM over windows of standardised months, batch_first, its last hidden
state through a Linear) loads those weights with a strict load_state_dict,
builds the same windows and batches from the same file, and trains with
Adam on the MSE: every step's loss must match fulmen's within 1e-5
relative. The largest difference is printed.
"""
import argparse
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from twin import compare, run_fulmen  # noqa: E402

VAL_MONTHS = 120


class Forecaster(nn.Module):
    """forecast.c's model, with the same child names."""

    def __init__(self, hidden):
        super().__init__()
        self.lstm = nn.LSTM(1, hidden, batch_first=True)
        self.head = nn.Linear(hidden, 1)

    def forward(self, x):
        _, (h, _) = self.lstm(x)
        return self.head(h.squeeze(0))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--work")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--window", type=int, default=24)
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-2)
    args = ap.parse_args()
    init, theirs = run_fulmen(args.binary, args.work, [
        "--data", args.data, "--epochs", str(args.epochs), "--no-shuffle", "--threads", "1",
        "--batch-size", str(args.batch_size), "--window", str(args.window), "--hidden", str(args.hidden),
        "--lr", str(args.lr),
    ])

    torch.set_num_threads(1)
    rows = [line.split(",") for line in open(args.data).read().splitlines()[1:] if line.strip()]
    months = torch.tensor([float(v) for row in rows for v in row[1:13]], dtype=torch.float64)
    split = len(months) - VAL_MONTHS
    z = ((months - months[:split].mean()) / months[:split].std()).float()
    targets = torch.arange(args.window, split)
    x = torch.stack([z[t - args.window : t] for t in targets]).unsqueeze(-1)
    y = z[targets].unsqueeze(-1)

    model = Forecaster(args.hidden)
    model.load_state_dict(load_file(init), strict=True)
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    ours = []
    for _ in range(args.epochs):
        for start in range(0, len(x), args.batch_size):
            rows = slice(start, start + args.batch_size)
            loss = F.mse_loss(model(x[rows]), y[rows])
            opt.zero_grad()
            loss.backward()
            opt.step()
            ours.append(loss.item())

    compare("forecast twin", theirs, ours)


if __name__ == "__main__":
    main()

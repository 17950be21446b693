#!/usr/bin/env python3
"""The Python contenders of bench/workloads.py, one per process:

- pytorch:            a plain loop (zero_grad set_to_none, forward under
                      autocast for bf16-mixed, backward, optimizer step);
- pytorch-compile:    the same loop with the model torch.compile'd (default);
- pytorch-compile-ro: ... with mode="reduce-overhead" (CUDA graphs);
- lightning:          Lightning's Trainer.fit with the workload's precision,
                      no progress bar, logger, checkpoints or summary.

Prints bench/PROTOCOL.md's lines; on CUDA each epoch's clock starts and
stops after torch.cuda.synchronize(), and the done line carries
torch.cuda.max_memory_allocated() as "peak_bytes".
"""
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import workload_models as wm  # noqa: E402

CONTENDERS = ("pytorch", "pytorch-compile", "pytorch-compile-ro", "lightning")


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--contender", choices=CONTENDERS, required=True)
    p.add_argument("--workload", choices=wm.WORKLOADS, required=True)
    p.add_argument("--size", choices=("full", "tiny"), default="full")
    p.add_argument("--batches", type=int, default=20)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--accelerator", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--precision", default=None)
    return p.parse_args()


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def emit(a, epoch, seconds, steps):
    if epoch >= a.warmup:
        print(json.dumps({"contender": a.contender, "workload": a.workload, "epoch": epoch,
                          "seconds": seconds, "steps": steps}), flush=True)


def plain_loop(a, model, data, device, autocast):
    fused = device.type == "cuda"
    opt = wm.optimizer(a.workload, model.parameters(), fused)
    if a.contender != "pytorch":
        mode = "reduce-overhead" if a.contender == "pytorch-compile-ro" else "default"
        model = torch.compile(model, mode=mode)
    for epoch in range(a.warmup + a.epochs):
        synchronize(device)
        start = time.perf_counter()
        for x, y in data:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            opt.zero_grad(set_to_none=True)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
                loss = wm.loss_of(a.workload, model, x, y)
            loss.backward()
            opt.step()
        synchronize(device)
        emit(a, epoch, time.perf_counter() - start, len(data))


def lightning_fit(a, model, data, device, precision):
    import lightning as L
    from torch.utils.data import DataLoader, TensorDataset

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = model

        def training_step(self, batch, _):
            return wm.loss_of(a.workload, self.model, *batch)

        def configure_optimizers(self):
            return wm.optimizer(a.workload, self.parameters(), device.type == "cuda")

    class Clock(L.Callback):
        def on_train_epoch_start(self, trainer, module):
            synchronize(device)
            self.start, self.steps = time.perf_counter(), 0

        def on_train_batch_end(self, *args):
            self.steps += 1

        def on_train_epoch_end(self, trainer, module):
            synchronize(device)
            emit(a, trainer.current_epoch, time.perf_counter() - self.start, self.steps)

    xs = torch.cat([x for x, _ in data])
    ys = torch.cat([y for _, y in data])
    loader = DataLoader(TensorDataset(xs, ys), batch_size=wm.batch_size(a.workload, a.size), shuffle=False,
                        pin_memory=device.type == "cuda")
    trainer = L.Trainer(accelerator=a.accelerator, devices=1, precision=precision,
                        max_epochs=a.warmup + a.epochs, enable_progress_bar=False, logger=False,
                        enable_checkpointing=False, enable_model_summary=False, callbacks=[Clock()])
    trainer.fit(Module(), loader)


def main():
    a = parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    device = torch.device(a.accelerator)
    precision = a.precision or wm.precision(a.workload)
    data = wm.batches(a.workload, a.size, a.batches)
    if device.type == "cuda":
        data = [(x.pin_memory(), y.pin_memory()) for x, y in data]
    model = wm.build(a.workload, a.size)
    if a.contender == "lightning":
        lightning_fit(a, model, data, device, precision)
    else:
        if precision not in ("32-true", "bf16-mixed"):
            raise SystemExit(f"workload_fit: precision {precision} is not 32-true or bf16-mixed")
        plain_loop(a, model.to(device), data, device, precision == "bf16-mixed")
    done = {"contender": a.contender, "workload": a.workload, "done": True}
    if device.type == "cuda":
        done["peak_bytes"] = torch.cuda.max_memory_allocated(device)
    print(json.dumps(done), flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The batch size finder against Lightning's own Tuner.scale_batch_size.

    python batch_size_parity.py --binary build/interop/batch_size_finder

For each case (power and binsearch; out-of-memory points below, between
and above the doublings; a dataset shorter than the doubling; few trials;
a max_val cap; margins), a 2-16-2 MLP on SAMPLES random points starts from
a loader of batch size INIT and the batches of more than FITS rows "run
out of memory" (Lightning's twin raises the RuntimeError Lightning's
is_oom_error recognizes; fulmen's step returns FULMEN_CODE_OUT_OF_MEMORY).
fulmen must try the same batch sizes in the same order and find the same
one, but where Lightning 2.6's power mode returns a size it should not:
a doubled size above max_val that it never tried (fulmen returns
max_val), or a size at the dataset's length that ran out of memory
(fulmen halves it, as for any size that fails).

The loaders start at init_val: Lightning 2.6 runs its first trial with the
loader's own batch size (it rebuilds the loader only after that trial),
fulmen at init_val, as both document.
"""
import argparse
import subprocess
import sys
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F

# mode, fits, init_val, max_trials, margin, max_val, samples
CASES = [
    ("power", 40, 2, 25, 0.05, 8192, 200),
    ("power", 1000, 2, 25, 0.05, 8192, 200),
    ("power", 5, 3, 25, 0.05, 8192, 200),
    ("power", 1, 4, 25, 0.05, 8192, 200),
    ("power", 1000, 2, 3, 0.05, 8192, 200),
    ("power", 1000, 2, 25, 0.05, 20, 200),
    ("power", 40, 2, 25, 0.05, 8192, 64),
    ("power", 30, 2, 25, 0.05, 8192, 32),
    ("binsearch", 40, 2, 25, 0.05, 8192, 200),
    ("binsearch", 40, 2, 25, 0.0, 8192, 200),
    ("binsearch", 77, 3, 25, 0.1, 8192, 500),
    ("binsearch", 1000, 2, 25, 0.05, 8192, 200),
    ("binsearch", 40, 2, 6, 0.05, 8192, 200),
    ("binsearch", 1000, 2, 25, 0.05, 48, 200),
]


def lightning(mode, fits, init_val, max_trials, margin, max_val, samples):
    import lightning.pytorch as pl
    from lightning.pytorch.tuner import Tuner

    tried = []

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.batch_size = init_val
            self.model = nn.Sequential(nn.Linear(2, 16), nn.ReLU(), nn.Linear(16, 2))

        def train_dataloader(self):
            gen = torch.Generator().manual_seed(1)
            x = torch.randn(samples, 2, generator=gen)
            y = torch.arange(samples) % 2
            return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=self.batch_size)

        def training_step(self, batch, batch_idx):
            x, y = batch
            if self.trainer.global_step == 0:
                tried.append(x.shape[0])
            if x.shape[0] > fits:
                raise RuntimeError("CUDA out of memory. (simulated)")
            return F.cross_entropy(self.model(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    # The Tuner keeps its own checkpoint in default_root_dir while it runs.
    with tempfile.TemporaryDirectory(prefix="fulmen-batch-size-parity.") as root:
        trainer = pl.Trainer(max_epochs=1, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                             enable_progress_bar=False, enable_model_summary=False, default_root_dir=root)
        found = Tuner(trainer).scale_batch_size(Module(), mode=mode, steps_per_trial=3, init_val=init_val,
                                                max_trials=max_trials, margin=margin, max_val=max_val)
    return tried, found


def fulmen(binary, mode, fits, init_val, max_trials, margin, max_val, samples):
    args = [binary, mode, str(fits), str(init_val), str(max_trials), str(margin), str(max_val), str(samples)]
    run = subprocess.run(args, capture_output=True, text=True)
    if run.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed ({run.returncode}):\n{run.stderr[-2000:]}")
    tried = [int(line.split()[1]) for line in run.stdout.splitlines() if line.startswith("tried ")]
    found = [int(line.split()[1]) for line in run.stdout.splitlines() if line.startswith("found ")]
    return tried, found[0]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--binary", required=True)
    a = p.parse_args()
    torch.set_num_threads(1)
    failed = 0
    for case in CASES:
        want = lightning(*case)
        got = fulmen(a.binary, *case)
        mode, max_val = case[0], case[5]
        if mode == "power" and want[1] > max_val:
            want = (want[0], max_val)  # Lightning's untried doubling past max_val
        if mode == "power" and want[1] > case[1] and want[1] >= case[6]:
            want = (want[0], want[1] // 2)  # Lightning keeps a failed size at the dataset's length
        ok = got == want
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {case}: fulmen tried {got[0]}, found {got[1]}; "
              f"Lightning tried {want[0]}, found {want[1]}", flush=True)
    print(f"batch_size_parity: {len(CASES) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

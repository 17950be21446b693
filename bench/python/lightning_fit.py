"""Contenders "lightning" and "lightning-full": PyTorch Lightning's Trainer.fit
on the protocol's workloads (bench/PROTOCOL.md).

A LightningModule wraps the shared model; data is a DataLoader over a
TensorDataset (batch 64, shuffle, num_workers 0); SGD lr 0.05. By default the
Trainer runs lean: no logger, checkpointing, progress bar or model summary.
--full turns them on (CSVLogger, ModelCheckpoint, progress bar, summary; the
module then logs its loss every step as a typical user would) and names the
contender "lightning-full". --ranks N uses strategy="ddp" with N CPU
processes (Lightning starts the others by re-running this script); only
rank 0 prints.

An epoch is timed from one on_train_epoch_start to the next (the last one
ends at on_train_end), so end-of-epoch work such as checkpointing counts.
With --accelerator cuda the Trainer runs on one GPU (accelerator="gpu") and
the clock is read after torch.cuda.synchronize().
"""
import os
import sys
import tempfile
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def extra_args(p):
    p.add_argument("--full", action="store_true",
                   help="logger, checkpointing, progress bar and model summary on")


def main():
    args = common.parse_args(__doc__.splitlines()[0], extra_args)
    common.setup(args)
    import lightning as L
    import torch
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, TensorDataset

    name = "lightning-full" if args.full else "lightning"
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    warnings.filterwarnings("ignore", ".*log_every_n_steps.*")

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = common.build_model(args.workload)

        def training_step(self, batch, batch_idx):
            xb, yb = batch
            loss = F.cross_entropy(self.net(xb), yb)
            if args.full:
                self.log("train_loss", loss, prog_bar=True)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=common.LR)

    class EpochTimer(L.Callback):
        def __init__(self):
            self.epoch, self.t0, self.steps = None, None, 0

        def _close(self, trainer):
            if self.epoch is None:
                return
            common.sync(args)
            seconds = time.perf_counter() - self.t0
            if self.epoch >= args.warmup and trainer.global_rank == 0:
                common.epoch_line(name, args.workload, self.epoch, seconds, self.steps)

        def on_train_epoch_start(self, trainer, pl_module):
            self._close(trainer)
            self.epoch, self.steps = trainer.current_epoch, trainer.num_training_batches
            common.sync(args)
            self.t0 = time.perf_counter()

        def on_train_end(self, trainer, pl_module):
            self._close(trainer)
            self.epoch = None

    L.seed_everything(args.seed, verbose=False)
    x, y = common.load_data(args.data)
    loader = DataLoader(TensorDataset(x, y), batch_size=common.BATCH, shuffle=True,
                        num_workers=0)
    with tempfile.TemporaryDirectory(prefix="fulmen-bench-lightning-") as root:
        kw = dict(accelerator="gpu" if args.accelerator == "cuda" else "cpu", max_epochs=args.warmup + args.epochs,
                  callbacks=[EpochTimer()], default_root_dir=root)
        if args.ranks is None:
            kw["devices"] = 1
        else:
            kw.update(strategy="ddp", devices=args.ranks)
        if args.full:
            kw["logger"] = L.pytorch.loggers.CSVLogger(root)
        else:
            kw.update(logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False)
        trainer = L.Trainer(**kw)
        trainer.fit(Module(), loader)
        if trainer.global_rank == 0:
            common.done_line(name, args.workload)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Per-step parity of fulmen's Trainer with Lightning's own Trainer, and
resumes that continue exactly where an uninterrupted run goes.

    python lightning_parity.py --binary build/interop/lightning_parity [--work DIR]

For each configuration of tests/interop/lightning_parity.c (schedulers per
epoch and per step with a frequency, gradient clipping by norm and by
value, gradient accumulation, param groups with their own optimizer
constants and scheduler ranges, LBFGS re-running the step inside its
own, EMA and SWA weight averaging, a training_step returning None and an
on_train_batch_start returning -1), the same 32-64-10 MLP starts from the same
weights and sees the same batches in the same order on one CPU thread:

1. Lightning's Trainer trains EPOCHS epochs: the reference losses.
2. fulmen trains EPOCHS epochs: every step's loss must equal Lightning's.
3. fulmen trains FIRST epochs, keeping a checkpoint per epoch, and a new
   process resumes from the last one up to EPOCHS; Lightning does the
   same with its own checkpoints. The resumed losses must equal
   Lightning's resumed ones and, but for ReduceLROnPlateau, the
   uninterrupted reference (a scheduler must not fall a step behind). As
   in Lightning, an epoch-end checkpoint is written before
   ReduceLROnPlateau's epoch step (it may monitor a metric logged in
   on_train_epoch_end), and a resume does not replay that step.
4. Across the two: fulmen resumes from Lightning's own checkpoint, and
   Lightning resumes from the one fulmen writes in Lightning's format
   (checkpoint_format "lightning"); both must give Lightning's resumed
   losses. fulmen's file must hold what Lightning's holds at the same
   point (loops, callbacks, optimizer and scheduler states), but for the
   folders, its own `fulmen` entry and the rounding of a metric fulmen
   averages in float64; so must a checkpoint taken inside an epoch, and
   the last one of a run resumed from fulmen's Lightning-format file.
5. A second fit of one trainer (steplr, stepfreq, plateau, reload, ema,
   swa, skips): after FIRST epochs,
   trainer.fit_loop.max_epochs = EPOCHS and fit again, then once more
   (which trains nothing), in fulmen with fulmen_trainer_set_max_epochs:
   the same losses, and the last epoch's checkpoints hold the same.
6. trainer.save_checkpoint after fit (steplr): the file
   fulmen_trainer_save_checkpoint writes holds what Lightning's holds, and
   Lightning's Trainer and fulmen resume from it to the uninterrupted run.
7. The learning-rate range test: fulmen_trainer_lr_find and Lightning's
   Tuner.lr_find (1e-5 to 1 over 30 steps, SGD with momentum) try the same
   learning rates, record the same smoothed losses and suggest the same
   learning rate.

fulmen and Lightning run the same libtorch kernels in the same order, so
the losses must be bit-identical; the largest difference is printed.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import save_file

FEATURES = 32
CLASSES = 10
SAMPLES = 176  # 11 batches of 16: an uneven number of accumulated pairs
VAL_ROWS = 64  # validation ("plateau"): 64 more rows after the training rows
BATCH = 16
EPOCHS = 4
FIRST = 2
TOLERANCE = 0.0

CONFIGS = {
    # optimizer, scheduler (StepLR's step_size, gamma; None: ReduceLROnPlateau on
    # val_loss with validation; "warmup_cosine": SequentialLR of LinearLR and
    # CosineAnnealingLR), interval, frequency, clip, algorithm, accumulate
    "steplr": ("sgd", (1, 0.5), "epoch", 1, 0.5, "norm", 1),
    "stepfreq": ("adam", (2, 0.7), "step", 3, 0.05, "value", 2),
    "plateau": ("sgd", None, "epoch", 1, 1.0, "norm", 1),
    "warmup_cosine": ("sgd", "warmup_cosine", "step", 1, None, "norm", 1),
    "restarts": ("sgd", "restarts", "step", 1, None, "norm", 1),
    "cyclic": ("sgd", "cyclic", "step", 1, None, "norm", 1),
    "lambda": ("sgd", "lambda", "step", 1, None, "norm", 1),
    "onecycle": ("adam", "onecycle", "step", 1, None, "norm", 1),
    "chained": ("sgd", "chained", "step", 1, None, "norm", 1),
    "two_schedulers": ("sgd", "two_schedulers", "step", 1, None, "norm", 1),
    # AdamW whose second param group (the biases) has its own weight_decay,
    # betas, eps and amsgrad.
    "groups": ("adamw_groups", (1, 0.5), "epoch", 1, None, "norm", 1),
    # ReduceLROnPlateau with a min_lr per param group (SGD, the biases in a
    # group of lr 0.2), each bound above half its group's lr so that any
    # reduction stops at the group's own bound.
    "plateau_groups": ("sgd_groups", "plateau_groups", "epoch", 1, 1.0, "norm", 1),
    # OneCycleLR with a max_lr per param group (Adam, the biases in a group
    # of their own).
    "onecycle_groups": ("adam_groups", "onecycle_groups", "step", 1, None, "norm", 1),
    # CyclicLR with a base_lr and max_lr per param group.
    "cyclic_groups": ("sgd_groups", "cyclic_groups", "step", 1, None, "norm", 1),
    # LBFGS (its step re-runs training_step: every evaluation's loss is
    # compared), with a fixed step and clipping inside each evaluation, and
    # with the strong-Wolfe line search.
    "lbfgs": ("lbfgs", (1, 0.5), "epoch", 1, 1.0, "norm", 1),
    "lbfgs_wolfe": ("lbfgs_wolfe", (1, 0.5), "epoch", 1, None, "norm", 1),
    # LBFGS under manual optimization: the training step calls
    # opt.step(closure) itself (zero_grad and manual_backward in the
    # closure) and steps StepLR after the epoch's last batch.
    "lbfgs_manual": ("lbfgs", (1, 0.5), "epoch", 1, None, "norm", 1),
    # torch's fused updates (fused=True): AdamW, SGD with momentum and
    # clipping, and Adagrad with lr_decay and a starting sum.
    "fused": ("adamw_fused", (1, 0.5), "epoch", 1, None, "norm", 1),
    "fused_sgd": ("sgd_fused", (1, 0.5), "epoch", 1, 0.5, "norm", 1),
    "fused_adagrad": ("adagrad_fused", (1, 0.5), "epoch", 1, None, "norm", 1),
    # torch's foreach updates (foreach=True): AdamW with amsgrad, and SGD
    # with Nesterov momentum (which adds to the gradients in place) and
    # clipping.
    "foreach": ("adamw_foreach", (1, 0.5), "epoch", 1, None, "norm", 1),
    "foreach_sgd": ("sgd_foreach", (1, 0.5), "epoch", 1, 0.5, "norm", 1),
    # Adam's variants with foreach updates (NAdam's and RAdam's differ from
    # their for-loop updates in the last bits, in torch as in fulmen).
    "foreach_adamax": ("adamax_foreach", (1, 0.5), "epoch", 1, None, "norm", 1),
    "foreach_nadam": ("nadam_foreach", (1, 0.5), "epoch", 1, None, "norm", 1),
    "foreach_radam": ("radam_foreach", (1, 0.5), "epoch", 1, None, "norm", 1),
    # Weight averaging: validation (and so ReduceLROnPlateau) sees the
    # averaged weights. EMA (decay 0.9) every 2nd step from step 3 and at
    # every epoch end from epoch 2; SWA (equal average) every step.
    # The data from the module's train_dataloader / val_dataloader, which
    # give other rows each epoch they are called for, reloaded every 2
    # epochs (as plateau otherwise).
    "reload": ("sgd", None, "epoch", 1, 1.0, "norm", 1),
    "ema": ("sgd", None, "epoch", 1, 1.0, "norm", 1),
    "swa": ("sgd", None, "epoch", 1, 1.0, "norm", 1),
    # BackboneFinetuning of the first Linear (the module's `backbone`),
    # unfrozen at epoch 1: SGD over the trainable parameters, the backbone
    # joining as a second param group whose lr grows until it meets the
    # first's. Lightning's own resume after the unfreeze leaves the
    # backbone frozen (its parameters rejoin the optimizer, but
    # `requires_grad` stays off); fulmen's resumes train it on, so they
    # are compared with Lightning's uninterrupted run.
    "backbone": ("sgd_trainable", (1, 0.5), "epoch", 1, 0.5, "norm", 1),
    # The same with a lambda_func of the host's (1.5 for odd epochs, 1 for
    # even ones) in place of the constant factor 2.
    "backbone_lambda": ("sgd_trainable", (1, 0.5), "epoch", 1, 0.5, "norm", 1),
    # What the module returns: training_step returns None for every 3rd
    # batch (no backward; the step, clipping and the StepLR stepping every
    # 3rd batch still run), and on_train_batch_start returns -1 at batch 8
    # of epoch 2 (the epoch ends there; its scheduler steps for that batch).
    "skips": ("sgd", (2, 0.7), "step", 3, 0.5, "norm", 1),
    # The module's optimization hooks, as steplr otherwise: optimizer_step
    # stepping on even batches only (odd ones run the closure alone);
    # optimizer_step warming the lr up after each of the first 5 steps
    # (Lightning's documented example); configure_gradient_clipping
    # clipping (norm 0.5, no trainer setting) only after epoch 0;
    # lr_scheduler_step stepping the StepLR only at the end of even epochs.
    "step_even": ("sgd", (1, 0.5), "epoch", 1, 0.5, "norm", 1),
    "warmup": ("sgd", (1, 0.5), "epoch", 1, 0.5, "norm", 1),
    "clip_after_first": ("sgd", (1, 0.5), "epoch", 1, None, "norm", 1),
    "custom_scheduler": ("sgd", (1, 0.5), "epoch", 1, 0.5, "norm", 1),
}

# The warm-up's steps (the "warmup" configuration).
WARMUP_STEPS = 5

# Configurations whose fulmen resumes follow Lightning's uninterrupted run
# where Lightning's own resume departs from it (see "backbone" above).
LIGHTNING_RESUME_DEPARTS = ("backbone", "backbone_lambda")

def finetuning(config):
    """The BackboneFinetuning callback of a configuration, if any."""
    from lightning.pytorch.callbacks import BackboneFinetuning

    if config == "backbone_lambda":
        return [BackboneFinetuning(unfreeze_backbone_at_epoch=1, lambda_func=lambda epoch: 1 + (epoch % 2) / 2)]
    return [BackboneFinetuning(unfreeze_backbone_at_epoch=1)] if config == "backbone" else []


def averaging(config):
    """The weight averaging callback of a configuration, if any."""
    from lightning.pytorch.callbacks import EMAWeightAveraging, WeightAveraging

    if config == "ema":
        return [EMAWeightAveraging(decay=0.9, update_every_n_steps=2, update_starting_at_step=3,
                                   update_starting_at_epoch=2)]
    if config == "swa":
        return [WeightAveraging()]
    return []


# The first learning rate of each optimizer (a scheduler must lower it).
FIRST_LR = {"lbfgs": 0.5, "lbfgs_wolfe": 1.0}

# Configurations validating every epoch and stepping ReduceLROnPlateau on
# val_loss.
PLATEAU = (None, "plateau_groups")


def build():
    return nn.Sequential(nn.Linear(FEATURES, 64), nn.ReLU(), nn.Linear(64, CLASSES))


def lightning_losses(config, init, x, y, epochs=EPOCHS, ckpt_dir=None, resume=None, save_after=None, refit=None):
    """Lightning's Trainer on the twin of lightning_parity.c's run; with
    `refit`, trainer.fit_loop.max_epochs = refit and two more fits of the
    same trainer; with `save_after`, trainer.save_checkpoint(save_after)
    once fit returns."""
    import lightning.pytorch as pl
    from safetensors.torch import load_file

    optimizer, step_lr, interval, frequency, clip, algorithm, accumulate = CONFIGS[config]
    losses = []

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = build()
            self.model.load_state_dict(load_file(init))

            self.automatic_optimization = config != "lbfgs_manual"

        @property
        def backbone(self):
            # BackboneFinetuning's module (a property: no second name for
            # the same weights in the state_dict).
            return self.model[0]

        def training_step(self, batch, batch_idx):
            xb, yb = batch
            if config == "lbfgs_manual":
                opt = self.optimizers()

                def closure():
                    opt.zero_grad()
                    loss = F.cross_entropy(self.model(xb), yb)
                    losses.append(loss.item())
                    self.manual_backward(loss)
                    return loss

                opt.step(closure=closure)
                if self.trainer.is_last_batch:
                    self.lr_schedulers().step()
                return None
            if config == "skips" and batch_idx % 3 == 2:
                return None
            loss = F.cross_entropy(self.model(xb), yb)
            losses.append(loss.item())
            return loss

        if config == "skips":
            def on_train_batch_start(self, batch, batch_idx):
                if self.current_epoch == 2 and batch_idx == 8:
                    return -1
                return None

        if config == "step_even":
            def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure=None):
                if batch_idx % 2 == 0:
                    optimizer.step(closure=optimizer_closure)
                else:
                    optimizer_closure()

        if config == "warmup":
            def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure=None):
                optimizer.step(closure=optimizer_closure)
                if self.trainer.global_step < WARMUP_STEPS:
                    lr_scale = min(1.0, float(self.trainer.global_step + 1) / WARMUP_STEPS)
                    for pg in optimizer.param_groups:
                        pg["lr"] = lr_scale * 0.1

        if config == "clip_after_first":
            def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
                if self.current_epoch > 0:
                    self.clip_gradients(optimizer, gradient_clip_val=0.5, gradient_clip_algorithm="norm")

        if config == "custom_scheduler":
            def lr_scheduler_step(self, scheduler, metric):
                if self.current_epoch % 2 == 0:
                    scheduler.step()

        if config == "reload":
            def train_dataloader(self):
                n = SAMPLES - 16 * (self.trainer.current_epoch % 3)
                return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x[:n], y[:n]), batch_size=BATCH)

            def val_dataloader(self):
                n = 32 + 16 * (self.trainer.current_epoch % 3)
                rows = slice(SAMPLES, SAMPLES + n)
                return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x[rows], y[rows]), batch_size=BATCH)

        def validation_step(self, batch, batch_idx):
            xb, yb = batch
            loss = F.cross_entropy(self.model(xb), yb).item()
            self.log("val_loss", loss)
            if config in ("ema", "swa"):
                # Validation sees the averaged weights: compared too.
                losses.append(loss)

        def configure_optimizers(self):
            named = list(self.model.named_parameters())
            weights = [p for n, p in named if n.endswith("weight")]
            biases = [p for n, p in named if n.endswith("bias")]
            if optimizer == "sgd":
                opt = torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)
            elif optimizer == "sgd_trainable":
                opt = torch.optim.SGD(filter(lambda p: p.requires_grad, self.parameters()), lr=0.1, momentum=0.9)
            elif optimizer == "sgd_fused":
                opt = torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9, fused=True)
            elif optimizer == "adagrad_fused":
                opt = torch.optim.Adagrad(
                    self.parameters(), lr=0.05, lr_decay=0.01, initial_accumulator_value=0.1, fused=True
                )
            elif optimizer == "sgd_foreach":
                opt = torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9, nesterov=True, foreach=True)
            elif optimizer == "adamw_foreach":
                opt = torch.optim.AdamW(self.parameters(), lr=0.01, weight_decay=0.01, amsgrad=True, foreach=True)
            elif optimizer == "adamax_foreach":
                opt = torch.optim.Adamax(self.parameters(), lr=0.01, weight_decay=0.01, foreach=True)
            elif optimizer == "nadam_foreach":
                opt = torch.optim.NAdam(self.parameters(), lr=0.01, weight_decay=0.01, decoupled_weight_decay=True,
                                        foreach=True)
            elif optimizer == "radam_foreach":
                opt = torch.optim.RAdam(self.parameters(), lr=0.01, weight_decay=0.01, foreach=True)
            elif optimizer == "adamw_fused":
                opt = torch.optim.AdamW(self.parameters(), lr=0.01, weight_decay=0.01, fused=True)
            elif optimizer == "sgd_groups":
                opt = torch.optim.SGD([{"params": weights}, {"params": biases, "lr": 0.2}], lr=0.1, momentum=0.9)
            elif optimizer == "adam_groups":
                opt = torch.optim.Adam([{"params": weights}, {"params": biases}], lr=0.01)
            elif optimizer == "lbfgs":
                opt = torch.optim.LBFGS(self.parameters(), lr=0.5, max_iter=4, history_size=3)
            elif optimizer == "lbfgs_wolfe":
                opt = torch.optim.LBFGS(self.parameters(), lr=1, max_iter=5, history_size=4,
                                        line_search_fn="strong_wolfe")
            elif optimizer == "adamw_groups":
                opt = torch.optim.AdamW(
                    [{"params": weights},
                     {"params": biases, "weight_decay": 0.0, "betas": (0.8, 0.95), "eps": 1e-6, "amsgrad": True}],
                    lr=0.01, weight_decay=0.01)
            else:
                opt = torch.optim.Adam(self.parameters(), lr=0.01)
            if step_lr == "two_schedulers":
                # Two lr_scheduler configs for one optimizer: a warm-up per
                # step and a decay per epoch, whose factors compose.
                warm = torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.1, total_iters=5)
                decay = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
                return [opt], [{"scheduler": warm, "interval": "step"}, {"scheduler": decay, "interval": "epoch"}]
            if step_lr == "warmup_cosine":
                warm = torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.1, total_iters=5)
                cosine = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=39, eta_min=0.001)
                sched = torch.optim.lr_scheduler.SequentialLR(opt, [warm, cosine], milestones=[5])
                monitor = {}
            elif step_lr == "chained":
                constant = torch.optim.lr_scheduler.ConstantLR(opt, factor=0.1, total_iters=5)
                decay = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.97)
                sched = torch.optim.lr_scheduler.ChainedScheduler([constant, decay])
                monitor = {}
            elif step_lr == "restarts":
                sched = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=3, T_mult=2, eta_min=0.001)
                monitor = {}
            elif step_lr == "lambda":
                sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 0.95**step)
                monitor = {}
            elif step_lr == "cyclic_groups":
                sched = torch.optim.lr_scheduler.CyclicLR(opt, [0.01, 0.02], [0.1, 0.05], step_size_up=4,
                                                          mode="exp_range", gamma=0.99)
                monitor = {}
            elif step_lr == "onecycle_groups":
                sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=[0.02, 0.05], total_steps=EPOCHS * SAMPLES // BATCH)
                monitor = {}
            elif step_lr == "onecycle":
                sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.02, total_steps=EPOCHS * SAMPLES // BATCH)
                monitor = {}
            elif step_lr == "cyclic":
                sched = torch.optim.lr_scheduler.CyclicLR(opt, 0.01, 0.1, step_size_up=4, mode="exp_range", gamma=0.99)
                monitor = {}
            elif step_lr is None:
                sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=0.5, patience=0)
                monitor = {"monitor": "val_loss"}
            elif step_lr == "plateau_groups":
                sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=0.5, patience=0, min_lr=[0.07, 0.15])
                monitor = {"monitor": "val_loss"}
            else:
                sched = torch.optim.lr_scheduler.StepLR(opt, step_size=step_lr[0], gamma=step_lr[1])
                monitor = {}
            config = {"scheduler": sched, "interval": interval, "frequency": frequency, **monitor}
            return {"optimizer": opt, "lr_scheduler": config}

    train = torch.utils.data.TensorDataset(x[:SAMPLES], y[:SAMPLES])
    loader = torch.utils.data.DataLoader(train, batch_size=BATCH, shuffle=False)
    trainer = pl.Trainer(
        max_epochs=epochs,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=ckpt_dir is not None,
        callbacks=averaging(config) + finetuning(config) + (
            [pl.callbacks.ModelCheckpoint(dirpath=ckpt_dir, filename="{epoch}", save_top_k=-1)] if ckpt_dir else []),
        enable_progress_bar=False,
        enable_model_summary=False,
        gradient_clip_val=clip,
        gradient_clip_algorithm=algorithm,
        accumulate_grad_batches=accumulate,
        reload_dataloaders_every_n_epochs=2 if config == "reload" else 0,
    )
    val = None
    if step_lr in PLATEAU:
        val = torch.utils.data.DataLoader(
            torch.utils.data.TensorDataset(x[SAMPLES:], y[SAMPLES:]), batch_size=BATCH, shuffle=False
        )
    module = Module()
    if config == "reload":
        trainer.fit(module, ckpt_path=resume)
    else:
        trainer.fit(module, loader, val, ckpt_path=resume)
    if refit:
        trainer.fit_loop.max_epochs = refit
        for _ in range(2):
            if config == "reload":
                trainer.fit(module)
            else:
                trainer.fit(module, loader, val)
    if save_after:
        trainer.save_checkpoint(save_after)
    first_lr = FIRST_LR.get(optimizer, 0.1 if optimizer.startswith("sgd") else 0.01)
    if epochs == EPOCHS and trainer.optimizers[0].param_groups[0]["lr"] >= first_lr:
        raise SystemExit(f"{config}: Lightning's scheduler never lowered the lr; the run proves nothing")
    return losses


def fulmen_losses(binary, config, work, name, epochs, extra=(), save_after=None, refit=None):
    path = os.path.join(work, f"{config}-{name}.losses")
    if os.path.exists(path):
        os.remove(path)
    args = [binary, config, os.path.join(work, "init.safetensors"), os.path.join(work, "x.f32"),
            os.path.join(work, "y.i64"), str(SAMPLES), str(BATCH), str(epochs), path, *extra]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("FULMEN_SAVE_AFTER_FIT", None)
    env.pop("FULMEN_REFIT_EPOCHS", None)
    if refit:
        env["FULMEN_REFIT_EPOCHS"] = str(refit)
    if save_after:
        env["FULMEN_SAVE_AFTER_FIT"] = save_after
    run = subprocess.run(args, capture_output=True, text=True, env=env)
    if run.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed ({run.returncode}):\n{run.stderr[-2000:]}")
    with open(path) as f:
        return [float(line) for line in f]


def lightning_lr_find(init, x, y, work):
    """Lightning's Tuner.lr_find on the twin of lightning_parity.c's
    "lr_find" configuration: (lrs, smoothed losses, suggestion)."""
    import lightning.pytorch as pl
    from lightning.pytorch.tuner import Tuner
    from safetensors.torch import load_file

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = build()
            self.model.load_state_dict(load_file(init))
            self.lr = 0.1  # the Tuner looks for it (update_attr)

        def training_step(self, batch, batch_idx):
            xb, yb = batch
            return F.cross_entropy(self.model(xb), yb)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)

    train = torch.utils.data.TensorDataset(x[:SAMPLES], y[:SAMPLES])
    loader = torch.utils.data.DataLoader(train, batch_size=BATCH, shuffle=False)
    trainer = pl.Trainer(max_epochs=EPOCHS, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                         default_root_dir=work,
                         enable_progress_bar=False, enable_model_summary=False)
    found = Tuner(trainer).lr_find(Module(), train_dataloaders=loader, min_lr=1e-5, max_lr=1.0, num_training=30,
                                   early_stop_threshold=4.0, update_attr=False)
    return found.results["lr"], found.results["loss"], found.suggestion()


def lr_find_parity(binary, work, init, x, y):
    """fulmen's range test against Lightning's: the same points and suggestion."""
    path = os.path.join(work, "lr_find.points")
    if os.path.exists(path):
        os.remove(path)
    args = [binary, "lr_find", init, os.path.join(work, "x.f32"), os.path.join(work, "y.i64"), str(SAMPLES), str(BATCH),
            str(EPOCHS), path]
    run = subprocess.run(args, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    if run.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed ({run.returncode}):\n{run.stderr[-2000:]}")
    lrs, losses, suggestion = [], [], None
    with open(path) as f:
        for line in f:
            a, b = line.split()
            if a == "suggestion":
                suggestion = float(b)
            else:
                lrs.append(float(a))
                losses.append(float(b))
    want_lrs, want_losses, want_suggestion = lightning_lr_find(init, x, y, work)
    results = [compare("lr_find: learning rates vs Lightning's", lrs, want_lrs),
               compare("lr_find: smoothed losses vs Lightning's", losses, want_losses)]
    same = suggestion == want_suggestion
    print(f"{'ok  ' if same else 'FAIL'} lr_find: suggestion {suggestion!r}, Lightning's {want_suggestion!r}", flush=True)
    return results + [same]


def save_after_fit_parity(binary, work, init, x, y, reference):
    """trainer.save_checkpoint once fit has returned: the file
    fulmen_trainer_save_checkpoint writes after FIRST epochs holds what
    Lightning's holds, and Lightning's Trainer and fulmen both resume from it
    to the uninterrupted run's losses (`reference`, Lightning's)."""
    config = "steplr"
    ours, theirs = os.path.join(work, "after-fit-fulmen.ckpt"), os.path.join(work, "after-fit-lightning.ckpt")
    dirs = [os.path.join(work, f"after-fit-{d}") for d in ("fulmen", "lightning", "by-lightning", "by-fulmen")]
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)
    first = fulmen_losses(binary, config, work, "after-fit", FIRST, [dirs[0], "-", "lightning"], save_after=ours)
    lightning_losses(config, init, x, y, FIRST, dirs[1], save_after=theirs)
    results = [compare_files(f"{config}: trainer.save_checkpoint after fit, fulmen's vs Lightning's", ours, theirs)]
    by_lightning = first + lightning_losses(config, init, x, y, EPOCHS, dirs[2], ours)
    results.append(compare(f"{config}: Lightning resumed from fulmen_trainer_save_checkpoint's file vs Lightning "
                           "uninterrupted", by_lightning, reference))
    by_fulmen = first + fulmen_losses(binary, config, work, "after-fit-resumed", EPOCHS, [dirs[3], ours, "lightning"])
    results.append(compare(f"{config}: fulmen resumed from fulmen_trainer_save_checkpoint's file vs Lightning "
                           "uninterrupted", by_fulmen, reference))
    return results


def refit_parity(binary, work, init, x, y, config):
    """A second fit of one trainer: after a fit of FIRST epochs,
    trainer.fit_loop.max_epochs = EPOCHS and fit again goes on from the
    first fit's epoch and step with optimizers configure_optimizers makes
    anew, and a third fit at that limit trains nothing. Every step's loss,
    and the checkpoint of the last epoch (its loop progress, the
    ModelCheckpoint's state, the new optimizer's), equal Lightning's."""
    ours, theirs = os.path.join(work, f"{config}-refit-fulmen"), os.path.join(work, f"{config}-refit-lightning")
    for d in (ours, theirs):
        shutil.rmtree(d, ignore_errors=True)
    got = fulmen_losses(binary, config, work, "refit", FIRST, [ours, "-", "lightning"], refit=EPOCHS)
    want = lightning_losses(config, init, x, y, FIRST, theirs, refit=EPOCHS)
    last = f"epoch={EPOCHS - 1}.ckpt"
    return [compare(f"{config}: fit again with max_epochs raised, fulmen vs Lightning", got, want),
            compare_files(f"{config}: {last} of the second fit, fulmen's vs Lightning's", os.path.join(ours, last),
                          os.path.join(theirs, last))]


def lightning_mid_epoch(config, init, x, y, ckpt_dir, every):
    """Lightning's checkpoints every `every` optimizer steps (step=N.ckpt)."""
    import lightning.pytorch as pl

    orig = pl.callbacks.ModelCheckpoint
    try:
        pl.callbacks.ModelCheckpoint = lambda **kw: orig(
            **{**kw, "filename": "{step}", "every_n_train_steps": every, "every_n_epochs": 0}
        )
        lightning_losses(config, init, x, y, FIRST, ckpt_dir)
    finally:
        pl.callbacks.ModelCheckpoint = orig


def comparable(v, path=""):
    """A checkpoint's entries with tensors as (dtype, shape, values),
    checkpoint paths as their file names, folders left out, ints as
    floats."""
    if torch.is_tensor(v):
        return ("tensor", str(v.dtype), tuple(v.shape), [float(t) for t in v.flatten()[:4]])
    if isinstance(v, dict):
        return {
            (os.path.basename(k) if os.sep in str(k) else k): "<folder>" if k == "dirpath" else comparable(x, f"{path}/{k}")
            for k, x in v.items()
        }
    if isinstance(v, (list, tuple)):
        return type(v)(comparable(x, path) for x in v)
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str) and os.sep in v:
        return os.path.basename(v)
    return v


def differences(ours, theirs, path=""):
    """Where `ours` differs from `theirs` (floats within 1e-6 relative)."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        out = [f"{path}/{k}: only in Lightning's" for k in theirs if k not in ours]
        out += [f"{path}/{k}: only in fulmen's" for k in ours if k not in theirs and k != "fulmen"]
        for k in ours:
            if k in theirs:
                out += differences(ours[k], theirs[k], f"{path}/{k}")
        return out
    if isinstance(ours, (list, tuple)) and type(ours) is type(theirs) and len(ours) == len(theirs):
        return [d for i, (a, b) in enumerate(zip(ours, theirs)) for d in differences(a, b, f"{path}[{i}]")]
    if isinstance(ours, float) and isinstance(theirs, float):
        close = ours == theirs or abs(ours - theirs) <= 1e-6 * max(abs(theirs), 1e-12)
        return [] if close else [f"{path}: fulmen {ours!r}, Lightning {theirs!r}"]
    return [] if ours == theirs else [f"{path}: fulmen {ours!r}, Lightning {theirs!r}"]


def compare_files(what, ours, theirs):
    """Prints and returns whether fulmen's Lightning-format checkpoint holds
    what Lightning's own holds."""
    found = differences(comparable(torch.load(ours, weights_only=True)),
                        comparable(torch.load(theirs, weights_only=True)))
    print(f"{'ok  ' if not found else 'FAIL'} {what}: {len(found)} differences", flush=True)
    for d in found[:12]:
        print(f"     {d}", flush=True)
    return not found


def compare(what, got, want):
    """Prints and returns whether `got` equals `want` within TOLERANCE."""
    if len(got) != len(want):
        print(f"FAIL {what}: {len(got)} steps, expected {len(want)}", flush=True)
        return False
    worst = max((abs(g - w) / max(abs(w), 1e-12) for g, w in zip(got, want)), default=0.0)
    ok = worst <= TOLERANCE
    first = next((i for i, (g, w) in enumerate(zip(got, want)) if abs(g - w) / max(abs(w), 1e-12) > TOLERANCE), None)
    detail = "" if ok else f" (first at step {first}: {got[first]!r} vs {want[first]!r})"
    print(f"{'ok  ' if ok else 'FAIL'} {what}: {len(got)} steps, max relative difference {worst:.3g}{detail}",
          flush=True)
    return ok


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--binary", required=True)
    p.add_argument("--work")
    p.add_argument("--configs", help="comma-separated configurations to run (default: all, then the mid-epoch "
                                     "checkpoints and the LR finder)")
    a = p.parse_args()
    work = a.work or tempfile.mkdtemp(prefix="fulmen-lightning-parity.")
    os.makedirs(work, exist_ok=True)
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(11)
    x = torch.randn(SAMPLES + VAL_ROWS, FEATURES, generator=gen)
    y = torch.randint(0, CLASSES, (SAMPLES + VAL_ROWS,), generator=gen)
    x.numpy().tofile(os.path.join(work, "x.f32"))
    y.numpy().tofile(os.path.join(work, "y.i64"))
    torch.manual_seed(5)
    init = os.path.join(work, "init.safetensors")
    save_file(build().state_dict(), init)

    results = []
    chosen = a.configs.split(",") if a.configs else list(CONFIGS)
    for config in chosen:
        reference = lightning_losses(config, init, x, y)
        if len(set(reference)) < 2:
            raise SystemExit(f"Lightning's {config} run did not train")
        whole = fulmen_losses(a.binary, config, work, "whole", EPOCHS)
        results.append(compare(f"{config}: fulmen's fit vs Lightning's", whole, reference))
        ckpts = os.path.join(work, f"{config}-checkpoints")
        shutil.rmtree(ckpts, ignore_errors=True)
        # fulmen's own resume in its safetensors format (the default,
        # Lightning's, is the cross-resume below).
        first = fulmen_losses(a.binary, config, work, "first", FIRST, [ckpts, "-", "safetensors"])
        resume = os.path.join(ckpts, f"epoch={FIRST - 1}.ckpt")
        resumed = first + fulmen_losses(a.binary, config, work, "resumed", EPOCHS, [ckpts, resume, "safetensors"])
        lightning_ckpts = os.path.join(work, f"{config}-lightning-checkpoints")
        shutil.rmtree(lightning_ckpts, ignore_errors=True)
        lightning_resumed = lightning_losses(config, init, x, y, FIRST, lightning_ckpts)
        lightning_resumed += lightning_losses(
            config, init, x, y, EPOCHS, lightning_ckpts, os.path.join(lightning_ckpts, f"epoch={FIRST - 1}.ckpt")
        )
        departs = config in LIGHTNING_RESUME_DEPARTS
        fulmen_resume_reference = reference if departs else lightning_resumed
        if not departs:
            results.append(compare(f"{config}: fulmen resumed after {FIRST} epochs vs Lightning resumed", resumed,
                                   lightning_resumed))
        if CONFIGS[config][1] not in PLATEAU:
            results.append(compare(f"{config}: fulmen resumed vs Lightning uninterrupted", resumed, reference))
        lightning_ckpt = os.path.join(lightning_ckpts, f"epoch={FIRST - 1}.ckpt")
        lightning_first = lightning_resumed[: len(first)]
        from_lightning = lightning_first + fulmen_losses(
            a.binary, config, work, "from-lightning", EPOCHS, [os.path.join(work, f"{config}-after-lightning"), lightning_ckpt]
        )
        results.append(compare(
            f"{config}: fulmen resumed from Lightning's checkpoint vs Lightning "
            f"{'uninterrupted' if departs else 'resumed'}", from_lightning, fulmen_resume_reference))
        written = os.path.join(work, f"{config}-lightning-format")
        shutil.rmtree(written, ignore_errors=True)
        fulmen_first = fulmen_losses(a.binary, config, work, "lightning-format", FIRST, [written, "-", "lightning"])
        ours = os.path.join(written, f"epoch={FIRST - 1}.ckpt")
        results.append(compare_files(f"{config}: fulmen's Lightning-format checkpoint vs Lightning's", ours,
                                     lightning_ckpt))
        by_lightning = fulmen_first + lightning_losses(
            config, init, x, y, EPOCHS, os.path.join(work, f"{config}-lightning-after-fulmen"), ours
        )
        results.append(compare(f"{config}: Lightning resumed from fulmen's checkpoint vs Lightning resumed",
                               by_lightning, lightning_resumed))
        # A checkpoint written after a resume holds the progress the resumed
        # run kept (its counts continue the restored ones), as Lightning's
        # resumed run writes it.
        if not departs:
            again = os.path.join(work, f"{config}-lightning-format-resumed")
            shutil.rmtree(again, ignore_errors=True)
            fulmen_losses(a.binary, config, work, "lightning-format-resumed", EPOCHS, [again, ours, "lightning"])
            last = f"epoch={EPOCHS - 1}.ckpt"
            results.append(compare_files(f"{config}: fulmen's Lightning-format checkpoint after a resume vs Lightning's",
                                         os.path.join(again, last), os.path.join(lightning_ckpts, last)))
    # A checkpoint inside an epoch (every 5 optimizer steps; with
    # accumulation, after a batch that stepped) holds the same loop progress.
    mid_epoch = (("steplr", ("step=5.ckpt", "step=15.ckpt")), ("stepfreq", ("step=5.ckpt", "step=10.ckpt")))
    for config, names in mid_epoch if not a.configs else ():
        theirs, ours = os.path.join(work, f"{config}-mid-lightning"), os.path.join(work, f"{config}-mid-fulmen")
        for d in (theirs, ours):
            shutil.rmtree(d, ignore_errors=True)
        lightning_mid_epoch(config, init, x, y, theirs, 5)
        fulmen_losses(a.binary, config, work, "mid", FIRST, [ours, "-", "lightning", "5"])
        for name in names:
            results.append(compare_files(f"{config}: {name} inside an epoch, fulmen's vs Lightning's",
                                         os.path.join(ours, name), os.path.join(theirs, name)))
    if not a.configs:
        results += save_after_fit_parity(a.binary, work, init, x, y, lightning_losses("steplr", init, x, y))
        # BackboneFinetuning is left out: past its unfreeze epoch a second
        # fit's new optimizers lack the backbone's group, which fulmen
        # refuses and Lightning's callback misses (it sets the main group's lr).
        for config in ("steplr", "stepfreq", "plateau", "reload", "ema", "swa", "skips"):
            results += refit_parity(a.binary, work, init, x, y, config)
        results += lr_find_parity(a.binary, work, init, x, y)
    failed = results.count(False)
    print(f"lightning_parity: {len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

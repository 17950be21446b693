"""fulmen's sharded FSDP checkpoints against PyTorch's and Lightning's own.

    python fsdp_sharded_checkpoint.py --binary build/interop/fsdp_rank [--work DIR]

The model, data, optimizer and job shape are fsdp2_parity.py's (two ranks
on gloo, AdamW, FULL_SHARD with each inner block a unit).

1. fulmen writes, PyTorch reads. fulmen's job (fsdp_rank with
   fsdp_state_dict_type "sharded") trains two epochs; its ModelCheckpoint
   writes a torch.distributed.checkpoint directory at every epoch end and
   keeps the newest. Checked: exactly that directory is left (the older
   one was removed whole), holding `.metadata`, `meta.pt` and one
   `__<rank>_0.distcp` per rank; `dcp.load` (PyTorch's own reader, in a
   plain process) fills a fresh model with weights equal to fulmen's final
   weights bit for bit; `dcp_to_torch_save` turns it into one file whose
   AdamW state has every parameter's full shape and the step count, and
   whose param group names the parameters; `meta.pt` loads with
   `torch.load(weights_only=True)` and holds the epoch and step.
2. Lightning writes, fulmen resumes. Lightning's ModelParallelStrategy
   (FSDP2: `fully_shard` in configure_model, data parallel over the two
   ranks, on the CPU) trains one epoch and saves its sharded checkpoint
   directory; fulmen resumes it on two ranks for the second epoch. Checked
   against Lightning training both epochs without a break: fulmen's
   second-epoch losses within 1e-6 (relative), its final weights within
   1e-5.

Exit code non-zero on any mismatch.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import warnings

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fsdp2_parity as base  # noqa: E402

STEPS_PER_EPOCH = base.STEPS // base.EPOCHS


def run_fulmen(work, binary, name, epochs, env_extra, sharding="FULL_SHARD"):
    """fulmen's two ranks (fsdp_rank with `sharding`); returns each rank's
    final weights and losses."""
    from safetensors.torch import load_file

    port = base.free_port()
    x, y, init = (os.path.join(work, n) for n in ("x.f32", "y.i64", "init.safetensors"))
    procs, outs = [], []
    for rank in range(base.WORLD):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                   WORLD_SIZE=str(base.WORLD), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(base.WORLD),
                   GROUP_RANK="0", OMP_NUM_THREADS="1", **env_extra)
        out = os.path.join(work, f"fulmen-{name}-{rank}.safetensors")
        cmd = [binary, sharding, init, x, y, str(base.SAMPLES), str(epochs), str(base.BATCH), out + ".losses",
               out, "32-true", "0"]
        procs.append(subprocess.Popen(cmd, env=env))
        outs.append(out)
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=3 * base.TIMEOUT_S))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            codes.append("timeout")
    if any(c != 0 for c in codes):
        raise SystemExit(f"fulmen {name}: exit codes {codes}")
    return [load_file(o) for o in outs], [base.read_losses(o + ".losses") for o in outs]


def lightning_job(argv, parallelize, data_parallel_size, tensor_parallel_size, rank_rows):
    """One of Lightning's ModelParallelStrategy jobs (it starts its second
    rank itself), from the command line `argv` (WORK EPOCHS TAG [--save
    PATH] [--resume PATH]): fsdp2_parity's model from WORK's initial
    weights, `parallelize(model, device_mesh)` in configure_model, AdamW,
    trained to EPOCHS epochs (from --resume when given) on every row in
    order, or with `rank_rows` on rank r's rows r, r + 2, ... (as fulmen's
    sampler; Lightning's own distributed sampler always shuffles). Writes
    each rank's losses, the full final weights (rank 0) and, with --save,
    its checkpoint."""
    import lightning as L
    from lightning.pytorch.strategies import ModelParallelStrategy
    from safetensors.torch import load_file, save_file

    p = argparse.ArgumentParser()
    for name in ("work", "epochs", "tag"):
        p.add_argument(name)
    p.add_argument("--save")
    p.add_argument("--resume")
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = base.build()
            self.model.load_state_dict(load_file(os.path.join(a.work, "init.safetensors")))
            self.losses = []

        def configure_model(self):
            parallelize(self.model, self.device_mesh)

        def training_step(self, batch, _):
            xb, yb = batch
            loss = F.cross_entropy(self.model(xb), yb)
            self.losses.append(loss.item())
            return loss

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=base.LR, weight_decay=base.WEIGHT_DECAY)

        def train_dataloader(self):
            x = torch.from_numpy(np.fromfile(os.path.join(a.work, "x.f32"), dtype=np.float32))
            y = torch.from_numpy(np.fromfile(os.path.join(a.work, "y.i64"), dtype=np.int64))
            data = torch.utils.data.TensorDataset(x.reshape(-1, base.FEATURES), y)
            sampler = torch.utils.data.DistributedSampler(data, num_replicas=base.WORLD, rank=self.global_rank,
                                                          shuffle=False) if rank_rows else None
            return torch.utils.data.DataLoader(data, batch_size=base.BATCH, sampler=sampler, shuffle=False)

    strategy = ModelParallelStrategy(data_parallel_size=data_parallel_size,
                                     tensor_parallel_size=tensor_parallel_size)
    trainer = L.Trainer(accelerator="cpu", devices=base.WORLD, strategy=strategy, max_epochs=int(a.epochs),
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, use_distributed_sampler=False)
    module = Module()
    trainer.fit(module, ckpt_path=a.resume)
    rank = trainer.global_rank
    with open(os.path.join(a.work, f"lightning-{a.tag}-{rank}.losses"), "w") as f:
        f.write("".join(f"{v!r}\n" for v in module.losses))
    full = base.full_state(module.model)
    if rank == 0:
        save_file(full, os.path.join(a.work, f"lightning-{a.tag}.safetensors"))
    if a.save:
        trainer.save_checkpoint(a.save)
    trainer.strategy.barrier()


def lightning_main(argv):
    """FSDP2 through ModelParallelStrategy: each inner block a unit, data
    parallel over the two ranks."""
    from torch.distributed.fsdp import fully_shard

    def parallelize(model, device_mesh):
        mesh = device_mesh["data_parallel"]
        for block in (model[2], model[3]):
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)

    lightning_job(argv, parallelize, base.WORLD, 1, rank_rows=True)


def run_lightning(work, epochs, tag, save=None, resume=None, script=__file__):
    """The Lightning job of `script` (this file's, or another's built on
    lightning_job); its final weights and every rank's losses."""
    cmd = [sys.executable, os.path.abspath(script), "lightning", work, str(epochs), tag]
    cmd += ["--save", save] if save else []
    cmd += ["--resume", resume] if resume else []
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    subprocess.run(cmd, env=env, check=True, timeout=6 * base.TIMEOUT_S)
    from safetensors.torch import load_file

    losses = [base.read_losses(os.path.join(work, f"lightning-{tag}-{r}.losses")) for r in range(base.WORLD)]
    return load_file(os.path.join(work, f"lightning-{tag}.safetensors")), losses


def fulmen_writes_torch_reads(work, binary):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    problems = []
    root = os.path.join(work, "fulmen-ck")
    weights, _ = run_fulmen(work, binary, "sharded", base.EPOCHS,
                            {"FSDP_CHECKPOINT_DIR": root, "FSDP_STATE_DICT_TYPE": "sharded"})
    kept = sorted(os.listdir(os.path.join(root, "checkpoints")))
    want = f"epoch={base.EPOCHS - 1}-step={base.STEPS}.ckpt"
    if kept != [want]:
        return [f"checkpoints left: {kept}, expected [{want!r}]"]
    ck = os.path.join(root, "checkpoints", want)
    files = sorted(os.listdir(ck))
    expected = sorted([".metadata", "meta.pt"] + [f"__{r}_0.distcp" for r in range(base.WORLD)])
    if files != expected:
        problems.append(f"{want} holds {files}, expected {expected}")
    model = base.build()
    state = {"model": model.state_dict()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.load(state, checkpoint_id=ck)
    model.load_state_dict(state["model"])
    loaded = {k: v.detach().clone() for k, v in model.state_dict().items()}
    diff = base.max_diff(loaded, weights[0])
    if diff != 0:
        problems.append(f"dcp.load's weights differ from fulmen's final weights by {diff}")
    converted = os.path.join(work, "fulmen-ck.pt")
    dcp_to_torch_save(ck, converted)
    whole = torch.load(converted, weights_only=False)
    opt = whole.get("optimizer_0", {})
    names = list(loaded)
    group = (opt.get("param_groups") or [{}])[0]
    if group.get("params") != names or abs(group.get("lr", 0) - base.LR) > 1e-12:
        problems.append(f"optimizer_0's param group: {group}")
    for n in names:
        s = opt.get("state", {}).get(n, {})
        if s.get("exp_avg") is None or tuple(s["exp_avg"].shape) != tuple(loaded[n].shape):
            problems.append(f"optimizer_0's exp_avg of {n}: {None if s.get('exp_avg') is None else s['exp_avg'].shape}")
        if float(s.get("step", -1)) != base.STEPS:
            problems.append(f"optimizer_0's step of {n}: {s.get('step')}, expected {base.STEPS}")
    meta = torch.load(os.path.join(ck, "meta.pt"), weights_only=True)
    if meta.get("epoch") != base.EPOCHS - 1 or meta.get("global_step") != base.STEPS or "loops" not in meta:
        problems.append(f"meta.pt: epoch {meta.get('epoch')}, global_step {meta.get('global_step')}, "
                        f"keys {sorted(meta)}")
    if "state_dict" in meta or "optimizer_states" in meta:
        problems.append("meta.pt holds the states the shards hold")
    print(f"{'ok  ' if not problems else 'FAIL'} fulmen writes, dcp.load reads: {want} with "
          f"{len(whole.get('model', {}))} weights, AdamW's state of {len(opt.get('state', {}))} parameters", flush=True)
    return problems


def lightning_writes_fulmen_resumes(work, binary):
    problems = []
    ck = os.path.join(work, "lightning-ck")
    run_lightning(work, 1, "first", save=ck)
    ref_w, ref_l = run_lightning(work, base.EPOCHS, "whole")
    weights, losses = run_fulmen(work, binary, "resumed", base.EPOCHS, {"FSDP_RESUME": ck})
    worst = 0.0
    for rank, (got, ref) in enumerate(zip(losses, ref_l)):
        second = ref[STEPS_PER_EPOCH:]
        if len(got) != len(second):
            problems.append(f"rank {rank}: {len(got)} steps after the resume, Lightning's second epoch {len(second)}")
            continue
        for step, (g, r) in enumerate(zip(got, second)):
            rel = abs(g - r) / max(1.0, abs(r))
            worst = max(worst, rel)
            if not rel <= base.LOSS_RTOL:
                problems.append(f"rank {rank} step {STEPS_PER_EPOCH + step}: loss {g!r}, Lightning {r!r}")
    diffs = [base.max_diff({k.removeprefix("model."): v for k, v in ref_w.items()}, w) for w in weights]
    if not max(diffs) <= base.WEIGHT_ATOL:
        problems.append(f"final weights per rank: max |w - w_lightning| = {diffs}")
    print(f"{'ok  ' if not problems else 'FAIL'} Lightning's ModelParallelStrategy writes, fulmen resumes: "
          f"max |loss - lightning| / max(1, |lightning|) = {worst:.3g}, max |w - w_lightning| = {max(diffs):.3g}",
          flush=True)
    return problems[:10]


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "lightning":
        return lightning_main(sys.argv[2:])
    p = argparse.ArgumentParser()
    p.add_argument("--binary", required=True, help="build/interop/fsdp_rank")
    p.add_argument("--work")
    a = p.parse_args()
    work = a.work or tempfile.mkdtemp(prefix="fulmen-fsdp-dcp.")
    os.makedirs(work, exist_ok=True)
    base.write_inputs(work)
    problems = fulmen_writes_torch_reads(work, a.binary)
    problems += lightning_writes_fulmen_resumes(work, a.binary)
    for line in problems:
        print(f"  {line}", flush=True)
    print(f"fsdp_sharded_checkpoint: {'passed' if not problems else 'FAILED'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

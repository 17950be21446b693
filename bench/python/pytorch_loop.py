"""Contender "pytorch": a plain PyTorch training loop (bench/PROTOCOL.md).

Data is read once into tensors; each epoch shuffles with a torch.Generator
seeded by --seed + epoch and steps through batches of 64 by indexing, with
zero_grad / forward / cross-entropy / backward / SGD step and no .item().
With --ranks N (1 or 2) the same loop runs under DistributedDataParallel on
gloo over loopback, N processes started with torch.multiprocessing, each
taking its share from a DistributedSampler (seeded by --seed, set_epoch per
epoch); rank 0 prints. With --accelerator cuda the model lives on cuda:0 and
each batch is copied there from the host, as a DataLoader's would be; an
epoch's clock stops after torch.cuda.synchronize(). With --compile MODE
(contenders "pytorch-compile" and "pytorch-compile-ro") the model is
torch.compile'd with that mode ("default", or "reduce-overhead": CUDA
graphs of its forward and backward), as a PyTorch user speeds a loop up;
the optimizer step stays eager.
"""
import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

NAME = "pytorch"
COMPILED = {"default": "pytorch-compile", "reduce-overhead": "pytorch-compile-ro"}


def train(args, rank=0, world=None):
    import torch
    import torch.nn.functional as F
    x, y = common.load_data(args.data)
    torch.manual_seed(args.seed)
    dev = common.device(args)
    model = common.build_model(args.workload).to(dev)
    name = COMPILED.get(args.compile, NAME)
    step_model = torch.compile(model, mode=args.compile) if args.compile else model
    sampler = None
    if world is not None:
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel
        from torch.utils.data.distributed import DistributedSampler
        dist.init_process_group("gloo", rank=rank, world_size=world)
        model = DistributedDataParallel(model)
        sampler = DistributedSampler(range(len(y)), num_replicas=world, rank=rank,
                                     shuffle=True, seed=args.seed)
    opt = torch.optim.SGD(model.parameters(), lr=common.LR)
    for epoch in range(args.warmup + args.epochs):
        if sampler is not None:
            dist.barrier()
        t0 = time.perf_counter()
        if sampler is not None:
            sampler.set_epoch(epoch)
            order = torch.tensor(list(sampler), dtype=torch.int64)
        else:
            gen = torch.Generator().manual_seed(args.seed + epoch)
            order = torch.randperm(len(y), generator=gen)
        steps = 0
        for i in range(0, len(order), common.BATCH):
            idx = order[i:i + common.BATCH]
            xb, yb = x.index_select(0, idx).to(dev), y.index_select(0, idx).to(dev)
            opt.zero_grad()
            loss = F.cross_entropy(step_model(xb), yb)
            loss.backward()
            opt.step()
            steps += 1
        common.sync(args)
        seconds = time.perf_counter() - t0
        if epoch >= args.warmup and rank == 0:
            common.epoch_line(name, args.workload, epoch, seconds, steps)
    if world is not None:
        dist.destroy_process_group()
    if rank == 0:
        common.done_line(name, args.workload)


def _rank_main(rank, args, world):
    common.setup(args)  # a spawned process starts afresh, with the real stdout
    train(args, rank, world)


def main():
    def compile_mode(p):
        p.add_argument("--compile", choices=sorted(COMPILED), default=None,
                       help="torch.compile the model with this mode")
    args = common.parse_args(__doc__.splitlines()[0], compile_mode)
    if args.compile and args.ranks is not None:
        sys.exit("--compile is not measured under DDP")
    common.setup(args, redirect=args.ranks is None)
    if args.ranks is None:
        train(args)
        return
    import torch.multiprocessing as mp
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    mp.spawn(_rank_main, args=(args, args.ranks), nprocs=args.ranks, join=True)


if __name__ == "__main__":
    main()

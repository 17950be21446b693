"""Makes the torch.export test fixtures of fulmen's nn module.

Writes into tests/fixtures/:
  exported_bn.pt2       an MLP with BatchNorm (4 -> 8 -> 3): "training_step"
                        (train mode, decomposed: BatchNorm returns its new
                        statistics) taking a batch (x, y) and returning
                        {"loss": cross entropy, "logits": ...}, and
                        "forward" (eval mode) taking x; a dynamic batch size
  exported_tied.pt2     torch.export.save of one program: an embedding tied
                        to its output head, positions from aten.arange
  exported_nograd.pt2    one program with a torch.no_grad() block
                        (wrap_with_set_grad_enabled): returns (loss, z)
  exported_blocks.pt2   torch.export.save of one program: Linear(6, 8), three
                        residual Blocks (LayerNorm, Linear, tanh) in a
                        ModuleList, Linear(8, 1) plus a term the root
                        computes from a view of the first Block's weight; a
                        dynamic batch size (the FSDP tests shard it with
                        each Block a unit)
  exported_reference.json  inputs and PyTorch's results: state_dict names,
                        the loss, logits and new running statistics of one
                        training_step, the forward of the eval program, the
                        tied model's output

Run with torch 2.13:  python scripts/make_exported_fixture.py [out_dir]
"""
import json
import os
import sys

import torch
from torch import nn
from torch.export.pt2_archive._package import package_pt2


class BnMlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(4, 8)
        self.bn = nn.BatchNorm1d(8)
        self.l2 = nn.Linear(8, 3)

    def forward(self, x):
        return self.l2(torch.relu(self.bn(self.l1(x))))


class TrainingStep(nn.Module):
    """training_step(batch) of BnMlp; its parameters keep BnMlp's names."""

    def __init__(self, model):
        super().__init__()
        self.l1, self.bn, self.l2 = model.l1, model.bn, model.l2
        self.model = [model]

    def forward(self, batch):
        x, y = batch
        logits = self.model[0](x)
        return {"loss": nn.functional.cross_entropy(logits, y), "logits": logits}


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.head = nn.Linear(4, 10, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, tokens):
        pos = torch.arange(tokens.shape[1], device=tokens.device)
        return self.head(self.emb(tokens) + pos[None, :, None].float() * 0.1)


class NoGrad(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(4, 4)

    def forward(self, x):
        with torch.no_grad():
            z = self.l(x) * 2
        return (self.l(x) * z).sum(), z


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(8)
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return x + torch.tanh(self.fc(self.ln(x)))


class Blocks(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(6, 8)
        self.blocks = nn.ModuleList([Block() for _ in range(3)])
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        h = self.inp(x)
        for b in self.blocks:
            h = b(h)
        # The root reads a view of the first Block's weight after every
        # Block ran: FSDP must keep that unit gathered until then.
        return self.head(h) + 0.1 * (h @ self.blocks[0].fc.weight.t()).sum(-1, keepdim=True)


def blocks(out):
    torch.manual_seed(3)
    model = Blocks()
    x = torch.randn(4, 6)
    ep = torch.export.export(model, (x,), dynamic_shapes=({0: torch.export.Dim("batch", min=2)},))
    torch.export.save(ep, os.path.join(out, "exported_blocks.pt2"))


def rows(t):
    return t.detach().double().reshape(-1).tolist()


def main(out):
    torch.manual_seed(0)
    model = BnMlp()
    x = torch.randn(6, 4)
    y = torch.randint(0, 3, (6,))
    batch = torch.export.Dim("batch", min=2)
    step = TrainingStep(model).train()
    ep_train = torch.export.export(step, ((x, y),), dynamic_shapes=(({0: batch}, {0: batch}),))
    ep_train = ep_train.run_decompositions({})
    model.eval()
    ep_eval = torch.export.export(model, (x,), dynamic_shapes=({0: batch},))
    model.train()
    # Saved before anything runs: a program's weights are the module's own
    # tensors, so running the module first would store updated statistics.
    package_pt2(os.path.join(out, "exported_bn.pt2"), exported_programs={"training_step": ep_train, "forward": ep_eval})
    names = list(model.state_dict().keys())
    with torch.no_grad():
        eval_out = model.eval()(x[:3])
    model.train()
    result = step((x, y))

    torch.manual_seed(1)
    tied = Tied()
    tokens = torch.randint(0, 10, (2, 5))
    ep_tied = torch.export.export(tied, (tokens,), dynamic_shapes=({0: torch.export.Dim("b", min=2)},))
    torch.export.save(ep_tied, os.path.join(out, "exported_tied.pt2"))
    with torch.no_grad():
        tied_out = tied(tokens)

    blocks(out)

    torch.manual_seed(2)
    nograd = NoGrad()
    xn = torch.randn(3, 4)
    torch.export.save(torch.export.export(nograd, (xn,)), os.path.join(out, "exported_nograd.pt2"))
    loss, z = nograd(xn)
    loss.backward()

    reference = {
        "nograd_x": rows(xn),
        "nograd_loss": loss.item(),
        "nograd_weight_grad": rows(nograd.l.weight.grad),
        "state_names": names,
        "x": rows(x),
        "y": y.tolist(),
        "loss": result["loss"].item(),
        "logits": rows(result["logits"]),
        "running_mean": rows(model.bn.running_mean),
        "running_var": rows(model.bn.running_var),
        "eval_x_rows": 3,
        "eval_out": rows(eval_out),
        "tokens": tokens.reshape(-1).tolist(),
        "tied_out": rows(tied_out),
    }
    with open(os.path.join(out, "exported_reference.json"), "w") as f:
        json.dump(reference, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures"))

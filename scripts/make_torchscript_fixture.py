"""Makes the TorchScript test fixtures of fulmen's nn module.

Writes, next to each other in tests/fixtures/:
  mlp_scripted.pt           torch.jit.script of a 4 -> 8 -> 3 MLP with ReLU
  mlp_scripted.safetensors  its state_dict ("l1.weight", "l1.bias", ...)
  mlp_seq.safetensors       the same weights named as nn.Sequential ("0.weight", "2.weight", ...)
  mlp_reference.txt         a reference input (2 x 4) and the output (2 x 3), one row a line
  tabular_scripted.pt       examples/python/export_tabular.py's model (embedding + BatchNorm +
                            dropout, two inputs, scripted steps): 5 categories, 3 numeric, 2 classes
  values_scripted.pt        a module whose methods take and return every kind of value
  blobs_mlp_scripted.pt     nn.Sequential(Linear(2, 8), Tanh(), Linear(8, 2)) scripted: the C
                            tests' fixture_mlp(8, 0) as TorchScript

Run with torch 2.13:  python scripts/make_torchscript_fixture.py [out_dir]
"""
import os
import sys

from typing import Dict, List, Optional, Tuple

import torch
from safetensors.torch import save_file

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "python"))
import export_tabular  # noqa: E402


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(4, 8)
        self.act = torch.nn.ReLU()
        self.l2 = torch.nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l2(self.act(self.l1(x)))


class Values(torch.nn.Module):
    """Methods over every kind of value a host passes and gets back."""

    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.tensor([2.0]))
        self.register_buffer("calls", torch.zeros((), dtype=torch.int64))

    def forward(self, x: torch.Tensor, y: Optional[torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor]:
        self.calls += 1
        if y is None:
            return x * self.scale, x
        return x * self.scale, x + y

    @torch.jit.export
    def mix(
        self, xs: List[torch.Tensor], weights: Dict[str, float], flip: bool, k: int, label: str
    ) -> Dict[str, List[torch.Tensor]]:
        out: List[torch.Tensor] = []
        for x in xs:
            y = x * weights["w"] + k
            out.append(-y if flip else y)
        return {label: out}

    @torch.jit.export
    def describe(self, n: int, f: float, ints: List[int]) -> Tuple[int, float, bool, str, Optional[int], List[int]]:
        return n * 2, f / 2.0, n > 0, "n=" + str(n), None, ints + [n]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    default = os.path.join(here, "..", "tests", "fixtures")
    out = sys.argv[1] if len(sys.argv) > 1 else default
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(1234)
    model = Mlp()
    scripted = torch.jit.script(model)
    scripted.save(os.path.join(out, "mlp_scripted.pt"))
    sd = {k: v.contiguous() for k, v in model.state_dict().items()}
    save_file(sd, os.path.join(out, "mlp_scripted.safetensors"), metadata={"source": "pytorch"})
    seq = {k.replace("l1.", "0.").replace("l2.", "2."): v for k, v in sd.items()}
    save_file(seq, os.path.join(out, "mlp_seq.safetensors"))
    x = torch.linspace(-1.0, 1.0, 8).reshape(2, 4)
    with torch.no_grad():
        y = model(x)
    with open(os.path.join(out, "mlp_reference.txt"), "w") as f:
        f.write("# input 2x4, then output 2x3; float32 values printed with repr\n")
        for row in x.tolist() + y.tolist():
            f.write(" ".join(repr(v) for v in row) + "\n")
    export_tabular.export(os.path.join(out, "tabular_scripted.pt"), categories=5, numeric=3, classes=2, seed=7)
    torch.jit.script(Values()).save(os.path.join(out, "values_scripted.pt"))
    blobs = torch.nn.Sequential(torch.nn.Linear(2, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    torch.jit.script(blobs).save(os.path.join(out, "blobs_mlp_scripted.pt"))


if __name__ == "__main__":
    main()

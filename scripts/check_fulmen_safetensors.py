"""By-hand check that files written by fulmen are read by Python's
safetensors and match PyTorch: run the ignored Rust test
`write_files_for_python_check` first, then this script (torch 2.13) on the
same folder:

    FULMEN_PY_CHECK_OUT=/some/dir cargo test --release -- --ignored write_files_for_python_check
    python scripts/check_fulmen_safetensors.py /some/dir
"""
import os
import sys

import torch
from safetensors import safe_open
from safetensors.torch import load_file

if len(sys.argv) != 2:
    sys.exit("usage: check_fulmen_safetensors.py DIR (the FULMEN_PY_CHECK_OUT of the Rust test)")
d = sys.argv[1]

# 1. Default init under the same seed equals PyTorch's, bit for bit.
init = load_file(os.path.join(d, "init_seed0.safetensors"))
torch.manual_seed(0)
ref = {}
for tag, m in [("linear", torch.nn.Linear(4, 3)), ("conv", torch.nn.Conv2d(3, 4, 3, padding=1)),
               ("embedding", torch.nn.Embedding(5, 2))]:
    for n, p in m.named_parameters():
        ref[f"{tag}.{n}"] = p.detach()
assert set(ref) == set(init), (sorted(ref), sorted(init))
for k in ref:
    print(k, "equal:", torch.equal(ref[k], init[k]))

# 2. The nested model's state_dict loads strictly into the same torch model
#    and gives the same eval output.
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.BatchNorm2d(4),
                                           torch.nn.ReLU(), torch.nn.Flatten(1, -1))
        self.head = torch.nn.Linear(100, 2)

    def forward(self, x):
        return self.head(self.encoder(x))

path = os.path.join(d, "nested.safetensors")
with safe_open(path, "pt") as f:
    print("metadata:", f.metadata())
sd = load_file(path)
net = Net()
print(net.load_state_dict(sd, strict=True))
print("key order of torch:", list(net.state_dict().keys()))
net.eval()
io = load_file(os.path.join(d, "nested_io.safetensors"))
with torch.no_grad():
    y = net(io["x"])
print("max |y_torch - y_fulmen| =", (y - io["y"]).abs().max().item())
assert torch.allclose(y, io["y"], atol=1e-5)
print("OK")

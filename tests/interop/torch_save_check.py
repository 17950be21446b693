"""Weights between fulmen and PyTorch / Lightning through torch.save files,
against the real thing (tests/interop/torch_save_interop.c is the C side):

- a `torch.save(model.state_dict())` file loads into fulmen, which then
  predicts what PyTorch predicts, also saved in a dict beside bytes and a
  set;
- a checkpoint from Lightning's own Trainer (its `model.` attribute prefix
  included) loads into fulmen, which predicts what the LightningModule does;
- fulmen's `.pt` file reads back with `torch.load(weights_only=True)` equal
  to the safetensors file it writes beside it;
- a pickle that would call os.system is refused with FULMEN_CODE_FORMAT and
  the call never happens.

    python tests/interop/torch_save_check.py --binary build/interop/torch_save_interop --work DIR
"""
import argparse
import os
import subprocess
import sys
import warnings

import torch
from safetensors.torch import load_file


def model():
    return torch.nn.Sequential(torch.nn.Linear(2, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))


def fulmen_predict(binary, weights, x, work):
    xin, yout = os.path.join(work, "x.f32"), os.path.join(work, "y.f32")
    x.numpy().astype("float32").tofile(xin)
    subprocess.run([binary, "load", weights, xin, str(len(x)), yout], check=True)
    return torch.from_numpy(__import__("numpy").fromfile(yout, dtype="float32")).reshape(len(x), 2)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--binary", required=True)
    p.add_argument("--work", required=True)
    a = p.parse_args()
    os.makedirs(a.work, exist_ok=True)
    torch.manual_seed(3)
    x = torch.randn(16, 2)

    # 1. A torch.save'd state_dict.
    m = model()
    path = os.path.join(a.work, "state_dict.pt")
    torch.save(m.state_dict(), path)
    with torch.no_grad():
        want = m(x)
    got = fulmen_predict(a.binary, path, x, a.work)
    diff = (got - want).abs().max().item()
    print(f"torch.save state_dict -> fulmen: max |difference| = {diff:.3g}")
    assert diff < 1e-6, diff

    # 1b. The same beside bytes and sets, as torch.save writes them
    # (_codecs.encode and set, which torch.load(weights_only=True) accepts).
    path = os.path.join(a.work, "with_extras.pt")
    torch.save({"model_state_dict": m.state_dict(), "blob": b"\x00\xffab", "tags": {"mlp", "demo"}}, path)
    torch.load(path, weights_only=True)
    got = fulmen_predict(a.binary, path, x, a.work)
    diff = (got - want).abs().max().item()
    print(f"torch.save with bytes and a set -> fulmen: max |difference| = {diff:.3g}")
    assert diff < 1e-6, diff

    # 2. A checkpoint of Lightning's own Trainer.
    import lightning as L
    warnings.filterwarnings("ignore")

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = model()

        def training_step(self, batch, _):
            xb, yb = batch
            return torch.nn.functional.cross_entropy(self.model(xb), yb)

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=0.01)

    data = torch.utils.data.TensorDataset(torch.randn(64, 2), torch.randint(0, 2, (64,)))
    lm = Module()
    trainer = L.Trainer(max_epochs=2, default_root_dir=a.work, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, accelerator="cpu")
    trainer.fit(lm, torch.utils.data.DataLoader(data, batch_size=16))
    ckpt = os.path.join(a.work, "lightning.ckpt")
    trainer.save_checkpoint(ckpt)
    with torch.no_grad():
        want = lm.model(x)
    got = fulmen_predict(a.binary, ckpt, x, a.work)
    diff = (got - want).abs().max().item()
    print(f"Lightning .ckpt -> fulmen: max |difference| = {diff:.3g}")
    assert diff < 1e-6, diff

    # 3. fulmen's .pt through torch.load(weights_only=True).
    prefix = os.path.join(a.work, "fulmen_weights")
    subprocess.run([a.binary, "save", prefix], check=True)
    loaded = torch.load(prefix + ".pt", weights_only=True)
    reference = load_file(prefix + ".safetensors")
    # In the model's order (safetensors files list their tensors sorted).
    assert list(loaded) == list(model().state_dict()), list(loaded)
    assert sorted(loaded) == sorted(reference), (list(loaded), list(reference))
    for k in reference:
        assert torch.equal(loaded[k], reference[k]), k
    m = model()
    m.load_state_dict(loaded)
    print(f"fulmen .pt -> torch.load(weights_only=True): {len(loaded)} tensors equal, load_state_dict ok")

    # 4. A pickle that calls os.system is refused, and nothing runs.
    marker = os.path.join(a.work, "pwned")

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    evil = os.path.join(a.work, "evil.pt")
    torch.save({"0.weight": Evil()}, evil)
    subprocess.run([a.binary, "refuse", evil], check=True)
    assert not os.path.exists(marker), "the pickle's call ran"
    print("a pickle calling os.system: refused (FULMEN_CODE_FORMAT), nothing ran")
    return 0


if __name__ == "__main__":
    sys.exit(main())

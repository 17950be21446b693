"""fulmen's multi-head attention and transformer layers against PyTorch's, bit for bit.

    python attention_parity.py --binary build/interop/attention_parity

The binary (tests/interop/attention_parity.c) builds nn.MultiheadAttention,
nn.TransformerEncoderLayer and nn.TransformerDecoderLayer from seeds and runs
them on inputs exact in float32; here PyTorch builds the same layers from
the same seeds (training mode, so no fast path) and runs them on the same
inputs. Every output equals PyTorch's bit for bit, with 1 and 2 threads:
the attention weights (need_weights) and the output through baddbmm / bmm
with float and bool masks and key padding, cross attention, key and value
one tensor (one packed projection), self-attention with weights and
without (scaled_dot_product_attention), sequence-first and unbatched
inputs, the encoder layer and the decoder layer (its attention to the
memory with a key padding mask).
"""
import argparse
import subprocess
import sys

import torch

CHECKS = []


def check(cond, what):
    if not cond:
        print("FAIL:", what)
        sys.exit(1)
    CHECKS.append(what)


def pattern(shape, mul, mod, scale, offset):
    n = 1
    for s in shape:
        n *= s
    return torch.tensor([float((i * mul) % mod) * scale + offset for i in range(n)],
                        dtype=torch.float32).reshape(shape)


def bool_pattern(shape, mul, mod, cut):
    n = 1
    for s in shape:
        n *= s
    return torch.tensor([(i * mul) % mod < cut for i in range(n)]).reshape(shape)


def expected():
    """PyTorch's outputs for the binary's cases."""
    q, k = pattern((2, 5, 32), 7, 13, 0.125, -0.75), pattern((2, 6, 32), 5, 11, 0.125, -0.5)
    v, fmask = pattern((2, 6, 32), 3, 7, 0.25, -0.5), pattern((5, 6), 5, 11, 0.25, -1.0)
    kpm = torch.zeros(2, 6, dtype=torch.bool)
    kpm[1, 4:] = True
    bmask = bool_pattern((5, 6), 7, 6, 2)
    q1, k1 = pattern((5, 32), 7, 13, 0.125, -0.75), pattern((6, 32), 5, 11, 0.125, -0.5)
    v1, p1 = pattern((6, 32), 3, 7, 0.25, -0.5), bool_pattern((6,), 1, 6, 1)
    out = {}
    with torch.no_grad():
        torch.manual_seed(3)
        mha = torch.nn.MultiheadAttention(32, 4, batch_first=True)
        out["cross"] = mha(q, k, v)
        out["float_masks"] = mha(q, k, v, key_padding_mask=kpm.float().masked_fill(kpm, float("-inf")),
                                 attn_mask=fmask)
        out["bool_masks"] = mha(q, k, v, key_padding_mask=kpm, attn_mask=bmask)
        out["key_is_value"] = mha(q, k, k)
        out["self_weights"] = mha(q, q, q)
        out["self"] = (mha(q, q, q, need_weights=False)[0],)
        torch.manual_seed(4)
        seq = torch.nn.MultiheadAttention(32, 4)
        qs, ks, vs = pattern((5, 2, 32), 7, 13, 0.125, -0.75), pattern((6, 2, 32), 5, 11, 0.125, -0.5), \
            pattern((6, 2, 32), 3, 7, 0.25, -0.5)
        out["seq_first"] = seq(qs, ks, vs, key_padding_mask=kpm.float().masked_fill(kpm, float("-inf")),
                               attn_mask=fmask)
        out["unbatched"] = mha(q1, k1, v1, key_padding_mask=p1.float().masked_fill(p1, float("-inf")),
                               attn_mask=fmask)
        torch.manual_seed(5)
        enc = torch.nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, dropout=0.0, batch_first=True)
        out["encoder"] = (enc(q),)
        torch.manual_seed(6)
        dec = torch.nn.TransformerDecoderLayer(32, 4, dim_feedforward=64, dropout=0.0, batch_first=True)
        out["decoder"] = (dec(q, k, memory_key_padding_mask=kpm),)
    return {f"{case}.{i}": t for case, ts in out.items() for i, t in enumerate(ts)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    args = ap.parse_args()
    for threads in (1, 2):
        torch.set_num_threads(threads)
        want = expected()
        res = subprocess.run([args.binary, str(threads)], capture_output=True, text=True, timeout=120)
        if res.returncode != 0:
            print(res.stdout, res.stderr)
            sys.exit(1)
        got = {}
        for line in res.stdout.splitlines():
            name, *values = line.split()
            got[name] = torch.tensor([float.fromhex(x) for x in values], dtype=torch.float32)
        check(sorted(got) == sorted(want), f"the same outputs ({sorted(got)})")
        for name, t in want.items():
            g = got[name].reshape(t.shape)
            diff = (g - t).abs().max().item()
            check(torch.equal(g, t), f"{name} with {threads} thread(s) equals PyTorch's bit for bit (max diff {diff:.3e})")
    print(f"attention_parity: {len(CHECKS)} checks passed")


if __name__ == "__main__":
    main()

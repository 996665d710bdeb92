#!/usr/bin/env python3
"""tapegrad's GPT (tg_gpt, examples/gpt.c) against the same model in PyTorch.

For each arch (llama, gpt2) tests/test_gpt_torch.c, run with
TG_GPT_TORCH_DIR=DIR, writes a tiny model's float64 weights and 20 batches
(DIR/ARCH.init.safetensors) and what tapegrad computes in float64 and
float32 (DIR/ARCH.tapegrad.safetensors): the logits and every parameter's
gradient on batch 0, and the losses of 20 AdamW steps with gradient
clipping. This script builds the same model in PyTorch from those weights
(float64, and float32 from the same weights rounded), and compares:

  - loss, logits and every parameter gradient of batch 0: relative error
    max|a - b| / max|b| per tensor (f64: <= 1e-10, f32: <= 1e-4);
  - the loss trajectory of the 20 steps, each loss relative to PyTorch's.

It prints the maximum errors and writes tests/fixtures/gpt_torch.txt
(fixture_file.py's format): PyTorch's float64 loss, first-position logits,
and per parameter the gradient's L2 norm and weighted sum; PyTorch's
trajectories in both dtypes; and the maximum errors measured here. The C
test then checks tapegrad against those in CI, without PyTorch.

The model, as tapegrad defines it (include/tapegrad/layers.h):
  llama: RMSNorm (eps 1e-6) pre-norm, RoPE (Meta's LLaMA convention,
         consecutive pairs, base 10000), SwiGLU, no biases, lm_head
  gpt2:  LayerNorm (eps 1e-5), learned positions, GELU-tanh, biases, the
         token table tied as the output projection

Needs PyTorch and NumPy (Debian: apt-get install python3-torch python3-numpy).
Usage (after building build/tests/test_gpt_torch):
  /usr/bin/python3 scripts/gpt_torch.py [--test-bin build/tests/test_gpt_torch] [--keep DIR] [--no-write]
"""
import argparse
import math
import os
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "fixtures"))
from interop_torch import read_safetensors  # noqa: E402
from fixture_file import Fixture, weight_array  # noqa: E402

L, H, C, T, B, V, STEPS = 2, 2, 16, 8, 2, 128, 20
TOL = {"f64": 1e-10, "f32": 1e-4}
DT = {"f64": torch.float64, "f32": torch.float32}


# ---- the model ----------------------------------------------------------------------
def rope(x, base=10000.0):
    """Meta's apply_rotary_emb on x (B, H, T, D): pairs (x_2i, x_2i+1) as
    complex numbers times e^(j p base^(-2i/D)), angles in float64 (as
    tapegrad computes them)."""
    D = x.shape[-1]
    freqs = 1.0 / (base ** (torch.arange(0, D, 2, dtype=torch.float64)[: D // 2] / D))
    ang = torch.outer(torch.arange(x.shape[-2], dtype=torch.float64), freqs)
    cos, sin = torch.cos(ang).to(x.dtype), torch.sin(ang).to(x.dtype)
    xr = x.reshape(*x.shape[:-1], D // 2, 2)
    a, b = xr[..., 0], xr[..., 1]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)


def norm(P, x, name, arch):
    if arch == "gpt2":
        return F.layer_norm(x, x.shape[-1:], P[name + ".gamma"], P[name + ".beta"], eps=1e-5)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * P[name + ".gamma"]


def param_shapes(arch, n_layer, n_embd, context, vocab):
    """The parameters' names and shapes, in tapegrad's order (tg_module_params)."""
    c = n_embd
    hidden = 4 * c if arch == "gpt2" else ((8 * c + 2) // 3 + 31) // 32 * 32  # tg_mlp_hidden
    bias = arch == "gpt2"
    shapes = [("wte.weight", (vocab, c))]
    if arch == "gpt2":
        shapes.append(("wpe.weight", (context, c)))
    for l in range(n_layer):
        p = "h.%d." % l
        ln = [(p + "%s.gamma", (c,))] + ([(p + "%s.beta", (c,))] if bias else [])
        shapes += [(n % "ln_1", s) for n, s in ln]
        shapes += [(p + "attn.qkv.weight", (3 * c, c))] + ([(p + "attn.qkv.bias", (3 * c,))] if bias else [])
        shapes += [(p + "attn.proj.weight", (c, c))] + ([(p + "attn.proj.bias", (c,))] if bias else [])
        shapes += [(n % "ln_2", s) for n, s in ln]
        shapes += [(p + "mlp.fc.weight", (hidden, c))] + ([(p + "mlp.fc.bias", (hidden,))] if bias else [])
        if arch == "llama":
            shapes.append((p + "mlp.gate.weight", (hidden, c)))
        shapes += [(p + "mlp.proj.weight", (c, hidden))] + ([(p + "mlp.proj.bias", (c,))] if bias else [])
    shapes += [("ln_f.gamma", (c,))] + ([("ln_f.beta", (c,))] if bias else [])
    if arch == "llama":
        shapes.append(("lm_head.weight", (vocab, c)))
    return shapes


def forward(P, idx, arch, n_layer=L, n_head=H):
    """logits (B, T, V) for token ids idx (B, T); P: the parameters by name."""
    Bn, Tn = idx.shape
    C = P["wte.weight"].shape[1]
    x = P["wte.weight"][idx]
    if arch == "gpt2":
        x = x + P["wpe.weight"][:Tn]
    D = C // n_head
    mask = torch.triu(torch.ones(Tn, Tn, dtype=torch.bool), 1)
    for l in range(n_layer):
        p = "h.%d." % l
        h = norm(P, x, p + "ln_1", arch)
        qkv = F.linear(h, P[p + "attn.qkv.weight"], P.get(p + "attn.qkv.bias"))
        q, k, v = (t.reshape(Bn, Tn, n_head, D).transpose(1, 2) for t in qkv.split(C, dim=2))
        if arch == "llama":
            q, k = rope(q), rope(k)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D))
        att = torch.softmax(att.masked_fill(mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(Bn, Tn, C)
        x = x + F.linear(y, P[p + "attn.proj.weight"], P.get(p + "attn.proj.bias"))
        h = norm(P, x, p + "ln_2", arch)
        if arch == "gpt2":
            m = F.gelu(F.linear(h, P[p + "mlp.fc.weight"], P[p + "mlp.fc.bias"]), approximate="tanh")
        else:
            m = F.silu(F.linear(h, P[p + "mlp.fc.weight"])) * F.linear(h, P[p + "mlp.gate.weight"])
        x = x + F.linear(m, P[p + "mlp.proj.weight"], P.get(p + "mlp.proj.bias"))
    x = norm(P, x, "ln_f", arch)
    return F.linear(x, P["wte.weight"] if arch == "gpt2" else P["lm_head.weight"])


def loss_of(P, idx, tgt, arch, n_layer=L, n_head=H):
    logits = forward(P, idx, arch, n_layer, n_head)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1)), logits


def adamw(P, lr=3e-3, betas=(0.9, 0.99), weight_decay=0.1):
    """AdamW with tapegrad's weight-decay flags: the weights decay, the
    gains and biases do not."""
    decay = [t for n, t in P.items() if n.endswith(".weight")]
    rest = [t for n, t in P.items() if not n.endswith(".weight")]
    return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}],
                             lr=lr, betas=betas, eps=1e-8)


# ---- the comparison -------------------------------------------------------------------
def relerr(a, b):
    a, b = a.double(), b.double()
    scale = b.abs().max().item()
    return (a - b).abs().max().item() / (scale if scale > 0 else 1.0)


def compare(arch, init, tg):
    batches = init.pop("batches").long()  # (STEPS, 2, B, T)
    names = list(init.keys())
    out = {}
    for dn, dt in DT.items():
        P = {n: init[n].to(dt).clone().requires_grad_(True) for n in names}
        loss, logits = loss_of(P, batches[0, 0], batches[0, 1], arch)
        loss.backward()
        errs = {"logits": relerr(tg[dn + ".logits"], logits.detach())}
        # the loss itself is the trajectory's first entry (same weights, batch 0)
        errs["loss"] = abs(tg[dn + ".traj"][0].item() - loss.item()) / abs(loss.item())
        gerr, worst = 0.0, ""
        for n in names:
            e = relerr(tg[dn + ".grad." + n], P[n].grad)
            if e > gerr:
                gerr, worst = e, n
        errs["grads"] = gerr
        # 20 AdamW steps, weight decay on the weights only (tapegrad's flags)
        P2 = {n: init[n].to(dt).clone().requires_grad_(True) for n in names}
        opt = adamw(P2)
        traj = []
        for s in range(STEPS):
            opt.zero_grad()
            l, _ = loss_of(P2, batches[s, 0], batches[s, 1], arch)
            l.backward()
            torch.nn.utils.clip_grad_norm_(list(P2.values()), 1.0)
            opt.step()
            traj.append(l.item())
        traj = torch.tensor(traj, dtype=torch.float64)
        errs["traj"] = ((tg[dn + ".traj"] - traj).abs() / traj.abs()).max().item()
        print("%-5s %s: max relative error  loss %.2e  logits %.2e  grads %.2e (worst %s)  20-step losses %.2e"
              "  (tolerance %g)" % (arch, dn, errs["loss"], errs["logits"], errs["grads"], worst, errs["traj"],
                                    TOL[dn]))
        print("        losses: tapegrad %.6f -> %.6f, PyTorch %.6f -> %.6f"
              % (tg[dn + ".traj"][0], tg[dn + ".traj"][-1], traj[0], traj[-1]))
        out[dn] = (P, loss, logits, traj, errs)
    return names, out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--test-bin", default=os.path.join(ROOT, "build", "tests", "test_gpt_torch"))
    ap.add_argument("--keep", help="write the files here and keep them")
    ap.add_argument("--no-write", action="store_true", help="compare only; leave the fixture as it is")
    args = ap.parse_args()
    d = args.keep or tempfile.mkdtemp(prefix="tg-gpt-torch-")
    os.makedirs(d, exist_ok=True)
    env = dict(os.environ, TG_GPT_TORCH_DIR=d, CK_FORK="no")
    subprocess.run([args.test_bin], env=env, check=True, stdout=subprocess.DEVNULL)
    torch.set_num_threads(1)
    fx = Fixture()
    w = weight_array(1024)
    fx.put("w", w)
    ok = True
    for arch in ("llama", "gpt2"):
        init, _ = read_safetensors(os.path.join(d, arch + ".init.safetensors"))
        assert [(n, tuple(t.shape)) for n, t in init.items() if n != "batches"] == param_shapes(arch, L, C, T, V)
        tg, _ = read_safetensors(os.path.join(d, arch + ".tapegrad.safetensors"))
        names, out = compare(arch, init, tg)
        P, loss, logits, _, _ = out["f64"]
        fx.put(arch + ".loss", loss.detach().reshape(1))
        fx.put(arch + ".logits0", logits.detach()[0, 0])
        for n in names:
            g = P[n].grad.reshape(-1)
            wc = w.repeat(g.numel() // w.numel() + 1)[: g.numel()]
            fx.put(arch + ".grad." + n, torch.stack((g.norm(), (g * wc).sum())))
        for dn in DT:
            _, _, _, traj, errs = out[dn]
            fx.put("%s.%s.traj" % (arch, dn), traj)
            e = [errs[k] for k in ("loss", "logits", "grads", "traj")]
            fx.put("%s.%s.maxerr" % (arch, dn), torch.tensor(e, dtype=torch.float64))
            ok = ok and max(e) <= TOL[dn]
    if not args.no_write:
        path = fx.write(os.path.join(ROOT, "tests", "fixtures", "x"), "gpt_torch.txt",
                        "written by scripts/gpt_torch.py (PyTorch %s); maxerr: loss, logits, grads, 20-step "
                        "losses" % torch.__version__)
        print("wrote", os.path.relpath(path, ROOT))
    print("agreement:", "ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

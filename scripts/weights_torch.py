#!/usr/bin/env python3
"""GPT-2 and LLaMA weights from PyTorch into tapegrad and back (tg_gpt_import,
tg_gpt_export; the layouts in docs/weights.md).

For each of four PyTorch models, written here with the exact parameter names
and shapes of their originals:

  gpt2_hf     Hugging Face's GPT2LMHeadModel (Conv1D weights (in, out), the
              attn.bias mask buffers, lm_head tied), saved as the hub's
              model.safetensors is: GPT2Model's names, no "transformer."
              prefix, no lm_head;
  nanogpt     nanoGPT's GPT (nn.Linear (out, in), lm_head tied), its
              ckpt.pt (a torch.compile'd model's state_dict under "model")
              through scripts/convert_weights.py;
  llama_hf    Hugging Face's LlamaForCausalLM (rotate-half RoPE, the
              rotary_emb.inv_freq buffers older versions save), its
              state_dict;
  llama_meta  Meta's LLaMA Transformer (complex RoPE on consecutive pairs;
              LLaMA-2's norm_eps 1e-5, tapegrad's config.norm_eps),
              its consolidated.00.pth (with the rope.freqs LLaMA-1's carry)
              through scripts/convert_weights.py;

the script fills the weights with the formula tests/test_gpt_weights.c uses
(so the C test can build the same files without PyTorch), writes the file,
and has tapegrad (tests/test_gpt_weights.c, case "dump", run with
TG_WEIGHTS_TORCH_DIR=DIR) import it, train 20 AdamW steps and export its
weights in the same layout. Then, in float64:

  - tapegrad's loss and logits of the imported model against the PyTorch
    model's (the import is right);
  - tapegrad's 20 losses against the same training in PyTorch;
  - the export (for nanoGPT and Meta, turned into a torch.save'd dict by
    convert_weights.py) loads into a fresh PyTorch model (load_state_dict: no
    unexpected key, only buffers missing) and gives tapegrad's loss on
    another batch (the export is right), and every exported tensor is
    PyTorch's trained tensor (max |a - b| / max |b| per tensor).

Tolerance 1e-9 relative, 1e-8 for the weights (float64; measured errors are
about 1e-15 and, for the weights, 3e-11: see TOL_WEIGHTS). It writes
tests/fixtures/weights_torch.txt (fixture_file.py's format), which the C test
checks without PyTorch. Exit 0: agreement; 1: a difference; 77: PyTorch is
missing (ctest counts the test as skipped).

The models follow their originals' arithmetic in the model's dtype where
those upcast: Hugging Face's and Meta's RMSNorm compute in float32, and both
compute the RoPE angles in float32; here they are float64 as tapegrad's
(docs/weights.md lists what that changes for real checkpoints). nanoGPT's
nn.GELU() is the exact (erf) GELU; tapegrad's GPT-2 MLP, as Hugging Face's
GPT-2 (gelu_new), uses the tanh approximation, so the nanogpt model here
does too; the script prints what the exact GELU would change.

Needs PyTorch and NumPy (Debian: apt-get install python3-torch python3-numpy).
Usage (after building build/tests/test_gpt_weights):
  /usr/bin/python3 scripts/weights_torch.py [--test-bin build/tests/test_gpt_weights] [--keep DIR] [--no-write]
"""
import argparse
import math
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:
    print("skipped: %s has no PyTorch or NumPy (%s); Debian: apt-get install python3-torch python3-numpy"
          % (sys.executable, e))
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "fixtures"))
from interop_torch import read_safetensors, write_safetensors  # noqa: E402
from convert_weights import to_safetensors, to_torch  # noqa: E402
from fixture_file import Fixture, weight_array  # noqa: E402

V, CTX, NL, NH, C, HID, STEPS = 128, 8, 2, 2, 16, 48, 20
TOL = 1e-9
# the exported weights: 1e-8. The gradient of the key's bias (c_attn.bias,
# its middle third) is 0 in exact arithmetic (softmax ignores a constant
# added to every score of a row), so 20 AdamW steps move it by rounding
# noise alone, which differs between implementations (measured: 3e-11)
TOL_WEIGHTS = 1e-8
KINDS = ("gpt2_hf", "nanogpt", "llama_hf", "llama_meta")


# ---- the formula weights (tests/test_gpt_weights.c, formula) -------------------------
def fnv1a64(s):
    h = 0xcbf29ce484222325
    for b in s.encode():
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def formula(name, shape):
    """Element j of tensor `name`: u = splitmix64(fnv1a64(name) + (j + 1)
    golden) >> 11 / 2^53; a matrix 0.2 (2u - 1), a bias 0.05 (2u - 1), a
    norm's gain 1 + 0.1 (2u - 1)."""
    n = math.prod(shape)
    with np.errstate(over="ignore"):
        z = np.uint64(fnv1a64(name)) + np.arange(1, n + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    u = (z >> np.uint64(11)).astype(np.float64) * 2.0 ** -53
    if len(shape) == 2:
        v = (2.0 * u - 1.0) * 0.2
    elif name.endswith("bias"):
        v = (2.0 * u - 1.0) * 0.05
    else:
        v = 1.0 + (2.0 * u - 1.0) * 0.1
    return torch.from_numpy(v.reshape(shape))


# ---- Hugging Face's GPT-2 (transformers/models/gpt2/modeling_gpt2.py) ---------------------
class Conv1D(nn.Module):
    """transformers.pytorch_utils.Conv1D: weight (in, out), y = x W + b."""

    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.empty(nx, nf))
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x):
        y = torch.addmm(self.bias, x.reshape(-1, x.size(-1)), self.weight)
        return y.view(x.size()[:-1] + (self.nf,))


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def causal_attention(q, k, v):
    """softmax(q k^T / sqrt(D), causal) v on (B, H, T, D)."""
    T = q.shape[-2]
    att = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    att = att.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
    return torch.softmax(att, dim=-1) @ v


def heads(x, n_head):
    B, T, Cx = x.shape
    return x.view(B, T, n_head, Cx // n_head).transpose(1, 2)


def merge(y):
    B, H, T, D = y.shape
    return y.transpose(1, 2).reshape(B, T, H * D)


class GPT2Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("bias", torch.tril(torch.ones(CTX, CTX)).view(1, 1, CTX, CTX))  # as older versions save
        self.c_attn = Conv1D(3 * C, C)
        self.c_proj = Conv1D(C, C)

    def forward(self, x):
        q, k, v = (heads(t, NH) for t in self.c_attn(x).split(C, dim=2))
        return self.c_proj(merge(causal_attention(q, k, v)))


class GPT2MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_fc = Conv1D(4 * C, C)
        self.c_proj = Conv1D(C, 4 * C)

    def forward(self, x):
        return self.c_proj(gelu_new(self.c_fc(x)))


class GPT2Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C, eps=1e-5)
        self.attn = GPT2Attention()
        self.ln_2 = nn.LayerNorm(C, eps=1e-5)
        self.mlp = GPT2MLP()

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(CTX, C)
        self.h = nn.ModuleList([GPT2Block() for _ in range(NL)])
        self.ln_f = nn.LayerNorm(C, eps=1e-5)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for block in self.h:
            x = block(x)
        return self.ln_f(x)


class GPT2LMHeadModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.transformer = GPT2Model()
        self.lm_head = nn.Linear(C, V, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tie_word_embeddings

    def forward(self, idx):
        return self.lm_head(self.transformer(idx))


# ---- nanoGPT (karpathy/nanoGPT, model.py) ---------------------------------------------------
class NanoAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)

    def forward(self, x):
        q, k, v = (heads(t, NH) for t in self.c_attn(x).split(C, dim=2))
        return self.c_proj(merge(causal_attention(q, k, v)))


class NanoMLP(nn.Module):
    def __init__(self, approximate):
        super().__init__()
        self.c_fc = nn.Linear(C, 4 * C)
        self.gelu = nn.GELU(approximate=approximate)
        self.c_proj = nn.Linear(4 * C, C)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class NanoBlock(nn.Module):
    def __init__(self, approximate):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C)
        self.attn = NanoAttention()
        self.ln_2 = nn.LayerNorm(C)
        self.mlp = NanoMLP(approximate)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class NanoGPT(nn.Module):
    def __init__(self, approximate="tanh"):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(V, C), wpe=nn.Embedding(CTX, C),
            h=nn.ModuleList([NanoBlock(approximate) for _ in range(NL)]), ln_f=nn.LayerNorm(C)))
        self.lm_head = nn.Linear(C, V, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying, as nanoGPT does it

    def forward(self, idx):
        t = self.transformer
        x = t.wte(idx) + t.wpe(torch.arange(idx.shape[1]))
        for block in t.h:
            x = block(x)
        return self.lm_head(t.ln_f(x))


# ---- Hugging Face's LLaMA (transformers/models/llama/modeling_llama.py) ---------------------
class RMSNorm(nn.Module):
    """LlamaRMSNorm and Meta's RMSNorm, in the input's dtype (both upcast to
    float32 first)."""

    def __init__(self, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(C))
        self.eps = eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def angles(T, D, base=10000.0):
    """(T, D/2) angles p base^(-2i/D), in float64 as tapegrad computes them."""
    inv_freq = 1.0 / (base ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    return torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class LlamaRotaryEmbedding(nn.Module):
    def __init__(self, D):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / (10000.0 ** (torch.arange(0, D, 2).float() / D)))  # saved by older versions

    def forward(self, q, k):
        emb = torch.cat((angles(q.shape[-2], q.shape[-1]),) * 2, dim=-1)
        cos, sin = emb.cos().to(q.dtype), emb.sin().to(q.dtype)
        return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


class LlamaAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.q_proj = nn.Linear(C, C, bias=False)
        self.k_proj = nn.Linear(C, C, bias=False)
        self.v_proj = nn.Linear(C, C, bias=False)
        self.o_proj = nn.Linear(C, C, bias=False)
        self.rotary_emb = LlamaRotaryEmbedding(C // NH)

    def forward(self, x):
        q, k = self.rotary_emb(heads(self.q_proj(x), NH), heads(self.k_proj(x), NH))
        return self.o_proj(merge(causal_attention(q, k, heads(self.v_proj(x), NH))))


class LlamaMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate_proj = nn.Linear(C, HID, bias=False)
        self.up_proj = nn.Linear(C, HID, bias=False)
        self.down_proj = nn.Linear(HID, C, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.self_attn = LlamaAttention()
        self.mlp = LlamaMLP()
        self.input_layernorm = RMSNorm()
        self.post_attention_layernorm = RMSNorm()

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed_tokens = nn.Embedding(V, C)
        self.layers = nn.ModuleList([LlamaDecoderLayer() for _ in range(NL)])
        self.norm = RMSNorm()

    def forward(self, idx):
        x = self.embed_tokens(idx)
        for layer in self.layers:
            x = layer(x)
        return self.norm(x)


class LlamaForCausalLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = LlamaModel()
        self.lm_head = nn.Linear(C, V, bias=False)

    def forward(self, idx):
        return self.lm_head(self.model(idx))


# ---- Meta's LLaMA (facebookresearch/llama, llama/model.py) ----------------------------------
def apply_rotary_emb(xq, xk, freqs_cis):
    """Consecutive pairs as complex numbers, times e^(j angle)."""
    xq_ = torch.view_as_complex(xq.reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.reshape(*xk.shape[:-1], -1, 2))
    f = freqs_cis.view(1, xq_.shape[1], 1, xq_.shape[-1])
    return torch.view_as_real(xq_ * f).flatten(3), torch.view_as_real(xk_ * f).flatten(3)


class MetaAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.wq = nn.Linear(C, C, bias=False)
        self.wk = nn.Linear(C, C, bias=False)
        self.wv = nn.Linear(C, C, bias=False)
        self.wo = nn.Linear(C, C, bias=False)

    def forward(self, x, freqs_cis):
        B, T, _ = x.shape
        xq, xk = self.wq(x).view(B, T, NH, C // NH), self.wk(x).view(B, T, NH, C // NH)
        xq, xk = apply_rotary_emb(xq, xk, freqs_cis)
        y = causal_attention(xq.transpose(1, 2), xk.transpose(1, 2), heads(self.wv(x), NH))
        return self.wo(merge(y))


class FeedForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = nn.Linear(C, HID, bias=False)
        self.w2 = nn.Linear(HID, C, bias=False)
        self.w3 = nn.Linear(C, HID, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention = MetaAttention()
        self.feed_forward = FeedForward()
        self.attention_norm = RMSNorm(eps=1e-5)  # LLaMA-2's norm_eps (config.norm_eps in tapegrad)
        self.ffn_norm = RMSNorm(eps=1e-5)

    def forward(self, x, freqs_cis):
        h = x + self.attention(self.attention_norm(x), freqs_cis)
        return h + self.feed_forward(self.ffn_norm(h))


class MetaTransformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok_embeddings = nn.Embedding(V, C)
        self.layers = nn.ModuleList([TransformerBlock() for _ in range(NL)])
        self.norm = RMSNorm(eps=1e-5)
        self.output = nn.Linear(C, V, bias=False)

    def forward(self, idx):
        a = angles(idx.shape[1], C // NH)
        freqs_cis = torch.polar(torch.ones_like(a), a)
        x = self.tok_embeddings(idx)
        for layer in self.layers:
            x = layer(x, freqs_cis)
        return self.output(self.norm(x))


MODELS = {"gpt2_hf": GPT2LMHeadModel, "nanogpt": NanoGPT, "llama_hf": LlamaForCausalLM, "llama_meta": MetaTransformer}


# ---- files ------------------------------------------------------------------------------------
def buffer_names(model):
    return {n for n, _ in model.named_buffers()}


def write_user_file(kind, model, d):
    """DIR/KIND.torch.safetensors, the state dict as the user has it: the
    hub's GPT-2 file as is; nanoGPT's ckpt.pt (a torch.compile'd model's
    names) and Meta's consolidated.00.pth through convert_weights.py."""
    sd = dict(model.state_dict())
    path = os.path.join(d, kind + ".torch.safetensors")
    if kind == "gpt2_hf":  # the hub's file: GPT2Model's names, no lm_head
        sd = {n[len("transformer."):]: t for n, t in sd.items() if n != "lm_head.weight"}
    if kind in ("gpt2_hf", "llama_hf"):
        write_safetensors(path, sd, {"format": "pt"})
        return
    if kind == "nanogpt":
        pt = os.path.join(d, "ckpt.pt")
        torch.save({"model": {"_orig_mod." + n: t for n, t in sd.items()}, "iter_num": 0,
                    "model_args": dict(n_layer=NL, n_head=NH, n_embd=C, block_size=CTX, vocab_size=V)}, pt)
    else:  # LLaMA-1's checkpoints carry rope.freqs
        sd["rope.freqs"] = 1.0 / (10000.0 ** (torch.arange(0, C // NH, 2).float() / (C // NH)))
        pt = os.path.join(d, "consolidated.00.pth")
        torch.save(sd, pt)
    to_safetensors(pt, path)


def read_export(kind, d):
    """tapegrad's export as a PyTorch user reads it: the safetensors file,
    or (nanoGPT, Meta) the torch.save'd dict convert_weights.py makes."""
    path = os.path.join(d, kind + ".tapegrad.safetensors")
    if kind in ("gpt2_hf", "llama_hf"):
        tensors, meta = read_safetensors(path)
        assert meta.get("format") == "pt", meta
        return tensors
    pt = os.path.join(d, kind + ".tapegrad.pt")
    to_torch(path, pt)
    return torch.load(pt, weights_only=True)


def fill(kind, model):
    """The formula weights, by the names of the user's file."""
    strip = "transformer." if kind == "gpt2_hf" else ""
    with torch.no_grad():
        for n, p in model.named_parameters():  # the tied one once, under its first name
            key = n[len(strip):] if n.startswith(strip) else n
            p.copy_(formula(key, tuple(p.shape)))


def make(kind, **kw):
    m = MODELS[kind](**kw).double()
    fill(kind, m)
    return m


# ---- training, as tests/test_gpt_weights.c (train) --------------------------------------------
def loss_of(model, batch):
    logits = model(batch[0])
    return F.cross_entropy(logits.reshape(-1, V), batch[1].reshape(-1)), logits


def train(model, batches):
    params = list(model.parameters())  # the tied tensor once
    opt = torch.optim.AdamW([{"params": [p for p in params if p.ndim == 2], "weight_decay": 0.1},
                             {"params": [p for p in params if p.ndim != 2], "weight_decay": 0.0}],
                            lr=3e-3, betas=(0.9, 0.99), eps=1e-8)
    traj = []
    for s in range(STEPS):
        opt.zero_grad()
        loss, _ = loss_of(model, batches[s])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        traj.append(loss.item())
    return torch.tensor(traj, dtype=torch.float64)


def relerr(a, b):
    a, b = torch.as_tensor(a).double(), torch.as_tensor(b).double()
    scale = b.abs().max().item()
    return (a - b).abs().max().item() / (scale if scale > 0 else 1.0)


def check(kind, d, batches, fx, w):
    model = make(kind)
    with torch.no_grad():
        loss0, logits = loss_of(model, batches[0])
    tg, _ = read_safetensors(os.path.join(d, kind + ".results.safetensors"))
    errs = {"loss0": relerr(tg["loss0"], loss0.reshape(1)), "logits0": relerr(tg["logits0"], logits[0, 0])}
    traj = train(model, batches)
    errs["traj"] = ((tg["traj"] - traj).abs() / traj.abs()).max().item()
    # tapegrad's export into a fresh model: nothing unexpected, only buffers missing
    exported = read_export(kind, d)
    back = MODELS[kind]().double()
    missing, unexpected = back.load_state_dict(exported, strict=False)
    assert not unexpected and set(missing) <= buffer_names(back), (missing, unexpected)
    with torch.no_grad():
        ev, _ = loss_of(back, batches[STEPS])
        ev_torch, _ = loss_of(model, batches[STEPS])
    errs["eval"] = relerr(tg["eval"], ev.reshape(1))
    trained = {n: t for n, t in model.state_dict().items() if n not in buffer_names(model)}
    assert sorted(trained) == sorted(exported), (sorted(trained), sorted(exported))
    worst, errs["weights"] = "", 0.0
    for n, t in trained.items():
        e = relerr(exported[n], t)
        if e > errs["weights"]:
            worst, errs["weights"] = n, e
    print("%-10s  max relative error: loss %.1e  logits %.1e  20 losses %.1e  loss of the export %.1e  "
          "exported weights %.1e (%s)" % (kind, errs["loss0"], errs["logits0"], errs["traj"], errs["eval"],
                                         errs["weights"], worst))
    print("            losses: tapegrad %.6f -> %.6f, PyTorch %.6f -> %.6f; after: tapegrad %.6f, PyTorch on the "
          "export %.6f, on its own %.6f" % (tg["traj"][0], tg["traj"][-1], traj[0], traj[-1], tg["eval"][0], ev,
                                             ev_torch))
    fx.put(kind + ".loss0", loss0.reshape(1))
    fx.put(kind + ".logits0", logits[0, 0])
    fx.put(kind + ".traj", traj)
    fx.put(kind + ".eval", ev.reshape(1))
    for n, t in trained.items():
        g = t.detach().reshape(-1)
        wc = w.repeat(g.numel() // w.numel() + 1)[: g.numel()]
        fx.put("%s.w.%s" % (kind, n), torch.stack((g.norm(), (g * wc).sum())))
    e = [errs[k] for k in ("loss0", "logits0", "traj", "eval", "weights")]
    fx.put(kind + ".maxerr", torch.tensor(e, dtype=torch.float64))
    return max(e[:4]) <= TOL and e[4] <= TOL_WEIGHTS


def exact_gelu_note(batches):
    """What nanoGPT's exact GELU changes, for the docs."""
    with torch.no_grad():
        a, _ = loss_of(make("nanogpt"), batches[0])
        b, _ = loss_of(make("nanogpt", approximate="none"), batches[0])
    print("nanogpt with nn.GELU() (exact erf) instead of tanh: loss %.9f vs %.9f (relative %.1e)"
          % (b, a, abs(b - a) / a))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--test-bin", default=os.path.join(ROOT, "build", "tests", "test_gpt_weights"))
    ap.add_argument("--keep", help="write the files here and keep them")
    ap.add_argument("--no-write", action="store_true", help="compare only; leave the fixture as it is")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
        return run(args, args.keep)
    with tempfile.TemporaryDirectory(prefix="tg-weights-torch-") as d:
        return run(args, d)


def run(args, d):
    for kind in KINDS:
        write_user_file(kind, make(kind), d)
    env = dict(os.environ, TG_WEIGHTS_TORCH_DIR=d, CK_FORK="no")
    subprocess.run([args.test_bin], env=env, check=True, stdout=subprocess.DEVNULL)
    bt, _ = read_safetensors(os.path.join(d, "batches.safetensors"))
    batches = bt["batches"].long()  # (STEPS + 1, 2, B, T)
    fx = Fixture()
    w = weight_array(1024)
    fx.put("w", w)
    ok = all([check(kind, d, batches, fx, w) for kind in KINDS])
    exact_gelu_note(batches)
    if not args.no_write:
        path = fx.write(os.path.join(ROOT, "tests", "fixtures", "x"), "weights_torch.txt",
                        "written by scripts/weights_torch.py (PyTorch %s); maxerr: loss0, logits0, 20 losses, "
                        "loss of the export, exported weights" % torch.__version__)
        print("wrote", os.path.relpath(path, ROOT))
    print("agreement:", "ok" if ok else "FAILED", "(tolerance %g, weights %g)" % (TOL, TOL_WEIGHTS))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

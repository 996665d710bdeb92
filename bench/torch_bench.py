#!/usr/bin/env python3
"""PyTorch side of tapegrad's benchmark (bench/vs_pytorch.c runs it).

Each case is the PyTorch counterpart of a tapegrad case, on the same shapes,
timed with the same algorithm as bench/common/timing.c (bn_time): one
warm-up call, three calibration calls (the fastest counts), samples of
`inner` calls lasting at least `sample` seconds each, as many samples as fit
in the budget (at least `min_samples`), and the median sample divided by
inner.

Modes:
  --server   read one command per line on stdin, answer each with one line
             of JSON on stdout (what the C benchmark uses, so each PyTorch
             case runs right after the matching tapegrad case)
  (default)  run every case once and print one JSON object

Commands (server mode):
  norm rms|ln f32|f64|bf16 N C
                             RMSNorm (composed) / LayerNorm (native) fwd+bwd
  linear M K N               F.linear fwd+bwd, x (M,K), W (N,K), b (N)
  linear_bf16 M K N          the same with x, W, b, dy in bfloat16 (oneDNN's bf16 matmul)
  mlp H B                    one Adam training step of 784-H-H-10 with RMSNorm
  mlp_bf16 H B               the same under torch.autocast("cpu", torch.bfloat16)
  attn sdpa|composed B H T D causal attention fwd+bwd, q k v (B,H,T,D): 1.13's
                             F._scaled_dot_product_attention (is_causal), or
                             softmax((q k^T / sqrt(D)).masked_fill(triu)) v
  gpt ARCH L H C T B         one GPT training step (zero-grad, forward, cross-entropy,
                             backward, AdamW) of scripts/gpt_torch.py's model, the same
                             as tg_gpt (vocabulary 128), init N(0, 0.02)
  gpt_bf16 ARCH L H C T B    the same step under torch.autocast("cpu", torch.bfloat16)
                             (float32 weights and AdamW state, the loss in float32)
  gpt_mem ARCH L H C T B     the same step's memory, measured in a fresh process
                             (--mem-probe): the RSS high-water mark of one step
                             (after two warm-up steps, VmHWM reset through
                             /proc/self/clear_refs) minus the process's RSS before
                             the model was made (torch imported, its thread pool
                             and allocator warmed by a small product). torch 1.13
                             keeps no CPU allocator statistics, and tracemalloc
                             does not see its allocations.
  tiny                       (a + b).backward() for 1-element a, b
  quit

Thread count: torch.set_num_threads(--threads), the same as tapegrad's.
Debian's PyTorch multiplies matrices through OpenBLAS, whose thread pool
does not follow torch.set_num_threads: the C side starts this server with
OPENBLAS_NUM_THREADS equal to --threads (and, when asked, with
OMP_WAIT_POLICY=PASSIVE); the "ready" line reports both.
Clock (--clock): wall time, or process CPU time (time.process_time, what
bn_time uses with a CPU clock).
OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE: unset them (env -u ...) for the fair
case; scripts/bench.sh does.
"""
import argparse
import json
import math
import os
import sys
import time

EPS_RMS = 1e-6
EPS_LN = 1e-5


CLOCK = time.perf_counter


def bench(fn, budget, min_samples=5, sample=2e-3):
    """Median seconds of one call of fn (see the module docstring)."""
    now = CLOCK
    sample = max(sample, 1e-3)
    fn()
    t1 = 1e300
    for _ in range(3):
        t0 = now()
        fn()
        t1 = min(t1, now() - t0)
    t1 = max(t1, 1e-9)
    if t1 < 1e-4:
        n = int(1e-3 / t1) + 1
        t0 = now()
        for _ in range(n):
            fn()
        t1 = max((now() - t0) / n, 1e-9)
    inner = 1 if t1 >= sample else int(sample / t1) + 1
    samples = int(budget / (t1 * inner))
    samples = min(max(samples, min_samples), 101)
    times = []
    for _ in range(samples):
        t0 = now()
        for _ in range(inner):
            fn()
        times.append((now() - t0) / inner)
    times.sort()
    k = len(times)
    median = times[k // 2] if k % 2 else 0.5 * (times[k // 2 - 1] + times[k // 2])
    return {"median_s": median, "min_s": times[0], "samples": k, "inner": inner}


def rmsnorm(x, w, eps=EPS_RMS):
    # the composed form: what one writes in PyTorch 1.13 (no nn.RMSNorm yet)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def case_norm(kind, dtype, n, c, budget):
    dt = {"f32": torch.float32, "f64": torch.float64, "bf16": torch.bfloat16}[dtype]
    # bfloat16: drawn in float32, then rounded (the tensors are bf16 leaves)
    dr = torch.float32 if dt == torch.bfloat16 else dt
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, c, dtype=dr, generator=g).to(dt).requires_grad_()
    w = (1 + 0.1 * torch.randn(c, dtype=dr, generator=g)).to(dt).requires_grad_()
    b = (0.1 * torch.randn(c, dtype=dr, generator=g)).to(dt).requires_grad_()
    dy = torch.randn(n, c, dtype=dr, generator=g).to(dt)

    def step():
        x.grad = None
        w.grad = None
        b.grad = None
        if kind == "rms":
            y = rmsnorm(x, w)
        else:
            y = F.layer_norm(x, (c,), w, b, EPS_LN)
        y.backward(dy)

    return bench(step, budget)


def case_linear(m, k, n, budget, dtype=None):
    # bfloat16: drawn in float32, then rounded (the tensors are bf16 leaves)
    dt = dtype or torch.float32
    g = torch.Generator().manual_seed(0)
    x = torch.randn(m, k, generator=g).to(dt).requires_grad_()
    w = (torch.rand(n, k, generator=g) - 0.5).to(dt).requires_grad_()
    b = (torch.rand(n, generator=g) - 0.5).to(dt).requires_grad_()
    dy = torch.randn(m, n, generator=g).to(dt)

    def step():
        x.grad = None
        w.grad = None
        b.grad = None
        F.linear(x, w, b).backward(dy)

    return bench(step, budget)


def make_mlp(hidden):
    nn = torch.nn

    class Net(nn.Module):
        """Linear->RMSNorm->ReLU->Linear->RMSNorm->ReLU->Linear, as the C side."""

        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(784, hidden)
            self.g1 = nn.Parameter(torch.ones(hidden))
            self.fc2 = nn.Linear(hidden, hidden)
            self.g2 = nn.Parameter(torch.ones(hidden))
            self.fc3 = nn.Linear(hidden, 10)

        def forward(self, x):
            h = torch.relu(rmsnorm(self.fc1(x), self.g1))
            h = torch.relu(rmsnorm(self.fc2(h), self.g2))
            return self.fc3(h)

    return Net()


def case_mlp(hidden, batch, budget, autocast=False):
    # tiny batches: samples of >= 5 ms, as bench_mlp in bench/vs_pytorch.c;
    # autocast: bfloat16 mixed precision (float32 weights and Adam state,
    # the loss in float32), as the C side's tg_ctx_set_autocast
    torch.manual_seed(0)
    model = make_mlp(hidden)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(batch, 784)
    y = torch.randint(0, 10, (batch,))

    def step():
        opt.zero_grad(set_to_none=True)
        if autocast:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                logits = model(x).float()
        else:
            logits = model(x)
        loss = F.cross_entropy(logits, y)
        loss.backward()
        opt.step()

    return bench(step, 4 * budget, sample=5e-3)


def case_attention(form, b, h, t, d, budget):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(b, h, t, d, generator=g).requires_grad_() for _ in range(3))
    do = torch.randn(b, h, t, d, generator=g)
    mask = torch.ones(t, t, dtype=torch.bool).triu(1)
    scale = 1.0 / math.sqrt(d)

    def step():
        q.grad = k.grad = v.grad = None
        if form == "sdpa":
            o = F._scaled_dot_product_attention(q, k, v, None, 0.0, False, True)[0]
        else:
            s = (q @ k.transpose(-2, -1) * scale).masked_fill(mask, float("-inf"))
            o = torch.softmax(s, dim=-1) @ v
        o.backward(do)

    return bench(step, budget)


def make_gpt_step(arch, n_layer, n_head, c, t, b, autocast=False):
    """The GPT training step of case_gpt, and its parameters; autocast: in
    bfloat16 mixed precision (the loss in float32)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
    import gpt_torch
    g = torch.Generator().manual_seed(0)
    P = {n: (torch.ones(s) if n.endswith(".gamma") else torch.zeros(s) if n.endswith((".beta", ".bias"))
             else torch.randn(s, generator=g) * 0.02).requires_grad_()
         for n, s in gpt_torch.param_shapes(arch, n_layer, c, t, 128)}
    opt = gpt_torch.adamw(P)
    idx = torch.randint(0, 128, (b, t), generator=g)
    tgt = torch.randint(0, 128, (b, t), generator=g)

    def step():
        opt.zero_grad(set_to_none=True)
        if autocast:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                logits = gpt_torch.forward(P, idx, arch, n_layer, n_head)
            loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), tgt.reshape(-1))
        else:
            loss, _ = gpt_torch.loss_of(P, idx, tgt, arch, n_layer, n_head)
        loss.backward()
        opt.step()

    return step, P


def case_gpt(arch, n_layer, n_head, c, t, b, budget, autocast=False):
    step, _ = make_gpt_step(arch, n_layer, n_head, c, t, b, autocast)
    return bench(step, 4 * budget, sample=5e-3)


def proc_status_bytes(key):
    """A /proc/self/status figure (VmRSS, VmHWM), in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(key + " not in /proc/self/status")


def mem_probe(cmd):
    """Runs in a fresh process (--mem-probe): the step's memory (see gpt_mem)."""
    w = cmd.split()
    torch.ones(64, 64) @ torch.ones(64, 64)  # the thread pool and allocator up
    base = proc_status_bytes("VmRSS")
    step, P = make_gpt_step(w[1], *(int(v) for v in w[2:7]))
    step()
    step()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # VmHWM := VmRSS
    step()
    peak = proc_status_bytes("VmHWM")
    params = sum(p.numel() * p.element_size() for p in P.values())
    return {"peak_bytes": peak - base, "baseline_bytes": base, "params_bytes": params}


def case_gpt_mem(cmd, threads):
    import subprocess
    # glibc's own malloc settings: the server's warm-malloc variables keep
    # freed memory resident, which would count as the step's
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--threads", str(threads), "--mem-probe", cmd],
                         stdout=subprocess.PIPE, check=True, text=True, env=env).stdout
    return json.loads(out)


def case_tiny(budget):
    a = torch.ones(1, requires_grad=True)
    b = torch.ones(1, requires_grad=True)

    def step():
        (a + b).backward()

    return bench(step, budget, min_samples=11, sample=5e-3)


def run(cmd, budget, threads=1):
    w = cmd.split()
    if w[0] == "gpt_mem":
        return case_gpt_mem("gpt " + " ".join(w[1:7]), threads)
    if w[0] == "norm":
        return case_norm(w[1], w[2], int(w[3]), int(w[4]), budget)
    if w[0] in ("linear", "linear_bf16"):
        return case_linear(int(w[1]), int(w[2]), int(w[3]), budget, torch.bfloat16 if w[0] == "linear_bf16" else None)
    if w[0] in ("mlp", "mlp_bf16"):
        return case_mlp(int(w[1]), int(w[2]), budget, w[0] == "mlp_bf16")
    if w[0] == "attn":
        return case_attention(w[1], int(w[2]), int(w[3]), int(w[4]), int(w[5]), budget)
    if w[0] in ("gpt", "gpt_bf16"):
        return case_gpt(w[1], *(int(v) for v in w[2:7]), budget, w[0] == "gpt_bf16")
    if w[0] == "tiny":
        return case_tiny(budget)
    raise ValueError("unknown command: " + cmd)


ALL = [
    *[f"norm {k} {d} {n} {c}" for k in ("rms", "ln") for d in ("f32", "f64")
      for n, c in ((4096, 768), (256, 4096), (64, 64))],
    "norm rms bf16 4096 768", "norm ln bf16 4096 768", "mlp_bf16 256 64", "linear_bf16 4096 768 3072",
    "gpt_bf16 gpt2 6 6 384 64 4",
    "linear 512 512 512", "linear 64 784 256", "linear 4096 768 3072",
    "mlp 256 64", "mlp 64 32", "attn sdpa 4 6 256 64", "attn composed 4 6 256 64",
    "gpt gpt2 4 4 128 64 4", "gpt gpt2 6 6 384 64 4", "gpt_mem gpt2 6 6 384 64 4", "tiny",
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", action="store_true")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--budget", type=float, default=0.5, help="seconds per case")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="wall time, or this process's CPU time (robust on a shared machine)")
    ap.add_argument("--mem-probe", metavar="CMD", help=argparse.SUPPRESS)
    args = ap.parse_args()
    global torch, F, CLOCK
    CLOCK = time.process_time if args.clock == "cpu" else time.perf_counter
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(args.threads)
    if args.mem_probe:
        print(json.dumps(mem_probe(args.mem_probe)))
        return
    info = {"ready": True, "torch": torch.__version__, "threads": torch.get_num_threads(),
            "openblas_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY")}
    if not args.server:
        info["cases"] = {cmd: run(cmd, args.budget, args.threads) for cmd in ALL}
        print(json.dumps(info))
        return
    print(json.dumps(info), flush=True)
    for line in sys.stdin:
        cmd = line.strip()
        if not cmd:
            continue
        if cmd == "quit":
            break
        try:
            out = run(cmd, args.budget, args.threads)
        except Exception as e:  # report, keep serving
            out = {"error": f"{type(e).__name__}: {e}"}
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()

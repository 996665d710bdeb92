/* tapegrad's benchmark: `make bench` (scripts/bench.sh) runs it.
 *
 * It measures this machine's limits itself (STREAM-like copy/triad bandwidth
 * on 256 MiB arrays, the f32/f64 FMA peak, each with 1 thread and with 2 or
 * --threads), then times each case -- ours, then PyTorch on the same shapes
 * right after (a bench/torch_bench.py server), then OpenBLAS where it
 * applies -- and prints ONE table: our median time, the rate (GB/s,
 * GFLOP/s, steps/s), the fraction of the machine's limit, PyTorch's median
 * and the speedup, OpenBLAS, and our performance targets (the add_target
 * calls below: met, or missed by how much). --json FILE writes the same as
 * JSON. How the bench is organized: docs/DESIGN.md.
 *
 * Cases (f32 unless said; every timing is a median of samples after a
 * warm-up, see bench/common/timing.c):
 *   RMSNorm / LayerNorm forward+backward, f32 and f64, (N,C) = (4096,768),
 *     (256,4096), (64,64): y = norm(x); backward from a fixed dy; grads of x,
 *     gamma (and beta) accumulate into their buffers. PyTorch: the composed
 *     RMSNorm x * rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w, and the
 *     native F.layer_norm. GB/s counts the bytes that must move: x read
 *     twice, y written, dy read, dx written (5 N C elements). And the
 *     RMSNorm backward alone at 4096x768 (x, dy read, dx written: 3 N C).
 *   Linear forward+backward (M,K,N) = (512,512,512), (64,784,256),
 *     (4096,768,3072): 6 M N K flops; OpenBLAS: the same three sgemm calls
 *     (y = x W^T, dx = dy W, dW = dy^T x) through dlopen.
 *   Scaling: 2 threads (or --threads when more) against 1 thread, in wall
 *     time, for Linear 4096x768x3072 and the f32 4096x768 norms.
 *   MLP training step 784-H-H-10 (Linear->RMSNorm->ReLU) x2 -> Linear ->
 *     cross-entropy, Adam lr 1e-3: H=256 batch 64 and H=64 batch 32, in
 *     steps/s; and its peak memory (arena capacity + parameters, grads and
 *     optimizer state) against params + grads + state + saved activations.
 *   Attention forward+backward, causal, (B,H,T,D) = (4,6,256,64): the fused
 *     tg_attention and its composed twin tg_attention_composed, against
 *     PyTorch's F._scaled_dot_product_attention (1.13's, is_causal) and the
 *     same composed formula; GFLOP/s counts the 6 products of attention's
 *     math (2 forward, 4 backward) on the causal half, 6 T^2 D per pair;
 *     and what each form saves for backward (tg_tape_saved_bytes).
 *   GPT-2 training step (zero-grad, forward, cross-entropy, backward,
 *     AdamW), tg_gpt with vocabulary 128, T=64, B=4: tiny L=4 H=4 C=128 and
 *     small L=6 H=6 C=384, against scripts/gpt_torch.py's model in PyTorch;
 *     the step's GEMM GFLOP/s against the big Linear row's; the small one
 *     with 2 threads vs 1 (wall, alternating) and its peak memory, and
 *     the small step with checkpointed blocks (tg_checkpoint): its arena
 *     peak and time against the plain step's.
 *   Generation (group generate): tg_gpt_generate with the tiny GPT-2 at
 *     context 256, 128 tokens after a 128-token prompt, with the KV cache
 *     and with a forward over the whole window per token.
 *   Tiny op: c = a + b of 1-element tensors, backward, tg_ctx_reset.
 *   Low precision (group lowp): RMSNorm and LayerNorm forward+backward in
 *     bfloat16 at 4096x768, Linear bf16 4096x768x3072 (and the instruction
 *     set of its conversions) and the MLP step H=256 b64 in bfloat16 mixed
 *     precision (autocast), each beside its f32 row timed alternately in
 *     one run, and PyTorch's bfloat16 (composed RMSNorm, native
 *     F.layer_norm, torch.autocast for the MLP).
 * The rows are the same with any --threads; the targets hold for each.
 *
 * Honest measurements on a shared machine:
 *   - Before each of our timings, the PyTorch servers and our own other
 *     threads (OpenMP pool, OpenBLAS's pool) are settled: idle, using
 *     under 5% of a CPU for 20 ms (thread pools spin for a while after a
 *     call, and would take a core from the next measurement). The CPU
 *     time the servers used while ours was timed is printed (it is 0).
 *   - PyTorch runs with OPENBLAS_NUM_THREADS equal to its thread count
 *     (its matmuls go through OpenBLAS, whose pool otherwise has a thread
 *     per core even with torch.set_num_threads(1)). With more than one
 *     thread, each PyTorch case runs on two servers, OpenMP's default wait
 *     policy (spinning) and OMP_WAIT_POLICY=PASSIVE, and the faster counts;
 *     both times are in the JSON and their ratio in the footer
 *     (--torch-wait default|passive|both chooses).
 *   - Other jobs' CPU use is measured while each of ours is timed (/proc/stat
 *     minus our processes); rows where other jobs took more than half a CPU
 *     are marked '!', and the header says whether the machine was quiet.
 *   - --contend keeps one CPU busy with a spinning process (pinned to the
 *     last CPU of our affinity mask) and times every row of ours with 1 and
 *     with 2 threads, alternating: the 2-thread run must not be more than
 *     10% slower than the 1-thread run when a core is taken.
 *
 * Threads: --threads N (default 1; scripts/bench.sh passes BENCH_THREADS).
 * The library's own default, for programs that do not choose, is
 * tg_default_threads(): TG_THREADS=N when set, else the CPUs this process
 * may use (affinity mask, cgroup quota); the header prints it.
 *
 * Usage: bench_vs_pytorch [--threads N] [--json FILE] [--budget S] [--no-torch]
 *                       [--no-blas] [--python PATH] [--torch-script PATH]
 *                       [--torch-malloc warm|default] [--clock auto|wall|cpu]
 *                       [--torch-wait default|passive|both] [--only GROUP]
 *                       [--contend]
 * For the fair OpenBLAS / PyTorch case run it as
 *   env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE build-release/bench/bench_vs_pytorch */
#define _POSIX_C_SOURCE 200809L
#include "bench/common/bench.h"
#include "tapegrad.h"
#include "tensor/gemm.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

/* ---- options and results ----------------------------------------------- */

enum { WAIT_AUTO, WAIT_DEFAULT, WAIT_PASSIVE, WAIT_BOTH };

typedef struct options {
    int threads;
    const char *json;
    double budget; /* seconds per timed side of a case */
    bool torch, blas;
    const char *python, *torch_script;
    bool warm_malloc; /* PyTorch with glibc's trimming off (see notes) */
    const char *only; /* run one group: norm, linear, scaling, mlp, attention, gpt, generate, tiny */
    int clock;        /* 0 auto, 1 wall, 2 cpu */
    int torch_wait;   /* WAIT_*: the PyTorch servers' OpenMP wait policy */
    bool contend;     /* 1 vs 2 threads with a spinning process on one CPU */
} options;

/* The machine's limits with 1 thread ([0]) and with nt threads ([1]). */
typedef struct limits {
    int nt; /* max(2, --threads) */
    bn_stream_result stream[2];
    bn_fma_result fma[2];
    double dram[2]; /* max(copy, triad) */
} limits;

static double dram_for(const limits *lim, int threads) { return lim->dram[threads > 1]; }
static double fma32_for(const limits *lim, int threads) { return lim->fma[threads > 1].f32_gflops; }

/* One row of the table. NaN means "not measured / not applicable". */
typedef struct row {
    char name[48];
    char group[12]; /* norm, linear, scaling, mlp, memory, attention, gpt, generate, tiny, contend */
    double ours_s;  /* our median seconds per call */
    double rate;    /* in `unit` */
    char unit[12];
    double frac;         /* rate / machine limit */
    char limit_name[24]; /* "DRAM", "FMA f32", ... */
    double torch_s;      /* PyTorch's median seconds per call (the faster policy) */
    double torch_pol[2]; /* with the default OpenMP wait policy, with PASSIVE */
    double blas_s;       /* OpenBLAS's median seconds (Linear) */
    double blas_rate;
    double ratio_torch; /* torch_s / ours_s: > 1 means we are faster */
    double ratio_blas;  /* our rate / OpenBLAS's rate */
    double t1_s, tn_s;  /* scaling and contend rows: 1 thread, n threads */
    double others;      /* CPUs other jobs used while ours was timed */
    char extra[288];    /* free text */
    char target[200];   /* "met"/"MISSED" text */
} row;

#define MAX_ROWS 64
static row rows[MAX_ROWS];
static int nrows;

typedef struct target {
    char what[96];
    int row; /* index into rows */
    double measured, goal;
    bool ge;      /* measured >= goal wanted (else <=) */
    char unit[8]; /* "x", "%", "us" */
    bool known;   /* measured is available */
    bool met;
} target;
#define MAX_TARGETS 48
static target targets[MAX_TARGETS];
static int ntargets;

static row *new_row(const char *group, const char *fmt, ...) {
    if (nrows == MAX_ROWS) {
        fprintf(stderr, "bench: too many rows\n");
        exit(1);
    }
    row *r = &rows[nrows++];
    memset(r, 0, sizeof *r);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->name, sizeof r->name, fmt, ap);
    va_end(ap);
    snprintf(r->group, sizeof r->group, "%s", group);
    r->ours_s = r->rate = r->frac = r->torch_s = r->blas_s = r->blas_rate = NAN;
    r->torch_pol[0] = r->torch_pol[1] = r->t1_s = r->tn_s = r->others = NAN;
    r->ratio_torch = r->ratio_blas = NAN;
    return r;
}

static void add_target(row *r, const char *what, double measured, double goal, bool ge, const char *unit) {
    if (ntargets == MAX_TARGETS) return;
    target *t = &targets[ntargets++];
    snprintf(t->what, sizeof t->what, "%s", what);
    t->row = (int)(r - rows);
    t->measured = measured;
    t->goal = goal;
    t->ge = ge;
    snprintf(t->unit, sizeof t->unit, "%s", unit);
    t->known = !isnan(measured);
    t->met = t->known && (ge ? measured >= goal : measured <= goal);
}

static void progress(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "bench: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
}

static void die_ctx(tg_ctx *ctx, const char *where) {
    fprintf(stderr, "bench: %s: %s\n", where, tg_error_message(ctx));
    exit(1);
}

/* A persistent random tensor (normal, mean 0, std 1 unless given). */
static tg_tensor *prand(tg_ctx *ctx, tg_dtype dt, int ndim, const int64_t *shape, double mean, double std) {
    tg_tensor *t = tg_persist(ctx, tg_randn(ctx, dt, ndim, shape, mean, std));
    if (!t) die_ctx(ctx, "making inputs");
    return t;
}

static int cmp_dbl(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of t[0..n) (sorts it). */
static double median_of(double *t, int n) {
    qsort(t, (size_t)n, sizeof t[0], cmp_dbl);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/* ---- quiet measurements --------------------------------------------------- */

/* The PyTorch servers: [k] runs with wait policy srv_pol[k] (0 OpenMP's
 * default, 1 PASSIVE). */
static bn_torch srv[2];
static int srv_pol[2];
static int nsrv;
static int spinner = -1; /* --contend: the spinning process */

static struct {
    double settle_max, settle_sum; /* seconds waited for idle pools */
    int settles, settle_fail;
    double torch_cpu; /* CPU s the PyTorch servers used while ours was timed */
    double others_max, others_sum;
    int others_n;
} quiet;

static int server_pids(int *pids) {
    int n = 0;
    for (int k = 0; k < nsrv; k++)
        if (srv[k].ok) pids[n++] = srv[k].pid;
    return n;
}

/* Waits until the PyTorch servers and our other threads are idle. */
static void settle_all(void) {
    int pids[2];
    double w = bn_settle(pids, server_pids(pids), 3.0);
    if (w < 0) quiet.settle_fail++, w = -w;
    quiet.settle_sum += w;
    quiet.settles++;
    if (w > quiet.settle_max) quiet.settle_max = w;
}

/* What the machine and our processes had used at one moment. */
typedef struct meter {
    double wall, busy; /* wall clock; CPU seconds of the whole machine */
    double ours;       /* this process */
    double torch;      /* the PyTorch servers */
    double spin;       /* the --contend spinner */
} meter;

static meter meter_now(void) {
    meter m = {bn_now(), bn_machine_busy(), bn_process_cpu(), 0, 0};
    int pids[2], n = server_pids(pids);
    for (int i = 0; i < n; i++) m.torch += bn_tasks_cpu(pids[i], 0);
    if (spinner > 0) m.spin = bn_tasks_cpu(spinner, 0);
    return m;
}

/* CPUs other jobs used from a to b: the machine's busy time minus ours,
 * the servers' and the spinner's, over the wall time. */
static double meter_others(const meter *a, const meter *b) {
    const double wall = b->wall - a->wall;
    if (wall <= 0 || a->busy < 0 || b->busy < 0) return NAN;
    const double used = (b->busy - a->busy) - (b->ours - a->ours) - (b->torch - a->torch) - (b->spin - a->spin);
    return used > 0 ? used / wall : 0;
}

static void note_others(row *r, const meter *a, const meter *b) {
    const double o = meter_others(a, b);
    quiet.torch_cpu += b->torch - a->torch;
    if (isnan(o)) return;
    if (r) r->others = isnan(r->others) ? o : fmax(r->others, o);
    quiet.others_sum += o;
    quiet.others_n++;
    if (o > quiet.others_max) quiet.others_max = o;
}

/* Times step(arg) with `threads` threads on a settled machine; the other
 * jobs' CPU use goes into r. */
static bn_timing time_ours(row *r, tg_ctx *ctx, int threads, void (*step)(void *), void *arg, double budget,
                           int min_samples, double sample_s) {
    tg_set_threads(ctx, threads);
    settle_all();
    meter a = meter_now();
    bn_timing t = bn_time(step, arg, budget, min_samples, sample_s);
    meter b = meter_now();
    note_others(r, &a, &b);
    return t;
}

/* ---- PyTorch ------------------------------------------------------------- */

/* PyTorch's median seconds for the command, on every server (the first
 * server alternates from row to row), into r->torch_pol; r->torch_s is
 * the faster. */
static void torch_time(row *r, const char *fmt, ...) {
    char cmd[256], reply[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    for (int i = 0; i < nsrv; i++) {
        const int k = (nrows + i) % nsrv;
        if (!srv[k].ok) continue;
        settle_all(); /* our pools and the other server idle */
        if (!bn_torch_call(&srv[k], cmd, reply, sizeof reply)) {
            fprintf(stderr, "bench: PyTorch '%s' failed: %s\n", cmd, srv[k].ok ? reply : srv[k].why);
            continue;
        }
        const double t = bn_json_number(reply, "median_s");
        r->torch_pol[srv_pol[k]] = t;
        if (isnan(r->torch_s) || t < r->torch_s) r->torch_s = t;
    }
    r->ratio_torch = r->torch_s / r->ours_s;
}

/* The reply's number `key` to the command, from the first server that
 * answers (NAN without PyTorch): for measurements that are not timings. */
static double torch_number(const char *key, const char *cmd) {
    char reply[1024];
    for (int k = 0; k < nsrv; k++) {
        if (!srv[k].ok) continue;
        settle_all();
        if (bn_torch_call(&srv[k], cmd, reply, sizeof reply)) return bn_json_number(reply, key);
        fprintf(stderr, "bench: PyTorch '%s' failed: %s\n", cmd, srv[k].ok ? reply : srv[k].why);
    }
    return NAN;
}

/* ---- norms --------------------------------------------------------------- */

typedef struct norm_arg {
    tg_ctx *ctx;
    tg_tensor *x, *gamma, *beta, *dy, *y;
    bool layernorm;
} norm_arg;

/* One forward+backward: y = norm(x); x.grad, gamma.grad (beta.grad) += ... */
static void norm_step(void *p) {
    norm_arg *a = p;
    tg_tensor *y = a->layernorm ? tg_layernorm_fused(a->ctx, a->x, a->gamma, a->beta, 1, TG_LAYERNORM_EPS)
                                : tg_rmsnorm_fused(a->ctx, a->x, a->gamma, NULL, 1, TG_RMSNORM_EPS);
    tg_backward_ex(a->ctx, y, a->dy, false);
    tg_ctx_reset(a->ctx);
}

/* The backward alone, over the tape a->y's forward recorded (kept). */
static void norm_backward_step(void *p) {
    norm_arg *a = p;
    tg_backward_ex(a->ctx, a->y, a->dy, true);
}

static norm_arg norm_setup(int kind, tg_dtype dt, int64_t N, int64_t C) {
    norm_arg a = {tg_ctx_new(1), NULL, NULL, NULL, NULL, NULL, kind == 1};
    tg_ctx *ctx = a.ctx;
    a.x = tg_requires_grad(ctx, prand(ctx, dt, TG_SHAPE(N, C), 0, 1));
    a.gamma = tg_requires_grad(ctx, prand(ctx, dt, TG_SHAPE(C), 1, 0.1));
    a.beta = kind ? tg_requires_grad(ctx, prand(ctx, dt, TG_SHAPE(C), 0, 0.1)) : NULL;
    a.dy = prand(ctx, dt, TG_SHAPE(N, C), 0, 1);
    return a;
}

static const int64_t norm_shapes[3][2] = {{4096, 768}, {256, 4096}, {64, 64}};
static const char *const norm_names[2] = {"RMSNorm", "LayerNorm"};

static void bench_norms(const options *o, const limits *lim) {
    for (int kind = 0; kind < 2; kind++) {
        for (int dti = 0; dti < 2; dti++) {
            tg_dtype dt = dti ? TG_F64 : TG_F32;
            const char *dts = dti ? "f64" : "f32";
            for (int s = 0; s < 3; s++) {
                const int64_t N = norm_shapes[s][0], C = norm_shapes[s][1];
                const char *kname = norm_names[kind];
                progress("%s %s %lldx%lld", kname, dts, (long long)N, (long long)C);
                row *r = new_row("norm", "%s %s %lldx%lld fwd+bwd", kname, dts, (long long)N, (long long)C);
                norm_arg a = norm_setup(kind, dt, N, C);
                bn_timing t = time_ours(r, a.ctx, o->threads, norm_step, &a, o->budget, 5, 2e-3);
                if (!tg_ok(a.ctx)) die_ctx(a.ctx, kname);
                tg_ctx_free(a.ctx);

                const double es = dti ? 8.0 : 4.0;
                const double bytes = 5.0 * (double)(N * C) * es;
                r->ours_s = t.median_s;
                r->rate = bytes / t.median_s * 1e-9;
                snprintf(r->unit, sizeof r->unit, "GB/s");
                r->frac = r->rate / dram_for(lim, o->threads);
                snprintf(r->limit_name, sizeof r->limit_name, "DRAM");
                torch_time(r, "norm %s %s %lld %lld", kind ? "ln" : "rms", dts, (long long)N, (long long)C);
                if (dti == 0 && N == 4096 && C == 768) {
                    add_target(r,
                               kind ? "LayerNorm f32 4096x768 vs PyTorch native"
                                    : "RMSNorm f32 4096x768 vs PyTorch composed",
                               r->ratio_torch, kind ? 1.3 : 4.0, true, "x");
                    add_target(r,
                               kind ? "LayerNorm f32 4096x768 DRAM bandwidth" : "RMSNorm f32 4096x768 DRAM bandwidth",
                               100 * r->frac, 70, true, "%");
                }
            }
        }
        if (kind == 0) {
            /* the RMSNorm backward alone: x and dy read, dx written */
            const int64_t N = 4096, C = 768;
            progress("RMSNorm f32 %lldx%lld backward", (long long)N, (long long)C);
            row *r = new_row("norm", "RMSNorm f32 %lldx%lld bwd only", (long long)N, (long long)C);
            norm_arg a = norm_setup(0, TG_F32, N, C);
            a.y = tg_rmsnorm_fused(a.ctx, a.x, a.gamma, NULL, 1, TG_RMSNORM_EPS);
            bn_timing t = time_ours(r, a.ctx, o->threads, norm_backward_step, &a, o->budget, 5, 2e-3);
            if (!tg_ok(a.ctx)) die_ctx(a.ctx, "RMSNorm backward");
            tg_ctx_free(a.ctx);
            r->ours_s = t.median_s;
            r->rate = 3.0 * (double)(N * C) * 4.0 / t.median_s * 1e-9;
            snprintf(r->unit, sizeof r->unit, "GB/s");
            r->frac = r->rate / dram_for(lim, o->threads);
            snprintf(r->limit_name, sizeof r->limit_name, "DRAM");
            add_target(r, "RMSNorm f32 4096x768 backward DRAM bandwidth", 100 * r->frac, 70, true, "%");
        }
    }
}

/* ---- low precision (--only lowp) -------------------------------------------
 * RMSNorm and LayerNorm forward+backward in bfloat16 at 4096x768 beside the
 * same op in float32, timed alternately in this run (f32, bf16, f32, ...:
 * the best median of each counts), so their ratio does not depend on what
 * the machine did between two runs. The 16-bit kernels read and write
 * 16-bit storage once, converting in registers (layers/norm_instantiate.h),
 * so the bytes halve and the target is 1.7x the f32 row; PyTorch 1.13 in
 * bfloat16: the composed RMSNorm (every op reads and writes bf16,
 * computing in f32) and native F.layer_norm. GB/s counts 5 N C elements of
 * 2 bytes (4 for f32). */
#define LOWP_REPS 3

static void bench_lowp_norms(const options *o, const limits *lim) {
    const int64_t N = 4096, C = 768;
    for (int kind = 0; kind < 2; kind++) {
        const char *kname = norm_names[kind];
        progress("%s f32 and bf16 %lldx%lld, alternating", kname, (long long)N, (long long)C);
        row *r32 = new_row("lowp", "%s f32 %lldx%lld fwd+bwd", kname, (long long)N, (long long)C);
        row *r16 = new_row("lowp", "%s bf16 %lldx%lld fwd+bwd", kname, (long long)N, (long long)C);
        norm_arg a[2] = {norm_setup(kind, TG_F32, N, C), norm_setup(kind, TG_BF16, N, C)};
        row *r[2] = {r32, r16};
        for (int k = 0; k < 2; k++) r[k]->ours_s = INFINITY;
        for (int rep = 0; rep < LOWP_REPS; rep++)
            for (int k = 0; k < 2; k++) {
                bn_timing t = time_ours(r[k], a[k].ctx, o->threads, norm_step, &a[k], o->budget / 2, 5, 2e-3);
                if (!tg_ok(a[k].ctx)) die_ctx(a[k].ctx, kname);
                r[k]->ours_s = fmin(r[k]->ours_s, t.median_s);
            }
        for (int k = 0; k < 2; k++) {
            tg_ctx_free(a[k].ctx);
            r[k]->rate = 5.0 * (double)(N * C) * (k ? 2.0 : 4.0) / r[k]->ours_s * 1e-9;
            snprintf(r[k]->unit, sizeof r[k]->unit, "GB/s");
            r[k]->frac = r[k]->rate / dram_for(lim, o->threads);
            snprintf(r[k]->limit_name, sizeof r[k]->limit_name, "DRAM");
            torch_time(r[k], "norm %s %s %lld %lld", kind ? "ln" : "rms", k ? "bf16" : "f32", (long long)N,
                       (long long)C);
        }
        snprintf(r16->extra, sizeof r16->extra, "%.2fx the f32 row's speed (best of %d alternating timings each)",
                 r32->ours_s / r16->ours_s, LOWP_REPS);
        char what[96];
        snprintf(what, sizeof what, "%s bf16 4096x768 vs f32 (same run)", kname);
        add_target(r16, what, r32->ours_s / r16->ours_s, 1.7, true, "x");
        snprintf(what, sizeof what, "%s bf16 4096x768 vs PyTorch bf16 %s", kname, kind ? "native" : "composed");
        add_target(r16, what, r16->ratio_torch, kind ? 1.3 : 4.0, true, "x");
    }
}

/* ---- Linear -------------------------------------------------------------- */

typedef struct linear_arg {
    tg_ctx *ctx;
    tg_tensor *x, *w, *b, *dy;
} linear_arg;

/* The persistent operands of a Linear (M,K) -> (M,N): x and dy normal with
 * std 1, W and b with std 1/sqrt(K); x, W and b require grad. */
static linear_arg linear_setup_dt(int64_t M, int64_t K, int64_t N, tg_dtype dt) {
    const double bound = 1.0 / sqrt((double)K);
    tg_ctx *ctx = tg_ctx_new(2);
    linear_arg a = {ctx, NULL, NULL, NULL, NULL};
    a.x = tg_requires_grad(ctx, prand(ctx, dt, TG_SHAPE(M, K), 0, 1));
    a.w = tg_requires_grad(ctx, prand(ctx, dt, TG_SHAPE(N, K), 0, bound));
    a.b = tg_requires_grad(ctx, prand(ctx, dt, TG_SHAPE(N), 0, bound));
    a.dy = prand(ctx, dt, TG_SHAPE(M, N), 0, 1);
    return a;
}
static linear_arg linear_setup(int64_t M, int64_t K, int64_t N) { return linear_setup_dt(M, K, N, TG_F32); }

/* y = x W^T + b; backward: dx += dy W, dW += dy^T x, db += colsum(dy). */
static void linear_step(void *p) {
    linear_arg *a = p;
    tg_tensor *y = tg_linear_fused(a->ctx, a->x, a->w, a->b);
    tg_backward_ex(a->ctx, y, a->dy, false);
    tg_ctx_reset(a->ctx);
}

typedef struct blas_arg {
    const bn_blas *blas;
    int M, K, N;
    float *x, *w, *dy, *y, *dx, *dw;
} blas_arg;

/* The same three products with OpenBLAS (no bias). */
static void blas_step(void *p) {
    blas_arg *a = p;
    const int M = a->M, K = a->K, N = a->N;
    /* y (M,N) = x (M,K) W^T, W (N,K) */
    a->blas->sgemm(BN_ROW_MAJOR, BN_NO_TRANS, BN_TRANS, M, N, K, 1.0f, a->x, K, a->w, K, 0.0f, a->y, N);
    /* dx (M,K) = dy (M,N) W (N,K) */
    a->blas->sgemm(BN_ROW_MAJOR, BN_NO_TRANS, BN_NO_TRANS, M, K, N, 1.0f, a->dy, N, a->w, K, 0.0f, a->dx, K);
    /* dW (N,K) = dy^T (N,M) x (M,K) */
    a->blas->sgemm(BN_ROW_MAJOR, BN_TRANS, BN_NO_TRANS, N, K, M, 1.0f, a->dy, N, a->x, K, 0.0f, a->dw, K);
}

static float *blas_buf(int64_t n, unsigned seed) {
    float *p = aligned_alloc(64, (size_t)((n * 4 + 63) / 64 * 64));
    if (!p) {
        fprintf(stderr, "bench: out of memory\n");
        exit(1);
    }
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = (float)(seed >> 8) / (float)(1u << 24) - 0.5f;
    }
    return p;
}

static const int64_t linear_shapes[3][3] = {{512, 512, 512}, {64, 784, 256}, {4096, 768, 3072}};

static void bench_linear(const options *o, const limits *lim, const bn_blas *blas) {
    for (int s = 0; s < 3; s++) {
        const int64_t M = linear_shapes[s][0], K = linear_shapes[s][1], N = linear_shapes[s][2];
        progress("Linear %lldx%lldx%lld", (long long)M, (long long)K, (long long)N);
        const double flops = 6.0 * (double)M * (double)N * (double)K;
        row *r = new_row("linear", "Linear f32 %lldx%lldx%lld fwd+bwd", (long long)M, (long long)K, (long long)N);
        linear_arg a = linear_setup(M, K, N);
        r->ours_s = time_ours(r, a.ctx, o->threads, linear_step, &a, o->budget, 5, 2e-3).median_s;
        if (!tg_ok(a.ctx)) die_ctx(a.ctx, "Linear");
        tg_ctx_free(a.ctx);
        r->rate = flops / r->ours_s * 1e-9;
        snprintf(r->unit, sizeof r->unit, "GFLOP/s");
        r->frac = r->rate / fma32_for(lim, o->threads);
        snprintf(r->limit_name, sizeof r->limit_name, "FMA f32");
        torch_time(r, "linear %lld %lld %lld", (long long)M, (long long)K, (long long)N);
        if (blas->lib) {
            blas_arg b = {blas,
                          (int)M,
                          (int)K,
                          (int)N,
                          blas_buf(M * K, 1),
                          blas_buf(N * K, 2),
                          blas_buf(M * N, 3),
                          blas_buf(M * N, 4),
                          blas_buf(M * K, 5),
                          blas_buf(N * K, 6)};
            if (blas->set_threads) blas->set_threads(o->threads);
            settle_all();
            bn_timing t = bn_time(blas_step, &b, o->budget, 5, 2e-3);
            r->blas_s = t.median_s;
            r->blas_rate = flops / t.median_s * 1e-9;
            r->ratio_blas = r->rate / r->blas_rate;
            free(b.x), free(b.w), free(b.dy), free(b.y), free(b.dx), free(b.dw);
        }
        if (M != 64) {
            char what[96];
            snprintf(what, sizeof what, "Linear %lldx%lldx%lld vs PyTorch", (long long)M, (long long)K, (long long)N);
            add_target(r, what, r->ratio_torch, 1.1, true, "x");
            snprintf(what, sizeof what, "Linear %lldx%lldx%lld vs OpenBLAS sgemm GFLOP/s", (long long)M, (long long)K,
                     (long long)N);
            add_target(r, what, r->ratio_blas, 0.9, true, "x");
        }
    }
}

/* ---- scaling: n threads against 1 --------------------------------------- */

/* step(arg) with nt threads against 1 thread, in wall time (CPU time
 * cannot show a speedup). The two thread counts alternate sample by
 * sample, so both see the same load from other jobs, and the speedup
 * compares the fastest sample of each: on a shared machine the median
 * mostly measures how often a core was taken away, the fastest sample is
 * the one that had the cores. The CPU time (all threads) is shown beside
 * it: equal CPU time means the work split without overhead, so
 * nt x (1T CPU / nT CPU) is the speedup the code allows on free cores.
 * `work` is in `unit`s per call; `scale` is what the machine's own limit
 * gains from 1 to nt threads (STREAM or FMA), the row's "of limit" is the
 * speedup over it. */
static row *scaling_row(const options *o, const limits *lim, const char *name, tg_ctx *ctx, void (*step)(void *),
                        void *arg, double work, const char *unit, double scale, const char *scale_name) {
    const int nt = lim->nt;
    row *r = new_row("scaling", "%s %dT vs 1T", name, nt);
    tg_set_threads(ctx, 1);
    step(arg); /* warm-up, both counts */
    tg_set_threads(ctx, nt);
    step(arg);
    tg_set_threads(ctx, 1);
    double t0 = bn_now();
    step(arg);
    const double once = bn_now() - t0;
    const int inner = once >= 0.02 ? 1 : (int)(0.02 / once) + 1;
    int rounds = (int)(2 * o->budget / (1.5 * once * inner));
    rounds = rounds < 11 ? 11 : rounds > 41 ? 41 : rounds;
    double wall[2][41], cpu[2][41];
    for (int i = 0; i < rounds; i++) {
        settle_all();
        meter a = meter_now();
        for (int k = 0; k < 2; k++) {
            tg_set_threads(ctx, k ? nt : 1);
            double w0 = bn_now(), c0 = bn_process_cpu();
            for (int j = 0; j < inner; j++) step(arg);
            wall[k][i] = (bn_now() - w0) / inner;
            cpu[k][i] = (bn_process_cpu() - c0) / inner;
        }
        meter b = meter_now();
        note_others(r, &a, &b);
    }
    if (!tg_ok(ctx)) die_ctx(ctx, name);
    const double med1 = median_of(wall[0], rounds), medn = median_of(wall[1], rounds);
    const double t1 = wall[0][0], tn = wall[1][0]; /* sorted by median_of */
    const double c1 = median_of(cpu[0], rounds), cn = median_of(cpu[1], rounds);
    r->t1_s = t1;
    r->tn_s = tn;
    r->ours_s = tn;
    r->rate = work / tn;
    snprintf(r->unit, sizeof r->unit, "%s", unit);
    r->frac = (t1 / tn) / scale;
    snprintf(r->limit_name, sizeof r->limit_name, "%s x%.2f", scale_name, scale);
    snprintf(r->extra, sizeof r->extra,
             "wall, fastest of %d alternating samples: 1T %.3g ms, %dT %.3g ms (medians %.3g, %.3g) -> %.2fx; "
             "CPU 1T %.3g ms, %dT %.3g ms -> %.2fx on free cores; %s %dT/1T %.2fx; others %.1f CPUs",
             rounds, t1 * 1e3, nt, tn * 1e3, med1 * 1e3, medn * 1e3, t1 / tn, c1 * 1e3, nt, cn * 1e3, nt * c1 / cn,
             scale_name, nt, scale, r->others);
    return r;
}

static void bench_scaling(const options *o, const limits *lim) {
    const int nt = lim->nt;
    char what[96];
    {
        const int64_t M = 4096, K = 768, N = 3072;
        progress("Linear %lldx%lldx%lld, %d threads vs 1", (long long)M, (long long)K, (long long)N, nt);
        linear_arg a = linear_setup(M, K, N);
        const double gflop = 6.0 * (double)M * (double)N * (double)K * 1e-9;
        row *r = scaling_row(o, lim, "Linear 4096x768x3072", a.ctx, linear_step, &a, gflop, "GFLOP/s",
                             lim->fma[1].f32_gflops / lim->fma[0].f32_gflops, "FMA");
        tg_ctx_free(a.ctx);
        snprintf(what, sizeof what, "Linear 4096x768x3072 %d threads vs 1 thread", nt);
        add_target(r, what, r->t1_s / r->tn_s, nt == 2 ? 1.7 : 0.85 * nt, true, "x");
    }
    for (int kind = 1; kind >= 0; kind--) {
        const int64_t N = 4096, C = 768;
        progress("%s f32 %lldx%lld, %d threads vs 1", norm_names[kind], (long long)N, (long long)C, nt);
        norm_arg a = norm_setup(kind, TG_F32, N, C);
        char name[48];
        snprintf(name, sizeof name, "%s f32 4096x768", norm_names[kind]);
        const double gb = 5.0 * (double)(N * C) * 4.0 * 1e-9;
        row *r = scaling_row(o, lim, name, a.ctx, norm_step, &a, gb, "GB/s", lim->dram[1] / lim->dram[0], "STREAM");
        tg_ctx_free(a.ctx);
        snprintf(what, sizeof what, "%s f32 4096x768 %d threads vs 1 thread", norm_names[kind], nt);
        add_target(r, what, r->t1_s / r->tn_s, nt == 2 ? 1.4 : 0.7 * nt, true, "x");
    }
}

/* ---- MLP training step --------------------------------------------------- */

typedef struct mlp {
    tg_ctx *ctx;
    tg_linear *fc1, *fc2, *fc3;
    tg_rmsnorm *n1, *n2;
    tg_model model;
    tg_params params;
    tg_optim *opt;
    tg_tensor *x;
    int64_t *targets;
    size_t saved_bytes; /* tg_tape_saved_bytes after the forward */
    size_t step_peak;   /* tg_arena_peak at the end of the step */
    bool measure;       /* record both in the next step */
} mlp;

static tg_tensor *mlp_forward(mlp *m) {
    tg_ctx *ctx = m->ctx;
    tg_tensor *h = tg_relu(ctx, tg_rmsnorm_forward(ctx, m->n1, tg_linear_forward(ctx, m->fc1, m->x)));
    h = tg_relu(ctx, tg_rmsnorm_forward(ctx, m->n2, tg_linear_forward(ctx, m->fc2, h)));
    tg_tensor *logits = tg_linear_forward(ctx, m->fc3, h);
    /* under autocast the logits are 16-bit: the loss in float32, as autocast does */
    if (tg_ctx_autocast(ctx) != TG_F32) logits = tg_cast(ctx, logits, TG_F32);
    return tg_cross_entropy(ctx, logits, m->targets, NULL);
}

/* zero_grad, forward, loss, backward, Adam step, reset. */
static void mlp_step(void *p) {
    mlp *m = p;
    tg_optim_zero_grad(m->ctx, m->opt);
    tg_tensor *loss = mlp_forward(m);
    if (m->measure) m->saved_bytes = tg_tape_saved_bytes(m->ctx);
    tg_backward(m->ctx, loss);
    tg_optim_step(m->ctx, m->opt);
    if (m->measure) m->step_peak = tg_arena_peak(m->ctx); /* the step's high-water mark */
    tg_ctx_reset(m->ctx);
}

static void mlp_init(mlp *m, int64_t H, int64_t B) {
    memset(m, 0, sizeof *m);
    tg_ctx *ctx = m->ctx = tg_ctx_new(3);
    tg_model_add(ctx, &m->model, TG_MODULE(m->fc1 = tg_linear_new(ctx, "fc1", 784, H, true, TG_F32)));
    tg_model_add(
        ctx, &m->model,
        TG_MODULE(m->n1 = tg_rmsnorm_new(ctx, "norm1", 1, (int64_t[]){H}, TG_RMSNORM_EPS, true, false, TG_F32)));
    tg_model_add(ctx, &m->model, TG_MODULE(m->fc2 = tg_linear_new(ctx, "fc2", H, H, true, TG_F32)));
    tg_model_add(
        ctx, &m->model,
        TG_MODULE(m->n2 = tg_rmsnorm_new(ctx, "norm2", 1, (int64_t[]){H}, TG_RMSNORM_EPS, true, false, TG_F32)));
    tg_model_add(ctx, &m->model, TG_MODULE(m->fc3 = tg_linear_new(ctx, "fc3", H, 10, true, TG_F32)));
    tg_model_params(ctx, &m->model, &m->params);
    tg_adam_opts ao = tg_adam_defaults(); /* lr 1e-3, betas (0.9, 0.999), eps 1e-8 */
    m->opt = tg_adam_new(ctx, &m->params, &ao);
    m->x = prand(ctx, TG_F32, TG_SHAPE(B, 784), 0, 1);
    m->targets = malloc((size_t)B * sizeof *m->targets);
    for (int64_t i = 0; i < B; i++) m->targets[i] = (int64_t)(tg_rng_uniform(ctx) * 10) % 10;
    if (!tg_ok(ctx)) die_ctx(ctx, "MLP setup");
}

static void mlp_free(mlp *m) {
    tg_optim_free(m->ctx, m->opt);
    tg_params_free(&m->params);
    tg_model_free(m->ctx, &m->model);
    free(m->targets);
    tg_ctx_free(m->ctx);
}

static size_t tensor_bytes(const tg_tensor *t) { return t ? (size_t)t->numel * tg_dtype_size(t->dtype) : 0; }

/* A memory row: what a training step holds at its peak (the arena it used
 * + the persistent params, grads and optimizer state) against what it
 * needs at least (params + grads + state + saved activations). The arena's
 * capacity is shown too: it never shrinks, so it also keeps the high-water
 * mark of the model's construction (the parameters are drawn in the arena,
 * then made persistent) and is at least one 1 MiB chunk; pages of it the
 * step never touches are not resident. cap_after_timing: the capacity
 * before the measured step ("GREW" when the step needed more). */
static row *memory_row(tg_params *params, tg_optim *opt, size_t step_peak, size_t saved, size_t cap,
                       size_t cap_after_timing, const char *fmt, ...) {
    size_t pbytes = 0, gbytes = 0, sbytes = 0;
    for (int i = 0; i < params->count; i++) {
        pbytes += tensor_bytes(params->items[i].value);
        gbytes += tensor_bytes(params->items[i].value->grad);
    }
    tg_params *st = tg_optim_state(opt);
    for (int i = 0; i < st->count; i++) sbytes += tensor_bytes(st->items[i].value);
    const double persistent = (double)(pbytes + gbytes + sbytes);
    const double held = (double)step_peak + persistent;
    const double held_cap = (double)cap + persistent;
    const double need = persistent + (double)saved;
    row *q = new_row("memory", "%s", "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(q->name, sizeof q->name, fmt, ap);
    va_end(ap);
    q->rate = held / (1 << 20);
    snprintf(q->unit, sizeof q->unit, "MiB");
    q->frac = held / need;
    snprintf(q->limit_name, sizeof q->limit_name, "needed");
    snprintf(q->extra, sizeof q->extra,
             "step arena %.2f + p+g+state %.2f MiB; needed %.2f (saved %.2f); arena capacity %.2f MiB%s "
             "-> %.2fx",
             (double)step_peak / (1 << 20), persistent / (1 << 20), need / (1 << 20), (double)saved / (1 << 20),
             (double)cap / (1 << 20), cap == cap_after_timing ? " (flat)" : " (GREW)", held_cap / need);
    return q;
}

/* Times a training step into r (samples of >= 5 ms: tiny steps), then
 * runs one more with *measure set so it records its saved bytes and arena
 * peak; *cap_before and *cap_after are the arena's capacity around that
 * step (the footprint must not grow after the warm-up). */
static bn_timing time_training_step(const options *o, row *r, void (*step)(void *), void *arg, tg_ctx *ctx,
                                    bool *measure, size_t *cap_before, size_t *cap_after, const char *what) {
    bn_timing t = time_ours(r, ctx, o->threads, step, arg, 4 * o->budget, 5, 5e-3);
    if (!tg_ok(ctx)) die_ctx(ctx, what);
    *cap_before = tg_arena_capacity(ctx);
    *measure = true;
    step(arg);
    *cap_after = tg_arena_capacity(ctx);
    return t;
}

static const int64_t mlp_sizes[2][2] = {{256, 64}, {64, 32}};

static void bench_mlp(const options *o, const limits *lim) {
    for (int s = 0; s < 2; s++) {
        const int64_t H = mlp_sizes[s][0], B = mlp_sizes[s][1];
        progress("MLP 784-%lld-%lld-10 batch %lld", (long long)H, (long long)H, (long long)B);
        mlp m;
        mlp_init(&m, H, B);
        row *r = new_row("mlp", "MLP step 784-%lld-%lld-10 b%lld Adam", (long long)H, (long long)H, (long long)B);
        size_t cap_after_timing, cap;
        bn_timing t = time_training_step(o, r, mlp_step, &m, m.ctx, &m.measure, &cap_after_timing, &cap, "MLP step");

        /* the GEMMs' flops: forward, dW and dx of each Linear (2 B in out
         * each), except dx of the first (its input needs no gradient) */
        const double flops = 2.0 * (double)B * (double)(2 * 784 * H + 3 * H * H + 3 * H * 10);
        r->ours_s = t.median_s;
        r->rate = 1.0 / t.median_s;
        snprintf(r->unit, sizeof r->unit, "steps/s");
        r->frac = flops / t.median_s * 1e-9 / fma32_for(lim, o->threads);
        snprintf(r->limit_name, sizeof r->limit_name, "FMA f32");
        snprintf(r->extra, sizeof r->extra, "%.1f GFLOP/s in its GEMMs", flops / t.median_s * 1e-9);
        torch_time(r, "mlp %lld %lld", (long long)H, (long long)B);
        add_target(r, H == 256 ? "MLP step hidden 256 vs PyTorch steps/s" : "MLP step hidden 64 vs PyTorch steps/s",
                   r->ratio_torch, H == 256 ? 2.0 : 5.0, true, "x");

        row *q = memory_row(&m.params, m.opt, m.step_peak, m.saved_bytes, cap, cap_after_timing,
                            "MLP peak memory 784-%lld-%lld-10 b%lld", (long long)H, (long long)H, (long long)B);
        add_target(q, H == 256 ? "MLP hidden 256 peak memory / needed" : "MLP hidden 64 peak memory / needed", q->frac,
                   1.2, false, "x");
        if (s == 0) { /* n threads against 1, alternating (bench_scaling): wall and CPU time per step */
            m.measure = false;
            scaling_row(o, lim, "MLP step 784-256-256-10 b64", m.ctx, mlp_step, &m, flops * 1e-9, "GFLOP/s",
                        lim->fma[1].f32_gflops / lim->fma[0].f32_gflops, "FMA");
        }
        if (!tg_ok(m.ctx)) die_ctx(m.ctx, "MLP step");
        mlp_free(&m);
    }
}

/* ---- attention ------------------------------------------------------------ */

typedef struct attn_arg {
    tg_ctx *ctx;
    tg_tensor *q, *k, *v, *dO;
    bool fused;
    size_t saved; /* tg_tape_saved_bytes after the forward */
} attn_arg;

/* o = attention(q, k, v) causal; backward from dO into q, k, v's grads. */
static void attn_step(void *p) {
    attn_arg *a = p;
    tg_tensor *o = a->fused ? tg_attention(a->ctx, a->q, a->k, a->v, true, 0)
                            : tg_attention_composed(a->ctx, a->q, a->k, a->v, true, 0);
    a->saved = tg_tape_saved_bytes(a->ctx);
    tg_backward_ex(a->ctx, o, a->dO, false);
    tg_ctx_reset(a->ctx);
}

static const int64_t attn_shape[4] = {4, 6, 256, 64}; /* B, H, T, D */

/* q, k, v (B,H,T,D) normal with std 1, requiring grad, and dO. */
static attn_arg attn_setup(bool fused) {
    const int64_t B = attn_shape[0], H = attn_shape[1], T = attn_shape[2], D = attn_shape[3];
    tg_ctx *ctx = tg_ctx_new(5);
    attn_arg a = {ctx, NULL, NULL, NULL, NULL, fused, 0};
    a.q = tg_requires_grad(ctx, prand(ctx, TG_F32, TG_SHAPE(B, H, T, D), 0, 1));
    a.k = tg_requires_grad(ctx, prand(ctx, TG_F32, TG_SHAPE(B, H, T, D), 0, 1));
    a.v = tg_requires_grad(ctx, prand(ctx, TG_F32, TG_SHAPE(B, H, T, D), 0, 1));
    a.dO = prand(ctx, TG_F32, TG_SHAPE(B, H, T, D), 0, 1);
    return a;
}

static void bench_attention(const options *o, const limits *lim) {
    const int64_t B = attn_shape[0], H = attn_shape[1], T = attn_shape[2], D = attn_shape[3];
    double ours[2];
    size_t saved[2];
    row *rs[2];
    for (int f = 1; f >= 0; f--) {
        const char *form = f ? "fused" : "composed";
        progress("attention %s %lldx%lldx%lldx%lld", form, (long long)B, (long long)H, (long long)T, (long long)D);
        attn_arg a = attn_setup(f == 1);
        tg_ctx *ctx = a.ctx;
        row *r = rs[f] = new_row("attention", "attention %s f32 %lldx%lldx%lldx%lld causal", form, (long long)B,
                                 (long long)H, (long long)T, (long long)D);
        bn_timing t = time_ours(r, ctx, o->threads, attn_step, &a, o->budget, 5, 2e-3);
        if (!tg_ok(ctx)) die_ctx(ctx, "attention");
        tg_ctx_free(ctx);
        const double flops = 6.0 * (double)(B * H) * (double)(T * T) * (double)D;
        ours[f] = r->ours_s = t.median_s;
        saved[f] = a.saved;
        r->rate = flops / t.median_s * 1e-9;
        snprintf(r->unit, sizeof r->unit, "GFLOP/s");
        r->frac = r->rate / fma32_for(lim, o->threads);
        snprintf(r->limit_name, sizeof r->limit_name, "FMA f32");
        torch_time(r, "attn %s %lld %lld %lld %lld", f ? "sdpa" : "composed", (long long)B, (long long)H, (long long)T,
                   (long long)D);
    }
    /* what each form keeps for backward: the tape's count (lse plus q, k, v
     * and o kept by pointer, against kT, q, the mask, P twice and v), and
     * the part beyond q, k, v (and the fused op's o): O(T) vs O(T^2) */
    const size_t io = (size_t)(4 * B * H * T * D) * 4, in = (size_t)(3 * B * H * T * D) * 4;
    snprintf(rs[1]->extra, sizeof rs[1]->extra,
             "%.2fx the composed twin's speed; saves %.2f MiB vs %.2f MiB (%.2fx); beyond q, k, v, o: %.0f KiB vs "
             "%.2f MiB (1/%.0f)",
             ours[0] / ours[1], (double)saved[1] / (1 << 20), (double)saved[0] / (1 << 20),
             (double)saved[1] / (double)saved[0], (double)(saved[1] - io) / 1024, (double)(saved[0] - in) / (1 << 20),
             (double)(saved[0] - in) / (double)(saved[1] - io));
    snprintf(rs[0]->extra, sizeof rs[0]->extra, "transpose, matmul, mul_scalar, masked_fill, softmax, matmul");
    add_target(rs[1], "fused attention fwd+bwd vs its composed twin", ours[0] / ours[1], 2.0, true, "x");
    add_target(rs[1], "fused attention saved bytes / composed's", (double)saved[1] / (double)saved[0], 0.125, false,
               "x");
    add_target(rs[1], "fused attention saved beyond q,k,v,o / composed's",
               (double)(saved[1] - io) / (double)(saved[0] - in), 0.125, false, "x");
}

/* ---- GPT training step ------------------------------------------------------ */

typedef struct gpt_arg {
    tg_ctx *ctx;
    tg_gpt *g;
    tg_params params;
    tg_optim *opt;
    int64_t B, T, *idx, *tgt;
    size_t saved, peak; /* tg_tape_saved_bytes after the forward, tg_arena_peak at the end */
    bool measure;       /* record both in the next step */
} gpt_arg;

/* zero-grad, forward, cross-entropy, backward, AdamW, reset. */
static void gpt_step(void *p) {
    gpt_arg *a = p;
    tg_optim_zero_grad(a->ctx, a->opt);
    tg_tensor *loss = tg_gpt_loss(a->ctx, a->g, a->B, a->T, a->idx, a->tgt);
    if (a->measure) a->saved = tg_tape_saved_bytes(a->ctx);
    tg_backward(a->ctx, loss);
    tg_optim_step(a->ctx, a->opt);
    if (a->measure) a->peak = tg_arena_peak(a->ctx);
    tg_ctx_reset(a->ctx);
}

static void gpt_init(gpt_arg *a, int threads, int64_t L, int64_t H, int64_t C, int64_t T, int64_t B) {
    memset(a, 0, sizeof *a);
    tg_ctx *ctx = a->ctx = tg_ctx_new(7);
    tg_set_threads(ctx, threads);
    tg_gpt_config c = tg_gpt_defaults(TG_GPT_GPT2);
    c.n_layer = L, c.n_head = H, c.n_embd = C, c.context = T;
    a->g = tg_gpt_new(ctx, NULL, &c);
    tg_module_params(ctx, TG_MODULE(a->g), &a->params);
    tg_adam_opts ao = tg_adamw_defaults();
    ao.lr = 3e-3, ao.beta2 = 0.99, ao.weight_decay = 0.1; /* scripts/gpt_torch.py's adamw() */
    a->opt = tg_adamw_new(ctx, &a->params, &ao);
    a->B = B, a->T = T;
    a->idx = malloc((size_t)(B * T) * sizeof *a->idx);
    a->tgt = malloc((size_t)(B * T) * sizeof *a->tgt);
    for (int64_t i = 0; i < B * T; i++) {
        a->idx[i] = (int64_t)(tg_rng_uniform(ctx) * 128) % 128;
        a->tgt[i] = (int64_t)(tg_rng_uniform(ctx) * 128) % 128;
    }
    if (!tg_ok(ctx)) die_ctx(ctx, "GPT setup");
}

static void gpt_free(gpt_arg *a) {
    tg_optim_free(a->ctx, a->opt);
    tg_params_free(&a->params);
    tg_module_free(a->ctx, TG_MODULE(a->g));
    free(a->idx);
    free(a->tgt);
    tg_ctx_free(a->ctx);
}

/* The GEMM flops of a GPT-2 step: each Linear's three products (6 M in
 * out, M = B T rows): per layer qkv C x 3C, proj C x C, fc C x 4C, proj
 * 4C x C, i.e. 12 C^2; the tied output projection C x V; and attention's
 * six products on the causal half, 6 T^2 D per (batch, head). */
static double gpt_flops(int64_t L, int64_t C, int64_t T, int64_t B) {
    const double M = (double)(B * T);
    return 6.0 * M * (12.0 * (double)(C * C) * (double)L + (double)C * 128.0) +
           6.0 * (double)(B * L) * (double)(T * T) * (double)C;
}

/* The GPT-2 step at the issue's two sizes, beside PyTorch (the same model
 * from scripts/gpt_torch.py, AdamW, the same thread count); the step's
 * GEMM rate against the Linear rows'; the small size with 2 threads; the
 * peak memory. llm.c's train_gpt2.c is not run here: scripts/llmc_bench.sh
 * times it beside this step (`scripts/bench.sh --only llmc`, LLMC_DIR). */
/* The per-op profiles of the GPT steps (tg_profile), printed after the
 * table: where each step's time goes. */
static char gpt_profiles[12288];

static void profile_gpt_step(const char *name, gpt_arg *a) {
    tg_profile_enable(a->ctx, true);
    for (int i = 0; i < 10; i++) gpt_step(a);
    FILE *f = tmpfile();
    size_t len = strlen(gpt_profiles);
    if (f) {
        tg_profile_print(f, a->ctx);
        rewind(f);
        len += (size_t)snprintf(gpt_profiles + len, sizeof gpt_profiles - len,
                                "\nwhere the GPT-2 step %s's time goes (tg_profile, 10 steps):\n", name);
        if (len < sizeof gpt_profiles) len += fread(gpt_profiles + len, 1, sizeof gpt_profiles - 1 - len, f);
        gpt_profiles[len < sizeof gpt_profiles ? len : sizeof gpt_profiles - 1] = 0;
        fclose(f);
    }
    tg_profile_enable(a->ctx, false);
}

/* The per-op profile of 10 steps with 1 thread and with nt, side by side:
 * where the step's split over threads gains and where it does not (a
 * row's forward and backward milliseconds per step summed). */
static void profile_gpt_threads(gpt_arg *a, int nt, int threads) {
    enum { MAXR = 32 };
    tg_profile_row r1[MAXR], rn[MAXR];
    size_t n1 = 0, nn = 0;
    int64_t s1 = 1, sn = 1;
    for (int k = 0; k < 2; k++) {
        tg_set_threads(a->ctx, k ? nt : 1);
        tg_profile_enable(a->ctx, true);
        for (int i = 0; i < 10; i++) gpt_step(a);
        if (k) nn = tg_profile_rows(a->ctx, rn, MAXR, &sn);
        else n1 = tg_profile_rows(a->ctx, r1, MAXR, &s1);
        tg_profile_enable(a->ctx, false);
    }
    tg_set_threads(a->ctx, threads);
    size_t len = strlen(gpt_profiles);
#define APPEND(...)                                                                              \
    do {                                                                                         \
        if (len < sizeof gpt_profiles)                                                           \
            len += (size_t)snprintf(gpt_profiles + len, sizeof gpt_profiles - len, __VA_ARGS__); \
    } while (0)
    APPEND("\nwhere the GPT-2 step small's %d threads gain (tg_profile, 10 steps each, wall ms per step):\n", nt);
    APPEND("%-32s %10s %10s %8s %8s\n", "op", "1 thread", "threads", "speedup", "lost ms");
    double t1 = 0, tn = 0;
    for (size_t i = 0; i < n1; i++) {
        const double a1 = (r1[i].forward_s + r1[i].backward_s) * 1e3 / (double)s1;
        double an = NAN;
        for (size_t j = 0; j < nn; j++)
            if (!strcmp(rn[j].op, r1[i].op)) an = (rn[j].forward_s + rn[j].backward_s) * 1e3 / (double)sn;
        t1 += a1, tn += isnan(an) ? 0 : an;
        /* lost: what the row takes at nt threads beyond a perfect split */
        APPEND("%-32s %10.3f %10.3f %7.2fx %8.3f\n", r1[i].op, a1, an, a1 / an, an - a1 / nt);
    }
    APPEND("total %26.3f %10.3f %7.2fx %8.3f ms per step\n", t1, tn, t1 / tn, tn - t1 / nt);
#undef APPEND
}

static void bench_gpt(const options *o, const limits *lim) {
    static const struct {
        const char *name;
        int64_t L, H, C, T, B;
        double vs_torch;
    } cfg[2] = {{"tiny", 4, 4, 128, 64, 4, 1.8}, {"small", 6, 6, 384, 64, 4, 1.1}};
    double linear_rate = NAN; /* the biggest Linear row's GFLOP/s; timed here when that row did not run */
    for (int i = 0; i < nrows; i++)
        if (!strcmp(rows[i].group, "linear") && strstr(rows[i].name, "4096")) linear_rate = rows[i].rate;
    if (isnan(linear_rate)) {
        progress("Linear 4096x768x3072, the GEMM rate the GPT rows compare with");
        row scratch = {0}; /* for time_ours' bookkeeping; not printed */
        linear_arg la = linear_setup(4096, 768, 3072);
        const double t = time_ours(&scratch, la.ctx, o->threads, linear_step, &la, o->budget, 5, 2e-3).median_s;
        if (!tg_ok(la.ctx)) die_ctx(la.ctx, "Linear");
        tg_ctx_free(la.ctx);
        linear_rate = 6.0 * 4096 * 768 * 3072 / t * 1e-9;
    }
    for (int s = 0; s < 2; s++) {
        const int64_t L = cfg[s].L, H = cfg[s].H, C = cfg[s].C, T = cfg[s].T, B = cfg[s].B;
        progress("GPT-2 step %s: L=%lld H=%lld C=%lld T=%lld B=%lld", cfg[s].name, (long long)L, (long long)H,
                 (long long)C, (long long)T, (long long)B);
        gpt_arg a;
        gpt_init(&a, o->threads, L, H, C, T, B);
        row *r = new_row("gpt", "GPT-2 step %s L%lld C%lld T%lld B%lld AdamW", cfg[s].name, (long long)L, (long long)C,
                         (long long)T, (long long)B);
        size_t cap_after_timing, cap;
        bn_timing t = time_training_step(o, r, gpt_step, &a, a.ctx, &a.measure, &cap_after_timing, &cap, "GPT step");
        const double flops = gpt_flops(L, C, T, B), gflops = flops / t.median_s * 1e-9;
        r->ours_s = t.median_s;
        r->rate = 1.0 / t.median_s;
        snprintf(r->unit, sizeof r->unit, "steps/s");
        r->frac = gflops / fma32_for(lim, o->threads);
        snprintf(r->limit_name, sizeof r->limit_name, "FMA f32");
        torch_time(r, "gpt gpt2 %lld %lld %lld %lld %lld", (long long)L, (long long)H, (long long)C, (long long)T,
                   (long long)B);
        snprintf(r->extra, sizeof r->extra,
                 "%.0f tokens/s; %.2f M params; %.2f GFLOP/step at %.1f GFLOP/s (%.0f%% of the Linear row's "
                 "%.1f); llm.c: scripts/bench.sh --only llmc (LLMC_DIR)",
                 (double)(B * T) / t.median_s, (double)tg_params_numel(&a.params) * 1e-6, flops * 1e-9, gflops,
                 100 * gflops / linear_rate, linear_rate);
        profile_gpt_step(cfg[s].name, &a);
        char what[96];
        snprintf(what, sizeof what, "GPT-2 step %s vs PyTorch steps/s", cfg[s].name);
        add_target(r, what, r->ratio_torch, cfg[s].vs_torch, true, "x");
        if (s == 1) {
            add_target(r, "GPT-2 step small GFLOP/s / the Linear row's", gflops / linear_rate, 0.85, true, "x");
            if (o->threads == 1)
                add_target(r, "GPT-2 step small GEMM rate, % of the FMA peak", 100 * r->frac, 70, true, "%");
            row *q =
                memory_row(&a.params, a.opt, a.peak, a.saved, cap, cap_after_timing, "GPT-2 step small peak memory");
            add_target(q, "GPT-2 step small peak memory / needed", q->frac, 1.2, false, "x");
            /* PyTorch's: the RSS high-water mark of the same step in a fresh
             * process, above that process's RSS before the model was made
             * (bench/torch_bench.py gpt_mem) */
            char cmd[128];
            snprintf(cmd, sizeof cmd, "gpt_mem gpt2 %lld %lld %lld %lld %lld", (long long)L, (long long)H, (long long)C,
                     (long long)T, (long long)B);
            const double torch_mib = torch_number("peak_bytes", cmd) / (1 << 20);
            size_t len = strlen(q->extra);
            snprintf(q->extra + len, sizeof q->extra - len, "; PyTorch's step %.2f MiB (RSS high-water) -> %.2fx it",
                     torch_mib, q->rate / torch_mib);
            add_target(q, "GPT-2 step small peak memory / PyTorch's", q->rate / torch_mib, 1.0, false, "x");
            /* activation checkpointing (config.checkpoint): each block's
             * activations recomputed in backward instead of kept */
            const size_t plain_peak = a.peak;
            a.measure = false;
            a.g->config.checkpoint = true;
            row *k = new_row("gpt", "GPT-2 step small, checkpointed blocks");
            size_t kcap0, kcap1;
            const bn_timing tk =
                time_training_step(o, k, gpt_step, &a, a.ctx, &a.measure, &kcap0, &kcap1, "checkpointed GPT step");
            a.g->config.checkpoint = false;
            k->ours_s = tk.median_s;
            k->rate = 1.0 / tk.median_s;
            snprintf(k->unit, sizeof k->unit, "steps/s");
            snprintf(k->extra, sizeof k->extra,
                     "step arena %.2f MiB (saved %.2f) against %.2f without -> %.2fx; time %.2fx the plain step's",
                     (double)a.peak / (1 << 20), (double)a.saved / (1 << 20), (double)plain_peak / (1 << 20),
                     (double)a.peak / (double)plain_peak, tk.median_s / t.median_s);
            add_target(k, "GPT-2 step small checkpointed: step arena / without", (double)a.peak / (double)plain_peak,
                       0.4, false, "x");
            add_target(k, "GPT-2 step small checkpointed: time / without", tk.median_s / t.median_s, 1.4, false, "x");
            /* n threads against 1, alternating (bench_scaling). The 1.75x
             * target's gap, measured on the 2-core AMD EPYC VM (instrumented
             * pool, quiet samples only, 2026-12-02): 1T 115 ms, 2T 75.5 ms
             * (1.53x). At 2T the two threads were busy in tasks 69.5 and
             * 69.8 ms of the 75.5 (serial code outside the pool's jobs
             * 1.5 ms, waits for a last task ~3.6 ms): idle time and
             * imbalance are small. The gap is work: the tasks took 139 ms
             * of CPU against the 1-thread step's 115 ms (+21%), while two
             * independent 1-thread GEMMs on the two cores each ran at the
             * speed of one alone (so the cores do not slow each other).
             * The extra work is the split itself: each op's inputs were
             * written by the other core's tasks of the op before, and the
             * GEMMs of 256 rows re-pack A per column chunk and each thread
             * packs its own B (the 256x384 x K=1152/1536 products reach
             * ~260 GFLOP/s at 2T, the others ~300, 1T ~180); 1.75x needs
             * the 2T step at 65.7 ms, i.e. at most ~8 ms of extra work. */
            a.measure = false;
            row *w = scaling_row(o, lim, "GPT-2 step small", a.ctx, gpt_step, &a, flops * 1e-9, "GFLOP/s",
                                 lim->fma[1].f32_gflops / lim->fma[0].f32_gflops, "FMA");
            snprintf(what, sizeof what, "GPT-2 step small %d threads vs 1 thread", lim->nt);
            add_target(w, what, w->t1_s / w->tn_s, lim->nt == 2 ? 1.75 : 0.85 * lim->nt, true, "x");
            if (lim->nt > 1) profile_gpt_threads(&a, lim->nt, o->threads);
        }
        gpt_free(&a);
    }
}

/* ---- generation ------------------------------------------------------------ */

typedef struct gen_arg {
    tg_ctx *ctx;
    tg_gpt *g;
    tg_gen_opts opts;
    int64_t prompt[128], out[128];
} gen_arg;

/* 128 tokens after the 128-token prompt: the window grows to the context. */
static void gen_step(void *p) {
    gen_arg *a = p;
    if (tg_gpt_generate(a->ctx, a->g, 128, a->prompt, 128, &a->opts, a->out) != 128) die_ctx(a->ctx, "generate");
}

/* Tokens/s of tg_gpt_generate with and without the KV cache (the tiny
 * GPT-2 of the training rows, context 256): the cache makes each token one
 * position, where the loop without it runs a forward over the whole
 * window (129 .. 255 positions) per token. No PyTorch side. */
static void bench_generate(const options *o) {
    progress("generation: tiny GPT-2 at context 256, 128 tokens after 128, with and without the KV cache");
    gen_arg a = {.ctx = tg_ctx_new(7)};
    tg_gpt_config c = tg_gpt_defaults(TG_GPT_GPT2);
    c.n_layer = 4, c.n_head = 4, c.n_embd = 128, c.context = 256;
    a.g = tg_gpt_new(a.ctx, NULL, &c);
    for (int i = 0; i < 128; i++) a.prompt[i] = (int64_t)(tg_rng_uniform(a.ctx) * 128) % 128;
    a.opts = tg_gen_defaults();
    a.opts.seed = 1;
    if (!tg_ok(a.ctx)) die_ctx(a.ctx, "generation setup");
    row *r = new_row("generate", "GPT-2 generate tiny T256 KV cache");
    const double cached = time_ours(r, a.ctx, o->threads, gen_step, &a, o->budget, 5, 0.05).median_s;
    a.opts.use_cache = false;
    const double full = time_ours(r, a.ctx, o->threads, gen_step, &a, o->budget, 3, 0.05).median_s;
    r->ours_s = cached;
    r->rate = 128 / cached;
    snprintf(r->unit, sizeof r->unit, "tokens/s");
    snprintf(r->extra, sizeof r->extra,
             "128 tokens after a 128-token prompt; without the cache (a forward over the window per token) %.0f "
             "tokens/s -> %.1fx",
             128 / full, full / cached);
    add_target(r, "GPT-2 generate tiny T256: KV cache vs a forward per token", full / cached, 10, true, "x");
    tg_gpt_free(a.ctx, a.g);
    tg_ctx_free(a.ctx);
}

/* ---- low precision: Linear, the MLP and GPT-2 steps (--only lowp) ---------
 * Linear 4096x768x3072 forward+backward with x, W, b, dy in bfloat16
 * beside the f32 row, alternating (best median of LOWP_REPS each). The
 * bfloat16 products run the bfloat16 GEMM (tensor/gemm.h): on a CPU with
 * AVX-512 BF16 its VDPBF16PS kernel does twice the f32 FMA's work per
 * instruction, so the targets are 1.7x the f32 row and 1.1x PyTorch's
 * bfloat16 F.linear (oneDNN underneath); without those instructions its
 * kernel runs at float32 speed (two FMAs per pair of products), the row
 * says so and keeps the target it had when bfloat16 went through the
 * float32 GEMM: 0.9x the f32 row. The "of limit" column is against twice
 * the f32 FMA peak where VDPBF16PS runs (it issues as often as an FMA,
 * measured on this project's Zen 5: 6.5 G/s each), else against the f32
 * peak. The MLP step of bench_mlp (784-256-256-10, batch 64, Adam) and the
 * GPT-2 small step of bench_gpt in bfloat16 mixed precision
 * (tg_ctx_set_autocast: float32 master weights and optimizer state,
 * bfloat16 copies per step) beside their f32 steps, alternating; with
 * VDPBF16PS the targets are 1.4x the f32 step; PyTorch's
 * torch.autocast("cpu", torch.bfloat16) beside them. */

/* The bfloat16 GEMM's kernel here, and whether it is VDPBF16PS's. */
static bool lowp_native(void) { return tg_gemm_bf16_auto() == TG_GEMM_BF16_AVX512; }

static void lowp_kernel_note(char *buf, size_t size) {
    const char *k = tg_gemm_bf16_name(TG_GEMM_BF16_AUTO);
    if (lowp_native()) snprintf(buf, size, "bf16 GEMM kernel avx512bf16 (VDPBF16PS)");
    else if (tg_gemm_bf16_available(TG_GEMM_BF16_AVX512))
        snprintf(buf, size, "bf16 GEMM kernel %s (TG_GEMM_BF16), not VDPBF16PS: the targets of a CPU without it", k);
    else snprintf(buf, size, "this CPU has NO AVX-512 BF16: bf16 GEMM kernel %s (float32 speed), targets as before", k);
}

/* step(arg[k]) for k = 0 (f32) and 1 (bf16), alternating LOWP_REPS times:
 * each row's best median. */
static void lowp_alternate(const options *o, row *r[2], tg_ctx *ctx[2], void (*step)(void *), void *arg[2],
                           double budget, double sample_s, const char *what) {
    for (int k = 0; k < 2; k++) r[k]->ours_s = INFINITY;
    for (int rep = 0; rep < LOWP_REPS; rep++)
        for (int k = 0; k < 2; k++) {
            bn_timing t = time_ours(r[k], ctx[k], o->threads, step, arg[k], budget, 5, sample_s);
            if (!tg_ok(ctx[k])) die_ctx(ctx[k], what);
            r[k]->ours_s = fmin(r[k]->ours_s, t.median_s);
        }
}

static void bench_lowp_linear(const options *o, const limits *lim) {
    const int64_t M = 4096, K = 768, N = 3072;
    const double flops = 6.0 * (double)M * (double)N * (double)K;
    const bool native = lowp_native();
    progress("Linear f32 and bf16 %lldx%lldx%lld, alternating", (long long)M, (long long)K, (long long)N);
    row *r[2] = {new_row("lowp", "Linear f32 %lldx%lldx%lld fwd+bwd", (long long)M, (long long)K, (long long)N),
                 new_row("lowp", "Linear bf16 %lldx%lldx%lld fwd+bwd", (long long)M, (long long)K, (long long)N)};
    linear_arg a[2] = {linear_setup_dt(M, K, N, TG_F32), linear_setup_dt(M, K, N, TG_BF16)};
    lowp_alternate(o, r, (tg_ctx *[]){a[0].ctx, a[1].ctx}, linear_step, (void *[]){&a[0], &a[1]}, o->budget / 2, 2e-3,
                   "Linear bf16");
    for (int k = 0; k < 2; k++) {
        tg_ctx_free(a[k].ctx);
        r[k]->rate = flops / r[k]->ours_s * 1e-9;
        snprintf(r[k]->unit, sizeof r[k]->unit, "GFLOP/s");
        const bool dot = k == 1 && native;
        r[k]->frac = r[k]->rate / ((dot ? 2 : 1) * fma32_for(lim, o->threads));
        snprintf(r[k]->limit_name, sizeof r[k]->limit_name, dot ? "BF16 dot" : "FMA f32");
        torch_time(r[k], "linear%s %lld %lld %lld", k ? "_bf16" : "", (long long)M, (long long)K, (long long)N);
    }
    char note[128];
    lowp_kernel_note(note, sizeof note);
    snprintf(r[1]->extra, sizeof r[1]->extra,
             "%.2fx the f32 row's GFLOP/s (best of %d alternating timings each); %s; conversions: %s; PyTorch: "
             "bf16 F.linear",
             r[1]->rate / r[0]->rate, LOWP_REPS, note, tg_lowp_isa());
    if (native) {
        add_target(r[1], "Linear bf16 4096x768x3072 vs f32 (same run)", r[1]->rate / r[0]->rate, 1.7, true, "x");
        add_target(r[1], "Linear bf16 4096x768x3072 vs PyTorch bf16", r[1]->ratio_torch, 1.1, true, "x");
    } else {
        add_target(r[1], "Linear bf16 4096x768x3072 GFLOP/s vs f32 (same run)", r[1]->rate / r[0]->rate, 0.9, true,
                   "x");
    }
}

/* A training step's f32 and bf16 mixed rows, timed: their rates, the
 * bf16 row's note and, with VDPBF16PS, its target (what: its name). */
static void lowp_steps_done(row *r[2], const char *what) {
    for (int k = 0; k < 2; k++) {
        r[k]->rate = 1.0 / r[k]->ours_s;
        snprintf(r[k]->unit, sizeof r[k]->unit, "steps/s");
    }
    char note[128];
    lowp_kernel_note(note, sizeof note);
    snprintf(r[1]->extra, sizeof r[1]->extra,
             "%.2fx the f32 step's speed (best of %d alternating timings each); %s; PyTorch: torch.autocast bf16",
             r[0]->ours_s / r[1]->ours_s, LOWP_REPS, note);
    if (lowp_native()) add_target(r[1], what, r[0]->ours_s / r[1]->ours_s, 1.4, true, "x");
}

static void bench_lowp_mlp(const options *o) {
    const int64_t H = 256, B = 64;
    progress("MLP 784-%lld-%lld-10 batch %lld, f32 and bf16 mixed precision, alternating", (long long)H, (long long)H,
             (long long)B);
    row *r[2] = {
        new_row("lowp", "MLP step 784-%lld-%lld-10 b%lld f32", (long long)H, (long long)H, (long long)B),
        new_row("lowp", "MLP step 784-%lld-%lld-10 b%lld bf16 mixed", (long long)H, (long long)H, (long long)B)};
    mlp m[2];
    for (int k = 0; k < 2; k++) mlp_init(&m[k], H, B);
    tg_ctx_set_autocast(m[1].ctx, TG_BF16);
    lowp_alternate(o, r, (tg_ctx *[]){m[0].ctx, m[1].ctx}, mlp_step, (void *[]){&m[0], &m[1]}, 2 * o->budget, 5e-3,
                   "MLP step bf16");
    for (int k = 0; k < 2; k++) {
        mlp_free(&m[k]);
        torch_time(r[k], "%s %lld %lld", k ? "mlp_bf16" : "mlp", (long long)H, (long long)B);
    }
    lowp_steps_done(r, "MLP step bf16 mixed vs f32 (same run)");
}

static void bench_lowp_gpt(const options *o) {
    const int64_t L = 6, H = 6, C = 384, T = 64, B = 4;
    progress("GPT-2 step small, f32 and bf16 mixed precision, alternating");
    row *r[2] = {new_row("lowp", "GPT-2 step small L%lld C%lld T%lld B%lld f32", (long long)L, (long long)C,
                         (long long)T, (long long)B),
                 new_row("lowp", "GPT-2 step small L%lld C%lld T%lld B%lld bf16 mixed", (long long)L, (long long)C,
                         (long long)T, (long long)B)};
    gpt_arg g[2];
    for (int k = 0; k < 2; k++) gpt_init(&g[k], o->threads, L, H, C, T, B);
    tg_ctx_set_autocast(g[1].ctx, TG_BF16);
    lowp_alternate(o, r, (tg_ctx *[]){g[0].ctx, g[1].ctx}, gpt_step, (void *[]){&g[0], &g[1]}, 2 * o->budget, 5e-3,
                   "GPT step bf16");
    for (int k = 0; k < 2; k++) {
        gpt_free(&g[k]);
        torch_time(r[k], "%s gpt2 %lld %lld %lld %lld %lld", k ? "gpt_bf16" : "gpt", (long long)L, (long long)H,
                   (long long)C, (long long)T, (long long)B);
    }
    lowp_steps_done(r, "GPT-2 step small bf16 mixed vs f32 (same run)");
}

/* --only lowp runs all four parts, --only lowp-norm (-linear, -mlp, -gpt)
 * one of them. */
static void bench_lowp(const options *o, const limits *lim) {
    const char *part = o->only && !strncmp(o->only, "lowp-", 5) ? o->only + 5 : NULL;
    if (!part || !strcmp(part, "norm")) bench_lowp_norms(o, lim);
    if (!part || !strcmp(part, "linear")) bench_lowp_linear(o, lim);
    if (!part || !strcmp(part, "mlp")) bench_lowp_mlp(o);
    if (!part || !strcmp(part, "gpt")) bench_lowp_gpt(o);
}

/* ---- tiny op ------------------------------------------------------------- */

typedef struct tiny_arg {
    tg_ctx *ctx;
    tg_tensor *a, *b;
} tiny_arg;

/* c = a + b (1 element each), backward (a.grad, b.grad += 1), reset. */
static void tiny_step(void *p) {
    tiny_arg *t = p;
    tg_backward(t->ctx, tg_add(t->ctx, t->a, t->b));
    tg_ctx_reset(t->ctx);
}

static tiny_arg tiny_setup(void) {
    tg_ctx *ctx = tg_ctx_new(4);
    tiny_arg a = {ctx, tg_requires_grad(ctx, prand(ctx, TG_F32, TG_SHAPE(1), 0, 1)),
                  tg_requires_grad(ctx, prand(ctx, TG_F32, TG_SHAPE(1), 0, 1))};
    return a;
}

static void bench_tiny(const options *o) {
    progress("tiny op");
    row *r = new_row("tiny", "tiny op: add 1-elem + backward + reset");
    tiny_arg a = tiny_setup();
    bn_timing t = time_ours(r, a.ctx, o->threads, tiny_step, &a, o->budget, 11, 5e-3);
    if (!tg_ok(a.ctx)) die_ctx(a.ctx, "tiny op");
    tg_ctx_free(a.ctx);
    r->ours_s = t.median_s;
    r->rate = t.median_s * 1e9;
    snprintf(r->unit, sizeof r->unit, "ns/op");
    torch_time(r, "tiny");
    add_target(r, "tiny op record+backward", t.median_s * 1e6, 0.3, false, "us");
}

/* ---- --contend: 2 threads against 1 with a core taken -------------------- */

/* step(arg) with 1 and with nt threads while the spinner holds one CPU,
 * alternating sample by sample (each sample >= 5 ms of calls), in wall
 * time: the median n-thread sample against the median 1-thread sample.
 * Goal: at most 10% slower. */
static void contend_row(const options *o, const char *name, tg_ctx *ctx, void (*step)(void *), void *arg, int nt) {
    progress("contend: %s", name);
    row *r = new_row("contend", "%s", name);
    tg_set_threads(ctx, nt);
    step(arg);
    tg_set_threads(ctx, 1);
    step(arg);
    double t0 = bn_now();
    step(arg);
    double once = bn_now() - t0;
    if (once < 1e-4) { /* tiny calls: a better estimate */
        t0 = bn_now();
        for (int i = 0; i < 100; i++) step(arg);
        once = (bn_now() - t0) / 100;
    }
    const int inner = once >= 5e-3 ? 1 : (int)(5e-3 / once) + 1;
    int rounds = (int)(2 * o->budget / (2 * once * inner));
    rounds = rounds < 9 ? 9 : rounds > 41 ? 41 : rounds;
    double wall[2][41];
    meter a = meter_now();
    for (int i = 0; i < rounds; i++) {
        for (int k = 0; k < 2; k++) {
            const int kk = i % 2 ? 1 - k : k; /* alternate which goes first */
            tg_set_threads(ctx, kk ? nt : 1);
            double w0 = bn_now();
            for (int j = 0; j < inner; j++) step(arg);
            wall[kk][i] = (bn_now() - w0) / inner;
        }
    }
    meter b = meter_now();
    note_others(r, &a, &b);
    if (!tg_ok(ctx)) die_ctx(ctx, name);
    r->t1_s = median_of(wall[0], rounds);
    r->tn_s = median_of(wall[1], rounds);
    r->ours_s = r->tn_s;
    const double spin = b.spin - a.spin, wall_s = b.wall - a.wall;
    snprintf(r->extra, sizeof r->extra,
             "%d alternating samples of %d call%s; fastest 1T %.3g ms, %dT %.3g ms; spinner had %.0f%% of a CPU",
             rounds, inner, inner == 1 ? "" : "s", wall[0][0] * 1e3, nt, wall[1][0] * 1e3, 100 * spin / wall_s);
    char what[96];
    snprintf(what, sizeof what, "%.48s: %d threads vs 1, contended", name, nt);
    add_target(r, what, r->tn_s / r->t1_s, 1.10, false, "x");
}

static void run_contend(const options *o, int nt) {
    char name[64];
    if (!o->only || !strcmp(o->only, "norm")) {
        for (int kind = 0; kind < 2; kind++)
            for (int dti = 0; dti < 2; dti++)
                for (int s = 0; s < 3; s++) {
                    const int64_t N = norm_shapes[s][0], C = norm_shapes[s][1];
                    norm_arg a = norm_setup(kind, dti ? TG_F64 : TG_F32, N, C);
                    snprintf(name, sizeof name, "%s %s %lldx%lld fwd+bwd", norm_names[kind], dti ? "f64" : "f32",
                             (long long)N, (long long)C);
                    contend_row(o, name, a.ctx, norm_step, &a, nt);
                    tg_ctx_free(a.ctx);
                }
    }
    if (!o->only || !strcmp(o->only, "linear")) {
        for (int s = 0; s < 3; s++) {
            const int64_t M = linear_shapes[s][0], K = linear_shapes[s][1], N = linear_shapes[s][2];
            linear_arg a = linear_setup(M, K, N);
            snprintf(name, sizeof name, "Linear f32 %lldx%lldx%lld fwd+bwd", (long long)M, (long long)K, (long long)N);
            contend_row(o, name, a.ctx, linear_step, &a, nt);
            tg_ctx_free(a.ctx);
        }
    }
    if (!o->only || !strcmp(o->only, "mlp")) {
        for (int s = 0; s < 2; s++) {
            const int64_t H = mlp_sizes[s][0], B = mlp_sizes[s][1];
            mlp m;
            mlp_init(&m, H, B);
            snprintf(name, sizeof name, "MLP step 784-%lld-%lld-10 b%lld Adam", (long long)H, (long long)H,
                     (long long)B);
            contend_row(o, name, m.ctx, mlp_step, &m, nt);
            mlp_free(&m);
        }
    }
    if (!o->only || !strcmp(o->only, "attention")) {
        for (int f = 1; f >= 0; f--) {
            attn_arg a = attn_setup(f == 1);
            snprintf(name, sizeof name, "attention %s f32 4x6x256x64 causal", f ? "fused" : "composed");
            contend_row(o, name, a.ctx, attn_step, &a, nt);
            tg_ctx_free(a.ctx);
        }
    }
    if (!o->only || !strcmp(o->only, "gpt")) {                         /* the GPT-2 training steps of bench_gpt */
        static const int64_t sizes[2][3] = {{4, 4, 128}, {6, 6, 384}}; /* L, H, C; T 64, B 4 */
        for (int s = 0; s < 2; s++) {
            gpt_arg a;
            gpt_init(&a, 1, sizes[s][0], sizes[s][1], sizes[s][2], 64, 4);
            snprintf(name, sizeof name, "GPT-2 step %s L%lld C%lld T64 B4 AdamW", s ? "small" : "tiny",
                     (long long)sizes[s][0], (long long)sizes[s][2]);
            contend_row(o, name, a.ctx, gpt_step, &a, nt);
            gpt_free(&a);
        }
    }
    if (!o->only || !strcmp(o->only, "tiny")) {
        tiny_arg a = tiny_setup();
        contend_row(o, "tiny op: add 1-elem + backward + reset", a.ctx, tiny_step, &a, nt);
        tg_ctx_free(a.ctx);
    }
}

/* ---- output -------------------------------------------------------------- */

static void fmt_time(char *buf, size_t size, double s) {
    if (isnan(s)) snprintf(buf, size, "-");
    else if (s < 1e-6) snprintf(buf, size, "%.0f ns", s * 1e9);
    else if (s < 1e-3) snprintf(buf, size, "%.2f us", s * 1e6);
    else if (s < 1) snprintf(buf, size, "%.2f ms", s * 1e3);
    else snprintf(buf, size, "%.2f s", s);
}

static void target_text(char *buf, size_t size, const target *t) {
    const char *op = t->ge ? ">=" : "<=";
    if (!t->known) {
        snprintf(buf, size, "%s%g%s: not measured", op, t->goal, t->unit);
    } else if (t->met) {
        snprintf(buf, size, "%s%g%s: met (%.3g%s)", op, t->goal, t->unit, t->measured, t->unit);
    } else {
        /* by how much: the factor still missing, as a percentage */
        double miss = t->ge ? (t->goal / t->measured - 1) * 100 : (t->measured / t->goal - 1) * 100;
        snprintf(buf, size, "%s%g%s: MISSED by %.0f%% (%.3g%s)", op, t->goal, t->unit, miss, t->measured, t->unit);
    }
}

/* Rows measured while other jobs took more than this many CPUs get a '!'. */
#define BUSY_ROW 0.5

static void fill_target_texts(void) {
    for (int i = 0; i < ntargets; i++) {
        row *r = &rows[targets[i].row];
        char txt[128];
        target_text(txt, sizeof txt, &targets[i]);
        size_t len = strlen(r->target);
        snprintf(r->target + len, sizeof r->target - len, "%s%s", len ? "; " : "", txt);
    }
}

static void print_table(FILE *out) {
    fprintf(out, "%-44s %10s %14s %10s %10s %9s %10s %8s  %s\n", "case", "ours", "rate", "of limit", "PyTorch",
            "speedup", "OpenBLAS", "vs BLAS", "target");
    char last_group[12] = "";
    for (int i = 0; i < nrows; i++) {
        const row *r = &rows[i];
        if (strcmp(r->group, last_group) && i) fprintf(out, "\n");
        snprintf(last_group, sizeof last_group, "%s", r->group);
        char name[52], ours[24], torch[24], blas[24], rate[32], frac[32], sp[16], vb[16];
        snprintf(name, sizeof name, "%s%s", r->others > BUSY_ROW ? "!" : "", r->name);
        fmt_time(ours, sizeof ours, r->ours_s);
        fmt_time(torch, sizeof torch, r->torch_s);
        fmt_time(blas, sizeof blas, r->blas_s);
        if (isnan(r->rate)) snprintf(rate, sizeof rate, "-");
        else snprintf(rate, sizeof rate, "%.4g %s", r->rate, r->unit);
        if (isnan(r->frac)) snprintf(frac, sizeof frac, "-");
        else if (!strcmp(r->group, "memory")) snprintf(frac, sizeof frac, "%.2fx", r->frac);
        else snprintf(frac, sizeof frac, "%.0f%%", 100 * r->frac);
        if (isnan(r->ratio_torch)) snprintf(sp, sizeof sp, "-");
        else snprintf(sp, sizeof sp, "%.2fx", r->ratio_torch);
        if (isnan(r->ratio_blas)) snprintf(vb, sizeof vb, "-");
        else snprintf(vb, sizeof vb, "%.2fx", r->ratio_blas);
        fprintf(out, "%-44s %10s %14s %10s %10s %9s %10s %8s  %s\n", name, ours, rate, frac, torch, sp, blas, vb,
                r->target);
        if (r->extra[0]) fprintf(out, "%-44s   %s\n", "", r->extra);
    }
}

static void print_contend_table(FILE *out, int nt) {
    char hdr[24], hr[24];
    snprintf(hdr, sizeof hdr, "%d threads", nt);
    snprintf(hr, sizeof hr, "%dT/1T", nt);
    fprintf(out, "%-44s %10s %10s %8s %7s  %s\n", "case (one CPU taken by a spinner)", "1 thread", hdr, hr, "others",
            "target");
    for (int i = 0; i < nrows; i++) {
        const row *r = &rows[i];
        char t1[24], tn[24], ratio[16], oth[16];
        fmt_time(t1, sizeof t1, r->t1_s);
        fmt_time(tn, sizeof tn, r->tn_s);
        snprintf(ratio, sizeof ratio, "%.2fx", r->tn_s / r->t1_s);
        snprintf(oth, sizeof oth, "%.1f", r->others);
        fprintf(out, "%-44s %10s %10s %8s %7s  %s\n", r->name, t1, tn, ratio, oth, r->target);
        if (r->extra[0]) fprintf(out, "%-44s   %s\n", "", r->extra);
    }
}

/* What limits each missed target, from this run's own measurements. */
static void print_summary(FILE *out, const options *o) {
    int met = 0, known = 0;
    for (int i = 0; i < ntargets; i++) met += targets[i].met, known += targets[i].known;
    fprintf(out, "\ntargets met: %d of %d (%d measured)\n", met, ntargets, known);
    const int ncpu = bn_cpu_count();
    for (int i = 0; i < ntargets; i++) {
        const target *t = &targets[i];
        if (!t->known || t->met) continue;
        const row *r = &rows[t->row];
        fprintf(out, "missed: %s -- ", t->what);
        char busy[96] = "";
        if (!isnan(r->others))
            snprintf(busy, sizeof busy, "other jobs used %.1f of %d CPUs while it was timed", r->others, ncpu);
        if (!strcmp(r->group, "scaling"))
            fprintf(out,
                    "wall-clock scaling needs %d free cores; %s. The CPU time beside it says what the split allows "
                    "on free cores.\n",
                    o->threads > 2 ? o->threads : 2, busy);
        else if (!strcmp(r->group, "lowp") && strstr(t->what, "Norm") && strstr(t->what, "vs f32"))
            fprintf(out,
                    "bound by arithmetic, not memory: the 16-bit kernels convert in registers (no row buffer), "
                    "but they run the f32 row code's passes plus the conversions, 1.3x the f32 kernels' time per "
                    "element in cache, so they gain only the f32 row's memory stalls, which shrink when the L3 "
                    "holds much of its 50 MB (docs/normalization-gradients.md, Low precision; %s).\n",
                    busy);
        else if (!strcmp(r->group, "norm") || (!strcmp(r->group, "lowp") && strstr(t->what, "Norm")))
            fprintf(out,
                    "memory-bound: other jobs' memory traffic and cache use count against it (%s); compare the "
                    "other norm rows of this run.\n",
                    busy);
        else if (!strcmp(r->group, "linear") && r->frac > 0 && r->ratio_torch > 0 && r->ratio_blas > 0)
            /* Both sides run one sgemm per product: the gap is how close
             * each gets to the FMA peak, and the goal may lie past it. */
            fprintf(out,
                    "GEMM-bound on both sides: ours ran at %.0f%% of this run's FMA peak, PyTorch's (OpenBLAS sgemm "
                    "underneath) at %.0f%%, OpenBLAS's own sgemm at %.0f%%; %.2f%s would need %.0f%% of the peak "
                    "(%s).\n",
                    100 * r->frac, 100 * r->frac / r->ratio_torch, 100 * r->frac / r->ratio_blas, t->goal, t->unit,
                    100 * r->frac * t->goal / t->measured, busy);
        else if (!strcmp(r->group, "lowp") && strstr(t->what, "Linear"))
            fprintf(out,
                    "GEMM-bound: the row ran at %.0f%% of its limit (%s); a bf16 Linear's other work (the bias "
                    "gradient's pass over dy, the partial sums of a product over several K slices) is memory traffic "
                    "that the faster products do not shrink (%s).\n",
                    100 * r->frac, r->limit_name, busy);
        else if (!strcmp(r->group, "lowp") && strstr(t->what, "step"))
            fprintf(out,
                    "a mixed-precision step gains only in its products: its other ops (norms, attention, "
                    "elementwise, the optimizer on float32 master weights) read and write bfloat16 but compute in "
                    "float32, and it adds the casts of the weights to bfloat16 and of their gradients back (%s).\n",
                    busy);
        else if (!strcmp(r->group, "contend"))
            fprintf(out, "see the row's samples above (%s, beside the spinner).\n", busy);
        else if (!strcmp(r->group, "attention") && strstr(t->what, "saved bytes"))
            fprintf(out, "the tape counts the inputs and output a record keeps by pointer: the fused op's q, k, v, o "
                         "(4 T D per pair) against the composed form's q, k^T, v and P twice (3 T D + 2 T^2), so the "
                         "total falls below 1/8 only from T of about 15 D; beyond q, k, v, o it is one double per "
                         "row against T^2 (the next target, and docs/attention-gradients.md).\n");
        else if (strstr(t->what, "the Linear row's") && o->threads > 1)
            fprintf(out,
                    "the step's products have B T = 256 rows, the Linear row's 4096: with %d threads each product of "
                    "the step is cut into tasks of a few dozen rows that re-pack their share of A and re-read B, and "
                    "the step's other ops scale less, so the step gains less from the threads than the Linear row "
                    "(compare the two rows' 2T vs 1T lines; with 1 thread the ratio is higher) (%s).\n",
                    o->threads, busy);
        else fprintf(out, "see the row's numbers above (%s).\n", busy);
    }
}

/* s as a JSON string; NULL (a limit --contend does not measure) as null */
static void json_str(FILE *f, const char *s) {
    if (!s) {
        fputs("null", f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 0x20) fprintf(f, "\\u%04x", *s);
        else fputc(*s, f);
    }
    fputc('"', f);
}

static void json_num(FILE *f, double v) {
    if (isnan(v) || isinf(v)) fprintf(f, "null");
    else fprintf(f, "%.6g", v);
}

/* Writes `pre`, then the member "key": value. */
static void json_kstr(FILE *f, const char *pre, const char *key, const char *s) {
    fprintf(f, "%s\"%s\": ", pre, key);
    json_str(f, s);
}

static void json_knum(FILE *f, const char *pre, const char *key, double v) {
    fprintf(f, "%s\"%s\": ", pre, key);
    json_num(f, v);
}

typedef struct run_info {
    char date[64], cpu[128], blas_core[64];
    double load0, load1;
    double others_run; /* CPUs other jobs used over the whole run */
    int default_threads;
} run_info;

static bool write_json(const char *path, const options *o, const limits *lim, const run_info *ri) {
    FILE *f = fopen(path, "w");
    if (!f) return false;
    json_kstr(f, "{\n  ", "date", ri->date);
    json_kstr(f, ",\n  ", "cpu", ri->cpu);
    fprintf(f, ",\n  \"threads\": %d", o->threads);
    fprintf(f, ",\n  \"default_threads\": %d", ri->default_threads);
    fprintf(f, ",\n  \"contend\": %s", o->contend ? "true" : "false");
    json_kstr(f, ",\n  ", "gemm_kernel", tg_gemm_kernel_name());
    json_kstr(f, ",\n  ", "bf16_gemm_kernel", tg_gemm_bf16_name(TG_GEMM_BF16_AUTO));
    json_kstr(f, ",\n  ", "conversions_isa", tg_lowp_isa());
    fprintf(f, ",\n  \"only\": "); /* the group run (--only), for scripts/perf_doc.py's command lines */
    if (o->only) json_str(f, o->only);
    else fprintf(f, "null");
    fprintf(f, ",\n  \"torch\": ");
    if (nsrv && srv[0].version[0]) json_str(f, srv[0].version);
    else fprintf(f, "null");
    fprintf(f, ",\n  \"torch_threads\": %d", nsrv ? srv[0].threads : 0);
    fprintf(f, ",\n  \"torch_wait_policies\": [");
    for (int k = 0; k < nsrv; k++) fprintf(f, "%s\"%s\"", k ? ", " : "", srv_pol[k] ? "PASSIVE" : "default");
    fprintf(f, "]");
    json_knum(f, ",\n  ", "torch_cpu_while_ours_s", quiet.torch_cpu);
    json_knum(f, ",\n  ", "settle_max_s", quiet.settle_max);
    fprintf(f, ",\n  \"settle_failed\": %d", quiet.settle_fail);
    fprintf(f, ",\n  \"clock\": \"%s\"", bn_cpu_clock() ? "process_cpu" : "wall");
    json_kstr(f, ",\n  ", "torch_malloc", o->warm_malloc ? "warm" : "default");
    json_kstr(f, ",\n  ", "openblas_core", ri->blas_core);
    fprintf(f, ",\n  \"openblas_env_unset\": %s",
            getenv("OPENBLAS_CORETYPE") || getenv("OPENBLAS_L2_SIZE") ? "false" : "true");
    fprintf(f, ",\n  \"loadavg\": [");
    json_num(f, ri->load0);
    fprintf(f, ", ");
    json_num(f, ri->load1);
    fprintf(f, "]");
    json_knum(f, ",\n  ", "others_cpus_run", ri->others_run);
    json_knum(f, ",\n  ", "others_cpus_max", quiet.others_max);
    for (int k = 0; k < 2; k++) {
        fprintf(f, ",\n  \"limits_%dT\": {", k ? lim->nt : 1);
        json_knum(f, "", "copy_gbs", lim->stream[k].copy_gbs);
        json_knum(f, ", ", "triad_gbs", lim->stream[k].triad_gbs);
        json_knum(f, ", ", "fma_f32_gflops", lim->fma[k].f32_gflops);
        json_knum(f, ", ", "fma_f64_gflops", lim->fma[k].f64_gflops);
        json_kstr(f, ", ", "isa", lim->fma[k].isa);
        const bool clock_known = lim->fma[k].clock_ghz > 0;
        json_knum(f, ", ", "clock_ghz", clock_known ? lim->fma[k].clock_ghz : NAN);
        json_knum(f, ", ", "fma_f32_theory_gflops", clock_known ? lim->fma[k].f32_theory : NAN);
        json_knum(f, ", ", "fma_f64_theory_gflops", clock_known ? lim->fma[k].f64_theory : NAN);
        fprintf(f, "}");
    }
    fprintf(f, ",\n  \"cases\": [\n");
    for (int i = 0; i < nrows; i++) {
        const row *r = &rows[i];
        json_kstr(f, "    {", "name", r->name);
        json_kstr(f, ", ", "group", r->group);
        json_knum(f, ", ", "ours_s", r->ours_s);
        json_knum(f, ", ", "rate", r->rate);
        json_kstr(f, ", ", "unit", r->unit);
        json_knum(f, ", ", "fraction_of_limit", r->frac);
        json_kstr(f, ", ", "limit", r->limit_name);
        json_knum(f, ", ", "torch_s", r->torch_s);
        json_knum(f, ", ", "torch_default_wait_s", r->torch_pol[0]);
        json_knum(f, ", ", "torch_passive_wait_s", r->torch_pol[1]);
        json_knum(f, ", ", "speedup_vs_torch", r->ratio_torch);
        json_knum(f, ", ", "openblas_s", r->blas_s);
        json_knum(f, ", ", "openblas_rate", r->blas_rate);
        json_knum(f, ", ", "ratio_vs_openblas", r->ratio_blas);
        json_knum(f, ", ", "t1_s", r->t1_s);
        json_knum(f, ", ", "tn_s", r->tn_s);
        json_knum(f, ", ", "others_cpus", r->others);
        json_kstr(f, ", ", "note", r->extra);
        fprintf(f, "}%s\n", i + 1 < nrows ? "," : "");
    }
    fprintf(f, "  ],\n  \"targets\": [\n");
    for (int i = 0; i < ntargets; i++) {
        const target *t = &targets[i];
        json_kstr(f, "    {", "what", t->what);
        json_kstr(f, ", ", "case", rows[t->row].name);
        json_knum(f, ", ", "measured", t->known ? t->measured : NAN);
        json_knum(f, ", ", "goal", t->goal);
        fprintf(f, ", \"direction\": \"%s\"", t->ge ? ">=" : "<=");
        json_kstr(f, ", ", "unit", t->unit);
        fprintf(f, ", \"met\": %s}%s\n", !t->known ? "null" : t->met ? "true" : "false", i + 1 < ntargets ? "," : "");
    }
    fprintf(f, "  ]\n}\n");
    return fclose(f) == 0;
}

/* The header: when, where, how many threads, how quiet, how PyTorch and
 * OpenBLAS ran. */
static void print_header(FILE *out, const options *o, const run_info *ri, const bn_blas *blas) {
    struct utsname un;
    if (uname(&un) != 0) snprintf(un.release, sizeof un.release, "?");
    const int ncpu = bn_cpu_count();
    fprintf(out, "tapegrad benchmark, %s, %s (%s), %d thread%s%s, gemm kernel %s, bf16 gemm kernel %s\n", ri->date,
            ri->cpu, un.release, o->threads, o->threads == 1 ? "" : "s",
            o->contend ? " against 1 with one CPU taken (--contend)" : "", tg_gemm_kernel_name(),
            tg_gemm_bf16_name(TG_GEMM_BF16_AUTO));
    fprintf(out,
            "threads: --threads %d; a program that does not choose gets %d here (TG_THREADS=N when set, else the "
            "CPUs it may use: affinity mask, cgroup quota)\n",
            o->threads, ri->default_threads);
    const bool quiet_load = ri->load0 < 1.5;
    const bool quiet_run = !(ri->others_run > 0.25);
    fprintf(out,
            "machine: %d CPUs; load average %.1f before the run, %.1f after; other jobs used %.2f CPUs on average "
            "while ours was timed (at most %.1f; rows marked ! had > %.1f) -> %s\n",
            ncpu, ri->load0, ri->load1, ri->others_run, quiet.others_max, BUSY_ROW,
            quiet_load && quiet_run ? "quiet"
                                    : "NOT QUIET: wall-clock figures (2 threads, scaling) are unreliable; "
                                      "1-thread figures use CPU time");
    if (nsrv && srv[0].version[0]) {
        char pol[96] = "no OpenMP workers at 1 thread, so no wait policy applies";
        if (o->threads > 1) {
            if (nsrv == 2)
                snprintf(pol, sizeof pol,
                         "each case on two servers, OpenMP's default wait and OMP_WAIT_POLICY=PASSIVE, "
                         "the faster counts");
            else snprintf(pol, sizeof pol, "OMP_WAIT_POLICY=%s", srv_pol[0] ? "PASSIVE" : "(default)");
        }
        fprintf(out,
                "PyTorch: %s, %d thread%s, OPENBLAS_NUM_THREADS=%d; %s; settled (idle) before each of our timings: "
                "longest wait %.0f ms%s, its CPU while ours ran %.1f ms in all%s\n",
                srv[0].version, srv[0].threads, srv[0].threads == 1 ? "" : "s", o->threads, pol, quiet.settle_max * 1e3,
                quiet.settle_fail ? " (some did not settle in 3 s)" : "", quiet.torch_cpu * 1e3,
                o->warm_malloc ? "; glibc malloc kept warm (MALLOC_MMAP_THRESHOLD_/MALLOC_TRIM_THRESHOLD_ raised)"
                               : "; default glibc malloc");
    } else if (!o->contend) {
        fprintf(out, "PyTorch: not available\n");
    }
    if (!o->contend) {
        const bool blas_env = getenv("OPENBLAS_CORETYPE") || getenv("OPENBLAS_L2_SIZE");
        fprintf(out, "OpenBLAS: %s%s%s%s\n", blas->lib ? "libopenblas (dlopen), core " : "not found",
                blas->lib ? ri->blas_core : "",
                blas->lib && blas_env ? ", OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE set: "
                : blas->lib           ? ", OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE unset (its own choice)"
                                      : "",
                blas->lib && blas_env ? "a chosen kernel (compare with our build's kernel)" : "");
    }
    fprintf(out, "\n");
}

/* ---- main ---------------------------------------------------------------- */

static void usage(const char *argv0) {
    fprintf(stderr,
            "usage: %s [--threads N] [--json FILE] [--budget SECONDS] [--no-torch] [--no-blas]\n"
            "          [--python PATH] [--torch-script PATH] [--torch-malloc warm|default]\n"
            "          [--clock auto|wall|cpu] [--torch-wait default|passive|both]\n"
            "          [--only norm|linear|scaling|mlp|attention|gpt|generate|tiny|lowp|lowp-norm|lowp-linear|\n"
            "                  lowp-mlp|lowp-gpt] [--contend]\n"
            "fair OpenBLAS/PyTorch case: env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE %s ...\n",
            argv0, argv0);
}

/* bench/torch_bench.py beside this source file. */
static void default_script(char *buf, size_t size) {
    const char *file = __FILE__;
    const char *slash = strrchr(file, '/');
    if (!slash) snprintf(buf, size, "bench/torch_bench.py");
    else snprintf(buf, size, "%.*s/torch_bench.py", (int)(slash - file), file);
}

/* --only GROUP; lowp's parts (lowp-linear, ...) run in the lowp group. */
static bool run_group(const options *o, const char *g) {
    return !o->only || !strcmp(o->only, g) || (!strcmp(g, "lowp") && !strncmp(o->only, "lowp-", 5));
}

/* The PyTorch server(s), per --torch-wait. */
static void start_torch(const options *o) {
    int want = o->torch_wait;
    if (want == WAIT_AUTO) want = o->threads > 1 ? WAIT_BOTH : WAIT_DEFAULT;
    nsrv = 0;
    if (want == WAIT_DEFAULT || want == WAIT_BOTH) srv_pol[nsrv++] = 0;
    if (want == WAIT_PASSIVE || want == WAIT_BOTH) srv_pol[nsrv++] = 1;
    if (o->warm_malloc) {
        /* glibc: serve big blocks from the heap and never give freed
         * memory back, so PyTorch's temporaries reuse warm pages (as our
         * arena does) instead of faulting in fresh ones every call */
        setenv("MALLOC_MMAP_THRESHOLD_", "1073741824", 1);
        setenv("MALLOC_TRIM_THRESHOLD_", "4294967296", 1);
    }
    for (int k = 0; k < nsrv; k++) {
        progress("starting PyTorch (%s %s)%s", o->python, o->torch_script,
                 srv_pol[k] ? ", OMP_WAIT_POLICY=PASSIVE" : "");
        bn_torch_start(&srv[k], o->python, o->torch_script, o->threads, o->budget, bn_cpu_clock(),
                       srv_pol[k] ? "PASSIVE" : NULL);
        if (!srv[k].ok) progress("no PyTorch: %s", srv[k].why);
    }
    if (o->warm_malloc) {
        unsetenv("MALLOC_MMAP_THRESHOLD_");
        unsetenv("MALLOC_TRIM_THRESHOLD_");
    }
}

/* passive / default time ratio over the rows with both, into the footer */
static void print_policy_ratio(FILE *out) {
    double q[MAX_ROWS];
    int n = 0;
    for (int i = 0; i < nrows; i++)
        if (!isnan(rows[i].torch_pol[0]) && !isnan(rows[i].torch_pol[1]))
            q[n++] = rows[i].torch_pol[1] / rows[i].torch_pol[0];
    if (!n) return;
    const double med = median_of(q, n);
    fprintf(out,
            "PyTorch wait policy: PASSIVE / default time, median %.2f, range %.2f-%.2f over %d cases (below 1: "
            "PASSIVE faster); the faster of the two is in the table\n",
            med, q[0], q[n - 1], n);
}

int main(int argc, char **argv) {
    char script[4096];
    default_script(script, sizeof script);
    options o = {1, NULL, 0.6, true, true, "/usr/bin/python3", script, true, NULL, 0, WAIT_AUTO, false};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has = i + 1 < argc;
        if (!strcmp(a, "--threads") && has) o.threads = atoi(argv[++i]);
        else if (!strcmp(a, "--json") && has) o.json = argv[++i];
        else if (!strcmp(a, "--budget") && has) o.budget = atof(argv[++i]);
        else if (!strcmp(a, "--no-torch")) o.torch = false;
        else if (!strcmp(a, "--no-blas")) o.blas = false;
        else if (!strcmp(a, "--python") && has) o.python = argv[++i];
        else if (!strcmp(a, "--torch-script") && has) o.torch_script = argv[++i];
        else if (!strcmp(a, "--contend")) o.contend = true;
        else if (!strcmp(a, "--torch-malloc") && has) {
            const char *v = argv[++i];
            if (strcmp(v, "warm") && strcmp(v, "default")) {
                usage(argv[0]);
                return 2;
            }
            o.warm_malloc = !strcmp(v, "warm");
        } else if (!strcmp(a, "--torch-wait") && has) {
            const char *v = argv[++i];
            o.torch_wait = !strcmp(v, "default")   ? WAIT_DEFAULT
                           : !strcmp(v, "passive") ? WAIT_PASSIVE
                           : !strcmp(v, "both")    ? WAIT_BOTH
                                                   : -1;
            if (o.torch_wait < 0) {
                usage(argv[0]);
                return 2;
            }
        } else if (!strcmp(a, "--clock") && has) {
            const char *v = argv[++i];
            o.clock = !strcmp(v, "auto") ? 0 : !strcmp(v, "wall") ? 1 : !strcmp(v, "cpu") ? 2 : -1;
            if (o.clock < 0) {
                usage(argv[0]);
                return 2;
            }
        } else if (!strcmp(a, "--only") && has) o.only = argv[++i];
        else {
            usage(argv[0]);
            return 2;
        }
    }
    if (o.threads < 1 || o.budget <= 0) {
        usage(argv[0]);
        return 2;
    }
    /* auto: CPU time for one thread (robust on a shared machine), wall
     * time for more (CPU time would add up the threads) and for --contend */
    bn_use_cpu_clock(!o.contend && (o.clock == 2 || (o.clock == 0 && o.threads == 1)));

    run_info ri;
    memset(&ri, 0, sizeof ri);
    time_t now = time(NULL);
    strftime(ri.date, sizeof ri.date, "%Y-%m-%d %H:%M UTC", gmtime(&now));
    bn_cpu_name(ri.cpu, sizeof ri.cpu);
    ri.load0 = bn_loadavg();
    ri.default_threads = tg_default_threads();
    const int nt = o.threads > 2 ? o.threads : 2;

    /* 1. this machine's limits, with 1 thread and with nt */
    limits lim;
    memset(&lim, 0, sizeof lim);
    lim.nt = nt;
    bn_blas blas = {0};
    if (!o.contend) {
        progress("measuring the machine: STREAM (256 MiB arrays), FMA peak, 1 and %d threads", nt);
        for (int k = 0; k < 2; k++) {
            /* best of many short runs: other jobs' memory traffic only lowers them */
            lim.stream[k] = bn_stream((size_t)256 << 20, k ? nt : 1, 15);
            lim.fma[k] = bn_fma_peak(k ? nt : 1, 9);
            lim.dram[k] = fmax(lim.stream[k].copy_gbs, lim.stream[k].triad_gbs);
        }
        /* 2. the references: OpenBLAS in this process, PyTorch as servers */
        if (o.blas) blas = bn_blas_open();
        snprintf(ri.blas_core, sizeof ri.blas_core, "%s", blas.corename ? blas.corename() : "?");
        if (o.torch) start_torch(&o);
    }

    /* 3. the cases */
    meter m0 = meter_now();
    if (o.contend) {
        spinner = bn_spinner_start(bn_last_cpu());
        progress("--contend: a process spins on CPU %d (pid %d); every case with 1 and %d threads", bn_last_cpu(),
                 spinner, nt);
        bn_nap_ms(100);
        m0 = meter_now();
        run_contend(&o, nt);
    } else {
        if (run_group(&o, "norm")) bench_norms(&o, &lim);
        if (run_group(&o, "linear")) bench_linear(&o, &lim, &blas);
        if (run_group(&o, "scaling")) bench_scaling(&o, &lim);
        if (run_group(&o, "mlp")) bench_mlp(&o, &lim);
        if (run_group(&o, "attention")) bench_attention(&o, &lim);
        if (run_group(&o, "gpt")) bench_gpt(&o, &lim);
        if (run_group(&o, "generate")) bench_generate(&o);
        if (run_group(&o, "tiny")) bench_tiny(&o);
        if (run_group(&o, "lowp")) bench_lowp(&o, &lim);
    }
    meter m1 = meter_now();
    ri.others_run = meter_others(&m0, &m1);
    ri.load1 = bn_loadavg();
    bn_spinner_stop(spinner);
    for (int k = 0; k < nsrv; k++) bn_torch_stop(&srv[k]);

    /* 4. the table */
    fill_target_texts();
    print_header(stdout, &o, &ri, &blas);
    if (o.contend) {
        print_contend_table(stdout, nt);
        print_summary(stdout, &o);
        printf("times are medians of alternating samples in wall time; a process spinning on CPU %d the whole run; "
               "others = CPUs other jobs used beside it\n",
               bn_last_cpu());
    } else {
        print_table(stdout);
        fputs(gpt_profiles, stdout);
        print_summary(stdout, &o);
        char fma[2][160];
        for (int k = 0; k < 2; k++) bn_fma_describe(fma[k], sizeof fma[k], &lim.fma[k]);
        printf("limits: 1 thread: DRAM copy %.1f GB/s, triad %.1f GB/s; FMA peak f32 %.1f GFLOP/s, f64 %.1f (%s)\n",
               lim.stream[0].copy_gbs, lim.stream[0].triad_gbs, lim.fma[0].f32_gflops, lim.fma[0].f64_gflops, fma[0]);
        printf("        %d threads: DRAM copy %.1f GB/s, triad %.1f GB/s; FMA peak f32 %.1f GFLOP/s, f64 %.1f "
               "(best of runs, 256 MiB arrays; 1 thread on its CPU clock, %d in wall time)\n",
               nt, lim.stream[1].copy_gbs, lim.stream[1].triad_gbs, lim.fma[1].f32_gflops, lim.fma[1].f64_gflops, nt);
        print_policy_ratio(stdout);
        printf("clock: %s\n", bn_cpu_clock() ? "process CPU time (user+sys), the same in PyTorch (time.process_time): "
                                               "robust when other jobs share the cores; the scaling rows use wall time"
                                             : "wall time, the same in PyTorch");
        printf("times are medians (after a warm-up) per call; speedup = PyTorch time / ours; vs BLAS = our GFLOP/s / "
               "OpenBLAS's (3 sgemm calls); norm GB/s counts 5 N C elements (x twice, y, dy, dx)\n");
    }
    if (o.json) {
        if (!write_json(o.json, &o, &lim, &ri)) {
            fprintf(stderr, "bench: cannot write %s\n", o.json);
            return 1;
        }
        printf("JSON: %s\n", o.json);
    }
    bn_blas_close(&blas);
    return 0;
}

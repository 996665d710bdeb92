/* tapegrad's benchmark: `make bench` (scripts/bench.sh) runs it.
 *
 * It measures this machine's limits itself (STREAM-like copy/triad bandwidth
 * on 256 MiB arrays, the f32/f64 FMA peak), then times each case -- ours,
 * then PyTorch on the same shapes right after (a bench/torch_bench.py
 * server), then OpenBLAS where it applies -- and prints ONE table: our median
 * time, the rate (GB/s, GFLOP/s, steps/s), the fraction of the machine's
 * limit, PyTorch's median and the speedup, OpenBLAS, and our performance
 * targets (the add_target calls below: met, or missed by how much).
 * --json FILE writes the same as JSON. How the bench is organized:
 * docs/DESIGN.md.
 *
 * Cases (f32 unless said; every timing is a median of samples after a
 * warm-up, see bench/common/timing.c):
 *   RMSNorm / LayerNorm forward+backward, f32 and f64, (N,C) = (4096,768),
 *     (256,4096), (64,64): y = norm(x); backward from a fixed dy; grads of x,
 *     gamma (and beta) accumulate into their buffers. PyTorch: the composed
 *     RMSNorm x * rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w, and the
 *     native F.layer_norm. GB/s counts the bytes that must move: x read
 *     twice, y written, dy read, dx written (5 N C elements).
 *   Linear forward+backward (M,K,N) = (512,512,512), (64,784,256),
 *     (4096,768,3072): 6 M N K flops; OpenBLAS: the same three sgemm calls
 *     (y = x W^T, dx = dy W, dW = dy^T x) through dlopen.
 *   Linear 2 threads vs 1 thread at (4096,768,3072).
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
 *     with 2 threads vs 1 (wall, alternating) and its peak memory.
 *   Tiny op: c = a + b of 1-element tensors, backward, tg_ctx_reset.
 *
 * Usage: bench_vs_pytorch [--threads N] [--json FILE] [--budget S] [--no-torch]
 *                       [--no-blas] [--python PATH] [--torch-script PATH]
 *                       [--torch-malloc warm|default] [--clock auto|wall|cpu]
 *                       [--only GROUP]
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
#include <unistd.h>
#include <time.h>

/* ---- options and results ----------------------------------------------- */

typedef struct options {
    int threads;
    const char *json;
    double budget; /* seconds per timed side of a case */
    bool torch, blas;
    const char *python, *torch_script;
    bool warm_malloc; /* PyTorch with glibc's trimming off (see notes) */
    const char *only; /* run one group: norm, linear, scaling, mlp, attention, gpt, tiny */
    int clock;        /* 0 auto, 1 wall, 2 cpu */
} options;

typedef struct limits {
    bn_stream_result stream;
    bn_fma_result fma;
    double dram_gbs; /* max(copy, triad) */
} limits;

/* One row of the table. NaN means "not measured / not applicable". */
typedef struct row {
    char name[48];
    char group[12]; /* norm, linear, scaling, mlp, memory, attention, gpt, tiny */
    double ours_s;  /* our median seconds per call */
    double rate;    /* in `unit` */
    char unit[12];
    double frac;         /* rate / machine limit */
    char limit_name[24]; /* "DRAM", "FMA f32", ... */
    double torch_s;      /* PyTorch's median seconds per call */
    double blas_s;       /* OpenBLAS's median seconds (Linear) */
    double blas_rate;
    double ratio_torch; /* torch_s / ours_s: > 1 means we are faster */
    double ratio_blas;  /* our rate / OpenBLAS's rate */
    char extra[224];    /* free text (memory rows) */
    char target[160];   /* "met"/"MISSED" text */
} row;

#define MAX_ROWS 48
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
#define MAX_TARGETS 24
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

/* ---- PyTorch ------------------------------------------------------------- */

static bn_torch torch_srv;

/* PyTorch's median seconds for `cmd`, or NaN. */
static double torch_time(const char *fmt, ...) {
    if (!torch_srv.ok) return NAN;
    char cmd[256], reply[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    bn_nap_ms(50); /* let our OpenMP threads stop spinning */
    if (!bn_torch_call(&torch_srv, cmd, reply, sizeof reply)) {
        fprintf(stderr, "bench: PyTorch '%s' failed: %s\n", cmd, torch_srv.ok ? reply : torch_srv.why);
        return NAN;
    }
    bn_nap_ms(50);
    return bn_json_number(reply, "median_s");
}

/* ---- norms --------------------------------------------------------------- */

typedef struct norm_arg {
    tg_ctx *ctx;
    tg_tensor *x, *gamma, *beta, *dy;
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

static void bench_norms(const options *o, const limits *lim) {
    static const int64_t shapes[3][2] = {{4096, 768}, {256, 4096}, {64, 64}};
    for (int kind = 0; kind < 2; kind++) {
        for (int dti = 0; dti < 2; dti++) {
            tg_dtype dt = dti ? TG_F64 : TG_F32;
            const char *dts = dti ? "f64" : "f32";
            for (int s = 0; s < 3; s++) {
                const int64_t N = shapes[s][0], C = shapes[s][1];
                const char *kname = kind ? "LayerNorm" : "RMSNorm";
                progress("%s %s %lldx%lld", kname, dts, (long long)N, (long long)C);
                tg_ctx *ctx = tg_ctx_new(1);
                tg_set_threads(ctx, o->threads);
                norm_arg a = {ctx, NULL, NULL, NULL, NULL, kind == 1};
                a.x = tg_requires_grad(ctx, prand(ctx, dt, TG_SHAPE(N, C), 0, 1));
                a.gamma = tg_requires_grad(ctx, prand(ctx, dt, TG_SHAPE(C), 1, 0.1));
                a.beta = kind ? tg_requires_grad(ctx, prand(ctx, dt, TG_SHAPE(C), 0, 0.1)) : NULL;
                a.dy = prand(ctx, dt, TG_SHAPE(N, C), 0, 1);
                bn_timing t = bn_time(norm_step, &a, o->budget, 5, 2e-3);
                if (!tg_ok(ctx)) die_ctx(ctx, kname);
                tg_ctx_free(ctx);

                row *r = new_row("norm", "%s %s %lldx%lld fwd+bwd", kname, dts, (long long)N, (long long)C);
                const double es = dti ? 8.0 : 4.0;
                const double bytes = 5.0 * (double)(N * C) * es;
                r->ours_s = t.median_s;
                r->rate = bytes / t.median_s * 1e-9;
                snprintf(r->unit, sizeof r->unit, "GB/s");
                r->frac = r->rate / lim->dram_gbs;
                snprintf(r->limit_name, sizeof r->limit_name, "DRAM");
                r->torch_s = torch_time("norm %s %s %lld %lld", kind ? "ln" : "rms", dts, (long long)N, (long long)C);
                r->ratio_torch = r->torch_s / r->ours_s;
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
    }
}

/* ---- Linear -------------------------------------------------------------- */

typedef struct linear_arg {
    tg_ctx *ctx;
    tg_tensor *x, *w, *b, *dy;
} linear_arg;

/* The persistent operands of a Linear (M,K) -> (M,N): x and dy normal with
 * std 1, W and b with std 1/sqrt(K); x, W and b require grad. */
static linear_arg linear_setup(tg_ctx *ctx, int64_t M, int64_t K, int64_t N) {
    const double bound = 1.0 / sqrt((double)K);
    linear_arg a = {ctx, NULL, NULL, NULL, NULL};
    a.x = tg_requires_grad(ctx, prand(ctx, TG_F32, TG_SHAPE(M, K), 0, 1));
    a.w = tg_requires_grad(ctx, prand(ctx, TG_F32, TG_SHAPE(N, K), 0, bound));
    a.b = tg_requires_grad(ctx, prand(ctx, TG_F32, TG_SHAPE(N), 0, bound));
    a.dy = prand(ctx, TG_F32, TG_SHAPE(M, N), 0, 1);
    return a;
}

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

/* Timing of our Linear fwd+bwd with `threads` threads. */
static bn_timing time_linear(const options *o, int64_t M, int64_t K, int64_t N, int threads) {
    tg_ctx *ctx = tg_ctx_new(2);
    tg_set_threads(ctx, threads);
    linear_arg a = linear_setup(ctx, M, K, N);
    bn_timing t = bn_time(linear_step, &a, o->budget, 5, 2e-3);
    if (!tg_ok(ctx)) die_ctx(ctx, "Linear");
    tg_ctx_free(ctx);
    return t;
}

static void bench_linear(const options *o, const limits *lim, const bn_blas *blas) {
    static const int64_t shapes[3][3] = {{512, 512, 512}, {64, 784, 256}, {4096, 768, 3072}};
    for (int s = 0; s < 3; s++) {
        const int64_t M = shapes[s][0], K = shapes[s][1], N = shapes[s][2];
        progress("Linear %lldx%lldx%lld", (long long)M, (long long)K, (long long)N);
        const double flops = 6.0 * (double)M * (double)N * (double)K;
        row *r = new_row("linear", "Linear f32 %lldx%lldx%lld fwd+bwd", (long long)M, (long long)K, (long long)N);
        r->ours_s = time_linear(o, M, K, N, o->threads).median_s;
        r->rate = flops / r->ours_s * 1e-9;
        snprintf(r->unit, sizeof r->unit, "GFLOP/s");
        r->frac = r->rate / lim->fma.f32_gflops;
        snprintf(r->limit_name, sizeof r->limit_name, "FMA f32");
        r->torch_s = torch_time("linear %lld %lld %lld", (long long)M, (long long)K, (long long)N);
        r->ratio_torch = r->torch_s / r->ours_s;
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
            bn_nap_ms(50);
            bn_timing t = bn_time(blas_step, &b, o->budget, 5, 2e-3);
            bn_nap_ms(50);
            r->blas_s = t.median_s;
            r->blas_rate = flops / t.median_s * 1e-9;
            r->ratio_blas = r->rate / r->blas_rate;
            free(b.x), free(b.w), free(b.dy), free(b.y), free(b.dx), free(b.dw);
        }
        if ((M == 512 && K == 512) || M == 4096) {
            char what[96];
            snprintf(what, sizeof what, "Linear %lldx%lldx%lld vs OpenBLAS sgemm GFLOP/s", (long long)M, (long long)K,
                     (long long)N);
            add_target(r, what, r->ratio_blas, 0.8, true, "x");
        }
    }
}

/* Linear at 4096x768x3072 with 2 threads (or --threads when more) against
 * 1 thread, in wall time (CPU time cannot show a speedup). The two thread
 * counts alternate call by call, so both see the same load from other
 * jobs, and the speedup compares the fastest call of each: on a shared
 * machine the median mostly measures how often a core was taken away, the
 * fastest call is the one that had the cores. The CPU time of the calls
 * (all threads) is shown beside it: equal CPU time means the work split
 * without overhead, so nt x (1T CPU / nT CPU) is the speedup the code
 * allows when the cores are free. */
static int cmp_dbl(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* ROUNDS calls of step with 1 thread and with nt, alternating (after one
 * warm-up round): wall and CPU seconds of each call, sorted, [0] for 1
 * thread and [1] for nt. */
enum { ROUNDS = 11 };
static void alternate_threads(tg_ctx *ctx, void (*step)(void *), void *arg, int nt, double wall[2][ROUNDS],
                              double cpu[2][ROUNDS]) {
    for (int r = -1; r < ROUNDS; r++) { /* round -1: warm-up */
        for (int k = 0; k < 2; k++) {
            tg_set_threads(ctx, k ? nt : 1);
            double w0 = bn_now(), c0 = bn_process_cpu();
            step(arg);
            if (r >= 0) wall[k][r] = bn_now() - w0, cpu[k][r] = bn_process_cpu() - c0;
        }
    }
    for (int k = 0; k < 2; k++) {
        qsort(wall[k], ROUNDS, sizeof(double), cmp_dbl);
        qsort(cpu[k], ROUNDS, sizeof(double), cmp_dbl);
    }
}

static void bench_scaling(const options *o, const limits *lim) {
    const int64_t M = 4096, K = 768, N = 3072;
    const int nt = o->threads > 2 ? o->threads : 2;
    progress("Linear %lldx%lldx%lld, %d threads vs 1", (long long)M, (long long)K, (long long)N, nt);
    const double flops = 6.0 * (double)M * (double)N * (double)K;
    tg_ctx *ctx = tg_ctx_new(2);
    linear_arg a = linear_setup(ctx, M, K, N);
    double wall[2][ROUNDS], cpu[2][ROUNDS];
    alternate_threads(ctx, linear_step, &a, nt, wall, cpu);
    if (!tg_ok(ctx)) die_ctx(ctx, "Linear scaling");
    tg_ctx_free(ctx);
    const double t1 = wall[0][0], tn = wall[1][0];
    const double c1 = cpu[0][ROUNDS / 2], cn = cpu[1][ROUNDS / 2];
    row *r = new_row("scaling", "Linear %lldx%lldx%lld %dT vs 1T", (long long)M, (long long)K, (long long)N, nt);
    r->ours_s = tn;
    r->rate = flops / tn * 1e-9;
    snprintf(r->unit, sizeof r->unit, "GFLOP/s");
    /* fraction of the 1-thread peak times the thread count */
    r->frac = r->rate / (lim->fma.f32_gflops / o->threads * nt);
    snprintf(r->limit_name, sizeof r->limit_name, "FMA f32 x%d", nt);
    snprintf(r->extra, sizeof r->extra,
             "wall, fastest of %d alternating calls: 1T %.0f ms, %dT %.0f ms (medians %.0f, %.0f); "
             "CPU 1T %.0f ms, %dT %.0f ms -> %.2fx on free cores; load %.1f on %ld CPUs",
             ROUNDS, t1 * 1e3, nt, tn * 1e3, wall[0][ROUNDS / 2] * 1e3, wall[1][ROUNDS / 2] * 1e3, c1 * 1e3, nt,
             cn * 1e3, nt * c1 / cn, bn_loadavg(), sysconf(_SC_NPROCESSORS_ONLN));
    char what[96];
    snprintf(what, sizeof what, "Linear 4096x768x3072 %d threads vs 1 thread", nt);
    add_target(r, what, t1 / tn, nt == 2 ? 1.7 : 0.85 * nt, true, "x");
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
    size_t step_peak;   /* tg_arena_used at the end of the step */
    bool measure;       /* record both in the next step */
} mlp;

static tg_tensor *mlp_forward(mlp *m) {
    tg_ctx *ctx = m->ctx;
    tg_tensor *h = tg_relu(ctx, tg_rmsnorm_forward(ctx, m->n1, tg_linear_forward(ctx, m->fc1, m->x)));
    h = tg_relu(ctx, tg_rmsnorm_forward(ctx, m->n2, tg_linear_forward(ctx, m->fc2, h)));
    return tg_cross_entropy(ctx, tg_linear_forward(ctx, m->fc3, h), m->targets, NULL);
}

/* zero_grad, forward, loss, backward, Adam step, reset. */
static void mlp_step(void *p) {
    mlp *m = p;
    tg_optim_zero_grad(m->ctx, m->opt);
    tg_tensor *loss = mlp_forward(m);
    if (m->measure) m->saved_bytes = tg_tape_saved_bytes(m->ctx);
    tg_backward(m->ctx, loss);
    tg_optim_step(m->ctx, m->opt);
    /* nothing is freed before the reset: the arena in use now is the
     * step's high-water mark */
    if (m->measure) m->step_peak = tg_arena_used(m->ctx);
    tg_ctx_reset(m->ctx);
}

static void mlp_init(mlp *m, int threads, int64_t H, int64_t B) {
    memset(m, 0, sizeof *m);
    tg_ctx *ctx = m->ctx = tg_ctx_new(3);
    tg_set_threads(ctx, threads);
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

/* Times a training step (samples of >= 5 ms: tiny steps), then runs one
 * more with *measure set so it records its saved bytes and arena peak;
 * *cap_before and *cap_after are the arena's capacity around that step
 * (the footprint must not grow after the warm-up). */
static bn_timing time_training_step(const options *o, void (*step)(void *), void *arg, tg_ctx *ctx, bool *measure,
                                    size_t *cap_before, size_t *cap_after, const char *what) {
    bn_timing t = bn_time(step, arg, 4 * o->budget, 5, 5e-3);
    if (!tg_ok(ctx)) die_ctx(ctx, what);
    *cap_before = tg_arena_capacity(ctx);
    *measure = true;
    step(arg);
    *cap_after = tg_arena_capacity(ctx);
    return t;
}

static void bench_mlp(const options *o, const limits *lim) {
    static const int64_t sizes[2][2] = {{256, 64}, {64, 32}};
    for (int s = 0; s < 2; s++) {
        const int64_t H = sizes[s][0], B = sizes[s][1];
        progress("MLP 784-%lld-%lld-10 batch %lld", (long long)H, (long long)H, (long long)B);
        mlp m;
        mlp_init(&m, o->threads, H, B);
        size_t cap_after_timing, cap;
        bn_timing t = time_training_step(o, mlp_step, &m, m.ctx, &m.measure, &cap_after_timing, &cap, "MLP step");

        /* the GEMMs' flops: forward, dW and dx of each Linear (2 B in out
         * each), except dx of the first (its input needs no gradient) */
        const double flops = 2.0 * (double)B * (double)(2 * 784 * H + 3 * H * H + 3 * H * 10);
        row *r = new_row("mlp", "MLP step 784-%lld-%lld-10 b%lld Adam", (long long)H, (long long)H, (long long)B);
        r->ours_s = t.median_s;
        r->rate = 1.0 / t.median_s;
        snprintf(r->unit, sizeof r->unit, "steps/s");
        r->frac = flops / t.median_s * 1e-9 / lim->fma.f32_gflops;
        snprintf(r->limit_name, sizeof r->limit_name, "FMA f32");
        snprintf(r->extra, sizeof r->extra, "%.1f GFLOP/s in its GEMMs", flops / t.median_s * 1e-9);
        r->torch_s = torch_time("mlp %lld %lld", (long long)H, (long long)B);
        r->ratio_torch = r->torch_s / r->ours_s;
        add_target(r, H == 256 ? "MLP step hidden 256 vs PyTorch steps/s" : "MLP step hidden 64 vs PyTorch steps/s",
                   r->ratio_torch, H == 256 ? 2.0 : 5.0, true, "x");

        row *q = memory_row(&m.params, m.opt, m.step_peak, m.saved_bytes, cap, cap_after_timing,
                            "MLP peak memory 784-%lld-%lld-10 b%lld", (long long)H, (long long)H, (long long)B);
        add_target(q, H == 256 ? "MLP hidden 256 peak memory / needed" : "MLP hidden 64 peak memory / needed", q->frac,
                   1.2, false, "x");
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

static void bench_attention(const options *o, const limits *lim) {
    const int64_t B = 4, H = 6, T = 256, D = 64;
    double ours[2];
    size_t saved[2];
    row *rs[2];
    for (int f = 1; f >= 0; f--) {
        const char *form = f ? "fused" : "composed";
        progress("attention %s %lldx%lldx%lldx%lld", form, (long long)B, (long long)H, (long long)T, (long long)D);
        tg_ctx *ctx = tg_ctx_new(5);
        tg_set_threads(ctx, o->threads);
        attn_arg a = {ctx, NULL, NULL, NULL, NULL, f == 1, 0};
        a.q = tg_requires_grad(ctx, prand(ctx, TG_F32, TG_SHAPE(B, H, T, D), 0, 1));
        a.k = tg_requires_grad(ctx, prand(ctx, TG_F32, TG_SHAPE(B, H, T, D), 0, 1));
        a.v = tg_requires_grad(ctx, prand(ctx, TG_F32, TG_SHAPE(B, H, T, D), 0, 1));
        a.dO = prand(ctx, TG_F32, TG_SHAPE(B, H, T, D), 0, 1);
        bn_timing t = bn_time(attn_step, &a, o->budget, 5, 2e-3);
        if (!tg_ok(ctx)) die_ctx(ctx, "attention");
        tg_ctx_free(ctx);
        const double flops = 6.0 * (double)(B * H) * (double)(T * T) * (double)D;
        row *r = rs[f] = new_row("attention", "attention %s f32 %lldx%lldx%lldx%lld causal", form, (long long)B,
                                 (long long)H, (long long)T, (long long)D);
        ours[f] = r->ours_s = t.median_s;
        saved[f] = a.saved;
        r->rate = flops / t.median_s * 1e-9;
        snprintf(r->unit, sizeof r->unit, "GFLOP/s");
        r->frac = r->rate / lim->fma.f32_gflops;
        snprintf(r->limit_name, sizeof r->limit_name, "FMA f32");
        r->torch_s = torch_time("attn %s %lld %lld %lld %lld", f ? "sdpa" : "composed", (long long)B, (long long)H,
                                (long long)T, (long long)D);
        r->ratio_torch = r->torch_s / r->ours_s;
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
    size_t saved, peak; /* tg_tape_saved_bytes after the forward, tg_arena_used at the end */
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
    if (a->measure) a->peak = tg_arena_used(a->ctx);
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

/* The GPT-2 step at the two sizes, beside PyTorch (the same model
 * from scripts/gpt_torch.py, AdamW, the same thread count); the step's
 * GEMM rate against the Linear rows'; the small size with 2 threads; the
 * peak memory. llm.c's train_gpt2.c is not run here: the figures
 * for it (87 and 832 ms per step on this machine) are quoted. */
static void bench_gpt(const options *o, const limits *lim) {
    static const struct {
        const char *name;
        int64_t L, H, C, T, B;
        double vs_torch, llmc_ms;
    } cfg[2] = {{"tiny", 4, 4, 128, 64, 4, 1.8, 87}, {"small", 6, 6, 384, 64, 4, 1.1, 832}};
    double linear_rate = NAN; /* the biggest Linear row's GFLOP/s; timed here when that row did not run */
    for (int i = 0; i < nrows; i++)
        if (!strcmp(rows[i].group, "linear") && strstr(rows[i].name, "4096")) linear_rate = rows[i].rate;
    if (isnan(linear_rate)) {
        progress("Linear 4096x768x3072, the GEMM rate the GPT rows compare with");
        linear_rate = 6.0 * 4096 * 768 * 3072 / time_linear(o, 4096, 768, 3072, o->threads).median_s * 1e-9;
    }
    for (int s = 0; s < 2; s++) {
        const int64_t L = cfg[s].L, H = cfg[s].H, C = cfg[s].C, T = cfg[s].T, B = cfg[s].B;
        progress("GPT-2 step %s: L=%lld H=%lld C=%lld T=%lld B=%lld", cfg[s].name, (long long)L, (long long)H,
                 (long long)C, (long long)T, (long long)B);
        gpt_arg a;
        gpt_init(&a, o->threads, L, H, C, T, B);
        size_t cap_after_timing, cap;
        bn_timing t = time_training_step(o, gpt_step, &a, a.ctx, &a.measure, &cap_after_timing, &cap, "GPT step");
        const double flops = gpt_flops(L, C, T, B), gflops = flops / t.median_s * 1e-9;
        row *r = new_row("gpt", "GPT-2 step %s L%lld C%lld T%lld B%lld AdamW", cfg[s].name, (long long)L, (long long)C,
                         (long long)T, (long long)B);
        r->ours_s = t.median_s;
        r->rate = 1.0 / t.median_s;
        snprintf(r->unit, sizeof r->unit, "steps/s");
        r->frac = gflops / lim->fma.f32_gflops;
        snprintf(r->limit_name, sizeof r->limit_name, "FMA f32");
        r->torch_s = torch_time("gpt gpt2 %lld %lld %lld %lld %lld", (long long)L, (long long)H, (long long)C,
                                (long long)T, (long long)B);
        r->ratio_torch = r->torch_s / r->ours_s;
        snprintf(r->extra, sizeof r->extra,
                 "%.0f tokens/s; %.2f M params; %.2f GFLOP/step at %.1f GFLOP/s (%.0f%% of the Linear row's "
                 "%.1f); llm.c's quoted %.0f ms -> %.1fx",
                 (double)(B * T) / t.median_s, (double)tg_params_numel(&a.params) * 1e-6, flops * 1e-9, gflops,
                 100 * gflops / linear_rate, linear_rate, cfg[s].llmc_ms, cfg[s].llmc_ms * 1e-3 / t.median_s);
        char what[96];
        snprintf(what, sizeof what, "GPT-2 step %s vs PyTorch steps/s", cfg[s].name);
        add_target(r, what, r->ratio_torch, cfg[s].vs_torch, true, "x");
        if (s == 1) {
            add_target(r, "GPT-2 step small GFLOP/s / the Linear row's", gflops / linear_rate, 0.75, true, "x");
            row *q =
                memory_row(&a.params, a.opt, a.peak, a.saved, cap, cap_after_timing, "GPT-2 step small peak memory");
            add_target(q, "GPT-2 step small peak memory / needed", q->frac, 1.2, false, "x");
            /* 2 threads against 1, alternating, fastest calls (bench_scaling) */
            const int nt = o->threads > 2 ? o->threads : 2;
            double wall[2][ROUNDS], cpu[2][ROUNDS];
            alternate_threads(a.ctx, gpt_step, &a, nt, wall, cpu);
            if (!tg_ok(a.ctx)) die_ctx(a.ctx, "GPT step");
            row *w = new_row("scaling", "GPT-2 step small %dT vs 1T", nt);
            w->ours_s = wall[1][0];
            w->rate = 1.0 / wall[1][0];
            snprintf(w->unit, sizeof w->unit, "steps/s");
            snprintf(w->extra, sizeof w->extra,
                     "wall, fastest of %d alternating steps: 1T %.0f ms, %dT %.0f ms; CPU 1T %.0f ms, %dT %.0f ms "
                     "-> %.2fx on free cores; load %.1f on %ld CPUs",
                     ROUNDS, wall[0][0] * 1e3, nt, wall[1][0] * 1e3, cpu[0][ROUNDS / 2] * 1e3, nt,
                     cpu[1][ROUNDS / 2] * 1e3, nt * cpu[0][ROUNDS / 2] / cpu[1][ROUNDS / 2], bn_loadavg(),
                     sysconf(_SC_NPROCESSORS_ONLN));
            add_target(w, "GPT-2 step small 2 threads vs 1 thread", wall[0][0] / wall[1][0], 1.7, true, "x");
        }
        gpt_free(&a);
    }
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

static void bench_tiny(const options *o) {
    progress("tiny op");
    tg_ctx *ctx = tg_ctx_new(4);
    tg_set_threads(ctx, o->threads);
    tiny_arg a = {ctx, tg_requires_grad(ctx, prand(ctx, TG_F32, TG_SHAPE(1), 0, 1)),
                  tg_requires_grad(ctx, prand(ctx, TG_F32, TG_SHAPE(1), 0, 1))};
    bn_timing t = bn_time(tiny_step, &a, o->budget, 11, 5e-3);
    if (!tg_ok(ctx)) die_ctx(ctx, "tiny op");
    tg_ctx_free(ctx);
    row *r = new_row("tiny", "tiny op: add 1-elem + backward + reset");
    r->ours_s = t.median_s;
    r->rate = t.median_s * 1e9;
    snprintf(r->unit, sizeof r->unit, "ns/op");
    r->torch_s = torch_time("tiny");
    r->ratio_torch = r->torch_s / r->ours_s;
    add_target(r, "tiny op record+backward", t.median_s * 1e6, 0.3, false, "us");
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

static void print_table(FILE *out, const options *o, const limits *lim, double load_start) {
    for (int i = 0; i < ntargets; i++) {
        row *r = &rows[targets[i].row];
        char txt[128];
        target_text(txt, sizeof txt, &targets[i]);
        size_t len = strlen(r->target);
        snprintf(r->target + len, sizeof r->target - len, "%s%s", len ? "; " : "", txt);
    }
    fprintf(out, "%-44s %10s %14s %10s %10s %9s %10s %8s  %s\n", "case", "ours", "rate", "of limit", "PyTorch",
            "speedup", "OpenBLAS", "vs BLAS", "target");
    char last_group[12] = "";
    for (int i = 0; i < nrows; i++) {
        const row *r = &rows[i];
        if (strcmp(r->group, last_group) && i) fprintf(out, "\n");
        snprintf(last_group, sizeof last_group, "%s", r->group);
        char ours[24], torch[24], blas[24], rate[32], frac[32], sp[16], vb[16];
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
        fprintf(out, "%-44s %10s %14s %10s %10s %9s %10s %8s  %s\n", r->name, ours, rate, frac, torch, sp, blas, vb,
                r->target);
        if (r->extra[0]) fprintf(out, "%-44s   %s\n", "", r->extra);
    }
    int met = 0, known = 0;
    for (int i = 0; i < ntargets; i++) met += targets[i].met, known += targets[i].known;
    fprintf(out, "\ntargets met: %d of %d (%d measured)%s\n", met, ntargets, known,
            o->threads == 1 ? "" : "  [the targets are defined for 1 thread]");
    /* what limits each missed target, from this run's own measurements */
    const long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    const double load = fmax(load_start, bn_loadavg());
    for (int i = 0; i < ntargets; i++) {
        const target *t = &targets[i];
        if (!t->known || t->met) continue;
        const row *r = &rows[t->row];
        fprintf(out, "missed: %s -- ", t->what);
        if (!strcmp(r->group, "scaling"))
            fprintf(out,
                    "wall-clock scaling needs %d free cores; load average %.1f on %ld CPUs during this "
                    "run. The CPU time above says what the split allows on free cores.\n",
                    o->threads > 2 ? o->threads : 2, load, ncpu);
        else if (!strcmp(r->group, "norm"))
            fprintf(out,
                    "memory-bound: other jobs' traffic and cache use count against it (load %.1f on %ld "
                    "CPUs); compare the other norm rows of this run.\n",
                    load, ncpu);
        else if (!strcmp(r->group, "attention") && strstr(t->what, "saved bytes"))
            fprintf(out, "the tape counts the inputs and output a record keeps by pointer: the fused op's q, k, v, o "
                         "(4 T D per pair) against the composed form's q, k^T, v and P twice (3 T D + 2 T^2), so the "
                         "total falls below 1/8 only from T of about 15 D; beyond q, k, v, o it is one double per "
                         "row against T^2 (the next target, and docs/attention-gradients.md).\n");
        else fprintf(out, "see the row's numbers above (load %.1f on %ld CPUs).\n", load, ncpu);
    }
    char fma[160];
    fprintf(out,
            "limits (%d thread%s): DRAM copy %.1f GB/s, triad %.1f GB/s (best of runs, 256 MiB arrays); "
            "FMA peak f32 %.1f GFLOP/s, f64 %.1f GFLOP/s (%s)\n",
            o->threads, o->threads == 1 ? "" : "s", lim->stream.copy_gbs, lim->stream.triad_gbs, lim->fma.f32_gflops,
            lim->fma.f64_gflops, bn_fma_describe(fma, sizeof fma, &lim->fma));
}

static void json_str(FILE *f, const char *s) {
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

static bool write_json(const char *path, const options *o, const limits *lim, const char *date, const char *cpu,
                       double load0, double load1) {
    FILE *f = fopen(path, "w");
    if (!f) return false;
    json_kstr(f, "{\n  ", "date", date);
    json_kstr(f, ",\n  ", "cpu", cpu);
    fprintf(f, ",\n  \"threads\": %d", o->threads);
    json_kstr(f, ",\n  ", "gemm_kernel", tg_gemm_kernel_name());
    fprintf(f, ",\n  \"torch\": ");
    if (torch_srv.version[0]) json_str(f, torch_srv.version);
    else fprintf(f, "null");
    fprintf(f, ",\n  \"torch_threads\": %d", torch_srv.threads);
    fprintf(f, ",\n  \"clock\": \"%s\"", bn_cpu_clock() ? "process_cpu" : "wall");
    json_kstr(f, ",\n  ", "torch_malloc", o->warm_malloc ? "warm" : "default");
    fprintf(f, ",\n  \"openblas_env_unset\": %s",
            getenv("OPENBLAS_CORETYPE") || getenv("OPENBLAS_L2_SIZE") ? "false" : "true");
    fprintf(f, ",\n  \"loadavg\": [");
    json_num(f, load0);
    fprintf(f, ", ");
    json_num(f, load1);
    json_knum(f, "],\n  \"limits\": {", "copy_gbs", lim->stream.copy_gbs);
    json_knum(f, ", ", "triad_gbs", lim->stream.triad_gbs);
    json_knum(f, ", ", "fma_f32_gflops", lim->fma.f32_gflops);
    json_knum(f, ", ", "fma_f64_gflops", lim->fma.f64_gflops);
    json_kstr(f, ", ", "isa", lim->fma.isa);
    const bool clock_known = lim->fma.clock_ghz > 0;
    json_knum(f, ", ", "clock_ghz", clock_known ? lim->fma.clock_ghz : NAN);
    json_knum(f, ", ", "fma_f32_theory_gflops", clock_known ? lim->fma.f32_theory : NAN);
    json_knum(f, ", ", "fma_f64_theory_gflops", clock_known ? lim->fma.f64_theory : NAN);
    fprintf(f, "},\n  \"cases\": [\n");
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
        json_knum(f, ", ", "speedup_vs_torch", r->ratio_torch);
        json_knum(f, ", ", "openblas_s", r->blas_s);
        json_knum(f, ", ", "openblas_rate", r->blas_rate);
        json_knum(f, ", ", "ratio_vs_openblas", r->ratio_blas);
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

/* ---- main ---------------------------------------------------------------- */

static void usage(const char *argv0) {
    fprintf(stderr,
            "usage: %s [--threads N] [--json FILE] [--budget SECONDS] [--no-torch] [--no-blas]\n"
            "          [--python PATH] [--torch-script PATH] [--torch-malloc warm|default]\n"
            "          [--clock auto|wall|cpu] [--only norm|linear|scaling|mlp|attention|gpt|tiny]\n"
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

static bool run_group(const options *o, const char *g) { return !o->only || !strcmp(o->only, g); }

int main(int argc, char **argv) {
    char script[4096];
    default_script(script, sizeof script);
    options o = {1, NULL, 0.6, true, true, "/usr/bin/python3", script, true, NULL, 0};
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
        else if (!strcmp(a, "--torch-malloc") && has) {
            const char *v = argv[++i];
            if (strcmp(v, "warm") && strcmp(v, "default")) {
                usage(argv[0]);
                return 2;
            }
            o.warm_malloc = !strcmp(v, "warm");
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
     * time for more (CPU time would add up the threads) */
    bn_use_cpu_clock(o.clock == 2 || (o.clock == 0 && o.threads == 1));

    char date[64], cpu[128];
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", gmtime(&now));
    bn_cpu_name(cpu, sizeof cpu);
    const double load0 = bn_loadavg();
    const bool blas_env = getenv("OPENBLAS_CORETYPE") || getenv("OPENBLAS_L2_SIZE");

    /* 1. this machine's limits */
    limits lim;
    progress("measuring the machine: STREAM (256 MiB arrays), FMA peak, %d thread%s", o.threads,
             o.threads == 1 ? "" : "s");
    /* best of many short runs: other jobs' memory traffic only lowers them */
    lim.stream = bn_stream((size_t)256 << 20, o.threads, 15);
    lim.fma = bn_fma_peak(o.threads, 9);
    lim.dram_gbs = fmax(lim.stream.copy_gbs, lim.stream.triad_gbs);

    /* 2. the references: OpenBLAS in this process, PyTorch as a server */
    bn_blas blas = {0};
    if (o.blas) blas = bn_blas_open();
    if (o.torch) {
        progress("starting PyTorch (%s %s)", o.python, o.torch_script);
        if (o.warm_malloc) {
            /* glibc: serve big blocks from the heap and never give freed
             * memory back, so PyTorch's temporaries reuse warm pages (as our
             * arena does) instead of faulting in fresh ones every call */
            setenv("MALLOC_MMAP_THRESHOLD_", "1073741824", 1);
            setenv("MALLOC_TRIM_THRESHOLD_", "4294967296", 1);
        }
        bn_torch_start(&torch_srv, o.python, o.torch_script, o.threads, o.budget, bn_cpu_clock());
        if (o.warm_malloc) {
            unsetenv("MALLOC_MMAP_THRESHOLD_");
            unsetenv("MALLOC_TRIM_THRESHOLD_");
        }
        if (!torch_srv.ok) progress("no PyTorch: %s", torch_srv.why);
    }

    /* 3. the cases */
    if (run_group(&o, "norm")) bench_norms(&o, &lim);
    if (run_group(&o, "linear")) bench_linear(&o, &lim, &blas);
    if (run_group(&o, "scaling")) bench_scaling(&o, &lim);
    if (run_group(&o, "mlp")) bench_mlp(&o, &lim);
    if (run_group(&o, "attention")) bench_attention(&o, &lim);
    if (run_group(&o, "gpt")) bench_gpt(&o, &lim);
    if (run_group(&o, "tiny")) bench_tiny(&o);
    const double load1 = bn_loadavg();
    bn_torch_stop(&torch_srv);

    /* 4. the table */
    struct utsname un;
    if (uname(&un) != 0) snprintf(un.release, sizeof un.release, "?");
    printf("tapegrad benchmark, %s, %s (%s), %d thread%s, gemm kernel %s, load average %.1f -> %.1f\n", date, cpu,
           un.release, o.threads, o.threads == 1 ? "" : "s", tg_gemm_kernel_name(), load0, load1);
    char tver[96] = "not available";
    if (torch_srv.version[0])
        snprintf(tver, sizeof tver, "%s, %d thread%s", torch_srv.version, torch_srv.threads,
                 torch_srv.threads == 1 ? "" : "s");
    printf("PyTorch: %s%s; OpenBLAS: %s%s\n\n", tver,
           torch_srv.version[0] ? (o.warm_malloc ? " (glibc malloc kept warm: MALLOC_MMAP_THRESHOLD_/"
                                                   "MALLOC_TRIM_THRESHOLD_ raised)"
                                                 : " (default glibc malloc)")
                                : "",
           blas.lib ? "libopenblas (dlopen)" : "not found",
           blas_env ? " -- WARNING: OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE are set: run with env -u for the fair case"
                    : ", OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE unset (fair case)");
    print_table(stdout, &o, &lim, load0);
    printf("clock: %s\n", bn_cpu_clock() ? "process CPU time (user+sys), the same in PyTorch (time.process_time): "
                                           "robust when other jobs share the cores; the scaling row uses wall time"
                                         : "wall time");
    printf("times are medians (after a warm-up) per call; speedup = PyTorch time / ours; vs BLAS = our GFLOP/s / "
           "OpenBLAS's (3 sgemm calls); norm GB/s counts 5 N C elements (x twice, y, dy, dx)\n");
    if (o.json) {
        if (!write_json(o.json, &o, &lim, date, cpu, load0, load1)) {
            fprintf(stderr, "bench: cannot write %s\n", o.json);
            return 1;
        }
        printf("JSON: %s\n", o.json);
    }
    bn_blas_close(&blas);
    return 0;
}

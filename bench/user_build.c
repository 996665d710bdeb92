/* bench_user_build: the GPT example's training step as the build it runs in
 * gives it, for scripts/bench.sh to compare the build users run (the
 * default RelWithDebInfo build of `make demo`, with the lifetime checks of
 * TG_CHECKED) with the Release build the rest of the bench uses.
 *
 * The step is examples/gpt.c's default model (LLaMA, L4 H4 C128 T64,
 * vocabulary 256) at batch 16: zero-grad, forward and cross-entropy,
 * backward, clipping at 1, AdamW, reset. It runs in float32, and in
 * bfloat16 mixed precision (float32 parameters, layers under autocast) as
 * `gpt --dtype bf16` does. One line per dtype:
 *
 *   user_build <dtype> checked=<0|1> ms_per_step=<median> faults_per_step=<mean>
 *
 * faults_per_step counts the minor page faults (getrusage) of the steps
 * after the warm-up ones: a build that gives memory back and faults it in
 * again every step shows here (it once cost the default build 3.6x).
 *
 * Usage: bench_user_build [--steps N] [--threads N] */
#include "common/bench.h"

#include <tapegrad.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

typedef struct step_arg {
    tg_ctx *ctx;
    tg_gpt *g;
    tg_params params;
    tg_optim *opt;
    int64_t B, T, *idx, *tgt;
} step_arg;

static void train_step(step_arg *a) {
    tg_optim_zero_grad(a->ctx, a->opt);
    tg_tensor *loss = tg_gpt_loss(a->ctx, a->g, a->B, a->T, a->idx, a->tgt);
    tg_backward(a->ctx, loss);
    tg_clip_grad_norm(a->ctx, &a->params, 1.0);
    tg_optim_step(a->ctx, a->opt);
    tg_ctx_reset(a->ctx);
}

static long minor_faults(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_minflt;
}

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* Runs `steps` steps after 3 warm-up ones; false if the library failed. */
static bool run(tg_dtype compute, int steps, int threads) {
    step_arg a = {0};
    a.ctx = tg_ctx_new(1);
    tg_set_threads(a.ctx, threads);
    tg_gpt_config c = tg_gpt_defaults(TG_GPT_LLAMA);
    c.n_layer = 4, c.n_head = 4, c.n_embd = 128, c.context = 64, c.vocab_size = 256;
    a.g = tg_gpt_new(a.ctx, NULL, &c);
    tg_module_params(a.ctx, TG_MODULE(a.g), &a.params);
    tg_adam_opts ao = tg_adamw_defaults();
    ao.lr = 2e-3, ao.beta2 = 0.99, ao.weight_decay = 0.1; /* examples/gpt.c's */
    a.opt = tg_adamw_new(a.ctx, &a.params, &ao);
    tg_ctx_set_autocast(a.ctx, compute);
    a.B = 16, a.T = c.context;
    a.idx = malloc((size_t)(a.B * a.T) * sizeof *a.idx);
    a.tgt = malloc((size_t)(a.B * a.T) * sizeof *a.tgt);
    double *ms = malloc((size_t)steps * sizeof *ms);
    bool ok = a.idx && a.tgt && ms && tg_ok(a.ctx);
    for (int64_t i = 0; ok && i < a.B * a.T; i++) {
        a.idx[i] = (int64_t)(tg_rng_uniform(a.ctx) * 256) % 256;
        a.tgt[i] = (int64_t)(tg_rng_uniform(a.ctx) * 256) % 256;
    }
    for (int i = 0; ok && i < 3; i++) train_step(&a);
    long faults = minor_faults();
    for (int i = 0; ok && i < steps; i++) {
        double t0 = bn_now();
        train_step(&a);
        ms[i] = (bn_now() - t0) * 1e3;
    }
    faults = minor_faults() - faults;
    ok = ok && tg_ok(a.ctx);
    if (ok) {
        qsort(ms, (size_t)steps, sizeof *ms, cmp_double);
        const int checked = tg_arena_quarantined(a.ctx) > 0; /* the lifetime checks' quarantine */
        printf("user_build %s checked=%d ms_per_step=%.3f faults_per_step=%.1f\n", tg_dtype_name(compute), checked,
               ms[steps / 2], (double)faults / steps);
    } else {
        fprintf(stderr, "bench_user_build: %s\n", tg_ok(a.ctx) ? "out of memory" : tg_error_message(a.ctx));
    }
    free(ms);
    free(a.idx);
    free(a.tgt);
    tg_optim_free(a.ctx, a.opt);
    tg_params_free(&a.params);
    tg_module_free(a.ctx, TG_MODULE(a.g));
    tg_ctx_free(a.ctx);
    return ok;
}

int main(int argc, char **argv) {
    int steps = 20, threads = 1;
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && !strcmp(argv[i], "--steps")) steps = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--threads")) threads = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_user_build [--steps N >= 1] [--threads N >= 1]\n");
            return 2;
        }
    }
    if (steps < 1 || threads < 1) {
        fprintf(stderr, "bench_user_build: --steps %d and --threads %d must be >= 1\n", steps, threads);
        return 2;
    }
    bool ok = run(TG_F32, steps, threads) && run(TG_BF16, steps, threads);
    return ok ? 0 : 1;
}

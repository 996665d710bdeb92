/* Data-parallel training speed (tapegrad/dist.h): steps per second of two
 * training steps on a global batch of B --
 *   the MLP: 784-H-H-10 with RMSNorm, cross-entropy, Adam (the step of
 *            bench_vs_pytorch's MLP rows), B rows;
 *   the GPT: tg_gpt, GPT-2's architecture, with AdamW -- the issue's
 *            "small" size (6 layers, 6 heads, C 384, T 64; the size of
 *            bench_vs_pytorch's "GPT-2 step small" row) or, with
 *            --gpt tiny, examples/gpt's default size (4 layers, 4 heads,
 *            C 128, T 64) -- B sequences of T tokens --
 * each run as
 *
 *   1 process  x 1 thread                 the baseline
 *   1 process  x 1 thread, 2 micro-batches  the gradient accumulator's cost
 *   1 process  x 2 threads                the same cores used by threads
 *   2 processes x 1 thread, reduce after  mpirun -np 2: B/2 rows each, the
 *                                          grads summed by
 *                                          tg_dist_allreduce_grads
 *   2 processes x 1 thread, under backward the same, summed by
 *                                          tg_dist_backward as backward runs
 *
 * and, for the 2-process runs, the time spent in the all-reduce
 * (including the wait for the slower rank; under backward, what backward
 * did not cover): its share of the whole run, and that share of a median
 * step in ms. --allreduce times the all-reduce alone against
 * MPI_Allreduce and a ring; --zero reports per-rank memory with the
 * optimizer state split over 1, 2 and 4 processes (tg_dist_shard). The target: 2 processes
 * at least 1.7x the steps/s of 1 process x 1 thread on the GPT small step,
 * on a quiet machine. Run it as
 *   build-release/bench/bench_dist [--model mlp|gpt|all] [--gpt small|tiny] [--hidden H] [--batch B]
 *                                  [--samples N]
 * or as the dist section of `make bench` (scripts/bench.sh --only dist).
 * It starts the 2-process run itself (the launcher CMake found, with
 * --allow-run-as-root as root), as `bench_dist --worker ...` under
 * mpirun; without MPI (TG_MPI=OFF) that row says so. Timings on a shared
 * 2-core machine are noisy: only a quiet machine gives two processes two
 * whole cores. So the header gives the load average, and each row the
 * CPUs other jobs took while it ran (the machine's busy time from
 * /proc/stat minus this process's and its children's, the mpirun ranks,
 * over the wall time); the verdict uses bench_vs_pytorch's thresholds:
 * quiet when the load average before was under QUIET_LOAD and no row saw
 * other jobs take more than QUIET_OTHERS CPUs.
 *
 * Every configuration times the same fixed schedule -- 3 warm-up steps,
 * then N samples of K steps, K chosen by rank 0 so that a sample lasts
 * about 0.2 s and broadcast -- since ranks that timed different numbers
 * of steps would wait for each other's collectives forever. The rate is K
 * over the median sample. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/common/bench.h"
#include "tapegrad.h"
#include "tapegrad/dist.h"

#if TG_HAVE_MPI
#include <mpi.h> /* the references of --allreduce: MPI_Allreduce and a ring of MPI_Sendrecv */
#endif

extern char **environ;

typedef enum kind { MLP, GPT } kind;

typedef struct options {
    kind model;
    bool tiny; /* --gpt tiny */
    int64_t hidden, batch;
    int samples;
    bool allreduce; /* --allreduce: the all-reduce alone against MPI's and a ring */
    bool after;     /* --after: the 2-process all-reduce after backward, not under it (tg_dist_backward) */
    bool zero;      /* --zero: per-rank memory with the optimizer state split (tg_dist_shard), P = 1, 2, 4 */
    int np;         /* processes of the mpirun run */
} options;

/* bench_vs_pytorch's verdict (its header): a quiet machine had a load
 * average under this before the run, and other jobs took at most this
 * many CPUs while ours was timed. */
#define QUIET_LOAD 1.5
#define QUIET_OTHERS 0.25
/* The target for 2 processes on the GPT small step. */
#define TARGET 1.7

/* The GPT's size: GPT-2's architecture (tg_gpt) at the "small"
 * size, or "tiny" (examples/gpt's default). --batch counts sequences of
 * T tokens over a byte vocabulary of 128. */
static tg_gpt_config gpt_config(bool tiny) {
    tg_gpt_config c = tg_gpt_defaults(TG_GPT_GPT2); /* 4 layers, 4 heads, C 128, T 64: tiny */
    if (!tiny) c.n_layer = 6, c.n_head = 6, c.n_embd = 384;
    return c;
}

/* One training setup: the model, its optimizer, the global batch and the
 * rows [start, start + count) this process trains on (MLP: rows of 784
 * inputs; GPT: sequences of T tokens). */
typedef struct net {
    kind model;
    tg_ctx *ctx;
    tg_dist *dist; /* NULL: one process */
    tg_model layers;
    tg_params params;
    tg_optim *opt;
    tg_grad_accum *acc; /* micro > 1 */
    int micro;          /* micro-batches per step in this process */
    bool after;         /* the all-reduce after backward (else under it: tg_dist_backward) */
    int64_t batch, start, count;
    /* MLP */
    tg_linear *fc1, *fc2, *fc3;
    tg_rmsnorm *n1, *n2;
    float *x;   /* (batch, 784) */
    int64_t *y; /* MLP: (batch) labels; GPT: (batch, T) next tokens */
    /* GPT */
    tg_gpt *gpt;
    int64_t T;
    int64_t *tokens; /* (batch, T) */
} net;

static void die(tg_ctx *ctx, const char *what) {
    fprintf(stderr, "bench_dist: %s: %s\n", what, tg_error_message(ctx));
    exit(1);
}

/* Adds layer to the model and returns it (NULL when it could not be). */
#define ADD(n, layer) (tg_model_add((n)->ctx, &(n)->layers, TG_MODULE(layer)) ? (layer) : NULL)

static void mlp_build(net *m, const options *o) {
    tg_ctx *ctx = m->ctx;
    const int64_t H = o->hidden;
    m->fc1 = ADD(m, tg_linear_new1(ctx, "fc1", 784, H));
    m->n1 = ADD(m, tg_rmsnorm_new1(ctx, "norm1", H));
    m->fc2 = ADD(m, tg_linear_new1(ctx, "fc2", H, H));
    m->n2 = ADD(m, tg_rmsnorm_new1(ctx, "norm2", H));
    m->fc3 = ADD(m, tg_linear_new1(ctx, "fc3", H, 10));
    m->x = malloc((size_t)o->batch * 784 * sizeof *m->x);
    m->y = malloc((size_t)o->batch * sizeof *m->y);
    if (!m->x || !m->y) die(ctx, "out of memory");
    for (int64_t i = 0; i < o->batch * 784; i++) m->x[i] = (float)tg_rng_uniform(ctx);
    for (int64_t i = 0; i < o->batch; i++) m->y[i] = (int64_t)(tg_rng_uniform(ctx) * 10) % 10;
}

static void gpt_build(net *m, const options *o) {
    tg_ctx *ctx = m->ctx;
    tg_gpt_config c = gpt_config(o->tiny);
    m->gpt = tg_gpt_new(ctx, NULL, &c);
    m->T = c.context;
    m->tokens = malloc((size_t)(o->batch * m->T) * sizeof *m->tokens);
    m->y = malloc((size_t)(o->batch * m->T) * sizeof *m->y);
    if (!m->gpt || !m->tokens || !m->y) die(ctx, "GPT setup");
    /* random bytes; the next token is the target */
    int64_t t = 0;
    for (int64_t i = 0; i < o->batch * m->T; i++) {
        m->tokens[i] = t;
        m->y[i] = t = (int64_t)(tg_rng_uniform(ctx) * c.vocab_size) % c.vocab_size;
    }
}

static void net_init(net *m, tg_dist *dist, const options *o, int threads, int micro) {
    memset(m, 0, sizeof *m);
    tg_ctx *ctx = m->ctx = tg_ctx_new(3);
    m->model = o->model;
    m->dist = dist;
    m->micro = micro;
    tg_set_threads(ctx, threads);
    if (o->model == MLP) {
        mlp_build(m, o);
        tg_model_params(ctx, &m->layers, &m->params);
        tg_adam_opts ao = tg_adam_defaults();
        m->opt = tg_adam_new(ctx, &m->params, &ao);
    } else {
        gpt_build(m, o);
        tg_module_params(ctx, TG_MODULE(m->gpt), &m->params);
        tg_adam_opts ao = tg_adamw_defaults();
        ao.lr = 3e-3, ao.beta2 = 0.99, ao.weight_decay = 0.1; /* bench_vs_pytorch's GPT rows */
        m->opt = tg_adamw_new(ctx, &m->params, &ao);
    }
    if (micro > 1) m->acc = tg_grad_accum_new(ctx, &m->params);
    /* the global batch (the same in every process) and this process's part */
    m->batch = o->batch;
    tg_dist_split(o->batch, tg_dist_size(dist), tg_dist_rank(dist), &m->start, &m->count);
    if (!tg_ok(ctx)) die(ctx, "setup");
}

static void net_free(net *m) {
    tg_grad_accum_free(m->ctx, m->acc);
    tg_optim_free(m->ctx, m->opt);
    tg_params_free(&m->params);
    tg_model_free(m->ctx, &m->layers);
    if (m->gpt) tg_module_free(m->ctx, TG_MODULE(m->gpt));
    free(m->x);
    free(m->y);
    free(m->tokens);
    tg_ctx_free(m->ctx);
}

/* The MLP's mean loss over rows [start, start + count). */
static tg_tensor *mlp_loss(net *m, int64_t start, int64_t count) {
    tg_ctx *ctx = m->ctx;
    tg_tensor *x = tg_from_buffer(ctx, TG_F32, TG_SHAPE(count, 784), m->x + start * 784);
    tg_tensor *h = tg_relu(ctx, tg_rmsnorm_forward(ctx, m->n1, tg_linear_forward(ctx, m->fc1, x)));
    h = tg_relu(ctx, tg_rmsnorm_forward(ctx, m->n2, tg_linear_forward(ctx, m->fc2, h)));
    return tg_cross_entropy(ctx, tg_linear_forward(ctx, m->fc3, h), m->y + start, NULL);
}

/* Forward and backward of rows [start, start + count): the grads of their
 * mean loss; with reduce, summed over the processes under backward
 * (tg_dist_backward, weight count / batch). */
static void net_backward(net *m, int64_t start, int64_t count, bool reduce) {
    tg_tensor *loss = m->model == MLP
                          ? mlp_loss(m, start, count)
                          : tg_gpt_loss(m->ctx, m->gpt, count, m->T, m->tokens + start * m->T, m->y + start * m->T);
    tg_optim_zero_grad(m->ctx, m->opt);
    if (reduce) tg_dist_backward(m->ctx, m->dist, loss, &m->params, (double)count / (double)m->batch);
    else tg_backward(m->ctx, loss);
}

/* One step: this process's rows (as micro-batches), the all-reduce when
 * there are several processes, Adam. */
static void net_step(net *m) {
    tg_ctx *ctx = m->ctx;
    if (m->micro > 1) {
        for (int k = 0; k < m->micro; k++) {
            int64_t s, c;
            tg_dist_split(m->count, m->micro, k, &s, &c);
            net_backward(m, m->start + s, c, false);
            tg_grad_accum_add(ctx, m->acc, (double)c / (double)m->batch);
            tg_ctx_reset(ctx);
        }
        tg_grad_accum_finish(ctx, m->acc);
    } else {
        net_backward(m, m->start, m->count, m->dist && !m->after);
    }
    if (m->dist && m->after) tg_dist_allreduce_grads(ctx, m->dist, &m->params, (double)m->count / (double)m->batch);
    tg_optim_step(ctx, m->opt);
    if (!tg_ok(ctx)) die(ctx, "step");
    tg_ctx_reset(ctx);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Steps per second on the fixed schedule (top of the file); *allreduce
 * gets the all-reduce's share of the time of all samples (0 for one
 * process): its seconds over theirs. */
static double time_steps(net *m, int samples, double *allreduce) {
    for (int i = 0; i < 3; i++) net_step(m);
    double t0 = bn_now();
    for (int i = 0; i < 3; i++) net_step(m);
    double inner = 0.2 / ((bn_now() - t0) / 3) + 1;
    if (m->dist) { /* rank 0's choice, everywhere */
        double mine = tg_dist_rank(m->dist) == 0 ? inner : 0;
        if (!tg_dist_allreduce_f64(m->ctx, m->dist, &mine, 1, 1.0)) die(m->ctx, "the schedule");
        inner = mine;
        tg_dist_reset_stats(m->dist);
    }
    int k = (int)inner;
    double t[64], total = 0;
    if (samples > 64) samples = 64;
    for (int s = 0; s < samples; s++) {
        double a = bn_now();
        for (int i = 0; i < k; i++) net_step(m);
        double b = bn_now();
        total += b - a;
        t[s] = (b - a) / k;
    }
    qsort(t, (size_t)samples, sizeof *t, cmp_double);
    *allreduce = m->dist ? tg_dist_get_stats(m->dist).seconds / total : 0;
    return 1.0 / t[samples / 2];
}

/* ---- --allreduce: tg_dist_allreduce against MPI_Allreduce and a ring -------- */

#if TG_HAVE_MPI
/* The textbook ring all-reduce of n floats in place (MPI_SUM's job done by
 * hand): P - 1 steps of reduce-scatter, each rank passing one chunk to the
 * next and adding the one it gets, then P - 1 steps passing the summed
 * chunks on. Each rank sends and receives 2 (P - 1) / P of the data, the
 * least any all-reduce can; its sums are in ring order, not rank order. */
static void ring_allreduce(float *x, int64_t n, float *tmp) {
    int P, r;
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    const int next = (r + 1) % P, prev = (r + P - 1) % P;
    int64_t start[65], count[65];
    for (int q = 0; q < P && q < 64; q++) tg_dist_split(n, P, q, &start[q], &count[q]);
    for (int s = 0; s < P - 1; s++) {
        const int out = (r - s + P) % P, in = (r - s - 1 + P) % P;
        MPI_Sendrecv(x + start[out], (int)count[out], MPI_FLOAT, next, 0, tmp, (int)count[in], MPI_FLOAT, prev, 0,
                     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        for (int64_t i = 0; i < count[in]; i++) x[start[in] + i] += tmp[i];
    }
    for (int s = 0; s < P - 1; s++) {
        const int out = (r + 1 - s + P) % P, in = (r - s + P) % P;
        MPI_Sendrecv(x + start[out], (int)count[out], MPI_FLOAT, next, 1, x + start[in], (int)count[in], MPI_FLOAT,
                     prev, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
}
#endif

/* Each size: the median time of tg_dist_allreduce (one window: the bucket
 * is the size), of MPI_Allreduce(MPI_SUM) and of the ring on the same n
 * floats, the three alternating call by call; rank 0 prints the rows. */
static int allreduce_worker(const options *o, tg_dist *d) {
#if TG_HAVE_MPI
    static const int64_t kib[] = {64, 256, 1024, 4096, 16384, 65536};
    tg_ctx *ctx = tg_ctx_new(1);
    const bool lead = tg_dist_rank(d) == 0;
    if (lead)
        printf("all-reduce of n floats on %d processes (median of %d calls each, alternating): tg_dist_allreduce "
               "with the bucket = the size (one window), then with the default 4 MiB bucket\n%10s %12s %12s %12s %9s "
               "%9s %9s\n",
               tg_dist_size(d), o->samples * 3, "size", "tapegrad ms", "MPI ms", "ring ms", "vs MPI", "ring/MPI",
               "4 MiB bkt");
    for (size_t k = 0; k < sizeof kib / sizeof *kib; k++) {
        const int64_t n = kib[k] * 1024 / 4;
        tg_tensor *x = tg_persist(ctx, tg_zeros(ctx, TG_F32, TG_SHAPE(n)));
        float *tmp = malloc((size_t)n * sizeof *tmp);
        if (!x || !tmp) die(ctx, "the all-reduce's data");
        enum { WAYS = 4 };
        double t[WAYS][192];
        const int reps = o->samples * 3 > 192 ? 192 : o->samples * 3;
        for (int i = -2; i < reps; i++) { /* two warm-up rounds */
            for (int way = 0; way < WAYS; way++) {
                for (int64_t e = 0; e < n; e++) ((float *)x->data)[e] = (float)(e % 7) * 0.25f;
                MPI_Barrier(MPI_COMM_WORLD);
                double a = bn_now();
                if (way == 0 || way == 3) {
                    tg_dist_set_bucket_bytes(d, way == 0 ? (size_t)n * 4 : (size_t)4 << 20);
                    if (!tg_dist_allreduce(ctx, d, &x, 1, 1.0)) die(ctx, "tg_dist_allreduce");
                } else if (way == 1) {
                    MPI_Allreduce(MPI_IN_PLACE, x->data, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
                } else {
                    ring_allreduce(x->data, n, tmp);
                }
                double b = bn_now();
                if (i >= 0) t[way][i] = b - a;
            }
        }
        double med[WAYS];
        for (int way = 0; way < WAYS; way++) {
            qsort(t[way], (size_t)reps, sizeof t[way][0], cmp_double);
            med[way] = t[way][reps / 2];
        }
        /* every rank's medians may differ: take the slowest rank's */
        MPI_Allreduce(MPI_IN_PLACE, med, WAYS, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        char size[32];
        snprintf(size, sizeof size, kib[k] >= 1024 ? "%lld MiB" : "%lld KiB",
                 (long long)(kib[k] >= 1024 ? kib[k] / 1024 : kib[k]));
        if (lead)
            printf("%10s %12.3f %12.3f %12.3f %8.2fx %8.2fx %8.2fx\n", size, med[0] * 1e3, med[1] * 1e3, med[2] * 1e3,
                   med[0] / med[1], med[2] / med[1], med[3] / med[1]);
        free(tmp);
        tg_tensor_free(ctx, x);
    }
    tg_dist_set_bucket_bytes(d, (size_t)4 << 20);
    tg_ctx_free(ctx);
    return 0;
#else
    (void)o, (void)d;
    return 1;
#endif
}

/* ---- --zero: per-rank memory with the optimizer state split ---------------- */

/* The GPT small model trained 2 steps with AdamW over this rank's share
 * (tg_dist_shard); rank 0 prints the largest rank's bytes of parameters,
 * gradients and optimizer state, and its peak resident memory. */
static int zero_worker(const options *o, tg_dist *d) {
    net m;
    net_init(&m, d, o, 1, 1);
    tg_ctx *ctx = m.ctx;
    tg_optim_free(ctx, m.opt);
    tg_dist_shard *s = tg_dist_shard_new(ctx, d, &m.params);
    tg_adam_opts ao = tg_adamw_defaults();
    ao.lr = 3e-3, ao.beta2 = 0.99, ao.weight_decay = 0.1;
    m.opt = tg_adamw_new(ctx, tg_dist_shard_params(s), &ao);
    if (!tg_ok(ctx)) die(ctx, "the shard");
    for (int step = 0; step < 2; step++) {
        tg_params_zero_grad(ctx, &m.params);
        tg_tensor *loss = tg_gpt_loss(ctx, m.gpt, m.count, m.T, m.tokens + m.start * m.T, m.y + m.start * m.T);
        tg_dist_backward(ctx, d, loss, &m.params, (double)m.count / (double)m.batch);
        tg_optim_step(ctx, m.opt);
        tg_dist_shard_gather(ctx, s);
        if (!tg_ok(ctx)) die(ctx, "a step");
        tg_ctx_reset(ctx);
    }
    double v[4] = {(double)tg_params_numel(&m.params) * 4, (double)tg_params_numel(&m.params) * 4, 0, 0};
    tg_params *st = tg_optim_state(m.opt);
    for (int i = 0; i < st->count; i++)
        v[2] += (double)st->items[i].value->numel * (double)tg_dtype_size(st->items[i].value->dtype);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    v[3] = (double)ru.ru_maxrss * 1024;
    double all[4 * 64];
    for (int q = 0; q < 4 * 64; q++) all[q] = 0;
    for (int k = 0; k < 4; k++) all[4 * tg_dist_rank(d) + k] = v[k];
    /* every rank's four numbers to rank 0: a sum where only rank r's are non-zero */
    if (tg_dist_size(d) <= 64 && !tg_dist_allreduce_f64(ctx, d, all, 4 * 64, 1.0)) die(ctx, "the report");
    double most[4] = {0, 0, 0, 0};
    for (int q = 0; q < tg_dist_size(d) && q < 64; q++)
        for (int k = 0; k < 4; k++) most[k] = all[4 * q + k] > most[k] ? all[4 * q + k] : most[k];
    if (tg_dist_rank(d) == 0)
        printf("%9d %12.1f %12.1f %16.1f %12.1f %22.1f\n", tg_dist_size(d), most[0] / 1048576, most[1] / 1048576,
               most[2] / 1048576, most[3] / 1048576, v[0] * 2 / 1048576);
    tg_optim_free(ctx, m.opt);
    m.opt = NULL;
    tg_dist_shard_free(ctx, s);
    net_free(&m);
    return 0;
}

/* --worker: one rank of the mpirun run; rank 0 prints the result line. */
static int worker(const options *o, int *argc, char ***argv) {
    tg_ctx *init = tg_ctx_new(0);
    tg_dist *d = tg_dist_init(init, argc, argv);
    if (!d) die(init, "tg_dist_init");
    if (o->allreduce || o->zero) {
        int rc = o->zero ? zero_worker(o, d) : allreduce_worker(o, d);
        tg_dist_free(d);
        tg_ctx_free(init);
        return rc;
    }
    net m;
    net_init(&m, d, o, 1, 1);
    m.after = o->after;
    double ar, rate = time_steps(&m, o->samples, &ar);
    if (tg_dist_rank(d) == 0) printf("RESULT %d %.6g %.6g\n", tg_dist_size(d), rate, ar);
    net_free(&m);
    tg_dist_free(d);
    tg_ctx_free(init);
    return 0;
}

/* The 2-process run: `LAUNCHER -np 2 [--allow-run-as-root] THIS --worker
 * ...`, its result line parsed: steps/s and the all-reduce's share of the
 * time. False (with *why) when it cannot run. */
static bool run_two(const options *o, double *rate, double *ar, char *why, size_t why_size) {
#ifndef TG_MPIEXEC
    (void)o, (void)rate, (void)ar;
    snprintf(why, why_size, "built without MPI (TG_MPI=OFF)");
    return false;
#else
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        snprintf(why, why_size, "cannot find this program: %s", strerror(errno));
        return false;
    }
    self[n] = '\0';
    char hidden[32], batch[32], samples[32];
    snprintf(hidden, sizeof hidden, "%lld", (long long)o->hidden);
    snprintf(batch, sizeof batch, "%lld", (long long)o->batch);
    snprintf(samples, sizeof samples, "%d", o->samples);
    char *args[24];
    int a = 0;
    args[a++] = TG_MPIEXEC;
    char np[16];
    snprintf(np, sizeof np, "%d", o->np ? o->np : 2);
    args[a++] = "-np";
    args[a++] = np;
    if (geteuid() == 0) args[a++] = "--allow-run-as-root";
    if (sysconf(_SC_NPROCESSORS_ONLN) < (o->np ? o->np : 2)) args[a++] = "--oversubscribe";
    args[a++] = self;
    args[a++] = "--worker";
    args[a++] = "--model";
    args[a++] = o->model == MLP ? "mlp" : "gpt";
    args[a++] = "--gpt";
    args[a++] = o->tiny ? "tiny" : "small";
    args[a++] = "--hidden";
    args[a++] = hidden;
    args[a++] = "--batch";
    args[a++] = batch;
    args[a++] = "--samples";
    args[a++] = samples;
    if (o->allreduce) args[a++] = "--allreduce";
    if (o->after) args[a++] = "--after";
    if (o->zero) args[a++] = "--zero";
    args[a] = NULL;
    int pipefd[2];
    if (pipe(pipefd) != 0) {
        snprintf(why, why_size, "pipe: %s", strerror(errno));
        return false;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, pipefd[1], 1);
    posix_spawn_file_actions_addclose(&fa, pipefd[0]);
    pid_t pid;
    int rc = posix_spawn(&pid, TG_MPIEXEC, &fa, NULL, args, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(pipefd[1]);
    if (rc != 0) {
        close(pipefd[0]);
        snprintf(why, why_size, "cannot start %s: %s", TG_MPIEXEC, strerror(rc));
        return false;
    }
    FILE *f = fdopen(pipefd[0], "r");
    char line[512];
    bool got = o->allreduce || o->zero; /* their rows are the output */
    while (f && fgets(line, sizeof line, f)) {
        int np;
        if (o->allreduce || o->zero) fputs(line, stdout);
        else if (sscanf(line, "RESULT %d %lf %lf", &np, rate, ar) == 3 && np == 2) got = true;
        else fputs(line, stderr); /* whatever else mpirun or the ranks said */
    }
    if (f) fclose(f);
    int status = 0;
    waitpid(pid, &status, 0);
    if (!got || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        snprintf(why, why_size, "%s -np %s failed (status %d)", TG_MPIEXEC, np,
                 WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        return false;
    }
    return true;
#endif
}

static double local_rate(const options *o, int threads, int micro) {
    net m;
    net_init(&m, NULL, o, threads, micro);
    double ar, rate = time_steps(&m, o->samples, &ar);
    net_free(&m);
    return rate;
}

/* CPU seconds this process and its waited-for children (the mpirun run)
 * have used. */
static double own_cpu(void) {
    struct rusage ru;
    double s = bn_process_cpu();
    if (getrusage(RUSAGE_CHILDREN, &ru) == 0)
        s += (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
             1e-6 * (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
    return s;
}

/* The most CPUs other jobs took during any configuration (NaN: unknown). */
static double others_max = NAN;

/* A moment: the wall clock, the machine's busy CPU seconds, ours. */
typedef struct meter {
    double wall, busy, ours;
} meter;
static meter meter_now(void) { return (meter){bn_now(), bn_machine_busy(), own_cpu()}; }

/* The CPUs other jobs took from a to b (NaN when /proc/stat is unreadable),
 * noted in others_max. */
static double others_since(const meter *a) {
    const meter b = meter_now();
    if (a->busy < 0 || b.busy < 0 || b.wall <= a->wall) return NAN;
    double o = ((b.busy - a->busy) - (b.ours - a->ours)) / (b.wall - a->wall);
    o = o > 0 ? o : 0;
    if (!(others_max >= o)) others_max = o;
    return o;
}

static int usage(FILE *f, int status) {
    fprintf(f, "usage: bench_dist [--model mlp|gpt|all] [--gpt small|tiny] [--hidden H] [--batch B] [--samples N]\n"
               "       bench_dist --allreduce [--samples N] | --zero\n"
               "Steps/s of a training step (the MLP, the GPT or both): 1 process with 1 or 2 threads, with 2\n"
               "micro-batches, and 2 processes of 1 thread under mpirun (defaults: all, the GPT small, H 256,\n"
               "B 256 rows for the MLP and 8 sequences for the GPT, 9 samples). --allreduce: the all-reduce alone\n"
               "on 2 processes, 64 KiB to 64 MiB, against MPI_Allreduce and a ring. --zero: per-rank memory with the\n"
               "optimizer state split over 1, 2 and 4 processes.\n");
    return status;
}

/* One row: its configuration, steps/s, the ratio to 1 x 1 and the CPUs
 * other jobs took while it ran; tail: what else to say. */
static void print_row(const char *what, double rate, double base, double others, const char *tail) {
    char rs[32], ratio[32];
    snprintf(rs, sizeof rs, rate > 0 ? "%.2f" : "-", rate);
    snprintf(ratio, sizeof ratio, rate > 0 ? "%.2fx" : "-", rate / base);
    printf("%-40s %9s %8s %7.2f  %s\n", what, rs, ratio, others, tail);
}

/* The four configurations of one model, as rows of the table; returns
 * 2 processes' steps/s over 1 x 1's (0 without the 2-process run). */
static double bench_model(const options *o) {
    if (o->model == MLP) {
        printf("\nMLP 784-%lld-%lld-10 (RMSNorm, Adam), global batch %lld rows\n", (long long)o->hidden,
               (long long)o->hidden, (long long)o->batch);
    } else {
        tg_gpt_config c = gpt_config(o->tiny);
        printf("\nGPT %s: GPT-2, %lld layers, %lld heads, C %lld, T %lld, vocab %lld (AdamW), global batch %lld "
               "sequences\n",
               o->tiny ? "tiny" : "small", (long long)c.n_layer, (long long)c.n_head, (long long)c.n_embd,
               (long long)c.context, (long long)c.vocab_size, (long long)o->batch);
    }
    double others[4];
    meter t = meter_now();
    double base = local_rate(o, 1, 1);
    others[0] = others_since(&t);
    t = meter_now();
    double micro = local_rate(o, 1, 2);
    others[1] = others_since(&t);
    t = meter_now();
    double two_threads = local_rate(o, 2, 1);
    others[2] = others_since(&t);
    double two_procs = 0, ar = 0, two_after = 0, ar_after = 0;
    char why[256] = "", tail[320];
    t = meter_now();
    bool have_two = run_two(o, &two_procs, &ar, why, sizeof why);
    others[3] = others_since(&t);
    options after = *o;
    after.after = true;
    t = meter_now();
    bool have_after = have_two && run_two(&after, &two_after, &ar_after, why, sizeof why);
    const double others_after = others_since(&t);

    printf("%-40s %9s %8s %7s  %s\n", "configuration", "steps/s", "vs 1x1", "others", "all-reduce per step");
    print_row("1 process x 1 thread", base, base, others[0], "");
    print_row("1 process x 1 thread, 2 micro-batches", micro, base, others[1], "");
    print_row("1 process x 2 threads", two_threads, base, others[2], "");
    if (have_after)
        snprintf(tail, sizeof tail, "%.3f ms (%.1f%% of the time)", ar_after / two_after * 1e3, 100 * ar_after);
    else snprintf(tail, sizeof tail, "%s", why);
    print_row("2 processes x 1 thread, reduce after", have_after ? two_after : 0, base, others_after, tail);
    if (have_two)
        snprintf(tail, sizeof tail, "%.3f ms uncovered (%.1f%% of the time); %.2fx 1 process x 2 threads",
                 ar / two_procs * 1e3, 100 * ar, two_procs / two_threads);
    else snprintf(tail, sizeof tail, "%s", why);
    print_row("2 processes x 1 thread, under backward", have_two ? two_procs : 0, base, others[3], tail);
    return have_two ? two_procs / base : 0;
}

int main(int argc, char **argv) {
    options o = {.hidden = 256, .samples = 9};
    bool is_worker = false, all = true;
    for (int i = 1; i < argc; i++) {
        long long v = 0;
        if (strcmp(argv[i], "--worker") == 0) is_worker = true;
        else if (strcmp(argv[i], "--allreduce") == 0) o.allreduce = true;
        else if (strcmp(argv[i], "--after") == 0) o.after = true;
        else if (strcmp(argv[i], "--zero") == 0) o.zero = true;
        else if (strcmp(argv[i], "--help") == 0) return usage(stdout, 0);
        else if (strcmp(argv[i], "--model") == 0 && i + 1 < argc) {
            const char *name = argv[++i];
            all = strcmp(name, "all") == 0;
            if (strcmp(name, "gpt") == 0) o.model = GPT;
            else if (!all && strcmp(name, "mlp") != 0) return usage(stderr, 2);
        } else if (strcmp(argv[i], "--gpt") == 0 && i + 1 < argc) {
            const char *size = argv[++i];
            o.tiny = strcmp(size, "tiny") == 0;
            if (!o.tiny && strcmp(size, "small") != 0) return usage(stderr, 2);
        } else if (i + 1 < argc && sscanf(argv[i + 1], "%lld", &v) == 1 && v > 0) {
            if (strcmp(argv[i], "--hidden") == 0) o.hidden = v;
            else if (strcmp(argv[i], "--batch") == 0 && v >= 2) o.batch = v;
            else if (strcmp(argv[i], "--samples") == 0 && v <= 64) o.samples = (int)v;
            else return usage(stderr, 2);
            i++;
        } else {
            return usage(stderr, 2);
        }
    }
    const int64_t batch = o.batch;
    if (is_worker) return worker(&o, &argc, &argv);
    if (o.zero) {
        double rate, ar;
        char why[256];
        o.model = GPT, o.batch = 8;
        printf("bench_dist --zero: GPT small (AdamW), the optimizer state split over P processes (tg_dist_shard); "
               "per rank, the largest rank's, in MiB\n%9s %12s %12s %16s %12s %22s\n",
               "processes", "parameters", "gradients", "optimizer state", "peak RSS", "state without split");
        for (o.np = 1; o.np <= 4; o.np *= 2)
            if (!run_two(&o, &rate, &ar, why, sizeof why)) printf("%9d not measured: %s\n", o.np, why);
        return 0;
    }
    if (o.allreduce) {
        double rate, ar;
        char why[256];
        printf("bench_dist --allreduce: %s, %ld cores, load average %.2f\n", bn_cpu_name(why, sizeof why),
               sysconf(_SC_NPROCESSORS_ONLN), bn_loadavg());
        o.batch = 8; /* unused, but passed on */
        if (!run_two(&o, &rate, &ar, why, sizeof why)) printf("not measured: %s\n", why);
        return 0;
    }

    setvbuf(stdout, NULL, _IOLBF, 0); /* each row as it is done, also through scripts/bench.sh's tee */
    char cpu[128];
    const double load0 = bn_loadavg();
    printf("bench_dist: %d samples; %s, %ld cores, load average %.2f; \"others\": the CPUs other jobs took while "
           "a row ran\n",
           o.samples, bn_cpu_name(cpu, sizeof cpu), sysconf(_SC_NPROCESSORS_ONLN), load0);
    double gpt_speedup = -1;
    for (int k = MLP; k <= GPT; k++) {
        if (!all && k != (int)o.model) continue;
        o.model = (kind)k;
        o.batch = batch ? batch : k == MLP ? 256 : 8;
        const double x = bench_model(&o);
        if (k == GPT) gpt_speedup = x;
    }
    const double load1 = bn_loadavg();
    const bool quiet = load0 < QUIET_LOAD && !(others_max > QUIET_OTHERS);
    printf("\nmachine: load average %.2f before, %.2f after; other jobs took at most %.2f CPUs during a row -> %s\n",
           load0, load1, others_max,
           quiet ? "quiet"
                 : "NOT QUIET: processes and threads share the cores with other jobs, so the 2-process and 2-thread "
                   "rows are unreliable");
    if (gpt_speedup > 0)
        printf("target: 2 processes >= %.1fx 1 process x 1 thread on the GPT %s step (a quiet machine): %.2fx -> %s\n",
               TARGET, o.tiny ? "tiny" : "small", gpt_speedup,
               gpt_speedup >= TARGET ? (quiet ? "met" : "met, on a machine that was not quiet (rerun on a quiet one)")
               : quiet               ? "NOT MET"
                                     : "not met, on a machine that was not quiet (rerun on a quiet one)");
    else if (gpt_speedup == 0)
        printf("target: 2 processes >= %.1fx on the GPT %s step: not measured (no 2-process run)\n", TARGET,
               o.tiny ? "tiny" : "small");
    return 0;
}

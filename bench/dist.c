/* Data-parallel training speed (tapegrad/dist.h): steps per second of two
 * training steps with Adam on a global batch of B --
 *   the MLP: 784-H-H-10 with RMSNorm, cross-entropy (the step of
 *            bench_vs_pytorch's MLP rows), B rows;
 *   the GPT: a small GPT-2-shaped decoder (GPT_L blocks of pre-LayerNorm,
 *            causal tg_attention over GPT_H heads, a GELU MLP of 4C,
 *            residuals; byte vocabulary), B sequences of GPT_T tokens
 *            (the ops a GPT example trains with; examples/gpt.c is its
 *            own program) --
 * each run as
 *
 *   1 process  x 1 thread                 the baseline
 *   1 process  x 1 thread, 2 micro-batches  the gradient accumulator's cost
 *   1 process  x 2 threads                the same cores used by threads
 *   2 processes x 1 thread                mpirun -np 2: B/2 rows each, the
 *                                          grads summed by the all-reduce
 *
 * and, for the 2-process run, the time spent in tg_dist_allreduce_grads
 * (including the wait for the slower rank): its share of the whole run,
 * and that share of a median step in ms. Run it as
 *   build-release/bench/bench_dist [--model mlp|gpt|all] [--hidden H] [--batch B] [--samples N]
 * It starts the 2-process run itself (the launcher CMake found, with
 * --allow-run-as-root as root), as `bench_dist --worker ...` under
 * mpirun; without MPI (TG_MPI=OFF) that row says so. Timings on a shared
 * 2-core machine are noisy: the load average is printed, and only a quiet
 * machine gives two processes two whole cores.
 *
 * Every configuration times the same fixed schedule -- 3 warm-up steps,
 * then N samples of K steps, K chosen by rank 0 so that a sample lasts
 * about 0.2 s and broadcast -- since ranks that timed different numbers
 * of steps would wait for each other's collectives forever. The rate is K
 * over the median sample. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/common/bench.h"
#include "tapegrad.h"
#include "tapegrad/dist.h"

extern char **environ;

typedef enum kind { MLP, GPT } kind;

typedef struct options {
    kind model;
    int64_t hidden, batch;
    int samples;
} options;

/* The GPT step's configuration: a small decoder-only transformer
 * (GPT-2's block: pre-LayerNorm, causal self-attention, a GELU MLP of 4C,
 * residuals) over byte tokens. --batch counts sequences of T tokens. */
enum { GPT_V = 256, GPT_T = 64, GPT_C = 128, GPT_H = 4, GPT_L = 4 };

/* One transformer block's layers. */
typedef struct block {
    tg_layernorm *ln1, *ln2;
    tg_linear *q, *k, *v, *proj, *fc, *out;
} block;

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
    int64_t batch, start, count;
    /* MLP */
    tg_linear *fc1, *fc2, *fc3;
    tg_rmsnorm *n1, *n2;
    float *x;   /* (batch, 784) */
    int64_t *y; /* MLP: (batch) labels; GPT: (batch, T) next tokens */
    /* GPT */
    tg_embedding_layer *wte, *wpe;
    block h[GPT_L];
    tg_layernorm *lnf;
    tg_linear *head;
    int64_t *tokens; /* (batch, T) */
    int64_t pos[GPT_T];
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
    m->wte = ADD(m, tg_embedding_layer_new(ctx, "wte", GPT_V, GPT_C, TG_F32));
    m->wpe = ADD(m, tg_embedding_layer_new(ctx, "wpe", GPT_T, GPT_C, TG_F32));
    for (int l = 0; l < GPT_L; l++) {
        block *b = &m->h[l];
        char name[32];
#define NAME(what) (snprintf(name, sizeof name, "h%d.%s", l, what), name)
        b->ln1 = ADD(m, tg_layernorm_new1(ctx, NAME("ln1"), GPT_C));
        b->q = ADD(m, tg_linear_new1(ctx, NAME("q"), GPT_C, GPT_C));
        b->k = ADD(m, tg_linear_new1(ctx, NAME("k"), GPT_C, GPT_C));
        b->v = ADD(m, tg_linear_new1(ctx, NAME("v"), GPT_C, GPT_C));
        b->proj = ADD(m, tg_linear_new1(ctx, NAME("proj"), GPT_C, GPT_C));
        b->ln2 = ADD(m, tg_layernorm_new1(ctx, NAME("ln2"), GPT_C));
        b->fc = ADD(m, tg_linear_new1(ctx, NAME("fc"), GPT_C, 4 * GPT_C));
        b->out = ADD(m, tg_linear_new1(ctx, NAME("out"), 4 * GPT_C, GPT_C));
#undef NAME
    }
    m->lnf = ADD(m, tg_layernorm_new1(ctx, "lnf", GPT_C));
    m->head = ADD(m, tg_linear_new1(ctx, "head", GPT_C, GPT_V));
    m->tokens = malloc((size_t)o->batch * GPT_T * sizeof *m->tokens);
    m->y = malloc((size_t)o->batch * GPT_T * sizeof *m->y);
    if (!m->tokens || !m->y) die(ctx, "out of memory");
    /* random bytes; the next token is the target */
    int64_t t = 0;
    for (int64_t i = 0; i < o->batch * GPT_T; i++) {
        m->tokens[i] = t;
        m->y[i] = t = (int64_t)(tg_rng_uniform(ctx) * GPT_V) % GPT_V;
    }
    for (int64_t i = 0; i < GPT_T; i++) m->pos[i] = i;
}

static void net_init(net *m, tg_dist *dist, const options *o, int threads, int micro) {
    memset(m, 0, sizeof *m);
    tg_ctx *ctx = m->ctx = tg_ctx_new(3);
    m->model = o->model;
    m->dist = dist;
    m->micro = micro;
    tg_set_threads(ctx, threads);
    if (o->model == MLP) mlp_build(m, o);
    else gpt_build(m, o);
    tg_model_params(ctx, &m->layers, &m->params);
    tg_adam_opts ao = tg_adam_defaults();
    m->opt = tg_adam_new(ctx, &m->params, &ao);
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

/* (n, T, C) -> (n, H, T, C/H): the heads as a batch dim, and back. */
static tg_tensor *heads(tg_ctx *ctx, tg_tensor *x, int64_t n) {
    return tg_transpose_dims(ctx, tg_reshape(ctx, x, 4, (int64_t[]){n, GPT_T, GPT_H, GPT_C / GPT_H}), 1, 2);
}
static tg_tensor *merge_heads(tg_ctx *ctx, tg_tensor *x, int64_t n) {
    return tg_reshape(ctx, tg_transpose_dims(ctx, x, 1, 2), 3, (int64_t[]){n, GPT_T, GPT_C});
}

/* The GPT's mean next-token loss over sequences [start, start + count):
 *   x = wte[tokens] + wpe[0..T-1]
 *   each block: x = x + proj(attention(q, k, v of ln1(x), causal))
 *               x = x + out(gelu(fc(ln2(x))))
 *   loss = cross_entropy(head(lnf(x)), next tokens) */
static tg_tensor *gpt_loss(net *m, int64_t start, int64_t count) {
    tg_ctx *ctx = m->ctx;
    tg_tensor *x =
        tg_add(ctx, tg_embedding_layer_forward(ctx, m->wte, 2, (int64_t[]){count, GPT_T}, m->tokens + start * GPT_T),
               tg_embedding_layer_forward(ctx, m->wpe, 1, (int64_t[]){GPT_T}, m->pos));
    for (int l = 0; l < GPT_L; l++) {
        const block *b = &m->h[l];
        tg_tensor *a = tg_layernorm_forward(ctx, b->ln1, x);
        tg_tensor *att = tg_attention(ctx, heads(ctx, tg_linear_forward(ctx, b->q, a), count),
                                      heads(ctx, tg_linear_forward(ctx, b->k, a), count),
                                      heads(ctx, tg_linear_forward(ctx, b->v, a), count), true, 0);
        x = tg_add(ctx, x, tg_linear_forward(ctx, b->proj, merge_heads(ctx, att, count)));
        tg_tensor *f = tg_gelu(ctx, tg_linear_forward(ctx, b->fc, tg_layernorm_forward(ctx, b->ln2, x)), true);
        x = tg_add(ctx, x, tg_linear_forward(ctx, b->out, f));
    }
    tg_tensor *logits = tg_linear_forward(ctx, m->head, tg_layernorm_forward(ctx, m->lnf, x));
    return tg_cross_entropy(ctx, tg_reshape(ctx, logits, 2, (int64_t[]){count * GPT_T, GPT_V}), m->y + start * GPT_T,
                            NULL);
}

/* Forward and backward of rows [start, start + count): the grads of their
 * mean loss. */
static void net_backward(net *m, int64_t start, int64_t count) {
    tg_tensor *loss = m->model == MLP ? mlp_loss(m, start, count) : gpt_loss(m, start, count);
    tg_optim_zero_grad(m->ctx, m->opt);
    tg_backward(m->ctx, loss);
}

/* One step: this process's rows (as micro-batches), the all-reduce when
 * there are several processes, Adam. */
static void net_step(net *m) {
    tg_ctx *ctx = m->ctx;
    if (m->micro > 1) {
        for (int k = 0; k < m->micro; k++) {
            int64_t s, c;
            tg_dist_split(m->count, m->micro, k, &s, &c);
            net_backward(m, m->start + s, c);
            tg_grad_accum_add(ctx, m->acc, (double)c / (double)m->batch);
            tg_ctx_reset(ctx);
        }
        tg_grad_accum_finish(ctx, m->acc);
    } else {
        net_backward(m, m->start, m->count);
    }
    if (m->dist) tg_dist_allreduce_grads(ctx, m->dist, &m->params, (double)m->count / (double)m->batch);
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

/* --worker: one rank of the mpirun run; rank 0 prints the result line. */
static int worker(const options *o, int *argc, char ***argv) {
    tg_ctx *init = tg_ctx_new(0);
    tg_dist *d = tg_dist_init(init, argc, argv);
    if (!d) die(init, "tg_dist_init");
    net m;
    net_init(&m, d, o, 1, 1);
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
    char *args[20];
    int a = 0;
    args[a++] = TG_MPIEXEC;
    args[a++] = "-np";
    args[a++] = "2";
    if (geteuid() == 0) args[a++] = "--allow-run-as-root";
    if (sysconf(_SC_NPROCESSORS_ONLN) < 2) args[a++] = "--oversubscribe";
    args[a++] = self;
    args[a++] = "--worker";
    args[a++] = "--model";
    args[a++] = o->model == MLP ? "mlp" : "gpt";
    args[a++] = "--hidden";
    args[a++] = hidden;
    args[a++] = "--batch";
    args[a++] = batch;
    args[a++] = "--samples";
    args[a++] = samples;
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
    bool got = false;
    while (f && fgets(line, sizeof line, f)) {
        int np;
        if (sscanf(line, "RESULT %d %lf %lf", &np, rate, ar) == 3 && np == 2) got = true;
        else fputs(line, stderr); /* whatever else mpirun or the ranks said */
    }
    if (f) fclose(f);
    int status = 0;
    waitpid(pid, &status, 0);
    if (!got || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        snprintf(why, why_size, "%s -np 2 failed (status %d)", TG_MPIEXEC,
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

static int usage(FILE *f, int status) {
    fprintf(f, "usage: bench_dist [--model mlp|gpt|all] [--hidden H] [--batch B] [--samples N]\n"
               "Steps/s of a training step (the MLP, the GPT or both): 1 process with 1 or 2 threads, with 2\n"
               "micro-batches, and 2 processes of 1 thread under mpirun (defaults: all, H 256, B 256 rows for\n"
               "the MLP and 16 sequences for the GPT, 9 samples).\n");
    return status;
}

/* The four configurations of one model, as rows of the table. */
static void bench_model(const options *o) {
    if (o->model == MLP)
        printf("\nMLP 784-%lld-%lld-10 (RMSNorm, Adam), global batch %lld rows\n", (long long)o->hidden,
               (long long)o->hidden, (long long)o->batch);
    else
        printf("\nGPT: %d layers, %d heads, C %d, T %d, vocab %d (LayerNorm, causal attention, GELU, Adam), "
               "global batch %lld sequences\n",
               GPT_L, GPT_H, GPT_C, GPT_T, GPT_V, (long long)o->batch);
    double base = local_rate(o, 1, 1);
    double micro = local_rate(o, 1, 2);
    double two_threads = local_rate(o, 2, 1);
    double two_procs = 0, ar = 0;
    char why[256] = "";
    bool have_two = run_two(o, &two_procs, &ar, why, sizeof why);

    printf("%-44s %10s %9s %s\n", "configuration", "steps/s", "vs 1x1", "all-reduce per step");
    printf("%-44s %10.1f %8.2fx\n", "1 process x 1 thread", base, 1.0);
    printf("%-44s %10.1f %8.2fx\n", "1 process x 1 thread, 2 micro-batches", micro, micro / base);
    printf("%-44s %10.1f %8.2fx\n", "1 process x 2 threads", two_threads, two_threads / base);
    if (have_two)
        printf("%-44s %10.1f %8.2fx %.3f ms (%.1f%% of the time)\n", "2 processes x 1 thread (mpirun -np 2)", two_procs,
               two_procs / base, ar / two_procs * 1e3, 100 * ar);
    else printf("%-44s %10s %9s %s\n", "2 processes x 1 thread (mpirun -np 2)", "-", "-", why);
}

int main(int argc, char **argv) {
    options o = {.hidden = 256, .samples = 9};
    bool is_worker = false, all = true;
    for (int i = 1; i < argc; i++) {
        long long v = 0;
        if (strcmp(argv[i], "--worker") == 0) is_worker = true;
        else if (strcmp(argv[i], "--help") == 0) return usage(stdout, 0);
        else if (strcmp(argv[i], "--model") == 0 && i + 1 < argc) {
            const char *name = argv[++i];
            all = strcmp(name, "all") == 0;
            if (strcmp(name, "gpt") == 0) o.model = GPT;
            else if (!all && strcmp(name, "mlp") != 0) return usage(stderr, 2);
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

    char cpu[128];
    printf("bench_dist: %d samples; %s, %ld cores, load %.2f\n", o.samples, bn_cpu_name(cpu, sizeof cpu),
           sysconf(_SC_NPROCESSORS_ONLN), bn_loadavg());
    for (int k = MLP; k <= GPT; k++) {
        if (!all && k != (int)o.model) continue;
        o.model = (kind)k;
        o.batch = batch ? batch : k == MLP ? 256 : 16;
        bench_model(&o);
    }
    printf("\nload after: %.2f\n", bn_loadavg());
    return 0;
}

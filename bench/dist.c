/* Data-parallel training speed (tapegrad/dist.h): steps per second of one
 * MLP training step (784-H-H-10 with RMSNorm, cross-entropy, Adam; the
 * step of bench_vs_pytorch's MLP rows) on a global batch of B rows, run as
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
 *   build-release/bench/bench_dist [--hidden H] [--batch B] [--samples N]
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

typedef struct options {
    int64_t hidden, batch;
    int samples;
} options;

/* One training setup: the model, its optimizer, the global batch and the
 * rows [start, start + count) this process trains on. */
typedef struct mlp {
    tg_ctx *ctx;
    tg_dist *dist; /* NULL: one process */
    tg_linear *fc1, *fc2, *fc3;
    tg_rmsnorm *n1, *n2;
    tg_model model;
    tg_params params;
    tg_optim *opt;
    tg_grad_accum *acc; /* micro > 1 */
    int micro;          /* micro-batches per step in this process */
    float *x;           /* (batch, 784) */
    int64_t *y;         /* (batch) */
    int64_t batch, start, count;
} mlp;

static void die(tg_ctx *ctx, const char *what) {
    fprintf(stderr, "bench_dist: %s: %s\n", what, tg_error_message(ctx));
    exit(1);
}

static void mlp_init(mlp *m, tg_dist *dist, const options *o, int threads, int micro) {
    memset(m, 0, sizeof *m);
    tg_ctx *ctx = m->ctx = tg_ctx_new(3);
    m->dist = dist;
    m->micro = micro;
    tg_set_threads(ctx, threads);
    const int64_t H = o->hidden, shape[1] = {o->hidden};
    tg_model_add(ctx, &m->model, TG_MODULE(m->fc1 = tg_linear_new(ctx, "fc1", 784, H, true, TG_F32)));
    tg_model_add(ctx, &m->model,
                 TG_MODULE(m->n1 = tg_rmsnorm_new(ctx, "norm1", 1, shape, TG_RMSNORM_EPS, true, false, TG_F32)));
    tg_model_add(ctx, &m->model, TG_MODULE(m->fc2 = tg_linear_new(ctx, "fc2", H, H, true, TG_F32)));
    tg_model_add(ctx, &m->model,
                 TG_MODULE(m->n2 = tg_rmsnorm_new(ctx, "norm2", 1, shape, TG_RMSNORM_EPS, true, false, TG_F32)));
    tg_model_add(ctx, &m->model, TG_MODULE(m->fc3 = tg_linear_new(ctx, "fc3", H, 10, true, TG_F32)));
    tg_model_params(ctx, &m->model, &m->params);
    tg_adam_opts ao = tg_adam_defaults();
    m->opt = tg_adam_new(ctx, &m->params, &ao);
    if (micro > 1) m->acc = tg_grad_accum_new(ctx, &m->params);
    /* the global batch, the same in every process */
    m->batch = o->batch;
    m->x = malloc((size_t)o->batch * 784 * sizeof *m->x);
    m->y = malloc((size_t)o->batch * sizeof *m->y);
    if (!m->x || !m->y) die(ctx, "out of memory");
    for (int64_t i = 0; i < o->batch * 784; i++) m->x[i] = (float)tg_rng_uniform(ctx);
    for (int64_t i = 0; i < o->batch; i++) m->y[i] = (int64_t)(tg_rng_uniform(ctx) * 10) % 10;
    tg_dist_split(o->batch, tg_dist_size(dist), tg_dist_rank(dist), &m->start, &m->count);
    if (!tg_ok(ctx)) die(ctx, "setup");
}

static void mlp_free(mlp *m) {
    tg_grad_accum_free(m->ctx, m->acc);
    tg_optim_free(m->ctx, m->opt);
    tg_params_free(&m->params);
    tg_model_free(m->ctx, &m->model);
    free(m->x);
    free(m->y);
    tg_ctx_free(m->ctx);
}

/* Forward and backward of rows [start, start + count): the grads of their
 * mean loss. */
static void mlp_backward(mlp *m, int64_t start, int64_t count) {
    tg_ctx *ctx = m->ctx;
    tg_tensor *x = tg_from_buffer(ctx, TG_F32, TG_SHAPE(count, 784), m->x + start * 784);
    tg_tensor *h = tg_relu(ctx, tg_rmsnorm_forward(ctx, m->n1, tg_linear_forward(ctx, m->fc1, x)));
    h = tg_relu(ctx, tg_rmsnorm_forward(ctx, m->n2, tg_linear_forward(ctx, m->fc2, h)));
    tg_tensor *loss = tg_cross_entropy(ctx, tg_linear_forward(ctx, m->fc3, h), m->y + start, NULL);
    tg_optim_zero_grad(ctx, m->opt);
    tg_backward(ctx, loss);
}

/* One step: this process's rows (as micro-batches), the all-reduce when
 * there are several processes, Adam. */
static void mlp_step(mlp *m) {
    tg_ctx *ctx = m->ctx;
    if (m->micro > 1) {
        for (int k = 0; k < m->micro; k++) {
            int64_t s, c;
            tg_dist_split(m->count, m->micro, k, &s, &c);
            mlp_backward(m, m->start + s, c);
            tg_grad_accum_add(ctx, m->acc, (double)c / (double)m->batch);
            tg_ctx_reset(ctx);
        }
        tg_grad_accum_finish(ctx, m->acc);
    } else {
        mlp_backward(m, m->start, m->count);
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
static double time_steps(mlp *m, int samples, double *allreduce) {
    for (int i = 0; i < 3; i++) mlp_step(m);
    double t0 = bn_now();
    for (int i = 0; i < 3; i++) mlp_step(m);
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
        for (int i = 0; i < k; i++) mlp_step(m);
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
    mlp m;
    mlp_init(&m, d, o, 1, 1);
    double ar, rate = time_steps(&m, o->samples, &ar);
    if (tg_dist_rank(d) == 0) printf("RESULT %d %.6g %.6g\n", tg_dist_size(d), rate, ar);
    mlp_free(&m);
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
    char *args[16];
    int a = 0;
    args[a++] = TG_MPIEXEC;
    args[a++] = "-np";
    args[a++] = "2";
    if (geteuid() == 0) args[a++] = "--allow-run-as-root";
    if (sysconf(_SC_NPROCESSORS_ONLN) < 2) args[a++] = "--oversubscribe";
    args[a++] = self;
    args[a++] = "--worker";
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
    mlp m;
    mlp_init(&m, NULL, o, threads, micro);
    double ar, rate = time_steps(&m, o->samples, &ar);
    mlp_free(&m);
    return rate;
}

static int usage(FILE *f, int status) {
    fprintf(f, "usage: bench_dist [--hidden H] [--batch B] [--samples N]\n"
               "Steps/s of an MLP training step: 1 process with 1 or 2 threads, with 2 micro-batches,\n"
               "and 2 processes of 1 thread under mpirun (defaults: H 256, B 256, 9 samples).\n");
    return status;
}

int main(int argc, char **argv) {
    options o = {.hidden = 256, .batch = 256, .samples = 9};
    bool is_worker = false;
    for (int i = 1; i < argc; i++) {
        long long v = 0;
        if (strcmp(argv[i], "--worker") == 0) is_worker = true;
        else if (strcmp(argv[i], "--help") == 0) return usage(stdout, 0);
        else if (i + 1 < argc && sscanf(argv[i + 1], "%lld", &v) == 1 && v > 0) {
            if (strcmp(argv[i], "--hidden") == 0) o.hidden = v;
            else if (strcmp(argv[i], "--batch") == 0 && v >= 2) o.batch = v;
            else if (strcmp(argv[i], "--samples") == 0 && v <= 64) o.samples = (int)v;
            else return usage(stderr, 2);
            i++;
        } else {
            return usage(stderr, 2);
        }
    }
    if (is_worker) return worker(&o, &argc, &argv);

    char cpu[128];
    printf("bench_dist: MLP 784-%lld-%lld-10 (RMSNorm, Adam), global batch %lld, %d samples; %s, %ld cores, "
           "load %.2f\n",
           (long long)o.hidden, (long long)o.hidden, (long long)o.batch, o.samples, bn_cpu_name(cpu, sizeof cpu),
           sysconf(_SC_NPROCESSORS_ONLN), bn_loadavg());
    double base = local_rate(&o, 1, 1);
    double micro = local_rate(&o, 1, 2);
    double two_threads = local_rate(&o, 2, 1);
    double two_procs = 0, ar = 0;
    char why[256] = "";
    bool have_two = run_two(&o, &two_procs, &ar, why, sizeof why);

    printf("\n%-44s %10s %9s %s\n", "configuration", "steps/s", "vs 1x1", "all-reduce per step");
    printf("%-44s %10.1f %8.2fx\n", "1 process x 1 thread", base, 1.0);
    printf("%-44s %10.1f %8.2fx\n", "1 process x 1 thread, 2 micro-batches", micro, micro / base);
    printf("%-44s %10.1f %8.2fx\n", "1 process x 2 threads", two_threads, two_threads / base);
    if (have_two)
        printf("%-44s %10.1f %8.2fx %.3f ms (%.1f%% of the time)\n", "2 processes x 1 thread (mpirun -np 2)", two_procs,
               two_procs / base, ar / two_procs * 1e3, 100 * ar);
    else printf("%-44s %10s %9s %s\n", "2 processes x 1 thread (mpirun -np 2)", "-", "-", why);
    printf("load after: %.2f\n", bn_loadavg());
    return 0;
}

/* GEMM benchmark: tapegrad's tg_gemm beside OpenBLAS's cblas_sgemm/dgemm.
 *
 * For each Linear shape (M, K, N) -- x is (M,K), W is (N,K) -- it times the
 * three GEMMs of a forward+backward pass, alone and together:
 *   NT  y  = x W^T    (M,N,K)      NN  dx = dy W    (M,K,N)
 *   TN  dW = dy^T x   (N,K,M)
 * and prints GFLOP/s (2*M*N*K flops per GEMM, median of the repetitions)
 * with 1 and 2 threads (or --threads LIST).
 *
 * OpenBLAS is optional: it is dlopen()ed (bench/common/blas.c), never
 * linked into tapegrad; without it its columns say "-". For a fair comparison
 * let OpenBLAS pick its own kernels and cache sizes:
 *   env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE build/bench/bench_gemm
 * and to compare an AVX2 build of ours (TG_NATIVE=OFF, -mavx2 -mfma) with
 * OpenBLAS's AVX2 kernels on an AVX-512 machine, OPENBLAS_CORETYPE=Haswell
 * (the header names the core OpenBLAS runs). Before each timed series the
 * other library's thread pool is left to go idle (bn_settle).
 * Multi-thread figures need otherwise idle cores: the load average is
 * printed before and after; on a busy machine a preempted thread stalls
 * every fork-join library (ours and OpenBLAS alike), and only the 1-thread
 * figures (best with --min --cpu) mean something.
 * Options: --f64 (double instead of float), --bf16 [KERNEL] (ours in bfloat16:
 *          A, B and C bfloat16, tg_gemm_bf16_ws with KERNEL avx512bf16, avx2,
 *          portable or auto (default); OpenBLAS still sgemm on the float
 *          values), --reps N (default 9), --min (best
 *          run instead of the median), --no-blas (skip OpenBLAS), --cpu
 *          (process CPU time, not wall time: for 1-thread tuning on a busy
 *          machine; with more threads it adds up all threads' time),
 *          --threads 1,2 (thread counts), --shape M,K,N (only this shape),
 *          --contend (a process spins on the last CPU of our affinity mask
 *          the whole run: how the thread counts fare when a core is taken;
 *          the GEMM's threading threshold is tuned from these figures). */
#define _POSIX_C_SOURCE 200809L
#include "bench/common/bench.h"
#include "tensor/gemm.h"
#include "tensor/half.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bn_blas blas;
static bool use_min;      /* --min: best run instead of the median */
static bool use_cpu_time; /* --cpu: process CPU time instead of wall time */

static double now_s(void) { return use_cpu_time ? bn_process_cpu() : bn_now(); }

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct {
    bool ta, tb;
    int64_t M, N, K;
    int a, b, c; /* which buffers: 0 x, 1 W, 2 dy, 3 y, 4 dx, 5 dW */
    int64_t lda, ldb, ldc;
} gemm_case;

typedef struct {
    bool f64;
    int bf16; /* 0: float, else the tg_gemm_bf16_kernel + 1 of ours in bfloat16 */
    void *buf[6];
    uint16_t *buf16[6]; /* bf16: the bfloat16 copies ours multiplies */
    void *work;
    size_t work_size;
} bench_data;

/* Case g in bfloat16, C bfloat16 (as a Linear multiplies). */
static tg_gemm_bf16_args bf16_args(const bench_data *d, const gemm_case *g, int threads) {
    return (tg_gemm_bf16_args){.kernel = (tg_gemm_bf16_kernel)(d->bf16 - 1),
                               .trans_a = g->ta,
                               .trans_b = g->tb,
                               .M = g->M,
                               .N = g->N,
                               .K = g->K,
                               .alpha = 1,
                               .A = d->buf16[g->a],
                               .lda = g->lda,
                               .B = d->buf16[g->b],
                               .ldb = g->ldb,
                               .C = d->buf16[g->c],
                               .ldc = g->ldc,
                               .c_bf16 = true,
                               .threads = threads};
}

static void run_ours(const bench_data *d, const gemm_case *g, int threads) {
    if (d->bf16) {
        const tg_gemm_bf16_args a = bf16_args(d, g, threads);
        tg_gemm_bf16_ws(&a, d->work, d->work_size);
    } else if (d->f64)
        tg_gemm_f64_ws(g->ta, g->tb, g->M, g->N, g->K, 1.0, d->buf[g->a], g->lda, d->buf[g->b], g->ldb, 0.0,
                       d->buf[g->c], g->ldc, threads, d->work, d->work_size);
    else
        tg_gemm_f32_ws(g->ta, g->tb, g->M, g->N, g->K, 1.0f, d->buf[g->a], g->lda, d->buf[g->b], g->ldb, 0.0f,
                       d->buf[g->c], g->ldc, threads, d->work, d->work_size);
}

static void run_blas(const bench_data *d, const gemm_case *g) {
    int ta = g->ta ? BN_TRANS : BN_NO_TRANS, tb = g->tb ? BN_TRANS : BN_NO_TRANS;
    if (d->f64)
        blas.dgemm(BN_ROW_MAJOR, ta, tb, (int)g->M, (int)g->N, (int)g->K, 1.0, d->buf[g->a], (int)g->lda, d->buf[g->b],
                   (int)g->ldb, 0.0, d->buf[g->c], (int)g->ldc);
    else
        blas.sgemm(BN_ROW_MAJOR, ta, tb, (int)g->M, (int)g->N, (int)g->K, 1.0f, d->buf[g->a], (int)g->lda, d->buf[g->b],
                   (int)g->ldb, 0.0f, d->buf[g->c], (int)g->ldc);
}

/* Median seconds of `reps` runs of cases [first, last) (after one warm-up). */
static double time_cases(const bench_data *d, const gemm_case *g, int first, int last, int threads, bool blas,
                         int reps) {
    double t[64];
    if (reps > 64) reps = 64;
    for (int r = -1; r < reps; r++) {
        double t0 = now_s();
        for (int i = first; i < last; i++) {
            if (blas) run_blas(d, &g[i]);
            else run_ours(d, &g[i], threads);
        }
        if (r >= 0) t[r] = now_s() - t0;
    }
    qsort(t, (size_t)reps, sizeof t[0], cmp_double);
    return use_min ? t[0] : t[reps / 2];
}

static void fill(void *p, int64_t n, bool f64, unsigned seed) {
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        double v = (double)(seed >> 8) / (double)(1u << 24) - 0.5;
        if (f64) ((double *)p)[i] = v;
        else ((float *)p)[i] = (float)v;
    }
}

static void bench_shape(int64_t M, int64_t K, int64_t N, bool f64, int bf16, const int *threads, int nthr, int reps) {
    const size_t es = f64 ? sizeof(double) : sizeof(float);
    /* x (M,K)  W (N,K)  dy (M,N)  y (M,N)  dx (M,K)  dW (N,K) */
    const int64_t sizes[6] = {M * K, N * K, M * N, M * N, M * K, N * K};
    bench_data d = {.f64 = f64, .bf16 = bf16};
    for (int i = 0; i < 6; i++) {
        d.buf[i] = aligned_alloc(64, ((size_t)sizes[i] * es + 63) / 64 * 64);
        d.buf16[i] = bf16 ? aligned_alloc(64, ((size_t)sizes[i] * 2 + 63) / 64 * 64) : NULL;
        if (!d.buf[i] || (bf16 && !d.buf16[i])) {
            fprintf(stderr, "bench_gemm: out of memory\n");
            exit(1);
        }
        fill(d.buf[i], sizes[i], f64, 17u + (unsigned)i);
        if (bf16) tg_f32_to_bf16_n(d.buf16[i], d.buf[i], (size_t)sizes[i]);
    }
    const gemm_case g[3] = {
        {false, true, M, N, K, 0, 1, 3, K, K, N},  /* y  = x W^T  */
        {false, false, M, K, N, 2, 1, 4, N, K, K}, /* dx = dy W   */
        {true, false, N, K, M, 2, 0, 5, N, K, K},  /* dW = dy^T x */
    };
    const char *names[4] = {"NT  y=xW^T", "NN  dx=dyW", "TN  dW=dy^Tx", "all three"};
    int maxthr = 1;
    for (int i = 0; i < nthr; i++) maxthr = threads[i] > maxthr ? threads[i] : maxthr;
    for (int i = 0; i < 3; i++) {
        const tg_gemm_bf16_args a = bf16_args(&d, &g[i], maxthr);
        size_t w = bf16 ? tg_gemm_bf16_workspace_size(&a) : tg_gemm_workspace_size(g[i].M, g[i].N, g[i].K, es, maxthr);
        if (w > d.work_size) d.work_size = w;
    }
    d.work = d.work_size ? aligned_alloc(64, (d.work_size + 63) / 64 * 64) : NULL;

    printf("\n%s (M,K,N) = (%lld,%lld,%lld)\n",
           bf16  ? "bf16 (OpenBLAS: sgemm)"
           : f64 ? "f64"
                 : "f32",
           (long long)M, (long long)K, (long long)N);
    printf("  %-14s", "GFLOP/s");
    for (int t = 0; t < nthr; t++) printf("   ours %dT  blas %dT  ratio", threads[t], threads[t]);
    printf("\n");
    /* All of ours first, then all of OpenBLAS: the two thread pools spin
     * after a call, and interleaving them would make each slow the other. */
    double gf[2][8][4];
    bool have = blas.lib && (f64 ? blas.dgemm != NULL : blas.sgemm != NULL);
    for (int who = 0; who < (have ? 2 : 1); who++) {
        for (int t = 0; t < nthr; t++) {
            if (who == 1 && blas.set_threads) blas.set_threads(threads[t]);
            bn_settle(NULL, 0, 3.0); /* the other pool idle */
            for (int c = 0; c < 4; c++) {
                int first = c < 3 ? c : 0, last = c < 3 ? c + 1 : 3;
                double flops = 0;
                for (int i = first; i < last; i++) flops += 2.0 * (double)g[i].M * (double)g[i].N * (double)g[i].K;
                gf[who][t][c] = flops / time_cases(&d, g, first, last, threads[t], who == 1, reps) * 1e-9;
            }
        }
    }
    for (int c = 0; c < 4; c++) {
        printf("  %-14s", names[c]);
        for (int t = 0; t < nthr; t++) {
            if (have) printf("  %8.1f  %8.1f  %5.2fx", gf[0][t][c], gf[1][t][c], gf[0][t][c] / gf[1][t][c]);
            else printf("  %8.1f  %8s  %6s", gf[0][t][c], "-", "-");
        }
        printf("\n");
    }
    /* Thread scaling of the three GEMMs together, against the first count. */
    for (int t = 1; t < nthr; t++) {
        printf("  speedup %dT/%dT (all three): ours %.2fx", threads[t], threads[0], gf[0][t][3] / gf[0][0][3]);
        if (have) printf(", OpenBLAS %.2fx", gf[1][t][3] / gf[1][0][3]);
        printf("\n");
    }
    bn_settle(NULL, 0, 3.0);
    for (int i = 0; i < 6; i++) free(d.buf[i]), free(d.buf16[i]);
    free(d.work);
}

int main(int argc, char **argv) {
    bool f64 = false;
    int bf16 = 0, reps = 9;
    int threads[8] = {1, 2}, nthr = 2;
    long long shape[3] = {0, 0, 0};
    bool no_blas = false, contend = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--f64")) {
            f64 = true;
        } else if (!strcmp(argv[i], "--bf16")) {
            bf16 = TG_GEMM_BF16_AUTO + 1;
            for (int k = TG_GEMM_BF16_AVX512; i + 1 < argc && k <= TG_GEMM_BF16_PORTABLE; k++)
                if (!strcmp(argv[i + 1], tg_gemm_bf16_name((tg_gemm_bf16_kernel)k))) bf16 = k + 1, i++;
            if (i + 1 < argc && !strcmp(argv[i + 1], "auto")) i++;
        } else if (!strcmp(argv[i], "--min")) {
            use_min = true;
        } else if (!strcmp(argv[i], "--cpu")) {
            use_cpu_time = true;
        } else if (!strcmp(argv[i], "--no-blas")) {
            no_blas = true;
        } else if (!strcmp(argv[i], "--contend")) {
            contend = true;
        } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
            reps = atoi(argv[++i]);
            if (reps < 1) reps = 1;
        } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            nthr = 0;
            for (char *s = strtok(argv[++i], ","); s && nthr < 8; s = strtok(NULL, ","))
                if (atoi(s) >= 1) threads[nthr++] = atoi(s);
            if (nthr == 0) threads[nthr++] = 1;
        } else if (!strcmp(argv[i], "--shape") && i + 1 < argc) {
            if (sscanf(argv[++i], "%lld,%lld,%lld", &shape[0], &shape[1], &shape[2]) != 3 || shape[0] < 1 ||
                shape[1] < 1 || shape[2] < 1) {
                fprintf(stderr, "bench_gemm: --shape wants M,K,N\n");
                return 2;
            }
        } else {
            fprintf(stderr,
                    "usage: %s [--f64] [--bf16 [KERNEL]] [--reps N] [--min] [--cpu] [--no-blas] [--threads 1,2] "
                    "[--shape M,K,N] [--contend]\n"
                    "  run as: env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE %s\n",
                    argv[0], argv[0]);
            return 2;
        }
    }

    if (!no_blas) blas = bn_blas_open();
    char cpu[128];
    printf("tapegrad gemm, kernel %s, on %s; OpenBLAS %s%s",
           bf16 ? tg_gemm_bf16_name((tg_gemm_bf16_kernel)(bf16 - 1)) : tg_gemm_kernel_name(),
           bn_cpu_name(cpu, sizeof cpu),
           blas.lib  ? "libopenblas, core "
           : no_blas ? "skipped (--no-blas)"
                     : "not found",
           blas.lib && blas.corename ? blas.corename() : "");
    if (blas.lib && (getenv("OPENBLAS_CORETYPE") || getenv("OPENBLAS_L2_SIZE")))
        printf(" (OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE set: a chosen kernel; env -u both for its own choice)");
    printf("\n%s of %d runs; GFLOP/s = 2*M*N*K / time; ratio = ours / OpenBLAS\n", use_min ? "best" : "median", reps);

    printf("load average before: %.2f\n", bn_loadavg());
    const int spinner = contend ? bn_spinner_start(bn_last_cpu()) : -1;
    if (contend) printf("--contend: a process spins on CPU %d the whole run\n", bn_last_cpu());
    if (shape[0]) {
        bench_shape(shape[0], shape[1], shape[2], f64, bf16, threads, nthr, reps);
    } else {
        static const int64_t shapes[3][3] = {{512, 512, 512}, {64, 784, 256}, {4096, 768, 3072}};
        for (int s = 0; s < 3; s++)
            bench_shape(shapes[s][0], shapes[s][1], shapes[s][2], f64, bf16, threads, nthr, reps);
    }
    bn_spinner_stop(spinner);
    printf("\nload average after: %.2f\n", bn_loadavg());
    bn_blas_close(&blas);
    return 0;
}

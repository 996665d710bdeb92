/* This machine's limits, measured: STREAM-like memory bandwidth and the
 * FMA peak of the widest SIMD the compiler targets (-march=native). */
#define _POSIX_C_SOURCE 200809L
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

/* ---- STREAM ------------------------------------------------------------ */

/* copy:  c_i = a_i            (reads a, writes c: 2 arrays)
 * triad: a_i = b_i + s c_i    (reads b and c, writes a: 3 arrays)
 * Arrays are first touched by the threads that use them (static schedule),
 * as in STREAM. */
bn_stream_result bn_stream(size_t bytes, int threads, int reps) {
    bn_stream_result r = {0, 0};
    const int64_t n = (int64_t)(bytes / sizeof(double));
    double *a = aligned_alloc(64, (size_t)n * sizeof(double));
    double *b = aligned_alloc(64, (size_t)n * sizeof(double));
    double *c = aligned_alloc(64, (size_t)n * sizeof(double));
    if (!a || !b || !c) {
        free(a), free(b), free(c);
        return r;
    }
    if (threads < 1) threads = 1;
    (void)threads;
#ifdef _OPENMP
#pragma omp parallel num_threads(threads)
#endif
    {
        int id = 0, nt = 1;
#ifdef _OPENMP
        id = omp_get_thread_num(), nt = omp_get_num_threads();
#endif
        for (int64_t i = n * id / nt; i < n * (id + 1) / nt; i++) a[i] = 1.0, b[i] = 2.0, c[i] = 0.0;
    }
    const double s = 3.0;
    for (int rep = 0; rep < reps; rep++) {
        /* each thread: its share's bytes over its own CPU time */
        double copy = 0, triad = 0;
#ifdef _OPENMP
#pragma omp parallel num_threads(threads) reduction(+ : copy, triad)
#endif
        {
            int id = 0, nt = 1;
#ifdef _OPENMP
            id = omp_get_thread_num(), nt = omp_get_num_threads();
#endif
            const int64_t i0 = n * id / nt, i1 = n * (id + 1) / nt;
            const double nb = (double)(i1 - i0) * sizeof(double);
            double t0 = bn_thread_cpu();
            for (int64_t i = i0; i < i1; i++) c[i] = a[i];
            double t1 = bn_thread_cpu();
            for (int64_t i = i0; i < i1; i++) a[i] = b[i] + s * c[i];
            double t2 = bn_thread_cpu();
            copy += 2 * nb / (t1 - t0) * 1e-9;
            triad += 3 * nb / (t2 - t1) * 1e-9;
        }
        if (copy > r.copy_gbs) r.copy_gbs = copy;
        if (triad > r.triad_gbs) r.triad_gbs = triad;
    }
    /* keep the stores alive */
    volatile double sink = a[n / 2] + c[n / 3];
    (void)sink;
    free(a), free(b), free(c);
    return r;
}

/* ---- FMA peak ------------------------------------------------------------ */

/* NCHAIN independent accumulators acc = acc * m + add: enough chains to
 * cover the FMA latency (4 cycles) times the FMA ports (2) with room. */
#define NCHAIN 16

#if defined(__AVX512F__)
#define BN_ISA "avx512"
#define VF __m512
#define VD __m512d
#define VF_SET1 _mm512_set1_ps
#define VD_SET1 _mm512_set1_pd
#define VF_FMA _mm512_fmadd_ps
#define VD_FMA _mm512_fmadd_pd
#define VF_ADD _mm512_add_ps
#define VD_ADD _mm512_add_pd
#define VF_FIRST(v) _mm512_cvtss_f32(v)
#define VD_FIRST(v) _mm512_cvtsd_f64(v)
#define LANES_F 16
#define LANES_D 8
#elif defined(__AVX2__) && defined(__FMA__)
#define BN_ISA "avx2"
#define VF __m256
#define VD __m256d
#define VF_SET1 _mm256_set1_ps
#define VD_SET1 _mm256_set1_pd
#define VF_FMA _mm256_fmadd_ps
#define VD_FMA _mm256_fmadd_pd
#define VF_ADD _mm256_add_ps
#define VD_ADD _mm256_add_pd
#define VF_FIRST(v) _mm256_cvtss_f32(v)
#define VD_FIRST(v) _mm256_cvtsd_f64(v)
#define LANES_F 8
#define LANES_D 4
#else
#define BN_ISA "scalar"
#define VF float
#define VD double
#define VF_SET1(x) ((float)(x))
#define VD_SET1(x) ((double)(x))
#define VF_FMA(a, b, c) ((a) * (b) + (c))
#define VD_FMA(a, b, c) ((a) * (b) + (c))
#define VF_ADD(a, b) ((a) + (b))
#define VD_ADD(a, b) ((a) + (b))
#define VF_FIRST(v) (v)
#define VD_FIRST(v) (v)
#define LANES_F 1
#define LANES_D 1
#endif

/* iters rounds of NCHAIN FMAs; returns a value that depends on all. */
#define BN_DEFINE_FMA_LOOP(NAME, V, SET1, FMA, ADD, FIRST, T)           \
    static T NAME(int64_t iters, T seed) {                             \
        V acc[NCHAIN];                                                  \
        for (int j = 0; j < NCHAIN; j++) acc[j] = SET1(seed + (T)j);    \
        const V m = SET1((T)0.999999), add = SET1((T)1e-6);             \
        for (int64_t i = 0; i < iters; i++) {                          \
            for (int j = 0; j < NCHAIN; j++) acc[j] = FMA(acc[j], m, add); \
        }                                                               \
        V s = acc[0];                                                   \
        for (int j = 1; j < NCHAIN; j++) s = ADD(s, acc[j]);            \
        return FIRST(s);                                                \
    }
BN_DEFINE_FMA_LOOP(fma_loop_f32, VF, VF_SET1, VF_FMA, VF_ADD, VF_FIRST, float)
BN_DEFINE_FMA_LOOP(fma_loop_f64, VD, VD_SET1, VD_FMA, VD_ADD, VD_FIRST, double)

bn_fma_result bn_fma_peak(int threads, int reps) {
    bn_fma_result r = {0, 0, BN_ISA};
    if (threads < 1) threads = 1;
    const int64_t iters = 4000000; /* 64M FMAs per thread: ~10-40 ms */
    volatile double sink = 0;
    for (int dt = 0; dt < 2; dt++) {
        double best = 0;
        const double lanes = dt == 0 ? LANES_F : LANES_D;
        for (int rep = 0; rep < reps; rep++) {
            double sum = 0, g = 0;
            /* each thread: its FMAs over its own CPU time */
#ifdef _OPENMP
#pragma omp parallel num_threads(threads) reduction(+ : sum, g)
#endif
            {
                int id = 0;
#ifdef _OPENMP
                id = omp_get_thread_num();
#endif
                double t0 = bn_thread_cpu();
                sum += dt == 0 ? (double)fma_loop_f32(iters, (float)(1 + id + rep))
                               : fma_loop_f64(iters, (double)(1 + id + rep));
                g += 2.0 * lanes * NCHAIN * (double)iters / (bn_thread_cpu() - t0) * 1e-9;
            }
            sink += sum;
            if (g > best) best = g;
        }
        if (dt == 0) r.f32_gflops = best;
        else r.f64_gflops = best;
    }
    (void)sink;
    return r;
}

/* ---- machine description ------------------------------------------------- */

const char *bn_cpu_name(char *buf, size_t size) {
    snprintf(buf, size, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return buf;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) == 0) {
            char *p = strchr(line, ':');
            if (p) {
                p++;
                while (*p == ' ' || *p == '\t') p++;
                p[strcspn(p, "\n")] = 0;
                snprintf(buf, size, "%s", p);
            }
            break;
        }
    }
    fclose(f);
    return buf;
}

double bn_loadavg(void) {
    double l = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (!f) return -1;
    if (fscanf(f, "%lf", &l) != 1) l = -1;
    fclose(f);
    return l;
}

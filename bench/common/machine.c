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
    const double s = 3.0, bytes_all = (double)n * sizeof(double);
    for (int rep = 0; rep < reps; rep++) {
        double copy = 0, triad = 0;
        /* the threads' start and end times of each kernel (wall clock) */
        double t0 = 1e300, t1 = 0, t2 = 1e300, t3 = 0;
#ifdef _OPENMP
#pragma omp parallel num_threads(threads) reduction(+ : copy, triad) reduction(min : t0, t2) reduction(max : t1, t3)
#endif
        {
            int id = 0, nt = 1;
#ifdef _OPENMP
            id = omp_get_thread_num(), nt = omp_get_num_threads();
#endif
            const int64_t i0 = n * id / nt, i1 = n * (id + 1) / nt;
            const double nb = (double)(i1 - i0) * sizeof(double);
#ifdef _OPENMP
#pragma omp barrier
#endif
            double w0 = bn_now(), c0 = bn_thread_cpu();
            for (int64_t i = i0; i < i1; i++) c[i] = a[i];
            double w1 = bn_now(), c1 = bn_thread_cpu();
#ifdef _OPENMP
#pragma omp barrier
#endif
            double w2 = bn_now(), c2 = bn_thread_cpu();
            for (int64_t i = i0; i < i1; i++) a[i] = b[i] + s * c[i];
            double w3 = bn_now(), c3 = bn_thread_cpu();
            copy += 2 * nb / (c1 - c0) * 1e-9;
            triad += 3 * nb / (c3 - c2) * 1e-9;
            t0 = w0, t1 = w1, t2 = w2, t3 = w3;
        }
        if (threads > 1) {
            /* several threads share the memory system only when they run
             * at the same time: all the bytes over the wall time from the
             * first start to the last end (the best run is the one where
             * every thread had its core) */
            copy = 2 * bytes_all / (t1 - t0) * 1e-9;
            triad = 3 * bytes_all / (t3 - t2) * 1e-9;
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

/* NCHAIN independent chains acc = acc * m + add, in named variables, not
 * an array: GCC at -O2 kept an array in memory (a load and a store per FMA),
 * and one store per cycle capped AVX2 machines at one FMA per cycle, half
 * their peak (real kernels then measured "140% of the limit"). 12 chains
 * and the two constants fit AVX2's 16 vector registers, and 12 cover an FMA
 * latency of up to 6 cycles on 2 ports (4 cycles on current x86). */
#define NCHAIN 12
#define BN_FMA_PORTS 2 /* FMA units per core assumed for the theoretical peak */

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
#define BN_DEFINE_FMA_LOOP(NAME, V, SET1, FMA, ADD, FIRST, T)                                 \
    static T NAME(int64_t iters, T seed) {                                                    \
        V a0 = SET1(seed), a1 = SET1(seed + 1), a2 = SET1(seed + 2), a3 = SET1(seed + 3);     \
        V a4 = SET1(seed + 4), a5 = SET1(seed + 5), a6 = SET1(seed + 6), a7 = SET1(seed + 7); \
        V a8 = SET1(seed + 8), a9 = SET1(seed + 9), a10 = SET1(seed + 10);                    \
        V a11 = SET1(seed + 11);                                                              \
        const V m = SET1((T)0.999999), add = SET1((T)1e-6);                                   \
        for (int64_t i = 0; i < iters; i++) {                                                 \
            a0 = FMA(a0, m, add), a1 = FMA(a1, m, add), a2 = FMA(a2, m, add);                 \
            a3 = FMA(a3, m, add), a4 = FMA(a4, m, add), a5 = FMA(a5, m, add);                 \
            a6 = FMA(a6, m, add), a7 = FMA(a7, m, add), a8 = FMA(a8, m, add);                 \
            a9 = FMA(a9, m, add), a10 = FMA(a10, m, add), a11 = FMA(a11, m, add);             \
        }                                                                                     \
        V s = ADD(ADD(ADD(a0, a1), ADD(a2, a3)), ADD(ADD(a4, a5), ADD(a6, a7)));              \
        return FIRST(ADD(s, ADD(ADD(a8, a9), ADD(a10, a11))));                                \
    }
BN_DEFINE_FMA_LOOP(fma_loop_f32, VF, VF_SET1, VF_FMA, VF_ADD, VF_FIRST, float)
BN_DEFINE_FMA_LOOP(fma_loop_f64, VD, VD_SET1, VD_FMA, VD_ADD, VD_FIRST, double)

/* The core clock in GHz: the highest the kernel reports (cpufreq's
 * cpuinfo_max_freq), else /proc/cpuinfo's "cpu MHz" (on a VM, usually the
 * nominal clock); 0 when neither is there. */
static double clock_ghz(void) {
    double khz = 0, mhz = 0;
    FILE *f = fopen("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq", "r");
    if (f) {
        if (fscanf(f, "%lf", &khz) != 1) khz = 0;
        fclose(f);
    }
    if (khz > 0) return khz * 1e-6;
    if (!(f = fopen("/proc/cpuinfo", "r"))) return 0;
    char line[512];
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "cpu MHz", 7) == 0) {
            const char *p = strchr(line, ':');
            if (p) mhz = strtod(p + 1, NULL);
            break;
        }
    fclose(f);
    return mhz > 0 ? mhz * 1e-3 : 0;
}

bn_fma_result bn_fma_peak(int threads, int reps) {
    bn_fma_result r = {0, 0, BN_ISA, 0, 0, 0};
    if (threads < 1) threads = 1;
    /* ports x lanes x 2 flops x clock, per thread */
    r.clock_ghz = clock_ghz();
    r.f32_theory = BN_FMA_PORTS * LANES_F * 2.0 * r.clock_ghz * threads;
    r.f64_theory = BN_FMA_PORTS * LANES_D * 2.0 * r.clock_ghz * threads;
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

const char *bn_fma_describe(char *buf, size_t size, const bn_fma_result *r) {
    if (r->clock_ghz > 0)
        snprintf(buf, size, "%s; theoretical %.1f and %.1f: %d FMA ports x %d|%d lanes x 2 x %.2f GHz%s", r->isa,
                 r->f32_theory, r->f64_theory, BN_FMA_PORTS, LANES_F, LANES_D, r->clock_ghz,
                 r->f32_theory > 0 && r->f32_gflops > r->f32_theory * 1.02 ? " (the cores run above that clock)" : "");
    else snprintf(buf, size, "%s; clock unknown, so no theoretical figure", r->isa);
    return buf;
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

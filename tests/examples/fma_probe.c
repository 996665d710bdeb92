/* The benchmark's FMA peak (bench/common/machine.c) against a real kernel:
 * a GEMM-like register block C (4 x 16 floats) += a[k] * B[k], 8 vector
 * accumulators, A broadcast and B loaded from L1 at each k, as a matrix
 * kernel does. The kernel must not beat the "peak" by more than timing
 * noise. Built by tests/examples/check.sh (case bench_fma_peak) with AVX2
 * and FMA only: the machines where the peak used to under-count. Exit
 * status 0 when the peak holds. */
#include <immintrin.h>
#include <stdio.h>
#include "bench.h"

#define K 64
static float a[4 * K] __attribute__((aligned(64))), b[16 * K] __attribute__((aligned(64)));

static float kernel(long reps) {
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00;
    for (long r = 0; r < reps; r++)
        for (int k = 0; k < K; k++) {
            __m256 b0 = _mm256_load_ps(&b[16 * k]), b1 = _mm256_load_ps(&b[16 * k + 8]);
            __m256 x = _mm256_broadcast_ss(&a[4 * k]);
            c00 = _mm256_fmadd_ps(x, b0, c00), c01 = _mm256_fmadd_ps(x, b1, c01);
            x = _mm256_broadcast_ss(&a[4 * k + 1]);
            c10 = _mm256_fmadd_ps(x, b0, c10), c11 = _mm256_fmadd_ps(x, b1, c11);
            x = _mm256_broadcast_ss(&a[4 * k + 2]);
            c20 = _mm256_fmadd_ps(x, b0, c20), c21 = _mm256_fmadd_ps(x, b1, c21);
            x = _mm256_broadcast_ss(&a[4 * k + 3]);
            c30 = _mm256_fmadd_ps(x, b0, c30), c31 = _mm256_fmadd_ps(x, b1, c31);
        }
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(c00, c01), _mm256_add_ps(c10, c11)),
                             _mm256_add_ps(_mm256_add_ps(c20, c21), _mm256_add_ps(c30, c31)));
    return _mm256_cvtss_f32(s);
}

int main(void) {
    for (int i = 0; i < 4 * K; i++) a[i] = 1e-3f * (float)i;
    for (int i = 0; i < 16 * K; i++) b[i] = 1e-3f * (float)(i % 7);
    const long reps = 60000; /* 60000 * 64 * 8 FMAs: ~30M */
    double best = 0;
    volatile float sink = 0;
    for (int t = 0; t < 7; t++) {
        double t0 = bn_thread_cpu();
        sink += kernel(reps);
        double g = 2.0 * 8 * 8 * K * (double)reps / (bn_thread_cpu() - t0) * 1e-9;
        if (g > best) best = g;
    }
    bn_fma_result peak = bn_fma_peak(1, 7), again = bn_fma_peak(1, 7);
    if (again.f32_gflops > peak.f32_gflops) peak = again;
    char d[200];
    printf("kernel %.1f GFLOP/s, peak %.1f GFLOP/s (%s)\n", best, peak.f32_gflops, bn_fma_describe(d, sizeof d, &peak));
    (void)sink;
    return best <= 1.10 * peak.f32_gflops ? 0 : 1;
}

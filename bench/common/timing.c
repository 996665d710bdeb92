/* Timing: warm-up, calibration of the calls per sample, median of samples. */
#define _POSIX_C_SOURCE 200809L
#include "bench.h"

#include <stdlib.h>
#include <time.h>

double bn_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double bn_process_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double bn_thread_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The clock of bn_time: set once by main before any timing. */
static bool use_cpu_clock;
void bn_use_cpu_clock(bool on) { use_cpu_clock = on; }
bool bn_cpu_clock(void) { return use_cpu_clock; }
static double clock_now(void) { return use_cpu_clock ? bn_process_cpu() : bn_now(); }

void bn_nap_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#define BN_MAX_SAMPLES 101

/* Sorts t[0..n-1] and returns its median. */
static double median(double *t, int n) {
    qsort(t, (size_t)n, sizeof t[0], cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

bn_timing bn_time(void (*fn)(void *arg), void *arg, double budget_s, int min_samples, double sample_s) {
    bn_timing r = {0};
    if (sample_s < 1e-3) sample_s = 1e-3;
    if (min_samples < 1) min_samples = 1;
    if (min_samples > BN_MAX_SAMPLES) min_samples = BN_MAX_SAMPLES;
    /* warm-up: the first call pays for page faults and cold caches; the
     * fastest of the next three calibrates (one call slowed down by
     * another job must not shrink the number of samples) */
    fn(arg);
    double t0, t1 = 1e300;
    for (int k = 0; k < 3; k++) {
        t0 = clock_now();
        fn(arg);
        double t = clock_now() - t0;
        if (t < t1) t1 = t;
    }
    if (t1 < 1e-9) t1 = 1e-9;
    /* tiny calls: refine the estimate over a few more calls */
    if (t1 < 1e-4) {
        int n = (int)(1e-3 / t1) + 1;
        t0 = clock_now();
        for (int i = 0; i < n; i++) fn(arg);
        t1 = (clock_now() - t0) / n;
        if (t1 < 1e-9) t1 = 1e-9;
    }
    double dinner = sample_s / t1;
    int inner = dinner < 1 ? 1 : dinner > 1e8 ? 100000000 : (int)dinner + 1;
    if (t1 >= sample_s) inner = 1;
    int samples = (int)(budget_s / (t1 * inner));
    if (samples < min_samples) samples = min_samples;
    if (samples > BN_MAX_SAMPLES) samples = BN_MAX_SAMPLES;
    double t[BN_MAX_SAMPLES], tw[BN_MAX_SAMPLES], tc[BN_MAX_SAMPLES];
    for (int s = 0; s < samples; s++) {
        double w0 = bn_now(), c0 = bn_process_cpu();
        for (int i = 0; i < inner; i++) fn(arg);
        tw[s] = (bn_now() - w0) / inner;
        tc[s] = (bn_process_cpu() - c0) / inner;
        t[s] = use_cpu_clock ? tc[s] : tw[s];
    }
    r.median_s = median(t, samples);
    r.min_s = t[0];
    r.wall_median_s = median(tw, samples);
    r.wall_min_s = tw[0];
    r.cpu_median_s = median(tc, samples);
    r.cpu_min_s = tc[0];
    r.samples = samples;
    r.inner = inner;
    return r;
}

/* Shared helpers of the benchmark programs (bench/common/, linked into every
 * benchmark program). Everything here is prefixed bn_ so it never clashes with a
 * benchmark's own static helpers.
 *
 *  - timing: bn_now, bn_time (warm-up, calibration, median of samples)
 *  - machine limits: bn_stream (STREAM-like copy/triad bandwidth) and
 *    bn_fma_peak (f32/f64 FMA throughput with the widest SIMD compiled in)
 *  - quiet measurements: bn_settle (let thread pools go idle), other jobs'
 *    CPU use (bn_machine_busy, bn_tasks_cpu), a spinner for --contend
 *  - OpenBLAS via dlopen (never a link dependency): bn_blas_open
 *  - PyTorch as a subprocess (bench/torch_bench.py --server): bn_torch_*
 */
#ifndef TG_BENCH_COMMON_BENCH_H
#define TG_BENCH_COMMON_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- timing ------------------------------------------------------------ */

/* Monotonic wall-clock seconds. */
double bn_now(void);
/* CPU seconds used by this process (all threads, user + system) and by
 * the calling thread. */
double bn_process_cpu(void);
double bn_thread_cpu(void);
/* The clock bn_time uses: wall time (default) or this process's CPU time.
 * CPU time is the robust measure for one thread on a machine shared with
 * other jobs (time spent descheduled is not counted); with several threads
 * it adds up all threads, so thread scaling needs wall time. */
void bn_use_cpu_clock(bool on);
bool bn_cpu_clock(void);
/* Sleeps ms milliseconds (lets spinning thread pools go to sleep). */
void bn_nap_ms(long ms);

/* The result of timing a function. */
typedef struct bn_timing {
    double median_s; /* median time of one call, on bn_time's clock */
    double min_s;    /* fastest sample, per call */
    /* both clocks, whichever bn_time uses */
    double wall_median_s, wall_min_s;
    double cpu_median_s, cpu_min_s;
    int samples; /* samples taken (each `inner` calls) */
    int inner;   /* calls per sample */
} bn_timing;

/* Times fn(arg): one warm-up call, three calibration calls (the fastest
 * counts), then samples of `inner` calls each, inner chosen so a sample lasts >= sample_s (at least
 * 1 ms), as many samples as fit in budget_s (at least min_samples, at most
 * 101). The median of the samples, divided by inner, is the time of one
 * call. The same algorithm runs in bench/torch_bench.py. */
bn_timing bn_time(void (*fn)(void *arg), void *arg, double budget_s, int min_samples, double sample_s);

/* ---- machine limits ------------------------------------------------------ */

/* STREAM-like bandwidth with `threads` OpenMP threads over arrays of
 * `bytes` bytes each (doubles): copy c = a (2 arrays moved), triad
 * a = b + s c (3 arrays moved); the best of `reps` runs, in GB/s (1e9).
 * One thread times itself with its thread CPU clock, so time spent
 * descheduled by other jobs does not count (the limit is what the core can
 * do when it runs). Several threads are timed in wall time from the first
 * start to the last end: they share the memory system only when they run
 * together, and adding up per-thread rates would count a thread that ran
 * while the other waited as if both had run at once. */
typedef struct bn_stream_result {
    double copy_gbs, triad_gbs;
} bn_stream_result;
bn_stream_result bn_stream(size_t bytes, int threads, int reps);

/* FMA throughput: every thread runs independent chains of vector fused
 * multiply-adds; GFLOP/s = 2 * lanes * FMAs / time, the best of `reps`.
 * Beside it the theoretical peak, 2 FMA ports x lanes x 2 x clock x
 * threads, when the clock is known (clock_ghz > 0). */
typedef struct bn_fma_result {
    double f32_gflops, f64_gflops;
    const char *isa; /* "avx512", "avx2" or "scalar" */
    double clock_ghz, f32_theory, f64_theory;
} bn_fma_result;
bn_fma_result bn_fma_peak(int threads, int reps);
/* "avx512; theoretical 156.8 and 78.4 at 2 FMA ports x 16|8 lanes x 2 x
 * 2.45 GHz" (or that the clock is unknown), into buf. */
const char *bn_fma_describe(char *buf, size_t size, const bn_fma_result *r);

/* "AMD EPYC ..." from /proc/cpuinfo (or "unknown"), into buf. */
const char *bn_cpu_name(char *buf, size_t size);
/* The 1-minute load average, or -1. */
double bn_loadavg(void);

/* ---- quiet measurements (bench/common/quiet.c) ------------------------- */

/* CPU seconds used so far by every thread of process `pid` (0: this
 * process), except thread `skip_tid` (0: none), from the scheduler's own
 * per-thread accounting (/proc/PID/task/TID/schedstat, nanoseconds);
 * 0 when unreadable. */
double bn_tasks_cpu(int pid, int skip_tid);
/* The calling thread's id (gettid). */
int bn_tid(void);
/* CPU seconds all CPUs of the machine have been busy so far (user, nice,
 * system, irq, softirq and steal from /proc/stat); -1 when unreadable.
 * Minus what our processes used over the same interval, divided by the
 * wall time, it is how many CPUs other jobs took (steal counts as theirs:
 * the hypervisor ran someone else). */
double bn_machine_busy(void);

/* Waits until the processes in pids[0..n) (PyTorch's servers) and this
 * process's threads other than the caller (our OpenMP pool, OpenBLAS's
 * pool) use less than 5% of a CPU over a 20 ms window, at most max_s
 * seconds: after a call, thread pools keep spinning for a while (OpenMP
 * ~ms, OpenBLAS's pthread server up to ~0.1 s) and would compete with
 * the next measurement. Returns the seconds waited, negative when it gave
 * up at max_s. */
double bn_settle(const int *pids, int n, double max_s);

/* A process spinning on one CPU (pinned with sched_setaffinity), for the
 * --contend measurements: bn_spinner_start returns its pid (or -1),
 * bn_spinner_stop kills and reaps it. */
int bn_spinner_start(int cpu);
void bn_spinner_stop(int pid);
/* The highest-numbered CPU in this process's affinity mask, and how many
 * CPUs the mask holds. */
int bn_last_cpu(void);
int bn_cpu_count(void);

/* ---- OpenBLAS (dlopen) --------------------------------------------------- */

enum { BN_ROW_MAJOR = 101, BN_NO_TRANS = 111, BN_TRANS = 112 };
typedef void (*bn_sgemm_fn)(int order, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                            const float *B, int ldb, float beta, float *C, int ldc);
typedef void (*bn_dgemm_fn)(int order, int ta, int tb, int M, int N, int K, double alpha, const double *A, int lda,
                            const double *B, int ldb, double beta, double *C, int ldc);
typedef struct bn_blas {
    void *lib;                /* NULL: OpenBLAS not found */
    bn_sgemm_fn sgemm;        /* cblas_sgemm */
    bn_dgemm_fn dgemm;        /* cblas_dgemm, may be NULL */
    void (*set_threads)(int); /* openblas_set_num_threads, may be NULL */
    char *(*config)(void);    /* openblas_get_config, may be NULL */
    char *(*corename)(void);  /* openblas_get_corename ("Haswell", "SkylakeX"...), may be NULL */
} bn_blas;
/* Opens libopenblas.so.0 (then libopenblas.so); lib NULL when absent. */
bn_blas bn_blas_open(void);
void bn_blas_close(bn_blas *b);

/* ---- PyTorch subprocess -------------------------------------------------- */

/* A running `python3 torch_bench.py --server --threads N`. */
typedef struct bn_torch {
    int pid;
    int to_fd, from_fd; /* pipes: our writes, its replies */
    bool ok;            /* it started and imported torch */
    char version[64];   /* torch.__version__ */
    int threads;        /* torch.get_num_threads() after set_num_threads */
    char omp_wait[16];  /* OMP_WAIT_POLICY it runs with, "" for OpenMP's default */
    char why[256];      /* why it is not ok */
} bn_torch;

/* Starts the server (timing with the same clock as bn_time: process CPU
 * time when cpu_clock) and waits for its "ready" line; t->ok tells whether
 * torch could be imported (t->why says why not). The server runs with
 * OPENBLAS_NUM_THREADS=threads (Debian's PyTorch multiplies through
 * OpenBLAS, whose pool otherwise has one thread per core whatever
 * torch.set_num_threads says) and, when omp_wait is not NULL,
 * OMP_WAIT_POLICY=omp_wait ("PASSIVE": its OpenMP threads sleep at once
 * after a parallel region instead of spinning). */
void bn_torch_start(bn_torch *t, const char *python, const char *script, int threads, double budget_s, bool cpu_clock,
                    const char *omp_wait);
/* Sends one command line (no newline) and reads the one-line JSON reply
 * into reply (size bytes). false when the server died or answered an error. */
bool bn_torch_call(bn_torch *t, const char *cmd, char *reply, size_t size);
/* The number after "key": in a flat JSON object, or NaN. */
double bn_json_number(const char *json, const char *key);
/* Ends the server and reaps it. */
void bn_torch_stop(bn_torch *t);

#endif

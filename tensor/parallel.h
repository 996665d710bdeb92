/* Parallel tasks for the hot kernels (GEMM, the fused norms): a small pool
 * of helper threads that never makes the caller wait for a helper that is
 * not running. Internal (not installed).
 *
 * Why not an OpenMP parallel region: a region ends with a barrier that
 * waits for every thread of the team, so when a helper has lost its core
 * (another job on a busy or shared machine) the caller waits until the
 * scheduler gives the core back -- a time slice, milliseconds -- however
 * little work the helper had; and OpenMP's threads spin for milliseconds
 * after each region, taking their share of a contended core for nothing.
 * Measured with a spinning process on one of 2 cores (bench --contend),
 * that made 2 threads up to several times slower than 1.
 *
 * Here the tasks are claimed one at a time through one atomic word: the
 * caller starts on them at once, a helper joins when it runs, and the
 * caller waits only for tasks already claimed. A helper that wakes up too
 * late finds nothing to claim and touches nothing. Helpers spin about
 * 100 us for the next job, then sleep; waking a sleeping thread is slow
 * (~100 us for the waker on the machine measured, tensor/parallel.c), so
 * the caller wakes sleeping helpers only when the tasks left would keep it
 * busy a few times that long, and a short job after a pause runs on the
 * caller alone. The caller, once
 * every task is claimed, spins for the helpers' last tasks up to half the
 * time the job took so far, then sleeps until the last one wakes it (so a
 * waiting thread never holds a core another thread needs for long). One
 * job at a time: a second caller
 * (another thread, or a task calling in) runs its tasks itself.
 *
 * Every parallel loop of the library runs here (the GEMM, the norms, the
 * elementwise ops, reductions, softmax, losses, attention, embedding,
 * dropout, batched matmul, the Linear bias): one pool, so two sets of
 * threads never compete for the cores.
 *
 * Results must not depend on which thread runs a task: each task writes
 * its own outputs (that is what keeps the kernels bitwise identical for any
 * thread count). */
#ifndef TG_TENSOR_PARALLEL_H
#define TG_TENSOR_PARALLEL_H

#include <stddef.h>
#include <stdint.h>

/* One task: fn(arg, task, worker), worker in [0, threads) (the caller is
 * worker 0), for per-thread scratch space. */
typedef void (*tg_task_fn)(void *arg, int64_t task, int worker);

/* Runs fn(arg, t, worker) once for every t in [0, ntasks) on up to
 * `threads` threads (the caller and threads - 1 helpers) and returns when
 * all are done. threads <= 1 or ntasks <= 1 runs them in order in the
 * caller. */
void tg_parallel(int threads, int64_t ntasks, tg_task_fn fn, void *arg);

/* tg_parallel for a job whose time on one thread the caller can estimate
 * (serial_ns > 0, e.g. from its multiply-adds): sleeping helpers are woken
 * at the start when that is at least the pool's wake threshold, never
 * otherwise. tg_parallel instead estimates it from the caller's first
 * tasks, which misleads when tasks differ in size (the GEMM's shrinking
 * row chunks, whose first is half the job). serial_ns <= 0: tg_parallel. */
void tg_parallel_sized(int threads, int64_t ntasks, tg_task_fn fn, void *arg, double serial_ns);

/* A range cut into pieces: fn(arg, i0, i1, worker) on [i0, i1). */
typedef void (*tg_range_fn)(void *arg, int64_t i0, int64_t i1, int worker);

/* Runs fn over [0, n) cut into pieces of `chunk` (the last one shorter),
 * each piece one task of tg_parallel. The pieces depend on n and chunk
 * only, never on `threads`, so a loop whose pieces write disjoint data
 * gives the same bits for any thread count. chunk < 1 counts as 1. */
void tg_parallel_range(int threads, int64_t n, int64_t chunk, tg_range_fn fn, void *arg);

/* Elementwise work (the elementwise ops, reductions, Adam's update) is split
 * over threads in chunks of TG_PAR_CHUNK elements, and only when there are
 * at least TG_PAR_MIN elements. Chunk boundaries depend only on the size,
 * so results never depend on the thread count.
 * Measured (add + exp of n floats, task pool, 2 threads against 1, on a
 * 2-core machine at load ~16, so CPU time is the figure to trust): the
 * process CPU per op grew by 49% at n = 65536 (132 -> 197 us) and by 10% at
 * 262144 (797 -> 879 us) -- the helper's spin before and after its share --
 * while pieces of 4096 at n = 8192 cost 1T 19 us, 2T 18 us of CPU. The wall
 * times were too noisy at that load to move TG_PAR_MIN from 65536; retune
 * on a quiet machine (the build flags -DTG_PAR_MIN=, -DTG_PAR_CHUNK=). */
#ifndef TG_PAR_CHUNK /* overridable for tuning: -DTG_PAR_CHUNK=... */
#define TG_PAR_CHUNK ((int64_t)1 << 14)
#endif
#ifndef TG_PAR_MIN
#define TG_PAR_MIN ((int64_t)1 << 16)
#endif

/* memset(p, 0, bytes) on up to `threads` threads, in pieces of
 * TG_ZERO_PIECE bytes when there are at least two (smaller ones are one
 * plain memset): the zeroing of gradients, which is a few % of a training
 * step and otherwise runs on one thread. */
#ifndef TG_ZERO_PIECE
#define TG_ZERO_PIECE ((size_t)1 << 17)
#endif
void tg_parallel_zero(int threads, void *p, size_t bytes);

#endif

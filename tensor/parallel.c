/* The task pool of tensor/parallel.h.
 *
 * One job at a time is published in `pool`: its function, argument and
 * task count, and one atomic word `state` = (generation << 32) | next task.
 * Claiming task t of generation g is a compare-and-swap of (g, t) into
 * (g, t + 1): it succeeds only while job g is open, so a helper that still
 * thinks of an old job claims nothing and reads nothing of the new one.
 * Every finished task adds 1 to `done`; the caller returns when done equals
 * the task count, so job g's fields stay valid while any of its tasks
 * runs. Helpers sleep on a condition variable after spinning ~100 us; the
 * caller wakes them only if one sleeps (`sleepers`, checked after the new
 * state is stored: the two sequentially consistent accesses on each side
 * make sure one of them sees the other), and only for a job whose tasks
 * left would keep the caller busy TG_POOL_WAKE_NS (below: why), estimated
 * from the caller's first tasks or, by tg_parallel_sized, given at the
 * start; a helper that is not woken claims nothing of that job.
 *
 * The caller, once every task is claimed, waits for the helpers' last
 * tasks the same way: it spins up to half the job's time so far (at most
 * TG_POOL_WAIT_NS: most waits end there, a helper's last task being about
 * as long as the caller's), then sleeps on `finished` with `waiting` set; the helper whose
 * task makes `done` reach the task count wakes it when `waiting` is set
 * (again one store and one load on each side, sequentially consistent).
 * Sleeping instead of yielding matters on a busy machine: a yielding
 * caller is runnable all the time, competes for the core with the helper
 * it waits for (or with another job's thread) and showed as system time. */
#define _POSIX_C_SOURCE 200809L
#include "tensor/parallel.h"

#include <string.h>

/* tg_parallel_range's job: the range, its pieces and the loop body. */
typedef struct {
    tg_range_fn fn;
    void *arg;
    int64_t n, chunk;
} range_job;

static void range_task(void *p, int64_t t, int worker) {
    const range_job *r = p;
    const int64_t i0 = t * r->chunk;
    r->fn(r->arg, i0, r->n - i0 < r->chunk ? r->n : i0 + r->chunk, worker);
}

void tg_parallel_range(int threads, int64_t n, int64_t chunk, tg_range_fn fn, void *arg) {
    if (n <= 0) return;
    if (chunk < 1) chunk = 1;
    if (threads <= 1 || n <= chunk) {
        /* the same pieces, in order, in the caller */
        for (int64_t i0 = 0; i0 < n; i0 += chunk) fn(arg, i0, n - i0 < chunk ? n : i0 + chunk, 0);
        return;
    }
    range_job r = {fn, arg, n, chunk};
    tg_parallel(threads, (n + chunk - 1) / chunk, range_task, &r);
}

typedef struct zero_job {
    unsigned char *p;
} zero_job;

static void zero_range(void *arg, int64_t i0, int64_t i1, int worker) {
    (void)worker;
    memset(((zero_job *)arg)->p + i0, 0, (size_t)(i1 - i0));
}

void tg_parallel_zero(int threads, void *p, size_t bytes) {
    if (bytes == 0) return;
    if (threads <= 1 || bytes < 2 * TG_ZERO_PIECE) {
        memset(p, 0, bytes);
        return;
    }
    zero_job z = {p};
    tg_parallel_range(threads, (int64_t)bytes, (int64_t)TG_ZERO_PIECE, zero_range, &z);
}

#ifndef TG_HAVE_OPENMP
/* Without OpenMP the library runs one thread (tg_set_threads), and needs
 * no threads library: every job runs in the caller. */
void tg_parallel(int threads, int64_t ntasks, tg_task_fn fn, void *arg) {
    (void)threads;
    for (int64_t t = 0; t < ntasks; t++) fn(arg, t, 0);
}

void tg_parallel_sized(int threads, int64_t ntasks, tg_task_fn fn, void *arg, double serial_ns) {
    (void)serial_ns;
    tg_parallel(threads, ntasks, fn, arg);
}
#else

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#define TG_PAUSE() _mm_pause()
#else
#define TG_PAUSE() ((void)0)
#endif

#define TG_POOL_MAX 255 /* helpers at most */
#ifndef TG_POOL_SPIN_NS
#define TG_POOL_SPIN_NS 100000 /* a helper's wait for the next job before it sleeps */
#endif
/* The measured costs that set the two waits below (2-vCPU AMD EPYC VM,
 * Linux 6.18, quiet; instrumented tg_parallel, GPT-2 small and MLP
 * training steps of bench/vs_pytorch.c):
 *  - waking a sleeping thread blocks the waker ~107 us (the caller's
 *    pthread_cond_broadcast to a sleeping helper in the MLP 784-256-256-10
 *    step: 2 per step, 106.9 us each), and the woken thread runs ~15-25 us
 *    after it (the helper joined 15.6 us after the job started; a sleeping
 *    caller woke 19-23 us after the helper's signal);
 *  - so a job that would finish in ~100 us on the caller alone is done
 *    sooner without waking anyone: the MLP step, whose 5 parallel jobs
 *    each found the helper asleep, ran 0.90-0.94x as fast with 2 threads
 *    as with 1 (alternating, quiet: 603-636 us against 547-561 us).
 * Hence: the caller wakes sleeping helpers only when the tasks left would
 * take it at least TG_POOL_WAKE_NS (estimated from its own tasks so far):
 * a wake that blocks the caller ~110 us pays when the helper then takes
 * half of what is left, R/2 - 110 > 110 us, R >= ~300 us (a GEMM of the
 * GPT step takes ~1 ms), and it waits for the helpers' last tasks by spinning up
 * to half the time the job has taken so far (at most TG_POOL_WAIT_NS)
 * before it sleeps: the GPT-2 small step with the former fixed ~5 us spin
 * slept ~40 times per step (each a ~100 us signal for the helper), while a
 * spin bounded by the job's own length wastes at most a third of the job
 * when the helper has lost its core. */
#ifndef TG_POOL_WAKE_NS
#define TG_POOL_WAKE_NS 300000
#endif
#ifndef TG_POOL_WAIT_NS
#define TG_POOL_WAIT_NS 200000
#endif

static struct {
    pthread_mutex_t job_lock; /* held by the caller of the job in flight */
    pthread_mutex_t sleep_lock;
    pthread_cond_t wake;
    pthread_cond_t finished; /* the caller sleeps here (under sleep_lock) for the last task */
    int helpers;             /* started (under job_lock) */
    uint32_t generation;     /* of the last job (under job_lock) */
    _Atomic uint64_t state;  /* (generation << 32) | next task to claim */
    _Atomic int64_t done;    /* tasks of the current job finished */
    _Atomic int sleepers;    /* helpers asleep on `wake` */
    _Atomic int waiting;     /* the caller is (about to be) asleep on `finished` */
    /* the current job: written before `state` announces it */
    tg_task_fn fn;
    void *arg;
    _Atomic int64_t ntasks;
    _Atomic int want; /* helpers 1..want take part */
} pool = {.job_lock = PTHREAD_MUTEX_INITIALIZER,
          .sleep_lock = PTHREAD_MUTEX_INITIALIZER,
          .wake = PTHREAD_COND_INITIALIZER,
          .finished = PTHREAD_COND_INITIALIZER};

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void wake_helpers(void) {
    pthread_mutex_lock(&pool.sleep_lock);
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.sleep_lock);
}

/* Claims and runs tasks of generation gen until none is left (or the job
 * is over); worker: the runner's id. start (the caller only, when a
 * helper sleeps; 0 otherwise): the job's start time; after each task the
 * caller estimates the time the tasks not yet claimed would take it (its
 * mean task time so far) and wakes the sleeping helpers once that is at
 * least TG_POOL_WAKE_NS. */
static void run_tasks(uint32_t gen, int worker, double start) {
    int64_t mine = 0; /* tasks this runner has finished */
    for (;;) {
        uint64_t s = atomic_load(&pool.state);
        const uint64_t t = s & 0xffffffffu;
        /* ntasks may already be a newer job's: then the state's generation
         * differs too, and the exchange below fails; when it succeeds, job
         * gen was open all along, and n is its task count */
        const int64_t n = atomic_load(&pool.ntasks);
        if ((uint32_t)(s >> 32) != gen || (int64_t)t >= n) return;
        if (!atomic_compare_exchange_weak(&pool.state, &s, s + 1)) continue;
        pool.fn(pool.arg, (int64_t)t, worker);
        mine++;
        if (start > 0) {
            const double left = (now_ns() - start) / (double)mine * (double)(n - (int64_t)t - 1);
            if (left >= TG_POOL_WAKE_NS) {
                if (atomic_load(&pool.sleepers) > 0) wake_helpers();
                start = 0;
            }
        }
        /* the job's last task wakes a sleeping caller (never the caller
         * itself: it is not asleep while it runs a task) */
        if (atomic_fetch_add(&pool.done, 1) + 1 == n && atomic_load(&pool.waiting)) {
            pthread_mutex_lock(&pool.sleep_lock);
            pthread_cond_signal(&pool.finished);
            pthread_mutex_unlock(&pool.sleep_lock);
        }
    }
}

static void *helper_main(void *p) {
    const int id = (int)(intptr_t)p;
    uint32_t seen = (uint32_t)(atomic_load(&pool.state) >> 32);
    for (;;) {
        uint32_t gen = (uint32_t)(atomic_load(&pool.state) >> 32);
        if (gen == seen) {
            /* wait for the next job: spin a little, then sleep */
            const double until = now_ns() + TG_POOL_SPIN_NS;
            for (int i = 0; gen == seen; i++) {
                TG_PAUSE();
                if (i % 64 == 63 && now_ns() > until) break;
                gen = (uint32_t)(atomic_load(&pool.state) >> 32);
            }
            if (gen == seen) {
                pthread_mutex_lock(&pool.sleep_lock);
                atomic_fetch_add(&pool.sleepers, 1);
                while ((gen = (uint32_t)(atomic_load(&pool.state) >> 32)) == seen)
                    pthread_cond_wait(&pool.wake, &pool.sleep_lock);
                atomic_fetch_sub(&pool.sleepers, 1);
                pthread_mutex_unlock(&pool.sleep_lock);
            }
        }
        seen = gen;
        if (id <= atomic_load(&pool.want)) run_tasks(gen, id, 0);
    }
    return NULL;
}

/* In the child of a fork only the forking thread exists: no helper, no
 * sleeper (a condition variable that still counted the parent's waiters
 * could block a broadcast), fresh locks. */
static void after_fork_in_child(void) {
    pool.helpers = 0;
    atomic_store(&pool.sleepers, 0);
    atomic_store(&pool.waiting, 0);
    pthread_mutex_init(&pool.job_lock, NULL);
    pthread_mutex_init(&pool.sleep_lock, NULL);
    pthread_cond_init(&pool.wake, NULL);
    pthread_cond_init(&pool.finished, NULL);
}

static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
static void register_fork(void) { pthread_atfork(NULL, NULL, after_fork_in_child); }

/* Starts helpers up to n (under job_lock); fewer if the system refuses. */
static void grow(int n) {
    if (n > TG_POOL_MAX) n = TG_POOL_MAX;
    if (pool.helpers < n) pthread_once(&fork_once, register_fork);
    while (pool.helpers < n) {
        pthread_attr_t attr;
        pthread_t th;
        sigset_t all, old;
        if (pthread_attr_init(&attr) != 0) return;
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        /* signals go to the program's own threads, never to a helper */
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        const int rc = pthread_create(&th, &attr, helper_main, (void *)(intptr_t)(pool.helpers + 1));
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        pthread_attr_destroy(&attr);
        if (rc != 0) return;
        pool.helpers++;
    }
}

void tg_parallel(int threads, int64_t ntasks, tg_task_fn fn, void *arg) {
    tg_parallel_sized(threads, ntasks, fn, arg, 0);
}

void tg_parallel_sized(int threads, int64_t ntasks, tg_task_fn fn, void *arg, double serial_ns) {
    if (ntasks <= 0) return;
    if (threads <= 1 || ntasks == 1 || ntasks > 0xffffffffll || pthread_mutex_trylock(&pool.job_lock) != 0) {
        for (int64_t t = 0; t < ntasks; t++) fn(arg, t, 0);
        return;
    }
    int want = threads - 1;
    if (want > ntasks - 1) want = (int)(ntasks - 1);
    grow(want);
    if (want > pool.helpers) want = pool.helpers;
    pool.fn = fn;
    pool.arg = arg;
    atomic_store(&pool.ntasks, ntasks);
    atomic_store(&pool.want, want);
    atomic_store(&pool.done, 0);
    const uint32_t gen = ++pool.generation;
    const double start = now_ns();
    atomic_store(&pool.state, (uint64_t)gen << 32);
    /* a sleeping helper is woken only for a long job (see TG_POOL_WAKE_NS):
     * known now when the caller estimated it, else after the first task */
    const bool sleeping = atomic_load(&pool.sleepers) > 0;
    if (serial_ns > 0) {
        if (sleeping && serial_ns >= TG_POOL_WAKE_NS) wake_helpers();
        run_tasks(gen, 0, 0);
    } else {
        run_tasks(gen, 0, sleeping ? start : 0);
    }
    /* every task is claimed; wait for the ones helpers are running: spin
     * for up to half the job's time so far, then sleep until the last one
     * is done */
    if (atomic_load(&pool.done) < ntasks) {
        const double now = now_ns(), spin = (now - start) / 2;
        const double until = now + (spin < TG_POOL_WAIT_NS ? spin : TG_POOL_WAIT_NS);
        for (int i = 0; atomic_load(&pool.done) < ntasks; i++) {
            TG_PAUSE();
            if (i % 64 == 63 && now_ns() > until) break;
        }
    }
    if (atomic_load(&pool.done) < ntasks) {
        pthread_mutex_lock(&pool.sleep_lock);
        atomic_store(&pool.waiting, 1);
        while (atomic_load(&pool.done) < ntasks) pthread_cond_wait(&pool.finished, &pool.sleep_lock);
        atomic_store(&pool.waiting, 0);
        pthread_mutex_unlock(&pool.sleep_lock);
    }
    pthread_mutex_unlock(&pool.job_lock);
}
#endif

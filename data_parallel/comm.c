/* The transport under the collectives of data_parallel/: MPI, or a world of one.
 *
 * This is the only file that names MPI. It is compiled with TG_HAVE_MPI=1
 * when the library is built over MPI (CMake option TG_MPI), and then uses
 * MPI only when a launcher started the program: mpirun (Open MPI) announces
 * the world in OMPI_COMM_WORLD_SIZE, MPICH's Hydra and Slurm's PMI in
 * PMI_SIZE, PMIx launchers set PMIX_RANK. A program started by hand is a
 * world of one without MPI: no start-up cost, no MPI runtime to satisfy
 * (valgrind, sanitizers), and the same results, since with one rank every
 * collective is a copy or nothing.
 *
 * Every message is bytes (MPI_BYTE): the callers pack f32 and f64 values
 * themselves and do their own arithmetic (data_parallel/fold.c), so MPI never adds
 * anything -- the order of every sum stays the library's. Errors are
 * returned (MPI_ERRORS_RETURN on our own duplicate of MPI_COMM_WORLD), not
 * fatal, so they reach the context like any other error.
 *
 * The deadline. Every collective is started nonblocking (MPI_Iallreduce,
 * MPI_Ibcast, ...) and waited for by polling MPI_Test: for the first
 * SPIN_SECONDS without a pause (a short wait costs no sleep's latency),
 * then with sleeps of 1/16 of the time waited so far, at least MIN_PAUSE
 * and at most MAX_PAUSE -- so a rank that waits long for a slower one
 * wakes a few hundred times a second instead of spinning a core (MPI's
 * blocking calls spin), and notices the end of a wait at most 1/16 late.
 * Past the deadline (tg_comm_set_timeout; 0: none) the rank calls the roll
 * (below), and the world is broken: every later call fails at once with
 * the same message, and closing it does not finalize MPI (which would wait
 * for the missing rank): the program should exit, non-zero, and mpirun
 * then ends the other processes.
 *
 * The roll call. A collective cannot say which rank has not arrived. So a
 * rank whose deadline passed sends a note (its rank, its count of
 * collectives begun and the function it waits in) to every other rank on a
 * second communicator; a rank that finds such a note while it waits calls
 * the roll too, at once, whatever its own deadline. Each then listens for
 * GRACE seconds (or until every rank answered): a rank that is waiting in
 * a collective answers within its polling pause; one that never answers is
 * stopped, hung, or still busy far from any collective -- it "did not
 * arrive". The notes' counts also tell ranks that wait in different
 * collectives (a program whose ranks took different paths). Every rank
 * listens as long (GRACE, whatever its own deadline): a broken rank pauses
 * that long again before it exits, so that every other rank has finished
 * listening before mpirun, seeing one rank exit, resumes and ends a
 * stopped one -- which would then answer. */
#define _POSIX_C_SOURCE 200809L

#include "data_parallel/internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if TG_HAVE_MPI
#include <mpi.h>
#endif

#if TG_HAVE_MPI
#define MAX_BACKEND MPI_MAX_LIBRARY_VERSION_STRING
#else
#define MAX_BACKEND 128
#endif

#define SPIN_SECONDS 1e-3 /* poll without pausing this long */
#define MIN_PAUSE 50e-6   /* then sleep at least this (Linux's timer slack is 50 us) */
#define MAX_PAUSE 2e-3    /* and at most this */
#define GRACE 2.0         /* the roll call listens this long, whatever the deadline */
#define ROLL_TAG 7        /* the roll call's notes, on their own communicator */

/* A rank's answer to the roll call. */
typedef struct note {
    int32_t rank;
    int32_t pad;
    int64_t call; /* collectives this rank had begun */
    char fn[48];  /* the function it waits in */
} note;

struct tg_comm {
    int rank, size, local_size;
    char backend[MAX_BACKEND];
    double timeout;   /* seconds; 0: wait forever */
    int64_t calls;    /* collectives begun (tg_comm_begin) */
    const char *fn;   /* the function of the current one */
    double longest;   /* the longest wait in one call, seconds */
    char broken[512]; /* after a missed deadline: why (every later call fails with it) */
#if TG_HAVE_MPI
    bool mpi;      /* the world is MPI's (size may still be 1: mpirun -np 1) */
    bool finalize; /* tg_comm_open initialized MPI, so closing finalizes it */
    MPI_Comm world, roll;
    MPI_Comm windows; /* a duplicate of world for the windows' messages (tg_comm_exchange) */
    note mine;        /* this rank's note, alive until close (its sends may still be queued) */
#endif
};

#if TG_HAVE_MPI
static double seconds_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void pause_for(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}
#endif

/* The number of processes a launcher announced in the environment; 0 when
 * one announced a world without its size (PMIx), -1 when none did. */
static long launched_size(void) {
    static const char *const sizes[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        const char *v = getenv(sizes[i]);
        if (v && *v) return strtol(v, NULL, 10);
    }
    return getenv("PMIX_RANK") ? 0 : -1;
}

#if TG_HAVE_MPI
/* True when rc is MPI_SUCCESS; else "CALL: MPI's message" into err. */
static bool mpi_ok(int rc, const char *call, char *err, size_t err_size) {
    if (rc == MPI_SUCCESS) return true;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "error code %d", rc);
    snprintf(err, err_size, "%s: %s", call, msg);
    return false;
}

/* Initializes MPI (unless the program did) and fills c from the world.
 * Only the thread that called tg_dist_init calls MPI: MPI_THREAD_FUNNELED
 * (the kernels' OpenMP threads never do). */
static bool open_mpi(tg_comm *c, int *argc, char ***argv, char *err, size_t err_size) {
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (finalized) {
        snprintf(err, err_size, "MPI was already finalized: it cannot be started again in this process");
        return false;
    }
    if (!inited) {
        int provided = 0;
        if (!mpi_ok(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread", err, err_size))
            return false;
        c->finalize = true;
    }
    if (!mpi_ok(MPI_Comm_dup(MPI_COMM_WORLD, &c->world), "MPI_Comm_dup", err, err_size)) return false;
    c->mpi = true;
    MPI_Comm_set_errhandler(c->world, MPI_ERRORS_RETURN);
    if (!mpi_ok(MPI_Comm_dup(c->world, &c->roll), "MPI_Comm_dup", err, err_size)) {
        MPI_Comm_free(&c->world);
        c->mpi = false;
        return false;
    }
    if (!mpi_ok(MPI_Comm_dup(c->world, &c->windows), "MPI_Comm_dup", err, err_size)) {
        MPI_Comm_free(&c->roll);
        MPI_Comm_free(&c->world);
        c->mpi = false;
        return false;
    }
    MPI_Comm_rank(c->world, &c->rank);
    MPI_Comm_size(c->world, &c->size);
    MPI_Comm local;
    if (!mpi_ok(MPI_Comm_split_type(c->world, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &local),
                "MPI_Comm_split_type", err, err_size))
        return false;
    MPI_Comm_size(local, &c->local_size);
    MPI_Comm_free(&local);
    /* The library's name and version: the first line of its long string. */
    int len = 0;
    MPI_Get_library_version(c->backend, &len);
    c->backend[strcspn(c->backend, "\n,")] = '\0';
    return true;
}
#endif

tg_comm *tg_comm_open(const tg_allocator *alloc, int *argc, char ***argv, char *err, size_t err_size) {
    tg_comm *c = alloc->alloc(sizeof *c, 16, alloc->user);
    if (!c) {
        snprintf(err, err_size, "out of memory");
        return NULL;
    }
    memset(c, 0, sizeof *c);
    c->size = c->local_size = 1;
    c->fn = "";
    long launched = launched_size();
#if TG_HAVE_MPI
    int inited = 0;
    MPI_Initialized(&inited);
    if (launched >= 0 || inited) {
        if (open_mpi(c, argc, argv, err, err_size)) return c;
        tg_comm_close(c, alloc);
        return NULL;
    }
    snprintf(c->backend, sizeof c->backend, "one process: not started by mpirun (MPI not initialized)");
#else
    (void)argc, (void)argv;
    if (launched > 1) {
        snprintf(err, err_size,
                 "this program was built without MPI (TG_MPI=OFF), but a launcher started it as one of %ld "
                 "processes, each of which would train alone: rebuild with -DTG_MPI=ON",
                 launched);
        alloc->free(c, alloc->user);
        return NULL;
    }
    snprintf(c->backend, sizeof c->backend, "one process: built without MPI");
#endif
    return c;
}

void tg_comm_close(tg_comm *c, const tg_allocator *alloc) {
    if (!c) return;
#if TG_HAVE_MPI
    /* A broken world still has a collective in flight that will never
     * end: freeing its communicators or finalizing would wait for it. The
     * pause: see the roll call at the top. */
    if (c->mpi && !c->broken[0]) {
        MPI_Comm_free(&c->windows);
        MPI_Comm_free(&c->roll);
        MPI_Comm_free(&c->world);
        if (c->finalize) MPI_Finalize();
    } else if (c->mpi) {
        pause_for(GRACE);
    }
#endif
    alloc->free(c, alloc->user);
}

int tg_comm_rank(const tg_comm *c) { return c->rank; }
int tg_comm_size(const tg_comm *c) { return c->size; }
int tg_comm_local_size(const tg_comm *c) { return c->local_size; }
const char *tg_comm_backend(const tg_comm *c) { return c->backend; }
void tg_comm_set_timeout(tg_comm *c, double seconds) { c->timeout = seconds; }
double tg_comm_timeout(const tg_comm *c) { return c->timeout; }
double tg_comm_longest_wait(const tg_comm *c) { return c->longest; }

void tg_comm_begin(tg_comm *c, const char *fn) {
    c->calls++;
    c->fn = fn ? fn : "";
}

/* A broken world: its message, and false. */
static bool broken(const tg_comm *c, char *err, size_t err_size) {
    snprintf(err, err_size, "%s", c->broken);
    return false;
}

#if TG_HAVE_MPI

/* True when another rank's roll-call note is waiting for this one. */
static bool roll_called(const tg_comm *c) {
    int flag = 0;
    MPI_Iprobe(MPI_ANY_SOURCE, ROLL_TAG, c->roll, &flag, MPI_STATUS_IGNORE);
    return flag != 0;
}

/* Appends printf-style text to buf (size bytes, len used so far). */
#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
static void
append(char *buf, size_t size, size_t *len, const char *fmt, ...) {
    if (*len >= size) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *len, size - *len, fmt, ap);
    va_end(ap);
    if (n > 0) *len = *len + (size_t)n < size ? *len + (size_t)n : size;
}

/* The roll call (the top of the file), after `waited` seconds in `call`:
 * breaks the world with the message of who did not arrive. Returns false. */
static bool roll_call(tg_comm *c, const char *call, double waited, char *err, size_t err_size) {
    const int P = c->size;
    c->mine = (note){.rank = c->rank, .call = c->calls};
    snprintf(c->mine.fn, sizeof c->mine.fn, "%s", c->fn);
    for (int q = 0; q < P; q++) {
        if (q == c->rank) continue;
        MPI_Request r;
        if (MPI_Isend(&c->mine, (int)sizeof c->mine, MPI_BYTE, q, ROLL_TAG, c->roll, &r) == MPI_SUCCESS)
            MPI_Request_free(&r); /* small: sent eagerly, even to a rank that never receives it */
    }
    note *seen = calloc((size_t)P, sizeof *seen); /* seen[q].fn[0] != 0: q answered */
    int answered = 1;
    const double until = seconds_now() + GRACE;
    while (seen && answered < P && seconds_now() < until) {
        int flag = 0;
        MPI_Status st;
        MPI_Iprobe(MPI_ANY_SOURCE, ROLL_TAG, c->roll, &flag, &st);
        if (!flag) {
            pause_for(MIN_PAUSE * 10);
            continue;
        }
        note n;
        memset(&n, 0, sizeof n);
        MPI_Recv(&n, (int)sizeof n, MPI_BYTE, st.MPI_SOURCE, ROLL_TAG, c->roll, MPI_STATUS_IGNORE);
        n.fn[sizeof n.fn - 1] = '\0';
        if (st.MPI_SOURCE >= 0 && st.MPI_SOURCE < P && !seen[st.MPI_SOURCE].fn[0]) {
            seen[st.MPI_SOURCE] = n;
            if (!n.fn[0]) seen[st.MPI_SOURCE].fn[0] = '?';
            answered++;
        }
    }
    size_t len = 0, size = sizeof c->broken;
    char *m = c->broken;
    int missing = 0, elsewhere = 0;
    for (int q = 0; seen && q < P; q++) missing += q != c->rank && !seen[q].fn[0];
    if (missing) {
        append(m, size, &len, "%s", missing > 1 ? "ranks" : "rank");
        for (int q = 0, k = 0; q < P; q++)
            if (q != c->rank && !seen[q].fn[0])
                append(m, size, &len, "%s%d", k++ == 0 ? " " : q == P - 1 || k == missing ? " and " : ", ", q);
        append(m, size, &len, " did not arrive within %g s (stopped, hung, or busy far longer than the others)",
               c->timeout);
    } else {
        append(m, size, &len, "%s waited %.3g s; every rank answered the roll call, but", call, waited);
    }
    for (int q = 0; seen && q < P; q++) {
        if (q == c->rank || !seen[q].fn[0] || seen[q].call == c->calls) continue;
        append(m, size, &len, "%s rank %d waits in call %lld (%s)",
               elsewhere++ ? ","
               : missing   ? ";"
                           : "",
               q, (long long)seen[q].call, seen[q].fn);
    }
    if (elsewhere) append(m, size, &len, " while this rank waits in call %lld (%s)", (long long)c->calls, c->fn);
    if (!missing && !elsewhere) append(m, size, &len, " the collective did not end");
    append(m, size, &len, "; the deadline: --dist-timeout or TG_DIST_TIMEOUT (seconds; 0: none)");
    if (!seen)
        snprintf(c->broken, sizeof c->broken, "%s: past the deadline of %g s (no memory for the roll call)", call,
                 c->timeout);
    free(seen);
    return broken(c, err, err_size);
}

/* Waits for the n requests at req (started by `call`) under the deadline:
 * polls MPI_Testall, spinning briefly, then pausing 1/16 of the time
 * waited so far. */
static bool wait_for(tg_comm *c, MPI_Request *req, int n, const char *call, char *err, size_t err_size) {
    const double t0 = seconds_now();
    for (;;) {
        int done = 0;
        int rc = MPI_Testall(n, req, &done, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) return mpi_ok(rc, call, err, err_size);
        const double waited = seconds_now() - t0;
        if (done) {
            if (waited > c->longest) c->longest = waited;
            return true;
        }
        if (waited < SPIN_SECONDS) continue;
        if ((c->timeout > 0 && waited > c->timeout) || roll_called(c)) return roll_call(c, call, waited, err, err_size);
        pause_for(waited / 16 < MIN_PAUSE ? MIN_PAUSE : waited / 16 > MAX_PAUSE ? MAX_PAUSE : waited / 16);
    }
}

/* Started (rc from the MPI_I... call), then waited for. */
static bool started(tg_comm *c, int rc, MPI_Request *req, const char *call, char *err, size_t err_size) {
    return mpi_ok(rc, call, err, err_size) && wait_for(c, req, 1, call, err, err_size);
}

#endif

/* The requests of one exchange: a receive and a send per other rank. */
struct tg_comm_batch {
    int n; /* requests in use */
    const char *call;
#if TG_HAVE_MPI
    MPI_Request req[]; /* 2 (P - 1) */
#endif
};

tg_comm_batch *tg_comm_batch_new(tg_comm *c, const tg_allocator *alloc) {
    size_t size = sizeof(tg_comm_batch);
#if TG_HAVE_MPI
    size += 2 * (size_t)c->size * sizeof(MPI_Request);
#else
    (void)c;
#endif
    tg_comm_batch *b = alloc->alloc(size, 16, alloc->user);
    if (b) memset(b, 0, size);
    return b;
}

void tg_comm_batch_free(tg_comm_batch *b, const tg_allocator *alloc) {
    if (b) alloc->free(b, alloc->user);
}

bool tg_comm_exchange(tg_comm *c, int tag, const void *send, const int *scounts, const int *sdispls, void *recv,
                      const int *rcounts, const int *rdispls, tg_comm_batch *b, char *err, size_t err_size) {
    b->n = 0;
    b->call = "MPI_Isend/MPI_Irecv";
    if (c->broken[0]) return broken(c, err, err_size);
#if TG_HAVE_MPI
    /* the receives first, so the sends find them posted */
    for (int k = 1; k < c->size; k++) {
        const int q = (c->rank + c->size - k) % c->size;
        if (!mpi_ok(MPI_Irecv((char *)recv + rdispls[q], rcounts[q], MPI_BYTE, q, tag, c->windows, &b->req[b->n]),
                    "MPI_Irecv", err, err_size))
            return false;
        b->n++;
    }
    for (int k = 1; k < c->size; k++) {
        const int q = (c->rank + k) % c->size;
        if (!mpi_ok(MPI_Isend((const char *)send + sdispls[q], scounts[q], MPI_BYTE, q, tag, c->windows, &b->req[b->n]),
                    "MPI_Isend", err, err_size))
            return false;
        b->n++;
    }
#else
    (void)tag, (void)send, (void)scounts, (void)sdispls, (void)recv, (void)rcounts, (void)rdispls;
#endif
    return true;
}

bool tg_comm_batch_test(tg_comm *c, tg_comm_batch *b, bool *done, char *err, size_t err_size) {
    *done = true;
    if (b->n == 0) return true;
    if (c->broken[0]) return broken(c, err, err_size);
#if TG_HAVE_MPI
    int flag = 0;
    if (!mpi_ok(MPI_Testall(b->n, b->req, &flag, MPI_STATUSES_IGNORE), b->call, err, err_size)) return false;
    *done = flag != 0;
    if (flag) b->n = 0;
#endif
    return true;
}

bool tg_comm_batch_wait(tg_comm *c, tg_comm_batch *b, char *err, size_t err_size) {
    if (b->n == 0) return true;
    if (c->broken[0]) return broken(c, err, err_size);
#if TG_HAVE_MPI
    bool ok = wait_for(c, b->req, b->n, b->call, err, err_size);
    b->n = 0;
    return ok;
#else
    return true;
#endif
}

bool tg_comm_allgather(tg_comm *c, const void *mine, int bytes, void *all, char *err, size_t err_size) {
    if (c->broken[0]) return broken(c, err, err_size);
#if TG_HAVE_MPI
    if (c->size > 1) {
        MPI_Request r;
        return started(c, MPI_Iallgather(mine, bytes, MPI_BYTE, all, bytes, MPI_BYTE, c->world, &r), &r,
                       "MPI_Iallgather", err, err_size);
    }
#endif
    memcpy(all, mine, (size_t)bytes);
    return true;
}

/* Each collective: MPI's call for a world of several ranks; with one rank
 * (no MPI, or mpirun -np 1) what that call does with one rank. */

bool tg_comm_min_u64(tg_comm *c, uint64_t *v, int n, char *err, size_t err_size) {
    if (c->broken[0]) return broken(c, err, err_size);
#if TG_HAVE_MPI
    if (c->size > 1) {
        MPI_Request r;
        return started(c, MPI_Iallreduce(MPI_IN_PLACE, v, n, MPI_UINT64_T, MPI_MIN, c->world, &r), &r, "MPI_Iallreduce",
                       err, err_size);
    }
#endif
    (void)v, (void)n;
    return true; /* the minimum over one rank is its own value */
}

bool tg_comm_bcast(tg_comm *c, void *buf, int bytes, int root, char *err, size_t err_size) {
    if (c->broken[0]) return broken(c, err, err_size);
#if TG_HAVE_MPI
    if (c->size > 1) {
        MPI_Request r;
        return started(c, MPI_Ibcast(buf, bytes, MPI_BYTE, root, c->world, &r), &r, "MPI_Ibcast", err, err_size);
    }
#endif
    (void)buf, (void)bytes, (void)root;
    return true; /* the one rank is the root */
}

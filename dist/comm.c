/* The transport under the collectives of dist/: MPI, or a world of one.
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
 * themselves and do their own arithmetic (dist/fold.c), so MPI never adds
 * anything -- the order of every sum stays the library's. Errors are
 * returned (MPI_ERRORS_RETURN on our own duplicate of MPI_COMM_WORLD), not
 * fatal, so they reach the context like any other error. */
#include "dist/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if TG_HAVE_MPI
#include <mpi.h>
#endif

#if TG_HAVE_MPI
#define MAX_BACKEND MPI_MAX_LIBRARY_VERSION_STRING
#else
#define MAX_BACKEND 128
#endif

struct tg_comm {
    int rank, size, local_size;
    char backend[MAX_BACKEND];
#if TG_HAVE_MPI
    bool mpi;      /* the world is MPI's (size may still be 1: mpirun -np 1) */
    bool finalize; /* tg_comm_open initialized MPI, so closing finalizes it */
    MPI_Comm world;
#endif
};

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
    if (c->mpi) MPI_Comm_free(&c->world);
    if (c->finalize) MPI_Finalize();
#endif
    alloc->free(c, alloc->user);
}

int tg_comm_rank(const tg_comm *c) { return c->rank; }
int tg_comm_size(const tg_comm *c) { return c->size; }
int tg_comm_local_size(const tg_comm *c) { return c->local_size; }
const char *tg_comm_backend(const tg_comm *c) { return c->backend; }

/* Each collective: MPI's call for a world of several ranks; with one rank
 * (no MPI, or mpirun -np 1) what that call does with one rank. */

bool tg_comm_min_u64(tg_comm *c, uint64_t *v, int n, char *err, size_t err_size) {
#if TG_HAVE_MPI
    if (c->size > 1)
        return mpi_ok(MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_UINT64_T, MPI_MIN, c->world), "MPI_Allreduce", err,
                      err_size);
#endif
    (void)c, (void)v, (void)n, (void)err, (void)err_size;
    return true; /* the minimum over one rank is its own value */
}

bool tg_comm_bcast(tg_comm *c, void *buf, int bytes, int root, char *err, size_t err_size) {
#if TG_HAVE_MPI
    if (c->size > 1) return mpi_ok(MPI_Bcast(buf, bytes, MPI_BYTE, root, c->world), "MPI_Bcast", err, err_size);
#endif
    (void)c, (void)buf, (void)bytes, (void)root, (void)err, (void)err_size;
    return true; /* the one rank is the root */
}

bool tg_comm_alltoallv(tg_comm *c, const void *send, const int *scounts, const int *sdispls, void *recv,
                       const int *rcounts, const int *rdispls, char *err, size_t err_size) {
#if TG_HAVE_MPI
    if (c->size > 1)
        return mpi_ok(MPI_Alltoallv(send, scounts, sdispls, MPI_BYTE, recv, rcounts, rdispls, MPI_BYTE, c->world),
                      "MPI_Alltoallv", err, err_size);
#endif
    (void)c, (void)err, (void)err_size, (void)rcounts;
    memcpy((char *)recv + rdispls[0], (const char *)send + sdispls[0], (size_t)scounts[0]);
    return true;
}

bool tg_comm_allgatherv(tg_comm *c, void *buf, const int *counts, const int *displs, char *err, size_t err_size) {
#if TG_HAVE_MPI
    if (c->size > 1)
        return mpi_ok(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, counts, displs, MPI_BYTE, c->world),
                      "MPI_Allgatherv", err, err_size);
#endif
    (void)c, (void)buf, (void)counts, (void)displs, (void)err, (void)err_size;
    return true; /* in place: the one block is already there */
}

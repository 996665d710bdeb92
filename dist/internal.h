/* Internal to dist/: the fold that fixes the order of every sum, and the
 * transport (MPI, or a world of one process) under the collectives. */
#ifndef TG_DIST_INTERNAL_H
#define TG_DIST_INTERNAL_H

#include "tapegrad/dist.h"
#include "tensor/internal.h"

/* ---- the fold (dist/fold.c) ------------------------------------------------ */

/* acc = w x (first) or acc = acc + w x, elementwise: the one step of every
 * sum in dist/ -- the gradient accumulator's micro-batches and the
 * all-reduce's ranks -- so both round the same way. acc may be x (in-place
 * scaling). acc, x: (n) */
void tg_fold_f32(float *acc, const float *x, float w, int64_t n, bool first);
void tg_fold_f64(double *acc, const double *x, double w, int64_t n, bool first);
/* The same on untyped data of dtype dt (w rounded to dt). */
void tg_fold(void *acc, const void *x, tg_dtype dt, double w, int64_t n, bool first);

/* ---- the transport (dist/comm.c) ------------------------------------------- */

/* Moves bytes between the processes: MPI when the library was built with
 * it (TG_HAVE_MPI) and the program was started by a launcher, else a world
 * of one process, where every collective below is what MPI would do with
 * one rank. A failed call fills err (err_size bytes) with the MPI call
 * and MPI's message and returns false. Counts and displacements are in
 * bytes, each below 2^31. */
typedef struct tg_comm tg_comm;

/* Opens the world (tg_dist_init's doc); memory from alloc. */
tg_comm *tg_comm_open(const tg_allocator *alloc, int *argc, char ***argv, char *err, size_t err_size);
/* Closes it, finalizing MPI when tg_comm_open initialized it. */
void tg_comm_close(tg_comm *c, const tg_allocator *alloc);
int tg_comm_rank(const tg_comm *c);
int tg_comm_size(const tg_comm *c);
int tg_comm_local_size(const tg_comm *c);
const char *tg_comm_backend(const tg_comm *c);

/* The deadline of every collective below, in seconds (0: none), and the
 * longest any one has waited so far. Past the deadline the world is
 * broken (dist/comm.c): err names the ranks that did not arrive, and
 * every later call fails at once with the same message. */
void tg_comm_set_timeout(tg_comm *c, double seconds);
double tg_comm_timeout(const tg_comm *c);
double tg_comm_longest_wait(const tg_comm *c);
/* Called as a collective of dist/ begins: counts it and names it (fn: a
 * string that lives on), for the roll call after a missed deadline. */
void tg_comm_begin(tg_comm *c, const char *fn);

/* v[i] = min over ranks of v[i], in place. */
bool tg_comm_min_u64(tg_comm *c, uint64_t *v, int n, char *err, size_t err_size);
/* buf (bytes) = root's buf. */
bool tg_comm_bcast(tg_comm *c, void *buf, int bytes, int root, char *err, size_t err_size);
/* Sends send[sdispls[q] ..][scounts[q]] to rank q and receives rank q's
 * piece into recv[rdispls[q] ..][rcounts[q]] (MPI_Alltoallv). */
bool tg_comm_alltoallv(tg_comm *c, const void *send, const int *scounts, const int *sdispls, void *recv,
                       const int *rcounts, const int *rdispls, char *err, size_t err_size);
/* Every rank's block buf[displs[q] ..][counts[q]] to every rank, in place
 * (MPI_Allgatherv with MPI_IN_PLACE). */
bool tg_comm_allgatherv(tg_comm *c, void *buf, const int *counts, const int *displs, char *err, size_t err_size);

#endif

/* Internal to data_parallel/: the fold that fixes the order of every sum, and the
 * transport (MPI, or a world of one process) under the collectives. */
#ifndef TG_DIST_INTERNAL_H
#define TG_DIST_INTERNAL_H

#include "tapegrad/dist.h"
#include "tensor/internal.h"

/* ---- the fold (data_parallel/fold.c) ------------------------------------------------ */

/* acc = w x (first) or acc = acc + w x, elementwise: the one step of every
 * sum in data_parallel/ -- the gradient accumulator's micro-batches and the
 * all-reduce's ranks -- so both round the same way. acc may be x (in-place
 * scaling). acc, x: (n) */
void tg_fold_f32(float *acc, const float *x, float w, int64_t n, bool first);
void tg_fold_f64(double *acc, const double *x, double w, int64_t n, bool first);
/* The same on untyped data of dtype dt (w rounded to dt). */
void tg_fold(void *acc, const void *x, tg_dtype dt, double w, int64_t n, bool first);

/* ---- the transport (data_parallel/comm.c) ------------------------------------------- */

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
 * broken (data_parallel/comm.c): err names the ranks that did not arrive, and
 * every later call fails at once with the same message. */
void tg_comm_set_timeout(tg_comm *c, double seconds);
double tg_comm_timeout(const tg_comm *c);
double tg_comm_longest_wait(const tg_comm *c);
/* Called as a collective of data_parallel/ begins: counts it and names it (fn: a
 * string that lives on), for the roll call after a missed deadline. */
void tg_comm_begin(tg_comm *c, const char *fn);

/* v[i] = min over ranks of v[i], in place. */
bool tg_comm_min_u64(tg_comm *c, uint64_t *v, int n, char *err, size_t err_size);
/* buf (bytes) = root's buf. */
bool tg_comm_bcast(tg_comm *c, void *buf, int bytes, int root, char *err, size_t err_size);
/* Every rank's `bytes` bytes at mine, into all[q * bytes ..] for rank q
 * (MPI_Allgather). */
bool tg_comm_allgather(tg_comm *c, const void *mine, int bytes, void *all, char *err, size_t err_size);

/* The windows of an all-reduce move by point-to-point messages on a
 * communicator of their own (MPI_Isend, MPI_Irecv), so that several can be
 * in flight, started as they become ready (data_parallel/overlap.c), with no order
 * to keep between ranks beyond each window's tag. A batch holds one
 * exchange's requests. */
typedef struct tg_comm_batch tg_comm_batch;
tg_comm_batch *tg_comm_batch_new(tg_comm *c, const tg_allocator *alloc);
void tg_comm_batch_free(tg_comm_batch *b, const tg_allocator *alloc);
/* Starts one exchange: for every other rank q, a receive of rcounts[q]
 * bytes from q into recv + rdispls[q] and a send of scounts[q] bytes from
 * send + sdispls[q] to q, all with `tag` (below 32768). This rank's own
 * entries are not used. */
bool tg_comm_exchange(tg_comm *c, int tag, const void *send, const int *scounts, const int *sdispls, void *recv,
                      const int *rcounts, const int *rdispls, tg_comm_batch *b, char *err, size_t err_size);
/* *done: every request of b has finished (without waiting). */
bool tg_comm_batch_test(tg_comm *c, tg_comm_batch *b, bool *done, char *err, size_t err_size);
/* Waits for b under the deadline. */
bool tg_comm_batch_wait(tg_comm *c, tg_comm_batch *b, char *err, size_t err_size);

/* ---- the handle (data_parallel/world.c) --------------------------------------------- */

/* A piece of the data a collective moves: numel elements of dtype. */
typedef struct tg_seg {
    void *data;
    int64_t numel;
    tg_dtype dtype;
} tg_seg;

struct tg_dist {
    tg_allocator alloc; /* the context's at tg_dist_init: every buffer below */
    tg_comm *comm;
    int rank, size;
    size_t bucket_bytes;
    /* Scratch kept between calls, grown when needed (tg_dist_reserve). */
    unsigned char *buf;   /* one window, packed; after the fold, reduced */
    unsigned char *recv;  /* the P pieces of this rank's chunk of a window */
    unsigned char *heads; /* the P records of the head exchange (data_parallel/head.c), made at tg_dist_init */
    size_t buf_cap, recv_cap;
    int *counts;                 /* 6 x P byte counts: a window's chunks, the pieces received, the chunks gathered */
    tg_comm_batch *batch;        /* the requests of a window's exchange */
    int tag;                     /* the next window's tags (2 a window) */
    struct tg_dist_slots *slots; /* the windows in flight during backward (data_parallel/overlap.c), or NULL */
    tg_seg *segs;
    int segs_cap;
    tg_dist_stats stats;
    char fingerprint[384]; /* what decides the bits (tg_dist_fingerprint) */
};

double tg_dist_now(void);
/* Memory from the handle's allocator (TG_ALIGN-aligned); free takes NULL. */
void *tg_dist_mem(tg_dist *d, size_t size);
void tg_dist_mem_free(tg_dist *d, void *p);
/* 64-bit FNV-1a of n bytes, continuing from h (start: TG_FNV_OFFSET). */
#define TG_FNV_OFFSET 14695981039346656037ull
uint64_t tg_fnv1a(uint64_t h, const void *bytes, size_t n);

/* ---- the head of every collective (data_parallel/head.c) ------------------------------ */

/* Bytes of data a head record carries: an all-reduce of at most this many
 * bytes (losses, metrics) is done in the head exchange alone. */
#define TG_HEAD_BYTES 256
#define TG_HEAD_RECORD (16 + TG_HEAD_BYTES) /* one rank's record: header and data */

/* The head exchange that begins every collective: each rank's status
 * (ok false or its context in error: failed), a hash of what it is about
 * to do, and up to TG_HEAD_BYTES bytes of data, gathered by every rank in
 * one fixed-size message (MPI_Allgather: the same size whatever the
 * layouts, so a rank that differs cannot leave the others waiting). True
 * on every rank when no rank failed and every hash is the same; then
 * *records (if not NULL) points at the P records' data, rank q's at
 * (*records) + q * stride. Else false on every rank, with the error set
 * on each that had not failed itself: "rank R failed: its message" (R the
 * lowest that failed, its message then broadcast) or "WHAT differ between
 * the ranks". */
bool tg_dist_head(tg_ctx *ctx, tg_dist *d, const char *fn, bool ok, uint64_t hash, const char *what, const void *data,
                  size_t bytes, const unsigned char **records, size_t *stride);

/* ---- segments and windows (data_parallel/collectives.c) -------------------------------- */

/* The hash's subject in messages when layouts differ. */
#define TG_LAYOUT "the tensors (their count, dtypes and sizes) or the bucket sizes"

/* d->segs with room for n; false (error set) when out of memory. */
bool tg_dist_reserve_segs(tg_ctx *ctx, tg_dist *d, const char *fn, int n);
/* d->segs = params' values (grads false) or grads (true). */
bool tg_dist_param_segs(tg_ctx *ctx, tg_dist *d, const char *fn, const tg_params *params, bool grads);
/* The layout of the first n segments, as a hash: the collective (a tag),
 * the bucket size (which cuts the windows) and each one's dtype and size. */
uint64_t tg_dist_layout_hash(const tg_dist *d, char tag, int n);
/* d->buf and d->recv for the current bucket size. */
bool tg_dist_reserve(tg_ctx *ctx, tg_dist *d, const char *fn);
/* Elements [w0, w0 + len) of the dtype-dt elements of the first nseg
 * segments laid end to end (a window), to or from buf: TG_PACK copies
 * them in, TG_PACK_SCALED stores w x (tg_fold), TG_UNPACK copies back out. */
typedef enum { TG_PACK, TG_PACK_SCALED, TG_UNPACK } tg_copy_mode;
void tg_dist_window_copy(tg_dist *d, int nseg, tg_dtype dt, int64_t w0, int64_t len, tg_copy_mode mode, double w,
                         unsigned char *buf);
/* The window's memory when it lies inside one segment, else NULL. */
unsigned char *tg_dist_window_inside(const tg_dist *d, int nseg, tg_dtype dt, int64_t w0, int64_t len);
/* The byte counts and displacements of a window of len elements of es
 * bytes, into counts[0..6P): [0, 2P) what this rank sends to each rank q
 * (its chunk q) in the first exchange, [2P, 4P) where rank q's piece of
 * this rank's chunk lands in the receive buffer (in rank order), [4P, 6P)
 * where each chunk lands in the window in the second (this rank sends its
 * own chunk to all: counts[4P + rank], counts[5P + rank]). */
void tg_dist_window_counts(tg_dist *d, int64_t len, size_t es, int *counts);
/* This rank's chunk of the window at base = the P pieces folded in rank
 * order: rank q's from recv (the first exchange's), this rank's own from
 * the window itself. */
void tg_dist_window_fold(const tg_dist *d, tg_dtype dt, unsigned char *base, unsigned char *recv, int64_t len);
/* The all-reduce of a window by two exchanges, with tags tag and tag + 1
 * (counts: 8P ints of the window's own): start sends the pieces out;
 * once b is done, mid folds this rank's chunk and sends it to every rank;
 * once b is done again, the window at base is reduced. */
bool tg_dist_window_start(tg_dist *d, tg_dtype dt, unsigned char *base, unsigned char *recv, int64_t len, int *counts,
                          int tag, tg_comm_batch *b, char *err, size_t err_size);
bool tg_dist_window_mid(tg_dist *d, tg_dtype dt, unsigned char *base, unsigned char *recv, int64_t len, int *counts,
                        int tag, tg_comm_batch *b, char *err, size_t err_size);
/* Elements of dtype dt over the first nseg segments. */
int64_t tg_dist_dtype_numel(const tg_dist *d, int nseg, tg_dtype dt);
/* Frees d->slots (data_parallel/overlap.c). */
void tg_dist_slots_free(tg_dist *d);
/* A NULL d: the error naming fn, and false. */
bool tg_dist_no_d(tg_ctx *ctx, const char *fn);

#endif

/* Internal view of the context and helpers shared by the library's modules.
 * Not installed; users see only include/tapegrad.h. */
#ifndef TG_TENSOR_INTERNAL_H
#define TG_TENSOR_INTERNAL_H

#include "tapegrad/tensor.h"

/* Every arena allocation and every persistent buffer is aligned to this. */
#define TG_ALIGN 64
/* The arena grows in chunks of at least this many bytes. */
#define TG_ARENA_CHUNK ((size_t)1 << 20)

/* One block of arena memory. Chunks form a list; allocation bumps `used`
 * in the current chunk and moves on to the next (or a new) one when full. */
typedef struct tg_chunk {
    struct tg_chunk *next;
    unsigned char *base; /* TG_ALIGN-aligned, `size` bytes */
    size_t size;
    size_t used;
} tg_chunk;

struct tg_node; /* autograd/tape.h */

/* The tape: the records of differentiable ops in execution order, and grad
 * mode. autograd/tape.c owns it and is the only reader and writer of these
 * fields; the struct sits here because the context holds it and tensor/
 * may not include autograd/. The context makes it with tg_tape_empty,
 * empties it at every reset with tg_tape_clear and frees its record array
 * with tg_tape_free (below tg_heap_free). */
typedef struct tg_tape {
    struct tg_node *nodes; /* the records (heap; grown by doubling, kept across resets) */
    int64_t n_nodes;       /* records in use */
    int64_t cap_nodes;     /* records allocated */
    size_t saved_bytes;    /* what the records saved for backward (tg_tape_saved_bytes) */
    bool consumed;         /* a backward walked it: the next record starts a fresh tape */
    bool grad_enabled;     /* grad mode (tg_set_grad_enabled) */
} tg_tape;

/* A tape with no records, no array yet, grad mode on. */
static inline tg_tape tg_tape_empty(void) { return (tg_tape){.grad_enabled = true}; }

/* Forgets the records (they point at arena tensors, which a reset frees),
 * keeping the record array for reuse, and grad mode. */
static inline void tg_tape_clear(tg_tape *tape) {
    tape->n_nodes = 0;
    tape->saved_bytes = 0;
    tape->consumed = false;
}

struct tg_ctx {
    tg_allocator alloc;

    /* arena */
    tg_chunk *chunks;      /* first chunk */
    tg_chunk *cur;         /* chunk being bumped */
    size_t arena_capacity; /* sum of chunk sizes */
    size_t arena_used;     /* bytes handed out since the last reset */
    uint32_t epoch;        /* incremented by every reset */

    /* persistent tensors owned by the context (doubly linked) */
    tg_tensor *persistent;

    /* RNG (Philox4x32-10, see tapegrad.h) */
    uint64_t seed;
    uint64_t rng_offset;

    /* sticky error: the first one wins */
    tg_status status;
    char message[512];
    bool abort_on_error;

    tg_tape tape; /* autograd/tape.c */

    int threads;
};

/* CPUs granted by a cgroup CPU quota written as cgroup v2's cpu.max,
 * "QUOTA PERIOD" in microseconds, rounded up: "150000 100000" -> 2; 0 for
 * "max ..." (no limit), a negative quota (v1's -1) or unparsable text
 * (tensor/threads.c). */
int tg_cpus_from_quota(const char *cpu_max);

/* Allocator wrappers (NULL on failure; no error set). */
void *tg_heap_alloc(tg_ctx *ctx, size_t size);
void tg_heap_free(tg_ctx *ctx, void *p);

/* Frees the tape's record array (tg_ctx_free). */
static inline void tg_tape_free(tg_ctx *ctx, tg_tape *tape) {
    tg_heap_free(ctx, tape->nodes);
    tape->nodes = NULL;
    tape->n_nodes = tape->cap_nodes = 0;
}

/* True when ctx can be used: non-NULL and not in error. */
static inline bool tg_live(const tg_ctx *ctx) { return ctx && ctx->status == TG_OK; }

/* Checks a tensor argument: NULL while healthy is TG_ERR_NULL naming `arg`.
 * Returns false (and does nothing more) when the ctx is already in error. */
bool tg_check_arg(tg_ctx *ctx, const char *fn, const char *arg, const tg_tensor *t);
/* Checks that the scalar argument `what` (e.g. "exponent p") is finite:
 * TG_ERR_VALUE "<fn>: exponent p = inf is not finite" otherwise. */
bool tg_check_finite(tg_ctx *ctx, const char *fn, const char *what, double v);
/* Checks that a and b have the same dtype (TG_ERR_DTYPE otherwise). */
bool tg_check_same_dtype(tg_ctx *ctx, const char *fn, const tg_tensor *a, const tg_tensor *b);
/* Checks that a and b have the same shape (TG_ERR_SHAPE otherwise). */
bool tg_check_same_shape(tg_ctx *ctx, const char *fn, const tg_tensor *a, const tg_tensor *b);

/* Validates ndim and sizes and computes numel with overflow checks; errors
 * are reported as coming from `fn`. */
bool tg_check_shape(tg_ctx *ctx, const char *fn, int ndim, const int64_t *shape, int64_t *numel);

/* The shape t takes as (ndim, shape) keeping its numel (tg_view,
 * tg_reshape), written to out[0..ndim): sizes >= 0, and at most one -1,
 * inferred from t->numel. On a bad shape sets an error naming fn, t's shape
 * and numel, the new shape and what is wrong with it:
 *   tg_view: cannot view (12,) (numel 12) as (5, -1): 12 is not a multiple of 5
 * ("view" is fn without its tg_ prefix) and returns false. */
bool tg_infer_shape(tg_ctx *ctx, const char *fn, const tg_tensor *t, int ndim, const int64_t *shape,
                    int64_t out[TG_MAX_DIMS]);

/* A new arena tensor with uninitialized data (NULL and an error on failure). */
tg_tensor *tg_new_tensor(tg_ctx *ctx, const char *fn, tg_dtype dtype, int ndim, const int64_t *shape);
/* Gives a persistent tensor a zeroed persistent grad (tensor/create.c). */
bool tg_persistent_make_grad(tg_ctx *ctx, tg_tensor *t);
/* A new arena tensor with t's shape and dtype, uninitialized. */
tg_tensor *tg_new_like(tg_ctx *ctx, const char *fn, const tg_tensor *t);
/* Arena allocation reporting errors as `fn`. */
void *tg_arena_alloc_fn(tg_ctx *ctx, const char *fn, size_t size);

/* Formats a tensor's shape into a small static-size buffer held by the
 * caller: char buf[TG_SHAPE_STR]; tg_shape_of(buf, t). */
#define TG_SHAPE_STR 128
char *tg_shape_of(char buf[TG_SHAPE_STR], const tg_tensor *t);

/* Element size in bytes. */
static inline size_t tg_esize(tg_dtype d) { return d == TG_F64 ? 8 : 4; }
/* Reads / writes element i of t as a double. */
static inline double tg_load(const tg_tensor *t, int64_t i) {
    return t->dtype == TG_F64 ? ((const double *)t->data)[i] : (double)((const float *)t->data)[i];
}
static inline void tg_store(tg_tensor *t, int64_t i, double v) {
    if (t->dtype == TG_F64) ((double *)t->data)[i] = v;
    else ((float *)t->data)[i] = (float)v;
}

/* The k-th Philox block of the context's stream, counting from its current
 * offset; does not advance the offset. */
void tg_rng_block(const tg_ctx *ctx, uint64_t k, uint32_t out[4]);
/* Uniform in [0,1) as f64 from two 32-bit words, and Box-Muller. */
double tg_u01_f64(uint32_t hi, uint32_t lo);
double tg_normal_from_block(const uint32_t x[4]);

#endif

/* Internal view of the context and helpers shared by the library's modules.
 * Not installed; users see only include/tapegrad.h. */
#ifndef TG_TENSOR_INTERNAL_H
#define TG_TENSOR_INTERNAL_H

#include "tapegrad/tensor.h"
#include "tensor/friend.h"
#include "tensor/half.h"

#include <math.h>

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

/* A gradient block: one heap allocation holding a tensor header and its
 * data, handed out by tg_grad_block and taken back by tg_grad_release
 * (backward frees an intermediate's gradient once the walk is past it, and
 * the next gradient of a fitting size reuses it). The context keeps every
 * block until it is freed; a reset makes them all free again. */
typedef struct tg_gblock {
    struct tg_gblock *next;      /* every block of the context */
    struct tg_gblock *next_free; /* the free list (when state is TG_GBLOCK_FREE) */
    size_t size;                 /* bytes after this header: the tensor's header and data */
    int state;                   /* TG_GBLOCK_FREE, _USED or _QUARANTINED */
} tg_gblock;
enum { TG_GBLOCK_FREE, TG_GBLOCK_USED, TG_GBLOCK_QUARANTINED };
/* Bytes of a block's header, before its tensor. */
#define TG_GBLOCK_HEAD ((sizeof(tg_gblock) + TG_ALIGN - 1) / TG_ALIGN * TG_ALIGN)

/* A tensor as the library makes it: the public fields (tapegrad/tensor.h),
 * then what only the library reads. Every tensor -- an arena tensor, a
 * view, a gradient block's, a persistent one -- is allocated as one, and
 * the pointer users hold points at its first member; tg_impl goes back. */
typedef struct tg_tensor_impl {
    tg_tensor pub;          /* first: the pointer users hold */
    uint32_t epoch;         /* the step (reset count) it was made in; unused when persistent */
    int32_t node;           /* index of the tape record that made it, or -1 */
    const tg_ctx *ctx;      /* the context that made it: every other context refuses it */
    struct tg_tensor *base; /* a view's tensor, whose data and version it shares; NULL if none */
    uint32_t version;       /* in-place writes so far (kept by base for a view) */
    bool grad_block;        /* the header of a gradient block (tensor/ctx.c) */
} tg_tensor_impl;
/* The library's view of a tensor it made. */
static inline tg_tensor_impl *tg_impl(const tg_tensor *t) { return (tg_tensor_impl *)(uintptr_t)t; }

/* The epoch a released gradient's header carries: never a step's, so a use
 * of it is stale, and tg_stale_error says it was released. */
#define TG_EPOCH_RELEASED UINT32_MAX

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
    /* Called by backward after each record it ran (index k), or NULL:
     * data_parallel/overlap.c starts sending gradients that are final. */
    void (*walked)(struct tg_ctx *ctx, int64_t k, void *user);
    void *walked_user;
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

/* What the context hands out on its heap and takes back when freed: the
 * kinds in its ownership registry (tensor/lifetime.c). */
typedef enum tg_own_kind {
    TG_OWN_NONE = 0,
    TG_OWN_TENSOR, /* a persistent tensor (a tg_persistent) */
    TG_OWN_GRAD,   /* the grad of a persistent tensor, freed with it */
    TG_OWN_LAYER,  /* a layer (tg_module_alloc) */
    TG_OWN_OPTIM,  /* an optimizer (tg_optim_make) */
    TG_OWN_SCALER  /* a gradient scaler (tg_grad_scaler_new) */
} tg_own_kind;

/* One entry of the registry: an object's address and kind. */
typedef struct tg_owned {
    const void *p;
    tg_own_kind kind;
    bool held; /* a layer in a model or a container (tg_model_add): its holder frees it, tg_module_free refuses it */
} tg_owned;

/* Autocast (layers/autocast.c): one float32 parameter's 16-bit copy made
 * this step, so that every use in the step shares it (and its gradient
 * flows back through one tg_cast record). */
/* The per-op profile (tensor/profile.c), NULL while off. */
typedef struct tg_profile tg_profile;

typedef struct tg_autocast_copy {
    const struct tg_tensor *param; /* the float32 parameter */
    struct tg_tensor *copy;        /* tg_cast(param, dtype), an arena tensor of this step */
    uint32_t version;              /* param's write count when copied: a later write makes a new copy */
    tg_dtype dtype;
} tg_autocast_copy;

/* How many of the last frees the context remembers, to say "already freed"
 * rather than "not of this context" on a second free. */
#define TG_RECENT_FREES 16

struct tg_ctx {
    /* What every op reads first, together (two cache lines). */
    tg_status status; /* sticky error: the first one wins (message below) */
    uint32_t epoch;   /* the step: incremented by every reset */
    int threads;      /* kernels' thread count */
    bool abort_on_error;
    tg_tape tape; /* autograd/tape.c */

    /* arena */
    tg_chunk *chunks;      /* first chunk of the live list */
    tg_chunk *cur;         /* chunk being bumped */
    tg_chunk *quarantine;  /* checked builds: the previous step's chunks, not handed out again yet */
    size_t arena_capacity; /* sum of chunk sizes, quarantined ones included */
    size_t arena_used;     /* bytes handed out since the last reset */
    size_t quarantined;    /* sum of the quarantined chunks' sizes */
    size_t step_high;      /* checked builds: the most bytes one step has used */
    size_t arena_peak;     /* the most bytes in use at once since the last reset (gradient blocks included) */

    /* gradient blocks (tg_grad_block) */
    tg_gblock *gblocks;      /* all of them, in the order they were made */
    tg_gblock *gblocks_last; /* the newest (where the next one is appended), NULL if none */
    tg_gblock *gfree;        /* the free ones, most recently released first */
    size_t grad_capacity;    /* sum of their sizes */
    size_t grad_used;        /* sum of the sizes of those in use */

    /* RNG (Philox4x32-10, see tapegrad.h) */
    uint64_t seed;
    uint64_t rng_offset;

    tg_allocator alloc;

    /* The ownership registry: every persistent tensor, persistent grad,
     * layer and optimizer this context made and has not freed, in an
     * open-addressing hash table (a power-of-two number of slots, at most
     * half full). A free looks its object up here before touching it, so a
     * second free, or a free through the wrong context, is an error that
     * never reads freed memory. */
    tg_owned *owned;
    size_t owned_cap;
    size_t owned_count;
    tg_owned recent[TG_RECENT_FREES]; /* the last frees, newest at recent_next - 1 */
    unsigned recent_next;
    const void *releasing; /* the layer or optimizer being freed: may free what it owns */

    /* autocast (tg_ctx_set_autocast): the compute dtype of float32 layers,
     * TG_F32 when off, and this step's 16-bit parameter copies (heap array,
     * kept across steps; its entries count only in step autocast_epoch) */
    tg_dtype autocast;
    tg_autocast_copy *autocast_copies;
    int autocast_count, autocast_cap;
    uint32_t autocast_epoch;

    tg_profile *profile; /* tg_profile_enable; NULL: off */

    char message[512]; /* the first error's message */
};

/* CPUs granted by a cgroup CPU quota written as cgroup v2's cpu.max,
 * "QUOTA PERIOD" in microseconds, rounded up: "150000 100000" -> 2; 0 for
 * "max ..." (no limit), a negative quota (v1's -1) or unparsable text
 * (tensor/threads.c). */
int tg_cpus_from_quota(const char *cpu_max);

/* Allocator wrappers (NULL on failure; no error set). */
static inline void *tg_heap_alloc(tg_ctx *ctx, size_t size) {
    return ctx->alloc.alloc(size, TG_ALIGN, ctx->alloc.user);
}
static inline void tg_heap_free(tg_ctx *ctx, void *p) {
    if (p) ctx->alloc.free(p, ctx->alloc.user);
}

/* Frees the tape's record array (tg_ctx_free). */
static inline void tg_tape_free(tg_ctx *ctx, tg_tape *tape) {
    tg_heap_free(ctx, tape->nodes);
    tape->nodes = NULL;
    tape->n_nodes = tape->cap_nodes = 0;
}

/* tg_ok (tapegrad/tensor.h: non-NULL and not in error), inline: every
 * public function asks it first. Programs call the exported function
 * (tensor/ctx.c), the same test; `(tg_ok)` names that function here too. */
static inline bool tg_ok_inline(const tg_ctx *ctx) { return ctx && ctx->status == TG_OK; }
#define tg_ok(ctx) tg_ok_inline(ctx)

/* A NULL pointer argument: sets TG_ERR_NULL "fn: argument 'name' is NULL"
 * (nothing when the context is already in error) and returns false. The
 * one spelling of that message. */
static inline bool tg_null_error(tg_ctx *ctx, const char *fn, const char *name) {
    tg_error(ctx, TG_ERR_NULL, fn, "argument '%s' is NULL", name);
    return false;
}
/* Checks a pointer argument: true when the context is healthy and p is not
 * NULL; else false, with tg_null_error for a NULL p. */
static inline bool tg_check_ptr(tg_ctx *ctx, const char *fn, const char *name, const void *p) {
    if (!tg_ok(ctx)) return false;
    return p ? true : tg_null_error(ctx, fn, name);
}

/* ---- lifetime (tensor/lifetime.c) ---------------------------------------------
 * Stale tensors: an arena tensor lives until the next tg_ctx_reset. Its
 * header carries the step it was made in (epoch), and every use checks it
 * against the context's step (tg_check_arg, inline below; tg_record too,
 * for an op that forgot, so the tape holds only tensors of this step: a
 * reset empties it). Release builds can only see a stale header that no new tensor
 * has overwritten; checked builds (TG_CHECKED, the CMake option) keep the
 * previous step's arena chunks in quarantine, so a tensor of the previous
 * step always keeps its header; AddressSanitizer builds poison the arena
 * memory not handed out (TG_ASAN below), so any read of a stale tensor's
 * data is reported, and the check recognizes a stale header without reading
 * it. */

#if defined(__SANITIZE_ADDRESS__)
#define TG_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TG_ASAN 1
#endif
#endif
#ifdef TG_ASAN
#include <sanitizer/asan_interface.h>
#define TG_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define TG_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define TG_POISON(p, n) ((void)(p), (void)(n))
#define TG_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

/* True when t is an arena tensor of an earlier step than the context's. */
static inline bool tg_stale(const tg_ctx *ctx, const tg_tensor *t) {
#ifdef TG_ASAN
    if (__asan_region_is_poisoned((void *)(uintptr_t)t, sizeof(tg_tensor_impl))) return true; /* quarantined or freed */
#endif
    return !t->persistent && tg_impl(t)->epoch != ctx->epoch;
}
/* Sets TG_ERR_STATE naming fn, the argument `what` (e.g. "argument 'a'",
 * "input 0 of 'mul'") and the step t comes from:
 *   tg_add: argument 'a', a (2, 2) float32 tensor, is from step 3, before
 *   tg_ctx_reset; the context is at step 4 (...)
 * Reads t's header only when the arena still holds it. */
void tg_stale_error(tg_ctx *ctx, const char *fn, const char *what, const tg_tensor *t);

/* The tensor whose version counts in-place writes to t's data: t, or the
 * tensor it is a view of. */
static inline tg_tensor *tg_root(const tg_tensor *t) {
    return tg_impl(t)->base ? tg_impl(t)->base : (tg_tensor *)(uintptr_t)t;
}
/* The count of in-place writes to t's data so far (its root's). */
static inline uint32_t tg_version(const tg_tensor *t) { return tg_impl(tg_root(t))->version; }
/* Records an in-place write to t's data (tg_fill, tg_assign, an optimizer
 * step, a checkpoint load...): ops that saved t see it at backward. */
static inline void tg_written(tg_tensor *t) { tg_impl(tg_root(t))->version++; }

/* The ownership registry. tg_own adds p (false and TG_ERR_OOM naming fn
 * when the table cannot grow). tg_disown removes p if the context owns it
 * as `kind` and returns true; otherwise it sets an error naming fn ("the
 * layer at 0x... was already freed", "... is not a layer of this context")
 * and returns false, reading nothing at p. It works (without the error)
 * when the context is already in error, so a cleanup path stays safe. */
bool tg_own(tg_ctx *ctx, const char *fn, const void *p, tg_own_kind kind);
bool tg_disown(tg_ctx *ctx, const char *fn, const void *p, tg_own_kind kind);
/* The kind p is registered as (TG_OWN_NONE when it is not). */
tg_own_kind tg_owned_kind(const tg_ctx *ctx, const void *p);
/* p's entry when the context owns p as `kind`, else NULL. The pointer is
 * good until the next tg_own or tg_disown. */
tg_owned *tg_owned_entry(tg_ctx *ctx, const void *p, tg_own_kind kind);
/* "a layer", "an optimizer", ...: the kind with its article, for messages. */
const char *tg_own_kind_name(tg_own_kind kind);
/* Checks that p is an object of `kind` the context made and has not freed,
 * by its address alone (p is not read: it may be another context's, or
 * freed). Otherwise TG_ERR_STATE naming fn and `what` ("the layer"):
 *   tg_linear_forward: the layer at 0x... is not a layer of this context:
 *   it was made by another context (use it with that one), or freed
 * One probe of the registry's hash table. */
bool tg_check_owned(tg_ctx *ctx, const char *fn, const char *what, const void *p, tg_own_kind kind);
/* Remembers p among the last frees (for tg_disown's message). */
void tg_recent_free(tg_ctx *ctx, const void *p, tg_own_kind kind);
/* True when p lies in the context's arena (live or quarantined chunks). */
bool tg_arena_holds(const tg_ctx *ctx, const void *p);

/* A persistent tensor's heap block: the tensor, then what ownership needs.
 * The registry says which pointers are one (TG_OWN_TENSOR); a persistent
 * grad is a bare tg_tensor. */
typedef struct tg_persistent {
    tg_tensor_impl t;  /* first: the pointer users hold */
    const void *owner; /* the layer or optimizer it belongs to, or NULL */
    char role[160];    /* what it is to its owner, for tg_tensor_free's message */
} tg_persistent;

/* Marks the persistent tensor t as owned by `owner` (a layer or an
 * optimizer): tg_tensor_free then refuses it unless `owner` is the object
 * being freed (ctx->releasing), with the message "tensor (4, 2) float32 is
 * <role>", role e.g. "the parameter 'fc1.weight' of a layer; free the
 * layer". The first owner stays. False (and an error naming fn) when t is
 * not a persistent tensor of ctx. */
bool tg_persistent_set_owner(tg_ctx *ctx, const char *fn, tg_tensor *t, const void *owner, const char *role);

/* True for the 16-bit storage dtypes (tensor/half.h). */
static inline bool tg_is_lowp(tg_dtype d) { return d == TG_BF16 || d == TG_F16; }
/* True when t is usable in ctx: of this context (every tensor header
 * records the context that made it), and for an arena tensor, of
 * this step. Two loads of the header's second cache line and two compares. */
static inline bool tg_current(const tg_ctx *ctx, const tg_tensor *t) {
    return !tg_stale(ctx, t) && tg_impl(t)->ctx == ctx;
}
/* Sets TG_ERR_STATE when t, whose header is readable, was made by another
 * context than ctx, naming fn and `what` ("argument 'b'", "input 1 of
 * 'add'"):
 *   tg_add: argument 'b', a (2, 2) float32 tensor, was made by another
 *   context (0x...), not this one (0x...): ...
 * and returns true; false (nothing set) otherwise. */
bool tg_foreign_error(tg_ctx *ctx, const char *fn, const char *what, const tg_tensor *t);
/* Checks a tensor argument: NULL while healthy is TG_ERR_NULL naming `arg`;
 * a tensor of another context, or an arena tensor from before the last
 * tg_ctx_reset, is TG_ERR_STATE (tg_foreign_error, tg_stale_error). Returns
 * false (and does nothing more) when the ctx is already in error. */
static inline bool tg_check_arg(tg_ctx *ctx, const char *fn, const char *arg, const tg_tensor *t);
/* tg_check_arg's error: NULL, another context's, stale, or 16 bits. Returns false. */
TG_FRIEND bool tg_check_arg_error(tg_ctx *ctx, const char *fn, const char *arg, const tg_tensor *t);
/* Inline: every op calls it on every tensor argument. It also refuses a
 * bfloat16 / float16 tensor (TG_ERR_DTYPE: "fn has no bfloat16 path"), so
 * an op that reads its data as float or double never sees one: the ops
 * send 16-bit inputs through float32 before it (autograd/lowp.h), and a
 * function with a low-precision path of its own checks with
 * tg_check_arg_any instead. */
static inline bool tg_check_arg(tg_ctx *ctx, const char *fn, const char *arg, const tg_tensor *t) {
    if (!tg_ok(ctx)) return false;
    if (t && tg_current(ctx, t) && !tg_is_lowp(t->dtype)) return true;
    return tg_check_arg_error(ctx, fn, arg, t);
}
/* As tg_check_arg, every dtype accepted. */
static inline bool tg_check_arg_any(tg_ctx *ctx, const char *fn, const char *arg, const tg_tensor *t) {
    if (!tg_ok(ctx)) return false;
    if (t && tg_current(ctx, t)) return true;
    return tg_check_arg_error(ctx, fn, arg, t);
}
/* Checks that the scalar argument `what` (e.g. "exponent p") is finite:
 * TG_ERR_VALUE "<fn>: exponent p = inf is not finite" otherwise. */
static inline bool tg_check_finite(tg_ctx *ctx, const char *fn, const char *what, double v) {
    if (isfinite(v)) return true;
    tg_error(ctx, TG_ERR_VALUE, fn, "%s = %g is not finite", what, v);
    return false;
}
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

/* A scope of arena scratch: tg_arena_mark notes how far the arena is used;
 * tg_arena_release gives back everything allocated since (ASan builds
 * poison it again), so the next allocations reuse that memory. Only for
 * memory nothing reads after the release: a kernel's workspace, or what a
 * backward function allocated besides gradients (autograd/tape.c). */
typedef struct tg_arena_pos {
    tg_chunk *chunk; /* the chunk being bumped, or NULL for an empty arena */
    size_t used;     /* its `used` */
    size_t arena_used;
} tg_arena_pos;
static inline tg_arena_pos tg_arena_mark(const tg_ctx *ctx) {
    return (tg_arena_pos){ctx->cur, ctx->cur ? ctx->cur->used : 0, ctx->arena_used};
}
void tg_arena_release(tg_ctx *ctx, tg_arena_pos pos);

/* A zeroed tensor of t's dtype and shape in a gradient block (above): a
 * free block of a fitting size when there is one, else a new one. NULL and
 * an error naming fn on failure. tg_grad_of makes every gradient it
 * creates with it. */
tg_tensor *tg_grad_block(tg_ctx *ctx, const char *fn, const tg_tensor *t);
/* Gives g's block back for reuse when g came from tg_grad_block and is in
 * use (returns false otherwise, doing nothing). g's header is marked
 * released (TG_EPOCH_RELEASED) and, in ASan builds, poisoned. */
TG_FRIEND bool tg_grad_release(tg_ctx *ctx, tg_tensor *g);

/* Initializes the tensor header at mem for (dtype, ndim, shape, numel),
 * data right after the header rounded up to TG_ALIGN (tg_tensor_head). */
tg_tensor *tg_tensor_init(const tg_ctx *ctx, void *mem, tg_dtype dtype, int ndim, const int64_t *shape, int64_t numel);
/* Bytes of a tensor header in the arena: sizeof(tg_tensor_impl) rounded up to TG_ALIGN. */
#define TG_TENSOR_HEAD ((sizeof(tg_tensor_impl) + TG_ALIGN - 1) / TG_ALIGN * TG_ALIGN)

/* A new arena tensor with uninitialized data (NULL and an error on failure). */
TG_FRIEND tg_tensor *tg_new_tensor(tg_ctx *ctx, const char *fn, tg_dtype dtype, int ndim, const int64_t *shape);
/* Gives a persistent tensor a zeroed persistent grad (tensor/create.c). */
bool tg_persistent_make_grad(tg_ctx *ctx, tg_tensor *t);
/* Frees every persistent tensor the context still owns (tg_ctx_free). */
void tg_persistent_free_all(tg_ctx *ctx);
/* A new arena tensor with t's shape and dtype, uninitialized. */
static inline tg_tensor *tg_new_like(tg_ctx *ctx, const char *fn, const tg_tensor *t) {
    return tg_new_tensor(ctx, fn, t->dtype, t->ndim, t->shape);
}
/* Arena allocation reporting errors as `fn`. */
TG_FRIEND void *tg_arena_alloc_fn(tg_ctx *ctx, const char *fn, size_t size);

/* Formats a tensor's shape into a small static-size buffer held by the
 * caller: char buf[TG_SHAPE_STR]; tg_shape_of(buf, t). */
#define TG_SHAPE_STR 128
static inline char *tg_shape_of(char buf[TG_SHAPE_STR], const tg_tensor *t) {
    if (!t) {
        snprintf(buf, TG_SHAPE_STR, "(NULL)");
        return buf;
    }
    return tg_shape_str(buf, TG_SHAPE_STR, t->ndim, t->shape);
}

/* Element size in bytes: TG_F32 4, TG_F64 8, TG_BF16 and TG_F16 2. */
static inline size_t tg_esize(tg_dtype d) { return d == TG_F64 ? 8 : d == TG_F32 ? 4 : 2; }
/* Reads / writes element i of t as a double (16-bit dtypes through float32,
 * tensor/half.h). */
static inline double tg_load(const tg_tensor *t, int64_t i) {
    switch (t->dtype) {
    case TG_F64: return ((const double *)t->data)[i];
    case TG_BF16: return tg_bf16_to_f32(((const uint16_t *)t->data)[i]);
    case TG_F16: return tg_f16_to_f32(((const uint16_t *)t->data)[i]);
    default: return (double)((const float *)t->data)[i];
    }
}
static inline void tg_store(tg_tensor *t, int64_t i, double v) {
    switch (t->dtype) {
    case TG_F64: ((double *)t->data)[i] = v; break;
    case TG_BF16: ((uint16_t *)t->data)[i] = tg_f32_to_bf16((float)v); break;
    case TG_F16: ((uint16_t *)t->data)[i] = tg_f32_to_f16((float)v); break;
    default: ((float *)t->data)[i] = (float)v;
    }
}
/* Converts n elements from `from` to `to` (any two dtypes; tensor/convert.c):
 * the rules of tensor/half.h, float64 <-> 16 bits through float32. */
void tg_convert_n(void *dst, tg_dtype to, const void *src, tg_dtype from, size_t n);

/* The k-th Philox block of the context's stream, counting from its current
 * offset; does not advance the offset. */
void tg_rng_block(const tg_ctx *ctx, uint64_t k, uint32_t out[4]);
/* Uniform in [0,1) as f64 from two 32-bit words. */
static inline double tg_u01_f64(uint32_t hi, uint32_t lo) {
    uint64_t w = ((uint64_t)hi << 32) | lo;
    return (double)(w >> 11) * 0x1.0p-53;
}
/* Box-Muller: with u1, u2 uniform in [0,1), 1 - u1 is in (0, 1] so the log
 * is finite; z = sqrt(-2 ln(1 - u1)) cos(2 pi u2) is standard normal. */
static inline double tg_normal_from_block(const uint32_t x[4]) {
    double u1 = tg_u01_f64(x[0], x[1]);
    double u2 = tg_u01_f64(x[2], x[3]);
    const double two_pi = 6.283185307179586476925286766559;
    return sqrt(-2.0 * log(1.0 - u1)) * cos(two_pi * u2);
}

#endif

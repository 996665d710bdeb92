/* The context: allocator, arena, persistent tensors and the sticky error.
 *
 * The arena is a list of chunks. Allocation bumps a pointer in the current
 * chunk; when it is full the next chunk (kept from an earlier step) or a new
 * one is used. Reset rewinds every chunk in O(1) per chunk. When a step
 * needed more than one chunk, reset replaces them by one chunk of the total
 * size, so after the first steps a step runs in a single chunk and never
 * calls the allocator: the footprint stays flat and the pages stay warm.
 * Checked builds (TG_CHECKED) keep the chunks a step used out of the next
 * step (quarantine_step), so the arena alternates between two chunks; ASan
 * builds poison every arena byte not handed out (tensor/lifetime.c says
 * why both).
 *
 * Within a step, memory comes back in two ways before the reset, both for
 * backward's sake (autograd/tape.c): a scope of scratch (tg_arena_mark,
 * tg_arena_release) rewinds the bump pointer, and gradients live in
 * gradient blocks of their own (tg_grad_block), which backward releases
 * once the walk is past the record that reads them and the next gradient
 * of a fitting size reuses. The peak (tg_arena_peak) counts both. */
#include "tensor/internal.h"
#include "tensor/parallel.h"
#include "tensor/profile.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static void *default_alloc(size_t size, size_t align, void *user) {
    (void)user;
    if (size == 0) size = align;
    size = (size + align - 1) / align * align; /* aligned_alloc needs a multiple */
    return aligned_alloc(align, size);
}

static void default_free(void *p, void *user) {
    (void)user;
    free(p);
}

tg_ctx *tg_ctx_new(uint64_t seed) { return tg_ctx_new_with_allocator(seed, NULL); }

tg_ctx *tg_ctx_new_with_allocator(uint64_t seed, const tg_allocator *alloc) {
    tg_allocator a = {default_alloc, default_free, NULL};
    if (alloc) {
        if (!alloc->alloc || !alloc->free) return NULL;
        a = *alloc;
    }
    tg_ctx *ctx = a.alloc(sizeof *ctx, TG_ALIGN, a.user);
    if (!ctx) return NULL;
    memset(ctx, 0, sizeof *ctx);
    ctx->alloc = a;
    ctx->seed = seed;
    ctx->tape = tg_tape_empty();
    const char *abort_env = getenv("TG_ABORT_ON_ERROR");
    ctx->abort_on_error = abort_env && strcmp(abort_env, "1") == 0;
    tg_set_threads(ctx, 0);
    return ctx;
}

/* Autocast is a setting of the context, like its thread count: the layers
 * read it (layers/autocast.c, where the copies are made). */
void tg_ctx_set_autocast(tg_ctx *ctx, tg_dtype dtype) {
    if (!tg_ok(ctx)) return;
    if (dtype != TG_F32 && dtype != TG_BF16 && dtype != TG_F16) {
        tg_error(ctx, TG_ERR_VALUE, __func__,
                 "dtype %d (%s): autocast computes in TG_BF16 or TG_F16; TG_F32 turns it off", (int)dtype,
                 tg_dtype_name(dtype));
        return;
    }
    ctx->autocast = dtype;
}

tg_dtype tg_ctx_autocast(const tg_ctx *ctx) { return ctx ? ctx->autocast : TG_F32; }

static void free_chunks(tg_ctx *ctx, tg_chunk *c) {
    while (c) {
        tg_chunk *next = c->next;
        TG_UNPOISON(c->base, c->size); /* the allocator's own bookkeeping may use it */
        tg_heap_free(ctx, c->base);
        tg_heap_free(ctx, c);
        c = next;
    }
}

static tg_tensor *gblock_tensor(tg_gblock *b) { return (tg_tensor *)((unsigned char *)b + TG_GBLOCK_HEAD); }

void tg_ctx_free(tg_ctx *ctx) {
    if (!ctx) return;
    tg_persistent_free_all(ctx);
    tg_heap_free(ctx, ctx->owned);
    free_chunks(ctx, ctx->chunks);
    free_chunks(ctx, ctx->quarantine);
    for (tg_gblock *b = ctx->gblocks, *next; b; b = next) {
        next = b->next;
        TG_UNPOISON(gblock_tensor(b), b->size);
        tg_heap_free(ctx, b);
    }
    tg_tape_free(ctx, &ctx->tape);
    tg_heap_free(ctx, ctx->autocast_copies);
    tg_heap_free(ctx, ctx->profile);
    tg_allocator a = ctx->alloc;
    a.free(ctx, a.user);
}

/* A new chunk of `size` bytes. ASan builds poison it whole: only what the
 * arena hands out (tg_arena_alloc_fn) becomes addressable. */
static tg_chunk *new_chunk(tg_ctx *ctx, size_t size) {
    tg_chunk *c = tg_heap_alloc(ctx, sizeof *c);
    if (!c) return NULL;
    c->base = tg_heap_alloc(ctx, size);
    if (!c->base) {
        tg_heap_free(ctx, c);
        return NULL;
    }
    TG_POISON(c->base, size);
    c->next = NULL;
    c->size = size;
    c->used = 0;
    return c;
}

/* The size of a new chunk for an allocation of `size` bytes: at least
 * TG_ARENA_CHUNK, and in checked builds the most one step has used rounded
 * up to a power of two (geometric growth, few reallocations). */
static size_t step_chunk_size(const tg_ctx *ctx, size_t size) {
    size_t want = TG_ARENA_CHUNK;
    while (want < ctx->step_high && want <= SIZE_MAX / 2) want *= 2;
    return size > want ? size : want;
}

#ifdef TG_CHECKED
static size_t total_size(const tg_chunk *c) {
    size_t n = 0;
    for (; c; c = c->next) n += c->size;
    return n;
}

/* Checked builds: the chunks the ending step used go to quarantine, and the
 * ones quarantined a step ago come back. So the arena does not hand out the
 * ending step's memory in the next step: a tensor kept across the reset
 * keeps its header (and its step), and tg_check_arg names it.
 *
 * Of the chunks that come back, the arena keeps those of at least `want`
 * bytes (the most one step has used), at most two of them (one when the
 * quarantine holds a chunk: the step after next gets that one back), and
 * frees the rest. When none is big enough, the step allocates one of `want`
 * bytes at its first allocation (step_chunk_size), so a failure is the
 * step's error. So a
 * run whose steps alternate with empty or small ones (evaluations, logs)
 * neither frees nor allocates after the first steps: the pages stay
 * mapped and warm, and the footprint stays at two chunks of one step. */
static void quarantine_step(tg_ctx *ctx, size_t want) {
    tg_chunk *used = NULL, **used_end = &used;
    tg_chunk *back = ctx->quarantine, **back_end = &back;
    while (*back_end) back_end = &(*back_end)->next;
    for (tg_chunk *c = ctx->chunks, *next; c; c = next) {
        next = c->next;
        c->next = NULL;
        if (c->used) {
            *used_end = c;
            used_end = &c->next;
        } else {
            *back_end = c;
            back_end = &c->next;
        }
    }
    int room = used ? 1 : 2;
    tg_chunk *live = NULL, **live_end = &live;
    for (tg_chunk *c = back, *next; c; c = next) {
        next = c->next;
        c->next = NULL;
        if (room > 0 && c->size >= want) {
            room--;
            *live_end = c;
            live_end = &c->next;
        } else {
            free_chunks(ctx, c);
        }
    }
    ctx->chunks = live;
    ctx->quarantine = used;
    ctx->quarantined = total_size(used);
    ctx->arena_capacity = ctx->quarantined + total_size(live);
}
#endif

/* At a reset every gradient block is free again, in the order they were
 * made -- except, in checked builds, those still in use: like the arena's
 * chunks they sit out the next step, so a gradient kept across the reset
 * keeps its header. */
static void reset_gblocks(tg_ctx *ctx) {
    tg_gblock **free_end = &ctx->gfree;
    for (tg_gblock *b = ctx->gblocks; b; b = b->next) {
        if (b->state == TG_GBLOCK_USED) TG_POISON(gblock_tensor(b), b->size);
#ifdef TG_CHECKED
        if (b->state == TG_GBLOCK_USED) {
            b->state = TG_GBLOCK_QUARANTINED;
            continue;
        }
#endif
        b->state = TG_GBLOCK_FREE;
        *free_end = b;
        free_end = &b->next_free;
    }
    *free_end = NULL;
    ctx->grad_used = 0;
}

void tg_ctx_reset(tg_ctx *ctx) {
    if (!ctx) return;
    tg_profile_step(ctx);
    tg_tape_clear(&ctx->tape); /* its records point at arena tensors */
    ctx->epoch++;
    if (ctx->epoch == TG_EPOCH_RELEASED) ctx->epoch = 0; /* never a released gradient's mark */
    reset_gblocks(ctx);
    /* What the step handed out becomes unaddressable for ASan. */
    for (tg_chunk *c = ctx->chunks; c; c = c->next) TG_POISON(c->base, c->used);
#ifdef TG_CHECKED
    if (ctx->arena_peak > ctx->step_high) ctx->step_high = ctx->arena_peak;
    quarantine_step(ctx, step_chunk_size(ctx, 0));
#else
    /* Coalesce a multi-chunk arena into one chunk of the same capacity, so
     * the next step bumps through one block. If that allocation fails we
     * simply keep the old chunks. (An empty arena is left empty: the step
     * allocates what it needs, reporting failures.) */
    if (ctx->chunks && ctx->chunks->next) {
        tg_chunk *one = new_chunk(ctx, ctx->arena_capacity);
        if (one) {
            free_chunks(ctx, ctx->chunks);
            ctx->chunks = one;
        }
    }
#endif
    for (tg_chunk *c = ctx->chunks; c; c = c->next) c->used = 0;
    ctx->cur = ctx->chunks;
    ctx->arena_used = 0;
    ctx->arena_peak = 0;
}

static void note_peak(tg_ctx *ctx) {
    size_t in_use = ctx->arena_used + ctx->grad_used;
    if (in_use > ctx->arena_peak) ctx->arena_peak = in_use;
}

void *tg_arena_alloc_fn(tg_ctx *ctx, const char *fn, size_t size) {
    if (!tg_ok(ctx)) return NULL;
    if (size > SIZE_MAX - TG_ALIGN) {
        tg_error(ctx, TG_ERR_OOM, fn, "allocation of %zu bytes overflows", size);
        return NULL;
    }
    size_t asked = size;
    size = (size + TG_ALIGN - 1) / TG_ALIGN * TG_ALIGN;
    if (size == 0) size = TG_ALIGN;
    tg_chunk *c = ctx->cur;
    while (c && c->size - c->used < size) c = c->next;
    if (!c) {
        size_t want = step_chunk_size(ctx, size);
        c = new_chunk(ctx, want);
        if (!c) {
            tg_error(ctx, TG_ERR_OOM, fn, "out of memory allocating %zu bytes in the arena", size);
            return NULL;
        }
        /* append at the end of the list */
        if (!ctx->chunks) {
            ctx->chunks = c;
        } else {
            tg_chunk *last = ctx->cur ? ctx->cur : ctx->chunks;
            while (last->next) last = last->next;
            last->next = c;
        }
        ctx->arena_capacity += want;
    }
    ctx->cur = c;
    void *p = c->base + c->used;
    c->used += size;
    ctx->arena_used += size;
    note_peak(ctx);
    TG_UNPOISON(p, asked);
    return p;
}

void tg_arena_release(tg_ctx *ctx, tg_arena_pos pos) {
    tg_chunk *c = pos.chunk ? pos.chunk : ctx->chunks;
    if (!c) return;
    size_t from = pos.chunk ? pos.used : 0;
    /* the chunks after pos.chunk were empty at the mark (allocation only moves forward) */
    for (; c; c = c->next, from = 0) {
        if (c->used > from) TG_POISON(c->base + from, c->used - from);
        c->used = from;
    }
    ctx->cur = pos.chunk ? pos.chunk : ctx->chunks;
    ctx->arena_used = pos.arena_used;
}

/* ---- gradient blocks ------------------------------------------------------ */

tg_tensor *tg_grad_block(tg_ctx *ctx, const char *fn, const tg_tensor *t) {
    if (!tg_ok(ctx)) return NULL;
    const size_t bytes = (size_t)t->numel * tg_esize(t->dtype);
    const size_t need = (TG_TENSOR_HEAD + bytes + TG_ALIGN - 1) / TG_ALIGN * TG_ALIGN;
    /* The smallest free block that fits without wasting more than the
     * gradient itself (so a small gradient never pins a big block). The
     * free list is short: about as many blocks as gradients are live at
     * once. */
    tg_gblock **best = NULL;
    for (tg_gblock **p = &ctx->gfree; *p; p = &(*p)->next_free)
        if ((*p)->size >= need && (*p)->size / 2 <= need && (!best || (*p)->size < (*best)->size)) best = p;
    tg_gblock *b;
    if (best) {
        b = *best;
        *best = b->next_free;
    } else {
        b = tg_heap_alloc(ctx, TG_GBLOCK_HEAD + need);
        if (!b) {
            tg_error(ctx, TG_ERR_OOM, fn, "out of memory allocating a gradient of %zu bytes", bytes);
            return NULL;
        }
        b->size = need;
        b->next = NULL;
        if (ctx->gblocks_last) ctx->gblocks_last->next = b;
        else ctx->gblocks = b;
        ctx->gblocks_last = b;
        ctx->grad_capacity += need;
    }
    b->state = TG_GBLOCK_USED;
    b->next_free = NULL;
    ctx->grad_used += b->size;
    note_peak(ctx);
    TG_UNPOISON(gblock_tensor(b), TG_TENSOR_HEAD + bytes);
    tg_tensor *g = tg_tensor_init(ctx, gblock_tensor(b), t->dtype, t->ndim, t->shape, t->numel);
    tg_impl(g)->grad_block = true;
    tg_parallel_zero(ctx->threads, g->data, bytes); /* big gradients: a few % of a step, on the threads */
    return g;
}

/* A block is found from its tensor's address, not by a walk over the
 * blocks: a step that runs thousands of backwards (a second-order
 * gradient check) would pay for the walk quadratically. Only tg_grad_block
 * marks a header grad_block (tg_tensor_init clears it), so the address
 * arithmetic is taken only for a block's own tensor. */
bool tg_grad_release(tg_ctx *ctx, tg_tensor *g) {
    if (!g || !tg_impl(g)->grad_block) return false;
    tg_gblock *b = (tg_gblock *)((unsigned char *)g - TG_GBLOCK_HEAD);
    if (b->state != TG_GBLOCK_USED) return false;
    tg_impl(g)->epoch = TG_EPOCH_RELEASED;
    TG_POISON(g, b->size);
    b->state = TG_GBLOCK_FREE;
    b->next_free = ctx->gfree;
    ctx->gfree = b;
    ctx->grad_used -= b->size;
    return true;
}

void *tg_arena_alloc(tg_ctx *ctx, size_t size) { return tg_arena_alloc_fn(ctx, "tg_arena_alloc", size); }

size_t tg_arena_capacity(const tg_ctx *ctx) { return ctx ? ctx->arena_capacity + ctx->grad_capacity : 0; }
size_t tg_arena_used(const tg_ctx *ctx) { return ctx ? ctx->arena_used + ctx->grad_used : 0; }
size_t tg_arena_peak(const tg_ctx *ctx) { return ctx ? ctx->arena_peak : 0; }
size_t tg_arena_quarantined(const tg_ctx *ctx) { return ctx ? ctx->quarantined : 0; }

/* ---- errors ------------------------------------------------------------ */

bool(tg_ok)(const tg_ctx *ctx) { return tg_ok(ctx); }

tg_status tg_status_of(const tg_ctx *ctx) { return ctx ? ctx->status : TG_ERR_NULL; }

const char *tg_error_message(const tg_ctx *ctx) {
    if (!ctx) return "tg_error_message: the context is NULL";
    return ctx->message;
}

void tg_clear_error(tg_ctx *ctx) {
    if (!ctx) return;
    ctx->status = TG_OK;
    ctx->message[0] = '\0';
}

void tg_set_abort_on_error(tg_ctx *ctx, bool on) {
    if (ctx) ctx->abort_on_error = on;
}

const char *tg_status_name(tg_status s) {
    switch (s) {
    case TG_OK: return "ok";
    case TG_ERR_NULL: return "NULL argument";
    case TG_ERR_SHAPE: return "shape error";
    case TG_ERR_DTYPE: return "dtype error";
    case TG_ERR_VALUE: return "bad value";
    case TG_ERR_INDEX: return "index out of range";
    case TG_ERR_OOM: return "out of memory";
    case TG_ERR_STATE: return "invalid state";
    case TG_ERR_IO: return "I/O error";
    case TG_ERR_FORMAT: return "bad format";
    }
    return "unknown status";
}

void tg_error(tg_ctx *ctx, tg_status status, const char *fn, const char *fmt, ...) {
    if (!ctx || ctx->status != TG_OK || status == TG_OK) return;
    ctx->status = status;
    int n = snprintf(ctx->message, sizeof ctx->message, "%s: ", fn ? fn : "tapegrad");
    if (n < 0 || (size_t)n >= sizeof ctx->message) n = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->message + n, sizeof ctx->message - (size_t)n, fmt, ap);
    va_end(ap);
    if (ctx->abort_on_error) {
        fprintf(stderr, "tapegrad error (%s): %s\n", tg_status_name(status), ctx->message);
        abort();
    }
}

/* ---- argument checks ---------------------------------------------------- */

bool tg_check_arg_error(tg_ctx *ctx, const char *fn, const char *arg, const tg_tensor *t) {
    if (!t) return tg_null_error(ctx, fn, arg);
    char what[96];
    snprintf(what, sizeof what, "argument '%s'", arg);
    if (tg_foreign_error(ctx, fn, what, t)) return false;
    if (tg_stale(ctx, t)) tg_stale_error(ctx, fn, what, t);
    else /* tg_check_arg: a 16-bit tensor where the function has no path for it */
        tg_error(ctx, TG_ERR_DTYPE, fn,
                 "%s is a %s tensor, and %s has no %s path; convert it first (tg_cast(ctx, %s, TG_F32), "
                 "differentiable) or use a function that takes it (tapegrad/tensor.h, Low precision)",
                 what, tg_dtype_name(t->dtype), fn, tg_dtype_name(t->dtype), arg);
    return false;
}

bool tg_check_same_dtype(tg_ctx *ctx, const char *fn, const tg_tensor *a, const tg_tensor *b) {
    if (a->dtype == b->dtype) return true;
    tg_error(ctx, TG_ERR_DTYPE, fn, "dtypes differ: %s and %s", tg_dtype_name(a->dtype), tg_dtype_name(b->dtype));
    return false;
}

bool tg_check_same_shape(tg_ctx *ctx, const char *fn, const tg_tensor *a, const tg_tensor *b) {
    if (tg_same_shape(a, b)) return true;
    char sa[TG_SHAPE_STR], sb[TG_SHAPE_STR];
    tg_error(ctx, TG_ERR_SHAPE, fn, "shapes differ: %s and %s", tg_shape_of(sa, a), tg_shape_of(sb, b));
    return false;
}

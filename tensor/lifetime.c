/* Lifetime checks: stale arena tensors, and the ownership registry that
 * makes frees safe.
 *
 * Stale tensors. An arena tensor's header records the step it was made in
 * (epoch); tg_check_arg compares it with the context's step, so a tensor
 * kept across tg_ctx_reset is an error naming the call instead of an alias
 * of whatever the arena put there since (tensor/internal.h says what each
 * build can see).
 *
 * Ownership. A context registers every object it hands out on its heap
 * (persistent tensors and their grads, layers, optimizers) in a small hash
 * table of addresses. A free first looks its pointer up, by address only:
 * a second free, a free through another context or a free of a tensor some
 * layer owns is then an error, and the check never reads the memory behind
 * a pointer it does not own. What it cannot tell apart: an address the
 * allocator has handed out again for a new object of the same kind in the
 * same context (the new object would be freed). */
#include "tensor/internal.h"

#include <string.h>

/* ---- the ownership registry ------------------------------------------------ */

/* The slot p hashes to (Fibonacci hashing of the address without its
 * alignment bits). */
static size_t home_slot(const void *p, size_t cap) {
    uint64_t h = ((uint64_t)(uintptr_t)p >> 4) * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 32) & (cap - 1);
}

/* The slot holding p, or the empty slot where p would go. */
static size_t find_slot(const tg_ctx *ctx, const void *p) {
    size_t mask = ctx->owned_cap - 1, i = home_slot(p, ctx->owned_cap);
    while (ctx->owned[i].p && ctx->owned[i].p != p) i = (i + 1) & mask;
    return i;
}

static bool grow_registry(tg_ctx *ctx) {
    size_t cap = ctx->owned_cap ? ctx->owned_cap * 2 : 64;
    tg_owned *old = ctx->owned;
    size_t old_cap = ctx->owned_cap;
    tg_owned *slots = tg_heap_alloc(ctx, cap * sizeof *slots);
    if (!slots) return false;
    memset(slots, 0, cap * sizeof *slots);
    ctx->owned = slots;
    ctx->owned_cap = cap;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].p) ctx->owned[find_slot(ctx, old[i].p)] = old[i];
    tg_heap_free(ctx, old);
    return true;
}

tg_own_kind tg_owned_kind(const tg_ctx *ctx, const void *p) {
    if (!ctx || !p || !ctx->owned_cap) return TG_OWN_NONE;
    return ctx->owned[find_slot(ctx, p)].kind;
}

tg_owned *tg_owned_entry(tg_ctx *ctx, const void *p, tg_own_kind kind) {
    if (!ctx || !p || !ctx->owned_cap) return NULL;
    tg_owned *e = &ctx->owned[find_slot(ctx, p)];
    return e->p && e->kind == kind ? e : NULL;
}

/* Forgets p among the recent frees (its address now names a new object). */
static void forget_recent(tg_ctx *ctx, const void *p) {
    for (int i = 0; i < TG_RECENT_FREES; i++)
        if (ctx->recent[i].p == p) ctx->recent[i] = (tg_owned){0};
}

bool tg_own(tg_ctx *ctx, const char *fn, const void *p, tg_own_kind kind) {
    if ((ctx->owned_count + 1) * 2 > ctx->owned_cap && !grow_registry(ctx)) {
        tg_error(ctx, TG_ERR_OOM, fn, "out of memory growing the context's ownership registry to %zu entries",
                 ctx->owned_cap ? ctx->owned_cap * 2 : 64);
        return false;
    }
    size_t i = find_slot(ctx, p);
    if (!ctx->owned[i].p) ctx->owned_count++;
    ctx->owned[i] = (tg_owned){.p = p, .kind = kind};
    forget_recent(ctx, p);
    return true;
}

/* Removes slot i, shifting back the entries after it that probed past it
 * (linear probing's deletion: no tombstones). */
static void remove_slot(tg_ctx *ctx, size_t i) {
    size_t mask = ctx->owned_cap - 1;
    ctx->owned[i] = (tg_owned){0};
    ctx->owned_count--;
    for (size_t j = (i + 1) & mask; ctx->owned[j].p; j = (j + 1) & mask) {
        size_t k = home_slot(ctx->owned[j].p, ctx->owned_cap);
        /* The entry at j stays when its home k lies cyclically in (i, j]. */
        bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
        if (stays) continue;
        ctx->owned[i] = ctx->owned[j];
        ctx->owned[j] = (tg_owned){0};
        i = j;
    }
}

void tg_recent_free(tg_ctx *ctx, const void *p, tg_own_kind kind) {
    ctx->recent[ctx->recent_next % TG_RECENT_FREES] = (tg_owned){.p = p, .kind = kind};
    ctx->recent_next++;
}

const char *tg_own_kind_name(tg_own_kind kind) {
    switch (kind) {
    case TG_OWN_TENSOR: return "a persistent tensor";
    case TG_OWN_GRAD: return "a persistent grad";
    case TG_OWN_LAYER: return "a layer";
    case TG_OWN_OPTIM: return "an optimizer";
    case TG_OWN_SCALER: return "a gradient scaler";
    case TG_OWN_NONE: break;
    }
    return "an object";
}

/* The kind without its article: "the optimizer at 0x..." */
static const char *kind_noun(tg_own_kind kind) { return strchr(tg_own_kind_name(kind), ' ') + 1; }

bool tg_disown(tg_ctx *ctx, const char *fn, const void *p, tg_own_kind kind) {
    tg_own_kind has = tg_owned_kind(ctx, p);
    if (has == kind) {
        remove_slot(ctx, find_slot(ctx, p));
        tg_recent_free(ctx, p, kind);
        return true;
    }
    if (has != TG_OWN_NONE) {
        tg_error(ctx, TG_ERR_STATE, fn, "%p is %s of this context, not %s", p, tg_own_kind_name(has),
                 tg_own_kind_name(kind));
        return false;
    }
    for (int i = 0; i < TG_RECENT_FREES; i++)
        if (ctx->recent[i].p == p && ctx->recent[i].kind == kind) {
            tg_error(ctx, TG_ERR_STATE, fn, "the %s at %p was already freed (a second free)", kind_noun(kind), p);
            return false;
        }
    tg_error(ctx, TG_ERR_STATE, fn,
             "%p is not %s of this context: it was made by another context (free it through that one), "
             "or freed already",
             p, tg_own_kind_name(kind));
    return false;
}

bool tg_check_owned(tg_ctx *ctx, const char *fn, const char *what, const void *p, tg_own_kind kind) {
    if (tg_owned_kind(ctx, p) == kind) return true;
    tg_error(ctx, TG_ERR_STATE, fn,
             "%s at %p is not %s of this context: it was made by another context (use it with that one), or freed",
             what, p, tg_own_kind_name(kind));
    return false;
}

bool tg_persistent_set_owner(tg_ctx *ctx, const char *fn, tg_tensor *t, const void *owner, const char *role) {
    if (!t || tg_owned_kind(ctx, t) != TG_OWN_TENSOR) {
        tg_error(ctx, TG_ERR_STATE, fn, "%p is not a persistent tensor of this context", (const void *)t);
        return false;
    }
    tg_persistent *p = (tg_persistent *)t;
    if (p->owner) return true; /* the first owner stays (a layer inside a bigger module) */
    p->owner = owner;
    snprintf(p->role, sizeof p->role, "%s", role);
    return true;
}

/* ---- stale tensors ------------------------------------------------------------ */

bool tg_arena_holds(const tg_ctx *ctx, const void *p) {
    const unsigned char *q = p;
    for (int list = 0; list < 2; list++)
        for (const tg_chunk *c = list ? ctx->quarantine : ctx->chunks; c; c = c->next)
            if (q >= c->base && q < c->base + c->size) return true;
    for (const tg_gblock *b = ctx->gblocks; b; b = b->next)
        if (q >= (const unsigned char *)b && q < (const unsigned char *)b + TG_GBLOCK_HEAD + b->size) return true;
    return false;
}

/* Copies what a message needs from a header the arena still holds, which
 * ASan builds have poisoned: the loads are not instrumented, and go through
 * volatile so the compiler makes no (intercepted) memcpy of them. */
#ifdef TG_ASAN
__attribute__((no_sanitize("address")))
#endif
static void
read_header(tg_tensor_impl *h, const tg_tensor *t) {
    const volatile tg_tensor_impl *v = tg_impl(t);
    h->pub.dtype = v->pub.dtype;
    h->pub.ndim = v->pub.ndim;
    for (int i = 0; i < TG_MAX_DIMS; i++) h->pub.shape[i] = v->pub.shape[i];
    h->pub.persistent = v->pub.persistent;
    h->epoch = v->epoch;
    h->ctx = v->ctx;
}

/* "a (2, 2) float32 tensor", or "a tensor" when the header makes no sense. */
static void describe(char desc[TG_SHAPE_STR + 32], const tg_tensor *h) {
    snprintf(desc, TG_SHAPE_STR + 32, "a tensor");
    if (h->ndim >= 0 && h->ndim <= TG_MAX_DIMS) {
        char s[TG_SHAPE_STR];
        snprintf(desc, TG_SHAPE_STR + 32, "a %s %s tensor", tg_shape_str(s, sizeof s, h->ndim, h->shape),
                 tg_dtype_name(h->dtype));
    }
}

/* Another context's tensor is refused: its memory lives and dies with that
 * context (its arena, its resets, its registry), and an op would record it
 * on this context's tape. */
bool tg_foreign_error(tg_ctx *ctx, const char *fn, const char *what, const tg_tensor *t) {
#ifdef TG_ASAN
    if (__asan_region_is_poisoned((void *)(uintptr_t)t, sizeof(tg_tensor_impl)))
        return false; /* stale or freed: not readable */
#endif
    tg_tensor_impl h;
    read_header(&h, t);
    if (h.ctx == ctx) return false;
    char desc[TG_SHAPE_STR + 32];
    describe(desc, &h.pub);
    tg_error(ctx, TG_ERR_STATE, fn,
             "%s, %s, was made by another context (%p), not this one (%p): a tensor is used only with the context "
             "that made it (to move values across, tg_from_buffer(ctx, dtype, ndim, shape, t->data))",
             what, desc, (const void *)h.ctx, (const void *)ctx);
    return true;
}

void tg_stale_error(tg_ctx *ctx, const char *fn, const char *what, const tg_tensor *t) {
    bool known = true;
#ifdef TG_ASAN
    known = !__asan_region_is_poisoned((void *)(uintptr_t)t, sizeof(tg_tensor_impl)) || tg_arena_holds(ctx, t);
#endif
    if (!known) {
        tg_error(ctx, TG_ERR_STATE, fn,
                 "%s is a tensor whose memory was freed: an arena tensor from before a tg_ctx_reset (the context "
                 "is at step %u), or a freed persistent tensor",
                 what, ctx->epoch);
        return;
    }
    tg_tensor_impl h;
    read_header(&h, t);
    char desc[TG_SHAPE_STR + 32];
    describe(desc, &h.pub);
    if (h.epoch == TG_EPOCH_RELEASED) {
        tg_error(ctx, TG_ERR_STATE, fn,
                 "%s, %s, is the gradient of an intermediate tensor that backward released after the op that "
                 "read it (pass keep_tape=true to tg_backward_ex to keep intermediate gradients)",
                 what, desc);
        return;
    }
    tg_error(ctx, TG_ERR_STATE, fn,
             "%s, %s, is from step %u, before tg_ctx_reset; the context is at step %u (an arena tensor lives "
             "until the next reset: tg_persist what must outlive a step)",
             what, desc, h.epoch, ctx->epoch);
}

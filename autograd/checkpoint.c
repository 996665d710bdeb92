/* Activation checkpointing: y = fn(in...) recorded as ONE tape record that
 * keeps only fn's inputs, and runs fn again, under a tape of its own,
 * during backward (tapegrad/autograd.h, tg_checkpoint; the memory
 * arithmetic is in docs/activation-checkpointing.md).
 *
 * Forward. fn runs on a private tape (tg_tape_stash) on leaf views of its
 * inputs, so its records -- and everything they save -- can be thrown
 * away: the arena is rewound to where it stood before fn (y's values are
 * carried across the rewind), and the private tape is freed. What the
 * private tape shows first is what fn reads that requires grad besides
 * its inputs: the parameters of the layers it calls, or a tensor of the
 * caller's it captured. Those become inputs of the checkpoint's record
 * too, so the record exists when only they require grad, and tg_grad and
 * the in-place checks see them as what they are.
 *
 * Backward. Given dy, fn runs again from the same inputs and the same RNG
 * state (a dropout draws the same mask), recording on a private tape,
 * and a backward seeded with dy walks it. The leaf view of each input
 * that requires grad shares its gradient tensor with the input itself,
 * and parameters accumulate into their own grads: every gradient receives
 * the same additions, in the same order, as in the run without the
 * checkpoint -- the records the recomputation walks are the ones that run
 * would have walked at this point of the tape -- so the results are the
 * same bits (tests/test_checkpoint_activations.c). The recomputed
 * activations are arena scratch of the checkpoint record's backward,
 * which the outer walk gives back when it moves on.
 *
 * Autocast's table of 16-bit parameter copies (layers/autocast.c) lives
 * in the context; copies fn makes are arena memory that the rewinds give
 * back, so the table is put back as it was after each run of fn. */
#include "autograd/tape.h"

#include <string.h>

/* What the record keeps besides its inputs. */
typedef struct {
    tg_checkpoint_fn fn;
    void *user;
    int n_args;            /* fn's own inputs: the record's first n_args */
    uint64_t seed, offset; /* the RNG before fn ran */
} ckpt_saved;

/* The autocast table of the context, kept aside while fn runs. */
typedef struct {
    tg_autocast_copy *copies;
    int count;
    uint32_t epoch;
} ckpt_autocast;

static bool autocast_keep(tg_ctx *ctx, ckpt_autocast *k) {
    k->count = ctx->autocast_count;
    k->epoch = ctx->autocast_epoch;
    k->copies = NULL;
    if (!k->count) return true;
    k->copies = tg_heap_alloc(ctx, (size_t)k->count * sizeof *k->copies);
    if (!k->copies) {
        tg_error(ctx, TG_ERR_OOM, "tg_checkpoint", "out of memory for %d autocast copies", k->count);
        return false;
    }
    memcpy(k->copies, ctx->autocast_copies, (size_t)k->count * sizeof *k->copies);
    return true;
}

static void autocast_put_back(tg_ctx *ctx, ckpt_autocast *k) {
    if (k->count) memcpy(ctx->autocast_copies, k->copies, (size_t)k->count * sizeof *k->copies);
    ctx->autocast_count = k->count;
    ctx->autocast_epoch = k->epoch;
    tg_heap_free(ctx, k->copies);
    k->copies = NULL;
}

/* Leaf views of in[0..n): the same data, no history; each requires grad
 * when its input does, with grads[i] as its gradient when grads is given
 * (backward: the input's own). */
static bool leaf_views(tg_ctx *ctx, int n, tg_tensor *const *in, tg_tensor **grads, tg_tensor **views) {
    for (int i = 0; i < n; i++) {
        if (!in[i]) {
            views[i] = NULL;
            continue;
        }
        views[i] = tg_detach(ctx, in[i]);
        if (!views[i]) return false;
        if (in[i]->requires_grad) {
            views[i]->requires_grad = true;
            views[i]->grad = grads ? grads[i] : NULL;
        }
    }
    return true;
}

/* True when t is one of the n tensors of list. */
static bool listed(const tg_tensor *t, int n, tg_tensor *const *list) {
    for (int i = 0; i < n; i++)
        if (list[i] == t) return true;
    return false;
}

/* fn's output on leaf views of in[0..n) (their n pointers into
 * views[0..n)), run with grad mode on: on the private tape the caller
 * stashed the context's for. */
static tg_tensor *run_fn(tg_ctx *ctx, tg_checkpoint_fn fn, void *user, int n, tg_tensor *const *in, tg_tensor **grads,
                         tg_tensor **views) {
    if (!leaf_views(ctx, n, in, grads, views)) return NULL;
    tg_set_grad_enabled(ctx, true);
    tg_tensor *y = fn(ctx, views, user);
    if (tg_ok(ctx) && !y) tg_error(ctx, TG_ERR_STATE, "tg_checkpoint", "fn returned NULL without setting an error");
    return tg_ok(ctx) ? y : NULL;
}

static void checkpoint_backward(tg_ctx *ctx, tg_node *n) {
    const ckpt_saved *s = n->saved;
    tg_tensor *dy = n->out->grad;
    tg_tensor **grads = s->n_args ? tg_arena_alloc_fn(ctx, n->op->name, (size_t)s->n_args * sizeof *grads) : NULL;
    if (s->n_args && !grads) return;
    for (int i = 0; i < s->n_args; i++) grads[i] = n->in[i] ? tg_grad_of(ctx, n->in[i]) : NULL;
    uint64_t seed, offset;
    tg_rng_state(ctx, &seed, &offset);
    tg_rng_set_state(ctx, s->seed, s->offset);
    ckpt_autocast keep;
    if (!autocast_keep(ctx, &keep)) return;
    tg_tensor **views = s->n_args ? tg_arena_alloc_fn(ctx, n->op->name, (size_t)s->n_args * sizeof *views) : NULL;
    tg_tape outer;
    tg_tape_stash(ctx, &outer);
    tg_tensor *y = !s->n_args || views ? run_fn(ctx, s->fn, s->user, s->n_args, n->in, grads, views) : NULL;
    if (y && !tg_same_shape(y, n->out))
        tg_error(ctx, TG_ERR_STATE, n->op->name, "fn gave a different shape when run again in backward");
    else if (y && y->requires_grad) tg_backward_ex(ctx, y, dy, false); /* into the inputs' and the parameters' grads */
    tg_tape_restore(ctx, &outer);
    autocast_put_back(ctx, &keep);
    tg_rng_set_state(ctx, seed, offset);
}

/* The record's op: a backward that runs fn again; no double-backward or
 * tangent rule (tg_grad with create_graph and tg_jvp stop at it, naming
 * it). */
static const tg_op_def CHECKPOINT = {.name = "checkpoint", .backward = checkpoint_backward};

tg_tensor *tg_checkpoint(tg_ctx *ctx, tg_checkpoint_fn fn, void *user, int n, tg_tensor *const *in) {
    static const char fname[] = "tg_checkpoint";
    if (!tg_ok(ctx)) return NULL;
    if (!fn || (n > 0 && !in) || n < 0) {
        tg_error(ctx, !fn || !in ? TG_ERR_NULL : TG_ERR_VALUE, fname,
                 "fn = %s, n = %d, in = %s: need fn, n >= 0 and %s", fn ? "set" : "NULL", n, in ? "set" : "NULL",
                 "n inputs");
        return NULL;
    }
    for (int i = 0; i < n; i++)
        if (in[i] && !tg_check_arg_any(ctx, fname, "in", in[i])) return NULL;
    if (!tg_grad_enabled(ctx)) return fn(ctx, in, user); /* nothing to record, nothing to keep */

    ckpt_saved s = {.fn = fn, .user = user, .n_args = n};
    tg_rng_state(ctx, &s.seed, &s.offset);
    ckpt_autocast keep;
    if (!autocast_keep(ctx, &keep)) return NULL;
    const tg_arena_pos mark = tg_arena_mark(ctx);
    tg_tensor **views = n ? tg_arena_alloc_fn(ctx, fname, (size_t)n * sizeof *views) : NULL;
    tg_tape outer;
    tg_tape_stash(ctx, &outer);
    tg_tensor *y = !n || views ? run_fn(ctx, fn, user, n, in, NULL, views) : NULL;
    /* the record's inputs: fn's, then what fn's records read that requires
     * grad and no record of fn made (parameters, captured tensors) */
    int total = n, cap = n + 8;
    tg_tensor **all = y ? tg_heap_alloc(ctx, (size_t)cap * sizeof *all) : NULL;
    if (all) memcpy(all, in, (size_t)n * sizeof *all);
    for (int64_t k = 0; all && k < ctx->tape.n_nodes; k++) {
        const tg_node *r = &ctx->tape.nodes[k];
        for (int i = 0; all && i < r->n_in; i++) {
            tg_tensor *t = r->in[i];
            const bool made_here = t && tg_impl(t)->node >= 0 && tg_impl(t)->node < ctx->tape.n_nodes &&
                                   ctx->tape.nodes[tg_impl(t)->node].out == t;
            if (!t || !t->requires_grad || made_here || listed(t, n, views) || listed(t, total, all)) continue;
            if (total == cap) {
                tg_tensor **grown = tg_heap_alloc(ctx, (size_t)(2 * cap) * sizeof *grown);
                if (grown) memcpy(grown, all, (size_t)total * sizeof *grown);
                tg_heap_free(ctx, all);
                all = grown;
                cap *= 2;
                if (!all) break;
            }
            all[total++] = t;
        }
    }
    if (y && !all && tg_ok(ctx)) tg_error(ctx, TG_ERR_OOM, fname, "out of memory for the record's inputs");
    /* y's values across the rewind, through the heap */
    const size_t bytes = y ? (size_t)y->numel * tg_esize(y->dtype) : 0;
    void *carry = y && tg_ok(ctx) ? tg_heap_alloc(ctx, bytes ? bytes : 1) : NULL;
    int ndim = 0;
    int64_t shape[TG_MAX_DIMS] = {0};
    tg_dtype dtype = TG_F32;
    if (carry) {
        memcpy(carry, y->data, bytes);
        ndim = y->ndim, dtype = y->dtype;
        memcpy(shape, y->shape, sizeof shape);
    } else if (y && tg_ok(ctx)) {
        tg_error(ctx, TG_ERR_OOM, fname, "out of memory for fn's output (%zu bytes)", bytes);
    }
    tg_tape_restore(ctx, &outer);
    tg_arena_release(ctx, mark);
    autocast_put_back(ctx, &keep);
    tg_tensor *out = NULL;
    if (carry && tg_ok(ctx) && (out = tg_new_tensor(ctx, fname, dtype, ndim, shape))) {
        memcpy(out->data, carry, bytes);
        tg_node *node = tg_record(ctx, &CHECKPOINT, out, total, all);
        ckpt_saved *kept = node ? tg_node_save(ctx, node, sizeof *kept) : NULL;
        if (kept) {
            *kept = s;
            node->saved = kept;
            /* fn's inputs are kept by pointer (what backward runs fn on) */
            size_t held = 0;
            for (int i = 0; i < n; i++)
                if (in[i] && !in[i]->persistent) held += (size_t)in[i]->numel * tg_esize(in[i]->dtype);
            tg_node_count_saved(ctx, node, held);
        }
    }
    tg_heap_free(ctx, carry);
    tg_heap_free(ctx, all);
    return tg_ok(ctx) ? out : NULL;
}

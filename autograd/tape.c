/* The tape: a Wengert list of op records, and backward.
 *
 * Ops append records in execution order, so the tape is already a
 * topological order of the graph: backward visits the records in reverse and
 * each record's backward adds its contribution to its inputs' gradients.
 * No graph search and no reference counts. Gradients of leaves (tensors the
 * user marked with tg_requires_grad) accumulate across backward calls;
 * gradients of intermediate tensors are rebuilt by every backward, in
 * gradient blocks (tensor/ctx.c) that backward releases as it goes. */
#include "autograd/tape.h"
#include "tensor/profile.h"
#include "tensor/parallel.h"

#include <string.h>

bool tg_needs_grad(const tg_ctx *ctx, int n_in, tg_tensor *const *in) {
    if (!ctx->tape.grad_enabled) return false;
    for (int k = 0; k < n_in; k++)
        if (in[k] && in[k]->requires_grad) return true;
    return false;
}

static bool grow_tape(tg_ctx *ctx, const char *op) {
    int64_t cap = ctx->tape.cap_nodes ? ctx->tape.cap_nodes * 2 : 256;
    tg_node *nodes = tg_heap_alloc(ctx, (size_t)cap * sizeof *nodes);
    if (!nodes) {
        tg_error(ctx, TG_ERR_OOM, op, "out of memory growing the tape to %lld records", (long long)cap);
        return false;
    }
    if (ctx->tape.n_nodes) memcpy(nodes, ctx->tape.nodes, (size_t)ctx->tape.n_nodes * sizeof *nodes);
    tg_heap_free(ctx, ctx->tape.nodes);
    ctx->tape.nodes = nodes;
    ctx->tape.cap_nodes = cap;
    return true;
}

/* tg_record's error for an input k of op that is stale or another
 * context's; returns NULL. */
#if defined(__GNUC__)
__attribute__((noinline, cold))
#endif
static tg_node *
stale_input(tg_ctx *ctx, const char *op, int k, const tg_tensor *t) {
    char what[32];
    snprintf(what, sizeof what, "input %d", k);
    if (!tg_foreign_error(ctx, op, what, t)) tg_stale_error(ctx, op, what, t);
    return NULL;
}

/* tg_record's error for a descriptor it cannot record; returns NULL. */
#if defined(__GNUC__)
__attribute__((noinline, cold))
#endif
static tg_node *
bad_op(tg_ctx *ctx, const tg_op_def *op) {
    tg_error(ctx, TG_ERR_NULL, "tg_record", "the op descriptor %s", op ? "lacks a name or a backward" : "is NULL");
    return NULL;
}

tg_node *tg_record(tg_ctx *ctx, const tg_op_def *op, tg_tensor *out, int n_in, tg_tensor *const *in) {
    if (!tg_ok(ctx) || !out || !tg_needs_grad(ctx, n_in, in)) return NULL;
    if (!op || !op->name || !op->backward) return bad_op(ctx, op);
    if (ctx->tape.consumed) {
        /* A new forward after a backward: start a fresh tape on top. Records
         * of the consumed tape stay (their tensors are alive until reset),
         * but they can no longer be walked. */
        tg_tape_clear(&ctx->tape);
    }
    if (ctx->tape.n_nodes == ctx->tape.cap_nodes && !grow_tape(ctx, op->name)) return NULL;
    /* One arena block: the n_in input pointers, then n_in + 1 versions. */
    size_t nin = (size_t)(n_in > 0 ? n_in : 0);
    tg_tensor **ins = tg_arena_alloc_fn(ctx, op->name, nin * sizeof *ins + (nin + 1) * sizeof(uint32_t));
    if (!ins) return NULL;
    uint32_t *version = (uint32_t *)(ins + nin);
    for (size_t k = 0; k < nin; k++) {
        ins[k] = in[k];
        version[k] = 0;
        if (!in[k]) continue;
        /* every op checks its arguments (tg_check_arg); this catches one
         * that forgot, before a stale or foreign tensor reaches the tape */
        if (!tg_current(ctx, in[k])) return stale_input(ctx, op->name, (int)k, in[k]);
        version[k] = tg_version(in[k]);
    }
    version[nin] = tg_version(out);
    tg_node *n = &ctx->tape.nodes[ctx->tape.n_nodes];
    *n = (tg_node){.op = op, .backward = op->backward, .out = out, .in = ins, .n_in = n_in, .version = version};
    out->requires_grad = true;
    tg_impl(out)->node = (int32_t)ctx->tape.n_nodes;
    out->grad = NULL;
    ctx->tape.n_nodes++;
    tg_profile_forward(ctx, op->name);
    return n;
}

void *tg_node_save(tg_ctx *ctx, tg_node *node, size_t bytes) {
    void *p = tg_arena_alloc_fn(ctx, node->op->name, bytes);
    if (!p) return NULL;
    node->saved = p;
    node->saved_bytes += bytes;
    ctx->tape.saved_bytes += bytes;
    return p;
}

void tg_node_count_saved(tg_ctx *ctx, tg_node *node, size_t bytes) {
    node->saved_bytes += bytes;
    ctx->tape.saved_bytes += bytes;
}

tg_tensor *tg_grad_of(tg_ctx *ctx, tg_tensor *t) {
    if (!t || !t->requires_grad || !tg_ok(ctx)) return NULL;
    if (!t->grad) {
        t->grad = tg_grad_block(ctx, "tg_grad_of", t);
        if (!t->grad) return NULL;
    }
    tg_written(t->grad); /* the caller adds into it */
    return t->grad;
}

int64_t tg_tape_size(const tg_ctx *ctx) { return ctx ? ctx->tape.n_nodes : 0; }
size_t tg_tape_saved_bytes(const tg_ctx *ctx) { return ctx ? ctx->tape.saved_bytes : 0; }

void tg_tape_stash(tg_ctx *ctx, tg_tape *saved) {
    *saved = ctx->tape;
    ctx->tape = tg_tape_empty();
    ctx->tape.grad_enabled = saved->grad_enabled;
}

void tg_tape_restore(tg_ctx *ctx, tg_tape *saved) {
    tg_tape_free(ctx, &ctx->tape);
    ctx->tape = *saved;
}

/* ---- leaves, modes ------------------------------------------------------- */

tg_tensor *tg_requires_grad(tg_ctx *ctx, tg_tensor *t) {
    if (!tg_check_arg_any(ctx, __func__, "t", t)) return NULL;
    if (tg_impl(t)->node >= 0) {
        char s[TG_SHAPE_STR];
        tg_error(ctx, TG_ERR_STATE, __func__,
                 "tensor of shape %s was made by an op ('%s'), not a leaf; detach it first", tg_shape_of(s, t),
                 tg_impl(t)->node < ctx->tape.n_nodes ? ctx->tape.nodes[tg_impl(t)->node].op->name : "?");
        return NULL;
    }
    t->requires_grad = true;
    if (t->grad) return t;
    if (t->persistent) {
        if (!tg_persistent_make_grad(ctx, t)) {
            tg_error(ctx, TG_ERR_OOM, __func__, "out of memory for the grad");
            return NULL;
        }
    } else {
        t->grad = tg_zeros(ctx, t->dtype, t->ndim, t->shape);
        if (!t->grad) return NULL;
    }
    return t;
}

bool tg_set_grad_enabled(tg_ctx *ctx, bool enabled) {
    if (!ctx) return false;
    bool was = ctx->tape.grad_enabled;
    ctx->tape.grad_enabled = enabled;
    return was;
}

bool tg_grad_enabled(const tg_ctx *ctx) { return ctx && ctx->tape.grad_enabled; }

void tg_zero_grad(tg_ctx *ctx, tg_tensor *t) {
    if (!tg_check_arg_any(ctx, "tg_zero_grad", "t", t) || !t->grad) return;
    tg_parallel_zero(tg_threads(ctx), t->grad->data, (size_t)t->grad->numel * tg_esize(t->grad->dtype));
    tg_written(t->grad);
}

tg_tensor *tg_detach(tg_ctx *ctx, tg_tensor *t) {
    if (!tg_check_arg_any(ctx, "tg_detach", "t", t)) return NULL;
    tg_tensor *d = tg_view(ctx, t, t->ndim, t->shape);
    if (d) {
        d->requires_grad = false;
        d->grad = NULL;
        tg_impl(d)->node = -1;
    }
    return d;
}

/* ---- backward ------------------------------------------------------------ */

void tg_backward(tg_ctx *ctx, tg_tensor *loss) { tg_backward_ex(ctx, loss, NULL, false); }

/* True when g's data overlaps the grad of an input of records 0..top (the
 * gradients a backward over them adds into; intermediate grads are made
 * fresh during the walk and cannot overlap a tensor the caller holds). */
static bool seed_aliases_a_grad(const tg_ctx *ctx, const tg_tensor *g, int64_t top) {
    const char *g0 = g->data, *g1 = g0 + (size_t)g->numel * tg_esize(g->dtype);
    for (int64_t k = 0; k <= top; k++) {
        const tg_node *n = &ctx->tape.nodes[k];
        for (int i = 0; i < n->n_in; i++) {
            const tg_tensor *t = n->in[i] ? n->in[i]->grad : NULL;
            if (!t || !t->data) continue;
            const char *t0 = t->data, *t1 = t0 + (size_t)t->numel * tg_esize(t->dtype);
            if (t0 < g1 && g0 < t1) return true;
        }
    }
    return false;
}

/* True when the tensors record n reads hold what its op saw: no input and
 * not the output was written in place since the op ran (its version is the
 * recorded one). An input changed in place would make the backward use
 * values the forward never saw (q = sum(x*x), then tg_fill(x, 100): dq/dx
 * would come out as 200). (They are all of this step: a reset empties the
 * tape, and tg_record refuses stale tensors.) */
static inline bool record_intact(const tg_node *n) {
    for (int k = 0; k < n->n_in; k++)
        if (n->in[k] && tg_version(n->in[k]) != n->version[k]) return false;
    for (int k = 0; k < n->n_saved_t; k++)
        if (tg_version(n->saved_t[k]) != n->saved_version[k]) return false;
    return tg_version(n->out) == n->version[n->n_in];
}

/* The error of a record that is not intact, naming the op and the tensor. */
#if defined(__GNUC__)
__attribute__((noinline, cold))
#endif
static void
record_error(tg_ctx *ctx, const char *fn, const tg_node *n) {
    for (int k = 0; k <= n->n_in + n->n_saved_t; k++) {
        const tg_tensor *t = k < n->n_in ? n->in[k] : k == n->n_in ? n->out : n->saved_t[k - n->n_in - 1];
        uint32_t v = k <= n->n_in ? n->version[k] : n->saved_version[k - n->n_in - 1];
        if (!t || tg_version(t) == v) continue;
        char what[32], s[TG_SHAPE_STR];
        if (k < n->n_in) snprintf(what, sizeof what, "input %d", k);
        else if (k == n->n_in) snprintf(what, sizeof what, "the output");
        else snprintf(what, sizeof what, "saved tensor %d", k - n->n_in - 1);
        tg_error(ctx, TG_ERR_STATE, fn,
                 "%s %s of '%s' was modified in place (version %u, recorded at %u) after the op used it: its "
                 "backward needs the values the op saw (change a tensor before the forward, or change a tg_copy "
                 "of it)",
                 what, tg_shape_of(s, t), n->op->name, tg_version(t), v);
        return;
    }
}

/* After record n's backward left the context in error: unless the message
 * already names the op (tg_node_error's does), say whose backward it was --
 * a custom op's backward may fail inside a tapegrad call that names only
 * itself ("tg_mul: shapes (2, 3) and (4,) ..."). */
#if defined(__GNUC__)
__attribute__((noinline, cold))
#endif
static void
backward_failed(tg_ctx *ctx, const tg_node *n) {
    if (!ctx || strstr(ctx->message, n->op->name)) return;
    size_t len = strlen(ctx->message);
    snprintf(ctx->message + len, sizeof ctx->message - len, " (in the backward of '%s')", n->op->name);
}

/* After record n's backward, when the tape is not kept: nothing reads what
 * it allocated in the arena (gradients come from gradient blocks, not the
 * arena: the rest is its scratch), and nothing reads its output's gradient
 * any more -- the records that made that gradient (the output's consumers)
 * come later on the tape, so the walk has run them all, and n was its only
 * reader. Giving both back lets the next records reuse the memory: a
 * backward then holds the gradients live at one point of the walk, not one
 * per intermediate. The seed stays (the caller's, or out's visible grad).
 * (A backward that records its gradients -- create_graph -- keeps both.) */
static void release_after(tg_ctx *ctx, tg_node *n, tg_arena_pos scratch, const tg_tensor *seed) {
    tg_arena_release(ctx, scratch);
    if (n->out->grad == seed) return;
    if (tg_grad_release(ctx, n->out->grad)) n->out->grad = NULL;
}

void tg_backward_ex(tg_ctx *ctx, tg_tensor *out, const tg_tensor *grad_out, bool keep_tape) {
    static const char fn[] = "tg_backward";
    if (!tg_check_arg_any(ctx, fn, "out", out)) return;
    if (grad_out && !tg_check_arg_any(ctx, fn, "grad_out", grad_out)) return;
    char s1[TG_SHAPE_STR], s2[TG_SHAPE_STR];
    if (!out->requires_grad) {
        tg_error(ctx, TG_ERR_STATE, fn,
                 "output of shape %s does not require grad (no input required grad, "
                 "or grad mode was off)",
                 tg_shape_of(s1, out));
        return;
    }
    if (grad_out) {
        if (!tg_check_same_dtype(ctx, fn, out, grad_out)) return;
        if (!tg_same_shape(out, grad_out)) {
            tg_error(ctx, TG_ERR_SHAPE, fn, "gradient of shape %s does not match output of shape %s",
                     tg_shape_of(s1, grad_out), tg_shape_of(s2, out));
            return;
        }
    } else if (out->numel != 1) {
        tg_error(ctx, TG_ERR_SHAPE, fn, "output of shape %s is not a scalar: pass its gradient to tg_backward_ex",
                 tg_shape_of(s1, out));
        return;
    }
    int64_t top = tg_impl(out)->node;
    if (top >= 0 && (ctx->tape.consumed || top >= ctx->tape.n_nodes || ctx->tape.nodes[top].out != out)) {
        tg_error(ctx, TG_ERR_STATE, fn,
                 "the tape was already consumed by a backward; pass keep_tape=true to "
                 "tg_backward_ex to run backward twice");
        return;
    }

    /* Leaf output: its gradient is the seed itself. */
    if (top < 0) {
        tg_tensor *g = tg_grad_of(ctx, out);
        if (!g) return;
        for (int64_t i = 0; i < g->numel; i++) tg_store(g, i, tg_load(g, i) + (grad_out ? tg_load(grad_out, i) : 1.0));
        return;
    }

    /* Intermediate gradients start from nothing on every backward. */
    for (int64_t k = 0; k <= top; k++) ctx->tape.nodes[k].out->grad = NULL;

    /* The seed: grad_out itself, read-only like every out->grad (backward
     * functions only read their output's gradient and add into their
     * inputs'), so no copy of a possibly big gradient is made -- unless
     * grad_out shares memory with a gradient this backward adds into (a
     * leaf's grad passed as grad_out), which must not change under it. */
    tg_tensor *seed = NULL;
    if (grad_out && !seed_aliases_a_grad(ctx, grad_out, top)) seed = (tg_tensor *)grad_out;
    else seed = grad_out ? tg_copy(ctx, grad_out) : tg_ones(ctx, out->dtype, out->ndim, out->shape);
    if (!seed) return;
    out->grad = seed;

    /* Backward functions run with grad mode off: one that computes its
     * gradients with ops (a custom op's, tapegrad/op.h) must not record
     * onto the tape being walked. */
    bool was = ctx->tape.grad_enabled, intact = true;
    ctx->tape.grad_enabled = false;
    tg_profile_walk_begin(ctx);
    for (int64_t k = top; k >= 0 && tg_ok(ctx); k--) {
        tg_node *n = &ctx->tape.nodes[k];
        if (!n->out->grad) continue; /* no gradient flows through this record */
        if (!record_intact(n)) {
            record_error(ctx, fn, n);
            intact = false;
            break;
        }
        tg_arena_pos scratch = tg_arena_mark(ctx);
        double t0 = ctx->profile ? tg_profile_now() : 0;
        n->backward(ctx, n);
        if (ctx->profile) tg_profile_backward(ctx, n->op->name, tg_profile_now() - t0);
        if (!tg_ok(ctx)) backward_failed(ctx, n);
        else if (!keep_tape) release_after(ctx, n, scratch, seed);
        if (ctx->tape.walked) ctx->tape.walked(ctx, k, ctx->tape.walked_user);
    }
    tg_profile_walk_end(ctx);
    ctx->tape.grad_enabled = was;
    if (!keep_tape && intact) ctx->tape.consumed = true;
}

bool tg_record_check(tg_ctx *ctx, const char *fn, const tg_node *n) {
    if (record_intact(n)) return true;
    record_error(ctx, fn, n);
    return false;
}

void tg_record_failed(tg_ctx *ctx, const tg_node *n) { backward_failed(ctx, n); }

bool tg_tape_holds(const tg_ctx *ctx, const tg_tensor *t) {
    const int64_t k = tg_impl(t)->node;
    return k >= 0 && !ctx->tape.consumed && k < ctx->tape.n_nodes && ctx->tape.nodes[k].out == t;
}

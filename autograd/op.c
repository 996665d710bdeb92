/* User-defined ops (include/tapegrad/op.h): tg_op_apply, and what a custom
 * forward and backward call to read and fill their record.
 *
 * A custom op is recorded exactly as a built-in one (tg_record, in
 * autograd/tape.c): same record, same version checks, same walk. The only
 * additions are the saved-tensor list (checked against in-place writes like
 * the inputs) and the guards a learner's code needs: a gradient of the
 * wrong shape, a forward that returns its input, an error inside the op's
 * code -- each reported with the op's name. */
#include <stdarg.h>
#include <string.h>

#include "autograd/tape.h"

/* Appends " (in the forward of 'op')" to the context's message unless it
 * already names the op: a forward that failed inside a tapegrad call. */
static void name_the_op(tg_ctx *ctx, const char *op, const char *where) {
    if (strstr(ctx->message, op)) return;
    size_t len = strlen(ctx->message);
    snprintf(ctx->message + len, sizeof ctx->message - len, " (in the %s of '%s')", where, op);
}

/* True when t is one of the node's inputs or its output (same data). */
static bool kept_by_pointer(const tg_node *node, const tg_tensor *t) {
    if (node->out && tg_root(node->out) == tg_root(t)) return true;
    for (int k = 0; k < node->n_in; k++)
        if (node->in[k] && tg_root(node->in[k]) == tg_root(t)) return true;
    return false;
}

/* ---- guards after the gradients a custom backward writes -------------------
 * A learner's backward may fill an input's gradient through its raw pointer
 * (tg_grad_of(ctx, x)->data) and run past its last element: an overrun
 * into whatever the arena put next, caught only under a sanitizer, or a
 * crash. So while a custom op's backward runs, each input that needs a
 * gradient has one followed by GUARD_BYTES of a pattern (the arena block
 * is that much longer than the tensor says) -- a guarded copy of the
 * gradient it has (a leaf's, or one a later op gave it), or guarded zeros
 * -- and after the backward the pattern is compared: a changed byte is an
 * error naming the op and the input. Then the copy's values go back into
 * the input's own gradient (counted as a write when the backward wrote),
 * and guarded zeros the backward never asked for (tg_grad_of,
 * tg_node_accumulate) are taken back, so the walk sees what it would have
 * seen without the guard. The price: one copy of each gradient in and out
 * per custom record, next to a backward that reads and writes it anyway. */
#define GUARD_BYTES 64
#define GUARD_BYTE 0xA5
#define GUARD_INPUTS 8 /* tg_op_apply takes 1..8 inputs */

/* A tensor of t's shape and dtype holding `from`'s values (zeros when
 * NULL), followed by GUARD_BYTES of the pattern. */
static tg_tensor *guarded_like(tg_ctx *ctx, const tg_node *n, const tg_tensor *t, const tg_tensor *from) {
    size_t es = tg_esize(t->dtype);
    int64_t len = t->numel + (int64_t)((GUARD_BYTES + es - 1) / es);
    tg_tensor *g = tg_new_tensor(ctx, n->op->name, t->dtype, 1, &len);
    if (!g) return NULL;
    if (from) memcpy(g->data, from->data, (size_t)t->numel * es);
    else memset(g->data, 0, (size_t)t->numel * es);
    memset((unsigned char *)g->data + (size_t)t->numel * es, GUARD_BYTE, GUARD_BYTES);
    g->ndim = t->ndim;
    memcpy(g->shape, t->shape, sizeof g->shape);
    g->numel = t->numel;
    return g;
}

static void guarded_backward(tg_ctx *ctx, tg_node *n) {
    tg_tensor *made[GUARD_INPUTS] = {0}, *own[GUARD_INPUTS] = {0};
    uint32_t version[GUARD_INPUTS] = {0};
    for (int k = 0; k < n->n_in && k < GUARD_INPUTS; k++) {
        tg_tensor *x = n->in[k];
        bool seen = false; /* the same tensor as an earlier input */
        for (int j = 0; j < k; j++) seen |= made[j] && x && x->grad == made[j];
        if (!x || !x->requires_grad || seen) continue;
        own[k] = x->grad;
        /* a gradient of another shape (a user's assignment) is left alone:
         * tg_node_accumulate refuses it with its own message */
        if (own[k] && (own[k]->numel != x->numel || own[k]->dtype != x->dtype)) continue;
        if (!(made[k] = guarded_like(ctx, n, x, own[k]))) return;
        x->grad = made[k];
        version[k] = tg_impl(made[k])->version;
    }
    n->op->backward(ctx, n);
    for (int k = 0; k < n->n_in && k < GUARD_INPUTS; k++) {
        tg_tensor *g = made[k], *x = n->in[k];
        if (!g) continue;
        const unsigned char *guard = (const unsigned char *)g->data + (size_t)g->numel * tg_esize(g->dtype);
        int64_t first = -1, changed = 0;
        for (int64_t b = 0; b < GUARD_BYTES; b++)
            if (guard[b] != GUARD_BYTE) changed++, first = first < 0 ? b : first;
        if (x->grad == g) x->grad = own[k];
        if (changed) {
            char s[TG_SHAPE_STR];
            tg_clear_error(ctx); /* the overrun comes first, whatever followed it */
            tg_error(ctx, TG_ERR_STATE, "tg_backward",
                     "backward of '%s' wrote past the gradient of input %d (shape %s, %lld elements): %lld of the "
                     "%d guard bytes after its last element changed (the first at byte %lld past the end); write only "
                     "elements 0..%lld (or add with tg_node_accumulate)",
                     n->op->name, k, tg_shape_of(s, g), (long long)g->numel, (long long)changed, GUARD_BYTES,
                     (long long)first, (long long)g->numel - 1);
            continue;
        }
        if (x->grad != own[k] || tg_impl(g)->version == version[k]) continue; /* replaced, or never handed out */
        /* g is scratch: the walk gives the record's arena back after it,
         * so a new gradient goes into a gradient block, as tg_grad_of
         * would have made it */
        tg_tensor *dst = own[k] ? own[k] : tg_grad_of(ctx, x);
        if (!dst) return;
        memcpy(dst->data, g->data, (size_t)g->numel * tg_esize(g->dtype));
        tg_written(dst);
    }
}

tg_tensor *tg_op_apply(tg_ctx *ctx, const tg_op_def *def, int n_in, tg_tensor *const *in, void *user) {
    static const char fn[] = "tg_op_apply";
    if (!tg_ok(ctx)) return NULL;
    if (!def || !def->name || !def->forward || !def->backward) {
        tg_error(ctx, TG_ERR_NULL, fn, "the op definition %s", !def ? "is NULL" : "lacks a name, forward or backward");
        return NULL;
    }
    if (n_in < 1 || n_in > 8 || !in) {
        tg_error(ctx, TG_ERR_VALUE, def->name, "%s: n_in = %d must be 1..8 with an input array", fn, n_in);
        return NULL;
    }
    for (int k = 0; k < n_in; k++) {
        char what[24];
        snprintf(what, sizeof what, "input %d", k);
        if (in[k] && !tg_check_arg(ctx, def->name, what, in[k])) return NULL;
    }
    /* The forward fills a record that is not on the tape yet: saves and
     * scalars land here, and move to the real record below. */
    tg_node pending = {.op = def, .backward = def->backward, .in = (tg_tensor **)in, .n_in = n_in};
    bool was = tg_set_grad_enabled(ctx, false);
    tg_tensor *y = def->forward(ctx, &pending, in, user);
    tg_set_grad_enabled(ctx, was);
    if (!tg_ok(ctx)) {
        name_the_op(ctx, def->name, "forward");
        return NULL;
    }
    if (!y) {
        tg_error(ctx, TG_ERR_STATE, def->name, "the forward returned NULL without setting an error");
        return NULL;
    }
    if (!tg_check_arg(ctx, def->name, "the forward's output", y)) return NULL;
    for (int k = 0; k < n_in; k++)
        if (y == in[k]) {
            tg_error(ctx, TG_ERR_STATE, def->name,
                     "the forward returned its input %d itself; return a new tensor (tg_copy of it)", k);
            return NULL;
        }
    /* the record points to a copy of *def that lives as long as the tape
     * (the arena's step): def itself may be a local of the caller's */
    tg_op_def *op = NULL;
    if (tg_needs_grad(ctx, n_in, in) && (op = tg_arena_alloc_fn(ctx, def->name, sizeof *op))) *op = *def;
    tg_node *n = op ? tg_record(ctx, op, y, n_in, in) : NULL;
    if (!n) return tg_ok(ctx) ? y : NULL;
    n->backward = guarded_backward; /* which runs def->backward */
    memcpy(n->f, pending.f, sizeof n->f);
    n->saved_t = pending.saved_t;
    n->saved_version = pending.saved_version;
    n->n_saved_t = pending.n_saved_t;
    for (int k = 0; k < n->n_saved_t; k++) {
        tg_tensor *t = n->saved_t[k];
        n->saved_version[k] = tg_version(t); /* as the forward left it */
        if (!kept_by_pointer(n, t)) tg_node_count_saved(ctx, n, (size_t)t->numel * tg_esize(t->dtype));
    }
    return y;
}

const char *tg_node_name(const tg_node *node) { return node ? node->op->name : NULL; }
int tg_node_n_inputs(const tg_node *node) { return node ? node->n_in : 0; }
tg_tensor *tg_node_input(const tg_node *node, int k) { return node && k >= 0 && k < node->n_in ? node->in[k] : NULL; }
tg_tensor *tg_node_output(const tg_node *node) { return node ? node->out : NULL; }
tg_tensor *tg_node_grad_output(const tg_node *node) { return node && node->out ? node->out->grad : NULL; }
int tg_node_n_saved(const tg_node *node) { return node ? node->n_saved_t : 0; }

tg_tensor *tg_node_saved_tensor(const tg_node *node, int k) {
    return node && k >= 0 && k < node->n_saved_t ? node->saved_t[k] : NULL;
}

bool tg_node_save_tensor(tg_ctx *ctx, tg_node *node, tg_tensor *t) {
    if (!tg_ok(ctx)) return false;
    if (!node) {
        tg_null_error(ctx, __func__, "node");
        return false;
    }
    if (!tg_check_arg(ctx, node->op->name, "the saved tensor", t)) return false;
    if (node->n_saved_t >= TG_NODE_MAX_SAVED) {
        tg_error(ctx, TG_ERR_VALUE, node->op->name, "%s: more than %d saved tensors", __func__, TG_NODE_MAX_SAVED);
        return false;
    }
    if (!node->saved_t) {
        node->saved_t = tg_arena_alloc_fn(ctx, node->op->name,
                                          TG_NODE_MAX_SAVED * (sizeof *node->saved_t + sizeof *node->saved_version));
        if (!node->saved_t) return false;
        node->saved_version = (uint32_t *)(node->saved_t + TG_NODE_MAX_SAVED);
    }
    node->saved_t[node->n_saved_t] = t;
    node->saved_version[node->n_saved_t] = tg_version(t);
    node->n_saved_t++;
    /* a record already on the tape (the caller used tg_record itself)
     * counts the bytes now; tg_op_apply counts a pending one's */
    if (node->version && !kept_by_pointer(node, t))
        tg_node_count_saved(ctx, node, (size_t)t->numel * tg_esize(t->dtype));
    return true;
}

bool tg_node_set_scalar(tg_ctx *ctx, tg_node *node, int k, double v) {
    if (!tg_ok(ctx)) return false;
    if (!node || k < 0 || k >= TG_NODE_MAX_SCALARS) {
        tg_error(ctx, node ? TG_ERR_INDEX : TG_ERR_NULL, node ? node->op->name : __func__,
                 "%s: scalar slot %d is outside 0..%d", __func__, k, TG_NODE_MAX_SCALARS - 1);
        return false;
    }
    node->f[k] = v;
    return true;
}

double tg_node_scalar(const tg_node *node, int k) {
    return node && k >= 0 && k < TG_NODE_MAX_SCALARS ? node->f[k] : 0.0;
}

bool tg_node_needs_grad(const tg_node *node, int k) {
    return node && k >= 0 && k < node->n_in && node->in[k] && node->in[k]->requires_grad;
}

bool tg_node_accumulate(tg_ctx *ctx, tg_node *node, int k, const tg_tensor *g) {
    static const char fn[] = "tg_node_accumulate";
    if (!tg_ok(ctx)) return false;
    if (!node) {
        tg_null_error(ctx, fn, "node");
        return false;
    }
    if (k < 0 || k >= node->n_in) {
        tg_error(ctx, TG_ERR_INDEX, node->op->name, "%s: input %d is outside 0..%d", fn, k, node->n_in - 1);
        return false;
    }
    if (!tg_node_needs_grad(node, k)) return true;
    char what[40];
    snprintf(what, sizeof what, "the gradient of input %d", k);
    if (!tg_check_arg(ctx, node->op->name, what, g)) return false;
    const tg_tensor *x = node->in[k];
    if (g->dtype != x->dtype || !tg_same_shape(g, x)) {
        char sg[TG_SHAPE_STR], sx[TG_SHAPE_STR];
        tg_error(ctx, TG_ERR_SHAPE, node->op->name,
                 "the backward's gradient of input %d is a %s %s tensor, but the input is %s %s: a gradient has "
                 "its input's shape and dtype",
                 k, tg_shape_of(sg, g), tg_dtype_name(g->dtype), tg_shape_of(sx, x), tg_dtype_name(x->dtype));
        return false;
    }
    tg_tensor *d = tg_grad_of(ctx, node->in[k]);
    if (!d) return false;
    if (d->dtype == TG_F64) {
        double *dd = d->data;
        const double *gd = g->data;
        for (int64_t i = 0; i < d->numel; i++) dd[i] += gd[i];
    } else {
        float *dd = d->data;
        const float *gd = g->data;
        for (int64_t i = 0; i < d->numel; i++) dd[i] += gd[i];
    }
    return true;
}

void tg_node_error(tg_ctx *ctx, const tg_node *node, const char *fmt, ...) {
    if (!tg_ok(ctx)) return;
    char buf[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt ? fmt : "(no message)", ap);
    va_end(ap);
    tg_error(ctx, TG_ERR_VALUE, node ? node->op->name : "tg_node_error", "%s", buf);
}

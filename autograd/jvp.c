/* Forward mode: tg_jvp, and the float64 helpers of the tangent rules.
 *
 * The tape is a Wengert list in execution order, so the tangents flow in
 * that order: record k's output tangent needs only the tangents of its
 * inputs, made by records before it (or given: the inputs of tg_jvp).
 * Where backward walks the tape in reverse applying J^T, tg_jvp walks it
 * forward applying J, rule by rule:
 *   t(out_k) = sum_i (d out_k / d in_i) t(in_i)
 * A record none of whose inputs carries a tangent is skipped (its tangent
 * is zero). A record's rule is its op's: the jvp of the descriptor it
 * points to (tapegrad/op.h), written beside the op's backward
 * (autograd/ops_*.c, layers/). Each rule is written from the op's
 * forward, not from its backward, so comparing the two (the adjoint test
 * of tapegrad::check, <u, J v> = <J^T u, v>) tests one against the
 * other. */
#include "autograd/jvp.h"

#include <math.h>
#include <string.h>

/* ---- float64 views ---------------------------------------------------------- */

double *tg_jvp_values(tg_ctx *ctx, const tg_tensor *t) {
    double *v = tg_arena_alloc_fn(ctx, "tg_jvp", (size_t)(t->numel > 0 ? t->numel : 1) * sizeof *v);
    for (int64_t i = 0; v && i < t->numel; i++) v[i] = tg_load(t, i);
    return v;
}

tg_tensor *tg_jvp_tensor(tg_ctx *ctx, const tg_tensor *like, const double *v) {
    tg_tensor *t = tg_new_like(ctx, "tg_jvp", like);
    for (int64_t i = 0; t && i < t->numel; i++) tg_store(t, i, v[i]);
    return t;
}

/* ---- tg_jvp ------------------------------------------------------------------- */

/* The tangent of tensor x as record k sees it: given (an input of tg_jvp),
 * made by an earlier record, or none (NULL: a constant). */
static tg_tensor *tangent_of(const tg_ctx *ctx, tg_tensor *x, int64_t k, tg_tensor *const *tan, int n,
                             tg_tensor *const *inputs, tg_tensor *const *tangents) {
    if (!x) return NULL;
    for (int j = 0; j < n; j++)
        if (x == inputs[j]) return tangents[j];
    int64_t m = tg_impl(x)->node;
    return m >= 0 && m < k && ctx->tape.nodes[m].out == x ? tan[m] : NULL;
}

static bool jvp_check_args(tg_ctx *ctx, const char *fn, tg_tensor *out, int n, tg_tensor *const *inputs,
                           tg_tensor *const *tangents) {
    if (!tg_check_arg(ctx, fn, "out", out)) return false;
    if (n < 1 || !inputs || !tangents) {
        tg_error(ctx, TG_ERR_VALUE, fn, "n = %d inputs: need at least 1, with the inputs and tangents arrays", n);
        return false;
    }
    char s1[TG_SHAPE_STR], s2[TG_SHAPE_STR];
    for (int j = 0; j < n; j++) {
        char what[32];
        snprintf(what, sizeof what, "inputs[%d]", j);
        if (!tg_check_arg(ctx, fn, what, inputs[j])) return false;
        snprintf(what, sizeof what, "tangents[%d]", j);
        if (!tg_check_arg(ctx, fn, what, tangents[j])) return false;
        if (!inputs[j]->requires_grad) {
            tg_error(ctx, TG_ERR_STATE, fn,
                     "inputs[%d] of shape %s does not require grad: the forward recorded nothing for it "
                     "(tg_requires_grad it before the forward)",
                     j, tg_shape_of(s1, inputs[j]));
            return false;
        }
        if (!tg_check_same_dtype(ctx, fn, inputs[j], tangents[j])) return false;
        if (!tg_same_shape(inputs[j], tangents[j])) {
            tg_error(ctx, TG_ERR_SHAPE, fn, "tangents[%d] of shape %s does not match inputs[%d] of shape %s", j,
                     tg_shape_of(s1, tangents[j]), j, tg_shape_of(s2, inputs[j]));
            return false;
        }
    }
    int64_t top = tg_impl(out)->node;
    if (top >= 0 && (ctx->tape.consumed || top >= ctx->tape.n_nodes || ctx->tape.nodes[top].out != out)) {
        tg_error(ctx, TG_ERR_STATE, fn,
                 "out of shape %s is not on the live tape (a backward consumed it: pass keep_tape=true to "
                 "tg_backward_ex, or run tg_jvp before it)",
                 tg_shape_of(s1, out));
        return false;
    }
    return true;
}

/* Runs record n's rule on its input tangents (zeros for inputs without
 * one) and checks what it returns. */
static tg_tensor *run_rule(tg_ctx *ctx, const char *fn, tg_node *n, tg_tensor **tin) {
    tg_jvp_rule rule = n->op->jvp;
    if (!rule) {
        tg_error(ctx, TG_ERR_STATE, fn, "op '%s' has no tangent rule (forward mode): its tg_op_def has no jvp",
                 n->op->name);
        return NULL;
    }
    for (int i = 0; i < n->n_in; i++)
        if (!tin[i] && n->in[i]) tin[i] = tg_zeros(ctx, n->in[i]->dtype, n->in[i]->ndim, n->in[i]->shape);
    if (!tg_ok(ctx)) return NULL;
    tg_tensor *t = rule(ctx, n, tin);
    if (!tg_ok(ctx)) {
        size_t len = strlen(ctx->message);
        if (!strstr(ctx->message, n->op->name))
            snprintf(ctx->message + len, sizeof ctx->message - len, " (in the tangent rule of '%s')", n->op->name);
        return NULL;
    }
    if (!t || t->dtype != n->out->dtype || !tg_same_shape(t, n->out)) {
        char s1[TG_SHAPE_STR], s2[TG_SHAPE_STR];
        tg_error(ctx, TG_ERR_SHAPE, fn, "the tangent rule of '%s' returned %s %s for an output of %s %s", n->op->name,
                 t ? tg_dtype_name(t->dtype) : "NULL", t ? tg_shape_of(s1, t) : "", tg_dtype_name(n->out->dtype),
                 tg_shape_of(s2, n->out));
        return NULL;
    }
    return t;
}

tg_tensor *tg_jvp(tg_ctx *ctx, tg_tensor *out, int n, tg_tensor *const *inputs, tg_tensor *const *tangents) {
    static const char fn[] = "tg_jvp";
    if (!tg_ok(ctx) || !jvp_check_args(ctx, fn, out, n, inputs, tangents)) return NULL;
    const int64_t top = tg_impl(out)->node;
    if (top < 0) { /* out is a leaf: one of the inputs, or a constant */
        for (int j = 0; j < n; j++)
            if (inputs[j] == out) return tg_copy(ctx, tangents[j]);
        return tg_zeros(ctx, out->dtype, out->ndim, out->shape);
    }
    tg_tensor **tan = tg_arena_alloc_fn(ctx, fn, (size_t)(top + 1) * sizeof *tan);
    if (!tan) return NULL;
    /* Rules use ops: with grad mode off they record nothing on the tape
     * being walked. */
    bool was = tg_set_grad_enabled(ctx, false);
    for (int64_t k = 0; k <= top && tg_ok(ctx); k++) {
        tg_node *nd = &ctx->tape.nodes[k];
        tan[k] = NULL;
        tg_tensor **tin = tg_arena_alloc_fn(ctx, fn, (size_t)(nd->n_in > 0 ? nd->n_in : 1) * sizeof *tin);
        if (!tin) break;
        bool any = false;
        for (int i = 0; i < nd->n_in; i++) {
            tin[i] = tangent_of(ctx, nd->in[i], k, tan, n, inputs, tangents);
            any = any || tin[i];
        }
        /* a record changed in place since the forward: the tangent would
         * use values the forward never saw (as backward, an error) */
        if (any && tg_record_check(ctx, fn, nd)) tan[k] = run_rule(ctx, fn, nd, tin);
    }
    tg_set_grad_enabled(ctx, was);
    if (!tg_ok(ctx)) return NULL;
    return tan[top] ? tan[top] : tg_zeros(ctx, out->dtype, out->ndim, out->shape);
}

/* Gradients as tensors: tg_grad (torch.autograd.grad), its create_graph
 * walk, and tg_hvp (Hessian-vector products, reverse over reverse).
 *
 * The walk is tg_backward_ex's (autograd/tape.c), over the records
 * floor..top in reverse, with two differences:
 *  - leaves keep their grad: the grad fields of the tensors the walk treats
 *    as leaves (made before `floor`, or by no op) are set aside, the walk
 *    accumulates into fresh ones, and the old ones are put back after the
 *    results are read;
 *  - under create_graph, grad mode is on and each record's gradient comes
 *    from its grad-graph rule (autograd/grad_graph.h): differentiable ops
 *    appended to the tape after the records being walked. The Wengert list
 *    stays a topological order (a rule's ops read only tensors made before
 *    them), so a later backward over the whole tape differentiates the
 *    gradients: second derivatives. Contributions are added with tg_add
 *    (never in place: a gradient may be an input of a recorded op).
 * tg_backward_ex itself is untouched: create_graph off costs nothing. */
#include "autograd/grad_graph.h"

#include <string.h>

/* ---- the rules' helpers (grad_graph.h) ------------------------------------ */

tg_tensor *tg_gg_sum_to(tg_ctx *ctx, tg_tensor *g, const tg_tensor *x) {
    if (!g || tg_same_shape(g, x)) return g;
    tg_tensor *r = g;
    while (r && r->ndim > x->ndim) r = tg_sum_axis(ctx, r, 0, false);
    for (int d = 0; r && d < x->ndim; d++)
        if (x->shape[d] == 1 && r->shape[d] != 1) r = tg_sum_axis(ctx, r, d, true);
    return r;
}

tg_tensor *tg_gg_expand(tg_ctx *ctx, tg_tensor *g, const tg_tensor *x) {
    if (!g || tg_same_shape(g, x)) return g;
    return tg_add(ctx, g, tg_zeros(ctx, x->dtype, x->ndim, x->shape));
}

tg_tensor *tg_gg_const(tg_ctx *ctx, const tg_tensor *x, double (*f)(double, double), double a) {
    tg_tensor *c = tg_new_tensor(ctx, "tg_grad", x->dtype, x->ndim, x->shape);
    if (!c) return NULL;
    for (int64_t i = 0; i < x->numel; i++) tg_store(c, i, f(tg_load(x, i), a));
    return c;
}

/* ---- the walk ---------------------------------------------------------------- */

/* A tensor whose grad field the walk borrows, and what it held. */
typedef struct stashed {
    tg_tensor *t;
    tg_tensor *grad;
} stashed;

typedef struct stash {
    stashed *v;
    int64_t n, cap;
} stash;

static bool stash_add(tg_ctx *ctx, const char *fn, stash *s, tg_tensor *t) {
    for (int64_t i = 0; i < s->n; i++)
        if (s->v[i].t == t) return true;
    if (s->n == s->cap) {
        int64_t cap = s->cap ? 2 * s->cap : 64;
        stashed *v = tg_arena_alloc_fn(ctx, fn, (size_t)cap * sizeof *v);
        if (!v) return false;
        if (s->n) memcpy(v, s->v, (size_t)s->n * sizeof *v);
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = (stashed){t, t->grad};
    t->grad = NULL;
    return true;
}

static void stash_restore(stash *s) {
    for (int64_t i = s->n - 1; i >= 0; i--) s->v[i].t->grad = s->v[i].grad;
}

/* t->grad += g, functionally (a new recorded tensor when t has one). */
static void accumulate(tg_ctx *ctx, const tg_node *n, int k, tg_tensor *g) {
    tg_tensor *t = n->in[k];
    if (!g || !t || !t->requires_grad) return;
    if (g->dtype != t->dtype || !tg_same_shape(g, t)) {
        char sg[TG_SHAPE_STR], st[TG_SHAPE_STR];
        tg_error(ctx, TG_ERR_SHAPE, n->op->name, "the double-backward rule gave input %d a gradient %s for a tensor %s",
                 k, tg_shape_of(sg, g), tg_shape_of(st, t));
        return;
    }
    t->grad = t->grad ? tg_add(ctx, t->grad, g) : g;
}

#if defined(__GNUC__)
__attribute__((noinline, cold))
#endif
static void
no_rule(tg_ctx *ctx, const char *fn, const tg_node *n) {
    tg_error(ctx, TG_ERR_STATE, fn,
             "'%s' cannot be differentiated twice: it has no double-backward rule (create_graph); compute this "
             "gradient without create_graph, or build the function from ops that have one%s",
             n->op->name, n->op->forward ? " (a custom op: give its tg_op_def a backward_graph)" : "");
}

/* Whether t is one of the n tensors the caller asked the gradient of. */
static bool is_input(const tg_tensor *t, int n, tg_tensor *const *inputs) {
    for (int i = 0; i < n; i++)
        if (inputs[i] == t) return true;
    return false;
}

/* The walk over records floor..top, create_graph or not. Without
 * create_graph, a record's output gradient is given back once its backward
 * has run, as tg_backward_ex does (only that backward reads it): a check
 * that runs thousands of backwards in one step then holds one backward's
 * gradients, not all of them. The seed and the requested inputs' gradients
 * stay. */
static void walk(tg_ctx *ctx, const char *fn, int64_t floor, int64_t top, bool create_graph, int n_inputs,
                 tg_tensor *const *inputs) {
    const tg_tensor *seed = ctx->tape.nodes[top].out->grad;
    for (int64_t k = top; k >= floor && tg_ok(ctx); k--) {
        tg_node *rec = &ctx->tape.nodes[k];
        if (!rec->out->grad) continue;
        if (!tg_record_check(ctx, fn, rec)) return;
        if (!create_graph) {
            rec->backward(ctx, rec);
            if (!tg_ok(ctx)) tg_record_failed(ctx, rec);
            else if (rec->out->grad != seed && !is_input(rec->out, n_inputs, inputs) &&
                     tg_grad_release(ctx, rec->out->grad))
                rec->out->grad = NULL;
            continue;
        }
        /* a copy: the rule's ops append records and may move the array */
        tg_node n = *rec;
        tg_grad_graph_fn rule = n.op->backward_graph;
        if (!rule) {
            no_rule(ctx, fn, &n);
            return;
        }
        tg_tensor *dx[8] = {0}, **d = dx;
        if (n.n_in > 8 && !(d = tg_arena_alloc_fn(ctx, fn, (size_t)n.n_in * sizeof *d))) return;
        if (n.n_in > 8) memset(d, 0, (size_t)n.n_in * sizeof *d);
        if (!rule(ctx, &n, n.out->grad, d)) {
            if (tg_ok(ctx)) /* a custom op's backward_graph that said nothing */
                tg_error(ctx, TG_ERR_STATE, fn, "the double backward of '%s' returned false without setting an error",
                         n.op->name);
            tg_record_failed(ctx, &n);
            return;
        }
        for (int i = 0; i < n.n_in && tg_ok(ctx); i++) accumulate(ctx, &n, i, d[i]);
    }
}

bool tg_grad_walk(tg_ctx *ctx, const char *fn, tg_tensor *out, tg_tensor *grad_out, int64_t floor, int n,
                  tg_tensor *const *inputs, tg_tensor **grads, bool create_graph) {
    int64_t top = tg_impl(out)->node;
    stash s = {0};
    bool ok = true;
    if (top >= floor) {
        /* Every tensor a walked record reads that is not made by a walked
         * record is a leaf of this walk: borrow its grad. The walked
         * records' outputs start from nothing, as in tg_backward_ex. */
        for (int64_t k = floor; k <= top && ok; k++) {
            tg_node *rec = &ctx->tape.nodes[k];
            rec->out->grad = NULL;
            for (int i = 0; i < rec->n_in && ok; i++) {
                tg_tensor *t = rec->in[i];
                if (t && t->requires_grad && tg_impl(t)->node < floor) ok = stash_add(ctx, fn, &s, t);
            }
        }
    }
    for (int i = 0; i < n && ok; i++)
        if (tg_impl(inputs[i])->node < floor || tg_impl(inputs[i])->node > top) ok = stash_add(ctx, fn, &s, inputs[i]);
    if (!ok) {
        stash_restore(&s);
        return false;
    }
    tg_tensor *seed = grad_out ? grad_out : tg_ones(ctx, out->dtype, out->ndim, out->shape);
    if (seed) {
        bool was = ctx->tape.grad_enabled;
        ctx->tape.grad_enabled = create_graph;
        if (top < floor) out->grad = seed; /* out is a leaf here: d out / d out */
        else {
            out->grad = seed;
            walk(ctx, fn, floor, top, create_graph, n, inputs);
        }
        ctx->tape.grad_enabled = was;
    }
    for (int i = 0; i < n && tg_ok(ctx); i++) {
        tg_tensor *g = inputs[i]->grad;
        grads[i] = g ? g : tg_zeros(ctx, inputs[i]->dtype, inputs[i]->ndim, inputs[i]->shape);
    }
    if (top < floor) out->grad = NULL;
    stash_restore(&s);
    return tg_ok(ctx);
}

/* Arguments shared by tg_grad and tg_hvp. */
static bool check_inputs(tg_ctx *ctx, const char *fn, int n, tg_tensor *const *inputs, tg_tensor **grads) {
    if (n < 1 || !inputs || !grads) {
        tg_error(ctx, TG_ERR_VALUE, fn, "n = %d inputs (need >= 1, with the inputs and grads arrays)", n);
        return false;
    }
    char what[32];
    for (int i = 0; i < n && tg_ok(ctx); i++) {
        snprintf(what, sizeof what, "inputs[%d]", i);
        tg_check_arg(ctx, fn, what, inputs[i]); /* sets the error */
    }
    return tg_ok(ctx);
}

bool tg_grad(tg_ctx *ctx, tg_tensor *out, const tg_tensor *grad_out, int n, tg_tensor *const *inputs, tg_tensor **grads,
             bool create_graph) {
    static const char fn[] = "tg_grad";
    if (!tg_check_arg(ctx, fn, "out", out) || !check_inputs(ctx, fn, n, inputs, grads)) return false;
    if (grad_out && !tg_check_arg(ctx, fn, "grad_out", grad_out)) return false;
    char s1[TG_SHAPE_STR], s2[TG_SHAPE_STR];
    if (grad_out) {
        if (!tg_check_same_dtype(ctx, fn, out, grad_out)) return false;
        if (!tg_same_shape(out, grad_out)) {
            tg_error(ctx, TG_ERR_SHAPE, fn, "gradient of shape %s does not match output of shape %s",
                     tg_shape_of(s1, grad_out), tg_shape_of(s2, out));
            return false;
        }
    } else if (out->numel != 1) {
        tg_error(ctx, TG_ERR_SHAPE, fn, "output of shape %s is not a scalar: pass its gradient as grad_out",
                 tg_shape_of(s1, out));
        return false;
    }
    int64_t top = tg_impl(out)->node;
    if (top >= 0 && (ctx->tape.consumed || top >= ctx->tape.n_nodes || ctx->tape.nodes[top].out != out)) {
        tg_error(ctx, TG_ERR_STATE, fn,
                 "the tape was already consumed by a backward (tg_grad needs the records of out %s)",
                 tg_shape_of(s1, out));
        return false;
    }
    return tg_grad_walk(ctx, fn, out, (tg_tensor *)grad_out, 0, n, inputs, grads, create_graph);
}

bool tg_hvp(tg_ctx *ctx, tg_tensor *loss, int n, tg_tensor *const *params, tg_tensor *const *v, tg_tensor **hv) {
    static const char fn[] = "tg_hvp";
    if (!tg_check_arg(ctx, fn, "loss", loss) || !check_inputs(ctx, fn, n, params, hv)) return false;
    if (!v) {
        tg_null_error(ctx, fn, "v");
        return false;
    }
    char s1[TG_SHAPE_STR], s2[TG_SHAPE_STR];
    for (int i = 0; i < n; i++) {
        char what[32];
        snprintf(what, sizeof what, "v[%d]", i);
        if (!tg_check_arg(ctx, fn, what, v[i]) || !tg_check_same_dtype(ctx, fn, params[i], v[i])) return false;
        if (!tg_same_shape(params[i], v[i])) {
            tg_error(ctx, TG_ERR_SHAPE, fn, "v[%d] %s is not the shape of params[%d] %s", i, tg_shape_of(s1, v[i]), i,
                     tg_shape_of(s2, params[i]));
            return false;
        }
    }
    /* H v = d/dp <dL/dp, v>: the gradient, recorded; its dot with v (a
     * constant); the gradient of that. */
    tg_tensor **g = tg_arena_alloc_fn(ctx, fn, (size_t)n * sizeof *g);
    if (!g || !tg_grad(ctx, loss, NULL, n, params, g, true)) return false;
    bool was = tg_set_grad_enabled(ctx, true);
    tg_tensor *dot = NULL;
    for (int i = 0; i < n && tg_ok(ctx); i++) {
        tg_tensor *gi = tg_sum(ctx, tg_mul(ctx, g[i], v[i]));
        dot = dot ? tg_add(ctx, dot, gi) : gi;
    }
    tg_set_grad_enabled(ctx, was);
    if (!tg_ok(ctx)) return false;
    if (!dot->requires_grad) { /* the gradient does not depend on params: H = 0 */
        for (int i = 0; i < n && tg_ok(ctx); i++)
            hv[i] = tg_zeros(ctx, params[i]->dtype, params[i]->ndim, params[i]->shape);
        return tg_ok(ctx);
    }
    return tg_grad(ctx, dot, NULL, n, params, hv, false);
}

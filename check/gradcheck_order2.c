/* gradgradcheck: the double backward against finite differences of the
 * backward (tg_gradgradcheck, tg_registry_check_order2; `tapegrad-gradcheck
 * check --order 2`).
 *
 * For f and a fixed random weighting u of its output, the first gradient
 *   g(x) = J(x)^T u = d <u, f(x)> / dx      (over the checked inputs,
 *                                            flattened and joined)
 * is itself a function of x, and tg_gradcheck checks it like any other:
 *   analytic  its backward -- the backward of g, recorded by tg_grad with
 *             create_graph: every op's double-backward rule;
 *   numeric   central differences of g, each evaluation a plain
 *             (first-order) backward at x +- h e_i.
 * So one tg_gradcheck of g is PyTorch's gradgradcheck: the second
 * derivative d/dx <r, J^T u> against differences of first derivatives. */
#include "autograd/grad_graph.h"
#include "check/registry.h"

#include <stdlib.h>

typedef struct order2 {
    tg_gradcheck_fn f;
    void *user;
    int n;        /* f's inputs */
    uint32_t wrt; /* the inputs g differentiates with respect to */
    tg_gradcheck_scale_fn scale;
    uint64_t seed;
    double *u; /* the weighting of f's output (heap; numel nu) */
    int64_t nu;
} order2;

/* splitmix64: the weighting u in [-1, 1), from the check's seed only. */
static double next_uniform(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

static tg_tensor *weighting(tg_ctx *ctx, order2 *o, const tg_tensor *y) {
    if (o->nu != y->numel) {
        double *u = realloc(o->u, (size_t)(y->numel > 0 ? y->numel : 1) * sizeof *u);
        if (!u) {
            tg_error(ctx, TG_ERR_OOM, "tg_gradgradcheck", "out of memory for a weighting of %lld values",
                     (long long)y->numel);
            return NULL;
        }
        uint64_t s = o->seed ^ 0x6f72646572320000ull; /* "order2" */
        for (int64_t j = 0; j < y->numel; j++) u[j] = next_uniform(&s);
        o->u = u, o->nu = y->numel;
    }
    tg_tensor *t = tg_new_tensor(ctx, "tg_gradgradcheck", y->dtype, y->ndim, y->shape);
    for (int64_t j = 0; t && j < y->numel; j++) tg_store(t, j, o->u[j]);
    return t;
}

/* g(x): f's output weighted by u, differentiated with respect to the
 * checked inputs (with create_graph when the checker records, i.e. when it
 * will run g's backward), flattened and joined. */
static tg_tensor *order2_fn(tg_ctx *ctx, tg_tensor *const *inputs, void *user) {
    order2 *o = user;
    const bool record = tg_grad_enabled(ctx);
    tg_tensor *xs[TG_GRADCHECK_MAX_INPUTS], *wrt[TG_GRADCHECK_MAX_INPUTS], *g[TG_GRADCHECK_MAX_INPUTS];
    tg_tensor *g_block[TG_GRADCHECK_MAX_INPUTS] = {0}; /* tg_grad's results, before the reshape */
    int m = 0;
    tg_tape saved;
    /* A difference evaluation (no grad): its records go to a tape of its
     * own, freed before the checker hands back the arena memory. */
    if (!record) tg_tape_stash(ctx, &saved);
    tg_set_grad_enabled(ctx, true);
    for (int k = 0; k < o->n; k++) {
        xs[k] = inputs[k];
        if (!(o->wrt >> k & 1u)) continue;
        if (!record) xs[k] = tg_requires_grad(ctx, tg_copy(ctx, inputs[k]));
        wrt[m++] = xs[k];
    }
    tg_tensor *y = tg_ok(ctx) ? o->f(ctx, xs, o->user) : NULL;
    tg_tensor *out = NULL;
    if (y && y->requires_grad) {
        tg_tensor *u = weighting(ctx, o, y);
        if (u && tg_grad(ctx, y, u, m, wrt, g, record)) {
            for (int i = 0; i < m; i++) g_block[i] = g[i];
            for (int i = 0; i < m; i++) g[i] = tg_reshape(ctx, g[i], 1, (int64_t[]){g[i] ? g[i]->numel : 0});
            out = m == 1 ? g[0] : tg_concat(ctx, m, g, 0);
        }
    } else if (y) { /* f does not depend on the checked inputs: g = 0 */
        int64_t total = 0;
        for (int i = 0; i < m; i++) total += wrt[i]->numel;
        out = tg_zeros(ctx, y->dtype, 1, &total);
    }
    /* g constant in x (f linear in it): its backward must still run, and
     * give 0 -- a recorded zero that depends on the inputs. */
    if (record && out && !out->requires_grad && m > 0)
        out = tg_add(ctx, out, tg_mul_scalar(ctx, tg_sum(ctx, wrt[0]), 0.0));
    tg_set_grad_enabled(ctx, record);
    if (!record) {
        if (out) out = tg_copy(ctx, out); /* not a view of the private tape's tensors */
        /* The gradients are copied: their blocks go back now, not at the
         * next reset (a check makes thousands of these evaluations). */
        for (int i = 0; i < m; i++)
            if (g_block[i]) tg_grad_release(ctx, g_block[i]);
        tg_tape_restore(ctx, &saved);
    }
    return tg_ok(ctx) ? out : NULL;
}

static bool order2_scale(tg_tensor *const *inputs, int k, double *scale, void *user) {
    const order2 *o = user;
    return o->scale ? o->scale(inputs, k, scale, o->user) : false;
}

/* The check `check` (tg_gradcheck, tg_gradcheck_fwd or
 * tg_gradcheck_adjoint) of g = order2_fn. */
typedef bool (*order2_checker)(tg_ctx *, tg_gradcheck_fn, void *, int, tg_tensor *const *, const tg_gradcheck_opts *,
                               tg_gradcheck_result *);

static bool order2_check(tg_ctx *ctx, const char *fn, order2_checker check, tg_gradcheck_fn f, void *user, int n_inputs,
                         tg_tensor *const *inputs, const tg_gradcheck_opts *opts, tg_gradcheck_result *result) {
    if (!tg_gradcheck_start(ctx, fn, result)) return false;
    if (!f || !inputs || n_inputs < 1 || n_inputs > TG_GRADCHECK_MAX_INPUTS) {
        tg_error(ctx, TG_ERR_VALUE, fn, "needs f and 1..%d inputs (n_inputs = %d)", TG_GRADCHECK_MAX_INPUTS, n_inputs);
        return false;
    }
    tg_gradcheck_opts o = opts ? *opts : tg_gradcheck_defaults();
    uint32_t all = n_inputs >= 32 ? ~0u : (1u << n_inputs) - 1u;
    order2 st = {
        .f = f, .user = user, .n = n_inputs, .wrt = o.inputs ? o.inputs & all : all, .scale = o.scale, .seed = o.seed};
    o.inputs = st.wrt;
    o.scale = st.scale ? order2_scale : NULL;
    o.r = (tg_gradcheck_vec){0}; /* a weighting of f's output, not of g's */
    bool ok = check(ctx, order2_fn, &st, n_inputs, inputs, &o, result);
    free(st.u);
    return ok;
}

bool tg_gradgradcheck(tg_ctx *ctx, tg_gradcheck_fn f, void *user, int n_inputs, tg_tensor *const *inputs,
                      const tg_gradcheck_opts *opts, tg_gradcheck_result *result) {
    return order2_check(ctx, __func__, tg_gradcheck, f, user, n_inputs, inputs, opts, result);
}

/* Forward over reverse: tg_jvp through g's recorded double backward --
 * the Hessian-vector product H v, every record's tangent rule -- against
 * differences of g along v (fwd), and <w, H v> against <H^T w, v> from
 * g's backward, reverse over reverse (adjoint). */
bool tg_gradgradcheck_fwd(tg_ctx *ctx, tg_gradcheck_fn f, void *user, int n_inputs, tg_tensor *const *inputs,
                          const tg_gradcheck_opts *opts, tg_gradcheck_result *result) {
    return order2_check(ctx, __func__, tg_gradcheck_fwd, f, user, n_inputs, inputs, opts, result);
}

bool tg_gradgradcheck_adjoint(tg_ctx *ctx, tg_gradcheck_fn f, void *user, int n_inputs, tg_tensor *const *inputs,
                              const tg_gradcheck_opts *opts, tg_gradcheck_result *result) {
    return order2_check(ctx, __func__, tg_gradcheck_adjoint, f, user, n_inputs, inputs, opts, result);
}

bool tg_registry_check_order2(tg_ctx *ctx, const tg_op_info *op, const char *spec, tg_dtype dtype,
                              const tg_gradcheck_opts *opts, tg_gradcheck_result *result) {
    static const char fn[] = "tg_registry_check_order2";
    tg_op_case c;
    if (!tg_gradcheck_start(ctx, fn, result)) return false;
    if (!op) {
        tg_null_error(ctx, fn, "op");
        return false;
    }
    if (!tg_registry_build(ctx, op, spec, dtype, &c)) return false;
    tg_gradcheck_opts o = tg_registry_opts(op, dtype, opts);
    uint32_t mask = o.inputs ? o.inputs & c.check : c.check;
    if (mask == 0) {
        tg_error(ctx, TG_ERR_VALUE, fn, "%s: inputs mask 0x%x selects no differentiable input (those are 0x%x)",
                 op->def->name, (unsigned)o.inputs, (unsigned)c.check);
        return false;
    }
    o.inputs = mask;
    if (!o.scale) o.scale = c.scale;
    return tg_gradgradcheck(ctx, op->forward, &c, c.n_inputs, c.inputs, &o, result);
}

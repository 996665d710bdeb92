/* More seeded bugs, of the normalization backward and a linear one, written with the public
 * custom-op API (tapegrad/op.h): the forward is the real fused op (run by
 * tg_op_apply with grad mode off), the backward is the guide's formula
 * with one mistake a learner makes. Listed in inject.c's catalogue; what
 * each looks like in a report is in docs/gradcheck-guide.md.
 *
 * Notation of docs/normalization-gradients.md: rows of C elements, r the
 * row's rstd, xhat the normalized row, u = gamma dy, m = mean(u xhat):
 *   RMSNorm    dx = r (u - xhat m)
 *   LayerNorm  dx = r (u - mean(u) - xhat m)
 *   rmsnorm-r-const     drops - xhat m (r treated as a constant): the
 *                       difference is exactly r diag(gamma) xhat xhat^T / C
 *   rmsnorm-m-sum       m = sum(u xhat) instead of the mean: -(C - 1) times
 *                       that
 *   rmsnorm-ignore-dy   dx from u = gamma (dy taken as all ones): J^T 1, the
 *                       gradient of sum(y), whatever dy
 * dgamma and dbeta are right in all.
 *
 * Layer: target (tool.h): the forwards inject.c lists; calls nothing of the tool. */
#include <math.h>
#include <stdlib.h>

#include "tools/gradcheck/tool.h"

enum { SEED_R_CONST = 1, SEED_M_SUM, SEED_IGNORE_DY };

typedef struct seed_args {
    int bug;
    bool layernorm;
    int ndim_norm;
    double eps;
} seed_args;

static tg_tensor *seeded_forward(tg_ctx *ctx, tg_node *node, tg_tensor *const *in, void *user) {
    const seed_args *s = user;
    tg_node_set_scalar(ctx, node, 0, s->bug);
    tg_node_set_scalar(ctx, node, 1, s->layernorm);
    tg_node_set_scalar(ctx, node, 2, s->ndim_norm);
    tg_node_set_scalar(ctx, node, 3, s->eps);
    return (s->layernorm ? tg_layernorm_fused : tg_rmsnorm_fused)(ctx, in[0], in[1], in[2], s->ndim_norm, s->eps);
}

/* The formulas above, row by row in float64 (any dtype in and out). */
static void seeded_backward(tg_ctx *ctx, tg_node *node) {
    int bug = (int)tg_node_scalar(node, 0);
    bool ln = tg_node_scalar(node, 1) != 0;
    int nd = (int)tg_node_scalar(node, 2);
    double eps = tg_node_scalar(node, 3);
    tg_tensor *x = tg_node_input(node, 0), *gamma = tg_node_input(node, 1), *dy = tg_node_grad_output(node);
    int64_t C = 1;
    for (int k = x->ndim - nd; k < x->ndim; k++) C *= x->shape[k];
    int64_t N = C ? x->numel / C : 0;
    tg_tensor *dx = tg_zeros(ctx, x->dtype, x->ndim, x->shape);
    tg_tensor *dg = tg_zeros(ctx, x->dtype, nd, x->shape + x->ndim - nd), *db = tg_zeros(ctx, x->dtype, nd, dg->shape);
    double *v = calloc((size_t)(3 * C), sizeof *v);
    if (!v || !dx || !dg || !db) {
        free(v);
        if (tg_ok(ctx)) tg_node_error(ctx, node, "out of memory");
        return;
    }
    double *xh = v, *g = v + C, *d = g + C;
    for (int64_t n = 0; n < N; n++) {
        double mu = 0, s2 = 0, mg = 0, m = 0;
        for (int64_t j = 0; j < C; j++) mu += ln ? tg_get_flat(ctx, x, n * C + j) / (double)C : 0;
        for (int64_t j = 0; j < C; j++) {
            xh[j] = tg_get_flat(ctx, x, n * C + j) - mu;
            s2 += xh[j] * xh[j];
        }
        double r = 1.0 / sqrt(s2 / (double)C + eps);
        for (int64_t j = 0; j < C; j++) {
            xh[j] *= r;
            d[j] = tg_get_flat(ctx, dy, n * C + j);
            g[j] = (gamma ? tg_get_flat(ctx, gamma, j) : 1.0) * (bug == SEED_IGNORE_DY ? 1.0 : d[j]);
            mg += g[j] / (double)C;
            m += g[j] * xh[j];
        }
        if (bug != SEED_M_SUM) m /= (double)C;
        for (int64_t i = 0; i < C; i++) {
            double t = r * (g[i] - (ln ? mg : 0) - (bug == SEED_R_CONST ? 0 : xh[i] * m));
            tg_set_flat(ctx, dx, n * C + i, t);
            tg_set_flat(ctx, dg, i, tg_get_flat(ctx, dg, i) + d[i] * xh[i]);
            tg_set_flat(ctx, db, i, tg_get_flat(ctx, db, i) + d[i]);
        }
    }
    free(v);
    tg_node_accumulate(ctx, node, 0, dx);
    tg_node_accumulate(ctx, node, 1, dg);
    tg_node_accumulate(ctx, node, 2, db);
}

/* The tangent rule of these bugs, whose forward is the right RMSNorm over
 * the last nd dims (scalar 2; eps: scalar 3), inputs x, gamma, beta (each
 * may be NULL but x). Per row, with r = (mean(x^2) + eps)^(-1/2) and
 * xhat = x r,
 *   t_y = gamma r (t_x - xhat mean(xhat t_x)) + t_gamma xhat + t_beta
 * (the derivation is above the fused op's rule, layers/norm_rules.c), here
 * composed of ops on the rows as a (N, C) matrix. */
static tg_tensor *seeded_rmsnorm_jvp(tg_ctx *ctx, tg_node *node, tg_tensor *const *t) {
    tg_tensor *x = tg_node_input(node, 0), *gamma = tg_node_input(node, 1), *beta = tg_node_input(node, 2);
    const int nd = (int)tg_node_scalar(node, 2);
    int64_t rows[2] = {1, 1};
    for (int k = 0; k < x->ndim; k++) rows[k < x->ndim - nd ? 0 : 1] *= x->shape[k];
    tg_tensor *xr = tg_reshape(ctx, x, 2, rows), *tr = tg_reshape(ctx, t[0], 2, rows);
    tg_tensor *ms = tg_mean_axis(ctx, tg_mul(ctx, xr, xr), 1, true);
    tg_tensor *r = tg_pow_scalar(ctx, tg_add_scalar(ctx, ms, tg_node_scalar(node, 3)), -0.5);
    tg_tensor *xhat = tg_mul(ctx, xr, r);
    tg_tensor *m = tg_mean_axis(ctx, tg_mul(ctx, xhat, tr), 1, true);
    tg_tensor *ty = tg_mul(ctx, r, tg_sub(ctx, tr, tg_mul(ctx, xhat, m)));
    if (gamma)
        ty = tg_add(ctx, tg_mul(ctx, ty, tg_reshape(ctx, gamma, 1, rows + 1)),
                    tg_mul(ctx, xhat, tg_reshape(ctx, t[1], 1, rows + 1)));
    if (beta) ty = tg_add(ctx, ty, tg_reshape(ctx, t[2], 1, rows + 1));
    return tg_reshape(ctx, ty, x->ndim, x->shape);
}

static tg_tensor *seeded(tg_ctx *ctx, tg_tensor *const *in, void *user, int bug, bool layernorm, const char *name) {
    const tg_op_case *c = user;
    seed_args s = {bug, layernorm, atoi(tg_registry_arg(c, "norm")), strtod(tg_registry_arg(c, "eps"), NULL)};
    /* the right forward, and so the right tangent rule (RMSNorm's bugs) */
    tg_op_def def = {.name = name, .forward = seeded_forward, .backward = seeded_backward};
    if (!layernorm) def.jvp = seeded_rmsnorm_jvp;
    tg_tensor *x3[3] = {in[0], c->n_inputs > 1 ? in[1] : NULL, c->n_inputs > 2 ? in[2] : NULL};
    return tg_op_apply(ctx, &def, 3, x3, &s);
}

tg_tensor *gct_bug_rmsnorm_r_const(tg_ctx *ctx, tg_tensor *const *in, void *user) {
    return seeded(ctx, in, user, SEED_R_CONST, false, "rmsnorm[bug:r-const]");
}
tg_tensor *gct_bug_rmsnorm_m_sum(tg_ctx *ctx, tg_tensor *const *in, void *user) {
    return seeded(ctx, in, user, SEED_M_SUM, false, "rmsnorm[bug:m-sum]");
}
tg_tensor *gct_bug_rmsnorm_ignore_dy(tg_ctx *ctx, tg_tensor *const *in, void *user) {
    return seeded(ctx, in, user, SEED_IGNORE_DY, false, "rmsnorm[bug:ignore-dy]");
}

/* ---- linear-scale: a linear op with dx off by a factor ----------------------
 * y = x W^T + b, the real fused forward; the backward's dW = dy^T x and db
 * = sum dy are right, dx = (1 + size) dy W. A linear op has no truncation
 * error at any step: the check's measured truncation is its rounding, so
 * a 2% bug stands out even at the float32 step h = 0.1 of linear. */

static tg_tensor *linear_forward(tg_ctx *ctx, tg_node *node, tg_tensor *const *in, void *user) {
    tg_node_set_scalar(ctx, node, 0, *(const double *)user);
    return tg_linear_fused(ctx, in[0], in[1], in[2]);
}

static void linear_backward(tg_ctx *ctx, tg_node *node) {
    double size = tg_node_scalar(node, 0);
    tg_tensor *x = tg_node_input(node, 0), *w = tg_node_input(node, 1), *b = tg_node_input(node, 2);
    tg_tensor *dy = tg_node_grad_output(node);
    int64_t O = w->shape[0], I = w->shape[1], N = I ? x->numel / I : 0;
    tg_tensor *dx = tg_zeros(ctx, x->dtype, x->ndim, x->shape), *dw = tg_zeros(ctx, w->dtype, 2, w->shape);
    tg_tensor *db = b ? tg_zeros(ctx, b->dtype, 1, b->shape) : NULL;
    if (!dx || !dw || (b && !db)) return;
    for (int64_t n = 0; n < N; n++)
        for (int64_t o = 0; o < O; o++) {
            double d = tg_get_flat(ctx, dy, n * O + o);
            for (int64_t i = 0; i < I; i++) {
                tg_set_flat(ctx, dx, n * I + i,
                            tg_get_flat(ctx, dx, n * I + i) + (1 + size) * d * tg_get_flat(ctx, w, o * I + i));
                tg_set_flat(ctx, dw, o * I + i, tg_get_flat(ctx, dw, o * I + i) + d * tg_get_flat(ctx, x, n * I + i));
            }
            if (db) tg_set_flat(ctx, db, o, tg_get_flat(ctx, db, o) + d);
        }
    tg_node_accumulate(ctx, node, 0, dx);
    tg_node_accumulate(ctx, node, 1, dw);
    if (db) tg_node_accumulate(ctx, node, 2, db);
}

/* The tangent of linear-scale (the right forward), y = x W^T + b:
 *   t_y = t_x W^T + x t_W^T + t_b */
static tg_tensor *seeded_linear_jvp(tg_ctx *ctx, tg_node *node, tg_tensor *const *t) {
    tg_tensor *x = tg_node_input(node, 0), *w = tg_node_input(node, 1), *b = tg_node_input(node, 2);
    tg_tensor *ty = tg_add(ctx, tg_linear_fused(ctx, t[0], w, NULL), tg_linear_fused(ctx, x, t[1], NULL));
    return b ? tg_add(ctx, ty, t[2]) : ty;
}

tg_tensor *gct_bug_linear_scale(tg_ctx *ctx, tg_tensor *const *in, void *user) {
    const tg_op_case *c = user;
    const char *sz = tg_registry_arg(c, "size");
    double size = sz ? strtod(sz, NULL) : 0.0;
    tg_op_def def = {
        .name = "linear[bug:scale]", .forward = linear_forward, .backward = linear_backward, .jvp = seeded_linear_jvp};
    tg_tensor *x3[3] = {in[0], in[1], c->n_inputs > 2 ? in[2] : NULL};
    return tg_op_apply(ctx, &def, 3, x3, &size);
}

/* Seeded bugs for teaching: known-wrong backward passes that
 * `tapegrad-gradcheck --inject BUG` swaps in for a registered op.
 *
 * Each buggy op runs the real forward (the raw kernels of
 * layers/norm_kernels.h), records itself on the tape exactly as the real
 * fused op does (x, gamma, beta in; mean and rstd saved), and differs only
 * in its backward. So the output is right and only the gradient is wrong:
 * what a gradient check exists to catch. The correct formulas are in
 * layers/rmsnorm.c, layers/layernorm.c and docs/normalization-gradients.md;
 * what each bug looks like in a report is in docs/gradcheck-guide.md.
 *
 * Notation as in layers/norm_kernels.h: rows of C elements, r the row's
 * rstd, xhat the normalized row, u = gamma * dy.
 *
 * Layer: target (tool.h): the catalogue target.c looks bugs up in; calls inject_norm.c
 * and inject_act.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/tape.h"
#include "layers/module.h"
#include "layers/norm.h"
#include "layers/norm_kernels.h"
#include "tools/gradcheck/tool.h"

/* ---- the norm arguments of a registry case ("4x8;eps=0.1;bias=1") ---------- */

typedef struct bug_norm_args {
    int ndim_norm;
    double eps;
    tg_tensor *x, *gamma, *beta;
} bug_norm_args;

/* The registry built and validated the case and filled in the defaults of
 * norm and eps; its inputs are x, then gamma (affine), then beta (bias). */
static bug_norm_args norm_args(tg_tensor *const *in, const tg_op_case *c) {
    bug_norm_args a;
    a.ndim_norm = atoi(tg_registry_arg(c, "norm"));
    a.eps = strtod(tg_registry_arg(c, "eps"), NULL);
    a.x = in[0];
    a.gamma = c->n_inputs > 1 ? in[1] : NULL;
    a.beta = c->n_inputs > 2 ? in[2] : NULL;
    return a;
}

/* The bug's size, the case's argument "size" (target.c puts it there). */
static double bug_size(void *user) {
    const char *s = tg_registry_arg(user, "size");
    return s ? strtod(s, NULL) : 0.0;
}

/* The bugs' descriptors (defined after their backward functions, below):
 * each its name and wrong backward, and the fused norm's tangent rule (the
 * forward is right, and so is its tangent). */
enum { RMS_SUM, RMS_NO_EPS, RMS_OVERWRITE, RMS_SCALE, RMS_PROJ, N_RMS_BUGS };
enum { LN_NO_MEAN, LN_UNBIASED, N_LN_BUGS };
static const tg_op_def RMS_BUGS[N_RMS_BUGS], LN_BUGS[N_LN_BUGS];

/* ---- the shared forward ------------------------------------------------------ */

/* The real RMSNorm or LayerNorm forward, recorded with op: the bug's
 * descriptor, its name and wrong backward, and the fused norm's tangent
 * rule (the forward is right, and so is its tangent). The record:
 *   in = {x, gamma, beta},  i[0] = N rows, i[1] = C per row, i[2] = flags
 *   (the bug's own, for its backward), f[0] = eps, f[1] = the bug's size,
 *   saved: rstd (N) for RMSNorm; mean (N) then rstd (N) for LayerNorm. */
static tg_tensor *bug_norm_forward(tg_ctx *ctx, const tg_op_def *op, bool layernorm, int64_t flags, double size,
                                   const bug_norm_args *a) {
    const char *name = op->name;
    int64_t N, C;
    if (!tg_norm_check_args(ctx, name, a->x, a->gamma, a->beta, a->ndim_norm, a->eps, &N, &C)) return NULL;
    tg_tensor *y = tg_new_like(ctx, name, a->x);
    if (!y) return NULL;
    tg_tensor *in[3] = {a->x, a->gamma, a->beta};
    double *stats = NULL;
    tg_node *n = tg_record(ctx, op, y, 3, in);
    if (n) {
        n->i[0] = N, n->i[1] = C, n->i[2] = flags;
        n->f[0] = a->eps;
        n->f[1] = size;
        stats = tg_node_save(ctx, n, (size_t)(N > 0 ? (layernorm ? 2 : 1) * N : 1) * sizeof *stats);
    }
    if (!tg_ok(ctx)) return NULL;
    const void *g = a->gamma ? a->gamma->data : NULL, *b = a->beta ? a->beta->data : NULL;
    double *mean = layernorm ? stats : NULL, *rstd = layernorm && stats ? stats + N : stats;
    int th = tg_threads(ctx);
    if (layernorm && a->x->dtype == TG_F64)
        tg_layernorm_forward_f64(y->data, mean, rstd, a->x->data, g, b, N, C, a->eps, th);
    else if (layernorm) tg_layernorm_forward_f32(y->data, mean, rstd, a->x->data, g, b, N, C, a->eps, th);
    else if (a->x->dtype == TG_F64) tg_rmsnorm_forward_f64(y->data, rstd, a->x->data, g, b, N, C, a->eps, th);
    else tg_rmsnorm_forward_f32(y->data, rstd, a->x->data, g, b, N, C, a->eps, th);
    return y;
}

/* The real RMSNorm backward kernel with the given rstd per row. */
static void rms_kernel(tg_ctx *ctx, tg_node *n, tg_tensor *dx, const double *rstd) {
    tg_tensor *x = n->in[0], *g = n->in[1], *dg = tg_grad_of(ctx, n->in[1]), *db = tg_grad_of(ctx, n->in[2]);
    if (!tg_ok(ctx)) return;
    const tg_tensor *dy = n->out->grad;
    if (x->dtype == TG_F64)
        tg_rmsnorm_backward_f64(dx ? dx->data : NULL, dg ? dg->data : NULL, db ? db->data : NULL, dy->data, x->data,
                                g ? g->data : NULL, rstd, n->i[0], n->i[1], tg_threads(ctx));
    else
        tg_rmsnorm_backward_f32(dx ? dx->data : NULL, dg ? dg->data : NULL, db ? db->data : NULL, dy->data, x->data,
                                g ? g->data : NULL, rstd, n->i[0], n->i[1], tg_threads(ctx));
}

/* How a buggy RMSNorm backward recomputes rstd (node->i[2]). */
enum { BUG_SUM = 1, BUG_NO_EPS = 2 };

/* 1 / sqrt(mean_j x_j^2 + eps) for each row -- with the sum in place of the
 * mean (BUG_SUM), without eps (BUG_NO_EPS): the rstd a backward gets when it
 * recomputes the statistic instead of using the saved one. NULL (and the
 * context's error) when out of memory. */
static double *recomputed_rstd(tg_ctx *ctx, const tg_node *n) {
    const tg_tensor *x = n->in[0];
    int64_t N = n->i[0], C = n->i[1];
    bool sum = n->i[2] & BUG_SUM, no_eps = n->i[2] & BUG_NO_EPS;
    double *r = tg_arena_alloc_fn(ctx, n->op->name, (size_t)(N > 0 ? N : 1) * sizeof *r);
    if (!r) return NULL;
    for (int64_t row = 0; row < N; row++) {
        double s = 0.0;
        for (int64_t j = 0; j < C; j++) {
            double v = tg_load(x, row * C + j);
            s += v * v;
        }
        r[row] = 1.0 / sqrt((sum ? s : s / (double)C) + (no_eps ? 0.0 : n->f[0]));
    }
    return r;
}

/* The real RMSNorm backward kernel with the recomputed rstd. */
static void rmsnorm_recomputed_backward(tg_ctx *ctx, tg_node *n) {
    tg_tensor *dx = tg_grad_of(ctx, n->in[0]);
    double *r = tg_ok(ctx) ? recomputed_rstd(ctx, n) : NULL;
    if (r) rms_kernel(ctx, n, dx, r);
}

/* ---- rmsnorm-sum ------------------------------------------------------------
 * Forward was r = 1 / sqrt(mean_j x_j^2 + eps), y = x r gamma + beta.
 * BUG: the backward recomputes r from the SUM of squares,
 *   r' = 1 / sqrt(sum_j x_j^2 + eps)            (about r / sqrt(C))
 * and uses it in dx = r' (u - x r' mean_j(u_j x_j r')) and in dgamma = dy x r'.
 * dgamma is off by the factor r' / r ~ 1/sqrt(C); dx is not a uniform
 * factor: its identity part r' u is scaled by r' / r and its projection part
 * (three factors of r') by its cube (docs/gradcheck-guide.md, diagnosis); dbeta
 * = dy is right. */
static tg_tensor *fw_rmsnorm_sum(tg_ctx *ctx, tg_tensor *const *in, void *user) {
    bug_norm_args a = norm_args(in, user);
    return bug_norm_forward(ctx, &RMS_BUGS[RMS_SUM], false, BUG_SUM, 0.0, &a);
}

/* ---- rmsnorm-no-eps -----------------------------------------------------------
 * Forward was r = 1 / sqrt(mean_j x_j^2 + eps).
 * BUG: the backward recomputes r without eps,
 *   r' = 1 / sqrt(mean_j x_j^2)
 * Relative error of the gradient ~ eps / (2 mean_j x_j^2): invisible for
 * eps = 1e-6 on rows of size ~1 (it hides under rtol), exposed when eps is
 * comparable to mean x^2 (the bug's default spec uses eps = 0.1). */
static tg_tensor *fw_rmsnorm_no_eps(tg_ctx *ctx, tg_tensor *const *in, void *user) {
    bug_norm_args a = norm_args(in, user);
    return bug_norm_forward(ctx, &RMS_BUGS[RMS_NO_EPS], false, BUG_NO_EPS, 0.0, &a);
}

/* ---- layernorm-no-mean -------------------------------------------------------
 * Forward was mu = mean_j x_j, r = 1 / sqrt(mean_j (x_j - mu)^2 + eps),
 * xhat = (x - mu) r, y = xhat gamma + beta. Correct:
 *   dx_i += r (u_i - mean_j u_j - xhat_i mean_j(u_j xhat_j))
 * BUG: the term from mu, - mean_j u_j, is dropped (as if the mean were a
 * constant):
 *   dx_i += r (u_i - xhat_i mean_j(u_j xhat_j))
 * dgamma and dbeta are right (the real kernel computes them). */
static void layernorm_no_mean_backward(tg_ctx *ctx, tg_node *n) {
    tg_tensor *x = n->in[0], *g = n->in[1], *dx = tg_grad_of(ctx, x), *dg = tg_grad_of(ctx, g),
              *db = tg_grad_of(ctx, n->in[2]);
    if (!tg_ok(ctx)) return;
    const tg_tensor *dy = n->out->grad;
    int64_t N = n->i[0], C = n->i[1];
    const double *mean = n->saved, *rstd = mean + N;
    for (int64_t row = 0; dx && row < N; row++) {
        int64_t o = row * C;
        double r = rstd[row], mu = mean[row], uxh = 0.0;
        for (int64_t j = 0; j < C; j++) {
            double u = (g ? tg_load(g, j) : 1.0) * tg_load(dy, o + j);
            uxh += u * (tg_load(x, o + j) - mu) * r;
        }
        uxh /= (double)C;
        for (int64_t i = 0; i < C; i++) {
            double u = (g ? tg_load(g, i) : 1.0) * tg_load(dy, o + i);
            double xhat = (tg_load(x, o + i) - mu) * r;
            tg_store(dx, o + i, tg_load(dx, o + i) + r * (u - xhat * uxh)); /* BUG: no - mean_j u_j */
        }
    }
    /* dgamma, dbeta: the real kernel (dx NULL) */
    if (x->dtype == TG_F64)
        tg_layernorm_backward_f64(NULL, dg ? dg->data : NULL, db ? db->data : NULL, dy->data, x->data,
                                  g ? g->data : NULL, mean, rstd, N, C, tg_threads(ctx));
    else
        tg_layernorm_backward_f32(NULL, dg ? dg->data : NULL, db ? db->data : NULL, dy->data, x->data,
                                  g ? g->data : NULL, mean, rstd, N, C, tg_threads(ctx));
}

static tg_tensor *fw_layernorm_no_mean(tg_ctx *ctx, tg_tensor *const *in, void *user) {
    bug_norm_args a = norm_args(in, user);
    return bug_norm_forward(ctx, &LN_BUGS[LN_NO_MEAN], true, 0, 0.0, &a);
}

/* ---- overwrite ------------------------------------------------------------
 * The right formulas, but the gradient is ASSIGNED, not accumulated:
 *   dx = r (u - xhat mean_j(u_j xhat_j))       instead of  dx += ...
 * Harmless while x feeds only this op: its grad starts at zero. The checked
 * function uses x twice, as a residual connection does,
 *   f(x) = rmsnorm(x) + x
 * The tape runs backward in reverse: the add puts dy into x's grad first,
 * then this backward overwrites it, so dx misses the identity term dy. */
static void rmsnorm_overwrite_backward(tg_ctx *ctx, tg_node *n) {
    tg_tensor *dx = tg_grad_of(ctx, n->in[0]);
    if (!tg_ok(ctx)) return;
    if (dx) memset(dx->data, 0, (size_t)dx->numel * tg_dtype_size(dx->dtype)); /* BUG: = instead of += */
    rms_kernel(ctx, n, dx, n->saved);
}

static tg_tensor *fw_rmsnorm_overwrite(tg_ctx *ctx, tg_tensor *const *in, void *user) {
    bug_norm_args a = norm_args(in, user);
    tg_tensor *y = bug_norm_forward(ctx, &RMS_BUGS[RMS_OVERWRITE], false, 0, 0.0, &a);
    /* ";uses=1" (target.c): x used once, the bug stays hidden */
    const char *uses = tg_registry_arg(user, "uses");
    if (uses && strcmp(uses, "1") == 0) return y;
    return tg_add(ctx, y, a.x); /* the second use of x */
}

/* ---- rmsnorm-scale --------------------------------------------------------------
 * The right formulas, then dx scaled by 1 + size (size: the spec's
 * ";size=S", default 0.1):
 *   dx_i += (1 + size) r (u_i - xhat_i mean_j(u_j xhat_j))
 * A bug of relative size exactly |size| in every element of dx -- for the
 * detection rate against the size of a bug (docs/experiments.md).
 * dgamma and dbeta are right. */
static void rmsnorm_scale_backward(tg_ctx *ctx, tg_node *n) {
    tg_tensor *dx = tg_grad_of(ctx, n->in[0]);
    tg_tensor *t = dx ? tg_zeros(ctx, dx->dtype, dx->ndim, dx->shape) : NULL;
    if (!tg_ok(ctx)) return;
    rms_kernel(ctx, n, t, n->saved); /* the right dx into t; dgamma, dbeta */
    for (int64_t i = 0; t && i < t->numel; i++) tg_store(dx, i, tg_load(dx, i) + (1 + n->f[1]) * tg_load(t, i));
}
static tg_tensor *fw_rmsnorm_scale(tg_ctx *ctx, tg_tensor *const *in, void *user) {
    bug_norm_args a = norm_args(in, user);
    return bug_norm_forward(ctx, &RMS_BUGS[RMS_SCALE], false, 0, bug_size(user), &a);
}

/* ---- rmsnorm-proj -----------------------------------------------------------------
 * The term that keeps dx orthogonal to x, from differentiating r, off by
 * the factor 1 + size:
 *   dx_i += r (u_i - (1 + size) xhat_i mean_j(u_j xhat_j))
 * size = -1 drops it (r treated as a constant); small sizes put an error
 * along x only, which a random direction sees with weight ~1/sqrt(C).
 * dgamma and dbeta are right. */
static void rmsnorm_proj_backward(tg_ctx *ctx, tg_node *n) {
    tg_tensor *x = n->in[0], *g = n->in[1], *dx = tg_grad_of(ctx, x);
    if (!tg_ok(ctx)) return;
    const tg_tensor *dy = n->out->grad;
    const double *rstd = n->saved;
    int64_t N = n->i[0], C = n->i[1];
    for (int64_t row = 0; dx && row < N; row++) {
        int64_t o = row * C;
        double r = rstd[row], m = 0.0;
        for (int64_t j = 0; j < C; j++) m += (g ? tg_load(g, j) : 1.0) * tg_load(dy, o + j) * tg_load(x, o + j) * r;
        m /= (double)C;
        for (int64_t i = 0; i < C; i++) {
            double u = (g ? tg_load(g, i) : 1.0) * tg_load(dy, o + i), xhat = tg_load(x, o + i) * r;
            tg_store(dx, o + i, tg_load(dx, o + i) + r * (u - (1 + n->f[1]) * xhat * m)); /* BUG: 1 + size */
        }
    }
    rms_kernel(ctx, n, NULL, rstd); /* dgamma, dbeta */
}
static tg_tensor *fw_rmsnorm_proj(tg_ctx *ctx, tg_tensor *const *in, void *user) {
    bug_norm_args a = norm_args(in, user);
    return bug_norm_forward(ctx, &RMS_BUGS[RMS_PROJ], false, 0, bug_size(user), &a);
}

/* ---- layernorm-unbiased -----------------------------------------------------------
 * Forward was var = mean_j (x_j - mu)^2 (biased), r = 1 / sqrt(var + eps).
 * BUG: the backward recomputes r from the unbiased variance,
 *   r' = 1 / sqrt(C / (C - 1) var + eps),   xhat' = (x - mu) r'
 * and uses them in dx and dgamma: a relative error of about 1 / (2C) when
 * eps << var (0.4% at C = 128), the kind of slip a tolerance of 1e-2 hides. */
static void layernorm_unbiased_backward(tg_ctx *ctx, tg_node *n) {
    tg_tensor *x = n->in[0], *g = n->in[1], *dx = tg_grad_of(ctx, x), *dg = tg_grad_of(ctx, g),
              *db = tg_grad_of(ctx, n->in[2]);
    int64_t N = n->i[0], C = n->i[1];
    double *r = tg_ok(ctx) ? tg_arena_alloc_fn(ctx, n->op->name, (size_t)(N > 0 ? N : 1) * sizeof *r) : NULL;
    if (!r) return;
    const double *mean = n->saved;
    for (int64_t row = 0; row < N; row++) {
        double ss = 0.0;
        for (int64_t j = 0; j < C; j++) {
            double d = tg_load(x, row * C + j) - mean[row];
            ss += d * d;
        }
        r[row] = 1.0 / sqrt(ss / (double)(C > 1 ? C - 1 : 1) + n->f[0]); /* BUG: C - 1 */
    }
    const tg_tensor *dy = n->out->grad;
    if (x->dtype == TG_F64)
        tg_layernorm_backward_f64(dx ? dx->data : NULL, dg ? dg->data : NULL, db ? db->data : NULL, dy->data, x->data,
                                  g ? g->data : NULL, mean, r, N, C, tg_threads(ctx));
    else
        tg_layernorm_backward_f32(dx ? dx->data : NULL, dg ? dg->data : NULL, db ? db->data : NULL, dy->data, x->data,
                                  g ? g->data : NULL, mean, r, N, C, tg_threads(ctx));
}

static tg_tensor *fw_layernorm_unbiased(tg_ctx *ctx, tg_tensor *const *in, void *user) {
    bug_norm_args a = norm_args(in, user);
    return bug_norm_forward(ctx, &LN_BUGS[LN_UNBIASED], true, 0, 0.0, &a);
}

static const tg_op_def RMS_BUGS[N_RMS_BUGS] = {
    [RMS_SUM] = {.name = "rmsnorm[bug:sum]", .backward = rmsnorm_recomputed_backward, .jvp = tg_rmsnorm_jvp},
    [RMS_NO_EPS] = {.name = "rmsnorm[bug:no-eps]", .backward = rmsnorm_recomputed_backward, .jvp = tg_rmsnorm_jvp},
    [RMS_OVERWRITE] = {.name = "rmsnorm[bug:overwrite]", .backward = rmsnorm_overwrite_backward, .jvp = tg_rmsnorm_jvp},
    [RMS_SCALE] = {.name = "rmsnorm[bug:scale]", .backward = rmsnorm_scale_backward, .jvp = tg_rmsnorm_jvp},
    [RMS_PROJ] = {.name = "rmsnorm[bug:proj]", .backward = rmsnorm_proj_backward, .jvp = tg_rmsnorm_jvp},
};
static const tg_op_def LN_BUGS[N_LN_BUGS] = {
    [LN_NO_MEAN] = {.name = "layernorm[bug:no-mean]", .backward = layernorm_no_mean_backward, .jvp = tg_layernorm_jvp},
    [LN_UNBIASED] = {.name = "layernorm[bug:unbiased]",
                     .backward = layernorm_unbiased_backward,
                     .jvp = tg_layernorm_jvp},
};

/* ---- the catalogue ---------------------------------------------------------- */

static const gct_bug BUGS[] = {
    {"rmsnorm-sum", "rmsnorm", "RMSNorm backward recomputes rstd from the sum of squares instead of the mean", "",
     "4x8", fw_rmsnorm_sum, NULL, 0},
    {"rmsnorm-no-eps", "rmsnorm", "RMSNorm backward recomputes rstd without eps", "", "4x8;eps=0.1", fw_rmsnorm_no_eps,
     NULL, 0},
    {"layernorm-no-mean", "layernorm", "LayerNorm dx drops the term - mean_j(u_j) that comes from the mean", "", "4x8",
     fw_layernorm_no_mean, NULL, 0},
    {"overwrite", "rmsnorm", "RMSNorm backward assigns dx instead of adding to it (x used twice: a residual)", " + x",
     "4x8", fw_rmsnorm_overwrite, ", x used once", 0},
    {"rmsnorm-scale", "rmsnorm", "RMSNorm dx times 1 + size (;size=S, default 0.1): a relative error of exactly size",
     "", "4x8", fw_rmsnorm_scale, NULL, 0.1},
    {"rmsnorm-proj", "rmsnorm",
     "RMSNorm dx with the projection term - xhat mean(u xhat) times 1 + size (;size=S, default 0.1; -1 drops it)", "",
     "4x8", fw_rmsnorm_proj, NULL, 0.1},
    {"layernorm-unbiased", "layernorm", "LayerNorm backward recomputes rstd from the unbiased variance (/ (C - 1))", "",
     "4x8", fw_layernorm_unbiased, NULL, 0},
    /* written with the public custom-op API: inject_norm.c */
    {"rmsnorm-r-const", "rmsnorm", "RMSNorm dx treats r as a constant: the - xhat mean(u xhat) term is dropped", "",
     "4x8", gct_bug_rmsnorm_r_const, NULL, 0},
    {"rmsnorm-m-sum", "rmsnorm", "RMSNorm dx sums m = sum(u xhat) instead of averaging it", "", "4x8",
     gct_bug_rmsnorm_m_sum, NULL, 0},
    {"rmsnorm-ignore-dy", "rmsnorm", "RMSNorm dx ignores the incoming gradient: J^T 1 instead of J^T dy", "", "4x8",
     gct_bug_rmsnorm_ignore_dy, NULL, 0},
    {"linear-scale", "linear", "Linear dx times 1 + size (;size=S, default 0.02): a linear op, no truncation error", "",
     "4x3,5x3", gct_bug_linear_scale, NULL, 0.02},
    /* wrong in part of the domain only: inject_act.c */
    {"softplus-high", "softplus",
     "softplus dx = dy (its linear branch's slope) above x = size (;size=S, default 1.9): wrong only there", "", "6x6",
     gct_bug_softplus_high, NULL, 1.9},
};

int gct_bug_count(void) { return (int)(sizeof BUGS / sizeof BUGS[0]); }

const gct_bug *gct_bug_get(int i) { return i >= 0 && i < gct_bug_count() ? &BUGS[i] : NULL; }

const gct_bug *gct_bug_find(const char *name) {
    for (int i = 0; name && i < gct_bug_count(); i++)
        if (strcmp(BUGS[i].name, name) == 0) return &BUGS[i];
    return NULL;
}

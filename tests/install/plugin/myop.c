/* A learner's LayerNorm (no gain, no bias) as a custom op (tapegrad/op.h),
 * and the same op with a bug, packed as a plugin for tapegrad-gradcheck:
 *
 *   cc -shared -fPIC myop.c -o libmyop.so $(pkg-config --cflags --libs tapegrad-check)
 *   tapegrad-gradcheck --plugin ./libmyop.so check my_layernorm
 *
 * Forward, over each row of C elements (float64):
 *   mu = mean_j x_j,   r = 1 / sqrt(mean_j (x_j - mu)^2 + eps)
 *   y_i = (x_i - mu) r = xhat_i
 * Backward: dx_i = r (dy_i - mean_j dy_j - xhat_i mean_j(dy_j xhat_j)).
 * The bug drops the - mean_j dy_j term (the one that comes from mu). */
#include <math.h>
#include <stdlib.h>

#include <tapegrad.h>
#include <tapegrad/check.h>

static tg_tensor *ln_forward(tg_ctx *ctx, tg_node *node, tg_tensor *const *in, void *user) {
    double eps = *(const double *)user;
    tg_tensor *x = in[0];
    if (x->dtype != TG_F64 || x->ndim != 2) {
        tg_node_error(ctx, node, "wants a float64 (N, C) tensor");
        return NULL;
    }
    int64_t N = x->shape[0], C = x->shape[1];
    tg_tensor *y = tg_zeros(ctx, TG_F64, 2, x->shape), *rstd = tg_zeros(ctx, TG_F64, 1, &N);
    if (!y) return NULL;
    const double *xd = tg_data_f64(ctx, x);
    double *yd = tg_data_f64(ctx, y), *r = tg_data_f64(ctx, rstd);
    for (int64_t n = 0; n < N; n++) {
        double mu = 0, var = 0;
        for (int64_t j = 0; j < C; j++) mu += xd[n * C + j] / (double)C;
        for (int64_t j = 0; j < C; j++) var += (xd[n * C + j] - mu) * (xd[n * C + j] - mu) / (double)C;
        r[n] = 1.0 / sqrt(var + eps);
        for (int64_t j = 0; j < C; j++) yd[n * C + j] = (xd[n * C + j] - mu) * r[n];
    }
    tg_node_save_tensor(ctx, node, rstd);
    return y; /* y = xhat: backward reads it as the op's output */
}

/* keep_mean_term 0: the bug */
static void ln_backward_impl(tg_ctx *ctx, tg_node *node, int keep_mean_term) {
    tg_tensor *y = tg_node_output(node), *rstd = tg_node_saved_tensor(node, 0), *dy = tg_node_grad_output(node);
    int64_t N = y->shape[0], C = y->shape[1];
    tg_tensor *dx = tg_zeros(ctx, TG_F64, 2, y->shape);
    if (!dx) return;
    const double *xh = tg_data_f64(ctx, y), *r = tg_data_f64(ctx, rstd), *g = tg_data_f64(ctx, dy);
    double *d = tg_data_f64(ctx, dx);
    for (int64_t n = 0; n < N; n++) {
        double mg = 0, mgx = 0;
        for (int64_t j = 0; j < C; j++) {
            mg += g[n * C + j] / (double)C;
            mgx += g[n * C + j] * xh[n * C + j] / (double)C;
        }
        for (int64_t i = 0; i < C; i++)
            d[n * C + i] = r[n] * (g[n * C + i] - (keep_mean_term ? mg : 0) - xh[n * C + i] * mgx);
    }
    tg_node_accumulate(ctx, node, 0, dx);
}
static void ln_backward(tg_ctx *ctx, tg_node *node) { ln_backward_impl(ctx, node, 1); }
static void ln_backward_bug(tg_ctx *ctx, tg_node *node) { ln_backward_impl(ctx, node, 0); }

/* The tangent rule (forward mode), composed of ops on the (N, C) rows:
 *   t_y = r (t_x - mean(t_x) - xhat mean(xhat t_x))
 * -- the same for both ops, whose forward is the same. It is in the ops'
 * descriptors, which their records point to: the tool reaches it although
 * this plugin links its own copy of tapegrad. */
static tg_tensor *ln_jvp(tg_ctx *ctx, tg_node *node, tg_tensor *const *t) {
    tg_tensor *xhat = tg_node_output(node), *rstd = tg_node_saved_tensor(node, 0);
    int64_t col[2] = {rstd->shape[0], 1};
    tg_tensor *r = tg_reshape(ctx, rstd, 2, col);
    tg_tensor *c = tg_sub(ctx, t[0], tg_mean_axis(ctx, t[0], 1, true));
    tg_tensor *m = tg_mean_axis(ctx, tg_mul(ctx, xhat, t[0]), 1, true);
    return tg_mul(ctx, r, tg_sub(ctx, c, tg_mul(ctx, xhat, m)));
}

/* The ops, with their tangent rule and what a check needs: the argument
 * eps and its default, and the values x is drawn from
 * (tg_registry_build_ranges below). They differ in name and backward. */
#define LN_OP(NAME, BACKWARD)                                                                             \
    {                                                                                                     \
        .name = (NAME), .forward = ln_forward, .backward = (BACKWARD), .jvp = ln_jvp, .args = "eps=1e-5", \
        .inputs = "x=-2:2"                                                                                \
    }
static const tg_op_def LN = LN_OP("my_layernorm", ln_backward);
static const tg_op_def LN_BUG = LN_OP("my_layernorm_nomean", ln_backward_bug);

/* The registry calls forward with the case (its arguments) as user. */
static tg_tensor *apply(tg_ctx *ctx, const tg_op_def *def, tg_tensor *const *in, void *user) {
    double eps = strtod(tg_registry_arg(user, "eps"), NULL);
    return tg_op_apply(ctx, def, 1, in, &eps);
}
static tg_tensor *fw(tg_ctx *ctx, tg_tensor *const *in, void *user) { return apply(ctx, &LN, in, user); }
static tg_tensor *fw_bug(tg_ctx *ctx, tg_tensor *const *in, void *user) { return apply(ctx, &LN_BUG, in, user); }

static const char *const VARIANTS[] = {"3x5", "1x8", "4x2;eps=0.1", NULL};

static const tg_op_info OPS[] = {
    {.def = &LN,
     .summary = "a learner's LayerNorm over the last dim, no gain or bias",
     .spec_help = "NxC;eps=E: rows of C elements (float64)",
     .variants = VARIANTS,
     .n_variants = 3,
     .build = tg_registry_build_ranges,
     .forward = fw},
    {.def = &LN_BUG,
     .summary = "the same with the - mean(dy) term dropped from dx",
     .spec_help = "NxC;eps=E: rows of C elements (float64)",
     .variants = VARIANTS,
     .n_variants = 3,
     .build = tg_registry_build_ranges,
     .forward = fw_bug},
};

TG_GRADCHECK_PLUGIN("learner-layernorm", OPS, 2)

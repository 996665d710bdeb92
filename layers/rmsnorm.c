/* RMSNorm: the fused differentiable op (one tape record, saving only rstd
 * per row) and the module with PyTorch's options.
 *
 * x is viewed as N rows of C elements, C the product of the normalized
 * (trailing) dims; gamma and beta have the normalized shape, i.e. C
 * elements. The row kernels are in layers/rmsnorm_kernel.inc
 * (layers/norm_kernels.h); the derivation is in
 * docs/normalization-gradients.md. */
#include "autograd/tape.h"
#include "layers/module.h"
#include "layers/norm_kernels.h"

/* Forward was, per row,  r = 1 / sqrt(mean_j x_j^2 + eps),
 *   y_i = g_i x_i r + b_i.
 * With xhat_i = x_i r and u_i = g_i dy_i, the chain rule through r
 * (dr/dx_j = -r^3 x_j / C) gives
 *   dx_i += r (u_i - xhat_i mean_j(u_j xhat_j))
 *   dg_i += sum over rows of dy_i xhat_i
 *   db_i += sum over rows of dy_i
 * all from x, g and the saved r, in one pass over the rows. */
static void rmsnorm_backward(tg_ctx *ctx, tg_node *n) {
    const tg_tensor *dy = n->out->grad;
    tg_tensor *x = n->in[0], *g = n->in[1], *b = n->in[2];
    const int64_t N = n->i[0], C = n->i[1];
    tg_tensor *dx = tg_grad_of(ctx, x), *dg = tg_grad_of(ctx, g), *db = tg_grad_of(ctx, b);
    if (!tg_ok(ctx)) return;
    const double *rstd = n->saved;
    if (x->dtype == TG_F64)
        tg_rmsnorm_backward_f64(dx ? dx->data : NULL, dg ? dg->data : NULL, db ? db->data : NULL, dy->data, x->data,
                                g ? g->data : NULL, rstd, N, C, tg_threads(ctx));
    else
        tg_rmsnorm_backward_f32(dx ? dx->data : NULL, dg ? dg->data : NULL, db ? db->data : NULL, dy->data, x->data,
                                g ? g->data : NULL, rstd, N, C, tg_threads(ctx));
}

tg_tensor *tg_rmsnorm_fused(tg_ctx *ctx, tg_tensor *x, tg_tensor *gamma, tg_tensor *beta, int ndim_norm,
                            double eps) {
    int64_t N, C;
    if (!tg_norm_check_args(ctx, __func__, x, gamma, beta, ndim_norm, eps, &N, &C)) return NULL;
    tg_tensor *y = tg_new_like(ctx, __func__, x);
    if (!y) return NULL;
    tg_tensor *in[3] = {x, gamma, beta};
    double *rstd = NULL;
    tg_node *n = tg_record(ctx, "rmsnorm", rmsnorm_backward, y, 3, in);
    if (n) {
        n->i[0] = N, n->i[1] = C;
        n->f[0] = eps;
        /* saved: rstd per row; kept by pointer: x (and gamma) */
        rstd = tg_node_save(ctx, n, (size_t)(N > 0 ? N : 1) * sizeof *rstd);
        size_t es = tg_esize(x->dtype);
        tg_node_count_saved(ctx, n, (size_t)x->numel * es + (gamma ? (size_t)C * es : 0));
    }
    if (!tg_ok(ctx)) return NULL;
    if (x->dtype == TG_F64)
        tg_rmsnorm_forward_f64(y->data, rstd, x->data, gamma ? gamma->data : NULL, beta ? beta->data : NULL, N, C,
                               eps, tg_threads(ctx));
    else
        tg_rmsnorm_forward_f32(y->data, rstd, x->data, gamma ? gamma->data : NULL, beta ? beta->data : NULL, N, C,
                               eps, tg_threads(ctx));
    return y;
}

/* ---- the module ------------------------------------------------------------------ */

static size_t rmsnorm_repr(const tg_module *m, char *buf, size_t size) {
    const tg_rmsnorm *l = (const tg_rmsnorm *)m;
    return tg_norm_repr(buf, size, "RMSNorm", l->ndim, l->normalized_shape, l->eps, l->affine, l->bias);
}

static bool rmsnorm_params_m(tg_ctx *ctx, tg_module *m, tg_params *list) {
    tg_rmsnorm *l = (tg_rmsnorm *)m;
    if (l->gamma && !tg_params_add(ctx, list, m->name, "gamma", l->gamma, false)) return false;
    return !l->beta || tg_params_add(ctx, list, m->name, "beta", l->beta, false);
}

static int64_t rmsnorm_numel(const tg_module *m) {
    const tg_rmsnorm *l = (const tg_rmsnorm *)m;
    return (l->gamma ? l->gamma->numel : 0) + (l->beta ? l->beta->numel : 0);
}

static void rmsnorm_free_m(tg_ctx *ctx, tg_module *m) {
    tg_rmsnorm *l = (tg_rmsnorm *)m;
    tg_tensor_free(ctx, l->gamma);
    tg_tensor_free(ctx, l->beta);
    tg_heap_free(ctx, l);
}

static const tg_module_ops RMSNORM_OPS = {rmsnorm_repr, rmsnorm_params_m, rmsnorm_numel, rmsnorm_free_m};

tg_rmsnorm *tg_rmsnorm_new(tg_ctx *ctx, const char *name, int ndim, const int64_t *normalized_shape, double eps,
                           bool affine, bool bias, tg_dtype dtype) {
    if (!tg_norm_check_new(ctx, __func__, ndim, normalized_shape, eps, dtype)) return NULL;
    tg_rmsnorm *l = tg_module_alloc(ctx, __func__, sizeof *l, "RMSNorm", name, dtype, &RMSNORM_OPS);
    if (!l) return NULL;
    l->ndim = ndim;
    for (int d = 0; d < ndim; d++) l->normalized_shape[d] = normalized_shape[d];
    for (int d = ndim; d < TG_MAX_DIMS; d++) l->normalized_shape[d] = 1;
    l->eps = eps;
    l->affine = affine;
    l->bias = affine && bias; /* no affine: no parameters at all (PyTorch) */
    if (l->affine) l->gamma = tg_norm_param(ctx, dtype, ndim, normalized_shape, 1.0);
    if (l->bias) l->beta = tg_norm_param(ctx, dtype, ndim, normalized_shape, 0.0);
    if (!tg_ok(ctx)) {
        rmsnorm_free_m(ctx, &l->base);
        return NULL;
    }
    return l;
}

tg_tensor *tg_rmsnorm_forward(tg_ctx *ctx, tg_rmsnorm *layer, tg_tensor *x) {
    if (!tg_live(ctx)) return NULL;
    if (!layer) {
        tg_error(ctx, TG_ERR_NULL, __func__, "argument 'layer' is NULL");
        return NULL;
    }
    if (!tg_norm_check_input(ctx, __func__, x, layer->ndim, layer->normalized_shape, layer->base.dtype)) return NULL;
    return tg_rmsnorm_fused(ctx, x, layer->gamma, layer->beta, layer->ndim, layer->eps);
}

bool tg_rmsnorm_params(tg_ctx *ctx, tg_rmsnorm *layer, tg_params *list) {
    return tg_module_params(ctx, TG_MODULE(layer), list);
}

void tg_rmsnorm_free(tg_ctx *ctx, tg_rmsnorm *layer) {
    if (ctx && layer) rmsnorm_free_m(ctx, &layer->base);
}

/* LayerNorm: the fused differentiable op (one tape record, saving only mean
 * and rstd per row) and the module with PyTorch's options.
 *
 * x is viewed as N rows of C elements, C the product of the normalized
 * (trailing) dims; gamma and beta have the normalized shape, i.e. C
 * elements. The row kernels are in layers/layernorm_kernel.inc
 * (layers/norm_kernels.h); the derivation is in
 * docs/normalization-gradients.md. */
#include "autograd/tape.h"
#include "layers/module.h"
#include "layers/norm_kernels.h"

/* Forward was, per row,  mu = mean_j x_j,  var = mean_j (x_j - mu)^2,
 *   r = 1 / sqrt(var + eps),  xhat_i = (x_i - mu) r,  y_i = g_i xhat_i + b_i.
 * With u_i = g_i dy_i, the chain rule through mu and r
 * (dxhat_i/dx_j = r (delta_ij - 1/C - xhat_i xhat_j / C)) gives
 *   dx_i += r (u_i - mean_j u_j - xhat_i mean_j(u_j xhat_j))
 *   dg_i += sum over rows of dy_i xhat_i
 *   db_i += sum over rows of dy_i
 * all from x, g and the saved mu and r, in one pass over the rows. */
static void layernorm_backward(tg_ctx *ctx, tg_node *n) {
    const tg_tensor *dy = n->out->grad;
    tg_tensor *x = n->in[0], *g = n->in[1], *b = n->in[2];
    const int64_t N = n->i[0], C = n->i[1];
    tg_tensor *dx = tg_grad_of(ctx, x), *dg = tg_grad_of(ctx, g), *db = tg_grad_of(ctx, b);
    if (!tg_ok(ctx)) return;
    const double *mean = n->saved, *rstd = mean + N;
    if (x->dtype == TG_F64)
        tg_layernorm_backward_f64(dx ? dx->data : NULL, dg ? dg->data : NULL, db ? db->data : NULL, dy->data,
                                  x->data, g ? g->data : NULL, mean, rstd, N, C, tg_threads(ctx));
    else
        tg_layernorm_backward_f32(dx ? dx->data : NULL, dg ? dg->data : NULL, db ? db->data : NULL, dy->data,
                                  x->data, g ? g->data : NULL, mean, rstd, N, C, tg_threads(ctx));
}

tg_tensor *tg_layernorm_fused(tg_ctx *ctx, tg_tensor *x, tg_tensor *gamma, tg_tensor *beta, int ndim_norm,
                              double eps) {
    int64_t N, C;
    if (!tg_norm_check_args(ctx, __func__, x, gamma, beta, ndim_norm, eps, &N, &C)) return NULL;
    tg_tensor *y = tg_new_like(ctx, __func__, x);
    if (!y) return NULL;
    tg_tensor *in[3] = {x, gamma, beta};
    double *mean = NULL, *rstd = NULL;
    tg_node *n = tg_record(ctx, "layernorm", layernorm_backward, y, 3, in);
    if (n) {
        n->i[0] = N, n->i[1] = C;
        n->f[0] = eps;
        /* saved: mean and rstd per row; kept by pointer: x (and gamma) */
        mean = tg_node_save(ctx, n, (size_t)(N > 0 ? 2 * N : 1) * sizeof *mean);
        rstd = mean ? mean + N : NULL;
        size_t es = tg_esize(x->dtype);
        tg_node_count_saved(ctx, n, (size_t)x->numel * es + (gamma ? (size_t)C * es : 0));
    }
    if (!tg_ok(ctx)) return NULL;
    if (x->dtype == TG_F64)
        tg_layernorm_forward_f64(y->data, mean, rstd, x->data, gamma ? gamma->data : NULL,
                                 beta ? beta->data : NULL, N, C, eps, tg_threads(ctx));
    else
        tg_layernorm_forward_f32(y->data, mean, rstd, x->data, gamma ? gamma->data : NULL,
                                 beta ? beta->data : NULL, N, C, eps, tg_threads(ctx));
    return y;
}

/* ---- the module ------------------------------------------------------------------ */

static size_t layernorm_repr(const tg_module *m, char *buf, size_t size) {
    const tg_layernorm *l = (const tg_layernorm *)m;
    return tg_norm_repr(buf, size, "LayerNorm", l->ndim, l->normalized_shape, l->eps, l->affine, l->bias);
}

static bool layernorm_params_m(tg_ctx *ctx, tg_module *m, tg_params *list) {
    tg_layernorm *l = (tg_layernorm *)m;
    if (l->gamma && !tg_params_add(ctx, list, m->name, "gamma", l->gamma, false)) return false;
    return !l->beta || tg_params_add(ctx, list, m->name, "beta", l->beta, false);
}

static int64_t layernorm_numel(const tg_module *m) {
    const tg_layernorm *l = (const tg_layernorm *)m;
    return (l->gamma ? l->gamma->numel : 0) + (l->beta ? l->beta->numel : 0);
}

static void layernorm_free_m(tg_ctx *ctx, tg_module *m) {
    tg_layernorm *l = (tg_layernorm *)m;
    tg_tensor_free(ctx, l->gamma);
    tg_tensor_free(ctx, l->beta);
    tg_heap_free(ctx, l);
}

static const tg_module_ops LAYERNORM_OPS = {layernorm_repr, layernorm_params_m, layernorm_numel, layernorm_free_m};

tg_layernorm *tg_layernorm_new(tg_ctx *ctx, const char *name, int ndim, const int64_t *normalized_shape,
                               double eps, bool affine, bool bias, tg_dtype dtype) {
    if (!tg_norm_check_new(ctx, __func__, ndim, normalized_shape, eps, dtype)) return NULL;
    tg_layernorm *l = tg_module_alloc(ctx, __func__, sizeof *l, "LayerNorm", name, dtype, &LAYERNORM_OPS);
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
        layernorm_free_m(ctx, &l->base);
        return NULL;
    }
    return l;
}

tg_tensor *tg_layernorm_forward(tg_ctx *ctx, tg_layernorm *layer, tg_tensor *x) {
    if (!tg_live(ctx)) return NULL;
    if (!layer) {
        tg_error(ctx, TG_ERR_NULL, __func__, "argument 'layer' is NULL");
        return NULL;
    }
    if (!tg_norm_check_input(ctx, __func__, x, layer->ndim, layer->normalized_shape, layer->base.dtype)) return NULL;
    return tg_layernorm_fused(ctx, x, layer->gamma, layer->beta, layer->ndim, layer->eps);
}

bool tg_layernorm_params(tg_ctx *ctx, tg_layernorm *layer, tg_params *list) {
    return tg_module_params(ctx, TG_MODULE(layer), list);
}

void tg_layernorm_free(tg_ctx *ctx, tg_layernorm *layer) {
    if (ctx && layer) layernorm_free_m(ctx, &layer->base);
}

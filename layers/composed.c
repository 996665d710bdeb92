/* The composed twins of the fused norms: the same functions built only from
 * primitive differentiable ops, so autograd derives their backward record
 * by record. They exist to be compared with the fused ops
 * (tests/test_fused_vs_composed.c): same outputs and gradients, but many
 * tape records, each keeping its own inputs or outputs alive for backward,
 * where the fused op keeps x, gamma and one or two numbers per row.
 *
 * x is viewed as N rows of C elements (tg_reshape, which shares the data);
 * the row statistics are (N,1) columns that broadcast over the rows. */
#include "layers/module.h"

/* y = x / sqrt(mean_j x_j^2 + eps) * gamma + beta, from
 *   rows  = reshape(x, (N,C))
 *   ms    = mean(rows^2, axis 1)           (N,1)
 *   s     = sqrt(ms + eps)                 (N,1)
 *   xhat  = rows / s                       (N,C)
 *   y     = reshape(xhat, x.shape) * gamma + beta
 * 7 records without gamma and beta (+1 each). */
tg_tensor *tg_rmsnorm_composed(tg_ctx *ctx, tg_tensor *x, tg_tensor *gamma, tg_tensor *beta, int ndim_norm,
                               double eps) {
    int64_t N, C;
    if (!tg_norm_check_args(ctx, "tg_rmsnorm_composed", x, gamma, beta, ndim_norm, eps, &N, &C)) return NULL;
    tg_tensor *rows = tg_reshape(ctx, x, TG_SHAPE(N, C));
    tg_tensor *ms = tg_mean_axis(ctx, tg_pow_scalar(ctx, rows, 2.0), 1, true);
    tg_tensor *s = tg_sqrt(ctx, tg_add_scalar(ctx, ms, eps));
    tg_tensor *y = tg_reshape(ctx, tg_div(ctx, rows, s), x->ndim, x->shape);
    if (gamma) y = tg_mul(ctx, y, gamma);
    if (beta) y = tg_add(ctx, y, beta);
    return tg_ok(ctx) ? y : NULL;
}

/* y = (x - mu) / sqrt(var + eps) * gamma + beta, from
 *   rows  = reshape(x, (N,C))
 *   mu    = mean(rows, axis 1)             (N,1)
 *   d     = rows - mu                      (N,C)
 *   var   = mean(d^2, axis 1)              (N,1)   biased, two-pass
 *   s     = sqrt(var + eps)                (N,1)
 *   xhat  = d / s                          (N,C)
 *   y     = reshape(xhat, x.shape) * gamma + beta
 * 9 records without gamma and beta (+1 each). */
tg_tensor *tg_layernorm_composed(tg_ctx *ctx, tg_tensor *x, tg_tensor *gamma, tg_tensor *beta, int ndim_norm,
                                 double eps) {
    int64_t N, C;
    if (!tg_norm_check_args(ctx, "tg_layernorm_composed", x, gamma, beta, ndim_norm, eps, &N, &C)) return NULL;
    tg_tensor *rows = tg_reshape(ctx, x, TG_SHAPE(N, C));
    tg_tensor *mu = tg_mean_axis(ctx, rows, 1, true);
    tg_tensor *d = tg_sub(ctx, rows, mu);
    tg_tensor *var = tg_mean_axis(ctx, tg_pow_scalar(ctx, d, 2.0), 1, true);
    tg_tensor *s = tg_sqrt(ctx, tg_add_scalar(ctx, var, eps));
    tg_tensor *y = tg_reshape(ctx, tg_div(ctx, d, s), x->ndim, x->shape);
    if (gamma) y = tg_mul(ctx, y, gamma);
    if (beta) y = tg_add(ctx, y, beta);
    return tg_ok(ctx) ? y : NULL;
}

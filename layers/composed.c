/* The composed twins of the fused norms: the same functions built only from
 * primitive differentiable ops, so autograd derives their backward record
 * by record. They exist to be compared with the fused ops
 * (tests/test_fused_vs_composed.c): same outputs and gradients, but many
 * tape records, each keeping its own inputs or outputs alive for backward,
 * where the fused op keeps x, gamma and one or two numbers per row.
 *
 * The row statistics are columns of size 1 (keepdim) that broadcast back
 * over the rows.
 *
 * On a bfloat16 / float16 x they run as PyTorch runs such a norm: each op
 * computes in float32 and stores its result in x's dtype, so x^2 overflows
 * float16 from |x| >= 256 and underflows below ~2^-12, where the fused ops
 * (statistics in float32, one rounding at the end) stay right
 * (tests/test_composed_lowp.c; docs/normalization-gradients.md, Low
 * precision). */
#include "layers/module.h"
#include "layers/norm.h"
#include "layers/ops.h"

/* The rows: x itself when one dim is normalized (the statistics are then
 * taken over axis -1 and broadcast back over any leading dims); otherwise
 * x reshaped to (N, C) (tg_reshape shares the data; one more record, and
 * one more to reshape the result back). */
static tg_tensor *rows_of(tg_ctx *ctx, tg_tensor *x, int ndim_norm, int64_t N, int64_t C) {
    return ndim_norm == 1 ? x : tg_reshape(ctx, x, TG_SHAPE(N, C));
}

/* xhat (in rows) back to x's shape, then * gamma + beta. */
static tg_tensor *finish(tg_ctx *ctx, tg_tensor *xhat, tg_tensor *x, tg_tensor *gamma, tg_tensor *beta, int ndim_norm) {
    tg_tensor *y = ndim_norm == 1 ? xhat : tg_reshape(ctx, xhat, x->ndim, x->shape);
    if (gamma) y = tg_mul(ctx, y, gamma);
    if (beta) y = tg_add(ctx, y, beta);
    return tg_ok(ctx) ? y : NULL;
}

/* y = x / sqrt(mean_j x_j^2 + eps) * gamma + beta, as PyTorch users write
 * it: x * rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g (+ b):
 *   a    = rows^2                 pow_scalar      (N,C)
 *   m    = mean(a, axis -1)       mean_axis       (N,1)
 *   t    = m + eps                add_scalar      (N,1)
 *   r    = t^(-1/2)               pow_scalar      (N,1)
 *   xhat = rows * r               mul             (N,C)
 *   y    = xhat * gamma + beta    mul, add
 * 6 records with gamma and no beta (+2 reshapes over several dims). */
tg_tensor *tg_rmsnorm_composed(tg_ctx *ctx, tg_tensor *x, tg_tensor *gamma, tg_tensor *beta, int ndim_norm,
                               double eps) {
    int64_t N, C;
    if (!tg_norm_check_args_lowp(ctx, __func__, x, gamma, beta, ndim_norm, eps, &N, &C)) return NULL;
    tg_tensor *rows = rows_of(ctx, x, ndim_norm, N, C);
    tg_tensor *m = tg_mean_axis(ctx, tg_pow_scalar(ctx, rows, 2.0), -1, true);
    tg_tensor *r = tg_pow_scalar(ctx, tg_add_scalar(ctx, m, eps), -0.5);
    return finish(ctx, tg_mul(ctx, rows, r), x, gamma, beta, ndim_norm);
}

/* y = (x - mu) / sqrt(var + eps) * gamma + beta, biased variance, two-pass:
 *   mu   = mean(rows, axis -1)    mean_axis       (N,1)
 *   d    = rows - mu              sub             (N,C)
 *   var  = mean(d^2, axis -1)     pow_scalar, mean_axis
 *   r    = (var + eps)^(-1/2)     add_scalar, pow_scalar
 *   xhat = d * r                  mul             (N,C)
 *   y    = xhat * gamma + beta    mul, add
 * 9 records with gamma and beta (+2 reshapes over several dims). */
tg_tensor *tg_layernorm_composed(tg_ctx *ctx, tg_tensor *x, tg_tensor *gamma, tg_tensor *beta, int ndim_norm,
                                 double eps) {
    int64_t N, C;
    if (!tg_norm_check_args_lowp(ctx, __func__, x, gamma, beta, ndim_norm, eps, &N, &C)) return NULL;
    tg_tensor *rows = rows_of(ctx, x, ndim_norm, N, C);
    tg_tensor *d = tg_sub(ctx, rows, tg_mean_axis(ctx, rows, -1, true));
    tg_tensor *var = tg_mean_axis(ctx, tg_pow_scalar(ctx, d, 2.0), -1, true);
    tg_tensor *r = tg_pow_scalar(ctx, tg_add_scalar(ctx, var, eps), -0.5);
    return finish(ctx, tg_mul(ctx, d, r), x, gamma, beta, ndim_norm);
}

/* The twins as the registry sees them (layers/ops.h): the fused ops'
 * arguments, draws and steps. */
const tg_op_def tg_rmsnorm_composed_op =
    TG_OP("rmsnorm_composed", NULL, NULL, NULL, .args = TG_RMSNORM_ARGS, .inputs = TG_NORM_INPUTS, .f32 = {.h = 1e-2});
const tg_op_def tg_layernorm_composed_op = TG_OP("layernorm_composed", NULL, NULL, NULL, .args = TG_LAYERNORM_ARGS,
                                                 .inputs = TG_NORM_INPUTS, .f32 = {.h = 1e-2});

/* LayerNorm as a fused differentiable op: one tape record, saving only mean
 * and rstd per row. The module (tg_layernorm_new, ...) is layers/norm.c,
 * shared with RMSNorm.
 *
 * x is viewed as N rows of C elements, C the product of the normalized
 * (trailing) dims; gamma and beta have the normalized shape, i.e. C
 * elements. The row kernels are in layers/layernorm_kernel.inc (declared
 * in layers/norm_kernels.h); the derivation in full is in
 * docs/normalization-gradients.md. */
#include "layers/norm.h"
#include "layers/norm_kernels.h"
#include "layers/ops.h"
#include "tensor/profile.h"

/* Forward was, per row,  mu = mean_j x_j,  var = mean_j (x_j - mu)^2,
 *   r = 1 / sqrt(var + eps),  xhat_i = (x_i - mu) r,  y_i = g_i xhat_i + b_i.
 * With u_i = g_i dy_i, the chain rule through mu and r
 * (dxhat_i/dx_j = r (delta_ij - 1/C - xhat_i xhat_j / C)) gives
 *   dx_i += r (u_i - mean_j u_j - xhat_i mean_j(u_j xhat_j))
 *   dg_i += sum over rows of dy_i xhat_i
 *   db_i += sum over rows of dy_i
 * all from x, g and the saved mu and r, in one pass over the rows (the row
 * kernel, ln_row_backward, is in layers/layernorm_kernel.inc). */
static void layernorm_backward(tg_ctx *ctx, tg_node *n) {
    tg_norm_bwd a;
    if (!tg_norm_grads(ctx, n, &a)) return;
    const double *mean = a.saved, *rstd = mean + a.N;
    if (a.f64) tg_layernorm_backward_f64(a.dx, a.dg, a.db, a.dy, a.x, a.g, mean, rstd, a.N, a.C, a.threads);
    else tg_layernorm_backward_f32(a.dx, a.dg, a.db, a.dy, a.x, a.g, mean, rstd, a.N, a.C, a.threads);
}

tg_tensor *tg_layernorm_fused(tg_ctx *ctx, tg_tensor *x, tg_tensor *gamma, tg_tensor *beta, int ndim_norm, double eps) {
    if (x && tg_ok(ctx) && !tg_stale(ctx, x) && tg_is_lowp(x->dtype)) /* bfloat16, float16: layers/norm_lowp.c */
        return tg_norm_lowp(ctx, __func__, true, x, gamma, beta, ndim_norm, eps);
    /* saved: mean and rstd, one each per row; kept by pointer: x (and gamma) */
    tg_norm_fwd a;
    if (!tg_norm_record(ctx, __func__, &tg_layernorm_op, x, gamma, beta, ndim_norm, eps, 2, &a)) return NULL;
    double *mean = a.saved, *rstd = mean ? mean + a.N : NULL;
    if (a.f64) tg_layernorm_forward_f64(a.y, mean, rstd, a.x, a.g, a.b, a.N, a.C, eps, a.threads);
    else tg_layernorm_forward_f32(a.y, mean, rstd, a.x, a.g, a.b, a.N, a.C, eps, a.threads);
    tg_profile_forward_end(ctx, tg_layernorm_op.name); /* recorded before it ran */
    return a.out;
}

/* A check's arguments and draws are layers/ops.h's; its float32 step is
 * larger than the default: a perturbed element moves its whole row. */
const tg_op_def tg_layernorm_op = TG_OP("layernorm", layernorm_backward, tg_layernorm_grad, tg_layernorm_jvp,
                                        .args = TG_LAYERNORM_ARGS, .inputs = TG_NORM_INPUTS, .f32 = {.h = 1e-2});

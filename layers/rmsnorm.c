/* RMSNorm as a fused differentiable op: one tape record, saving only rstd
 * per row. The module (tg_rmsnorm_new, ...) is layers/norm.c, shared with
 * LayerNorm.
 *
 * x is viewed as N rows of C elements, C the product of the normalized
 * (trailing) dims; gamma and beta have the normalized shape, i.e. C
 * elements. The row kernels are in layers/rmsnorm_kernel.inc (declared in
 * layers/norm_kernels.h); the derivation in full is in
 * docs/normalization-gradients.md. */
#include "layers/norm.h"
#include "layers/norm_kernels.h"
#include "layers/ops.h"
#include "tensor/profile.h"

/* Forward was, per row,  r = 1 / sqrt(mean_j x_j^2 + eps),
 *   y_i = g_i x_i r + b_i.
 * With xhat_i = x_i r and u_i = g_i dy_i, the chain rule through r
 * (dr/dx_j = -r^3 x_j / C) gives
 *   dx_i += r (u_i - xhat_i mean_j(u_j xhat_j))
 *   dg_i += sum over rows of dy_i xhat_i
 *   db_i += sum over rows of dy_i
 * all from x, g and the saved r, in one pass over the rows (the row
 * kernel, rms_row_backward, is in layers/rmsnorm_kernel.inc). */
static void rmsnorm_backward(tg_ctx *ctx, tg_node *n) {
    tg_norm_bwd a;
    if (!tg_norm_grads(ctx, n, &a)) return;
    const double *rstd = a.saved;
    if (a.f64) tg_rmsnorm_backward_f64(a.dx, a.dg, a.db, a.dy, a.x, a.g, rstd, a.N, a.C, a.threads);
    else tg_rmsnorm_backward_f32(a.dx, a.dg, a.db, a.dy, a.x, a.g, rstd, a.N, a.C, a.threads);
}

tg_tensor *tg_rmsnorm_fused(tg_ctx *ctx, tg_tensor *x, tg_tensor *gamma, tg_tensor *beta, int ndim_norm, double eps) {
    if (x && tg_ok(ctx) && !tg_stale(ctx, x) && tg_is_lowp(x->dtype)) /* bfloat16, float16: layers/norm_lowp.c */
        return tg_norm_lowp(ctx, __func__, false, x, gamma, beta, ndim_norm, eps);
    /* saved: rstd, one per row; kept by pointer: x (and gamma) */
    tg_norm_fwd a;
    if (!tg_norm_record(ctx, __func__, &tg_rmsnorm_op, x, gamma, beta, ndim_norm, eps, 1, &a)) return NULL;
    double *rstd = a.saved;
    if (a.f64) tg_rmsnorm_forward_f64(a.y, rstd, a.x, a.g, a.b, a.N, a.C, eps, a.threads);
    else tg_rmsnorm_forward_f32(a.y, rstd, a.x, a.g, a.b, a.N, a.C, eps, a.threads);
    tg_profile_forward_end(ctx, tg_rmsnorm_op.name); /* recorded before it ran */
    return a.out;
}

/* A check's arguments and draws are layers/ops.h's; its float32 step is
 * larger than the default: a perturbed element moves its whole row. */
const tg_op_def tg_rmsnorm_op = TG_OP("rmsnorm", rmsnorm_backward, tg_rmsnorm_grad, tg_rmsnorm_jvp,
                                      .args = TG_RMSNORM_ARGS, .inputs = TG_NORM_INPUTS, .f32 = {.h = 1e-2});

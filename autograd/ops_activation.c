/* Activations: relu, leaky_relu, sigmoid, tanh, gelu (exact and tanh
 * approximation), silu.
 *
 * The kernels (each forward beside its backward, with the derivation) are
 * in ops_activation.inc, instantiated here for float and double; the glue
 * is the shared unary driver (autograd/unary.h). */

#include "autograd/lowp.h"
#include "autograd/unary.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#define TG_TEMPLATE "autograd/ops_activation.inc"
#include "tensor/instantiate.h"

TG_UNARY(relu, "tg_relu", true, false)
TG_UNARY(leaky_relu, "tg_leaky_relu", true, false)
TG_UNARY(sigmoid, "tg_sigmoid", false, true)
TG_UNARY(tanh, "tg_tanh", false, true)
TG_UNARY(gelu, "tg_gelu", true, false)
TG_UNARY(gelu_tanh, "tg_gelu", true, false)
TG_UNARY(silu, "tg_silu", true, false)

tg_tensor *tg_relu(tg_ctx *ctx, tg_tensor *x) { return tg_unary_apply(ctx, &relu_OP, relu_bwd, x, 0); }

tg_tensor *tg_leaky_relu(tg_ctx *ctx, tg_tensor *x, double negative_slope) {
    if (tg_lowp_args(ctx, __func__, 1, &x))
        return tg_lowp_out(ctx, tg_leaky_relu(ctx, tg_lowp_in(ctx, x), negative_slope), x);
    if (!tg_check_arg(ctx, __func__, "x", x) || !tg_check_finite(ctx, __func__, "negative_slope", negative_slope))
        return NULL;
    return tg_unary_apply(ctx, &leaky_relu_OP, leaky_relu_bwd, x, negative_slope);
}

tg_tensor *tg_sigmoid(tg_ctx *ctx, tg_tensor *x) { return tg_unary_apply(ctx, &sigmoid_OP, sigmoid_bwd, x, 0); }
tg_tensor *tg_tanh(tg_ctx *ctx, tg_tensor *x) { return tg_unary_apply(ctx, &tanh_OP, tanh_bwd, x, 0); }

tg_tensor *tg_gelu(tg_ctx *ctx, tg_tensor *x, bool tanh_approx) {
    return tanh_approx ? tg_unary_apply(ctx, &gelu_tanh_OP, gelu_tanh_bwd, x, 0)
                       : tg_unary_apply(ctx, &gelu_OP, gelu_bwd, x, 0);
}

tg_tensor *tg_silu(tg_ctx *ctx, tg_tensor *x) { return tg_unary_apply(ctx, &silu_OP, silu_bwd, x, 0); }

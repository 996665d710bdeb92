/* Low precision in autograd: the differentiable dtype conversion.
 *
 * bfloat16 and float16 are storage types (tapegrad/tensor.h, Low
 * precision): an op with a low-precision path reads float32, computes in
 * float32 and rounds once to its input's dtype. tg_cast moves a value
 * between dtypes on the tape, so a float32 computation can start from a
 * bfloat16 tensor and its gradient comes back in bfloat16. */
#include "autograd/tape.h"

#include <string.h>

/* v rounded to dtype and read back (tensor/half.h; float64 is exact). */
static double round_to(tg_dtype dtype, double v) {
    switch (dtype) {
    case TG_F64: return v;
    case TG_BF16: return tg_bf16_to_f32(tg_f32_to_bf16((float)v));
    case TG_F16: return tg_f16_to_f32(tg_f32_to_f16((float)v));
    default: return (float)v;
    }
}

/* Forward: y = round_to(dtype, x), elementwise (tensor/half.h).
 * The rounding counts as the identity for the gradient (its true derivative
 * is 0 almost everywhere, which would stop every gradient; PyTorch's .to()
 * does the same): dy/dx = 1, so dx += dy converted back to x's dtype. The
 * sum is made in float64, which holds the sum of two float32 values
 * exactly, then rounded to x's dtype: for float32 that is float32's own
 * addition, for 16 bits the float32 sum rounded once more (as every
 * low-precision op stores its float32 result). */
static void cast_backward(tg_ctx *ctx, tg_node *n) {
    const tg_tensor *dy = n->out->grad;
    tg_tensor *dx = tg_grad_of(ctx, n->in[0]);
    if (!dx) return;
    if (dx->dtype == TG_F32 && dy->dtype == TG_F32) { /* the common case, vectorizable */
        float *d = dx->data;
        const float *g = dy->data;
        for (int64_t i = 0; i < dx->numel; i++) d[i] += g[i];
        return;
    }
    for (int64_t i = 0; i < dx->numel; i++) tg_store(dx, i, tg_load(dx, i) + round_to(dx->dtype, tg_load(dy, i)));
}

tg_tensor *tg_cast(tg_ctx *ctx, tg_tensor *x, tg_dtype dtype) {
    if (!tg_check_arg_any(ctx, __func__, "x", x)) return NULL;
    tg_tensor *y = tg_new_tensor(ctx, __func__, dtype, x->ndim, x->shape);
    if (!y) return NULL;
    tg_convert_n(y->data, dtype, x->data, x->dtype, (size_t)x->numel);
    tg_record(ctx, __func__, cast_backward, y, 1, &x);
    return tg_ok(ctx) ? y : NULL;
}

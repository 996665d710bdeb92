/* Low precision in autograd: the differentiable dtype conversion, and the
 * path every op takes on bfloat16 / float16 tensors.
 *
 * bfloat16 and float16 are storage types (tapegrad/tensor.h, Low
 * precision): an op reads float32, computes in float32 and rounds once to
 * its input's dtype. tg_cast moves a value between dtypes on the tape, so a
 * float32 computation can start from a bfloat16 tensor and its gradient
 * comes back in bfloat16; the ops' low-precision path (autograd/lowp.h) is
 * exactly that: cast in, the op's float32 path, cast out. */
#include "autograd/lowp.h"
#include "autograd/ops.h"
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
    if (dx->dtype == TG_F64 || dy->dtype == TG_F64) {
        for (int64_t i = 0; i < dx->numel; i++) tg_store(dx, i, tg_load(dx, i) + round_to(dx->dtype, tg_load(dy, i)));
        return;
    }
    /* float32 and 16 bits, in blocks: g = dy rounded to dx's dtype (by
     * tg_convert_n's vector code), then dx += g, the float32 sum rounded
     * once to dx's dtype (tg_lowp_accum). */
    enum { BLOCK = 1024 };
    uint16_t r16[BLOCK];
    const size_t ex = tg_esize(dx->dtype), ey = tg_esize(dy->dtype);
    for (int64_t i = 0; i < dx->numel; i += BLOCK) {
        const size_t len = (size_t)(dx->numel - i < BLOCK ? dx->numel - i : BLOCK);
        void *d = (char *)dx->data + (size_t)i * ex;
        const void *s = (const char *)dy->data + (size_t)i * ey;
        if (dx->dtype == TG_F32) { /* a 16-bit dy into a float32 dx: widened exactly */
            float g[BLOCK];
            tg_convert_n(g, TG_F32, s, dy->dtype, len);
            for (size_t j = 0; j < len; j++) ((float *)d)[j] += g[j];
        } else if (dy->dtype == dx->dtype) tg_lowp_accum(dx->dtype, d, s, len);
        else {
            tg_convert_n(r16, dx->dtype, s, dy->dtype, len);
            tg_lowp_accum(dx->dtype, d, r16, len);
        }
    }
}

void tg_lowp_accum(tg_dtype dt, void *dst, const void *src, size_t n) {
    enum { BLOCK = 1024 };
    float a[BLOCK], g[BLOCK];
    for (size_t i = 0; i < n; i += BLOCK) {
        const size_t len = n - i < BLOCK ? n - i : BLOCK;
        uint16_t *d = (uint16_t *)dst + i;
        tg_convert_n(a, TG_F32, d, dt, len);
        tg_convert_n(g, TG_F32, (const uint16_t *)src + i, dt, len);
        for (size_t j = 0; j < len; j++) a[j] += g[j];
        tg_convert_n(d, dt, a, TG_F32, len);
    }
}

/* y = tg_cast(x, dtype), the rounding counted as the identity: dx = dy cast
 * back to x's dtype. */
static bool cast_grad(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    dx[0] = tg_cast(ctx, dy, n->in[0]->dtype);
    return tg_ok(ctx);
}

/* y = tg_cast(x, dtype), linear (the rounding counted as the identity):
 * the tangent is cast the same way. */
static tg_tensor *cast_jvp(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) { return tg_cast(ctx, t[0], n->out->dtype); }

const tg_op_def tg_cast_op = {.name = "cast", .backward = cast_backward, .backward_graph = cast_grad, .jvp = cast_jvp};

tg_tensor *tg_cast(tg_ctx *ctx, tg_tensor *x, tg_dtype dtype) {
    if (!tg_check_arg_any(ctx, __func__, "x", x)) return NULL;
    tg_tensor *y = tg_new_tensor(ctx, __func__, dtype, x->ndim, x->shape);
    if (!y) return NULL;
    tg_convert_n(y->data, dtype, x->data, x->dtype, (size_t)x->numel);
    tg_record(ctx, &tg_cast_op, y, 1, &x);
    return tg_ok(ctx) ? y : NULL;
}

/* ---- the ops' low-precision path (autograd/lowp.h) ----------------------------- */

/* A tensor argument the op's own checks accept: not NULL, not stale. */
static bool usable(const tg_ctx *ctx, const tg_tensor *t) { return t && !tg_stale(ctx, t); }

bool tg_lowp_args(tg_ctx *ctx, const char *fn, int n, tg_tensor *const *in) {
    if (!tg_ok(ctx)) return false;
    const tg_tensor *lowp = NULL;
    for (int k = 0; k < n && !lowp; k++)
        if (usable(ctx, in[k]) && tg_is_lowp(in[k]->dtype)) lowp = in[k];
    if (!lowp) return false;
    for (int k = 0; k < n; k++)
        if (usable(ctx, in[k]) && in[k]->dtype != lowp->dtype) {
            tg_error(ctx, TG_ERR_DTYPE, fn,
                     "dtypes differ: %s and %s; an op takes one dtype (tg_cast one of them, differentiable)",
                     tg_dtype_name(lowp->dtype), tg_dtype_name(in[k]->dtype));
            break;
        }
    return true;
}

tg_tensor *tg_lowp_in(tg_ctx *ctx, tg_tensor *x) {
    return tg_ok(ctx) && usable(ctx, x) && tg_is_lowp(x->dtype) ? tg_cast(ctx, x, TG_F32) : x;
}

tg_tensor **tg_lowp_in_all(tg_ctx *ctx, int n, tg_tensor *const *in, tg_tensor **out) {
    for (int k = 0; k < n; k++) {
        int j = 0;
        while (j < k && in[j] != in[k]) j++;
        out[k] = j < k ? out[j] : tg_lowp_in(ctx, in[k]);
    }
    return out;
}

tg_tensor *tg_lowp_out(tg_ctx *ctx, tg_tensor *y, const tg_tensor *like) {
    return y ? tg_cast(ctx, y, like->dtype) : NULL;
}

tg_tensor *tg_lowp_unary(tg_ctx *ctx, tg_tensor *(*f)(tg_ctx *, tg_tensor *), tg_tensor *x) {
    return tg_lowp_out(ctx, f(ctx, tg_lowp_in(ctx, x)), x);
}

tg_tensor *tg_lowp_binary(tg_ctx *ctx, tg_tensor *(*f)(tg_ctx *, tg_tensor *, tg_tensor *), tg_tensor *a,
                          tg_tensor *b) {
    tg_tensor *w[2];
    tg_lowp_in_all(ctx, 2, (tg_tensor *[]){a, b}, w);
    return tg_lowp_out(ctx, f(ctx, w[0], w[1]), a);
}

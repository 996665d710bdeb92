/* The low-precision path of autograd's ops (autograd/ops_lowp.c).
 *
 * An op given bfloat16 / float16 tensors computes as PyTorch's CPU backend
 * does: its inputs widened to float32, its own float32 path, the result
 * rounded once to the input dtype. On the tape that is
 *     y = tg_cast(op(tg_cast(a, F32), tg_cast(b, F32), ...), dtype)
 * so the gradient flows back through tg_cast's backward (the identity,
 * rounded once into the 16-bit grad), and double backward and forward mode
 * follow tg_cast's rules. An op opts in with one line at its entry:
 *
 *   if (tg_lowp_args(ctx, __func__, 2, (tg_tensor *[]){a, b}))
 *       return tg_lowp_binary(ctx, tg_add, a, b);
 *   if (tg_lowp_args(ctx, __func__, 1, &x))
 *       return tg_lowp_out(ctx, tg_sum_axis(ctx, tg_lowp_in(ctx, x), axis, keepdim), x);
 *
 * The inner call runs the op's float32 path (its inputs are float32 now),
 * with the op's own checks: a bad shape is reported by the op, by name.
 *
 * Ops where the conversions would cost more than the op take 16 bits
 * natively with the same arithmetic, in one record: the shape ops (they
 * move bits; ops_shape.c), the unary ops (blocks widened, the float32
 * kernel, rounded once; unary.c) and an add of two tensors of one shape
 * (ops_elementwise.c); their gradients are added with tg_lowp_accum. */
#ifndef TG_AUTOGRAD_LOWP_H
#define TG_AUTOGRAD_LOWP_H

#include "tensor/internal.h"

/* True when one of the tensor inputs in[0..n) is bfloat16 / float16: the op
 * takes its low-precision path. When the inputs' dtypes differ (bfloat16
 * with float32, say) it also sets TG_ERR_DTYPE naming fn and both dtypes
 * (never a silent cast), so the path returns NULL. NULL and stale inputs
 * are skipped: they pass through tg_lowp_in, and the op's own checks
 * report them. False when ctx is in error. Integer arguments (indices,
 * targets) are not tensors and never count as mixing. */
bool tg_lowp_args(tg_ctx *ctx, const char *fn, int n, tg_tensor *const *in);
/* x widened to float32 on the tape (tg_cast) when it is 16-bit; any other
 * x (NULL, stale, float32) is returned as it is. */
tg_tensor *tg_lowp_in(tg_ctx *ctx, tg_tensor *x);
/* in[0..n) through tg_lowp_in into out[0..n), a tensor given twice widened
 * once (so its gradient is the float32 sum of both uses, rounded once).
 * Returns out. */
tg_tensor **tg_lowp_in_all(tg_ctx *ctx, int n, tg_tensor *const *in, tg_tensor **out);
/* y rounded once to like's dtype on the tape (tg_cast): like is the op's
 * 16-bit input. NULL (the inner op failed) passes through, like unread (it
 * may be the NULL or stale argument the op reported). */
tg_tensor *tg_lowp_out(tg_ctx *ctx, tg_tensor *y, const tg_tensor *like);
/* f(x) and f(a, b) through float32, out in the 16-bit dtype of the inputs
 * (b == a widened once, as tg_lowp_in_all). */
tg_tensor *tg_lowp_unary(tg_ctx *ctx, tg_tensor *(*f)(tg_ctx *, tg_tensor *), tg_tensor *x);
tg_tensor *tg_lowp_binary(tg_ctx *ctx, tg_tensor *(*f)(tg_ctx *, tg_tensor *, tg_tensor *), tg_tensor *a, tg_tensor *b);

/* dst[i] += src[i] for i < n, both of the 16-bit dtype dt: the float32 sum
 * rounded once to dt, as tg_cast's backward adds a gradient into a 16-bit
 * grad. The ops that only move data (reshape, permute, slice, concat)
 * accumulate their 16-bit gradients with it, so their native 16-bit path
 * gives the bits the path through float32 would. */
void tg_lowp_accum(tg_dtype dt, void *dst, const void *src, size_t n);

#endif

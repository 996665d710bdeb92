/* Rotary position embedding (RoPE; Su et al. 2021, "RoFormer"), in the
 * convention of Meta's original LLaMA code: the last dim (D, even) is D/2
 * consecutive pairs (x_2i, x_2i+1), and the pair of the token at position
 * p is rotated by the angle
 *   a_pi = p * theta_i,   theta_i = base^(-2i/D),   i = 0 .. D/2 - 1
 * (LLaMA: base 10000, freqs_cis = polar(1, outer(t, theta)) and
 * x viewed as complex numbers x_2i + j x_2i+1, times e^(j a_pi)):
 *   y_2i   = x_2i c - x_2i+1 s
 *   y_2i+1 = x_2i s + x_2i+1 c,      c = cos a_pi,  s = sin a_pi.
 * Positions count 0, 1, ... along the sequence dim `seq_axis`; every other
 * dim (batch, heads) shares them.
 *
 * The angles, cosines and sines are computed in double and rounded to T,
 * once per call into a (T, D/2) table. Backward needs nothing saved: the
 * rotation does not depend on x, so it recomputes the table.
 *
 * The kernels, written once for T (float, double), open the file, which
 * instantiates itself (tensor/instantiate.h) and so defines
 *   rope_table_f32  rope_kernel_f32  and the same with _f64. */
#ifdef T /* the kernels, compiled once per element type (tensor/instantiate.h) */

/* cs[p, i] = (cos a_pi, sin a_pi), a_pi = (p0 + p) base^(-2i/D), for
 * p < S, i < D/2: theta_i = pow(base, -2i/D) and a_pi = (p0 + p) * theta_i
 * in double, the cosine and sine of that double rounded to T. A position
 * gets the same bits whatever p0 and S.   cs: (S, D/2, 2) */
static void TG_FN(rope_table)(T *restrict cs, int64_t S, int64_t D, double base, int64_t p0) {
    const int64_t half = D / 2;
    for (int64_t i = 0; i < half; i++) {
        const double theta = pow(base, -(double)(2 * i) / (double)D);
        for (int64_t p = 0; p < S; p++) {
            const double a = (double)(p0 + p) * theta;
            cs[(p * half + i) * 2] = (T)cos(a);
            cs[(p * half + i) * 2 + 1] = (T)sin(a);
        }
    }
}

/* x seen as (outer, S, inner, D), S along the sequence dim; each row of D
 * at position p is rotated pair by pair with cs[p]:
 *   forward (sign +1):  y_2i   = x_2i c - x_2i+1 s,  y_2i+1 = x_2i s + x_2i+1 c
 *   backward (sign -1): the inverse rotation (by -a), added into y:
 *                       y_2i  += x_2i c + x_2i+1 s,  y_2i+1 += -x_2i s + x_2i+1 c
 * y, x: (outer, S, inner, D)   cs: (S, D/2, 2) */
static void TG_FN(rope_kernel)(T *restrict y, const T *restrict x, const T *restrict cs, int64_t outer, int64_t S,
                               int64_t inner, int64_t D, bool backward) {
    const int64_t half = D / 2;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t p = 0; p < S; p++) {
            const T *c = cs + p * half * 2;
            for (int64_t h = 0; h < inner; h++) {
                const int64_t off = ((o * S + p) * inner + h) * D;
                T *yr = y + off;
                const T *xr = x + off;
                if (backward) {
                    for (int64_t i = 0; i < half; i++) {
                        const T x0 = xr[2 * i], x1 = xr[2 * i + 1], co = c[2 * i], si = c[2 * i + 1];
                        yr[2 * i] += x0 * co + x1 * si;
                        yr[2 * i + 1] += x1 * co - x0 * si;
                    }
                } else {
                    for (int64_t i = 0; i < half; i++) {
                        const T x0 = xr[2 * i], x1 = xr[2 * i + 1], co = c[2 * i], si = c[2 * i + 1];
                        yr[2 * i] = x0 * co - x1 * si;
                        yr[2 * i + 1] = x0 * si + x1 * co;
                    }
                }
            }
        }
}

#else /* the op, compiled once */

#include "autograd/lowp.h"
#include "autograd/ops.h"
#include "autograd/tape.h"

#include <math.h>

#define TG_TEMPLATE "autograd/ops_rope.c"
#include "tensor/instantiate.h"

/* The rotation of x (its shape, the sequence axis, the base, the first
 * position p0) applied to in and written (or, backward, added) to out; the
 * table comes from the arena. */
static void rope_run(tg_ctx *ctx, const char *fn, const tg_tensor *x, int axis, double base, int64_t p0, void *out,
                     const void *in, bool backward) {
    const int64_t S = x->shape[axis], D = x->shape[x->ndim - 1];
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; d++) outer *= x->shape[d];
    for (int d = axis + 1; d < x->ndim - 1; d++) inner *= x->shape[d];
    if (x->numel == 0) return;
    void *cs = tg_arena_alloc_fn(ctx, fn, (size_t)(S * D) * tg_esize(x->dtype));
    if (!cs) return;
    if (x->dtype == TG_F64) {
        rope_table_f64(cs, S, D, base, p0);
        rope_kernel_f64(out, in, cs, outer, S, inner, D, backward);
    } else {
        rope_table_f32(cs, S, D, base, p0);
        rope_kernel_f32(out, in, cs, outer, S, inner, D, backward);
    }
}

/* Forward was, per pair, (y_2i, y_2i+1) = R(a) (x_2i, x_2i+1) with R(a) the
 * rotation [[c, -s], [s, c]], a fixed by the position and i alone. A
 * linear map, so dx = R(a)^T dy, and R(a)^T = R(-a) is the inverse
 * rotation:
 *   dx_2i   += dy_2i c + dy_2i+1 s
 *   dx_2i+1 += -dy_2i s + dy_2i+1 c */
static void rope_backward(tg_ctx *ctx, tg_node *n) {
    tg_tensor *dx = tg_grad_of(ctx, n->in[0]);
    if (dx) rope_run(ctx, n->op->name, dx, (int)n->i[0], n->f[0], n->i[1], dx->data, n->out->grad->data, true);
}

/* y = rope(x) rotates each pair by +a; dx = the rotation by -a of dy.
 * With P = diag(1, -1) on each pair, P R(a) P = R(-a), so
 * dx = P rope(P dy): a constant +-1 sign along the last dim. */
static bool rope_grad(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    const int64_t D = dy->shape[dy->ndim - 1];
    tg_tensor *p = tg_new_tensor(ctx, "tg_grad", dy->dtype, 1, &D);
    if (!p) return false;
    for (int64_t i = 0; i < D; i++) tg_store(p, i, i % 2 ? -1.0 : 1.0);
    dx[0] = tg_mul(ctx, tg_rope_from(ctx, tg_mul(ctx, dy, p), (int)n->i[0], n->f[0], n->i[1]), p);
    return tg_ok(ctx);
}

/* y = R(position) x, a fixed rotation of each pair: t_y = R t_x. */
static tg_tensor *rope_jvp(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) {
    return tg_rope_from(ctx, t[0], (int)n->i[0], n->f[0], n->i[1]);
}

const tg_op_def tg_rope_op =
    TG_OP("rope", rope_backward, rope_grad, rope_jvp, .args = "axis=-2,base=10000", .inputs = "x=-2:2");

tg_tensor *tg_rope(tg_ctx *ctx, tg_tensor *x, int seq_axis, double base) {
    return tg_rope_from(ctx, x, seq_axis, base, 0);
}

/* Recorded as "rope" with the first position in i[1], whatever the entry
 * point, so the second-order and forward-mode rules (above) are the same
 * for both. */
tg_tensor *tg_rope_from(tg_ctx *ctx, tg_tensor *x, int seq_axis, double base, int64_t pos0) {
    if (tg_lowp_args(ctx, __func__, 1, &x))
        return tg_lowp_out(ctx, tg_rope_from(ctx, tg_lowp_in(ctx, x), seq_axis, base, pos0), x);
    if (!tg_check_arg(ctx, __func__, "x", x)) return NULL;
    char s[TG_SHAPE_STR];
    if (x->ndim < 2 || x->shape[x->ndim - 1] % 2 != 0) {
        tg_error(ctx, TG_ERR_SHAPE, __func__, "x of shape %s: need at least 2 dims and an even last dim (the pairs)",
                 tg_shape_of(s, x));
        return NULL;
    }
    int axis = seq_axis < 0 ? seq_axis + x->ndim : seq_axis;
    if (axis < 0 || axis >= x->ndim - 1) {
        tg_error(ctx, TG_ERR_INDEX, __func__,
                 "seq_axis %d for x of shape %s: must name a dim before the last (the last holds the pairs)", seq_axis,
                 tg_shape_of(s, x));
        return NULL;
    }
    if (!(base > 0) || !isfinite(base)) {
        tg_error(ctx, TG_ERR_VALUE, __func__, "base = %g must be finite and > 0 (LLaMA: 10000)", base);
        return NULL;
    }
    if (pos0 < 0) {
        tg_error(ctx, TG_ERR_VALUE, __func__, "pos0 = %lld: the first position must be >= 0", (long long)pos0);
        return NULL;
    }
    tg_tensor *y = tg_new_like(ctx, __func__, x);
    if (!y) return NULL;
    rope_run(ctx, __func__, x, axis, base, pos0, y->data, x->data, false);
    tg_node *n = tg_record(ctx, &tg_rope_op, y, 1, &x);
    if (n) n->i[0] = axis, n->i[1] = pos0, n->f[0] = base;
    return tg_ok(ctx) ? y : NULL;
}

#endif

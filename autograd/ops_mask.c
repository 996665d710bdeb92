/* Masking ops: masked_fill (a value wherever a mask is nonzero) and the
 * triangles tril / triu of the last two dims. All three copy x except
 * where the mask says otherwise, so their backward is the same mask
 * applied to dy: the kept elements pass their gradient through, the
 * replaced ones get none (their output does not depend on x). None saves
 * anything; masked_fill reads its mask again in backward.
 *
 * Attention's causal mask is either of them: tg_masked_fill(scores,
 * tg_triu(ones (T,T), 1), -inf) as PyTorch users write it (the composed
 * attention does this), or tg_tril of the probabilities.
 *
 * The kernels, written once for T (float, double), open the file, which
 * instantiates itself (tensor/instantiate.h) and so defines
 *   masked_fill_row_f32  masked_fill_row_backward_f32  tri_kernel_f32
 * and the same with _f64. */
#ifdef T /* the kernels, compiled once per element type (tensor/instantiate.h) */

/* One row of n elements: y_j = (m_j != 0) ? value : x_j, where the mask
 * moves by ms (1, or 0 when one mask element covers the row). A NaN mask
 * element is nonzero. y, x: (n) */
static void TG_FN(masked_fill_row)(T *restrict y, const T *restrict x, const T *restrict m, int64_t ms, int64_t n,
                                   double value) {
    const T v = (T)value;
    for (int64_t j = 0; j < n; j++) y[j] = m[j * ms] != 0 ? v : x[j];
}

/* Forward was y_j = (m_j != 0) ? value : x_j: dy_j/dx_j = 1 where the mask
 * is zero and 0 where it is not (y is then a constant), so
 *   dx_j += (m_j != 0) ? 0 : dy_j.   dx, dy: (n) */
static void TG_FN(masked_fill_row_backward)(T *restrict dx, const T *restrict dy, const T *restrict m, int64_t ms,
                                            int64_t n) {
    for (int64_t j = 0; j < n; j++) dx[j] += m[j * ms] != 0 ? 0 : dy[j];
}

/* The triangle of each (R, C) matrix of x: element (i, j) is kept when
 * j - i <= k (lower, tril) or j - i >= k (upper, triu), else 0:
 *   y = keep ? x : 0     (acc false: the forward)
 *   y += keep ? x : 0    (acc true: the backward, x = dy, y = dx)
 * x, y: (B, R, C) */
static void TG_FN(tri_kernel)(T *restrict y, const T *restrict x, int64_t B, int64_t R, int64_t C, int64_t k,
                              bool upper, bool acc) {
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < R; i++) {
            T *yr = y + (b * R + i) * C;
            const T *xr = x + (b * R + i) * C;
            /* kept columns: j <= i + k (lower) or j >= i + k (upper), clamped to 0..C */
            int64_t edge = i + k + (upper ? 0 : 1); /* first column past (lower) / of (upper) the triangle */
            int64_t e = edge < 0 ? 0 : (edge > C ? C : edge);
            int64_t lo = upper ? e : 0, hi = upper ? C : e;
            if (acc) {
                for (int64_t j = lo; j < hi; j++) yr[j] += xr[j];
            } else {
                for (int64_t j = 0; j < C; j++) yr[j] = 0;
                for (int64_t j = lo; j < hi; j++) yr[j] = xr[j];
            }
        }
}

#else /* the ops, compiled once */

#include "autograd/broadcast.h"
#include "autograd/lowp.h"
#include "autograd/grad_graph.h"
#include "autograd/ops.h"
#include "autograd/tape.h"

#define TG_TEMPLATE "autograd/ops_mask.c"
#include "tensor/instantiate.h"

/* ---- masked_fill ------------------------------------------------------------ */

/* The rows of the broadcast plan of (x, mask): x is never broadcast (the
 * output has its shape), so x, y and dy advance together, one row of
 * p->row elements after the other; the mask's offset comes from the plan.
 * forward: y = fill(x); backward: dx += pass(dy). */
static void masked_fill_walk(const tg_bcast *p, void *out, const void *in, const tg_tensor *mask, double value,
                             bool backward) {
    const bool f64 = mask->dtype == TG_F64;
    tg_bcast_iter it;
    tg_bcast_iter_at(p, &it, 0);
    for (int64_t r = 0; r < p->nrows; r++, tg_bcast_iter_next(p, &it)) {
        const int64_t o = r * p->row;
        if (f64) {
            const double *m = (const double *)mask->data + it.ob;
            if (backward) masked_fill_row_backward_f64((double *)out + o, (const double *)in + o, m, p->rb, p->row);
            else masked_fill_row_f64((double *)out + o, (const double *)in + o, m, p->rb, p->row, value);
        } else {
            const float *m = (const float *)mask->data + it.ob;
            if (backward) masked_fill_row_backward_f32((float *)out + o, (const float *)in + o, m, p->rb, p->row);
            else masked_fill_row_f32((float *)out + o, (const float *)in + o, m, p->rb, p->row, value);
        }
    }
}

/* Forward was y = (mask != 0) ? value : x elementwise, mask broadcast to
 * x: dx += dy where the mask is zero (see masked_fill_row_backward). The
 * mask gets no gradient: y is piecewise constant in it. */
static void masked_fill_backward(tg_ctx *ctx, tg_node *n) {
    tg_tensor *dx = tg_grad_of(ctx, n->in[0]);
    if (!dx) return;
    const tg_tensor *mask = n->in[1];
    tg_bcast p;
    if (!tg_bcast_plan(ctx, n->op->name, &p, dx->ndim, dx->shape, mask->ndim, mask->shape)) return;
    masked_fill_walk(&p, dx->data, n->out->grad->data, mask, 0, true);
}

/* The mask's zeros, a constant factor. */
static double is_zero(double x, double a) { return (void)a, x == 0 ? 1.0 : 0.0; }

/* y = mask ? value : x: dx = dy where the mask is 0; the mask gets none. */
static bool masked_fill_grad(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    if (tg_node_needs_grad(n, 0)) dx[0] = tg_mul(ctx, dy, tg_gg_const(ctx, n->in[1], is_zero, 0));
    return tg_ok(ctx);
}

/* y = mask ? value : x: t_y = mask ? 0 : t_x (piecewise constant in mask). */
static tg_tensor *masked_fill_jvp(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) {
    return tg_masked_fill(ctx, t[0], n->in[1], 0.0);
}

/* A check draws the mask as zeros and ones, and a finite value, so the
 * checked loss is finite. */
const tg_op_def tg_masked_fill_op = TG_OP("masked_fill", masked_fill_backward, masked_fill_grad, masked_fill_jvp,
                                          .args = "value=-1.5", .inputs = "x=-2:2,mask=0|1");

tg_tensor *tg_masked_fill(tg_ctx *ctx, tg_tensor *x, tg_tensor *mask, double value) {
    if (tg_lowp_args(ctx, __func__, 2, (tg_tensor *[]){x, mask})) { /* bfloat16, float16: autograd/lowp.h */
        tg_tensor *w[2];
        tg_lowp_in_all(ctx, 2, (tg_tensor *[]){x, mask}, w);
        return tg_lowp_out(ctx, tg_masked_fill(ctx, w[0], w[1], value), x);
    }
    if (!tg_check_arg(ctx, __func__, "x", x) || !tg_check_arg(ctx, __func__, "mask", mask)) return NULL;
    if (!tg_check_same_dtype(ctx, __func__, x, mask)) return NULL;
    tg_bcast p;
    if (!tg_bcast_plan(ctx, __func__, &p, x->ndim, x->shape, mask->ndim, mask->shape)) return NULL;
    bool fits = p.out_ndim == x->ndim;
    for (int d = 0; fits && d < x->ndim; d++) fits = p.out_shape[d] == x->shape[d];
    if (!fits) {
        char sx[TG_SHAPE_STR], sm[TG_SHAPE_STR];
        tg_error(ctx, TG_ERR_SHAPE, __func__, "mask of shape %s does not broadcast to x of shape %s without growing it",
                 tg_shape_of(sm, mask), tg_shape_of(sx, x));
        return NULL;
    }
    tg_tensor *y = tg_new_like(ctx, __func__, x);
    if (!y) return NULL;
    if (y->numel) masked_fill_walk(&p, y->data, x->data, mask, value, false);
    tg_node *n = tg_record(ctx, &tg_masked_fill_op, y, 2, (tg_tensor *[]){x, mask});
    if (n) tg_node_count_saved(ctx, n, (size_t)mask->numel * tg_esize(mask->dtype)); /* mask, read by backward */
    return tg_ok(ctx) ? y : NULL;
}

/* ---- tril, triu -------------------------------------------------------------- */

/* x as (B, R, C): its last two dims and the product of the others. */
static void matrices_of(const tg_tensor *x, int64_t *B, int64_t *R, int64_t *C) {
    *R = x->shape[x->ndim - 2];
    *C = x->shape[x->ndim - 1];
    *B = (*R * *C != 0) ? x->numel / (*R * *C) : 0;
}

static void tri_run(const tg_tensor *like, void *y, const void *x, int64_t k, bool upper, bool acc) {
    int64_t B, R, C;
    matrices_of(like, &B, &R, &C);
    if (like->dtype == TG_F64) tri_kernel_f64(y, x, B, R, C, k, upper, acc);
    else tri_kernel_f32(y, x, B, R, C, k, upper, acc);
}

/* Forward was y_ij = keep_ij ? x_ij : 0 with keep_ij fixed by (i, j, k)
 * alone, so dy_ij/dx_ij = keep_ij: dx += the same triangle of dy. */
static void tri_backward(tg_ctx *ctx, tg_node *n) {
    tg_tensor *dx = tg_grad_of(ctx, n->in[0]);
    if (dx) tri_run(dx, dx->data, n->out->grad->data, n->i[0], n->i[1] != 0, true);
}

/* y = tril / triu of x: dx = the same triangle of dy. */
static bool tri_grad(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    dx[0] = n->i[1] ? tg_triu(ctx, dy, n->i[0]) : tg_tril(ctx, dy, n->i[0]);
    return tg_ok(ctx);
}

/* y = the triangle of x: t_y = the same triangle of t_x. */
static tg_tensor *tril_jvp(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) { return tg_tril(ctx, t[0], n->i[0]); }
static tg_tensor *triu_jvp(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) { return tg_triu(ctx, t[0], n->i[0]); }

const tg_op_def tg_tril_op = TG_OP("tril", tri_backward, tri_grad, tril_jvp, .args = "diagonal=0", .inputs = "x=-2:2");
const tg_op_def tg_triu_op = TG_OP("triu", tri_backward, tri_grad, triu_jvp, .args = "diagonal=0", .inputs = "x=-2:2");

static tg_tensor *tri_op(tg_ctx *ctx, const char *fn, tg_tensor *x, int64_t diagonal, bool upper) {
    if (tg_lowp_args(ctx, fn, 1, &x)) return tg_lowp_out(ctx, tri_op(ctx, fn, tg_lowp_in(ctx, x), diagonal, upper), x);
    if (!tg_check_arg(ctx, fn, "x", x)) return NULL;
    if (x->ndim < 2) {
        char s[TG_SHAPE_STR];
        tg_error(ctx, TG_ERR_SHAPE, fn, "x of shape %s has fewer than 2 dims", tg_shape_of(s, x));
        return NULL;
    }
    /* past -R or C the triangle is empty or whole: clamping keeps i + k from overflowing */
    const int64_t R = x->shape[x->ndim - 2], C = x->shape[x->ndim - 1];
    diagonal = diagonal < -R ? -R : (diagonal > C ? C : diagonal);
    tg_tensor *y = tg_new_like(ctx, fn, x);
    if (!y) return NULL;
    tri_run(x, y->data, x->data, diagonal, upper, false);
    tg_node *n = tg_record(ctx, upper ? &tg_triu_op : &tg_tril_op, y, 1, &x);
    if (n) n->i[0] = diagonal, n->i[1] = upper;
    return tg_ok(ctx) ? y : NULL;
}

tg_tensor *tg_tril(tg_ctx *ctx, tg_tensor *x, int64_t diagonal) { return tri_op(ctx, "tg_tril", x, diagonal, false); }
tg_tensor *tg_triu(tg_ctx *ctx, tg_tensor *x, int64_t diagonal) { return tri_op(ctx, "tg_triu", x, diagonal, true); }

#endif

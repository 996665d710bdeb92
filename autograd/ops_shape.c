/* Shape ops: transpose of the last two dims, reshape, concat and slice
 * along an axis. Forwards move data (reshape moves none: it shares it);
 * backwards route each gradient element back to where its value came
 * from. None of them saves anything: the shapes are all backward needs.
 *
 * An axis argument may be negative (-1 is the last dim). Tensors are
 * contiguous row-major, so along `axis` a tensor of shape S is
 *   (outer, S[axis], inner),  outer = prod S[:axis],  inner = prod S[axis+1:]
 * and a block of positions [start, end) along axis is, for each of the
 * `outer` rows, one run of (end - start) * inner contiguous elements.
 *
 * The kernels, written once for T (float, double), open the file, which
 * instantiates itself (tensor/instantiate.h) and so defines
 *   transpose_kernel_f32  accum_rows_f32  and the same with _f64. */
#ifdef T /* the kernels, compiled once per element type (tensor/instantiate.h) */

/* y[b, j, i] = x[b, i, j] (or += when acc), in 32x32 tiles so both the
 * reads and the writes stay within a few cache lines per tile.
 * x: (B, R, C)   y: (B, C, R) */
static void TG_FN(transpose_kernel)(T *restrict y, const T *restrict x, int64_t B, int64_t R, int64_t C, bool acc) {
    enum { TILE = 32 };
    for (int64_t b = 0; b < B; b++) {
        const T *xb = x + b * R * C;
        T *yb = y + b * R * C;
        for (int64_t i0 = 0; i0 < R; i0 += TILE) {
            int64_t i1 = i0 + TILE < R ? i0 + TILE : R;
            for (int64_t j0 = 0; j0 < C; j0 += TILE) {
                int64_t j1 = j0 + TILE < C ? j0 + TILE : C;
                for (int64_t j = j0; j < j1; j++)
                    for (int64_t i = i0; i < i1; i++) {
                        if (acc) yb[j * R + i] += xb[i * C + j];
                        else yb[j * R + i] = xb[i * C + j];
                    }
            }
        }
    }
}

/* dst[o, 0:len] += src[o, 0:len] for o < outer, with row strides ld_dst and
 * ld_src: the gradient of a block copied out of (slice) or into (concat) a
 * bigger tensor. */
static void TG_FN(accum_rows)(T *restrict dst, int64_t ld_dst, const T *restrict src, int64_t ld_src, int64_t outer,
                              int64_t len) {
    for (int64_t o = 0; o < outer; o++) {
        T *d = dst + o * ld_dst;
        const T *s = src + o * ld_src;
        for (int64_t k = 0; k < len; k++) d[k] += s[k];
    }
}

#else /* the op, compiled once */

#include "autograd/tape.h"

#include <string.h>

#define TG_TEMPLATE "autograd/ops_shape.c"
#include "tensor/instantiate.h"

/* ---- helpers ------------------------------------------------------------ */

/* axis in -ndim..ndim-1 -> 0..ndim-1, or -1 with an error. */
static int norm_axis(tg_ctx *ctx, const char *fn, const tg_tensor *x, int axis) {
    int a = axis < 0 ? axis + x->ndim : axis;
    if (a < 0 || a >= x->ndim) {
        char s[TG_SHAPE_STR];
        tg_error(ctx, TG_ERR_INDEX, fn, "axis %d is out of range for shape %s (ndim %d)", axis, tg_shape_of(s, x),
                 x->ndim);
        return -1;
    }
    return a;
}

static int64_t prod(const int64_t *s, int from, int to) {
    int64_t p = 1;
    for (int i = from; i < to; i++) p *= s[i];
    return p;
}

/* dst[o, 0:len] = src[o, 0:len] for o < outer; strides and len in bytes. */
static void copy_rows(unsigned char *dst, size_t ld_dst, const unsigned char *src, size_t ld_src, int64_t outer,
                      size_t len) {
    if (len == 0) return;
    for (int64_t o = 0; o < outer; o++) memcpy(dst + (size_t)o * ld_dst, src + (size_t)o * ld_src, len);
}

/* dst[o, 0:len] += src[o, 0:len]; strides and len in elements. */
static void accum_rows(tg_dtype dt, void *dst, int64_t ld_dst, const void *src, int64_t ld_src, int64_t outer,
                       int64_t len) {
    if (dt == TG_F64) accum_rows_f64(dst, ld_dst, src, ld_src, outer, len);
    else accum_rows_f32(dst, ld_dst, src, ld_src, outer, len);
}

/* ---- transpose ------------------------------------------------------------ */

/* Forward: y[..., j, i] = x[..., i, j],  x (..., R, C)  y (..., C, R). */
static void transpose_forward(tg_tensor *y, const tg_tensor *x, int64_t B, int64_t R, int64_t C) {
    if (x->dtype == TG_F64) transpose_kernel_f64(y->data, x->data, B, R, C, false);
    else transpose_kernel_f32(y->data, x->data, B, R, C, false);
}

/* Forward was y[..., j, i] = x[..., i, j]: each x element went to exactly
 * one place, so dx[..., i, j] += dy[..., j, i], a transpose of dy
 * (dy is (..., C, R), dx is (..., R, C)). */
static void transpose_backward(tg_ctx *ctx, tg_node *n) {
    const tg_tensor *dy = n->out->grad;
    tg_tensor *dx = tg_grad_of(ctx, n->in[0]);
    if (!dx) return;
    int64_t B = n->i[0], R = n->i[1], C = n->i[2];
    if (dx->dtype == TG_F64) transpose_kernel_f64(dx->data, dy->data, B, C, R, true);
    else transpose_kernel_f32(dx->data, dy->data, B, C, R, true);
}

tg_tensor *tg_transpose(tg_ctx *ctx, tg_tensor *x) {
    if (!tg_check_arg(ctx, __func__, "x", x)) return NULL;
    if (x->ndim < 2) {
        char s[TG_SHAPE_STR];
        tg_error(ctx, TG_ERR_SHAPE, __func__, "x of shape %s has fewer than 2 dims", tg_shape_of(s, x));
        return NULL;
    }
    int nd = x->ndim;
    int64_t shape[TG_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    int64_t R = x->shape[nd - 2], C = x->shape[nd - 1];
    shape[nd - 2] = C;
    shape[nd - 1] = R;
    tg_tensor *y = tg_new_tensor(ctx, __func__, x->dtype, nd, shape);
    if (!y) return NULL;
    int64_t B = prod(x->shape, 0, nd - 2);
    transpose_forward(y, x, B, R, C);
    tg_node *n = tg_record(ctx, __func__, transpose_backward, y, 1, &x);
    if (n) n->i[0] = B, n->i[1] = R, n->i[2] = C;
    return tg_ok(ctx) ? y : NULL;
}

/* ---- reshape ---------------------------------------------------------------- */

/* Forward: y is x's data under a new shape (no copy), y_k = x_k for the
 * flat index k. So dx_k += dy_k, element by element over the flat data. */
static void reshape_backward(tg_ctx *ctx, tg_node *n) {
    const tg_tensor *dy = n->out->grad;
    tg_tensor *dx = tg_grad_of(ctx, n->in[0]);
    if (dx) accum_rows(dx->dtype, dx->data, 0, dy->data, 0, 1, dx->numel);
}

tg_tensor *tg_reshape(tg_ctx *ctx, tg_tensor *x, int ndim, const int64_t *shape) {
    if (!tg_check_arg(ctx, __func__, "x", x)) return NULL;
    int64_t s[TG_MAX_DIMS];
    if (!tg_infer_shape(ctx, __func__, x, ndim, shape, s)) return NULL;
    tg_tensor *y = tg_view(ctx, x, ndim, s);
    if (!y) return NULL;
    tg_record(ctx, __func__, reshape_backward, y, 1, &x);
    return tg_ok(ctx) ? y : NULL;
}

/* ---- concat ---------------------------------------------------------------- */

/* Forward: y = [x_0, x_1, ...] along axis; x_k occupies positions
 * off_k .. off_k + S_k - 1 of y's axis (off_k = S_0 + ... + S_{k-1}).
 * Each y element is a copy of one x_k element, so dx_k is the block of dy
 * at those positions: per outer row, dx_k[o, :] += dy[o, off_k*inner ...]. */
static void concat_backward(tg_ctx *ctx, tg_node *n) {
    const tg_tensor *dy = n->out->grad;
    int axis = (int)n->i[0];
    int64_t outer = prod(dy->shape, 0, axis), inner = prod(dy->shape, axis + 1, dy->ndim);
    int64_t ld_y = dy->shape[axis] * inner;
    int64_t off = 0;
    size_t es = tg_esize(dy->dtype);
    for (int k = 0; k < n->n_in; k++) {
        int64_t len = n->in[k]->shape[axis] * inner;
        tg_tensor *dx = tg_grad_of(ctx, n->in[k]);
        if (dx)
            accum_rows(dx->dtype, dx->data, len, (const unsigned char *)dy->data + (size_t)off * es, ld_y, outer, len);
        off += len;
    }
}

tg_tensor *tg_concat(tg_ctx *ctx, int n, tg_tensor *const *xs, int axis) {
    if (!tg_live(ctx)) return NULL;
    if (!xs) {
        tg_error(ctx, TG_ERR_NULL, __func__, "argument 'xs' is NULL");
        return NULL;
    }
    if (n < 1) {
        tg_error(ctx, TG_ERR_VALUE, __func__, "n = %d: need at least one tensor", n);
        return NULL;
    }
    for (int k = 0; k < n; k++) {
        char arg[24];
        snprintf(arg, sizeof arg, "xs[%d]", k);
        if (!tg_check_arg(ctx, __func__, arg, xs[k])) return NULL;
    }
    const tg_tensor *x0 = xs[0];
    int a = norm_axis(ctx, __func__, x0, axis);
    if (a < 0) return NULL;
    int64_t shape[TG_MAX_DIMS];
    memcpy(shape, x0->shape, sizeof shape);
    shape[a] = 0;
    for (int k = 0; k < n; k++) {
        const tg_tensor *x = xs[k];
        if (x->dtype != x0->dtype) {
            tg_error(ctx, TG_ERR_DTYPE, __func__, "dtypes differ: xs[0] is %s, xs[%d] is %s", tg_dtype_name(x0->dtype),
                     k, tg_dtype_name(x->dtype));
            return NULL;
        }
        bool fits = x->ndim == x0->ndim;
        for (int d = 0; fits && d < x->ndim; d++)
            if (d != a && x->shape[d] != x0->shape[d]) fits = false;
        if (!fits) {
            char s0[TG_SHAPE_STR], sk[TG_SHAPE_STR];
            tg_error(ctx, TG_ERR_SHAPE, __func__, "xs[%d] of shape %s does not fit xs[0] of shape %s along axis %d", k,
                     tg_shape_of(sk, x), tg_shape_of(s0, x0), axis);
            return NULL;
        }
        shape[a] += x->shape[a];
    }
    tg_tensor *y = tg_new_tensor(ctx, __func__, x0->dtype, x0->ndim, shape);
    if (!y) return NULL;
    size_t es = tg_esize(y->dtype);
    int64_t outer = prod(shape, 0, a), inner = prod(shape, a + 1, y->ndim);
    size_t ld_y = (size_t)(shape[a] * inner) * es;
    size_t off = 0;
    for (int k = 0; k < n; k++) {
        size_t len = (size_t)(xs[k]->shape[a] * inner) * es;
        copy_rows((unsigned char *)y->data + off, ld_y, xs[k]->data, len, outer, len);
        off += len;
    }
    tg_node *nd = tg_record(ctx, __func__, concat_backward, y, n, xs);
    if (nd) nd->i[0] = a;
    return tg_ok(ctx) ? y : NULL;
}

/* ---- slice ------------------------------------------------------------------ */

/* Forward: y[o, p, :] = x[o, start + p, :] for p < end - start (outer,
 * axis, inner view). Each y element is a copy of one x element, so dx gets
 * dy added into the block [start, end) along axis; the rest gets nothing. */
static void slice_backward(tg_ctx *ctx, tg_node *n) {
    const tg_tensor *dy = n->out->grad;
    tg_tensor *dx = tg_grad_of(ctx, n->in[0]);
    if (!dx) return;
    int axis = (int)n->i[0];
    int64_t start = n->i[1];
    int64_t outer = prod(dx->shape, 0, axis), inner = prod(dx->shape, axis + 1, dx->ndim);
    int64_t len = dy->shape[axis] * inner;
    size_t es = tg_esize(dx->dtype);
    accum_rows(dx->dtype, (unsigned char *)dx->data + (size_t)(start * inner) * es, dx->shape[axis] * inner, dy->data,
               len, outer, len);
}

tg_tensor *tg_slice(tg_ctx *ctx, tg_tensor *x, int axis, int64_t start, int64_t end) {
    if (!tg_check_arg(ctx, __func__, "x", x)) return NULL;
    int a = norm_axis(ctx, __func__, x, axis);
    if (a < 0) return NULL;
    int64_t S = x->shape[a];
    if (start < 0 || end < start || end > S) {
        char s[TG_SHAPE_STR];
        tg_error(ctx, TG_ERR_INDEX, __func__, "range [%lld, %lld) is out of range for axis %d of size %lld (x %s)",
                 (long long)start, (long long)end, axis, (long long)S, tg_shape_of(s, x));
        return NULL;
    }
    int64_t shape[TG_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[a] = end - start;
    tg_tensor *y = tg_new_tensor(ctx, __func__, x->dtype, x->ndim, shape);
    if (!y) return NULL;
    size_t es = tg_esize(x->dtype);
    int64_t outer = prod(x->shape, 0, a), inner = prod(x->shape, a + 1, x->ndim);
    size_t len = (size_t)((end - start) * inner) * es;
    copy_rows(y->data, len, (const unsigned char *)x->data + (size_t)(start * inner) * es, (size_t)(S * inner) * es,
              outer, len);
    tg_node *n = tg_record(ctx, __func__, slice_backward, y, 1, &x);
    if (n) n->i[0] = a, n->i[1] = start;
    return tg_ok(ctx) ? y : NULL;
}

#endif

/* Shape ops: permute (any order of the dims), transpose of two dims or of
 * the last two, reshape, concat and slice along an axis. Forwards move
 * data (reshape moves none: it shares it); backwards route each gradient
 * element back to where its value came from. None of them saves anything:
 * the shapes are all backward needs.
 *
 * An axis argument may be negative (-1 is the last dim). Tensors are
 * contiguous row-major, so along `axis` a tensor of shape S is
 *   (outer, S[axis], inner),  outer = prod S[:axis],  inner = prod S[axis+1:]
 * and a block of positions [start, end) along axis is, for each of the
 * `outer` rows, one run of (end - start) * inner contiguous elements.
 *
 * The kernels, written once for T (float, double), open the file, which
 * instantiates itself (tensor/instantiate.h) and so defines
 *   tile_transpose_f32  transpose_kernel_f32  permute_kernel_f32
 *   accum_rows_f32  and the same with _f64,
 * and once more for 16-bit elements as bits (T uint16_t, TG_COPY_ONLY):
 *   tile_transpose_b16  transpose_kernel_b16  permute_kernel_b16
 * which only copy (acc false). bfloat16 and float16 take these ops
 * natively: moving a value does not round it, and a 16-bit gradient is
 * added through float32 (tg_lowp_accum, autograd/lowp.h), so the bits are
 * those of the path through float32 without its two conversions. */
#ifdef T /* the kernels, compiled once per element type (tensor/instantiate.h) */

/* y[j * ldy + i] = x[i * ldx + j] (or += when acc) for i < R, j < C: one
 * 2-D transpose between strided rows, in 32x32 tiles so both the reads and
 * the writes stay within a few cache lines per tile. */
static void TG_FN(tile_transpose)(T *restrict y, int64_t ldy, const T *restrict x, int64_t ldx, int64_t R, int64_t C,
                                  bool acc) {
    enum { TILE = 32 };
    for (int64_t i0 = 0; i0 < R; i0 += TILE) {
        int64_t i1 = i0 + TILE < R ? i0 + TILE : R;
        for (int64_t j0 = 0; j0 < C; j0 += TILE) {
            int64_t j1 = j0 + TILE < C ? j0 + TILE : C;
            for (int64_t j = j0; j < j1; j++)
                for (int64_t i = i0; i < i1; i++) {
                    if (acc) y[j * ldy + i] += x[i * ldx + j];
                    else y[j * ldy + i] = x[i * ldx + j];
                }
        }
    }
}

/* y[b, j, i] = x[b, i, j] (or += when acc).  x: (B, R, C)   y: (B, C, R) */
static void TG_FN(transpose_kernel)(T *restrict y, const T *restrict x, int64_t B, int64_t R, int64_t C, bool acc) {
    for (int64_t b = 0; b < B; b++) TG_FN(tile_transpose)(y + b * R * C, R, x + b * R * C, C, R, C, acc);
}

/* y = x with its dims permuted (or y += when acc), following a plan
 * (perm_plan, below): y is walked in row-major order over the plan's r
 * dims of sizes size[], and y's dim d moves through x with stride xs[d].
 *  - When y's last dim is also x's last (xs[r-1] == 1), y is a sequence of
 *    contiguous runs of size[r-1] elements, each copied from one run of x.
 *  - Otherwise x's last dim is y's dim `lx` (xs[lx] == 1): for each index
 *    of the other dims, the (lx, r-1) plane is a strided 2-D transpose,
 *    done in tiles (tile_transpose). */
/* Only the steps [o0, o1) of the outer walk are taken (the walk has
 * perm_outer steps): disjoint ranges write disjoint parts of y, so the
 * walk can be cut into tasks. */
static void TG_FN(permute_kernel)(T *restrict y, const T *restrict x, int r, const int64_t *size, const int64_t *xs,
                                  int lx, bool acc, int64_t o0, int64_t o1) {
    int64_t ys[TG_MAX_DIMS]; /* y's own strides */
    ys[r - 1] = 1;
    for (int d = r - 2; d >= 0; d--) ys[d] = ys[d + 1] * size[d + 1];
    const bool runs = lx == r - 1;
    const int64_t n_last = size[r - 1];
    /* the outer walk: every dim but the last, and but lx when tiling;
     * step o0's index, its last dim fastest, and its offsets in x and y */
    int64_t idx[TG_MAX_DIMS] = {0};
    int64_t ox = 0, oy = 0, rest = o0;
    for (int d = r - 2; d >= 0; d--) {
        if (!runs && d == lx) continue;
        idx[d] = rest % size[d];
        rest /= size[d];
        ox += idx[d] * xs[d], oy += idx[d] * ys[d];
    }
    for (int64_t o = o0; o < o1; o++) {
        if (runs) {
            T *yr = y + oy;
            const T *xr = x + ox;
            if (acc)
                for (int64_t j = 0; j < n_last; j++) yr[j] += xr[j];
            else
                for (int64_t j = 0; j < n_last; j++) yr[j] = xr[j];
        } else {
            /* y[oy + a ys[lx] + b] = x[ox + a + b xs[r-1]],  a < size[lx], b < n_last */
            TG_FN(tile_transpose)(y + oy, ys[lx], x + ox, xs[r - 1], n_last, size[lx], acc);
        }
        /* odometer over the outer dims */
        for (int d = r - 2; d >= 0; d--) {
            if (!runs && d == lx) continue;
            ox += xs[d], oy += ys[d];
            if (++idx[d] < size[d]) break;
            ox -= xs[d] * size[d], oy -= ys[d] * size[d];
            idx[d] = 0;
        }
    }
}

#ifndef TG_COPY_ONLY
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
#endif

#else /* the op, compiled once */

#include "autograd/grad_graph.h"
#include "autograd/lowp.h"
#include "autograd/ops.h" /* and TG_PAR_MIN, TG_PAR_CHUNK (autograd/unary.h) */
#include "autograd/tape.h"
#include "tensor/parallel.h"

#include <string.h>

#define TG_TEMPLATE "autograd/ops_shape.c"
#include "tensor/instantiate.h"

#define T uint16_t
#define TG_FN(name) name##_b16
#define TG_COPY_ONLY
#include "autograd/ops_shape.c"
#undef T
#undef TG_FN
#undef TG_COPY_ONLY

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

/* ---- moving rows, on the threads ------------------------------------------ */

/* dst[o, 0:len] = src[o, 0:len] (or += when acc) for o < outer, with row
 * strides ld_dst and ld_src; strides and len in elements of es bytes. */
typedef struct rows_job {
    tg_dtype dt;
    bool acc;
    unsigned char *dst;
    const unsigned char *src;
    int64_t ld_dst, ld_src, len;
    size_t es;
} rows_job;

/* `rows` rows from row o, their elements [k0, k0 + n). */
static void rows_block(const rows_job *j, int64_t o, int64_t k0, int64_t rows, int64_t n) {
    unsigned char *d = j->dst + (size_t)(o * j->ld_dst + k0) * j->es;
    const unsigned char *s = j->src + (size_t)(o * j->ld_src + k0) * j->es;
    if (j->acc) {
        if (j->dt == TG_F64) accum_rows_f64((double *)d, j->ld_dst, (const double *)s, j->ld_src, rows, n);
        else if (j->dt == TG_F32) accum_rows_f32((float *)d, j->ld_dst, (const float *)s, j->ld_src, rows, n);
        else
            for (int64_t r = 0; r < rows; r++)
                tg_lowp_accum(j->dt, d + (size_t)(r * j->ld_dst) * j->es, s + (size_t)(r * j->ld_src) * j->es,
                              (size_t)n);
    } else {
        for (int64_t r = 0; r < rows; r++)
            memcpy(d + (size_t)(r * j->ld_dst) * j->es, s + (size_t)(r * j->ld_src) * j->es, (size_t)n * j->es);
    }
}

/* Elements [i0, i1) of the outer x len rectangle, row-major: the rest of
 * a first partial row, whole rows, the start of a last partial row. */
static void rows_range(void *arg, int64_t i0, int64_t i1, int worker) {
    const rows_job *j = arg;
    (void)worker;
    int64_t o = i0 / j->len, k = i0 % j->len;
    if (k) {
        const int64_t e = i1 - i0 < j->len - k ? k + (i1 - i0) : j->len;
        rows_block(j, o++, k, 1, e - k);
        i0 += e - k;
    }
    const int64_t full = (i1 - i0) / j->len;
    if (full) rows_block(j, o, 0, full, j->len);
    i0 += full * j->len, o += full;
    if (i1 > i0) rows_block(j, o, 0, 1, i1 - i0);
}

/* The rows of rows_job, in pieces of TG_PAR_CHUNK elements over the
 * context's threads when there are TG_PAR_MIN elements (one thread
 * otherwise). Every element is copied or added once, by whichever thread,
 * so the bits do not depend on the thread count. Measured on the GPT small
 * step (2 threads): the head split and merge, their backward and the
 * reshapes' gradients were ~2% of it, on one thread. */
static void move_rows(tg_ctx *ctx, tg_dtype dt, bool acc, void *dst, int64_t ld_dst, const void *src, int64_t ld_src,
                      int64_t outer, int64_t len) {
    const int64_t n = outer * len;
    if (n <= 0) return;
    rows_job j = {dt, acc, dst, src, ld_dst, ld_src, len, tg_esize(dt)};
    tg_parallel_range(n >= TG_PAR_MIN ? tg_threads(ctx) : 1, n, n >= TG_PAR_MIN ? TG_PAR_CHUNK : n, rows_range, &j);
}

/* dst[o, 0:len] = src[o, 0:len] for o < outer; strides and len in elements. */
static void copy_rows(tg_ctx *ctx, tg_dtype dt, void *dst, int64_t ld_dst, const void *src, int64_t ld_src,
                      int64_t outer, int64_t len) {
    move_rows(ctx, dt, false, dst, ld_dst, src, ld_src, outer, len);
}

/* dst[o, 0:len] += src[o, 0:len]; strides and len in elements. */
static void accum_rows(tg_ctx *ctx, tg_dtype dt, void *dst, int64_t ld_dst, const void *src, int64_t ld_src,
                       int64_t outer, int64_t len) {
    move_rows(ctx, dt, true, dst, ld_dst, src, ld_src, outer, len);
}

/* ---- transpose ------------------------------------------------------------ */

/* Forward: y[..., j, i] = x[..., i, j],  x (..., R, C)  y (..., C, R). */
static void transpose_forward(tg_tensor *y, const tg_tensor *x, int64_t B, int64_t R, int64_t C) {
    if (x->dtype == TG_F64) transpose_kernel_f64(y->data, x->data, B, R, C, false);
    else if (x->dtype == TG_F32) transpose_kernel_f32(y->data, x->data, B, R, C, false);
    else transpose_kernel_b16(y->data, x->data, B, R, C, false);
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
    else if (dx->dtype == TG_F32) transpose_kernel_f32(dx->data, dy->data, B, C, R, true);
    else { /* 16 bits: dy transposed into scratch, then added through float32 */
        uint16_t *t = tg_arena_alloc_fn(ctx, n->op->name, (size_t)dx->numel * sizeof *t);
        if (!t) return;
        transpose_kernel_b16(t, dy->data, B, C, R, false);
        tg_lowp_accum(dx->dtype, dx->data, t, (size_t)dx->numel);
    }
}

/* The tangent of a linear map goes through the same map; so does the
 * gradient of the gradient: y = x^T gives dx = dy^T. */
static bool transpose_grad(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    (void)n;
    dx[0] = tg_transpose(ctx, dy);
    return tg_ok(ctx);
}
static tg_tensor *transpose_jvp(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) {
    (void)n;
    return tg_transpose(ctx, t[0]);
}
const tg_op_def tg_transpose_op =
    TG_OP("transpose", transpose_backward, transpose_grad, transpose_jvp, .inputs = "x=-2:2");

tg_tensor *tg_transpose(tg_ctx *ctx, tg_tensor *x) {
    if (!tg_check_arg_any(ctx, __func__, "x", x)) return NULL;
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
    tg_node *n = tg_record(ctx, &tg_transpose_op, y, 1, &x);
    if (n) n->i[0] = B, n->i[1] = R, n->i[2] = C;
    return tg_ok(ctx) ? y : NULL;
}

/* ---- permute and transpose of two dims ------------------------------------ */

/* The walk permute_kernel takes for y = x permuted by perm (y's dim i is
 * x's dim perm[i]), simplified so the kernel does long runs: dims of size
 * 1 are dropped, and two dims of y that are adjacent in x too, in the same
 * order, are merged into one (so (B,T,H,D) -> (B,H,T,D) is a walk over
 * B x H x T runs of D, and a plain copy is one run). Gives r >= 1 dims of
 * sizes size[] with their x strides xs[], and lx, the one whose x stride
 * is 1 (x's innermost non-trivial dim). x has at least one element. */
static void perm_plan(int nd, const int64_t *xshape, const int *perm, int *r, int64_t *size, int64_t *xs, int *lx) {
    int64_t xstride[TG_MAX_DIMS];
    int64_t s = 1;
    for (int d = nd - 1; d >= 0; d--) {
        xstride[d] = s;
        s *= xshape[d];
    }
    int n = 0;
    for (int i = 0; i < nd; i++) {
        int64_t sz = xshape[perm[i]], st = xstride[perm[i]];
        if (sz == 1) continue;
        if (n > 0 && xs[n - 1] == st * sz) { /* continues the previous dim in x: merge */
            size[n - 1] *= sz;
            xs[n - 1] = st;
        } else {
            size[n] = sz;
            xs[n] = st;
            n++;
        }
    }
    if (n == 0) size[0] = 1, xs[0] = 1, n = 1;
    *r = n;
    *lx = n - 1;
    for (int d = 0; d < n; d++)
        if (xs[d] == 1) *lx = d;
}

/* A plan and its arrays: the tasks of permute_run. */
typedef struct permute_job {
    tg_dtype dt;
    bool acc;
    void *y;
    const void *x;
    int r, lx;
    int64_t size[TG_MAX_DIMS], xs[TG_MAX_DIMS];
} permute_job;

static void permute_range(void *arg, int64_t o0, int64_t o1, int worker) {
    const permute_job *p = arg;
    (void)worker;
    if (p->dt == TG_F64) permute_kernel_f64(p->y, p->x, p->r, p->size, p->xs, p->lx, p->acc, o0, o1);
    else if (p->dt == TG_F32) permute_kernel_f32(p->y, p->x, p->r, p->size, p->xs, p->lx, p->acc, o0, o1);
    else permute_kernel_b16(p->y, p->x, p->r, p->size, p->xs, p->lx, false, o0, o1);
}

/* y = x permuted (or y += when acc); x has shape xshape (nd dims), numel
 * elements. The kernel's outer walk (every dim of the plan but the last,
 * and but lx when it tiles) is cut into tasks of about TG_PAR_CHUNK
 * elements on the context's threads, from TG_PAR_MIN elements on. */
static void permute_run(tg_ctx *ctx, tg_dtype dt, void *y, const void *x, int nd, const int64_t *xshape,
                        const int *perm, bool acc, int64_t numel) {
    if (acc && tg_is_lowp(dt)) { /* 16 bits: permuted into scratch, then added through float32 */
        uint16_t *t = tg_arena_alloc_fn(ctx, "permute", (size_t)numel * sizeof *t);
        if (!t) return;
        permute_run(ctx, dt, t, x, nd, xshape, perm, false, numel);
        tg_lowp_accum(dt, y, t, (size_t)numel);
        return;
    }
    permute_job p = {.dt = dt, .acc = acc, .y = y, .x = x};
    perm_plan(nd, xshape, perm, &p.r, p.size, p.xs, &p.lx);
    const bool runs = p.lx == p.r - 1;
    int64_t n_outer = 1;
    for (int d = 0; d < p.r - 1; d++)
        if (runs || d != p.lx) n_outer *= p.size[d];
    const int64_t per = numel / n_outer; /* elements per step of the walk */
    const int nt = numel >= TG_PAR_MIN ? tg_threads(ctx) : 1;
    tg_parallel_range(nt, n_outer, per >= TG_PAR_CHUNK ? 1 : TG_PAR_CHUNK / per, permute_range, &p);
}

/* A permutation of at most TG_MAX_DIMS dims in one integer of the record:
 * 4 bits per entry. */
static int64_t perm_pack(int nd, const int *perm) {
    int64_t p = 0;
    for (int i = 0; i < nd; i++) p |= (int64_t)perm[i] << (4 * i);
    return p;
}

/* Forward was y[i_0, ..., i_{n-1}] = x[j] with j_{perm[d]} = i_d: every x
 * element went to exactly one place of y, so its gradient is the dy
 * element at that place: dx += dy permuted back by the inverse
 * permutation, inv[perm[d]] = d (dy has y's shape). */
static void permute_backward(tg_ctx *ctx, tg_node *n) {
    const tg_tensor *dy = n->out->grad;
    tg_tensor *dx = tg_grad_of(ctx, n->in[0]);
    if (!dx || dx->numel == 0) return;
    int nd = (int)n->i[1], inv[TG_MAX_DIMS];
    for (int d = 0; d < nd; d++) inv[(n->i[0] >> (4 * d)) & 15] = d;
    permute_run(ctx, dx->dtype, dx->data, dy->data, nd, dy->shape, inv, true, dx->numel);
}

/* y = x permuted by perm (packed 4 bits a dim in i[0]): dx = dy permuted
 * by the inverse, inv[perm[d]] = d; t_y = t_x permuted by perm. */
static bool permute_grad(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    int nd = (int)n->i[1], inv[TG_MAX_DIMS];
    for (int d = 0; d < nd; d++) inv[(n->i[0] >> (4 * d)) & 15] = d;
    dx[0] = tg_permute(ctx, dy, inv);
    return tg_ok(ctx);
}
static tg_tensor *permute_jvp(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) {
    int perm[TG_MAX_DIMS];
    for (int d = 0; d < (int)n->i[1]; d++) perm[d] = (int)((n->i[0] >> (4 * d)) & 15);
    return tg_permute(ctx, t[0], perm);
}
const tg_op_def tg_permute_op =
    TG_OP("permute", permute_backward, permute_grad, permute_jvp, .args = "perm", .inputs = "x=-2:2");
const tg_op_def tg_transpose_dims_op =
    TG_OP("transpose_dims", permute_backward, permute_grad, permute_jvp, .args = "dim0=0,dim1=1", .inputs = "x=-2:2");

/* The op behind tg_permute and tg_transpose_dims (op, their descriptors):
 * perm is already checked and normalized (0..ndim-1, each once). */
static tg_tensor *permute_op(tg_ctx *ctx, const char *fn, const tg_op_def *op, tg_tensor *x, const int *perm) {
    const int nd = x->ndim;
    int64_t shape[TG_MAX_DIMS];
    for (int d = 0; d < nd; d++) shape[d] = x->shape[perm[d]];
    tg_tensor *y = tg_new_tensor(ctx, fn, x->dtype, nd, shape);
    if (!y) return NULL;
    if (y->numel) permute_run(ctx, x->dtype, y->data, x->data, nd, x->shape, perm, false, y->numel);
    tg_node *n = tg_record(ctx, op, y, 1, &x);
    if (n) n->i[0] = perm_pack(nd, perm), n->i[1] = nd;
    return tg_ok(ctx) ? y : NULL;
}

tg_tensor *tg_permute(tg_ctx *ctx, tg_tensor *x, const int *perm) {
    if (!tg_check_arg_any(ctx, __func__, "x", x)) return NULL;
    const int nd = x->ndim;
    if (!perm && nd > 0) {
        tg_null_error(ctx, __func__, "perm");
        return NULL;
    }
    int p[TG_MAX_DIMS];
    bool seen[TG_MAX_DIMS] = {false};
    for (int d = 0; d < nd; d++) {
        p[d] = perm[d] < 0 ? perm[d] + nd : perm[d];
        if (p[d] < 0 || p[d] >= nd || seen[p[d]]) {
            char s[TG_SHAPE_STR], ps[128];
            int len = 0;
            for (int e = 0; e < nd; e++) len += snprintf(ps + len, sizeof ps - (size_t)len, e ? ", %d" : "%d", perm[e]);
            tg_error(ctx, TG_ERR_INDEX, __func__, "perm (%s) for x of shape %s: entry %d = %d is %s", ps,
                     tg_shape_of(s, x), d, perm[d],
                     p[d] < 0 || p[d] >= nd ? "out of range" : "repeated (need each dim once)");
            return NULL;
        }
        seen[p[d]] = true;
    }
    return permute_op(ctx, __func__, &tg_permute_op, x, p);
}

tg_tensor *tg_transpose_dims(tg_ctx *ctx, tg_tensor *x, int dim0, int dim1) {
    if (!tg_check_arg_any(ctx, __func__, "x", x)) return NULL;
    int d0 = norm_axis(ctx, __func__, x, dim0);
    int d1 = d0 < 0 ? -1 : norm_axis(ctx, __func__, x, dim1);
    if (d1 < 0) return NULL;
    int p[TG_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) p[d] = d;
    p[d0] = d1;
    p[d1] = d0;
    return permute_op(ctx, __func__, &tg_transpose_dims_op, x, p);
}

/* ---- reshape ---------------------------------------------------------------- */

/* Forward: y is x's data under a new shape (no copy), y_k = x_k for the
 * flat index k. So dx_k += dy_k, element by element over the flat data. */
static void reshape_backward(tg_ctx *ctx, tg_node *n) {
    const tg_tensor *dy = n->out->grad;
    tg_tensor *dx = tg_grad_of(ctx, n->in[0]);
    if (dx) accum_rows(ctx, dx->dtype, dx->data, 0, dy->data, 0, 1, dx->numel);
}

/* dx = dy reshaped back; t_y = t_x reshaped. */
static bool reshape_grad(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    dx[0] = tg_reshape(ctx, dy, n->in[0]->ndim, n->in[0]->shape);
    return tg_ok(ctx);
}
static tg_tensor *reshape_jvp(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) {
    return tg_reshape(ctx, t[0], n->out->ndim, n->out->shape);
}
const tg_op_def tg_reshape_op =
    TG_OP("reshape", reshape_backward, reshape_grad, reshape_jvp, .args = "to", .inputs = "x=-2:2");

tg_tensor *tg_reshape(tg_ctx *ctx, tg_tensor *x, int ndim, const int64_t *shape) {
    if (!tg_check_arg_any(ctx, __func__, "x", x)) return NULL;
    int64_t s[TG_MAX_DIMS];
    if (!tg_infer_shape(ctx, __func__, x, ndim, shape, s)) return NULL;
    tg_tensor *y = tg_view(ctx, x, ndim, s);
    if (!y) return NULL;
    tg_record(ctx, &tg_reshape_op, y, 1, &x);
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
            accum_rows(ctx, dx->dtype, dx->data, len, (const unsigned char *)dy->data + (size_t)off * es, ld_y, outer,
                       len);
        off += len;
    }
}

/* dx_k = dy's slice of x_k; t_y = the concat of the t_k. */
static bool concat_grad(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    const int axis = (int)n->i[0];
    int64_t off = 0;
    for (int k = 0; k < n->n_in; k++) {
        int64_t len = n->in[k]->shape[axis];
        if (tg_node_needs_grad(n, k)) dx[k] = tg_slice(ctx, dy, axis, off, off + len);
        off += len;
    }
    return tg_ok(ctx);
}
static tg_tensor *concat_jvp(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) {
    return tg_concat(ctx, n->n_in, t, (int)n->i[0]);
}
/* (up to 8 inputs, as a check names them) */
const tg_op_def tg_concat_op = TG_OP("concat", concat_backward, concat_grad, concat_jvp, .args = "axis=0",
                                     .inputs = "x0=-2:2,x1=-2:2,x2=-2:2,x3=-2:2,x4=-2:2,x5=-2:2,x6=-2:2,x7=-2:2");

tg_tensor *tg_concat(tg_ctx *ctx, int n, tg_tensor *const *xs, int axis) {
    if (!tg_ok(ctx)) return NULL;
    if (!xs) {
        tg_null_error(ctx, __func__, "xs");
        return NULL;
    }
    if (n < 1) {
        tg_error(ctx, TG_ERR_VALUE, __func__, "n = %d: need at least one tensor", n);
        return NULL;
    }
    for (int k = 0; k < n; k++) {
        char arg[24];
        snprintf(arg, sizeof arg, "xs[%d]", k);
        if (!tg_check_arg_any(ctx, __func__, arg, xs[k])) return NULL;
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
    int64_t ld_y = shape[a] * inner;
    int64_t off = 0;
    for (int k = 0; k < n; k++) {
        int64_t len = xs[k]->shape[a] * inner;
        copy_rows(ctx, y->dtype, (unsigned char *)y->data + (size_t)off * es, ld_y, xs[k]->data, len, outer, len);
        off += len;
    }
    tg_node *nd = tg_record(ctx, &tg_concat_op, y, n, xs);
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
    accum_rows(ctx, dx->dtype, (unsigned char *)dx->data + (size_t)(start * inner) * es, dx->shape[axis] * inner,
               dy->data, len, outer, len);
}

/* dx = dy padded with zeros before and after (a concat with constant
 * zeros); t_y = the same slice of t_x. */
static bool slice_grad(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    tg_tensor *x = n->in[0];
    const int axis = (int)n->i[0];
    const int64_t start = n->i[1], len = dy->shape[axis], after = x->shape[axis] - start - len;
    tg_tensor *parts[3];
    int np = 0;
    int64_t shape[TG_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    if (start > 0) shape[axis] = start, parts[np++] = tg_zeros(ctx, x->dtype, x->ndim, shape);
    parts[np++] = dy;
    if (after > 0) shape[axis] = after, parts[np++] = tg_zeros(ctx, x->dtype, x->ndim, shape);
    dx[0] = np == 1 ? dy : tg_concat(ctx, np, parts, axis);
    return tg_ok(ctx);
}
static tg_tensor *slice_jvp(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) {
    const int axis = (int)n->i[0];
    return tg_slice(ctx, t[0], axis, n->i[1], n->i[1] + n->out->shape[axis]);
}
const tg_op_def tg_slice_op =
    TG_OP("slice", slice_backward, slice_grad, slice_jvp, .args = "axis=0,start=0,end", .inputs = "x=-2:2");

tg_tensor *tg_slice(tg_ctx *ctx, tg_tensor *x, int axis, int64_t start, int64_t end) {
    if (!tg_check_arg_any(ctx, __func__, "x", x)) return NULL;
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
    int64_t len = (end - start) * inner;
    copy_rows(ctx, x->dtype, y->data, len, (const unsigned char *)x->data + (size_t)(start * inner) * es, S * inner,
              outer, len);
    tg_node *n = tg_record(ctx, &tg_slice_op, y, 1, &x);
    if (n) n->i[0] = a, n->i[1] = start;
    return tg_ok(ctx) ? y : NULL;
}

#endif

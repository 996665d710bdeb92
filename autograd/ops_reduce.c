/* Reductions: sum and mean over all elements or one axis (keepdim), max
 * over one axis.
 *
 * The kernels (each forward beside its backward, with the derivation) are
 * in ops_reduce.inc, instantiated here for float and double; this file
 * holds the glue: argument checks, the axis split, the output shape,
 * dispatch by dtype and the tape record. Sums save nothing for backward
 * (the input's shape is enough); max saves the index of each maximum. */

#include "autograd/grad_graph.h"
#include "autograd/lowp.h"
#include "autograd/ops.h"
#include "tensor/parallel.h"

#include <string.h>

/* Whole-tensor sums are cut into blocks of TG_SUM_BLOCK elements (more per
 * block for huge tensors, so there are at most TG_SUM_MAX_BLOCKS), a
 * choice that depends only on n. Axis sums with inner > 1 work on TG_COLS
 * output columns at a time. */
#define TG_SUM_BLOCK ((int64_t)4096)
#define TG_SUM_MAX_BLOCKS 1024
#define TG_COLS 256

static int64_t tg_sum_block_size(int64_t n) {
    if (n <= TG_SUM_BLOCK * TG_SUM_MAX_BLOCKS) return TG_SUM_BLOCK;
    return (n + TG_SUM_MAX_BLOCKS - 1) / TG_SUM_MAX_BLOCKS;
}

#define TG_TEMPLATE "autograd/ops_reduce.inc"
#include "tensor/instantiate.h"

/* ---- whole-tensor sum and mean ------------------------------------------- */

/* The divisor is n->f[0]: 1 for sum, numel for mean. */
static void sum_all_bwd(tg_ctx *ctx, tg_node *n) {
    tg_tensor *x = n->in[0];
    tg_tensor *dx = tg_grad_of(ctx, x);
    if (!dx) return;
    const tg_tensor *dy = n->out->grad;
    if (x->dtype == TG_F64) sum_all_backward_f64(ctx, dx->data, dy->data, x->numel, n->f[0]);
    else sum_all_backward_f32(ctx, dx->data, dy->data, x->numel, n->f[0]);
}

/* sum / mean: y = (1/m) sum_i x_i (m = 1 or numel): dx_i = dy / m. */
static bool sum_all_grad(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    tg_tensor *x = n->in[0];
    tg_tensor *g = tg_gg_expand(ctx, tg_reshape(ctx, dy, 0, NULL), x);
    dx[0] = n->f[0] == 1 ? g : tg_mul_scalar(ctx, g, 1.0 / n->f[0]);
    return tg_ok(ctx);
}

/* Sums and means are linear: the tangent is the same reduction of t_x. */
static tg_tensor *sum_jvp(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) {
    (void)n;
    return tg_sum(ctx, t[0]);
}
static tg_tensor *mean_jvp(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) {
    (void)n;
    return tg_mean(ctx, t[0]);
}

/* Linear, so central differences have no truncation error: a check takes
 * a large float32 step (check/registry.c says how the steps were chosen). */
const tg_op_def tg_sum_op = TG_OP("sum", sum_all_bwd, sum_all_grad, sum_jvp, .inputs = "x=-2:2", .f32 = {.h = 0.1});
const tg_op_def tg_mean_op = TG_OP("mean", sum_all_bwd, sum_all_grad, mean_jvp, .inputs = "x=-2:2", .f32 = {.h = 0.1});

static tg_tensor *sum_all(tg_ctx *ctx, const char *fn, const tg_op_def *op, tg_tensor *x, bool mean) {
    if (tg_lowp_args(ctx, fn, 1, &x)) return tg_lowp_out(ctx, sum_all(ctx, fn, op, tg_lowp_in(ctx, x), mean), x);
    if (!tg_check_arg(ctx, fn, "x", x)) return NULL;
    if (mean && x->numel == 0) {
        char s[TG_SHAPE_STR];
        tg_error(ctx, TG_ERR_VALUE, fn, "empty reduction: the mean of x of shape %s (no elements) is undefined",
                 tg_shape_of(s, x));
        return NULL;
    }
    /* A 0-d output. x->shape stands in for the (unread) shape: a NULL shape
     * costs ~0.7 us in tg_new_tensor on AVX-512 builds, where the compiler
     * turns the shape copy into a masked load that faults on NULL and is
     * suppressed in microcode. */
    tg_tensor *y = tg_new_tensor(ctx, fn, x->dtype, 0, x->shape);
    if (!y) return NULL;
    double div = mean ? (double)x->numel : 1.0;
    if (x->dtype == TG_F64) sum_all_forward_f64(ctx, y->data, x->data, x->numel, div);
    else sum_all_forward_f32(ctx, y->data, x->data, x->numel, div);
    tg_node *n = tg_record(ctx, op, y, 1, &x);
    if (n) n->f[0] = div;
    return tg_ok(ctx) ? y : NULL;
}

tg_tensor *tg_sum(tg_ctx *ctx, tg_tensor *x) { return sum_all(ctx, "tg_sum", &tg_sum_op, x, false); }
tg_tensor *tg_mean(tg_ctx *ctx, tg_tensor *x) { return sum_all(ctx, "tg_mean", &tg_mean_op, x, true); }

/* ---- axis reductions ------------------------------------------------------- */

typedef struct axis_split {
    int axis;                /* normalized, 0..ndim-1 (0 for a 0-d x) */
    int64_t outer, R, inner; /* x seen as (outer, R, inner) */
    int out_ndim;
    int64_t out_shape[TG_MAX_DIMS];
} axis_split;

/* Checks axis against x (Python-style negative axes; a 0-d x takes 0 or
 * -1) and fills the split and the output shape. */
static bool split_axis(tg_ctx *ctx, const char *fn, const tg_tensor *x, int axis, bool keepdim, axis_split *s) {
    int nd = x->ndim;
    int lo = nd > 0 ? -nd : -1, hi = nd > 0 ? nd - 1 : 0;
    if (axis < lo || axis > hi) {
        char buf[TG_SHAPE_STR];
        tg_error(ctx, TG_ERR_SHAPE, fn, "axis %d is out of range for x of shape %s (valid: %d..%d)", axis,
                 tg_shape_of(buf, x), lo, hi);
        return false;
    }
    s->axis = axis < 0 ? axis + (nd > 0 ? nd : 1) : axis;
    s->outer = s->R = s->inner = 1;
    for (int d = 0; d < TG_MAX_DIMS; d++) s->out_shape[d] = 1;
    if (nd == 0) {
        s->out_ndim = 0;
        return true;
    }
    for (int d = 0; d < s->axis; d++) s->outer *= x->shape[d];
    s->R = x->shape[s->axis];
    for (int d = s->axis + 1; d < nd; d++) s->inner *= x->shape[d];
    s->out_ndim = 0;
    for (int d = 0; d < nd; d++) {
        if (d == s->axis && !keepdim) continue;
        s->out_shape[s->out_ndim++] = d == s->axis ? 1 : x->shape[d];
    }
    return true;
}

static bool empty_axis(tg_ctx *ctx, const char *fn, const tg_tensor *x, const axis_split *s, int axis) {
    if (s->R > 0) return false;
    char buf[TG_SHAPE_STR];
    tg_error(ctx, TG_ERR_VALUE, fn, "empty reduction: axis %d of x of shape %s has size 0", axis, tg_shape_of(buf, x));
    return true;
}

/* The start of an axis reduction's backward: the input's gradient (NULL:
 * nothing to do) and the input's split along the axis in n->i[0]. */
static tg_tensor *axis_grad(tg_ctx *ctx, tg_node *n, axis_split *s) {
    tg_tensor *dx = tg_grad_of(ctx, n->in[0]);
    return dx && split_axis(ctx, n->op->name, n->in[0], (int)n->i[0], false, s) ? dx : NULL;
}

/* n->i[0] = axis (normalized), n->f[0] = divisor (1: sum, R: mean). */
static void sum_axis_bwd(tg_ctx *ctx, tg_node *n) {
    axis_split s;
    tg_tensor *dx = axis_grad(ctx, n, &s);
    if (!dx) return;
    const tg_tensor *dy = n->out->grad;
    if (dx->dtype == TG_F64) sum_axis_backward_f64(ctx, dx->data, dy->data, s.outer, s.R, s.inner, n->f[0]);
    else sum_axis_backward_f32(ctx, dx->data, dy->data, s.outer, s.R, s.inner, n->f[0]);
}

/* g (the gradient of a reduction over axis) reshaped to x's shape with
 * the axis of size 1: its keepdim form. */
static tg_tensor *keepdim_of(tg_ctx *ctx, tg_tensor *g, const tg_tensor *x, int axis) {
    if (x->ndim == 0) return g;
    int64_t shape[TG_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[axis] = 1;
    return tg_reshape(ctx, g, x->ndim, shape);
}

/* sum_axis / mean_axis: y = (1/m) sum_r x[.., r, ..]: dx = dy (keepdim form)
 * broadcast along the axis, / m. */
static bool sum_axis_grad(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    tg_tensor *x = n->in[0];
    tg_tensor *g = tg_gg_expand(ctx, keepdim_of(ctx, dy, x, (int)n->i[0]), x);
    dx[0] = n->f[0] == 1 ? g : tg_mul_scalar(ctx, g, 1.0 / n->f[0]);
    return tg_ok(ctx);
}

/* The same reduction of t_x, keepdim when the output kept the axis. */
static tg_tensor *sum_axis_jvp(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) {
    return tg_sum_axis(ctx, t[0], (int)n->i[0], n->out->ndim == n->in[0]->ndim);
}
static tg_tensor *mean_axis_jvp(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) {
    return tg_mean_axis(ctx, t[0], (int)n->i[0], n->out->ndim == n->in[0]->ndim);
}

const tg_op_def tg_sum_axis_op =
    TG_OP("sum_axis", sum_axis_bwd, sum_axis_grad, sum_axis_jvp, .args = "axis=-1,keepdim=0", .inputs = "x=-2:2");
const tg_op_def tg_mean_axis_op =
    TG_OP("mean_axis", sum_axis_bwd, sum_axis_grad, mean_axis_jvp, .args = "axis=-1,keepdim=0", .inputs = "x=-2:2");

static tg_tensor *sum_axis(tg_ctx *ctx, const char *fn, const tg_op_def *op, tg_tensor *x, int axis, bool keepdim,
                           bool mean) {
    if (tg_lowp_args(ctx, fn, 1, &x))
        return tg_lowp_out(ctx, sum_axis(ctx, fn, op, tg_lowp_in(ctx, x), axis, keepdim, mean), x);
    if (!tg_check_arg(ctx, fn, "x", x)) return NULL;
    axis_split s;
    if (!split_axis(ctx, fn, x, axis, keepdim, &s)) return NULL;
    if (mean && empty_axis(ctx, fn, x, &s, axis)) return NULL;
    tg_tensor *y = tg_new_tensor(ctx, fn, x->dtype, s.out_ndim, s.out_shape);
    if (!y) return NULL;
    double div = mean ? (double)s.R : 1.0;
    if (x->dtype == TG_F64) sum_axis_forward_f64(ctx, y->data, x->data, s.outer, s.R, s.inner, div);
    else sum_axis_forward_f32(ctx, y->data, x->data, s.outer, s.R, s.inner, div);
    tg_node *n = tg_record(ctx, op, y, 1, &x);
    if (n) {
        n->i[0] = s.axis;
        n->f[0] = div;
    }
    return tg_ok(ctx) ? y : NULL;
}

tg_tensor *tg_sum_axis(tg_ctx *ctx, tg_tensor *x, int axis, bool keepdim) {
    return sum_axis(ctx, "tg_sum_axis", &tg_sum_axis_op, x, axis, keepdim, false);
}
tg_tensor *tg_mean_axis(tg_ctx *ctx, tg_tensor *x, int axis, bool keepdim) {
    return sum_axis(ctx, "tg_mean_axis", &tg_mean_axis_op, x, axis, keepdim, true);
}

/* n->i[0] = axis (normalized); n->saved = the int64 argmax per output. */
static void max_axis_bwd(tg_ctx *ctx, tg_node *n) {
    axis_split s;
    tg_tensor *dx = axis_grad(ctx, n, &s);
    if (!dx) return;
    const tg_tensor *dy = n->out->grad;
    if (dx->dtype == TG_F64) max_axis_backward_f64(dx->data, dy->data, n->saved, s.outer, s.R, s.inner);
    else max_axis_backward_f32(dx->data, dy->data, n->saved, s.outer, s.R, s.inner);
}

/* max_axis: y = x[.., argmax, ..]: dx = dy at the argmax (saved), 0
 * elsewhere: dy broadcast along the axis times a constant one-hot mask. */
static bool max_axis_grad(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    tg_tensor *x = n->in[0];
    const int axis = (int)n->i[0];
    int64_t R = x->ndim ? x->shape[axis] : 1, inner = 1;
    for (int d = axis + 1; d < x->ndim; d++) inner *= x->shape[d];
    const int64_t *idx = n->saved;
    tg_tensor *mask = tg_zeros(ctx, x->dtype, x->ndim, x->shape);
    if (!mask) return false;
    const int64_t outer = R > 0 && inner > 0 ? x->numel / (R * inner) : 0;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) tg_store(mask, (o * R + idx[o * inner + i]) * inner + i, 1.0);
    dx[0] = tg_mul(ctx, tg_gg_expand(ctx, keepdim_of(ctx, dy, x, axis), x), mask);
    return tg_ok(ctx);
}

/* y[o,i] = x[o, idx[o,i], i] (the first maximum, saved): the tangent picks
 * the same element of t_x. */
static tg_tensor *max_axis_jvp(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) {
    const tg_tensor *x = n->in[0];
    const int axis = (int)n->i[0];
    int64_t outer = 1, inner = 1, R = x->ndim ? x->shape[axis] : 1; /* a 0-d x is its own max */
    for (int d = 0; d < axis; d++) outer *= x->shape[d];
    for (int d = axis + 1; d < x->ndim; d++) inner *= x->shape[d];
    const int64_t *idx = n->saved;
    tg_tensor *y = tg_new_like(ctx, "tg_jvp", n->out);
    for (int64_t o = 0; y && o < outer; o++)
        for (int64_t i = 0; i < inner; i++)
            tg_store(y, o * inner + i, tg_load(t[0], (o * R + idx[o * inner + i]) * inner + i));
    return y;
}

/* A check draws distinct values, so that no two tie for a maximum. */
const tg_op_def tg_max_axis_op = TG_OP("max_axis", max_axis_bwd, max_axis_grad, max_axis_jvp,
                                       .args = "axis=-1,keepdim=0", .inputs = "x=-2:2 distinct");

tg_tensor *tg_max_axis(tg_ctx *ctx, tg_tensor *x, int axis, bool keepdim) {
    if (tg_lowp_args(ctx, __func__, 1, &x))
        return tg_lowp_out(ctx, tg_max_axis(ctx, tg_lowp_in(ctx, x), axis, keepdim), x);
    if (!tg_check_arg(ctx, __func__, "x", x)) return NULL;
    axis_split s;
    if (!split_axis(ctx, __func__, x, axis, keepdim, &s)) return NULL;
    if (empty_axis(ctx, __func__, x, &s, axis)) return NULL;
    tg_tensor *y = tg_new_tensor(ctx, __func__, x->dtype, s.out_ndim, s.out_shape);
    if (!y) return NULL;
    int64_t *idx = NULL;
    size_t idx_bytes = (size_t)(s.outer * s.inner) * sizeof *idx;
    if (tg_needs_grad(ctx, 1, &x)) {
        idx = tg_arena_alloc_fn(ctx, __func__, idx_bytes ? idx_bytes : 1);
        if (!idx) return NULL;
    }
    if (x->dtype == TG_F64) max_axis_forward_f64(y->data, idx, x->data, s.outer, s.R, s.inner);
    else max_axis_forward_f32(y->data, idx, x->data, s.outer, s.R, s.inner);
    tg_node *n = idx ? tg_record(ctx, &tg_max_axis_op, y, 1, &x) : NULL;
    if (n) {
        n->i[0] = s.axis;
        n->saved = idx;
        tg_node_count_saved(ctx, n, idx_bytes);
    }
    return tg_ok(ctx) ? y : NULL;
}

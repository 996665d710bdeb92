/* The shared driver of elementwise unary ops; see unary.h. */
#include "autograd/unary.h"

tg_tensor *tg_unary_apply(tg_ctx *ctx, const tg_unary_op *op, tg_backward_fn backward, tg_tensor *x, double a) {
    if (!tg_check_arg(ctx, op->fn, "x", x)) return NULL;
    tg_tensor *y = tg_new_like(ctx, op->fn, x);
    if (!y) return NULL;
    int64_t n = x->numel;
    if (x->dtype == TG_F64) {
        double *yd = y->data;
        const double *xd = x->data;
        TG_SPLIT(ctx, n, op->fwd_f64(yd + i0, xd + i0, len, a));
    } else {
        float *yd = y->data;
        const float *xd = x->data;
        TG_SPLIT(ctx, n, op->fwd_f32(yd + i0, xd + i0, len, a));
    }
    tg_node *node = tg_record(ctx, op->name, backward, y, 1, &x);
    if (node) {
        node->f[0] = a;
        size_t bytes = (size_t)n * tg_esize(x->dtype);
        if (op->uses_x) tg_node_count_saved(ctx, node, bytes);
        if (op->uses_y) tg_node_count_saved(ctx, node, bytes);
    }
    return tg_ok(ctx) ? y : NULL;
}

void tg_unary_backward(tg_ctx *ctx, tg_node *n, const tg_unary_op *op) {
    tg_tensor *x = n->in[0];
    tg_tensor *dx = tg_grad_of(ctx, x);
    if (!dx) return;
    const tg_tensor *dy = n->out->grad;
    const tg_tensor *y = n->out;
    double a = n->f[0];
    int64_t cnt = x->numel;
    if (x->dtype == TG_F64) {
        double *g = dx->data;
        const double *gy = dy->data, *xd = x->data, *yd = y->data;
        TG_SPLIT(ctx, cnt, op->bwd_f64(g + i0, gy + i0, xd + i0, yd + i0, len, a));
    } else {
        float *g = dx->data;
        const float *gy = dy->data, *xd = x->data, *yd = y->data;
        TG_SPLIT(ctx, cnt, op->bwd_f32(g + i0, gy + i0, xd + i0, yd + i0, len, a));
    }
}

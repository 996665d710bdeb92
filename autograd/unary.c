/* The shared driver of elementwise unary ops; see unary.h. */
#include "autograd/unary.h"
#include "tensor/parallel.h"

#include <string.h>

typedef struct {
    tg_piece_fn piece;
    void *arg;
} split_job;

static void split_range(void *p, int64_t i0, int64_t i1, int worker) {
    const split_job *s = p;
    (void)worker;
    s->piece(s->arg, i0, i1 - i0);
}

void tg_split_parallel(int nt, int64_t n, tg_piece_fn piece, void *arg) {
    split_job s = {piece, arg};
    tg_parallel_range(nt, n, TG_PAR_CHUNK, split_range, &s);
}

/* One op's kernels on one piece: y = f(x) forward, dx += dy f'(x) backward.
 * x, y, dx, dy: the whole tensors; the piece is [i0, i0 + len). */
typedef struct unary_job {
    const tg_unary_op *op;
    double a;
    const tg_tensor *x, *y, *dy;
    tg_tensor *dx;
} unary_job;

static void forward_piece(void *arg, int64_t i0, int64_t len) {
    const unary_job *j = arg;
    if (j->x->dtype == TG_F64) j->op->fwd_f64((double *)j->y->data + i0, (const double *)j->x->data + i0, len, j->a);
    else j->op->fwd_f32((float *)j->y->data + i0, (const float *)j->x->data + i0, len, j->a);
}

static void backward_piece(void *arg, int64_t i0, int64_t len) {
    const unary_job *j = arg;
    if (j->x->dtype == TG_F64)
        j->op->bwd_f64((double *)j->dx->data + i0, (const double *)j->dy->data + i0, (const double *)j->x->data + i0,
                       (const double *)j->y->data + i0, len, j->a);
    else
        j->op->bwd_f32((float *)j->dx->data + i0, (const float *)j->dy->data + i0, (const float *)j->x->data + i0,
                       (const float *)j->y->data + i0, len, j->a);
}

/* bfloat16 / float16: the op's float32 kernels on blocks of the piece
 * widened to float32, each result rounded once to the 16-bit dtype. That
 * is what the path through float32's tensors (autograd/lowp.h) computes,
 * without its tensors and four conversions: forward y = round(f(x)), and
 * backward dx = round(dx + dy f'(x)), with x and dy widened exactly and,
 * for an op whose backward reads y, y = f(x) in float32 computed again
 * (the path kept it unrounded). */
enum { LOWP_BLOCK = 512 };

static void forward_piece_lowp(void *arg, int64_t i0, int64_t len) {
    const unary_job *j = arg;
    const tg_dtype dt = j->x->dtype;
    float xb[LOWP_BLOCK], yb[LOWP_BLOCK];
    for (int64_t i = i0; i < i0 + len; i += LOWP_BLOCK) {
        const size_t n = (size_t)(i0 + len - i < LOWP_BLOCK ? i0 + len - i : LOWP_BLOCK);
        tg_convert_n(xb, TG_F32, (const uint16_t *)j->x->data + i, dt, n);
        j->op->fwd_f32(yb, xb, (int64_t)n, j->a);
        tg_convert_n((uint16_t *)j->y->data + i, dt, yb, TG_F32, n);
    }
}

static void backward_piece_lowp(void *arg, int64_t i0, int64_t len) {
    const unary_job *j = arg;
    const tg_dtype dt = j->x->dtype;
    float xb[LOWP_BLOCK], yb[LOWP_BLOCK], gb[LOWP_BLOCK], db[LOWP_BLOCK], acc[LOWP_BLOCK];
    for (int64_t i = i0; i < i0 + len; i += LOWP_BLOCK) {
        const size_t n = (size_t)(i0 + len - i < LOWP_BLOCK ? i0 + len - i : LOWP_BLOCK);
        uint16_t *dx = (uint16_t *)j->dx->data + i;
        tg_convert_n(xb, TG_F32, (const uint16_t *)j->x->data + i, dt, n);
        if (j->op->uses_y) j->op->fwd_f32(yb, xb, (int64_t)n, j->a);
        tg_convert_n(gb, TG_F32, (const uint16_t *)j->dy->data + i, dt, n);
        memset(db, 0, n * sizeof *db);
        j->op->bwd_f32(db, gb, xb, yb, (int64_t)n, j->a);
        tg_convert_n(acc, TG_F32, dx, dt, n);
        for (size_t k = 0; k < n; k++) acc[k] += db[k];
        tg_convert_n(dx, dt, acc, TG_F32, n);
    }
}

tg_tensor *tg_unary_apply(tg_ctx *ctx, const tg_unary_op *op, tg_tensor *x, double a) {
    if (!tg_check_arg_any(ctx, op->fn, "x", x)) return NULL;
    tg_tensor *y = tg_new_like(ctx, op->fn, x);
    if (!y) return NULL;
    unary_job job = {.op = op, .a = a, .x = x, .y = y};
    tg_split(ctx, x->numel, tg_is_lowp(x->dtype) ? forward_piece_lowp : forward_piece, &job);
    tg_node *node = tg_record(ctx, &op->def, y, 1, &x);
    if (node) {
        node->f[0] = a;
        size_t bytes = (size_t)x->numel * tg_esize(x->dtype);
        if (op->uses_x) tg_node_count_saved(ctx, node, bytes);
        if (op->uses_y) tg_node_count_saved(ctx, node, bytes);
    }
    return tg_ok(ctx) ? y : NULL;
}

/* The op of a unary op's record: its descriptor is the tg_unary_op's first
 * member. */
static const tg_unary_op *unary_of(const tg_node *n) { return (const tg_unary_op *)n->op; }

void tg_unary_backward(tg_ctx *ctx, tg_node *n) {
    const tg_unary_op *op = unary_of(n);
    tg_tensor *x = n->in[0];
    tg_tensor *dx = tg_grad_of(ctx, x);
    if (!dx) return;
    unary_job job = {.op = op, .a = n->f[0], .x = x, .y = n->out, .dy = n->out->grad, .dx = dx};
    tg_split(ctx, x->numel, tg_is_lowp(x->dtype) ? backward_piece_lowp : backward_piece, &job);
}

tg_tensor *tg_unary_jvp(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) {
    double (*d)(double, double, double) = unary_of(n)->deriv;
    tg_tensor *y = tg_new_like(ctx, "tg_jvp", n->out);
    const tg_tensor *x = n->in[0];
    const bool lowp = tg_is_lowp(x->dtype); /* y unrounded, as the path through float32 had it */
    for (int64_t i = 0; y && i < y->numel; i++) {
        double xi = tg_load(x, i), yi = tg_load(n->out, i);
        if (lowp) unary_of(n)->fwd_f64(&yi, &xi, 1, n->f[0]);
        tg_store(y, i, d(xi, yi, n->f[0]) * tg_load(t[0], i));
    }
    return y;
}

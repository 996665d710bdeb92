/* Dropout, inverted: in training each element is dropped with probability
 * p and the kept ones are scaled by 1 / (1 - p), so the expected output is
 * the input and evaluation needs no rescaling:
 *   y_i = x_i m_i / (1 - p),   m_i = [u_i >= p]
 * u_i is the f64 uniform of Philox block i of the context's stream
 * (tg_rng_block: counter = offset + i), so the mask is a pure function of
 * (seed, offset, i): any thread can draw any element and the result never
 * depends on the thread count. The offset then advances by numel, as for
 * every other draw from the stream.
 *
 * The forward saves the mask, one byte per element (a quarter of a float32
 * tensor); backward reads only it and dy.
 *
 * The kernels, written once for T (float, double), open the file, which
 * instantiates itself (tensor/instantiate.h) and so defines
 *   dropout_apply_f32  dropout_backward_kernel_f32  and the same with _f64. */
#ifdef T /* the kernels, compiled once per element type (tensor/instantiate.h) */

/* y_i = x_i * (m_i * scale), m_i = 1 when kept, 0 when dropped. Written as
 * a product (not a select) so a NaN or inf x stays NaN where dropped, as in
 * PyTorch. y, x, mask: (n) */
static void TG_FN(dropout_apply)(T *restrict y, const T *restrict x, const uint8_t *restrict mask, int64_t n,
                                 double scale) {
    const T s = (T)scale;
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * (mask[i] ? s : (T)0);
}

/* dx_i += dy_i * (m_i * scale).  dx, dy, mask: (n) */
static void TG_FN(dropout_backward_kernel)(T *restrict dx, const T *restrict dy, const uint8_t *restrict mask,
                                           int64_t n, double scale) {
    const T s = (T)scale;
    for (int64_t i = 0; i < n; i++) dx[i] += dy[i] * (mask[i] ? s : (T)0);
}

#else /* the op, compiled once */

#include "autograd/lowp.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "tensor/parallel.h"

#include <math.h>

#define TG_TEMPLATE "autograd/ops_dropout.c"
#include "tensor/instantiate.h"

/* Below this many elements one thread draws the whole mask. */
#define DROPOUT_PAR_MIN 16384

typedef struct {
    const tg_ctx *ctx;
    uint8_t *mask;
    double p;
} mask_job;

/* m_i = [u_i >= p] for i0 <= i < i1, u_i from block i of the stream: one
 * task of the pool. mask: (n) */
static void dropout_mask_task(void *arg, int64_t i0, int64_t i1, int worker) {
    const mask_job *j = arg;
    (void)worker;
    for (int64_t i = i0; i < i1; i++) {
        uint32_t x[4];
        tg_rng_block(j->ctx, (uint64_t)i, x);
        j->mask[i] = tg_u01_f64(x[0], x[1]) >= j->p;
    }
}

/* Forward was y_i = x_i m_i s with s = 1 / (1 - p) and m fixed (drawn, not a
 * function of x), so dx_i += dy_i m_i s. */
static void dropout_backward(tg_ctx *ctx, tg_node *n) {
    tg_tensor *dx = tg_grad_of(ctx, n->in[0]);
    if (!dx) return;
    const tg_tensor *dy = n->out->grad;
    if (dx->dtype == TG_F64) dropout_backward_kernel_f64(dx->data, dy->data, n->saved, dx->numel, n->f[0]);
    else dropout_backward_kernel_f32(dx->data, dy->data, n->saved, dx->numel, n->f[0]);
}

/* y = x m scale (m the saved 0/1 mask): dx = dy m scale. */
static bool dropout_grad(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    tg_tensor *x = n->in[0];
    const uint8_t *mask = n->saved;
    tg_tensor *m = tg_new_tensor(ctx, "tg_grad", x->dtype, x->ndim, x->shape);
    if (!m) return false;
    for (int64_t i = 0; i < x->numel; i++) tg_store(m, i, mask[i] ? n->f[0] : 0.0);
    dx[0] = tg_mul(ctx, dy, m);
    return tg_ok(ctx);
}

/* y = x m s with the mask m (saved) and s = 1/(1 - p): t_y = t_x m s. */
static tg_tensor *dropout_jvp(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) {
    const uint8_t *mask = n->saved;
    tg_tensor *y = tg_new_like(ctx, "tg_jvp", n->out);
    for (int64_t i = 0; y && i < y->numel; i++) tg_store(y, i, mask[i] ? tg_load(t[0], i) * n->f[0] : 0.0);
    return y;
}

const tg_op_def tg_dropout_op =
    TG_OP("dropout", dropout_backward, dropout_grad, dropout_jvp, .args = "p=0.3,train=1", .inputs = "x=-2:2");

tg_tensor *tg_dropout(tg_ctx *ctx, tg_tensor *x, double p, bool training) {
    if (training && p != 0.0 && tg_lowp_args(ctx, __func__, 1, &x)) /* bfloat16, float16: autograd/lowp.h */
        return tg_lowp_out(ctx, tg_dropout(ctx, tg_lowp_in(ctx, x), p, training), x);
    if (!tg_check_arg_any(ctx, __func__, "x", x)) return NULL; /* a 16-bit x only as the identity below */
    if (!(p >= 0.0 && p < 1.0)) {
        tg_error(ctx, TG_ERR_VALUE, __func__, "p = %g is outside [0, 1)", p);
        return NULL;
    }
    if (!training || p == 0.0) return x; /* identity: nothing drawn, nothing recorded */
    tg_tensor *y = tg_new_like(ctx, __func__, x);
    uint8_t *mask = tg_arena_alloc_fn(ctx, __func__, (size_t)(x->numel > 0 ? x->numel : 1));
    if (!y || !mask) return NULL;
    mask_job mj = {ctx, mask, p};
    tg_parallel_range(x->numel >= DROPOUT_PAR_MIN ? tg_threads(ctx) : 1, x->numel, DROPOUT_PAR_MIN / 2,
                      dropout_mask_task, &mj);
    ctx->rng_offset += (uint64_t)x->numel;
    const double scale = 1.0 / (1.0 - p);
    if (x->dtype == TG_F64) dropout_apply_f64(y->data, x->data, mask, x->numel, scale);
    else dropout_apply_f32(y->data, x->data, mask, x->numel, scale);
    tg_node *n = tg_record(ctx, &tg_dropout_op, y, 1, &x);
    if (n) {
        n->saved = mask;
        tg_node_count_saved(ctx, n, (size_t)x->numel);
        n->f[0] = scale;
    }
    return tg_ok(ctx) ? y : NULL;
}

#endif

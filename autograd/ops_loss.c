/* Mean squared error loss, mean reduction:
 *   loss = 1/n sum_i (p_i - t_i)^2      p (pred), t (target): same shape
 * Both inputs may require grad. The sum is taken in double over fixed
 * blocks of MSE_BLOCK elements (threads split the blocks), then the block
 * sums are added in block order: the result is the same for any thread
 * count. Nothing is saved: backward reads p and t.
 *
 * The kernels, written once for T (float, double), open the file, which
 * instantiates itself (tensor/instantiate.h) and so defines
 *   sq_err_sum_f32  mse_backward_kernel_f32  and the same with _f64. */
#ifdef T /* the kernels, compiled once per element type (tensor/instantiate.h) */

/* sum_i (p_i - t_i)^2 over one block, in double, in increasing i.
 * p, t: (n) */
static double TG_FN(sq_err_sum)(const T *restrict p, const T *restrict t, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)p[i] - (double)t[i];
        s += d * d;
    }
    return s;
}

/* dp_i += c (p_i - t_i) and dt_i -= c (p_i - t_i), each when not NULL.
 * dp, dt, p, t: (n) */
static void TG_FN(mse_backward_kernel)(T *dp, T *dt, const T *p, const T *t, int64_t n, double c) {
    const T ct = (T)c;
    if (dp)
        for (int64_t i = 0; i < n; i++) dp[i] += ct * (p[i] - t[i]);
    if (dt)
        for (int64_t i = 0; i < n; i++) dt[i] -= ct * (p[i] - t[i]);
}

#else /* the op, compiled once */

#include "autograd/lowp.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "tensor/parallel.h"

#include <math.h>

#define TG_TEMPLATE "autograd/ops_loss.c"
#include "tensor/instantiate.h"

/* Elements per partial sum (part of the summation order: do not tie it to
 * the thread count). */
#define MSE_BLOCK 8192

/* Threads for `blocks` blocks: all of the context's from two blocks on. */
static int mse_threads(const tg_ctx *ctx, int64_t blocks) { return blocks > 1 ? tg_threads(ctx) : 1; }

/* What the forward's and backward's tasks (one block each) read. */
typedef struct {
    const tg_tensor *p, *t;
    tg_tensor *dp, *dt;
    double c;     /* backward: 2 dloss / n */
    double *part; /* forward: the block sums */
} mse_job;

static void mse_backward_task(void *arg, int64_t b, int worker) {
    const mse_job *j = arg;
    const int64_t i0 = b * MSE_BLOCK, len = j->p->numel - i0 < MSE_BLOCK ? j->p->numel - i0 : MSE_BLOCK;
    (void)worker;
    if (j->p->dtype == TG_F64)
        mse_backward_kernel_f64(j->dp ? (double *)j->dp->data + i0 : NULL, j->dt ? (double *)j->dt->data + i0 : NULL,
                                (const double *)j->p->data + i0, (const double *)j->t->data + i0, len, j->c);
    else
        mse_backward_kernel_f32(j->dp ? (float *)j->dp->data + i0 : NULL, j->dt ? (float *)j->dt->data + i0 : NULL,
                                (const float *)j->p->data + i0, (const float *)j->t->data + i0, len, j->c);
}

/* Forward was loss = 1/n sum_i (p_i - t_i)^2, so with g = dloss
 *   dp_i += 2 g (p_i - t_i) / n,    dt_i -= 2 g (p_i - t_i) / n. */
static void mse_backward(tg_ctx *ctx, tg_node *n) {
    tg_tensor *p = n->in[0], *t = n->in[1];
    tg_tensor *dp = tg_grad_of(ctx, p), *dt = tg_grad_of(ctx, t);
    if (!tg_ok(ctx)) return;
    const double c = 2.0 * tg_load(n->out->grad, 0) / (double)p->numel;
    if (dp && dp == dt) return; /* mse(x, x): the two terms cancel */
    const int64_t blocks = (p->numel + MSE_BLOCK - 1) / MSE_BLOCK;
    mse_job j = {.p = p, .t = t, .dp = dp, .dt = dt, .c = c};
    tg_parallel(mse_threads(ctx, blocks), blocks, mse_backward_task, &j);
}

static void mse_forward_task(void *arg, int64_t b, int worker) {
    const mse_job *j = arg;
    const int64_t i0 = b * MSE_BLOCK, len = j->p->numel - i0 < MSE_BLOCK ? j->p->numel - i0 : MSE_BLOCK;
    (void)worker;
    j->part[b] = j->p->dtype == TG_F64
                     ? sq_err_sum_f64((const double *)j->p->data + i0, (const double *)j->t->data + i0, len)
                     : sq_err_sum_f32((const float *)j->p->data + i0, (const float *)j->t->data + i0, len);
}

/* loss = mean((p - t)^2): dp = 2 (p - t) dloss / numel, dt = -dp. */
static bool mse_grad(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    tg_tensor *p = n->in[0], *t = n->in[1];
    tg_tensor *g = tg_mul(ctx, tg_sub(ctx, p, t), tg_mul_scalar(ctx, dy, 2.0 / (double)p->numel));
    if (tg_node_needs_grad(n, 0)) dx[0] = g;
    if (tg_node_needs_grad(n, 1)) dx[1] = tg_neg(ctx, g);
    return tg_ok(ctx);
}

/* loss = mean((p - q)^2): t_loss = 2/n sum (p - q)(t_p - t_q). */
static tg_tensor *mse_jvp(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) {
    const tg_tensor *p = n->in[0], *q = n->in[1];
    double s = 0;
    for (int64_t i = 0; i < p->numel; i++) s += (tg_load(p, i) - tg_load(q, i)) * (tg_load(t[0], i) - tg_load(t[1], i));
    tg_tensor *y = tg_new_like(ctx, "tg_jvp", n->out);
    if (y) tg_store(y, 0, 2.0 * s / (double)p->numel);
    return y;
}

const tg_op_def tg_mse_loss_op =
    TG_OP("mse_loss", mse_backward, mse_grad, mse_jvp, .inputs = "pred=-2:2,target=-2:2", .f32 = {.h = 0.1});

tg_tensor *tg_mse_loss(tg_ctx *ctx, tg_tensor *pred, tg_tensor *target) {
    if (tg_lowp_args(ctx, __func__, 2, (tg_tensor *[]){pred, target}))
        return tg_lowp_binary(ctx, tg_mse_loss, pred, target);
    if (!tg_check_arg(ctx, __func__, "pred", pred) || !tg_check_arg(ctx, __func__, "target", target)) return NULL;
    if (!tg_check_same_dtype(ctx, __func__, pred, target)) return NULL;
    char sp[TG_SHAPE_STR], st[TG_SHAPE_STR];
    if (!tg_same_shape(pred, target)) {
        tg_error(ctx, TG_ERR_SHAPE, __func__, "pred %s and target %s differ in shape", tg_shape_of(sp, pred),
                 tg_shape_of(st, target));
        return NULL;
    }
    if (pred->numel == 0) {
        tg_error(ctx, TG_ERR_SHAPE, __func__, "pred %s has no elements: empty reduction", tg_shape_of(sp, pred));
        return NULL;
    }
    int64_t blocks = (pred->numel + MSE_BLOCK - 1) / MSE_BLOCK;
    tg_tensor *out = tg_new_tensor(ctx, __func__, pred->dtype, 0, NULL);
    double *part = tg_arena_alloc_fn(ctx, __func__, (size_t)blocks * sizeof *part);
    if (!out || !part) return NULL;
    mse_job j = {.p = pred, .t = target, .part = part};
    tg_parallel(mse_threads(ctx, blocks), blocks, mse_forward_task, &j);
    double s = 0;
    for (int64_t b = 0; b < blocks; b++) s += part[b];
    tg_store(out, 0, s / (double)pred->numel);
    tg_node *n = tg_record(ctx, &tg_mse_loss_op, out, 2, (tg_tensor *[]){pred, target});
    if (n) /* pred and target, read by backward */
        tg_node_count_saved(ctx, n, (size_t)(pred == target ? 1 : 2) * (size_t)pred->numel * tg_esize(pred->dtype));
    return tg_ok(ctx) ? out : NULL;
}

#endif

/* Softmax, log_softmax (over the last axis) and cross-entropy from logits,
 * the last fused with log_softmax: one forward kernel and one backward
 * kernel per row, one tape record.
 *
 * Every row starts by subtracting its max (see ops_softmax.inc), so logits
 * of +-1e4 stay finite in float32. Rows are independent: threads split rows
 * and the results do not depend on the thread count; the cross-entropy's
 * sum over rows is taken in row order after the rows are done.
 *
 * What each op keeps for backward: softmax and log_softmax read their own
 * output y (dx needs only y and dy); cross-entropy saves each row's
 * log-sum-exp (N doubles) and a copy of the targets (N int64) and reads the
 * logits, so no (N,C) probability tensor is ever stored. */
#include "autograd/lowp.h"
#include "autograd/grad_graph.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "tensor/parallel.h"

#include <math.h>
#include <string.h>

#define TG_TEMPLATE "autograd/ops_softmax.inc"
#include "tensor/instantiate.h"

/* Below this many elements one thread does all rows. */
#define SM_PAR_MIN 32768

/* x seen as (rows, C) over its last axis; a 0-d x is one row of one. */
static void rows_of(const tg_tensor *x, int64_t *rows, int64_t *C) {
    *C = x->ndim ? x->shape[x->ndim - 1] : 1;
    int64_t r = 1;
    for (int d = 0; d + 1 < x->ndim; d++) r *= x->shape[d];
    *rows = r;
}

static int row_threads(const tg_ctx *ctx, int64_t rows, int64_t C) {
    return rows < 2 || rows * C < SM_PAR_MIN ? 1 : tg_threads(ctx);
}

/* Rows per task: about SM_PAR_MIN / 2 elements, at least one row. */
static int64_t row_chunk(int64_t C) { return C >= SM_PAR_MIN / 2 ? 1 : SM_PAR_MIN / 2 / (C > 0 ? C : 1); }

/* ---- softmax and log_softmax ------------------------------------------------ */

/* What the row tasks of softmax, log_softmax and cross-entropy read. */
typedef struct {
    tg_tensor *y;       /* forward: the output; backward: dx */
    const tg_tensor *x; /* forward: the input; backward: y */
    const tg_tensor *dy;
    int64_t C;
    bool log_;
    /* cross-entropy */
    const int64_t *target;
    int64_t ignore;
    double *lse, *row_loss, eps, g;
} sm_job;

/* Rows [r0, r1): the forward y = softmax(x) or log_softmax(x) (see
 * softmax_row / log_softmax_row for the math), or, when dy is set, the
 * backward dx += ... from the saved output (dx in `y`, the output in `x`).
 * y, x, dy: (rows, C) */
static void softmax_task(void *arg, int64_t r0, int64_t r1, int worker) {
    const sm_job *j = arg;
    const int64_t C = j->C;
    (void)worker;
    for (int64_t r = r0; r < r1; r++) {
        if (j->x->dtype == TG_F64) {
            double *out = (double *)j->y->data + r * C;
            const double *in = (const double *)j->x->data + r * C;
            const double *d = j->dy ? (const double *)j->dy->data + r * C : NULL;
            if (d) j->log_ ? log_softmax_row_backward_f64(out, d, in, C) : softmax_row_backward_f64(out, d, in, C);
            else j->log_ ? log_softmax_row_f64(out, in, C) : softmax_row_f64(out, in, C);
        } else {
            float *out = (float *)j->y->data + r * C;
            const float *in = (const float *)j->x->data + r * C;
            const float *d = j->dy ? (const float *)j->dy->data + r * C : NULL;
            if (d) j->log_ ? log_softmax_row_backward_f32(out, d, in, C) : softmax_row_backward_f32(out, d, in, C);
            else j->log_ ? log_softmax_row_f32(out, in, C) : softmax_row_f32(out, in, C);
        }
    }
}

/* Backward of either, row by row, from the saved output y (the derivations
 * are above softmax_row_backward and log_softmax_row_backward):
 *   softmax:      dx_i += y_i (dy_i - sum_j dy_j y_j)
 *   log_softmax:  dx_i += dy_i - exp(y_i) sum_j dy_j */
static void softmax_backward(tg_ctx *ctx, tg_node *n) {
    tg_tensor *dx = tg_grad_of(ctx, n->in[0]);
    if (!dx) return;
    int64_t rows, C;
    rows_of(n->out, &rows, &C);
    sm_job j = {.y = dx, .x = n->out, .dy = n->out->grad, .C = C, .log_ = n->i[0] != 0};
    tg_parallel_range(row_threads(ctx, rows, C), rows, row_chunk(C), softmax_task, &j);
}

/* softmax: dx = y (dy - sum(dy y)); log_softmax: dx = dy - e^y sum(dy),
 * the sums over the last axis (kept). */
static bool softmax_grad(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    tg_tensor *y = n->out;
    if (n->i[0]) dx[0] = tg_sub(ctx, dy, tg_mul(ctx, tg_exp(ctx, y), tg_sum_axis(ctx, dy, -1, true)));
    else dx[0] = tg_mul(ctx, y, tg_sub(ctx, dy, tg_sum_axis(ctx, tg_mul(ctx, dy, y), -1, true)));
    return tg_ok(ctx);
}

/* Over rows of the last dim C:
 *   softmax      y = e^x / sum e^x     t_y = y (t - sum_j y_j t_j)
 *   log_softmax  y = x - lse(x)        t_y = t - sum_j p_j t_j,  p = e^y */
static tg_tensor *softmax_jvp(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) {
    const bool log_ = n->i[0] != 0;
    const tg_tensor *y = n->out;
    const int64_t C = y->ndim ? y->shape[y->ndim - 1] : 1, rows = C ? y->numel / C : 0;
    tg_tensor *ty = tg_new_like(ctx, "tg_jvp", y);
    for (int64_t r = 0; ty && r < rows; r++) {
        double s = 0;
        for (int64_t j = 0; j < C; j++) {
            double p = log_ ? exp(tg_load(y, r * C + j)) : tg_load(y, r * C + j);
            s += p * tg_load(t[0], r * C + j);
        }
        for (int64_t j = 0; j < C; j++) {
            double tj = tg_load(t[0], r * C + j);
            tg_store(ty, r * C + j, log_ ? tj - s : tg_load(y, r * C + j) * (tj - s));
        }
    }
    return ty;
}

/* A check's float32 step: a perturbed element moves the whole row. */
const tg_op_def tg_softmax_op =
    TG_OP("softmax", softmax_backward, softmax_grad, softmax_jvp, .inputs = "x=-2:2", .f32 = {.h = 1e-2});
const tg_op_def tg_log_softmax_op =
    TG_OP("log_softmax", softmax_backward, softmax_grad, softmax_jvp, .inputs = "x=-2:2", .f32 = {.h = 1e-2});

static tg_tensor *softmax_op(tg_ctx *ctx, tg_tensor *x, bool log_, const char *fn) {
    if (tg_lowp_args(ctx, fn, 1, &x)) return tg_lowp_out(ctx, softmax_op(ctx, tg_lowp_in(ctx, x), log_, fn), x);
    if (!tg_check_arg(ctx, fn, "x", x)) return NULL;
    tg_tensor *y = tg_new_like(ctx, fn, x);
    if (!y) return NULL;
    int64_t rows, C;
    rows_of(x, &rows, &C);
    sm_job j = {.y = y, .x = x, .C = C, .log_ = log_};
    tg_parallel_range(row_threads(ctx, rows, C), rows, row_chunk(C), softmax_task, &j);
    tg_node *n = tg_record(ctx, log_ ? &tg_log_softmax_op : &tg_softmax_op, y, 1, &x);
    if (n) {
        n->i[0] = log_;
        tg_node_count_saved(ctx, n, (size_t)y->numel * tg_esize(y->dtype)); /* y, read by backward */
    }
    return tg_ok(ctx) ? y : NULL;
}

tg_tensor *tg_softmax(tg_ctx *ctx, tg_tensor *x) { return softmax_op(ctx, x, false, "tg_softmax"); }
tg_tensor *tg_log_softmax(tg_ctx *ctx, tg_tensor *x) { return softmax_op(ctx, x, true, "tg_log_softmax"); }

/* ---- cross-entropy ------------------------------------------------------------ */

/* Cross-entropy rows [i0, i1): the forward, each row's loss and lse
 * (cross_entropy_row), 0 for ignored rows; or, when dx (`y`) is set, the
 * backward (cross_entropy_row_backward), nothing for ignored rows. */
static void cross_entropy_task(void *arg, int64_t i0, int64_t i1, int worker) {
    const sm_job *j = arg;
    const int64_t C = j->C;
    const bool f64 = j->x->dtype == TG_F64;
    (void)worker;
    for (int64_t i = i0; i < i1; i++) {
        const int64_t t = j->target[i];
        const void *x = (const unsigned char *)j->x->data + (size_t)(i * C) * (f64 ? sizeof(double) : sizeof(float));
        if (j->y && t != j->ignore) {
            void *dx = (unsigned char *)j->y->data + (size_t)(i * C) * (f64 ? sizeof(double) : sizeof(float));
            if (f64) cross_entropy_row_backward_f64(dx, x, C, t, j->lse[i], j->eps, j->g);
            else cross_entropy_row_backward_f32(dx, x, C, t, j->lse[i], j->eps, j->g);
        } else if (!j->y) {
            j->lse[i] = 0;
            j->row_loss[i] = 0;
            if (t != j->ignore)
                j->row_loss[i] = f64 ? cross_entropy_row_f64(&j->lse[i], x, C, t, j->eps)
                                     : cross_entropy_row_f32(&j->lse[i], x, C, t, j->eps);
        }
    }
}

/* Backward of the mean over the non-ignored rows R:
 *   loss = 1/|R| sum_{i in R} loss_i,   d loss_i / dx_ic = p_ic - q_ic
 * (derivation above cross_entropy_row_backward), so with g = dloss / |R|
 *   dx_ic += g (p_ic - q_ic)   for i in R;  ignored rows get nothing.
 * With |R| = 0 the loss was NaN and nothing depends on x: no gradient. */
static void cross_entropy_backward(tg_ctx *ctx, tg_node *n) {
    tg_tensor *dx = tg_grad_of(ctx, n->in[0]);
    if (!dx) return;
    const tg_tensor *x = n->in[0];
    const int64_t N = x->shape[0], C = x->shape[1], ignore = n->i[0], count = n->i[1];
    /* saved: lse (N doubles), then the targets (N int64) */
    const double *lse = n->saved;
    const int64_t *target = (const int64_t *)(lse + N);
    const double eps = n->f[0];
    if (count == 0) return;
    const double g = tg_load(n->out->grad, 0) / (double)count;
    sm_job j = {.y = dx, .x = x, .C = C, .target = target, .ignore = ignore, .lse = (double *)lse, .eps = eps, .g = g};
    tg_parallel_range(row_threads(ctx, N, C), N, row_chunk(C), cross_entropy_task, &j);
}

/* loss = 1/|R| sum_{i in R} [-(1-eps) logp_i[t_i] - eps/C sum_c logp_ic]:
 * dx_ic = dloss/|R| (p_ic - q_ic) on the rows of R, q = (1-eps) onehot(t)
 * + eps/C; p = softmax(x), recorded. */
static bool cross_entropy_grad(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    tg_tensor *x = n->in[0];
    const int64_t N = x->shape[0], C = x->shape[1], ignore = n->i[0], count = n->i[1];
    if (count == 0) return true; /* the loss was NaN and depends on nothing */
    const int64_t *target = (const int64_t *)((const double *)n->saved + N);
    const double eps = n->f[0];
    tg_tensor *q = tg_zeros(ctx, x->dtype, 2, x->shape), *r = tg_zeros(ctx, x->dtype, 2, (int64_t[]){N, 1});
    if (!q || !r) return false;
    for (int64_t i = 0; i < N; i++) {
        if (target[i] == ignore) continue;
        tg_store(r, i, 1.0);
        for (int64_t c = 0; c < C; c++) tg_store(q, i * C + c, eps / (double)C + (c == target[i] ? 1.0 - eps : 0.0));
    }
    tg_tensor *g = tg_mul_scalar(ctx, tg_reshape(ctx, dy, 0, NULL), 1.0 / (double)count);
    dx[0] = tg_mul(ctx, tg_mul(ctx, tg_sub(ctx, tg_softmax(ctx, x), q), r), g);
    return tg_ok(ctx);
}

/* loss = 1/|R| sum_{i in R} (lse(x_i) - sum_c q_ic x_ic), q the smoothed
 * one-hot target, R the rows not ignored:
 *   t_loss = 1/|R| sum_{i in R} sum_c (p_ic - q_ic) t_ic,  p = softmax(x_i)
 * (0 when every row is ignored: the loss was NaN, constant in x). */
static tg_tensor *cross_entropy_jvp(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) {
    const tg_tensor *x = n->in[0];
    const int64_t N = x->shape[0], C = x->shape[1], ignore = n->i[0], count = n->i[1];
    const int64_t *target = (const int64_t *)((const double *)n->saved + N);
    const double eps = n->f[0];
    double total = 0;
    for (int64_t i = 0; i < N && count; i++) {
        if (target[i] == ignore) continue;
        double m = -INFINITY, z = 0, s = 0;
        for (int64_t c = 0; c < C; c++) m = fmax(m, tg_load(x, i * C + c));
        for (int64_t c = 0; c < C; c++) z += exp(tg_load(x, i * C + c) - m);
        for (int64_t c = 0; c < C; c++) {
            double p = exp(tg_load(x, i * C + c) - m) / z, q = (c == target[i] ? 1 - eps : 0) + eps / (double)C;
            s += (p - q) * tg_load(t[0], i * C + c);
        }
        total += s;
    }
    tg_tensor *y = tg_new_like(ctx, "tg_jvp", n->out);
    if (y) tg_store(y, 0, count ? total / (double)count : 0.0);
    return y;
}

/* A check: ignore_rows makes the first rows' targets ignore_index. */
const tg_op_def tg_cross_entropy_op =
    TG_OP("cross_entropy", cross_entropy_backward, cross_entropy_grad, cross_entropy_jvp,
          .args = "smoothing=0,ignore_index=-100,ignore_rows=0", .inputs = "logits=-2:2", .f32 = {.h = 3e-2});

tg_tensor *tg_cross_entropy(tg_ctx *ctx, tg_tensor *logits, const int64_t *targets, const tg_cross_entropy_opts *opts) {
    if (tg_lowp_args(ctx, __func__, 1, &logits)) /* f32 inside, the loss in logits' dtype (as PyTorch) */
        return tg_lowp_out(ctx, tg_cross_entropy(ctx, tg_lowp_in(ctx, logits), targets, opts), logits);
    if (!tg_check_arg(ctx, __func__, "logits", logits)) return NULL;
    const tg_cross_entropy_opts o = opts ? *opts : TG_CROSS_ENTROPY_DEFAULTS;
    char sl[TG_SHAPE_STR];
    if (logits->ndim != 2) {
        tg_error(ctx, TG_ERR_SHAPE, __func__, "logits of shape %s are not 2-D (N, C)", tg_shape_of(sl, logits));
        return NULL;
    }
    const int64_t N = logits->shape[0], C = logits->shape[1];
    if (N == 0 || C == 0) {
        tg_error(ctx, TG_ERR_SHAPE, __func__, "logits of shape %s: empty reduction (need N >= 1 and C >= 1)",
                 tg_shape_of(sl, logits));
        return NULL;
    }
    if (!targets) {
        tg_null_error(ctx, __func__, "targets");
        return NULL;
    }
    if (!(o.label_smoothing >= 0.0 && o.label_smoothing <= 1.0)) {
        tg_error(ctx, TG_ERR_VALUE, __func__, "label_smoothing = %g is outside [0, 1]", o.label_smoothing);
        return NULL;
    }
    int64_t count = 0;
    for (int64_t i = 0; i < N; i++) {
        int64_t t = targets[i];
        if (t == o.ignore_index) continue;
        if (t < 0 || t >= C) {
            tg_error(ctx, TG_ERR_INDEX, __func__,
                     "targets[%lld] = %lld is out of range 0..%lld for logits %s (ignore_index %lld)", (long long)i,
                     (long long)t, (long long)C - 1, tg_shape_of(sl, logits), (long long)o.ignore_index);
            return NULL;
        }
        count++;
    }
    tg_tensor *out = tg_new_tensor(ctx, __func__, logits->dtype, 0, NULL);
    /* lse and targets (kept for backward), then the per-row losses (scratch) */
    double *lse = tg_arena_alloc_fn(ctx, __func__, (size_t)N * (2 * sizeof(double) + sizeof(int64_t)));
    if (!out || !lse) return NULL;
    int64_t *target = (int64_t *)(lse + N);
    double *row_loss = (double *)(target + N);
    memcpy(target, targets, (size_t)N * sizeof *targets);

    /* Forward: loss = 1/|R| sum_{i in R} loss_i (cross_entropy_row). */
    const double eps = o.label_smoothing;
    sm_job j = {
        .x = logits, .C = C, .target = target, .ignore = o.ignore_index, .lse = lse, .row_loss = row_loss, .eps = eps};
    tg_parallel_range(row_threads(ctx, N, C), N, row_chunk(C), cross_entropy_task, &j);
    double total = 0;
    for (int64_t i = 0; i < N; i++) total += row_loss[i]; /* in row order: thread-count independent */
    tg_store(out, 0, count ? total / (double)count : NAN);

    tg_node *n = tg_record(ctx, &tg_cross_entropy_op, out, 1, &logits);
    if (n) {
        n->saved = lse; /* the scratch losses after lse and targets are not counted */
        n->f[0] = eps;
        n->i[0] = o.ignore_index;
        n->i[1] = count;
        /* lse and targets, and the logits read by backward */
        tg_node_count_saved(
            ctx, n, (size_t)N * (sizeof(double) + sizeof(int64_t)) + (size_t)logits->numel * tg_esize(logits->dtype));
    }
    return tg_ok(ctx) ? out : NULL;
}

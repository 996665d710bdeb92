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

static tg_tensor *softmax_op(tg_ctx *ctx, tg_tensor *x, bool log_, const char *fn) {
    if (tg_lowp_args(ctx, fn, 1, &x)) return tg_lowp_out(ctx, softmax_op(ctx, tg_lowp_in(ctx, x), log_, fn), x);
    if (!tg_check_arg(ctx, fn, "x", x)) return NULL;
    tg_tensor *y = tg_new_like(ctx, fn, x);
    if (!y) return NULL;
    int64_t rows, C;
    rows_of(x, &rows, &C);
    sm_job j = {.y = y, .x = x, .C = C, .log_ = log_};
    tg_parallel_range(row_threads(ctx, rows, C), rows, row_chunk(C), softmax_task, &j);
    tg_node *n = tg_record(ctx, fn, softmax_backward, y, 1, &x);
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

    tg_node *n = tg_record(ctx, __func__, cross_entropy_backward, out, 1, &logits);
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

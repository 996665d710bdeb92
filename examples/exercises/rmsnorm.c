/* Exercise (a): the backward of RMSNorm without gamma.
 *
 * The forward is given: over each row of C elements of x (N rows),
 *   r   = 1 / sqrt(mean_j x_j^2 + eps)        saved, one per row
 *   y_i = x_i r = xhat_i
 * Write rmsnorm_backward below: from dy (the gradient of the output) the
 * gradient dx, added into x's gradient. Derive it first: section 3 of
 * docs/normalization-gradients.md does it step by step (dr/dx_j is the
 * step people miss).
 *
 *   cmake --build build --target exercise_rmsnorm && build/examples/exercises/exercise_rmsnorm
 *
 * prints "solved" when your dx matches finite differences, and otherwise
 * where it is wrong and the likely mistake. The reference solution is in
 * solutions/rmsnorm.c (exercise_rmsnorm_solution is built with it). */
#include <math.h>

#include "exercise.h"

static const double EPS = 1e-5;

static tg_tensor *rmsnorm_forward(tg_ctx *ctx, tg_node *node, tg_tensor *const *in, void *user) {
    (void)user;
    tg_tensor *x = in[0];
    int64_t N = x->shape[0], C = x->shape[1];
    tg_tensor *y = tg_zeros(ctx, TG_F64, 2, x->shape), *rstd = tg_zeros(ctx, TG_F64, 1, &N);
    if (!y || !rstd) return NULL;
    const double *xd = tg_data_f64(ctx, x);
    double *yd = tg_data_f64(ctx, y), *r = tg_data_f64(ctx, rstd);
    for (int64_t n = 0; n < N; n++) {
        double ms = 0;
        for (int64_t j = 0; j < C; j++) ms += xd[n * C + j] * xd[n * C + j] / (double)C;
        r[n] = 1.0 / sqrt(ms + EPS);
        for (int64_t j = 0; j < C; j++) yd[n * C + j] = xd[n * C + j] * r[n];
    }
    tg_node_save_tensor(ctx, node, x);
    tg_node_save_tensor(ctx, node, rstd);
    return y;
}

/* Your backward, as a plain function (outputs first, then inputs, sizes):
 *   dx (N, C): write it;  dy (N, C), x (N, C), rstd (N): read them. */
#ifdef TG_EXERCISE_SOLUTION
#include "solutions/rmsnorm.c"
#else
static void rmsnorm_backward_rows(double *dx, const double *dy, const double *x, const double *rstd, int64_t N,
                                  int64_t C) {
    for (int64_t n = 0; n < N; n++) {
        for (int64_t i = 0; i < C; i++) {
            /* your derivation: dx[n * C + i] = ... from dy, x, rstd[n] */
            (void)dx, (void)dy, (void)x, (void)rstd;
        }
    }
}
#endif

/* The op's backward: unpacks the record, calls yours, adds dx into x's
 * gradient. */
static void rmsnorm_backward(tg_ctx *ctx, tg_node *node) {
    tg_tensor *x = tg_node_saved_tensor(node, 0), *rstd = tg_node_saved_tensor(node, 1);
    tg_tensor *dx = tg_zeros(ctx, TG_F64, 2, x->shape);
    if (!dx) return;
    rmsnorm_backward_rows(tg_data_f64(ctx, dx), tg_data_f64(ctx, tg_node_grad_output(node)), tg_data_f64(ctx, x),
                          tg_data_f64(ctx, rstd), x->shape[0], x->shape[1]);
    tg_node_accumulate(ctx, node, 0, dx);
}

static const tg_op_def RMSNORM = {.name = "rmsnorm", .forward = rmsnorm_forward, .backward = rmsnorm_backward};

static tg_tensor *op(tg_ctx *ctx, tg_tensor *const *in, void *user) { return tg_op_apply(ctx, &RMSNORM, 1, in, user); }

static bool make_inputs(tg_ctx *ctx, tg_exercise *e) {
    e->inputs[0] = tg_rand(ctx, TG_F64, TG_SHAPE(3, 5), -2, 2);
    return e->inputs[0] != NULL;
}

int main(int argc, char **argv) {
    tg_exercise e = {.name = "(a) RMSNorm without gamma: dx",
                     .guide = "docs/normalization-gradients.md, section 3 (RMSNorm backward, step by step)",
                     .f = op,
                     .n_inputs = 1,
                     .input_names = {"x"}};
    return tg_exercise_main(argc, argv, &e, make_inputs);
}

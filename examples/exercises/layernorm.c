/* Exercise (c): the backward of LayerNorm.
 *
 * The forward is given: over each row of C elements of x (N rows),
 *   mu = mean_j x_j,   r = 1 / sqrt(mean_j (x_j - mu)^2 + eps)   saved
 *   xhat_i = (x_i - mu) r,   y_i = gamma_i xhat_i + beta_i
 * Write layernorm_backward: dx, dgamma and dbeta. Section 4 of
 * docs/normalization-gradients.md derives dx (mu depends on x too: that
 * is one more term than RMSNorm has).
 *
 *   cmake --build build --target exercise_layernorm && build/examples/exercises/exercise_layernorm
 *
 * The reference solution is solutions/layernorm.c. */
#include <math.h>

#include "exercise.h"

static const double EPS = 1e-5;

static tg_tensor *layernorm_forward(tg_ctx *ctx, tg_node *node, tg_tensor *const *in, void *user) {
    (void)user;
    tg_tensor *x = in[0], *gamma = in[1], *beta = in[2];
    int64_t N = x->shape[0], C = x->shape[1];
    tg_tensor *y = tg_zeros(ctx, TG_F64, 2, x->shape), *xhat = tg_zeros(ctx, TG_F64, 2, x->shape);
    tg_tensor *rstd = tg_zeros(ctx, TG_F64, 1, &N);
    if (!y || !xhat || !rstd) return NULL;
    const double *xd = tg_data_f64(ctx, x), *gd = tg_data_f64(ctx, gamma), *bd = tg_data_f64(ctx, beta);
    double *yd = tg_data_f64(ctx, y), *h = tg_data_f64(ctx, xhat), *r = tg_data_f64(ctx, rstd);
    for (int64_t n = 0; n < N; n++) {
        double mu = 0, var = 0;
        for (int64_t j = 0; j < C; j++) mu += xd[n * C + j] / (double)C;
        for (int64_t j = 0; j < C; j++) var += (xd[n * C + j] - mu) * (xd[n * C + j] - mu) / (double)C;
        r[n] = 1.0 / sqrt(var + EPS);
        for (int64_t j = 0; j < C; j++) {
            h[n * C + j] = (xd[n * C + j] - mu) * r[n];
            yd[n * C + j] = gd[j] * h[n * C + j] + bd[j];
        }
    }
    tg_node_save_tensor(ctx, node, xhat);
    tg_node_save_tensor(ctx, node, rstd);
    return y;
}

/* Your backward, as a plain function (outputs first, then inputs, sizes):
 *   dx (N, C), dgamma (C), dbeta (C): write them (they start at 0);
 *   dy (N, C), xhat (N, C), gamma (C), rstd (N): read them. */
#ifdef TG_EXERCISE_SOLUTION
#include "solutions/layernorm.c"
#else
static void layernorm_backward_rows(double *dx, double *dgamma, double *dbeta, const double *dy, const double *xhat,
                                    const double *gamma, const double *rstd, int64_t N, int64_t C) {
    for (int64_t n = 0; n < N; n++) {
        for (int64_t i = 0; i < C; i++) {
            /* your derivation: dx[n * C + i] = ..., dgamma[i] += ..., dbeta[i] += ... */
            (void)dx, (void)dgamma, (void)dbeta, (void)dy, (void)xhat, (void)gamma, (void)rstd;
        }
    }
}
#endif

/* The op's backward: unpacks the record, calls yours, adds the gradients
 * into the inputs'. */
static void layernorm_backward(tg_ctx *ctx, tg_node *node) {
    tg_tensor *xhat = tg_node_saved_tensor(node, 0);
    int64_t N = xhat->shape[0], C = xhat->shape[1];
    tg_tensor *dx = tg_zeros(ctx, TG_F64, 2, xhat->shape), *dg = tg_zeros(ctx, TG_F64, 1, &C),
              *db = tg_zeros(ctx, TG_F64, 1, &C);
    if (!dx || !dg || !db) return;
    layernorm_backward_rows(tg_data_f64(ctx, dx), tg_data_f64(ctx, dg), tg_data_f64(ctx, db),
                            tg_data_f64(ctx, tg_node_grad_output(node)), tg_data_f64(ctx, xhat),
                            tg_data_f64(ctx, tg_node_input(node, 1)), tg_data_f64(ctx, tg_node_saved_tensor(node, 1)),
                            N, C);
    tg_node_accumulate(ctx, node, 0, dx);
    tg_node_accumulate(ctx, node, 1, dg);
    tg_node_accumulate(ctx, node, 2, db);
}

static const tg_op_def OP = {.name = "layernorm", .forward = layernorm_forward, .backward = layernorm_backward};

static tg_tensor *op(tg_ctx *ctx, tg_tensor *const *in, void *user) { return tg_op_apply(ctx, &OP, 3, in, user); }

static bool make_inputs(tg_ctx *ctx, tg_exercise *e) {
    e->inputs[0] = tg_rand(ctx, TG_F64, TG_SHAPE(3, 5), -2, 2);
    e->inputs[1] = tg_rand(ctx, TG_F64, TG_SHAPE(5), 0.5, 1.5);
    e->inputs[2] = tg_rand(ctx, TG_F64, TG_SHAPE(5), -1, 1);
    return tg_ok(ctx);
}

int main(int argc, char **argv) {
    tg_exercise e = {.name = "(c) LayerNorm: dx, dgamma, dbeta",
                     .guide = "docs/normalization-gradients.md, sections 2 and 4",
                     .f = op,
                     .n_inputs = 3,
                     .input_names = {"x", "gamma", "beta"}};
    return tg_exercise_main(argc, argv, &e, make_inputs);
}

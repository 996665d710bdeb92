/* custom_op: a learner writes RMSNorm as their own op -- forward, hand-
 * derived backward, what it saves -- with the public API of
 * tapegrad/op.h, and then uses it like a built-in op:
 *
 *   1. gradient check of the op (tg_gradcheck, float64, every element);
 *   2. the same outputs and gradients as tapegrad's fused RMSNorm;
 *   3. a few steps of training a gamma through it with Adam.
 *
 *   ./build/examples/custom_op [--steps N]
 *
 * Exit status 0 when all three hold, 1 otherwise. The derivation is in
 * docs/normalization-gradients.md; docs/custom-ops.md walks through this
 * file. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tapegrad.h"
#include "tapegrad/check.h"

/* ---- the op ----------------------------------------------------------------
 * RMSNorm over the last dimension C of x (N rows), with a gain gamma (C):
 *   r   = 1 / sqrt(mean_j x_j^2 + eps)      one per row, saved as rstd (N)
 *   y_i = gamma_i * x_i * r
 * Saved for backward: x, gamma (by pointer) and rstd; eps as a scalar. */
static tg_tensor *my_rmsnorm_forward(tg_ctx *ctx, tg_node *node, tg_tensor *const *in, void *user) {
    const double eps = *(const double *)user;
    tg_tensor *x = in[0], *gamma = in[1];
    if (x->dtype != TG_F64 || gamma->dtype != TG_F64 || x->ndim != 2 || gamma->ndim != 1 ||
        gamma->shape[0] != x->shape[1]) {
        tg_node_error(ctx, node, "wants x (N, C) and gamma (C), both float64");
        return NULL;
    }
    int64_t N = x->shape[0], C = x->shape[1];
    tg_tensor *y = tg_zeros(ctx, TG_F64, 2, x->shape);
    tg_tensor *rstd = tg_zeros(ctx, TG_F64, 1, &N);
    if (!y || !rstd) return NULL;
    const double *xd = tg_data_f64(ctx, x), *g = tg_data_f64(ctx, gamma);
    double *yd = tg_data_f64(ctx, y), *r = tg_data_f64(ctx, rstd);
    for (int64_t n = 0; n < N; n++) {
        const double *xr = xd + n * C;
        double ss = 0;
        for (int64_t j = 0; j < C; j++) ss += xr[j] * xr[j];
        r[n] = 1.0 / sqrt(ss / (double)C + eps);
        for (int64_t j = 0; j < C; j++) yd[n * C + j] = g[j] * xr[j] * r[n];
    }
    tg_node_save_tensor(ctx, node, x);
    tg_node_save_tensor(ctx, node, gamma);
    tg_node_save_tensor(ctx, node, rstd);
    tg_node_set_scalar(ctx, node, 0, eps);
    return y;
}

/* Forward was y_i = gamma_i xhat_i with xhat_i = x_i r. With u_i = gamma_i dy_i
 * (the gradient reaching xhat) and dr/dx_j = -r^3 x_j / C:
 *   dx_i = r u_i + sum_j u_j x_j (dr/dx_i)
 *        = r (u_i - xhat_i mean_j(u_j xhat_j))
 *   dgamma_i = sum over rows of dy_i xhat_i */
static void my_rmsnorm_backward(tg_ctx *ctx, tg_node *node) {
    tg_tensor *x = tg_node_saved_tensor(node, 0), *gamma = tg_node_saved_tensor(node, 1);
    tg_tensor *rstd = tg_node_saved_tensor(node, 2), *dy = tg_node_grad_output(node);
    int64_t N = x->shape[0], C = x->shape[1];
    tg_tensor *dx = tg_zeros(ctx, TG_F64, 2, x->shape), *dg = tg_zeros(ctx, TG_F64, 1, &C);
    if (!dx || !dg) return;
    const double *xd = tg_data_f64(ctx, x), *g = tg_data_f64(ctx, gamma);
    const double *r = tg_data_f64(ctx, rstd), *dyd = tg_data_f64(ctx, dy);
    double *dxd = tg_data_f64(ctx, dx), *dgd = tg_data_f64(ctx, dg);
    for (int64_t n = 0; n < N; n++) {
        const double *xr = xd + n * C, *dyr = dyd + n * C;
        double m = 0; /* mean_j(u_j xhat_j) */
        for (int64_t j = 0; j < C; j++) m += g[j] * dyr[j] * xr[j] * r[n];
        m /= (double)C;
        for (int64_t j = 0; j < C; j++) {
            double xhat = xr[j] * r[n];
            dxd[n * C + j] = r[n] * (g[j] * dyr[j] - xhat * m);
            dgd[j] += dyr[j] * xhat;
        }
    }
    tg_node_accumulate(ctx, node, 0, dx);
    tg_node_accumulate(ctx, node, 1, dg);
}

static const tg_op_def MY_RMSNORM = {
    .name = "my_rmsnorm", .forward = my_rmsnorm_forward, .backward = my_rmsnorm_backward};

static tg_tensor *my_rmsnorm(tg_ctx *ctx, tg_tensor *x, tg_tensor *gamma, double *eps) {
    return tg_op_apply(ctx, &MY_RMSNORM, 2, (tg_tensor *[]){x, gamma}, eps);
}

/* ---- 1. the gradient check ------------------------------------------------ */

static tg_tensor *checked(tg_ctx *ctx, tg_tensor *const *in, void *user) { return my_rmsnorm(ctx, in[0], in[1], user); }

/* ---- 2. against the built-in fused RMSNorm -------------------------------- */

/* max |a - b| over the elements of two same-shape float64 tensors */
static double max_diff(tg_ctx *ctx, tg_tensor *a, tg_tensor *b) {
    double m = 0;
    for (int64_t i = 0; i < a->numel; i++) m = fmax(m, fabs(tg_get_flat(ctx, a, i) - tg_get_flat(ctx, b, i)));
    return m;
}

/* y and the gradients of sum(w * y) for x, gamma through `mine` or the
 * built-in op; returns max |difference| over y, dx and dgamma. */
static double compare_with_builtin(tg_ctx *ctx, double eps) {
    int64_t xs[2] = {4, 8};
    tg_tensor *x0 = tg_randn(ctx, TG_F64, 2, xs, 0, 1), *g0 = tg_rand(ctx, TG_F64, 1, &xs[1], 0.5, 1.5);
    tg_tensor *w = tg_randn(ctx, TG_F64, 2, xs, 0, 1);
    tg_tensor *y[2], *dx[2], *dg[2];
    for (int k = 0; k < 2; k++) {
        tg_tensor *x = tg_requires_grad(ctx, tg_copy(ctx, x0)), *g = tg_requires_grad(ctx, tg_copy(ctx, g0));
        y[k] = k == 0 ? my_rmsnorm(ctx, x, g, &eps) : tg_rmsnorm_fused(ctx, x, g, NULL, 1, eps);
        tg_backward(ctx, tg_sum(ctx, tg_mul(ctx, y[k], w)));
        if (!tg_ok(ctx)) return INFINITY;
        dx[k] = x->grad;
        dg[k] = g->grad;
    }
    return fmax(max_diff(ctx, y[0], y[1]), fmax(max_diff(ctx, dx[0], dx[1]), max_diff(ctx, dg[0], dg[1])));
}

/* ---- 3. training gamma through the op -------------------------------------
 * Fit gamma so that my_rmsnorm(x, gamma) matches 2 * rmsnorm(x): the
 * mean squared error must fall. */
static bool train(tg_ctx *ctx, int steps, double eps) {
    int64_t xs[2] = {16, 8};
    tg_tensor *gamma = tg_requires_grad(ctx, tg_persist(ctx, tg_ones(ctx, TG_F64, 1, &xs[1])));
    tg_params params = {0};
    tg_params_add(ctx, &params, NULL, "gamma", gamma, false);
    tg_adam_opts o = tg_adam_defaults();
    o.lr = 0.05;
    tg_optim *opt = tg_adam_new(ctx, &params, &o);
    double first = 0, last = 0;
    for (int s = 0; s < steps && tg_ok(ctx); s++) {
        tg_tensor *x = tg_randn(ctx, TG_F64, 2, xs, 0, 1);
        tg_tensor *target = tg_mul_scalar(ctx, tg_rmsnorm_fused(ctx, x, NULL, NULL, 1, eps), 2.0);
        tg_tensor *loss = tg_mse_loss(ctx, my_rmsnorm(ctx, x, gamma, &eps), target);
        tg_optim_zero_grad(ctx, opt);
        tg_backward(ctx, loss);
        tg_optim_step(ctx, opt);
        double l = loss ? tg_get_flat(ctx, loss, 0) : NAN;
        if (s == 0) first = l;
        last = l;
        tg_ctx_reset(ctx);
    }
    printf("3. training gamma through my_rmsnorm: loss %.4g -> %.4g in %d steps\n", first, last, steps);
    tg_optim_free(ctx, opt);
    tg_params_free(&params);
    tg_tensor_free(ctx, gamma);
    const bool fell = last < 0.1 * first;
    if (tg_ok(ctx) && !fell)
        fprintf(stderr,
                "custom_op: the loss fell from %.4g to %.4g in %d steps, not below a tenth of where it started: "
                "train longer (--steps; the default 60 gets there)\n",
                first, last, steps);
    return tg_ok(ctx) && fell;
}

int main(int argc, char **argv) {
    int steps = 60;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--steps") && i + 1 < argc) {
            steps = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: custom_op [--steps N]\n");
            return 2;
        }
    }
    if (steps < 1) {
        fprintf(stderr, "custom_op: --steps wants a positive number\n");
        return 2;
    }
    tg_ctx *ctx = tg_ctx_new(7);
    if (!ctx) return 1;
    double eps = 1e-5;

    int64_t xs[2] = {3, 5};
    tg_tensor *in[2] = {tg_randn(ctx, TG_F64, 2, xs, 0, 1), tg_rand(ctx, TG_F64, 1, &xs[1], 0.5, 1.5)};
    tg_gradcheck_result r;
    bool pass = tg_gradcheck(ctx, checked, &eps, 2, in, NULL, &r);
    printf("1. gradcheck of my_rmsnorm on x (3, 5), gamma (5): %s (%lld elements, max |analytic - numeric| %.2e)\n",
           pass ? "pass" : "FAIL", (long long)r.n_checked, r.max_abs_err);
    tg_ctx_reset(ctx);

    double diff = compare_with_builtin(ctx, eps);
    bool same = diff < 1e-12;
    printf("2. my_rmsnorm vs tg_rmsnorm_fused: max |difference| over y, dx, dgamma %.2e: %s\n", diff,
           same ? "same" : "DIFFERENT");
    tg_ctx_reset(ctx);

    bool trained = train(ctx, steps, eps);
    if (!tg_ok(ctx)) fprintf(stderr, "custom_op: %s\n", tg_error_message(ctx));
    if (!pass) fprintf(stderr, "custom_op: my_rmsnorm's backward does not match finite differences (1. above)\n");
    if (!same) fprintf(stderr, "custom_op: my_rmsnorm differs from tg_rmsnorm_fused (2. above)\n");
    tg_ctx_free(ctx);
    return pass && same && trained ? 0 : 1;
}

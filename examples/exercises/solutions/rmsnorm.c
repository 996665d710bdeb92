/* Exercise (a), the reference solution (included by ../rmsnorm.c when built
 * as exercise_rmsnorm_solution).
 *
 * y_i = x_i r with r = (mean_j x_j^2 + eps)^(-1/2), so
 *   dr/dx_j = -1/2 (mean x^2 + eps)^(-3/2) 2 x_j / C = -r^3 x_j / C
 *   dx_j = sum_i dy_i dy_i/dx_j = r dy_j + (sum_i dy_i x_i) dr/dx_j
 *        = r (dy_j - xhat_j mean_i(dy_i xhat_i))      (xhat = x r) */
static void rmsnorm_backward(tg_ctx *ctx, tg_node *node) {
    tg_tensor *x = tg_node_saved_tensor(node, 0), *rstd = tg_node_saved_tensor(node, 1);
    tg_tensor *dy = tg_node_grad_output(node), *dx = tg_zeros(ctx, TG_F64, 2, x->shape);
    if (!dx) return;
    const double *xd = tg_data_f64(ctx, x), *r = tg_data_f64(ctx, rstd), *g = tg_data_f64(ctx, dy);
    double *d = tg_data_f64(ctx, dx);
    int64_t N = x->shape[0], C = x->shape[1];
    for (int64_t n = 0; n < N; n++) {
        double m = 0; /* mean_i(dy_i xhat_i) */
        for (int64_t i = 0; i < C; i++) m += g[n * C + i] * xd[n * C + i] * r[n] / (double)C;
        for (int64_t i = 0; i < C; i++) d[n * C + i] = r[n] * (g[n * C + i] - xd[n * C + i] * r[n] * m);
    }
    tg_node_accumulate(ctx, node, 0, dx);
}

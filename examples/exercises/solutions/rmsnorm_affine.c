/* Exercise (b), the reference solution (included by ../rmsnorm_affine.c).
 *
 * y_i = gamma_i xhat_i + beta_i, xhat = x r:
 *   dbeta_i  = sum over rows of dy_i
 *   dgamma_i = sum over rows of dy_i xhat_i
 *   u_i = gamma_i dy_i reaches xhat; as in exercise (a) with u for dy:
 *   dx_i = r (u_i - xhat_i mean_j(u_j xhat_j)) */
static void rmsnorm_affine_backward(tg_ctx *ctx, tg_node *node) {
    tg_tensor *x = tg_node_input(node, 0), *gamma = tg_node_input(node, 1);
    tg_tensor *rstd = tg_node_saved_tensor(node, 0), *dy = tg_node_grad_output(node);
    int64_t N = x->shape[0], C = x->shape[1];
    tg_tensor *dx = tg_zeros(ctx, TG_F64, 2, x->shape), *dgamma = tg_zeros(ctx, TG_F64, 1, &C),
              *dbeta = tg_zeros(ctx, TG_F64, 1, &C);
    if (!dx || !dgamma || !dbeta) return;
    const double *xd = tg_data_f64(ctx, x), *gd = tg_data_f64(ctx, gamma), *r = tg_data_f64(ctx, rstd);
    const double *g = tg_data_f64(ctx, dy);
    double *d = tg_data_f64(ctx, dx), *dg = tg_data_f64(ctx, dgamma), *db = tg_data_f64(ctx, dbeta);
    for (int64_t n = 0; n < N; n++) {
        double m = 0; /* mean_j(u_j xhat_j) */
        for (int64_t j = 0; j < C; j++) m += gd[j] * g[n * C + j] * xd[n * C + j] * r[n] / (double)C;
        for (int64_t i = 0; i < C; i++) {
            double xhat = xd[n * C + i] * r[n];
            d[n * C + i] = r[n] * (gd[i] * g[n * C + i] - xhat * m);
            dg[i] += g[n * C + i] * xhat;
            db[i] += g[n * C + i];
        }
    }
    tg_node_accumulate(ctx, node, 0, dx);
    tg_node_accumulate(ctx, node, 1, dgamma);
    tg_node_accumulate(ctx, node, 2, dbeta);
}

/* Exercise (c), the reference solution (included by ../layernorm.c).
 *
 * y_i = gamma_i xhat_i + beta_i, xhat = (x - mu) r; u = gamma dy:
 *   dbeta_i  = sum over rows of dy_i,  dgamma_i = sum over rows of dy_i xhat_i
 *   dx_i = r (u_i - mean_j u_j - xhat_i mean_j(u_j xhat_j))
 * (- mean_j u_j: the path through mu; - xhat_i mean(u xhat): through r) */
static void layernorm_backward(tg_ctx *ctx, tg_node *node) {
    tg_tensor *xhat = tg_node_saved_tensor(node, 0), *rstd = tg_node_saved_tensor(node, 1);
    tg_tensor *gamma = tg_node_input(node, 1), *dy = tg_node_grad_output(node);
    int64_t N = xhat->shape[0], C = xhat->shape[1];
    tg_tensor *dx = tg_zeros(ctx, TG_F64, 2, xhat->shape), *dgamma = tg_zeros(ctx, TG_F64, 1, &C),
              *dbeta = tg_zeros(ctx, TG_F64, 1, &C);
    if (!dx || !dgamma || !dbeta) return;
    const double *h = tg_data_f64(ctx, xhat), *r = tg_data_f64(ctx, rstd), *gd = tg_data_f64(ctx, gamma);
    const double *g = tg_data_f64(ctx, dy);
    double *d = tg_data_f64(ctx, dx), *dg = tg_data_f64(ctx, dgamma), *db = tg_data_f64(ctx, dbeta);
    for (int64_t n = 0; n < N; n++) {
        double mu = 0, muh = 0; /* mean_j u_j, mean_j(u_j xhat_j) */
        for (int64_t j = 0; j < C; j++) {
            mu += gd[j] * g[n * C + j] / (double)C;
            muh += gd[j] * g[n * C + j] * h[n * C + j] / (double)C;
        }
        for (int64_t i = 0; i < C; i++) {
            d[n * C + i] = r[n] * (gd[i] * g[n * C + i] - mu - h[n * C + i] * muh);
            dg[i] += g[n * C + i] * h[n * C + i];
            db[i] += g[n * C + i];
        }
    }
    tg_node_accumulate(ctx, node, 0, dx);
    tg_node_accumulate(ctx, node, 1, dgamma);
    tg_node_accumulate(ctx, node, 2, dbeta);
}

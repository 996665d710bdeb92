/* Exercise (c), the reference solution (included by ../layernorm.c).
 *
 * y_i = gamma_i xhat_i + beta_i, xhat = (x - mu) r; u = gamma dy:
 *   dbeta_i  = sum over rows of dy_i,  dgamma_i = sum over rows of dy_i xhat_i
 *   dx_i = r (u_i - mean_j u_j - xhat_i mean_j(u_j xhat_j))
 * (- mean_j u_j: the path through mu; - xhat_i mean(u xhat): through r) */
static void layernorm_backward_rows(double *dx, double *dgamma, double *dbeta, const double *dy, const double *xhat,
                                    const double *gamma, const double *rstd, int64_t N, int64_t C) {
    for (int64_t n = 0; n < N; n++) {
        const double *h = xhat + n * C, *g = dy + n * C;
        double mu = 0, muh = 0; /* mean_j u_j, mean_j(u_j xhat_j) */
        for (int64_t j = 0; j < C; j++) {
            mu += gamma[j] * g[j] / (double)C;
            muh += gamma[j] * g[j] * h[j] / (double)C;
        }
        for (int64_t i = 0; i < C; i++) {
            dx[n * C + i] = rstd[n] * (gamma[i] * g[i] - mu - h[i] * muh);
            dgamma[i] += g[i] * h[i];
            dbeta[i] += g[i];
        }
    }
}

/* Exercise (b), the reference solution (included by ../rmsnorm_affine.c).
 *
 * y_i = gamma_i xhat_i + beta_i, xhat = x r:
 *   dbeta_i  = sum over rows of dy_i
 *   dgamma_i = sum over rows of dy_i xhat_i
 *   u_i = gamma_i dy_i reaches xhat; as in exercise (a) with u for dy:
 *   dx_i = r (u_i - xhat_i mean_j(u_j xhat_j)) */
static void rmsnorm_affine_backward_rows(double *dx, double *dgamma, double *dbeta, const double *dy, const double *x,
                                         const double *gamma, const double *rstd, int64_t N, int64_t C) {
    for (int64_t n = 0; n < N; n++) {
        const double r = rstd[n];
        double m = 0; /* mean_j(u_j xhat_j) */
        for (int64_t j = 0; j < C; j++) m += gamma[j] * dy[n * C + j] * x[n * C + j] * r / (double)C;
        for (int64_t i = 0; i < C; i++) {
            double xhat = x[n * C + i] * r;
            dx[n * C + i] = r * (gamma[i] * dy[n * C + i] - xhat * m);
            dgamma[i] += dy[n * C + i] * xhat;
            dbeta[i] += dy[n * C + i];
        }
    }
}

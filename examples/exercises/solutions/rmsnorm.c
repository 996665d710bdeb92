/* Exercise (a), the reference solution (included by ../rmsnorm.c when built
 * as exercise_rmsnorm_solution).
 *
 * y_i = x_i r with r = (mean_j x_j^2 + eps)^(-1/2), so
 *   dr/dx_j = -1/2 (mean x^2 + eps)^(-3/2) 2 x_j / C = -r^3 x_j / C
 *   dx_j = sum_i dy_i dy_i/dx_j = r dy_j + (sum_i dy_i x_i) dr/dx_j
 *        = r (dy_j - xhat_j mean_i(dy_i xhat_i))      (xhat = x r) */
static void rmsnorm_backward_rows(double *dx, const double *dy, const double *x, const double *rstd, int64_t N,
                                  int64_t C) {
    for (int64_t n = 0; n < N; n++) {
        const double r = rstd[n];
        double m = 0; /* mean_i(dy_i xhat_i) */
        for (int64_t i = 0; i < C; i++) m += dy[n * C + i] * x[n * C + i] * r / (double)C;
        for (int64_t i = 0; i < C; i++) dx[n * C + i] = r * (dy[n * C + i] - x[n * C + i] * r * m);
    }
}

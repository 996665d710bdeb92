/* Exercise (d), the reference solution (included by ../softmax_ce.c).
 *
 * loss = (1/N) sum_n (log sum_k exp z_nk - z_{n,t_n}), and
 * d/dz_nj log sum_k exp z_nk = p_nj, d/dz_nj z_{n,t_n} = [j == t_n]:
 *   dz_nj = dloss (p_nj - [j == t_n]) / N */
static void softmax_ce_backward_rows(double *dz, double dloss, const double *p, const int64_t *t, int64_t N,
                                     int64_t C) {
    for (int64_t n = 0; n < N; n++)
        for (int64_t j = 0; j < C; j++) dz[n * C + j] = dloss * (p[n * C + j] - (j == t[n])) / (double)N;
}

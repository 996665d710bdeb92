/* Exercise (e), the reference solution (included by ../attention.c).
 *
 * O = P V:                 dV = P^T dO,  dP = dO V^T
 * P_i = softmax(S_i):      dS_ij = P_ij (dP_ij - sum_l P_il dP_il)
 * S = Q K^T / sqrt(D):     dQ = dS K / sqrt(D),  dK = dS^T Q / sqrt(D) */
static void attention_backward_rows(double *dq, double *dk, double *dv, const double *dout, const double *q,
                                    const double *k, const double *v, const double *p, int64_t T, int64_t D) {
    const double scale = 1.0 / sqrt((double)D);
    for (int64_t i = 0; i < T; i++) {
        double ds[64], rowsum = 0; /* row i of dP, then of dS (T <= 64 here) */
        for (int64_t j = 0; j < T; j++) {
            ds[j] = 0;
            for (int64_t c = 0; c < D; c++) {
                dv[j * D + c] += p[i * T + j] * dout[i * D + c];
                ds[j] += dout[i * D + c] * v[j * D + c];
            }
            rowsum += p[i * T + j] * ds[j];
        }
        for (int64_t j = 0; j < T; j++) {
            ds[j] = p[i * T + j] * (ds[j] - rowsum);
            for (int64_t c = 0; c < D; c++) {
                dq[i * D + c] += ds[j] * k[j * D + c] * scale;
                dk[j * D + c] += ds[j] * q[i * D + c] * scale;
            }
        }
    }
}

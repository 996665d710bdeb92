/* Exercise (e), the reference solution (included by ../attention.c).
 *
 * O = P V:                 dV = P^T dO,  dP = dO V^T
 * P_i = softmax(S_i):      dS_ij = P_ij (dP_ij - sum_k P_ik dP_ik)
 * S = Q K^T / sqrt(D):     dQ = dS K / sqrt(D),  dK = dS^T Q / sqrt(D) */
static void attention_backward(tg_ctx *ctx, tg_node *node) {
    tg_tensor *Q = tg_node_input(node, 0), *P = tg_node_saved_tensor(node, 0);
    int64_t T = Q->shape[0], D = Q->shape[1];
    const double *q = tg_data_f64(ctx, Q), *k = tg_data_f64(ctx, tg_node_input(node, 1));
    const double *v = tg_data_f64(ctx, tg_node_input(node, 2)), *p = tg_data_f64(ctx, P);
    const double *go = tg_data_f64(ctx, tg_node_grad_output(node));
    tg_tensor *dQ = tg_zeros(ctx, TG_F64, 2, Q->shape), *dK = tg_zeros(ctx, TG_F64, 2, Q->shape),
              *dV = tg_zeros(ctx, TG_F64, 2, Q->shape), *dS = tg_zeros(ctx, TG_F64, TG_SHAPE(T, T));
    if (!dQ || !dK || !dV || !dS) return;
    double *dq = tg_data_f64(ctx, dQ), *dk = tg_data_f64(ctx, dK), *dv = tg_data_f64(ctx, dV);
    double *ds = tg_data_f64(ctx, dS), scale = 1.0 / sqrt((double)D);
    for (int64_t i = 0; i < T; i++) {
        double rowsum = 0; /* sum_k P_ik dP_ik */
        for (int64_t j = 0; j < T; j++) {
            double dp = 0;
            for (int64_t c = 0; c < D; c++) {
                dv[j * D + c] += p[i * T + j] * go[i * D + c];
                dp += go[i * D + c] * v[j * D + c];
            }
            ds[i * T + j] = dp;
            rowsum += p[i * T + j] * dp;
        }
        for (int64_t j = 0; j < T; j++) ds[i * T + j] = p[i * T + j] * (ds[i * T + j] - rowsum);
    }
    for (int64_t i = 0; i < T; i++)
        for (int64_t j = 0; j < T; j++)
            for (int64_t c = 0; c < D; c++) {
                dq[i * D + c] += ds[i * T + j] * k[j * D + c] * scale;
                dk[j * D + c] += ds[i * T + j] * q[i * D + c] * scale;
            }
    tg_node_accumulate(ctx, node, 0, dQ);
    tg_node_accumulate(ctx, node, 1, dK);
    tg_node_accumulate(ctx, node, 2, dV);
}

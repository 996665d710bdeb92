/* Exercise (d), the reference solution (included by ../softmax_ce.c).
 *
 * loss = (1/N) sum_n (log sum_k exp z_nk - z_{n,t_n}), and
 * d/dz_nj log sum_k exp z_nk = p_nj, d/dz_nj z_{n,t_n} = [j == t_n]:
 *   dz_nj = dloss (p_nj - [j == t_n]) / N */
static void softmax_ce_backward(tg_ctx *ctx, tg_node *node) {
    tg_tensor *p = tg_node_saved_tensor(node, 0);
    double dloss = tg_get_flat(ctx, tg_node_grad_output(node), 0);
    int64_t N = p->shape[0], C = p->shape[1];
    tg_tensor *dz = tg_zeros(ctx, TG_F64, 2, p->shape);
    if (!dz) return;
    const double *pd = tg_data_f64(ctx, p);
    double *d = tg_data_f64(ctx, dz);
    for (int64_t n = 0; n < N; n++)
        for (int64_t j = 0; j < C; j++) d[n * C + j] = dloss * (pd[n * C + j] - (j == TARGETS[n])) / (double)N;
    tg_node_accumulate(ctx, node, 0, dz);
}

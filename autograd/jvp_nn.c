/* Forward mode: the tangent rules of matmul, softmax, the losses, masks,
 * embedding, dropout, rope, attention, and the layers' fused ops (Linear,
 * RMSNorm, LayerNorm). The driver and the other rules: jvp.c.
 *
 * Each rule restates its forward, then differentiates it in the direction
 * of the input tangents (t_x for input x). The fused ops' records carry no
 * pointer into layers/: their rules read only the record (inputs, n->i,
 * n->f), recompute the row statistics from x in float64, and use no code of
 * the ops' own kernels -- so the adjoint test holds them against their
 * backward passes as two independent derivations. */
#include "autograd/jvp.h"

#include <math.h>

/* ---- matmul ------------------------------------------------------------------- */

/* c = a b (batched as the forward was): t_c = t_a b + a t_b. */
static tg_tensor *jvp_matmul(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) {
    return tg_add(ctx, tg_matmul(ctx, t[0], n->in[1]), tg_matmul(ctx, n->in[0], t[1]));
}

/* ---- softmax, losses --------------------------------------------------------- */

/* Over rows of the last dim C:
 *   softmax      y = e^x / sum e^x     t_y = y (t - sum_j y_j t_j)
 *   log_softmax  y = x - lse(x)        t_y = t - sum_j p_j t_j,  p = e^y */
static tg_tensor *jvp_softmax(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) {
    const bool log_ = n->i[0] != 0;
    const tg_tensor *y = n->out;
    const int64_t C = y->ndim ? y->shape[y->ndim - 1] : 1, rows = C ? y->numel / C : 0;
    tg_tensor *ty = tg_new_like(ctx, "tg_jvp", y);
    for (int64_t r = 0; ty && r < rows; r++) {
        double s = 0;
        for (int64_t j = 0; j < C; j++) {
            double p = log_ ? exp(tg_load(y, r * C + j)) : tg_load(y, r * C + j);
            s += p * tg_load(t[0], r * C + j);
        }
        for (int64_t j = 0; j < C; j++) {
            double tj = tg_load(t[0], r * C + j);
            tg_store(ty, r * C + j, log_ ? tj - s : tg_load(y, r * C + j) * (tj - s));
        }
    }
    return ty;
}

/* loss = 1/|R| sum_{i in R} (lse(x_i) - sum_c q_ic x_ic), q the smoothed
 * one-hot target, R the rows not ignored:
 *   t_loss = 1/|R| sum_{i in R} sum_c (p_ic - q_ic) t_ic,  p = softmax(x_i)
 * (0 when every row is ignored: the loss was NaN, constant in x). */
static tg_tensor *jvp_cross_entropy(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) {
    const tg_tensor *x = n->in[0];
    const int64_t N = x->shape[0], C = x->shape[1], ignore = n->i[0], count = n->i[1];
    const int64_t *target = (const int64_t *)((const double *)n->saved + N);
    const double eps = n->f[0];
    double total = 0;
    for (int64_t i = 0; i < N && count; i++) {
        if (target[i] == ignore) continue;
        double m = -INFINITY, z = 0, s = 0;
        for (int64_t c = 0; c < C; c++) m = fmax(m, tg_load(x, i * C + c));
        for (int64_t c = 0; c < C; c++) z += exp(tg_load(x, i * C + c) - m);
        for (int64_t c = 0; c < C; c++) {
            double p = exp(tg_load(x, i * C + c) - m) / z, q = (c == target[i] ? 1 - eps : 0) + eps / (double)C;
            s += (p - q) * tg_load(t[0], i * C + c);
        }
        total += s;
    }
    tg_tensor *y = tg_new_like(ctx, "tg_jvp", n->out);
    if (y) tg_store(y, 0, count ? total / (double)count : 0.0);
    return y;
}

/* loss = mean((p - q)^2): t_loss = 2/n sum (p - q)(t_p - t_q). */
static tg_tensor *jvp_mse(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) {
    const tg_tensor *p = n->in[0], *q = n->in[1];
    double s = 0;
    for (int64_t i = 0; i < p->numel; i++) s += (tg_load(p, i) - tg_load(q, i)) * (tg_load(t[0], i) - tg_load(t[1], i));
    tg_tensor *y = tg_new_like(ctx, "tg_jvp", n->out);
    if (y) tg_store(y, 0, 2.0 * s / (double)p->numel);
    return y;
}

/* ---- masks, embedding, dropout, rope: linear in their differentiable input -- */

/* y = mask ? value : x: t_y = mask ? 0 : t_x (piecewise constant in mask). */
static tg_tensor *jvp_masked_fill(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) {
    return tg_masked_fill(ctx, t[0], n->in[1], 0.0);
}
/* y = the triangle of x: t_y = the same triangle of t_x. */
static tg_tensor *jvp_tril(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) { return tg_tril(ctx, t[0], n->i[0]); }
static tg_tensor *jvp_triu(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) { return tg_triu(ctx, t[0], n->i[0]); }

/* y[..., :] = weight[idx[...], :]: t_y = the same rows of t_weight. */
static tg_tensor *jvp_embedding(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) {
    return tg_embedding(ctx, t[0], n->out->ndim - 1, n->out->shape, n->saved);
}

/* y = x m s with the mask m (saved) and s = 1/(1 - p): t_y = t_x m s. */
static tg_tensor *jvp_dropout(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) {
    const uint8_t *mask = n->saved;
    tg_tensor *y = tg_new_like(ctx, "tg_jvp", n->out);
    for (int64_t i = 0; y && i < y->numel; i++) tg_store(y, i, mask[i] ? tg_load(t[0], i) * n->f[0] : 0.0);
    return y;
}

/* y = R(position) x, a fixed rotation of each pair: t_y = R t_x. */
static tg_tensor *jvp_rope(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) {
    return tg_rope_from(ctx, t[0], (int)n->i[0], n->f[0], n->i[1]);
}

/* ---- attention ------------------------------------------------------------- */

/* For each (batch, head) pair and query row i:
 *   s_ij = scale q_i . k_j  (j <= i when causal),  P_i = softmax(s_i),
 *   o_i = sum_j P_ij v_j
 * so
 *   t_s_ij = scale (t_q_i . k_j + q_i . t_k_j)
 *   t_P_ij = P_ij (t_s_ij - sum_l P_il t_s_il)
 *   t_o_i  = sum_j (t_P_ij v_j + P_ij t_v_j) */
static tg_tensor *jvp_attention(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) {
    const tg_tensor *q = n->in[0], *k = n->in[1], *v = n->in[2];
    const double scale = n->f[0];
    const bool causal = n->i[0] != 0;
    const int64_t pairs = n->i[1], Tq = n->i[2], Tk = n->i[3];
    const int64_t D = q->shape[q->ndim - 1], Dv = v->shape[v->ndim - 1];
    double *Q = tg_jvp_values(ctx, q), *K = tg_jvp_values(ctx, k), *V = tg_jvp_values(ctx, v);
    double *tQ = tg_jvp_values(ctx, t[0]), *tK = tg_jvp_values(ctx, t[1]), *tV = tg_jvp_values(ctx, t[2]);
    double *P = tg_arena_alloc_fn(ctx, "tg_jvp", (size_t)(2 * Tk) * sizeof *P);
    double *to = tg_arena_alloc_fn(ctx, "tg_jvp", (size_t)(n->out->numel ? n->out->numel : 1) * sizeof *to);
    if (!tg_ok(ctx)) return NULL;
    double *ts = P + Tk;
    for (int64_t b = 0; b < pairs; b++) {
        const double *qb = Q + b * Tq * D, *kb = K + b * Tk * D, *vb = V + b * Tk * Dv;
        const double *tqb = tQ + b * Tq * D, *tkb = tK + b * Tk * D, *tvb = tV + b * Tk * Dv;
        for (int64_t i = 0; i < Tq; i++) {
            const int64_t nk = causal ? i + 1 : Tk;
            double m = -INFINITY, z = 0, mean_ts = 0;
            for (int64_t j = 0; j < nk; j++) {
                double s = 0, d = 0;
                for (int64_t c = 0; c < D; c++) {
                    s += qb[i * D + c] * kb[j * D + c];
                    d += tqb[i * D + c] * kb[j * D + c] + qb[i * D + c] * tkb[j * D + c];
                }
                P[j] = scale * s;
                ts[j] = scale * d;
                m = fmax(m, P[j]);
            }
            for (int64_t j = 0; j < nk; j++) z += (P[j] = exp(P[j] - m));
            for (int64_t j = 0; j < nk; j++) mean_ts += (P[j] /= z) * ts[j];
            double *out = to + (b * Tq + i) * Dv;
            for (int64_t c = 0; c < Dv; c++) out[c] = 0;
            for (int64_t j = 0; j < nk; j++) {
                const double tp = P[j] * (ts[j] - mean_ts);
                for (int64_t c = 0; c < Dv; c++) out[c] += tp * vb[j * Dv + c] + P[j] * tvb[j * Dv + c];
            }
        }
    }
    return tg_jvp_tensor(ctx, n->out, to);
}

/* ---- Linear ------------------------------------------------------------------ */

/* y = x W^T + b over rows of x (K features in, N out):
 *   t_y = t_x W^T + x t_W^T + t_b */
static tg_tensor *jvp_linear(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) {
    const int64_t rows = n->i[0], N = n->i[1], K = n->i[2];
    const tg_tensor *x = n->in[0], *w = n->in[1];
    tg_tensor *y = tg_new_like(ctx, "tg_jvp", n->out);
    for (int64_t r = 0; y && r < rows; r++)
        for (int64_t o = 0; o < N; o++) {
            double s = n->n_in > 2 && t[2] ? tg_load(t[2], o) : 0.0;
            for (int64_t c = 0; c < K; c++)
                s +=
                    tg_load(t[0], r * K + c) * tg_load(w, o * K + c) + tg_load(x, r * K + c) * tg_load(t[1], o * K + c);
            tg_store(y, r * N + o, s);
        }
    return y;
}

/* ---- RMSNorm and LayerNorm --------------------------------------------------- */

/* Per row of C elements (the record's N rows; gamma and beta of C):
 *
 * RMSNorm   r = (mean(x^2) + eps)^(-1/2),  xhat = x r,  y = gamma xhat + beta.
 *   d r = -1/2 (mean(x^2) + eps)^(-3/2) 2 mean(x t_x) = -r^3 mean(x t_x)
 *   d xhat = r t_x + x d r = r (t_x - xhat mean(xhat t_x))
 *
 * LayerNorm  mu = mean(x),  c = x - mu,  r = (mean(c^2) + eps)^(-1/2),
 *            xhat = c r,  y = gamma xhat + beta.
 *   t_c = t_x - mean(t_x)
 *   d r = -r^3 mean(c t_c)
 *   d xhat = r t_c + c d r = r (t_c - xhat mean(xhat t_c))
 *
 * and for both, with the tangents of gamma and beta,
 *   t_y = gamma d xhat + t_gamma xhat + t_beta
 * (the same as the composed twins' rules give, op by op: RMSNorm is
 * x * (mean(x*x) + eps)^(-1/2), and d(u^(-1/2)) = -1/2 u^(-3/2) du).
 * The inputs: x, gamma (or NULL: 1), beta (or NULL: 0); n->i[0] = N,
 * n->i[1] = C, n->f[0] = eps. */
static tg_tensor *jvp_norm(tg_ctx *ctx, tg_node *n, tg_tensor *const *t, bool layernorm) {
    const tg_tensor *x = n->in[0], *gamma = n->in[1];
    const int64_t N = n->i[0], C = n->i[1];
    const double eps = n->f[0];
    double *xr = tg_arena_alloc_fn(ctx, "tg_jvp", (size_t)(2 * C) * sizeof *xr), *tr = xr ? xr + C : NULL;
    tg_tensor *y = tg_new_like(ctx, "tg_jvp", n->out);
    if (!tg_ok(ctx)) return NULL;
    for (int64_t row = 0; row < N; row++) {
        double mu = 0, tmu = 0, ss = 0;
        for (int64_t j = 0; j < C; j++) {
            xr[j] = tg_load(x, row * C + j);
            tr[j] = tg_load(t[0], row * C + j);
            mu += xr[j], tmu += tr[j];
        }
        mu = layernorm ? mu / (double)C : 0.0;
        tmu = layernorm ? tmu / (double)C : 0.0;
        for (int64_t j = 0; j < C; j++) {
            xr[j] -= mu; /* c (x itself for RMSNorm) */
            tr[j] -= tmu;
            ss += xr[j] * xr[j];
        }
        const double r = 1.0 / sqrt(ss / (double)C + eps);
        double m = 0; /* mean(xhat t_c) */
        for (int64_t j = 0; j < C; j++) m += xr[j] * r * tr[j];
        m /= (double)C;
        for (int64_t j = 0; j < C; j++) {
            const double xhat = xr[j] * r, dxhat = r * (tr[j] - xhat * m);
            double ty = (gamma ? tg_load(gamma, j) : 1.0) * dxhat;
            if (gamma) ty += tg_load(t[1], j) * xhat;
            if (n->in[2]) ty += tg_load(t[2], j);
            tg_store(y, row * C + j, ty);
        }
    }
    return y;
}

static tg_tensor *jvp_rmsnorm(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) { return jvp_norm(ctx, n, t, false); }
static tg_tensor *jvp_layernorm(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) { return jvp_norm(ctx, n, t, true); }

/* The norms' backward as a record of its own (rmsnorm_backward,
 * layernorm_backward: layers/norm_grad.c, made by tg_grad with
 * create_graph), so forward over reverse (tg_jvp of a gradient) runs
 * through the fused norms. Per row, with c = x and u = gamma dy (LayerNorm:
 * both centred, and their tangents too), r = (mean(c^2) + eps)^(-1/2),
 * xhat = c r, m = mean(u xhat):
 *   B = r (u - xhat m)
 *   t_u = t_gamma dy + gamma t_dy
 *   t_r = -r^3 mean(c t_c),  t_xhat = r t_c + c t_r
 *   t_m = mean(t_u xhat + u t_xhat)
 *   t_B = t_r (u - xhat m) + r (t_u - t_xhat m - xhat t_m)
 * The inputs: x (N, C), gamma (C) or NULL, dy (N, C); f[0] = eps, i[0]:
 * centred. */
static tg_tensor *jvp_norm_backward(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) {
    const tg_tensor *x = n->in[0], *g = n->in[1], *dy = n->in[2];
    const int64_t N = x->shape[0], C = x->shape[1];
    const bool centred = n->i[0] != 0;
    const double eps = n->f[0];
    double *b = tg_arena_alloc_fn(ctx, "tg_jvp", (size_t)(4 * C) * sizeof *b);
    tg_tensor *y = tg_new_like(ctx, "tg_jvp", n->out);
    if (!tg_ok(ctx)) return NULL;
    double *c = b, *u = b + C, *tc = b + 2 * C, *tu = b + 3 * C;
    for (int64_t row = 0; row < N; row++) {
        double mc = 0, mu = 0, mtc = 0, mtu = 0;
        for (int64_t j = 0; j < C; j++) {
            const int64_t k = row * C + j;
            const double gj = g ? tg_load(g, j) : 1.0, tg = g && t[1] ? tg_load(t[1], j) : 0.0;
            c[j] = tg_load(x, k), u[j] = gj * tg_load(dy, k);
            tc[j] = tg_load(t[0], k), tu[j] = tg * tg_load(dy, k) + gj * tg_load(t[2], k);
            mc += c[j], mu += u[j], mtc += tc[j], mtu += tu[j];
        }
        double ss = 0, ctc = 0;
        for (int64_t j = 0; j < C; j++) {
            if (centred)
                c[j] -= mc / (double)C, u[j] -= mu / (double)C, tc[j] -= mtc / (double)C, tu[j] -= mtu / (double)C;
            ss += c[j] * c[j], ctc += c[j] * tc[j];
        }
        const double r = 1.0 / sqrt(ss / (double)C + eps), tr = -r * r * r * ctc / (double)C;
        double m = 0, tm = 0;
        for (int64_t j = 0; j < C; j++) {
            const double xh = c[j] * r, txh = r * tc[j] + c[j] * tr;
            m += u[j] * xh, tm += tu[j] * xh + u[j] * txh;
        }
        m /= (double)C, tm /= (double)C;
        for (int64_t j = 0; j < C; j++) {
            const double xh = c[j] * r, txh = r * tc[j] + c[j] * tr;
            tg_store(y, row * C + j, tr * (u[j] - xh * m) + r * (tu[j] - txh * m - xh * tm));
        }
    }
    return y;
}

const tg_jvp_entry tg_jvp_nn_rules[] = {
    {"tg_matmul", jvp_matmul},
    {"tg_softmax", jvp_softmax},
    {"tg_log_softmax", jvp_softmax},
    {"tg_cross_entropy", jvp_cross_entropy},
    {"tg_mse_loss", jvp_mse},
    {"tg_masked_fill", jvp_masked_fill},
    {"tg_tril", jvp_tril},
    {"tg_triu", jvp_triu},
    {"tg_embedding", jvp_embedding},
    {"tg_dropout", jvp_dropout},
    {"tg_rope", jvp_rope},
    {"tg_attention", jvp_attention},
    {"linear", jvp_linear},
    {"rmsnorm", jvp_rmsnorm},
    {"layernorm", jvp_layernorm},
    {"rmsnorm_backward", jvp_norm_backward},
    {"layernorm_backward", jvp_norm_backward},
};
const int tg_jvp_nn_count = (int)(sizeof tg_jvp_nn_rules / sizeof tg_jvp_nn_rules[0]);

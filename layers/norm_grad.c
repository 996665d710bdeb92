/* The double backward of the fused ops of layers/: Linear (composed from
 * matmuls), and RMSNorm and LayerNorm, whose backward becomes a fused op of
 * its own -- rmsnorm_backward / layernorm_backward, dx = B(x, gamma, dy) --
 * with a hand-derived backward (the norms' second derivatives). The
 * derivation in full, worked on the guide's 3-element example, is in
 * docs/normalization-gradients.md ("Second derivatives").
 *
 * Per row of C elements (x_i, u_i = gamma_i dy_i):
 *
 * RMSNorm's backward is, with r = (mean_j x_j^2 + eps)^(-1/2),
 * xhat = x r, m = mean_j(u_j xhat_j),
 *   B(x, u)_i = r (u_i - xhat_i m).
 * LayerNorm's is the same function of the centred row c = P x and centred
 * u~ = P u (P = I - 11^T/C, so r = (var + eps)^(-1/2), xhat = c r, and
 * mean(u xhat) = mean(u~ xhat) since sum xhat = 0):
 *   B_ln(x, u) = B(P x, P u).
 *
 * Differentiating L = sum_i a_i B_i (a the adjoint of dx) with A = a.xhat:
 *   dL/du_k = r (a_k - xhat_k A / C)                     (m is linear in u)
 *   dL/dx_k: with dr/dx_k = -r^2 xhat_k / C,
 *     dxhat_i/dx_k = r (d_ik - xhat_i xhat_k / C),
 *     dm/dx_k = (r / C)(u_k - xhat_k m),
 *     dA/dx_k = r (a_k - A xhat_k / C),
 *   and B_i = r u_i - r m xhat_i, so L = r (a.u) - r m A and
 *     dL/dx_k = -(r^2/C) xhat_k (a.u) - [(-r^2 xhat_k / C) m A
 *               + r (r/C)(u_k - xhat_k m) A + r m r (a_k - A xhat_k / C)]
 *             = r^2 [ (3 m A - a.u) xhat_k / C - A u_k / C - m a_k ].
 * For LayerNorm both results are then centred (P^T = P), with u~ for u.
 * Through u = gamma dy: dL/dgamma += sum over rows of dL/du dy,
 * dL/ddy = dL/du gamma. */
#include "layers/grad_rules.h"

#include "autograd/grad_graph.h"
#include "tapegrad/layers.h"

#include <math.h>
#include <string.h>

/* One row's statistics and the backward's value, in double: fills
 * c (centred or not), ut (u, centred or not), xhat; returns r; *m =
 * mean(ut xhat). x, dy: the row; g: gamma or NULL. */
static double row_stats(const tg_tensor *x, const tg_tensor *g, const tg_tensor *dy, int64_t row, int64_t C, double eps,
                        bool centered, double *c, double *ut, double *xhat, double *m) {
    double mx = 0, mu = 0;
    for (int64_t j = 0; j < C; j++) {
        c[j] = tg_load(x, row * C + j);
        ut[j] = tg_load(dy, row * C + j) * (g ? tg_load(g, j) : 1.0);
        mx += c[j], mu += ut[j];
    }
    mx /= (double)C, mu /= (double)C;
    double ms = 0;
    for (int64_t j = 0; j < C; j++) {
        if (centered) c[j] -= mx, ut[j] -= mu;
        ms += c[j] * c[j];
    }
    const double r = 1.0 / sqrt(ms / (double)C + eps);
    double s = 0;
    for (int64_t j = 0; j < C; j++) xhat[j] = c[j] * r, s += ut[j] * xhat[j];
    *m = s / (double)C;
    return r;
}

static void center(double *v, int64_t C) {
    double s = 0;
    for (int64_t j = 0; j < C; j++) s += v[j];
    s /= (double)C;
    for (int64_t j = 0; j < C; j++) v[j] -= s;
}

/* The backward of B (the derivation above): inputs x (N,C), gamma (C) or
 * NULL, dy (N,C); the adjoint a is the output's gradient. */
static void norm_dx_backward(tg_ctx *ctx, tg_node *n) {
    const tg_tensor *x = n->in[0], *g = n->in[1], *dy = n->in[2], *a = n->out->grad;
    tg_tensor *gx = tg_grad_of(ctx, n->in[0]), *gg = tg_grad_of(ctx, n->in[1]), *gdy = tg_grad_of(ctx, n->in[2]);
    if (!tg_ok(ctx)) return;
    const int64_t N = x->shape[0], C = x->shape[1];
    const bool centered = n->i[0] != 0;
    double *buf = tg_arena_alloc_fn(ctx, n->op, (size_t)(5 * C) * sizeof *buf);
    if (!buf) return;
    double *c = buf, *ut = buf + C, *xhat = buf + 2 * C, *du = buf + 3 * C, *dxr = buf + 4 * C;
    for (int64_t i = 0; i < N; i++) {
        double m;
        const double r = row_stats(x, g, dy, i, C, n->f[0], centered, c, ut, xhat, &m);
        double A = 0, au = 0;
        for (int64_t j = 0; j < C; j++) {
            double aj = tg_load(a, i * C + j);
            A += aj * xhat[j], au += aj * ut[j];
        }
        for (int64_t j = 0; j < C; j++) {
            double aj = tg_load(a, i * C + j);
            du[j] = r * (aj - xhat[j] * A / (double)C);
            dxr[j] = r * r * ((3 * m * A - au) * xhat[j] / (double)C - A * ut[j] / (double)C - m * aj);
        }
        if (centered) center(du, C), center(dxr, C);
        for (int64_t j = 0; j < C; j++) {
            const int64_t k = i * C + j;
            if (gx) tg_store(gx, k, tg_load(gx, k) + dxr[j]);
            if (gg) tg_store(gg, j, tg_load(gg, j) + du[j] * tg_load(dy, k));
            if (gdy) tg_store(gdy, k, tg_load(gdy, k) + du[j] * (g ? tg_load(g, j) : 1.0));
        }
    }
}

/* dx = B(x, gamma, dy) for x, dy (N,C), gamma (C) or NULL: the norm's
 * backward as a recorded op (rmsnorm_backward / layernorm_backward). */
static tg_tensor *norm_dx(tg_ctx *ctx, tg_tensor *x, tg_tensor *g, tg_tensor *dy, double eps, bool centered) {
    const char *op = centered ? "layernorm_backward" : "rmsnorm_backward";
    if (!tg_ok(ctx)) return NULL;
    tg_tensor *dx = tg_new_like(ctx, op, x);
    const int64_t N = x->shape[0], C = x->shape[1];
    double *buf = tg_arena_alloc_fn(ctx, op, (size_t)(3 * C) * sizeof *buf);
    if (!dx || !buf) return NULL;
    double *c = buf, *ut = buf + C, *xhat = buf + 2 * C;
    for (int64_t i = 0; i < N; i++) {
        double m;
        const double r = row_stats(x, g, dy, i, C, eps, centered, c, ut, xhat, &m);
        for (int64_t j = 0; j < C; j++) tg_store(dx, i * C + j, r * (ut[j] - xhat[j] * m));
    }
    tg_node *n = tg_record(ctx, op, norm_dx_backward, dx, 3, (tg_tensor *[]){x, g, dy});
    if (n) n->f[0] = eps, n->i[0] = centered;
    return tg_ok(ctx) ? dx : NULL;
}

/* The rule of a fused norm's record (inputs x, gamma, beta; i[0] = N rows,
 * i[1] = C, f[0] = eps): y = xhat gamma + beta per row, so
 *   dx = B(x, gamma, dy),  dgamma = sum_rows dy xhat,  dbeta = sum_rows dy
 * with xhat the norm of x without gamma and beta (the fused op again). */
bool tg_norm_grad_rule(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    tg_tensor *x = n->in[0], *g = n->in[1], *b = n->in[2];
    const int64_t N = n->i[0], C = n->i[1];
    const double eps = n->f[0];
    const bool centered = !strcmp(n->op, "layernorm");
    tg_tensor *x2 = tg_reshape(ctx, x, 2, (int64_t[]){N, C}), *dy2 = tg_reshape(ctx, dy, 2, (int64_t[]){N, C});
    if (x->requires_grad) {
        tg_tensor *g1 = g ? tg_reshape(ctx, g, 1, &C) : NULL;
        dx[0] = tg_reshape(ctx, norm_dx(ctx, x2, g1, dy2, eps, centered), x->ndim, x->shape);
    }
    if (g && g->requires_grad) {
        tg_tensor *xhat =
            centered ? tg_layernorm_fused(ctx, x2, NULL, NULL, 1, eps) : tg_rmsnorm_fused(ctx, x2, NULL, NULL, 1, eps);
        dx[1] = tg_reshape(ctx, tg_sum_axis(ctx, tg_mul(ctx, dy2, xhat), 0, false), g->ndim, g->shape);
    }
    if (b && b->requires_grad) dx[2] = tg_reshape(ctx, tg_sum_axis(ctx, dy2, 0, false), b->ndim, b->shape);
    return tg_ok(ctx);
}

/* linear: y = x W^T + b with x viewed as (M, K) rows: dx = dy W,
 * dW = dy^T x, db = sum_rows dy. */
bool tg_linear_grad_rule(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    tg_tensor *x = n->in[0], *w = n->in[1], *b = n->n_in > 2 ? n->in[2] : NULL;
    const int64_t M = n->i[0], N = n->i[1], K = n->i[2];
    tg_tensor *dy2 = tg_reshape(ctx, dy, 2, (int64_t[]){M, N});
    if (x->requires_grad) dx[0] = tg_reshape(ctx, tg_matmul(ctx, dy2, w), x->ndim, x->shape);
    if (w->requires_grad) dx[1] = tg_matmul(ctx, tg_transpose(ctx, dy2), tg_reshape(ctx, x, 2, (int64_t[]){M, K}));
    if (b && b->requires_grad) dx[2] = tg_sum_axis(ctx, dy2, 0, false);
    return tg_ok(ctx);
}

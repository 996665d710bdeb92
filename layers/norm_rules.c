/* The fused norms' rules beside their backward (layers/rmsnorm.c,
 * layers/layernorm.c): the tangent rule (forward mode), and the double
 * backward, for which the norm's backward becomes a fused op of its own --
 * rmsnorm_backward / layernorm_backward, dx = B(x, gamma, dy) -- with a
 * hand-derived backward (the norms' second derivatives). The
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
#include "layers/norm.h"

#include "autograd/grad_graph.h"

#include <math.h>

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
    double *buf = tg_arena_alloc_fn(ctx, n->op->name, (size_t)(5 * C) * sizeof *buf);
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

/* The tangent rule of the norms' backward as a record of its own
 * (rmsnorm_backward, layernorm_backward, below: made by tg_grad with
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
static tg_tensor *norm_dx_jvp(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) {
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

/* The norms' backward as recorded ops: i[0] = centered (LayerNorm),
 * f[0] = eps. Their own double backward would be a third derivative:
 * none; their tangent rule is above. */
static const tg_op_def RMSNORM_DX = {.name = "rmsnorm_backward", .backward = norm_dx_backward, .jvp = norm_dx_jvp};
static const tg_op_def LAYERNORM_DX = {.name = "layernorm_backward", .backward = norm_dx_backward, .jvp = norm_dx_jvp};

/* dx = B(x, gamma, dy) for x, dy (N,C), gamma (C) or NULL: the norm's
 * backward as a recorded op (rmsnorm_backward / layernorm_backward). */
static tg_tensor *norm_dx(tg_ctx *ctx, tg_tensor *x, tg_tensor *g, tg_tensor *dy, double eps, bool centered) {
    const tg_op_def *op = centered ? &LAYERNORM_DX : &RMSNORM_DX;
    if (!tg_ok(ctx)) return NULL;
    tg_tensor *dx = tg_new_like(ctx, op->name, x);
    const int64_t N = x->shape[0], C = x->shape[1];
    double *buf = tg_arena_alloc_fn(ctx, op->name, (size_t)(3 * C) * sizeof *buf);
    if (!dx || !buf) return NULL;
    double *c = buf, *ut = buf + C, *xhat = buf + 2 * C;
    for (int64_t i = 0; i < N; i++) {
        double m;
        const double r = row_stats(x, g, dy, i, C, eps, centered, c, ut, xhat, &m);
        for (int64_t j = 0; j < C; j++) tg_store(dx, i * C + j, r * (ut[j] - xhat[j] * m));
    }
    tg_node *n = tg_record(ctx, op, dx, 3, (tg_tensor *[]){x, g, dy});
    if (n) n->f[0] = eps, n->i[0] = centered;
    return tg_ok(ctx) ? dx : NULL;
}

/* The rule of a fused norm's record (inputs x, gamma, beta; i[0] = N rows,
 * i[1] = C, f[0] = eps): y = xhat gamma + beta per row, so
 *   dx = B(x, gamma, dy),  dgamma = sum_rows dy xhat,  dbeta = sum_rows dy
 * with xhat the norm of x without gamma and beta (the fused op again). */
static bool norm_grad(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx, bool centered) {
    tg_tensor *x = n->in[0], *g = n->in[1], *b = n->in[2];
    const int64_t N = n->i[0], C = n->i[1];
    const double eps = n->f[0];
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

bool tg_rmsnorm_grad(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    return norm_grad(ctx, n, dy, dx, false);
}
bool tg_layernorm_grad(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    return norm_grad(ctx, n, dy, dx, true);
}

/* ---- the tangent rules ------------------------------------------------------------
 * Each restates the forward, then differentiates it in the direction of
 * the input tangents (t_x for input x), recomputing the row statistics
 * from x in float64 and using no code of the ops' kernels -- so the
 * adjoint test (tapegrad::check) holds them against the backward passes
 * as two independent derivations. */

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
static tg_tensor *norm_jvp(tg_ctx *ctx, tg_node *n, tg_tensor *const *t, bool layernorm) {
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

/* ---- RMSNorm and LayerNorm --------------------------------------------------- */

tg_tensor *tg_rmsnorm_jvp(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) { return norm_jvp(ctx, n, t, false); }
/* ---- Linear ------------------------------------------------------------------ */

tg_tensor *tg_layernorm_jvp(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) { return norm_jvp(ctx, n, t, true); }

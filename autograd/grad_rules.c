/* The grad-graph rules of autograd's ops (autograd/grad_graph.h): each op's
 * gradient written again with differentiable tg_* ops, so that a backward
 * under create_graph records itself and can be differentiated twice.
 *
 * Every rule computes what the op's first backward computes (the
 * derivation is above that backward, in autograd/ops_*.c); here each
 * restates its forward and the gradient it composes. Factors that are
 * piecewise constant in the inputs (relu's step, abs's sign, a max's
 * argmax, a dropout mask, a cross-entropy target) are built as constant
 * tensors: their derivative is 0 wherever the op is differentiable.
 * Contributions are computed only for inputs that require grad. */
#include "autograd/grad_graph.h"

#include <math.h>
#include <string.h>

#define SQRT1_2 0.70710678118654752440      /* 1 / sqrt(2) */
#define INV_SQRT_2PI 0.39894228040143267794 /* 1 / sqrt(2 pi) */
#define SQRT_2_PI 0.79788456080286535588    /* sqrt(2 / pi) */

/* ---- helpers --------------------------------------------------------------- */

tg_tensor *tg_gg_sum_to(tg_ctx *ctx, tg_tensor *g, const tg_tensor *x) {
    if (!g || tg_same_shape(g, x)) return g;
    tg_tensor *r = g;
    while (r && r->ndim > x->ndim) r = tg_sum_axis(ctx, r, 0, false);
    for (int d = 0; r && d < x->ndim; d++)
        if (x->shape[d] == 1 && r->shape[d] != 1) r = tg_sum_axis(ctx, r, d, true);
    return r;
}

tg_tensor *tg_gg_expand(tg_ctx *ctx, tg_tensor *g, const tg_tensor *x) {
    if (!g || tg_same_shape(g, x)) return g;
    return tg_add(ctx, g, tg_zeros(ctx, x->dtype, x->ndim, x->shape));
}

static bool wants(const tg_node *n, int k) { return n->in[k] && n->in[k]->requires_grad; }

/* A constant tensor of x's shape: c_i = f(x_i, a). */
static tg_tensor *const_of(tg_ctx *ctx, const tg_tensor *x, double (*f)(double, double), double a) {
    tg_tensor *c = tg_new_tensor(ctx, "tg_grad", x->dtype, x->ndim, x->shape);
    if (!c) return NULL;
    for (int64_t i = 0; i < x->numel; i++) tg_store(c, i, f(tg_load(x, i), a));
    return c;
}

static double step_pos(double x, double a) { return x > 0 ? 1.0 : a; }
static double sign_of(double x, double a) { return (void)a, x > 0 ? 1.0 : x < 0 ? -1.0 : 0.0; }
static double is_zero(double x, double a) { return (void)a, x == 0 ? 1.0 : 0.0; }

/* g reshaped to x's shape with `axis` of size 1 (the keepdim form of a
 * reduction over axis). */
static tg_tensor *keepdim_of(tg_ctx *ctx, tg_tensor *g, const tg_tensor *x, int axis) {
    if (x->ndim == 0) return g;
    int64_t shape[TG_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[axis] = 1;
    return tg_reshape(ctx, g, x->ndim, shape);
}

/* ---- elementwise ------------------------------------------------------------ */

/* add: y = a + b, da = dy, db = dy; sub: db = -dy; mul: da = dy b,
 * db = dy a; div: y = a / b, da = dy / b, db = -dy a / b^2 = -dy y / b.
 * Each summed back over the dims the input was broadcast along. */
static bool rule_binary(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    tg_tensor *a = n->in[0], *b = n->in[1];
    tg_tensor *ga = NULL, *gb = NULL;
    if (!strcmp(n->op, "add")) ga = gb = dy;
    else if (!strcmp(n->op, "sub")) ga = dy, gb = wants(n, 1) ? tg_neg(ctx, dy) : NULL;
    else if (!strcmp(n->op, "mul")) {
        ga = wants(n, 0) ? tg_mul(ctx, dy, b) : NULL;
        gb = wants(n, 1) ? tg_mul(ctx, dy, a) : NULL;
    } else {
        ga = wants(n, 0) ? tg_div(ctx, dy, b) : NULL;
        gb = wants(n, 1) ? tg_neg(ctx, tg_div(ctx, tg_mul(ctx, dy, n->out), b)) : NULL;
    }
    if (wants(n, 0)) dx[0] = tg_gg_sum_to(ctx, ga, a);
    if (wants(n, 1)) dx[1] = tg_gg_sum_to(ctx, gb, b);
    return tg_ok(ctx);
}

/* phi(x) = e^(-x^2/2) / sqrt(2 pi), the normal density, composed. */
static tg_tensor *gelu_pdf(tg_ctx *ctx, tg_tensor *x) {
    return tg_mul_scalar(ctx, tg_exp(ctx, tg_mul_scalar(ctx, tg_mul(ctx, x, x), -0.5)), INV_SQRT_2PI);
}

/* Phi(x) = erfc(-x / sqrt 2) / 2, the normal distribution function: an op
 * of its own (no composition of tg_* ops gives erf), recorded as
 * "gelu_cdf" with dPhi/dx = phi(x); its rule composes phi, whose own
 * derivative -x phi(x) the composed ops give. */
static void gelu_cdf_backward(tg_ctx *ctx, tg_node *n) {
    tg_tensor *dx = tg_grad_of(ctx, n->in[0]);
    if (!dx) return;
    const tg_tensor *x = n->in[0], *dy = n->out->grad;
    for (int64_t i = 0; i < x->numel; i++) {
        double v = tg_load(x, i);
        tg_store(dx, i, tg_load(dx, i) + tg_load(dy, i) * exp(-0.5 * v * v) * INV_SQRT_2PI);
    }
}

static tg_tensor *gelu_cdf(tg_ctx *ctx, tg_tensor *x) {
    tg_tensor *y = tg_new_like(ctx, "tg_grad", x);
    if (!y) return NULL;
    for (int64_t i = 0; i < x->numel; i++) tg_store(y, i, 0.5 * erfc(-tg_load(x, i) * SQRT1_2));
    tg_record(ctx, "gelu_cdf", gelu_cdf_backward, y, 1, &x);
    return tg_ok(ctx) ? y : NULL;
}

static bool rule_gelu_cdf(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    dx[0] = tg_mul(ctx, dy, gelu_pdf(ctx, n->in[0]));
    return tg_ok(ctx);
}

/* The unary ops: y = f(x; a), dx = dy f'(x), f' composed from x and y. */
static bool rule_unary(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    tg_tensor *x = n->in[0], *y = n->out, *d = NULL;
    const double a = n->f[0];
    const char *op = n->op;
    if (!strcmp(op, "neg")) d = tg_neg(ctx, dy); /* y = -x */
    else if (!strcmp(op, "add_scalar")) d = dy;  /* y = x + a */
    else if (!strcmp(op, "mul_scalar")) d = tg_mul_scalar(ctx, dy, a);
    else if (!strcmp(op, "pow_scalar")) { /* y = x^a, y' = a x^(a-1) (0 for a = 0) */
        if (a == 0) return true;
        d = tg_mul(ctx, dy, tg_mul_scalar(ctx, tg_pow_scalar(ctx, x, a - 1), a));
    } else if (!strcmp(op, "exp")) d = tg_mul(ctx, dy, y);                       /* y' = e^x = y */
    else if (!strcmp(op, "log")) d = tg_div(ctx, dy, x);                         /* y' = 1/x */
    else if (!strcmp(op, "sqrt")) d = tg_div(ctx, dy, tg_mul_scalar(ctx, y, 2)); /* y' = 1/(2y) */
    else if (!strcmp(op, "abs")) d = tg_mul(ctx, dy, const_of(ctx, x, sign_of, 0));
    else if (!strcmp(op, "relu")) d = tg_mul(ctx, dy, const_of(ctx, x, step_pos, 0));
    else if (!strcmp(op, "leaky_relu")) d = tg_mul(ctx, dy, const_of(ctx, x, step_pos, a));
    else if (!strcmp(op, "sigmoid")) /* y' = y (1 - y) */
        d = tg_mul(ctx, dy, tg_mul(ctx, y, tg_add_scalar(ctx, tg_neg(ctx, y), 1)));
    else if (!strcmp(op, "tanh")) /* y' = 1 - y^2 */
        d = tg_mul(ctx, dy, tg_add_scalar(ctx, tg_neg(ctx, tg_mul(ctx, y, y)), 1));
    else if (!strcmp(op, "silu")) { /* y = x s, s = sigmoid x: y' = s (1 + x (1 - s)) */
        tg_tensor *s = tg_sigmoid(ctx, x);
        tg_tensor *t = tg_add_scalar(ctx, tg_mul(ctx, x, tg_add_scalar(ctx, tg_neg(ctx, s), 1)), 1);
        d = tg_mul(ctx, dy, tg_mul(ctx, s, t));
    } else if (!strcmp(op, "gelu_tanh")) {
        /* y = x/2 (1 + t), t = tanh u, u = k0 (x + k1 x^3):
         * y' = (1 + t)/2 + x/2 (1 - t^2) k0 (1 + 3 k1 x^2) */
        const double k0 = SQRT_2_PI, k1 = 0.044715;
        tg_tensor *x2 = tg_mul(ctx, x, x);
        tg_tensor *t = tg_tanh(ctx, tg_mul_scalar(ctx, tg_add(ctx, x, tg_mul_scalar(ctx, tg_mul(ctx, x2, x), k1)), k0));
        tg_tensor *p = tg_mul_scalar(ctx, tg_add_scalar(ctx, t, 1), 0.5);
        tg_tensor *q = tg_mul(ctx, tg_mul_scalar(ctx, x, 0.5 * k0),
                              tg_mul(ctx, tg_add_scalar(ctx, tg_neg(ctx, tg_mul(ctx, t, t)), 1),
                                     tg_add_scalar(ctx, tg_mul_scalar(ctx, x2, 3 * k1), 1)));
        d = tg_mul(ctx, dy, tg_add(ctx, p, q));
    } else if (!strcmp(op, "gelu")) /* y = x Phi(x): y' = Phi(x) + x phi(x) */
        d = tg_mul(ctx, dy, tg_add(ctx, gelu_cdf(ctx, x), tg_mul(ctx, x, gelu_pdf(ctx, x))));
    if (wants(n, 0)) dx[0] = d;
    return tg_ok(ctx);
}

/* ---- reductions -------------------------------------------------------------- */

/* sum / mean: y = (1/m) sum_i x_i (m = 1 or numel): dx_i = dy / m. */
static bool rule_sum_all(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    tg_tensor *x = n->in[0];
    tg_tensor *g = tg_gg_expand(ctx, tg_reshape(ctx, dy, 0, NULL), x);
    dx[0] = n->f[0] == 1 ? g : tg_mul_scalar(ctx, g, 1.0 / n->f[0]);
    return tg_ok(ctx);
}

/* sum_axis / mean_axis: y = (1/m) sum_r x[.., r, ..]: dx = dy (keepdim form)
 * broadcast along the axis, / m. */
static bool rule_sum_axis(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    tg_tensor *x = n->in[0];
    tg_tensor *g = tg_gg_expand(ctx, keepdim_of(ctx, dy, x, (int)n->i[0]), x);
    dx[0] = n->f[0] == 1 ? g : tg_mul_scalar(ctx, g, 1.0 / n->f[0]);
    return tg_ok(ctx);
}

/* max_axis: y = x[.., argmax, ..]: dx = dy at the argmax (saved), 0
 * elsewhere: dy broadcast along the axis times a constant one-hot mask. */
static bool rule_max_axis(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    tg_tensor *x = n->in[0];
    const int axis = (int)n->i[0];
    int64_t R = x->ndim ? x->shape[axis] : 1, inner = 1;
    for (int d = axis + 1; d < x->ndim; d++) inner *= x->shape[d];
    const int64_t *idx = n->saved;
    tg_tensor *mask = tg_zeros(ctx, x->dtype, x->ndim, x->shape);
    if (!mask) return false;
    const int64_t outer = R > 0 && inner > 0 ? x->numel / (R * inner) : 0;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) tg_store(mask, (o * R + idx[o * inner + i]) * inner + i, 1.0);
    dx[0] = tg_mul(ctx, tg_gg_expand(ctx, keepdim_of(ctx, dy, x, axis), x), mask);
    return tg_ok(ctx);
}

/* ---- matmul and shapes ----------------------------------------------------------- */

/* c = a b: da = dc b^T, db = a^T dc; with b (K,N) shared by a batched a,
 * db = sum over the batch of a_b^T dc_b = a'^T dc' with a' (B M, K),
 * dc' (B M, N). */
static bool rule_matmul(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    tg_tensor *a = n->in[0], *b = n->in[1];
    if (wants(n, 0)) dx[0] = tg_matmul(ctx, dy, tg_transpose(ctx, b));
    if (wants(n, 1)) {
        if (a->ndim == b->ndim) dx[1] = tg_matmul(ctx, tg_transpose(ctx, a), dy);
        else {
            const int64_t K = a->shape[a->ndim - 1], N = dy->shape[dy->ndim - 1];
            tg_tensor *a2 = tg_reshape(ctx, a, 2, (int64_t[]){-1, K});
            tg_tensor *d2 = tg_reshape(ctx, dy, 2, (int64_t[]){-1, N});
            dx[1] = tg_matmul(ctx, tg_transpose(ctx, a2), d2);
        }
    }
    return tg_ok(ctx);
}

/* y = x^T (last two dims): dx = dy^T. */
static bool rule_transpose(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    (void)n;
    dx[0] = tg_transpose(ctx, dy);
    return tg_ok(ctx);
}

/* y = x permuted by perm (packed 4 bits a dim in i[0]): dx = dy permuted
 * by the inverse, inv[perm[d]] = d. */
static bool rule_permute(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    int nd = (int)n->i[1], inv[TG_MAX_DIMS];
    for (int d = 0; d < nd; d++) inv[(n->i[0] >> (4 * d)) & 15] = d;
    dx[0] = tg_permute(ctx, dy, inv);
    return tg_ok(ctx);
}

/* y = x reshaped: dx = dy reshaped back. */
static bool rule_reshape(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    dx[0] = tg_reshape(ctx, dy, n->in[0]->ndim, n->in[0]->shape);
    return tg_ok(ctx);
}

/* y = concat(x_0, .., x_{n-1}) along axis: dx_k = dy's slice of x_k. */
static bool rule_concat(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    const int axis = (int)n->i[0];
    int64_t off = 0;
    for (int k = 0; k < n->n_in; k++) {
        int64_t len = n->in[k]->shape[axis];
        if (wants(n, k)) dx[k] = tg_slice(ctx, dy, axis, off, off + len);
        off += len;
    }
    return tg_ok(ctx);
}

/* y = x[start:start+len] along axis: dx = dy padded with zeros before and
 * after (a concat with constant zeros). */
static bool rule_slice(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    tg_tensor *x = n->in[0];
    const int axis = (int)n->i[0];
    const int64_t start = n->i[1], len = dy->shape[axis], after = x->shape[axis] - start - len;
    tg_tensor *parts[3];
    int np = 0;
    int64_t shape[TG_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    if (start > 0) shape[axis] = start, parts[np++] = tg_zeros(ctx, x->dtype, x->ndim, shape);
    parts[np++] = dy;
    if (after > 0) shape[axis] = after, parts[np++] = tg_zeros(ctx, x->dtype, x->ndim, shape);
    dx[0] = np == 1 ? dy : tg_concat(ctx, np, parts, axis);
    return tg_ok(ctx);
}

/* ---- softmax and losses --------------------------------------------------------- */

/* softmax: dx = y (dy - sum(dy y)); log_softmax: dx = dy - e^y sum(dy),
 * the sums over the last axis (kept). */
static bool rule_softmax(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    tg_tensor *y = n->out;
    if (n->i[0]) dx[0] = tg_sub(ctx, dy, tg_mul(ctx, tg_exp(ctx, y), tg_sum_axis(ctx, dy, -1, true)));
    else dx[0] = tg_mul(ctx, y, tg_sub(ctx, dy, tg_sum_axis(ctx, tg_mul(ctx, dy, y), -1, true)));
    return tg_ok(ctx);
}

/* loss = 1/|R| sum_{i in R} [-(1-eps) logp_i[t_i] - eps/C sum_c logp_ic]:
 * dx_ic = dloss/|R| (p_ic - q_ic) on the rows of R, q = (1-eps) onehot(t)
 * + eps/C; p = softmax(x), recorded. */
static bool rule_cross_entropy(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    tg_tensor *x = n->in[0];
    const int64_t N = x->shape[0], C = x->shape[1], ignore = n->i[0], count = n->i[1];
    if (count == 0) return true; /* the loss was NaN and depends on nothing */
    const int64_t *target = (const int64_t *)((const double *)n->saved + N);
    const double eps = n->f[0];
    tg_tensor *q = tg_zeros(ctx, x->dtype, 2, x->shape), *r = tg_zeros(ctx, x->dtype, 2, (int64_t[]){N, 1});
    if (!q || !r) return false;
    for (int64_t i = 0; i < N; i++) {
        if (target[i] == ignore) continue;
        tg_store(r, i, 1.0);
        for (int64_t c = 0; c < C; c++) tg_store(q, i * C + c, eps / (double)C + (c == target[i] ? 1.0 - eps : 0.0));
    }
    tg_tensor *g = tg_mul_scalar(ctx, tg_reshape(ctx, dy, 0, NULL), 1.0 / (double)count);
    dx[0] = tg_mul(ctx, tg_mul(ctx, tg_sub(ctx, tg_softmax(ctx, x), q), r), g);
    return tg_ok(ctx);
}

/* loss = mean((p - t)^2): dp = 2 (p - t) dloss / numel, dt = -dp. */
static bool rule_mse(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    tg_tensor *p = n->in[0], *t = n->in[1];
    tg_tensor *g = tg_mul(ctx, tg_sub(ctx, p, t), tg_mul_scalar(ctx, dy, 2.0 / (double)p->numel));
    if (wants(n, 0)) dx[0] = g;
    if (wants(n, 1)) dx[1] = tg_neg(ctx, g);
    return tg_ok(ctx);
}

/* ---- masks, embedding, dropout ---------------------------------------------------- */

/* y = mask ? value : x: dx = dy where the mask is 0; the mask gets none. */
static bool rule_masked_fill(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    if (wants(n, 0)) dx[0] = tg_mul(ctx, dy, const_of(ctx, n->in[1], is_zero, 0));
    return tg_ok(ctx);
}

/* y = tril / triu of x: dx = the same triangle of dy. */
static bool rule_tri(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    dx[0] = n->i[1] ? tg_triu(ctx, dy, n->i[0]) : tg_tril(ctx, dy, n->i[0]);
    return tg_ok(ctx);
}

/* y = rope(x) rotates each pair by +a; dx = the rotation by -a of dy.
 * With P = diag(1, -1) on each pair, P R(a) P = R(-a), so
 * dx = P rope(P dy): a constant +-1 sign along the last dim. */
static bool rule_rope(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    const int64_t D = dy->shape[dy->ndim - 1];
    tg_tensor *p = tg_new_tensor(ctx, "tg_grad", dy->dtype, 1, &D);
    if (!p) return false;
    for (int64_t i = 0; i < D; i++) tg_store(p, i, i % 2 ? -1.0 : 1.0);
    dx[0] = tg_mul(ctx, tg_rope_from(ctx, tg_mul(ctx, dy, p), (int)n->i[0], n->f[0], n->i[1]), p);
    return tg_ok(ctx);
}

/* y[i, :] = W[idx_i, :]: dW = onehot^T dy', onehot (cnt, V) constant. */
static bool rule_embedding(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    tg_tensor *w = n->in[0];
    const int64_t cnt = n->i[0], V = w->shape[0], D = w->shape[1];
    const int64_t *idx = n->saved;
    tg_tensor *oh = tg_zeros(ctx, w->dtype, 2, (int64_t[]){cnt, V});
    if (!oh) return false;
    for (int64_t i = 0; i < cnt; i++) tg_store(oh, i * V + idx[i], 1.0);
    dx[0] = tg_matmul(ctx, tg_transpose(ctx, oh), tg_reshape(ctx, dy, 2, (int64_t[]){cnt, D}));
    return tg_ok(ctx);
}

/* y = x m scale (m the saved 0/1 mask): dx = dy m scale. */
static bool rule_dropout(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    tg_tensor *x = n->in[0];
    const uint8_t *mask = n->saved;
    tg_tensor *m = tg_new_tensor(ctx, "tg_grad", x->dtype, x->ndim, x->shape);
    if (!m) return false;
    for (int64_t i = 0; i < x->numel; i++) tg_store(m, i, mask[i] ? n->f[0] : 0.0);
    dx[0] = tg_mul(ctx, dy, m);
    return tg_ok(ctx);
}

/* ---- fused attention: through its composed twin ----------------------------------- */

/* o = softmax(scale q k^T + mask) v. Its gradient is the create_graph
 * gradient of the same function composed from recorded ops (matmul,
 * masked_fill, softmax), walked over those records only: the composed
 * ops' own rules give the second derivatives. */
static bool rule_attention(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    tg_tensor *q = n->in[0], *k = n->in[1], *v = n->in[2];
    const int64_t floor = ctx->tape.n_nodes, Tq = q->shape[q->ndim - 2], Tk = k->shape[k->ndim - 2];
    tg_tensor *s = tg_mul_scalar(ctx, tg_matmul(ctx, q, tg_transpose(ctx, k)), n->f[0]);
    if (n->i[0] && s) {
        tg_tensor *mask = tg_zeros(ctx, q->dtype, 2, (int64_t[]){Tq, Tk});
        if (!mask) return false;
        for (int64_t i = 0; i < Tq; i++)
            for (int64_t j = i + 1; j < Tk; j++) tg_store(mask, i * Tk + j, 1.0);
        s = tg_masked_fill(ctx, s, mask, -INFINITY);
    }
    tg_tensor *o = tg_matmul(ctx, tg_softmax(ctx, s), v);
    if (!tg_ok(ctx)) return false;
    if (!o->requires_grad) return true;
    tg_tensor *g[3];
    if (!tg_grad_walk(ctx, "tg_grad", o, dy, floor, 3, n->in, g, true)) return false;
    for (int i = 0; i < 3; i++)
        if (wants(n, i)) dx[i] = g[i];
    return true;
}

/* y = tg_cast(x, dtype), the rounding counted as the identity: dx = dy cast
 * back to x's dtype (autograd/ops_lowp.c). */
static bool rule_cast(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    dx[0] = tg_cast(ctx, dy, n->in[0]->dtype);
    return tg_ok(ctx);
}

/* ---- the table ------------------------------------------------------------------- */

typedef struct rule_entry {
    const char *op;
    tg_grad_rule_fn rule;
} rule_entry;

static const rule_entry RULES[] = {
    {"add", rule_binary},
    {"sub", rule_binary},
    {"mul", rule_binary},
    {"div", rule_binary},
    {"neg", rule_unary},
    {"add_scalar", rule_unary},
    {"mul_scalar", rule_unary},
    {"pow_scalar", rule_unary},
    {"exp", rule_unary},
    {"log", rule_unary},
    {"sqrt", rule_unary},
    {"abs", rule_unary},
    {"relu", rule_unary},
    {"leaky_relu", rule_unary},
    {"sigmoid", rule_unary},
    {"tanh", rule_unary},
    {"silu", rule_unary},
    {"gelu_tanh", rule_unary},
    {"gelu", rule_unary},
    {"gelu_cdf", rule_gelu_cdf},
    {"sum", rule_sum_all},
    {"mean", rule_sum_all},
    {"sum_axis", rule_sum_axis},
    {"mean_axis", rule_sum_axis},
    {"max_axis", rule_max_axis},
    {"tg_matmul", rule_matmul},
    {"tg_transpose", rule_transpose},
    {"tg_permute", rule_permute},
    {"tg_transpose_dims", rule_permute},
    {"tg_reshape", rule_reshape},
    {"tg_concat", rule_concat},
    {"tg_slice", rule_slice},
    {"tg_softmax", rule_softmax},
    {"tg_log_softmax", rule_softmax},
    {"tg_cross_entropy", rule_cross_entropy},
    {"tg_mse_loss", rule_mse},
    {"tg_masked_fill", rule_masked_fill},
    {"tg_tril", rule_tri},
    {"tg_triu", rule_tri},
    {"tg_rope", rule_rope},
    {"tg_embedding", rule_embedding},
    {"tg_dropout", rule_dropout},
    {"tg_attention", rule_attention},
    {"tg_cast", rule_cast},
};

/* Says so itself: a record made by another copy of the library (a
 * gradcheck plugin linking its own) carries that copy's address of this
 * function, which the pointer test of tg_grad_rule_find does not know. */
bool tg_grad_rule_none(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    (void)dy, (void)dx;
    tg_error(ctx, TG_ERR_STATE, "tg_grad",
             "'%s' cannot be differentiated twice: it has no double-backward rule (create_graph); compute this "
             "gradient without create_graph, or build the function from ops that have one (a custom op: give its "
             "tg_op_def a backward_graph)",
             n->op);
    return false;
}

tg_grad_rule_fn tg_grad_rule_find(const tg_node *n) {
    if (n->grad_rule) return n->grad_rule == tg_grad_rule_none ? NULL : n->grad_rule;
    for (size_t i = 0; i < sizeof RULES / sizeof RULES[0]; i++)
        if (!strcmp(RULES[i].op, n->op)) return RULES[i].rule;
    return NULL;
}

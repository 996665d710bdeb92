/* Activations: relu, leaky_relu, sigmoid, tanh, gelu (exact and tanh
 * approximation), silu, softplus.
 *
 * The kernels (each forward beside its backward, with the derivation) are
 * in ops_activation.inc, instantiated here for float and double; the glue
 * is the shared unary driver (autograd/unary.h). Here: each op's
 * descriptor, with its double-backward and tangent rules. */

#include "autograd/grad_graph.h"
#include "autograd/lowp.h"
#include "autograd/ops.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#define TG_TEMPLATE "autograd/ops_activation.inc"
#include "tensor/instantiate.h"

#define PI 3.14159265358979323846

/* Each op: its double-backward rule (dx = dy f'(x), f' composed of
 * recorded ops), f'(x) in double for its tangent rule, its descriptor
 * (autograd/unary.h), and its public function. */

/* relu: y' = 1 for x > 0, 0 below (a step, constant; a check keeps
 * |x| >= 0.2, off the kink); leaky_relu: s below. */
static double step_pos(double x, double s) { return x > 0 ? 1.0 : s; }
static bool relu_grad(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    dx[0] = tg_mul(ctx, dy, tg_gg_const(ctx, n->in[0], step_pos, 0));
    return tg_ok(ctx);
}
static double relu_deriv(double x, double y, double a) { return (void)y, (void)a, step_pos(x, 0); }
const tg_unary_op tg_relu_op = {TG_OP("relu", tg_unary_backward, relu_grad, tg_unary_jvp, .inputs = "x=+-0.2:2"),
                                .fn = "tg_relu", TG_UNARY_KERNELS(relu), .uses_x = true, .deriv = relu_deriv};
tg_tensor *tg_relu(tg_ctx *ctx, tg_tensor *x) { return tg_unary_apply(ctx, &tg_relu_op, x, 0); }

static bool leaky_relu_grad(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    dx[0] = tg_mul(ctx, dy, tg_gg_const(ctx, n->in[0], step_pos, n->f[0]));
    return tg_ok(ctx);
}
static double leaky_relu_deriv(double x, double y, double s) { return (void)y, step_pos(x, s); }
const tg_unary_op tg_leaky_relu_op = {
    TG_OP("leaky_relu", tg_unary_backward, leaky_relu_grad, tg_unary_jvp, .args = "slope=0.01", .inputs = "x=+-0.2:2"),
    .fn = "tg_leaky_relu", TG_UNARY_KERNELS(leaky_relu), .uses_x = true, .deriv = leaky_relu_deriv};
tg_tensor *tg_leaky_relu(tg_ctx *ctx, tg_tensor *x, double negative_slope) {
    if (tg_lowp_args(ctx, __func__, 1, &x))
        return tg_lowp_out(ctx, tg_leaky_relu(ctx, tg_lowp_in(ctx, x), negative_slope), x);
    if (!tg_check_arg(ctx, __func__, "x", x) || !tg_check_finite(ctx, __func__, "negative_slope", negative_slope))
        return NULL;
    return tg_unary_apply(ctx, &tg_leaky_relu_op, x, negative_slope);
}

/* y = sigmoid x: y' = y (1 - y) */
static bool sigmoid_grad(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    tg_tensor *y = n->out;
    dx[0] = tg_mul(ctx, dy, tg_mul(ctx, y, tg_add_scalar(ctx, tg_neg(ctx, y), 1)));
    return tg_ok(ctx);
}
static double sigmoid_deriv(double x, double y, double a) { return (void)x, (void)a, y * (1 - y); }
const tg_unary_op tg_sigmoid_op = {TG_OP("sigmoid", tg_unary_backward, sigmoid_grad, tg_unary_jvp, .inputs = "x=-2:2"),
                                   .fn = "tg_sigmoid", TG_UNARY_KERNELS(sigmoid), .uses_y = true,
                                   .deriv = sigmoid_deriv};
tg_tensor *tg_sigmoid(tg_ctx *ctx, tg_tensor *x) { return tg_unary_apply(ctx, &tg_sigmoid_op, x, 0); }

/* y = tanh x: y' = 1 - y^2 */
static bool tanh_grad(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    tg_tensor *y = n->out;
    dx[0] = tg_mul(ctx, dy, tg_add_scalar(ctx, tg_neg(ctx, tg_mul(ctx, y, y)), 1));
    return tg_ok(ctx);
}
static double tanh_deriv(double x, double y, double a) { return (void)x, (void)a, 1 - y * y; }
const tg_unary_op tg_tanh_op = {TG_OP("tanh", tg_unary_backward, tanh_grad, tg_unary_jvp, .inputs = "x=-2:2"),
                                .fn = "tg_tanh", TG_UNARY_KERNELS(tanh), .uses_y = true, .deriv = tanh_deriv};
tg_tensor *tg_tanh(tg_ctx *ctx, tg_tensor *x) { return tg_unary_apply(ctx, &tg_tanh_op, x, 0); }

/* ---- GELU ---------------------------------------------------------------------
 * Exact: y = x Phi(x), y' = Phi(x) + x phi(x), with phi(x) = e^(-x^2/2) /
 * sqrt(2 pi) the normal density, composed, and Phi(x) = erfc(-x / sqrt 2)
 * / 2 its distribution function: an op of its own (no composition of tg_*
 * ops gives erf), recorded as "gelu_cdf" with dPhi/dx = phi(x); its rule
 * composes phi, whose own derivative -x phi(x) the composed ops give. */
static tg_tensor *gelu_pdf(tg_ctx *ctx, tg_tensor *x) {
    return tg_mul_scalar(ctx, tg_exp(ctx, tg_mul_scalar(ctx, tg_mul(ctx, x, x), -0.5)), TG_INV_SQRT_2PI);
}

static void gelu_cdf_backward(tg_ctx *ctx, tg_node *n) {
    tg_tensor *dx = tg_grad_of(ctx, n->in[0]);
    if (!dx) return;
    const tg_tensor *x = n->in[0], *dy = n->out->grad;
    for (int64_t i = 0; i < x->numel; i++) {
        double v = tg_load(x, i);
        tg_store(dx, i, tg_load(dx, i) + tg_load(dy, i) * exp(-0.5 * v * v) * TG_INV_SQRT_2PI);
    }
}
static bool gelu_cdf_grad(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    dx[0] = tg_mul(ctx, dy, gelu_pdf(ctx, n->in[0]));
    return tg_ok(ctx);
}
/* t_y = phi(x) t_x (forward over reverse through exact GELU's double
 * backward) */
static tg_tensor *gelu_cdf_jvp(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) {
    const tg_tensor *x = n->in[0];
    tg_tensor *y = tg_new_like(ctx, "tg_jvp", n->out);
    for (int64_t i = 0; y && i < y->numel; i++) {
        const double v = tg_load(x, i);
        tg_store(y, i, TG_INV_SQRT_2PI * exp(-0.5 * v * v) * tg_load(t[0], i));
    }
    return y;
}
static const tg_op_def GELU_CDF = {
    .name = "gelu_cdf", .backward = gelu_cdf_backward, .backward_graph = gelu_cdf_grad, .jvp = gelu_cdf_jvp};

static tg_tensor *gelu_cdf(tg_ctx *ctx, tg_tensor *x) {
    tg_tensor *y = tg_new_like(ctx, "tg_grad", x);
    if (!y) return NULL;
    for (int64_t i = 0; i < x->numel; i++) tg_store(y, i, 0.5 * erfc(-tg_load(x, i) * TG_SQRT1_2));
    tg_record(ctx, &GELU_CDF, y, 1, &x);
    return tg_ok(ctx) ? y : NULL;
}

static bool gelu_grad(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    tg_tensor *x = n->in[0];
    dx[0] = tg_mul(ctx, dy, tg_add(ctx, gelu_cdf(ctx, x), tg_mul(ctx, x, gelu_pdf(ctx, x))));
    return tg_ok(ctx);
}
static double gelu_deriv(double x, double y, double a) {
    (void)y, (void)a;
    return 0.5 * erfc(-x / sqrt(2.0)) + x * exp(-0.5 * x * x) / sqrt(2.0 * PI);
}
/* The registry's "gelu" is this descriptor with the argument approx, which
 * picks the tanh form below. */
const tg_unary_op tg_gelu_op = {
    TG_OP("gelu", tg_unary_backward, gelu_grad, tg_unary_jvp, .args = "approx=erf", .inputs = "x=-2:2"),
    .fn = "tg_gelu", TG_UNARY_KERNELS(gelu), .uses_x = true, .deriv = gelu_deriv};

/* The tanh form: y = x/2 (1 + t), t = tanh u, u = k0 (x + k1 x^3):
 * y' = (1 + t)/2 + x/2 (1 - t^2) k0 (1 + 3 k1 x^2) */
static bool gelu_tanh_grad(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    const double k0 = TG_GELU_K0, k1 = TG_GELU_K1;
    tg_tensor *x = n->in[0], *x2 = tg_mul(ctx, x, x);
    tg_tensor *t = tg_tanh(ctx, tg_mul_scalar(ctx, tg_add(ctx, x, tg_mul_scalar(ctx, tg_mul(ctx, x2, x), k1)), k0));
    tg_tensor *p = tg_mul_scalar(ctx, tg_add_scalar(ctx, t, 1), 0.5);
    tg_tensor *q = tg_mul(ctx, tg_mul_scalar(ctx, x, 0.5 * k0),
                          tg_mul(ctx, tg_add_scalar(ctx, tg_neg(ctx, tg_mul(ctx, t, t)), 1),
                                 tg_add_scalar(ctx, tg_mul_scalar(ctx, x2, 3 * k1), 1)));
    dx[0] = tg_mul(ctx, dy, tg_add(ctx, p, q));
    return tg_ok(ctx);
}
static double gelu_tanh_deriv(double x, double y, double a) {
    (void)y, (void)a;
    const double c = sqrt(2.0 / PI), k = 0.044715, th = tanh(c * (x + k * x * x * x));
    return 0.5 * (1 + th) + 0.5 * x * (1 - th * th) * c * (1 + 3 * k * x * x);
}
const tg_unary_op tg_gelu_tanh_op = {
    .def = {.name = "gelu_tanh", .backward = tg_unary_backward, .backward_graph = gelu_tanh_grad, .jvp = tg_unary_jvp},
    .fn = "tg_gelu",
    TG_UNARY_KERNELS(gelu_tanh),
    .uses_x = true,
    .deriv = gelu_tanh_deriv};

tg_tensor *tg_gelu(tg_ctx *ctx, tg_tensor *x, bool tanh_approx) {
    return tg_unary_apply(ctx, tanh_approx ? &tg_gelu_tanh_op : &tg_gelu_op, x, 0);
}

/* y = x s, s = sigmoid x: y' = s (1 + x (1 - s)) */
static bool silu_grad(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    tg_tensor *x = n->in[0], *s = tg_sigmoid(ctx, x);
    tg_tensor *t = tg_add_scalar(ctx, tg_mul(ctx, x, tg_add_scalar(ctx, tg_neg(ctx, s), 1)), 1);
    dx[0] = tg_mul(ctx, dy, tg_mul(ctx, s, t));
    return tg_ok(ctx);
}
/* sigmoid x in double, without overflow (the tangent rules') */
static double sigmoid_of(double x) { return x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x)); }

/* s + x s (1 - s), s = sigmoid x */
static double silu_deriv(double x, double y, double a) {
    (void)y, (void)a;
    const double s = sigmoid_of(x);
    return s + x * s * (1 - s);
}
const tg_unary_op tg_silu_op = {TG_OP("silu", tg_unary_backward, silu_grad, tg_unary_jvp, .inputs = "x=-2:2"),
                                .fn = "tg_silu", TG_UNARY_KERNELS(silu), .uses_x = true, .deriv = silu_deriv};
tg_tensor *tg_silu(tg_ctx *ctx, tg_tensor *x) { return tg_unary_apply(ctx, &tg_silu_op, x, 0); }

/* y = log(1 + e^x): y' = sigmoid x, composed as tg_sigmoid (whose own rule
 * gives the second derivative s (1 - s)) */
static bool softplus_grad(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    dx[0] = tg_mul(ctx, dy, tg_sigmoid(ctx, n->in[0]));
    return tg_ok(ctx);
}
static double softplus_deriv(double x, double y, double a) { return (void)y, (void)a, sigmoid_of(x); }
const tg_unary_op tg_softplus_op = {
    TG_OP("softplus", tg_unary_backward, softplus_grad, tg_unary_jvp, .inputs = "x=-2:2"), .fn = "tg_softplus",
    TG_UNARY_KERNELS(softplus), .uses_x = true, .deriv = softplus_deriv};
tg_tensor *tg_softplus(tg_ctx *ctx, tg_tensor *x) { return tg_unary_apply(ctx, &tg_softplus_op, x, 0); }

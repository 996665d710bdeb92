/* Elementwise ops: add, sub, mul, div with NumPy broadcasting; neg; add,
 * mul and pow by a scalar; exp, log, sqrt, abs.
 *
 * The kernels (each forward beside its backward, with the derivation) are
 * in ops_elementwise.inc, instantiated here for float and double. This file
 * holds the ops' glue: argument checks, the output, dispatch by dtype, and
 * the tape record. Binary ops keep their inputs and output by pointer for
 * backward (nothing is copied) and rebuild the broadcast plan there from
 * the inputs' shapes. */

#include "autograd/broadcast.h"
#include "autograd/grad_graph.h"
#include "autograd/lowp.h"
#include "autograd/ops.h"
#include "tensor/parallel.h"

#include <math.h>

typedef enum tg_binop { TG_BINOP_ADD, TG_BINOP_SUB, TG_BINOP_MUL, TG_BINOP_DIV } tg_binop;

#define TG_TEMPLATE "autograd/ops_elementwise.inc"
#include "tensor/instantiate.h"

/* ---- binary ops ---------------------------------------------------------- */

typedef struct binop_info {
    const char *fn;
    const tg_op_def *op;
    binary_row_fn_f32 row_f32;
    binary_row_fn_f64 row_f64;
} binop_info;

static const binop_info BINOPS[] = {
    [TG_BINOP_ADD] = {"tg_add", &tg_add_op, add_row_f32, add_row_f64},
    [TG_BINOP_SUB] = {"tg_sub", &tg_sub_op, sub_row_f32, sub_row_f64},
    [TG_BINOP_MUL] = {"tg_mul", &tg_mul_op, mul_row_f32, mul_row_f64},
    [TG_BINOP_DIV] = {"tg_div", &tg_div_op, div_row_f32, div_row_f64},
};

/* Backward of every binary op: for each input that needs a grad, dx +=
 * (dy * the op's partial derivative) reduced over the dims that input was
 * broadcast along. The op is in n->i[0]. */
static void binary_backward(tg_ctx *ctx, tg_node *n) {
    tg_binop op = (tg_binop)n->i[0];
    tg_tensor *a = n->in[0], *b = n->in[1], *y = n->out;
    const tg_tensor *dy = y->grad;
    tg_bcast p;
    if (!tg_bcast_plan(ctx, BINOPS[op].fn, &p, a->ndim, a->shape, b->ndim, b->shape) || p.numel == 0) return;
    for (int side = 0; side < 2; side++) {
        tg_tensor *x = side ? b : a;
        tg_tensor *dx = tg_grad_of(ctx, x);
        if (!dx) continue;
        bool full = x->numel == p.numel;
        if (tg_is_lowp(y->dtype)) tg_lowp_accum(dx->dtype, dx->data, dy->data, (size_t)dx->numel); /* add_lowp */
        else if (y->dtype == TG_F64)
            binary_backward_f64(ctx, op, side, full, dx->data, dy->data, a->data, b->data, y->data, &p);
        else binary_backward_f32(ctx, op, side, full, dx->data, dy->data, a->data, b->data, y->data, &p);
    }
}

/* True when y = a + b of two distinct 16-bit tensors of one dtype and one
 * shape: the case add_lowp takes (a transformer's residual stream under
 * autocast). */
static bool add_lowp_fits(const tg_ctx *ctx, tg_binop op, const tg_tensor *a, const tg_tensor *b) {
    if (op != TG_BINOP_ADD || !a || !b || a == b || !tg_current(ctx, a) || !tg_current(ctx, b)) return false;
    if (!tg_is_lowp(a->dtype) || b->dtype != a->dtype || a->ndim != b->ndim) return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d]) return false;
    return true;
}

/* y = a + b in 16 bits, without the path through float32's tensors: each
 * element the float32 sum of the widened inputs, rounded once, as that
 * path computes it; backward (binary_backward) adds dy into both grads
 * through float32 (tg_lowp_accum), as tg_cast's backward would. So the
 * bits are the path's (but for the sign of a zero sum), with none of its
 * six conversions. An input given twice (a + a) takes the path: its
 * gradient there is 2 dy rounded once, not dy added twice. */
static tg_tensor *add_lowp(tg_ctx *ctx, tg_tensor *a, tg_tensor *b) {
    tg_tensor *y = tg_new_tensor(ctx, "tg_add", a->dtype, a->ndim, a->shape);
    if (!y) return NULL;
    enum { BLOCK = 1024 };
    float fa[BLOCK], fb[BLOCK];
    const uint16_t *pa = a->data, *pb = b->data;
    uint16_t *py = y->data;
    for (int64_t i = 0; i < y->numel; i += BLOCK) {
        const size_t len = (size_t)(y->numel - i < BLOCK ? y->numel - i : BLOCK);
        tg_convert_n(fa, TG_F32, pa + i, a->dtype, len);
        tg_convert_n(fb, TG_F32, pb + i, a->dtype, len);
        for (size_t j = 0; j < len; j++) fa[j] += fb[j];
        tg_convert_n(py + i, y->dtype, fa, TG_F32, len);
    }
    tg_node *n = tg_record(ctx, &tg_add_op, y, 2, (tg_tensor *[]){a, b});
    if (n) n->i[0] = TG_BINOP_ADD;
    return tg_ok(ctx) ? y : NULL;
}

static tg_tensor *binary(tg_ctx *ctx, tg_binop op, tg_tensor *a, tg_tensor *b) {
    const binop_info *info = &BINOPS[op];
    if (tg_ok(ctx) && add_lowp_fits(ctx, op, a, b)) return add_lowp(ctx, a, b);
    if (tg_lowp_args(ctx, info->fn, 2, (tg_tensor *[]){a, b})) { /* bfloat16, float16: autograd/lowp.h */
        tg_tensor *w[2];
        tg_lowp_in_all(ctx, 2, (tg_tensor *[]){a, b}, w);
        return tg_lowp_out(ctx, binary(ctx, op, w[0], w[1]), a);
    }
    if (!tg_check_arg(ctx, info->fn, "a", a) || !tg_check_arg(ctx, info->fn, "b", b)) return NULL;
    if (!tg_check_same_dtype(ctx, info->fn, a, b)) return NULL;
    tg_bcast p;
    if (!tg_bcast_plan(ctx, info->fn, &p, a->ndim, a->shape, b->ndim, b->shape)) return NULL;
    tg_tensor *y = tg_new_tensor(ctx, info->fn, a->dtype, p.out_ndim, p.out_shape);
    if (!y) return NULL;
    if (p.numel > 0) {
        if (a->dtype == TG_F64) binary_forward_f64(ctx, info->row_f64, y->data, a->data, b->data, &p);
        else binary_forward_f32(ctx, info->row_f32, y->data, a->data, b->data, &p);
    }
    tg_tensor *in[2] = {a, b};
    tg_node *n = tg_record(ctx, info->op, y, 2, in);
    if (n) {
        n->i[0] = op;
        /* What backward reads besides dy: mul both inputs, div b and y. */
        size_t es = tg_esize(a->dtype);
        if (op == TG_BINOP_MUL) tg_node_count_saved(ctx, n, (size_t)(a->numel + b->numel) * es);
        if (op == TG_BINOP_DIV) tg_node_count_saved(ctx, n, (size_t)(b->numel + y->numel) * es);
    }
    return tg_ok(ctx) ? y : NULL;
}

tg_tensor *tg_add(tg_ctx *ctx, tg_tensor *a, tg_tensor *b) { return binary(ctx, TG_BINOP_ADD, a, b); }
tg_tensor *tg_sub(tg_ctx *ctx, tg_tensor *a, tg_tensor *b) { return binary(ctx, TG_BINOP_SUB, a, b); }
tg_tensor *tg_mul(tg_ctx *ctx, tg_tensor *a, tg_tensor *b) { return binary(ctx, TG_BINOP_MUL, a, b); }
tg_tensor *tg_div(tg_ctx *ctx, tg_tensor *a, tg_tensor *b) { return binary(ctx, TG_BINOP_DIV, a, b); }

/* The double-backward rules: the gradients ga of a and gb of b at the
 * output's shape (autograd/grad_graph.h), each summed back over the dims
 * its input was broadcast along. */
static bool binary_grads(tg_ctx *ctx, const tg_node *n, tg_tensor *ga, tg_tensor *gb, tg_tensor **dx) {
    if (tg_node_needs_grad(n, 0)) dx[0] = tg_gg_sum_to(ctx, ga, n->in[0]);
    if (tg_node_needs_grad(n, 1)) dx[1] = tg_gg_sum_to(ctx, gb, n->in[1]);
    return tg_ok(ctx);
}
/* y = a + b: da = dy, db = dy */
static bool add_grad(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    return binary_grads(ctx, n, dy, dy, dx);
}
/* y = a - b: da = dy, db = -dy */
static bool sub_grad(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    return binary_grads(ctx, n, dy, tg_node_needs_grad(n, 1) ? tg_neg(ctx, dy) : NULL, dx);
}
/* y = a b: da = dy b, db = dy a */
static bool mul_grad(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    tg_tensor *a = n->in[0], *b = n->in[1];
    return binary_grads(ctx, n, tg_node_needs_grad(n, 0) ? tg_mul(ctx, dy, b) : NULL,
                        tg_node_needs_grad(n, 1) ? tg_mul(ctx, dy, a) : NULL, dx);
}
/* y = a / b: da = dy / b, db = -dy a / b^2 = -dy y / b */
static bool div_grad(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    tg_tensor *b = n->in[1];
    return binary_grads(ctx, n, tg_node_needs_grad(n, 0) ? tg_div(ctx, dy, b) : NULL,
                        tg_node_needs_grad(n, 1) ? tg_neg(ctx, tg_div(ctx, tg_mul(ctx, dy, n->out), b)) : NULL, dx);
}

/* The tangent rules: the tangents broadcast as the inputs did, so the ops
 * themselves make them the output's shape.
 *   add  t_a + t_b          sub  t_a - t_b
 *   mul  t_a b + a t_b      div  (t_a - y t_b) / b   (y = a / b) */
static tg_tensor *add_jvp(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) {
    (void)n;
    return tg_add(ctx, t[0], t[1]);
}
static tg_tensor *sub_jvp(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) {
    (void)n;
    return tg_sub(ctx, t[0], t[1]);
}
static tg_tensor *mul_jvp(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) {
    return tg_add(ctx, tg_mul(ctx, t[0], n->in[1]), tg_mul(ctx, n->in[0], t[1]));
}
static tg_tensor *div_jvp(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) {
    return tg_div(ctx, tg_sub(ctx, t[0], tg_mul(ctx, n->out, t[1])), n->in[1]);
}

/* The descriptors; a check draws div's denominators away from 0. */
const tg_op_def tg_add_op = TG_OP("add", binary_backward, add_grad, add_jvp, .inputs = "a=-2:2,b=-2:2");
const tg_op_def tg_sub_op = TG_OP("sub", binary_backward, sub_grad, sub_jvp, .inputs = "a=-2:2,b=-2:2");
const tg_op_def tg_mul_op = TG_OP("mul", binary_backward, mul_grad, mul_jvp, .inputs = "a=-2:2,b=-2:2");
const tg_op_def tg_div_op = TG_OP("div", binary_backward, div_grad, div_jvp, .inputs = "a=-2:2,b=+-0.5:2");

/* ---- unary ops -----------------------------------------------------------
 * Each op: its double-backward rule (dx = dy f'(x), f' composed of
 * recorded ops), f'(x) in double for its tangent rule, its descriptor
 * (autograd/unary.h), and its public function. The kernels, with the
 * derivations, are in ops_elementwise.inc. */

/* y = -x: y' = -1 */
static bool neg_grad(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    (void)n;
    dx[0] = tg_neg(ctx, dy);
    return tg_ok(ctx);
}
static double neg_deriv(double x, double y, double a) { return (void)x, (void)y, (void)a, -1.0; }
const tg_unary_op tg_neg_op = {TG_OP("neg", tg_unary_backward, neg_grad, tg_unary_jvp, .inputs = "x=-2:2"),
                               .fn = "tg_neg", TG_UNARY_KERNELS(neg), .deriv = neg_deriv};
tg_tensor *tg_neg(tg_ctx *ctx, tg_tensor *x) { return tg_unary_apply(ctx, &tg_neg_op, x, 0); }

/* y = x + s: y' = 1 */
static bool add_scalar_grad(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    (void)ctx, (void)n;
    dx[0] = dy;
    return true;
}
static double add_scalar_deriv(double x, double y, double a) { return (void)x, (void)y, (void)a, 1.0; }
const tg_unary_op tg_add_scalar_op = {
    TG_OP("add_scalar", tg_unary_backward, add_scalar_grad, tg_unary_jvp, .args = "s=1.5", .inputs = "x=-2:2"),
    .fn = "tg_add_scalar", TG_UNARY_KERNELS(add_scalar), .deriv = add_scalar_deriv};
tg_tensor *tg_add_scalar(tg_ctx *ctx, tg_tensor *x, double s) { return tg_unary_apply(ctx, &tg_add_scalar_op, x, s); }

/* y = s x: y' = s */
static bool mul_scalar_grad(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    dx[0] = tg_mul_scalar(ctx, dy, n->f[0]);
    return tg_ok(ctx);
}
static double mul_scalar_deriv(double x, double y, double s) { return (void)x, (void)y, s; }
const tg_unary_op tg_mul_scalar_op = {
    TG_OP("mul_scalar", tg_unary_backward, mul_scalar_grad, tg_unary_jvp, .args = "s=1.5", .inputs = "x=-2:2"),
    .fn = "tg_mul_scalar", TG_UNARY_KERNELS(mul_scalar), .deriv = mul_scalar_deriv};
tg_tensor *tg_mul_scalar(tg_ctx *ctx, tg_tensor *x, double s) { return tg_unary_apply(ctx, &tg_mul_scalar_op, x, s); }

/* y = x^p: y' = p x^(p-1), and 0 for p = 0 (y = 1 everywhere). A check
 * draws x in [0.5, 2): x^p is singular or complex at and below 0. */
static bool pow_scalar_grad(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    const double p = n->f[0];
    if (p == 0) return true;
    dx[0] = tg_mul(ctx, dy, tg_mul_scalar(ctx, tg_pow_scalar(ctx, n->in[0], p - 1), p));
    return tg_ok(ctx);
}
static double pow_scalar_deriv(double x, double y, double p) { return (void)y, p == 0 ? 0.0 : p * pow(x, p - 1); }
const tg_unary_op tg_pow_scalar_op = {
    TG_OP("pow_scalar", tg_unary_backward, pow_scalar_grad, tg_unary_jvp, .args = "p=2", .inputs = "x=0.5:2"),
    .fn = "tg_pow_scalar", TG_UNARY_KERNELS(pow_scalar), .uses_x = true, .deriv = pow_scalar_deriv};
tg_tensor *tg_pow_scalar(tg_ctx *ctx, tg_tensor *x, double p) {
    if (tg_lowp_args(ctx, __func__, 1, &x)) return tg_lowp_out(ctx, tg_pow_scalar(ctx, tg_lowp_in(ctx, x), p), x);
    if (!tg_check_arg(ctx, __func__, "x", x) || !tg_check_finite(ctx, __func__, "exponent p", p)) return NULL;
    return tg_unary_apply(ctx, &tg_pow_scalar_op, x, p);
}

/* y = e^x: y' = e^x = y. Its own float32 step: a perturbed element moves
 * the output by e^x (check/registry.c says how the steps were chosen). */
static bool exp_grad(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    dx[0] = tg_mul(ctx, dy, n->out);
    return tg_ok(ctx);
}
static double exp_deriv(double x, double y, double a) { return (void)x, (void)a, y; }
const tg_unary_op tg_exp_op = {
    TG_OP("exp", tg_unary_backward, exp_grad, tg_unary_jvp, .inputs = "x=-2:2", .f32 = {.h = 1e-2}), .fn = "tg_exp",
    TG_UNARY_KERNELS(exp), .uses_y = true, .deriv = exp_deriv};
tg_tensor *tg_exp(tg_ctx *ctx, tg_tensor *x) { return tg_unary_apply(ctx, &tg_exp_op, x, 0); }

/* y = ln x: y' = 1/x (x drawn in [0.5, 2) by a check) */
static bool log_grad(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    dx[0] = tg_div(ctx, dy, n->in[0]);
    return tg_ok(ctx);
}
static double log_deriv(double x, double y, double a) { return (void)y, (void)a, 1.0 / x; }
const tg_unary_op tg_log_op = {TG_OP("log", tg_unary_backward, log_grad, tg_unary_jvp, .inputs = "x=0.5:2"),
                               .fn = "tg_log", TG_UNARY_KERNELS(log), .uses_x = true, .deriv = log_deriv};
tg_tensor *tg_log(tg_ctx *ctx, tg_tensor *x) { return tg_unary_apply(ctx, &tg_log_op, x, 0); }

/* y = sqrt x: y' = 1/(2y) (x drawn in [0.5, 2) by a check) */
static bool sqrt_grad(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    dx[0] = tg_div(ctx, dy, tg_mul_scalar(ctx, n->out, 2));
    return tg_ok(ctx);
}
static double sqrt_deriv(double x, double y, double a) { return (void)x, (void)a, 0.5 / y; }
const tg_unary_op tg_sqrt_op = {TG_OP("sqrt", tg_unary_backward, sqrt_grad, tg_unary_jvp, .inputs = "x=0.5:2"),
                                .fn = "tg_sqrt", TG_UNARY_KERNELS(sqrt), .uses_y = true, .deriv = sqrt_deriv};
tg_tensor *tg_sqrt(tg_ctx *ctx, tg_tensor *x) { return tg_unary_apply(ctx, &tg_sqrt_op, x, 0); }

/* y = |x|: y' = sign x, piecewise constant (a check keeps |x| >= 0.2, off
 * the kink) */
static double sign_of(double x, double a) { return (void)a, x > 0 ? 1.0 : x < 0 ? -1.0 : 0.0; }
static bool abs_grad(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    dx[0] = tg_mul(ctx, dy, tg_gg_const(ctx, n->in[0], sign_of, 0));
    return tg_ok(ctx);
}
static double abs_deriv(double x, double y, double a) { return (void)y, sign_of(x, a); }
const tg_unary_op tg_abs_op = {TG_OP("abs", tg_unary_backward, abs_grad, tg_unary_jvp, .inputs = "x=+-0.2:2"),
                               .fn = "tg_abs", TG_UNARY_KERNELS(abs), .uses_x = true, .deriv = abs_deriv};
tg_tensor *tg_abs(tg_ctx *ctx, tg_tensor *x) { return tg_unary_apply(ctx, &tg_abs_op, x, 0); }

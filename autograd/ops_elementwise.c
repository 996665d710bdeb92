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
#include "autograd/lowp.h"
#include "autograd/unary.h"
#include "tensor/parallel.h"

#include <math.h>

typedef enum tg_binop { TG_BINOP_ADD, TG_BINOP_SUB, TG_BINOP_MUL, TG_BINOP_DIV } tg_binop;

#define TG_TEMPLATE "autograd/ops_elementwise.inc"
#include "tensor/instantiate.h"

/* ---- binary ops ---------------------------------------------------------- */

typedef struct binop_info {
    const char *fn, *name;
    binary_row_fn_f32 row_f32;
    binary_row_fn_f64 row_f64;
} binop_info;

static const binop_info BINOPS[] = {
    [TG_BINOP_ADD] = {"tg_add", "add", add_row_f32, add_row_f64},
    [TG_BINOP_SUB] = {"tg_sub", "sub", sub_row_f32, sub_row_f64},
    [TG_BINOP_MUL] = {"tg_mul", "mul", mul_row_f32, mul_row_f64},
    [TG_BINOP_DIV] = {"tg_div", "div", div_row_f32, div_row_f64},
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
        if (y->dtype == TG_F64)
            binary_backward_f64(ctx, op, side, full, dx->data, dy->data, a->data, b->data, y->data, &p);
        else binary_backward_f32(ctx, op, side, full, dx->data, dy->data, a->data, b->data, y->data, &p);
    }
}

static tg_tensor *binary(tg_ctx *ctx, tg_binop op, tg_tensor *a, tg_tensor *b) {
    const binop_info *info = &BINOPS[op];
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
    tg_node *n = tg_record(ctx, info->name, binary_backward, y, 2, in);
    if (n) {
        n->i[0] = op;
        /* What backward reads besides dy: mul both inputs, div b and y. */
        size_t es = tg_esize(a->dtype);
        if (op == TG_BINOP_MUL) tg_node_count_saved(ctx, n, (size_t)(a->numel + b->numel) * es);
        if (op == TG_BINOP_DIV) tg_node_count_saved(ctx, n, (size_t)(b->numel + y->numel) * es);
    }
    return tg_ok(ctx) ? y : NULL;
}

tg_tensor *tg_add(tg_ctx *ctx, tg_tensor *a, tg_tensor *b) {
    if (tg_lowp_args(ctx, __func__, 2, (tg_tensor *[]){a, b})) return tg_lowp_binary(ctx, tg_add, a, b);
    return binary(ctx, TG_BINOP_ADD, a, b);
}
tg_tensor *tg_sub(tg_ctx *ctx, tg_tensor *a, tg_tensor *b) {
    if (tg_lowp_args(ctx, __func__, 2, (tg_tensor *[]){a, b})) return tg_lowp_binary(ctx, tg_sub, a, b);
    return binary(ctx, TG_BINOP_SUB, a, b);
}
tg_tensor *tg_mul(tg_ctx *ctx, tg_tensor *a, tg_tensor *b) {
    if (tg_lowp_args(ctx, __func__, 2, (tg_tensor *[]){a, b})) return tg_lowp_binary(ctx, tg_mul, a, b);
    return binary(ctx, TG_BINOP_MUL, a, b);
}
tg_tensor *tg_div(tg_ctx *ctx, tg_tensor *a, tg_tensor *b) {
    if (tg_lowp_args(ctx, __func__, 2, (tg_tensor *[]){a, b})) return tg_lowp_binary(ctx, tg_div, a, b);
    return binary(ctx, TG_BINOP_DIV, a, b);
}

/* ---- unary ops ----------------------------------------------------------- */

TG_UNARY(neg, "tg_neg", false, false)
TG_UNARY(add_scalar, "tg_add_scalar", false, false)
TG_UNARY(mul_scalar, "tg_mul_scalar", false, false)
TG_UNARY(pow_scalar, "tg_pow_scalar", true, false)
TG_UNARY(exp, "tg_exp", false, true)
TG_UNARY(log, "tg_log", true, false)
TG_UNARY(sqrt, "tg_sqrt", false, true)
TG_UNARY(abs, "tg_abs", true, false)

tg_tensor *tg_neg(tg_ctx *ctx, tg_tensor *x) { return tg_unary_apply(ctx, &neg_OP, neg_bwd, x, 0); }
tg_tensor *tg_add_scalar(tg_ctx *ctx, tg_tensor *x, double s) {
    return tg_unary_apply(ctx, &add_scalar_OP, add_scalar_bwd, x, s);
}
tg_tensor *tg_mul_scalar(tg_ctx *ctx, tg_tensor *x, double s) {
    return tg_unary_apply(ctx, &mul_scalar_OP, mul_scalar_bwd, x, s);
}
tg_tensor *tg_pow_scalar(tg_ctx *ctx, tg_tensor *x, double p) {
    if (tg_lowp_args(ctx, __func__, 1, &x)) return tg_lowp_out(ctx, tg_pow_scalar(ctx, tg_lowp_in(ctx, x), p), x);
    if (!tg_check_arg(ctx, __func__, "x", x) || !tg_check_finite(ctx, __func__, "exponent p", p)) return NULL;
    return tg_unary_apply(ctx, &pow_scalar_OP, pow_scalar_bwd, x, p);
}
tg_tensor *tg_exp(tg_ctx *ctx, tg_tensor *x) { return tg_unary_apply(ctx, &exp_OP, exp_bwd, x, 0); }
tg_tensor *tg_log(tg_ctx *ctx, tg_tensor *x) { return tg_unary_apply(ctx, &log_OP, log_bwd, x, 0); }
tg_tensor *tg_sqrt(tg_ctx *ctx, tg_tensor *x) { return tg_unary_apply(ctx, &sqrt_OP, sqrt_bwd, x, 0); }
tg_tensor *tg_abs(tg_ctx *ctx, tg_tensor *x) { return tg_unary_apply(ctx, &abs_OP, abs_bwd, x, 0); }

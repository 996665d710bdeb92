/* The ops on bfloat16 / float16 tensors (autograd/ops_lowp.c, the path
 * of autograd/lowp.h): every op family computes in float32 and rounds its
 * result once to the input dtype, as PyTorch does on CPU. For each op, in
 * both dtypes:
 *   - forward: the 16-bit result has the bits of the float32 op on the
 *     widened inputs, rounded once;
 *   - backward: for one upstream gradient (16-bit values), each input's
 *     16-bit gradient has the value of the float32 gradient rounded once
 *     (its bits, but for the sign of a zero: assert_same_values).
 * Both are exact, not within a tolerance: the low-precision path is
 * tg_cast -> the op's float32 path -> tg_cast, so the float32 work is the
 * same computation, and each leaf here feeds the op once (a leaf used by two
 * ops gets two 16-bit additions, each rounded: the MLP below, compared
 * with a tolerance). Then: mixing dtypes is an error naming the op and both
 * dtypes, an op without a 16-bit path (a custom op) refuses by name, and a
 * two-layer MLP in bfloat16 trains through forward and backward with
 * gradients within a bfloat16-derived tolerance of float64's.
 * One exception: a bfloat16 Linear multiplies in bfloat16 (its own GEMM,
 * tensor/gemm.h), so its results and gradients are checked bit for bit
 * against that GEMM's rule instead (check_linear_bf16). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/gemm.h"
#include "tensor/half.h"
#include "testutil.h"

static tg_ctx *ctx;

static void setup(void) { ctx = tg_ctx_new(7); }
static void teardown(void) { tg_ctx_free(ctx); }

static const tg_dtype DTYPES[2] = {TG_BF16, TG_F16};

/* One op under test: f(in) on inputs of these shapes, uniform in [lo, hi);
 * inputs whose bit is set in `no_grad` do not require grad. */
typedef struct op_case {
    const char *name;
    tg_gradcheck_fn f;
    int n;
    int ndim[3];
    int64_t shape[3][4];
    double lo, hi;
    unsigned no_grad;
} op_case;

/* a and b (same dtype and numel) hold the same values: bit for bit, but
 * for the sign of a zero. A gradient is accumulated, dx = 0 + dx_op, and
 * 0 + (-0) = +0: the 16-bit leaf's gradient (0 + the rounded float32
 * gradient of the cast) is +0 where a kernel wrote -0 into the fresh
 * float32 gradient (attention's dq of a causal first row: P = 1, dS = -0). */
static void assert_same_values(const char *what, const tg_tensor *a, const tg_tensor *b) {
    ck_assert_msg(a->dtype == b->dtype && a->numel == b->numel, "%s: dtype or numel differ", what);
    for (int64_t i = 0; i < a->numel; i++) {
        double x = tg_get_flat(ctx, a, i), y = tg_get_flat(ctx, b, i);
        ck_assert_msg(x == y || (isnan(x) && isnan(y)), "%s: element %lld differs: %.9g vs %.9g", what, (long long)i, x,
                      y);
    }
}

/* f on 16-bit leaves against f on their float32 widening (see the top). */
static void check_case(const op_case *c, tg_dtype dt) {
    char what[160];
    tg_tensor *x16[3], *x32[3];
    for (int k = 0; k < c->n; k++) {
        tg_tensor *r = tg_test_rand(ctx, TG_F32, c->ndim[k], c->shape[k], c->lo, c->hi);
        x16[k] = tg_to_dtype(ctx, r, dt);
        x32[k] = tg_to_dtype(ctx, x16[k], TG_F32); /* exact */
        if (!(c->no_grad >> k & 1)) tg_requires_grad(ctx, x16[k]), tg_requires_grad(ctx, x32[k]);
    }
    tg_tensor *y16 = c->f(ctx, x16, NULL), *y32 = c->f(ctx, x32, NULL);
    ck_assert_msg(y16 && y32 && tg_ok(ctx), "%s %s: %s", c->name, tg_dtype_name(dt), tg_error_message(ctx));
    ck_assert_msg(y16->dtype == dt, "%s: out dtype %s", c->name, tg_dtype_name(y16->dtype));
    snprintf(what, sizeof what, "%s %s forward", c->name, tg_dtype_name(dt));
    tg_test_assert_same_bits(what, y16, tg_to_dtype(ctx, y32, dt));

    tg_tensor *g16 = tg_to_dtype(ctx, tg_test_rand(ctx, TG_F32, y16->ndim, y16->shape, -1, 1), dt);
    tg_backward_ex(ctx, y16, g16, true);
    tg_backward_ex(ctx, y32, tg_to_dtype(ctx, g16, TG_F32), false);
    ck_assert_msg(tg_ok(ctx), "%s backward: %s", c->name, tg_error_message(ctx));
    for (int k = 0; k < c->n; k++) {
        if (c->no_grad >> k & 1) continue;
        snprintf(what, sizeof what, "%s %s grad of input %d", c->name, tg_dtype_name(dt), k);
        ck_assert_msg(x16[k]->grad && x16[k]->grad->dtype == dt, "%s: no 16-bit grad", what);
        assert_same_values(what, x16[k]->grad, tg_to_dtype(ctx, x32[k]->grad, dt));
    }
}

static void check_cases(const op_case *cases, size_t n) {
    for (size_t i = 0; i < n; i++)
        for (int d = 0; d < 2; d++) {
            check_case(&cases[i], DTYPES[d]);
            tg_ctx_reset(ctx);
        }
}

/* ---- elementwise and activations ------------------------------------------- */

static tg_tensor *f_add(tg_ctx *c, tg_tensor *const *in, void *u) { return (void)u, tg_add(c, in[0], in[1]); }
static tg_tensor *f_sub(tg_ctx *c, tg_tensor *const *in, void *u) { return (void)u, tg_sub(c, in[0], in[1]); }
static tg_tensor *f_mul(tg_ctx *c, tg_tensor *const *in, void *u) { return (void)u, tg_mul(c, in[0], in[1]); }
static tg_tensor *f_div(tg_ctx *c, tg_tensor *const *in, void *u) { return (void)u, tg_div(c, in[0], in[1]); }
/* x * x: one tensor as both inputs, widened once (its gradient 2 x dy is
 * summed in float32 and rounded once) */
static tg_tensor *f_square(tg_ctx *c, tg_tensor *const *in, void *u) { return (void)u, tg_mul(c, in[0], in[0]); }
static tg_tensor *f_neg(tg_ctx *c, tg_tensor *const *in, void *u) { return (void)u, tg_neg(c, in[0]); }
static tg_tensor *f_add_s(tg_ctx *c, tg_tensor *const *in, void *u) { return (void)u, tg_add_scalar(c, in[0], 0.3); }
static tg_tensor *f_mul_s(tg_ctx *c, tg_tensor *const *in, void *u) { return (void)u, tg_mul_scalar(c, in[0], -1.7); }
static tg_tensor *f_pow(tg_ctx *c, tg_tensor *const *in, void *u) { return (void)u, tg_pow_scalar(c, in[0], 1.5); }
static tg_tensor *f_exp(tg_ctx *c, tg_tensor *const *in, void *u) { return (void)u, tg_exp(c, in[0]); }
static tg_tensor *f_log(tg_ctx *c, tg_tensor *const *in, void *u) { return (void)u, tg_log(c, in[0]); }
static tg_tensor *f_sqrt(tg_ctx *c, tg_tensor *const *in, void *u) { return (void)u, tg_sqrt(c, in[0]); }
static tg_tensor *f_abs(tg_ctx *c, tg_tensor *const *in, void *u) { return (void)u, tg_abs(c, in[0]); }
static tg_tensor *f_relu(tg_ctx *c, tg_tensor *const *in, void *u) { return (void)u, tg_relu(c, in[0]); }
static tg_tensor *f_leaky(tg_ctx *c, tg_tensor *const *in, void *u) { return (void)u, tg_leaky_relu(c, in[0], 0.1); }
static tg_tensor *f_sigmoid(tg_ctx *c, tg_tensor *const *in, void *u) { return (void)u, tg_sigmoid(c, in[0]); }
static tg_tensor *f_tanh(tg_ctx *c, tg_tensor *const *in, void *u) { return (void)u, tg_tanh(c, in[0]); }
static tg_tensor *f_gelu(tg_ctx *c, tg_tensor *const *in, void *u) { return (void)u, tg_gelu(c, in[0], false); }
static tg_tensor *f_gelu_t(tg_ctx *c, tg_tensor *const *in, void *u) { return (void)u, tg_gelu(c, in[0], true); }
static tg_tensor *f_silu(tg_ctx *c, tg_tensor *const *in, void *u) { return (void)u, tg_silu(c, in[0]); }

#define ONE(nm, fn, lo, hi) \
    { nm, fn, 1, {2}, {{5, 7}}, lo, hi, 0 }
/* a (5, 7) with b (7): b broadcast along the rows, its gradient a row sum */
#define TWO(nm, fn, lo, hi) \
    { nm, fn, 2, {2, 1}, {{5, 7}, {7}}, lo, hi, 0 }
/* a and b of one shape: the 16-bit add of the residual stream (add_lowp) */
#define SAME(nm, fn, lo, hi) \
    { nm, fn, 2, {2, 2}, {{37, 61}, {37, 61}}, lo, hi, 0 }
/* over a thousand elements: the 16-bit kernels' blocks */
#define BIG(nm, fn, lo, hi) \
    { nm, fn, 1, {2}, {{37, 61}}, lo, hi, 0 }

START_TEST(test_elementwise) {
    const op_case cases[] = {
        TWO("add", f_add, -3, 3),          TWO("sub", f_sub, -3, 3),
        TWO("mul", f_mul, -3, 3),          TWO("div", f_div, 0.5, 3),
        ONE("x*x", f_square, -3, 3),       ONE("neg", f_neg, -3, 3),
        ONE("add_scalar", f_add_s, -3, 3), ONE("mul_scalar", f_mul_s, -3, 3),
        ONE("pow_scalar", f_pow, 0.1, 4),  ONE("exp", f_exp, -3, 3),
        ONE("log", f_log, 0.1, 9),         ONE("sqrt", f_sqrt, 0.1, 9),
        ONE("abs", f_abs, -3, 3),          SAME("add same shape", f_add, -3, 3),
        BIG("exp big", f_exp, -3, 3),
    };
    check_cases(cases, sizeof cases / sizeof cases[0]);
}
END_TEST

START_TEST(test_activations) {
    const op_case cases[] = {
        ONE("relu", f_relu, -3, 3),       ONE("leaky_relu", f_leaky, -3, 3),
        ONE("sigmoid", f_sigmoid, -4, 4), ONE("tanh", f_tanh, -3, 3),
        ONE("gelu", f_gelu, -4, 4),       ONE("gelu tanh", f_gelu_t, -4, 4),
        ONE("silu", f_silu, -4, 4),       BIG("gelu tanh big", f_gelu_t, -4, 4),
        BIG("tanh big", f_tanh, -4, 4),
    };
    check_cases(cases, sizeof cases / sizeof cases[0]);
}
END_TEST

/* ---- reductions, softmax, losses ---------------------------------------------- */

static tg_tensor *f_sum(tg_ctx *c, tg_tensor *const *in, void *u) { return (void)u, tg_sum(c, in[0]); }
static tg_tensor *f_mean(tg_ctx *c, tg_tensor *const *in, void *u) { return (void)u, tg_mean(c, in[0]); }
static tg_tensor *f_sum_ax(tg_ctx *c, tg_tensor *const *in, void *u) {
    return (void)u, tg_sum_axis(c, in[0], 1, false);
}
static tg_tensor *f_mean_ax(tg_ctx *c, tg_tensor *const *in, void *u) {
    return (void)u, tg_mean_axis(c, in[0], 0, true);
}
static tg_tensor *f_max_ax(tg_ctx *c, tg_tensor *const *in, void *u) { return (void)u, tg_max_axis(c, in[0], 1, true); }
static tg_tensor *f_softmax(tg_ctx *c, tg_tensor *const *in, void *u) { return (void)u, tg_softmax(c, in[0]); }
static tg_tensor *f_lsm(tg_ctx *c, tg_tensor *const *in, void *u) { return (void)u, tg_log_softmax(c, in[0]); }
static tg_tensor *f_mse(tg_ctx *c, tg_tensor *const *in, void *u) { return (void)u, tg_mse_loss(c, in[0], in[1]); }
static const int64_t TARGETS[5] = {3, 0, 6, 6, 1};
static tg_tensor *f_ce(tg_ctx *c, tg_tensor *const *in, void *u) {
    (void)u;
    tg_cross_entropy_opts o = TG_CROSS_ENTROPY_DEFAULTS;
    o.label_smoothing = 0.1;
    return tg_cross_entropy(c, in[0], TARGETS, &o);
}

START_TEST(test_reductions_softmax_losses) {
    /* sums of 35 values in [-3, 3): float32 accumulation, one rounding */
    const op_case cases[] = {
        ONE("sum", f_sum, -3, 3),
        ONE("mean", f_mean, -3, 3),
        ONE("sum_axis", f_sum_ax, -3, 3),
        ONE("mean_axis", f_mean_ax, -3, 3),
        ONE("max_axis", f_max_ax, -3, 3),
        ONE("softmax", f_softmax, -6, 6),
        ONE("log_softmax", f_lsm, -6, 6),
        ONE("cross_entropy", f_ce, -6, 6),
        {"mse_loss", f_mse, 2, {2, 2}, {{5, 7}, {5, 7}}, -3, 3, 0},
    };
    check_cases(cases, sizeof cases / sizeof cases[0]);
}
END_TEST

/* The loss of 16-bit logits is 16-bit (as PyTorch's); a float32 loss comes
 * from casting the logits first, and its gradient still reaches the 16-bit
 * logits. */
START_TEST(test_cross_entropy_dtype) {
    tg_tensor *l = tg_requires_grad(ctx, tg_to_dtype(ctx, tg_test_rand(ctx, TG_F32, TG_SHAPE(5, 7), -2, 2), TG_BF16));
    tg_tensor *loss = tg_cross_entropy(ctx, l, TARGETS, NULL);
    ck_assert(loss && loss->dtype == TG_BF16);
    tg_tensor *loss32 = tg_cross_entropy(ctx, tg_cast(ctx, l, TG_F32), TARGETS, NULL);
    ck_assert(loss32 && loss32->dtype == TG_F32);
    ck_assert(tg_get_flat(ctx, loss, 0) == tg_get_flat(ctx, tg_to_dtype(ctx, loss32, TG_BF16), 0));
    tg_backward(ctx, loss32);
    ck_assert_msg(tg_ok(ctx), "%s", tg_error_message(ctx));
    ck_assert(l->grad && l->grad->dtype == TG_BF16);
}
END_TEST

/* ---- matmul and Linear ------------------------------------------------------------ */

static tg_tensor *f_matmul(tg_ctx *c, tg_tensor *const *in, void *u) { return (void)u, tg_matmul(c, in[0], in[1]); }
static tg_tensor *f_linear(tg_ctx *c, tg_tensor *const *in, void *u) {
    return (void)u, tg_linear_fused(c, in[0], in[1], in[2]);
}
static tg_tensor *f_linear_nb(tg_ctx *c, tg_tensor *const *in, void *u) {
    return (void)u, tg_linear_fused(c, in[0], in[1], NULL);
}

/* C (M,N) = op(A) op(B) + C by the bfloat16 GEMM's rule (its reference),
 * all bfloat16 tensors' data. */
static void gemm_rule(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const tg_tensor *A, const tg_tensor *B,
                      tg_tensor *C) {
    const tg_gemm_bf16_args g = {.kernel = TG_GEMM_BF16_REFERENCE,
                                 .trans_a = ta,
                                 .trans_b = tb,
                                 .M = M,
                                 .N = N,
                                 .K = K,
                                 .alpha = 1,
                                 .beta = 1,
                                 .A = A->data,
                                 .lda = ta ? M : K,
                                 .B = B->data,
                                 .ldb = tb ? K : N,
                                 .C = C->data,
                                 .ldc = N,
                                 .c_bf16 = true};
    tg_gemm_bf16_ws(&g, NULL, 0);
}

/* A bfloat16 Linear (case c: x, W, b) against the bfloat16 GEMM's rule:
 * y = round(x W^T + b) with b the GEMM's beta row (the same bits as y
 * prefilled with b), and from a bfloat16 dy into zero grads
 * dx = round(0 + dy W), dW = round(0 + dy^T x), db = round(column sums of
 * dy, in double). */
static void check_linear_bf16(const op_case *c) {
    tg_tensor *x = tg_to_dtype(ctx, tg_test_rand(ctx, TG_F32, c->ndim[0], c->shape[0], c->lo, c->hi), TG_BF16);
    tg_tensor *w = tg_to_dtype(ctx, tg_test_rand(ctx, TG_F32, 2, c->shape[1], c->lo, c->hi), TG_BF16);
    tg_tensor *b = c->n > 2 ? tg_to_dtype(ctx, tg_test_rand(ctx, TG_F32, 1, c->shape[2], c->lo, c->hi), TG_BF16) : NULL;
    const int64_t N = w->shape[0], K = w->shape[1];
    int64_t M = 1; /* x's leading dims */
    for (int d = 0; d < x->ndim - 1; d++) M *= x->shape[d];
    if (!(c->no_grad & 1)) tg_requires_grad(ctx, x);
    tg_requires_grad(ctx, w);
    if (b) tg_requires_grad(ctx, b);
    tg_tensor *y = c->f(ctx, (tg_tensor *[]){x, w, b}, NULL);
    ck_assert_msg(y && tg_ok(ctx) && y->dtype == TG_BF16, "%s: %s", c->name, tg_error_message(ctx));
    tg_tensor *want = tg_zeros(ctx, TG_BF16, y->ndim, y->shape);
    for (int64_t i = 0; b && i < M; i++) memcpy((uint16_t *)want->data + i * N, b->data, (size_t)N * 2);
    gemm_rule(false, true, M, N, K, x, w, want);
    char what[160];
    snprintf(what, sizeof what, "%s bfloat16 forward", c->name);
    tg_test_assert_same_bits(what, y, want);

    tg_tensor *dy = tg_to_dtype(ctx, tg_test_rand(ctx, TG_F32, y->ndim, y->shape, -1, 1), TG_BF16);
    tg_backward_ex(ctx, y, dy, false);
    ck_assert_msg(tg_ok(ctx), "%s backward: %s", c->name, tg_error_message(ctx));
    tg_tensor *dw = tg_zeros(ctx, TG_BF16, 2, w->shape);
    gemm_rule(true, false, N, K, M, dy, x, dw);
    snprintf(what, sizeof what, "%s bfloat16 dW", c->name);
    tg_test_assert_same_bits(what, w->grad, dw);
    if (!(c->no_grad & 1)) {
        tg_tensor *dx = tg_zeros(ctx, TG_BF16, x->ndim, x->shape);
        gemm_rule(false, false, M, K, N, dy, w, dx);
        snprintf(what, sizeof what, "%s bfloat16 dx", c->name);
        tg_test_assert_same_bits(what, x->grad, dx);
    }
    for (int64_t j = 0; b && j < N; j++) {
        double sum = 0;
        for (int64_t i = 0; i < M; i++) sum += tg_bf16_to_f32(((const uint16_t *)dy->data)[i * N + j]);
        ck_assert_int_eq(((const uint16_t *)b->grad->data)[j], tg_f32_to_bf16((float)sum));
    }
}

START_TEST(test_matmul_linear) {
    const op_case cases[] = {
        {"matmul", f_matmul, 2, {2, 2}, {{6, 33}, {33, 5}}, -2, 2, 0},
        {"matmul batched", f_matmul, 2, {3, 2}, {{3, 4, 17}, {17, 6}}, -2, 2, 0},
    };
    check_cases(cases, sizeof cases / sizeof cases[0]);
    /* float16 through the float32 GEMM (check_case), bfloat16 in its own */
    const op_case linear[] = {
        {"linear", f_linear, 3, {3, 2, 1}, {{2, 3, 41}, {9, 41}, {9}}, -2, 2, 0},
        {"linear, no bias", f_linear_nb, 2, {2, 2}, {{7, 40}, {9, 40}}, -2, 2, 0},
        {"linear, x needs no grad", f_linear, 3, {2, 2, 1}, {{7, 40}, {9, 40}, {9}}, -2, 2, 1},
        {"linear, K = 0", f_linear, 3, {2, 2, 1}, {{3, 0}, {5, 0}, {5}}, -2, 2, 0},
    };
    for (size_t i = 0; i < sizeof linear / sizeof linear[0]; i++) {
        check_case(&linear[i], TG_F16);
        tg_ctx_reset(ctx);
        check_linear_bf16(&linear[i]);
        tg_ctx_reset(ctx);
    }
}
END_TEST

/* ---- shape ops, embedding, masking, dropout, rope, attention ------------------------ */

static tg_tensor *f_transpose(tg_ctx *c, tg_tensor *const *in, void *u) { return (void)u, tg_transpose(c, in[0]); }
static tg_tensor *f_permute(tg_ctx *c, tg_tensor *const *in, void *u) {
    return (void)u, tg_permute(c, in[0], (const int[]){2, 0, 1});
}
static tg_tensor *f_tdims(tg_ctx *c, tg_tensor *const *in, void *u) {
    return (void)u, tg_transpose_dims(c, in[0], 0, 2);
}
static tg_tensor *f_reshape(tg_ctx *c, tg_tensor *const *in, void *u) {
    return (void)u, tg_reshape(c, in[0], TG_SHAPE(-1, 15));
}
/* x0, x1, x0 along axis 1: x0 twice, widened once */
static tg_tensor *f_concat(tg_ctx *c, tg_tensor *const *in, void *u) {
    return (void)u, tg_concat(c, 3, (tg_tensor *[]){in[0], in[1], in[0]}, 1);
}
static tg_tensor *f_slice(tg_ctx *c, tg_tensor *const *in, void *u) { return (void)u, tg_slice(c, in[0], 1, 1, 4); }
/* rows 4, 0, 4, 2, 4, 1: row 4 gathered three times, its gradient summed
 * in float32 and rounded once */
static tg_tensor *f_embedding(tg_ctx *c, tg_tensor *const *in, void *u) {
    return (void)u, tg_embedding(c, in[0], TG_SHAPE(2, 3), (const int64_t[]){4, 0, 4, 2, 4, 1});
}
/* a fixed 0/1 mask of x's dtype, broadcast over the first dim */
static tg_tensor *f_masked(tg_ctx *c, tg_tensor *const *in, void *u) {
    (void)u;
    double m[20];
    for (int i = 0; i < 20; i++) m[i] = i % 3 == 0;
    tg_tensor *mask = tg_test_tensor(c, in[0]->dtype, TG_SHAPE(4, 5), m);
    return tg_masked_fill(c, in[0], mask, -2.5);
}
static tg_tensor *f_tril(tg_ctx *c, tg_tensor *const *in, void *u) { return (void)u, tg_tril(c, in[0], 1); }
static tg_tensor *f_triu(tg_ctx *c, tg_tensor *const *in, void *u) { return (void)u, tg_triu(c, in[0], -1); }
/* the same mask both times: the RNG stream restarted before each call */
static tg_tensor *f_dropout(tg_ctx *c, tg_tensor *const *in, void *u) {
    (void)u;
    tg_rng_set_state(c, 42, 0);
    return tg_dropout(c, in[0], 0.3, true);
}
static tg_tensor *f_rope(tg_ctx *c, tg_tensor *const *in, void *u) { return (void)u, tg_rope(c, in[0], 1, 10000.0); }
static tg_tensor *f_attn(tg_ctx *c, tg_tensor *const *in, void *u) {
    return (void)u, tg_attention(c, in[0], in[1], in[2], true, 0);
}
static tg_tensor *f_attn_full(tg_ctx *c, tg_tensor *const *in, void *u) {
    return (void)u, tg_attention(c, in[0], in[1], in[2], false, 0);
}
/* self-attention on one tensor: q = k = v, widened once */
static tg_tensor *f_attn_self(tg_ctx *c, tg_tensor *const *in, void *u) {
    return (void)u, tg_attention(c, in[0], in[0], in[0], false, 0.7);
}

START_TEST(test_shape_ops) {
    const op_case cases[] = {
        {"transpose", f_transpose, 1, {3}, {{3, 4, 5}}, -3, 3, 0},
        {"permute", f_permute, 1, {3}, {{3, 4, 5}}, -3, 3, 0},
        {"transpose_dims", f_tdims, 1, {3}, {{3, 4, 5}}, -3, 3, 0},
        {"reshape", f_reshape, 1, {3}, {{3, 4, 5}}, -3, 3, 0},
        {"concat", f_concat, 2, {2, 2}, {{3, 4}, {3, 2}}, -3, 3, 0},
        {"slice", f_slice, 1, {3}, {{3, 6, 2}}, -3, 3, 0},
        {"permute big", f_permute, 1, {3}, {{8, 96, 96}}, -3, 3, 0},
        {"transpose big", f_transpose, 1, {3}, {{8, 96, 33}}, -3, 3, 0},
        {"slice big", f_slice, 1, {3}, {{9, 6, 700}}, -3, 3, 0},
    };
    check_cases(cases, sizeof cases / sizeof cases[0]);
}
END_TEST

static tg_tensor *make_reshape(tg_tensor *x, tg_tensor *z, const int *p) {
    return (void)z, (void)p, tg_reshape(ctx, x, TG_SHAPE(24, 8));
}
static tg_tensor *make_permute(tg_tensor *x, tg_tensor *z, const int *p) { return (void)z, tg_permute(ctx, x, p); }
static tg_tensor *make_transpose(tg_tensor *x, tg_tensor *z, const int *p) {
    return (void)z, (void)p, tg_transpose(ctx, x);
}
static tg_tensor *make_tdims(tg_tensor *x, tg_tensor *z, const int *p) {
    return (void)z, (void)p, tg_transpose_dims(ctx, x, 0, 2);
}
static tg_tensor *make_slice(tg_tensor *x, tg_tensor *z, const int *p) {
    return (void)z, (void)p, tg_slice(ctx, x, 1, 2, 5);
}
static tg_tensor *make_concat(tg_tensor *x, tg_tensor *z, const int *p) {
    return (void)p, tg_concat(ctx, 2, (tg_tensor *[]){x, z}, 2);
}
static tg_tensor *make_add(tg_tensor *x, tg_tensor *z, const int *p) { return (void)p, tg_add(ctx, x, z); }
static tg_tensor *make_gelu(tg_tensor *x, tg_tensor *z, const int *p) {
    return (void)z, (void)p, tg_gelu(ctx, x, true);
}
static tg_tensor *make_exp(tg_tensor *x, tg_tensor *z, const int *p) { return (void)z, (void)p, tg_exp(ctx, x); }

/* The ops that move data, the same-shape add and the unary ops take 16-bit
 * tensors natively: one record each, no tg_cast around them (the path
 * through float32 makes three or more). A tensor added to itself still
 * takes that path (its gradient 2 dy rounded once). */
START_TEST(test_native_16_bit_ops_record_once) {
    tg_tensor *x = tg_to_dtype(ctx, tg_test_rand(ctx, TG_F32, TG_SHAPE(4, 6, 8), -2, 2), TG_BF16);
    tg_tensor *z = tg_to_dtype(ctx, tg_test_rand(ctx, TG_F32, TG_SHAPE(4, 6, 8), -2, 2), TG_BF16);
    tg_requires_grad(ctx, x);
    const int perm[3] = {1, 0, 2};
    struct {
        const char *name;
        tg_tensor *(*make)(tg_tensor *x, tg_tensor *z, const int *perm);
    } const ops[] = {
        {"reshape", make_reshape},
        {"permute", make_permute},
        {"transpose", make_transpose},
        {"transpose_dims", make_tdims},
        {"slice", make_slice},
        {"concat", make_concat},
        {"add", make_add},
        {"gelu", make_gelu},
        {"exp", make_exp},
    };
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        const int64_t before = tg_tape_size(ctx);
        tg_tensor *y = ops[i].make(x, z, perm);
        ck_assert_msg(y && tg_ok(ctx) && y->dtype == TG_BF16, "%s: %s", ops[i].name, tg_error_message(ctx));
        ck_assert_msg(tg_tape_size(ctx) == before + 1, "%s made %lld records, not 1", ops[i].name,
                      (long long)(tg_tape_size(ctx) - before));
    }
    const int64_t before = tg_tape_size(ctx);
    ck_assert(tg_add(ctx, x, x) && tg_tape_size(ctx) > before + 1);
}
END_TEST

/* dropout's identity cases return the 16-bit x itself, as in float32 */
START_TEST(test_dropout_identity) {
    tg_tensor *x = tg_ones(ctx, TG_BF16, TG_SHAPE(4));
    ck_assert(tg_dropout(ctx, x, 0.5, false) == x);
    ck_assert(tg_dropout(ctx, x, 0.0, true) == x);
    tg_test_assert_fails(ctx, tg_dropout(ctx, x, 1.5, false), TG_ERR_VALUE, "tg_dropout", "p = 1.5", NULL);
    tg_test_assert_fails(ctx, tg_dropout(ctx, x, 1.5, true), TG_ERR_VALUE, "tg_dropout", "p = 1.5", NULL);
}
END_TEST

START_TEST(test_embedding_masking_dropout) {
    const op_case cases[] = {
        {"embedding", f_embedding, 1, {2}, {{6, 5}}, -3, 3, 0},
        {"masked_fill", f_masked, 1, {3}, {{2, 4, 5}}, -3, 3, 0},
        {"tril", f_tril, 1, {3}, {{3, 4, 5}}, -3, 3, 0},
        {"triu", f_triu, 1, {3}, {{3, 4, 5}}, -3, 3, 0},
        {"dropout", f_dropout, 1, {2}, {{6, 9}}, -3, 3, 0},
    };
    check_cases(cases, sizeof cases / sizeof cases[0]);
}
END_TEST

START_TEST(test_rope_attention) {
    const op_case cases[] = {
        {"rope", f_rope, 1, {4}, {{2, 6, 3, 8}}, -2, 2, 0},
        {"attention causal", f_attn, 3, {4, 4, 4}, {{2, 2, 5, 8}, {2, 2, 5, 8}, {2, 2, 5, 6}}, -2, 2, 0},
        {"attention Tq != Tk, v needs no grad", f_attn_full, 3, {3, 3, 3}, {{2, 5, 8}, {2, 7, 8}, {2, 7, 6}}, -2, 2, 4},
        {"attention q = k = v", f_attn_self, 1, {3}, {{2, 5, 8}}, -2, 2, 0},
    };
    check_cases(cases, sizeof cases / sizeof cases[0]);
}
END_TEST

/* tg_cast's double-backward and tangent rules: a bfloat16 computation
 * inside a float32 function, f(x) = sum(float32(bf16(x)^3)), the cube in
 * the bfloat16 path (cast in, float32 cube, cast out). The rounding counts
 * as the identity, so f' = 3 x^2 and f'' v = 6 x v up to the roundings of
 * bfloat16 (the values x^2 and the gradients stored in bfloat16 on the way:
 * relative 2^-8 each, a few of them: tolerance 2^-5). */
static tg_tensor *cube_bf16(tg_ctx *c, tg_tensor *x) {
    return tg_cast(c, tg_pow_scalar(c, tg_cast(c, x, TG_BF16), 3), TG_F32);
}

START_TEST(test_cast_rules) {
    const double xv[4] = {0.5, -1.25, 2.0, 3.0}, vv[4] = {1.0, -0.5, 0.25, 2.0};
    tg_tensor *x = tg_requires_grad(ctx, tg_test_tensor(ctx, TG_F32, TG_SHAPE(4), xv));
    tg_tensor *v = tg_test_tensor(ctx, TG_F32, TG_SHAPE(4), vv);
    /* Hessian-vector product: reverse over reverse through tg_cast */
    tg_tensor *hv;
    ck_assert_msg(tg_hvp(ctx, tg_sum(ctx, cube_bf16(ctx, x)), 1, &x, &v, &hv), "%s", tg_error_message(ctx));
    double ref[4];
    for (int i = 0; i < 4; i++) ref[i] = 6 * xv[i] * vv[i];
    tg_test_assert_close(ctx, "hvp through bfloat16", hv, ref, 4, 0x1p-5, 0x1p-5);
    /* forward mode: J v = 3 x^2 v */
    tg_tensor *y = cube_bf16(ctx, x);
    tg_tensor *jv = tg_jvp(ctx, y, 1, &x, &v);
    ck_assert_msg(jv && tg_ok(ctx), "%s", tg_error_message(ctx));
    for (int i = 0; i < 4; i++) ref[i] = 3 * xv[i] * xv[i] * vv[i];
    tg_test_assert_close(ctx, "jvp through bfloat16", jv, ref, 4, 0x1p-5, 0x1p-5);
}
END_TEST

/* ---- errors ------------------------------------------------------------------------ */

/* y = 2 x, a custom op (tapegrad/op.h): it has no 16-bit path. */
static tg_tensor *twice_fw(tg_ctx *c, tg_node *node, tg_tensor *const *in, void *user) {
    (void)node, (void)user;
    return tg_mul_scalar(c, in[0], 2.0);
}
static void twice_bw(tg_ctx *c, tg_node *node) {
    tg_node_accumulate(c, node, 0, tg_mul_scalar(c, tg_node_grad_output(node), 2.0));
}
static const tg_op_def TWICE = {.name = "twice", .forward = twice_fw, .backward = twice_bw};

START_TEST(test_errors) {
    tg_tensor *b = tg_ones(ctx, TG_BF16, TG_SHAPE(3, 3)), *h = tg_ones(ctx, TG_F16, TG_SHAPE(3, 3));
    tg_tensor *f = tg_ones(ctx, TG_F32, TG_SHAPE(3, 3)), *d = tg_ones(ctx, TG_F64, TG_SHAPE(3, 3));
    /* mixing: an error naming the op and both dtypes, in either order */
    tg_test_assert_fails(ctx, tg_add(ctx, b, f), TG_ERR_DTYPE, "tg_add", "bfloat16 and float32", NULL);
    tg_test_assert_fails(ctx, tg_mul(ctx, f, h), TG_ERR_DTYPE, "tg_mul", "float16 and float32", NULL);
    tg_test_assert_fails(ctx, tg_matmul(ctx, b, h), TG_ERR_DTYPE, "tg_matmul", "bfloat16 and float16", NULL);
    tg_test_assert_fails(ctx, tg_mse_loss(ctx, d, b), TG_ERR_DTYPE, "tg_mse_loss", "bfloat16 and float64", NULL);
    tg_tensor *bias = tg_ones(ctx, TG_F32, TG_SHAPE(3));
    tg_test_assert_fails(ctx, tg_linear_fused(ctx, b, b, bias), TG_ERR_DTYPE, "tg_linear_fused", "bfloat16 and float32",
                         NULL);
    tg_test_assert_fails(ctx, tg_concat(ctx, 3, (tg_tensor *[]){b, b, f}, 0), TG_ERR_DTYPE, "tg_concat",
                         "xs[0] is bfloat16, xs[2] is float32", NULL);
    tg_test_assert_fails(ctx, tg_attention(ctx, h, h, b, false, 0), TG_ERR_DTYPE, "tg_attention",
                         "float16 and bfloat16", NULL);
    tg_test_assert_fails(ctx, tg_masked_fill(ctx, b, f, 0), TG_ERR_DTYPE, "tg_masked_fill", "bfloat16 and float32",
                         NULL);
    /* the op's own checks still name it on the 16-bit path */
    tg_test_assert_fails(ctx, tg_matmul(ctx, b, tg_ones(ctx, TG_BF16, TG_SHAPE(4, 2))), TG_ERR_SHAPE, "tg_matmul",
                         NULL);
    tg_test_assert_fails(ctx, tg_add(ctx, b, NULL), TG_ERR_NULL, "tg_add", "'b'", NULL);
    tg_test_assert_fails(ctx, tg_sum_axis(ctx, h, 5, false), TG_ERR_SHAPE, "tg_sum_axis", NULL);
    /* an op without a 16-bit path refuses by name */
    tg_test_assert_fails(ctx, tg_op_apply(ctx, &TWICE, 1, &b, NULL), TG_ERR_DTYPE, "twice", "bfloat16 tensor",
                         "has no bfloat16 path", NULL);
    tg_test_assert_fails(ctx, tg_op_apply(ctx, &TWICE, 1, &h, NULL), TG_ERR_DTYPE, "twice", "has no float16 path",
                         NULL);
}
END_TEST

/* ---- end to end: a two-layer MLP in bfloat16 ------------------------------------------ */

/* loss = cross_entropy(W2 act(W1 x + b1) + b2, targets): every input (x, W1,
 * b1, W2, b2) in the dtype of x; the hidden activation is gelu or relu. */
static tg_tensor *mlp(tg_ctx *c, tg_tensor *const *in, void *user) {
    const bool gelu = *(const bool *)user;
    tg_tensor *h = tg_linear_fused(c, in[0], in[1], in[2]);
    h = gelu ? tg_gelu(c, h, true) : tg_relu(c, h);
    return tg_cross_entropy(c, tg_linear_fused(c, h, in[3], in[4]), TARGETS, NULL);
}

START_TEST(test_mlp_bf16) {
    for (int g = 0; g < 2; g++) {
        bool gelu = g;
        tg_tensor *in[5] = {
            tg_test_rand(ctx, TG_F32, TG_SHAPE(5, 12), -2, 2),  tg_test_rand(ctx, TG_F32, TG_SHAPE(16, 12), -0.5, 0.5),
            tg_test_rand(ctx, TG_F32, TG_SHAPE(16), -0.5, 0.5), tg_test_rand(ctx, TG_F32, TG_SHAPE(7, 16), -0.5, 0.5),
            tg_test_rand(ctx, TG_F32, TG_SHAPE(7), -0.5, 0.5),
        };
        /* the whole step in bfloat16: a bfloat16 loss, bfloat16 gradients */
        tg_tensor *x16[5];
        for (int k = 0; k < 5; k++) x16[k] = tg_requires_grad(ctx, tg_to_dtype(ctx, in[k], TG_BF16));
        tg_tensor *loss = mlp(ctx, x16, &gelu);
        ck_assert_msg(loss && loss->dtype == TG_BF16, "%s", tg_error_message(ctx));
        tg_backward(ctx, loss);
        ck_assert_msg(tg_ok(ctx), "%s", tg_error_message(ctx));
        for (int k = 0; k < 5; k++) ck_assert(x16[k]->grad && x16[k]->grad->dtype == TG_BF16);
        /* the gradients against float64's from the same rounded inputs:
         * per element |g_bf16 - g_f64| <= tol (|g_f64| + RMS(g_f64)),
         * tol = 16 eps(bfloat16) = 0.125 (tapegrad/check.h) */
        tg_gradcheck_lowp_result r;
        bool pass = tg_gradcheck_lowp(ctx, mlp, &gelu, 5, in, TG_BF16, 0, &r);
        ck_assert_msg(tg_ok(ctx), "%s", tg_error_message(ctx));
        ck_assert_msg(pass, "%s MLP: max err %g > tol %g at input %d [%lld]: bf16 %g, f64 %g", gelu ? "gelu" : "relu",
                      r.max_err, r.tol, r.worst_input, (long long)r.worst_index, r.worst_lowp, r.worst_f64);
        tg_ctx_reset(ctx);
    }
}
END_TEST

Suite *make_ops_lowp_suite(void) {
    return tg_test_suite("ops_lowp", setup, teardown, test_elementwise, test_activations,
                         test_reductions_softmax_losses, test_cross_entropy_dtype, test_matmul_linear, test_shape_ops,
                         test_native_16_bit_ops_record_once, test_embedding_masking_dropout, test_dropout_identity,
                         test_rope_attention, test_cast_rules, test_errors, test_mlp_bf16, NULL);
}

int main(void) { return tg_test_run(make_ops_lowp_suite()); }

/* The verdicts of tg_gradcheck, each a case that once gave a silent or a
 * wrong one: a tiny gradient 2.8x off passed under an absolute atol; a
 * check of 0 against 0 (a saturated tanh, a step lost in float32's
 * rounding) passed, so an all-zero backward would have too; an all-zero r
 * was taken; a linear op's 2% bug at a large step was called the check's
 * own round-off (its truncation assumed, not measured); a backward that
 * ignores dy was diagnosed as agreeing Jacobians. Each is now wrong,
 * inconclusive or refused as it should be, and a correct or constant
 * function still passes. And forward over reverse, which stopped at the
 * fused norms' double backward, runs through it. */
#include <check.h>
#include <math.h>
#include <string.h>

#include "tapegrad.h"
#include "tapegrad/check.h"
#include "tapegrad/op.h"
#include "testutil.h"

static tg_ctx *ctx;
static void setup(void) { ctx = tg_ctx_new(29); }
static void teardown(void) { tg_ctx_free(ctx); }

/* ---- test-only custom ops: a right forward, a chosen backward ---------------- */

enum { BW_RIGHT = 0, BW_ZERO, BW_TIMES_2_8, BW_IGNORE_DY };

/* y = x^2 / 2 elementwise; dx = x dy (BW_RIGHT), 0, 2.8 x dy, or x alone. */
static tg_tensor *half_square_fw(tg_ctx *c, tg_node *node, tg_tensor *const *in, void *user) {
    tg_node_set_scalar(c, node, 0, *(const int *)user);
    return tg_mul_scalar(c, tg_mul(c, in[0], in[0]), 0.5);
}

static void half_square_bw(tg_ctx *c, tg_node *node) {
    int how = (int)tg_node_scalar(node, 0);
    tg_tensor *x = tg_node_input(node, 0), *dy = tg_node_grad_output(node);
    tg_tensor *dx = how == BW_ZERO        ? tg_mul_scalar(c, x, 0.0)
                    : how == BW_IGNORE_DY ? tg_copy(c, x)
                                          : tg_mul_scalar(c, tg_mul(c, x, dy), how == BW_TIMES_2_8 ? 2.8 : 1.0);
    tg_node_accumulate(c, node, 0, dx);
}

static tg_tensor *f_half_square(tg_ctx *c, tg_tensor *const *in, void *user) {
    static const tg_op_def DEF = {.name = "half_square", .forward = half_square_fw, .backward = half_square_bw};
    return tg_op_apply(c, &DEF, 1, in, user);
}

/* tanh whose backward gives 0 (BW_ZERO) or is right */
static tg_tensor *tanh_fw(tg_ctx *c, tg_node *node, tg_tensor *const *in, void *user) {
    tg_node_set_scalar(c, node, 0, *(const int *)user);
    return tg_tanh(c, in[0]);
}

static void tanh_bw(tg_ctx *c, tg_node *node) {
    tg_tensor *x = tg_node_input(node, 0), *dy = tg_node_grad_output(node), *t = tg_tanh(c, x);
    tg_tensor *d = tg_mul(c, dy, tg_add_scalar(c, tg_mul_scalar(c, tg_mul(c, t, t), -1.0), 1.0));
    tg_node_accumulate(c, node, 0, tg_node_scalar(node, 0) == BW_ZERO ? tg_mul_scalar(c, d, 0.0) : d);
}

static tg_tensor *f_tanh(tg_ctx *c, tg_tensor *const *in, void *user) {
    static const tg_op_def DEF = {.name = "tanh_checked", .forward = tanh_fw, .backward = tanh_bw};
    return tg_op_apply(c, &DEF, 1, in, user);
}

static tg_tensor *f_tanh_builtin(tg_ctx *c, tg_tensor *const *in, void *user) {
    (void)user;
    return tg_tanh(c, in[0]);
}

/* y = x W^T (a linear op, no truncation error); dx off by a factor 1.02,
 * dW right */
static tg_tensor *lin_fw(tg_ctx *c, tg_node *node, tg_tensor *const *in, void *user) {
    (void)node, (void)user;
    return tg_matmul(c, in[0], tg_transpose(c, in[1]));
}

static void lin_bw(tg_ctx *c, tg_node *node) {
    tg_tensor *x = tg_node_input(node, 0), *w = tg_node_input(node, 1), *dy = tg_node_grad_output(node);
    tg_node_accumulate(c, node, 0, tg_mul_scalar(c, tg_matmul(c, dy, w), 1.02));
    tg_node_accumulate(c, node, 1, tg_matmul(c, tg_transpose(c, dy), x));
}

static tg_tensor *f_lin(tg_ctx *c, tg_tensor *const *in, void *user) {
    static const tg_op_def DEF = {.name = "linear_2pc", .forward = lin_fw, .backward = lin_bw};
    return tg_op_apply(c, &DEF, 2, in, user);
}

static tg_tensor *scaled_randn(tg_dtype dt, int64_t n, double scale) {
    tg_tensor *x = tg_randn(ctx, dt, TG_SHAPE(n), 0, 1);
    for (int64_t i = 0; i < n; i++) tg_set_flat(ctx, x, i, scale * tg_get_flat(ctx, x, i));
    return x;
}

/* ---- 1. a tiny gradient ---------------------------------------------------------- */

/* At x ~ 1e-6 the gradient x dy is ~1e-6: an absolute atol of 1e-5 (the
 * float64 default it was) passes a backward 2.8x off; the default now is
 * relative to the gradient's scale and finds it wrong. */
START_TEST(test_tiny_gradient_wrong) {
    int how = BW_TIMES_2_8;
    tg_tensor *x = scaled_randn(TG_F64, 12, 1e-6);
    tg_gradcheck_result r;
    tg_gradcheck_opts o = tg_gradcheck_defaults();
    o.step = TG_GRADCHECK_STEP_ABSOLUTE;
    o.atol_scale = TG_GRADCHECK_ATOL_ABSOLUTE;
    /* with those, every comparison passes (what the old verdict called a
     * pass); a backward giving 0 would too: not a pass now, inconclusive */
    ck_assert(!tg_gradcheck(ctx, f_half_square, &how, 1, &x, &o, &r));
    ck_assert_int_eq(r.n_failed, 0);
    ck_assert_int_eq(r.verdict, TG_VERDICT_INCONCLUSIVE);
    ck_assert_int_eq(r.reason, TG_REASON_ALL_ZERO);
    ck_assert(!tg_gradcheck(ctx, f_half_square, &how, 1, &x, NULL, &r));
    ck_assert(tg_ok(ctx));
    ck_assert_int_eq(r.step, TG_GRADCHECK_STEP_SCALED);
    ck_assert_int_eq(r.atol_scale, TG_GRADCHECK_ATOL_GRADIENT);
    ck_assert_int_eq(r.verdict, TG_VERDICT_WRONG);
    ck_assert_int_eq(r.n_wrong, 12);
    /* the right backward passes at that scale, and at 1e6 */
    how = BW_RIGHT;
    ck_assert(tg_gradcheck(ctx, f_half_square, &how, 1, &x, NULL, &r));
    tg_tensor *big = scaled_randn(TG_F64, 12, 1e6);
    ck_assert(tg_gradcheck(ctx, f_half_square, &how, 1, &big, NULL, &r));
    ck_assert_int_eq(r.verdict, TG_VERDICT_PASS);
    how = BW_TIMES_2_8;
    ck_assert(!tg_gradcheck(ctx, f_half_square, &how, 1, &big, NULL, &r));
    ck_assert_int_eq(r.verdict, TG_VERDICT_WRONG);
}
END_TEST

/* ---- 2. all zero -------------------------------------------------------------------- */

/* tanh at 1e6: tanh' = 0 to the last bit, f(x + h) == f(x - h): the check
 * compares 0 with 0 everywhere and saw nothing, so a backward that gives 0
 * passes as well -- inconclusive for both, never a pass. At a scale where
 * the gradient is not zero, the zero backward is wrong. */
START_TEST(test_all_zero_inconclusive) {
    tg_tensor *x = scaled_randn(TG_F64, 12, 1e6);
    tg_gradcheck_result r;
    for (int how = BW_RIGHT; how <= BW_ZERO; how++) {
        ck_assert(!tg_gradcheck(ctx, f_tanh, &how, 1, &x, NULL, &r));
        ck_assert(tg_ok(ctx));
        ck_assert_int_eq(r.n_failed, 0);
        ck_assert_int_eq(r.verdict, TG_VERDICT_INCONCLUSIVE);
        ck_assert_int_eq(r.reason, TG_REASON_ALL_ZERO);
        ck_assert_int_eq(r.input[0].n_resolved, 0);
        ck_assert(!r.input[0].constant); /* tanh does change, at steps of its own size */
        ck_assert(!r.pass && !r.input[0].pass);
    }
    /* the same in directional and Jacobian mode, and in forward mode */
    int how = BW_RIGHT;
    tg_gradcheck_opts o = tg_gradcheck_defaults();
    o.mode = TG_GRADCHECK_DIRECTIONAL;
    ck_assert(!tg_gradcheck(ctx, f_tanh, &how, 1, &x, &o, &r));
    ck_assert_int_eq(r.reason, TG_REASON_ALL_ZERO);
    o.mode = TG_GRADCHECK_JACOBIAN;
    ck_assert(!tg_gradcheck(ctx, f_tanh, &how, 1, &x, &o, &r));
    ck_assert_int_eq(r.reason, TG_REASON_ALL_ZERO);
    ck_assert(!tg_gradcheck_fwd(ctx, f_tanh_builtin, NULL, 1, &x, NULL, &r));
    ck_assert(tg_ok(ctx));
    ck_assert_int_eq(r.reason, TG_REASON_ALL_ZERO);
    ck_assert(!tg_gradcheck_adjoint(ctx, f_tanh_builtin, NULL, 1, &x, NULL, &r));
    ck_assert_int_eq(r.reason, TG_REASON_ALL_ZERO);
    /* where the gradient is not zero: the zero backward is wrong */
    tg_tensor *x1 = scaled_randn(TG_F64, 12, 1.0);
    how = BW_ZERO;
    ck_assert(!tg_gradcheck(ctx, f_tanh, &how, 1, &x1, NULL, &r));
    ck_assert_int_eq(r.verdict, TG_VERDICT_WRONG);
    how = BW_RIGHT;
    ck_assert(tg_gradcheck(ctx, f_tanh, &how, 1, &x1, NULL, &r));
    ck_assert_int_eq(r.verdict, TG_VERDICT_PASS);
}
END_TEST

/* An output that does not depend on the input at all (x * 0): the zero
 * gradient is exact, the check confirms it -- a pass, marked constant. */
static tg_tensor *f_times_zero(tg_ctx *c, tg_tensor *const *in, void *u) {
    (void)u;
    return tg_mul_scalar(c, in[0], 0.0);
}

START_TEST(test_constant_passes) {
    tg_tensor *x = scaled_randn(TG_F64, 6, 1.0);
    tg_gradcheck_result r;
    ck_assert(tg_gradcheck(ctx, f_times_zero, NULL, 1, &x, NULL, &r));
    ck_assert_int_eq(r.verdict, TG_VERDICT_PASS);
    ck_assert(r.input[0].constant);
    ck_assert_int_eq(r.input[0].n_resolved, 0);
}
END_TEST

/* ---- 3. a zero r ---------------------------------------------------------------------- */

START_TEST(test_zero_r_refused) {
    int how = BW_RIGHT;
    tg_tensor *x = scaled_randn(TG_F64, 4, 1.0);
    double zero[4] = {0, 0, 0, 0}, bad[4] = {1, NAN, 0, 0};
    tg_gradcheck_result r;
    tg_gradcheck_opts o = tg_gradcheck_defaults();
    o.r = (tg_gradcheck_vec){zero, 4};
    ck_assert(!tg_gradcheck(ctx, f_half_square, &how, 1, &x, &o, &r));
    tg_test_assert_error(ctx, TG_ERR_VALUE, "opts.r is zero or not finite", NULL);
    ck_assert_int_eq(r.verdict, TG_VERDICT_INCONCLUSIVE);
    ck_assert_int_eq(r.reason, TG_REASON_ERROR);
    o.r = (tg_gradcheck_vec){bad, 4};
    ck_assert(!tg_gradcheck(ctx, f_half_square, &how, 1, &x, &o, &r));
    tg_test_assert_error(ctx, TG_ERR_VALUE, "opts.r is zero or not finite", NULL);
    o.r = (tg_gradcheck_vec){zero, 4};
    ck_assert(!tg_gradcheck_adjoint(ctx, f_half_square, &how, 1, &x, &o, &r));
    tg_test_assert_error(ctx, TG_ERR_VALUE, "opts.r is zero", NULL);
}
END_TEST

/* ---- 4. an error decides nothing --------------------------------------------------------- */

/* half_square has no double-backward rule: gradgradcheck stops on the
 * error -- inconclusive, nothing counted as failed. */
START_TEST(test_order2_error_inconclusive) {
    int how = BW_RIGHT;
    tg_tensor *x = scaled_randn(TG_F64, 4, 1.0);
    tg_gradcheck_result r;
    ck_assert(!tg_gradgradcheck(ctx, f_half_square, &how, 1, &x, NULL, &r));
    tg_test_assert_error(ctx, TG_ERR_STATE, "cannot be differentiated twice", NULL);
    ck_assert_int_eq(r.n_failed, 0);
    ck_assert_int_eq(r.verdict, TG_VERDICT_INCONCLUSIVE);
    ck_assert_int_eq(r.reason, TG_REASON_ERROR);
}
END_TEST

/* ---- 5. a step lost in float32's rounding -------------------------------------------------- */

/* sigmoid in float32 at x ~ 1e-6: sigmoid(x +- h) rounds to the same
 * float (~0.5 + x / 4, spacing 6e-8), so the numeric side is 0 against an
 * analytic 0.25: undecided, not a wrong backward. */
static tg_tensor *f_sigmoid(tg_ctx *c, tg_tensor *const *in, void *u) {
    (void)u;
    return tg_sigmoid(c, in[0]);
}

START_TEST(test_f32_step_lost_inconclusive) {
    tg_tensor *x = scaled_randn(TG_F32, 12, 1e-6);
    tg_gradcheck_result r;
    tg_gradcheck_opts o = tg_gradcheck_defaults();
    o.allow_float32 = true;
    ck_assert(!tg_gradcheck(ctx, f_sigmoid, NULL, 1, &x, &o, &r));
    ck_assert(tg_ok(ctx));
    ck_assert(r.n_failed > 0);
    ck_assert_int_eq(r.n_wrong, 0);
    ck_assert_int_eq(r.verdict, TG_VERDICT_INCONCLUSIVE);
    ck_assert_int_eq(r.reason, TG_REASON_UNRESOLVED);
    ck_assert(r.worst_numeric == 0);
    ck_assert(r.fail_excess <= TG_GRADCHECK_WRONG_EXCESS);
}
END_TEST

/* ---- 7. a linear op's small bug at a large step ------------------------------------------------ */

/* y = x W^T has no truncation error: at h = 0.1 (linear's float32 step)
 * the a priori truncation 3 (h / l)^2 G = 0.03 G hid a 2% bug as the
 * check's own error. Measured, the truncation is zero and the prediction
 * is rounding: every seed finds the bug wrong, dW passes. */
START_TEST(test_linear_bug_at_large_step) {
    int wrong = 0;
    for (uint64_t seed = 0; seed < 20; seed++) {
        tg_rng_seed(ctx, seed);
        tg_tensor *in[2] = {tg_randn(ctx, TG_F32, TG_SHAPE(4, 3), 0, 1), tg_randn(ctx, TG_F32, TG_SHAPE(5, 3), 0, 1)};
        tg_gradcheck_result r;
        tg_gradcheck_opts o = tg_gradcheck_defaults();
        o.allow_float32 = true;
        o.h = 0.1;
        o.seed = seed;
        ck_assert(!tg_gradcheck(ctx, f_lin, NULL, 2, in, &o, &r));
        ck_assert(tg_ok(ctx));
        wrong += r.input[0].verdict == TG_VERDICT_WRONG;
        ck_assert_int_eq(r.input[1].verdict, TG_VERDICT_PASS);
        /* the prediction knows a linear op: far below the a priori 0.03 G */
        ck_assert_msg(r.input[1].pred_max < 1e-3 * r.input[1].grad_scale, "dW predicted %g, G %g", r.input[1].pred_max,
                      r.input[1].grad_scale);
        tg_ctx_reset(ctx);
    }
    ck_assert_int_eq(wrong, 20);
}
END_TEST

/* ---- 8. a backward that ignores dy -------------------------------------------------------------- */

/* dx = x whatever dy (J^T 1 for y = x^2 / 2): the check fails it, and the
 * diagnosis names it -- the Jacobian read from unit dy would not show what
 * the check's random r does. */
START_TEST(test_diagnose_ignores_dy) {
    int how = BW_IGNORE_DY;
    tg_tensor *x = scaled_randn(TG_F64, 6, 1.0);
    tg_gradcheck_result r;
    ck_assert(!tg_gradcheck(ctx, f_half_square, &how, 1, &x, NULL, &r));
    ck_assert_int_eq(r.verdict, TG_VERDICT_WRONG);
    tg_gradcheck_diagnosis d;
    ck_assert(tg_gradcheck_diagnose(ctx, f_half_square, &how, 1, &x, 0, NULL, &d));
    ck_assert_msg(d.kind == TG_DIAG_IGNORES_DY, "diagnosed %s: %s", tg_diagnosis_name(d.kind), d.finding);
    ck_assert_str_eq(tg_diagnosis_name(d.kind), "ignores-dy");
    tg_test_assert_contains(d.finding, "does not change when dy is doubled", "J^T 1", NULL);
    tg_test_assert_contains(d.cause, "ignores the incoming gradient", NULL);
    /* the right backward: linear in dy, nothing to diagnose */
    how = BW_RIGHT;
    ck_assert(tg_gradcheck_diagnose(ctx, f_half_square, &how, 1, &x, 0, NULL, &d));
    ck_assert_int_eq(d.kind, TG_DIAG_NONE);
}
END_TEST

/* ---- forward over reverse --------------------------------------------------------------- */

/* tg_jvp of a gradient made with create_graph runs through the records the
 * double backward makes -- the fused norms' rmsnorm_backward and
 * layernorm_backward, exact GELU's gelu_cdf -- which have tangent rules:
 * H v against differences of the gradient, and <w, H v> against
 * reverse over reverse, pass for every variant. */
START_TEST(test_forward_over_reverse) {
    const char *const OPS[] = {"rmsnorm", "layernorm", "gelu", "rmsnorm_composed", "linear"};
    for (size_t k = 0; k < sizeof OPS / sizeof OPS[0]; k++) {
        const tg_op_info *op = tg_registry_find(OPS[k]);
        ck_assert_ptr_nonnull(op);
        for (int v = 0; v < op->n_variants; v++) {
            tg_op_case c;
            ck_assert(tg_registry_build(ctx, op, op->variants[v], TG_F64, &c));
            tg_gradcheck_opts o = tg_registry_opts(op, TG_F64, NULL);
            o.inputs = c.check;
            o.scale = c.scale;
            tg_gradcheck_result r;
            bool fwd = tg_gradgradcheck_fwd(ctx, op->forward, &c, c.n_inputs, c.inputs, &o, &r);
            ck_assert_msg(tg_ok(ctx), "%s '%s' fwd over rev: %s", op->def->name, op->variants[v],
                          tg_error_message(ctx));
            ck_assert_msg(fwd || r.verdict != TG_VERDICT_WRONG, "%s '%s': H v wrong (input %d output %lld)",
                          op->def->name, op->variants[v], r.worst_input, (long long)r.worst_output);
            bool adj = tg_gradgradcheck_adjoint(ctx, op->forward, &c, c.n_inputs, c.inputs, &o, &r);
            ck_assert_msg(tg_ok(ctx), "%s '%s' adjoint: %s", op->def->name, op->variants[v], tg_error_message(ctx));
            ck_assert_msg(adj || r.verdict != TG_VERDICT_WRONG, "%s '%s': <w, H v> != <H^T w, v>", op->def->name,
                          op->variants[v]);
            tg_ctx_reset(ctx);
        }
    }
}
END_TEST

Suite *make_gradcheck_verdict_suite(void) {
    return tg_test_suite("gradcheck_verdict", setup, teardown, test_tiny_gradient_wrong, test_all_zero_inconclusive,
                         test_constant_passes, test_zero_r_refused, test_order2_error_inconclusive,
                         test_f32_step_lost_inconclusive, test_linear_bug_at_large_step, test_diagnose_ignores_dy,
                         test_forward_over_reverse, NULL);
}

int main(void) { return tg_test_run(make_gradcheck_verdict_suite()); }

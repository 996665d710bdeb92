/* Forward mode: tg_jvp against known derivatives, its errors, custom ops'
 * tangent rules, and -- over the whole registry in float64 -- the JVP
 * against finite differences (tg_gradcheck_fwd) and the adjoint test
 * <u, J v> = <J^T u, v> of forward against reverse mode
 * (tg_gradcheck_adjoint), which also catches a backward off by 1e-6 that
 * tg_gradcheck passes. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tapegrad.h"
#include "tapegrad/check.h"
#include "tapegrad/op.h"
#include "testutil.h"

static tg_ctx *ctx;
static void setup(void) { ctx = tg_ctx_new(99); }
static void teardown(void) { tg_ctx_free(ctx); }

/* ---- tg_jvp on known derivatives ------------------------------------------------ */

/* y = sum(x * x * w) with w constant: J v = sum(2 x w v); and the tape is
 * left for a backward, which gives 2 x w. */
START_TEST(test_jvp_known) {
    const int64_t s3[] = {3};
    tg_tensor *x = tg_requires_grad(ctx, tg_test_tensor(ctx, TG_F64, 1, s3, (double[]){1, -2, 3}));
    tg_tensor *w = tg_test_tensor(ctx, TG_F64, 1, s3, (double[]){0.5, 2, -1});
    tg_tensor *v = tg_test_tensor(ctx, TG_F64, 1, s3, (double[]){1, 1, 2});
    tg_tensor *y = tg_sum(ctx, tg_mul(ctx, tg_mul(ctx, x, x), w));
    tg_tensor *jv = tg_jvp(ctx, y, 1, &x, &v);
    ck_assert_msg(tg_ok(ctx), "%s", tg_error_message(ctx));
    ck_assert_int_eq(jv->ndim, 0);
    /* 2 (1 0.5 1 + -2 2 1 + 3 -1 2) = 2 (0.5 - 4 - 6) = -19 */
    ck_assert_double_eq_tol(tg_get_flat(ctx, jv, 0), -19.0, 1e-15);
    tg_backward(ctx, y);
    tg_test_assert_close(ctx, "dy/dx after tg_jvp", x->grad, (double[]){1, -8, -6}, 3, 1e-15, 0);
}
END_TEST

/* Two inputs: J v sums both directions; an input's tangent of zeros and a
 * leaf output. */
START_TEST(test_jvp_two_inputs) {
    const int64_t s22[] = {2, 2};
    tg_tensor *a = tg_requires_grad(ctx, tg_test_tensor(ctx, TG_F64, 2, s22, (double[]){1, 2, 3, 4}));
    tg_tensor *b = tg_requires_grad(ctx, tg_test_tensor(ctx, TG_F64, 2, s22, (double[]){0, 1, -1, 2}));
    tg_tensor *ta = tg_test_tensor(ctx, TG_F64, 2, s22, (double[]){1, 0, 0, 1});
    tg_tensor *tb = tg_test_tensor(ctx, TG_F64, 2, s22, (double[]){0, 0, 1, 0});
    tg_tensor *c = tg_matmul(ctx, a, b);
    tg_tensor *in[2] = {a, b}, *tan[2] = {ta, tb};
    tg_tensor *jv = tg_jvp(ctx, c, 2, in, tan);
    ck_assert_msg(tg_ok(ctx), "%s", tg_error_message(ctx));
    /* ta b + a tb = [[0,1],[-1,2]] + [[2,0],[4,0]] */
    tg_test_assert_close(ctx, "J v of a b", jv, (double[]){2, 1, 3, 2}, 4, 1e-15, 0);
    tg_tensor *ja = tg_jvp(ctx, a, 2, in, tan);
    tg_test_assert_close(ctx, "a leaf", ja, (double[]){1, 0, 0, 1}, 4, 0, 0);
    /* the max over a 0-d tensor is the tensor: its tangent too */
    tg_tensor *s = tg_requires_grad(ctx, tg_test_tensor(ctx, TG_F64, 0, NULL, (double[]){2.5}));
    tg_tensor *ts = tg_test_tensor(ctx, TG_F64, 0, NULL, (double[]){-3});
    tg_tensor *js = tg_jvp(ctx, tg_max_axis(ctx, s, 0, false), 1, &s, &ts);
    tg_test_assert_close(ctx, "max of a 0-d tensor", js, (double[]){-3}, 1, 0, 0);
}
END_TEST

/* The errors: an input that does not require grad, a tangent of another
 * shape, a consumed tape. */
START_TEST(test_jvp_errors) {
    const int64_t s2[] = {2}, s3[] = {3};
    tg_tensor *x = tg_test_tensor(ctx, TG_F64, 1, s2, (double[]){1, 2});
    tg_tensor *v = tg_test_tensor(ctx, TG_F64, 1, s2, (double[]){1, 1});
    tg_tensor *y = tg_exp(ctx, x);
    tg_test_assert_fails(ctx, tg_jvp(ctx, y, 1, &x, &v), TG_ERR_STATE, "tg_jvp", "does not require grad", NULL);
    tg_requires_grad(ctx, x);
    y = tg_sum(ctx, tg_exp(ctx, x));
    tg_tensor *v3 = tg_test_tensor(ctx, TG_F64, 1, s3, (double[]){1, 1, 1});
    tg_test_assert_fails(ctx, tg_jvp(ctx, y, 1, &x, &v3), TG_ERR_SHAPE, "tg_jvp", "tangents[0]", "(3,)", "(2,)", NULL);
    /* x written in place after the forward: the record's values are gone */
    tg_fill(ctx, x, 100.0);
    tg_test_assert_fails(ctx, tg_jvp(ctx, y, 1, &x, &v), TG_ERR_STATE, "tg_jvp", "modified in place", "'exp'", NULL);
    y = tg_sum(ctx, tg_exp(ctx, x));
    tg_backward(ctx, y);
    tg_test_assert_fails(ctx, tg_jvp(ctx, y, 1, &x, &v), TG_ERR_STATE, "tg_jvp", "keep_tape", NULL);
}
END_TEST

/* ---- custom ops ------------------------------------------------------------------ */

/* y = x^3 (a custom op). Backward: dx += 3 x^2 dy; tangent: 3 x^2 t. */
static tg_tensor *cube_fw(tg_ctx *c, tg_node *node, tg_tensor *const *in, void *user) {
    (void)user;
    tg_node_save_tensor(c, node, in[0]);
    return tg_mul(c, tg_mul(c, in[0], in[0]), in[0]);
}
static void cube_bw(tg_ctx *c, tg_node *node) {
    tg_tensor *x = tg_node_saved_tensor(node, 0);
    tg_node_accumulate(c, node, 0, tg_mul(c, tg_node_grad_output(node), tg_mul_scalar(c, tg_mul(c, x, x), 3.0)));
}
static tg_tensor *cube_jvp(tg_ctx *c, tg_node *node, tg_tensor *const *t) {
    tg_tensor *x = tg_node_input(node, 0);
    return tg_mul(c, t[0], tg_mul_scalar(c, tg_mul(c, x, x), 3.0));
}
static const tg_op_def CUBE = {.name = "cube_jvp_test", .forward = cube_fw, .backward = cube_bw, .jvp = cube_jvp};
/* the same op without a tangent rule */
static const tg_op_def CUBE_NO_JVP = {.name = "cube_jvp_test", .forward = cube_fw, .backward = cube_bw};

/* The same op with a backward off by a relative 1e-6: dx += 3 (1 + 1e-6) x^2 dy. */
static void cube_bw_bug(tg_ctx *c, tg_node *node) {
    tg_tensor *x = tg_node_saved_tensor(node, 0);
    tg_node_accumulate(c, node, 0,
                       tg_mul(c, tg_node_grad_output(node), tg_mul_scalar(c, tg_mul(c, x, x), 3.0 * (1 + 1e-6))));
}
static const tg_op_def CUBE_BUG = {
    .name = "cube_jvp_test_bug", .forward = cube_fw, .backward = cube_bw_bug, .jvp = cube_jvp};

static tg_tensor *cube_fn(tg_ctx *c, tg_tensor *const *in, void *user) { return tg_op_apply(c, user, 1, in, NULL); }

START_TEST(test_custom_op_rule) {
    const int64_t s3[] = {3};
    tg_tensor *x = tg_requires_grad(ctx, tg_test_tensor(ctx, TG_F64, 1, s3, (double[]){1, -2, 0.5}));
    tg_tensor *v = tg_test_tensor(ctx, TG_F64, 1, s3, (double[]){1, 2, 4});
    /* no rule: a clear error naming the op */
    tg_tensor *y = tg_op_apply(ctx, &CUBE_NO_JVP, 1, &x, NULL);
    tg_test_assert_fails(ctx, tg_jvp(ctx, y, 1, &x, &v), TG_ERR_STATE, "tg_jvp", "'cube_jvp_test'", "no tangent rule",
                         "no jvp", NULL);
    /* the descriptor's rule (on a tape of its own) */
    tg_tensor *x2 = tg_requires_grad(ctx, tg_copy(ctx, tg_detach(ctx, x)));
    y = tg_op_apply(ctx, &CUBE, 1, &x2, NULL);
    x = x2;
    tg_tensor *jv = tg_jvp(ctx, y, 1, &x, &v);
    ck_assert_msg(tg_ok(ctx), "%s", tg_error_message(ctx));
    tg_test_assert_close(ctx, "3 x^2 v", jv, (double[]){3, 24, 3}, 3, 1e-15, 0);
}
END_TEST

/* A custom op named "add" that is not the built-in: y = 2 a + b. Rules
 * come with the record's descriptor, never by name: without a jvp of its
 * own it has none (the built-in add's, a + b, would be a silent wrong
 * answer), with one it takes that, and tg_add keeps its own. */
static tg_tensor *add2_fw(tg_ctx *c, tg_node *node, tg_tensor *const *in, void *user) {
    (void)node, (void)user;
    return tg_add(c, tg_mul_scalar(c, in[0], 2.0), in[1]);
}
static void add2_bw(tg_ctx *c, tg_node *node) {
    tg_tensor *dy = tg_node_grad_output(node);
    tg_node_accumulate(c, node, 0, tg_mul_scalar(c, dy, 2.0));
    tg_node_accumulate(c, node, 1, dy);
}
static tg_tensor *add2_jvp(tg_ctx *c, tg_node *node, tg_tensor *const *t) {
    (void)node;
    return tg_add(c, tg_mul_scalar(c, t[0], 2.0), t[1]);
}
static const tg_op_def ADD2 = {.name = "add", .forward = add2_fw, .backward = add2_bw, .jvp = add2_jvp};
static const tg_op_def ADD2_NO_JVP = {.name = "add", .forward = add2_fw, .backward = add2_bw};
static tg_tensor *add2_fn(tg_ctx *c, tg_tensor *const *in, void *user) {
    (void)user;
    return tg_op_apply(c, &ADD2, 2, in, NULL);
}

START_TEST(test_custom_op_named_like_builtin) {
    const int64_t s3[] = {3};
    tg_tensor *a = tg_requires_grad(ctx, tg_test_tensor(ctx, TG_F64, 1, s3, (double[]){1, 2, 3}));
    tg_tensor *b = tg_requires_grad(ctx, tg_test_tensor(ctx, TG_F64, 1, s3, (double[]){-1, 0, 1}));
    tg_tensor *ta = tg_test_tensor(ctx, TG_F64, 1, s3, (double[]){1, 0, -2});
    tg_tensor *tb = tg_test_tensor(ctx, TG_F64, 1, s3, (double[]){0.5, 1, 0});
    tg_tensor *in[2] = {a, b}, *tan[2] = {ta, tb};
    tg_tensor *y = tg_op_apply(ctx, &ADD2_NO_JVP, 2, in, NULL);
    ck_assert_msg(tg_ok(ctx), "%s", tg_error_message(ctx));
    tg_test_assert_fails(ctx, tg_jvp(ctx, y, 2, in, tan), TG_ERR_STATE, "tg_jvp", "op 'add' has no tangent rule", NULL);
    /* with its own rule, on a tape of its own */
    for (int k = 0; k < 2; k++) in[k] = tg_requires_grad(ctx, tg_copy(ctx, tg_detach(ctx, in[k])));
    a = in[0], b = in[1];
    y = tg_op_apply(ctx, &ADD2, 2, in, NULL);
    tg_tensor *jv = tg_jvp(ctx, y, 2, in, tan);
    ck_assert_msg(tg_ok(ctx), "%s", tg_error_message(ctx));
    tg_test_assert_close(ctx, "2 t_a + t_b (the custom op's rule)", jv, (double[]){2.5, 1, -4}, 3, 0, 0);
    tg_tensor *z = tg_add(ctx, a, b);
    tg_tensor *jz = tg_jvp(ctx, z, 2, in, tan);
    ck_assert_msg(tg_ok(ctx), "%s", tg_error_message(ctx));
    tg_test_assert_close(ctx, "t_a + t_b (tg_add's rule, unchanged)", jz, (double[]){1.5, 1, -2}, 3, 0, 0);
    /* and the adjoint test of each against its own backward */
    tg_gradcheck_result r;
    ck_assert(tg_gradcheck_adjoint(ctx, add2_fn, NULL, 2, in, NULL, &r));
    ck_assert_msg(tg_ok(ctx), "%s", tg_error_message(ctx));
}
END_TEST

/* A backward off by a relative 1e-6 passes tg_gradcheck in float64 (rtol
 * 1e-3) and fails the adjoint test; the right one passes both. */
START_TEST(test_adjoint_catches_small_bug) {
    const int64_t s5[] = {5};
    tg_tensor *x = tg_test_tensor(ctx, TG_F64, 1, s5, (double[]){0.3, -1.2, 2.0, 0.7, -0.4});
    tg_gradcheck_result r;
    ck_assert(tg_gradcheck(ctx, cube_fn, (void *)&CUBE_BUG, 1, &x, NULL, &r));
    ck_assert(tg_gradcheck_fwd(ctx, cube_fn, (void *)&CUBE_BUG, 1, &x, NULL, &r)); /* the forward is right */
    ck_assert(!tg_gradcheck_adjoint(ctx, cube_fn, (void *)&CUBE_BUG, 1, &x, NULL, &r));
    ck_assert_msg(tg_ok(ctx), "%s", tg_error_message(ctx));
    ck_assert_int_eq(r.n_failed, 1);
    /* off by ~1e-6 relative, the tolerance ~1e-14 relative */
    double rel = fabs(r.worst_analytic - r.worst_numeric) / fabs(r.worst_numeric);
    ck_assert_msg(rel > 5e-7 && rel < 2e-6, "relative difference %g", rel);
    ck_assert(r.input[0].atol_used < 1e-12 * fabs(r.worst_numeric) + 1e-300);
    ck_assert(tg_gradcheck_adjoint(ctx, cube_fn, (void *)&CUBE, 1, &x, NULL, &r));
}
END_TEST

/* ---- the registry ------------------------------------------------------------ */

static double worst_adjoint_ratio;

/* Every variant of op _i in float64: the JVP against finite differences
 * and the adjoint test, over every differentiable input, at two seeds. */
START_TEST(test_every_op_fwd_and_adjoint_f64) {
    const tg_op_info *op = tg_registry_get(_i);
    for (int v = 0; v < op->n_variants; v++) {
        const char *spec = op->variants[v];
        for (uint64_t seed = 1; seed <= 2; seed++) {
            tg_op_case c;
            ck_assert_msg(tg_registry_build(ctx, op, spec, TG_F64, &c), "%s '%s': %s", op->def->name, spec,
                          tg_error_message(ctx));
            tg_gradcheck_opts o = {0};
            o.seed = seed;
            o = tg_registry_opts(op, TG_F64, &o);
            o.inputs = c.check;
            tg_gradcheck_result r;
            /* an empty output (a slice of nothing) has nothing to compare */
            const tg_tensor *y = tg_registry_forward(ctx, &c);
            bool pass = tg_gradcheck_fwd(ctx, op->forward, &c, c.n_inputs, c.inputs, &o, &r);
            ck_assert_msg(tg_ok(ctx), "%s '%s' fwd: %s", op->def->name, spec, tg_error_message(ctx));
            ck_assert_msg(pass && (r.n_checked > 0 || y->numel == 0),
                          "%s '%s' fwd: %lld of %lld fail; worst input %d output %lld: jvp %.12g fd %.12g",
                          op->def->name, spec, (long long)r.n_failed, (long long)r.n_checked, r.worst_input,
                          (long long)r.worst_output, r.worst_analytic, r.worst_numeric);
            pass = tg_gradcheck_adjoint(ctx, op->forward, &c, c.n_inputs, c.inputs, &o, &r);
            ck_assert_msg(tg_ok(ctx), "%s '%s' adjoint: %s", op->def->name, spec, tg_error_message(ctx));
            ck_assert_msg(pass && r.n_checked > 0, "%s '%s' adjoint: input %d <u,Jv> %.17g <J^T u,v> %.17g ratio %g",
                          op->def->name, spec, r.worst_input, r.worst_analytic, r.worst_numeric, r.worst_ratio);
            if (r.worst_ratio > worst_adjoint_ratio) worst_adjoint_ratio = r.worst_ratio;
            tg_ctx_reset(ctx);
        }
    }
    if (getenv("TG_JVP_VERBOSE"))
        printf("%s: worst adjoint |fwd - rev| / tol so far %.3g\n", op->def->name, worst_adjoint_ratio);
}
END_TEST

/* float32: the JVP against finite differences with the float32 defaults,
 * and the adjoint test with float32's epsilon, for every op's first
 * variant. */
START_TEST(test_every_op_f32) {
    const tg_op_info *op = tg_registry_get(_i);
    tg_op_case c;
    ck_assert(tg_registry_build(ctx, op, op->variants[0], TG_F32, &c));
    tg_gradcheck_opts o = {0};
    o.seed = 3;
    o = tg_registry_opts(op, TG_F32, &o);
    o.inputs = c.check;
    o.allow_float32 = true;
    tg_gradcheck_result r;
    bool pass = tg_gradcheck_fwd(ctx, op->forward, &c, c.n_inputs, c.inputs, &o, &r);
    ck_assert_msg(pass, "%s f32 fwd: %s; worst jvp %.8g fd %.8g", op->def->name, tg_error_message(ctx),
                  r.worst_analytic, r.worst_numeric);
    pass = tg_gradcheck_adjoint(ctx, op->forward, &c, c.n_inputs, c.inputs, &o, &r);
    ck_assert_msg(pass, "%s f32 adjoint: %s; %.9g vs %.9g ratio %g", op->def->name, tg_error_message(ctx),
                  r.worst_analytic, r.worst_numeric, r.worst_ratio);
}
END_TEST

Suite *make_jvp_suite(void) {
    Suite *s = suite_create("jvp");
    TCase *tc = tcase_create("jvp");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 600); /* the registry loops */
    tcase_add_test(tc, test_jvp_known);
    tcase_add_test(tc, test_jvp_two_inputs);
    tcase_add_test(tc, test_jvp_errors);
    tcase_add_test(tc, test_custom_op_rule);
    tcase_add_test(tc, test_custom_op_named_like_builtin);
    tcase_add_test(tc, test_adjoint_catches_small_bug);
    tcase_add_loop_test(tc, test_every_op_fwd_and_adjoint_f64, 0, tg_registry_count());
    tcase_add_loop_test(tc, test_every_op_f32, 0, tg_registry_count());
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tg_test_run(make_jvp_suite()); }

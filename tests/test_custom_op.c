/* User-defined ops through the public API of tapegrad/op.h only (no
 * internal header): gradient check, no-grad mode, keep_tape, accumulation
 * of an input used twice, in-place checks of saved tensors, saved-byte
 * accounting, and the errors a learner's op can make -- each naming the
 * op: a gradient of the wrong shape, an error left set by the backward
 * (its own or a tapegrad call's), a saved tensor written in place, a
 * forward returning its input, and a backward writing past the end of
 * its gradient through the raw pointer (caught by the guard after it). */
#include <string.h>

#include "tapegrad.h"
#include "tapegrad/check.h"
#include "testutil.h"

static tg_ctx *ctx;
static void setup(void) { ctx = tg_ctx_new(3); }
static void teardown(void) { tg_ctx_free(ctx); }

/* y = s x^2 with the scalar s from user. Backward, with tapegrad ops (grad
 * mode is off there): dx = 2 s x dy. */
static tg_tensor *sq_forward(tg_ctx *c, tg_node *node, tg_tensor *const *in, void *user) {
    double s = user ? *(double *)user : 1.0;
    tg_node_save_tensor(c, node, in[0]);
    tg_node_set_scalar(c, node, 0, s);
    return tg_mul_scalar(c, tg_mul(c, in[0], in[0]), s);
}
static void sq_backward(tg_ctx *c, tg_node *node) {
    tg_tensor *x = tg_node_saved_tensor(node, 0);
    double s = tg_node_scalar(node, 0);
    tg_node_accumulate(c, node, 0, tg_mul_scalar(c, tg_mul(c, x, tg_node_grad_output(node)), 2.0 * s));
}
static const tg_op_def SQ = {.name = "scaled_square", .forward = sq_forward, .backward = sq_backward};

static tg_tensor *sq_fn(tg_ctx *c, tg_tensor *const *in, void *user) { return tg_op_apply(c, &SQ, 1, in, user); }

START_TEST(test_gradcheck_and_values) {
    double s = 1.5;
    tg_tensor *x = tg_requires_grad(ctx, tg_randn(ctx, TG_F64, TG_SHAPE(3, 4), 0, 1));
    tg_test_op_gradcheck(ctx, "scaled_square", sq_fn, &s, 1, &x);
    tg_tensor *y = sq_fn(ctx, &x, &s);
    ck_assert_int_eq(tg_tape_size(ctx), 1);
    for (int64_t i = 0; i < 12; i++) {
        double xi = tg_get_flat(ctx, x, i);
        ck_assert_double_eq_tol(tg_get_flat(ctx, y, i), 1.5 * xi * xi, 1e-15);
    }
    /* an input kept by pointer is not counted as saved bytes */
    ck_assert_uint_eq(tg_tape_saved_bytes(ctx), 0);
}
END_TEST

START_TEST(test_no_grad_and_no_input_needing_grad) {
    tg_tensor *x = tg_randn(ctx, TG_F64, TG_SHAPE(4), 0, 1);
    tg_tensor *y = sq_fn(ctx, &x, NULL);
    ck_assert_ptr_nonnull(y);
    ck_assert(!y->requires_grad);
    ck_assert_int_eq(tg_tape_size(ctx), 0);
    tg_requires_grad(ctx, x);
    bool was = tg_set_grad_enabled(ctx, false);
    y = sq_fn(ctx, &x, NULL);
    tg_set_grad_enabled(ctx, was);
    ck_assert(!y->requires_grad);
    ck_assert_int_eq(tg_tape_size(ctx), 0);
    ck_assert(tg_ok(ctx));
}
END_TEST

/* x used twice: both contributions reach x's grad (accumulate, never
 * overwrite); keep_tape runs the op's backward again and adds once more. */
START_TEST(test_accumulate_and_keep_tape) {
    tg_tensor *x = tg_requires_grad(ctx, tg_from_buffer(ctx, TG_F64, TG_SHAPE(3), (double[]){1, -2, 0.5}));
    tg_tensor *loss = tg_sum(ctx, tg_add(ctx, sq_fn(ctx, &x, NULL), tg_mul(ctx, sq_fn(ctx, &x, NULL), x)));
    /* loss = sum(x^2 + x^3): dloss/dx = 2x + 3x^2 */
    tg_backward_ex(ctx, loss, NULL, true);
    const double x0[3] = {1, -2, 0.5};
    double want[3];
    for (int i = 0; i < 3; i++) want[i] = 2 * x0[i] + 3 * x0[i] * x0[i];
    tg_test_assert_close(ctx, "dx", x->grad, want, 3, 1e-14, 0);
    tg_backward(ctx, loss);
    for (int i = 0; i < 3; i++) want[i] *= 2;
    tg_test_assert_close(ctx, "dx after a second backward", x->grad, want, 3, 1e-14, 0);
    tg_backward(ctx, loss);
    tg_test_assert_error(ctx, TG_ERR_STATE, "already consumed", NULL);
}
END_TEST

/* y = x * w with w a tensor the forward saves (not an input: a constant
 * of the op). Writing w in place after the op ran must stop backward. */
static tg_tensor *scale_forward(tg_ctx *c, tg_node *node, tg_tensor *const *in, void *user) {
    tg_tensor *w = user;
    tg_node_save_tensor(c, node, w);
    return tg_mul(c, in[0], w);
}
static void scale_backward(tg_ctx *c, tg_node *node) {
    tg_node_accumulate(c, node, 0, tg_mul(c, tg_node_grad_output(node), tg_node_saved_tensor(node, 0)));
}
static const tg_op_def SCALE = {.name = "scale_by", .forward = scale_forward, .backward = scale_backward};

START_TEST(test_saved_tensor_written_in_place) {
    tg_tensor *x = tg_requires_grad(ctx, tg_randn(ctx, TG_F64, TG_SHAPE(5), 0, 1));
    tg_tensor *w = tg_randn(ctx, TG_F64, TG_SHAPE(5), 0, 1);
    tg_tensor *loss = tg_sum(ctx, tg_op_apply(ctx, &SCALE, 1, &x, w));
    /* w is not an input: its 5 doubles are what the op saved */
    ck_assert_uint_eq(tg_tape_saved_bytes(ctx), 5 * sizeof(double));
    tg_fill(ctx, w, 3.0);
    tg_backward(ctx, loss);
    tg_test_assert_error(ctx, TG_ERR_STATE, "saved tensor 0", "(5,)", "'scale_by'", "modified in place", NULL);
}
END_TEST

/* ---- a learner's mistakes: each an error naming the op ---------------------- */

static tg_tensor *copy_forward(tg_ctx *c, tg_node *node, tg_tensor *const *in, void *user) {
    (void)node, (void)user;
    return tg_copy(c, in[0]);
}
/* the gradient of a sum over the last axis by mistake: (2,) for a (2, 3) x */
static void wrong_shape_backward(tg_ctx *c, tg_node *node) {
    tg_node_accumulate(c, node, 0, tg_sum_axis(c, tg_node_grad_output(node), -1, false));
}
/* fails inside a tapegrad call, which names only itself */
static void inner_error_backward(tg_ctx *c, tg_node *node) {
    tg_tensor *dy = tg_node_grad_output(node);
    tg_node_accumulate(c, node, 0, tg_add(c, dy, tg_zeros(c, TG_F64, TG_SHAPE(7))));
}
static void own_error_backward(tg_ctx *c, tg_node *node) { tg_node_error(c, node, "refuses row %d", 1); }
static tg_tensor *same_forward(tg_ctx *c, tg_node *node, tg_tensor *const *in, void *user) {
    (void)c, (void)node, (void)user;
    return in[0];
}
static tg_tensor *failing_forward(tg_ctx *c, tg_node *node, tg_tensor *const *in, void *user) {
    (void)node, (void)user;
    return tg_matmul(c, in[0], in[0]); /* (2, 3) @ (2, 3): refused */
}

START_TEST(test_errors_name_the_op) {
    tg_tensor *x = tg_requires_grad(ctx, tg_randn(ctx, TG_F64, TG_SHAPE(2, 3), 0, 1));
    const tg_op_def wrong = {.name = "wrong_shape", .forward = copy_forward, .backward = wrong_shape_backward};
    tg_backward(ctx, tg_sum(ctx, tg_op_apply(ctx, &wrong, 1, &x, NULL)));
    tg_test_assert_error(ctx, TG_ERR_SHAPE, "wrong_shape", "input 0", "(2,)", "(2, 3)", NULL);

    const tg_op_def inner = {.name = "inner_error", .forward = copy_forward, .backward = inner_error_backward};
    tg_backward(ctx, tg_sum(ctx, tg_op_apply(ctx, &inner, 1, &x, NULL)));
    tg_test_assert_error(ctx, TG_ERR_SHAPE, "tg_add", "(in the backward of 'inner_error')", NULL);

    const tg_op_def own = {.name = "own_error", .forward = copy_forward, .backward = own_error_backward};
    tg_backward(ctx, tg_sum(ctx, tg_op_apply(ctx, &own, 1, &x, NULL)));
    tg_test_assert_error(ctx, TG_ERR_VALUE, "own_error: refuses row 1", NULL);

    const tg_op_def same = {.name = "identity_by_mistake", .forward = same_forward, .backward = own_error_backward};
    tg_test_assert_fails(ctx, tg_op_apply(ctx, &same, 1, &x, NULL), TG_ERR_STATE, "identity_by_mistake",
                         "returned its input 0", NULL);
    ck_assert(x->requires_grad); /* x is still a leaf: the record was refused */
    ck_assert_ptr_nonnull(tg_requires_grad(ctx, x));

    const tg_op_def failing = {.name = "bad_forward", .forward = failing_forward, .backward = own_error_backward};
    tg_test_assert_fails(ctx, tg_op_apply(ctx, &failing, 1, &x, NULL), TG_ERR_SHAPE, "tg_matmul",
                         "(in the forward of 'bad_forward')", NULL);

    tg_test_assert_fails(ctx, tg_op_apply(ctx, NULL, 1, &x, NULL), TG_ERR_NULL, "tg_op_apply", NULL);
    tg_test_assert_fails(ctx, tg_op_apply(ctx, &SQ, 0, &x, NULL), TG_ERR_VALUE, "scaled_square", "n_in = 0", NULL);
}
END_TEST

/* dx = dy through the raw pointer of x's gradient -- one element too many
 * (i <= n): the write lands in the guard after the gradient, and backward
 * is an error naming the op and the input, not a corrupted arena. */
static void past_the_end_backward(tg_ctx *c, tg_node *node) {
    tg_tensor *dx = tg_grad_of(c, tg_node_input(node, 1));
    const double *dy = tg_node_grad_output(node)->data;
    double *p = dx->data;
    for (int64_t i = 0; i <= dx->numel; i++) p[i] += i < dx->numel ? dy[i] : 1.0;
}
/* the same loop, right: i < n */
static void in_bounds_backward(tg_ctx *c, tg_node *node) {
    tg_tensor *dx = tg_grad_of(c, tg_node_input(node, 1));
    const double *dy = tg_node_grad_output(node)->data;
    double *p = dx->data;
    for (int64_t i = 0; i < dx->numel; i++) p[i] += dy[i];
}
static tg_tensor *copy_second_forward(tg_ctx *c, tg_node *node, tg_tensor *const *in, void *user) {
    (void)node, (void)user;
    return tg_copy(c, in[1]);
}

static tg_tensor *off_by_one_fn(tg_ctx *c, tg_tensor *const *in, void *user) {
    (void)user;
    static const tg_op_def bad = {
        .name = "off_by_one", .forward = copy_second_forward, .backward = past_the_end_backward};
    tg_tensor *args[2] = {tg_ones(c, TG_F64, TG_SHAPE(3)), in[0]};
    return tg_op_apply(c, &bad, 2, args, NULL);
}

START_TEST(test_backward_writing_past_its_gradient) {
    /* input 0 needs no gradient, input 1 does: the message names input 1 */
    tg_tensor *in[2] = {tg_randn(ctx, TG_F64, TG_SHAPE(3), 0, 1),
                        tg_requires_grad(ctx, tg_randn(ctx, TG_F64, TG_SHAPE(2, 3), 0, 1))};
    const tg_op_def bad = {.name = "off_by_one", .forward = copy_second_forward, .backward = past_the_end_backward};
    tg_backward(ctx, tg_sum(ctx, tg_op_apply(ctx, &bad, 2, in, NULL)));
    tg_test_assert_error(ctx, TG_ERR_STATE, "backward of 'off_by_one' wrote past the gradient of input 1", "(2, 3)",
                         "6 elements", "write only elements 0..5", NULL);

    /* the right loop passes, its gradient is dy = 1, and the gradient of
     * the input that needs none was never made */
    tg_ctx_reset(ctx);
    in[0] = tg_randn(ctx, TG_F64, TG_SHAPE(3), 0, 1);
    in[1] = tg_requires_grad(ctx, tg_randn(ctx, TG_F64, TG_SHAPE(2, 3), 0, 1));
    const tg_op_def good = {.name = "in_bounds", .forward = copy_second_forward, .backward = in_bounds_backward};
    tg_backward(ctx, tg_sum(ctx, tg_op_apply(ctx, &good, 2, in, NULL)));
    ck_assert_msg(tg_ok(ctx), "%s", tg_error_message(ctx));
    const double ones[6] = {1, 1, 1, 1, 1, 1};
    tg_test_assert_close(ctx, "dx", in[1]->grad, ones, 6, 0, 0);
    ck_assert_ptr_null(in[0]->grad);

    /* tg_gradcheck of the broken op: false with the same error, no crash */
    tg_ctx_reset(ctx);
    tg_tensor *x = tg_requires_grad(ctx, tg_randn(ctx, TG_F64, TG_SHAPE(2, 3), 0, 1));
    tg_gradcheck_result r;
    ck_assert(!tg_gradcheck(ctx, off_by_one_fn, NULL, 1, &x, NULL, &r));
    tg_test_assert_error(ctx, TG_ERR_STATE, "backward of 'off_by_one' wrote past the gradient of input 1", NULL);
}
END_TEST

/* a backward that never asks for its gradient leaves none: the walk skips
 * the record that made its input, as without the guard */
static void no_gradient_backward(tg_ctx *c, tg_node *node) { (void)c, (void)node; }

START_TEST(test_guard_leaves_no_gradient_unasked) {
    tg_tensor *x = tg_requires_grad(ctx, tg_randn(ctx, TG_F64, TG_SHAPE(4), 0, 1));
    tg_tensor *mid = tg_mul_scalar(ctx, x, 2.0), *in[2] = {x, mid};
    const tg_op_def lazy = {.name = "lazy", .forward = copy_second_forward, .backward = no_gradient_backward};
    tg_backward(ctx, tg_sum(ctx, tg_op_apply(ctx, &lazy, 2, in, NULL)));
    ck_assert_msg(tg_ok(ctx), "%s", tg_error_message(ctx));
    ck_assert_ptr_null(mid->grad);
    const double zeros[4] = {0};
    tg_test_assert_close(ctx, "dx (a leaf's, made by tg_requires_grad)", x->grad, zeros, 4, 0, 0);
}
END_TEST

/* A chain of custom ops whose intermediates get their first gradient from
 * the guard: that gradient must outlive the record's scratch, which the
 * walk gives back after each record (the next record's scratch lands on
 * it). y = s^3 x through three scale-by-s records: dx = s^3 for sum(y). */
START_TEST(test_chain_keeps_gradients_made_under_the_guard) {
    tg_tensor *x = tg_requires_grad(ctx, tg_randn(ctx, TG_F64, TG_SHAPE(6), 0, 1));
    tg_tensor *s = tg_full(ctx, TG_F64, TG_SHAPE(6), 3.0), *y = x;
    for (int i = 0; i < 3; i++) y = tg_op_apply(ctx, &SCALE, 1, &y, s);
    tg_backward(ctx, tg_sum(ctx, y));
    ck_assert_msg(tg_ok(ctx), "%s", tg_error_message(ctx));
    double want[6];
    for (int i = 0; i < 6; i++) want[i] = 27.0;
    tg_test_assert_close(ctx, "dx through three custom records", x->grad, want, 6, 0, 0);
}
END_TEST

/* An op's own step and tolerances (its descriptor's f64 / f32) are what
 * its check runs with, and they change the verdict: exp, copied with
 * an own float64 h of 0.5, fails on truncation (h^2 L''' / 6, about 4% of
 * the gradient, over rtol 1e-3) and passes again with an own rtol of 0.1;
 * an own atol and rtol of 1e-13 fail it at the default step, whose error
 * is ~1e-10; and the values the result reports are the entry's. */
START_TEST(test_registry_entry_own_step_and_tolerances) {
    const tg_op_info *exp_op = tg_registry_find("exp");
    ck_assert_ptr_nonnull(exp_op);
    tg_gradcheck_result r; /* tg_registry_check_spec returns the verdict */
    ck_assert(tg_registry_check_spec(ctx, exp_op, "3x4", TG_F64, NULL, &r));
    ck_assert(r.pass && r.h == 1e-6 && r.atol == 1e-5 && r.rtol == 1e-3);

    tg_op_def def = *exp_op->def;
    tg_op_info own = *exp_op;
    own.def = &def;
    def.f64 = (tg_gradcheck_tol){.h = 0.5};
    ck_assert(!tg_registry_check_spec(ctx, &own, "3x4", TG_F64, NULL, &r));
    ck_assert_msg(tg_ok(ctx), "%s", tg_error_message(ctx));
    ck_assert_msg(!r.pass && r.h == 0.5, "own h 0.5: pass %d, h %g", r.pass, r.h);
    /* the failure is truncation, and the check predicted it */
    ck_assert_msg(r.input[0].pred_trunc > r.input[0].pred_round && r.fail_excess <= 1,
                  "truncation %g, rounding %g, excess %g", r.input[0].pred_trunc, r.input[0].pred_round, r.fail_excess);

    def.f64 = (tg_gradcheck_tol){.h = 0.5, .rtol = 0.1};
    ck_assert(tg_registry_check_spec(ctx, &own, "3x4", TG_F64, NULL, &r));
    ck_assert_msg(r.pass && r.rtol == 0.1, "own rtol 0.1: pass %d, rtol %g", r.pass, r.rtol);

    def.f64 = (tg_gradcheck_tol){.atol = 1e-13, .rtol = 1e-13};
    ck_assert(!tg_registry_check_spec(ctx, &own, "3x4", TG_F64, NULL, &r));
    ck_assert_msg(tg_ok(ctx), "%s", tg_error_message(ctx));
    ck_assert_msg(!r.pass && r.h == 1e-6 && r.atol == 1e-13, "own atol, rtol 1e-13: pass %d", r.pass);

    /* a value the caller gives wins over the entry's own */
    tg_gradcheck_opts o = {.rtol = 0.5};
    def.f64 = (tg_gradcheck_tol){.h = 0.5, .rtol = 1e-6};
    ck_assert(tg_registry_check_spec(ctx, &own, "3x4", TG_F64, &o, &r));
    ck_assert(r.pass && r.rtol == 0.5 && r.h == 0.5);

    /* float32 takes the f32 fields: exp's and softmax's own h = 1e-2 */
    ck_assert(tg_registry_opts(exp_op, TG_F32, NULL).h == 1e-2);
    ck_assert(tg_registry_opts(tg_registry_find("softmax"), TG_F32, NULL).h == 1e-2);
}
END_TEST

Suite *make_custom_op_suite(void) {
    return tg_test_suite(
        "custom_op", setup, teardown, test_gradcheck_and_values, test_no_grad_and_no_input_needing_grad,
        test_accumulate_and_keep_tape, test_saved_tensor_written_in_place, test_errors_name_the_op,
        test_backward_writing_past_its_gradient, test_guard_leaves_no_gradient_unasked,
        test_chain_keeps_gradients_made_under_the_guard, test_registry_entry_own_step_and_tolerances, NULL);
}

int main(void) { return tg_test_run(make_custom_op_suite()); }

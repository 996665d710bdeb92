/* The tape itself: when ops record, backward, accumulation, keep_tape,
 * no-grad mode, detach and the errors of backward. Uses two tiny test-local
 * ops written with the op-writer API of autograd/tape.h, so the tape is
 * tested on its own, independent of the library's op files. */
#include <stdlib.h>
#include <string.h>

#include "autograd/tape.h"
#include "testutil.h"

static tg_ctx *ctx;
static void setup(void) { ctx = tg_ctx_new(1); }
static void teardown(void) { tg_ctx_free(ctx); }

/* y = x^2 elementwise; dy/dx = 2x so dx += 2 x dy. */
static void square_backward(tg_ctx *c, tg_node *n) {
    tg_tensor *dx = tg_grad_of(c, n->in[0]);
    if (!dx) return;
    for (int64_t i = 0; i < dx->numel; i++)
        tg_store(dx, i, tg_load(dx, i) + 2.0 * tg_load(n->in[0], i) * tg_load(n->out->grad, i));
}

static const tg_op_def SQUARE = {.name = "square", .backward = square_backward};

static tg_tensor *square(tg_ctx *c, tg_tensor *x) {
    tg_tensor *y = tg_new_like(c, "square", x);
    if (!y) return NULL;
    for (int64_t i = 0; i < x->numel; i++) tg_store(y, i, tg_load(x, i) * tg_load(x, i));
    tg_record(c, &SQUARE, y, 1, &x);
    return y;
}

/* s = sum_i a_i * b_i (a scalar); ds/da = b, ds/db = a. */
static void dot_backward(tg_ctx *c, tg_node *n) {
    double g = tg_load(n->out->grad, 0);
    for (int k = 0; k < 2; k++) {
        tg_tensor *d = tg_grad_of(c, n->in[k]);
        if (!d) continue;
        for (int64_t i = 0; i < d->numel; i++) tg_store(d, i, tg_load(d, i) + g * tg_load(n->in[1 - k], i));
    }
}

static const tg_op_def DOT = {.name = "dot", .backward = dot_backward};

static tg_tensor *dot(tg_ctx *c, tg_tensor *a, tg_tensor *b) {
    tg_tensor *s = tg_new_tensor(c, "dot", a->dtype, 0, NULL);
    if (!s) return NULL;
    double acc = 0;
    for (int64_t i = 0; i < a->numel; i++) acc += tg_load(a, i) * tg_load(b, i);
    tg_store(s, 0, acc);
    tg_tensor *in[2] = {a, b};
    tg_record(c, &DOT, s, 2, in);
    return s;
}

START_TEST(test_records_only_when_needed) {
    tg_tensor *x = tg_arange(ctx, TG_F64, 1, 4, 1);
    square(ctx, x);
    ck_assert_int_eq(tg_tape_size(ctx), 0);
    tg_requires_grad(ctx, x);
    tg_tensor *y = square(ctx, x);
    ck_assert_int_eq(tg_tape_size(ctx), 1);
    ck_assert(y->requires_grad);
    bool was = tg_set_grad_enabled(ctx, false);
    ck_assert(was);
    tg_tensor *z = square(ctx, x);
    ck_assert_int_eq(tg_tape_size(ctx), 1);
    ck_assert(!z->requires_grad);
    tg_set_grad_enabled(ctx, true);
    tg_ctx_reset(ctx);
    ck_assert_int_eq(tg_tape_size(ctx), 0);
}
END_TEST

/* L = sum(x^2 * w) with x = (1,2,3), w = (1,10,100): dL/dx = 2 x w,
 * dL/dw = x^2. */
START_TEST(test_backward_scalar) {
    tg_tensor *x = tg_requires_grad(ctx, tg_arange(ctx, TG_F64, 1, 4, 1));
    tg_tensor *w = tg_requires_grad(ctx, tg_from_buffer(ctx, TG_F64, TG_SHAPE(3), (double[]){1, 10, 100}));
    tg_tensor *loss = dot(ctx, square(ctx, x), w);
    ck_assert_double_eq(tg_get_flat(ctx, loss, 0), 1 + 40 + 900);
    tg_backward(ctx, loss);
    ck_assert(tg_ok(ctx));
    double want_dx[3] = {2, 40, 600}, want_dw[3] = {1, 4, 9};
    for (int i = 0; i < 3; i++) {
        ck_assert_double_eq(tg_get_flat(ctx, x->grad, i), want_dx[i]);
        ck_assert_double_eq(tg_get_flat(ctx, w->grad, i), want_dw[i]);
    }
}
END_TEST

START_TEST(test_accumulate_keep_tape_and_consumed) {
    tg_tensor *x = tg_requires_grad(ctx, tg_arange(ctx, TG_F64, 1, 3, 1));
    tg_tensor *loss = dot(ctx, x, x); /* dL/dx = 2x */
    tg_backward_ex(ctx, loss, NULL, true);
    tg_backward_ex(ctx, loss, NULL, false);
    ck_assert(tg_ok(ctx));
    ck_assert_double_eq(tg_get_flat(ctx, x->grad, 0), 4);
    ck_assert_double_eq(tg_get_flat(ctx, x->grad, 1), 8);
    tg_backward(ctx, loss); /* consumed */
    ck_assert_int_eq(tg_status_of(ctx), TG_ERR_STATE);
    ck_assert_ptr_nonnull(strstr(tg_error_message(ctx), "tg_backward: the tape was already consumed"));
    tg_clear_error(ctx);
    ck_assert_double_eq(tg_get_flat(ctx, x->grad, 1), 8); /* unchanged */
    tg_zero_grad(ctx, x);
    ck_assert_double_eq(tg_get_flat(ctx, x->grad, 1), 0);
}
END_TEST

START_TEST(test_non_scalar_needs_gradient) {
    tg_tensor *x = tg_requires_grad(ctx, tg_arange(ctx, TG_F64, 1, 4, 1));
    tg_tensor *y = square(ctx, x);
    tg_backward(ctx, y);
    ck_assert_int_eq(tg_status_of(ctx), TG_ERR_SHAPE);
    ck_assert_ptr_nonnull(strstr(tg_error_message(ctx), "tg_backward: output of shape (3,) is not a scalar"));
    tg_clear_error(ctx);
    tg_tensor *g = tg_from_buffer(ctx, TG_F64, TG_SHAPE(3), (double[]){1, 0, -1});
    tg_backward_ex(ctx, y, g, false);
    ck_assert(tg_ok(ctx));
    ck_assert_double_eq(tg_get_flat(ctx, x->grad, 0), 2);
    ck_assert_double_eq(tg_get_flat(ctx, x->grad, 1), 0);
    ck_assert_double_eq(tg_get_flat(ctx, x->grad, 2), -6);
    /* wrong gradient shape */
    tg_tensor *y2 = square(ctx, x);
    tg_backward_ex(ctx, y2, tg_ones(ctx, TG_F64, TG_SHAPE(4)), false);
    ck_assert_int_eq(tg_status_of(ctx), TG_ERR_SHAPE);
    ck_assert_ptr_nonnull(strstr(tg_error_message(ctx), "gradient of shape (4,) does not match output of shape (3,)"));
}
END_TEST

START_TEST(test_detach_and_no_history) {
    tg_tensor *x = tg_requires_grad(ctx, tg_arange(ctx, TG_F64, 1, 3, 1));
    tg_tensor *y = square(ctx, x);
    tg_tensor *d = tg_detach(ctx, y);
    ck_assert(!d->requires_grad);
    ck_assert_ptr_eq(d->data, y->data);
    tg_tensor *loss = dot(ctx, d, x); /* gradient flows only through the x operand */
    tg_backward(ctx, loss);
    ck_assert_double_eq(tg_get_flat(ctx, x->grad, 0), 1); /* d = x^2 taken as constant */
    ck_assert_double_eq(tg_get_flat(ctx, x->grad, 1), 4);
    /* backward of something that does not require grad */
    tg_backward(ctx, tg_ones(ctx, TG_F64, 0, NULL));
    ck_assert_int_eq(tg_status_of(ctx), TG_ERR_STATE);
    tg_clear_error(ctx);
    tg_requires_grad(ctx, y);
    ck_assert_int_eq(tg_status_of(ctx), TG_ERR_STATE);
    ck_assert_ptr_nonnull(strstr(tg_error_message(ctx), "not a leaf"));
}
END_TEST

START_TEST(test_persistent_leaf_across_steps) {
    tg_tensor *w = tg_persist(ctx, tg_from_buffer(ctx, TG_F64, TG_SHAPE(2), (double[]){3, -1}));
    tg_requires_grad(ctx, w);
    for (int step = 0; step < 3; step++) {
        tg_tensor *x = tg_from_buffer(ctx, TG_F64, TG_SHAPE(2), (double[]){1, 2});
        tg_backward(ctx, dot(ctx, w, x));
        tg_ctx_reset(ctx);
    }
    ck_assert(tg_ok(ctx));
    ck_assert_double_eq(tg_get_flat(ctx, w->grad, 0), 3);
    ck_assert_double_eq(tg_get_flat(ctx, w->grad, 1), 6);
    ck_assert_uint_eq(tg_tape_saved_bytes(ctx), 0);
}
END_TEST

Suite *make_tape_suite(void) {
    return tg_test_suite("tape", setup, teardown, test_records_only_when_needed, test_backward_scalar,
                         test_accumulate_keep_tape_and_consumed, test_non_scalar_needs_gradient,
                         test_detach_and_no_history, test_persistent_leaf_across_steps, NULL);
}

int main(void) { return tg_test_run(make_tape_suite()); }

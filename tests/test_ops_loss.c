/* tg_mse_loss: values by hand and against a plain double loop, backward
 * for both inputs against central finite differences, thread-count
 * independence, and the error paths. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static tg_ctx *ctx;

static void setup(void) { ctx = tg_ctx_new(3); }
static void teardown(void) { tg_ctx_free(ctx); }

START_TEST(test_by_hand) {
    for (int k = 0; k < 2; k++) {
        tg_dtype dt = k ? TG_F32 : TG_F64;
        tg_tensor *p = tg_from_buffer(ctx, TG_F64, TG_SHAPE(2, 2), (double[]){1, 2, 3, 4});
        tg_tensor *t = tg_from_buffer(ctx, TG_F64, TG_SHAPE(2, 2), (double[]){1, 0, 3, 6});
        p = tg_to_dtype(ctx, p, dt);
        t = tg_to_dtype(ctx, t, dt);
        tg_requires_grad(ctx, p);
        tg_tensor *l = tg_mse_loss(ctx, p, t);
        ck_assert_ptr_nonnull(l);
        ck_assert_int_eq(l->ndim, 0);
        ck_assert_int_eq(l->dtype, dt);
        /* (0 + 4 + 0 + 4) / 4 */
        ck_assert_double_eq(tg_get_flat(ctx, l, 0), 2.0);
        tg_backward(ctx, l);
        /* dp = 2 (p - t) / 4 */
        tg_test_assert_close(ctx, "dp", p->grad, (double[]){0, 1, 0, -1}, 4, 0, 0);
        ck_assert_ptr_null(t->grad);
    }
}
END_TEST

START_TEST(test_large_vs_loop) {
    /* several summation blocks, with a ragged last one */
    tg_tensor *p = tg_randn(ctx, TG_F32, TG_SHAPE(3, 10001), 0, 1);
    tg_tensor *t = tg_randn(ctx, TG_F32, TG_SHAPE(3, 10001), 0, 1);
    double s = 0;
    for (int64_t i = 0; i < p->numel; i++) {
        double d = tg_get_flat(ctx, p, i) - tg_get_flat(ctx, t, i);
        s += d * d;
    }
    tg_tensor *l = tg_mse_loss(ctx, p, t);
    ck_assert_double_eq_tol(tg_get_flat(ctx, l, 0), s / (double)p->numel, 1e-6);
}
END_TEST

static tg_tensor *f_mse(tg_ctx *c, tg_tensor *const *in, void *u) {
    (void)u;
    return tg_mse_loss(c, in[0], in[1]);
}

START_TEST(test_fd) {
    tg_tensor *in[2] = {tg_requires_grad(ctx, tg_randn(ctx, TG_F64, TG_SHAPE(3, 4), 0, 1)),
                        tg_requires_grad(ctx, tg_randn(ctx, TG_F64, TG_SHAPE(3, 4), 0, 1))};
    tg_test_op_gradcheck(ctx, "mse", f_mse, NULL, 2, in);
    tg_tensor *in2[2] = {tg_requires_grad(ctx, tg_randn(ctx, TG_F64, TG_SHAPE(5), 0, 1)),
                         tg_randn(ctx, TG_F64, TG_SHAPE(5), 0, 1)};
    tg_test_op_gradcheck(ctx, "mse", f_mse, NULL, 2, in2);
    tg_tensor *in3[2] = {tg_requires_grad(ctx, tg_full(ctx, TG_F64, 0, NULL, 1.5)),
                         tg_requires_grad(ctx, tg_full(ctx, TG_F64, 0, NULL, -0.5))};
    tg_test_op_gradcheck(ctx, "mse", f_mse, NULL, 2, in3);
}
END_TEST

START_TEST(test_same_tensor) {
    tg_tensor *x = tg_requires_grad(ctx, tg_randn(ctx, TG_F64, TG_SHAPE(4), 0, 1));
    tg_tensor *l = tg_mse_loss(ctx, x, x);
    ck_assert_double_eq(tg_get_flat(ctx, l, 0), 0.0);
    tg_backward(ctx, l);
    tg_test_assert_close(ctx, "dx", x->grad, (double[]){0, 0, 0, 0}, 4, 0, 0);
}
END_TEST

START_TEST(test_threads_bitwise) {
    tg_tensor *p = tg_requires_grad(ctx, tg_randn(ctx, TG_F32, TG_SHAPE(50000), 0, 1));
    tg_tensor *t = tg_requires_grad(ctx, tg_randn(ctx, TG_F32, TG_SHAPE(50000), 0, 1));
    double v[2];
    tg_tensor *gp[2], *gt[2];
    for (int r = 0; r < 2; r++) {
        tg_set_threads(ctx, r + 1);
        tg_zero_grad(ctx, p);
        tg_zero_grad(ctx, t);
        tg_tensor *l = tg_mse_loss(ctx, p, t);
        v[r] = tg_get_flat(ctx, l, 0);
        tg_backward(ctx, l);
        gp[r] = tg_copy(ctx, p->grad);
        gt[r] = tg_copy(ctx, t->grad);
    }
    ck_assert(tg_ok(ctx));
    ck_assert(v[0] == v[1]);
    tg_test_assert_same_bits("dpred, 1 vs 2 threads", gp[0], gp[1]);
    tg_test_assert_same_bits("dtarget, 1 vs 2 threads", gt[0], gt[1]);
}
END_TEST

START_TEST(test_errors) {
    tg_tensor *a = tg_zeros(ctx, TG_F32, TG_SHAPE(2, 3));
    tg_test_assert_fails(ctx, tg_mse_loss(ctx, a, tg_zeros(ctx, TG_F32, TG_SHAPE(3, 2))), TG_ERR_SHAPE, "tg_mse_loss",
                         "(2, 3)", "(3, 2)", NULL);
    tg_test_assert_fails(ctx, tg_mse_loss(ctx, a, tg_zeros(ctx, TG_F64, TG_SHAPE(2, 3))), TG_ERR_DTYPE, "tg_mse_loss",
                         "float32", "float64", NULL);
    tg_tensor *e = tg_zeros(ctx, TG_F32, TG_SHAPE(0, 3));
    tg_test_assert_fails(ctx, tg_mse_loss(ctx, e, e), TG_ERR_SHAPE, "tg_mse_loss", "empty", "(0, 3)", NULL);
    tg_test_assert_fails(ctx, tg_mse_loss(ctx, NULL, a), TG_ERR_NULL, "tg_mse_loss", "'pred'", NULL);
    tg_test_assert_fails(ctx, tg_mse_loss(ctx, a, NULL), TG_ERR_NULL, "tg_mse_loss", "'target'", NULL);
}
END_TEST

Suite *make_ops_loss_suite(void) {
    return tg_test_suite("ops_loss", setup, teardown, test_by_hand, test_large_vs_loop, test_fd, test_same_tensor,
                         test_threads_bitwise, test_errors, NULL);
}

int main(void) { return tg_test_run(make_ops_loss_suite()); }

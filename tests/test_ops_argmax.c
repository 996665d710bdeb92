/* tg_argmax and tg_accuracy (autograd/ops_argmax.c): every axis of a 3-d
 * tensor against a loop over tg_get_flat, ties and NaN, 16-bit input,
 * nothing recorded, the accuracy of known predictions, and the errors. */
#include <math.h>
#include <stdlib.h>

#include "testutil.h"

static tg_ctx *ctx;
static void setup(void) { ctx = tg_ctx_new(11); }
static void teardown(void) { tg_ctx_free(ctx); }

START_TEST(test_every_axis) {
    const int64_t shape[3] = {3, 4, 5};
    tg_tensor *x = tg_test_rand(ctx, TG_F64, 3, shape, -1, 1);
    for (int axis = -3; axis < 3; axis++) {
        const int a = axis < 0 ? axis + 3 : axis;
        int64_t got[20], n = 0;
        ck_assert(tg_argmax(ctx, x, axis, got));
        /* the other dims in row-major order, the reduced one innermost */
        for (int64_t i = 0; i < 3; i++)
            for (int64_t j = 0; j < 4; j++)
                for (int64_t k = 0; k < 5; k++) {
                    const int64_t pos[3] = {i, j, k};
                    if (pos[a] != 0) continue;
                    int64_t best = 0;
                    double m = -INFINITY;
                    for (int64_t r = 0; r < shape[a]; r++) {
                        int64_t p[3] = {i, j, k};
                        p[a] = r;
                        const double v = tg_get_flat(ctx, x, (p[0] * 4 + p[1]) * 5 + p[2]);
                        if (v > m) m = v, best = r;
                    }
                    ck_assert_msg(got[n] == best, "axis %d, output %lld: %lld, want %lld", axis, (long long)n,
                                  (long long)got[n], (long long)best);
                    n++;
                }
        ck_assert_int_eq(n, 60 / shape[a]);
    }
}
END_TEST

START_TEST(test_ties_nan_lowp) {
    tg_tensor *x = tg_test_tensor(ctx, TG_F32, TG_SHAPE(3, 4),
                                  (const double[]){1, 3, 3, 2, /**/ 0, NAN, 5, NAN, /**/ -INFINITY, -INFINITY, -1, -1});
    int64_t got[3];
    ck_assert(tg_argmax(ctx, x, -1, got));
    ck_assert_int_eq(got[0], 1); /* the first of two 3s */
    ck_assert_int_eq(got[1], 1); /* the first NaN */
    ck_assert_int_eq(got[2], 2);
    tg_tensor *h = tg_to_dtype(
        ctx, tg_requires_grad(ctx, tg_test_tensor(ctx, TG_F32, TG_SHAPE(3), (const double[]){0.5, 2.5, -7})), TG_BF16);
    const int64_t records = tg_tape_size(ctx);
    ck_assert(tg_argmax(ctx, h, 0, got));
    ck_assert_int_eq(got[0], 1);
    ck_assert_int_eq(tg_tape_size(ctx), records); /* not recorded */
    tg_tensor *s = tg_test_tensor(ctx, TG_F64, 0, NULL, (const double[]){4});
    ck_assert(tg_argmax(ctx, s, 0, got));
    ck_assert_int_eq(got[0], 0);
}
END_TEST

START_TEST(test_accuracy) {
    tg_tensor *logits = tg_test_tensor(ctx, TG_F32, TG_SHAPE(2, 2, 3),
                                       (const double[]){0, 1, 0, /**/ 2, 1, 0, /**/ 0, 0, 9, /**/ 1, 1, 0});
    const int64_t right[4] = {1, 0, 2, 0}, half[4] = {1, 1, 2, 1};
    ck_assert(tg_accuracy(ctx, logits, right) == 1.0);
    ck_assert(tg_accuracy(ctx, logits, half) == 0.5);
    const int64_t bad[4] = {1, 0, 3, 0};
    ck_assert(isnan(tg_accuracy(ctx, logits, bad)));
    tg_test_assert_error(ctx, TG_ERR_INDEX, "tg_accuracy", "targets[2] = 3 is not a class of logits (2, 2, 3) (0..2)",
                         NULL);
    ck_assert(isnan(tg_accuracy(ctx, logits, NULL)));
    tg_test_assert_error(ctx, TG_ERR_NULL, "tg_accuracy", "'targets'", NULL);
}
END_TEST

START_TEST(test_errors) {
    tg_tensor *x = tg_zeros(ctx, TG_F32, TG_SHAPE(2, 3));
    int64_t out[8];
    ck_assert(!tg_argmax(ctx, x, 2, out));
    tg_test_assert_error(ctx, TG_ERR_SHAPE, "tg_argmax", "axis 2 is out of range for x (2, 3)", NULL);
    ck_assert(!tg_argmax(ctx, x, -3, out));
    tg_test_assert_error(ctx, TG_ERR_SHAPE, "axis -3", NULL);
    ck_assert(!tg_argmax(ctx, tg_zeros(ctx, TG_F32, TG_SHAPE(2, 0)), 1, out));
    tg_test_assert_error(ctx, TG_ERR_VALUE, "empty reduction: axis 1 of x (2, 0) has size 0", NULL);
    ck_assert(!tg_argmax(ctx, x, 0, NULL));
    tg_test_assert_error(ctx, TG_ERR_NULL, "'out'", NULL);
    ck_assert(!tg_argmax(ctx, NULL, 0, out));
    tg_test_assert_error(ctx, TG_ERR_NULL, "tg_argmax", NULL);
}
END_TEST

int main(void) {
    return tg_test_run(tg_test_suite("ops_argmax", setup, teardown, test_every_axis, test_ties_nan_lowp, test_accuracy,
                                     test_errors, NULL));
}

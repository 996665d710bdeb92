/* Shape ops: tg_transpose, tg_reshape, tg_concat, tg_slice. Forward values
 * against index formulas and hand-written results, backward against central
 * finite differences in float64, and every error path. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static tg_ctx *ctx;

static void setup(void) { ctx = tg_ctx_new(7); }
static void teardown(void) { tg_ctx_free(ctx); }

static tg_tensor *randleaf(int ndim, const int64_t *shape) {
    return tg_requires_grad(ctx, tg_randn(ctx, TG_F64, ndim, shape, 0, 1));
}

/* ---- transpose ----------------------------------------------------------- */

START_TEST(test_transpose_by_hand) {
    tg_tensor *x = tg_from_buffer(ctx, TG_F32, TG_SHAPE(2, 3), (float[]){1, 2, 3, 4, 5, 6});
    tg_tensor *y = tg_transpose(ctx, x);
    ck_assert_int_eq(y->ndim, 2);
    ck_assert_int_eq(y->shape[0], 3);
    ck_assert_int_eq(y->shape[1], 2);
    tg_test_assert_close(ctx, "transpose", y, (double[]){1, 4, 2, 5, 3, 6}, 6, 0, 0);
}
END_TEST

static void transpose_index_check(tg_dtype dt, int64_t B, int64_t R, int64_t C) {
    tg_tensor *x = tg_randn(ctx, dt, TG_SHAPE(B, R, C), 0, 1);
    tg_tensor *y = tg_transpose(ctx, x);
    ck_assert_ptr_nonnull(y);
    ck_assert_int_eq(y->shape[0], B);
    ck_assert_int_eq(y->shape[1], C);
    ck_assert_int_eq(y->shape[2], R);
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < R; i++)
            for (int64_t j = 0; j < C; j++)
                ck_assert(tg_get(ctx, y, (int64_t[]){b, j, i}) == tg_get(ctx, x, (int64_t[]){b, i, j}));
}

START_TEST(test_transpose_batched) {
    transpose_index_check(TG_F64, 2, 3, 4);
    transpose_index_check(TG_F32, 3, 40, 70); /* several 32x32 tiles, ragged edges */
    transpose_index_check(TG_F64, 1, 1, 5);
    transpose_index_check(TG_F64, 2, 0, 3);
}
END_TEST

static tg_tensor *f_transpose(tg_ctx *c, tg_tensor *const *in, void *u) {
    (void)u;
    return tg_transpose(c, in[0]);
}

START_TEST(test_transpose_backward) {
    tg_tensor *in[1] = {randleaf(TG_SHAPE(2, 3, 4))};
    tg_test_op_gradcheck(ctx, "transpose", f_transpose, NULL, 1, in);
    tg_tensor *in2[1] = {randleaf(TG_SHAPE(5, 3))};
    tg_test_op_gradcheck(ctx, "transpose", f_transpose, NULL, 1, in2);
}
END_TEST

START_TEST(test_transpose_errors) {
    tg_test_assert_fails(ctx, tg_transpose(ctx, tg_zeros(ctx, TG_F32, TG_SHAPE(4))), TG_ERR_SHAPE, "tg_transpose",
                         "(4,)", NULL);
    tg_test_assert_fails(ctx, tg_transpose(ctx, NULL), TG_ERR_NULL, "tg_transpose", "'x'", NULL);
}
END_TEST

/* ---- reshape --------------------------------------------------------------- */

START_TEST(test_reshape_values) {
    tg_tensor *x = tg_arange(ctx, TG_F64, 0, 12, 1);
    tg_tensor *y = tg_reshape(ctx, x, TG_SHAPE(3, -1));
    ck_assert_ptr_nonnull(y);
    ck_assert_int_eq(y->ndim, 2);
    ck_assert_int_eq(y->shape[0], 3);
    ck_assert_int_eq(y->shape[1], 4);
    ck_assert_double_eq(tg_get(ctx, y, (int64_t[]){2, 1}), 9);
    ck_assert_ptr_eq(y->data, x->data); /* shares the data */
    tg_tensor *z = tg_reshape(ctx, tg_full(ctx, TG_F32, 0, NULL, 5), TG_SHAPE(1, 1, -1));
    ck_assert_int_eq(z->ndim, 3);
    ck_assert_int_eq(z->shape[2], 1);
    tg_tensor *s = tg_reshape(ctx, z, 0, NULL); /* back to a scalar */
    ck_assert_int_eq(s->ndim, 0);
    ck_assert_double_eq(tg_get(ctx, s, NULL), 5);
}
END_TEST

/* reshape then matmul, so the gradient through the reshape is not just r */
static tg_tensor *f_reshape_mm(tg_ctx *c, tg_tensor *const *in, void *u) {
    (void)u;
    tg_tensor *a = tg_reshape(c, in[0], TG_SHAPE(-1, 3));
    return tg_matmul(c, a, tg_reshape(c, in[1], TG_SHAPE(3, 2)));
}

START_TEST(test_reshape_backward) {
    tg_tensor *in[2] = {randleaf(TG_SHAPE(2, 3, 2)), randleaf(TG_SHAPE(6))};
    tg_test_op_gradcheck(ctx, "reshape + matmul", f_reshape_mm, NULL, 2, in);
    tg_test_backward(ctx, f_reshape_mm, NULL, 2, in);
    ck_assert_int_eq(in[0]->grad->ndim, 3); /* the grad has x's shape */
}
END_TEST

START_TEST(test_reshape_errors) {
    tg_tensor *x = tg_zeros(ctx, TG_F32, TG_SHAPE(2, 3));
    tg_test_assert_fails(ctx, tg_reshape(ctx, x, TG_SHAPE(4, 2)), TG_ERR_SHAPE, "tg_reshape", "(2, 3)", "(4, 2)", NULL);
    tg_test_assert_fails(ctx, tg_reshape(ctx, x, TG_SHAPE(4, -1)), TG_ERR_SHAPE, "tg_reshape", "(2, 3)", "(4, -1)",
                         NULL);
    tg_test_assert_fails(ctx, tg_reshape(ctx, x, TG_SHAPE(-1, -1)), TG_ERR_SHAPE, "tg_reshape", "-1", NULL);
    tg_test_assert_fails(ctx, tg_reshape(ctx, x, TG_SHAPE(-2, -3)), TG_ERR_SHAPE, "tg_reshape", "-2", NULL);
    tg_test_assert_fails(ctx, tg_reshape(ctx, x, 9, (int64_t[9]){1, 1, 1, 1, 1, 1, 1, 2, 3}), TG_ERR_SHAPE,
                         "tg_reshape", "ndim 9", NULL);
    tg_test_assert_fails(ctx, tg_reshape(ctx, x, 2, NULL), TG_ERR_NULL, "tg_reshape", "shape", NULL);
    tg_test_assert_fails(ctx, tg_reshape(ctx, NULL, TG_SHAPE(6)), TG_ERR_NULL, "tg_reshape", "'x'", NULL);
    tg_test_assert_fails(ctx, tg_reshape(ctx, x, TG_SHAPE(INT64_MAX, 4)), TG_ERR_SHAPE, "tg_reshape", NULL);
}
END_TEST

/* ---- concat ---------------------------------------------------------------- */

START_TEST(test_concat_by_hand) {
    tg_tensor *a = tg_from_buffer(ctx, TG_F64, TG_SHAPE(2, 2), (double[]){1, 2, 3, 4});
    tg_tensor *b = tg_from_buffer(ctx, TG_F64, TG_SHAPE(2, 1), (double[]){5, 6});
    tg_tensor *c = tg_from_buffer(ctx, TG_F64, TG_SHAPE(2, 3), (double[]){7, 8, 9, 10, 11, 12});
    tg_tensor *y = tg_concat(ctx, 3, (tg_tensor *[]){a, b, c}, 1);
    ck_assert_int_eq(y->shape[0], 2);
    ck_assert_int_eq(y->shape[1], 6);
    tg_test_assert_close(ctx, "concat axis 1", y, (double[]){1, 2, 5, 7, 8, 9, 3, 4, 6, 10, 11, 12}, 12, 0, 0);
    tg_tensor *y2 = tg_concat(ctx, 2, (tg_tensor *[]){a, tg_transpose(ctx, b)}, 0);
    ck_assert_int_eq(y2->shape[0], 3);
    tg_test_assert_close(ctx, "concat axis 0", y2, (double[]){1, 2, 3, 4, 5, 6}, 6, 0, 0);
    tg_tensor *y3 = tg_concat(ctx, 2, (tg_tensor *[]){b, a}, -1); /* negative axis */
    tg_test_assert_close(ctx, "concat axis -1", y3, (double[]){5, 1, 2, 6, 3, 4}, 6, 0, 0);
    tg_tensor *f = tg_concat(
        ctx, 2,
        (tg_tensor *[]){tg_from_buffer(ctx, TG_F32, TG_SHAPE(2), (float[]){1, 2}), tg_zeros(ctx, TG_F32, TG_SHAPE(0))},
        0);
    tg_test_assert_close(ctx, "concat with an empty piece", f, (double[]){1, 2}, 2, 0, 0);
}
END_TEST

static tg_tensor *f_concat_mid(tg_ctx *c, tg_tensor *const *in, void *u) {
    (void)u;
    return tg_concat(c, 3, in, 1);
}

START_TEST(test_concat_backward) {
    tg_tensor *in[3] = {randleaf(TG_SHAPE(2, 1, 3)), randleaf(TG_SHAPE(2, 4, 3)), randleaf(TG_SHAPE(2, 2, 3))};
    tg_test_op_gradcheck(ctx, "concat", f_concat_mid, NULL, 3, in);
    /* one piece without grad */
    tg_tensor *in2[3] = {randleaf(TG_SHAPE(3, 2)), tg_randn(ctx, TG_F64, TG_SHAPE(3, 1), 0, 1),
                         randleaf(TG_SHAPE(3, 2))};
    tg_test_op_gradcheck(ctx, "concat, one piece without grad", f_concat_mid, NULL, 3, in2);
    tg_test_backward(ctx, f_concat_mid, NULL, 3, in2);
    ck_assert_ptr_null(in2[1]->grad);
}
END_TEST

START_TEST(test_concat_errors) {
    tg_tensor *a = tg_zeros(ctx, TG_F32, TG_SHAPE(2, 3));
    tg_tensor *b = tg_zeros(ctx, TG_F32, TG_SHAPE(4, 3));
    tg_test_assert_fails(ctx, tg_concat(ctx, 2, (tg_tensor *[]){a, b}, 1), TG_ERR_SHAPE, "tg_concat", "(2, 3)",
                         "(4, 3)", NULL);
    tg_test_assert_fails(ctx, tg_concat(ctx, 2, (tg_tensor *[]){a, tg_zeros(ctx, TG_F32, TG_SHAPE(2, 3, 1))}, 0),
                         TG_ERR_SHAPE, "tg_concat", "(2, 3, 1)", NULL);
    tg_test_assert_fails(ctx, tg_concat(ctx, 2, (tg_tensor *[]){a, tg_zeros(ctx, TG_F64, TG_SHAPE(2, 3))}, 0),
                         TG_ERR_DTYPE, "tg_concat", "float32", "float64", NULL);
    tg_test_assert_fails(ctx, tg_concat(ctx, 2, (tg_tensor *[]){a, b}, 2), TG_ERR_INDEX, "tg_concat", "axis 2", NULL);
    tg_test_assert_fails(ctx, tg_concat(ctx, 2, (tg_tensor *[]){a, b}, -3), TG_ERR_INDEX, "tg_concat", "axis -3", NULL);
    tg_test_assert_fails(ctx, tg_concat(ctx, 0, (tg_tensor *[]){a}, 0), TG_ERR_VALUE, "tg_concat", "n = 0", NULL);
    tg_test_assert_fails(ctx, tg_concat(ctx, 2, (tg_tensor *[]){a, NULL}, 0), TG_ERR_NULL, "tg_concat", "xs[1]", NULL);
    tg_test_assert_fails(ctx, tg_concat(ctx, 2, NULL, 0), TG_ERR_NULL, "tg_concat", "xs", NULL);
    tg_test_assert_fails(ctx, tg_concat(ctx, 1, (tg_tensor *[]){tg_full(ctx, TG_F32, 0, NULL, 1)}, 0), TG_ERR_INDEX,
                         "tg_concat", "axis 0", "()", NULL);
}
END_TEST

/* ---- slice ------------------------------------------------------------------ */

START_TEST(test_slice_values) {
    tg_tensor *x = tg_reshape(ctx, tg_arange(ctx, TG_F32, 0, 24, 1), TG_SHAPE(2, 3, 4));
    tg_tensor *y = tg_slice(ctx, x, 1, 1, 3);
    ck_assert_int_eq(y->shape[0], 2);
    ck_assert_int_eq(y->shape[1], 2);
    ck_assert_int_eq(y->shape[2], 4);
    tg_test_assert_close(ctx, "slice axis 1", y, (double[]){4, 5, 6, 7, 8, 9, 10, 11, 16, 17, 18, 19, 20, 21, 22, 23},
                         16, 0, 0);
    tg_tensor *z = tg_slice(ctx, x, -1, 3, 4);
    tg_test_assert_close(ctx, "slice axis -1", z, (double[]){3, 7, 11, 15, 19, 23}, 6, 0, 0);
    tg_tensor *w = tg_slice(ctx, x, 0, 1, 2);
    ck_assert_int_eq(w->shape[0], 1);
    ck_assert_double_eq(tg_get_flat(ctx, w, 0), 12);
    tg_tensor *e = tg_slice(ctx, x, 2, 2, 2); /* empty */
    ck_assert_ptr_nonnull(e);
    ck_assert_int_eq(e->numel, 0);
    /* slices put back together give x */
    tg_tensor *back = tg_concat(ctx, 2, (tg_tensor *[]){tg_slice(ctx, x, 2, 0, 1), tg_slice(ctx, x, 2, 1, 4)}, 2);
    ck_assert(memcmp(back->data, x->data, 24 * sizeof(float)) == 0);
}
END_TEST

static tg_tensor *f_slice(tg_ctx *c, tg_tensor *const *in, void *u) {
    const int64_t *a = u;
    return tg_slice(c, in[0], (int)a[0], a[1], a[2]);
}

/* two overlapping slices multiplied: both routes accumulate into x's grad */
static tg_tensor *f_two_slices(tg_ctx *c, tg_tensor *const *in, void *u) {
    (void)u;
    tg_tensor *s1 = tg_slice(c, in[0], 0, 0, 3);
    tg_tensor *s2 = tg_slice(c, in[0], 0, 1, 4);
    return tg_matmul(c, tg_transpose(c, s1), s2);
}

START_TEST(test_slice_backward) {
    tg_tensor *in[1] = {randleaf(TG_SHAPE(3, 5, 2))};
    tg_test_op_gradcheck(ctx, "slice", f_slice, (int64_t[]){1, 1, 4}, 1, in);
    tg_test_op_gradcheck(ctx, "slice", f_slice, (int64_t[]){0, 2, 3}, 1, in);
    tg_test_op_gradcheck(ctx, "slice", f_slice, (int64_t[]){-1, 0, 1}, 1, in);
    tg_tensor *in2[1] = {randleaf(TG_SHAPE(4, 3))};
    tg_test_op_gradcheck(ctx, "two overlapping slices", f_two_slices, NULL, 1, in2);
}
END_TEST

START_TEST(test_slice_errors) {
    tg_tensor *x = tg_zeros(ctx, TG_F64, TG_SHAPE(2, 5));
    tg_test_assert_fails(ctx, tg_slice(ctx, x, 1, 2, 6), TG_ERR_INDEX, "tg_slice", "[2, 6)", "size 5", "(2, 5)", NULL);
    tg_test_assert_fails(ctx, tg_slice(ctx, x, 1, -1, 2), TG_ERR_INDEX, "tg_slice", "[-1, 2)", NULL);
    tg_test_assert_fails(ctx, tg_slice(ctx, x, 0, 2, 1), TG_ERR_INDEX, "tg_slice", "[2, 1)", NULL);
    tg_test_assert_fails(ctx, tg_slice(ctx, x, 2, 0, 1), TG_ERR_INDEX, "tg_slice", "axis 2", NULL);
    tg_test_assert_fails(ctx, tg_slice(ctx, NULL, 0, 0, 1), TG_ERR_NULL, "tg_slice", "'x'", NULL);
}
END_TEST

START_TEST(test_no_record_without_grad) {
    tg_tensor *x = tg_zeros(ctx, TG_F64, TG_SHAPE(2, 4));
    tg_tensor *ys[] = {tg_transpose(ctx, x), tg_reshape(ctx, x, TG_SHAPE(8)), tg_slice(ctx, x, 1, 0, 2),
                       tg_concat(ctx, 2, (tg_tensor *[]){x, x}, 0)};
    for (int i = 0; i < 4; i++) {
        ck_assert_ptr_nonnull(ys[i]);
        ck_assert(!ys[i]->requires_grad);
    }
    ck_assert_int_eq(tg_tape_size(ctx), 0);
}
END_TEST

Suite *make_ops_shape_suite(void) {
    return tg_test_suite("ops_shape", setup, teardown, test_transpose_by_hand, test_transpose_batched,
                         test_transpose_backward, test_transpose_errors, test_reshape_values, test_reshape_backward,
                         test_reshape_errors, test_concat_by_hand, test_concat_backward, test_concat_errors,
                         test_slice_values, test_slice_backward, test_slice_errors, test_no_record_without_grad, NULL);
}

int main(void) { return tg_test_run(make_ops_shape_suite()); }

/* tg_permute and tg_transpose_dims: values against the index formula over
 * every permutation of 2, 3 and 4 dims (including size-1 and empty dims,
 * and shapes that take the run and the tiled paths), against PyTorch
 * (tests/fixtures/transformer_ops.txt), backward against finite
 * differences and as the inverse permutation, the heads split and merge of
 * attention as a round trip, and every error. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static tg_ctx *ctx;
static void setup(void) { ctx = tg_ctx_new(5); }
static void teardown(void) { tg_ctx_free(ctx); }

/* y's element at multi-index i is x's at j with j[perm[d]] = i[d]. */
static void check_index(const tg_tensor *x, const tg_tensor *y, const int *perm) {
    const int nd = x->ndim;
    ck_assert_int_eq(y->ndim, nd);
    for (int d = 0; d < nd; d++) ck_assert_int_eq(y->shape[d], x->shape[perm[d]]);
    int64_t i[TG_MAX_DIMS] = {0}, j[TG_MAX_DIMS];
    for (int64_t flat = 0; flat < y->numel; flat++) {
        for (int d = 0; d < nd; d++) j[perm[d]] = i[d];
        ck_assert(tg_get(ctx, y, i) == tg_get(ctx, x, j));
        for (int d = nd - 1; d >= 0; d--) {
            if (++i[d] < y->shape[d]) break;
            i[d] = 0;
        }
    }
}

/* Every permutation of n dims (Heap's algorithm over perm[0..k)). */
static void each_perm(int *perm, int k, tg_tensor *x) {
    if (k == 1) {
        tg_tensor *y = tg_permute(ctx, x, perm);
        ck_assert_msg(y != NULL, "%s", tg_error_message(ctx));
        check_index(x, y, perm);
        return;
    }
    for (int i = 0; i < k; i++) {
        each_perm(perm, k - 1, x);
        int s = k % 2 ? 0 : i, t = perm[s];
        perm[s] = perm[k - 1];
        perm[k - 1] = t;
    }
}

START_TEST(test_every_permutation) {
    static const int64_t shapes[][4] = {{3, 4}, {2, 3, 4}, {2, 1, 3}, {2, 3, 4, 5}, {1, 40, 1, 33}, {3, 0, 2}};
    static const int ndims[] = {2, 3, 3, 4, 4, 3};
    for (int d = 0; d < 2; d++)
        for (size_t s = 0; s < sizeof ndims / sizeof ndims[0]; s++) {
            tg_tensor *x = tg_randn(ctx, d ? TG_F64 : TG_F32, ndims[s], shapes[s], 0, 1);
            int perm[4] = {0, 1, 2, 3};
            each_perm(perm, ndims[s], x);
            tg_ctx_reset(ctx);
        }
    /* 0-d and 1-d: a copy */
    tg_tensor *x0 = tg_full(ctx, TG_F64, 0, NULL, 2.5);
    tg_tensor *y0 = tg_permute(ctx, x0, NULL);
    ck_assert_ptr_nonnull(y0);
    ck_assert(tg_get_flat(ctx, y0, 0) == 2.5);
    tg_tensor *x1 = tg_arange(ctx, TG_F32, 0, 5, 1);
    check_index(x1, tg_permute(ctx, x1, (const int[]){-1}), (const int[]){0});
}
END_TEST

/* tg_transpose_dims(x, a, b) is the permutation exchanging a and b, with
 * negative dims from the end; the last two dims give tg_transpose's bits. */
START_TEST(test_transpose_dims) {
    tg_tensor *x = tg_randn(ctx, TG_F64, TG_SHAPE(2, 3, 4, 5), 0, 1);
    for (int a = -4; a < 4; a++)
        for (int b = -4; b < 4; b++) {
            int perm[4] = {0, 1, 2, 3}, pa = a < 0 ? a + 4 : a, pb = b < 0 ? b + 4 : b;
            perm[pa] = pb;
            perm[pb] = pa;
            check_index(x, tg_transpose_dims(ctx, x, a, b), perm);
        }
    tg_tensor *big = tg_randn(ctx, TG_F32, TG_SHAPE(3, 70, 45), 0, 1);
    tg_test_assert_same_bits("last two", tg_transpose_dims(ctx, big, -1, -2), tg_transpose(ctx, big));
}
END_TEST

static const char FX[] = "transformer_ops.txt";

typedef struct perm_arg {
    int perm[TG_MAX_DIMS];
} perm_arg;
static tg_tensor *f_permute(tg_ctx *c, tg_tensor *const *in, void *u) {
    return tg_permute(c, in[0], ((const perm_arg *)u)->perm);
}

START_TEST(test_vs_pytorch) {
    perm_arg a = {{0, 2, 1, 3}}, b = {{3, 1, 0, 2}};
    for (int d = 0; d < 2; d++) {
        const tg_dtype dt = d ? TG_F64 : TG_F32;
        tg_test_op_vs_fixture(ctx, FX, d ? "permute_0213.f64" : "permute_0213.f32", dt, TG_SHAPE(2, 3, 4, 5), f_permute,
                              &a, 0);
        tg_test_op_vs_fixture(ctx, FX, d ? "permute_3102.f64" : "permute_3102.f32", dt, TG_SHAPE(2, 3, 4, 5), f_permute,
                              &b, 0);
        tg_ctx_reset(ctx);
    }
}
END_TEST

START_TEST(test_backward) {
    perm_arg a = {{2, 0, 1}}, b = {{0, 2, 1, 3}};
    tg_tensor *in[1] = {tg_test_smooth_leaf(ctx, TG_SHAPE(2, 3, 4), 1)};
    tg_test_op_gradcheck(ctx, "permute 2,0,1", f_permute, &a, 1, in);
    tg_tensor *in2[1] = {tg_test_smooth_leaf(ctx, TG_SHAPE(2, 3, 2, 4), 2)};
    tg_test_op_gradcheck(ctx, "permute 0,2,1,3", f_permute, &b, 1, in2);
    /* the gradient is dy permuted back: dx = permute(dy, inverse) */
    tg_tensor *x = tg_requires_grad(ctx, tg_randn(ctx, TG_F32, TG_SHAPE(4, 33, 2, 40), 0, 1));
    const int perm[4] = {3, 0, 2, 1}, inv[4] = {1, 3, 2, 0};
    tg_tensor *y = tg_permute(ctx, x, perm);
    tg_tensor *dy = tg_randn(ctx, TG_F32, y->ndim, y->shape, 0, 1);
    tg_backward_ex(ctx, y, dy, false);
    tg_test_assert_same_bits("dx", x->grad, tg_permute(ctx, dy, inv));
}
END_TEST

/* Attention's heads: (B, T, H*D) -> (B, T, H, D) -> (B, H, T, D) and back
 * is the identity, and each head is the slice of channels h*D..h*D+D-1. */
START_TEST(test_heads_round_trip) {
    const int64_t B = 2, T = 5, H = 3, D = 4;
    tg_tensor *x = tg_randn(ctx, TG_F64, TG_SHAPE(B, T, H * D), 0, 1);
    tg_tensor *heads = tg_transpose_dims(ctx, tg_reshape(ctx, x, TG_SHAPE(B, T, H, D)), 1, 2);
    ck_assert_int_eq(heads->shape[1], H);
    ck_assert_int_eq(heads->shape[2], T);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t t = 0; t < T; t++)
                for (int64_t d = 0; d < D; d++)
                    ck_assert(tg_get(ctx, heads, (int64_t[]){b, h, t, d}) ==
                              tg_get(ctx, x, (int64_t[]){b, t, h * D + d}));
    tg_tensor *back = tg_reshape(ctx, tg_permute(ctx, heads, (const int[]){0, 2, 1, 3}), TG_SHAPE(B, T, H * D));
    tg_test_assert_same_bits("round trip", back, x);
}
END_TEST

START_TEST(test_errors) {
    tg_tensor *x = tg_zeros(ctx, TG_F32, TG_SHAPE(2, 3, 4));
    tg_test_assert_fails(ctx, tg_permute(ctx, x, (const int[]){0, 1, 3}), TG_ERR_INDEX, "tg_permute", "(0, 1, 3)",
                         "(2, 3, 4)", "out of range", NULL);
    tg_test_assert_fails(ctx, tg_permute(ctx, x, (const int[]){0, 2, -1}), TG_ERR_INDEX, "tg_permute", "(0, 2, -1)",
                         "repeated", NULL);
    tg_test_assert_fails(ctx, tg_permute(ctx, x, (const int[]){-4, 0, 1}), TG_ERR_INDEX, "tg_permute", "-4", NULL);
    tg_test_assert_fails(ctx, tg_permute(ctx, x, NULL), TG_ERR_NULL, "tg_permute", "'perm'", NULL);
    tg_test_assert_fails(ctx, tg_permute(ctx, NULL, (const int[]){0}), TG_ERR_NULL, "tg_permute", "'x'", NULL);
    tg_test_assert_fails(ctx, tg_transpose_dims(ctx, x, 0, 3), TG_ERR_INDEX, "tg_transpose_dims", "axis 3", "(2, 3, 4)",
                         NULL);
    tg_test_assert_fails(ctx, tg_transpose_dims(ctx, x, -4, 1), TG_ERR_INDEX, "tg_transpose_dims", "axis -4", NULL);
    tg_test_assert_fails(ctx, tg_transpose_dims(ctx, NULL, 0, 1), TG_ERR_NULL, "tg_transpose_dims", "'x'", NULL);
    tg_error(ctx, TG_ERR_VALUE, "test", "first");
    ck_assert_ptr_null(tg_permute(ctx, x, (const int[]){2, 1, 0}));
    ck_assert_str_eq(tg_error_message(ctx), "test: first");
}
END_TEST

Suite *make_ops_permute_suite(void) {
    return tg_test_suite("ops_permute", setup, teardown, test_every_permutation, test_transpose_dims, test_vs_pytorch,
                         test_backward, test_heads_round_trip, test_errors, NULL);
}

int main(void) { return tg_test_run(make_ops_permute_suite()); }

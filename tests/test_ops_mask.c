/* tg_masked_fill, tg_tril, tg_triu: values against PyTorch
 * (tests/fixtures/transformer_ops.txt) and against their definitions over
 * broadcast masks and every diagonal, backward against finite differences
 * and as the same mask applied to dy, attention's causal mask built from
 * them, and every error. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static tg_ctx *ctx;
static void setup(void) { ctx = tg_ctx_new(11); }
static void teardown(void) { tg_ctx_free(ctx); }

static const char FX[] = "transformer_ops.txt";

/* A mask of 0s and 1s (about half each) of the given shape. */
static tg_tensor *rand_mask(tg_dtype dt, int ndim, const int64_t *shape) {
    tg_tensor *m = tg_test_rand(ctx, dt, ndim, shape, 0, 1);
    for (int64_t i = 0; i < m->numel; i++) tg_set_flat(ctx, m, i, tg_get_flat(ctx, m, i) < 0.5 ? 1 : 0);
    return m;
}

START_TEST(test_masked_fill_vs_pytorch) {
    for (int d = 0; d < 2; d++) {
        const tg_dtype dt = d ? TG_F64 : TG_F32;
        const char *dn = d ? "f64" : "f32";
        char name[64];
        snprintf(name, sizeof name, "masked_fill.%s.x", dn);
        tg_tensor *x = tg_requires_grad(ctx, tg_test_fixture_tensor(ctx, FX, name, dt, TG_SHAPE(2, 3, 4)));
        snprintf(name, sizeof name, "masked_fill.%s.mask", dn);
        tg_tensor *m = tg_test_fixture_tensor(ctx, FX, name, dt, TG_SHAPE(3, 4));
        tg_tensor *y = tg_masked_fill(ctx, x, m, -2.5);
        ck_assert_msg(y != NULL, "%s", tg_error_message(ctx));
        snprintf(name, sizeof name, "masked_fill.%s.y", dn);
        tg_test_assert_fixture(ctx, y, FX, name, 0);
        tg_backward_ex(ctx, y, tg_test_fixture_weights(ctx, FX, dt, y->ndim, y->shape), false);
        snprintf(name, sizeof name, "masked_fill.%s.dx", dn);
        tg_test_assert_fixture(ctx, x->grad, FX, name, 0);
        ck_assert(m->grad == NULL); /* the mask gets no gradient */
        tg_ctx_reset(ctx);
    }
}
END_TEST

/* y = mask ? value : x for masks broadcast along leading, inner and both
 * sides, a 0-d mask, and the value -inf; NaN in the mask fills. */
START_TEST(test_masked_fill_broadcast) {
    static const int64_t xs[] = {2, 3, 4, 5};
    static const int64_t ms[][4] = {{2, 3, 4, 5}, {4, 5}, {3, 1, 5}, {1, 3, 4, 1}, {5}, {1}};
    static const int mnd[] = {4, 2, 3, 4, 1, 1};
    for (size_t c = 0; c < sizeof mnd / sizeof mnd[0]; c++) {
        tg_tensor *x = tg_randn(ctx, TG_F64, 4, xs, 0, 1);
        tg_tensor *m = rand_mask(TG_F64, mnd[c], ms[c]);
        tg_tensor *y = tg_masked_fill(ctx, x, m, -INFINITY);
        ck_assert_msg(y != NULL, "%s", tg_error_message(ctx));
        int64_t i[4];
        for (i[0] = 0; i[0] < 2; i[0]++)
            for (i[1] = 0; i[1] < 3; i[1]++)
                for (i[2] = 0; i[2] < 4; i[2]++)
                    for (i[3] = 0; i[3] < 5; i[3]++) {
                        int64_t j[4];
                        for (int d = 0; d < mnd[c]; d++) {
                            int xd = 4 - mnd[c] + d;
                            j[d] = ms[c][d] == 1 ? 0 : i[xd];
                        }
                        double want = tg_get(ctx, m, j) != 0 ? -INFINITY : tg_get(ctx, x, i);
                        ck_assert(tg_get(ctx, y, i) == want);
                    }
    }
    tg_tensor *x = tg_randn(ctx, TG_F32, TG_SHAPE(3), 0, 1);
    tg_tensor *y = tg_masked_fill(ctx, x, tg_full(ctx, TG_F32, 0, NULL, NAN), 1.5);
    for (int64_t i = 0; i < 3; i++) ck_assert(tg_get_flat(ctx, y, i) == 1.5f);
}
END_TEST

/* x filled with 3 where the mask u is nonzero */
static tg_tensor *f_fill(tg_ctx *c, tg_tensor *const *in, void *u) { return tg_masked_fill(c, in[0], u, 3.0); }

START_TEST(test_masked_fill_backward) {
    tg_tensor *in[1] = {tg_test_smooth_leaf(ctx, TG_SHAPE(2, 3, 5, 4), 1)};
    tg_test_op_gradcheck(ctx, "masked_fill", f_fill, rand_mask(TG_F64, TG_SHAPE(3, 1, 4)), 1, in);
    /* dx = dy where the mask is 0: the same as masked_fill(dy, mask, 0) */
    tg_tensor *x = tg_requires_grad(ctx, tg_randn(ctx, TG_F32, TG_SHAPE(4, 33, 20), 0, 1));
    tg_tensor *m = rand_mask(TG_F32, TG_SHAPE(33, 20));
    tg_tensor *dy = tg_randn(ctx, TG_F32, TG_SHAPE(4, 33, 20), 0, 1);
    tg_backward_ex(ctx, tg_masked_fill(ctx, x, m, -INFINITY), dy, false);
    tg_test_assert_same_bits("dx", x->grad, tg_masked_fill(ctx, dy, m, 0));
}
END_TEST

/* tril keeps j - i <= k, triu j - i >= k, over diagonals from far below to
 * far above (empty and whole triangles), batched, non-square. */
START_TEST(test_tri_definition) {
    tg_tensor *x = tg_randn(ctx, TG_F32, TG_SHAPE(2, 4, 6), 0, 1);
    for (int64_t k = -7; k <= 8; k++)
        for (int upper = 0; upper < 2; upper++) {
            tg_tensor *y = upper ? tg_triu(ctx, x, k) : tg_tril(ctx, x, k);
            ck_assert_ptr_nonnull(y);
            for (int64_t b = 0; b < 2; b++)
                for (int64_t i = 0; i < 4; i++)
                    for (int64_t j = 0; j < 6; j++) {
                        bool keep = upper ? j - i >= k : j - i <= k;
                        double want = keep ? tg_get(ctx, x, (int64_t[]){b, i, j}) : 0;
                        ck_assert(tg_get(ctx, y, (int64_t[]){b, i, j}) == want);
                    }
        }
    /* diagonals beyond any int64 sum: empty or whole */
    tg_test_assert_same_bits("tril max", tg_tril(ctx, x, INT64_MAX), x);
    tg_test_assert_same_bits("triu min", tg_triu(ctx, x, INT64_MIN), x);
    tg_test_assert_same_bits("tril min", tg_tril(ctx, x, INT64_MIN), tg_zeros(ctx, TG_F32, TG_SHAPE(2, 4, 6)));
}
END_TEST

static tg_tensor *f_tril(tg_ctx *c, tg_tensor *const *in, void *u) { return tg_tril(c, in[0], *(int64_t *)u); }
static tg_tensor *f_triu(tg_ctx *c, tg_tensor *const *in, void *u) { return tg_triu(c, in[0], *(int64_t *)u); }

START_TEST(test_tri_vs_pytorch_and_backward) {
    static int64_t diag[2] = {1, -1};
    for (int d = 0; d < 2; d++)
        for (int k = 0; k < 2; k++)
            for (int upper = 0; upper < 2; upper++) {
                char prefix[64];
                snprintf(prefix, sizeof prefix, "%s%+lld.%s", upper ? "triu" : "tril", (long long)diag[k],
                         d ? "f64" : "f32");
                tg_test_op_vs_fixture(ctx, FX, prefix, d ? TG_F64 : TG_F32, TG_SHAPE(2, 4, 5), upper ? f_triu : f_tril,
                                      &diag[k], 0);
                tg_ctx_reset(ctx);
            }
    tg_tensor *in[1] = {tg_test_smooth_leaf(ctx, TG_SHAPE(2, 3, 4), 1)};
    tg_test_op_gradcheck(ctx, "tril", f_tril, &diag[0], 1, in);
    tg_test_op_gradcheck(ctx, "triu", f_triu, &diag[1], 1, in);
}
END_TEST

/* The causal mask of attention, as PyTorch users write it: scores masked
 * with triu(ones, 1) and -inf, then softmax, give 0 above the diagonal and
 * rows that sum to 1; tril(ones, 0) is its complement. */
START_TEST(test_causal_mask) {
    const int64_t T = 6;
    tg_tensor *ones = tg_ones(ctx, TG_F64, TG_SHAPE(T, T));
    tg_tensor *mask = tg_triu(ctx, ones, 1);
    tg_tensor *keep = tg_tril(ctx, ones, 0);
    tg_test_assert_same_bits("complement", tg_add(ctx, mask, keep), ones);
    tg_tensor *p =
        tg_softmax(ctx, tg_masked_fill(ctx, tg_randn(ctx, TG_F64, TG_SHAPE(2, T, T), 0, 1), mask, -INFINITY));
    for (int64_t b = 0; b < 2; b++)
        for (int64_t i = 0; i < T; i++) {
            double sum = 0;
            for (int64_t j = 0; j < T; j++) {
                double v = tg_get(ctx, p, (int64_t[]){b, i, j});
                if (j > i) ck_assert(v == 0);
                sum += v;
            }
            ck_assert_double_eq_tol(sum, 1, 1e-15);
        }
}
END_TEST

START_TEST(test_errors) {
    tg_tensor *x = tg_zeros(ctx, TG_F32, TG_SHAPE(2, 3));
    tg_test_assert_fails(ctx, tg_masked_fill(ctx, x, tg_zeros(ctx, TG_F32, TG_SHAPE(4)), 0), TG_ERR_SHAPE,
                         "tg_masked_fill", "(2, 3)", "(4,)", NULL);
    tg_test_assert_fails(ctx, tg_masked_fill(ctx, x, tg_zeros(ctx, TG_F32, TG_SHAPE(5, 2, 3)), 0), TG_ERR_SHAPE,
                         "tg_masked_fill", "(5, 2, 3)", "without growing", NULL);
    tg_test_assert_fails(ctx, tg_masked_fill(ctx, x, tg_zeros(ctx, TG_F64, TG_SHAPE(2, 3)), 0), TG_ERR_DTYPE,
                         "tg_masked_fill", "float64", NULL);
    tg_test_assert_fails(ctx, tg_masked_fill(ctx, NULL, x, 0), TG_ERR_NULL, "tg_masked_fill", "'x'", NULL);
    tg_test_assert_fails(ctx, tg_masked_fill(ctx, x, NULL, 0), TG_ERR_NULL, "tg_masked_fill", "'mask'", NULL);
    tg_tensor *v = tg_zeros(ctx, TG_F32, TG_SHAPE(4));
    tg_test_assert_fails(ctx, tg_tril(ctx, v, 0), TG_ERR_SHAPE, "tg_tril", "(4,)", NULL);
    tg_test_assert_fails(ctx, tg_triu(ctx, v, 0), TG_ERR_SHAPE, "tg_triu", "(4,)", NULL);
    tg_test_assert_fails(ctx, tg_triu(ctx, NULL, 0), TG_ERR_NULL, "tg_triu", "'x'", NULL);
}
END_TEST

Suite *make_ops_mask_suite(void) {
    return tg_test_suite("ops_mask", setup, teardown, test_masked_fill_vs_pytorch, test_masked_fill_broadcast,
                         test_masked_fill_backward, test_tri_definition, test_tri_vs_pytorch_and_backward,
                         test_causal_mask, test_errors, NULL);
}

int main(void) { return tg_test_run(make_ops_mask_suite()); }

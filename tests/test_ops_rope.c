/* tg_rope, rotary position embedding in Meta's LLaMA convention: values
 * and gradients against LLaMA's own code run in PyTorch
 * (tests/fixtures/transformer_ops.txt: (B,T,H,D) with base 10000 and
 * (B,H,T,D) with base 500), the definition by hand (position 0 is the
 * identity, each pair is a rotation by p base^(-2i/D), norms are kept),
 * backward against finite differences and as the inverse rotation, the
 * relative-position property that makes it work in attention, and every
 * error. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static tg_ctx *ctx;
static void setup(void) { ctx = tg_ctx_new(13); }
static void teardown(void) { tg_ctx_free(ctx); }

static const char FX[] = "transformer_ops.txt";

typedef struct rope_arg {
    int axis;
    double base;
} rope_arg;
static tg_tensor *f_rope(tg_ctx *c, tg_tensor *const *in, void *u) {
    const rope_arg *a = u;
    return tg_rope(c, in[0], a->axis, a->base);
}

START_TEST(test_vs_llama_code) {
    rope_arg btd = {1, 10000}, bhtd = {-2, 500};
    for (int d = 0; d < 2; d++) {
        const tg_dtype dt = d ? TG_F64 : TG_F32;
        /* float32: LLaMA computes the angles in float32, we in double */
        const double tol = d ? 1e-14 : 2e-6;
        tg_test_op_vs_fixture(ctx, FX, d ? "rope_btd.f64" : "rope_btd.f32", dt, TG_SHAPE(2, 5, 3, 8), f_rope, &btd,
                              tol);
        tg_test_op_vs_fixture(ctx, FX, d ? "rope_bhtd.f64" : "rope_bhtd.f32", dt, TG_SHAPE(1, 2, 24, 6), f_rope, &bhtd,
                              tol);
        tg_ctx_reset(ctx);
    }
}
END_TEST

/* By hand for (T, D) = (5, 6): pair i of row p is rotated by
 * p * base^(-2i/D); row 0 is unchanged; every pair keeps its length. */
START_TEST(test_definition) {
    const int64_t T = 5, D = 6;
    const double base = 77;
    tg_tensor *x = tg_randn(ctx, TG_F64, TG_SHAPE(T, D), 0, 1);
    tg_tensor *y = tg_rope(ctx, x, 0, base);
    ck_assert_ptr_nonnull(y);
    for (int64_t p = 0; p < T; p++)
        for (int64_t i = 0; i < D / 2; i++) {
            double a = (double)p * pow(base, -2.0 * (double)i / (double)D);
            double x0 = tg_get(ctx, x, (int64_t[]){p, 2 * i}), x1 = tg_get(ctx, x, (int64_t[]){p, 2 * i + 1});
            double y0 = tg_get(ctx, y, (int64_t[]){p, 2 * i}), y1 = tg_get(ctx, y, (int64_t[]){p, 2 * i + 1});
            ck_assert_double_eq_tol(y0, x0 * cos(a) - x1 * sin(a), 1e-15);
            ck_assert_double_eq_tol(y1, x0 * sin(a) + x1 * cos(a), 1e-15);
            ck_assert_double_eq_tol(y0 * y0 + y1 * y1, x0 * x0 + x1 * x1, 1e-14);
            if (p == 0) ck_assert(y0 == x0 && y1 == x1);
        }
}
END_TEST

/* What RoPE is for: the score of a rotated query at position m with a
 * rotated key at position n depends on m - n only. With every row of q
 * equal and every row of k equal, score(m, n) = score(m + s, n + s). */
START_TEST(test_relative_positions) {
    const int64_t T = 12, D = 8;
    tg_tensor *row_q = tg_randn(ctx, TG_F64, TG_SHAPE(1, D), 0, 1),
              *row_k = tg_randn(ctx, TG_F64, TG_SHAPE(1, D), 0, 1);
    tg_tensor *rq = tg_rope(ctx, tg_matmul(ctx, tg_ones(ctx, TG_F64, TG_SHAPE(T, 1)), row_q), 0, 10000);
    tg_tensor *rk = tg_rope(ctx, tg_matmul(ctx, tg_ones(ctx, TG_F64, TG_SHAPE(T, 1)), row_k), 0, 10000);
    tg_tensor *s = tg_matmul(ctx, rq, tg_transpose(ctx, rk));
    for (int64_t m = 0; m + 3 < T; m++)
        for (int64_t n = 0; n + 3 < T; n++)
            ck_assert_double_eq_tol(tg_get(ctx, s, (int64_t[]){m, n}), tg_get(ctx, s, (int64_t[]){m + 3, n + 3}),
                                    1e-12);
}
END_TEST

START_TEST(test_backward) {
    rope_arg a = {-2, 10000}, b = {1, 10};
    tg_tensor *in[1] = {tg_test_smooth_leaf(ctx, TG_SHAPE(2, 2, 5, 4), 1)};
    tg_test_op_gradcheck(ctx, "rope (B,H,T,D)", f_rope, &a, 1, in);
    tg_tensor *in2[1] = {tg_test_smooth_leaf(ctx, TG_SHAPE(2, 4, 3, 2), 2)};
    tg_test_op_gradcheck(ctx, "rope (B,T,H,D)", f_rope, &b, 1, in2);
    /* dx is the inverse rotation of dy: rope(dx) at the same positions is dy */
    tg_tensor *x = tg_requires_grad(ctx, tg_randn(ctx, TG_F64, TG_SHAPE(3, 40, 16), 0, 1));
    tg_tensor *dy = tg_randn(ctx, TG_F64, TG_SHAPE(3, 40, 16), 0, 1);
    tg_backward_ex(ctx, tg_rope(ctx, x, 1, 10000), dy, false);
    tg_test_assert_close_tensors(ctx, "rope(dx) = dy", tg_rope(ctx, x->grad, 1, 10000), dy, 1e-14, 1e-14);
    ck_assert_uint_eq(tg_tape_saved_bytes(ctx), 0); /* saves nothing */
}
END_TEST

START_TEST(test_errors) {
    tg_tensor *x = tg_zeros(ctx, TG_F32, TG_SHAPE(2, 5, 4));
    tg_test_assert_fails(ctx, tg_rope(ctx, tg_zeros(ctx, TG_F32, TG_SHAPE(2, 5, 3)), -2, 10000), TG_ERR_SHAPE,
                         "tg_rope", "(2, 5, 3)", "even", NULL);
    tg_test_assert_fails(ctx, tg_rope(ctx, tg_zeros(ctx, TG_F32, TG_SHAPE(4)), 0, 10000), TG_ERR_SHAPE, "tg_rope",
                         "(4,)", NULL);
    tg_test_assert_fails(ctx, tg_rope(ctx, x, -1, 10000), TG_ERR_INDEX, "tg_rope", "seq_axis -1", "(2, 5, 4)", NULL);
    tg_test_assert_fails(ctx, tg_rope(ctx, x, 2, 10000), TG_ERR_INDEX, "tg_rope", "seq_axis 2", NULL);
    tg_test_assert_fails(ctx, tg_rope(ctx, x, -4, 10000), TG_ERR_INDEX, "tg_rope", "seq_axis -4", NULL);
    tg_test_assert_fails(ctx, tg_rope(ctx, x, 1, 0), TG_ERR_VALUE, "tg_rope", "base = 0", NULL);
    tg_test_assert_fails(ctx, tg_rope(ctx, x, 1, -5), TG_ERR_VALUE, "tg_rope", "base = -5", NULL);
    tg_test_assert_fails(ctx, tg_rope(ctx, x, 1, INFINITY), TG_ERR_VALUE, "tg_rope", "base = inf", NULL);
    tg_test_assert_fails(ctx, tg_rope(ctx, NULL, 1, 10000), TG_ERR_NULL, "tg_rope", "'x'", NULL);
}
END_TEST

Suite *make_ops_rope_suite(void) {
    return tg_test_suite("ops_rope", setup, teardown, test_vs_llama_code, test_definition, test_relative_positions,
                         test_backward, test_errors, NULL);
}

int main(void) { return tg_test_run(make_ops_rope_suite()); }

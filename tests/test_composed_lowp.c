/* The composed norms (layers/composed.c) on bfloat16 / float16: built from
 * 16-bit ops, each computing in float32 and storing its result in the
 * 16-bit dtype, they fail where the fused ops stay right -- the rows of
 * docs/normalization-gradients.md, Low precision, run through the
 * library's own composed twins and fused ops side by side:
 *   float16 RMSNorm (300, -400, 500, 260): x^2 overflows, y = 0;
 *   float16 LayerNorm (-600, 600, -300, 300): (x - mean)^2 overflows, y = 0;
 *   float16 RMSNorm of tiny values, eps = 0: x^2 underflows, y = +-inf, NaN;
 *   bfloat16 LayerNorm of 1000 +- 2: the stored mean is off by 2.
 * On ordinary rows the two agree to a few 16-bit roundings, forward and
 * backward. */
#include <math.h>

#include "testutil.h"

static tg_ctx *ctx;

static void setup(void) { ctx = tg_ctx_new(17); }
static void teardown(void) { tg_ctx_free(ctx); }

/* One row of 4 values in dt through the composed and the fused norm (no
 * gamma, no beta); their outputs, read back as doubles. */
static void both(tg_dtype dt, bool centered, const double *x, double eps, double composed[4], double fused[4]) {
    tg_tensor *t = tg_test_tensor(ctx, dt, TG_SHAPE(1, 4), x);
    tg_tensor *yc = centered ? tg_layernorm_composed(ctx, t, NULL, NULL, 1, eps)
                             : tg_rmsnorm_composed(ctx, t, NULL, NULL, 1, eps);
    tg_tensor *yf =
        centered ? tg_layernorm_fused(ctx, t, NULL, NULL, 1, eps) : tg_rmsnorm_fused(ctx, t, NULL, NULL, 1, eps);
    ck_assert_msg(yc && yf, "%s", tg_error_message(ctx));
    ck_assert_int_eq(yc->dtype, dt);
    ck_assert_int_eq(yf->dtype, dt);
    for (int j = 0; j < 4; j++) composed[j] = tg_get_flat(ctx, yc, j), fused[j] = tg_get_flat(ctx, yf, j);
}

START_TEST(test_f16_large_rows_overflow_in_composed) {
    double c[4], f[4];
    /* rms = sqrt((300^2 + 400^2 + 500^2 + 260^2) / 4) = 376.70 */
    both(TG_F16, false, (const double[]){300, -400, 500, 260}, 1e-5, c, f);
    for (int j = 0; j < 4; j++) ck_assert_msg(c[j] == 0.0, "composed rmsnorm [%d] = %g, not 0", j, c[j]);
    const double rms = sqrt((300.0 * 300 + 400.0 * 400 + 500.0 * 500 + 260.0 * 260) / 4);
    const double x[4] = {300, -400, 500, 260};
    for (int j = 0; j < 4; j++)
        ck_assert_msg(fabs(f[j] - x[j] / rms) <= 0x1p-10 * fabs(x[j] / rms), "fused rmsnorm [%d] = %.6g, exact %.6g",
                      j, f[j], x[j] / rms);
    /* mean 0, variance (600^2 + 600^2 + 300^2 + 300^2) / 4 = 225000 */
    both(TG_F16, true, (const double[]){-600, 600, -300, 300}, 1e-5, c, f);
    for (int j = 0; j < 4; j++) ck_assert_msg(c[j] == 0.0, "composed layernorm [%d] = %g, not 0", j, c[j]);
    ck_assert_msg(fabs(f[0] + 600 / sqrt(225000.0)) < 1e-3 && fabs(f[3] - 300 / sqrt(225000.0)) < 1e-3,
                  "fused layernorm: %g ... %g", f[0], f[3]);
}
END_TEST

START_TEST(test_f16_tiny_row_underflows_in_composed) {
    double c[4], f[4];
    both(TG_F16, false, (const double[]){1e-5, -2e-5, 0, 1.5e-5}, 0.0, c, f);
    ck_assert_msg(isinf(c[0]) && c[0] > 0 && isinf(c[1]) && c[1] < 0 && isnan(c[2]) && isinf(c[3]),
                  "composed: %g %g %g %g (want inf, -inf, nan, inf)", c[0], c[1], c[2], c[3]);
    for (int j = 0; j < 4; j++) ck_assert_msg(isfinite(f[j]), "fused [%d] = %g", j, f[j]);
    ck_assert(f[2] == 0.0 && f[0] > 0.5 && f[1] < -1.0 && f[3] > 0.9);
}
END_TEST

START_TEST(test_bf16_layernorm_large_mean_in_composed) {
    double c[4], f[4];
    /* stored as 1000, 1004, 1000, 1004 (bfloat16's spacing at 1000 is 4) */
    both(TG_BF16, true, (const double[]){999, 1003, 1001, 1005}, 1e-5, c, f);
    ck_assert_msg(c[0] == 0.0 && fabs(c[1] - sqrt(2.0)) < 0.02 && c[2] == 0.0 && fabs(c[3] - sqrt(2.0)) < 0.02,
                  "composed: %g %g %g %g (want 0, 1.41, 0, 1.41: the mean stored as 1000)", c[0], c[1], c[2], c[3]);
    for (int j = 0; j < 4; j++)
        ck_assert_msg(fabs(f[j] - (j % 2 ? 1.0 : -1.0)) < 0.01, "fused [%d] = %g, want %+d", j, f[j], j % 2 ? 1 : -1);
}
END_TEST

/* Ordinary rows with gamma and beta: the composed and fused 16-bit norms
 * agree forward and backward to a few roundings of the dtype (the composed
 * form rounds after each of its ~6 ops). */
START_TEST(test_ordinary_rows_agree_with_fused) {
    const tg_dtype dts[2] = {TG_BF16, TG_F16};
    for (int d = 0; d < 2; d++)
        for (int centered = 0; centered < 2; centered++) {
            const tg_dtype dt = dts[d];
            const double eps_dt = dt == TG_BF16 ? 0x1p-7 : 0x1p-10;
            tg_tensor *x[2], *g[2], *b[2], *y[2];
            for (int k = 0; k < 2; k++) {
                tg_rng_seed(ctx, 5);
                x[k] = tg_requires_grad(ctx, tg_randn(ctx, dt, TG_SHAPE(3, 16), 0.5, 2));
                g[k] = tg_requires_grad(ctx, tg_randn(ctx, dt, TG_SHAPE(16), 1, 0.3));
                b[k] = tg_requires_grad(ctx, tg_randn(ctx, dt, TG_SHAPE(16), 0, 0.3));
                y[k] = k == 0 ? (centered ? tg_layernorm_composed : tg_rmsnorm_composed)(ctx, x[k], g[k], b[k], 1, 1e-5)
                              : (centered ? tg_layernorm_fused : tg_rmsnorm_fused)(ctx, x[k], g[k], b[k], 1, 1e-5);
                tg_backward(ctx, tg_sum(ctx, tg_mul(ctx, y[k], y[k])));
                ck_assert_msg(tg_ok(ctx), "%s", tg_error_message(ctx));
                ck_assert_int_eq(x[k]->grad->dtype, dt);
            }
            const tg_tensor *pairs[4][2] = {{y[0], y[1]}, {x[0]->grad, x[1]->grad}, {g[0]->grad, g[1]->grad},
                                            {b[0]->grad, b[1]->grad}};
            const char *names[4] = {"y", "dx", "dgamma", "dbeta"};
            for (int p = 0; p < 4; p++) {
                double scale = 0;
                for (int64_t i = 0; i < pairs[p][1]->numel; i++)
                    scale = fmax(scale, fabs(tg_get_flat(ctx, pairs[p][1], i)));
                const double tol = 16 * eps_dt * scale;
                for (int64_t i = 0; i < pairs[p][0]->numel; i++) {
                    const double a = tg_get_flat(ctx, pairs[p][0], i), e = tg_get_flat(ctx, pairs[p][1], i);
                    ck_assert_msg(fabs(a - e) <= tol, "%s %s %s [%lld]: composed %g, fused %g (tol %g)",
                                  tg_dtype_name(dt), centered ? "layernorm" : "rmsnorm", names[p], (long long)i, a, e,
                                  tol);
                }
            }
            tg_ctx_reset(ctx);
        }
}
END_TEST

START_TEST(test_mixed_dtypes_refused) {
    tg_tensor *x = tg_randn(ctx, TG_F16, TG_SHAPE(2, 8), 0, 1);
    tg_tensor *g = tg_ones(ctx, TG_F32, TG_SHAPE(8));
    tg_test_assert_fails(ctx, tg_rmsnorm_composed(ctx, x, g, NULL, 1, 1e-5), TG_ERR_DTYPE, "tg_rmsnorm_composed",
                         "float16", "float32", NULL);
    tg_tensor *h = tg_ones(ctx, TG_F16, TG_SHAPE(7));
    tg_test_assert_fails(ctx, tg_layernorm_composed(ctx, x, h, NULL, 1, 1e-5), TG_ERR_SHAPE, "tg_layernorm_composed",
                         "(7,)", "(2, 8)", NULL);
}
END_TEST

Suite *make_composed_lowp_suite(void) {
    return tg_test_suite("composed_lowp", setup, teardown, test_f16_large_rows_overflow_in_composed,
                         test_f16_tiny_row_underflows_in_composed, test_bf16_layernorm_large_mean_in_composed,
                         test_ordinary_rows_agree_with_fused, test_mixed_dtypes_refused, NULL);
}

int main(void) { return tg_test_run(make_composed_lowp_suite()); }

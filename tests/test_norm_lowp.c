/* RMSNorm and LayerNorm on bfloat16 / float16 (layers/norm_lowp.c): the
 * fused ops keep their statistics in float32 or better and round once at
 * the end, so they are right where a composed twin computed op by op in the
 * 16-bit dtype fails -- float16 rows with |x| >= 256 (x^2 overflows) and
 * rows of tiny values (x^2 underflows), a bfloat16 LayerNorm row with a
 * small spread around a large mean. The numbers of
 * docs/normalization-gradients.md, Low precision, come from here. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/half.h"
#include "testutil.h"

static tg_ctx *ctx;

static void setup(void) { ctx = tg_ctx_new(16); }
static void teardown(void) { tg_ctx_free(ctx); }

static double eps_of(tg_dtype dt) { return dt == TG_BF16 ? 0x1p-7 : 0x1p-10; }

/* v rounded to dt and read back: what storing a float32 result does. */
static float rnd(tg_dtype dt, double v) {
    return dt == TG_BF16 ? tg_bf16_to_f32(tg_f32_to_bf16((float)v)) : tg_f16_to_f32(tg_f32_to_f16((float)v));
}

/* The composed twin as PyTorch runs it on a 16-bit tensor: every op
 * computes in float32 and stores its result in dt (reductions accumulate in
 * float32, then store):
 *   RMSNorm:   y = x * rsqrt(mean(x^2) + eps)
 *   LayerNorm: d = x - mean(x);  y = d * rsqrt(mean(d^2) + eps)
 * One row of C values. */
static void twin(tg_dtype dt, bool centered, const float *x, int C, double eps, float *y) {
    float mu = 0, d[64], s = 0;
    if (centered) {
        float sum = 0;
        for (int j = 0; j < C; j++) sum += x[j];
        mu = rnd(dt, sum / (float)C);
    }
    for (int j = 0; j < C; j++) d[j] = rnd(dt, x[j] - mu);
    for (int j = 0; j < C; j++) s += rnd(dt, d[j] * d[j]); /* the square is an op: stored in dt */
    float ms = rnd(dt, s / (float)C);
    float r = rnd(dt, 1.0f / sqrtf(rnd(dt, ms + (float)rnd(dt, eps))));
    for (int j = 0; j < C; j++) y[j] = rnd(dt, d[j] * r);
}

/* The fused op on one 16-bit row (no gamma, no beta); its values in y. */
static void fused(tg_dtype dt, bool centered, const float *x, int C, double eps, float *y) {
    double v[64];
    for (int j = 0; j < C; j++) v[j] = x[j];
    tg_tensor *t = tg_test_tensor(ctx, dt, TG_SHAPE(1, C), v);
    tg_tensor *out =
        centered ? tg_layernorm_fused(ctx, t, NULL, NULL, 1, eps) : tg_rmsnorm_fused(ctx, t, NULL, NULL, 1, eps);
    ck_assert_msg(out && tg_ok(ctx), "%s", tg_error_message(ctx));
    ck_assert_int_eq(out->dtype, dt);
    for (int j = 0; j < C; j++) y[j] = (float)tg_get_flat(ctx, out, j);
}

/* The exact answer in float64 from the row's (16-bit) values. */
static void exact(bool centered, const float *x, int C, double eps, double *y) {
    double v[64];
    for (int j = 0; j < C; j++) v[j] = x[j];
    double xhat[64];
    tg_test_norm_ref(centered, v, NULL, NULL, 1, C, eps, xhat, y);
}

/* Asserts the fused row is the exact one rounded once (within one ulp of
 * dt: |y - ref| <= eps |ref|). */
static void assert_right(const char *what, tg_dtype dt, const float *y, const double *ref, int C) {
    for (int j = 0; j < C; j++)
        ck_assert_msg(fabs(y[j] - ref[j]) <= eps_of(dt) * fabs(ref[j]) + 1e-30, "%s [%d]: %.6g, exact %.6g", what, j,
                      (double)y[j], ref[j]);
}

/* A float16 row of large values: in the twin x^2 (RMSNorm) or (x - mean)^2
 * (LayerNorm) reaches 65536 and overflows float16 (max 65504), the mean of
 * squares is inf, rsqrt gives 0 and y = 0 everywhere; the fused op gives
 * the exact answer rounded once. */
static void check_large_row(bool centered, const float *x, float y0) {
    float yt[4], yf[4];
    double ref[4];
    twin(TG_F16, centered, x, 4, 1e-5, yt);
    fused(TG_F16, centered, x, 4, 1e-5, yf);
    exact(centered, x, 4, 1e-5, ref);
    for (int j = 0; j < 4; j++)
        ck_assert_msg(yt[j] == 0.0f, "twin [%d] = %g, expected 0 (the square overflowed)", j, yt[j]);
    assert_right(centered ? "fused f16 layernorm, |x - mean| >= 256" : "fused f16 rmsnorm, |x| >= 256", TG_F16, yf, ref,
                 4);
    ck_assert(fabs(yf[0] - y0) < 1e-3);
}

/* RMSNorm (300, -400, 500, 260): y_0 is 0 in the twin, 0.7964 fused
 * (exact 0.79640); LayerNorm (-600, 600, -300, 300): y_0 = -1.265. */
START_TEST(test_f16_large_rows) {
    check_large_row(false, (const float[]){300, -400, 500, 260}, 0.79640f);
    check_large_row(true, (const float[]){-600, 600, -300, 300}, -1.26491f);
}
END_TEST

/* float16 RMSNorm of tiny values: x^2 underflows (x = 1e-5: 1e-10 is below
 * float16's smallest subnormal 6e-8), so with eps = 0 the twin's mean of
 * squares is 0, rsqrt gives inf, y = +-inf, and NaN (0 * inf) for a zero
 * element. The fused op gives x / rms. (With eps = 1e-5 both are about
 * x / sqrt(eps): eps dwarfs mean(x^2) = 2e-10, and the underflow does not
 * show; float16 cannot hold an eps below 6e-8.) */
START_TEST(test_f16_rmsnorm_tiny_row) {
    const float x[4] = {rnd(TG_F16, 1e-5), rnd(TG_F16, -2e-5), 0.0f, rnd(TG_F16, 1.5e-5)};
    float yt[4], yf[4];
    double ref[4];
    twin(TG_F16, false, x, 4, 0.0, yt);
    ck_assert(isinf(yt[0]) && yt[0] > 0 && isinf(yt[1]) && yt[1] < 0 && isnan(yt[2]) && isinf(yt[3]));
    fused(TG_F16, false, x, 4, 0.0, yf);
    exact(false, x, 4, 0.0, ref);
    assert_right("fused f16 rmsnorm, tiny row, eps 0", TG_F16, yf, ref, 4);
    ck_assert(yf[2] == 0.0f);
}
END_TEST

/* bfloat16 LayerNorm of 1000 +- 2: at 1000 bfloat16's spacing is 4, so the
 * row stores as 1000, 1004, 1000, 1004, whose mean 1002 is not a bfloat16;
 * the twin's stored mean (1000, ties to even) shifts every deviation by 2:
 * deviations 0, 4, 0, 4, variance 8 instead of 4, y = 0, 1.41, 0, 1.41
 * instead of -1, 1, -1, 1. The fused op keeps the mean in double. */
START_TEST(test_bf16_layernorm_large_mean) {
    const float x[4] = {rnd(TG_BF16, 999), rnd(TG_BF16, 1003), rnd(TG_BF16, 1001), rnd(TG_BF16, 1005)};
    ck_assert(x[0] == 1000 && x[1] == 1004 && x[2] == 1000 && x[3] == 1004);
    float yt[4], yf[4];
    double ref[4];
    twin(TG_BF16, true, x, 4, 1e-5, yt);
    fused(TG_BF16, true, x, 4, 1e-5, yf);
    exact(true, x, 4, 1e-5, ref);
    assert_right("fused bf16 layernorm, mean 1002, spread 2", TG_BF16, yf, ref, 4);
    ck_assert(fabs(yf[0] + 1) < 0.01 && fabs(yf[1] - 1) < 0.01);
    ck_assert_msg(yt[0] == 0.0f && fabs(yt[1] - 1.4142) < 0.02, "twin: %g %g %g %g", yt[0], yt[1], yt[2], yt[3]);
}
END_TEST

/* Ordinary rows with gamma and beta: the fused 16-bit op is the float64
 * answer on the 16-bit values rounded once. */
START_TEST(test_forward_rounded_once) {
    tg_dtype dts[2] = {TG_BF16, TG_F16};
    for (int d = 0; d < 2; d++)
        for (int centered = 0; centered < 2; centered++) {
            tg_dtype dt = dts[d];
            const int N = 5, C = 24;
            tg_tensor *x = tg_randn(ctx, dt, TG_SHAPE(N, C), 0.5, 2);
            tg_tensor *g = tg_randn(ctx, dt, TG_SHAPE(C), 1, 0.5), *b = tg_randn(ctx, dt, TG_SHAPE(C), 0, 0.5);
            tg_tensor *y =
                centered ? tg_layernorm_fused(ctx, x, g, b, 1, 1e-5) : tg_rmsnorm_fused(ctx, x, g, b, 1, 1e-5);
            ck_assert_msg(tg_ok(ctx), "%s", tg_error_message(ctx));
            double *xv = tg_test_values(ctx, x), *gv = tg_test_values(ctx, g), *bv = tg_test_values(ctx, b);
            double *xhat = malloc(sizeof(double) * N * C), *ref = malloc(sizeof(double) * N * C);
            tg_test_norm_ref(centered, xv, gv, bv, N, C, 1e-5, xhat, ref);
            for (int i = 0; i < N * C; i++) {
                double got = tg_get_flat(ctx, y, i);
                /* one rounding (eps/2 relative), plus float32 arithmetic on values of size |g xhat| + |b| */
                double tol = eps_of(dt) / 2 * fabs(ref[i]) + 1e-5 * (fabs(gv[i % C] * xhat[i]) + fabs(bv[i % C]));
                ck_assert_msg(fabs(got - ref[i]) <= tol, "%s %s [%d]: %g, exact %g", tg_dtype_name(dt),
                              centered ? "layernorm" : "rmsnorm", i, got, ref[i]);
            }
            free(xv), free(gv), free(bv), free(xhat), free(ref);
        }
}
END_TEST

/* The backward, by tg_gradcheck_lowp: the 16-bit gradients of the fused op
 * against the float64 op's from the same values, within 16 eps. */
static tg_tensor *norm_f(tg_ctx *c, tg_tensor *const *in, void *user) {
    bool centered = *(int *)user;
    return centered ? tg_layernorm_fused(c, in[0], in[1], in[2], 1, 1e-5)
                    : tg_rmsnorm_fused(c, in[0], in[1], in[2], 1, 1e-5);
}

START_TEST(test_backward_vs_f64) {
    tg_dtype dts[2] = {TG_BF16, TG_F16};
    for (int d = 0; d < 2; d++)
        for (int centered = 0; centered < 2; centered++) {
            tg_tensor *in[3] = {tg_randn(ctx, TG_F64, TG_SHAPE(6, 32), 0.3, 1.5),
                                tg_randn(ctx, TG_F64, TG_SHAPE(32), 1, 0.3),
                                tg_randn(ctx, TG_F64, TG_SHAPE(32), 0, 0.3)};
            tg_gradcheck_lowp_result r;
            bool pass = tg_gradcheck_lowp(ctx, norm_f, &centered, 3, in, dts[d], 0, &r);
            ck_assert_msg(tg_ok(ctx), "%s", tg_error_message(ctx));
            ck_assert_msg(pass, "%s %s: max_err %g > tol %g (input %d [%lld]: %g vs %g)", tg_dtype_name(dts[d]),
                          centered ? "layernorm" : "rmsnorm", r.max_err, r.tol, r.worst_input, (long long)r.worst_index,
                          r.worst_lowp, r.worst_f64);
        }
}
END_TEST

/* Mixing dtypes stays an error; the float32 path is untouched. */
START_TEST(test_errors) {
    tg_tensor *x = tg_ones(ctx, TG_BF16, TG_SHAPE(2, 4)), *g32 = tg_ones(ctx, TG_F32, TG_SHAPE(4));
    tg_test_assert_fails(ctx, tg_rmsnorm_fused(ctx, x, g32, NULL, 1, 1e-5), TG_ERR_DTYPE, "tg_rmsnorm_fused",
                         "bfloat16 and float32", NULL);
    tg_tensor *g = tg_ones(ctx, TG_BF16, TG_SHAPE(3));
    tg_test_assert_fails(ctx, tg_layernorm_fused(ctx, x, g, NULL, 1, 1e-5), TG_ERR_SHAPE, "tg_layernorm_fused", NULL);
    tg_test_assert_fails(ctx, tg_layernorm_fused(ctx, x, NULL, NULL, 1, -1), TG_ERR_VALUE, "tg_layernorm_fused", "eps",
                         NULL);
}
END_TEST

Suite *make_norm_lowp_suite(void) {
    return tg_test_suite("norm_lowp", setup, teardown, test_f16_large_rows, test_f16_rmsnorm_tiny_row,
                         test_bf16_layernorm_large_mean, test_forward_rounded_once, test_backward_vs_f64, test_errors,
                         NULL);
}

int main(void) { return tg_test_run(make_norm_lowp_suite()); }

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

#include "layers/norm_kernels.h"
#include "layers/norm_kernels_util.h"
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

/* ---- the one-pass 16-bit kernels against widen-then-float32, bit for bit
 * The 16-bit norms widen one row at a time into a float32 row buffer and
 * run the float32 row code there (layers/norm_reduce.inc). Their output
 * must be, bit for bit, what widening whole tensors into float32 copies,
 * running the float32 kernels (layers/norm_kernels.h) and rounding once
 * gives: y = round(norm_f32(x)); after each backward dx = round(dx +
 * dx_f32), dgamma = round(dgamma + dgamma_f32) (each sum in float32). Row
 * lengths around the 16-float SIMD width and the 32-lane sums, a chunked
 * and a wide (direct-mode, column-parallel) backward, 1 and 2 threads, with
 * and without gamma and beta, and rows that take the float32 kernels' rare
 * paths (rescaled rows, r outside [2^-120, 2^120]). */

static uint16_t to16(tg_dtype dt, float v) { return dt == TG_BF16 ? tg_f32_to_bf16(v) : tg_f32_to_f16(v); }
static float from16(tg_dtype dt, uint16_t h) { return dt == TG_BF16 ? tg_bf16_to_f32(h) : tg_f16_to_f32(h); }

/* Uniform in [-1, 1), a fixed sequence (no dependence on the libc). */
static double urand(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return (double)(*s >> 8) / (double)(1u << 23) - 1.0;
}

/* An (N, C) 16-bit tensor of random rows: row n has mean (n % 3) and
 * spread 1 + n % 4, times scale; in x (extremes), row 1 is scaled up and
 * row 2 down to where the float32 kernels rescale it or leave float's
 * comfortable range (bfloat16: 2^100 and 2^-100; float16: 300, whose
 * square overflows float16, and 2^-10). N = 0: a (C) tensor of one such
 * row. */
static tg_tensor *rand16(tg_dtype dt, int64_t N, int64_t C, uint32_t *seed, bool extremes, double scale) {
    const bool vec = N == 0;
    if (vec) N = 1;
    double *v = malloc(sizeof(double) * (size_t)(N * C));
    for (int64_t n = 0; n < N; n++) {
        double sc = scale;
        if (extremes && n == 1) sc = dt == TG_BF16 ? 0x1p100 : 300.0;
        if (extremes && n == 2) sc = dt == TG_BF16 ? 0x1p-100 : 0x1p-10;
        for (int64_t j = 0; j < C; j++) v[n * C + j] = sc * ((double)(n % 3) + (1.0 + (double)(n % 4)) * urand(seed));
    }
    tg_tensor *t = vec ? tg_test_tensor(ctx, dt, 1, (const int64_t[]){C}, v)
                       : tg_test_tensor(ctx, dt, 2, (const int64_t[]){N, C}, v);
    free(v);
    return t;
}

static float *widen16(const tg_tensor *t) {
    float *w = malloc(sizeof(float) * (size_t)(t->numel ? t->numel : 1));
    const uint16_t *h = t->data;
    for (int64_t i = 0; i < t->numel; i++) w[i] = from16(t->dtype, h[i]);
    return w;
}

/* Asserts the 16-bit tensor t holds the bits of ref (float32 values to
 * round, or already rounded when acc is NULL; with acc: round(acc + ref),
 * acc updated to the rounded value). */
static void assert_bits(const char *what, const tg_tensor *t, const float *ref, float *acc, const char *cfg) {
    const uint16_t *h = t->data;
    for (int64_t i = 0; i < t->numel; i++) {
        float v = acc ? acc[i] + ref[i] : ref[i];
        uint16_t want = to16(t->dtype, v);
        if (acc) acc[i] = from16(t->dtype, want);
        if (h[i] != want)
            ck_abort_msg("%s (%s) [%lld]: 0x%04x, widen-then-float32 gives 0x%04x", what, cfg, (long long)i, h[i],
                         want);
    }
}

/* gdy_scale scales gamma and dy (1: ordinary values). */
static void check_one_pass_scaled(tg_dtype dt, bool centered, int64_t N, int64_t C, int affine, int threads,
                                  uint32_t *seed, double gdy_scale) {
    char cfg[128];
    snprintf(cfg, sizeof cfg, "%s %s N=%lld C=%lld affine=%d threads=%d", tg_dtype_name(dt),
             centered ? "layernorm" : "rmsnorm", (long long)N, (long long)C, affine, threads);
    tg_set_threads(ctx, threads);
    const double eps = 1e-5;
    tg_tensor *x = tg_requires_grad(ctx, rand16(dt, N, C, seed, true, 1.0));
    tg_tensor *g = affine >= 1 ? tg_requires_grad(ctx, rand16(dt, 0, C, seed, false, gdy_scale)) : NULL;
    tg_tensor *b = affine >= 2 ? tg_requires_grad(ctx, rand16(dt, 0, C, seed, false, 1.0)) : NULL;
    tg_tensor *dy = rand16(dt, N, C, seed, false, gdy_scale);
    tg_tensor *y = centered ? tg_layernorm_fused(ctx, x, g, b, 1, eps) : tg_rmsnorm_fused(ctx, x, g, b, 1, eps);
    ck_assert_msg(y && tg_ok(ctx), "%s: %s", cfg, tg_error_message(ctx));

    /* widen-then-float32 */
    float *xw = widen16(x), *gw = g ? widen16(g) : NULL, *bw = b ? widen16(b) : NULL, *dyw = widen16(dy);
    float *y32 = calloc((size_t)(N * C), sizeof(float)), *dx32 = calloc((size_t)(N * C), sizeof(float));
    float *dg32 = calloc((size_t)C, sizeof(float)), *db32 = calloc((size_t)C, sizeof(float));
    float *dxa = calloc((size_t)(N * C), sizeof(float)), *dga = calloc((size_t)C, sizeof(float));
    float *dba = calloc((size_t)C, sizeof(float));
    double *mean = malloc(sizeof(double) * (size_t)N), *rstd = malloc(sizeof(double) * (size_t)N);
    if (centered) {
        tg_layernorm_forward_f32(y32, mean, rstd, xw, gw, bw, N, C, eps, threads);
        tg_layernorm_backward_f32(dx32, g ? dg32 : NULL, b ? db32 : NULL, dyw, xw, gw, mean, rstd, N, C, threads);
    } else {
        tg_rmsnorm_forward_f32(y32, rstd, xw, gw, bw, N, C, eps, threads);
        tg_rmsnorm_backward_f32(dx32, g ? dg32 : NULL, b ? db32 : NULL, dyw, xw, gw, rstd, N, C, threads);
    }
    assert_bits("y", y, y32, NULL, cfg);
    /* two backwards: the second adds into the 16-bit grads the first left */
    for (int pass = 0; pass < 2; pass++) {
        tg_backward_ex(ctx, y, dy, true);
        ck_assert_msg(tg_ok(ctx), "%s: %s", cfg, tg_error_message(ctx));
        assert_bits(pass ? "dx, second backward" : "dx", x->grad, dx32, dxa, cfg);
        if (g) assert_bits(pass ? "dgamma, second backward" : "dgamma", g->grad, dg32, dga, cfg);
        if (b) assert_bits(pass ? "dbeta, second backward" : "dbeta", b->grad, db32, dba, cfg);
    }
    free(xw), free(gw), free(bw), free(dyw), free(y32), free(dx32), free(dg32), free(db32);
    free(dxa), free(dga), free(dba), free(mean), free(rstd);
    tg_ctx_reset(ctx);
}

static void check_one_pass(tg_dtype dt, bool centered, int64_t N, int64_t C, int affine, int threads, uint32_t *seed) {
    check_one_pass_scaled(dt, centered, N, C, affine, threads, seed, 1.0);
}

START_TEST(test_one_pass_bits) {
    static const int64_t Cs[] = {1, 2, 3, 5, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 200, 257, 768, 1000};
    const tg_dtype dts[2] = {TG_BF16, TG_F16};
    uint32_t seed = 2024;
    /* with the CPU's conversion instructions (when it has them), then with
     * the scalar bit manipulation of tensor/half.h */
    for (int scalar = 0; scalar < 2; scalar++) {
        tg_half_force_scalar(scalar == 1);
        for (int d = 0; d < 2; d++)
            for (int centered = 0; centered < 2; centered++) {
                for (size_t i = 0; i < sizeof Cs / sizeof *Cs; i++)
                    for (int affine = 0; affine < 3; affine++)
                        /* 37 rows: three chunks of dg/db partials; wide
                         * rows with 2 threads: the row-parallel forward */
                        check_one_pass(dts[d], centered, Cs[i] >= 768 ? 50 : 37, Cs[i], affine, 1 + (int)(i % 2),
                                       &seed);
                /* rows too wide for the partials: the direct mode, and with
                 * 2 threads its column-parallel dg/db phase (N C >= 32768) */
                for (int threads = 1; threads <= 2; threads++)
                    check_one_pass(dts[d], centered, 9, 4100, 2, threads, &seed);
            }
    }
    tg_half_force_scalar(false);
}
END_TEST

/* Subnormal results: bfloat16 keeps float32's subnormals, and a gamma of
 * size 2^-128 makes y subnormal, without gamma a dy of that size makes dx
 * subnormal; float16's subnormals lie below 2^-14, reached by a scale of
 * 2^-16. The 16-bit kernels round blocks of 32 values at once, with
 * AVX-512 BF16's VCVTNE2PS2BF16 where the build targets it, which reads a
 * subnormal float32 as zero (such a block takes the scalar rule), and with
 * F16C's VCVTPS2PH for float16; the bits stay those of widen-then-float32
 * (with the CPU's conversions and forced scalar ones). */
START_TEST(test_subnormal_bits) {
    uint32_t seed = 7;
    for (int scalar = 0; scalar < 2; scalar++) {
        tg_half_force_scalar(scalar == 1);
        for (int d = 0; d < 2; d++)
            for (int centered = 0; centered < 2; centered++)
                for (int affine = 0; affine < 3; affine++)
                    for (int64_t C = 64; C <= 200; C += 136)
                        check_one_pass_scaled(d ? TG_F16 : TG_BF16, centered, 37, C, affine, 1, &seed,
                                              d ? 0x1p-16 : 0x1p-128);
    }
    tg_half_force_scalar(false);
}
END_TEST

/* The float16 kernels widen with a branch-free copy of tensor/half.h's
 * tg_f16_to_f32 (layers/norm_kernels_util.h, so that the compiler
 * vectorizes it): the same bits for all 65536 values, NaNs (made quiet),
 * infinities, subnormals and signed zeros included. */
START_TEST(test_f16_widen_all) {
    for (uint32_t h = 0; h <= 0xffffu; h++) {
        const uint32_t got = tg_f32_bits(tg_norm_f16_to_f32((uint16_t)h));
        const uint32_t want = tg_f32_bits(tg_f16_to_f32((uint16_t)h));
        if (got != want) ck_abort_msg("float16 0x%04x: 0x%08x, tg_f16_to_f32 gives 0x%08x", h, got, want);
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
                         test_bf16_layernorm_large_mean, test_forward_rounded_once, test_backward_vs_f64,
                         test_one_pass_bits, test_subnormal_bits, test_f16_widen_all, test_errors, NULL);
}

int main(void) { return tg_test_run(make_norm_lowp_suite()); }

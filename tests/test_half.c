/* bfloat16 and float16: the conversions of tensor/half.h and tensor/convert.c
 * against references written from the formats' definitions (values as
 * sign * mantissa * 2^exponent, rounding as "the nearest value, ties to the
 * even pattern"), over every 16-bit pattern and a large set of float32
 * values (ties, subnormals, NaN, inf, overflow); the vector-instruction
 * path and the scalar path give the same bits; tensors of the two dtypes:
 * creation, tg_to_dtype, element access, printing as PyTorch prints them,
 * the refusal of ops without a low-precision path, and tg_cast; BF16 and F16
 * safetensors checkpoints (converted on save and on load, refused without
 * conversion) and, driven by scripts/interop_torch.py, PyTorch's files. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"
#include "tensor/half.h"
#include "testutil.h"

/* ck_assert_msg marks a point on every call (slow over millions of values):
 * check first, then fail through it. */
#define CHECK(expr, ...)                               \
    do {                                               \
        if (!(expr)) ck_assert_msg(expr, __VA_ARGS__); \
    } while (0)

static tg_ctx *ctx;

static void setup(void) { ctx = tg_ctx_new(16); }
static void teardown(void) {
    tg_half_force_scalar(false);
    tg_ctx_free(ctx);
}

/* ---- the formats, from their definitions ------------------------------------ */

typedef struct format {
    const char *name;
    int ebits, mbits; /* exponent and mantissa widths */
    float (*to_f32)(uint16_t);
    uint16_t (*from_f32)(float);
    void (*to_f32_n)(float *, const uint16_t *, size_t);
    void (*from_f32_n)(uint16_t *, const float *, size_t);
} format;

static const format BF16 = {"bfloat16", 8, 7, tg_bf16_to_f32, tg_f32_to_bf16, tg_bf16_to_f32_n, tg_f32_to_bf16_n};
static const format F16 = {"float16", 5, 10, tg_f16_to_f32, tg_f32_to_f16, tg_f16_to_f32_n, tg_f32_to_f16_n};

/* The value of a non-NaN pattern: (-1)^s * m * 2^(1-bias-mbits) when the
 * exponent field is 0, (-1)^s * (2^mbits + m) * 2^(e-bias-mbits) otherwise;
 * the all-ones exponent with m = 0 is infinity. */
static double ref_value(const format *f, uint16_t h) {
    int bias = (1 << (f->ebits - 1)) - 1, emax = (1 << f->ebits) - 1;
    int s = h >> 15, e = (h >> f->mbits) & emax, m = h & ((1 << f->mbits) - 1);
    double v = e == emax ? INFINITY
               : e == 0  ? ldexp(m, 1 - bias - f->mbits)
                         : ldexp((1 << f->mbits) + m, e - bias - f->mbits);
    return s ? -v : v;
}
static bool ref_is_nan(const format *f, uint16_t h) {
    int emax = (1 << f->ebits) - 1;
    return ((h >> f->mbits) & emax) == emax && (h & ((1 << f->mbits) - 1)) != 0;
}
static uint32_t bits_of(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

/* The pattern nearest |x| for a finite float32 x, by binary search over the
 * values of the patterns 0 .. inf (patterns of one sign are ordered like
 * their values); inf counts as the value 2^(emax+1) for rounding, so a value
 * at least half an ulp past the largest finite rounds to it. Ties go to the
 * even pattern. */
static uint16_t ref_round(const format *f, float x) {
    int bias = (1 << (f->ebits - 1)) - 1;
    uint16_t inf = (uint16_t)(((1 << f->ebits) - 1) << f->mbits);
    double a = fabs((double)x), inf_value = ldexp(1.0, bias + 1);
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    if (isinf(x) || a >= inf_value) return sign | inf;
    int lo = 0, hi = inf; /* value(lo) <= a < value(hi) */
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (ref_value(f, (uint16_t)mid) <= a) lo = mid;
        else hi = mid;
    }
    double vlo = ref_value(f, (uint16_t)lo), vhi = hi == inf ? inf_value : ref_value(f, (uint16_t)hi);
    int pick = a - vlo < vhi - a ? lo : a - vlo > vhi - a ? hi : (lo % 2 == 0 ? lo : hi);
    return (uint16_t)(sign | pick);
}

/* A NaN result: NaN, the sign of x, quiet, and x's payload cut to the
 * format's mantissa (its top bits). */
static void check_nan(const format *f, float x, uint16_t got) {
    uint32_t u = bits_of(x);
    CHECK(ref_is_nan(f, got), "%s: NaN 0x%08x gave 0x%04x, not a NaN", f->name, u, got);
    CHECK((got >> 15) == (u >> 31), "%s: NaN 0x%08x lost its sign (0x%04x)", f->name, u, got);
    uint32_t quiet = 1u << (f->mbits - 1), mask = (1u << f->mbits) - 1;
    CHECK((got & quiet) != 0, "%s: NaN 0x%08x gave a signalling NaN 0x%04x", f->name, u, got);
    uint32_t payload = (u & 0x7fffffu) >> (23 - f->mbits);
    CHECK(((got & mask) | quiet) == (payload | quiet), "%s: NaN 0x%08x payload -> 0x%04x", f->name, u, got);
}

/* ---- to float32: every pattern ------------------------------------------------ */

static void check_to_f32(const format *f) {
    uint16_t *h = tg_test_malloc(65536 * sizeof *h);
    float *native = tg_test_malloc(65536 * sizeof *native), *scalar = tg_test_malloc(65536 * sizeof *scalar);
    for (int i = 0; i < 65536; i++) h[i] = (uint16_t)i;
    tg_half_force_scalar(false);
    f->to_f32_n(native, h, 65536 - 3); /* an odd length: the tail takes the scalar loop */
    f->to_f32_n(native + 65533, h + 65533, 3);
    tg_half_force_scalar(true);
    f->to_f32_n(scalar, h, 65536);
    tg_half_force_scalar(false);
    for (int i = 0; i < 65536; i++) {
        float one = f->to_f32(h[i]);
        CHECK(bits_of(one) == bits_of(native[i]) && bits_of(one) == bits_of(scalar[i]),
              "%s 0x%04x: scalar 0x%08x, array 0x%08x, forced scalar 0x%08x", f->name, i, bits_of(one),
              bits_of(native[i]), bits_of(scalar[i]));
        if (ref_is_nan(f, h[i])) {
            uint32_t u = bits_of(one), m = (uint32_t)(i & ((1 << f->mbits) - 1)), top = u & 0x7fffffu;
            CHECK(isnan(one) && (u >> 31) == (uint32_t)(i >> 15), "%s 0x%04x: NaN lost", f->name, i);
            /* the payload sits at the top of float32's mantissa (made quiet for float16) */
            CHECK((top >> (23 - f->mbits)) == m || (top >> (23 - f->mbits)) == (m | (1u << (f->mbits - 1))),
                  "%s 0x%04x: payload -> 0x%08x", f->name, i, u);
        } else {
            double ref = ref_value(f, h[i]);
            CHECK((double)one == ref && !signbit(one) == !signbit(ref), "%s 0x%04x: %a, not %a", f->name, i,
                  (double)one, ref);
            /* and back: every value converts to its own pattern */
            CHECK(f->from_f32(one) == h[i], "%s 0x%04x does not round trip", f->name, i);
        }
    }
    free(h);
    free(native);
    free(scalar);
}

START_TEST(test_bf16_to_f32_all_patterns) { check_to_f32(&BF16); }
END_TEST

START_TEST(test_f16_to_f32_all_patterns) { check_to_f32(&F16); }
END_TEST

/* ---- from float32: a large set --------------------------------------------------- */

static uint64_t lcg = 0x9e3779b97f4a7c15u;
static uint32_t next_random(void) {
    lcg = lcg * 6364136223846793005u + 1442695040888963407u;
    return (uint32_t)(lcg >> 32);
}

/* The float32 values tested: every upper half with low halves at and around
 * bfloat16's tie (0x8000); every float16 value and the midpoints between
 * neighbours (ties, including those of the subnormals and the overflow
 * threshold 65520) and the float32 values either side of them; zeros,
 * infinities, NaNs (quiet, signalling, with payloads, both signs); float32
 * subnormals; and a million random bit patterns. */
static float *test_values(size_t *n) {
    size_t cap = 65536 * 6 + 65536 * 6 + 1000000 + 64, k = 0;
    float *v = tg_test_malloc(cap * sizeof *v);
    static const uint32_t lows[] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff};
    for (uint32_t hi = 0; hi < 65536; hi++)
        for (size_t j = 0; j < 6; j++) {
            uint32_t u = hi << 16 | lows[j];
            memcpy(&v[k++], &u, 4);
        }
    for (int h = 0; h < 0x7c00; h++) {
        double a = ref_value(&F16, (uint16_t)h), b = h == 0x7bff ? 65536.0 : ref_value(&F16, (uint16_t)(h + 1));
        float mid = (float)((a + b) / 2); /* exact: 12 significant bits */
        float vals[3] = {mid, nextafterf(mid, 0), nextafterf(mid, INFINITY)};
        for (int j = 0; j < 3; j++) {
            v[k++] = vals[j];
            v[k++] = -vals[j];
        }
    }
    static const uint32_t special[] = {0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00000,
                                       0x7f800001, 0xff800001, 0x7fa00000, 0x7fbfffff, 0x7fffffff, 0x00000001,
                                       0x807fffff, 0x00400000, 0x33000000, 0x33000001, 0x32ffffff, 0x477fefff,
                                       0x477ff000, 0x477ff001, 0x7f7fffff, 0x7f7f8000, 0x7f7f7fff, 0x38800000};
    for (size_t j = 0; j < sizeof special / sizeof *special; j++) memcpy(&v[k++], &special[j], 4);
    for (int j = 0; j < 1000000; j++) {
        uint32_t u = next_random();
        memcpy(&v[k++], &u, 4);
    }
    *n = k;
    return v;
}

static void check_from_f32(const format *f) {
    size_t n;
    float *x = test_values(&n);
    uint16_t *native = tg_test_malloc(n * sizeof *native), *scalar = tg_test_malloc(n * sizeof *scalar);
    tg_half_force_scalar(false);
    f->from_f32_n(native, x, n - 5); /* an odd split: the tails take the scalar loop */
    f->from_f32_n(native + n - 5, x + n - 5, 5);
    tg_half_force_scalar(true);
    f->from_f32_n(scalar, x, n);
    tg_half_force_scalar(false);
    for (size_t i = 0; i < n; i++) {
        uint16_t one = f->from_f32(x[i]);
        CHECK(one == native[i] && one == scalar[i],
              "%s from 0x%08x (%a): scalar 0x%04x, array 0x%04x, forced scalar 0x%04x (%s)", f->name, bits_of(x[i]),
              (double)x[i], one, native[i], scalar[i], tg_lowp_isa());
        if (isnan(x[i])) check_nan(f, x[i], one);
        else {
            uint16_t ref = ref_round(f, x[i]);
            CHECK(one == ref, "%s from 0x%08x (%a): 0x%04x, the nearest (ties to even) is 0x%04x", f->name,
                  bits_of(x[i]), (double)x[i], one, ref);
        }
    }
    free(x);
    free(native);
    free(scalar);
}

START_TEST(test_f32_to_bf16_rounding) { check_from_f32(&BF16); }
END_TEST

START_TEST(test_f32_to_f16_rounding) { check_from_f32(&F16); }
END_TEST

/* The cases the documentation names, spelled out. */
START_TEST(test_named_cases) {
    ck_assert_uint_eq(tg_f32_to_f16(65504.0f), 0x7bff);
    ck_assert_uint_eq(tg_f32_to_f16(65519.996f), 0x7bff);
    ck_assert_uint_eq(tg_f32_to_f16(65520.0f), 0x7c00); /* the overflow threshold ties to inf */
    ck_assert_uint_eq(tg_f32_to_f16(-1e6f), 0xfc00);
    ck_assert_uint_eq(tg_f32_to_f16(0x1p-24f), 0x0001);     /* smallest subnormal */
    ck_assert_uint_eq(tg_f32_to_f16(0x1p-25f), 0x0000);     /* its half ties to 0 */
    ck_assert_uint_eq(tg_f32_to_f16(0x1.8p-24f), 0x0002);   /* 1.5 units ties to 2 */
    ck_assert_uint_eq(tg_f32_to_f16(0x1.ff8p-15f), 0x03ff); /* largest subnormal */
    ck_assert_uint_eq(tg_f32_to_f16(0x1.ffcp-15f), 0x0400); /* its tie with 2^-14 rounds up to the normals */
    ck_assert_uint_eq(tg_f32_to_f16(-0.0f), 0x8000);
    ck_assert_uint_eq(tg_f32_to_bf16(0.1f), 0x3dcd);
    ck_assert_uint_eq(tg_f32_to_bf16(1.00390625f), 0x3f80); /* 1 + 2^-8: a tie, to even */
    ck_assert_uint_eq(tg_f32_to_bf16(1.01171875f), 0x3f82); /* 1 + 3 * 2^-8: a tie, to even */
    ck_assert_uint_eq(tg_f32_to_bf16(3.4e38f), 0x7f80);     /* past the largest finite: inf */
    ck_assert_uint_eq(tg_f32_to_bf16(0x1p-130f), 0x0008);   /* float32 subnormal kept: 8 * 2^-133 */
    ck_assert(isinf(tg_f16_to_f32(0x7c00)) && tg_f16_to_f32(0x0001) == 0x1p-24f);
}
END_TEST

/* ---- tensors ------------------------------------------------------------------------ */

START_TEST(test_creation_and_access) {
    tg_dtype dts[2] = {TG_BF16, TG_F16};
    for (int d = 0; d < 2; d++) {
        tg_dtype dt = dts[d];
        ck_assert_uint_eq(tg_dtype_size(dt), 2);
        tg_tensor *z = tg_zeros(ctx, dt, TG_SHAPE(2, 3)), *o = tg_ones(ctx, dt, TG_SHAPE(2, 3));
        tg_tensor *f = tg_full(ctx, dt, TG_SHAPE(4), 0.1), *a = tg_arange(ctx, dt, 0, 5, 1);
        ck_assert(tg_ok(ctx));
        ck_assert_int_eq(z->dtype, dt);
        for (int i = 0; i < 6; i++) {
            ck_assert(tg_get_flat(ctx, z, i) == 0.0);
            ck_assert(tg_get_flat(ctx, o, i) == 1.0);
        }
        float tenth = dt == TG_BF16 ? tg_bf16_to_f32(tg_f32_to_bf16(0.1f)) : tg_f16_to_f32(tg_f32_to_f16(0.1f));
        ck_assert(tg_get_flat(ctx, f, 3) == (double)tenth);
        ck_assert(tg_get_flat(ctx, a, 4) == 4.0);
        tg_set_flat(ctx, a, 1, 1e6);
        ck_assert(dt == TG_F16 ? isinf(tg_get_flat(ctx, a, 1)) : tg_get_flat(ctx, a, 1) == 999424.0);
        /* rand stays in [low, high) after rounding; randn is finite */
        tg_tensor *r = tg_rand(ctx, dt, TG_SHAPE(4096), 0.5, 1.0), *n = tg_randn(ctx, dt, TG_SHAPE(4096), 0, 1);
        ck_assert(tg_ok(ctx));
        for (int i = 0; i < 4096; i++) {
            double v = tg_get_flat(ctx, r, i);
            ck_assert_msg(v >= 0.5 && v < 1.0, "tg_rand %s: %g", tg_dtype_name(dt), v);
            ck_assert(isfinite(tg_get_flat(ctx, n, i)));
        }
        ck_assert_int_eq(tg_rand(ctx, dt, TG_SHAPE(0), 0, 1)->numel, 0); /* an empty draw */
        /* to_dtype round trip through float32 and float64 is exact */
        tg_tensor *back = tg_to_dtype(ctx, tg_to_dtype(ctx, tg_to_dtype(ctx, n, TG_F32), TG_F64), dt);
        tg_test_assert_same_bits("round trip", n, back);
        /* view, copy, persist */
        tg_tensor *v = tg_view(ctx, n, TG_SHAPE(64, 64)), *c = tg_copy(ctx, v), *p = tg_persist(ctx, c);
        ck_assert(tg_ok(ctx));
        tg_test_assert_same_bits("persist", c, p);
        tg_tensor_free(ctx, p);
        ck_assert_ptr_nonnull(dt == TG_BF16 ? tg_data_bf16(ctx, n) : tg_data_f16(ctx, n));
        tg_test_assert_fails(ctx, tg_data_f32(ctx, n), TG_ERR_DTYPE, "tg_data_f32", tg_dtype_name(dt), NULL);
    }
}
END_TEST

/* The text PyTorch 1.13 prints for the same values (dtype named without
 * "torch.", as tapegrad prints float32). */
START_TEST(test_print_as_pytorch) {
    char buf[256];
    double v[4] = {0.1, 0.2, -1.5, 3.0};
    tg_format(buf, sizeof buf, tg_test_tensor(ctx, TG_BF16, TG_SHAPE(4), v));
    ck_assert_str_eq(buf, "tensor([ 0.1001,  0.2002, -1.5000,  3.0000], dtype=bfloat16)");
    tg_format(buf, sizeof buf, tg_test_tensor(ctx, TG_F16, TG_SHAPE(4), v));
    ck_assert_str_eq(buf, "tensor([ 0.1000,  0.2000, -1.5000,  3.0000], dtype=float16)");
    double w[4] = {65504, 70000, NAN, 6e-8};
    tg_format(buf, sizeof buf, tg_test_tensor(ctx, TG_F16, TG_SHAPE(4), w));
    ck_assert_str_eq(buf, "tensor([6.5504e+04,        inf,        nan, 5.9605e-08], dtype=float16)");
    tg_format(buf, sizeof buf, tg_full(ctx, TG_BF16, 0, NULL, 0.1));
    ck_assert_str_eq(buf, "tensor(0.1001, dtype=bfloat16)");
}
END_TEST

/* Mixing dtypes stays an error. (The ops take 16-bit tensors, and an op
 * without a low-precision path refuses them by name: tests/test_ops_lowp.c.) */
START_TEST(test_ops_refuse) {
    tg_tensor *b = tg_ones(ctx, TG_BF16, TG_SHAPE(3)), *h = tg_ones(ctx, TG_F16, TG_SHAPE(3));
    tg_test_assert_fails(ctx, tg_matmul(ctx, h, b), TG_ERR_DTYPE, "tg_matmul", "float16", "bfloat16", NULL);
    tg_tensor *f = tg_ones(ctx, TG_F32, TG_SHAPE(3));
    tg_test_assert_fails(ctx, tg_add(ctx, f, b), TG_ERR_DTYPE, "tg_add", "bfloat16", NULL);
    tg_test_assert_fails(ctx, tg_assign(ctx, f, b), TG_ERR_DTYPE, "tg_assign", "dtypes differ", NULL);
}
END_TEST

/* tg_cast: forward rounds; backward casts the gradient back. The loss
 * sum_i w_i * float32(bf16(x_i)) has d/dx_i = w_i rounded to bfloat16 on the
 * way back through the bfloat16 tensor, then widened to float32. */
START_TEST(test_cast_backward) {
    double xv[3] = {0.1, -2.7, 1000.3}, wv[3] = {0.3, 1.0 / 3.0, -7.1};
    tg_tensor *x = tg_requires_grad(ctx, tg_test_tensor(ctx, TG_F32, TG_SHAPE(3), xv));
    tg_tensor *w = tg_test_tensor(ctx, TG_F32, TG_SHAPE(3), wv);
    tg_tensor *b = tg_cast(ctx, x, TG_BF16);
    ck_assert_int_eq(b->dtype, TG_BF16);
    for (int i = 0; i < 3; i++) ck_assert(tg_get_flat(ctx, b, i) == tg_bf16_to_f32(tg_f32_to_bf16((float)xv[i])));
    tg_tensor *loss = tg_sum(ctx, tg_mul(ctx, tg_cast(ctx, b, TG_F32), w));
    tg_backward(ctx, loss);
    ck_assert(tg_ok(ctx));
    for (int i = 0; i < 3; i++) ck_assert(tg_get_flat(ctx, x->grad, i) == tg_bf16_to_f32(tg_f32_to_bf16((float)wv[i])));
    /* a float16 leaf gets a float16 gradient */
    tg_tensor *h = tg_requires_grad(ctx, tg_full(ctx, TG_F16, TG_SHAPE(2), 2.0));
    tg_backward(ctx, tg_sum(ctx, tg_mul(ctx, tg_cast(ctx, h, TG_F64), tg_full(ctx, TG_F64, TG_SHAPE(2), 70000))));
    ck_assert(tg_ok(ctx));
    ck_assert_int_eq(h->grad->dtype, TG_F16);
    ck_assert(isinf(tg_get_flat(ctx, h->grad, 0))); /* 70000 overflows float16 */
}
END_TEST

/* ---- gradient checks ------------------------------------------------------------------ */

/* f(x) = x tanh(x) elementwise, computed in float32 from a 16-bit x (one
 * tg_cast in, and back to x's dtype when *user says so), in float64 from a
 * float64 x. With *user == 2 the low-precision path has a wrong backward:
 * x * detach(tanh(x)) drops the tanh' term. */
static tg_tensor *x_tanh(tg_ctx *c, tg_tensor *const *in, void *user) {
    int mode = *(int *)user;
    tg_tensor *x = in[0];
    bool lowp = x->dtype == TG_BF16 || x->dtype == TG_F16;
    tg_tensor *xf = lowp ? tg_cast(c, x, TG_F32) : x;
    tg_tensor *t = tg_tanh(c, xf);
    tg_tensor *y = tg_mul(c, xf, lowp && mode == 2 ? tg_detach(c, t) : t);
    return lowp && mode == 1 ? tg_cast(c, y, x->dtype) : y;
}

START_TEST(test_gradcheck_lowp) {
    tg_tensor *x = tg_randn(ctx, TG_F64, TG_SHAPE(4, 8), 0, 1);
    tg_tensor *xb = tg_requires_grad(ctx, tg_to_dtype(ctx, x, TG_BF16));
    tg_gradcheck_result r;
    int mode = 0;
    ck_assert(!tg_gradcheck(ctx, x_tanh, &mode, 1, &xb, NULL, &r));
    tg_test_assert_error(ctx, TG_ERR_DTYPE, "tg_gradcheck: input 0 is bfloat16", "swamps", "float64",
                         "tg_gradcheck_lowp", NULL);
    tg_dtype dts[2] = {TG_BF16, TG_F16};
    for (int d = 0; d < 2; d++) {
        for (mode = 0; mode < 3; mode++) {
            tg_gradcheck_lowp_result lr;
            bool pass = tg_gradcheck_lowp(ctx, x_tanh, &mode, 1, &x, dts[d], 0, &lr);
            ck_assert_msg(tg_ok(ctx), "%s", tg_error_message(ctx));
            ck_assert_msg(pass == (mode != 2), "%s mode %d: max_err %g, tol %g (at %lld: %g vs %g)",
                          tg_dtype_name(dts[d]), mode, lr.max_err, lr.tol, (long long)lr.worst_index, lr.worst_lowp,
                          lr.worst_f64);
            ck_assert(lr.tol == (dts[d] == TG_BF16 ? 0.125 : 16 * 0x1p-10));
            if (mode != 2) ck_assert(lr.max_err > 0 && lr.max_err < lr.tol); /* rounding is seen, and small */
        }
    }
    tg_gradcheck_lowp_result lr;
    tg_test_assert_fails(ctx, (void *)(intptr_t)tg_gradcheck_lowp(ctx, x_tanh, &mode, 1, &x, TG_F32, 0, &lr),
                         TG_ERR_DTYPE, "tg_gradcheck_lowp", "not bfloat16 or float16", NULL);
}
END_TEST

/* ---- checkpoints ---------------------------------------------------------------------- */

/* A float32 model of one tensor "w" holding v[0 .. n). */
static tg_tensor *model(tg_params *m, int n, const double *v) {
    tg_tensor *t =
        tg_persist(ctx, v ? tg_test_tensor(ctx, TG_F32, TG_SHAPE(n), v) : tg_zeros(ctx, TG_F32, TG_SHAPE(n)));
    ck_assert_msg(tg_params_add(ctx, m, NULL, "w", t, true), "%s", tg_error_message(ctx));
    return t;
}

/* Saved as BF16 / F16 from float32, the file says so; loading it into a
 * float32 model is refused unless asked, then gives the rounded values. */
START_TEST(test_checkpoint_conversion) {
    char dir[256], path[300];
    tg_test_make_tmpdir(dir, sizeof dir, "tg-half");
    snprintf(path, sizeof path, "%s/w.safetensors", dir);
    double v[6] = {0.1, -2.5, 70000.0, 0x1p-20, INFINITY, NAN};
    tg_dtype dts[2] = {TG_BF16, TG_F16};
    for (int d = 0; d < 2; d++) {
        tg_params src = {0}, dst = {0};
        model(&src, 6, v);
        tg_ckpt_options save = {.convert_on_save = true, .save_dtype = dts[d]};
        ck_assert_int_eq(tg_ckpt_save_ex(ctx, path, &src, NULL, NULL, &save), TG_OK);
        size_t size;
        char *bytes = tg_test_read_file(path, &size);
        ck_assert_uint_eq(size, 8 + tg_st_le64(bytes) + 12); /* 6 elements of 2 bytes */
        tg_test_assert_contains(bytes + 8, dts[d] == TG_BF16 ? "\"dtype\":\"BF16\"" : "\"dtype\":\"F16\"", NULL);
        free(bytes);
        tg_tensor *w = model(&dst, 6, NULL);
        ck_assert_int_eq(tg_ckpt_load(ctx, path, &dst, NULL, NULL), TG_ERR_DTYPE);
        tg_test_assert_error(ctx, TG_ERR_DTYPE, "tg_ckpt_load", "tensor \"w\" is",
                             dts[d] == TG_BF16 ? "BF16 in the file but F32 in the model" : "F16 in the file",
                             "convert_dtype", NULL);
        for (int i = 0; i < 6; i++) ck_assert(tg_get_flat(ctx, w, i) == 0.0); /* nothing written */
        tg_ckpt_options load = {.convert_dtype = true};
        ck_assert_int_eq(tg_ckpt_load_ex(ctx, path, &dst, NULL, NULL, &load), TG_OK);
        for (int i = 0; i < 6; i++) {
            float f = (float)v[i];
            float want = dts[d] == TG_BF16 ? tg_bf16_to_f32(tg_f32_to_bf16(f)) : tg_f16_to_f32(tg_f32_to_f16(f));
            float got = tg_data_f32(ctx, w)[i];
            ck_assert_msg(isnan(want) ? isnan(got) : got == want, "%s [%d]: %g, not %g", tg_dtype_name(dts[d]), i,
                          (double)got, (double)want);
        }
        ck_assert(dts[d] == TG_BF16 || isinf(tg_get_flat(ctx, w, 2))); /* 70000 overflows float16 */
        tg_params_free(&src);
        tg_params_free(&dst);
    }
    tg_ckpt_options bad = {.convert_on_save = true, .save_dtype = (tg_dtype)7};
    tg_params m = {0};
    model(&m, 1, v);
    ck_assert_int_eq(tg_ckpt_save_ex(ctx, path, &m, NULL, NULL, &bad), TG_ERR_DTYPE);
    tg_test_assert_error(ctx, TG_ERR_DTYPE, "save_dtype 7", NULL);
    tg_params_free(&m);
    tg_test_remove_tree(dir);
}
END_TEST

/* Driven by scripts/interop_torch.py roundtrip: PyTorch wrote the tensors
 * "formula" (element i: (i % 7) * 0.25 - 0.5, exact in both formats) and
 * "specials" (-0, inf, -inf, NaN, the smallest subnormal of the format, and
 * for float16 its largest finite 65504) in bfloat16 to from_torch_bf16 and
 * in float16 to from_torch_f16. Loaded into float32 (converted), checked,
 * and saved back converted to the file's dtype for PyTorch to compare bits. */
START_TEST(test_interop_lowp) {
    const char *dir = getenv("TG_INTEROP_DIR");
    ck_assert_ptr_nonnull(dir);
    const char *names[2] = {"bf16", "f16"};
    tg_dtype dts[2] = {TG_BF16, TG_F16};
    for (int d = 0; d < 2; d++) {
        char in[512], out[512];
        snprintf(in, sizeof in, "%s/from_torch_%s.safetensors", dir, names[d]);
        snprintf(out, sizeof out, "%s/from_tapegrad_%s.safetensors", dir, names[d]);
        tg_params m = {0};
        tg_tensor *f = tg_persist(ctx, tg_zeros(ctx, TG_F32, TG_SHAPE(3, 5)));
        tg_tensor *sp = tg_persist(ctx, tg_zeros(ctx, TG_F32, TG_SHAPE(6)));
        ck_assert(tg_params_add(ctx, &m, NULL, "formula", f, true) &&
                  tg_params_add(ctx, &m, NULL, "specials", sp, true));
        tg_ckpt_options load = {.convert_dtype = true};
        tg_meta meta = {0};
        ck_assert_msg(tg_ckpt_load_ex(ctx, in, &m, NULL, &meta, &load) == TG_OK, "%s", tg_error_message(ctx));
        for (int64_t i = 0; i < 15; i++) ck_assert(tg_get_flat(ctx, f, i) == (double)(i % 7) * 0.25 - 0.5);
        double tiny = dts[d] == TG_BF16 ? 0x1p-133 : 0x1p-24, big = dts[d] == TG_BF16 ? 1.0 : 65504.0;
        const float *s = tg_data_f32(ctx, sp);
        ck_assert(s[0] == 0 && signbit(s[0]) && isinf(s[1]) && s[1] > 0 && isinf(s[2]) && s[2] < 0 && isnan(s[3]));
        ck_assert(s[4] == tiny && s[5] == big);
        ck_assert(tg_meta_set(ctx, &meta, "written_by", "tapegrad"));
        tg_ckpt_options save = {.convert_on_save = true, .save_dtype = dts[d]};
        ck_assert_msg(tg_ckpt_save_ex(ctx, out, &m, NULL, &meta, &save) == TG_OK, "%s", tg_error_message(ctx));
        tg_meta_free(&meta);
        tg_params_free(&m);
    }
}
END_TEST

Suite *make_half_suite(void) {
    Suite *s = tg_test_suite("half", setup, teardown, test_bf16_to_f32_all_patterns, test_f16_to_f32_all_patterns,
                             test_f32_to_bf16_rounding, test_f32_to_f16_rounding, test_named_cases,
                             test_creation_and_access, test_print_as_pytorch, test_ops_refuse, test_cast_backward,
                             test_checkpoint_conversion, test_gradcheck_lowp, NULL);
    if (getenv("TG_INTEROP_DIR")) tg_test_tcase(s, "interop_lowp", setup, teardown, test_interop_lowp, NULL);
    return s;
}

int main(void) { return tg_test_run(make_half_suite()); }

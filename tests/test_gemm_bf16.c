/* Tests for the bfloat16 GEMM (tensor/gemm.h, tensor/gemm_bf16.c):
 *  - the rule by hand: the order of a pair's two products, the flushing of
 *    tiny sums and subnormal inputs, the rounding just below 2^-126;
 *  - every kernel this CPU has (avx512bf16, avx2, portable) gives the bits
 *    of the reference (the rule element by element), for every transpose,
 *    odd sizes, padded strides, alpha/beta, float32 and bfloat16 C, several
 *    K slices;
 *  - the reference against float64 within the bound of its roundings;
 *  - determinism: the bits do not depend on the thread count (1, 2, 3),
 *    the workspace, the column super-blocks or the number of rows. */
#include "tensor/gemm.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/half.h"
#include "testutil.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

/* ---- helpers ------------------------------------------------------------ */

static const tg_gemm_bf16_kernel KERNELS[3] = {TG_GEMM_BF16_AVX512, TG_GEMM_BF16_AVX2, TG_GEMM_BF16_PORTABLE};

/* Deterministic values in [-1, 1). */
static double rnd(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*s >> 11) / (double)(1ull << 52) - 1.0;
}

/* A rows x cols bfloat16 matrix with row stride ld = cols + pad, values
 * uniform in [-1, 1) rounded to bfloat16; the padding holds a sentinel. */
#define SENTINEL 0x7777u
typedef struct {
    int64_t rows, cols, ld;
    uint16_t *x;
} mat16;

static mat16 mat16_new(int64_t rows, int64_t cols, int64_t pad, uint64_t *seed) {
    mat16 m = {rows, cols, cols + pad, NULL};
    m.x = tg_test_malloc((size_t)(rows * m.ld) * sizeof *m.x);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < m.ld; j++) m.x[i * m.ld + j] = j < cols ? tg_f32_to_bf16((float)rnd(seed)) : SENTINEL;
    return m;
}

/* A matrix whose op() is rows x cols: stored cols x rows when trans. */
static mat16 mat16_op(bool trans, int64_t rows, int64_t cols, int64_t pad, uint64_t *seed) {
    return trans ? mat16_new(cols, rows, pad, seed) : mat16_new(rows, cols, pad, seed);
}

static double val(const mat16 *m, int64_t i, int64_t j) { return tg_bf16_to_f32(m->x[i * m->ld + j]); }

/* C: rows x ld elements of float32 or bfloat16 (c_bf16), from [-1, 1). */
typedef struct {
    int64_t rows, cols, ld;
    bool bf16;
    void *x;
} matc;

static matc matc_new(int64_t rows, int64_t cols, int64_t pad, bool bf16, uint64_t *seed) {
    matc m = {rows, cols, cols + pad, bf16, NULL};
    m.x = tg_test_malloc((size_t)(rows * m.ld) * (bf16 ? 2 : 4));
    for (int64_t i = 0; i < rows * m.ld; i++) {
        const float v = (float)rnd(seed);
        if (bf16) ((uint16_t *)m.x)[i] = tg_f32_to_bf16(v);
        else ((float *)m.x)[i] = v;
    }
    return m;
}

static matc matc_copy(const matc *c) {
    matc m = *c;
    const size_t bytes = (size_t)(c->rows * c->ld) * (c->bf16 ? 2 : 4);
    m.x = tg_test_malloc(bytes);
    memcpy(m.x, c->x, bytes);
    return m;
}

static double matc_get(const matc *m, int64_t i, int64_t j) {
    return m->bf16 ? tg_bf16_to_f32(((uint16_t *)m->x)[i * m->ld + j]) : ((float *)m->x)[i * m->ld + j];
}

static size_t matc_bytes(const matc *m) { return (size_t)(m->rows * m->ld) * (m->bf16 ? 2 : 4); }

/* The arguments of C = alpha op(A) op(B) + beta C by kernel k. */
static tg_gemm_bf16_args args16(tg_gemm_bf16_kernel k, bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha,
                                const mat16 *A, const mat16 *B, double beta, matc *C, int threads) {
    return (tg_gemm_bf16_args){.kernel = k,
                               .trans_a = ta,
                               .trans_b = tb,
                               .M = M,
                               .N = N,
                               .K = K,
                               .alpha = (float)alpha,
                               .beta = (float)beta,
                               .A = A->x,
                               .lda = A->ld,
                               .B = B->x,
                               .ldb = B->ld,
                               .C = C->x,
                               .ldc = C->ld,
                               .c_bf16 = C->bf16,
                               .threads = threads};
}

static void gemm16(tg_gemm_bf16_kernel k, bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha,
                   const mat16 *A, const mat16 *B, double beta, matc *C, int threads) {
    const tg_gemm_bf16_args g = args16(k, ta, tb, M, N, K, alpha, A, B, beta, C, threads);
    tg_gemm_bf16_ws(&g, NULL, 0);
}

/* ---- the rule by hand ------------------------------------------------------ */

/* Whether MXCSR's flush-to-zero bit flushes here: the AVX2 kernel's rule
 * for tiny products rests on it, and valgrind (make memcheck) does not
 * emulate it -- there the AVX2 kernel's subnormal cases are not this
 * CPU's behaviour, and are skipped. */
static bool mxcsr_flushes(void) {
#if defined(__x86_64__) || defined(__i386__)
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | 0x8040u);
    volatile float a = 0x1p-70f, p = a * a;
    _mm_setcsr(csr);
    return p == 0;
#else
    return true;
#endif
}

/* One row times one column of K values (a[k], b[k] given as floats,
 * rounded to bfloat16), C float32, by every kernel and the reference: the
 * same bits, and want's. */
static void check_dot(const char *what, int K, const float *a, const float *b, float want) {
    uint16_t A[8], B[8];
    for (int k = 0; k < K; k++) A[k] = tg_f32_to_bf16(a[k]), B[k] = tg_f32_to_bf16(b[k]);
    for (int i = -1; i < 3; i++) {
        tg_gemm_bf16_kernel kn = i < 0 ? TG_GEMM_BF16_REFERENCE : KERNELS[i];
        if (!tg_gemm_bf16_available(kn) || (kn == TG_GEMM_BF16_AVX2 && !mxcsr_flushes())) continue;
        float c = 12345;
        const tg_gemm_bf16_args g = {
            .kernel = kn, .M = 1, .N = 1, .K = K, .alpha = 1, .A = A, .lda = K, .B = B, .ldb = 1, .C = &c, .ldc = 1};
        tg_gemm_bf16_ws(&g, NULL, 0);
        ck_assert_msg(tg_f32_bits(c) == tg_f32_bits(want), "%s, %s kernel: %a, want %a", what, tg_gemm_bf16_name(kn),
                      (double)c, (double)want);
    }
}

START_TEST(test_bf16_rule) {
    const float one[4] = {1, 1, 1, 1};
    /* the pairs (k0, k1), (k2, k3) are summed k1, k0, k3, k2: 2^24 (from
     * k0), then -2^24 (k3) gives 0, then 1 (k2) gives 1; in the order
     * k0..k3, 2^24 + 1 would round to 2^24 and the sum end at 0 */
    check_dot("high half first", 4, (const float[]){0x1p24f, 0, 1, -0x1p24f}, one, 1.0f);
    /* an odd K ends with a zero pair half: the same sums */
    check_dot("odd K", 3, (const float[]){0x1p24f, -0x1p24f, 1}, one, 1.0f);
    /* 2^-70 2^-70 = 2^-140: below 2^-126, flushed to zero */
    check_dot("tiny product", 2, (const float[]){0x1p-70f, 0}, (const float[]){0x1p-70f, 0}, 0.0f);
    check_dot("tiny negative", 2, (const float[]){-0x1p-70f, 0}, (const float[]){0x1p-70f, 0}, -0.0f);
    /* a subnormal bfloat16 input (2^-127) counts as zero: 2^-127 2^100 is
     * not 2^-27 */
    check_dot("subnormal input", 2, (const float[]){0x1p-127f, 0}, (const float[]){0x1p100f, 0}, 0.0f);
    /* 2^-126 - 0.75 2^-150: rounded to 24 bits it is 2^-126 - 2^-150, below
     * 2^-126, so flushed (float32's subnormal grid would round it to
     * 2^-126) */
    check_dot("just below 2^-126", 4, (const float[]){0x1p-63f, 0, 0, -0x1.8p-76f},
              (const float[]){0x1p-63f, 0, 0, 0x1p-75f}, 0.0f);
    /* ... and 2^-126 - 0.5 2^-150 ties to 2^-126, which stays */
    check_dot("tie at 2^-126", 4, (const float[]){0x1p-63f, 0, 0, -0x1p-76f}, (const float[]){0x1p-63f, 0, 0, 0x1p-75f},
              0x1p-126f);
    /* large values are not flushed: 2^100 2^27 + 1 */
    check_dot("large", 2, (const float[]){1, 0x1p100f}, (const float[]){1, 0x1p27f}, 0x1p127f);
    check_dot("overflow", 2, (const float[]){0x1p100f, 0x1p100f}, (const float[]){0x1p100f, 0x1p100f}, INFINITY);
}
END_TEST

/* ---- every kernel against the reference ------------------------------------- */

/* The bits of C's element (i, j). */
static uint32_t matc_bits(const matc *m, int64_t i, int64_t j) {
    return m->bf16 ? ((uint16_t *)m->x)[i * m->ld + j] : tg_f32_bits(((float *)m->x)[i * m->ld + j]);
}

/* op(A) op(B) by kernel kn and by the reference, from the same C: the same
 * bits, and C's padding untouched. With beta == 0, C starts as NaN (it
 * must not be read). */
static void check_vs_reference(tg_gemm_bf16_kernel kn, bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha,
                               double beta, bool c_bf16, int64_t pad, int threads, uint64_t seed) {
    mat16 A = mat16_op(ta, M, K, pad, &seed), B = mat16_op(tb, K, N, pad + 1, &seed);
    matc C = matc_new(M, N, pad + 2, c_bf16, &seed), R = matc_copy(&C);
    for (int64_t i = 0; i < M && beta == 0; i++)
        memset((char *)C.x + (size_t)(i * C.ld) * (c_bf16 ? 2 : 4), 0xff, (size_t)N * (c_bf16 ? 2 : 4));
    gemm16(kn, ta, tb, M, N, K, alpha, &A, &B, beta, &C, threads);
    gemm16(TG_GEMM_BF16_REFERENCE, ta, tb, M, N, K, alpha, &A, &B, beta, &R, 1);
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < C.ld; j++)
            ck_assert_msg(matc_bits(&C, i, j) == matc_bits(&R, i, j),
                          "%s ta=%d tb=%d M=%lld N=%lld K=%lld alpha=%g beta=%g C %s threads=%d: C[%lld][%lld] = %a, "
                          "reference %a%s",
                          tg_gemm_bf16_name(kn), ta, tb, (long long)M, (long long)N, (long long)K, alpha, beta,
                          c_bf16 ? "bf16" : "f32", threads, (long long)i, (long long)j, matc_get(&C, i, j),
                          matc_get(&R, i, j), j < N ? "" : " (padding)");
    free(A.x), free(B.x), free(C.x), free(R.x);
}

static const int64_t sizes[] = {1, 2, 17, 63, 130};
static const int64_t sizes_vg[] = {1, 17, 40};
static const double alphas[] = {1.0, -0.5, 2.0, 0.75};
static const double betas[] = {0.0, 1.0, -1.25, 0.0};

/* _i: (kernel, ta, tb): every size triple, rotating alpha/beta, padding,
 * the dtype of C and 1 or 2 threads. */
START_TEST(test_bf16_vs_reference) {
    const tg_gemm_bf16_kernel kn = KERNELS[_i / 4];
    const bool ta = _i & 2, tb = _i & 1, vg = tg_test_under_valgrind();
    if (!tg_gemm_bf16_available(kn)) return;
    const int64_t *sz = vg ? sizes_vg : sizes;
    const int ns = vg ? 3 : 5;
    int n = 0;
    for (int a = 0; a < ns; a++)
        for (int b = 0; b < ns; b++)
            for (int c = 0; c < ns; c++, n++)
                check_vs_reference(kn, ta, tb, sz[a], sz[b], sz[c], alphas[n % 4], betas[n % 4], n % 5 < 2,
                                   n % 3 == 0   ? 0
                                   : n % 3 == 1 ? 5
                                                : 33,
                                   1 + n % 2, (uint64_t)(n + 1));
}
END_TEST

/* Several K slices (more than 768 values of K), edge tiles and blocks of
 * rows and columns: both dtypes of C, beta 0 and not (the partial sums of
 * a bfloat16 C live in the workspace between slices). */
START_TEST(test_bf16_slices) {
    const tg_gemm_bf16_kernel kn = KERNELS[_i / 4];
    const bool ta = _i & 2, tb = _i & 1, vg = tg_test_under_valgrind();
    if (!tg_gemm_bf16_available(kn)) return;
    const bool slow = kn == TG_GEMM_BF16_PORTABLE;
    const int64_t M = vg || slow ? 29 : 301, N = vg || slow ? 37 : 203;
    check_vs_reference(kn, ta, tb, M, N, 1601, 1.0, 0.0, true, 3, 2, 7);
    check_vs_reference(kn, ta, tb, M, N, 1537, -1.5, 0.5, true, 0, 1, 8);
    check_vs_reference(kn, ta, tb, M, N, 800, 1.0, 1.0, false, 1, 2, 9);
    check_vs_reference(kn, ta, tb, 1, N, 1000, 1.0, 1.0, true, 1, 2, 10); /* M = 1 */
    check_vs_reference(kn, ta, tb, M, 1, 999, 1.0, 0.0, false, 1, 2, 11); /* N = 1 */
}
END_TEST

/* Values at the edges of the rule: subnormal bfloat16 inputs, products and
 * sums near 2^-126, large values; every kernel gives the reference's bits. */
START_TEST(test_bf16_tiny_values) {
    const int64_t M = 37, N = 45, K = 66;
    uint64_t seed = 5;
    mat16 A = mat16_new(M, K, 0, &seed), B = mat16_new(K, N, 0, &seed);
    /* exponents spread over 2^-70..2^-56 (products near 2^-126), some
     * subnormal, some zero, some large */
    for (int64_t i = 0; i < M * K + K * N; i++) {
        uint16_t *x = i < M * K ? &A.x[i] : &B.x[i - M * K];
        const unsigned r = (unsigned)(rnd(&seed) * 1e6 + 1e6);
        const unsigned e = r % 13 == 0 ? 0 : r % 17 == 0 ? 200 : 57 + r % 15; /* biased exponent */
        *x = (uint16_t)((*x & 0x807fu) | e << 7);
    }
    for (int i = -1; i < 3; i++) {
        if (i >= 0 && !tg_gemm_bf16_available(KERNELS[i])) continue;
        const tg_gemm_bf16_kernel kn = i < 0 ? TG_GEMM_BF16_REFERENCE : KERNELS[i];
        for (int bf = 0; bf < 2; bf++) {
            matc C = matc_new(M, N, 0, bf, &seed);
            matc R = matc_copy(&C);
            gemm16(kn, false, false, M, N, K, 1.0, &A, &B, 1.0, &C, 1);
            gemm16(TG_GEMM_BF16_REFERENCE, false, false, M, N, K, 1.0, &A, &B, 1.0, &R, 1);
            ck_assert_msg(memcmp(C.x, R.x, matc_bytes(&C)) == 0, "%s, C %s: differs from the reference",
                          tg_gemm_bf16_name(kn), bf ? "bf16" : "f32");
            free(C.x), free(R.x);
        }
    }
    free(A.x), free(B.x);
}
END_TEST

/* C = alpha op(A) op(B) + beta C_in with C_in another matrix, or one row
 * for every row (ldc_in 0: a bias): each kernel gives the reference's
 * bits, and a bias row gives the bits of C prefilled with it (beta 1). */
START_TEST(test_bf16_c_in) {
    const int64_t M = 53, N = 70, K = 90;
    for (int bf = 0; bf < 2; bf++)
        for (int i = -1; i < 3; i++) {
            const tg_gemm_bf16_kernel kn = i < 0 ? TG_GEMM_BF16_REFERENCE : KERNELS[i];
            if (!tg_gemm_bf16_available(kn)) continue;
            uint64_t seed = 11;
            mat16 A = mat16_new(M, K, 0, &seed), B = mat16_new(N, K, 0, &seed);
            matc Cin = matc_new(M, N, 3, bf, &seed), bias = matc_new(1, N, 0, bf, &seed);
            matc C = matc_new(M, N, 1, bf, &seed), R = matc_copy(&C), F = matc_copy(&C);
            for (int row = 0; row < 2; row++) {
                tg_gemm_bf16_args g = args16(kn, false, true, M, N, K, -0.5, &A, &B, row ? 1.0 : 2.0, &C, 2);
                g.c_in = row ? bias.x : Cin.x;
                g.ldc_in = row ? 0 : Cin.ld;
                tg_gemm_bf16_ws(&g, NULL, 0);
                g.kernel = TG_GEMM_BF16_REFERENCE, g.C = R.x;
                tg_gemm_bf16_ws(&g, NULL, 0);
                ck_assert_msg(memcmp(C.x, R.x, matc_bytes(&C)) == 0, "%s, C %s, %s: differs from the reference",
                              tg_gemm_bf16_name(kn), bf ? "bf16" : "f32", row ? "a bias row" : "C_in");
            }
            /* the bias row against C prefilled with it */
            for (int64_t r = 0; r < M; r++)
                memcpy((char *)F.x + (size_t)(r * F.ld) * (bf ? 2 : 4), bias.x, (size_t)N * (bf ? 2 : 4));
            gemm16(kn, false, true, M, N, K, -0.5, &A, &B, 1.0, &F, 1);
            ck_assert_msg(memcmp(C.x, F.x, matc_bytes(&C)) == 0, "%s, C %s: a bias row differs from a prefilled C",
                          tg_gemm_bf16_name(kn), bf ? "bf16" : "f32");
            free(A.x), free(B.x), free(Cin.x), free(bias.x), free(C.x), free(R.x), free(F.x);
        }
}
END_TEST

/* B given as float32 (b_f32): the bits of the product with B rounded to
 * bfloat16 first (tg_f32_to_bf16), for each kernel and both layouts of B,
 * values on and between bfloat16's rounding ties, NaN and infinities
 * included. */
START_TEST(test_bf16_b_f32) {
    const bool tb = _i & 1;
    const int64_t M = 29, N = 45, K = 71;
    uint64_t seed = 21;
    mat16 A = mat16_new(M, K, 1, &seed);
    const int64_t rows = tb ? N : K, cols = tb ? K : N, ld = cols + 3;
    float *b32 = tg_test_malloc((size_t)(rows * ld) * sizeof *b32);
    for (int64_t i = 0; i < rows * ld; i++) {
        uint32_t u = tg_f32_bits((float)rnd(&seed));
        if (i % 5 == 0) u = (u & 0xffff0000u) | 0x8000u; /* a tie */
        if (i % 7 == 0) u |= 0x7fffu;                    /* just below a tie */
        b32[i] = tg_f32_from_bits(u);
    }
    b32[3] = NAN, b32[8] = INFINITY, b32[13] = -0x1p-130f;           /* a subnormal, */
    b32[ld + 2] = tg_f32_from_bits(0x807fffffu);                     /* one that rounds to -2^-126 */
    for (int64_t i = 0; i < rows * ld; i += 97) b32[i] *= 0x1p-120f; /* products near 2^-126 */
    mat16 B = {rows, cols, ld, tg_test_malloc((size_t)(rows * ld) * 2)};
    tg_f32_to_bf16_n(B.x, b32, (size_t)(rows * ld));
    for (int bf = 0; bf < 2; bf++)
        for (int i = -1; i < 3; i++) {
            const tg_gemm_bf16_kernel kn = i < 0 ? TG_GEMM_BF16_REFERENCE : KERNELS[i];
            if (!tg_gemm_bf16_available(kn)) continue;
            matc C = matc_new(M, N, 0, bf, &seed), R = matc_copy(&C);
            tg_gemm_bf16_args g = args16(kn, false, tb, M, N, K, 1.0, &A, &B, 0.5, &R, 2);
            tg_gemm_bf16_ws(&g, NULL, 0); /* B rounded beforehand */
            g.B = b32, g.b_f32 = true, g.C = C.x;
            tg_gemm_bf16_ws(&g, NULL, 0);
            for (int64_t r = 0; r < M; r++)
                for (int64_t c = 0; c < N; c++)
                    ck_assert_msg(matc_bits(&C, r, c) == matc_bits(&R, r, c) ||
                                      (isnan(matc_get(&C, r, c)) && isnan(matc_get(&R, r, c))),
                                  "%s tb=%d C %s: C[%lld][%lld] = %a, with B rounded first %a", tg_gemm_bf16_name(kn),
                                  tb, bf ? "bf16" : "f32", (long long)r, (long long)c, matc_get(&C, r, c),
                                  matc_get(&R, r, c));
            free(C.x), free(R.x);
        }
    /* a float32 just below 2^-126 rounds up to 2^-126, a normal bfloat16
     * that counts (its product 1 x 2^-126 is not flushed): C = 2^-126 in
     * column 5, zero elsewhere, with 32 pairs of K (whole vectors) */
    enum { K2 = 64, N2 = 16 };
    uint16_t a1[K2] = {0};
    float bt[K2 * N2] = {0};
    a1[0] = tg_f32_to_bf16(1.0f);
    bt[tb ? 5 * K2 : 5] = tg_f32_from_bits(0x007fffffu);
    for (int i = -1; i < 3; i++) {
        const tg_gemm_bf16_kernel kn = i < 0 ? TG_GEMM_BF16_REFERENCE : KERNELS[i];
        if (!tg_gemm_bf16_available(kn)) continue;
        float c[N2];
        const tg_gemm_bf16_args g = {.kernel = kn,
                                     .trans_b = tb,
                                     .M = 1,
                                     .N = N2,
                                     .K = K2,
                                     .alpha = 1,
                                     .A = a1,
                                     .lda = K2,
                                     .B = bt,
                                     .ldb = tb ? K2 : N2,
                                     .b_f32 = true,
                                     .C = c,
                                     .ldc = N2};
        tg_gemm_bf16_ws(&g, NULL, 0);
        for (int j = 0; j < N2; j++)
            ck_assert_msg(c[j] == (j == 5 ? 0x1p-126f : 0.0f), "%s tb=%d: C[%d] = %a", tg_gemm_bf16_name(kn), tb, j,
                          (double)c[j]);
    }
    free(A.x), free(B.x), free(b32);
}
END_TEST

/* ---- the reference against float64 ------------------------------------------ *
 * The products of two bfloat16 values are exact in float32, so the error is
 * the roundings of the sums: each of a slice's up to K + 1 steps (K and
 * its pad) and each slice's r = alpha acc + r rounds once with unit
 * roundoff u = 2^-24 (float32), so |r - exact| <= gamma (|alpha| sum_k
 * |a_k b_k| + |beta c|), gamma = (K + 2 + slices) u / (1 - (K + 2 + slices) u)
 * (Higham, recursive summation); a bfloat16 C adds one rounding with
 * unit roundoff 2^-8 of the result. Flushing a sum below 2^-126 changes it
 * by less than 2^-126 per step (none occur with these values). */
START_TEST(test_bf16_vs_f64) {
    const bool ta = _i & 2, tb = _i & 1;
    const int64_t M = 33, N = 47, K = tg_test_under_valgrind() ? 200 : 2000;
    uint64_t seed = 77;
    mat16 A = mat16_op(ta, M, K, 2, &seed), B = mat16_op(tb, K, N, 1, &seed);
    for (int bf = 0; bf < 2; bf++) {
        matc C = matc_new(M, N, 0, bf, &seed);
        matc C0 = matc_copy(&C);
        gemm16(TG_GEMM_BF16_AUTO, ta, tb, M, N, K, -1.5, &A, &B, 0.5, &C, 2);
        const double slices = ceil((K + 1) / 2 / 384.0), n = (double)K + 2 + slices;
        const double gamma = n * 0x1p-24 / (1 - n * 0x1p-24);
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double sum = 0, sabs = 0;
                for (int64_t k = 0; k < K; k++) {
                    const double p = (ta ? val(&A, k, i) : val(&A, i, k)) * (tb ? val(&B, j, k) : val(&B, k, j));
                    sum += p, sabs += fabs(p);
                }
                const double c0 = matc_get(&C0, i, j), want = -1.5 * sum + 0.5 * c0;
                double bound = gamma * (1.5 * sabs + 0.5 * fabs(c0));
                if (bf) bound += 0x1p-8 * (fabs(want) + bound);
                const double got = matc_get(&C, i, j);
                ck_assert_msg(fabs(got - want) <= bound,
                              "ta=%d tb=%d C %s: C[%lld][%lld] = %.9g, want %.9g (bound %.3g)", ta, tb,
                              bf ? "bf16" : "f32", (long long)i, (long long)j, got, want, bound);
            }
        free(C.x), free(C0.x);
    }
    free(A.x), free(B.x);
}
END_TEST

/* K == 0 and alpha == 0: C = beta C (0 when beta == 0, even over NaN),
 * rounded once for a bfloat16 C; M or N == 0 touches nothing. */
START_TEST(test_bf16_degenerate) {
    const bool bf = _i;
    uint64_t seed = 3;
    mat16 A = mat16_new(5, 7, 0, &seed), B = mat16_new(7, 6, 0, &seed);
    matc C = matc_new(5, 6, 0, bf, &seed), C0 = matc_copy(&C);
    gemm16(TG_GEMM_BF16_AUTO, false, false, 5, 6, 0, 1.0, &A, &B, -2.0, &C, 1);
    for (int64_t i = 0; i < 30; i++) ck_assert(matc_get(&C, i / 6, i % 6) == -2.0 * matc_get(&C0, i / 6, i % 6));
    gemm16(TG_GEMM_BF16_AUTO, false, false, 5, 6, 7, 0.0, &A, &B, 0.5, &C, 1);
    for (int64_t i = 0; i < 30; i++) ck_assert(matc_get(&C, i / 6, i % 6) == -1.0 * matc_get(&C0, i / 6, i % 6));
    memset(C.x, 0xff, matc_bytes(&C));
    gemm16(TG_GEMM_BF16_AUTO, false, false, 5, 6, 7, 0.0, &A, &B, 0.0, &C, 1);
    for (int64_t i = 0; i < 30; i++) ck_assert(matc_get(&C, i / 6, i % 6) == 0.0);
    const tg_gemm_bf16_args none[2] = {{.M = 0, .N = 5, .K = 5, .alpha = 1, .c_bf16 = bf},
                                       {.M = 5, .N = 0, .K = 5, .alpha = 1, .c_bf16 = bf}};
    for (int i = 0; i < 2; i++) tg_gemm_bf16_ws(&none[i], NULL, 0);
    free(A.x), free(B.x), free(C.x), free(C0.x);
}
END_TEST

/* ---- determinism ---------------------------------------------------------------- */

/* Bitwise: threads 1, 2 and 3, and a caller's workspace (big enough for 2
 * threads, or for 1 only) against none, for each kernel; 1201 rows (_i &
 * 16) are cut into shrinking chunks. beta != 0: a row done twice or not at
 * all shows. */
START_TEST(test_bf16_threads_bitwise) {
    const tg_gemm_bf16_kernel kn = KERNELS[(_i / 4) % 3];
    const bool ta = _i & 2, tb = _i & 1, many_rows = _i >= 12, vg = tg_test_under_valgrind();
    if (!tg_gemm_bf16_available(kn)) return;
    const bool slow = kn == TG_GEMM_BF16_PORTABLE || vg;
    const int64_t M = many_rows ? 1201 : slow ? 131 : 517, K = many_rows ? 300 : 800;
    const int64_t N = slow ? 40 : many_rows ? 70 : 389;
    for (int bf = 0; bf < 2; bf++) {
        uint64_t seed = 99;
        mat16 A = mat16_op(ta, M, K, 3, &seed), B = mat16_op(tb, K, N, 0, &seed);
        matc C[5];
        C[0] = matc_new(M, N, 1, bf, &seed);
        for (int r = 1; r < 5; r++) C[r] = matc_copy(&C[0]);
        for (int t = 1; t <= 3; t++) gemm16(kn, ta, tb, M, N, K, 0.5, &A, &B, 1.5, &C[t - 1], t);
        tg_gemm_bf16_args g = args16(kn, ta, tb, M, N, K, 0.5, &A, &B, 1.5, &C[3], 1);
        const size_t ws1 = tg_gemm_bf16_workspace_size(&g);
        g.threads = 2;
        const size_t ws = tg_gemm_bf16_workspace_size(&g);
        ck_assert_uint_gt(ws1, 0);
        ck_assert_uint_ge(ws, ws1);
        void *work = tg_test_malloc(ws);
        for (int r = 3; r < 5; r++) {
            g.C = C[r].x;
            tg_gemm_bf16_ws(&g, work, r == 3 ? ws : ws1);
        }
        free(work);
        for (int r = 1; r < 5; r++)
            ck_assert_msg(memcmp(C[0].x, C[r].x, matc_bytes(&C[0])) == 0,
                          "%s ta=%d tb=%d C %s: run %d differs from threads=1", tg_gemm_bf16_name(kn), ta, tb,
                          bf ? "bf16" : "f32", r);
        free(A.x), free(B.x);
        for (int r = 0; r < 5; r++) free(C[r].x);
    }
}
END_TEST

/* A long K: B is packed in several super-blocks of columns (16 MB each);
 * the same bits with 1 and 2 threads, and the reference's. */
START_TEST(test_bf16_superblocks) {
    const bool ta = _i & 2, tb = _i & 1;
    if (tg_test_under_valgrind()) return;
    const int64_t M = 20, N = 900, K = 20000;
    uint64_t seed = 42;
    mat16 A = mat16_op(ta, M, K, 0, &seed), B = mat16_op(tb, K, N, 0, &seed);
    matc C1 = matc_new(M, N, 0, true, &seed), C2 = matc_copy(&C1), R = matc_copy(&C1);
    gemm16(TG_GEMM_BF16_AUTO, ta, tb, M, N, K, 1.0, &A, &B, 1.0, &C1, 1);
    gemm16(TG_GEMM_BF16_AUTO, ta, tb, M, N, K, 1.0, &A, &B, 1.0, &C2, 2);
    gemm16(TG_GEMM_BF16_REFERENCE, ta, tb, M, N, K, 1.0, &A, &B, 1.0, &R, 1);
    ck_assert_msg(memcmp(C1.x, C2.x, matc_bytes(&C1)) == 0, "ta=%d tb=%d: threads=2 differs from threads=1", ta, tb);
    ck_assert_msg(memcmp(C1.x, R.x, matc_bytes(&C1)) == 0, "ta=%d tb=%d: differs from the reference", ta, tb);
    free(A.x), free(B.x), free(C1.x), free(C2.x), free(R.x);
}
END_TEST

/* Batch invariance: each row of a 300-row product has the same bits as
 * that row computed alone and inside a 3-row product. */
START_TEST(test_bf16_rows_bitwise) {
    const bool ta = _i & 2, tb = _i & 1;
    const int64_t M = 300, N = tg_test_under_valgrind() ? 40 : 133, K = 900;
    uint64_t seed = 3;
    mat16 A = mat16_op(ta, M, K, 0, &seed), B = mat16_op(tb, K, N, 2, &seed);
    matc C = matc_new(M, N, 0, true, &seed), R = matc_new(3, N, 0, true, &seed);
    gemm16(TG_GEMM_BF16_AUTO, ta, tb, M, N, K, -1.0, &A, &B, 0.0, &C, 2);
    for (int64_t i = 0; i < M; i += 23)
        for (int64_t rows = 1; rows <= 3; rows += 2) {
            if (i + rows > M) continue;
            mat16 Ai = A; /* rows i.. of op(A): a row block of A, or a column block of A^T */
            Ai.x = A.x + (ta ? i : i * A.ld);
            gemm16(TG_GEMM_BF16_AUTO, ta, tb, rows, N, K, -1.0, &Ai, &B, 0.0, &R, 1);
            ck_assert_msg(memcmp((uint16_t *)C.x + i * C.ld, R.x, (size_t)(rows * N) * 2) == 0,
                          "ta=%d tb=%d: rows %lld..+%lld alone differ from the full product", ta, tb, (long long)i,
                          (long long)rows);
        }
    free(A.x), free(B.x), free(C.x), free(R.x);
}
END_TEST

/* The kernels' names; AUTO is the fastest this CPU has unless TG_GEMM_BF16
 * says otherwise. */
START_TEST(test_bf16_kernels) {
    ck_assert_str_eq(tg_gemm_bf16_name(TG_GEMM_BF16_AVX512), "avx512bf16");
    ck_assert_str_eq(tg_gemm_bf16_name(TG_GEMM_BF16_AVX2), "avx2");
    ck_assert_str_eq(tg_gemm_bf16_name(TG_GEMM_BF16_PORTABLE), "portable");
    ck_assert_str_eq(tg_gemm_bf16_name(TG_GEMM_BF16_REFERENCE), "reference");
    ck_assert(tg_gemm_bf16_available(TG_GEMM_BF16_PORTABLE) && tg_gemm_bf16_available(TG_GEMM_BF16_REFERENCE));
    const tg_gemm_bf16_kernel a = tg_gemm_bf16_auto();
    ck_assert_str_eq(tg_gemm_bf16_name(TG_GEMM_BF16_AUTO), tg_gemm_bf16_name(a));
    if (!getenv("TG_GEMM_BF16")) {
        const tg_gemm_bf16_kernel best = tg_gemm_bf16_available(TG_GEMM_BF16_AVX512) ? TG_GEMM_BF16_AVX512
                                         : tg_gemm_bf16_available(TG_GEMM_BF16_AVX2) ? TG_GEMM_BF16_AVX2
                                                                                     : TG_GEMM_BF16_PORTABLE;
        ck_assert_int_eq(a, best);
    }
    const tg_gemm_bf16_args g = {.kernel = TG_GEMM_BF16_REFERENCE, .M = 100, .N = 100, .K = 100, .threads = 2};
    ck_assert_uint_eq(tg_gemm_bf16_workspace_size(&g), 0);
}
END_TEST

Suite *make_gemm_bf16_suite(void) {
    Suite *s = suite_create("gemm_bf16");
    TCase *tc = tg_test_tcase(s, "rule", NULL, NULL, test_bf16_rule, test_bf16_tiny_values, test_bf16_c_in,
                              test_bf16_kernels, NULL);
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, test_bf16_vs_reference, 0, 12);
    tcase_add_loop_test(tc, test_bf16_slices, 0, 12);
    tcase_add_loop_test(tc, test_bf16_vs_f64, 0, 4);
    tcase_add_loop_test(tc, test_bf16_degenerate, 0, 2);
    tcase_add_loop_test(tc, test_bf16_b_f32, 0, 2);
    TCase *td = tg_test_tcase(s, "determinism", NULL, NULL, NULL);
    tcase_set_timeout(td, 600);
    tcase_add_loop_test(td, test_bf16_threads_bitwise, 0, 24);
    tcase_add_loop_test(td, test_bf16_rows_bitwise, 0, 4);
    tcase_add_loop_test(td, test_bf16_superblocks, 0, 4);
    return s;
}

int main(void) { return tg_test_run(make_gemm_bf16_suite()); }

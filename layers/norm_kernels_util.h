/* Internal helpers shared by the norm kernels (layers/rmsnorm_kernel.inc,
 * layers/layernorm_kernel.inc): fixed-order lane sums, the per-type
 * constants, the power-of-two rescaling used for extreme rows, and the
 * thread/blocking policy. Not part of any public API. */
#ifndef TG_LAYERS_NORM_KERNELS_UTIL_H
#define TG_LAYERS_NORM_KERNELS_UTIL_H

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "tensor/half.h"

/* The conversion instructions the 16-bit row loops use when the compiler
 * targets them (the whole file is then built for such a CPU); the scalar
 * rules of tensor/half.h otherwise, with the same bits. */
#if defined(__AVX512BF16__) && defined(__AVX512F__) && defined(__AVX512BW__)
#define TG_NORM_AVX512BF16 1
#else
#define TG_NORM_AVX512BF16 0
#endif
#if defined(__F16C__) && defined(__AVX__)
#define TG_NORM_F16C 1
#else
#define TG_NORM_F16C 0
#endif
#if TG_NORM_AVX512BF16 || TG_NORM_F16C
#include <immintrin.h>
#endif

/* Row sums use TG_NORM_LANES independent double accumulators (element j
 * goes to lane j mod 32 within each full group, the tail to one scalar),
 * combined by a fixed halving tree. The order is part of the code, not
 * chosen by the compiler, so every build and every thread count sums a row
 * the same way; 32 lanes are 4 AVX-512 (or 8 AVX2) registers of
 * independent chains, enough to hide the add latency. */
#define TG_NORM_LANES 32 /* tg_norm_combine and the 32-value conversions are written for 32 */

/* Fast-path row sums (tg_norm_rowsum in layers/norm_reduce.inc) form each
 * term in the input type and add TG_NORM_GROUP lane-steps of terms in the
 * input type before moving the partial into the double lanes: for float
 * that is 4 float additions per partial, so every partial carries at most
 * ~4 float roundings of its own size whatever C is, while the conversions
 * to double (the costly part) happen once per 4 elements of each lane. */
#define TG_NORM_GROUP 4

/* For the row loops and row functions (layers/norm_reduce.inc): inlined
 * at each call, their row function and flags are known constants, the
 * function is inlined into the loop and the tests on the flags fold away,
 * so the loop vectorizes as if written out. Without the attribute GCC
 * keeps tg_norm_rowsum2 as a call and calls the term once per element. */
#if defined(__GNUC__)
#define TG_NORM_INLINE inline __attribute__((always_inline))
#else
#define TG_NORM_INLINE inline
#endif

/* Per-type constants, for use inside the kernel templates, where TG_F64 is
 * 0 (float) or 1 (double) (tensor/instantiate.h).
 *
 * TG_NORM_MIN is the type's smallest normal number. A fast-path sum of
 * squares below C * TG_NORM_MIN may have lost precision: squares under the
 * smallest normal are off by up to half the smallest subnormal, which is
 * then no longer below half an ulp of the sum. Such rows (and rows whose
 * squares overflow) are redone in double on a power-of-two rescaled copy;
 * see tg_norm_rstd_scaled.
 *
 * TG_NORM_SAFE_LO/HI bound the rstd r for which elementwise work is done
 * in the input type with r rounded to it once. For float, r outside
 * [2^-120, 2^120] (rows whose rms or spread is near FLT_MAX, or a tiny eps
 * with a near-zero or near-constant row) would make x*r lose precision or
 * overflow, so such rows are done in double. For double the whole range is
 * fine. */
#define TG_NORM_MIN (TG_F64 ? DBL_MIN : (double)FLT_MIN)
#define TG_NORM_SAFE_LO (TG_F64 ? 0.0 : 0x1p-120)
#define TG_NORM_SAFE_HI (TG_F64 ? HUGE_VAL : 0x1p+120)

/* Rows per block in the threaded backward's direct mode (rows too wide
 * for chunked partials, see tg_norm_run_backward): sized so one block of x
 * and one of dy (about 256 KiB each) stay in L2 between the dx phase and
 * the dg/db phase. */
#define TG_NORM_BLOCK_BYTES (256 * 1024)

/* Below this many elements threads cost more than they save. */
#define TG_NORM_PAR_MIN 32768

/* The threaded row loops hand out tasks of about this many elements (whole
 * rows): small enough that the threads stay balanced when one of them runs
 * less (another job on its core), large enough that taking a task (one
 * atomic add) costs nothing. */
#define TG_NORM_TASK_ELEMS 16384

/* The backward's dg/db partials live on the stack: at most this many bytes
 * (chunks x C x 2 sums x the element size), and chunks of at
 * least TG_NORM_CHUNK_MIN_ROWS rows, at most TG_NORM_CHUNKS_MAX chunks. */
#define TG_NORM_PART_BYTES (64 * 1024)
#define TG_NORM_CHUNK_MIN_ROWS 16
#define TG_NORM_CHUNKS_MAX 64

/* The fixed tree: lanes k and k + 16 first, then k and k + 8, ..., then
 * the tail. */
static inline double tg_norm_combine(const double acc[TG_NORM_LANES], double tail) {
    double t[TG_NORM_LANES / 2];
    for (int k = 0; k < 16; k++) t[k] = acc[k] + acc[k + 16];
    for (int k = 0; k < 8; k++) t[k] += t[k + 8];
    for (int k = 0; k < 4; k++) t[k] += t[k + 4];
    for (int k = 0; k < 2; k++) t[k] += t[k + 2];
    return (t[0] + t[1]) + tail;
}

/* Power-of-two exponent k with max-abs m = f 2^k, f in [0.5, 1), clamped so
 * that 2^k and 2^-k are normal doubles. Multiplying by 2^-k is exact. */
static inline int tg_norm_scale_exp(double m) {
    int k;
    (void)frexp(m, &k);
    if (k > 1000) k = 1000;
    if (k < -1000) k = -1000;
    return k;
}

/* rstd for a row rescaled by s = 2^k (x = s x'), from the rescaled mean of
 * squares (or variance) ms1 = mean(x'^2):
 *   1/sqrt(ms + eps) = 1/sqrt(s^2 (ms1 + eps/s^2))
 *                    = 2^-k / sqrt(ms1 + eps 2^-2k).
 * If eps 2^-2k overflows, ms is below 1e-308 of eps and r = 1/sqrt(eps). */
static inline double tg_norm_rstd_scaled(double ms1, int k, double eps) {
    double t = ms1 + ldexp(eps, -2 * k);
    if (isinf(t)) return 1.0 / sqrt(eps);
    return ldexp(1.0 / sqrt(t), -k);
}

/* Rows per task of the threaded row loops (at least one). */
static inline int64_t tg_norm_task_rows(int64_t C) { return C >= TG_NORM_TASK_ELEMS ? 1 : TG_NORM_TASK_ELEMS / C; }

/* The number of chunks the backward cuts N rows of C elements into for
 * its dg/db sums, `part` bytes of partials per element of a row (2 x the
 * element size: room for dg and db): as many as fit in TG_NORM_PART_BYTES, of at least
 * TG_NORM_CHUNK_MIN_ROWS rows, at most TG_NORM_CHUNKS_MAX, rounded so that
 * ceil(N / K)-row chunks cover N exactly K times. It depends on the shape
 * and the type only, never on the thread count, so the sums' order does
 * not either. 1 means the direct mode (no partials). */
static inline int64_t tg_norm_chunks(int64_t N, int64_t C, int64_t part) {
    int64_t k = TG_NORM_PART_BYTES / (C * part);
    const int64_t by_rows = (N + TG_NORM_CHUNK_MIN_ROWS - 1) / TG_NORM_CHUNK_MIN_ROWS;
    if (k > by_rows) k = by_rows;
    if (k > TG_NORM_CHUNKS_MAX) k = TG_NORM_CHUNKS_MAX;
    if (k <= 1) return 1;
    const int64_t R = (N + k - 1) / k;
    return (N + R - 1) / R;
}

/* Rows per block for the threaded backward (at least 4 per thread). */
static inline int64_t tg_norm_block_rows(int64_t C, int64_t elsize, int threads) {
    int64_t rows = TG_NORM_BLOCK_BYTES / (C * elsize);
    int64_t min_rows = 4 * (int64_t)threads;
    return rows < min_rows ? min_rows : rows;
}

/* What a row function reads and writes, as bit flags: the kernels' calls
 * of the row loops (tg_norm_rowsum, tg_norm_store_row in
 * layers/norm_reduce.inc) pass them as constants, so each call compiles to
 * a loop of its own with the tests on them gone. The NULL tests on g, b,
 * dg, db must not stay inside a loop: a compiler that if-converts them
 * instead of unswitching the loop emits masked loads from NULL, legal but
 * ~50x slower. */
enum {
    TG_NORM_DY = 1,  /* the row has dy: the function reads dy_j */
    TG_NORM_G = 2,   /* it has g: y_j = g_j xhat_j (+ b_j), u_j = g_j dy_j */
    TG_NORM_B = 4,   /* it has b: y_j = (g_j) xhat_j + b_j */
    TG_NORM_DG = 8,  /* backward: dg_j += dy_j xhat_j as well */
    TG_NORM_DB = 16, /* backward: db_j += dy_j as well */
    TG_NORM_ACC = 32 /* the stored row accumulates: out_j = out_j + v_j */
};

/* 32 bfloat16 values widened to float32 (exact: a 16-bit shift, which the
 * compiler vectorizes). */
static inline void tg_norm_load32_bf16(float *restrict v, const uint16_t *restrict h) {
    for (int i = 0; i < 32; i++) v[i] = tg_bf16_to_f32(h[i]);
}

/* 32 floats rounded to bfloat16 (nearest even, NaN kept: tensor/half.h's
 * tg_f32_to_bf16, bit for bit). Where the compiler targets AVX-512 BF16,
 * one VCVTNE2PS2BF16 rounds the 32 values as tg_f32_to_bf16 does, except
 * that it reads a subnormal float32 as zero: a block holding one (rare in
 * a norm's output) takes the scalar rule. Elsewhere the scalar rule, which
 * the compiler vectorizes (integer adds and shifts). */
static inline void tg_norm_store32_bf16(uint16_t *restrict y, const float *restrict v) {
#if TG_NORM_AVX512BF16
    const __m512 a = _mm512_loadu_ps(v), b = _mm512_loadu_ps(v + 16);
    if (!(_mm512_fpclass_ps_mask(a, 0x20) | _mm512_fpclass_ps_mask(b, 0x20))) { /* 0x20: subnormal */
        const __m512bh h = _mm512_cvtne2ps_pbh(b, a);
        _mm512_storeu_si512((void *)y, (__m512i)h);
        return;
    }
#endif
    for (int i = 0; i < 32; i++) y[i] = tg_f32_to_bf16(v[i]);
}

/* 32 floats rounded to float16 (tensor/half.h's tg_f32_to_f16, bit for
 * bit): F16C's VCVTPS2PH (round to nearest even, the same bits, NaNs and
 * subnormals included: tensor/convert.c) where the compiler targets it,
 * the scalar rule elsewhere. */
static inline void tg_norm_store32_f16(uint16_t *restrict y, const float *restrict v) {
#if TG_NORM_F16C && defined(__AVX512F__) /* whole vectors, as the compiler formed the block */
    const __m512 a = _mm512_loadu_ps(v), b = _mm512_loadu_ps(v + 16);
    _mm256_storeu_si256((__m256i *)(void *)y, _mm512_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    _mm256_storeu_si256((__m256i *)(void *)(y + 16), _mm512_cvtps_ph(b, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#elif TG_NORM_F16C
    for (int i = 0; i < 32; i += 8)
        _mm_storeu_si128((__m128i *)(void *)(y + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(v + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#else
    for (int i = 0; i < 32; i++) y[i] = tg_f32_to_f16(v[i]);
#endif
}

/* float16 -> float32, exact: tensor/half.h's tg_f16_to_f32 bit for bit
 * (tests/test_norm_lowp.c checks all 65536 values), written without
 * branches so that the compiler vectorizes it inside the row loops. The
 * exponent and mantissa bits, shifted into float32's places, read as a
 * float32 that is the value times 2^-112 (a float32 subnormal for a
 * float16 subnormal), so one exact multiplication by 2^112 rebiases
 * normals and subnormals alike (float32 subnormals must not be flushed to
 * zero: tapegrad never builds with -ffast-math). For inf and NaN (exponent
 * 31) that product has exponent 143, whose bits all lie in 255's: OR-ing
 * in float32's all-ones exponent gives inf, or the NaN with its payload,
 * made quiet. */
static inline float tg_norm_f16_to_f32(uint16_t h) {
    const uint32_t em = (uint32_t)(h & 0x7fffu) << 13, sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t u = tg_f32_bits(tg_f32_from_bits(em) * 0x1p112f);
    u |= em >= 0x0f800000u ? 0x7f800000u : 0u; /* inf, NaN */
    u |= em > 0x0f800000u ? 0x00400000u : 0u;  /* NaN: quiet */
    return tg_f32_from_bits(u | sign);
}

/* 32 float16 values widened to float32, exactly: F16C's VCVTPH2PS, 16 or 8
 * at a time, where the compiler targets it (the same bits as
 * tg_norm_f16_to_f32, NaNs made quiet and subnormals included:
 * tests/test_norm_lowp.c), tg_norm_f16_to_f32 elsewhere. The compiler
 * does not form VCVTPH2PS from a scalar loop: this is where the row loops
 * get it. */
static inline void tg_norm_load32_f16(float *restrict v, const uint16_t *restrict h) {
#if TG_NORM_F16C && defined(__AVX512F__)
    _mm512_storeu_ps(v, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)h)));
    _mm512_storeu_ps(v + 16, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(h + 16))));
#elif TG_NORM_F16C
    for (int i = 0; i < 32; i += 8)
        _mm256_storeu_ps(v + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(h + i))));
#else
    for (int i = 0; i < 32; i++) v[i] = tg_norm_f16_to_f32(h[i]);
#endif
}

/* Software prefetch, forward only: while a row is summed and written
 * (several sweeps over it in L1), ask for the next row's x and y (one
 * call per cache line). Measured at 4096x768 float32: RMSNorm forward
 * ~10-15% faster with one row ahead, LayerNorm forward about even; two
 * rows ahead was no better, and in the backward (three input streams)
 * prefetching made things slower, so the backward leaves it to the
 * hardware. */
#define TG_NORM_PF_ROWS 1
static inline void tg_norm_prefetch(const void *p, int64_t bytes, int write) {
#if defined(__GNUC__)
    const char *c = (const char *)p;
    if (write)
        for (int64_t o = 0; o < bytes; o += 64) __builtin_prefetch(c + o, 1, 3);
    else
        for (int64_t o = 0; o < bytes; o += 64) __builtin_prefetch(c + o, 0, 3);
#else
    (void)p;
    (void)bytes;
    (void)write;
#endif
}

#endif /* TG_LAYERS_NORM_KERNELS_UTIL_H */

/* The bfloat16 GEMM: C = alpha op(A) op(B) + beta C with A and B bfloat16,
 * products in bfloat16, sums in float32 (the contract and the rule for each
 * element are in tensor/gemm.h; why this rule: docs/mixed-precision.md).
 *
 * The instruction it is built around, VDPBF16PS (AVX-512 BF16), takes two
 * bfloat16 of consecutive k in each 32-bit lane, so the packed panels hold
 * pairs: A and B are packed into MR-high and NR-wide panels of 32-bit
 * words, word (p, r) = element (r, 2p) in the low half, (r, 2p+1) in the
 * high half, zero past the edges. All kernels read these panels:
 *  - avx512bf16: VDPBF16PS, 12 x 32 register tile (24 accumulators, as the
 *    float32 kernel of tensor/gemm.c);
 *  - avx2: the two halves widened to float32 (a shift and a mask) and two
 *    fused multiply-adds, high half first, with MXCSR's FTZ and DAZ bits
 *    set while it sums: the instruction's rule, bit for bit; 4 x 16 tile;
 *  - portable: the same in C, flushing by hand (bf16_step); 4 x 8 tile;
 * and the reference (gemm_bf16_reference) is the rule written out element
 * by element, for tests and for when no workspace can be had. The kernels
 * are compiled for their instruction sets with target attributes and
 * chosen at run time from CPUID, so a portable build carries them all and
 * the tests run each one on a CPU that has them.
 *
 * The driver follows tensor/gemm.c's packed path with the blocks it
 * shares (gemm_shared.h): B packed whole-depth (super-blocks of at most
 * GEMM_LAZY_B_BYTES), then tasks of row chunks x column chunks
 * (gemm_tasks), each packing its own blocks of A and running the kernel
 * over NR panels of B. Packing B is a first round of tasks (8 panels
 * each) before the tasks of C start: simpler than tensor/gemm.c's panels
 * packed on demand, and bfloat16 packing is half the bytes. B may be
 * float32 (b_f32), rounded to bfloat16 as it is packed.
 * Tuning knob (compile-time): TG_GEMM_BF16_MR, the AVX-512 tile's rows
 * (12; 8 measured no faster on 4096x768x3072 nor on GPT-2's 256-row
 * products).
 *
 * Between two K slices the partial sums r live in C when C is float32; a
 * bfloat16 C cannot hold them (they would be rounded), so they live in a
 * float32 buffer P (M x N, in the workspace) and only the last slice
 * writes C: C is rounded to bfloat16 exactly once. */
#include "tensor/gemm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/gemm_shared.h"
#include "tensor/half.h"
#include "tensor/parallel.h"

#ifdef GEMM_X86
#define TARGET_AVX512BW __attribute__((target("avx512f,avx512bw,avx512vl")))
#define TARGET_AVX512BF16 __attribute__((target("avx512bf16,avx512f,avx512bw,avx512vl,avx512dq")))
#define TARGET_AVX2 __attribute__((target("avx2,fma")))
#endif

/* Pairs of K per slice at most. It fixes the bits (the slices' sums are
 * rounded into r one by one), so every kernel uses it: 768 values of K,
 * the same bytes of a packed B panel as the float32 GEMM's 384 floats. */
#define BF16_KCP 384

/* The largest register tile (MR x NR) of the kernels below. */
enum { TILE_MAX = 12 * 32 };

/* ---- the rule, in C -------------------------------------------------------- */

/* A bfloat16 as the instruction reads it: a subnormal is a zero of its
 * sign (DAZ). */
static inline float bf16_daz(uint16_t h) { return tg_bf16_to_f32((h & 0x7f80u) ? h : (uint16_t)(h & 0x8000u)); }

/* One step of the rule: acc + a b rounded once to float32 as if the
 * exponent were unbounded, then flushed to a zero of its sign below 2^-126
 * (FTZ). a and b are bfloat16 values, so a b has at most 16 significant
 * bits and the sum in double is exact whenever it matters: when it is not
 * (the smaller term more than 29 bits below the larger one's last bit) the
 * smaller one is far below half an ulp of the float32 result, and both
 * roundings give the larger one. Near 2^-126 the sum is scaled by 2^64
 * before rounding to float32, so it rounds to 24 bits, not to float32's
 * subnormal grid (the two differ in the last bit just below 2^-126, where
 * the instruction rounds to 24 bits and then flushes). */
static inline float bf16_step(float acc, float a, float b) {
    const double e = (double)acc + (double)a * (double)b;
    if (!(fabs(e) < 0x1p-100)) return (float)e; /* also inf and NaN */
    const float s = (float)(e * 0x1p64);
    return fabsf(s) < 0x1p-62f ? copysignf(0.0f, s) : s * 0x1p-64f;
}

/* ---- what a tile stores ---------------------------------------------------
 * r = alpha acc + beta src (fused; beta src rounded first) when src, else
 * alpha acc; written to dst as float32, or rounded to bfloat16. src and dst
 * point at the tile's first element. */
typedef struct bf16_out {
    float alpha, beta;
    const void *src; /* NULL: none */
    int64_t lds;
    bool src_bf16;
    void *dst;
    int64_t ldd;
    bool dst_bf16;
} bf16_out;

/* The store of an m x n tile of sums acc (row stride lda), in C: the
 * scalar twin of the vector stores, bit for bit (fmaf is the fused
 * multiply-add also where the hardware has none). */
static void bf16_store_tile(const bf16_out *o, const float *acc, int64_t lda, int64_t m, int64_t n) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            const float x = acc[i * lda + j];
            float r = o->alpha * x;
            if (o->src) {
                const float s = o->src_bf16 ? tg_bf16_to_f32(((const uint16_t *)o->src)[i * o->lds + j])
                                            : ((const float *)o->src)[i * o->lds + j];
                r = fmaf(o->alpha, x, o->beta * s);
            }
            if (o->dst_bf16) ((uint16_t *)o->dst)[i * o->ldd + j] = tg_f32_to_bf16(r);
            else ((float *)o->dst)[i * o->ldd + j] = r;
        }
}

/* ---- packing ----------------------------------------------------------------
 * ceil(R/W) panels of W rows, panel i at dst + i kp W (kp = ceil(kc/2)
 * pairs), each holding word (p, r) at p W + r:
 *   element (i W + r, 2p) | element (i W + r, 2p+1) << 16,
 * where element (r, k) = src[r*sr + k*sk] for r < R and k < kc, zero
 * elsewhere: bfloat16, or float32 rounded to bfloat16 (f32: B given as
 * float32, tg_gemm_bf16_args.b_f32). A block of A (rows of op(A)) is
 * packed whole; a panel of B (columns of op(B)) is one panel, R <= W. */
typedef struct pack_src {
    const void *p; /* element (0, 0) */
    bool f32;
    int64_t sr, sk;
} pack_src;

/* Element `at` (offset in elements) as bfloat16 bits. */
static inline uint16_t src_at(const pack_src *s, int64_t at) {
    return s->f32 ? tg_f32_to_bf16(((const float *)s->p)[at]) : ((const uint16_t *)s->p)[at];
}

/* The source moved on by r rows and k columns. */
static inline pack_src src_from(const pack_src *s, int64_t r, int64_t k) {
    pack_src t = *s;
    t.p = (const char *)s->p + (size_t)(r * s->sr + k * s->sk) * (s->f32 ? 4 : 2);
    return t;
}

static inline uint16_t pack_elem(const pack_src *s, int64_t R, int64_t kc, int64_t r, int64_t k) {
    return r < R && k < kc ? src_at(s, r * s->sr + k * s->sk) : 0;
}

/* Pairs p0 .. p1 of one panel (R rows at most), element by element. */
static void pack_pairs_c(uint32_t *restrict dst, int64_t W, const pack_src *s, int64_t R, int64_t kc, int64_t p0,
                         int64_t p1) {
    for (int64_t p = p0; p < p1; p++)
        for (int64_t r = 0; r < W; r++)
            dst[p * W + r] = (uint32_t)pack_elem(s, R, kc, r, 2 * p) | (uint32_t)pack_elem(s, R, kc, r, 2 * p + 1)
                                                                           << 16;
}

static void pack_c(uint32_t *restrict dst, int64_t W, const pack_src *s, int64_t R, int64_t kc) {
    const int64_t kp = (kc + 1) / 2;
    for (int64_t i = 0; i * W < R; i++) {
        const pack_src si = src_from(s, i * W, 0);
        pack_pairs_c(dst + i * kp * W, W, &si, R - i * W < W ? R - i * W : W, kc, 0, kp);
    }
}

#ifdef GEMM_X86
/* float32 lanes rounded to bfloat16 as tg_f32_to_bf16 does, the result in
 * each lane's upper 16 bits (the lower ones are left over): u + 0x7fff +
 * ((u >> 16) & 1); a NaN keeps its top bits, made quiet. */
TARGET_AVX512BW static inline __m512i round_hi_avx512(__m512 x) {
    const __m512i u = _mm512_castps_si512(x);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff)));
    const __mmask16 nan =
        _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    return _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(u, _mm512_set1_epi32(0x00400000)));
}

/* 32 float32 (lo: the first 16, hi: the next) rounded to bfloat16 as
 * tg_f32_to_bf16 does, as 32 words in order: VCVTNE2PS2BF16, which reads
 * a subnormal float32 as zero, so a vector holding one (rare: weights are
 * not that small) is rounded by the integer rule instead. */
TARGET_AVX512BF16 static inline __m512i cvt32_avx512(__m512 lo, __m512 hi) {
    /* VFPCLASSPS 0x20: the subnormal lanes */
    if (!(_mm512_fpclass_ps_mask(lo, 0x20) | _mm512_fpclass_ps_mask(hi, 0x20)))
        return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
    const __m512i idx = _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33, 31, 29, 27, 25,
                                         23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    return _mm512_permutex2var_epi16(round_hi_avx512(lo), idx, round_hi_avx512(hi));
}

/* Row r0.. (16 lanes, `valid` of them read) of a pair's low and high k
 * rows, as words low | high << 16. */
TARGET_AVX512BF16 static inline __m512i pair_row_avx512(const pack_src *s, const void *lo, const void *hi, int64_t r,
                                                        int64_t valid) {
    const __mmask16 m = (__mmask16)((1u << valid) - 1u);
    if (s->f32) {
        const __m512 l = _mm512_maskz_loadu_ps(m, (const float *)lo + r);
        const __m512 h = hi ? _mm512_maskz_loadu_ps(m, (const float *)hi + r) : _mm512_setzero_ps();
        const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                                             21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
        return _mm512_permutexvar_epi16(idx, cvt32_avx512(l, h)); /* words l0 h0 l1 h1 ... */
    }
    __m512i v = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, (const uint16_t *)lo + r));
    if (hi)
        v = _mm512_or_si512(
            v, _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, (const uint16_t *)hi + r)), 16));
    return v;
}

/* AVX-512 packing for the two layouts that occur:
 *  - sr == 1 (the r of one k contiguous: A^T's rows, B's rows): each pair
 *    of k rows is read across all R (long runs), widened to 32 bits and
 *    interleaved, at most 16 r at a time and never across a panel's edge;
 *  - sk == 1 (the k of one r contiguous: A's rows, B^T's rows): a pair is
 *    one 32-bit word already (float32: the two rounded and their upper
 *    halves gathered by a word permute), so 16 x 16 blocks of words are
 *    transposed (gemm_tr16_ps), the pairs past the last whole block word
 *    by word.
 * Anything else (strides of 1 in neither) element by element. */
#define PACK_AHEAD 4 /* pairs */
TARGET_AVX512BF16 static void pack_avx512_rows(uint32_t *restrict dst, int64_t W, const pack_src *s, int64_t R,
                                               int64_t kc) {
    const int64_t kp = (kc + 1) / 2, np = (R + W - 1) / W, es = s->f32 ? 4 : 2;
    for (int64_t p = 0; p < kp; p++) {
        const char *lo = (const char *)s->p + (size_t)(2 * p * s->sk) * es, *hi = lo + s->sk * es;
        const bool has_hi = 2 * p + 1 < kc;
        /* the two rows a few pairs on: far apart, so the hardware's
         * prefetcher does not see them coming */
        if (2 * p + 2 * PACK_AHEAD + 1 < kc)
            for (int64_t r = 0; r < R * es; r += 64) {
                _mm_prefetch(lo + 2 * PACK_AHEAD * s->sk * es + r, _MM_HINT_T0);
                _mm_prefetch(hi + 2 * PACK_AHEAD * s->sk * es + r, _MM_HINT_T0);
            }
        for (int64_t i = 0; i < np; i++)
            for (int64_t r0 = 0; r0 < W; r0 += 16) {
                const int64_t r = i * W + r0, left = R - r, valid = left < 0 ? 0 : left < 16 ? left : 16;
                const __m512i v = pair_row_avx512(s, lo, has_hi ? hi : NULL, r, valid);
                const int64_t n = W - r0 < 16 ? W - r0 : 16;
                _mm512_mask_storeu_epi32(dst + (i * kp + p) * W + r0, (__mmask16)((1u << n) - 1u), v);
            }
    }
}

/* The 16 words of pairs p .. p + 15 of row r (float32: 32 values
 * rounded, in order). */
TARGET_AVX512BF16 static inline __m512 pair_words_avx512(const pack_src *s, int64_t r, int64_t p) {
    if (!s->f32) return _mm512_loadu_ps((const uint16_t *)s->p + r * s->sr + 2 * p);
    const float *f = (const float *)s->p + r * s->sr + 2 * p;
    return _mm512_castsi512_ps(cvt32_avx512(_mm512_loadu_ps(f), _mm512_loadu_ps(f + 16)));
}

TARGET_AVX512BF16 static void pack_avx512_words(uint32_t *restrict dst, int64_t W, const pack_src *s, int64_t R,
                                                int64_t kc) {
    const int64_t whole = kc / 2; /* pairs with both halves inside */
    int64_t p = 0;
    const int64_t es = s->f32 ? 4 : 2;
    for (; p + 16 <= whole; p += 16)
        for (int64_t r0 = 0; r0 < W; r0 += 16) {
            __m512 v[16];
            for (int t = 0; t < 16; t++) {
                v[t] = r0 + t < R ? pair_words_avx512(s, r0 + t, p) : _mm512_setzero_ps();
                /* this row two blocks on (rows far apart, many at once: the
                 * hardware's prefetcher keeps up with few of them) */
                if (r0 + t < R && p + 48 <= whole) {
                    const char *row = (const char *)s->p + (size_t)((r0 + t) * s->sr + 2 * (p + 32)) * es;
                    _mm_prefetch(row, _MM_HINT_T0);
                    if (s->f32) _mm_prefetch(row + 64, _MM_HINT_T0);
                }
            }
            gemm_tr16_ps(v);
            const int64_t n = W - r0 < 16 ? W - r0 : 16;
            const __mmask16 m = (__mmask16)((1u << n) - 1u);
            for (int t = 0; t < 16; t++) _mm512_mask_storeu_ps(dst + (p + t) * W + r0, m, v[t]);
        }
    pack_pairs_c(dst, W, s, R, kc, p, (kc + 1) / 2);
}

TARGET_AVX512BF16 static void pack_avx512(uint32_t *restrict dst, int64_t W, const pack_src *s, int64_t R, int64_t kc) {
    const int64_t kp = (kc + 1) / 2;
    if (s->sr == 1) {
        pack_avx512_rows(dst, W, s, R, kc);
    } else if (s->sk != 1) {
        pack_c(dst, W, s, R, kc);
    } else {
        for (int64_t i = 0; i * W < R; i++) {
            const pack_src si = src_from(s, i * W, 0);
            pack_avx512_words(dst + i * kp * W, W, &si, R - i * W < W ? R - i * W : W, kc);
        }
    }
}
#endif

/* ---- kernels ------------------------------------------------------------------
 * A kernel has one of:
 *   tile(kp, a, b, acc): the sums of one MR x NR tile over kp pairs, acc
 *     from 0 (acc: MR x NR floats, row stride NR), stored by the driver
 *     (bf16_store_tile);
 *   fused(kp, a, b, o, m, n): the sums and their store (o) of the tile's
 *     first m rows and n columns, in one.
 * a: packed (kp, MR)   b: packed (kp, NR) */
typedef struct bf16_kernel {
    tg_gemm_bf16_kernel id;
    const char *name;
    int mr, nr;
    int64_t mc, nc;     /* cache blocks: rows of a packed A block, columns of C per pass */
    double fmas_per_ns; /* about 0.7x the measured rate, for the pool's estimate (tensor/gemm.c) */
    void (*tile)(int64_t kp, const uint32_t *a, const uint32_t *b, float *acc);
    void (*fused)(int64_t kp, const uint32_t *a, const uint32_t *b, const bf16_out *o, int64_t m, int64_t n);
    void (*pack)(uint32_t *dst, int64_t W, const pack_src *src, int64_t R, int64_t kc);
} bf16_kernel;

enum { PORT_MR = 4, PORT_NR = 8 };

static void tile_portable(int64_t kp, const uint32_t *restrict a, const uint32_t *restrict b, float *restrict acc) {
    for (int i = 0; i < PORT_MR * PORT_NR; i++) acc[i] = 0;
    for (int64_t p = 0; p < kp; p++, a += PORT_MR, b += PORT_NR)
        for (int i = 0; i < PORT_MR; i++) {
            const float a_hi = bf16_daz((uint16_t)(a[i] >> 16)), a_lo = bf16_daz((uint16_t)a[i]);
            for (int j = 0; j < PORT_NR; j++) {
                const float s = bf16_step(acc[i * PORT_NR + j], a_hi, bf16_daz((uint16_t)(b[j] >> 16)));
                acc[i * PORT_NR + j] = bf16_step(s, a_lo, bf16_daz((uint16_t)b[j]));
            }
        }
}

#ifdef GEMM_X86
enum { AVX2_MR = 4, AVX2_NR = 16 };

/* The sums with FTZ and DAZ set (tile_avx2): high halves first. Kept out
 * of line, so that all of its arithmetic lies between the two MXCSR
 * writes of its caller. */
GEMM_NOINLINE TARGET_AVX2 static void sums_avx2(int64_t kp, const uint32_t *restrict a, const uint32_t *restrict b,
                                                float *restrict acc) {
    const __m256i hi_mask = _mm256_set1_epi32((int)0xffff0000u);
    __m256 c[AVX2_MR][2];
    for (int i = 0; i < AVX2_MR; i++) c[i][0] = c[i][1] = _mm256_setzero_ps();
    for (int64_t p = 0; p < kp; p++, a += AVX2_MR, b += AVX2_NR) {
        __m256 bh[2], bl[2];
        for (int v = 0; v < 2; v++) {
            const __m256i w = _mm256_loadu_si256((const __m256i *)(const void *)(b + 8 * v));
            bh[v] = _mm256_castsi256_ps(_mm256_and_si256(w, hi_mask));
            bl[v] = _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
        }
#pragma GCC unroll 4
        for (int i = 0; i < AVX2_MR; i++) {
            const __m256i w = _mm256_set1_epi32((int)a[i]);
            const __m256 ah = _mm256_castsi256_ps(_mm256_and_si256(w, hi_mask));
            const __m256 al = _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
            for (int v = 0; v < 2; v++) c[i][v] = _mm256_fmadd_ps(al, bl[v], _mm256_fmadd_ps(ah, bh[v], c[i][v]));
        }
    }
    for (int i = 0; i < AVX2_MR; i++)
        for (int v = 0; v < 2; v++) _mm256_storeu_ps(acc + i * AVX2_NR + 8 * v, c[i][v]);
}

TARGET_AVX2 static void tile_avx2(int64_t kp, const uint32_t *a, const uint32_t *b, float *acc) {
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | 0x8040u); /* FTZ (bit 15), DAZ (bit 6) */
    sums_avx2(kp, a, b, acc);
    _mm_setcsr(csr);
}

#ifndef TG_GEMM_BF16_MR
#define TG_GEMM_BF16_MR 12
#endif
enum { X512_MR = TG_GEMM_BF16_MR, X512_NR = 32 };

/* The store of the first m rows and n columns of a tile (see bf16_out)
 * from the registers; src: 0 none, 1 float32, 2 bfloat16. Inlined with
 * constant rows, src and dst_bf16, so each store is straight code; the
 * columns past n are masked off. */
TARGET_AVX512BW static inline __attribute__((always_inline)) void
store_avx512(const bf16_out *o, __m512 acc[X512_MR][2], int rows, int64_t m, int64_t n, int src, bool dst_bf16) {
    const __m512 va = _mm512_set1_ps(o->alpha), vb = _mm512_set1_ps(o->beta);
    const __mmask16 mk[2] = {(__mmask16)(n >= 16 ? 0xffffu : (1u << n) - 1u),
                             (__mmask16)(n >= 32   ? 0xffffu
                                         : n <= 16 ? 0u
                                                   : (1u << (n - 16)) - 1u)};
    for (int i = 0; i < rows; i++) {
        if (i >= m) break;
        for (int v = 0; v < 2; v++) {
            const int64_t j = 16 * v;
            __m512 r;
            if (src == 1) {
                const __m512 s = _mm512_maskz_loadu_ps(mk[v], (const float *)o->src + i * o->lds + j);
                r = _mm512_fmadd_ps(va, acc[i][v], _mm512_mul_ps(vb, s));
            } else if (src == 2) {
                const __m256i h = _mm256_maskz_loadu_epi16(mk[v], (const uint16_t *)o->src + i * o->lds + j);
                const __m512 s = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
                r = _mm512_fmadd_ps(va, acc[i][v], _mm512_mul_ps(vb, s));
            } else {
                r = _mm512_mul_ps(va, acc[i][v]);
            }
            if (!dst_bf16) {
                _mm512_mask_storeu_ps((float *)o->dst + i * o->ldd + j, mk[v], r);
                continue;
            }
            const __m512i h = _mm512_srli_epi32(round_hi_avx512(r), 16);
            _mm256_mask_storeu_epi16((uint16_t *)o->dst + i * o->ldd + j, mk[v], _mm512_cvtepi32_epi16(h));
        }
    }
}

/* The VDPBF16PS sums of the first `rows` rows of a tile over kp pairs,
 * two registers a row (a: panels MR wide). Inlined with constant rows. */
TARGET_AVX512BF16 static inline __attribute__((always_inline)) void
sums_avx512(int rows, int64_t kp, const uint32_t *restrict a, const uint32_t *restrict b, __m512 acc[X512_MR][2]) {
    for (int i = 0; i < rows; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int64_t p = 0; p < kp; p++, a += X512_MR, b += X512_NR) {
        const __m512bh b0 = (__m512bh)_mm512_load_si512(b), b1 = (__m512bh)_mm512_load_si512(b + 16);
#pragma GCC unroll 16
        for (int i = 0; i < rows; i++) {
            const __m512bh ai = (__m512bh)_mm512_set1_epi32((int)a[i]);
            acc[i][0] = _mm512_dpbf16_ps(acc[i][0], ai, b0);
            acc[i][1] = _mm512_dpbf16_ps(acc[i][1], ai, b1);
        }
    }
}

/* The sums of rows (a constant) rows and the store of the tile's m x n. */
TARGET_AVX512BF16 static inline __attribute__((always_inline)) void
tile_rows_avx512(int rows, int64_t kp, const uint32_t *restrict a, const uint32_t *restrict b, const bf16_out *o,
                 int64_t m, int64_t n) {
    /* start bringing the tile's rows in now: they arrive during the sums */
    const int64_t es = o->src_bf16 ? 2 : 4, ed = o->dst_bf16 ? 2 : 4;
    for (int i = 0; i < rows && i < m; i++) {
        if (o->src) {
            _mm_prefetch((const char *)o->src + i * o->lds * es, _MM_HINT_T0);
            _mm_prefetch((const char *)o->src + (i * o->lds + n - 1) * es, _MM_HINT_T0);
        }
        _mm_prefetch((const char *)o->dst + i * o->ldd * ed, _MM_HINT_T0);
        _mm_prefetch((const char *)o->dst + (i * o->ldd + n - 1) * ed, _MM_HINT_T0);
    }
    __m512 acc[X512_MR][2];
    sums_avx512(rows, kp, a, b, acc);
    const int src = !o->src ? 0 : o->src_bf16 ? 2 : 1;
    if (o->dst_bf16) {
        if (src == 0) store_avx512(o, acc, rows, m, n, 0, true);
        else if (src == 1) store_avx512(o, acc, rows, m, n, 1, true);
        else store_avx512(o, acc, rows, m, n, 2, true);
    } else {
        if (src == 0) store_avx512(o, acc, rows, m, n, 0, false);
        else if (src == 1) store_avx512(o, acc, rows, m, n, 1, false);
        else store_avx512(o, acc, rows, m, n, 2, false);
    }
}

/* A whole tile (or an edge: m <= MR rows, n <= 32 columns): the sums of
 * MR rows, or of 8 or 4 when the edge has no more, and their store. Kept
 * out of line: inlined into the driver, GCC runs short of vector
 * registers and spills in the k loop. */
GEMM_NOINLINE TARGET_AVX512BF16 static void fused_avx512(int64_t kp, const uint32_t *restrict a,
                                                         const uint32_t *restrict b, const bf16_out *o, int64_t m,
                                                         int64_t n) {
    if (m > 8 || X512_MR <= 8) tile_rows_avx512(X512_MR, kp, a, b, o, m, n);
    else if (m > 4) tile_rows_avx512(8, kp, a, b, o, m, n);
    else tile_rows_avx512(4, kp, a, b, o, m, n);
}
#endif

static const bf16_kernel KERNELS[] = {
#ifdef GEMM_X86
    {TG_GEMM_BF16_AVX512, "avx512bf16", X512_MR, X512_NR, X512_MR * 24, X512_NR * 48, 128, NULL, fused_avx512,
     pack_avx512},
    {TG_GEMM_BF16_AVX2, "avx2", AVX2_MR, AVX2_NR, AVX2_MR * 48, AVX2_NR * 64, 16, tile_avx2, NULL, pack_c},
#endif
    {TG_GEMM_BF16_PORTABLE, "portable", PORT_MR, PORT_NR, PORT_MR * 32, PORT_NR * 64, 0.5, tile_portable, NULL, pack_c},
};
#define NKERNELS ((int)(sizeof KERNELS / sizeof KERNELS[0]))

/* ---- choosing a kernel ------------------------------------------------------ */

static bool cpu_has(tg_gemm_bf16_kernel k) {
#ifdef GEMM_X86
    __builtin_cpu_init();
    if (k == TG_GEMM_BF16_AVX512)
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("avx512bf16");
    if (k == TG_GEMM_BF16_AVX2) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
    return k == TG_GEMM_BF16_PORTABLE || k == TG_GEMM_BF16_REFERENCE;
}

bool tg_gemm_bf16_available(tg_gemm_bf16_kernel kernel) { return kernel == TG_GEMM_BF16_AUTO || cpu_has(kernel); }

/* AUTO's kernel: TG_GEMM_BF16 when set to one this CPU has, else the
 * fastest. Asked once (CPUID traps to the hypervisor in a VM); threads
 * racing to the first call store the same answer. */
tg_gemm_bf16_kernel tg_gemm_bf16_auto(void) {
    static _Atomic int known; /* 0: not asked yet, else the kernel + 1 */
    int k = known;
    if (!k) {
        const char *env = getenv("TG_GEMM_BF16");
        tg_gemm_bf16_kernel pick = cpu_has(TG_GEMM_BF16_AVX512) ? TG_GEMM_BF16_AVX512
                                   : cpu_has(TG_GEMM_BF16_AVX2) ? TG_GEMM_BF16_AVX2
                                                                : TG_GEMM_BF16_PORTABLE;
        for (int i = 0; env && i < NKERNELS; i++)
            if (!strcmp(env, KERNELS[i].name) && cpu_has(KERNELS[i].id)) pick = KERNELS[i].id;
        known = k = (int)pick + 1;
    }
    return (tg_gemm_bf16_kernel)(k - 1);
}

const char *tg_gemm_bf16_name(tg_gemm_bf16_kernel kernel) {
    if (kernel == TG_GEMM_BF16_AUTO) kernel = tg_gemm_bf16_auto();
    if (kernel == TG_GEMM_BF16_REFERENCE) return "reference";
    for (int i = 0; i < NKERNELS; i++)
        if (KERNELS[i].id == kernel) return KERNELS[i].name;
    return "?";
}

/* The kernel to run for `kernel` (AUTO, or one the CPU lacks: AUTO's);
 * NULL for the reference. */
static const bf16_kernel *kernel_for(tg_gemm_bf16_kernel kernel) {
    if (kernel == TG_GEMM_BF16_REFERENCE) return NULL;
    if (kernel == TG_GEMM_BF16_AUTO || !cpu_has(kernel)) kernel = tg_gemm_bf16_auto();
    for (int i = 0; i < NKERNELS; i++)
        if (KERNELS[i].id == kernel) return &KERNELS[i];
    return &KERNELS[NKERNELS - 1];
}

/* ---- the reference -------------------------------------------------------------- */

/* op(A)[i][k] or op(B)[k][j] with A or B as stored; 0 past K (an odd K's
 * pad). */
static inline float ref_a(const tg_gemm_bf16_args *g, int64_t i, int64_t k) {
    return k < g->K ? bf16_daz(g->trans_a ? g->A[k * g->lda + i] : g->A[i * g->lda + k]) : 0.0f;
}
static inline float ref_b(const tg_gemm_bf16_args *g, int64_t k, int64_t j) {
    const pack_src b = {g->B, g->b_f32, 0, 0};
    return k < g->K ? bf16_daz(src_at(&b, g->trans_b ? j * g->ldb + k : k * g->ldb + j)) : 0.0f;
}

/* Element (i, j) of C_in (g->c_in, or C) and of C, as float32 or bfloat16. */
static inline float c_in_at(const tg_gemm_bf16_args *g, int64_t i, int64_t j) {
    const void *c = g->c_in ? g->c_in : g->C;
    const int64_t at = i * (g->c_in ? g->ldc_in : g->ldc) + j;
    return g->c_bf16 ? tg_bf16_to_f32(((const uint16_t *)c)[at]) : ((const float *)c)[at];
}
static inline void c_set(const tg_gemm_bf16_args *g, int64_t i, int64_t j, float r) {
    if (g->c_bf16) ((uint16_t *)g->C)[i * g->ldc + j] = tg_f32_to_bf16(r);
    else ((float *)g->C)[i * g->ldc + j] = r;
}

/* The rule of tensor/gemm.h, element by element. */
static void gemm_bf16_reference(const tg_gemm_bf16_args *g) {
    const int64_t kp = (g->K + 1) / 2, kcp = gemm_kc(kp, BF16_KCP);
    for (int64_t i = 0; i < g->M; i++)
        for (int64_t j = 0; j < g->N; j++) {
            float r = 0;
            for (int64_t p0 = 0; p0 < kp; p0 += kcp) {
                float acc = 0;
                for (int64_t p = p0; p < kp && p < p0 + kcp; p++) {
                    acc = bf16_step(acc, ref_a(g, i, 2 * p + 1), ref_b(g, 2 * p + 1, j));
                    acc = bf16_step(acc, ref_a(g, i, 2 * p), ref_b(g, 2 * p, j));
                }
                if (p0 > 0) r = fmaf(g->alpha, acc, r);
                else r = g->beta == 0 ? g->alpha * acc : fmaf(g->alpha, acc, g->beta * c_in_at(g, i, j));
            }
            c_set(g, i, j, r);
        }
}

/* ---- the packed driver ------------------------------------------------------------ */

/* The workspace of one call: whole-depth B of a super-block of ns
 * columns, the partial sums P (bfloat16 C, several slices), and an A
 * block per thread. */
typedef struct bf16_plan {
    int nt;
    int64_t kp, kcp, ns; /* pairs of K, pairs per slice, columns per super-block */
    size_t bbytes, pbytes, abytes;
} bf16_plan;

static bf16_plan make_plan(const bf16_kernel *kn, const tg_gemm_bf16_args *g, int nt) {
    bf16_plan p;
    p.nt = nt;
    p.kp = (g->K + 1) / 2;
    p.kcp = gemm_kc(p.kp, BF16_KCP);
    const int64_t nr = kn->nr, npad = (g->N + nr - 1) / nr * nr;
    int64_t ns = (int64_t)(GEMM_LAZY_B_BYTES / 4) / p.kp / nr * nr;
    p.ns = ns < nr ? nr : ns > npad ? npad : ns;
    p.bbytes = gemm_round64((size_t)(p.kp * p.ns) * 4);
    p.pbytes = g->c_bf16 && p.kp > p.kcp ? gemm_round64((size_t)(g->M * g->N) * sizeof(float)) : 0;
    const int64_t mc = g->M < kn->mc ? (g->M + kn->mr - 1) / kn->mr * kn->mr : kn->mc;
    p.abytes = gemm_round64((size_t)(p.kcp * mc) * 4);
    return p;
}

static size_t plan_bytes(const bf16_plan *p) { return p->bbytes + p->pbytes + (size_t)p->nt * p->abytes; }

typedef struct bf16_job {
    const tg_gemm_bf16_args *g;
    const bf16_kernel *kn;
    bf16_plan plan;
    float *P;             /* partial sums between slices, or NULL (C holds them) */
    uint32_t *bpack;      /* the super-block: slice s's panel q at s kcp ns + q kps nr words */
    unsigned char *apack; /* thread w's A block at w abytes */
    int64_t s0, ncur;     /* the super-block's first column and width */
    int64_t mt, np, nrc, ncc;
    int64_t rb[GEMM_MAX_ROW_CHUNKS + 1]; /* row chunks' first tiles (gemm_tasks) */
} bf16_job;

/* Pairs in slice s, and values of K in it. */
static inline int64_t slice_pairs(const bf16_job *jb, int64_t s) {
    const int64_t p0 = s * jb->plan.kcp;
    return jb->plan.kp - p0 < jb->plan.kcp ? jb->plan.kp - p0 : jb->plan.kcp;
}
static inline int64_t slice_k(const bf16_job *jb, int64_t s) {
    const int64_t k0 = 2 * s * jb->plan.kcp;
    return jb->g->K - k0 < 2 * jb->plan.kcp ? jb->g->K - k0 : 2 * jb->plan.kcp;
}

/* Panels of B packed by one task of the first round: with B's rows
 * across the columns (not transposed), a pair of rows is read once across
 * all of them (pack_avx512_rows). */
#define PACK_B_PANELS 8

/* Panels t PACK_B_PANELS .. of the super-block, every slice (the panels of
 * a slice lie one after the other, as one pack call writes them). */
static void pack_b_task(void *arg, int64_t t, int worker) {
    const bf16_job *jb = arg;
    const tg_gemm_bf16_args *g = jb->g;
    (void)worker;
    const int64_t nr = jb->kn->nr, q = t * PACK_B_PANELS, j0 = jb->s0 + q * nr, end = jb->s0 + jb->ncur;
    const int64_t n = end - j0 < PACK_B_PANELS * nr ? end - j0 : PACK_B_PANELS * nr;
    const pack_src b = {g->B, g->b_f32, g->trans_b ? g->ldb : 1, g->trans_b ? 1 : g->ldb};
    for (int64_t s = 0; s * jb->plan.kcp < jb->plan.kp; s++) {
        const pack_src bs = src_from(&b, j0, 2 * s * jb->plan.kcp);
        uint32_t *dst = jb->bpack + s * jb->plan.kcp * jb->plan.ns + q * slice_pairs(jb, s) * nr;
        jb->kn->pack(dst, nr, &bs, n, slice_k(jb, s));
    }
}

/* The store of slice s (of nsl) for the tile at (i, j) of C: from C_in
 * (beta) on the first slice, from P on the later ones; to P but on the
 * last one (P: bfloat16 C; a float32 C holds r itself). */
static bf16_out slice_out(const bf16_job *jb, int64_t s, int64_t nsl, int64_t i, int64_t j) {
    const tg_gemm_bf16_args *g = jb->g;
    const size_t ec = g->c_bf16 ? 2 : 4;
    char *c = (char *)g->C + (size_t)(i * g->ldc + j) * ec;
    float *p = jb->P ? jb->P + i * g->N + j : NULL;
    bf16_out o = {g->alpha, g->beta, c, g->ldc, g->c_bf16, c, g->ldc, g->c_bf16};
    if (s == 0 && g->c_in) o.src = (const char *)g->c_in + (size_t)(i * g->ldc_in + j) * ec, o.lds = g->ldc_in;
    if (s == 0 && g->beta == 0) o.src = NULL;
    if (s > 0) {
        o.beta = 1;
        if (p) o.src = p, o.lds = g->N, o.src_bf16 = false;
    }
    if (s < nsl - 1 && p) o.dst = p, o.ldd = g->N, o.dst_bf16 = false;
    return o;
}

/* Rows [r0, r1) x columns [c0, c1) of C (columns inside the super-block):
 * for each NC block of columns, each K slice, each MC block of rows: pack
 * that block of A, then the kernel over the tiles, NR panel by panel. */
static void bf16_task(const bf16_job *jb, int worker, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    const tg_gemm_bf16_args *g = jb->g;
    const bf16_kernel *kn = jb->kn;
    const int64_t mr = kn->mr, nr = kn->nr, nsl = (jb->plan.kp + jb->plan.kcp - 1) / jb->plan.kcp;
    const pack_src a = {g->A, false, g->trans_a ? 1 : g->lda, g->trans_a ? g->lda : 1};
    uint32_t *ap = (uint32_t *)(void *)(jb->apack + (size_t)worker * jb->plan.abytes);
    _Alignas(64) float tile[TILE_MAX];
    for (int64_t jc = c0; jc < c1; jc += kn->nc) {
        const int64_t nc = c1 - jc < kn->nc ? c1 - jc : kn->nc;
        for (int64_t ic = r0; ic < r1; ic += kn->mc) {
            const int64_t mc = r1 - ic < kn->mc ? r1 - ic : kn->mc;
            for (int64_t s = 0; s < nsl; s++) {
                const int64_t kps = slice_pairs(jb, s), k0 = 2 * s * jb->plan.kcp, kc = slice_k(jb, s);
                const uint32_t *bs = jb->bpack + s * jb->plan.kcp * jb->plan.ns + (jc - jb->s0) / nr * kps * nr;
                const pack_src as = src_from(&a, ic, k0);
                kn->pack(ap, mr, &as, mc, kc);
                for (int64_t q = 0; q * nr < nc; q++) {
                    const int64_t n = nc - q * nr < nr ? nc - q * nr : nr;
                    for (int64_t ir = 0; ir < mc; ir += mr) {
                        const int64_t m = mc - ir < mr ? mc - ir : mr;
                        const bf16_out o = slice_out(jb, s, nsl, ic + ir, jc + q * nr);
                        if (kn->fused) {
                            kn->fused(kps, ap + ir * kps, bs + q * kps * nr, &o, m, n);
                        } else {
                            kn->tile(kps, ap + ir * kps, bs + q * kps * nr, tile);
                            bf16_store_tile(&o, tile, nr, m, n);
                        }
                    }
                }
            }
        }
    }
}

/* Task t of the second round: row chunk t / ncc, column chunk t % ncc. */
static void compute_task(void *arg, int64_t t, int worker) {
    const bf16_job *jb = arg;
    const int64_t mr = jb->kn->mr, nr = jb->kn->nr, i = t / jb->ncc, j = t % jb->ncc, s0 = jb->s0;
    const int64_t r0 = jb->rb[i] * mr, r1 = jb->rb[i + 1] * mr;
    const int64_t c0 = s0 + j * jb->np / jb->ncc * nr, c1 = s0 + (j + 1) * jb->np / jb->ncc * nr;
    bf16_task(jb, worker, r0, r1 < jb->g->M ? r1 : jb->g->M, c0, c1 < s0 + jb->ncur ? c1 : s0 + jb->ncur);
}

static void bf16_packed(bf16_job *jb, unsigned char *base) {
    const tg_gemm_bf16_args *g = jb->g;
    const bf16_plan *p = &jb->plan;
    jb->bpack = (uint32_t *)(void *)base;
    jb->P = p->pbytes ? (float *)(void *)(base + p->bbytes) : NULL;
    jb->apack = base + p->bbytes + p->pbytes;
    jb->mt = (g->M + jb->kn->mr - 1) / jb->kn->mr;
    for (jb->s0 = 0; jb->s0 < g->N; jb->s0 += p->ns) {
        jb->ncur = g->N - jb->s0 < p->ns ? g->N - jb->s0 : p->ns;
        jb->np = (jb->ncur + jb->kn->nr - 1) / jb->kn->nr;
        tg_parallel(p->nt, (jb->np + PACK_B_PANELS - 1) / PACK_B_PANELS, pack_b_task, jb);
        gemm_tasks(jb->mt, jb->np, p->nt, jb->rb, &jb->nrc, &jb->ncc);
        const double fmas = (double)g->M * (double)jb->ncur * (double)g->K;
        tg_parallel_sized(p->nt, jb->nrc * jb->ncc, compute_task, jb, fmas / jb->kn->fmas_per_ns);
    }
}

/* C = beta C_in when nothing is to be multiplied (K == 0, alpha == 0);
 * returns false when there is a product to compute. */
static bool bf16_trivial(const tg_gemm_bf16_args *g) {
    if (g->M <= 0 || g->N <= 0) return true;
    if (g->K > 0 && g->alpha != 0) return false;
    for (int64_t i = 0; i < g->M; i++)
        for (int64_t j = 0; j < g->N; j++) c_set(g, i, j, g->beta == 0 ? 0.0f : g->beta * c_in_at(g, i, j));
    return true;
}

size_t tg_gemm_bf16_workspace_size(const tg_gemm_bf16_args *g) {
    const bf16_kernel *kn = kernel_for(g->kernel);
    if (!kn || g->M <= 0 || g->N <= 0 || g->K <= 0) return 0;
    const bf16_plan p = make_plan(kn, g, gemm_threads(g->M, g->N, g->K, g->threads));
    return plan_bytes(&p) + 64;
}

void tg_gemm_bf16_ws(const tg_gemm_bf16_args *g, void *work, size_t work_size) {
    if (bf16_trivial(g)) return;
    const bf16_kernel *kn = kernel_for(g->kernel);
    if (!kn) {
        gemm_bf16_reference(g);
        return;
    }
    /* the caller's workspace if big enough for all threads, else one
     * thread if enough for that (same bits), else our own */
    bf16_job jb = {.g = g, .kn = kn, .plan = make_plan(kn, g, gemm_threads(g->M, g->N, g->K, g->threads))};
    unsigned char *base = gemm_align64(work);
    const size_t skip = (size_t)(base - (unsigned char *)work);
    const size_t avail = work && work_size >= skip ? work_size - skip : 0;
    void *own = NULL;
    if (avail < plan_bytes(&jb.plan)) {
        const bf16_plan one = make_plan(kn, g, 1);
        if (avail >= plan_bytes(&one)) {
            jb.plan = one;
        } else {
            own = aligned_alloc(64, plan_bytes(&jb.plan));
            if (!own) {
                gemm_bf16_reference(g);
                return;
            }
            base = own;
        }
    }
    bf16_packed(&jb, base);
    free(own);
}

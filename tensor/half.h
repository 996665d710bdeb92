/* Low-precision storage: bfloat16 and IEEE half (float16) <-> float32.
 *
 * Both are 16-bit storage formats; tapegrad computes in float32 and stores
 * the result in the input's dtype, as PyTorch does on CPU.
 *
 *   bfloat16: 1 sign, 8 exponent (bias 127), 7 mantissa bits -- float32's
 *             range, 8 significant bits (epsilon 2^-7).
 *   float16:  1 sign, 5 exponent (bias 15), 10 mantissa bits -- largest
 *             finite 65504, smallest normal 2^-14, smallest subnormal 2^-24,
 *             11 significant bits (epsilon 2^-10).
 *
 * To float32 is exact: bfloat16 is float32's upper half (widening keeps
 * every bit, a signalling NaN included); a float16 NaN keeps its sign and
 * payload and comes out quiet (as the F16C instruction VCVTPH2PS gives it).
 *
 * From float32 rounds to nearest, ties to even, as IEEE 754 does:
 *  - NaN stays NaN: sign and the payload's top bits kept, made quiet;
 *  - +-inf stays +-inf; a finite value past the largest finite value plus
 *    half an ulp overflows to +-inf (float16: |x| >= 65520);
 *  - float16 has subnormals (multiples of 2^-24 below 2^-14): a value
 *    there rounds to the nearest multiple, |x| <= 2^-25 to a signed zero;
 *  - bfloat16 keeps float32's subnormals (rounded like the normals).
 * These scalar functions are the definition: tensor/convert.c converts
 * arrays with F16C / AVX-512 BF16 instructions when the CPU has them, and
 * tests/test_half.c checks both paths give these exact bits. */
#ifndef TG_TENSOR_HALF_H
#define TG_TENSOR_HALF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline uint32_t tg_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static inline float tg_f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* bfloat16 -> float32: the 16 bits become the upper half. */
static inline float tg_bf16_to_f32(uint16_t h) { return tg_f32_from_bits((uint32_t)h << 16); }

/* float32 -> bfloat16, round to nearest even. Adding 0x7fff plus the lowest
 * kept bit to the 32 bits rounds the dropped 16 bits: below half goes down,
 * above half up (a carry into the exponent is right: it is the next binade,
 * or inf past the largest finite), exactly half goes to the even side. */
static inline uint16_t tg_f32_to_bf16(float f) {
    uint32_t u = tg_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u); /* NaN, quiet */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* float16 -> float32, exact. */
static inline float tg_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f) /* inf, or NaN made quiet */
        return tg_f32_from_bits(sign | 0x7f800000u | (m ? 0x00400000u | (m << 13) : 0));
    if (e == 0) { /* zero or subnormal: m * 2^-24, exact in float32 */
        float v = (float)m * 0x1p-24f;
        return sign ? -v : v;
    }
    return tg_f32_from_bits(sign | ((e + 112u) << 23) | (m << 13)); /* rebias 15 -> 127 */
}

/* float32 -> float16, round to nearest even (see the top of this file). */
static inline uint16_t tg_f32_to_f16(float f) {
    uint32_t u = tg_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu)); /* NaN, quiet */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520: inf (65520 ties to even: inf) */
    if (a >= 0x38800000u) {                                  /* >= 2^-14: a normal float16 */
        uint32_t r = a - 0x38000000u;                        /* exponent bias 127 -> 15 */
        r += 0xfffu + ((r >> 13) & 1u);                      /* round the 13 dropped bits */
        return (uint16_t)(sign | (r >> 13));
    }
    if (a <= 0x33000000u) return sign; /* <= 2^-25, half the smallest subnormal: to zero (ties to even) */
    /* subnormal: the value is mant * 2^(e-150) with the implicit bit; in
     * units of 2^-24 that is mant >> (126 - e), rounded to nearest even */
    uint32_t e = a >> 23, mant = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - e; /* 14..24 */
    uint32_t r = mant >> shift, rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u))) r++; /* r == 0x400 is the smallest normal: right */
    return (uint16_t)(sign | r);
}

/* Array conversions (tensor/convert.c): the same bits as the functions
 * above, with vector instructions when the CPU has them. */
void tg_bf16_to_f32_n(float *dst, const uint16_t *src, size_t n);
void tg_f32_to_bf16_n(uint16_t *dst, const float *src, size_t n);
void tg_f16_to_f32_n(float *dst, const uint16_t *src, size_t n);
void tg_f32_to_f16_n(uint16_t *dst, const float *src, size_t n);

/* When true, the array conversions use the scalar functions above even on a
 * CPU with F16C / AVX-512 BF16 (tests compare the two paths). Not thread
 * safe: set it before converting. */
void tg_half_force_scalar(bool on);

#endif

/* Array conversions between float32 and bfloat16 / float16 (tensor/half.h).
 *
 * The scalar functions of tensor/half.h define the bits. On x86-64 built
 * with GCC or Clang, the CPU is asked at run time (never assumed at compile
 * time) and the loops use:
 *  - F16C (VCVTPS2PH with round-to-nearest-even, VCVTPH2PS) for float16:
 *    the same bits as the scalar code, NaNs included (both keep the sign and
 *    payload's top bits and make the NaN quiet);
 *  - AVX-512 BF16 (VCVTNEPS2BF16, with AVX-512 BW/VL for the 16-bit blend)
 *    for float32 -> bfloat16. That instruction
 *    treats a subnormal float32 input as zero, where round-to-nearest-even
 *    keeps it (bfloat16 has float32's subnormals), so the lanes with a
 *    subnormal input take the scalar rule's integer rounding instead.
 * bfloat16 -> float32 is a 16-bit shift, which the compiler vectorizes.
 * Everything else, and the tail of each array, runs the scalar code.
 * tests/test_half.c checks both paths over every 16-bit pattern and a large
 * set of float32 values. */
#include "tensor/half.h"
#include "tensor/internal.h"

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define TG_HALF_X86 1
#include <cpuid.h>
#include <immintrin.h>
#include <stdatomic.h>
#endif

static bool force_scalar;

void tg_half_force_scalar(bool on) { force_scalar = on; }

#ifdef TG_HALF_X86
/* F16C from CPUID leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports
 * does not know "f16c"; "avx" also says the OS saves the YMM registers.
 * Asked once: CPUID traps to the hypervisor in a virtual machine (21 us a
 * call measured on the bench machine), and the norms convert row by row. */
static bool have_f16c(void) {
    static _Atomic int cached = -1; /* -1: not asked yet */
    int f = atomic_load_explicit(&cached, memory_order_relaxed);
    if (f < 0) {
        unsigned a, b, c, d;
        __builtin_cpu_init();
        f = __builtin_cpu_supports("avx") && __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
        atomic_store_explicit(&cached, f, memory_order_relaxed);
    }
    return !force_scalar && f;
}
static bool have_avx512bf16(void) {
    __builtin_cpu_init();
    return !force_scalar && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
}

__attribute__((target("avx,f16c"))) static size_t f16_to_f32_f16c(float *dst, const uint16_t *src, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(src + i))));
    return i;
}

__attribute__((target("avx,f16c"))) static size_t f32_to_f16_f16c(uint16_t *dst, const float *src, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm_storeu_si128((__m128i *)(void *)(dst + i), h);
    }
    return i;
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) static size_t
f32_to_bf16_avx512(uint16_t *dst, const float *src, size_t n) {
    const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), min_normal = _mm512_set1_epi32(0x00800000);
    const __m512i bias = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 x = _mm512_loadu_ps(src + i);
        __m256bh b = _mm512_cvtneps_pbh(x);
        __m256i h;
        memcpy(&h, &b, sizeof h);
        __m512i u = _mm512_castps_si512(x), a = _mm512_and_si512(u, abs_mask);
        /* subnormal inputs: exponent bits zero, mantissa not */
        __mmask16 sub = _mm512_cmplt_epu32_mask(a, min_normal) & _mm512_test_epi32_mask(a, a);
        if (sub) { /* u + 0x7fff + ((u >> 16) & 1), upper halves: tg_f32_to_bf16 */
            __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, bias), _mm512_and_si512(_mm512_srli_epi32(u, 16), one));
            __m256i rh = _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16));
            h = _mm256_mask_blend_epi16(sub, h, rh);
        }
        _mm256_storeu_si256((__m256i *)(void *)(dst + i), h);
    }
    return i;
}
#endif

/* The vector loop's count of elements done (the rest runs the scalar
 * loop), or 0 when the CPU lacks its instructions or the build is not for
 * x86-64. */
#ifdef TG_HALF_X86
#define TG_HALF_VECTOR(have, call) ((have) ? (call) : 0)
#else
#define TG_HALF_VECTOR(have, call) 0
#endif

void tg_bf16_to_f32_n(float *dst, const uint16_t *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = tg_bf16_to_f32(src[i]);
}

void tg_f32_to_bf16_n(uint16_t *dst, const float *src, size_t n) {
    for (size_t i = TG_HALF_VECTOR(have_avx512bf16(), f32_to_bf16_avx512(dst, src, n)); i < n; i++)
        dst[i] = tg_f32_to_bf16(src[i]);
}

void tg_f16_to_f32_n(float *dst, const uint16_t *src, size_t n) {
    for (size_t i = TG_HALF_VECTOR(have_f16c(), f16_to_f32_f16c(dst, src, n)); i < n; i++)
        dst[i] = tg_f16_to_f32(src[i]);
}

void tg_f32_to_f16_n(uint16_t *dst, const float *src, size_t n) {
    for (size_t i = TG_HALF_VECTOR(have_f16c(), f32_to_f16_f16c(dst, src, n)); i < n; i++)
        dst[i] = tg_f32_to_f16(src[i]);
}

const char *tg_lowp_isa(void) {
#ifdef TG_HALF_X86
    bool f16c = have_f16c(), bf16 = have_avx512bf16();
    if (f16c && bf16) return "f16c+avx512bf16";
    if (f16c) return "f16c";
    if (bf16) return "avx512bf16";
#endif
    return "scalar";
}

/* float64 <-> low precision goes through float32, as PyTorch's conversions
 * do (a float64 is rounded to float32, then to 16 bits: the two roundings
 * can differ from one rounding in the last bit when the float64 lies within
 * a float32 ulp of a tie). */
void tg_convert_n(void *dst, tg_dtype to, const void *src, tg_dtype from, size_t n) {
    if (to == from) {
        if (n) memcpy(dst, src, n * tg_esize(to));
        return;
    }
    if (from == TG_F32 && to == TG_BF16) tg_f32_to_bf16_n(dst, src, n);
    else if (from == TG_F32 && to == TG_F16) tg_f32_to_f16_n(dst, src, n);
    else if (from == TG_BF16 && to == TG_F32) tg_bf16_to_f32_n(dst, src, n);
    else if (from == TG_F16 && to == TG_F32) tg_f16_to_f32_n(dst, src, n);
    else if (from == TG_F32 && to == TG_F64) {
        const float *s = src;
        double *d = dst;
        for (size_t i = 0; i < n; i++) d[i] = s[i];
    } else if (from == TG_F64 && to == TG_F32) {
        const double *s = src;
        float *d = dst;
        for (size_t i = 0; i < n; i++) d[i] = (float)s[i];
    } else { /* through float32, in blocks on the stack */
        float tmp[256];
        size_t si = tg_esize(from), di = tg_esize(to);
        for (size_t i = 0; i < n; i += 256) {
            size_t k = n - i < 256 ? n - i : 256;
            tg_convert_n(tmp, TG_F32, (const char *)src + i * si, from, k);
            tg_convert_n((char *)dst + i * di, to, tmp, TG_F32, k);
        }
    }
}

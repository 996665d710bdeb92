/* The GEMM driver and micro-kernels: shared helpers and the per-ISA vector
 * set here, the per-dtype code in the template tensor/gemm_impl.inc
 * (instantiated below for float and double).
 * See tensor/gemm.h for the contract and the determinism recipe.
 *
 * Tuning knobs (compile-time, for experiments with bench/gemm.c):
 *   TG_GEMM_{MR,NR,KC,MC,NC}_{F32,F64}  blocking of the packed path
 *   TG_GEMM_TASKS_PER_THREAD            tasks per thread (multi-threaded)
 *   TG_GEMM_CHUNK_TILES                 least MR tiles per task's row chunk
 *   TG_GEMM_GUIDED                      guided row chunks: 1/(this x threads) of what is left
 *   TG_GEMM_FORCE=1 / 2                 always the direct / packed path
 * Defaults were measured on Zen 5 (48 KiB L1d, 1 MiB L2): with AVX-512 the
 * f32 micro-kernel is 12 x 32 (24 accumulators), KC 384, MC 288, NC 1536,
 * ~215 GFLOP/s in the k loop, ~190 end to end (OpenBLAS: ~185). Blocking
 * sizes between KC 192..768 and MC 96..480 measured within noise. */
#include "tensor/gemm.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#elif defined(__SSE2__)
#include <emmintrin.h>
#endif
#include "tensor/gemm_shared.h"
#include "tensor/parallel.h"

/* ---- choosing the path --------------------------------------------------- */

/* The direct (unpacked) path wins when packing cannot be amortized: few
 * multiply-adds, few rows (M <= 64: the tiles of a small batch), or, for
 * A (M,K) times B^T, an A small enough to stay in L2 while the direct path
 * re-reads it for every column block (measured on Zen 5; see bench/gemm.c).
 * May-pack: false means no layout of this shape takes the packed path. */
#define GEMM_DIRECT_FMAS ((int64_t)64 * 64 * 64)
#define GEMM_DIRECT_ROWS 64
#define GEMM_DIRECT_NT_BYTES ((int64_t)1 << 20)
static bool gemm_may_pack(int64_t M, int64_t N, int64_t K) {
#ifdef TG_GEMM_FORCE /* tuning: 1 always direct, 2 always packed */
    return TG_GEMM_FORCE == 2;
#endif
    return M > GEMM_DIRECT_ROWS && M * N * K > GEMM_DIRECT_FMAS;
}
static bool gemm_use_direct(bool ta, bool tb, int64_t M, int64_t N, int64_t K, size_t es) {
#ifdef TG_GEMM_FORCE
    (void)ta, (void)tb, (void)es;
    return !gemm_may_pack(M, N, K);
#endif
    return !gemm_may_pack(M, N, K) || (!ta && tb && M * K * (int64_t)es <= GEMM_DIRECT_NT_BYTES);
}

/* How long a thread waits for a B panel another thread is packing before
 * it packs a private copy instead: packing one panel takes a few
 * microseconds, about as long as these pauses; a packer that has lost its
 * core (a busy machine) would make the wait a time slice (milliseconds). */
#define GEMM_PANEL_SPINS 1024
static inline void gemm_pause(void) {
#ifdef __SSE2__
    _mm_pause();
#endif
}

/* ---- in-register transposes and partial loads/stores for packing ---- */

#if defined(__AVX512F__)
/* Transposes the 8x8 doubles in v[0..7]. */
static inline void gemm_tr8_pd(__m512d v[8]) {
    __m512d t[8], u[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm512_unpacklo_pd(v[2 * i], v[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_pd(v[2 * i], v[2 * i + 1]);
    }
    /* t[2i+j] holds in 128-bit lane L rows 2i, 2i+1 of column 2L+j */
    for (int j = 0; j < 2; j++) {
        u[j] = _mm512_shuffle_f64x2(t[j], t[2 + j], 0x88);
        u[2 + j] = _mm512_shuffle_f64x2(t[j], t[2 + j], 0xdd);
        u[4 + j] = _mm512_shuffle_f64x2(t[4 + j], t[6 + j], 0x88);
        u[6 + j] = _mm512_shuffle_f64x2(t[4 + j], t[6 + j], 0xdd);
    }
    for (int j = 0; j < 2; j++) {
        v[j] = _mm512_shuffle_f64x2(u[j], u[4 + j], 0x88);
        v[4 + j] = _mm512_shuffle_f64x2(u[j], u[4 + j], 0xdd);
        v[2 + j] = _mm512_shuffle_f64x2(u[2 + j], u[6 + j], 0x88);
        v[6 + j] = _mm512_shuffle_f64x2(u[2 + j], u[6 + j], 0xdd);
    }
}
#define GEMM_MASK16(n) ((__mmask16)((1u << (n)) - 1u))
#define GEMM_MASK8(n) ((__mmask8)((1u << (n)) - 1u))

#elif defined(__AVX2__) && defined(__FMA__)
/* Transposes the 8x8 floats in v[0..7]. */
static inline void gemm_tr8_ps(__m256 v[8]) {
    __m256 t[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(v[2 * i], v[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(v[2 * i], v[2 * i + 1]);
    }
    for (int i = 0; i < 2; i++) {
        __m256d a = _mm256_castps_pd(t[4 * i]), b = _mm256_castps_pd(t[4 * i + 1]);
        __m256d c = _mm256_castps_pd(t[4 * i + 2]), d = _mm256_castps_pd(t[4 * i + 3]);
        t[4 * i] = _mm256_castpd_ps(_mm256_unpacklo_pd(a, c));
        t[4 * i + 1] = _mm256_castpd_ps(_mm256_unpackhi_pd(a, c));
        t[4 * i + 2] = _mm256_castpd_ps(_mm256_unpacklo_pd(b, d));
        t[4 * i + 3] = _mm256_castpd_ps(_mm256_unpackhi_pd(b, d));
    }
    /* t[4i+j] holds in 128-bit lane L rows 4i..4i+3 of column 4L+j */
    for (int j = 0; j < 4; j++) {
        v[j] = _mm256_permute2f128_ps(t[j], t[4 + j], 0x20);
        v[4 + j] = _mm256_permute2f128_ps(t[j], t[4 + j], 0x31);
    }
}

/* Transposes the 4x4 doubles in v[0..3]. */
static inline void gemm_tr4_pd(__m256d v[4]) {
    __m256d t0 = _mm256_unpacklo_pd(v[0], v[1]), t1 = _mm256_unpackhi_pd(v[0], v[1]);
    __m256d t2 = _mm256_unpacklo_pd(v[2], v[3]), t3 = _mm256_unpackhi_pd(v[2], v[3]);
    v[0] = _mm256_permute2f128_pd(t0, t2, 0x20);
    v[1] = _mm256_permute2f128_pd(t1, t3, 0x20);
    v[2] = _mm256_permute2f128_pd(t0, t2, 0x31);
    v[3] = _mm256_permute2f128_pd(t1, t3, 0x31);
}

/* Lane masks for maskload/maskstore: the first n of 8 (32-bit) lanes. */
static inline __m256i gemm_mask8x32(int64_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
/* The first n of 4 (64-bit) lanes. */
static inline __m256i gemm_mask4x64(int64_t n) {
    return _mm256_cmpgt_epi64(_mm256_set1_epi64x(n), _mm256_setr_epi64x(0, 1, 2, 3));
}
#endif

/* ---- the vector set, one per ISA ---------------------------------------
 * The kernels are written once (tensor/gemm_impl.inc, a template: see
 * tensor/instantiate.h) against these names. Each ISA defines all of them
 * for both element types; GEMM_PICK(for_f32, for_f64) keeps the one of the
 * template pass being compiled (TG_F64 is 0 or 1 there).
 *   GEMM_SIMD          1 when the set below exists, 0 for the portable kernels
 *   VEC, VL            the vector type and its number of lanes
 *   VZERO()            all lanes 0              VSET1(x)       all lanes x
 *   VLOAD(p)           load, p 64-byte aligned  VLOADU(p)      load, any p
 *   VSTOREU(p, v)      store, any p
 *   VFMA(a, b, c)      a*b + c, fused           VMUL(a, b)     a*b
 *   VLOAD_N(p, n)      the first n lanes, zeros after
 *   VSTORE_N(p, v, n)  stores the first n lanes
 *   VTRANSPOSE(v)      transposes the VL x VL block held in VEC v[VL]
 * and the register tiles that suit the ISA:
 *   GEMM_MR_DEFAULT, GEMM_NR_DEFAULT_F32/_F64  the packed path's micro-tile
 *   DMR, DNR           the direct path's tile (DNR: two vectors)
 *   GEMM_FMAS_PER_NS   multiply-adds per ns of one thread, about 0.7x the
 *                      measured rate, for the pool's time estimate (it errs
 *                      long: a needless wake costs the caller ~0.1 ms, a
 *                      missed one up to half the job) */
#define GEMM_PICK(for_f32, for_f64) GEMM_PICK_(TG_F64, for_f32, for_f64)
/* (two steps, so that TG_F64 becomes 0 or 1 before the paste) */
#define GEMM_PICK_(f64, a, b) GEMM_PICK__(f64, a, b)
#define GEMM_PICK__(f64, a, b) GEMM_PICK_##f64(a, b)
#define GEMM_PICK_0(a, b) a
#define GEMM_PICK_1(a, b) b

#if defined(__AVX512F__)
#define GEMM_ISA "avx512"
#define GEMM_SIMD 1
#define VEC GEMM_PICK(__m512, __m512d)
#define VL GEMM_PICK(16, 8)
#define VZERO() GEMM_PICK(_mm512_setzero_ps(), _mm512_setzero_pd())
#define VSET1(x) GEMM_PICK(_mm512_set1_ps(x), _mm512_set1_pd(x))
#define VLOAD(p) GEMM_PICK(_mm512_load_ps(p), _mm512_load_pd(p))
#define VLOADU(p) GEMM_PICK(_mm512_loadu_ps(p), _mm512_loadu_pd(p))
#define VSTOREU(p, v) GEMM_PICK(_mm512_storeu_ps(p, v), _mm512_storeu_pd(p, v))
#define VFMA(a, b, c) GEMM_PICK(_mm512_fmadd_ps(a, b, c), _mm512_fmadd_pd(a, b, c))
#define VMUL(a, b) GEMM_PICK(_mm512_mul_ps(a, b), _mm512_mul_pd(a, b))
#define VLOAD_N(p, n) GEMM_PICK(_mm512_maskz_loadu_ps(GEMM_MASK16(n), p), _mm512_maskz_loadu_pd(GEMM_MASK8(n), p))
#define VSTORE_N(p, v, n) \
    GEMM_PICK(_mm512_mask_storeu_ps(p, GEMM_MASK16(n), v), _mm512_mask_storeu_pd(p, GEMM_MASK8(n), v))
#define VTRANSPOSE(v) GEMM_PICK(gemm_tr16_ps(v), gemm_tr8_pd(v))
#define GEMM_MR_DEFAULT 12
#define GEMM_NR_DEFAULT_F32 32
#define GEMM_NR_DEFAULT_F64 16
#define DMR 8
#define DNR (2 * VL)
#define GEMM_FMAS_PER_NS (4 * VL)
#elif defined(__AVX2__) && defined(__FMA__)
#define GEMM_ISA "avx2"
#define GEMM_SIMD 1
#define VEC GEMM_PICK(__m256, __m256d)
#define VL GEMM_PICK(8, 4)
#define VZERO() GEMM_PICK(_mm256_setzero_ps(), _mm256_setzero_pd())
#define VSET1(x) GEMM_PICK(_mm256_set1_ps(x), _mm256_set1_pd(x))
#define VLOAD(p) GEMM_PICK(_mm256_load_ps(p), _mm256_load_pd(p))
#define VLOADU(p) GEMM_PICK(_mm256_loadu_ps(p), _mm256_loadu_pd(p))
#define VSTOREU(p, v) GEMM_PICK(_mm256_storeu_ps(p, v), _mm256_storeu_pd(p, v))
#define VFMA(a, b, c) GEMM_PICK(_mm256_fmadd_ps(a, b, c), _mm256_fmadd_pd(a, b, c))
#define VMUL(a, b) GEMM_PICK(_mm256_mul_ps(a, b), _mm256_mul_pd(a, b))
#define VLOAD_N(p, n) GEMM_PICK(_mm256_maskload_ps(p, gemm_mask8x32(n)), _mm256_maskload_pd(p, gemm_mask4x64(n)))
#define VSTORE_N(p, v, n) \
    GEMM_PICK(_mm256_maskstore_ps(p, gemm_mask8x32(n), v), _mm256_maskstore_pd(p, gemm_mask4x64(n), v))
#define VTRANSPOSE(v) GEMM_PICK(gemm_tr8_ps(v), gemm_tr4_pd(v))
#define GEMM_MR_DEFAULT 6
#define GEMM_NR_DEFAULT_F32 16
#define GEMM_NR_DEFAULT_F64 8
#define DMR 6
#define DNR (2 * VL)
#define GEMM_FMAS_PER_NS (4 * VL)
#else
#define GEMM_ISA "portable"
#define GEMM_SIMD 0
#define GEMM_MR_DEFAULT 4
#define GEMM_NR_DEFAULT_F32 8
#define GEMM_NR_DEFAULT_F64 4
#define DMR 4
#define DNR 8
#define GEMM_FMAS_PER_NS 2
#endif

#ifdef __FMA__
#define FMA_S(a, b, c) TG_M(fma)(a, b, c)
#else
#define FMA_S(a, b, c) ((a) * (b) + (c))
#endif

/* ---- blocking (tuning knobs, see the top of this file) ------------------ */

#ifndef TG_GEMM_MR_F32
#define TG_GEMM_MR_F32 GEMM_MR_DEFAULT
#endif
#ifndef TG_GEMM_NR_F32
#define TG_GEMM_NR_F32 GEMM_NR_DEFAULT_F32
#endif
#ifndef TG_GEMM_KC_F32
#define TG_GEMM_KC_F32 384
#endif
#ifndef TG_GEMM_MC_F32
#define TG_GEMM_MC_F32 (TG_GEMM_MR_F32 * 24)
#endif
#ifndef TG_GEMM_NC_F32
#define TG_GEMM_NC_F32 (TG_GEMM_NR_F32 * 48)
#endif
#ifndef TG_GEMM_MR_F64
#define TG_GEMM_MR_F64 GEMM_MR_DEFAULT
#endif
#ifndef TG_GEMM_NR_F64
#define TG_GEMM_NR_F64 GEMM_NR_DEFAULT_F64
#endif
#ifndef TG_GEMM_KC_F64
#define TG_GEMM_KC_F64 256
#endif
#ifndef TG_GEMM_MC_F64
#define TG_GEMM_MC_F64 (TG_GEMM_MR_F64 * 24)
#endif
#ifndef TG_GEMM_NC_F64
#define TG_GEMM_NC_F64 (TG_GEMM_NR_F64 * 64)
#endif
#define MR GEMM_PICK(TG_GEMM_MR_F32, TG_GEMM_MR_F64)
#define NR GEMM_PICK(TG_GEMM_NR_F32, TG_GEMM_NR_F64)
#define KC_MAX GEMM_PICK(TG_GEMM_KC_F32, TG_GEMM_KC_F64)
#define MC GEMM_PICK(TG_GEMM_MC_F32, TG_GEMM_MC_F64)
#define NC GEMM_PICK(TG_GEMM_NC_F32, TG_GEMM_NC_F64)

/* ---- the kernels for float and double ----------------------------------- */

/* GEMM_PUBLIC(_ws) is tg_gemm_f32_ws in the float pass: the dtype sits in the
 * middle of the public names, where TG_FN cannot put it. */
#define GEMM_PASTE_(a, b) a##b
#define GEMM_PASTE(a, b) GEMM_PASTE_(a, b)
#define GEMM_PUBLIC(suffix) GEMM_PASTE(TG_FN(tg_gemm), suffix)

#define TG_TEMPLATE "tensor/gemm_impl.inc"
#include "tensor/instantiate.h"

/* ---- dispatch ---------------------------------------------------------- */

size_t tg_gemm_workspace_size(int64_t M, int64_t N, int64_t K, size_t elem_size, int threads) {
    if (M <= 0 || N <= 0 || K <= 0 || !gemm_may_pack(M, N, K)) return 0;
    return elem_size == sizeof(double) ? gemm_workspace_f64(M, N, K, threads) : gemm_workspace_f32(M, N, K, threads);
}

const char *tg_gemm_kernel_name(void) { return GEMM_ISA; }

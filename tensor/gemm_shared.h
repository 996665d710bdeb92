/* Helpers shared by the float / double GEMM (tensor/gemm.c) and the
 * bfloat16 GEMM (tensor/gemm_bf16.c): workspace alignment, the K slices,
 * how many threads a product is worth and how its rows are cut into tasks.
 * Internal; included by those two files only. */
#ifndef TG_TENSOR_GEMM_SHARED_H
#define TG_TENSOR_GEMM_SHARED_H

#include <stddef.h>
#include <stdint.h>

/* x86-64 with GCC or Clang: the AVX-512 helpers below are compiled for
 * AVX-512F whatever the build's flags, so the bfloat16 GEMM, which asks
 * the CPU at run time, can use them in any build. */
#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define GEMM_X86 1
#include <immintrin.h>
#define GEMM_TARGET_AVX512 __attribute__((target("avx512f")))

/* Transposes the 16x16 floats in v[0..15] (v[i] is row i); moves bits, so
 * it transposes any 32-bit elements (gemm_bf16.c: pairs of bfloat16). */
GEMM_TARGET_AVX512 static inline void gemm_tr16_ps(__m512 v[16]) {
    __m512 t[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]);
    }
    /* after this step, v[4i+j] holds in 128-bit lane L rows 4i..4i+3 of column 4L+j */
    for (int i = 0; i < 4; i++) {
        __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
        __m512d c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
        v[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        v[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        v[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        v[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    for (int j = 0; j < 4; j++) {
        t[j] = _mm512_shuffle_f32x4(v[j], v[4 + j], 0x88);
        t[4 + j] = _mm512_shuffle_f32x4(v[j], v[4 + j], 0xdd);
        t[8 + j] = _mm512_shuffle_f32x4(v[8 + j], v[12 + j], 0x88);
        t[12 + j] = _mm512_shuffle_f32x4(v[8 + j], v[12 + j], 0xdd);
    }
    for (int j = 0; j < 4; j++) {
        v[j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0x88);
        v[8 + j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0xdd);
        v[4 + j] = _mm512_shuffle_f32x4(t[4 + j], t[12 + j], 0x88);
        v[12 + j] = _mm512_shuffle_f32x4(t[4 + j], t[12 + j], 0xdd);
    }
}
#endif

#if defined(__GNUC__)
#define GEMM_NOINLINE __attribute__((noinline))
#else
#define GEMM_NOINLINE
#endif

static inline size_t gemm_round64(size_t n) { return (n + 63) / 64 * 64; }

static inline unsigned char *gemm_align64(void *p) { return (unsigned char *)(((uintptr_t)p + 63) / 64 * 64); }

/* Depth of the K slices: K cut into equal slices no deeper than kc_max. It
 * depends on K and the dtype only: the sums' order never depends on threads
 * or on M and N. */
static inline int64_t gemm_kc(int64_t K, int64_t kc_max) {
    int64_t n = (K + kc_max - 1) / kc_max;
    if (n < 1) n = 1;
    return (K + n - 1) / n;
}

/* Threads worth starting: at least ~4M multiply-adds (~20 us) each, so the
 * fork and join (a few us) stay small. */
#ifndef TG_GEMM_FMAS_PER_THREAD
#define TG_GEMM_FMAS_PER_THREAD ((int64_t)1 << 22)
#endif
#define GEMM_FMAS_PER_THREAD ((int64_t)TG_GEMM_FMAS_PER_THREAD)
static inline int gemm_threads(int64_t M, int64_t N, int64_t K, int threads) {
#ifdef TG_HAVE_OPENMP
    if (threads < 1) threads = 1;
    int64_t work = M * N * K / GEMM_FMAS_PER_THREAD;
    if (work < threads) threads = work < 1 ? 1 : (int)work;
    return threads;
#else
    (void)M, (void)N, (void)K, (void)threads;
    return 1;
#endif
}

/* Lazy (multi-threaded) mode packs op(B) whole-depth in super-blocks of at
 * most this many bytes (at least one NR panel wide). */
#define GEMM_LAZY_B_BYTES ((size_t)16 << 20)

/* Task grid for nt threads over mt row tiles x np column panels. The
 * grid changes who computes what, never the bits.
 *
 * Many rows (TG_GEMM_CHUNK_TILES tiles or more for each of about
 * TG_GEMM_TASKS_PER_THREAD tasks per thread): row chunks of all the
 * columns, shrinking as they go ("guided"): each takes 1/(TG_GEMM_GUIDED
 * nt) of the tiles left, at least TG_GEMM_CHUNK_TILES and mt/256 (so at
 * most 256 chunks). With 2 threads the first chunk is half the rows, the
 * next a quarter, ..., down to chunks of 4 tiles: each chunk reads all of
 * packed B, so few chunks read less of it, and the threads still finish
 * within a small task of each other. Measured at 2 threads on
 * 4096x768x3072 (bench_gemm, quiet, median GFLOP/s of 5 alternating runs;
 * OpenBLAS ~350): 16 equal chunks, NT 315 NN 329 TN 290 (a thread idle for
 * up to one 8 ms chunk at the end of each call); guided 1/(2 nt): 345 354
 * 327; guided 1/nt: 352 366 349. (64 equal chunks: TN read its 12.6 MB of
 * packed B 64 times, 300.) The pool must not wait for the first chunk's
 * end to wake a helper: the GEMM tells it the job's size
 * (tg_parallel_sized).
 *
 * Fewer rows: about TASKS_PER_THREAD tasks per thread, row chunks of at
 * least TG_GEMM_CHUNK_TILES tiles and column chunks of at least 4 panels
 * where possible, all equal.
 * rb[0..*nrc] receives the row chunks' first tiles (rb[*nrc] = mt). */
#ifndef TG_GEMM_CHUNK_TILES
#define TG_GEMM_CHUNK_TILES 4
#endif
#ifndef TG_GEMM_TASKS_PER_THREAD
#define TG_GEMM_TASKS_PER_THREAD 8
#endif
#ifndef TG_GEMM_GUIDED
#define TG_GEMM_GUIDED 1
#endif
#define GEMM_MAX_ROW_CHUNKS 256
static inline void gemm_tasks(int64_t mt, int64_t np, int nt, int64_t rb[GEMM_MAX_ROW_CHUNKS + 1], int64_t *nrc,
                              int64_t *ncc) {
    const int64_t want = TG_GEMM_TASKS_PER_THREAD * (int64_t)nt;
    if (mt >= want * TG_GEMM_CHUNK_TILES) {
        const int64_t share = (int64_t)TG_GEMM_GUIDED * nt;
        int64_t least = (mt + GEMM_MAX_ROW_CHUNKS - 1) / GEMM_MAX_ROW_CHUNKS, n = 0;
        if (least < TG_GEMM_CHUNK_TILES) least = TG_GEMM_CHUNK_TILES;
        for (int64_t left = mt; left > 0; n++) {
            int64_t take = (left + share - 1) / share;
            if (take < least) take = least;
            rb[n] = mt - left;
            left -= take < left ? take : left;
        }
        rb[n] = mt;
        *nrc = n;
        *ncc = 1;
        return;
    }
    int64_t r = mt / TG_GEMM_CHUNK_TILES, c, cmax = np / 4;
    if (r < 1) r = 1;
    if (r > want) r = want;
    if (r > GEMM_MAX_ROW_CHUNKS) r = GEMM_MAX_ROW_CHUNKS;
    c = (want + r - 1) / r;
    if (cmax < 1) cmax = 1;
    if (c > cmax) c = cmax;
    for (int64_t i = 0; i <= r; i++) rb[i] = i * mt / r;
    *nrc = r;
    *ncc = c;
}

#endif

/* Raw fused normalization kernels: RMSNorm and LayerNorm over the last C
 * elements of N contiguous rows, float32 and float64, and on bfloat16 and
 * float16 storage (float32 arithmetic; the end of this file).
 *
 * These are plain-array kernels (no context, no tensors, no allocation).
 * The layer modules (tg_rmsnorm_new, tg_layernorm_new, ...) call them and
 * validate every argument first; the kernels themselves trust their
 * arguments: N, C >= 0, eps >= 0, non-overlapping arrays of the stated
 * sizes. N == 0 or C == 0 does nothing.
 * The full derivation of every formula is in docs/normalization-gradients.md.
 *
 * Symbols (the same in the code and in the guide):
 *   x, y    (N,C)  input and output rows
 *   g, b    (C)    gain (gamma) and bias (beta); NULL means "off"
 *                  (g NULL: g = 1, affine off; b NULL: b = 0, no bias)
 *   r       (N)    rstd = 1 / sqrt(<mean square or variance> + eps)
 *   xhat           the normalized row: x r (RMSNorm), (x - mu) r (LayerNorm)
 *   dy      (N,C)  gradient of the loss with respect to y
 *   u              g * dy (u = dy when g is NULL)
 *
 * Statistics and their types
 *   Row sums ACCUMULATE IN DOUBLE for both dtypes: each term (x_j^2,
 *   (x_j - mu)^2, u_j xhat_j, ...) is formed in the input type, four terms
 *   per lane are added in the input type, and these partials go into 32
 *   double lanes (tg_norm_rowsum in layers/norm_reduce.inc). For float32 that
 *   is "at least float32" with an error that does not grow with C (each
 *   partial carries a few float roundings of its own size), while the
 *   float-to-double conversions, the costly part, happen once per four
 *   elements (a sum of squares converting every term ran 1.9x slower).
 *   The statistics are SAVED AS DOUBLE for both dtypes (rstd and mean are
 *   double arrays even in the f32 kernels). Why:
 *   - Consistency: backward must see the statistics forward used. A float32
 *     mean of a row 1e4 + noise is off by up to 5e-4 (half an ulp at 1e4);
 *     with noise of std 0.1 that shifts xhat by 5e-3, which a backward
 *     recomputing xhat = (x - mean) r would turn into a 0.5% gradient
 *     error. A double mean keeps xhat at float32 accuracy.
 *   - Range: rstd can leave float32's range (eps < 1e-77 with a zero row;
 *     rows near FLT_MAX) but never double's.
 *   - Cost: 8 bytes per row per statistic, e.g. 32 KiB for 4096 rows:
 *     0.25% of one 4096x768 float32 tensor.
 *   Elementwise work (y, dx) runs in the input type with per-row
 *   coefficients rounded once; a float32 row whose rstd lies outside
 *   [2^-120, 2^120] is done entirely in double instead.
 *
 * Scale robustness
 *   A row whose sum of squares (or of squared deviations) overflows, or is
 *   so small that squares may have underflowed (below C times the type's
 *   smallest normal), is redone in double on a copy scaled by a power of
 *   two s = 2^k near its max-abs (exact scaling), using
 *     mean(x^2) + eps = s^2 (mean(x'^2) + eps / s^2),   x = s x',
 *   so eps keeps its exact meaning. This catches float32 rows beyond
 *   ~1e19 or below ~1e-18 (1e20 and 1e-20 are tested) and float64 rows
 *   beyond ~1e154 or below ~1e-154; ordinary rows never pay for it.
 *   Limits: float64 rows whose rms exceeds ~1e307 get a subnormal rstd
 *   (less precise); LayerNorm backward in float64 needs x - mean finite.
 *
 * Speed: the kernels are bound by memory bandwidth at large sizes and by
 * L1 loads in cache. Give them 64-byte aligned arrays (tensors from the
 * context are); with C a multiple of 16 floats (8 doubles) every row is
 * aligned. Misaligned rows measured up to 2x slower in cache.
 *
 * eps = 0 is allowed (the invariant tests use it); a row of zeros with
 * eps = 0 gives r = inf and y = NaN, exactly as the formula says.
 *
 * Gradients ACCUMULATE: dx += ..., dg += ..., db += .... Any of dx, dg, db
 * may be NULL when that gradient is not wanted. Zeroing is the caller's job.
 *
 * Threads and determinism
 *   threads <= 1 runs serially; threads > 1 uses up to that many threads
 *   of the task pool (tensor/parallel.h: work is handed out in tasks, and
 *   the caller never waits for a helper that is not running), from
 *   TG_NORM_PAR_MIN elements on. Forward and dx are independent per row.
 *   dg and db are sums over rows, added in an order fixed by the shape and
 *   the type, never by the thread count: the rows are cut into chunks
 *   (tg_norm_chunks), each chunk's terms are summed from 0 in row order
 *   into partials, and the partials are added into dg, db in chunk order;
 *   rows too wide for the partials add straight into dg, db in row order
 *   (dx parallel over a block's rows, then dg/db parallel over column
 *   ranges). So results are bitwise identical for any thread count and any
 *   subset of dx, dg, db, with no heap memory: the partials take at most
 *   64 KiB of the caller's stack (layers/norm_reduce.inc).
 *   Within a row, sums use 32 fixed lanes combined in a fixed tree: the
 *   order is written in the code, not chosen by the compiler's vector
 *   width, so it is the same on every build and thread count.
 */
#ifndef TG_LAYERS_NORM_KERNELS_H
#define TG_LAYERS_NORM_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- RMSNorm
 * Forward, per row:
 *   r = 1 / sqrt(mean_j x_j^2 + eps)
 *   y_i = g_i * x_i * r + b_i
 * y, x: (N,C)   g, b: (C) or NULL   rstd: (N) or NULL (saved for backward;
 * NULL when no backward will follow). */
void tg_rmsnorm_forward_f32(float *y, double *rstd, const float *x, const float *g, const float *b, int64_t N,
                            int64_t C, double eps, int threads);
void tg_rmsnorm_forward_f64(double *y, double *rstd, const double *x, const double *g, const double *b, int64_t N,
                            int64_t C, double eps, int threads);

/* Backward, per row, with xhat = x r and u = g dy:
 *   dx_i += r * (u_i - xhat_i * mean_j(u_j xhat_j))
 *   dg_i += sum over rows of dy_i xhat_i
 *   db_i += sum over rows of dy_i
 * dx, dy, x: (N,C)   dg, db: (C)   g: (C) or NULL   rstd: (N) from forward.
 * dx, dg, db may each be NULL. */
void tg_rmsnorm_backward_f32(float *dx, float *dg, float *db, const float *dy, const float *x, const float *g,
                             const double *rstd, int64_t N, int64_t C, int threads);
void tg_rmsnorm_backward_f64(double *dx, double *dg, double *db, const double *dy, const double *x, const double *g,
                             const double *rstd, int64_t N, int64_t C, int threads);

/* -------------------------------------------------------------- LayerNorm
 * Forward, per row (two-pass, never E[x^2] - E[x]^2):
 *   mu = mean_j x_j,   var = mean_j (x_j - mu)^2   (biased)
 *   r = 1 / sqrt(var + eps),   xhat_i = (x_i - mu) r
 *   y_i = g_i * xhat_i + b_i
 * y, x: (N,C)   g, b: (C) or NULL   mean, rstd: (N) or NULL (saved). */
void tg_layernorm_forward_f32(float *y, double *mean, double *rstd, const float *x, const float *g, const float *b,
                              int64_t N, int64_t C, double eps, int threads);
void tg_layernorm_forward_f64(double *y, double *mean, double *rstd, const double *x, const double *g, const double *b,
                              int64_t N, int64_t C, double eps, int threads);

/* Backward, per row, with xhat = (x - mu) r and u = g dy:
 *   dx_i += r * (u_i - mean_j u_j - xhat_i * mean_j(u_j xhat_j))
 *   dg_i += sum over rows of dy_i xhat_i
 *   db_i += sum over rows of dy_i
 * dx, dy, x: (N,C)   dg, db: (C)   g: (C) or NULL   mean, rstd: (N).
 * dx, dg, db may each be NULL. */
void tg_layernorm_backward_f32(float *dx, float *dg, float *db, const float *dy, const float *x, const float *g,
                               const double *mean, const double *rstd, int64_t N, int64_t C, int threads);
void tg_layernorm_backward_f64(double *dx, double *dg, double *db, const double *dy, const double *x, const double *g,
                               const double *mean, const double *rstd, int64_t N, int64_t C, int threads);

/* --------------------------------------------- 16-bit storage
 * The float32 kernels above on bfloat16 (_bf16) or float16 (_f16) rows:
 * the same row code instantiated for 16-bit arrays
 * (layers/norm_instantiate.h), each value widened to float32 (exactly) as
 * it is loaded and rounded once (nearest even) as it is stored, in
 * registers: one pass over 16-bit storage, no float32 copy of a row. The
 * results are bitwise those of widening x, dy into float32 tensors,
 * running the float32 kernel, and rounding y, or the sum grad + dx, once.
 * y, x, dy, dx: (N,C) 16-bit   g, b: (C) float32 or NULL (the caller
 * widens them once)   mean, rstd: (N) double, as above   dg, db: (C)
 * float32, accumulating (the caller adds them into its 16-bit grads)
 * dx: 16-bit, accumulating: dx = round(dx + dx_f32), rounded once.
 * Declared for S = bf16 and S = f16 by one macro:
 *   tg_rmsnorm_forward_bf16    tg_rmsnorm_forward_f16
 *   tg_rmsnorm_backward_bf16   tg_rmsnorm_backward_f16
 *   tg_layernorm_forward_bf16  tg_layernorm_forward_f16
 *   tg_layernorm_backward_bf16 tg_layernorm_backward_f16 */
#define TG_NORM_DECLARE_16(S)                                                                                    \
    void tg_rmsnorm_forward_##S(uint16_t *y, double *rstd, const uint16_t *x, const float *g, const float *b,    \
                                int64_t N, int64_t C, double eps, int threads);                                  \
    void tg_rmsnorm_backward_##S(uint16_t *dx, float *dg, float *db, const uint16_t *dy, const uint16_t *x,      \
                                 const float *g, const double *rstd, int64_t N, int64_t C, int threads);         \
    void tg_layernorm_forward_##S(uint16_t *y, double *mean, double *rstd, const uint16_t *x, const float *g,    \
                                  const float *b, int64_t N, int64_t C, double eps, int threads);                \
    void tg_layernorm_backward_##S(uint16_t *dx, float *dg, float *db, const uint16_t *dy, const uint16_t *x,    \
                                   const float *g, const double *mean, const double *rstd, int64_t N, int64_t C, \
                                   int threads)
TG_NORM_DECLARE_16(bf16);
TG_NORM_DECLARE_16(f16);
#undef TG_NORM_DECLARE_16

#ifdef __cplusplus
}
#endif

#endif /* TG_LAYERS_NORM_KERNELS_H */

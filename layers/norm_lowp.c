/* RMSNorm and LayerNorm on bfloat16 / float16 tensors: the statistics in
 * float32 or better, the output in the input's dtype.
 *
 * The convention (the first seed's, and the default of the RMSNorms this
 * project was designed from): widen x, gamma and beta to float32, compute
 * the statistics (mean of squares, or mean and variance), normalize and
 * scale in float32, and round ONCE, at the end, to the input's dtype:
 *   y = round_lp( g * x * r + b ),   r = 1 / sqrt(mean_j x_j^2 + eps)
 * with every quantity inside round_lp in float32 (the row sums in double:
 * the float32 kernels of layers/norm_kernels.h). The other convention
 * (another seed's) computes only mean(x^2) in float32 and divides in the
 * input dtype: y = round_lp(round_lp(x * round_lp(r)) * g), rounding three
 * times -- its error is a few epsilons larger, and it still avoids the
 * overflow of x^2 in float16, which is the point of the upcast.
 *
 * What the upcast prevents (tests/test_norm_lowp.c, with numbers): float16
 * tops out at 65504, so x^2 overflows to inf from |x| >= 256 and a row of
 * such values gives r = 0 and y = 0 or NaN (inf * 0) in a composed float16
 * twin; x^2 underflows to 0 below |x| ~ 2^-12 (float16's smallest subnormal
 * is 2^-24), so a row of tiny values has mean(x^2) = 0: with eps = 0 the
 * twin gives r = inf, y = +-inf, and NaN (0 * inf) for a zero element; with
 * eps > 0, r = 1/sqrt(eps) whatever the row. bfloat16 has
 * float32's range but 8 significant bits, so LayerNorm's variance of a row
 * with a large mean and a small spread (1000 + noise of 0.1: the values
 * are 1000 rounded to a spacing of 4) is lost entirely if the mean and the
 * deviations are computed in bfloat16.
 *
 * Backward: the gradient reaching y (dtype) is widened, the float32
 * backward runs on the widened x and gamma with the saved (double)
 * statistics, dx is added into x's 16-bit grad and dgamma, dbeta into
 * theirs, each sum rounded once.
 *
 * One pass over the 16-bit storage, converting in registers: the kernels
 * (tg_rmsnorm_forward_bf16, _f16 ... in layers/norm_kernels.h) are the
 * float32 row code instantiated for 16-bit arrays
 * (layers/norm_instantiate.h): each value is widened as it is loaded and
 * rounded as it is stored, inside the row loops, with float32's arithmetic
 * in float32's order. Main memory sees the 16-bit bytes only, and no row
 * is copied; gamma and beta (C values) are widened once here, and dgamma,
 * dbeta summed in float32 and added into the grads at the end. The bits
 * are those of widening whole tensors into float32 copies and running the
 * float32 kernels (tests/test_norm_lowp.c checks it bit for bit).
 *
 * Speed (4096x768 forward+backward, one thread; the measurements are in
 * docs/normalization-gradients.md, Low precision): the float32 kernels
 * run at DRAM bandwidth, the 16-bit ones are bound by their arithmetic --
 * the float32 row code's own plus the conversions -- so bfloat16 gains
 * only float32's memory stalls: RMSNorm 1.4-1.5x the float32 op's speed in
 * the bench, LayerNorm 1.0-1.7x (its float32 row code alone takes about
 * 1/1.7 of the float32 op's time). float16 widens without F16C (the
 * compiler does not vectorize VCVTPH2PS from scalar code) and is slower
 * than bfloat16. */
#include "layers/norm.h"
#include "layers/norm_kernels.h"

#include <string.h>

/* t's values widened to float32 (arena scratch), or NULL for a NULL t. */
static float *widen(tg_ctx *ctx, const char *fn, const tg_tensor *t, bool *ok) {
    if (!t) return NULL;
    float *p = tg_arena_alloc_fn(ctx, fn, (size_t)(t->numel ? t->numel : 1) * sizeof(float));
    if (p) tg_convert_n(p, TG_F32, t->data, t->dtype, (size_t)t->numel);
    else *ok = false;
    return p;
}

/* Zeroed float32 scratch of n elements when want, NULL otherwise. */
static float *zeros32(tg_ctx *ctx, const char *fn, bool want, int64_t n, bool *ok) {
    if (!want) return NULL;
    float *p = tg_arena_alloc_fn(ctx, fn, (size_t)(n ? n : 1) * sizeof(float));
    if (p) memset(p, 0, (size_t)n * sizeof(float));
    else *ok = false;
    return p;
}

/* grad += d, in float32, rounded once to grad's dtype. */
static void add_into(tg_tensor *grad, const float *d) {
    if (!grad) return;
    float tmp[256];
    uint16_t *h = grad->data;
    for (int64_t i = 0; i < grad->numel; i += 256) {
        size_t k = (size_t)(grad->numel - i < 256 ? grad->numel - i : 256);
        tg_convert_n(tmp, TG_F32, h + i, grad->dtype, k);
        for (size_t j = 0; j < k; j++) tmp[j] += d[i + (int64_t)j];
        tg_convert_n(h + i, grad->dtype, tmp, TG_F32, k);
    }
}

/* Forward was y = round_lp(norm_f32(x, g, b)) with the statistics saved in
 * double (RMSNorm: r per row; LayerNorm: mean, then r). Treating the final
 * rounding as the identity (as tg_cast does), the gradient is the float32
 * op's: its backward (layers/rmsnorm.c, layers/layernorm.c, derived in
 * docs/normalization-gradients.md) on the widened dy, x and g, row by row
 * (layers/norm_reduce.inc, 16-bit storage). */
static void norm_lowp_backward(tg_ctx *ctx, tg_node *n) {
    static const char fn[] = "norm backward";
    tg_tensor *x = n->in[0], *gamma = n->in[1], *beta = n->in[2];
    tg_tensor *dx = tg_grad_of(ctx, x), *dg = tg_grad_of(ctx, gamma), *db = tg_grad_of(ctx, beta);
    if (!tg_ok(ctx)) return;
    const int64_t N = n->i[0], C = n->i[1];
    const bool bf16 = x->dtype == TG_BF16;
    bool ok = true;
    float *g32 = widen(ctx, fn, gamma, &ok);
    float *dg32 = zeros32(ctx, fn, dg != NULL, C, &ok), *db32 = zeros32(ctx, fn, db != NULL, C, &ok);
    if (!ok) return;
    const double *stats = n->saved;
    uint16_t *dx16 = dx ? dx->data : NULL;
    const uint16_t *dy16 = n->out->grad->data, *x16 = x->data;
    if (n->i[2])
        (bf16 ? tg_layernorm_backward_bf16 : tg_layernorm_backward_f16)(dx16, dg32, db32, dy16, x16, g32, stats,
                                                                        stats + N, N, C, tg_threads(ctx));
    else
        (bf16 ? tg_rmsnorm_backward_bf16 : tg_rmsnorm_backward_f16)(dx16, dg32, db32, dy16, x16, g32, stats, N, C,
                                                                    tg_threads(ctx));
    add_into(dg, dg32);
    add_into(db, db32);
}

/* The 16-bit records: the fused ops' names and tangent rules (their
 * tangents are computed in float64 from the record), this file's backward,
 * and no double backward. */
static const tg_op_def RMSNORM_LOWP = {.name = "rmsnorm", .backward = norm_lowp_backward, .jvp = tg_rmsnorm_jvp};
static const tg_op_def LAYERNORM_LOWP = {.name = "layernorm", .backward = norm_lowp_backward, .jvp = tg_layernorm_jvp};

tg_tensor *tg_norm_lowp(tg_ctx *ctx, const char *fn, bool layernorm, tg_tensor *x, tg_tensor *gamma, tg_tensor *beta,
                        int ndim_norm, double eps) {
    int64_t N, C; /* the float32 op's checks, on 16-bit x, gamma, beta (layers/norm.h) */
    if (!tg_norm_check_args_lowp(ctx, fn, x, gamma, beta, ndim_norm, eps, &N, &C)) return NULL;
    tg_tensor *y = tg_new_like(ctx, fn, x);
    if (!y) return NULL;
    const int n_stats = layernorm ? 2 : 1;
    tg_tensor *in[3] = {x, gamma, beta};
    tg_node *n = tg_record(ctx, layernorm ? &LAYERNORM_LOWP : &RMSNORM_LOWP, y, 3, in);
    double *stats = NULL;
    if (n) {
        n->i[0] = N, n->i[1] = C, n->i[2] = layernorm;
        n->f[0] = eps;
        stats = tg_node_save(ctx, n, (size_t)(N > 0 ? n_stats * N : 1) * sizeof *stats);
        tg_node_count_saved(ctx, n, (size_t)x->numel * 2 + (gamma ? (size_t)C * 2 : 0));
    } else if (tg_ok(ctx)) { /* not recorded: the statistics are scratch */
        stats = tg_arena_alloc_fn(ctx, fn, (size_t)(N > 0 ? n_stats * N : 1) * sizeof *stats);
    }
    bool ok = stats != NULL && tg_ok(ctx);
    float *g32 = ok ? widen(ctx, fn, gamma, &ok) : NULL, *b32 = ok ? widen(ctx, fn, beta, &ok) : NULL;
    if (!ok) return NULL;
    const bool bf16 = x->dtype == TG_BF16;
    if (layernorm)
        (bf16 ? tg_layernorm_forward_bf16 : tg_layernorm_forward_f16)(y->data, stats, stats + N, x->data, g32, b32, N,
                                                                      C, eps, tg_threads(ctx));
    else
        (bf16 ? tg_rmsnorm_forward_bf16 : tg_rmsnorm_forward_f16)(y->data, stats, x->data, g32, b32, N, C, eps,
                                                                  tg_threads(ctx));
    return y;
}

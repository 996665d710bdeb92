/* Helpers for the layer tests (tests/test_linear.c, test_rmsnorm.c,
 * test_layernorm.c, test_fused_vs_composed.c, test_modules.c).
 * Header-only, so each test executable stays self-contained.
 *
 *  - lt_assert_error: the context holds an error of the given status whose
 *    message contains every given substring; then clears it.
 *  - lt_tensor: a tensor from a double array (any dtype).
 *  - lt_max_abs_diff / lt_assert_close: elementwise comparisons.
 *  - lt_norm_ref: an independent, naive float64 reference of RMSNorm and
 *    LayerNorm (plain loops over the formula, no shared code with the
 *    kernels), for values and for xhat.
 *  - lt_check_grad: tg_gradcheck with the result explained on failure. */
#ifndef TG_TESTS_LAYERS_TESTUTIL_H
#define TG_TESTS_LAYERS_TESTUTIL_H

#include <check.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tapegrad.h"
#include "testutil.h"

/* Asserts an error of `status` whose message names each string (testutil.h). */
#define lt_assert_error tg_test_assert_error

/* A tensor of dtype with the given values (numel doubles). */
static inline tg_tensor *lt_tensor(tg_ctx *ctx, tg_dtype dtype, int ndim, const int64_t *shape,
                                   const double *v) {
    tg_tensor *t = tg_zeros(ctx, dtype, ndim, shape);
    ck_assert_ptr_nonnull(t);
    for (int64_t i = 0; i < t->numel; i++) tg_set_flat(ctx, t, i, v[i]);
    return t;
}

/* Uniform values in [lo, hi) from the context's RNG, as a tensor. */
static inline tg_tensor *lt_rand(tg_ctx *ctx, tg_dtype dtype, int ndim, const int64_t *shape, double lo,
                                 double hi) {
    tg_tensor *t = tg_rand(ctx, dtype, ndim, shape, lo, hi);
    ck_assert_ptr_nonnull(t);
    return t;
}

static inline double lt_max_abs_diff(tg_ctx *ctx, const tg_tensor *a, const tg_tensor *b) {
    ck_assert_int_eq(a->numel, b->numel);
    double m = 0;
    for (int64_t i = 0; i < a->numel; i++) {
        double d = fabs(tg_get_flat(ctx, a, i) - tg_get_flat(ctx, b, i));
        if (d > m || d != d) m = d;
    }
    return m;
}

/* |a_i - b_i| <= atol + rtol |b_i| for all i, reporting the first failure. */
static inline void lt_assert_close(tg_ctx *ctx, const char *what, const tg_tensor *a, const tg_tensor *b,
                                   double atol, double rtol) {
    ck_assert_msg(a && b, "%s: missing tensor", what);
    ck_assert_msg(a->numel == b->numel, "%s: %lld vs %lld elements", what, (long long)a->numel,
                  (long long)b->numel);
    for (int64_t i = 0; i < a->numel; i++) {
        double x = tg_get_flat(ctx, a, i), y = tg_get_flat(ctx, b, i);
        ck_assert_msg(fabs(x - y) <= atol + rtol * fabs(y), "%s[%lld]: %.17g vs %.17g (atol %g rtol %g)", what,
                      (long long)i, x, y, atol, rtol);
    }
}

/* Same, against an array of doubles. */
static inline void lt_assert_close_arr(tg_ctx *ctx, const char *what, const tg_tensor *a, const double *b,
                                       double atol, double rtol) {
    ck_assert_msg(a != NULL, "%s: missing tensor", what);
    for (int64_t i = 0; i < a->numel; i++) {
        double x = tg_get_flat(ctx, a, i), y = b[i];
        ck_assert_msg(fabs(x - y) <= atol + rtol * fabs(y), "%s[%lld]: %.17g vs %.17g (atol %g rtol %g)", what,
                      (long long)i, x, y, atol, rtol);
    }
}

/* The naive float64 reference: rows of C elements of x (N*C values),
 * xhat = x / sqrt(mean x^2 + eps) (rms) or (x - mean) / sqrt(mean (x -
 * mean)^2 + eps) (layernorm, biased variance), y = xhat * g + b (g, b may
 * be NULL). Writes xhat and y (either may be NULL). Long double sums, plain
 * loops: independent of the library's kernels. */
static inline void lt_norm_ref(bool layer, const double *x, const double *g, const double *b, int64_t N, int64_t C,
                               double eps, double *xhat, double *y) {
    for (int64_t n = 0; n < N; n++) {
        const double *r = x + n * C;
        long double mu = 0;
        if (layer) {
            for (int64_t j = 0; j < C; j++) mu += r[j];
            mu /= C;
        }
        long double ss = 0;
        for (int64_t j = 0; j < C; j++) ss += ((long double)r[j] - mu) * ((long double)r[j] - mu);
        long double rstd = 1.0L / sqrtl(ss / C + eps);
        for (int64_t j = 0; j < C; j++) {
            double xh = (double)(((long double)r[j] - mu) * rstd);
            if (xhat) xhat[n * C + j] = xh;
            if (y) y[n * C + j] = xh * (g ? g[j] : 1.0) + (b ? b[j] : 0.0);
        }
    }
}

/* The values of t as a malloc'ed double array (free it). */
static inline double *lt_values(tg_ctx *ctx, const tg_tensor *t) {
    double *v = malloc((size_t)(t->numel > 0 ? t->numel : 1) * sizeof *v);
    ck_assert_ptr_nonnull(v);
    for (int64_t i = 0; i < t->numel; i++) v[i] = tg_get_flat(ctx, t, i);
    return v;
}

/* tg_gradcheck of f on inputs in `mode`, asserting a pass with a
 * description of the worst element otherwise. */
static inline void lt_check_grad(tg_ctx *ctx, const char *what, tg_gradcheck_fn f, void *user, int n,
                                 tg_tensor *const *inputs, tg_gradcheck_mode mode, uint64_t seed) {
    tg_gradcheck_opts o = tg_gradcheck_defaults();
    o.mode = mode;
    o.seed = seed;
    tg_gradcheck_result r;
    bool pass = tg_gradcheck(ctx, f, user, n, inputs, &o, &r);
    ck_assert_msg(tg_ok(ctx), "%s: gradcheck error: %s", what, tg_error_message(ctx));
    ck_assert_msg(pass && r.pass,
                  "%s (%s): gradcheck failed %lld of %lld; worst input %d index %lld analytic %.12g numeric %.12g",
                  what, mode == TG_GRADCHECK_FULL ? "full" : "directional", (long long)r.n_failed,
                  (long long)r.n_checked, r.worst_input, (long long)r.worst_index, r.worst_analytic,
                  r.worst_numeric);
    ck_assert_msg(r.n_checked > 0, "%s: nothing checked", what);
}

/* ---- norms as checked functions ------------------------------------------------ */

/* Which norm and its options, for lt_fw_norm (the `user` of tg_gradcheck). */
typedef struct lt_norm_case {
    bool layernorm;  /* LayerNorm, else RMSNorm */
    bool composed;   /* the composed twin, else the fused op */
    int ndim_norm;
    double eps;
    bool affine, bias; /* inputs: x, then gamma (affine), then beta (bias) */
} lt_norm_case;

/* The norm of in[0] with gamma = in[1] when affine and beta = the next
 * input when bias. */
static inline tg_tensor *lt_fw_norm(tg_ctx *ctx, tg_tensor *const *in, void *user) {
    const lt_norm_case *c = user;
    int k = 1;
    tg_tensor *g = c->affine ? in[k++] : NULL;
    tg_tensor *b = c->bias ? in[k++] : NULL;
    if (c->layernorm)
        return c->composed ? tg_layernorm_composed(ctx, in[0], g, b, c->ndim_norm, c->eps)
                           : tg_layernorm_fused(ctx, in[0], g, b, c->ndim_norm, c->eps);
    return c->composed ? tg_rmsnorm_composed(ctx, in[0], g, b, c->ndim_norm, c->eps)
                       : tg_rmsnorm_fused(ctx, in[0], g, b, c->ndim_norm, c->eps);
}

/* Makes the inputs of case c in float64: x of `shape` uniform in
 * scale * [-1, 1), gamma in [0.5, 1.5), beta in [-1, 1). Returns the count. */
static inline int lt_norm_inputs(tg_ctx *ctx, const lt_norm_case *c, int ndim, const int64_t *shape, double scale,
                                 tg_tensor **in) {
    int n = 0;
    in[n++] = lt_rand(ctx, TG_F64, ndim, shape, -scale, scale);
    const int64_t *ns = shape + ndim - c->ndim_norm;
    if (c->affine) in[n++] = lt_rand(ctx, TG_F64, c->ndim_norm, ns, 0.5, 1.5);
    if (c->bias) in[n++] = lt_rand(ctx, TG_F64, c->ndim_norm, ns, -1, 1);
    return n;
}

/* tg_gradcheck of case c on fresh inputs (see lt_norm_inputs). */
static inline void lt_norm_gradcheck(tg_ctx *ctx, const char *what, lt_norm_case c, int ndim, const int64_t *shape,
                                     double scale, tg_gradcheck_mode mode, uint64_t seed) {
    tg_tensor *in[3];
    int n = lt_norm_inputs(ctx, &c, ndim, shape, scale, in);
    lt_check_grad(ctx, what, lt_fw_norm, &c, n, in, mode, seed);
}

#endif

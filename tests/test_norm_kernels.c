/* Raw fused normalization kernels (layers/norm_kernels.h): RMSNorm and
 * LayerNorm forward/backward in float32 and float64.
 *
 * Every expected value here is computed independently of the kernels:
 *  - a reference written the naive way in double (each forward step on its
 *    own, and a backward that applies the chain rule through those same
 *    steps one at a time, as a tape over the composed ops would);
 *  - central finite differences of sum(w * y) for random w (float64);
 *  - the arange(9) RMSNorm values, worked by hand from the formula;
 *  - exact identities: invariants of the Jacobian, scale equivariance
 *    under power-of-two scaling (exact in floating point), accumulation.
 * The kernels take no context, so the tests need no fixture. */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "layers/norm_kernels.h"
#include "testutil.h"

/* ---- helpers ------------------------------------------------------------ */

enum { F64 = 0, F32 = 1 };
static const char *const DT_NAME[2] = {"f64", "f32"};
enum { RMS = 0, LN = 1 }; /* the norm under test */
static const char *const NORM_NAME[2] = {"rmsnorm", "layernorm"};

/* splitmix64: a deterministic stream for test data */
static uint64_t rng_state;
static void rng_seed(uint64_t s) { rng_state = s; }
static double urand(void) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1p-53;
}
/* uniform in [lo, hi) */
static double uni(double lo, double hi) { return lo + (hi - lo) * urand(); }

static double *dalloc(int64_t n) {
    double *p = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
    ck_assert_ptr_nonnull(p);
    return p;
}
static double *dcopy(const double *src, int64_t n) {
    double *p = dalloc(n);
    memcpy(p, src, (size_t)n * sizeof(double));
    return p;
}
static void fill(double *a, int64_t n, double lo, double hi) {
    for (int64_t i = 0; i < n; i++) a[i] = uni(lo, hi);
}
/* round to float in place, so f32 kernels and the double reference see
 * the same values */
static void to_f32_values(double *a, int64_t n) {
    if (a)
        for (int64_t i = 0; i < n; i++) a[i] = (double)(float)a[i];
}

static float *fdup(const double *src, int64_t n) {
    float *p = calloc((size_t)(n > 0 ? n : 1), sizeof(float));
    ck_assert_ptr_nonnull(p);
    if (src)
        for (int64_t i = 0; i < n; i++) p[i] = (float)src[i];
    return p;
}
static void fback(double *dst, const float *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = (double)src[i];
}

/* max_i |a_i - ref_i| / max(max_i |ref_i|, floor) */
static double scaled_err(const double *a, const double *ref, int64_t n, double floor) {
    double e = 0.0, m = floor;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs(a[i] - ref[i]);
        if (!(d <= e)) /* also catches NaN */
            e = d;
        if (fabs(ref[i]) > m) m = fabs(ref[i]);
    }
    return e / m;
}
/* The natural size of dx: max_n r_n times max |u| (u = g dy). dx is a
 * difference of terms of that size (for C = 1 RMSNorm, dx = r u eps /
 * (x^2 + eps) is ~1e-5 of them), so its round-off is measured against it. */
static double dx_scale(const double *r, const double *dy, const double *g, int64_t N, int64_t C) {
    double mr = 0.0, mu = 0.0;
    for (int64_t n = 0; n < N; n++) {
        mr = fmax(mr, r[n]);
        for (int64_t j = 0; j < C; j++) mu = fmax(mu, fabs(dy[n * C + j] * (g ? g[j] : 1.0)));
    }
    return mr * mu;
}
static bool all_finite(const double *a, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(a[i])) return false;
    return true;
}

/* ---- test inputs and outputs --------------------------------------------- */

/* A test's inputs, drawn in this order: x (N,C) uniform in [xlo, xhi),
 * dy (N,C) in [-1, 1), then g (C) in [0.5, 1.5) and b (C) in [-0.5, 0.5)
 * when asked for (NULL otherwise). */
typedef struct inputs {
    double *x, *dy, *g, *b;
} inputs;

static inputs draw_inputs(int64_t N, int64_t C, double xlo, double xhi, bool affine, bool bias) {
    inputs in = {dalloc(N * C), dalloc(N * C), affine ? dalloc(C) : NULL, bias ? dalloc(C) : NULL};
    fill(in.x, N * C, xlo, xhi);
    fill(in.dy, N * C, -1.0, 1.0);
    if (in.g) fill(in.g, C, 0.5, 1.5);
    if (in.b) fill(in.b, C, -0.5, 0.5);
    return in;
}
/* every input rounded to float (see to_f32_values) */
static void inputs_to_f32(inputs *in, int64_t N, int64_t C) {
    to_f32_values(in->x, N * C), to_f32_values(in->dy, N * C);
    to_f32_values(in->g, C), to_f32_values(in->b, C);
}
static void free_inputs(inputs *in) { free(in->x), free(in->dy), free(in->g), free(in->b); }

/* What a forward and a backward write, zeroed: y (N,C); mu and r (N), the
 * saved mean (LayerNorm's) and rstd; dx (N,C); dg and db (C). */
typedef struct outputs {
    double *y, *mu, *r, *dx, *dg, *db;
} outputs;

static outputs new_outputs(int64_t N, int64_t C) {
    return (outputs){dalloc(N * C), dalloc(N), dalloc(N), dalloc(N * C), dalloc(C), dalloc(C)};
}
static void free_outputs(outputs *o) { free(o->y), free(o->mu), free(o->r), free(o->dx), free(o->dg), free(o->db); }

/* ---- the kernels under test, with double arrays for both dtypes -------- */
/* norm: RMS or LN; dt: F64 or F32. f32: arrays are converted to float, the
 * f32 kernel runs, results are converted back. Saved statistics are double
 * for both dtypes; mean is LayerNorm's (not used for RMSNorm). */

static void k_fwd(int norm, int dt, double *y, double *mean, double *rstd, const double *x, const double *g,
                  const double *b, int64_t N, int64_t C, double eps, int threads) {
    if (dt == F64) {
        if (norm == LN) tg_layernorm_forward_f64(y, mean, rstd, x, g, b, N, C, eps, threads);
        else tg_rmsnorm_forward_f64(y, rstd, x, g, b, N, C, eps, threads);
        return;
    }
    float *yf = fdup(NULL, N * C), *xf = fdup(x, N * C);
    float *gf = g ? fdup(g, C) : NULL, *bf = b ? fdup(b, C) : NULL;
    if (norm == LN) tg_layernorm_forward_f32(yf, mean, rstd, xf, gf, bf, N, C, eps, threads);
    else tg_rmsnorm_forward_f32(yf, rstd, xf, gf, bf, N, C, eps, threads);
    fback(y, yf, N * C);
    free(yf), free(xf), free(gf), free(bf);
}

static void k_bwd(int norm, int dt, double *dx, double *dg, double *db, const double *dy, const double *x,
                  const double *g, const double *mean, const double *rstd, int64_t N, int64_t C, int threads) {
    if (dt == F64) {
        if (norm == LN) tg_layernorm_backward_f64(dx, dg, db, dy, x, g, mean, rstd, N, C, threads);
        else tg_rmsnorm_backward_f64(dx, dg, db, dy, x, g, rstd, N, C, threads);
        return;
    }
    float *dxf = dx ? fdup(dx, N * C) : NULL, *dgf = dg ? fdup(dg, C) : NULL;
    float *dbf = db ? fdup(db, C) : NULL;
    float *dyf = fdup(dy, N * C), *xf = fdup(x, N * C);
    float *gf = g ? fdup(g, C) : NULL;
    if (norm == LN) tg_layernorm_backward_f32(dxf, dgf, dbf, dyf, xf, gf, mean, rstd, N, C, threads);
    else tg_rmsnorm_backward_f32(dxf, dgf, dbf, dyf, xf, gf, rstd, N, C, threads);
    if (dx) fback(dx, dxf, N * C);
    if (dg) fback(dg, dgf, C);
    if (db) fback(db, dbf, C);
    free(dxf), free(dgf), free(dbf), free(dyf), free(xf), free(gf);
}

/* ---- naive double references --------------------------------------------- */
/* Each step of the composed forward on its own, and a backward that goes
 * back through the same steps one at a time, as a tape would. Rows one at
 * a time; gradients accumulate. */

/* y = g xhat + b for one row (g NULL: 1, b NULL: 0) */
static void ref_affine_fwd(double *y, const double *xhat, const double *g, const double *b, int64_t C) {
    for (int64_t j = 0; j < C; j++) y[j] = (g ? g[j] : 1.0) * xhat[j] + (b ? b[j] : 0.0);
}
/* back through y = g xhat + b: dxhat = dy g; dg += dy xhat; db += dy */
static void ref_affine_bwd(double *dxhat, double *dg, double *db, const double *dy, const double *xhat, const double *g,
                           int64_t C) {
    for (int64_t j = 0; j < C; j++) {
        dxhat[j] = dy[j] * (g ? g[j] : 1.0);
        if (dg) dg[j] += dy[j] * xhat[j];
        if (db) db[j] += dy[j];
    }
}

/* RMSNorm composed, one row: ms = mean(x^2); t = ms + eps; r = t^(-1/2);
 * xhat = x r. Returns t; fills xhat. */
static double ref_rms_row(double *xhat, const double *xr, int64_t C, double eps) {
    double ms = 0.0;
    for (int64_t j = 0; j < C; j++) ms += xr[j] * xr[j];
    ms /= (double)C;
    const double t = ms + eps, r = 1.0 / sqrt(t);
    for (int64_t j = 0; j < C; j++) xhat[j] = xr[j] * r;
    return t;
}

/* RMSNorm composed: the row steps, then y = g xhat + b. */
static void ref_rms_fwd(double *y, double *rstd, const double *x, const double *g, const double *b, int64_t N,
                        int64_t C, double eps) {
    double *xhat = dalloc(C);
    for (int64_t n = 0; n < N; n++) {
        const double t = ref_rms_row(xhat, x + n * C, C, eps);
        if (rstd) rstd[n] = 1.0 / sqrt(t);
        ref_affine_fwd(y + n * C, xhat, g, b, C);
    }
    free(xhat);
}

static void ref_rms_bwd(double *dx, double *dg, double *db, const double *dy, const double *x, const double *g,
                        int64_t N, int64_t C, double eps) {
    double *xhat = dalloc(C), *dxhat = dalloc(C);
    for (int64_t n = 0; n < N; n++) {
        const double *xr = x + n * C;
        const double t = ref_rms_row(xhat, xr, C, eps), r = 1.0 / sqrt(t);
        ref_affine_bwd(dxhat, dg, db, dy + n * C, xhat, g, C);
        /* xhat = x r: x directly, and r */
        double dr = 0.0;
        for (int64_t j = 0; j < C; j++) dr += dxhat[j] * xr[j];
        /* r = t^(-1/2);  t = ms + eps;  ms = sum(x^2) / C */
        const double dt = dr * -0.5 * pow(t, -1.5);
        const double dms = dt;
        if (dx)
            for (int64_t j = 0; j < C; j++) dx[n * C + j] += dxhat[j] * r + dms * 2.0 * xr[j] / (double)C;
    }
    free(xhat), free(dxhat);
}

/* LayerNorm composed, one row: mu = mean(x); d = x - mu; v = mean(d^2);
 * t = v + eps; r = t^(-1/2); xhat = d r. Returns t; fills d, xhat, *mu. */
static double ref_ln_row(double *d, double *xhat, double *mu, const double *xr, int64_t C, double eps) {
    double m = 0.0, v = 0.0;
    for (int64_t j = 0; j < C; j++) m += xr[j];
    m /= (double)C;
    for (int64_t j = 0; j < C; j++) {
        d[j] = xr[j] - m;
        v += d[j] * d[j];
    }
    v /= (double)C;
    const double t = v + eps, r = 1.0 / sqrt(t);
    for (int64_t j = 0; j < C; j++) xhat[j] = d[j] * r;
    *mu = m;
    return t;
}

/* LayerNorm composed: the row steps, then y = g xhat + b. */
static void ref_ln_fwd(double *y, double *mean, double *rstd, const double *x, const double *g, const double *b,
                       int64_t N, int64_t C, double eps) {
    double *d = dalloc(C), *xhat = dalloc(C), mu;
    for (int64_t n = 0; n < N; n++) {
        const double t = ref_ln_row(d, xhat, &mu, x + n * C, C, eps);
        if (mean) mean[n] = mu;
        if (rstd) rstd[n] = 1.0 / sqrt(t);
        ref_affine_fwd(y + n * C, xhat, g, b, C);
    }
    free(d), free(xhat);
}

static void ref_ln_bwd(double *dx, double *dg, double *db, const double *dy, const double *x, const double *g,
                       int64_t N, int64_t C, double eps) {
    double *d = dalloc(C), *xhat = dalloc(C), *dxhat = dalloc(C), *dd = dalloc(C), mu;
    for (int64_t n = 0; n < N; n++) {
        const double t = ref_ln_row(d, xhat, &mu, x + n * C, C, eps);
        const double r = 1.0 / sqrt(t);
        ref_affine_bwd(dxhat, dg, db, dy + n * C, xhat, g, C);
        /* xhat = d r */
        double dr = 0.0;
        for (int64_t j = 0; j < C; j++) {
            dd[j] = dxhat[j] * r;
            dr += dxhat[j] * d[j];
        }
        /* r = t^(-1/2); t = v + eps; v = sum(d^2) / C */
        const double dv = dr * -0.5 * pow(t, -1.5);
        for (int64_t j = 0; j < C; j++) dd[j] += dv * 2.0 * d[j] / (double)C;
        /* d = x - mu; mu = sum(x) / C */
        double dmu = 0.0;
        for (int64_t j = 0; j < C; j++) dmu -= dd[j];
        if (dx)
            for (int64_t j = 0; j < C; j++) dx[n * C + j] += dd[j] + dmu / (double)C;
    }
    free(d), free(xhat), free(dxhat), free(dd);
}

/* the reference of the norm under test (mean: LayerNorm's, may be NULL) */
static void ref_fwd(int norm, double *y, double *mean, double *rstd, const double *x, const double *g, const double *b,
                    int64_t N, int64_t C, double eps) {
    if (norm == LN) ref_ln_fwd(y, mean, rstd, x, g, b, N, C, eps);
    else ref_rms_fwd(y, rstd, x, g, b, N, C, eps);
}
static void ref_bwd(int norm, double *dx, double *dg, double *db, const double *dy, const double *x, const double *g,
                    int64_t N, int64_t C, double eps) {
    if (norm == LN) ref_ln_bwd(dx, dg, db, dy, x, g, N, C, eps);
    else ref_rms_bwd(dx, dg, db, dy, x, g, N, C, eps);
}

/* ---- fused vs reference, both dtypes, all options ------------------------ */

/* shapes: C = 1; C below one lane group; tails after lane steps; C with
 * full groups; C = 768 (the benchmark's rows) */
static const struct { int64_t N, C; } SHAPES[] = {{3, 1}, {4, 5}, {2, 37}, {3, 100}, {5, 300}, {2, 768}, {9, 129}};
#define N_SHAPES ((int)(sizeof SHAPES / sizeof SHAPES[0]))

/* loop index: shape x affine(2) x bias(2) x dtype(2) */
static void decode(int i, int *s, int *affine, int *bias, int *dt) {
    *dt = i % 2;
    *bias = (i / 2) % 2;
    *affine = (i / 4) % 2;
    *s = i / 8;
}

/* Tolerances against the double reference (scaled by the array's max):
 * f64 1e-12, f32 2e-6 (float32 epsilon is 6e-8; each output carries a few
 * roundings). The saved statistics are doubles for both dtypes: for f64
 * they match the reference to 1e-13; for f32 each term and short partial
 * sum is formed in float before the double accumulation, so they match to
 * float accuracy (mean: relative to the row's spread). */
static double tol_of(int dt) { return dt == F64 ? 1e-12 : 2e-6; }
static double stat_tol_of(int dt) { return dt == F64 ? 1e-13 : 1e-6; }

static void vs_reference(int norm, int i) {
    int s, affine, bias, dt;
    decode(i, &s, &affine, &bias, &dt);
    const int64_t N = SHAPES[s].N, C = SHAPES[s].C;
    rng_seed((norm == LN ? 200 : 100) + (uint64_t)i);
    inputs in = draw_inputs(N, C, -2.0, 3.0, affine, bias);
    if (dt == F32) inputs_to_f32(&in, N, C);
    const double eps = 1e-5;

    outputs o = new_outputs(N, C), ref = new_outputs(N, C);
    k_fwd(norm, dt, o.y, o.mu, o.r, in.x, in.g, in.b, N, C, eps, 1);
    ref_fwd(norm, ref.y, ref.mu, ref.r, in.x, in.g, in.b, N, C, eps);
    double tol = tol_of(dt);
    /* LayerNorm with C = 1: xhat = 0, y = b exactly; the floor keeps 0 vs 0
     * meaningful */
    ck_assert_msg(scaled_err(o.y, ref.y, N * C, 1e-300) <= tol, "%s %s N=%ld C=%ld affine=%d bias=%d: y err %g",
                  NORM_NAME[norm], DT_NAME[dt], (long)N, (long)C, affine, bias, scaled_err(o.y, ref.y, N * C, 1e-300));
    if (norm == LN)
        for (int64_t n = 0; n < N; n++) /* relative to the spread, 1/rstd */
            ck_assert_msg(fabs(o.mu[n] - ref.mu[n]) * ref.r[n] <= stat_tol_of(dt), "mean %.17g vs %.17g", o.mu[n],
                          ref.mu[n]);
    ck_assert_msg(scaled_err(o.r, ref.r, N, 1e-300) <= stat_tol_of(dt), "rstd err %g",
                  scaled_err(o.r, ref.r, N, 1e-300));

    k_bwd(norm, dt, o.dx, o.dg, o.db, in.dy, in.x, in.g, o.mu, o.r, N, C, 1);
    ref_bwd(norm, ref.dx, ref.dg, ref.db, in.dy, in.x, in.g, N, C, eps);
    const double dxs = dx_scale(ref.r, in.dy, in.g, N, C);
    ck_assert_msg(scaled_err(o.dx, ref.dx, N * C, dxs) <= tol, "%s %s N=%ld C=%ld affine=%d bias=%d: dx err %g",
                  NORM_NAME[norm], DT_NAME[dt], (long)N, (long)C, affine, bias, scaled_err(o.dx, ref.dx, N * C, dxs));
    const double dg_floor = norm == LN ? 1e-12 : 1e-300;
    ck_assert_msg(scaled_err(o.dg, ref.dg, C, dg_floor) <= tol, "dg err %g", scaled_err(o.dg, ref.dg, C, dg_floor));
    ck_assert_msg(scaled_err(o.db, ref.db, C, 1e-300) <= tol, "db err %g", scaled_err(o.db, ref.db, C, 1e-300));

    free_inputs(&in);
    free_outputs(&o), free_outputs(&ref);
}

START_TEST(test_rms_vs_reference) { vs_reference(RMS, _i); }
END_TEST

START_TEST(test_ln_vs_reference) { vs_reference(LN, _i); }
END_TEST

/* ---- finite differences (float64) --------------------------------------- */

/* L(x, g, b) = sum_ij w_ij y_ij; its gradient is the backward with dy = w.
 * Central differences with h relative to each input's scale. */
typedef struct fdcase {
    const char *what;
    int64_t N, C;
    double xlo, xhi; /* input range */
    double eps;
    int affine, bias;
} fdcase;

static const fdcase FD[] = {
    {"small", 3, 5, -2.0, 2.0, 1e-5, 1, 1},       {"small, no affine", 2, 7, -2.0, 2.0, 1e-5, 0, 0},
    {"C = 1", 4, 1, -2.0, 2.0, 1e-3, 1, 1},       {"eps dominates (inputs near 0)", 3, 6, -1e-4, 1e-4, 1e-2, 1, 1},
    {"large inputs", 3, 6, 1e3, 1e6, 1e-5, 1, 1}, {"tails (C = 37)", 2, 37, -1.0, 3.0, 1e-6, 1, 0},
};
#define N_FD ((int)(sizeof FD / sizeof FD[0]))

static double loss(int norm, const double *w, const double *x, const double *g, const double *b, int64_t N, int64_t C,
                   double eps) {
    double *y = dalloc(N * C), L = 0.0;
    k_fwd(norm, F64, y, NULL, NULL, x, g, b, N, C, eps, 1);
    for (int64_t i = 0; i < N * C; i++) L += w[i] * y[i];
    free(y);
    return L;
}

/* numeric d L / d p_i for every element of p (an input array of n) */
static void numeric_grad(double *out, int norm, double *p, int64_t n, const double *w, const double *x, const double *g,
                         const double *b, int64_t N, int64_t C, double eps) {
    for (int64_t i = 0; i < n; i++) {
        const double p0 = p[i];
        const double h = 1e-6 * fmax(1.0, fabs(p0));
        p[i] = p0 + h;
        double lp = loss(norm, w, x, g, b, N, C, eps);
        p[i] = p0 - h;
        double lm = loss(norm, w, x, g, b, N, C, eps);
        p[i] = p0;
        out[i] = (lp - lm) / (2.0 * h);
    }
}

/* |analytic - numeric| <= 1e-6 * max(max|numeric|, floor) + 1e-5 |numeric|
 * elementwise: a wrong term is O(1) off, round-off here is ~1e-9. The
 * floor is the natural size of the gradient's terms (dx_scale): where the
 * true gradient is exactly 0 (LayerNorm with C = 1) the analytic one is
 * round-off of that size, e.g. when the compiler fuses u - mean(u) into an
 * FMA. */
static void assert_fd(const char *name, const char *what, const double *a, const double *num, int64_t n, double floor) {
    double m = floor;
    for (int64_t i = 0; i < n; i++) m = fmax(m, fabs(num[i]));
    for (int64_t i = 0; i < n; i++)
        ck_assert_msg(fabs(a[i] - num[i]) <= 1e-6 * m + 1e-5 * fabs(num[i]),
                      "%s (%s): element %ld analytic %.12g numeric %.12g", name, what, (long)i, a[i], num[i]);
}

static void fd_check(int norm, int k) {
    const fdcase *fc = &FD[k];
    const int64_t N = fc->N, C = fc->C;
    rng_seed(300 + (uint64_t)k + 1000 * (uint64_t)norm);
    double *x = dalloc(N * C), *w = dalloc(N * C), *g = NULL, *b = NULL;
    fill(x, N * C, fc->xlo, fc->xhi);
    /* random signs for the large-input case, so rows are not all positive */
    for (int64_t i = 0; i < N * C; i++)
        if (fc->xlo > 0 && urand() < 0.5) x[i] = -x[i];
    fill(w, N * C, -1.0, 1.0);
    if (fc->affine) fill(g = dalloc(C), C, 0.5, 1.5);
    if (fc->bias) fill(b = dalloc(C), C, -0.5, 0.5);

    outputs o = new_outputs(N, C);
    k_fwd(norm, F64, o.y, o.mu, o.r, x, g, b, N, C, fc->eps, 1);
    k_bwd(norm, F64, o.dx, g ? o.dg : NULL, b ? o.db : NULL, w, x, g, o.mu, o.r, N, C, 1);
    const char *name = NORM_NAME[norm];
    double *num = dalloc(N * C);
    numeric_grad(num, norm, x, N * C, w, x, g, b, N, C, fc->eps);
    assert_fd(name, fc->what, o.dx, num, N * C, dx_scale(o.r, w, g, N, C));
    if (g) {
        numeric_grad(num, norm, g, C, w, x, g, b, N, C, fc->eps);
        assert_fd(name, "dgamma", o.dg, num, C, 0.0);
    }
    if (b) {
        numeric_grad(num, norm, b, C, w, x, g, b, N, C, fc->eps);
        assert_fd(name, "dbeta", o.db, num, C, 0.0);
    }
    free(x), free(w), free(g), free(b), free(num);
    free_outputs(&o);
}

START_TEST(test_rms_finite_differences) { fd_check(RMS, _i); }
END_TEST

START_TEST(test_ln_finite_differences) { fd_check(LN, _i); }
END_TEST

/* ---- the arange(9) example, worked by hand ------------------------------- */

START_TEST(test_rms_arange9) {
    const int dt = _i;
    double x[9], y[9], r[3];
    for (int i = 0; i < 9; i++) x[i] = i;
    k_fwd(RMS, dt, y, NULL, r, x, NULL, NULL, 3, 3, 1e-5, 1);
    const double want[9] = {0, 0.7746, 1.5492, 0.7348, 0.9798, 1.2247, 0.8514, 0.9933, 1.1352};
    for (int i = 0; i < 9; i++)
        ck_assert_msg(fabs(y[i] - want[i]) <= 1e-4, "%s y[%d] = %.6f, want %.4f", DT_NAME[dt], i, y[i], want[i]);
}
END_TEST

/* ---- scale robustness (float32 around 1e20 and 1e-20) -------------------- */

/* y(s x; s^2 eps) = y(x; eps), r(s x; s^2 eps) = r(x; eps) / s and
 * dx(s x) = dx(x) / s exactly in real arithmetic; with s a power of two
 * the scaled inputs are exact too. s = 2^66 ~ 7.4e19 puts the squares at
 * ~1e40, beyond float32's 3.4e38; s = 2^-66 puts them at ~1e-40, below
 * float32's smallest normal. */
static void scale_check(int norm, int dt, double s) {
    const int64_t N = 4, C = 96;
    rng_seed(400 + (uint64_t)norm);
    inputs in = draw_inputs(N, C, -3.0, 3.0, true, true);
    double *x1 = in.x, *dy = in.dy, *g = in.g, *b = in.b;
    if (norm == LN)
        for (int64_t i = 0; i < N * C; i++) x1[i] += 5.0; /* a mean to take out */
    inputs_to_f32(&in, N, C);
    double *xs = dalloc(N * C);
    for (int64_t i = 0; i < N * C; i++) xs[i] = x1[i] * s; /* exact: s is a power of two */
    /* eps1 a power of two, so eps1 s^2 is exact (even when subnormal) */
    const double eps1 = 0x1p-16, epss = eps1 * s * s;

    double *y1 = dalloc(N * C), *ys = dalloc(N * C);
    double *m1 = dalloc(N), *ms = dalloc(N), *r1 = dalloc(N), *rs = dalloc(N);
    double *dx1 = dalloc(N * C), *dxs = dalloc(N * C);
    double *dg1 = dalloc(C), *dgs = dalloc(C), *db1 = dalloc(C), *dbs = dalloc(C);
    k_fwd(norm, dt, y1, m1, r1, x1, g, b, N, C, eps1, 1);
    k_fwd(norm, dt, ys, ms, rs, xs, g, b, N, C, epss, 1);
    k_bwd(norm, dt, dx1, dg1, db1, dy, x1, g, m1, r1, N, C, 1);
    k_bwd(norm, dt, dxs, dgs, dbs, dy, xs, g, ms, rs, N, C, 1);
    const char *name = NORM_NAME[norm];
    const double tol = dt == F64 ? 1e-13 : 1e-6;
    ck_assert_msg(all_finite(ys, N * C), "%s %s s=%g: y not finite", name, DT_NAME[dt], s);
    ck_assert_msg(scaled_err(ys, y1, N * C, 1e-300) <= tol, "%s %s s=%g: y err %g", name, DT_NAME[dt], s,
                  scaled_err(ys, y1, N * C, 1e-300));
    for (int64_t n = 0; n < N; n++) {
        /* f64: the same up to the last bits; f32: the scaled row may
         * take the double path while the unscaled one does not */
        ck_assert_msg(fabs(rs[n] * s - r1[n]) <= stat_tol_of(dt) * r1[n], "%s %s s=%g: rstd %g vs %g / s", name,
                      DT_NAME[dt], s, rs[n], r1[n]);
        if (norm == LN)
            ck_assert_msg(fabs(ms[n] / s - m1[n]) * r1[n] <= stat_tol_of(dt), "%s: mean %g vs %g s", name, ms[n],
                          m1[n]);
    }
    for (int64_t i = 0; i < N * C; i++) dxs[i] *= s; /* dx(s x) s = dx(x) */
    ck_assert_msg(all_finite(dxs, N * C) && all_finite(dgs, C), "%s %s s=%g: gradients not finite", name, DT_NAME[dt],
                  s);
    ck_assert_msg(scaled_err(dxs, dx1, N * C, 1e-300) <= 10 * tol, "%s %s s=%g: dx err %g", name, DT_NAME[dt], s,
                  scaled_err(dxs, dx1, N * C, 1e-300));
    ck_assert_msg(scaled_err(dgs, dg1, C, 1e-300) <= tol, "dg err %g", scaled_err(dgs, dg1, C, 1e-300));
    ck_assert_msg(scaled_err(dbs, db1, C, 1e-300) <= tol, "db err %g", scaled_err(dbs, db1, C, 1e-300));

    free_inputs(&in);
    free(xs), free(y1), free(ys);
    free(m1), free(ms), free(r1), free(rs), free(dx1), free(dxs);
    free(dg1), free(dgs), free(db1), free(dbs);
}

START_TEST(test_scale_f32_1e20) {
    scale_check(RMS, F32, 0x1p66);
    scale_check(LN, F32, 0x1p66);
}
END_TEST

START_TEST(test_scale_f32_1e_minus20) {
    scale_check(RMS, F32, 0x1p-66);
    scale_check(LN, F32, 0x1p-66);
}
END_TEST

/* float64 rows whose squares overflow (2^510 ~ 3e153) or underflow
 * (2^-520 ~ 3e-157) exercise the power-of-two rescaling path. */
START_TEST(test_scale_f64_extreme) {
    scale_check(RMS, F64, 0x1p510);
    scale_check(LN, F64, 0x1p510);
    scale_check(RMS, F64, 0x1p-520);
    scale_check(LN, F64, 0x1p-520);
}
END_TEST

/* With a fixed eps = 1e-6, float32 rows at 1e20 (eps negligible) and 1e-20
 * (eps dominates: y ~ x / 1e-3) against the double reference, which holds
 * those squares without trouble. A float32 sum of squares would be inf or
 * 0 here (checked, so the test is known to probe the hard case). */
START_TEST(test_scale_f32_fixed_eps) {
    const int64_t N = 3, C = 50;
    const double scales[2] = {1e20, 1e-20};
    for (int k = 0; k < 2; k++) {
        rng_seed(500 + (uint64_t)k);
        inputs in = draw_inputs(N, C, -2.0 * scales[k], 2.0 * scales[k], true, false);
        inputs_to_f32(&in, N, C);
        const double *x = in.x, *dy = in.dy, *g = in.g;
        float naive = 0.0f;
        for (int64_t j = 0; j < C; j++) naive += (float)x[j] * (float)x[j];
        ck_assert(k == 0 ? isinf(naive) : naive < FLT_MIN);

        outputs o = new_outputs(N, C), ref = new_outputs(N, C);
        for (int norm = RMS; norm <= LN; norm++) {
            const char *name = NORM_NAME[norm];
            memset(o.dx, 0, sizeof(double) * (size_t)(N * C));
            memset(ref.dx, 0, sizeof(double) * (size_t)(N * C));
            k_fwd(norm, F32, o.y, o.mu, o.r, x, g, NULL, N, C, 1e-6, 1);
            ref_fwd(norm, ref.y, ref.mu, ref.r, x, g, NULL, N, C, 1e-6);
            ck_assert_msg(scaled_err(o.y, ref.y, N * C, 1e-300) <= 2e-6, "%s scale %g: y err %g", name, scales[k],
                          scaled_err(o.y, ref.y, N * C, 1e-300));
            /* dgamma: RMSNorm's only */
            double *pg = norm == RMS ? o.dg : NULL, *pgr = pg ? ref.dg : NULL;
            k_bwd(norm, F32, o.dx, pg, NULL, dy, x, g, o.mu, o.r, N, C, 1);
            ref_bwd(norm, ref.dx, pgr, NULL, dy, x, g, N, C, 1e-6);
            ck_assert(all_finite(o.dx, N * C) && (!pg || all_finite(o.dg, C)));
            ck_assert_msg(scaled_err(o.dx, ref.dx, N * C, 1e-300) <= 2e-6, "%s scale %g: dx err %g", name, scales[k],
                          scaled_err(o.dx, ref.dx, N * C, 1e-300));
            if (pg)
                ck_assert_msg(scaled_err(o.dg, ref.dg, C, 1e-300) <= 2e-6, "%s scale %g: dg err %g", name, scales[k],
                              scaled_err(o.dg, ref.dg, C, 1e-300));
        }
        free_inputs(&in);
        free_outputs(&o), free_outputs(&ref);
    }
}
END_TEST

/* float32 rows near FLT_MAX: rstd ~ 1e-38 is outside float's comfortable
 * range, so the kernel does these rows in double; still exact to float. */
START_TEST(test_f32_rows_near_flt_max) {
    const int64_t N = 2, C = 40;
    rng_seed(550);
    inputs in = draw_inputs(N, C, -3e37, 3e37, false, false);
    inputs_to_f32(&in, N, C);
    const double *x = in.x, *dy = in.dy;
    double *y = dalloc(N * C), *r = dalloc(N), *yr = dalloc(N * C);
    double *dx = dalloc(N * C), *dxr = dalloc(N * C);
    k_fwd(RMS, F32, y, NULL, r, x, NULL, NULL, N, C, 1e-6, 1);
    ck_assert(r[0] < 0x1p-120); /* the row took the double path */
    ref_rms_fwd(yr, NULL, x, NULL, NULL, N, C, 1e-6);
    ck_assert_msg(scaled_err(y, yr, N * C, 1e-300) <= 2e-6, "y err %g", scaled_err(y, yr, N * C, 1e-300));
    k_bwd(RMS, F32, dx, NULL, NULL, dy, x, NULL, NULL, r, N, C, 1);
    ref_rms_bwd(dxr, NULL, NULL, dy, x, NULL, N, C, 1e-6);
    /* dx ~ 1e-38 sits among float32 subnormals: compare at their spacing */
    ck_assert_msg(scaled_err(dx, dxr, N * C, 1e-300) <= 1e-5, "dx err %g", scaled_err(dx, dxr, N * C, 1e-300));
    free_inputs(&in);
    free(y), free(r), free(yr), free(dx), free(dxr);
}
END_TEST

/* ---- LayerNorm: a float32 row 1e4 + small noise -------------------------- */

START_TEST(test_ln_f32_offset_row) {
    const int64_t N = 3, C = 768;
    rng_seed(600);
    double *x = dalloc(N * C), *dy = dalloc(N * C);
    for (int64_t i = 0; i < N * C; i++) x[i] = 1e4 + uni(-0.1, 0.1);
    fill(dy, N * C, -1.0, 1.0);
    to_f32_values(x, N * C), to_f32_values(dy, N * C);

    /* the cancellation this guards against: E[x^2] - E[x]^2 in float32 */
    {
        float s = 0.0f, s2 = 0.0f;
        for (int64_t j = 0; j < C; j++) {
            s += (float)x[j];
            s2 += (float)x[j] * (float)x[j];
        }
        float m = s / (float)C, var_naive = s2 / (float)C - m * m;
        double mu = 0.0, var = 0.0;
        for (int64_t j = 0; j < C; j++) mu += x[j];
        mu /= (double)C;
        for (int64_t j = 0; j < C; j++) var += (x[j] - mu) * (x[j] - mu);
        var /= (double)C;
        ck_assert_msg(fabs((double)var_naive - var) > 0.5 * var, "naive float variance %g happens to be near %g",
                      (double)var_naive, var);
    }

    outputs o = new_outputs(N, C), ref = new_outputs(N, C);
    k_fwd(LN, F32, o.y, o.mu, o.r, x, NULL, NULL, N, C, 1e-5, 1);
    ref_ln_fwd(ref.y, ref.mu, ref.r, x, NULL, NULL, N, C, 1e-5);
    ck_assert_msg(scaled_err(o.y, ref.y, N * C, 1e-300) <= 2e-6, "y err %g", scaled_err(o.y, ref.y, N * C, 1e-300));
    ck_assert_msg(scaled_err(o.r, ref.r, N, 1e-300) <= 1e-6, "rstd err %g", scaled_err(o.r, ref.r, N, 1e-300));
    for (int64_t n = 0; n < N; n++)
        ck_assert_msg(fabs(o.mu[n] - ref.mu[n]) <= 1e-9, "mean %.12g vs %.12g", o.mu[n], ref.mu[n]);

    k_bwd(LN, F32, o.dx, o.dg, o.db, dy, x, NULL, o.mu, o.r, N, C, 1);
    ref_ln_bwd(ref.dx, ref.dg, ref.db, dy, x, NULL, N, C, 1e-5);
    ck_assert_msg(scaled_err(o.dx, ref.dx, N * C, 1e-300) <= 2e-6, "dx err %g",
                  scaled_err(o.dx, ref.dx, N * C, 1e-300));
    ck_assert_msg(scaled_err(o.dg, ref.dg, C, 1e-300) <= 2e-6, "dg err %g", scaled_err(o.dg, ref.dg, C, 1e-300));
    free(x), free(dy);
    free_outputs(&o), free_outputs(&ref);
}
END_TEST

/* ---- invariants (float64) ------------------------------------------------ */

/* RMSNorm with eps = 0 is scale invariant: f(c x) = f(x) for c > 0, so the
 * directional derivative along x vanishes: x . dx = 0 per row. */
START_TEST(test_rms_invariants) {
    const int64_t N = 4, C = 33;
    rng_seed(700);
    inputs in = draw_inputs(N, C, -2.0, 2.0, true, true);
    const double *x = in.x, *dy = in.dy, *g = in.g, *b = in.b;
    double *cx = dalloc(N * C);
    const double c = 3.7;
    for (int64_t i = 0; i < N * C; i++) cx[i] = c * x[i];
    double *y = dalloc(N * C), *cy = dalloc(N * C), *r = dalloc(N), *cr = dalloc(N), *dx = dalloc(N * C);
    tg_rmsnorm_forward_f64(y, r, x, g, b, N, C, 0.0, 1);
    tg_rmsnorm_forward_f64(cy, cr, cx, g, b, N, C, 0.0, 1);
    ck_assert_msg(scaled_err(cy, y, N * C, 1e-300) <= 1e-14, "f(cx) != f(x): %g", scaled_err(cy, y, N * C, 1e-300));
    tg_rmsnorm_backward_f64(dx, NULL, NULL, dy, x, g, r, N, C, 1);
    for (int64_t n = 0; n < N; n++) {
        double dot = 0.0, nx = 0.0, ndx = 0.0;
        for (int64_t j = 0; j < C; j++) {
            dot += x[n * C + j] * dx[n * C + j];
            nx += x[n * C + j] * x[n * C + j];
            ndx += dx[n * C + j] * dx[n * C + j];
        }
        ck_assert_msg(fabs(dot) <= 1e-14 * sqrt(nx * ndx), "row %ld: x.dx = %g (|x||dx| = %g)", (long)n, dot,
                      sqrt(nx * ndx));
        ck_assert(ndx > 0.0); /* the gradient itself is not zero */
    }

    /* eps > 0: the Jacobian r (I - xhat xhat^T / C) is no longer exactly a
     * projection, |xhat|^2 = C ms / (ms + eps) < C, and
     *   xhat . dx = r (xhat . u) eps / (ms + eps)   exactly. */
    const double eps = 0.3;
    memset(dx, 0, sizeof(double) * (size_t)(N * C));
    tg_rmsnorm_forward_f64(y, r, x, g, b, N, C, eps, 1);
    tg_rmsnorm_backward_f64(dx, NULL, NULL, dy, x, g, r, N, C, 1);
    for (int64_t n = 0; n < N; n++) {
        double ms = 0.0, xu = 0.0, xdx = 0.0;
        for (int64_t j = 0; j < C; j++) {
            const double xh = x[n * C + j] * r[n];
            ms += x[n * C + j] * x[n * C + j] / (double)C;
            xu += xh * g[j] * dy[n * C + j];
            xdx += xh * dx[n * C + j];
        }
        const double want = r[n] * xu * eps / (ms + eps);
        ck_assert_msg(fabs(xdx - want) <= 1e-13 * fabs(want), "row %ld: xhat.dx = %.15g, want %.15g", (long)n, xdx,
                      want);
        ck_assert(fabs(want) > 1e-3); /* not trivially zero */
    }
    free_inputs(&in);
    free(cx), free(y), free(cy), free(r), free(cr), free(dx);
}
END_TEST

/* LayerNorm with g = 1 (no affine, and an explicit gain of ones): the
 * Jacobian is r (I - 11^T/C - xhat xhat^T/C), so per row sum(dx) = 0 for
 * any eps, and xhat . dx = 0 when eps = 0 (for eps > 0 it is
 * r (xhat . dy) eps / (var + eps), since then |xhat|^2 = C var/(var+eps)).
 * Also dgamma = sum over rows of dy xhat, dbeta = sum of dy, for both
 * norms. */
START_TEST(test_ln_invariants) {
    const int64_t N = 5, C = 41;
    rng_seed(800);
    inputs in = draw_inputs(N, C, -2.0, 5.0, false, false);
    const double *x = in.x, *dy = in.dy;
    double *ones = dalloc(C);
    for (int64_t j = 0; j < C; j++) ones[j] = 1.0;
    for (int pass = 0; pass < 4; pass++) {
        const double *g = pass % 2 ? ones : NULL;
        const double eps = pass < 2 ? 0.0 : 0.3;
        double *y = dalloc(N * C), *mu = dalloc(N), *r = dalloc(N);
        double *dx = dalloc(N * C), *dg = dalloc(C), *db = dalloc(C);
        tg_layernorm_forward_f64(y, mu, r, x, g, NULL, N, C, eps, 1);
        tg_layernorm_backward_f64(dx, dg, db, dy, x, g, mu, r, N, C, 1);
        double *dgw = dalloc(C), *dbw = dalloc(C);
        for (int64_t n = 0; n < N; n++) {
            double s = 0.0, sx = 0.0, ndx = 0.0, xu = 0.0, var = 0.0;
            for (int64_t j = 0; j < C; j++) {
                const double xh = (x[n * C + j] - mu[n]) * r[n];
                s += dx[n * C + j];
                sx += xh * dx[n * C + j];
                ndx += fabs(dx[n * C + j]);
                xu += xh * dy[n * C + j];
                var += (x[n * C + j] - mu[n]) * (x[n * C + j] - mu[n]) / (double)C;
                dgw[j] += dy[n * C + j] * xh;
                dbw[j] += dy[n * C + j];
            }
            ck_assert_msg(fabs(s) <= 1e-14 * ndx, "row %ld: sum(dx) = %g", (long)n, s);
            const double want = r[n] * xu * eps / (var + eps);
            ck_assert_msg(fabs(sx - want) <= 1e-14 * ndx * 3.0, "eps %g row %ld: xhat.dx = %g, want %g", eps, (long)n,
                          sx, want);
            if (eps > 0.0) ck_assert(fabs(want) > 1e-3); /* not trivially zero */
        }
        ck_assert(scaled_err(dg, dgw, C, 1e-300) <= 1e-14);
        ck_assert(scaled_err(db, dbw, C, 1e-300) <= 1e-14);
        free(y), free(mu), free(r), free(dx), free(dg), free(db);
        free(dgw), free(dbw);
    }
    /* RMSNorm: dgamma = sum dy xhat with xhat = x r, dbeta = sum dy */
    {
        double *y = dalloc(N * C), *r = dalloc(N), *dg = dalloc(C), *db = dalloc(C), *dgw = dalloc(C), *dbw = dalloc(C);
        tg_rmsnorm_forward_f64(y, r, x, ones, NULL, N, C, 1e-6, 1);
        tg_rmsnorm_backward_f64(NULL, dg, db, dy, x, ones, r, N, C, 1);
        for (int64_t n = 0; n < N; n++)
            for (int64_t j = 0; j < C; j++) {
                dgw[j] += dy[n * C + j] * (x[n * C + j] * r[n]);
                dbw[j] += dy[n * C + j];
            }
        ck_assert(scaled_err(dg, dgw, C, 1e-300) <= 1e-14);
        ck_assert(scaled_err(db, dbw, C, 1e-300) <= 1e-14);
        free(y), free(r), free(dg), free(db), free(dgw), free(dbw);
    }
    free_inputs(&in);
    free(ones);
}
END_TEST

/* ---- accumulation, optional outputs, threads ----------------------------- */

/* Gradients accumulate: a second call adds the same amount. dx gets one
 * addition per element, so a zero-started dx doubles bitwise (a + a = 2a
 * exactly); dg and db add row by row, so they double up to rounding. A
 * pre-filled gradient is added to. Loop: norm (2) x dtype (2). */
START_TEST(test_accumulate) {
    const int norm = _i / 2, dt = _i % 2;
    const int64_t N = 6, C = 70;
    rng_seed(900 + (uint64_t)_i);
    inputs in = draw_inputs(N, C, -2.0, 2.0, true, true);
    inputs_to_f32(&in, N, C);
    const double *x = in.x, *dy = in.dy, *g = in.g, *b = in.b;
    outputs o = new_outputs(N, C);
    k_fwd(norm, dt, o.y, o.mu, o.r, x, g, b, N, C, 1e-5, 1);
    k_bwd(norm, dt, o.dx, o.dg, o.db, dy, x, g, o.mu, o.r, N, C, 1);
    double *dx1 = dcopy(o.dx, N * C), *dg1 = dcopy(o.dg, C), *db1 = dcopy(o.db, C);
    k_bwd(norm, dt, o.dx, o.dg, o.db, dy, x, g, o.mu, o.r, N, C, 1);
    for (int64_t i = 0; i < N * C; i++)
        ck_assert_msg(o.dx[i] == 2.0 * dx1[i], "dx[%ld] %g != 2 * %g", (long)i, o.dx[i], dx1[i]);
    const double tol = dt == F64 ? 1e-14 : 1e-6;
    ck_assert(scaled_err(o.dg, dg1, C, 1e-300) > 0.9); /* not unchanged */
    for (int64_t j = 0; j < C; j++) {
        ck_assert(fabs(o.dg[j] - 2.0 * dg1[j]) <= tol * (double)N);
        ck_assert(fabs(o.db[j] - 2.0 * db1[j]) <= tol * (double)N);
    }
    /* pre-filled with 1: the result is 1 + one gradient (to rounding) */
    for (int64_t i = 0; i < N * C; i++) o.dx[i] = 1.0;
    for (int64_t j = 0; j < C; j++) o.dg[j] = o.db[j] = 1.0;
    k_bwd(norm, dt, o.dx, o.dg, o.db, dy, x, g, o.mu, o.r, N, C, 1);
    for (int64_t i = 0; i < N * C; i++) ck_assert(fabs(o.dx[i] - (1.0 + dx1[i])) <= tol * (1.0 + fabs(dx1[i])));
    for (int64_t j = 0; j < C; j++) {
        ck_assert(fabs(o.dg[j] - (1.0 + dg1[j])) <= tol * (double)N);
        ck_assert(fabs(o.db[j] - (1.0 + db1[j])) <= tol * (double)N);
    }
    free_inputs(&in);
    free_outputs(&o);
    free(dx1), free(dg1), free(db1);
}
END_TEST

/* Any of dx, dg, db may be NULL (and the saved statistics in forward): the
 * others come out bitwise the same. Loop: norm (2) x dtype (2). */
START_TEST(test_optional_outputs) {
    const int norm = _i / 2, dt = _i % 2;
    const int64_t N = 5, C = 130;
    rng_seed(950 + (uint64_t)_i);
    inputs in = draw_inputs(N, C, -2.0, 2.0, true, true);
    const double *x = in.x, *dy = in.dy, *g = in.g, *b = in.b;
    outputs o = new_outputs(N, C);
    double *y2 = dalloc(N * C);
    k_fwd(norm, dt, o.y, o.mu, o.r, x, g, b, N, C, 1e-5, 1);
    k_fwd(norm, dt, y2, NULL, NULL, x, g, b, N, C, 1e-5, 1);
    ck_assert(memcmp(o.y, y2, sizeof(double) * (size_t)(N * C)) == 0);

    k_bwd(norm, dt, o.dx, o.dg, o.db, dy, x, g, o.mu, o.r, N, C, 1);
    for (int mask = 0; mask < 8; mask++) { /* which outputs to ask for */
        double *ex = dalloc(N * C), *eg = dalloc(C), *eb = dalloc(C);
        double *px = mask & 1 ? ex : NULL, *pg = mask & 2 ? eg : NULL, *pb = mask & 4 ? eb : NULL;
        k_bwd(norm, dt, px, pg, pb, dy, x, g, o.mu, o.r, N, C, 1);
        if (px) ck_assert_msg(memcmp(ex, o.dx, sizeof(double) * (size_t)(N * C)) == 0, "mask %d: dx differs", mask);
        if (pg) ck_assert_msg(memcmp(eg, o.dg, sizeof(double) * (size_t)C) == 0, "mask %d: dg differs", mask);
        if (pb) ck_assert_msg(memcmp(eb, o.db, sizeof(double) * (size_t)C) == 0, "mask %d: db differs", mask);
        free(ex), free(eg), free(eb);
    }
    free_inputs(&in);
    free_outputs(&o), free(y2);
}
END_TEST

/* Bitwise the same results with 1, 2 and 3 threads (when built with
 * OpenMP; serial otherwise, where the test still checks the API), with
 * every subset of the backward's outputs. Two shapes, both above the
 * kernels' threading threshold: 301 x 133 (C not a multiple of 16, so
 * ragged ends) takes the backward's chunked mode (dg/db partials per chunk
 * of rows, layers/norm_reduce.inc), 24 x 5000 its direct mode (rows too
 * wide for partials on the stack: column ranges per block of rows).
 * Loop: shape (2) x norm (2) x dtype (2). */
START_TEST(test_threads_bitwise) {
    const int shape = _i / 4, norm = _i / 2 % 2, dt = _i % 2;
    const int64_t N = shape ? 24 : 301, C = shape ? 5000 : 133;
    rng_seed(990 + (uint64_t)_i);
    inputs in = draw_inputs(N, C, -2.0, 2.0, true, true);
    const double *x = in.x, *dy = in.dy, *g = in.g, *b = in.b;
    outputs out[3];
    for (int t = 0; t < 3; t++) {
        outputs *o = &out[t];
        *o = new_outputs(N, C);
        k_fwd(norm, dt, o->y, o->mu, o->r, x, g, b, N, C, 1e-5, t + 1);
        k_bwd(norm, dt, o->dx, o->dg, o->db, dy, x, g, o->mu, o->r, N, C, t + 1);
    }
    const int64_t len[6] = {N * C, N, N, N * C, C, C};
    const char *nm[6] = {"y", "mean", "rstd", "dx", "dg", "db"};
    for (int t = 1; t < 3; t++) {
        const outputs *o = &out[t], *o1 = &out[0];
        const double *got[6] = {o->y, o->mu, o->r, o->dx, o->dg, o->db};
        const double *want[6] = {o1->y, o1->mu, o1->r, o1->dx, o1->dg, o1->db};
        for (int k = 0; k < 6; k++)
            ck_assert_msg(memcmp(got[k], want[k], sizeof(double) * (size_t)len[k]) == 0,
                          "%s %s %lldx%lld: %s differs with %d threads", NORM_NAME[norm], DT_NAME[dt], (long long)N,
                          (long long)C, nm[k], t + 1);
    }
    /* each subset of dx, dg, db: the same bits as all three with 1 thread */
    for (int mask = 1; mask < 7; mask++) {
        for (int t = 2; t <= 3; t++) {
            double *ex = mask & 1 ? dalloc(N * C) : NULL, *eg = mask & 2 ? dalloc(C) : NULL;
            double *eb = mask & 4 ? dalloc(C) : NULL;
            k_bwd(norm, dt, ex, eg, eb, dy, x, g, out[0].mu, out[0].r, N, C, t);
            if (ex) ck_assert_msg(memcmp(ex, out[0].dx, sizeof(double) * (size_t)(N * C)) == 0, "mask %d: dx", mask);
            if (eg) ck_assert_msg(memcmp(eg, out[0].dg, sizeof(double) * (size_t)C) == 0, "mask %d: dg", mask);
            if (eb) ck_assert_msg(memcmp(eb, out[0].db, sizeof(double) * (size_t)C) == 0, "mask %d: db", mask);
            free(ex), free(eg), free(eb);
        }
    }
    for (int t = 0; t < 3; t++) free_outputs(&out[t]);
    free_inputs(&in);
}
END_TEST

/* Degenerate inputs: N = 0 or C = 0 writes nothing; a row of zeros with
 * eps > 0 has r = 1/sqrt(eps), y = b, and finite gradients; a constant
 * LayerNorm row the same. */
START_TEST(test_degenerate) {
    double canary[4] = {7, 7, 7, 7}, stat[2] = {7, 7}, x[4] = {1, 2, 3, 4};
    tg_rmsnorm_forward_f64(canary, stat, x, NULL, NULL, 0, 4, 1e-5, 1);
    tg_layernorm_forward_f64(canary, stat, stat, x, NULL, NULL, 2, 0, 1e-5, 1);
    tg_rmsnorm_backward_f64(canary, canary, canary, x, x, NULL, stat, 0, 4, 1);
    tg_layernorm_backward_f64(canary, canary, canary, x, x, NULL, stat, stat, 2, 0, 1);
    for (int i = 0; i < 4; i++) ck_assert(canary[i] == 7.0);
    ck_assert(stat[0] == 7.0 && stat[1] == 7.0);

    for (int dt = 0; dt < 2; dt++) {
        const int64_t C = 20;
        double *z = dalloc(C), *c5 = dalloc(C), *b = dalloc(C), *y = dalloc(C);
        double *dy = dalloc(C), *dx = dalloc(C), mu, r;
        for (int64_t j = 0; j < C; j++) {
            c5[j] = 5.0;
            b[j] = 0.25 * (double)j;
            dy[j] = 1.0 - 0.1 * (double)j;
        }
        k_fwd(RMS, dt, y, NULL, &r, z, NULL, b, 1, C, 1e-4, 1);
        ck_assert(r == 100.0);
        ck_assert(memcmp(y, b, sizeof(double) * (size_t)C) == 0);
        k_bwd(RMS, dt, dx, NULL, NULL, dy, z, NULL, NULL, &r, 1, C, 1);
        for (int64_t j = 0; j < C; j++) /* dx = r dy at x = 0 */
            ck_assert(fabs(dx[j] - 100.0 * dy[j]) <= 1e-5 * 100.0);
        k_fwd(LN, dt, y, &mu, &r, c5, NULL, b, 1, C, 1e-4, 1);
        ck_assert(mu == 5.0 && r == 100.0);
        ck_assert(memcmp(y, b, sizeof(double) * (size_t)C) == 0);
        memset(dx, 0, sizeof(double) * (size_t)C);
        k_bwd(LN, dt, dx, NULL, NULL, dy, c5, NULL, &mu, &r, 1, C, 1);
        double mdy = 0.0;
        for (int64_t j = 0; j < C; j++) mdy += dy[j] / (double)C;
        for (int64_t j = 0; j < C; j++) /* dx = r (dy - mean dy) */
            ck_assert(fabs(dx[j] - 100.0 * (dy[j] - mdy)) <= 1e-5 * 100.0);
        free(z), free(c5), free(b), free(y), free(dy), free(dx);
    }
}
END_TEST

Suite *make_norm_kernels_suite(void) {
    Suite *s = suite_create("norm_kernels");
    TCase *tc = tcase_create("reference");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_rms_vs_reference, 0, N_SHAPES * 8);
    tcase_add_loop_test(tc, test_ln_vs_reference, 0, N_SHAPES * 8);
    tcase_add_loop_test(tc, test_rms_arange9, 0, 2);
    suite_add_tcase(s, tc);

    tc = tcase_create("finite_differences");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_rms_finite_differences, 0, N_FD);
    tcase_add_loop_test(tc, test_ln_finite_differences, 0, N_FD);
    suite_add_tcase(s, tc);

    tc = tcase_create("robustness");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_scale_f32_1e20);
    tcase_add_test(tc, test_scale_f32_1e_minus20);
    tcase_add_test(tc, test_scale_f64_extreme);
    tcase_add_test(tc, test_scale_f32_fixed_eps);
    tcase_add_test(tc, test_f32_rows_near_flt_max);
    tcase_add_test(tc, test_ln_f32_offset_row);
    tcase_add_test(tc, test_degenerate);
    suite_add_tcase(s, tc);

    tc = tcase_create("invariants");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_rms_invariants);
    tcase_add_test(tc, test_ln_invariants);
    tcase_add_loop_test(tc, test_accumulate, 0, 4);
    tcase_add_loop_test(tc, test_optional_outputs, 0, 4);
    tcase_add_loop_test(tc, test_threads_bitwise, 0, 8);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tg_test_run(make_norm_kernels_suite()); }

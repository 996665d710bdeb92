/* RMSNorm and LayerNorm over the trailing normalized dims:
 *   RMSNorm    y = x / sqrt(mean(x^2) + eps) * gamma + beta
 *   LayerNorm  y = (x - mean) / sqrt(var + eps) * gamma + beta  (biased var)
 *
 * The tests both norms share run once for each (loop tests over NORMS,
 * the table of the two: their functions, defaults and reference formula):
 * mean and variance over 2 normalized dims, values against a naive float64
 * reference, bad arguments, the affine/bias options and their repr, a
 * fresh bias changes nothing, trailing-dims errors and output shape and
 * dtype, the dgamma and dbeta formulas, gradient checks over the cases that
 * matter, the one tape record and what it saves, thread determinism, a
 * context in error, the three constructors (positional, options struct,
 * short form).
 *
 * Then what teaches something about one norm: where RMSNorm's default eps
 * comes from (as the header says), its known values
 * (torch.nn.RMSNorm), mean (not sum) of squares, scale invariance at
 * eps = 0 (x . dx = 0, f(cx) = f(x)), float32 rows near 1e20 and 1e-20;
 * LayerNorm's rows by hand, its invariants (sum(dx) = 0, xhat . dx = 0),
 * a float32 row of 1e4 + noise (two-pass variance: no E[x^2] - E[x]^2
 * cancellation) and rows near 1e20 and 1e-20. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static tg_ctx *ctx;
static void setup(void) { ctx = tg_ctx_new(0); }
static void teardown(void) { tg_ctx_free(ctx); }

/* ---- the two norms ------------------------------------------------------------ */

/* A norm layer seen through its kind's functions: the module and what the
 * tests read of it. */
typedef struct norm_layer {
    tg_module *m; /* NULL when the constructor refused */
    tg_tensor *gamma, *beta;
    bool affine, bias;
} norm_layer;

enum { RMS, LN };

typedef struct norm_kind {
    int id;               /* RMS or LN */
    const char *name;     /* "rmsnorm": the functions are tg_<name>_new... */
    const char *repr;     /* the module's repr name */
    bool centered;        /* LayerNorm subtracts the mean (tg_test_norm_ref) */
    double eps;           /* the module's default eps ... */
    const char *eps_repr; /* ... as its repr prints it */
    bool bias;            /* the module's default bias option */
    int stats;            /* float64 statistics saved per row: rstd, or mean and rstd */
    uint64_t seed;        /* the context's seed for this norm's tests */
    tg_test_norm_op fused, composed;
} norm_kind;

static const norm_kind NORMS[] = {
    [RMS] = {RMS, "rmsnorm", "RMSNorm", false, TG_RMSNORM_EPS, "1e-06", false, 1, 7, tg_rmsnorm_fused,
             tg_rmsnorm_composed},
    [LN] = {LN, "layernorm", "LayerNorm", true, TG_LAYERNORM_EPS, "1e-05", true, 2, 8, tg_layernorm_fused,
            tg_layernorm_composed},
};

/* What the tests read of a layer of either kind (NULL: a zeroed view). */
static norm_layer of_rms(tg_rmsnorm *l) {
    return l ? (norm_layer){TG_MODULE(l), l->gamma, l->beta, l->affine, l->bias} : (norm_layer){0};
}
static norm_layer of_ln(tg_layernorm *l) {
    return l ? (norm_layer){TG_MODULE(l), l->gamma, l->beta, l->affine, l->bias} : (norm_layer){0};
}

/* The module functions of the kind (tg_rmsnorm_new or tg_layernorm_new...).
 * A module is its layer: tg_module is the layer struct's first member. */
static norm_layer layer_new(const norm_kind *k, tg_ctx *c, const char *name, int ndim, const int64_t *shape, double eps,
                            bool affine, bool bias, tg_dtype dtype) {
    if (k->id == LN) return of_ln(tg_layernorm_new(c, name, ndim, shape, eps, affine, bias, dtype));
    return of_rms(tg_rmsnorm_new(c, name, ndim, shape, eps, affine, bias, dtype));
}

/* The options of either kind (tg_rmsnorm_opts and tg_layernorm_opts have
 * these members), the kind's defaults, and its _new_ex and _new1. */
typedef struct norm_opts {
    double eps;
    bool affine, bias;
    tg_dtype dtype;
} norm_opts;
static norm_opts layer_defaults(const norm_kind *k) {
    if (k->id == LN) {
        const tg_layernorm_opts o = tg_layernorm_defaults();
        return (norm_opts){o.eps, o.affine, o.bias, o.dtype};
    }
    const tg_rmsnorm_opts o = tg_rmsnorm_defaults();
    return (norm_opts){o.eps, o.affine, o.bias, o.dtype};
}
static norm_layer layer_new_ex(const norm_kind *k, tg_ctx *c, const char *name, int ndim, const int64_t *shape,
                               const norm_opts *o) {
    if (k->id == LN) {
        const tg_layernorm_opts lo =
            o ? (tg_layernorm_opts){o->eps, o->affine, o->bias, o->dtype} : (tg_layernorm_opts){0};
        return of_ln(tg_layernorm_new_ex(c, name, ndim, shape, o ? &lo : NULL));
    }
    const tg_rmsnorm_opts ro = o ? (tg_rmsnorm_opts){o->eps, o->affine, o->bias, o->dtype} : (tg_rmsnorm_opts){0};
    return of_rms(tg_rmsnorm_new_ex(c, name, ndim, shape, o ? &ro : NULL));
}
static norm_layer layer_new1(const norm_kind *k, tg_ctx *c, const char *name, int64_t dim) {
    return k->id == LN ? of_ln(tg_layernorm_new1(c, name, dim)) : of_rms(tg_rmsnorm_new1(c, name, dim));
}
static tg_tensor *layer_forward(const norm_kind *k, tg_ctx *c, tg_module *m, tg_tensor *x) {
    return k->id == LN ? tg_layernorm_forward(c, (tg_layernorm *)(void *)m, x)
                       : tg_rmsnorm_forward(c, (tg_rmsnorm *)(void *)m, x);
}
static bool layer_params(const norm_kind *k, tg_ctx *c, tg_module *m, tg_params *list) {
    return k->id == LN ? tg_layernorm_params(c, (tg_layernorm *)(void *)m, list)
                       : tg_rmsnorm_params(c, (tg_rmsnorm *)(void *)m, list);
}
static void layer_free(const norm_kind *k, tg_ctx *c, tg_module *m) {
    if (k->id == LN) tg_layernorm_free(c, (tg_layernorm *)(void *)m);
    else tg_rmsnorm_free(c, (tg_rmsnorm *)(void *)m);
}

/* The norm a test runs for, with the context's RNG seeded for it. */
static const norm_kind *norm_begin(int i) {
    tg_rng_seed(ctx, NORMS[i].seed);
    return &NORMS[i];
}

/* "tg_<name>_<suffix>" in buf: the function the norm's errors name. */
static const char *fn_name(char buf[64], const norm_kind *k, const char *suffix) {
    snprintf(buf, 64, "tg_%s_%s", k->name, suffix);
    return buf;
}

/* ---- both norms ------------------------------------------------------------- */

/* Statistics over every normalized element when normalized_shape has 2
 * dims: against the naive reference over 6 elements, and different from
 * normalizing each group of 3. Each row of 6 is normalized: LayerNorm's has
 * mean 0 and biased variance 1 / (1 + eps / var), RMSNorm's mean square
 * 1 / (1 + eps / mean(x^2)). */
START_TEST(test_two_normalized_dims) {
    const norm_kind *k = norm_begin(_i);
    norm_layer l = layer_new(k, ctx, "n2", 2, (int64_t[]){2, 3}, k->eps, true, k->bias, TG_F64);
    tg_tensor *x = tg_test_rand(ctx, TG_F64, TG_SHAPE(4, 2, 3), -2, 2);
    tg_tensor *y = layer_forward(k, ctx, l.m, x);
    double *xv = tg_test_values(ctx, x), ref[24], ref3[24];
    tg_test_norm_ref(k->centered, xv, NULL, NULL, 4, 6, k->eps, NULL, ref);
    tg_test_norm_ref(k->centered, xv, NULL, NULL, 8, 3, k->eps, NULL, ref3);
    tg_test_assert_close(ctx, "over (2,3)", y, ref, 24, 1e-13, 1e-13);
    double d = 0;
    for (int i = 0; i < 24; i++) d = fmax(d, fabs(ref[i] - ref3[i]));
    ck_assert(d > 0.01);
    for (int n = 0; n < 4; n++) {
        double m = 0, v = 0;
        for (int j = 0; j < 6; j++) m += tg_get_flat(ctx, y, n * 6 + j) / 6;
        double c = k->centered ? m : 0;
        for (int j = 0; j < 6; j++) v += pow(tg_get_flat(ctx, y, n * 6 + j) - c, 2) / 6;
        if (k->centered) ck_assert_double_eq_tol(m, 0, 1e-15);
        ck_assert_double_eq_tol(v, 1, 1e-3);
    }
    free(xv);
    layer_free(k, ctx, l.m);
}
END_TEST

/* Random shapes, both dtypes, random gamma and beta, against the naive
 * reference. */
START_TEST(test_values_naive) {
    const norm_kind *k = norm_begin(_i);
    const int64_t shapes[][4] = {{1, 1, 1, 1}, {2, 3, 4, 5}, {3, 1, 7, 64}, {2, 2, 33, 31}};
    for (int dt = 0; dt < 2; dt++) {
        tg_dtype dtype = dt ? TG_F64 : TG_F32;
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            for (int nd = 1; nd <= 2; nd++) {
                const int64_t *sh = shapes[s];
                int64_t C = nd == 1 ? sh[3] : sh[2] * sh[3], N = sh[0] * sh[1] * sh[2] * sh[3] / C;
                tg_tensor *x = tg_test_rand(ctx, dtype, 4, sh, -3, 3);
                tg_tensor *g = tg_test_rand(ctx, dtype, nd, sh + 4 - nd, -2, 2);
                tg_tensor *b = tg_test_rand(ctx, dtype, nd, sh + 4 - nd, -2, 2);
                tg_tensor *y = k->fused(ctx, x, g, b, nd, 1e-6);
                ck_assert_msg(y != NULL, "%s", tg_error_message(ctx));
                double *xv = tg_test_values(ctx, x), *gv = tg_test_values(ctx, g), *bv = tg_test_values(ctx, b);
                double *ref = tg_test_malloc((size_t)(N * C) * sizeof *ref);
                tg_test_norm_ref(k->centered, xv, gv, bv, N, C, 1e-6, NULL, ref);
                tg_test_assert_close(ctx, k->name, y, ref, N * C, dt ? 1e-13 : 2e-6, dt ? 1e-13 : 2e-6);
                free(xv), free(gv), free(bv), free(ref);
            }
            tg_ctx_reset(ctx);
        }
    }
}
END_TEST

/* tg_<name>_new(ndim, shape, eps, dtype) is refused with `status` and a
 * message naming the function and containing `part` (and part2 if any). */
static void assert_new_fails(const norm_kind *k, int ndim, const int64_t *shape, double eps, tg_dtype dtype,
                             tg_status status, const char *part, const char *part2) {
    char fn[64];
    tg_test_assert_fails(ctx, layer_new(k, ctx, "n", ndim, shape, eps, true, false, dtype).m, status,
                         fn_name(fn, k, "new"), part, part2, NULL);
}

/* Non-positive sizes, eps <= 0, NaN or inf eps: refused, naming the
 * argument and its value. */
START_TEST(test_bad_arguments) {
    const norm_kind *k = norm_begin(_i);
    char fn_fused[64], fn_composed[64];
    fn_name(fn_fused, k, "fused");
    fn_name(fn_composed, k, "composed");
    const int64_t s4[] = {4};
    assert_new_fails(k, 1, s4, 0.0, TG_F32, TG_ERR_VALUE, "eps = 0", NULL);
    assert_new_fails(k, 1, s4, -1e-6, TG_F32, TG_ERR_VALUE, "eps = -1e-06", NULL);
    assert_new_fails(k, 1, s4, NAN, TG_F32, TG_ERR_VALUE, "eps = ", "nan");
    assert_new_fails(k, 1, s4, INFINITY, TG_F32, TG_ERR_VALUE, "eps = inf", NULL);
    assert_new_fails(k, 1, s4, -INFINITY, TG_F32, TG_ERR_VALUE, "eps = -inf", NULL);
    assert_new_fails(k, 1, (int64_t[]){0}, 1e-6, TG_F32, TG_ERR_VALUE, "normalized_shape[0] = 0", NULL);
    assert_new_fails(k, 2, (int64_t[]){3, -5}, 1e-6, TG_F32, TG_ERR_VALUE, "normalized_shape[1] = -5", NULL);
    assert_new_fails(k, 0, s4, 1e-6, TG_F32, TG_ERR_VALUE, "ndim = 0", NULL);
    assert_new_fails(k, 9, s4, 1e-6, TG_F32, TG_ERR_VALUE, "ndim = 9", NULL);
    assert_new_fails(k, 1, NULL, 1e-6, TG_F32, TG_ERR_NULL, "normalized_shape", NULL);
    assert_new_fails(k, 1, s4, 1e-6, (tg_dtype)3, TG_ERR_DTYPE, "dtype 3", NULL);
    /* the fused op: eps = 0 is allowed (invariants), negative or NaN not */
    tg_tensor *x = tg_test_rand(ctx, TG_F64, TG_SHAPE(2, 4), -1, 1);
    ck_assert_ptr_nonnull(k->fused(ctx, x, NULL, NULL, 1, 0.0));
    tg_test_assert_fails(ctx, k->fused(ctx, x, NULL, NULL, 1, -1.0), TG_ERR_VALUE, fn_fused, "eps = -1", NULL);
    tg_test_assert_fails(ctx, k->composed(ctx, x, NULL, NULL, 1, NAN), TG_ERR_VALUE, fn_composed, "eps = ", "nan",
                         NULL);
    tg_test_assert_fails(ctx, k->fused(ctx, x, NULL, NULL, 0, 1e-6), TG_ERR_VALUE, fn_fused, "ndim_norm = 0", "1..2",
                         NULL);
    tg_test_assert_fails(ctx, k->fused(ctx, x, NULL, NULL, 3, 1e-6), TG_ERR_VALUE, fn_fused, "ndim_norm = 3", NULL);
    tg_test_assert_fails(ctx, k->fused(ctx, x, tg_ones(ctx, TG_F64, TG_SHAPE(3)), NULL, 1, 1e-6), TG_ERR_SHAPE,
                         fn_fused, "gamma (3,)", "(4,)", "(2, 4)", NULL);
    tg_test_assert_fails(ctx, k->fused(ctx, x, NULL, tg_ones(ctx, TG_F64, TG_SHAPE(2, 4)), 1, 1e-6), TG_ERR_SHAPE,
                         fn_fused, "beta (2, 4)", NULL);
    tg_test_assert_fails(ctx, k->fused(ctx, x, tg_ones(ctx, TG_F32, TG_SHAPE(4)), NULL, 1, 1e-6), TG_ERR_DTYPE,
                         fn_fused, NULL);
    tg_test_assert_fails(ctx, k->fused(ctx, tg_zeros(ctx, TG_F64, TG_SHAPE(3, 0)), NULL, NULL, 1, 1e-6), TG_ERR_SHAPE,
                         fn_fused, "no element", NULL);
    tg_test_assert_fails(ctx, k->fused(ctx, NULL, NULL, NULL, 1, 1e-6), TG_ERR_NULL, fn_fused, "'x'", NULL);
    /* no rows is fine: an empty output */
    tg_tensor *e = k->fused(ctx, tg_zeros(ctx, TG_F64, TG_SHAPE(0, 4)), NULL, NULL, 1, 1e-6);
    ck_assert_ptr_nonnull(e);
    ck_assert_int_eq(e->numel, 0);
}
END_TEST

/* Asserts the module's repr: "<Name>(dim=..., eps=<default>, <options>)  params=<n>". */
static void assert_repr(const norm_kind *k, const norm_layer *l, const char *dims_and_options) {
    char buf[256], want[256];
    tg_module_format(buf, sizeof buf, l->m);
    snprintf(want, sizeof want, "%s(%s", k->repr, dims_and_options);
    ck_assert_str_eq(buf, want);
}

/* affine=false: no gamma and zero parameters; bias=false: no beta. */
START_TEST(test_affine_bias_options) {
    const norm_kind *k = norm_begin(_i);
    char opts[160];
    tg_params p = {0};
    norm_layer a0 = layer_new(k, ctx, "norm0", 1, (int64_t[]){384}, k->eps, false, true, TG_F32);
    ck_assert_ptr_nonnull(a0.m);
    ck_assert_ptr_null(a0.gamma);
    ck_assert_ptr_null(a0.beta);
    ck_assert(!a0.affine && !a0.bias);
    ck_assert(layer_params(k, ctx, a0.m, &p));
    ck_assert_int_eq(p.count, 0);
    ck_assert_int_eq(tg_module_numel(a0.m), 0);
    snprintf(opts, sizeof opts, "dim=384, eps=%s, affine=false, bias=false)  params=0", k->eps_repr);
    assert_repr(k, &a0, opts);

    norm_layer a1 = layer_new(k, ctx, "norm1", 1, (int64_t[]){384}, k->eps, true, false, TG_F32);
    ck_assert_ptr_nonnull(a1.gamma);
    ck_assert_ptr_null(a1.beta);
    for (int64_t i = 0; i < 384; i++) ck_assert_double_eq(tg_get_flat(ctx, a1.gamma, i), 1.0);
    ck_assert(layer_params(k, ctx, a1.m, &p));
    ck_assert_int_eq(p.count, 1);
    ck_assert_str_eq(p.items[0].name, "norm1.gamma");
    ck_assert(!p.items[0].weight_decay);
    snprintf(opts, sizeof opts, "dim=384, eps=%s, affine=true, bias=false)  params=384", k->eps_repr);
    assert_repr(k, &a1, opts);
    /* the defaults */
    norm_layer def = layer_new(k, ctx, "n", 1, (int64_t[]){384}, k->eps, true, k->bias, TG_F32);
    snprintf(opts, sizeof opts, "dim=384, eps=%s, affine=true, bias=%s)  params=%d", k->eps_repr,
             k->bias ? "true" : "false", k->bias ? 768 : 384);
    assert_repr(k, &def, opts);
    layer_free(k, ctx, def.m);

    norm_layer a2 = layer_new(k, ctx, "norm2", 2, (int64_t[]){4, 8}, 1e-5, true, true, TG_F64);
    ck_assert_ptr_nonnull(a2.beta);
    ck_assert_int_eq(a2.beta->ndim, 2);
    ck_assert_int_eq(a2.beta->shape[1], 8);
    for (int64_t i = 0; i < 32; i++) ck_assert_double_eq(tg_get_flat(ctx, a2.beta, i), 0.0);
    ck_assert(layer_params(k, ctx, a2.m, &p));
    ck_assert_int_eq(p.count, 3);
    ck_assert_str_eq(p.items[1].name, "norm2.gamma");
    ck_assert_str_eq(p.items[2].name, "norm2.beta");
    ck_assert(!p.items[1].weight_decay && !p.items[2].weight_decay);
    ck_assert(p.items[2].value->persistent && p.items[2].value->requires_grad);
    assert_repr(k, &a2, "dim=(4, 8), eps=1e-05, affine=true, bias=true)  params=64");
    /* parameters survive a reset */
    tg_ctx_reset(ctx);
    ck_assert_double_eq(tg_get_flat(ctx, a2.gamma, 31), 1.0);
    tg_params_free(&p);
    layer_free(k, ctx, a0.m);
    layer_free(k, ctx, a1.m);
    tg_module_free(ctx, a2.m);
}
END_TEST

/* A fresh layer with bias computes what the same layer without bias does
 * (beta starts at 0): outputs and every gradient. */
START_TEST(test_fresh_bias_equals_no_bias) {
    const norm_kind *k = norm_begin(_i);
    for (int dt = 0; dt < 2; dt++) {
        tg_dtype dtype = dt ? TG_F64 : TG_F32;
        norm_layer nb = layer_new(k, ctx, "a", 1, (int64_t[]){16}, 1e-6, true, false, dtype);
        norm_layer wb = layer_new(k, ctx, "b", 1, (int64_t[]){16}, 1e-6, true, true, dtype);
        tg_tensor *x1 = tg_requires_grad(ctx, tg_test_rand(ctx, dtype, TG_SHAPE(5, 16), -2, 2));
        tg_tensor *x2 = tg_requires_grad(ctx, tg_copy(ctx, x1));
        tg_tensor *dy = tg_test_rand(ctx, dtype, TG_SHAPE(5, 16), -1, 1);
        tg_tensor *y1 = layer_forward(k, ctx, nb.m, x1);
        tg_backward_ex(ctx, y1, dy, false);
        tg_tensor *y2 = layer_forward(k, ctx, wb.m, x2);
        tg_backward_ex(ctx, y2, dy, false);
        ck_assert(tg_ok(ctx));
        ck_assert_double_eq(tg_test_max_abs_diff(ctx, y1, y2), 0);
        ck_assert_double_eq(tg_test_max_abs_diff(ctx, x1->grad, x2->grad), 0);
        ck_assert_double_eq(tg_test_max_abs_diff(ctx, nb.gamma->grad, wb.gamma->grad), 0);
        layer_free(k, ctx, nb.m);
        layer_free(k, ctx, wb.m);
        tg_ctx_reset(ctx);
    }
}
END_TEST

/* An input whose trailing dims are not normalized_shape: an error naming
 * both shapes. The output keeps the input's shape and dtype. */
START_TEST(test_trailing_dims_and_shape_dtype) {
    const norm_kind *k = norm_begin(_i);
    char fn[64];
    fn_name(fn, k, "forward");
    norm_layer n = layer_new(k, ctx, "n", 1, (int64_t[]){4}, 1e-6, true, false, TG_F32);
    tg_test_assert_fails(ctx, layer_forward(k, ctx, n.m, tg_zeros(ctx, TG_F32, TG_SHAPE(2, 5))), TG_ERR_SHAPE, fn,
                         "(2, 5)", "(4,)", NULL);
    norm_layer n2 = layer_new(k, ctx, "n2", 2, (int64_t[]){3, 4}, 1e-6, true, false, TG_F32);
    tg_test_assert_fails(ctx, layer_forward(k, ctx, n2.m, tg_zeros(ctx, TG_F32, TG_SHAPE(5, 4, 3))), TG_ERR_SHAPE, fn,
                         "(5, 4, 3)", "(3, 4)", NULL);
    tg_test_assert_fails(ctx, layer_forward(k, ctx, n2.m, tg_zeros(ctx, TG_F32, TG_SHAPE(4))), TG_ERR_SHAPE, fn, "(4,)",
                         "(3, 4)", NULL);
    tg_test_assert_fails(ctx, layer_forward(k, ctx, n.m, tg_zeros(ctx, TG_F64, TG_SHAPE(2, 4))), TG_ERR_DTYPE, fn,
                         "float64", "float32", NULL);
    tg_test_assert_fails(ctx, layer_forward(k, ctx, NULL, tg_zeros(ctx, TG_F32, TG_SHAPE(2, 4))), TG_ERR_NULL, fn,
                         "'layer'", NULL);
    tg_test_assert_fails(ctx, layer_forward(k, ctx, n.m, NULL), TG_ERR_NULL, fn, "'x'", NULL);
    layer_free(k, ctx, n.m);
    layer_free(k, ctx, n2.m);

    const int64_t shapes[][4] = {{5, 1, 1, 1}, {2, 5, 1, 1}, {2, 3, 5, 1}, {1, 1, 1, 5}};
    const int nds[] = {1, 2, 3, 4};
    for (int dt = 0; dt < 2; dt++) {
        tg_dtype dtype = dt ? TG_F64 : TG_F32;
        for (int s = 0; s < 4; s++) {
            int nd = nds[s];
            norm_layer l = layer_new(k, ctx, "l", 1, &shapes[s][nd - 1], 1e-6, true, true, dtype);
            tg_tensor *x = tg_test_rand(ctx, dtype, nd, shapes[s], -1, 1);
            tg_tensor *y = layer_forward(k, ctx, l.m, x);
            ck_assert_ptr_nonnull(y);
            ck_assert(tg_same_shape(x, y));
            ck_assert_int_eq(y->dtype, dtype);
            layer_free(k, ctx, l.m);
        }
    }
}
END_TEST

/* dgamma = sum over rows of dy * xhat, dbeta = sum over rows of dy, with
 * xhat from the naive reference; over 1 and 2 normalized dims. */
START_TEST(test_dgamma_dbeta) {
    const norm_kind *k = norm_begin(_i);
    for (int nd = 1; nd <= 2; nd++) {
        const int64_t shape[3] = {5, 3, 4};
        const int64_t C = nd == 1 ? 4 : 12, N = 60 / C;
        tg_tensor *x = tg_test_rand(ctx, TG_F64, 3, shape, -2, 2);
        tg_tensor *g = tg_requires_grad(ctx, tg_test_rand(ctx, TG_F64, nd, shape + 3 - nd, -2, 2));
        tg_tensor *b = tg_requires_grad(ctx, tg_test_rand(ctx, TG_F64, nd, shape + 3 - nd, -2, 2));
        tg_tensor *dy = tg_test_rand(ctx, TG_F64, 3, shape, -1, 1);
        tg_tensor *y = k->fused(ctx, x, g, b, nd, 1e-6);
        tg_backward_ex(ctx, y, dy, false);
        ck_assert(tg_ok(ctx));
        double *xv = tg_test_values(ctx, x), *dyv = tg_test_values(ctx, dy), xhat[60], dg[12] = {0}, db[12] = {0};
        tg_test_norm_ref(k->centered, xv, NULL, NULL, N, C, 1e-6, xhat, NULL);
        for (int64_t n = 0; n < N; n++)
            for (int64_t j = 0; j < C; j++) {
                dg[j] += dyv[n * C + j] * xhat[n * C + j];
                db[j] += dyv[n * C + j];
            }
        tg_test_assert_close(ctx, "dgamma", g->grad, dg, C, 1e-13, 1e-13);
        tg_test_assert_close(ctx, "dbeta", b->grad, db, C, 1e-13, 1e-13);
        free(xv), free(dyv);
        tg_ctx_reset(ctx);
    }
}
END_TEST

/* tg_gradcheck of norm case c on fresh float64 inputs (x uniform in
 * scale * [-1, 1)), h = 1e-6 and |a - n| <= 1e-5 + 1e-3 |n|. */
static void norm_gradcheck(const char *what, tg_test_norm_case c, int ndim, const int64_t *shape, double scale,
                           tg_gradcheck_mode mode, uint64_t seed) {
    tg_tensor *in[3];
    int n = tg_test_norm_inputs(ctx, &c, TG_F64, ndim, shape, scale, in);
    tg_gradcheck_opts o = {.h = 1e-6, .atol = 1e-5, .rtol = 1e-3, .mode = mode, .seed = seed};
    tg_test_gradcheck(ctx, what, tg_test_norm_fn, &c, n, in, o);
}

/* tg_gradcheck in float64: full Jacobian for small shapes, directional for
 * large; one normalized dim, two, inputs near zero (eps dominates), large
 * inputs, affine on/off, bias on/off. */
START_TEST(test_gradcheck) {
    const norm_kind *k = norm_begin(_i);
    const tg_gradcheck_mode F = TG_GRADCHECK_FULL, D = TG_GRADCHECK_DIRECTIONAL;
    for (int opt = 0; opt < 4; opt++) {
        tg_test_norm_case c = {k->fused, 1, k->eps, opt & 1, (opt >> 1) & 1};
        norm_gradcheck("dim 1", c, TG_SHAPE(3, 5), 1.0, F, 1);
        norm_gradcheck("dim 1, two elements per row", c, TG_SHAPE(4, 2), 1.0, F, 2);
        c.ndim_norm = 2;
        norm_gradcheck("2 trailing dims", c, TG_SHAPE(2, 3, 4), 1.0, F, 3);
        c.ndim_norm = 1;
        norm_gradcheck("near zero, eps dominates", c, TG_SHAPE(3, 6), 1e-4, F, 4);
        c.eps = 1e-5;
        norm_gradcheck("near zero, comparable to eps", c, TG_SHAPE(3, 6), 3e-3, F, 5);
        c.eps = 1e-6;
        norm_gradcheck("large inputs", c, TG_SHAPE(3, 6), 1e3, F, 6);
        norm_gradcheck("large shape", c, TG_SHAPE(16, 200), 1.0, D, 7);
        c.ndim_norm = 3;
        norm_gradcheck("large, 3 dims", c, TG_SHAPE(4, 8, 5, 10), 2.0, D, 8);
        tg_ctx_reset(ctx);
    }
}
END_TEST

/* One tape record; it saves the per-row statistics (one double per row for
 * RMSNorm's rstd, two for LayerNorm's mean and rstd) and keeps x and gamma
 * for backward. Without grad: no record. Over 2 normalized dims in float32
 * and over 1 in float64. */
START_TEST(test_one_record_saved_bytes) {
    const norm_kind *k = norm_begin(_i);
    static const struct {
        int ndim_norm;
        int64_t norm_shape[2];
        int64_t shape[3]; /* of x: rows, then the normalized dims */
        int64_t rows, numel, gamma_numel;
        tg_dtype dtype;
    } cases[] = {{2, {4, 8}, {10, 4, 8}, 10, 320, 32, TG_F32}, {1, {8}, {3, 5, 8}, 15, 120, 8, TG_F64}};
    for (int i = 0; i < 2; i++) {
        tg_dtype dt = cases[i].dtype;
        norm_layer l = layer_new(k, ctx, "n", cases[i].ndim_norm, cases[i].norm_shape, k->eps, true, true, dt);
        tg_tensor *x = tg_requires_grad(ctx, tg_test_rand(ctx, dt, 3, cases[i].shape, -1, 1));
        ck_assert_ptr_nonnull(layer_forward(k, ctx, l.m, x));
        ck_assert_int_eq(tg_tape_size(ctx), 1);
        ck_assert_uint_eq(tg_tape_saved_bytes(ctx),
                          (size_t)(k->stats * cases[i].rows) * sizeof(double) +
                              (size_t)(cases[i].numel + cases[i].gamma_numel) * tg_dtype_size(dt));
        tg_ctx_reset(ctx);
        tg_set_grad_enabled(ctx, false);
        ck_assert_ptr_nonnull(layer_forward(k, ctx, l.m, tg_test_rand(ctx, dt, 3, cases[i].shape, -1, 1)));
        ck_assert_int_eq(tg_tape_size(ctx), 0);
        tg_set_grad_enabled(ctx, true);
        layer_free(k, ctx, l.m);
    }
}
END_TEST

/* Forward and every gradient bitwise equal with 1 and 4 threads. */
START_TEST(test_threads_bitwise) {
    const norm_kind *k = norm_begin(_i);
    tg_tensor *res[2][4];
    for (int t = 0; t < 2; t++) {
        tg_set_threads(ctx, t ? 4 : 1);
        tg_rng_seed(ctx, 11);
        tg_tensor *x = tg_requires_grad(ctx, tg_test_rand(ctx, TG_F32, TG_SHAPE(512, 256), -2, 2));
        tg_tensor *g = tg_requires_grad(ctx, tg_test_rand(ctx, TG_F32, TG_SHAPE(256), 0.5, 1.5));
        tg_tensor *b = tg_requires_grad(ctx, tg_test_rand(ctx, TG_F32, TG_SHAPE(256), -1, 1));
        tg_tensor *y = k->fused(ctx, x, g, b, 1, 1e-6);
        tg_backward_ex(ctx, y, tg_test_rand(ctx, TG_F32, TG_SHAPE(512, 256), -1, 1), false);
        ck_assert(tg_ok(ctx));
        res[t][0] = y, res[t][1] = x->grad, res[t][2] = g->grad, res[t][3] = b->grad;
    }
    for (int i = 0; i < 4; i++) tg_test_assert_same_bits("1 vs 4 threads", res[0][i], res[1][i]);
}
END_TEST

/* A context in error: nothing is done and the first error stays. */
START_TEST(test_error_state) {
    const norm_kind *k = norm_begin(_i);
    norm_layer l = layer_new(k, ctx, "n", 1, (int64_t[]){4}, 1e-6, true, false, TG_F32);
    tg_tensor *x = tg_test_rand(ctx, TG_F32, TG_SHAPE(2, 4), -1, 1);
    tg_error(ctx, TG_ERR_STATE, "test", "first");
    ck_assert_ptr_null(layer_new(k, ctx, "m", 1, (int64_t[]){4}, 1e-6, true, false, TG_F32).m);
    ck_assert_ptr_null(layer_forward(k, ctx, l.m, x));
    ck_assert_ptr_null(k->fused(ctx, x, NULL, NULL, 1, 1e-6));
    ck_assert_ptr_null(k->composed(ctx, x, NULL, NULL, 1, 1e-6));
    ck_assert_str_eq(tg_error_message(ctx), "test: first");
    tg_clear_error(ctx);
    ck_assert_ptr_null(k->fused(NULL, x, NULL, NULL, 1, 1e-6));
    ck_assert_ptr_null(layer_new(k, NULL, "m", 1, (int64_t[]){4}, 1e-6, true, false, TG_F32).m);
    layer_free(k, ctx, l.m);
    layer_free(k, ctx, NULL);
}
END_TEST

/* The three constructors: tg_<name>_new with every option, _new_ex with an
 * options struct (NULL: the defaults) and the short form _new1 make the
 * same default layer (same repr, same output bits); the options change the
 * layer; a zeroed options struct is refused, naming the _defaults
 * function; errors name the constructor that was called. */
START_TEST(test_options_and_short_forms) {
    const norm_kind *k = norm_begin(_i);
    char fn_ex[64], fn_1[64], fn_def[64], opts[160];
    fn_name(fn_ex, k, "new_ex");
    fn_name(fn_1, k, "new1");
    fn_name(fn_def, k, "defaults()");
    const norm_opts d = layer_defaults(k);
    ck_assert_double_eq(d.eps, k->eps);
    ck_assert(d.affine);
    ck_assert_int_eq(d.bias, k->bias);
    ck_assert_int_eq(d.dtype, TG_F32);
    norm_layer forms[4] = {layer_new(k, ctx, "n", 1, (int64_t[]){16}, k->eps, true, k->bias, TG_F32),
                           layer_new_ex(k, ctx, "n", TG_SHAPE(16), NULL), layer_new_ex(k, ctx, "n", TG_SHAPE(16), &d),
                           layer_new1(k, ctx, "n", 16)};
    ck_assert(tg_ok(ctx));
    snprintf(opts, sizeof opts, "dim=16, eps=%s, affine=true, bias=%s)  params=%d", k->eps_repr,
             k->bias ? "true" : "false", k->bias ? 32 : 16);
    tg_tensor *x = tg_test_rand(ctx, TG_F32, TG_SHAPE(3, 16), -2, 2);
    tg_tensor *y0 = layer_forward(k, ctx, forms[0].m, x);
    for (int i = 0; i < 4; i++) {
        assert_repr(k, &forms[i], opts);
        ck_assert_int_eq(forms[i].m->dtype, TG_F32);
        tg_test_assert_same_bits("the default layer's output", layer_forward(k, ctx, forms[i].m, x), y0);
        layer_free(k, ctx, forms[i].m);
    }
    /* options: another eps, the other bias, float64, two dims by TG_SHAPE */
    norm_opts o = d;
    o.eps = 1e-3;
    o.bias = !k->bias;
    o.dtype = TG_F64;
    norm_layer e = layer_new_ex(k, ctx, "e", TG_SHAPE(4, 8), &o);
    ck_assert_ptr_nonnull(e.m);
    ck_assert_int_eq(e.m->dtype, TG_F64);
    ck_assert_int_eq(e.gamma->dtype, TG_F64);
    ck_assert_int_eq(e.beta != NULL, o.bias);
    snprintf(opts, sizeof opts, "dim=(4, 8), eps=0.001, affine=true, bias=%s)  params=%d", o.bias ? "true" : "false",
             o.bias ? 64 : 32);
    assert_repr(k, &e, opts);
    layer_free(k, ctx, e.m);
    /* a zeroed struct is not the defaults: its eps of 0 is refused */
    const norm_opts zero = {0};
    tg_test_assert_fails(ctx, layer_new_ex(k, ctx, "z", TG_SHAPE(4), &zero).m, TG_ERR_VALUE, fn_ex, "eps = 0", fn_def,
                         NULL);
    o = d;
    o.dtype = (tg_dtype)3;
    tg_test_assert_fails(ctx, layer_new_ex(k, ctx, "z", TG_SHAPE(4), &o).m, TG_ERR_DTYPE, fn_ex, "dtype 3", NULL);
    tg_test_assert_fails(ctx, layer_new_ex(k, ctx, "z", 1, NULL, NULL).m, TG_ERR_NULL, fn_ex, "normalized_shape", NULL);
    tg_test_assert_fails(ctx, layer_new1(k, ctx, "s", 0).m, TG_ERR_VALUE, fn_1, "normalized_shape[0] = 0", NULL);
}
END_TEST

/* ---- float32 rows far from 1 -------------------------------------------------- */

/* The kind's float32 layer (gamma = 1, eps, its default bias) on the rows
 * x = xv (N, C), back-propagating an upstream gradient uniform in [-1, 1)
 * drawn from the RNG: x's grad is finite and, row by row, within
 * tol * (the row's largest |dx|) of the float64 gradient of the same
 * (float32-rounded) values. Returns y; *x gets the float32 input and *x32
 * its values as doubles (free them). */
static tg_tensor *f32_rows(const norm_kind *k, const double *xv, int64_t N, int64_t C, double eps, double tol,
                           tg_tensor **x, double **x32) {
    double *dyv = tg_test_malloc((size_t)(N * C) * sizeof *dyv);
    for (int64_t i = 0; i < N * C; i++) dyv[i] = 2.0 * tg_rng_uniform(ctx) - 1.0;
    norm_layer l = layer_new(k, ctx, "n", 1, (int64_t[]){C}, eps, true, k->bias, TG_F32);
    *x = tg_requires_grad(ctx, tg_test_tensor(ctx, TG_F32, TG_SHAPE(N, C), xv));
    tg_tensor *y = layer_forward(k, ctx, l.m, *x);
    tg_backward_ex(ctx, y, tg_test_tensor(ctx, TG_F32, TG_SHAPE(N, C), dyv), false);
    ck_assert(tg_ok(ctx));
    /* the float64 gradient of the same values */
    *x32 = tg_test_values(ctx, *x);
    tg_tensor *x64 = tg_requires_grad(ctx, tg_test_tensor(ctx, TG_F64, TG_SHAPE(N, C), *x32));
    tg_tensor *y64 = k->fused(ctx, x64, NULL, NULL, 1, eps);
    tg_backward_ex(ctx, y64, tg_test_tensor(ctx, TG_F64, TG_SHAPE(N, C), dyv), false);
    for (int64_t n = 0; n < N; n++) {
        double scale = 0;
        for (int64_t j = 0; j < C; j++) scale = fmax(scale, fabs(tg_get_flat(ctx, x64->grad, n * C + j)));
        ck_assert(scale > 0 && isfinite(scale));
        for (int64_t j = 0; j < C; j++) {
            double a = tg_get_flat(ctx, (*x)->grad, n * C + j), b = tg_get_flat(ctx, x64->grad, n * C + j);
            ck_assert_msg(isfinite(a), "dx[%lld][%lld] = %g", (long long)n, (long long)j, a);
            ck_assert_msg(fabs(a - b) <= tol * scale, "dx[%lld][%lld]: %g vs %g", (long long)n, (long long)j, a, b);
        }
    }
    free(dyv);
    layer_free(k, ctx, l.m);
    return y;
}

/* ---- RMSNorm only --------------------------------------------------------------- */

/* Where the eps defaults come from, as the header says it: RMSNorm's 1e-6
 * is not PyTorch's default (torch.nn.RMSNorm's eps=None is the dtype's
 * machine epsilon) but LLaMA-style code's; burn and Equinox use 1e-5. The
 * comment above TG_RMSNORM_EPS once called 1e-6 "PyTorch's nn.RMSNorm"
 * default: this reads it. */
START_TEST(test_eps_defaults_documented) {
    ck_assert_double_eq(TG_RMSNORM_EPS, 1e-6);
    ck_assert_double_eq(TG_LAYERNORM_EPS, 1e-5);
    char *h = tg_test_read_file(TG_TEST_DIR "/../include/tapegrad/layers.h", NULL);
    char *def = strstr(h, "#define TG_RMSNORM_EPS");
    ck_assert_ptr_nonnull(def);
    *def = '\0';
    /* the comment block right above the #define */
    char *comment = NULL;
    for (char *p = def; p > h && !comment; p--)
        if (p[0] == '/' && p[1] == '*') comment = p;
    ck_assert_ptr_nonnull(comment);
    tg_test_assert_contains(comment, "eps=None", "torch.finfo", "LLaMA", "burn", "Equinox", "1e-5", NULL);
    ck_assert_msg(!strstr(comment, "Defaults of PyTorch's nn.RMSNorm"), "the comment still calls 1e-6 PyTorch's: %s",
                  comment);
    free(h);
}
END_TEST

/* torch.nn.RMSNorm(3, eps=1e-5) on arange(9).reshape(3, 3), the example of
 * several RMSNorm implementations' tests. */
START_TEST(test_rmsnorm_arange_3x3) {
    const norm_kind *k = norm_begin(RMS);
    static const double want[9] = {0, 0.7746, 1.5492, 0.7348, 0.9798, 1.2247, 0.8514, 0.9933, 1.1352};
    for (int dt = 0; dt < 2; dt++) {
        tg_dtype dtype = dt ? TG_F64 : TG_F32;
        norm_layer n = layer_new(k, ctx, "norm", 1, (int64_t[]){3}, 1e-5, true, false, dtype);
        ck_assert_ptr_nonnull(n.m);
        tg_tensor *x = tg_view(ctx, tg_arange(ctx, dtype, 0, 9, 1), TG_SHAPE(3, 3));
        tg_tensor *y = layer_forward(k, ctx, n.m, x);
        ck_assert_ptr_nonnull(y);
        tg_test_assert_close(ctx, "rmsnorm(arange(9))", y, want, 9, 1e-4, 0);
        layer_free(k, ctx, n.m);
    }
}
END_TEST

/* The RMS is a mean of squares over every normalized element, not a sum,
 * for one and for two normalized dims (random rows over 2 dims:
 * test_two_normalized_dims). */
START_TEST(test_rmsnorm_mean_not_sum) {
    const norm_kind *k = norm_begin(RMS);
    /* a constant row c: mean(x^2) = c^2, so y = c / sqrt(c^2 + eps) ~ 1
     * (a sum would give c / sqrt(C c^2) = 1/2 for C = 4) */
    norm_layer n1 = layer_new(k, ctx, "n1", 1, (int64_t[]){4}, 1e-6, true, false, TG_F64);
    tg_tensor *y = layer_forward(k, ctx, n1.m, tg_full(ctx, TG_F64, TG_SHAPE(2, 4), 2.0));
    for (int i = 0; i < 8; i++) ck_assert_double_eq_tol(tg_get_flat(ctx, y, i), 2.0 / sqrt(4.0 + 1e-6), 1e-15);
    /* two normalized dims (2, 3): mean over all 6 elements of each row */
    norm_layer n2 = layer_new(k, ctx, "n2", 2, (int64_t[]){2, 3}, 1e-6, true, false, TG_F64);
    y = layer_forward(k, ctx, n2.m, tg_full(ctx, TG_F64, TG_SHAPE(4, 2, 3), -3.0));
    for (int i = 0; i < 24; i++) ck_assert_double_eq_tol(tg_get_flat(ctx, y, i), -3.0 / sqrt(9.0 + 1e-6), 1e-15);
    /* one row of 2 values by hand: x = (3, 4): mean(x^2) = 12.5 */
    y = k->fused(ctx, tg_test_tensor(ctx, TG_F64, TG_SHAPE(1, 2), (double[]){3, 4}), NULL, NULL, 1, 0.0);
    tg_test_assert_close(ctx, "(3,4)", y, (double[]){3 / sqrt(12.5), 4 / sqrt(12.5)}, 2, 1e-15, 0);
    layer_free(k, ctx, n1.m);
    layer_free(k, ctx, n2.m);
}
END_TEST

/* With eps = 0, RMSNorm is scale invariant: f(c x) = f(x) for c > 0, so
 * its derivative along x vanishes: per row, x . dx = 0 for any upstream
 * gradient. With eps > 0 both fail (the test can fail). */
START_TEST(test_rmsnorm_scale_invariance_eps0) {
    const norm_kind *k = norm_begin(RMS);
    const int64_t N = 6, C = 9;
    tg_tensor *x = tg_requires_grad(ctx, tg_test_rand(ctx, TG_F64, TG_SHAPE(N, C), -2, 2));
    tg_tensor *g = tg_requires_grad(ctx, tg_test_rand(ctx, TG_F64, TG_SHAPE(C), 0.5, 1.5));
    tg_tensor *b = tg_requires_grad(ctx, tg_test_rand(ctx, TG_F64, TG_SHAPE(C), -1, 1));
    tg_tensor *dy = tg_test_rand(ctx, TG_F64, TG_SHAPE(N, C), -1, 1);
    for (int e = 0; e < 2; e++) {
        double eps = e ? 1.0 : 0.0;
        tg_zero_grad(ctx, x);
        tg_tensor *y = k->fused(ctx, x, g, b, 1, eps);
        tg_backward_ex(ctx, y, dy, false);
        ck_assert(tg_ok(ctx));
        const double *xv = x->data, *dx = x->grad->data;
        double worst = 0;
        for (int64_t n = 0; n < N; n++) {
            double dot = 0, nx = 0, nd = 0;
            for (int64_t j = 0; j < C; j++) {
                dot += xv[n * C + j] * dx[n * C + j];
                nx += xv[n * C + j] * xv[n * C + j];
                nd += dx[n * C + j] * dx[n * C + j];
            }
            worst = fmax(worst, fabs(dot) / sqrt(nx * nd));
        }
        if (eps == 0) ck_assert_msg(worst < 1e-14, "x . dx / |x||dx| = %g", worst);
        else ck_assert_msg(worst > 1e-3, "eps = 1 should break the invariance (%g)", worst);
        for (int i = 0; i < 4; i++) {
            const double c = (double[]){1e-3, 0.5, 7.0, 1e4}[i];
            tg_tensor *cx = tg_mul_scalar(ctx, tg_detach(ctx, x), c);
            double d = tg_test_max_abs_diff(ctx, k->fused(ctx, cx, g, b, 1, eps), y);
            if (eps == 0) ck_assert_msg(d < 1e-14, "f(%g x) - f(x) = %g", c, d);
            else ck_assert_msg(d > 1e-4, "eps = 1: f(%g x) = f(x) unexpectedly", c);
        }
    }
}
END_TEST

/* float32 rows around 1e20 (the sum of squares overflows float32) and
 * 1e-20 (squares underflow) normalize correctly through the layer, with
 * finite gradients matching float64. The composed float32 form, which
 * squares in float32, gives 0 for the 1e20 row: why the fused kernel
 * accumulates in double. */
START_TEST(test_rmsnorm_float32_extreme_rows) {
    const norm_kind *k = norm_begin(RMS);
    const int64_t N = 3, C = 64;
    double xv[3 * 64], ref[3 * 64], *x32;
    for (int64_t j = 0; j < C; j++) {
        double u = 1.0 + tg_rng_uniform(ctx), s = tg_rng_uniform(ctx) < 0.5 ? -1 : 1;
        xv[j] = s * u * 1e20;
        xv[C + j] = s * (2.0 - u) * 1e-20;
        xv[2 * C + j] = s * u;
    }
    tg_tensor *x, *y = f32_rows(k, xv, N, C, 1e-6, 1e-5, &x, &x32);
    /* y against the float64 reference of the same values */
    tg_test_norm_ref(false, x32, NULL, NULL, N, C, 1e-6, NULL, ref);
    tg_test_assert_close(ctx, "y", y, ref, N * C, 0, 2e-6); /* relative, at every scale */
    /* row 0 really is ~1e20 and row 1 ~1e-20: y ~ 1 and y ~ 1e-17 */
    ck_assert(fabs(tg_get_flat(ctx, y, 0)) > 0.5 && fabs(tg_get_flat(ctx, y, C)) < 1e-16);
    /* the composed float32 form overflows: sum x^2 = inf, so y = x / inf = 0 */
    tg_tensor *yc = k->composed(ctx, tg_detach(ctx, x), NULL, NULL, 1, 1e-6);
    ck_assert_ptr_nonnull(yc);
    for (int64_t j = 0; j < C; j++) {
        double v = tg_get_flat(ctx, yc, j);
        ck_assert_msg(v == 0 || !isfinite(v), "composed float32 at 1e20 gave %g", v);
    }
    free(x32);
}
END_TEST

/* ---- LayerNorm only ------------------------------------------------------------ */

/* Rows worked by hand. (1, 2, 3): mean 2, biased var 2/3, so
 * y = (-1, 0, 1) / sqrt(2/3 + eps) = (-1.2247, 0, 1.2247). (0, 2): mean 1,
 * biased var 1 (an unbiased var would be 2), y = (-1, 1) / sqrt(1 + eps).
 * arange(9) as 3x3: every row is (k, k+1, k+2), so every row gives the
 * first answer. A constant row gives 0 (then beta). */
START_TEST(test_layernorm_values_by_hand) {
    const norm_kind *k = norm_begin(LN);
    for (int dt = 0; dt < 2; dt++) {
        tg_dtype dtype = dt ? TG_F64 : TG_F32;
        double tol = dt ? 1e-15 : 1e-6;
        norm_layer l = layer_new(k, ctx, "ln", 1, (int64_t[]){3}, 1e-5, true, true, dtype);
        tg_tensor *y = layer_forward(k, ctx, l.m, tg_test_tensor(ctx, dtype, TG_SHAPE(1, 3), (double[]){1, 2, 3}));
        double a = 1 / sqrt(2.0 / 3.0 + 1e-5);
        tg_test_assert_close(ctx, "(1,2,3)", y, (double[]){-a, 0, a}, 3, tol, tol);
        y = layer_forward(k, ctx, l.m, tg_view(ctx, tg_arange(ctx, dtype, 0, 9, 1), TG_SHAPE(3, 3)));
        tg_test_assert_close(ctx, "arange(9)", y,
                             (double[]){-1.2247, 0, 1.2247, -1.2247, 0, 1.2247, -1.2247, 0, 1.2247}, 9, 1e-4, 0);
        y = k->fused(ctx, tg_test_tensor(ctx, dtype, TG_SHAPE(2), (double[]){0, 2}), NULL, NULL, 1, 1e-5);
        double b = 1 / sqrt(1 + 1e-5);
        tg_test_assert_close(ctx, "(0,2)", y, (double[]){-b, b}, 2, tol, tol);
        /* a constant row: 0 * gamma + beta */
        tg_tensor *g = tg_test_tensor(ctx, dtype, TG_SHAPE(3), (double[]){2, 3, 4});
        tg_tensor *be = tg_test_tensor(ctx, dtype, TG_SHAPE(3), (double[]){0.5, -1, 7});
        y = k->fused(ctx, tg_full(ctx, dtype, TG_SHAPE(2, 3), 5.0), g, be, 1, 1e-5);
        tg_test_assert_close(ctx, "constant row", y, (double[]){0.5, -1, 7, 0.5, -1, 7}, 6, 0, 0);
        layer_free(k, ctx, l.m);
    }
}
END_TEST

/* Per row, sum(dx) = 0 (shift invariance, for any gamma and eps) and
 * xhat . dx = 0 (scale invariance, exact at eps = 0; with gamma = 1 as
 * the usual statement has it, though any gamma works), for any upstream
 * gradient. With eps > 0, xhat . dx = r sum(u xhat) eps / (var + eps):
 * small, not 0. */
START_TEST(test_layernorm_invariants) {
    const norm_kind *k = norm_begin(LN);
    const int64_t N = 6, C = 10;
    tg_tensor *dy = tg_test_rand(ctx, TG_F64, TG_SHAPE(N, C), -1, 1);
    for (int c = 0; c < 3; c++) {
        double eps = c == 2 ? 1e-5 : 0.0;
        tg_tensor *x = tg_requires_grad(ctx, tg_test_rand(ctx, TG_F64, TG_SHAPE(N, C), -2, 2));
        tg_tensor *g = c == 1 ? tg_test_rand(ctx, TG_F64, TG_SHAPE(C), 0.5, 1.5) : tg_ones(ctx, TG_F64, TG_SHAPE(C));
        tg_tensor *y = k->fused(ctx, x, g, NULL, 1, eps);
        tg_backward_ex(ctx, y, dy, false);
        ck_assert(tg_ok(ctx));
        double *xv = tg_test_values(ctx, x), *dx = tg_test_values(ctx, x->grad), xhat[60];
        tg_test_norm_ref(true, xv, NULL, NULL, N, C, eps, xhat, NULL);
        for (int64_t n = 0; n < N; n++) {
            double sum = 0, dot = 0, ndx = 0;
            for (int64_t j = 0; j < C; j++) {
                sum += dx[n * C + j];
                dot += xhat[n * C + j] * dx[n * C + j];
                ndx += dx[n * C + j] * dx[n * C + j];
            }
            ndx = sqrt(ndx * C);
            ck_assert_msg(fabs(sum) < 1e-14 * ndx, "case %d row %lld: sum(dx) = %g", c, (long long)n, sum);
            if (eps == 0)
                ck_assert_msg(fabs(dot) < 1e-14 * ndx, "case %d row %lld: xhat . dx = %g", c, (long long)n, dot);
            else ck_assert_msg(fabs(dot) < 1e-3 * ndx, "case %d row %lld: xhat . dx = %g", c, (long long)n, dot);
        }
        free(xv), free(dx);
    }
    /* through a fresh layer (gamma = 1): sum(dx) = 0 exactly in math */
    norm_layer l = layer_new(k, ctx, "ln", 2, (int64_t[]){2, 5}, 1e-5, true, true, TG_F64);
    tg_tensor *x = tg_requires_grad(ctx, tg_test_rand(ctx, TG_F64, TG_SHAPE(3, 2, 5), -2, 2));
    tg_tensor *y = layer_forward(k, ctx, l.m, x);
    tg_backward_ex(ctx, y, tg_test_rand(ctx, TG_F64, TG_SHAPE(3, 2, 5), -1, 1), false);
    for (int64_t n = 0; n < 3; n++) {
        double sum = 0, mx = 0;
        for (int64_t j = 0; j < 10; j++) {
            sum += tg_get_flat(ctx, x->grad, n * 10 + j);
            mx = fmax(mx, fabs(tg_get_flat(ctx, x->grad, n * 10 + j)));
        }
        ck_assert(mx > 0.01 && fabs(sum) < 1e-13 * mx);
    }
    layer_free(k, ctx, l.m);
}
END_TEST

/* A float32 row of 1e4 + small noise: E[x^2] - E[x]^2 would cancel to
 * nothing (float32 keeps ~7 digits of 1e8); the two-pass float64
 * statistics normalize it correctly, through the layer, with gradients
 * matching float64. Rows near 1e20 and 1e-20 too. */
START_TEST(test_layernorm_float32_hard_rows) {
    const norm_kind *k = norm_begin(LN);
    const int64_t N = 4, C = 256;
    double xv[4 * 256], ref[4 * 256], *x32;
    for (int64_t j = 0; j < C; j++) {
        double u = tg_rng_uniform(ctx) - 0.5;
        xv[j] = 1e4 + 0.3 * u; /* 1e4 + noise of std ~0.09 */
        xv[C + j] = -3e4 + 2.0 * u;
        xv[2 * C + j] = (1.5 + u) * 1e20 * (j % 2 ? 1 : -1);
        xv[3 * C + j] = (1.5 + u) * 1e-20 * (j % 3 ? 1 : -1);
    }
    tg_tensor *x, *y = f32_rows(k, xv, N, C, 1e-5, 2e-3, &x, &x32);
    tg_test_norm_ref(true, x32, NULL, NULL, N, C, 1e-5, NULL, ref);
    /* y is O(1) for rows 0..2: absolute error at float32 level */
    for (int64_t i = 0; i < 3 * C; i++)
        ck_assert_msg(fabs(tg_get_flat(ctx, y, i) - ref[i]) < 2e-4, "y[%lld] = %.9g vs %.9g", (long long)i,
                      tg_get_flat(ctx, y, i), ref[i]);
    for (int64_t i = 3 * C; i < 4 * C; i++) /* ~1e-17: relative */
        ck_assert_msg(fabs(tg_get_flat(ctx, y, i) - ref[i]) <= 1e-5 * fabs(ref[i]), "y[%lld]", (long long)i);
    /* row 0 is really normalized: mean 0, variance ~1 */
    double m = 0, v = 0;
    for (int64_t j = 0; j < C; j++) m += tg_get_flat(ctx, y, j) / C;
    for (int64_t j = 0; j < C; j++) v += pow(tg_get_flat(ctx, y, j) - m, 2) / C;
    ck_assert_msg(fabs(m) < 1e-4 && fabs(v - 1) < 2e-3, "row 1e4+noise: mean %g var %g", m, v);
    free(x32);
}
END_TEST

Suite *make_norms_suite(void) {
    Suite *s = suite_create("norms");
    const int n = (int)(sizeof NORMS / sizeof NORMS[0]);
    TCase *tc = tg_test_tcase(s, "both", setup, teardown, NULL);
    tcase_add_loop_test(tc, test_two_normalized_dims, 0, n);
    tcase_add_loop_test(tc, test_values_naive, 0, n);
    tcase_add_loop_test(tc, test_bad_arguments, 0, n);
    tcase_add_loop_test(tc, test_affine_bias_options, 0, n);
    tcase_add_loop_test(tc, test_fresh_bias_equals_no_bias, 0, n);
    tcase_add_loop_test(tc, test_trailing_dims_and_shape_dtype, 0, n);
    tcase_add_loop_test(tc, test_dgamma_dbeta, 0, n);
    tcase_add_loop_test(tc, test_gradcheck, 0, n);
    tcase_add_loop_test(tc, test_one_record_saved_bytes, 0, n);
    tcase_add_loop_test(tc, test_threads_bitwise, 0, n);
    tcase_add_loop_test(tc, test_error_state, 0, n);
    tcase_add_loop_test(tc, test_options_and_short_forms, 0, n);
    tg_test_tcase(s, "rmsnorm", setup, teardown, test_eps_defaults_documented, test_rmsnorm_arange_3x3,
                  test_rmsnorm_mean_not_sum, test_rmsnorm_scale_invariance_eps0, test_rmsnorm_float32_extreme_rows,
                  NULL);
    tg_test_tcase(s, "layernorm", setup, teardown, test_layernorm_values_by_hand, test_layernorm_invariants,
                  test_layernorm_float32_hard_rows, NULL);
    return s;
}

int main(void) { return tg_test_run(make_norms_suite()); }

/* Helpers for the tests of the elementwise, activation and reduction ops
 * (tests/test_ops_elementwise.c, tests/test_ops_reduce.c). Header-only.
 *
 *  - o1_fd_check: an op's backward against central finite differences in
 *    float64, for a fixed pseudo-random weighting r of the outputs:
 *      analytic  d(sum r*f)/dx_j   from tg_backward_ex(f, r)
 *      numeric   (sum r*f(x + h e_j) - sum r*f(x - h e_j)) / 2h
 *    passing when |analytic - numeric| <= atol + rtol |numeric|; a small
 *    local stand-in for the shared tg_gradcheck.
 *  - o1_fx: one named array of tests/fixtures/ops_values.txt (written by
 *    ops_values.py with PyTorch; lines "name count v1 v2 ...").
 *  - o1_assert_close, o1_assert_error. */
#ifndef TG_TESTS_OPS1_TESTUTIL_H
#define TG_TESTS_OPS1_TESTUTIL_H

#include <check.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tapegrad.h"
#include "testutil.h"

/* The function under test: its output from the inputs in[]. */
typedef tg_tensor *(*o1_fn)(tg_ctx *ctx, tg_tensor **in, const void *arg);

/* A weight in [-1, 1) fixed by i (splitmix64 of i). */
static inline double o1_weight(int64_t i) {
    uint64_t z = (uint64_t)i * 0x9E3779B97F4A7C15ull + 0xA5A5A5A5ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1.0p-52 - 1.0;
}

static inline double o1_weighted_sum(const tg_tensor *y) {
    double s = 0;
    for (int64_t i = 0; i < y->numel; i++) s += o1_weight(i) * ((const double *)y->data)[i];
    return s;
}

/* Checks d(sum r*f)/d in[k] for every float64 input with requires_grad, by
 * central differences of step h. Zeroes their grads first. Fails the test
 * naming the input, element and both values; returns the worst error. */
static inline double o1_fd_check(tg_ctx *ctx, o1_fn f, int n_in, tg_tensor **in, const void *arg, double h,
                                 double atol, double rtol) {
    for (int k = 0; k < n_in; k++)
        if (in[k]->requires_grad) tg_zero_grad(ctx, in[k]);
    tg_tensor *y = f(ctx, in, arg);
    ck_assert_msg(y != NULL && tg_ok(ctx), "forward failed: %s", tg_error_message(ctx));
    ck_assert_int_eq(y->dtype, TG_F64);
    tg_tensor *r = tg_zeros(ctx, TG_F64, y->ndim, y->shape);
    for (int64_t i = 0; i < y->numel; i++) ((double *)r->data)[i] = o1_weight(i);
    tg_backward_ex(ctx, y, r, false);
    ck_assert_msg(tg_ok(ctx), "backward failed: %s", tg_error_message(ctx));

    bool was = tg_set_grad_enabled(ctx, false);
    double worst = 0;
    for (int k = 0; k < n_in; k++) {
        tg_tensor *x = in[k];
        if (!x->requires_grad) continue;
        ck_assert_int_eq(x->dtype, TG_F64);
        ck_assert_ptr_nonnull(x->grad);
        double *xd = x->data;
        for (int64_t j = 0; j < x->numel; j++) {
            double v = xd[j];
            xd[j] = v + h;
            double lp = o1_weighted_sum(f(ctx, in, arg));
            xd[j] = v - h;
            double lm = o1_weighted_sum(f(ctx, in, arg));
            xd[j] = v;
            double num = (lp - lm) / (2 * h);
            double ana = ((double *)x->grad->data)[j];
            double err = fabs(ana - num);
            if (err > worst) worst = err;
            ck_assert_msg(err <= atol + rtol * fabs(num),
                          "gradient mismatch: input %d element %lld: analytic %.12g numeric %.12g", k,
                          (long long)j, ana, num);
        }
    }
    tg_set_grad_enabled(ctx, was);
    ck_assert_msg(tg_ok(ctx), "%s", tg_error_message(ctx));
    return worst;
}

#define O1_H 1e-6
#define O1_ATOL 1e-7
#define O1_RTOL 1e-6

/* A tensor of dtype with values v (doubles), optionally requiring grad. */
static inline tg_tensor *o1_tensor(tg_ctx *ctx, tg_dtype dt, int ndim, const int64_t *shape, const double *v,
                                   bool grad) {
    tg_tensor *t = tg_zeros(ctx, dt, ndim, shape);
    ck_assert_ptr_nonnull(t);
    for (int64_t i = 0; i < t->numel; i++) tg_set_flat(ctx, t, i, v[i]);
    return grad ? tg_requires_grad(ctx, t) : t;
}

/* A float64 tensor of the shape with values from a fixed smooth pattern
 * (distinct, in about [-2, 2], none within 0.05 of 0), requiring grad. */
static inline tg_tensor *o1_leaf(tg_ctx *ctx, int ndim, const int64_t *shape, int salt) {
    tg_tensor *t = tg_zeros(ctx, TG_F64, ndim, shape);
    ck_assert_ptr_nonnull(t);
    for (int64_t i = 0; i < t->numel; i++) {
        double v = 1.9 * o1_weight(i * 7 + salt * 1000003);
        if (fabs(v) < 0.05) v = v < 0 ? v - 0.05 : v + 0.05;
        ((double *)t->data)[i] = v;
    }
    return tg_requires_grad(ctx, t);
}

/* The fixture array `name`: a malloc'ed array (free it) of *n doubles. */
static inline double *o1_fx(const char *name, int64_t *n) {
    char path[1024];
    snprintf(path, sizeof path, "%s/fixtures/ops_values.txt", TG_TEST_DIR);
    FILE *fp = fopen(path, "r");
    ck_assert_msg(fp != NULL, "cannot open fixture %s", path);
    char word[128];
    double *v = NULL;
    while (fscanf(fp, "%127s", word) == 1) {
        if (word[0] == '#') {
            int c;
            while ((c = fgetc(fp)) != EOF && c != '\n') {}
            continue;
        }
        long long count;
        ck_assert_msg(fscanf(fp, "%lld", &count) == 1 && count >= 0, "fixture: bad count for %s", word);
        bool want = strcmp(word, name) == 0;
        if (want) v = malloc(sizeof *v * (size_t)(count > 0 ? count : 1));
        for (long long i = 0; i < count; i++) {
            char num[64];
            ck_assert_msg(fscanf(fp, "%63s", num) == 1, "fixture: %s is short", word);
            if (want) v[i] = strtod(num, NULL);
        }
        if (want) {
            *n = count;
            break;
        }
    }
    fclose(fp);
    ck_assert_msg(v != NULL, "fixture has no array %s", name);
    return v;
}

/* Asserts t (read as doubles) equals ref[0..n) within tol relative to
 * max(1, |ref|); NaN matches NaN, an infinity matches the same infinity. */
static inline void o1_assert_close(tg_ctx *ctx, const tg_tensor *t, const double *ref, int64_t n, double tol,
                                   const char *what) {
    ck_assert_msg(t != NULL, "%s: NULL tensor (%s)", what, tg_error_message(ctx));
    ck_assert_msg(t->numel == n, "%s: %lld elements, expected %lld", what, (long long)t->numel, (long long)n);
    for (int64_t i = 0; i < n; i++) {
        double v = tg_get_flat(ctx, t, i);
        if (isnan(ref[i]) || isinf(ref[i])) {
            ck_assert_msg(isnan(ref[i]) ? isnan(v) : v == ref[i], "%s[%lld] = %.17g, expected %g", what,
                          (long long)i, v, ref[i]);
            continue;
        }
        double scale = fabs(ref[i]) > 1 ? fabs(ref[i]) : 1;
        ck_assert_msg(fabs(v - ref[i]) <= tol * scale, "%s[%lld] = %.17g, expected %.17g", what, (long long)i, v,
                      ref[i]);
    }
}

/* Asserts an error of `status` whose message names each string (testutil.h). */
#define o1_assert_error tg_test_assert_error

#endif

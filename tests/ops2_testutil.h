/* Helpers for the op tests of matmul, shapes, embedding, softmax, losses and
 * dropout (tests/test_ops_*.c):
 *  - fd_check: the op's backward against central finite differences, in
 *    float64, on a fixed pseudo-random weighting r of the outputs:
 *      analytic  d(sum r*f)/dx_j   from tg_backward_ex(f, r)
 *      numeric   (sum r*f(x + h e_j) - sum r*f(x - h e_j)) / 2h
 *    passing when |analytic - numeric| <= atol + rtol |numeric|. It is a
 *    small local stand-in for the shared tg_gradcheck.
 *  - fx_get: reads one named array from a text fixture written by a script
 *    in tests/fixtures/ (lines "name count v1 v2 ...", '#' comments).
 * Header-only (static functions), included by each test file. */
#ifndef TG_TESTS_OPS2_TESTUTIL_H
#define TG_TESTS_OPS2_TESTUTIL_H

#include <check.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tapegrad.h"
#include "testutil.h"

/* The function under test: builds its output from the inputs in[]. */
typedef tg_tensor *(*fd_fn)(tg_ctx *ctx, tg_tensor **in, void *user);

/* Weighting r_i in [-1, 1), fixed by i (so every call sees the same r). */
static inline double fd_weight(int64_t i) {
    uint64_t z = (uint64_t)i * 0x9E3779B97F4A7C15ull + 0x1234567ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1.0p-52 - 1.0;
}

static inline double fd_weighted_sum(tg_ctx *ctx, const tg_tensor *y) {
    double s = 0;
    for (int64_t i = 0; i < y->numel; i++) s += fd_weight(i) * tg_get_flat(ctx, y, i);
    return s;
}

/* Checks every float64 input in[k] with requires_grad set. The RNG state is
 * restored before every evaluation, so ops that draw (dropout) see the same
 * numbers each time. Returns the worst |analytic - numeric| and fails the
 * test (naming input, element and both values) when out of tolerance. */
static inline double fd_check(tg_ctx *ctx, fd_fn f, int n_in, tg_tensor **in, void *user, double h,
                              double atol, double rtol) {
    uint64_t seed, offset;
    tg_rng_state(ctx, &seed, &offset);
    for (int k = 0; k < n_in; k++)
        if (in[k]->requires_grad) tg_zero_grad(ctx, in[k]);
    tg_tensor *y = f(ctx, in, user);
    ck_assert_msg(y != NULL && tg_ok(ctx), "forward failed: %s", tg_error_message(ctx));
    tg_tensor *r = tg_zeros(ctx, TG_F64, y->ndim, y->shape);
    for (int64_t i = 0; i < y->numel; i++) tg_set_flat(ctx, r, i, fd_weight(i));
    tg_backward_ex(ctx, y, r, false);
    ck_assert_msg(tg_ok(ctx), "backward failed: %s", tg_error_message(ctx));

    bool was = tg_set_grad_enabled(ctx, false);
    double worst = 0;
    for (int k = 0; k < n_in; k++) {
        tg_tensor *x = in[k];
        if (!x->requires_grad) continue;
        ck_assert_int_eq(x->dtype, TG_F64);
        ck_assert_ptr_nonnull(x->grad);
        for (int64_t j = 0; j < x->numel; j++) {
            double v = tg_get_flat(ctx, x, j);
            tg_set_flat(ctx, x, j, v + h);
            tg_rng_set_state(ctx, seed, offset);
            double lp = fd_weighted_sum(ctx, f(ctx, in, user));
            tg_set_flat(ctx, x, j, v - h);
            tg_rng_set_state(ctx, seed, offset);
            double lm = fd_weighted_sum(ctx, f(ctx, in, user));
            tg_set_flat(ctx, x, j, v);
            double num = (lp - lm) / (2 * h);
            double ana = tg_get_flat(ctx, x->grad, j);
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

/* Default tolerances for float64 checks. */
#define FD_H 1e-6
#define FD_ATOL 1e-7
#define FD_RTOL 1e-6

/* A float64 leaf with the given values, requiring grad. */
static inline tg_tensor *fd_leaf(tg_ctx *ctx, int ndim, const int64_t *shape, const double *v) {
    tg_tensor *t = tg_from_buffer(ctx, TG_F64, ndim, shape, v);
    return tg_requires_grad(ctx, t);
}

/* The array `name` of the fixture file TG_TEST_DIR/fixtures/<file>: a
 * malloc'ed array (free it) of *n doubles. Fails the test when missing. */
static inline double *fx_get(const char *file, const char *name, int64_t *n) {
    char path[1024];
    snprintf(path, sizeof path, "%s/fixtures/%s", TG_TEST_DIR, file);
    FILE *fp = fopen(path, "r");
    ck_assert_msg(fp != NULL, "cannot open fixture %s", path);
    char word[128];
    double *v = NULL;
    while (fscanf(fp, "%127s", word) == 1) {
        if (word[0] == '#') { /* comment: skip the rest of the line */
            int c;
            while ((c = fgetc(fp)) != EOF && c != '\n') {}
            continue;
        }
        long long count;
        ck_assert_msg(fscanf(fp, "%lld", &count) == 1 && count >= 0, "fixture %s: bad count for %s", path, word);
        bool want = strcmp(word, name) == 0;
        if (want) v = malloc(sizeof *v * (size_t)(count > 0 ? count : 1));
        for (long long i = 0; i < count; i++) {
            char num[64];
            ck_assert_msg(fscanf(fp, "%63s", num) == 1, "fixture %s: %s is short", path, word);
            if (want) v[i] = strtod(num, NULL); /* strtod reads nan, inf, -inf */
        }
        if (want) {
            *n = count;
            break;
        }
    }
    fclose(fp);
    ck_assert_msg(v != NULL, "fixture %s has no array %s", path, name);
    return v;
}

/* Asserts the f64 view of t equals ref (n values) within tol (relative to
 * max(1, |ref|)); NaN matches NaN. */
static inline void assert_close(tg_ctx *ctx, const tg_tensor *t, const double *ref, int64_t n, double tol,
                                const char *what) {
    ck_assert_msg(t != NULL, "%s: NULL tensor (%s)", what, tg_error_message(ctx));
    ck_assert_msg(t->numel == n, "%s: %lld elements, expected %lld", what, (long long)t->numel, (long long)n);
    for (int64_t i = 0; i < n; i++) {
        double v = tg_get_flat(ctx, t, i);
        if (isnan(ref[i])) {
            ck_assert_msg(isnan(v), "%s[%lld] = %.12g, expected nan", what, (long long)i, v);
            continue;
        }
        double scale = fabs(ref[i]) > 1 ? fabs(ref[i]) : 1;
        ck_assert_msg(fabs(v - ref[i]) <= tol * scale, "%s[%lld] = %.12g, expected %.12g", what, (long long)i, v,
                      ref[i]);
    }
}

/* Asserts an error of `status` whose message names each string (testutil.h). */
#define assert_error tg_test_assert_error

#endif

/* tg_softmax, tg_log_softmax and tg_cross_entropy: values and gradients
 * against PyTorch (tests/fixtures/softmax_ce.txt, made by softmax_ce.py),
 * backward against central finite differences in float64, logits of +-1e4
 * in float32, ignore_index and label smoothing, thread-count independence,
 * and every error path. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define FX "softmax_ce.txt"

static tg_ctx *ctx;

static void setup(void) { ctx = tg_ctx_new(5); }
static void teardown(void) { tg_ctx_free(ctx); }

/* The fixture array `name` as a tensor of dtype dt and this shape. */
static tg_tensor *fx_tensor(const char *name, tg_dtype dt, int ndim, const int64_t *shape) {
    return tg_test_fixture_tensor(ctx, FX, name, dt, ndim, shape);
}

static void assert_fx(const tg_tensor *t, const char *name, double tol) {
    tg_test_assert_fixture(ctx, t, FX, name, tol);
}

/* int64 targets from the fixture; *n gets the count */
static int64_t *fx_targets(const char *name, int64_t *n) {
    double *v = tg_test_fixture(FX, name, n);
    int64_t *t = tg_test_malloc(sizeof *t * (size_t)*n);
    for (int64_t i = 0; i < *n; i++) t[i] = (int64_t)v[i];
    free(v);
    return t;
}

/* ---- softmax / log_softmax vs PyTorch ------------------------------------- */

static void softmax_fixture(const char *pre, int ndim, const int64_t *shape, tg_dtype dt, double tol) {
    char name[64];
    for (int lg = 0; lg < 2; lg++) {
        snprintf(name, sizeof name, "%s_x", pre);
        tg_tensor *x = tg_requires_grad(ctx, fx_tensor(name, dt, ndim, shape));
        snprintf(name, sizeof name, "%s_dy", pre);
        tg_tensor *dy = fx_tensor(name, dt, ndim, shape);
        tg_tensor *y = lg ? tg_log_softmax(ctx, x) : tg_softmax(ctx, x);
        ck_assert_msg(y != NULL, "%s", tg_error_message(ctx));
        ck_assert_int_eq(y->dtype, dt);
        ck_assert(tg_same_shape(x, y));
        snprintf(name, sizeof name, "%s_%s", pre, lg ? "log_softmax" : "softmax");
        assert_fx(y, name, tol);
        tg_backward_ex(ctx, y, dy, false);
        ck_assert(tg_ok(ctx));
        snprintf(name, sizeof name, "%s_%s_dx", pre, lg ? "log_softmax" : "softmax");
        assert_fx(x->grad, name, tol);
    }
}

START_TEST(test_softmax_vs_torch) {
    softmax_fixture("sm2", TG_SHAPE(3, 5), TG_F64, 1e-13);
    softmax_fixture("sm3", TG_SHAPE(2, 3, 4), TG_F64, 1e-13);
    softmax_fixture("sm2", TG_SHAPE(3, 5), TG_F32, 2e-6);
    softmax_fixture("sm3", TG_SHAPE(2, 3, 4), TG_F32, 2e-6);
}
END_TEST

START_TEST(test_softmax_by_hand) {
    /* softmax(0, ln 3) = (1/4, 3/4); rows sum to 1; a 0-d x gives 1 */
    tg_tensor *x = tg_from_buffer(ctx, TG_F64, TG_SHAPE(1, 2), (double[]){0, log(3.0)});
    tg_test_assert_close(ctx, "softmax", tg_softmax(ctx, x), (double[]){0.25, 0.75}, 2, 1e-15, 1e-15);
    tg_test_assert_close(ctx, "log_softmax", tg_log_softmax(ctx, x), (double[]){log(0.25), log(0.75)}, 2, 1e-15, 1e-15);
    tg_tensor *s = tg_softmax(ctx, tg_full(ctx, TG_F32, 0, NULL, -3));
    ck_assert_int_eq(s->ndim, 0);
    ck_assert_double_eq(tg_get(ctx, s, NULL), 1.0);
    /* a -inf logit: probability 0, log-probability -inf (as PyTorch) */
    tg_tensor *xi = tg_from_buffer(ctx, TG_F32, TG_SHAPE(3), (float[]){0, -INFINITY, 0});
    tg_test_assert_close(ctx, "softmax -inf", tg_softmax(ctx, xi), (double[]){0.5, 0, 0.5}, 3, 1e-7, 1e-7);
    tg_tensor *li = tg_log_softmax(ctx, xi);
    ck_assert(isinf(tg_get_flat(ctx, li, 1)) && tg_get_flat(ctx, li, 1) < 0);
    ck_assert_double_eq_tol(tg_get_flat(ctx, li, 0), log(0.5), 1e-7);
    /* empty last axis */
    tg_tensor *e = tg_softmax(ctx, tg_zeros(ctx, TG_F64, TG_SHAPE(3, 0)));
    ck_assert_ptr_nonnull(e);
    ck_assert_int_eq(e->numel, 0);
}
END_TEST

/* ---- +-1e4 in float32 ------------------------------------------------------ */

START_TEST(test_large_logits_f32) {
    tg_tensor *x = tg_requires_grad(ctx, fx_tensor("big_x", TG_F32, TG_SHAPE(3, 4)));
    tg_tensor *s = tg_softmax(ctx, x);
    tg_tensor *l = tg_log_softmax(ctx, x);
    for (int64_t i = 0; i < 12; i++) {
        ck_assert(isfinite(tg_get_flat(ctx, s, i)));
        ck_assert(isfinite(tg_get_flat(ctx, l, i)));
    }
    assert_fx(s, "big_softmax", 1e-6);
    assert_fx(l, "big_log_softmax", 1e-6);
    int64_t n;
    int64_t *t = fx_targets("big_t", &n);
    tg_cross_entropy_opts o = {.ignore_index = -100, .label_smoothing = 0.1};
    tg_tensor *loss = tg_cross_entropy(ctx, x, t, &o);
    ck_assert(isfinite(tg_get_flat(ctx, loss, 0)));
    assert_fx(loss, "big_ce", 1e-6);
    tg_backward(ctx, loss);
    ck_assert(tg_ok(ctx));
    assert_fx(x->grad, "big_ce_dx", 1e-6);
    /* without smoothing the loss is exact: row 0 picks -1e4 against 1e4 */
    tg_tensor *plain = tg_cross_entropy(ctx, x, t, NULL);
    ck_assert(isfinite(tg_get_flat(ctx, plain, 0)));
    free(t);
}
END_TEST

/* ---- cross-entropy vs PyTorch ------------------------------------------------ */

static void ce_case(const char *cname, tg_dtype dt, double tol) {
    char name[64];
    tg_tensor *x = tg_requires_grad(ctx, fx_tensor("ce_x", dt, TG_SHAPE(6, 5)));
    int64_t n;
    snprintf(name, sizeof name, "ce_%s_t", cname);
    int64_t *t = fx_targets(name, &n);
    ck_assert_int_eq(n, 6);
    snprintf(name, sizeof name, "ce_%s_opts", cname);
    double *ov = tg_test_fixture(FX, name, &n);
    tg_cross_entropy_opts o = {.ignore_index = (int64_t)ov[0], .label_smoothing = ov[1]};
    free(ov);
    tg_tensor *loss = tg_cross_entropy(ctx, x, t, &o);
    ck_assert_msg(loss != NULL, "%s: %s", cname, tg_error_message(ctx));
    ck_assert_int_eq(loss->ndim, 0);
    ck_assert_int_eq(loss->dtype, dt);
    ck_assert_int_eq(tg_tape_size(ctx), 1); /* fused: one record */
    snprintf(name, sizeof name, "ce_%s_loss", cname);
    assert_fx(loss, name, tol);
    tg_backward(ctx, loss);
    ck_assert(tg_ok(ctx));
    snprintf(name, sizeof name, "ce_%s_dx", cname);
    assert_fx(x->grad, name, tol);
    free(t);
}

START_TEST(test_ce_vs_torch) {
    const char *cases[] = {"plain", "ign", "smooth", "smooth_ign", "custom_ign", "smooth_one", "all_ign"};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        ce_case(cases[i], TG_F64, 1e-13);
        ce_case(cases[i], TG_F32, 2e-6);
    }
}
END_TEST

START_TEST(test_ce_defaults_and_scaling) {
    /* NULL opts = ignore_index -100, no smoothing = the "ign" case */
    tg_tensor *x = tg_requires_grad(ctx, fx_tensor("ce_x", TG_F64, TG_SHAPE(6, 5)));
    int64_t n;
    int64_t *t = fx_targets("ce_ign_t", &n);
    tg_tensor *loss = tg_cross_entropy(ctx, x, t, NULL);
    assert_fx(loss, "ce_ign_loss", 1e-13);
    /* an upstream gradient of 2.5 scales dx */
    tg_backward_ex(ctx, loss, tg_full(ctx, TG_F64, 0, NULL, 2.5), false);
    double *ref = tg_test_fixture(FX, "ce_ign_dx", &n);
    for (int64_t i = 0; i < n; i++) ref[i] *= 2.5;
    tg_test_assert_close(ctx, "2.5 dx", x->grad, ref, n, 1e-13, 1e-13);
    /* ignored rows (1 and 4) get exactly 0 */
    for (int64_t c = 0; c < 5; c++) {
        ck_assert_double_eq(tg_get_flat(ctx, x->grad, 1 * 5 + c), 0.0);
        ck_assert_double_eq(tg_get_flat(ctx, x->grad, 4 * 5 + c), 0.0);
    }
    /* saved: lse and targets per row, plus the logits read by backward */
    ck_assert_uint_eq(tg_tape_saved_bytes(ctx), 6 * 16 + 30 * 8);
    free(ref);
    free(t);
}
END_TEST

START_TEST(test_ce_by_hand) {
    /* two classes, logits (0, ln 3): p = (1/4, 3/4). target 1: -ln(3/4).
     * smoothing 0.5: q = (1/4, 3/4), loss = -(1/4 ln 1/4 + 3/4 ln 3/4) */
    tg_tensor *x = tg_from_buffer(ctx, TG_F64, TG_SHAPE(1, 2), (double[]){0, log(3.0)});
    tg_tensor *l = tg_cross_entropy(ctx, x, (int64_t[]){1}, NULL);
    ck_assert_double_eq_tol(tg_get_flat(ctx, l, 0), -log(0.75), 1e-15);
    tg_cross_entropy_opts o = TG_CROSS_ENTROPY_DEFAULTS;
    ck_assert_int_eq(o.ignore_index, -100);
    o.label_smoothing = 0.5;
    l = tg_cross_entropy(ctx, x, (int64_t[]){1}, &o);
    ck_assert_double_eq_tol(tg_get_flat(ctx, l, 0), -(0.25 * log(0.25) + 0.75 * log(0.75)), 1e-15);
}
END_TEST

/* ---- finite differences ----------------------------------------------------------- */

static tg_tensor *f_softmax(tg_ctx *c, tg_tensor *const *in, void *u) {
    (void)u;
    return tg_softmax(c, in[0]);
}
static tg_tensor *f_log_softmax(tg_ctx *c, tg_tensor *const *in, void *u) {
    (void)u;
    return tg_log_softmax(c, in[0]);
}

typedef struct ce_args {
    const int64_t *t;
    tg_cross_entropy_opts o;
} ce_args;

static tg_tensor *f_ce(tg_ctx *c, tg_tensor *const *in, void *u) {
    const ce_args *a = u;
    return tg_cross_entropy(c, in[0], a->t, &a->o);
}

START_TEST(test_fd_softmax) {
    tg_tensor *in[1] = {tg_requires_grad(ctx, tg_randn(ctx, TG_F64, TG_SHAPE(3, 4), 0, 2))};
    tg_test_op_gradcheck(ctx, "softmax", f_softmax, NULL, 1, in);
    tg_test_op_gradcheck(ctx, "log_softmax", f_log_softmax, NULL, 1, in);
    tg_tensor *in3[1] = {tg_requires_grad(ctx, tg_randn(ctx, TG_F64, TG_SHAPE(2, 2, 5), 0, 2))};
    tg_test_op_gradcheck(ctx, "softmax", f_softmax, NULL, 1, in3);
    tg_test_op_gradcheck(ctx, "log_softmax", f_log_softmax, NULL, 1, in3);
    tg_tensor *in1[1] = {tg_requires_grad(ctx, tg_randn(ctx, TG_F64, TG_SHAPE(4, 1), 0, 2))};
    tg_test_op_gradcheck(ctx, "softmax", f_softmax, NULL, 1, in1);
}
END_TEST

START_TEST(test_fd_cross_entropy) {
    tg_tensor *in[1] = {tg_requires_grad(ctx, tg_randn(ctx, TG_F64, TG_SHAPE(5, 4), 0, 2))};
    const int64_t t[5] = {3, -100, 0, 3, 1};
    ce_args a = {t, {-100, 0.0}};
    tg_test_op_gradcheck(ctx, "cross_entropy", f_ce, &a, 1, in);
    a.o.label_smoothing = 0.2;
    tg_test_op_gradcheck(ctx, "cross_entropy", f_ce, &a, 1, in);
    const int64_t t3[5] = {3, 1, 0, 3, 2};
    a.t = t3;
    a.o.ignore_index = 3; /* ignore an in-range class */
    tg_test_op_gradcheck(ctx, "cross_entropy, ignore_index 3", f_ce, &a, 1, in);
    tg_test_backward(ctx, f_ce, &a, 1, in);
    ck_assert_double_eq(tg_get_flat(ctx, in[0]->grad, 0), 0.0); /* row 0 has target 3: ignored */
    const int64_t t1[1] = {2};
    tg_tensor *in1[1] = {tg_requires_grad(ctx, tg_randn(ctx, TG_F64, TG_SHAPE(1, 3), 0, 2))};
    ce_args b = {t1, {-100, 0.7}};
    tg_test_op_gradcheck(ctx, "cross_entropy", f_ce, &b, 1, in1);
}
END_TEST

/* ---- threads -------------------------------------------------------------------- */

START_TEST(test_threads_bitwise) {
    enum { N = 300, C = 200 };
    tg_tensor *x = tg_requires_grad(ctx, tg_randn(ctx, TG_F32, TG_SHAPE(N, C), 0, 3));
    tg_tensor *dy = tg_randn(ctx, TG_F32, TG_SHAPE(N, C), 0, 1);
    int64_t *t = malloc(N * sizeof *t);
    for (int i = 0; i < N; i++) t[i] = i % 7 == 0 ? -100 : (i * 31) % C;
    tg_cross_entropy_opts o = {-100, 0.1};
    tg_tensor *res[2][5];
    for (int r = 0; r < 2; r++) {
        tg_set_threads(ctx, r + 1);
        tg_zero_grad(ctx, x);
        tg_tensor *s = tg_softmax(ctx, x);
        tg_backward_ex(ctx, s, dy, false);
        res[r][0] = tg_copy(ctx, s);
        res[r][1] = tg_copy(ctx, x->grad);
        tg_zero_grad(ctx, x);
        tg_tensor *l = tg_log_softmax(ctx, x);
        tg_backward_ex(ctx, l, dy, false);
        res[r][2] = tg_copy(ctx, l);
        res[r][3] = tg_copy(ctx, x->grad);
        tg_zero_grad(ctx, x);
        tg_tensor *ce = tg_cross_entropy(ctx, x, t, &o);
        tg_backward(ctx, ce);
        res[r][4] = tg_concat(ctx, 2,
                              (tg_tensor *[]){tg_reshape(ctx, tg_copy(ctx, ce), TG_SHAPE(1)),
                                              tg_reshape(ctx, tg_copy(ctx, x->grad), TG_SHAPE(-1))},
                              0);
    }
    ck_assert_msg(tg_ok(ctx), "%s", tg_error_message(ctx));
    static const char *const what[5] = {"softmax", "softmax dx", "log_softmax", "log_softmax dx", "cross_entropy"};
    for (int k = 0; k < 5; k++) tg_test_assert_same_bits(what[k], res[0][k], res[1][k]);
    free(t);
}
END_TEST

/* ---- errors ---------------------------------------------------------------------- */

START_TEST(test_ce_errors) {
    tg_tensor *x = tg_zeros(ctx, TG_F32, TG_SHAPE(3, 4));
    tg_test_assert_fails(ctx, tg_cross_entropy(ctx, x, (int64_t[]){0, 4, 1}, NULL), TG_ERR_INDEX, "tg_cross_entropy",
                         "targets[1] = 4", "0..3", "(3, 4)", NULL);
    tg_test_assert_fails(ctx, tg_cross_entropy(ctx, x, (int64_t[]){0, 1, -1}, NULL), TG_ERR_INDEX, "tg_cross_entropy",
                         "targets[2] = -1", NULL);
    /* -100 is fine by default, but not when another ignore_index is set */
    tg_cross_entropy_opts o = {.ignore_index = 1, .label_smoothing = 0};
    tg_test_assert_fails(ctx, tg_cross_entropy(ctx, x, (int64_t[]){-100, 1, 2}, &o), TG_ERR_INDEX, "tg_cross_entropy",
                         "targets[0] = -100", NULL);
    double bad[] = {-0.1, 1.5, NAN};
    for (int i = 0; i < 3; i++) {
        o = (tg_cross_entropy_opts){-100, bad[i]};
        tg_test_assert_fails(ctx, tg_cross_entropy(ctx, x, (int64_t[]){0, 1, 2}, &o), TG_ERR_VALUE, "tg_cross_entropy",
                             "label_smoothing", NULL);
    }
    tg_test_assert_fails(ctx, tg_cross_entropy(ctx, tg_zeros(ctx, TG_F32, TG_SHAPE(4)), (int64_t[]){0}, NULL),
                         TG_ERR_SHAPE, "tg_cross_entropy", "(4,)", NULL);
    tg_test_assert_fails(ctx, tg_cross_entropy(ctx, tg_zeros(ctx, TG_F32, TG_SHAPE(0, 4)), (int64_t[]){0}, NULL),
                         TG_ERR_SHAPE, "tg_cross_entropy", "empty", "(0, 4)", NULL);
    tg_test_assert_fails(ctx, tg_cross_entropy(ctx, tg_zeros(ctx, TG_F32, TG_SHAPE(2, 0)), (int64_t[]){0, 0}, NULL),
                         TG_ERR_SHAPE, "tg_cross_entropy", "empty", NULL);
    tg_test_assert_fails(ctx, tg_cross_entropy(ctx, x, NULL, NULL), TG_ERR_NULL, "tg_cross_entropy", "targets", NULL);
    tg_test_assert_fails(ctx, tg_cross_entropy(ctx, NULL, (int64_t[]){0}, NULL), TG_ERR_NULL, "tg_cross_entropy",
                         "logits", NULL);
}
END_TEST

START_TEST(test_softmax_errors) {
    tg_test_assert_fails(ctx, tg_softmax(ctx, NULL), TG_ERR_NULL, "tg_softmax", "'x'", NULL);
    tg_test_assert_fails(ctx, tg_log_softmax(ctx, NULL), TG_ERR_NULL, "tg_log_softmax", "'x'", NULL);
    tg_tensor *x = tg_zeros(ctx, TG_F32, TG_SHAPE(2, 2));
    tg_error(ctx, TG_ERR_VALUE, "test", "first");
    ck_assert_ptr_null(tg_softmax(ctx, x));
    ck_assert_ptr_null(tg_cross_entropy(ctx, x, (int64_t[]){0, 0}, NULL));
    ck_assert_str_eq(tg_error_message(ctx), "test: first");
    tg_clear_error(ctx);
    ck_assert_ptr_null(tg_softmax(NULL, x));
}
END_TEST

Suite *make_ops_softmax_suite(void) {
    return tg_test_suite("ops_softmax", setup, teardown, test_softmax_vs_torch, test_softmax_by_hand,
                         test_large_logits_f32, test_ce_vs_torch, test_ce_defaults_and_scaling, test_ce_by_hand,
                         test_fd_softmax, test_fd_cross_entropy, test_threads_bitwise, test_ce_errors,
                         test_softmax_errors, NULL);
}

int main(void) { return tg_test_run(make_ops_softmax_suite()); }

/* tg_gradcheck and tg_gradcheck_jacobian: a correct composite passes, a
 * deliberately wrong backward (test-only ops below, written with the
 * op-writer API of autograd/tape.h) is caught with the right worst element,
 * float32 is refused with a reason, the result's fields are right, the
 * caller's tape, tensors, grad mode and RNG are left alone, and the
 * argument errors. Then: a step that rounds away is an error in every
 * mode, relative steps and tolerances (float32 passes at input scales 1e-3
 * to 1e3), the Jacobian mode, the caller's r and v, the predicted error
 * (round-off within it, a wrong backward far above), the per-element
 * callback and tg_gradcheck_write. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/tape.h"
#include "tapegrad.h"
#include "testutil.h"
#include "tapegrad/check.h"
#include "check/registry.h"

static tg_ctx *ctx;
static void setup(void) { ctx = tg_ctx_new(99); }
static void teardown(void) { tg_ctx_free(ctx); }

/* ---- test-only ops ---------------------------------------------------------- */

/* y_i = x_i^2, backward dx_i += 2 x_i dy_i, except at element n->i[0]
 * (when >= 0) where it uses 3 x_i: a wrong backward in one element. */
static void square_backward(tg_ctx *c, tg_node *n) {
    tg_tensor *dx = tg_grad_of(c, n->in[0]);
    if (!dx) return;
    for (int64_t i = 0; i < dx->numel; i++) {
        double k = i == n->i[0] ? 3.0 : 2.0;
        tg_store(dx, i, tg_load(dx, i) + k * tg_load(n->in[0], i) * tg_load(n->out->grad, i));
    }
}

static const tg_op_def SQUARE = {.name = "square", .backward = square_backward};

static tg_tensor *square_op(tg_ctx *c, tg_tensor *x, int64_t wrong_at) {
    tg_tensor *y = tg_new_like(c, "square", x);
    if (!y) return NULL;
    for (int64_t i = 0; i < x->numel; i++) tg_store(y, i, tg_load(x, i) * tg_load(x, i));
    tg_node *n = tg_record(c, &SQUARE, y, 1, &x);
    if (n) n->i[0] = wrong_at;
    return y;
}

static tg_tensor *f_square(tg_ctx *c, tg_tensor *const *in, void *u) {
    (void)u;
    return square_op(c, in[0], -1);
}

/* wrong at the element *(int64_t *)u */
static tg_tensor *f_square_wrong_at(tg_ctx *c, tg_tensor *const *in, void *u) {
    return square_op(c, in[0], *(const int64_t *)u);
}

/* s = sum_i a_i + sum_i x_i^2, a scalar; the backward is WRONG for x:
 * dx_i += 3 x_i ds (the truth is 2 x_i ds); da_i += ds is right. */
static void sumsq_wrong_backward(tg_ctx *c, tg_node *n) {
    double g = tg_load(n->out->grad, 0);
    tg_tensor *da = tg_grad_of(c, n->in[0]);
    if (da)
        for (int64_t i = 0; i < da->numel; i++) tg_store(da, i, tg_load(da, i) + g);
    tg_tensor *dx = tg_grad_of(c, n->in[1]);
    if (dx)
        for (int64_t i = 0; i < dx->numel; i++) tg_store(dx, i, tg_load(dx, i) + 3.0 * tg_load(n->in[1], i) * g);
}

static const tg_op_def SUMSQ_WRONG = {.name = "sumsq_wrong", .backward = sumsq_wrong_backward};

static tg_tensor *f_sumsq_wrong(tg_ctx *c, tg_tensor *const *in, void *u) {
    (void)u;
    tg_tensor *s = tg_new_tensor(c, "sumsq_wrong", in[0]->dtype, 0, NULL);
    if (!s) return NULL;
    double acc = 0;
    for (int64_t i = 0; i < in[0]->numel; i++) acc += tg_load(in[0], i);
    for (int64_t i = 0; i < in[1]->numel; i++) acc += tg_load(in[1], i) * tg_load(in[1], i);
    tg_store(s, 0, acc);
    tg_record(c, &SUMSQ_WRONG, s, 2, in);
    return s;
}

/* y_i = x_i * u_i with u_i uniform from the context's RNG (drawn at every
 * call, like dropout's mask); dx_i += u_i dy_i, u saved for backward. */
static void noisy_backward(tg_ctx *c, tg_node *n) {
    tg_tensor *dx = tg_grad_of(c, n->in[0]);
    const double *u = n->saved;
    if (dx)
        for (int64_t i = 0; i < dx->numel; i++) tg_store(dx, i, tg_load(dx, i) + u[i] * tg_load(n->out->grad, i));
}

static const tg_op_def NOISY = {.name = "noisy", .backward = noisy_backward};

static tg_tensor *f_noisy(tg_ctx *c, tg_tensor *const *in, void *user) {
    (void)user;
    tg_tensor *x = in[0];
    tg_tensor *y = tg_new_like(c, "noisy", x);
    double *u = tg_arena_alloc(c, (size_t)x->numel * sizeof *u + 8);
    if (!y || !u) return NULL;
    for (int64_t i = 0; i < x->numel; i++) {
        u[i] = tg_rng_uniform(c);
        tg_store(y, i, tg_load(x, i) * u[i]);
    }
    tg_node *n = tg_record(c, &NOISY, y, 1, &x);
    if (n) n->saved = u;
    return y;
}

/* A correct composite of library ops: a tiny layer sigmoid(x w + b). */
static tg_tensor *f_layer(tg_ctx *c, tg_tensor *const *in, void *u) {
    (void)u;
    return tg_sigmoid(c, tg_add(c, tg_matmul(c, in[0], in[1]), in[2]));
}

/* Returns NULL without setting an error. */
static tg_tensor *f_null(tg_ctx *c, tg_tensor *const *in, void *u) {
    (void)c, (void)in, (void)u;
    return NULL;
}

/* Output shape depends on grad mode: a broken function. */
static tg_tensor *f_shape_shifts(tg_ctx *c, tg_tensor *const *in, void *u) {
    (void)u;
    tg_tensor *y = square_op(c, in[0], -1);
    if (!tg_grad_enabled(c)) return tg_view(c, y, 1, (int64_t[]){y->numel});
    return y;
}

/* Does not depend on its input at all. */
static tg_tensor *f_const(tg_ctx *c, tg_tensor *const *in, void *u) {
    (void)in, (void)u;
    return tg_full(c, TG_F64, 1, (int64_t[]){3}, 2.0);
}

/* Fails like a misused op. */
static tg_tensor *f_bad_shapes(tg_ctx *c, tg_tensor *const *in, void *u) {
    (void)u;
    return tg_add(c, in[0], in[1]);
}

/* d sqrt(x)/dx at x = 0 is inf: analytic inf, numeric nan (or huge). */
static tg_tensor *f_sqrt(tg_ctx *c, tg_tensor *const *in, void *u) {
    (void)u;
    return tg_sqrt(c, in[0]);
}

static tg_tensor *vec(tg_dtype dt, int n, const double *v) {
    tg_tensor *t = tg_zeros(ctx, dt, 1, (int64_t[]){n});
    for (int i = 0; i < n; i++) tg_set_flat(ctx, t, i, v[i]);
    return t;
}

/* ---- tests ------------------------------------------------------------------ */

/* The defaults leave h, atol, rtol to the dtype: in float64 a check with
 * them runs at h = 1e-6, atol = 1e-5, rtol = 1e-3. */
START_TEST(test_defaults) {
    tg_gradcheck_opts o = tg_gradcheck_defaults();
    ck_assert(o.h == 0 && o.atol == 0 && o.rtol == 0);
    ck_assert_int_eq(o.mode, TG_GRADCHECK_FULL);
    ck_assert(!o.allow_float32);
    ck_assert_uint_eq(o.inputs, 0);
    ck_assert(!o.forward_diff);
    ck_assert(!o.no_defaults);
    tg_gradcheck_tol t64 = tg_gradcheck_dtype_tol(TG_F64), t32 = tg_gradcheck_dtype_tol(TG_F32);
    ck_assert(t64.h == 1e-6 && t64.atol == 1e-5 && t64.rtol == 1e-3);
    ck_assert(t32.h == 1e-3 && t32.atol == 1e-3 && t32.rtol == 1e-2);
    tg_tensor *x = tg_randn(ctx, TG_F64, TG_SHAPE(4), 0, 1);
    tg_gradcheck_result r;
    ck_assert(tg_gradcheck(ctx, f_square, NULL, 1, &x, &o, &r));
    ck_assert(r.h == 1e-6 && r.atol == 1e-5 && r.rtol == 1e-3);
}
END_TEST

/* float32 RMSNorm with gamma and beta (x 4x16: 96 elements). */
static tg_tensor *f_rmsnorm(tg_ctx *c, tg_tensor *const *in, void *u) {
    (void)u;
    return tg_rmsnorm_fused(c, in[0], in[1], in[2], 1, TG_RMSNORM_EPS);
}

/* The step and tolerances follow the dtype however the options were made:
 * a correct float32 RMSNorm passes with tg_gradcheck_defaults() and with
 * zero-initialized options once float32 is allowed (the first version kept
 * the float64 h = 1e-6 from tg_gradcheck_defaults() and failed most of the
 * 96 elements: 74 here); an h set explicitly is used as given. */
START_TEST(test_float32_defaults_follow_dtype) {
    tg_tensor *in[3] = {tg_randn(ctx, TG_F32, TG_SHAPE(4, 16), 0, 1), tg_rand(ctx, TG_F32, TG_SHAPE(16), 0.5, 1.5),
                        tg_randn(ctx, TG_F32, TG_SHAPE(16), 0, 1)};
    tg_gradcheck_result r;
    for (int m = 0; m < 2; m++) {
        tg_gradcheck_opts o = {0}; /* m = 1: zero-initialized */
        if (m == 0) o = tg_gradcheck_defaults();
        o.allow_float32 = true;
        ck_assert_msg(tg_gradcheck(ctx, f_rmsnorm, NULL, 3, in, &o, &r),
                      "options %d: %lld of %lld failed at h=%g; worst input %d analytic %g numeric %g", m,
                      (long long)r.n_failed, (long long)r.n_checked, r.h, r.worst_input, r.worst_analytic,
                      r.worst_numeric);
        ck_assert_int_eq(r.n_checked, 96);
        ck_assert(r.h == 1e-3 && r.atol == 1e-3 && r.rtol == 1e-2);
    }
    /* the float64 step, asked for explicitly, is taken -- and fails */
    tg_gradcheck_opts o = tg_gradcheck_defaults();
    o.allow_float32 = true;
    o.h = 1e-6;
    ck_assert(!tg_gradcheck(ctx, f_rmsnorm, NULL, 3, in, &o, &r));
    ck_assert(tg_ok(ctx));
    ck_assert(r.h == 1e-6 && r.atol == 1e-3 && r.rtol == 1e-2);
    ck_assert_msg(r.n_failed > 48, "%lld of 96 failed at h = 1e-6", (long long)r.n_failed);
    /* NULL options refuse float32, and the advice leads to the float32 defaults */
    ck_assert(!tg_gradcheck(ctx, f_rmsnorm, NULL, 3, in, NULL, &r));
    ck_assert_int_eq(tg_status_of(ctx), TG_ERR_DTYPE);
    ck_assert_ptr_nonnull(strstr(tg_error_message(ctx), "left 0 then follow float32: 0.001, 0.001, 0.01"));
    tg_clear_error(ctx);
    /* the Jacobian follows the same rule */
    tg_tensor *Ja, *Jn;
    o.h = 0;
    ck_assert(tg_gradcheck_jacobian(ctx, f_rmsnorm, NULL, 3, in, 0, &o, &Ja, &Jn));
    for (int64_t e = 0; e < Ja->numel; e++)
        ck_assert_msg(fabs(tg_get_flat(ctx, Ja, e) - tg_get_flat(ctx, Jn, e)) <=
                          1e-3 + 1e-2 * fabs(tg_get_flat(ctx, Jn, e)),
                      "entry %lld", (long long)e);
}
END_TEST

/* no_defaults: h, atol, rtol used as given, zeros included. */
START_TEST(test_no_defaults) {
    double xv[3] = {0.5, -1.5, 2.0};
    tg_tensor *x = vec(TG_F64, 3, xv);
    tg_gradcheck_result r;
    tg_gradcheck_opts o = tg_gradcheck_defaults();
    o.no_defaults = true;
    o.h = 1e-4;
    o.rtol = 1e-6;
    /* atol 0: a purely relative test; x^2 has no truncation error */
    ck_assert(tg_gradcheck(ctx, f_square, NULL, 1, &x, &o, &r));
    ck_assert(r.h == 1e-4 && r.atol == 0 && r.rtol == 1e-6);
    /* rtol 0 and atol 0: only an exact match passes */
    o.rtol = 0;
    tg_gradcheck(ctx, f_square, NULL, 1, &x, &o, &r);
    ck_assert(tg_ok(ctx));
    ck_assert(r.atol == 0 && r.rtol == 0);
    ck_assert(r.pass == (r.max_abs_err == 0));
    /* the step cannot be 0 */
    o.h = 0;
    ck_assert(!tg_gradcheck(ctx, f_square, NULL, 1, &x, &o, &r));
    ck_assert_int_eq(tg_status_of(ctx), TG_ERR_VALUE);
    ck_assert_ptr_nonnull(strstr(tg_error_message(ctx), "h=0 with no_defaults"));
}
END_TEST

/* A correct composite passes in both modes; the result's fields add up. */
START_TEST(test_correct_composite_passes) {
    tg_tensor *in[3] = {tg_randn(ctx, TG_F64, TG_SHAPE(4, 3), 0, 1), tg_randn(ctx, TG_F64, TG_SHAPE(3, 5), 0, 1),
                        tg_randn(ctx, TG_F64, TG_SHAPE(5), 0, 1)};
    tg_gradcheck_result r;
    ck_assert(tg_gradcheck(ctx, f_layer, NULL, 3, in, NULL, &r));
    ck_assert(tg_ok(ctx));
    ck_assert(r.pass);
    ck_assert_int_eq(r.n_inputs, 3);
    ck_assert_int_eq(r.n_checked, 12 + 15 + 5);
    ck_assert_int_eq(r.n_failed, 0);
    ck_assert_int_eq(r.n_evals, 1 + 2 * (12 + 15 + 5));
    ck_assert(r.h == 1e-6 && r.atol == 1e-5 && r.rtol == 1e-3);
    ck_assert_int_eq(r.mode, TG_GRADCHECK_FULL);
    ck_assert(r.max_abs_err < 1e-8);
    ck_assert(r.max_rel_err < 1e-6);
    ck_assert(r.worst_ratio <= 1.0);
    ck_assert(r.worst_input >= 0 && r.worst_input < 3);
    ck_assert(r.worst_index >= 0 && r.worst_index < in[r.worst_input]->numel);
    ck_assert(fabs(r.worst_analytic - r.worst_numeric) <= r.max_abs_err);
    for (int k = 0; k < 3; k++) {
        ck_assert(r.input[k].checked && r.input[k].pass);
        ck_assert_int_eq(r.input[k].n_checked, in[k]->numel);
        ck_assert(r.input[k].max_abs_err <= r.max_abs_err);
    }
    /* directional: one comparison per input, two forwards each */
    tg_gradcheck_opts o = {0};
    o.mode = TG_GRADCHECK_DIRECTIONAL;
    ck_assert(tg_gradcheck(ctx, f_layer, NULL, 3, in, &o, &r));
    ck_assert_int_eq(r.n_checked, 3);
    ck_assert_int_eq(r.n_evals, 1 + 2 * 3);
    ck_assert_int_eq(r.worst_index, -1);
    ck_assert_int_eq(r.mode, TG_GRADCHECK_DIRECTIONAL);
    /* a subset of the inputs */
    o.mode = TG_GRADCHECK_FULL;
    o.inputs = 1u << 2;
    ck_assert(tg_gradcheck(ctx, f_layer, NULL, 3, in, &o, &r));
    ck_assert(!r.input[0].checked && !r.input[1].checked && r.input[2].checked);
    ck_assert_int_eq(r.n_checked, 5);
    ck_assert_int_eq(r.worst_input, 2);
}
END_TEST

/* A wrong backward at one element: exactly that element fails, and it is
 * the worst, with analytic 3 x r and numeric 2 x r. */
START_TEST(test_wrong_backward_one_element) {
    double xv[8] = {0.3, -1.1, 0.7, 1.4, -0.6, 0.9, -1.3, 0.5};
    tg_tensor *x = vec(TG_F64, 8, xv);
    int64_t wrong_at = 5;
    tg_gradcheck_result r;
    ck_assert(!tg_gradcheck(ctx, f_square_wrong_at, &wrong_at, 1, &x, NULL, &r));
    ck_assert(tg_ok(ctx)); /* a failed check is a result, not an error */
    ck_assert(!r.pass);
    ck_assert_int_eq(r.n_checked, 8);
    ck_assert_int_eq(r.n_failed, 1);
    ck_assert_int_eq(r.worst_input, 0);
    ck_assert_int_eq(r.worst_index, 5);
    ck_assert(!r.input[0].pass);
    ck_assert_int_eq(r.input[0].worst_index, 5);
    /* analytic = 3 x_5 r_5, numeric = 2 x_5 r_5 */
    ck_assert_double_eq_tol(r.worst_analytic / r.worst_numeric, 1.5, 1e-6);
    double r5 = r.worst_numeric / (2 * xv[5]);
    ck_assert(fabs(r5) <= 1.0 && r5 != 0.0); /* r is uniform in [-1, 1) */
    ck_assert_double_eq_tol(r.worst_analytic, 3 * xv[5] * r5, 1e-9);
    ck_assert_double_eq_tol(r.max_abs_err, fabs(xv[5] * r5), 1e-9);
    ck_assert_double_eq_tol(r.max_rel_err, 0.5, 1e-6);
    ck_assert(r.worst_ratio > 1.0);
    /* the same op without the bug passes */
    int64_t none = -1;
    ck_assert(tg_gradcheck(ctx, f_square_wrong_at, &none, 1, &x, NULL, &r));
    /* directional mode catches it too (one direction has weight on x_5) */
    tg_gradcheck_opts o = {0};
    o.mode = TG_GRADCHECK_DIRECTIONAL;
    ck_assert(!tg_gradcheck(ctx, f_square_wrong_at, &wrong_at, 1, &x, &o, &r));
    ck_assert_int_eq(r.n_failed, 1);
    ck_assert_int_eq(r.worst_input, 0);
    ck_assert_int_eq(r.worst_index, -1);
}
END_TEST

/* y = x^2 with backward 3x in a two-input op: the failing input and its
 * largest |x_i| are reported; the correct input passes. */
START_TEST(test_wrong_backward_worst_element) {
    double av[3] = {0.5, -0.25, 1.0};
    double xv[6] = {0.4, -0.8, 1.1, -1.9, 0.6, 1.2}; /* largest |x| at index 3 */
    tg_tensor *in[2] = {vec(TG_F64, 3, av), vec(TG_F64, 6, xv)};
    tg_gradcheck_result r;
    ck_assert(!tg_gradcheck(ctx, f_sumsq_wrong, NULL, 2, in, NULL, &r));
    ck_assert(tg_ok(ctx));
    ck_assert(!r.pass);
    ck_assert(r.input[0].pass);
    ck_assert_int_eq(r.input[0].n_failed, 0);
    ck_assert(!r.input[1].pass);
    ck_assert_int_eq(r.input[1].n_failed, 6);
    ck_assert_int_eq(r.n_failed, 6);
    ck_assert_int_eq(r.worst_input, 1);
    ck_assert_int_eq(r.worst_index, 3);
    /* L = r0 s: numeric 2 x_3 r0, analytic 3 x_3 r0 */
    double r0 = r.worst_numeric / (2 * xv[3]);
    ck_assert(fabs(r0) > 1e-3 && fabs(r0) <= 1.0);
    ck_assert_double_eq_tol(r.worst_analytic, 3 * xv[3] * r0, 1e-9);
    ck_assert_double_eq_tol(r.input[0].worst_numeric, r0, 1e-8); /* ds/da_i = 1 */
}
END_TEST

/* The same seed gives the same r and directions; another seed others. */
START_TEST(test_seed) {
    double xv[4] = {0.3, -1.1, 0.7, 1.4};
    tg_tensor *x = vec(TG_F64, 4, xv);
    int64_t wrong_at = 2;
    tg_gradcheck_result r1, r2, r3;
    tg_gradcheck_opts o = {0};
    o.seed = 5;
    tg_gradcheck(ctx, f_square_wrong_at, &wrong_at, 1, &x, &o, &r1);
    tg_gradcheck(ctx, f_square_wrong_at, &wrong_at, 1, &x, &o, &r2);
    o.seed = 6;
    tg_gradcheck(ctx, f_square_wrong_at, &wrong_at, 1, &x, &o, &r3);
    ck_assert(r1.worst_analytic == r2.worst_analytic && r1.worst_numeric == r2.worst_numeric);
    ck_assert(r1.worst_analytic != r3.worst_analytic);
}
END_TEST

/* float32 is refused unless allowed, and the error says why. */
START_TEST(test_float32_refused) {
    tg_tensor *x = tg_rand(ctx, TG_F32, TG_SHAPE(5), 0.5, 1.5);
    tg_gradcheck_result r;
    ck_assert(!tg_gradcheck(ctx, f_square, NULL, 1, &x, NULL, &r));
    ck_assert(!r.pass);
    ck_assert_int_eq(tg_status_of(ctx), TG_ERR_DTYPE);
    static const char *const says[] = {"tg_gradcheck", "input 0 is float32", "round-off", "2h", "allow_float32"};
    for (size_t i = 0; i < sizeof says / sizeof says[0]; i++)
        ck_assert_msg(strstr(tg_error_message(ctx), says[i]), "no '%s' in: %s", says[i], tg_error_message(ctx));
    tg_clear_error(ctx);
    /* allowed: float32 defaults, and a correct op passes */
    tg_gradcheck_opts o = {0};
    o.allow_float32 = true;
    ck_assert(tg_gradcheck(ctx, f_square, NULL, 1, &x, &o, &r));
    ck_assert(r.h == 1e-3 && r.atol == 1e-3 && r.rtol == 1e-2);
    ck_assert_int_eq(r.n_checked, 5);
    /* a float32 input that is not checked is fine without the flag */
    tg_tensor *in[2] = {tg_rand(ctx, TG_F64, TG_SHAPE(5), 0, 1), x};
    tg_tensor *(*f)(tg_ctx *, tg_tensor *const *, void *) = f_square;
    tg_gradcheck_opts o2 = {0};
    o2.inputs = 1;
    ck_assert(tg_gradcheck(ctx, f, NULL, 2, in, &o2, &r));
}
END_TEST

/* Dropout-like randomness: every evaluation sees the same draws, so the
 * check passes; afterwards the RNG is where one call leaves it. */
START_TEST(test_random_function) {
    tg_tensor *x = tg_randn(ctx, TG_F64, TG_SHAPE(3, 4), 0, 1);
    uint64_t seed, off0, off1;
    tg_rng_state(ctx, &seed, &off0);
    tg_gradcheck_result r;
    ck_assert(tg_gradcheck(ctx, f_noisy, NULL, 1, &x, NULL, &r));
    ck_assert_int_eq(r.n_checked, 12);
    tg_rng_state(ctx, NULL, &off1);
    ck_assert_uint_eq(off1, off0 + 12);
    tg_gradcheck_opts o = {0};
    o.mode = TG_GRADCHECK_DIRECTIONAL;
    ck_assert(tg_gradcheck(ctx, f_noisy, NULL, 1, &x, &o, &r));
}
END_TEST

/* The caller's tape, tensors, grads and grad mode survive a check. */
START_TEST(test_caller_state_untouched) {
    tg_tensor *p = tg_requires_grad(ctx, tg_arange(ctx, TG_F64, 1, 4, 1)); /* 1 2 3 */
    tg_tensor *y = square_op(ctx, p, -1);
    ck_assert_int_eq(tg_tape_size(ctx), 1);
    size_t saved = tg_tape_saved_bytes(ctx);

    tg_tensor *x = tg_requires_grad(ctx, tg_randn(ctx, TG_F64, TG_SHAPE(6), 0, 1));
    tg_set_flat(ctx, x->grad, 2, 42.0);
    tg_tensor *x0 = tg_copy(ctx, x);
    tg_gradcheck_result r;
    ck_assert(tg_gradcheck(ctx, f_square, NULL, 1, &x, NULL, &r));
    /* inputs: same values, same grad, still a leaf */
    ck_assert_int_eq(memcmp(x->data, x0->data, 6 * sizeof(double)), 0);
    ck_assert(x->requires_grad);
    ck_assert(tg_get_flat(ctx, x->grad, 2) == 42.0);
    ck_assert(tg_get_flat(ctx, x->grad, 0) == 0.0);
    /* the caller's tape is intact: its backward still works */
    ck_assert_int_eq(tg_tape_size(ctx), 1);
    ck_assert_uint_eq(tg_tape_saved_bytes(ctx), saved);
    ck_assert(tg_grad_enabled(ctx));
    tg_backward_ex(ctx, y, tg_ones(ctx, TG_F64, TG_SHAPE(3)), false);
    ck_assert_msg(tg_ok(ctx), "%s", tg_error_message(ctx));
    for (int i = 0; i < 3; i++) ck_assert_double_eq(tg_get_flat(ctx, p->grad, i), 2.0 * (i + 1));
    /* grad mode off before: off after (the check still records its own) */
    tg_set_grad_enabled(ctx, false);
    ck_assert(tg_gradcheck(ctx, f_square, NULL, 1, &x, NULL, &r));
    ck_assert(!tg_grad_enabled(ctx));
}
END_TEST

/* Difference evaluations hand their arena memory back: a check with 2000
 * evaluations of a 1000-element function does not keep them. */
START_TEST(test_memory_reused) {
    tg_tensor *x = tg_randn(ctx, TG_F64, TG_SHAPE(1000), 0, 1);
    size_t before = tg_arena_used(ctx);
    tg_gradcheck_result r;
    ck_assert(tg_gradcheck(ctx, f_square, NULL, 1, &x, NULL, &r));
    ck_assert_int_eq(r.n_evals, 2001);
    size_t grew = tg_arena_used(ctx) - before;
    /* the copy, its grad, one output, r, ~ 4 x 8 KB; 2000 outputs would be 16 MB */
    ck_assert_msg(grew < 200 * 1024, "the arena grew by %zu bytes", grew);
}
END_TEST

/* Non-finite derivatives fail the check, never pass it. */
START_TEST(test_nonfinite_fails) {
    double xv[3] = {1.0, 0.0, 4.0};
    tg_tensor *x = vec(TG_F64, 3, xv);
    tg_gradcheck_result r;
    ck_assert(!tg_gradcheck(ctx, f_sqrt, NULL, 1, &x, NULL, &r));
    ck_assert(tg_ok(ctx));
    ck_assert_int_eq(r.worst_index, 1);
    ck_assert(isinf(r.worst_ratio));
    ck_assert(r.input[0].pass == false);
}
END_TEST

/* An output that does not depend on the input: all derivatives 0, pass. */
START_TEST(test_constant_function) {
    tg_tensor *x = tg_randn(ctx, TG_F64, TG_SHAPE(4), 0, 1);
    tg_gradcheck_result r;
    ck_assert(tg_gradcheck(ctx, f_const, NULL, 1, &x, NULL, &r));
    ck_assert_int_eq(r.n_checked, 4);
    ck_assert(r.max_abs_err == 0.0);
}
END_TEST

/* Full Jacobians: of a matmul against the known J, and of the wrong op. */
START_TEST(test_jacobian) {
    /* y = a b, J[(i,j),(i,k)] = b[k][j] for input a */
    tg_tensor *in[3] = {tg_randn(ctx, TG_F64, TG_SHAPE(2, 3), 0, 1), tg_randn(ctx, TG_F64, TG_SHAPE(3, 4), 0, 1),
                        tg_zeros(ctx, TG_F64, TG_SHAPE(4))};
    tg_tensor *Ja, *Jn;
    ck_assert(tg_gradcheck_jacobian(ctx, f_layer, NULL, 3, in, 2, NULL, &Ja, &Jn));
    ck_assert_int_eq(Ja->ndim, 2);
    ck_assert_int_eq(Ja->shape[0], 8);
    ck_assert_int_eq(Ja->shape[1], 4);
    ck_assert_int_eq(Ja->dtype, TG_F64);
    /* d sigmoid(z_ij + b_j) / d b_l = s'(.) [j == l] */
    for (int64_t row = 0; row < 8; row++)
        for (int64_t l = 0; l < 4; l++) {
            double a = tg_get(ctx, Ja, (int64_t[]){row, l}), n = tg_get(ctx, Jn, (int64_t[]){row, l});
            if (row % 4 != l) ck_assert(a == 0.0 && fabs(n) < 1e-9);
            else ck_assert(a > 0.0 && a <= 0.25 && fabs(a - n) < 1e-8);
        }
    /* input 0 of square: diag(2x), wrong at element 1 in the analytic one */
    double xv[3] = {0.5, -1.5, 2.0};
    tg_tensor *x = vec(TG_F64, 3, xv);
    int64_t wrong_at = 1;
    ck_assert(tg_gradcheck_jacobian(ctx, f_square_wrong_at, &wrong_at, 1, &x, 0, NULL, &Ja, &Jn));
    for (int64_t i = 0; i < 3; i++)
        for (int64_t j = 0; j < 3; j++) {
            double a = tg_get(ctx, Ja, (int64_t[]){i, j}), n = tg_get(ctx, Jn, (int64_t[]){i, j});
            double want = i == j ? 2 * xv[i] : 0.0;
            ck_assert_double_eq_tol(n, want, 1e-8);
            ck_assert_double_eq_tol(a, i == j && i == 1 ? 3 * xv[i] : want, 1e-12);
        }
    /* too big */
    tg_tensor *big = tg_zeros(ctx, TG_F64, TG_SHAPE(3000));
    ck_assert(!tg_gradcheck_jacobian(ctx, f_square, NULL, 1, &big, 0, NULL, &Ja, &Jn));
    ck_assert_int_eq(tg_status_of(ctx), TG_ERR_VALUE);
    ck_assert_ptr_null(Ja);
    ck_assert_ptr_null(Jn);
    tg_clear_error(ctx);
    /* bad input index, float32 */
    ck_assert(!tg_gradcheck_jacobian(ctx, f_square, NULL, 1, &x, 1, NULL, &Ja, &Jn));
    ck_assert_int_eq(tg_status_of(ctx), TG_ERR_INDEX);
    tg_clear_error(ctx);
    tg_tensor *x32 = tg_to_dtype(ctx, x, TG_F32);
    ck_assert(!tg_gradcheck_jacobian(ctx, f_square, NULL, 1, &x32, 0, NULL, &Ja, &Jn));
    ck_assert_int_eq(tg_status_of(ctx), TG_ERR_DTYPE);
    tg_clear_error(ctx);
    ck_assert(!tg_gradcheck_jacobian(ctx, f_square, NULL, 1, &x, 0, NULL, NULL, &Jn));
    ck_assert_int_eq(tg_status_of(ctx), TG_ERR_NULL);
}
END_TEST

/* Forward differences: for L = r x^2 the one-sided quotient is exactly
 * r (2x + h), an O(h) error that central differences do not have. */
START_TEST(test_forward_differences) {
    double xv[1] = {0.75};
    tg_tensor *x = vec(TG_F64, 1, xv);
    tg_gradcheck_result rc, rf;
    tg_gradcheck_opts o = {0};
    o.h = 1e-3;
    o.rtol = 1e-2;
    o.step = TG_GRADCHECK_STEP_ABSOLUTE;
    ck_assert(tg_gradcheck(ctx, f_square, NULL, 1, &x, &o, &rc));
    ck_assert(!rc.forward_diff);
    double r0 = rc.worst_analytic / (2 * xv[0]);
    ck_assert(fabs(r0) > 1e-3);
    ck_assert(rc.max_abs_err < 1e-10);
    o.forward_diff = true;
    ck_assert(tg_gradcheck(ctx, f_square, NULL, 1, &x, &o, &rf));
    ck_assert(rf.forward_diff);
    ck_assert_int_eq(rf.n_evals, 1 + 1 + 1);
    ck_assert_double_eq_tol(rf.worst_numeric, r0 * (2 * xv[0] + 1e-3), 1e-10);
    ck_assert_double_eq_tol(rf.max_abs_err, fabs(r0) * 1e-3, 1e-10);
    /* directional: the same O(h) error along v */
    o.mode = TG_GRADCHECK_DIRECTIONAL;
    ck_assert(tg_gradcheck(ctx, f_square, NULL, 1, &x, &o, &rf));
    ck_assert_int_eq(rf.n_evals, 1 + 1 + 1);
    ck_assert_double_eq_tol(rf.max_abs_err, fabs(r0) * 1e-3, 1e-10); /* |v| = 1 */
    /* Jacobian columns: 2x + h */
    tg_tensor *Ja, *Jn;
    o.mode = TG_GRADCHECK_FULL;
    ck_assert(tg_gradcheck_jacobian(ctx, f_square, NULL, 1, &x, 0, &o, &Ja, &Jn));
    ck_assert_double_eq_tol(tg_get_flat(ctx, Jn, 0), 2 * xv[0] + 1e-3, 1e-10);
    ck_assert_double_eq_tol(tg_get_flat(ctx, Ja, 0), 2 * xv[0], 1e-15);
}
END_TEST

/* Argument errors: each names tg_gradcheck and what was wrong. */
START_TEST(test_errors) {
    tg_tensor *x = tg_randn(ctx, TG_F64, TG_SHAPE(3), 0, 1);
    tg_tensor *x2 = tg_randn(ctx, TG_F64, TG_SHAPE(2, 3), 0, 1);
    tg_tensor *in2[2] = {x, NULL};
    tg_gradcheck_result r;
    tg_gradcheck_opts o = {0};
    struct {
        tg_gradcheck_fn f;
        int n;
        tg_tensor *const *in;
        double h;
        uint32_t mask;
        tg_status want;
        const char *says;
    } cases[] = {
        {NULL, 1, &x, 0, 0, TG_ERR_NULL, "'f'"},
        {f_square, 0, &x, 0, 0, TG_ERR_VALUE, "n_inputs 0"},
        {f_square, 9, &x, 0, 0, TG_ERR_VALUE, "n_inputs 9"},
        {f_square, 1, NULL, 0, 0, TG_ERR_NULL, "'inputs'"},
        {f_square, 2, in2, 0, 0, TG_ERR_NULL, "'inputs[1]'"},
        {f_square, 1, &x, -1e-6, 0, TG_ERR_VALUE, "h=-1e-06"},
        {f_square, 1, &x, NAN, 0, TG_ERR_VALUE, "h=nan"},
        {f_square, 1, &x, 0, 2, TG_ERR_VALUE, "mask 0x2"},
        {f_null, 1, &x, 0, 0, TG_ERR_STATE, "returned NULL"},
        {f_shape_shifts, 1, &x2, 0, 0, TG_ERR_STATE, "changed shape"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        o.h = cases[i].h;
        o.inputs = cases[i].mask;
        ck_assert_msg(!tg_gradcheck(ctx, cases[i].f, NULL, cases[i].n, cases[i].in, &o, &r), "case %zu passed", i);
        ck_assert_msg(tg_status_of(ctx) == cases[i].want, "case %zu: %s", i, tg_error_message(ctx));
        ck_assert_ptr_nonnull(strstr(tg_error_message(ctx), "tg_gradcheck"));
        ck_assert_msg(strstr(tg_error_message(ctx), cases[i].says), "case %zu: %s", i, tg_error_message(ctx));
        ck_assert(!r.pass);
        tg_clear_error(ctx);
    }
    o = (tg_gradcheck_opts){0};
    o.mode = (tg_gradcheck_mode)7;
    ck_assert(!tg_gradcheck(ctx, f_square, NULL, 1, &x, &o, &r));
    ck_assert_int_eq(tg_status_of(ctx), TG_ERR_VALUE);
    tg_clear_error(ctx);
    ck_assert(!tg_gradcheck(ctx, f_square, NULL, 1, &x, NULL, NULL));
    ck_assert_int_eq(tg_status_of(ctx), TG_ERR_NULL);
    tg_clear_error(ctx);
    /* the function's own error comes through, and the tape is restored */
    tg_tensor *pair[2] = {x, tg_randn(ctx, TG_F64, TG_SHAPE(4), 0, 1)};
    ck_assert(!tg_gradcheck(ctx, f_bad_shapes, NULL, 2, pair, NULL, &r));
    ck_assert_int_eq(tg_status_of(ctx), TG_ERR_SHAPE);
    ck_assert_ptr_nonnull(strstr(tg_error_message(ctx), "tg_add"));
    ck_assert(tg_grad_enabled(ctx));
    tg_clear_error(ctx);
    /* NULL ctx, and a context already in error: nothing happens */
    ck_assert(!tg_gradcheck(NULL, f_square, NULL, 1, &x, NULL, &r));
    tg_error(ctx, TG_ERR_VALUE, "test", "earlier");
    ck_assert(!tg_gradcheck(ctx, f_square, NULL, 1, &x, NULL, &r));
    ck_assert_str_eq(tg_error_message(ctx), "test: earlier");
    ck_assert_int_eq(r.n_checked, 0);
}
END_TEST

/* ---- no silent passes, scale-aware steps, modes, results ------------------- */

/* A step that rounds away is an error naming where, in every mode: x +- h
 * with h = 1e-17 is x again in float64 (its spacing near 1 is 2.2e-16), and
 * with h = 1e-9 in float32; directional mode used to compare 0 with 0 and
 * pass, full mode to give NaN. A step that is small but stored passes. */
START_TEST(test_vanished_step) {
    double xv[4] = {1.5, -0.75, 1.25, -1.0};
    tg_tensor *x = vec(TG_F64, 4, xv);
    int64_t wrong_at = 2;
    tg_gradcheck_result r;
    tg_gradcheck_mode modes[3] = {TG_GRADCHECK_FULL, TG_GRADCHECK_DIRECTIONAL, TG_GRADCHECK_JACOBIAN};
    for (int m = 0; m < 3; m++) {
        for (int fwd = 0; fwd < 2; fwd++) {
            tg_gradcheck_opts o = {0};
            o.mode = modes[m];
            o.h = 1e-17;
            o.forward_diff = fwd;
            ck_assert_msg(!tg_gradcheck(ctx, f_square_wrong_at, &wrong_at, 1, &x, &o, &r), "mode %d passed", m);
            ck_assert(!r.pass && r.step_vanished);
            ck_assert_int_eq(r.vanished_input, 0);
            ck_assert_int_eq(r.vanished_index, modes[m] == TG_GRADCHECK_DIRECTIONAL ? -1 : 0);
            tg_test_assert_error(ctx, TG_ERR_VALUE, "tg_gradcheck", "vanished", "input 0", "float64", NULL);
        }
    }
    /* float32: 1e-9 vanishes near 1, 1e-4 does not */
    tg_tensor *x32 = tg_to_dtype(ctx, x, TG_F32);
    tg_gradcheck_opts o = {0};
    o.allow_float32 = true;
    o.step = TG_GRADCHECK_STEP_ABSOLUTE;
    o.h = 1e-9;
    ck_assert(!tg_gradcheck(ctx, f_square, NULL, 1, &x32, &o, &r));
    tg_test_assert_error(ctx, TG_ERR_VALUE, "vanished", "element 0", "float32", NULL);
    o.h = 1e-4;
    o.rtol = 0.05;
    ck_assert(tg_gradcheck(ctx, f_square, NULL, 1, &x32, &o, &r));
    ck_assert(!r.step_vanished);
    /* the Jacobian too */
    tg_tensor *Ja, *Jn;
    tg_gradcheck_opts o64 = {0};
    o64.h = 1e-17;
    ck_assert(!tg_gradcheck_jacobian(ctx, f_square, NULL, 1, &x, 0, &o64, &Ja, &Jn));
    tg_test_assert_error(ctx, TG_ERR_VALUE, "vanished", NULL);
}
END_TEST

/* f = x^2 with its length scale set by hand, l_i = 10 + i. */
static bool scale_ten_plus_i(tg_tensor *const *in, int k, double *ell, void *user) {
    (void)user;
    for (int64_t i = 0; i < in[k]->numel; i++) ell[i] = 10.0 + (double)i;
    return true;
}

/* The steps: absolute, relative to |x_i| with a floor, and to the length
 * scale the scale function gives (else the input's root mean square);
 * both dtypes default to relative steps and atol. */
START_TEST(test_relative_steps) {
    double xv[4] = {0.5, -2.0, 0.01, 1.0};
    tg_tensor *x = vec(TG_F64, 4, xv);
    tg_gradcheck_result r;
    tg_gradcheck_opts o = {0};
    o.h = 1e-4;
    ck_assert(tg_gradcheck(ctx, f_square, NULL, 1, &x, &o, &r));
    ck_assert_int_eq(r.step, TG_GRADCHECK_STEP_SCALED);
    ck_assert_int_eq(r.atol_scale, TG_GRADCHECK_ATOL_GRADIENT);
    ck_assert_double_eq_tol(r.input[0].atol_used, 1e-5 * r.input[0].grad_scale, 1e-18);
    o.step = TG_GRADCHECK_STEP_ABSOLUTE;
    o.atol_scale = TG_GRADCHECK_ATOL_ABSOLUTE;
    ck_assert(tg_gradcheck(ctx, f_square, NULL, 1, &x, &o, &r));
    ck_assert_int_eq(r.step, TG_GRADCHECK_STEP_ABSOLUTE);
    ck_assert_int_eq(r.atol_scale, TG_GRADCHECK_ATOL_ABSOLUTE);
    ck_assert(r.input[0].step_min == 1e-4 && r.input[0].step_max == 1e-4);
    /* element: h max(|x_i|, floor) */
    o.step = TG_GRADCHECK_STEP_ELEMENT;
    o.step_floor = 0.1;
    ck_assert(tg_gradcheck(ctx, f_square, NULL, 1, &x, &o, &r));
    ck_assert_double_eq_tol(r.input[0].step_min, 1e-5, 1e-18); /* |0.01| -> the floor 0.1 */
    ck_assert_double_eq_tol(r.input[0].step_max, 2e-4, 1e-18);
    /* scaled: h l_i, the default l the root mean square of x */
    o.step = TG_GRADCHECK_STEP_SCALED;
    double rms = sqrt((0.25 + 4.0 + 1e-4 + 1.0) / 4);
    ck_assert(tg_gradcheck(ctx, f_square, NULL, 1, &x, &o, &r));
    ck_assert_double_eq_tol(r.input[0].step_min, 1e-4 * rms, 1e-15);
    ck_assert_double_eq_tol(r.input[0].scale, rms, 1e-15);
    o.scale = scale_ten_plus_i;
    ck_assert(tg_gradcheck(ctx, f_square, NULL, 1, &x, &o, &r));
    ck_assert_double_eq_tol(r.input[0].step_min, 1e-3, 1e-15);
    ck_assert_double_eq_tol(r.input[0].step_max, 1.3e-3, 1e-15);
    /* float32 defaults: relative step and atol; the atol used is atol G */
    tg_tensor *x32 = tg_to_dtype(ctx, x, TG_F32);
    tg_gradcheck_opts o32 = {0};
    o32.allow_float32 = true;
    ck_assert(tg_gradcheck(ctx, f_square, NULL, 1, &x32, &o32, &r));
    ck_assert_int_eq(r.step, TG_GRADCHECK_STEP_SCALED);
    ck_assert_int_eq(r.atol_scale, TG_GRADCHECK_ATOL_GRADIENT);
    ck_assert_int_eq(r.dtype, TG_F32);
    ck_assert(r.input[0].grad_scale > 0);
    ck_assert_double_eq_tol(r.input[0].atol_used, 1e-3 * r.input[0].grad_scale, 1e-18);
    /* bad options */
    o.step = (tg_gradcheck_step)9;
    ck_assert(!tg_gradcheck(ctx, f_square, NULL, 1, &x, &o, &r));
    tg_test_assert_error(ctx, TG_ERR_VALUE, "unknown step", NULL);
    o.step = TG_GRADCHECK_STEP_ELEMENT;
    o.step_floor = -1;
    ck_assert(!tg_gradcheck(ctx, f_square, NULL, 1, &x, &o, &r));
    tg_test_assert_error(ctx, TG_ERR_VALUE, "step_floor", NULL);
}
END_TEST

/* A float32 RMSNorm, scaled by s: it passes with the float32 defaults
 * (relative steps and tolerance) at s = 1e-3, 1 and 1e3 for every seed;
 * an absolute step and atol (the first float32 defaults, h 1e-2) fail
 * every seed at 1e-3 and see nothing at 1e3 (a 50% error in dx passes). */
START_TEST(test_float32_scale_invariant) {
    const tg_op_info *op = tg_registry_find("rmsnorm");
    const double scales[3] = {1e-3, 1.0, 1e3};
    for (int si = 0; si < 3; si++) {
        int fails_rel = 0, fails_abs = 0;
        for (uint64_t seed = 0; seed < 20; seed++) {
            tg_op_case c;
            tg_rng_seed(ctx, seed);
            ck_assert(tg_registry_build(ctx, op, "4x8;eps=1e-6", TG_F32, &c));
            for (int64_t i = 0; i < c.inputs[0]->numel; i++)
                tg_set_flat(ctx, c.inputs[0], i, scales[si] * tg_get_flat(ctx, c.inputs[0], i));
            tg_gradcheck_opts o = tg_registry_opts(op, TG_F32, NULL);
            o.allow_float32 = true;
            o.scale = c.scale;
            o.seed = seed;
            tg_gradcheck_result r;
            fails_rel += !tg_gradcheck(ctx, op->forward, &c, c.n_inputs, c.inputs, &o, &r);
            ck_assert_msg(tg_ok(ctx), "%s", tg_error_message(ctx));
            o.step = TG_GRADCHECK_STEP_ABSOLUTE;
            o.atol_scale = TG_GRADCHECK_ATOL_ABSOLUTE;
            fails_abs += !tg_gradcheck(ctx, op->forward, &c, c.n_inputs, c.inputs, &o, &r);
            ck_assert_msg(tg_ok(ctx), "%s", tg_error_message(ctx));
            tg_ctx_reset(ctx);
        }
        ck_assert_msg(fails_rel == 0, "scale %g: %d of 20 seeds fail with relative steps", scales[si], fails_rel);
        if (si == 0) ck_assert_msg(fails_abs == 20, "scale 1e-3: absolute steps failed %d of 20", fails_abs);
    }
}
END_TEST

/* JACOBIAN mode: every entry, one backward per output; the wrong entry of
 * x^2's diagonal is the one that fails. */
START_TEST(test_jacobian_mode) {
    double xv[5] = {0.3, -1.1, 0.7, 1.4, -0.6};
    tg_tensor *x = vec(TG_F64, 5, xv);
    int64_t wrong_at = 3;
    tg_gradcheck_result r;
    tg_gradcheck_opts o = {0};
    o.mode = TG_GRADCHECK_JACOBIAN;
    ck_assert(!tg_gradcheck(ctx, f_square_wrong_at, &wrong_at, 1, &x, &o, &r));
    ck_assert(tg_ok(ctx));
    ck_assert_int_eq(r.n_checked, 25);
    ck_assert_int_eq(r.n_failed, 1);
    ck_assert_int_eq(r.n_backwards, 5);
    /* four more for the failing column: its truncation measured at h / 2 and h / 4 */
    ck_assert_int_eq(r.n_evals, 1 + 2 * 5 + 4);
    ck_assert_int_eq(r.n_wrong, 1);
    ck_assert_int_eq(r.verdict, TG_VERDICT_WRONG);
    ck_assert_int_eq(r.worst_index, 3);
    ck_assert_int_eq(r.worst_output, 3);
    ck_assert_double_eq_tol(r.worst_analytic, 3 * xv[3], 1e-12);
    ck_assert_double_eq_tol(r.worst_numeric, 2 * xv[3], 1e-8);
    wrong_at = -1;
    ck_assert(tg_gradcheck(ctx, f_square_wrong_at, &wrong_at, 1, &x, &o, &r));
    ck_assert_int_eq(r.mode, TG_GRADCHECK_JACOBIAN);
    /* several inputs: one backward per output serves them all */
    tg_tensor *in[3] = {tg_randn(ctx, TG_F64, TG_SHAPE(2, 3), 0, 1), tg_randn(ctx, TG_F64, TG_SHAPE(3, 2), 0, 1),
                        tg_randn(ctx, TG_F64, TG_SHAPE(2), 0, 1)};
    ck_assert(tg_gradcheck(ctx, f_layer, NULL, 3, in, &o, &r));
    ck_assert_int_eq(r.n_backwards, 4);
    ck_assert_int_eq(r.n_checked, 4 * (6 + 6 + 2));
}
END_TEST

/* The caller's r and v: with r = e_j the check is of d y_j / d x, with
 * v = e_i of d L / d x_i; a wrong length is an error. */
START_TEST(test_user_r_v) {
    double xv[4] = {0.5, -1.5, 2.0, 0.25};
    tg_tensor *x = vec(TG_F64, 4, xv);
    double r2[4] = {0, 0, 1, 0}, v1[4] = {0, 1, 0, 0};
    tg_gradcheck_result r;
    tg_gradcheck_opts o = {0};
    o.r = (tg_gradcheck_vec){r2, 4};
    o.mode = TG_GRADCHECK_DIRECTIONAL;
    o.step = TG_GRADCHECK_STEP_ABSOLUTE; /* v as given, not times l */
    o.v[0] = (tg_gradcheck_vec){r2, 4};  /* v = e_2 too: d y_2 / d x_2 */
    ck_assert(tg_gradcheck(ctx, f_square, NULL, 1, &x, &o, &r));
    /* g . (x+ - x-) / 2h: the step as stored, 1e-6 rounded near 2.0 */
    ck_assert_double_eq_tol(r.worst_analytic, 2 * xv[2], 1e-9);
    o.v[0] = (tg_gradcheck_vec){v1, 4}; /* d y_2 / d x_1 = 0 */
    ck_assert(tg_gradcheck(ctx, f_square, NULL, 1, &x, &o, &r));
    ck_assert(r.worst_analytic == 0 && r.worst_numeric == 0);
    double ones[4] = {1, 1, 1, 1};
    o.r = (tg_gradcheck_vec){ones, 4};
    o.v[0] = (tg_gradcheck_vec){v1, 4};
    ck_assert(tg_gradcheck(ctx, f_square, NULL, 1, &x, &o, &r));
    ck_assert_double_eq_tol(r.worst_analytic, 2 * xv[1], 1e-9);
    ck_assert_double_eq_tol(r.worst_numeric, 2 * xv[1], 1e-8);
    /* lengths that do not fit */
    o.r = (tg_gradcheck_vec){ones, 3};
    ck_assert(!tg_gradcheck(ctx, f_square, NULL, 1, &x, &o, &r));
    tg_test_assert_error(ctx, TG_ERR_SHAPE, "opts.r has 3 values", NULL);
    o.r = (tg_gradcheck_vec){NULL, 0};
    o.v[0] = (tg_gradcheck_vec){v1, 5};
    ck_assert(!tg_gradcheck(ctx, f_square, NULL, 1, &x, &o, &r));
    tg_test_assert_error(ctx, TG_ERR_SHAPE, "opts.v[0] has 5 values", NULL);
    double zero[4] = {0};
    o.v[0] = (tg_gradcheck_vec){zero, 4};
    ck_assert(!tg_gradcheck(ctx, f_square, NULL, 1, &x, &o, &r));
    tg_test_assert_error(ctx, TG_ERR_VALUE, "opts.v[0] is zero", NULL);
}
END_TEST

/* The predicted error: a correct RMSNorm that fails in float32 because
 * the step is far too small (h = 1e-6) fails within it; the wrong backward
 * fails far above it, in float32 and float64. */
START_TEST(test_predicted_error) {
    tg_tensor *in[3] = {tg_randn(ctx, TG_F32, TG_SHAPE(4, 16), 0, 1), tg_rand(ctx, TG_F32, TG_SHAPE(16), 0.5, 1.5),
                        tg_randn(ctx, TG_F32, TG_SHAPE(16), 0, 1)};
    tg_gradcheck_result r;
    tg_gradcheck_opts o = {0};
    o.allow_float32 = true;
    o.h = 1e-6;
    ck_assert(!tg_gradcheck(ctx, f_rmsnorm, NULL, 3, in, &o, &r));
    ck_assert(tg_ok(ctx));
    ck_assert(r.n_failed > 0);
    ck_assert_msg(r.fail_excess > 0 && r.fail_excess <= 1, "a round-off failure %g times the prediction",
                  r.fail_excess);
    /* round-off is the check's own error: undecided, not a wrong gradient */
    ck_assert_int_eq(r.n_wrong, 0);
    ck_assert_int_eq(r.verdict, TG_VERDICT_INCONCLUSIVE);
    ck_assert_int_eq(r.reason, TG_REASON_UNRESOLVED);
    /* the same step in float64 is fine, and the prediction holds there too */
    tg_tensor *in64[3] = {tg_to_dtype(ctx, in[0], TG_F64), tg_to_dtype(ctx, in[1], TG_F64),
                          tg_to_dtype(ctx, in[2], TG_F64)};
    ck_assert(tg_gradcheck(ctx, f_rmsnorm, NULL, 3, in64, &o, &r));
    ck_assert(r.fail_excess == 0 && r.max_excess <= 1);
    /* a wrong backward: x^2 with 3x at one element */
    double xv[3] = {0.5, -1.5, 2.0};
    tg_tensor *x = vec(TG_F64, 3, xv);
    int64_t wrong_at = 1;
    ck_assert(!tg_gradcheck(ctx, f_square_wrong_at, &wrong_at, 1, &x, NULL, &r));
    ck_assert_msg(r.fail_excess > 1e6, "the wrong backward is only %g times the prediction", r.fail_excess);
    ck_assert(r.input[0].worst_bound > 0 && r.input[0].worst_bound < 1e-6);
    ck_assert_int_eq(r.verdict, TG_VERDICT_WRONG);
    tg_tensor *x32 = tg_to_dtype(ctx, x, TG_F32);
    tg_gradcheck_opts o32 = {0};
    o32.allow_float32 = true;
    ck_assert(!tg_gradcheck(ctx, f_square_wrong_at, &wrong_at, 1, &x32, &o32, &r));
    ck_assert_msg(r.fail_excess > 100, "float32: the wrong backward is only %g times the prediction", r.fail_excess);
}
END_TEST

/* Every comparison reaches opts.each, with what the result summarizes. */
typedef struct seen {
    int64_t n, failed;
    double max_err;
} seen;
static void count_element(void *user, const tg_gradcheck_element *e) {
    seen *s = user;
    s->n++;
    s->failed += !e->pass;
    s->max_err = fmax(s->max_err, fabs(e->analytic - e->numeric));
    ck_assert(e->step > 0 && e->bound > 0 && e->tol > 0);
    ck_assert(e->pass == (fabs(e->analytic - e->numeric) <= e->tol));
}

START_TEST(test_element_callback) {
    double xv[6] = {0.4, -0.8, 1.1, -1.9, 0.6, 1.2};
    tg_tensor *x = vec(TG_F64, 6, xv);
    int64_t wrong_at = 4;
    for (int m = 0; m < 3; m++) {
        seen s = {0};
        tg_gradcheck_opts o = {0};
        o.mode = (tg_gradcheck_mode)m;
        o.each = count_element;
        o.each_user = &s;
        tg_gradcheck_result r;
        tg_gradcheck(ctx, f_square_wrong_at, &wrong_at, 1, &x, &o, &r);
        ck_assert(tg_ok(ctx));
        ck_assert_int_eq(s.n, r.n_checked);
        ck_assert_int_eq(s.failed, r.n_failed);
        ck_assert(s.max_err == r.max_abs_err);
    }
}
END_TEST

/* The file as text. */
static char *slurp(FILE *f) {
    long n = ftell(f);
    rewind(f);
    char *buf = calloc((size_t)n + 1, 1);
    ck_assert(buf && fread(buf, 1, (size_t)n, f) == (size_t)n);
    return buf;
}

/* tg_gradcheck_write: JSON with every field (NaN as null), CSV with one row
 * per checked input, readable text. */
START_TEST(test_write) {
    tg_tensor *in[3] = {tg_randn(ctx, TG_F64, TG_SHAPE(4, 3), 0, 1), tg_randn(ctx, TG_F64, TG_SHAPE(3, 5), 0, 1),
                        tg_randn(ctx, TG_F64, TG_SHAPE(5), 0, 1)};
    tg_gradcheck_result r;
    tg_gradcheck_opts o = {0};
    o.inputs = 5; /* a and b */
    ck_assert(tg_gradcheck(ctx, f_layer, NULL, 3, in, &o, &r));
    const char *names[3] = {"x", "w", "b"};
    FILE *f = tmpfile();
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(tg_gradcheck_write(f, &r, names, TG_GRADCHECK_JSON, NULL), TG_OK);
    char *json = slurp(f);
    tg_test_assert_contains(json, "{\"pass\":true,\"verdict\":\"pass\",\"reason\":\"none\",\"mode\":\"full\"",
                            "\"step\":\"scaled\"", "\"h\":9.9999999999999995e-07", "\"dtype\":\"float64\"",
                            "\"inputs\":[{\"name\":\"x\",\"checked\":true", "{\"name\":\"w\",\"checked\":false",
                            "\"grad_scale\":", "\"max_excess\":", "\"vanished_input\":null", NULL);
    ck_assert(json[strlen(json) - 1] == '}');
    free(json);
    fclose(f);
    f = tmpfile();
    ck_assert_int_eq(tg_gradcheck_write(f, &r, names, TG_GRADCHECK_CSV, "op,7,"), TG_OK);
    char *csv = slurp(f);
    int rows = 0, commas = 0, header_commas = 0;
    for (const char *p = csv; *p; p++) rows += *p == '\n', commas += *p == ',';
    for (const char *p = TG_GRADCHECK_CSV_COLUMNS; *p; p++) header_commas += *p == ',';
    ck_assert_int_eq(rows, 2);                         /* x and b */
    ck_assert_int_eq(commas, 2 * (header_commas + 2)); /* the prefix's two columns */
    tg_test_assert_contains(csv, "op,7,x,1,12,0,", "op,7,b,1,5,0,", NULL);
    free(csv);
    fclose(f);
    /* NaN: null in JSON, nan in CSV */
    double xv[3] = {1.0, 0.0, 4.0};
    tg_tensor *x = vec(TG_F64, 3, xv);
    ck_assert(!tg_gradcheck(ctx, f_sqrt, NULL, 1, &x, NULL, &r));
    f = tmpfile();
    ck_assert_int_eq(tg_gradcheck_write(f, &r, NULL, TG_GRADCHECK_JSON, NULL), TG_OK);
    json = slurp(f);
    tg_test_assert_contains(json, "\"pass\":false", "\"name\":\"0\"", ":null", NULL);
    ck_assert_ptr_null(strstr(json, "nan"));
    ck_assert_ptr_null(strstr(json, "inf"));
    free(json);
    fclose(f);
    f = tmpfile();
    ck_assert_int_eq(tg_gradcheck_write(f, &r, NULL, TG_GRADCHECK_TEXT, NULL), TG_OK);
    char *text = slurp(f);
    /* sqrt at 0: the numeric side is NaN (sqrt of -h): undecided, never a pass */
    tg_test_assert_contains(text, "INCONCLUSIVE -- unresolved", "0: inconclusive", NULL);
    free(text);
    ck_assert_int_eq(tg_gradcheck_write(f, &r, NULL, (tg_gradcheck_format)5, NULL), TG_ERR_VALUE);
    ck_assert_int_eq(tg_gradcheck_write(NULL, &r, NULL, TG_GRADCHECK_TEXT, NULL), TG_ERR_NULL);
    fclose(f);
    ck_assert_str_eq(tg_gradcheck_mode_name(TG_GRADCHECK_JACOBIAN), "jacobian");
    ck_assert_str_eq(tg_gradcheck_step_name(TG_GRADCHECK_STEP_SCALED), "scaled");
    ck_assert_str_eq(tg_gradcheck_atol_scale_name(TG_GRADCHECK_ATOL_GRADIENT), "gradient");
    ck_assert_str_eq(tg_gradcheck_mode_name((tg_gradcheck_mode)9), "?");
}
END_TEST

/* FAST: one projection over every input at once. A correct composite of
 * three inputs passes with one comparison, one backward and two forwards
 * beside the recorded one (directional: two per input), recorded in the
 * first input's entry with the others folded into it (joint); in float32
 * too. A wrong gradient in one input of two is caught, in the entry of the
 * other (correct) input: fast mode cannot say which. With v given (and
 * absolute steps) the analytic side is r (sum_i v_a,i + 3 sum_i x_i
 * v_x,i) -- both inputs in one dot product -- and the numeric side the
 * true 2 x_i. */
START_TEST(test_fast_mode) {
    tg_tensor *in[3] = {tg_randn(ctx, TG_F64, TG_SHAPE(4, 3), 0, 1), tg_randn(ctx, TG_F64, TG_SHAPE(3, 5), 0, 1),
                        tg_randn(ctx, TG_F64, TG_SHAPE(5), 0, 1)};
    tg_gradcheck_opts o = {0};
    o.mode = TG_GRADCHECK_FAST;
    tg_gradcheck_result r;
    ck_assert(tg_gradcheck(ctx, f_layer, NULL, 3, in, &o, &r));
    ck_assert_int_eq(r.verdict, TG_VERDICT_PASS);
    ck_assert_int_eq(r.mode, TG_GRADCHECK_FAST);
    ck_assert_str_eq(tg_gradcheck_mode_name(r.mode), "fast");
    ck_assert_int_eq(r.n_checked, 1);
    ck_assert_int_eq(r.n_evals, 1 + 2);
    ck_assert_int_eq(r.n_backwards, 1);
    ck_assert_uint_eq(r.joint, 7u);
    ck_assert(r.input[0].checked && !r.input[1].checked && !r.input[2].checked);
    ck_assert_int_eq(r.worst_input, 0);
    ck_assert_int_eq(r.worst_index, -1);
    o.mode = TG_GRADCHECK_DIRECTIONAL; /* the other modes fold nothing */
    ck_assert(tg_gradcheck(ctx, f_layer, NULL, 3, in, &o, &r));
    ck_assert_uint_eq(r.joint, 0u);
    /* float32 */
    tg_tensor *in32[3];
    for (int k = 0; k < 3; k++) in32[k] = tg_cast(ctx, in[k], TG_F32);
    o.mode = TG_GRADCHECK_FAST;
    o.allow_float32 = true;
    ck_assert(tg_gradcheck(ctx, f_layer, NULL, 3, in32, &o, &r));
    ck_assert_int_eq(r.dtype, TG_F32);

    /* a wrong gradient of x alone (input 1): wrong, in input 0's entry */
    double av[3] = {0.5, -0.25, 1.0}, xv[4] = {0.4, -0.8, 1.1, -1.9};
    tg_tensor *two[2] = {vec(TG_F64, 3, av), vec(TG_F64, 4, xv)};
    tg_gradcheck_opts f = {0};
    f.mode = TG_GRADCHECK_FAST;
    ck_assert(!tg_gradcheck(ctx, f_sumsq_wrong, NULL, 2, two, &f, &r));
    ck_assert(tg_ok(ctx));
    ck_assert_int_eq(r.verdict, TG_VERDICT_WRONG);
    ck_assert_uint_eq(r.joint, 3u);
    ck_assert_int_eq(r.input[0].verdict, TG_VERDICT_WRONG);
    ck_assert(!r.input[1].checked);
    /* one dot product over both inputs, with the directions given */
    double va[3] = {0.3, -0.7, 0.2}, vx[4] = {0.5, 0.1, -0.4, 0.6};
    f.v[0] = (tg_gradcheck_vec){va, 3};
    f.v[1] = (tg_gradcheck_vec){vx, 4};
    f.step = TG_GRADCHECK_STEP_ABSOLUTE; /* p = h v: no length scale per input */
    ck_assert(!tg_gradcheck(ctx, f_sumsq_wrong, NULL, 2, two, &f, &r));
    double r0 = tg_gradcheck_weight(0, 0), sa = 0, sx = 0;
    for (int i = 0; i < 3; i++) sa += va[i];
    for (int i = 0; i < 4; i++) sx += xv[i] * vx[i];
    ck_assert_double_eq_tol(r.worst_analytic, r0 * (sa + 3 * sx), 1e-9);
    ck_assert_double_eq_tol(r.worst_numeric, r0 * (sa + 2 * sx), 1e-6);
    /* a wrong element among many: caught */
    tg_tensor *x = tg_randn(ctx, TG_F64, TG_SHAPE(64), 0, 1);
    int64_t wrong_at = 17;
    tg_gradcheck_opts g = {0};
    g.mode = TG_GRADCHECK_FAST;
    ck_assert(!tg_gradcheck(ctx, f_square_wrong_at, &wrong_at, 1, &x, &g, &r));
    ck_assert_int_eq(r.verdict, TG_VERDICT_WRONG);
}
END_TEST

Suite *make_gradcheck_suite(void) {
    return tg_test_suite("gradcheck", setup, teardown, test_defaults, test_float32_defaults_follow_dtype,
                         test_no_defaults, test_correct_composite_passes, test_wrong_backward_one_element,
                         test_wrong_backward_worst_element, test_seed, test_float32_refused, test_random_function,
                         test_caller_state_untouched, test_memory_reused, test_nonfinite_fails, test_constant_function,
                         test_jacobian, test_forward_differences, test_errors, test_vanished_step, test_relative_steps,
                         test_float32_scale_invariant, test_jacobian_mode, test_user_r_v, test_predicted_error,
                         test_element_callback, test_write, test_fast_mode, NULL);
}

int main(void) { return tg_test_run(make_gradcheck_suite()); }

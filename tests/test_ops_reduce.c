/* Reductions: sum and mean over all elements or one axis (keepdim), max
 * over one axis. Values and float32/float64 gradients against a PyTorch
 * fixture (tests/fixtures/ops_values.py) and against sums computed here;
 * every backward against central finite differences in float64; ties,
 * NaN, empty reductions, axis errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static tg_ctx *ctx;

static void setup(void) { ctx = tg_ctx_new(7); }
static void teardown(void) { tg_ctx_free(ctx); }

/* The op under test: kind 0 sum, 1 mean, 2 sum_axis, 3 mean_axis, 4 max_axis. */
typedef struct red {
    int kind;
    int axis;
    bool keepdim;
} red;

static tg_tensor *apply(tg_ctx *c, const red *r, tg_tensor *x) {
    switch (r->kind) {
    case 0: return tg_sum(c, x);
    case 1: return tg_mean(c, x);
    case 2: return tg_sum_axis(c, x, r->axis, r->keepdim);
    case 3: return tg_mean_axis(c, x, r->axis, r->keepdim);
    default: return tg_max_axis(c, x, r->axis, r->keepdim);
    }
}
static tg_tensor *red_fn(tg_ctx *c, tg_tensor *const *in, void *arg) { return apply(c, arg, in[0]); }

/* ---- against PyTorch ------------------------------------------------------ */

static const struct {
    const char *name;
    red r;
    int ndim;
    int64_t shape[3]; /* of y */
} FIX[] = {
    {"sum", {0, 0, false}, 0, {0}},          {"mean", {1, 0, false}, 0, {0}},
    {"sum_ax1", {2, 1, false}, 2, {2, 4}},   {"sum_axm1_keep", {2, -1, true}, 3, {2, 3, 1}},
    {"mean_ax0", {3, 0, false}, 2, {3, 4}},  {"mean_ax2_keep", {3, 2, true}, 3, {2, 3, 1}},
    {"max_ax0", {4, 0, false}, 2, {3, 4}},   {"max_ax1_keep", {4, 1, true}, 3, {2, 1, 4}},
    {"max_axm1", {4, -1, false}, 2, {2, 3}},
};
#define N_FIX ((int)(sizeof FIX / sizeof FIX[0]))

/* Loop test over FIX x {f64, f32}; x is (2,3,4). */
START_TEST(test_reduce_vs_pytorch) {
    int k = _i / 2;
    tg_dtype dt = _i % 2 ? TG_F32 : TG_F64;
    double tol = dt == TG_F64 ? 1e-14 : 2e-6;
    char prefix[96];
    snprintf(prefix, sizeof prefix, "%s.%s", FIX[k].name, dt == TG_F64 ? "f64" : "f32");
    red r = FIX[k].r;
    tg_tensor *y = tg_test_op_vs_fixture(ctx, "ops_values.txt", prefix, dt, TG_SHAPE(2, 3, 4), red_fn, &r, tol);
    ck_assert_int_eq(y->ndim, FIX[k].ndim);
    for (int d = 0; d < y->ndim; d++) ck_assert_int_eq(y->shape[d], FIX[k].shape[d]);
}
END_TEST

/* ---- against sums computed here ---------------------------------------------- */

/* Every axis (positive and negative) and keepdim of several shapes,
 * against loops over (outer, R, inner) written here, in f64 and f32. */
START_TEST(test_axis_values_by_hand) {
    static const struct {
        int nd;
        int64_t s[4];
    } shapes[] = {{1, {5}}, {2, {3, 1}}, {2, {1, 4}}, {3, {2, 3, 4}}, {4, {2, 1, 3, 2}}, {2, {3, 300}}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int nd = shapes[si].nd;
        const int64_t *s = shapes[si].s;
        for (int dtk = 0; dtk < 2; dtk++) {
            tg_dtype dt = dtk ? TG_F32 : TG_F64;
            tg_tensor *x = tg_randn(ctx, dt, nd, s, 0, 1);
            for (int axis = -nd; axis < nd; axis++) {
                int ax = axis < 0 ? axis + nd : axis;
                int64_t outer = 1, R = s[ax], inner = 1;
                for (int d = 0; d < ax; d++) outer *= s[d];
                for (int d = ax + 1; d < nd; d++) inner *= s[d];
                for (int kind = 2; kind <= 4; kind++) {
                    for (int keep = 0; keep < 2; keep++) {
                        red r = {kind, axis, keep};
                        tg_tensor *y = apply(ctx, &r, x);
                        ck_assert_msg(y != NULL, "%s", tg_error_message(ctx));
                        ck_assert_int_eq(y->ndim, keep ? nd : nd - 1);
                        for (int d = 0, e = 0; d < nd; d++) {
                            if (d == ax && !keep) continue;
                            ck_assert_int_eq(y->shape[e], d == ax ? 1 : s[d]);
                            e++;
                        }
                        for (int64_t o = 0; o < outer; o++)
                            for (int64_t i = 0; i < inner; i++) {
                                double acc = kind == 4 ? -INFINITY : 0;
                                for (int64_t q = 0; q < R; q++) {
                                    double v = tg_get_flat(ctx, x, (o * R + q) * inner + i);
                                    acc = kind == 4 ? (v > acc ? v : acc) : acc + v;
                                }
                                if (kind == 3) acc /= (double)R;
                                double got = tg_get_flat(ctx, y, o * inner + i);
                                double tol = kind == 4 ? 0 : (dt == TG_F64 ? 1e-13 : 1e-6) * (1 + fabs(acc));
                                ck_assert_msg(fabs(got - acc) <= tol, "kind %d axis %d: %.17g vs %.17g", kind, axis,
                                              got, acc);
                            }
                    }
                }
            }
        }
    }
}
END_TEST

/* Float32 sums accumulate in double: a million floats sum to the double
 * sum of the same floats (to double rounding), which a float accumulator
 * misses by far. Also a column sum over a long axis. */
START_TEST(test_f32_sums_in_double) {
    const int64_t n = 7 * 142858; /* 1000006 */
    tg_tensor *x = tg_rand(ctx, TG_F32, TG_SHAPE(n), 0, 1);
    double exact = 0;
    for (int64_t i = 0; i < n; i++) exact += ((float *)x->data)[i];
    float got = *(float *)tg_sum(ctx, x)->data;
    ck_assert_msg(got == (float)exact, "%.9g vs %.9g", got, (float)exact);
    float m = *(float *)tg_mean(ctx, x)->data;
    ck_assert_msg(m == (float)(exact / (double)n), "%.9g vs %.9g", m, exact / (double)n);

    tg_tensor *c = tg_view(ctx, x, TG_SHAPE(n / 7, 7));
    ck_assert_ptr_nonnull(c);
    tg_tensor *cs = tg_sum_axis(ctx, c, 0, false);
    for (int j = 0; j < 7; j++) {
        double e = 0;
        for (int64_t i = 0; i < n / 7; i++) e += ((float *)x->data)[i * 7 + j];
        ck_assert_msg(((float *)cs->data)[j] == (float)e, "col %d: %.9g vs %.9g", j, ((float *)cs->data)[j], (float)e);
    }
}
END_TEST

/* Results are bitwise the same with 1 and 2 threads (whole sums, row sums,
 * column sums and their backward). */
START_TEST(test_threads_deterministic) {
    double res[2][6];
    for (int th = 1; th <= 2; th++) {
        tg_rng_seed(ctx, 99);
        tg_set_threads(ctx, th);
        tg_tensor *x = tg_requires_grad(ctx, tg_randn(ctx, TG_F32, TG_SHAPE(300, 1001), 0, 1));
        tg_tensor *a = tg_sum(ctx, x);
        tg_tensor *b = tg_mean_axis(ctx, x, 1, false);
        tg_tensor *c = tg_sum_axis(ctx, x, 0, true);
        tg_tensor *d = tg_max_axis(ctx, x, 0, false);
        tg_tensor *l = tg_add(ctx, tg_add(ctx, tg_sum(ctx, tg_mul(ctx, b, b)), tg_sum(ctx, tg_exp(ctx, c))),
                              tg_add(ctx, tg_mean(ctx, d), a));
        tg_backward(ctx, l);
        ck_assert_msg(tg_ok(ctx), "%s", tg_error_message(ctx));
        double sg = 0;
        for (int64_t i = 0; i < x->numel; i++) sg += ((float *)x->grad->data)[i] * (double)(i % 13 + 1);
        res[th - 1][0] = tg_get_flat(ctx, a, 0);
        res[th - 1][1] = tg_get_flat(ctx, b, 17);
        res[th - 1][2] = tg_get_flat(ctx, c, 999);
        res[th - 1][3] = tg_get_flat(ctx, d, 5);
        res[th - 1][4] = tg_get_flat(ctx, l, 0);
        res[th - 1][5] = sg;
        tg_ctx_reset(ctx);
    }
    for (int k = 0; k < 6; k++) ck_assert_msg(res[0][k] == res[1][k], "%d: %.17g vs %.17g", k, res[0][k], res[1][k]);
}
END_TEST

/* ---- gradients ------------------------------------------------------------ */

/* Every reduction, every axis and keepdim, on shapes with size-1 dims and a
 * 0-d tensor, against finite differences (values distinct: no max ties). */
START_TEST(test_reduce_fd) {
    static const struct {
        int nd;
        int64_t s[4];
    } shapes[] = {{0, {0}}, {1, {5}}, {2, {3, 1}}, {2, {1, 4}}, {3, {2, 3, 4}}, {4, {2, 1, 3, 2}}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int nd = shapes[si].nd;
        int lo = nd ? -nd : -1, hi = nd ? nd - 1 : 0;
        for (int kind = 0; kind <= 4; kind++) {
            for (int axis = lo; axis <= hi; axis++) {
                for (int keep = 0; keep < 2; keep++) {
                    if (kind <= 1 && (axis != lo || keep)) continue; /* whole-tensor: once */
                    red r = {kind, axis, keep};
                    tg_tensor *x = tg_test_smooth_leaf(ctx, nd, shapes[si].s, kind * 10 + axis);
                    tg_test_op_gradcheck(ctx, "reduction", red_fn, &r, 1, &x);
                }
            }
        }
        tg_ctx_reset(ctx);
    }
}
END_TEST

/* Ties: the gradient goes to the first maximum only; NaN wins. */
START_TEST(test_max_ties_and_nan) {
    double v[6] = {1, 3, 3, 2, 2, 2};
    tg_tensor *x = tg_requires_grad(ctx, tg_test_tensor(ctx, TG_F64, TG_SHAPE(2, 3), v));
    tg_tensor *y = tg_max_axis(ctx, x, 1, false);
    ck_assert_double_eq(tg_get_flat(ctx, y, 0), 3);
    ck_assert_double_eq(tg_get_flat(ctx, y, 1), 2);
    tg_backward_ex(ctx, y, tg_ones(ctx, TG_F64, TG_SHAPE(2)), false);
    double e[6] = {0, 1, 0, 1, 0, 0};
    for (int i = 0; i < 6; i++) ck_assert_double_eq(tg_get_flat(ctx, x->grad, i), e[i]);

    double u[6] = {5, 1, 7, 5, 2, 7}; /* axis 0: columns (5,5), (1,2), (7,7) */
    tg_tensor *x2 = tg_requires_grad(ctx, tg_test_tensor(ctx, TG_F32, TG_SHAPE(2, 3), u));
    tg_tensor *y2 = tg_max_axis(ctx, x2, 0, true);
    ck_assert_int_eq(y2->ndim, 2);
    ck_assert_int_eq(y2->shape[0], 1);
    double w[3] = {10, 20, 30};
    tg_backward_ex(ctx, y2, tg_test_tensor(ctx, TG_F32, TG_SHAPE(1, 3), w), false);
    double e2[6] = {10, 0, 30, 0, 20, 0};
    for (int i = 0; i < 6; i++) ck_assert_double_eq(tg_get_flat(ctx, x2->grad, i), e2[i]);

    double n[4] = {1, NAN, 5, NAN};
    tg_tensor *x3 = tg_requires_grad(ctx, tg_test_tensor(ctx, TG_F64, TG_SHAPE(4), n));
    tg_tensor *y3 = tg_max_axis(ctx, x3, 0, false);
    ck_assert(isnan(tg_get_flat(ctx, y3, 0)));
    tg_backward(ctx, y3);
    double e3[4] = {0, 1, 0, 0};
    for (int i = 0; i < 4; i++) ck_assert_double_eq(tg_get_flat(ctx, x3->grad, i), e3[i]);
    double m[3] = {-INFINITY, -INFINITY, -1e300};
    tg_tensor *y4 = tg_max_axis(ctx, tg_test_tensor(ctx, TG_F64, TG_SHAPE(3), m), -1, false);
    ck_assert_double_eq(tg_get_flat(ctx, y4, 0), -1e300);
}
END_TEST

/* Two backward passes add up. */
START_TEST(test_accumulation) {
    double v[6] = {0.5, -1, 2, 0.25, -0.75, 1.5};
    tg_tensor *x = tg_requires_grad(ctx, tg_test_tensor(ctx, TG_F64, TG_SHAPE(2, 3), v));
    for (int pass = 1; pass <= 2; pass++) {
        tg_tensor *l =
            tg_add(ctx, tg_mean(ctx, tg_sum_axis(ctx, x, 0, false)), tg_sum(ctx, tg_max_axis(ctx, x, 1, true)));
        tg_backward(ctx, l);
        ck_assert(tg_ok(ctx));
        /* d mean(colsum)/dx = 1/3 everywhere; max picks 2 (idx 2) and 1.5 (idx 5) */
        for (int i = 0; i < 6; i++) {
            double e = pass * (1.0 / 3 + (i == 2 || i == 5 ? 1 : 0));
            ck_assert_double_eq_tol(tg_get_flat(ctx, x->grad, i), e, 1e-15);
        }
    }
}
END_TEST

/* Every reduction adds to a grad that already holds values. */
START_TEST(test_backward_adds_to_existing_grad) {
    for (int kind = 0; kind <= 4; kind++)
        for (int axis = -2; axis <= 1; axis++)
            for (int keep = 0; keep < 2; keep++) {
                red r = {kind, axis, keep};
                double fresh[6];
                for (int pass = 0; pass < 2; pass++) {
                    tg_tensor *x = tg_test_smooth_leaf(ctx, TG_SHAPE(2, 3), kind);
                    if (pass)
                        for (int i = 0; i < 6; i++) ((double *)x->grad->data)[i] = 0.5;
                    tg_tensor *y = apply(ctx, &r, x);
                    tg_tensor *w = tg_zeros(ctx, TG_F64, y->ndim, y->shape);
                    for (int64_t i = 0; i < w->numel; i++) ((double *)w->data)[i] = 1.0 + (double)i;
                    tg_backward_ex(ctx, y, w, false);
                    ck_assert_msg(tg_ok(ctx), "%s", tg_error_message(ctx));
                    for (int i = 0; i < 6; i++) {
                        double g = ((double *)x->grad->data)[i];
                        if (pass == 0) fresh[i] = g;
                        else
                            ck_assert_msg(fabs(g - (fresh[i] + 0.5)) <= 1e-14 * (1 + fabs(g)),
                                          "kind %d axis %d: %.17g vs %.17g + 0.5", kind, axis, g, fresh[i]);
                    }
                }
            }
}
END_TEST

/* A 0-d tensor reduces over axis 0 or -1 to itself. */
START_TEST(test_scalar_axis) {
    double v = 2.5;
    tg_tensor *x = tg_requires_grad(ctx, tg_test_tensor(ctx, TG_F64, 0, NULL, &v));
    for (int kind = 2; kind <= 4; kind++)
        for (int axis = -1; axis <= 0; axis++) {
            red r = {kind, axis, axis == 0};
            tg_tensor *y = apply(ctx, &r, x);
            ck_assert_ptr_nonnull(y);
            ck_assert_int_eq(y->ndim, 0);
            ck_assert_double_eq(tg_get_flat(ctx, y, 0), 2.5);
        }
    tg_tensor *s = tg_sum(ctx, x);
    ck_assert_int_eq(s->ndim, 0);
    ck_assert_double_eq(tg_get_flat(ctx, s, 0), 2.5);
}
END_TEST

/* ---- empty tensors and errors ------------------------------------------------ */

START_TEST(test_empty_reductions) {
    tg_tensor *e = tg_requires_grad(ctx, tg_zeros(ctx, TG_F64, TG_SHAPE(0, 3)));
    tg_tensor *s = tg_sum(ctx, e); /* PyTorch: 0 */
    ck_assert_ptr_nonnull(s);
    ck_assert_double_eq(tg_get_flat(ctx, s, 0), 0);
    tg_backward(ctx, s);
    ck_assert(tg_ok(ctx));
    tg_tensor *s0 = tg_sum_axis(ctx, e, 0, false); /* (3,) of zeros */
    ck_assert_int_eq(s0->ndim, 1);
    ck_assert_int_eq(s0->shape[0], 3);
    for (int i = 0; i < 3; i++) ck_assert_double_eq(tg_get_flat(ctx, s0, i), 0);
    tg_tensor *m1 = tg_mean_axis(ctx, e, 1, true); /* (0, 1): nothing is averaged over nothing */
    ck_assert_ptr_nonnull(m1);
    ck_assert_int_eq(m1->numel, 0);
    ck_assert_int_eq(m1->shape[1], 1);
    tg_tensor *x1 = tg_max_axis(ctx, e, 1, false);
    ck_assert_ptr_nonnull(x1);
    ck_assert_int_eq(x1->numel, 0);

    tg_test_assert_fails(ctx, tg_mean(ctx, e), TG_ERR_VALUE, "tg_mean", "empty reduction", "(0, 3)", NULL);
    tg_test_assert_fails(ctx, tg_mean_axis(ctx, e, 0, false), TG_ERR_VALUE, "tg_mean_axis", "empty reduction", "(0, 3)",
                         NULL);
    tg_test_assert_fails(ctx, tg_max_axis(ctx, e, -2, true), TG_ERR_VALUE, "tg_max_axis", "empty reduction", "axis -2",
                         NULL);
}
END_TEST

START_TEST(test_errors) {
    tg_tensor *x = tg_ones(ctx, TG_F64, TG_SHAPE(2, 3));
    for (int kind = 2; kind <= 4; kind++) {
        red r = {kind, 2, false};
        tg_test_assert_fails(ctx, apply(ctx, &r, x), TG_ERR_SHAPE, "axis 2", "(2, 3)", "-2..1", NULL);
        r.axis = -3;
        tg_test_assert_fails(ctx, apply(ctx, &r, x), TG_ERR_SHAPE, "axis -3", NULL);
        red s = {kind, 1, false};
        tg_tensor *z = tg_ones(ctx, TG_F32, 0, NULL);
        tg_test_assert_fails(ctx, apply(ctx, &s, z), TG_ERR_SHAPE, "axis 1", "()", NULL);
        tg_test_assert_fails(ctx, apply(ctx, &s, NULL), TG_ERR_NULL, "'x'", NULL);
    }
    tg_test_assert_fails(ctx, tg_sum(ctx, NULL), TG_ERR_NULL, "tg_sum", NULL);
    tg_test_assert_fails(ctx, tg_mean(ctx, NULL), TG_ERR_NULL, "tg_mean", NULL);

    /* In error: every reduction returns NULL and the first error stays. */
    tg_requires_grad(ctx, x);
    tg_error(ctx, TG_ERR_IO, "first", "boom");
    ck_assert_ptr_null(tg_sum(ctx, x));
    ck_assert_ptr_null(tg_mean(ctx, x));
    ck_assert_ptr_null(tg_sum_axis(ctx, x, 0, false));
    ck_assert_ptr_null(tg_mean_axis(ctx, x, 0, false));
    ck_assert_ptr_null(tg_max_axis(ctx, x, 0, false));
    ck_assert_ptr_null(tg_max_axis(ctx, x, 9, false));
    ck_assert_int_eq(tg_tape_size(ctx), 0);
    tg_test_assert_error(ctx, TG_ERR_IO, "first", NULL);
    ck_assert_ptr_null(tg_sum(NULL, x));
    ck_assert_ptr_null(tg_max_axis(NULL, x, 0, true));
}
END_TEST

/* Recording: max saves one int64 index per output; sums save nothing. */
START_TEST(test_saved_bytes) {
    tg_tensor *x = tg_requires_grad(ctx, tg_ones(ctx, TG_F32, TG_SHAPE(4, 5)));
    tg_sum_axis(ctx, x, 1, false);
    tg_mean(ctx, x);
    ck_assert_uint_eq(tg_tape_saved_bytes(ctx), 0);
    tg_max_axis(ctx, x, 1, false);
    ck_assert_uint_eq(tg_tape_saved_bytes(ctx), 4 * sizeof(int64_t));
    ck_assert_int_eq(tg_tape_size(ctx), 3);
    bool was = tg_set_grad_enabled(ctx, false);
    size_t used = tg_arena_used(ctx);
    tg_tensor *y = tg_max_axis(ctx, x, 0, false);
    ck_assert(!y->requires_grad);
    ck_assert_int_eq(tg_tape_size(ctx), 3);
    ck_assert_uint_le(tg_arena_used(ctx) - used, 256); /* the output only, no index buffer */
    tg_set_grad_enabled(ctx, was);
}
END_TEST

Suite *make_ops_reduce_suite(void) {
    Suite *s = suite_create("ops_reduce");
    TCase *tc = tg_test_tcase(s, "values", setup, teardown, test_axis_values_by_hand, test_f32_sums_in_double,
                              test_threads_deterministic, test_scalar_axis, NULL);
    tcase_add_loop_test(tc, test_reduce_vs_pytorch, 0, 2 * N_FIX);

    tg_test_tcase(s, "gradients", setup, teardown, test_reduce_fd, test_max_ties_and_nan, test_accumulation,
                  test_backward_adds_to_existing_grad, test_saved_bytes, NULL);

    tg_test_tcase(s, "errors", setup, teardown, test_empty_reductions, test_errors, NULL);
    return s;
}

int main(void) { return tg_test_run(make_ops_reduce_suite()); }

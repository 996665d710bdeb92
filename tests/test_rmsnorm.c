/* RMSNorm: y = x / sqrt(mean(x^2) + eps) * gamma + beta over the trailing
 * normalized dims. Known values, mean (not sum) over 1 and 2 normalized
 * dims, options, errors, the invariants a student should learn (scale
 * invariance: x . dx = 0 and f(cx) = f(x) at eps = 0; dgamma and dbeta
 * formulas), gradient checks over the cases that matter, float32 rows
 * near 1e20 and 1e-20, the tape record and thread determinism. */
#include "layers_testutil.h"

static tg_ctx *ctx;
static void setup(void) { ctx = tg_ctx_new(7); }
static void teardown(void) { tg_ctx_free(ctx); }

/* torch.nn.RMSNorm(3, eps=1e-5) on arange(9).reshape(3, 3), the example of
 * the issue (and of several RMSNorm implementations' tests). */
START_TEST(test_arange_3x3) {
    static const double want[9] = {0, 0.7746, 1.5492, 0.7348, 0.9798, 1.2247, 0.8514, 0.9933, 1.1352};
    for (int dt = 0; dt < 2; dt++) {
        tg_dtype dtype = dt ? TG_F64 : TG_F32;
        tg_rmsnorm *n = tg_rmsnorm_new(ctx, "norm", 1, (int64_t[]){3}, 1e-5, true, false, dtype);
        ck_assert_ptr_nonnull(n);
        tg_tensor *x = tg_view(ctx, tg_arange(ctx, dtype, 0, 9, 1), TG_SHAPE(3, 3));
        tg_tensor *y = tg_rmsnorm_forward(ctx, n, x);
        ck_assert_ptr_nonnull(y);
        lt_assert_close_arr(ctx, "rmsnorm(arange(9))", y, want, 1e-4, 0);
        tg_rmsnorm_free(ctx, n);
    }
}
END_TEST

/* The RMS is a mean of squares over every normalized element, not a sum,
 * for one and for two normalized dims. */
START_TEST(test_mean_not_sum) {
    /* a constant row c: mean(x^2) = c^2, so y = c / sqrt(c^2 + eps) ~ 1
     * (a sum would give c / sqrt(C c^2) = 1/2 for C = 4) */
    tg_rmsnorm *n1 = tg_rmsnorm_new(ctx, "n1", 1, (int64_t[]){4}, 1e-6, true, false, TG_F64);
    tg_tensor *y = tg_rmsnorm_forward(ctx, n1, tg_full(ctx, TG_F64, TG_SHAPE(2, 4), 2.0));
    for (int i = 0; i < 8; i++) ck_assert_double_eq_tol(tg_get_flat(ctx, y, i), 2.0 / sqrt(4.0 + 1e-6), 1e-15);
    /* two normalized dims (2, 3): mean over all 6 elements of each row */
    tg_rmsnorm *n2 = tg_rmsnorm_new(ctx, "n2", 2, (int64_t[]){2, 3}, 1e-6, true, false, TG_F64);
    y = tg_rmsnorm_forward(ctx, n2, tg_full(ctx, TG_F64, TG_SHAPE(4, 2, 3), -3.0));
    for (int i = 0; i < 24; i++) ck_assert_double_eq_tol(tg_get_flat(ctx, y, i), -3.0 / sqrt(9.0 + 1e-6), 1e-15);
    /* random rows against the naive reference over 6 elements; and they
     * differ from normalizing each group of 3 alone */
    tg_tensor *x = lt_rand(ctx, TG_F64, TG_SHAPE(4, 2, 3), -2, 2);
    y = tg_rmsnorm_forward(ctx, n2, x);
    double *xv = lt_values(ctx, x), ref[24], ref3[24];
    lt_norm_ref(false, xv, NULL, NULL, 4, 6, 1e-6, NULL, ref);
    lt_norm_ref(false, xv, NULL, NULL, 8, 3, 1e-6, NULL, ref3);
    lt_assert_close_arr(ctx, "rmsnorm over (2,3)", y, ref, 1e-13, 1e-13);
    double d = 0;
    for (int i = 0; i < 24; i++) d = fmax(d, fabs(ref[i] - ref3[i]));
    ck_assert(d > 0.01);
    /* one row of 2 values by hand: x = (3, 4): mean(x^2) = 12.5 */
    y = tg_rmsnorm_fused(ctx, lt_tensor(ctx, TG_F64, TG_SHAPE(1, 2), (double[]){3, 4}), NULL, NULL, 1, 0.0);
    lt_assert_close_arr(ctx, "(3,4)", y, (double[]){3 / sqrt(12.5), 4 / sqrt(12.5)}, 1e-15, 0);
    free(xv);
    tg_rmsnorm_free(ctx, n1);
    tg_rmsnorm_free(ctx, n2);
}
END_TEST

/* Random shapes, both dtypes, random gamma and beta, against the naive
 * reference. */
START_TEST(test_values_naive) {
    const int64_t shapes[][4] = {{1, 1, 1, 1}, {2, 3, 4, 5}, {3, 1, 7, 64}, {2, 2, 33, 31}};
    for (int dt = 0; dt < 2; dt++) {
        tg_dtype dtype = dt ? TG_F64 : TG_F32;
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            for (int nd = 1; nd <= 2; nd++) {
                const int64_t *sh = shapes[s];
                int64_t C = nd == 1 ? sh[3] : sh[2] * sh[3], N = sh[0] * sh[1] * sh[2] * sh[3] / C;
                tg_tensor *x = lt_rand(ctx, dtype, 4, sh, -3, 3);
                tg_tensor *g = lt_rand(ctx, dtype, nd, sh + 4 - nd, -2, 2);
                tg_tensor *b = lt_rand(ctx, dtype, nd, sh + 4 - nd, -2, 2);
                tg_tensor *y = tg_rmsnorm_fused(ctx, x, g, b, nd, 1e-6);
                ck_assert_msg(y != NULL, "%s", tg_error_message(ctx));
                double *xv = lt_values(ctx, x), *gv = lt_values(ctx, g), *bv = lt_values(ctx, b);
                double *ref = malloc((size_t)(N * C) * sizeof *ref);
                lt_norm_ref(false, xv, gv, bv, N, C, 1e-6, NULL, ref);
                lt_assert_close_arr(ctx, "rmsnorm", y, ref, dt ? 1e-13 : 2e-6, dt ? 1e-13 : 2e-6);
                free(xv), free(gv), free(bv), free(ref);
            }
            tg_ctx_reset(ctx);
        }
    }
}
END_TEST

/* Non-positive sizes, eps <= 0, NaN or inf eps: refused, naming the
 * argument and its value. */
START_TEST(test_bad_arguments) {
    const int64_t s4[] = {4};
    ck_assert_ptr_null(tg_rmsnorm_new(ctx, "n", 1, s4, 0.0, true, false, TG_F32));
    lt_assert_error(ctx, TG_ERR_VALUE, "tg_rmsnorm_new", "eps = 0", NULL);
    ck_assert_ptr_null(tg_rmsnorm_new(ctx, "n", 1, s4, -1e-6, true, false, TG_F32));
    lt_assert_error(ctx, TG_ERR_VALUE, "tg_rmsnorm_new", "eps = -1e-06", NULL);
    ck_assert_ptr_null(tg_rmsnorm_new(ctx, "n", 1, s4, NAN, true, false, TG_F32));
    lt_assert_error(ctx, TG_ERR_VALUE, "tg_rmsnorm_new", "eps = ", "nan", NULL);
    ck_assert_ptr_null(tg_rmsnorm_new(ctx, "n", 1, s4, INFINITY, true, false, TG_F32));
    lt_assert_error(ctx, TG_ERR_VALUE, "tg_rmsnorm_new", "eps = inf", NULL);
    ck_assert_ptr_null(tg_rmsnorm_new(ctx, "n", 1, s4, -INFINITY, true, false, TG_F32));
    lt_assert_error(ctx, TG_ERR_VALUE, "tg_rmsnorm_new", "eps = -inf", NULL);
    ck_assert_ptr_null(tg_rmsnorm_new(ctx, "n", 1, (int64_t[]){0}, 1e-6, true, false, TG_F32));
    lt_assert_error(ctx, TG_ERR_VALUE, "tg_rmsnorm_new", "normalized_shape[0] = 0", NULL);
    ck_assert_ptr_null(tg_rmsnorm_new(ctx, "n", 2, (int64_t[]){3, -5}, 1e-6, true, false, TG_F32));
    lt_assert_error(ctx, TG_ERR_VALUE, "tg_rmsnorm_new", "normalized_shape[1] = -5", NULL);
    ck_assert_ptr_null(tg_rmsnorm_new(ctx, "n", 0, s4, 1e-6, true, false, TG_F32));
    lt_assert_error(ctx, TG_ERR_VALUE, "tg_rmsnorm_new", "ndim = 0", NULL);
    ck_assert_ptr_null(tg_rmsnorm_new(ctx, "n", 9, s4, 1e-6, true, false, TG_F32));
    lt_assert_error(ctx, TG_ERR_VALUE, "tg_rmsnorm_new", "ndim = 9", NULL);
    ck_assert_ptr_null(tg_rmsnorm_new(ctx, "n", 1, NULL, 1e-6, true, false, TG_F32));
    lt_assert_error(ctx, TG_ERR_NULL, "tg_rmsnorm_new", "normalized_shape", NULL);
    ck_assert_ptr_null(tg_rmsnorm_new(ctx, "n", 1, s4, 1e-6, true, false, (tg_dtype)3));
    lt_assert_error(ctx, TG_ERR_DTYPE, "tg_rmsnorm_new", "dtype 3", NULL);
    /* the fused op: eps = 0 is allowed (invariants), negative or NaN not */
    tg_tensor *x = lt_rand(ctx, TG_F64, TG_SHAPE(2, 4), -1, 1);
    ck_assert_ptr_nonnull(tg_rmsnorm_fused(ctx, x, NULL, NULL, 1, 0.0));
    ck_assert_ptr_null(tg_rmsnorm_fused(ctx, x, NULL, NULL, 1, -1.0));
    lt_assert_error(ctx, TG_ERR_VALUE, "tg_rmsnorm_fused", "eps = -1", NULL);
    ck_assert_ptr_null(tg_rmsnorm_composed(ctx, x, NULL, NULL, 1, NAN));
    lt_assert_error(ctx, TG_ERR_VALUE, "tg_rmsnorm_composed", "eps = ", "nan", NULL);
    ck_assert_ptr_null(tg_rmsnorm_fused(ctx, x, NULL, NULL, 0, 1e-6));
    lt_assert_error(ctx, TG_ERR_VALUE, "tg_rmsnorm_fused", "ndim_norm = 0", "1..2", NULL);
    ck_assert_ptr_null(tg_rmsnorm_fused(ctx, x, NULL, NULL, 3, 1e-6));
    lt_assert_error(ctx, TG_ERR_VALUE, "tg_rmsnorm_fused", "ndim_norm = 3", NULL);
    ck_assert_ptr_null(tg_rmsnorm_fused(ctx, x, tg_ones(ctx, TG_F64, TG_SHAPE(3)), NULL, 1, 1e-6));
    lt_assert_error(ctx, TG_ERR_SHAPE, "tg_rmsnorm_fused", "gamma (3,)", "(4,)", "(2, 4)", NULL);
    ck_assert_ptr_null(tg_rmsnorm_fused(ctx, x, NULL, tg_ones(ctx, TG_F64, TG_SHAPE(2, 4)), 1, 1e-6));
    lt_assert_error(ctx, TG_ERR_SHAPE, "tg_rmsnorm_fused", "beta (2, 4)", NULL);
    ck_assert_ptr_null(tg_rmsnorm_fused(ctx, x, tg_ones(ctx, TG_F32, TG_SHAPE(4)), NULL, 1, 1e-6));
    lt_assert_error(ctx, TG_ERR_DTYPE, "tg_rmsnorm_fused", NULL);
    ck_assert_ptr_null(tg_rmsnorm_fused(ctx, tg_zeros(ctx, TG_F64, TG_SHAPE(3, 0)), NULL, NULL, 1, 1e-6));
    lt_assert_error(ctx, TG_ERR_SHAPE, "tg_rmsnorm_fused", "no element", NULL);
    ck_assert_ptr_null(tg_rmsnorm_fused(ctx, NULL, NULL, NULL, 1, 1e-6));
    lt_assert_error(ctx, TG_ERR_NULL, "tg_rmsnorm_fused", "'x'", NULL);
    /* no rows is fine: an empty output */
    tg_tensor *e = tg_rmsnorm_fused(ctx, tg_zeros(ctx, TG_F64, TG_SHAPE(0, 4)), NULL, NULL, 1, 1e-6);
    ck_assert_ptr_nonnull(e);
    ck_assert_int_eq(e->numel, 0);
}
END_TEST

/* affine=false: no gamma and zero parameters; bias=false: no beta. */
START_TEST(test_affine_bias_options) {
    char buf[256];
    tg_params p = {0};
    tg_rmsnorm *a0 = tg_rmsnorm_new(ctx, "norm0", 1, (int64_t[]){384}, TG_RMSNORM_EPS, false, true, TG_F32);
    ck_assert_ptr_nonnull(a0);
    ck_assert_ptr_null(a0->gamma);
    ck_assert_ptr_null(a0->beta);
    ck_assert(!a0->affine && !a0->bias);
    ck_assert(tg_rmsnorm_params(ctx, a0, &p));
    ck_assert_int_eq(p.count, 0);
    ck_assert_int_eq(tg_module_numel(TG_MODULE(a0)), 0);
    tg_module_format(buf, sizeof buf, TG_MODULE(a0));
    ck_assert_str_eq(buf, "RMSNorm(dim=384, eps=1e-06, affine=false, bias=false)  params=0");

    tg_rmsnorm *a1 = tg_rmsnorm_new(ctx, "norm1", 1, (int64_t[]){384}, TG_RMSNORM_EPS, true, false, TG_F32);
    ck_assert_ptr_nonnull(a1->gamma);
    ck_assert_ptr_null(a1->beta);
    for (int64_t i = 0; i < 384; i++) ck_assert_double_eq(tg_get_flat(ctx, a1->gamma, i), 1.0);
    ck_assert(tg_rmsnorm_params(ctx, a1, &p));
    ck_assert_int_eq(p.count, 1);
    ck_assert_str_eq(p.items[0].name, "norm1.gamma");
    ck_assert(!p.items[0].weight_decay);
    tg_module_format(buf, sizeof buf, TG_MODULE(a1));
    ck_assert_str_eq(buf, "RMSNorm(dim=384, eps=1e-06, affine=true, bias=false)  params=384");

    tg_rmsnorm *a2 = tg_rmsnorm_new(ctx, "norm2", 2, (int64_t[]){4, 8}, 1e-5, true, true, TG_F64);
    ck_assert_ptr_nonnull(a2->beta);
    ck_assert_int_eq(a2->beta->ndim, 2);
    ck_assert_int_eq(a2->beta->shape[1], 8);
    for (int64_t i = 0; i < 32; i++) ck_assert_double_eq(tg_get_flat(ctx, a2->beta, i), 0.0);
    ck_assert(tg_rmsnorm_params(ctx, a2, &p));
    ck_assert_int_eq(p.count, 3);
    ck_assert_str_eq(p.items[1].name, "norm2.gamma");
    ck_assert_str_eq(p.items[2].name, "norm2.beta");
    ck_assert(!p.items[1].weight_decay && !p.items[2].weight_decay);
    ck_assert(p.items[2].value->persistent && p.items[2].value->requires_grad);
    tg_module_format(buf, sizeof buf, TG_MODULE(a2));
    ck_assert_str_eq(buf, "RMSNorm(dim=(4, 8), eps=1e-05, affine=true, bias=true)  params=64");
    /* parameters survive a reset */
    tg_ctx_reset(ctx);
    ck_assert_double_eq(tg_get_flat(ctx, a2->gamma, 31), 1.0);
    tg_params_free(&p);
    tg_rmsnorm_free(ctx, a0);
    tg_rmsnorm_free(ctx, a1);
    tg_module_free(ctx, TG_MODULE(a2));
}
END_TEST

/* A fresh layer with bias computes what the same layer without bias does
 * (beta starts at 0): outputs and every gradient. */
START_TEST(test_fresh_bias_equals_no_bias) {
    for (int dt = 0; dt < 2; dt++) {
        tg_dtype dtype = dt ? TG_F64 : TG_F32;
        tg_rmsnorm *nb = tg_rmsnorm_new(ctx, "a", 1, (int64_t[]){16}, 1e-6, true, false, dtype);
        tg_rmsnorm *wb = tg_rmsnorm_new(ctx, "b", 1, (int64_t[]){16}, 1e-6, true, true, dtype);
        tg_tensor *x1 = tg_requires_grad(ctx, lt_rand(ctx, dtype, TG_SHAPE(5, 16), -2, 2));
        tg_tensor *x2 = tg_requires_grad(ctx, tg_copy(ctx, x1));
        tg_tensor *dy = lt_rand(ctx, dtype, TG_SHAPE(5, 16), -1, 1);
        tg_tensor *y1 = tg_rmsnorm_forward(ctx, nb, x1);
        tg_backward_ex(ctx, y1, dy, false);
        tg_tensor *y2 = tg_rmsnorm_forward(ctx, wb, x2);
        tg_backward_ex(ctx, y2, dy, false);
        ck_assert(tg_ok(ctx));
        ck_assert_double_eq(lt_max_abs_diff(ctx, y1, y2), 0);
        ck_assert_double_eq(lt_max_abs_diff(ctx, x1->grad, x2->grad), 0);
        ck_assert_double_eq(lt_max_abs_diff(ctx, nb->gamma->grad, wb->gamma->grad), 0);
        tg_rmsnorm_free(ctx, nb);
        tg_rmsnorm_free(ctx, wb);
        tg_ctx_reset(ctx);
    }
}
END_TEST

/* An input whose trailing dims are not normalized_shape: an error naming
 * both shapes. The output keeps the input's shape and dtype. */
START_TEST(test_trailing_dims_and_shape_dtype) {
    tg_rmsnorm *n = tg_rmsnorm_new(ctx, "n", 1, (int64_t[]){4}, 1e-6, true, false, TG_F32);
    ck_assert_ptr_null(tg_rmsnorm_forward(ctx, n, tg_zeros(ctx, TG_F32, TG_SHAPE(2, 5))));
    lt_assert_error(ctx, TG_ERR_SHAPE, "tg_rmsnorm_forward", "(2, 5)", "(4,)", NULL);
    tg_rmsnorm *n2 = tg_rmsnorm_new(ctx, "n2", 2, (int64_t[]){3, 4}, 1e-6, true, false, TG_F32);
    ck_assert_ptr_null(tg_rmsnorm_forward(ctx, n2, tg_zeros(ctx, TG_F32, TG_SHAPE(5, 4, 3))));
    lt_assert_error(ctx, TG_ERR_SHAPE, "tg_rmsnorm_forward", "(5, 4, 3)", "(3, 4)", NULL);
    ck_assert_ptr_null(tg_rmsnorm_forward(ctx, n2, tg_zeros(ctx, TG_F32, TG_SHAPE(4))));
    lt_assert_error(ctx, TG_ERR_SHAPE, "tg_rmsnorm_forward", "(4,)", "(3, 4)", NULL);
    ck_assert_ptr_null(tg_rmsnorm_forward(ctx, n, tg_zeros(ctx, TG_F64, TG_SHAPE(2, 4))));
    lt_assert_error(ctx, TG_ERR_DTYPE, "tg_rmsnorm_forward", "float64", "float32", NULL);
    ck_assert_ptr_null(tg_rmsnorm_forward(ctx, NULL, tg_zeros(ctx, TG_F32, TG_SHAPE(2, 4))));
    lt_assert_error(ctx, TG_ERR_NULL, "tg_rmsnorm_forward", "'layer'", NULL);
    ck_assert_ptr_null(tg_rmsnorm_forward(ctx, n, NULL));
    lt_assert_error(ctx, TG_ERR_NULL, "tg_rmsnorm_forward", "'x'", NULL);
    tg_rmsnorm_free(ctx, n);
    tg_rmsnorm_free(ctx, n2);

    const int64_t shapes[][4] = {{5, 1, 1, 1}, {2, 5, 1, 1}, {2, 3, 5, 1}, {1, 1, 1, 5}};
    const int nds[] = {1, 2, 3, 4};
    for (int dt = 0; dt < 2; dt++) {
        tg_dtype dtype = dt ? TG_F64 : TG_F32;
        for (int s = 0; s < 4; s++) {
            int nd = nds[s];
            tg_rmsnorm *l = tg_rmsnorm_new(ctx, "l", 1, &shapes[s][nd - 1], 1e-6, true, true, dtype);
            tg_tensor *x = lt_rand(ctx, dtype, nd, shapes[s], -1, 1);
            tg_tensor *y = tg_rmsnorm_forward(ctx, l, x);
            ck_assert_ptr_nonnull(y);
            ck_assert(tg_same_shape(x, y));
            ck_assert_int_eq(y->dtype, dtype);
            tg_rmsnorm_free(ctx, l);
        }
    }
}
END_TEST

/* With eps = 0, RMSNorm is scale invariant: f(c x) = f(x) for c > 0, so
 * its derivative along x vanishes: per row, x . dx = 0 for any upstream
 * gradient. With eps > 0 both fail (the test can fail). */
START_TEST(test_scale_invariance_eps0) {
    const int64_t N = 6, C = 9;
    tg_tensor *x = tg_requires_grad(ctx, lt_rand(ctx, TG_F64, TG_SHAPE(N, C), -2, 2));
    tg_tensor *g = tg_requires_grad(ctx, lt_rand(ctx, TG_F64, TG_SHAPE(C), 0.5, 1.5));
    tg_tensor *b = tg_requires_grad(ctx, lt_rand(ctx, TG_F64, TG_SHAPE(C), -1, 1));
    tg_tensor *dy = lt_rand(ctx, TG_F64, TG_SHAPE(N, C), -1, 1);
    for (int e = 0; e < 2; e++) {
        double eps = e ? 1.0 : 0.0;
        tg_zero_grad(ctx, x);
        tg_tensor *y = tg_rmsnorm_fused(ctx, x, g, b, 1, eps);
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
        for (int k = 0; k < 4; k++) {
            const double c = (double[]){1e-3, 0.5, 7.0, 1e4}[k];
            tg_tensor *cx = tg_mul_scalar(ctx, tg_detach(ctx, x), c);
            double d = lt_max_abs_diff(ctx, tg_rmsnorm_fused(ctx, cx, g, b, 1, eps), y);
            if (eps == 0) ck_assert_msg(d < 1e-14, "f(%g x) - f(x) = %g", c, d);
            else ck_assert_msg(d > 1e-4, "eps = 1: f(%g x) = f(x) unexpectedly", c);
        }
    }
}
END_TEST

/* dgamma = sum over rows of dy * xhat, dbeta = sum over rows of dy, with
 * xhat from the naive reference; over 1 and 2 normalized dims. */
START_TEST(test_dgamma_dbeta) {
    for (int nd = 1; nd <= 2; nd++) {
        const int64_t shape[3] = {5, 3, 4};
        const int64_t C = nd == 1 ? 4 : 12, N = 60 / C;
        tg_tensor *x = lt_rand(ctx, TG_F64, 3, shape, -2, 2);
        tg_tensor *g = tg_requires_grad(ctx, lt_rand(ctx, TG_F64, nd, shape + 3 - nd, -2, 2));
        tg_tensor *b = tg_requires_grad(ctx, lt_rand(ctx, TG_F64, nd, shape + 3 - nd, -2, 2));
        tg_tensor *dy = lt_rand(ctx, TG_F64, 3, shape, -1, 1);
        tg_tensor *y = tg_rmsnorm_fused(ctx, x, g, b, nd, 1e-6);
        tg_backward_ex(ctx, y, dy, false);
        ck_assert(tg_ok(ctx));
        double *xv = lt_values(ctx, x), *dyv = lt_values(ctx, dy), xhat[60], dg[12] = {0}, db[12] = {0};
        lt_norm_ref(false, xv, NULL, NULL, N, C, 1e-6, xhat, NULL);
        for (int64_t n = 0; n < N; n++)
            for (int64_t j = 0; j < C; j++) {
                dg[j] += dyv[n * C + j] * xhat[n * C + j];
                db[j] += dyv[n * C + j];
            }
        lt_assert_close_arr(ctx, "dgamma", g->grad, dg, 1e-13, 1e-13);
        lt_assert_close_arr(ctx, "dbeta", b->grad, db, 1e-13, 1e-13);
        free(xv), free(dyv);
        tg_ctx_reset(ctx);
    }
}
END_TEST

/* tg_gradcheck in float64: full Jacobian for small shapes, directional for
 * large; one normalized dim, two, inputs near zero (eps dominates), large
 * inputs, affine on/off, bias on/off. */
START_TEST(test_gradcheck) {
    const tg_gradcheck_mode F = TG_GRADCHECK_FULL, D = TG_GRADCHECK_DIRECTIONAL;
    for (int opt = 0; opt < 4; opt++) {
        lt_norm_case c = {false, false, 1, 1e-6, opt & 1, (opt >> 1) & 1};
        lt_norm_gradcheck(ctx, "dim 1", c, TG_SHAPE(3, 5), 1.0, F, 1);
        lt_norm_gradcheck(ctx, "dim 1, two elements per row", c, TG_SHAPE(4, 2), 1.0, F, 2);
        c.ndim_norm = 2;
        lt_norm_gradcheck(ctx, "2 trailing dims", c, TG_SHAPE(2, 3, 4), 1.0, F, 3);
        c.ndim_norm = 1;
        lt_norm_gradcheck(ctx, "near zero, eps dominates", c, TG_SHAPE(3, 6), 1e-4, F, 4);
        c.eps = 1e-5;
        lt_norm_gradcheck(ctx, "near zero, comparable to eps", c, TG_SHAPE(3, 6), 3e-3, F, 5);
        c.eps = 1e-6;
        lt_norm_gradcheck(ctx, "large inputs", c, TG_SHAPE(3, 6), 1e3, F, 6);
        lt_norm_gradcheck(ctx, "large shape", c, TG_SHAPE(16, 200), 1.0, D, 7);
        c.ndim_norm = 3;
        lt_norm_gradcheck(ctx, "large, 3 dims", c, TG_SHAPE(4, 8, 5, 10), 2.0, D, 8);
        tg_ctx_reset(ctx);
    }
}
END_TEST

/* float32 rows around 1e20 (the sum of squares overflows float32) and
 * 1e-20 (squares underflow) normalize correctly through the layer, with
 * finite gradients matching float64. The composed float32 form, which
 * squares in float32, gives 0 for the 1e20 row: why the fused kernel
 * accumulates in double. */
START_TEST(test_float32_extreme_rows) {
    const int64_t N = 3, C = 64;
    double xv[3 * 64], dyv[3 * 64];
    for (int64_t j = 0; j < C; j++) {
        double u = 1.0 + tg_rng_uniform(ctx), s = tg_rng_uniform(ctx) < 0.5 ? -1 : 1;
        xv[j] = s * u * 1e20;
        xv[C + j] = s * (2.0 - u) * 1e-20;
        xv[2 * C + j] = s * u;
    }
    for (int64_t i = 0; i < N * C; i++) dyv[i] = 2.0 * tg_rng_uniform(ctx) - 1.0;
    tg_rmsnorm *l = tg_rmsnorm_new(ctx, "n", 1, (int64_t[]){C}, 1e-6, true, false, TG_F32);
    tg_tensor *x = tg_requires_grad(ctx, lt_tensor(ctx, TG_F32, TG_SHAPE(N, C), xv));
    tg_tensor *y = tg_rmsnorm_forward(ctx, l, x);
    tg_backward_ex(ctx, y, lt_tensor(ctx, TG_F32, TG_SHAPE(N, C), dyv), false);
    ck_assert(tg_ok(ctx));
    /* references in float64 from the same (float32-rounded) values */
    double *x32 = lt_values(ctx, x), ref[3 * 64];
    lt_norm_ref(false, x32, NULL, NULL, N, C, 1e-6, NULL, ref);
    lt_assert_close_arr(ctx, "y", y, ref, 0, 2e-6); /* relative, at every scale */
    tg_tensor *x64 = tg_requires_grad(ctx, lt_tensor(ctx, TG_F64, TG_SHAPE(N, C), x32));
    tg_tensor *y64 = tg_rmsnorm_fused(ctx, x64, NULL, NULL, 1, 1e-6);
    tg_backward_ex(ctx, y64, lt_tensor(ctx, TG_F64, TG_SHAPE(N, C), dyv), false);
    for (int64_t n = 0; n < N; n++) {
        double scale = 0;
        for (int64_t j = 0; j < C; j++) scale = fmax(scale, fabs(tg_get_flat(ctx, x64->grad, n * C + j)));
        ck_assert(scale > 0 && isfinite(scale));
        for (int64_t j = 0; j < C; j++) {
            double a = tg_get_flat(ctx, x->grad, n * C + j), b = tg_get_flat(ctx, x64->grad, n * C + j);
            ck_assert_msg(isfinite(a), "dx[%lld][%lld] = %g", (long long)n, (long long)j, a);
            ck_assert_msg(fabs(a - b) <= 1e-5 * scale, "dx[%lld][%lld]: %g vs %g", (long long)n, (long long)j, a, b);
        }
    }
    /* row 0 really is ~1e20 and row 1 ~1e-20: y ~ 1 and y ~ 1e-17 */
    ck_assert(fabs(tg_get_flat(ctx, y, 0)) > 0.5 && fabs(tg_get_flat(ctx, y, C)) < 1e-16);
    /* the composed float32 form overflows: sum x^2 = inf, so y = x / inf = 0 */
    tg_tensor *yc = tg_rmsnorm_composed(ctx, tg_detach(ctx, x), NULL, NULL, 1, 1e-6);
    ck_assert_ptr_nonnull(yc);
    for (int64_t j = 0; j < C; j++) {
        double v = tg_get_flat(ctx, yc, j);
        ck_assert_msg(v == 0 || !isfinite(v), "composed float32 at 1e20 gave %g", v);
    }
    free(x32);
    tg_rmsnorm_free(ctx, l);
}
END_TEST

/* One tape record; it saves rstd (one double per row) and keeps x and
 * gamma for backward. */
START_TEST(test_one_record_saved_bytes) {
    tg_rmsnorm *l = tg_rmsnorm_new(ctx, "n", 2, (int64_t[]){4, 8}, 1e-6, true, true, TG_F32);
    tg_tensor *x = tg_requires_grad(ctx, lt_rand(ctx, TG_F32, TG_SHAPE(10, 4, 8), -1, 1));
    ck_assert_ptr_nonnull(tg_rmsnorm_forward(ctx, l, x));
    ck_assert_int_eq(tg_tape_size(ctx), 1);
    ck_assert_uint_eq(tg_tape_saved_bytes(ctx), 10 * sizeof(double) + (320 + 32) * sizeof(float));
    tg_ctx_reset(ctx);
    tg_set_grad_enabled(ctx, false);
    ck_assert_ptr_nonnull(tg_rmsnorm_forward(ctx, l, lt_rand(ctx, TG_F32, TG_SHAPE(10, 4, 8), -1, 1)));
    ck_assert_int_eq(tg_tape_size(ctx), 0);
    tg_set_grad_enabled(ctx, true);
    tg_rmsnorm_free(ctx, l);
}
END_TEST

/* Forward and every gradient bitwise equal with 1 and 4 threads. */
START_TEST(test_threads_bitwise) {
    tg_tensor *res[2][4];
    for (int t = 0; t < 2; t++) {
        tg_set_threads(ctx, t ? 4 : 1);
        tg_rng_seed(ctx, 11);
        tg_tensor *x = tg_requires_grad(ctx, lt_rand(ctx, TG_F32, TG_SHAPE(512, 256), -2, 2));
        tg_tensor *g = tg_requires_grad(ctx, lt_rand(ctx, TG_F32, TG_SHAPE(256), 0.5, 1.5));
        tg_tensor *b = tg_requires_grad(ctx, lt_rand(ctx, TG_F32, TG_SHAPE(256), -1, 1));
        tg_tensor *y = tg_rmsnorm_fused(ctx, x, g, b, 1, 1e-6);
        tg_backward_ex(ctx, y, lt_rand(ctx, TG_F32, TG_SHAPE(512, 256), -1, 1), false);
        ck_assert(tg_ok(ctx));
        res[t][0] = y, res[t][1] = x->grad, res[t][2] = g->grad, res[t][3] = b->grad;
    }
    for (int k = 0; k < 4; k++)
        ck_assert_int_eq(memcmp(res[0][k]->data, res[1][k]->data, (size_t)res[0][k]->numel * sizeof(float)), 0);
}
END_TEST

/* A context in error: nothing is done and the first error stays. */
START_TEST(test_error_state) {
    tg_rmsnorm *l = tg_rmsnorm_new(ctx, "n", 1, (int64_t[]){4}, 1e-6, true, false, TG_F32);
    tg_tensor *x = lt_rand(ctx, TG_F32, TG_SHAPE(2, 4), -1, 1);
    tg_error(ctx, TG_ERR_STATE, "test", "first");
    ck_assert_ptr_null(tg_rmsnorm_new(ctx, "m", 1, (int64_t[]){4}, 1e-6, true, false, TG_F32));
    ck_assert_ptr_null(tg_rmsnorm_forward(ctx, l, x));
    ck_assert_ptr_null(tg_rmsnorm_fused(ctx, x, NULL, NULL, 1, 1e-6));
    ck_assert_ptr_null(tg_rmsnorm_composed(ctx, x, NULL, NULL, 1, 1e-6));
    ck_assert_str_eq(tg_error_message(ctx), "test: first");
    tg_clear_error(ctx);
    ck_assert_ptr_null(tg_rmsnorm_fused(NULL, x, NULL, NULL, 1, 1e-6));
    ck_assert_ptr_null(tg_rmsnorm_new(NULL, "m", 1, (int64_t[]){4}, 1e-6, true, false, TG_F32));
    tg_rmsnorm_free(ctx, l);
    tg_rmsnorm_free(ctx, NULL);
}
END_TEST

Suite *make_rmsnorm_suite(void) {
    Suite *s = suite_create("rmsnorm");
    TCase *tc = tcase_create("rmsnorm");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_arange_3x3);
    tcase_add_test(tc, test_mean_not_sum);
    tcase_add_test(tc, test_values_naive);
    tcase_add_test(tc, test_bad_arguments);
    tcase_add_test(tc, test_affine_bias_options);
    tcase_add_test(tc, test_fresh_bias_equals_no_bias);
    tcase_add_test(tc, test_trailing_dims_and_shape_dtype);
    tcase_add_test(tc, test_scale_invariance_eps0);
    tcase_add_test(tc, test_dgamma_dbeta);
    tcase_add_test(tc, test_gradcheck);
    tcase_add_test(tc, test_float32_extreme_rows);
    tcase_add_test(tc, test_one_record_saved_bytes);
    tcase_add_test(tc, test_threads_bitwise);
    tcase_add_test(tc, test_error_state);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(make_rmsnorm_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

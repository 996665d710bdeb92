/* LayerNorm: y = (x - mean) / sqrt(var + eps) * gamma + beta over the
 * trailing normalized dims, biased variance. Values by hand, mean and
 * variance over 1 and 2 normalized dims, options, errors, the invariants a
 * student should learn (per row sum(dx) = 0 and xhat . dx = 0; dgamma and
 * dbeta formulas), gradient checks over the cases that matter, a float32
 * row of 1e4 + noise (no E[x^2] - E[x]^2 cancellation), float32 rows near
 * 1e20 and 1e-20, the tape record and thread determinism. */
#include "layers_testutil.h"

static tg_ctx *ctx;
static void setup(void) { ctx = tg_ctx_new(8); }
static void teardown(void) { tg_ctx_free(ctx); }

/* Rows worked by hand. (1, 2, 3): mean 2, biased var 2/3, so
 * y = (-1, 0, 1) / sqrt(2/3 + eps) = (-1.2247, 0, 1.2247). (0, 2): mean 1,
 * biased var 1 (an unbiased var would be 2), y = (-1, 1) / sqrt(1 + eps).
 * arange(9) as 3x3: every row is (k, k+1, k+2), so every row gives the
 * first answer. A constant row gives 0 (then beta). */
START_TEST(test_values_by_hand) {
    for (int dt = 0; dt < 2; dt++) {
        tg_dtype dtype = dt ? TG_F64 : TG_F32;
        double tol = dt ? 1e-15 : 1e-6;
        tg_layernorm *l = tg_layernorm_new(ctx, "ln", 1, (int64_t[]){3}, 1e-5, true, true, dtype);
        tg_tensor *y = tg_layernorm_forward(ctx, l, lt_tensor(ctx, dtype, TG_SHAPE(1, 3), (double[]){1, 2, 3}));
        double a = 1 / sqrt(2.0 / 3.0 + 1e-5);
        lt_assert_close_arr(ctx, "(1,2,3)", y, (double[]){-a, 0, a}, tol, tol);
        y = tg_layernorm_forward(ctx, l, tg_view(ctx, tg_arange(ctx, dtype, 0, 9, 1), TG_SHAPE(3, 3)));
        lt_assert_close_arr(ctx, "arange(9)", y, (double[]){-1.2247, 0, 1.2247, -1.2247, 0, 1.2247, -1.2247, 0, 1.2247},
                            1e-4, 0);
        y = tg_layernorm_fused(ctx, lt_tensor(ctx, dtype, TG_SHAPE(2), (double[]){0, 2}), NULL, NULL, 1, 1e-5);
        double b = 1 / sqrt(1 + 1e-5);
        lt_assert_close_arr(ctx, "(0,2)", y, (double[]){-b, b}, tol, tol);
        /* a constant row: 0 * gamma + beta */
        tg_tensor *g = lt_tensor(ctx, dtype, TG_SHAPE(3), (double[]){2, 3, 4});
        tg_tensor *be = lt_tensor(ctx, dtype, TG_SHAPE(3), (double[]){0.5, -1, 7});
        y = tg_layernorm_fused(ctx, tg_full(ctx, dtype, TG_SHAPE(2, 3), 5.0), g, be, 1, 1e-5);
        lt_assert_close_arr(ctx, "constant row", y, (double[]){0.5, -1, 7, 0.5, -1, 7}, 0, 0);
        tg_layernorm_free(ctx, l);
    }
}
END_TEST

/* Mean and variance over every normalized element when normalized_shape
 * has 2 dims: against the naive reference over 6 elements, and different
 * from normalizing each group of 3. */
START_TEST(test_two_normalized_dims) {
    tg_layernorm *l = tg_layernorm_new(ctx, "ln", 2, (int64_t[]){2, 3}, 1e-5, true, true, TG_F64);
    tg_tensor *x = lt_rand(ctx, TG_F64, TG_SHAPE(4, 2, 3), -2, 2);
    tg_tensor *y = tg_layernorm_forward(ctx, l, x);
    double *xv = lt_values(ctx, x), ref[24], ref3[24];
    lt_norm_ref(true, xv, NULL, NULL, 4, 6, 1e-5, NULL, ref);
    lt_norm_ref(true, xv, NULL, NULL, 8, 3, 1e-5, NULL, ref3);
    lt_assert_close_arr(ctx, "layernorm over (2,3)", y, ref, 1e-13, 1e-13);
    double d = 0;
    for (int i = 0; i < 24; i++) d = fmax(d, fabs(ref[i] - ref3[i]));
    ck_assert(d > 0.01);
    /* each row of 6 has mean 0 and biased variance 1 / (1 + eps / var) */
    for (int n = 0; n < 4; n++) {
        double m = 0, v = 0;
        for (int j = 0; j < 6; j++) m += tg_get_flat(ctx, y, n * 6 + j) / 6;
        for (int j = 0; j < 6; j++) v += pow(tg_get_flat(ctx, y, n * 6 + j) - m, 2) / 6;
        ck_assert_double_eq_tol(m, 0, 1e-15);
        ck_assert_double_eq_tol(v, 1, 1e-3);
    }
    free(xv);
    tg_layernorm_free(ctx, l);
}
END_TEST

/* Non-positive sizes, eps <= 0, NaN or inf eps: refused, naming the
 * argument and its value. */
START_TEST(test_bad_arguments) {
    const int64_t s4[] = {4};
    ck_assert_ptr_null(tg_layernorm_new(ctx, "n", 1, s4, 0.0, true, false, TG_F32));
    lt_assert_error(ctx, TG_ERR_VALUE, "tg_layernorm_new", "eps = 0", NULL);
    ck_assert_ptr_null(tg_layernorm_new(ctx, "n", 1, s4, -1e-6, true, false, TG_F32));
    lt_assert_error(ctx, TG_ERR_VALUE, "tg_layernorm_new", "eps = -1e-06", NULL);
    ck_assert_ptr_null(tg_layernorm_new(ctx, "n", 1, s4, NAN, true, false, TG_F32));
    lt_assert_error(ctx, TG_ERR_VALUE, "tg_layernorm_new", "eps = ", "nan", NULL);
    ck_assert_ptr_null(tg_layernorm_new(ctx, "n", 1, s4, INFINITY, true, false, TG_F32));
    lt_assert_error(ctx, TG_ERR_VALUE, "tg_layernorm_new", "eps = inf", NULL);
    ck_assert_ptr_null(tg_layernorm_new(ctx, "n", 1, s4, -INFINITY, true, false, TG_F32));
    lt_assert_error(ctx, TG_ERR_VALUE, "tg_layernorm_new", "eps = -inf", NULL);
    ck_assert_ptr_null(tg_layernorm_new(ctx, "n", 1, (int64_t[]){0}, 1e-6, true, false, TG_F32));
    lt_assert_error(ctx, TG_ERR_VALUE, "tg_layernorm_new", "normalized_shape[0] = 0", NULL);
    ck_assert_ptr_null(tg_layernorm_new(ctx, "n", 2, (int64_t[]){3, -5}, 1e-6, true, false, TG_F32));
    lt_assert_error(ctx, TG_ERR_VALUE, "tg_layernorm_new", "normalized_shape[1] = -5", NULL);
    ck_assert_ptr_null(tg_layernorm_new(ctx, "n", 0, s4, 1e-6, true, false, TG_F32));
    lt_assert_error(ctx, TG_ERR_VALUE, "tg_layernorm_new", "ndim = 0", NULL);
    ck_assert_ptr_null(tg_layernorm_new(ctx, "n", 9, s4, 1e-6, true, false, TG_F32));
    lt_assert_error(ctx, TG_ERR_VALUE, "tg_layernorm_new", "ndim = 9", NULL);
    ck_assert_ptr_null(tg_layernorm_new(ctx, "n", 1, NULL, 1e-6, true, false, TG_F32));
    lt_assert_error(ctx, TG_ERR_NULL, "tg_layernorm_new", "normalized_shape", NULL);
    ck_assert_ptr_null(tg_layernorm_new(ctx, "n", 1, s4, 1e-6, true, false, (tg_dtype)3));
    lt_assert_error(ctx, TG_ERR_DTYPE, "tg_layernorm_new", "dtype 3", NULL);
    /* the fused op: eps = 0 is allowed (invariants), negative or NaN not */
    tg_tensor *x = lt_rand(ctx, TG_F64, TG_SHAPE(2, 4), -1, 1);
    ck_assert_ptr_nonnull(tg_layernorm_fused(ctx, x, NULL, NULL, 1, 0.0));
    ck_assert_ptr_null(tg_layernorm_fused(ctx, x, NULL, NULL, 1, -1.0));
    lt_assert_error(ctx, TG_ERR_VALUE, "tg_layernorm_fused", "eps = -1", NULL);
    ck_assert_ptr_null(tg_layernorm_composed(ctx, x, NULL, NULL, 1, NAN));
    lt_assert_error(ctx, TG_ERR_VALUE, "tg_layernorm_composed", "eps = ", "nan", NULL);
    ck_assert_ptr_null(tg_layernorm_fused(ctx, x, NULL, NULL, 0, 1e-6));
    lt_assert_error(ctx, TG_ERR_VALUE, "tg_layernorm_fused", "ndim_norm = 0", "1..2", NULL);
    ck_assert_ptr_null(tg_layernorm_fused(ctx, x, NULL, NULL, 3, 1e-6));
    lt_assert_error(ctx, TG_ERR_VALUE, "tg_layernorm_fused", "ndim_norm = 3", NULL);
    ck_assert_ptr_null(tg_layernorm_fused(ctx, x, tg_ones(ctx, TG_F64, TG_SHAPE(3)), NULL, 1, 1e-6));
    lt_assert_error(ctx, TG_ERR_SHAPE, "tg_layernorm_fused", "gamma (3,)", "(4,)", "(2, 4)", NULL);
    ck_assert_ptr_null(tg_layernorm_fused(ctx, x, NULL, tg_ones(ctx, TG_F64, TG_SHAPE(2, 4)), 1, 1e-6));
    lt_assert_error(ctx, TG_ERR_SHAPE, "tg_layernorm_fused", "beta (2, 4)", NULL);
    ck_assert_ptr_null(tg_layernorm_fused(ctx, x, tg_ones(ctx, TG_F32, TG_SHAPE(4)), NULL, 1, 1e-6));
    lt_assert_error(ctx, TG_ERR_DTYPE, "tg_layernorm_fused", NULL);
    ck_assert_ptr_null(tg_layernorm_fused(ctx, tg_zeros(ctx, TG_F64, TG_SHAPE(3, 0)), NULL, NULL, 1, 1e-6));
    lt_assert_error(ctx, TG_ERR_SHAPE, "tg_layernorm_fused", "no element", NULL);
    ck_assert_ptr_null(tg_layernorm_fused(ctx, NULL, NULL, NULL, 1, 1e-6));
    lt_assert_error(ctx, TG_ERR_NULL, "tg_layernorm_fused", "'x'", NULL);
    /* no rows is fine: an empty output */
    tg_tensor *e = tg_layernorm_fused(ctx, tg_zeros(ctx, TG_F64, TG_SHAPE(0, 4)), NULL, NULL, 1, 1e-6);
    ck_assert_ptr_nonnull(e);
    ck_assert_int_eq(e->numel, 0);
}
END_TEST

/* affine=false: no gamma and zero parameters; bias=false: no beta. */
START_TEST(test_affine_bias_options) {
    char buf[256];
    tg_params p = {0};
    tg_layernorm *a0 = tg_layernorm_new(ctx, "norm0", 1, (int64_t[]){384}, TG_LAYERNORM_EPS, false, true, TG_F32);
    ck_assert_ptr_nonnull(a0);
    ck_assert_ptr_null(a0->gamma);
    ck_assert_ptr_null(a0->beta);
    ck_assert(!a0->affine && !a0->bias);
    ck_assert(tg_layernorm_params(ctx, a0, &p));
    ck_assert_int_eq(p.count, 0);
    ck_assert_int_eq(tg_module_numel(TG_MODULE(a0)), 0);
    tg_module_format(buf, sizeof buf, TG_MODULE(a0));
    ck_assert_str_eq(buf, "LayerNorm(dim=384, eps=1e-05, affine=false, bias=false)  params=0");

    tg_layernorm *a1 = tg_layernorm_new(ctx, "norm1", 1, (int64_t[]){384}, TG_LAYERNORM_EPS, true, false, TG_F32);
    ck_assert_ptr_nonnull(a1->gamma);
    ck_assert_ptr_null(a1->beta);
    for (int64_t i = 0; i < 384; i++) ck_assert_double_eq(tg_get_flat(ctx, a1->gamma, i), 1.0);
    ck_assert(tg_layernorm_params(ctx, a1, &p));
    ck_assert_int_eq(p.count, 1);
    ck_assert_str_eq(p.items[0].name, "norm1.gamma");
    ck_assert(!p.items[0].weight_decay);
    tg_module_format(buf, sizeof buf, TG_MODULE(a1));
    ck_assert_str_eq(buf, "LayerNorm(dim=384, eps=1e-05, affine=true, bias=false)  params=384");
    tg_layernorm *def = tg_layernorm_new(ctx, "ln", 1, (int64_t[]){384}, TG_LAYERNORM_EPS, true, true, TG_F32);
    tg_module_format(buf, sizeof buf, TG_MODULE(def));
    ck_assert_str_eq(buf, "LayerNorm(dim=384, eps=1e-05, affine=true, bias=true)  params=768");
    tg_layernorm_free(ctx, def);

    tg_layernorm *a2 = tg_layernorm_new(ctx, "norm2", 2, (int64_t[]){4, 8}, 1e-5, true, true, TG_F64);
    ck_assert_ptr_nonnull(a2->beta);
    ck_assert_int_eq(a2->beta->ndim, 2);
    ck_assert_int_eq(a2->beta->shape[1], 8);
    for (int64_t i = 0; i < 32; i++) ck_assert_double_eq(tg_get_flat(ctx, a2->beta, i), 0.0);
    ck_assert(tg_layernorm_params(ctx, a2, &p));
    ck_assert_int_eq(p.count, 3);
    ck_assert_str_eq(p.items[1].name, "norm2.gamma");
    ck_assert_str_eq(p.items[2].name, "norm2.beta");
    ck_assert(!p.items[1].weight_decay && !p.items[2].weight_decay);
    ck_assert(p.items[2].value->persistent && p.items[2].value->requires_grad);
    tg_module_format(buf, sizeof buf, TG_MODULE(a2));
    ck_assert_str_eq(buf, "LayerNorm(dim=(4, 8), eps=1e-05, affine=true, bias=true)  params=64");
    /* parameters survive a reset */
    tg_ctx_reset(ctx);
    ck_assert_double_eq(tg_get_flat(ctx, a2->gamma, 31), 1.0);
    tg_params_free(&p);
    tg_layernorm_free(ctx, a0);
    tg_layernorm_free(ctx, a1);
    tg_module_free(ctx, TG_MODULE(a2));
}
END_TEST

/* A fresh layer with bias computes what the same layer without bias does
 * (beta starts at 0): outputs and every gradient. */
START_TEST(test_fresh_bias_equals_no_bias) {
    for (int dt = 0; dt < 2; dt++) {
        tg_dtype dtype = dt ? TG_F64 : TG_F32;
        tg_layernorm *nb = tg_layernorm_new(ctx, "a", 1, (int64_t[]){16}, 1e-6, true, false, dtype);
        tg_layernorm *wb = tg_layernorm_new(ctx, "b", 1, (int64_t[]){16}, 1e-6, true, true, dtype);
        tg_tensor *x1 = tg_requires_grad(ctx, lt_rand(ctx, dtype, TG_SHAPE(5, 16), -2, 2));
        tg_tensor *x2 = tg_requires_grad(ctx, tg_copy(ctx, x1));
        tg_tensor *dy = lt_rand(ctx, dtype, TG_SHAPE(5, 16), -1, 1);
        tg_tensor *y1 = tg_layernorm_forward(ctx, nb, x1);
        tg_backward_ex(ctx, y1, dy, false);
        tg_tensor *y2 = tg_layernorm_forward(ctx, wb, x2);
        tg_backward_ex(ctx, y2, dy, false);
        ck_assert(tg_ok(ctx));
        ck_assert_double_eq(lt_max_abs_diff(ctx, y1, y2), 0);
        ck_assert_double_eq(lt_max_abs_diff(ctx, x1->grad, x2->grad), 0);
        ck_assert_double_eq(lt_max_abs_diff(ctx, nb->gamma->grad, wb->gamma->grad), 0);
        tg_layernorm_free(ctx, nb);
        tg_layernorm_free(ctx, wb);
        tg_ctx_reset(ctx);
    }
}
END_TEST

/* An input whose trailing dims are not normalized_shape: an error naming
 * both shapes. The output keeps the input's shape and dtype. */
START_TEST(test_trailing_dims_and_shape_dtype) {
    tg_layernorm *n = tg_layernorm_new(ctx, "n", 1, (int64_t[]){4}, 1e-6, true, false, TG_F32);
    ck_assert_ptr_null(tg_layernorm_forward(ctx, n, tg_zeros(ctx, TG_F32, TG_SHAPE(2, 5))));
    lt_assert_error(ctx, TG_ERR_SHAPE, "tg_layernorm_forward", "(2, 5)", "(4,)", NULL);
    tg_layernorm *n2 = tg_layernorm_new(ctx, "n2", 2, (int64_t[]){3, 4}, 1e-6, true, false, TG_F32);
    ck_assert_ptr_null(tg_layernorm_forward(ctx, n2, tg_zeros(ctx, TG_F32, TG_SHAPE(5, 4, 3))));
    lt_assert_error(ctx, TG_ERR_SHAPE, "tg_layernorm_forward", "(5, 4, 3)", "(3, 4)", NULL);
    ck_assert_ptr_null(tg_layernorm_forward(ctx, n2, tg_zeros(ctx, TG_F32, TG_SHAPE(4))));
    lt_assert_error(ctx, TG_ERR_SHAPE, "tg_layernorm_forward", "(4,)", "(3, 4)", NULL);
    ck_assert_ptr_null(tg_layernorm_forward(ctx, n, tg_zeros(ctx, TG_F64, TG_SHAPE(2, 4))));
    lt_assert_error(ctx, TG_ERR_DTYPE, "tg_layernorm_forward", "float64", "float32", NULL);
    ck_assert_ptr_null(tg_layernorm_forward(ctx, NULL, tg_zeros(ctx, TG_F32, TG_SHAPE(2, 4))));
    lt_assert_error(ctx, TG_ERR_NULL, "tg_layernorm_forward", "'layer'", NULL);
    ck_assert_ptr_null(tg_layernorm_forward(ctx, n, NULL));
    lt_assert_error(ctx, TG_ERR_NULL, "tg_layernorm_forward", "'x'", NULL);
    tg_layernorm_free(ctx, n);
    tg_layernorm_free(ctx, n2);

    const int64_t shapes[][4] = {{5, 1, 1, 1}, {2, 5, 1, 1}, {2, 3, 5, 1}, {1, 1, 1, 5}};
    const int nds[] = {1, 2, 3, 4};
    for (int dt = 0; dt < 2; dt++) {
        tg_dtype dtype = dt ? TG_F64 : TG_F32;
        for (int s = 0; s < 4; s++) {
            int nd = nds[s];
            tg_layernorm *l = tg_layernorm_new(ctx, "l", 1, &shapes[s][nd - 1], 1e-6, true, true, dtype);
            tg_tensor *x = lt_rand(ctx, dtype, nd, shapes[s], -1, 1);
            tg_tensor *y = tg_layernorm_forward(ctx, l, x);
            ck_assert_ptr_nonnull(y);
            ck_assert(tg_same_shape(x, y));
            ck_assert_int_eq(y->dtype, dtype);
            tg_layernorm_free(ctx, l);
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
        tg_tensor *y = tg_layernorm_fused(ctx, x, g, b, nd, 1e-6);
        tg_backward_ex(ctx, y, dy, false);
        ck_assert(tg_ok(ctx));
        double *xv = lt_values(ctx, x), *dyv = lt_values(ctx, dy), xhat[60], dg[12] = {0}, db[12] = {0};
        lt_norm_ref(true, xv, NULL, NULL, N, C, 1e-6, xhat, NULL);
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
        lt_norm_case c = {true, false, 1, 1e-5, opt & 1, (opt >> 1) & 1};
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

/* Forward and every gradient bitwise equal with 1 and 4 threads. */
START_TEST(test_threads_bitwise) {
    tg_tensor *res[2][4];
    for (int t = 0; t < 2; t++) {
        tg_set_threads(ctx, t ? 4 : 1);
        tg_rng_seed(ctx, 11);
        tg_tensor *x = tg_requires_grad(ctx, lt_rand(ctx, TG_F32, TG_SHAPE(512, 256), -2, 2));
        tg_tensor *g = tg_requires_grad(ctx, lt_rand(ctx, TG_F32, TG_SHAPE(256), 0.5, 1.5));
        tg_tensor *b = tg_requires_grad(ctx, lt_rand(ctx, TG_F32, TG_SHAPE(256), -1, 1));
        tg_tensor *y = tg_layernorm_fused(ctx, x, g, b, 1, 1e-6);
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
    tg_layernorm *l = tg_layernorm_new(ctx, "n", 1, (int64_t[]){4}, 1e-6, true, false, TG_F32);
    tg_tensor *x = lt_rand(ctx, TG_F32, TG_SHAPE(2, 4), -1, 1);
    tg_error(ctx, TG_ERR_STATE, "test", "first");
    ck_assert_ptr_null(tg_layernorm_new(ctx, "m", 1, (int64_t[]){4}, 1e-6, true, false, TG_F32));
    ck_assert_ptr_null(tg_layernorm_forward(ctx, l, x));
    ck_assert_ptr_null(tg_layernorm_fused(ctx, x, NULL, NULL, 1, 1e-6));
    ck_assert_ptr_null(tg_layernorm_composed(ctx, x, NULL, NULL, 1, 1e-6));
    ck_assert_str_eq(tg_error_message(ctx), "test: first");
    tg_clear_error(ctx);
    ck_assert_ptr_null(tg_layernorm_fused(NULL, x, NULL, NULL, 1, 1e-6));
    ck_assert_ptr_null(tg_layernorm_new(NULL, "m", 1, (int64_t[]){4}, 1e-6, true, false, TG_F32));
    tg_layernorm_free(ctx, l);
    tg_layernorm_free(ctx, NULL);
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
                tg_tensor *y = tg_layernorm_fused(ctx, x, g, b, nd, 1e-6);
                ck_assert_msg(y != NULL, "%s", tg_error_message(ctx));
                double *xv = lt_values(ctx, x), *gv = lt_values(ctx, g), *bv = lt_values(ctx, b);
                double *ref = malloc((size_t)(N * C) * sizeof *ref);
                lt_norm_ref(true, xv, gv, bv, N, C, 1e-6, NULL, ref);
                lt_assert_close_arr(ctx, "layernorm", y, ref, dt ? 1e-13 : 2e-6, dt ? 1e-13 : 2e-6);
                free(xv), free(gv), free(bv), free(ref);
            }
            tg_ctx_reset(ctx);
        }
    }
}
END_TEST

/* Per row, sum(dx) = 0 (shift invariance, for any gamma and eps) and
 * xhat . dx = 0 (scale invariance, exact at eps = 0; with gamma = 1 as
 * the issue states, though any gamma works), for any upstream gradient.
 * With eps > 0, xhat . dx = r sum(u xhat) eps / (var + eps): small, not 0. */
START_TEST(test_invariants) {
    const int64_t N = 6, C = 10;
    tg_tensor *dy = lt_rand(ctx, TG_F64, TG_SHAPE(N, C), -1, 1);
    for (int k = 0; k < 3; k++) {
        double eps = k == 2 ? 1e-5 : 0.0;
        tg_tensor *x = tg_requires_grad(ctx, lt_rand(ctx, TG_F64, TG_SHAPE(N, C), -2, 2));
        tg_tensor *g = k == 1 ? lt_rand(ctx, TG_F64, TG_SHAPE(C), 0.5, 1.5) : tg_ones(ctx, TG_F64, TG_SHAPE(C));
        tg_tensor *y = tg_layernorm_fused(ctx, x, g, NULL, 1, eps);
        tg_backward_ex(ctx, y, dy, false);
        ck_assert(tg_ok(ctx));
        double *xv = lt_values(ctx, x), *dx = lt_values(ctx, x->grad), xhat[60];
        lt_norm_ref(true, xv, NULL, NULL, N, C, eps, xhat, NULL);
        for (int64_t n = 0; n < N; n++) {
            double sum = 0, dot = 0, ndx = 0;
            for (int64_t j = 0; j < C; j++) {
                sum += dx[n * C + j];
                dot += xhat[n * C + j] * dx[n * C + j];
                ndx += dx[n * C + j] * dx[n * C + j];
            }
            ndx = sqrt(ndx * C);
            ck_assert_msg(fabs(sum) < 1e-14 * ndx, "case %d row %lld: sum(dx) = %g", k, (long long)n, sum);
            if (eps == 0)
                ck_assert_msg(fabs(dot) < 1e-14 * ndx, "case %d row %lld: xhat . dx = %g", k, (long long)n, dot);
            else
                ck_assert_msg(fabs(dot) < 1e-3 * ndx, "case %d row %lld: xhat . dx = %g", k, (long long)n, dot);
        }
        free(xv), free(dx);
    }
    /* through a fresh layer (gamma = 1): sum(dx) = 0 exactly in math */
    tg_layernorm *l = tg_layernorm_new(ctx, "ln", 2, (int64_t[]){2, 5}, 1e-5, true, true, TG_F64);
    tg_tensor *x = tg_requires_grad(ctx, lt_rand(ctx, TG_F64, TG_SHAPE(3, 2, 5), -2, 2));
    tg_tensor *y = tg_layernorm_forward(ctx, l, x);
    tg_backward_ex(ctx, y, lt_rand(ctx, TG_F64, TG_SHAPE(3, 2, 5), -1, 1), false);
    for (int64_t n = 0; n < 3; n++) {
        double sum = 0, mx = 0;
        for (int64_t j = 0; j < 10; j++) {
            sum += tg_get_flat(ctx, x->grad, n * 10 + j);
            mx = fmax(mx, fabs(tg_get_flat(ctx, x->grad, n * 10 + j)));
        }
        ck_assert(mx > 0.01 && fabs(sum) < 1e-13 * mx);
    }
    tg_layernorm_free(ctx, l);
}
END_TEST

/* A float32 row of 1e4 + small noise: E[x^2] - E[x]^2 would cancel to
 * nothing (float32 keeps ~7 digits of 1e8); the two-pass float64
 * statistics normalize it correctly, through the layer, with gradients
 * matching float64. Rows near 1e20 and 1e-20 too. */
START_TEST(test_float32_hard_rows) {
    const int64_t N = 4, C = 256;
    double xv[4 * 256], dyv[4 * 256];
    for (int64_t j = 0; j < C; j++) {
        double u = tg_rng_uniform(ctx) - 0.5;
        xv[j] = 1e4 + 0.3 * u;            /* 1e4 + noise of std ~0.09 */
        xv[C + j] = -3e4 + 2.0 * u;
        xv[2 * C + j] = (1.5 + u) * 1e20 * (j % 2 ? 1 : -1);
        xv[3 * C + j] = (1.5 + u) * 1e-20 * (j % 3 ? 1 : -1);
    }
    for (int64_t i = 0; i < N * C; i++) dyv[i] = 2.0 * tg_rng_uniform(ctx) - 1.0;
    tg_layernorm *l = tg_layernorm_new(ctx, "ln", 1, (int64_t[]){C}, 1e-5, true, true, TG_F32);
    tg_tensor *x = tg_requires_grad(ctx, lt_tensor(ctx, TG_F32, TG_SHAPE(N, C), xv));
    tg_tensor *y = tg_layernorm_forward(ctx, l, x);
    tg_backward_ex(ctx, y, lt_tensor(ctx, TG_F32, TG_SHAPE(N, C), dyv), false);
    ck_assert(tg_ok(ctx));
    double *x32 = lt_values(ctx, x), ref[4 * 256];
    lt_norm_ref(true, x32, NULL, NULL, N, C, 1e-5, NULL, ref);
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
    /* gradients: finite and close to float64 on the same values */
    tg_tensor *x64 = tg_requires_grad(ctx, lt_tensor(ctx, TG_F64, TG_SHAPE(N, C), x32));
    tg_tensor *y64 = tg_layernorm_fused(ctx, x64, NULL, NULL, 1, 1e-5);
    tg_backward_ex(ctx, y64, lt_tensor(ctx, TG_F64, TG_SHAPE(N, C), dyv), false);
    for (int64_t n = 0; n < N; n++) {
        double scale = 0;
        for (int64_t j = 0; j < C; j++) scale = fmax(scale, fabs(tg_get_flat(ctx, x64->grad, n * C + j)));
        ck_assert(scale > 0 && isfinite(scale));
        for (int64_t j = 0; j < C; j++) {
            double a = tg_get_flat(ctx, x->grad, n * C + j), b = tg_get_flat(ctx, x64->grad, n * C + j);
            ck_assert_msg(isfinite(a), "dx[%lld][%lld] = %g", (long long)n, (long long)j, a);
            ck_assert_msg(fabs(a - b) <= 2e-3 * scale, "dx[%lld][%lld]: %g vs %g", (long long)n, (long long)j, a,
                          b);
        }
    }
    free(x32);
    tg_layernorm_free(ctx, l);
}
END_TEST

/* One tape record; it saves mean and rstd (two doubles per row) and keeps
 * x and gamma for backward. */
START_TEST(test_one_record_saved_bytes) {
    tg_layernorm *l = tg_layernorm_new(ctx, "n", 1, (int64_t[]){8}, 1e-5, true, true, TG_F64);
    tg_tensor *x = tg_requires_grad(ctx, lt_rand(ctx, TG_F64, TG_SHAPE(3, 5, 8), -1, 1));
    ck_assert_ptr_nonnull(tg_layernorm_forward(ctx, l, x));
    ck_assert_int_eq(tg_tape_size(ctx), 1);
    ck_assert_uint_eq(tg_tape_saved_bytes(ctx), 2 * 15 * sizeof(double) + (120 + 8) * sizeof(double));
    tg_layernorm_free(ctx, l);
}
END_TEST

Suite *make_layernorm_suite(void) {
    Suite *s = suite_create("layernorm");
    TCase *tc = tcase_create("layernorm");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_values_by_hand);
    tcase_add_test(tc, test_two_normalized_dims);
    tcase_add_test(tc, test_values_naive);
    tcase_add_test(tc, test_bad_arguments);
    tcase_add_test(tc, test_affine_bias_options);
    tcase_add_test(tc, test_fresh_bias_equals_no_bias);
    tcase_add_test(tc, test_trailing_dims_and_shape_dtype);
    tcase_add_test(tc, test_invariants);
    tcase_add_test(tc, test_dgamma_dbeta);
    tcase_add_test(tc, test_gradcheck);
    tcase_add_test(tc, test_float32_hard_rows);
    tcase_add_test(tc, test_one_record_saved_bytes);
    tcase_add_test(tc, test_threads_bitwise);
    tcase_add_test(tc, test_error_state);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(make_layernorm_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

/* Linear: y = x W^T + b. Values against plain loops, leading dims, the
 * bias on and off, PyTorch's init, the backward products against plain
 * loops and finite differences (tg_gradcheck), one tape record with its
 * saved bytes, bitwise results for any thread count, parameters, repr,
 * the three constructors (positional, options struct, short form) and
 * every error. (Allocation failures while making a layer:
 * tests/test_modules.c, for every module kind.) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static tg_ctx *ctx;
static void setup(void) { ctx = tg_ctx_new(42); }
static void teardown(void) { tg_ctx_free(ctx); }

/* y_mj = sum_k x_mk W_jk + b_j with plain loops over double values. */
static void naive_linear(double *y, const double *x, const double *w, const double *b, int64_t M, int64_t N,
                         int64_t K) {
    for (int64_t m = 0; m < M; m++)
        for (int64_t j = 0; j < N; j++) {
            double s = b ? b[j] : 0.0;
            for (int64_t k = 0; k < K; k++) s += x[m * K + k] * w[j * K + k];
            y[m * N + j] = s;
        }
}

START_TEST(test_forward_by_hand) {
    /* x (2,3), W (2,3), b (2): y = x W^T + b computed by hand */
    tg_tensor *x = tg_test_tensor(ctx, TG_F64, TG_SHAPE(2, 3), (double[]){1, 2, 3, -1, 0, 4});
    tg_tensor *w = tg_test_tensor(ctx, TG_F64, TG_SHAPE(2, 3), (double[]){1, 0, -1, 0.5, 2, 1});
    tg_tensor *b = tg_test_tensor(ctx, TG_F64, TG_SHAPE(2), (double[]){10, -10});
    tg_tensor *y = tg_linear_fused(ctx, x, w, b);
    ck_assert_ptr_nonnull(y);
    /* row 0: 1-3+10 = 8, 0.5+4+3-10 = -2.5;  row 1: -1-4+10 = 5, -0.5+0+4-10 = -6.5 */
    tg_test_assert_close(ctx, "y", y, (double[]){8, -2.5, 5, -6.5}, 4, 0, 0);
    ck_assert_int_eq(y->ndim, 2);
    ck_assert_int_eq(y->shape[0], 2);
    ck_assert_int_eq(y->shape[1], 2);
    tg_tensor *y0 = tg_linear_fused(ctx, x, w, NULL);
    tg_test_assert_close(ctx, "y without bias", y0, (double[]){-2, 7.5, -5, 3.5}, 4, 0, 0);
}
END_TEST

/* Random shapes in both dtypes against plain loops, with leading dims. */
START_TEST(test_forward_naive_leading_dims) {
    const int64_t shapes[][4] = {{1, 1, 1, 1}, {2, 3, 5, 7}, {4, 1, 33, 17}, {3, 5, 64, 40}, {1, 70, 130, 65}};
    for (int dt = 0; dt < 2; dt++) {
        tg_dtype dtype = dt ? TG_F64 : TG_F32;
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            const int64_t A = shapes[s][0], B = shapes[s][1], K = shapes[s][2], N = shapes[s][3];
            for (int bias = 0; bias < 2; bias++) {
                tg_tensor *x = tg_test_rand(ctx, dtype, TG_SHAPE(A, B, K), -1, 1);
                tg_tensor *w = tg_test_rand(ctx, dtype, TG_SHAPE(N, K), -1, 1);
                tg_tensor *b = bias ? tg_test_rand(ctx, dtype, TG_SHAPE(N), -1, 1) : NULL;
                tg_tensor *y = tg_linear_fused(ctx, x, w, b);
                ck_assert_msg(y != NULL, "%s", tg_error_message(ctx));
                ck_assert_int_eq(y->ndim, 3);
                ck_assert_int_eq(y->shape[0], A);
                ck_assert_int_eq(y->shape[1], B);
                ck_assert_int_eq(y->shape[2], N);
                ck_assert_int_eq(y->dtype, dtype);
                double *xv = tg_test_values(ctx, x), *wv = tg_test_values(ctx, w),
                       *bv = b ? tg_test_values(ctx, b) : NULL;
                double *ref = tg_test_malloc((size_t)(A * B * N) * sizeof *ref);
                naive_linear(ref, xv, wv, bv, A * B, N, K);
                double tol = dtype == TG_F64 ? 1e-12 : 1e-5;
                tg_test_assert_close(ctx, "y", y, ref, A * B * N, tol, tol);
                free(xv), free(wv), free(bv), free(ref);
                /* the same product on the flattened 2-D x */
                tg_tensor *x2 = tg_view(ctx, x, TG_SHAPE(A * B, K));
                tg_tensor *y2 = tg_linear_fused(ctx, x2, w, b);
                ck_assert_double_eq(tg_test_max_abs_diff(ctx, y, y2), 0);
            }
            tg_ctx_reset(ctx);
        }
    }
    /* a 1-d x is one row: (K) -> (N) */
    tg_tensor *x = tg_test_tensor(ctx, TG_F64, TG_SHAPE(2), (double[]){3, -1});
    tg_tensor *w = tg_test_tensor(ctx, TG_F64, TG_SHAPE(1, 2), (double[]){2, 5});
    tg_tensor *y = tg_linear_fused(ctx, x, w, tg_test_tensor(ctx, TG_F64, TG_SHAPE(1), (double[]){0.5}));
    ck_assert_int_eq(y->ndim, 1);
    ck_assert_int_eq(y->shape[0], 1);
    ck_assert_double_eq(tg_get_flat(ctx, y, 0), 1.5);
    /* empty leading dims give an empty output */
    tg_tensor *e = tg_linear_fused(ctx, tg_zeros(ctx, TG_F64, TG_SHAPE(0, 2)), w, NULL);
    ck_assert_ptr_nonnull(e);
    ck_assert_int_eq(e->numel, 0);
    ck_assert_int_eq(e->shape[1], 1);
}
END_TEST

/* PyTorch's default init: W and b uniform in [-1/sqrt(in), 1/sqrt(in)),
 * seeded by the context; the module's forward is the fused op. */
START_TEST(test_init_and_module_forward) {
    tg_linear *l = tg_linear_new(ctx, "fc1", 100, 64, true, TG_F32);
    ck_assert_ptr_nonnull(l);
    ck_assert_int_eq(l->in_features, 100);
    ck_assert_int_eq(l->out_features, 64);
    ck_assert_int_eq(l->weight->shape[0], 64);
    ck_assert_int_eq(l->weight->shape[1], 100);
    ck_assert_int_eq(l->bias->ndim, 1);
    ck_assert_int_eq(l->bias->shape[0], 64);
    ck_assert(l->weight->persistent && l->weight->requires_grad && l->weight->grad);
    ck_assert(l->bias->persistent && l->bias->requires_grad && l->bias->grad);
    const double bound = 0.1;
    double lo = 1, hi = -1, sum = 0;
    for (int64_t i = 0; i < l->weight->numel; i++) {
        double v = tg_get_flat(ctx, l->weight, i);
        ck_assert(v >= -bound && v < bound);
        lo = fmin(lo, v), hi = fmax(hi, v), sum += v;
    }
    ck_assert(lo < -0.099 && hi > 0.099);                    /* fills the range */
    ck_assert(fabs(sum / (double)l->weight->numel) < 0.005); /* mean ~ 0 (sd of the mean 0.0012) */
    for (int64_t i = 0; i < l->bias->numel; i++) {
        double v = tg_get_flat(ctx, l->bias, i);
        ck_assert(v >= -bound && v < bound);
    }
    /* same seed, same parameters; the parameters survive a reset */
    tg_ctx *c2 = tg_ctx_new(42);
    tg_linear *l2 = tg_linear_new(c2, "fc1", 100, 64, true, TG_F32);
    tg_test_assert_same_bits("weight", l->weight, l2->weight);
    tg_test_assert_same_bits("bias", l->bias, l2->bias);
    tg_linear_free(c2, l2);
    tg_ctx_free(c2);
    tg_ctx_reset(ctx);
    tg_tensor *x = tg_test_rand(ctx, TG_F32, TG_SHAPE(2, 3, 100), -1, 1);
    tg_tensor *y = tg_linear_forward(ctx, l, x);
    ck_assert_ptr_nonnull(y);
    ck_assert_int_eq(y->shape[2], 64);
    ck_assert_double_eq(tg_test_max_abs_diff(ctx, y, tg_linear_fused(ctx, x, l->weight, l->bias)), 0);
    /* bias=false: no bias tensor, forward is x W^T */
    tg_linear *nb = tg_linear_new(ctx, NULL, 100, 8, false, TG_F64);
    ck_assert_ptr_nonnull(nb);
    ck_assert_ptr_null(nb->bias);
    ck_assert_str_eq(nb->base.name, "");
    tg_linear_free(ctx, l);
    tg_linear_free(ctx, nb);
    tg_linear_free(ctx, NULL);
}
END_TEST

/* dx = dy W, dW = dy^T x, db = column sums of dy, against plain loops; the
 * grads of leaves accumulate over two backward passes. */
START_TEST(test_backward_naive_and_accumulates) {
    const int64_t M = 6, K = 5, N = 4;
    for (int dt = 0; dt < 2; dt++) {
        tg_dtype dtype = dt ? TG_F64 : TG_F32;
        double tol = dt ? 1e-12 : 1e-5;
        tg_tensor *x = tg_requires_grad(ctx, tg_test_rand(ctx, dtype, TG_SHAPE(2, 3, K), -1, 1));
        tg_tensor *w = tg_requires_grad(ctx, tg_test_rand(ctx, dtype, TG_SHAPE(N, K), -1, 1));
        tg_tensor *b = tg_requires_grad(ctx, tg_test_rand(ctx, dtype, TG_SHAPE(N), -1, 1));
        tg_tensor *dy = tg_test_rand(ctx, dtype, TG_SHAPE(2, 3, N), -1, 1);
        double *xv = tg_test_values(ctx, x), *wv = tg_test_values(ctx, w), *dyv = tg_test_values(ctx, dy);
        double dx[30] = {0}, dw[20] = {0}, db[4] = {0};
        for (int64_t m = 0; m < M; m++)
            for (int64_t j = 0; j < N; j++) {
                db[j] += dyv[m * N + j];
                for (int64_t k = 0; k < K; k++) {
                    dx[m * K + k] += dyv[m * N + j] * wv[j * K + k];
                    dw[j * K + k] += dyv[m * N + j] * xv[m * K + k];
                }
            }
        for (int pass = 1; pass <= 2; pass++) {
            tg_tensor *y = tg_linear_fused(ctx, x, w, b);
            tg_backward_ex(ctx, y, dy, false);
            ck_assert_msg(tg_ok(ctx), "%s", tg_error_message(ctx));
            double s2[30];
            for (int i = 0; i < 30; i++) s2[i] = pass * dx[i];
            tg_test_assert_close(ctx, "dx", x->grad, s2, 30, tol, tol);
            for (int i = 0; i < 20; i++) s2[i] = pass * dw[i];
            tg_test_assert_close(ctx, "dW", w->grad, s2, 20, tol, tol);
            for (int i = 0; i < 4; i++) s2[i] = pass * db[i];
            tg_test_assert_close(ctx, "db", b->grad, s2, 4, tol, tol);
        }
        free(xv), free(wv), free(dyv);
        tg_ctx_reset(ctx);
    }
}
END_TEST

static tg_tensor *fw_linear(tg_ctx *c, tg_tensor *const *in, void *user) {
    return tg_linear_fused(c, in[0], in[1], *(bool *)user ? in[2] : NULL);
}

/* tg_gradcheck in float64 (h = 1e-6, |a - n| <= 1e-5 + 1e-3 |n|): full
 * Jacobian for small shapes, directional for a larger one (packed GEMM
 * paths), with and without bias. */
static tg_gradcheck_opts check_opts(tg_gradcheck_mode mode, uint64_t seed) {
    return (tg_gradcheck_opts){.h = 1e-6, .atol = 1e-5, .rtol = 1e-3, .mode = mode, .seed = seed};
}

START_TEST(test_gradcheck) {
    for (int bias = 0; bias < 2; bias++) {
        bool has_bias = bias;
        int n = bias ? 3 : 2;
        tg_tensor *in[3] = {tg_test_rand(ctx, TG_F64, TG_SHAPE(3, 4), -2, 2),
                            tg_test_rand(ctx, TG_F64, TG_SHAPE(5, 4), -2, 2),
                            tg_test_rand(ctx, TG_F64, TG_SHAPE(5), -2, 2)};
        tg_test_gradcheck(ctx, "linear 3x4 -> 5", fw_linear, &has_bias, n, in, check_opts(TG_GRADCHECK_FULL, 1));
        tg_tensor *in3[3] = {tg_test_rand(ctx, TG_F64, TG_SHAPE(2, 2, 3), -2, 2),
                             tg_test_rand(ctx, TG_F64, TG_SHAPE(1, 3), -2, 2),
                             tg_test_rand(ctx, TG_F64, TG_SHAPE(1), -2, 2)};
        tg_test_gradcheck(ctx, "linear 2x2x3 -> 1", fw_linear, &has_bias, n, in3, check_opts(TG_GRADCHECK_FULL, 2));
        tg_tensor *big[3] = {tg_test_rand(ctx, TG_F64, TG_SHAPE(4, 30, 70), -1, 1),
                             tg_test_rand(ctx, TG_F64, TG_SHAPE(65, 70), -1, 1),
                             tg_test_rand(ctx, TG_F64, TG_SHAPE(65), -1, 1)};
        tg_test_gradcheck(ctx, "linear 4x30x70 -> 65", fw_linear, &has_bias, n, big,
                          check_opts(TG_GRADCHECK_DIRECTIONAL, 3));
        tg_ctx_reset(ctx);
    }
}
END_TEST

/* One tape record for the whole layer; it counts W (for dx) and x (for dW)
 * as kept for backward. */
START_TEST(test_one_record_saved_bytes) {
    tg_linear *l = tg_linear_new(ctx, "fc", 16, 8, true, TG_F32);
    tg_tensor *x = tg_requires_grad(ctx, tg_test_rand(ctx, TG_F32, TG_SHAPE(10, 16), -1, 1));
    tg_tensor *y = tg_linear_forward(ctx, l, x);
    ck_assert_ptr_nonnull(y);
    ck_assert_int_eq(tg_tape_size(ctx), 1);
    ck_assert_uint_eq(tg_tape_saved_bytes(ctx), (8 * 16 + 10 * 16) * sizeof(float));
    tg_ctx_reset(ctx);
    /* x without grad: dx is not needed, so W is not counted */
    y = tg_linear_forward(ctx, l, tg_test_rand(ctx, TG_F32, TG_SHAPE(10, 16), -1, 1));
    ck_assert_int_eq(tg_tape_size(ctx), 1);
    ck_assert_uint_eq(tg_tape_saved_bytes(ctx), 10 * 16 * sizeof(float));
    tg_ctx_reset(ctx);
    /* no-grad mode records nothing */
    tg_set_grad_enabled(ctx, false);
    x = tg_requires_grad(ctx, tg_test_rand(ctx, TG_F32, TG_SHAPE(10, 16), -1, 1));
    y = tg_linear_forward(ctx, l, x);
    ck_assert_ptr_nonnull(y);
    ck_assert_int_eq(tg_tape_size(ctx), 0);
    ck_assert(!y->requires_grad);
    tg_set_grad_enabled(ctx, true);
    tg_linear_free(ctx, l);
}
END_TEST

/* Forward and every gradient are bitwise the same with 1 and 4 threads. */
START_TEST(test_threads_bitwise) {
    tg_tensor *res[2][4];
    for (int t = 0; t < 2; t++) {
        tg_set_threads(ctx, t ? 4 : 1);
        tg_rng_seed(ctx, 5);
        tg_tensor *x = tg_requires_grad(ctx, tg_test_rand(ctx, TG_F32, TG_SHAPE(300, 130), -1, 1));
        tg_tensor *w = tg_requires_grad(ctx, tg_test_rand(ctx, TG_F32, TG_SHAPE(300, 130), -1, 1));
        tg_tensor *b = tg_requires_grad(ctx, tg_test_rand(ctx, TG_F32, TG_SHAPE(300), -1, 1));
        tg_tensor *dy = tg_test_rand(ctx, TG_F32, TG_SHAPE(300, 300), -1, 1);
        tg_tensor *y = tg_linear_fused(ctx, x, w, b);
        tg_backward_ex(ctx, y, dy, false);
        ck_assert(tg_ok(ctx));
        res[t][0] = y, res[t][1] = x->grad, res[t][2] = w->grad, res[t][3] = b->grad;
    }
    for (int k = 0; k < 4; k++) tg_test_assert_same_bits("1 vs 4 threads", res[0][k], res[1][k]);
}
END_TEST

START_TEST(test_params_and_repr) {
    tg_linear *l = tg_linear_new(ctx, "fc1", 784, 256, true, TG_F32);
    tg_params p = {0};
    ck_assert(tg_linear_params(ctx, l, &p));
    ck_assert_int_eq(p.count, 2);
    ck_assert_str_eq(p.items[0].name, "fc1.weight");
    ck_assert(p.items[0].weight_decay);
    ck_assert_ptr_eq(p.items[0].value, l->weight);
    ck_assert_str_eq(p.items[1].name, "fc1.bias");
    ck_assert(!p.items[1].weight_decay);
    ck_assert_ptr_eq(p.items[1].value, l->bias);
    ck_assert_int_eq(tg_params_numel(&p), 200960);
    char buf[256];
    size_t n = tg_module_format(buf, sizeof buf, TG_MODULE(l));
    ck_assert_str_eq(buf, "Linear(in_features=784, out_features=256, bias=true)  params=200960");
    ck_assert_uint_eq(n, strlen(buf));
    ck_assert_int_eq(tg_module_numel(TG_MODULE(l)), 200960);
    /* truncation keeps snprintf semantics */
    char small[8];
    ck_assert_uint_eq(tg_module_format(small, sizeof small, TG_MODULE(l)), n);
    ck_assert_str_eq(small, "Linear(");
    /* again: a duplicate name is refused by the list */
    ck_assert(!tg_linear_params(ctx, l, &p));
    tg_test_assert_error(ctx, TG_ERR_VALUE, "duplicate", "fc1.weight", NULL);
    tg_params_free(&p);
    tg_linear *nb = tg_linear_new(ctx, "head", 3, 2, false, TG_F64);
    ck_assert(tg_linear_params(ctx, nb, &p));
    ck_assert_int_eq(p.count, 1);
    ck_assert_str_eq(p.items[0].name, "head.weight");
    tg_module_format(buf, sizeof buf, TG_MODULE(nb));
    ck_assert_str_eq(buf, "Linear(in_features=3, out_features=2, bias=false)  params=6");
    tg_params_free(&p);
    tg_linear_free(ctx, l);
    tg_module_free(ctx, TG_MODULE(nb));
}
END_TEST

START_TEST(test_errors) {
    tg_test_assert_fails(ctx, tg_linear_new(ctx, "fc", 0, 4, true, TG_F32), TG_ERR_VALUE, "tg_linear_new",
                         "in_features = 0", NULL);
    tg_test_assert_fails(ctx, tg_linear_new(ctx, "fc", 4, -2, true, TG_F32), TG_ERR_VALUE, "tg_linear_new",
                         "out_features = -2", NULL);
    tg_test_assert_fails(ctx, tg_linear_new(ctx, "fc", 4, 2, true, (tg_dtype)7), TG_ERR_DTYPE, "tg_linear_new",
                         "dtype 7", NULL);
    tg_test_assert_fails(ctx,
                         tg_linear_new(ctx, "a_name_that_is_much_longer_than_forty_seven_bytes_x", 4, 2, true, TG_F32),
                         TG_ERR_VALUE, "tg_linear_new", "at most 47", NULL);

    tg_linear *l = tg_linear_new(ctx, "fc", 384, 4, true, TG_F32);
    tg_test_assert_fails(ctx, tg_linear_forward(ctx, l, tg_zeros(ctx, TG_F32, TG_SHAPE(2, 383))), TG_ERR_SHAPE,
                         "tg_linear_forward", "(2, 383)", "383 != in_features 384", NULL);
    tg_test_assert_fails(ctx, tg_linear_forward(ctx, l, tg_zeros(ctx, TG_F64, TG_SHAPE(2, 384))), TG_ERR_DTYPE,
                         "tg_linear_forward", "float64", "float32", NULL);
    tg_test_assert_fails(ctx, tg_linear_forward(ctx, l, NULL), TG_ERR_NULL, "tg_linear_forward", "'x'", NULL);
    tg_test_assert_fails(ctx, tg_linear_forward(ctx, NULL, tg_zeros(ctx, TG_F32, TG_SHAPE(384))), TG_ERR_NULL,
                         "tg_linear_forward", "'layer'", NULL);
    tg_test_assert_fails(ctx, tg_linear_forward(ctx, l, tg_zeros(ctx, TG_F32, 0, NULL)), TG_ERR_SHAPE,
                         "tg_linear_forward", "()", NULL);

    tg_tensor *x = tg_zeros(ctx, TG_F32, TG_SHAPE(2, 3));
    tg_tensor *w = tg_zeros(ctx, TG_F32, TG_SHAPE(4, 3));
    tg_test_assert_fails(ctx, tg_linear_fused(ctx, x, tg_zeros(ctx, TG_F32, TG_SHAPE(12)), NULL), TG_ERR_SHAPE,
                         "tg_linear_fused", "weight (12,)", "2-d", NULL);
    tg_test_assert_fails(ctx, tg_linear_fused(ctx, x, tg_zeros(ctx, TG_F32, TG_SHAPE(3, 4)), NULL), TG_ERR_SHAPE,
                         "tg_linear_fused", "(2, 3)", "3 != in_features 4", "(3, 4)", NULL);
    tg_test_assert_fails(ctx, tg_linear_fused(ctx, x, w, tg_zeros(ctx, TG_F32, TG_SHAPE(3))), TG_ERR_SHAPE,
                         "tg_linear_fused", "bias (3,)", "(4,)", NULL);
    tg_test_assert_fails(ctx, tg_linear_fused(ctx, x, w, tg_zeros(ctx, TG_F64, TG_SHAPE(4))), TG_ERR_DTYPE,
                         "tg_linear_fused", NULL);
    tg_test_assert_fails(ctx, tg_linear_fused(ctx, x, tg_zeros(ctx, TG_F64, TG_SHAPE(4, 3)), NULL), TG_ERR_DTYPE,
                         "tg_linear_fused", NULL);
    tg_test_assert_fails(ctx, tg_linear_fused(ctx, x, NULL, NULL), TG_ERR_NULL, "tg_linear_fused", "'weight'", NULL);
    tg_test_assert_fails(ctx, tg_linear_fused(ctx, NULL, w, NULL), TG_ERR_NULL, "tg_linear_fused", "'x'", NULL);

    /* a context in error: nothing is done, the first error stays */
    tg_error(ctx, TG_ERR_STATE, "test", "first");
    ck_assert_ptr_null(tg_linear_new(ctx, "fc", 2, 2, true, TG_F32));
    ck_assert_ptr_null(tg_linear_forward(ctx, l, x));
    ck_assert_ptr_null(tg_linear_fused(ctx, x, w, NULL));
    ck_assert_str_eq(tg_error_message(ctx), "test: first");
    tg_clear_error(ctx);
    ck_assert_ptr_null(tg_linear_new(NULL, "fc", 2, 2, true, TG_F32));
    ck_assert_ptr_null(tg_linear_fused(NULL, x, w, NULL));
    tg_linear_free(ctx, l);
}
END_TEST

/* The three constructors make the same layer: tg_linear_new with every
 * option, tg_linear_new_ex with an options struct (NULL: the defaults) and
 * the short form tg_linear_new1 draw the same weights from the same RNG
 * state; the options change the layer; errors name the constructor. */
START_TEST(test_options_and_short_forms) {
    const tg_linear_opts d = tg_linear_defaults();
    ck_assert(d.bias);
    ck_assert_int_eq(d.dtype, TG_F32);
    tg_rng_seed(ctx, 5);
    tg_linear *a = tg_linear_new(ctx, "fc", 5, 3, true, TG_F32);
    tg_rng_seed(ctx, 5);
    tg_linear *b = tg_linear_new_ex(ctx, "fc", 5, 3, NULL);
    tg_rng_seed(ctx, 5);
    tg_linear *c = tg_linear_new1(ctx, "fc", 5, 3);
    tg_rng_seed(ctx, 5);
    tg_linear *e = tg_linear_new_ex(ctx, "fc", 5, 3, &d);
    ck_assert(tg_ok(ctx));
    tg_linear *same[] = {b, c, e};
    char want[128], got[128];
    tg_module_format(want, sizeof want, TG_MODULE(a));
    ck_assert_str_eq(want, "Linear(in_features=5, out_features=3, bias=true)  params=18");
    for (int i = 0; i < 3; i++) {
        tg_test_assert_same_bits("weight", same[i]->weight, a->weight);
        tg_test_assert_same_bits("bias", same[i]->bias, a->bias);
        tg_module_format(got, sizeof got, TG_MODULE(same[i]));
        ck_assert_str_eq(got, want);
    }
    /* options: no bias, float64 */
    tg_linear_opts o = tg_linear_defaults();
    o.bias = false;
    o.dtype = TG_F64;
    tg_linear *f = tg_linear_new_ex(ctx, "head", 4, 2, &o);
    ck_assert_ptr_nonnull(f);
    ck_assert_ptr_null(f->bias);
    ck_assert_int_eq(f->weight->dtype, TG_F64);
    ck_assert_int_eq(f->base.dtype, TG_F64);
    tg_module_format(got, sizeof got, TG_MODULE(f));
    ck_assert_str_eq(got, "Linear(in_features=4, out_features=2, bias=false)  params=8");
    /* a zeroed struct is not the defaults: no bias (as documented) */
    tg_linear *z = tg_linear_new_ex(ctx, "z", 4, 2, &(tg_linear_opts){0});
    ck_assert_ptr_null(z->bias);
    /* errors name the constructor that was called */
    tg_test_assert_fails(ctx, tg_linear_new1(ctx, "x", 0, 3), TG_ERR_VALUE, "tg_linear_new1", "in_features = 0", NULL);
    tg_test_assert_fails(ctx, tg_linear_new_ex(ctx, "x", 2, -1, NULL), TG_ERR_VALUE, "tg_linear_new_ex",
                         "out_features = -1", NULL);
    o.dtype = (tg_dtype)7;
    tg_test_assert_fails(ctx, tg_linear_new_ex(ctx, "x", 2, 2, &o), TG_ERR_DTYPE, "tg_linear_new_ex", "dtype 7", NULL);
    tg_linear *all[] = {a, b, c, e, f, z};
    for (int i = 0; i < 6; i++) tg_linear_free(ctx, all[i]);
}
END_TEST

Suite *make_linear_suite(void) {
    return tg_test_suite("linear", setup, teardown, test_forward_by_hand, test_forward_naive_leading_dims,
                         test_init_and_module_forward, test_backward_naive_and_accumulates, test_gradcheck,
                         test_one_record_saved_bytes, test_threads_bitwise, test_params_and_repr, test_errors,
                         test_options_and_short_forms, NULL);
}

int main(void) { return tg_test_run(make_linear_suite()); }

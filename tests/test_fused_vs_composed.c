/* Fused norms against their composed twins (layers/composed.c): in float64
 * they agree to 1e-12 in the output and in every gradient (dx, dgamma,
 * dbeta), for one and two normalized dims and every option; and the fused
 * op costs one tape record and saves less for backward. The test prints
 * the record counts and saved bytes of both forms (the figures the
 * normalization guide and the benchmarks quote) and asserts fused <
 * composed for each. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static tg_ctx *ctx;
static void setup(void) { ctx = tg_ctx_new(2024); }
static void teardown(void) { tg_ctx_free(ctx); }

/* What one forward + backward of a case gave. */
typedef struct run_out {
    tg_tensor *y, *dx, *dg, *db; /* copies; dg/db NULL when absent */
    int64_t records;
    size_t saved;
} run_out;

/* Runs case c on the inputs in[] (x, gamma?, beta?; all require grad) with
 * upstream gradient dy: counts the records and saved bytes of the forward
 * (the tape starts fresh: any earlier tape was consumed by its backward),
 * then back-propagates dy and copies out y and the grads. */
static run_out run_case(tg_test_norm_case c, tg_tensor **in, int n_in, tg_tensor *dy) {
    for (int k = 0; k < n_in; k++) tg_zero_grad(ctx, in[k]);
    run_out o = {0};
    tg_tensor *y = tg_test_norm_fn(ctx, in, &c);
    ck_assert_msg(y != NULL, "%s", tg_error_message(ctx));
    o.records = tg_tape_size(ctx);
    o.saved = tg_tape_saved_bytes(ctx);
    tg_backward_ex(ctx, y, dy, false);
    ck_assert_msg(tg_ok(ctx), "%s", tg_error_message(ctx));
    o.y = tg_copy(ctx, y);
    o.dx = tg_copy(ctx, in[0]->grad);
    int k = 1;
    if (c.affine) o.dg = tg_copy(ctx, in[k++]->grad);
    if (c.bias) o.db = tg_copy(ctx, in[k++]->grad);
    return o;
}

static const char *opt_name(const tg_test_norm_case *c) {
    return c->affine ? (c->bias ? "gamma+beta" : "gamma     ") : (c->bias ? "beta      " : "none      ");
}

/* Fused and composed agree to `tol` (absolute, values O(1)) in y and every
 * gradient; fused uses 1 record and fewer bytes. Prints the figures. */
static void compare(bool layernorm, bool affine, bool bias, tg_dtype dtype, int ndim, const int64_t *shape,
                    int ndim_norm, double tol, bool print) {
    tg_test_norm_case c = {layernorm ? tg_layernorm_fused : tg_rmsnorm_fused, ndim_norm,
                           layernorm ? TG_LAYERNORM_EPS : TG_RMSNORM_EPS, affine, bias};
    tg_tensor *in[3];
    int n = tg_test_norm_inputs(ctx, &c, dtype, ndim, shape, 2.0, in);
    tg_tensor *dy = tg_test_rand(ctx, dtype, ndim, shape, -1, 1);

    run_out f = run_case(c, in, n, dy);
    c.op = layernorm ? tg_layernorm_composed : tg_rmsnorm_composed;
    run_out k = run_case(c, in, n, dy);

    char what[160], s[64];
    tg_shape_str(s, sizeof s, ndim, shape);
    snprintf(what, sizeof what, "%s %s %s norm=%d %s", layernorm ? "layernorm" : "rmsnorm", tg_dtype_name(dtype), s,
             ndim_norm, opt_name(&c));
    tg_test_assert_close_tensors(ctx, "y", f.y, k.y, tol, 0);
    tg_test_assert_close_tensors(ctx, "dx", f.dx, k.dx, tol, 0);
    if (affine) tg_test_assert_close_tensors(ctx, "dgamma", f.dg, k.dg, tol, 0);
    if (bias) tg_test_assert_close_tensors(ctx, "dbeta", f.db, k.db, tol, 0);
    if (print) {
        /* the inputs x and gamma exist anyway; what each form adds on top */
        size_t own = (size_t)(in[0]->numel + (affine ? in[1]->numel : 0)) * tg_dtype_size(dtype);
        printf("%-47s records fused %2lld composed %2lld | saved bytes fused %7zu composed %7zu (%.1fx) | beyond x "
               "and gamma: fused %6zu composed %7zu\n",
               what, (long long)f.records, (long long)k.records, f.saved, k.saved, (double)k.saved / (double)f.saved,
               f.saved - own, k.saved - own);
    }
    ck_assert_msg(f.records == 1, "%s: fused made %lld records", what, (long long)f.records);
    ck_assert_msg(k.records > f.records, "%s: composed made %lld records", what, (long long)k.records);
    ck_assert_msg(f.saved < k.saved, "%s: fused saved %zu bytes, composed %zu", what, f.saved, k.saved);
}

/* Every option, 1 and 2 normalized dims, leading dims, float64 to 1e-12. */
START_TEST(test_agree_float64) {
    const bool layernorm = _i;
    const int64_t s2[] = {4, 6}, s3[] = {2, 3, 4}, s4[] = {3, 1, 5, 7};
    for (int opt = 0; opt < 4; opt++) {
        bool affine = opt & 1, bias = opt >> 1;
        compare(layernorm, affine, bias, TG_F64, 2, s2, 1, 1e-12, false);
        compare(layernorm, affine, bias, TG_F64, 3, s3, 2, 1e-12, false);
        compare(layernorm, affine, bias, TG_F64, 4, s4, 1, 1e-12, false);
        compare(layernorm, affine, bias, TG_F64, 4, s4, 3, 1e-12, false);
        compare(layernorm, affine, bias, TG_F64, 2, (const int64_t[]){33, 130}, 1, 1e-12, false);
        tg_ctx_reset(ctx);
    }
}
END_TEST

/* The figures: records and saved bytes of both forms at a model-like size
 * (64 rows of 384, as a small transformer's activations), in both dtypes
 * with the layers' default options; float32 agreement to 1e-5. */
START_TEST(test_report_records_and_bytes) {
    const int64_t s[] = {64, 384};
    printf("fused vs composed, forward of one norm with x, gamma (and beta) requiring grad:\n");
    compare(false, true, false, TG_F64, 2, s, 1, 1e-12, true);
    compare(false, true, false, TG_F32, 2, s, 1, 1e-5, true);
    compare(false, true, true, TG_F32, 2, s, 1, 1e-5, true);
    compare(true, true, true, TG_F64, 2, s, 1, 1e-12, true);
    compare(true, true, true, TG_F32, 2, s, 1, 1e-5, true);
    compare(true, false, false, TG_F32, 2, s, 1, 1e-5, true);
    compare(false, true, false, TG_F32, 3, (const int64_t[]){8, 8, 48}, 2, 1e-5, true);
    fflush(stdout);
}
END_TEST

/* The exact count for one case, so a change in either form shows up (and
 * the guide's figures stay true): RMSNorm composed = pow, mean,
 * add_scalar, pow, mul, mul (gamma) = 6 records; LayerNorm composed =
 * mean, sub, pow, mean, add_scalar, pow, mul, mul, add = 9; over two
 * normalized dims, 2 reshapes more. Fused saved bytes: per-row statistics
 * (8 bytes each) + x + gamma. */
START_TEST(test_exact_counts) {
    const int64_t N = 10, C = 16;
    for (int k = 0; k < 4; k++) {
        tg_tensor *x = tg_requires_grad(ctx, tg_test_rand(ctx, TG_F64, TG_SHAPE(N, C), -1, 1));
        tg_tensor *g = tg_requires_grad(ctx, tg_test_rand(ctx, TG_F64, TG_SHAPE(C), -1, 1));
        tg_tensor *b = tg_requires_grad(ctx, tg_test_rand(ctx, TG_F64, TG_SHAPE(C), -1, 1));
        switch (k) {
        case 0:
            ck_assert_ptr_nonnull(tg_rmsnorm_composed(ctx, x, g, NULL, 1, 1e-6));
            ck_assert_int_eq(tg_tape_size(ctx), 6);
            tg_ctx_reset(ctx);
            x = tg_requires_grad(ctx, tg_test_rand(ctx, TG_F64, TG_SHAPE(N, 4, 4), -1, 1));
            g = tg_requires_grad(ctx, tg_test_rand(ctx, TG_F64, TG_SHAPE(4, 4), -1, 1));
            ck_assert_ptr_nonnull(tg_rmsnorm_composed(ctx, x, g, NULL, 2, 1e-6));
            ck_assert_int_eq(tg_tape_size(ctx), 8);
            break;
        case 1:
            ck_assert_ptr_nonnull(tg_layernorm_composed(ctx, x, g, b, 1, 1e-5));
            ck_assert_int_eq(tg_tape_size(ctx), 9);
            break;
        case 2:
            ck_assert_ptr_nonnull(tg_rmsnorm_fused(ctx, x, g, NULL, 1, 1e-6));
            ck_assert_uint_eq(tg_tape_saved_bytes(ctx), N * 8 + (N * C + C) * 8);
            break;
        default:
            ck_assert_ptr_nonnull(tg_layernorm_fused(ctx, x, g, b, 1, 1e-5));
            ck_assert_uint_eq(tg_tape_saved_bytes(ctx), 2 * N * 8 + (N * C + C) * 8);
        }
        tg_ctx_reset(ctx);
    }
}
END_TEST

Suite *make_fused_vs_composed_suite(void) {
    Suite *s = suite_create("fused_vs_composed");
    TCase *tc =
        tg_test_tcase(s, "fused_vs_composed", setup, teardown, test_report_records_and_bytes, test_exact_counts, NULL);
    tcase_add_loop_test(tc, test_agree_float64, 0, 2); /* 0: RMSNorm, 1: LayerNorm */
    return s;
}

int main(void) { return tg_test_run(make_fused_vs_composed_suite()); }

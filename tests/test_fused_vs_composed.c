/* Fused ops against their composed twins: the norms (layers/composed.c)
 * and attention (layers/attention_composed.c). In float64 they agree to
 * 1e-12 in the output and in every gradient (dx, dgamma, dbeta; dq, dk,
 * dv), for every option; and the fused op costs one tape record and saves
 * less for backward. The test prints the record counts and saved bytes of
 * both forms (the figures the normalization and attention guides and the
 * benchmarks quote) and asserts fused < composed for each; for attention
 * at T = 256 it asserts what the fused form saves beyond its inputs and
 * output is below 1/8 of the composed form's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static tg_ctx *ctx;
static void setup(void) { ctx = tg_ctx_new(2024); }
static void teardown(void) { tg_ctx_free(ctx); }

/* What one forward + backward gave. */
typedef struct run_out {
    tg_tensor *y, *grad[3]; /* copies: the output, then each input's grad */
    int64_t records;
    size_t saved;
} run_out;

/* Runs f on in[0 .. n) (all require grad) with upstream gradient dy:
 * counts the records and saved bytes of the forward (the tape starts
 * fresh: any earlier tape was consumed by its backward), then
 * back-propagates dy and copies out y and the grads. */
static run_out run(tg_gradcheck_fn f, void *user, tg_tensor **in, int n, tg_tensor *dy) {
    for (int k = 0; k < n; k++) tg_zero_grad(ctx, in[k]);
    run_out o = {0};
    tg_tensor *y = f(ctx, in, user);
    ck_assert_msg(y != NULL, "%s", tg_error_message(ctx));
    o.records = tg_tape_size(ctx);
    o.saved = tg_tape_saved_bytes(ctx);
    tg_backward_ex(ctx, y, dy, false);
    ck_assert_msg(tg_ok(ctx), "%s", tg_error_message(ctx));
    o.y = tg_copy(ctx, y);
    for (int k = 0; k < n; k++) o.grad[k] = tg_copy(ctx, in[k]->grad);
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

    run_out f = run(tg_test_norm_fn, &c, in, n, dy);
    c.op = layernorm ? tg_layernorm_composed : tg_rmsnorm_composed;
    run_out k = run(tg_test_norm_fn, &c, in, n, dy);

    char what[160], s[64];
    tg_shape_str(s, sizeof s, ndim, shape);
    snprintf(what, sizeof what, "%s %s %s norm=%d %s", layernorm ? "layernorm" : "rmsnorm", tg_dtype_name(dtype), s,
             ndim_norm, opt_name(&c));
    tg_test_assert_close_tensors(ctx, "y", f.y, k.y, tol, 0);
    /* the inputs: x, then gamma (affine), then beta (bias) */
    tg_test_assert_close_tensors(ctx, "dx", f.grad[0], k.grad[0], tol, 0);
    if (affine) tg_test_assert_close_tensors(ctx, "dgamma", f.grad[1], k.grad[1], tol, 0);
    if (bias) tg_test_assert_close_tensors(ctx, "dbeta", f.grad[n - 1], k.grad[n - 1], tol, 0);
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

/* ---- attention ------------------------------------------------------------------ */

/* Attention, fused or composed, as a tg_gradcheck_fn of (q, k, v). */
typedef struct attn_case {
    bool fused, causal;
    double scale;
} attn_case;
static tg_tensor *attention_fn(tg_ctx *c, tg_tensor *const *in, void *user) {
    const attn_case *a = user;
    return (a->fused ? tg_attention : tg_attention_composed)(c, in[0], in[1], in[2], a->causal, a->scale);
}

/* Fused and composed attention agree to tol in o, dq, dk, dv; fused is one
 * record saving fewer bytes. With print, prints both forms' records and
 * saved bytes, in total and beyond the inputs q, k, v and the output
 * (what each form adds to keep for backward), and returns the ratio of
 * the latter (fused / composed). */
static double compare_attention(tg_dtype dt, int64_t B, int64_t H, int64_t Tq, int64_t Tk, int64_t D, int64_t Dv,
                                bool causal, double scale, double tol, bool print) {
    tg_tensor *q = tg_requires_grad(ctx, tg_test_rand(ctx, dt, TG_SHAPE(B, H, Tq, D), -2, 2));
    tg_tensor *k = tg_requires_grad(ctx, tg_test_rand(ctx, dt, TG_SHAPE(B, H, Tk, D), -2, 2));
    tg_tensor *v = tg_requires_grad(ctx, tg_test_rand(ctx, dt, TG_SHAPE(B, H, Tk, Dv), -2, 2));
    tg_tensor *dO = tg_test_rand(ctx, dt, TG_SHAPE(B, H, Tq, Dv), -1, 1);
    tg_tensor *in[3] = {q, k, v};
    attn_case ac = {true, causal, scale};
    run_out f = run(attention_fn, &ac, in, 3, dO);
    ac.fused = false;
    run_out c = run(attention_fn, &ac, in, 3, dO);
    char what[160];
    snprintf(what, sizeof what, "attention %s B %lld H %lld Tq %lld Tk %lld D %lld Dv %lld %s", tg_dtype_name(dt),
             (long long)B, (long long)H, (long long)Tq, (long long)Tk, (long long)D, (long long)Dv,
             causal ? "causal" : "full");
    tg_test_assert_close_tensors(ctx, "o", f.y, c.y, tol, 0);
    tg_test_assert_close_tensors(ctx, "dq", f.grad[0], c.grad[0], tol, 0);
    tg_test_assert_close_tensors(ctx, "dk", f.grad[1], c.grad[1], tol, 0);
    tg_test_assert_close_tensors(ctx, "dv", f.grad[2], c.grad[2], tol, 0);
    ck_assert_msg(f.records == 1, "%s: fused made %lld records", what, (long long)f.records);
    ck_assert_msg(c.records == (causal ? 6 : 5), "%s: composed made %lld records", what, (long long)c.records);
    ck_assert_msg(f.saved < c.saved, "%s: fused saved %zu bytes, composed %zu", what, f.saved, c.saved);
    const size_t es = tg_dtype_size(dt);
    const size_t io = (size_t)(q->numel + k->numel + v->numel + B * H * Tq * Dv) * es; /* q, k, v, o */
    const size_t inputs = (size_t)(q->numel + k->numel + v->numel) * es;
    /* the fused form counts q, k, v and o; the composed one q, v and the
     * transposed copy of k (as big as k), but not its output */
    const size_t f_extra = f.saved - io, c_extra = c.saved - inputs;
    if (print)
        printf("%-60s records fused %d composed %lld | saved bytes fused %9zu composed %9zu (%.2fx) | beyond q, k, "
               "v, o: fused %7zu composed %9zu (1/%.0f)\n",
               what, (int)f.records, (long long)c.records, f.saved, c.saved, (double)c.saved / (double)f.saved, f_extra,
               c_extra, (double)c_extra / (double)f_extra);
    return (double)f_extra / (double)c_extra;
}

/* Every option, several blocks of 64 rows, Tq != Tk, float64 to 1e-12. */
START_TEST(test_attention_agree_float64) {
    compare_attention(TG_F64, 1, 1, 1, 1, 1, 1, true, 0, 1e-12, false);
    compare_attention(TG_F64, 2, 3, 17, 17, 8, 5, true, 0, 1e-12, false);
    compare_attention(TG_F64, 2, 2, 130, 130, 16, 16, true, 0, 1e-12, false);
    compare_attention(TG_F64, 2, 2, 130, 130, 16, 16, false, 0.3, 1e-12, false);
    compare_attention(TG_F64, 1, 3, 70, 33, 8, 12, false, 0, 1e-12, false);
    compare_attention(TG_F64, 1, 2, 1, 100, 8, 8, false, 0, 1e-12, false);
}
END_TEST

/* The figures at the benchmark's size (B 4, H 6, T 256, D 64), both
 * dtypes; float32 agreement to 1e-5. Beyond its inputs and output the
 * fused op keeps one float64 per query row, the composed form the
 * (T, T) probabilities twice and the mask: the ratio is O(1/T). */
START_TEST(test_attention_report) {
    printf("fused vs composed attention, forward with q, k, v requiring grad:\n");
    double r32 = compare_attention(TG_F32, 4, 6, 256, 256, 64, 64, true, 0, 1e-5, true);
    ck_assert_msg(r32 < 1.0 / 8, "beyond q, k, v, o: fused / composed = %g (f32)", r32);
    if (!tg_test_under_valgrind() && !tg_test_under_sanitizer()) { /* minutes there */
        tg_ctx_reset(ctx);
        double r64 = compare_attention(TG_F64, 4, 6, 256, 256, 64, 64, true, 0, 1e-12, true);
        ck_assert_msg(r64 < 1.0 / 8, "beyond q, k, v, o: fused / composed = %g (f64)", r64);
        tg_ctx_reset(ctx);
        compare_attention(TG_F32, 4, 6, 256, 256, 64, 64, false, 0, 1e-5, true);
        tg_ctx_reset(ctx);
        compare_attention(TG_F32, 2, 4, 1024, 1024, 32, 32, true, 0, 1e-5, true);
    }
    fflush(stdout);
}
END_TEST

Suite *make_fused_vs_composed_suite(void) {
    Suite *s = suite_create("fused_vs_composed");
    TCase *tc = tg_test_tcase(s, "fused_vs_composed", setup, teardown, test_report_records_and_bytes, test_exact_counts,
                              test_attention_agree_float64, test_attention_report, NULL);
    tcase_add_loop_test(tc, test_agree_float64, 0, 2); /* 0: RMSNorm, 1: LayerNorm */
    tcase_set_timeout(tc, 120);
    return s;
}

int main(void) { return tg_test_run(make_fused_vs_composed_suite()); }

/* The op registry: every entry is complete and its index is its id, every
 * spec builds, specs are parsed strictly and missing arguments get the op's
 * defaults, builders keep inputs off the kinks, per-op steps and
 * tolerances apply per dtype, and -- the point of it all -- every
 * registered op passes tg_gradcheck in float64 over every one of its shape
 * variants (full mode for small inputs, directional for larger ones;
 * directional for every variant too). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tapegrad.h"
#include "tapegrad/check.h"
#include "testutil.h"

static tg_ctx *ctx;
static void setup(void) { ctx = tg_ctx_new(1234); }
static void teardown(void) { tg_ctx_free(ctx); }

/* Inputs up to this many checked elements are checked element by element. */
#define FULL_MAX 300

static int64_t checked_numel(const tg_op_case *c) {
    int64_t n = 0;
    for (int k = 0; k < c->n_inputs; k++)
        if (c->check >> k & 1u) n += c->inputs[k]->numel;
    return n;
}

static void assert_pass(const tg_op_info *op, const char *spec, const char *mode, const tg_gradcheck_result *r) {
    ck_assert_msg(tg_ok(ctx), "%s '%s' (%s): error: %s", op->def->name, spec, mode, tg_error_message(ctx));
    ck_assert_msg(r->pass,
                  "%s '%s' (%s): gradcheck failed: %lld of %lld comparisons; worst: input %d index %lld analytic "
                  "%.10g numeric %.10g (max abs err %.3g, max rel err %.3g, h=%g atol=%g rtol=%g)",
                  op->def->name, spec, mode, (long long)r->n_failed, (long long)r->n_checked, r->worst_input,
                  (long long)r->worst_index, r->worst_analytic, r->worst_numeric, r->max_abs_err, r->max_rel_err, r->h,
                  r->atol, r->rtol);
    ck_assert_msg(r->n_checked > 0, "%s '%s' (%s): nothing was checked", op->def->name, spec, mode);
}

/* Every variant of op _i, float64: full mode when small, directional always. */
START_TEST(test_gradcheck_every_op_f64) {
    const tg_op_info *op = tg_registry_get(_i);
    ck_assert_ptr_nonnull(op);
    for (int v = 0; v < op->n_variants; v++) {
        const char *spec = op->variants[v];
        tg_op_case c;
        ck_assert_msg(tg_registry_build(ctx, op, spec, TG_F64, &c), "%s '%s': %s", op->def->name, spec,
                      tg_error_message(ctx));
        tg_gradcheck_result r;
        tg_gradcheck_opts o = {0};
        o.seed = 7 + (uint64_t)v;
        if (checked_numel(&c) <= FULL_MAX) {
            o.mode = TG_GRADCHECK_FULL;
            tg_registry_check(ctx, op, v, TG_F64, &o, &r);
            assert_pass(op, spec, "full", &r);
            ck_assert_int_eq(r.n_checked, checked_numel(&c));
        }
        o.mode = TG_GRADCHECK_DIRECTIONAL;
        tg_registry_check(ctx, op, v, TG_F64, &o, &r);
        assert_pass(op, spec, "directional", &r);
        tg_ctx_reset(ctx);
    }
}
END_TEST

/* float32 is refused by default (and says why); allowed, every variant of
 * every op passes a directional check with its own float32 step and
 * tolerances where it has them, else the float32 defaults. */
START_TEST(test_float32_refused_then_allowed) {
    const tg_op_info *op = tg_registry_get(_i);
    tg_gradcheck_result r;
    ck_assert(!tg_registry_check(ctx, op, 0, TG_F32, NULL, &r));
    ck_assert_int_eq(tg_status_of(ctx), TG_ERR_DTYPE);
    ck_assert_ptr_nonnull(strstr(tg_error_message(ctx), "float32"));
    ck_assert_ptr_nonnull(strstr(tg_error_message(ctx), "round-off"));
    ck_assert(!r.pass);
    tg_clear_error(ctx);
    tg_gradcheck_opts o = {0};
    o.allow_float32 = true;
    o.mode = TG_GRADCHECK_DIRECTIONAL;
    /* the op's own float32 step and tolerances, else the float32 defaults */
    tg_gradcheck_tol own = op->def->f32;
    double h = own.h > 0 ? own.h : 1e-3, atol = own.atol > 0 ? own.atol : 1e-3, rtol = own.rtol > 0 ? own.rtol : 1e-2;
    for (int v = 0; v < op->n_variants; v++) {
        tg_registry_check(ctx, op, v, TG_F32, &o, &r);
        assert_pass(op, op->variants[v], "float32 directional", &r);
        ck_assert(r.h == h && r.atol == atol && r.rtol == rtol);
        tg_ctx_reset(ctx);
    }
}
END_TEST

/* Entry i of the table has index (id) i, a unique name that finds it, and
 * every field a check needs. */
START_TEST(test_table_complete) {
    ck_assert_int_gt(tg_registry_count(), 0);
    for (int i = 0; i < tg_registry_count(); i++) {
        const tg_op_info *op = tg_registry_get(i);
        ck_assert_ptr_nonnull(op);
        ck_assert_int_eq(tg_registry_index(op), i);
        ck_assert_ptr_nonnull(op->def->name);
        ck_assert_ptr_eq(tg_registry_find(op->def->name), op);
        ck_assert_ptr_nonnull(op->summary);
        ck_assert_ptr_nonnull(op->spec_help);
        ck_assert(op->build != NULL);
        ck_assert(op->forward != NULL);
        ck_assert_int_gt(op->n_variants, 0);
        ck_assert_ptr_null(op->variants[op->n_variants]);
        for (int v = 0; v < op->n_variants; v++) ck_assert_ptr_nonnull(op->variants[v]);
        ck_assert(op->def->f64.h >= 0 && op->def->f64.atol >= 0 && op->def->f64.rtol >= 0);
        ck_assert(op->def->f32.h >= 0 && op->def->f32.atol >= 0 && op->def->f32.rtol >= 0);
        for (int j = 0; j < i; j++) ck_assert_str_ne(tg_registry_get(j)->def->name, op->def->name);
    }
    ck_assert_ptr_null(tg_registry_get(-1));
    ck_assert_ptr_null(tg_registry_get(tg_registry_count()));
    ck_assert_ptr_null(tg_registry_find("no_such_op"));
    ck_assert_ptr_null(tg_registry_find(NULL));
    ck_assert_int_eq(tg_registry_index(NULL), -1);
    tg_op_info copy = *tg_registry_get(0);
    ck_assert_int_eq(tg_registry_index(&copy), -1);
}
END_TEST

/* Every variant builds in both dtypes, the forward runs, and the inputs
 * have the spec's shapes. */
START_TEST(test_every_variant_builds) {
    const tg_op_info *op = tg_registry_get(_i);
    for (int d = 0; d < 2; d++) {
        tg_dtype dt = d ? TG_F64 : TG_F32;
        for (int v = 0; v < op->n_variants; v++) {
            tg_op_case c;
            ck_assert_msg(tg_registry_build(ctx, op, op->variants[v], dt, &c), "%s '%s': %s", op->def->name,
                          op->variants[v], tg_error_message(ctx));
            ck_assert_ptr_eq(c.op, op);
            ck_assert_str_eq(c.spec, op->variants[v]);
            ck_assert_int_gt(c.n_inputs, 0);
            ck_assert_uint_ne(c.check, 0);
            for (int k = 0; k < c.n_inputs; k++) {
                ck_assert_ptr_nonnull(c.inputs[k]);
                ck_assert_ptr_nonnull(c.input_names[k]);
                ck_assert_int_eq(c.inputs[k]->dtype, dt);
                ck_assert(!c.inputs[k]->requires_grad);
                for (int64_t i = 0; i < c.inputs[k]->numel; i++) ck_assert(isfinite(tg_get_flat(ctx, c.inputs[k], i)));
            }
            tg_tensor *y = tg_registry_forward(ctx, &c);
            ck_assert_msg(y != NULL, "%s '%s': forward: %s", op->def->name, op->variants[v], tg_error_message(ctx));
            ck_assert_int_eq(y->dtype, dt);
            tg_ctx_reset(ctx);
        }
    }
}
END_TEST

/* A NULL spec is the first variant. */
START_TEST(test_null_spec_is_first_variant) {
    const tg_op_info *op = tg_registry_find("add");
    tg_op_case c;
    ck_assert(tg_registry_build(ctx, op, NULL, TG_F64, &c));
    ck_assert_str_eq(c.spec, op->variants[0]);
}
END_TEST

/* The spec grammar: shapes, 0-d, arguments; malformed specs are
 * TG_ERR_FORMAT naming the op and the spec. */
START_TEST(test_spec_parsing) {
    const tg_op_info *add = tg_registry_find("add");
    tg_op_case c;
    ck_assert(tg_registry_build(ctx, add, "2x1x3,()", TG_F64, &c));
    ck_assert_int_eq(c.n_shapes, 2);
    ck_assert_int_eq(c.ndim[0], 3);
    ck_assert_int_eq(c.shape[0][0], 2);
    ck_assert_int_eq(c.shape[0][1], 1);
    ck_assert_int_eq(c.shape[0][2], 3);
    ck_assert_int_eq(c.ndim[1], 0);
    ck_assert_int_eq(c.inputs[1]->numel, 1);
    ck_assert_str_eq(c.input_names[0], "a");
    ck_assert_str_eq(c.input_names[1], "b");
    ck_assert_uint_eq(c.check, 3);

    const tg_op_info *ms = tg_registry_find("mul_scalar");
    ck_assert(tg_registry_build(ctx, ms, "4x5;s=-2.5", TG_F64, &c));
    ck_assert_int_eq(c.n_args, 1);
    ck_assert_str_eq(c.arg_name[0], "s");
    ck_assert_str_eq(c.arg_value[0], "-2.5");
    tg_tensor *y = tg_registry_forward(ctx, &c);
    ck_assert_ptr_nonnull(y);
    for (int64_t i = 0; i < y->numel; i++)
        ck_assert_double_eq_tol(tg_get_flat(ctx, y, i), -2.5 * tg_get_flat(ctx, c.inputs[0], i), 1e-12);

    static const char *const bad[] = {"",                    /* no shape */
                                      "2x,3",                /* dangling x */
                                      "2x3,",                /* dangling comma */
                                      "2xx3,3",              /* empty size */
                                      "a,3",                 /* not a number */
                                      "-2,3",                /* negative */
                                      "1x1x1x1x1x1x1x1x1,1", /* too many dims */
                                      "2,3;s",               /* argument without = */
                                      "2,3;=1",              /* argument without key */
                                      "2,3;q=1",             /* unknown argument */
                                      NULL};
    for (int i = 0; bad[i]; i++) {
        tg_clear_error(ctx);
        ck_assert_msg(!tg_registry_build(ctx, add, bad[i], TG_F64, &c), "spec '%s' accepted", bad[i]);
        ck_assert_msg(tg_status_of(ctx) == TG_ERR_FORMAT || tg_status_of(ctx) == TG_ERR_SHAPE, "spec '%s': %s", bad[i],
                      tg_error_message(ctx));
        ck_assert_ptr_nonnull(strstr(tg_error_message(ctx), "tg_registry_build"));
        ck_assert_ptr_nonnull(strstr(tg_error_message(ctx), "add"));
    }
    tg_clear_error(ctx);
    /* wrong number of shapes */
    ck_assert(!tg_registry_build(ctx, add, "2x3", TG_F64, &c));
    ck_assert_int_eq(tg_status_of(ctx), TG_ERR_SHAPE);
    ck_assert_ptr_nonnull(strstr(tg_error_message(ctx), "2x3"));
    tg_clear_error(ctx);
    /* a number argument that is not a number */
    ck_assert(!tg_registry_build(ctx, ms, "3;s=abc", TG_F64, &c));
    ck_assert_int_eq(tg_status_of(ctx), TG_ERR_FORMAT);
    tg_clear_error(ctx);
    ck_assert(!tg_registry_build(ctx, ms, "3;s=1;s=2", TG_F64, &c));
    ck_assert_int_eq(tg_status_of(ctx), TG_ERR_FORMAT);
    tg_clear_error(ctx);
    /* shapes the op itself refuses: the op's error */
    ck_assert(tg_registry_build(ctx, add, "2x3,4", TG_F64, &c));
    ck_assert_ptr_null(tg_registry_forward(ctx, &c));
    ck_assert_int_eq(tg_status_of(ctx), TG_ERR_SHAPE);
}
END_TEST

/* Builders keep inputs off the kinks. */
START_TEST(test_inputs_avoid_kinks) {
    tg_op_case c;
    const char *away0[] = {"abs", "relu", "leaky_relu", NULL};
    for (int i = 0; away0[i]; i++) {
        const tg_op_info *op = tg_registry_find(away0[i]);
        if (!op) continue; /* not registered yet */
        ck_assert(tg_registry_build(ctx, op, "40x50", TG_F64, &c));
        int neg = 0;
        for (int64_t j = 0; j < c.inputs[0]->numel; j++) {
            double x = tg_get_flat(ctx, c.inputs[0], j);
            ck_assert_msg(fabs(x) >= 0.2, "%s input %g near 0", away0[i], x);
            neg += x < 0;
        }
        ck_assert_int_gt(neg, 500); /* both signs are covered */
        ck_assert_int_lt(neg, 1500);
    }
    const char *pos[] = {"log", "sqrt", "pow_scalar", NULL};
    for (int i = 0; pos[i]; i++) {
        const tg_op_info *op = tg_registry_find(pos[i]);
        if (!op) continue;
        ck_assert(tg_registry_build(ctx, op, "40x50", TG_F64, &c));
        for (int64_t j = 0; j < c.inputs[0]->numel; j++) ck_assert(tg_get_flat(ctx, c.inputs[0], j) >= 0.5);
    }
    const tg_op_info *div = tg_registry_find("div");
    ck_assert(tg_registry_build(ctx, div, "40x50,40x50", TG_F64, &c));
    for (int64_t j = 0; j < c.inputs[1]->numel; j++) ck_assert(fabs(tg_get_flat(ctx, c.inputs[1], j)) >= 0.5);
    const tg_op_info *mx = tg_registry_find("max_axis");
    if (mx) {
        ck_assert(tg_registry_build(ctx, mx, "20x30;axis=1", TG_F64, &c));
        int64_t n = c.inputs[0]->numel;
        double *v = malloc((size_t)n * sizeof *v);
        for (int64_t j = 0; j < n; j++) v[j] = tg_get_flat(ctx, c.inputs[0], j);
        for (int64_t a = 0; a < n; a++)
            for (int64_t b = a + 1; b < n; b++) ck_assert(fabs(v[a] - v[b]) >= 4.0 / (double)n - 1e-12);
        free(v);
    }
}
END_TEST

/* Per-op tolerances apply only where the options leave them 0; explicit
 * options win; the check mask selects the differentiable inputs. */
START_TEST(test_check_options) {
    const tg_op_info *add = tg_registry_find("add");
    tg_gradcheck_result r;
    tg_gradcheck_opts o = {0};
    o.h = 1e-5;
    o.atol = 2e-5;
    o.rtol = 3e-3;
    ck_assert(tg_registry_check(ctx, add, 0, TG_F64, &o, &r));
    ck_assert(r.h == 1e-5 && r.atol == 2e-5 && r.rtol == 3e-3);
    o.inputs = 2; /* only b */
    ck_assert(tg_registry_check(ctx, add, 0, TG_F64, &o, &r));
    ck_assert(!r.input[0].checked);
    ck_assert(r.input[1].checked);
    ck_assert_int_eq(r.n_checked, 12);
    o.inputs = 4; /* no such input */
    ck_assert(!tg_registry_check(ctx, add, 0, TG_F64, &o, &r));
    ck_assert_int_eq(tg_status_of(ctx), TG_ERR_VALUE);
    tg_clear_error(ctx);
    ck_assert(!tg_registry_check(ctx, add, add->n_variants, TG_F64, NULL, &r));
    ck_assert_int_eq(tg_status_of(ctx), TG_ERR_INDEX);
    tg_clear_error(ctx);
    ck_assert(!tg_registry_check(ctx, NULL, 0, TG_F64, NULL, &r));
    ck_assert_int_eq(tg_status_of(ctx), TG_ERR_NULL);
    tg_clear_error(ctx);
    ck_assert(!tg_registry_check(ctx, add, 0, TG_F64, NULL, NULL));
    ck_assert_int_eq(tg_status_of(ctx), TG_ERR_NULL);
    tg_clear_error(ctx);
    /* in error: nothing happens */
    tg_error(ctx, TG_ERR_VALUE, "test", "earlier error");
    ck_assert(!tg_registry_check(ctx, add, 0, TG_F64, NULL, &r));
    ck_assert_str_eq(tg_error_message(ctx), "test: earlier error");
    tg_op_case c;
    ck_assert(!tg_registry_build(ctx, add, NULL, TG_F64, &c));
    ck_assert_ptr_null(tg_registry_forward(ctx, &c));
}
END_TEST

/* Arguments a spec leaves out get the op's declared defaults; the forward
 * reads them from the case. */
START_TEST(test_argument_defaults) {
    tg_op_case c;
    const tg_op_info *rn = tg_registry_find("rmsnorm"), *ln = tg_registry_find("layernorm");
    ck_assert(tg_registry_build(ctx, rn, "4x8;bias=1", TG_F64, &c));
    ck_assert_int_eq(c.n_args, 4);
    ck_assert_str_eq(tg_registry_arg(&c, "bias"), "1");
    ck_assert_double_eq(strtod(tg_registry_arg(&c, "eps"), NULL), TG_RMSNORM_EPS);
    ck_assert_str_eq(tg_registry_arg(&c, "norm"), "1");
    ck_assert_str_eq(tg_registry_arg(&c, "affine"), "1");
    ck_assert_int_eq(c.n_inputs, 3);
    ck_assert(tg_registry_build(ctx, ln, "4x8", TG_F64, &c));
    ck_assert_double_eq(strtod(tg_registry_arg(&c, "eps"), NULL), TG_LAYERNORM_EPS);
    ck_assert_str_eq(tg_registry_arg(&c, "bias"), "1");
    ck_assert_int_eq(c.n_inputs, 3);
    ck_assert_ptr_null(tg_registry_arg(&c, "nope"));
    ck_assert_ptr_null(tg_registry_arg(NULL, "eps"));
    /* an argument without a default stays absent: slice's end is the size */
    const tg_op_info *sl = tg_registry_find("slice");
    ck_assert(tg_registry_build(ctx, sl, "5x4;start=3", TG_F64, &c));
    ck_assert_ptr_null(tg_registry_arg(&c, "end"));
    ck_assert_str_eq(tg_registry_arg(&c, "axis"), "0");
    tg_tensor *y = tg_registry_forward(ctx, &c);
    ck_assert_ptr_nonnull(y);
    ck_assert_int_eq(y->shape[0], 2);
    /* the unknown argument names what the op takes, with the defaults */
    ck_assert(!tg_registry_build(ctx, sl, "5x4;stop=3", TG_F64, &c));
    ck_assert_int_eq(tg_status_of(ctx), TG_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(tg_error_message(ctx), "takes: axis=0,start=0,end"));
}
END_TEST

/* The options a check runs with: explicit values, else the op's own for
 * the dtype, else the dtype's defaults; the op's float32 values never leak
 * into float64. */
START_TEST(test_own_tolerances) {
    const tg_op_info *mm = tg_registry_find("matmul"), *add = tg_registry_find("add");
    ck_assert(mm->def->f32.h > 0);
    tg_gradcheck_opts o = tg_registry_opts(mm, TG_F32, NULL);
    ck_assert(o.no_defaults);
    ck_assert(o.h == mm->def->f32.h && o.atol == 1e-3 && o.rtol == 1e-2);
    o = tg_registry_opts(mm, TG_F64, NULL);
    ck_assert(o.h == 1e-6 && o.atol == 1e-5 && o.rtol == 1e-3);
    o = tg_registry_opts(add, TG_F32, NULL);
    ck_assert(o.h == 1e-3 && o.atol == 1e-3 && o.rtol == 1e-2);
    tg_gradcheck_opts mine = {0};
    mine.h = 0.5;
    mine.allow_float32 = true;
    o = tg_registry_opts(mm, TG_F32, &mine);
    ck_assert(o.h == 0.5 && o.atol == 1e-3 && o.allow_float32);
    /* used by the check, and reported */
    tg_gradcheck_result r;
    mine.h = 0;
    mine.mode = TG_GRADCHECK_DIRECTIONAL;
    ck_assert(tg_registry_check(ctx, mm, 0, TG_F32, &mine, &r));
    ck_assert(r.h == mm->def->f32.h);
    /* a 0 tolerance can be asked for once the options are resolved */
    o = tg_registry_opts(add, TG_F64, NULL);
    o.atol = 0;
    ck_assert(tg_registry_check(ctx, add, 0, TG_F64, &o, &r));
    ck_assert(r.atol == 0 && r.rtol == 1e-3);
}
END_TEST

Suite *make_registry_suite(void) {
    Suite *s = suite_create("registry");
    TCase *tc = tcase_create("table");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_table_complete);
    tcase_add_test(tc, test_null_spec_is_first_variant);
    tcase_add_test(tc, test_spec_parsing);
    tcase_add_test(tc, test_inputs_avoid_kinks);
    tcase_add_test(tc, test_check_options);
    tcase_add_test(tc, test_argument_defaults);
    tcase_add_test(tc, test_own_tolerances);
    tcase_add_loop_test(tc, test_every_variant_builds, 0, tg_registry_count());
    suite_add_tcase(s, tc);

    TCase *gc = tcase_create("gradcheck");
    tcase_add_checked_fixture(gc, setup, teardown);
    tcase_set_timeout(gc, 600);
    tcase_add_loop_test(gc, test_gradcheck_every_op_f64, 0, tg_registry_count());
    tcase_add_loop_test(gc, test_float32_refused_then_allowed, 0, tg_registry_count());
    suite_add_tcase(s, gc);
    return s;
}

int main(void) { return tg_test_run(make_registry_suite()); }

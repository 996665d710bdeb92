/* Coverage (check/coverage.c): every registered op's regions text parses,
 * regions follow the op's domain and kinks, the coverage counts what an
 * input holds, tg_registry_cover keeps every op's inputs in its domain and
 * off its kinks, and its strata visit every region in turn. */
#include <check.h>
#include <math.h>
#include <string.h>

#include "tapegrad.h"
#include "tapegrad/check.h"
#include "testutil.h"

static tg_ctx *ctx;
static void setup(void) { ctx = tg_ctx_new(7); }
static void teardown(void) { tg_ctx_free(ctx); }

static int find_region(const tg_regions *r, const char *name) {
    for (int j = 0; j < r->n; j++)
        if (!strcmp(r->r[j].name, name)) return j;
    return -1;
}

/* softplus: both signs by decade 1e-3..1e2, |x| < 1e-3, and its kinks */
START_TEST(test_regions_of_ops) {
    tg_op_case c;
    tg_regions r;
    ck_assert(tg_registry_build(ctx, tg_registry_find("softplus"), "3x4", TG_F64, &c));
    ck_assert(tg_registry_regions(ctx, &c, 0, &r));
    ck_assert_int_eq(r.n, 15);
    ck_assert_int_ge(find_region(&r, "[1,10)"), 0);
    ck_assert_int_ge(find_region(&r, "(-100,-10]"), 0);
    ck_assert_int_ge(find_region(&r, "(-0.001,0.001)"), 0);
    ck_assert_int_ge(find_region(&r, "near 20+"), 0);
    ck_assert_int_eq(r.n_kinks, 2);
    /* log: positive only, no |x| < LO */
    ck_assert(tg_registry_build(ctx, tg_registry_find("log"), "3x4", TG_F64, &c));
    ck_assert(tg_registry_regions(ctx, &c, 0, &r));
    ck_assert_int_eq(r.n, 5);
    for (int j = 0; j < r.n; j++) ck_assert(r.r[j].lo > 0);
    /* div: a any sign, b nonzero */
    ck_assert(tg_registry_build(ctx, tg_registry_find("div"), "3x4,3x4", TG_F64, &c));
    ck_assert(tg_registry_regions(ctx, &c, 0, &r));
    ck_assert_int_eq(r.n, 11);
    ck_assert(tg_registry_regions(ctx, &c, 1, &r));
    ck_assert_int_eq(r.n, 10);
    ck_assert_int_lt(find_region(&r, "(-0.001,0.001)"), 0);
}
END_TEST

/* every op's text parses (a typo in it would be an error) */
START_TEST(test_every_op_regions_parse) {
    const tg_op_info *op = tg_registry_get(_i);
    tg_op_case c;
    ck_assert_msg(tg_registry_build(ctx, op, NULL, TG_F64, &c), "%s: %s", op->def->name, tg_error_message(ctx));
    for (int k = 0; k < c.n_inputs; k++) {
        tg_regions r;
        ck_assert_msg(tg_registry_regions(ctx, &c, k, &r), "%s: %s", op->def->name, tg_error_message(ctx));
        ck_assert_int_gt(r.n, 0);
    }
}
END_TEST

START_TEST(test_bad_regions_text) {
    static const char *const V[] = {"3x4", NULL};
    const tg_op_info *relu = tg_registry_find("relu");
    tg_op_info op = *relu;
    op.regions = "x: kink=zero";
    tg_op_case c;
    ck_assert(tg_registry_build(ctx, &op, V[0], TG_F64, &c));
    tg_regions r;
    ck_assert(!tg_registry_regions(ctx, &c, 0, &r));
    ck_assert_int_eq(tg_status_of(ctx), TG_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(tg_error_message(ctx), "relu"));
}
END_TEST

START_TEST(test_coverage_counts) {
    int64_t shape[1] = {6};
    tg_tensor *x = tg_zeros(ctx, TG_F64, 1, shape);
    const double v[6] = {-50, -0.5, 0, 0.002, 3, 25};
    for (int i = 0; i < 6; i++) tg_set_flat(ctx, x, i, v[i]);
    tg_op_case c;
    tg_regions r;
    ck_assert(tg_registry_build(ctx, tg_registry_find("softplus"), "6", TG_F64, &c));
    ck_assert(tg_registry_regions(ctx, &c, 0, &r));
    tg_coverage cov;
    ck_assert(tg_coverage_of(ctx, x, &r, &cov));
    ck_assert(cov.min == -50 && cov.max == 25);
    ck_assert(cov.n_neg == 2 && cov.n_zero == 1 && cov.n_pos == 3 && cov.numel == 6);
    ck_assert(cov.decade_min == -3 && cov.decade_max == 1);
    ck_assert(cov.seen >> find_region(&r, "(-100,-10]") & 1u);
    ck_assert(cov.seen >> find_region(&r, "[10,100)") & 1u);
    ck_assert(!(cov.seen >> find_region(&r, "[0.01,0.1)") & 1u));
    ck_assert(!(cov.seen >> find_region(&r, "near 20-") & 1u));
    tg_coverage acc = {0};
    ck_assert(tg_coverage_join(&acc, &cov) && tg_coverage_join(&acc, &cov));
    ck_assert(acc.numel == 12 && acc.n_pos == 6 && acc.seen == cov.seen);
    /* misuse: an error naming the function, nothing read */
    ck_assert(!tg_coverage_join(NULL, &cov) && !tg_coverage_join(&acc, NULL) && acc.numel == 12);
    tg_test_assert_fails(ctx, tg_coverage_of(ctx, x, &r, NULL) ? x : NULL, TG_ERR_NULL, "tg_coverage_of", "cov", NULL);
    tg_test_assert_fails(ctx, tg_coverage_of(ctx, NULL, &r, &cov) ? x : NULL, TG_ERR_NULL, "tg_coverage_of", "x", NULL);
}
END_TEST

/* each op in each variant: inputs in the domain, off the kinks by the gap;
 * softplus's one element visits its 15 regions in 15 strata */
START_TEST(test_cover_every_op) {
    const tg_op_info *op = tg_registry_get(_i);
    for (int v = 0; v < op->n_variants; v++) {
        tg_op_case c;
        ck_assert(tg_registry_build(ctx, op, op->variants[v], TG_F64, &c));
        ck_assert_msg(tg_registry_cover(ctx, &c, (uint64_t)v, 4e-6, 0), "%s: %s", op->def->name, tg_error_message(ctx));
        for (int k = 0; k < c.n_inputs; k++) {
            if (!(c.check >> k & 1u)) continue;
            tg_regions r;
            ck_assert(tg_registry_regions(ctx, &c, k, &r));
            const tg_tensor *x = c.inputs[k];
            double ss = 0;
            for (int64_t i = 0; i < x->numel; i++) ss += tg_get_flat(ctx, x, i) * tg_get_flat(ctx, x, i);
            double gap = 4e-6 * sqrt(ss / (double)(x->numel ? x->numel : 1));
            for (int64_t i = 0; i < x->numel; i++) {
                double xi = tg_get_flat(ctx, x, i);
                ck_assert_msg(isfinite(xi), "%s", op->def->name);
                if (r.positive) ck_assert_msg(xi > 0, "%s %s: %g", op->def->name, op->variants[v], xi);
                if (r.nonzero) ck_assert_msg(xi != 0, "%s %s", op->def->name, op->variants[v]);
                for (int j = 0; j < r.n_kinks; j++)
                    ck_assert_msg(fabs(xi - r.kinks[j]) >= gap, "%s %s: %g within %g of kink %g", op->def->name,
                                  op->variants[v], xi, gap, r.kinks[j]);
            }
        }
        tg_ctx_reset(ctx);
    }
}
END_TEST

START_TEST(test_cover_strata) {
    const tg_op_info *op = tg_registry_find("softplus");
    uint64_t seen = 0;
    tg_regions r;
    for (uint64_t s = 0; s < 15; s++) {
        tg_op_case c;
        ck_assert(tg_registry_build(ctx, op, "()", TG_F64, &c));
        ck_assert(tg_registry_cover(ctx, &c, s, 4e-6, 0));
        ck_assert(tg_registry_regions(ctx, &c, 0, &r));
        tg_coverage cov;
        ck_assert(tg_coverage_of(ctx, c.inputs[0], &r, &cov));
        seen |= cov.seen;
    }
    ck_assert_msg(seen == ((uint64_t)1 << r.n) - 1, "seen 0x%llx of %d regions", (unsigned long long)seen, r.n);
    /* 32 elements, one stratum: every region, and 2 or more in each */
    tg_op_case c;
    ck_assert(tg_registry_build(ctx, op, "4x8", TG_F64, &c));
    ck_assert(tg_registry_cover(ctx, &c, 3, 4e-6, 0));
    tg_coverage cov;
    ck_assert(tg_coverage_of(ctx, c.inputs[0], &r, &cov));
    ck_assert(cov.seen == ((uint64_t)1 << r.n) - 1);
}
END_TEST

Suite *make_coverage_suite(void) {
    Suite *s = suite_create("coverage");
    TCase *tc = tcase_create("coverage");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_regions_of_ops);
    tcase_add_loop_test(tc, test_every_op_regions_parse, 0, tg_registry_count());
    tcase_add_test(tc, test_bad_regions_text);
    tcase_add_test(tc, test_coverage_counts);
    tcase_add_loop_test(tc, test_cover_every_op, 0, tg_registry_count());
    tcase_add_test(tc, test_cover_strata);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tg_test_run(make_coverage_suite()); }

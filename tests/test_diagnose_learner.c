/* tg_gradcheck_diagnose on a learner's mistakes in a LayerNorm with gain
 * and bias (x, gamma, beta), each a custom op (tapegrad/op.h) with a right
 * forward and one mistake in the backward: the diagnosis names it in the
 * guide's words -- gamma left out of u = gamma dy, dgamma of one row
 * assigned instead of summed over rows, dgamma and dbeta swapped, the
 * incoming gradient ignored -- where it used to say "unstructured". */
#include <math.h>
#include <string.h>

#include "tapegrad.h"
#include "tapegrad/check.h"
#include "tapegrad/op.h"
#include "testutil.h"

static tg_ctx *ctx;
static void setup(void) { ctx = tg_ctx_new(17); }
static void teardown(void) { tg_ctx_free(ctx); }

enum { RIGHT = 0, NO_GAMMA, DGAMMA_ONE_ROW, SWAPPED, IGNORE_DY };

/* y = gamma xhat + beta per row of C, xhat = (x - mean) r, r = 1 /
 * sqrt(var + eps) */
static tg_tensor *ln_forward(tg_ctx *c, tg_node *node, tg_tensor *const *in, void *user) {
    tg_node_set_scalar(c, node, 0, *(const int *)user);
    return tg_layernorm_fused(c, in[0], in[1], in[2], 1, 1e-5);
}

/* u = gamma dy; dx = r (u - mean(u) - xhat mean(u xhat)); dgamma = sum
 * over rows of dy xhat; dbeta = sum over rows of dy -- with the mistake */
static void ln_backward(tg_ctx *c, tg_node *node) {
    int bug = (int)tg_node_scalar(node, 0);
    tg_tensor *x = tg_node_input(node, 0), *gamma = tg_node_input(node, 1), *dy = tg_node_grad_output(node);
    int64_t N = x->shape[0], C = x->shape[1];
    tg_tensor *dx = tg_zeros(c, TG_F64, 2, x->shape), *dg = tg_zeros(c, TG_F64, 1, &C),
              *db = tg_zeros(c, TG_F64, 1, &C);
    double xh[16], u[16];
    for (int64_t n = 0; n < N; n++) {
        double mu = 0, var = 0, mu_u = 0, m = 0;
        for (int64_t j = 0; j < C; j++) mu += tg_get_flat(c, x, n * C + j) / (double)C;
        for (int64_t j = 0; j < C; j++) var += pow(tg_get_flat(c, x, n * C + j) - mu, 2) / (double)C;
        double r = 1.0 / sqrt(var + 1e-5);
        for (int64_t j = 0; j < C; j++) {
            double d = bug == IGNORE_DY ? 1.0 : tg_get_flat(c, dy, n * C + j);
            xh[j] = (tg_get_flat(c, x, n * C + j) - mu) * r;
            u[j] = (bug == NO_GAMMA ? 1.0 : tg_get_flat(c, gamma, j)) * d;
            mu_u += u[j] / (double)C;
            m += u[j] * xh[j] / (double)C;
        }
        for (int64_t j = 0; j < C; j++) {
            double d = tg_get_flat(c, dy, n * C + j);
            tg_set_flat(c, dx, n * C + j, r * (u[j] - mu_u - xh[j] * m));
            double sg = d * xh[j], sb = d;
            if (bug == SWAPPED) sg = d, sb = d * xh[j];
            if (bug == DGAMMA_ONE_ROW) tg_set_flat(c, dg, j, sg); /* = where += belongs */
            else tg_set_flat(c, dg, j, tg_get_flat(c, dg, j) + sg);
            tg_set_flat(c, db, j, tg_get_flat(c, db, j) + sb);
        }
    }
    tg_node_accumulate(c, node, 0, dx);
    tg_node_accumulate(c, node, 1, dg);
    tg_node_accumulate(c, node, 2, db);
}

static tg_tensor *f_ln(tg_ctx *c, tg_tensor *const *in, void *user) {
    static const tg_op_def DEF = {.name = "learner_layernorm", .forward = ln_forward, .backward = ln_backward};
    return tg_op_apply(c, &DEF, 3, in, user);
}

/* The check finds input k wrong, and the diagnosis is `kind`. */
static tg_gradcheck_diagnosis diagnose(int bug, int k, tg_diagnosis_kind kind) {
    tg_tensor *in[3] = {tg_randn(ctx, TG_F64, TG_SHAPE(3, 5), 0, 1), tg_rand(ctx, TG_F64, TG_SHAPE(5), 0.5, 1.5),
                        tg_randn(ctx, TG_F64, TG_SHAPE(5), 0, 1)};
    tg_gradcheck_result r;
    ck_assert(!tg_gradcheck(ctx, f_ln, &bug, 3, in, NULL, &r));
    ck_assert_msg(r.input[k].verdict == TG_VERDICT_WRONG, "bug %d: input %d not wrong", bug, k);
    tg_gradcheck_diagnosis d;
    ck_assert_msg(tg_gradcheck_diagnose(ctx, f_ln, &bug, 3, in, k, NULL, &d), "%s", tg_error_message(ctx));
    ck_assert_msg(d.kind == kind, "bug %d, input %d: diagnosed %s (%s), want %s", bug, k, tg_diagnosis_name(d.kind),
                  d.finding, tg_diagnosis_name(kind));
    return d;
}

START_TEST(test_right_passes) {
    int bug = RIGHT;
    tg_tensor *in[3] = {tg_randn(ctx, TG_F64, TG_SHAPE(3, 5), 0, 1), tg_rand(ctx, TG_F64, TG_SHAPE(5), 0.5, 1.5),
                        tg_randn(ctx, TG_F64, TG_SHAPE(5), 0, 1)};
    tg_gradcheck_result r;
    ck_assert(tg_gradcheck(ctx, f_ln, &bug, 3, in, NULL, &r));
}
END_TEST

START_TEST(test_missing_gain) {
    tg_gradcheck_diagnosis d = diagnose(NO_GAMMA, 0, TG_DIAG_MISSING_GAIN);
    ck_assert_int_eq((int)d.factor, 1);
    tg_test_assert_contains(d.cause, "u = gamma dy", NULL);
}
END_TEST

START_TEST(test_dgamma_one_row) {
    tg_gradcheck_diagnosis d = diagnose(DGAMMA_ONE_ROW, 1, TG_DIAG_PARTIAL);
    tg_test_assert_contains(d.finding, "only the outputs of row 2", NULL);
    tg_test_assert_contains(d.cause, "summed over rows", "accumulated", NULL);
}
END_TEST

START_TEST(test_swapped) {
    tg_gradcheck_diagnosis d = diagnose(SWAPPED, 1, TG_DIAG_SWAPPED);
    ck_assert_int_eq((int)d.factor, 2);
    tg_test_assert_contains(d.cause, "dgamma and dbeta", NULL);
    d = diagnose(SWAPPED, 2, TG_DIAG_SWAPPED);
    ck_assert_int_eq((int)d.factor, 1);
}
END_TEST

START_TEST(test_ignores_dy) {
    tg_gradcheck_diagnosis d = diagnose(IGNORE_DY, 0, TG_DIAG_IGNORES_DY);
    tg_test_assert_contains(d.cause, "ignores the incoming gradient", NULL);
}
END_TEST

Suite *make_diagnose_learner_suite(void) {
    return tg_test_suite("diagnose_learner", setup, teardown, test_right_passes, test_missing_gain, test_dgamma_one_row,
                         test_swapped, test_ignores_dy, NULL);
}

int main(void) { return tg_test_run(make_diagnose_learner_suite()); }

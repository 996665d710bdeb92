/* tg_gradcheck_diagnose on a learner's mistakes, each a custom op
 * (tapegrad/op.h) with a right forward and one mistake in the backward:
 * the diagnosis names it in the guides' words where it used to say
 * "unstructured" or blame something else. In a LayerNorm with gain and
 * bias (x, gamma, beta): gamma left out of u = gamma * dy, dgamma of one
 * row assigned instead of summed over rows, dgamma and dbeta swapped, the
 * incoming gradient ignored. In attention (q, k, v): the row-sum term
 * delta dropped from dS, the score scale 1/sqrt(D) forgotten. In softmax
 * cross-entropy: the scalar dloss ignored. */
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
    /* one count in one report: the diagnosis's wrong elements are the check's */
    ck_assert_msg(d.n_wrong == r.input[k].n_wrong, "bug %d, input %d: the check counts %lld wrong, the diagnosis %lld",
                  bug, k, (long long)r.input[k].n_wrong, (long long)d.n_wrong);
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
    tg_test_assert_contains(d.cause, "u = gamma * dy", NULL);
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

/* ---- attention: O = softmax(scale Q K^T) V, one head, no mask ---- */

enum { ATT_RIGHT = 0, ATT_NO_DELTA, ATT_NO_SCALE };

static tg_tensor *att_forward(tg_ctx *c, tg_node *node, tg_tensor *const *in, void *user) {
    tg_node_set_scalar(c, node, 0, *(const int *)user);
    int64_t T = in[0]->shape[0], Dh = in[0]->shape[1];
    tg_tensor *o = tg_zeros(c, TG_F64, 2, in[0]->shape), *p = tg_zeros(c, TG_F64, TG_SHAPE(T, T));
    double scale = 1.0 / sqrt((double)Dh);
    for (int64_t i = 0; i < T; i++) {
        double s = 0, row[8];
        for (int64_t j = 0; j < T; j++) {
            double sij = 0;
            for (int64_t e = 0; e < Dh; e++)
                sij += tg_get_flat(c, in[0], i * Dh + e) * tg_get_flat(c, in[1], j * Dh + e);
            s += row[j] = exp(scale * sij);
        }
        for (int64_t j = 0; j < T; j++) tg_set_flat(c, p, i * T + j, row[j] / s);
        for (int64_t j = 0; j < T; j++)
            for (int64_t e = 0; e < Dh; e++)
                tg_set_flat(c, o, i * Dh + e,
                            tg_get_flat(c, o, i * Dh + e) + row[j] / s * tg_get_flat(c, in[2], j * Dh + e));
    }
    tg_node_save_tensor(c, node, p);
    return o;
}

/* dV = P^T dO, dP = dO V^T, delta_i = sum_j P_ij dP_ij, dS = P (dP -
 * delta), dQ = scale dS K, dK = scale dS^T Q -- with the mistake */
static void att_backward(tg_ctx *c, tg_node *node) {
    int bug = (int)tg_node_scalar(node, 0);
    tg_tensor *q = tg_node_input(node, 0), *k = tg_node_input(node, 1), *v = tg_node_input(node, 2),
              *p = tg_node_saved_tensor(node, 0), *dO = tg_node_grad_output(node);
    int64_t T = q->shape[0], Dh = q->shape[1];
    tg_tensor *dq = tg_zeros(c, TG_F64, 2, q->shape), *dk = tg_zeros(c, TG_F64, 2, q->shape),
              *dv = tg_zeros(c, TG_F64, 2, q->shape);
    double scale = bug == ATT_NO_SCALE ? 1.0 : 1.0 / sqrt((double)Dh);
    for (int64_t i = 0; i < T; i++) {
        double dS[8], delta = 0;
        for (int64_t j = 0; j < T; j++) {
            double pij = tg_get_flat(c, p, i * T + j);
            dS[j] = 0;
            for (int64_t e = 0; e < Dh; e++) {
                dS[j] += tg_get_flat(c, dO, i * Dh + e) * tg_get_flat(c, v, j * Dh + e);
                tg_set_flat(c, dv, j * Dh + e, tg_get_flat(c, dv, j * Dh + e) + pij * tg_get_flat(c, dO, i * Dh + e));
            }
            delta += pij * dS[j];
        }
        if (bug == ATT_NO_DELTA) delta = 0;
        for (int64_t j = 0; j < T; j++) {
            double ds = tg_get_flat(c, p, i * T + j) * (dS[j] - delta);
            for (int64_t e = 0; e < Dh; e++) {
                tg_set_flat(c, dq, i * Dh + e,
                            tg_get_flat(c, dq, i * Dh + e) + scale * ds * tg_get_flat(c, k, j * Dh + e));
                tg_set_flat(c, dk, j * Dh + e,
                            tg_get_flat(c, dk, j * Dh + e) + scale * ds * tg_get_flat(c, q, i * Dh + e));
            }
        }
    }
    tg_node_accumulate(c, node, 0, dq);
    tg_node_accumulate(c, node, 1, dk);
    tg_node_accumulate(c, node, 2, dv);
}

static tg_tensor *f_att(tg_ctx *c, tg_tensor *const *in, void *user) {
    static const tg_op_def DEF = {.name = "learner_attention", .forward = att_forward, .backward = att_backward};
    return tg_op_apply(c, &DEF, 3, in, user);
}

/* Attention's inputs (T, Dh) = (4, 3) as in exercise (e); input k is
 * wrong and diagnosed as `kind`. */
static tg_gradcheck_diagnosis diagnose_att(int bug, int k, tg_diagnosis_kind kind) {
    tg_tensor *in[3];
    for (int i = 0; i < 3; i++) in[i] = tg_rand(ctx, TG_F64, TG_SHAPE(4, 3), -1, 1);
    tg_gradcheck_result r;
    bool pass = tg_gradcheck(ctx, f_att, &bug, 3, in, NULL, &r);
    ck_assert_msg(pass == (bug == ATT_RIGHT), "attention bug %d: pass %d", bug, pass);
    if (bug == ATT_RIGHT) return (tg_gradcheck_diagnosis){0};
    ck_assert_msg(r.input[k].verdict == TG_VERDICT_WRONG, "attention bug %d: input %d not wrong", bug, k);
    ck_assert_msg(r.input[2].verdict == TG_VERDICT_PASS, "attention bug %d: dv wrong", bug);
    tg_gradcheck_diagnosis d;
    ck_assert_msg(tg_gradcheck_diagnose(ctx, f_att, &bug, 3, in, k, NULL, &d), "%s", tg_error_message(ctx));
    ck_assert_msg(d.kind == kind, "attention bug %d, input %d: diagnosed %s (%s | %s), want %s", bug, k,
                  tg_diagnosis_name(d.kind), d.finding, d.cause, tg_diagnosis_name(kind));
    ck_assert_msg(d.n_wrong == r.input[k].n_wrong,
                  "attention bug %d, input %d: the check counts %lld wrong, the "
                  "diagnosis %lld",
                  bug, k, (long long)r.input[k].n_wrong, (long long)d.n_wrong);
    return d;
}

START_TEST(test_attention_right) { diagnose_att(ATT_RIGHT, 0, TG_DIAG_NONE); }
END_TEST

/* delta_i = sum_j P_ij dP_ij = dO_i . o_i left out of dS = P (dP - delta):
 * the difference in dq and dk is (dO_i . o_i) times a vector per row */
START_TEST(test_attention_no_delta) {
    for (int k = 0; k < 2; k++) {
        tg_gradcheck_diagnosis d = diagnose_att(ATT_NO_DELTA, k, TG_DIAG_PROJECTION);
        tg_test_assert_contains(d.finding, "dy_i . y_i", NULL);
        tg_test_assert_contains(d.cause, "row-sum term", "delta_i = sum_j P_ij dP_ij", "dS = P (dP - delta)", NULL);
        ck_assert_msg(!strstr(d.cause, " D_i") && !strstr(d.cause, " D "), "D names the head size: %s", d.cause);
    }
}
END_TEST

/* dq = dS K and dk = dS^T Q without the score scale: sqrt(D) too big,
 * named as attention's scale, not as a root of a sum */
START_TEST(test_attention_no_scale) {
    for (int k = 0; k < 2; k++) {
        tg_gradcheck_diagnosis d = diagnose_att(ATT_NO_SCALE, k, TG_DIAG_SCALE);
        ck_assert_double_eq_tol(d.factor, sqrt(3.0), 1e-6);
        tg_test_assert_contains(d.cause, "score scale", "scale = 1/sqrt(D)", "dq = scale dS k", NULL);
        ck_assert_msg(!strstr(d.cause, "root of a sum"), "blames a root of a sum: %s", d.cause);
    }
}
END_TEST

/* ---- softmax cross-entropy (exercise (d)): a scalar loss ---- */

static const int64_t CE_T[3] = {2, 0, 1};

static tg_tensor *ce_forward(tg_ctx *c, tg_node *node, tg_tensor *const *in, void *user) {
    (void)user;
    tg_tensor *p = tg_zeros(c, TG_F64, 2, in[0]->shape), *loss = tg_zeros(c, TG_F64, 0, NULL);
    double l = 0;
    for (int64_t n = 0; n < 3; n++) {
        double s = 0;
        for (int64_t j = 0; j < 4; j++) s += exp(tg_get_flat(c, in[0], n * 4 + j));
        for (int64_t j = 0; j < 4; j++) tg_set_flat(c, p, n * 4 + j, exp(tg_get_flat(c, in[0], n * 4 + j)) / s);
        l -= log(tg_get_flat(c, p, n * 4 + CE_T[n])) / 3;
    }
    tg_set_flat(c, loss, 0, l);
    tg_node_save_tensor(c, node, p);
    return loss;
}

/* dz = (p - onehot(t)) / N, without the dloss factor */
static void ce_backward_no_dloss(tg_ctx *c, tg_node *node) {
    tg_tensor *p = tg_node_saved_tensor(node, 0), *dz = tg_zeros(c, TG_F64, 2, p->shape);
    for (int64_t e = 0; e < 12; e++)
        tg_set_flat(c, dz, e, (tg_get_flat(c, p, e) - (e % 4 == CE_T[e / 4] ? 1.0 : 0.0)) / 3);
    tg_node_accumulate(c, node, 0, dz);
}

static tg_tensor *f_ce(tg_ctx *c, tg_tensor *const *in, void *user) {
    static const tg_op_def DEF = {.name = "learner_ce", .forward = ce_forward, .backward = ce_backward_no_dloss};
    return tg_op_apply(c, &DEF, 1, in, user);
}

START_TEST(test_ce_ignores_dloss) {
    tg_tensor *z = tg_rand(ctx, TG_F64, TG_SHAPE(3, 4), -2, 2);
    tg_gradcheck_result r;
    ck_assert(!tg_gradcheck(ctx, f_ce, NULL, 1, &z, NULL, &r));
    ck_assert_int_eq(r.input[0].verdict, TG_VERDICT_WRONG);
    tg_gradcheck_diagnosis d;
    ck_assert_msg(tg_gradcheck_diagnose(ctx, f_ce, NULL, 1, &z, 0, NULL, &d), "%s", tg_error_message(ctx));
    ck_assert_msg(d.kind == TG_DIAG_IGNORES_DY, "diagnosed %s (%s)", tg_diagnosis_name(d.kind), d.finding);
    tg_test_assert_contains(d.cause, "ignores the incoming gradient", NULL);
    ck_assert_msg(d.where[0], "no where");
    /* the diagnosis counts what the check counted */
    ck_assert_int_eq(d.n_wrong, r.input[0].n_wrong);
}
END_TEST

Suite *make_diagnose_learner_suite(void) {
    return tg_test_suite("diagnose_learner", setup, teardown, test_right_passes, test_missing_gain, test_dgamma_one_row,
                         test_swapped, test_ignores_dy, test_attention_right, test_attention_no_delta,
                         test_attention_no_scale, test_ce_ignores_dloss, NULL);
}

int main(void) { return tg_test_run(make_diagnose_learner_suite()); }

/* tg_gradcheck_diagnose on seeded bugs, each a custom op (tapegrad/op.h)
 * whose forward is right and whose backward has one known mistake: the
 * diagnosis must name the pattern (and its factor), and a correct backward
 * must get no diagnosis. */
#include <math.h>
#include <string.h>

#include "tapegrad.h"
#include "tapegrad/check.h"
#include "testutil.h"

static tg_ctx *ctx;
static void setup(void) { ctx = tg_ctx_new(11); }
static void teardown(void) { tg_ctx_free(ctx); }

/* The seeded bugs of a normalization backward. */
enum {
    OK = 0,
    R_CONST,      /* RMSNorm: r treated as a constant, the - xhat m term dropped */
    M_SUM,        /* RMSNorm: m = sum(u xhat) instead of the mean */
    SIGN,         /* dx negated */
    SUM_FOR_MEAN, /* dx x C */
    STD_FOR_RSTD, /* RMSNorm: the outer r replaced by 1/r */
    TRANSPOSED,   /* dx = J dy instead of J^T dy */
    OVERWRITE,    /* dx assigned, not accumulated; x used twice */
    LN_NO_MEAN,   /* LayerNorm: the - mean(u) term dropped */
    R_FROM_SUM,   /* RMSNorm: backward recomputes r from the sum of squares */
    R_NO_EPS,     /* RMSNorm: backward recomputes r without eps */
};

typedef struct bug_case {
    int bug;
    bool layernorm;
    double eps;
} bug_case;

/* y_i = gamma_i xhat_i per row of C; xhat = x r (RMSNorm) or (x - mu) r
 * (LayerNorm), r = 1 / sqrt(mean x^2 + eps) or 1 / sqrt(var + eps). */
static tg_tensor *norm_forward(tg_ctx *c, tg_node *node, tg_tensor *const *in, void *user) {
    const bug_case *b = user;
    tg_tensor *x = in[0], *g = in[1];
    int64_t N = x->shape[0], C = x->shape[1];
    tg_tensor *y = tg_zeros(c, TG_F64, 2, x->shape), *xhat = tg_zeros(c, TG_F64, 2, x->shape);
    tg_tensor *r = tg_zeros(c, TG_F64, 1, &N);
    const double *xd = tg_data_f64(c, x), *gd = tg_data_f64(c, g);
    double *yd = tg_data_f64(c, y), *xh = tg_data_f64(c, xhat), *rd = tg_data_f64(c, r);
    for (int64_t n = 0; n < N; n++) {
        double mu = 0, ss = 0;
        for (int64_t j = 0; j < C && b->layernorm; j++) mu += xd[n * C + j] / (double)C;
        for (int64_t j = 0; j < C; j++) ss += (xd[n * C + j] - mu) * (xd[n * C + j] - mu);
        rd[n] = 1.0 / sqrt(ss / (double)C + b->eps);
        for (int64_t j = 0; j < C; j++) {
            xh[n * C + j] = (xd[n * C + j] - mu) * rd[n];
            yd[n * C + j] = gd[j] * xh[n * C + j];
        }
    }
    tg_node_save_tensor(c, node, xhat);
    tg_node_save_tensor(c, node, r);
    tg_node_set_scalar(c, node, 0, b->bug);
    tg_node_set_scalar(c, node, 1, b->layernorm);
    tg_node_set_scalar(c, node, 2, b->eps);
    return y;
}

/* dx_i = r (u_i - [mean u] - xhat_i mean(u xhat)), u = gamma dy;
 * dgamma_i = sum over rows of dy_i xhat_i -- with the bug. */
static void norm_backward(tg_ctx *c, tg_node *node) {
    int bug = (int)tg_node_scalar(node, 0);
    bool ln = tg_node_scalar(node, 1) != 0;
    tg_tensor *xhat = tg_node_saved_tensor(node, 0), *r = tg_node_saved_tensor(node, 1);
    tg_tensor *g = tg_node_input(node, 1), *dy = tg_node_grad_output(node);
    int64_t N = xhat->shape[0], C = xhat->shape[1];
    tg_tensor *dx = tg_zeros(c, TG_F64, 2, xhat->shape), *dg = tg_zeros(c, TG_F64, 1, &C);
    const double *xh = tg_data_f64(c, xhat), *rd = tg_data_f64(c, r), *gd = tg_data_f64(c, g);
    const double *dyd = tg_data_f64(c, dy);
    double *dxd = tg_data_f64(c, dx), *dgd = tg_data_f64(c, dg);
    for (int64_t n = 0; n < N; n++) {
        const double *h = xh + n * C, *d = dyd + n * C;
        double mu = 0, m = 0, rr = rd[n], hb[16];
        if (bug == R_FROM_SUM || bug == R_NO_EPS) {
            /* x = xhat / r; r' = 1 / sqrt(sum x^2 + eps) or 1 / sqrt(mean x^2) */
            double ss = 0;
            for (int64_t j = 0; j < C; j++) ss += h[j] * h[j] / (rr * rr);
            double r2 = 1.0 / sqrt(bug == R_FROM_SUM ? ss + tg_node_scalar(node, 2) : ss / (double)C);
            for (int64_t j = 0; j < C; j++) hb[j] = h[j] / rr * r2;
            h = hb, rr = r2;
        }
        for (int64_t j = 0; j < C; j++) mu += gd[j] * d[j] / (double)C, m += gd[j] * d[j] * h[j];
        if (bug != M_SUM) m /= (double)C;
        for (int64_t i = 0; i < C; i++) {
            double v;
            if (bug == TRANSPOSED) {
                /* J[j][i] = gamma_j r (delta_ji - [1/C] - xhat_j xhat_i / C); the bug sums J[i][j] dy_j */
                v = 0;
                for (int64_t j = 0; j < C; j++)
                    v += gd[i] * rr * ((i == j) - (ln ? 1.0 / (double)C : 0) - h[i] * h[j] / (double)C) * d[j];
            } else {
                double u = gd[i] * d[i];
                v = (bug == STD_FOR_RSTD ? 1.0 / rr : rr) *
                    (u - (ln && bug != LN_NO_MEAN ? mu : 0) - (bug == R_CONST ? 0 : h[i] * m));
            }
            if (bug == SIGN) v = -v;
            if (bug == SUM_FOR_MEAN) v *= (double)C;
            dxd[n * C + i] = v;
            dgd[i] += d[i] * h[i];
        }
    }
    if (bug == OVERWRITE) {
        tg_tensor *old = tg_grad_of(c, tg_node_input(node, 0)); /* BUG: throws away what is there */
        if (old) memset(tg_data_f64(c, old), 0, (size_t)old->numel * sizeof(double));
    }
    tg_node_accumulate(c, node, 0, dx);
    tg_node_accumulate(c, node, 1, dg);
}

static const tg_op_def NORM = {.name = "seeded_norm", .forward = norm_forward, .backward = norm_backward};

static tg_tensor *norm_fn(tg_ctx *c, tg_tensor *const *in, void *user) {
    const bug_case *b = user;
    tg_tensor *y = tg_op_apply(c, &NORM, 2, in, user);
    return b->bug == OVERWRITE ? tg_add(c, y, in[0]) : y; /* x used twice */
}

/* Diagnoses input k of the seeded op on x (4, 6) in [-2, 2), gamma in
 * [-2, 2) away from 0. */
static tg_gradcheck_diagnosis diagnose_eps(int bug, bool layernorm, int k, double eps) {
    bug_case b = {bug, layernorm, eps};
    tg_rng_seed(ctx, 5);
    tg_tensor *in[2] = {tg_rand(ctx, TG_F64, TG_SHAPE(4, 6), -2, 2), tg_rand(ctx, TG_F64, TG_SHAPE(6), 0.5, 2)};
    tg_set_flat(ctx, in[1], 2, -1.3); /* a negative gain: gamma is not a scale */
    tg_gradcheck_diagnosis d;
    ck_assert_msg(tg_gradcheck_diagnose(ctx, norm_fn, &b, 2, in, k, NULL, &d), "%s", tg_error_message(ctx));
    tg_ctx_reset(ctx);
    return d;
}

static tg_gradcheck_diagnosis diagnose(int bug, bool layernorm, int k) { return diagnose_eps(bug, layernorm, k, 1e-5); }

#define ASSERT_KIND(d, want)                                                                   \
    ck_assert_msg((d).kind == (want), "got %s, want %s: %s / %s", tg_diagnosis_name((d).kind), \
                  tg_diagnosis_name(want), (d).finding, (d).cause)

START_TEST(test_correct_ops_get_no_diagnosis) {
    for (int ln = 0; ln < 2; ln++)
        for (int k = 0; k < 2; k++) ASSERT_KIND(diagnose(OK, ln, k), TG_DIAG_NONE);
}
END_TEST

START_TEST(test_projection_dropped_and_summed) {
    tg_gradcheck_diagnosis d = diagnose(R_CONST, false, 0);
    ASSERT_KIND(d, TG_DIAG_PROJECTION);
    ck_assert_double_eq_tol(d.factor, -1, 1e-3);
    tg_test_assert_contains(d.cause, "dropped", "constant", NULL);
    ck_assert_int_eq(d.n_wrong, 24);
    tg_test_assert_contains(d.where, "every element", NULL);

    d = diagnose(M_SUM, false, 0);
    ASSERT_KIND(d, TG_DIAG_PROJECTION);
    ck_assert_double_eq_tol(d.factor, 6 - 1, 1e-3); /* C - 1 */
    tg_test_assert_contains(d.cause, "summed instead of averaged", NULL);
    /* gamma's gradient is right in both */
    ASSERT_KIND(diagnose(M_SUM, false, 1), TG_DIAG_NONE);
}
END_TEST

START_TEST(test_mean_term_dropped) {
    tg_gradcheck_diagnosis d = diagnose(LN_NO_MEAN, true, 0);
    ASSERT_KIND(d, TG_DIAG_MEAN_TERM);
    ck_assert_double_eq_tol(d.factor, -1, 1e-3);
    tg_test_assert_contains(d.finding, "constant along each row", NULL);
    tg_test_assert_contains(d.cause, "dropped mean term", NULL);
}
END_TEST

START_TEST(test_sign_scale_transpose) {
    tg_gradcheck_diagnosis d = diagnose(SIGN, true, 0);
    ASSERT_KIND(d, TG_DIAG_SIGN);
    d = diagnose(SUM_FOR_MEAN, false, 0);
    ASSERT_KIND(d, TG_DIAG_SCALE);
    ck_assert_double_eq_tol(d.factor, 6, 1e-6);
    tg_test_assert_contains(d.finding, "C = 6", NULL);
    tg_test_assert_contains(d.cause, "a sum where the forward takes a mean", NULL);
    d = diagnose(TRANSPOSED, false, 0);
    ASSERT_KIND(d, TG_DIAG_TRANSPOSE);
    d = diagnose(TRANSPOSED, true, 0);
    ASSERT_KIND(d, TG_DIAG_TRANSPOSE);
}
END_TEST

START_TEST(test_row_scale_and_identity) {
    tg_gradcheck_diagnosis d = diagnose(STD_FOR_RSTD, false, 0);
    ASSERT_KIND(d, TG_DIAG_ROW_SCALE);
    ck_assert_double_eq_tol(d.factor, 1, 0.01); /* s_n = mean x^2 + eps: power 1 */
    tg_test_assert_contains(d.cause, "std used where rstd belongs", NULL);
    d = diagnose(OVERWRITE, false, 0);
    ASSERT_KIND(d, TG_DIAG_IDENTITY);
    ck_assert_double_eq_tol(d.factor, 1, 1e-4);
    tg_test_assert_contains(d.cause, "overwritten instead of accumulated", NULL);
}
END_TEST

/* the backward's r is not the forward's: the identity part of J scales by
 * rho, the projection part by rho^3 */
START_TEST(test_wrong_statistic) {
    tg_gradcheck_diagnosis d = diagnose(R_FROM_SUM, false, 0);
    ASSERT_KIND(d, TG_DIAG_STATISTIC);
    ck_assert_double_eq_tol(d.factor, 1 / sqrt(6.0), 1e-4);
    tg_test_assert_contains(d.cause, "sum of squares instead of the mean", NULL);
    d = diagnose_eps(R_NO_EPS, false, 0, 0.1);
    ASSERT_KIND(d, TG_DIAG_STATISTIC);
    ck_assert_double_eq_tol(d.factor, 0.1, 1e-4); /* the eps that is missing */
    tg_test_assert_contains(d.cause, "a missing eps", NULL);
    ASSERT_KIND(diagnose_eps(OK, false, 0, 0.1), TG_DIAG_NONE);
}
END_TEST

START_TEST(test_errors) {
    tg_gradcheck_diagnosis d;
    tg_tensor *x = tg_zeros(ctx, TG_F64, TG_SHAPE(2));
    bug_case b = {0};
    ck_assert(!tg_gradcheck_diagnose(ctx, norm_fn, &b, 1, &x, 3, NULL, &d));
    tg_test_assert_error(ctx, TG_ERR_INDEX, "tg_gradcheck_diagnose", "input 3", NULL);
    ck_assert(!tg_gradcheck_diagnose(ctx, NULL, &b, 1, &x, 0, NULL, &d));
    tg_test_assert_error(ctx, TG_ERR_NULL, "tg_gradcheck_diagnose", NULL);
}
END_TEST

Suite *make_diagnose_suite(void) {
    return tg_test_suite("diagnose", setup, teardown, test_correct_ops_get_no_diagnosis,
                         test_projection_dropped_and_summed, test_mean_term_dropped, test_sign_scale_transpose,
                         test_row_scale_and_identity, test_wrong_statistic, test_errors, NULL);
}

int main(void) { return tg_test_run(make_diagnose_suite()); }

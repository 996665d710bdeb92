/* The double backward (tg_grad with create_graph), tg_hvp and the order-2
 * gradcheck: second derivatives of small functions against their closed
 * forms, leaves' grads untouched, ops without a rule refused by name, every
 * registry op gradgradchecked in float64 over every variant, Hessian-vector
 * products against finite differences of gradients, and the fused norms'
 * hand-derived double backward against their composed twins to 1e-12. */
#include <check.h>
#include <math.h>
#include <string.h>

#include "tapegrad.h"
#include "tapegrad/check.h"
#include "tapegrad/op.h"
#include "tensor/internal.h" /* tg_load, tg_store */
#include "testutil.h"

static tg_ctx *ctx;
static void setup(void) { ctx = tg_ctx_new(4321); }
static void teardown(void) { tg_ctx_free(ctx); }

static tg_tensor *leaf(const double *v, int64_t n) {
    return tg_requires_grad(ctx, tg_test_tensor(ctx, TG_F64, 1, &n, v));
}

/* L = sum x^3 + sum(x y): dL/dx = 3x^2 + y, d2L/dx2 = diag(6x), d2L/dxdy = I;
 * the gradient is a tensor of the tape, and a second tg_grad of sum(g)
 * gives the Hessian's row sums. */
START_TEST(test_second_derivative) {
    const double xv[] = {1.0, -2.0, 0.5}, yv[] = {0.25, 3.0, -1.0};
    tg_tensor *x = leaf(xv, 3), *y = leaf(yv, 3);
    tg_tensor *L = tg_add(ctx, tg_sum(ctx, tg_pow_scalar(ctx, x, 3)), tg_sum(ctx, tg_mul(ctx, x, y)));
    tg_tensor *g[2];
    ck_assert(tg_grad(ctx, L, NULL, 2, (tg_tensor *[]){x, y}, g, true));
    const double g0[] = {3 + 0.25, 12 + 3.0, 0.75 - 1.0};
    tg_test_assert_close(ctx, "dL/dx", g[0], g0, 3, 1e-14, 0);
    tg_test_assert_close(ctx, "dL/dy", g[1], xv, 3, 1e-14, 0);
    ck_assert(g[0]->requires_grad);
    tg_tensor *h[2];
    ck_assert(tg_grad(ctx, tg_sum(ctx, g[0]), NULL, 2, (tg_tensor *[]){x, y}, h, false));
    const double hx[] = {6.0, -12.0, 3.0}, hy[] = {1, 1, 1};
    tg_test_assert_close(ctx, "d(sum dL/dx)/dx", h[0], hx, 3, 1e-14, 0);
    tg_test_assert_close(ctx, "d(sum dL/dx)/dy", h[1], hy, 3, 1e-14, 0);
    /* leaves' grads were not touched by either tg_grad */
    const double zero[] = {0, 0, 0};
    tg_test_assert_close(ctx, "x.grad", x->grad, zero, 3, 0, 0);
    /* and a plain backward afterwards still works, into the leaves */
    tg_backward(ctx, tg_sum(ctx, tg_mul(ctx, g[0], g[0])));
    ck_assert(tg_ok(ctx));
    /* d/dx sum (3x^2 + y)^2 = 2 (3x^2 + y) 6x */
    const double bx[] = {2 * 3.25 * 6, 2 * 15.0 * -12, 2 * -0.25 * 3};
    tg_test_assert_close(ctx, "x.grad", x->grad, bx, 3, 1e-12, 0);
}
END_TEST

/* A user op (tapegrad/op.h) has no double-backward rule: create_graph
 * through it is an error naming it, even when its name is a built-in's. */
static tg_tensor *sq_fw(tg_ctx *c, tg_node *node, tg_tensor *const *in, void *user) {
    (void)node, (void)user;
    tg_tensor *y = tg_copy(c, in[0]);
    for (int64_t i = 0; y && i < y->numel; i++) tg_store(y, i, tg_load(y, i) * tg_load(y, i));
    return y;
}

static void sq_bw(tg_ctx *c, tg_node *node) {
    tg_tensor *x = tg_node_input(node, 0), *dy = tg_node_grad_output(node);
    tg_tensor *g = tg_copy(c, dy);
    for (int64_t i = 0; g && i < g->numel; i++) tg_store(g, i, 2 * tg_load(x, i) * tg_load(dy, i));
    tg_node_accumulate(c, node, 0, g);
}

START_TEST(test_no_rule_is_an_error) {
    const double xv[] = {1, 2};
    tg_tensor *x = leaf(xv, 2);
    const tg_op_def sq = {.name = "exp", .forward = sq_fw, .backward = sq_bw};
    tg_tensor *L = tg_sum(ctx, tg_op_apply(ctx, &sq, 1, &x, NULL));
    tg_tensor *g;
    ck_assert(tg_grad(ctx, L, NULL, 1, &x, &g, false)); /* first order: fine */
    const double g1[] = {2, 4};
    tg_test_assert_close(ctx, "first order", g, g1, 2, 0, 0);
    ck_assert(!tg_grad(ctx, L, NULL, 1, &x, &g, true));
    tg_test_assert_error(ctx, TG_ERR_STATE, "tg_grad", "'exp' cannot be differentiated twice", NULL);
}
END_TEST

/* A custom op with a double backward (tg_op_def.backward_graph): y = x^3,
 * backward dx = 3 x^2 dy written with recorded ops, so gradgradcheck and
 * tg_hvp go through it; the same op without one is refused by name, the
 * message pointing at backward_graph; one whose backward_graph fails
 * silently is an error, not a gradient of zeros. */
static tg_tensor *cube_fw(tg_ctx *c, tg_node *node, tg_tensor *const *in, void *user) {
    (void)node, (void)user;
    return tg_mul(c, tg_mul(c, in[0], in[0]), in[0]);
}
static void cube_bw(tg_ctx *c, tg_node *node) {
    tg_tensor *x = tg_node_input(node, 0);
    tg_node_accumulate(c, node, 0, tg_mul(c, tg_node_grad_output(node), tg_mul_scalar(c, tg_mul(c, x, x), 3.0)));
}
static bool cube_bw_graph(tg_ctx *c, const tg_node *node, tg_tensor *dy, tg_tensor **dx) {
    tg_tensor *x = tg_node_input(node, 0);
    dx[0] = tg_mul(c, dy, tg_mul_scalar(c, tg_mul(c, x, x), 3.0));
    return tg_ok(c);
}
static bool cube_bw_graph_silent(tg_ctx *c, const tg_node *node, tg_tensor *dy, tg_tensor **dx) {
    (void)c, (void)node, (void)dy, (void)dx;
    return false;
}
static const tg_op_def CUBE2 = {
    .name = "cube2", .forward = cube_fw, .backward = cube_bw, .backward_graph = cube_bw_graph};
static const tg_op_def CUBE1 = {.name = "cube1", .forward = cube_fw, .backward = cube_bw};
static const tg_op_def CUBE_SILENT = {
    .name = "cube_silent", .forward = cube_fw, .backward = cube_bw, .backward_graph = cube_bw_graph_silent};
static tg_tensor *apply1(tg_ctx *c, tg_tensor *const *in, void *user) { return tg_op_apply(c, user, 1, in, NULL); }

START_TEST(test_custom_op_double_backward) {
    const double xv[] = {1.0, -2.0, 0.5}, vv[] = {1.0, 0.5, -2.0};
    tg_tensor *x = leaf(xv, 3);
    tg_gradcheck_result r;
    ck_assert_msg(tg_gradgradcheck(ctx, apply1, (void *)&CUBE2, 1, &x, NULL, &r), "%s", tg_error_message(ctx));
    /* H of sum x^3 is diag(6 x): H v = 6 x v */
    tg_tensor *v = tg_test_tensor(ctx, TG_F64, 1, (int64_t[]){3}, vv), *hv;
    tg_tensor *L = tg_sum(ctx, tg_op_apply(ctx, &CUBE2, 1, &x, NULL));
    ck_assert_msg(tg_hvp(ctx, L, 1, &x, &v, &hv), "%s", tg_error_message(ctx));
    const double want[] = {6.0, -6.0, -6.0};
    tg_test_assert_close(ctx, "H v through the custom op", hv, want, 3, 1e-14, 0);
    tg_tensor *g;
    L = tg_sum(ctx, tg_op_apply(ctx, &CUBE1, 1, &x, NULL));
    ck_assert(!tg_grad(ctx, L, NULL, 1, &x, &g, true));
    tg_test_assert_error(ctx, TG_ERR_STATE, "tg_grad", "'cube1' cannot be differentiated twice", "backward_graph",
                         NULL);
    tg_clear_error(ctx);
    ck_assert(!tg_gradgradcheck(ctx, apply1, (void *)&CUBE1, 1, &x, NULL, &r));
    tg_test_assert_error(ctx, TG_ERR_STATE, "'cube1' cannot be differentiated twice", NULL);
    tg_clear_error(ctx);
    L = tg_sum(ctx, tg_op_apply(ctx, &CUBE_SILENT, 1, &x, NULL));
    ck_assert(!tg_grad(ctx, L, NULL, 1, &x, &g, true));
    tg_test_assert_error(ctx, TG_ERR_STATE, "tg_grad", "'cube_silent' returned false without setting an error", NULL);
}
END_TEST

/* The fused norm's backward is an op of its own whose backward is the hand
 * derivation; a third derivative through it is refused by name. */
START_TEST(test_third_order_refused) {
    tg_tensor *x = tg_requires_grad(ctx, tg_randn(ctx, TG_F64, 2, (int64_t[]){2, 4}, 0, 1));
    tg_tensor *L = tg_sum(ctx, tg_pow_scalar(ctx, tg_rmsnorm_fused(ctx, x, NULL, NULL, 1, 1e-5), 3));
    tg_tensor *g, *h;
    ck_assert(tg_grad(ctx, L, NULL, 1, &x, &g, true));
    ck_assert(tg_grad(ctx, tg_sum(ctx, tg_mul(ctx, g, g)), NULL, 1, &x, &h, true) == false);
    tg_test_assert_error(ctx, TG_ERR_STATE, "'rmsnorm_backward' cannot be differentiated twice", NULL);
}
END_TEST

/* A piecewise-linear op's second derivative is 0 wherever it is defined:
 * gradgradcheck compares 0 with 0 and sees nothing -- inconclusive
 * (all-zero), with nothing failed -- unless its gradient does not move at
 * all over the input's scale (no kink within reach: a pass, constant);
 * every other op passes. */
static void assert_order2_verdict(const tg_op_info *op, const char *spec, const tg_gradcheck_result *r) {
    static const char *const PIECEWISE_LINEAR[] = {"abs", "relu", "leaky_relu", "max_axis"};
    bool pl = false;
    for (size_t k = 0; k < sizeof PIECEWISE_LINEAR / sizeof PIECEWISE_LINEAR[0]; k++)
        pl |= !strcmp(op->def->name, PIECEWISE_LINEAR[k]);
    if (pl)
        ck_assert_msg(
            r->n_failed == 0 && (r->pass || (r->verdict == TG_VERDICT_INCONCLUSIVE && r->reason == TG_REASON_ALL_ZERO)),
            "%s '%s': order 2 of a piecewise-linear op: verdict %s (%s), %lld failed", op->def->name, spec,
            tg_gradcheck_verdict_name(r->verdict), tg_gradcheck_reason_name(r->reason), (long long)r->n_failed);
    else
        ck_assert_msg(r->pass && r->n_checked > 0,
                      "%s '%s': order 2 failed: %lld of %lld; worst input %d index %lld analytic %.10g numeric "
                      "%.10g (%s)",
                      op->def->name, spec, (long long)r->n_failed, (long long)r->n_checked, r->worst_input,
                      (long long)r->worst_index, r->worst_analytic, r->worst_numeric,
                      tg_gradcheck_reason_name(r->reason));
}

/* Every variant of registry op _i passes gradgradcheck in float64. */
START_TEST(test_order2_every_op_f64) {
    const tg_op_info *op = tg_registry_get(_i);
    for (int v = 0; v < op->n_variants; v++) {
        tg_gradcheck_opts o = {0};
        o.seed = 11 + (uint64_t)v;
        o.mode = TG_GRADCHECK_DIRECTIONAL;
        tg_gradcheck_result r;
        tg_registry_check_order2(ctx, op, op->variants[v], TG_F64, &o, &r);
        ck_assert_msg(tg_ok(ctx), "%s '%s': %s", op->def->name, op->variants[v], tg_error_message(ctx));
        assert_order2_verdict(op, op->variants[v], &r);
        tg_ctx_reset(ctx);
    }
}
END_TEST

/* The gradients a create_graph walk computes (the rules') are the ones
 * the ops' own backward computes: every variant of op _i, float64, to
 * 1e-12 of the gradient's scale. */
START_TEST(test_rules_match_backward) {
    const tg_op_info *op = tg_registry_get(_i);
    for (int v = 0; v < op->n_variants; v++) {
        tg_op_case c;
        ck_assert_msg(tg_registry_build(ctx, op, op->variants[v], TG_F64, &c), "%s", tg_error_message(ctx));
        tg_tensor *wrt[TG_GRADCHECK_MAX_INPUTS], *g[2][TG_GRADCHECK_MAX_INPUTS];
        int m = 0;
        for (int k = 0; k < c.n_inputs; k++)
            if (c.check >> k & 1u) wrt[m++] = tg_requires_grad(ctx, c.inputs[k]);
        for (int create = 0; create < 2; create++) {
            tg_rng_set_state(ctx, 99, 0); /* dropout: one mask for both */
            tg_tensor *y = tg_registry_forward(ctx, &c);
            ck_assert_msg(y != NULL, "%s: %s", op->def->name, tg_error_message(ctx));
            tg_tensor *u = tg_randn(ctx, TG_F64, y->ndim, y->shape, 0, 1);
            ck_assert_msg(tg_grad(ctx, y, u, m, wrt, g[create], create), "%s '%s': %s", op->def->name, op->variants[v],
                          tg_error_message(ctx));
        }
        for (int k = 0; k < m; k++) {
            double scale = 0;
            for (int64_t i = 0; i < g[0][k]->numel; i++) scale = fmax(scale, fabs(tg_load(g[0][k], i)));
            double d = tg_test_max_abs_diff(ctx, g[0][k], g[1][k]);
            ck_assert_msg(d <= 1e-12 * (1 + scale), "%s '%s' input %d: rule vs backward differ by %.3g", op->def->name,
                          op->variants[v], k, d);
        }
        tg_ctx_reset(ctx);
    }
}
END_TEST

/* Small variants element by element (FULL) too. */
START_TEST(test_order2_full_small) {
    const tg_op_info *op = tg_registry_get(_i);
    tg_gradcheck_opts o = {0};
    o.mode = TG_GRADCHECK_FULL;
    tg_gradcheck_result r;
    tg_registry_check_order2(ctx, op, NULL, TG_F64, &o, &r);
    ck_assert_msg(tg_ok(ctx), "%s: %s", op->def->name, tg_error_message(ctx));
    assert_order2_verdict(op, "(full)", &r);
}
END_TEST

/* A tiny MLP's loss: tanh(x W1^T + b1) W2^T, mean squared against t. */
static tg_tensor *mlp_loss(tg_tensor *const *p, tg_tensor *x, tg_tensor *t, bool norm) {
    tg_tensor *h = tg_linear_fused(ctx, x, p[0], p[1]);
    if (norm) h = tg_rmsnorm_fused(ctx, h, NULL, NULL, 1, 1e-5);
    return tg_mse_loss(ctx, tg_linear_fused(ctx, tg_tanh(ctx, h), p[2], NULL), t);
}

/* tg_hvp against central differences of gradients:
 *   H v ~ (g(p + h v) - g(p - h v)) / 2h. */
START_TEST(test_hvp_vs_differences) {
    for (int norm = 0; norm < 2; norm++) {
        tg_tensor *x = tg_randn(ctx, TG_F64, 2, (int64_t[]){5, 3}, 0, 1);
        tg_tensor *t = tg_randn(ctx, TG_F64, 2, (int64_t[]){5, 2}, 0, 1);
        tg_tensor *p[3] = {tg_randn(ctx, TG_F64, 2, (int64_t[]){4, 3}, 0, 0.7),
                           tg_randn(ctx, TG_F64, 1, (int64_t[]){4}, 0, 0.3),
                           tg_randn(ctx, TG_F64, 2, (int64_t[]){2, 4}, 0, 0.7)};
        tg_tensor *v[3], *hv[3];
        for (int k = 0; k < 3; k++) {
            tg_requires_grad(ctx, p[k]);
            v[k] = tg_randn(ctx, TG_F64, p[k]->ndim, p[k]->shape, 0, 1);
        }
        ck_assert(tg_hvp(ctx, mlp_loss(p, x, t, norm), 3, p, v, hv));
        const double h = 1e-5;
        tg_tensor *gp[3], *gm[3];
        for (int s = 0; s < 2; s++) {
            tg_tensor *q[3];
            for (int k = 0; k < 3; k++) {
                q[k] = tg_copy(ctx, p[k]);
                for (int64_t i = 0; i < q[k]->numel; i++)
                    tg_store(q[k], i, tg_load(q[k], i) + (s ? -h : h) * tg_load(v[k], i));
                tg_requires_grad(ctx, q[k]);
            }
            ck_assert(tg_grad(ctx, mlp_loss(q, x, t, norm), NULL, 3, q, s ? gm : gp, false));
        }
        for (int k = 0; k < 3; k++)
            for (int64_t i = 0; i < p[k]->numel; i++) {
                double fd = (tg_load(gp[k], i) - tg_load(gm[k], i)) / (2 * h);
                ck_assert_msg(fabs(tg_load(hv[k], i) - fd) <= 1e-7 * (1 + fabs(fd)),
                              "norm=%d param %d [%lld]: hvp %.12g, differences %.12g", norm, k, (long long)i,
                              tg_load(hv[k], i), fd);
            }
        /* the leaves' grads were left alone */
        ck_assert_double_eq(tg_test_max_abs_diff(ctx, p[0]->grad, tg_zeros(ctx, TG_F64, 2, p[0]->shape)), 0);
        tg_ctx_reset(ctx);
    }
}
END_TEST

/* The fused norms' double backward (rmsnorm_backward, layernorm_backward:
 * hand-derived) against the composed twins' (derived by autograd through
 * the primitive ops' rules): Hessian-vector products of <w, y> and of a
 * nonlinear loss of y, with respect to x, gamma and beta, agree to 1e-12
 * in float64. */
START_TEST(test_fused_norm_hessian_matches_composed) {
    const int ndims[] = {1, 1, 2};
    const int64_t shapes[][3] = {{4, 8}, {3, 5}, {2, 3, 4}};
    for (int centered = 0; centered < 2; centered++)
        for (int c = 0; c < 3; c++)
            for (int affine = 0; affine < 2; affine++) {
                const int nd = c == 2 ? 3 : 2, nn = ndims[c];
                tg_tensor *x = tg_randn(ctx, TG_F64, nd, shapes[c], 0.3, 1.2);
                tg_tensor *w = tg_randn(ctx, TG_F64, nd, shapes[c], 0, 1);
                tg_tensor *gam = affine ? tg_randn(ctx, TG_F64, nn, shapes[c] + nd - nn, 1, 0.3) : NULL;
                tg_tensor *bet = affine ? tg_randn(ctx, TG_F64, nn, shapes[c] + nd - nn, 0, 0.3) : NULL;
                tg_tensor *params[3] = {x, gam, bet}, *v[3], *hv[2][3];
                int np = affine ? 3 : 1;
                for (int k = 0; k < np; k++) {
                    tg_requires_grad(ctx, params[k]);
                    v[k] = tg_randn(ctx, TG_F64, params[k]->ndim, params[k]->shape, 0, 1);
                }
                for (int fused = 0; fused < 2; fused++) {
                    tg_tensor *y =
                        fused ? (centered ? tg_layernorm_fused : tg_rmsnorm_fused)(ctx, x, gam, bet, nn, 1e-5)
                              : (centered ? tg_layernorm_composed : tg_rmsnorm_composed)(ctx, x, gam, bet, nn, 1e-5);
                    /* <w, y> + sum y^3 / 3: linear and cubic in y */
                    tg_tensor *L = tg_add(ctx, tg_sum(ctx, tg_mul(ctx, w, y)),
                                          tg_mul_scalar(ctx, tg_sum(ctx, tg_pow_scalar(ctx, y, 3)), 1.0 / 3));
                    ck_assert_msg(tg_hvp(ctx, L, np, params, v, hv[fused]), "%s", tg_error_message(ctx));
                }
                for (int k = 0; k < np; k++) {
                    double d = tg_test_max_abs_diff(ctx, hv[0][k], hv[1][k]);
                    ck_assert_msg(d <= 1e-12, "%s case %d affine %d param %d: fused vs composed H v differ by %.3g",
                                  centered ? "layernorm" : "rmsnorm", c, affine, k, d);
                }
                tg_ctx_reset(ctx);
            }
}
END_TEST

/* docs/normalization-gradients.md, section 11: the Hessian of L = w . y
 * with respect to x on the guide's 3-element example (eps 0), column by
 * column as H e_k from tg_hvp through the fused ops, against the closed
 * forms (1/(54 sqrt 3)) [-4 -17 -14; -17 8 2; -14 2 20] (RMSNorm, x =
 * (1, 2, 2)) and (sqrt 6 / 48) [2 -3 1; -3 4 -1; 1 -1 0] (LayerNorm,
 * x = (1, 3, 5)); and H x = -dx (scale invariance). */
START_TEST(test_guide_example_hessian) {
    const double g[] = {1, 0.5, 2}, b[] = {0.1, 0, -0.1}, w[] = {1, -1, -0.5};
    const double rms[9] = {-4, -17, -14, -17, 8, 2, -14, 2, 20}, ln[9] = {2, -3, 1, -3, 4, -1, 1, -1, 0};
    const double xs[2][3] = {{1, 2, 2}, {1, 3, 5}};
    for (int centered = 0; centered < 2; centered++) {
        const double scale = centered ? sqrt(6.0) / 48 : 1 / (54 * sqrt(3.0));
        int64_t three = 3;
        tg_tensor *x = leaf(xs[centered], 3);
        tg_tensor *gt = tg_test_tensor(ctx, TG_F64, 1, &three, g), *bt = tg_test_tensor(ctx, TG_F64, 1, &three, b);
        tg_tensor *y = (centered ? tg_layernorm_fused : tg_rmsnorm_fused)(ctx, x, gt, bt, 1, 0.0);
        tg_tensor *L = tg_sum(ctx, tg_mul(ctx, tg_test_tensor(ctx, TG_F64, 1, &three, w), y));
        for (int k = 0; k < 3; k++) {
            double e[3] = {0, 0, 0}, col[3];
            e[k] = 1;
            tg_tensor *v = tg_test_tensor(ctx, TG_F64, 1, &three, e), *hv;
            ck_assert(tg_hvp(ctx, L, 1, &x, &v, &hv));
            for (int i = 0; i < 3; i++) col[i] = scale * (centered ? ln : rms)[i * 3 + k];
            tg_test_assert_close(ctx, centered ? "layernorm H e_k" : "rmsnorm H e_k", hv, col, 3, 1e-15, 1e-13);
        }
        tg_tensor *dx, *hx;
        ck_assert(tg_grad(ctx, L, NULL, 1, &x, &dx, false));
        ck_assert(tg_hvp(ctx, L, 1, &x, (tg_tensor *[]){tg_test_tensor(ctx, TG_F64, 1, &three, xs[centered])}, &hx));
        tg_test_assert_close_tensors(ctx, "H x = -dx", hx, tg_neg(ctx, dx), 1e-15, 1e-13);
        tg_ctx_reset(ctx);
    }
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("double_backward");
    TCase *tc = tg_test_tcase(s, "double_backward", setup, teardown, test_second_derivative, test_no_rule_is_an_error,
                              test_custom_op_double_backward, test_third_order_refused, test_hvp_vs_differences,
                              test_fused_norm_hessian_matches_composed, test_guide_example_hessian, NULL);
    (void)tc;
    TCase *gc = tcase_create("order2");
    tcase_add_checked_fixture(gc, setup, teardown);
    tcase_set_timeout(gc, 600);
    tcase_add_loop_test(gc, test_order2_every_op_f64, 0, tg_registry_count());
    tcase_add_loop_test(gc, test_order2_full_small, 0, tg_registry_count());
    tcase_add_loop_test(gc, test_rules_match_backward, 0, tg_registry_count());
    suite_add_tcase(s, gc);
    return s;
}

int main(void) { return tg_test_run(make_suite()); }

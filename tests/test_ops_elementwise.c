/* Elementwise ops and activations: add, sub, mul, div with broadcasting;
 * neg, add/mul/pow by a scalar, exp, log, sqrt, abs; relu, leaky_relu,
 * sigmoid, tanh, gelu (both forms), silu, softplus.
 *
 * Forward values and float32/float64 gradients are checked against a
 * PyTorch fixture (tests/fixtures/ops_values.py), broadcasting against an
 * index mapping computed here, edge cases by hand; every backward against
 * central finite differences in float64. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static const double PI = 3.14159265358979323846;

static tg_ctx *ctx;

static void setup(void) { ctx = tg_ctx_new(42); }
static void teardown(void) { tg_ctx_free(ctx); }

#define OPS "ops_values.txt"

/* ---- the ops as checked functions (tg_gradcheck_fn), by name --------------- */

/* The op as a tg_gradcheck_fn. */
#define WRAP(NAME, CALL)                                                 \
    static tg_tensor *NAME(tg_ctx *c, tg_tensor *const *in, void *arg) { \
        (void)arg;                                                       \
        return CALL;                                                     \
    }
WRAP(f_neg, tg_neg(c, in[0]))
WRAP(f_add_scalar, tg_add_scalar(c, in[0], 2.5))
WRAP(f_mul_scalar, tg_mul_scalar(c, in[0], -1.5))
WRAP(f_pow, tg_pow_scalar(c, in[0], *(const double *)arg))
WRAP(f_exp, tg_exp(c, in[0]))
WRAP(f_log, tg_log(c, in[0]))
WRAP(f_sqrt, tg_sqrt(c, in[0]))
WRAP(f_abs, tg_abs(c, in[0]))
WRAP(f_relu, tg_relu(c, in[0]))
WRAP(f_leaky, tg_leaky_relu(c, in[0], 0.1))
WRAP(f_sigmoid, tg_sigmoid(c, in[0]))
WRAP(f_tanh, tg_tanh(c, in[0]))
WRAP(f_gelu, tg_gelu(c, in[0], false))
WRAP(f_gelu_tanh, tg_gelu(c, in[0], true))
WRAP(f_silu, tg_silu(c, in[0]))
WRAP(f_softplus, tg_softplus(c, in[0]))

static double P2 = 2, P3 = 3, PHALF = 0.5, PM1P5 = -1.5;

typedef struct unary_case {
    const char *name; /* fixture name */
    tg_gradcheck_fn f;
    void *arg;
    bool positive; /* domain x > 0 */
} unary_case;

static const unary_case UNARY[] = {
    {"neg", f_neg, NULL, false},
    {"add_scalar", f_add_scalar, NULL, false},
    {"mul_scalar", f_mul_scalar, NULL, false},
    {"pow2", f_pow, &P2, false},
    {"pow3", f_pow, &P3, false},
    {"pow_half", f_pow, &PHALF, true},
    {"pow_m1p5", f_pow, &PM1P5, true},
    {"exp", f_exp, NULL, false},
    {"log", f_log, NULL, true},
    {"sqrt", f_sqrt, NULL, true},
    {"abs", f_abs, NULL, false},
    {"relu", f_relu, NULL, false},
    {"leaky_relu", f_leaky, NULL, false},
    {"sigmoid", f_sigmoid, NULL, false},
    {"tanh", f_tanh, NULL, false},
    {"gelu", f_gelu, NULL, false},
    {"gelu_tanh", f_gelu_tanh, NULL, false},
    {"silu", f_silu, NULL, false},
};
#define N_UNARY ((int)(sizeof UNARY / sizeof UNARY[0]))

/* ---- values and gradients against PyTorch ---------------------------------- */

/* Loop test over UNARY x {f64, f32}: y and the gradient of sum(w * y). */
START_TEST(test_unary_vs_pytorch) {
    const unary_case *uc = &UNARY[_i / 2];
    tg_dtype dt = _i % 2 ? TG_F32 : TG_F64;
    char prefix[96];
    snprintf(prefix, sizeof prefix, "%s.%s", uc->name, dt == TG_F64 ? "f64" : "f32");
    tg_tensor *y = tg_test_op_vs_fixture(ctx, OPS, prefix, dt, -1, NULL, uc->f, uc->arg, dt == TG_F64 ? 1e-13 : 2e-6);
    ck_assert_int_eq(y->ndim, 1);
}
END_TEST

static tg_tensor *binop(tg_ctx *c, int op, tg_tensor *a, tg_tensor *b) {
    switch (op) {
    case 0: return tg_add(c, a, b);
    case 1: return tg_sub(c, a, b);
    case 2: return tg_mul(c, a, b);
    default: return tg_div(c, a, b);
    }
}
static const char *const BINOP_NAMES[] = {"add", "sub", "mul", "div"};

/* Loop test over {add, sub, mul, div} x {bc1, bc2} x {f64, f32}:
 * bc1 is (2,1,3) op (4,1) -> (2,4,3), bc2 is (3,) op (2,3) -> (2,3). */
START_TEST(test_binary_broadcast_vs_pytorch) {
    int op = _i / 4, cs = (_i / 2) % 2;
    tg_dtype dt = _i % 2 ? TG_F32 : TG_F64;
    const char *dn = dt == TG_F64 ? "f64" : "f32";
    double tol = dt == TG_F64 ? 1e-13 : 2e-6;
    static const int64_t sa[2][3] = {{2, 1, 3}, {3}}, sb[2][2] = {{4, 1}, {2, 3}};
    static const int na[2] = {3, 1}, nb[2] = {2, 2};
    char name[96], p[64];
    snprintf(p, sizeof p, "%s_bc%d.%s", BINOP_NAMES[op], cs + 1, dn);
    snprintf(name, sizeof name, "%s.a", p);
    tg_tensor *a = tg_requires_grad(ctx, tg_test_fixture_tensor(ctx, OPS, name, dt, na[cs], sa[cs]));
    snprintf(name, sizeof name, "%s.b", p);
    tg_tensor *b = tg_requires_grad(ctx, tg_test_fixture_tensor(ctx, OPS, name, dt, nb[cs], sb[cs]));
    tg_tensor *y = binop(ctx, op, a, b);
    ck_assert_msg(y != NULL, "%s", tg_error_message(ctx));
    if (cs == 0) {
        ck_assert_int_eq(y->ndim, 3);
        ck_assert_int_eq(y->shape[0], 2);
        ck_assert_int_eq(y->shape[1], 4);
        ck_assert_int_eq(y->shape[2], 3);
    } else {
        ck_assert_int_eq(y->ndim, 2);
        ck_assert_int_eq(y->shape[0], 2);
        ck_assert_int_eq(y->shape[1], 3);
    }
    snprintf(name, sizeof name, "%s.y", p);
    tg_test_assert_fixture(ctx, y, OPS, name, tol);
    tg_backward_ex(ctx, y, tg_test_fixture_weights(ctx, OPS, dt, y->ndim, y->shape), false);
    ck_assert_msg(tg_ok(ctx), "%s", tg_error_message(ctx));
    snprintf(name, sizeof name, "%s.da", p);
    tg_test_assert_fixture(ctx, a->grad, OPS, name, tol);
    snprintf(name, sizeof name, "%s.db", p);
    tg_test_assert_fixture(ctx, b->grad, OPS, name, tol);
    ck_assert(a->grad->ndim == a->ndim && b->grad->ndim == b->ndim);
}
END_TEST

/* ---- broadcasting against an index mapping computed here ----------------- */

typedef struct shape_pair {
    int na;
    int64_t a[4];
    int nb;
    int64_t b[4];
} shape_pair;

static const shape_pair PAIRS[] = {
    {2, {2, 3}, 2, {2, 3}},          /* same shape: one tight loop */
    {2, {4, 3}, 1, {3}},             /* bias: (N,C) + (C) */
    {1, {3}, 2, {4, 3}},             /* bias from the left */
    {2, {2, 3}, 2, {2, 1}},          /* per-row scalar */
    {2, {2, 1}, 2, {1, 3}},          /* outer product */
    {3, {4, 1, 3}, 2, {2, 1}},       /* both sides broadcast */
    {0, {0}, 2, {2, 3}},             /* 0-d op tensor */
    {2, {2, 3}, 0, {0}},             /* tensor op 0-d */
    {1, {1}, 1, {5}},                /* size-1 dim */
    {3, {1, 1, 1}, 3, {2, 1, 4}},    /* all size-1 dims */
    {4, {3, 1, 2, 1}, 3, {4, 1, 5}}, /* interleaved */
    {3, {2, 3, 4}, 3, {2, 1, 4}},    /* middle dim */
    {3, {1, 3, 1}, 3, {2, 3, 4}},    /* middle dim kept, both ends broadcast */
};
#define N_PAIRS ((int)(sizeof PAIRS / sizeof PAIRS[0]))

/* The element of x (ndim nx, shape sx) that output multi-index idx (ndim
 * no) reads under NumPy broadcasting. */
static int64_t bindex(int nx, const int64_t *sx, int no, const int64_t *idx) {
    int64_t off = 0;
    for (int d = 0; d < nx; d++) {
        int od = d + (no - nx);
        off = off * sx[d] + (sx[d] == 1 ? 0 : idx[od]);
    }
    return off;
}

static tg_tensor *bc_fn(tg_ctx *c, tg_tensor *const *in, void *arg) {
    return binop(c, *(const int *)arg, in[0], in[1]);
}

/* Loop test over PAIRS x ops: forward values in f64 and f32, and the
 * backward of every op against finite differences in f64. */
START_TEST(test_broadcast_index_mapping) {
    const shape_pair *sp = &PAIRS[_i / 4];
    int op = _i % 4;
    for (int k = 0; k < 2; k++) {
        tg_dtype dt = k ? TG_F32 : TG_F64;
        tg_tensor *a = tg_test_smooth_leaf(ctx, sp->na, sp->a, 1);
        tg_tensor *b = tg_test_smooth_leaf(ctx, sp->nb, sp->b, 2);
        tg_tensor *ac = tg_to_dtype(ctx, a, dt), *bc = tg_to_dtype(ctx, b, dt);
        tg_tensor *y = binop(ctx, op, ac, bc);
        ck_assert_msg(y != NULL, "%s", tg_error_message(ctx));
        int no = sp->na > sp->nb ? sp->na : sp->nb;
        ck_assert_int_eq(y->ndim, no);
        for (int d = 0; d < no; d++) {
            int da = d - (no - sp->na), db = d - (no - sp->nb);
            int64_t sa = da >= 0 ? sp->a[da] : 1, sb = db >= 0 ? sp->b[db] : 1;
            ck_assert_int_eq(y->shape[d], sa > sb ? sa : sb);
        }
        int64_t idx[8] = {0};
        for (int64_t i = 0; i < y->numel; i++) {
            int64_t r = i;
            for (int d = no - 1; d >= 0; d--) idx[d] = r % y->shape[d], r /= y->shape[d];
            double u = tg_get_flat(ctx, ac, bindex(sp->na, sp->a, no, idx));
            double v = tg_get_flat(ctx, bc, bindex(sp->nb, sp->b, no, idx));
            double e = op == 0 ? u + v : op == 1 ? u - v : op == 2 ? u * v : u / v;
            if (dt == TG_F32) e = (float)e; /* one rounding of the exact result of two floats */
            ck_assert_msg(tg_get_flat(ctx, y, i) == e, "%s pair %d elem %lld: %.17g vs %.17g", BINOP_NAMES[op], _i / 4,
                          (long long)i, tg_get_flat(ctx, y, i), e);
        }
    }
    tg_tensor *in[2] = {tg_test_smooth_leaf(ctx, sp->na, sp->a, 3), tg_test_smooth_leaf(ctx, sp->nb, sp->b, 4)};
    tg_test_op_gradcheck(ctx, BINOP_NAMES[op], bc_fn, &op, 2, in);
    /* Each side alone (the other needing no grad, and getting none). */
    for (int side = 0; side < 2; side++) {
        tg_tensor *s2[2] = {tg_test_smooth_leaf(ctx, sp->na, sp->a, 5), tg_test_smooth_leaf(ctx, sp->nb, sp->b, 6)};
        s2[1 - side]->requires_grad = false;
        s2[1 - side]->grad = NULL;
        tg_test_op_gradcheck(ctx, BINOP_NAMES[op], bc_fn, &op, 2, s2);
        tg_test_backward(ctx, bc_fn, &op, 2, s2);
        ck_assert_ptr_null(s2[1 - side]->grad);
    }
}
END_TEST

/* ---- gradients against finite differences -------------------------------- */

/* Loop test over UNARY on shapes (5), (2,3) and a 0-d tensor, away from
 * kinks (|x| >= 0.05; positive for log, sqrt and non-integer powers). */
START_TEST(test_unary_fd) {
    const unary_case *uc = &UNARY[_i];
    static const int64_t s1[] = {5}, s2[] = {2, 3};
    struct {
        int nd;
        const int64_t *s;
    } shapes[] = {{1, s1}, {2, s2}, {0, NULL}};
    for (int k = 0; k < 3; k++) {
        tg_tensor *x = tg_test_smooth_leaf(ctx, shapes[k].nd, shapes[k].s, k);
        if (uc->positive)
            for (int64_t i = 0; i < x->numel; i++) ((double *)x->data)[i] = fabs(((double *)x->data)[i]) + 0.1;
        tg_test_op_gradcheck(ctx, uc->name, uc->f, uc->arg, 1, &x);
    }
}
END_TEST

/* Chains: an intermediate used twice, an input used by two ops, and the
 * same tensor on both sides of a binary op. */
static tg_tensor *chain_fn(tg_ctx *c, tg_tensor *const *in, void *arg) {
    (void)arg;
    tg_tensor *x = in[0], *b = in[1];
    tg_tensor *e = tg_tanh(c, tg_mul(c, x, b));   /* (3,4) */
    tg_tensor *s = tg_add(c, tg_mul(c, e, e), e); /* e used three times */
    tg_tensor *q = tg_div(c, s, tg_add_scalar(c, tg_mul(c, b, b), 1.0));
    tg_tensor *r = tg_sub(c, tg_gelu(c, q, false), tg_silu(c, x));
    return tg_mul(c, r, tg_sigmoid(c, tg_sub(c, x, x))); /* x - x = 0: sigmoid 0.5 */
}

START_TEST(test_chain_fd) {
    tg_tensor *in[2] = {tg_test_smooth_leaf(ctx, TG_SHAPE(3, 4), 1), tg_test_smooth_leaf(ctx, TG_SHAPE(4), 2)};
    tg_test_op_gradcheck(ctx, "chain", chain_fn, NULL, 2, in);
}
END_TEST

START_TEST(test_same_tensor_both_sides) {
    double v[3] = {0.5, -2.0, 3.0};
    for (int op = 0; op < 4; op++) {
        tg_tensor *x = tg_requires_grad(ctx, tg_test_tensor(ctx, TG_F64, TG_SHAPE(3), v));
        tg_tensor *y = binop(ctx, op, x, x);
        tg_backward_ex(ctx, y, tg_ones(ctx, TG_F64, TG_SHAPE(3)), false);
        ck_assert(tg_ok(ctx));
        for (int i = 0; i < 3; i++) {
            /* d(x+x) = 2, d(x-x) = 0, d(x*x) = 2x, d(x/x) = 1/x - x/x^2 = 0 */
            double e = op == 0 ? 2 : op == 1 ? 0 : op == 2 ? 2 * v[i] : 0;
            ck_assert_double_eq_tol(tg_get_flat(ctx, x->grad, i), e, 1e-15);
        }
    }
}
END_TEST

/* Two backward passes add up in the leaves' grads (f32 and f64). */
START_TEST(test_accumulation) {
    for (int k = 0; k < 2; k++) {
        tg_dtype dt = k ? TG_F32 : TG_F64;
        double av[6] = {0.5, -1, 2, 0.25, -0.75, 1.5}, bv[3] = {2, -4, 0.5};
        tg_tensor *a = tg_requires_grad(ctx, tg_test_tensor(ctx, dt, TG_SHAPE(2, 3), av));
        tg_tensor *b = tg_requires_grad(ctx, tg_test_tensor(ctx, dt, TG_SHAPE(3), bv));
        double once_a[6], once_b[3];
        for (int pass = 0; pass < 2; pass++) {
            tg_tensor *y = tg_sum(ctx, tg_exp(ctx, tg_div(ctx, a, b)));
            tg_backward(ctx, y);
            ck_assert_msg(tg_ok(ctx), "%s", tg_error_message(ctx));
            for (int i = 0; i < 6; i++) {
                double g = tg_get_flat(ctx, a->grad, i);
                if (pass == 0) once_a[i] = g;
                else ck_assert_double_eq_tol(g, 2 * once_a[i], 1e-6 * fabs(once_a[i]));
            }
            for (int i = 0; i < 3; i++) {
                double g = tg_get_flat(ctx, b->grad, i);
                if (pass == 0) once_b[i] = g;
                else ck_assert_double_eq_tol(g, 2 * once_b[i], 1e-6 * fabs(once_b[i]));
            }
        }
        /* The first pass's values, by hand: d/da_ij exp(a_ij/b_j) = exp(.)/b_j */
        for (int i = 0; i < 6; i++) {
            double e = exp(av[i] / bv[i % 3]) / bv[i % 3];
            ck_assert_double_eq_tol(once_a[i], e, 1e-5 * fabs(e));
        }
    }
}
END_TEST

/* Every op adds to a grad that already holds values (never overwrites):
 * backward into leaves whose grads start at 0.5 gives 0.5 + the fresh
 * gradient, for each unary op and each binary op with broadcasting. */
START_TEST(test_backward_adds_to_existing_grad) {
    for (int k = 0; k < N_UNARY + 4; k++) {
        bool un = k < N_UNARY;
        double fresh[2][12];
        for (int pass = 0; pass < 2; pass++) {
            tg_tensor *in[2] = {tg_test_smooth_leaf(ctx, TG_SHAPE(3, 4), 1), tg_test_smooth_leaf(ctx, TG_SHAPE(4), 2)};
            for (int j = 0; j < 2; j++)
                for (int64_t i = 0; i < in[j]->numel; i++) {
                    double *v = in[j]->data;
                    if (un && UNARY[k].positive) v[i] = fabs(v[i]) + 0.1;
                    if (pass) ((double *)in[j]->grad->data)[i] = 0.5;
                }
            int op = k - N_UNARY;
            tg_tensor *y = un ? UNARY[k].f(ctx, in, UNARY[k].arg) : binop(ctx, op, in[0], in[1]);
            tg_backward_ex(ctx, y, tg_full(ctx, TG_F64, y->ndim, y->shape, 1.0), false);
            ck_assert_msg(tg_ok(ctx), "%s", tg_error_message(ctx));
            for (int j = 0; j < (un ? 1 : 2); j++)
                for (int64_t i = 0; i < in[j]->numel; i++) {
                    double g = ((double *)in[j]->grad->data)[i];
                    if (pass == 0) fresh[j][i] = g;
                    else
                        ck_assert_msg(fabs(g - (fresh[j][i] + 0.5)) <= 1e-14 * (1 + fabs(g)),
                                      "op %d input %d elem %lld: %.17g vs %.17g + 0.5", k, j, (long long)i, g,
                                      fresh[j][i]);
                }
        }
    }
}
END_TEST

/* ---- edge cases, by hand ---------------------------------------------------- */

/* y = op(x) at one point; returns y and sets *g to dy/dx. */
static double at(tg_dtype dt, tg_gradcheck_fn f, void *arg, double x, double *g) {
    tg_tensor *t = tg_requires_grad(ctx, tg_test_tensor(ctx, dt, TG_SHAPE(1), &x));
    tg_tensor *y = f(ctx, &t, arg);
    ck_assert_msg(y != NULL, "%s", tg_error_message(ctx));
    tg_backward(ctx, y);
    ck_assert_msg(tg_ok(ctx), "%s", tg_error_message(ctx));
    *g = tg_get_flat(ctx, t->grad, 0);
    return tg_get_flat(ctx, y, 0);
}

START_TEST(test_pytorch_edge_semantics) {
    for (int k = 0; k < 2; k++) {
        tg_dtype dt = k ? TG_F32 : TG_F64;
        double g, y;
        y = at(dt, f_log, NULL, 0.0, &g); /* log(0) = -inf, d = 1/0 = inf */
        ck_assert(isinf(y) && y < 0);
        ck_assert(isinf(g) && g > 0);
        y = at(dt, f_log, NULL, -1.0, &g);
        ck_assert(isnan(y));
        y = at(dt, f_sqrt, NULL, 0.0, &g); /* sqrt'(0) = inf, as PyTorch */
        ck_assert(y == 0);
        ck_assert(isinf(g) && g > 0);
        y = at(dt, f_abs, NULL, 0.0, &g); /* abs'(0) = 0 */
        ck_assert(y == 0 && g == 0);
        y = at(dt, f_abs, NULL, -2.5, &g);
        ck_assert(y == 2.5 && g == -1);
        y = at(dt, f_relu, NULL, 0.0, &g); /* relu'(0) = 0 */
        ck_assert(y == 0 && g == 0);
        y = at(dt, f_relu, NULL, 1e-30, &g);
        ck_assert(g == 1);
        y = at(dt, f_leaky, NULL, 0.0, &g); /* the slope at the kink */
        ck_assert(y == 0);
        ck_assert_double_eq_tol(g, 0.1, 1e-7);
        y = at(dt, f_leaky, NULL, -3.0, &g);
        ck_assert_double_eq_tol(y, -0.3, 1e-6);
        static double p0 = 0, phalf = 0.5, p1 = 1;
        y = at(dt, f_pow, &p0, 0.0, &g); /* x^0 = 1, gradient 0 (not 0 * 0^-1) */
        ck_assert(y == 1 && g == 0);
        y = at(dt, f_pow, &phalf, 0.0, &g); /* 0.5 * 0^-0.5 = inf */
        ck_assert(y == 0 && isinf(g));
        y = at(dt, f_pow, &p1, 0.0, &g); /* 1 * 0^0 = 1 */
        ck_assert(y == 0 && g == 1);
        y = at(dt, f_pow, &P2, -3.0, &g);
        ck_assert(y == 9 && g == -6);
        y = at(dt, f_pow, &P3, -2.0, &g);
        ck_assert_double_eq_tol(y, -8, 1e-6);
        ck_assert_double_eq_tol(g, 12, 1e-5);
    }
    /* NaN propagates through relu and max-like ops. */
    double g;
    ck_assert(isnan(at(TG_F64, f_relu, NULL, NAN, &g)));
}
END_TEST

/* Softplus-like numerics: the saturating functions stay finite and exact
 * in their tails, in both dtypes, with finite (zero) gradients. */
START_TEST(test_saturating_tails) {
    static const struct {
        const char *name;
        tg_gradcheck_fn f;
        double x, y, g; /* f(x) = y exactly, f'(x) = g exactly */
    } tails[] = {
        {"sigmoid", f_sigmoid, 1e4, 1, 0},
        {"sigmoid", f_sigmoid, -1e4, 0, 0},
        {"tanh", f_tanh, 1e4, 1, 0},
        {"tanh", f_tanh, -1e4, -1, 0},
        {"silu", f_silu, -1e4, 0, 0},
        {"silu", f_silu, 1e4, 1e4, 1},
        {"gelu", f_gelu, -1e4, 0, 0},
        {"gelu", f_gelu, 1e4, 1e4, 1},
        {"gelu_tanh", f_gelu_tanh, -1e4, 0, 0},
        {"gelu_tanh", f_gelu_tanh, 1e4, 1e4, 1},
        {"softplus", f_softplus, -1e4, 0, 0},
        {"softplus", f_softplus, 1e4, 1e4, 1},
        {"exp", f_exp, -1e4, 0, 0},
    };
    for (int k = 0; k < 2; k++) {
        tg_dtype dt = k ? TG_F32 : TG_F64;
        for (size_t i = 0; i < sizeof tails / sizeof tails[0]; i++) {
            double g, y = at(dt, tails[i].f, NULL, tails[i].x, &g);
            ck_assert_msg(y == tails[i].y && g == tails[i].g, "%s %s(%g) = %g, gradient %g; expected %g, %g",
                          tg_dtype_name(dt), tails[i].name, tails[i].x, y, g, tails[i].y, tails[i].g);
        }
    }
    /* The left tails keep relative accuracy (no 1 - 1 cancellation):
     * sigmoid(-100) = e^-100 / (1 + e^-100); Phi(-10) = 7.619853024160526e-24. */
    double g;
    double y = at(TG_F64, f_sigmoid, NULL, -100, &g);
    ck_assert_double_eq_tol(y, exp(-100.0), 1e-14 * exp(-100.0));
    ck_assert_double_eq_tol(g, exp(-100.0), 1e-14 * exp(-100.0));
    y = at(TG_F64, f_gelu, NULL, -10, &g);
    ck_assert_double_eq_tol(y, -10 * 7.619853024160526e-24, 1e-12 * 7.6e-23);
    y = at(TG_F32, f_sigmoid, NULL, -80, &g); /* e^-80 = 1.8e-35, a normal float */
    ck_assert_double_eq_tol(y, exp(-80.0), 1e-6 * exp(-80.0));
    /* softplus(-100) = log1p(e^-100) = e^-100 to double's precision, and
     * its gradient sigmoid(-100) too */
    y = at(TG_F64, f_softplus, NULL, -100, &g);
    ck_assert_double_eq_tol(y, exp(-100.0), 1e-14 * exp(-100.0));
    ck_assert_double_eq_tol(g, exp(-100.0), 1e-14 * exp(-100.0));
}
END_TEST

/* The activations against their definitions, computed here in double, on
 * a grid in float64. */
START_TEST(test_activation_definitions) {
    for (double x = -6; x <= 6; x += 0.37) {
        double g, y;
        y = at(TG_F64, f_gelu, NULL, x, &g);
        ck_assert_double_eq_tol(y, 0.5 * x * (1 + erf(x / sqrt(2.0))), 1e-15);
        double pdf = exp(-x * x / 2) / sqrt(2 * PI), cdf = 0.5 * (1 + erf(x / sqrt(2.0)));
        ck_assert_double_eq_tol(g, cdf + x * pdf, 1e-14);
        y = at(TG_F64, f_gelu_tanh, NULL, x, &g);
        double u = sqrt(2 / PI) * (x + 0.044715 * x * x * x);
        ck_assert_double_eq_tol(y, 0.5 * x * (1 + tanh(u)), 1e-14);
        y = at(TG_F64, f_sigmoid, NULL, x, &g);
        double s = 1 / (1 + exp(-x));
        ck_assert_double_eq_tol(y, s, 1e-15);
        ck_assert_double_eq_tol(g, s * (1 - s), 1e-15);
        y = at(TG_F64, f_silu, NULL, x, &g);
        ck_assert_double_eq_tol(y, x * s, 1e-14);
        ck_assert_double_eq_tol(g, s + x * s * (1 - s), 1e-14);
        y = at(TG_F64, f_tanh, NULL, x, &g);
        ck_assert_double_eq_tol(g, 1 / (cosh(x) * cosh(x)), 1e-14);
        y = at(TG_F64, f_softplus, NULL, x, &g);
        ck_assert_double_eq_tol(y, log1p(exp(x)), 1e-15);
        ck_assert_double_eq_tol(g, s, 1e-15);
    }
}
END_TEST

/* ---- fast paths, threads ------------------------------------------------- */

/* Large same-shape and bias-shaped ops: the threaded paths agree bit for
 * bit with one thread, and the bias gradient is the column sum. */
START_TEST(test_large_threads_deterministic) {
    const int64_t N = 600, C = 257; /* 154200 elements: above the threading threshold */
    double res[2][3];
    for (int th = 1; th <= 2; th++) {
        tg_set_threads(ctx, th);
        tg_tensor *x = tg_requires_grad(ctx, tg_randn(ctx, TG_F32, TG_SHAPE(N, C), 0, 1));
        tg_tensor *b = tg_requires_grad(ctx, tg_randn(ctx, TG_F32, TG_SHAPE(C), 0, 1));
        tg_tensor *z = tg_mul(ctx, tg_gelu(ctx, tg_add(ctx, x, b), false), x); /* same shape: one row */
        tg_tensor *loss = tg_sum(ctx, tg_div(ctx, z, tg_add_scalar(ctx, tg_abs(ctx, b), 1)));
        tg_backward(ctx, loss);
        ck_assert_msg(tg_ok(ctx), "%s", tg_error_message(ctx));
        double sx = 0, sb = 0;
        for (int64_t i = 0; i < x->numel; i++) sx += ((float *)x->grad->data)[i] * (double)(i % 7 + 1);
        for (int64_t i = 0; i < C; i++) sb += ((float *)b->grad->data)[i] * (double)(i % 5 + 1);
        res[th - 1][0] = tg_get_flat(ctx, loss, 0), res[th - 1][1] = sx, res[th - 1][2] = sb;
        tg_ctx_reset(ctx);
        tg_rng_seed(ctx, 42);
    }
    for (int k = 0; k < 3; k++) ck_assert_msg(res[0][k] == res[1][k], "%d: %.17g vs %.17g", k, res[0][k], res[1][k]);

    /* (N,C) + (C): db is the column sum of dy. */
    tg_tensor *x = tg_randn(ctx, TG_F64, TG_SHAPE(N, C), 0, 1);
    tg_tensor *b = tg_requires_grad(ctx, tg_zeros(ctx, TG_F64, TG_SHAPE(C)));
    tg_tensor *dy = tg_randn(ctx, TG_F64, TG_SHAPE(N, C), 0, 1);
    tg_backward_ex(ctx, tg_add(ctx, x, b), dy, false);
    for (int64_t j = 0; j < C; j++) {
        double s = 0;
        for (int64_t i = 0; i < N; i++) s += ((double *)dy->data)[i * C + j];
        ck_assert_double_eq_tol(((double *)b->grad->data)[j], s, 1e-12);
    }
}
END_TEST

START_TEST(test_empty_tensors) {
    tg_tensor *a = tg_requires_grad(ctx, tg_zeros(ctx, TG_F64, TG_SHAPE(0, 3)));
    tg_tensor *b = tg_requires_grad(ctx, tg_ones(ctx, TG_F64, TG_SHAPE(3)));
    tg_tensor *y = tg_mul(ctx, tg_exp(ctx, a), b);
    ck_assert_ptr_nonnull(y);
    ck_assert_int_eq(y->numel, 0);
    ck_assert_int_eq(y->shape[0], 0);
    tg_backward_ex(ctx, y, tg_zeros(ctx, TG_F64, TG_SHAPE(0, 3)), false);
    ck_assert(tg_ok(ctx));
    for (int i = 0; i < 3; i++) ck_assert(tg_get_flat(ctx, b->grad, i) == 0);
}
END_TEST

/* ---- recording ------------------------------------------------------------ */

START_TEST(test_recording_rules) {
    tg_tensor *x = tg_ones(ctx, TG_F64, TG_SHAPE(3));
    tg_tensor *y = tg_relu(ctx, tg_add(ctx, x, x));
    ck_assert(!y->requires_grad);
    ck_assert_int_eq(tg_tape_size(ctx), 0);
    tg_requires_grad(ctx, x);
    bool was = tg_set_grad_enabled(ctx, false);
    y = tg_mul(ctx, x, x);
    ck_assert(!y->requires_grad);
    ck_assert_int_eq(tg_tape_size(ctx), 0);
    tg_set_grad_enabled(ctx, was);
    y = tg_exp(ctx, tg_mul(ctx, x, x));
    ck_assert(y->requires_grad);
    ck_assert_int_eq(tg_tape_size(ctx), 2);
    /* mul keeps both inputs, exp its output, for backward: 3 * 3 doubles */
    ck_assert_uint_eq(tg_tape_saved_bytes(ctx), (3 + 3 + 3) * sizeof(double));
}
END_TEST

/* ---- errors --------------------------------------------------------------- */

START_TEST(test_errors_shapes_dtypes_nulls) {
    tg_tensor *a = tg_ones(ctx, TG_F64, TG_SHAPE(2, 3));
    tg_tensor *b = tg_ones(ctx, TG_F64, TG_SHAPE(4));
    tg_tensor *c = tg_ones(ctx, TG_F32, TG_SHAPE(2, 3));
    static const char *names[] = {"tg_add", "tg_sub", "tg_mul", "tg_div"};
    for (int op = 0; op < 4; op++) {
        tg_test_assert_fails(ctx, binop(ctx, op, a, b), TG_ERR_SHAPE, names[op], "(2, 3)", "(4,)", "broadcast", NULL);
        tg_test_assert_fails(ctx, binop(ctx, op, b, a), TG_ERR_SHAPE, names[op], "(4,)", "(2, 3)", NULL);
        tg_test_assert_fails(ctx, binop(ctx, op, a, c), TG_ERR_DTYPE, names[op], "float64", "float32", NULL);
        tg_test_assert_fails(ctx, binop(ctx, op, NULL, a), TG_ERR_NULL, names[op], "'a'", NULL);
        tg_test_assert_fails(ctx, binop(ctx, op, a, NULL), TG_ERR_NULL, names[op], "'b'", NULL);
    }
    /* (2,3,1) and (3,2): dims (3 vs 3) fit, (1 vs 2) fit, ... (2 vs 3)? no:
     * aligned from the end: 1|2, 3|3, 2|- -> fits: (2,3,2). */
    tg_tensor *p = tg_ones(ctx, TG_F64, TG_SHAPE(2, 3, 1)), *q = tg_ones(ctx, TG_F64, TG_SHAPE(3, 2));
    tg_tensor *r = tg_add(ctx, p, q);
    ck_assert_ptr_nonnull(r);
    ck_assert_int_eq(r->ndim, 3);
    ck_assert_int_eq(r->shape[2], 2);
    tg_tensor *e = tg_ones(ctx, TG_F64, TG_SHAPE(0, 3)), *f = tg_ones(ctx, TG_F64, TG_SHAPE(2, 3));
    /* 0 vs 2 does not broadcast (only 1 does) */
    tg_test_assert_fails(ctx, tg_add(ctx, e, f), TG_ERR_SHAPE, "(0, 3)", "(2, 3)", NULL);

    for (int k = 0; k < N_UNARY; k++) {
        tg_tensor *in[1] = {NULL};
        tg_test_assert_fails(ctx, UNARY[k].f(ctx, in, UNARY[k].arg), TG_ERR_NULL, "'x'", NULL);
    }
    tg_test_assert_fails(ctx, tg_pow_scalar(ctx, a, NAN), TG_ERR_VALUE, "tg_pow_scalar", "nan", NULL);
    tg_test_assert_fails(ctx, tg_pow_scalar(ctx, a, INFINITY), TG_ERR_VALUE, "tg_pow_scalar", NULL);
    tg_test_assert_fails(ctx, tg_leaky_relu(ctx, a, INFINITY), TG_ERR_VALUE, "tg_leaky_relu", "negative_slope", NULL);
    tg_test_assert_fails(ctx, tg_gelu(ctx, NULL, true), TG_ERR_NULL, "tg_gelu", NULL);
    tg_test_assert_fails(ctx, tg_exp(ctx, NULL), TG_ERR_NULL, "tg_exp", NULL);
}
END_TEST

/* With the context in error every op returns NULL, does nothing, and the
 * first error stays; a NULL context gives NULL. */
START_TEST(test_errors_context_in_error) {
    tg_tensor *a = tg_requires_grad(ctx, tg_ones(ctx, TG_F64, TG_SHAPE(2, 3)));
    tg_error(ctx, TG_ERR_VALUE, "first", "the first error");
    size_t used = tg_arena_used(ctx);
    ck_assert_ptr_null(tg_add(ctx, a, a));
    ck_assert_ptr_null(tg_sub(ctx, a, a));
    ck_assert_ptr_null(tg_mul(ctx, a, a));
    ck_assert_ptr_null(tg_div(ctx, a, a));
    ck_assert_ptr_null(tg_add(ctx, a, NULL));
    ck_assert_ptr_null(tg_pow_scalar(ctx, a, NAN));
    ck_assert_ptr_null(tg_leaky_relu(ctx, a, NAN));
    ck_assert_ptr_null(tg_gelu(ctx, a, false));
    for (int k = 0; k < N_UNARY; k++) {
        tg_tensor *in[1] = {a};
        ck_assert_ptr_null(UNARY[k].f(ctx, in, UNARY[k].arg));
    }
    ck_assert_uint_eq(tg_arena_used(ctx), used);
    ck_assert_int_eq(tg_tape_size(ctx), 0);
    tg_test_assert_error(ctx, TG_ERR_VALUE, "first", NULL);

    ck_assert_ptr_null(tg_add(NULL, a, a));
    ck_assert_ptr_null(tg_mul_scalar(NULL, a, 2));
    ck_assert_ptr_null(tg_pow_scalar(NULL, a, 2));
    ck_assert_ptr_null(tg_leaky_relu(NULL, a, 0.1));
    ck_assert_ptr_null(tg_gelu(NULL, a, true));
    ck_assert_ptr_null(tg_relu(NULL, a));
}
END_TEST

Suite *make_ops_elementwise_suite(void) {
    Suite *s = suite_create("ops_elementwise");
    TCase *tc = tg_test_tcase(s, "values", setup, teardown, test_pytorch_edge_semantics, test_saturating_tails,
                              test_activation_definitions, test_empty_tensors, NULL);
    tcase_add_loop_test(tc, test_unary_vs_pytorch, 0, 2 * N_UNARY);
    tcase_add_loop_test(tc, test_binary_broadcast_vs_pytorch, 0, 16);
    tcase_add_loop_test(tc, test_broadcast_index_mapping, 0, 4 * N_PAIRS);

    tc = tg_test_tcase(s, "gradients", setup, teardown, test_chain_fd, test_same_tensor_both_sides, test_accumulation,
                       test_backward_adds_to_existing_grad, test_large_threads_deterministic, test_recording_rules,
                       NULL);
    tcase_add_loop_test(tc, test_unary_fd, 0, N_UNARY);

    tg_test_tcase(s, "errors", setup, teardown, test_errors_shapes_dtypes_nulls, test_errors_context_in_error, NULL);
    return s;
}

int main(void) { return tg_test_run(make_ops_elementwise_suite()); }

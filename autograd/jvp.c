/* Forward mode: tg_jvp, the rule registry, and the tangent rules of the
 * elementwise ops, reductions and shape ops (the others: jvp_nn.c).
 *
 * The tape is a Wengert list in execution order, so the tangents flow in
 * that order: record k's output tangent needs only the tangents of its
 * inputs, made by records before it (or given: the inputs of tg_jvp).
 * Where backward walks the tape in reverse applying J^T, tg_jvp walks it
 * forward applying J, rule by rule:
 *   t(out_k) = sum_i (d out_k / d in_i) t(in_i)
 * A record none of whose inputs carries a tangent is skipped (its tangent
 * is zero). Each rule is written from the op's forward, not from its
 * backward, so comparing the two (the adjoint test of tapegrad::check,
 * <u, J v> = <J^T u, v>) tests one against the other. */
#include "autograd/jvp.h"

#include <math.h>
#include <string.h>

/* ---- float64 views ---------------------------------------------------------- */

double *tg_jvp_values(tg_ctx *ctx, const tg_tensor *t) {
    double *v = tg_arena_alloc_fn(ctx, "tg_jvp", (size_t)(t->numel > 0 ? t->numel : 1) * sizeof *v);
    for (int64_t i = 0; v && i < t->numel; i++) v[i] = tg_load(t, i);
    return v;
}

tg_tensor *tg_jvp_tensor(tg_ctx *ctx, const tg_tensor *like, const double *v) {
    tg_tensor *t = tg_new_like(ctx, "tg_jvp", like);
    for (int64_t i = 0; t && i < t->numel; i++) tg_store(t, i, v[i]);
    return t;
}

/* ---- elementwise ------------------------------------------------------------- */

/* Binary ops with broadcasting, y = a op b: the tangents broadcast as the
 * inputs did, so the ops themselves make them the output's shape.
 *   add  t_a + t_b          sub  t_a - t_b
 *   mul  t_a b + a t_b      div  (t_a - y t_b) / b   (y = a / b) */
static tg_tensor *jvp_add(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) {
    (void)n;
    return tg_add(ctx, t[0], t[1]);
}
static tg_tensor *jvp_sub(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) {
    (void)n;
    return tg_sub(ctx, t[0], t[1]);
}
static tg_tensor *jvp_mul(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) {
    return tg_add(ctx, tg_mul(ctx, t[0], n->in[1]), tg_mul(ctx, n->in[0], t[1]));
}
static tg_tensor *jvp_div(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) {
    return tg_div(ctx, tg_sub(ctx, t[0], tg_mul(ctx, n->out, t[1])), n->in[1]);
}

/* Unary ops y = f(x; a): t_y = f'(x) t_x, f' written from the forward
 * (x the input, y the output, a the op's scalar n->f[0]). */
#define PI 3.14159265358979323846

static double sigmoid_of(double x) { return x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x)); }

static double dneg(double x, double y, double a) { return (void)x, (void)y, (void)a, -1.0; }
static double dadd_scalar(double x, double y, double a) { return (void)x, (void)y, (void)a, 1.0; }
static double dmul_scalar(double x, double y, double a) { return (void)x, (void)y, a; }
/* y = x^p: p x^(p-1), and 0 for p = 0 (y = 1 everywhere) */
static double dpow_scalar(double x, double y, double p) { return (void)y, p == 0 ? 0.0 : p * pow(x, p - 1); }
static double dexp(double x, double y, double a) { return (void)x, (void)a, y; }
static double dlog(double x, double y, double a) { return (void)y, (void)a, 1.0 / x; }
static double dsqrt(double x, double y, double a) { return (void)x, (void)a, 0.5 / y; }
static double dabs(double x, double y, double a) { return (void)y, (void)a, x > 0 ? 1.0 : x < 0 ? -1.0 : 0.0; }
static double drelu(double x, double y, double a) { return (void)y, (void)a, x > 0 ? 1.0 : 0.0; }
static double dleaky_relu(double x, double y, double a) { return (void)y, x > 0 ? 1.0 : a; }
static double dsigmoid(double x, double y, double a) { return (void)x, (void)a, y * (1 - y); }
static double dtanh(double x, double y, double a) { return (void)x, (void)a, 1 - y * y; }
/* y = x Phi(x): Phi(x) + x phi(x) */
static double dgelu(double x, double y, double a) {
    (void)y, (void)a;
    return 0.5 * erfc(-x / sqrt(2.0)) + x * exp(-0.5 * x * x) / sqrt(2.0 * PI);
}
/* y = x/2 (1 + tanh u), u = c (x + k x^3): (1 + tanh u)/2 + x/2 (1 - tanh^2 u) c (1 + 3k x^2) */
static double dgelu_tanh(double x, double y, double a) {
    (void)y, (void)a;
    const double c = sqrt(2.0 / PI), k = 0.044715, th = tanh(c * (x + k * x * x * x));
    return 0.5 * (1 + th) + 0.5 * x * (1 - th * th) * c * (1 + 3 * k * x * x);
}
/* y = x s(x): s + x s (1 - s) */
/* gelu_cdf: Phi(x), the record exact GELU's double backward makes
 * (autograd/grad_rules.c): Phi' = phi(x) = exp(-x^2 / 2) / sqrt(2 pi) */
static double dgelu_cdf(double x, double y, double a) {
    return (void)y, (void)a, 0.3989422804014327 * exp(-0.5 * x * x);
}
static double dsilu(double x, double y, double a) {
    (void)y, (void)a;
    const double s = sigmoid_of(x);
    return s + x * s * (1 - s);
}

typedef double (*deriv_fn)(double x, double y, double a);

static const struct {
    const char *op;
    deriv_fn d;
} UNARY[] = {
    {"neg", dneg},
    {"add_scalar", dadd_scalar},
    {"mul_scalar", dmul_scalar},
    {"pow_scalar", dpow_scalar},
    {"exp", dexp},
    {"log", dlog},
    {"sqrt", dsqrt},
    {"abs", dabs},
    {"relu", drelu},
    {"leaky_relu", dleaky_relu},
    {"sigmoid", dsigmoid},
    {"tanh", dtanh},
    {"gelu", dgelu},
    {"gelu_tanh", dgelu_tanh},
    {"gelu_cdf", dgelu_cdf},
    {"silu", dsilu},
};

static tg_tensor *jvp_unary(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) {
    deriv_fn d = NULL;
    for (size_t k = 0; k < sizeof UNARY / sizeof UNARY[0]; k++)
        if (!strcmp(UNARY[k].op, n->op)) d = UNARY[k].d;
    tg_tensor *y = tg_new_like(ctx, "tg_jvp", n->out);
    const tg_tensor *x = n->in[0];
    for (int64_t i = 0; y && i < y->numel; i++)
        tg_store(y, i, d(tg_load(x, i), tg_load(n->out, i), n->f[0]) * tg_load(t[0], i));
    return y;
}

/* ---- reductions --------------------------------------------------------------- */

/* Sums and means are linear: the tangent is the same reduction of t_x
 * (keepdim when the output kept the reduced dim). */
static tg_tensor *jvp_sum(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) {
    return strcmp(n->op, "sum") ? tg_mean(ctx, t[0]) : tg_sum(ctx, t[0]);
}
static tg_tensor *jvp_sum_axis(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) {
    bool keep = n->out->ndim == n->in[0]->ndim;
    return strcmp(n->op, "sum_axis") ? tg_mean_axis(ctx, t[0], (int)n->i[0], keep)
                                     : tg_sum_axis(ctx, t[0], (int)n->i[0], keep);
}

/* y[o,i] = x[o, idx[o,i], i] (the first maximum, saved): the tangent picks
 * the same element of t_x. */
static tg_tensor *jvp_max_axis(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) {
    const tg_tensor *x = n->in[0];
    const int axis = (int)n->i[0];
    int64_t outer = 1, inner = 1, R = x->ndim ? x->shape[axis] : 1; /* a 0-d x is its own max */
    for (int d = 0; d < axis; d++) outer *= x->shape[d];
    for (int d = axis + 1; d < x->ndim; d++) inner *= x->shape[d];
    const int64_t *idx = n->saved;
    tg_tensor *y = tg_new_like(ctx, "tg_jvp", n->out);
    for (int64_t o = 0; y && o < outer; o++)
        for (int64_t i = 0; i < inner; i++)
            tg_store(y, o * inner + i, tg_load(t[0], (o * R + idx[o * inner + i]) * inner + i));
    return y;
}

/* ---- shape ops: linear maps, the tangent goes through the same op ---------- */

static tg_tensor *jvp_transpose(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) {
    (void)n;
    return tg_transpose(ctx, t[0]);
}
static tg_tensor *jvp_permute(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) {
    int perm[TG_MAX_DIMS];
    for (int d = 0; d < (int)n->i[1]; d++) perm[d] = (int)((n->i[0] >> (4 * d)) & 15);
    return tg_permute(ctx, t[0], perm);
}
static tg_tensor *jvp_reshape(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) {
    return tg_reshape(ctx, t[0], n->out->ndim, n->out->shape);
}
static tg_tensor *jvp_concat(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) {
    return tg_concat(ctx, n->n_in, t, (int)n->i[0]);
}
static tg_tensor *jvp_slice(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) {
    const int axis = (int)n->i[0];
    return tg_slice(ctx, t[0], axis, n->i[1], n->i[1] + n->out->shape[axis]);
}

/* y = tg_cast(x, dtype), linear (the rounding counted as the identity):
 * the tangent is cast the same way. */
static tg_tensor *jvp_cast(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) { return tg_cast(ctx, t[0], n->out->dtype); }

static const tg_jvp_entry RULES[] = {
    {"add", jvp_add},
    {"sub", jvp_sub},
    {"mul", jvp_mul},
    {"div", jvp_div},
    {"sum", jvp_sum},
    {"mean", jvp_sum},
    {"sum_axis", jvp_sum_axis},
    {"mean_axis", jvp_sum_axis},
    {"max_axis", jvp_max_axis},
    {"tg_transpose", jvp_transpose},
    {"tg_permute", jvp_permute},
    {"tg_transpose_dims", jvp_permute},
    {"tg_reshape", jvp_reshape},
    {"tg_concat", jvp_concat},
    {"tg_slice", jvp_slice},
    {"tg_cast", jvp_cast},
};

/* ---- the registry -------------------------------------------------------------
 * Two kinds of record, two places a rule comes from:
 *  - a custom op (tg_op_apply's record, marked by its user_backward) takes
 *    only a rule registered under its name: a learner's op named "add" is
 *    not the built-in add, and must not get its tangent;
 *  - any other record takes the built-in rule of its name, else a
 *    registered one (records made with tg_record under a name of one's
 *    own, as the seeded bugs of tapegrad-gradcheck are): registering "add"
 *    never changes tg_add's tangent.
 * The double-backward rules keep apart the same way (a custom op's record
 * carries its own rule or tg_grad_rule_none: autograd/grad_graph.h). */

#define USER_RULES 64
static struct {
    char op[64];
    tg_jvp_rule rule;
} user_rules[USER_RULES];
static int n_user_rules;

bool tg_jvp_register(const char *op, tg_jvp_rule rule) {
    if (!op || !*op || strlen(op) >= sizeof user_rules[0].op || !rule) return false;
    int k = 0;
    while (k < n_user_rules && strcmp(user_rules[k].op, op)) k++;
    if (k == USER_RULES) return false;
    if (k == n_user_rules) n_user_rules++;
    strcpy(user_rules[k].op, op);
    user_rules[k].rule = rule;
    return true;
}

static tg_jvp_rule registered_rule(const char *op) {
    for (int k = 0; k < n_user_rules; k++)
        if (!strcmp(user_rules[k].op, op)) return user_rules[k].rule;
    return NULL;
}

static tg_jvp_rule builtin_rule(const char *op) {
    for (size_t k = 0; k < sizeof RULES / sizeof RULES[0]; k++)
        if (!strcmp(RULES[k].op, op)) return RULES[k].rule;
    for (size_t k = 0; k < sizeof UNARY / sizeof UNARY[0]; k++)
        if (!strcmp(UNARY[k].op, op)) return jvp_unary;
    for (int k = 0; k < tg_jvp_nn_count; k++)
        if (!strcmp(tg_jvp_nn_rules[k].op, op)) return tg_jvp_nn_rules[k].rule;
    return NULL;
}

tg_jvp_rule tg_jvp_find_rule(const char *op) {
    if (!op) return NULL;
    tg_jvp_rule r = builtin_rule(op);
    return r ? r : registered_rule(op);
}

/* The rule tg_jvp runs for record n. */
static tg_jvp_rule rule_of(const tg_node *n) {
    return n->user_backward ? registered_rule(n->op) : tg_jvp_find_rule(n->op);
}

/* ---- tg_jvp ------------------------------------------------------------------- */

/* The tangent of tensor x as record k sees it: given (an input of tg_jvp),
 * made by an earlier record, or none (NULL: a constant). */
static tg_tensor *tangent_of(const tg_ctx *ctx, tg_tensor *x, int64_t k, tg_tensor *const *tan, int n,
                             tg_tensor *const *inputs, tg_tensor *const *tangents) {
    if (!x) return NULL;
    for (int j = 0; j < n; j++)
        if (x == inputs[j]) return tangents[j];
    int64_t m = tg_impl(x)->node;
    return m >= 0 && m < k && ctx->tape.nodes[m].out == x ? tan[m] : NULL;
}

static bool jvp_check_args(tg_ctx *ctx, const char *fn, tg_tensor *out, int n, tg_tensor *const *inputs,
                           tg_tensor *const *tangents) {
    if (!tg_check_arg(ctx, fn, "out", out)) return false;
    if (n < 1 || !inputs || !tangents) {
        tg_error(ctx, TG_ERR_VALUE, fn, "n = %d inputs: need at least 1, with the inputs and tangents arrays", n);
        return false;
    }
    char s1[TG_SHAPE_STR], s2[TG_SHAPE_STR];
    for (int j = 0; j < n; j++) {
        char what[32];
        snprintf(what, sizeof what, "inputs[%d]", j);
        if (!tg_check_arg(ctx, fn, what, inputs[j])) return false;
        snprintf(what, sizeof what, "tangents[%d]", j);
        if (!tg_check_arg(ctx, fn, what, tangents[j])) return false;
        if (!inputs[j]->requires_grad) {
            tg_error(ctx, TG_ERR_STATE, fn,
                     "inputs[%d] of shape %s does not require grad: the forward recorded nothing for it "
                     "(tg_requires_grad it before the forward)",
                     j, tg_shape_of(s1, inputs[j]));
            return false;
        }
        if (!tg_check_same_dtype(ctx, fn, inputs[j], tangents[j])) return false;
        if (!tg_same_shape(inputs[j], tangents[j])) {
            tg_error(ctx, TG_ERR_SHAPE, fn, "tangents[%d] of shape %s does not match inputs[%d] of shape %s", j,
                     tg_shape_of(s1, tangents[j]), j, tg_shape_of(s2, inputs[j]));
            return false;
        }
    }
    int64_t top = tg_impl(out)->node;
    if (top >= 0 && (ctx->tape.consumed || top >= ctx->tape.n_nodes || ctx->tape.nodes[top].out != out)) {
        tg_error(ctx, TG_ERR_STATE, fn,
                 "out of shape %s is not on the live tape (a backward consumed it: pass keep_tape=true to "
                 "tg_backward_ex, or run tg_jvp before it)",
                 tg_shape_of(s1, out));
        return false;
    }
    return true;
}

/* Runs record n's rule on its input tangents (zeros for inputs without
 * one) and checks what it returns. */
static tg_tensor *run_rule(tg_ctx *ctx, const char *fn, tg_node *n, tg_tensor **tin) {
    tg_jvp_rule rule = rule_of(n);
    if (!rule) {
        tg_error(ctx, TG_ERR_STATE, fn,
                 "op '%s' has no tangent rule (forward mode); register one with tg_jvp_register%s", n->op,
                 n->user_backward && builtin_rule(n->op)
                     ? " (a custom op never takes the built-in op's rule of the same name)"
                     : "");
        return NULL;
    }
    for (int i = 0; i < n->n_in; i++)
        if (!tin[i] && n->in[i]) tin[i] = tg_zeros(ctx, n->in[i]->dtype, n->in[i]->ndim, n->in[i]->shape);
    if (!tg_ok(ctx)) return NULL;
    tg_tensor *t = rule(ctx, n, tin);
    if (!tg_ok(ctx)) {
        size_t len = strlen(ctx->message);
        if (!strstr(ctx->message, n->op))
            snprintf(ctx->message + len, sizeof ctx->message - len, " (in the tangent rule of '%s')", n->op);
        return NULL;
    }
    if (!t || t->dtype != n->out->dtype || !tg_same_shape(t, n->out)) {
        char s1[TG_SHAPE_STR], s2[TG_SHAPE_STR];
        tg_error(ctx, TG_ERR_SHAPE, fn, "the tangent rule of '%s' returned %s %s for an output of %s %s", n->op,
                 t ? tg_dtype_name(t->dtype) : "NULL", t ? tg_shape_of(s1, t) : "", tg_dtype_name(n->out->dtype),
                 tg_shape_of(s2, n->out));
        return NULL;
    }
    return t;
}

tg_tensor *tg_jvp(tg_ctx *ctx, tg_tensor *out, int n, tg_tensor *const *inputs, tg_tensor *const *tangents) {
    static const char fn[] = "tg_jvp";
    if (!tg_ok(ctx) || !jvp_check_args(ctx, fn, out, n, inputs, tangents)) return NULL;
    const int64_t top = tg_impl(out)->node;
    if (top < 0) { /* out is a leaf: one of the inputs, or a constant */
        for (int j = 0; j < n; j++)
            if (inputs[j] == out) return tg_copy(ctx, tangents[j]);
        return tg_zeros(ctx, out->dtype, out->ndim, out->shape);
    }
    tg_tensor **tan = tg_arena_alloc_fn(ctx, fn, (size_t)(top + 1) * sizeof *tan);
    if (!tan) return NULL;
    /* Rules use ops: with grad mode off they record nothing on the tape
     * being walked. */
    bool was = tg_set_grad_enabled(ctx, false);
    for (int64_t k = 0; k <= top && tg_ok(ctx); k++) {
        tg_node *nd = &ctx->tape.nodes[k];
        tan[k] = NULL;
        tg_tensor **tin = tg_arena_alloc_fn(ctx, fn, (size_t)(nd->n_in > 0 ? nd->n_in : 1) * sizeof *tin);
        if (!tin) break;
        bool any = false;
        for (int i = 0; i < nd->n_in; i++) {
            tin[i] = tangent_of(ctx, nd->in[i], k, tan, n, inputs, tangents);
            any = any || tin[i];
        }
        /* a record changed in place since the forward: the tangent would
         * use values the forward never saw (as backward, an error) */
        if (any && tg_record_check(ctx, fn, nd)) tan[k] = run_rule(ctx, fn, nd, tin);
    }
    tg_set_grad_enabled(ctx, was);
    if (!tg_ok(ctx)) return NULL;
    return tan[top] ? tan[top] : tg_zeros(ctx, out->dtype, out->ndim, out->shape);
}

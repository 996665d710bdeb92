/* The op registry: every differentiable op with a builder of random valid
 * inputs and its forward, so tests and the gradient-check tool can check
 * every op by walking one table.
 *
 * An op's inputs are described by a spec string (see tapegrad.h): shapes
 * separated by commas ("2x1x3,4x3"; "()" is 0-d), then ";key=value"
 * arguments. tg_registry_build parses the spec into a tg_op_case, then the
 * op's builder checks the shapes and arguments it needs and draws the
 * inputs from the context's RNG. Builders keep inputs away from the op's
 * kinks, where the one-sided derivatives differ and central differences
 * return their average:
 *   relu, abs, leaky_relu   |x| in [0.2, 2), either sign
 *   div denominators        |b| in [0.5, 2)
 *   log, sqrt, pow          x in [0.5, 2)
 *   max                     distinct values at least 4/numel apart
 * (h = 1e-6 is far below those gaps, so no difference straddles a kink.)
 *
 * The table below has one entry per op of TG_OP_LIST (layers/registry.h),
 * in the same order; a static_assert keeps their lengths equal. */
#include "check/registry.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/internal.h"

static const char BUILD_FN[] = "tg_registry_build";

/* ---- spec parsing -----------------------------------------------------------
 * spec  := shapes { ';' key '=' value }
 * shapes:= shape { ',' shape }
 * shape := '()' | size { 'x' size }       sizes are decimal, >= 0 */

/* Parses one shape from s[0..len) into ndim/shape; -1 sizes allowed when
 * allow_infer (reshape targets). */
static bool parse_shape(const char *s, size_t len, bool allow_infer, int *ndim, int64_t *shape) {
    if (len == 2 && s[0] == '(' && s[1] == ')') {
        *ndim = 0;
        return true;
    }
    int nd = 0;
    size_t i = 0;
    while (i < len) {
        if (nd == TG_MAX_DIMS) return false;
        bool neg = false;
        if (s[i] == '-' && allow_infer) {
            neg = true;
            i++;
        }
        if (i >= len || s[i] < '0' || s[i] > '9') return false;
        int64_t v = 0;
        while (i < len && s[i] >= '0' && s[i] <= '9') {
            if (v > (INT64_MAX - 9) / 10) return false;
            v = v * 10 + (s[i] - '0');
            i++;
        }
        if (neg && v != 1) return false;
        shape[nd++] = neg ? -1 : v;
        if (i < len) {
            if (s[i] != 'x' || i + 1 == len) return false;
            i++;
        }
    }
    if (nd == 0) return false;
    *ndim = nd;
    return true;
}

static bool parse_spec(tg_ctx *ctx, const tg_op_info *op, const char *spec, tg_op_case *c) {
    size_t n = strlen(spec);
    if (n >= sizeof c->spec) {
        tg_error(ctx, TG_ERR_FORMAT, BUILD_FN, "%s: spec of %zu characters is longer than %zu", op->name, n,
                 sizeof c->spec - 1);
        return false;
    }
    memcpy(c->spec, spec, n + 1);
    const char *p = spec;
    const char *end = spec + n;
    const char *semi = memchr(p, ';', n);
    const char *shapes_end = semi ? semi : end;
    /* shapes */
    while (p < shapes_end) {
        const char *comma = memchr(p, ',', (size_t)(shapes_end - p));
        const char *e = comma ? comma : shapes_end;
        if (c->n_shapes == TG_GRADCHECK_MAX_INPUTS ||
            !parse_shape(p, (size_t)(e - p), false, &c->ndim[c->n_shapes], c->shape[c->n_shapes])) {
            tg_error(ctx, TG_ERR_FORMAT, BUILD_FN,
                     "%s: bad shape '%.*s' in spec '%s' (sizes joined by 'x', e.g. 2x3; '()' for 0-d; at most %d "
                     "shapes of at most %d dims)",
                     op->name, (int)(e - p), p, spec, TG_GRADCHECK_MAX_INPUTS, TG_MAX_DIMS);
            return false;
        }
        c->n_shapes++;
        p = comma ? comma + 1 : e;
        if (comma && p == shapes_end) {
            tg_error(ctx, TG_ERR_FORMAT, BUILD_FN, "%s: spec '%s' ends its shapes with a comma", op->name, spec);
            return false;
        }
    }
    /* arguments */
    p = semi;
    while (p && p < end) {
        p++; /* past ';' */
        const char *next = memchr(p, ';', (size_t)(end - p));
        const char *e = next ? next : end;
        const char *eq = memchr(p, '=', (size_t)(e - p));
        size_t klen = eq ? (size_t)(eq - p) : 0, vlen = eq ? (size_t)(e - eq - 1) : 0;
        if (!eq || klen == 0 || vlen == 0 || klen >= sizeof c->arg_name[0] || vlen >= sizeof c->arg_value[0] ||
            c->n_args == TG_OP_MAX_ARGS) {
            tg_error(ctx, TG_ERR_FORMAT, BUILD_FN,
                     "%s: bad argument '%.*s' in spec '%s' (key=value, at most %d arguments)", op->name,
                     (int)(e - p), p, spec, TG_OP_MAX_ARGS);
            return false;
        }
        memcpy(c->arg_name[c->n_args], p, klen);
        c->arg_name[c->n_args][klen] = '\0';
        memcpy(c->arg_value[c->n_args], eq + 1, vlen);
        c->arg_value[c->n_args][vlen] = '\0';
        for (int a = 0; a < c->n_args; a++) {
            if (strcmp(c->arg_name[a], c->arg_name[c->n_args]) == 0) {
                tg_error(ctx, TG_ERR_FORMAT, BUILD_FN, "%s: argument '%s' given twice in spec '%s'", op->name,
                         c->arg_name[a], spec);
                return false;
            }
        }
        c->n_args++;
        p = next;
    }
    if (c->n_shapes == 0) {
        tg_error(ctx, TG_ERR_FORMAT, BUILD_FN, "%s: spec '%s' has no shape", op->name, spec);
        return false;
    }
    return true;
}

/* ---- helpers for builders -------------------------------------------------- */

/* Refuses arguments not in the comma-separated list `allowed`. */
static bool allow_args(tg_ctx *ctx, const tg_op_case *c, const char *allowed) {
    for (int a = 0; a < c->n_args; a++) {
        const char *k = c->arg_name[a];
        size_t kl = strlen(k);
        bool found = false;
        for (const char *p = allowed; *p;) {
            const char *comma = strchr(p, ',');
            size_t l = comma ? (size_t)(comma - p) : strlen(p);
            if (l == kl && strncmp(p, k, l) == 0) found = true;
            p += l + (comma ? 1 : 0);
        }
        if (!found) {
            tg_error(ctx, TG_ERR_FORMAT, BUILD_FN, "%s: unknown argument '%s' in spec '%s' (takes: %s)", c->op->name,
                     k, c->spec, *allowed ? allowed : "none");
            return false;
        }
    }
    return true;
}

static const char *arg_str(const tg_op_case *c, const char *key) {
    for (int a = 0; a < c->n_args; a++)
        if (strcmp(c->arg_name[a], key) == 0) return c->arg_value[a];
    return NULL;
}

/* A number argument, or `def` when absent. */
static bool arg_num(tg_ctx *ctx, const tg_op_case *c, const char *key, double def, double *out) {
    const char *s = arg_str(c, key);
    if (!s) {
        *out = def;
        return true;
    }
    char *e;
    errno = 0;
    double v = strtod(s, &e);
    if (*e || errno || !isfinite(v)) {
        tg_error(ctx, TG_ERR_FORMAT, BUILD_FN, "%s: argument %s=%s in spec '%s' is not a finite number",
                 c->op->name, key, s, c->spec);
        return false;
    }
    *out = v;
    return true;
}

/* An integer argument, or `def` when absent. */
static bool arg_int(tg_ctx *ctx, const tg_op_case *c, const char *key, int64_t def, int64_t *out) {
    const char *s = arg_str(c, key);
    if (!s) {
        *out = def;
        return true;
    }
    char *e;
    errno = 0;
    long long v = strtoll(s, &e, 10);
    if (*e || errno) {
        tg_error(ctx, TG_ERR_FORMAT, BUILD_FN, "%s: argument %s=%s in spec '%s' is not an integer", c->op->name,
                 key, s, c->spec);
        return false;
    }
    *out = (int64_t)v;
    return true;
}

/* Requires between lo and hi shapes. */
static bool need_shapes(tg_ctx *ctx, const tg_op_case *c, int lo, int hi) {
    if (c->n_shapes >= lo && c->n_shapes <= hi) return true;
    if (lo == hi)
        tg_error(ctx, TG_ERR_SHAPE, BUILD_FN, "%s: spec '%s' has %d shapes; the op takes %d", c->op->name, c->spec,
                 c->n_shapes, lo);
    else
        tg_error(ctx, TG_ERR_SHAPE, BUILD_FN, "%s: spec '%s' has %d shapes; the op takes %d..%d", c->op->name,
                 c->spec, c->n_shapes, lo, hi);
    return false;
}

/* How a builder draws an input's values. */
typedef enum rg_dist {
    RG_ANY,      /* uniform in [-2, 2) */
    RG_AWAY0,    /* |x| in [0.2, 2), random sign: relu, abs, leaky_relu */
    RG_DENOM,    /* |x| in [0.5, 2), random sign: denominators */
    RG_POS,      /* [0.5, 2): log, sqrt, pow */
    RG_DISTINCT  /* a shuffled ramp over [-2, 2): no ties, gaps of 4/numel */
} rg_dist;

/* Makes input k (named `name`) of the given shape with values drawn by
 * `dist`; `check` says whether it is differentiable. */
static tg_tensor *make_input_shaped(tg_ctx *ctx, tg_op_case *c, int k, int ndim, const int64_t *shape,
                                    const char *name, rg_dist dist, bool check) {
    tg_tensor *t = tg_new_tensor(ctx, BUILD_FN, c->dtype, ndim, shape);
    if (!t) return NULL;
    int64_t n = t->numel;
    if (dist == RG_DISTINCT) {
        /* Fisher-Yates shuffle of 0..n-1, then an even ramp */
        for (int64_t i = 0; i < n; i++) tg_store(t, i, (double)i);
        for (int64_t i = n - 1; i > 0; i--) {
            int64_t j = (int64_t)(tg_rng_uniform(ctx) * (double)(i + 1));
            if (j > i) j = i;
            double a = tg_load(t, i), b = tg_load(t, j);
            tg_store(t, i, b);
            tg_store(t, j, a);
        }
        for (int64_t i = 0; i < n; i++) tg_store(t, i, -2.0 + 4.0 * (tg_load(t, i) + 0.5) / (double)n);
    } else {
        for (int64_t i = 0; i < n; i++) {
            double u = tg_rng_uniform(ctx), v;
            switch (dist) {
            case RG_AWAY0: v = (u < 0.5 ? -1 : 1) * (0.2 + 1.8 * tg_rng_uniform(ctx)); break;
            case RG_DENOM: v = (u < 0.5 ? -1 : 1) * (0.5 + 1.5 * tg_rng_uniform(ctx)); break;
            case RG_POS: v = 0.5 + 1.5 * u; break;
            default: v = -2.0 + 4.0 * u; break;
            }
            tg_store(t, i, v);
        }
    }
    c->inputs[k] = t;
    c->input_names[k] = name;
    if (check) c->check |= (uint32_t)1 << k;
    if (k + 1 > c->n_inputs) c->n_inputs = k + 1;
    return t;
}

/* Input k with the spec's shape number `from`. */
static tg_tensor *make_input(tg_ctx *ctx, tg_op_case *c, int k, int from, const char *name, rg_dist dist,
                             bool check) {
    return make_input_shaped(ctx, c, k, c->ndim[from], c->shape[from], name, dist, check);
}

/* ---- elementwise: binary with broadcasting ------------------------------- */

static const char HELP_BINARY[] = "A,B: two shapes that broadcast (NumPy rules), e.g. 2x1x3,4x3";
static const char *const V_BINARY[] = {
    "3x4,3x4",     /* same shape */
    "1x1,1x1",     /* size-1 dims */
    "2x1x3,4x3",   /* a broadcasts over 4, b over 2 (both sides) */
    "4x3,2x1x3",   /* the other way round */
    "3,2x3",       /* lower rank on the left */
    "2x3x1,1x4",   /* both size-1 dims broadcast: (2,3,4) */
    "(),2x3",      /* a 0-d operand */
    "2x3,1",       /* a single element on the right */
    "8x33,33",     /* larger: directional */
    NULL};

static bool build_binary_any(tg_ctx *ctx, tg_op_case *c) {
    return need_shapes(ctx, c, 2, 2) && allow_args(ctx, c, "") && make_input(ctx, c, 0, 0, "a", RG_ANY, true) &&
           make_input(ctx, c, 1, 1, "b", RG_ANY, true);
}

static bool build_binary_denom(tg_ctx *ctx, tg_op_case *c) {
    return need_shapes(ctx, c, 2, 2) && allow_args(ctx, c, "") && make_input(ctx, c, 0, 0, "a", RG_ANY, true) &&
           make_input(ctx, c, 1, 1, "b", RG_DENOM, true);
}

static tg_tensor *fw_add(tg_ctx *ctx, tg_tensor *const *in, void *u) { (void)u; return tg_add(ctx, in[0], in[1]); }
static tg_tensor *fw_sub(tg_ctx *ctx, tg_tensor *const *in, void *u) { (void)u; return tg_sub(ctx, in[0], in[1]); }
static tg_tensor *fw_mul(tg_ctx *ctx, tg_tensor *const *in, void *u) { (void)u; return tg_mul(ctx, in[0], in[1]); }
static tg_tensor *fw_div(tg_ctx *ctx, tg_tensor *const *in, void *u) { (void)u; return tg_div(ctx, in[0], in[1]); }

/* ---- elementwise: unary ------------------------------------------------- */

static const char HELP_UNARY[] = "X: any shape, e.g. 3x4";
static const char *const V_UNARY[] = {"3x4", "1", "()", "2x1x3", "16x33", NULL};

static bool build_unary(tg_ctx *ctx, tg_op_case *c, rg_dist dist, const char *args) {
    return need_shapes(ctx, c, 1, 1) && allow_args(ctx, c, args) && make_input(ctx, c, 0, 0, "x", dist, true);
}
static bool build_unary_any(tg_ctx *ctx, tg_op_case *c) { return build_unary(ctx, c, RG_ANY, ""); }
static bool build_unary_pos(tg_ctx *ctx, tg_op_case *c) { return build_unary(ctx, c, RG_POS, ""); }
static bool build_unary_away0(tg_ctx *ctx, tg_op_case *c) { return build_unary(ctx, c, RG_AWAY0, ""); }

static tg_tensor *fw_neg(tg_ctx *ctx, tg_tensor *const *in, void *u) { (void)u; return tg_neg(ctx, in[0]); }
static tg_tensor *fw_exp(tg_ctx *ctx, tg_tensor *const *in, void *u) { (void)u; return tg_exp(ctx, in[0]); }
static tg_tensor *fw_log(tg_ctx *ctx, tg_tensor *const *in, void *u) { (void)u; return tg_log(ctx, in[0]); }
static tg_tensor *fw_sqrt(tg_ctx *ctx, tg_tensor *const *in, void *u) { (void)u; return tg_sqrt(ctx, in[0]); }
static tg_tensor *fw_abs(tg_ctx *ctx, tg_tensor *const *in, void *u) { (void)u; return tg_abs(ctx, in[0]); }

/* Scalar arguments: s (add_scalar, mul_scalar), p (pow_scalar). */
static const char HELP_SCALAR_S[] = "X;s=S: any shape and the scalar s (default 1.5)";
static const char *const V_ADD_SCALAR[] = {"3x4;s=1.5", "()", "2x1x3;s=-3", "16x33;s=0.25", NULL};
static const char *const V_MUL_SCALAR[] = {"3x4;s=-0.7", "()", "2x1x3;s=3", "3x4;s=0", "16x33;s=1.5", NULL};
static const char HELP_POW[] = "X;p=P: any shape (inputs drawn in [0.5, 2)) and the exponent p (default 2)";
static const char *const V_POW[] = {"3x4;p=2", "3x4;p=3", "3x4;p=0.5", "2x1x3;p=-1.5", "();p=2.5", "16x33;p=1.7",
                                    NULL};

static bool build_scalar_s(tg_ctx *ctx, tg_op_case *c) {
    double s;
    return build_unary(ctx, c, RG_ANY, "s") && arg_num(ctx, c, "s", 1.5, &s);
}
static bool build_pow(tg_ctx *ctx, tg_op_case *c) {
    double p;
    return build_unary(ctx, c, RG_POS, "p") && arg_num(ctx, c, "p", 2.0, &p);
}

/* The spec's number argument `key` (validated by the builder). */
static double num_of(const tg_op_case *c, const char *key, double def) {
    const char *s = arg_str(c, key);
    return s ? strtod(s, NULL) : def;
}

static tg_tensor *fw_add_scalar(tg_ctx *ctx, tg_tensor *const *in, void *u) {
    return tg_add_scalar(ctx, in[0], num_of(u, "s", 1.5));
}
static tg_tensor *fw_mul_scalar(tg_ctx *ctx, tg_tensor *const *in, void *u) {
    return tg_mul_scalar(ctx, in[0], num_of(u, "s", 1.5));
}
static tg_tensor *fw_pow_scalar(tg_ctx *ctx, tg_tensor *const *in, void *u) {
    return tg_pow_scalar(ctx, in[0], num_of(u, "p", 2.0));
}

/* ---- activations ------------------------------------------------------------ */

static const char HELP_LEAKY[] = "X;slope=S: any shape and the negative slope (default 0.01)";
static const char *const V_LEAKY[] = {"3x4", "3x4;slope=0.2", "()", "2x1x3;slope=-0.5", "16x33;slope=0.1", NULL};
static const char HELP_GELU[] = "X;approx=erf|tanh: any shape; the exact erf form (default) or the tanh one";
static const char *const V_GELU[] = {"3x4", "3x4;approx=tanh", "()", "2x1x3;approx=tanh", "16x33", NULL};

static bool build_leaky(tg_ctx *ctx, tg_op_case *c) {
    double s;
    return build_unary(ctx, c, RG_AWAY0, "slope") && arg_num(ctx, c, "slope", 0.01, &s);
}
static bool build_gelu(tg_ctx *ctx, tg_op_case *c) {
    if (!build_unary(ctx, c, RG_ANY, "approx")) return false;
    const char *a = arg_str(c, "approx");
    if (a && strcmp(a, "erf") != 0 && strcmp(a, "tanh") != 0) {
        tg_error(ctx, TG_ERR_FORMAT, BUILD_FN, "gelu: approx=%s in spec '%s' is neither erf nor tanh", a, c->spec);
        return false;
    }
    return true;
}

static tg_tensor *fw_relu(tg_ctx *ctx, tg_tensor *const *in, void *u) { (void)u; return tg_relu(ctx, in[0]); }
static tg_tensor *fw_leaky_relu(tg_ctx *ctx, tg_tensor *const *in, void *u) {
    return tg_leaky_relu(ctx, in[0], num_of(u, "slope", 0.01));
}
static tg_tensor *fw_sigmoid(tg_ctx *ctx, tg_tensor *const *in, void *u) { (void)u; return tg_sigmoid(ctx, in[0]); }
static tg_tensor *fw_tanh(tg_ctx *ctx, tg_tensor *const *in, void *u) { (void)u; return tg_tanh(ctx, in[0]); }
static tg_tensor *fw_gelu(tg_ctx *ctx, tg_tensor *const *in, void *u) {
    const char *a = arg_str(u, "approx");
    return tg_gelu(ctx, in[0], a && strcmp(a, "tanh") == 0);
}
static tg_tensor *fw_silu(tg_ctx *ctx, tg_tensor *const *in, void *u) { (void)u; return tg_silu(ctx, in[0]); }

/* ---- reductions ----------------------------------------------------------------- */

static const char *const V_SUM[] = {"3x4", "()", "1", "2x3x4", "16x33", NULL};
static const char HELP_AXIS[] = "X;axis=A;keepdim=0|1: any shape, the axis (default -1, may be negative) and "
                                "whether to keep it with size 1 (default 0)";
static const char *const V_AXIS[] = {"3x4;axis=0", "3x4;axis=1;keepdim=1", "2x3x4;axis=-1", "2x3x4;axis=1;keepdim=1",
                                     "();axis=0", "5;axis=0", "1x4;axis=0", "16x33;axis=1", NULL};

static bool build_axis(tg_ctx *ctx, tg_op_case *c, rg_dist dist) {
    int64_t v;
    return build_unary(ctx, c, dist, "axis,keepdim") && arg_int(ctx, c, "axis", -1, &v) &&
           arg_int(ctx, c, "keepdim", 0, &v);
}
static bool build_axis_any(tg_ctx *ctx, tg_op_case *c) { return build_axis(ctx, c, RG_ANY); }
static bool build_axis_distinct(tg_ctx *ctx, tg_op_case *c) { return build_axis(ctx, c, RG_DISTINCT); }

static int axis_of(const tg_op_case *c) { return (int)num_of(c, "axis", -1); }
static bool keepdim_of(const tg_op_case *c) { return num_of(c, "keepdim", 0) != 0; }

static tg_tensor *fw_sum(tg_ctx *ctx, tg_tensor *const *in, void *u) { (void)u; return tg_sum(ctx, in[0]); }
static tg_tensor *fw_mean(tg_ctx *ctx, tg_tensor *const *in, void *u) { (void)u; return tg_mean(ctx, in[0]); }
static tg_tensor *fw_sum_axis(tg_ctx *ctx, tg_tensor *const *in, void *u) {
    return tg_sum_axis(ctx, in[0], axis_of(u), keepdim_of(u));
}
static tg_tensor *fw_mean_axis(tg_ctx *ctx, tg_tensor *const *in, void *u) {
    return tg_mean_axis(ctx, in[0], axis_of(u), keepdim_of(u));
}
static tg_tensor *fw_max_axis(tg_ctx *ctx, tg_tensor *const *in, void *u) {
    return tg_max_axis(ctx, in[0], axis_of(u), keepdim_of(u));
}

/* ---- matmul ----------------------------------------------------------------- */

static const char HELP_MATMUL[] = "A,B: (M,K),(K,N) or (B,M,K),(B,K,N) or (B,M,K),(K,N)";
static const char *const V_MATMUL[] = {
    "3x4,4x5",       /* non-square */
    "1x4,4x1",       /* row times column */
    "4x1,1x3",       /* outer product */
    "1x1,1x1",
    "2x3x4,2x4x5",   /* batched */
    "3x2x4,4x3",     /* batched with a shared b */
    "70x65,65x40",   /* larger: blocked GEMM paths, directional */
    NULL};

static bool build_matmul(tg_ctx *ctx, tg_op_case *c) {
    return need_shapes(ctx, c, 2, 2) && allow_args(ctx, c, "") && make_input(ctx, c, 0, 0, "a", RG_ANY, true) &&
           make_input(ctx, c, 1, 1, "b", RG_ANY, true);
}
static tg_tensor *fw_matmul(tg_ctx *ctx, tg_tensor *const *in, void *u) {
    (void)u;
    return tg_matmul(ctx, in[0], in[1]);
}

/* ---- shapes: transpose, reshape, concat, slice ------------------------------- */

static const char HELP_TRANSPOSE[] = "X: ndim >= 2; the last two dims are swapped";
static const char *const V_TRANSPOSE[] = {"3x4", "1x5", "2x3x4", "2x1x3x2", "33x65", NULL};

static bool build_transpose(tg_ctx *ctx, tg_op_case *c) { return build_unary(ctx, c, RG_ANY, ""); }
static tg_tensor *fw_transpose(tg_ctx *ctx, tg_tensor *const *in, void *u) {
    (void)u;
    return tg_transpose(ctx, in[0]);
}

static const char HELP_RESHAPE[] = "X;to=SHAPE: the new shape, one size may be -1, e.g. 2x3x4;to=4x-1";
static const char *const V_RESHAPE[] = {"2x3x4;to=6x4", "2x3x4;to=4x-1", "2x6;to=3x1x4", "1;to=()", "();to=1x1",
                                        "40x30;to=-1x20", NULL};

/* The reshape target (validated by the builder). */
static bool reshape_target(const tg_op_case *c, int *ndim, int64_t *shape) {
    const char *s = arg_str(c, "to");
    return s && parse_shape(s, strlen(s), true, ndim, shape);
}
static bool build_reshape(tg_ctx *ctx, tg_op_case *c) {
    int nd;
    int64_t sh[TG_MAX_DIMS];
    if (!build_unary(ctx, c, RG_ANY, "to")) return false;
    if (!reshape_target(c, &nd, sh)) {
        tg_error(ctx, TG_ERR_FORMAT, BUILD_FN, "reshape: spec '%s' needs to=SHAPE (sizes joined by 'x', one may "
                 "be -1, '()' for 0-d)", c->spec);
        return false;
    }
    return true;
}
static tg_tensor *fw_reshape(tg_ctx *ctx, tg_tensor *const *in, void *u) {
    int nd = 0;
    int64_t sh[TG_MAX_DIMS];
    reshape_target(u, &nd, sh);
    return tg_reshape(ctx, in[0], nd, sh);
}

static const char HELP_CONCAT[] = "X1,X2,...;axis=A: 1..8 shapes equal but along axis A (default 0)";
static const char *const V_CONCAT[] = {"2x3,4x3,1x3;axis=0", "2x3,2x1,2x2;axis=-1", "2x3x4,2x1x4;axis=1",
                                       "3x2;axis=1", "1,1", "16x8,16x25;axis=1", NULL};
static const char *const CONCAT_NAMES[TG_GRADCHECK_MAX_INPUTS] = {"x0", "x1", "x2", "x3", "x4", "x5", "x6", "x7"};

static bool build_concat(tg_ctx *ctx, tg_op_case *c) {
    int64_t axis;
    if (!need_shapes(ctx, c, 1, TG_GRADCHECK_MAX_INPUTS) || !allow_args(ctx, c, "axis") ||
        !arg_int(ctx, c, "axis", 0, &axis))
        return false;
    for (int k = 0; k < c->n_shapes; k++)
        if (!make_input(ctx, c, k, k, CONCAT_NAMES[k], RG_ANY, true)) return false;
    return true;
}
static tg_tensor *fw_concat(tg_ctx *ctx, tg_tensor *const *in, void *u) {
    const tg_op_case *c = u;
    return tg_concat(ctx, c->n_inputs, in, (int)num_of(c, "axis", 0));
}

static const char HELP_SLICE[] = "X;axis=A;start=S;end=E: elements S..E-1 along axis A (defaults: 0, 0, size)";
static const char *const V_SLICE[] = {"5x4;axis=0;start=1;end=4", "3x6;axis=1;start=0;end=6",
                                      "2x3x4;axis=-1;start=2;end=3", "4x3;axis=0;start=2;end=2",
                                      "1;axis=0;start=0;end=1", "33x20;axis=0;start=5;end=30", NULL};

static bool build_slice(tg_ctx *ctx, tg_op_case *c) {
    int64_t v;
    return build_unary(ctx, c, RG_ANY, "axis,start,end") && arg_int(ctx, c, "axis", 0, &v) &&
           arg_int(ctx, c, "start", 0, &v) && arg_int(ctx, c, "end", 0, &v);
}
static tg_tensor *fw_slice(tg_ctx *ctx, tg_tensor *const *in, void *u) {
    const tg_op_case *c = u;
    int axis = (int)num_of(c, "axis", 0);
    int nd = in[0]->ndim;
    int a = axis < 0 ? axis + nd : axis;
    int64_t size = a >= 0 && a < nd ? in[0]->shape[a] : 0;
    return tg_slice(ctx, in[0], axis, (int64_t)num_of(c, "start", 0), (int64_t)num_of(c, "end", (double)size));
}

/* ---- embedding ---------------------------------------------------------------- */

static const char HELP_EMBEDDING[] = "W,I: the weight (V,D) and the shape of the indices (drawn in 0..V-1, "
                                     "with at least one repeat)";
static const char *const V_EMBEDDING[] = {"10x4,6", "5x3,2x4", "1x1,1", "7x2,()", "50x16,4x9", NULL};

static bool build_embedding(tg_ctx *ctx, tg_op_case *c) {
    if (!need_shapes(ctx, c, 2, 2) || !allow_args(ctx, c, "")) return false;
    if (c->ndim[0] != 2 || c->shape[0][0] < 1) {
        tg_error(ctx, TG_ERR_SHAPE, BUILD_FN, "embedding: spec '%s': the weight must be (V,D) with V >= 1", c->spec);
        return false;
    }
    int64_t n = 1;
    for (int d = 0; d < c->ndim[1]; d++) n *= c->shape[1][d];
    int64_t V = c->shape[0][0];
    c->index = tg_arena_alloc_fn(ctx, BUILD_FN, (size_t)(n > 0 ? n : 1) * sizeof *c->index);
    if (!c->index) return false;
    c->n_index = n;
    for (int64_t i = 0; i < n; i++) {
        int64_t j = (int64_t)(tg_rng_uniform(ctx) * (double)V);
        c->index[i] = j < V ? j : V - 1;
    }
    if (n >= 2) c->index[n - 1] = c->index[0]; /* a repeated index accumulates */
    return make_input(ctx, c, 0, 0, "weight", RG_ANY, true) != NULL;
}
static tg_tensor *fw_embedding(tg_ctx *ctx, tg_tensor *const *in, void *u) {
    const tg_op_case *c = u;
    return tg_embedding(ctx, in[0], c->ndim[1], c->shape[1], c->index);
}

/* ---- softmax, losses, dropout ------------------------------------------------ */

static const char HELP_SOFTMAX[] = "X: any shape; over the last axis";
static const char *const V_SOFTMAX[] = {"3x5", "5", "2x3x4", "4x1", "()", "8x65", NULL};

static tg_tensor *fw_softmax(tg_ctx *ctx, tg_tensor *const *in, void *u) { (void)u; return tg_softmax(ctx, in[0]); }
static tg_tensor *fw_log_softmax(tg_ctx *ctx, tg_tensor *const *in, void *u) {
    (void)u;
    return tg_log_softmax(ctx, in[0]);
}

static const char HELP_CE[] = "NxC;smoothing=E;ignore_index=I;ignore_rows=K: logits (N,C), random targets in "
                              "0..C-1; the first K < N rows get target I (default -100)";
static const char *const V_CE[] = {"4x5", "4x5;smoothing=0.1", "6x3;ignore_rows=2",
                                   "6x3;ignore_rows=2;smoothing=0.2", "1x1", "5x4;ignore_index=2",
                                   "32x10;smoothing=0.05", NULL};

static bool build_cross_entropy(tg_ctx *ctx, tg_op_case *c) {
    double eps;
    int64_t ign, rows;
    if (!build_unary(ctx, c, RG_ANY, "smoothing,ignore_index,ignore_rows") ||
        !arg_num(ctx, c, "smoothing", 0.0, &eps) || !arg_int(ctx, c, "ignore_index", -100, &ign) ||
        !arg_int(ctx, c, "ignore_rows", 0, &rows))
        return false;
    if (c->ndim[0] != 2 || c->shape[0][0] < 1 || c->shape[0][1] < 1) {
        tg_error(ctx, TG_ERR_SHAPE, BUILD_FN, "cross_entropy: spec '%s': the logits must be (N,C) with N, C >= 1",
                 c->spec);
        return false;
    }
    int64_t N = c->shape[0][0], C = c->shape[0][1];
    if (rows < 0 || rows >= N) {
        tg_error(ctx, TG_ERR_VALUE, BUILD_FN, "cross_entropy: spec '%s': ignore_rows=%lld must be in 0..N-1=%lld "
                 "(with every row ignored the loss is NaN)", c->spec, (long long)rows, (long long)(N - 1));
        return false;
    }
    c->index = tg_arena_alloc_fn(ctx, BUILD_FN, (size_t)N * sizeof *c->index);
    if (!c->index) return false;
    c->n_index = N;
    for (int64_t i = 0; i < N; i++) {
        int64_t t = (int64_t)(tg_rng_uniform(ctx) * (double)C);
        c->index[i] = i < rows ? ign : t < C ? t : C - 1;
    }
    /* keep one row counted when ignore_index is a class */
    if (c->index[N - 1] == ign) c->index[N - 1] = (ign + 1) % C;
    c->input_names[0] = "logits";
    return true;
}
static tg_tensor *fw_cross_entropy(tg_ctx *ctx, tg_tensor *const *in, void *u) {
    const tg_op_case *c = u;
    tg_cross_entropy_opts o = TG_CROSS_ENTROPY_DEFAULTS;
    o.ignore_index = (int64_t)num_of(c, "ignore_index", -100);
    o.label_smoothing = num_of(c, "smoothing", 0.0);
    return tg_cross_entropy(ctx, in[0], c->index, &o);
}

static const char HELP_MSE[] = "P,T: prediction and target of one shape (both differentiable)";
static const char *const V_MSE[] = {"3x4,3x4", "1,1", "(),()", "2x3x4,2x3x4", "16x33,16x33", NULL};

static bool build_mse(tg_ctx *ctx, tg_op_case *c) {
    return need_shapes(ctx, c, 2, 2) && allow_args(ctx, c, "") &&
           make_input(ctx, c, 0, 0, "pred", RG_ANY, true) && make_input(ctx, c, 1, 1, "target", RG_ANY, true);
}
static tg_tensor *fw_mse_loss(tg_ctx *ctx, tg_tensor *const *in, void *u) {
    (void)u;
    return tg_mse_loss(ctx, in[0], in[1]);
}

static const char HELP_DROPOUT[] = "X;p=P;train=0|1: any shape, drop probability (default 0.3), training (1)";
static const char *const V_DROPOUT[] = {"4x5;p=0.3", "3x7;p=0.5", "2x3;p=0", "4x5;p=0.3;train=0", "()", "16x33;p=0.2",
                                        NULL};

static bool build_dropout(tg_ctx *ctx, tg_op_case *c) {
    double p;
    int64_t train;
    return build_unary(ctx, c, RG_ANY, "p,train") && arg_num(ctx, c, "p", 0.3, &p) &&
           arg_int(ctx, c, "train", 1, &train);
}
static tg_tensor *fw_dropout(tg_ctx *ctx, tg_tensor *const *in, void *u) {
    return tg_dropout(ctx, in[0], num_of(u, "p", 0.3), num_of(u, "train", 1) != 0);
}

/* ---- layers: Linear, RMSNorm, LayerNorm (fused, and the composed twins) ---------- */

static const char HELP_LINEAR[] = "X,W;bias=0|1: input (..., in), weight (out, in); a bias (out) unless bias=0";
static const char *const V_LINEAR[] = {"4x3,5x3", "4x3,5x3;bias=0", "3,2x3", "2x3x4,5x4", "1x1,1x1",
                                       "33x40,24x40", NULL};

static bool build_linear(tg_ctx *ctx, tg_op_case *c) {
    int64_t bias;
    if (!need_shapes(ctx, c, 2, 2) || !allow_args(ctx, c, "bias") || !arg_int(ctx, c, "bias", 1, &bias))
        return false;
    if (c->ndim[1] != 2) {
        tg_error(ctx, TG_ERR_SHAPE, BUILD_FN, "linear: spec '%s': the weight must be (out, in)", c->spec);
        return false;
    }
    if (!make_input(ctx, c, 0, 0, "x", RG_ANY, true) || !make_input(ctx, c, 1, 1, "weight", RG_ANY, true))
        return false;
    return !bias || make_input_shaped(ctx, c, 2, 1, c->shape[1], "bias", RG_ANY, true);
}
static tg_tensor *fw_linear(tg_ctx *ctx, tg_tensor *const *in, void *u) {
    const tg_op_case *c = u;
    return tg_linear_fused(ctx, in[0], in[1], c->n_inputs > 2 ? in[2] : NULL);
}

/* RMSNorm and LayerNorm take the same spec; the defaults differ (PyTorch's:
 * RMSNorm eps 1e-6 without beta, LayerNorm eps 1e-5 with beta). */
static const char HELP_RMSNORM[] = "X;norm=K;eps=E;affine=0|1;bias=0|1: normalizes the last K dims of X (default 1); "
                                   "gamma and beta (when affine; beta when bias) have their shape; defaults eps=1e-6, "
                                   "affine=1, bias=0";
static const char HELP_LAYERNORM[] = "X;norm=K;eps=E;affine=0|1;bias=0|1: normalizes the last K dims of X (default "
                                     "1); gamma and beta (when affine; beta when bias) have their shape; defaults "
                                     "eps=1e-5, affine=1, bias=1";
static const char *const V_RMSNORM[] = {"4x8", "4x8;bias=1", "4x8;affine=0", "2x3x4;norm=2;bias=1", "6;eps=0.1",
                                        "16x64;bias=1", NULL};
static const char *const V_LAYERNORM[] = {"4x8", "4x8;bias=0", "4x8;affine=0", "2x3x4;norm=2", "6;eps=0.1",
                                          "3x1", "16x64", NULL};

typedef struct norm_args {
    int64_t norm, affine, bias;
    double eps;
} norm_args;

/* The norm arguments of a spec (validated by the builder), with the
 * defaults of RMSNorm (bias 0, eps 1e-6) or LayerNorm (bias 1, eps 1e-5). */
static norm_args norm_args_of(const tg_op_case *c, bool layernorm) {
    norm_args a;
    a.norm = (int64_t)num_of(c, "norm", 1);
    a.affine = (int64_t)num_of(c, "affine", 1);
    a.bias = (int64_t)num_of(c, "bias", layernorm ? 1 : 0);
    a.eps = num_of(c, "eps", layernorm ? TG_LAYERNORM_EPS : TG_RMSNORM_EPS);
    return a;
}

static bool build_norm(tg_ctx *ctx, tg_op_case *c, bool layernorm) {
    norm_args a;
    int64_t v;
    if (!build_unary(ctx, c, RG_ANY, "norm,eps,affine,bias") || !arg_int(ctx, c, "norm", 1, &v) ||
        !arg_int(ctx, c, "affine", 1, &v) || !arg_int(ctx, c, "bias", 0, &v) || !arg_num(ctx, c, "eps", 0, &a.eps))
        return false;
    c->input_names[0] = "x";
    a = norm_args_of(c, layernorm);
    if (a.norm < 1 || a.norm > c->ndim[0]) {
        tg_error(ctx, TG_ERR_SHAPE, BUILD_FN, "%s: spec '%s': norm=%lld must be in 1..ndim(x)=%d", c->op->name,
                 c->spec, (long long)a.norm, c->ndim[0]);
        return false;
    }
    int nd = (int)a.norm;
    const int64_t *shape = c->shape[0] + c->ndim[0] - nd;
    if (a.affine && !make_input_shaped(ctx, c, 1, nd, shape, "gamma", RG_ANY, true)) return false;
    if (a.affine && a.bias && !make_input_shaped(ctx, c, 2, nd, shape, "beta", RG_ANY, true)) return false;
    return true;
}
static bool build_rmsnorm(tg_ctx *ctx, tg_op_case *c) { return build_norm(ctx, c, false); }
static bool build_layernorm(tg_ctx *ctx, tg_op_case *c) { return build_norm(ctx, c, true); }

typedef tg_tensor *(*norm_fn)(tg_ctx *, tg_tensor *, tg_tensor *, tg_tensor *, int, double);

static tg_tensor *fw_norm(tg_ctx *ctx, tg_tensor *const *in, const tg_op_case *c, norm_fn f, bool layernorm) {
    norm_args a = norm_args_of(c, layernorm);
    return f(ctx, in[0], c->n_inputs > 1 ? in[1] : NULL, c->n_inputs > 2 ? in[2] : NULL, (int)a.norm, a.eps);
}
static tg_tensor *fw_rmsnorm(tg_ctx *ctx, tg_tensor *const *in, void *u) {
    return fw_norm(ctx, in, u, tg_rmsnorm_fused, false);
}
static tg_tensor *fw_layernorm(tg_ctx *ctx, tg_tensor *const *in, void *u) {
    return fw_norm(ctx, in, u, tg_layernorm_fused, true);
}
static tg_tensor *fw_rmsnorm_composed(tg_ctx *ctx, tg_tensor *const *in, void *u) {
    return fw_norm(ctx, in, u, tg_rmsnorm_composed, false);
}
static tg_tensor *fw_layernorm_composed(tg_ctx *ctx, tg_tensor *const *in, void *u) {
    return fw_norm(ctx, in, u, tg_layernorm_composed, true);
}

/* ---- the table ---------------------------------------------------------------- */

/* variants and their count (without the NULL) */
#define VARIANTS(v) v, (int)(sizeof v / sizeof v[0]) - 1

static const tg_op_info registry[] = {
    {TG_OP_add, "add", "a + b, broadcasting", HELP_BINARY, VARIANTS(V_BINARY), false, 0, 0, 0, build_binary_any,
     fw_add},
    {TG_OP_sub, "sub", "a - b, broadcasting", HELP_BINARY, VARIANTS(V_BINARY), false, 0, 0, 0, build_binary_any,
     fw_sub},
    {TG_OP_mul, "mul", "a * b, broadcasting", HELP_BINARY, VARIANTS(V_BINARY), false, 0, 0, 0, build_binary_any,
     fw_mul},
    {TG_OP_div, "div", "a / b, broadcasting (|b| >= 0.5)", HELP_BINARY, VARIANTS(V_BINARY), false, 0, 0, 0,
     build_binary_denom, fw_div},
    {TG_OP_neg, "neg", "-x", HELP_UNARY, VARIANTS(V_UNARY), false, 0, 0, 0, build_unary_any, fw_neg},
    {TG_OP_add_scalar, "add_scalar", "x + s", HELP_SCALAR_S, VARIANTS(V_ADD_SCALAR), false, 0, 0, 0,
     build_scalar_s, fw_add_scalar},
    {TG_OP_mul_scalar, "mul_scalar", "x * s", HELP_SCALAR_S, VARIANTS(V_MUL_SCALAR), false, 0, 0, 0,
     build_scalar_s, fw_mul_scalar},
    {TG_OP_pow_scalar, "pow_scalar", "x^p (x in [0.5, 2))", HELP_POW, VARIANTS(V_POW), false, 0, 0, 0, build_pow,
     fw_pow_scalar},
    {TG_OP_exp, "exp", "e^x", HELP_UNARY, VARIANTS(V_UNARY), false, 0, 0, 0, build_unary_any, fw_exp},
    {TG_OP_log, "log", "ln x (x in [0.5, 2))", HELP_UNARY, VARIANTS(V_UNARY), false, 0, 0, 0, build_unary_pos,
     fw_log},
    {TG_OP_sqrt, "sqrt", "sqrt x (x in [0.5, 2))", HELP_UNARY, VARIANTS(V_UNARY), false, 0, 0, 0, build_unary_pos,
     fw_sqrt},
    {TG_OP_abs, "abs", "|x| (|x| >= 0.2)", HELP_UNARY, VARIANTS(V_UNARY), false, 0, 0, 0, build_unary_away0,
     fw_abs},
    {TG_OP_relu, "relu", "max(x, 0) (|x| >= 0.2)", HELP_UNARY, VARIANTS(V_UNARY), false, 0, 0, 0,
     build_unary_away0, fw_relu},
    {TG_OP_leaky_relu, "leaky_relu", "x > 0 ? x : slope x (|x| >= 0.2)", HELP_LEAKY, VARIANTS(V_LEAKY), false, 0,
     0, 0, build_leaky, fw_leaky_relu},
    {TG_OP_sigmoid, "sigmoid", "1 / (1 + e^-x)", HELP_UNARY, VARIANTS(V_UNARY), false, 0, 0, 0, build_unary_any,
     fw_sigmoid},
    {TG_OP_tanh, "tanh", "tanh x", HELP_UNARY, VARIANTS(V_UNARY), false, 0, 0, 0, build_unary_any, fw_tanh},
    {TG_OP_gelu, "gelu", "x/2 (1 + erf(x / sqrt 2)), or the tanh approximation", HELP_GELU, VARIANTS(V_GELU),
     false, 0, 0, 0, build_gelu, fw_gelu},
    {TG_OP_silu, "silu", "x sigmoid(x)", HELP_UNARY, VARIANTS(V_UNARY), false, 0, 0, 0, build_unary_any, fw_silu},
    {TG_OP_sum, "sum", "sum of all elements", HELP_UNARY, VARIANTS(V_SUM), false, 0, 0, 0, build_unary_any,
     fw_sum},
    {TG_OP_mean, "mean", "mean of all elements", HELP_UNARY, VARIANTS(V_SUM), false, 0, 0, 0, build_unary_any,
     fw_mean},
    {TG_OP_sum_axis, "sum_axis", "sum over one axis", HELP_AXIS, VARIANTS(V_AXIS), false, 0, 0, 0, build_axis_any,
     fw_sum_axis},
    {TG_OP_mean_axis, "mean_axis", "mean over one axis", HELP_AXIS, VARIANTS(V_AXIS), false, 0, 0, 0,
     build_axis_any, fw_mean_axis},
    {TG_OP_max_axis, "max_axis", "max over one axis (distinct inputs: no ties)", HELP_AXIS, VARIANTS(V_AXIS), false,
     0, 0, 0, build_axis_distinct, fw_max_axis},
    {TG_OP_matmul, "matmul", "a b: 2-D, batched 3-D, or batched by shared 2-D", HELP_MATMUL, VARIANTS(V_MATMUL),
     false, 0, 0, 0, build_matmul, fw_matmul},
    {TG_OP_transpose, "transpose", "swaps the last two dims", HELP_TRANSPOSE, VARIANTS(V_TRANSPOSE), false, 0, 0,
     0, build_transpose, fw_transpose},
    {TG_OP_reshape, "reshape", "x with a new shape", HELP_RESHAPE, VARIANTS(V_RESHAPE), false, 0, 0, 0,
     build_reshape, fw_reshape},
    {TG_OP_concat, "concat", "joins tensors along an axis", HELP_CONCAT, VARIANTS(V_CONCAT), false, 0, 0, 0,
     build_concat, fw_concat},
    {TG_OP_slice, "slice", "x[start:end] along an axis", HELP_SLICE, VARIANTS(V_SLICE), false, 0, 0, 0,
     build_slice, fw_slice},
    {TG_OP_embedding, "embedding", "rows of weight by index", HELP_EMBEDDING, VARIANTS(V_EMBEDDING), false, 0, 0,
     0, build_embedding, fw_embedding},
    {TG_OP_softmax, "softmax", "exp(x_i) / sum_j exp(x_j) over the last axis", HELP_SOFTMAX,
     VARIANTS(V_SOFTMAX), false, 0, 0, 0, build_unary_any, fw_softmax},
    {TG_OP_log_softmax, "log_softmax", "x_i - log sum_j exp(x_j) over the last axis", HELP_SOFTMAX,
     VARIANTS(V_SOFTMAX), false, 0, 0, 0, build_unary_any, fw_log_softmax},
    {TG_OP_cross_entropy, "cross_entropy", "mean -log softmax(logits)[target], label smoothing, ignore_index",
     HELP_CE, VARIANTS(V_CE), false, 0, 0, 0, build_cross_entropy, fw_cross_entropy},
    {TG_OP_mse_loss, "mse_loss", "mean((pred - target)^2)", HELP_MSE, VARIANTS(V_MSE), false, 0, 0, 0, build_mse,
     fw_mse_loss},
    {TG_OP_dropout, "dropout", "x / (1 - p) where kept, 0 where dropped (p)", HELP_DROPOUT, VARIANTS(V_DROPOUT),
     true, 0, 0, 0, build_dropout, fw_dropout},
    {TG_OP_linear, "linear", "x W^T + b (Linear, fused)", HELP_LINEAR, VARIANTS(V_LINEAR), false, 0, 0, 0,
     build_linear, fw_linear},
    {TG_OP_rmsnorm, "rmsnorm", "x / sqrt(mean x^2 + eps) * gamma + beta (RMSNorm, fused)", HELP_RMSNORM,
     VARIANTS(V_RMSNORM), false, 0, 0, 0, build_rmsnorm, fw_rmsnorm},
    {TG_OP_layernorm, "layernorm", "(x - mean) / sqrt(var + eps) * gamma + beta (LayerNorm, fused)",
     HELP_LAYERNORM, VARIANTS(V_LAYERNORM), false, 0, 0, 0, build_layernorm, fw_layernorm},
    {TG_OP_rmsnorm_composed, "rmsnorm_composed", "RMSNorm built from primitive ops", HELP_RMSNORM,
     VARIANTS(V_RMSNORM), false, 0, 0, 0, build_rmsnorm, fw_rmsnorm_composed},
    {TG_OP_layernorm_composed, "layernorm_composed", "LayerNorm built from primitive ops", HELP_LAYERNORM,
     VARIANTS(V_LAYERNORM), false, 0, 0, 0, build_layernorm, fw_layernorm_composed},
};

static_assert(sizeof registry / sizeof registry[0] == TG_OP_COUNT,
              "the registry table needs exactly one entry per op of TG_OP_LIST (layers/registry.h)");

/* ---- public API -------------------------------------------------------------- */

int tg_registry_count(void) { return TG_OP_COUNT; }

const tg_op_info *tg_registry_get(int i) { return i >= 0 && i < TG_OP_COUNT ? &registry[i] : NULL; }

const tg_op_info *tg_registry_find(const char *name) {
    if (!name) return NULL;
    for (int i = 0; i < TG_OP_COUNT; i++)
        if (strcmp(registry[i].name, name) == 0) return &registry[i];
    return NULL;
}

bool tg_registry_build(tg_ctx *ctx, const tg_op_info *op, const char *spec, tg_dtype dtype, tg_op_case *c) {
    if (c) memset(c, 0, sizeof *c);
    if (!tg_live(ctx)) return false;
    if (!op || !c) {
        tg_error(ctx, TG_ERR_NULL, BUILD_FN, "argument '%s' is NULL", op ? "c" : "op");
        return false;
    }
    if (dtype != TG_F32 && dtype != TG_F64) {
        tg_error(ctx, TG_ERR_DTYPE, BUILD_FN, "%s: unknown dtype %d", op->name, (int)dtype);
        return false;
    }
    if (!spec) spec = op->variants[0];
    c->op = op;
    c->dtype = dtype;
    if (!parse_spec(ctx, op, spec, c)) return false;
    if (!op->build(ctx, c)) {
        if (tg_ok(ctx)) tg_error(ctx, TG_ERR_VALUE, BUILD_FN, "%s: spec '%s' was refused", op->name, spec);
        return false;
    }
    return tg_ok(ctx);
}

tg_tensor *tg_registry_forward(tg_ctx *ctx, tg_op_case *c) {
    if (!tg_live(ctx)) return NULL;
    if (!c || !c->op) {
        tg_error(ctx, TG_ERR_NULL, "tg_registry_forward", "argument 'c' is NULL or was not built");
        return NULL;
    }
    return c->op->forward(ctx, c->inputs, c);
}

bool tg_registry_check_spec(tg_ctx *ctx, const tg_op_info *op, const char *spec, tg_dtype dtype,
                            const tg_gradcheck_opts *opts, tg_gradcheck_result *result) {
    static const char fn[] = "tg_registry_check";
    if (result) {
        memset(result, 0, sizeof *result);
        result->worst_input = -1;
        result->worst_index = -1;
    }
    if (!tg_live(ctx)) return false;
    if (!result) {
        tg_error(ctx, TG_ERR_NULL, fn, "argument 'result' is NULL");
        return false;
    }
    tg_op_case c;
    if (!tg_registry_build(ctx, op, spec, dtype, &c)) return false;
    tg_gradcheck_opts o = {0};
    if (opts) o = *opts;
    if (dtype == TG_F64) {
        if (o.h == 0) o.h = op->h;
        if (o.atol == 0) o.atol = op->atol;
        if (o.rtol == 0) o.rtol = op->rtol;
    }
    uint32_t mask = o.inputs ? o.inputs & c.check : c.check;
    if (mask == 0) {
        tg_error(ctx, TG_ERR_VALUE, fn, "%s: inputs mask 0x%x selects no differentiable input (those are 0x%x)",
                 op->name, (unsigned)o.inputs, (unsigned)c.check);
        return false;
    }
    o.inputs = mask;
    return tg_gradcheck(ctx, op->forward, &c, c.n_inputs, c.inputs, &o, result);
}

bool tg_registry_check(tg_ctx *ctx, const tg_op_info *op, int variant, tg_dtype dtype,
                       const tg_gradcheck_opts *opts, tg_gradcheck_result *result) {
    if (result) {
        memset(result, 0, sizeof *result);
        result->worst_input = -1;
        result->worst_index = -1;
    }
    if (!tg_live(ctx)) return false;
    if (!op) {
        tg_error(ctx, TG_ERR_NULL, "tg_registry_check", "argument 'op' is NULL");
        return false;
    }
    if (variant < 0 || variant >= op->n_variants) {
        tg_error(ctx, TG_ERR_INDEX, "tg_registry_check", "%s: variant %d is outside 0..%d", op->name, variant,
                 op->n_variants - 1);
        return false;
    }
    return tg_registry_check_spec(ctx, op, op->variants[variant], dtype, opts, result);
}

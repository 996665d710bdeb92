/* The op registry: every differentiable op and layer -- its descriptor
 * (tg_op_def: name, arguments, the values its inputs are drawn from, its
 * own steps and tolerances, all beside the op's kernel) with a builder of
 * random valid inputs and its forward -- in one table (at the end of this
 * file) whose index is the op's id, so tests and the gradient-check tool
 * check every op by walking it.
 *
 * An op's inputs are described by a spec string (tapegrad/check.h): shapes
 * separated by commas ("2x1x3,4x3"; "()" is 0-d), then ";key=value"
 * arguments. tg_registry_build parses the spec into a tg_op_case, refuses
 * arguments the op does not declare and fills in the defaults of those the
 * spec leaves out; then the op's builder checks the shapes and argument
 * values it needs and draws the inputs from the context's RNG as the
 * descriptor says (check/inputs.c). The descriptors keep inputs away from
 * the op's kinks, where the one-sided derivatives differ and central
 * differences return their average:
 *   relu, abs, leaky_relu   |x| in [0.2, 2), either sign
 *   div denominators        |b| in [0.5, 2)
 *   log, sqrt, pow          x in [0.5, 2)
 *   max                     distinct values at least 4/numel apart
 * (h = 1e-6, and 1e-3 in float32, are far below those gaps, so no
 * difference straddles a kink.)
 *
 * Forwards: most entries name the library function in `fn` and one generic
 * forward per arity calls it (fw_unary, fw_binary, fw_scalar, fw_axis,
 * fw_norm); ops with their own arguments or extra data have their own. */
#include "check/registry.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/ops.h"
#include "layers/ops.h"
#include "tensor/internal.h"

/* Builders report as the public call they run under. */
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
        tg_error(ctx, TG_ERR_FORMAT, BUILD_FN, "%s: spec of %zu characters is longer than %zu", op->def->name, n,
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
                     op->def->name, (int)(e - p), p, spec, TG_GRADCHECK_MAX_INPUTS, TG_MAX_DIMS);
            return false;
        }
        c->n_shapes++;
        p = comma ? comma + 1 : e;
        if (comma && p == shapes_end) {
            tg_error(ctx, TG_ERR_FORMAT, BUILD_FN, "%s: spec '%s' ends its shapes with a comma", op->def->name, spec);
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
                     "%s: bad argument '%.*s' in spec '%s' (key=value, at most %d arguments)", op->def->name,
                     (int)(e - p), p, spec, TG_OP_MAX_ARGS);
            return false;
        }
        memcpy(c->arg_name[c->n_args], p, klen);
        c->arg_name[c->n_args][klen] = '\0';
        memcpy(c->arg_value[c->n_args], eq + 1, vlen);
        c->arg_value[c->n_args][vlen] = '\0';
        for (int a = 0; a < c->n_args; a++) {
            if (strcmp(c->arg_name[a], c->arg_name[c->n_args]) == 0) {
                tg_error(ctx, TG_ERR_FORMAT, BUILD_FN, "%s: argument '%s' given twice in spec '%s'", op->def->name,
                         c->arg_name[a], spec);
                return false;
            }
        }
        c->n_args++;
        p = next;
    }
    if (c->n_shapes == 0) {
        tg_error(ctx, TG_ERR_FORMAT, BUILD_FN, "%s: spec '%s' has no shape", op->def->name, spec);
        return false;
    }
    return true;
}

/* ---- arguments -------------------------------------------------------------
 * An op declares the arguments it takes in its entry, with their defaults:
 * args = "axis=-1,keepdim=0"; a key without '=' has no default ("to" of
 * reshape, "end" of slice). */

const char *tg_registry_arg(const tg_op_case *c, const char *key) {
    for (int a = 0; c && key && a < c->n_args; a++)
        if (strcmp(c->arg_name[a], key) == 0) return c->arg_value[a];
    return NULL;
}

/* The argument as a number (validated by the builder); 0 when absent. */
static double num_of(const tg_op_case *c, const char *key) {
    const char *s = tg_registry_arg(c, key);
    return s ? strtod(s, NULL) : 0.0;
}

/* The next item of a comma-separated list at *p, as *item and its length;
 * *p moves past it and its comma. */
static size_t next_item(const char **p, const char **item) {
    size_t len = strcspn(*p, ",");
    *item = *p;
    *p += len + ((*p)[len] == ',');
    return len;
}

/* Whether `decl` declares `key`. */
static bool declares(const char *decl, const char *key) {
    size_t kl = strlen(key);
    for (const char *p = decl, *it; *p;) {
        next_item(&p, &it);
        if (strcspn(it, "=,") == kl && strncmp(it, key, kl) == 0) return true;
    }
    return false;
}

/* Refuses arguments c's op does not declare, then appends the declared
 * defaults of those the spec leaves out. */
static bool apply_args(tg_ctx *ctx, tg_op_case *c) {
    const char *decl = c->op->def->args ? c->op->def->args : "";
    for (int a = 0; a < c->n_args; a++) {
        if (!declares(decl, c->arg_name[a])) {
            tg_error(ctx, TG_ERR_FORMAT, BUILD_FN, "%s: unknown argument '%s' in spec '%s' (takes: %s)",
                     c->op->def->name, c->arg_name[a], c->spec, *decl ? decl : "none");
            return false;
        }
    }
    for (const char *p = decl, *it; *p;) {
        size_t len = next_item(&p, &it), klen = strcspn(it, "=,");
        char key[sizeof c->arg_name[0]];
        snprintf(key, sizeof key, "%.*s", (int)klen, it);
        if (klen == len || tg_registry_arg(c, key) || c->n_args == TG_OP_MAX_ARGS) continue; /* no default */
        snprintf(c->arg_name[c->n_args], sizeof c->arg_name[0], "%s", key);
        snprintf(c->arg_value[c->n_args], sizeof c->arg_value[0], "%.*s", (int)(len - klen - 1), it + klen + 1);
        c->n_args++;
    }
    return true;
}

/* Checks that each argument in the comma-separated `keys` is a finite
 * number, or an integer when `integer` (absent ones pass). */
static bool check_args(tg_ctx *ctx, const tg_op_case *c, const char *keys, bool integer) {
    for (const char *p = keys, *it; *p;) {
        size_t len = next_item(&p, &it);
        char key[sizeof c->arg_name[0]];
        snprintf(key, sizeof key, "%.*s", (int)len, it);
        const char *s = tg_registry_arg(c, key);
        if (!s) continue;
        char *e;
        errno = 0;
        double v = integer ? (double)strtoll(s, &e, 10) : strtod(s, &e);
        if (*e || errno || !isfinite(v)) {
            tg_error(ctx, TG_ERR_FORMAT, BUILD_FN, "%s: argument %s=%s in spec '%s' is not %s", c->op->def->name, key,
                     s, c->spec, integer ? "an integer" : "a finite number");
            return false;
        }
    }
    return true;
}

/* ---- helpers for builders -------------------------------------------------- */

/* Requires between lo and hi shapes. */
static bool need_shapes(tg_ctx *ctx, const tg_op_case *c, int lo, int hi) {
    if (c->n_shapes >= lo && c->n_shapes <= hi) return true;
    if (lo == hi)
        tg_error(ctx, TG_ERR_SHAPE, BUILD_FN, "%s: spec '%s' has %d shapes; the op takes %d", c->op->def->name, c->spec,
                 c->n_shapes, lo);
    else
        tg_error(ctx, TG_ERR_SHAPE, BUILD_FN, "%s: spec '%s' has %d shapes; the op takes %d..%d", c->op->def->name,
                 c->spec, c->n_shapes, lo, hi);
    return false;
}

/* Input k with the spec's shape number `from`, named and drawn as the
 * op's descriptor says (check/inputs.c). */
static tg_tensor *make_input(tg_ctx *ctx, tg_op_case *c, int k, int from) {
    return tg_registry_input(ctx, c, k, c->ndim[from], c->shape[from]);
}

/* ---- generic forwards: the entry's fn, by arity ------------------------------ */

static tg_tensor *fw_unary(tg_ctx *ctx, tg_tensor *const *in, void *u) {
    const tg_op_case *c = u;
    return c->op->fn.unary(ctx, in[0]);
}

static tg_tensor *fw_binary(tg_ctx *ctx, tg_tensor *const *in, void *u) {
    const tg_op_case *c = u;
    return c->op->fn.binary(ctx, in[0], in[1]);
}

/* x and the op's one argument (s, p or slope). */
static tg_tensor *fw_scalar(tg_ctx *ctx, tg_tensor *const *in, void *u) {
    const tg_op_case *c = u;
    return c->op->fn.scalar(ctx, in[0], strtod(c->arg_value[0], NULL));
}

static tg_tensor *fw_axis(tg_ctx *ctx, tg_tensor *const *in, void *u) {
    const tg_op_case *c = u;
    return c->op->fn.axis(ctx, in[0], (int)num_of(c, "axis"), num_of(c, "keepdim") != 0);
}

/* x, then gamma and beta when the spec has them (affine, bias). */
static tg_tensor *fw_norm(tg_ctx *ctx, tg_tensor *const *in, void *u) {
    const tg_op_case *c = u;
    return c->op->fn.norm(ctx, in[0], c->n_inputs > 1 ? in[1] : NULL, c->n_inputs > 2 ? in[2] : NULL,
                          (int)num_of(c, "norm"), num_of(c, "eps"));
}

/* ---- elementwise: binary with broadcasting, and matmul ------------------------ */

static const char HELP_BINARY[] = "A,B: two shapes that broadcast (NumPy rules), e.g. 2x1x3,4x3";
static const char *const V_BINARY[] = {"3x4,3x4",   /* same shape */
                                       "1x1,1x1",   /* size-1 dims */
                                       "2x1x3,4x3", /* a broadcasts over 4, b over 2 (both sides) */
                                       "4x3,2x1x3", /* the other way round */
                                       "3,2x3",     /* lower rank on the left */
                                       "2x3x1,1x4", /* both size-1 dims broadcast: (2,3,4) */
                                       "(),2x3",    /* a 0-d operand */
                                       "2x3,1",     /* a single element on the right */
                                       "8x33,33",   /* larger: directional */
                                       NULL};

static bool build_binary(tg_ctx *ctx, tg_op_case *c) {
    return need_shapes(ctx, c, 2, 2) && make_input(ctx, c, 0, 0) && make_input(ctx, c, 1, 1);
}

/* Length scales for relative steps (tg_gradcheck_scale_fn) of an input
 * kept away from a singularity at 0 -- log, sqrt and pow of x, 1/b: the
 * distance to it, |x_i|, over which the derivatives change by O(1) (d^3/dx^3
 * log x = 2/x^3 against 1/x); the other inputs take the default. */
static bool abs_scale(tg_tensor *const *in, int k, double *ell) {
    for (int64_t i = 0; i < in[k]->numel; i++) ell[i] = fabs(tg_load(in[k], i));
    return true;
}
static bool abs_scale_first(tg_tensor *const *in, int k, double *ell, void *user) {
    (void)user;
    return k == 0 && abs_scale(in, k, ell);
}
static bool abs_scale_second(tg_tensor *const *in, int k, double *ell, void *user) {
    (void)user;
    return k == 1 && abs_scale(in, k, ell);
}

/* div: b drawn away from 0 (its descriptor), with |b| its length scale */
static bool build_div(tg_ctx *ctx, tg_op_case *c) {
    c->scale = abs_scale_second;
    return build_binary(ctx, c);
}

static const char HELP_MATMUL[] = "A,B: (M,K),(K,N) or (B,M,K),(B,K,N) or (B,M,K),(K,N)";
static const char *const V_MATMUL[] = {"3x4,4x5",                    /* non-square */
                                       "1x4,4x1",                    /* row times column */
                                       "4x1,1x3",                    /* outer product */
                                       "1x1,1x1",     "2x3x4,2x4x5", /* batched */
                                       "3x2x4,4x3",                  /* batched with a shared b */
                                       "70x65,65x40",                /* larger: blocked GEMM paths, directional */
                                       NULL};

/* ---- elementwise: unary, with a scalar, activations --------------------------- */

static const char HELP_UNARY[] = "X: any shape, e.g. 3x4";
static const char *const V_UNARY[] = {"3x4", "1", "()", "2x1x3", "16x33", NULL};

static bool build_unary(tg_ctx *ctx, tg_op_case *c) { return need_shapes(ctx, c, 1, 1) && make_input(ctx, c, 0, 0); }
/* log, sqrt, pow: x drawn away from the singularity at 0 (their
 * descriptors), with |x| its length scale */
static bool build_unary_pole(tg_ctx *ctx, tg_op_case *c) {
    c->scale = abs_scale_first;
    return build_unary(ctx, c);
}

/* One number argument: s (add_scalar, mul_scalar), p (pow_scalar), slope
 * (leaky_relu). */
static const char HELP_SCALAR_S[] = "X;s=S: any shape and the scalar s (default 1.5)";
static const char *const V_ADD_SCALAR[] = {"3x4;s=1.5", "()", "2x1x3;s=-3", "16x33;s=0.25", NULL};
static const char *const V_MUL_SCALAR[] = {"3x4;s=-0.7", "()", "2x1x3;s=3", "3x4;s=0", "16x33;s=1.5", NULL};
static const char HELP_POW[] = "X;p=P: any shape (inputs drawn in [0.5, 2)) and the exponent p (default 2)";
static const char *const V_POW[] = {"3x4;p=2", "3x4;p=3", "3x4;p=0.5", "2x1x3;p=-1.5", "();p=2.5", "16x33;p=1.7", NULL};
static const char HELP_LEAKY[] = "X;slope=S: any shape and the negative slope (default 0.01)";
static const char *const V_LEAKY[] = {"3x4", "3x4;slope=0.2", "()", "2x1x3;slope=-0.5", "16x33;slope=0.1", NULL};

static bool build_scalar(tg_ctx *ctx, tg_op_case *c) {
    return build_unary(ctx, c) && check_args(ctx, c, c->arg_name[0], false);
}
static bool build_scalar_pole(tg_ctx *ctx, tg_op_case *c) {
    c->scale = abs_scale_first;
    return build_scalar(ctx, c);
}

static const char HELP_GELU[] = "X;approx=erf|tanh: any shape; the exact erf form (default) or the tanh one";
static const char *const V_GELU[] = {"3x4", "3x4;approx=tanh", "()", "2x1x3;approx=tanh", "16x33", NULL};

static bool build_gelu(tg_ctx *ctx, tg_op_case *c) {
    if (!build_unary(ctx, c)) return false;
    const char *a = tg_registry_arg(c, "approx");
    if (strcmp(a, "erf") != 0 && strcmp(a, "tanh") != 0) {
        tg_error(ctx, TG_ERR_FORMAT, BUILD_FN, "gelu: approx=%s in spec '%s' is neither erf nor tanh", a, c->spec);
        return false;
    }
    return true;
}
static tg_tensor *fw_gelu(tg_ctx *ctx, tg_tensor *const *in, void *u) {
    return tg_gelu(ctx, in[0], strcmp(tg_registry_arg(u, "approx"), "tanh") == 0);
}

/* ---- reductions ----------------------------------------------------------------- */

static const char *const V_SUM[] = {"3x4", "()", "1", "2x3x4", "16x33", NULL};
/* sum_axis, mean_axis, max_axis: an integer axis and keepdim */
static bool build_axis(tg_ctx *ctx, tg_op_case *c) {
    return build_unary(ctx, c) && check_args(ctx, c, "axis,keepdim", true);
}

static const char HELP_AXIS[] = "X;axis=A;keepdim=0|1: any shape, the axis (default -1, may be negative) and "
                                "whether to keep it with size 1 (default 0)";
static const char *const V_AXIS[] = {"3x4;axis=0",
                                     "3x4;axis=1;keepdim=1",
                                     "2x3x4;axis=-1",
                                     "2x3x4;axis=1;keepdim=1",
                                     "();axis=0",
                                     "5;axis=0",
                                     "1x4;axis=0",
                                     "16x33;axis=1",
                                     NULL};

/* ---- shapes: transpose, reshape, concat, slice ------------------------------- */

static const char HELP_TRANSPOSE[] = "X: ndim >= 2; the last two dims are swapped";
static const char *const V_TRANSPOSE[] = {"3x4", "1x5", "2x3x4", "2x1x3x2", "33x65", NULL};

static const char HELP_RESHAPE[] = "X;to=SHAPE: the new shape, one size may be -1, e.g. 2x3x4;to=4x-1";
static const char *const V_RESHAPE[] = {
    "2x3x4;to=6x4", "2x3x4;to=4x-1", "2x6;to=3x1x4", "1;to=()", "();to=1x1", "40x30;to=-1x20", NULL};

/* The reshape target (validated by the builder). */
static bool reshape_target(const tg_op_case *c, int *ndim, int64_t *shape) {
    const char *s = tg_registry_arg(c, "to");
    return s && parse_shape(s, strlen(s), true, ndim, shape);
}
static bool build_reshape(tg_ctx *ctx, tg_op_case *c) {
    int nd;
    int64_t sh[TG_MAX_DIMS];
    if (!build_unary(ctx, c)) return false;
    if (!reshape_target(c, &nd, sh)) {
        tg_error(ctx, TG_ERR_FORMAT, BUILD_FN,
                 "reshape: spec '%s' needs to=SHAPE (sizes joined by 'x', one may "
                 "be -1, '()' for 0-d)",
                 c->spec);
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
static const char *const V_CONCAT[] = {
    "2x3,4x3,1x3;axis=0", "2x3,2x1,2x2;axis=-1", "2x3x4,2x1x4;axis=1", "3x2;axis=1", "1,1", "16x8,16x25;axis=1", NULL};

static bool build_concat(tg_ctx *ctx, tg_op_case *c) {
    if (!need_shapes(ctx, c, 1, TG_GRADCHECK_MAX_INPUTS) || !check_args(ctx, c, "axis", true)) return false;
    for (int k = 0; k < c->n_shapes; k++)
        if (!make_input(ctx, c, k, k)) return false;
    return true;
}
static tg_tensor *fw_concat(tg_ctx *ctx, tg_tensor *const *in, void *u) {
    const tg_op_case *c = u;
    return tg_concat(ctx, c->n_inputs, in, (int)num_of(c, "axis"));
}

static const char HELP_SLICE[] = "X;axis=A;start=S;end=E: elements S..E-1 along axis A (defaults: 0, 0, size)";
static const char *const V_SLICE[] = {"5x4;axis=0;start=1;end=4",
                                      "3x6;axis=1;start=0;end=6",
                                      "2x3x4;axis=-1;start=2;end=3",
                                      "4x3;axis=0;start=2;end=2",
                                      "1;axis=0;start=0;end=1",
                                      "33x20;axis=0;start=5;end=30",
                                      NULL};

static bool build_slice(tg_ctx *ctx, tg_op_case *c) {
    return build_unary(ctx, c) && check_args(ctx, c, "axis,start,end", true);
}
static tg_tensor *fw_slice(tg_ctx *ctx, tg_tensor *const *in, void *u) {
    const tg_op_case *c = u;
    int axis = (int)num_of(c, "axis");
    int nd = in[0]->ndim;
    int a = axis < 0 ? axis + nd : axis;
    int64_t size = a >= 0 && a < nd ? in[0]->shape[a] : 0;
    int64_t end = tg_registry_arg(c, "end") ? (int64_t)num_of(c, "end") : size;
    return tg_slice(ctx, in[0], axis, (int64_t)num_of(c, "start"), end);
}

static const char HELP_PERMUTE[] = "X;perm=P0,P1,...: the order of the dims, one entry per dim of X (negative "
                                   "from the end), e.g. 2x3x4x5;perm=0,2,1,3";
static const char *const V_PERMUTE[] = {"2x3x4;perm=2,0,1",     "2x3x4x5;perm=0,2,1,3",
                                        "3x4;perm=1,0",         "2x3x4;perm=-1,0,1",
                                        "2x1x3x2;perm=3,1,0,2", "5;perm=0",
                                        "33x2x40;perm=2,1,0",   NULL};

/* The perm argument as integers; false when it is not a comma-separated
 * list of at most TG_MAX_DIMS integers. */
static bool perm_of(const tg_op_case *c, int *n, int *perm) {
    const char *p = tg_registry_arg(c, "perm");
    *n = 0;
    while (p && *p) {
        char *e;
        long v = strtol(p, &e, 10);
        if (e == p || *n == TG_MAX_DIMS || (*e && *e != ',')) return false;
        perm[(*n)++] = (int)v;
        p = *e ? e + 1 : e;
    }
    return p != NULL;
}
static bool build_permute(tg_ctx *ctx, tg_op_case *c) {
    int n, perm[TG_MAX_DIMS];
    if (!build_unary(ctx, c)) return false;
    if (!perm_of(c, &n, perm) || n != c->ndim[0]) {
        tg_error(ctx, TG_ERR_FORMAT, BUILD_FN, "permute: spec '%s' needs perm=P0,P1,... (%d integers, one per dim)",
                 c->spec, c->ndim[0]);
        return false;
    }
    return true;
}
static tg_tensor *fw_permute(tg_ctx *ctx, tg_tensor *const *in, void *u) {
    int n, perm[TG_MAX_DIMS];
    perm_of(u, &n, perm);
    return tg_permute(ctx, in[0], perm);
}

static const char HELP_TRANSPOSE_DIMS[] =
    "X;dim0=A;dim1=B: swaps dims A and B (defaults 0 and 1; negative from the end)";
static const char *const V_TRANSPOSE_DIMS[] = {"2x3x4;dim0=0;dim1=2", "2x3x4x5;dim0=1;dim1=2",   "3x4;dim0=-1;dim1=-2",
                                               "2x3;dim0=1;dim1=1",   "4x33x2x20;dim0=1;dim1=3", NULL};

static bool build_transpose_dims(tg_ctx *ctx, tg_op_case *c) {
    return build_unary(ctx, c) && check_args(ctx, c, "dim0,dim1", true);
}
static tg_tensor *fw_transpose_dims(tg_ctx *ctx, tg_tensor *const *in, void *u) {
    return tg_transpose_dims(ctx, in[0], (int)num_of(u, "dim0"), (int)num_of(u, "dim1"));
}

/* ---- embedding ---------------------------------------------------------------- */

static const char HELP_EMBEDDING[] = "W,I: the weight (V,D) and the shape of the indices (drawn in 0..V-1, "
                                     "with at least one repeat)";
static const char *const V_EMBEDDING[] = {"10x4,6", "5x3,2x4", "1x1,1", "7x2,()", "50x16,4x9", NULL};

static bool build_embedding(tg_ctx *ctx, tg_op_case *c) {
    if (!need_shapes(ctx, c, 2, 2)) return false;
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
    return make_input(ctx, c, 0, 0) != NULL;
}
static tg_tensor *fw_embedding(tg_ctx *ctx, tg_tensor *const *in, void *u) {
    const tg_op_case *c = u;
    return tg_embedding(ctx, in[0], c->ndim[1], c->shape[1], c->index);
}

/* ---- softmax, losses, dropout ------------------------------------------------ */

static const char HELP_SOFTMAX[] = "X: any shape; over the last axis";
static const char *const V_SOFTMAX[] = {"3x5", "5", "2x3x4", "4x1", "()", "8x65", NULL};

static const char HELP_CE[] = "NxC;smoothing=E;ignore_index=I;ignore_rows=K: logits (N,C), random targets in "
                              "0..C-1; the first K < N rows get target I (default -100)";
static const char *const V_CE[] = {
    "4x5", "4x5;smoothing=0.1",  "6x3;ignore_rows=2",    "6x3;ignore_rows=2;smoothing=0.2",
    "1x1", "5x4;ignore_index=2", "32x10;smoothing=0.05", NULL};

static bool build_cross_entropy(tg_ctx *ctx, tg_op_case *c) {
    if (!build_unary(ctx, c) || !check_args(ctx, c, "smoothing", false) ||
        !check_args(ctx, c, "ignore_index,ignore_rows", true))
        return false;
    if (c->ndim[0] != 2 || c->shape[0][0] < 1 || c->shape[0][1] < 1) {
        tg_error(ctx, TG_ERR_SHAPE, BUILD_FN, "cross_entropy: spec '%s': the logits must be (N,C) with N, C >= 1",
                 c->spec);
        return false;
    }
    int64_t N = c->shape[0][0], C = c->shape[0][1];
    int64_t ign = (int64_t)num_of(c, "ignore_index"), rows = (int64_t)num_of(c, "ignore_rows");
    if (rows < 0 || rows >= N) {
        tg_error(ctx, TG_ERR_VALUE, BUILD_FN,
                 "cross_entropy: spec '%s': ignore_rows=%lld must be in 0..N-1=%lld "
                 "(with every row ignored the loss is NaN)",
                 c->spec, (long long)rows, (long long)(N - 1));
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
    return true;
}
static tg_tensor *fw_cross_entropy(tg_ctx *ctx, tg_tensor *const *in, void *u) {
    const tg_op_case *c = u;
    tg_cross_entropy_opts o = TG_CROSS_ENTROPY_DEFAULTS;
    o.ignore_index = (int64_t)num_of(c, "ignore_index");
    o.label_smoothing = num_of(c, "smoothing");
    return tg_cross_entropy(ctx, in[0], c->index, &o);
}

static const char HELP_MSE[] = "P,T: prediction and target of one shape (both differentiable)";
static const char *const V_MSE[] = {"3x4,3x4", "1,1", "(),()", "2x3x4,2x3x4", "16x33,16x33", NULL};

static bool build_mse(tg_ctx *ctx, tg_op_case *c) {
    return need_shapes(ctx, c, 2, 2) && make_input(ctx, c, 0, 0) && make_input(ctx, c, 1, 1);
}

static const char HELP_DROPOUT[] = "X;p=P;train=0|1: any shape, drop probability (default 0.3), training (1)";
static const char *const V_DROPOUT[] = {"4x5;p=0.3", "3x7;p=0.5",   "2x3;p=0", "4x5;p=0.3;train=0",
                                        "()",        "16x33;p=0.2", NULL};

static bool build_dropout(tg_ctx *ctx, tg_op_case *c) {
    return build_unary(ctx, c) && check_args(ctx, c, "p", false) && check_args(ctx, c, "train", true);
}
static tg_tensor *fw_dropout(tg_ctx *ctx, tg_tensor *const *in, void *u) {
    return tg_dropout(ctx, in[0], num_of(u, "p"), num_of(u, "train") != 0);
}

/* ---- transformers: masks, rotary embedding, attention, SwiGLU ---------------- */

static const char HELP_MASKED_FILL[] = "X,M;value=V: x and a mask broadcasting to it (drawn 0 or 1); V where the "
                                       "mask is 1 (default -1.5; finite, so the checked loss is)";
static const char *const V_MASKED_FILL[] = {"3x4,3x4",       "2x3x4,3x4", "2x3x4,1x4", "2x2x3x3,3x3;value=-30",
                                            "(),();value=7", "16x33,33",  NULL};

static bool build_masked_fill(tg_ctx *ctx, tg_op_case *c) {
    return need_shapes(ctx, c, 2, 2) && check_args(ctx, c, "value", false) && make_input(ctx, c, 0, 0) &&
           make_input(ctx, c, 1, 1); /* the mask: 0 or 1 */
}
static tg_tensor *fw_masked_fill(tg_ctx *ctx, tg_tensor *const *in, void *u) {
    return tg_masked_fill(ctx, in[0], in[1], num_of(u, "value"));
}

static const char HELP_TRI[] = "X;diagonal=K: ndim >= 2; the triangle of the last two dims (default diagonal 0)";
static const char *const V_TRI[] = {
    "4x5", "4x5;diagonal=1", "4x5;diagonal=-2", "2x3x3", "3x6;diagonal=10", "3x6;diagonal=-7", "16x33;diagonal=3",
    NULL};

static bool build_tri(tg_ctx *ctx, tg_op_case *c) {
    return build_unary(ctx, c) && check_args(ctx, c, "diagonal", true);
}
static tg_tensor *fw_tril(tg_ctx *ctx, tg_tensor *const *in, void *u) {
    return tg_tril(ctx, in[0], (int64_t)num_of(u, "diagonal"));
}
static tg_tensor *fw_triu(tg_ctx *ctx, tg_tensor *const *in, void *u) {
    return tg_triu(ctx, in[0], (int64_t)num_of(u, "diagonal"));
}

static const char HELP_ROPE[] = "X;axis=A;base=B: pairs along the last dim (even), positions along axis A (default "
                                "-2), frequency base B (default 10000)";
static const char *const V_ROPE[] = {
    "4x6", "2x3x5x8", "2x5x3x4;axis=1", "3x2;base=100", "2x3x4;axis=0", "1x70x2x16;axis=1", NULL};

static bool build_rope(tg_ctx *ctx, tg_op_case *c) {
    return build_unary(ctx, c) && check_args(ctx, c, "axis", true) && check_args(ctx, c, "base", false);
}
static tg_tensor *fw_rope(tg_ctx *ctx, tg_tensor *const *in, void *u) {
    return tg_rope(ctx, in[0], (int)num_of(u, "axis"), num_of(u, "base"));
}

/* Fused attention and its composed twin take the same spec. */
static const char HELP_ATTENTION[] = "Q,K,V;causal=0|1;scale=S: q (...,Tq,D), k (...,Tk,D), v (...,Tk,Dv), the same "
                                     "leading dims; causal mask (default 1; needs Tq == Tk); scale (default 0: "
                                     "1/sqrt(D))";
static const char *const V_ATTENTION[] = {"1x1x3x2,1x1x3x2,1x1x3x2",
                                          "2x2x4x3,2x2x4x3,2x2x4x5;causal=0",
                                          "2x3x4,2x6x4,2x6x3;causal=0",
                                          "4x3,4x3,4x2;scale=0.7",
                                          "1x2x70x8,1x2x70x8,1x2x70x8",
                                          "1x1x65x4,1x1x80x4,1x1x80x3;causal=0",
                                          NULL};

static bool build_attention(tg_ctx *ctx, tg_op_case *c) {
    return need_shapes(ctx, c, 3, 3) && check_args(ctx, c, "causal", true) && check_args(ctx, c, "scale", false) &&
           make_input(ctx, c, 0, 0) && make_input(ctx, c, 1, 1) && make_input(ctx, c, 2, 2);
}
static tg_tensor *fw_attention(tg_ctx *ctx, tg_tensor *const *in, void *u) {
    return tg_attention(ctx, in[0], in[1], in[2], num_of(u, "causal") != 0, num_of(u, "scale"));
}
static tg_tensor *fw_attention_composed(tg_ctx *ctx, tg_tensor *const *in, void *u) {
    return tg_attention_composed(ctx, in[0], in[1], in[2], num_of(u, "causal") != 0, num_of(u, "scale"));
}

/* ---- layers: Linear, RMSNorm, LayerNorm (fused, and the composed twins) ---------- */

static const char HELP_LINEAR[] = "X,W;bias=0|1: input (..., in), weight (out, in); a bias (out) unless bias=0";
static const char *const V_LINEAR[] = {"4x3,5x3", "4x3,5x3;bias=0", "3,2x3", "2x3x4,5x4",
                                       "1x1,1x1", "33x40,24x40",    NULL};

static bool build_linear(tg_ctx *ctx, tg_op_case *c) {
    if (!need_shapes(ctx, c, 2, 2) || !check_args(ctx, c, "bias", true)) return false;
    if (c->ndim[1] != 2) {
        tg_error(ctx, TG_ERR_SHAPE, BUILD_FN, "linear: spec '%s': the weight must be (out, in)", c->spec);
        return false;
    }
    if (!make_input(ctx, c, 0, 0) || !make_input(ctx, c, 1, 1)) return false;
    return !num_of(c, "bias") || tg_registry_input(ctx, c, 2, 1, c->shape[1]);
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
static const char *const V_RMSNORM[] = {
    "4x8", "4x8;bias=1", "4x8;affine=0", "2x3x4;norm=2;bias=1", "6;eps=0.1", "16x64;bias=1", NULL};
static const char *const V_LAYERNORM[] = {"4x8",       "4x8;bias=0", "4x8;affine=0", "2x3x4;norm=2",
                                          "6;eps=0.1", "3x1",        "16x64",        NULL};

/* The length scale of a norm's input x, for relative steps: the distance
 * over which the output's slope changes, which is the row's own
 * normalizer -- sqrt(mean x^2 + eps) for RMSNorm, sqrt(var + eps) for
 * LayerNorm -- the same for every element of a row (the best central step
 * is ~1.7 eps_mach^(1/3) times it, docs/experiments.md). gamma and beta
 * take the default (their root mean square): the output is linear in them. */
static bool norm_scale(tg_tensor *const *in, int k, double *ell, void *user) {
    const tg_op_case *c = user;
    if (k != 0) return false;
    const tg_tensor *x = in[0];
    bool centered = c->op->fn.norm == tg_layernorm_fused || c->op->fn.norm == tg_layernorm_composed;
    int norm = (int)num_of(c, "norm");
    double eps = num_of(c, "eps");
    int64_t C = 1;
    for (int d = x->ndim - norm; d < x->ndim; d++) C *= x->shape[d];
    if (C < 1 || x->numel % C != 0) return false;
    for (int64_t o = 0; o < x->numel; o += C) {
        double mean = 0.0, ss = 0.0;
        if (centered) {
            for (int64_t j = 0; j < C; j++) mean += tg_load(x, o + j);
            mean /= (double)C;
        }
        for (int64_t j = 0; j < C; j++) ss += (tg_load(x, o + j) - mean) * (tg_load(x, o + j) - mean);
        double l = sqrt(ss / (double)C + eps);
        for (int64_t j = 0; j < C; j++) ell[o + j] = l;
    }
    return true;
}

static bool build_norm(tg_ctx *ctx, tg_op_case *c) {
    if (!build_unary(ctx, c) || !check_args(ctx, c, "norm,affine,bias", true) || !check_args(ctx, c, "eps", false))
        return false;
    int64_t norm = (int64_t)num_of(c, "norm");
    if (norm < 1 || norm > c->ndim[0]) {
        tg_error(ctx, TG_ERR_SHAPE, BUILD_FN, "%s: spec '%s': norm=%lld must be in 1..ndim(x)=%d", c->op->def->name,
                 c->spec, (long long)norm, c->ndim[0]);
        return false;
    }
    int nd = (int)norm;
    const int64_t *shape = c->shape[0] + c->ndim[0] - nd;
    bool affine = num_of(c, "affine") != 0, bias = num_of(c, "bias") != 0;
    if (affine && !tg_registry_input(ctx, c, 1, nd, shape)) return false;
    if (affine && bias && !tg_registry_input(ctx, c, 2, nd, shape)) return false;
    c->scale = norm_scale;
    return true;
}

/* ---- the table ----------------------------------------------------------------
 * One entry per op; its index is the op's id. Each points to the op's
 * descriptor -- its name, its arguments (with defaults), the values its
 * inputs are drawn from, and where the default step and tolerances of a
 * dtype do not fit it, its own -- and says what it computes, its spec, its
 * built-in specs, its builder and forward (with `fn` for a generic
 * forward).
 *
 * The descriptors' own values, float32 only (the float64 defaults fit
 * every op), and how they were chosen: where the
 * float32 round-off of L, about eps32 |L| / h in the quotient, reaches the
 * tolerance at h = 1e-3. It does when a perturbed element moves many
 * outputs -- a row of log_softmax and of the norms, a row or column
 * of matmul and linear (K products each) -- or large ones (exp). Those
 * smooth ops take h = 1e-2, near the measured float32 optimum (`sweep`:
 * 1e-2 for rmsnorm and layernorm), where truncation, h^2 |L'''| / 6, is
 * still far below the tolerance; matmul and linear are linear in each
 * input, so central differences have no truncation error and take h = 0.1.
 * Measured: `tapegrad-gradcheck check all --dtype f32`, with and without
 * --mode full, passes seeds 0..59; at h = 1e-3 some seeds failed the norms
 * at 16x64, exp at 16x33, matmul at 70x65,65x40, log_softmax at 8x65 and
 * linear at 33x40,24x40 (docs/gradcheck-guide.md). softmax, which passed at
 * 1e-3, took 1e-2 later: a row moves as in log_softmax, and its worst
 * err/tol over seeds 0..59 at 8x65 fell from 0.38 to 0.057 (`check softmax
 * --dtype f32 --shape 8x65 --seeds 60 [--h 1e-3]`).
 *
 * No op has its own atol or rtol: with atol relative to the gradient's
 * scale in float32 and these steps, the worst err/tol of any op over every
 * built-in variant (`check all --format csv`, seed 0, worst_ratio) is
 * 1.2e-3 in float64 (matmul) and 0.26 in float32 (cross_entropy): the
 * defaults leave every op room, and a looser own tolerance would only
 * hide bugs (tests/test_custom_op.c shows an entry's own h, atol and rtol
 * changing a verdict). */

/* .variants and .n_variants (without the NULL) */
#define VARIANTS(v) .variants = v, .n_variants = (int)(sizeof v / sizeof v[0]) - 1

static const tg_op_info registry[] = {
    /* elementwise, binary */
    {.def = &tg_add_op,
     .summary = "a + b, broadcasting",
     .spec_help = HELP_BINARY,
     VARIANTS(V_BINARY),
     .build = build_binary,
     .forward = fw_binary,
     .fn.binary = tg_add},
    {.def = &tg_sub_op,
     .summary = "a - b, broadcasting",
     .spec_help = HELP_BINARY,
     VARIANTS(V_BINARY),
     .build = build_binary,
     .forward = fw_binary,
     .fn.binary = tg_sub},
    {.def = &tg_mul_op,
     .summary = "a * b, broadcasting",
     .spec_help = HELP_BINARY,
     VARIANTS(V_BINARY),
     .build = build_binary,
     .forward = fw_binary,
     .fn.binary = tg_mul},
    {.def = &tg_div_op,
     .regions = "b: nonzero",
     .summary = "a / b, broadcasting (|b| >= 0.5)",
     .spec_help = HELP_BINARY,
     VARIANTS(V_BINARY),
     .build = build_div,
     .forward = fw_binary,
     .fn.binary = tg_div},
    /* elementwise, unary */
    {.def = &tg_neg_op.def,
     .summary = "-x",
     .spec_help = HELP_UNARY,
     VARIANTS(V_UNARY),
     .build = build_unary,
     .forward = fw_unary,
     .fn.unary = tg_neg},
    {.def = &tg_add_scalar_op.def,
     .summary = "x + s",
     .spec_help = HELP_SCALAR_S,
     VARIANTS(V_ADD_SCALAR),
     .build = build_scalar,
     .forward = fw_scalar,
     .fn.scalar = tg_add_scalar},
    {.def = &tg_mul_scalar_op.def,
     .summary = "x * s",
     .spec_help = HELP_SCALAR_S,
     VARIANTS(V_MUL_SCALAR),
     .build = build_scalar,
     .forward = fw_scalar,
     .fn.scalar = tg_mul_scalar},
    {.def = &tg_pow_scalar_op.def,
     .regions = "x: positive",
     .summary = "x^p (x in [0.5, 2))",
     .spec_help = HELP_POW,
     VARIANTS(V_POW),
     .build = build_scalar_pole,
     .forward = fw_scalar,
     .fn.scalar = tg_pow_scalar},
    {.def = &tg_exp_op.def,
     .regions = "x: mag=1e-3:30",
     .summary = "e^x",
     .spec_help = HELP_UNARY,
     VARIANTS(V_UNARY),
     .build = build_unary,
     .forward = fw_unary,
     .fn.unary = tg_exp},
    {.def = &tg_log_op.def,
     .regions = "x: positive",
     .summary = "ln x (x in [0.5, 2))",
     .spec_help = HELP_UNARY,
     VARIANTS(V_UNARY),
     .build = build_unary_pole,
     .forward = fw_unary,
     .fn.unary = tg_log},
    {.def = &tg_sqrt_op.def,
     .regions = "x: positive",
     .summary = "sqrt x (x in [0.5, 2))",
     .spec_help = HELP_UNARY,
     VARIANTS(V_UNARY),
     .build = build_unary_pole,
     .forward = fw_unary,
     .fn.unary = tg_sqrt},
    {.def = &tg_abs_op.def,
     .regions = "x: kink=0",
     .summary = "|x| (|x| >= 0.2)",
     .spec_help = HELP_UNARY,
     VARIANTS(V_UNARY),
     .build = build_unary,
     .forward = fw_unary,
     .fn.unary = tg_abs},
    /* activations */
    {.def = &tg_relu_op.def,
     .regions = "x: kink=0",
     .summary = "max(x, 0) (|x| >= 0.2)",
     .spec_help = HELP_UNARY,
     VARIANTS(V_UNARY),
     .build = build_unary,
     .forward = fw_unary,
     .fn.unary = tg_relu},
    {.def = &tg_leaky_relu_op.def,
     .regions = "x: kink=0",
     .summary = "x > 0 ? x : slope x (|x| >= 0.2)",
     .spec_help = HELP_LEAKY,
     VARIANTS(V_LEAKY),
     .build = build_scalar,
     .forward = fw_scalar,
     .fn.scalar = tg_leaky_relu},
    {.def = &tg_sigmoid_op.def,
     .regions = "x: kink=0",
     .summary = "1 / (1 + e^-x)",
     .spec_help = HELP_UNARY,
     VARIANTS(V_UNARY),
     .build = build_unary,
     .forward = fw_unary,
     .fn.unary = tg_sigmoid},
    {.def = &tg_tanh_op.def,
     .summary = "tanh x",
     .spec_help = HELP_UNARY,
     VARIANTS(V_UNARY),
     .build = build_unary,
     .forward = fw_unary,
     .fn.unary = tg_tanh},
    {.def = &tg_gelu_op.def,
     .summary = "x/2 (1 + erf(x / sqrt 2)), or the tanh approximation",
     .spec_help = HELP_GELU,
     VARIANTS(V_GELU),
     .build = build_gelu,
     .forward = fw_gelu},
    {.def = &tg_silu_op.def,
     .regions = "x: kink=0",
     .summary = "x sigmoid(x)",
     .spec_help = HELP_UNARY,
     VARIANTS(V_UNARY),
     .build = build_unary,
     .forward = fw_unary,
     .fn.unary = tg_silu},
    {.def = &tg_softplus_op.def,
     .regions = "x: kink=0 kink=20",
     .summary = "log(1 + e^x)",
     .spec_help = HELP_UNARY,
     VARIANTS(V_UNARY),
     .build = build_unary,
     .forward = fw_unary,
     .fn.unary = tg_softplus},
    /* reductions */
    {.def = &tg_sum_op,
     .summary = "sum of all elements",
     .spec_help = HELP_UNARY,
     VARIANTS(V_SUM),
     .build = build_unary,
     .forward = fw_unary,
     .fn.unary = tg_sum},
    {.def = &tg_mean_op,
     .summary = "mean of all elements",
     .spec_help = HELP_UNARY,
     VARIANTS(V_SUM),
     .build = build_unary,
     .forward = fw_unary,
     .fn.unary = tg_mean},
    {.def = &tg_sum_axis_op,
     .summary = "sum over one axis",
     .spec_help = HELP_AXIS,
     VARIANTS(V_AXIS),
     .build = build_axis,
     .forward = fw_axis,
     .fn.axis = tg_sum_axis},
    {.def = &tg_mean_axis_op,
     .summary = "mean over one axis",
     .spec_help = HELP_AXIS,
     VARIANTS(V_AXIS),
     .build = build_axis,
     .forward = fw_axis,
     .fn.axis = tg_mean_axis},
    {.def = &tg_max_axis_op,
     .regions = "x: distinct",
     .summary = "max over one axis (distinct inputs: no ties)",
     .spec_help = HELP_AXIS,
     VARIANTS(V_AXIS),
     .build = build_axis,
     .forward = fw_axis,
     .fn.axis = tg_max_axis},
    /* matmul */
    {.def = &tg_matmul_op,
     .summary = "a b: 2-D, batched 3-D, or batched by shared 2-D",
     .spec_help = HELP_MATMUL,
     VARIANTS(V_MATMUL),
     .build = build_binary,
     .forward = fw_binary,
     .fn.binary = tg_matmul},
    /* shapes */
    {.def = &tg_transpose_op,
     .summary = "swaps the last two dims",
     .spec_help = HELP_TRANSPOSE,
     VARIANTS(V_TRANSPOSE),
     .build = build_unary,
     .forward = fw_unary,
     .fn.unary = tg_transpose},
    {.def = &tg_permute_op,
     .summary = "reorders the dims",
     .spec_help = HELP_PERMUTE,
     VARIANTS(V_PERMUTE),
     .build = build_permute,
     .forward = fw_permute},
    {.def = &tg_transpose_dims_op,
     .summary = "swaps two dims",
     .spec_help = HELP_TRANSPOSE_DIMS,
     VARIANTS(V_TRANSPOSE_DIMS),
     .build = build_transpose_dims,
     .forward = fw_transpose_dims},
    {.def = &tg_reshape_op,
     .summary = "x with a new shape",
     .spec_help = HELP_RESHAPE,
     VARIANTS(V_RESHAPE),
     .build = build_reshape,
     .forward = fw_reshape},
    {.def = &tg_concat_op,
     .summary = "joins tensors along an axis",
     .spec_help = HELP_CONCAT,
     VARIANTS(V_CONCAT),
     .build = build_concat,
     .forward = fw_concat},
    {.def = &tg_slice_op,
     .summary = "x[start:end] along an axis",
     .spec_help = HELP_SLICE,
     VARIANTS(V_SLICE),
     .build = build_slice,
     .forward = fw_slice},
    {.def = &tg_embedding_op,
     .summary = "rows of weight by index",
     .spec_help = HELP_EMBEDDING,
     VARIANTS(V_EMBEDDING),
     .build = build_embedding,
     .forward = fw_embedding},
    /* softmax, losses, dropout */
    {.def = &tg_softmax_op,
     .regions = "*: mag=1e-3:10",
     .summary = "exp(x_i) / sum_j exp(x_j) over the last axis",
     .spec_help = HELP_SOFTMAX,
     VARIANTS(V_SOFTMAX),
     .build = build_unary,
     .forward = fw_unary,
     .fn.unary = tg_softmax},
    {.def = &tg_log_softmax_op,
     .regions = "*: mag=1e-3:10",
     .summary = "x_i - log sum_j exp(x_j) over the last axis",
     .spec_help = HELP_SOFTMAX,
     VARIANTS(V_SOFTMAX),
     .build = build_unary,
     .forward = fw_unary,
     .fn.unary = tg_log_softmax},
    {.def = &tg_cross_entropy_op,
     .regions = "*: mag=1e-3:10",
     .summary = "mean -log softmax(logits)[target], label smoothing, ignore_index",
     .spec_help = HELP_CE,
     VARIANTS(V_CE),
     .build = build_cross_entropy,
     .forward = fw_cross_entropy},
    {.def = &tg_mse_loss_op,
     .summary = "mean((pred - target)^2)",
     .spec_help = HELP_MSE,
     VARIANTS(V_MSE),
     .build = build_mse,
     .forward = fw_binary,
     .fn.binary = tg_mse_loss},
    {.def = &tg_dropout_op,
     .summary = "x / (1 - p) where kept, 0 where dropped (p)",
     .spec_help = HELP_DROPOUT,
     VARIANTS(V_DROPOUT),
     .random = true,
     .build = build_dropout,
     .forward = fw_dropout},
    /* transformers */
    {.def = &tg_masked_fill_op,
     .summary = "value where mask != 0, else x",
     .spec_help = HELP_MASKED_FILL,
     VARIANTS(V_MASKED_FILL),
     .build = build_masked_fill,
     .forward = fw_masked_fill},
    {.def = &tg_tril_op,
     .summary = "lower triangle of the last two dims (j - i <= diagonal)",
     .spec_help = HELP_TRI,
     VARIANTS(V_TRI),
     .build = build_tri,
     .forward = fw_tril},
    {.def = &tg_triu_op,
     .summary = "upper triangle of the last two dims (j - i >= diagonal)",
     .spec_help = HELP_TRI,
     VARIANTS(V_TRI),
     .build = build_tri,
     .forward = fw_triu},
    {.def = &tg_rope_op,
     .summary = "rotary position embedding, LLaMA's consecutive pairs",
     .spec_help = HELP_ROPE,
     VARIANTS(V_ROPE),
     .build = build_rope,
     .forward = fw_rope},
    {.def = &tg_attention_op,
     .regions = "*: mag=1e-3:10",
     .summary = "softmax(scale q k^T + causal mask) v (fused, one log-sum-exp saved per row)",
     .spec_help = HELP_ATTENTION,
     VARIANTS(V_ATTENTION),
     .build = build_attention,
     .forward = fw_attention},
    /* layers */
    {.def = &tg_linear_op,
     .summary = "x W^T + b (Linear, fused)",
     .spec_help = HELP_LINEAR,
     VARIANTS(V_LINEAR),
     .build = build_linear,
     .forward = fw_linear},
    {.def = &tg_rmsnorm_op,
     .summary = "x / sqrt(mean x^2 + eps) * gamma + beta (RMSNorm, fused)",
     .spec_help = HELP_RMSNORM,
     VARIANTS(V_RMSNORM),
     .build = build_norm,
     .forward = fw_norm,
     .fn.norm = tg_rmsnorm_fused},
    {.def = &tg_layernorm_op,
     .summary = "(x - mean) / sqrt(var + eps) * gamma + beta (LayerNorm, fused)",
     .spec_help = HELP_LAYERNORM,
     VARIANTS(V_LAYERNORM),
     .build = build_norm,
     .forward = fw_norm,
     .fn.norm = tg_layernorm_fused},
    {.def = &tg_rmsnorm_composed_op,
     .summary = "RMSNorm built from primitive ops",
     .spec_help = HELP_RMSNORM,
     VARIANTS(V_RMSNORM),
     .build = build_norm,
     .forward = fw_norm,
     .fn.norm = tg_rmsnorm_composed},
    {.def = &tg_layernorm_composed_op,
     .summary = "LayerNorm built from primitive ops",
     .spec_help = HELP_LAYERNORM,
     VARIANTS(V_LAYERNORM),
     .build = build_norm,
     .forward = fw_norm,
     .fn.norm = tg_layernorm_composed},
    {.def = &tg_attention_composed_op,
     .regions = "*: mag=1e-3:10",
     .summary = "attention built from primitive ops",
     .spec_help = HELP_ATTENTION,
     VARIANTS(V_ATTENTION),
     .build = build_attention,
     .forward = fw_attention_composed},
};

#define N_OPS ((int)(sizeof registry / sizeof registry[0]))

/* ---- public API -------------------------------------------------------------- */

/* Ops added at run time (tg_registry_add: a plugin's, a program's own),
 * after the built-in ones: index N_OPS + k. */
static const tg_op_info *extra[TG_REGISTRY_MAX_ADDED];
static int n_extra;

int tg_registry_count(void) { return N_OPS + n_extra; }

const tg_op_info *tg_registry_get(int i) {
    if (i >= 0 && i < N_OPS) return &registry[i];
    return i >= N_OPS && i < N_OPS + n_extra ? extra[i - N_OPS] : NULL;
}

const tg_op_info *tg_registry_find(const char *name) {
    for (int i = 0; name && i < N_OPS + n_extra; i++)
        if (strcmp(tg_registry_get(i)->def->name, name) == 0) return tg_registry_get(i);
    return NULL;
}

int tg_registry_index(const tg_op_info *op) {
    for (int i = 0; op && i < N_OPS + n_extra; i++)
        if (op == tg_registry_get(i)) return i;
    return -1;
}

bool tg_registry_add(tg_ctx *ctx, const tg_op_info *op) {
    if (!tg_ok(ctx)) return false;
    if (!op || !op->def || !op->def->name || !op->build || !op->forward || !op->variants || op->n_variants < 1) {
        tg_error(ctx, TG_ERR_NULL, __func__, "op %s lacks a descriptor with a name, build, forward or variants",
                 op && op->def && op->def->name ? op->def->name : "(null)");
        return false;
    }
    if (tg_registry_find(op->def->name)) {
        tg_error(ctx, TG_ERR_VALUE, __func__, "an op named '%s' is already registered", op->def->name);
        return false;
    }
    if (n_extra == TG_REGISTRY_MAX_ADDED) {
        tg_error(ctx, TG_ERR_VALUE, __func__, "%s: the registry holds at most %d added ops", op->def->name,
                 TG_REGISTRY_MAX_ADDED);
        return false;
    }
    extra[n_extra++] = op;
    return true;
}

bool tg_registry_build(tg_ctx *ctx, const tg_op_info *op, const char *spec, tg_dtype dtype, tg_op_case *c) {
    if (c) memset(c, 0, sizeof *c);
    if (!tg_ok(ctx)) return false;
    if (!op || !c) {
        tg_null_error(ctx, BUILD_FN, op ? "c" : "op");
        return false;
    }
    if (dtype != TG_F32 && dtype != TG_F64) {
        tg_error(ctx, TG_ERR_DTYPE, BUILD_FN, "%s: unknown dtype %d", op->def->name, (int)dtype);
        return false;
    }
    if (!spec) spec = op->variants[0];
    c->op = op;
    c->dtype = dtype;
    if (!parse_spec(ctx, op, spec, c) || !apply_args(ctx, c)) return false;
    if (!op->build(ctx, c)) {
        if (tg_ok(ctx)) tg_error(ctx, TG_ERR_VALUE, BUILD_FN, "%s: spec '%s' was refused", op->def->name, spec);
        return false;
    }
    return tg_ok(ctx);
}

tg_tensor *tg_registry_forward(tg_ctx *ctx, tg_op_case *c) {
    if (!tg_ok(ctx)) return NULL;
    if (!c || !c->op) {
        tg_error(ctx, TG_ERR_NULL, __func__, "argument 'c' is NULL or was not built");
        return NULL;
    }
    return c->op->forward(ctx, c->inputs, c);
}

tg_gradcheck_opts tg_registry_opts(const tg_op_info *op, tg_dtype dtype, const tg_gradcheck_opts *opts) {
    tg_gradcheck_opts o = opts ? *opts : tg_gradcheck_defaults();
    if (o.no_defaults) return o;
    tg_gradcheck_tol own = op ? (dtype == TG_F32 ? op->def->f32 : op->def->f64) : (tg_gradcheck_tol){0};
    tg_gradcheck_tol def = tg_gradcheck_dtype_tol(dtype);
    if (o.h == 0) o.h = own.h > 0 ? own.h : def.h;
    if (o.atol == 0) o.atol = own.atol > 0 ? own.atol : def.atol;
    if (o.rtol == 0) o.rtol = own.rtol > 0 ? own.rtol : def.rtol;
    o.no_defaults = true;
    return o;
}

bool tg_registry_check_spec(tg_ctx *ctx, const tg_op_info *op, const char *spec, tg_dtype dtype,
                            const tg_gradcheck_opts *opts, tg_gradcheck_result *result) {
    tg_op_case c;
    if (!tg_gradcheck_start(ctx, "tg_registry_check", result) || !tg_registry_build(ctx, op, spec, dtype, &c))
        return false;
    tg_gradcheck_opts o = tg_registry_opts(op, dtype, opts);
    uint32_t mask = o.inputs ? o.inputs & c.check : c.check;
    if (mask == 0) {
        tg_error(ctx, TG_ERR_VALUE, "tg_registry_check",
                 "%s: inputs mask 0x%x selects no differentiable input (those are 0x%x)", op->def->name,
                 (unsigned)o.inputs, (unsigned)c.check);
        return false;
    }
    o.inputs = mask;
    if (!o.scale) o.scale = c.scale;
    return tg_gradcheck(ctx, op->forward, &c, c.n_inputs, c.inputs, &o, result);
}

bool tg_registry_check(tg_ctx *ctx, const tg_op_info *op, int variant, tg_dtype dtype, const tg_gradcheck_opts *opts,
                       tg_gradcheck_result *result) {
    if (!tg_gradcheck_start(ctx, __func__, result)) return false;
    if (!op) {
        tg_null_error(ctx, __func__, "op");
        return false;
    }
    if (variant < 0 || variant >= op->n_variants) {
        tg_error(ctx, TG_ERR_INDEX, __func__, "%s: variant %d is outside 0..%d", op->def->name, variant,
                 op->n_variants - 1);
        return false;
    }
    return tg_registry_check_spec(ctx, op, op->variants[variant], dtype, opts, result);
}

/* tapegrad/check.h: gradient checking and the op registry (check/), in
 * their own library, tapegrad::check (link tapegrad_check; pkg-config
 * tapegrad-check). Tests and tools use it; a training program does not
 * need it. */
#ifndef TAPEGRAD_CHECK_H
#define TAPEGRAD_CHECK_H

#include "tapegrad/layers.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================== */
/* Gradient checking and the op registry                                    */
/* ======================================================================== */
/* tg_gradcheck compares an op's hand-written backward with central finite
 * differences (check/gradcheck.c). For f(inputs) and a random weighting
 * r of f's outputs (uniform in [-1, 1), from opts.seed), L = sum_j r_j f_j:
 *   analytic  a_i = dL/dx_i              one tg_backward_ex seeded with r
 *   numeric   n_i = (L(x + h e_i) - L(x - h e_i)) / 2h
 * and an element passes when |a_i - n_i| <= atol + rtol |n_i| (PyTorch's
 * gradcheck rule). The denominator is the step actually stored (x+h and
 * x-h rounded to the dtype), so float32 checks are not biased by rounding
 * of the step.
 *
 * The step and tolerances follow the dtype. An h, atol or rtol left 0 --
 * in zero-initialized options, NULL options and tg_gradcheck_defaults()
 * alike -- takes the default of the checked inputs' dtype
 * (tg_gradcheck_dtype_tol):
 *   float64  h 1e-6, atol 1e-5, rtol 1e-3 (PyTorch's)
 *   float32  h 1e-3, atol 1e-3, rtol 1e-2 (when any checked input is float32)
 * A value set explicitly is used as given in either dtype. To use a 0
 * tolerance itself (atol 0: a purely relative test), set no_defaults.
 * (In the registry an op's own values come between the two:
 * tg_registry_opts. docs/gradcheck.md measures why float32 needs these.)
 *
 * Forward evaluations for the differences run in no-grad mode, each from
 * the same RNG state (so dropout sees one mask throughout); afterwards the
 * RNG is left where one call of f leaves it. The check uses its own tape
 * (the caller's tape, tensors and grads are untouched) and copies of the
 * inputs. Its tensors live in the arena; memory of the difference
 * evaluations is reused, so a big check does not grow the arena with the
 * number of evaluations. Never call tg_ctx_reset inside f.
 *
 * It refuses float32 inputs unless allow_float32: float32 round-off (~1e-7
 * relative) swamps the difference quotient at a float64 step: with h = 1e-6
 * the error of f(x +- h) is ~1e-7 |f|, which divided by 2h is ~0.05 |f|.
 * With allow_float32 the float32 defaults above apply.
 *
 * Changes from the first version: tg_gradcheck_defaults() leaves h, atol
 * and rtol 0 (it returned the float64 values, which float32 checks then
 * kept); no_defaults and tg_gradcheck_dtype_tol are new. */

/* The function checked: builds its output from inputs[0..n-1] with
 * differentiable ops; `user` is passed through (op arguments, a layer...).
 * It must give the same output for the same inputs and RNG state. */
typedef tg_tensor *(*tg_gradcheck_fn)(tg_ctx *ctx, tg_tensor *const *inputs, void *user);

/* Most inputs a checked function may take. */
#define TG_GRADCHECK_MAX_INPUTS 8

typedef enum tg_gradcheck_mode {
    TG_GRADCHECK_FULL = 0,   /* every element of every checked input:
                                 2 forwards per element */
    TG_GRADCHECK_DIRECTIONAL /* one random unit direction v per input:
                                 compares dL/dx . v with
                                 (L(x + h v) - L(x - h v)) / 2h; 2 forwards
                                 per input, for big tensors */
} tg_gradcheck_mode;

/* A finite-difference step and the tolerances of the pass rule. */
typedef struct tg_gradcheck_tol {
    double h;          /* step */
    double atol, rtol; /* pass when |a - n| <= atol + rtol |n| */
} tg_gradcheck_tol;

/* Options. Zero-initialized means the defaults (NULL opts too); an h, atol
 * or rtol left 0 means the default of the dtype (or the op's own, in the
 * registry), unless no_defaults. */
typedef struct tg_gradcheck_opts {
    double h;          /* finite-difference step (> 0; 0: the default) */
    double atol, rtol; /* tolerances (>= 0; 0: the default) */
    tg_gradcheck_mode mode;
    uint64_t seed;      /* seeds r and the directions v (not the ctx RNG) */
    bool allow_float32; /* check float32 inputs anyway */
    uint32_t inputs;    /* bit k set: check input k; 0: every input */
    bool forward_diff;  /* one-sided (L(x + h) - L(x)) / h instead of
                              central differences: error O(h), not O(h^2);
                              for comparing the schemes (step sweeps) */
    bool no_defaults;   /* use h, atol, rtol as given, zeros included
                              (then h must be > 0) */
} tg_gradcheck_opts;

/* The outcome for one input. */
typedef struct tg_gradcheck_input {
    bool checked; /* false: skipped (not in opts.inputs) */
    bool pass;
    int64_t n_checked; /* elements (FULL) or directions (DIRECTIONAL) */
    int64_t n_failed;
    double max_abs_err;  /* max |a - n| */
    double max_rel_err;  /* max |a - n| / max(|n|, atol) */
    int64_t worst_index; /* flat index of the worst element; -1 in
                              DIRECTIONAL mode or when nothing was checked */
    double worst_analytic, worst_numeric;
    double worst_ratio; /* |a - n| / (atol + rtol |n|): pass when <= 1 */
} tg_gradcheck_input;

/* The outcome of a check: what the caller asserts on. "Worst" is the
 * comparison with the largest ratio |a - n| / (atol + rtol |n|) (NaN counts
 * as the worst of all). */
typedef struct tg_gradcheck_result {
    bool pass;         /* every comparison passed (and no error) */
    int64_t n_checked; /* comparisons over all inputs */
    int64_t n_failed;
    int64_t n_evals; /* forward evaluations of f: 1 + 2 per element
                              (FULL) or per input (DIRECTIONAL); 2 + 1 per
                              with forward_diff */
    double max_abs_err, max_rel_err;
    int worst_input;     /* -1 when nothing was checked */
    int64_t worst_index; /* as in tg_gradcheck_input */
    double worst_analytic, worst_numeric, worst_ratio;
    double h, atol, rtol; /* the values used */
    tg_gradcheck_mode mode;
    bool forward_diff;
    int n_inputs;
    tg_gradcheck_input input[TG_GRADCHECK_MAX_INPUTS];
} tg_gradcheck_result;

/* The defaults: h, atol, rtol 0 (the dtype's, see above), FULL, seed 0,
 * every input, float32 refused. */
tg_gradcheck_opts tg_gradcheck_defaults(void);
/* The step and tolerances an h, atol, rtol left 0 take in `dtype`:
 * TG_F64 {1e-6, 1e-5, 1e-3}, TG_F32 {1e-3, 1e-3, 1e-2}. */
tg_gradcheck_tol tg_gradcheck_dtype_tol(tg_dtype dtype);
/* Checks f's backward at inputs[0..n_inputs-1] (1..TG_GRADCHECK_MAX_INPUTS)
 * and fills *result. Returns result->pass. A failed comparison is a result,
 * not an error; errors (bad arguments, float32 refused, f failing) set the
 * context's error and return false. */
bool tg_gradcheck(tg_ctx *ctx, tg_gradcheck_fn f, void *user, int n_inputs, tg_tensor *const *inputs,
                  const tg_gradcheck_opts *opts, tg_gradcheck_result *result);
/* The full Jacobians of f's output with respect to input `input`, as float64
 * arena tensors of shape (numel(out), numel(input)): J[j][i] = d out_j / d x_i.
 * *analytic from one backward per output element, *numeric from central
 * differences (h from opts as above). For small functions: at most 2^22
 * entries. Returns false (and sets the error) on failure. */
bool tg_gradcheck_jacobian(tg_ctx *ctx, tg_gradcheck_fn f, void *user, int n_inputs, tg_tensor *const *inputs,
                           int input, const tg_gradcheck_opts *opts, tg_tensor **analytic, tg_tensor **numeric);

/* Diagnosis of a failed check (check/diagnose.c): what is wrong with a
 * backward, read from the structure of D = Ja - Jn, the analytic minus the
 * numeric Jacobian of one input (both computed as tg_gradcheck_jacobian
 * does, so for small inputs: at most 2^22 entries):
 *   zero          Ja = 0: no gradient reaches the input
 *   sign          Ja = -Jn: a sign flip
 *   scale         Ja = c Jn with c uniform; c named when it is C, 1/C,
 *                 sqrt(C), 1/sqrt(C) (C the last dim), numel, 2, 1/2:
 *                 a sum for a mean, a root of a sum for a root of a mean
 *   transpose     Ja = Jn^T
 * and for an input of the output's shape whose rows (last dim C) map to
 * the same rows (a normalization):
 *   identity      D = -c I in every row: a term c dy_i missing from dx_i;
 *                 c = 1: x used twice, one gradient overwritten instead of
 *                 accumulated
 *   mean-term     D constant along each row: a dropped (factor -1) or
 *                 wrong - mean(g) term (LayerNorm's term from the mean)
 *   projection    D = a xhat^T per row: the - xhat mean(xhat g) term
 *                 dropped (factor -1: r treated as a constant) or summed
 *                 instead of averaged (factor C - 1)
 *   row-scale     Ja = s_n Jn row by row: a wrong power of a saved
 *                 statistic; s_n ~ (mean x^2)^p, p = 1: std for rstd
 *   statistic     the identity part of Jn scaled by rho_n, the projection
 *                 part by rho_n^3: the backward uses r rho_n for r; rho
 *                 1/sqrt(C) in every row: r from the sum of squares;
 *                 rho_n^2 = 1 + eps / mean(x^2)_n: a missing eps
 *   unstructured  none of these
 * `factor` is c, the term's factor relative to that term of Jn (D = factor
 * x the term), p, rho, or the missing eps. */
typedef enum tg_diagnosis_kind {
    TG_DIAG_NONE = 0, /* the Jacobians agree */
    TG_DIAG_ZERO,
    TG_DIAG_SIGN,
    TG_DIAG_SCALE,
    TG_DIAG_TRANSPOSE,
    TG_DIAG_IDENTITY,
    TG_DIAG_MEAN_TERM,
    TG_DIAG_PROJECTION,
    TG_DIAG_ROW_SCALE,
    TG_DIAG_STATISTIC,
    TG_DIAG_UNSTRUCTURED
} tg_diagnosis_kind;

typedef struct tg_gradcheck_diagnosis {
    tg_diagnosis_kind kind;
    int input;          /* the input diagnosed */
    double factor;      /* see above; 0 when the kind has none */
    double max_diff;    /* max |Ja - Jn| */
    int64_t n_wrong;    /* input elements whose column of D is not ~0 */
    int64_t n_elements; /* the input's numel */
    char where[192];    /* the elements, rows and columns of x concerned */
    char finding[320];  /* the structure found, in words */
    char cause[320];    /* the likely cause */
} tg_gradcheck_diagnosis;

/* Diagnoses f's backward for input `input` at these inputs (opts as
 * tg_gradcheck: h and the tolerances deciding what counts as a
 * difference). Returns false only on an error (bad arguments, a Jacobian
 * too big, f failing); a correct backward gives kind TG_DIAG_NONE. */
bool tg_gradcheck_diagnose(tg_ctx *ctx, tg_gradcheck_fn f, void *user, int n_inputs, tg_tensor *const *inputs,
                           int input, const tg_gradcheck_opts *opts, tg_gradcheck_diagnosis *d);
/* "projection", "scale", ... */
const char *tg_diagnosis_name(tg_diagnosis_kind kind);

/* The op registry (check/registry.c): one table with an entry per
 * differentiable op and layer -- its name, a builder of random valid inputs
 * and its forward -- so tests and the gradient-check tool check every op by
 * walking it. An op's index in the table is its id.
 *
 * Inputs are described by a spec string: the input shapes separated by
 * commas, each as sizes joined by 'x' ("()" for a 0-d tensor), then
 * optional ";key=value" arguments, e.g. "2x1x3,4x3" (add broadcasting from
 * both sides), "2x3x4;axis=1;keepdim=1" (sum_axis), "4x5;smoothing=0.1"
 * (cross_entropy). Each op documents its spec in spec_help, declares its
 * arguments with their defaults in args, and lists built-in specs (its
 * shape variants). Builders keep inputs away from the op's kinks:
 * relu/abs/leaky_relu inputs away from 0, max without ties, log/sqrt/pow
 * inputs positive, div denominators away from 0.
 *
 * Changes from the first version: tg_op_info.id is gone (the index is the
 * id: tg_registry_index); its h, atol, rtol (float64 only, 0 everywhere)
 * became f64 and f32, used by tg_registry_opts; args and fn are new. */

/* Most key=value arguments in a spec. */
#define TG_OP_MAX_ARGS 8

struct tg_op_info;

/* One concrete input set of an op, made by tg_registry_build. */
typedef struct tg_op_case {
    const struct tg_op_info *op;
    char spec[128]; /* the spec it was built from */
    tg_dtype dtype;
    int n_inputs; /* tensor inputs of the forward */
    tg_tensor *inputs[TG_GRADCHECK_MAX_INPUTS];
    const char *input_names[TG_GRADCHECK_MAX_INPUTS]; /* "a", "b", "x", "weight"... */
    uint32_t check;                                   /* bit k: input k is differentiable */
    /* the spec, parsed */
    int n_shapes;
    int ndim[TG_GRADCHECK_MAX_INPUTS];
    int64_t shape[TG_GRADCHECK_MAX_INPUTS][TG_MAX_DIMS];
    /* the arguments: the spec's, then the op's defaults for those it
     * leaves out (tg_registry_arg reads one) */
    int n_args;
    char arg_name[TG_OP_MAX_ARGS][16];
    char arg_value[TG_OP_MAX_ARGS][48];
    /* integer data the forward needs (embedding indices, class targets),
     * in the arena; NULL when none */
    int64_t *index;
    int64_t n_index;
    /* how each input's values were drawn, e.g. "uniform [-2, 2)" (NULL:
     * not said) */
    const char *input_dist[TG_GRADCHECK_MAX_INPUTS];
} tg_op_case;

/* The library function an entry's generic forward calls, by arity. */
typedef union tg_op_fn {
    tg_tensor *(*unary)(tg_ctx *ctx, tg_tensor *x);                        /* tg_exp, tg_sum, ... */
    tg_tensor *(*binary)(tg_ctx *ctx, tg_tensor *a, tg_tensor *b);         /* tg_add, tg_matmul, ... */
    tg_tensor *(*scalar)(tg_ctx *ctx, tg_tensor *x, double s);             /* tg_mul_scalar, ... */
    tg_tensor *(*axis)(tg_ctx *ctx, tg_tensor *x, int axis, bool keepdim); /* tg_sum_axis, ... */
    tg_tensor *(*norm)(tg_ctx *ctx, tg_tensor *x, tg_tensor *gamma, tg_tensor *beta, int ndim_norm,
                       double eps); /* tg_rmsnorm_fused, ... */
} tg_op_fn;

/* A registered op. */
typedef struct tg_op_info {
    const char *name;            /* "add", "matmul", ... */
    const char *summary;         /* what it computes, one line */
    const char *spec_help;       /* the spec it takes and its arguments */
    const char *args;            /* its arguments and their defaults, e.g.
                                      "axis=-1,keepdim=0" ("to": no default);
                                      NULL: none */
    const char *const *variants; /* built-in specs, NULL-terminated */
    int n_variants;
    bool random; /* draws from the context's RNG (dropout) */
    /* its own step and tolerances by dtype, where the defaults do not fit
     * it; a 0 field: the dtype's default (tg_gradcheck_dtype_tol) */
    tg_gradcheck_tol f64, f32;
    /* Makes c->inputs (and c->index) from c's parsed spec and dtype with
     * the context's RNG; false and an error on a bad spec. */
    bool (*build)(tg_ctx *ctx, tg_op_case *c);
    /* The op applied to inputs (c->inputs or copies of them); user is the
     * tg_op_case. */
    tg_gradcheck_fn forward;
    tg_op_fn fn; /* what a generic forward calls */
    /* For tg_registry_build_ranges (a user's op): each spec shape's input
     * name and the range its values are drawn from, uniformly, e.g.
     * "x=-2:2,gamma=0.5:1.5"; NULL for the built-in ops. */
    const char *inputs;
} tg_op_info;

/* Number of registered ops, the i-th (NULL when out of range), the one
 * named `name` (NULL when there is none), and op's index (-1 when op is
 * not an entry of the registry). */
int tg_registry_count(void);
const tg_op_info *tg_registry_get(int i);
const tg_op_info *tg_registry_find(const char *name);
int tg_registry_index(const tg_op_info *op);

/* Adds a user's op (defined with tapegrad/op.h, say) after the built-in
 * ones, so tg_registry_find, tg_registry_check and tapegrad-gradcheck see
 * it. `op` must outlive its use (a static table). It needs a name not yet
 * registered, build, forward and at least one variant. Not thread-safe:
 * add ops before checking. Errors: TG_ERR_NULL, TG_ERR_VALUE (name taken,
 * more than TG_REGISTRY_MAX_ADDED). */
#define TG_REGISTRY_MAX_ADDED 64
bool tg_registry_add(tg_ctx *ctx, const tg_op_info *op);
/* A builder for a user's op: input k has the spec's k-th shape, is named
 * and drawn uniformly from the range op->inputs gives it
 * ("x=-2:2,gamma=0.5:1.5"), and is differentiable. A spec with another
 * number of shapes, or a malformed inputs text, is TG_ERR_FORMAT naming
 * the op. */
bool tg_registry_build_ranges(tg_ctx *ctx, tg_op_case *c);

/* A gradcheck plugin: a shared object a user builds against the installed
 * package, that `tapegrad-gradcheck --plugin ./libmyop.so` loads to check
 * the user's ops without rebuilding tapegrad (docs/gradcheck.md). It
 * defines its ops as tg_op_info entries and exports them with
 *   TG_GRADCHECK_PLUGIN("myops", my_ops, 2)
 * which defines the function the tool looks up by name
 * (TG_GRADCHECK_PLUGIN_SYMBOL). `abi` and `op_info_size` let the tool
 * refuse a plugin built against another version of this header. */
#define TG_GRADCHECK_PLUGIN_ABI 1
#define TG_GRADCHECK_PLUGIN_SYMBOL "tg_gradcheck_plugin_register"
typedef struct tg_gradcheck_plugin {
    int abi;             /* TG_GRADCHECK_PLUGIN_ABI */
    size_t op_info_size; /* sizeof(tg_op_info) */
    const char *name;    /* the plugin's, for messages */
    const tg_op_info *ops;
    int n_ops;
} tg_gradcheck_plugin;
typedef const tg_gradcheck_plugin *(*tg_gradcheck_plugin_fn)(void);
#define TG_GRADCHECK_PLUGIN(NAME, OPS, N_OPS)                                                                       \
    const tg_gradcheck_plugin *tg_gradcheck_plugin_register(void);                                                  \
    const tg_gradcheck_plugin *tg_gradcheck_plugin_register(void) {                                                 \
        static const tg_gradcheck_plugin p = {TG_GRADCHECK_PLUGIN_ABI, sizeof(tg_op_info), (NAME), (OPS), (N_OPS)}; \
        return &p;                                                                                                  \
    }
/* Parses spec (NULL: the op's first variant) and builds random valid inputs
 * of dtype into *c; arguments the spec leaves out get the op's defaults.
 * Errors (TG_ERR_FORMAT for a malformed spec or an argument the op does
 * not take, TG_ERR_SHAPE / TG_ERR_VALUE for shapes or arguments its builder
 * refuses) name the op and the spec. Shapes the op itself refuses (add of
 * 2x3 and 4) build, and fail in the forward with the op's error. */
bool tg_registry_build(tg_ctx *ctx, const tg_op_info *op, const char *spec, tg_dtype dtype, tg_op_case *c);
/* The value of argument `key` of a built case, as text (NULL: none). */
const char *tg_registry_arg(const tg_op_case *c, const char *key);
/* The op's forward on c's inputs. */
tg_tensor *tg_registry_forward(tg_ctx *ctx, tg_op_case *c);
/* The options a check of op in dtype runs with: opts (NULL: the defaults),
 * where it leaves h, atol or rtol 0 the op's own for dtype, else the
 * dtype's default; every one resolved, and no_defaults set so they are used
 * as they are (a caller may then set a tolerance to 0). */
tg_gradcheck_opts tg_registry_opts(const tg_op_info *op, tg_dtype dtype, const tg_gradcheck_opts *opts);
/* Builds the op's variant-th built-in spec (0..n_variants-1), or `spec`,
 * and gradchecks it with tg_registry_opts(op, dtype, opts) over the
 * differentiable inputs (intersected with opts->inputs when set). As
 * tg_gradcheck. */
bool tg_registry_check(tg_ctx *ctx, const tg_op_info *op, int variant, tg_dtype dtype, const tg_gradcheck_opts *opts,
                       tg_gradcheck_result *result);
bool tg_registry_check_spec(tg_ctx *ctx, const tg_op_info *op, const char *spec, tg_dtype dtype,
                            const tg_gradcheck_opts *opts, tg_gradcheck_result *result);

#ifdef __cplusplus
}
#endif

#endif /* TAPEGRAD_CHECK_H */

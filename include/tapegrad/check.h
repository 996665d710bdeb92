/* tapegrad/check.h: gradient checking and the op registry (check/), in
 * their own library, tapegrad::check (link tapegrad_check; pkg-config
 * tapegrad-check). Tests and tools use it; a training program does not
 * need it. */
#ifndef TAPEGRAD_CHECK_H
#define TAPEGRAD_CHECK_H

#include <stdio.h>

#include "tapegrad/layers.h"
#include "tapegrad/op.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================== */
/* Gradient checking and the op registry                                    */
/* ======================================================================== */
/* tg_gradcheck compares an op's hand-written backward with finite
 * differences (check/gradcheck.c). For f(inputs) and a weighting r of f's
 * outputs (uniform in [-1, 1) from opts.seed, or opts.r), L = sum_j r_j f_j:
 *   analytic  a_i = dL/dx_i              one tg_backward_ex seeded with r
 *   numeric   n_i = (L(x + h_i e_i) - L(x - h_i e_i)) / (2 h_i)
 * and an element passes when |a_i - n_i| <= atol + rtol |n_i| (PyTorch's
 * gradcheck rule). The denominator is the step actually stored (x+h_i and
 * x-h_i rounded to the dtype), so float32 checks are not biased by rounding
 * of the step; a step that rounds away entirely (x +- h_i == x) is an error,
 * never a pass (result.step_vanished says where).
 *
 * Four modes: FULL (every element, as above), DIRECTIONAL (one direction v
 * per input: dL/dx . v against (L(x + h v) - L(x - h v)) / 2h), JACOBIAN
 * (every entry d f_j / d x_i, one backward per output and two forwards per
 * input element: PyTorch's slow mode) and FAST (one direction u over all
 * checked inputs at once: one comparison in all; PyTorch's fast mode, one
 * u per input, is DIRECTIONAL's kind).
 *
 * The step. h_i = h (ABSOLUTE), h max(|x_i|, floor) (ELEMENT) or h l_i
 * (SCALED), where l_i is the length scale of element i: the distance over
 * which f changes its slope -- for RMSNorm the row's sqrt(mean x^2 + eps),
 * for LayerNorm sqrt(var + eps) (opts.scale; the registry gives the norms
 * theirs), by default the input's root mean square. The best central step is
 * h* ~ 1.7 eps_mach^(1/3) l at every input scale (docs/experiments.md), so a
 * relative step keeps a float32 check near its optimum from x ~ 1e-3 to
 * 1e3 where one absolute step cannot (a generated sweep over those scales:
 * docs/gradcheck-guide.md, relative steps).
 *
 * The tolerance. With atol_scale ABSOLUTE atol is absolute; with GRADIENT
 * it is relative to the gradient's own scale: |a - n| <= atol G_k + rtol |n|,
 * G_k the root mean square of input k's gradient (the larger of the analytic
 * and the numeric one), so a tiny or huge gradient is held to the same
 * relative standard.
 *
 * Defaults. An h, atol or rtol left 0 -- in zero-initialized options, NULL
 * options and tg_gradcheck_defaults() alike -- takes the default of the
 * checked inputs' dtype (tg_gradcheck_dtype_tol); step and atol_scale left
 * AUTO are SCALED and GRADIENT in both dtypes:
 *   float64  h 1e-6 x l_i, atol 1e-5 x G_k, rtol 1e-3
 *   float32  h 1e-3 x l_i, atol 1e-3 x G_k, rtol 1e-2 (when any checked
 *            input is float32)
 * Relative to the input's and the gradient's own scale, one setting holds
 * from inputs of size 1e-6 to 1e6 (docs/experiments.md); an absolute atol
 * of 1e-5 would exceed a gradient of 1e-6 and pass any backward there.
 * A value set explicitly is used as given in either dtype. To use a 0
 * tolerance itself (atol 0: a purely relative test), set no_defaults.
 * (In the registry an op's own values come between the two:
 * tg_registry_opts. docs/gradcheck-guide.md measures why float32 needs these.)
 *
 * The predicted error. Each comparison also gets the error central
 * differences themselves make at that step (docs/gradcheck-guide.md):
 *   rounding    TG_GRADCHECK_C_ROUND eps S_i / h_i   S_i = sum of |r_j f_j|
 *                                                    over the outputs x_i moves
 *   truncation  TG_GRADCHECK_C_TRUNC (h_i / l_i)^2 G_k   (forward differences:
 *                                                    (h_i / l_i) G_k)
 * For a comparison that fails the tolerance, the truncation is not assumed
 * but measured: the quotient is taken again at h_i / 2, and since the
 * truncation falls as h^2 (h), the two differ by 3/4 (1/2) of the
 * truncation at h_i -- so a linear op, which has none, is held to its
 * rounding alone. The result reports by how much the error exceeds the
 * prediction (max_excess).
 *
 * The verdict. A comparison that fails the tolerance by more than the
 * check's own predicted error is a wrong gradient (n_wrong); one that fails
 * by no more than that, or whose numeric side is not finite, cannot decide
 * (the step is off its optimum: the quotient measures its own round-off or
 * truncation). A comparison where a backward that gave 0 would fail
 * (|n| > atol + rtol |n|) saw a gradient (n_resolved). Each input, and the
 * check, ends in
 *   TG_VERDICT_WRONG         some comparison is wrong
 *   TG_VERDICT_INCONCLUSIVE  nothing wrong, but a failure that cannot be
 *                            decided, or no comparison that saw a
 *                            gradient: both sides (near) zero everywhere,
 *                            or f(x + h) == f(x - h) in the dtype, where an
 *                            all-zero backward would pass as well (reason)
 *   TG_VERDICT_PASS          every comparison passed, and some saw a
 *                            gradient
 * and pass is verdict == TG_VERDICT_PASS: a check that could not decide is
 * never a pass.
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
 * kept); no_defaults and tg_gradcheck_dtype_tol are new. Then: a vanished
 * step is an error (it used to pass in DIRECTIONAL mode and give NaN in
 * FULL); relative steps and tolerances, the default in float32 (it used an
 * absolute h 1e-3 and atol 1e-3) and then in float64 too (it used PyTorch's
 * absolute h 1e-6 and atol 1e-5); the JACOBIAN mode; user-given r and v
 * (an all-zero r is refused); the predicted error, its truncation measured
 * for failures; the verdict (pass used to be "no comparison failed", so a
 * check of 0 against 0 passed); the per-element callback and
 * tg_gradcheck_write. */

/* The function checked: builds its output from inputs[0..n-1] with
 * differentiable ops; `user` is passed through (op arguments, a layer...).
 * It must give the same output for the same inputs and RNG state. */
typedef tg_tensor *(*tg_gradcheck_fn)(tg_ctx *ctx, tg_tensor *const *inputs, void *user);

/* The length scale l_i of every element of input k, written to
 * scale[0..numel(inputs[k])-1] (each finite and > 0): the distance over
 * which f's slope changes, e.g. sqrt(mean x^2 + eps) of the element's row
 * for RMSNorm. Returns false to leave input k to the default (its root mean
 * square). `user` is the checked function's. */
typedef bool (*tg_gradcheck_scale_fn)(tg_tensor *const *inputs, int k, double *scale, void *user);

/* Most inputs a checked function may take. */
#define TG_GRADCHECK_MAX_INPUTS 8

/* The constants of the predicted error (see above). C_ROUND was measured
 * on the registry's ops (over `check all` in both dtypes and modes, steps
 * 1e-8..1e-1, the rounding of a correct op stays under it); C_TRUNC
 * scales the truncation predicted for a passing comparison. A failing
 * one's truncation is measured, not predicted: over `check all` at steps
 * 1e-8..1e-1, in both dtypes and modes, no correct op is found wrong
 * (scripts/experiments/verdicts.sh and docs/experiments.md hold the
 * seeded bugs and their ops to it from input scale 1e-6 to 1e6). */
#define TG_GRADCHECK_C_ROUND 4.0
#define TG_GRADCHECK_C_TRUNC 3.0

typedef enum tg_gradcheck_mode {
    TG_GRADCHECK_FULL = 0,    /* every element of every checked input:
                                  2 forwards per element */
    TG_GRADCHECK_DIRECTIONAL, /* one direction v per input (random unit, or
                                  opts.v): compares dL/dx . v with
                                  (L(x + h v) - L(x - h v)) / 2h; 2 forwards
                                  per input, for big tensors */
    TG_GRADCHECK_JACOBIAN,    /* every entry d f_j / d x_i: one backward per
                                  output element, 2 forwards per input
                                  element (PyTorch's slow mode); r is not
                                  used */
    TG_GRADCHECK_FAST         /* one direction u over every checked input at
                                  once (random unit over all of them; input
                                  k's part opts.v[k] when given): compares
                                  sum_k dL/dx_k . u_k with (L(x + h u) -
                                  L(x - h u)) / 2h, one comparison in all:
                                  2 forwards and 1 backward however many
                                  inputs (PyTorch's fast mode takes 2 per
                                  input, one u each). It cannot say which
                                  input is wrong: result.joint */
} tg_gradcheck_mode;

/* How the step of element i follows from h. */
typedef enum tg_gradcheck_step {
    TG_GRADCHECK_STEP_AUTO = 0, /* SCALED */
    TG_GRADCHECK_STEP_ABSOLUTE, /* h_i = h */
    TG_GRADCHECK_STEP_ELEMENT,  /* h_i = h max(|x_i|, floor), floor =
                                   opts.step_floor, or l_i / 10 when 0 */
    TG_GRADCHECK_STEP_SCALED    /* h_i = h l_i (opts.scale) */
} tg_gradcheck_step;

/* What atol is relative to. */
typedef enum tg_gradcheck_atol_scale {
    TG_GRADCHECK_ATOL_AUTO = 0, /* GRADIENT */
    TG_GRADCHECK_ATOL_ABSOLUTE, /* |a - n| <= atol + rtol |n| */
    TG_GRADCHECK_ATOL_GRADIENT  /* |a - n| <= atol G_k + rtol |n|, G_k the
                                    root mean square of input k's gradient */
} tg_gradcheck_atol_scale;

/* What a check concluded, per input and overall (see the verdict above). */
typedef enum tg_gradcheck_verdict {
    TG_VERDICT_INCONCLUSIVE = 0, /* nothing wrong found, but no decision: see the reason */
    TG_VERDICT_PASS,             /* every comparison passed, and some saw a gradient */
    TG_VERDICT_WRONG             /* a comparison failed beyond the check's own error */
} tg_gradcheck_verdict;

/* Why a check is inconclusive. */
typedef enum tg_gradcheck_reason {
    TG_REASON_NONE = 0,   /* it is not: a pass, or a wrong gradient */
    TG_REASON_ALL_ZERO,   /* no comparison saw a gradient: the numeric side
                             was (near) zero everywhere -- a gradient that
                             vanishes, or f(x + h) == f(x - h) in the dtype --
                             so an all-zero backward would pass as well, while
                             f does change at larger steps */
    TG_REASON_UNRESOLVED, /* a comparison failed by no more than the check's
                             own error at its step, or its numeric side is not
                             finite: another step may decide */
    TG_REASON_EMPTY,      /* nothing to compare (an input without elements) */
    TG_REASON_ERROR       /* the check stopped on an error (the context's) */
} tg_gradcheck_reason;

/* Above this many times its predicted error (truncation measured) a failed
 * comparison is a wrong gradient; at or below it, undecided. The measured
 * truncation is an estimate, exact to its next order: where the truncation
 * is all the error, the error is ~1.0 times it. */
#define TG_GRADCHECK_WRONG_EXCESS 2.0

/* tg_gradcheck_tol, a finite-difference step and the tolerances of the
 * pass rule, is in tapegrad/op.h (an op's descriptor carries its own). */

/* A vector the caller gives: numel values (NULL data: none given). */
typedef struct tg_gradcheck_vec {
    const double *data;
    int64_t numel;
} tg_gradcheck_vec;

/* One comparison, as handed to opts.each. */
typedef struct tg_gradcheck_element {
    int input;      /* which input */
    int64_t index;  /* flat element of the input; -1: a direction */
    int64_t output; /* flat output element (JACOBIAN); else -1 */
    double analytic, numeric;
    double step;  /* the step h_i (as intended, before rounding) */
    double tol;   /* atol (scaled) + rtol |numeric| */
    double bound; /* the predicted finite-difference error */
    bool pass;
} tg_gradcheck_element;

/* Called once per comparison (element, direction or Jacobian entry). */
typedef void (*tg_gradcheck_element_fn)(void *user, const tg_gradcheck_element *e);

/* Options. Zero-initialized means the defaults (NULL opts too); an h, atol
 * or rtol left 0 means the default of the dtype (or the op's own, in the
 * registry), unless no_defaults. */
typedef struct tg_gradcheck_opts {
    /* finite-difference step (> 0; 0: the default); relative with
     * STEP_ELEMENT and STEP_SCALED */
    double h;
    double atol, rtol; /* tolerances (>= 0; 0: the default) */
    tg_gradcheck_mode mode;
    uint64_t seed;      /* seeds r and the directions v (not the ctx RNG) */
    bool allow_float32; /* check float32 inputs anyway */
    uint32_t inputs;    /* bit k set: check input k; 0: every input */
    /* one-sided (L(x + h) - L(x)) / h instead of central differences:
     * error O(h), not O(h^2); for comparing the schemes (step sweeps) */
    bool forward_diff;
    /* use h, atol, rtol as given, zeros included (then h must be > 0) */
    bool no_defaults;
    tg_gradcheck_step step;             /* how h_i follows from h */
    double step_floor;                  /* STEP_ELEMENT's floor (>= 0; 0: l_i / 10) */
    tg_gradcheck_scale_fn scale;        /* l_i; NULL: each input's root mean square */
    tg_gradcheck_atol_scale atol_scale; /* what atol is relative to */
    /* the output weighting (numel of the output); none: random from seed */
    tg_gradcheck_vec r;
    /* DIRECTIONAL: input k's direction, used as given (not normalized);
     * none: a random unit vector from seed. FAST: input k's part of u (the
     * parts not given: random, together of unit length) */
    tg_gradcheck_vec v[TG_GRADCHECK_MAX_INPUTS];
    tg_gradcheck_element_fn each; /* called for every comparison */
    void *each_user;
} tg_gradcheck_opts;

/* The outcome for one input. */
typedef struct tg_gradcheck_input {
    bool checked; /* false: skipped (not in opts.inputs; FAST: folded into
                     the first checked input's entry, result.joint) */
    bool pass;
    /* comparisons: elements (FULL), directions (DIRECTIONAL, FAST) or
     * entries (JACOBIAN), and how many failed */
    int64_t n_checked, n_failed;
    double max_abs_err; /* max |a - n| */
    double max_rel_err; /* max |a - n| / max(|n|, atol as used) */
    /* the worst comparison: its element (flat index; -1 in DIRECTIONAL mode
     * or when nothing was checked), its output element (JACOBIAN; else -1),
     * values, |a - n| / (atol + rtol |n|) (pass when <= 1), step h_i and
     * predicted error */
    int64_t worst_index, worst_output;
    double worst_analytic, worst_numeric, worst_ratio, worst_step, worst_bound;
    double step_min, step_max; /* the steps h_i used */
    double scale;              /* root mean square of the length scales l_i */
    /* G_k: root mean square of the gradient's terms (the larger of the
     * analytic values and of sum_j |r_j dy_j| / dx_i; of the directional
     * derivatives, or of the Jacobian's entries) */
    double grad_scale;
    double atol_used; /* the absolute tolerance: atol, or atol G_k */
    /* max |a - n| / predicted error, over every comparison and over the
     * failing ones (0 when none fails): <= 1, the difference is the
     * check's own error; a failure far above 1 is the backward's */
    double max_excess, fail_excess;
    /* the largest predicted error over the comparisons (what the check
     * itself may err by at its steps, beside max_abs_err) and its two
     * parts there: truncation C_TRUNC (h_i / l_i)^2 G_k (central) and
     * rounding C_ROUND eps S_i / h_i */
    double pred_max, pred_trunc, pred_round;
    /* of the n_failed: beyond the check's own error (wrong); and the
     * comparisons that saw a gradient: |n| > atol + rtol |n|, where a
     * backward that gave 0 would fail */
    int64_t n_wrong, n_resolved;
    /* no comparison saw a gradient, and f does not move at all when the
     * input moves by its length scale l_i: an exact zero gradient, which
     * the check confirmed (a pass; else TG_REASON_ALL_ZERO) */
    bool constant;
    tg_gradcheck_verdict verdict;
    tg_gradcheck_reason reason; /* when inconclusive */
} tg_gradcheck_input;

/* The outcome of a check: what the caller asserts on. "Worst" is the
 * comparison with the largest ratio |a - n| / (atol + rtol |n|) (NaN counts
 * as the worst of all). */
typedef struct tg_gradcheck_result {
    bool pass;                    /* verdict == TG_VERDICT_PASS (and no error) */
    tg_gradcheck_verdict verdict; /* wrong if any input is, else inconclusive
                                     if any input is (or on an error), else pass */
    tg_gradcheck_reason reason;   /* an inconclusive input's (ERROR on an error) */
    int64_t n_wrong;              /* comparisons beyond the check's own error */
    int64_t n_checked;            /* comparisons over all inputs */
    int64_t n_failed;
    /* forward evaluations of f: 1 + 2 per element (FULL, JACOBIAN) or per
     * input (DIRECTIONAL), 1 + 2 in all (FAST); 2 + 1 per with forward_diff; for each failing
     * comparison (JACOBIAN: column) 4 more to measure its truncation, and
     * 4 or 6 more when rounding alone does not cover it; for an input no
     * comparison saw a gradient in, 2 per element (direction) to see
     * whether f depends on it at all */
    int64_t n_evals;
    int64_t n_backwards; /* 1, or one per output element (JACOBIAN) */
    double max_abs_err, max_rel_err;
    int worst_input;     /* -1 when nothing was checked */
    int64_t worst_index; /* as in tg_gradcheck_input */
    int64_t worst_output;
    double worst_analytic, worst_numeric, worst_ratio;
    double h, atol, rtol; /* the values used */
    tg_gradcheck_mode mode;
    bool forward_diff;
    tg_gradcheck_step step;             /* as used (never AUTO) */
    tg_gradcheck_atol_scale atol_scale; /* as used (never AUTO) */
    tg_dtype dtype;                     /* TG_F32 when any checked input is */
    double eps;                         /* that dtype's machine epsilon */
    uint64_t seed;
    double max_excess, fail_excess; /* the largest of the inputs' */
    /* a step that vanished (an error): where */
    bool step_vanished;
    int vanished_input;     /* -1 when none */
    int64_t vanished_index; /* -1: the direction (DIRECTIONAL, FAST) */
    /* FAST: bit k set for every input the one comparison covers; it is
     * recorded in the entry of the lowest of them, the others' entries are
     * not checked. A wrong verdict then says that some gradient among
     * these inputs is wrong, not which (rerun DIRECTIONAL or FULL to
     * localize). 0 in the other modes. */
    uint32_t joint;
    int n_inputs;
    tg_gradcheck_input input[TG_GRADCHECK_MAX_INPUTS];
} tg_gradcheck_result;

/* The defaults: h, atol, rtol 0 (the dtype's, see above), FULL, step and
 * atol_scale AUTO, seed 0, every input, float32 refused. */
TG_API tg_gradcheck_opts tg_gradcheck_defaults(void);
/* The step and tolerances an h, atol, rtol left 0 take in `dtype`:
 * TG_F64 {1e-6, 1e-5, 1e-3}, TG_F32 {1e-3, 1e-3, 1e-2} (relative to l_i
 * and G_k by default: STEP_SCALED, ATOL_GRADIENT). */
TG_API tg_gradcheck_tol tg_gradcheck_dtype_tol(tg_dtype dtype);
/* Low precision. tg_gradcheck refuses bfloat16 and float16 inputs
 * (TG_ERR_DTYPE): their rounding (epsilon 2^-7 and 2^-10) swamps any
 * difference quotient -- a step small enough to follow the curve is lost in
 * rounding, one large enough to survive it measures a chord, not the
 * derivative. Check the op in float64 instead, and check its low-precision
 * path with tg_gradcheck_lowp: the gradients of f computed in the 16-bit
 * dtype against those computed in float64 from the same (rounded) inputs.
 *
 * tg_gradcheck_lowp rounds each input to `dtype` (the values
 * x_lp), runs f on leaves of dtype holding x_lp and on float64 leaves
 * holding the same values, seeds both backwards with one weighting r
 * (uniform in [-1, 1), from a fixed stream) and compares, per element,
 *   |g_lp - g_64| <= tol (|g_64| + G),  G = the RMS of g_64 over the input,
 * tol = opts->tol, or 16 eps(dtype) when 0 (bfloat16 0.125, float16
 * 0.0156): a computation in float32 stored once in 16 bits errs by a few
 * eps; a wrong backward (a missing term, a factor off) by O(1). f must
 * accept both dtypes (e.g. tg_cast its 16-bit inputs to float32). */
typedef struct tg_gradcheck_lowp_result {
    bool pass;
    tg_dtype dtype;
    double tol;      /* as used */
    double max_err;  /* max over elements of |g_lp - g_64| / (|g_64| + G) */
    int worst_input; /* -1 when no element was compared */
    int64_t worst_index;
    double worst_lowp, worst_f64; /* the two gradients there */
} tg_gradcheck_lowp_result;
/* Compares f's backward in dtype (TG_BF16 or TG_F16) with its float64
 * backward at inputs (float32 or float64 values; every input is checked),
 * as described above; tol <= 0 takes the default. Returns result->pass;
 * errors (bad arguments, f failing) set the context's error. */
TG_API bool tg_gradcheck_lowp(tg_ctx *ctx, tg_gradcheck_fn f, void *user, int n_inputs, tg_tensor *const *inputs,
                              tg_dtype dtype, double tol, tg_gradcheck_lowp_result *result);

/* Checks f's backward at inputs[0..n_inputs-1] (1..TG_GRADCHECK_MAX_INPUTS)
 * and fills *result. Returns result->pass. A failed comparison is a result,
 * not an error; errors (bad arguments, float32 refused, f failing, a step
 * that vanished) set the context's error and return false. */
TG_API bool tg_gradcheck(tg_ctx *ctx, tg_gradcheck_fn f, void *user, int n_inputs, tg_tensor *const *inputs,
                         const tg_gradcheck_opts *opts, tg_gradcheck_result *result);
/* Forward mode (check/gradcheck_fwd.c), both with the options and result
 * of tg_gradcheck (mode DIRECTIONAL in the result: one direction v_k per
 * checked input, opts.v[k] or random in [-1, 1) from opts.seed).
 *
 * tg_gradcheck_fwd: the JVP against finite differences, as JAX's
 * check_jvp -- every output element of J_k v_k (tg_jvp) against
 * (f(x_k + h v_k) - f(x_k - h v_k)) / 2h, passing when |a - n| <= atol +
 * rtol |n| + C eps |f| / h (h, atol, rtol as tg_gradcheck's, the last term
 * the quotient's rounding, C = TG_GRADCHECK_C_ROUND; by default h relative
 * to the input's root mean square and atol to the JVP's). A comparison per
 * output element: result.input[k].worst_output says where. The verdict as
 * tg_gradcheck's: a failure is wrong beyond TG_GRADCHECK_WRONG_EXCESS times
 * the truncation measured at h / 2 and h / 4 plus the rounding.
 *
 * tg_gradcheck_adjoint: the dot-product test <u, J_k v_k> = <J_k^T u, v_k>
 * for a random u (opts.r, or from opts.seed) over the output: forward mode
 * (analytic in the result) against reverse mode (numeric), no step h at
 * all, so exact to rounding. One comparison per input, passing when
 *   |fwd - rev| <= C eps sqrt(M + N_k) (|u| |J v| + |J^T u| |v|)
 * (C = TG_GRADCHECK_C_ADJOINT, eps the dtype's, M outputs, N_k input
 * elements, Euclidean norms): input[k].atol_used is that tolerance,
 * grad_scale the norms' sum. It catches backward bugs far below the
 * tolerance of finite differences (a relative error of 1e-6 in float64).
 * Any failure of the adjoint test is wrong. In both, an input where a zero
 * derivative would pass everywhere is inconclusive (TG_REASON_ALL_ZERO)
 * unless f does not move at all when the input moves by its own size
 * along v. Both return result->pass; errors as tg_gradcheck (and an op
 * without a tangent rule, tg_jvp's error). */
#define TG_GRADCHECK_C_ADJOINT 8.0
TG_API bool tg_gradcheck_fwd(tg_ctx *ctx, tg_gradcheck_fn f, void *user, int n_inputs, tg_tensor *const *inputs,
                             const tg_gradcheck_opts *opts, tg_gradcheck_result *result);
TG_API bool tg_gradcheck_adjoint(tg_ctx *ctx, tg_gradcheck_fn f, void *user, int n_inputs, tg_tensor *const *inputs,
                                 const tg_gradcheck_opts *opts, tg_gradcheck_result *result);
/* The full Jacobians of f's output with respect to input `input`, as float64
 * arena tensors of shape (numel(out), numel(input)): J[j][i] = d out_j / d x_i.
 * *analytic from one backward per output element, *numeric from central
 * differences (steps h_i from opts as above). For small functions: at most
 * 2^22 entries. Returns false (and sets the error) on failure. */
TG_API bool tg_gradcheck_jacobian(tg_ctx *ctx, tg_gradcheck_fn f, void *user, int n_inputs, tg_tensor *const *inputs,
                                  int input, const tg_gradcheck_opts *opts, tg_tensor **analytic, tg_tensor **numeric);

/* Diagnosis of a failed check (check/diagnose.c): what is wrong with a
 * backward, read from the structure of D = Ja - Jn, the analytic minus the
 * numeric Jacobian of one input (both computed as tg_gradcheck_jacobian
 * does, so for small inputs: at most 2^22 entries):
 *   zero          Ja = 0: no gradient reaches the input
 *   sign          Ja = -Jn: a sign flip
 *   scale         Ja = c Jn with c uniform; c named when it is C, 1/C,
 *                 sqrt(C), 1/sqrt(C) (C the last dim), numel, 2, 1/2:
 *                 a sum for a mean; sqrt(C): attention's score scale
 *                 1/sqrt(D) left out; 1/sqrt(C): a root of a sum for a
 *                 root of a mean
 *   transpose     Ja = Jn^T
 * and for an input of the output's shape whose rows (last dim C) map to
 * the same rows (a normalization):
 *   identity      D = -c I in every row: a term c dy_i missing from dx_i;
 *                 c = 1: x used twice, one gradient overwritten instead of
 *                 accumulated
 *   mean-term     D constant along each row: a dropped (factor -1) or
 *                 wrong - mean(u) term, u = gamma * dy (LayerNorm's term
 *                 from the mean)
 *   projection    D = a xhat^T per row: the - xhat mean(xhat u) term
 *                 dropped (factor -1: r treated as a constant) or summed
 *                 instead of averaged (factor C - 1); or, for any input,
 *                 D = y_i b_i^T per row i of the output y (factor 0): a
 *                 softmax's row-sum term delta_i = sum_j y_ij dy_ij
 *                 dropped (attention's delta_i = dO_i . o_i)
 *   row-scale     Ja = s_n Jn row by row: a wrong power of a saved
 *                 statistic; s_n ~ (mean x^2)^p, p = 1: std for rstd
 *   statistic     the identity part of Jn scaled by rho_n, the projection
 *                 part by rho_n^3: the backward uses r rho_n for r; rho
 *                 1/sqrt(C) in every row: r from the sum of squares;
 *                 rho_n^2 = 1 + eps / mean(x^2)_n: a missing eps
 *   unstructured  none of these
 * Before any of these, the backward must be linear in the gradient it
 * receives, dy: D is read from unit dy, one output at a time, while a
 * check weights every output at once (r). With r as the check draws it
 * (opts.seed, or opts.r), backward(r) is compared with Ja^T r and
 * backward(2 r) with 2 backward(r):
 *   ignores-dy       backward(2 r) = backward(r): dy is ignored (dx = J^T 1,
 *                    the gradient of sum(y), whatever dy)
 *   nonlinear-in-dy  neither: dy used other than linearly (a term that does
 *                    not scale with dy, dy squared, state kept between calls)
 * and, not of one factor, a learner's mistakes:
 *   partial-sum   Ja = Jn on some outputs' rows, 0 on the others: a sum over
 *                 rows written with = (dgamma of one row)
 *   missing-gain  Ja = Jn / w_c output by output, w another input of C
 *                 values (factor: its index): gamma left out of u = gamma * dy
 *   swapped       Ja = the numeric Jacobian of another input of the same
 *                 size (factor: its index): dgamma and dbeta swapped
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
    TG_DIAG_UNSTRUCTURED,
    TG_DIAG_IGNORES_DY,
    TG_DIAG_NONLINEAR,
    TG_DIAG_PARTIAL,
    TG_DIAG_MISSING_GAIN,
    TG_DIAG_SWAPPED
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
TG_API bool tg_gradcheck_diagnose(tg_ctx *ctx, tg_gradcheck_fn f, void *user, int n_inputs, tg_tensor *const *inputs,
                                  int input, const tg_gradcheck_opts *opts, tg_gradcheck_diagnosis *d);
/* "projection", "scale", ... */
TG_API const char *tg_diagnosis_name(tg_diagnosis_kind kind);
/* Names of the enums, as the tool spells them: "full", "directional",
 * "jacobian", "fast"; "auto", "absolute", "element", "scaled"; "auto", "absolute",
 * "gradient" ("?" when out of range). */
TG_API const char *tg_gradcheck_mode_name(tg_gradcheck_mode mode);
TG_API const char *tg_gradcheck_step_name(tg_gradcheck_step step);
TG_API const char *tg_gradcheck_atol_scale_name(tg_gradcheck_atol_scale s);
/* "pass", "wrong", "inconclusive"; "none", "all-zero", "unresolved",
 * "empty", "error" ("?" when out of range). */
TG_API const char *tg_gradcheck_verdict_name(tg_gradcheck_verdict v);
TG_API const char *tg_gradcheck_reason_name(tg_gradcheck_reason r);

/* Output formats of tg_gradcheck_write. */
typedef enum tg_gradcheck_format {
    TG_GRADCHECK_TEXT = 0, /* a few readable lines */
    TG_GRADCHECK_JSON,     /* one object: the settings, then "inputs": one
                              object per input (NaN and infinities as null) */
    TG_GRADCHECK_CSV       /* one row per checked input, the columns of
                              TG_GRADCHECK_CSV_COLUMNS, no header */
} tg_gradcheck_format;

/* The columns of a CSV row, for a header line. */
#define TG_GRADCHECK_CSV_COLUMNS                                                                                   \
    "input,pass,n_checked,n_failed,max_abs_err,max_rel_err,worst_index,worst_output,worst_analytic,worst_numeric," \
    "worst_ratio,worst_step,worst_bound,step_min,step_max,scale,grad_scale,atol_used,max_excess,fail_excess,"      \
    "pred_max,pred_trunc,pred_round,"                                                                              \
    "mode,step,h,atol_scale,atol,rtol,dtype,seed,forward_diff,verdict,reason,n_wrong,n_resolved"

/* Writes r to f in `format`. names[k] names input k (NULL, or a NULL
 * entry: "k"); each CSV row starts with `prefix` (NULL: nothing), so a
 * program can put its own columns first. TG_OK, or TG_ERR_NULL (f or r
 * NULL), TG_ERR_VALUE (format), TG_ERR_IO (a write failed). */
TG_API tg_status tg_gradcheck_write(FILE *f, const tg_gradcheck_result *r, const char *const *names,
                                    tg_gradcheck_format format, const char *prefix);

/* The op registry (check/registry.c): one table with an entry per
 * differentiable op and layer -- its name, a builder of random valid inputs
 * and its forward -- so tests and the gradient-check tool check every op by
 * walking it. An op's index in the table is its id.
 *
 * Inputs are described by a spec string: the input shapes separated by
 * commas, each as sizes joined by 'x' ("()" for a 0-d tensor), then
 * optional ";key=value" arguments, e.g. "2x1x3,4x3" (add broadcasting from
 * both sides), "2x3x4;axis=1;keepdim=1" (sum_axis), "4x5;smoothing=0.1"
 * (cross_entropy). Each op documents its spec in spec_help and lists
 * built-in specs (its shape variants); its descriptor declares its
 * arguments with their defaults and the values its inputs are drawn from,
 * away from the op's kinks: relu/abs/leaky_relu inputs away from 0, max
 * without ties, log/sqrt/pow inputs positive, div denominators away from
 * 0. */

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
    /* "a", "b", "x", "weight"... (in the context's arena with the inputs) */
    const char *input_names[TG_GRADCHECK_MAX_INPUTS];
    uint32_t check; /* bit k: input k is differentiable */
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
    /* the length scales l_i of its inputs for relative steps (user: the
     * case), set by the builder; NULL: each input's root mean square */
    tg_gradcheck_scale_fn scale;
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

/* A registered op: its descriptor (tapegrad/op.h: its name, its
 * arguments with their defaults, the values a check draws for each input,
 * its own step and tolerances), and what the registry adds to check it. */
typedef struct tg_op_info {
    const tg_op_def *def;        /* the op; the registry's name is def->name */
    const char *summary;         /* what it computes, one line */
    const char *spec_help;       /* the spec it takes and its arguments */
    const char *const *variants; /* built-in specs, NULL-terminated */
    int n_variants;
    bool random; /* draws from the context's RNG (dropout) */
    /* Makes c->inputs (and c->index) from c's parsed spec and dtype with
     * the context's RNG; false and an error on a bad spec. */
    bool (*build)(tg_ctx *ctx, tg_op_case *c);
    /* The op applied to inputs (c->inputs or copies of them); user is the
     * tg_op_case. */
    tg_gradcheck_fn forward;
    tg_op_fn fn; /* what a generic forward calls */
    /* The regions of its inputs' domain a coverage check samples
     * (tg_registry_regions, below); NULL: the defaults. */
    const char *regions;
} tg_op_info;

/* Number of registered ops, the i-th (NULL when out of range), the one
 * named `name` (NULL when there is none), and op's index (-1 when op is
 * not an entry of the registry). */
TG_API int tg_registry_count(void);
TG_API const tg_op_info *tg_registry_get(int i);
TG_API const tg_op_info *tg_registry_find(const char *name);
TG_API int tg_registry_index(const tg_op_info *op);

/* Adds a user's op (defined with tapegrad/op.h, say) after the built-in
 * ones, so tg_registry_find, tg_registry_check and tapegrad-gradcheck see
 * it. `op` and its descriptor must outlive their use (static tables). It
 * needs a descriptor with a name not yet registered, build, forward and at
 * least one variant. Not thread-safe:
 * add ops before checking. Errors: TG_ERR_NULL, TG_ERR_VALUE (name taken,
 * more than TG_REGISTRY_MAX_ADDED). */
#define TG_REGISTRY_MAX_ADDED 64
TG_API bool tg_registry_add(tg_ctx *ctx, const tg_op_info *op);
/* A builder for a user's op: input k has the spec's k-th shape, and is
 * named and drawn as item k of its descriptor's inputs text says
 * ("x=-2:2,gamma=0.5:1.5": tg_op_def in tapegrad/op.h). A spec with
 * another number of shapes, or a malformed inputs text, is TG_ERR_FORMAT
 * naming the op. */
TG_API bool tg_registry_build_ranges(tg_ctx *ctx, tg_op_case *c);

/* A gradcheck plugin: a shared object a user builds against the installed
 * package, that `tapegrad-gradcheck --plugin ./libmyop.so` loads to check
 * the user's ops without rebuilding tapegrad (docs/gradcheck-guide.md,
 * checking your own op). It defines its ops as tg_op_info entries and
 * exports them with
 *   TG_GRADCHECK_PLUGIN("myops", my_ops, 2)
 * which defines the function the tool looks up by name
 * (TG_GRADCHECK_PLUGIN_SYMBOL). An op's rules -- its double backward, its
 * tangent rule (for `--modes fwd` and `--adjoint`) -- are in its
 * tg_op_def, which its records point to, so they reach the tool although
 * the plugin links its own copy of tapegrad. `abi` and `op_info_size` let
 * the tool refuse a plugin built against another version of this header. */
#define TG_GRADCHECK_PLUGIN_ABI 3
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
TG_API bool tg_registry_build(tg_ctx *ctx, const tg_op_info *op, const char *spec, tg_dtype dtype, tg_op_case *c);
/* The value of argument `key` of a built case, as text (NULL: none). */
TG_API const char *tg_registry_arg(const tg_op_case *c, const char *key);
/* The op's forward on c's inputs. */
TG_API tg_tensor *tg_registry_forward(tg_ctx *ctx, tg_op_case *c);
/* The options a check of op in dtype runs with: opts (NULL: the defaults),
 * where it leaves h, atol or rtol 0 the op's own for dtype, else the
 * dtype's default; every one resolved, and no_defaults set so they are used
 * as they are (a caller may then set a tolerance to 0). */
TG_API tg_gradcheck_opts tg_registry_opts(const tg_op_info *op, tg_dtype dtype, const tg_gradcheck_opts *opts);
/* Builds the op's variant-th built-in spec (0..n_variants-1), or `spec`,
 * and gradchecks it with tg_registry_opts(op, dtype, opts) over the
 * differentiable inputs (intersected with opts->inputs when set), with the
 * case's length scales unless opts gives its own. As tg_gradcheck. */
TG_API bool tg_registry_check(tg_ctx *ctx, const tg_op_info *op, int variant, tg_dtype dtype,
                              const tg_gradcheck_opts *opts, tg_gradcheck_result *result);
TG_API bool tg_registry_check_spec(tg_ctx *ctx, const tg_op_info *op, const char *spec, tg_dtype dtype,
                                   const tg_gradcheck_opts *opts, tg_gradcheck_result *result);

/* Second order (check/gradcheck_order2.c): gradgradcheck. For f, a fixed
 * random weighting u of its output (from opts.seed) and the checked inputs
 * x, the first gradient g(x) = d <u, f(x)> / dx (flattened, joined) is
 * checked by tg_gradcheck as a function of x: its backward -- the double
 * backward, tg_grad with create_graph -- against central differences of
 * plain backwards. opts and result as tg_gradcheck's (opts.r is not used:
 * the check draws its own weighting of g). An op without a double-backward
 * rule fails with its error ("'foo' cannot be differentiated twice"). */
TG_API bool tg_gradgradcheck(tg_ctx *ctx, tg_gradcheck_fn f, void *user, int n_inputs, tg_tensor *const *inputs,
                             const tg_gradcheck_opts *opts, tg_gradcheck_result *result);
/* Forward over reverse, on the same g: tg_gradcheck_fwd of g -- tg_jvp
 * through g's recorded double backward, the Hessian-vector products H v,
 * against differences of g along v -- and tg_gradcheck_adjoint of g --
 * <w, H v> (forward over reverse) against <H^T w, v> (reverse over
 * reverse), no step. Each record of the double backward needs a tangent
 * rule (every built-in op's has one); options and result as
 * tg_gradcheck_fwd and tg_gradcheck_adjoint. */
TG_API bool tg_gradgradcheck_fwd(tg_ctx *ctx, tg_gradcheck_fn f, void *user, int n_inputs, tg_tensor *const *inputs,
                                 const tg_gradcheck_opts *opts, tg_gradcheck_result *result);
TG_API bool tg_gradgradcheck_adjoint(tg_ctx *ctx, tg_gradcheck_fn f, void *user, int n_inputs, tg_tensor *const *inputs,
                                     const tg_gradcheck_opts *opts, tg_gradcheck_result *result);
/* tg_registry_check_spec at order 2: the op's spec (NULL: its first
 * variant) built in dtype and gradgradchecked with tg_registry_opts. */
TG_API bool tg_registry_check_order2(tg_ctx *ctx, const tg_op_info *op, const char *spec, tg_dtype dtype,
                                     const tg_gradcheck_opts *opts, tg_gradcheck_result *result);

/* Coverage (check/coverage.c): which values a check's inputs held, and
 * inputs that span an op's interesting regions. A backward wrong only in
 * part of the domain (softplus above x = 1.9) is caught only by a check
 * whose inputs go there; a report that states what it saw says what it
 * did not.
 *
 * An op's entry names its regions in `regions`, one item per input,
 * separated by ';': "NAME: WORD WORD..." ("*: ..." for inputs not named):
 *   real | positive | nonzero   the domain (default real): log, sqrt, pow
 *                               positive, a divisor nonzero
 *   kink=V                      a point where f or its formula changes
 *                               (relu at 0, softplus's branch at 0 and the
 *                               linear branch PyTorch takes above 20); up
 *                               to TG_MAX_KINKS
 *   mag=LO:HI                   the magnitudes spanned (0 < LO < HI;
 *                               default 1e-3:1e2)
 *   distinct                    values kept apart by twice the gap (a max:
 *                               a tie is a kink)
 * The regions of an input, in order: per decade [10^d, 10^(d+1)) of
 * [LO, HI) the positive values, then (unless positive) the negative ones;
 * (real only) |x| < LO; per kink k, [k - w, k) and [k, k + w), w = 0.1
 * max(1, |k|). A value may lie in several. */
#define TG_MAX_REGIONS 40
#define TG_MAX_KINKS 4
typedef struct tg_region {
    char name[32]; /* "[1,10)", "(-10,-1]", "(-0.001,0.001)", "near 20-" */
    double lo, hi; /* the values lo <= x < hi */
    int kink;      /* near kink `kink` (below, above); -1: a magnitude */
} tg_region;
typedef struct tg_regions {
    int n;
    tg_region r[TG_MAX_REGIONS];
    int n_kinks;
    double kinks[TG_MAX_KINKS];
    double mag_lo, mag_hi;
    bool positive, nonzero, distinct;
} tg_regions;
/* The regions of input k of a built case, from its op's `regions` text
 * (the defaults when NULL or when the text does not name the input).
 * False and TG_ERR_FORMAT naming the op for a malformed text. */
TG_API bool tg_registry_regions(tg_ctx *ctx, const tg_op_case *c, int k, tg_regions *out);

/* What one input held: min, max, the elements below, at and above 0, the
 * decades of |x| (floor(log10 |x|) over the nonzero elements; decade_min >
 * decade_max when there are none) and bit j of `seen` for each region j
 * of `regions` some element lies in. */
typedef struct tg_coverage {
    int64_t numel, n_neg, n_zero, n_pos;
    double min, max;
    int decade_min, decade_max;
    uint64_t seen;
} tg_coverage;
/* The coverage of x over regions (NULL: none) into *cov. False, with an
 * error naming the function, when x or cov is NULL or x is not a tensor of
 * this step of ctx. */
TG_API bool tg_coverage_of(tg_ctx *ctx, const tg_tensor *x, const tg_regions *regions, tg_coverage *cov);
/* acc joined with c (the union: over several seeds); acc with numel 0 is
 * empty. False (acc unchanged) when either is NULL. */
TG_API bool tg_coverage_join(tg_coverage *acc, const tg_coverage *c);

/* Redraws every differentiable input of c across its regions, stratified:
 * element i of an input of n elements takes region (stratum n + i) mod R
 * (R regions; positions shuffled by the context's RNG), a value drawn in
 * it (log-uniform in a decade). So strata 0, 1, ... (a check's seeds)
 * visit every region in turn: ceil(R / n) of them see all. No value lies
 * within `gap` of a kink -- a central difference there straddles it and
 * measures the average of the one-sided slopes --, gap = max(gap_rel l,
 * gap_abs), l the input's root mean square (the default length scale of a
 * relative step: gap_rel = 4 h keeps 4 steps away); a region a value
 * cannot reach so is left unseen (the coverage says so). */
TG_API bool tg_registry_cover(tg_ctx *ctx, tg_op_case *c, uint64_t stratum, double gap_rel, double gap_abs);

#ifdef __cplusplus
}
#endif

#endif /* TAPEGRAD_CHECK_H */

/* Gradient checking: an op's hand-written backward against central finite
 * differences.
 *
 * For f(x_1..x_n) with output y and a fixed random weighting r of y,
 *     L(x) = sum_j r_j y_j(x)
 * the backward seeded with r gives a_i = dL/dx_i = sum_j r_j dy_j/dx_i (one
 * backward, every input at once), and central differences give
 *     n_i = (L(x + h e_i) - L(x - h e_i)) / 2h
 * with truncation error (h^2 / 6) L''' and round-off ~ eps |L| / h, smallest
 * near h ~ eps^(1/3) (1e-5 in float64). Element i passes when
 *     |a_i - n_i| <= atol + rtol |n_i|            (PyTorch's gradcheck rule)
 * The weighting r makes one scalar out of any output so one backward checks
 * every input element; a random r (not all ones) makes cancellations such as
 * sum(softmax(x)) = 1 unable to hide a wrong gradient.
 *
 * Directional mode checks one random unit direction v per input instead:
 *     dL/dx . v   vs   (L(x + h v) - L(x - h v)) / 2h
 * two forwards per input whatever its size.
 *
 * Everything the check does is undone: it runs on copies of the inputs, on a
 * private tape (swapped in for the caller's), restores grad mode, and runs
 * every evaluation from the same RNG state (dropout keeps its mask). The
 * arena memory of each difference evaluation is handed back right after it
 * (a mark and rollback of the bump pointer), so the check's footprint does
 * not grow with the number of evaluations. */
#include "autograd/tape.h"
#include "check/registry.h"

#include <float.h>
#include <math.h>
#include <string.h>

/* ---- the checker's own random numbers -------------------------------------
 * r and v come from Philox blocks keyed by opts.seed, never from the
 * context's stream, so checking leaves the function's randomness alone.
 * Stream 0 is r; stream 1 + k is the direction of input k. */

static void gc_block(uint64_t seed, uint64_t stream, uint64_t i, uint32_t out[4]) {
    uint32_t ctr[4] = {(uint32_t)i, (uint32_t)(i >> 32), (uint32_t)stream, (uint32_t)(stream >> 32)};
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    tg_philox4x32_10(out, ctr, key);
}

/* Uniform in [-1, 1). */
static double gc_uniform_pm1(uint64_t seed, uint64_t stream, uint64_t i) {
    uint32_t x[4];
    gc_block(seed, stream, i, x);
    return 2.0 * tg_u01_f64(x[0], x[1]) - 1.0;
}

static double gc_normal(uint64_t seed, uint64_t stream, uint64_t i) {
    uint32_t x[4];
    gc_block(seed, stream, i, x);
    return tg_normal_from_block(x);
}

/* ---- arena mark and rollback ----------------------------------------------
 * The arena only bumps forward: chunks after the current one are unused.
 * Rolling back to a mark resets the current chunk's `used` and empties the
 * chunks after it; nothing allocated after the mark may be used again. */

typedef struct gc_mark {
    tg_chunk *cur;
    size_t used;
    size_t arena_used;
} gc_mark;

static gc_mark gc_arena_mark(const tg_ctx *ctx) {
    gc_mark m = {ctx->cur, ctx->cur ? ctx->cur->used : 0, ctx->arena_used};
    return m;
}

static void gc_arena_rollback(tg_ctx *ctx, gc_mark m) {
    for (tg_chunk *c = m.cur ? m.cur->next : ctx->chunks; c; c = c->next) c->used = 0;
    if (m.cur) m.cur->used = m.used;
    ctx->cur = m.cur ? m.cur : ctx->chunks;
    ctx->arena_used = m.arena_used;
}

/* ---- options ---------------------------------------------------------------
 * h, atol and rtol left 0 follow the dtype of the checked inputs (float32
 * when any of them is float32): the float64 values are PyTorch's; float32
 * needs a step a thousand times larger (its round-off, eps32 |L| / h, would
 * swamp the quotient at h = 1e-6) and tolerances that sit above the error
 * left at that step (docs/gradcheck.md measures both). */

static const tg_gradcheck_tol GC_F64 = {1e-6, 1e-5, 1e-3};
static const tg_gradcheck_tol GC_F32 = {1e-3, 1e-3, 1e-2};

tg_gradcheck_tol tg_gradcheck_dtype_tol(tg_dtype dtype) { return dtype == TG_F32 ? GC_F32 : GC_F64; }

tg_gradcheck_opts tg_gradcheck_defaults(void) {
    tg_gradcheck_opts o = {0};
    o.mode = TG_GRADCHECK_FULL;
    return o;
}

/* Resolved settings of one check. */
typedef struct gc_config {
    double h, atol, rtol;
    tg_gradcheck_mode mode;
    uint64_t seed;
    uint32_t mask; /* inputs to check */
    bool forward_diff;
} gc_config;

/* Fills cfg from opts (NULL: defaults) for inputs[0..n-1] with `mask`
 * (0: all) as the inputs to check; h, atol, rtol left 0 take the defaults
 * of the checked inputs' dtype (unless opts->no_defaults). */
static bool gc_configure(tg_ctx *ctx, const char *fn, const tg_gradcheck_opts *opts, int n, tg_tensor *const *inputs,
                         uint32_t mask, gc_config *cfg) {
    tg_gradcheck_opts o = opts ? *opts : tg_gradcheck_defaults();
    if (mask == 0) mask = n >= 32 ? 0xffffffffu : ((uint32_t)1 << n) - 1;
    if (n < 32 && (mask >> n) != 0) {
        tg_error(ctx, TG_ERR_VALUE, fn, "inputs mask 0x%x names inputs beyond the %d given", (unsigned)mask, n);
        return false;
    }
    if (o.mode != TG_GRADCHECK_FULL && o.mode != TG_GRADCHECK_DIRECTIONAL) {
        tg_error(ctx, TG_ERR_VALUE, fn, "unknown mode %d (TG_GRADCHECK_FULL or TG_GRADCHECK_DIRECTIONAL)", (int)o.mode);
        return false;
    }
    if (!(o.h >= 0) || !isfinite(o.h) || !(o.atol >= 0) || !isfinite(o.atol) || !(o.rtol >= 0) || !isfinite(o.rtol)) {
        tg_error(ctx, TG_ERR_VALUE, fn, "h=%g, atol=%g, rtol=%g: each must be finite and >= 0 (0 for the default)", o.h,
                 o.atol, o.rtol);
        return false;
    }
    if (o.no_defaults && o.h == 0) {
        tg_error(ctx, TG_ERR_VALUE, fn, "h=0 with no_defaults: the step must be > 0");
        return false;
    }
    bool f32 = false;
    for (int k = 0; k < n; k++) {
        if (!(mask >> k & 1u) || inputs[k]->dtype != TG_F32) continue;
        f32 = true;
        if (!o.allow_float32) {
            double h = o.h > 0 ? o.h : GC_F64.h;
            tg_error(ctx, TG_ERR_DTYPE, fn,
                     "input %d is float32: its round-off (~1e-7 relative) swamps the difference quotient "
                     "(with h=%g the error of f(x+-h) is ~1e-7*|f|, divided by 2h it is ~%.2g*|f|); check in "
                     "float64, or set allow_float32 (h, atol, rtol left 0 then follow float32: %g, %g, %g)",
                     k, h, 1e-7 / (2 * h), GC_F32.h, GC_F32.atol, GC_F32.rtol);
            return false;
        }
    }
    tg_gradcheck_tol def = f32 ? GC_F32 : GC_F64;
    cfg->h = o.h > 0 || o.no_defaults ? o.h : def.h;
    cfg->atol = o.atol > 0 || o.no_defaults ? o.atol : def.atol;
    cfg->rtol = o.rtol > 0 || o.no_defaults ? o.rtol : def.rtol;
    cfg->mode = o.mode;
    cfg->seed = o.seed;
    cfg->mask = mask;
    cfg->forward_diff = o.forward_diff;
    return true;
}

/* ---- a checking session ---------------------------------------------------- */

/* A check records on a private tape (the caller's is stashed meanwhile,
 * tg_tape_stash) and starts every evaluation from the same RNG state. */
typedef struct gc_session {
    tg_ctx *ctx;
    const char *fn;
    tg_gradcheck_fn f;
    void *user;
    int n;
    tg_tensor *x[TG_GRADCHECK_MAX_INPUTS]; /* copies of the inputs */
    const tg_tensor *out0;                 /* the first output: its shape */
    int64_t n_evals;
    /* the caller's state, restored at the end */
    tg_tape tape;                      /* its tape and grad mode */
    uint64_t rng_seed, rng_offset;     /* every evaluation starts here */
    uint64_t after_seed, after_offset; /* where one evaluation ends */
    bool have_after;
} gc_session;

/* Swaps in an empty private tape and notes grad mode and the RNG state. */
static void gc_begin(gc_session *s, tg_ctx *ctx, const char *fn, tg_gradcheck_fn f, void *user, int n) {
    memset(s, 0, sizeof *s);
    s->ctx = ctx;
    s->fn = fn;
    s->f = f;
    s->user = user;
    s->n = n;
    tg_tape_stash(ctx, &s->tape);
    tg_rng_state(ctx, &s->rng_seed, &s->rng_offset);
}

/* Frees the private tape and gives the caller's back; the RNG is left where
 * one evaluation of f leaves it. */
static void gc_end(gc_session *s) {
    tg_ctx *ctx = s->ctx;
    tg_tape_restore(ctx, &s->tape);
    if (s->have_after) tg_rng_set_state(ctx, s->after_seed, s->after_offset);
    else tg_rng_set_state(ctx, s->rng_seed, s->rng_offset);
}

/* Copies the inputs; the ones in `mask` become leaves that require grad. */
static bool gc_copy_inputs(gc_session *s, tg_tensor *const *inputs, uint32_t mask) {
    for (int k = 0; k < s->n; k++) {
        s->x[k] = tg_copy(s->ctx, inputs[k]);
        if (!s->x[k]) return false;
        if ((mask >> k & 1u) && !tg_requires_grad(s->ctx, s->x[k])) return false;
    }
    return true;
}

/* One evaluation of f from the saved RNG state, recording or not. */
static tg_tensor *gc_eval(gc_session *s, bool record) {
    tg_ctx *ctx = s->ctx;
    char s1[TG_SHAPE_STR], s2[TG_SHAPE_STR];
    tg_rng_set_state(ctx, s->rng_seed, s->rng_offset);
    tg_set_grad_enabled(ctx, record);
    tg_tensor *y = s->f(ctx, s->x, s->user);
    s->n_evals++;
    if (!tg_ok(ctx)) return NULL;
    if (!y) {
        tg_error(ctx, TG_ERR_STATE, s->fn, "the checked function returned NULL without setting an error");
        return NULL;
    }
    if (!s->have_after) {
        tg_rng_state(ctx, &s->after_seed, &s->after_offset);
        s->have_after = true;
    }
    if (s->out0 && !tg_same_shape(y, s->out0)) {
        tg_error(ctx, TG_ERR_STATE, s->fn,
                 "the checked function's output changed shape from %s to %s between "
                 "evaluations",
                 tg_shape_of(s1, s->out0), tg_shape_of(s2, y));
        return NULL;
    }
    if (s->out0 && y->dtype != s->out0->dtype) {
        tg_error(ctx, TG_ERR_STATE, s->fn, "the checked function's output changed dtype between evaluations");
        return NULL;
    }
    return y;
}

/* L = sum_j r_j y_j, Neumaier-compensated so the sum adds no round-off of
 * its own to the difference L(x+h) - L(x-h). */
static double gc_weighted_sum(const tg_tensor *r, const tg_tensor *y) {
    double sum = 0.0, comp = 0.0;
    for (int64_t j = 0; j < y->numel; j++) {
        double t = tg_load(r, j) * tg_load(y, j);
        double s = sum + t;
        comp += fabs(sum) >= fabs(t) ? (sum - s) + t : (t - s) + sum;
        sum = s;
    }
    return sum + comp;
}

/* L at the current (perturbed) inputs: a no-grad evaluation whose arena
 * memory is handed back at once. */
static bool gc_loss(gc_session *s, const tg_tensor *r, double *L) {
    gc_mark m = gc_arena_mark(s->ctx);
    tg_tensor *y = gc_eval(s, false);
    if (!y) return false;
    *L = gc_weighted_sum(r, y);
    gc_arena_rollback(s->ctx, m);
    return true;
}

/* ---- comparison ------------------------------------------------------------ */

static double gc_max(double old, double v) { return isnan(old) ? old : (isnan(v) || v > old) ? v : old; }

/* Records one comparison of analytic a with numeric n for input k, element
 * i (-1: a direction). */
static void gc_compare(tg_gradcheck_result *R, int k, int64_t i, double a, double n) {
    tg_gradcheck_input *in = &R->input[k];
    double err = fabs(a - n);
    double tol = R->atol + R->rtol * fabs(n);
    double rel = err / fmax(fabs(n), fmax(R->atol, DBL_MIN));
    double ratio = tol > 0 ? err / tol : (err == 0 ? 0.0 : INFINITY);
    if (isnan(ratio)) ratio = INFINITY; /* NaN anywhere: the worst of all */
    bool ok = err <= tol;               /* false for NaN */
    in->n_checked++;
    if (!ok) in->n_failed++;
    in->max_abs_err = gc_max(in->max_abs_err, err);
    in->max_rel_err = gc_max(in->max_rel_err, rel);
    if (in->n_checked == 1 || ratio > in->worst_ratio) {
        in->worst_ratio = ratio;
        in->worst_index = i;
        in->worst_analytic = a;
        in->worst_numeric = n;
    }
}

/* Totals over inputs and the overall worst element. */
static void gc_summarize(tg_gradcheck_result *R) {
    R->worst_input = -1;
    R->worst_index = -1;
    for (int k = 0; k < R->n_inputs; k++) {
        tg_gradcheck_input *in = &R->input[k];
        if (!in->checked) continue;
        in->pass = in->n_failed == 0;
        R->n_checked += in->n_checked;
        R->n_failed += in->n_failed;
        R->max_abs_err = gc_max(R->max_abs_err, in->max_abs_err);
        R->max_rel_err = gc_max(R->max_rel_err, in->max_rel_err);
        if (in->n_checked && (R->worst_input < 0 || in->worst_ratio > R->worst_ratio)) {
            R->worst_input = k;
            R->worst_index = in->worst_index;
            R->worst_analytic = in->worst_analytic;
            R->worst_numeric = in->worst_numeric;
            R->worst_ratio = in->worst_ratio;
        }
    }
    R->pass = R->n_failed == 0;
}

/* ---- the two modes ------------------------------------------------------- */

/* Every element of input k: a_i from the backward, n_i from two forwards
 * (one with forward differences, against L0 = L(x)). */
static bool gc_check_full(gc_session *s, tg_gradcheck_result *R, int k, const tg_tensor *r, const double *L0) {
    tg_tensor *x = s->x[k];
    const tg_tensor *g = x->grad;
    for (int64_t i = 0; i < x->numel; i++) {
        double orig = tg_load(x, i), Lp, Lm = L0 ? *L0 : 0.0;
        tg_store(x, i, orig + R->h);
        double xp = tg_load(x, i), xm = orig;
        if (!gc_loss(s, r, &Lp)) return false;
        if (!L0) {
            tg_store(x, i, orig - R->h);
            xm = tg_load(x, i);
            if (!gc_loss(s, r, &Lm)) return false;
        }
        tg_store(x, i, orig);
        /* divide by the step actually stored (rounded to the dtype) */
        gc_compare(R, k, i, tg_load(g, i), (Lp - Lm) / (xp - xm));
    }
    return true;
}

/* One random unit direction v for input k:
 *   analytic  sum_i g_i (x+_i - x-_i) / 2h,  numeric (L(x+) - L(x-)) / 2h
 * with x+- = x +- h v as stored (rounded), so both use the same step.
 * Forward differences (L0 = L(x) given) use x and L0 in place of x- and
 * L(x-), and h in place of 2h. */
static bool gc_check_directional(gc_session *s, tg_gradcheck_result *R, int k, const tg_tensor *r, uint64_t seed,
                                 const double *L0) {
    tg_ctx *ctx = s->ctx;
    tg_tensor *x = s->x[k];
    const tg_tensor *g = x->grad;
    int64_t N = x->numel;
    if (N == 0) return true;
    tg_tensor *orig = tg_copy(ctx, x);
    double *v = tg_arena_alloc_fn(ctx, s->fn, (size_t)N * sizeof *v);
    double *dp = tg_arena_alloc_fn(ctx, s->fn, (size_t)N * sizeof *dp);
    if (!orig || !v || !dp) return false;
    double norm = 0.0;
    for (int64_t i = 0; i < N; i++) {
        v[i] = gc_normal(seed, 1 + (uint64_t)k, (uint64_t)i);
        norm += v[i] * v[i];
    }
    norm = sqrt(norm);
    for (int64_t i = 0; i < N; i++) v[i] = norm > 0 ? v[i] / norm : (i == 0);

    double Lp, Lm = L0 ? *L0 : 0.0;
    for (int64_t i = 0; i < N; i++) {
        tg_store(x, i, tg_load(orig, i) + R->h * v[i]);
        dp[i] = tg_load(x, i);
    }
    if (!gc_loss(s, r, &Lp)) return false;
    for (int64_t i = 0; i < N; i++) {
        if (!L0) tg_store(x, i, tg_load(orig, i) - R->h * v[i]);
        else tg_store(x, i, tg_load(orig, i));
        dp[i] -= tg_load(x, i); /* x+_i - x-_i (or - x_i) */
    }
    if (!L0 && !gc_loss(s, r, &Lm)) return false;
    memcpy(x->data, orig->data, (size_t)N * tg_esize(x->dtype));

    double ana = 0.0, step = L0 ? R->h : 2 * R->h;
    for (int64_t i = 0; i < N; i++) ana += tg_load(g, i) * dp[i];
    gc_compare(R, k, -1, ana / step, (Lp - Lm) / step);
    return true;
}

/* ---- public entry points --------------------------------------------------- */

static bool gc_check_args(tg_ctx *ctx, const char *fn, tg_gradcheck_fn f, int n_inputs, tg_tensor *const *inputs) {
    if (!f || !inputs) {
        tg_error(ctx, TG_ERR_NULL, fn, "argument '%s' is NULL", f ? "inputs" : "f");
        return false;
    }
    if (n_inputs < 1 || n_inputs > TG_GRADCHECK_MAX_INPUTS) {
        tg_error(ctx, TG_ERR_VALUE, fn, "n_inputs %d is outside 1..%d", n_inputs, TG_GRADCHECK_MAX_INPUTS);
        return false;
    }
    for (int k = 0; k < n_inputs; k++) {
        if (!inputs[k]) {
            tg_error(ctx, TG_ERR_NULL, fn, "argument 'inputs[%d]' is NULL", k);
            return false;
        }
    }
    return true;
}

bool tg_gradcheck_start(tg_ctx *ctx, const char *fn, tg_gradcheck_result *result) {
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
    return true;
}

bool tg_gradcheck(tg_ctx *ctx, tg_gradcheck_fn f, void *user, int n_inputs, tg_tensor *const *inputs,
                  const tg_gradcheck_opts *opts, tg_gradcheck_result *result) {
    if (!tg_gradcheck_start(ctx, __func__, result) || !gc_check_args(ctx, __func__, f, n_inputs, inputs)) return false;
    gc_config cfg;
    if (!gc_configure(ctx, __func__, opts, n_inputs, inputs, opts ? opts->inputs : 0, &cfg)) return false;

    tg_gradcheck_result *R = result;
    R->h = cfg.h;
    R->atol = cfg.atol;
    R->rtol = cfg.rtol;
    R->mode = cfg.mode;
    R->forward_diff = cfg.forward_diff;
    R->n_inputs = n_inputs;
    for (int k = 0; k < n_inputs; k++) {
        R->input[k].checked = cfg.mask >> k & 1u;
        R->input[k].worst_index = -1;
    }

    gc_session s;
    gc_begin(&s, ctx, __func__, f, user, n_inputs);
    bool ok = gc_copy_inputs(&s, inputs, cfg.mask);

    /* The analytic side: one recorded forward, one backward seeded with r. */
    tg_tensor *y = ok ? gc_eval(&s, true) : NULL;
    tg_tensor *r = y ? tg_new_like(ctx, __func__, y) : NULL;
    ok = r != NULL;
    if (ok) {
        s.out0 = y;
        for (int64_t j = 0; j < r->numel; j++) tg_store(r, j, gc_uniform_pm1(cfg.seed, 0, (uint64_t)j));
        /* An output that does not require grad does not depend on any
         * checked input: every analytic derivative is 0 (the zeroed grads). */
        if (y->requires_grad) tg_backward_ex(ctx, y, r, false);
        tg_set_grad_enabled(ctx, false);
        ok = tg_ok(ctx);
    }
    /* forward differences: L(x) once, from a no-grad evaluation like the rest */
    double L0 = 0.0;
    if (ok && cfg.forward_diff) ok = gc_loss(&s, r, &L0);
    const double *pL0 = cfg.forward_diff ? &L0 : NULL;
    for (int k = 0; ok && k < n_inputs; k++) {
        if (!R->input[k].checked) continue;
        ok = cfg.mode == TG_GRADCHECK_FULL ? gc_check_full(&s, R, k, r, pL0)
                                           : gc_check_directional(&s, R, k, r, cfg.seed, pL0);
    }
    R->n_evals = s.n_evals;
    gc_end(&s);
    gc_summarize(R);
    if (!ok || !tg_ok(ctx)) R->pass = false;
    return R->pass;
}

/* Jacobians are capped so a slip (a big input) fails fast, not slowly. */
#define GC_JACOBIAN_MAX ((int64_t)1 << 22)

bool tg_gradcheck_jacobian(tg_ctx *ctx, tg_gradcheck_fn f, void *user, int n_inputs, tg_tensor *const *inputs,
                           int input, const tg_gradcheck_opts *opts, tg_tensor **analytic, tg_tensor **numeric) {
    if (analytic) *analytic = NULL;
    if (numeric) *numeric = NULL;
    if (!tg_live(ctx)) return false;
    if (!analytic || !numeric) {
        tg_error(ctx, TG_ERR_NULL, __func__, "argument '%s' is NULL", analytic ? "numeric" : "analytic");
        return false;
    }
    if (!gc_check_args(ctx, __func__, f, n_inputs, inputs)) return false;
    if (input < 0 || input >= n_inputs) {
        tg_error(ctx, TG_ERR_INDEX, __func__, "input %d is outside 0..%d", input, n_inputs - 1);
        return false;
    }
    gc_config cfg;
    if (!gc_configure(ctx, __func__, opts, n_inputs, inputs, (uint32_t)1 << input, &cfg)) return false;

    gc_session s;
    gc_begin(&s, ctx, __func__, f, user, n_inputs);
    tg_tensor *Ja = NULL, *Jn = NULL;
    bool ok = gc_copy_inputs(&s, inputs, cfg.mask);
    tg_tensor *y = ok ? gc_eval(&s, true) : NULL;
    tg_tensor *x = s.x[input];
    ok = y != NULL;
    if (ok) {
        s.out0 = y;
        int64_t M = y->numel, N = x->numel;
        if (N != 0 && M > GC_JACOBIAN_MAX / N) {
            char s1[TG_SHAPE_STR], s2[TG_SHAPE_STR];
            tg_error(ctx, TG_ERR_VALUE, __func__,
                     "the Jacobian of an output of shape %s by an input of shape %s "
                     "has over %lld entries: this mode is for small functions",
                     tg_shape_of(s1, y), tg_shape_of(s2, x), (long long)GC_JACOBIAN_MAX);
            ok = false;
        } else {
            int64_t shape[2] = {M, N};
            Ja = tg_zeros(ctx, TG_F64, 2, shape);
            Jn = tg_zeros(ctx, TG_F64, 2, shape);
            ok = Ja && Jn;
        }
    }
    /* Analytic: row j is the gradient of y_j, a backward seeded with e_j on
     * the kept tape. */
    if (ok && y->requires_grad) {
        double *ja = Ja->data;
        tg_tensor *e = tg_zeros(ctx, y->dtype, y->ndim, y->shape);
        ok = e != NULL;
        for (int64_t j = 0; ok && j < y->numel; j++) {
            gc_mark m = gc_arena_mark(ctx);
            tg_zero_grad(ctx, x);
            tg_store(e, j, 1.0);
            tg_backward_ex(ctx, y, e, true);
            tg_store(e, j, 0.0);
            ok = tg_ok(ctx);
            for (int64_t i = 0; ok && i < x->numel; i++) ja[j * x->numel + i] = tg_load(x->grad, i);
            gc_arena_rollback(ctx, m);
        }
    }
    tg_set_grad_enabled(ctx, false);
    /* Numeric: column i is (y(x + h e_i) - y(x - h e_i)) / (x+_i - x-_i), or
     * (y(x + h e_i) - y(x)) / (x+_i - x_i) with forward differences. */
    if (ok) {
        double *jn = Jn->data;
        int64_t M = y->numel, N = x->numel;
        for (int64_t i = 0; ok && i < N; i++) {
            double orig = tg_load(x, i);
            tg_store(x, i, orig + cfg.h);
            double xp = tg_load(x, i);
            gc_mark m = gc_arena_mark(ctx);
            tg_tensor *yp = gc_eval(&s, false);
            ok = yp != NULL;
            for (int64_t j = 0; ok && j < M; j++) jn[j * N + i] = tg_load(yp, j);
            gc_arena_rollback(ctx, m);
            /* forward differences: against the first (recorded) evaluation */
            tg_store(x, i, cfg.forward_diff ? orig : orig - cfg.h);
            double xm = tg_load(x, i);
            tg_tensor *ym = !ok ? NULL : cfg.forward_diff ? y : gc_eval(&s, false);
            ok = ym != NULL;
            for (int64_t j = 0; ok && j < M; j++) jn[j * N + i] = (jn[j * N + i] - tg_load(ym, j)) / (xp - xm);
            gc_arena_rollback(ctx, m);
            tg_store(x, i, orig);
        }
    }
    gc_end(&s);
    if (!ok || !tg_ok(ctx)) return false;
    *analytic = Ja;
    *numeric = Jn;
    return true;
}

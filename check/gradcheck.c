/* Gradient checking: an op's hand-written backward against finite
 * differences.
 *
 * For f(x_1..x_n) with output y and a fixed weighting r of y,
 *     L(x) = sum_j r_j y_j(x)
 * the backward seeded with r gives a_i = dL/dx_i = sum_j r_j dy_j/dx_i (one
 * backward, every input at once), and central differences give
 *     n_i = (L(x + h_i e_i) - L(x - h_i e_i)) / 2h_i
 * with truncation error (h_i^2 / 6) L''' and round-off ~ eps |L| / h_i,
 * smallest near h_i ~ eps^(1/3) l_i, l_i the length over which L's slope
 * changes. Element i passes when
 *     |a_i - n_i| <= atol + rtol |n_i|            (PyTorch's gradcheck rule)
 * with atol absolute, or scaled by the gradient's root mean square G_k. The
 * weighting r makes one scalar out of any output so one backward checks
 * every input element; a random r (not all ones) makes cancellations such as
 * sum(softmax(x)) = 1 unable to hide a wrong gradient.
 *
 * Directional mode checks one direction v per input instead:
 *     dL/dx . v   vs   (L(x + h v) - L(x - h v)) / 2h
 * two forwards per input whatever its size. Fast mode moves every input at
 * once along one direction u over all of them: one comparison, two
 * forwards in all (PyTorch's fast mode draws one u per input, as directional
 * mode does). Jacobian mode compares every
 * entry d y_j / d x_i: rows from one backward per output element, columns
 * from two forwards per input element.
 *
 * No silent passes: the quotient divides by the step actually stored, and a
 * step that rounds away (x +- h_i == x, or most of h v lost in a
 * direction) is an error naming the element, since 0/0 or 0 against 0
 * would otherwise compare nothing.
 *
 * Everything the check does is undone: it runs on copies of the inputs, on a
 * private tape (swapped in for the caller's), restores grad mode, and runs
 * every evaluation from the same RNG state (dropout keeps its mask). The
 * arena memory of each difference evaluation is handed back right after it
 * (a mark and rollback of the bump pointer), so the check's footprint does
 * not grow with the number of evaluations. */
#include "autograd/tape.h"
#include "check/lowp.h"
#include "check/registry.h"

#include <float.h>
#include <math.h>
#include <string.h>

/* ---- the checker's own random numbers -------------------------------------
 * r and v come from Philox blocks keyed by opts.seed, never from the
 * context's stream, so checking leaves the function's randomness alone.
 * Stream GC_STREAM is r; GC_STREAM + 1 + k the direction of input k (FAST:
 * GC_STREAM + 1 + TG_GRADCHECK_MAX_INPUTS + k its part of u). The
 * context's own stream is stream 0 of the same generator: were r drawn
 * from it, a check seeded like the inputs would get r proportional to
 * inputs drawn uniformly (a registry case with --seed S and probe seed S),
 * and for RMSNorm without gamma, r = c x makes dL/dx = rstd (r - xhat
 * mean(r xhat)) vanish to O(eps): a check of nothing. */
#define GC_STREAM ((uint64_t)0x9e3779b9u << 32)

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

/* v[0..n-1] uniform in [-1, 1), two from each block: FAST's direction,
 * drawn for every element of every input, where a normal (a logarithm and
 * a cosine each) would cost more than the check's own forwards. */
static void gc_uniform_pm1_fill(uint64_t seed, uint64_t stream, double *v, int64_t n) {
    for (int64_t i = 0; i < n; i += 2) {
        uint32_t x[4];
        gc_block(seed, stream, (uint64_t)i / 2, x);
        v[i] = 2.0 * tg_u01_f64(x[0], x[1]) - 1.0;
        if (i + 1 < n) v[i + 1] = 2.0 * tg_u01_f64(x[2], x[3]) - 1.0;
    }
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
 * left at that step (docs/gradcheck-guide.md measures both). The step and atol
 * are relative by default (to the length scale l_i and the gradient's
 * scale G_k), so one setting holds from inputs of size 1e-6 to 1e6
 * (docs/experiments.md): PyTorch's absolute atol 1e-5 is larger than a
 * gradient of 1e-6 and passes any backward there. */

static const tg_gradcheck_tol GC_F64 = {1e-6, 1e-5, 1e-3};
static const tg_gradcheck_tol GC_F32 = {1e-3, 1e-3, 1e-2};

tg_gradcheck_tol tg_gradcheck_dtype_tol(tg_dtype dtype) { return dtype == TG_F32 ? GC_F32 : GC_F64; }

tg_gradcheck_opts tg_gradcheck_defaults(void) {
    tg_gradcheck_opts o = {0};
    o.mode = TG_GRADCHECK_FULL;
    return o;
}

const char *tg_gradcheck_mode_name(tg_gradcheck_mode mode) {
    static const char *const names[] = {"full", "directional", "jacobian", "fast"};
    return (unsigned)mode < 4 ? names[mode] : "?";
}

const char *tg_gradcheck_step_name(tg_gradcheck_step step) {
    static const char *const names[] = {"auto", "absolute", "element", "scaled"};
    return (unsigned)step < 4 ? names[step] : "?";
}

const char *tg_gradcheck_atol_scale_name(tg_gradcheck_atol_scale s) {
    static const char *const names[] = {"auto", "absolute", "gradient"};
    return (unsigned)s < 3 ? names[s] : "?";
}

const char *tg_gradcheck_verdict_name(tg_gradcheck_verdict v) {
    static const char *const names[] = {"inconclusive", "pass", "wrong"};
    return (unsigned)v < 3 ? names[v] : "?";
}

const char *tg_gradcheck_reason_name(tg_gradcheck_reason r) {
    static const char *const names[] = {"none", "all-zero", "unresolved", "empty", "error"};
    return (unsigned)r < 5 ? names[r] : "?";
}

/* Resolved settings of one check: the options with every default filled. */
typedef struct gc_config {
    tg_gradcheck_opts o; /* h, atol, rtol, step, atol_scale resolved */
    tg_dtype dtype;      /* float32 when any checked input is */
    double eps;          /* its machine epsilon */
    uint32_t mask;       /* inputs to check */
} gc_config;

/* Fills cfg from opts (NULL: defaults) for inputs[0..n-1] with `mask`
 * (0: all) as the inputs to check; h, atol, rtol left 0 and step,
 * atol_scale left AUTO take the defaults of the checked inputs' dtype
 * (unless opts->no_defaults). */
static bool gc_configure(tg_ctx *ctx, const char *fn, const tg_gradcheck_opts *opts, int n, tg_tensor *const *inputs,
                         uint32_t mask, gc_config *cfg) {
    tg_gradcheck_opts o = opts ? *opts : tg_gradcheck_defaults();
    if (mask == 0) mask = n >= 32 ? 0xffffffffu : ((uint32_t)1 << n) - 1;
    if (n < 32 && (mask >> n) != 0) {
        tg_error(ctx, TG_ERR_VALUE, fn, "inputs mask 0x%x names inputs beyond the %d given", (unsigned)mask, n);
        return false;
    }
    if ((unsigned)o.mode > TG_GRADCHECK_FAST) {
        tg_error(ctx, TG_ERR_VALUE, fn,
                 "unknown mode %d (TG_GRADCHECK_FULL, TG_GRADCHECK_DIRECTIONAL, TG_GRADCHECK_JACOBIAN or "
                 "TG_GRADCHECK_FAST)",
                 (int)o.mode);
        return false;
    }
    if ((unsigned)o.step > TG_GRADCHECK_STEP_SCALED || (unsigned)o.atol_scale > TG_GRADCHECK_ATOL_GRADIENT) {
        tg_error(ctx, TG_ERR_VALUE, fn, "unknown step %d or atol_scale %d", (int)o.step, (int)o.atol_scale);
        return false;
    }
    if (!(o.h >= 0) || !isfinite(o.h) || !(o.atol >= 0) || !isfinite(o.atol) || !(o.rtol >= 0) || !isfinite(o.rtol)) {
        tg_error(ctx, TG_ERR_VALUE, fn, "h=%g, atol=%g, rtol=%g: each must be finite and >= 0 (0 for the default)", o.h,
                 o.atol, o.rtol);
        return false;
    }
    if (!(o.step_floor >= 0) || !isfinite(o.step_floor)) {
        tg_error(ctx, TG_ERR_VALUE, fn, "step_floor=%g must be finite and >= 0 (0: l_i / 10)", o.step_floor);
        return false;
    }
    if (o.no_defaults && o.h == 0) {
        tg_error(ctx, TG_ERR_VALUE, fn, "h=0 with no_defaults: the step must be > 0");
        return false;
    }
    if (o.r.data && o.r.numel < 1) {
        tg_error(ctx, TG_ERR_VALUE, fn, "opts.r has %lld values", (long long)o.r.numel);
        return false;
    }
    bool f32 = false;
    for (int k = 0; k < n; k++) {
        if (!(mask >> k & 1u)) continue;
        if ((o.mode == TG_GRADCHECK_DIRECTIONAL || o.mode == TG_GRADCHECK_FAST) && k < TG_GRADCHECK_MAX_INPUTS &&
            o.v[k].data && o.v[k].numel != inputs[k]->numel) {
            tg_error(ctx, TG_ERR_SHAPE, fn, "opts.v[%d] has %lld values; input %d has %lld elements", k,
                     (long long)o.v[k].numel, k, (long long)inputs[k]->numel);
            return false;
        }
        if (tg_is_lowp(inputs[k]->dtype)) return tg_gradcheck_refuse_lowp(ctx, fn, k, inputs[k]->dtype);
        if (inputs[k]->dtype != TG_F32) continue;
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
    o.h = o.h > 0 || o.no_defaults ? o.h : def.h;
    o.atol = o.atol > 0 || o.no_defaults ? o.atol : def.atol;
    o.rtol = o.rtol > 0 || o.no_defaults ? o.rtol : def.rtol;
    if (o.step == TG_GRADCHECK_STEP_AUTO) o.step = TG_GRADCHECK_STEP_SCALED;
    if (o.atol_scale == TG_GRADCHECK_ATOL_AUTO) o.atol_scale = TG_GRADCHECK_ATOL_GRADIENT;
    cfg->o = o;
    cfg->dtype = f32 ? TG_F32 : TG_F64;
    cfg->eps = f32 ? FLT_EPSILON : DBL_EPSILON;
    cfg->mask = mask;
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

/* The values of one evaluation of f at the current inputs (no grad),
 * copied into out: the output may be a view of an input (reshape,
 * dropout with p = 0), which the next perturbation would change under it.
 * The evaluation's arena memory is handed back at once. */
static bool gc_values(gc_session *s, double *out) {
    gc_mark m = gc_arena_mark(s->ctx);
    tg_tensor *y = gc_eval(s, false);
    if (!y) return false;
    for (int64_t j = 0; j < y->numel; j++) out[j] = tg_load(y, j);
    gc_arena_rollback(s->ctx, m);
    return true;
}

/* L = sum_j r_j y_j, Neumaier-compensated so the sum adds no round-off of
 * its own to the difference L(x+h) - L(x-h). */
static double gc_weighted_sum(const double *r, const double *y, int64_t M) {
    double sum = 0.0, comp = 0.0;
    for (int64_t j = 0; j < M; j++) {
        double t = r[j] * y[j];
        double s = sum + t;
        comp += fabs(sum) >= fabs(t) ? (sum - s) + t : (t - s) + sum;
        sum = s;
    }
    return sum + comp;
}

/* What every difference is taken against: the output at the unperturbed
 * inputs (y0: M values, and L0 = L(x) for forward differences), the
 * weighting r (NULL in JACOBIAN mode), and scratch for the two sides. */
typedef struct gc_ref {
    int64_t M;
    const double *r, *y0;
    double L0;
    double *yp, *ym;    /* M values each */
    unsigned char *dep; /* M flags: the outputs a step moves (gc_refine) */
} gc_ref;

/* ---- the predicted error ----------------------------------------------------
 * A difference quotient at step h_i is off by
 *   rounding    each of L(x+) and L(x-) carries the rounding of the outputs
 *               the step moved, ~eps |r_j y_j| each, divided by the step:
 *               C_ROUND (eps S + eps64 (|L+| + |L-|)) / (x+ - x-), with
 *               S = sum over the outputs either side moved of |r_j|
 *               (|y+_j| + |y-_j|) (the second term: the compensated sum's
 *               own last rounding, in float64)
 *   truncation  the Taylor terms the quotient drops: (h^2 / 6) L''' central,
 *               (h / 2) L'' forward. Central differences measure L'' for
 *               free: the second difference D2 = L(x+) - 2 L(x) + L(x-) =
 *               h^2 L''; one more derivative along x_i brings a factor
 *               1 / l_i, so C_TRUNC |D2| / l_i (a linear op: 0). Forward
 *               differences, without L(x-), assume the scale:
 *               C_TRUNC (h_i / l_i) G_k
 * An output the step did not move is computed bit for bit the same on both
 * sides and adds no rounding -- unless it did move, by less than its
 * rounding, and only looks unmoved. So a comparison that fails with an
 * error above this estimate gets a second one (gc_refine): the outputs that
 * depend on x_i are found with large steps (+-0.1 l_i, then +-l_i when
 * nothing moved), and S sums over them -- four or six more evaluations,
 * only for failing comparisons.
 *
 * The truncation above is a guess from the length scale; before a failure
 * is blamed on the backward it is measured instead (gc_measured): with
 * e_m = a - n at the step h / 2^m and t_m its truncation, t_0 = (e_0 - e_1)
 * + (e_1 - e_2) + t_2 up to the roundings, and t_2 = (e_1 - e_2) / (q - 1)
 * once the truncation falls as h^2 (q = 4; forward differences h, q = 2)
 * -- as it does at a quarter of the step even where the step itself is too
 * large for that. A wrong backward shifts every e_m alike and cancels. So
 *   |t_0| <= |e_0 - e_1| + q / (q - 1) |e_1 - e_2| + (the roundings)
 * with the rounding of the quotient at h / 2^m 2^m times that at h (the
 * four added as independent errors, root sum of squares). A
 * linear op (t = 0) is held to its rounding alone, however large h. The
 * (Where the differences grow as the step shrinks, the step straddles a
 * kink at every size and the bound is unknown.) The
 * error a correct backward can show is |t_0| + its rounding: a failure
 * beyond TG_GRADCHECK_WRONG_EXCESS times that -- at every one of the three
 * steps, since a wrong backward's error does not shrink with the step
 * while the check's own (a kink the step straddles) does -- is a wrong
 * gradient, one within it undecided. Four more evaluations per failing
 * comparison. */

static double gc_round(const gc_config *cfg, double S, double Lp, double Lm, double step) {
    return TG_GRADCHECK_C_ROUND * (cfg->eps * S + DBL_EPSILON * (fabs(Lp) + fabs(Lm))) / step;
}

/* The truncation predicted for a quotient at the relative step rel_step
 * (h_i / l_i) with second difference D2 over the length l (central), or
 * from the gradient's scale G (forward). */
static double gc_trunc(const gc_config *cfg, double rel_step, double G, double D2, double l) {
    if (cfg->o.forward_diff) return TG_GRADCHECK_C_TRUNC * rel_step * G;
    return isfinite(D2) ? TG_GRADCHECK_C_TRUNC * fabs(D2) / l : INFINITY;
}

/* One difference, measured in one pass over the outputs: L+ and L- (L0
 * with forward differences), S over the outputs that moved from y0 (or
 * that dep marks) and S2 the root sum of squares of its terms, and T =
 * sum_j |r_j (y+_j - y-_j)|, the size of the terms the difference sums
 * before they cancel, and T2 their root sum of squares (the size of their
 * sum with r's random signs). */
typedef struct gc_diff {
    double Lp, Lm, S, S2, T, T2;
} gc_diff;

static gc_diff gc_measure(const gc_config *cfg, const gc_ref *ref, const unsigned char *dep) {
    /* two Neumaier-compensated sums (gc_weighted_sum), side by side */
    double sp = 0.0, cp = 0.0, sm = 0.0, cm = 0.0, S = 0.0, S2 = 0.0, T = 0.0, T2 = 0.0;
    for (int64_t j = 0; j < ref->M; j++) {
        double p = ref->yp[j], m = ref->ym[j], z = ref->y0[j], r = ref->r[j], w = fabs(r);
        double tp = r * p, tm = r * m, up = sp + tp, um = sm + tm;
        cp += fabs(sp) >= fabs(tp) ? (sp - up) + tp : (tp - up) + sp;
        cm += fabs(sm) >= fabs(tm) ? (sm - um) + tm : (tm - um) + sm;
        sp = up;
        sm = um;
        T += w * fabs(p - m);
        T2 += w * (p - m) * w * (p - m);
        if (dep ? dep[j] : p != z || m != z) {
            double t = w * (fabs(p) + fabs(m));
            S += t;
            S2 += t * t;
        }
    }
    gc_diff d = {sp + cp, cfg->o.forward_diff ? ref->L0 : sm + cm, S, sqrt(S2), T, sqrt(T2)};
    return d;
}

/* ---- steps and scales --------------------------------------------------------- */

/* The length scales l_i of input k into ell: the scale function's, else
 * the input's root mean square (1 for an all-zero input). */
static bool gc_scales(gc_session *s, const gc_config *cfg, int k, double *ell) {
    const tg_tensor *x = s->x[k];
    int64_t N = x->numel;
    if (cfg->o.scale && cfg->o.scale(s->x, k, ell, s->user)) {
        for (int64_t i = 0; i < N; i++) {
            if (!(ell[i] > 0) || !isfinite(ell[i])) {
                tg_error(s->ctx, TG_ERR_VALUE, s->fn,
                         "the scale function gave l = %g for element %lld of input %d (each must be finite and > 0)",
                         ell[i], (long long)i, k);
                return false;
            }
        }
        return true;
    }
    double ss = 0.0;
    for (int64_t i = 0; i < N; i++) ss += tg_load(x, i) * tg_load(x, i);
    double rms = N ? sqrt(ss / (double)N) : 0.0;
    if (!(rms > 0) || !isfinite(rms)) rms = 1.0;
    for (int64_t i = 0; i < N; i++) ell[i] = rms;
    return true;
}

/* The step of element i of x: h, h max(|x_i|, floor) or h l_i. */
static double gc_step(const gc_config *cfg, double xi, double ell) {
    switch (cfg->o.step) {
    case TG_GRADCHECK_STEP_ELEMENT:
        return cfg->o.h * fmax(fabs(xi), cfg->o.step_floor > 0 ? cfg->o.step_floor : ell / 10);
    case TG_GRADCHECK_STEP_SCALED: return cfg->o.h * ell;
    default: return cfg->o.h;
    }
}

/* Per-input working arrays: scales, steps. */
typedef struct gc_input_steps {
    double *ell, *step;
    double lo, hi, ell_rms;
} gc_input_steps;

static bool gc_prepare(gc_session *s, const gc_config *cfg, int k, gc_input_steps *st) {
    const tg_tensor *x = s->x[k];
    int64_t N = x->numel;
    size_t bytes = (size_t)(N > 0 ? N : 1) * sizeof(double);
    st->ell = tg_arena_alloc_fn(s->ctx, s->fn, bytes);
    st->step = tg_arena_alloc_fn(s->ctx, s->fn, bytes);
    if (!st->ell || !st->step || !gc_scales(s, cfg, k, st->ell)) return false;
    st->lo = INFINITY;
    st->hi = 0.0;
    double ss = 0.0;
    for (int64_t i = 0; i < N; i++) {
        st->step[i] = gc_step(cfg, tg_load(x, i), st->ell[i]);
        st->lo = fmin(st->lo, st->step[i]);
        st->hi = fmax(st->hi, st->step[i]);
        ss += st->ell[i] * st->ell[i];
    }
    if (N == 0) st->lo = 0.0;
    st->ell_rms = N ? sqrt(ss / (double)N) : 0.0;
    return true;
}

/* The spacing of float32 or float64 numbers at x. */
static double gc_spacing(tg_dtype dt, double x) {
    if (dt == TG_F32) return (double)nextafterf((float)fabs(x), INFINITY) - (double)(float)fabs(x);
    return nextafter(fabs(x), INFINITY) - fabs(x);
}

/* A step that rounded away: an error naming where (and result fields). */
static void gc_vanished(gc_session *s, tg_gradcheck_result *R, int k, int64_t i, double xi, double h, double kept) {
    R->step_vanished = true;
    R->vanished_input = k;
    R->vanished_index = i;
    tg_dtype dt = s->x[k]->dtype;
    if (i >= 0) {
        double sp = gc_spacing(dt, xi);
        tg_error(s->ctx, TG_ERR_VALUE, s->fn,
                 "the step vanished at input %d, element %lld: x = %.9g and x +- h (h = %.3g) round back to x in %s, "
                 "whose spacing there is %.3g, so the difference quotient is 0/0 and compares nothing; take h "
                 "above %.2g there (a larger h, or a step relative to x: TG_GRADCHECK_STEP_SCALED)",
                 k, (long long)i, xi, h, tg_dtype_name(dt), sp, sp);
    } else {
        tg_error(s->ctx, TG_ERR_VALUE, s->fn,
                 "the step vanished along the direction of %s %d: of the perturbation h v (|h v| = %.3g) only "
                 "%.3g of its length survives rounding to %s, so both sides would compare about 0 with 0; take a "
                 "larger h",
                 R->mode == TG_GRADCHECK_FAST ? "every checked input, from input" : "input", k, h, kept,
                 tg_dtype_name(dt));
    }
}

/* ---- comparison ------------------------------------------------------------ */

static double gc_max(double old, double v) { return isnan(old) ? old : (isnan(v) || v > old) ? v : old; }

/* The larger of the root mean squares of a and b over the pairs where
 * either is non-zero and both are finite: the scale of a gradient, blind to
 * structural zeros and to a NaN here or there. */
static double gc_rms_pair(const double *a, const double *b, int64_t n) {
    double sa = 0.0, sb = 0.0;
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++) {
        double u = a[i], v = b[i];
        if (!isfinite(u) || !isfinite(v) || (u == 0 && v == 0)) continue;
        sa += u * u;
        sb += v * v;
        m++;
    }
    return m ? sqrt(fmax(sa, sb) / (double)m) : 0.0;
}

/* One comparison of analytic a with numeric n for input k, element i (-1:
 * a direction), output j (-1 unless JACOBIAN), at step h with predicted
 * error bound = trunc + round (for a failure, trunc measured: gc_measured).
 * It passes within the tolerance; a failure is wrong beyond
 * TG_GRADCHECK_WRONG_EXCESS x bound (an analytic NaN always), undecided
 * within it or when n is not finite. A comparison where a zero analytic
 * value would fail saw a gradient. */
static void gc_compare(const gc_config *cfg, tg_gradcheck_result *R, int k, int64_t i, int64_t j, double a, double n,
                       double h, double trunc, double round, double persist) {
    tg_gradcheck_input *in = &R->input[k];
    double bound = trunc + round;
    if (in->n_checked == 0 || bound > in->pred_max) {
        in->pred_max = bound;
        in->pred_trunc = trunc;
        in->pred_round = round;
    }
    double atol = in->atol_used;
    double err = fabs(a - n);
    double tol = atol + R->rtol * fabs(n);
    double rel = err / fmax(fabs(n), fmax(atol, DBL_MIN));
    double ratio = tol > 0 ? err / tol : (err == 0 ? 0.0 : INFINITY);
    if (isnan(ratio)) ratio = INFINITY; /* NaN anywhere: the worst of all */
    bool ok = err <= tol;               /* false for NaN */
    /* a failure's excess: its error at the step where it is smallest */
    double kept = ok ? err : fmin(err, isnan(persist) ? err : persist);
    double excess = bound > 0 ? kept / bound : (kept == 0 ? 0.0 : INFINITY);
    if (isnan(excess)) excess = INFINITY;
    bool wrong = !ok && isfinite(n) && !(fmin(err, persist) <= TG_GRADCHECK_WRONG_EXCESS * bound) &&
                 !(isnan(persist) && isfinite(a));
    in->n_checked++;
    if (!ok) in->n_failed++;
    if (wrong) in->n_wrong++;
    /* |0 - n| > atol + rtol |n|: a backward that gave 0 here would fail */
    if (isfinite(n) && fabs(n) * (1 - R->rtol) > atol) in->n_resolved++;
    in->max_abs_err = gc_max(in->max_abs_err, err);
    in->max_rel_err = gc_max(in->max_rel_err, rel);
    in->max_excess = fmax(in->max_excess, excess);
    if (!ok) in->fail_excess = fmax(in->fail_excess, excess);
    if (in->n_checked == 1 || ratio > in->worst_ratio) {
        in->worst_ratio = ratio;
        in->worst_index = i;
        in->worst_output = j;
        in->worst_analytic = a;
        in->worst_numeric = n;
        in->worst_step = h;
        in->worst_bound = bound;
    }
    if (cfg->o.each) {
        tg_gradcheck_element e = {k, i, j, a, n, h, tol, bound, ok};
        cfg->o.each(cfg->o.each_user, &e);
    }
}

/* Sets input k's gradient scale and its absolute tolerance. */
static void gc_set_scale(const gc_config *cfg, tg_gradcheck_result *R, int k, double G) {
    R->input[k].grad_scale = G;
    R->input[k].atol_used = cfg->o.atol_scale == TG_GRADCHECK_ATOL_GRADIENT ? cfg->o.atol * G : cfg->o.atol;
}

void tg_gradcheck_decide(tg_gradcheck_result *R) {
    R->verdict = TG_VERDICT_PASS;
    R->reason = TG_REASON_NONE;
    for (int k = 0; k < R->n_inputs; k++) {
        tg_gradcheck_input *in = &R->input[k];
        if (!in->checked) continue;
        in->reason = TG_REASON_NONE;
        if (in->n_wrong) in->verdict = TG_VERDICT_WRONG;
        else if (in->n_failed) in->reason = TG_REASON_UNRESOLVED;
        else if (in->n_resolved == 0 && !in->constant)
            in->reason = in->n_checked ? TG_REASON_ALL_ZERO : TG_REASON_EMPTY;
        else in->verdict = TG_VERDICT_PASS;
        if (in->reason != TG_REASON_NONE) in->verdict = TG_VERDICT_INCONCLUSIVE;
        in->pass = in->verdict == TG_VERDICT_PASS;
        R->n_wrong += in->n_wrong;
        if (in->verdict == TG_VERDICT_WRONG) R->verdict = TG_VERDICT_WRONG, R->reason = TG_REASON_NONE;
        else if (in->verdict == TG_VERDICT_INCONCLUSIVE && R->verdict == TG_VERDICT_PASS)
            R->verdict = TG_VERDICT_INCONCLUSIVE, R->reason = in->reason;
    }
    R->pass = R->verdict == TG_VERDICT_PASS;
}

void tg_gradcheck_stopped(tg_gradcheck_result *R) {
    R->pass = false;
    if (R->verdict != TG_VERDICT_WRONG) R->verdict = TG_VERDICT_INCONCLUSIVE, R->reason = TG_REASON_ERROR;
}

/* Totals over inputs, the overall worst element and the verdicts. */
static void gc_summarize(tg_gradcheck_result *R) {
    R->worst_input = -1;
    R->worst_index = -1;
    R->worst_output = -1;
    for (int k = 0; k < R->n_inputs; k++) {
        tg_gradcheck_input *in = &R->input[k];
        if (!in->checked) continue;
        R->n_checked += in->n_checked;
        R->n_failed += in->n_failed;
        R->max_abs_err = gc_max(R->max_abs_err, in->max_abs_err);
        R->max_rel_err = gc_max(R->max_rel_err, in->max_rel_err);
        R->max_excess = fmax(R->max_excess, in->max_excess);
        R->fail_excess = fmax(R->fail_excess, in->fail_excess);
        if (in->n_checked && (R->worst_input < 0 || in->worst_ratio > R->worst_ratio)) {
            R->worst_input = k;
            R->worst_index = in->worst_index;
            R->worst_output = in->worst_output;
            R->worst_analytic = in->worst_analytic;
            R->worst_numeric = in->worst_numeric;
            R->worst_ratio = in->worst_ratio;
        }
    }
    tg_gradcheck_decide(R);
}

/* ---- the three modes ------------------------------------------------------- */

/* A move along a direction: input k goes to orig[k] + f p[k] (p[k] NULL:
 * it stays). DIRECTIONAL moves one input, FAST every checked input at
 * once. */
typedef struct gc_dir {
    const double *p[TG_GRADCHECK_MAX_INPUTS];
    const tg_tensor *orig[TG_GRADCHECK_MAX_INPUTS];
} gc_dir;

static void gc_dir_move(gc_session *s, const gc_dir *d, double f) {
    for (int k = 0; k < s->n; k++) {
        if (!d->p[k]) continue;
        tg_tensor *x = s->x[k];
        for (int64_t e = 0; e < x->numel; e++) tg_store(x, e, tg_load(d->orig[k], e) + f * d->p[k][e]);
    }
}

static void gc_dir_restore(gc_session *s, const gc_dir *d) {
    for (int k = 0; k < s->n; k++)
        if (d->p[k]) memcpy(s->x[k]->data, d->orig[k]->data, (size_t)s->x[k]->numel * tg_esize(s->x[k]->dtype));
}

/* One difference: element i of input k (dir NULL) moved to x_i +- h, or
 * the inputs of dir moved by +- f p, or forward: + only. ref->yp and
 * ref->ym get the two sides' outputs (ym = y0 for forward differences) and
 * *dx the step actually stored, x+_i - x-_i (element i). The inputs are
 * restored. */
static bool gc_sides(gc_session *s, const gc_config *cfg, int k, int64_t i, double h, const gc_dir *dir, double f,
                     gc_ref *ref, double *dx) {
    tg_tensor *x = s->x[k];
    bool central = !cfg->o.forward_diff;
    double xi = !dir ? tg_load(x, i) : 0.0, xp = 0.0, xm = xi;
    if (!dir) {
        tg_store(x, i, xi + h);
        xp = tg_load(x, i);
    } else {
        gc_dir_move(s, dir, f);
    }
    bool ok = gc_values(s, ref->yp);
    if (ok && central) {
        if (!dir) {
            tg_store(x, i, xi - h);
            xm = tg_load(x, i);
        } else {
            gc_dir_move(s, dir, -f);
        }
        ok = gc_values(s, ref->ym);
    } else if (ok) {
        memcpy(ref->ym, ref->y0, (size_t)ref->M * sizeof *ref->ym);
    }
    if (!dir) tg_store(x, i, xi);
    else gc_dir_restore(s, dir);
    if (dx) *dx = xp - xm;
    return ok;
}

/* Whether the stored step of element i kept at least half of the intended
 * one (else the error, gc_vanished). */
static bool gc_step_kept(gc_session *s, const gc_config *cfg, tg_gradcheck_result *R, int k, int64_t i, double dx,
                         double h) {
    double want = cfg->o.forward_diff ? h : 2 * h;
    if (dx >= 0.5 * want) return true;
    gc_vanished(s, R, k, i, tg_load(s->x[k], i), h, 0.0);
    return false;
}

/* The rounding of one difference recomputed over the outputs that depend
 * on the perturbed inputs: element i (dir NULL) moved by +-H, or dir's
 * inputs by +-p times H, marks the outputs that move (dep; when none moves,
 * again at +-10 H: an output may take a step of 0.1 l_i without leaving
 * its rounding); then the two sides at the check's own step (h, or p)
 * again give S over those outputs. */
static bool gc_refine(gc_session *s, const gc_config *cfg, int k, int64_t i, double h, double H, const gc_dir *dir,
                      gc_ref *ref, gc_diff *D, double *dx) {
    tg_tensor *x = s->x[k];
    memset(ref->dep, 0, (size_t)ref->M);
    bool moved = false;
    for (int scale = 1; scale <= 10 && !moved; scale *= 10) {
        /* both sides: one alone can land where f takes its old value again
         * (a parabola's mirror point) */
        for (int side = -1; side <= 1; side += 2) {
            bool ok;
            double step = side * scale * H;
            if (!dir) {
                double xi = tg_load(x, i);
                tg_store(x, i, xi + step);
                ok = gc_values(s, ref->yp);
                tg_store(x, i, xi);
            } else {
                gc_dir_move(s, dir, step);
                ok = gc_values(s, ref->yp);
                gc_dir_restore(s, dir);
            }
            if (!ok) return false;
            for (int64_t j = 0; j < ref->M; j++) {
                bool m = ref->yp[j] != ref->y0[j];
                ref->dep[j] |= m;
                moved |= m;
            }
        }
    }
    if (!gc_sides(s, cfg, k, i, h, dir, 1.0, ref, dx)) return false;
    *D = gc_measure(cfg, ref, ref->dep);
    return true;
}

/* The analytic side of a direction as the stored step sees it: sum over
 * dir's inputs of g_i (x+_i - x-_i) for x+- = orig +- f p (forward: x+ -
 * x), each input restored; and (kept not NULL) the squared lengths of the
 * stored step, *kept, and of the intended one (2 f p, forward f p), *want. */
static double gc_stored_dot(gc_session *s, const gc_config *cfg, const gc_dir *dir, double f, double *kept,
                            double *want) {
    double dot = 0.0, c = cfg->o.forward_diff ? f : 2 * f;
    for (int k = 0; k < s->n; k++) {
        if (!dir->p[k]) continue;
        tg_tensor *x = s->x[k];
        const tg_tensor *orig = dir->orig[k], *g = x->grad;
        const double *p = dir->p[k];
        for (int64_t i = 0; i < x->numel; i++) {
            double o = tg_load(orig, i);
            tg_store(x, i, o + f * p[i]);
            double d = tg_load(x, i);
            tg_store(x, i, cfg->o.forward_diff ? o : o - f * p[i]);
            d -= tg_load(x, i);
            tg_store(x, i, o);
            dot += tg_load(g, i) * d;
            if (kept) *kept += d * d, *want += c * p[i] * c * p[i];
        }
    }
    return dot;
}

/* The telescoped truncation bound of "the predicted error" above, from
 * e0, e1, e2 = a - n at the steps h, h / 2, h / 4 (signed) and the
 * rounding rho of the quotient at h: into *trunc, and *round widened by
 * the roundings the measurement carries (rho x step / step' at each). */
static void gc_telescope(const gc_config *cfg, const double e[3], const double d[3], double frac, double *trunc,
                         double *round, double *persist) {
    double q = cfg->o.forward_diff ? 2.0 : 4.0, rho = *round, s1 = d[0] / d[1], s2 = d[0] / d[2];
    /* a wrong backward's error stays as the step shrinks; the check's own
     * (a kink inside the step, truncation) goes: the smallest of the three */
    *persist = fmin(fabs(e[0]), fmin(fabs(e[1]), fabs(e[2])));
    if (isnan(e[0]) || isnan(e[1]) || isnan(e[2])) *persist = NAN;
    double t = fabs(e[0] - e[1]) + q / (q - 1) * fabs(e[1] - e[2]);
    /* the telescope holds once the differences shrink with the step (by q
     * where the truncation rules, to rounding where it does not); growing,
     * they are no truncation series at all -- a kink inside every step --
     * and bound nothing */
    bool converging = fabs(e[1] - e[2]) <= fmax(fabs(e[0] - e[1]), rho * (s1 + s2));
    bool kept = d[1] >= 0.25 * d[0] && d[2] >= 0.125 * d[0] && isfinite(t) && converging;
    *trunc = kept ? t : INFINITY;
    /* rho bounds the quotient's rounding at its worst: every output's
     * rounding of one sign, the sum S of their sizes. The four roundings
     * of the measurement come from separate evaluations and add as
     * independent errors (root sum of squares), and so do the outputs'
     * within each: frac = S2 / S of them (1 for one output) */
    double c = q / (q - 1);
    *round = rho * (1 + frac * sqrt(1 + s1 * s1 + c * c * (s1 * s1 + s2 * s2)));
}

/* The predicted error of a failing comparison with its truncation
 * measured (see "the predicted error" above): a - n at step `step` (n's
 * rounding *round) against a' - n' at half and at a quarter of the step
 * -- element i (dir NULL) at h / 2^m, where a' = a, or dir's inputs at p
 * / 2^m, where a' is the gradient g along that step as stored. A wrong backward shifts all three by the same amount, so their
 * differences are the truncation's and the roundings'. Sets *trunc and
 * *round (gc_telescope); a smaller step that does not survive rounding,
 * or a quotient that is not finite, leaves the truncation unknown
 * (infinite): undecided. */
static bool gc_measured(gc_session *s, const gc_config *cfg, int k, int64_t i, double h, const gc_dir *dir, gc_ref *ref,
                        double a, double n, double step, double frac, double *trunc, double *round, double *persist) {
    double e[3] = {a - n, 0, 0}, d[3] = {step, 0, 0};
    for (int m = 1; m <= 2; m++) {
        double f = m == 1 ? 0.5 : 0.25, am = a;
        if (dir) {
            d[m] = f * step;
            am = gc_stored_dot(s, cfg, dir, f, NULL, NULL) / d[m];
        }
        if (!gc_sides(s, cfg, k, i, f * h, dir, f, ref, dir ? NULL : &d[m])) return false;
        gc_diff D = gc_measure(cfg, ref, NULL);
        e[m] = am - (D.Lp - D.Lm) / d[m];
    }
    gc_telescope(cfg, e, d, frac, trunc, round, persist);
    return true;
}

/* A failing comparison's predicted error (gc_refine, gc_measured), into
 * *trunc and *round: a and n at `step`, refined at +-H. */
static bool gc_failure_bound(gc_session *s, const gc_config *cfg, int k, int64_t i, double h, double H,
                             const gc_dir *dir, gc_ref *ref, double a, double n, double step, double frac,
                             double *trunc, double *round, double *persist) {
    if (fabs(a - n) > *round) { /* rounding alone does not cover it: which outputs depend on x */
        gc_diff D;
        double d = step, r = 0;
        if (!gc_refine(s, cfg, k, i, h, H, dir, ref, &D, dir ? NULL : &d)) return false;
        if ((r = gc_round(cfg, D.S, D.Lp, D.Lm, d)) > *round) *round = r, frac = D.S > 0 ? D.S2 / D.S : 1.0;
    }
    return gc_measured(s, cfg, k, i, h, dir, ref, a, n, step, frac, trunc, round, persist);
}

/* An input none of whose comparisons saw a gradient: does f depend on it
 * at all? Each element moved by +-l_i (ell; or dir's inputs by +-p):
 * when no weighted output (r_j != 0) moves, f is constant in x there, its
 * gradient exactly zero and the check's 0 against 0 a real agreement
 * (input->constant); otherwise f changes at larger steps than the check's,
 * and it saw nothing (TG_REASON_ALL_ZERO). A probe whose step rounds away
 * proves nothing. Two evaluations per element (or direction), and one of
 * f at x. */
static bool gc_constant(gc_session *s, tg_gradcheck_result *R, int k, const double *ell, const gc_dir *dir,
                        gc_ref *ref) {
    tg_gradcheck_input *in = &R->input[k];
    if (ref->M == 0) in->constant = true; /* no output depends on anything */
    if (in->n_checked == 0 || in->n_failed || in->n_resolved) return true;
    tg_tensor *x = s->x[k];
    /* against f at x evaluated as the probes are (no grad): the recorded
     * output may differ from it in the last bit (a function that runs a
     * backward, as gradgradcheck's, computes it two ways) */
    if (!gc_values(s, ref->ym)) return false;
    bool constant = true;
    for (int64_t i = 0; constant && i < (dir ? 1 : x->numel); i++) {
        for (int side = -1; constant && side <= 1; side += 2) {
            bool ok = true;
            if (dir) {
                gc_dir_move(s, dir, side);
                for (int j = 0; j < s->n && ok; j++)
                    for (int64_t e = 0; dir->p[j] && e < s->x[j]->numel && ok; e++)
                        ok = tg_load(s->x[j], e) == tg_load(dir->orig[j], e);
                constant = !ok; /* some element moved */
                ok = gc_values(s, ref->yp);
                gc_dir_restore(s, dir);
            } else {
                double xi = tg_load(x, i);
                tg_store(x, i, xi + side * ell[i]);
                constant = tg_load(x, i) != xi;
                ok = gc_values(s, ref->yp);
                tg_store(x, i, xi);
            }
            if (!ok) return false;
            for (int64_t j = 0; constant && j < ref->M; j++) constant = ref->r[j] == 0 || ref->yp[j] == ref->ym[j];
        }
    }
    in->constant = constant;
    return true;
}

/* FULL: every element of input k. a_i from the backward (g), n_i from two
 * forwards (one with forward differences, against L0). */
static bool gc_check_full(gc_session *s, const gc_config *cfg, tg_gradcheck_result *R, int k, gc_ref *ref) {
    tg_ctx *ctx = s->ctx;
    const tg_tensor *x = s->x[k], *g = x->grad;
    int64_t N = x->numel;
    gc_input_steps st;
    if (!gc_prepare(s, cfg, k, &st)) return false;
    size_t bytes = (size_t)(N > 0 ? N : 1) * sizeof(double);
    double *num = tg_arena_alloc_fn(ctx, s->fn, bytes), *rnd = tg_arena_alloc_fn(ctx, s->fn, bytes);
    double *ana = tg_arena_alloc_fn(ctx, s->fn, bytes), *terms = tg_arena_alloc_fn(ctx, s->fn, bytes);
    double *dx_kept = tg_arena_alloc_fn(ctx, s->fn, bytes), *curv = tg_arena_alloc_fn(ctx, s->fn, bytes);
    double *frac = tg_arena_alloc_fn(ctx, s->fn, bytes);
    if (!num || !rnd || !ana || !terms || !dx_kept || !curv || !frac) return false;
    for (int64_t i = 0; i < N; i++) {
        double dx;
        if (!gc_sides(s, cfg, k, i, st.step[i], NULL, 0.0, ref, &dx)) return false;
        if (!gc_step_kept(s, cfg, R, k, i, dx, st.step[i])) return false;
        gc_diff D = gc_measure(cfg, ref, NULL);
        /* divide by the step actually stored (rounded to the dtype) */
        num[i] = (D.Lp - D.Lm) / dx;
        curv[i] = D.Lp - 2 * ref->L0 + D.Lm;
        terms[i] = D.T / dx;
        rnd[i] = gc_round(cfg, D.S, D.Lp, D.Lm, dx);
        frac[i] = D.S > 0 ? D.S2 / D.S : 1.0;
        ana[i] = tg_load(g, i);
        dx_kept[i] = dx;
    }
    double G = gc_rms_pair(ana, terms, N);
    gc_set_scale(cfg, R, k, G);
    for (int64_t i = 0; i < N; i++) {
        double err = fabs(ana[i] - num[i]), trunc = gc_trunc(cfg, st.step[i] / st.ell[i], G, curv[i], st.ell[i]),
               round = rnd[i], persist = err;
        /* a failure: the check's own error there, measured, before the
         * backward is blamed */
        if (!(err <= R->input[k].atol_used + R->rtol * fabs(num[i])) &&
            !gc_failure_bound(s, cfg, k, i, st.step[i], fmax(0.1 * st.ell[i], st.step[i]), NULL, ref, ana[i], num[i],
                              dx_kept[i], frac[i], &trunc, &round, &persist))
            return false;
        gc_compare(cfg, R, k, i, -1, ana[i], num[i], st.step[i], trunc, round, persist);
    }
    if (!gc_constant(s, R, k, st.ell, NULL, ref)) return false;
    R->input[k].step_min = st.lo;
    R->input[k].step_max = st.hi;
    R->input[k].scale = st.ell_rms;
    return true;
}

/* ---- directions: DIRECTIONAL (one input) and FAST (every input at once) ----
 * A direction v over the moved inputs, each element moved by p_i = h_i v_i
 * (h_i / h = l_i with relative steps):
 *   analytic  sum_i g_i (x+_i - x-_i) / 2h,  numeric (L(x+) - L(x-)) / 2h
 * with x+- = x +- p as stored (rounded), so both use the same step, and the
 * sum over every element of every moved input. Forward differences use x
 * and L0 in place of x- and L(x-), h for 2h. DIRECTIONAL moves input k
 * alone along its own unit v_k; FAST moves every checked input together
 * along one unit vector u over all of them (PyTorch's fast mode perturbs
 * each input alone, two forwards each, as DIRECTIONAL does): one
 * comparison, u . J^T r, for the whole function. */
typedef struct gc_along {
    gc_dir dir;  /* the move p = h_i v_i */
    gc_dir unit; /* p / rho: a relative step of 1 along v (gc_constant) */
    double *v[TG_GRADCHECK_MAX_INPUTS], *p[TG_GRADCHECK_MAX_INPUTS], *p2[TG_GRADCHECK_MAX_INPUTS];
    gc_input_steps st[TG_GRADCHECK_MAX_INPUTS];
} gc_along;

/* Adds input k to the move: its steps, a copy of its values, and its part
 * of v (opts.v[k] as given, else from the seed: normal in DIRECTIONAL,
 * uniform in [-1, 1) in FAST; unnormalized).
 * Returns v_k's squared length into *norm2. */
static bool gc_along_add(gc_session *s, const gc_config *cfg, int k, gc_along *a, double *norm2) {
    tg_ctx *ctx = s->ctx;
    int64_t N = s->x[k]->numel;
    if (!gc_prepare(s, cfg, k, &a->st[k])) return false;
    tg_tensor *orig = tg_copy(ctx, s->x[k]);
    a->v[k] = tg_arena_alloc_fn(ctx, s->fn, (size_t)N * sizeof(double));
    a->p[k] = tg_arena_alloc_fn(ctx, s->fn, (size_t)N * sizeof(double));
    a->p2[k] = tg_arena_alloc_fn(ctx, s->fn, (size_t)N * sizeof(double));
    if (!orig || !a->v[k] || !a->p[k] || !a->p2[k]) return false;
    a->dir.orig[k] = a->unit.orig[k] = orig;
    a->dir.p[k] = a->p[k];
    a->unit.p[k] = a->p2[k];
    const tg_gradcheck_vec *given = &cfg->o.v[k];
    bool fast = cfg->o.mode == TG_GRADCHECK_FAST;
    if (fast && !given->data)
        gc_uniform_pm1_fill(cfg->o.seed, GC_STREAM + 1 + TG_GRADCHECK_MAX_INPUTS + (uint64_t)k, a->v[k], N);
    double norm = 0.0;
    for (int64_t i = 0; i < N; i++) {
        if (given->data) a->v[k][i] = given->data[i];
        else if (!fast) a->v[k][i] = gc_normal(cfg->o.seed, GC_STREAM + 1 + (uint64_t)k, (uint64_t)i);
        norm += a->v[k][i] * a->v[k][i];
    }
    if (given->data && (!(norm > 0) || !isfinite(norm))) {
        tg_error(ctx, TG_ERR_VALUE, s->fn, "opts.v[%d] is zero or not finite (|v| = %g)", k, sqrt(norm));
        return false;
    }
    *norm2 = norm;
    return true;
}

/* Scales the random parts of v (the inputs without opts.v) together to
 * unit length, given their squared length norm2, and sets p = h_i v_i. */
static void gc_along_finish(const gc_config *cfg, gc_session *s, gc_along *a, double norm2) {
    double norm = sqrt(norm2);
    bool first = true;
    for (int k = 0; k < s->n; k++) {
        if (!a->p[k]) continue;
        int64_t N = s->x[k]->numel;
        if (!cfg->o.v[k].data)
            for (int64_t i = 0; i < N; i++) a->v[k][i] = norm > 0 ? a->v[k][i] / norm : (first && i == 0);
        for (int64_t i = 0; i < N; i++) a->p[k][i] = a->st[k].step[i] * a->v[k][i];
        first = false;
    }
}

/* The check along a's direction, recorded as one comparison of input k:
 * the two sides, the stored step, the scale G and the predicted error,
 * the failure's measured bound, and whether f moves at all along v. */
static bool gc_check_along(gc_session *s, const gc_config *cfg, tg_gradcheck_result *R, int k, gc_along *a,
                           gc_ref *ref) {
    if (!gc_sides(s, cfg, k, -1, 0.0, &a->dir, 1.0, ref, NULL)) return false;
    /* the step as stored: x+_i - x-_i, from the values the two sides saw */
    double c = cfg->o.forward_diff ? 1 : 2, want = 0.0, kept = 0.0;
    double ana = gc_stored_dot(s, cfg, &a->dir, 1.0, &kept, &want);
    want = sqrt(want);
    kept = sqrt(kept);
    if (!(kept >= 0.5 * want)) {
        gc_vanished(s, R, k, -1, 0.0, want / c, kept / c);
        return false;
    }
    double h = cfg->o.h, step = c * h;
    gc_diff D = gc_measure(cfg, ref, NULL);
    double num = (D.Lp - D.Lm) / step;
    /* G: the typical size of g . (w v) for a direction of this length, w_i
     * = h_i / h, from g or -- should g be wrong -- from the difference's
     * terms r_j (y+_j - y-_j), summed as r's random signs sum them (their
     * sum of magnitudes would be sqrt(M) times too large, and atol with
     * it); rho: the relative step h_i / l_i along v */
    double gw = 0.0, rho = 0.0, vv = 0.0, lo = INFINITY, hi = 0.0, ell2 = 0.0;
    int64_t N = 0;
    for (int j = 0; j < s->n; j++) {
        if (!a->p[j]) continue;
        const gc_input_steps *st = &a->st[j];
        const tg_tensor *g = s->x[j]->grad;
        for (int64_t i = 0; i < s->x[j]->numel; i++) {
            double w = st->step[i] / h, gi = tg_load(g, i), q = st->step[i] / st->ell[i], vi = a->v[j][i];
            if (isfinite(gi)) gw += gi * gi * w * w;
            rho += vi * vi * q * q;
            vv += vi * vi;
        }
        N += s->x[j]->numel;
        lo = fmin(lo, st->lo);
        hi = fmax(hi, st->hi);
        ell2 += st->ell_rms * st->ell_rms * (double)s->x[j]->numel;
    }
    double G = sqrt(gw / (double)N) * sqrt(vv);
    if (isfinite(D.T2)) G = fmax(G, D.T2 / step);
    rho = sqrt(rho / vv);
    gc_set_scale(cfg, R, k, G);
    double err = fabs(ana / step - num), trunc = gc_trunc(cfg, rho, G, D.Lp - 2 * ref->L0 + D.Lm, h / rho),
           round = gc_round(cfg, D.S, D.Lp, D.Lm, step), persist = err;
    /* a failure: the check's own error, measured (the refinement moves the
     * direction to a relative step of 0.1) */
    if (!(err <= R->input[k].atol_used + R->rtol * fabs(num)) &&
        !gc_failure_bound(s, cfg, k, -1, 0.0, fmax(0.1 / rho, 1.0), &a->dir, ref, ana / step, num, step,
                          D.S > 0 ? D.S2 / D.S : 1.0, &trunc, &round, &persist))
        return false;
    gc_compare(cfg, R, k, -1, -1, ana / step, num, h, trunc, round, persist);
    for (int j = 0; j < s->n; j++)
        for (int64_t i = 0; a->p[j] && i < s->x[j]->numel; i++) a->p2[j][i] = a->p[j][i] / rho;
    if (!gc_constant(s, R, k, NULL, &a->unit, ref)) return false;
    R->input[k].step_min = lo;
    R->input[k].step_max = hi;
    R->input[k].scale = a->p[k] && N == s->x[k]->numel ? a->st[k].ell_rms : sqrt(ell2 / (double)N);
    return true;
}

/* DIRECTIONAL: one direction v for input k (opts.v[k], or a random unit
 * vector): two forwards. */
static bool gc_check_directional(gc_session *s, const gc_config *cfg, tg_gradcheck_result *R, int k, gc_ref *ref) {
    if (s->x[k]->numel == 0) return true;
    gc_along a;
    memset(&a, 0, sizeof a);
    double norm2 = 0.0;
    if (!gc_along_add(s, cfg, k, &a, &norm2)) return false;
    gc_along_finish(cfg, s, &a, norm2);
    return gc_check_along(s, cfg, R, k, &a, ref);
}

/* FAST: every checked input moved at once along one unit direction u over
 * all of them (opts.v[k] as given for input k's part): two forwards
 * whatever the number of inputs. The one comparison is input k's (the
 * first checked); the other checked inputs are folded into it
 * (result.joint) and their own entries left unchecked. */
static bool gc_check_fast(gc_session *s, const gc_config *cfg, tg_gradcheck_result *R, int k, gc_ref *ref) {
    gc_along a;
    memset(&a, 0, sizeof a);
    double norm2 = 0.0;
    int64_t N = 0;
    R->joint = 0;
    for (int j = 0; j < s->n; j++) {
        if (!(cfg->mask >> j & 1u)) continue;
        R->joint |= (uint32_t)1 << j;
        if (j != k) R->input[j].checked = false;
        double n2 = 0.0;
        if (s->x[j]->numel == 0) continue;
        if (!gc_along_add(s, cfg, j, &a, &n2)) return false;
        if (!cfg->o.v[j].data) norm2 += n2;
        N += s->x[j]->numel;
    }
    if (N == 0) return true;
    gc_along_finish(cfg, s, &a, norm2);
    return gc_check_along(s, cfg, R, k, &a, ref);
}

/* Jacobians are capped so a slip (a big input) fails fast, not slowly. */
#define GC_JACOBIAN_MAX ((int64_t)1 << 22)

/* Refuses a Jacobian of over GC_JACOBIAN_MAX entries. */
static bool gc_jacobian_fits(gc_session *s, const tg_tensor *y, const tg_tensor *x) {
    int64_t M = y->numel, N = x->numel;
    if (N == 0 || M <= GC_JACOBIAN_MAX / N) return true;
    char s1[TG_SHAPE_STR], s2[TG_SHAPE_STR];
    tg_error(s->ctx, TG_ERR_VALUE, s->fn,
             "the Jacobian of an output of shape %s by an input of shape %s has over %lld entries: this mode is for "
             "small functions",
             tg_shape_of(s1, y), tg_shape_of(s2, x), (long long)GC_JACOBIAN_MAX);
    return false;
}

/* Analytic Jacobians of y by the inputs in mask: row j is the gradient of
 * y_j, a backward seeded with e_j on the kept tape; J[k] is numel(y) x
 * numel(x_k), row-major (zeros when y does not require grad). */
static bool gc_jacobian_analytic(gc_session *s, tg_tensor *y, uint32_t mask, double *const *J, int64_t *n_backwards) {
    tg_ctx *ctx = s->ctx;
    if (!y->requires_grad) return true;
    tg_tensor *e = tg_zeros(ctx, y->dtype, y->ndim, y->shape);
    if (!e) return false;
    for (int64_t j = 0; j < y->numel; j++) {
        gc_mark m = gc_arena_mark(ctx);
        for (int k = 0; k < s->n; k++)
            if (mask >> k & 1u) tg_zero_grad(ctx, s->x[k]);
        tg_store(e, j, 1.0);
        tg_backward_ex(ctx, y, e, true);
        tg_store(e, j, 0.0);
        (*n_backwards)++;
        if (!tg_ok(ctx)) return false;
        for (int k = 0; k < s->n; k++) {
            if (!(mask >> k & 1u)) continue;
            const tg_tensor *x = s->x[k];
            for (int64_t i = 0; i < x->numel; i++) J[k][j * x->numel + i] = x->grad ? tg_load(x->grad, i) : 0.0;
        }
        gc_arena_rollback(ctx, m);
    }
    return true;
}

/* Numeric Jacobian of y by input k: column i is (y(x + h_i e_i) -
 * y(x - h_i e_i)) / (x+_i - x-_i), or against y0 with forward differences;
 * rnd (when not NULL) gets each entry's rounding error, curv (when not
 * NULL) its second difference y+ - 2 y0 + y-. */
static bool gc_jacobian_numeric(gc_session *s, const gc_config *cfg, tg_gradcheck_result *R, int k,
                                const gc_input_steps *st, gc_ref *ref, double *J, double *rnd, double *steps,
                                double *curv) {
    int64_t M = ref->M, N = s->x[k]->numel;
    for (int64_t i = 0; i < N; i++) {
        double d;
        if (!gc_sides(s, cfg, k, i, st->step[i], NULL, 0.0, ref, &d)) return false;
        if (!gc_step_kept(s, cfg, R, k, i, d, st->step[i])) return false;
        if (steps) steps[i] = d;
        for (int64_t j = 0; j < M; j++) {
            double a = ref->yp[j], b = ref->ym[j];
            J[j * N + i] = (a - b) / d;
            if (curv) curv[j * N + i] = a - 2 * ref->y0[j] + b;
            if (rnd) rnd[j * N + i] = TG_GRADCHECK_C_ROUND * cfg->eps * (fabs(a) + fabs(b)) / d;
        }
    }
    return true;
}

/* JACOBIAN: every entry of input k's Jacobian; Ja from the backwards. */
static bool gc_check_jacobian(gc_session *s, const gc_config *cfg, tg_gradcheck_result *R, int k, gc_ref *ref,
                              const double *Ja) {
    tg_ctx *ctx = s->ctx;
    int64_t M = ref->M, N = s->x[k]->numel;
    gc_input_steps st;
    if (!gc_prepare(s, cfg, k, &st)) return false;
    size_t bytes = (size_t)(M * N > 0 ? M * N : 1) * sizeof(double);
    double *Jn = tg_arena_alloc_fn(ctx, s->fn, bytes), *rnd = tg_arena_alloc_fn(ctx, s->fn, bytes);
    double *d = tg_arena_alloc_fn(ctx, s->fn, (size_t)(N > 0 ? N : 1) * sizeof *d);
    double *trunc = tg_arena_alloc_fn(ctx, s->fn, bytes), *curv = tg_arena_alloc_fn(ctx, s->fn, bytes), *col[2];
    double *pers = tg_arena_alloc_fn(ctx, s->fn, bytes);
    for (int m = 0; m < 2; m++) col[m] = tg_arena_alloc_fn(ctx, s->fn, (size_t)(M > 0 ? M : 1) * sizeof(double));
    if (!Jn || !rnd || !d || !trunc || !curv || !pers || !col[0] || !col[1] ||
        !gc_jacobian_numeric(s, cfg, R, k, &st, ref, Jn, rnd, d, curv))
        return false;
    double G = gc_rms_pair(Ja, Jn, M * N);
    gc_set_scale(cfg, R, k, G);
    for (int64_t i = 0; i < N; i++) {
        bool failing = false;
        for (int64_t j = 0; j < M; j++) {
            double a = Ja[j * N + i], n = Jn[j * N + i];
            trunc[j * N + i] = gc_trunc(cfg, st.step[i] / st.ell[i], G, curv[j * N + i], st.ell[i]);
            pers[j * N + i] = fabs(a - n);
            failing |= !(fabs(a - n) <= R->input[k].atol_used + R->rtol * fabs(n));
        }
        if (!failing) continue;
        /* a failing column: its truncation measured at a half and a
         * quarter of the step (gc_measured, entry by entry) */
        double dd[3] = {d[i], 0, 0};
        for (int m = 1; m <= 2; m++) {
            if (!gc_sides(s, cfg, k, i, (m == 1 ? 0.5 : 0.25) * st.step[i], NULL, 0.0, ref, &dd[m])) return false;
            for (int64_t j = 0; j < M; j++) col[m - 1][j] = (ref->yp[j] - ref->ym[j]) / dd[m];
        }
        for (int64_t j = 0; j < M; j++) {
            double a = Ja[j * N + i], e[3] = {a - Jn[j * N + i], a - col[0][j], a - col[1][j]};
            gc_telescope(cfg, e, dd, 1.0, &trunc[j * N + i], &rnd[j * N + i], &pers[j * N + i]);
        }
    }
    for (int64_t j = 0; j < M; j++)
        for (int64_t i = 0; i < N; i++)
            gc_compare(cfg, R, k, i, j, Ja[j * N + i], Jn[j * N + i], st.step[i], trunc[j * N + i], rnd[j * N + i],
                       pers[j * N + i]);
    if (!gc_constant(s, R, k, st.ell, NULL, ref)) return false;
    R->input[k].step_min = st.lo;
    R->input[k].step_max = st.hi;
    R->input[k].scale = st.ell_rms;
    return true;
}

/* ---- public entry points --------------------------------------------------- */

static bool gc_check_args(tg_ctx *ctx, const char *fn, tg_gradcheck_fn f, int n_inputs, tg_tensor *const *inputs) {
    if (!f || !inputs) {
        tg_null_error(ctx, fn, f ? "inputs" : "f");
        return false;
    }
    if (n_inputs < 1 || n_inputs > TG_GRADCHECK_MAX_INPUTS) {
        tg_error(ctx, TG_ERR_VALUE, fn, "n_inputs %d is outside 1..%d", n_inputs, TG_GRADCHECK_MAX_INPUTS);
        return false;
    }
    for (int k = 0; k < n_inputs; k++) {
        if (!inputs[k]) {
            char name[32];
            snprintf(name, sizeof name, "inputs[%d]", k);
            return tg_null_error(ctx, fn, name);
        }
    }
    return true;
}

bool tg_gradcheck_start(tg_ctx *ctx, const char *fn, tg_gradcheck_result *result) {
    if (result) {
        memset(result, 0, sizeof *result);
        result->worst_input = -1;
        result->worst_index = -1;
        result->worst_output = -1;
        result->vanished_input = -1;
        result->vanished_index = -1;
        result->verdict = TG_VERDICT_INCONCLUSIVE;
        result->reason = TG_REASON_ERROR; /* until a verdict is reached */
    }
    if (!tg_ok(ctx)) return false;
    if (!result) {
        tg_null_error(ctx, fn, "result");
        return false;
    }
    return true;
}

double tg_gradcheck_weight(uint64_t seed, int64_t j) { return gc_uniform_pm1(seed, GC_STREAM, (uint64_t)j); }

/* The weighting r: opts.r, or uniform in [-1, 1) from the seed. */
static tg_tensor *gc_weights(gc_session *s, const gc_config *cfg, const tg_tensor *y) {
    tg_tensor *r = tg_new_like(s->ctx, s->fn, y);
    if (!r) return NULL;
    if (cfg->o.r.data && cfg->o.r.numel != y->numel) {
        char sh[TG_SHAPE_STR];
        tg_error(s->ctx, TG_ERR_SHAPE, s->fn, "opts.r has %lld values; the output %s has %lld",
                 (long long)cfg->o.r.numel, tg_shape_of(sh, y), (long long)y->numel);
        return NULL;
    }
    double norm = 0.0;
    for (int64_t j = 0; j < r->numel; j++) {
        tg_store(r, j, cfg->o.r.data ? cfg->o.r.data[j] : tg_gradcheck_weight(cfg->o.seed, j));
        norm += tg_load(r, j) * tg_load(r, j);
    }
    /* a zero r weights every output by 0: L = 0 whatever f and its
     * backward, and the check would compare 0 with 0 */
    if (r->numel > 0 && (!(norm > 0) || !isfinite(norm))) {
        tg_error(s->ctx, TG_ERR_VALUE, s->fn,
                 "opts.r is zero or not finite (|r| = %g): L = sum_j r_j y_j would not see the output, and the check "
                 "would compare nothing",
                 sqrt(norm));
        return NULL;
    }
    return r;
}

/* The reference of the differences: y0 (the recorded output's values, or
 * with forward differences a no-grad evaluation like the rest), r's values
 * as the dtype stores them, L0, and the scratch. Taken before any input
 * moves, since y may be a view of an input. */
static bool gc_make_ref(gc_session *s, const gc_config *cfg, const tg_tensor *y, const tg_tensor *r, gc_ref *ref) {
    int64_t M = y->numel;
    size_t bytes = (size_t)(M > 0 ? M : 1) * sizeof(double);
    double *y0 = tg_arena_alloc_fn(s->ctx, s->fn, bytes), *rv = tg_arena_alloc_fn(s->ctx, s->fn, bytes);
    ref->yp = tg_arena_alloc_fn(s->ctx, s->fn, bytes);
    ref->ym = tg_arena_alloc_fn(s->ctx, s->fn, bytes);
    ref->dep = tg_arena_alloc_fn(s->ctx, s->fn, (size_t)(M > 0 ? M : 1));
    if (!y0 || !rv || !ref->yp || !ref->ym || !ref->dep) return false;
    ref->M = M;
    for (int64_t j = 0; j < M; j++) {
        y0[j] = tg_load(y, j);
        rv[j] = r ? tg_load(r, j) : 1.0;
    }
    if (cfg->o.forward_diff && !gc_values(s, y0)) return false;
    ref->y0 = y0;
    ref->r = rv;
    ref->L0 = gc_weighted_sum(rv, y0, M);
    return true;
}

bool tg_gradcheck(tg_ctx *ctx, tg_gradcheck_fn f, void *user, int n_inputs, tg_tensor *const *inputs,
                  const tg_gradcheck_opts *opts, tg_gradcheck_result *result) {
    if (!tg_gradcheck_start(ctx, __func__, result) || !gc_check_args(ctx, __func__, f, n_inputs, inputs)) return false;
    gc_config cfg;
    if (!gc_configure(ctx, __func__, opts, n_inputs, inputs, opts ? opts->inputs : 0, &cfg)) return false;

    tg_gradcheck_result *R = result;
    R->h = cfg.o.h;
    R->atol = cfg.o.atol;
    R->rtol = cfg.o.rtol;
    R->mode = cfg.o.mode;
    R->forward_diff = cfg.o.forward_diff;
    R->step = cfg.o.step;
    R->atol_scale = cfg.o.atol_scale;
    R->dtype = cfg.dtype;
    R->eps = cfg.eps;
    R->seed = cfg.o.seed;
    R->n_inputs = n_inputs;
    for (int k = 0; k < n_inputs; k++) {
        R->input[k].checked = cfg.mask >> k & 1u;
        R->input[k].worst_index = -1;
        R->input[k].worst_output = -1;
    }

    gc_session s;
    gc_begin(&s, ctx, __func__, f, user, n_inputs);
    bool ok = gc_copy_inputs(&s, inputs, cfg.mask);
    bool jac = cfg.o.mode == TG_GRADCHECK_JACOBIAN;

    /* The analytic side: one recorded forward, then one backward seeded with
     * r, or (JACOBIAN) one per output element on the kept tape. */
    tg_tensor *y = ok ? gc_eval(&s, true) : NULL;
    tg_tensor *r = y && !jac ? gc_weights(&s, &cfg, y) : NULL;
    double *J[TG_GRADCHECK_MAX_INPUTS] = {0};
    ok = y != NULL && (jac || r != NULL);
    if (ok) s.out0 = y;
    if (ok && jac) {
        for (int k = 0; ok && k < n_inputs; k++) {
            if (!R->input[k].checked) continue;
            ok = gc_jacobian_fits(&s, y, s.x[k]);
            int64_t n = y->numel * s.x[k]->numel;
            if (ok) J[k] = tg_arena_alloc_fn(ctx, __func__, (size_t)(n > 0 ? n : 1) * sizeof(double));
            if (ok && !J[k]) ok = false;
            if (ok) memset(J[k], 0, (size_t)(n > 0 ? n : 1) * sizeof(double));
        }
        if (ok) ok = gc_jacobian_analytic(&s, y, cfg.mask, J, &R->n_backwards);
    } else if (ok) {
        /* An output that does not require grad does not depend on any
         * checked input: every analytic derivative is 0 (the zeroed grads). */
        if (y->requires_grad) {
            tg_backward_ex(ctx, y, r, false);
            R->n_backwards = 1;
        }
        ok = tg_ok(ctx);
    }
    tg_set_grad_enabled(ctx, false);
    gc_ref ref;
    if (ok) ok = gc_make_ref(&s, &cfg, y, r, &ref);
    for (int k = 0; ok && k < n_inputs; k++) {
        if (!R->input[k].checked) continue;
        gc_mark m = gc_arena_mark(ctx);
        if (jac) ok = gc_check_jacobian(&s, &cfg, R, k, &ref, J[k]);
        else if (cfg.o.mode == TG_GRADCHECK_FULL) ok = gc_check_full(&s, &cfg, R, k, &ref);
        else if (cfg.o.mode == TG_GRADCHECK_FAST) ok = gc_check_fast(&s, &cfg, R, k, &ref);
        else ok = gc_check_directional(&s, &cfg, R, k, &ref);
        gc_arena_rollback(ctx, m);
        if (cfg.o.mode == TG_GRADCHECK_FAST) break; /* every input at once */
    }
    R->n_evals = s.n_evals;
    gc_end(&s);
    gc_summarize(R);
    if (!ok || !tg_ok(ctx)) tg_gradcheck_stopped(R);
    return R->pass;
}

bool tg_gradcheck_jacobian(tg_ctx *ctx, tg_gradcheck_fn f, void *user, int n_inputs, tg_tensor *const *inputs,
                           int input, const tg_gradcheck_opts *opts, tg_tensor **analytic, tg_tensor **numeric) {
    if (analytic) *analytic = NULL;
    if (numeric) *numeric = NULL;
    if (!tg_ok(ctx)) return false;
    if (!analytic || !numeric) {
        tg_null_error(ctx, __func__, analytic ? "numeric" : "analytic");
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
    ok = y != NULL && gc_jacobian_fits(&s, y, s.x[input]);
    if (ok) {
        s.out0 = y;
        int64_t shape[2] = {y->numel, s.x[input]->numel};
        Ja = tg_zeros(ctx, TG_F64, 2, shape);
        Jn = tg_zeros(ctx, TG_F64, 2, shape);
        ok = Ja && Jn;
    }
    double *J[TG_GRADCHECK_MAX_INPUTS] = {0};
    int64_t n_backwards = 0;
    if (ok) {
        J[input] = Ja->data;
        ok = gc_jacobian_analytic(&s, y, cfg.mask, J, &n_backwards);
    }
    tg_set_grad_enabled(ctx, false);
    gc_ref ref;
    gc_input_steps st;
    tg_gradcheck_result R;
    tg_gradcheck_start(ctx, __func__, &R);
    if (ok)
        ok = gc_make_ref(&s, &cfg, y, NULL, &ref) && gc_prepare(&s, &cfg, input, &st) &&
             gc_jacobian_numeric(&s, &cfg, &R, input, &st, &ref, Jn->data, NULL, NULL, NULL);
    gc_end(&s);
    if (!ok || !tg_ok(ctx)) return false;
    *analytic = Ja;
    *numeric = Jn;
    return true;
}

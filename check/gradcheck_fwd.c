/* Forward-mode checks: the JVP against finite differences, and the adjoint
 * (dot-product) test of forward against reverse mode.
 *
 * JVP (tg_gradcheck_fwd), as JAX's check_jvp: for one direction v_k per
 * input (random in [-1, 1), or opts.v), every output element of
 *     J_k v_k                                   one tg_jvp
 * against
 *     (f(x_k + h v_k) - f(x_k - h v_k)) / 2h    two forwards
 * under the pass rule of tg_gradcheck, |a - n| <= atol + rtol |n|, plus
 * the rounding error of the quotient, C eps |f| / h (C =
 * TG_GRADCHECK_C_ROUND). The direction used for J is the one actually
 * stored, (x+ - x-) / 2h, so rounding of the step costs nothing.
 *
 * Adjoint (tg_gradcheck_adjoint): for a random u over the output and v_k,
 *     <u, J_k v_k>   (forward mode, tg_jvp)
 *     <J_k^T u, v_k> (reverse mode, one backward seeded with u)
 * are the same number in exact arithmetic: no step h, no truncation, only
 * the rounding of the two passes. So the tolerance is a few units of
 * rounding, derived from the dtype's epsilon and the sizes:
 *     tol = C eps sqrt(M + N_k) (|u| |J v| + |J^T u| |v|)
 * (M outputs, N_k elements of input k, |.| Euclidean norms; C =
 * TG_GRADCHECK_C_ADJOINT), by Cauchy-Schwarz the scale of the terms of
 * either dot product, times a rounding error that grows like the square
 * root of the number of terms summed. A backward off by a relative 1e-6
 * passes tg_gradcheck's float64 tolerance (rtol 1e-3) and fails here by
 * orders of magnitude (docs/gradcheck-guide.md, forward mode).
 *
 * As tg_gradcheck: copies of the inputs, a private tape, grad mode
 * restored, every evaluation from the same RNG state. */
#include "autograd/tape.h"
#include "check/registry.h"

#include <float.h>
#include <math.h>
#include <string.h>

/* u over the output: stream FW_STREAM; v_k: FW_STREAM + 1 + k. */
#define FW_STREAM ((uint64_t)0x7f4a7c15u << 32)

static double fw_uniform_pm1(uint64_t seed, uint64_t stream, uint64_t i) {
    uint32_t ctr[4] = {(uint32_t)i, (uint32_t)(i >> 32), (uint32_t)stream, (uint32_t)(stream >> 32)};
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)}, x[4];
    tg_philox4x32_10(x, ctr, key);
    return 2.0 * tg_u01_f64(x[0], x[1]) - 1.0;
}

/* One check's state: the caller's tape, RNG and grad mode put aside, the
 * inputs' copies (leaves requiring grad where checked), the recorded
 * output. */
typedef struct fw_session {
    tg_ctx *ctx;
    const char *fn;
    tg_gradcheck_fn f;
    void *user;
    int n;
    tg_tape tape;
    bool grad_was;
    uint64_t rng_seed, rng_offset;
    tg_tensor *x[TG_GRADCHECK_MAX_INPUTS];
    uint32_t mask; /* checked inputs */
    tg_tensor *y;  /* f on the copies, recorded */
    tg_dtype dtype;
    tg_gradcheck_opts o;
} fw_session;

static tg_tensor *fw_eval(fw_session *s, tg_tensor *const *x, bool record) {
    tg_rng_set_state(s->ctx, s->rng_seed, s->rng_offset);
    tg_set_grad_enabled(s->ctx, record);
    tg_tensor *y = s->f(s->ctx, x, s->user);
    tg_set_grad_enabled(s->ctx, false);
    if (!y && tg_ok(s->ctx)) tg_error(s->ctx, TG_ERR_STATE, s->fn, "the checked function returned NULL");
    return tg_ok(s->ctx) ? y : NULL;
}

static bool fw_begin(fw_session *s, tg_ctx *ctx, const char *fn, tg_gradcheck_fn f, void *user, int n,
                     tg_tensor *const *inputs, const tg_gradcheck_opts *opts, tg_gradcheck_result *R) {
    memset(s, 0, sizeof *s);
    if (!tg_gradcheck_start(ctx, fn, R)) return false;
    if (!f || !inputs || n < 1 || n > TG_GRADCHECK_MAX_INPUTS) {
        tg_error(ctx, TG_ERR_VALUE, fn, "need a function and 1..%d inputs (n_inputs = %d)", TG_GRADCHECK_MAX_INPUTS, n);
        return false;
    }
    s->o = opts ? *opts : tg_gradcheck_defaults();
    s->mask = s->o.inputs ? s->o.inputs : (uint32_t)((1u << n) - 1);
    s->dtype = TG_F64;
    for (int k = 0; k < n; k++) {
        char what[24];
        snprintf(what, sizeof what, "inputs[%d]", k);
        if (!tg_check_arg(ctx, fn, what, inputs[k])) return false;
        if ((s->mask >> k) & 1 && inputs[k]->dtype == TG_F32) s->dtype = TG_F32;
    }
    if (s->dtype == TG_F32 && !s->o.allow_float32) {
        tg_error(ctx, TG_ERR_DTYPE, fn, "float32 inputs: set allow_float32 (the tolerances are float32's then)");
        return false;
    }
    tg_gradcheck_tol d = tg_gradcheck_dtype_tol(s->dtype);
    if (!s->o.no_defaults) {
        if (s->o.h == 0) s->o.h = d.h;
        if (s->o.atol == 0) s->o.atol = d.atol;
        if (s->o.rtol == 0) s->o.rtol = d.rtol;
    }
    s->ctx = ctx, s->fn = fn, s->f = f, s->user = user, s->n = n;
    tg_tape_stash(ctx, &s->tape);
    s->grad_was = tg_set_grad_enabled(ctx, false);
    tg_rng_state(ctx, &s->rng_seed, &s->rng_offset);
    for (int k = 0; k < n; k++) {
        s->x[k] = tg_copy(ctx, inputs[k]);
        if (s->x[k] && (s->mask >> k) & 1) tg_requires_grad(ctx, s->x[k]);
    }
    if (tg_ok(ctx)) s->y = fw_eval(s, s->x, true);
    R->n_evals = 1;
    R->n_inputs = n;
    R->dtype = s->dtype;
    R->eps = s->dtype == TG_F32 ? FLT_EPSILON : DBL_EPSILON;
    R->seed = s->o.seed;
    R->mode = TG_GRADCHECK_DIRECTIONAL;
    R->step = TG_GRADCHECK_STEP_ABSOLUTE;
    R->atol_scale = TG_GRADCHECK_ATOL_ABSOLUTE;
    return tg_ok(ctx);
}

static void fw_end(fw_session *s) {
    tg_tape_restore(s->ctx, &s->tape);
    tg_set_grad_enabled(s->ctx, s->grad_was);
    tg_rng_set_state(s->ctx, s->rng_seed, s->rng_offset);
}

/* The direction of input k: opts.v[k] as given, or uniform in [-1, 1). */
static tg_tensor *fw_direction(fw_session *s, int k) {
    const tg_tensor *x = s->x[k];
    const tg_gradcheck_vec *v = &s->o.v[k];
    if (v->data && v->numel != x->numel) {
        char sh[TG_SHAPE_STR];
        tg_error(s->ctx, TG_ERR_SHAPE, s->fn, "opts.v[%d] has %lld values; input %d %s has %lld", k,
                 (long long)v->numel, k, tg_shape_of(sh, x), (long long)x->numel);
        return NULL;
    }
    tg_tensor *d = tg_new_like(s->ctx, s->fn, x);
    for (int64_t i = 0; d && i < d->numel; i++)
        tg_store(d, i, v->data ? v->data[i] : fw_uniform_pm1(s->o.seed, FW_STREAM + 1 + (uint64_t)k, (uint64_t)i));
    return d;
}

/* J_k d, from the recorded output (zeros when y does not depend on x). */
static tg_tensor *fw_jvp(fw_session *s, int k, tg_tensor *d) { return tg_jvp(s->ctx, s->y, 1, &s->x[k], &d); }

/* One comparison into input k's result and the overall one: it passes
 * within tol; a failure is wrong beyond `bound` (the check's own error;
 * an analytic NaN always), undecided within it or when n is not finite; a
 * zero analytic value failing here means it saw a derivative. */
static void fw_compare(tg_gradcheck_result *R, int k, int64_t j, double a, double n, double tol, double atol,
                       double bound, double persist) {
    tg_gradcheck_input *in = &R->input[k];
    double err = fabs(a - n), ratio = tol > 0 ? err / tol : (err > 0 ? INFINITY : 0);
    bool pass = err <= tol;
    if (isnan(a) || isnan(n)) ratio = NAN, pass = false;
    in->n_checked++;
    R->n_checked++;
    if (!pass) in->n_failed++, R->n_failed++;
    if (!pass && isfinite(n) && !(fmin(err, persist) <= bound)) in->n_wrong++;
    if (isfinite(n) && fabs(n) > tol) in->n_resolved++;
    if (err > in->max_abs_err || isnan(err)) in->max_abs_err = err;
    double rel = err / fmax(fabs(n), atol > 0 ? atol : 1e-300);
    if (rel > in->max_rel_err || isnan(rel)) in->max_rel_err = rel;
    if (in->worst_output < 0 || isnan(ratio) || ratio > in->worst_ratio) {
        in->worst_output = j;
        in->worst_analytic = a;
        in->worst_numeric = n;
        in->worst_ratio = ratio;
    }
}

static void fw_summarize(tg_gradcheck_result *R) {
    for (int k = 0; k < R->n_inputs; k++) {
        tg_gradcheck_input *in = &R->input[k];
        if (!in->checked) continue;
        if (in->max_abs_err > R->max_abs_err || isnan(in->max_abs_err)) R->max_abs_err = in->max_abs_err;
        if (in->max_rel_err > R->max_rel_err || isnan(in->max_rel_err)) R->max_rel_err = in->max_rel_err;
        if (R->worst_input < 0 || isnan(in->worst_ratio) || in->worst_ratio > R->worst_ratio) {
            R->worst_input = k;
            R->worst_output = in->worst_output;
            R->worst_analytic = in->worst_analytic;
            R->worst_numeric = in->worst_numeric;
            R->worst_ratio = in->worst_ratio;
        }
    }
    tg_gradcheck_decide(R);
}

/* An input no comparison saw a derivative in: does f depend on it at all?
 * f at x_k +- d, d the direction scaled to the input's root mean square
 * (1 for a zero input): when no output weighted by u (NULL: every output)
 * moves, the derivative is exactly zero and the check's agreement real
 * (input->constant); else it saw nothing (TG_REASON_ALL_ZERO). */
static bool fw_constant(fw_session *s, tg_gradcheck_result *R, int k, const tg_tensor *d, const tg_tensor *u) {
    tg_gradcheck_input *in = &R->input[k];
    if (s->y->numel == 0) in->constant = true; /* no output depends on anything */
    if (in->n_checked == 0 || in->n_failed || in->n_resolved) return true;
    tg_ctx *ctx = s->ctx;
    const tg_tensor *x = s->x[k];
    double xx = 0, dd = 0;
    for (int64_t i = 0; i < x->numel; i++) xx += tg_load(x, i) * tg_load(x, i), dd += tg_load(d, i) * tg_load(d, i);
    double c = (xx > 0 ? sqrt(xx) : sqrt((double)x->numel)) / (dd > 0 ? sqrt(dd) : 1.0);
    tg_tensor *xs[TG_GRADCHECK_MAX_INPUTS], *xm = tg_copy(ctx, x);
    double *y0 = tg_arena_alloc_fn(ctx, s->fn, (size_t)(s->y->numel ? s->y->numel : 1) * sizeof *y0);
    if (!xm || !y0) return false;
    for (int j = 0; j < s->n; j++) xs[j] = s->x[j];
    /* against f at x evaluated as the probes are (no grad): the recorded
     * output may differ in the last bit (a gradient recorded with
     * create_graph against a plain backward's) */
    tg_tensor *base = fw_eval(s, xs, false);
    R->n_evals++;
    if (!base) return false;
    for (int64_t j = 0; j < base->numel; j++) y0[j] = tg_load(base, j);
    xs[k] = xm;
    bool constant = dd > 0;
    for (int side = -1; constant && side <= 1; side += 2) {
        bool moved = false;
        for (int64_t i = 0; i < x->numel; i++) {
            tg_store(xm, i, tg_load(x, i) + side * c * tg_load(d, i));
            moved |= tg_load(xm, i) != tg_load(x, i);
        }
        tg_tensor *y = fw_eval(s, xs, false);
        R->n_evals++;
        if (!y) return false;
        constant = moved;
        for (int64_t j = 0; constant && j < y->numel; j++)
            constant = (u && tg_load(u, j) == 0) || tg_load(y, j) == y0[j];
    }
    in->constant = constant;
    return true;
}

static void fw_input_start(tg_gradcheck_input *in) {
    in->checked = true;
    in->worst_index = -1;
    in->worst_output = -1;
}

/* ---- JVP against finite differences ------------------------------------------ */

/* Input k: the outputs at x_k +- h d, the stored direction (x+ - x-) / 2h,
 * J_k of it, and every output element compared. */
/* The outputs at x_k +- f h d (d the direction as drawn) into vp, vm (M
 * values each). */
static bool fw_sides(fw_session *s, tg_gradcheck_result *R, int k, double fh, const tg_tensor *d, double *vp,
                     double *vm) {
    tg_ctx *ctx = s->ctx;
    const tg_tensor *x = s->x[k];
    tg_tensor *xs[TG_GRADCHECK_MAX_INPUTS], *xk = tg_copy(ctx, x);
    if (!xk) return false;
    for (int j = 0; j < s->n; j++) xs[j] = s->x[j];
    xs[k] = xk;
    for (int side = 1; side >= -1; side -= 2) {
        for (int64_t i = 0; i < x->numel; i++) tg_store(xk, i, tg_load(x, i) + side * fh * tg_load(d, i));
        tg_tensor *y = fw_eval(s, xs, false);
        R->n_evals++;
        if (!y) return false;
        double *v = side > 0 ? vp : vm;
        for (int64_t j = 0; j < y->numel; j++) v[j] = tg_load(y, j); /* before the next evaluation */
    }
    return true;
}

/* Input k: the outputs at x_k +- h d, the stored direction (x+ - x-) / 2h,
 * J_k of it, and every output element compared; a failing output's
 * truncation measured at h / 2 and h / 4 (tg_gradcheck's gc_measured). */
static bool fw_check_jvp(fw_session *s, tg_gradcheck_result *R, int k) {
    tg_ctx *ctx = s->ctx;
    tg_gradcheck_input *in = &R->input[k];
    fw_input_start(in);
    tg_tensor *d0 = fw_direction(s, k), *d = d0 ? tg_copy(ctx, d0) : NULL;
    if (!d) return false;
    /* the step relative to the input's root mean square, as tg_gradcheck's
     * STEP_SCALED default */
    double h = s->o.h, ms = 0;
    const tg_tensor *x = s->x[k];
    for (int64_t i = 0; i < x->numel; i++) ms += tg_load(x, i) * tg_load(x, i);
    if (s->o.step == TG_GRADCHECK_STEP_AUTO || s->o.step == TG_GRADCHECK_STEP_SCALED) {
        h *= x->numel && ms > 0 ? sqrt(ms / (double)x->numel) : 1.0;
        R->step = TG_GRADCHECK_STEP_SCALED;
    }
    in->step_min = in->step_max = h;
    tg_tensor *xp = tg_copy(ctx, x), *xm = tg_copy(ctx, x);
    if (!xp || !xm) return false;
    for (int64_t i = 0; i < x->numel; i++) {
        tg_store(xp, i, tg_load(x, i) + h * tg_load(d, i));
        tg_store(xm, i, tg_load(x, i) - h * tg_load(d, i));
        tg_store(d, i, (tg_load(xp, i) - tg_load(xm, i)) / (2 * h)); /* the direction as stored */
    }
    const int64_t M = s->y->numel;
    size_t bytes = (size_t)(M ? M : 1) * sizeof(double);
    double *v[6];
    for (int m = 0; m < 6; m++)
        if (!(v[m] = tg_arena_alloc_fn(ctx, s->fn, bytes))) return false;
    if (!fw_sides(s, R, k, h, d0, v[0], v[1])) return false;
    tg_tensor *a = fw_jvp(s, k, d);
    if (!a) return false;
    double atol = s->o.atol, g2 = 0, n2 = 0;
    if (s->o.atol_scale != TG_GRADCHECK_ATOL_ABSOLUTE) {
        for (int64_t j = 0; j < M; j++) {
            double n = (v[0][j] - v[1][j]) / (2 * h);
            g2 += tg_load(a, j) * tg_load(a, j);
            n2 += isfinite(n) ? n * n : 0;
        }
        atol *= M ? sqrt(fmax(g2, n2) / (double)M) : 0.0;
        R->atol_scale = TG_GRADCHECK_ATOL_GRADIENT;
    }
    in->atol_used = atol;
    /* plus the rounding of the quotient itself, C eps |f| / h (tg_gradcheck's
     * predicted rounding error): where J v is small against f -- a loss
     * whose terms cancel along v -- in float32 it is all the difference
     * there is */
    bool measured = false;
    for (int64_t j = 0; j < M; j++) {
        double num = (v[0][j] - v[1][j]) / (2 * h), an = tg_load(a, j);
        double round = TG_GRADCHECK_C_ROUND * R->eps * fmax(fabs(v[0][j]), fabs(v[1][j])) / h;
        double tol = atol + s->o.rtol * fabs(num) + round, bound = INFINITY, persist = fabs(an - num);
        if (!(fabs(an - num) <= tol)) {
            /* a failure: the truncation measured at h / 2 and h / 4 */
            if (!measured &&
                (!fw_sides(s, R, k, 0.5 * h, d0, v[2], v[3]) || !fw_sides(s, R, k, 0.25 * h, d0, v[4], v[5])))
                return false;
            measured = true;
            double e[3] = {an - num, an - (v[2][j] - v[3][j]) / h, an - (v[4][j] - v[5][j]) / (0.5 * h)};
            double t = fabs(e[0] - e[1]) + 4.0 / 3.0 * fabs(e[1] - e[2]);
            if (!(fabs(e[1] - e[2]) <= fmax(fabs(e[0] - e[1]), round * 6))) t = INFINITY; /* not converging */
            /* a wrong JVP's error stays as the step shrinks (tg_gradcheck's gc_telescope) */
            persist = fmin(fabs(e[0]), fmin(fabs(e[1]), fabs(e[2])));
            /* the roundings as tg_gradcheck's gc_telescope adds them */
            double rounds = round * (1 + sqrt(1 + 4 + 16.0 / 9.0 * (4 + 16)));
            bound = TG_GRADCHECK_WRONG_EXCESS * ((isfinite(t) ? t : INFINITY) + rounds);
        }
        fw_compare(R, k, j, an, num, tol, atol, bound, persist);
    }
    return fw_constant(s, R, k, d0, NULL);
}

bool tg_gradcheck_fwd(tg_ctx *ctx, tg_gradcheck_fn f, void *user, int n_inputs, tg_tensor *const *inputs,
                      const tg_gradcheck_opts *opts, tg_gradcheck_result *result) {
    fw_session s;
    bool ok = fw_begin(&s, ctx, __func__, f, user, n_inputs, inputs, opts, result);
    if (s.ctx) {
        for (int k = 0; ok && k < n_inputs; k++)
            if ((s.mask >> k) & 1) ok = fw_check_jvp(&s, result, k);
        fw_end(&s);
    }
    result->h = s.o.h, result->atol = s.o.atol, result->rtol = s.o.rtol;
    fw_summarize(result);
    if (!ok || !tg_ok(ctx)) tg_gradcheck_stopped(result);
    return result->pass;
}

/* ---- the adjoint test ------------------------------------------------------------ */

static double fw_norm(const tg_tensor *t) {
    double s = 0;
    for (int64_t i = 0; t && i < t->numel; i++) s += tg_load(t, i) * tg_load(t, i);
    return sqrt(s);
}

static double fw_dot(const tg_tensor *a, const tg_tensor *b) {
    double s = 0;
    for (int64_t i = 0; a && b && i < a->numel; i++) s += tg_load(a, i) * tg_load(b, i);
    return s;
}

bool tg_gradcheck_adjoint(tg_ctx *ctx, tg_gradcheck_fn f, void *user, int n_inputs, tg_tensor *const *inputs,
                          const tg_gradcheck_opts *opts, tg_gradcheck_result *result) {
    fw_session s;
    bool ok = fw_begin(&s, ctx, __func__, f, user, n_inputs, inputs, opts, result);
    if (!s.ctx) return false;
    tg_gradcheck_result *R = result;
    tg_tensor *u = ok ? tg_new_like(ctx, __func__, s.y) : NULL;
    if (u && s.o.r.data && s.o.r.numel != u->numel) {
        char sh[TG_SHAPE_STR];
        tg_error(ctx, TG_ERR_SHAPE, __func__, "opts.r has %lld values; the output %s has %lld", (long long)s.o.r.numel,
                 tg_shape_of(sh, s.y), (long long)s.y->numel);
    }
    double uu = 0;
    for (int64_t j = 0; u && tg_ok(ctx) && j < u->numel; j++) {
        tg_store(u, j, s.o.r.data ? s.o.r.data[j] : fw_uniform_pm1(s.o.seed, FW_STREAM, (uint64_t)j));
        uu += tg_load(u, j) * tg_load(u, j);
    }
    if (u && tg_ok(ctx) && u->numel > 0 && (!(uu > 0) || !isfinite(uu)))
        tg_error(ctx, TG_ERR_VALUE, __func__, "opts.r is zero or not finite (|u| = %g): both sides would be 0",
                 sqrt(uu));
    /* reverse mode: every J_k^T u from one backward (the tape kept for
     * tg_jvp); an output that does not depend on the inputs has J = 0 */
    ok = ok && tg_ok(ctx);
    if (ok && s.y->requires_grad) {
        for (int k = 0; k < n_inputs; k++)
            if ((s.mask >> k) & 1) tg_zero_grad(ctx, s.x[k]);
        tg_backward_ex(ctx, s.y, u, true);
        R->n_backwards = 1;
        ok = tg_ok(ctx);
    }
    const double eps = R->eps, M = (double)s.y->numel;
    for (int k = 0; ok && k < n_inputs; k++) {
        if (!((s.mask >> k) & 1)) continue;
        fw_input_start(&R->input[k]);
        tg_tensor *v = fw_direction(&s, k), *jv = v ? fw_jvp(&s, k, v) : NULL;
        if (!jv) {
            ok = false;
            break;
        }
        const tg_tensor *jtu = s.y->requires_grad ? s.x[k]->grad : NULL;
        double fwd = fw_dot(u, jv), rev = fw_dot(jtu, v);
        double scale = fw_norm(u) * fw_norm(jv) + fw_norm(jtu) * fw_norm(v);
        double tol = TG_GRADCHECK_C_ADJOINT * eps * sqrt(M + (double)v->numel) * scale;
        R->input[k].atol_used = tol;
        R->input[k].grad_scale = scale;
        /* no step, no truncation: a failure beyond the rounding is wrong */
        fw_compare(R, k, -1, fwd, rev, tol, tol, tol, fabs(fwd - rev));
        ok = fw_constant(&s, R, k, v, u);
    }
    fw_end(&s);
    R->h = 0, R->atol = 0, R->rtol = 0;
    fw_summarize(R);
    if (!ok || !tg_ok(ctx)) tg_gradcheck_stopped(R);
    return R->pass;
}

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
 * orders of magnitude (docs/gradcheck.md).
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

/* One comparison into input k's result and the overall one. */
static void fw_compare(tg_gradcheck_result *R, int k, int64_t j, double a, double n, double tol, double atol) {
    tg_gradcheck_input *in = &R->input[k];
    double err = fabs(a - n), ratio = tol > 0 ? err / tol : (err > 0 ? INFINITY : 0);
    bool pass = err <= tol;
    if (isnan(a) || isnan(n)) ratio = NAN, pass = false;
    in->n_checked++;
    R->n_checked++;
    if (!pass) in->n_failed++, R->n_failed++;
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
    R->pass = R->n_failed == 0;
    for (int k = 0; k < R->n_inputs; k++) {
        tg_gradcheck_input *in = &R->input[k];
        if (!in->checked) continue;
        in->pass = in->n_failed == 0;
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
}

static void fw_input_start(tg_gradcheck_input *in) {
    in->checked = true;
    in->worst_index = -1;
    in->worst_output = -1;
}

/* ---- JVP against finite differences ------------------------------------------ */

/* Input k: the outputs at x_k +- h d, the stored direction (x+ - x-) / 2h,
 * J_k of it, and every output element compared. */
static bool fw_check_jvp(fw_session *s, tg_gradcheck_result *R, int k) {
    tg_ctx *ctx = s->ctx;
    tg_gradcheck_input *in = &R->input[k];
    fw_input_start(in);
    tg_tensor *d = fw_direction(s, k), *xs[TG_GRADCHECK_MAX_INPUTS];
    if (!d) return false;
    /* float32: the step relative to the input's root mean square, as
     * tg_gradcheck's STEP_SCALED default */
    double h = s->o.h, ms = 0;
    const tg_tensor *x = s->x[k];
    for (int64_t i = 0; i < x->numel; i++) ms += tg_load(x, i) * tg_load(x, i);
    if (s->dtype == TG_F32 && (s->o.step == TG_GRADCHECK_STEP_AUTO || s->o.step == TG_GRADCHECK_STEP_SCALED))
        h *= x->numel && ms > 0 ? sqrt(ms / (double)x->numel) : 1.0;
    in->step_min = in->step_max = h;
    tg_tensor *xp = tg_copy(ctx, x), *xm = tg_copy(ctx, x);
    if (!xp || !xm) return false;
    for (int64_t i = 0; i < x->numel; i++) {
        tg_store(xp, i, tg_load(x, i) + h * tg_load(d, i));
        tg_store(xm, i, tg_load(x, i) - h * tg_load(d, i));
        tg_store(d, i, (tg_load(xp, i) - tg_load(xm, i)) / (2 * h)); /* the direction as stored */
    }
    for (int j = 0; j < s->n; j++) xs[j] = s->x[j];
    xs[k] = xp;
    tg_tensor *yp = fw_eval(s, xs, false);
    double *vp = yp ? tg_arena_alloc_fn(ctx, s->fn, (size_t)(yp->numel ? yp->numel : 1) * sizeof *vp) : NULL;
    for (int64_t j = 0; vp && j < yp->numel; j++) vp[j] = tg_load(yp, j); /* before the next evaluation */
    xs[k] = xm;
    tg_tensor *ym = vp ? fw_eval(s, xs, false) : NULL;
    R->n_evals += 2;
    tg_tensor *a = ym ? fw_jvp(s, k, d) : NULL;
    if (!a) return false;
    double atol = s->o.atol, g2 = 0;
    const int64_t M = a->numel;
    if (s->o.atol_scale == TG_GRADCHECK_ATOL_GRADIENT ||
        (s->o.atol_scale == TG_GRADCHECK_ATOL_AUTO && s->dtype == TG_F32)) {
        for (int64_t j = 0; j < M; j++) g2 += tg_load(a, j) * tg_load(a, j);
        atol *= M ? sqrt(g2 / (double)M) : 0.0;
        R->atol_scale = TG_GRADCHECK_ATOL_GRADIENT;
    }
    in->atol_used = atol;
    /* plus the rounding of the quotient itself, C eps |f| / h (tg_gradcheck's
     * predicted rounding error): where J v is small against f -- a loss
     * whose terms cancel along v -- in float32 it is all the difference
     * there is */
    for (int64_t j = 0; j < M; j++) {
        double num = (vp[j] - tg_load(ym, j)) / (2 * h), an = tg_load(a, j);
        double round = TG_GRADCHECK_C_ROUND * R->eps * fmax(fabs(vp[j]), fabs(tg_load(ym, j))) / h;
        fw_compare(R, k, j, an, num, atol + s->o.rtol * fabs(num) + round, atol);
    }
    return true;
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
    if (!ok) return result->pass = false;
    fw_summarize(result);
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
    for (int64_t j = 0; u && tg_ok(ctx) && j < u->numel; j++)
        tg_store(u, j, s.o.r.data ? s.o.r.data[j] : fw_uniform_pm1(s.o.seed, FW_STREAM, (uint64_t)j));
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
        fw_compare(R, k, -1, fwd, rev, tol, tol);
    }
    fw_end(&s);
    R->h = 0, R->atol = 0, R->rtol = 0;
    if (!ok) return R->pass = false;
    fw_summarize(R);
    return R->pass;
}

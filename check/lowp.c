/* Gradient checks in low precision: tg_gradcheck's refusal of bfloat16 /
 * float16, and tg_gradcheck_lowp, the comparison it points to
 * (tapegrad/check.h explains both). */
#include "check/lowp.h"

#include <math.h>
#include <string.h>

#include "autograd/tape.h"
#include "tapegrad/check.h"

/* Machine epsilon of the 16-bit dtypes: 2^-7 (8 significant bits) and
 * 2^-10 (11). */
static double lowp_eps(tg_dtype dtype) { return dtype == TG_BF16 ? 0x1p-7 : 0x1p-10; }

bool tg_gradcheck_refuse_lowp(tg_ctx *ctx, const char *fn, int k, tg_dtype dtype) {
    tg_error(ctx, TG_ERR_DTYPE, fn,
             "input %d is %s: its rounding (epsilon %g) swamps any difference quotient (a step small enough to "
             "follow f is lost in rounding, one large enough to survive it measures a chord, not the derivative); "
             "check the op in float64, and its %s path with tg_gradcheck_lowp (its %s gradients against float64 "
             "ones, tolerance 16 epsilon)",
             k, tg_dtype_name(dtype), lowp_eps(dtype), tg_dtype_name(dtype), tg_dtype_name(dtype));
    return false;
}

/* Runs f on leaves of `dtype` holding in64's values and back-propagates the
 * weighting r (one value per output element); grads[k] gets the input k's
 * gradient as float64 (arena). False on error. */
static bool lowp_side(tg_ctx *ctx, tg_gradcheck_fn f, void *user, int n, tg_tensor *const *in64, tg_dtype dtype,
                      const double *r, int64_t nr, double **grads) {
    tg_tensor *x[TG_GRADCHECK_MAX_INPUTS];
    for (int k = 0; k < n; k++) {
        x[k] = tg_requires_grad(ctx, tg_to_dtype(ctx, in64[k], dtype));
        if (!x[k]) return false;
    }
    tg_tensor *y = f(ctx, x, user);
    if (!y || !tg_ok(ctx)) {
        if (tg_ok(ctx)) tg_error(ctx, TG_ERR_STATE, "tg_gradcheck_lowp", "f returned NULL in %s", tg_dtype_name(dtype));
        return false;
    }
    if (nr != y->numel) {
        tg_error(ctx, TG_ERR_SHAPE, "tg_gradcheck_lowp", "f's output has %lld elements in %s but %lld in %s",
                 (long long)y->numel, tg_dtype_name(dtype), (long long)nr, tg_dtype_name(TG_F64));
        return false;
    }
    tg_tensor *seed = tg_new_like(ctx, "tg_gradcheck_lowp", y);
    if (!seed) return false;
    for (int64_t j = 0; j < nr; j++) tg_store(seed, j, r[j]);
    if (y->requires_grad) tg_backward_ex(ctx, y, seed, false);
    for (int k = 0; k < n && tg_ok(ctx); k++) {
        grads[k] =
            tg_arena_alloc_fn(ctx, "tg_gradcheck_lowp", (size_t)(x[k]->numel ? x[k]->numel : 1) * sizeof(double));
        if (!grads[k]) return false;
        for (int64_t i = 0; i < x[k]->numel; i++) grads[k][i] = x[k]->grad ? tg_load(x[k]->grad, i) : 0.0;
    }
    return tg_ok(ctx);
}

bool tg_gradcheck_lowp(tg_ctx *ctx, tg_gradcheck_fn f, void *user, int n_inputs, tg_tensor *const *inputs,
                       tg_dtype dtype, double tol, tg_gradcheck_lowp_result *result) {
    static const char fn[] = "tg_gradcheck_lowp";
    if (result) *result = (tg_gradcheck_lowp_result){.worst_input = -1, .worst_index = -1, .dtype = dtype};
    if (!tg_ok(ctx)) return false;
    if (!result || !f || !inputs) {
        tg_null_error(ctx, fn, !result ? "result" : !f ? "f" : "inputs");
        return false;
    }
    if (n_inputs < 1 || n_inputs > TG_GRADCHECK_MAX_INPUTS) {
        tg_error(ctx, TG_ERR_VALUE, fn, "n_inputs %d is outside 1..%d", n_inputs, TG_GRADCHECK_MAX_INPUTS);
        return false;
    }
    if (!tg_is_lowp(dtype)) {
        tg_error(ctx, TG_ERR_DTYPE, fn, "dtype %s is not bfloat16 or float16 (use tg_gradcheck)", tg_dtype_name(dtype));
        return false;
    }
    if (!(tol >= 0) || !isfinite(tol)) {
        tg_error(ctx, TG_ERR_VALUE, fn, "tol = %g must be >= 0 and finite", tol);
        return false;
    }
    for (int k = 0; k < n_inputs; k++) {
        if (!tg_check_arg_any(ctx, fn, "inputs[k]", inputs[k])) return false;
        if (inputs[k]->dtype != TG_F32 && inputs[k]->dtype != TG_F64) {
            tg_error(ctx, TG_ERR_DTYPE, fn, "input %d is %s: give the values in float32 or float64", k,
                     tg_dtype_name(inputs[k]->dtype));
            return false;
        }
    }
    result->tol = tol > 0 ? tol : 16 * lowp_eps(dtype);

    tg_tape saved;
    tg_tape_stash(ctx, &saved);
    bool was = tg_set_grad_enabled(ctx, true);
    uint64_t seed, offset;
    tg_rng_state(ctx, &seed, &offset);
    /* the inputs as dtype rounds them, in float64: both sides start there */
    tg_tensor *in64[TG_GRADCHECK_MAX_INPUTS];
    bool ok = true;
    for (int k = 0; ok && k < n_inputs; k++)
        ok = (in64[k] = tg_to_dtype(ctx, tg_to_dtype(ctx, inputs[k], dtype), TG_F64)) != NULL;
    /* the output's size, then the weighting r from a fixed Philox stream */
    tg_tensor *probe = ok ? f(ctx, in64, user) : NULL;
    int64_t nr = probe ? probe->numel : 0;
    double *r = probe ? tg_arena_alloc_fn(ctx, fn, (size_t)(nr ? nr : 1) * sizeof(double)) : NULL;
    ok = r != NULL && tg_ok(ctx);
    for (int64_t j = 0; ok && j < nr; j++) {
        uint32_t ctr[4] = {(uint32_t)j, (uint32_t)((uint64_t)j >> 32), 0x10f, 0}, key[2] = {0x5eed, 0}, w[4];
        tg_philox4x32_10(w, ctr, key);
        r[j] = 2.0 * tg_u01_f64(w[0], w[1]) - 1.0;
    }
    double *g_lp[TG_GRADCHECK_MAX_INPUTS] = {0}, *g_64[TG_GRADCHECK_MAX_INPUTS] = {0};
    tg_tape_restore(ctx, &saved); /* a fresh private tape for each side */
    tg_tape_stash(ctx, &saved);
    tg_rng_set_state(ctx, seed, offset);
    if (ok) ok = lowp_side(ctx, f, user, n_inputs, in64, TG_F64, r, nr, g_64);
    tg_tape_restore(ctx, &saved);
    tg_tape_stash(ctx, &saved);
    tg_rng_set_state(ctx, seed, offset);
    if (ok) ok = lowp_side(ctx, f, user, n_inputs, in64, dtype, r, nr, g_lp);
    tg_tape_restore(ctx, &saved);
    tg_set_grad_enabled(ctx, was);
    if (!ok) return false;

    for (int k = 0; k < n_inputs; k++) {
        int64_t n = inputs[k]->numel;
        double ss = 0;
        for (int64_t i = 0; i < n; i++) ss += g_64[k][i] * g_64[k][i];
        double G = n ? sqrt(ss / (double)n) : 0;
        for (int64_t i = 0; i < n; i++) {
            double d = fabs(g_lp[k][i] - g_64[k][i]), scale = fabs(g_64[k][i]) + G;
            double e = scale > 0 ? d / scale : d > 0 ? INFINITY : 0;
            if (isnan(d)) e = INFINITY;
            if (result->worst_input < 0 || e > result->max_err) {
                result->max_err = e;
                result->worst_input = k;
                result->worst_index = i;
                result->worst_lowp = g_lp[k][i];
                result->worst_f64 = g_64[k][i];
            }
        }
    }
    result->pass = result->max_err <= result->tol;
    return result->pass;
}

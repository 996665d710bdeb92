/* Gradient clipping and the anomaly check.
 *
 * Clip by global norm (PyTorch's clip_grad_norm_ with norm_type 2):
 *   norm = sqrt(sum over all grads of g^2)
 *   coef = max_norm / (norm + 1e-6);  if coef < 1: g *= coef
 * The sum is accumulated in double in a fixed order (parameter by
 * parameter, element by element), so it does not depend on threads. */
#include "optim/internal.h"

#include <math.h>

static double sum_squares(const tg_tensor *g) {
    double s = 0;
    if (g->dtype == TG_F64) {
        const double *d = g->data;
        for (int64_t i = 0; i < g->numel; i++) s += d[i] * d[i];
    } else {
        const float *f = g->data;
        for (int64_t i = 0; i < g->numel; i++) s += (double)f[i] * (double)f[i];
    }
    return s;
}

static bool check_params(tg_ctx *ctx, const char *fn, const tg_params *params) {
    if (!tg_check_ptr(ctx, fn, "params", params)) return false;
    return true;
}

double tg_grad_norm(tg_ctx *ctx, const tg_params *params) {
    if (!check_params(ctx, "tg_grad_norm", params)) return NAN;
    double s = 0;
    for (int i = 0; i < params->count; i++) {
        const tg_tensor *g = params->items[i].value->grad;
        if (g) s += sum_squares(g);
    }
    return sqrt(s);
}

double tg_clip_grad_norm(tg_ctx *ctx, tg_params *params, double max_norm) {
    if (!check_params(ctx, __func__, params)) return NAN;
    if (!isfinite(max_norm) || max_norm < 0) {
        tg_error(ctx, TG_ERR_VALUE, __func__, "max_norm=%g must be finite and >= 0", max_norm);
        return NAN;
    }
    double norm = tg_grad_norm(ctx, params);
    if (!isfinite(norm)) {
        tg_error(ctx, TG_ERR_VALUE, __func__, "the total gradient norm is %g (non-finite); gradients left unchanged",
                 norm);
        return norm;
    }
    double coef = max_norm / (norm + 1e-6);
    if (coef < 1.0) {
        for (int i = 0; i < params->count; i++) {
            tg_tensor *g = params->items[i].value->grad;
            if (!g) continue;
            if (g->dtype == TG_F64) {
                double *d = g->data;
                for (int64_t k = 0; k < g->numel; k++) d[k] *= coef;
            } else {
                float *f = g->data;
                float c = (float)coef;
                for (int64_t k = 0; k < g->numel; k++) f[k] *= c;
            }
            tg_written(g);
        }
    }
    return norm;
}

void tg_clip_grad_value(tg_ctx *ctx, tg_params *params, double clip_value) {
    if (!check_params(ctx, __func__, params)) return;
    if (!isfinite(clip_value) || clip_value < 0) {
        tg_error(ctx, TG_ERR_VALUE, __func__, "clip_value=%g must be finite and >= 0", clip_value);
        return;
    }
    for (int i = 0; i < params->count; i++) {
        tg_tensor *g = params->items[i].value->grad;
        if (!g) continue;
        for (int64_t k = 0; k < g->numel; k++) {
            double v = tg_load(g, k);
            if (v > clip_value) tg_store(g, k, clip_value);
            else if (v < -clip_value) tg_store(g, k, -clip_value);
        }
    }
}

bool tg_check_grads_finite(tg_ctx *ctx, const tg_params *params) {
    if (!check_params(ctx, __func__, params)) return false;
    for (int i = 0; i < params->count; i++) {
        const tg_tensor *g = params->items[i].value->grad;
        if (!g) continue;
        for (int64_t k = 0; k < g->numel; k++) {
            double v = tg_load(g, k);
            if (!isfinite(v)) {
                tg_error(ctx, TG_ERR_VALUE, __func__, "the gradient of '%s' holds %g at flat index %lld",
                         params->items[i].name, v, (long long)k);
                return false;
            }
        }
    }
    return true;
}

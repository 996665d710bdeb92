/* Adam and AdamW, exactly as PyTorch's torch.optim.Adam / AdamW (1.13,
 * _single_tensor_adam / _single_tensor_adamw), at step t = 1, 2, ...:
 *
 *   AdamW only:  p = p * (1 - lr * weight_decay)          (decoupled decay)
 *   Adam only:   g = g + weight_decay * p                 (L2 penalty)
 *   m = beta1 * m + (1 - beta1) * g
 *   v = beta2 * v + (1 - beta2) * g * g
 *   amsgrad:     vmax = max(vmax, v), and vmax replaces v below
 *   bc1 = 1 - beta1^t,   bc2 = 1 - beta2^t
 *   denom = sqrt(v) / sqrt(bc2) + eps
 *   p = p - (lr / bc1) * m / denom
 *
 * The bias corrections bc1 and bc2 undo the zero start of m and v: at t = 1
 * m = (1 - beta1) g, so m / bc1 = g. */
#include "optim/internal.h"

#include <math.h>

#define ADAM_KERNEL(T, SQRT, SUFFIX)                                                                    \
    static void adam_##SUFFIX(T *p, const T *g, T *m, T *v, T *vmax, int64_t n, T lr, T beta1, T beta2, \
                              T eps, T l2, T decoupled, T step_size, T bc2_sqrt) {                      \
        for (int64_t i = 0; i < n; i++) {                                                               \
            T gi = g[i];                                                                                \
            if (decoupled != 0) p[i] = p[i] * (1 - lr * decoupled);                                     \
            if (l2 != 0) gi = gi + l2 * p[i];                                                           \
            m[i] = m[i] * beta1 + (1 - beta1) * gi;                                                     \
            v[i] = v[i] * beta2 + (1 - beta2) * (gi * gi);                                                \
            T vv = v[i];                                                                                \
            if (vmax) {                                                                                 \
                if (vv > vmax[i] || vv != vv) vmax[i] = vv; /* torch.maximum: NaN wins */                                   \
                vv = vmax[i];                                                                           \
            }                                                                                           \
            T denom = SQRT(vv) / bc2_sqrt + eps;                                                        \
            p[i] = p[i] - step_size * (m[i] / denom);                                                   \
        }                                                                                               \
    }
ADAM_KERNEL(float, sqrtf, f32)
ADAM_KERNEL(double, sqrt, f64)

void tg_adam_update(tg_optim *o, int index, double lr, bool decay) {
    tg_tensor *p = o->params->items[index].value;
    tg_tensor *m = tg_optim_slot(o, index, SLOT_EXP_AVG);
    tg_tensor *v = tg_optim_slot(o, index, SLOT_EXP_AVG_SQ);
    tg_tensor *vmax = tg_optim_slot(o, index, SLOT_MAX_EXP_AVG_SQ);
    const tg_adam_opts *a = &o->adam;
    double wd = decay ? a->weight_decay : 0.0;
    double l2 = o->kind == TG_OPTIM_ADAM ? wd : 0.0;
    double decoupled = o->kind == TG_OPTIM_ADAMW ? wd : 0.0;
    double t = (double)(o->step + 1);
    double bc1 = 1.0 - pow(a->beta1, t);
    double bc2 = 1.0 - pow(a->beta2, t);
    double step_size = lr / bc1;
    double bc2_sqrt = sqrt(bc2);
    if (p->dtype == TG_F64)
        adam_f64(p->data, p->grad->data, m->data, v->data, vmax ? vmax->data : NULL, p->numel, lr, a->beta1,
                 a->beta2, a->eps, l2, decoupled, step_size, bc2_sqrt);
    else
        adam_f32(p->data, p->grad->data, m->data, v->data, vmax ? vmax->data : NULL, p->numel, (float)lr,
                 (float)a->beta1, (float)a->beta2, (float)a->eps, (float)l2, (float)decoupled, (float)step_size,
                 (float)bc2_sqrt);
}

tg_adam_opts tg_adam_defaults(void) {
    tg_adam_opts o = {1e-3, 0.9, 0.999, 1e-8, 0.0, false};
    return o;
}

tg_adam_opts tg_adamw_defaults(void) {
    tg_adam_opts o = {1e-3, 0.9, 0.999, 1e-8, 1e-2, false};
    return o;
}

static tg_optim *adam_new(tg_ctx *ctx, const char *fn, tg_optim_kind kind, tg_params *params,
                          const tg_adam_opts *a) {
    if (!tg_live(ctx)) return NULL;
    if (!a) {
        tg_error(ctx, TG_ERR_NULL, fn, "argument 'opts' is NULL (use tg_adam_defaults())");
        return NULL;
    }
    if (!isfinite(a->lr) || a->lr < 0) {
        tg_error(ctx, TG_ERR_VALUE, fn, "lr=%g must be finite and >= 0", a->lr);
        return NULL;
    }
    if (!(a->beta1 >= 0 && a->beta1 < 1) || !(a->beta2 >= 0 && a->beta2 < 1)) {
        tg_error(ctx, TG_ERR_VALUE, fn, "betas=(%g, %g) must lie in [0, 1)", a->beta1, a->beta2);
        return NULL;
    }
    if (!isfinite(a->eps) || a->eps <= 0) {
        tg_error(ctx, TG_ERR_VALUE, fn, "eps=%g must be finite and > 0", a->eps);
        return NULL;
    }
    if (!isfinite(a->weight_decay) || a->weight_decay < 0) {
        tg_error(ctx, TG_ERR_VALUE, fn, "weight_decay=%g must be finite and >= 0", a->weight_decay);
        return NULL;
    }
    bool want[SLOT_COUNT] = {false};
    want[SLOT_EXP_AVG] = want[SLOT_EXP_AVG_SQ] = true;
    want[SLOT_MAX_EXP_AVG_SQ] = a->amsgrad;
    tg_optim *o = tg_optim_make(ctx, fn, kind, params, a->lr, want);
    if (o) o->adam = *a;
    return o;
}

tg_optim *tg_adam_new(tg_ctx *ctx, tg_params *params, const tg_adam_opts *opts) {
    return adam_new(ctx, "tg_adam_new", TG_OPTIM_ADAM, params, opts);
}

tg_optim *tg_adamw_new(tg_ctx *ctx, tg_params *params, const tg_adam_opts *opts) {
    return adam_new(ctx, "tg_adamw_new", TG_OPTIM_ADAMW, params, opts);
}

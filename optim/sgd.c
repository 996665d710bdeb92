/* SGD with momentum, dampening, Nesterov and L2 weight decay, exactly as
 * PyTorch's torch.optim.SGD (1.13, _single_tensor_sgd):
 *
 *   d = g + weight_decay * p                    (when the param decays)
 *   if momentum != 0:
 *       buf = d                                  on the first step
 *       buf = momentum * buf + (1 - dampening) * d   afterwards
 *       d = d + momentum * buf   if nesterov,   else d = buf
 *   p = p - lr * d
 *
 * The first-step rule (buf = d, no dampening) is PyTorch's: the buffer
 * starts as a copy of the first gradient. */
#include "optim/internal.h"

#include <math.h>

#define SGD_KERNEL(T, SUFFIX)                                                                                         \
    static void sgd_##SUFFIX(T *p, const T *g, T *buf, int64_t n, T lr, T wd, T momentum, T dampening, bool nesterov, \
                             bool first) {                                                                            \
        for (int64_t i = 0; i < n; i++) {                                                                             \
            T d = g[i];                                                                                               \
            if (wd != 0) d = d + wd * p[i];                                                                           \
            if (momentum != 0) {                                                                                      \
                T b = first ? d : momentum * buf[i] + (1 - dampening) * d;                                            \
                buf[i] = b;                                                                                           \
                d = nesterov ? d + momentum * b : b;                                                                  \
            }                                                                                                         \
            p[i] = p[i] - lr * d;                                                                                     \
        }                                                                                                             \
    }
SGD_KERNEL(float, f32)
SGD_KERNEL(double, f64)

void tg_sgd_update(tg_optim *o, int index, double lr, bool decay) {
    tg_tensor *p = o->params->items[index].value;
    tg_tensor *buf = tg_optim_slot(o, index, SLOT_MOMENTUM);
    double wd = decay ? o->sgd.weight_decay : 0.0;
    bool first = o->step == 0;
    if (p->dtype == TG_F64)
        sgd_f64(p->data, p->grad->data, buf ? buf->data : NULL, p->numel, lr, wd, o->sgd.momentum, o->sgd.dampening,
                o->sgd.nesterov, first);
    else
        sgd_f32(p->data, p->grad->data, buf ? buf->data : NULL, p->numel, (float)lr, (float)wd, (float)o->sgd.momentum,
                (float)o->sgd.dampening, o->sgd.nesterov, first);
}

tg_sgd_opts tg_sgd_defaults(double lr) {
    tg_sgd_opts o = {lr, 0.0, 0.0, 0.0, false};
    return o;
}

tg_optim *tg_sgd_new(tg_ctx *ctx, tg_params *params, const tg_sgd_opts *opts) {
    if (!tg_ok(ctx)) return NULL;
    const tg_sgd_opts dflt = tg_sgd_defaults(TG_SGD_LR);
    const tg_sgd_opts *s = opts ? opts : &dflt;
    const char *nonneg = "finite and >= 0";
    if (!tg_optim_check(ctx, __func__, tg_finite_nonneg(s->lr), "lr", s->lr, nonneg) ||
        !tg_optim_check(ctx, __func__, tg_finite_nonneg(s->momentum), "momentum", s->momentum, nonneg) ||
        !tg_optim_check(ctx, __func__, isfinite(s->dampening), "dampening", s->dampening, "finite") ||
        !tg_optim_check(ctx, __func__, tg_finite_nonneg(s->weight_decay), "weight_decay", s->weight_decay, nonneg))
        return NULL;
    if (s->nesterov && (s->momentum <= 0 || s->dampening != 0)) {
        tg_error(ctx, TG_ERR_VALUE, __func__, "nesterov needs momentum > 0 and dampening 0 (momentum=%g, dampening=%g)",
                 s->momentum, s->dampening);
        return NULL;
    }
    bool want[SLOT_COUNT] = {false};
    want[SLOT_MOMENTUM] = s->momentum != 0;
    tg_optim *o = tg_optim_make(ctx, __func__, TG_OPTIM_SGD, params, s->lr, want);
    if (o) o->sgd = *s;
    return o;
}

/* The one-line texts of an optimizer's settings, its lr schedule and a
 * gradient scaler's settings (tg_optim_format, tg_optim_format_schedule,
 * tg_grad_scaler_format): "key=value" after the kind, each number in the
 * fewest digits that read back as exactly it, so equal settings give equal
 * text. A training state saves them and compares them on resuming
 * (train/state.c); they are part of its file format. */
#include "optim/internal.h"
#include "tensor/text.h"

/* " key=value", the value in its shortest exact form. */
static void put_num(tg_text *t, const char *key, double v) {
    tg_text_printf(t, " %s=", key);
    tg_text_shortest(t, v);
}

static void put_int(tg_text *t, const char *key, long long v) { tg_text_printf(t, " %s=%lld", key, v); }

size_t tg_optim_format(char *buf, size_t size, const tg_optim *opt) {
    static const char *const kinds[] = {"sgd", "adam", "adamw"};
    tg_text t = tg_text_buf(buf, size);
    if (!opt) return 0;
    tg_text_put(&t, kinds[opt->kind]);
    put_num(&t, "lr", opt->lr);
    if (opt->kind == TG_OPTIM_SGD) {
        put_num(&t, "momentum", opt->sgd.momentum);
        put_num(&t, "dampening", opt->sgd.dampening);
        put_num(&t, "weight_decay", opt->sgd.weight_decay);
        put_int(&t, "nesterov", opt->sgd.nesterov);
    } else {
        put_num(&t, "beta1", opt->adam.beta1);
        put_num(&t, "beta2", opt->adam.beta2);
        put_num(&t, "eps", opt->adam.eps);
        put_num(&t, "weight_decay", opt->adam.weight_decay);
        put_int(&t, "amsgrad", opt->adam.amsgrad);
    }
    return t.len;
}

size_t tg_optim_format_schedule(char *buf, size_t size, const tg_optim *opt) {
    tg_text t = tg_text_buf(buf, size);
    if (!opt) return 0;
    const tg_schedule *s = &opt->sched;
    switch (s->kind) {
    case TG_SCHED_STEP:
        tg_text_put(&t, "step");
        put_int(&t, "step_size", (long long)s->step_size);
        put_num(&t, "gamma", s->gamma);
        break;
    case TG_SCHED_WARMUP_COSINE:
        tg_text_put(&t, "warmup_cosine");
        put_int(&t, "warmup_steps", (long long)s->warmup_steps);
        put_int(&t, "total_steps", (long long)s->total_steps);
        put_num(&t, "start_factor", s->start_factor);
        put_num(&t, "min_lr", s->min_lr);
        break;
    case TG_SCHED_CALLBACK: tg_text_put(&t, "callback"); break;
    default: tg_text_put(&t, "constant"); break;
    }
    return t.len;
}

size_t tg_grad_scaler_format(char *buf, size_t size, const tg_grad_scaler *scaler) {
    tg_text t = tg_text_buf(buf, size);
    if (!scaler) return 0;
    const tg_grad_scaler_opts o = tg_grad_scaler_get_opts(scaler);
    tg_text_put(&t, "grad_scaler");
    put_num(&t, "growth_factor", o.growth_factor);
    put_num(&t, "backoff_factor", o.backoff_factor);
    put_int(&t, "growth_interval", (long long)o.growth_interval);
    put_int(&t, "enabled", o.enabled);
    return t.len;
}

/* The optimizer shell shared by SGD, Adam and AdamW: creation of the state,
 * the step loop over parameters, the lr schedule, state by name. */
#include "optim/internal.h"

#include <limits.h>
#include <math.h>
#include <string.h>

/* Appends a state tensor to the optimizer's named list, which was made
 * large enough for every state tensor. Unlike tg_params_add it gives the
 * tensor no grad: state is not trained. */
static bool add_state(tg_ctx *ctx, const char *fn, tg_params *list, const char *name, tg_tensor *t) {
    if (!t) return false;
    tg_param *p = &list->items[list->count];
    memset(p, 0, sizeof *p);
    int n = snprintf(p->name, sizeof p->name, "%s", name);
    if (n < 0 || (size_t)n >= sizeof p->name) {
        tg_error(ctx, TG_ERR_VALUE, fn, "state name '%s' is longer than %zu bytes", name, sizeof p->name - 1);
        return false;
    }
    p->value = t;
    list->count++;
    return true;
}

bool tg_optim_check_arg(tg_ctx *ctx, const char *fn, const tg_optim *o) {
    if (!tg_ok(ctx)) return false;
    if (!o) {
        tg_null_error(ctx, fn, "opt");
        return false;
    }
    return tg_check_owned(ctx, fn, "the optimizer", o, TG_OWN_OPTIM);
}

bool tg_optim_check(tg_ctx *ctx, const char *fn, bool ok, const char *name, double value, const char *rule) {
    if (!ok) tg_error(ctx, TG_ERR_VALUE, fn, "%s=%g must be %s", name, value, rule);
    return ok;
}

static const char *const slot_names[SLOT_COUNT] = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq", "momentum_buffer"};

tg_optim *tg_optim_make(tg_ctx *ctx, const char *fn, tg_optim_kind kind, tg_params *params, double lr,
                        const bool want[SLOT_COUNT]) {
    if (!tg_ok(ctx)) return NULL;
    if (!params) {
        tg_null_error(ctx, fn, "params");
        return NULL;
    }
    for (int p = 0; p < params->count; p++) { /* this context's tensors, which the steps will write */
        char what[96];
        snprintf(what, sizeof what, "params.items[%d] ('%.60s')", p, params->items[p].name);
        if (!tg_check_arg(ctx, fn, what, params->items[p].value)) return NULL;
    }
    /* Everything through the context's allocator, remembered for
     * tg_optim_free (which may be called without a context). */
    size_t nslots = (size_t)(params->count ? params->count : 1) * SLOT_COUNT;
    tg_optim *o = tg_heap_alloc(ctx, sizeof *o);
    tg_tensor **slots = tg_heap_alloc(ctx, nslots * sizeof *slots);
    if (!o || !slots) {
        tg_heap_free(ctx, o);
        tg_heap_free(ctx, slots);
        tg_error(ctx, TG_ERR_OOM, fn, "out of memory for an optimizer over %d parameters", params->count);
        return NULL;
    }
    if (!tg_own(ctx, fn, o, TG_OWN_OPTIM)) { /* tg_optim_free checks it there */
        tg_heap_free(ctx, o);
        tg_heap_free(ctx, slots);
        return NULL;
    }
    memset(o, 0, sizeof *o);
    memset(slots, 0, nslots * sizeof *slots);
    o->alloc = ctx->alloc;
    /* The state list: "optim.step", then the wanted slots of each parameter. */
    int per_param = 0;
    for (int s = 0; s < SLOT_COUNT; s++) per_param += want[s];
    size_t nstate = 1 + (size_t)params->count * (size_t)per_param;
    o->state.items = nstate <= INT_MAX ? tg_heap_alloc(ctx, nstate * sizeof *o->state.items) : NULL;
    if (!o->state.items) {
        tg_disown(ctx, fn, o, TG_OWN_OPTIM);
        tg_heap_free(ctx, slots);
        tg_heap_free(ctx, o);
        tg_error(ctx, TG_ERR_OOM, fn, "out of memory for the optimizer state list");
        return NULL;
    }
    o->state.capacity = (int)nstate;
    o->state.alloc_ = ctx->alloc;
    o->kind = kind;
    o->fn_new = fn;
    o->params = params;
    o->nparams = params->count;
    o->lr = lr;
    o->slots = slots;
    o->sched.kind = TG_SCHED_CONSTANT;
    o->step_tensor = tg_persist(ctx, tg_zeros(ctx, TG_F64, 0, NULL));
    add_state(ctx, fn, &o->state, "optim.step", o->step_tensor);
    for (int p = 0; p < params->count && tg_ok(ctx); p++) {
        tg_tensor *v = params->items[p].value;
        for (int s = 0; s < SLOT_COUNT && tg_ok(ctx); s++) {
            if (!want[s]) continue;
            tg_tensor *t = tg_persist(ctx, tg_zeros(ctx, v->dtype, v->ndim, v->shape));
            if (!t) break;
            slots[p * SLOT_COUNT + s] = t;
            char name[160];
            snprintf(name, sizeof name, "optim.%s.%s", params->items[p].name, slot_names[s]);
            if (!add_state(ctx, fn, &o->state, name, t)) {
                tg_tensor_free(ctx, t);
                slots[p * SLOT_COUNT + s] = NULL;
            }
        }
    }
    /* The state is the optimizer's own: tg_tensor_free refuses it. */
    for (int i = 0; i < o->state.count && tg_ok(ctx); i++) {
        char role[160];
        snprintf(role, sizeof role, "the state '%s' of an optimizer; free the optimizer", o->state.items[i].name);
        tg_persistent_set_owner(ctx, fn, o->state.items[i].value, o, role);
    }
    if (!tg_ok(ctx)) {
        tg_optim_free(ctx, o);
        return NULL;
    }
    return o;
}

/* With a context, the registry is asked first (by address: a freed
 * optimizer is never read), and while the optimizer frees its state it is
 * ctx->releasing, the one object tg_tensor_free lets free it. Without one
 * nothing can be checked. */
void tg_optim_free(tg_ctx *ctx, tg_optim *o) {
    if (!o) return;
    if (ctx) {
        if (!tg_disown(ctx, __func__, o, TG_OWN_OPTIM)) return;
        const void *outer = ctx->releasing;
        ctx->releasing = o;
        for (int i = 0; i < o->state.count; i++) tg_tensor_free(ctx, o->state.items[i].value);
        ctx->releasing = outer;
    }
    tg_params_free(&o->state);
    tg_allocator a = o->alloc;
    a.free(o->slots, a.user);
    a.free(o, a.user);
}

void tg_optim_step(tg_ctx *ctx, tg_optim *o) {
    if (!tg_optim_check_arg(ctx, __func__, o)) return;
    if (o->params->count != o->nparams) {
        tg_error(ctx, TG_ERR_STATE, __func__,
                 "the parameter list changed from %d to %d entries after the optimizer was made", o->nparams,
                 o->params->count);
        return;
    }
    double lr = tg_optim_lr(o);
    if (!(lr >= 0) || !isfinite(lr)) {
        tg_error(ctx, TG_ERR_VALUE, __func__, "the schedule gave lr=%g at step %lld", lr, (long long)o->step);
        return;
    }
    if (o->kind != TG_OPTIM_SGD && !tg_adam_step(ctx, o, lr)) return; /* every parameter at once, on the threads */
    for (int i = 0; i < o->nparams; i++) {
        const tg_param *p = &o->params->items[i];
        if (!p->value->grad) continue; /* like PyTorch: no grad, no update */
        if (o->kind == TG_OPTIM_SGD) tg_sgd_update(o, i, lr, p->weight_decay);
        /* in-place writes: a tape that saved the parameter sees them */
        tg_written(p->value);
        for (int s = 0; s < SLOT_COUNT; s++)
            if (tg_optim_slot(o, i, s)) tg_written(tg_optim_slot(o, i, s));
    }
    o->step++;
    *(double *)o->step_tensor->data = (double)o->step;
    tg_written(o->step_tensor);
}

void tg_optim_zero_grad(tg_ctx *ctx, tg_optim *o) {
    if (!tg_optim_check_arg(ctx, __func__, o)) return;
    tg_params_zero_grad(ctx, o->params);
}

double tg_optim_lr(const tg_optim *o) {
    if (!o) return NAN;
    return tg_schedule_lr(&o->sched, o->lr, o->step);
}

void tg_optim_set_lr(tg_ctx *ctx, tg_optim *o, double lr) {
    if (!tg_optim_check_arg(ctx, __func__, o)) return;
    if (!(lr >= 0) || !isfinite(lr)) {
        tg_error(ctx, TG_ERR_VALUE, "tg_optim_set_lr", "lr=%g must be finite and >= 0", lr);
        return;
    }
    o->lr = lr;
}

int64_t tg_optim_steps(const tg_optim *o) { return o ? o->step : 0; }

tg_params *tg_optim_state(tg_optim *o) { return o ? &o->state : NULL; }

void tg_optim_sync_state(tg_ctx *ctx, tg_optim *o) {
    if (!tg_ok(ctx) || !o || !tg_optim_check_arg(ctx, __func__, o)) return;
    double s = *(const double *)o->step_tensor->data;
    if (!(s >= 0) || s > 9e15 || s != floor(s)) {
        tg_error(ctx, TG_ERR_VALUE, "tg_optim_sync_state", "optim.step=%g is not a step count", s);
        return;
    }
    o->step = (int64_t)s;
}

void tg_optim_set_schedule(tg_ctx *ctx, tg_optim *o, const tg_schedule *sched) {
    if (!tg_optim_check_arg(ctx, __func__, o)) return;
    if (!sched) {
        memset(&o->sched, 0, sizeof o->sched);
        o->sched.kind = TG_SCHED_CONSTANT;
        return;
    }
    double probe = tg_schedule_lr(sched, 1.0, 0);
    if (isnan(probe)) {
        tg_error(ctx, TG_ERR_VALUE, __func__,
                 "invalid schedule (kind %d, step_size %lld, gamma %g, warmup %lld, total %lld, start_factor %g, "
                 "min_lr %g, fn %s)",
                 (int)sched->kind, (long long)sched->step_size, sched->gamma, (long long)sched->warmup_steps,
                 (long long)sched->total_steps, sched->start_factor, sched->min_lr, sched->fn ? "set" : "NULL");
        return;
    }
    o->sched = *sched;
}

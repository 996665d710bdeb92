/* Dynamic loss scaling for float16 training, as PyTorch's
 * torch.amp.GradScaler does it (tapegrad/optim.h).
 *
 * Why: float16's smallest subnormal is 2^-24 ~ 6e-8, and a 16-bit
 * activation gradient below it becomes 0 (most of a small model's are far
 * below 1). Backward from S * loss instead of loss multiplies every
 * gradient by S, lifting them into float16's range; dividing the float32
 * parameter grads by S afterwards (unscale) gives the true gradient, since
 * backward is linear: d(S L)/dp = S dL/dp. Too large an S overflows some
 * gradient to inf (float16's largest is 65504), which unscale finds: the
 * step is skipped (parameters and optimizer state untouched) and S is
 * halved. After growth_interval steps in a row without an overflow S is
 * doubled again, so it stays near the largest scale that does not
 * overflow. With powers of two (the defaults) the scaling and unscaling
 * are exact.
 *
 * A step, as PyTorch writes it:
 *   scaler.scale(loss).backward()    tg_backward(ctx, tg_grad_scaler_scale(ctx, s, loss))
 *   scaler.unscale_(opt)             tg_grad_scaler_unscale (optional: before clipping)
 *   scaler.step(opt)                 tg_grad_scaler_step
 *   scaler.update()                  tg_grad_scaler_update
 *
 * The one kernel, written once for T (float, double), opens the file,
 * which instantiates itself (tensor/instantiate.h) and so defines
 *   unscale_f32  unscale_f64 */
#ifdef T /* the kernel, compiled once per element type (tensor/instantiate.h) */

/* g *= inv over n elements; true when every element of g was finite. The
 * product of a finite grad and a power of two is exact (unless it leaves
 * the type's range). g: (n) */
static bool TG_FN(unscale)(T *g, int64_t n, T inv) {
    bool finite = true;
    for (int64_t i = 0; i < n; i++) {
        finite &= isfinite(g[i]) != 0;
        g[i] *= inv;
    }
    return finite;
}

#else /* the scaler, compiled once */

#include "optim/internal.h"

#include <string.h>

#define TG_TEMPLATE "optim/grad_scaler.c"
#include "tensor/instantiate.h"

/* The optimizers one step may use (PyTorch tracks any number; a handful
 * covers every training loop here). */
#define SCALER_MAX_OPTIMS 8

/* What the scaler knows about one optimizer during the current step. */
typedef struct scaler_optim {
    const tg_optim *opt;
    bool unscaled;  /* its grads were divided by the scale */
    bool found_inf; /* ... and one of them was inf or NaN */
    bool stepped;   /* tg_grad_scaler_step was called for it */
} scaler_optim;

struct tg_grad_scaler {
    tg_allocator alloc; /* the context's: this struct came from it */
    tg_grad_scaler_opts opts;
    double scale;           /* a float32 value, as PyTorch's scale tensor */
    int64_t growth_tracker; /* clean steps in a row since the scale last changed */
    scaler_optim seen[SCALER_MAX_OPTIMS];
    int nseen;
    tg_tensor *scale_tensor, *tracker_tensor; /* "scaler.scale", "scaler.growth_tracker" (float64 scalars) */
    tg_param state_items[2];
    tg_params state; /* named view of the two */
};

tg_grad_scaler_opts tg_grad_scaler_defaults(void) {
    return (tg_grad_scaler_opts){
        .init_scale = 65536.0, .growth_factor = 2.0, .backoff_factor = 0.5, .growth_interval = 2000, .enabled = true};
}

/* The scale and tracker into the state tensors, which a checkpoint saves. */
static void write_state(tg_grad_scaler *s) {
    *(double *)s->scale_tensor->data = s->scale;
    *(double *)s->tracker_tensor->data = (double)s->growth_tracker;
    tg_written(s->scale_tensor);
    tg_written(s->tracker_tensor);
}

static bool check_opts(tg_ctx *ctx, const char *fn, const tg_grad_scaler_opts *o) {
    return tg_optim_check(ctx, fn,
                          isfinite(o->init_scale) && o->init_scale > 0 && (float)o->init_scale > 0 &&
                              isfinite((float)o->init_scale),
                          "init_scale", o->init_scale, "> 0 and a finite float32") &&
           tg_optim_check(ctx, fn, isfinite(o->growth_factor) && o->growth_factor > 1, "growth_factor",
                          o->growth_factor, "> 1 and finite") &&
           tg_optim_check(ctx, fn, o->backoff_factor > 0 && o->backoff_factor < 1, "backoff_factor", o->backoff_factor,
                          "in (0, 1)") &&
           tg_optim_check(ctx, fn, o->growth_interval >= 1, "growth_interval", (double)o->growth_interval, ">= 1");
}

tg_grad_scaler *tg_grad_scaler_new(tg_ctx *ctx, const tg_grad_scaler_opts *opts) {
    if (!tg_ok(ctx)) return NULL;
    const tg_grad_scaler_opts o = opts ? *opts : tg_grad_scaler_defaults();
    if (!check_opts(ctx, __func__, &o)) return NULL;
    tg_grad_scaler *s = tg_heap_alloc(ctx, sizeof *s);
    if (!s) {
        tg_error(ctx, TG_ERR_OOM, __func__, "out of memory for a gradient scaler");
        return NULL;
    }
    if (!tg_own(ctx, __func__, s, TG_OWN_SCALER)) {
        tg_heap_free(ctx, s);
        return NULL;
    }
    memset(s, 0, sizeof *s);
    s->alloc = ctx->alloc;
    s->opts = o;
    s->scale = (float)o.init_scale;
    s->scale_tensor = tg_persist(ctx, tg_zeros(ctx, TG_F64, 0, NULL));
    s->tracker_tensor = tg_persist(ctx, tg_zeros(ctx, TG_F64, 0, NULL));
    if (!tg_ok(ctx)) {
        tg_grad_scaler_free(ctx, s);
        return NULL;
    }
    const char *names[2] = {"scaler.scale", "scaler.growth_tracker"};
    tg_tensor *values[2] = {s->scale_tensor, s->tracker_tensor};
    for (int i = 0; i < 2; i++) {
        snprintf(s->state_items[i].name, sizeof s->state_items[i].name, "%s", names[i]);
        s->state_items[i].value = values[i];
        char role[96];
        snprintf(role, sizeof role, "the state '%s' of a gradient scaler; free the scaler", names[i]);
        tg_persistent_set_owner(ctx, __func__, values[i], s, role);
    }
    /* a fixed list whose items live in the struct (never grown or freed) */
    s->state = (tg_params){.items = s->state_items, .count = 2, .capacity = 2};
    write_state(s);
    if (!tg_ok(ctx)) {
        tg_grad_scaler_free(ctx, s);
        return NULL;
    }
    return s;
}

void tg_grad_scaler_free(tg_ctx *ctx, tg_grad_scaler *s) {
    if (!s || !ctx) return;
    if (!tg_disown(ctx, __func__, s, TG_OWN_SCALER)) return;
    const void *outer = ctx->releasing;
    ctx->releasing = s;
    tg_tensor_free(ctx, s->scale_tensor);
    tg_tensor_free(ctx, s->tracker_tensor);
    ctx->releasing = outer;
    tg_allocator a = s->alloc;
    a.free(s, a.user);
}

/* The start of every call but new and free. */
static bool check_scaler(tg_ctx *ctx, const char *fn, const tg_grad_scaler *s) {
    if (!tg_ok(ctx)) return false;
    if (s) return tg_check_owned(ctx, fn, "the scaler", s, TG_OWN_SCALER);
    tg_null_error(ctx, fn, "scaler");
    return false;
}

double tg_grad_scaler_get_scale(const tg_grad_scaler *s) {
    if (!s) return NAN;
    return s->opts.enabled ? s->scale : 1.0;
}

int64_t tg_grad_scaler_growth_tracker(const tg_grad_scaler *s) { return s ? s->growth_tracker : 0; }

tg_tensor *tg_grad_scaler_scale(tg_ctx *ctx, tg_grad_scaler *s, tg_tensor *loss) {
    if (!check_scaler(ctx, __func__, s) || !tg_check_arg_any(ctx, __func__, "loss", loss)) return NULL;
    if (!s->opts.enabled) return loss;
    return tg_mul_scalar(ctx, loss, s->scale);
}

/* The entry of opt in this step's list (added when new), or NULL with an
 * error naming fn. */
static scaler_optim *entry_of(tg_ctx *ctx, const char *fn, tg_grad_scaler *s, const tg_optim *opt) {
    for (int i = 0; i < s->nseen; i++)
        if (s->seen[i].opt == opt) return &s->seen[i];
    if (s->nseen == SCALER_MAX_OPTIMS) {
        tg_error(ctx, TG_ERR_STATE, fn, "more than %d optimizers in one step (call tg_grad_scaler_update each step)",
                 SCALER_MAX_OPTIMS);
        return NULL;
    }
    s->seen[s->nseen] = (scaler_optim){.opt = opt};
    return &s->seen[s->nseen++];
}

/* Unscales opt's grads once (the shared part of unscale and step). */
static bool unscale(tg_ctx *ctx, const char *fn, tg_grad_scaler *s, tg_optim *opt, scaler_optim *e) {
    /* PyTorch: inv_scale = 1 / scale in float64, rounded to float32 */
    const double inv = (double)(float)(1.0 / s->scale);
    bool finite = true;
    const tg_params *ps = opt->params;
    for (int i = 0; i < ps->count; i++) {
        tg_tensor *g = ps->items[i].value->grad;
        if (!g) continue;
        if (g->dtype == TG_F64) finite &= unscale_f64(g->data, g->numel, inv);
        else if (g->dtype == TG_F32) finite &= unscale_f32(g->data, g->numel, (float)inv);
        else {
            tg_error(ctx, TG_ERR_DTYPE, fn, "the grad of '%s' is %s; parameters are float32 or float64",
                     ps->items[i].name, tg_dtype_name(g->dtype));
            return false;
        }
        tg_written(g);
    }
    e->unscaled = true;
    e->found_inf = !finite;
    return finite;
}

bool tg_grad_scaler_unscale(tg_ctx *ctx, tg_grad_scaler *s, tg_optim *opt) {
    if (!check_scaler(ctx, __func__, s) || !tg_optim_check_arg(ctx, __func__, opt)) return false;
    if (!s->opts.enabled) return true;
    scaler_optim *e = entry_of(ctx, __func__, s, opt);
    if (!e) return false;
    if (e->unscaled || e->stepped) {
        tg_error(ctx, TG_ERR_STATE, __func__,
                 "%s was already called for this optimizer since the last tg_grad_scaler_update",
                 e->stepped ? "tg_grad_scaler_step" : "tg_grad_scaler_unscale");
        return false;
    }
    return unscale(ctx, __func__, s, opt, e);
}

bool tg_grad_scaler_step(tg_ctx *ctx, tg_grad_scaler *s, tg_optim *opt) {
    if (!check_scaler(ctx, __func__, s) || !tg_optim_check_arg(ctx, __func__, opt)) return false;
    if (!s->opts.enabled) {
        tg_optim_step(ctx, opt);
        return tg_ok(ctx);
    }
    scaler_optim *e = entry_of(ctx, __func__, s, opt);
    if (!e) return false;
    if (e->stepped) {
        tg_error(ctx, TG_ERR_STATE, __func__,
                 "tg_grad_scaler_step was already called for this optimizer since the last tg_grad_scaler_update");
        return false;
    }
    if (!e->unscaled) unscale(ctx, __func__, s, opt, e);
    e->stepped = true;
    if (!tg_ok(ctx) || e->found_inf) return false; /* skipped: parameters and state untouched */
    tg_optim_step(ctx, opt);
    return tg_ok(ctx);
}

void tg_grad_scaler_update(tg_ctx *ctx, tg_grad_scaler *s) {
    if (!check_scaler(ctx, __func__, s) || !s->opts.enabled) return;
    if (s->nseen == 0) {
        tg_error(ctx, TG_ERR_STATE, __func__,
                 "no optimizer was unscaled or stepped since the last update (call tg_grad_scaler_step first)");
        return;
    }
    bool found_inf = false;
    for (int i = 0; i < s->nseen; i++) found_inf |= s->seen[i].found_inf;
    /* PyTorch's _amp_update_scale_, in float32 like its scale tensor */
    if (found_inf) {
        s->scale = (float)(s->scale * s->opts.backoff_factor);
        s->growth_tracker = 0;
    } else if (++s->growth_tracker == s->opts.growth_interval) {
        const float grown = (float)(s->scale * s->opts.growth_factor);
        if (isfinite(grown)) s->scale = grown; /* never grows to inf */
        s->growth_tracker = 0;
    }
    s->nseen = 0;
    write_state(s);
}

tg_params *tg_grad_scaler_state(tg_grad_scaler *s) { return s ? &s->state : NULL; }

void tg_grad_scaler_sync_state(tg_ctx *ctx, tg_grad_scaler *s) {
    if (!check_scaler(ctx, __func__, s)) return;
    const double scale = *(const double *)s->scale_tensor->data;
    const double tracker = *(const double *)s->tracker_tensor->data;
    if (!(scale > 0) || !isfinite(scale) || (double)(float)scale != scale) {
        tg_error(ctx, TG_ERR_VALUE, __func__, "scaler.scale = %g must be > 0 and a finite float32", scale);
        return;
    }
    if (!(tracker >= 0) || tracker != floor(tracker) || tracker >= (double)s->opts.growth_interval) {
        tg_error(ctx, TG_ERR_VALUE, __func__, "scaler.growth_tracker = %g must be a count in 0..%lld", tracker,
                 (long long)(s->opts.growth_interval - 1));
        return;
    }
    s->scale = scale;
    s->growth_tracker = (int64_t)tracker;
    s->nseen = 0;
}

tg_grad_scaler_opts tg_grad_scaler_get_opts(const tg_grad_scaler *s) { return s ? s->opts : tg_grad_scaler_defaults(); }

#endif

/* tapegrad/optim.h: optimizers, learning-rate schedules and gradient
 * clipping (optim/). */
#ifndef TAPEGRAD_OPTIM_H
#define TAPEGRAD_OPTIM_H

#include "tapegrad/layers.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================== */
/* Optimizers, learning-rate schedules, gradient clipping                   */
/* ======================================================================== */
/* An optimizer updates the parameters of a tg_params list (which must
 * outlive it) from their grads, with PyTorch's formulas (optim/sgd.c,
 * optim/adam.c). Parameters whose weight_decay flag is false get no decay.
 * Hyper-parameters are checked when the optimizer is made:
 * lr >= 0, momentum >= 0, dampening finite, weight_decay >= 0,
 * betas in [0, 1), eps > 0, nesterov only with momentum > 0 and
 * dampening 0; NaN or inf anywhere is refused. */
typedef struct tg_optim tg_optim;

/* SGD: with d = g + weight_decay * p,
 *   buf = d (first step), buf = momentum * buf + (1 - dampening) * d (after);
 *   d = d + momentum * buf (nesterov) or d = buf (momentum > 0);  p -= lr * d */
typedef struct tg_sgd_opts {
    double lr, momentum, dampening, weight_decay;
    bool nesterov;
} tg_sgd_opts;
/* Adam / AdamW: m = b1 m + (1-b1) g,  v = b2 v + (1-b2) g^2,
 *   p -= lr/(1-b1^t) * m / (sqrt(v')/sqrt(1-b2^t) + eps), v' = v or the
 *   running max of v (amsgrad). Adam adds weight_decay * p to g (L2);
 *   AdamW first scales p by (1 - lr * weight_decay) (decoupled). */
typedef struct tg_adam_opts {
    double lr, beta1, beta2, eps, weight_decay;
    bool amsgrad;
} tg_adam_opts;

/* PyTorch's defaults: SGD momentum 0, dampening 0, weight_decay 0, no
 * nesterov, at the lr given; Adam lr 1e-3, betas (0.9, 0.999), eps 1e-8,
 * weight_decay 0; AdamW the same with weight_decay 1e-2. */
TG_API tg_sgd_opts tg_sgd_defaults(double lr);
TG_API tg_adam_opts tg_adam_defaults(void);
TG_API tg_adam_opts tg_adamw_defaults(void);
/* SGD's lr when no options are given: 1e-3, torch.optim.SGD's default
 * since PyTorch 2.2 (before, SGD had no default lr: it was required). A
 * good lr for SGD depends on the model far more than Adam's does, so pass
 * your own through tg_sgd_defaults(lr) unless 1e-3 is what you want. */
#define TG_SGD_LR 1e-3

/* New optimizers over `params`; NULL (and an error) on bad hyper-parameters.
 * opts NULL means the defaults, as for every options argument of the
 * library: tg_sgd_defaults(TG_SGD_LR), tg_adam_defaults(),
 * tg_adamw_defaults(). Their state tensors are persistent, made zero at
 * creation. */
TG_API tg_optim *tg_sgd_new(tg_ctx *ctx, tg_params *params, const tg_sgd_opts *opts);
TG_API tg_optim *tg_adam_new(tg_ctx *ctx, tg_params *params, const tg_adam_opts *opts);
TG_API tg_optim *tg_adamw_new(tg_ctx *ctx, tg_params *params, const tg_adam_opts *opts);
/* Frees the optimizer and its state tensors. */
TG_API void tg_optim_free(tg_ctx *ctx, tg_optim *opt);
/* One update of every parameter from its grad, at the schedule's lr for the
 * current step; then the step count advances. */
TG_API void tg_optim_step(tg_ctx *ctx, tg_optim *opt);
/* Zeroes the grads of the optimizer's parameters. */
TG_API void tg_optim_zero_grad(tg_ctx *ctx, tg_optim *opt);
/* The learning rate the NEXT tg_optim_step will apply: the schedule's
 * value at the step count so far (tg_schedule_lr(sched, base lr,
 * tg_optim_steps(opt))). To log the rate a step uses, read it before that
 * step: after it, it is already the following step's. NaN for NULL. */
TG_API double tg_optim_lr(const tg_optim *opt);
/* Sets the base lr (the schedule scales it). lr < 0 or NaN: error. */
TG_API void tg_optim_set_lr(tg_ctx *ctx, tg_optim *opt, double lr);
/* Steps taken so far. */
TG_API int64_t tg_optim_steps(const tg_optim *opt);
/* The optimizer's state by name, for checkpoints: "optim.step" (a float64
 * scalar holding the step count), and per parameter P "optim.P.exp_avg",
 * "optim.P.exp_avg_sq", "optim.P.max_exp_avg_sq" (amsgrad) or
 * "optim.P.momentum_buffer" (SGD with momentum). The tensors are the live
 * state: writing them (e.g. loading a checkpoint) restores it; call
 * tg_optim_sync_state after writing "optim.step". */
TG_API tg_params *tg_optim_state(tg_optim *opt);
/* Reads "optim.step" back into the step count after a restore. */
TG_API void tg_optim_sync_state(tg_ctx *ctx, tg_optim *opt);
/* The optimizer's kind and hyper-parameters as one line in buf, as
 * snprintf (returns the length the whole text needs; "" for NULL), each
 * number in the fewest digits that read back exactly:
 *   adamw lr=0.003 beta1=0.9 beta2=0.999 eps=1e-08 weight_decay=0.01 amsgrad=0
 *   sgd lr=0.1 momentum=0.9 dampening=0 weight_decay=0 nesterov=0
 * A training state saves it, and compares it on resuming (tapegrad/train.h). */
TG_API size_t tg_optim_format(char *buf, size_t size, const tg_optim *opt);
/* The optimizer's lr schedule the same way: "constant", "step step_size=10
 * gamma=0.5", "warmup_cosine warmup_steps=4 total_steps=40 start_factor=0.1
 * min_lr=0.0001", or "callback" (a function has no text). */
TG_API size_t tg_optim_format_schedule(char *buf, size_t size, const tg_optim *opt);

/* Learning-rate schedules: lr(t) = base_lr * factor(t) at step t (0-based). */
typedef enum tg_schedule_kind {
    TG_SCHED_CONSTANT = 0,  /* factor 1 */
    TG_SCHED_STEP,          /* gamma^floor(t / step_size) (PyTorch StepLR) */
    TG_SCHED_WARMUP_COSINE, /* linear from start_factor to 1 over warmup_steps,
                              then cosine from base_lr to min_lr over the
                              remaining total_steps - warmup_steps, then min_lr */
    TG_SCHED_CALLBACK       /* lr(t) = fn(t, base_lr, user) */
} tg_schedule_kind;
typedef struct tg_schedule {
    tg_schedule_kind kind;
    int64_t step_size;                                      /* STEP */
    double gamma;                                           /* STEP */
    int64_t warmup_steps;                                   /* WARMUP_COSINE */
    int64_t total_steps;                                    /* WARMUP_COSINE */
    double start_factor;                                    /* WARMUP_COSINE, in (0, 1] */
    double min_lr;                                          /* WARMUP_COSINE */
    double (*fn)(int64_t step, double base_lr, void *user); /* CALLBACK */
    void *user;
} tg_schedule;
/* The lr of `sched` at step t for a base lr; NaN for an invalid schedule. */
TG_API double tg_schedule_lr(const tg_schedule *sched, double base_lr, int64_t step);
/* Attaches a schedule (copied) to the optimizer; NULL restores constant. */
TG_API void tg_optim_set_schedule(tg_ctx *ctx, tg_optim *opt, const tg_schedule *sched);

/* Scales all grads so their global L2 norm is at most max_norm (PyTorch's
 * clip_grad_norm_: coef = max_norm / (norm + 1e-6), applied when < 1).
 * Returns the norm before clipping. A non-finite norm is an error and the
 * grads are left unchanged. */
TG_API double tg_clip_grad_norm(tg_ctx *ctx, tg_params *params, double max_norm);
/* The global L2 norm of all grads (no change). */
TG_API double tg_grad_norm(tg_ctx *ctx, const tg_params *params);
/* Clamps every grad element to [-clip_value, clip_value]. */
TG_API void tg_clip_grad_value(tg_ctx *ctx, tg_params *params, double clip_value);
/* Anomaly check, to call after backward: false (and an error naming the
 * first parameter and element) when a grad holds NaN or inf. */
TG_API bool tg_check_grads_finite(tg_ctx *ctx, const tg_params *params);

/* ======================================================================== */
/* Gradient scaling for float16 mixed precision (optim/grad_scaler.c)       */
/* ======================================================================== */
/* Dynamic loss scaling, as torch.amp.GradScaler: float16 gradients below
 * 2^-24 are 0, so backward runs from scale * loss and the float32 grads are
 * divided by scale before the step (backward is linear, so that is the
 * true gradient). A grad that overflowed to inf (or NaN) makes the step a
 * no-op -- parameters and optimizer state keep their bits, the optimizer's
 * step count (so its schedule) does not advance -- and the scale is
 * multiplied by backoff_factor; after growth_interval clean steps in a row
 * it is multiplied by growth_factor (never to inf). The scale is a float32
 * value, as PyTorch's. bfloat16 has float32's range and needs no scaling.
 * A step:
 *   tg_backward(ctx, tg_grad_scaler_scale(ctx, scaler, loss));
 *   tg_grad_scaler_unscale(ctx, scaler, opt);  optional: before clipping
 *   tg_grad_scaler_step(ctx, scaler, opt);     unscales if not yet; skips on inf
 *   tg_grad_scaler_update(ctx, scaler);        adjusts the scale
 * Misuse is TG_ERR_STATE naming the call: unscale or step twice for one
 * optimizer, update without a step. */
typedef struct tg_grad_scaler tg_grad_scaler;
typedef struct tg_grad_scaler_opts {
    double init_scale;       /* > 0, a finite float32 */
    double growth_factor;    /* > 1, finite */
    double backoff_factor;   /* in (0, 1) */
    int64_t growth_interval; /* >= 1 */
    bool enabled;            /* false: scale 1, step is tg_optim_step, update does nothing */
} tg_grad_scaler_opts;
/* PyTorch's defaults: init_scale 65536 (2^16), growth_factor 2,
 * backoff_factor 0.5, growth_interval 2000, enabled. */
TG_API tg_grad_scaler_opts tg_grad_scaler_defaults(void);
/* A new scaler (opts NULL: the defaults); NULL and TG_ERR_VALUE naming the
 * option and its value when one is out of range (NaN included). */
TG_API tg_grad_scaler *tg_grad_scaler_new(tg_ctx *ctx, const tg_grad_scaler_opts *opts);
/* Frees the scaler and its state tensors. NULL is a no-op. */
TG_API void tg_grad_scaler_free(tg_ctx *ctx, tg_grad_scaler *scaler);
/* loss * scale (tg_mul_scalar, recorded), to run backward from; loss itself
 * when disabled. */
TG_API tg_tensor *tg_grad_scaler_scale(tg_ctx *ctx, tg_grad_scaler *scaler, tg_tensor *loss);
/* Divides the grads of opt's parameters by the scale (multiplies by the
 * float32 1/scale, as PyTorch) and notes whether one held inf or NaN.
 * Returns true when all were finite. At most once per optimizer and step. */
TG_API bool tg_grad_scaler_unscale(tg_ctx *ctx, tg_grad_scaler *scaler, tg_optim *opt);
/* Unscales opt's grads unless tg_grad_scaler_unscale did, then
 * tg_optim_step unless a grad was inf or NaN. Returns true when the step
 * was taken (false: skipped, or an error). */
TG_API bool tg_grad_scaler_step(tg_ctx *ctx, tg_grad_scaler *scaler, tg_optim *opt);
/* Ends the step: the scale times backoff_factor if any optimizer stepped
 * this step found inf/NaN (the clean-step count back to 0), else one more
 * clean step, and the scale times growth_factor when they reach
 * growth_interval. */
TG_API void tg_grad_scaler_update(tg_ctx *ctx, tg_grad_scaler *scaler);
/* The current scale (1 when disabled; NaN for NULL), and the clean steps
 * since it last changed. */
TG_API double tg_grad_scaler_get_scale(const tg_grad_scaler *scaler);
TG_API int64_t tg_grad_scaler_growth_tracker(const tg_grad_scaler *scaler);
/* The options the scaler was made with (the defaults for NULL). */
TG_API tg_grad_scaler_opts tg_grad_scaler_get_opts(const tg_grad_scaler *scaler);
/* Its settings as one line, as tg_optim_format: "grad_scaler
 * growth_factor=2 backoff_factor=0.5 growth_interval=2000 enabled=1" (what
 * must match on resuming; the scale itself is state). */
TG_API size_t tg_grad_scaler_format(char *buf, size_t size, const tg_grad_scaler *scaler);
/* The scaler's state for checkpoints: "scaler.scale" and
 * "scaler.growth_tracker", float64 scalars, kept up to date by update.
 * Writing them (a checkpoint load) and calling tg_grad_scaler_sync_state
 * restores the scaler; tg_train_save_parts does both (tg_train_part's
 * scaler, tapegrad/train.h). */
TG_API tg_params *tg_grad_scaler_state(tg_grad_scaler *scaler);
/* Reads the state tensors back; TG_ERR_VALUE when the scale is not a
 * positive finite float32 or the count not in 0..growth_interval-1. */
TG_API void tg_grad_scaler_sync_state(tg_ctx *ctx, tg_grad_scaler *scaler);

#ifdef __cplusplus
}
#endif

#endif /* TAPEGRAD_OPTIM_H */

/* What every optimizer shares: the parameter list, the step count, the lr
 * schedule and the named state tensors. */
#ifndef TG_OPTIM_INTERNAL_H
#define TG_OPTIM_INTERNAL_H

#include "tensor/internal.h"
#include "tapegrad/optim.h"

#include <math.h>

typedef enum tg_optim_kind { TG_OPTIM_SGD, TG_OPTIM_ADAM, TG_OPTIM_ADAMW } tg_optim_kind;

/* Per-parameter state slots; unused ones are NULL. */
enum { SLOT_EXP_AVG, SLOT_EXP_AVG_SQ, SLOT_MAX_EXP_AVG_SQ, SLOT_MOMENTUM, SLOT_COUNT };

struct tg_optim {
    tg_allocator alloc; /* the context's: this struct and slots came from it */
    tg_optim_kind kind;
    const char *fn_new; /* "tg_sgd_new", ... for messages */
    tg_params *params;  /* the caller's list */
    int nparams;        /* its count when the optimizer was made */
    double lr;          /* base lr */
    tg_sgd_opts sgd;
    tg_adam_opts adam;
    int64_t step; /* steps taken */
    tg_schedule sched;
    tg_tensor **slots;      /* nparams * SLOT_COUNT persistent tensors */
    tg_tensor *step_tensor; /* "optim.step", float64 scalar */
    tg_params state;        /* named view of step_tensor and slots */
};

/* The check of an optimizer argument: false when the context is in error,
 * o is NULL (TG_ERR_NULL) or not an optimizer of ctx (TG_ERR_STATE: another
 * context's, or freed; tg_check_owned). */
bool tg_optim_check_arg(tg_ctx *ctx, const char *fn, const tg_optim *o);
/* Checks a hyper-parameter when an optimizer is made: when !ok, sets
 * TG_ERR_VALUE "fn: name=value must be rule" and returns false. */
bool tg_optim_check(tg_ctx *ctx, const char *fn, bool ok, const char *name, double value, const char *rule);
static inline bool tg_finite_nonneg(double v) { return isfinite(v) && v >= 0; }

/* Makes the optimizer shell and the state slots listed in `want`. */
tg_optim *tg_optim_make(tg_ctx *ctx, const char *fn, tg_optim_kind kind, tg_params *params, double lr,
                        const bool want[SLOT_COUNT]);
static inline tg_tensor *tg_optim_slot(const tg_optim *o, int p, int slot) { return o->slots[p * SLOT_COUNT + slot]; }

/* The update of one parameter (value p, grad g, both n elements). */
void tg_sgd_update(tg_optim *o, int index, double lr, bool decay);
/* Adam's or AdamW's update of every parameter that has a gradient, on the
 * context's threads; false (TG_ERR_OOM set, nothing updated) without
 * memory for its task table. */
bool tg_adam_step(tg_ctx *ctx, tg_optim *o, double lr);

#endif

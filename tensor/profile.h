/* The per-op profile's hooks (tensor/profile.c): internal, called by the
 * tape (autograd/tape.c) and the reset (tensor/ctx.c). Each does nothing
 * unless tg_profile_enable turned the profile on: one load and a branch. */
#ifndef TG_TENSOR_PROFILE_H
#define TG_TENSOR_PROFILE_H

#include "tensor/internal.h"

/* The time since the previous mark is op's forward (a record is made when
 * the op's forward has run). */
void tg_profile_forward(tg_ctx *ctx, const char *op);
/* For an op that records before it computes (it saves into its record):
 * the time since the record is op's forward too. */
void tg_profile_forward_end(tg_ctx *ctx, const char *op);
/* A backward walk starts: the time since the previous mark ran no record. */
void tg_profile_walk_begin(tg_ctx *ctx);
/* op's backward took `seconds` (timed by the walk). */
void tg_profile_backward(tg_ctx *ctx, const char *op, double seconds);
/* The walk ended: the next mark starts now. */
void tg_profile_walk_end(tg_ctx *ctx);
/* A reset: the time since the previous mark (the optimizer, clipping...)
 * ran no record; one more step. */
void tg_profile_step(tg_ctx *ctx);
/* The monotonic clock, in seconds. */
double tg_profile_now(void);

#endif

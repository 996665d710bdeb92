/* Forward mode (tg_jvp): what the driver (jvp.c) gives the ops' tangent
 * rules (their descriptors' jvp, beside each op). Internal (not
 * installed).
 *
 * A tangent rule reads its record as the op's backward does (inputs, out,
 * n->i, n->f, n->saved) and returns d out = sum_k (d out / d in_k) t_k, a
 * new tensor of out's shape and dtype, computed with grad mode off. Rules
 * that are not one call of an op work on float64 copies of the values
 * (tg_jvp_values) and write the result back in out's dtype
 * (tg_jvp_tensor): forward mode is for checking and small experiments, so
 * clarity wins over speed here. */
#ifndef TG_AUTOGRAD_JVP_H
#define TG_AUTOGRAD_JVP_H

#include "autograd/tape.h"

/* t's values as float64, a new arena array (NULL and the error set when
 * out of memory). */
double *tg_jvp_values(tg_ctx *ctx, const tg_tensor *t);
/* A new arena tensor of like's shape and dtype holding v (numel values). */
tg_tensor *tg_jvp_tensor(tg_ctx *ctx, const tg_tensor *like, const double *v);

#endif

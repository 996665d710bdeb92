/* Forward mode (tg_jvp): what the driver (jvp.c) and the rule files
 * (jvp.c, jvp_nn.c) share. Internal (not installed).
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

/* One built-in rule: the record's op name and its tangent rule. */
typedef struct tg_jvp_entry {
    const char *op;
    tg_jvp_rule rule;
} tg_jvp_entry;

/* The rules of jvp_nn.c (matmul, softmax, losses, masks, embedding,
 * dropout, rope, attention, Linear, RMSNorm, LayerNorm). */
extern const tg_jvp_entry tg_jvp_nn_rules[];
extern const int tg_jvp_nn_count;

/* t's values as float64, a new arena array (NULL and the error set when
 * out of memory). */
double *tg_jvp_values(tg_ctx *ctx, const tg_tensor *t);
/* A new arena tensor of like's shape and dtype holding v (numel values). */
tg_tensor *tg_jvp_tensor(tg_ctx *ctx, const tg_tensor *like, const double *v);

#endif

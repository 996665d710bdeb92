/* The descriptors of the layers' fused ops (tapegrad/op.h's tg_op_def),
 * each defined beside its kernel calls in layers/ (linear.c, rmsnorm.c,
 * layernorm.c) with its double-backward and tangent rules, and declared
 * here for the op registry (check/registry.c). The composed twins
 * (composed.c, attention_composed.c) have descriptors too, for the
 * registry alone: a name and what a check needs, no backward (their ops
 * record themselves). Internal (not installed). */
#ifndef TG_LAYERS_OPS_H
#define TG_LAYERS_OPS_H

#include "autograd/tape.h"

/* A number macro's value as a string literal: TG_STR(TG_RMSNORM_EPS) is
 * "1e-6" (a descriptor's argument defaults). */
#define TG_STR_(x) #x
#define TG_STR(x) TG_STR_(x)

/* What a check needs of the fused norms and their composed twins alike:
 * the arguments with their defaults (PyTorch's: RMSNorm eps 1e-6 without
 * beta, LayerNorm eps 1e-5 with beta) and the values drawn for x, gamma,
 * beta. */
#define TG_RMSNORM_ARGS "norm=1,eps=" TG_STR(TG_RMSNORM_EPS) ",affine=1,bias=0"
#define TG_LAYERNORM_ARGS "norm=1,eps=" TG_STR(TG_LAYERNORM_EPS) ",affine=1,bias=1"
#define TG_NORM_INPUTS "x=-2:2,gamma=-2:2,beta=-2:2"

extern const tg_op_def tg_linear_op, tg_rmsnorm_op, tg_layernorm_op;
extern const tg_op_def tg_rmsnorm_composed_op, tg_layernorm_composed_op, tg_attention_composed_op;

#endif

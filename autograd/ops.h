/* The descriptors of autograd's ops (tapegrad/op.h's tg_op_def), each
 * defined beside its kernel in autograd/ops_*.c and declared here for what
 * lists or reuses them: the op registry (check/registry.c) and the files
 * of the same family. A unary op's descriptor is the first member of its
 * tg_unary_op (autograd/unary.h): &tg_exp_op.def. Internal (not
 * installed). */
#ifndef TG_AUTOGRAD_OPS_H
#define TG_AUTOGRAD_OPS_H

#include "autograd/unary.h"

/* elementwise (ops_elementwise.c) */
extern const tg_op_def tg_add_op, tg_sub_op, tg_mul_op, tg_div_op;
extern const tg_unary_op tg_neg_op, tg_add_scalar_op, tg_mul_scalar_op, tg_pow_scalar_op;
extern const tg_unary_op tg_exp_op, tg_log_op, tg_sqrt_op, tg_abs_op;

/* activations (ops_activation.c) */
extern const tg_unary_op tg_relu_op, tg_leaky_relu_op, tg_sigmoid_op, tg_tanh_op;
extern const tg_unary_op tg_gelu_op, tg_gelu_tanh_op, tg_silu_op, tg_softplus_op;

/* reductions (ops_reduce.c) */
extern const tg_op_def tg_sum_op, tg_mean_op, tg_sum_axis_op, tg_mean_axis_op, tg_max_axis_op;

/* shapes (ops_shape.c) */
extern const tg_op_def tg_transpose_op, tg_permute_op, tg_transpose_dims_op, tg_reshape_op, tg_concat_op, tg_slice_op;

/* matmul, softmax and the losses, masks, rope, embedding, dropout,
 * attention, cast (ops_*.c) */
extern const tg_op_def tg_matmul_op, tg_softmax_op, tg_log_softmax_op, tg_cross_entropy_op, tg_mse_loss_op;
extern const tg_op_def tg_masked_fill_op, tg_tril_op, tg_triu_op, tg_rope_op, tg_embedding_op, tg_dropout_op;
extern const tg_op_def tg_attention_op, tg_cast_op;

#endif

/* The double-backward (create_graph) rules of the layers' fused ops,
 * set on their records (tg_node's grad_rule; autograd/grad_graph.h).
 * Internal (not installed). */
#ifndef TG_LAYERS_GRAD_RULES_H
#define TG_LAYERS_GRAD_RULES_H

#include "autograd/tape.h"

/* linear: y = x W^T + b (layers/linear.c). */
bool tg_linear_grad_rule(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx);
/* rmsnorm and layernorm (layers/rmsnorm.c, layers/layernorm.c): dx by the
 * fused op rmsnorm_backward / layernorm_backward, whose own backward is
 * hand-derived; both in layers/norm_grad.c. */
bool tg_norm_grad_rule(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx);

#endif

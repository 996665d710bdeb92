/* The op list behind the registry (internal; users see tg_registry_* in
 * tapegrad.h).
 *
 * TG_OP_LIST is the one list of registered ops. It generates the tg_op_id
 * enum; layers/registry.c holds one table entry per op, in this order, and
 * a static_assert keeps the table and the list the same length (a test
 * checks that entry i is the i-th op by id and name). To register an op:
 * add X(name) here, then its variants, builder and forward and its table
 * entry in layers/registry.c.
 *
 * The layers' fused ops (tg_linear_fused, tg_rmsnorm_fused, ...) are listed
 * too, so one walk checks every op and layer. That is why the registry lives
 * in layers/, the top of the differentiable stack: it calls into autograd/
 * and layers/, and no lower folder calls into it (DESIGN.md: data flows
 * tensor <- autograd <- layers). */
#ifndef TG_LAYERS_REGISTRY_H
#define TG_LAYERS_REGISTRY_H

#include "tapegrad.h"
#include "tapegrad/check.h"

#define TG_OP_LIST(X) \
    X(add)            \
    X(sub)            \
    X(mul)            \
    X(div)            \
    X(neg)            \
    X(add_scalar)     \
    X(mul_scalar)     \
    X(pow_scalar)     \
    X(exp)            \
    X(log)            \
    X(sqrt)           \
    X(abs)            \
    X(relu)           \
    X(leaky_relu)     \
    X(sigmoid)        \
    X(tanh)           \
    X(gelu)           \
    X(silu)           \
    X(sum)            \
    X(mean)           \
    X(sum_axis)       \
    X(mean_axis)      \
    X(max_axis)       \
    X(matmul)         \
    X(transpose)      \
    X(reshape)        \
    X(concat)         \
    X(slice)          \
    X(embedding)      \
    X(softmax)        \
    X(log_softmax)    \
    X(cross_entropy)  \
    X(mse_loss)       \
    X(dropout)        \
    X(linear)         \
    X(rmsnorm)        \
    X(layernorm)      \
    X(rmsnorm_composed) \
    X(layernorm_composed)

typedef enum tg_op_id {
#define TG_OP_ENUM_(name) TG_OP_##name,
    TG_OP_LIST(TG_OP_ENUM_)
#undef TG_OP_ENUM_
    TG_OP_COUNT
} tg_op_id;

#endif

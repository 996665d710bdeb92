/* check/: gradient checking (gradcheck.c) and the op registry (registry.c),
 * the library tapegrad_check; users see include/tapegrad/check.h. This
 * header holds what the two files share and nobody else needs.
 *
 * Why the registry sits in check/, above layers/: its table lists every
 * differentiable op of autograd/ and the layers' fused ops of layers/
 * (tg_linear_fused, tg_rmsnorm_fused, ...), so one walk checks them all. It
 * calls into autograd/ and layers/, and nothing in the library calls into
 * it: tests and tools link it. Data flows one way:
 * tensor <- autograd <- layers <- check.
 *
 * To register an op: one entry in the table at the end of registry.c,
 * pointing to the op's descriptor (its builder and, unless a generic
 * forward fits, its forward above it). */
#ifndef TG_CHECK_REGISTRY_H
#define TG_CHECK_REGISTRY_H

#include "tapegrad/check.h"

/* The start of every check: clears *result (no worst input or index), then
 * false when the call must stop -- ctx NULL or in error, or result NULL (an
 * error naming fn). */
bool tg_gradcheck_start(tg_ctx *ctx, const char *fn, tg_gradcheck_result *result);
/* The verdicts of a filled result (tapegrad/check.h): each checked input's
 * from its counts, then the check's; pass set from them. */
void tg_gradcheck_decide(tg_gradcheck_result *result);
/* A check that stopped on an error: inconclusive (unless already wrong),
 * never a pass. */
void tg_gradcheck_stopped(tg_gradcheck_result *result);
/* The weighting r_j tg_gradcheck draws from opts.seed for output j (when
 * opts.r is not given): uniform in [-1, 1). */
double tg_gradcheck_weight(uint64_t seed, int64_t j);

/* Input k of c: a tensor of the given shape, named and drawn as item k of
 * the op's descriptor says (tg_op_def.inputs: check/inputs.c), with the
 * context's RNG; differentiable unless drawn as a mask (0|1). NULL and
 * TG_ERR_FORMAT naming the op when the text has no valid item k. */
tg_tensor *tg_registry_input(tg_ctx *ctx, tg_op_case *c, int k, int ndim, const int64_t *shape);

#endif

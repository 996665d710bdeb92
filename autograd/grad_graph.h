/* The double backward (create_graph): gradients computed by ops that record
 * themselves, so they can be differentiated again. Internal (not
 * installed); the public side is tg_grad and tg_hvp in
 * include/tapegrad/autograd.h.
 *
 * Each op's first backward (its tg_backward_fn) writes numbers in place and
 * cannot be differentiated. Under create_graph the walk calls instead the
 * op's grad-graph rule: the same gradient written with differentiable
 * tg_* ops (so it records onto the tape like any forward). A rule reads the
 * record (its inputs, output, scalars) and the output's gradient dy, and
 * returns, for each input k, its contribution dx[k] (same shape as input
 * k, or NULL for none); the walk adds the contributions up with tg_add. A
 * record without a rule makes the walk fail with an error naming the op.
 *
 * A record's rule is its op's: the backward_graph of the descriptor it
 * points to (tapegrad/op.h), written beside the op's backward
 * (autograd/ops_*.c, layers/). Every rule computes what the op's first
 * backward computes and restates its forward and the gradient it
 * composes. Factors that are piecewise constant in the inputs (relu's
 * step, abs's sign, a max's argmax, a dropout mask, a cross-entropy
 * target) are built as constant tensors (tg_gg_const): their derivative is
 * 0 wherever the op is differentiable. Contributions are computed only for
 * inputs that require grad (tg_node_needs_grad). */
#ifndef TG_AUTOGRAD_GRAD_GRAPH_H
#define TG_AUTOGRAD_GRAD_GRAPH_H

#include "autograd/tape.h"

/* A rule (tg_grad_graph_fn, tapegrad/op.h) sets dx[k] for k < n->n_in
 * (all NULL on entry) and returns false when the context is in error. n
 * is a copy of the record: the rule's ops grow the tape. */

/* Gradients of out with respect to inputs[0..n-1], seeded by grad_out (NULL:
 * ones), walking only records floor..out's (those below count as leaves).
 * create_graph: the gradients are recorded (differentiable). Leaves' grad
 * fields are left as they were. grads[i] is zeros when no path leads from
 * inputs[i] to out. */
bool tg_grad_walk(tg_ctx *ctx, const char *fn, tg_tensor *out, tg_tensor *grad_out, int64_t floor, int n,
                  tg_tensor *const *inputs, tg_tensor **grads, bool create_graph);

/* Helpers of the rules (differentiable, recorded). */
/* g summed over the dims it was broadcast along to reach x's shape. */
tg_tensor *tg_gg_sum_to(tg_ctx *ctx, tg_tensor *g, const tg_tensor *x);
/* g (of a shape that broadcasts to x's) broadcast to x's shape. */
tg_tensor *tg_gg_expand(tg_ctx *ctx, tg_tensor *g, const tg_tensor *x);
/* A constant tensor (not recorded) of x's shape, c_i = f(x_i, a): a
 * factor that is piecewise constant in the inputs (relu's step, abs's
 * sign, a mask's zeros), whose derivative is 0 wherever the op is
 * differentiable. */
tg_tensor *tg_gg_const(tg_ctx *ctx, const tg_tensor *x, double (*f)(double x, double a), double a);

#endif

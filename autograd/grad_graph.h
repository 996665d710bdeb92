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
 * Rules are found by the record's name among the built-in ops
 * (autograd/grad_rules.c), unless the record carries one (its grad_rule
 * field: the layers' fused ops set theirs, a custom op gets
 * tg_grad_rule_none so a user op named like a built-in is never taken for
 * it). */
#ifndef TG_AUTOGRAD_GRAD_GRAPH_H
#define TG_AUTOGRAD_GRAD_GRAPH_H

#include "autograd/tape.h"

/* dx[k] for k < n->n_in (all NULL on entry); false when the context is in
 * error. n is a copy of the record: the rule's ops grow the tape. */
typedef bool (*tg_grad_rule_fn)(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx);
/* (the type of tg_node's grad_rule field) */

/* The rule of record n, or NULL when it has none. */
tg_grad_rule_fn tg_grad_rule_find(const tg_node *n);
/* The rule of a record that has none (custom ops): never found by name. */
bool tg_grad_rule_none(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx);

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

#endif

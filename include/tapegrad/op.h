/* tapegrad/op.h: write your own differentiable op -- a forward, a
 * hand-written backward, what it saves -- and record it on the tape like a
 * built-in op. Every built-in op records itself through these same calls
 * (tg_record, tg_grad_of, tg_node_save), so they are proven by everything
 * tapegrad already does.
 *
 * The short way, PyTorch's autograd.Function: describe the op once and
 * apply it.
 *
 *   // y = x * x.  Backward: dx += 2 x dy.
 *   static tg_tensor *square_fw(tg_ctx *ctx, tg_node *node, tg_tensor *const *in, void *user) {
 *       (void)user;
 *       tg_node_save_tensor(ctx, node, in[0]);     // backward needs x
 *       return tg_mul(ctx, in[0], in[0]);           // grad mode is off here
 *   }
 *   static void square_bw(tg_ctx *ctx, tg_node *node) {
 *       tg_tensor *x = tg_node_saved_tensor(node, 0);
 *       tg_tensor *dy = tg_node_grad_output(node);
 *       tg_node_accumulate(ctx, node, 0, tg_mul_scalar(ctx, tg_mul(ctx, x, dy), 2.0));
 *   }
 *   static const tg_op_def SQUARE = {.name = "square", .forward = square_fw, .backward = square_bw};
 *   ...
 *   tg_tensor *y = tg_op_apply(ctx, &SQUARE, 1, &x, NULL);
 *
 * examples/custom_op.c defines a learner's RMSNorm this way end to end and
 * gradchecks it; docs/custom-ops.md is the guide.
 *
 * What tapegrad does for a custom op as for a built-in one:
 *   - no-grad mode (tg_set_grad_enabled false) and inputs that need no grad:
 *     the forward runs, nothing is recorded;
 *   - tg_backward_ex(..., keep_tape = true) runs its backward again;
 *   - gradients accumulate: an input used twice gets both contributions
 *     (tg_node_accumulate adds, never overwrites);
 *   - in-place checks: if an input, the output or a saved tensor is
 *     written in place after the op ran (tg_fill, tg_assign, an optimizer
 *     step...), tg_backward stops with an error naming the op and the
 *     tensor, instead of using values the forward never saw;
 *   - errors are values: a forward or backward that fails (its own
 *     tg_node_error, or a tapegrad call inside it) leaves the context in
 *     error, and the message says which op; a gradient of the wrong shape
 *     or dtype is refused naming the op and both shapes;
 *   - a backward that writes past the last element of an input's gradient
 *     (through tg_grad_of(...)->data) is an error naming the op and the
 *     input: while it runs, each gradient it may write is followed by
 *     guard bytes, compared afterwards (tg_op_apply's records only).
 *
 * The backward runs with grad mode off, so it may use any tapegrad op to
 * compute its gradients (they are arena scratch: tg_backward gives the
 * arena they took back when the backward returns, and releases the output's
 * gradient too unless the tape is kept -- keep neither). */
#ifndef TAPEGRAD_OP_H
#define TAPEGRAD_OP_H

#include "tapegrad/autograd.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A record on the tape: one op application (opaque; read it with the
 * tg_node_* calls below). Valid during the op's forward (tg_op_apply) and
 * its backward. */
typedef struct tg_node tg_node;
/* An op's backward: reads the gradient of its output
 * (tg_node_grad_output) and adds into the gradients of its inputs. */
typedef void (*tg_backward_fn)(tg_ctx *ctx, tg_node *node);

/* Most tensors a record may save (tg_node_save_tensor), and most scalars
 * (tg_node_set_scalar). */
#define TG_NODE_MAX_SAVED 8
#define TG_NODE_MAX_SCALARS 4

/* ======================================================================== */
/* The op's descriptor                                                      */
/* ======================================================================== */

/* An op's double backward (optional): the gradients of its inputs
 * written with differentiable tapegrad ops, so that tg_grad(...,
 * create_graph = true) and tg_hvp can differentiate them again. Given the
 * gradient dy of the op's output, it sets dx[k] to input k's gradient (a
 * new tensor of input k's shape and dtype; leave it NULL for none) and
 * returns true, or false with the context in error. Grad mode is ON while
 * it runs: its ops record themselves. Compute from the inputs
 * (tg_node_input), the output and dy -- a saved tensor the forward made
 * with grad mode off (a statistic such as rstd) is a constant to the
 * second derivative, so recompute it from the inputs instead. Check it
 * with tg_gradgradcheck (tapegrad/check.h). */
typedef bool (*tg_grad_graph_fn)(tg_ctx *ctx, const tg_node *node, tg_tensor *dy, tg_tensor **dx);

/* An op's tangent rule (forward mode, tg_jvp in tapegrad/autograd.h):
 * returns the tangent of the op's output,
 *   d out = sum_k (d out / d in_k) tangents[k]
 * a new tensor of the output's shape and dtype (J v of the op at its
 * inputs, one forward pass: no transpose, unlike the backward). tangents[k]
 * has input k's shape and dtype (zeros when input k does not depend on the
 * inputs of tg_jvp), NULL when input k is NULL. Grad mode is off while it
 * runs, so it may use any tapegrad op. Returns NULL with the error set on
 * failure. */
typedef tg_tensor *(*tg_jvp_rule)(tg_ctx *ctx, tg_node *node, tg_tensor *const *tangents);

/* A finite-difference step and the tolerances of a gradient check's pass
 * rule (tapegrad/check.h). */
typedef struct tg_gradcheck_tol {
    double h;          /* step */
    double atol, rtol; /* pass when |a - n| <= atol + rtol |n| */
} tg_gradcheck_tol;

/* An op: what it is, in one place. Every built-in op has one, a const
 * beside its kernel, and every record on the tape points to its op's (so
 * a record's rules are found by pointer, never by name); a custom op is
 * written the same way. Only name and backward are required.
 *
 * `forward` is for tg_op_apply (below): it computes the output from
 * in[0..n_in-1] with any tapegrad calls (grad mode is off while it runs,
 * so they record nothing) and saves what backward needs on `node`; it
 * returns a new tensor (not one of its inputs), or NULL with the context
 * in error. `user` is passed through to it. An op that records itself
 * with tg_record leaves it NULL. `backward` is as tg_backward_fn.
 *
 * Double backward: `backward` writes numbers and cannot be differentiated.
 * Without a `backward_graph`, an op is first-order only: tg_grad with
 * create_graph (and tg_hvp, tg_gradgradcheck, `tapegrad-gradcheck check
 * --order 2`) stops with the error "'NAME' cannot be differentiated
 * twice: it has no double-backward rule ..." -- never a wrong answer.
 * Forward mode: without a `jvp`, tg_jvp stops with "op 'NAME' has no
 * tangent rule".
 *
 * The last fields are what a gradient check needs to know about the op
 * (tapegrad/check.h's registry reads them; the library never does):
 *  - args: its arguments and their defaults, "axis=-1,keepdim=0" (a key
 *    without '=' has no default); NULL: none;
 *  - inputs: each tensor input's name and the values a check draws for
 *    it, "x=-2:2,gamma=0.5:1.5", in the order of the inputs:
 *      LO:HI       uniform in [LO, HI)
 *      +-LO:HI     |x| uniform in [LO, HI), either sign (away from 0)
 *      LO:HI distinct   a shuffled even ramp over [LO, HI): no ties
 *      0|1         zeros and ones, a mask: not differentiable
 *  - f64, f32: its own step and tolerances by dtype, where the defaults do
 *    not fit it; a 0 field: the dtype's default (tg_gradcheck_dtype_tol). */
typedef struct tg_op_def {
    const char *name; /* for messages and the tape ("rmsnorm_mine") */
    tg_tensor *(*forward)(tg_ctx *ctx, tg_node *node, tg_tensor *const *in, void *user);
    tg_backward_fn backward;
    tg_grad_graph_fn backward_graph; /* optional: the double backward (above) */
    tg_jvp_rule jvp;                 /* optional: the tangent rule (above) */
    const char *args;                /* for checks (above) */
    const char *inputs;
    tg_gradcheck_tol f64, f32;
} tg_op_def;

/* ======================================================================== */
/* The one-call form                                                        */
/* ======================================================================== */

/* y = def->forward(in...), recorded on the tape with def->backward when grad
 * mode is on and an input requires grad; the record keeps a copy of *def
 * (in the arena, for the step), so def may be a local. n_in is 1..8; an
 * input may be NULL (an optional argument: the forward sees NULL, backward
 * gets no gradient for it). Returns y, or NULL with the error set (a NULL
 * def or forward, a stale input, a forward that failed or returned one of
 * its inputs). */
TG_API tg_tensor *tg_op_apply(tg_ctx *ctx, const tg_op_def *def, int n_in, tg_tensor *const *in, void *user);

/* ======================================================================== */
/* What forward and backward call                                           */
/* ======================================================================== */

/* The op's name, its n-th input (NULL outside 0..n-1), its output, and the
 * gradient of its output (backward only; never NULL there; read it, never
 * write it). */
TG_API const char *tg_node_name(const tg_node *node);
TG_API int tg_node_n_inputs(const tg_node *node);
TG_API tg_tensor *tg_node_input(const tg_node *node, int k);
TG_API tg_tensor *tg_node_output(const tg_node *node);
TG_API tg_tensor *tg_node_grad_output(const tg_node *node);

/* Saves t (an input, the output, or a tensor the forward made: a statistic
 * such as rstd) for backward. Its in-place version is noted: backward is
 * refused if t is written in place afterwards. Its bytes count in
 * tg_tape_saved_bytes unless it is an input or the output (kept by
 * pointer, not copied). False (and the error set) beyond
 * TG_NODE_MAX_SAVED or on a bad argument. */
TG_API bool tg_node_save_tensor(tg_ctx *ctx, tg_node *node, tg_tensor *t);
/* The k-th saved tensor, in the order saved (NULL outside 0..n-1). */
TG_API tg_tensor *tg_node_saved_tensor(const tg_node *node, int k);
TG_API int tg_node_n_saved(const tg_node *node);

/* Scalars for backward (eps, a flag...): k in 0..TG_NODE_MAX_SCALARS-1. */
TG_API bool tg_node_set_scalar(tg_ctx *ctx, tg_node *node, int k, double v);
TG_API double tg_node_scalar(const tg_node *node, int k);

/* True when input k needs a gradient (backward may skip the work
 * otherwise). */
TG_API bool tg_node_needs_grad(const tg_node *node, int k);
/* grad(input k) += g, the gradient g has input k's shape and dtype. Does
 * nothing (returns true) when input k needs no gradient. A g of another
 * shape or dtype, or NULL, is an error naming the op, the input and both
 * shapes. Returns false when the context is in error. */
TG_API bool tg_node_accumulate(tg_ctx *ctx, tg_node *node, int k, const tg_tensor *g);

/* Sets the context's error TG_ERR_VALUE, the message starting with the
 * op's name: "rmsnorm_mine: <fmt...>". */
TG_API void tg_node_error(tg_ctx *ctx, const tg_node *node, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* ======================================================================== */
/* The primitives (what every built-in op calls)                            */
/* ======================================================================== */

/* True when an op on these inputs must be recorded: grad mode is on and at
 * least one (non-NULL) input requires grad. */
TG_API bool tg_needs_grad(const tg_ctx *ctx, int n_in, tg_tensor *const *in);
/* Appends a record for `out` = op(in...), pointing to op (a descriptor
 * that outlives the tape: a static const) whose backward it runs. Marks
 * out as requiring grad, and notes the in-place version of every input and
 * of out: call it once the forward has written out. Returns NULL when no
 * record is needed (grad mode off, no input requires grad) or on error
 * (then the error is set: op NULL or without a name or backward, a stale
 * input). The node stays valid until the next tg_record. */
TG_API tg_node *tg_record(tg_ctx *ctx, const tg_op_def *op, tg_tensor *out, int n_in, tg_tensor *const *in);
/* Allocates `bytes` in the arena for the node's saved data and counts them
 * in tg_tape_saved_bytes. */
TG_API void *tg_node_save(tg_ctx *ctx, tg_node *node, size_t bytes);
/* The gradient buffer of t for accumulation (+=) during backward: NULL
 * when t does not require grad; else t->grad, made (zeroed) on first
 * use. */
TG_API tg_tensor *tg_grad_of(tg_ctx *ctx, tg_tensor *t);

#ifdef __cplusplus
}
#endif

#endif /* TAPEGRAD_OP_H */

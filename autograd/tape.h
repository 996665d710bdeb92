/* The tape: what a differentiable op records, and the helpers op writers use.
 *
 * How to write a differentiable op (see autograd/ops_*.c for examples):
 *
 *   // derivation in a comment above:
 *   static void foo_backward(tg_ctx *ctx, tg_node *n) {
 *       const tg_tensor *dy = n->out->grad;          // never NULL here
 *       tg_tensor *da = tg_grad_of(ctx, n->in[0]);   // NULL: no grad needed
 *       if (da) ... da += ...;                        // always accumulate
 *   }
 *   // the op's descriptor: its name, backward, rules (tapegrad/op.h; TG_OP below)
 *   const tg_op_def tg_foo_op = TG_OP("foo", foo_backward, foo_grad, foo_jvp, .inputs = "x=-2:2");
 *
 *   tg_tensor *tg_foo(tg_ctx *ctx, tg_tensor *a) {
 *       ... check arguments, make `out`, compute the forward ...
 *       tg_node *n = tg_record(ctx, &tg_foo_op, out, 1, &a);
 *       if (n) { ... save what backward needs: n->f[0] = alpha;
 *                n->saved = tg_node_save(ctx, n, bytes); ... }
 *       return tg_ok(ctx) ? out : NULL;
 *   }
 *
 * tg_record returns NULL when nothing needs recording (no input requires
 * grad, or grad mode is off) and on allocation failure (the error is set).
 * The node pointer stays valid only until the next tg_record call. */
#ifndef TG_AUTOGRAD_TAPE_H
#define TG_AUTOGRAD_TAPE_H

#include "tensor/internal.h"
#include "tapegrad/op.h"

/* tg_node, tg_backward_fn, tg_record, tg_needs_grad, tg_node_save and
 * tg_grad_of are public: include/tapegrad/op.h, where user-defined ops use
 * them too. Here is the record itself, which built-in ops read directly. */
struct tg_node {
    const tg_op_def *op;     /* the op's descriptor: its name, rules (tapegrad/op.h) */
    tg_backward_fn backward; /* what backward runs: op->backward, or tg_op_apply's guard around it */
    tg_tensor *out;
    tg_tensor **in; /* n_in inputs (arena array) */
    int n_in;
    int n_saved_t; /* tensors saved by tg_node_save_tensor */
    /* The version counters (tg_version(t)) of the inputs, then of
     * the output, when the op ran: backward checks them before it runs the
     * record, so a saved tensor changed in place since is an error. */
    uint32_t *version;
    /* tg_node_save_tensor's tensors (arena, TG_NODE_MAX_SAVED slots) and
     * their versions when saved; checked like the inputs' */
    tg_tensor **saved_t;
    uint32_t *saved_version;
    void *saved; /* what the forward saved for backward (arena) */
    size_t saved_bytes;
    double f[4];  /* scalar arguments (alpha, eps, ...) */
    int64_t i[4]; /* integer arguments (axis, flags, ...) */
};

/* A built-in op's descriptor (tapegrad/op.h) as one line of a table: its
 * name, backward, double-backward rule and tangent rule (NULL: none), then
 * what a gradient check needs, as designated initializers (at least one:
 * C11 wants an argument for the "..."):
 *   const tg_op_def tg_exp_op = TG_OP("exp", exp_backward, exp_grad, exp_jvp, .inputs = "x=-2:2");
 * is {.name = "exp", .backward = exp_backward, .backward_graph = exp_grad,
 * .jvp = exp_jvp, .inputs = "x=-2:2"}. */
#define TG_OP(NAME, BACKWARD, GRAD, JVP, ...) \
    { .name = (NAME), .backward = (BACKWARD), .backward_graph = (GRAD), .jvp = (JVP), __VA_ARGS__ }

/* The walk's checks, shared by tg_backward_ex, tg_grad and tg_jvp: true when no
 * tensor record n reads was written in place since the op ran, else sets
 * fn's error naming the op and the tensor; and, after n's backward failed,
 * makes the message name the op. */
bool tg_record_check(tg_ctx *ctx, const char *fn, const tg_node *n);
void tg_record_failed(tg_ctx *ctx, const tg_node *n);

/* Counts bytes the forward saved elsewhere (e.g. an input kept by pointer
 * that a composed op needs) without allocating. */
void tg_node_count_saved(tg_ctx *ctx, tg_node *node, size_t bytes);

/* Moves the context's tape (records and grad mode) into *saved and gives
 * the context an empty one, grad mode unchanged: a private tape, as
 * gradcheck uses. tg_tape_restore frees the private tape and puts *saved
 * back, grad mode included. */
TG_FRIEND void tg_tape_stash(tg_ctx *ctx, tg_tape *saved);
TG_FRIEND void tg_tape_restore(tg_ctx *ctx, tg_tape *saved);

/* True when t is the output of a record of the live tape, one a backward
 * can still walk (not consumed, not cleared by a reset). Autocast
 * (layers/autocast.c) reuses a parameter's 16-bit copy only then. */
bool tg_tape_holds(const tg_ctx *ctx, const tg_tensor *t);

/* Parallel loops use the task pool of tensor/parallel.h (tg_parallel,
 * tg_parallel_range): the one set of helper threads the library has. */

#endif

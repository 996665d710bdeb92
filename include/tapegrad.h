/* tapegrad: a tape-based autodiff training micro-framework in C11.
 *
 * This umbrella header includes the whole library, one header per source
 * folder, in the order data flows (a header only includes those above it):
 *
 *   tapegrad/tensor.h    tensors, the context, RNG, creation, printing
 *   tapegrad/autograd.h  the tape, backward, the differentiable ops
 *   tapegrad/op.h        your own op: forward, hand-written backward, saves
 *   tapegrad/layers.h    parameters, fused layer ops, modules, models
 *   tapegrad/optim.h     SGD, Adam, AdamW, schedules, clipping
 *   tapegrad/io.h        safetensors checkpoints and their metadata
 *   tapegrad/train.h     loss logs, gnuplot plots, progress lines
 *
 * Gradient checking and the op registry are a layer of their own, for tests
 * and tools: include "tapegrad/check.h" and link tapegrad::check (CMake) or
 * `pkg-config tapegrad-check`. Data-parallel training over MPI and gradient
 * accumulation are another: "tapegrad/dist.h", tapegrad::dist or
 * `pkg-config tapegrad-dist` (docs/distributed.md).
 *
 * A worked example: fit y = 2x with one Linear layer.
 *
 *   tg_ctx *ctx = tg_ctx_new(42);                        // seed of the RNG
 *   tg_linear *fc = tg_linear_new(ctx, "fc", 1, 1, true, TG_F32);
 *   tg_params params = {0};
 *   tg_linear_params(ctx, fc, &params);                  // fc.weight, fc.bias
 *   tg_sgd_opts o = tg_sgd_defaults(0.1);
 *   tg_optim *opt = tg_sgd_new(ctx, &params, &o);
 *   for (int step = 0; step < 100; step++) {
 *       tg_tensor *x = tg_rand(ctx, TG_F32, TG_SHAPE(8, 1), -1, 1);
 *       tg_tensor *y = tg_mul_scalar(ctx, x, 2.0);
 *       tg_tensor *loss = tg_mse_loss(ctx, tg_linear_forward(ctx, fc, x), y);
 *       tg_optim_zero_grad(ctx, opt);
 *       tg_backward(ctx, loss);
 *       tg_optim_step(ctx, opt);
 *       if (!tg_ok(ctx)) { fprintf(stderr, "%s\n", tg_error_message(ctx)); break; }
 *       tg_ctx_reset(ctx);                               // frees x, y, loss...
 *   }
 *   tg_optim_free(ctx, opt);
 *   tg_params_free(&params);
 *   tg_linear_free(ctx, fc);
 *   tg_ctx_free(ctx);
 *
 * Life cycle of what the context owns
 *  - The context (tg_ctx) is one per training loop: its allocator, an arena,
 *    the persistent tensors, the RNG, the tape and the error state.
 *  - Arena tensors: everything an op or a creation function returns. They
 *    live until the next tg_ctx_reset, which frees them all at once in O(1)
 *    and keeps the arena's memory for the next step (no malloc per step once
 *    warm). Using one after the reset is an error naming the call ("... is
 *    from step 3, before tg_ctx_reset; the context is at step 4"), always
 *    caught in checked builds (TG_CHECKED: every build type but Release).
 *  - Persistent tensors: parameters and optimizer state (tg_persist, made
 *    by the layers and optimizers). They live on the heap until their owner
 *    frees them (tg_*_free, or tg_ctx_free for what is left). A layer's
 *    parameters and an optimizer's state are freed with it, never alone;
 *    a second free, or a free through another context, is an error.
 *  - The tape: an op records itself when grad mode is on and an input
 *    requires grad, noting its tensors' in-place write counts. tg_backward
 *    walks the records in reverse and consumes them (keep_tape keeps them);
 *    an op whose inputs were written in place since it ran (tg_fill,
 *    tg_assign, an optimizer step...) stops it with an error. tg_ctx_reset
 *    empties the tape.
 *  - A step is: forward (records), zero-grad, backward, optimizer step,
 *    check tg_ok once, reset.
 *
 * Conventions
 *  - Every function takes the context first and returns a new tensor (or a
 *    status). Chains read like math: y = tg_relu(ctx, tg_add(ctx, a, b)).
 *  - Errors are values (the cairo model). Misuse sets a sticky error on the
 *    context with a message naming the function and the offending shapes or
 *    values. A function handed NULL, or called while the context is in
 *    error, returns NULL (or a failure status) and does nothing. Check once
 *    per step with tg_ok(ctx). Set TG_ABORT_ON_ERROR=1 in the environment to
 *    abort at the first error with its message. The functions that read or
 *    write files (tg_ckpt_*, tg_train_save/load) also return the context's
 *    status after the call; the few that take no context (plots, gnuplot)
 *    return a tg_status instead.
 *  - Tensors are always contiguous and row-major.
 *  - The library never prints unasked and never calls exit().
 *
 * How the library is organized, and how to add an op or a layer:
 * docs/DESIGN.md. */
#ifndef TAPEGRAD_H
#define TAPEGRAD_H

#define TAPEGRAD_VERSION_MAJOR 0
#define TAPEGRAD_VERSION_MINOR 2
#define TAPEGRAD_VERSION_PATCH 0

#include "tapegrad/tensor.h"
#include "tapegrad/autograd.h"
#include "tapegrad/op.h"
#include "tapegrad/layers.h"
#include "tapegrad/optim.h"
#include "tapegrad/io.h"
#include "tapegrad/train.h"

#endif /* TAPEGRAD_H */

/* tapegrad/dist.h: data-parallel training over MPI, with results that do
 * not depend on how the work is split (data_parallel/, the library tapegrad::dist).
 *
 * Not part of the umbrella <tapegrad.h>: include this header and link
 * tapegrad::dist (CMake) or `pkg-config tapegrad-dist`. The header names no
 * MPI type, so a program that uses it builds the same with or without MPI.
 * The library is built over MPI when the CMake option TG_MPI is ON (the
 * default when MPI is found); with TG_MPI=OFF it is the same API over a
 * world of one process, and the library tapegrad itself never depends on
 * MPI. docs/distributed.md is the guide: running under mpirun, across
 * machines, and how the bitwise guarantee below is kept.
 *
 * Data parallelism: P processes (ranks 0..P-1, started by mpirun) hold the
 * same model. Every step each rank computes the gradient of its slice of
 * the global batch, the ranks sum their gradients (an all-reduce), and each
 * rank runs the same optimizer step on the same sum, so the parameters stay
 * identical everywhere. A step:
 *
 *   tg_optim_zero_grad(ctx, opt);
 *   tg_backward(ctx, loss_of_my_slice);              // mean over my b_r rows
 *   tg_dist_allreduce_grads(ctx, d, &params, b_r / (double)B);
 *   tg_optim_step(ctx, opt);                         // the same on every rank
 *
 * The guarantee: the sum is always made in rank order,
 *   g = ((w_0 g_0 + w_1 g_1) + w_2 g_2) + ... + w_{P-1} g_{P-1},
 * in the gradients' own dtype, whatever MPI's algorithms or the timing, so
 * P ranks give parameters bitwise identical to ONE process that runs the
 * same P slices as micro-batches through the gradient accumulator below
 * (which folds in the same order), for any P and any thread count.
 *
 * Errors: every function takes the context for its errors (the cairo
 * model, as everywhere). A collective (every function below that takes a
 * tg_dist, except rank, size and the stats) must be called by every rank,
 * in the same order, with the same tensor shapes and dtypes -- also by a
 * rank whose context is already in error: that rank then joins with a
 * failure flag instead of its data, and every rank leaves the collective
 * with an error ("rank 2 failed: tg_train_load: ...") instead of waiting
 * forever. So one rank's failure ends every rank, each with the reason. */
#ifndef TAPEGRAD_DIST_H
#define TAPEGRAD_DIST_H

#include "tapegrad/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================== */
/* The world: ranks and processes                                           */
/* ======================================================================== */

/* The processes of one run (opaque). */
typedef struct tg_dist tg_dist;

/* Joins the run. Under mpirun (or another MPI launcher) it initializes MPI
 * (unless the program already did) and returns this process's place in
 * the world; a program started without a launcher is a world of one and
 * MPI is not initialized at all (no start-up cost, nothing to finalize).
 * argc and argv are main's (MPI may use them; may be NULL).
 * A collective: the ranks compare their builds (tg_dist_fingerprint) and
 * refuse to run mixed ones. NULL and an error on failure, e.g. a build
 * without MPI started by mpirun with 2 processes (each would train alone),
 * ranks of different builds ("the ranks run different builds ...: rank 0
 * runs ...; rank 1 runs ..."), or a bad TG_DIST_TIMEOUT. Memory comes from
 * ctx's allocator. */
TG_API tg_dist *tg_dist_init(tg_ctx *ctx, int *argc, char ***argv);
/* Frees the handle and finalizes MPI when tg_dist_init initialized it.
 * Not a collective, but MPI's finalize waits for the other ranks (not
 * after a missed deadline: see tg_dist_set_timeout). */
TG_API void tg_dist_free(tg_dist *d);

/* This process's rank (0..size-1) and the number of processes; the number
 * of processes on this machine (to share its cores: give each process
 * cores / local_size threads). A NULL d is rank 0 of 1. */
TG_API int tg_dist_rank(const tg_dist *d);
TG_API int tg_dist_size(const tg_dist *d);
TG_API int tg_dist_local_size(const tg_dist *d);
/* What carries the messages: the MPI library's name and version, or why
 * there is none ("one process: built without MPI", "one process: not
 * started by mpirun"). */
TG_API const char *tg_dist_backend(const tg_dist *d);

/* What decides the bits of this rank's results besides its inputs, as
 * text: the library's version, the GEMM's micro-kernels and the
 * instruction sets compiled for, the compiler, the C library and the
 * context's autocast dtype at tg_dist_init. Every rank's must be rank 0's
 * (tg_dist_init checks): a rank from another build would compute another
 * gradient for the same slice, and the run would match no one-process run. */
TG_API const char *tg_dist_fingerprint(const tg_dist *d);

/* The deadline of every collective: a rank that waits longer for the
 * others calls the roll, and every waiting rank fails with an error naming
 * the ranks that did not arrive ("rank 1 did not arrive within 600 s ...").
 * The world is then broken: every later collective fails at once, and
 * tg_dist_free does not finalize MPI (which would wait for the missing
 * rank), so the program should exit non-zero; mpirun then ends the rest.
 * Waiting ranks poll with growing pauses instead of spinning a core.
 * (It covers the collectives of tg_dist_init after MPI's start-up and
 * every one after; not MPI_Init itself.)
 * Default: the environment variable TG_DIST_TIMEOUT (seconds) if set, else
 * 600 s; 0: no deadline. Not a collective (each rank keeps its own).
 * Errors: a negative or non-finite value, a NULL d. */
TG_API bool tg_dist_set_timeout(tg_ctx *ctx, tg_dist *d, double seconds);
TG_API double tg_dist_timeout(const tg_dist *d);
/* The longest one collective has waited on this rank since tg_dist_init
 * (seconds): what a deadline must stay above. */
TG_API double tg_dist_longest_wait(const tg_dist *d);

/* Part `part` of `parts` near-equal consecutive parts of `total` items:
 *   start = floor(part * total / parts),  count = start(part + 1) - start,
 * so the sizes differ by at most one and the parts tile [0, total). For
 * splitting a global batch into slices (one per rank, or per micro-batch).
 * Out-of-range arguments give start = count = 0. */
TG_API void tg_dist_split(int64_t total, int parts, int part, int64_t *start, int64_t *count);

/* Rows [start, start + count) of a global batch drawn with replacement
 * from n items by the context's RNG, into index[0..count):
 *   index[i] = floor(u_(offset + start + i) * n)   (at most n - 1)
 * with u_j the uniform at position j of the RNG's stream and offset the
 * RNG's offset now (tg_rng_state). Row i depends on its position alone,
 * so each rank -- and each micro-batch -- draws just its own rows
 * (tg_dist_split) and the global batch is the same however it is split.
 * The RNG is left as it was: after the step's last slice, move it past
 * the whole batch of B rows (tg_rng_set_state(ctx, seed, offset + B)) on
 * every rank. Not a collective. Errors: n < 1, start < 0, count < 0, a
 * NULL index with count > 0. */
TG_API bool tg_dist_draw(tg_ctx *ctx, int64_t n, int64_t start, int64_t count, int64_t *index);

/* ======================================================================== */
/* Agreement: one rank's failure ends every rank                            */
/* ======================================================================== */

/* Collective. True on every rank when every rank passes ok = true with a
 * context not in error; otherwise false on every rank, and each rank that
 * had not failed gets the error "rank R failed: MESSAGE" (R the lowest
 * failing rank, MESSAGE its context's error, or a note that it printed its
 * reason itself). Call it after anything that can fail on one rank only: a
 * file read, a rank-0-only write, a check of the input. */
TG_API bool tg_dist_agree(tg_ctx *ctx, tg_dist *d, bool ok);
/* Collective. True when `size` bytes at `bytes` are the same on every rank
 * (compared by a 64-bit FNV-1a hash); else false everywhere with the error
 * "WHAT differ between the ranks". E.g. the flags that decide how many
 * steps and collectives a run makes: ranks that disagree would wait for
 * each other forever. */
TG_API bool tg_dist_same(tg_ctx *ctx, tg_dist *d, const void *bytes, size_t size, const char *what);

/* ======================================================================== */
/* Broadcast from rank 0                                                    */
/* ======================================================================== */
/* Collectives. Every rank ends with rank 0's values, bitwise. The tensors
 * (f32 and f64, any sizes) are packed into a few large messages (the
 * bucket size, below); their count, dtypes and shapes must match across
 * ranks (checked first: an error names the mismatch, nothing is sent). */

/* The n tensors' data. */
TG_API bool tg_dist_broadcast(tg_ctx *ctx, tg_dist *d, tg_tensor *const *tensors, int n);
/* The parameters' values (not their grads). */
TG_API bool tg_dist_broadcast_params(tg_ctx *ctx, tg_dist *d, tg_params *params);
/* The optimizer's state (moments, momentum buffers and step count, see
 * tg_optim_state), then tg_optim_sync_state: after a resume, every rank
 * continues from rank 0's optimizer. */
TG_API bool tg_dist_broadcast_optim(tg_ctx *ctx, tg_dist *d, tg_optim *opt);
/* The context's RNG state (seed and offset), so every rank draws the same
 * numbers from here on. */
TG_API bool tg_dist_broadcast_rng(tg_ctx *ctx, tg_dist *d);

/* ======================================================================== */
/* All-reduce in rank order                                                 */
/* ======================================================================== */
/* Collectives. Each element becomes, on every rank,
 *   y = ((w_0 x_0 + w_1 x_1) + w_2 x_2) + ... + w_{P-1} x_{P-1}
 * with x_r and w_r rank r's element and weight; each product w_r x_r is
 * rounded to the dtype and the sums are made left to right in that dtype,
 * exactly as tg_grad_accum_add folds micro-batches. (With one rank: y = w x.)
 * The order is the library's, never MPI's: each bucket is split into P
 * chunks, rank q receives every rank's piece of chunk q and folds them in
 * rank order, then sends the folded chunk to every rank: 2 exchanges per
 * bucket, each rank sending and receiving about twice the data, as a ring
 * all-reduce does. w must be finite. */

/* The n tensors' data, in place. */
TG_API bool tg_dist_allreduce(tg_ctx *ctx, tg_dist *d, tg_tensor *const *tensors, int n, double weight);
/* The parameters' grads, in place: between tg_backward (or
 * tg_grad_accum_finish) and tg_optim_step. A parameter without a grad is
 * an error. With each rank's loss the mean over its b_r rows of a global
 * batch of B, weight = b_r / B gives the gradient of the global mean. */
TG_API bool tg_dist_allreduce_grads(tg_ctx *ctx, tg_dist *d, tg_params *params, double weight);
/* n doubles, in place: losses, counts, metrics. Up to 256 bytes of them
 * take one message (the check that begins every collective carries them). */
TG_API bool tg_dist_allreduce_f64(tg_ctx *ctx, tg_dist *d, double *values, int64_t n, double weight);
/* tg_backward(ctx, loss) then tg_dist_allreduce_grads(ctx, d, params,
 * weight), the same bits, with the communication under backward: the
 * gradients are cut into buckets in reverse parameter order, and a
 * bucket's all-reduce starts as soon as backward has run the first use
 * of each of its parameters (its gradients are then final), while
 * backward goes on with the earlier layers. params in forward order (as
 * tg_module_params gives them) let the buckets start in turn. Zero the
 * grads first, as for tg_backward; one micro-batch per rank (with the
 * accumulator, reduce after tg_grad_accum_finish instead). */
TG_API bool tg_dist_backward(tg_ctx *ctx, tg_dist *d, tg_tensor *loss, tg_params *params, double weight);

/* The largest message of a broadcast or an all-reduce, in bytes (default
 * 4 MiB, at least 64, at most 1 GiB: the value is clamped). Every rank
 * must use the same (collectives check it). */
TG_API void tg_dist_set_bucket_bytes(tg_dist *d, size_t bytes);
TG_API size_t tg_dist_bucket_bytes(const tg_dist *d);

/* Time and traffic of this rank's all-reduces since the start (or the last
 * reset): calls, messages (the check that begins each call, then 2 per
 * bucket; tg_dist_backward also one at its end), payload bytes (the
 * reduced data), wall seconds inside the calls, including the wait for
 * slower ranks (for tg_dist_backward: after its backward ended, the
 * communication left uncovered), and the buckets tg_dist_backward started
 * while its backward still ran. */
typedef struct tg_dist_stats {
    int64_t calls, messages;
    double bytes, seconds;
    int64_t early;
} tg_dist_stats;
TG_API tg_dist_stats tg_dist_get_stats(const tg_dist *d);
TG_API void tg_dist_reset_stats(tg_dist *d);

/* ======================================================================== */
/* The optimizer state split over the ranks (ZeRO stage 1)                  */
/* ======================================================================== */
/* Every rank keeps the whole model and the whole all-reduced gradient, but
 * updates only its share of the parameters, so its optimizer's state (the
 * bulk of the memory with Adam: two moments per parameter) is 1/P of it;
 * then the ranks gather the updated shares. A step:
 *
 *   tg_dist_shard *s = tg_dist_shard_new(ctx, d, &params);
 *   tg_optim *opt = tg_adamw_new(ctx, tg_dist_shard_params(s), &o);
 *   for each step:
 *       tg_params_zero_grad(ctx, &params);                  // all of them
 *       tg_dist_backward(ctx, d, loss, &params, b_r / (double)B);
 *       tg_clip_grad_norm(ctx, &params, 1.0);               // optional: whole grads
 *       tg_optim_step(ctx, opt);                            // this rank's share
 *       tg_dist_shard_gather(ctx, s);                       // everyone's shares
 *
 * The parameters are bitwise those of tg_dist_allreduce_grads and an
 * optimizer over all of them: the optimizers update each element from
 * that element alone. The shares: the parameters of one dtype laid end to
 * end, cut into windows of the bucket size (set it before), chunk r of
 * each window to rank r (views that may split a parameter between ranks).
 * The optimizer's state is then of the views; it cannot be saved as one
 * process's (tg_train_save wants the whole state). */
typedef struct tg_dist_shard tg_dist_shard;
/* This rank's share of params (every parameter float32 or float64, with a
 * grad; the list must outlive the shard and not change). Not a
 * collective. NULL and an error on failure. */
TG_API tg_dist_shard *tg_dist_shard_new(tg_ctx *ctx, tg_dist *d, tg_params *params);
/* The share: views named "NAME@OFFSET" over runs of the parameters and
 * their grads, with their weight-decay flags. Build the optimizer on it. */
TG_API tg_params *tg_dist_shard_params(tg_dist_shard *s);
/* Collective: every rank's share of the parameters' values to every rank,
 * in place, after the optimizer's step. */
TG_API bool tg_dist_shard_gather(tg_ctx *ctx, tg_dist_shard *s);
/* Frees the views (free the optimizer over them first). */
TG_API void tg_dist_shard_free(tg_ctx *ctx, tg_dist_shard *s);

/* ======================================================================== */
/* Gradient accumulation (one process)                                      */
/* ======================================================================== */
/* Runs a global batch as M micro-batches in one process, one after the
 * other, with the memory of one micro-batch:
 *
 *   tg_grad_accum *acc = tg_grad_accum_new(ctx, &params);
 *   for each step:
 *       for m = 0 .. M-1:
 *           tg_optim_zero_grad(ctx, opt);
 *           tg_backward(ctx, loss_of_micro_batch(m));   // mean over b_m rows
 *           tg_grad_accum_add(ctx, acc, b_m / (double)B);
 *           tg_ctx_reset(ctx);
 *       tg_grad_accum_finish(ctx, acc);                 // grads = the sum
 *       tg_optim_step(ctx, opt);
 *
 * The sum is folded in call order, each product rounded to the grad's
 * dtype: sum = w_0 g_0 (first add), sum = sum + w_m g_m (later adds) --
 * the order tg_dist_allreduce uses across ranks, so one process with M
 * micro-batches and M ranks with one each give the same bits. (Letting
 * backward add into the grads instead would round differently: a kernel
 * adds into the existing grad inside its own sum.) */
typedef struct tg_grad_accum tg_grad_accum;

/* An accumulator for params' grads (the list must outlive it, and not grow):
 * one persistent sum per parameter. NULL and an error on failure. */
TG_API tg_grad_accum *tg_grad_accum_new(tg_ctx *ctx, tg_params *params);
/* Folds weight * grad into the sums (weight finite). A parameter without a
 * grad is an error. The grads are left as they are. */
TG_API bool tg_grad_accum_add(tg_ctx *ctx, tg_grad_accum *acc, double weight);
/* Writes the sums into the grads and starts a new sum. An error when
 * nothing was added since the last finish. */
TG_API bool tg_grad_accum_finish(tg_ctx *ctx, tg_grad_accum *acc);
/* Micro-batches added since the last finish. */
TG_API int tg_grad_accum_count(const tg_grad_accum *acc);
/* Frees the accumulator and its sums. */
TG_API void tg_grad_accum_free(tg_ctx *ctx, tg_grad_accum *acc);

#ifdef __cplusplus
}
#endif

#endif /* TAPEGRAD_DIST_H */

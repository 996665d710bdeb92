/* tapegrad/autograd.h: the tape and the differentiable ops (autograd/).
 *
 * Leaves, grad mode, backward; then the ops: elementwise, activations,
 * reductions, matmul, shapes, embedding, softmax, losses, dropout, and
 * those of transformers: masks, rotary embedding, attention. */
#ifndef TAPEGRAD_AUTOGRAD_H
#define TAPEGRAD_AUTOGRAD_H

#include "tapegrad/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================== */
/* Autograd                                                                 */
/* ======================================================================== */

/* Marks t as a leaf that requires grad and gives it a zeroed grad of the same
 * kind (persistent for persistent tensors). Returns t. */
TG_API tg_tensor *tg_requires_grad(tg_ctx *ctx, tg_tensor *t);
/* Turns recording on or off (no-grad mode for evaluation); returns the
 * previous setting. */
TG_API bool tg_set_grad_enabled(tg_ctx *ctx, bool enabled);
TG_API bool tg_grad_enabled(const tg_ctx *ctx);
/* Zeroes t's grad (if it has one): an in-place write to the grad. */
TG_API void tg_zero_grad(tg_ctx *ctx, tg_tensor *t);
/* A tensor sharing t's data that requires no grad and has no history. */
TG_API tg_tensor *tg_detach(tg_ctx *ctx, tg_tensor *t);
/* x converted to dtype, recorded: y = round_to(dtype, x) (tapegrad/tensor.h,
 * Low precision: round to nearest even, NaN and inf kept). Backward treats
 * the rounding as the identity and casts the gradient back:
 * dx += round_to(x's dtype, dy). Takes every dtype: the way into and out of
 * bfloat16 / float16 inside a differentiable computation. */
TG_API tg_tensor *tg_cast(tg_ctx *ctx, tg_tensor *x, tg_dtype dtype);

/* Back-propagates from a scalar `loss` (numel 1): walks the tape in reverse
 * and accumulates (+=) gradients into the grad of every leaf that requires
 * grad. The tape is consumed: a second backward is an error.
 * Before it runs an op's backward it checks that the op's inputs and output
 * are of this step and were not written in place since the op ran (the
 * count of tapegrad/tensor.h: tg_fill, tg_assign, tg_set*, an optimizer
 * step, a checkpoint load...); otherwise, as PyTorch, it stops with
 * TG_ERR_STATE, e.g.
 *   tg_backward: input 0 (3,) of 'mul' was modified in place (version 1,
 *   recorded at 0) after the op used it
 * (q = sum(x*x), tg_fill(x, 100), backward: dq/dx would be 200 from the new
 * x). The check is conservative: every input counts, whether or not the
 * op's backward reads it. Change a tensor before the forward, or change a
 * tg_copy of it. After such an error, leaves whose gradient the walk had
 * reached before the op may hold part of this backward (as in PyTorch). */
TG_API void tg_backward(tg_ctx *ctx, tg_tensor *loss);
/* General form: `grad_out` (same shape as out) seeds the gradient, NULL
 * meaning 1 for a scalar; keep_tape=true keeps the tape for another
 * backward (PyTorch's retain_graph).
 * Memory: unless the tape is kept, the gradient of each intermediate tensor
 * is released as soon as the op that made it has run its backward (its
 * grad is NULL afterwards, as PyTorch's non-leaf .grad is None), and what
 * each op's backward allocated as scratch is given back, so the arena a
 * backward adds is the gradients live at one point of the walk, not one
 * per op (tg_arena_peak measures it). With keep_tape=true every
 * intermediate keeps its grad until the next backward or reset. */
TG_API void tg_backward_ex(tg_ctx *ctx, tg_tensor *out, const tg_tensor *grad_out, bool keep_tape);
/* Gradients as tensors (PyTorch's torch.autograd.grad): grads[i] = d out /
 * d inputs[i] seeded by grad_out (NULL: 1 for a scalar out), for n >= 1
 * inputs (leaves or intermediate tensors of the tape); zeros when no path
 * leads from inputs[i] to out. Leaves' grad fields are left as they were,
 * and the tape is kept (another tg_grad or backward may follow).
 * create_graph: the gradients are computed by recorded ops, so they are
 * differentiable: a backward (or tg_grad) from a function of them gives
 * second derivatives (the double backward). Every op of the registry has
 * such a rule (its descriptor's backward_graph, tapegrad/op.h); a record
 * without one fails with TG_ERR_STATE "'foo' cannot be differentiated
 * twice", never a wrong answer. Without create_graph it is a plain
 * backward into fresh gradients (no extra records). False on error. */
TG_API bool tg_grad(tg_ctx *ctx, tg_tensor *out, const tg_tensor *grad_out, int n, tg_tensor *const *inputs,
                    tg_tensor **grads, bool create_graph);
/* Hessian-vector product of a scalar loss (already computed, on the tape)
 * with respect to params[0..n-1], in the direction v (same shapes):
 *   hv = H v = d/dp <dL/dp, v>,
 * reverse over reverse: tg_grad with create_graph, the dot with v, tg_grad
 * again. The tape is kept (the records of both gradients are added to it);
 * leaves' grads are untouched. False on error. */
TG_API bool tg_hvp(tg_ctx *ctx, tg_tensor *loss, int n, tg_tensor *const *params, tg_tensor *const *v, tg_tensor **hv);
/* Activation checkpointing (autograd/checkpoint.c; PyTorch's
 * torch.utils.checkpoint): y = fn(ctx, in, user) as one record that keeps
 * only fn's inputs. fn runs once in the forward, whose records and saved
 * tensors are thrown away at once, and again in backward (same inputs,
 * same RNG state) under a tape of its own, whose backward adds into the
 * inputs' and the parameters' grads: the gradients are the same bits as
 * without the checkpoint, at the price of a second forward of fn. The
 * parameters fn uses (and any tensor requiring grad it reaches through
 * `user`) need not be passed: they become inputs of the record. fn must
 * compute the same function both times (its inputs and what it reaches
 * through user unchanged until backward) and return a new tensor of the
 * context. With grad mode off it is just fn. The record has no
 * double-backward or forward-mode rule (tg_grad with create_graph, tg_jvp:
 * an error naming it). docs/activation-checkpointing.md has the memory
 * arithmetic. */
typedef tg_tensor *(*tg_checkpoint_fn)(tg_ctx *ctx, tg_tensor *const *in, void *user);
TG_API tg_tensor *tg_checkpoint(tg_ctx *ctx, tg_checkpoint_fn fn, void *user, int n, tg_tensor *const *in);
/* Number of records on the tape, and bytes they saved for backward. */
TG_API int64_t tg_tape_size(const tg_ctx *ctx);
TG_API size_t tg_tape_saved_bytes(const tg_ctx *ctx);

/* ======================================================================== */
/* Autograd ops: elementwise, activations, reductions                       */
/* ======================================================================== */
/* Differentiable ops (autograd/ops_elementwise.c, ops_activation.c,
 * ops_reduce.c), float32 and float64, with PyTorch's semantics; bfloat16 and
 * float16 computed in float32, the result rounded once to the input dtype
 * (tapegrad/tensor.h, Low precision), as are all the ops below. Each returns
 * a new arena tensor of its input's dtype and records itself on the tape
 * when an input requires grad and grad mode is on. NULL inputs (TG_ERR_NULL)
 * or a context already in error: NULL, nothing done.
 *
 * Broadcasting (NumPy rules) in tg_add, tg_sub, tg_mul, tg_div: shapes are
 * aligned at their last dims, missing leading dims count as 1, and two sizes
 * fit when they are equal or one of them is 1; the result takes the larger.
 * Shapes that do not fit are TG_ERR_SHAPE naming both; dtypes that differ
 * are TG_ERR_DTYPE. Backward sums the gradient over the dims an input was
 * broadcast along, so each input's grad has the input's own shape.
 *
 * Non-finite values follow IEEE and PyTorch: log(0) = -inf, log(x<0) = NaN,
 * sqrt(0)'s gradient is inf, NaN propagates. */

/* a + b, a - b, a * b, a / b elementwise, with broadcasting. */
TG_API tg_tensor *tg_add(tg_ctx *ctx, tg_tensor *a, tg_tensor *b);
TG_API tg_tensor *tg_sub(tg_ctx *ctx, tg_tensor *a, tg_tensor *b);
TG_API tg_tensor *tg_mul(tg_ctx *ctx, tg_tensor *a, tg_tensor *b);
TG_API tg_tensor *tg_div(tg_ctx *ctx, tg_tensor *a, tg_tensor *b);
/* y = -x */
TG_API tg_tensor *tg_neg(tg_ctx *ctx, tg_tensor *x);
/* y = x + s  (any s; e.g. -inf for masks) */
TG_API tg_tensor *tg_add_scalar(tg_ctx *ctx, tg_tensor *x, double s);
/* y = s x  (any s) */
TG_API tg_tensor *tg_mul_scalar(tg_ctx *ctx, tg_tensor *x, double s);
/* y = x^p with p finite (TG_ERR_VALUE otherwise); dy/dx = p x^(p-1), and 0
 * when p == 0 (as PyTorch). At x = 0 with p < 1 the gradient is inf/NaN. */
TG_API tg_tensor *tg_pow_scalar(tg_ctx *ctx, tg_tensor *x, double p);
/* y = e^x */
TG_API tg_tensor *tg_exp(tg_ctx *ctx, tg_tensor *x);
/* y = ln x; ln 0 = -inf, ln of a negative = NaN; dy/dx = 1/x */
TG_API tg_tensor *tg_log(tg_ctx *ctx, tg_tensor *x);
/* y = sqrt(x); dy/dx = 1/(2 sqrt x), inf at x = 0 */
TG_API tg_tensor *tg_sqrt(tg_ctx *ctx, tg_tensor *x);
/* y = |x|; dy/dx = sign(x), 0 at x = 0 */
TG_API tg_tensor *tg_abs(tg_ctx *ctx, tg_tensor *x);

/* Activations (autograd/ops_activation.c). */
/* y = max(x, 0); dy/dx = 1 for x > 0, 0 for x <= 0 (0 at the kink) */
TG_API tg_tensor *tg_relu(tg_ctx *ctx, tg_tensor *x);
/* y = x for x > 0, negative_slope * x otherwise; negative_slope finite
 * (TG_ERR_VALUE otherwise). PyTorch's default slope is 0.01. */
TG_API tg_tensor *tg_leaky_relu(tg_ctx *ctx, tg_tensor *x, double negative_slope);
/* y = 1 / (1 + e^-x), without overflow for any x; dy/dx = y (1 - y) */
TG_API tg_tensor *tg_sigmoid(tg_ctx *ctx, tg_tensor *x);
/* y = tanh x; dy/dx = 1 - y^2 */
TG_API tg_tensor *tg_tanh(tg_ctx *ctx, tg_tensor *x);
/* GELU. Exact (tanh_approx false): y = x/2 (1 + erf(x / sqrt 2)).
 * tanh_approx: y = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), PyTorch's
 * approximate='tanh'. */
TG_API tg_tensor *tg_gelu(tg_ctx *ctx, tg_tensor *x, bool tanh_approx);
/* SiLU (swish): y = x sigmoid(x). LLaMA's SwiGLU gate silu(a) b is
 * tg_mul(tg_silu(a), b): a fused form measured no faster (the exp is the
 * cost, not the extra pass). */
TG_API tg_tensor *tg_silu(tg_ctx *ctx, tg_tensor *x);
/* Softplus: y = log(1 + e^x), a smooth relu whose derivative is sigmoid(x);
 * computed without overflow. PyTorch's softplus (beta = 1) returns x itself
 * above x = 20, where the two differ by less than 2.1e-9. */
TG_API tg_tensor *tg_softplus(tg_ctx *ctx, tg_tensor *x);

/* Reductions (autograd/ops_reduce.c). `axis` may be negative (-1 is the
 * last dim); out of range is TG_ERR_SHAPE. A 0-d tensor takes axis 0 or -1
 * and is its own sum (PyTorch does the same). keepdim keeps the reduced dim
 * with size 1, else it is removed. Sums and means accumulate in double
 * (float32 too), each output in a fixed order: results never depend on the
 * thread count. A 16-bit x is summed in float32 too, the result rounded
 * once. */
/* Sum of all elements: a 0-d tensor (0 for an empty x). */
TG_API tg_tensor *tg_sum(tg_ctx *ctx, tg_tensor *x);
/* Mean of all elements: a 0-d tensor. An empty x is TG_ERR_VALUE "empty
 * reduction": PyTorch returns NaN there; we call it misuse. */
TG_API tg_tensor *tg_mean(tg_ctx *ctx, tg_tensor *x);
/* Sum over one axis (an axis of size 0 sums to 0). */
TG_API tg_tensor *tg_sum_axis(tg_ctx *ctx, tg_tensor *x, int axis, bool keepdim);
/* Mean over one axis; an axis of size 0 is TG_ERR_VALUE "empty reduction". */
TG_API tg_tensor *tg_mean_axis(tg_ctx *ctx, tg_tensor *x, int axis, bool keepdim);
/* Max over one axis (values only). Ties: the gradient goes to the first
 * maximal element along the axis (lowest index), the others get 0. NaN
 * counts as the largest value (the first NaN wins), as PyTorch propagates
 * it. An axis of size 0 is TG_ERR_VALUE "empty reduction". */
TG_API tg_tensor *tg_max_axis(tg_ctx *ctx, tg_tensor *x, int axis, bool keepdim);
/* The index of the max along axis, for each position of the other dims
 * (autograd/ops_argmax.c; PyTorch's x.argmax(axis)): out gets numel /
 * size(axis) ids, in the row-major order of x without that axis. Ties: the
 * first; NaN counts as the largest (the first NaN), as tg_max_axis. Any
 * dtype; not recorded (no gradient). False on error: a bad axis, an axis
 * of size 0, NULL out. */
TG_API bool tg_argmax(tg_ctx *ctx, const tg_tensor *x, int axis, int64_t *out);
/* The fraction of rows of logits (..., classes) whose argmax over the last
 * dim is the row's target (targets: one id per row, each in 0..classes-1,
 * as tg_cross_entropy takes them): a classifier's accuracy, in [0, 1].
 * NaN on error (a target out of range, no rows, NULL). */
TG_API double tg_accuracy(tg_ctx *ctx, const tg_tensor *logits, const int64_t *targets);

/* ======================================================================== */
/* Autograd ops: matmul, shapes, embedding, softmax, losses, dropout        */
/* ======================================================================== */
/* Differentiable ops (autograd/ops_matmul.c, ops_shape.c, ops_embedding.c,
 * ops_softmax.c, ops_loss.c, ops_dropout.c), float32 and float64. Each
 * returns a new arena tensor of its inputs' dtype (tensor inputs must share
 * one dtype) and records itself on the tape when an input requires grad and
 * grad mode is on. On error: NULL and the context's error names the op and
 * the offending shapes or values. Axis arguments may be negative (counted
 * from the end, -1 is the last dim). */

/* Matrix product c = a b, c_ij = sum_k a_ik b_kj:
 *   a (M,K)     x b (K,N)     -> (M,N)
 *   a (...,M,K) x b (...,K,N) -> (...,M,N)  (batched over any number of
 *                                            leading dims, the same in a
 *                                            and b: one product each, e.g.
 *                                            (B,H,T,D) x (B,H,D,T))
 *   a (...,M,K) x b (K,N)     -> (...,M,N)  (b shared by every batch)
 * Leading dims are not broadcast: they must be equal.
 * Backward uses the transposed GEMM cases (da = dc b^T, db = a^T dc)
 * without copying a transpose. bfloat16 / float16: a float32 GEMM on
 * widened copies (float32 accumulation), c rounded once. */
TG_API tg_tensor *tg_matmul(tg_ctx *ctx, tg_tensor *a, tg_tensor *b);
/* Swaps the last two dims (ndim >= 2): y[..., j, i] = x[..., i, j]. A copy. */
TG_API tg_tensor *tg_transpose(tg_ctx *ctx, tg_tensor *x);
/* Reorders the dims, PyTorch's x.permute(perm): y's dim d is x's dim
 * perm[d], y.shape[d] = x.shape[perm[d]] and
 *   y[i_0, ..., i_{n-1}] = x[j]  with j_{perm[d]} = i_d.
 * perm has x->ndim entries naming each dim once (negative entries count
 * from the end); e.g. heads split as (B,T,H,D) -> (B,H,T,D) with
 * (const int[]){0, 2, 1, 3}. A copy; dx = dy permuted back. */
TG_API tg_tensor *tg_permute(tg_ctx *ctx, tg_tensor *x, const int *perm);
/* Swaps dims dim0 and dim1 (negative count from the end), PyTorch's
 * x.transpose(dim0, dim1): tg_permute with those two entries exchanged. */
TG_API tg_tensor *tg_transpose_dims(tg_ctx *ctx, tg_tensor *x, int dim0, int dim1);
/* x with a new shape of the same numel; one size may be -1 (inferred).
 * Shares x's data like tg_view, but is recorded (dx = dy reshaped). */
TG_API tg_tensor *tg_reshape(tg_ctx *ctx, tg_tensor *x, int ndim, const int64_t *shape);
/* Joins n >= 1 tensors along `axis`; all have the same ndim and the same
 * sizes except along axis. */
TG_API tg_tensor *tg_concat(tg_ctx *ctx, int n, tg_tensor *const *xs, int axis);
/* Elements start..end-1 of x along `axis` (0 <= start <= end <= size; no
 * clamping: out of range is an error). A copy. */
TG_API tg_tensor *tg_slice(tg_ctx *ctx, tg_tensor *x, int axis, int64_t start, int64_t end);

/* Embedding lookup: y[i, :] = weight[indices[i], :] for weight (V,D) and
 * the numel(shape) indices (row-major, each in 0..V-1, copied); the result
 * has shape + (D), so ndim <= TG_MAX_DIMS - 1. Backward scatter-adds dy
 * rows into dweight; repeated indices accumulate (for a 16-bit weight in
 * float32, rounded once). */
TG_API tg_tensor *tg_embedding(tg_ctx *ctx, tg_tensor *weight, int ndim, const int64_t *shape, const int64_t *indices);

/* Softmax over the last axis: y_i = exp(x_i - m) / sum_j exp(x_j - m), with
 * m the row's max (so logits of +-1e4 stay finite in float32). A 0-d x is
 * one row of one element. */
TG_API tg_tensor *tg_softmax(tg_ctx *ctx, tg_tensor *x);
/* log_softmax over the last axis: y_i = x_i - m - log(sum_j exp(x_j - m)).
 * Finite for finite logits; a -inf logit gives -inf, as in PyTorch. Both
 * compute in float32 for 16-bit x (max, exp and sum), one rounding out. */
TG_API tg_tensor *tg_log_softmax(tg_ctx *ctx, tg_tensor *x);

/* Options of tg_cross_entropy, as PyTorch's F.cross_entropy. Defaults
 * (also what a NULL opts means): ignore_index = -100, label_smoothing = 0.
 * Start from TG_CROSS_ENTROPY_DEFAULTS and change what you need. */
typedef struct tg_cross_entropy_opts {
    int64_t ignore_index;   /* rows whose target equals it add nothing */
    double label_smoothing; /* eps in [0, 1]: the target distribution is
                               (1 - eps) one_hot(t) + eps / C */
} tg_cross_entropy_opts;
#define TG_CROSS_ENTROPY_DEFAULTS ((tg_cross_entropy_opts){-100, 0.0})

/* Cross-entropy from logits (N,C) with targets[N] (int64, each in 0..C-1
 * or ignore_index), mean reduction over the non-ignored rows:
 *   loss = 1/|R| sum_{i in R} [ -(1 - eps) logp_i[t_i] - eps/C sum_c logp_i[c] ]
 * with logp = log_softmax(logits) and R the rows not ignored. Fused with
 * log_softmax: one tape record saving the targets and each row's
 * log-sum-exp. A scalar. When every row is ignored the loss is NaN (0/0,
 * as in PyTorch) and its gradient is 0. N = 0 or C = 0 is an error. */
/* bfloat16 / float16 logits: log-softmax and the mean in float32, the loss
 * returned in the logits' dtype, as PyTorch does. For a float32 loss, cast
 * the logits first: tg_cross_entropy(ctx, tg_cast(ctx, logits, TG_F32),
 * targets, opts) (the gradient still reaches the 16-bit logits, rounded
 * once). */
TG_API tg_tensor *tg_cross_entropy(tg_ctx *ctx, tg_tensor *logits, const int64_t *targets,
                                   const tg_cross_entropy_opts *opts);
/* Mean squared error, a scalar: mean((pred - target)^2). Same shapes, at
 * least one element. Both inputs may require grad. */
TG_API tg_tensor *tg_mse_loss(tg_ctx *ctx, tg_tensor *pred, tg_tensor *target);

/* Dropout (inverted): in training, y_i = x_i / (1 - p) when kept, 0 when
 * dropped, each element dropped with probability p in [0, 1). Element i is
 * dropped when u_i < p, u_i the f64 uniform of Philox block i of the
 * context's stream (see Random numbers), so the mask depends only on the
 * seed and offset, never on the thread count; the offset then advances by
 * numel. With training=false or p = 0 it returns x itself and draws
 * nothing (in every dtype; a 16-bit x is otherwise scaled in float32 and
 * rounded once). */
TG_API tg_tensor *tg_dropout(tg_ctx *ctx, tg_tensor *x, double p, bool training);

/* ======================================================================== */
/* Autograd ops for transformers: masks, rotary embedding, attention        */
/* ======================================================================== */
/* Differentiable ops (autograd/ops_mask.c, ops_rope.c, ops_attention.c),
 * float32 and float64, same conventions as above (bfloat16 / float16 too:
 * in float32, e.g. attention's scores and softmax, one rounding out). With tg_permute,
 * tg_transpose_dims and the batched tg_matmul they are what a multi-head
 * attention layer needs; docs/attention-gradients.md derives the fused
 * attention's backward. */

/* y = (mask != 0) ? value : x, elementwise (PyTorch's x.masked_fill(mask,
 * value)). mask has x's dtype and a shape that broadcasts to x's without
 * growing it (e.g. a (T,T) mask for (B,H,T,T) scores); nonzero (NaN
 * included) means fill. value may be any double, -INFINITY for attention
 * masks. dx = dy where the mask is 0, else 0; the mask gets no gradient. */
TG_API tg_tensor *tg_masked_fill(tg_ctx *ctx, tg_tensor *x, tg_tensor *mask, double value);
/* The lower / upper triangle of the last two dims (ndim >= 2), the rest 0,
 * as PyTorch's torch.tril / torch.triu: element (i, j) is kept when
 * j - i <= diagonal (tril) or j - i >= diagonal (triu). diagonal 0 is the
 * main diagonal, > 0 above it, < 0 below. dx = the same triangle of dy.
 * The causal mask of T positions: tg_triu(ctx, ones (T,T), 1). */
TG_API tg_tensor *tg_tril(tg_ctx *ctx, tg_tensor *x, int64_t diagonal);
TG_API tg_tensor *tg_triu(tg_ctx *ctx, tg_tensor *x, int64_t diagonal);

/* Rotary position embedding, in Meta's original LLaMA convention: the last
 * dim (D, even) holds D/2 consecutive pairs (x_2i, x_2i+1), and the pair at
 * sequence position p (0, 1, ... along seq_axis, shared by every other dim)
 * is rotated by the angle a = p * base^(-2i/D):
 *   y_2i = x_2i cos a - x_2i+1 sin a,   y_2i+1 = x_2i sin a + x_2i+1 cos a
 * (LLaMA's x as complex numbers times e^(j a); base 10000 there). Angles,
 * cos and sin are computed in double. seq_axis may be negative and must
 * not be the last dim: -2 for (B, H, T, D), -3 for (B, T, H, D). base
 * finite and > 0. dx = the inverse rotation (by -a) of dy; nothing saved.
 * Not the "rotate-half" convention of GPT-NeoX and Hugging Face's LLaMA,
 * which pairs x_i with x_{i+D/2}: the two differ by a fixed permutation of
 * each head's features (Hugging Face permutes the q and k projection
 * weights when converting Meta's checkpoints). */
TG_API tg_tensor *tg_rope(tg_ctx *ctx, tg_tensor *x, int seq_axis, double base);
/* tg_rope with the positions starting at pos0 >= 0 (pos0, pos0 + 1, ...):
 * the new positions of a sequence whose first pos0 are already in a KV
 * cache. Each position gets the same rotation, to the bit, as in a tg_rope
 * of the whole sequence. */
TG_API tg_tensor *tg_rope_from(tg_ctx *ctx, tg_tensor *x, int seq_axis, double base, int64_t pos0);

/* Fused scaled-dot-product attention (PyTorch's
 * F.scaled_dot_product_attention without dropout):
 *   o = softmax_rows(scale q k^T + mask) v
 * q (..., Tq, D), k (..., Tk, D), v (..., Tk, Dv) -> o (..., Tq, Dv); the
 * leading dims (batch, heads: (B, H, T, D)) are the same for all and each
 * (batch, head) pair is one independent problem. causal: query i sees
 * keys j <= i only (needs Tq == Tk). scale finite; 0 means 1/sqrt(D).
 * One record; saves one float64 log-sum-exp per query row and keeps q, k,
 * v and o by pointer: no (Tq, Tk) matrix is stored (flash-attention style,
 * O(Tq) extra memory per head). Backward recomputes the probabilities P
 * block by block:
 *   dV = P^T dO,  dS = P (dO V^T - rowsum(dO o)),  dQ = scale dS K,
 *   dK = scale dS^T Q.
 * Pairs are spread over threads; results are bitwise the same for any
 * thread count. Needs Tk >= 1 and D >= 1. */
TG_API tg_tensor *tg_attention(tg_ctx *ctx, tg_tensor *q, tg_tensor *k, tg_tensor *v, bool causal, double scale);

/* ======================================================================== */
/* Forward mode                                                             */
/* ======================================================================== */

/* The Jacobian-vector product J v of `out` with respect to inputs[0..n-1]
 * in the directions tangents[0..n-1] (autograd/jvp.c):
 *   d out = sum_k (d out / d inputs[k]) tangents[k]
 * a new arena tensor of out's shape and dtype, from one pass over the
 * tape: run the forward first (grad mode on, every input requiring grad),
 * then tg_jvp walks the records in order and pushes the tangents through
 * each op's tangent rule (tapegrad/op.h; every built-in op has one). The
 * tape is left as it was: a tg_backward may follow. Each tangent has its
 * input's shape and dtype; a tensor that requires grad but is not among
 * the inputs (a parameter) is held constant. Errors: an input that does
 * not require grad (the forward recorded nothing for it), a tangent of
 * another shape or dtype, out not made on the live tape (after a backward
 * consumed it), and an op without a tangent rule (named):
 *   tg_jvp: op 'my_op' has no tangent rule (forward mode): its tg_op_def
 *   has no jvp */
TG_API tg_tensor *tg_jvp(tg_ctx *ctx, tg_tensor *out, int n, tg_tensor *const *inputs, tg_tensor *const *tangents);

#ifdef __cplusplus
}
#endif

#endif /* TAPEGRAD_AUTOGRAD_H */

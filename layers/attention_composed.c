/* The composed twin of the fused attention (autograd/ops_attention.c): the
 * same function built only from primitive differentiable ops, as PyTorch
 * users write it,
 *   scores = q @ k.transpose(-2, -1) * scale
 *   scores = scores.masked_fill(triu(ones(T, T), 1) != 0, -inf)   (causal)
 *   o      = softmax(scores, -1) @ v
 * so autograd derives its backward record by record. It exists to be
 * compared with the fused op (tests/test_fused_vs_composed.c): the same
 * outputs and gradients, but 5 records (6 causal), and the (Tq, Tk)
 * probabilities kept for backward -- by softmax, which reads its output,
 * and again by the second matmul, which reads its left operand -- where
 * the fused op keeps one number per query row. */
#include "autograd/ops_attention.h"
#include "layers/ops.h"
#include "tapegrad/layers.h"

#include <math.h>

/* For the registry (layers/ops.h): the fused op's arguments, draws and
 * step. */
const tg_op_def tg_attention_composed_op = TG_OP("attention_composed", NULL, NULL, NULL, .args = "causal=1,scale=0",
                                                 .inputs = "q=-2:2,k=-2:2,v=-2:2", .f32 = {.h = 1e-2});

tg_tensor *tg_attention_composed(tg_ctx *ctx, tg_tensor *q, tg_tensor *k, tg_tensor *v, bool causal, double scale) {
    tg_attn_dims d;
    if (!tg_attention_check(ctx, __func__, q, k, v, causal, &scale, &d)) return NULL;
    /* scores (..., Tq, Tk): transpose, matmul, mul_scalar */
    tg_tensor *s = tg_mul_scalar(ctx, tg_matmul(ctx, q, tg_transpose(ctx, k)), scale);
    if (causal) {
        /* the mask is a constant (it requires no grad): no record for triu */
        tg_tensor *mask = tg_triu(ctx, tg_ones(ctx, q->dtype, TG_SHAPE(d.Tq, d.Tk)), 1);
        s = tg_masked_fill(ctx, s, mask, -INFINITY);
    }
    tg_tensor *o = tg_matmul(ctx, tg_softmax(ctx, s), v);
    return tg_ok(ctx) ? o : NULL;
}

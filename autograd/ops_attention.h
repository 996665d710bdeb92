/* What the fused attention (autograd/ops_attention.c) shares with its
 * composed twin (layers/attention_composed.c): the argument checks, so
 * both refuse the same inputs with the same messages. Internal (not
 * installed). */
#ifndef TG_AUTOGRAD_OPS_ATTENTION_H
#define TG_AUTOGRAD_OPS_ATTENTION_H

#include "tensor/internal.h"

/* One call's sizes: `pairs` (the product of the leading dims: batch x
 * heads) independent problems of Tq queries and Tk keys, D the width of q
 * and k, Dv of v and o. */
typedef struct tg_attn_dims {
    int64_t pairs, Tq, Tk, D, Dv;
} tg_attn_dims;

/* Checks the arguments of an attention call named fn (see tg_attention in
 * tapegrad/autograd.h): q, k, v non-NULL, one dtype, shapes q (..., Tq, D),
 * k (..., Tk, D), v (..., Tk, Dv) with the same leading dims, Tk >= 1,
 * D >= 1, Tq == Tk when causal, *scale finite. Fills *d and replaces a
 * *scale of 0 by 1/sqrt(D). False (and an error naming fn and the three
 * shapes) otherwise. */
bool tg_attention_check(tg_ctx *ctx, const char *fn, const tg_tensor *q, const tg_tensor *k, const tg_tensor *v,
                        bool causal, double *scale, tg_attn_dims *d);

/* Attention of Tq new queries over the first Tk positions of a KV cache,
 * for generation (layers/generate.c): q (..., Tq, D) are the queries at
 * positions Tk - Tq .. Tk - 1; kt (..., D, cap) holds the keys of
 * positions 0 .. cap - 1 transposed (column p is position p's key: the
 * layout the kernel's first product reads, so no transpose per token) and
 * v (..., cap, Dv) their values; columns and rows past Tk are unused. The
 * same leading dims and dtype; query i sees keys j <= Tk - Tq + i, with
 * scale 1/sqrt(D). Row i is what tg_attention's causal row Tk - Tq + i
 * computes over the whole sequence, with the same kernel: bitwise the same
 * while Tk fits one K slice of the GEMM (tensor/gemm.h; 256 positions for
 * float64, 384 for float32), else to rounding. 16-bit inputs run in
 * float32 on widened copies, rounded once, as tg_attention does. Not
 * recorded: an error when grad mode is on and q requires grad. Errors name
 * fn. */
tg_tensor *tg_attention_cached(tg_ctx *ctx, const char *fn, tg_tensor *q, const tg_tensor *kt, const tg_tensor *v,
                               int64_t Tk);

#endif

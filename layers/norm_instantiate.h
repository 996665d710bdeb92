/* Instantiates a norm kernel template (layers/rmsnorm_kernel.inc,
 * layers/layernorm_kernel.inc) for every storage type it runs on:
 *
 *   #define TG_NORM_TEMPLATE "layers/rmsnorm_kernel.inc"
 *   #include "layers/norm_instantiate.h"
 *
 * The float32 and float64 kernels come from tensor/instantiate.h (the one
 * template idiom); then bfloat16 storage with float32 arithmetic. Besides
 * T, TG_FN, TG_M and TG_F64 (tensor/instantiate.h), a norm template sees:
 *
 *   macro              float32 / float64          bfloat16 storage
 *   TS                 T                          uint16_t (the arrays x,
 *                                                 y, dy, dx)
 *   TG_LD(v)           v                          widened to float (exact:
 *                                                 a 16-bit shift)
 *   TG_ST(v)           v                          rounded to bfloat16
 *                                                 (nearest even, NaN kept)
 *   TG_ACC(d, v)       d += v                     d = round(d + (0 + v))
 *   TG_ACC_D(d, v)     d = (T)((double)d + v)     d = round(d + (float)(0 + v))
 *   TG_NORM_LOWP       0                          1
 *   TG_FN(name)        name##_f32, name##_f64     name##_bf16, name##_f16
 *
 * g, b (the gain and bias) and the dg, db sums stay float32 arrays of T.
 * So a bfloat16 row is widened as it is loaded and rounded as it is stored,
 * inside the float32 row loops, with float32's arithmetic in float32's
 * order: its bits are those of widening the tensors into float32 copies,
 * running the float32 kernel, and rounding each result once -- the
 * accumulating dx included, where the float32 kernel run on a zeroed
 * buffer gives 0 + v (TG_ACC: -0 becomes +0 there, as it does in the
 * float32 kernel), which is then added to the 16-bit grad and rounded once
 * (tests/test_norm_lowp.c, test_one_pass_bits).
 *
 * float16 is instantiated too: its loads use an exact branch-free widening
 * (tg_norm_f16_to_f32) that the compiler vectorizes, because F16C's
 * instructions work on whole vectors the vectorizer does not form from
 * scalar code; its stores round blocks of 32 with F16C where the compiler
 * targets it. That widening costs ~10 vector ops per 16 values, so f16 runs
 * ~15% slower than with the former F16C row buffers (docs/normalization-
 * gradients.md, Low precision).
 *
 * No include guard: included once per template. */
#ifndef TG_NORM_TEMPLATE
#error "define TG_NORM_TEMPLATE as the norm template's path before including layers/norm_instantiate.h"
#endif

/* float32, float64: the arrays are T, loads and stores are plain */
#define TS T
#define TG_LD(v) (v)
#define TG_ST(v) (v)
#define TG_ACCV(d, v) ((d) + (v))
#define TG_ACC_D(d, v) ((d) = (T)((double)(d) + (v)))
#define TG_STORE_LOOP TG_NORM_LOOP_PLAIN
#define TG_NORM_LOWP 0
#define TG_TEMPLATE TG_NORM_TEMPLATE
#include "tensor/instantiate.h" /* (undefines TG_TEMPLATE) */
#undef TS
#undef TG_LD
#undef TG_ST
#undef TG_ACCV
#undef TG_ACC_D
#undef TG_STORE_LOOP
#undef TG_NORM_LOWP

/* 16-bit storage, float32 arithmetic: bfloat16, then float16 */
#define T float
#define TS uint16_t
#define TG_M(fn) fn##f
#define TG_F64 0
#define TG_ACCV(d, v) (TG_LD(d) + (0.0f + (v)))
#define TG_ACC_D(d, v) ((d) = TG_ST(TG_LD(d) + (float)(0.0 + (v))))
#define TG_NORM_LOWP 1

#define TG_FN(name) name##_bf16
#define TG_LD(v) tg_bf16_to_f32(v)
#define TG_ST(v) tg_f32_to_bf16(v)
#define TG_STORE_LOOP(out, C, j, BODY, VAL) \
    TG_NORM_LOOP_BLOCK(out, C, j, BODY, VAL, tg_norm_store32_bf16, tg_f32_to_bf16)
#include TG_NORM_TEMPLATE
#undef TG_FN
#undef TG_LD
#undef TG_ST
#undef TG_STORE_LOOP

#define TG_FN(name) name##_f16
#define TG_LD(v) tg_norm_f16_to_f32(v)
#define TG_ST(v) tg_f32_to_f16(v)
#define TG_STORE_LOOP(out, C, j, BODY, VAL) TG_NORM_LOOP_BLOCK(out, C, j, BODY, VAL, tg_norm_store32_f16, tg_f32_to_f16)
#include TG_NORM_TEMPLATE
#undef TG_FN
#undef TG_LD
#undef TG_ST
#undef TG_STORE_LOOP

#undef T
#undef TS
#undef TG_M
#undef TG_F64
#undef TG_ACCV
#undef TG_ACC_D
#undef TG_NORM_LOWP
#undef TG_NORM_TEMPLATE

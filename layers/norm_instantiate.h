/* Instantiates a norm kernel template (layers/rmsnorm_kernel.inc,
 * layers/layernorm_kernel.inc) for every storage type it runs on:
 *
 *   #define TG_NORM_TEMPLATE "layers/rmsnorm_kernel.inc"
 *   #include "layers/norm_instantiate.h"
 *
 * The float32 and float64 kernels come from tensor/instantiate.h (the one
 * template idiom); then bfloat16 and float16 storage with float32
 * arithmetic. Besides T, TG_FN, TG_M and TG_F64 (tensor/instantiate.h), a
 * norm template sees five names, all of them values or functions (the
 * loops are functions of layers/norm_reduce.inc):
 *
 *   macro          float32 / float64    bfloat16 storage    float16 storage
 *   TS             T                    uint16_t            uint16_t
 *                  (the type of the arrays x, y, dy, dx)
 *   TG_LD(v)       v                    tg_bf16_to_f32(v)   tg_norm_f16_to_f32(v)
 *                  (one value widened to T, exactly)
 *   TG_ST(v)       v                    tg_f32_to_bf16(v)   tg_f32_to_f16(v)
 *                  (one value rounded to TS, nearest even, NaN kept)
 *   TG_LD32, TG_ST32  (unused)          tg_norm_load32_bf16 tg_norm_load32_f16
 *                                       tg_norm_store32_bf16 tg_norm_store32_f16
 *                  (32 values widened, or rounded, at once: F16C and
 *                  AVX-512 BF16 where the compiler targets them)
 *   TG_NORM_LOWP   0                    1                   1
 *   TG_FN(name)    name##_f32, _f64     name##_bf16         name##_f16
 *
 * g, b (the gain and bias) and the dg, db sums stay arrays of T (float32
 * for 16-bit storage). So a 16-bit row is widened as it is loaded and
 * rounded as it is stored, inside the float32 row loops, with float32's
 * arithmetic in float32's order: its bits are those of widening the
 * tensors into float32 copies, running the float32 kernel, and rounding
 * each result once -- the accumulating dx included, where the float32
 * kernel run on a zeroed buffer gives 0 + v (tg_norm_acc: -0 becomes +0
 * there, as it does in the float32 kernel), which is then added to the
 * 16-bit grad and rounded once (tests/test_norm_lowp.c,
 * test_one_pass_bits).
 *
 * No include guard: included once per template. */
#ifndef TG_NORM_TEMPLATE
#error "define TG_NORM_TEMPLATE as the norm template's path before including layers/norm_instantiate.h"
#endif

/* float32, float64: the arrays are T, loads and stores are plain */
#define TS T
#define TG_LD(v) (v)
#define TG_ST(v) (v)
#define TG_NORM_LOWP 0
#define TG_TEMPLATE TG_NORM_TEMPLATE
#include "tensor/instantiate.h" /* (undefines TG_TEMPLATE) */
#undef TS
#undef TG_LD
#undef TG_ST
#undef TG_NORM_LOWP

/* 16-bit storage, float32 arithmetic: bfloat16, then float16 */
#define T float
#define TS uint16_t
#define TG_M(fn) fn##f
#define TG_F64 0
#define TG_NORM_LOWP 1

#define TG_FN(name) name##_bf16
#define TG_LD(v) tg_bf16_to_f32(v)
#define TG_ST(v) tg_f32_to_bf16(v)
#define TG_LD32 tg_norm_load32_bf16
#define TG_ST32 tg_norm_store32_bf16
#include TG_NORM_TEMPLATE
#undef TG_FN
#undef TG_LD
#undef TG_ST
#undef TG_LD32
#undef TG_ST32

#define TG_FN(name) name##_f16
#define TG_LD(v) tg_norm_f16_to_f32(v)
#define TG_ST(v) tg_f32_to_f16(v)
#define TG_LD32 tg_norm_load32_f16
#define TG_ST32 tg_norm_store32_f16
#include TG_NORM_TEMPLATE
#undef TG_FN
#undef TG_LD
#undef TG_ST
#undef TG_LD32
#undef TG_ST32

#undef T
#undef TS
#undef TG_M
#undef TG_F64
#undef TG_NORM_LOWP
#undef TG_NORM_TEMPLATE

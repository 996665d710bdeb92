/* Gradient checks and low precision (check/lowp.c): why tg_gradcheck refuses
 * bfloat16 / float16, and the comparison it offers instead
 * (tg_gradcheck_lowp, tapegrad/check.h). */
#ifndef TG_CHECK_LOWP_H
#define TG_CHECK_LOWP_H

#include "tensor/internal.h"

/* tg_gradcheck's error for a 16-bit input k (TG_ERR_DTYPE, naming fn):
 * what rounding does to finite differences and what to do instead.
 * Returns false. */
bool tg_gradcheck_refuse_lowp(tg_ctx *ctx, const char *fn, int k, tg_dtype dtype);

#endif

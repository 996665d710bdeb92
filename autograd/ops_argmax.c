/* Indices rather than values: tg_argmax and tg_accuracy. Neither is
 * differentiable (an index has no derivative), so neither records: they
 * read a tensor of any dtype (16-bit through float32, tg_load) and write
 * int64 ids, the type the losses take their targets in. */
#include "tapegrad/autograd.h"
#include "tensor/internal.h"

#include <math.h>

/* The index of the largest of n values x[0], x[s], ..., x[(n-1) s] of t
 * from offset `at`: the first of equal values; NaN counts as the largest
 * (the first NaN), as tg_max_axis and PyTorch's argmax. */
static int64_t argmax_line(const tg_tensor *t, int64_t at, int64_t n, int64_t s) {
    int64_t best = 0;
    double m = tg_load(t, at);
    for (int64_t i = 1; i < n && !isnan(m); i++) {
        const double v = tg_load(t, at + i * s);
        if (v > m || isnan(v)) m = v, best = i;
    }
    return best;
}

bool tg_argmax(tg_ctx *ctx, const tg_tensor *x, int axis, int64_t *out) {
    if (!tg_check_arg_any(ctx, __func__, "x", x)) return false;
    if (!out) {
        tg_null_error(ctx, __func__, "out");
        return false;
    }
    char s[TG_SHAPE_STR];
    const int nd = x->ndim > 0 ? x->ndim : 1;
    const int a = axis < 0 ? axis + nd : axis;
    if (a < 0 || a >= nd) {
        tg_error(ctx, TG_ERR_SHAPE, __func__, "axis %d is out of range for x %s", axis, tg_shape_of(s, x));
        return false;
    }
    const int64_t n = x->ndim ? x->shape[a] : 1;
    if (n == 0) {
        tg_error(ctx, TG_ERR_VALUE, __func__, "empty reduction: axis %d of x %s has size 0", axis, tg_shape_of(s, x));
        return false;
    }
    int64_t inner = 1;
    for (int d = a + 1; d < x->ndim; d++) inner *= x->shape[d];
    const int64_t outer = x->numel / (n * inner);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) out[o * inner + i] = argmax_line(x, o * n * inner + i, n, inner);
    return true;
}

double tg_accuracy(tg_ctx *ctx, const tg_tensor *logits, const int64_t *targets) {
    if (!tg_check_arg_any(ctx, __func__, "logits", logits)) return NAN;
    char s[TG_SHAPE_STR];
    if (!targets) {
        tg_null_error(ctx, __func__, "targets");
        return NAN;
    }
    const int64_t C = logits->ndim ? logits->shape[logits->ndim - 1] : 0;
    if (C == 0 || logits->numel == 0) {
        tg_error(ctx, TG_ERR_SHAPE, __func__, "logits %s: need (..., classes) with at least one row and class",
                 tg_shape_of(s, logits));
        return NAN;
    }
    const int64_t rows = logits->numel / C;
    int64_t right = 0;
    for (int64_t r = 0; r < rows; r++) {
        if (targets[r] < 0 || targets[r] >= C) {
            tg_error(ctx, TG_ERR_INDEX, __func__, "targets[%lld] = %lld is not a class of logits %s (0..%lld)",
                     (long long)r, (long long)targets[r], tg_shape_of(s, logits), (long long)(C - 1));
            return NAN;
        }
        right += argmax_line(logits, r * C, C, 1) == targets[r];
    }
    return (double)right / (double)rows;
}

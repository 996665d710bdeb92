/* The fold: acc = w x for the first term, acc = acc + w x for each next
 * one. Every sum data_parallel/ makes -- micro-batches in the gradient accumulator,
 * ranks in the all-reduce -- is a sequence of these steps, in a fixed order
 * (call order, rank order), so the two give the same bits: rounding
 * happens once for the product w x (in T) and once for the sum.
 *
 * The product and the sum are two statements: a compiler allowed to fuse
 * a * b + c within one expression (clang's default -ffp-contract=on) would
 * round once instead of twice, and then only where it chose to fuse.
 *
 * The kernels, written once for T (float, double), open the file, which
 * instantiates itself (tensor/instantiate.h) and so defines
 *   tg_fold_f32  tg_fold_f64. */
#ifdef T /* the kernels, compiled once per element type (tensor/instantiate.h) */

/* acc, x: (n); acc may be x. */
void TG_FN(tg_fold)(T *acc, const T *x, T w, int64_t n, bool first) {
    if (first) {
        for (int64_t i = 0; i < n; i++) acc[i] = w * x[i];
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        T t = w * x[i];
        acc[i] = acc[i] + t;
    }
}

#else /* the dispatch, compiled once */

#include "data_parallel/internal.h"

#define TG_TEMPLATE "data_parallel/fold.c"
#include "tensor/instantiate.h"

void tg_fold(void *acc, const void *x, tg_dtype dt, double w, int64_t n, bool first) {
    if (dt == TG_F64) tg_fold_f64(acc, x, w, n, first);
    else tg_fold_f32(acc, x, (float)w, n, first);
}

#endif

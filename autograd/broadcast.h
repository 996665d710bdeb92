/* NumPy broadcasting for binary ops: the output shape and the index mapping
 * from output elements to input elements, which backward also walks to
 * reduce a gradient back to an input's shape. Internal (not installed).
 *
 * Rules: shapes are aligned at their last dims; missing leading dims count
 * as 1; sizes fit when equal or when one is 1; the output takes the larger.
 *
 * The index mapping is a "plan": the output is walked as contiguous rows;
 * within a row, each input advances by 1 or stays put (stride 0, broadcast).
 * Dims of output size 1 are dropped and adjacent dims are merged when both
 * inputs continue contiguously across them, so:
 *   same shapes           -> one row of numel elements, strides (1, 1)
 *   (N,C) + (C)           -> N rows of C, b restarting at offset 0 each row
 *   (N,C) + (N,1)         -> N rows of C, b a scalar per row (stride 0)
 *   x + scalar            -> one row, stride 0 for the scalar
 * Kernels then run a tight loop per row, and backward accumulates into an
 * input with the same plan: where its stride is 0 the row (or the repeated
 * offset across rows) sums into one element, which is the reduction over
 * the broadcast dims. */
#ifndef TG_AUTOGRAD_BROADCAST_H
#define TG_AUTOGRAD_BROADCAST_H

#include "tensor/internal.h"

typedef struct tg_bcast {
    /* the output */
    int out_ndim;
    int64_t out_shape[TG_MAX_DIMS];
    int64_t numel;
    /* the coalesced walk: rows of `row` elements, `nrows` of them; outer
     * dims 0..ndim-2 with sizes and element strides of a and b (0 where
     * broadcast). dim ndim-1 is the row itself, with strides ra, rb in
     * {0, 1}. */
    int ndim;
    int64_t size[TG_MAX_DIMS];
    int64_t sa[TG_MAX_DIMS];
    int64_t sb[TG_MAX_DIMS];
    int64_t row, nrows;
    int64_t ra, rb;
} tg_bcast;

/* Computes the plan of a (op) b, given the shapes of two valid tensors
 * (same shapes take a short path). On shapes that do not broadcast sets
 * TG_ERR_SHAPE from `fn`, naming both shapes and the first dim that does
 * not fit, and returns false. */
bool tg_bcast_plan(tg_ctx *ctx, const char *fn, tg_bcast *p, int andim, const int64_t *ashape, int bndim,
                   const int64_t *bshape);

/* Walks rows of a plan: the offsets of a and b for the current row. */
typedef struct tg_bcast_iter {
    int64_t idx[TG_MAX_DIMS];
    int64_t oa, ob;
} tg_bcast_iter;

/* Positions the iterator at row r (0 <= r <= nrows). */
void tg_bcast_iter_at(const tg_bcast *p, tg_bcast_iter *it, int64_t r);
/* Moves to the next row (odometer over the outer dims). */
static inline void tg_bcast_iter_next(const tg_bcast *p, tg_bcast_iter *it) {
    for (int d = p->ndim - 2; d >= 0; d--) {
        it->oa += p->sa[d];
        it->ob += p->sb[d];
        if (++it->idx[d] < p->size[d]) return;
        it->oa -= p->sa[d] * p->size[d];
        it->ob -= p->sb[d] * p->size[d];
        it->idx[d] = 0;
    }
}

#endif

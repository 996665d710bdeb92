/* NumPy broadcasting: plans and their row iterator. See broadcast.h for
 * what a plan is. */

#include "autograd/broadcast.h"

bool tg_bcast_plan(tg_ctx *ctx, const char *fn, tg_bcast *p, int andim, const int64_t *ashape, int bndim,
                   const int64_t *bshape) {
    /* Same shapes (the common case): one row of numel elements. */
    bool same = andim == bndim;
    for (int d = 0; same && d < andim; d++) same = ashape[d] == bshape[d];
    if (same) {
        int64_t numel = 1;
        for (int d = 0; d < andim; d++) numel *= ashape[d]; /* a tensor's shape: no overflow */
        p->out_ndim = andim;
        for (int d = 0; d < TG_MAX_DIMS; d++) p->out_shape[d] = d < andim ? ashape[d] : 1;
        p->numel = numel;
        p->ndim = 1;
        p->size[0] = p->row = numel;
        p->sa[0] = p->sb[0] = p->ra = p->rb = 1;
        p->nrows = numel ? 1 : 0;
        return true;
    }
    int nd = andim > bndim ? andim : bndim;
    int64_t as[TG_MAX_DIMS], bs[TG_MAX_DIMS];
    for (int d = 0; d < nd; d++) {
        int da = d - (nd - andim), db = d - (nd - bndim);
        as[d] = da >= 0 ? ashape[da] : 1;
        bs[d] = db >= 0 ? bshape[db] : 1;
        if (as[d] == bs[d] || bs[d] == 1) {
            p->out_shape[d] = as[d];
        } else if (as[d] == 1) {
            p->out_shape[d] = bs[d];
        } else {
            char s1[TG_SHAPE_STR], s2[TG_SHAPE_STR];
            tg_error(ctx, TG_ERR_SHAPE, fn, "shapes %s and %s do not broadcast (dim %d from the end: %lld vs %lld)",
                     tg_shape_str(s1, sizeof s1, andim, ashape), tg_shape_str(s2, sizeof s2, bndim, bshape), d - nd,
                     (long long)as[d], (long long)bs[d]);
            return false;
        }
    }
    p->out_ndim = nd;
    for (int d = nd; d < TG_MAX_DIMS; d++) p->out_shape[d] = 1;
    if (!tg_check_shape(ctx, fn, nd, p->out_shape, &p->numel)) return false;

    /* Element strides of a and b in the output's index space, 0 along
     * broadcast dims; keep only dims of output size != 1. */
    int64_t sa_full[TG_MAX_DIMS], sb_full[TG_MAX_DIMS];
    int64_t ca = 1, cb = 1;
    for (int d = nd - 1; d >= 0; d--) {
        sa_full[d] = as[d] == 1 ? 0 : ca;
        sb_full[d] = bs[d] == 1 ? 0 : cb;
        ca *= as[d];
        cb *= bs[d];
    }
    int k = 0;
    for (int d = 0; d < nd; d++) {
        if (p->out_shape[d] == 1) continue;
        /* Merge into the previous dim when both inputs continue across. */
        if (k > 0 && p->sa[k - 1] == sa_full[d] * p->out_shape[d] && p->sb[k - 1] == sb_full[d] * p->out_shape[d]) {
            p->size[k - 1] *= p->out_shape[d];
            p->sa[k - 1] = sa_full[d];
            p->sb[k - 1] = sb_full[d];
            continue;
        }
        p->size[k] = p->out_shape[d];
        p->sa[k] = sa_full[d];
        p->sb[k] = sb_full[d];
        k++;
    }
    if (k == 0) { /* one element */
        p->size[0] = 1;
        p->sa[0] = p->sb[0] = 1;
        k = 1;
    }
    p->ndim = k;
    p->row = p->size[k - 1];
    p->ra = p->sa[k - 1];
    p->rb = p->sb[k - 1];
    p->nrows = p->numel == 0 ? 0 : p->numel / p->row;
    return true;
}

void tg_bcast_iter_at(const tg_bcast *p, tg_bcast_iter *it, int64_t r) {
    it->oa = it->ob = 0;
    for (int d = p->ndim - 2; d >= 0; d--) {
        if (p->size[d] == 0) { /* an empty plan has no rows to walk */
            it->idx[d] = 0;
            continue;
        }
        int64_t i = r % p->size[d];
        r /= p->size[d];
        it->idx[d] = i;
        it->oa += i * p->sa[d];
        it->ob += i * p->sb[d];
    }
}

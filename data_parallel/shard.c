/* The optimizer state split over the ranks (ZeRO stage 1).
 *
 * Every rank holds the whole model and its whole (all-reduced) gradient,
 * but each updates only its share of the parameters, so its optimizer
 * holds the state (Adam's two moments, SGD's momentum) of that share
 * alone: 1/P of it. After the step the ranks gather each other's updated
 * shares, and every rank holds the whole updated model again.
 *
 * The shares are cut as the all-reduce cuts its windows: the parameters
 * of one dtype laid end to end, in windows of the bucket size, each window
 * in P chunks (tg_dist_split); rank r's share is chunk r of every window.
 * A chunk may cross from one parameter into the next, so the share is a
 * list of views, each a run of one parameter's elements: a 1-D tensor over
 * the parameter's memory (and one over its gradient's), with the
 * parameter's weight-decay flag. An optimizer made over these views keeps
 * state of their size only, and its step writes into the parameters.
 *
 * Bitwise the same as one process: every optimizer here updates each
 * element from that element alone (its gradient, its state, the step's
 * scalars), and its SIMD and scalar loops give the same bits
 * (optim/adam.c), so an element updated inside a view is updated exactly
 * as inside the whole tensor. The gather copies bits. */
#include "data_parallel/internal.h"

#include <stdio.h>
#include <string.h>

struct tg_dist_shard {
    tg_dist *d;
    tg_params *params; /* the whole model's */
    int nparams;
    tg_params share;       /* this rank's views */
    tg_tensor_impl *views; /* 2 per view: the value, then its grad */
    int nviews;
};

void tg_dist_shard_free(tg_ctx *ctx, tg_dist_shard *s) {
    if (!s) return;
    tg_params_free(&s->share);
    if (ctx) {
        tg_heap_free(ctx, s->views);
        tg_heap_free(ctx, s);
    }
}

/* Calls fn(s, i, lo, n) for each run [lo, lo + n) of parameter i's
 * elements in this rank's share, in order; returns the number of runs. */
typedef void (*run_fn)(tg_dist_shard *s, int i, int64_t lo, int64_t n, int k);
static int runs(tg_dist_shard *s, run_fn fn) {
    tg_dist *d = s->d;
    int k = 0;
    for (int t = 0; t < 2; t++) {
        const tg_dtype dt = t ? TG_F64 : TG_F32;
        int64_t total = 0;
        for (int i = 0; i < s->nparams; i++)
            if (s->params->items[i].value->dtype == dt) total += s->params->items[i].value->numel;
        const int64_t per = (int64_t)(d->bucket_bytes / tg_esize(dt));
        for (int64_t w0 = 0; w0 < total; w0 += per) {
            int64_t start, count;
            tg_dist_split(total - w0 < per ? total - w0 : per, d->size, d->rank, &start, &count);
            const int64_t a = w0 + start, b = a + count; /* this rank's chunk */
            int64_t pos = 0;
            for (int i = 0; i < s->nparams && pos < b; i++) {
                const tg_tensor *v = s->params->items[i].value;
                if (v->dtype != dt) continue;
                const int64_t lo = pos > a ? pos : a, hi = pos + v->numel < b ? pos + v->numel : b;
                if (lo < hi) {
                    if (fn) fn(s, i, lo - pos, hi - lo, k);
                    k++;
                }
                pos += v->numel;
            }
        }
    }
    return k;
}

/* View k: elements [lo, lo + n) of parameter i and of its grad. */
static void make_view(tg_dist_shard *s, int i, int64_t lo, int64_t n, int k) {
    tg_tensor *p = s->params->items[i].value;
    tg_tensor_impl *v = &s->views[2 * k], *g = &s->views[2 * k + 1];
    const size_t off = (size_t)lo * tg_esize(p->dtype);
    *g = (tg_tensor_impl){
        .pub = {.dtype = p->dtype, .ndim = 1, .numel = n, .data = (char *)p->grad->data + off, .persistent = true},
        .node = -1,
        .base = tg_root(p->grad),
        .ctx = tg_impl(p)->ctx};
    *v = (tg_tensor_impl){.pub = {.dtype = p->dtype,
                                  .ndim = 1,
                                  .numel = n,
                                  .data = (char *)p->data + off,
                                  .grad = &g->pub,
                                  .requires_grad = true,
                                  .persistent = true},
                          .node = -1,
                          .base = tg_root(p),
                          .ctx = tg_impl(p)->ctx};
    for (int j = 0; j < TG_MAX_DIMS; j++) v->pub.shape[j] = g->pub.shape[j] = j == 0 ? n : 1;
}

tg_dist_shard *tg_dist_shard_new(tg_ctx *ctx, tg_dist *d, tg_params *params) {
    static const char fn[] = "tg_dist_shard_new";
    if (!tg_ok(ctx)) return NULL;
    if (!d || !params) {
        tg_null_error(ctx, fn, !d ? "d" : "params");
        return NULL;
    }
    for (int i = 0; i < params->count; i++) {
        const tg_param *p = &params->items[i];
        if (!p->value->grad || (p->value->dtype != TG_F32 && p->value->dtype != TG_F64)) {
            tg_error(ctx, TG_ERR_STATE, fn, "parameter \"%s\" %s", p->name,
                     p->value->grad ? "is not float32 or float64" : "has no grad");
            return NULL;
        }
    }
    tg_dist_shard *s = tg_heap_alloc(ctx, sizeof *s);
    if (!s) {
        tg_error(ctx, TG_ERR_OOM, fn, "out of memory");
        return NULL;
    }
    *s = (tg_dist_shard){.d = d, .params = params, .nparams = params->count};
    s->nviews = runs(s, NULL);
    s->views = tg_heap_alloc(ctx, (size_t)(s->nviews ? s->nviews : 1) * 2 * sizeof *s->views);
    if (!s->views) {
        tg_error(ctx, TG_ERR_OOM, fn, "out of memory for %d views", s->nviews);
        tg_dist_shard_free(ctx, s);
        return NULL;
    }
    runs(s, make_view);
    /* the views in the share list, named after their parameter and offset */
    for (int k = 0; k < s->nviews && tg_ok(ctx); k++) {
        const tg_tensor *v = &s->views[2 * k].pub;
        int i = 0;
        while (tg_impl(v)->base != tg_root(params->items[i].value)) i++;
        const int64_t lo =
            ((const char *)v->data - (const char *)params->items[i].value->data) / (int64_t)tg_esize(v->dtype);
        char name[64];
        if (snprintf(name, sizeof name, "%s@%lld", params->items[i].name, (long long)lo) >= (int)sizeof name)
            snprintf(name, sizeof name, "param%d@%lld", i, (long long)lo);
        tg_params_add(ctx, &s->share, NULL, name, &s->views[2 * k].pub, params->items[i].weight_decay);
    }
    if (!tg_ok(ctx)) {
        tg_dist_shard_free(ctx, s);
        return NULL;
    }
    return s;
}

tg_params *tg_dist_shard_params(tg_dist_shard *s) { return s ? &s->share : NULL; }

bool tg_dist_shard_gather(tg_ctx *ctx, tg_dist_shard *s) {
    static const char fn[] = "tg_dist_shard_gather";
    if (!s) {
        tg_null_error(ctx, fn, "s");
        return false;
    }
    tg_dist *d = s->d;
    bool ok = tg_ok(ctx) && tg_dist_param_segs(ctx, d, fn, s->params, false) && tg_dist_reserve(ctx, d, fn);
    if (ok && s->params->count != s->nparams) {
        tg_error(ctx, TG_ERR_STATE, fn, "the parameter list has %d parameters, the shard was made for %d",
                 s->params->count, s->nparams);
        ok = false;
    }
    const int nseg = ok ? s->nparams : 0;
    const uint64_t h = ok ? tg_dist_layout_hash(d, 'G', nseg) : 0;
    if (!tg_dist_head(ctx, d, fn, ok, h, TG_LAYOUT, NULL, 0, NULL, NULL)) return false;
    const int P = d->size, r = d->rank;
    for (int t = 0; P > 1 && t < 2; t++) {
        const tg_dtype dt = t ? TG_F64 : TG_F32;
        const int64_t total = tg_dist_dtype_numel(d, nseg, dt), per = (int64_t)(d->bucket_bytes / tg_esize(dt));
        for (int64_t w0 = 0; w0 < total; w0 += per) {
            const int64_t len = total - w0 < per ? total - w0 : per;
            unsigned char *base = tg_dist_window_inside(d, nseg, dt, w0, len);
            if (!base) tg_dist_window_copy(d, nseg, dt, w0, len, TG_PACK, 0, base = d->buf);
            int *c = d->counts, *same = c + 6 * P;
            tg_dist_window_counts(d, len, tg_esize(dt), c);
            for (int q = 0; q < P; q++) same[q] = c[4 * P + r], same[P + q] = c[5 * P + r];
            char err[512];
            const int tag = d->tag;
            d->tag = (d->tag + 2) % 32766;
            if (!tg_comm_exchange(d->comm, tag + 1, base, same, same + P, base, c + 4 * P, c + 5 * P, d->batch, err,
                                  sizeof err) ||
                !tg_comm_batch_wait(d->comm, d->batch, err, sizeof err)) {
                tg_error(ctx, TG_ERR_IO, fn, "%s", err);
                return false;
            }
            if (base == d->buf) tg_dist_window_copy(d, nseg, dt, w0, len, TG_UNPACK, 0, d->buf);
        }
    }
    return true;
}

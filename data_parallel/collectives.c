/* The all-reduce in rank order and the broadcast from rank 0, whose
 * results do not depend on MPI.
 *
 * Every collective runs in three steps:
 *  1. its arguments become a list of segments (data, numel, dtype): the
 *     tensors, the parameters' grads or values, or a caller's doubles;
 *  2. the head exchange (data_parallel/head.c): one fixed-size record per rank with
 *     its status and a hash of the segments' layout (their dtypes and
 *     sizes, the bucket size), so a failed rank or a layout that differs
 *     ends the call on every rank before any message whose size depends
 *     on the layout. An all-reduce of at most TG_HEAD_BYTES bytes (a loss,
 *     a few metrics) rides in the records themselves: every rank folds the
 *     P records in rank order, and the call is that one message;
 *  3. the data, in windows: the segments of one dtype, laid end to end,
 *     are cut into windows of bucket_bytes. A window inside one segment
 *     is used in place; one that spans several is packed into a buffer.
 *
 * The all-reduce of a window of L elements (P > 1):
 *   - rank r scales it to w_r x_r (tg_fold: one rounding, in the dtype;
 *     nothing to do when w_r = 1);
 *   - the window is cut into P chunks (tg_dist_split); rank q receives
 *     every other rank's piece of chunk q (tg_comm_exchange: MPI_Isend and
 *     MPI_Irecv), in rank order;
 *   - rank q folds its P pieces left to right: y = ((p_0 + p_1) + p_2) ...
 *     (tg_fold with weight 1: 1 * p is exactly p), into its own chunk;
 *   - rank q sends its folded chunk to every rank, into the window.
 * Each element's sum is made by one rank, in rank order, whichever rank
 * and whatever MPI's algorithms: the same bits as one process folding the
 * P terms in that order (the gradient accumulator, data_parallel/accum.c). With one
 * rank there is nothing to exchange: y = w x in place. */
#include "data_parallel/internal.h"

#include <string.h>

/* ---- segments ------------------------------------------------------------------ */

/* Room for n segments; false (error set) when out of memory. */
bool tg_dist_reserve_segs(tg_ctx *ctx, tg_dist *d, const char *fn, int n) {
    if (n <= d->segs_cap) return true;
    tg_seg *s = tg_dist_mem(d, (size_t)n * sizeof *s);
    if (!s) {
        tg_error(ctx, TG_ERR_OOM, fn, "out of memory for %d tensors", n);
        return false;
    }
    tg_dist_mem_free(d, d->segs);
    d->segs = s;
    d->segs_cap = n;
    return true;
}

/* The segments of n tensors' data. */
static bool tensor_segs(tg_ctx *ctx, tg_dist *d, const char *fn, tg_tensor *const *tensors, int n) {
    if (!tg_ok(ctx)) return false;
    if (n < 0 || (n > 0 && !tensors)) {
        tg_error(ctx, n < 0 ? TG_ERR_VALUE : TG_ERR_NULL, fn, "bad tensor list: %d tensors at %p", n,
                 (const void *)tensors);
        return false;
    }
    if (!tg_dist_reserve_segs(ctx, d, fn, n)) return false;
    for (int i = 0; i < n; i++) {
        if (!tensors[i]) {
            char name[32];
            snprintf(name, sizeof name, "tensors[%d]", i);
            return tg_null_error(ctx, fn, name);
        }
        d->segs[i] = (tg_seg){tensors[i]->data, tensors[i]->numel, tensors[i]->dtype};
    }
    return true;
}

/* The segments of params' values (grads false) or grads (true). */
bool tg_dist_param_segs(tg_ctx *ctx, tg_dist *d, const char *fn, const tg_params *params, bool grads) {
    if (!tg_ok(ctx)) return false;
    if (!params) {
        tg_null_error(ctx, fn, "params");
        return false;
    }
    if (!tg_dist_reserve_segs(ctx, d, fn, params->count)) return false;
    for (int i = 0; i < params->count; i++) {
        const tg_param *p = &params->items[i];
        const tg_tensor *t = grads ? p->value->grad : p->value;
        if (!t) {
            tg_error(ctx, TG_ERR_STATE, fn, "parameter \"%s\" has no grad", p->name);
            return false;
        }
        d->segs[i] = (tg_seg){t->data, t->numel, t->dtype};
    }
    return true;
}

/* The layout of n segments, as a hash: the collective (a tag), the bucket
 * size (which cuts the windows) and each segment's dtype and size. */
uint64_t tg_dist_layout_hash(const tg_dist *d, char tag, int n) {
    uint64_t h = tg_fnv1a(TG_FNV_OFFSET, &tag, 1);
    h = tg_fnv1a(h, &d->bucket_bytes, sizeof d->bucket_bytes);
    h = tg_fnv1a(h, &n, sizeof n);
    for (int i = 0; i < n; i++) {
        int32_t dt = (int32_t)d->segs[i].dtype;
        h = tg_fnv1a(h, &dt, sizeof dt);
        h = tg_fnv1a(h, &d->segs[i].numel, sizeof d->segs[i].numel);
    }
    return h;
}

/* The window buffer and the receive buffer for the current bucket size. */
bool tg_dist_reserve(tg_ctx *ctx, tg_dist *d, const char *fn) {
    size_t need_buf = d->bucket_bytes, need_recv = d->bucket_bytes + (size_t)d->size * sizeof(double);
    if (d->buf_cap < need_buf) {
        tg_dist_mem_free(d, d->buf);
        d->buf_cap = 0;
        if (!(d->buf = tg_dist_mem(d, need_buf))) goto oom;
        d->buf_cap = need_buf;
    }
    if (d->size > 1 && d->recv_cap < need_recv) {
        tg_dist_mem_free(d, d->recv);
        d->recv_cap = 0;
        if (!(d->recv = tg_dist_mem(d, need_recv))) goto oom;
        d->recv_cap = need_recv;
    }
    return true;
oom:
    tg_error(ctx, TG_ERR_OOM, fn, "out of memory for a bucket of %zu bytes", d->bucket_bytes);
    return false;
}

/* ---- windows ------------------------------------------------------------------- */

void tg_dist_window_copy(tg_dist *d, int nseg, tg_dtype dt, int64_t w0, int64_t len, tg_copy_mode mode, double w,
                         unsigned char *buf) {
    const size_t es = tg_esize(dt);
    int64_t pos = 0; /* where segment i starts among the dtype-dt elements */
    for (int i = 0; i < nseg && pos < w0 + len; i++) {
        const tg_seg *s = &d->segs[i];
        if (s->dtype != dt) continue;
        int64_t lo = pos > w0 ? pos : w0, hi = pos + s->numel < w0 + len ? pos + s->numel : w0 + len;
        if (lo < hi) {
            unsigned char *data = (unsigned char *)s->data + (size_t)(lo - pos) * es;
            unsigned char *b = buf + (size_t)(lo - w0) * es;
            if (mode == TG_PACK) memcpy(b, data, (size_t)(hi - lo) * es);
            else if (mode == TG_PACK_SCALED) tg_fold(b, data, dt, w, hi - lo, true);
            else memcpy(data, b, (size_t)(hi - lo) * es);
        }
        pos += s->numel;
    }
}

unsigned char *tg_dist_window_inside(const tg_dist *d, int nseg, tg_dtype dt, int64_t w0, int64_t len) {
    int64_t pos = 0;
    for (int i = 0; i < nseg; i++) {
        const tg_seg *s = &d->segs[i];
        if (s->dtype != dt) continue;
        if (w0 < pos + s->numel) {
            if (w0 + len > pos + s->numel) return NULL;
            return (unsigned char *)s->data + (size_t)(w0 - pos) * tg_esize(dt);
        }
        pos += s->numel;
    }
    return NULL;
}

int64_t tg_dist_dtype_numel(const tg_dist *d, int nseg, tg_dtype dt) {
    int64_t n = 0;
    for (int i = 0; i < nseg; i++)
        if (d->segs[i].dtype == dt) n += d->segs[i].numel;
    return n;
}

void tg_dist_window_counts(tg_dist *d, int64_t len, size_t es, int *counts) {
    const int P = d->size;
    int64_t mine, piece;
    tg_dist_split(len, P, d->rank, &mine, &piece);
    for (int q = 0; q < P; q++) {
        int64_t start, count;
        tg_dist_split(len, P, q, &start, &count);
        counts[q] = (int)((size_t)count * es); /* chunk q, to rank q */
        counts[P + q] = (int)((size_t)start * es);
        counts[2 * P + q] = (int)((size_t)piece * es); /* rank q's piece of my chunk */
        counts[3 * P + q] = (int)((size_t)q * (size_t)piece * es);
        counts[4 * P + q] = (int)((size_t)count * es); /* chunk q, folded, from rank q */
        counts[5 * P + q] = (int)((size_t)start * es);
    }
    (void)mine;
}

void tg_dist_window_fold(const tg_dist *d, tg_dtype dt, unsigned char *base, unsigned char *recv, int64_t len) {
    const size_t es = tg_esize(dt);
    int64_t mine, piece;
    tg_dist_split(len, d->size, d->rank, &mine, &piece);
    unsigned char *acc = base + (size_t)mine * es, *own = recv + (size_t)d->rank * (size_t)piece * es;
    if (d->rank <= 1) {
        /* acc holds this rank's own piece: p_0 for rank 0, and for rank 1
         * p_1 + p_0, which is p_0 + p_1 (IEEE addition commutes) */
        for (int q = d->rank == 0 ? 1 : 0; q < d->size; q++)
            if (q != 1 || d->rank != 1) tg_fold(acc, recv + (size_t)q * (size_t)piece * es, dt, 1.0, piece, false);
        return;
    }
    memcpy(own, acc, (size_t)piece * es); /* its place among the pieces, so that p_0 + p_1 comes first */
    for (int q = 0; q < d->size; q++) tg_fold(acc, recv + (size_t)q * (size_t)piece * es, dt, 1.0, piece, q == 0);
}

bool tg_dist_window_start(tg_dist *d, tg_dtype dt, unsigned char *base, unsigned char *recv, int64_t len, int *counts,
                          int tag, tg_comm_batch *b, char *err, size_t err_size) {
    const int P = d->size;
    tg_dist_window_counts(d, len, tg_esize(dt), counts);
    return tg_comm_exchange(d->comm, tag, base, counts, counts + P, recv, counts + 2 * P, counts + 3 * P, b, err,
                            err_size);
}

bool tg_dist_window_mid(tg_dist *d, tg_dtype dt, unsigned char *base, unsigned char *recv, int64_t len, int *counts,
                        int tag, tg_comm_batch *b, char *err, size_t err_size) {
    const int P = d->size, r = d->rank;
    tg_dist_window_fold(d, dt, base, recv, len);
    /* the folded chunk to every rank: the same bytes to each */
    int *same = counts + 6 * P;
    for (int q = 0; q < P; q++) same[q] = counts[4 * P + r], same[P + q] = counts[5 * P + r];
    return tg_comm_exchange(d->comm, tag + 1, base, same, same + P, base, counts + 4 * P, counts + 5 * P, b, err,
                            err_size);
}

/* The all-reduce of the len elements at base (P > 1, already scaled), in
 * place: the exchanges and the rank-order fold described at the top. */
static bool reduce_window(tg_ctx *ctx, tg_dist *d, const char *fn, tg_dtype dt, unsigned char *base, int64_t len) {
    char err[512];
    const int tag = d->tag;
    d->tag = (d->tag + 2) % 32766;
    if (!tg_dist_window_start(d, dt, base, d->recv, len, d->counts, tag, d->batch, err, sizeof err) ||
        !tg_comm_batch_wait(d->comm, d->batch, err, sizeof err) ||
        !tg_dist_window_mid(d, dt, base, d->recv, len, d->counts, tag, d->batch, err, sizeof err) ||
        !tg_comm_batch_wait(d->comm, d->batch, err, sizeof err)) {
        tg_error(ctx, TG_ERR_IO, fn, "%s", err);
        return false;
    }
    d->stats.messages += 2;
    return true;
}

/* ---- the collectives ------------------------------------------------------------ */

/* The small all-reduce: the n64 doubles, then the n32 floats, of the
 * first nseg segments, scaled into one head record; after the exchange
 * every rank folds the P records in rank order, into the segments. */
static void small_pack(tg_dist *d, int nseg, int64_t n64, int64_t n32, double w, unsigned char *rec) {
    tg_dist_window_copy(d, nseg, TG_F64, 0, n64, TG_PACK_SCALED, w, rec);
    tg_dist_window_copy(d, nseg, TG_F32, 0, n32, TG_PACK_SCALED, w, rec + (size_t)n64 * 8);
}
static void small_fold(tg_dist *d, int nseg, int64_t n64, int64_t n32, const unsigned char *records, size_t stride) {
    for (int q = 0; q < d->size; q++) {
        const unsigned char *rec = records + (size_t)q * stride;
        tg_fold(d->buf, rec, TG_F64, 1.0, n64, q == 0);
        tg_fold(d->buf + (size_t)n64 * 8, rec + (size_t)n64 * 8, TG_F32, 1.0, n32, q == 0);
    }
    tg_dist_window_copy(d, nseg, TG_F64, 0, n64, TG_UNPACK, 0, d->buf);
    tg_dist_window_copy(d, nseg, TG_F32, 0, n32, TG_UNPACK, 0, d->buf + (size_t)n64 * 8);
}

/* The all-reduce of the first nseg segments with this rank's weight w;
 * ok false: this rank failed before (it still joins the head exchange). */
static bool reduce(tg_ctx *ctx, tg_dist *d, const char *fn, int nseg, double w, bool ok) {
    const double t0 = tg_dist_now();
    ok = ok && tg_check_finite(ctx, fn, "weight", w) && tg_dist_reserve(ctx, d, fn);
    const int64_t n32 = ok ? tg_dist_dtype_numel(d, nseg, TG_F32) : 0,
                  n64 = ok ? tg_dist_dtype_numel(d, nseg, TG_F64) : 0;
    const bool small = n64 * 8 + n32 * 4 <= TG_HEAD_BYTES;
    unsigned char rec[TG_HEAD_BYTES] = {0};
    if (ok && small) small_pack(d, nseg, n64, n32, w, rec);
    const unsigned char *records = NULL;
    size_t stride = 0;
    uint64_t h = ok ? tg_dist_layout_hash(d, 'R', nseg) : 0;
    bool done =
        tg_dist_head(ctx, d, fn, ok, h, TG_LAYOUT, small ? rec : NULL, small ? sizeof rec : 0, &records, &stride);
    if (done && small) small_fold(d, nseg, n64, n32, records, stride);
    for (int t = 0; done && !small && t < 2; t++) {
        const tg_dtype dt = t ? TG_F64 : TG_F32;
        const int64_t total = t ? n64 : n32, window = (int64_t)(d->bucket_bytes / tg_esize(dt));
        if (d->size == 1) {
            /* one rank: y = w x, nothing to exchange (1 * x is x) */
            for (int i = 0; i < nseg && w != 1.0; i++)
                if (d->segs[i].dtype == dt) tg_fold(d->segs[i].data, d->segs[i].data, dt, w, d->segs[i].numel, true);
            continue;
        }
        for (int64_t w0 = 0; done && w0 < total; w0 += window) {
            const int64_t len = total - w0 < window ? total - w0 : window;
            unsigned char *base = tg_dist_window_inside(d, nseg, dt, w0, len);
            if (base && w != 1.0) tg_fold(base, base, dt, w, len, true); /* in place: the grads are overwritten */
            if (!base) tg_dist_window_copy(d, nseg, dt, w0, len, TG_PACK_SCALED, w, base = d->buf);
            done = reduce_window(ctx, d, fn, dt, base, len);
            if (done && base == d->buf) tg_dist_window_copy(d, nseg, dt, w0, len, TG_UNPACK, 0, d->buf);
        }
    }
    if (done) d->stats.bytes += (double)(n32 * 4 + n64 * 8);
    d->stats.calls++;
    d->stats.seconds += tg_dist_now() - t0;
    return done;
}

/* The broadcast from rank 0 of the first nseg segments. */
static bool broadcast(tg_ctx *ctx, tg_dist *d, const char *fn, int nseg, bool ok) {
    ok = ok && tg_dist_reserve(ctx, d, fn);
    uint64_t h = ok ? tg_dist_layout_hash(d, 'B', nseg) : 0;
    bool done = tg_dist_head(ctx, d, fn, ok, h, TG_LAYOUT, NULL, 0, NULL, NULL);
    for (int t = 0; done && d->size > 1 && t < 2; t++) {
        const tg_dtype dt = t ? TG_F64 : TG_F32;
        const int64_t total = tg_dist_dtype_numel(d, nseg, dt), window = (int64_t)(d->bucket_bytes / tg_esize(dt));
        for (int64_t w0 = 0; done && w0 < total; w0 += window) {
            const int64_t len = total - w0 < window ? total - w0 : window;
            unsigned char *base = tg_dist_window_inside(d, nseg, dt, w0, len);
            char err[512];
            if (!base && d->rank == 0) tg_dist_window_copy(d, nseg, dt, w0, len, TG_PACK, 0, d->buf);
            if (!tg_comm_bcast(d->comm, base ? base : d->buf, (int)((size_t)len * tg_esize(dt)), 0, err, sizeof err)) {
                tg_error(ctx, TG_ERR_IO, fn, "%s", err);
                done = false;
            } else if (!base && d->rank != 0) {
                tg_dist_window_copy(d, nseg, dt, w0, len, TG_UNPACK, 0, d->buf);
            }
        }
    }
    return done;
}

/* A NULL d cannot join a collective: the error, and false. */
bool tg_dist_no_d(tg_ctx *ctx, const char *fn) {
    tg_null_error(ctx, fn, "d");
    return false;
}

bool tg_dist_allreduce(tg_ctx *ctx, tg_dist *d, tg_tensor *const *tensors, int n, double weight) {
    if (!d) return tg_dist_no_d(ctx, __func__);
    bool ok = tensor_segs(ctx, d, __func__, tensors, n);
    return reduce(ctx, d, __func__, ok ? n : 0, weight, ok);
}

bool tg_dist_allreduce_grads(tg_ctx *ctx, tg_dist *d, tg_params *params, double weight) {
    if (!d) return tg_dist_no_d(ctx, __func__);
    bool ok = tg_dist_param_segs(ctx, d, __func__, params, true);
    return reduce(ctx, d, __func__, ok ? params->count : 0, weight, ok);
}

bool tg_dist_allreduce_f64(tg_ctx *ctx, tg_dist *d, double *values, int64_t n, double weight) {
    if (!d) return tg_dist_no_d(ctx, __func__);
    bool ok = tg_ok(ctx) && tg_dist_reserve_segs(ctx, d, __func__, 1);
    if (ok && (n < 0 || (n > 0 && !values))) {
        tg_error(ctx, n < 0 ? TG_ERR_VALUE : TG_ERR_NULL, __func__, "bad values: %lld at %p", (long long)n,
                 (void *)values);
        ok = false;
    }
    if (ok) d->segs[0] = (tg_seg){values, n, TG_F64};
    return reduce(ctx, d, __func__, ok ? 1 : 0, weight, ok);
}

bool tg_dist_broadcast(tg_ctx *ctx, tg_dist *d, tg_tensor *const *tensors, int n) {
    if (!d) return tg_dist_no_d(ctx, __func__);
    bool ok = tensor_segs(ctx, d, __func__, tensors, n);
    return broadcast(ctx, d, __func__, ok ? n : 0, ok);
}

bool tg_dist_broadcast_params(tg_ctx *ctx, tg_dist *d, tg_params *params) {
    if (!d) return tg_dist_no_d(ctx, __func__);
    bool ok = tg_dist_param_segs(ctx, d, __func__, params, false);
    return broadcast(ctx, d, __func__, ok ? params->count : 0, ok);
}

bool tg_dist_broadcast_optim(tg_ctx *ctx, tg_dist *d, tg_optim *opt) {
    if (!d) return tg_dist_no_d(ctx, __func__);
    if (!opt) tg_null_error(ctx, __func__, "opt");
    tg_params *state = tg_optim_state(opt);
    bool ok = opt && tg_dist_param_segs(ctx, d, __func__, state, false);
    if (!broadcast(ctx, d, __func__, ok ? state->count : 0, ok)) return false;
    tg_optim_sync_state(ctx, opt); /* the step count, from "optim.step" */
    return tg_ok(ctx);
}

bool tg_dist_broadcast_rng(tg_ctx *ctx, tg_dist *d) {
    if (!d) return tg_dist_no_d(ctx, __func__);
    uint64_t state[2] = {0, 0};
    double bits[2]; /* the two words, moved as bytes */
    bool ok = tg_ok(ctx) && tg_dist_reserve_segs(ctx, d, __func__, 1);
    if (ok) {
        tg_rng_state(ctx, &state[0], &state[1]);
        memcpy(bits, state, sizeof bits);
        d->segs[0] = (tg_seg){bits, 2, TG_F64};
    }
    if (!broadcast(ctx, d, __func__, ok ? 1 : 0, ok)) return false;
    memcpy(state, bits, sizeof state);
    tg_rng_set_state(ctx, state[0], state[1]);
    return tg_ok(ctx);
}

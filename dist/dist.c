/* Data-parallel collectives whose results do not depend on MPI: the
 * all-reduce in rank order, the broadcast from rank 0, and the agreement
 * that turns one rank's failure into an error on every rank.
 *
 * Every collective runs in three steps:
 *  1. its arguments become a list of segments (data, numel, dtype): the
 *     tensors, the parameters' grads or values, or a caller's doubles;
 *  2. the agreement: one MPI_Allreduce(MIN) of three words -- the lowest
 *     rank that failed (or P when none did), a hash of the segments'
 *     layout and its complement (min(~h) = ~max(h), so every rank learns
 *     whether min(h) = max(h), i.e. all layouts are the same). A failed
 *     rank then broadcasts its message; every rank returns false, none is
 *     left waiting in step 3;
 *  3. the data, in buckets: the segments of one dtype, laid end to end,
 *     are cut into windows of bucket_bytes, each packed into one buffer.
 *
 * The all-reduce of a window of L elements (P > 1):
 *   - rank r packs w_r x_r (tg_fold: one rounding, in the dtype);
 *   - the window is cut into P chunks (tg_dist_split); rank q receives
 *     every rank's piece of chunk q (MPI_Alltoallv), in rank order;
 *   - rank q folds its P pieces left to right: y = ((p_0 + p_1) + p_2) ...
 *     (tg_fold with weight 1: 1 * p is exactly p);
 *   - every rank gathers the folded chunks (MPI_Allgatherv).
 * Each element's sum is made by one rank, in rank order, whichever rank
 * and whatever MPI's algorithms: the same bits as one process folding the
 * P terms in that order (the gradient accumulator, dist/accum.c). With one
 * rank there is nothing to exchange: y = w x in place. */
#define _POSIX_C_SOURCE 200809L

#include "dist/internal.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#define DEFAULT_BUCKET_BYTES ((size_t)4 << 20)
#define MIN_BUCKET_BYTES ((size_t)64)
#define MAX_BUCKET_BYTES ((size_t)1 << 30)

/* A piece of the data a collective moves: numel elements of dtype. */
typedef struct seg {
    void *data;
    int64_t numel;
    tg_dtype dtype;
} seg;

struct tg_dist {
    tg_allocator alloc; /* the context's at tg_dist_init: every buffer below */
    tg_comm *comm;
    int rank, size;
    size_t bucket_bytes;
    /* Scratch kept between calls, grown when needed. */
    unsigned char *buf;  /* one window, packed; after the fold, reduced */
    unsigned char *recv; /* the P pieces of this rank's chunk of a window */
    size_t buf_cap, recv_cap;
    int *counts; /* 4 x P byte counts: send counts and displacements, receive counts and displacements */
    seg *segs;
    int segs_cap;
    tg_dist_stats stats;
};

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *dist_alloc(tg_dist *d, size_t size) { return d->alloc.alloc(size ? size : 1, TG_ALIGN, d->alloc.user); }
static void dist_free(tg_dist *d, void *p) {
    if (p) d->alloc.free(p, d->alloc.user);
}

/* ---- the world --------------------------------------------------------------- */

tg_dist *tg_dist_init(tg_ctx *ctx, int *argc, char ***argv) {
    if (!tg_ok(ctx)) return NULL;
    tg_dist *d = ctx->alloc.alloc(sizeof *d, TG_ALIGN, ctx->alloc.user);
    if (!d) {
        tg_error(ctx, TG_ERR_OOM, __func__, "out of memory");
        return NULL;
    }
    memset(d, 0, sizeof *d);
    d->alloc = ctx->alloc;
    d->bucket_bytes = DEFAULT_BUCKET_BYTES;
    char err[512];
    d->comm = tg_comm_open(&d->alloc, argc, argv, err, sizeof err);
    if (!d->comm) {
        tg_error(ctx, TG_ERR_STATE, __func__, "%s", err);
        dist_free(d, d);
        return NULL;
    }
    d->rank = tg_comm_rank(d->comm);
    d->size = tg_comm_size(d->comm);
    d->counts = dist_alloc(d, 4 * (size_t)d->size * sizeof *d->counts);
    if (!d->counts) {
        tg_error(ctx, TG_ERR_OOM, __func__, "out of memory for %d processes", d->size);
        tg_dist_free(d);
        return NULL;
    }
    return d;
}

void tg_dist_free(tg_dist *d) {
    if (!d) return;
    dist_free(d, d->buf);
    dist_free(d, d->recv);
    dist_free(d, d->counts);
    dist_free(d, d->segs);
    tg_comm_close(d->comm, &d->alloc);
    dist_free(d, d);
}

int tg_dist_rank(const tg_dist *d) { return d ? d->rank : 0; }
int tg_dist_size(const tg_dist *d) { return d ? d->size : 1; }
int tg_dist_local_size(const tg_dist *d) { return d ? tg_comm_local_size(d->comm) : 1; }
const char *tg_dist_backend(const tg_dist *d) { return d ? tg_comm_backend(d->comm) : "one process: no tg_dist"; }

void tg_dist_split(int64_t total, int parts, int part, int64_t *start, int64_t *count) {
    int64_t s = 0, c = 0;
    if (total > 0 && parts > 0 && part >= 0 && part < parts) {
        /* floor(k total / parts) = k q + floor(k r / parts) with total = q parts + r:
         * no product overflows, whatever total */
        const int64_t q = total / parts, r = total % parts;
        s = part * q + part * r / parts;
        c = (part + 1) * q + (part + 1) * r / parts - s;
    }
    if (start) *start = s;
    if (count) *count = c;
}

bool tg_dist_draw(tg_ctx *ctx, int64_t n, int64_t start, int64_t count, int64_t *index) {
    if (!tg_ok(ctx)) return false;
    if (n < 1 || start < 0 || count < 0) {
        tg_error(ctx, TG_ERR_VALUE, __func__,
                 "n = %lld, start = %lld, count = %lld: want n >= 1, start >= 0, count >= 0", (long long)n,
                 (long long)start, (long long)count);
        return false;
    }
    if (!index && count > 0) {
        tg_null_error(ctx, __func__, "index");
        return false;
    }
    uint64_t seed, offset;
    tg_rng_state(ctx, &seed, &offset);
    tg_rng_set_state(ctx, seed, offset + (uint64_t)start);
    for (int64_t i = 0; i < count; i++) {
        /* u < 1, but u n can round up to n */
        int64_t k = (int64_t)(tg_rng_uniform(ctx) * (double)n);
        index[i] = k < n ? k : n - 1;
    }
    tg_rng_set_state(ctx, seed, offset);
    return true;
}

void tg_dist_set_bucket_bytes(tg_dist *d, size_t bytes) {
    if (!d) return;
    d->bucket_bytes = bytes < MIN_BUCKET_BYTES ? MIN_BUCKET_BYTES : bytes > MAX_BUCKET_BYTES ? MAX_BUCKET_BYTES : bytes;
}
size_t tg_dist_bucket_bytes(const tg_dist *d) { return d ? d->bucket_bytes : DEFAULT_BUCKET_BYTES; }

tg_dist_stats tg_dist_get_stats(const tg_dist *d) { return d ? d->stats : (tg_dist_stats){0}; }
void tg_dist_reset_stats(tg_dist *d) {
    if (d) d->stats = (tg_dist_stats){0};
}

/* ---- the agreement ------------------------------------------------------------- */

/* 64-bit FNV-1a of n bytes, continuing from h (start: FNV_OFFSET). */
#define FNV_OFFSET 14695981039346656037ull
static uint64_t fnv1a(uint64_t h, const void *bytes, size_t n) {
    const unsigned char *p = bytes;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

/* What a failed rank tells the others (step 2 above). */
typedef struct failure {
    int32_t status;
    char message[508];
} failure;

/* The agreement (step 2 above): true on every rank when no rank failed
 * (ok false or its context in error) and every rank's hash is the same;
 * else false on every rank, with the error set on each that had not failed
 * itself. `what` names what the hash covers, for the mismatch message. */
static bool agree(tg_ctx *ctx, tg_dist *d, const char *fn, bool ok, uint64_t hash, const char *what) {
    bool failed = !ok || !tg_ok(ctx);
    uint64_t v[3] = {failed ? (uint64_t)d->rank : (uint64_t)d->size, hash, ~hash};
    char err[512];
    if (!tg_comm_min_u64(d->comm, v, 3, err, sizeof err)) {
        tg_error(ctx, TG_ERR_IO, fn, "%s", err);
        return false;
    }
    if (v[0] < (uint64_t)d->size) {
        int root = (int)v[0];
        failure f;
        memset(&f, 0, sizeof f);
        if (root == d->rank) {
            f.status = ctx ? (int32_t)tg_status_of(ctx) : TG_ERR_NULL;
            snprintf(f.message, sizeof f.message, "%s",
                     !ctx         ? "its context is NULL"
                     : tg_ok(ctx) ? "(its own output says why)"
                                  : tg_error_message(ctx));
        }
        if (!tg_comm_bcast(d->comm, &f, (int)sizeof f, root, err, sizeof err)) {
            tg_error(ctx, TG_ERR_IO, fn, "%s", err);
            return false;
        }
        f.message[sizeof f.message - 1] = '\0';
        if (!failed)
            tg_error(ctx, f.status > TG_OK && f.status <= TG_ERR_FORMAT ? (tg_status)f.status : TG_ERR_STATE, fn,
                     "rank %d failed: %s", root, f.message);
        return false;
    }
    if (v[1] != ~v[2]) {
        tg_error(ctx, TG_ERR_STATE, fn, "%s differ between the ranks", what);
        return false;
    }
    return true;
}

bool tg_dist_agree(tg_ctx *ctx, tg_dist *d, bool ok) {
    if (!d) {
        tg_null_error(ctx, __func__, "d");
        return false;
    }
    return agree(ctx, d, __func__, ok, 0, "");
}

bool tg_dist_same(tg_ctx *ctx, tg_dist *d, const void *bytes, size_t size, const char *what) {
    if (!d) {
        tg_null_error(ctx, __func__, "d");
        return false;
    }
    bool ok = true;
    if (!bytes && size) {
        tg_null_error(ctx, __func__, "bytes");
        ok = false;
    }
    uint64_t h = ok ? fnv1a(FNV_OFFSET, bytes, size) : 0;
    return agree(ctx, d, __func__, ok, h, what ? what : "the values");
}

/* ---- segments ------------------------------------------------------------------ */

/* Room for n segments; false (error set) when out of memory. */
static bool reserve_segs(tg_ctx *ctx, tg_dist *d, const char *fn, int n) {
    if (n <= d->segs_cap) return true;
    seg *s = dist_alloc(d, (size_t)n * sizeof *s);
    if (!s) {
        tg_error(ctx, TG_ERR_OOM, fn, "out of memory for %d tensors", n);
        return false;
    }
    dist_free(d, d->segs);
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
    if (!reserve_segs(ctx, d, fn, n)) return false;
    for (int i = 0; i < n; i++) {
        if (!tensors[i]) {
            char name[32];
            snprintf(name, sizeof name, "tensors[%d]", i);
            return tg_null_error(ctx, fn, name);
        }
        d->segs[i] = (seg){tensors[i]->data, tensors[i]->numel, tensors[i]->dtype};
    }
    return true;
}

/* The segments of params' values (grads false) or grads (true). */
static bool param_segs(tg_ctx *ctx, tg_dist *d, const char *fn, const tg_params *params, bool grads) {
    if (!tg_ok(ctx)) return false;
    if (!params) {
        tg_null_error(ctx, fn, "params");
        return false;
    }
    if (!reserve_segs(ctx, d, fn, params->count)) return false;
    for (int i = 0; i < params->count; i++) {
        const tg_param *p = &params->items[i];
        const tg_tensor *t = grads ? p->value->grad : p->value;
        if (!t) {
            tg_error(ctx, TG_ERR_STATE, fn, "parameter \"%s\" has no grad", p->name);
            return false;
        }
        d->segs[i] = (seg){t->data, t->numel, t->dtype};
    }
    return true;
}

/* The layout of n segments, as a hash: the collective (a tag), the bucket
 * size (which cuts the windows) and each segment's dtype and size. */
static uint64_t layout_hash(const tg_dist *d, char tag, int n) {
    uint64_t h = fnv1a(FNV_OFFSET, &tag, 1);
    h = fnv1a(h, &d->bucket_bytes, sizeof d->bucket_bytes);
    h = fnv1a(h, &n, sizeof n);
    for (int i = 0; i < n; i++) {
        int32_t dt = (int32_t)d->segs[i].dtype;
        h = fnv1a(h, &dt, sizeof dt);
        h = fnv1a(h, &d->segs[i].numel, sizeof d->segs[i].numel);
    }
    return h;
}
#define LAYOUT "the tensors (their count, dtypes and sizes) or the bucket sizes"

/* The window buffer and the receive buffer for the current bucket size. */
static bool reserve_buffers(tg_ctx *ctx, tg_dist *d, const char *fn) {
    size_t need_buf = d->bucket_bytes, need_recv = d->bucket_bytes + (size_t)d->size * sizeof(double);
    if (d->buf_cap < need_buf) {
        dist_free(d, d->buf);
        d->buf_cap = 0;
        if (!(d->buf = dist_alloc(d, need_buf))) goto oom;
        d->buf_cap = need_buf;
    }
    if (d->size > 1 && d->recv_cap < need_recv) {
        dist_free(d, d->recv);
        d->recv_cap = 0;
        if (!(d->recv = dist_alloc(d, need_recv))) goto oom;
        d->recv_cap = need_recv;
    }
    return true;
oom:
    tg_error(ctx, TG_ERR_OOM, fn, "out of memory for a bucket of %zu bytes", d->bucket_bytes);
    return false;
}

/* ---- windows ------------------------------------------------------------------- */

typedef enum { PACK, PACK_SCALED, UNPACK } copy_mode;

/* Elements [w0, w0 + len) of the dtype-dt segments laid end to end, to or
 * from d->buf: PACK copies them in, PACK_SCALED stores w x, UNPACK copies
 * the buffer back out. */
static void window_copy(tg_dist *d, int nseg, tg_dtype dt, int64_t w0, int64_t len, copy_mode mode, double w) {
    const size_t es = tg_esize(dt);
    int64_t pos = 0; /* where segment i starts among the dtype-dt elements */
    for (int i = 0; i < nseg && pos < w0 + len; i++) {
        const seg *s = &d->segs[i];
        if (s->dtype != dt) continue;
        int64_t lo = pos > w0 ? pos : w0, hi = pos + s->numel < w0 + len ? pos + s->numel : w0 + len;
        if (lo < hi) {
            unsigned char *data = (unsigned char *)s->data + (size_t)(lo - pos) * es;
            unsigned char *b = d->buf + (size_t)(lo - w0) * es;
            if (mode == PACK) memcpy(b, data, (size_t)(hi - lo) * es);
            else if (mode == PACK_SCALED) tg_fold(b, data, dt, w, hi - lo, true);
            else memcpy(data, b, (size_t)(hi - lo) * es);
        }
        pos += s->numel;
    }
}

/* Elements of dtype dt over the first nseg segments. */
static int64_t dtype_numel(const tg_dist *d, int nseg, tg_dtype dt) {
    int64_t n = 0;
    for (int i = 0; i < nseg; i++)
        if (d->segs[i].dtype == dt) n += d->segs[i].numel;
    return n;
}

/* The all-reduce of the len packed elements in d->buf (P > 1), in place:
 * the exchange and the rank-order fold described at the top. */
static bool reduce_window(tg_ctx *ctx, tg_dist *d, const char *fn, tg_dtype dt, int64_t len) {
    const int P = d->size;
    const size_t es = tg_esize(dt);
    int *scount = d->counts, *sdispl = scount + P, *rcount = sdispl + P, *rdispl = rcount + P;
    int64_t mine, piece;
    tg_dist_split(len, P, d->rank, &mine, &piece);
    for (int q = 0; q < P; q++) {
        int64_t start, count;
        tg_dist_split(len, P, q, &start, &count);
        scount[q] = (int)((size_t)count * es);
        sdispl[q] = (int)((size_t)start * es);
        rcount[q] = (int)((size_t)piece * es);
        rdispl[q] = (int)((size_t)q * (size_t)piece * es);
    }
    char err[512];
    if (!tg_comm_alltoallv(d->comm, d->buf, scount, sdispl, d->recv, rcount, rdispl, err, sizeof err)) goto failed;
    /* this rank's chunk, folded in rank order over the ranks' pieces */
    for (int q = 0; q < P; q++)
        tg_fold(d->buf + (size_t)mine * es, d->recv + (size_t)rdispl[q], dt, 1.0, piece, q == 0);
    if (!tg_comm_allgatherv(d->comm, d->buf, scount, sdispl, err, sizeof err)) goto failed;
    d->stats.messages += 2;
    return true;
failed:
    tg_error(ctx, TG_ERR_IO, fn, "%s", err);
    return false;
}

/* ---- the collectives ------------------------------------------------------------ */

/* The all-reduce of the first nseg segments with this rank's weight w;
 * ok false: this rank failed before (it still joins the agreement). */
static bool reduce(tg_ctx *ctx, tg_dist *d, const char *fn, int nseg, double w, bool ok) {
    double t0 = now();
    ok = ok && tg_check_finite(ctx, fn, "weight", w) && reserve_buffers(ctx, d, fn);
    uint64_t h = ok ? layout_hash(d, 'R', nseg) : 0;
    bool done = agree(ctx, d, fn, ok, h, LAYOUT);
    if (d->size > 1) d->stats.messages++;
    for (int t = 0; done && t < 2; t++) {
        const tg_dtype dt = t ? TG_F64 : TG_F32;
        const int64_t total = dtype_numel(d, nseg, dt), window = (int64_t)(d->bucket_bytes / tg_esize(dt));
        if (d->size == 1) {
            /* one rank: y = w x, nothing to exchange (1 * x is x) */
            for (int i = 0; i < nseg && w != 1.0; i++)
                if (d->segs[i].dtype == dt) tg_fold(d->segs[i].data, d->segs[i].data, dt, w, d->segs[i].numel, true);
        } else {
            for (int64_t w0 = 0; done && w0 < total; w0 += window) {
                int64_t len = total - w0 < window ? total - w0 : window;
                window_copy(d, nseg, dt, w0, len, PACK_SCALED, w);
                done = reduce_window(ctx, d, fn, dt, len);
                if (done) window_copy(d, nseg, dt, w0, len, UNPACK, 0);
            }
        }
        if (done) d->stats.bytes += (double)total * (double)tg_esize(dt);
    }
    d->stats.calls++;
    d->stats.seconds += now() - t0;
    return done;
}

/* The broadcast from rank 0 of the first nseg segments. */
static bool broadcast(tg_ctx *ctx, tg_dist *d, const char *fn, int nseg, bool ok) {
    ok = ok && reserve_buffers(ctx, d, fn);
    uint64_t h = ok ? layout_hash(d, 'B', nseg) : 0;
    bool done = agree(ctx, d, fn, ok, h, LAYOUT);
    for (int t = 0; done && d->size > 1 && t < 2; t++) {
        const tg_dtype dt = t ? TG_F64 : TG_F32;
        const int64_t total = dtype_numel(d, nseg, dt), window = (int64_t)(d->bucket_bytes / tg_esize(dt));
        for (int64_t w0 = 0; done && w0 < total; w0 += window) {
            int64_t len = total - w0 < window ? total - w0 : window;
            char err[512];
            if (d->rank == 0) window_copy(d, nseg, dt, w0, len, PACK, 0);
            if (!tg_comm_bcast(d->comm, d->buf, (int)((size_t)len * tg_esize(dt)), 0, err, sizeof err)) {
                tg_error(ctx, TG_ERR_IO, fn, "%s", err);
                done = false;
            } else if (d->rank != 0) {
                window_copy(d, nseg, dt, w0, len, UNPACK, 0);
            }
        }
    }
    return done;
}

/* A NULL d cannot join a collective: the error, and false. */
static bool no_dist(tg_ctx *ctx, const char *fn) {
    tg_null_error(ctx, fn, "d");
    return false;
}

bool tg_dist_allreduce(tg_ctx *ctx, tg_dist *d, tg_tensor *const *tensors, int n, double weight) {
    if (!d) return no_dist(ctx, __func__);
    bool ok = tensor_segs(ctx, d, __func__, tensors, n);
    return reduce(ctx, d, __func__, ok ? n : 0, weight, ok);
}

bool tg_dist_allreduce_grads(tg_ctx *ctx, tg_dist *d, tg_params *params, double weight) {
    if (!d) return no_dist(ctx, __func__);
    bool ok = param_segs(ctx, d, __func__, params, true);
    return reduce(ctx, d, __func__, ok ? params->count : 0, weight, ok);
}

bool tg_dist_allreduce_f64(tg_ctx *ctx, tg_dist *d, double *values, int64_t n, double weight) {
    if (!d) return no_dist(ctx, __func__);
    bool ok = tg_ok(ctx) && reserve_segs(ctx, d, __func__, 1);
    if (ok && (n < 0 || (n > 0 && !values))) {
        tg_error(ctx, n < 0 ? TG_ERR_VALUE : TG_ERR_NULL, __func__, "bad values: %lld at %p", (long long)n,
                 (void *)values);
        ok = false;
    }
    if (ok) d->segs[0] = (seg){values, n, TG_F64};
    return reduce(ctx, d, __func__, ok ? 1 : 0, weight, ok);
}

bool tg_dist_broadcast(tg_ctx *ctx, tg_dist *d, tg_tensor *const *tensors, int n) {
    if (!d) return no_dist(ctx, __func__);
    bool ok = tensor_segs(ctx, d, __func__, tensors, n);
    return broadcast(ctx, d, __func__, ok ? n : 0, ok);
}

bool tg_dist_broadcast_params(tg_ctx *ctx, tg_dist *d, tg_params *params) {
    if (!d) return no_dist(ctx, __func__);
    bool ok = param_segs(ctx, d, __func__, params, false);
    return broadcast(ctx, d, __func__, ok ? params->count : 0, ok);
}

bool tg_dist_broadcast_optim(tg_ctx *ctx, tg_dist *d, tg_optim *opt) {
    if (!d) return no_dist(ctx, __func__);
    if (!opt) tg_null_error(ctx, __func__, "opt");
    tg_params *state = tg_optim_state(opt);
    bool ok = opt && param_segs(ctx, d, __func__, state, false);
    if (!broadcast(ctx, d, __func__, ok ? state->count : 0, ok)) return false;
    tg_optim_sync_state(ctx, opt); /* the step count, from "optim.step" */
    return tg_ok(ctx);
}

bool tg_dist_broadcast_rng(tg_ctx *ctx, tg_dist *d) {
    if (!d) return no_dist(ctx, __func__);
    uint64_t state[2] = {0, 0};
    double bits[2]; /* the two words, moved as bytes */
    bool ok = tg_ok(ctx) && reserve_segs(ctx, d, __func__, 1);
    if (ok) {
        tg_rng_state(ctx, &state[0], &state[1]);
        memcpy(bits, state, sizeof bits);
        d->segs[0] = (seg){bits, 2, TG_F64};
    }
    if (!broadcast(ctx, d, __func__, ok ? 1 : 0, ok)) return false;
    memcpy(state, bits, sizeof state);
    tg_rng_set_state(ctx, state[0], state[1]);
    return tg_ok(ctx);
}

/* tg_dist_backward: backward and the all-reduce of the gradients at once,
 * each window of gradients sent as soon as backward has made it final.
 *
 * Backward walks the tape from the last record to the first, and a
 * parameter's gradient receives its last contribution from the record
 * that used the parameter first in the forward (its first use, the
 * lowest index of a record that reads it, or a view of it). So once the
 * walk has run that record, the gradient is final. The windows are cut
 * from the gradients in reverse parameter order (the last layers' first,
 * which backward finishes first), and each is ready once the walk has
 * passed the first use of every parameter in it.
 *
 * The tape calls back after every record it runs (tg_tape.walked); the
 * callback starts the next windows that are ready, in order, while at most
 * SLOTS are in flight, and moves the ones in flight along without waiting
 * (MPI_Testall: MPI progresses only inside MPI calls). After backward the
 * rest are finished, waiting under the deadline. Each window is the
 * all-reduce of data_parallel/collectives.c, with tags of its own (its messages
 * match whatever the timing), so the bits are those of
 * tg_dist_allreduce_grads after tg_backward.
 *
 * A rank whose context falls in error during backward still sends every
 * window (what its gradients hold), so no rank waits for a message that
 * never comes; a head exchange after the last window then tells every
 * rank that one failed. */
#include "data_parallel/internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/tape.h"

#define SLOTS 2 /* windows in flight at once */

/* The buffers of the windows in flight, kept between calls. */
struct tg_dist_slots {
    size_t cap; /* bytes of each recv and pack buffer */
    unsigned char *recv[SLOTS], *pack[SLOTS];
    int *counts[SLOTS]; /* 8P each */
    tg_comm_batch *batch[SLOTS];
    bool busy[SLOTS];
};

void tg_dist_slots_free(tg_dist *d) {
    struct tg_dist_slots *s = d->slots;
    if (!s) return;
    for (int i = 0; i < SLOTS; i++) {
        tg_dist_mem_free(d, s->recv[i]);
        tg_dist_mem_free(d, s->pack[i]);
        tg_dist_mem_free(d, s->counts[i]);
        tg_comm_batch_free(s->batch[i], &d->alloc);
    }
    tg_dist_mem_free(d, s);
    d->slots = NULL;
}

/* d->slots for the current bucket size; false when out of memory. */
static bool reserve_slots(tg_dist *d) {
    const size_t cap = d->bucket_bytes + (size_t)d->size * sizeof(double);
    if (d->slots && d->slots->cap >= cap) return true;
    tg_dist_slots_free(d);
    struct tg_dist_slots *s = d->slots = tg_dist_mem(d, sizeof *s);
    if (!s) return false;
    memset(s, 0, sizeof *s);
    s->cap = cap;
    bool ok = true;
    for (int i = 0; i < SLOTS; i++) {
        s->recv[i] = tg_dist_mem(d, cap);
        s->pack[i] = tg_dist_mem(d, cap);
        s->counts[i] = tg_dist_mem(d, 8 * (size_t)d->size * sizeof(int));
        s->batch[i] = tg_comm_batch_new(d->comm, &d->alloc);
        ok = ok && s->recv[i] && s->pack[i] && s->counts[i] && s->batch[i];
    }
    if (!ok) tg_dist_slots_free(d);
    return ok;
}

typedef struct window {
    tg_dtype dt;
    int64_t w0, len;  /* its elements among the dtype-dt gradients, in reverse parameter order */
    int64_t ready_at; /* final once backward has run this record */
    int stage;        /* 0 waiting, 1 pieces out, 2 chunks out, 3 done */
    int slot, tag;
    unsigned char *base; /* the gradient itself, or the slot's pack buffer */
} window;

typedef struct overlap {
    tg_dist *d;
    int nseg;
    double w;
    window *win;
    int nwin, next, done; /* next to start; all before `done` are done */
    int64_t walked;       /* the lowest record backward has run */
    bool failed;          /* a message could not be sent or received */
    char err[512];
} overlap;

/* Starts window i in a free slot: scaled to w x (in place when it lies in
 * one gradient, else packed), its pieces sent. */
static void start(overlap *o, int i) {
    tg_dist *d = o->d;
    struct tg_dist_slots *s = d->slots;
    window *x = &o->win[i];
    int slot = 0;
    while (s->busy[slot]) slot++;
    s->busy[slot] = true;
    x->slot = slot;
    x->base = tg_dist_window_inside(d, o->nseg, x->dt, x->w0, x->len);
    if (x->base && o->w != 1.0) tg_fold(x->base, x->base, x->dt, o->w, x->len, true);
    if (!x->base) tg_dist_window_copy(d, o->nseg, x->dt, x->w0, x->len, TG_PACK_SCALED, o->w, x->base = s->pack[slot]);
    if (!tg_dist_window_start(d, x->dt, x->base, s->recv[slot], x->len, s->counts[slot], x->tag, s->batch[slot], o->err,
                              sizeof o->err))
        o->failed = true;
    x->stage = 1;
}

/* Moves window i on as far as it can go; block: wait for it. */
static void step(overlap *o, int i, bool block) {
    tg_dist *d = o->d;
    struct tg_dist_slots *s = d->slots;
    window *x = &o->win[i];
    while (!o->failed && (x->stage == 1 || x->stage == 2)) {
        bool done = true;
        if (block) o->failed = !tg_comm_batch_wait(d->comm, s->batch[x->slot], o->err, sizeof o->err);
        else o->failed = !tg_comm_batch_test(d->comm, s->batch[x->slot], &done, o->err, sizeof o->err);
        if (o->failed || !done) return;
        if (x->stage == 1) {
            o->failed = !tg_dist_window_mid(d, x->dt, x->base, s->recv[x->slot], x->len, s->counts[x->slot], x->tag,
                                            s->batch[x->slot], o->err, sizeof o->err);
            x->stage = 2;
        } else {
            if (x->base == s->pack[x->slot])
                tg_dist_window_copy(d, o->nseg, x->dt, x->w0, x->len, TG_UNPACK, 0, x->base);
            s->busy[x->slot] = false;
            x->stage = 3;
        }
    }
}

/* Starts what is ready and moves the windows in flight on; block (after
 * backward): everything, waiting. */
static void advance(overlap *o, bool block) {
    struct tg_dist_slots *s = o->d->slots;
    for (;;) {
        for (int i = o->done; i < o->next; i++) step(o, i, false);
        while (o->done < o->next && o->win[o->done].stage == 3) o->done++;
        if (o->failed || o->next == o->nwin) break;
        bool free_slot = false;
        for (int k = 0; k < SLOTS; k++) free_slot = free_slot || !s->busy[k];
        if (free_slot && (block || o->walked <= o->win[o->next].ready_at)) {
            start(o, o->next++);
            continue;
        }
        if (!block) return;
        step(o, o->done, true); /* the oldest in flight, to free its slot */
    }
    for (int i = o->done; block && !o->failed && i < o->next; i++) step(o, i, true);
}

/* The tape's callback: backward has run record k. */
static void walked(tg_ctx *ctx, int64_t k, void *user) {
    (void)ctx;
    overlap *o = user;
    o->walked = k;
    advance(o, false);
}

/* p's position in the sorted array of parameter pointers (or -1). */
typedef struct key {
    const tg_tensor *t;
    int seg;
} key;
static int cmp_key(const void *a, const void *b) {
    uintptr_t x = (uintptr_t)((const key *)a)->t, y = (uintptr_t)((const key *)b)->t;
    return (x > y) - (x < y);
}

/* first[i]: the lowest record of the tape that reads segment i's
 * parameter (INT64_MAX: none). values: the parameters, in segment order. */
static bool first_uses(tg_ctx *ctx, tg_tensor *const *values, int n, int64_t *first) {
    key *keys = malloc((size_t)(n ? n : 1) * sizeof *keys);
    if (!keys) return false;
    for (int i = 0; i < n; i++) keys[i] = (key){values[i], i}, first[i] = INT64_MAX;
    qsort(keys, (size_t)n, sizeof *keys, cmp_key);
    for (int64_t k = ctx->tape.n_nodes - 1; k >= 0; k--) {
        const tg_node *node = &ctx->tape.nodes[k];
        for (int j = 0; j < node->n_in; j++) {
            if (!node->in[j]) continue;
            key want = {tg_root(node->in[j]), 0};
            const key *hit = bsearch(&want, keys, (size_t)n, sizeof *keys, cmp_key);
            if (hit) first[hit->seg] = k;
        }
    }
    free(keys);
    return true;
}

/* The windows of the nseg segments (each dtype's gradients cut into
 * windows of the bucket size), with when each is ready. */
static bool plan(tg_dist *d, overlap *o, const int64_t *first) {
    int64_t count = 0;
    for (int t = 0; t < 2; t++) {
        const tg_dtype dt = t ? TG_F64 : TG_F32;
        const int64_t total = tg_dist_dtype_numel(d, o->nseg, dt), per = (int64_t)(d->bucket_bytes / tg_esize(dt));
        count += (total + per - 1) / per;
    }
    o->win = malloc((size_t)(count ? count : 1) * sizeof *o->win);
    if (!o->win) return false;
    for (int t = 0; t < 2; t++) {
        const tg_dtype dt = t ? TG_F64 : TG_F32;
        const int64_t total = tg_dist_dtype_numel(d, o->nseg, dt), per = (int64_t)(d->bucket_bytes / tg_esize(dt));
        for (int64_t w0 = 0; w0 < total; w0 += per) {
            window *x = &o->win[o->nwin];
            *x = (window){.dt = dt, .w0 = w0, .len = total - w0 < per ? total - w0 : per, .ready_at = INT64_MAX};
            x->tag = d->tag;
            d->tag = (d->tag + 2) % 32766;
            int64_t pos = 0; /* the segments the window touches */
            for (int i = 0; i < o->nseg; i++) {
                if (d->segs[i].dtype != dt) continue;
                if (pos < x->w0 + x->len && pos + d->segs[i].numel > x->w0 && first[i] < x->ready_at)
                    x->ready_at = first[i];
                pos += d->segs[i].numel;
            }
            o->nwin++;
        }
    }
    return true;
}

bool tg_dist_backward(tg_ctx *ctx, tg_dist *d, tg_tensor *loss, tg_params *params, double weight) {
    static const char fn[] = "tg_dist_backward";
    if (!d) return tg_dist_no_d(ctx, fn);
    overlap o = {.d = d, .w = weight, .walked = INT64_MAX};
    bool ok = tg_dist_param_segs(ctx, d, fn, params, true) && tg_check_finite(ctx, fn, "weight", weight) &&
              tg_check_arg_any(ctx, fn, "loss", loss) && tg_dist_reserve(ctx, d, fn);
    if (ok && d->size > 1 && !reserve_slots(d)) {
        tg_error(ctx, TG_ERR_OOM, fn, "out of memory for %d windows of %zu bytes", SLOTS, d->bucket_bytes);
        ok = false;
    }
    const int nseg = ok ? params->count : 0;
    int64_t *first = ok ? malloc((size_t)(nseg ? nseg : 1) * sizeof *first) : NULL;
    tg_tensor **values = ok ? malloc((size_t)(nseg ? nseg : 1) * sizeof *values) : NULL;
    if (ok && (!first || !values)) {
        tg_error(ctx, TG_ERR_OOM, fn, "out of memory for %d parameters", nseg);
        ok = false;
    }
    /* the gradients in reverse parameter order: the last layers' first */
    for (int i = 0; ok && i < nseg / 2; i++) {
        tg_seg t = d->segs[i];
        d->segs[i] = d->segs[nseg - 1 - i];
        d->segs[nseg - 1 - i] = t;
    }
    for (int i = 0; ok && i < nseg; i++) values[i] = params->items[nseg - 1 - i].value;
    o.nseg = nseg;
    const uint64_t h = ok ? tg_dist_layout_hash(d, 'O', nseg) : 0;
    /* the head: every rank ready, with the same gradients */
    if (!tg_dist_head(ctx, d, fn, ok, h, TG_LAYOUT, NULL, 0, NULL, NULL)) {
        free(first);
        free(values);
        return false;
    }
    if (d->size == 1) { /* nothing to send: backward, then y = w x */
        free(first);
        free(values);
        tg_backward(ctx, loss);
        return tg_dist_allreduce_grads(ctx, d, params, weight);
    }
    if (!first_uses(ctx, values, nseg, first) || !plan(d, &o, first)) {
        o.failed = true;
        snprintf(o.err, sizeof o.err, "out of memory for the windows of %d parameters", nseg);
    }
    free(first);
    free(values);
    if (!o.failed) {
        ctx->tape.walked = walked;
        ctx->tape.walked_user = &o;
        tg_backward(ctx, loss);
        ctx->tape.walked = NULL;
        ctx->tape.walked_user = NULL;
    }
    const double t0 = tg_dist_now();
    d->stats.early += o.next; /* started while backward ran */
    if (!o.failed) advance(&o, true);
    free(o.win);
    if (o.failed && tg_ok(ctx)) tg_error(ctx, TG_ERR_IO, fn, "%s", o.err);
    d->stats.calls++;
    d->stats.messages += 2 * o.nwin;
    const int64_t n32 = tg_dist_dtype_numel(d, nseg, TG_F32), n64 = tg_dist_dtype_numel(d, nseg, TG_F64);
    if (tg_ok(ctx)) d->stats.bytes += (double)(n32 * 4 + n64 * 8);
    /* the tail: every rank learns whether one failed during backward */
    const bool done = tg_dist_head(ctx, d, fn, true, 0, "", NULL, 0, NULL, NULL);
    d->stats.seconds += tg_dist_now() - t0;
    return done;
}

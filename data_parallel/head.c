/* The head exchange that begins every collective, and the collectives that
 * are nothing else: tg_dist_agree and tg_dist_same.
 *
 * Each rank contributes one record of a fixed size -- its status, a hash
 * of what it is about to do (the layout of the tensors, the bucket size,
 * or the bytes tg_dist_same compares) and up to TG_HEAD_BYTES of data --
 * and every rank receives all P (one MPI_Allgather). Since the size is
 * fixed, ranks whose layouts differ still match message for message; each
 * then sees every rank's status and hash, so all reach the same verdict:
 *   - a rank failed (ok false, or its context in error): the lowest such
 *     rank broadcasts its message (a second message, on failure only), and
 *     every other rank gets the error "rank R failed: MESSAGE";
 *   - the hashes differ: "WHAT differ between the ranks" everywhere;
 *   - else the collective goes on, none left waiting in a later message.
 * The data lets a small all-reduce (a loss, a few metrics) finish in this
 * one message: every rank folds the P records itself, in rank order
 * (data_parallel/collectives.c). */
#include "data_parallel/internal.h"

#include <stdio.h>
#include <string.h>

/* One rank's record: 16 bytes of header, then the data (8-aligned). */
typedef struct head {
    int32_t failed; /* 1: this rank failed */
    int32_t status; /* its context's status */
    uint64_t hash;
    unsigned char data[TG_HEAD_BYTES];
} head;
_Static_assert(sizeof(head) == TG_HEAD_RECORD, "TG_HEAD_RECORD is a head's size");

/* What a failed rank tells the others. */
typedef struct failure {
    int32_t status;
    char message[508];
} failure;

bool tg_dist_head(tg_ctx *ctx, tg_dist *d, const char *fn, bool ok, uint64_t hash, const char *what, const void *data,
                  size_t bytes, const unsigned char **records, size_t *stride) {
    tg_comm_begin(d->comm, fn);
    const bool failed = !ok || !tg_ok(ctx);
    char err[512];
    head mine;
    memset(&mine, 0, sizeof mine);
    mine.failed = failed;
    mine.status = ctx ? (int32_t)tg_status_of(ctx) : TG_ERR_NULL;
    mine.hash = hash;
    if (data && bytes <= sizeof mine.data) memcpy(mine.data, data, bytes);
    if (d->size > 1) d->stats.messages++;
    if (!tg_comm_allgather(d->comm, &mine, (int)sizeof mine, d->heads, err, sizeof err)) {
        tg_error(ctx, TG_ERR_IO, fn, "%s", err);
        return false;
    }
    const head *all = (const head *)d->heads;
    int root = -1;
    bool same = true;
    for (int q = 0; q < d->size; q++) {
        if (all[q].failed && root < 0) root = q;
        same = same && all[q].hash == all[0].hash;
    }
    if (root >= 0) {
        failure f;
        memset(&f, 0, sizeof f);
        if (root == d->rank) {
            f.status = mine.status;
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
    if (!same) {
        tg_error(ctx, TG_ERR_STATE, fn, "%s differ between the ranks", what);
        return false;
    }
    if (records) *records = all[0].data;
    if (stride) *stride = sizeof(head);
    return true;
}

bool tg_dist_agree(tg_ctx *ctx, tg_dist *d, bool ok) {
    if (!d) {
        tg_null_error(ctx, __func__, "d");
        return false;
    }
    return tg_dist_head(ctx, d, __func__, ok, 0, "", NULL, 0, NULL, NULL);
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
    uint64_t h = ok ? tg_fnv1a(TG_FNV_OFFSET, bytes, size) : 0;
    return tg_dist_head(ctx, d, __func__, ok, h, what ? what : "the values", NULL, 0, NULL, NULL);
}

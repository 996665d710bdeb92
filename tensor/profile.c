/* The per-op profile: where a training step's time goes, op by op.
 *
 * Ops are not timed one by one as they run (that would touch every op);
 * the tape's own events are timed instead. A record is made when its op's
 * forward has run, so the time from the previous event to a record is that
 * op's forward (plus whatever the caller did in between: little in a
 * training step); an op that records before it computes (the fused norms)
 * adds the rest at its end (tg_profile_forward_end). The backward walk times each record's backward. What
 * runs before the walk without a record, and what runs from the walk's end
 * to tg_ctx_reset (the optimizer, clipping, logging), goes to two rows of
 * its own. A clock read costs ~20 ns; with the profile off each hook is one
 * load and a branch. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "tensor/profile.h"

#include <string.h>
#include <time.h>

#define TG_PROFILE_MAX_OPS 128

typedef struct tg_profile_op {
    const char *op;
    double forward_s, backward_s;
    int64_t calls;
} tg_profile_op;

struct tg_profile {
    double last; /* the previous event's time */
    int64_t steps;
    int n_ops;
    tg_profile_op ops[TG_PROFILE_MAX_OPS]; /* the last one collects any op past the others */
};

static const char NO_RECORD_BEFORE[] = "(no record: before backward)";
static const char NO_RECORD_AFTER[] = "(no record: after backward)";
static const char OTHER_OPS[] = "(other ops)";

double tg_profile_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* op's row: found by pointer first (op names are string constants), then
 * by name; a new row while there is room, else the catch-all last one. */
static tg_profile_op *row_of(tg_profile *p, const char *op) {
    for (int i = 0; i < p->n_ops; i++)
        if (p->ops[i].op == op) return &p->ops[i];
    for (int i = 0; i < p->n_ops; i++)
        if (strcmp(p->ops[i].op, op) == 0) return &p->ops[i];
    if (p->n_ops == TG_PROFILE_MAX_OPS - 1) p->ops[p->n_ops++].op = OTHER_OPS;
    if (p->n_ops == TG_PROFILE_MAX_OPS) return &p->ops[TG_PROFILE_MAX_OPS - 1];
    p->ops[p->n_ops] = (tg_profile_op){.op = op};
    return &p->ops[p->n_ops++];
}

/* Adds the time since the previous event to op's forward; a new event now. */
static tg_profile_op *add_gap(tg_profile *p, const char *op) {
    double now = tg_profile_now();
    tg_profile_op *r = row_of(p, op);
    r->forward_s += now - p->last;
    p->last = now;
    return r;
}

void tg_profile_forward(tg_ctx *ctx, const char *op) {
    if (ctx->profile) add_gap(ctx->profile, op)->calls++;
}

void tg_profile_forward_end(tg_ctx *ctx, const char *op) {
    if (ctx->profile) add_gap(ctx->profile, op);
}

void tg_profile_walk_begin(tg_ctx *ctx) {
    if (ctx->profile) add_gap(ctx->profile, NO_RECORD_BEFORE);
}

void tg_profile_backward(tg_ctx *ctx, const char *op, double seconds) {
    if (ctx->profile) row_of(ctx->profile, op)->backward_s += seconds;
}

void tg_profile_walk_end(tg_ctx *ctx) {
    if (ctx->profile) ctx->profile->last = tg_profile_now();
}

void tg_profile_step(tg_ctx *ctx) {
    if (!ctx->profile) return;
    add_gap(ctx->profile, NO_RECORD_AFTER);
    ctx->profile->steps++;
}

void tg_profile_enable(tg_ctx *ctx, bool on) {
    if (!tg_ok(ctx)) return;
    if (!on) {
        tg_heap_free(ctx, ctx->profile);
        ctx->profile = NULL;
        return;
    }
    if (!ctx->profile) {
        ctx->profile = tg_heap_alloc(ctx, sizeof *ctx->profile);
        if (!ctx->profile) {
            tg_error(ctx, TG_ERR_OOM, __func__, "out of memory allocating the profile (%zu bytes)",
                     sizeof *ctx->profile);
            return;
        }
    }
    memset(ctx->profile, 0, sizeof *ctx->profile);
    ctx->profile->last = tg_profile_now();
}

static double total_of(const tg_profile_op *r) { return r->forward_s + r->backward_s; }

size_t tg_profile_rows(const tg_ctx *ctx, tg_profile_row *rows, size_t max, int64_t *steps) {
    const tg_profile *p = ctx ? ctx->profile : NULL;
    if (steps) *steps = p ? p->steps : 0;
    if (!p) return 0;
    size_t n = 0;
    for (int i = 0; i < p->n_ops && n < max; i++) {
        /* insertion sort by total time, most first */
        const tg_profile_op *r = &p->ops[i];
        size_t k = n++;
        while (k > 0 && rows[k - 1].forward_s + rows[k - 1].backward_s < total_of(r)) {
            rows[k] = rows[k - 1];
            k--;
        }
        rows[k] = (tg_profile_row){r->op, r->forward_s, r->backward_s, r->calls};
    }
    return n;
}

void tg_profile_print(FILE *f, const tg_ctx *ctx) {
    tg_profile_row rows[TG_PROFILE_MAX_OPS];
    int64_t steps = 0;
    size_t n = tg_profile_rows(ctx, rows, TG_PROFILE_MAX_OPS, &steps);
    if (!f) return;
    if (!n || steps < 1) {
        fprintf(f, "profile: no step profiled (tg_profile_enable, then steps ending in tg_ctx_reset)\n");
        return;
    }
    double total = 0;
    for (size_t i = 0; i < n; i++) total += rows[i].forward_s + rows[i].backward_s;
    fprintf(f, "%-30s %12s %12s %9s %7s\n", "op (per step)", "forward ms", "backward ms", "records", "share");
    for (size_t i = 0; i < n; i++) {
        const tg_profile_row *r = &rows[i];
        fprintf(f, "%-30s %12.3f %12.3f %9.1f %6.1f%%\n", r->op, 1e3 * r->forward_s / (double)steps,
                1e3 * r->backward_s / (double)steps, (double)r->calls / (double)steps,
                total > 0 ? 100 * (r->forward_s + r->backward_s) / total : 0.0);
    }
    fprintf(f, "%-30s %12.3f ms per step over %lld steps\n", "total", 1e3 * total / (double)steps, (long long)steps);
}

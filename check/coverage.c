/* Coverage: the regions of an op's input domain (from its entry's
 * `regions` text), which of them a check's inputs reached, and inputs
 * drawn across them (tapegrad/check.h).
 *
 * Why: a check sees f only at the points it draws. The registry draws
 * x in [-2, 2) for most ops, so a backward wrong only above x = 1.9 is
 * caught when some element lands there -- for 32 elements in about half
 * of the seeds -- and never above 2, at large or tiny magnitudes, or near
 * a branch of the formula. Drawing by region instead, stratified over the
 * seeds, makes every region's turn come, and the coverage says which ones
 * a check saw. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check/registry.h"
#include "tensor/internal.h"

static const char REGIONS_FN[] = "tg_registry_regions";

/* ---- the regions text ---------------------------------------------------------- */

/* Applies one word of an item ("kink=20", "mag=1e-3:10", "positive") to r.
 * False when it is not a word of the grammar. */
static bool apply_word(const char *w, size_t len, tg_regions *r) {
    char buf[64];
    if (len == 0 || len >= sizeof buf) return false;
    memcpy(buf, w, len);
    buf[len] = '\0';
    char *e;
    errno = 0;
    if (!strcmp(buf, "real")) r->positive = r->nonzero = false;
    else if (!strcmp(buf, "positive")) r->positive = true;
    else if (!strcmp(buf, "nonzero")) r->nonzero = true;
    else if (!strcmp(buf, "distinct")) r->distinct = true;
    else if (!strncmp(buf, "kink=", 5)) {
        double k = strtod(buf + 5, &e);
        if (e == buf + 5 || *e || errno || !isfinite(k) || r->n_kinks == TG_MAX_KINKS) return false;
        r->kinks[r->n_kinks++] = k;
    } else if (!strncmp(buf, "mag=", 4)) {
        double lo = strtod(buf + 4, &e), hi;
        if (e == buf + 4 || *e != ':') return false;
        const char *h = e + 1;
        hi = strtod(h, &e);
        if (e == h || *e || errno || !(lo > 0) || !(hi > lo) || !isfinite(hi)) return false;
        r->mag_lo = lo, r->mag_hi = hi;
    } else return false;
    return true;
}

/* Finds the item of `text` for input `name` (else the item "*") and
 * applies its words to r. False on a malformed item (any item: a typo in
 * another input's item is an error too). */
static bool parse_regions(const char *text, const char *name, tg_regions *r) {
    const char *mine = NULL, *star = NULL;
    for (const char *p = text; p && *p;) {
        const char *end = strchr(p, ';'), *colon = strchr(p, ':');
        if (!end) end = p + strlen(p);
        while (*p == ' ') p++;
        if (!colon || colon >= end || colon == p) return false;
        size_t nl = (size_t)(colon - p);
        while (nl && p[nl - 1] == ' ') nl--;
        if (nl == 1 && *p == '*') star = colon + 1;
        else if (strlen(name) == nl && !strncmp(p, name, nl)) mine = colon + 1;
        /* every word of every item must parse */
        tg_regions scratch = *r;
        for (const char *w = colon + 1; w < end;) {
            size_t sp = strspn(w, " "), len;
            w += sp;
            len = strcspn(w, " ;");
            if (w + len > end) len = (size_t)(end - w);
            if (len && !apply_word(w, len, &scratch)) return false;
            w += len;
        }
        p = *end ? end + 1 : end;
    }
    const char *use = mine ? mine : star;
    for (const char *w = use; w && *w && *w != ';';) {
        w += strspn(w, " ");
        size_t len = strcspn(w, " ;");
        if (len) apply_word(w, len, r);
        w += len;
    }
    return true;
}

static void add_region(tg_regions *r, double lo, double hi, int kink, const char *name) {
    if (r->n == TG_MAX_REGIONS) return;
    tg_region *g = &r->r[r->n++];
    g->lo = lo, g->hi = hi, g->kink = kink;
    snprintf(g->name, sizeof g->name, "%s", name);
}

/* The decades of [LO, HI) as regions of one sign, ascending in x. */
static void add_decades(tg_regions *r, int sign) {
    double edge[64];
    int n = 0;
    edge[n++] = r->mag_lo;
    while (n < 63 && edge[n - 1] < r->mag_hi * (1 - 1e-12)) {
        double b = pow(10.0, floor(log10(edge[n - 1]) + 1e-9) + 1);
        edge[n++] = b < r->mag_hi ? b : r->mag_hi;
    }
    char name[32];
    for (int i = 0; i + 1 < n; i++) {
        int j = sign > 0 ? i : n - 2 - i; /* ascending in x */
        double a = edge[j], b = edge[j + 1];
        if (sign > 0) snprintf(name, sizeof name, "[%g,%g)", a, b), add_region(r, a, b, -1, name);
        else snprintf(name, sizeof name, "(%g,%g]", -b, -a), add_region(r, -b, -a, -1, name);
    }
}

/* The regions of r's domain, magnitudes and kinks (tapegrad/check.h),
 * ascending in x, the kinks' last. */
static void make_regions(tg_regions *r) {
    char name[32];
    if (!r->positive) add_decades(r, -1);
    if (!r->positive && !r->nonzero)
        snprintf(name, sizeof name, "(%g,%g)", -r->mag_lo, r->mag_lo), add_region(r, -r->mag_lo, r->mag_lo, -1, name);
    add_decades(r, 1);
    for (int k = 0; k < r->n_kinks; k++) {
        double v = r->kinks[k], w = 0.1 * fmax(1.0, fabs(v));
        if (r->positive && v <= 0) continue;
        snprintf(name, sizeof name, "near %g-", v), add_region(r, v - w, v, k, name);
        snprintf(name, sizeof name, "near %g+", v), add_region(r, v, v + w, k, name);
    }
}

bool tg_registry_regions(tg_ctx *ctx, const tg_op_case *c, int k, tg_regions *out) {
    if (out) memset(out, 0, sizeof *out);
    if (!tg_ok(ctx)) return false;
    if (!c || !c->op || !out || k < 0 || k >= c->n_inputs || !c->input_names[k]) {
        tg_error(ctx, TG_ERR_VALUE, REGIONS_FN, "needs a built case and one of its inputs (k = %d)", k);
        return false;
    }
    out->mag_lo = 1e-3, out->mag_hi = 1e2;
    if (c->op->regions && !parse_regions(c->op->regions, c->input_names[k], out)) {
        tg_error(ctx, TG_ERR_FORMAT, REGIONS_FN,
                 "%s: its regions text '%s' is not 'NAME: WORD...; ...' with words real, positive, nonzero, "
                 "distinct, kink=V (at most %d), mag=LO:HI (0 < LO < HI)",
                 c->op->def->name, c->op->regions, TG_MAX_KINKS);
        return false;
    }
    make_regions(out);
    return true;
}

/* ---- what a check saw ------------------------------------------------------------ */

bool tg_coverage_of(tg_ctx *ctx, const tg_tensor *x, const tg_regions *regions, tg_coverage *cov) {
    if (!tg_check_ptr(ctx, __func__, "cov", cov) || !tg_check_arg_any(ctx, __func__, "x", x)) return false;
    memset(cov, 0, sizeof *cov);
    cov->min = INFINITY, cov->max = -INFINITY;
    cov->decade_min = INT32_MAX, cov->decade_max = INT32_MIN;
    cov->numel = x->numel;
    for (int64_t i = 0; i < x->numel; i++) {
        double v = tg_load(x, i);
        cov->min = fmin(cov->min, v), cov->max = fmax(cov->max, v);
        if (v < 0) cov->n_neg++;
        else if (v > 0) cov->n_pos++;
        else if (v == 0) cov->n_zero++;
        if (v != 0 && isfinite(v)) {
            int d = (int)floor(log10(fabs(v)));
            if (d < cov->decade_min) cov->decade_min = d;
            if (d > cov->decade_max) cov->decade_max = d;
        }
        for (int j = 0; regions && j < regions->n && j < 64; j++)
            if (v >= regions->r[j].lo && v < regions->r[j].hi) cov->seen |= (uint64_t)1 << j;
    }
    return true;
}

bool tg_coverage_join(tg_coverage *acc, const tg_coverage *c) {
    if (!acc || !c) return false;
    if (acc->numel == 0) {
        *acc = *c;
        return true;
    }
    acc->numel += c->numel;
    acc->n_neg += c->n_neg, acc->n_zero += c->n_zero, acc->n_pos += c->n_pos;
    acc->min = fmin(acc->min, c->min), acc->max = fmax(acc->max, c->max);
    if (c->decade_min < acc->decade_min) acc->decade_min = c->decade_min;
    if (c->decade_max > acc->decade_max) acc->decade_max = c->decade_max;
    acc->seen |= c->seen;
    return true;
}

/* ---- inputs across the regions ----------------------------------------------------- */

/* The j-th of m values in region g (not a near-kink one), at u in [0, 1)
 * of its range: log-uniform in its magnitudes, uniform across |x| < LO. */
static double value_in(const tg_region *g, double u) {
    if (g->lo < 0 && g->hi > 0) return g->lo + (g->hi - g->lo) * u;
    double a = fabs(g->lo), b = fabs(g->hi), m = fmin(a, b) * pow(fmax(a, b) / fmin(a, b), u);
    return g->hi <= 0 ? -m : m;
}

/* x's values, away from every kink by gap: a near-kink region's element
 * at k -+ gap (1 + 3u), any other within gap of a kink pushed out on its
 * side. */
static void place_kinks(tg_ctx *ctx, tg_tensor *x, const int *label, const double *u, const tg_regions *r, double gap) {
    for (int64_t i = 0; i < x->numel; i++) {
        const tg_region *g = &r->r[label[i]];
        double v = tg_load(x, i);
        if (g->kink >= 0) {
            double k = r->kinks[g->kink], d = gap * (1 + 3 * u[i]);
            v = g->hi <= k ? k - d : k + d;
        }
        for (int j = 0; j < r->n_kinks; j++) {
            double k = r->kinks[j];
            if (fabs(v - k) < gap)
                v = v < k ? k - gap * (1 + tg_rng_uniform(ctx)) : k + gap * (1 + tg_rng_uniform(ctx));
        }
        tg_store(x, i, v);
    }
}

static int cmp_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* distinct: the values (sorted, with their positions) at least 2 gap apart,
 * each moved up as little as needed (up keeps a positive domain). */
static bool spread(tg_ctx *ctx, tg_tensor *x, double gap) {
    int64_t n = x->numel;
    double(*vi)[2] = malloc((size_t)(n > 0 ? n : 1) * sizeof *vi);
    if (!vi) {
        tg_error(ctx, TG_ERR_OOM, "tg_registry_cover", "out of memory (%lld values)", (long long)n);
        return false;
    }
    for (int64_t i = 0; i < n; i++) vi[i][0] = tg_load(x, i), vi[i][1] = (double)i;
    qsort(vi, (size_t)n, sizeof *vi, cmp_value);
    for (int64_t i = 1; i < n; i++)
        if (vi[i][0] < vi[i - 1][0] + 2 * gap) vi[i][0] = vi[i - 1][0] + 2 * gap;
    for (int64_t i = 0; i < n; i++) tg_store(x, (int64_t)vi[i][1], vi[i][0]);
    free(vi);
    return true;
}

static double rms_of(const tg_tensor *x) {
    double s = 0;
    for (int64_t i = 0; i < x->numel; i++) s += tg_load(x, i) * tg_load(x, i);
    return x->numel ? sqrt(s / (double)x->numel) : 0;
}

/* Input k of c across its regions (tg_registry_cover). */
static bool cover_input(tg_ctx *ctx, tg_op_case *c, int k, uint64_t stratum, double gap_rel, double gap_abs) {
    tg_regions r;
    if (!tg_registry_regions(ctx, c, k, &r)) return false;
    tg_tensor *x = c->inputs[k];
    int64_t n = x->numel;
    if (n == 0 || r.n == 0) return true;
    double *u = malloc((size_t)n * sizeof *u);
    int *label = malloc((size_t)n * sizeof *label), *count = calloc((size_t)r.n, sizeof *count);
    double *offset = malloc((size_t)r.n * sizeof *offset);
    if (!label || !u || !count || !offset) {
        free(u), free(label), free(count), free(offset);
        tg_error(ctx, TG_ERR_OOM, "tg_registry_cover", "out of memory (%lld elements)", (long long)n);
        return false;
    }
    /* the regions in turn: the magnitudes from both ends inwards, so
     * neighbours in the turn are the two signs of one decade, then the
     * kinks' (below and above each) */
    int order[TG_MAX_REGIONS], m = 0;
    while (m < r.n && r.r[m].kink < 0) m++;
    for (int j = 0; j < r.n; j++) order[j] = j >= m ? j : j % 2 ? m - 1 - j / 2 : j / 2;
    uint64_t first = (stratum % (uint64_t)r.n) * ((uint64_t)n % (uint64_t)r.n);
    for (int64_t i = 0; i < n; i++) label[i] = order[(first + (uint64_t)i) % (uint64_t)r.n], count[label[i]]++;
    for (int64_t i = n - 1; i > 0; i--) { /* positions shuffled, the set kept */
        int64_t j = (int64_t)(tg_rng_uniform(ctx) * (double)(i + 1));
        if (j > i) j = i;
        int t = label[i];
        label[i] = label[j], label[j] = t;
    }
    /* the m elements of a region spaced evenly over its range, one random
     * offset (systematic sampling): any part of it wider than 1/m is hit */
    for (int j = 0; j < r.n; j++) offset[j] = tg_rng_uniform(ctx);
    int *seen = calloc((size_t)r.n, sizeof *seen);
    for (int64_t i = 0; seen && i < n; i++) { /* a near-kink value first halfway out: x's scale */
        const tg_region *g = &r.r[label[i]];
        u[i] = ((double)seen[label[i]]++ + offset[label[i]]) / (double)count[label[i]];
        tg_store(x, i, g->kink >= 0 ? (g->lo + g->hi) / 2 : value_in(g, u[i]));
    }
    bool ok = seen != NULL;
    free(seen), free(count), free(offset);
    if (ok) {
        /* the gap from the root mean square, which the near-kink values
         * then placed nearer do not raise (a kink at 20: by 5% at most) */
        double gap = fmax(gap_rel * rms_of(x), gap_abs);
        place_kinks(ctx, x, label, u, &r, gap);
        ok = !r.distinct || spread(ctx, x, gap);
    } else {
        tg_error(ctx, TG_ERR_OOM, "tg_registry_cover", "out of memory (%d regions)", r.n);
    }
    free(label), free(u);
    return ok;
}

bool tg_registry_cover(tg_ctx *ctx, tg_op_case *c, uint64_t stratum, double gap_rel, double gap_abs) {
    if (!tg_ok(ctx)) return false;
    if (!c || !c->op) {
        tg_error(ctx, TG_ERR_NULL, __func__, "argument 'c' is NULL or was not built");
        return false;
    }
    if (!(gap_rel >= 0) || !(gap_abs >= 0) || !isfinite(gap_rel) || !isfinite(gap_abs)) {
        tg_error(ctx, TG_ERR_VALUE, __func__, "%s: gap_rel %g and gap_abs %g must be finite and >= 0", c->op->def->name,
                 gap_rel, gap_abs);
        return false;
    }
    for (int k = 0; k < c->n_inputs; k++)
        if ((c->check >> k & 1u) && !cover_input(ctx, c, k, stratum, gap_rel, gap_abs)) return false;
    return true;
}

/* What a check's inputs covered: per input its least and greatest value,
 * how many elements were below, at and above 0, the decades of |x|, and
 * which of the op's regions (tg_registry_regions: signs, magnitudes, near
 * its kinks) some element reached -- joined over the seeds of a batch --
 * so a report says what it did not see ("x in [-1.98, 1.97]: never above
 * 2"). A table under check's; json.c writes the same as JSON.
 *
 * Layer: report (tool.h): calls the base. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/gradcheck/tool.h"

/* The row of (spec, name), appended when new; NULL when out of memory. */
static gct_cover_row *row_of(gct_cover *cv, const char *spec, const char *name, const tg_regions *regions) {
    gct_cover_row *found = (gct_cover_row *)gct_cover_find(cv, spec, name);
    if (found) return found;
    if (cv->n == cv->cap) {
        int cap = cv->cap ? 2 * cv->cap : 8;
        gct_cover_row *p = realloc(cv->rows, (size_t)cap * sizeof *p);
        if (!p) return NULL;
        cv->rows = p, cv->cap = cap;
    }
    gct_cover_row *r = &cv->rows[cv->n++];
    memset(r, 0, sizeof *r);
    snprintf(r->spec, sizeof r->spec, "%s", spec);
    snprintf(r->name, sizeof r->name, "%s", name);
    r->regions = *regions;
    return r;
}

void gct_cover_add(gct_cover *cv, const gct_target *t) {
    for (int k = 0; k < t->c.n_inputs; k++) {
        if (!(t->c.check >> k & 1u)) continue;
        gct_cover_row *r = row_of(cv, t->c.spec, t->c.input_names[k], &t->regions[k]);
        if (!r) return;
        tg_coverage_join(&r->cov, &t->cov[k]);
        r->runs++;
    }
}

const gct_cover_row *gct_cover_find(const gct_cover *cv, const char *spec, const char *name) {
    for (int i = 0; i < cv->n; i++)
        if (!strcmp(cv->rows[i].spec, spec) && !strcmp(cv->rows[i].name, name)) return &cv->rows[i];
    return NULL;
}

void gct_cover_free(gct_cover *cv) {
    free(cv->rows);
    memset(cv, 0, sizeof *cv);
}

static int n_seen(const gct_cover_row *r) {
    int n = 0;
    for (int j = 0; j < r->regions.n; j++) n += (int)(r->cov.seen >> j & 1u);
    return n;
}

/* The names of the regions not seen, joined by spaces, cut with "..."
 * when they do not fit. */
static void not_seen_text(char *buf, size_t size, const gct_cover_row *r) {
    size_t n = 0;
    buf[0] = '\0';
    for (int j = 0; j < r->regions.n; j++) {
        if (r->cov.seen >> j & 1u) continue;
        const char *name = r->regions.r[j].name;
        if (n + strlen(name) + 5 >= size) {
            snprintf(buf + n, size - n, "%s...", n ? " " : "");
            return;
        }
        n += (size_t)snprintf(buf + n, size - n, "%s%s", n ? " " : "", name);
    }
    if (!n) snprintf(buf, size, "-");
}

/* "1e-3..1e1": the decades of |x| seen (|x| in [1e-3, 1e2)); "-" when none. */
static void decades_text(gct_cell *c, const tg_coverage *cov) {
    if (cov->decade_min > cov->decade_max) gct_cell_set(c, GCT_DIM, "-");
    else gct_cell_set(c, GCT_PLAIN, "1e%d..1e%d", cov->decade_min, cov->decade_max + 1);
}

void gct_cover_print(FILE *out, const gct_cover *cv, const gct_args *a, int indent) {
    if (!cv->n) return;
    gct_table t;
    gct_table_init(&t, "llrrrrrrlrl", "spec", "input", "min", "max", "< 0", "= 0", "> 0", "elements", "|x| in",
                   "regions", "not seen");
    for (int i = 0; i < cv->n; i++) {
        const gct_cover_row *r = &cv->rows[i];
        gct_cell *row = gct_table_row(&t);
        if (!row) break;
        bool first = i == 0 || strcmp(r->spec, cv->rows[i - 1].spec);
        gct_cell_set(&row[0], GCT_PLAIN, "%s", first ? r->spec : "");
        /* "x:", not "x": a reader of the check's rows by their columns
         * (spec, input, ...) must not take these for them */
        gct_cell_set(&row[1], GCT_PLAIN, "%s:", r->name);
        gct_cell_set(&row[2], GCT_PLAIN, "%.6g", r->cov.min);
        gct_cell_set(&row[3], GCT_PLAIN, "%.6g", r->cov.max);
        gct_cell_set(&row[4], GCT_PLAIN, "%lld", (long long)r->cov.n_neg);
        gct_cell_set(&row[5], GCT_PLAIN, "%lld", (long long)r->cov.n_zero);
        gct_cell_set(&row[6], GCT_PLAIN, "%lld", (long long)r->cov.n_pos);
        gct_cell_set(&row[7], GCT_PLAIN, "%lld", (long long)r->cov.numel);
        decades_text(&row[8], &r->cov);
        int seen = n_seen(r);
        gct_cell_set(&row[9], seen < r->regions.n ? GCT_BOLD : GCT_GOOD, "%d/%d", seen, r->regions.n);
        not_seen_text(row[10].text, sizeof row[10].text, r);
        row[10].tone = GCT_DIM;
    }
    fprintf(out, "\n%*sinputs seen (%s; over %s): regions of the op's domain reached\n", indent, "",
            a->cover ? "--cover: drawn across the regions" : "drawn as `list` shows",
            gct_seed_count(a) > 1 ? "every seed" : "the seed");
    gct_table_print(out, &t, indent, a->color);
    gct_table_free(&t);
}

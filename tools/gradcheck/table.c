/* Aligned text tables and small helpers for tapegrad-gradcheck: tones,
 * shape and index text, directories, files, the clock.
 *
 * Layer: base (tool.h): calls nothing of the tool. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "tools/gradcheck/tool.h"

void gct_table_init(gct_table *t, const char *align, ...) {
    memset(t, 0, sizeof *t);
    t->ncols = (int)strlen(align);
    if (t->ncols > GCT_MAX_COLS) t->ncols = GCT_MAX_COLS;
    va_list ap;
    va_start(ap, align);
    for (int j = 0; j < t->ncols; j++) {
        const char *h = va_arg(ap, const char *);
        snprintf(t->head[j], sizeof t->head[j], "%s", h ? h : "");
        t->align[j] = align[j];
    }
    va_end(ap);
}

gct_cell *gct_table_row(gct_table *t) {
    if (t->nrows == t->cap) {
        int cap = t->cap ? 2 * t->cap : 32;
        gct_cell *cells = realloc(t->cells, (size_t)cap * (size_t)t->ncols * sizeof *cells);
        if (!cells) return NULL;
        t->cells = cells;
        int *rb = realloc(t->rule_before, (size_t)cap * sizeof *rb);
        if (!rb) return NULL;
        t->rule_before = rb;
        t->cap = cap;
    }
    gct_cell *row = t->cells + (size_t)t->nrows * (size_t)t->ncols;
    memset(row, 0, (size_t)t->ncols * sizeof *row);
    t->rule_before[t->nrows] = 0;
    t->nrows++;
    return row;
}

void gct_table_group(gct_table *t) {
    if (t->nrows > 1) t->rule_before[t->nrows - 1] = 1;
}

void gct_cell_set(gct_cell *c, gct_tone tone, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->text, sizeof c->text, fmt, ap);
    va_end(ap);
    c->tone = tone;
}

void gct_puts_tone(FILE *out, const char *s, gct_tone tone, bool color) {
    static const char *const esc[] = {"", "\033[32m", "\033[1;31m", "\033[2m", "\033[1m"};
    if (!color || tone == GCT_PLAIN) {
        fputs(s, out);
        return;
    }
    fprintf(out, "%s%s\033[0m", esc[tone], s);
}

/* Display width of UTF-8 text: code points, not bytes. */
static int text_width(const char *s) {
    int w = 0;
    for (; *s; s++)
        if (((unsigned char)*s & 0xC0) != 0x80) w++;
    return w;
}

/* A cell padded to `width`; the last cell of a line loses its trailing
 * blanks (no trailing whitespace in pasted output). */
static void put_cell(FILE *out, const char *s, gct_tone tone, int width, char align, bool last, bool color) {
    int pad = width - text_width(s);
    if (pad < 0) pad = 0;
    if (align == 'r') fprintf(out, "%*s", pad, "");
    char buf[GCT_CELL];
    snprintf(buf, sizeof buf, "%s", s);
    for (size_t n = strlen(buf); last && n > 0 && buf[n - 1] == ' '; n--) buf[n - 1] = '\0';
    gct_puts_tone(out, buf, tone, color);
    if (align != 'r' && !last) fprintf(out, "%*s", pad, "");
}

void gct_table_print(FILE *out, const gct_table *t, int indent, bool color) {
    int width[GCT_MAX_COLS];
    for (int j = 0; j < t->ncols; j++) {
        width[j] = text_width(t->head[j]);
        for (int i = 0; i < t->nrows; i++) {
            int w = text_width(t->cells[(size_t)i * (size_t)t->ncols + (size_t)j].text);
            if (w > width[j]) width[j] = w;
        }
    }
    fprintf(out, "%*s", indent, "");
    for (int j = 0; j < t->ncols; j++) {
        if (j) fputs("  ", out);
        put_cell(out, t->head[j], GCT_BOLD, width[j], t->align[j], j == t->ncols - 1, color);
    }
    fputc('\n', out);
    fprintf(out, "%*s", indent, "");
    for (int j = 0; j < t->ncols; j++) {
        if (j) fputs("  ", out);
        for (int k = 0; k < width[j]; k++) fputc('-', out);
    }
    fputc('\n', out);
    for (int i = 0; i < t->nrows; i++) {
        if (t->rule_before[i]) fputc('\n', out);
        const gct_cell *row = t->cells + (size_t)i * (size_t)t->ncols;
        fprintf(out, "%*s", indent, "");
        for (int j = 0; j < t->ncols; j++) {
            if (j) fputs("  ", out);
            put_cell(out, row[j].text, row[j].tone, width[j], t->align[j], j == t->ncols - 1, color);
        }
        fputc('\n', out);
    }
}

void gct_table_free(gct_table *t) {
    free(t->cells);
    free(t->rule_before);
    t->cells = NULL;
    t->rule_before = NULL;
    t->nrows = t->cap = 0;
}

char *gct_shape_text(char *buf, size_t size, int ndim, const int64_t *shape) {
    if (ndim == 0) {
        snprintf(buf, size, "()");
        return buf;
    }
    size_t n = 0;
    buf[0] = '\0';
    for (int d = 0; d < ndim && n < size; d++)
        n += (size_t)snprintf(buf + n, size - n, "%s%lld", d ? "x" : "", (long long)shape[d]);
    return buf;
}

char *gct_index_text(char *buf, size_t size, int ndim, const int64_t *shape, int64_t i) {
    int64_t idx[TG_MAX_DIMS];
    for (int d = ndim - 1; d >= 0; d--) {
        int64_t s = shape[d] > 0 ? shape[d] : 1;
        idx[d] = i % s;
        i /= s;
    }
    size_t n = (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < ndim && n < size; d++)
        n += (size_t)snprintf(buf + n, size - n, "%s%lld", d ? "," : "", (long long)idx[d]);
    if (n < size) snprintf(buf + n, size - n, "]");
    return buf;
}

bool gct_mkdir_p(const char *dir) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path) {
        fprintf(stderr, "tapegrad-gradcheck: output directory name too long: %s\n", dir);
        return false;
    }
    for (char *p = path + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char c = *p;
            *p = '\0';
            if (mkdir(path, 0777) != 0 && errno != EEXIST) {
                fprintf(stderr, "tapegrad-gradcheck: cannot create directory %s: %s\n", path, strerror(errno));
                return false;
            }
            *p = c;
            if (c == '\0') break;
        }
    }
    return true;
}

bool gct_fclose(FILE *f) {
    bool ok = !ferror(f);
    return fclose(f) == 0 && ok;
}

double gct_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

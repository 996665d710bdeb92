/* Printing tensors the way PyTorch does (torch/_tensor_str.py):
 *
 *   tensor([[0.1000, 0.2000],
 *           [0.3000, 0.4000]], dtype=float32)
 *
 * One formatter is chosen for the whole tensor from the values shown:
 *  - all integral: "1.", "-2." (scientific when the largest is > 1e8 or
 *    max/min of the nonzero magnitudes exceeds 1000);
 *  - otherwise fixed "%.4f", or "%.4e" when max/min of the nonzero
 *    magnitudes exceeds 1000, the largest exceeds 1e8 or the smallest is
 *    below 1e-4;
 * every value right-aligned to the widest. Rows wrap at 80 columns. With
 * more than 1000 elements only 3 items per edge of each dim are shown, with
 * "..." between them. nan, inf and -inf print as such. */
#include "tensor/internal.h"
#include "tensor/text.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PRINT_THRESHOLD 1000
#define EDGE_ITEMS 3
#define LINE_WIDTH 80

static void put_spaces(tg_text *s, int n) {
    for (int i = 0; i < n; i++) tg_text_put(s, " ");
}

typedef struct formatter {
    int mode; /* 0 int, 1 fixed, 2 scientific */
    int width;
} formatter;

static int format_value(char *out, size_t size, double v, int mode) {
    if (isnan(v)) return snprintf(out, size, "nan");
    if (isinf(v)) return snprintf(out, size, v > 0 ? "inf" : "-inf");
    switch (mode) {
    case 0: return snprintf(out, size, "%.0f.", v);
    case 1: return snprintf(out, size, "%.4f", v);
    default: return snprintf(out, size, "%.4e", v);
    }
}

/* Is flat index i shown when summarizing? Checks each dim's coordinate. */
static bool shown(const tg_tensor *t, int64_t i, bool summarize) {
    if (!summarize) return true;
    for (int d = t->ndim - 1; d >= 0; d--) {
        int64_t n = t->shape[d];
        int64_t c = i % n;
        i /= n;
        if (n > 2 * EDGE_ITEMS && c >= EDGE_ITEMS && c < n - EDGE_ITEMS) return false;
    }
    return true;
}

static formatter make_formatter(const tg_tensor *t, bool summarize) {
    formatter f = {0, 1};
    bool all_int = true, any = false;
    double amax = 0, amin = INFINITY;
    for (int64_t i = 0; i < t->numel; i++) {
        if (!shown(t, i, summarize)) continue;
        double v = tg_load(t, i);
        if (!isfinite(v)) continue;
        any = true;
        if (v != floor(v)) all_int = false;
        double a = fabs(v);
        if (a > 0) {
            if (a > amax) amax = a;
            if (a < amin) amin = a;
        }
    }
    if (!any || all_int) {
        f.mode = (any && amax > 0 && (amax / amin > 1000.0 || amax > 1e8)) ? 2 : 0;
    } else {
        f.mode = 1;
        if (amax > 0 && (amax / amin > 1000.0 || amax > 1e8 || amin < 1e-4)) f.mode = 2;
    }
    char tmp[64];
    for (int64_t i = 0; i < t->numel; i++) {
        if (!shown(t, i, summarize)) continue;
        int w = format_value(tmp, sizeof tmp, tg_load(t, i), f.mode);
        if (w > f.width) f.width = w;
    }
    return f;
}

static void put_value(tg_text *s, const formatter *f, double v) {
    char tmp[64];
    int w = format_value(tmp, sizeof tmp, v, f->mode);
    put_spaces(s, f->width - w);
    tg_text_put(s, tmp);
}

/* Prints the sub-tensor of dims [dim, ndim) starting at flat offset `base`,
 * `indent` columns from the left margin. */
static void put_block(tg_text *s, const tg_tensor *t, int dim, int64_t base, int indent, bool summarize,
                      const formatter *f) {
    int64_t n = t->shape[dim];
    int64_t stride = 1;
    for (int d = dim + 1; d < t->ndim; d++) stride *= t->shape[d];
    bool cut = summarize && n > 2 * EDGE_ITEMS;
    tg_text_put(s, "[");
    if (dim == t->ndim - 1) {
        int per_line = (LINE_WIDTH - indent) / (f->width + 2);
        if (per_line < 1) per_line = 1;
        int on_line = 0;
        for (int64_t i = 0; i < n; i++) {
            if (cut && i == EDGE_ITEMS) {
                tg_text_put(s, on_line ? ",  ..." : " ...");
                on_line++;
                i = n - EDGE_ITEMS - 1;
                continue;
            }
            if (i > 0) {
                if (on_line >= per_line) {
                    tg_text_put(s, ",\n");
                    put_spaces(s, indent + 1);
                    on_line = 0;
                } else {
                    tg_text_put(s, ", ");
                }
            }
            put_value(s, f, tg_load(t, base + i * stride));
            on_line++;
        }
    } else {
        int newlines = t->ndim - dim - 1;
        for (int64_t i = 0; i < n; i++) {
            if (i > 0) {
                tg_text_put(s, ",");
                for (int k = 0; k < newlines; k++) tg_text_put(s, "\n");
                put_spaces(s, indent + 1);
            }
            if (cut && i == EDGE_ITEMS) {
                tg_text_put(s, "...");
                i = n - EDGE_ITEMS - 1;
                continue;
            }
            put_block(s, t, dim + 1, base + i * stride, indent + 1, summarize, f);
        }
    }
    tg_text_put(s, "]");
}

size_t tg_format(char *buf, size_t size, const tg_tensor *t) {
    tg_text s = tg_text_buf(buf, size);
    if (!t) {
        tg_text_put(&s, "tensor(NULL)");
    } else {
        bool summarize = t->numel > PRINT_THRESHOLD;
        formatter f = make_formatter(t, summarize);
        tg_text_put(&s, "tensor(");
        if (t->numel == 0) {
            tg_text_put(&s, "[]");
            if (t->ndim != 1) {
                char sh[TG_SHAPE_STR];
                tg_text_put(&s, ", size=");
                tg_text_put(&s, tg_shape_of(sh, t));
            }
        } else if (t->ndim == 0) {
            f.width = 0;
            put_value(&s, &f, tg_load(t, 0));
        } else {
            put_block(&s, t, 0, 0, 7, summarize, &f);
        }
        tg_text_put(&s, ", dtype=");
        tg_text_put(&s, tg_dtype_name(t->dtype));
        tg_text_put(&s, ")");
    }
    return s.len;
}

void tg_print(FILE *out, const tg_tensor *t) {
    if (!out) return;
    char small[1024];
    size_t n = tg_format(small, sizeof small, t);
    if (n < sizeof small) {
        fprintf(out, "%s\n", small);
        return;
    }
    /* Large text: format into a heap buffer of the exact size. */
    char *big = malloc(n + 1);
    if (!big) {
        fprintf(out, "%s...\n", small);
        return;
    }
    tg_format(big, n + 1, t);
    fprintf(out, "%s\n", big);
    free(big);
}

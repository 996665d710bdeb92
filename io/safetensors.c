/* The safetensors format: parse + validate, write, and load into named
 * tensors. The rules a file must follow are listed in io/safetensors.h.
 *
 * Loading is two-phase so a bad file never half-loads a model:
 *   1. validate: parse the header, check every tensor's dtype, shape and
 *      offsets against the data section, then match every tensor to the
 *      model's lists by name, dtype and shape, and copy the metadata;
 *   2. write: only then copy each tensor's bytes into the model.
 * Phase 2 cannot fail. The file's bytes (the caller's buffer) are the
 * staging area, so nothing is read from disk after phase 1 starts. */
#include "io/safetensors.h"
#include "tensor/internal.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- bytes ------------------------------------------------------------------ */

uint64_t tg_st_le64(const void *p) {
    const unsigned char *b = p;
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | b[i];
    return v;
}

void tg_st_put_le64(void *p, uint64_t v) {
    unsigned char *b = p;
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (8 * i));
}

static bool host_is_le(void) {
    const uint16_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

/* Copies n bytes of elements of esize bytes from src to dst, reversing each
 * element's bytes when `swap` (little-endian <-> big-endian host). */
static void copy_elements(void *dst, const void *src, size_t n, size_t esize, bool swap) {
    if (n == 0) return;
    if (!swap) {
        memcpy(dst, src, n);
        return;
    }
    unsigned char *d = dst;
    const unsigned char *s = src;
    for (size_t i = 0; i < n; i += esize)
        for (size_t k = 0; k < esize; k++) d[i + k] = s[i + esize - 1 - k];
}

/* ---- errors ----------------------------------------------------------------- */

static bool st_fail(tg_st_error *err, tg_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static bool st_fail(tg_st_error *err, tg_status status, const char *fmt, ...) {
    err->status = status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return false;
}

/* A tensor name quoted for a message (escaped, cut to fit). */
typedef struct qname {
    char s[72];
} qname;
static qname quote(const char *s, size_t n) {
    qname q = {""};
    tg_json_quote(q.s, sizeof q.s, s, n);
    return q;
}

/* ---- dtypes ----------------------------------------------------------------- */

/* The format's names of tapegrad's dtypes, indexed by tg_dtype. */
static const char *const st_dtype_names[] = {[TG_F32] = "F32", [TG_F64] = "F64", [TG_BF16] = "BF16", [TG_F16] = "F16"};
static const char *st_dtype_name(tg_dtype d) { return st_dtype_names[d]; }

/* The dtypes safetensors defines that tapegrad does not read. */
static const char *const st_other_dtypes[] = {"BOOL", "U8",  "I8",  "F8_E5M2", "F8_E4M3", "I16", "U16",
                                              "I32",  "U32", "I64", "U64",     "F8_E8M0", "F4"};

static bool str_is(const tg_json *v, const char *s) {
    size_t n = strlen(s);
    return v->len == n && memcmp(v->str, s, n) == 0;
}

static bool key_is(const tg_json *v, const char *s) {
    size_t n = strlen(s);
    return v->key_len == n && memcmp(v->key, s, n) == 0;
}

/* ---- parse and validate ----------------------------------------------------- */

static bool parse_meta(tg_st_file *f, const tg_json *m, tg_st_error *err) {
    if (m->kind != TG_JSON_OBJECT) return st_fail(err, TG_ERR_FORMAT, "\"__metadata__\" is not an object of strings");
    for (const tg_json *c = m->first; c; c = c->next) {
        qname k = quote(c->key, c->key_len);
        if (c->kind != TG_JSON_STRING)
            return st_fail(err, TG_ERR_FORMAT, "metadata \"%s\": the value is not a string", k.s);
        if (strlen(c->key) != c->key_len)
            return st_fail(err, TG_ERR_FORMAT, "metadata key \"%s\" contains a NUL character", k.s);
        if (strlen(c->str) != c->len)
            return st_fail(err, TG_ERR_FORMAT, "metadata \"%s\": the value contains a NUL character", k.s);
        f->meta[f->meta_count].key = c->key;
        f->meta[f->meta_count].value = c->str;
        f->meta_count++;
    }
    return true;
}

static bool parse_dtype(tg_st_tensor *t, const tg_json *v, const char *name, tg_st_error *err) {
    if (v->kind != TG_JSON_STRING) return st_fail(err, TG_ERR_FORMAT, "tensor \"%s\": \"dtype\" is not a string", name);
    for (int d = 0; d < (int)(sizeof st_dtype_names / sizeof *st_dtype_names); d++)
        if (str_is(v, st_dtype_names[d])) {
            t->dtype = (tg_dtype)d;
            return true;
        }
    qname d = quote(v->str, v->len);
    for (size_t i = 0; i < sizeof st_other_dtypes / sizeof *st_other_dtypes; i++)
        if (str_is(v, st_other_dtypes[i]))
            return st_fail(err, TG_ERR_FORMAT,
                           "tensor \"%s\": unsupported dtype \"%s\" (tapegrad reads F32, F64, BF16 and F16)", name,
                           d.s);
    return st_fail(err, TG_ERR_FORMAT, "tensor \"%s\": unknown dtype \"%s\"", name, d.s);
}

static bool parse_shape(tg_st_tensor *t, const tg_json *v, const char *name, tg_st_error *err) {
    if (v->kind != TG_JSON_ARRAY) return st_fail(err, TG_ERR_FORMAT, "tensor \"%s\": \"shape\" is not an array", name);
    if (v->count > TG_MAX_DIMS)
        return st_fail(err, TG_ERR_FORMAT, "tensor \"%s\": shape has %zu dims, at most %d are supported", name,
                       v->count, TG_MAX_DIMS);
    int i = 0;
    for (const tg_json *c = v->first; c; c = c->next, i++) {
        if (c->kind != TG_JSON_NUMBER || !c->is_u64 || c->u64 > (uint64_t)INT64_MAX)
            return st_fail(err, TG_ERR_FORMAT, "tensor \"%s\": shape entry %d is not an integer in [0, 2^63)", name, i);
        t->shape[i] = (int64_t)c->u64;
    }
    t->ndim = i;
    for (int k = i; k < TG_MAX_DIMS; k++) t->shape[k] = 1;
    return true;
}

static bool parse_offsets(tg_st_tensor *t, const tg_json *v, const char *name, tg_st_error *err) {
    const tg_json *b = v->kind == TG_JSON_ARRAY && v->count == 2 ? v->first : NULL;
    const tg_json *e = b ? b->next : NULL;
    if (!b || b->kind != TG_JSON_NUMBER || !b->is_u64 || e->kind != TG_JSON_NUMBER || !e->is_u64)
        return st_fail(err, TG_ERR_FORMAT,
                       "tensor \"%s\": \"data_offsets\" is not two non-negative integers [begin, end]", name);
    t->begin = b->u64;
    t->end = e->u64;
    return true;
}

/* numel x esize of a shape, or false when it overflows 64 bits. */
static bool shape_bytes(int ndim, const int64_t *shape, size_t esize, uint64_t *nbytes) {
    uint64_t n = esize;
    for (int i = 0; i < ndim; i++) {
        uint64_t s = (uint64_t)shape[i];
        if (s != 0 && n > UINT64_MAX / s) return false;
        n *= s;
    }
    *nbytes = n;
    return true;
}

static bool parse_tensor(tg_st_tensor *t, const tg_json *m, tg_st_error *err) {
    qname q = quote(m->key, m->key_len);
    t->name = m->key;
    t->name_len = m->key_len;
    if (m->kind != TG_JSON_OBJECT)
        return st_fail(err, TG_ERR_FORMAT,
                       "tensor \"%s\": not an object with \"dtype\", \"shape\" and \"data_offsets\"", q.s);
    const tg_json *dtype = NULL, *shape = NULL, *offsets = NULL;
    for (const tg_json *c = m->first; c; c = c->next) {
        if (key_is(c, "dtype")) dtype = c;
        else if (key_is(c, "shape")) shape = c;
        else if (key_is(c, "data_offsets")) offsets = c;
        else {
            qname k = quote(c->key, c->key_len);
            return st_fail(err, TG_ERR_FORMAT, "tensor \"%s\": unexpected field \"%s\"", q.s, k.s);
        }
    }
    const char *missing = !dtype ? "dtype" : !shape ? "shape" : !offsets ? "data_offsets" : NULL;
    if (missing) return st_fail(err, TG_ERR_FORMAT, "tensor \"%s\": missing \"%s\"", q.s, missing);
    if (!parse_dtype(t, dtype, q.s, err) || !parse_shape(t, shape, q.s, err) || !parse_offsets(t, offsets, q.s, err))
        return false;
    char sh[160];
    tg_shape_str(sh, sizeof sh, t->ndim, t->shape);
    if (!shape_bytes(t->ndim, t->shape, tg_dtype_size(t->dtype), &t->nbytes))
        return st_fail(err, TG_ERR_FORMAT, "tensor \"%s\": shape %s of %s overflows 64 bits", q.s, sh,
                       st_dtype_name(t->dtype));
    if (t->begin > t->end)
        return st_fail(err, TG_ERR_FORMAT,
                       "tensor \"%s\": data_offsets [%" PRIu64 ", %" PRIu64 "] end before they begin", q.s, t->begin,
                       t->end);
    if (t->end - t->begin != t->nbytes)
        return st_fail(err, TG_ERR_FORMAT,
                       "tensor \"%s\": shape %s of %s is %" PRIu64 " bytes but data_offsets [%" PRIu64 ", %" PRIu64
                       "] span %" PRIu64,
                       q.s, sh, st_dtype_name(t->dtype), t->nbytes, t->begin, t->end, t->end - t->begin);
    return true;
}

static int cmp_by_offsets(const void *a, const void *b) {
    const tg_st_tensor *x = *(const tg_st_tensor *const *)a;
    const tg_st_tensor *y = *(const tg_st_tensor *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return (x > y) - (x < y); /* header order: a total order for qsort */
}

/* The tensors must tile [0, data_len) exactly. */
static bool check_layout(const tg_st_file *f, tg_st_error *err) {
    for (size_t i = 0; i < f->count; i++) {
        const tg_st_tensor *t = &f->tensors[i];
        if (t->end > f->data_len) {
            qname q = quote(t->name, t->name_len);
            return st_fail(err, TG_ERR_FORMAT,
                           "tensor \"%s\": data_offsets [%" PRIu64 ", %" PRIu64
                           "] are out of range: the data section has %" PRIu64 " bytes (a truncated file?)",
                           q.s, t->begin, t->end, f->data_len);
        }
    }
    const tg_st_tensor **order = tg_io_calloc(&f->alloc, f->count ? f->count : 1, sizeof *order);
    if (!order) return st_fail(err, TG_ERR_OOM, "out of memory");
    for (size_t i = 0; i < f->count; i++) order[i] = &f->tensors[i];
    qsort(order, f->count, sizeof *order, cmp_by_offsets);
    uint64_t expected = 0;
    const tg_st_tensor *prev = NULL;
    bool ok = true;
    for (size_t i = 0; i < f->count && ok; i++) {
        const tg_st_tensor *t = order[i];
        qname q = {""};
        if (t->begin != expected) q = quote(t->name, t->name_len);
        if (t->begin < expected) {
            qname p = quote(prev->name, prev->name_len);
            ok = st_fail(err, TG_ERR_FORMAT,
                         "tensor \"%s\": data_offsets [%" PRIu64 ", %" PRIu64 "] overlap tensor \"%s\" [%" PRIu64
                         ", %" PRIu64 "]",
                         q.s, t->begin, t->end, p.s, prev->begin, prev->end);
        } else if (t->begin > expected) {
            ok = st_fail(err, TG_ERR_FORMAT,
                         "tensor \"%s\": data_offsets [%" PRIu64 ", %" PRIu64 "] leave a gap of %" PRIu64
                         " bytes after offset %" PRIu64,
                         q.s, t->begin, t->end, t->begin - expected, expected);
        }
        expected = t->end;
        prev = t;
    }
    tg_io_free(&f->alloc, order);
    if (ok && expected != f->data_len)
        ok = st_fail(err, TG_ERR_FORMAT,
                     "%" PRIu64 " bytes of data after the last tensor (the tensors end at offset %" PRIu64
                     " of a %" PRIu64 "-byte data section)",
                     f->data_len - expected, expected, f->data_len);
    return ok;
}

bool tg_st_parse_with(tg_st_file *f, const tg_allocator *alloc, const void *buf, size_t len, tg_st_error *err) {
    memset(f, 0, sizeof *f);
    if (alloc) f->alloc = *alloc;
    err->status = TG_OK;
    err->msg[0] = '\0';
    if (!buf && len > 0) return st_fail(err, TG_ERR_NULL, "no buffer");
    if (len < 8)
        return st_fail(err, TG_ERR_FORMAT, "truncated file: %zu bytes, fewer than the 8 of the header length", len);
    uint64_t n = tg_st_le64(buf);
    uint64_t after = (uint64_t)len - 8;
    if (n > after)
        return st_fail(err, TG_ERR_FORMAT,
                       "header length %" PRIu64 " goes beyond the end of the file (%" PRIu64
                       " bytes follow the length field): truncated or not a safetensors file",
                       n, after);
    if (n > TG_ST_MAX_HEADER)
        return st_fail(err, TG_ERR_FORMAT, "header length %" PRIu64 " is over the limit of %u bytes", n,
                       TG_ST_MAX_HEADER);
    const char *text = (const char *)buf + 8;
    tg_json_error je;
    f->doc = tg_json_parse_with(&f->alloc, text, (size_t)n, TG_ST_MAX_DEPTH, &je);
    if (!f->doc)
        return st_fail(err, je.oom ? TG_ERR_OOM : TG_ERR_FORMAT,
                       "invalid JSON header at byte %zu (file offset %zu): %s", je.offset, je.offset + 8, je.msg);
    f->header_len = n;
    f->data = (const uint8_t *)buf + 8 + n;
    f->data_len = after - n;
    const tg_json *root = tg_json_root(f->doc);
    bool ok = true;
    if (root->kind != TG_JSON_OBJECT) {
        ok = st_fail(err, TG_ERR_FORMAT, "the header is not a JSON object");
    } else {
        size_t cap = root->count ? root->count : 1;
        f->tensors = tg_io_calloc(&f->alloc, cap, sizeof *f->tensors);
        const tg_json *meta = tg_json_get(root, "__metadata__");
        f->meta = tg_io_calloc(&f->alloc, meta && meta->count ? meta->count : 1, sizeof *f->meta);
        if (!f->tensors || !f->meta) ok = st_fail(err, TG_ERR_OOM, "out of memory");
        for (const tg_json *m = root->first; m && ok; m = m->next) {
            if (m == meta) ok = parse_meta(f, m, err);
            else ok = parse_tensor(&f->tensors[f->count++], m, err);
        }
        if (ok) ok = check_layout(f, err);
        for (size_t i = 0; ok && i < f->count; i++) f->tensors[i].data = f->data + f->tensors[i].begin;
    }
    if (!ok) tg_st_file_free(f);
    return ok;
}

bool tg_st_parse(tg_st_file *f, const void *buf, size_t len, tg_st_error *err) {
    return tg_st_parse_with(f, NULL, buf, len, err);
}

void tg_st_file_free(tg_st_file *f) {
    if (!f) return;
    tg_json_free(f->doc);
    tg_io_free(&f->alloc, f->tensors);
    tg_io_free(&f->alloc, f->meta);
    memset(f, 0, sizeof *f);
}

/* ---- write -------------------------------------------------------------------- */

bool tg_st_write_with(const tg_allocator *alloc, tg_st_sink sink, void *user, const tg_st_tensor *tensors, size_t count,
                      const tg_st_kv *meta, size_t meta_count, bool host_order, tg_st_error *err) {
    err->status = TG_OK;
    err->msg[0] = '\0';
    /* The 8 length bytes go first in the same buffer: one write for both. */
    tg_json_writer w = {0};
    if (alloc) w.alloc = *alloc;
    tg_jw_raw(&w, "\0\0\0\0\0\0\0\0", 8);
    tg_jw_lit(&w, "{");
    if (meta_count > 0) {
        tg_jw_lit(&w, "\"__metadata__\":{");
        for (size_t i = 0; i < meta_count; i++) {
            if (i) tg_jw_lit(&w, ",");
            tg_jw_string(&w, meta[i].key, strlen(meta[i].key));
            tg_jw_lit(&w, ":");
            tg_jw_string(&w, meta[i].value, strlen(meta[i].value));
        }
        tg_jw_lit(&w, "}");
    }
    uint64_t offset = 0;
    for (size_t i = 0; i < count; i++) {
        const tg_st_tensor *t = &tensors[i];
        uint64_t nbytes;
        if (!shape_bytes(t->ndim, t->shape, tg_dtype_size(t->dtype), &nbytes) || nbytes > UINT64_MAX - offset ||
            nbytes > SIZE_MAX) {
            tg_jw_free(&w);
            return st_fail(err, TG_ERR_OOM, "tensor %zu is too large", i);
        }
        if (i || meta_count) tg_jw_lit(&w, ",");
        tg_jw_string(&w, t->name, t->name_len);
        tg_jw_lit(&w, ":{\"dtype\":\"");
        tg_jw_lit(&w, st_dtype_name(t->dtype));
        tg_jw_lit(&w, "\",\"shape\":[");
        for (int d = 0; d < t->ndim; d++) {
            if (d) tg_jw_lit(&w, ",");
            tg_jw_u64(&w, (uint64_t)t->shape[d]);
        }
        tg_jw_lit(&w, "],\"data_offsets\":[");
        tg_jw_u64(&w, offset);
        tg_jw_lit(&w, ",");
        tg_jw_u64(&w, offset + nbytes);
        tg_jw_lit(&w, "]}");
        offset += nbytes;
    }
    tg_jw_lit(&w, "}");
    while (!w.failed && (w.len - 8) % 8 != 0) tg_jw_raw(&w, " ", 1);
    if (w.failed) {
        tg_jw_free(&w);
        return st_fail(err, TG_ERR_OOM, "out of memory for the header");
    }
    tg_st_put_le64(w.buf, (uint64_t)(w.len - 8));
    bool ok = sink(user, w.buf, w.len);
    tg_jw_free(&w);

    bool swap = host_order && !host_is_le();
    unsigned char chunk[4096];
    for (size_t i = 0; i < count && ok; i++) {
        const tg_st_tensor *t = &tensors[i];
        size_t esize = tg_dtype_size(t->dtype);
        uint64_t nbytes = 0; /* validated when the header was written above */
        shape_bytes(t->ndim, t->shape, esize, &nbytes);
        if (!swap) {
            if (nbytes) ok = sink(user, t->data, (size_t)nbytes);
            continue;
        }
        const unsigned char *src = t->data;
        for (size_t done = 0; done < nbytes && ok; done += sizeof chunk) {
            size_t n = nbytes - done < sizeof chunk ? (size_t)(nbytes - done) : sizeof chunk;
            copy_elements(chunk, src + done, n, esize, true);
            ok = sink(user, chunk, n);
        }
    }
    if (!ok) return st_fail(err, TG_ERR_IO, "write failed");
    return true;
}

bool tg_st_write(tg_st_sink sink, void *user, const tg_st_tensor *tensors, size_t count, const tg_st_kv *meta,
                 size_t meta_count, bool host_order, tg_st_error *err) {
    return tg_st_write_with(NULL, sink, user, tensors, count, meta, meta_count, host_order, err);
}

/* ---- load into named tensors -------------------------------------------------- */

typedef struct model_entry {
    const char *name;
    size_t name_len;
    tg_tensor *t;
    int order;                 /* position in params, then state */
    const char *list;          /* "params" or "state" */
    const tg_st_tensor *match; /* the file's tensor with this name */
} model_entry;

static int cmp_names(const char *a, size_t an, const char *b, size_t bn) {
    int c = memcmp(a, b, an < bn ? an : bn);
    if (c != 0) return c;
    return (an > bn) - (an < bn);
}

static int cmp_entries(const void *a, const void *b) {
    const model_entry *x = a, *y = b;
    int c = cmp_names(x->name, x->name_len, y->name, y->name_len);
    return c != 0 ? c : (x->order > y->order) - (x->order < y->order);
}

static model_entry *find_entry(model_entry *e, size_t n, const char *name, size_t len) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = cmp_names(e[mid].name, e[mid].name_len, name, len);
        if (c == 0) return &e[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

/* Fills entries from one list; false (and ctx's error) on a bad item. */
static bool add_list(tg_ctx *ctx, const char *fn, const char *what, model_entry *e, size_t *n, tg_params *list,
                     const char *list_name) {
    if (list->count > 0 && !list->items) {
        tg_error(ctx, TG_ERR_NULL, fn, "%s: %s has %d items but no array", what, list_name, list->count);
        return false;
    }
    for (int i = 0; i < list->count; i++) {
        tg_param *p = &list->items[i];
        size_t len = 0;
        while (len < sizeof p->name && p->name[len]) len++;
        if (len == sizeof p->name) {
            tg_error(ctx, TG_ERR_VALUE, fn, "%s: %s item %d has a name without a terminating NUL", what, list_name, i);
            return false;
        }
        if (!p->value) {
            tg_error(ctx, TG_ERR_NULL, fn, "%s: %s item %d (\"%s\") has no tensor", what, list_name, i, p->name);
            return false;
        }
        e[*n] = (model_entry){p->name, len, p->value, (int)*n, list_name, NULL};
        (*n)++;
    }
    return true;
}

tg_status tg_st_load_memory(tg_ctx *ctx, const char *fn, const char *what, const void *buf, size_t len,
                            tg_params *params, tg_params *state, tg_meta *meta, bool ignore_extra) {
    return tg_st_load_memory_ex(ctx, fn, what, buf, len, params, state, meta, ignore_extra, false);
}

/* Converts n elements of the file (little-endian, dtype `from`) into dst
 * (dtype `to`), through a block on the stack: no allocation, so phase 2
 * still cannot fail. */
static void convert_elements(void *dst, tg_dtype to, const unsigned char *src, tg_dtype from, size_t n, bool swap) {
    double block[256]; /* aligned for any dtype */
    size_t si = tg_dtype_size(from), di = tg_dtype_size(to);
    for (size_t i = 0; i < n; i += 256) {
        size_t k = n - i < 256 ? n - i : 256;
        copy_elements(block, src + i * si, k * si, si, swap);
        tg_convert_n((unsigned char *)dst + i * di, to, block, from, k);
    }
}

tg_status tg_st_load_memory_ex(tg_ctx *ctx, const char *fn, const char *what, const void *buf, size_t len,
                               tg_params *params, tg_params *state, tg_meta *meta, bool ignore_extra, bool convert) {
    if (!ctx) return TG_ERR_NULL;
    if (!tg_ok(ctx)) return tg_status_of(ctx);
    if (!params) {
        tg_null_error(ctx, fn, "params");
        return TG_ERR_NULL;
    }
    tg_st_file f;
    tg_st_error err;
    if (!tg_st_parse_with(&f, &ctx->alloc, buf, len, &err)) {
        tg_error(ctx, err.status, fn, "%s: %s", what, err.msg);
        return err.status;
    }
    size_t total =
        (size_t)(params->count > 0 ? params->count : 0) + (size_t)(state && state->count > 0 ? state->count : 0);
    model_entry *e = tg_io_alloc(&ctx->alloc, (total ? total : 1) * sizeof *e);
    tg_meta new_meta = {0};
    tg_status st = TG_OK;
    size_t n = 0;
    if (!e) {
        tg_error(ctx, TG_ERR_OOM, fn, "%s: out of memory", what);
        st = TG_ERR_OOM;
        goto done;
    }
    if (!add_list(ctx, fn, what, e, &n, params, "params") ||
        (state && !add_list(ctx, fn, what, e, &n, state, "state"))) {
        st = tg_status_of(ctx);
        goto done;
    }
    qsort(e, n, sizeof *e, cmp_entries);
    for (size_t i = 1; i < n; i++) {
        if (cmp_names(e[i].name, e[i].name_len, e[i - 1].name, e[i - 1].name_len) == 0) {
            tg_error(ctx, TG_ERR_VALUE, fn, "%s: the name \"%s\" appears twice in the model's lists", what, e[i].name);
            st = TG_ERR_VALUE;
            goto done;
        }
    }

    /* Match every tensor of the file (header order) to the model's. */
    for (size_t i = 0; i < f.count; i++) {
        const tg_st_tensor *ft = &f.tensors[i];
        qname q = quote(ft->name, ft->name_len);
        model_entry *me = find_entry(e, n, ft->name, ft->name_len);
        if (!me) {
            if (ignore_extra) continue;
            tg_error(ctx, TG_ERR_VALUE, fn, "%s: tensor \"%s\" in the file is not in the model", what, q.s);
            st = TG_ERR_VALUE;
            goto done;
        }
        if (me->t->dtype != ft->dtype && !convert) {
            tg_error(ctx, TG_ERR_DTYPE, fn,
                     "%s: tensor \"%s\" is %s in the file but %s in the model (set convert_dtype in "
                     "tg_ckpt_options to convert it)",
                     what, q.s, st_dtype_name(ft->dtype), st_dtype_name(me->t->dtype));
            st = TG_ERR_DTYPE;
            goto done;
        }
        bool same = me->t->ndim == ft->ndim;
        for (int d = 0; same && d < ft->ndim; d++) same = me->t->shape[d] == ft->shape[d];
        if (!same) {
            char a[160], b[160];
            tg_error(ctx, TG_ERR_SHAPE, fn, "%s: tensor \"%s\" has shape %s in the file but %s in the model", what, q.s,
                     tg_shape_str(a, sizeof a, ft->ndim, ft->shape),
                     tg_shape_str(b, sizeof b, me->t->ndim, me->t->shape));
            st = TG_ERR_SHAPE;
            goto done;
        }
        me->match = ft;
    }
    const model_entry *missing = NULL;
    for (size_t i = 0; i < n; i++)
        if (!e[i].match && (!missing || e[i].order < missing->order)) missing = &e[i];
    if (missing) {
        tg_error(ctx, TG_ERR_VALUE, fn, "%s: tensor \"%s\" of the model (%s) is missing from the file", what,
                 missing->name, missing->list);
        st = TG_ERR_VALUE;
        goto done;
    }
    if (meta && !tg_meta_copy_kv(ctx, &new_meta, f.meta, f.meta_count)) {
        tg_error(ctx, TG_ERR_OOM, fn, "%s: out of memory for the metadata", what);
        st = TG_ERR_OOM;
        goto done;
    }

    /* Everything checked: now write. Nothing below can fail. */
    bool swap = !host_is_le();
    for (size_t i = 0; i < n; i++) {
        const tg_st_tensor *ft = e[i].match;
        if (ft->dtype == e[i].t->dtype)
            copy_elements(e[i].t->data, ft->data, (size_t)ft->nbytes, tg_dtype_size(ft->dtype), swap);
        else convert_elements(e[i].t->data, e[i].t->dtype, ft->data, ft->dtype, (size_t)e[i].t->numel, swap);
        tg_written(e[i].t); /* an in-place write: a tape that saved it sees it */
    }
    if (meta) {
        tg_meta_free(meta);
        *meta = new_meta;
        new_meta = (tg_meta){0};
    }
done:
    tg_meta_free(&new_meta);
    tg_io_free(&ctx->alloc, e);
    tg_st_file_free(&f);
    return st;
}

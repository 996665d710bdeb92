/* A small, strict JSON reader and writer. See io/json.h for the contract.
 *
 * The reader is a recursive-descent parser over (text, len). Every access
 * goes through peek()/at(), which check the position against len, so the
 * parser never reads past the buffer. Memory:
 *  - nodes come from chunks of TG_JSON_CHUNK nodes, freed together;
 *  - decoded strings go into one buffer of len + 1 bytes, which is always
 *    enough: a string's decoded bytes plus its NUL never exceed the bytes it
 *    takes in the text (an escape never decodes to more bytes than it is
 *    written with, and the two quotes pay for the NUL). */
#include "io/json.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TG_JSON_CHUNK 128

typedef struct json_chunk {
    struct json_chunk *next;
    size_t used;
    tg_json nodes[TG_JSON_CHUNK];
} json_chunk;

struct tg_json_doc {
    tg_allocator alloc; /* every block below comes from it */
    json_chunk *chunks;
    char *strings;
    tg_json *root;
};

typedef struct parser {
    const unsigned char *s;
    size_t len;
    size_t pos;
    int max_depth;
    tg_json_doc *doc;
    tg_json_error *err;
    size_t strpos; /* next free byte in doc->strings */
    bool failed;
} parser;

/* ---- memory --------------------------------------------------------------- */

static bool has_alloc(const tg_allocator *a) { return a && a->alloc && a->free; }

void *tg_io_alloc(const tg_allocator *a, size_t size) {
    if (!has_alloc(a)) return malloc(size ? size : 1);
    return a->alloc(size, _Alignof(max_align_t), a->user);
}

void *tg_io_calloc(const tg_allocator *a, size_t n, size_t size) {
    if (size && n > SIZE_MAX / size) return NULL;
    void *p = tg_io_alloc(a, n * size);
    if (p) memset(p, 0, n * size);
    return p;
}

void tg_io_free(const tg_allocator *a, void *p) {
    if (!p) return;
    if (has_alloc(a)) a->free(p, a->user);
    else free(p);
}

/* ---- helpers -------------------------------------------------------------- */

/* Records the first error (later ones are consequences of it). */
static void fail(parser *p, size_t offset, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static void fail(parser *p, size_t offset, const char *fmt, ...) {
    if (p->failed) return;
    p->failed = true;
    p->err->offset = offset;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err->msg, sizeof p->err->msg, fmt, ap);
    va_end(ap);
}

static void fail_oom(parser *p) {
    if (p->failed) return;
    fail(p, p->pos, "out of memory");
    p->err->oom = true;
}

/* The byte at position i, or -1 past the end. */
static int at(const parser *p, size_t i) { return i < p->len ? p->s[i] : -1; }
static int peek(const parser *p) { return at(p, p->pos); }

static void skip_ws(parser *p) {
    while (p->pos < p->len) {
        unsigned char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->pos++;
    }
}

/* Describes the byte at i for a message: 'x', \xNN, or end of input. */
static const char *describe(const parser *p, size_t i, char buf[24]) {
    int c = at(p, i);
    if (c < 0) return "end of input";
    if (c >= 0x20 && c < 0x7f) snprintf(buf, 24, "'%c'", c);
    else snprintf(buf, 24, "byte 0x%02x", (unsigned)c);
    return buf;
}

static tg_json *new_node(parser *p, tg_json_kind kind, size_t offset) {
    json_chunk *c = p->doc->chunks;
    if (!c || c->used == TG_JSON_CHUNK) {
        c = tg_io_alloc(&p->doc->alloc, sizeof *c);
        if (!c) {
            fail_oom(p);
            return NULL;
        }
        c->used = 0;
        c->next = p->doc->chunks;
        p->doc->chunks = c;
    }
    tg_json *v = &c->nodes[c->used++];
    memset(v, 0, sizeof *v);
    v->kind = kind;
    v->offset = offset;
    return v;
}

/* Length of the well-formed UTF-8 sequence starting at s[0] (n bytes
 * available), or 0 when it is not one. Table 3-7 of the Unicode standard:
 *   00..7F | C2..DF 80..BF | E0 A0..BF 80..BF | E1..EC,EE..EF 80..BF 80..BF
 *   | ED 80..9F 80..BF | F0 90..BF 80..BF 80..BF | F1..F3 (80..BF)x3
 *   | F4 80..8F 80..BF 80..BF                                              */
static size_t utf8_seq(const unsigned char *s, size_t n) {
    if (n == 0) return 0;
    unsigned c = s[0];
    if (c < 0x80) return 1;
    size_t need;
    unsigned lo = 0x80, hi = 0xBF; /* range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) need = 2;
    else if (c == 0xE0) need = 3, lo = 0xA0;
    else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) need = 3;
    else if (c == 0xED) need = 3, hi = 0x9F;
    else if (c == 0xF0) need = 4, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3) need = 4;
    else if (c == 0xF4) need = 4, hi = 0x8F;
    else return 0;
    if (n < need) return 0;
    if (s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < need; i++)
        if (s[i] < 0x80 || s[i] > 0xBF) return 0;
    return need;
}

bool tg_utf8_valid(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        size_t k = utf8_seq(u + i, n - i);
        if (k == 0) return false;
        i += k;
    }
    return true;
}

char *tg_json_quote(char *out, size_t size, const char *s, size_t n) {
    if (!out || size == 0) return out;
    /* Escaped length of the whole string: cut it only when it does not fit. */
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        total += (c >= 0x20 && c < 0x7f && c != '\\') ? 1 : 4;
    }
    size_t limit = total < size ? size : (size > 4 ? size - 3 : 1); /* room for "..." */
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char tmp[8];
        size_t k;
        if (c >= 0x20 && c < 0x7f && c != '\\') {
            tmp[0] = (char)c;
            k = 1;
        } else {
            snprintf(tmp, sizeof tmp, "\\x%02x", c);
            k = 4;
        }
        if (o + k + 1 > limit) break;
        memcpy(out + o, tmp, k);
        o += k;
    }
    if (total >= size && size > 4) memcpy(out + o, "...", 3), o += 3;
    out[o] = '\0';
    return out;
}

/* ---- values ----------------------------------------------------------------- */

static tg_json *parse_value(parser *p, int depth);

/* Four hex digits at position i as a code unit, or -1. */
static long hex4(const parser *p, size_t i) {
    long v = 0;
    for (size_t k = 0; k < 4; k++) {
        int c = at(p, i + k);
        int d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else return -1;
        v = v * 16 + d;
    }
    return v;
}

static size_t put_utf8(unsigned char *o, unsigned long cp) {
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Parses the string starting at the opening quote (p->pos). On success
 * out and out_len receive the decoded, NUL-terminated bytes. */
static bool parse_string(parser *p, const char **out, size_t *out_len) {
    size_t start = p->pos;
    p->pos++; /* opening quote */
    unsigned char *o = (unsigned char *)p->doc->strings + p->strpos;
    size_t n = 0;
    for (;;) {
        int c = peek(p);
        if (c < 0) {
            fail(p, start, "unterminated string");
            return false;
        }
        if (c == '"') {
            p->pos++;
            break;
        }
        if (c < 0x20) {
            fail(p, p->pos, "raw control character 0x%02x in a string (must be escaped)", (unsigned)c);
            return false;
        }
        if (c == '\\') {
            size_t esc = p->pos;
            int e = at(p, esc + 1);
            if (e < 0) {
                fail(p, start, "unterminated string");
                return false;
            }
            p->pos += 2;
            switch (e) {
            case '"': o[n++] = '"'; break;
            case '\\': o[n++] = '\\'; break;
            case '/': o[n++] = '/'; break;
            case 'b': o[n++] = '\b'; break;
            case 'f': o[n++] = '\f'; break;
            case 'n': o[n++] = '\n'; break;
            case 'r': o[n++] = '\r'; break;
            case 't': o[n++] = '\t'; break;
            case 'u': {
                long u = hex4(p, p->pos);
                if (u < 0) {
                    fail(p, esc, "\\u must be followed by 4 hex digits");
                    return false;
                }
                p->pos += 4;
                unsigned long cp = (unsigned long)u;
                if (cp >= 0xDC00 && cp <= 0xDFFF) {
                    fail(p, esc, "lone low surrogate \\u%04lx", cp);
                    return false;
                }
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    long lo = (at(p, p->pos) == '\\' && at(p, p->pos + 1) == 'u') ? hex4(p, p->pos + 2) : -1;
                    if (lo < 0xDC00 || lo > 0xDFFF) {
                        fail(p, esc, "high surrogate \\u%04lx not followed by a low surrogate", cp);
                        return false;
                    }
                    p->pos += 6;
                    cp = 0x10000 + ((cp - 0xD800) << 10) + ((unsigned long)lo - 0xDC00);
                }
                n += put_utf8(o + n, cp);
                break;
            }
            default: {
                char d[24];
                fail(p, esc, "invalid escape: backslash followed by %s", describe(p, esc + 1, d));
                return false;
            }
            }
            continue;
        }
        size_t k = utf8_seq(p->s + p->pos, p->len - p->pos);
        if (k == 0) {
            fail(p, p->pos, "invalid UTF-8 in a string (byte 0x%02x)", (unsigned)c);
            return false;
        }
        memcpy(o + n, p->s + p->pos, k);
        n += k;
        p->pos += k;
    }
    o[n] = '\0';
    *out = (const char *)o;
    *out_len = n;
    p->strpos += n + 1;
    return true;
}

static bool is_digit(int c) { return c >= '0' && c <= '9'; }

/* number = [ "-" ] ( "0" / [1-9] *DIGIT ) [ "." 1*DIGIT ] [ ("e"/"E") ["+"/"-"] 1*DIGIT ] */
static tg_json *parse_number(parser *p) {
    size_t start = p->pos;
    bool neg = false, integer = true;
    if (peek(p) == '-') neg = true, p->pos++;
    if (peek(p) == '0') {
        p->pos++;
        if (is_digit(peek(p))) {
            fail(p, start, "leading zeros are not allowed in numbers");
            return NULL;
        }
    } else if (is_digit(peek(p))) {
        while (is_digit(peek(p))) p->pos++;
    } else {
        char d[24];
        fail(p, p->pos, "expected a digit, found %s", describe(p, p->pos, d));
        return NULL;
    }
    if (peek(p) == '.') {
        integer = false;
        p->pos++;
        if (!is_digit(peek(p))) {
            fail(p, p->pos, "expected a digit after the decimal point");
            return NULL;
        }
        while (is_digit(peek(p))) p->pos++;
    }
    if (peek(p) == 'e' || peek(p) == 'E') {
        integer = false;
        p->pos++;
        if (peek(p) == '+' || peek(p) == '-') p->pos++;
        if (!is_digit(peek(p))) {
            fail(p, p->pos, "expected a digit in the exponent");
            return NULL;
        }
        while (is_digit(peek(p))) p->pos++;
    }
    tg_json *v = new_node(p, TG_JSON_NUMBER, start);
    if (!v) return NULL;
    v->num = (const char *)p->s + start;
    v->num_len = p->pos - start;
    if (integer && !neg) {
        uint64_t x = 0;
        bool fits = true;
        for (size_t i = start; i < p->pos; i++) {
            unsigned d = (unsigned)(p->s[i] - '0');
            if (x > (UINT64_MAX - d) / 10) {
                fits = false;
                break;
            }
            x = x * 10 + d;
        }
        v->is_u64 = fits;
        v->u64 = fits ? x : 0;
    }
    return v;
}

static tg_json *parse_literal(parser *p, const char *word, tg_json_kind kind) {
    size_t n = strlen(word);
    if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n) != 0) {
        char d[24];
        fail(p, p->pos, "unexpected %s", describe(p, p->pos, d));
        return NULL;
    }
    tg_json *v = new_node(p, kind, p->pos);
    p->pos += n;
    return v;
}

/* Orders members by key bytes, then length, then position in the text. */
static int cmp_member(const void *a, const void *b) {
    const tg_json *x = *(const tg_json *const *)a;
    const tg_json *y = *(const tg_json *const *)b;
    size_t n = x->key_len < y->key_len ? x->key_len : y->key_len;
    int c = memcmp(x->key, y->key, n);
    if (c != 0) return c;
    if (x->key_len != y->key_len) return x->key_len < y->key_len ? -1 : 1;
    return (x->key_offset > y->key_offset) - (x->key_offset < y->key_offset);
}

/* Refuses an object with a repeated key. Sorting the members puts equal keys
 * side by side (in text order); the reported one is the earliest repeat. */
static bool check_duplicates(parser *p, const tg_json *obj) {
    if (obj->count < 2) return true;
    const tg_json **m = tg_io_calloc(&p->doc->alloc, obj->count, sizeof *m);
    if (!m) {
        fail_oom(p);
        return false;
    }
    size_t k = 0;
    for (const tg_json *c = obj->first; c; c = c->next) m[k++] = c;
    qsort(m, k, sizeof *m, cmp_member);
    const tg_json *dup = NULL, *first = NULL;
    size_t run = 0; /* index of the first member of the current run of equal keys */
    for (size_t i = 1; i < k; i++) {
        bool same = m[i]->key_len == m[i - 1]->key_len && memcmp(m[i]->key, m[i - 1]->key, m[i]->key_len) == 0;
        if (!same) {
            run = i;
            continue;
        }
        if (!dup || m[i]->key_offset < dup->key_offset) dup = m[i], first = m[run];
    }
    tg_io_free(&p->doc->alloc, m);
    if (dup) {
        char q[80];
        fail(p, dup->key_offset, "duplicate key \"%s\" (first at byte %zu)",
             tg_json_quote(q, sizeof q, dup->key, dup->key_len), first->key_offset);
        return false;
    }
    return true;
}

/* An object ('{' at p->pos) or an array ('['): members separated by commas
 * up to the closing bracket; an object's members are "key": value. */
static tg_json *parse_container(parser *p, int depth, bool object) {
    const char close = object ? '}' : ']';
    tg_json *box = new_node(p, object ? TG_JSON_OBJECT : TG_JSON_ARRAY, p->pos);
    if (!box) return NULL;
    p->pos++; /* '{' or '[' */
    skip_ws(p);
    if (peek(p) == close) {
        p->pos++;
        return box;
    }
    tg_json **tail = &box->first;
    for (;;) {
        size_t key_offset = 0;
        const char *key = NULL;
        size_t key_len = 0;
        if (object) {
            skip_ws(p);
            if (peek(p) != '"') {
                char d[24];
                fail(p, p->pos, "expected a string key, found %s", describe(p, p->pos, d));
                return NULL;
            }
            key_offset = p->pos;
            if (!parse_string(p, &key, &key_len)) return NULL;
            skip_ws(p);
            if (peek(p) != ':') {
                char d[24];
                fail(p, p->pos, "expected ':' after an object key, found %s", describe(p, p->pos, d));
                return NULL;
            }
            p->pos++;
        }
        tg_json *v = parse_value(p, depth);
        if (!v) return NULL;
        v->key = key;
        v->key_len = key_len;
        v->key_offset = key_offset;
        *tail = v;
        tail = &v->next;
        box->count++;
        skip_ws(p);
        int c = peek(p);
        if (c == ',') {
            p->pos++;
            continue;
        }
        if (c == close) {
            p->pos++;
            break;
        }
        char d[24];
        fail(p, p->pos, "expected ',' or '%c' in %s, found %s", close, object ? "an object" : "an array",
             describe(p, p->pos, d));
        return NULL;
    }
    return !object || check_duplicates(p, box) ? box : NULL;
}

/* A value whose containers sit `depth` levels deep. */
static tg_json *parse_value(parser *p, int depth) {
    skip_ws(p);
    int c = peek(p);
    char d[24];
    switch (c) {
    case -1: fail(p, p->pos, "unexpected end of input, expected a value"); return NULL;
    case '{':
    case '[':
        if (depth >= p->max_depth) {
            fail(p, p->pos, "nesting deeper than %d levels", p->max_depth);
            return NULL;
        }
        return parse_container(p, depth + 1, c == '{');
    case '"': {
        tg_json *v = new_node(p, TG_JSON_STRING, p->pos);
        if (!v || !parse_string(p, &v->str, &v->len)) return NULL;
        return v;
    }
    case 't': return parse_literal(p, "true", TG_JSON_TRUE);
    case 'f': return parse_literal(p, "false", TG_JSON_FALSE);
    case 'n': return parse_literal(p, "null", TG_JSON_NULL);
    default:
        if (c == '-' || is_digit(c)) return parse_number(p);
        fail(p, p->pos, "unexpected %s, expected a value", describe(p, p->pos, d));
        return NULL;
    }
}

/* ---- documents ---------------------------------------------------------------- */

tg_json_doc *tg_json_parse_with(const tg_allocator *alloc, const char *text, size_t len, int max_depth,
                                tg_json_error *err) {
    tg_json_error scratch;
    if (!err) err = &scratch;
    memset(err, 0, sizeof *err);
    if (!text && len > 0) {
        snprintf(err->msg, sizeof err->msg, "no text");
        return NULL;
    }
    tg_json_doc *doc = tg_io_calloc(alloc, 1, sizeof *doc);
    char *strings = doc && len < SIZE_MAX ? tg_io_alloc(alloc, len + 1) : NULL;
    if (!strings) {
        tg_io_free(alloc, doc);
        err->oom = true;
        snprintf(err->msg, sizeof err->msg, "out of memory");
        return NULL;
    }
    if (alloc) doc->alloc = *alloc;
    doc->strings = strings;
    parser p = {(const unsigned char *)text, len, 0, max_depth < 1 ? 1 : max_depth, doc, err, 0, false};
    tg_json *root = parse_value(&p, 0);
    if (root) {
        skip_ws(&p);
        if (p.pos < p.len) {
            char d[24];
            fail(&p, p.pos, "unexpected %s after the JSON value", describe(&p, p.pos, d));
        }
    }
    if (p.failed || !root) {
        tg_json_free(doc);
        return NULL;
    }
    doc->root = root;
    return doc;
}

tg_json_doc *tg_json_parse(const char *text, size_t len, int max_depth, tg_json_error *err) {
    return tg_json_parse_with(NULL, text, len, max_depth, err);
}

const tg_json *tg_json_root(const tg_json_doc *doc) { return doc ? doc->root : NULL; }

void tg_json_free(tg_json_doc *doc) {
    if (!doc) return;
    tg_allocator a = doc->alloc;
    json_chunk *c = doc->chunks;
    while (c) {
        json_chunk *next = c->next;
        tg_io_free(&a, c);
        c = next;
    }
    tg_io_free(&a, doc->strings);
    tg_io_free(&a, doc);
}

const tg_json *tg_json_get(const tg_json *obj, const char *key) {
    if (!obj || obj->kind != TG_JSON_OBJECT || !key) return NULL;
    size_t n = strlen(key);
    for (const tg_json *c = obj->first; c; c = c->next)
        if (c->key_len == n && memcmp(c->key, key, n) == 0) return c;
    return NULL;
}

/* ---- writer ---------------------------------------------------------------------- */

static bool jw_reserve(tg_json_writer *w, size_t extra) {
    if (w->failed) return false;
    if (extra > SIZE_MAX - w->len - 1) {
        w->failed = true;
        return false;
    }
    size_t need = w->len + extra + 1; /* + NUL */
    if (need <= w->cap) return true;
    size_t cap = w->cap ? w->cap : 256;
    while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    char *b = tg_io_alloc(&w->alloc, cap); /* allocate, copy, free: no realloc in tg_allocator */
    if (!b) {
        w->failed = true;
        return false;
    }
    if (w->len) memcpy(b, w->buf, w->len + 1);
    tg_io_free(&w->alloc, w->buf);
    w->buf = b;
    w->cap = cap;
    return true;
}

void tg_jw_raw(tg_json_writer *w, const char *s, size_t n) {
    if (!jw_reserve(w, n)) return;
    if (n) memcpy(w->buf + w->len, s, n);
    w->len += n;
    w->buf[w->len] = '\0';
}

void tg_jw_lit(tg_json_writer *w, const char *s) { tg_jw_raw(w, s, strlen(s)); }

void tg_jw_string(tg_json_writer *w, const char *s, size_t n) {
    tg_jw_raw(w, "\"", 1);
    size_t run = 0; /* start of the bytes not yet copied */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char buf[8];
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        default:
            if (c < 0x20) {
                snprintf(buf, sizeof buf, "\\u%04x", c);
                esc = buf;
            }
        }
        if (!esc) continue;
        tg_jw_raw(w, s + run, i - run);
        tg_jw_lit(w, esc);
        run = i + 1;
    }
    tg_jw_raw(w, s + run, n - run);
    tg_jw_raw(w, "\"", 1);
}

void tg_jw_u64(tg_json_writer *w, uint64_t v) {
    char buf[24];
    size_t i = sizeof buf;
    do {
        buf[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    tg_jw_raw(w, buf + i, sizeof buf - i);
}

void tg_jw_free(tg_json_writer *w) {
    if (!w) return;
    tg_allocator a = w->alloc;
    tg_io_free(&a, w->buf);
    memset(w, 0, sizeof *w);
    w->alloc = a;
}

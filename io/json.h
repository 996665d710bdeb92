/* A small, strict JSON reader and writer (internal; used for safetensors
 * headers). Not installed; users see only include/tapegrad.h.
 *
 * Reader (RFC 8259, strict):
 *  - objects, arrays, strings, numbers, true, false, null; nothing else
 *    (no comments, no trailing commas, no NaN, no leading zeros, no BOM);
 *  - strings: escapes \" \\ \/ \b \f \n \r \t and \uXXXX (surrogate pairs
 *    joined, lone surrogates refused); raw bytes must be valid UTF-8
 *    (no overlong forms, no surrogates, nothing above U+10FFFF) and raw
 *    control characters (< 0x20) are refused;
 *  - duplicate keys in an object are an error (found in O(n log n));
 *  - nesting is bounded by max_depth, so recursion depth is bounded;
 *  - every read is checked against the buffer length: the text need not be
 *    NUL-terminated and nothing past text[len - 1] is ever read;
 *  - errors carry the byte offset of the problem.
 * Numbers are checked against the grammar and keep their text; a literal
 * that is a non-negative integer below 2^64 also gets its exact value
 * (is_u64, u64). That is all safetensors needs, and it keeps the reader
 * free of locale-dependent strtod.
 *
 * Writer: a growable byte buffer with helpers that append escaped strings
 * and integers; the caller writes the structure (braces and commas). */
#ifndef TG_IO_JSON_H
#define TG_IO_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tapegrad/tensor.h"

/* Memory. Everything io/ allocates goes through a tg_allocator: the
 * context's (tapegrad/tensor.h promises that a context made with
 * tg_ctx_new_with_allocator sees every allocation made for it), or, where
 * the allocator is NULL or all zero (no context: the JSON tests, the fuzz
 * target's parse and rewrite), malloc and free. */
void *tg_io_alloc(const tg_allocator *a, size_t size);
/* As tg_io_alloc, zeroed, for n elements of `size` bytes (NULL on overflow). */
void *tg_io_calloc(const tg_allocator *a, size_t n, size_t size);
void tg_io_free(const tg_allocator *a, void *p);

typedef enum tg_json_kind {
    TG_JSON_NULL,
    TG_JSON_FALSE,
    TG_JSON_TRUE,
    TG_JSON_NUMBER,
    TG_JSON_STRING,
    TG_JSON_ARRAY,
    TG_JSON_OBJECT
} tg_json_kind;

/* One parsed value. Every pointer points into the document that owns it. */
typedef struct tg_json {
    tg_json_kind kind;
    size_t offset; /* byte offset of the value's first character */
    /* As a member of an object: its key (decoded, NUL-terminated; key_len
     * bytes, which may include NUL from \u0000) and the key's offset. */
    const char *key;
    size_t key_len;
    size_t key_offset;
    /* TG_JSON_STRING: decoded UTF-8, NUL-terminated, len bytes. */
    const char *str;
    size_t len;
    /* TG_JSON_NUMBER: the literal as written (not NUL-terminated). */
    const char *num;
    size_t num_len;
    bool is_u64; /* literal is an integer in [0, 2^64) */
    uint64_t u64;
    /* TG_JSON_ARRAY / TG_JSON_OBJECT: children in document order. */
    struct tg_json *first;
    struct tg_json *next; /* next sibling */
    size_t count;
} tg_json;

/* A parsed document: owns every node and decoded string. */
typedef struct tg_json_doc tg_json_doc;

typedef struct tg_json_error {
    size_t offset; /* byte offset of the problem in the text */
    bool oom;      /* the problem is an allocation failure */
    char msg[192]; /* what is wrong, without the offset */
} tg_json_error;

/* Parses text[0 .. len) as one JSON value (surrounding whitespace allowed).
 * Containers may nest at most max_depth deep (>= 1). Returns the document,
 * or NULL with *err filled in. The document's memory comes from `alloc`
 * (copied; NULL: malloc), tg_json_parse's from malloc. */
tg_json_doc *tg_json_parse_with(const tg_allocator *alloc, const char *text, size_t len, int max_depth,
                                tg_json_error *err);
tg_json_doc *tg_json_parse(const char *text, size_t len, int max_depth, tg_json_error *err);
/* The document's top-level value. */
const tg_json *tg_json_root(const tg_json_doc *doc);
/* Frees the document and everything in it (NULL is fine). */
void tg_json_free(tg_json_doc *doc);
/* The member of object `obj` whose key is the C string `key`, or NULL. */
const tg_json *tg_json_get(const tg_json *obj, const char *key);

/* True when s[0 .. n) is well-formed UTF-8 (RFC 3629). */
bool tg_utf8_valid(const char *s, size_t n);
/* Writes s[0 .. n) into out for an error message: printable ASCII as is,
 * other bytes as \xNN, cut with "..." to fit `size` (always terminated). */
char *tg_json_quote(char *out, size_t size, const char *s, size_t n);

/* The writer: append-only text in a heap buffer (buf is NUL-terminated
 * while len > 0). Any allocation failure sets `failed` and makes later
 * appends no-ops, so callers check once at the end. Start from {0} (malloc)
 * or set `alloc` before the first append. */
typedef struct tg_json_writer {
    char *buf;
    size_t len;
    size_t cap;
    bool failed;
    tg_allocator alloc; /* where buf comes from (all zero: malloc) */
} tg_json_writer;

/* Appends n raw bytes. */
void tg_jw_raw(tg_json_writer *w, const char *s, size_t n);
/* Appends a C string as is (structure such as "{" or ","). */
void tg_jw_lit(tg_json_writer *w, const char *s);
/* Appends s[0 .. n) as a quoted JSON string: " \\ and control characters
 * escaped, other bytes copied (the caller has checked UTF-8). */
void tg_jw_string(tg_json_writer *w, const char *s, size_t n);
/* Appends an unsigned integer in decimal. */
void tg_jw_u64(tg_json_writer *w, uint64_t v);
/* Frees the buffer and resets the writer to empty. */
void tg_jw_free(tg_json_writer *w);

#endif

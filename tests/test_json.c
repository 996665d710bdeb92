/* Tests of the strict JSON reader and writer (io/json.c) used for
 * safetensors headers: grammar, escapes, UTF-8, duplicate keys, depth,
 * error offsets, and that no input makes it read past its buffer (each
 * input is parsed from an exact-size heap copy, so ASan would see it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/json.h"
#include "testutil.h"

/* Parses s[0 .. n) from an exact-size heap copy (no NUL after it). */
static tg_json_doc *parse_n(const char *s, size_t n, int depth, tg_json_error *err) {
    char *copy = malloc(n ? n : 1);
    ck_assert_ptr_nonnull(copy);
    if (n) memcpy(copy, s, n);
    tg_json_doc *doc = tg_json_parse(copy, n, depth, err);
    free(copy);
    /* Decoded strings live in the document, not in the input: the copy may
     * go. (Number literals keep pointers into the input; tests below that
     * read them use tg_json_parse directly.) */
    return doc;
}

static tg_json_doc *parse(const char *s, tg_json_error *err) { return parse_n(s, strlen(s), 16, err); }

/* ---- valid documents -------------------------------------------------------- */

START_TEST(test_scalars) {
    tg_json_error err;
    const char *src[] = {"null", "true", "false", "0", "\"\"", " \t\r\n[]\n", "{}"};
    tg_json_kind kind[] = {TG_JSON_NULL,   TG_JSON_TRUE,  TG_JSON_FALSE, TG_JSON_NUMBER,
                           TG_JSON_STRING, TG_JSON_ARRAY, TG_JSON_OBJECT};
    for (size_t i = 0; i < sizeof src / sizeof *src; i++) {
        tg_json_doc *d = parse(src[i], &err);
        ck_assert_msg(d != NULL, "%s: %s", src[i], err.msg);
        ck_assert_int_eq(tg_json_root(d)->kind, kind[i]);
        ck_assert_uint_eq(tg_json_root(d)->count, 0);
        tg_json_free(d);
    }
}
END_TEST

START_TEST(test_structure) {
    tg_json_error err;
    const char *s = "{\"a\": [1, 2, {\"b\": null}], \"c\": \"x\", \"d\": {}}";
    tg_json_doc *d = tg_json_parse(s, strlen(s), 16, &err);
    ck_assert_msg(d != NULL, "%s", err.msg);
    const tg_json *r = tg_json_root(d);
    ck_assert_int_eq(r->kind, TG_JSON_OBJECT);
    ck_assert_uint_eq(r->count, 3);
    /* members keep document order and their keys' offsets */
    ck_assert_str_eq(r->first->key, "a");
    ck_assert_uint_eq(r->first->key_offset, 1);
    ck_assert_str_eq(r->first->next->key, "c");
    ck_assert_str_eq(r->first->next->next->key, "d");
    ck_assert_ptr_null(r->first->next->next->next);
    const tg_json *a = tg_json_get(r, "a");
    ck_assert_int_eq(a->kind, TG_JSON_ARRAY);
    ck_assert_uint_eq(a->count, 3);
    ck_assert_uint_eq(a->offset, 6);
    ck_assert(a->first->is_u64);
    ck_assert_uint_eq(a->first->u64, 1);
    ck_assert_uint_eq(a->first->next->u64, 2);
    const tg_json *inner = a->first->next->next;
    ck_assert_int_eq(tg_json_get(inner, "b")->kind, TG_JSON_NULL);
    const tg_json *c = tg_json_get(r, "c");
    ck_assert_int_eq(c->kind, TG_JSON_STRING);
    ck_assert_str_eq(c->str, "x");
    ck_assert_ptr_null(tg_json_get(r, "zz"));
    ck_assert_ptr_null(tg_json_get(a, "a")); /* not an object */
    tg_json_free(d);
}
END_TEST

START_TEST(test_numbers) {
    struct {
        const char *s;
        bool is_u64;
        uint64_t v;
    } cases[] = {
        {"0", true, 0},
        {"7", true, 7},
        {"18446744073709551615", true, UINT64_MAX},
        {"18446744073709551616", false, 0}, /* 2^64: valid JSON, not a u64 */
        {"99999999999999999999999", false, 0},
        {"-0", false, 0},
        {"-12", false, 0},
        {"1.5", false, 0},
        {"1e3", false, 0},
        {"1E+3", false, 0},
        {"2.5e-7", false, 0},
        {"10", true, 10},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        tg_json_error err;
        const char *s = cases[i].s;
        tg_json_doc *d = tg_json_parse(s, strlen(s), 4, &err);
        ck_assert_msg(d != NULL, "%s: %s", s, err.msg);
        const tg_json *v = tg_json_root(d);
        ck_assert_int_eq(v->kind, TG_JSON_NUMBER);
        ck_assert_msg(v->is_u64 == cases[i].is_u64, "%s: is_u64", s);
        if (v->is_u64) ck_assert_uint_eq(v->u64, cases[i].v);
        ck_assert_uint_eq(v->num_len, strlen(s));
        ck_assert(memcmp(v->num, s, v->num_len) == 0);
        tg_json_free(d);
    }
}
END_TEST

START_TEST(test_string_escapes) {
    struct {
        const char *src;
        const char *want;
        size_t want_len;
    } cases[] = {
        {"\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"", "\"\\/\b\f\n\r\t", 8},
        {"\"\\u0041\\u0062\"", "Ab", 2},
        {"\"\\u00e9\"", "\xc3\xa9", 2},                /* U+00E9, 2 bytes */
        {"\"\\u20AC\"", "\xe2\x82\xac", 3},            /* U+20AC, 3 bytes */
        {"\"\\ud83d\\ude00\"", "\xf0\x9f\x98\x80", 4}, /* U+1F600 from a surrogate pair */
        {"\"\\uDBFF\\uDFFF\"", "\xf4\x8f\xbf\xbf", 4}, /* U+10FFFF, the last code point */
        {"\"a\\u0000b\"", "a\0b", 3},                  /* NUL kept, length says so */
        {"\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 14},
        {"\"\x7f\"", "\x7f", 1}, /* DEL needs no escape */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        tg_json_error err;
        tg_json_doc *d = parse(cases[i].src, &err);
        ck_assert_msg(d != NULL, "case %zu: %s", i, err.msg);
        const tg_json *v = tg_json_root(d);
        ck_assert_int_eq(v->kind, TG_JSON_STRING);
        ck_assert_uint_eq(v->len, cases[i].want_len);
        ck_assert_msg(memcmp(v->str, cases[i].want, v->len) == 0, "case %zu: decoded bytes", i);
        ck_assert_int_eq(v->str[v->len], '\0');
        tg_json_free(d);
    }
}
END_TEST

/* ---- errors, with the byte offset they report --------------------------------- */

static const struct bad_case {
    const char *src;
    size_t len; /* 0: strlen */
    size_t offset;
    const char *msg; /* a substring of the message */
} bad_cases[] = {
    {"", 0, 0, "end of input"},
    {"   ", 0, 3, "end of input"},
    {"{", 0, 1, "expected a string key"},
    {"{\"a\":1,}", 0, 7, "expected a string key"},
    {"{\"a\":1", 0, 6, "expected ',' or '}'"},
    {"[1,]", 0, 3, "unexpected ']'"},
    {"[1 2]", 0, 3, "expected ',' or ']'"},
    {"{\"a\" 1}", 0, 5, "expected ':'"},
    {"{\"a\":1 \"b\":2}", 0, 7, "expected ',' or '}'"},
    {"{1:2}", 0, 1, "expected a string key"},
    {"{'a':1}", 0, 1, "expected a string key"},
    {"01", 0, 0, "leading zeros"},
    {"-01", 0, 0, "leading zeros"},
    {"1.", 0, 2, "after the decimal point"},
    {"1.e5", 0, 2, "after the decimal point"},
    {"1e", 0, 2, "exponent"},
    {"1e+", 0, 3, "exponent"},
    {"-", 0, 1, "expected a digit"},
    {"-a", 0, 1, "expected a digit"},
    {"+1", 0, 0, "unexpected '+'"},
    {".5", 0, 0, "unexpected '.'"},
    {"NaN", 0, 0, "unexpected 'N'"},
    {"Infinity", 0, 0, "unexpected 'I'"},
    {"tru", 0, 0, "unexpected 't'"},
    {"nul", 0, 0, "unexpected 'n'"},
    {"truex", 0, 4, "after the JSON value"},
    {"1 2", 0, 2, "after the JSON value"},
    {"{} x", 0, 3, "after the JSON value"},
    {"// c\n1", 0, 0, "unexpected '/'"},
    {"\xef\xbb\xbf{}", 0, 0, "byte 0xef"}, /* a BOM is not JSON */
    {"\"abc", 0, 0, "unterminated string"},
    {"\"ab\\", 0, 0, "unterminated string"},
    {"\"a\x01\"", 0, 2, "control character"},
    {"\"a\nb\"", 0, 2, "control character"},
    {"\"\\x\"", 0, 1, "invalid escape"},
    {"\"\\U0041\"", 0, 1, "invalid escape"},
    {"\"\\u12\"", 0, 1, "4 hex digits"},
    {"\"\\u12g4\"", 0, 1, "4 hex digits"},
    {"\"\\ud800\"", 0, 1, "high surrogate"},
    {"\"\\ud800\\u0041\"", 0, 1, "high surrogate"},
    {"\"\\ud800\\ud800\"", 0, 1, "high surrogate"},
    {"\"\\udc00\"", 0, 1, "lone low surrogate"},
    {"\"\xc0\xaf\"", 0, 1, "invalid UTF-8"},         /* overlong '/' */
    {"\"\xe0\x80\xaf\"", 0, 1, "invalid UTF-8"},     /* overlong, 3 bytes */
    {"\"\xed\xa0\x80\"", 0, 1, "invalid UTF-8"},     /* an encoded surrogate */
    {"\"\xf4\x90\x80\x80\"", 0, 1, "invalid UTF-8"}, /* above U+10FFFF */
    {"\"\xe2\x82\"", 0, 1, "invalid UTF-8"},         /* cut sequence */
    {"\"\x80\"", 0, 1, "invalid UTF-8"},             /* lone continuation */
    {"\"\xff\"", 0, 1, "invalid UTF-8"},
    {"[\0]", 3, 1, "byte 0x00"},
    {"{\"a\":1,\"b\":2,\"a\":3}", 0, 13, "duplicate key \"a\" (first at byte 1)"},
    {"{\"x\":{\"k\":1,\"k\":2}}", 0, 12, "duplicate key \"k\""},
    {"{\"a\":1,\"\\u0061\":2}", 0, 7, "duplicate key \"a\""},            /* same decoded key */
    {"{\"b\":1,\"a\":1,\"b\":2,\"a\":3}", 0, 13, "duplicate key \"b\""}, /* earliest repeat */
    {"[{\"a\":1},{\"q\\n\":1,\"q\\n\":1}]", 0, 18, "duplicate key \"q\\x0a\""},
};

START_TEST(test_errors) {
    const struct bad_case *c = &bad_cases[_i];
    size_t n = c->len ? c->len : strlen(c->src);
    tg_json_error err;
    tg_json_doc *d = parse_n(c->src, n, 16, &err);
    ck_assert_msg(d == NULL, "case %d (%s) parsed but should not", _i, c->src);
    ck_assert_msg(err.offset == c->offset, "case %d (%s): offset %zu, want %zu (%s)", _i, c->src, err.offset, c->offset,
                  err.msg);
    ck_assert_msg(strstr(err.msg, c->msg) != NULL, "case %d (%s): message \"%s\" lacks \"%s\"", _i, c->src, err.msg,
                  c->msg);
    ck_assert(!err.oom);
}
END_TEST

START_TEST(test_not_duplicates) {
    /* keys that differ only after a NUL, or by case, are different keys */
    const char *s[] = {"{\"a\":1,\"a\\u0000\":2}", "{\"a\":1,\"A\":2}", "{\"ab\":1,\"a\":2,\"b\":3}",
                       "[{\"a\":1},{\"a\":2}]"};
    for (size_t i = 0; i < sizeof s / sizeof *s; i++) {
        tg_json_error err;
        tg_json_doc *d = parse(s[i], &err);
        ck_assert_msg(d != NULL, "%s: %s", s[i], err.msg);
        tg_json_free(d);
    }
}
END_TEST

START_TEST(test_many_keys_one_duplicate) {
    /* 20000 keys with the repeat at the very end: found, at the right offset,
     * without quadratic time. */
    size_t n = 20000;
    char *s = malloc(n * 16 + 64);
    size_t len = 0;
    s[len++] = '{';
    for (size_t i = 0; i < n; i++) len += (size_t)sprintf(s + len, "%s\"k%zu\":%zu", i ? "," : "", i, i);
    size_t dup_at = len + 1;
    len += (size_t)sprintf(s + len, ",\"k123\":0}");
    tg_json_error err;
    tg_json_doc *d = parse_n(s, len, 4, &err);
    ck_assert_ptr_null(d);
    ck_assert_uint_eq(err.offset, dup_at);
    ck_assert_msg(strstr(err.msg, "duplicate key \"k123\"") != NULL, "%s", err.msg);
    /* the same without the repeat parses */
    s[dup_at - 1] = '}';
    d = parse_n(s, dup_at, 4, &err);
    ck_assert_msg(d != NULL, "%s", err.msg);
    ck_assert_uint_eq(tg_json_root(d)->count, n);
    tg_json_free(d);
    free(s);
}
END_TEST

START_TEST(test_depth) {
    tg_json_error err;
    tg_json_doc *d = parse_n("[[[[1]]]]", 9, 4, &err);
    ck_assert_msg(d != NULL, "%s", err.msg);
    tg_json_free(d);
    d = parse_n("[[[[1]]]]", 9, 3, &err);
    ck_assert_ptr_null(d);
    ck_assert_uint_eq(err.offset, 3);
    ck_assert_msg(strstr(err.msg, "nesting deeper than 3") != NULL, "%s", err.msg);
    d = parse_n("{\"a\":{\"b\":{}}}", 14, 2, &err);
    ck_assert_ptr_null(d);
    ck_assert_uint_eq(err.offset, 10);
    /* a million open brackets: refused at the limit, no deep recursion */
    size_t n = 1000000;
    char *s = malloc(n);
    memset(s, '[', n);
    d = parse_n(s, n, 64, &err);
    ck_assert_ptr_null(d);
    ck_assert_uint_eq(err.offset, 64);
    memset(s, '{', n);
    d = parse_n(s, n, 64, &err);
    ck_assert_ptr_null(d);
    free(s);
}
END_TEST

/* Every proper prefix of a document (that is not itself a document) is an
 * error, and parsing it reads nothing past the prefix (ASan checks). */
START_TEST(test_prefixes) {
    const char *s = "{\"__metadata__\":{\"k\":\"v\\u00e9\\n\"},\"w.0\":{\"dtype\":\"F32\","
                    "\"shape\":[2,3],\"data_offsets\":[0,24]},\"e\":[true,false,null,-1.5e3]}";
    size_t n = strlen(s);
    tg_json_error err;
    tg_json_doc *d = parse_n(s, n, 16, &err);
    ck_assert_msg(d != NULL, "%s", err.msg);
    tg_json_free(d);
    for (size_t k = 0; k < n; k++) {
        d = parse_n(s, k, 16, &err);
        ck_assert_msg(d == NULL, "prefix of %zu bytes parsed", k);
        ck_assert_msg(err.offset <= k, "prefix %zu: offset %zu beyond it", k, err.offset);
    }
}
END_TEST

/* Every single-byte change of a document parses or fails cleanly; a small
 * deterministic fuzz beside the libFuzzer target. */
START_TEST(test_mutations) {
    const char *s = "{\"a\":[1,2.5e1,\"x\\u00e9\\ud83d\\ude00\"],\"b\":{\"c\":null,\"d\":true}}";
    size_t n = strlen(s);
    const unsigned char bytes[] = {0,   '"', '\\', '{', '}', '[',  ']',  ',',  ':',  'u',
                                   '0', '-', 'e',  '.', ' ', 0x80, 0xc3, 0xed, 0xf4, 0xff};
    char *m = malloc(n);
    for (size_t i = 0; i < n; i++) {
        for (size_t b = 0; b < sizeof bytes; b++) {
            memcpy(m, s, n);
            m[i] = (char)bytes[b];
            tg_json_error err;
            tg_json_doc *d = parse_n(m, n, 16, &err);
            if (!d) ck_assert_msg(err.offset <= n && err.msg[0], "byte %zu = %02x", i, bytes[b]);
            tg_json_free(d);
        }
    }
    free(m);
}
END_TEST

START_TEST(test_utf8_valid) {
    ck_assert(tg_utf8_valid("", 0));
    ck_assert(tg_utf8_valid("plain ascii", 11));
    ck_assert(tg_utf8_valid("\xc2\x80", 2));
    ck_assert(tg_utf8_valid("\xef\xbf\xbf", 3));
    ck_assert(tg_utf8_valid("\xf0\x90\x80\x80", 4));
    ck_assert(tg_utf8_valid("\xf4\x8f\xbf\xbf", 4));
    ck_assert(tg_utf8_valid("a\0b", 3)); /* NUL is a valid character */
    ck_assert(!tg_utf8_valid("\xc1\xbf", 2));
    ck_assert(!tg_utf8_valid("\xe0\x9f\xbf", 3));
    ck_assert(!tg_utf8_valid("\xed\xbf\xbf", 3));
    ck_assert(!tg_utf8_valid("\xf0\x8f\xbf\xbf", 4));
    ck_assert(!tg_utf8_valid("\xf5\x80\x80\x80", 4));
    ck_assert(!tg_utf8_valid("\xc2", 1));
    ck_assert(!tg_utf8_valid("\xc2\x41", 2));
}
END_TEST

START_TEST(test_writer_roundtrip) {
    /* every byte 0x01..0x7f, then non-ASCII UTF-8, then NUL */
    char s[160];
    size_t n = 0;
    for (int c = 1; c < 0x80; c++) s[n++] = (char)c;
    memcpy(s + n, "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 9);
    n += 9;
    s[n++] = '\0';
    tg_json_writer w = {0};
    tg_jw_lit(&w, "{");
    tg_jw_string(&w, "key \"q\"", 7);
    tg_jw_lit(&w, ":[");
    tg_jw_string(&w, s, n);
    tg_jw_lit(&w, ",");
    tg_jw_u64(&w, 0);
    tg_jw_lit(&w, ",");
    tg_jw_u64(&w, UINT64_MAX);
    tg_jw_lit(&w, ",");
    tg_jw_u64(&w, 1234567890);
    tg_jw_lit(&w, "]}");
    ck_assert(!w.failed);
    ck_assert_uint_eq(strlen(w.buf), w.len);
    /* no raw control characters in the output */
    for (size_t i = 0; i < w.len; i++) ck_assert((unsigned char)w.buf[i] >= 0x20);
    ck_assert_ptr_nonnull(strstr(w.buf, "\\n"));
    ck_assert_ptr_nonnull(strstr(w.buf, "\\u0001"));
    ck_assert_ptr_nonnull(strstr(w.buf, "\\u0000"));
    ck_assert_ptr_nonnull(strstr(w.buf, "18446744073709551615"));
    tg_json_error err;
    tg_json_doc *d = tg_json_parse(w.buf, w.len, 4, &err);
    ck_assert_msg(d != NULL, "%s: %s", w.buf, err.msg);
    const tg_json *a = tg_json_get(tg_json_root(d), "key \"q\"");
    ck_assert_ptr_nonnull(a);
    ck_assert_uint_eq(a->first->len, n);
    ck_assert(memcmp(a->first->str, s, n) == 0);
    ck_assert_uint_eq(a->first->next->u64, 0);
    ck_assert_uint_eq(a->first->next->next->u64, UINT64_MAX);
    ck_assert_uint_eq(a->first->next->next->next->u64, 1234567890);
    tg_json_free(d);
    tg_jw_free(&w);
    ck_assert_ptr_null(w.buf);
    ck_assert_uint_eq(w.len, 0);
}
END_TEST

START_TEST(test_quote) {
    char q[16];
    ck_assert_str_eq(tg_json_quote(q, sizeof q, "abc", 3), "abc");
    ck_assert_str_eq(tg_json_quote(q, sizeof q, "a\nb", 3), "a\\x0ab");
    ck_assert_str_eq(tg_json_quote(q, sizeof q, "a\0b", 3), "a\\x00b");
    ck_assert_str_eq(tg_json_quote(q, sizeof q, "0123456789abcde", 15), "0123456789abcde");
    ck_assert_str_eq(tg_json_quote(q, sizeof q, "0123456789abcdef", 16), "0123456789ab...");
    ck_assert_str_eq(tg_json_quote(q, sizeof q, "\xff\xff\xff\xff", 4), "\\xff\\xff\\xff...");
    ck_assert_uint_lt(strlen(tg_json_quote(q, 5, "abcdefgh", 8)), 5);
}
END_TEST

Suite *make_json_suite(void) {
    Suite *s = suite_create("json");
    TCase *tc = tg_test_tcase(s, "parse", NULL, NULL, test_scalars, test_structure, test_numbers, test_string_escapes,
                              test_not_duplicates, test_many_keys_one_duplicate, test_depth, test_prefixes,
                              test_mutations, test_utf8_valid, NULL);
    tcase_add_loop_test(tc, test_errors, 0, (int)(sizeof bad_cases / sizeof *bad_cases));
    tg_test_tcase(s, "write", NULL, NULL, test_writer_roundtrip, test_quote, NULL);
    return s;
}

int main(void) { return tg_test_run(make_json_suite()); }

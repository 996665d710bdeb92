/* Tests of checkpoints (io/checkpoint.c, io/safetensors.c): round trips,
 * the exact bytes written, metadata, training state, atomic save under an
 * injected failure at every write point, and every kind of broken file
 * (built byte by byte here) refused with a clear error and the model left
 * unchanged.
 *
 * The "interop" case runs only when TG_INTEROP_DIR is set: it is driven by
 * scripts/interop_torch.py (PyTorch writes a file, this loads it and checks
 * the values, then writes one back for PyTorch to compare). */
#define _POSIX_C_SOURCE 200809L

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/safetensors.h"
#include "testutil.h"

static tg_ctx *ctx;
static char dir[256];

static void setup(void) {
    ctx = tg_ctx_new(42);
    ck_assert_ptr_nonnull(ctx);
    tg_test_make_tmpdir(dir, sizeof dir, "tg-ckpt");
}

static void teardown(void) {
    tg_test_remove_tree(dir);
    tg_ctx_free(ctx);
    ctx = NULL;
}

/* A path in the test's folder (one of two rotating buffers). */
static const char *path_in(const char *name) {
    static char buf[2][512];
    static int k;
    k ^= 1;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

static void expect_ok(tg_status st) {
    ck_assert_msg(st == TG_OK && tg_ok(ctx), "status %d: %s", (int)st, tg_error_message(ctx));
}

/* Asserts a call returned `want` (st) and left that error in the context
 * with part1 (and part2 unless NULL) in its message, then clears it. */
static void expect_error(tg_status st, tg_status want, const char *part1, const char *part2) {
    ck_assert_msg(st == want, "status %s, want %s: %s", tg_status_name(st), tg_status_name(want),
                  tg_error_message(ctx));
    tg_test_assert_error(ctx, want, part1, part2, NULL);
}

/* ---- models ------------------------------------------------------------------- */

/* A persistent tensor added to list under `name`. */
static tg_tensor *add(tg_params *list, const char *name, tg_dtype dtype, int ndim, const int64_t *shape) {
    tg_tensor *t = tg_persist(ctx, tg_zeros(ctx, dtype, ndim, shape));
    ck_assert_ptr_nonnull(t);
    ck_assert_msg(tg_params_add(ctx, list, NULL, name, t, true), "%s", tg_error_message(ctx));
    return t;
}

/* Element i of every tensor is base + 0.125 i + 0.5 k for the k-th tensor
 * (exact in float32). */
static void fill(tg_params *list, double base) {
    for (int k = 0; k < list->count; k++) {
        tg_tensor *t = list->items[k].value;
        for (int64_t i = 0; i < t->numel; i++) tg_set_flat(ctx, t, i, base + 0.125 * (double)i + 0.5 * k);
    }
}

static bool has_values(tg_params *list, double base) {
    for (int k = 0; k < list->count; k++) {
        tg_tensor *t = list->items[k].value;
        for (int64_t i = 0; i < t->numel; i++)
            if (tg_get_flat(ctx, t, i) != base + 0.125 * (double)i + 0.5 * k) return false;
    }
    return true;
}

/* The model of most tests: both dtypes, dotted names, 1-d and 2-d. */
static void make_model(tg_params *m) {
    *m = (tg_params){0};
    add(m, "fc1.weight", TG_F32, TG_SHAPE(2, 3));
    add(m, "fc1.bias", TG_F32, TG_SHAPE(2));
    add(m, "norm.gamma", TG_F64, TG_SHAPE(3));
    add(m, "layers.0.attn.q_proj.weight", TG_F64, TG_SHAPE(2, 2));
}

/* A copy of every tensor's bytes, and a check against it. */
typedef struct snapshot {
    unsigned char *bytes;
    size_t len;
} snapshot;

static size_t list_bytes(const tg_params *list) {
    size_t n = 0;
    for (int k = 0; k < list->count; k++)
        n += (size_t)list->items[k].value->numel * tg_dtype_size(list->items[k].value->dtype);
    return n;
}

static snapshot snap(const tg_params *list) {
    snapshot s = {malloc(list_bytes(list) + 1), list_bytes(list)};
    size_t o = 0;
    for (int k = 0; k < list->count; k++) {
        const tg_tensor *t = list->items[k].value;
        size_t n = (size_t)t->numel * tg_dtype_size(t->dtype);
        if (n) memcpy(s.bytes + o, t->data, n);
        o += n;
    }
    return s;
}

static bool same_as(const tg_params *list, const snapshot *s) {
    snapshot now = snap(list);
    bool same = now.len == s->len && memcmp(now.bytes, s->bytes, s->len) == 0;
    free(now.bytes);
    return same;
}

/* ---- files -------------------------------------------------------------------- */

static unsigned char *read_whole(const char *path, size_t *n) { return (unsigned char *)tg_test_read_file(path, n); }

/* A safetensors file by hand: header length (LE u64, as given), the header
 * text as is, then data_len bytes 0x40, 0x41, ... */
static unsigned char *build(uint64_t n_field, const char *header, size_t data_len, size_t *out_len) {
    size_t h = strlen(header);
    unsigned char *b = malloc(8 + h + data_len + 1);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(n_field >> (8 * i));
    memcpy(b + 8, header, h);
    for (size_t i = 0; i < data_len; i++) b[8 + h + i] = (unsigned char)(0x40 + i);
    *out_len = 8 + h + data_len;
    return b;
}

/* Names of the files in the test folder, space-separated, sorted is not
 * needed: tests expect zero or one file. */
static int files_in_dir(char *names, size_t size) {
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    struct dirent *e;
    int n = 0;
    names[0] = '\0';
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        n++;
        strncat(names, e->d_name, size - strlen(names) - 2);
        strncat(names, " ", size - strlen(names) - 1);
    }
    closedir(d);
    return n;
}

/* Number of open file descriptors (-1 without /proc). */
static int open_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    int n = 0;
    while (readdir(d)) n++;
    closedir(d);
    return n;
}

/* ---- round trips -------------------------------------------------------------- */

START_TEST(test_roundtrip_values) {
    tg_params a, b;
    make_model(&a);
    make_model(&b);
    fill(&a, -1.75);
    const char *p = path_in("model.safetensors");
    expect_ok(tg_ckpt_save(ctx, p, &a, NULL, NULL));
    ck_assert(!has_values(&b, -1.75));
    expect_ok(tg_ckpt_load(ctx, p, &b, NULL, NULL));
    ck_assert(has_values(&b, -1.75));
    /* saving again overwrites */
    fill(&a, 3.0);
    expect_ok(tg_ckpt_save(ctx, p, &a, NULL, NULL));
    expect_ok(tg_ckpt_load(ctx, p, &b, NULL, NULL));
    ck_assert(has_values(&b, 3.0));
    char names[256];
    ck_assert_int_eq(files_in_dir(names, sizeof names), 1);
    tg_params_free(&a);
    tg_params_free(&b);
}
END_TEST

/* Bits survive exactly, including NaN payloads, signed zeros, infinities,
 * subnormals and extremes, in both dtypes. */
START_TEST(test_roundtrip_bits) {
    static const uint32_t b32[] = {0x7fc00001u, 0xffc00000u, 0x7f800001u, 0x80000000u, 0x00000000u, 0x7f800000u,
                                   0xff800000u, 0x00000001u, 0x807fffffu, 0x7f7fffffu, 0x3f800000u, 0xbeaaaaabu};
    static const uint64_t b64[] = {0x7ff8000000000001ull, 0xfff0000000000001ull, 0x8000000000000000ull,
                                   0x7ff0000000000000ull, 0xfff0000000000000ull, 0x0000000000000001ull,
                                   0x000fffffffffffffull, 0x7fefffffffffffffull, 0x3fb999999999999aull,
                                   0xc00921fb54442d18ull};
    tg_params a = {0}, b = {0};
    tg_tensor *x = add(&a, "x", TG_F32, TG_SHAPE(3, 4));
    tg_tensor *y = add(&a, "y", TG_F64, TG_SHAPE(10));
    tg_tensor *x2 = add(&b, "x", TG_F32, TG_SHAPE(3, 4));
    tg_tensor *y2 = add(&b, "y", TG_F64, TG_SHAPE(10));
    memcpy(x->data, b32, sizeof b32);
    memcpy(y->data, b64, sizeof b64);
    const char *p = path_in("bits.safetensors");
    expect_ok(tg_ckpt_save(ctx, p, &a, NULL, NULL));
    expect_ok(tg_ckpt_load(ctx, p, &b, NULL, NULL));
    ck_assert(memcmp(x2->data, b32, sizeof b32) == 0);
    ck_assert(memcmp(y2->data, b64, sizeof b64) == 0);
    /* and on disk they are little-endian, F64 first */
    size_t n;
    unsigned char *f = read_whole(p, &n);
    uint64_t h = tg_st_le64(f);
    ck_assert_uint_eq(n, 8 + h + sizeof b64 + sizeof b32);
    ck_assert_uint_eq(tg_st_le64(f + 8 + h), b64[0]);
    const unsigned char *d32 = f + 8 + h + sizeof b64;
    ck_assert_uint_eq((uint32_t)d32[0] | (uint32_t)d32[1] << 8 | (uint32_t)d32[2] << 16 | (uint32_t)d32[3] << 24,
                      b32[0]);
    free(f);
    tg_params_free(&a);
    tg_params_free(&b);
}
END_TEST

/* The exact bytes of a tiny file, worked out by hand from the format:
 * header {"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}} is 54
 * bytes, padded with two spaces to 56; then 1.0f and -2.0f little-endian. */
START_TEST(test_exact_bytes) {
    tg_params m = {0};
    tg_tensor *w = add(&m, "w", TG_F32, TG_SHAPE(2));
    tg_set_flat(ctx, w, 0, 1.0);
    tg_set_flat(ctx, w, 1, -2.0);
    const char *p = path_in("tiny.safetensors");
    expect_ok(tg_ckpt_save(ctx, p, &m, NULL, NULL));
    const char header[] = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}  ";
    ck_assert_uint_eq(sizeof header - 1, 56);
    unsigned char want[8 + 56 + 8] = {56, 0, 0, 0, 0, 0, 0, 0};
    memcpy(want + 8, header, 56);
    const unsigned char data[8] = {0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0xc0};
    memcpy(want + 64, data, 8);
    size_t n;
    unsigned char *got = read_whole(p, &n);
    ck_assert_uint_eq(n, sizeof want);
    ck_assert_msg(memcmp(got, want, n) == 0, "file bytes differ: header \"%.*s\"", 56, (const char *)got + 8);
    free(got);

    /* An empty model is a valid file too: {} padded to 8. */
    tg_params none = {0};
    expect_ok(tg_ckpt_save(ctx, p, &none, NULL, NULL));
    got = read_whole(p, &n);
    ck_assert_uint_eq(n, 16);
    ck_assert(memcmp(got, "\x08\0\0\0\0\0\0\0{}      ", 16) == 0);
    free(got);
    expect_ok(tg_ckpt_load(ctx, p, &none, NULL, NULL));
    tg_params_free(&m);
}
END_TEST

/* Scalars, zero-size tensors, 8 dims; a header padded to 8; every tensor
 * starts at a multiple of its element size. */
START_TEST(test_shapes_and_layout) {
    tg_params a = {0}, b = {0};
    int64_t eight[8] = {1, 2, 1, 2, 1, 1, 1, 3};
    add(&a, "odd", TG_F32, TG_SHAPE(3));
    add(&a, "scalar", TG_F64, 0, NULL);
    add(&a, "empty", TG_F32, TG_SHAPE(0, 3));
    add(&a, "eight", TG_F64, 8, eight);
    add(&a, "last", TG_F64, TG_SHAPE(1));
    add(&b, "odd", TG_F32, TG_SHAPE(3));
    add(&b, "scalar", TG_F64, 0, NULL);
    add(&b, "empty", TG_F32, TG_SHAPE(0, 3));
    add(&b, "eight", TG_F64, 8, eight);
    add(&b, "last", TG_F64, TG_SHAPE(1));
    fill(&a, 0.25);
    const char *p = path_in("shapes.safetensors");
    expect_ok(tg_ckpt_save(ctx, p, &a, NULL, NULL));
    expect_ok(tg_ckpt_load(ctx, p, &b, NULL, NULL));
    ck_assert(has_values(&b, 0.25));

    size_t n;
    unsigned char *f = read_whole(p, &n);
    tg_st_file sf;
    tg_st_error err;
    ck_assert_msg(tg_st_parse(&sf, f, n, &err), "%s", err.msg);
    ck_assert_uint_eq(sf.header_len % 8, 0);
    ck_assert_int_eq(((const char *)f)[8], '{');
    ck_assert_uint_eq(sf.count, 5);
    for (size_t i = 0; i < sf.count; i++) {
        ck_assert_uint_eq(sf.tensors[i].begin % tg_dtype_size(sf.tensors[i].dtype), 0);
        if (strcmp(sf.tensors[i].name, "scalar") == 0) ck_assert_int_eq(sf.tensors[i].ndim, 0);
        if (strcmp(sf.tensors[i].name, "eight") == 0) ck_assert_int_eq(sf.tensors[i].ndim, 8);
        if (strcmp(sf.tensors[i].name, "empty") == 0) ck_assert_uint_eq(sf.tensors[i].nbytes, 0);
    }
    /* F64 tensors come first, in list order */
    ck_assert_str_eq(sf.tensors[0].name, "scalar");
    ck_assert_str_eq(sf.tensors[1].name, "eight");
    ck_assert_str_eq(sf.tensors[2].name, "last");
    ck_assert_str_eq(sf.tensors[3].name, "odd");
    tg_st_file_free(&sf);
    free(f);
    tg_params_free(&a);
    tg_params_free(&b);
}
END_TEST

START_TEST(test_metadata_roundtrip) {
    tg_params a, b;
    make_model(&a);
    make_model(&b);
    fill(&a, 1.0);
    tg_meta meta = {0}, got = {0};
    ck_assert(tg_meta_set(ctx, &meta, "format", "pt"));
    ck_assert(tg_meta_set(ctx, &meta, "quotes \"and\" \\backslashes\\", "line1\nline2\ttab \x01"));
    ck_assert(tg_meta_set(ctx, &meta, "unicode", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
    ck_assert(tg_meta_set(ctx, &meta, "empty", ""));
    ck_assert(tg_meta_set(ctx, &meta, "tapegrad.version", "0.1.0"));
    ck_assert(tg_meta_set_u64(ctx, &meta, "step", UINT64_MAX));
    ck_assert(tg_meta_set(ctx, &got, "stale", "replaced by the load"));
    const char *p = path_in("meta.safetensors");
    expect_ok(tg_ckpt_save(ctx, p, &a, NULL, &meta));
    expect_ok(tg_ckpt_load(ctx, p, &b, NULL, &got));
    ck_assert(has_values(&b, 1.0));
    ck_assert_int_eq(got.count, meta.count);
    for (int i = 0; i < meta.count; i++) {
        const char *v = tg_meta_get(&got, meta.items[i].key);
        ck_assert_msg(v != NULL, "key %s lost", meta.items[i].key);
        ck_assert_str_eq(v, meta.items[i].value);
    }
    ck_assert_ptr_null(tg_meta_get(&got, "stale"));
    uint64_t step = 0;
    ck_assert(tg_meta_get_u64(ctx, &got, "step", &step));
    ck_assert_uint_eq(step, UINT64_MAX);
    /* the header has them, in sorted key order, so the same metadata always
     * gives the same bytes */
    size_t n;
    unsigned char *f = read_whole(p, &n);
    const char *h = (const char *)f + 8;
    ck_assert(memcmp(h, "{\"__metadata__\":{\"empty\":\"\",\"format\":\"pt\",", 42) == 0);
    free(f);
    /* no metadata: the loaded list is emptied */
    expect_ok(tg_ckpt_save(ctx, p, &a, NULL, NULL));
    expect_ok(tg_ckpt_load(ctx, p, &b, NULL, &got));
    ck_assert_int_eq(got.count, 0);
    tg_meta_free(&meta);
    tg_meta_free(&got);
    tg_params_free(&a);
    tg_params_free(&b);
}
END_TEST

/* Parameters plus optimizer-like state plus scalars: the resume layout. */
START_TEST(test_training_state) {
    tg_params a, b, sa = {0}, sb = {0};
    make_model(&a);
    make_model(&b);
    fill(&a, 2.0);
    for (int k = 0; k < a.count; k++) {
        char name[128];
        const tg_tensor *t = a.items[k].value;
        snprintf(name, sizeof name, "optim.%s.exp_avg", a.items[k].name);
        add(&sa, name, t->dtype, t->ndim, t->shape);
        add(&sb, name, t->dtype, t->ndim, t->shape);
    }
    fill(&sa, -8.0);
    tg_meta meta = {0}, got = {0};
    ck_assert(tg_meta_set_u64(ctx, &meta, "optim.step", 17));
    ck_assert(tg_meta_set_rng(ctx, &meta));
    const char *p = path_in("train.safetensors");
    expect_ok(tg_ckpt_save(ctx, p, &a, &sa, &meta));
    expect_ok(tg_ckpt_load(ctx, p, &b, &sb, &got));
    ck_assert(has_values(&b, 2.0));
    ck_assert(has_values(&sb, -8.0));
    uint64_t step;
    ck_assert(tg_meta_get_u64(ctx, &got, "optim.step", &step));
    ck_assert_uint_eq(step, 17);

    /* The model alone: refused unless extra tensors are ignored. */
    tg_params c;
    make_model(&c);
    snapshot s = snap(&c);
    expect_error(tg_ckpt_load(ctx, p, &c, NULL, NULL), TG_ERR_VALUE, "optim.", "is not in the model");
    ck_assert(same_as(&c, &s));
    tg_ckpt_options opt = {.ignore_extra = true};
    expect_ok(tg_ckpt_load_ex(ctx, p, &c, NULL, NULL, &opt));
    ck_assert(has_values(&c, 2.0));
    /* state expected but absent from a params-only file */
    const char *q = path_in("params-only.safetensors");
    expect_ok(tg_ckpt_save(ctx, q, &a, NULL, NULL));
    expect_error(tg_ckpt_load(ctx, q, &b, &sb, NULL), TG_ERR_VALUE, "(state) is missing from the file", NULL);

    free(s.bytes);
    tg_meta_free(&meta);
    tg_meta_free(&got);
    tg_params_free(&a);
    tg_params_free(&b);
    tg_params_free(&c);
    tg_params_free(&sa);
    tg_params_free(&sb);
}
END_TEST

START_TEST(test_rng_state) {
    for (int i = 0; i < 5; i++) tg_rng_uniform(ctx);
    tg_meta meta = {0};
    ck_assert(tg_meta_set_rng(ctx, &meta));
    double want[4];
    for (int i = 0; i < 4; i++) want[i] = tg_rng_uniform(ctx);
    tg_rng_seed(ctx, 999);
    ck_assert(tg_meta_get_rng(ctx, &meta));
    for (int i = 0; i < 4; i++) ck_assert(tg_rng_uniform(ctx) == want[i]);
    uint64_t seed, offset;
    tg_rng_state(ctx, &seed, &offset);
    ck_assert_uint_eq(seed, 42);
    tg_meta_free(&meta);
    ck_assert(!tg_meta_get_rng(ctx, &meta));
    expect_error(TG_ERR_VALUE, TG_ERR_VALUE, "tg_meta_get_u64", "tapegrad.rng.seed");
}
END_TEST

START_TEST(test_meta_api) {
    tg_meta m = {0};
    ck_assert(tg_meta_set(ctx, &m, "a", "1"));
    ck_assert(tg_meta_set(ctx, &m, "a", "2"));
    ck_assert_int_eq(m.count, 1);
    ck_assert_str_eq(tg_meta_get(&m, "a"), "2");
    ck_assert_ptr_null(tg_meta_get(&m, "b"));
    for (int i = 0; i < 100; i++) {
        char k[16];
        snprintf(k, sizeof k, "k%d", i);
        ck_assert(tg_meta_set_u64(ctx, &m, k, (uint64_t)i * 1000003u));
    }
    ck_assert_int_eq(m.count, 101);
    uint64_t v;
    ck_assert(tg_meta_get_u64(ctx, &m, "k99", &v));
    ck_assert_uint_eq(v, 99u * 1000003u);
    const char *bad[] = {"", "-1", "+1", "1.0", "12a", " 1", "18446744073709551616"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ck_assert(tg_meta_set(ctx, &m, "x", bad[i]));
        ck_assert(!tg_meta_get_u64(ctx, &m, "x", &v));
        expect_error(TG_ERR_FORMAT, TG_ERR_FORMAT, "tg_meta_get_u64", "not a decimal number");
    }
    ck_assert(tg_meta_set(ctx, &m, "x", "18446744073709551615"));
    ck_assert(tg_meta_get_u64(ctx, &m, "x", &v));
    ck_assert_uint_eq(v, UINT64_MAX);
    ck_assert(!tg_meta_set(ctx, &m, "bad", "\xff"));
    expect_error(TG_ERR_VALUE, TG_ERR_VALUE, "tg_meta_set", "not valid UTF-8");
    ck_assert(!tg_meta_set(ctx, &m, NULL, "v"));
    expect_error(TG_ERR_NULL, TG_ERR_NULL, "tg_meta_set", "'key'");
    ck_assert(!tg_meta_set(NULL, &m, "k", "v"));
    tg_meta_free(&m);
    ck_assert_int_eq(m.count, 0);
    ck_assert_ptr_null(m.items);
    tg_meta_free(&m);
    tg_meta_free(NULL);
}
END_TEST

/* ---- argument errors -------------------------------------------------------- */

START_TEST(test_argument_errors) {
    tg_params a;
    make_model(&a);
    const char *p = path_in("x.safetensors");
    ck_assert_int_eq(tg_ckpt_save(NULL, p, &a, NULL, NULL), TG_ERR_NULL);
    ck_assert_int_eq(tg_ckpt_load(NULL, p, &a, NULL, NULL), TG_ERR_NULL);
    expect_error(tg_ckpt_save(ctx, NULL, &a, NULL, NULL), TG_ERR_NULL, "tg_ckpt_save", "'path'");
    expect_error(tg_ckpt_save(ctx, p, NULL, NULL, NULL), TG_ERR_NULL, "tg_ckpt_save", "'params'");
    expect_error(tg_ckpt_load(ctx, p, NULL, NULL, NULL), TG_ERR_NULL, "tg_ckpt_load", "'params'");
    expect_error(tg_ckpt_save(ctx, "", &a, NULL, NULL), TG_ERR_VALUE, "empty", NULL);

    /* a name in both lists, and the reserved name */
    tg_params s = {0};
    add(&s, "fc1.bias", TG_F32, TG_SHAPE(2));
    expect_error(tg_ckpt_save(ctx, p, &a, &s, NULL), TG_ERR_VALUE, "\"fc1.bias\" appears twice", NULL);
    tg_params r = {0};
    add(&r, "__metadata__", TG_F32, TG_SHAPE(1));
    expect_error(tg_ckpt_save(ctx, p, &r, NULL, NULL), TG_ERR_VALUE, "reserved", NULL);
    /* a hand-built list with a NULL tensor */
    tg_param items[1] = {{"w", NULL, false}};
    tg_params hand = {.items = items, .count = 1, .capacity = 1};
    expect_error(tg_ckpt_save(ctx, p, &hand, NULL, NULL), TG_ERR_NULL, "\"w\"", "no tensor");
    expect_error(tg_ckpt_load(ctx, p, &hand, NULL, NULL), TG_ERR_IO, "cannot open", p);
    char names[256];
    ck_assert_int_eq(files_in_dir(names, sizeof names), 0);

    /* load: the same name twice in the model's lists */
    expect_ok(tg_ckpt_save(ctx, p, &a, NULL, NULL));
    expect_error(tg_ckpt_load(ctx, p, &a, &s, NULL), TG_ERR_VALUE, "\"fc1.bias\" appears twice", NULL);

    /* a context in error: nothing happens, its error stays */
    const char *q = path_in("never.safetensors");
    tg_error(ctx, TG_ERR_SHAPE, "earlier", "first error");
    ck_assert_int_eq(tg_ckpt_save(ctx, q, &a, NULL, NULL), TG_ERR_SHAPE);
    ck_assert_int_eq(tg_ckpt_load(ctx, p, &a, NULL, NULL), TG_ERR_SHAPE);
    ck_assert_str_eq(tg_error_message(ctx), "earlier: first error");
    ck_assert_int_eq(access(q, F_OK), -1);
    tg_clear_error(ctx);

    /* a folder that does not exist */
    expect_error(tg_ckpt_save(ctx, "/nonexistent-tg-dir/x.safetensors", &a, NULL, NULL), TG_ERR_IO,
                 "cannot create the temporary file", "No such file");
    tg_params_free(&a);
    tg_params_free(&s);
    tg_params_free(&r);
}
END_TEST

/* ---- broken files -------------------------------------------------------------- */

/* Model of the broken-file cases: "a.w" F32 (2,) and "b" F64 (1,). A valid
 * file puts b at [0, 8) and a.w at [8, 16). */
#define OK_B "\"b\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]}"
#define OK_A "\"a.w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}"

static const struct bad_file {
    const char *what;
    int64_t n_field; /* header length field; -1: the header's length */
    const char *header;
    size_t data_len;
    size_t cut; /* bytes cut off the end of the file */
    tg_status status;
    const char *msg;
} bad_files[] = {
    {"valid", -1, "{" OK_B "," OK_A "}", 16, 0, TG_OK, NULL},
    {"valid, padded", -1, "{" OK_A "," OK_B "}      \n ", 16, 0, TG_OK, NULL},
    {"valid, metadata", -1, "{\"__metadata__\":{\"k\":\"v\"}," OK_B "," OK_A "}", 16, 0, TG_OK, NULL},
    {"empty file", -1, "", 0, 8, TG_ERR_FORMAT, "truncated file: 0 bytes"},
    {"truncated length", -1, "{}", 0, 5, TG_ERR_FORMAT, "truncated file: 5 bytes"},
    {"truncated header", -1, "{" OK_B "," OK_A "}", 16, 17, TG_ERR_FORMAT, "goes beyond the end of the file"},
    {"truncated data", -1, "{" OK_B "," OK_A "}", 16, 4, TG_ERR_FORMAT, "out of range"},
    {"length beyond the file", 1000, "{}", 0, 0, TG_ERR_FORMAT,
     "header length 1000 goes beyond the end of the file (2 bytes"},
    {"length 2^64-1", -2, "{}", 0, 0, TG_ERR_FORMAT, "header length 18446744073709551615 goes beyond"},
    {"empty header", 0, "", 0, 0, TG_ERR_FORMAT, "invalid JSON header at byte 0 (file offset 8)"},
    {"invalid JSON", -1, "{" OK_B ",", 16, 0, TG_ERR_FORMAT, "invalid JSON header"},
    {"invalid JSON, single quotes", -1, "{'b':1}", 0, 0, TG_ERR_FORMAT, "at byte 1 (file offset 9)"},
    {"invalid UTF-8 in a name", -1, "{\"\xc3\x28\":1}", 0, 0, TG_ERR_FORMAT, "invalid UTF-8"},
    {"not an object", -1, "[1, 2]", 0, 0, TG_ERR_FORMAT, "not a JSON object"},
    {"duplicate tensor", -1, "{" OK_B "," OK_A "," OK_B "}", 16, 0, TG_ERR_FORMAT, "duplicate key \"b\""},
    {"duplicate field", -1,
     "{\"b\":{\"dtype\":\"F64\",\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]}," OK_A "}", 16, 0,
     TG_ERR_FORMAT, "duplicate key \"dtype\""},
    {"duplicate metadata", -1, "{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}," OK_B "," OK_A "}", 16, 0, TG_ERR_FORMAT,
     "duplicate key \"k\""},
    {"unknown dtype", -1, "{\"b\":{\"dtype\":\"F23\",\"shape\":[1],\"data_offsets\":[0,8]}," OK_A "}", 16, 0,
     TG_ERR_FORMAT, "tensor \"b\": unknown dtype \"F23\""},
    {"unsupported dtype", -1, "{\"b\":{\"dtype\":\"I16\",\"shape\":[4],\"data_offsets\":[0,8]}," OK_A "}", 16, 0,
     TG_ERR_FORMAT, "unsupported dtype \"I16\""},
    {"dtype not a string", -1, "{\"b\":{\"dtype\":64,\"shape\":[1],\"data_offsets\":[0,8]}," OK_A "}", 16, 0,
     TG_ERR_FORMAT, "\"dtype\" is not a string"},
    {"size != span", -1, "{" OK_B ",\"a.w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[8,16]}}", 16, 0,
     TG_ERR_FORMAT, "tensor \"a.w\": shape (3,) of F32 is 12 bytes but data_offsets [8, 16] span 8"},
    {"end before begin", -1, "{" OK_B ",\"a.w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,8]}}", 16, 0,
     TG_ERR_FORMAT, "data_offsets [16, 8] end before they begin"},
    {"out of range", -1, "{" OK_B ",\"a.w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 12, 0,
     TG_ERR_FORMAT, "tensor \"a.w\": data_offsets [8, 16] are out of range: the data section has 12 bytes"},
    {"offset near 2^64", -1,
     "{" OK_B ",\"a.w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[18446744073709551608,"
     "18446744073709551615]}}",
     16, 0, TG_ERR_FORMAT, "span 7"},
    {"overlap", -1, "{" OK_B ",\"a.w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 16, 0,
     TG_ERR_FORMAT, "tensor \"a.w\": data_offsets [4, 12] overlap tensor \"b\" [0, 8]"},
    {"same offsets", -1, "{" OK_B ",\"a.w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, 0,
     TG_ERR_FORMAT, "overlap"},
    {"gap", -1, "{" OK_B ",\"a.w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}", 20, 0, TG_ERR_FORMAT,
     "tensor \"a.w\": data_offsets [12, 20] leave a gap of 4 bytes after offset 8"},
    {"gap at the start", -1,
     "{\"b\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[4,12]},"
     "\"a.w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}",
     20, 0, TG_ERR_FORMAT, "tensor \"b\": data_offsets [4, 12] leave a gap of 4 bytes after offset 0"},
    {"data after the last tensor", -1, "{" OK_B "," OK_A "}", 20, 0, TG_ERR_FORMAT,
     "4 bytes of data after the last tensor"},
    {"tensor the model lacks", -1,
     "{" OK_B "," OK_A ",\"c\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[16,20]}}", 20, 0, TG_ERR_VALUE,
     "tensor \"c\" in the file is not in the model"},
    {"tensor the file lacks", -1, "{" OK_B "}", 8, 0, TG_ERR_VALUE,
     "tensor \"a.w\" of the model (params) is missing from the file"},
    {"shape differs", -1, "{" OK_B ",\"a.w\":{\"dtype\":\"F32\",\"shape\":[1,2],\"data_offsets\":[8,16]}}", 16, 0,
     TG_ERR_SHAPE, "tensor \"a.w\" has shape (1, 2) in the file but (2,) in the model"},
    {"scalar for a vector", -1, "{\"b\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[0,8]}," OK_A "}", 16, 0,
     TG_ERR_SHAPE, "tensor \"b\" has shape () in the file but (1,) in the model"},
    {"dtype differs", -1, "{\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}," OK_A "}", 16, 0,
     TG_ERR_DTYPE, "tensor \"b\" is F32 in the file but F64 in the model"},
    {"not an object", -1, "{\"b\":[0,8]," OK_A "}", 8, 0, TG_ERR_FORMAT, "tensor \"b\": not an object"},
    {"unexpected field", -1, "{\"b\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8],\"extra\":1}," OK_A "}",
     16, 0, TG_ERR_FORMAT, "tensor \"b\": unexpected field \"extra\""},
    {"missing field", -1, "{\"b\":{\"dtype\":\"F64\",\"data_offsets\":[0,8]}," OK_A "}", 16, 0, TG_ERR_FORMAT,
     "tensor \"b\": missing \"shape\""},
    {"negative size", -1, "{\"b\":{\"dtype\":\"F64\",\"shape\":[-1],\"data_offsets\":[0,8]}," OK_A "}", 16, 0,
     TG_ERR_FORMAT, "shape entry 0 is not an integer"},
    {"fractional size", -1, "{\"b\":{\"dtype\":\"F64\",\"shape\":[1.0],\"data_offsets\":[0,8]}," OK_A "}", 16, 0,
     TG_ERR_FORMAT, "shape entry 0 is not an integer"},
    {"nine dims", -1, "{\"b\":{\"dtype\":\"F64\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,8]}," OK_A "}", 16,
     0, TG_ERR_FORMAT, "shape has 9 dims, at most 8"},
    {"size overflow", -1,
     "{\"b\":{\"dtype\":\"F64\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}," OK_A "}", 16, 0,
     TG_ERR_FORMAT, "overflows 64 bits"},
    {"offsets not a pair", -1, "{\"b\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0]}," OK_A "}", 16, 0,
     TG_ERR_FORMAT, "\"data_offsets\" is not two non-negative integers"},
    {"negative offset", -1, "{\"b\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[-8,0]}," OK_A "}", 16, 0,
     TG_ERR_FORMAT, "\"data_offsets\" is not two"},
    {"metadata not strings", -1, "{\"__metadata__\":{\"k\":1}," OK_B "," OK_A "}", 16, 0, TG_ERR_FORMAT,
     "metadata \"k\": the value is not a string"},
    {"metadata not an object", -1, "{\"__metadata__\":null," OK_B "," OK_A "}", 16, 0, TG_ERR_FORMAT,
     "\"__metadata__\" is not an object"},
    {"metadata with NUL", -1, "{\"__metadata__\":{\"k\":\"a\\u0000b\"}," OK_B "," OK_A "}", 16, 0, TG_ERR_FORMAT,
     "contains a NUL"},
};

/* Each broken file is refused with its status and message (naming the
 * function and the file), and the model keeps every value. */
START_TEST(test_bad_file) {
    const struct bad_file *c = &bad_files[_i];
    size_t len;
    uint64_t n_field = c->n_field == -1 ? strlen(c->header) : c->n_field == -2 ? UINT64_MAX : (uint64_t)c->n_field;
    unsigned char *bytes = build(n_field, c->header, c->data_len, &len);
    len -= c->cut;
    const char *p = path_in("bad.safetensors");
    tg_test_write_file(p, bytes, len);
    free(bytes);

    tg_params m = {0};
    add(&m, "a.w", TG_F32, TG_SHAPE(2));
    add(&m, "b", TG_F64, TG_SHAPE(1));
    fill(&m, 100.0);
    snapshot s = snap(&m);
    tg_meta meta = {0};
    ck_assert(tg_meta_set(ctx, &meta, "kept", "yes"));
    tg_status st = tg_ckpt_load(ctx, p, &m, NULL, &meta);
    if (c->status == TG_OK) {
        ck_assert_msg(st == TG_OK, "%s: %s", c->what, tg_error_message(ctx));
        ck_assert_msg(!same_as(&m, &s), "%s: nothing loaded", c->what);
        /* b = bytes 0x40..0x47 as a little-endian double, a.w = 0x48..0x4f */
        unsigned char want_b[8];
        for (int i = 0; i < 8; i++) want_b[i] = (unsigned char)(0x40 + i);
        double b;
        memcpy(&b, want_b, 8); /* little-endian host */
        ck_assert(tg_get_flat(ctx, m.items[1].value, 0) == b);
        ck_assert_ptr_null(tg_meta_get(&meta, "kept"));
    } else {
        ck_assert_msg(st == c->status, "%s: status %s, want %s (%s)", c->what, tg_status_name(st),
                      tg_status_name(c->status), tg_error_message(ctx));
        const char *msg = tg_error_message(ctx);
        ck_assert_msg(strstr(msg, c->msg) != NULL, "%s: message \"%s\" lacks \"%s\"", c->what, msg, c->msg);
        ck_assert_msg(strncmp(msg, "tg_ckpt_load: ", 14) == 0 && strstr(msg, p), "%s: %s", c->what, msg);
        ck_assert_msg(same_as(&m, &s), "%s: the model changed", c->what);
        ck_assert_str_eq(tg_meta_get(&meta, "kept"), "yes");
        tg_clear_error(ctx);
    }
    free(s.bytes);
    tg_meta_free(&meta);
    tg_params_free(&m);
}
END_TEST

/* A file cut at every length is refused and changes nothing. */
START_TEST(test_every_truncation) {
    tg_params a, b;
    make_model(&a);
    make_model(&b);
    fill(&a, 5.0);
    fill(&b, -5.0);
    tg_meta meta = {0};
    ck_assert(tg_meta_set(ctx, &meta, "note", "truncate me"));
    const char *p = path_in("full.safetensors");
    expect_ok(tg_ckpt_save(ctx, p, &a, NULL, &meta));
    size_t n;
    unsigned char *f = read_whole(p, &n);
    snapshot s = snap(&b);
    const char *q = path_in("cut.safetensors");
    for (size_t k = 0; k < n; k++) {
        tg_test_write_file(q, f, k);
        tg_status st = tg_ckpt_load(ctx, q, &b, NULL, NULL);
        ck_assert_msg(st == TG_ERR_FORMAT, "cut at %zu: %s", k, tg_error_message(ctx));
        ck_assert_msg(same_as(&b, &s), "cut at %zu changed the model", k);
        tg_clear_error(ctx);
    }
    tg_test_write_file(q, f, n);
    expect_ok(tg_ckpt_load(ctx, q, &b, NULL, NULL));
    ck_assert(has_values(&b, 5.0));
    free(f);
    free(s.bytes);
    tg_meta_free(&meta);
    tg_params_free(&a);
    tg_params_free(&b);
}
END_TEST

/* ---- atomic save ------------------------------------------------------------------ */

/* An I/O hook that counts the operations that can fail and fails the
 * fail_at-th one (1-based) with EIO; 0 fails none. remove is not a failure
 * point (it is the clean-up). */
typedef struct fault {
    tg_ckpt_io real;
    int calls;
    int fail_at;
    char failed_op[16];
    int rename_call;   /* the call number of the rename, when reached */
    char created[512]; /* the temporary's path */
    int short_writes;  /* > 0: write at most this many bytes per call, with an EINTR between */
    int eintr_toggle;
} fault;

static bool fault_hit(fault *f, const char *op) {
    f->calls++;
    if (f->calls != f->fail_at) return false;
    snprintf(f->failed_op, sizeof f->failed_op, "%s", op);
    errno = EIO;
    return true;
}

static int f_create(const char *path, void *user) {
    fault *f = user;
    snprintf(f->created, sizeof f->created, "%s", path);
    if (fault_hit(f, "create")) return -1;
    return f->real.create(path, NULL);
}
static ptrdiff_t f_write(int fd, const void *buf, size_t n, void *user) {
    fault *f = user;
    if (f->short_writes > 0) {
        if ((f->eintr_toggle ^= 1)) {
            errno = EINTR;
            return -1;
        }
        if (n > (size_t)f->short_writes) n = (size_t)f->short_writes;
    }
    if (fault_hit(f, "write")) return -1;
    return f->real.write(fd, buf, n, NULL);
}
static int f_fsync(int fd, void *user) {
    fault *f = user;
    if (fault_hit(f, "fsync")) return -1;
    return f->real.fsync(fd, NULL);
}
static int f_close(int fd, void *user) {
    fault *f = user;
    if (fault_hit(f, "close")) {
        f->real.close(fd, NULL); /* a failed close still releases the descriptor */
        errno = EIO;
        return -1;
    }
    return f->real.close(fd, NULL);
}
static int f_rename(const char *from, const char *to, void *user) {
    fault *f = user;
    f->rename_call = f->calls + 1;
    if (fault_hit(f, "rename")) return -1;
    return f->real.rename(from, to, NULL);
}
static int f_open_dir(const char *path, void *user) {
    fault *f = user;
    if (fault_hit(f, "open_dir")) return -1;
    return f->real.open_dir(path, NULL);
}

static tg_ckpt_io fault_io(fault *f) {
    memset(f, 0, sizeof *f);
    f->real = tg_ckpt_io_posix();
    return (tg_ckpt_io){f_create, f_write, f_fsync, f_close, f_rename, f_open_dir, NULL, f};
}

/* Fails each write point in turn while overwriting checkpoint A with B:
 * before the rename the file still loads as A, after it as B; never a temp
 * file left behind, never a leaked descriptor. */
START_TEST(test_atomic_save_faults) {
    tg_params a, b, out;
    make_model(&a);
    make_model(&b);
    make_model(&out);
    fill(&a, 1.0);
    fill(&b, 2.0);
    const char *p = path_in("ckpt.safetensors");
    fault f;
    tg_ckpt_io io = fault_io(&f);
    tg_ckpt_options opt = {.io = &io};
    int points = 0;
    for (int k = 1; k < 100; k++) {
        expect_ok(tg_ckpt_save(ctx, p, &a, NULL, NULL));
        int fds = open_fds();
        io = fault_io(&f);
        f.fail_at = k;
        tg_status st = tg_ckpt_save_ex(ctx, p, &b, NULL, NULL, &opt);
        ck_assert_int_eq(open_fds(), fds);
        if (f.failed_op[0] == '\0') { /* k is past the last write point */
            expect_ok(st);
            expect_ok(tg_ckpt_load(ctx, p, &out, NULL, NULL));
            ck_assert(has_values(&out, 2.0));
            break;
        }
        points++;
        bool after_rename = f.rename_call && k > f.rename_call;
        expect_error(st, TG_ERR_IO, "tg_ckpt_save_ex", after_rename ? "of the folder" : "the old file is unchanged");
        /* the created temporary sat beside the target */
        ck_assert(strncmp(f.created, p, strlen(p)) == 0 && strncmp(f.created + strlen(p), ".tmp-", 5) == 0);
        char names[512];
        ck_assert_int_eq(files_in_dir(names, sizeof names), 1);
        ck_assert_str_eq(names, "ckpt.safetensors ");
        fill(&out, 0.0);
        expect_ok(tg_ckpt_load(ctx, p, &out, NULL, NULL));
        ck_assert_msg(has_values(&out, after_rename ? 2.0 : 1.0), "failing %s (call %d)", f.failed_op, k);
    }
    /* create, header + 4 tensor writes, fsync, close, rename, open_dir, fsync, close */
    ck_assert_int_eq(points, 12);
    tg_params_free(&a);
    tg_params_free(&b);
    tg_params_free(&out);
}
END_TEST

/* A first save that fails leaves no file at all. */
START_TEST(test_atomic_first_save_faults) {
    tg_params a;
    make_model(&a);
    const char *p = path_in("new.safetensors");
    fault f;
    tg_ckpt_io io = fault_io(&f);
    tg_ckpt_options opt = {.io = &io};
    for (int k = 1;; k++) {
        io = fault_io(&f);
        f.fail_at = k;
        tg_status st = tg_ckpt_save_ex(ctx, p, &a, NULL, NULL, &opt);
        if (strcmp(f.failed_op, "rename") == 0 || f.failed_op[0] == '\0') break;
        expect_error(st, TG_ERR_IO, f.failed_op, NULL);
        char names[256];
        ck_assert_msg(files_in_dir(names, sizeof names) == 0, "after failing %s: %s", f.failed_op, names);
    }
    tg_clear_error(ctx);
    tg_params_free(&a);
}
END_TEST

/* Short writes and EINTR give the same file as plain writes. */
START_TEST(test_short_writes) {
    tg_params a;
    make_model(&a);
    fill(&a, 0.5);
    tg_meta meta = {0};
    ck_assert(tg_meta_set(ctx, &meta, "k", "v"));
    const char *p = path_in("plain.safetensors"), *q = path_in("short.safetensors");
    expect_ok(tg_ckpt_save(ctx, p, &a, NULL, &meta));
    fault f;
    tg_ckpt_io io = fault_io(&f);
    f.short_writes = 3;
    tg_ckpt_options opt = {.io = &io};
    expect_ok(tg_ckpt_save_ex(ctx, q, &a, NULL, &meta, &opt));
    size_t n1, n2;
    unsigned char *b1 = read_whole(p, &n1), *b2 = read_whole(q, &n2);
    ck_assert_uint_eq(n1, n2);
    ck_assert(memcmp(b1, b2, n1) == 0);
    ck_assert_int_gt(f.calls, (int)(n1 / 3));
    free(b1);
    free(b2);
    tg_meta_free(&meta);
    tg_params_free(&a);
}
END_TEST

/* A stale temporary with our name is left alone; the save picks another. */
START_TEST(test_stale_temporary) {
    tg_params a, b;
    make_model(&a);
    make_model(&b);
    fill(&a, 4.0);
    const char *p = path_in("c.safetensors");
    char stale[600];
    snprintf(stale, sizeof stale, "%s.tmp-%ld-0", p, (long)getpid());
    tg_test_write_file(stale, "stale", 5);
    expect_ok(tg_ckpt_save(ctx, p, &a, NULL, NULL));
    expect_ok(tg_ckpt_load(ctx, p, &b, NULL, NULL));
    ck_assert(has_values(&b, 4.0));
    size_t n;
    unsigned char *s = read_whole(stale, &n);
    ck_assert_uint_eq(n, 5);
    free(s);
    tg_params_free(&a);
    tg_params_free(&b);
}
END_TEST

/* ---- the in-memory loader (what the fuzz target drives) -------------------------- */

START_TEST(test_load_memory) {
    size_t len;
    unsigned char *bytes = build(0, "{" OK_B "," OK_A "}", 16, &len);
    tg_st_put_le64(bytes, len - 8 - 16);
    tg_params m = {0};
    add(&m, "a.w", TG_F32, TG_SHAPE(2));
    add(&m, "b", TG_F64, TG_SHAPE(1));
    expect_ok(tg_st_load_memory(ctx, "fuzz", "<memory>", bytes, len, &m, NULL, NULL, false));
    float w[2];
    memcpy(w, bytes + len - 8, 8);
    ck_assert(tg_get_flat(ctx, m.items[0].value, 1) == (double)w[1]);
    expect_error(tg_st_load_memory(ctx, "fuzz", "<memory>", bytes, len - 1, &m, NULL, NULL, false), TG_ERR_FORMAT,
                 "fuzz: <memory>: ", "out of range");
    expect_error(tg_st_load_memory(ctx, "fuzz", "<memory>", NULL, 3, &m, NULL, NULL, false), TG_ERR_NULL, "no buffer",
                 NULL);
    free(bytes);
    tg_params_free(&m);
}
END_TEST

/* ---- the fuzzer's seed corpus keeps its promises ------------------------------------ */

/* tests/fuzz/corpus/ (tests/fuzz/make_corpus.py): valid-* load into the
 * fuzz target's model (with or without its state list), parse-* are
 * well-formed but do not fit it, bad-* are refused by the parser. */
START_TEST(test_corpus) {
    char cdir[512];
    snprintf(cdir, sizeof cdir, "%s/fuzz/corpus", TG_TEST_DIR);
    DIR *d = opendir(cdir);
    ck_assert_msg(d != NULL, "cannot open %s", cdir);
    tg_params m = {0}, st = {0};
    add(&m, "a.w", TG_F32, TG_SHAPE(2));
    add(&m, "b", TG_F64, TG_SHAPE(1));
    add(&st, "opt.step", TG_F64, 0, NULL);
    int seen[3] = {0, 0, 0};
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *name = e->d_name;
        int kind = strncmp(name, "valid-", 6) == 0   ? 0
                   : strncmp(name, "parse-", 6) == 0 ? 1
                   : strncmp(name, "bad-", 4) == 0   ? 2
                                                     : -1;
        if (kind < 0) continue;
        seen[kind]++;
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", cdir, name);
        size_t n;
        unsigned char *bytes = read_whole(p, &n);
        tg_st_file f;
        tg_st_error err;
        bool parsed = tg_st_parse(&f, bytes, n, &err);
        tg_st_file_free(&f);
        free(bytes);
        ck_assert_msg(parsed == (kind != 2), "%s: parse %s (%s)", name, parsed ? "accepted" : "refused", err.msg);
        tg_ckpt_options opt = {.ignore_extra = true};
        tg_status s1 = tg_ckpt_load(ctx, p, &m, NULL, NULL);
        tg_clear_error(ctx);
        tg_status s2 = tg_ckpt_load_ex(ctx, p, &m, &st, NULL, &opt);
        tg_clear_error(ctx);
        bool loads = s1 == TG_OK || s2 == TG_OK;
        ck_assert_msg(loads == (kind == 0), "%s: statuses %s / %s", name, tg_status_name(s1), tg_status_name(s2));
    }
    closedir(d);
    ck_assert_int_ge(seen[0], 5);
    ck_assert_int_ge(seen[1], 5);
    ck_assert_int_ge(seen[2], 20);
    tg_params_free(&m);
    tg_params_free(&st);
}
END_TEST

/* ---- interop with PyTorch (driven by scripts/interop_torch.py) -------------------- */

/* The values scripts/interop_torch.py writes: element i of the k-th formula
 * tensor is (i % 7) * 0.25 - 0.5 + k, exact in float32. */
static double interop_value(int k, int64_t i) { return (double)(i % 7) * 0.25 - 0.5 + k; }

START_TEST(test_interop) {
    const char *d = getenv("TG_INTEROP_DIR");
    ck_assert_ptr_nonnull(d);
    char in[512], out[512];
    snprintf(in, sizeof in, "%s/from_torch.safetensors", d);
    snprintf(out, sizeof out, "%s/from_tapegrad.safetensors", d);
    tg_params m = {0};
    tg_tensor *f[4];
    f[0] = add(&m, "embed.weight", TG_F32, TG_SHAPE(5, 3));
    f[1] = add(&m, "blocks.0.norm.gamma", TG_F32, TG_SHAPE(3));
    f[2] = add(&m, "head.weight", TG_F64, TG_SHAPE(2, 3));
    f[3] = add(&m, "head.bias", TG_F64, TG_SHAPE(2));
    tg_tensor *specials = add(&m, "specials", TG_F32, TG_SHAPE(5));
    add(&m, "noise", TG_F32, TG_SHAPE(4, 4));
    add(&m, "noise64", TG_F64, TG_SHAPE(3, 2));
    add(&m, "scalar", TG_F64, 0, NULL);
    tg_meta meta = {0};
    expect_ok(tg_ckpt_load(ctx, in, &m, NULL, &meta));
    for (int k = 0; k < 4; k++)
        for (int64_t i = 0; i < f[k]->numel; i++)
            ck_assert_msg(tg_get_flat(ctx, f[k], i) == interop_value(k, i), "%s[%lld]", m.items[k].name, (long long)i);
    /* -0.0, inf, -inf, NaN, the smallest subnormal: by their bits */
    const uint32_t want[5] = {0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0x00000001u};
    ck_assert(memcmp(specials->data, want, sizeof want) == 0);
    ck_assert(tg_get_flat(ctx, m.items[7].value, 0) == 3.25);
    ck_assert_str_eq(tg_meta_get(&meta, "source"), "torch");
    ck_assert(tg_meta_set(ctx, &meta, "written_by", "tapegrad"));
    expect_ok(tg_ckpt_save(ctx, out, &m, NULL, &meta));
    tg_meta_free(&meta);
    tg_params_free(&m);
}
END_TEST

Suite *make_checkpoint_suite(void) {
    Suite *s = suite_create("checkpoint");
    tg_test_tcase(s, "roundtrip", setup, teardown, test_roundtrip_values, test_roundtrip_bits, test_exact_bytes,
                  test_shapes_and_layout, test_metadata_roundtrip, test_training_state, test_rng_state, test_meta_api,
                  test_argument_errors, test_load_memory, NULL);
    TCase *tb = tg_test_tcase(s, "validation", setup, teardown, test_every_truncation, test_corpus, NULL);
    tcase_add_loop_test(tb, test_bad_file, 0, (int)(sizeof bad_files / sizeof *bad_files));
    tg_test_tcase(s, "atomic", setup, teardown, test_atomic_save_faults, test_atomic_first_save_faults,
                  test_short_writes, test_stale_temporary, NULL);
    if (getenv("TG_INTEROP_DIR")) {
        tg_test_tcase(s, "interop", setup, teardown, test_interop, NULL);
    }
    return s;
}

int main(void) { return tg_test_run(make_checkpoint_suite()); }

/* libFuzzer target for the checkpoint loader. Built and run by
 * scripts/fuzz.sh (clang, -fsanitize=fuzzer,address,undefined); seeds in
 * tests/fuzz/corpus/ (made by tests/fuzz/make_corpus.py).
 *
 * For each input it checks, beyond "no crash, no leak, no UB":
 *  1. tg_st_parse either refuses it with a message, or accepts a file whose
 *     tensors tile the data section exactly;
 *  2. an accepted file written back out (tg_st_write) parses again to the
 *     same tensors (names, dtypes, shapes, bytes) and metadata;
 *  3. loading it into a small model (tg_st_load_memory, the code path of
 *     tg_ckpt_load) either succeeds with the file's bytes in every
 *     parameter, or fails with a message and leaves every parameter and the
 *     metadata list exactly as they were.
 * A broken invariant calls abort(), which libFuzzer reports as a crash. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"
#include "tapegrad.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static tg_ctx *ctx;
static tg_params params; /* "a.w" F32 (2,), "b" F64 (1,) */
static tg_params state;  /* "opt.step" F64 () */

#define CHECK(cond)                                                                          \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            fprintf(stderr, "fuzz_load: invariant failed: %s (line %d)\n", #cond, __LINE__); \
            abort();                                                                         \
        }                                                                                    \
    } while (0)

static tg_tensor *add(tg_params *list, const char *name, tg_dtype dtype, int ndim, const int64_t *shape) {
    tg_tensor *t = tg_persist(ctx, tg_zeros(ctx, dtype, ndim, shape));
    CHECK(t && tg_params_add(ctx, list, NULL, name, t, false));
    return t;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    ctx = tg_ctx_new(1);
    CHECK(ctx);
    add(&params, "a.w", TG_F32, TG_SHAPE(2));
    add(&params, "b", TG_F64, TG_SHAPE(1));
    add(&state, "opt.step", TG_F64, 0, NULL);
    return 0;
}

/* ---- 2. write back and parse again ---------------------------------------- */

typedef struct membuf {
    uint8_t *p;
    size_t len, cap;
} membuf;

static bool mem_sink(void *user, const void *bytes, size_t n) {
    membuf *m = user;
    if (n > m->cap - m->len) {
        size_t cap = m->cap ? m->cap : 256;
        while (cap - m->len < n) cap *= 2;
        uint8_t *p = realloc(m->p, cap);
        if (!p) return false;
        m->p = p;
        m->cap = cap;
    }
    memcpy(m->p + m->len, bytes, n);
    m->len += n;
    return true;
}

static void check_rewrite(const tg_st_file *f) {
    membuf out = {0};
    tg_st_error err;
    CHECK(tg_st_write(mem_sink, &out, f->tensors, f->count, f->meta, f->meta_count, false, &err));
    CHECK((out.len - f->data_len) % 8 == 0); /* the header is padded to 8 */
    tg_st_file g;
    CHECK(tg_st_parse(&g, out.p, out.len, &err));
    CHECK(g.header_len % 8 == 0);
    CHECK(g.count == f->count && g.meta_count == f->meta_count && g.data_len == f->data_len);
    for (size_t i = 0; i < f->count; i++) {
        const tg_st_tensor *a = &f->tensors[i], *b = &g.tensors[i];
        CHECK(a->name_len == b->name_len && memcmp(a->name, b->name, a->name_len) == 0);
        CHECK(a->dtype == b->dtype && a->ndim == b->ndim && a->nbytes == b->nbytes);
        CHECK(memcmp(a->shape, b->shape, sizeof a->shape) == 0);
        CHECK(a->nbytes == 0 || memcmp(a->data, b->data, (size_t)a->nbytes) == 0);
    }
    for (size_t i = 0; i < f->meta_count; i++) {
        CHECK(strcmp(f->meta[i].key, g.meta[i].key) == 0);
        CHECK(strcmp(f->meta[i].value, g.meta[i].value) == 0);
    }
    tg_st_file_free(&g);
    free(out.p);
}

/* ---- 3. load into the model ------------------------------------------------- */

static void fill(tg_params *list, uint8_t v) {
    for (int k = 0; k < list->count; k++) {
        tg_tensor *t = list->items[k].value;
        memset(t->data, v, (size_t)t->numel * tg_dtype_size(t->dtype));
    }
}

static bool all_bytes(const tg_params *list, uint8_t v) {
    for (int k = 0; k < list->count; k++) {
        const tg_tensor *t = list->items[k].value;
        const uint8_t *p = t->data;
        for (size_t i = 0; i < (size_t)t->numel * tg_dtype_size(t->dtype); i++)
            if (p[i] != v) return false;
    }
    return true;
}

/* After a successful load, each parameter holds its file tensor's bytes. */
static void check_loaded(const tg_params *list, const tg_st_file *f) {
    for (int k = 0; k < list->count; k++) {
        const tg_tensor *t = list->items[k].value;
        const tg_st_tensor *ft = NULL;
        for (size_t i = 0; i < f->count; i++)
            if (f->tensors[i].name_len == strlen(list->items[k].name) &&
                memcmp(f->tensors[i].name, list->items[k].name, f->tensors[i].name_len) == 0)
                ft = &f->tensors[i];
        CHECK(ft && ft->dtype == t->dtype && ft->nbytes == (uint64_t)t->numel * tg_dtype_size(t->dtype));
        CHECK(ft->ndim == t->ndim);
        for (int d = 0; d < t->ndim; d++) CHECK(ft->shape[d] == t->shape[d]);
        CHECK(memcmp(t->data, ft->data, (size_t)ft->nbytes) == 0); /* little-endian host */
    }
}

/* After a strict successful load, every tensor of the file is in a list. */
static void check_no_extra(const tg_st_file *f, tg_params *a, tg_params *b) {
    for (size_t i = 0; i < f->count; i++) {
        char name[64];
        CHECK(f->tensors[i].name_len < sizeof name && strlen(f->tensors[i].name) == f->tensors[i].name_len);
        memcpy(name, f->tensors[i].name, f->tensors[i].name_len + 1);
        CHECK(tg_params_find(a, name) || (b && tg_params_find(b, name)));
    }
}

static void try_load(const uint8_t *data, size_t size, const tg_st_file *f, bool with_state, bool ignore_extra) {
    tg_meta meta = {0};
    CHECK(tg_meta_set(ctx, &meta, "sentinel", "kept on failure"));
    fill(&params, 0xA5);
    fill(&state, 0xA5);
    tg_status st =
        tg_st_load_memory(ctx, "fuzz", "<input>", data, size, &params, with_state ? &state : NULL, &meta, ignore_extra);
    if (st == TG_OK) {
        CHECK(tg_ok(ctx) && f != NULL);
        check_loaded(&params, f);
        if (with_state) check_loaded(&state, f);
        if (!ignore_extra) check_no_extra(f, &params, with_state ? &state : NULL);
        CHECK(meta.count == (int)f->meta_count); /* replaced by the file's */
        for (size_t i = 0; i < f->meta_count; i++)
            CHECK(strcmp(tg_meta_get(&meta, f->meta[i].key), f->meta[i].value) == 0);
    } else {
        CHECK(tg_status_of(ctx) == st);
        CHECK(strncmp(tg_error_message(ctx), "fuzz: <input>: ", 15) == 0);
        CHECK(all_bytes(&params, 0xA5) && all_bytes(&state, 0xA5));
        CHECK(meta.count == 1 && strcmp(tg_meta_get(&meta, "sentinel"), "kept on failure") == 0);
        tg_clear_error(ctx);
    }
    tg_meta_free(&meta);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tg_st_file f;
    tg_st_error err;
    bool ok = tg_st_parse(&f, data, size, &err);
    if (!ok) {
        CHECK(err.status != TG_OK && err.msg[0] != '\0');
    } else {
        /* 1. the tensors tile the data section */
        uint64_t total = 0;
        for (size_t i = 0; i < f.count; i++) {
            CHECK(f.tensors[i].end <= f.data_len && f.tensors[i].end - f.tensors[i].begin == f.tensors[i].nbytes);
            total += f.tensors[i].nbytes;
        }
        CHECK(total == f.data_len);
        CHECK(8 + f.header_len + f.data_len == size);
        check_rewrite(&f);
    }
    try_load(data, size, ok ? &f : NULL, false, false);
    try_load(data, size, ok ? &f : NULL, true, true);
    if (ok) tg_st_file_free(&f);
    return 0;
}

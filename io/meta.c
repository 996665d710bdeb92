/* Checkpoint metadata: the tg_meta string list (include/tapegrad/io.h),
 * stored as a safetensors file's "__metadata__" by io/checkpoint.c and
 * read back by io/safetensors.c.
 *
 * Every block of a list (the array, each key and each value) comes from one
 * allocator, remembered in meta->alloc_: that of the context that first
 * stored something in it. So tg_meta_free needs no context, and a list
 * filled through a context made with tg_ctx_new_with_allocator never
 * touches malloc. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "io/json.h"
#include "io/safetensors.h"
#include "tensor/internal.h"

/* The list's allocator, taken from the context when the list has none yet. */
static const tg_allocator *meta_alloc(tg_ctx *ctx, tg_meta *meta) {
    if (!meta->alloc_.alloc) meta->alloc_ = ctx->alloc;
    return &meta->alloc_;
}

static char *dup_str(const tg_allocator *a, const char *s) {
    size_t n = strlen(s) + 1;
    char *d = tg_io_alloc(a, n);
    if (d) memcpy(d, s, n);
    return d;
}

static tg_meta_item *meta_find(const tg_meta *meta, const char *key) {
    for (int i = 0; i < meta->count; i++)
        if (strcmp(meta->items[i].key, key) == 0) return &meta->items[i];
    return NULL;
}

bool tg_meta_set(tg_ctx *ctx, tg_meta *meta, const char *key, const char *value) {
    if (!tg_check_ptr(ctx, __func__, "meta", meta) || !tg_check_ptr(ctx, __func__, "key", key) ||
        !tg_check_ptr(ctx, __func__, "value", value))
        return false;
    if (!tg_utf8_valid(key, strlen(key)) || !tg_utf8_valid(value, strlen(value))) {
        char q[80];
        tg_error(ctx, TG_ERR_VALUE, __func__, "the %s of key \"%s\" is not valid UTF-8",
                 tg_utf8_valid(key, strlen(key)) ? "value" : "name", tg_json_quote(q, sizeof q, key, strlen(key)));
        return false;
    }
    const tg_allocator *a = meta_alloc(ctx, meta);
    char *v = dup_str(a, value);
    if (!v) {
        tg_error(ctx, TG_ERR_OOM, __func__, "out of memory");
        return false;
    }
    tg_meta_item *old = meta_find(meta, key);
    if (old) {
        tg_io_free(a, old->value);
        old->value = v;
        return true;
    }
    if (meta->count == meta->capacity) {
        int cap = meta->capacity ? meta->capacity * 2 : 8;
        tg_meta_item *items = meta->capacity < (1 << 28) ? tg_io_alloc(a, (size_t)cap * sizeof *items) : NULL;
        if (!items) {
            tg_io_free(a, v);
            tg_error(ctx, TG_ERR_OOM, __func__, "out of memory");
            return false;
        }
        if (meta->count) memcpy(items, meta->items, (size_t)meta->count * sizeof *items);
        tg_io_free(a, meta->items);
        meta->items = items;
        meta->capacity = cap;
    }
    char *k = dup_str(a, key);
    if (!k) {
        tg_io_free(a, v);
        tg_error(ctx, TG_ERR_OOM, __func__, "out of memory");
        return false;
    }
    meta->items[meta->count++] = (tg_meta_item){k, v};
    return true;
}

bool tg_meta_set_u64(tg_ctx *ctx, tg_meta *meta, const char *key, uint64_t value) {
    char buf[24];
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)value);
    return tg_meta_set(ctx, meta, key, buf);
}

const char *tg_meta_get(const tg_meta *meta, const char *key) {
    if (!meta || !key) return NULL;
    tg_meta_item *it = meta_find(meta, key);
    return it ? it->value : NULL;
}

bool tg_meta_get_u64(tg_ctx *ctx, const tg_meta *meta, const char *key, uint64_t *value) {
    if (!tg_check_ptr(ctx, __func__, "meta", meta) || !tg_check_ptr(ctx, __func__, "key", key) ||
        !tg_check_ptr(ctx, __func__, "value", value))
        return false;
    const char *s = tg_meta_get(meta, key);
    if (!s) {
        tg_error(ctx, TG_ERR_VALUE, __func__, "no metadata key \"%s\"", key);
        return false;
    }
    uint64_t v = 0;
    bool ok = *s != '\0';
    for (const char *c = s; ok && *c; c++) {
        unsigned d = (unsigned)(*c - '0');
        ok = *c >= '0' && *c <= '9' && v <= (UINT64_MAX - d) / 10;
        v = v * 10 + d;
    }
    if (!ok) {
        char q[80];
        tg_error(ctx, TG_ERR_FORMAT, __func__, "metadata \"%s\" = \"%s\" is not a decimal number below 2^64", key,
                 tg_json_quote(q, sizeof q, s, strlen(s)));
        return false;
    }
    *value = v;
    return true;
}

bool tg_meta_copy_kv(tg_ctx *ctx, tg_meta *out, const tg_st_kv *kv, size_t n) {
    memset(out, 0, sizeof *out);
    if (n == 0) return true;
    if (n > (size_t)INT32_MAX) return false;
    const tg_allocator *a = meta_alloc(ctx, out);
    out->items = tg_io_calloc(a, n, sizeof *out->items);
    if (!out->items) return false;
    out->capacity = (int)n;
    for (size_t i = 0; i < n; i++) {
        out->items[i].key = dup_str(a, kv[i].key);
        out->items[i].value = dup_str(a, kv[i].value);
        out->count++;
        if (!out->items[i].key || !out->items[i].value) {
            tg_meta_free(out);
            return false;
        }
    }
    return true;
}

/* A hand-built list (alloc_ all zero) is taken to own malloc'd strings. */
void tg_meta_free(tg_meta *meta) {
    if (!meta) return;
    const tg_allocator *a = &meta->alloc_;
    for (int i = 0; i < meta->count; i++) {
        tg_io_free(a, meta->items[i].key);
        tg_io_free(a, meta->items[i].value);
    }
    tg_io_free(a, meta->items);
    memset(meta, 0, sizeof *meta);
}

#define TG_META_RNG_SEED "tapegrad.rng.seed"
#define TG_META_RNG_OFFSET "tapegrad.rng.offset"

bool tg_meta_set_rng(tg_ctx *ctx, tg_meta *meta) {
    if (!tg_ok(ctx)) return false;
    uint64_t seed, offset;
    tg_rng_state(ctx, &seed, &offset);
    return tg_meta_set_u64(ctx, meta, TG_META_RNG_SEED, seed) && tg_meta_set_u64(ctx, meta, TG_META_RNG_OFFSET, offset);
}

bool tg_meta_get_rng(tg_ctx *ctx, const tg_meta *meta) {
    uint64_t seed, offset;
    if (!tg_meta_get_u64(ctx, meta, TG_META_RNG_SEED, &seed) ||
        !tg_meta_get_u64(ctx, meta, TG_META_RNG_OFFSET, &offset))
        return false;
    tg_rng_set_state(ctx, seed, offset);
    return true;
}

/* Checkpoint metadata: the tg_meta string list (include/tapegrad/io.h),
 * stored as a safetensors file's "__metadata__" by io/checkpoint.c and
 * read back by io/safetensors.c. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/json.h"
#include "tensor/internal.h"

static char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

static tg_meta_item *meta_find(const tg_meta *meta, const char *key) {
    for (int i = 0; i < meta->count; i++)
        if (strcmp(meta->items[i].key, key) == 0) return &meta->items[i];
    return NULL;
}

bool tg_meta_set(tg_ctx *ctx, tg_meta *meta, const char *key, const char *value) {
    if (!tg_ok(ctx)) return false;
    if (!meta || !key || !value) {
        tg_error(ctx, TG_ERR_NULL, __func__, "argument '%s' is NULL", !meta ? "meta" : !key ? "key" : "value");
        return false;
    }
    if (!tg_utf8_valid(key, strlen(key)) || !tg_utf8_valid(value, strlen(value))) {
        char q[80];
        tg_error(ctx, TG_ERR_VALUE, __func__, "the %s of key \"%s\" is not valid UTF-8",
                 tg_utf8_valid(key, strlen(key)) ? "value" : "name",
                 tg_json_quote(q, sizeof q, key, strlen(key)));
        return false;
    }
    char *v = dup_str(value);
    if (!v) {
        tg_error(ctx, TG_ERR_OOM, __func__, "out of memory");
        return false;
    }
    tg_meta_item *old = meta_find(meta, key);
    if (old) {
        free(old->value);
        old->value = v;
        return true;
    }
    if (meta->count == meta->capacity) {
        int cap = meta->capacity ? meta->capacity * 2 : 8;
        tg_meta_item *items =
            meta->capacity < (1 << 28) ? realloc(meta->items, (size_t)cap * sizeof *items) : NULL;
        if (!items) {
            free(v);
            tg_error(ctx, TG_ERR_OOM, __func__, "out of memory");
            return false;
        }
        meta->items = items;
        meta->capacity = cap;
    }
    char *k = dup_str(key);
    if (!k) {
        free(v);
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
    if (!tg_ok(ctx)) return false;
    if (!meta || !key || !value) {
        tg_error(ctx, TG_ERR_NULL, __func__, "argument '%s' is NULL", !meta ? "meta" : !key ? "key" : "value");
        return false;
    }
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

void tg_meta_free(tg_meta *meta) {
    if (!meta) return;
    for (int i = 0; i < meta->count; i++) {
        free(meta->items[i].key);
        free(meta->items[i].value);
    }
    free(meta->items);
    memset(meta, 0, sizeof *meta);
}

#define TG_META_RNG_SEED "tapegrad.rng.seed"
#define TG_META_RNG_OFFSET "tapegrad.rng.offset"

bool tg_meta_set_rng(tg_ctx *ctx, tg_meta *meta) {
    if (!tg_ok(ctx)) return false;
    uint64_t seed, offset;
    tg_rng_state(ctx, &seed, &offset);
    return tg_meta_set_u64(ctx, meta, TG_META_RNG_SEED, seed) &&
           tg_meta_set_u64(ctx, meta, TG_META_RNG_OFFSET, offset);
}

bool tg_meta_get_rng(tg_ctx *ctx, const tg_meta *meta) {
    uint64_t seed, offset;
    if (!tg_meta_get_u64(ctx, meta, TG_META_RNG_SEED, &seed) ||
        !tg_meta_get_u64(ctx, meta, TG_META_RNG_OFFSET, &offset))
        return false;
    tg_rng_set_state(ctx, seed, offset);
    return true;
}


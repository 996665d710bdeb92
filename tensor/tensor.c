/* Views, copies, dtype conversion and element access. */
#include "tensor/internal.h"

#include <math.h>
#include <string.h>

size_t tg_dtype_size(tg_dtype dtype) { return tg_esize(dtype); }

const char *tg_dtype_name(tg_dtype dtype) {
    switch (dtype) {
    case TG_F32: return "float32";
    case TG_F64: return "float64";
    case TG_BF16: return "bfloat16";
    case TG_F16: return "float16";
    }
    return "unknown";
}

bool tg_same_shape(const tg_tensor *a, const tg_tensor *b) {
    if (!a || !b || a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

char *tg_shape_str(char *buf, size_t size, int ndim, const int64_t *shape) {
    if (!buf || size == 0) return buf;
    size_t n = 0;
    buf[0] = '\0';
#define PUT(...)                                              \
    do {                                                      \
        if (n < size) {                                       \
            int k = snprintf(buf + n, size - n, __VA_ARGS__); \
            if (k > 0) n += (size_t)k;                        \
        }                                                     \
    } while (0)
    PUT("(");
    for (int i = 0; shape && i < ndim && i < TG_MAX_DIMS + 8; i++) PUT(i ? ", %lld" : "%lld", (long long)shape[i]);
    if (ndim == 1) PUT(",");
    PUT(")");
#undef PUT
    buf[size - 1] = '\0';
    return buf;
}

bool tg_infer_shape(tg_ctx *ctx, const char *fn, const tg_tensor *t, int ndim, const int64_t *shape,
                    int64_t out[TG_MAX_DIMS]) {
    if (ndim < 0 || ndim > TG_MAX_DIMS) {
        tg_error(ctx, TG_ERR_SHAPE, fn, "ndim %d is outside 0..%d", ndim, TG_MAX_DIMS);
        return false;
    }
    if (ndim > 0 && !shape) {
        tg_null_error(ctx, fn, "shape");
        return false;
    }
    char why[96]; /* what is wrong, if anything */
    why[0] = '\0';
    int infer = -1;
    int64_t known = 1; /* the product of the sizes other than the -1 */
    bool overflow = false;
    for (int i = 0; i < ndim && !why[0]; i++) {
        out[i] = shape[i];
        if (shape[i] == -1 && infer < 0) infer = i;
        else if (shape[i] == -1) snprintf(why, sizeof why, ": more than one -1");
        else if (shape[i] < 0) snprintf(why, sizeof why, ": negative size %lld in dim %d", (long long)shape[i], i);
        else if (shape[i] != 0 && known > INT64_MAX / shape[i]) overflow = true;
        else known *= shape[i];
    }
    const long long n = (long long)t->numel, k = (long long)known;
    if (why[0]) {
        /* said above */
    } else if (overflow) {
        snprintf(why, sizeof why, ": the sizes' product overflows int64");
    } else if (infer >= 0 && known == 0) {
        snprintf(why, sizeof why, ": a -1 beside a size 0 is ambiguous");
    } else if (infer >= 0 && n % k != 0) {
        snprintf(why, sizeof why, ": %lld is not a multiple of %lld", n, k);
    } else if (infer < 0 && known != t->numel) {
        snprintf(why, sizeof why, " (numel %lld)", k);
    } else {
        if (infer >= 0) out[infer] = t->numel / known;
        return true;
    }
    char so[TG_SHAPE_STR], sn[TG_SHAPE_STR];
    tg_error(ctx, TG_ERR_SHAPE, fn, "cannot %s %s (numel %lld) as %s%s", strncmp(fn, "tg_", 3) ? fn : fn + 3,
             tg_shape_of(so, t), n, tg_shape_str(sn, sizeof sn, ndim, shape), why);
    return false;
}

tg_tensor *tg_view(tg_ctx *ctx, tg_tensor *t, int ndim, const int64_t *shape) {
    if (!tg_check_arg_any(ctx, __func__, "t", t)) return NULL;
    int64_t s[TG_MAX_DIMS];
    if (!tg_infer_shape(ctx, __func__, t, ndim, shape, s)) return NULL;
    tg_tensor *v = tg_arena_alloc_fn(ctx, __func__, sizeof(tg_tensor_impl));
    if (!v) return NULL;
    memset(v, 0, sizeof(tg_tensor_impl));
    v->dtype = t->dtype;
    v->ndim = ndim;
    for (int i = 0; i < TG_MAX_DIMS; i++) v->shape[i] = i < ndim ? s[i] : 1;
    v->numel = t->numel;
    v->data = t->data;
    tg_impl(v)->base = tg_root(t); /* shares t's data, so t's version counter */
    tg_impl(v)->node = -1;
    tg_impl(v)->epoch = ctx->epoch;
    tg_impl(v)->ctx = ctx;
    return v;
}

tg_tensor *tg_copy(tg_ctx *ctx, const tg_tensor *t) {
    if (!tg_check_arg_any(ctx, "tg_copy", "t", t)) return NULL;
    tg_tensor *c = tg_new_like(ctx, "tg_copy", t);
    if (c && t->numel) memcpy(c->data, t->data, (size_t)t->numel * tg_esize(t->dtype));
    return c;
}

tg_tensor *tg_to_dtype(tg_ctx *ctx, const tg_tensor *t, tg_dtype dtype) {
    if (!tg_check_arg_any(ctx, "tg_to_dtype", "t", t)) return NULL;
    tg_tensor *c = tg_new_tensor(ctx, "tg_to_dtype", dtype, t->ndim, t->shape);
    if (c) tg_convert_n(c->data, dtype, t->data, t->dtype, (size_t)t->numel);
    return c;
}

tg_tensor *tg_assign(tg_ctx *ctx, tg_tensor *dst, const tg_tensor *src) {
    if (!tg_check_arg_any(ctx, __func__, "dst", dst) || !tg_check_arg_any(ctx, __func__, "src", src)) return NULL;
    if (!tg_check_same_dtype(ctx, __func__, dst, src) || !tg_check_same_shape(ctx, __func__, dst, src)) return NULL;
    if (dst->data != src->data && dst->numel) memmove(dst->data, src->data, (size_t)dst->numel * tg_esize(dst->dtype));
    tg_written(dst);
    return dst;
}

void tg_fill(tg_ctx *ctx, tg_tensor *t, double value) {
    if (!tg_check_arg_any(ctx, "tg_fill", "t", t)) return;
    for (int64_t i = 0; i < t->numel; i++) tg_store(t, i, value);
    tg_written(t);
}

/* Flat index of a multi-index, or -1 (with an error) when out of range. */
static int64_t flat_index(tg_ctx *ctx, const char *fn, const tg_tensor *t, const int64_t *index) {
    if (t->ndim > 0 && !index) {
        tg_null_error(ctx, fn, "index");
        return -1;
    }
    int64_t f = 0;
    for (int i = 0; i < t->ndim; i++) {
        if (index[i] < 0 || index[i] >= t->shape[i]) {
            char s[TG_SHAPE_STR];
            tg_error(ctx, TG_ERR_INDEX, fn, "index %lld is out of range for dim %d of shape %s", (long long)index[i], i,
                     tg_shape_of(s, t));
            return -1;
        }
        f = f * t->shape[i] + index[i];
    }
    return f;
}

static bool check_flat(tg_ctx *ctx, const char *fn, const tg_tensor *t, int64_t i) {
    if (i >= 0 && i < t->numel) return true;
    char s[TG_SHAPE_STR];
    tg_error(ctx, TG_ERR_INDEX, fn, "flat index %lld is out of range for shape %s (numel %lld)", (long long)i,
             tg_shape_of(s, t), (long long)t->numel);
    return false;
}

double tg_get(tg_ctx *ctx, const tg_tensor *t, const int64_t *index) {
    if (!tg_check_arg_any(ctx, "tg_get", "t", t)) return NAN;
    int64_t f = flat_index(ctx, "tg_get", t, index);
    return f < 0 ? NAN : tg_load(t, f);
}

void tg_set(tg_ctx *ctx, tg_tensor *t, const int64_t *index, double value) {
    if (!tg_check_arg_any(ctx, "tg_set", "t", t)) return;
    int64_t f = flat_index(ctx, "tg_set", t, index);
    if (f < 0) return;
    tg_store(t, f, value);
    tg_written(t);
}

double tg_get_flat(tg_ctx *ctx, const tg_tensor *t, int64_t i) {
    if (!tg_check_arg_any(ctx, "tg_get_flat", "t", t)) return NAN;
    return check_flat(ctx, "tg_get_flat", t, i) ? tg_load(t, i) : NAN;
}

void tg_set_flat(tg_ctx *ctx, tg_tensor *t, int64_t i, double value) {
    if (!tg_check_arg_any(ctx, "tg_set_flat", "t", t)) return;
    if (!check_flat(ctx, "tg_set_flat", t, i)) return;
    tg_store(t, i, value);
    tg_written(t);
}

/* t's data, checked to be of dtype `want`. */
static void *typed_data(tg_ctx *ctx, const char *fn, tg_tensor *t, tg_dtype want) {
    if (!tg_check_arg_any(ctx, fn, "t", t)) return NULL;
    if (t->dtype != want) {
        tg_error(ctx, TG_ERR_DTYPE, fn, "tensor is %s, not %s", tg_dtype_name(t->dtype), tg_dtype_name(want));
        return NULL;
    }
    return t->data;
}

float *tg_data_f32(tg_ctx *ctx, tg_tensor *t) { return typed_data(ctx, __func__, t, TG_F32); }
double *tg_data_f64(tg_ctx *ctx, tg_tensor *t) { return typed_data(ctx, __func__, t, TG_F64); }
uint16_t *tg_data_bf16(tg_ctx *ctx, tg_tensor *t) { return typed_data(ctx, __func__, t, TG_BF16); }
uint16_t *tg_data_f16(tg_ctx *ctx, tg_tensor *t) { return typed_data(ctx, __func__, t, TG_F16); }

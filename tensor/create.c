/* Making tensors: arena allocation, creation functions, persistence. */
#include "tensor/internal.h"

#include <math.h>
#include <string.h>

/* Largest numel we accept: keeps numel * 8 and the header well inside
 * size_t and ptrdiff_t. */
#define TG_MAX_NUMEL ((int64_t)1 << 56)

bool tg_check_shape(tg_ctx *ctx, const char *fn, int ndim, const int64_t *shape, int64_t *numel) {
    if (!tg_ok(ctx)) return false;
    if (ndim < 0 || ndim > TG_MAX_DIMS) {
        tg_error(ctx, TG_ERR_SHAPE, fn, "ndim %d is outside 0..%d", ndim, TG_MAX_DIMS);
        return false;
    }
    if (ndim > 0 && !shape) {
        tg_null_error(ctx, fn, "shape");
        return false;
    }
    int64_t n = 1;
    bool overflow = false;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) {
            char s[TG_SHAPE_STR];
            tg_error(ctx, TG_ERR_SHAPE, fn, "negative size %lld in dim %d of shape %s", (long long)shape[i], i,
                     tg_shape_str(s, sizeof s, ndim, shape));
            return false;
        }
        if (shape[i] != 0 && n > TG_MAX_NUMEL / shape[i]) overflow = true;
        else n *= shape[i];
    }
    if (overflow) {
        /* a zero anywhere makes the product 0, which is fine */
        for (int i = 0; i < ndim; i++)
            if (shape[i] == 0) overflow = false;
        if (overflow) {
            char s[TG_SHAPE_STR];
            tg_error(ctx, TG_ERR_OOM, fn, "shape %s has more than 2^56 elements",
                     tg_shape_str(s, sizeof s, ndim, shape));
            return false;
        }
        n = 0;
    }
    if (numel) *numel = n;
    return true;
}

tg_tensor *tg_new_tensor(tg_ctx *ctx, const char *fn, tg_dtype dtype, int ndim, const int64_t *shape) {
    if (!tg_ok(ctx)) return NULL;
    if (dtype != TG_F32 && dtype != TG_F64 && dtype != TG_BF16 && dtype != TG_F16) {
        tg_error(ctx, TG_ERR_DTYPE, fn, "unknown dtype %d", (int)dtype);
        return NULL;
    }
    int64_t numel;
    if (!tg_check_shape(ctx, fn, ndim, shape, &numel)) return NULL;
    size_t bytes = (size_t)numel * tg_esize(dtype);
    unsigned char *mem = tg_arena_alloc_fn(ctx, fn, TG_TENSOR_HEAD + bytes);
    if (!mem) return NULL;
    return tg_tensor_init(ctx, mem, dtype, ndim, shape, numel);
}

tg_tensor *tg_tensor_init(const tg_ctx *ctx, void *mem, tg_dtype dtype, int ndim, const int64_t *shape, int64_t numel) {
    tg_tensor *t = mem;
    memset(t, 0, sizeof(tg_tensor_impl));
    t->dtype = dtype;
    t->ndim = ndim;
    /* Two plain loops: a single `i < ndim ? shape[i] : 1` loop becomes a
     * masked vector load that is very slow when shape is NULL (ndim 0). */
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    for (int i = ndim; i < TG_MAX_DIMS; i++) t->shape[i] = 1;
    t->numel = numel;
    t->data = (unsigned char *)mem + TG_TENSOR_HEAD;
    tg_impl(t)->node = -1;
    tg_impl(t)->epoch = ctx->epoch;
    tg_impl(t)->ctx = ctx;
    return t;
}

static void fill_value(tg_tensor *t, double v) {
    if (t->dtype == TG_F64) {
        double *p = t->data;
        for (int64_t i = 0; i < t->numel; i++) p[i] = v;
    } else if (tg_is_lowp(t->dtype)) {
        uint16_t *p = t->data;
        uint16_t h = t->dtype == TG_BF16 ? tg_f32_to_bf16((float)v) : tg_f32_to_f16((float)v);
        for (int64_t i = 0; i < t->numel; i++) p[i] = h;
    } else {
        float *p = t->data;
        float f = (float)v;
        for (int64_t i = 0; i < t->numel; i++) p[i] = f;
    }
}

tg_tensor *tg_zeros(tg_ctx *ctx, tg_dtype dtype, int ndim, const int64_t *shape) {
    tg_tensor *t = tg_new_tensor(ctx, "tg_zeros", dtype, ndim, shape);
    if (t) memset(t->data, 0, (size_t)t->numel * tg_esize(dtype));
    return t;
}

tg_tensor *tg_ones(tg_ctx *ctx, tg_dtype dtype, int ndim, const int64_t *shape) {
    tg_tensor *t = tg_new_tensor(ctx, "tg_ones", dtype, ndim, shape);
    if (t) fill_value(t, 1.0);
    return t;
}

tg_tensor *tg_full(tg_ctx *ctx, tg_dtype dtype, int ndim, const int64_t *shape, double value) {
    tg_tensor *t = tg_new_tensor(ctx, "tg_full", dtype, ndim, shape);
    if (t) fill_value(t, value);
    return t;
}

tg_tensor *tg_arange(tg_ctx *ctx, tg_dtype dtype, double start, double end, double step) {
    if (!tg_ok(ctx)) return NULL;
    if (!isfinite(start) || !isfinite(end) || !isfinite(step) || step == 0.0) {
        tg_error(ctx, TG_ERR_VALUE, "tg_arange", "start=%g end=%g step=%g: need finite values and step != 0", start,
                 end, step);
        return NULL;
    }
    /* PyTorch: size = ceil((end - start) / step), 0 when negative */
    double n = ceil((end - start) / step);
    if (n < 0) n = 0;
    if (n > 1e15) {
        tg_error(ctx, TG_ERR_OOM, "tg_arange", "start=%g end=%g step=%g gives %.0f elements", start, end, step, n);
        return NULL;
    }
    int64_t shape[1] = {(int64_t)n};
    tg_tensor *t = tg_new_tensor(ctx, "tg_arange", dtype, 1, shape);
    if (!t) return NULL;
    for (int64_t i = 0; i < t->numel; i++) tg_store(t, i, start + (double)i * step);
    return t;
}

tg_tensor *tg_from_buffer(tg_ctx *ctx, tg_dtype dtype, int ndim, const int64_t *shape, const void *data) {
    if (!tg_ok(ctx)) return NULL;
    tg_tensor *t = tg_new_tensor(ctx, "tg_from_buffer", dtype, ndim, shape);
    if (!t) return NULL;
    if (!data && t->numel > 0) {
        tg_null_error(ctx, "tg_from_buffer", "data");
        return NULL;
    }
    if (t->numel) memcpy(t->data, data, (size_t)t->numel * tg_esize(dtype));
    return t;
}

static bool check_finite_pair(tg_ctx *ctx, const char *fn, const char *na, double a, const char *nb, double b) {
    if (isfinite(a) && isfinite(b)) return true;
    tg_error(ctx, TG_ERR_VALUE, fn, "%s=%g and %s=%g must be finite", na, a, nb, b);
    return false;
}

/* Rounding to 16 bits can land a draw on `high`: such an element becomes
 * the 16-bit value just below it (the encodings are ordered like sign and
 * magnitude, so that is one pattern step toward -inf), keeping [low, high). */
static void lowp_half_open(tg_tensor *t, double high) {
    uint16_t *h = t->data;
    for (int64_t i = 0; i < t->numel; i++) {
        if (tg_load(t, i) < high) continue;
        uint16_t b = h[i];
        h[i] = (b & 0x7fffu) == 0 ? 0x8001u : (b & 0x8000u) ? (uint16_t)(b + 1u) : (uint16_t)(b - 1u);
    }
}

tg_tensor *tg_rand(tg_ctx *ctx, tg_dtype dtype, int ndim, const int64_t *shape, double low, double high) {
    if (!tg_ok(ctx)) return NULL;
    if (!check_finite_pair(ctx, "tg_rand", "low", low, "high", high)) return NULL;
    if (!(low <= high)) {
        tg_error(ctx, TG_ERR_VALUE, "tg_rand", "low=%g > high=%g", low, high);
        return NULL;
    }
    tg_tensor *t = tg_new_tensor(ctx, "tg_rand", dtype, ndim, shape);
    if (!t) return NULL;
    double span = high - low;
    if (dtype == TG_F64) {
        double *p = t->data;
        for (int64_t i = 0; i < t->numel; i++) {
            uint32_t x[4];
            tg_rng_block(ctx, (uint64_t)i, x);
            p[i] = low + span * tg_u01_f64(x[0], x[1]);
        }
    } else { /* float32; a 16-bit dtype draws float32 in a scratch buffer, then rounds */
        float *p = tg_is_lowp(dtype)
                       ? tg_arena_alloc_fn(ctx, "tg_rand", (size_t)(t->numel ? t->numel : 1) * sizeof(float))
                       : t->data;
        if (!p) return NULL;
        for (int64_t i = 0; i < t->numel; i++) {
            uint32_t x[4];
            tg_rng_block(ctx, (uint64_t)i, x);
            float u = (float)(x[0] >> 8) * 0x1.0p-24f;
            float v = (float)low + (float)span * u;
            /* rounding can land exactly on high; keep the interval half-open */
            if (v >= (float)high && high > low) v = nextafterf((float)high, (float)low);
            p[i] = v;
        }
        if (tg_is_lowp(dtype)) {
            tg_convert_n(t->data, dtype, p, TG_F32, (size_t)t->numel);
            if (high > low) lowp_half_open(t, high);
        }
    }
    ctx->rng_offset += (uint64_t)t->numel;
    return t;
}

tg_tensor *tg_randn(tg_ctx *ctx, tg_dtype dtype, int ndim, const int64_t *shape, double mean, double std) {
    if (!tg_ok(ctx)) return NULL;
    if (!check_finite_pair(ctx, "tg_randn", "mean", mean, "std", std)) return NULL;
    if (std < 0) {
        tg_error(ctx, TG_ERR_VALUE, "tg_randn", "std=%g is negative", std);
        return NULL;
    }
    tg_tensor *t = tg_new_tensor(ctx, "tg_randn", dtype, ndim, shape);
    if (!t) return NULL;
    for (int64_t i = 0; i < t->numel; i++) {
        uint32_t x[4];
        tg_rng_block(ctx, (uint64_t)i, x);
        tg_store(t, i, mean + std * tg_normal_from_block(x));
    }
    ctx->rng_offset += (uint64_t)t->numel;
    return t;
}

/* ---- persistent tensors -------------------------------------------------
 * A persistent tensor is a tg_persistent (the tensor, then its owner) with
 * its data in a second block; its grad, if any, is a bare tg_tensor_impl with
 * its own data. Both are in the context's ownership registry (TG_OWN_TENSOR,
 * TG_OWN_GRAD), which is what tg_tensor_free and tg_ctx_free go by. */

static void free_block(tg_ctx *ctx, tg_tensor *t) {
    if (!t) return;
    tg_heap_free(ctx, t->data);
    tg_heap_free(ctx, t);
}

/* Frees t (a registered persistent tensor) and its grad, and takes both out
 * of the registry. */
static void free_persistent(tg_ctx *ctx, tg_tensor *t) {
    if (t->grad && tg_disown(ctx, "tg_tensor_free", t->grad, TG_OWN_GRAD)) free_block(ctx, t->grad);
    free_block(ctx, t);
}

/* A heap tensor of `header` bytes (a tg_tensor_impl or a tg_persistent) with t's
 * shape and dtype and a copy of t's data, not registered. */
static tg_tensor *heap_copy(tg_ctx *ctx, const tg_tensor *t, size_t header) {
    tg_tensor *p = tg_heap_alloc(ctx, header);
    if (!p) return NULL;
    memset(p, 0, header);
    size_t bytes = (size_t)t->numel * tg_esize(t->dtype);
    p->data = tg_heap_alloc(ctx, bytes ? bytes : 1);
    if (!p->data) {
        tg_heap_free(ctx, p);
        return NULL;
    }
    if (bytes) memcpy(p->data, t->data, bytes);
    p->dtype = t->dtype;
    p->ndim = t->ndim;
    memcpy(p->shape, t->shape, sizeof p->shape);
    p->numel = t->numel;
    p->persistent = true;
    tg_impl(p)->node = -1;
    tg_impl(p)->ctx = ctx;
    return p;
}

/* A zeroed persistent grad for t, registered (NULL and an error naming fn
 * when out of memory). */
static tg_tensor *new_grad(tg_ctx *ctx, const char *fn, const tg_tensor *t) {
    tg_tensor *g = heap_copy(ctx, t, sizeof(tg_tensor_impl));
    if (!g) {
        tg_error(ctx, TG_ERR_OOM, fn, "out of memory for the grad");
        return NULL;
    }
    memset(g->data, 0, (size_t)t->numel * tg_esize(t->dtype));
    if (!tg_own(ctx, fn, g, TG_OWN_GRAD)) {
        free_block(ctx, g);
        return NULL;
    }
    return g;
}

tg_tensor *tg_persist(tg_ctx *ctx, tg_tensor *t) {
    if (!tg_check_arg_any(ctx, "tg_persist", "t", t)) return NULL;
    tg_tensor *p = heap_copy(ctx, t, sizeof(tg_persistent));
    if (!p) {
        char s[TG_SHAPE_STR];
        tg_error(ctx, TG_ERR_OOM, "tg_persist", "out of memory for a %s tensor of shape %s", tg_dtype_name(t->dtype),
                 tg_shape_of(s, t));
        return NULL;
    }
    if (!tg_own(ctx, "tg_persist", p, TG_OWN_TENSOR)) {
        free_block(ctx, p);
        return NULL;
    }
    if (t->requires_grad) {
        /* a persistent leaf that requires grad keeps a persistent grad */
        p->requires_grad = true;
        p->grad = new_grad(ctx, "tg_persist", p);
        if (!p->grad) {
            tg_disown(ctx, "tg_persist", p, TG_OWN_TENSOR);
            free_block(ctx, p);
            return NULL;
        }
    }
    return p;
}

/* Gives a persistent tensor a zeroed persistent grad (used by
 * tg_requires_grad). Returns false on allocation failure (error set). */
bool tg_persistent_make_grad(tg_ctx *ctx, tg_tensor *t) {
    if (t->grad) return true;
    t->grad = new_grad(ctx, "tg_requires_grad", t);
    return t->grad != NULL;
}

void tg_persistent_free_all(tg_ctx *ctx) {
    for (size_t i = 0; i < ctx->owned_cap; i++)
        if (ctx->owned[i].kind == TG_OWN_TENSOR) {
            tg_tensor *t = (tg_tensor *)ctx->owned[i].p;
            if (t->grad && tg_owned_kind(ctx, t->grad) == TG_OWN_GRAD) free_block(ctx, t->grad);
            free_block(ctx, t);
        }
    if (ctx->owned) memset(ctx->owned, 0, ctx->owned_cap * sizeof *ctx->owned);
    ctx->owned_count = 0;
}

void tg_tensor_free(tg_ctx *ctx, tg_tensor *t) {
    static const char fn[] = "tg_tensor_free";
    if (!ctx || !t) return;
    /* Only what the registry knows is read: a pointer it does not know may
     * point at freed memory. */
    switch (tg_owned_kind(ctx, t)) {
    case TG_OWN_TENSOR: break;
    case TG_OWN_GRAD:
        tg_error(ctx, TG_ERR_STATE, fn, "%p is the grad of a persistent tensor; it is freed with that tensor",
                 (void *)t);
        return;
    case TG_OWN_NONE:
        if (tg_arena_holds(ctx, t)) return;   /* an arena tensor: the reset frees it */
        tg_disown(ctx, fn, t, TG_OWN_TENSOR); /* says: freed already, or another context's */
        return;
    default: tg_disown(ctx, fn, t, TG_OWN_TENSOR); return;
    }
    const tg_persistent *p = (const tg_persistent *)t;
    if (p->owner && p->owner != ctx->releasing) {
        char s[TG_SHAPE_STR];
        tg_error(ctx, TG_ERR_STATE, fn, "tensor %s %s is %s", tg_shape_of(s, t), tg_dtype_name(t->dtype), p->role);
        return;
    }
    tg_disown(ctx, fn, t, TG_OWN_TENSOR);
    free_persistent(ctx, t);
}

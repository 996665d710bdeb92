/* Modules and models: the generic view every layer shares (tg_module), the
 * ordered list of a model's modules (tg_model) with its summary and
 * parameter list, and the argument checks the layers have in common.
 *
 * A layer struct starts with a tg_module whose ops_ table holds the layer's
 * methods (repr, params, numel, free; layers/module.h), so a model can hold
 * Linear, RMSNorm, LayerNorm and Embedding layers side by side. */
#include "layers/module.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>

/* ---- common checks and helpers ----------------------------------------------- */

bool tg_check_dtype_value(tg_ctx *ctx, const char *fn, tg_dtype dtype) {
    if (dtype == TG_F32 || dtype == TG_F64) return true;
    tg_error(ctx, TG_ERR_DTYPE, fn, "dtype %d is neither TG_F32 nor TG_F64", (int)dtype);
    return false;
}

bool tg_check_size_arg(tg_ctx *ctx, const char *fn, const char *arg, int64_t size) {
    if (size >= 1) return true;
    tg_error(ctx, TG_ERR_VALUE, fn, "%s = %lld must be >= 1", arg, (long long)size);
    return false;
}

bool tg_check_layer_dtype(tg_ctx *ctx, const char *fn, const tg_tensor *x, tg_dtype dtype) {
    if (x->dtype == dtype) return true;
    tg_error(ctx, TG_ERR_DTYPE, fn, "input is %s but the layer is %s", tg_dtype_name(x->dtype),
             tg_dtype_name(dtype));
    return false;
}

void *tg_module_alloc(tg_ctx *ctx, const char *fn, size_t size, const char *kind, const char *name,
                      tg_dtype dtype, const tg_module_ops *ops) {
    if (!tg_live(ctx)) return NULL;
    if (!name) name = "";
    size_t len = strlen(name);
    if (len >= sizeof ((tg_module *)0)->name) {
        tg_error(ctx, TG_ERR_VALUE, fn, "name '%.60s%s' is %zu bytes long; at most %zu", name,
                 len > 60 ? "..." : "", len, sizeof ((tg_module *)0)->name - 1);
        return NULL;
    }
    if (!tg_check_dtype_value(ctx, fn, dtype)) return NULL;
    void *p = tg_heap_alloc(ctx, size);
    if (!p) {
        tg_error(ctx, TG_ERR_OOM, fn, "out of memory for a %s layer", kind);
        return NULL;
    }
    memset(p, 0, size);
    tg_module *m = p; /* the header is the struct's first member */
    m->kind = kind;
    memcpy(m->name, name, len + 1);
    m->dtype = dtype;
    m->ops_ = ops;
    return p;
}

tg_tensor *tg_param_from(tg_ctx *ctx, tg_tensor *t) {
    if (!t) return NULL;
    tg_tensor *p = tg_persist(ctx, t);
    if (!p) return NULL;
    if (!tg_requires_grad(ctx, p)) {
        tg_tensor_free(ctx, p);
        return NULL;
    }
    return p;
}

/* Appends printf output at *pos of buf[size] (always terminated when size >
 * 0) and advances *pos by the length the text needs, so the final *pos is
 * what snprintf would return for the whole text. */
static void appendf(char *buf, size_t size, size_t *pos, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
static void appendf(char *buf, size_t size, size_t *pos, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *dst = buf && *pos < size ? buf + *pos : NULL;
    size_t room = dst ? size - *pos : 0;
    int n = vsnprintf(dst, room, fmt, ap);
    va_end(ap);
    if (n > 0) *pos += (size_t)n;
}

/* ---- normalization layers ---------------------------------------------------- */

bool tg_norm_check_args(tg_ctx *ctx, const char *fn, const tg_tensor *x, const tg_tensor *gamma,
                        const tg_tensor *beta, int ndim_norm, double eps, int64_t *N, int64_t *C) {
    if (!tg_check_arg(ctx, fn, "x", x)) return false;
    char sx[TG_SHAPE_STR], sp[TG_SHAPE_STR], sn[TG_SHAPE_STR];
    if (ndim_norm < 1 || ndim_norm > x->ndim) {
        tg_error(ctx, TG_ERR_VALUE, fn, "ndim_norm = %d must be in 1..%d (the dims of x %s)", ndim_norm, x->ndim,
                 tg_shape_of(sx, x));
        return false;
    }
    if (!isfinite(eps) || eps < 0) {
        tg_error(ctx, TG_ERR_VALUE, fn, "eps = %g must be finite and >= 0", eps);
        return false;
    }
    const int lead = x->ndim - ndim_norm;
    const int64_t *nshape = x->shape + lead;
    int64_t c = 1;
    for (int d = 0; d < ndim_norm; d++) c *= nshape[d];
    if (c < 1) {
        tg_error(ctx, TG_ERR_SHAPE, fn, "x %s: the normalized dims %s hold no element", tg_shape_of(sx, x),
                 tg_shape_str(sn, sizeof sn, ndim_norm, nshape));
        return false;
    }
    const tg_tensor *ps[2] = {gamma, beta};
    const char *names[2] = {"gamma", "beta"};
    for (int k = 0; k < 2; k++) {
        const tg_tensor *p = ps[k];
        if (!p) continue;
        if (!tg_check_same_dtype(ctx, fn, x, p)) return false;
        bool same = p->ndim == ndim_norm;
        for (int d = 0; same && d < ndim_norm; d++) same = p->shape[d] == nshape[d];
        if (!same) {
            tg_error(ctx, TG_ERR_SHAPE, fn, "%s %s is not the normalized shape %s (the last %d dims of x %s)",
                     names[k], tg_shape_of(sp, p), tg_shape_str(sn, sizeof sn, ndim_norm, nshape), ndim_norm,
                     tg_shape_of(sx, x));
            return false;
        }
    }
    *C = c;
    *N = c ? x->numel / c : 0;
    return true;
}

bool tg_norm_check_new(tg_ctx *ctx, const char *fn, int ndim, const int64_t *normalized_shape, double eps,
                       tg_dtype dtype) {
    if (!tg_live(ctx)) return false;
    if (ndim < 1 || ndim > TG_MAX_DIMS) {
        tg_error(ctx, TG_ERR_VALUE, fn, "ndim = %d must be in 1..%d", ndim, TG_MAX_DIMS);
        return false;
    }
    if (!normalized_shape) {
        tg_error(ctx, TG_ERR_NULL, fn, "argument 'normalized_shape' is NULL");
        return false;
    }
    for (int d = 0; d < ndim; d++) {
        if (normalized_shape[d] < 1) {
            char s[TG_SHAPE_STR];
            tg_error(ctx, TG_ERR_VALUE, fn, "normalized_shape[%d] = %lld must be >= 1 (normalized_shape %s)", d,
                     (long long)normalized_shape[d], tg_shape_str(s, sizeof s, ndim, normalized_shape));
            return false;
        }
    }
    int64_t numel;
    if (!tg_check_shape(ctx, fn, ndim, normalized_shape, &numel)) return false;
    if (!(eps > 0) || !isfinite(eps)) {
        tg_error(ctx, TG_ERR_VALUE, fn, "eps = %g must be > 0 and finite", eps);
        return false;
    }
    return tg_check_dtype_value(ctx, fn, dtype);
}

tg_tensor *tg_norm_param(tg_ctx *ctx, tg_dtype dtype, int ndim, const int64_t *shape, double value) {
    return tg_param_from(ctx, tg_full(ctx, dtype, ndim, shape, value));
}

bool tg_norm_check_input(tg_ctx *ctx, const char *fn, const tg_tensor *x, int ndim, const int64_t *shape,
                         tg_dtype dtype) {
    if (!tg_check_arg(ctx, fn, "x", x)) return false;
    bool fits = x->ndim >= ndim;
    for (int d = 0; fits && d < ndim; d++) fits = x->shape[x->ndim - ndim + d] == shape[d];
    if (!fits) {
        char sx[TG_SHAPE_STR], sn[TG_SHAPE_STR];
        tg_error(ctx, TG_ERR_SHAPE, fn, "input %s does not end with normalized_shape %s", tg_shape_of(sx, x),
                 tg_shape_str(sn, sizeof sn, ndim, shape));
        return false;
    }
    return tg_check_layer_dtype(ctx, fn, x, dtype);
}

size_t tg_norm_repr(char *buf, size_t size, const char *kind, int ndim, const int64_t *shape, double eps,
                    bool affine, bool bias) {
    size_t pos = 0;
    if (buf && size) buf[0] = '\0';
    if (ndim == 1) {
        appendf(buf, size, &pos, "%s(dim=%lld", kind, (long long)shape[0]);
    } else {
        char s[TG_SHAPE_STR];
        appendf(buf, size, &pos, "%s(dim=%s", kind, tg_shape_str(s, sizeof s, ndim, shape));
    }
    appendf(buf, size, &pos, ", eps=%g, affine=%s, bias=%s)", eps, affine ? "true" : "false",
            bias ? "true" : "false");
    return pos;
}

/* ---- tg_module ------------------------------------------------------------------- */

bool tg_module_params(tg_ctx *ctx, tg_module *m, tg_params *list) {
    if (!tg_live(ctx)) return false;
    if (!m || !list) {
        if (!m) tg_error(ctx, TG_ERR_NULL, __func__, "argument 'm' (the layer) is NULL");
        else tg_error(ctx, TG_ERR_NULL, __func__, "argument 'list' is NULL");
        return false;
    }
    return m->ops_->params(ctx, m, list);
}

int64_t tg_module_numel(const tg_module *m) { return m ? m->ops_->numel(m) : 0; }

size_t tg_module_format(char *buf, size_t size, const tg_module *m) {
    if (buf && size) buf[0] = '\0';
    if (!m) return 0;
    size_t pos = m->ops_->repr(m, buf, size);
    appendf(buf, size, &pos, "  params=%lld", (long long)m->ops_->numel(m));
    return pos;
}

void tg_module_free(tg_ctx *ctx, tg_module *m) {
    if (!ctx || !m) return;
    m->ops_->free(ctx, m);
}

/* ---- tg_model -------------------------------------------------------------------- */

bool tg_model_add(tg_ctx *ctx, tg_model *model, tg_module *m) {
    if (!m) {
        if (tg_live(ctx)) tg_error(ctx, TG_ERR_NULL, __func__, "argument 'm' is NULL");
        return false;
    }
    if (model)
        for (int i = 0; i < model->count; i++)
            if (model->items[i] == m) {
                /* already owned by this model: keep it */
                if (tg_live(ctx)) tg_error(ctx, TG_ERR_VALUE, __func__, "module '%s' is already in the model", m->name);
                return false;
            }
    /* From here on the model takes m: on any failure m is freed, so
     * tg_model_add(ctx, &model, TG_MODULE(tg_linear_new(...))) never leaks. */
    if (!tg_live(ctx)) goto fail;
    if (!model) {
        tg_error(ctx, TG_ERR_NULL, __func__, "argument 'model' is NULL");
        goto fail;
    }
    if (m->name[0])
        for (int i = 0; i < model->count; i++)
            if (strcmp(model->items[i]->name, m->name) == 0) {
                tg_error(ctx, TG_ERR_VALUE, __func__, "duplicate module name '%s'", m->name);
                goto fail;
            }
    if (model->count == model->capacity) {
        int cap = model->capacity ? model->capacity * 2 : 8;
        tg_module **items = tg_heap_alloc(ctx, (size_t)cap * sizeof *items);
        if (!items) {
            tg_error(ctx, TG_ERR_OOM, __func__, "out of memory growing the model to %d modules", cap);
            goto fail;
        }
        if (model->count) memcpy(items, model->items, (size_t)model->count * sizeof *items);
        tg_heap_free(ctx, model->items);
        model->items = items;
        model->capacity = cap;
    }
    model->items[model->count++] = m;
    return true;
fail:
    tg_module_free(ctx, m);
    return false;
}

bool tg_model_params(tg_ctx *ctx, const tg_model *model, tg_params *list) {
    if (!tg_live(ctx)) return false;
    if (!model || !list) {
        tg_error(ctx, TG_ERR_NULL, __func__, "argument '%s' is NULL", !model ? "model" : "list");
        return false;
    }
    for (int i = 0; i < model->count; i++)
        if (!tg_module_params(ctx, model->items[i], list)) return false;
    return true;
}

int64_t tg_model_numel(const tg_model *model) {
    int64_t n = 0;
    if (!model) return 0;
    for (int i = 0; i < model->count; i++) n += tg_module_numel(model->items[i]);
    return n;
}

size_t tg_model_format(char *buf, size_t size, const tg_model *model) {
    size_t pos = 0;
    if (buf && size) buf[0] = '\0';
    int count = model ? model->count : 0;
    for (int i = 0; i < count; i++) {
        const tg_module *m = model->items[i];
        if (m->name[0]) appendf(buf, size, &pos, "(%s): ", m->name);
        else appendf(buf, size, &pos, "(%d): ", i);
        char *dst = buf && pos < size ? buf + pos : NULL;
        pos += tg_module_format(dst, dst ? size - pos : 0, m);
        appendf(buf, size, &pos, "\n");
    }
    appendf(buf, size, &pos, "total params=%lld\n", (long long)tg_model_numel(model));
    return pos;
}

void tg_model_print(FILE *out, const tg_model *model) {
    if (!out) return;
    char small[1024];
    size_t n = tg_model_format(small, sizeof small, model);
    if (n < sizeof small) {
        fputs(small, out);
        return;
    }
    /* a long summary: one module at a time */
    for (int i = 0; model && i < model->count; i++) {
        const tg_module *m = model->items[i];
        char line[512];
        tg_module_format(line, sizeof line, m);
        if (m->name[0]) fprintf(out, "(%s): %s\n", m->name, line);
        else fprintf(out, "(%d): %s\n", i, line);
    }
    fprintf(out, "total params=%lld\n", (long long)tg_model_numel(model));
}

void tg_model_free(tg_ctx *ctx, tg_model *model) {
    if (!ctx || !model) return;
    for (int i = 0; i < model->count; i++) tg_module_free(ctx, model->items[i]);
    tg_heap_free(ctx, model->items);
    model->items = NULL;
    model->count = model->capacity = 0;
}

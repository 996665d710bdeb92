/* Modules and models: the generic view every layer shares (tg_module), the
 * ordered list of a model's modules (tg_model) with its summary and
 * parameter list, and the argument checks the layers have in common.
 *
 * A layer struct starts with a tg_module whose ops_ table holds the layer's
 * methods (repr, params, numel, free; layers/module.h), so a model can hold
 * Linear, RMSNorm, LayerNorm and Embedding layers side by side. */
#include "layers/module.h"

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
    tg_error(ctx, TG_ERR_DTYPE, fn, "input is %s but the layer is %s", tg_dtype_name(x->dtype), tg_dtype_name(dtype));
    return false;
}

void *tg_module_alloc(tg_ctx *ctx, const char *fn, size_t size, const char *kind, const char *name, tg_dtype dtype,
                      const tg_module_ops *ops) {
    if (!tg_live(ctx)) return NULL;
    if (!name) name = "";
    size_t len = strlen(name);
    if (len >= sizeof((tg_module *)0)->name) {
        tg_error(ctx, TG_ERR_VALUE, fn, "name '%.60s%s' is %zu bytes long; at most %zu", name, len > 60 ? "..." : "",
                 len, sizeof((tg_module *)0)->name - 1);
        return NULL;
    }
    if (!tg_check_dtype_value(ctx, fn, dtype)) return NULL;
    void *p = tg_heap_alloc(ctx, size);
    if (!p) {
        tg_error(ctx, TG_ERR_OOM, fn, "out of memory for a %s layer", kind);
        return NULL;
    }
    if (!tg_own(ctx, fn, p, TG_OWN_LAYER)) { /* tg_module_free checks it there */
        tg_heap_free(ctx, p);
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

bool tg_check_layer(tg_ctx *ctx, const char *fn, const void *layer) {
    if (!tg_live(ctx)) return false;
    if (layer) return true;
    tg_error(ctx, TG_ERR_NULL, fn, "argument 'layer' is NULL");
    return false;
}

/* Marks each of m's parameters as m's own, so that tg_tensor_free refuses
 * them ("... is the parameter 'fc1.weight' of a layer; free the layer"):
 * the layer frees them itself. */
static bool own_params(tg_ctx *ctx, tg_module *m) {
    tg_params list = {0};
    bool ok = m->ops_->params(ctx, m, &list);
    for (int i = 0; ok && i < list.count; i++) {
        char role[160];
        snprintf(role, sizeof role, "the parameter '%s' of a layer; free the layer", list.items[i].name);
        ok = tg_persistent_set_owner(ctx, "tg_module_built", list.items[i].value, m, role);
    }
    tg_params_free(&list);
    return ok;
}

void *tg_module_built(tg_ctx *ctx, tg_module *m) {
    if (tg_ok(ctx) && own_params(ctx, m)) return m;
    tg_module_free(ctx, m);
    return NULL;
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

/* The registry is asked first (by address: a freed layer is never read),
 * and while the layer frees its parameters it is ctx->releasing, the one
 * object tg_tensor_free lets free them. */
void tg_module_free(tg_ctx *ctx, tg_module *m) {
    if (!ctx || !m) return;
    if (!tg_disown(ctx, __func__, m, TG_OWN_LAYER)) return;
    const void *outer = ctx->releasing; /* a module inside another being freed */
    ctx->releasing = m;
    m->ops_->free(ctx, m);
    ctx->releasing = outer;
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

/* Modules and models: the generic view every layer shares (tg_module), the
 * ordered list of a model's modules (tg_model) with its summary and
 * parameter list, and the argument checks the layers have in common.
 *
 * A layer struct starts with a tg_module whose ops_ table holds the layer's
 * methods (repr, params, numel, free, forward, children; layers/module.h),
 * so a model can hold Linear, RMSNorm, LayerNorm, Embedding, activation and
 * Sequential modules side by side. The functions here walk a container's
 * children (a Sequential's modules) for its parameters, size and summary. */
#include "layers/module.h"
#include "tensor/text.h"

#include <stdlib.h>
#include <string.h>

/* ---- common checks and helpers ----------------------------------------------- */

bool tg_check_dtype_value(tg_ctx *ctx, const char *fn, tg_dtype dtype) {
    if (dtype == TG_F32 || dtype == TG_F64) return true;
    if (tg_is_lowp(dtype)) /* low precision: f32 layers, tg_cast around them (tapegrad/tensor.h) */
        tg_error(ctx, TG_ERR_DTYPE, fn,
                 "dtype %d (%s): layers hold float32 or float64 parameters; make the layer in float32 and run it "
                 "under autocast (tg_ctx_set_autocast), or tg_cast its input and output",
                 (int)dtype, tg_dtype_name(dtype));
    else tg_error(ctx, TG_ERR_DTYPE, fn, "dtype %d is neither TG_F32 nor TG_F64", (int)dtype);
    return false;
}

bool tg_check_size_arg(tg_ctx *ctx, const char *fn, const char *arg, int64_t size) {
    if (size >= 1) return true;
    tg_error(ctx, TG_ERR_VALUE, fn, "%s = %lld must be >= 1", arg, (long long)size);
    return false;
}

bool tg_check_layer_dtype(tg_ctx *ctx, const char *fn, const tg_tensor *x, tg_dtype dtype) {
    if (x->dtype == dtype) return true;
    /* autocast: a float32 layer takes its compute dtype (layers/autocast.c) */
    if (dtype == TG_F32 && ctx->autocast != TG_F32 && x->dtype == ctx->autocast) return true;
    if (dtype == TG_F32 && tg_is_lowp(x->dtype))
        tg_error(ctx, TG_ERR_DTYPE, fn,
                 "input is %s but the layer is float32 (autocast is %s: tg_ctx_set_autocast(ctx, %s) runs float32 "
                 "layers in %s)",
                 tg_dtype_name(x->dtype), ctx->autocast == TG_F32 ? "off" : tg_dtype_name(ctx->autocast),
                 x->dtype == TG_BF16 ? "TG_BF16" : "TG_F16", tg_dtype_name(x->dtype));
    else
        tg_error(ctx, TG_ERR_DTYPE, fn, "input is %s but the layer is %s", tg_dtype_name(x->dtype),
                 tg_dtype_name(dtype));
    return false;
}

void *tg_module_alloc(tg_ctx *ctx, const char *fn, size_t size, const char *kind, const char *name, tg_dtype dtype,
                      const tg_module_ops *ops) {
    if (!tg_ok(ctx)) return NULL;
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
    if (!tg_ok(ctx)) return false;
    if (!layer) {
        tg_null_error(ctx, fn, "layer");
        return false;
    }
    return tg_check_owned(ctx, fn, "the layer", layer, TG_OWN_LAYER);
}

/* Marks each of m's parameters as m's own, so that tg_tensor_free refuses
 * them ("... is the parameter 'fc1.weight' of a layer; free the layer"):
 * the layer frees them itself. */
static bool own_params(tg_ctx *ctx, tg_module *m) {
    tg_params list = {0};
    bool ok = !m->ops_->params || m->ops_->params(ctx, m, m->name, &list);
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

/* The module's repr (its ops' repr, snprintf semantics) into the text. */
static void put_repr(tg_text *s, const tg_module *m) {
    if (!s->out) {
        size_t room;
        char *dst = tg_text_room(s, &room);
        s->len += m->ops_->repr(m, dst, room);
        return;
    }
    char small[256];
    size_t n = m->ops_->repr(m, small, sizeof small);
    if (n < sizeof small) {
        tg_text_put(s, small);
        return;
    }
    char *big = malloc(n + 1); /* printing uses the C library's malloc */
    if (big) m->ops_->repr(m, big, n + 1);
    tg_text_put(s, big ? big : small);
    free(big);
}

/* The modules a container holds, or NULL for a leaf. */
static const tg_model *children_of(const tg_module *m) { return m->ops_->children ? m->ops_->children(m) : NULL; }

const char *tg_module_child_key(char buf[16], const tg_module *child, int i) {
    if (child->name[0]) return child->name;
    snprintf(buf, 16, "%d", i);
    return buf;
}

/* "Repr  params=N", or for a container "Repr(", one line per child
 * indented by indent + 2, and ")  params=N" at indent. */
static void put_module(tg_text *s, const tg_module *m, int indent) {
    put_repr(s, m);
    const tg_model *kids = children_of(m);
    if (kids) {
        tg_text_printf(s, "(%s", kids->count ? "\n" : "");
        for (int i = 0; i < kids->count; i++) {
            char key[16];
            tg_text_printf(s, "%*s(%s): ", indent + 2, "", tg_module_child_key(key, kids->items[i], i));
            put_module(s, kids->items[i], indent + 2);
            tg_text_put(s, "\n");
        }
        tg_text_printf(s, "%*s)", kids->count ? indent : 0, "");
    }
    tg_text_printf(s, "  params=%lld", (long long)tg_module_numel(m));
}

/* The model's summary: "(key): module" lines and the total. */
static void put_model(tg_text *s, const tg_model *model) {
    int count = model ? model->count : 0;
    for (int i = 0; i < count; i++) {
        char key[16];
        tg_text_printf(s, "(%s): ", tg_module_child_key(key, model->items[i], i));
        put_module(s, model->items[i], 0);
        tg_text_put(s, "\n");
    }
    tg_text_printf(s, "total params=%lld\n", (long long)tg_model_numel(model));
}

/* ---- tg_module ------------------------------------------------------------------- */

const char *tg_module_label(char buf[TG_MODULE_LABEL], const tg_module *m) {
    if (m->name[0]) snprintf(buf, TG_MODULE_LABEL, "%s '%s'", m->kind, m->name);
    else snprintf(buf, TG_MODULE_LABEL, "%s", m->kind);
    return buf;
}

void tg_module_no_forward(tg_ctx *ctx, const char *fn, const tg_module *m) {
    char label[TG_MODULE_LABEL];
    tg_error(ctx, TG_ERR_VALUE, fn, "%s has no forward on one tensor: %s", tg_module_label(label, m),
             m->ops_->forward_hint ? m->ops_->forward_hint : "it takes other inputs");
}

/* Appends m's parameters named under prefix (its dotted path): its own,
 * then each child's under prefix.KEY. */
static bool params_at(tg_ctx *ctx, tg_module *m, const char *prefix, tg_params *list) {
    if (m->ops_->params && !m->ops_->params(ctx, m, prefix, list)) return false;
    const tg_model *kids = children_of(m);
    for (int i = 0; kids && i < kids->count; i++) {
        char key[16], path[sizeof(((tg_param *)0)->name)];
        const char *k = tg_module_child_key(key, kids->items[i], i);
        int n = snprintf(path, sizeof path, "%s%s%s", prefix, prefix[0] ? "." : "", k);
        if (n < 0 || (size_t)n >= sizeof path) {
            tg_error(ctx, TG_ERR_VALUE, "tg_module_params", "the path '%s%s%s' of a module is over %zu bytes", prefix,
                     prefix[0] ? "." : "", k, sizeof path - 1);
            return false;
        }
        if (!params_at(ctx, kids->items[i], path, list)) return false;
    }
    return true;
}

bool tg_module_params(tg_ctx *ctx, tg_module *m, tg_params *list) {
    if (!tg_ok(ctx)) return false;
    if (!m || !list) {
        if (!m) tg_null_error(ctx, __func__, "m");
        else tg_null_error(ctx, __func__, "list");
        return false;
    }
    return tg_check_owned(ctx, __func__, "the layer", m, TG_OWN_LAYER) && params_at(ctx, m, m->name, list);
}

int64_t tg_module_numel(const tg_module *m) {
    if (!m) return 0;
    int64_t n = m->ops_->numel ? m->ops_->numel(m) : 0;
    const tg_model *kids = children_of(m);
    return n + (kids ? tg_model_numel(kids) : 0);
}

tg_tensor *tg_module_forward(tg_ctx *ctx, tg_module *m, tg_tensor *x) {
    if (!tg_ok(ctx)) return NULL;
    if (!m) {
        tg_null_error(ctx, __func__, "m");
        return NULL;
    }
    if (!tg_check_owned(ctx, __func__, "the module", m, TG_OWN_LAYER)) return NULL;
    if (!m->ops_->forward) {
        tg_module_no_forward(ctx, __func__, m);
        return NULL;
    }
    if (!tg_check_arg_any(ctx, __func__, "x", x)) return NULL;
    return m->ops_->forward(ctx, m, x);
}

size_t tg_module_format(char *buf, size_t size, const tg_module *m) {
    if (buf && size) buf[0] = '\0';
    if (!m) return 0;
    tg_text s = tg_text_buf(buf, size);
    put_module(&s, m, 0);
    return s.len;
}

void tg_module_print(FILE *out, const tg_module *m) {
    if (!out || !m) return;
    tg_text s = tg_text_file(out);
    put_module(&s, m, 0);
    tg_text_put(&s, "\n");
}

/* Frees m, a layer of ctx or not (tg_disown says which). While the layer
 * frees its parameters it is ctx->releasing, the one object tg_tensor_free
 * lets free them. */
static void release(tg_ctx *ctx, tg_module *m) {
    if (!tg_disown(ctx, "tg_module_free", m, TG_OWN_LAYER)) return;
    const void *outer = ctx->releasing; /* a module inside another being freed */
    ctx->releasing = m;
    m->ops_->free(ctx, m);
    ctx->releasing = outer;
}

/* The registry is asked first (by address: a freed layer is never read).
 * A module a model or a container holds is refused: the holder would
 * free it again, and until then read it (its summary, its forward). */
void tg_module_free(tg_ctx *ctx, tg_module *m) {
    if (!ctx || !m) return;
    const tg_owned *e = tg_owned_entry(ctx, m, TG_OWN_LAYER);
    if (e && e->held) {
        char label[TG_MODULE_LABEL];
        tg_error(ctx, TG_ERR_STATE, __func__,
                 "%s is held by a model or a container module (tg_model_add, tg_sequential_add, or a layer built "
                 "of layers such as tg_gpt), which frees it: free the holder (tg_model_free, or the container's "
                 "free)",
                 tg_module_label(label, m));
        return;
    }
    release(ctx, m);
}

/* ---- tg_model -------------------------------------------------------------------- */

bool tg_module_list_add(tg_ctx *ctx, const char *fn, const char *what, tg_model *list, tg_module *m) {
    if (!m) {
        if (tg_ok(ctx)) tg_null_error(ctx, fn, "m");
        return false;
    }
    /* Not this context's (or freed): neither read nor freed, left to its
     * owner. Held already: its holder frees it, and two would free it twice. */
    if (tg_ok(ctx) && !tg_check_owned(ctx, fn, "the module", m, TG_OWN_LAYER)) return false;
    const tg_owned *e = tg_owned_entry(ctx, m, TG_OWN_LAYER);
    if (e && e->held && tg_ok(ctx)) {
        bool here = false;
        for (int i = 0; list && i < list->count; i++) here |= list->items[i] == m;
        char label[TG_MODULE_LABEL];
        if (!here) {
            tg_error(ctx, TG_ERR_VALUE, fn,
                     "%s is already held by another model or container module: a module has one holder, which "
                     "frees it",
                     tg_module_label(label, m));
            return false;
        }
    }
    if (list)
        for (int i = 0; i < list->count; i++)
            if (list->items[i] == m) {
                /* already owned by this list: keep it */
                if (tg_ok(ctx)) tg_error(ctx, TG_ERR_VALUE, fn, "module '%s' is already in the %s", m->name, what);
                return false;
            }
    /* From here on the list takes m: on any failure m is freed, so
     * tg_model_add(ctx, &model, TG_MODULE(tg_linear_new(...))) never leaks. */
    if (!tg_ok(ctx)) goto fail;
    if (!list) {
        tg_null_error(ctx, fn, what);
        goto fail;
    }
    if (m->name[0])
        for (int i = 0; i < list->count; i++)
            if (strcmp(list->items[i]->name, m->name) == 0) {
                tg_error(ctx, TG_ERR_VALUE, fn, "duplicate module name '%s'", m->name);
                goto fail;
            }
    if (list->count == list->capacity) {
        int cap = list->capacity ? list->capacity * 2 : 8;
        tg_module **items = tg_heap_alloc(ctx, (size_t)cap * sizeof *items);
        if (!items) {
            tg_error(ctx, TG_ERR_OOM, fn, "out of memory growing the %s to %d modules", what, cap);
            goto fail;
        }
        if (list->count) memcpy(items, list->items, (size_t)list->count * sizeof *items);
        tg_heap_free(ctx, list->items);
        list->items = items;
        list->capacity = cap;
    }
    list->items[list->count++] = m;
    tg_owned_entry(ctx, m, TG_OWN_LAYER)->held = true;
    return true;
fail:
    tg_module_free(ctx, m);
    return false;
}

bool tg_model_add(tg_ctx *ctx, tg_model *model, tg_module *m) {
    return tg_module_list_add(ctx, __func__, "model", model, m);
}

bool tg_model_params(tg_ctx *ctx, const tg_model *model, tg_params *list) {
    if (!tg_ok(ctx)) return false;
    if (!model || !list) {
        tg_null_error(ctx, __func__, !model ? "model" : "list");
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
    tg_text s = tg_text_buf(buf, size);
    put_model(&s, model);
    return s.len;
}

void tg_model_print(FILE *out, const tg_model *model) {
    if (!out) return;
    tg_text s = tg_text_file(out);
    put_model(&s, model);
}

void tg_model_free(tg_ctx *ctx, tg_model *model) {
    if (!ctx || !model) return;
    for (int i = 0; i < model->count; i++) release(ctx, model->items[i]);
    tg_heap_free(ctx, model->items);
    model->items = NULL;
    model->count = model->capacity = 0;
}

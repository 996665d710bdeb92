/* A model's parameter list: named persistent tensors with a weight-decay
 * flag, shared by optimizers, clipping, checkpoints and the model summary.
 *
 * The array comes from the allocator of the context that first grew the
 * list, remembered in list->alloc_ (later growth uses it too), so that
 * tg_params_free needs no context and a context made with
 * tg_ctx_new_with_allocator sees the list's memory. */
#include "tensor/internal.h"
#include "autograd/tape.h"
#include "layers/module.h"

#include <stdlib.h>
#include <string.h>

bool tg_params_add(tg_ctx *ctx, tg_params *list, const char *prefix, const char *name, tg_tensor *value,
                   bool weight_decay) {
    if (!tg_ok(ctx)) return false;
    if (!list || !name) {
        tg_null_error(ctx, __func__, !list ? "list" : "name");
        return false;
    }
    if (!tg_check_arg(ctx, __func__, "value", value)) return false;
    char full[sizeof list->items[0].name];
    int n = (prefix && prefix[0]) ? snprintf(full, sizeof full, "%s.%s", prefix, name)
                                  : snprintf(full, sizeof full, "%s", name);
    if (n < 0 || (size_t)n >= sizeof full || name[0] == '\0') {
        tg_error(ctx, TG_ERR_VALUE, __func__, "parameter name '%s%s%s' is empty or longer than %zu bytes",
                 prefix ? prefix : "", prefix && prefix[0] ? "." : "", name, sizeof full - 1);
        return false;
    }
    if (!value->persistent) {
        tg_error(ctx, TG_ERR_STATE, __func__, "parameter '%s' is an arena tensor; make it persistent with tg_persist",
                 full);
        return false;
    }
    if (tg_params_find(list, full)) {
        tg_error(ctx, TG_ERR_VALUE, __func__, "duplicate parameter name '%s'", full);
        return false;
    }
    if (list->count == list->capacity) { /* grow: allocate, copy, free */
        int cap = list->capacity ? list->capacity * 2 : 16;
        if (!list->alloc_.alloc) list->alloc_ = ctx->alloc;
        tg_param *items = list->alloc_.alloc((size_t)cap * sizeof *items, TG_ALIGN, list->alloc_.user);
        if (!items) {
            tg_error(ctx, TG_ERR_OOM, __func__, "out of memory growing the parameter list to %d", cap);
            return false;
        }
        if (list->count) memcpy(items, list->items, (size_t)list->count * sizeof *items);
        if (list->items) list->alloc_.free(list->items, list->alloc_.user);
        list->items = items;
        list->capacity = cap;
    }
    if (!value->requires_grad && !tg_requires_grad(ctx, value)) return false;
    tg_param *p = &list->items[list->count++];
    memset(p, 0, sizeof *p);
    memcpy(p->name, full, (size_t)n + 1);
    p->value = value;
    p->weight_decay = weight_decay;
    return true;
}

tg_param *tg_params_find(tg_params *list, const char *name) {
    if (!list || !name) return NULL;
    for (int i = 0; i < list->count; i++)
        if (strcmp(list->items[i].name, name) == 0) return &list->items[i];
    return NULL;
}

int64_t tg_params_numel(const tg_params *list) {
    int64_t n = 0;
    if (!list) return 0;
    for (int i = 0; i < list->count; i++) n += list->items[i].value->numel;
    return n;
}

void tg_params_zero_grad(tg_ctx *ctx, tg_params *list) {
    if (!tg_ok(ctx) || !list) return;
    for (int i = 0; i < list->count; i++) tg_zero_grad(ctx, list->items[i].value);
}

/* A hand-built list (alloc_ all zero) is taken to own a malloc'd array. */
void tg_params_free(tg_params *list) {
    if (!list) return;
    if (list->items && list->alloc_.free) list->alloc_.free(list->items, list->alloc_.user);
    else free(list->items);
    memset(list, 0, sizeof *list);
}

/* Internal helpers shared by the layer modules (layers/linear.c,
 * layers/norm.c, layers/embedding.c) and their fused ops. Not installed;
 * users see tg_module, tg_model and the layers in
 * include/tapegrad/layers.h. How to add a layer: docs/DESIGN.md. */
#ifndef TG_LAYERS_MODULE_H
#define TG_LAYERS_MODULE_H

#include "tensor/internal.h"
#include "tapegrad/layers.h"

/* A layer's methods, one static table per layer kind. */
struct tg_module_ops {
    /* The repr without the parameter count, e.g. "Linear(in_features=4,
     * out_features=2, bias=true)", snprintf semantics. */
    size_t (*repr)(const tg_module *m, char *buf, size_t size);
    /* Appends the parameters to list (names prefixed by m->name). */
    bool (*params)(tg_ctx *ctx, tg_module *m, tg_params *list);
    /* Number of scalar parameters. */
    int64_t (*numel)(const tg_module *m);
    /* Frees the parameters and the layer struct (whose first member is m). */
    void (*free)(tg_ctx *ctx, tg_module *m);
};

/* Allocates a zeroed layer struct of `size` bytes on the context's heap and
 * fills its tg_module header (the struct's first member). Checks the name
 * (NULL means "", at most 47 bytes) and the dtype; errors are reported as
 * coming from `fn`. NULL on error. Free with tg_heap_free. */
void *tg_module_alloc(tg_ctx *ctx, const char *fn, size_t size, const char *kind, const char *name, tg_dtype dtype,
                      const tg_module_ops *ops);

/* The start of a layer's forward: false when the context is in error or
 * `layer` is NULL (TG_ERR_NULL "argument 'layer' is NULL", naming `fn`). */
bool tg_check_layer(tg_ctx *ctx, const char *fn, const void *layer);

/* The end of a layer's constructor: m (the layer) when the context is
 * healthy; otherwise NULL, with the half-built layer freed. */
void *tg_module_built(tg_ctx *ctx, tg_module *m);

/* A new parameter: the arena tensor t moved to the heap (tg_persist) and
 * marked as requiring grad (with a zeroed persistent grad). NULL on error. */
tg_tensor *tg_param_from(tg_ctx *ctx, tg_tensor *t);

/* Checks that dtype is TG_F32 or TG_F64 (TG_ERR_DTYPE naming `fn`). */
bool tg_check_dtype_value(tg_ctx *ctx, const char *fn, tg_dtype dtype);

/* Checks a layer size argument: size >= 1, else TG_ERR_VALUE
 * "fn: arg = size must be >= 1". */
bool tg_check_size_arg(tg_ctx *ctx, const char *fn, const char *arg, int64_t size);

/* Checks that x has the layer's dtype (TG_ERR_DTYPE naming both). */
bool tg_check_layer_dtype(tg_ctx *ctx, const char *fn, const tg_tensor *x, tg_dtype dtype);

#endif

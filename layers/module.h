/* Internal helpers shared by the layer modules (layers/linear.c,
 * rmsnorm.c, layernorm.c, embedding.c) and their fused ops. Not installed;
 * users see tg_module, tg_model and the layers in include/tapegrad.h. */
#ifndef TG_LAYERS_MODULE_H
#define TG_LAYERS_MODULE_H

#include "tensor/internal.h"

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
void *tg_module_alloc(tg_ctx *ctx, const char *fn, size_t size, const char *kind, const char *name,
                      tg_dtype dtype, const tg_module_ops *ops);

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

/* ---- normalization layers (RMSNorm, LayerNorm) ----------------------------- */

/* The arguments of a fused or composed norm, checked: x non-NULL; ndim_norm
 * in 1..x->ndim; gamma/beta NULL or of the normalized shape (x's trailing
 * ndim_norm sizes) and x's dtype; eps finite and >= 0 (eps_min_exclusive:
 * > 0); the row size C >= 1. Fills N (rows) and C (row size). */
bool tg_norm_check_args(tg_ctx *ctx, const char *fn, const tg_tensor *x, const tg_tensor *gamma,
                        const tg_tensor *beta, int ndim_norm, double eps, int64_t *N, int64_t *C);

/* The constructor arguments of a norm layer: ndim in 1..TG_MAX_DIMS,
 * normalized_shape non-NULL with sizes >= 1, eps > 0 and finite, a known
 * dtype. Errors name the argument and its value. */
bool tg_norm_check_new(tg_ctx *ctx, const char *fn, int ndim, const int64_t *normalized_shape, double eps,
                       tg_dtype dtype);

/* A persistent parameter of the normalized shape filled with `value`. */
tg_tensor *tg_norm_param(tg_ctx *ctx, tg_dtype dtype, int ndim, const int64_t *shape, double value);

/* Checks that x's trailing dims equal normalized_shape and that x has the
 * layer's dtype; the shape error names both shapes. */
bool tg_norm_check_input(tg_ctx *ctx, const char *fn, const tg_tensor *x, int ndim, const int64_t *shape,
                         tg_dtype dtype);

/* "Kind(dim=384, eps=1e-06, affine=true, bias=false)"; dim is "(4, 8)"
 * when more than one dim is normalized. snprintf semantics. */
size_t tg_norm_repr(char *buf, size_t size, const char *kind, int ndim, const int64_t *shape, double eps,
                    bool affine, bool bias);

#endif

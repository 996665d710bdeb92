/* Internal helpers shared by the layer modules (layers/linear.c,
 * layers/norm.c, layers/embedding.c) and their fused ops. Not installed;
 * users see tg_module, tg_model and the layers in
 * include/tapegrad/layers.h. How to add a layer: docs/DESIGN.md. */
#ifndef TG_LAYERS_MODULE_H
#define TG_LAYERS_MODULE_H

#include "tensor/internal.h"
#include "tapegrad/layers.h"

/* A layer's methods, one static table per layer kind (designated
 * initializers; a method left out is NULL).
 *
 * A module that holds other modules (a container: Sequential, and the
 * blocks built from layers) lists them through `children`; the generic
 * functions of layers/module.c then walk them: tg_module_params appends
 * the container's own parameters and then each child's under
 * "PREFIX.KEY" (KEY: the child's name, or its position when unnamed),
 * tg_module_numel adds them up, and tg_module_format prints the children
 * one per line, indented, between "REPR(" and ")". The container's own
 * `free` frees its children (tg_model_free). */
struct tg_module_ops {
    /* The repr without the parameter count, e.g. "Linear(in_features=4,
     * out_features=2, bias=true)", snprintf semantics. A container's is
     * what comes before its children: its kind, "Sequential". */
    size_t (*repr)(const tg_module *m, char *buf, size_t size);
    /* Appends the module's own parameters to list, named prefix + "." +
     * param (prefix: the module's dotted path, e.g. "mlp.0"; "" at the top
     * of an unnamed module). NULL: none. */
    bool (*params)(tg_ctx *ctx, tg_module *m, const char *prefix, tg_params *list);
    /* Number of scalar parameters of its own. NULL: none. */
    int64_t (*numel)(const tg_module *m);
    /* Frees the parameters, the children and the layer struct (whose first
     * member is m). */
    void (*free)(tg_ctx *ctx, tg_module *m);
    /* y = module(x), for tg_module_forward and Sequential. NULL: the module
     * takes no tensor input (forward_hint says what to call instead). */
    tg_tensor *(*forward)(tg_ctx *ctx, tg_module *m, tg_tensor *x);
    const char *forward_hint;
    /* The modules it holds, in order. NULL: a leaf. */
    const tg_model *(*children)(const tg_module *m);
};

/* p's copy in the autocast dtype for reading only: tg_autocast_param's
 * copy, made without recording the cast, for a layer that routes p's
 * gradient itself (the Linear under bfloat16 autocast, layers/linear.c). */
tg_tensor *tg_autocast_data(tg_ctx *ctx, tg_tensor *p);

/* Allocates a zeroed layer struct of `size` bytes on the context's heap and
 * fills its tg_module header (the struct's first member). Checks the name
 * (NULL means "", at most 47 bytes) and the dtype; errors are reported as
 * coming from `fn`. NULL on error. Free with tg_heap_free. */
void *tg_module_alloc(tg_ctx *ctx, const char *fn, size_t size, const char *kind, const char *name, tg_dtype dtype,
                      const tg_module_ops *ops);

/* tg_model_add and tg_sequential_add: appends m to list, which holds it
 * from then on (tg_module_free refuses it; tg_model_free frees it); on
 * failure m is freed, except when it is already in the list (TG_ERR_VALUE
 * "already in the <what>"), held by another list, or not a layer of ctx
 * (another context's: TG_ERR_STATE). Errors name fn. */
bool tg_module_list_add(tg_ctx *ctx, const char *fn, const char *what, tg_model *list, tg_module *m);

/* The key of a container's i-th child in parameter names, summaries and
 * messages: its name, or its position i (written into buf) when unnamed. */
const char *tg_module_child_key(char buf[16], const tg_module *child, int i);

/* "Kind 'name'", or "Kind" for an unnamed module, for messages. */
#define TG_MODULE_LABEL 72
const char *tg_module_label(char buf[TG_MODULE_LABEL], const tg_module *m);

/* The error for a module without a tensor forward (an Embedding): TG_ERR_VALUE
 * naming fn, the module and what to call instead (its ops' forward_hint). */
void tg_module_no_forward(tg_ctx *ctx, const char *fn, const tg_module *m);

/* The start of a layer's forward: false when the context is in error,
 * `layer` is NULL (TG_ERR_NULL "argument 'layer' is NULL", naming `fn`) or
 * not a layer of ctx (tg_check_owned: another context's, or freed). */
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

/* One attention layer's KV cache (layers/generate.c): the keys and values
 * of positions 0 .. cap - 1, persistent, in the dtype the layer computes
 * in: kt (B, H, D, cap), the keys transposed (what the attention's first
 * product reads), and v (B, H, cap, D); positions past the cache's length
 * unused. */
typedef struct tg_kv {
    tg_tensor *kt, *v;
} tg_kv;

/* tg_block_forward for the positions pos .. pos + T - 1 of x (B, T, C):
 * their keys and values (RoPE'd at those positions) go into kv's rows pos
 * .. pos + T - 1, and the attention reads rows 0 .. pos + T - 1
 * (tg_attention_cached). Not recorded: grad mode must be off. Errors name
 * fn. */
tg_tensor *tg_block_forward_kv(tg_ctx *ctx, const char *fn, tg_block *layer, tg_tensor *x, const tg_kv *kv,
                               int64_t pos);

/* tg_gpt_forward for the positions pos .. pos + T - 1 of B sequences whose
 * first pos positions are in the caches kv[0 .. n_layer - 1] (NULL kv: no
 * cache, pos 0: tg_gpt_forward itself). pos + T <= the context. Errors
 * name fn. */
tg_tensor *tg_gpt_forward_at(tg_ctx *ctx, const char *fn, tg_gpt *gpt, int64_t B, int64_t T, const int64_t *idx,
                             const tg_kv *kv, int64_t pos);

#endif

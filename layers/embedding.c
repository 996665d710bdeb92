/* Embedding: a module holding a (num_embeddings, embedding_dim) table whose
 * forward is the differentiable row lookup tg_embedding
 * (autograd/ops_embedding.c: y[i, :] = weight[idx[i], :], backward
 * scatter-adds dy rows, repeated indices accumulate). Used by the
 * character-level language model example. */
#include "layers/module.h"

static size_t embedding_repr(const tg_module *m, char *buf, size_t size) {
    const tg_embedding_layer *l = (const tg_embedding_layer *)m;
    int n = snprintf(buf, size, "Embedding(num_embeddings=%lld, embedding_dim=%lld)", (long long)l->num_embeddings,
                     (long long)l->embedding_dim);
    return n > 0 ? (size_t)n : 0;
}

static bool embedding_params_m(tg_ctx *ctx, tg_module *m, const char *prefix, tg_params *list) {
    tg_embedding_layer *l = (tg_embedding_layer *)m;
    return tg_params_add(ctx, list, prefix, "weight", l->weight, true);
}

static int64_t embedding_numel(const tg_module *m) { return ((const tg_embedding_layer *)m)->weight->numel; }

static void embedding_free_m(tg_ctx *ctx, tg_module *m) {
    tg_embedding_layer *l = (tg_embedding_layer *)m;
    tg_tensor_free(ctx, l->weight);
    tg_heap_free(ctx, l);
}

/* No .forward: the input is indices, not a tensor. */
static const tg_module_ops EMBEDDING_OPS = {
    .repr = embedding_repr,
    .params = embedding_params_m,
    .numel = embedding_numel,
    .free = embedding_free_m,
    .forward_hint = "it takes indices (tg_embedding_layer_forward); run it before a Sequential, not inside one"};

tg_embedding_layer *tg_embedding_layer_new(tg_ctx *ctx, const char *name, int64_t num_embeddings, int64_t embedding_dim,
                                           tg_dtype dtype) {
    if (!tg_ok(ctx)) return NULL;
    if (!tg_check_size_arg(ctx, __func__, "num_embeddings", num_embeddings) ||
        !tg_check_size_arg(ctx, __func__, "embedding_dim", embedding_dim))
        return NULL;
    int64_t numel;
    if (!tg_check_shape(ctx, __func__, 2, (const int64_t[]){num_embeddings, embedding_dim}, &numel)) return NULL;
    tg_embedding_layer *l = tg_module_alloc(ctx, __func__, sizeof *l, "Embedding", name, dtype, &EMBEDDING_OPS);
    if (!l) return NULL;
    l->num_embeddings = num_embeddings;
    l->embedding_dim = embedding_dim;
    /* PyTorch: normal_(0, 1) */
    l->weight = tg_param_from(ctx, tg_randn(ctx, dtype, TG_SHAPE(num_embeddings, embedding_dim), 0.0, 1.0));
    return tg_module_built(ctx, &l->base);
}

tg_tensor *tg_embedding_layer_forward(tg_ctx *ctx, tg_embedding_layer *layer, int ndim, const int64_t *shape,
                                      const int64_t *indices) {
    if (!tg_check_layer(ctx, __func__, layer)) return NULL;
    /* Under autocast the rows are looked up in the float32 table and then
     * cast: the same bits as a lookup in a cast table (rounding is
     * elementwise), at the cost of the rows instead of the table, and the
     * backward's scatter-add stays in float32. */
    return tg_autocast_input(ctx, tg_embedding(ctx, layer->weight, ndim, shape, indices));
}

bool tg_embedding_layer_params(tg_ctx *ctx, tg_embedding_layer *layer, tg_params *list) {
    return tg_module_params(ctx, TG_MODULE(layer), list);
}

void tg_embedding_layer_free(tg_ctx *ctx, tg_embedding_layer *layer) { tg_module_free(ctx, TG_MODULE(layer)); }

/* The modules of a transformer block: multi-head causal self-attention,
 * the MLP (GELU-tanh or SwiGLU) and the pre-norm block holding both.
 *
 * They are containers (layers/module.h): their parameters are those of the
 * Linears and norms they hold, which tg_module_params names under the
 * children's names ("attn.qkv.weight"), so this file has only forwards,
 * constructors and reprs. Every step of a forward is an op with its own
 * backward (tg_linear_fused, tg_permute, tg_rope, the fused tg_attention,
 * tg_gelu, tg_silu, tg_mul, tg_add): nothing here needs a derivation of its
 * own. The attention's backward is derived in docs/attention-gradients.md. */
#include "autograd/ops_attention.h"
#include "layers/module.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* The frees and children of the three containers: the children list owns
 * the layers the typed fields point at. */
static const tg_model *mha_children(const tg_module *m) { return &((const tg_mha *)m)->children_; }
static const tg_model *mlp_children(const tg_module *m) { return &((const tg_mlp *)m)->children_; }
static const tg_model *block_children(const tg_module *m) { return &((const tg_block *)m)->children_; }

static void container_free(tg_ctx *ctx, tg_module *m) {
    tg_model_free(ctx, (tg_model *)m->ops_->children(m));
    tg_heap_free(ctx, m);
}

/* Appends a freshly made child (NULL after an error: nothing to add). */
static void add_child(tg_ctx *ctx, tg_model *kids, void *child) {
    if (child) tg_model_add(ctx, kids, (tg_module *)child);
}

/* x must be (B, T, C) of the layer's dtype, with B, T >= 1. */
static bool check_btc(tg_ctx *ctx, const char *fn, const tg_tensor *x, int64_t C, tg_dtype dtype) {
    if (!tg_check_arg_any(ctx, fn, "x", x) || !tg_check_layer_dtype(ctx, fn, x, dtype)) return false;
    if (x->ndim == 3 && x->shape[2] == C && x->shape[0] >= 1 && x->shape[1] >= 1) return true;
    char sx[TG_SHAPE_STR];
    tg_error(ctx, TG_ERR_SHAPE, fn, "x %s is not (B, T, %lld) with B, T >= 1", tg_shape_of(sx, x), (long long)C);
    return false;
}

/* ---- multi-head causal self-attention --------------------------------------------- */

static size_t mha_repr(const tg_module *m, char *buf, size_t size) {
    const tg_mha *a = (const tg_mha *)m;
    int n = snprintf(buf, size, "CausalSelfAttention(n_embd=%lld, n_head=%lld, bias=%s, rope_base=%g)",
                     (long long)a->n_embd, (long long)a->n_head, a->bias ? "true" : "false", a->rope_base);
    return n > 0 ? (size_t)n : 0;
}

static tg_tensor *mha_forward_m(tg_ctx *ctx, tg_module *m, tg_tensor *x) { return tg_mha_forward(ctx, (tg_mha *)m, x); }

static const tg_module_ops MHA_OPS = {
    .repr = mha_repr, .free = container_free, .forward = mha_forward_m, .children = mha_children};

tg_mha *tg_mha_new(tg_ctx *ctx, const char *name, int64_t n_embd, int64_t n_head, bool bias, double rope_base,
                   tg_dtype dtype) {
    if (!tg_ok(ctx)) return NULL;
    if (!tg_check_size_arg(ctx, __func__, "n_embd", n_embd) || !tg_check_size_arg(ctx, __func__, "n_head", n_head))
        return NULL;
    if (n_embd % n_head) {
        tg_error(ctx, TG_ERR_VALUE, __func__, "n_head = %lld does not divide n_embd = %lld", (long long)n_head,
                 (long long)n_embd);
        return NULL;
    }
    if (!isfinite(rope_base) || rope_base < 0) {
        tg_error(ctx, TG_ERR_VALUE, __func__, "rope_base = %g must be finite and >= 0 (0: no RoPE)", rope_base);
        return NULL;
    }
    if (rope_base > 0 && (n_embd / n_head) % 2) {
        tg_error(ctx, TG_ERR_VALUE, __func__, "RoPE needs an even head size; n_embd / n_head = %lld / %lld = %lld",
                 (long long)n_embd, (long long)n_head, (long long)(n_embd / n_head));
        return NULL;
    }
    tg_mha *a = tg_module_alloc(ctx, __func__, sizeof *a, "CausalSelfAttention", name, dtype, &MHA_OPS);
    if (!a) return NULL;
    a->n_embd = n_embd;
    a->n_head = n_head;
    a->head_dim = n_embd / n_head;
    a->bias = bias;
    a->rope_base = rope_base;
    a->qkv = tg_linear_new(ctx, "qkv", n_embd, 3 * n_embd, bias, dtype);
    add_child(ctx, &a->children_, a->qkv);
    a->proj = tg_linear_new(ctx, "proj", n_embd, n_embd, bias, dtype);
    add_child(ctx, &a->children_, a->proj);
    return tg_module_built(ctx, &a->base);
}

/* q, k or v (index 0, 1, 2) of qkv (3, B, H, T, D), as (B, H, T, D). */
static tg_tensor *head_part(tg_ctx *ctx, tg_tensor *qkv, int64_t which) {
    tg_tensor *p = tg_slice(ctx, qkv, 0, which, which + 1);
    return p ? tg_reshape(ctx, p, 4, qkv->shape + 1) : NULL;
}

/* Writes the keys (kt: transposed, (pairs, D, cap) columns) or the values
 * (rows of (pairs, cap, D)) of positions pos .. pos + T - 1 of each of the
 * (batch, head) pairs from x (B, H, T, D). */
static void kv_put(tg_tensor *c, const tg_tensor *x, int64_t pos, bool transposed) {
    const int64_t T = x->shape[2], D = x->shape[3], pairs = x->shape[0] * x->shape[1];
    const size_t es = tg_esize(c->dtype);
    const unsigned char *src = x->data;
    unsigned char *dst = c->data;
    if (!transposed) {
        const int64_t cap = c->shape[2];
        for (int64_t p = 0; p < pairs; p++)
            memcpy(dst + (size_t)(p * cap + pos) * D * es, src + (size_t)(p * T * D) * es, (size_t)(T * D) * es);
        return;
    }
    const int64_t cap = c->shape[3];
    for (int64_t p = 0; p < pairs; p++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t e = 0; e < D; e++)
                memcpy(dst + (size_t)((p * D + e) * cap + pos + t) * es, src + (size_t)((p * T + t) * D + e) * es, es);
}

/* The attention of x (B, T, C) at positions pos .. pos + T - 1: over the
 * sequence itself (kv NULL, pos 0: tg_mha_forward) or over a KV cache
 * holding positions 0 .. pos - 1, to which it appends its keys and values. */
static tg_tensor *mha_run(tg_ctx *ctx, const char *fn, tg_mha *layer, tg_tensor *x, const tg_kv *kv, int64_t pos) {
    if (!tg_check_layer(ctx, fn, layer) || !check_btc(ctx, fn, x, layer->n_embd, layer->base.dtype)) return NULL;
    const int64_t B = x->shape[0], T = x->shape[1], C = layer->n_embd, H = layer->n_head, D = layer->head_dim;
    /* (B,T,3C) -> (B,T,3,H,D) -> (3,B,H,T,D): the heads side by side, q k v
     * first so each is one contiguous slice */
    tg_tensor *qkv = tg_linear_forward(ctx, layer->qkv, x);
    qkv = tg_reshape(ctx, qkv, 5, (const int64_t[]){B, T, 3, H, D});
    qkv = tg_permute(ctx, qkv, (const int[]){2, 0, 3, 1, 4});
    if (!qkv) return NULL;
    tg_tensor *q = head_part(ctx, qkv, 0), *k = head_part(ctx, qkv, 1), *v = head_part(ctx, qkv, 2);
    if (layer->rope_base > 0) { /* positions pos, pos + 1, ...: the same rotations as in the whole sequence */
        q = tg_rope_from(ctx, q, -2, layer->rope_base, pos);
        k = tg_rope_from(ctx, k, -2, layer->rope_base, pos);
    }
    tg_tensor *o;
    if (kv) {
        if (!q || !k || !v) return NULL;
        if (k->dtype != kv->kt->dtype) {
            tg_error(ctx, TG_ERR_DTYPE, fn, "the KV cache holds %s but the layer computes in %s (autocast changed?)",
                     tg_dtype_name(kv->kt->dtype), tg_dtype_name(k->dtype));
            return NULL;
        }
        kv_put(kv->kt, k, pos, true);
        kv_put(kv->v, v, pos, false);
        o = tg_attention_cached(ctx, fn, q, kv->kt, kv->v, pos + T); /* scale 1/sqrt(D) */
    } else {
        o = tg_attention(ctx, q, k, v, true, 0.0); /* (B,H,T,D), scale 1/sqrt(D) */
    }
    o = tg_permute(ctx, o, (const int[]){0, 2, 1, 3}); /* (B,T,H,D): heads merged back */
    o = tg_reshape(ctx, o, 3, (const int64_t[]){B, T, C});
    return o ? tg_linear_forward(ctx, layer->proj, o) : NULL;
}

tg_tensor *tg_mha_forward(tg_ctx *ctx, tg_mha *layer, tg_tensor *x) {
    return mha_run(ctx, __func__, layer, x, NULL, 0);
}

/* ---- MLP --------------------------------------------------------------------------- */

static size_t mlp_repr(const tg_module *m, char *buf, size_t size) {
    const tg_mlp *l = (const tg_mlp *)m;
    int n = snprintf(buf, size, "MLP(n_embd=%lld, hidden=%lld, act='%s')", (long long)l->n_embd, (long long)l->hidden,
                     l->kind == TG_MLP_SWIGLU ? "swiglu" : "gelu_tanh");
    return n > 0 ? (size_t)n : 0;
}

static tg_tensor *mlp_forward_m(tg_ctx *ctx, tg_module *m, tg_tensor *x) { return tg_mlp_forward(ctx, (tg_mlp *)m, x); }

static const tg_module_ops MLP_OPS = {
    .repr = mlp_repr, .free = container_free, .forward = mlp_forward_m, .children = mlp_children};

int64_t tg_mlp_hidden(tg_mlp_kind kind, int64_t n_embd) {
    if (kind != TG_MLP_SWIGLU) return 4 * n_embd;
    int64_t h = (8 * n_embd + 2) / 3; /* ceil(2/3 * 4C) */
    return (h + 31) / 32 * 32;
}

tg_mlp *tg_mlp_new(tg_ctx *ctx, const char *name, int64_t n_embd, int64_t hidden, tg_mlp_kind kind, bool bias,
                   tg_dtype dtype) {
    if (!tg_ok(ctx)) return NULL;
    if (!tg_check_size_arg(ctx, __func__, "n_embd", n_embd)) return NULL;
    if (kind != TG_MLP_GELU_TANH && kind != TG_MLP_SWIGLU) {
        tg_error(ctx, TG_ERR_VALUE, __func__, "kind = %d is neither TG_MLP_GELU_TANH nor TG_MLP_SWIGLU", (int)kind);
        return NULL;
    }
    if (hidden < 0) {
        tg_error(ctx, TG_ERR_VALUE, __func__, "hidden = %lld must be >= 1 (0: the default)", (long long)hidden);
        return NULL;
    }
    if (hidden == 0) hidden = tg_mlp_hidden(kind, n_embd);
    tg_mlp *l = tg_module_alloc(ctx, __func__, sizeof *l, "MLP", name, dtype, &MLP_OPS);
    if (!l) return NULL;
    l->kind = kind;
    l->n_embd = n_embd;
    l->hidden = hidden;
    l->fc = tg_linear_new(ctx, "fc", n_embd, hidden, bias, dtype);
    add_child(ctx, &l->children_, l->fc);
    if (kind == TG_MLP_SWIGLU) {
        l->gate = tg_linear_new(ctx, "gate", n_embd, hidden, bias, dtype);
        add_child(ctx, &l->children_, l->gate);
    }
    l->proj = tg_linear_new(ctx, "proj", hidden, n_embd, bias, dtype);
    add_child(ctx, &l->children_, l->proj);
    return tg_module_built(ctx, &l->base);
}

tg_tensor *tg_mlp_forward(tg_ctx *ctx, tg_mlp *layer, tg_tensor *x) {
    if (!tg_check_layer(ctx, __func__, layer) || !check_btc(ctx, __func__, x, layer->n_embd, layer->base.dtype))
        return NULL;
    tg_tensor *h = tg_linear_forward(ctx, layer->fc, x);
    if (layer->kind == TG_MLP_SWIGLU) h = tg_mul(ctx, tg_silu(ctx, h), tg_linear_forward(ctx, layer->gate, x));
    else h = tg_gelu(ctx, h, true);
    return h ? tg_linear_forward(ctx, layer->proj, h) : NULL;
}

/* ---- the pre-norm block ---------------------------------------------------------- */

tg_block_opts tg_block_llama(void) {
    return (tg_block_opts){
        .norm = TG_NORM_RMS, .mlp = TG_MLP_SWIGLU, .bias = false, .rope_base = 10000.0, .dtype = TG_F32};
}

tg_block_opts tg_block_gpt2(void) {
    return (tg_block_opts){
        .norm = TG_NORM_LAYER, .mlp = TG_MLP_GELU_TANH, .bias = true, .rope_base = 0.0, .dtype = TG_F32};
}

static size_t block_repr(const tg_module *m, char *buf, size_t size) {
    (void)m;
    int n = snprintf(buf, size, "Block");
    return n > 0 ? (size_t)n : 0;
}

static tg_tensor *block_forward_m(tg_ctx *ctx, tg_module *m, tg_tensor *x) {
    return tg_block_forward(ctx, (tg_block *)m, x);
}

static const tg_module_ops BLOCK_OPS = {
    .repr = block_repr, .free = container_free, .forward = block_forward_m, .children = block_children};

/* ln_1 or ln_2: the block's norm over C. */
static tg_module *block_norm(tg_ctx *ctx, const char *name, int64_t C, const tg_block_opts *o) {
    const int64_t shape[1] = {C};
    if (o->norm == TG_NORM_LAYER)
        return TG_MODULE(
            tg_layernorm_new(ctx, name, 1, shape, o->eps > 0 ? o->eps : TG_LAYERNORM_EPS, true, o->bias, o->dtype));
    return TG_MODULE(
        tg_rmsnorm_new(ctx, name, 1, shape, o->eps > 0 ? o->eps : TG_RMSNORM_EPS, true, o->bias, o->dtype));
}

tg_block *tg_block_new(tg_ctx *ctx, const char *name, int64_t n_embd, int64_t n_head, const tg_block_opts *opts) {
    if (!tg_ok(ctx)) return NULL;
    const tg_block_opts o = opts ? *opts : tg_block_llama();
    if (o.norm != TG_NORM_RMS && o.norm != TG_NORM_LAYER) {
        tg_error(ctx, TG_ERR_VALUE, __func__, "opts.norm = %d is neither TG_NORM_RMS nor TG_NORM_LAYER", (int)o.norm);
        return NULL;
    }
    if (!(o.eps >= 0) || !isfinite(o.eps)) {
        tg_error(ctx, TG_ERR_VALUE, __func__, "opts.eps = %g must be finite and >= 0 (0: the norm's default)", o.eps);
        return NULL;
    }
    tg_block *b = tg_module_alloc(ctx, __func__, sizeof *b, "Block", name, o.dtype, &BLOCK_OPS);
    if (!b) return NULL;
    b->opts = o;
    b->ln_1 = block_norm(ctx, "ln_1", n_embd, &o);
    add_child(ctx, &b->children_, b->ln_1);
    b->attn = tg_mha_new(ctx, "attn", n_embd, n_head, o.bias, o.rope_base, o.dtype);
    add_child(ctx, &b->children_, b->attn);
    b->ln_2 = block_norm(ctx, "ln_2", n_embd, &o);
    add_child(ctx, &b->children_, b->ln_2);
    b->mlp = tg_mlp_new(ctx, "mlp", n_embd, o.hidden, o.mlp, o.bias, o.dtype);
    add_child(ctx, &b->children_, b->mlp);
    return tg_module_built(ctx, &b->base);
}

/* h = x + attn(ln_1(x)), y = h + mlp(ln_2(h)), the attention over x itself
 * or over a KV cache (mha_run). */
static tg_tensor *block_run(tg_ctx *ctx, const char *fn, tg_block *layer, tg_tensor *x, const tg_kv *kv, int64_t pos) {
    if (!tg_check_layer(ctx, fn, layer) || !check_btc(ctx, fn, x, layer->attn->n_embd, layer->base.dtype)) return NULL;
    x = tg_autocast_input(ctx, x); /* the residual stream in the compute dtype under autocast */
    tg_tensor *a = tg_module_forward(ctx, layer->ln_1, x);
    tg_tensor *h = tg_add(ctx, x, kv ? mha_run(ctx, fn, layer->attn, a, kv, pos) : tg_mha_forward(ctx, layer->attn, a));
    return tg_add(ctx, h, tg_mlp_forward(ctx, layer->mlp, tg_module_forward(ctx, layer->ln_2, h)));
}

tg_tensor *tg_block_forward(tg_ctx *ctx, tg_block *layer, tg_tensor *x) {
    return block_run(ctx, __func__, layer, x, NULL, 0);
}

tg_tensor *tg_block_forward_kv(tg_ctx *ctx, const char *fn, tg_block *layer, tg_tensor *x, const tg_kv *kv,
                               int64_t pos) {
    return block_run(ctx, fn, layer, x, kv, pos);
}

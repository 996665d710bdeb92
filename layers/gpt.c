/* tg_gpt: a decoder-only language model (GPT-2 or LLaMA) built from the
 * transformer modules of layers/transformer.c, the embedding tables, a
 * final norm and the output projection (GPT-2: the token table itself,
 * weight tying: its gradient is the sum of both uses, since one tensor
 * feeds two ops; tests/test_weight_tying.c checks that).
 *
 * The model is a container: its children are "wte", "wpe" (GPT-2), "h" (a
 * Sequential of the blocks, so parameters are named "h.0.attn.qkv.weight"
 * as GPT-2's "h.0.attn.c_attn.weight"), "ln_f" and "lm_head" (LLaMA). */
#include "layers/module.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* GPT-2's init: N(0, 0.02) for weights and embeddings. */
#define GPT_INIT_STD 0.02

tg_gpt_config tg_gpt_defaults(tg_gpt_arch arch) {
    return (tg_gpt_config){.arch = arch,
                           .vocab_size = 128,
                           .context = 64,
                           .n_layer = 4,
                           .n_head = 4,
                           .n_embd = 128,
                           .hidden = 0,
                           .rope_base = 10000.0,
                           .dtype = TG_F32};
}

const char *tg_gpt_arch_name(tg_gpt_arch arch) {
    return arch == TG_GPT_GPT2 ? "gpt2" : arch == TG_GPT_LLAMA ? "llama" : "?";
}

static size_t gpt_repr(const tg_module *m, char *buf, size_t size) {
    const tg_gpt_config *c = &((const tg_gpt *)m)->config;
    int n = snprintf(buf, size, "GPT(arch=%s, vocab_size=%lld, context=%lld, n_layer=%lld, n_head=%lld, n_embd=%lld)",
                     tg_gpt_arch_name(c->arch), (long long)c->vocab_size, (long long)c->context, (long long)c->n_layer,
                     (long long)c->n_head, (long long)c->n_embd);
    return n > 0 ? (size_t)n : 0;
}

static const tg_model *gpt_children(const tg_module *m) { return &((const tg_gpt *)m)->children_; }

static void gpt_free_m(tg_ctx *ctx, tg_module *m) {
    tg_model_free(ctx, &((tg_gpt *)m)->children_);
    tg_heap_free(ctx, m);
}

static const tg_module_ops GPT_OPS = {.repr = gpt_repr,
                                      .free = gpt_free_m,
                                      .children = gpt_children,
                                      .forward_hint = "it takes token ids (tg_gpt_forward)"};

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* GPT-2's init over the parameter list, in its order: gains 1 and biases 0
 * stay as the layers made them; every other tensor is redrawn N(0, std),
 * with std / sqrt(2 L) for the projections that end in the residual
 * stream (each block adds two of them). */
static void gpt_init(tg_ctx *ctx, tg_gpt *g) {
    tg_params list = {0};
    if (tg_module_params(ctx, &g->base, &list)) {
        const double resid = GPT_INIT_STD / sqrt(2.0 * (double)g->config.n_layer);
        for (int i = 0; i < list.count && tg_ok(ctx); i++) {
            const char *n = list.items[i].name;
            if (ends_with(n, ".bias") || ends_with(n, ".gamma") || ends_with(n, ".beta")) continue;
            tg_tensor *p = list.items[i].value;
            double std = ends_with(n, ".proj.weight") ? resid : GPT_INIT_STD;
            tg_assign(ctx, p, tg_randn(ctx, p->dtype, p->ndim, p->shape, 0.0, std));
        }
    }
    tg_params_free(&list);
}

tg_gpt *tg_gpt_new(tg_ctx *ctx, const char *name, const tg_gpt_config *config) {
    if (!tg_ok(ctx)) return NULL;
    if (!config) {
        tg_null_error(ctx, __func__, "config");
        return NULL;
    }
    const tg_gpt_config c = *config;
    if (c.arch != TG_GPT_LLAMA && c.arch != TG_GPT_GPT2) {
        tg_error(ctx, TG_ERR_VALUE, __func__, "config.arch = %d is neither TG_GPT_LLAMA nor TG_GPT_GPT2", (int)c.arch);
        return NULL;
    }
    if (!tg_check_size_arg(ctx, __func__, "config.vocab_size", c.vocab_size) ||
        !tg_check_size_arg(ctx, __func__, "config.context", c.context) ||
        !tg_check_size_arg(ctx, __func__, "config.n_layer", c.n_layer) ||
        !tg_check_size_arg(ctx, __func__, "config.n_head", c.n_head) ||
        !tg_check_size_arg(ctx, __func__, "config.n_embd", c.n_embd))
        return NULL;
    if (c.n_embd % c.n_head) {
        tg_error(ctx, TG_ERR_VALUE, __func__, "config.n_head = %lld does not divide config.n_embd = %lld",
                 (long long)c.n_head, (long long)c.n_embd);
        return NULL;
    }
    if (!(isfinite(c.norm_eps) && c.norm_eps >= 0)) {
        tg_error(ctx, TG_ERR_VALUE, __func__, "config.norm_eps = %g must be finite and >= 0 (0: the norms' default)",
                 c.norm_eps);
        return NULL;
    }
    if (c.arch == TG_GPT_LLAMA && !(isfinite(c.rope_base) && c.rope_base > 0)) {
        tg_error(ctx, TG_ERR_VALUE, __func__, "config.rope_base = %g must be finite and > 0", c.rope_base);
        return NULL;
    }
    if (c.n_layer > 9999) {
        tg_error(ctx, TG_ERR_VALUE, __func__, "config.n_layer = %lld: at most 9999", (long long)c.n_layer);
        return NULL;
    }
    tg_gpt *g = tg_module_alloc(ctx, __func__, sizeof *g, "GPT", name, c.dtype, &GPT_OPS);
    if (!g) return NULL;
    g->config = c;
    tg_block_opts bo = c.arch == TG_GPT_GPT2 ? tg_block_gpt2() : tg_block_llama();
    bo.dtype = c.dtype;
    bo.hidden = c.hidden;
    bo.eps = c.norm_eps;
    if (c.arch == TG_GPT_LLAMA) bo.rope_base = c.rope_base;
    g->wte = tg_embedding_layer_new(ctx, "wte", c.vocab_size, c.n_embd, c.dtype);
    if (g->wte) tg_model_add(ctx, &g->children_, TG_MODULE(g->wte));
    if (c.arch == TG_GPT_GPT2) {
        g->wpe = tg_embedding_layer_new(ctx, "wpe", c.context, c.n_embd, c.dtype);
        if (g->wpe) tg_model_add(ctx, &g->children_, TG_MODULE(g->wpe));
    }
    g->h = tg_sequential_new(ctx, "h");
    if (g->h) tg_model_add(ctx, &g->children_, TG_MODULE(g->h));
    for (int64_t l = 0; l < c.n_layer && tg_ok(ctx); l++) {
        char key[8];
        snprintf(key, sizeof key, "%lld", (long long)l);
        tg_block *b = tg_block_new(ctx, key, c.n_embd, c.n_head, &bo);
        if (b) tg_sequential_add(ctx, g->h, TG_MODULE(b));
    }
    const int64_t cshape[1] = {c.n_embd};
    const double eps = c.norm_eps > 0 ? c.norm_eps : c.arch == TG_GPT_GPT2 ? TG_LAYERNORM_EPS : TG_RMSNORM_EPS;
    g->ln_f = c.arch == TG_GPT_GPT2 ? TG_MODULE(tg_layernorm_new(ctx, "ln_f", 1, cshape, eps, true, true, c.dtype))
                                    : TG_MODULE(tg_rmsnorm_new(ctx, "ln_f", 1, cshape, eps, true, false, c.dtype));
    if (g->ln_f) tg_model_add(ctx, &g->children_, g->ln_f);
    if (c.arch == TG_GPT_LLAMA) {
        g->lm_head = tg_linear_new(ctx, "lm_head", c.n_embd, c.vocab_size, false, c.dtype);
        if (g->lm_head) tg_model_add(ctx, &g->children_, TG_MODULE(g->lm_head));
    }
    if (tg_ok(ctx)) gpt_init(ctx, g);
    return tg_module_built(ctx, &g->base);
}

/* A block as tg_checkpoint's function: user is the block. */
static tg_tensor *block_fn(tg_ctx *ctx, tg_tensor *const *in, void *user) { return tg_block_forward(ctx, user, in[0]); }

tg_tensor *tg_gpt_forward_at(tg_ctx *ctx, const char *fn, tg_gpt *gpt, int64_t B, int64_t T, const int64_t *idx,
                             const tg_kv *kv, int64_t pos) {
    if (!tg_check_layer(ctx, fn, gpt)) return NULL;
    const tg_gpt_config *c = &gpt->config;
    if (!idx) {
        tg_null_error(ctx, fn, "idx");
        return NULL;
    }
    if (B < 1 || T < 1 || pos < 0 || pos + T > c->context) {
        if (pos == 0)
            tg_error(ctx, TG_ERR_VALUE, fn, "B = %lld, T = %lld: need B >= 1 and 1 <= T <= the context %lld",
                     (long long)B, (long long)T, (long long)c->context);
        else
            tg_error(ctx, TG_ERR_VALUE, fn,
                     "B = %lld, T = %lld new positions after %lld: need B >= 1, T >= 1 and %lld + T <= the context "
                     "%lld",
                     (long long)B, (long long)T, (long long)pos, (long long)pos, (long long)c->context);
        return NULL;
    }
    tg_tensor *x = tg_embedding_layer_forward(ctx, gpt->wte, 2, (const int64_t[]){B, T}, idx); /* (B,T,C) */
    if (gpt->wpe) {
        int64_t *p = tg_arena_alloc(ctx, (size_t)T * sizeof *p);
        if (!p) return NULL;
        for (int64_t t = 0; t < T; t++) p[t] = pos + t;
        x = tg_add(ctx, x, tg_embedding_layer_forward(ctx, gpt->wpe, 1, &T, p)); /* + (T,C) */
    }
    if (kv) /* the blocks one by one, each with its cache */
        for (int l = 0; l < gpt->h->modules.count && x; l++)
            x = tg_block_forward_kv(ctx, fn, (tg_block *)gpt->h->modules.items[l], x, &kv[l], pos);
    else if (c->checkpoint && tg_grad_enabled(ctx)) /* each block recomputed in backward */
        for (int l = 0; l < gpt->h->modules.count && x; l++)
            x = tg_checkpoint(ctx, block_fn, gpt->h->modules.items[l], 1, &x);
    else x = tg_sequential_forward(ctx, gpt->h, x);
    x = tg_module_forward(ctx, gpt->ln_f, x);
    if (!x) return NULL;
    /* GPT-2 ties the output projection to the token table: logits = x wte^T
     * (under autocast through the table's 16-bit copy, whose gradient joins
     * the embedding's in wte's float32 grad) */
    return gpt->lm_head ? tg_linear_forward(ctx, gpt->lm_head, x)
                        : tg_linear_fused(ctx, x, tg_autocast_param(ctx, gpt->wte->weight), NULL);
}

tg_tensor *tg_gpt_forward(tg_ctx *ctx, tg_gpt *gpt, int64_t B, int64_t T, const int64_t *idx) {
    return tg_gpt_forward_at(ctx, __func__, gpt, B, T, idx, NULL, 0);
}

tg_tensor *tg_gpt_loss_from(tg_ctx *ctx, tg_tensor *logits, const int64_t *targets) {
    if (!tg_check_arg_any(ctx, __func__, "logits", logits)) return NULL;
    if (!targets) {
        tg_null_error(ctx, __func__, "targets");
        return NULL;
    }
    if (logits->ndim < 2 || logits->numel == 0) {
        char s[TG_SHAPE_STR];
        tg_error(ctx, TG_ERR_SHAPE, __func__, "logits %s: need (..., vocab_size) with at least one row",
                 tg_shape_of(s, logits));
        return NULL;
    }
    /* the loss in float32, as autocast computes losses */
    if (tg_is_lowp(logits->dtype)) logits = tg_cast(ctx, logits, TG_F32);
    const int64_t V = logits->shape[logits->ndim - 1];
    tg_tensor *rows = tg_reshape(ctx, logits, 2, (const int64_t[]){logits ? logits->numel / V : 0, V});
    return tg_cross_entropy(ctx, rows, targets, NULL);
}

tg_tensor *tg_gpt_loss(tg_ctx *ctx, tg_gpt *gpt, int64_t B, int64_t T, const int64_t *idx, const int64_t *targets) {
    tg_tensor *logits = tg_gpt_forward(ctx, gpt, B, T, idx);
    if (!logits) return NULL;
    if (!targets) {
        tg_null_error(ctx, __func__, "targets");
        return NULL;
    }
    return tg_gpt_loss_from(ctx, logits, targets);
}

void tg_gpt_free(tg_ctx *ctx, tg_gpt *gpt) {
    if (gpt) tg_module_free(ctx, TG_MODULE(gpt));
}

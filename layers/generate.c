/* Text generation with tg_gpt: the KV cache, the sampler and the loop that
 * joins them (tapegrad/layers.h, "Generation").
 *
 * The KV cache. A decoder's position t attends to the keys and values of
 * positions 0 .. t, and those of the earlier positions do not change when
 * t is appended: each block's k and v rows depend only on the tokens at
 * and before their position (causal attention, per-position norms, MLPs
 * and projections). So a generation state keeps, per block, the keys and
 * values of the positions seen so far (the cache, persistent: the keys
 * transposed, (1, H, D, context), as the attention's first product reads
 * them, and the values (1, H, context, D)), and each new token runs the model over one position:
 * its q, k, v, k and v appended to the cache, its attention over the
 * cached rows (tg_attention_cached, the training kernel with the causal
 * mask offset to the last rows), its MLP, the logits of that one row. A
 * token costs O(L C^2 + L T C) instead of the O(L T C^2 + L T^2 C) of a
 * forward over the whole window.
 *
 * Why the logits are the full forward's, bit for bit: every op of the
 * one-position forward computes its row with the same kernel and the same
 * order of sums as the full forward's row t: the GEMM's rows do not depend
 * on M (tensor/gemm.h), the norms, the activations and the RoPE table
 * (tg_rope_from) work row by row, and the attention's row t sums over the
 * same t + 1 keys in the same lanes. The one exception is the attention's
 * second product, whose depth is the number of keys: past one K slice of
 * the GEMM (more than 256 keys in float64, 384 in float32) its slices are
 * cut differently, and the two agree to rounding only. tests/test_generate.c
 * checks both archs bitwise in float64 and float32.
 *
 * Sliding. The cache holds at most `context` positions (GPT-2's position
 * table has no more rows; LLaMA was trained on no longer windows). When a
 * new token finds it full, the cache is emptied and refilled by one
 * forward over the last `keep` tokens, the new one included, which then
 * sit at positions 0 .. keep - 1: every token's logits are those of a full
 * forward over the window the cache holds, between keep and context
 * tokens long. keep = context/2 (the default) costs one forward of
 * context/2 positions every context/2 tokens, about two positions a
 * token; keep = context refills every token, so every window is the last
 * context tokens -- what a loop without a cache computes (nanoGPT's crop),
 * at its cost.
 *
 * Memory. The cache is persistent (2 L C context elements); everything a
 * token's forward makes is arena memory, which tg_gpt_generate gives back
 * after each token (tg_arena_mark / tg_arena_release: the caller's arena
 * tensors made before the call stay valid, and the arena is where it was
 * when the call returns). */
#include "autograd/ops_attention.h"
#include "layers/module.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct tg_gpt_cache {
    tg_gpt *gpt;
    tg_kv *kv;        /* one per block */
    int64_t len, cap; /* positions held, and at most (the context) */
    tg_dtype dtype;   /* of k and v: the dtype the blocks compute in */
};

/* The dtype the model's blocks compute in: the autocast dtype for a
 * float32 model under autocast, else the model's. */
static tg_dtype compute_dtype(const tg_ctx *ctx, const tg_gpt *gpt) {
    return gpt->config.dtype == TG_F32 && ctx->autocast != TG_F32 ? ctx->autocast : gpt->config.dtype;
}

void tg_gpt_cache_free(tg_ctx *ctx, tg_gpt_cache *cache) {
    if (!ctx || !cache) return;
    if (cache->kv)
        for (int64_t l = 0; l < cache->gpt->config.n_layer; l++) {
            tg_tensor_free(ctx, cache->kv[l].kt);
            tg_tensor_free(ctx, cache->kv[l].v);
        }
    tg_heap_free(ctx, cache->kv);
    tg_heap_free(ctx, cache);
}

tg_gpt_cache *tg_gpt_cache_new(tg_ctx *ctx, tg_gpt *gpt) {
    if (!tg_check_layer(ctx, __func__, gpt)) return NULL;
    const tg_gpt_config *c = &gpt->config;
    tg_gpt_cache *cache = tg_heap_alloc(ctx, sizeof *cache);
    tg_kv *kv = tg_heap_alloc(ctx, (size_t)c->n_layer * sizeof *kv);
    if (!cache || !kv) {
        tg_heap_free(ctx, cache);
        tg_heap_free(ctx, kv);
        tg_error(ctx, TG_ERR_OOM, __func__, "out of memory for the cache of %lld layers", (long long)c->n_layer);
        return NULL;
    }
    memset(kv, 0, (size_t)c->n_layer * sizeof *kv);
    *cache = (tg_gpt_cache){.gpt = gpt, .kv = kv, .len = 0, .cap = c->context, .dtype = compute_dtype(ctx, gpt)};
    const int64_t H = c->n_head, D = c->n_embd / c->n_head;
    const tg_arena_pos mark = tg_arena_mark(ctx); /* the zeros are copied to the heap */
    for (int64_t l = 0; l < c->n_layer && tg_ok(ctx); l++) {
        kv[l].kt = tg_persist(ctx, tg_zeros(ctx, cache->dtype, 4, (const int64_t[]){1, H, D, c->context}));
        kv[l].v = tg_persist(ctx, tg_zeros(ctx, cache->dtype, 4, (const int64_t[]){1, H, c->context, D}));
    }
    tg_arena_release(ctx, mark);
    if (!tg_ok(ctx)) {
        tg_gpt_cache_free(ctx, cache);
        return NULL;
    }
    return cache;
}

int64_t tg_gpt_cache_len(const tg_gpt_cache *cache) { return cache ? cache->len : 0; }

void tg_gpt_cache_clear(tg_gpt_cache *cache) {
    if (cache) cache->len = 0;
}

tg_tensor *tg_gpt_cache_forward(tg_ctx *ctx, tg_gpt_cache *cache, int64_t T, const int64_t *idx) {
    if (!tg_ok(ctx)) return NULL;
    if (!cache) {
        tg_null_error(ctx, __func__, "cache");
        return NULL;
    }
    if (T < 1 || cache->len + T > cache->cap) {
        tg_error(ctx, TG_ERR_VALUE, __func__,
                 "T = %lld new tokens: need T >= 1, and the cache holds %lld of its %lld positions (the context): "
                 "tg_gpt_cache_clear it, or feed fewer",
                 (long long)T, (long long)cache->len, (long long)cache->cap);
        return NULL;
    }
    const tg_dtype now = compute_dtype(ctx, cache->gpt);
    if (now != cache->dtype) {
        tg_error(ctx, TG_ERR_DTYPE, __func__,
                 "the cache holds %s keys and values, but the model now computes in %s: make the cache under the "
                 "autocast setting it is used with",
                 tg_dtype_name(cache->dtype), tg_dtype_name(now));
        return NULL;
    }
    const bool was = tg_set_grad_enabled(ctx, false);
    tg_tensor *logits = tg_gpt_forward_at(ctx, __func__, cache->gpt, 1, T, idx, cache->kv, cache->len);
    tg_set_grad_enabled(ctx, was);
    if (!logits) return NULL;
    cache->len += T;
    return logits;
}

/* ---- sampling ----------------------------------------------------------------------- */

tg_gen_opts tg_gen_defaults(void) {
    return (tg_gen_opts){
        .temperature = 1.0, .top_k = 0, .top_p = 1.0, .seed = 0, .stop = -1, .keep = 0, .use_cache = true};
}

/* Checks the sampling options against a vocabulary of V tokens (and, with
 * context > 0, keep against it). */
static bool check_opts(tg_ctx *ctx, const char *fn, const tg_gen_opts *o, int64_t V, int64_t context) {
    if (!(o->temperature >= 0) || !isfinite(o->temperature)) {
        tg_error(ctx, TG_ERR_VALUE, fn, "temperature = %g must be finite and >= 0 (0: greedy, the argmax)",
                 o->temperature);
        return false;
    }
    if (o->top_k < 0) {
        tg_error(ctx, TG_ERR_VALUE, fn, "top_k = %lld must be >= 0 (0: no top-k cut)", (long long)o->top_k);
        return false;
    }
    if (!(o->top_p > 0 && o->top_p <= 1)) {
        tg_error(ctx, TG_ERR_VALUE, fn, "top_p = %g must be in (0, 1] (1: no nucleus cut)", o->top_p);
        return false;
    }
    if (o->stop < -1 || o->stop >= V) {
        tg_error(ctx, TG_ERR_VALUE, fn, "stop = %lld is not a token id in 0..%lld, nor -1 (no stop token)",
                 (long long)o->stop, (long long)(V - 1));
        return false;
    }
    if (context > 0 && (o->keep < 0 || o->keep > context)) {
        tg_error(ctx, TG_ERR_VALUE, fn, "keep = %lld must be in 1..%lld (the context), or 0 (half the context)",
                 (long long)o->keep, (long long)context);
        return false;
    }
    return true;
}

/* A token, its scaled logit z = (l - max l) / temperature and its
 * unnormalized probability p = e^z. */
typedef struct {
    double z, p;
    int64_t id;
} ranked;

/* Larger logit first, then the smaller id: a total order, so the kept set
 * never depends on qsort. */
static int by_rank(const void *a, const void *b) {
    const ranked *x = a, *y = b;
    if (x->z != y->z) return x->z > y->z ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* The sampler on the logits l[0..V-1] (double, none NaN or +inf, one
 * above -inf), scratch `rank` (V):
 *   temperature 0: the first largest logit (greedy);
 *   else p_i = exp((l_i - max) / temperature); top-k keeps the k largest
 *   (ties: the smaller id), top-p then the shortest head of that ranking
 *   whose share of its probability reaches top_p (at least one token);
 *   the token is drawn from what is kept, in proportion to p, by one
 *   uniform u: the first token whose running sum of p exceeds u sum p. */
static int64_t pick(const double *l, int64_t V, const tg_gen_opts *o, uint64_t draw, ranked *rank) {
    int64_t best = 0;
    for (int64_t i = 1; i < V; i++)
        if (l[i] > l[best]) best = i;
    if (o->temperature == 0) return best;
    for (int64_t i = 0; i < V; i++) rank[i] = (ranked){.z = (l[i] - l[best]) / o->temperature, .id = i};
    int64_t kept = V;
    const bool cut_k = o->top_k > 0 && o->top_k < V, cut_p = o->top_p < 1;
    if (cut_k || cut_p) qsort(rank, (size_t)V, sizeof *rank, by_rank);
    if (cut_k) kept = o->top_k;
    double z = 0;
    for (int64_t i = 0; i < kept; i++) z += rank[i].p = exp(rank[i].z);
    if (cut_p) {
        double acc = 0;
        int64_t n = 0;
        while (n < kept && acc < o->top_p * z) acc += rank[n++].p;
        kept = n > 0 ? n : 1;
        z = acc > 0 ? acc : rank[0].p;
    }
    /* u uniform in [0, 1): Philox at (counter draw, key seed), a pure
     * function of the seed and the draw's number (word 2 keeps it apart
     * from the context's stream of the same seed) */
    uint32_t bits[4];
    tg_philox4x32_10(bits, (const uint32_t[4]){(uint32_t)draw, (uint32_t)(draw >> 32), 0x67656e00u, 0},
                     (const uint32_t[2]){(uint32_t)o->seed, (uint32_t)(o->seed >> 32)});
    const double u = tg_u01_f64(bits[0], bits[1]) * z;
    double acc = 0;
    for (int64_t i = 0; i < kept - 1; i++)
        if ((acc += rank[i].p) > u) return rank[i].id;
    return rank[kept - 1].id;
}

int64_t tg_sample_token(tg_ctx *ctx, const tg_tensor *logits, const tg_gen_opts *opts, uint64_t draw) {
    if (!tg_check_arg_any(ctx, __func__, "logits", logits)) return -1;
    const tg_gen_opts o = opts ? *opts : tg_gen_defaults();
    const int64_t V = logits->ndim ? logits->shape[logits->ndim - 1] : 0;
    if (V < 1) {
        char s[TG_SHAPE_STR];
        tg_error(ctx, TG_ERR_SHAPE, __func__, "logits %s: need (..., vocab_size) with vocab_size >= 1",
                 tg_shape_of(s, logits));
        return -1;
    }
    if (!check_opts(ctx, __func__, &o, V, 0)) return -1;
    const tg_arena_pos mark = tg_arena_mark(ctx);
    double *l = tg_arena_alloc_fn(ctx, __func__, (size_t)V * sizeof *l);
    ranked *rank = tg_arena_alloc_fn(ctx, __func__, (size_t)V * sizeof *rank);
    int64_t id = -1;
    if (l && rank) {
        const int64_t row = logits->numel - V; /* the last row */
        bool any = false;
        for (int64_t i = 0; i < V && tg_ok(ctx); i++) {
            l[i] = tg_load(logits, row + i);
            if (isnan(l[i]) || l[i] == INFINITY)
                tg_error(ctx, TG_ERR_VALUE, __func__, "the logit of token %lld is %g: cannot sample", (long long)i,
                         l[i]);
            any = any || l[i] > -INFINITY;
        }
        if (tg_ok(ctx) && !any)
            tg_error(ctx, TG_ERR_VALUE, __func__, "every logit is -inf: no token has any probability");
        if (tg_ok(ctx)) id = pick(l, V, &o, draw, rank);
    }
    tg_arena_release(ctx, mark);
    return id;
}

/* ---- the generation loop ------------------------------------------------------------ */

/* Under autocast, makes the 16-bit copies of the parameters now, before
 * the loop's arena mark, so the copies the layers reuse (the context's
 * table, layers/autocast.c) are never given back by a release. */
static void prime_autocast(tg_ctx *ctx, tg_gpt *gpt) {
    if (ctx->autocast == TG_F32 || gpt->config.dtype != TG_F32) return;
    tg_params list = {0};
    if (tg_module_params(ctx, TG_MODULE(gpt), &list))
        for (int i = 0; i < list.count && tg_ok(ctx); i++) tg_autocast_param(ctx, list.items[i].value);
    tg_params_free(&list);
}

/* The logits of the next token after hist[0 .. n-1]: through the cache
 * (one new position, or a refill of the last `keep` when it is full), or
 * a forward over the last min(n, context) tokens. */
static tg_tensor *next_logits(tg_ctx *ctx, tg_gpt *gpt, tg_gpt_cache *cache, const int64_t *hist, int64_t n,
                              int64_t fed, int64_t keep) {
    const int64_t context = gpt->config.context;
    if (!cache) {
        const int64_t T = n < context ? n : context;
        return tg_gpt_forward_at(ctx, "tg_gpt_generate", gpt, 1, T, hist + n - T, NULL, 0);
    }
    if (cache->len + (n - fed) > cache->cap) { /* slide: refill with the last keep tokens */
        tg_gpt_cache_clear(cache);
        fed = n - keep;
    }
    return tg_gpt_cache_forward(ctx, cache, n - fed, hist + fed);
}

int64_t tg_gpt_generate(tg_ctx *ctx, tg_gpt *gpt, int64_t n_prompt, const int64_t *prompt, int64_t n_new,
                        const tg_gen_opts *opts, int64_t *out) {
    if (!tg_check_layer(ctx, __func__, gpt)) return -1;
    const tg_gen_opts o = opts ? *opts : tg_gen_defaults();
    const int64_t V = gpt->config.vocab_size, context = gpt->config.context;
    if (!prompt || (!out && n_new > 0)) {
        tg_null_error(ctx, __func__, !prompt ? "prompt" : "out");
        return -1;
    }
    if (n_prompt < 1 || n_prompt > context || n_new < 0) {
        tg_error(ctx, TG_ERR_VALUE, __func__,
                 n_prompt > context ? "the prompt of %lld tokens is longer than the context, %lld positions"
                                    : "n_prompt = %lld, n_new = %lld: need 1 <= n_prompt <= the context and n_new >= 0",
                 (long long)n_prompt, (long long)(n_prompt > context ? context : n_new));
        return -1;
    }
    for (int64_t i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= V) {
            tg_error(ctx, TG_ERR_INDEX, __func__, "prompt[%lld] = %lld is not a token id in 0..%lld", (long long)i,
                     (long long)prompt[i], (long long)(V - 1));
            return -1;
        }
    if (!check_opts(ctx, __func__, &o, V, context)) return -1;
    const int64_t keep = o.keep ? o.keep : (context / 2 > 0 ? context / 2 : 1);
    int64_t *hist = tg_heap_alloc(ctx, (size_t)(n_prompt + n_new) * sizeof *hist);
    if (!hist) {
        tg_error(ctx, TG_ERR_OOM, __func__, "out of memory for %lld tokens", (long long)(n_prompt + n_new));
        return -1;
    }
    memcpy(hist, prompt, (size_t)n_prompt * sizeof *hist);
    const bool was = tg_set_grad_enabled(ctx, false);
    prime_autocast(ctx, gpt);
    const tg_arena_pos mark = tg_arena_mark(ctx);
    tg_gpt_cache *cache = o.use_cache ? tg_gpt_cache_new(ctx, gpt) : NULL;
    int64_t n = n_prompt, fed = 0, made = 0;
    while (made < n_new && tg_ok(ctx)) {
        tg_tensor *logits = next_logits(ctx, gpt, cache, hist, n, fed, keep);
        fed = n;
        const int64_t id = logits ? tg_sample_token(ctx, logits, &o, (uint64_t)made) : -1;
        tg_arena_release(ctx, mark); /* what this token's forward made */
        if (id < 0) break;
        hist[n++] = out[made++] = id;
        if (id == o.stop || (o.on_token && !o.on_token(o.user, id))) break;
    }
    tg_gpt_cache_free(ctx, cache);
    tg_set_grad_enabled(ctx, was);
    tg_heap_free(ctx, hist);
    return tg_ok(ctx) ? made : -1;
}

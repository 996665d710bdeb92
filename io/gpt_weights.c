/* GPT weights in PyTorch's layouts: tg_gpt_import, tg_gpt_import_new and
 * tg_gpt_export (include/tapegrad/io.h; the table in docs/weights.md).
 *
 * One table, MAP below, says where each tapegrad parameter lives in the
 * file: under which name in each layout, and how its elements move. Only
 * three moves exist, all of them plain element copies (no arithmetic, so
 * a round trip is exact in every dtype):
 *  - COPY: the same rows (or, for a part of the fused qkv, rows
 *    part * C .. part * C + C - 1 of it);
 *  - CONV1D: Hugging Face's GPT-2 keeps its Linear weights as Conv1D's
 *    W (in, out), y = x W + b; tapegrad's are (out, in), y = x W^T + b, so
 *    element (i, o) of the file is element (o, i) of the parameter;
 *  - ROPE: Hugging Face's LLaMA rotates the halves of a head, pairing
 *    element i with i + D/2 (rotate_half), where tapegrad, as Meta's
 *    reference model, pairs 2i with 2i + 1. Its conversion script
 *    (convert_llama_weights_to_hf.py) permutes the rows of wq and wk,
 *      w_hf = w_meta.view(H, D/2, 2, C).transpose(1, 2).reshape(H D, C),
 *    so row h D + j D/2 + i of q_proj (j = 0, 1) is row h D + 2i + j of
 *    Meta's wq. With both q and k permuted alike and the rotation matched,
 *    q . k, and so the model, is the same function.
 *
 * An import reads the file once and validates it (tg_st_parse), checks
 * every tensor against the model (names, shapes, nothing left over) before
 * writing anything, then moves the tensors into the parameters: from the
 * file's bytes where they are the model's dtype in the host's byte order,
 * else from a copy the checkpoint loader stages (converting the dtype,
 * swapping bytes on a big-endian host). On error the model is unchanged. An
 * export moves the parameters into tensors of the file's shapes and saves
 * them with the checkpoint's atomic save. */
#include "io/checkpoint.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "tensor/internal.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the mapping table ------------------------------------------------------------- */

enum move { COPY, CONV1D, ROPE };
enum flag {
    TIED = 1,     /* GPT-2's lm_head: wte itself. Export writes it; import
                     checks the file's, when there is one, equals wte */
    FALLBACK = 2, /* LLaMA's lm_head: absent from a Hugging Face file that
                     ties it (tie_word_embeddings), then read from the
                     token table */
};

/* One row: tapegrad's parameter (or a part of it) and the file's tensor.
 * Block rows are per block: tapegrad "h.N." + tg, the file "h.N." (GPT-2)
 * or "layers.N." (LLaMA) + the name. */
typedef struct map_row {
    tg_gpt_arch arch;
    bool block;
    const char *tg;
    int part;          /* -1: the whole parameter; 0, 1, 2: q, k, v of qkv */
    const char *hf;    /* Hugging Face's name (nanoGPT's too) */
    const char *meta;  /* Meta's name, NULL: not in that layout */
    enum move hf_move; /* the move in Hugging Face's layout (others: COPY) */
    int flags;
} map_row;

static const map_row MAP[] = {
    {TG_GPT_GPT2, false, "wte.weight", -1, "wte.weight", NULL, COPY, 0},
    {TG_GPT_GPT2, false, "wpe.weight", -1, "wpe.weight", NULL, COPY, 0},
    {TG_GPT_GPT2, true, "ln_1.gamma", -1, "ln_1.weight", NULL, COPY, 0},
    {TG_GPT_GPT2, true, "ln_1.beta", -1, "ln_1.bias", NULL, COPY, 0},
    {TG_GPT_GPT2, true, "attn.qkv.weight", -1, "attn.c_attn.weight", NULL, CONV1D, 0},
    {TG_GPT_GPT2, true, "attn.qkv.bias", -1, "attn.c_attn.bias", NULL, COPY, 0},
    {TG_GPT_GPT2, true, "attn.proj.weight", -1, "attn.c_proj.weight", NULL, CONV1D, 0},
    {TG_GPT_GPT2, true, "attn.proj.bias", -1, "attn.c_proj.bias", NULL, COPY, 0},
    {TG_GPT_GPT2, true, "ln_2.gamma", -1, "ln_2.weight", NULL, COPY, 0},
    {TG_GPT_GPT2, true, "ln_2.beta", -1, "ln_2.bias", NULL, COPY, 0},
    {TG_GPT_GPT2, true, "mlp.fc.weight", -1, "mlp.c_fc.weight", NULL, CONV1D, 0},
    {TG_GPT_GPT2, true, "mlp.fc.bias", -1, "mlp.c_fc.bias", NULL, COPY, 0},
    {TG_GPT_GPT2, true, "mlp.proj.weight", -1, "mlp.c_proj.weight", NULL, CONV1D, 0},
    {TG_GPT_GPT2, true, "mlp.proj.bias", -1, "mlp.c_proj.bias", NULL, COPY, 0},
    {TG_GPT_GPT2, false, "ln_f.gamma", -1, "ln_f.weight", NULL, COPY, 0},
    {TG_GPT_GPT2, false, "ln_f.beta", -1, "ln_f.bias", NULL, COPY, 0},
    {TG_GPT_GPT2, false, "wte.weight", -1, "lm_head.weight", NULL, COPY, TIED},

    {TG_GPT_LLAMA, false, "wte.weight", -1, "embed_tokens.weight", "tok_embeddings.weight", COPY, 0},
    {TG_GPT_LLAMA, true, "ln_1.gamma", -1, "input_layernorm.weight", "attention_norm.weight", COPY, 0},
    {TG_GPT_LLAMA, true, "attn.qkv.weight", 0, "self_attn.q_proj.weight", "attention.wq.weight", ROPE, 0},
    {TG_GPT_LLAMA, true, "attn.qkv.weight", 1, "self_attn.k_proj.weight", "attention.wk.weight", ROPE, 0},
    {TG_GPT_LLAMA, true, "attn.qkv.weight", 2, "self_attn.v_proj.weight", "attention.wv.weight", COPY, 0},
    {TG_GPT_LLAMA, true, "attn.proj.weight", -1, "self_attn.o_proj.weight", "attention.wo.weight", COPY, 0},
    {TG_GPT_LLAMA, true, "ln_2.gamma", -1, "post_attention_layernorm.weight", "ffn_norm.weight", COPY, 0},
    /* SwiGLU: tapegrad's proj(silu(fc x) * gate x) is Hugging Face's
     * down(silu(gate_proj x) * up_proj x) and Meta's w2(silu(w1 x) * w3 x) */
    {TG_GPT_LLAMA, true, "mlp.fc.weight", -1, "mlp.gate_proj.weight", "feed_forward.w1.weight", COPY, 0},
    {TG_GPT_LLAMA, true, "mlp.gate.weight", -1, "mlp.up_proj.weight", "feed_forward.w3.weight", COPY, 0},
    {TG_GPT_LLAMA, true, "mlp.proj.weight", -1, "mlp.down_proj.weight", "feed_forward.w2.weight", COPY, 0},
    {TG_GPT_LLAMA, false, "ln_f.gamma", -1, "norm.weight", "norm.weight", COPY, 0},
    {TG_GPT_LLAMA, false, "lm_head.weight", -1, "lm_head.weight", "output.weight", COPY, FALLBACK},
};
enum { MAP_ROWS = (int)(sizeof MAP / sizeof *MAP) };

/* What PyTorch keeps beside the weights, which an import skips: the causal
 * masks of Hugging Face's GPT-2 and nanoGPT, and the RoPE frequencies of
 * Hugging Face's and Meta's LLaMA. */
static const char *const BUFFER_SUFFIXES[] = {".attn.bias", ".attn.masked_bias", ".rotary_emb.inv_freq", "rope.freqs"};

static const char *layout_name(tg_gpt_layout layout) {
    return layout == TG_GPT_HF ? "TG_GPT_HF" : layout == TG_GPT_NANOGPT ? "TG_GPT_NANOGPT" : "TG_GPT_META";
}

/* Whether the arch has the layout; otherwise an error naming both. */
static bool check_layout(tg_ctx *ctx, const char *fn, tg_gpt_arch arch, tg_gpt_layout layout) {
    if (layout != TG_GPT_HF && layout != TG_GPT_NANOGPT && layout != TG_GPT_META) {
        tg_error(ctx, TG_ERR_VALUE, fn, "layout = %d is not TG_GPT_HF, TG_GPT_NANOGPT or TG_GPT_META", (int)layout);
        return false;
    }
    if ((arch == TG_GPT_GPT2 && layout == TG_GPT_META) || (arch == TG_GPT_LLAMA && layout == TG_GPT_NANOGPT)) {
        tg_error(ctx, TG_ERR_VALUE, fn,
                 "a %s model has no %s layout (GPT-2: TG_GPT_HF, TG_GPT_NANOGPT; LLaMA: "
                 "TG_GPT_HF, TG_GPT_META)",
                 tg_gpt_arch_name(arch), layout_name(layout));
        return false;
    }
    return true;
}

/* The prefix of the file's names in a layout (lm_head has none): what
 * Hugging Face's and nanoGPT's models put before their names. */
static const char *layout_prefix(tg_gpt_arch arch, tg_gpt_layout layout) {
    if (layout == TG_GPT_META) return "";
    return arch == TG_GPT_GPT2 ? "transformer." : "model.";
}

/* The file's name of row r (block l) under prefix. */
static void ext_name(char *buf, size_t size, const map_row *r, tg_gpt_layout layout, const char *prefix, int64_t l) {
    const char *name = layout == TG_GPT_META ? r->meta : r->hf;
    if (strcmp(name, "lm_head.weight") == 0) prefix = "";
    if (r->block)
        snprintf(buf, size, "%s%s%lld.%s", prefix, r->arch == TG_GPT_GPT2 ? "h." : "layers.", (long long)l, name);
    else snprintf(buf, size, "%s%s", prefix, name);
}

/* ---- bindings: the table applied to one model ---------------------------------------- */

/* One tensor of the file and the parameter (or part) it is. */
typedef struct binding {
    char ext[64];    /* the file's name */
    tg_param *param; /* tapegrad's */
    int part, flags;
    enum move move;
    int ndim;
    int64_t shape[2]; /* the file's shape */
    tg_tensor *t;     /* in the file's shape: staged (import) or made (export) */
    bool own;         /* t is this binding's to free (an import shares one staged
                         tensor between lm_head and the table it falls back to) */
    bool absent;      /* import: a TIED tensor the file does not have */
    bool in_file;     /* import: t's data is the file's bytes, used in place */
} binding;

/* The bindings of every row of gpt's arch (*n of them, an array from the
 * context's allocator), the file's names under prefix. NULL and an error
 * when the model's parameters are not those the table places. */
static binding *bind(tg_ctx *ctx, const char *fn, const tg_gpt *gpt, tg_params *list, tg_gpt_layout layout,
                     const char *prefix, int *n) {
    const tg_gpt_config *c = &gpt->config;
    const char *own = gpt->base.name, *dot = own[0] ? "." : ""; /* tg_module_params's names start with it */
    size_t cap = (size_t)MAP_ROWS * (size_t)(c->n_layer + 1);
    binding *b = tg_io_calloc(&ctx->alloc, cap, sizeof *b);
    int64_t *covered = tg_io_calloc(&ctx->alloc, (size_t)(list->count > 0 ? list->count : 1), sizeof *covered);
    if (!b || !covered) {
        tg_error(ctx, TG_ERR_OOM, fn, "out of memory");
        goto fail;
    }
    *n = 0;
    for (int r = 0; r < MAP_ROWS; r++) {
        const map_row *row = &MAP[r];
        if (row->arch != c->arch) continue;
        for (int64_t l = 0; l < (row->block ? c->n_layer : 1); l++) {
            char tg[96];
            if (row->block) snprintf(tg, sizeof tg, "%s%sh.%lld.%s", own, dot, (long long)l, row->tg);
            else snprintf(tg, sizeof tg, "%s%s%s", own, dot, row->tg);
            tg_param *p = tg_params_find(list, tg);
            if (!p || p->value->ndim < 1 || p->value->ndim > 2) {
                tg_error(ctx, TG_ERR_VALUE, fn, "the model has no 1-d or 2-d parameter \"%s\" (is it a tg_gpt?)", tg);
                goto fail;
            }
            binding *x = &b[(*n)++];
            ext_name(x->ext, sizeof x->ext, row, layout, prefix, l);
            x->param = p;
            x->part = row->part;
            x->flags = row->flags;
            x->move = layout == TG_GPT_HF ? row->hf_move : COPY;
            const tg_tensor *v = p->value;
            x->ndim = v->ndim;
            x->shape[0] = x->part >= 0 ? v->shape[0] / 3 : v->shape[0];
            x->shape[1] = v->ndim == 2 ? v->shape[1] : 1;
            if (x->move == CONV1D && v->ndim == 2) x->shape[0] = v->shape[1], x->shape[1] = v->shape[0];
            if (!(x->flags & TIED)) covered[p - list->items] += x->part >= 0 ? v->numel / 3 : v->numel;
        }
    }
    for (int i = 0; i < list->count; i++) {
        if (covered[i] != list->items[i].value->numel) {
            tg_error(ctx, TG_ERR_VALUE, fn, "the model's parameter \"%s\" has no place in the %s layout",
                     list->items[i].name, layout_name(layout));
            goto fail;
        }
    }
    tg_io_free(&ctx->alloc, covered);
    return b;
fail:
    tg_io_free(&ctx->alloc, covered);
    tg_io_free(&ctx->alloc, b);
    return NULL;
}

static void free_bindings(tg_ctx *ctx, binding *b, int n) {
    for (int i = 0; b && i < n; i++)
        if (b[i].own) tg_io_free(&ctx->alloc, b[i].t);
    tg_io_free(&ctx->alloc, b);
}

/* A tensor of x's file shape in dtype: header and data in one block from
 * the context's allocator (neither an arena nor a persistent tensor; the
 * checkpoint code reads and writes it as any tensor), or only the header
 * when the data is `in_file`, bytes of the file of that dtype. */
static bool make_file_tensor(tg_ctx *ctx, const char *fn, binding *x, tg_dtype dtype, const void *in_file) {
    int64_t numel = x->shape[0] * (x->ndim == 2 ? x->shape[1] : 1);
    size_t bytes = in_file ? 0 : (size_t)numel * tg_dtype_size(dtype);
    void *mem = tg_io_alloc(&ctx->alloc, TG_TENSOR_HEAD + bytes);
    if (!mem) {
        tg_error(ctx, TG_ERR_OOM, fn, "out of memory for \"%s\"", x->ext);
        return false;
    }
    x->t = tg_tensor_init(ctx, mem, dtype, x->ndim, x->shape, numel);
    if (in_file) x->t->data = (void *)(uintptr_t)in_file; /* only read: the moves copy out of it */
    x->own = true;
    x->in_file = in_file != NULL;
    return true;
}

static bool host_is_little_endian(void) {
    const uint16_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

/* The list the checkpoint code loads or saves: each owned tensor under its
 * file name (the array from the context's allocator). */
static bool file_list(tg_ctx *ctx, const char *fn, binding *b, int n, tg_params *out) {
    *out = (tg_params){0};
    out->items = tg_io_calloc(&ctx->alloc, (size_t)n, sizeof *out->items);
    if (!out->items) {
        tg_error(ctx, TG_ERR_OOM, fn, "out of memory");
        return false;
    }
    for (int i = 0; i < n; i++) {
        if (!b[i].own || b[i].in_file) continue;
        tg_param *p = &out->items[out->count++];
        snprintf(p->name, sizeof p->name, "%s", b[i].ext);
        p->value = b[i].t;
    }
    out->capacity = out->count;
    return true;
}

/* Row r of a head-major q or k in Hugging Face's order as tapegrad's row:
 * h D + j D/2 + i -> h D + 2i + j. */
static int64_t rope_row(int64_t r, int64_t D) {
    int64_t h = r / D, k = r % D, half = D / 2;
    return h * D + 2 * (k % half) + k / half;
}

/* Moves x's elements between the parameter and x->t: into the parameter
 * when to_param, else out of it. */
static void move(const binding *x, int64_t head_dim, bool to_param) {
    const tg_tensor *p = x->param->value;
    const size_t es = tg_dtype_size(p->dtype);
    unsigned char *pd = p->data, *fd = x->t->data;
    if (x->move == CONV1D && x->ndim == 2) { /* file (in, out), parameter (out, in) */
        const int64_t in = x->shape[0], out = x->shape[1];
        /* in tiles of TILE x TILE, so both sides stay in cache (element by
         * element, every write of the transpose missed it: 5x slower) */
        enum { TILE = 32 };
        for (int64_t i0 = 0; i0 < in; i0 += TILE) {
            for (int64_t o0 = 0; o0 < out; o0 += TILE) {
                for (int64_t i = i0; i < in && i < i0 + TILE; i++) {
                    for (int64_t o = o0; o < out && o < o0 + TILE; o++) {
                        unsigned char *a = pd + (size_t)(o * in + i) * es, *f = fd + (size_t)(i * out + o) * es;
                        if (es == 8) memcpy(to_param ? a : f, to_param ? f : a, 8);
                        else if (es == 4) memcpy(to_param ? a : f, to_param ? f : a, 4);
                        else memcpy(to_param ? a : f, to_param ? f : a, 2);
                    }
                }
            }
        }
        return;
    }
    const int64_t rows = x->ndim == 2 ? x->shape[0] : 1;
    const size_t row_bytes = (size_t)(x->ndim == 2 ? x->shape[1] : x->shape[0]) * es;
    const int64_t base = x->part >= 0 ? x->part * rows : 0;
    for (int64_t r = 0; r < rows; r++) {
        int64_t pr = base + (x->move == ROPE ? rope_row(r, head_dim) : r);
        unsigned char *a = pd + (size_t)pr * row_bytes, *f = fd + (size_t)r * row_bytes;
        memcpy(to_param ? a : f, to_param ? f : a, row_bytes);
    }
}

/* ---- import ----------------------------------------------------------------------------- */

/* The file's tensor with that name, or NULL. */
static const tg_st_tensor *find(const tg_st_file *f, const char *name) {
    size_t n = strlen(name);
    for (size_t i = 0; i < f->count; i++)
        if (f->tensors[i].name_len == n && memcmp(f->tensors[i].name, name, n) == 0) return &f->tensors[i];
    return NULL;
}

static bool is_buffer(const tg_st_tensor *t) {
    for (size_t i = 0; i < sizeof BUFFER_SUFFIXES / sizeof *BUFFER_SUFFIXES; i++) {
        size_t k = strlen(BUFFER_SUFFIXES[i]);
        if (t->name_len >= k && memcmp(t->name + t->name_len - k, BUFFER_SUFFIXES[i], k) == 0) return true;
    }
    return false;
}

/* The row of arch's parameter tg (its first part). */
static const map_row *row_of(tg_gpt_arch arch, const char *tg) {
    for (int r = 0; r < MAP_ROWS; r++)
        if (MAP[r].arch == arch && strcmp(MAP[r].tg, tg) == 0) return &MAP[r];
    return NULL;
}

/* The first row of an arch: its token table. */
static const map_row *first_row(tg_gpt_arch arch) { return row_of(arch, "wte.weight"); }

/* The prefix the file's names carry: the layout's when the token table
 * has it, else none (the hub's GPT2Model files, a bare LlamaModel). */
static const char *file_prefix(const tg_st_file *f, tg_gpt_arch arch, tg_gpt_layout layout) {
    const char *prefix = layout_prefix(arch, layout);
    char name[64];
    ext_name(name, sizeof name, first_row(arch), layout, prefix, 0);
    return find(f, name) ? prefix : "";
}

static bool bound_name(const binding *b, int n, const tg_st_tensor *t) {
    for (int k = 0; k < n; k++)
        if (!b[k].absent && strlen(b[k].ext) == t->name_len && memcmp(t->name, b[k].ext, t->name_len) == 0) return true;
    return false;
}

/* Finds each binding's tensor in the file and checks its shape; a missing
 * TIED tensor is marked absent, a missing FALLBACK one takes `fallback`'s
 * (NULL: none). Then every tensor of the file must be bound or a buffer. */
static bool match(tg_ctx *ctx, const char *fn, const char *path, const tg_gpt *gpt, tg_gpt_layout layout,
                  const tg_st_file *f, binding *b, int n, const char *fallback) {
    for (int i = 0; i < n; i++) {
        binding *x = &b[i];
        const tg_st_tensor *t = find(f, x->ext);
        if (!t && (x->flags & FALLBACK) && fallback) {
            snprintf(x->ext, sizeof x->ext, "%s", fallback);
            t = find(f, x->ext);
        }
        if (!t && (x->flags & TIED)) {
            x->absent = true;
            continue;
        }
        if (!t) {
            const char *prefix = layout_prefix(gpt->config.arch, layout);
            char hint[160] = "";
            if (i == 0) /* the token table: the file is another model's, or in another layout */
                snprintf(hint, sizeof hint, " (no token table%s%s%s: another model's file?)",
                         *prefix ? ", with or without the prefix \"" : "", prefix, *prefix ? "\"" : "");
            tg_error(ctx, TG_ERR_VALUE, fn, "%s: tensor \"%s\" (tapegrad's \"%s\") is missing from the file%s", path,
                     x->ext, x->param->name, hint);
            return false;
        }
        if (t->ndim != x->ndim || t->shape[0] != x->shape[0] || (x->ndim == 2 && t->shape[1] != x->shape[1])) {
            char a[160], want[160];
            tg_shape_str(a, sizeof a, t->ndim, t->shape);
            tg_shape_str(want, sizeof want, x->ndim, x->shape);
            bool gqa = x->part > 0 && t->ndim == 2 && t->shape[1] == x->shape[1] && t->shape[0] < x->shape[0];
            tg_error(ctx, TG_ERR_SHAPE, fn, "%s: tensor \"%s\" has shape %s; tapegrad's \"%s\" needs %s%s", path,
                     x->ext, a, x->param->name, want,
                     gqa ? " (grouped-query attention, fewer key/value heads than query heads, is not supported)" : "");
            return false;
        }
    }
    for (size_t i = 0; i < f->count; i++) {
        const tg_st_tensor *t = &f->tensors[i];
        if (bound_name(b, n, t) || is_buffer(t)) continue;
        char q[96];
        tg_json_quote(q, sizeof q, t->name, t->name_len);
        tg_error(ctx, TG_ERR_VALUE, fn, "%s: tensor \"%s\" of the file has no place in the model (%s, %lld layers, %s)",
                 path, q, tg_gpt_arch_name(gpt->config.arch), (long long)gpt->config.n_layer, layout_name(layout));
        return false;
    }
    return true;
}

/* Imports the file f (parsed from buf[0 .. len)) into gpt. */
static tg_status import_file(tg_ctx *ctx, const char *fn, tg_gpt *gpt, const char *path, tg_gpt_layout layout,
                             const unsigned char *buf, size_t len, const tg_st_file *f) {
    const tg_gpt_config *c = &gpt->config;
    tg_params list = {0}, staged = {0};
    binding *b = NULL;
    int n = 0;
    if (!check_layout(ctx, fn, c->arch, layout) || !tg_module_params(ctx, &gpt->base, &list)) goto done;
    const char *prefix = file_prefix(f, c->arch, layout);
    if (!(b = bind(ctx, fn, gpt, &list, layout, prefix, &n))) goto done;
    char fallback[64];
    ext_name(fallback, sizeof fallback, first_row(c->arch), layout, prefix, 0);
    if (!match(ctx, fn, path, gpt, layout, f, b, n, layout == TG_GPT_HF ? fallback : NULL)) goto done;
    /* each tensor once: the file's bytes in place when they are the model's
     * dtype in the host's order (tg_st_parse has validated them), else
     * staged by the checkpoint loader, which converts and swaps */
    const bool le = host_is_little_endian();
    for (int i = 0; i < n; i++) {
        if (b[i].absent) continue;
        for (int j = 0; j < i && !b[i].t; j++)
            if (!b[j].absent && strcmp(b[j].ext, b[i].ext) == 0) b[i].t = b[j].t;
        if (b[i].t) continue;
        const tg_st_tensor *ft = find(f, b[i].ext);
        if (!make_file_tensor(ctx, fn, &b[i], c->dtype, le && ft->dtype == c->dtype ? ft->data : NULL)) goto done;
    }
    if (!file_list(ctx, fn, b, n, &staged) ||
        (staged.count > 0 && tg_st_load_memory_ex(ctx, fn, path, buf, len, &staged, NULL, NULL, true, true) != TG_OK))
        goto done;
    /* GPT-2's lm_head.weight, when the file has it, must be wte.weight */
    for (int i = 0; i < n; i++) {
        if (!(b[i].flags & TIED) || b[i].absent) continue;
        for (int j = 0; j < n; j++) {
            if (b[j].param != b[i].param || j == i) continue;
            if (memcmp(b[i].t->data, b[j].t->data, (size_t)b[j].t->numel * tg_dtype_size(c->dtype)) != 0) {
                tg_error(ctx, TG_ERR_VALUE, fn,
                         "%s: \"%s\" differs from \"%s\": tapegrad's GPT-2 ties the output projection to the token "
                         "table",
                         path, b[i].ext, b[j].ext);
                goto done;
            }
        }
    }
    /* everything checked: now write (nothing below can fail) */
    for (int i = 0; i < n; i++)
        if (!(b[i].flags & TIED)) move(&b[i], c->n_embd / c->n_head, true);
    for (int i = 0; i < list.count; i++) tg_written(list.items[i].value);
done:
    tg_io_free(&ctx->alloc, staged.items);
    free_bindings(ctx, b, n);
    tg_params_free(&list);
    return tg_status_of(ctx);
}

/* Reads and parses the file at path (*buf, *f: free both). */
static bool read_parse(tg_ctx *ctx, const char *fn, const char *path, unsigned char **buf, size_t *len, tg_st_file *f) {
    memset(f, 0, sizeof *f);
    if (tg_ckpt_read_file(ctx, fn, path, buf, len) != TG_OK) return false;
    tg_st_error err;
    if (tg_st_parse_with(f, &ctx->alloc, *buf, *len, &err)) return true;
    tg_error(ctx, err.status, fn, "%s: %s", path, err.msg);
    return false;
}

static bool check_args(tg_ctx *ctx, const char *fn, const void *gpt, const char *path) {
    if (!tg_ok(ctx)) return false;
    if (!gpt || !path) {
        tg_null_error(ctx, fn, !gpt ? "gpt" : "path");
        return false;
    }
    return true;
}

tg_status tg_gpt_import(tg_ctx *ctx, tg_gpt *gpt, const char *path, tg_gpt_layout layout) {
    if (!check_args(ctx, __func__, gpt, path)) return ctx ? tg_status_of(ctx) : TG_ERR_NULL;
    if (!check_layout(ctx, __func__, gpt->config.arch, layout)) return TG_ERR_VALUE;
    unsigned char *buf = NULL;
    size_t len = 0;
    tg_st_file f;
    if (read_parse(ctx, __func__, path, &buf, &len, &f)) import_file(ctx, __func__, gpt, path, layout, buf, len, &f);
    tg_st_file_free(&f);
    tg_io_free(&ctx->alloc, buf);
    return tg_status_of(ctx);
}

/* The metadata value of key as a number in [lo, hi] into *v; false (and an
 * error) when it is not one, true leaving *v when absent. */
static bool meta_number(tg_ctx *ctx, const char *fn, const char *path, const tg_st_file *f, const char *key, double lo,
                        double hi, double *v) {
    for (size_t i = 0; i < f->meta_count; i++) {
        if (strcmp(f->meta[i].key, key) != 0) continue;
        char *end;
        errno = 0;
        double x = strtod(f->meta[i].value, &end);
        if (errno || end == f->meta[i].value || *end || !(x >= lo && x <= hi)) {
            tg_error(ctx, TG_ERR_FORMAT, fn, "%s: metadata \"%s\" = \"%s\" is not a number in [%g, %g]", path, key,
                     f->meta[i].value, lo, hi);
            return false;
        }
        *v = x;
        return true;
    }
    return true;
}

/* The config of the file's model: sizes from its tensors, the rest from
 * config or, when NULL, the file's metadata. */
static bool read_config(tg_ctx *ctx, const char *fn, const char *path, const tg_st_file *f, tg_gpt_layout layout,
                        const tg_gpt_config *config, tg_gpt_config *out) {
    const tg_gpt_arch archs[2] = {TG_GPT_GPT2, TG_GPT_LLAMA};
    const tg_st_tensor *emb = NULL;
    tg_gpt_arch arch = TG_GPT_GPT2;
    const char *prefix = "";
    char name[64], tried[200] = "";
    for (int a = 0; a < 2 && !emb; a++) {
        if ((archs[a] == TG_GPT_GPT2 && layout == TG_GPT_META) ||
            (archs[a] == TG_GPT_LLAMA && layout == TG_GPT_NANOGPT))
            continue;
        arch = archs[a];
        prefix = file_prefix(f, arch, layout);
        ext_name(name, sizeof name, first_row(arch), layout, layout_prefix(arch, layout), 0);
        size_t k = strlen(tried);
        snprintf(tried + k, sizeof tried - k, "%s\"%s\"", k ? " or " : "", name);
        ext_name(name, sizeof name, first_row(arch), layout, prefix, 0);
        emb = find(f, name);
    }
    if (!emb || emb->ndim != 2) {
        tg_error(ctx, TG_ERR_VALUE, fn, "%s: no token table %s (with or without the prefix) of 2 dims: not a %s file",
                 path, tried, layout_name(layout));
        return false;
    }
    tg_gpt_config c = config ? *config : tg_gpt_defaults(arch);
    if (!config) {
        double n_head = -1, context = (double)c.context;
        if (!meta_number(ctx, fn, path, f, "tapegrad.n_head", 1, 1e9, &n_head) ||
            !meta_number(ctx, fn, path, f, "tapegrad.context", 1, 1e12, &context) ||
            !meta_number(ctx, fn, path, f, "tapegrad.rope_base", 1e-300, 1e300, &c.rope_base) ||
            !meta_number(ctx, fn, path, f, "tapegrad.norm_eps", 0, 1, &c.norm_eps))
            return false;
        if (n_head < 0) {
            tg_error(ctx, TG_ERR_VALUE, fn,
                     "config is NULL and %s has no \"tapegrad.n_head\" metadata: pass a config with n_head (the "
                     "weights do not say it; see the model's config.json)",
                     path);
            return false;
        }
        c.n_head = (int64_t)n_head;
        c.context = (int64_t)context;
    }
    c.arch = arch;
    c.vocab_size = emb->shape[0];
    c.n_embd = emb->shape[1];
    c.n_layer = 0;
    const map_row *ln_1 = row_of(arch, "ln_1.gamma");
    for (;;) {
        ext_name(name, sizeof name, ln_1, layout, prefix, c.n_layer);
        if (!find(f, name) || c.n_layer >= 9999) break;
        c.n_layer++;
    }
    if (c.n_layer == 0) {
        tg_error(ctx, TG_ERR_VALUE, fn, "%s: no blocks (no tensor \"%s\")", path, name);
        return false;
    }
    /* the MLP's width, and GPT-2's context (when absent, the import names them) */
    const map_row *fc = row_of(arch, "mlp.fc.weight"), *wpe = row_of(arch, "wpe.weight");
    ext_name(name, sizeof name, fc, layout, prefix, 0);
    const tg_st_tensor *t = find(f, name);
    if (t && t->ndim == 2) c.hidden = layout == TG_GPT_HF && fc->hf_move == CONV1D ? t->shape[1] : t->shape[0];
    if (wpe) {
        ext_name(name, sizeof name, wpe, layout, prefix, 0);
        if ((t = find(f, name)) && t->ndim == 2) c.context = t->shape[0];
    }
    *out = c;
    return true;
}

tg_gpt *tg_gpt_import_new(tg_ctx *ctx, const char *name, const char *path, tg_gpt_layout layout,
                          const tg_gpt_config *config) {
    const char *fn = __func__;
    if (!check_args(ctx, fn, "", path)) return NULL;
    if (!check_layout(ctx, fn, layout == TG_GPT_META ? TG_GPT_LLAMA : TG_GPT_GPT2, layout)) return NULL;
    unsigned char *buf = NULL;
    size_t len = 0;
    tg_st_file f;
    tg_gpt *g = NULL;
    tg_gpt_config c;
    if (read_parse(ctx, fn, path, &buf, &len, &f) && read_config(ctx, fn, path, &f, layout, config, &c)) {
        uint64_t seed, offset;
        tg_rng_state(ctx, &seed, &offset);
        g = tg_gpt_new(ctx, name, &c);
        tg_rng_set_state(ctx, seed, offset);
        if (g && import_file(ctx, fn, g, path, layout, buf, len, &f) != TG_OK) {
            tg_module_free(ctx, TG_MODULE(g));
            g = NULL;
        }
    }
    tg_st_file_free(&f);
    tg_io_free(&ctx->alloc, buf);
    return g;
}

/* ---- export ----------------------------------------------------------------------------- */

tg_status tg_gpt_export(tg_ctx *ctx, tg_gpt *gpt, const char *path, tg_gpt_layout layout, const tg_ckpt_options *opt) {
    const char *fn = __func__;
    if (!check_args(ctx, fn, gpt, path)) return ctx ? tg_status_of(ctx) : TG_ERR_NULL;
    const tg_gpt_config *c = &gpt->config;
    if (!check_layout(ctx, fn, c->arch, layout)) return TG_ERR_VALUE;
    tg_params list = {0}, out = {0};
    tg_meta meta = {0};
    binding *b = NULL;
    int n = 0;
    if (!tg_module_params(ctx, &gpt->base, &list) ||
        !(b = bind(ctx, fn, gpt, &list, layout, layout_prefix(c->arch, layout), &n)))
        goto done;
    for (int i = 0; i < n; i++) {
        if (!make_file_tensor(ctx, fn, &b[i], c->dtype, NULL)) goto done;
        move(&b[i], c->n_embd / c->n_head, false);
    }
    char v[32];
    if (!file_list(ctx, fn, b, n, &out) || !tg_meta_set(ctx, &meta, "format", "pt") ||
        !tg_meta_set_u64(ctx, &meta, "tapegrad.n_head", (uint64_t)c->n_head) ||
        !tg_meta_set_u64(ctx, &meta, "tapegrad.context", (uint64_t)c->context))
        goto done;
    snprintf(v, sizeof v, "%.17g", c->rope_base);
    if (c->arch == TG_GPT_LLAMA && !tg_meta_set(ctx, &meta, "tapegrad.rope_base", v)) goto done;
    snprintf(v, sizeof v, "%.17g", c->norm_eps);
    if (c->norm_eps > 0 && !tg_meta_set(ctx, &meta, "tapegrad.norm_eps", v)) goto done;
    tg_ckpt_save_as(ctx, fn, path, &out, NULL, &meta, opt);
done:
    tg_meta_free(&meta);
    tg_io_free(&ctx->alloc, out.items);
    free_bindings(ctx, b, n);
    tg_params_free(&list);
    return tg_status_of(ctx);
}

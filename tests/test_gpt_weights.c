/* tg_gpt_import, tg_gpt_import_new and tg_gpt_export (io/gpt_weights.c):
 * GPT-2 and LLaMA weights in the layouts PyTorch users have.
 *
 * The four files a PyTorch user has are stated here, apart from the
 * library's table: Hugging Face's GPT-2 as on the hub (GPT2Model's names,
 * no "transformer." prefix, no lm_head, Conv1D (in, out) weights),
 * nanoGPT's state_dict (the prefix, lm_head tied, nn.Linear (out, in)),
 * Hugging Face's LlamaForCausalLM (q_proj and k_proj rows in rotate-half
 * order) and Meta's LLaMA. Their weights come from a formula of the
 * tensor's name and element index (splitmix64 of the name's FNV-1a hash),
 * which scripts/weights_torch.py computes the same way.
 *
 * Against PyTorch, through the fixture tests/fixtures/weights_torch.txt
 * (that script writes it; CI needs no PyTorch): for each file, a tiny
 * model (vocabulary 128, context 8, 2 layers of 2 heads, 16 channels,
 * LLaMA's MLP 48 wide) imported by tg_gpt_import_new in float64 gives
 * PyTorch's loss and first-position logits on batch 0 (Meta's model with
 * LLaMA-2's norm eps, 1e-5, through config.norm_eps), then 20 AdamW steps
 * give PyTorch's losses (lr 3e-3, betas (0.9, 0.99), weight decay 0.1 on
 * the matrices, clipping at 1), the trained model's loss on another batch
 * is the one PyTorch computes from tapegrad's exported file, and every
 * exported tensor matches PyTorch's own trained tensor of that name (its
 * L2 norm and its dot product with the fixture's weighting).
 *
 * Without PyTorch: exact round trips in every layout and dtype, the row
 * orders of the Conv1D and rotate-half layouts element by element, the
 * config read from a file, and the errors.
 *
 * With TG_WEIGHTS_TORCH_DIR=DIR set (scripts/weights_torch.py does it), the
 * case "dump" imports DIR/KIND.torch.safetensors (PyTorch's files), trains,
 * and writes DIR/KIND.tapegrad.safetensors (the export) and
 * DIR/KIND.results.safetensors (losses and logits), and DIR/batches.safetensors. */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define FX "weights_torch.txt"
enum { V = 128, CTX = 8, NL = 2, NH = 2, C = 16, HID = 48, B = 2, T = 8, STEPS = 20 };

static tg_ctx *ctx;
static char dir[256];
static void setup(void) {
    ctx = tg_ctx_new(5);
    tg_test_make_tmpdir(dir, sizeof dir, "tg-gpt-weights");
}
static void teardown(void) {
    tg_test_remove_tree(dir);
    tg_ctx_free(ctx);
}

static const char *in_dir(const char *name) {
    static char path[2][512];
    static int k;
    k ^= 1;
    snprintf(path[k], sizeof path[k], "%s/%s", dir, name);
    return path[k];
}

/* ---- the four files ------------------------------------------------------------------ */

typedef enum kind { GPT2_HF, NANOGPT, LLAMA_HF, LLAMA_META, KINDS } kind;
static const char *const KIND_NAME[KINDS] = {"gpt2_hf", "nanogpt", "llama_hf", "llama_meta"};
static const tg_gpt_layout KIND_LAYOUT[KINDS] = {TG_GPT_HF, TG_GPT_NANOGPT, TG_GPT_HF, TG_GPT_META};
static tg_gpt_arch kind_arch(kind k) { return k <= NANOGPT ? TG_GPT_GPT2 : TG_GPT_LLAMA; }

enum dim { D1 = 0, DV, DT, DC, D3C, D4C, DH };
typedef struct tdesc {
    bool block;
    const char *name;
    enum dim d0, d1; /* d1 = D1: a vector */
} tdesc;

static const tdesc GPT2_CONV1D[] = {
    {false, "wte.weight", DV, DC},        {false, "wpe.weight", DT, DC},         {true, "ln_1.weight", DC, D1},
    {true, "ln_1.bias", DC, D1},          {true, "attn.c_attn.weight", DC, D3C}, {true, "attn.c_attn.bias", D3C, D1},
    {true, "attn.c_proj.weight", DC, DC}, {true, "attn.c_proj.bias", DC, D1},    {true, "ln_2.weight", DC, D1},
    {true, "ln_2.bias", DC, D1},          {true, "mlp.c_fc.weight", DC, D4C},    {true, "mlp.c_fc.bias", D4C, D1},
    {true, "mlp.c_proj.weight", D4C, DC}, {true, "mlp.c_proj.bias", DC, D1},     {false, "ln_f.weight", DC, D1},
    {false, "ln_f.bias", DC, D1},         {false, "lm_head.weight", DV, DC},     {0}};
static const tdesc GPT2_LINEAR[] = {
    {false, "wte.weight", DV, DC},        {false, "wpe.weight", DT, DC},         {true, "ln_1.weight", DC, D1},
    {true, "ln_1.bias", DC, D1},          {true, "attn.c_attn.weight", D3C, DC}, {true, "attn.c_attn.bias", D3C, D1},
    {true, "attn.c_proj.weight", DC, DC}, {true, "attn.c_proj.bias", DC, D1},    {true, "ln_2.weight", DC, D1},
    {true, "ln_2.bias", DC, D1},          {true, "mlp.c_fc.weight", D4C, DC},    {true, "mlp.c_fc.bias", D4C, D1},
    {true, "mlp.c_proj.weight", DC, D4C}, {true, "mlp.c_proj.bias", DC, D1},     {false, "ln_f.weight", DC, D1},
    {false, "ln_f.bias", DC, D1},         {false, "lm_head.weight", DV, DC},     {0}};
static const tdesc LLAMA_HF_NAMES[] = {{false, "embed_tokens.weight", DV, DC},
                                       {true, "self_attn.q_proj.weight", DC, DC},
                                       {true, "self_attn.k_proj.weight", DC, DC},
                                       {true, "self_attn.v_proj.weight", DC, DC},
                                       {true, "self_attn.o_proj.weight", DC, DC},
                                       {true, "mlp.gate_proj.weight", DH, DC},
                                       {true, "mlp.up_proj.weight", DH, DC},
                                       {true, "mlp.down_proj.weight", DC, DH},
                                       {true, "input_layernorm.weight", DC, D1},
                                       {true, "post_attention_layernorm.weight", DC, D1},
                                       {false, "norm.weight", DC, D1},
                                       {false, "lm_head.weight", DV, DC},
                                       {0}};
static const tdesc LLAMA_META_NAMES[] = {{false, "tok_embeddings.weight", DV, DC},
                                         {true, "attention.wq.weight", DC, DC},
                                         {true, "attention.wk.weight", DC, DC},
                                         {true, "attention.wv.weight", DC, DC},
                                         {true, "attention.wo.weight", DC, DC},
                                         {true, "feed_forward.w1.weight", DH, DC},
                                         {true, "feed_forward.w2.weight", DC, DH},
                                         {true, "feed_forward.w3.weight", DH, DC},
                                         {true, "attention_norm.weight", DC, D1},
                                         {true, "ffn_norm.weight", DC, D1},
                                         {false, "norm.weight", DC, D1},
                                         {false, "output.weight", DV, DC},
                                         {0}};

static int64_t dim_size(enum dim d) {
    static const int64_t size[] = {[D1] = 1, [DV] = V, [DT] = CTX, [DC] = C, [D3C] = 3 * C, [D4C] = 4 * C, [DH] = HID};
    return size[d];
}

/* One tensor of a file. */
typedef struct ftensor {
    char name[64];
    int ndim;
    int64_t shape[2];
    char tied_to[64]; /* GPT-2's lm_head: the values of this tensor */
} ftensor;

/* The tensors of kind's file in PyTorch's state_dict order: as the user
 * has it, or (exported) as tg_gpt_export writes it, which differs only for
 * the hub's GPT-2 file (the prefix and lm_head added). Returns the count. */
static int file_tensors(kind k, bool exported, int n_layer, ftensor *out) {
    const tdesc *d = k == GPT2_HF    ? GPT2_CONV1D
                     : k == NANOGPT  ? GPT2_LINEAR
                     : k == LLAMA_HF ? LLAMA_HF_NAMES
                                     : LLAMA_META_NAMES;
    const char *prefix = k == NANOGPT || (k == GPT2_HF && exported) ? "transformer." : k == LLAMA_HF ? "model." : "";
    const char *blocks = kind_arch(k) == TG_GPT_GPT2 ? "h" : "layers";
    int n = 0, first_block = 0, last_block = 0;
    while (!d[first_block].block) first_block++;
    for (last_block = first_block; d[last_block].block; last_block++) continue;
    for (int pass = 0; pass < 3; pass++) {
        int from = pass == 0 ? 0 : pass == 1 ? first_block : last_block;
        int to = pass == 0 ? first_block : pass == 1 ? last_block : 999;
        for (int l = 0; l < (pass == 1 ? n_layer : 1); l++) {
            for (int i = from; i < to && d[i].name; i++) {
                bool lm_head = strcmp(d[i].name, "lm_head.weight") == 0;
                if (lm_head && k == GPT2_HF && !exported) continue; /* the hub's file has none */
                ftensor *t = &out[n++];
                memset(t, 0, sizeof *t);
                if (d[i].block) snprintf(t->name, sizeof t->name, "%s%s.%d.%s", prefix, blocks, l, d[i].name);
                else snprintf(t->name, sizeof t->name, "%s%s", lm_head ? "" : prefix, d[i].name);
                if (lm_head && kind_arch(k) == TG_GPT_GPT2)
                    snprintf(t->tied_to, sizeof t->tied_to, "%swte.weight", prefix);
                t->ndim = d[i].d1 == D1 ? 1 : 2;
                t->shape[0] = dim_size(d[i].d0);
                t->shape[1] = dim_size(d[i].d1);
            }
        }
    }
    return n;
}

/* The formula weights: element j of tensor `name` from u = the top 53 bits
 * of splitmix64(fnv1a64(name) + (j + 1) * golden) / 2^53: a matrix
 * 0.2 (2u - 1), a bias 0.05 (2u - 1), a norm's gain 1 + 0.1 (2u - 1). */
static uint64_t fnv1a64(const char *s) {
    uint64_t h = 0xcbf29ce484222325u;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3u;
    return h;
}

static double formula(const char *name, int ndim, int64_t j) {
    uint64_t z = fnv1a64(name) + (uint64_t)(j + 1) * 0x9E3779B97F4A7C15u;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    z ^= z >> 31;
    double u = (double)(z >> 11) * 0x1p-53;
    size_t n = strlen(name);
    if (ndim == 2) return (2.0 * u - 1.0) * 0.2;
    if (n >= 4 && strcmp(name + n - 4, "bias") == 0) return (2.0 * u - 1.0) * 0.05;
    return 1.0 + (2.0 * u - 1.0) * 0.1;
}

/* Writes kind's file with the formula weights (float64) to path; skip:
 * a tensor to leave out (NULL: none); extra (may be NULL): a tensor to
 * add, of shape (extra_rows, C), or with `resize` one to write with
 * extra_rows rows instead. */
typedef struct variant {
    const char *skip, *extra, *resize;
    int64_t extra_rows;
    int n_layer;    /* 0: NL */
    bool untie;     /* GPT-2's lm_head from its own formula */
    tg_dtype dtype; /* of the file; 0: float64 */
} variant;

static void write_file(kind k, const char *path, const variant *var) {
    variant none = {0};
    const variant *v = var ? var : &none;
    ftensor ft[64];
    int n = file_tensors(k, false, v->n_layer ? v->n_layer : NL, ft);
    tg_params list = {0};
    for (int i = 0; i <= n; i++) {
        ftensor e = {0};
        if (i == n) {
            if (!v->extra) break;
            snprintf(e.name, sizeof e.name, "%s", v->extra);
            e.ndim = 2, e.shape[0] = v->extra_rows, e.shape[1] = C;
        } else {
            e = ft[i];
        }
        if (v->skip && strcmp(e.name, v->skip) == 0) continue;
        if (v->resize && strcmp(e.name, v->resize) == 0) e.shape[0] = v->extra_rows;
        const char *src = e.tied_to[0] && !v->untie ? e.tied_to : e.name;
        int64_t numel = e.shape[0] * (e.ndim == 2 ? e.shape[1] : 1);
        double *vals = tg_test_malloc((size_t)numel * sizeof *vals);
        for (int64_t j = 0; j < numel; j++) vals[j] = formula(src, e.ndim, j);
        tg_tensor *t = tg_from_buffer(ctx, TG_F64, e.ndim, e.shape, vals);
        free(vals);
        ck_assert_msg(tg_params_add(ctx, &list, NULL, e.name, tg_persist(ctx, t), false), "%s", tg_error_message(ctx));
    }
    tg_ckpt_options o = {.convert_on_save = v->dtype != 0, .save_dtype = v->dtype};
    ck_assert_msg(tg_ckpt_save_ex(ctx, path, &list, NULL, NULL, &o) == TG_OK, "%s", tg_error_message(ctx));
    for (int i = 0; i < list.count; i++) tg_tensor_free(ctx, list.items[i].value);
    tg_params_free(&list);
    tg_ctx_reset(ctx);
}

/* The config a test passes: what the weights do not say. */
static tg_gpt_config base_config(tg_gpt_arch arch, tg_dtype dtype) {
    tg_gpt_config c = tg_gpt_defaults(arch);
    c.n_head = NH;
    c.context = CTX;
    c.dtype = dtype;
    return c;
}

/* Meta's model is LLaMA-2's here: its norms' eps 1e-5, not the default. */
static tg_gpt_config kind_config(kind k, tg_dtype dtype) {
    tg_gpt_config c = base_config(kind_arch(k), dtype);
    if (k == LLAMA_META) c.norm_eps = 1e-5;
    return c;
}

static tg_gpt *import_kind(kind k, const char *path, tg_dtype dtype) {
    tg_gpt_config c = kind_config(k, dtype);
    tg_gpt *g = tg_gpt_import_new(ctx, NULL, path, KIND_LAYOUT[k], &c);
    ck_assert_msg(g != NULL, "%s: %s", KIND_NAME[k], tg_error_message(ctx));
    return g;
}

/* ---- training, as the fixture's script does ------------------------------------------- */

static const char TEXT[] = "It was the best of times, it was the worst of times, it was the age of wisdom, it was "
                           "the age of foolishness, it was the epoch of belief, it was the epoch of incredulity, it "
                           "was the season of Light, it was the season of Darkness, it was the spring of hope";

/* Batch s (s = STEPS: the evaluation batch): B windows of T bytes, window
 * b of batch s starting at byte (B s + b) T, wrapped. */
static void batch(int s, int64_t *idx, int64_t *tgt) {
    const int64_t span = (int64_t)sizeof TEXT - 1 - T;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            int64_t at = ((int64_t)(B * s + b) * T) % span + t;
            idx[b * T + t] = (unsigned char)TEXT[at];
            tgt[b * T + t] = (unsigned char)TEXT[at + 1];
        }
}

typedef struct results {
    double loss0, logits0[V], traj[STEPS], eval;
} results;

/* Loss and first-position logits of batch 0, STEPS AdamW steps, the loss
 * of the evaluation batch, the export to out_path. */
static void train(kind k, tg_gpt *g, const char *out_path, results *r) {
    int64_t idx[B * T], tgt[B * T];
    tg_params list = {0};
    ck_assert(tg_module_params(ctx, TG_MODULE(g), &list));
    batch(0, idx, tgt);
    tg_tensor *logits = tg_gpt_forward(ctx, g, B, T, idx);
    ck_assert_msg(logits != NULL, "%s", tg_error_message(ctx));
    for (int i = 0; i < V; i++) r->logits0[i] = tg_get_flat(ctx, logits, i);
    tg_ctx_reset(ctx);
    tg_adam_opts o = tg_adamw_defaults();
    o.lr = 3e-3;
    o.beta2 = 0.99;
    o.weight_decay = 0.1;
    tg_optim *opt = tg_adamw_new(ctx, &list, &o);
    for (int s = 0; s < STEPS; s++) {
        batch(s, idx, tgt);
        tg_optim_zero_grad(ctx, opt);
        tg_tensor *l = tg_gpt_loss(ctx, g, B, T, idx, tgt);
        tg_backward(ctx, l);
        tg_clip_grad_norm(ctx, &list, 1.0);
        tg_optim_step(ctx, opt);
        ck_assert_msg(tg_ok(ctx), "%s step %d: %s", KIND_NAME[k], s, tg_error_message(ctx));
        r->traj[s] = tg_get_flat(ctx, l, 0);
        tg_ctx_reset(ctx);
    }
    r->loss0 = r->traj[0];
    tg_optim_free(ctx, opt);
    batch(STEPS, idx, tgt);
    tg_set_grad_enabled(ctx, false);
    r->eval = tg_get_flat(ctx, tg_gpt_loss(ctx, g, B, T, idx, tgt), 0);
    tg_set_grad_enabled(ctx, true);
    tg_ctx_reset(ctx);
    ck_assert_msg(tg_gpt_export(ctx, g, out_path, KIND_LAYOUT[k], NULL) == TG_OK, "%s", tg_error_message(ctx));
    tg_params_free(&list);
}

/* ---- against PyTorch (the fixture) ---------------------------------------------------- */

static double rel(double a, double b, double scale) { return fabs(a - b) / (scale > 0 ? scale : 1); }

static void check_array(const char *what, const double *mine, int64_t n, double tol) {
    int64_t nref;
    double *ref = tg_test_fixture(FX, what, &nref);
    ck_assert_int_eq(nref, n);
    double scale = 0;
    for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(ref[i]));
    for (int64_t i = 0; i < n; i++)
        ck_assert_msg(rel(mine[i], ref[i], scale) <= tol, "%s[%lld] = %.17g, PyTorch %.17g", what, (long long)i,
                      mine[i], ref[i]);
    free(ref);
}

/* The exported file holds exactly kind's tensors (as a load_state_dict
 * with strict=True wants them), each matching PyTorch's trained tensor of
 * that name by its L2 norm and its dot product with the weighting w. */
static void check_export(kind k, const char *path, double tol) {
    ftensor ft[64];
    int n = file_tensors(k, true, NL, ft);
    tg_params list = {0};
    for (int i = 0; i < n; i++)
        tg_params_add(ctx, &list, NULL, ft[i].name, tg_persist(ctx, tg_zeros(ctx, TG_F64, ft[i].ndim, ft[i].shape)),
                      false);
    tg_meta meta = {0};
    ck_assert_msg(tg_ckpt_load(ctx, path, &list, NULL, &meta) == TG_OK, "%s", tg_error_message(ctx));
    ck_assert_str_eq(tg_meta_get(&meta, "format"), "pt");
    int64_t nw;
    double *w = tg_test_fixture(FX, "w", &nw);
    for (int i = 0; i < n; i++) {
        const tg_tensor *t = list.items[i].value;
        const double *v = t->data;
        double ss = 0, dot = 0, scale = 0;
        for (int64_t j = 0; j < t->numel; j++) {
            ss += v[j] * v[j];
            dot += v[j] * w[j % nw];
            scale += fabs(v[j] * w[j % nw]);
        }
        char name[128];
        snprintf(name, sizeof name, "%s.w.%.63s", KIND_NAME[k], ft[i].name);
        int64_t nr;
        double *ref = tg_test_fixture(FX, name, &nr);
        ck_assert_int_eq(nr, 2);
        ck_assert_msg(rel(sqrt(ss), ref[0], ref[0]) <= tol && rel(dot, ref[1], scale) <= tol,
                      "%s: norm %.17g (PyTorch %.17g), dot %.17g (PyTorch %.17g)", name, sqrt(ss), ref[0], dot, ref[1]);
        free(ref);
        tg_tensor_free(ctx, list.items[i].value);
    }
    free(w);
    tg_meta_free(&meta);
    tg_params_free(&list);
}

static void against_torch(kind k) {
    const char *in = in_dir("in.safetensors"), *out = in_dir("out.safetensors");
    write_file(k, in, NULL);
    tg_gpt *g = import_kind(k, in, TG_F64);
    results r;
    train(k, g, out, &r);
    char name[64];
    const double tol = 1e-10;
    snprintf(name, sizeof name, "%s.loss0", KIND_NAME[k]);
    check_array(name, &r.loss0, 1, tol);
    snprintf(name, sizeof name, "%s.logits0", KIND_NAME[k]);
    check_array(name, r.logits0, V, tol);
    snprintf(name, sizeof name, "%s.traj", KIND_NAME[k]);
    check_array(name, r.traj, STEPS, tol);
    ck_assert_msg(r.traj[STEPS - 1] < r.traj[0] - 0.1, "%s does not learn: %g -> %g", KIND_NAME[k], r.traj[0],
                  r.traj[STEPS - 1]);
    snprintf(name, sizeof name, "%s.eval", KIND_NAME[k]);
    check_array(name, &r.eval, 1, tol);
    check_export(k, out, 1e-9);
    /* the script's own element-by-element errors */
    snprintf(name, sizeof name, "%s.maxerr", KIND_NAME[k]);
    int64_t n;
    double *e = tg_test_fixture(FX, name, &n);
    for (int64_t i = 0; i < n; i++) /* the last: the weights (scripts/weights_torch.py, TOL_WEIGHTS) */
        ck_assert_msg(e[i] <= (i == n - 1 ? 1e-8 : 1e-9), "%s[%lld]: the script measured %g", name, (long long)i, e[i]);
    free(e);
    tg_module_free(ctx, TG_MODULE(g));
    /* a float32 model from the float64 file: the same loss, to float32 */
    g = import_kind(k, in, TG_F32);
    int64_t idx[B * T], tgt[B * T];
    batch(0, idx, tgt);
    double l32 = tg_get_flat(ctx, tg_gpt_loss(ctx, g, B, T, idx, tgt), 0);
    snprintf(name, sizeof name, "%s.loss0", KIND_NAME[k]);
    check_array(name, &l32, 1, 1e-5);
    tg_module_free(ctx, TG_MODULE(g));
}

START_TEST(test_torch_gpt2_hf) { against_torch(GPT2_HF); }
END_TEST
START_TEST(test_torch_nanogpt) { against_torch(NANOGPT); }
END_TEST
START_TEST(test_torch_llama_hf) { against_torch(LLAMA_HF); }
END_TEST
START_TEST(test_torch_llama_meta) { against_torch(LLAMA_META); }
END_TEST

/* ---- without PyTorch ------------------------------------------------------------------ */

/* A model of kind's arch with the test's sizes, weights from seed. */
static tg_gpt *fresh(kind k, tg_dtype dtype, uint64_t seed, const char *name) {
    tg_gpt_config c = kind_config(k, dtype);
    c.vocab_size = V;
    c.n_layer = NL;
    c.n_embd = C;
    c.hidden = kind_arch(k) == TG_GPT_LLAMA ? HID : 0;
    tg_rng_seed(ctx, seed);
    tg_gpt *g = tg_gpt_new(ctx, name, &c);
    ck_assert_msg(g != NULL, "%s", tg_error_message(ctx));
    return g;
}

/* Asserts a and b have the same parameters, bit for bit. */
static void assert_same_params(tg_gpt *a, tg_gpt *b) {
    tg_params pa = {0}, pb = {0};
    tg_module_params(ctx, TG_MODULE(a), &pa);
    tg_module_params(ctx, TG_MODULE(b), &pb);
    ck_assert_int_eq(pa.count, pb.count);
    for (int i = 0; i < pa.count; i++) tg_test_assert_same_bits(pa.items[i].name, pa.items[i].value, pb.items[i].value);
    tg_params_free(&pa);
    tg_params_free(&pb);
}

/* Export, import into a model of other weights: the same bits, and the
 * same file again. Every kind, float64 and float32, a named model too (its
 * parameter names carry its name). */
START_TEST(test_round_trip) {
    const tg_dtype dts[] = {TG_F64, TG_F32};
    for (int k = 0; k < KINDS; k++) {
        for (int d = 0; d < 2; d++) {
            tg_gpt *a = fresh(k, dts[d], 1, d == 1 ? "model" : NULL), *b = fresh(k, dts[d], 2, NULL);
            ck_assert_int_eq(tg_gpt_export(ctx, a, in_dir("a.safetensors"), KIND_LAYOUT[k], NULL), TG_OK);
            ck_assert_msg(tg_gpt_import(ctx, b, in_dir("a.safetensors"), KIND_LAYOUT[k]) == TG_OK, "%s",
                          tg_error_message(ctx));
            assert_same_params(a, b);
            ck_assert_int_eq(tg_gpt_export(ctx, b, in_dir("b.safetensors"), KIND_LAYOUT[k], NULL), TG_OK);
            size_t na, nb;
            char *fa = tg_test_read_file(in_dir("a.safetensors"), &na),
                 *fb = tg_test_read_file(in_dir("b.safetensors"), &nb);
            ck_assert_msg(na == nb && memcmp(fa, fb, na) == 0, "%s %s: the second export differs", KIND_NAME[k],
                          tg_dtype_name(dts[d]));
            free(fa);
            free(fb);
            tg_module_free(ctx, TG_MODULE(a));
            tg_module_free(ctx, TG_MODULE(b));
        }
    }
}
END_TEST

/* An export as bfloat16 (the save's options) imports into a float32 model
 * as the float32 weights rounded to bfloat16. */
START_TEST(test_export_bf16) {
    tg_gpt *a = fresh(LLAMA_HF, TG_F32, 1, NULL), *b = fresh(LLAMA_HF, TG_F32, 2, NULL);
    tg_ckpt_options o = {.convert_on_save = true, .save_dtype = TG_BF16};
    ck_assert_int_eq(tg_gpt_export(ctx, a, in_dir("a.safetensors"), TG_GPT_HF, &o), TG_OK);
    ck_assert_msg(tg_gpt_import(ctx, b, in_dir("a.safetensors"), TG_GPT_HF) == TG_OK, "%s", tg_error_message(ctx));
    tg_params pa = {0}, pb = {0};
    tg_module_params(ctx, TG_MODULE(a), &pa);
    tg_module_params(ctx, TG_MODULE(b), &pb);
    for (int i = 0; i < pa.count; i++) {
        tg_tensor *rounded = tg_to_dtype(ctx, tg_to_dtype(ctx, pa.items[i].value, TG_BF16), TG_F32);
        tg_test_assert_same_bits(pa.items[i].name, rounded, pb.items[i].value);
    }
    tg_params_free(&pa);
    tg_params_free(&pb);
    tg_module_free(ctx, TG_MODULE(a));
    tg_module_free(ctx, TG_MODULE(b));
}
END_TEST

/* The exported file of kind as float64 tensors by name (ft: their names). */
static int read_export(kind k, tg_gpt *g, ftensor *ft, tg_params *list) {
    ck_assert_int_eq(tg_gpt_export(ctx, g, in_dir("x.safetensors"), KIND_LAYOUT[k], NULL), TG_OK);
    int n = file_tensors(k, true, NL, ft);
    for (int i = 0; i < n; i++)
        tg_params_add(ctx, list, NULL, ft[i].name, tg_persist(ctx, tg_zeros(ctx, TG_F64, ft[i].ndim, ft[i].shape)),
                      false);
    ck_assert_msg(tg_ckpt_load(ctx, in_dir("x.safetensors"), list, NULL, NULL) == TG_OK, "%s", tg_error_message(ctx));
    return n;
}

static void free_list(tg_params *list) {
    for (int i = 0; i < list->count; i++) tg_tensor_free(ctx, list->items[i].value);
    tg_params_free(list);
}

static double at(const tg_tensor *t, int64_t r, int64_t c) { return ((const double *)t->data)[r * t->shape[1] + c]; }

/* The layouts element by element: Hugging Face's GPT-2 c_attn (C, 3C) is
 * tapegrad's qkv (3C, C) transposed; Hugging Face's q_proj and k_proj row
 * h D + j D/2 + i is tapegrad's (and Meta's wq, wk) row h D + 2i + j of q
 * and k, v_proj's rows are as they are. */
START_TEST(test_layout_rows) {
    ftensor ft[64];
    tg_params list = {0};
    tg_gpt *g = fresh(GPT2_HF, TG_F64, 3, NULL);
    read_export(GPT2_HF, g, ft, &list);
    tg_params mine = {0};
    tg_module_params(ctx, TG_MODULE(g), &mine);
    const tg_tensor *w = tg_params_find(&mine, "h.1.attn.qkv.weight")->value;
    const tg_tensor *f = tg_params_find(&list, "transformer.h.1.attn.c_attn.weight")->value;
    for (int64_t i = 0; i < C; i++)
        for (int64_t o = 0; o < 3 * C; o++) ck_assert(at(f, i, o) == at(w, o, i));
    tg_params_free(&mine);
    free_list(&list);
    tg_module_free(ctx, TG_MODULE(g));

    const int64_t D = C / NH;
    for (int k = LLAMA_HF; k <= LLAMA_META; k++) {
        g = fresh(k, TG_F64, 4, NULL);
        tg_params fl = {0};
        read_export(k, g, ft, &fl);
        tg_module_params(ctx, TG_MODULE(g), &mine);
        w = tg_params_find(&mine, "h.0.attn.qkv.weight")->value;
        const char *names[3][2] = {{"model.layers.0.self_attn.q_proj.weight", "layers.0.attention.wq.weight"},
                                   {"model.layers.0.self_attn.k_proj.weight", "layers.0.attention.wk.weight"},
                                   {"model.layers.0.self_attn.v_proj.weight", "layers.0.attention.wv.weight"}};
        for (int part = 0; part < 3; part++) {
            f = tg_params_find(&fl, names[part][k == LLAMA_META])->value;
            for (int64_t h = 0; h < NH; h++)
                for (int64_t j = 0; j < 2; j++)
                    for (int64_t i = 0; i < D / 2; i++) {
                        int64_t hf = h * D + j * D / 2 + i, tg = h * D + 2 * i + j;
                        int64_t from = k == LLAMA_HF && part < 2 ? hf : tg; /* the file's row of tapegrad's tg */
                        for (int64_t c = 0; c < C; c++) ck_assert(at(f, from, c) == at(w, part * C + tg, c));
                    }
        }
        tg_params_free(&mine);
        free_list(&fl);
        tg_module_free(ctx, TG_MODULE(g));
    }
}
END_TEST

/* tg_gpt_import_new reads the sizes from the file, the rest from the
 * config (or the metadata of a file tapegrad exported), and leaves the
 * RNG as it was. */
START_TEST(test_config_from_file) {
    variant three = {.n_layer = 3};
    for (int k = 0; k < KINDS; k++) {
        write_file(k, in_dir("in.safetensors"), &three);
        uint64_t s0, o0, s1, o1;
        tg_rng_state(ctx, &s0, &o0);
        tg_gpt_config c = base_config(k == LLAMA_META ? TG_GPT_GPT2 : kind_arch(k), TG_F32); /* arch from the file */
        c.context = 5;                                                                       /* GPT-2: wpe's */
        c.rope_base = 500000.0;
        c.norm_eps = 1e-5;
        tg_gpt *g = tg_gpt_import_new(ctx, "m", in_dir("in.safetensors"), KIND_LAYOUT[k], &c);
        ck_assert_msg(g != NULL, "%s: %s", KIND_NAME[k], tg_error_message(ctx));
        tg_rng_state(ctx, &s1, &o1);
        ck_assert(s0 == s1 && o0 == o1);
        const tg_gpt_config *r = &g->config;
        ck_assert_int_eq(r->arch, kind_arch(k));
        ck_assert_int_eq(r->vocab_size, V);
        ck_assert_int_eq(r->n_embd, C);
        ck_assert_int_eq(r->n_layer, 3);
        ck_assert_int_eq(r->n_head, NH);
        ck_assert_int_eq(r->hidden, kind_arch(k) == TG_GPT_GPT2 ? 4 * C : HID);
        ck_assert_int_eq(r->context, kind_arch(k) == TG_GPT_GPT2 ? CTX : 5);
        ck_assert_int_eq(r->dtype, TG_F32);
        ck_assert(r->norm_eps == 1e-5);
        ck_assert_str_eq(g->base.name, "m");
        if (kind_arch(k) == TG_GPT_LLAMA) ck_assert(r->rope_base == 500000.0);
        /* NULL config: refused for this file, which does not say n_head */
        tg_test_assert_fails(ctx, tg_gpt_import_new(ctx, NULL, in_dir("in.safetensors"), KIND_LAYOUT[k], NULL),
                             TG_ERR_VALUE, "tg_gpt_import_new", "tapegrad.n_head", NULL);
        /* ... but taken from the metadata of tapegrad's export */
        ck_assert_int_eq(tg_gpt_export(ctx, g, in_dir("out.safetensors"), KIND_LAYOUT[k], NULL), TG_OK);
        tg_gpt *h = tg_gpt_import_new(ctx, NULL, in_dir("out.safetensors"), KIND_LAYOUT[k], NULL);
        ck_assert_msg(h != NULL, "%s", tg_error_message(ctx));
        ck_assert_int_eq(h->config.n_head, NH);
        ck_assert_int_eq(h->config.context, r->context);
        ck_assert(h->config.rope_base == (kind_arch(k) == TG_GPT_LLAMA ? 500000.0 : 10000.0));
        ck_assert(h->config.norm_eps == 1e-5);
        ck_assert_int_eq(h->config.dtype, TG_F32);
        tg_module_free(ctx, TG_MODULE(h));
        tg_module_free(ctx, TG_MODULE(g));
    }
}
END_TEST

/* Asserts importing kind's file (written with var) into a fresh model
 * fails with status and the strings, leaving the model as it was. */
static void assert_import_fails(kind k, const variant *var, tg_status status, const char *s1, const char *s2) {
    write_file(k, in_dir("bad.safetensors"), var);
    tg_gpt *g = fresh(k, TG_F64, 6, NULL), *copy = fresh(k, TG_F64, 6, NULL);
    ck_assert_int_eq(tg_gpt_import(ctx, g, in_dir("bad.safetensors"), KIND_LAYOUT[k]), status);
    tg_test_assert_error(ctx, status, "tg_gpt_import", "bad.safetensors", s1, s2, NULL);
    assert_same_params(g, copy);
    tg_module_free(ctx, TG_MODULE(g));
    tg_module_free(ctx, TG_MODULE(copy));
}

START_TEST(test_errors) {
    /* a tensor missing, with both names */
    assert_import_fails(GPT2_HF, &(variant){.skip = "h.1.mlp.c_fc.bias"}, TG_ERR_VALUE,
                        "\"h.1.mlp.c_fc.bias\" (tapegrad's \"h.1.mlp.fc.bias\") is missing", NULL);
    assert_import_fails(LLAMA_META, &(variant){.skip = "output.weight"}, TG_ERR_VALUE, "\"output.weight\"", "missing");
    assert_import_fails(LLAMA_META, &(variant){.skip = "tok_embeddings.weight"}, TG_ERR_VALUE,
                        "\"tok_embeddings.weight\" (tapegrad's \"wte.weight\") is missing",
                        "file (no token table: another model's file?)");
    /* grouped-query attention: k_proj of fewer rows */
    assert_import_fails(LLAMA_HF, &(variant){.resize = "model.layers.1.self_attn.k_proj.weight", .extra_rows = 8},
                        TG_ERR_SHAPE, "has shape (8, 16); tapegrad's \"h.1.attn.qkv.weight\" needs (16, 16)",
                        "grouped-query attention");
    /* a shape that differs */
    assert_import_fails(NANOGPT, &(variant){.resize = "transformer.wpe.weight", .extra_rows = 9}, TG_ERR_SHAPE,
                        "\"transformer.wpe.weight\" has shape (9, 16)", "needs (8, 16)");
    /* a layer more than the model has, a tensor of no place */
    assert_import_fails(LLAMA_HF, &(variant){.n_layer = 3}, TG_ERR_VALUE,
                        "\"model.layers.2.self_attn.q_proj.weight\" of the file has no place",
                        "(llama, 2 layers, TG_GPT_HF)");
    assert_import_fails(GPT2_HF, &(variant){.extra = "h.0.attn.c_attn.scale", .extra_rows = 1}, TG_ERR_VALUE,
                        "\"h.0.attn.c_attn.scale\" of the file has no place", NULL);
    /* an lm_head that is not the token table */
    assert_import_fails(NANOGPT, &(variant){.untie = true}, TG_ERR_VALUE,
                        "\"lm_head.weight\" differs from \"transformer.wte.weight\"", "ties");
    /* layouts the arch has not, unknown ones */
    tg_gpt *g = fresh(GPT2_HF, TG_F32, 1, NULL), *l = fresh(LLAMA_HF, TG_F32, 1, NULL);
    ck_assert_int_eq(tg_gpt_export(ctx, g, in_dir("x"), TG_GPT_META, NULL), TG_ERR_VALUE);
    tg_test_assert_error(ctx, TG_ERR_VALUE, "tg_gpt_export", "a gpt2 model has no TG_GPT_META layout", NULL);
    ck_assert_int_eq(tg_gpt_import(ctx, l, in_dir("x"), TG_GPT_NANOGPT), TG_ERR_VALUE);
    tg_test_assert_error(ctx, TG_ERR_VALUE, "tg_gpt_import", "a llama model has no TG_GPT_NANOGPT layout", NULL);
    ck_assert_int_eq(tg_gpt_import(ctx, l, in_dir("x"), (tg_gpt_layout)7), TG_ERR_VALUE);
    tg_test_assert_error(ctx, TG_ERR_VALUE, "layout = 7", NULL);
    tg_test_assert_fails(ctx, tg_gpt_import_new(ctx, NULL, in_dir("x"), (tg_gpt_layout)-1, NULL), TG_ERR_VALUE,
                         "tg_gpt_import_new", "layout = -1", NULL);
    /* NULL arguments, files that are not there or not safetensors */
    ck_assert_int_eq(tg_gpt_import(ctx, NULL, in_dir("x"), TG_GPT_HF), TG_ERR_NULL);
    tg_test_assert_error(ctx, TG_ERR_NULL, "tg_gpt_import", "'gpt'", NULL);
    ck_assert_int_eq(tg_gpt_export(ctx, g, NULL, TG_GPT_HF, NULL), TG_ERR_NULL);
    tg_test_assert_error(ctx, TG_ERR_NULL, "tg_gpt_export", "'path'", NULL);
    ck_assert_int_eq(tg_gpt_import(NULL, g, in_dir("x"), TG_GPT_HF), TG_ERR_NULL);
    ck_assert_int_eq(tg_gpt_import(ctx, g, in_dir("none.safetensors"), TG_GPT_HF), TG_ERR_IO);
    tg_test_assert_error(ctx, TG_ERR_IO, "tg_gpt_import", "none.safetensors", NULL);
    tg_test_write_file(in_dir("text.safetensors"), "not a checkpoint", 16);
    ck_assert_int_eq(tg_gpt_import(ctx, g, in_dir("text.safetensors"), TG_GPT_HF), TG_ERR_FORMAT);
    tg_test_assert_error(ctx, TG_ERR_FORMAT, "tg_gpt_import", "text.safetensors", NULL);
    /* a file of the other arch */
    write_file(LLAMA_HF, in_dir("llama.safetensors"), NULL);
    ck_assert_int_eq(tg_gpt_import(ctx, g, in_dir("llama.safetensors"), TG_GPT_HF), TG_ERR_VALUE);
    tg_test_assert_error(ctx, TG_ERR_VALUE, "\"wte.weight\" (tapegrad's \"wte.weight\") is missing",
                         "no token table, with or without the prefix \"transformer.\": another model's file?", NULL);
    tg_test_assert_fails(ctx, tg_gpt_import_new(ctx, NULL, in_dir("llama.safetensors"), TG_GPT_NANOGPT, NULL),
                         TG_ERR_VALUE, "no token table \"transformer.wte.weight\"", "not a TG_GPT_NANOGPT file", NULL);
    /* a config tg_gpt_new refuses: its own error */
    tg_gpt_config c = base_config(TG_GPT_LLAMA, TG_F32);
    c.n_head = 3;
    tg_test_assert_fails(ctx, tg_gpt_import_new(ctx, NULL, in_dir("llama.safetensors"), TG_GPT_HF, &c), TG_ERR_VALUE,
                         "tg_gpt_new", "n_head = 3", NULL);
    tg_module_free(ctx, TG_MODULE(g));
    tg_module_free(ctx, TG_MODULE(l));
}
END_TEST

/* What a PyTorch file may hold beyond the weights, and what it may leave
 * out: the causal-mask and RoPE buffers are skipped; a LLaMA file without
 * lm_head (tie_word_embeddings) gives lm_head the token table; a bfloat16
 * file loads into a float32 model. */
START_TEST(test_tolerated) {
    write_file(GPT2_HF, in_dir("a.safetensors"), &(variant){.extra = "h.0.attn.bias", .extra_rows = 1});
    tg_gpt *g = fresh(GPT2_HF, TG_F64, 1, NULL);
    ck_assert_msg(tg_gpt_import(ctx, g, in_dir("a.safetensors"), TG_GPT_HF) == TG_OK, "%s", tg_error_message(ctx));
    ck_assert(tg_get_flat(ctx, g->wte->weight, 5) == formula("wte.weight", 2, 5));
    tg_module_free(ctx, TG_MODULE(g));
    write_file(LLAMA_META, in_dir("m.safetensors"), &(variant){.extra = "rope.freqs", .extra_rows = 4});
    g = fresh(LLAMA_META, TG_F64, 1, NULL);
    ck_assert_msg(tg_gpt_import(ctx, g, in_dir("m.safetensors"), TG_GPT_META) == TG_OK, "%s", tg_error_message(ctx));
    tg_module_free(ctx, TG_MODULE(g));

    write_file(LLAMA_HF, in_dir("b.safetensors"),
               &(variant){.skip = "lm_head.weight",
                          .extra = "model.layers.1.self_attn.rotary_emb.inv_freq",
                          .extra_rows = 4,
                          .dtype = TG_BF16});
    g = fresh(LLAMA_HF, TG_F32, 1, NULL);
    ck_assert_msg(tg_gpt_import(ctx, g, in_dir("b.safetensors"), TG_GPT_HF) == TG_OK, "%s", tg_error_message(ctx));
    tg_test_assert_same_bits("lm_head = embed_tokens", g->lm_head->weight, g->wte->weight);
    tg_tensor *one = tg_from_buffer(ctx, TG_F64, TG_SHAPE(1), (double[]){formula("model.embed_tokens.weight", 2, 7)});
    double bf = tg_get_flat(ctx, tg_to_dtype(ctx, one, TG_BF16), 0);
    ck_assert(tg_get_flat(ctx, g->wte->weight, 7) == bf);
    tg_module_free(ctx, TG_MODULE(g));
}
END_TEST

/* ---- for scripts/weights_torch.py ------------------------------------------------------ */

static void save_results(const char *path, const results *r) {
    tg_params out = {0};
    struct {
        const char *name;
        const double *v;
        int64_t n;
    } arrays[] = {{"loss0", &r->loss0, 1}, {"logits0", r->logits0, V}, {"traj", r->traj, STEPS}, {"eval", &r->eval, 1}};
    for (size_t i = 0; i < sizeof arrays / sizeof *arrays; i++)
        tg_params_add(ctx, &out, NULL, arrays[i].name,
                      tg_persist(ctx, tg_from_buffer(ctx, TG_F64, TG_SHAPE(arrays[i].n), arrays[i].v)), false);
    ck_assert_msg(tg_ckpt_save(ctx, path, &out, NULL, NULL) == TG_OK, "%s", tg_error_message(ctx));
    free_list(&out);
}

START_TEST(test_dump) {
    const char *d = getenv("TG_WEIGHTS_TORCH_DIR");
    ck_assert_ptr_nonnull(d);
    char in[512], out[512];
    for (int k = 0; k < KINDS; k++) {
        snprintf(in, sizeof in, "%s/%s.torch.safetensors", d, KIND_NAME[k]);
        snprintf(out, sizeof out, "%s/%s.tapegrad.safetensors", d, KIND_NAME[k]);
        tg_gpt *g = import_kind(k, in, TG_F64);
        results r;
        train(k, g, out, &r);
        snprintf(out, sizeof out, "%s/%s.results.safetensors", d, KIND_NAME[k]);
        save_results(out, &r);
        tg_module_free(ctx, TG_MODULE(g));
    }
    tg_tensor *bt = tg_persist(ctx, tg_zeros(ctx, TG_F64, TG_SHAPE(STEPS + 1, 2, B, T)));
    for (int s = 0; s <= STEPS; s++) {
        int64_t idx[B * T], tgt[B * T];
        batch(s, idx, tgt);
        for (int i = 0; i < B * T; i++) {
            tg_set_flat(ctx, bt, (int64_t)s * 2 * B * T + i, (double)idx[i]);
            tg_set_flat(ctx, bt, (int64_t)s * 2 * B * T + B * T + i, (double)tgt[i]);
        }
    }
    tg_params list = {0};
    tg_params_add(ctx, &list, NULL, "batches", bt, false);
    snprintf(out, sizeof out, "%s/batches.safetensors", d);
    ck_assert_msg(tg_ckpt_save(ctx, out, &list, NULL, NULL) == TG_OK, "%s", tg_error_message(ctx));
    free_list(&list);
}
END_TEST

Suite *make_gpt_weights_suite(void) {
    if (getenv("TG_WEIGHTS_TORCH_DIR")) return tg_test_suite("gpt_weights", setup, teardown, test_dump, NULL);
    return tg_test_suite("gpt_weights", setup, teardown, test_round_trip, test_export_bf16, test_layout_rows,
                         test_config_from_file, test_errors, test_tolerated, test_torch_gpt2_hf, test_torch_nanogpt,
                         test_torch_llama_hf, test_torch_llama_meta, NULL);
}

int main(void) { return tg_test_run(make_gpt_weights_suite()); }

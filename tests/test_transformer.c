/* The transformer modules (layers/transformer.c) and the GPT model
 * (layers/gpt.c): parameter names and counts against the formulas, reprs,
 * gradients against finite differences in float64 (the input's in full,
 * every parameter's along a random direction), causality (a token changes
 * no logit before it), weight tying, and the errors the issue lists:
 * heads that do not divide channels, a context longer than the positions,
 * a batch of zero. The agreement with PyTorch is tests/test_gpt_torch.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static tg_ctx *ctx;
static void setup(void) { ctx = tg_ctx_new(3); }
static void teardown(void) { tg_ctx_free(ctx); }

/* A tiny config of either arch in float64. */
static tg_gpt_config tiny(tg_gpt_arch arch) {
    tg_gpt_config c = tg_gpt_defaults(arch);
    c.vocab_size = 11;
    c.context = 6;
    c.n_layer = 2;
    c.n_head = 2;
    c.n_embd = 8;
    c.dtype = TG_F64;
    return c;
}

START_TEST(test_names_and_counts) {
    for (int a = 0; a < 2; a++) {
        tg_gpt_config c = tiny(a ? TG_GPT_GPT2 : TG_GPT_LLAMA);
        tg_gpt *g = tg_gpt_new(ctx, NULL, &c);
        ck_assert_msg(g != NULL, "%s", tg_error_message(ctx));
        tg_params list = {0};
        ck_assert(tg_module_params(ctx, TG_MODULE(g), &list));
        const int64_t V = c.vocab_size, C = c.n_embd, L = c.n_layer;
        const int64_t Hd = tg_mlp_hidden(a ? TG_MLP_GELU_TANH : TG_MLP_SWIGLU, C);
        int64_t per_block, expect;
        if (a) { /* GPT-2: 2 LayerNorms with beta, qkv+proj with bias, fc+proj with bias */
            ck_assert_int_eq(Hd, 4 * C);
            per_block = 4 * C + (3 * C * C + 3 * C) + (C * C + C) + (C * Hd + Hd) + (Hd * C + C);
            expect = V * C + c.context * C + L * per_block + 2 * C; /* tied: no lm_head */
            ck_assert_ptr_nonnull(tg_params_find(&list, "wpe.weight"));
            ck_assert_ptr_nonnull(tg_params_find(&list, "h.1.attn.qkv.bias"));
            ck_assert_ptr_nonnull(tg_params_find(&list, "h.0.ln_1.beta"));
            ck_assert_ptr_null(tg_params_find(&list, "lm_head.weight"));
            ck_assert_ptr_null(tg_params_find(&list, "h.0.mlp.gate.weight"));
        } else {                      /* LLaMA: 2 RMSNorm gains, no biases, SwiGLU's three matrices */
            ck_assert_int_eq(Hd, 32); /* ceil(8 * 8 / 3) = 22, rounded up to 32 */
            per_block = 2 * C + 3 * C * C + C * C + 3 * C * Hd;
            expect = V * C + L * per_block + C + C * V;
            ck_assert_ptr_nonnull(tg_params_find(&list, "h.1.mlp.gate.weight"));
            ck_assert_ptr_nonnull(tg_params_find(&list, "lm_head.weight"));
            ck_assert_ptr_null(tg_params_find(&list, "wpe.weight"));
            ck_assert_ptr_null(tg_params_find(&list, "h.0.attn.qkv.bias"));
        }
        ck_assert_int_eq(tg_params_numel(&list), expect);
        ck_assert_int_eq(tg_module_numel(TG_MODULE(g)), expect);
        /* GPT-2's init: the residual projections are drawn narrower */
        tg_tensor *fc = tg_params_find(&list, "h.0.mlp.fc.weight")->value;
        tg_tensor *pj = tg_params_find(&list, "h.0.mlp.proj.weight")->value;
        double sf = 0, sp = 0;
        for (int64_t i = 0; i < fc->numel; i++) sf += pow(tg_get_flat(ctx, fc, i), 2);
        for (int64_t i = 0; i < pj->numel; i++) sp += pow(tg_get_flat(ctx, pj, i), 2);
        ck_assert(sqrt(sf / (double)fc->numel) > 0.015 && sqrt(sf / (double)fc->numel) < 0.025);
        ck_assert(sqrt(sp / (double)pj->numel) < 0.6 * sqrt(sf / (double)fc->numel));
        char buf[4096];
        tg_module_format(buf, sizeof buf, TG_MODULE(g));
        tg_test_assert_contains(buf, "GPT(arch=", a ? "gpt2" : "llama", "(h): Sequential(", "(0): Block(",
                                "(attn): CausalSelfAttention(n_embd=8, n_head=2", "(mlp): MLP(n_embd=8", NULL);
        tg_params_free(&list);
        tg_module_free(ctx, TG_MODULE(g));
    }
}
END_TEST

/* The loss of a fixed batch, weighted nowhere: tg_gpt_loss. */
enum { B = 2, T = 5 };
static const int64_t IDX[B * T] = {1, 4, 4, 10, 0, 7, 3, 9, 2, 5};
static const int64_t TGT[B * T] = {4, 4, 10, 0, 6, 3, 9, 2, 5, 8};

/* Gradients of the loss for every parameter against central differences
 * along one random direction each (float64), and the input embedding's
 * path too: wte is a parameter. */
static void check_grads(tg_gpt_arch arch) {
    tg_gpt_config c = tiny(arch);
    tg_gpt *g = tg_gpt_new(ctx, NULL, &c);
    ck_assert_msg(g != NULL, "%s", tg_error_message(ctx));
    tg_params list = {0};
    ck_assert(tg_module_params(ctx, TG_MODULE(g), &list));
    tg_params_zero_grad(ctx, &list);
    tg_backward(ctx, tg_gpt_loss(ctx, g, B, T, IDX, TGT));
    ck_assert_msg(tg_ok(ctx), "%s", tg_error_message(ctx));
    tg_ctx_reset(ctx);
    const double h = 1e-5;
    for (int i = 0; i < list.count; i++) {
        tg_tensor *p = list.items[i].value;
        double *d = tg_data_f64(ctx, p), *gr = tg_data_f64(ctx, p->grad);
        double *v = tg_test_malloc((size_t)p->numel * sizeof *v), *saved = tg_test_malloc((size_t)p->numel * 8);
        double dot = 0, vv = 0;
        for (int64_t j = 0; j < p->numel; j++) {
            v[j] = tg_rng_normal(ctx);
            vv += v[j] * v[j];
        }
        for (int64_t j = 0; j < p->numel; j++) {
            v[j] /= sqrt(vv);
            dot += gr[j] * v[j];
            saved[j] = d[j];
        }
        double l[2];
        bool was = tg_set_grad_enabled(ctx, false);
        for (int s = 0; s < 2; s++) {
            for (int64_t j = 0; j < p->numel; j++) d[j] = saved[j] + (s ? -h : h) * v[j];
            l[s] = tg_get_flat(ctx, tg_gpt_loss(ctx, g, B, T, IDX, TGT), 0);
            tg_ctx_reset(ctx);
        }
        tg_set_grad_enabled(ctx, was);
        memcpy(d, saved, (size_t)p->numel * 8);
        double num = (l[0] - l[1]) / (2 * h);
        ck_assert_msg(fabs(num - dot) <= 1e-8 + 1e-6 * fabs(num), "%s %s: analytic %.12g, numeric %.12g",
                      tg_gpt_arch_name(arch), list.items[i].name, dot, num);
        free(v);
        free(saved);
    }
    tg_params_free(&list);
    tg_module_free(ctx, TG_MODULE(g));
}

START_TEST(test_grads_llama) { check_grads(TG_GPT_LLAMA); }
END_TEST
START_TEST(test_grads_gpt2) { check_grads(TG_GPT_GPT2); }
END_TEST

/* The block's gradient with respect to its input, element by element. */
static tg_tensor *block_fn(tg_ctx *c, tg_tensor *const *in, void *user) { return tg_block_forward(c, user, in[0]); }

START_TEST(test_block_input_gradcheck) {
    tg_block_opts o[2] = {tg_block_llama(), tg_block_gpt2()};
    for (int a = 0; a < 2; a++) {
        o[a].dtype = TG_F64;
        tg_block *b = tg_block_new(ctx, "blk", 8, 2, &o[a]);
        ck_assert_msg(b != NULL, "%s", tg_error_message(ctx));
        tg_tensor *x = tg_test_smooth_leaf(ctx, TG_SHAPE(2, 3, 8), a);
        tg_test_op_gradcheck(ctx, a ? "gpt2 block" : "llama block", block_fn, b, 1, &x);
        tg_tensor *y = tg_block_forward(ctx, b, x);
        ck_assert(tg_same_shape(x, y));
        tg_module_free(ctx, TG_MODULE(b));
        tg_ctx_reset(ctx);
    }
}
END_TEST

/* Causal: the logits at position t depend on tokens 0..t only. */
START_TEST(test_causal) {
    for (int a = 0; a < 2; a++) {
        tg_gpt_config c = tiny(a ? TG_GPT_GPT2 : TG_GPT_LLAMA);
        tg_gpt *g = tg_gpt_new(ctx, NULL, &c);
        int64_t idx[T] = {1, 2, 3, 4, 5};
        tg_tensor *l0 = tg_gpt_forward(ctx, g, 1, T, idx);
        idx[3] = 9;
        tg_tensor *l1 = tg_gpt_forward(ctx, g, 1, T, idx);
        ck_assert_msg(l0 && l1, "%s", tg_error_message(ctx));
        for (int64_t i = 0; i < 3 * c.vocab_size; i++) ck_assert(tg_get_flat(ctx, l0, i) == tg_get_flat(ctx, l1, i));
        double diff = 0;
        for (int64_t i = 3 * c.vocab_size; i < T * c.vocab_size; i++)
            diff += fabs(tg_get_flat(ctx, l0, i) - tg_get_flat(ctx, l1, i));
        ck_assert(diff > 1e-6);
        tg_module_free(ctx, TG_MODULE(g));
        tg_ctx_reset(ctx);
    }
}
END_TEST

/* config.norm_eps reaches every norm (LLaMA-2's 1e-5); 0 leaves each its
 * default. */
START_TEST(test_norm_eps) {
    for (int a = 0; a < 2; a++) {
        for (int set = 0; set < 2; set++) {
            tg_gpt_config c = tiny(a ? TG_GPT_GPT2 : TG_GPT_LLAMA);
            c.norm_eps = set ? 1e-3 : 0;
            tg_gpt *g = tg_gpt_new(ctx, NULL, &c);
            ck_assert_msg(g != NULL, "%s", tg_error_message(ctx));
            const double want = set ? 1e-3 : a ? TG_LAYERNORM_EPS : TG_RMSNORM_EPS;
            tg_module *norms[5] = {g->ln_f};
            int n = 1;
            for (int l = 0; l < g->h->modules.count; l++) {
                tg_block *b = (tg_block *)g->h->modules.items[l];
                norms[n++] = b->ln_1, norms[n++] = b->ln_2;
            }
            for (int i = 0; i < n; i++)
                ck_assert(a ? ((tg_layernorm *)norms[i])->eps == want : ((tg_rmsnorm *)norms[i])->eps == want);
            tg_module_free(ctx, TG_MODULE(g));
        }
    }
}
END_TEST

START_TEST(test_errors) {
    tg_gpt_config c = tiny(TG_GPT_LLAMA);
    c.n_head = 3;
    tg_test_assert_fails(ctx, tg_gpt_new(ctx, NULL, &c), TG_ERR_VALUE, "tg_gpt_new", "n_head = 3", "n_embd = 8", NULL);
    c = tiny(TG_GPT_LLAMA);
    c.norm_eps = -1e-5;
    tg_test_assert_fails(ctx, tg_gpt_new(ctx, NULL, &c), TG_ERR_VALUE, "tg_gpt_new", "config.norm_eps = -1e-05", NULL);
    tg_test_assert_fails(ctx, tg_mha_new(ctx, NULL, 10, 4, false, 0, TG_F32), TG_ERR_VALUE, "tg_mha_new",
                         "n_head = 4 does not divide n_embd = 10", NULL);
    tg_test_assert_fails(ctx, tg_mha_new(ctx, NULL, 6, 2, false, 10000, TG_F32), TG_ERR_VALUE, "even head size", NULL);
    tg_test_assert_fails(ctx, tg_mlp_new(ctx, NULL, 8, 0, (tg_mlp_kind)7, false, TG_F32), TG_ERR_VALUE, "kind = 7",
                         NULL);
    c = tiny(TG_GPT_GPT2);
    tg_gpt *g = tg_gpt_new(ctx, NULL, &c);
    ck_assert(g != NULL);
    int64_t idx[8] = {0};
    tg_test_assert_fails(ctx, tg_gpt_forward(ctx, g, 1, 7, idx), TG_ERR_VALUE, "T = 7", "context 6", NULL);
    tg_test_assert_fails(ctx, tg_gpt_forward(ctx, g, 0, 2, idx), TG_ERR_VALUE, "B = 0", NULL);
    idx[1] = 11;
    tg_test_assert_fails(ctx, tg_gpt_forward(ctx, g, 1, 2, idx), TG_ERR_INDEX, "11", NULL);
    tg_test_assert_fails(ctx, tg_module_forward(ctx, TG_MODULE(g), NULL), TG_ERR_VALUE, "token ids", NULL);
    tg_tensor *x = tg_zeros(ctx, TG_F64, TG_SHAPE(2, 3, 9));
    tg_test_assert_fails(ctx, tg_block_forward(ctx, (tg_block *)g->h->modules.items[0], x), TG_ERR_SHAPE,
                         "tg_block_forward", "(2, 3, 9)", NULL);
    tg_module_free(ctx, TG_MODULE(g));
}
END_TEST

Suite *make_transformer_suite(void) {
    return tg_test_suite("transformer", setup, teardown, test_names_and_counts, test_grads_llama, test_grads_gpt2,
                         test_block_input_gradcheck, test_causal, test_norm_eps, test_errors, NULL);
}

int main(void) { return tg_test_run(make_transformer_suite()); }

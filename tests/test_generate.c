/* Generation (layers/generate.c): the KV cache's logits against a full
 * forward at every position (bitwise, both archs, float64 and float32, and
 * under bfloat16 autocast), greedy decoding as the limit of a small
 * temperature and as the argmax loop written by hand, seeds, top-k and
 * top-p, the stop token, sliding past the context (with keep = context the
 * cached loop gives the uncached loop's tokens), 1 and 2 threads, the
 * arena left as found,
 * and the errors; then tg_gpt_loss_from (one forward for logits and loss)
 * and tg_gpt_free. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static tg_ctx *ctx;
static void setup(void) { ctx = tg_ctx_new(5); }
static void teardown(void) { tg_ctx_free(ctx); }

/* A small model: context 40 crosses the attention's 32-row blocks, 11
 * tokens leave a vector tail in every row. */
static tg_gpt *small(tg_gpt_arch arch, tg_dtype dtype, int64_t context) {
    tg_gpt_config c = tg_gpt_defaults(arch);
    c.vocab_size = 11;
    c.context = context;
    c.n_layer = 2;
    c.n_head = 4;
    c.n_embd = 32;
    c.dtype = dtype;
    tg_gpt *g = tg_gpt_new(ctx, NULL, &c);
    ck_assert_msg(g != NULL, "%s", tg_error_message(ctx));
    return g;
}

static void random_tokens(int64_t *t, int64_t n, int64_t V, uint64_t seed) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        t[i] = (int64_t)((s >> 33) % (uint64_t)V);
    }
}

/* Feeds the cache tokens[0 .. T) in the chunks of `chunks` (a prompt, then
 * single tokens and a few pairs) and asserts every chunk's logits are
 * bitwise the rows of one full forward over all T. */
static void check_cache_rows(tg_gpt *g, const int64_t *tokens, int64_t T, const char *what) {
    tg_tensor *full = tg_gpt_forward(ctx, g, 1, T, tokens);
    ck_assert_msg(full != NULL, "%s", tg_error_message(ctx));
    tg_gpt_cache *cache = tg_gpt_cache_new(ctx, g);
    ck_assert_msg(cache != NULL, "%s", tg_error_message(ctx));
    int64_t at = 0;
    for (int step = 0; at < T; step++) {
        int64_t n = step == 0 ? 5 : step % 7 == 3 ? 3 : 1;
        if (at + n > T) n = T - at;
        tg_tensor *got = tg_gpt_cache_forward(ctx, cache, n, tokens + at);
        ck_assert_msg(got != NULL, "%s", tg_error_message(ctx));
        ck_assert_int_eq(got->shape[1], n);
        char name[96];
        snprintf(name, sizeof name, "%s: positions %lld..%lld", what, (long long)at, (long long)(at + n - 1));
        tg_test_assert_same_bits(name, got, tg_slice(ctx, full, 1, at, at + n));
        at += n;
        ck_assert_int_eq(tg_gpt_cache_len(cache), at);
    }
    tg_gpt_cache_free(ctx, cache);
}

START_TEST(test_cache_equals_full_forward) {
    static const tg_dtype dtypes[2] = {TG_F64, TG_F32};
    int64_t tokens[40];
    random_tokens(tokens, 40, 11, 1);
    for (int a = 0; a < 2; a++)
        for (int d = 0; d < 2; d++) {
            tg_gpt *g = small(a ? TG_GPT_GPT2 : TG_GPT_LLAMA, dtypes[d], 40);
            char what[64];
            snprintf(what, sizeof what, "%s %s", a ? "gpt2" : "llama", tg_dtype_name(dtypes[d]));
            check_cache_rows(g, tokens, 40, what);
            tg_gpt_free(ctx, g);
            tg_ctx_reset(ctx);
        }
}
END_TEST

/* The longest windows the claim covers: 256 positions in float64 and 384
 * in float32, where the attention's second product is one K slice deep. */
START_TEST(test_cache_longest_windows) {
    static const struct {
        tg_dtype dtype;
        int64_t T;
    } cases[2] = {{TG_F64, 256}, {TG_F32, 384}};
    int64_t tokens[384];
    random_tokens(tokens, 384, 11, 7);
    for (int c = 0; c < 2; c++) {
        tg_gpt *g = small(c ? TG_GPT_GPT2 : TG_GPT_LLAMA, cases[c].dtype, cases[c].T);
        check_cache_rows(g, tokens, cases[c].T, c ? "gpt2 float32, 384 positions" : "llama float64, 256 positions");
        tg_gpt_free(ctx, g);
        tg_ctx_reset(ctx);
    }
}
END_TEST

/* Under bfloat16 autocast the cache holds bfloat16 keys and values and the
 * rows still match the autocast full forward; a cache made without
 * autocast refuses to run under it. */
START_TEST(test_cache_under_autocast) {
    int64_t tokens[24];
    random_tokens(tokens, 24, 11, 2);
    for (int a = 0; a < 2; a++) {
        tg_gpt *g = small(a ? TG_GPT_GPT2 : TG_GPT_LLAMA, TG_F32, 24);
        tg_gpt_cache *plain = tg_gpt_cache_new(ctx, g);
        tg_ctx_set_autocast(ctx, TG_BF16);
        check_cache_rows(g, tokens, 24, a ? "gpt2 bf16 autocast" : "llama bf16 autocast");
        tg_test_assert_fails(ctx, tg_gpt_cache_forward(ctx, plain, 1, tokens), TG_ERR_DTYPE, "tg_gpt_cache_forward",
                             "float32", "bfloat16", NULL);
        tg_ctx_set_autocast(ctx, TG_F32);
        tg_gpt_cache_free(ctx, plain);
        tg_gpt_free(ctx, g);
        tg_ctx_reset(ctx);
    }
}
END_TEST

/* The greedy tokens written by hand: a full forward over the window, the
 * argmax of its last row. */
static void greedy_by_hand(tg_gpt *g, const int64_t *prompt, int64_t np, int64_t n, int64_t *out) {
    const int64_t V = g->config.vocab_size, context = g->config.context;
    int64_t *hist = tg_test_malloc((size_t)(np + n) * sizeof *hist);
    memcpy(hist, prompt, (size_t)np * sizeof *hist);
    bool was = tg_set_grad_enabled(ctx, false);
    for (int64_t i = 0; i < n; i++) {
        const int64_t len = np + i, T = len < context ? len : context;
        tg_tensor *logits = tg_gpt_forward(ctx, g, 1, T, hist + len - T);
        int64_t ids[64];
        ck_assert(tg_argmax(ctx, tg_reshape(ctx, logits, 2, (const int64_t[]){T, V}), -1, ids));
        hist[len] = out[i] = ids[T - 1];
        tg_ctx_reset(ctx);
    }
    tg_set_grad_enabled(ctx, was);
    free(hist);
}

/* temperature 0 is greedy: the argmax loop's tokens, past the context too
 * (keep = context: the same windows); a temperature of 1e-6 gives them as
 * well (the limit); top-k 1 at temperature 1 too. */
START_TEST(test_greedy) {
    for (int a = 0; a < 2; a++) {
        tg_gpt *g = small(a ? TG_GPT_GPT2 : TG_GPT_LLAMA, TG_F64, 16);
        const int64_t prompt[3] = {1, 2, 3};
        int64_t want[30], got[30];
        greedy_by_hand(g, prompt, 3, 30, want);
        tg_gen_opts o = tg_gen_defaults();
        o.temperature = 0;
        o.keep = 16;
        ck_assert_int_eq(tg_gpt_generate(ctx, g, 3, prompt, 30, &o, got), 30);
        for (int i = 0; i < 30; i++)
            ck_assert_msg(got[i] == want[i], "greedy token %d: %lld, want %lld", i, (long long)got[i],
                          (long long)want[i]);
        o.temperature = 1e-6;
        ck_assert_int_eq(tg_gpt_generate(ctx, g, 3, prompt, 30, &o, got), 30);
        for (int i = 0; i < 30; i++) ck_assert_int_eq(got[i], want[i]);
        o.temperature = 1;
        o.top_k = 1;
        o.seed = 99;
        ck_assert_int_eq(tg_gpt_generate(ctx, g, 3, prompt, 30, &o, got), 30);
        for (int i = 0; i < 30; i++) ck_assert_int_eq(got[i], want[i]);
        tg_gpt_free(ctx, g);
    }
}
END_TEST

/* The same seed, the same tokens; another seed, other tokens; with keep =
 * context the cached loop draws what the uncached loop draws, past the
 * context (float64: the logits are the same bits); with the default keep
 * the cache slides on and still makes every token. */
START_TEST(test_seeds_and_sliding) {
    for (int a = 0; a < 2; a++) {
        tg_gpt *g = small(a ? TG_GPT_GPT2 : TG_GPT_LLAMA, TG_F64, 12);
        const int64_t prompt[2] = {4, 7};
        int64_t x[40], y[40], z[40];
        tg_gen_opts o = tg_gen_defaults();
        o.seed = 7;
        o.top_p = 0.95;
        ck_assert_int_eq(tg_gpt_generate(ctx, g, 2, prompt, 40, &o, x), 40);
        ck_assert_int_eq(tg_gpt_generate(ctx, g, 2, prompt, 40, &o, y), 40);
        ck_assert(memcmp(x, y, sizeof x) == 0);
        o.seed = 8;
        ck_assert_int_eq(tg_gpt_generate(ctx, g, 2, prompt, 40, &o, z), 40);
        ck_assert(memcmp(x, z, sizeof x) != 0);
        o.keep = 12;
        ck_assert_int_eq(tg_gpt_generate(ctx, g, 2, prompt, 40, &o, y), 40);
        o.use_cache = false;
        ck_assert_int_eq(tg_gpt_generate(ctx, g, 2, prompt, 40, &o, z), 40);
        ck_assert_msg(memcmp(y, z, sizeof y) == 0, "%s: keep = context, cached and uncached differ",
                      a ? "gpt2" : "llama");
        /* the first 10 tokens' windows fit the context: every keep agrees there */
        o.use_cache = true;
        o.keep = 0;
        ck_assert_int_eq(tg_gpt_generate(ctx, g, 2, prompt, 40, &o, x), 40);
        ck_assert(memcmp(x, z, 10 * sizeof *x) == 0);
        tg_gpt_free(ctx, g);
    }
}
END_TEST

/* The cached logits are the same bits with 1 and 2 threads (the attention
 * spreads its heads, the GEMMs their tiles, over the pool). */
START_TEST(test_threads) {
    int64_t tokens[24];
    random_tokens(tokens, 24, 11, 6);
    tg_gpt *g = small(TG_GPT_LLAMA, TG_F32, 24);
    tg_tensor *rows[2];
    for (int t = 0; t < 2; t++) {
        tg_set_threads(ctx, t + 1);
        tg_gpt_cache *cache = tg_gpt_cache_new(ctx, g);
        tg_gpt_cache_forward(ctx, cache, 20, tokens);
        rows[t] = tg_gpt_cache_forward(ctx, cache, 4, tokens + 20);
        ck_assert_msg(rows[t] != NULL, "%s", tg_error_message(ctx));
        tg_gpt_cache_free(ctx, cache);
    }
    tg_test_assert_same_bits("logits with 2 threads", rows[1], rows[0]);
    tg_gpt_free(ctx, g);
}
END_TEST

/* tg_sample_token on known probabilities (0.5, 0.3, 0.15, 0.05): the draw
 * frequencies, top-k and top-p's kept sets. */
START_TEST(test_top_k_top_p) {
    const double p[4] = {0.5, 0.3, 0.15, 0.05};
    double l[4];
    for (int i = 0; i < 4; i++) l[i] = log(p[i]) + 3; /* a shift changes nothing */
    tg_tensor *logits = tg_test_tensor(ctx, TG_F32, 1, (const int64_t[]){4}, l);
    struct {
        int64_t k;
        double p;
        int allowed; /* tokens 0 .. allowed-1 */
    } cases[] = {{0, 1, 4}, {1, 1, 1}, {2, 1, 2}, {0, 0.5, 1}, {0, 0.75, 2}, {0, 0.81, 3}, {3, 0.99, 3}, {2, 0.9, 2}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        tg_gen_opts o = tg_gen_defaults();
        o.top_k = cases[c].k;
        o.top_p = cases[c].p;
        o.seed = 3;
        int count[4] = {0};
        const int n = 4000;
        for (int d = 0; d < n; d++) {
            int64_t id = tg_sample_token(ctx, logits, &o, (uint64_t)d);
            ck_assert_msg(id >= 0 && id < cases[c].allowed, "top_k %lld top_p %g: drew %lld", (long long)cases[c].k,
                          cases[c].p, (long long)id);
            count[id]++;
        }
        double kept = 0;
        for (int i = 0; i < cases[c].allowed; i++) kept += p[i];
        for (int i = 0; i < cases[c].allowed; i++) { /* within 5 standard deviations */
            const double q = p[i] / kept, sd = sqrt(q * (1 - q) / n);
            ck_assert_msg(fabs((double)count[i] / n - q) <= 5 * sd + 1e-12,
                          "top_k %lld top_p %g: token %d at %g, want %g", (long long)cases[c].k, cases[c].p, i,
                          (double)count[i] / n, q);
        }
    }
}
END_TEST

static bool stop_after_two(void *user, int64_t token) {
    (void)token;
    return ++*(int *)user < 2;
}

/* The stop token ends generation (and is output); so does on_token
 * returning false; the arena is where it was, and a tensor made before
 * the call still holds its values. */
START_TEST(test_stop_and_arena) {
    tg_gpt *g = small(TG_GPT_LLAMA, TG_F32, 16);
    const int64_t prompt[1] = {5};
    int64_t want[8], got[8];
    tg_gen_opts o = tg_gen_defaults();
    o.temperature = 0;
    ck_assert_int_eq(tg_gpt_generate(ctx, g, 1, prompt, 8, &o, want), 8);
    o.stop = want[3];
    int64_t first = 0;
    while (want[first] != o.stop) first++;
    tg_tensor *held = tg_test_tensor(ctx, TG_F32, 1, (const int64_t[]){3}, (const double[]){1, 2, 3});
    const size_t used = tg_arena_used(ctx);
    ck_assert_int_eq(tg_gpt_generate(ctx, g, 1, prompt, 8, &o, got), first + 1);
    ck_assert_int_eq(tg_arena_used(ctx), used);
    ck_assert(tg_get_flat(ctx, held, 2) == 3);
    o.stop = -1;
    int calls = 0;
    o.on_token = stop_after_two;
    o.user = &calls;
    ck_assert_int_eq(tg_gpt_generate(ctx, g, 1, prompt, 8, &o, got), 2);
    ck_assert_int_eq(calls, 2);
    ck_assert(got[0] == want[0] && got[1] == want[1]);
    tg_gpt_free(ctx, g);
}
END_TEST

START_TEST(test_errors) {
    tg_gpt *g = small(TG_GPT_GPT2, TG_F32, 8);
    int64_t prompt[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, out[4];
    tg_gen_opts o = tg_gen_defaults();
    ck_assert_int_eq(tg_gpt_generate(ctx, g, 9, prompt, 4, &o, out), -1);
    tg_test_assert_error(ctx, TG_ERR_VALUE, "tg_gpt_generate", "prompt of 9 tokens is longer than the context, 8",
                         NULL);
    ck_assert_int_eq(tg_gpt_generate(ctx, g, 0, prompt, 4, &o, out), -1);
    tg_test_assert_error(ctx, TG_ERR_VALUE, "n_prompt = 0", NULL);
    prompt[1] = 11;
    ck_assert_int_eq(tg_gpt_generate(ctx, g, 3, prompt, 4, &o, out), -1);
    tg_test_assert_error(ctx, TG_ERR_INDEX, "prompt[1] = 11 is not a token id in 0..10", NULL);
    prompt[1] = 2;
    ck_assert_int_eq(tg_gpt_generate(ctx, g, 3, NULL, 4, &o, out), -1);
    tg_test_assert_error(ctx, TG_ERR_NULL, "'prompt'", NULL);
    struct {
        double temperature, top_p;
        int64_t top_k, stop, keep;
        const char *msg;
    } bad[] = {
        {-1, 1, 0, -1, 0, "temperature = -1 must be finite and >= 0 (0: greedy"},
        {NAN, 1, 0, -1, 0, "temperature = nan"},
        {INFINITY, 1, 0, -1, 0, "temperature = inf"},
        {1, 0, 0, -1, 0, "top_p = 0 must be in (0, 1]"},
        {1, 1.5, 0, -1, 0, "top_p = 1.5 must be in (0, 1]"},
        {1, NAN, 0, -1, 0, "top_p = nan"},
        {1, 1, -2, -1, 0, "top_k = -2 must be >= 0"},
        {1, 1, 0, 11, 0, "stop = 11 is not a token id in 0..10"},
        {1, 1, 0, -1, 9, "keep = 9 must be in 1..8"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        o = tg_gen_defaults();
        o.temperature = bad[i].temperature, o.top_p = bad[i].top_p, o.top_k = bad[i].top_k;
        o.stop = bad[i].stop, o.keep = bad[i].keep;
        ck_assert_int_eq(tg_gpt_generate(ctx, g, 3, prompt, 4, &o, out), -1);
        tg_test_assert_error(ctx, TG_ERR_VALUE, "tg_gpt_generate", bad[i].msg, NULL);
        if (bad[i].keep) continue; /* keep is generate's own */
        tg_tensor *l = tg_zeros(ctx, TG_F32, 1, (const int64_t[]){11});
        ck_assert_int_eq(tg_sample_token(ctx, l, &o, 0), -1);
        tg_test_assert_error(ctx, TG_ERR_VALUE, "tg_sample_token", bad[i].msg, NULL);
    }
    tg_tensor *l = tg_test_tensor(ctx, TG_F32, 1, (const int64_t[]){3}, (const double[]){0, NAN, 1});
    ck_assert_int_eq(tg_sample_token(ctx, l, NULL, 0), -1);
    tg_test_assert_error(ctx, TG_ERR_VALUE, "the logit of token 1 is nan", NULL);
    l = tg_test_tensor(ctx, TG_F32, 1, (const int64_t[]){2}, (const double[]){-INFINITY, -INFINITY});
    ck_assert_int_eq(tg_sample_token(ctx, l, NULL, 0), -1);
    tg_test_assert_error(ctx, TG_ERR_VALUE, "every logit is -inf", NULL);
    /* the cache: more tokens than the context has room for */
    tg_gpt_cache *cache = tg_gpt_cache_new(ctx, g);
    ck_assert_ptr_nonnull(tg_gpt_cache_forward(ctx, cache, 6, prompt));
    tg_test_assert_fails(ctx, tg_gpt_cache_forward(ctx, cache, 3, prompt), TG_ERR_VALUE, "tg_gpt_cache_forward",
                         "T = 3 new tokens", "holds 6 of its 8 positions", "tg_gpt_cache_clear", NULL);
    tg_gpt_cache_clear(cache);
    ck_assert_ptr_nonnull(tg_gpt_cache_forward(ctx, cache, 8, prompt));
    tg_gpt_cache_free(ctx, cache);
    tg_gpt_free(ctx, g);
}
END_TEST

/* One forward gives logits and loss: tg_gpt_loss_from on tg_gpt_forward's
 * logits is tg_gpt_loss, bit for bit, gradients included. */
START_TEST(test_loss_from_logits) {
    tg_gpt *g = small(TG_GPT_GPT2, TG_F64, 8);
    int64_t idx[16], tgt[16];
    random_tokens(idx, 16, 11, 3);
    random_tokens(tgt, 16, 11, 4);
    tg_params list = {0};
    ck_assert(tg_module_params(ctx, TG_MODULE(g), &list));
    tg_tensor *a = tg_gpt_loss(ctx, g, 2, 8, idx, tgt);
    tg_backward(ctx, a);
    tg_tensor *ga = tg_copy(ctx, list.items[0].value->grad);
    tg_params_zero_grad(ctx, &list);
    tg_tensor *logits = tg_gpt_forward(ctx, g, 2, 8, idx);
    tg_tensor *b = tg_gpt_loss_from(ctx, logits, tgt);
    tg_test_assert_same_bits("loss", b, a);
    tg_backward(ctx, b);
    tg_test_assert_same_bits("wte grad", list.items[0].value->grad, ga);
    tg_test_assert_fails(ctx, tg_gpt_loss_from(ctx, logits, NULL), TG_ERR_NULL, "tg_gpt_loss_from", "targets", NULL);
    tg_params_free(&list);
    tg_gpt_free(ctx, g);
    tg_gpt_free(ctx, NULL);
}
END_TEST

static Suite *make_generate_suite(void) {
    Suite *s = suite_create("generate");
    TCase *tc =
        tg_test_tcase(s, "generate", setup, teardown, test_cache_equals_full_forward, test_cache_longest_windows,
                      test_cache_under_autocast, test_greedy, test_seeds_and_sliding, test_threads, test_top_k_top_p,
                      test_stop_and_arena, test_errors, test_loss_from_logits, NULL);
    tcase_set_timeout(tc, 120);
    return s;
}

int main(void) { return tg_test_run(make_generate_suite()); }

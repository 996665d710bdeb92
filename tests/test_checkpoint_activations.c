/* tg_checkpoint (autograd/checkpoint.c) and tg_gpt's config.checkpoint:
 * gradients bitwise those of the plain run (a function with parameters,
 * a captured tensor and dropout; both GPT archs in float64, float32 and
 * under bfloat16 autocast), the same RNG position afterwards, one record
 * that keeps only its inputs, a lower arena peak for the GPT step, a kept
 * tape walked twice, and the errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static tg_ctx *ctx;
static void setup(void) { ctx = tg_ctx_new(21); }
static void teardown(void) { tg_ctx_free(ctx); }

/* What fn reaches besides its inputs: two parameters and a captured
 * tensor that requires grad. */
typedef struct {
    tg_tensor *w, *b, *captured;
    double p; /* dropout */
} parts;

/* y = dropout(tanh(x w + b) * x + captured, p), x (4, 6), w (6, 6) */
static tg_tensor *fn(tg_ctx *c, tg_tensor *const *in, void *user) {
    const parts *u = user;
    tg_tensor *h = tg_tanh(c, tg_add(c, tg_matmul(c, in[0], u->w), u->b));
    return tg_dropout(c, tg_add(c, tg_mul(c, h, in[0]), u->captured), u->p, true);
}

/* loss = sum(fn(fn(x))^2) with or without checkpoints; the grads of x, w,
 * b and captured's leaf copied out, and the RNG offset after. */
static void run(bool ckpt, tg_tensor *x, parts *u, tg_tensor *leaf, tg_tensor **grads, uint64_t *offset) {
    tg_rng_set_state(ctx, 5, 0);
    tg_zero_grad(ctx, x), tg_zero_grad(ctx, u->w), tg_zero_grad(ctx, u->b), tg_zero_grad(ctx, leaf);
    u->captured = tg_mul_scalar(ctx, leaf, 0.5); /* an intermediate of the caller's */
    tg_tensor *h = x;
    for (int i = 0; i < 2; i++) h = ckpt ? tg_checkpoint(ctx, fn, u, 1, &h) : fn(ctx, &h, u);
    tg_tensor *loss = tg_sum(ctx, tg_mul(ctx, h, h));
    ck_assert_msg(loss != NULL, "%s", tg_error_message(ctx));
    tg_backward(ctx, loss);
    grads[0] = tg_copy(ctx, x->grad), grads[1] = tg_copy(ctx, u->w->grad), grads[2] = tg_copy(ctx, u->b->grad);
    grads[3] = tg_copy(ctx, leaf->grad), grads[4] = tg_copy(ctx, loss);
    uint64_t seed;
    tg_rng_state(ctx, &seed, offset);
}

START_TEST(test_same_gradients) {
    static const tg_dtype dtypes[2] = {TG_F64, TG_F32};
    for (int d = 0; d < 2; d++) {
        const tg_dtype dt = dtypes[d];
        tg_tensor *x = tg_requires_grad(ctx, tg_test_rand(ctx, dt, 2, (const int64_t[]){4, 6}, -1, 1));
        parts u = {.p = 0.25};
        u.w = tg_requires_grad(ctx, tg_persist(ctx, tg_test_rand(ctx, dt, 2, (const int64_t[]){6, 6}, -1, 1)));
        u.b = tg_requires_grad(ctx, tg_persist(ctx, tg_test_rand(ctx, dt, 1, (const int64_t[]){6}, -1, 1)));
        tg_tensor *leaf = tg_requires_grad(ctx, tg_test_rand(ctx, dt, 2, (const int64_t[]){4, 6}, -1, 1));
        tg_tensor *plain[5], *ck[5];
        uint64_t o1, o2;
        run(false, x, &u, leaf, plain, &o1);
        run(true, x, &u, leaf, ck, &o2);
        static const char *names[5] = {"dx", "dw", "db", "d captured's leaf", "loss"};
        for (int i = 0; i < 5; i++) tg_test_assert_same_bits(names[i], ck[i], plain[i]);
        ck_assert_uint_eq(o1, o2);
        ck_assert(tg_get_flat(ctx, ck[3], 0) != 0); /* the captured tensor got its gradient */
        tg_tensor_free(ctx, u.w);
        tg_tensor_free(ctx, u.b);
        tg_ctx_reset(ctx);
    }
}
END_TEST

/* One record keeping only its input; parameters alone (an input that
 * requires no grad) still get their gradients; a kept tape walked twice
 * doubles them as without the checkpoint; no record in no-grad mode. */
START_TEST(test_record_and_modes) {
    parts u = {.p = 0};
    u.w = tg_requires_grad(ctx, tg_persist(ctx, tg_test_rand(ctx, TG_F64, 2, (const int64_t[]){6, 6}, -1, 1)));
    u.b = tg_requires_grad(ctx, tg_persist(ctx, tg_test_rand(ctx, TG_F64, 1, (const int64_t[]){6}, -1, 1)));
    tg_tensor *dw[2];
    for (int ck = 0; ck < 2; ck++) {
        tg_ctx_reset(ctx);
        tg_zero_grad(ctx, u.w), tg_zero_grad(ctx, u.b);
        tg_rng_set_state(ctx, 1, 0);
        tg_tensor *x = tg_test_rand(ctx, TG_F64, 2, (const int64_t[]){4, 6}, -1, 1); /* no grad */
        u.captured = tg_zeros(ctx, TG_F64, 2, (const int64_t[]){4, 6});
        tg_tensor *y = ck ? tg_checkpoint(ctx, fn, &u, 1, &x) : fn(ctx, &x, &u);
        if (ck) {
            ck_assert_int_eq(tg_tape_size(ctx), 1);
            /* x by pointer; the parameters are not activations */
            const size_t saved = tg_tape_saved_bytes(ctx);
            ck_assert_msg(saved >= 4 * 6 * 8 && saved <= 4 * 6 * 8 + 64, "saved %zu bytes", saved);
        }
        tg_tensor *l = tg_sum(ctx, tg_mul(ctx, y, y));
        tg_backward_ex(ctx, l, NULL, true);
        tg_backward_ex(ctx, l, NULL, false);
        ck_assert_msg(tg_ok(ctx), "%s", tg_error_message(ctx));
        dw[ck] = tg_persist(ctx, u.w->grad);
    }
    tg_test_assert_same_bits("dw after two backwards of a kept tape", dw[1], dw[0]);
    ck_assert(tg_get_flat(ctx, dw[1], 0) != 0);
    bool was = tg_set_grad_enabled(ctx, false);
    tg_tensor *x = tg_test_rand(ctx, TG_F64, 2, (const int64_t[]){4, 6}, -1, 1);
    u.captured = tg_zeros(ctx, TG_F64, 2, (const int64_t[]){4, 6});
    const int64_t records = tg_tape_size(ctx);
    ck_assert_ptr_nonnull(tg_checkpoint(ctx, fn, &u, 1, &x));
    ck_assert_int_eq(tg_tape_size(ctx), records);
    tg_set_grad_enabled(ctx, was);
    for (int i = 0; i < 2; i++) tg_tensor_free(ctx, dw[i]);
    tg_tensor_free(ctx, u.w);
    tg_tensor_free(ctx, u.b);
}
END_TEST

/* tg_grad (no create_graph) through a checkpoint: the input's gradient
 * is the plain run's, and the parameters' grads are left as they were. */
START_TEST(test_tg_grad) {
    parts u = {.p = 0};
    u.w = tg_requires_grad(ctx, tg_persist(ctx, tg_test_rand(ctx, TG_F64, 2, (const int64_t[]){6, 6}, -1, 1)));
    u.b = tg_requires_grad(ctx, tg_persist(ctx, tg_test_rand(ctx, TG_F64, 1, (const int64_t[]){6}, -1, 1)));
    tg_tensor *x = tg_requires_grad(ctx, tg_test_rand(ctx, TG_F64, 2, (const int64_t[]){4, 6}, -1, 1));
    u.captured = tg_zeros(ctx, TG_F64, 2, (const int64_t[]){4, 6});
    tg_tensor *g[2];
    for (int ck = 0; ck < 2; ck++) {
        tg_tensor *y = ck ? tg_checkpoint(ctx, fn, &u, 1, &x) : fn(ctx, &x, &u);
        ck_assert(tg_grad(ctx, tg_sum(ctx, tg_mul(ctx, y, y)), NULL, 1, &x, &g[ck], false));
    }
    tg_test_assert_same_bits("dx by tg_grad", g[1], g[0]);
    ck_assert(tg_get_flat(ctx, u.w->grad, 0) == 0 && tg_get_flat(ctx, x->grad, 0) == 0);
    tg_tensor_free(ctx, u.w);
    tg_tensor_free(ctx, u.b);
}
END_TEST

static tg_tensor *returns_null(tg_ctx *c, tg_tensor *const *in, void *user) {
    (void)c, (void)in, (void)user;
    return NULL;
}

START_TEST(test_errors) {
    tg_tensor *x = tg_requires_grad(ctx, tg_test_rand(ctx, TG_F64, 1, (const int64_t[]){3}, -1, 1));
    tg_test_assert_fails(ctx, tg_checkpoint(ctx, NULL, NULL, 1, &x), TG_ERR_NULL, "tg_checkpoint", "fn = NULL", NULL);
    tg_test_assert_fails(ctx, tg_checkpoint(ctx, returns_null, NULL, 1, &x), TG_ERR_STATE, "tg_checkpoint",
                         "fn returned NULL without setting an error", NULL);
    ck_assert_int_eq(tg_tape_size(ctx), 0);
    /* no double backward through it */
    parts u = {.p = 0};
    u.w = tg_requires_grad(ctx, tg_persist(ctx, tg_test_rand(ctx, TG_F64, 2, (const int64_t[]){3, 3}, -1, 1)));
    u.b = tg_requires_grad(ctx, tg_persist(ctx, tg_test_rand(ctx, TG_F64, 1, (const int64_t[]){3}, -1, 1)));
    u.captured = tg_zeros(ctx, TG_F64, 2, (const int64_t[]){1, 3});
    tg_tensor *x2 = tg_requires_grad(ctx, tg_test_rand(ctx, TG_F64, 2, (const int64_t[]){1, 3}, -1, 1));
    tg_tensor *l = tg_sum(ctx, tg_checkpoint(ctx, fn, &u, 1, &x2));
    tg_tensor *g = NULL;
    ck_assert(!tg_grad(ctx, l, NULL, 1, &x2, &g, true));
    tg_test_assert_error(ctx, TG_ERR_STATE, "'checkpoint' cannot be differentiated twice", NULL);
    tg_tensor_free(ctx, u.w);
    tg_tensor_free(ctx, u.b);
}
END_TEST

/* The GPT step with config.checkpoint: loss and every parameter's grad the
 * same bits as without; the tape saves less and the arena peaks lower. */
static void gpt_grads(tg_gpt_arch arch, tg_dtype dtype, tg_dtype autocast, bool ckpt, tg_tensor ***grads, int *count,
                      size_t *saved, size_t *peak) {
    tg_ctx *c = ctx;
    tg_ctx_reset(c);
    tg_rng_seed(c, 9);
    tg_ctx_set_autocast(c, autocast);
    tg_gpt_config cfg = tg_gpt_defaults(arch);
    cfg.vocab_size = 13, cfg.context = 16, cfg.n_layer = 3, cfg.n_head = 2, cfg.n_embd = 16, cfg.dtype = dtype;
    cfg.checkpoint = ckpt;
    tg_gpt *g = tg_gpt_new(c, NULL, &cfg);
    ck_assert_msg(g != NULL, "%s", tg_error_message(c));
    int64_t idx[32], tgt[32];
    for (int i = 0; i < 32; i++) idx[i] = (i * 7 + 3) % 13, tgt[i] = (i * 5 + 1) % 13;
    tg_params list = {0};
    tg_module_params(c, TG_MODULE(g), &list);
    tg_ctx_reset(c);
    tg_tensor *loss = tg_gpt_loss(c, g, 2, 16, idx, tgt);
    *saved = tg_tape_saved_bytes(c);
    tg_backward(c, loss);
    *peak = tg_arena_peak(c);
    ck_assert_msg(tg_ok(c), "%s", tg_error_message(c));
    *count = list.count + 1;
    *grads = tg_test_malloc((size_t)*count * sizeof **grads);
    for (int i = 0; i < list.count; i++) (*grads)[i] = tg_persist(c, list.items[i].value->grad);
    (*grads)[list.count] = tg_persist(c, loss);
    tg_params_free(&list);
    tg_gpt_free(c, g);
    tg_ctx_set_autocast(c, TG_F32);
}

START_TEST(test_gpt_same_gradients) {
    static const struct {
        tg_dtype dtype, autocast;
    } modes[3] = {{TG_F64, TG_F32}, {TG_F32, TG_F32}, {TG_F32, TG_BF16}};
    for (int a = 0; a < 2; a++)
        for (int m = 0; m < 3; m++) {
            tg_tensor **plain, **ck;
            int n1, n2;
            size_t s1, s2, p1, p2;
            const tg_gpt_arch arch = a ? TG_GPT_GPT2 : TG_GPT_LLAMA;
            gpt_grads(arch, modes[m].dtype, modes[m].autocast, false, &plain, &n1, &s1, &p1);
            gpt_grads(arch, modes[m].dtype, modes[m].autocast, true, &ck, &n2, &s2, &p2);
            ck_assert_int_eq(n1, n2);
            for (int i = 0; i < n1; i++) {
                char what[64];
                snprintf(what, sizeof what, "%s mode %d grad %d", a ? "gpt2" : "llama", m, i);
                tg_test_assert_same_bits(what, ck[i], plain[i]);
                tg_tensor_free(ctx, ck[i]);
                tg_tensor_free(ctx, plain[i]);
            }
            ck_assert_msg(s2 < s1 / 2, "saved %zu with checkpoints, %zu without", s2, s1);
            ck_assert_msg(p2 < p1, "arena peak %zu with checkpoints, %zu without", p2, p1);
            free(plain);
            free(ck);
        }
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("checkpoint_activations");
    TCase *tc = tg_test_tcase(s, "checkpoint_activations", setup, teardown, test_same_gradients, test_record_and_modes,
                              test_tg_grad, test_errors, test_gpt_same_gradients, NULL);
    tcase_set_timeout(tc, 120);
    return s;
}

int main(void) { return tg_test_run(make_suite()); }

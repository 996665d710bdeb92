/* Backward's memory: the gradient of an intermediate tensor is released
 * once the walk is past the record that reads it (its producer), and each
 * record's arena scratch is given back when its backward returns, so the
 * arena a backward adds is a few gradients, not one per record
 * (autograd/tape.c, tensor/ctx.c). The results must not change: each test
 * compares with a backward that keeps the tape (keep_tape=true releases
 * nothing), bit for bit, and the peak (tg_arena_peak) is checked against
 * the gradient's size. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tapegrad/op.h"
#include "testutil.h"

static tg_ctx *ctx;
static void setup(void) { ctx = tg_ctx_new(29); }
static void teardown(void) { tg_ctx_free(ctx); }

enum { N = 1 << 14, DEPTH = 50 };

/* A chain of DEPTH ops on x (N floats): tanh, scale, add a constant, in
 * turn (tanh saves its output, so the forward holds DEPTH tensors), then
 * the sum. */
static tg_tensor *chain_mid(tg_tensor *x, tg_tensor **mid) {
    tg_tensor *h = x;
    for (int k = 0; k < DEPTH && h; k++) {
        h = k % 3 == 0 ? tg_tanh(ctx, h) : k % 3 == 1 ? tg_mul_scalar(ctx, h, 1.5) : tg_add_scalar(ctx, h, 0.25);
        if (k == DEPTH / 2 && mid) *mid = h;
    }
    return tg_sum(ctx, h);
}
static tg_tensor *chain(tg_tensor *x) { return chain_mid(x, NULL); }

/* x's gradient after one backward of the chain, as a persistent copy, and
 * the arena's growth during the backward (its peak minus the arena in use
 * when it started). */
static tg_tensor *chain_grad(tg_tensor *x, bool keep_tape, size_t *growth) {
    tg_zero_grad(ctx, x);
    tg_tensor *loss = chain(x);
    ck_assert_msg(loss != NULL, "%s", tg_error_message(ctx));
    size_t before = tg_arena_used(ctx);
    ck_assert_uint_eq(tg_arena_peak(ctx), before); /* nothing was released in the forward */
    tg_backward_ex(ctx, loss, NULL, keep_tape);
    ck_assert_msg(tg_ok(ctx), "%s", tg_error_message(ctx));
    *growth = tg_arena_peak(ctx) - before;
    tg_tensor *g = tg_persist(ctx, tg_copy(ctx, x->grad));
    tg_ctx_reset(ctx);
    return g;
}

START_TEST(test_chain_backward_holds_a_few_gradients) {
    tg_tensor *x = tg_requires_grad(ctx, tg_persist(ctx, tg_randn(ctx, TG_F32, TG_SHAPE(N), 0, 1)));
    const size_t grad = (size_t)N * sizeof(float);
    size_t kept, released;
    tg_tensor *g_kept = chain_grad(x, true, &kept);
    tg_tensor *g_released = chain_grad(x, false, &released);
    /* keeping the tape keeps every intermediate's gradient: the peak grows
     * by one per record, which is what the released walk avoids */
    ck_assert_msg(kept >= (DEPTH - 1) * grad, "kept tape: backward grew the arena by %zu bytes", kept);
    ck_assert_msg(released <= 3 * grad, "backward grew the arena by %zu bytes, %.1f gradients of %zu", released,
                  (double)released / (double)grad, grad);
    tg_test_assert_same_bits("x.grad, released vs kept", g_released, g_kept);
    /* and again: the same bits and growth; once warm (checked builds keep
     * a step's memory out of the next one: two steps), no new memory */
    size_t cap = 0;
    for (int step = 0; step < 4; step++) {
        size_t again;
        tg_tensor *g_again = chain_grad(x, false, &again);
        tg_test_assert_same_bits("x.grad, a later step", g_again, g_kept);
        tg_tensor_free(ctx, g_again);
        ck_assert_uint_eq(again, released);
        if (step == 2) cap = tg_arena_capacity(ctx);
        if (step == 3) ck_assert_uint_eq(tg_arena_capacity(ctx), cap);
    }
    tg_tensor_free(ctx, g_kept);
    tg_tensor_free(ctx, g_released);
    tg_tensor_free(ctx, x);
}
END_TEST

/* tg_grad without create_graph walks like backward and gives back each
 * intermediate's gradient as it goes (autograd/grad_graph.c): a step that
 * runs many of them (the second-order gradient check runs thousands) holds
 * a few gradients per call, not one per record. The requested inputs keep
 * theirs -- an intermediate one too -- with the bits of a kept tape. */
START_TEST(test_grad_without_graph_holds_a_few_gradients) {
    tg_tensor *x = tg_requires_grad(ctx, tg_persist(ctx, tg_randn(ctx, TG_F32, TG_SHAPE(N), 0, 1)));
    const size_t grad = (size_t)N * sizeof(float);
    tg_tensor *mid = NULL, *g[2] = {0};
    tg_tensor *loss = chain_mid(x, &mid);
    ck_assert_msg(loss != NULL && mid != NULL, "%s", tg_error_message(ctx));
    const size_t before = tg_arena_used(ctx);
    ck_assert(tg_grad(ctx, loss, NULL, 2, (tg_tensor *[]){x, mid}, g, false));
    const size_t growth = tg_arena_peak(ctx) - before;
    ck_assert_msg(growth <= 4 * grad, "tg_grad grew the arena by %zu bytes, %.1f gradients of %zu", growth,
                  (double)growth / (double)grad, grad);
    /* again, nine times in the same step: each call adds its two results
     * and a little scratch (not the DEPTH gradients of its records) */
    for (int k = 0; k < 9; k++) {
        tg_tensor *again[2];
        ck_assert(tg_grad(ctx, loss, NULL, 2, (tg_tensor *[]){x, mid}, again, false));
        tg_test_assert_same_bits("x's gradient, a later tg_grad", again[0], g[0]);
    }
    const size_t ten = tg_arena_peak(ctx) - before;
    ck_assert_msg(ten <= growth + 9 * 3 * grad, "ten tg_grad calls grew the arena by %zu bytes (one: %zu)", ten,
                  growth);
    tg_tensor *gx = tg_persist(ctx, tg_copy(ctx, g[0])), *gmid = tg_persist(ctx, tg_copy(ctx, g[1]));
    tg_ctx_reset(ctx);
    /* the kept tape's gradients, bit for bit */
    tg_zero_grad(ctx, x);
    loss = chain_mid(x, &mid);
    tg_backward_ex(ctx, loss, NULL, true);
    ck_assert_msg(tg_ok(ctx) && mid->grad != NULL, "%s", tg_error_message(ctx));
    tg_test_assert_same_bits("x's gradient, tg_grad vs a kept tape", gx, x->grad);
    tg_test_assert_same_bits("mid's gradient, tg_grad vs a kept tape", gmid, mid->grad);
    tg_tensor_free(ctx, gx);
    tg_tensor_free(ctx, gmid);
    tg_tensor_free(ctx, x);
}
END_TEST

/* An MLP with Linear layers (GEMM workspaces: scratch given back after each
 * product and each record), a residual (x used twice: its gradient gathers
 * two contributions before its producer runs) and cross-entropy; every
 * parameter's gradient is bitwise that of a kept tape, at 1 and 2 threads. */
static void mlp_grads(tg_linear *l1, tg_linear *l2, tg_tensor *x, const int64_t *tgt, bool keep_tape,
                      tg_tensor *out[4]) {
    tg_tensor *p[4] = {l1->weight, l1->bias, l2->weight, l2->bias};
    for (int i = 0; i < 4; i++) tg_zero_grad(ctx, p[i]);
    tg_tensor *h = tg_gelu(ctx, tg_linear_forward(ctx, l1, x), true);
    h = tg_add(ctx, h, tg_tanh(ctx, h));
    tg_tensor *loss = tg_cross_entropy(ctx, tg_linear_forward(ctx, l2, h), tgt, NULL);
    ck_assert_msg(loss != NULL, "%s", tg_error_message(ctx));
    tg_backward_ex(ctx, loss, NULL, keep_tape);
    ck_assert_msg(tg_ok(ctx), "%s", tg_error_message(ctx));
    /* intermediates' gradients: kept with the tape, released (NULL) without */
    ck_assert(keep_tape ? h->grad != NULL : h->grad == NULL);
    ck_assert(loss->grad != NULL); /* the seed stays */
    for (int i = 0; i < 4; i++) out[i] = tg_persist(ctx, tg_copy(ctx, p[i]->grad));
    tg_ctx_reset(ctx);
}

START_TEST(test_mlp_same_bits_released_or_kept) {
    enum { B = 48, IN = 40, HID = 96, OUT = 10 };
    tg_linear *l1 = tg_linear_new(ctx, "l1", IN, HID, true, TG_F32);
    tg_linear *l2 = tg_linear_new(ctx, "l2", HID, OUT, true, TG_F32);
    tg_tensor *x = tg_persist(ctx, tg_randn(ctx, TG_F32, TG_SHAPE(B, IN), 0, 1));
    int64_t tgt[B];
    for (int i = 0; i < B; i++) tgt[i] = (i * 7) % OUT;
    tg_tensor *kept[4], *got[4];
    tg_set_threads(ctx, 1);
    mlp_grads(l1, l2, x, tgt, true, kept);
    for (int threads = 1; threads <= 2; threads++) {
        tg_set_threads(ctx, threads);
        mlp_grads(l1, l2, x, tgt, false, got);
        for (int i = 0; i < 4; i++) {
            char what[64];
            snprintf(what, sizeof what, "parameter %d's grad at %d threads", i, threads);
            tg_test_assert_same_bits(what, got[i], kept[i]);
            tg_tensor_free(ctx, got[i]);
        }
    }
    for (int i = 0; i < 4; i++) tg_tensor_free(ctx, kept[i]);
    tg_tensor_free(ctx, x);
    tg_module_free(ctx, TG_MODULE(l1));
    tg_module_free(ctx, TG_MODULE(l2));
}
END_TEST

/* A custom op whose backward keeps its output's gradient (which it must
 * not: it is released when the backward returns). */
static tg_tensor *stashed;
static tg_tensor *ident_fw(tg_ctx *c, tg_node *node, tg_tensor *const *in, void *user) {
    (void)node, (void)user;
    return tg_mul_scalar(c, in[0], 1.0);
}
static void ident_bw(tg_ctx *c, tg_node *node) {
    stashed = tg_node_grad_output(node);
    tg_node_accumulate(c, node, 0, stashed);
}
static const tg_op_def IDENT = {.name = "ident", .forward = ident_fw, .backward = ident_bw};

START_TEST(test_released_gradient_is_stale) {
    tg_tensor *x = tg_requires_grad(ctx, tg_randn(ctx, TG_F32, TG_SHAPE(4, 3), 0, 1));
    tg_tensor *y = tg_op_apply(ctx, &IDENT, 1, &x, NULL);
    tg_tensor *loss = tg_sum(ctx, tg_tanh(ctx, y));
    ck_assert_msg(loss != NULL, "%s", tg_error_message(ctx));
    tg_backward(ctx, loss);
    ck_assert_msg(tg_ok(ctx), "%s", tg_error_message(ctx));
    ck_assert(y->grad == NULL && x->grad != NULL);
    tg_test_assert_fails(ctx, tg_add(ctx, stashed, x), TG_ERR_STATE, "tg_add", "argument 'a'", "backward released",
                         "keep_tape", NULL);
}
END_TEST

Suite *make_backward_memory_suite(void) {
    return tg_test_suite("backward_memory", setup, teardown, test_chain_backward_holds_a_few_gradients,
                         test_mlp_same_bits_released_or_kept, test_released_gradient_is_stale,
                         test_grad_without_graph_holds_a_few_gradients, NULL);
}

int main(void) { return tg_test_run(make_backward_memory_suite()); }

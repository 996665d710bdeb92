/* Weight tying (GPT-2's wte, used again as the output projection): one
 * table W (V, C) is the embedding and, transposed, the unembedding,
 *   h = embedding(W, idx),  logits = f(h) W^T  (tg_linear_fused(f(h), W, NULL)).
 * Nothing special is needed: W is one tensor used by two ops, so backward
 * adds both ops' gradients into W.grad. The test compares with two
 * separate copies of W, one per use, whose gradients are added by hand:
 * the same loss and the same sum, in float64 and float32, with indices
 * repeated (so the embedding's scatter-add accumulates too) and a second
 * step (leaves' gradients accumulate across backwards). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static tg_ctx *ctx;
static void setup(void) { ctx = tg_ctx_new(17); }
static void teardown(void) { tg_ctx_free(ctx); }

enum { V = 11, C = 6, N = 9 };
static const int64_t IDX[N] = {3, 0, 7, 3, 10, 5, 3, 0, 1};
static const int64_t TGT[N] = {0, 7, 3, 3, 2, 10, 4, 9, 1};

/* The loss of a tiny tied language model: cross-entropy of
 * tanh(embedding(w_in, IDX)) w_out^T against TGT. */
static tg_tensor *loss_of(tg_tensor *w_in, tg_tensor *w_out) {
    tg_tensor *h = tg_tanh(ctx, tg_embedding(ctx, w_in, TG_SHAPE(N), IDX));
    tg_tensor *logits = tg_linear_fused(ctx, h, w_out, NULL);
    return tg_cross_entropy(ctx, logits, TGT, NULL);
}

static void check(tg_dtype dt, double tol) {
    tg_tensor *w = tg_requires_grad(ctx, tg_persist(ctx, tg_randn(ctx, dt, TG_SHAPE(V, C), 0, 1)));
    tg_tensor *w_in = tg_requires_grad(ctx, tg_persist(ctx, tg_copy(ctx, w)));
    tg_tensor *w_out = tg_requires_grad(ctx, tg_persist(ctx, tg_copy(ctx, w)));
    for (int step = 0; step < 2; step++) {
        tg_tensor *tied = loss_of(w, w);
        ck_assert_msg(tied != NULL, "%s", tg_error_message(ctx));
        tg_backward(ctx, tied);
        tg_tensor *sep = loss_of(w_in, w_out);
        tg_backward(ctx, sep);
        ck_assert_msg(tg_ok(ctx), "%s", tg_error_message(ctx));
        tg_test_assert_same_bits("loss", tied, sep);
        /* W.grad = (embedding's) + (projection's), summed over the steps */
        tg_tensor *sum = tg_add(ctx, w_in->grad, w_out->grad);
        tg_test_assert_close_tensors(ctx, "tied grad", w->grad, sum, tol, tol);
        /* both uses contribute: neither part alone is the whole */
        ck_assert(tg_test_max_abs_diff(ctx, w->grad, w_in->grad) > 1e-3);
        ck_assert(tg_test_max_abs_diff(ctx, w->grad, w_out->grad) > 1e-3);
        tg_ctx_reset(ctx);
    }
    tg_tensor_free(ctx, w);
    tg_tensor_free(ctx, w_in);
    tg_tensor_free(ctx, w_out);
}

START_TEST(test_tied_f64) { check(TG_F64, 1e-14); }
END_TEST

START_TEST(test_tied_f32) { check(TG_F32, 1e-6); }
END_TEST

Suite *make_weight_tying_suite(void) {
    return tg_test_suite("weight_tying", setup, teardown, test_tied_f64, test_tied_f32, NULL);
}

int main(void) { return tg_test_run(make_weight_tying_suite()); }

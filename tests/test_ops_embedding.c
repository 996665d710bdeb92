/* tg_embedding: row lookup forward by hand, scatter-add backward with
 * repeated indices (by hand and by finite differences), the indices copied
 * at the forward, thread-count independence and the error paths. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static tg_ctx *ctx;

static void setup(void) { ctx = tg_ctx_new(99); }
static void teardown(void) { tg_ctx_free(ctx); }

START_TEST(test_forward_by_hand) {
    for (int t = 0; t < 2; t++) {
        tg_dtype dt = t ? TG_F32 : TG_F64;
        /* W = [[0,1,2],[3,4,5],[6,7,8],[9,10,11]] */
        tg_tensor *w = tg_reshape(ctx, tg_arange(ctx, dt, 0, 12, 1), TG_SHAPE(4, 3));
        tg_tensor *y = tg_embedding(ctx, w, TG_SHAPE(2, 2), (int64_t[]){3, 0, 3, 1});
        ck_assert_ptr_nonnull(y);
        ck_assert_int_eq(y->dtype, dt);
        ck_assert_int_eq(y->ndim, 3);
        ck_assert_int_eq(y->shape[0], 2);
        ck_assert_int_eq(y->shape[1], 2);
        ck_assert_int_eq(y->shape[2], 3);
        tg_test_assert_close(ctx, "embedding", y, (double[]){9, 10, 11, 0, 1, 2, 9, 10, 11, 3, 4, 5}, 12, 0, 0);
        /* 0-d indices: one row, shape (D) */
        tg_tensor *r = tg_embedding(ctx, w, 0, NULL, (int64_t[]){2});
        ck_assert_int_eq(r->ndim, 1);
        tg_test_assert_close(ctx, "embedding 0-d", r, (double[]){6, 7, 8}, 3, 0, 0);
        /* no indices: shape (0, D) */
        tg_tensor *e = tg_embedding(ctx, w, TG_SHAPE(0), NULL);
        ck_assert_ptr_nonnull(e);
        ck_assert_int_eq(e->numel, 0);
    }
}
END_TEST

START_TEST(test_backward_repeated_by_hand) {
    tg_tensor *w = tg_requires_grad(ctx, tg_zeros(ctx, TG_F64, TG_SHAPE(5, 2)));
    int64_t idx[6] = {1, 4, 1, 1, 0, 4};
    tg_tensor *y = tg_embedding(ctx, w, TG_SHAPE(2, 3), idx);
    idx[0] = 2; /* the op copied the indices: changing them now has no effect */
    /* dy[i, :] = (i + 1, 10 (i + 1)) */
    double g[12];
    for (int i = 0; i < 6; i++) g[2 * i] = i + 1, g[2 * i + 1] = 10 * (i + 1);
    tg_backward_ex(ctx, y, tg_from_buffer(ctx, TG_F64, TG_SHAPE(2, 3, 2), g), false);
    ck_assert_msg(tg_ok(ctx), "%s", tg_error_message(ctx));
    /* row 0: i=4 -> 5; row 1: i=0,2,3 -> 1+3+4 = 8; row 4: i=1,5 -> 2+6 = 8 */
    tg_test_assert_close(ctx, "dW", w->grad, (double[]){5, 50, 8, 80, 0, 0, 0, 0, 8, 80}, 10, 0, 0);
    ck_assert_uint_eq(tg_tape_saved_bytes(ctx), 6 * sizeof(int64_t));
}
END_TEST

static tg_tensor *f_emb_mm(tg_ctx *c, tg_tensor *const *in, void *u) {
    const int64_t *idx = u;
    /* embedding followed by a matmul, so dy differs from row to row */
    tg_tensor *e = tg_embedding(c, in[0], TG_SHAPE(7), idx);
    return tg_matmul(c, e, in[1]);
}

START_TEST(test_backward_fd) {
    tg_tensor *in[2] = {tg_requires_grad(ctx, tg_randn(ctx, TG_F64, TG_SHAPE(5, 3), 0, 1)),
                        tg_requires_grad(ctx, tg_randn(ctx, TG_F64, TG_SHAPE(3, 2), 0, 1))};
    int64_t idx[7] = {4, 0, 4, 2, 4, 0, 1};
    tg_test_op_gradcheck(ctx, "embedding + matmul", f_emb_mm, idx, 2, in);
}
END_TEST

START_TEST(test_threads_bitwise) {
    enum { V = 50, D = 96, N = 3000 };
    int64_t *idx = tg_test_malloc(N * sizeof *idx);
    for (int i = 0; i < N; i++) idx[i] = (i * 7 + i / 13) % V;
    tg_tensor *w = tg_requires_grad(ctx, tg_randn(ctx, TG_F32, TG_SHAPE(V, D), 0, 1));
    tg_tensor *dy = tg_randn(ctx, TG_F32, TG_SHAPE(N, D), 0, 1);
    tg_tensor *g[2];
    for (int r = 0; r < 2; r++) {
        tg_set_threads(ctx, r + 1);
        tg_zero_grad(ctx, w);
        tg_backward_ex(ctx, tg_embedding(ctx, w, TG_SHAPE(N), idx), dy, false);
        g[r] = tg_copy(ctx, w->grad);
    }
    ck_assert(tg_ok(ctx));
    tg_test_assert_same_bits("1 vs 2 threads", g[0], g[1]);
    /* and the sums are right: row v gets the dy rows with idx = v */
    double worst = 0;
    for (int64_t v = 0; v < V; v++)
        for (int64_t d = 0; d < D; d++) {
            double s = 0;
            for (int64_t i = 0; i < N; i++)
                if (idx[i] == v) s += tg_get_flat(ctx, dy, i * D + d);
            double e = fabs(s - tg_get_flat(ctx, g[0], v * D + d));
            if (e > worst) worst = e;
        }
    ck_assert_msg(worst < 1e-4, "worst %g", worst);
    free(idx);
}
END_TEST

START_TEST(test_errors) {
    tg_tensor *w = tg_zeros(ctx, TG_F32, TG_SHAPE(10, 4));
    tg_test_assert_fails(ctx, tg_embedding(ctx, w, TG_SHAPE(2, 2), (int64_t[]){1, 2, 10, 3}), TG_ERR_INDEX,
                         "tg_embedding", "indices[2] = 10", "0..9", "(10, 4)", NULL);
    tg_test_assert_fails(ctx, tg_embedding(ctx, w, TG_SHAPE(3), (int64_t[]){0, -1, 3}), TG_ERR_INDEX, "tg_embedding",
                         "indices[1] = -1", NULL);
    tg_test_assert_fails(ctx, tg_embedding(ctx, tg_zeros(ctx, TG_F32, TG_SHAPE(10)), TG_SHAPE(1), (int64_t[]){0}),
                         TG_ERR_SHAPE, "tg_embedding", "(10,)", NULL);
    tg_test_assert_fails(ctx, tg_embedding(ctx, w, TG_SHAPE(1, 1, 1, 1, 1, 1, 1, 1), (int64_t[]){0}), TG_ERR_SHAPE,
                         "tg_embedding", "ndim 8", NULL);
    tg_test_assert_fails(ctx, tg_embedding(ctx, w, TG_SHAPE(2, -1), (int64_t[]){0}), TG_ERR_SHAPE, "tg_embedding",
                         "negative", NULL);
    tg_test_assert_fails(ctx, tg_embedding(ctx, w, TG_SHAPE(2), NULL), TG_ERR_NULL, "tg_embedding", "indices", NULL);
    tg_test_assert_fails(ctx, tg_embedding(ctx, NULL, TG_SHAPE(1), (int64_t[]){0}), TG_ERR_NULL, "tg_embedding",
                         "weight", NULL);
}
END_TEST

Suite *make_ops_embedding_suite(void) {
    return tg_test_suite("ops_embedding", setup, teardown, test_forward_by_hand, test_backward_repeated_by_hand,
                         test_backward_fd, test_threads_bitwise, test_errors, NULL);
}

int main(void) { return tg_test_run(make_ops_embedding_suite()); }

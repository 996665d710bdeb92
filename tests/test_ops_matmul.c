/* tg_matmul: 2-D, batched (3-D and any number of leading dims) and shared
 * right operand; forward against a naive triple loop written here,
 * backward against central finite differences (small shapes) and against
 * the naive formulas da = dc b^T, db = a^T dc (shapes large enough for
 * the GEMM's packed path); thread-count independence; every error path. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static tg_ctx *ctx;

static void setup(void) { ctx = tg_ctx_new(42); }
static void teardown(void) { tg_ctx_free(ctx); }

/* c[b] = a[b] bm[b] by the textbook loop, in double. sb = 0 shares b. */
static void naive_mm(double *c, const tg_tensor *a, const tg_tensor *b, int64_t batch, int64_t M, int64_t K, int64_t N,
                     int64_t sb) {
    for (int64_t t = 0; t < batch; t++)
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double s = 0;
                for (int64_t k = 0; k < K; k++)
                    s += tg_get_flat(ctx, a, t * M * K + i * K + k) * tg_get_flat(ctx, b, t * sb + k * N + j);
                c[t * M * N + i * N + j] = s;
            }
}

static void check_forward(tg_dtype dt, int64_t batch, int64_t M, int64_t K, int64_t N, bool shared, double tol) {
    tg_tensor *a, *b;
    if (batch == 0) {
        a = tg_randn(ctx, dt, TG_SHAPE(M, K), 0, 1);
        b = tg_randn(ctx, dt, TG_SHAPE(K, N), 0, 1);
    } else {
        a = tg_randn(ctx, dt, TG_SHAPE(batch, M, K), 0, 1);
        b = shared ? tg_randn(ctx, dt, TG_SHAPE(K, N), 0, 1) : tg_randn(ctx, dt, TG_SHAPE(batch, K, N), 0, 1);
    }
    tg_tensor *c = tg_matmul(ctx, a, b);
    ck_assert_msg(c != NULL, "%s", tg_error_message(ctx));
    int64_t nb = batch ? batch : 1;
    ck_assert_int_eq(c->ndim, batch ? 3 : 2);
    ck_assert_int_eq(c->shape[c->ndim - 2], M);
    ck_assert_int_eq(c->shape[c->ndim - 1], N);
    ck_assert_int_eq(c->dtype, dt);
    double *ref = tg_test_malloc(sizeof *ref * (size_t)(nb * M * N + 1));
    naive_mm(ref, a, b, nb, M, K, N, shared || batch == 0 ? 0 : K * N);
    /* tolerance relative to sqrt(K): sums of K products of N(0,1) numbers */
    tg_test_assert_close(ctx, "matmul", c, ref, nb * M * N, tol * sqrt((double)K), tol * sqrt((double)K));
    free(ref);
    ck_assert(!c->requires_grad); /* no input required grad: nothing recorded */
    ck_assert_int_eq(tg_tape_size(ctx), 0);
}

START_TEST(test_forward_2d) {
    check_forward(TG_F64, 0, 3, 5, 4, false, 1e-13);
    check_forward(TG_F64, 0, 1, 7, 1, false, 1e-13);
    check_forward(TG_F64, 0, 70, 90, 60, false, 1e-13); /* packed path */
    check_forward(TG_F32, 0, 3, 5, 4, false, 1e-6);
    check_forward(TG_F32, 0, 65, 130, 33, false, 1e-6);
}
END_TEST

START_TEST(test_forward_batched) {
    check_forward(TG_F64, 3, 4, 6, 5, false, 1e-13);
    check_forward(TG_F64, 2, 50, 60, 70, false, 1e-13);
    check_forward(TG_F32, 4, 2, 3, 2, false, 1e-6);
}
END_TEST

START_TEST(test_forward_shared_b) {
    check_forward(TG_F64, 2, 3, 4, 5, true, 1e-13);
    check_forward(TG_F64, 5, 20, 64, 48, true, 1e-13);
    check_forward(TG_F32, 3, 1, 8, 2, true, 1e-6);
}
END_TEST

/* By hand: [[1,2,3],[4,5,6]] [[7,8],[9,10],[11,12]] = [[58,64],[139,154]]. */
START_TEST(test_forward_by_hand) {
    tg_tensor *a = tg_from_buffer(ctx, TG_F32, TG_SHAPE(2, 3), (float[]){1, 2, 3, 4, 5, 6});
    tg_tensor *b = tg_from_buffer(ctx, TG_F32, TG_SHAPE(3, 2), (float[]){7, 8, 9, 10, 11, 12});
    tg_tensor *c = tg_matmul(ctx, a, b);
    tg_test_assert_close(ctx, "c", c, (double[]){58, 64, 139, 154}, 4, 0, 0);
}
END_TEST

START_TEST(test_empty_inner_dim) {
    tg_tensor *a = tg_zeros(ctx, TG_F64, TG_SHAPE(2, 0));
    tg_tensor *b = tg_zeros(ctx, TG_F64, TG_SHAPE(0, 3));
    tg_tensor *c = tg_matmul(ctx, a, b);
    ck_assert_ptr_nonnull(c);
    tg_test_assert_close(ctx, "c", c, (double[]){0, 0, 0, 0, 0, 0}, 6, 0, 0);
}
END_TEST

/* ---- backward vs finite differences ------------------------------------ */

static tg_tensor *f_matmul(tg_ctx *c, tg_tensor *const *in, void *user) {
    (void)user;
    return tg_matmul(c, in[0], in[1]);
}

static tg_tensor *f_matmul_self(tg_ctx *c, tg_tensor *const *in, void *user) {
    (void)user;
    return tg_matmul(c, in[0], in[0]);
}

static void fd_mm(int na, const int64_t *sa, int nb, const int64_t *sb) {
    tg_tensor *in[2] = {tg_requires_grad(ctx, tg_randn(ctx, TG_F64, na, sa, 0, 1)),
                        tg_requires_grad(ctx, tg_randn(ctx, TG_F64, nb, sb, 0, 1))};
    tg_test_op_gradcheck(ctx, "matmul", f_matmul, NULL, 2, in);
}

START_TEST(test_backward_2d_nonsquare) {
    fd_mm(TG_SHAPE(3, 5), TG_SHAPE(5, 4));
    fd_mm(TG_SHAPE(1, 6), TG_SHAPE(6, 2));
    fd_mm(TG_SHAPE(4, 1), TG_SHAPE(1, 3));
}
END_TEST

START_TEST(test_backward_batched) {
    fd_mm(TG_SHAPE(2, 3, 4), TG_SHAPE(2, 4, 2));
    fd_mm(TG_SHAPE(3, 1, 5), TG_SHAPE(3, 5, 2));
}
END_TEST

START_TEST(test_backward_shared_b) { fd_mm(TG_SHAPE(2, 3, 4), TG_SHAPE(4, 5)); }
END_TEST

START_TEST(test_backward_one_side) {
    /* only b requires grad, then only a */
    tg_tensor *in[2] = {tg_randn(ctx, TG_F64, TG_SHAPE(3, 4), 0, 1),
                        tg_requires_grad(ctx, tg_randn(ctx, TG_F64, TG_SHAPE(4, 2), 0, 1))};
    tg_test_op_gradcheck(ctx, "matmul, b only", f_matmul, NULL, 2, in);
    tg_test_backward(ctx, f_matmul, NULL, 2, in);
    ck_assert_ptr_null(in[0]->grad);
    tg_tensor *in2[2] = {tg_requires_grad(ctx, tg_randn(ctx, TG_F64, TG_SHAPE(2, 3, 4), 0, 1)),
                         tg_randn(ctx, TG_F64, TG_SHAPE(2, 4, 3), 0, 1)};
    tg_test_op_gradcheck(ctx, "matmul, a only", f_matmul, NULL, 2, in2);
    tg_test_backward(ctx, f_matmul, NULL, 2, in2);
    ck_assert_ptr_null(in2[1]->grad);
}
END_TEST

START_TEST(test_backward_same_operand) {
    /* c = a a: both contributions must accumulate into a's grad */
    tg_tensor *in[1] = {tg_requires_grad(ctx, tg_randn(ctx, TG_F64, TG_SHAPE(3, 3), 0, 1))};
    tg_test_op_gradcheck(ctx, "matmul of a with itself", f_matmul_self, NULL, 1, in);
}
END_TEST

/* Larger shapes (GEMM packed path, transposed cases): the analytic grads
 * against da = dc b^T and db = a^T dc by the textbook loop, with dc = ones
 * plus a second backward on top to check accumulation (grads double). */
static void check_backward_large(tg_dtype dt, int64_t batch, int64_t M, int64_t K, int64_t N, bool shared, double tol) {
    tg_tensor *a = tg_requires_grad(ctx, batch ? tg_randn(ctx, dt, TG_SHAPE(batch, M, K), 0, 1)
                                               : tg_randn(ctx, dt, TG_SHAPE(M, K), 0, 1));
    tg_tensor *b = tg_requires_grad(ctx, batch && !shared ? tg_randn(ctx, dt, TG_SHAPE(batch, K, N), 0, 1)
                                                          : tg_randn(ctx, dt, TG_SHAPE(K, N), 0, 1));
    int64_t nb = batch ? batch : 1;
    tg_tensor *dc =
        tg_randn(ctx, dt, batch ? 3 : 2, batch ? (const int64_t[]){batch, M, N} : (const int64_t[]){M, N}, 0, 1);
    for (int rep = 0; rep < 2; rep++) {
        tg_tensor *c = tg_matmul(ctx, a, b);
        tg_backward_ex(ctx, c, dc, false);
        ck_assert_msg(tg_ok(ctx), "%s", tg_error_message(ctx));
    }
    double *da = calloc((size_t)(nb * M * K), sizeof *da);
    double *db = calloc((size_t)(b->numel), sizeof *db);
    int64_t sb = batch && !shared ? K * N : 0;
    for (int64_t t = 0; t < nb; t++)
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double g = 2 * tg_get_flat(ctx, dc, t * M * N + i * N + j);
                for (int64_t k = 0; k < K; k++) {
                    da[t * M * K + i * K + k] += g * tg_get_flat(ctx, b, t * sb + k * N + j);
                    db[t * sb + k * N + j] += g * tg_get_flat(ctx, a, t * M * K + i * K + k);
                }
            }
    tg_test_assert_close(ctx, "da", a->grad, da, a->numel, tol * sqrt((double)N), tol * sqrt((double)N));
    tg_test_assert_close(ctx, "db", b->grad, db, b->numel, tol * sqrt((double)(M * nb)), tol * sqrt((double)(M * nb)));
    free(da);
    free(db);
}

START_TEST(test_backward_large) {
    check_backward_large(TG_F64, 0, 67, 81, 59, false, 1e-13);
    check_backward_large(TG_F64, 3, 40, 50, 60, false, 1e-13);
    check_backward_large(TG_F64, 4, 30, 70, 50, true, 1e-13);
    check_backward_large(TG_F32, 0, 50, 66, 70, false, 1e-5);
    check_backward_large(TG_F32, 5, 7, 9, 11, false, 1e-5);
}
END_TEST

/* ---- thread-count independence ------------------------------------------ */

static void threads_bitwise(int64_t batch, int64_t M, int64_t K, int64_t N) {
    tg_tensor *a = tg_requires_grad(ctx, tg_randn(ctx, TG_F32, TG_SHAPE(batch, M, K), 0, 1));
    tg_tensor *b = tg_requires_grad(ctx, tg_randn(ctx, TG_F32, TG_SHAPE(batch, K, N), 0, 1));
    tg_tensor *out[2], *ga[2], *gb[2];
    for (int r = 0; r < 2; r++) {
        tg_set_threads(ctx, r == 0 ? 1 : 2);
        tg_zero_grad(ctx, a);
        tg_zero_grad(ctx, b);
        tg_tensor *c = tg_matmul(ctx, a, b);
        tg_backward_ex(ctx, c, tg_ones(ctx, TG_F32, TG_SHAPE(batch, M, N)), false);
        out[r] = tg_copy(ctx, c);
        ga[r] = tg_copy(ctx, a->grad);
        gb[r] = tg_copy(ctx, b->grad);
    }
    ck_assert(tg_ok(ctx));
    tg_test_assert_same_bits("c, 1 vs 2 threads", out[0], out[1]);
    tg_test_assert_same_bits("da, 1 vs 2 threads", ga[0], ga[1]);
    tg_test_assert_same_bits("db, 1 vs 2 threads", gb[0], gb[1]);
}

START_TEST(test_threads_bitwise) {
    threads_bitwise(16, 9, 13, 11);    /* many small items: batch-parallel path */
    threads_bitwise(2, 130, 140, 150); /* big items: threads inside the GEMM */
}
END_TEST

/* ---- any number of leading dims ---------------------------------------------- */

/* (B,H,M,K) x (B,H,K,N): each (b,h) item is the 2-D product of its
 * matrices (the same bits as tg_matmul of the two slices), and (B,H,M,K) x
 * (K,N) is (B*H*M, K) x (K,N); backward against finite differences. */
START_TEST(test_leading_dims) {
    const int64_t B = 2, H = 3, M = 5, K = 4, N = 6;
    for (int d = 0; d < 2; d++) {
        const tg_dtype dt = d ? TG_F64 : TG_F32;
        tg_tensor *a = tg_randn(ctx, dt, TG_SHAPE(B, H, M, K), 0, 1),
                  *b = tg_randn(ctx, dt, TG_SHAPE(B, H, K, N), 0, 1);
        tg_tensor *c = tg_matmul(ctx, a, b);
        ck_assert_msg(c != NULL, "%s", tg_error_message(ctx));
        ck_assert_int_eq(c->ndim, 4);
        ck_assert(c->shape[0] == B && c->shape[1] == H && c->shape[2] == M && c->shape[3] == N);
        tg_test_assert_same_bits(
            "as 3-D", c,
            tg_matmul(ctx, tg_view(ctx, a, TG_SHAPE(B * H, M, K)), tg_view(ctx, b, TG_SHAPE(B * H, K, N))));
        double *ref = tg_test_malloc(sizeof *ref * (size_t)(B * H * M * N));
        naive_mm(ref, a, b, B * H, M, K, N, K * N);
        tg_test_assert_close(ctx, "4-D", c, ref, c->numel, d ? 1e-13 : 1e-5, d ? 1e-13 : 1e-5);
        free(ref);
        tg_tensor *w = tg_randn(ctx, dt, TG_SHAPE(K, N), 0, 1);
        tg_test_assert_same_bits(
            "shared b", tg_matmul(ctx, a, w),
            tg_view(ctx, tg_matmul(ctx, tg_view(ctx, a, TG_SHAPE(B * H * M, K)), w), TG_SHAPE(B, H, M, N)));
        tg_ctx_reset(ctx);
    }
    fd_mm(TG_SHAPE(2, 2, 3, 4), TG_SHAPE(2, 2, 4, 2));
    fd_mm(TG_SHAPE(1, 2, 2, 3, 2), TG_SHAPE(1, 2, 2, 2, 3));
    fd_mm(TG_SHAPE(2, 2, 3, 4), TG_SHAPE(4, 3));
    /* attention's scores: (B,H,T,D) x (B,H,D,T) */
    tg_tensor *q = tg_randn(ctx, TG_F32, TG_SHAPE(2, 3, 7, 4), 0, 1);
    tg_tensor *s = tg_matmul(ctx, q, tg_transpose(ctx, q));
    ck_assert(s->ndim == 4 && s->shape[2] == 7 && s->shape[3] == 7);
}
END_TEST

START_TEST(test_error_leading_dims) {
    tg_tensor *a = tg_zeros(ctx, TG_F64, TG_SHAPE(2, 3, 4, 5));
    tg_tensor *b = tg_zeros(ctx, TG_F64, TG_SHAPE(2, 4, 5, 6));
    tg_test_assert_fails(ctx, tg_matmul(ctx, a, b), TG_ERR_SHAPE, "tg_matmul", "batch", "(2, 3, 4, 5)", "(2, 4, 5, 6)",
                         "dim 1", NULL);
    tg_tensor *b3 = tg_zeros(ctx, TG_F64, TG_SHAPE(3, 5, 6));
    /* leading dims are not broadcast: 4-D x 3-D is refused */
    tg_test_assert_fails(ctx, tg_matmul(ctx, a, b3), TG_ERR_SHAPE, "tg_matmul", "(2, 3, 4, 5)", "(3, 5, 6)",
                         "same leading dims", NULL);
}
END_TEST

/* ---- tape ----------------------------------------------------------------- */

START_TEST(test_records_once) {
    tg_tensor *a = tg_requires_grad(ctx, tg_randn(ctx, TG_F64, TG_SHAPE(2, 3), 0, 1));
    tg_tensor *b = tg_randn(ctx, TG_F64, TG_SHAPE(3, 4), 0, 1);
    tg_tensor *c = tg_matmul(ctx, a, b);
    ck_assert(c->requires_grad);
    ck_assert_int_eq(tg_tape_size(ctx), 1);
    bool was = tg_set_grad_enabled(ctx, false);
    tg_tensor *d = tg_matmul(ctx, a, b);
    tg_set_grad_enabled(ctx, was);
    ck_assert(!d->requires_grad);
    ck_assert_int_eq(tg_tape_size(ctx), 1);
}
END_TEST

/* ---- errors ----------------------------------------------------------------- */

START_TEST(test_error_inner_dims) {
    tg_tensor *a = tg_zeros(ctx, TG_F32, TG_SHAPE(2, 3));
    tg_tensor *b = tg_zeros(ctx, TG_F32, TG_SHAPE(4, 5));
    tg_test_assert_fails(ctx, tg_matmul(ctx, a, b), TG_ERR_SHAPE, "tg_matmul", "(2, 3)", "(4, 5)", NULL);
    tg_tensor *a3 = tg_zeros(ctx, TG_F32, TG_SHAPE(2, 3, 4));
    tg_tensor *b3 = tg_zeros(ctx, TG_F32, TG_SHAPE(2, 5, 6));
    tg_test_assert_fails(ctx, tg_matmul(ctx, a3, b3), TG_ERR_SHAPE, "tg_matmul", "(2, 3, 4)", "(2, 5, 6)", NULL);
    tg_tensor *b2 = tg_zeros(ctx, TG_F32, TG_SHAPE(3, 5));
    /* shared b: 4 != 3 */
    tg_test_assert_fails(ctx, tg_matmul(ctx, a3, b2), TG_ERR_SHAPE, "tg_matmul", "(2, 3, 4)", "(3, 5)", NULL);
}
END_TEST

START_TEST(test_error_batch_and_rank) {
    tg_tensor *a = tg_zeros(ctx, TG_F64, TG_SHAPE(2, 3, 4));
    tg_tensor *b = tg_zeros(ctx, TG_F64, TG_SHAPE(3, 4, 5));
    tg_test_assert_fails(ctx, tg_matmul(ctx, a, b), TG_ERR_SHAPE, "tg_matmul", "batch", "(2, 3, 4)", "(3, 4, 5)", NULL);
    tg_tensor *v = tg_zeros(ctx, TG_F64, TG_SHAPE(4));
    tg_test_assert_fails(ctx, tg_matmul(ctx, v, b), TG_ERR_SHAPE, "tg_matmul", "(4,)", NULL);
    tg_tensor *m = tg_zeros(ctx, TG_F64, TG_SHAPE(5, 4));
    /* (M,K) x (B,K,N) is not supported */
    tg_test_assert_fails(ctx, tg_matmul(ctx, m, b), TG_ERR_SHAPE, "tg_matmul", "(5, 4)", "(3, 4, 5)", NULL);
}
END_TEST

START_TEST(test_error_dtype_null_sticky) {
    tg_tensor *a = tg_zeros(ctx, TG_F32, TG_SHAPE(2, 3));
    tg_tensor *b = tg_zeros(ctx, TG_F64, TG_SHAPE(3, 2));
    tg_test_assert_fails(ctx, tg_matmul(ctx, a, b), TG_ERR_DTYPE, "tg_matmul", "float32", "float64", NULL);
    tg_test_assert_fails(ctx, tg_matmul(ctx, NULL, b), TG_ERR_NULL, "tg_matmul", "'a'", NULL);
    tg_test_assert_fails(ctx, tg_matmul(ctx, a, NULL), TG_ERR_NULL, "tg_matmul", "'b'", NULL);
    /* a context in error: NULL, nothing done, the first error kept */
    tg_error(ctx, TG_ERR_VALUE, "test", "first");
    tg_tensor *a2 = tg_zeros(ctx, TG_F32, TG_SHAPE(2, 3));
    ck_assert_ptr_null(a2);
    ck_assert_ptr_null(tg_matmul(ctx, a, a));
    ck_assert_str_eq(tg_error_message(ctx), "test: first");
    tg_clear_error(ctx);
    ck_assert_ptr_null(tg_matmul(NULL, a, a));
}
END_TEST

Suite *make_ops_matmul_suite(void) {
    return tg_test_suite("ops_matmul", setup, teardown, test_forward_2d, test_forward_batched, test_forward_shared_b,
                         test_forward_by_hand, test_empty_inner_dim, test_backward_2d_nonsquare, test_backward_batched,
                         test_backward_shared_b, test_backward_one_side, test_backward_same_operand,
                         test_backward_large, test_threads_bitwise, test_leading_dims, test_records_once,
                         test_error_inner_dims, test_error_batch_and_rank, test_error_leading_dims,
                         test_error_dtype_null_sticky, NULL);
}

int main(void) { return tg_test_run(make_ops_matmul_suite()); }

/* Tests for the internal GEMM (tensor/gemm.h): every transpose combination
 * against a naive triple loop in double, odd sizes, padded leading
 * dimensions, alpha/beta, f32 and f64; and determinism: the bits do not
 * depend on the thread count, the workspace, or the number of rows. */
#include "tensor/gemm.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

/* ---- helpers ------------------------------------------------------------ */

/* Deterministic values in [-1, 1). */
static double rnd(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*s >> 11) / (double)(1ull << 52) - 1.0;
}

/* A matrix of `rows` x `cols` with row stride ld >= cols, stored as double
 * (the reference) and as the tested dtype. Padding holds a sentinel. */
typedef struct {
    int64_t rows, cols, ld;
    double *d;
    void *x; /* float or double */
    bool f64;
} mat;

#define SENTINEL 12345.0

static mat mat_new(int64_t rows, int64_t cols, int64_t pad, bool f64, uint64_t *seed) {
    mat m = {rows, cols, cols + pad, NULL, NULL, f64};
    size_t n = (size_t)(rows * m.ld);
    m.d = tg_test_malloc(n * sizeof(double));
    m.x = tg_test_malloc(n * (f64 ? sizeof(double) : sizeof(float)));
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < m.ld; j++) {
            double v = j < cols ? rnd(seed) : SENTINEL;
            if (!f64) v = (double)(float)v;
            m.d[i * m.ld + j] = v;
            if (f64) ((double *)m.x)[i * m.ld + j] = v;
            else ((float *)m.x)[i * m.ld + j] = (float)v;
        }
    return m;
}

/* A matrix whose op() is rows x cols: stored cols x rows when trans. */
static mat mat_op(bool trans, int64_t rows, int64_t cols, int64_t pad, bool f64, uint64_t *seed) {
    return trans ? mat_new(cols, rows, pad, f64, seed) : mat_new(rows, cols, pad, f64, seed);
}

static void mat_free(mat *m) {
    free(m->d);
    free(m->x);
}

static double mat_get(const mat *m, int64_t i, int64_t j) {
    return m->f64 ? ((double *)m->x)[i * m->ld + j] : (double)((float *)m->x)[i * m->ld + j];
}

static void mat_fill_nan(mat *m) {
    for (int64_t i = 0; i < m->rows; i++)
        for (int64_t j = 0; j < m->cols; j++) {
            if (m->f64) ((double *)m->x)[i * m->ld + j] = NAN;
            else ((float *)m->x)[i * m->ld + j] = NAN;
        }
}

static void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const mat *A, const mat *B,
                 double beta, mat *C, int threads) {
    if (C->f64) tg_gemm_f64(ta, tb, M, N, K, alpha, A->x, A->ld, B->x, B->ld, beta, C->x, C->ld, threads);
    else tg_gemm_f32(ta, tb, M, N, K, (float)alpha, A->x, A->ld, B->x, B->ld, (float)beta, C->x, C->ld, threads);
}

/* The same on the direct (unpacked) path, into raw storage c like C's. */
static void gemm_direct(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const mat *A, const mat *B,
                        double beta, void *c, int64_t ldc, int threads) {
    if (A->f64) tg_gemm_f64_direct(ta, tb, M, N, K, alpha, A->x, A->ld, B->x, B->ld, beta, c, ldc, threads);
    else tg_gemm_f32_direct(ta, tb, M, N, K, (float)alpha, A->x, A->ld, B->x, B->ld, (float)beta, c, ldc, threads);
}

/* sum_k op(A)[i][k] op(B)[k][j] in double, from the reference copies, and
 * sum_k |op(A)[i][k] op(B)[k][j]| (for the error bound). */
static void ref_dot(const mat *A, const mat *B, bool ta, bool tb, int64_t i, int64_t j, int64_t K, double *sum,
                    double *sabs) {
    double s = 0, sa = 0;
    for (int64_t k = 0; k < K; k++) {
        double a = ta ? A->d[k * A->ld + i] : A->d[i * A->ld + k];
        double b = tb ? B->d[j * B->ld + k] : B->d[k * B->ld + j];
        s += a * b;
        sa += fabs(a * b);
    }
    *sum = s;
    *sabs = sa;
}

/* Runs one GEMM and checks every element against the double reference
 * alpha * sum_k op(A)[i][k] op(B)[k][j] + beta * C0[i][j], within the
 * forward error bound of a K-term sum, and that the padding of C is intact. */
static void check_case(bool f64, bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, double beta,
                       int64_t pad, int threads, uint64_t seed) {
    mat A = mat_op(ta, M, K, pad, f64, &seed);
    mat B = mat_op(tb, K, N, pad + 1, f64, &seed);
    mat C = mat_new(M, N, pad + 2, f64, &seed);
    if (beta == 0) mat_fill_nan(&C); /* never read */
    const size_t cbytes = (size_t)(M * C.ld) * (f64 ? sizeof(double) : sizeof(float));
    void *c_direct = tg_test_malloc(cbytes);
    memcpy(c_direct, C.x, cbytes);

    gemm(ta, tb, M, N, K, alpha, &A, &B, beta, &C, threads);
    gemm_direct(ta, tb, M, N, K, alpha, &A, &B, beta, c_direct, C.ld, 3 - threads);
    /* Whichever path the shape took, the direct path gives the same bits. */
    ck_assert_msg(memcmp(c_direct, C.x, cbytes) == 0, "%s ta=%d tb=%d M=%lld N=%lld K=%lld: direct path differs",
                  f64 ? "f64" : "f32", ta, tb, (long long)M, (long long)N, (long long)K);
    free(c_direct);

    const double eps = f64 ? DBL_EPSILON : FLT_EPSILON;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s, sabs;
            ref_dot(&A, &B, ta, tb, i, j, K, &s, &sabs);
            double c0 = beta == 0 ? 0 : C.d[i * C.ld + j];
            double want = alpha * s + beta * c0;
            double bound = (double)(K + 3) * eps * (fabs(alpha) * sabs + fabs(beta * c0)) + 1e-300;
            double got = mat_get(&C, i, j);
            ck_assert_msg(fabs(got - want) <= bound,
                          "%s ta=%d tb=%d M=%lld N=%lld K=%lld alpha=%g beta=%g threads=%d: "
                          "C[%lld][%lld] = %.17g, want %.17g (bound %.3g)",
                          f64 ? "f64" : "f32", ta, tb, (long long)M, (long long)N, (long long)K, alpha, beta, threads,
                          (long long)i, (long long)j, got, want, bound);
        }
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = N; j < C.ld; j++)
            ck_assert_msg(mat_get(&C, i, j) == SENTINEL, "padding of C written at [%lld][%lld]", (long long)i,
                          (long long)j);
    mat_free(&A);
    mat_free(&B);
    mat_free(&C);
}

/* ---- correctness against the naive loop --------------------------------- */

static const int64_t sizes[] = {1, 3, 17, 63, 129};
static const int64_t sizes_vg[] = {1, 17, 70};
#define NSIZES ((int)(sizeof sizes / sizeof sizes[0]))
#define NSIZES_VG ((int)(sizeof sizes_vg / sizeof sizes_vg[0]))
static const double alphas[] = {1.0, -0.5, 2.0, 0.75};
static const double betas[] = {0.0, 1.0, -1.25, 0.0};

/* _i encodes (f64, trans_a, trans_b): every size triple, rotating through
 * alpha/beta pairs, padded leading dimensions and 1 or 2 threads. */
START_TEST(test_gemm_vs_naive) {
    const bool f64 = _i & 4, ta = _i & 2, tb = _i & 1;
    const bool vg = tg_test_under_valgrind();
    const int64_t *sz = vg ? sizes_vg : sizes;
    const int ns = vg ? NSIZES_VG : NSIZES;
    int n = 0;
    for (int a = 0; a < ns; a++)
        for (int b = 0; b < ns; b++)
            for (int c = 0; c < ns; c++, n++)
                check_case(f64, ta, tb, sz[a], sz[b], sz[c], alphas[n % 4], betas[n % 4],
                           n % 3 == 0   ? 0
                           : n % 3 == 1 ? 5
                                        : 33,
                           1 + n % 2, (uint64_t)(n + 1));
}
END_TEST

/* Larger, non-multiple sizes: several MC/KC/NC blocks and edge tiles. */
START_TEST(test_gemm_large_blocks) {
    const bool f64 = _i & 4, ta = _i & 2, tb = _i & 1;
    const int64_t n = tg_test_under_valgrind() ? 40 : 203;
    check_case(f64, ta, tb, 401, n, 777, 1.0, 0.0, 3, 2, 7);
    check_case(f64, ta, tb, 97, 5 * n + 85, 130, -1.5, 0.5, 0, 1, 8);
    check_case(f64, ta, tb, 1, 300, 1000, 1.0, 1.0, 1, 2, 9);  /* M = 1 */
    check_case(f64, ta, tb, 300, 1, 1000, 1.0, 0.0, 1, 2, 10); /* N = 1 */
}
END_TEST

/* K == 0 and alpha == 0: C = beta * C (C = 0 when beta == 0, even if NaN). */
START_TEST(test_gemm_degenerate) {
    const bool f64 = _i;
    check_case(f64, false, false, 5, 7, 0, 1.0, 0.0, 2, 1, 11);
    check_case(f64, true, true, 5, 7, 0, 1.0, -2.0, 2, 1, 12);
    check_case(f64, false, true, 64, 70, 80, 0.0, 0.5, 2, 2, 13);
    /* M or N == 0: nothing is touched (NULL pointers are fine). */
    if (f64) tg_gemm_f64(false, false, 0, 5, 5, 1.0, NULL, 5, NULL, 5, 0.0, NULL, 5, 1);
    else tg_gemm_f32(false, false, 5, 0, 5, 1.0f, NULL, 5, NULL, 5, 0.0f, NULL, 5, 1);
}
END_TEST

/* ---- determinism -------------------------------------------------------- */

/* Bitwise: threads = 1 vs 2 vs 3, and the _ws variant with a caller's
 * workspace (full-size or too small for all threads) vs without. With
 * 1201 rows (_i & 8) the threads cut the rows into shrinking chunks (the
 * first half of them, then a quarter, ...: gemm_tasks in tensor/gemm.c);
 * beta != 0 shows a row done twice or not at all. */
START_TEST(test_gemm_threads_bitwise) {
    const bool f64 = _i & 4, ta = _i & 2, tb = _i & 1, many_rows = _i & 8;
    const int64_t M = many_rows ? 1201 : 517, K = many_rows ? 300 : 800;
    const int64_t N = tg_test_under_valgrind() ? 40 : many_rows ? 70 : 389;
    const size_t es = f64 ? sizeof(double) : sizeof(float);
    uint64_t seed = 99;
    mat A = mat_op(ta, M, K, 3, f64, &seed);
    mat B = mat_op(tb, K, N, 0, f64, &seed);
    mat C[5];
    for (int r = 0; r < 5; r++) {
        uint64_t s2 = 5;
        C[r] = mat_new(M, N, 1, f64, &s2); /* same C0 in each */
    }
    gemm(ta, tb, M, N, K, 0.5, &A, &B, 1.5, &C[0], 1);
    gemm(ta, tb, M, N, K, 0.5, &A, &B, 1.5, &C[1], 2);
    gemm(ta, tb, M, N, K, 0.5, &A, &B, 1.5, &C[2], 3);

    size_t ws = tg_gemm_workspace_size(M, N, K, es, 2);
    ck_assert_uint_gt(ws, 0);
    ck_assert_uint_ge(ws, tg_gemm_workspace_size(M, N, K, es, 1));
    void *work = tg_test_malloc(ws);
    for (int r = 3; r < 5; r++) {
        size_t size = r == 3 ? ws : tg_gemm_workspace_size(M, N, K, es, 1);
        if (f64) tg_gemm_f64_ws(ta, tb, M, N, K, 0.5, A.x, A.ld, B.x, B.ld, 1.5, C[r].x, C[r].ld, 2, work, size);
        else tg_gemm_f32_ws(ta, tb, M, N, K, 0.5f, A.x, A.ld, B.x, B.ld, 1.5f, C[r].x, C[r].ld, 2, work, size);
    }
    free(work);
    const size_t bytes = (size_t)(M * C[0].ld) * es;
    for (int r = 1; r < 5; r++)
        ck_assert_msg(memcmp(C[0].x, C[r].x, bytes) == 0, "%s ta=%d tb=%d: run %d differs from threads=1",
                      f64 ? "f64" : "f32", ta, tb, r);
    mat_free(&A);
    mat_free(&B);
    for (int r = 0; r < 5; r++) mat_free(&C[r]);
}
END_TEST

/* A long K: with several threads op(B) is packed in more than one
 * super-block (16 MB each); same bits as one thread, and right values. */
START_TEST(test_gemm_superblocks) {
    const bool f64 = _i & 4, ta = _i & 2, tb = _i & 1;
    if (tg_test_under_valgrind()) return; /* ~1e9 multiply-adds: too slow there */
    const int64_t M = 80, N = 263, K = 20000;
    const size_t es = f64 ? sizeof(double) : sizeof(float);
    uint64_t seed = 42;
    mat A = mat_op(ta, M, K, 0, f64, &seed);
    mat B = mat_op(tb, K, N, 0, f64, &seed);
    mat C1 = mat_new(M, N, 0, f64, &seed), C2 = mat_new(M, N, 0, f64, &seed);
    gemm(ta, tb, M, N, K, 1.0, &A, &B, 0.0, &C1, 1);
    gemm(ta, tb, M, N, K, 1.0, &A, &B, 0.0, &C2, 2);
    ck_assert_msg(memcmp(C1.x, C2.x, (size_t)(M * N) * es) == 0, "%s ta=%d tb=%d: threads=2 differs from threads=1",
                  f64 ? "f64" : "f32", ta, tb);
    const double eps = f64 ? DBL_EPSILON : FLT_EPSILON;
    for (int64_t i = 0; i < M; i += 13)
        for (int64_t j = 0; j < N; j += 29) {
            double sum, sabs;
            ref_dot(&A, &B, ta, tb, i, j, K, &sum, &sabs);
            ck_assert_msg(fabs(mat_get(&C2, i, j) - sum) <= (double)(K + 3) * eps * sabs,
                          "C[%lld][%lld] = %.17g, want %.17g", (long long)i, (long long)j, mat_get(&C2, i, j), sum);
        }
    mat_free(&A);
    mat_free(&B);
    mat_free(&C1);
    mat_free(&C2);
}
END_TEST

/* Batch invariance: each row of a 300-row product (packed path) has the
 * same bits as that row computed alone (M = 1) and inside a 3-row product
 * (direct path). */
START_TEST(test_gemm_rows_bitwise) {
    const bool f64 = _i & 4, ta = _i & 2, tb = _i & 1;
    const int64_t M = 300, N = tg_test_under_valgrind() ? 40 : 133, K = 900;
    const size_t es = f64 ? sizeof(double) : sizeof(float);
    uint64_t seed = 3;
    mat A = mat_op(ta, M, K, 0, f64, &seed);
    mat B = mat_op(tb, K, N, 2, f64, &seed);
    mat C = mat_new(M, N, 0, f64, &seed);
    mat R = mat_new(3, N, 0, f64, &seed);
    gemm(ta, tb, M, N, K, -1.0, &A, &B, 0.0, &C, 2);
    for (int64_t i = 0; i < M; i += 23) {
        for (int64_t rows = 1; rows <= 3; rows += 2) {
            if (i + rows > M) continue;
            /* op(A) rows i..i+rows: a row block of A, or a column block of A^T */
            mat Ai = A;
            Ai.x = (char *)A.x + (size_t)(ta ? i : i * A.ld) * es;
            gemm(ta, tb, rows, N, K, -1.0, &Ai, &B, 0.0, &R, 1);
            ck_assert_msg(memcmp((char *)C.x + (size_t)(i * C.ld) * es, R.x, (size_t)(rows * N) * es) == 0,
                          "%s ta=%d tb=%d: rows %lld..+%lld alone differ from the full product", f64 ? "f64" : "f32",
                          ta, tb, (long long)i, (long long)rows);
        }
    }
    mat_free(&A);
    mat_free(&B);
    mat_free(&C);
    mat_free(&R);
}
END_TEST

START_TEST(test_gemm_kernel_name) {
    const char *k = tg_gemm_kernel_name();
    ck_assert(strcmp(k, "avx512") == 0 || strcmp(k, "avx2") == 0 || strcmp(k, "portable") == 0);
#if defined(__AVX512F__)
    ck_assert_str_eq(k, "avx512");
#endif
    ck_assert_uint_eq(tg_gemm_workspace_size(1, 100, 100, sizeof(float), 2), 0); /* small path */
}
END_TEST

Suite *make_gemm_suite(void) {
    Suite *s = suite_create("gemm");
    TCase *tc = tg_test_tcase(s, "naive", NULL, NULL, test_gemm_kernel_name, NULL);
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, test_gemm_vs_naive, 0, 8);
    tcase_add_loop_test(tc, test_gemm_large_blocks, 0, 8);
    tcase_add_loop_test(tc, test_gemm_degenerate, 0, 2);
    TCase *td = tg_test_tcase(s, "determinism", NULL, NULL, NULL);
    tcase_set_timeout(td, 600);
    tcase_add_loop_test(td, test_gemm_threads_bitwise, 0, 16);
    tcase_add_loop_test(td, test_gemm_rows_bitwise, 0, 8);
    tcase_add_loop_test(td, test_gemm_superblocks, 0, 8);
    return s;
}

int main(void) { return tg_test_run(make_gemm_suite()); }

/* Matrix product: 2-D, batched over any number of leading dims, and a
 * batched left operand times a shared 2-D right operand. Every product
 * goes through the internal GEMM (tensor/gemm.h), whose transposed cases
 * give the backward products without copying a transpose. Both dtypes
 * share this code: the GEMM has an f32 and an f64 entry point and
 * mm_gemm() dispatches on the dtype.
 *
 * Shapes (one "problem" is M,K,N and a batch count):
 *   a (M,K)     x b (K,N)     -> c (M,N)      batch 1
 *   a (...,M,K) x b (...,K,N) -> c (...,M,N)  batch = product of the
 *                                             leading dims (the same for a
 *                                             and b), one product each:
 *                                             attention's (B,H,T,D) x
 *                                             (B,H,D,T) is B*H products
 *   a (...,M,K) x b (K,N)     -> c (...,M,N)  folded into one product
 *                                             (rows,K) x (K,N): a is
 *                                             contiguous, so its leading
 *                                             dims times M are just rows. */
#include "autograd/lowp.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "tensor/gemm.h"
#include "tensor/parallel.h"

#include <string.h>

/* Below this many multiply-adds per batch item the GEMM runs on one thread
 * anyway, so batched products run their items in parallel instead. */
#define MM_SMALL_FMAS ((int64_t)1 << 20)
/* Multiply-adds per thread of parallel small items: the GEMM's own rule
 * (GEMM_FMAS_PER_THREAD, tensor/gemm.c), so few small items stay on one. */
#define MM_THREAD_FMAS ((int64_t)1 << 22)

typedef struct mm_dims {
    int64_t batch; /* number of independent products (1 when folded) */
    int64_t M, K, N;
} mm_dims;

/* C (M,N) = op(A) op(B) + beta C in the dtype `dt`, with a workspace of
 * `ws` bytes at `work` (see tensor/gemm.h for op() and the strides). */
static void mm_gemm(tg_dtype dt, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void *A, int64_t lda,
                    const void *B, int64_t ldb, double beta, void *C, int64_t ldc, int threads, void *work, size_t ws) {
    if (dt == TG_F64) tg_gemm_f64_ws(ta, tb, M, N, K, 1.0, A, lda, B, ldb, beta, C, ldc, threads, work, ws);
    else tg_gemm_f32_ws(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, (float)beta, C, ldc, threads, work, ws);
}

/* One batch item per task of the pool, each runner with its own
 * single-thread workspace (ws bytes, ws_round apart, by worker id). */
typedef struct {
    tg_dtype dt;
    bool ta, tb;
    int64_t M, N, K, lda, ldb, ldc, sa, sb, sc;
    const unsigned char *pa, *pb;
    unsigned char *pc, *work;
    double beta;
    size_t es, ws, ws_round;
} mm_batch_job;

static void mm_batch_task(void *arg, int64_t i, int worker) {
    const mm_batch_job *j = arg;
    void *w = j->work ? j->work + j->ws_round * (size_t)worker : NULL;
    mm_gemm(j->dt, j->ta, j->tb, j->M, j->N, j->K, j->pa + (size_t)(i * j->sa) * j->es, j->lda,
            j->pb + (size_t)(i * j->sb) * j->es, j->ldb, j->beta, j->pc + (size_t)(i * j->sc) * j->es, j->ldc, 1, w,
            j->ws);
}

/* The same GEMM `batch` times: item i uses A + i*sa, B + i*sb, C + i*sc
 * (element offsets). With many small items they run in parallel, one item
 * per task, each GEMM on one thread; otherwise one after the other, each
 * using every thread. Either way each item's result is the GEMM's, which
 * does not depend on the thread count. */
static void mm_gemm_batched(tg_ctx *ctx, const char *fn, tg_dtype dt, bool ta, bool tb, int64_t batch, int64_t M,
                            int64_t N, int64_t K, const void *A, int64_t lda, int64_t sa, const void *B, int64_t ldb,
                            int64_t sb, double beta, void *C, int64_t ldc, int64_t sc) {
    if (M == 0 || N == 0 || batch == 0) return;
    const size_t es = tg_esize(dt);
    const unsigned char *pa = A, *pb = B;
    unsigned char *pc = C;
    const int threads = tg_threads(ctx);
    if (!(batch > 1 && threads > 1 && M * N * K < MM_SMALL_FMAS)) {
        size_t ws = tg_gemm_workspace_size(M, N, K, es, threads);
        void *work = ws ? tg_arena_alloc_fn(ctx, fn, ws) : NULL;
        if (ws && !work) return;
        for (int64_t i = 0; i < batch; i++)
            mm_gemm(dt, ta, tb, M, N, K, pa + (size_t)(i * sa) * es, lda, pb + (size_t)(i * sb) * es, ldb, beta,
                    pc + (size_t)(i * sc) * es, ldc, threads, work, ws);
        return;
    }
    /* small items, in parallel: a thread per MM_THREAD_FMAS, one per item at most */
    const int64_t most = batch * M * N * K / MM_THREAD_FMAS;
    int nt = threads < batch ? threads : (int)batch;
    if (most < nt) nt = most < 1 ? 1 : (int)most;
    const size_t ws = tg_gemm_workspace_size(M, N, K, es, 1);
    /* the fields in their order; work below */
    mm_batch_job j = {dt, ta, tb, M,  N,  K,    lda,  ldb, ldc, sa,
                      sb, sc, pa, pb, pc, NULL, beta, es,  ws,  (ws + TG_ALIGN - 1) / TG_ALIGN * TG_ALIGN};
    j.work = ws ? tg_arena_alloc_fn(ctx, fn, j.ws_round * (size_t)nt) : NULL;
    if (ws && !j.work) return;
    tg_parallel(nt, batch, mm_batch_task, &j);
}

/* Forward, per batch item: c = a b.
 *   c_ij = sum_k a_ik b_kj,   a (M,K)  b (K,N)  c (M,N)
 * K = 0 gives zeros (an empty sum). Saves nothing: backward reads a and b
 * through the record's inputs. */
static void matmul_forward(tg_ctx *ctx, const char *fn, tg_tensor *c, const tg_tensor *a, const tg_tensor *b,
                           mm_dims d) {
    if (d.K == 0) {
        if (c->numel) memset(c->data, 0, (size_t)c->numel * tg_esize(c->dtype));
        return;
    }
    mm_gemm_batched(ctx, fn, c->dtype, false, false, d.batch, d.M, d.N, d.K, a->data, d.K, d.M * d.K, b->data, d.N,
                    d.K * d.N, 0.0, c->data, d.N, d.M * d.N);
}

/* Forward was c_ij = sum_k a_ik b_kj, so dc_ij reaches a_ik through b_kj
 * and b_kj through a_ik:
 *   da_ik += sum_j dc_ij b_kj    i.e.  da += dc b^T   (M,N)(N,K)
 *   db_kj += sum_i a_ik dc_ij    i.e.  db += a^T dc   (K,M)(M,N)
 * per batch item. In GEMM terms da is (M x K, depth N) with op(B) = b^T
 * read from b (K,N) by trans_b; db is (K x N, depth M) with op(A) = a^T
 * read from a (M,K) by trans_a. beta = 1 accumulates into the grads. */
static void matmul_backward(tg_ctx *ctx, tg_node *n) {
    const tg_tensor *dc = n->out->grad;
    tg_tensor *a = n->in[0], *b = n->in[1];
    mm_dims d = {n->i[0], n->i[1], n->i[2], n->i[3]};
    tg_tensor *da = tg_grad_of(ctx, a);
    tg_tensor *db = tg_grad_of(ctx, b);
    if (da && d.N > 0)
        mm_gemm_batched(ctx, n->op->name, dc->dtype, false, true, d.batch, d.M, d.K, d.N, dc->data, d.N, d.M * d.N,
                        b->data, d.N, d.K * d.N, 1.0, da->data, d.K, d.M * d.K);
    if (db && d.M > 0)
        mm_gemm_batched(ctx, n->op->name, dc->dtype, true, false, d.batch, d.K, d.N, d.M, a->data, d.K, d.M * d.K,
                        dc->data, d.N, d.M * d.N, 1.0, db->data, d.N, d.K * d.N);
}

/* c = a b: da = dc b^T, db = a^T dc; with b (K,N) shared by a batched a,
 * db = sum over the batch of a_b^T dc_b = a'^T dc' with a' (B M, K),
 * dc' (B M, N). */
static bool matmul_grad(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    tg_tensor *a = n->in[0], *b = n->in[1];
    if (tg_node_needs_grad(n, 0)) dx[0] = tg_matmul(ctx, dy, tg_transpose(ctx, b));
    if (tg_node_needs_grad(n, 1)) {
        if (a->ndim == b->ndim) dx[1] = tg_matmul(ctx, tg_transpose(ctx, a), dy);
        else {
            const int64_t K = a->shape[a->ndim - 1], N = dy->shape[dy->ndim - 1];
            tg_tensor *a2 = tg_reshape(ctx, a, 2, (int64_t[]){-1, K});
            tg_tensor *d2 = tg_reshape(ctx, dy, 2, (int64_t[]){-1, N});
            dx[1] = tg_matmul(ctx, tg_transpose(ctx, a2), d2);
        }
    }
    return tg_ok(ctx);
}

/* c = a b (batched as the forward was): t_c = t_a b + a t_b. */
static tg_tensor *matmul_jvp(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) {
    return tg_add(ctx, tg_matmul(ctx, t[0], n->in[1]), tg_matmul(ctx, n->in[0], t[1]));
}

/* Linear in each input, so a check's float32 step can be large. */
const tg_op_def tg_matmul_op =
    TG_OP("matmul", matmul_backward, matmul_grad, matmul_jvp, .inputs = "a=-2:2,b=-2:2", .f32 = {.h = 0.1});

tg_tensor *tg_matmul(tg_ctx *ctx, tg_tensor *a, tg_tensor *b) {
    if (tg_lowp_args(ctx, __func__, 2, (tg_tensor *[]){a, b})) return tg_lowp_binary(ctx, tg_matmul, a, b);
    if (!tg_check_arg(ctx, __func__, "a", a) || !tg_check_arg(ctx, __func__, "b", b)) return NULL;
    if (!tg_check_same_dtype(ctx, __func__, a, b)) return NULL;
    char sa[TG_SHAPE_STR], sb[TG_SHAPE_STR];
    const int nd = a->ndim;
    if (nd < 2 || (b->ndim != 2 && b->ndim != nd)) {
        tg_error(ctx, TG_ERR_SHAPE, __func__,
                 "a %s x b %s: supported are (M,K) x (K,N), (...,M,K) x (...,K,N) with the same leading dims, and "
                 "(...,M,K) x (K,N)",
                 tg_shape_of(sa, a), tg_shape_of(sb, b));
        return NULL;
    }
    /* c has a's leading dims, then (M, N) */
    int64_t shape[TG_MAX_DIMS];
    int64_t lead = 1;
    for (int d = 0; d < nd - 2; d++) {
        shape[d] = a->shape[d];
        lead *= a->shape[d];
        if (b->ndim == nd && b->shape[d] != a->shape[d]) {
            tg_error(ctx, TG_ERR_SHAPE, __func__, "batch dims differ: a %s x b %s (dim %d: %lld != %lld)",
                     tg_shape_of(sa, a), tg_shape_of(sb, b), d, (long long)a->shape[d], (long long)b->shape[d]);
            return NULL;
        }
    }
    const int64_t M = a->shape[nd - 2], K = a->shape[nd - 1], N = b->shape[b->ndim - 1];
    shape[nd - 2] = M, shape[nd - 1] = N;
    /* a shared b folds the batch into the rows: (lead*M, K) x (K, N) */
    mm_dims d = b->ndim == 2 ? (mm_dims){1, lead * M, K, N} : (mm_dims){lead, M, K, N};
    int64_t kb = b->shape[b->ndim - 2];
    if (d.K != kb) {
        tg_error(ctx, TG_ERR_SHAPE, __func__, "inner dims differ: a %s x b %s (%lld != %lld)", tg_shape_of(sa, a),
                 tg_shape_of(sb, b), (long long)d.K, (long long)kb);
        return NULL;
    }
    tg_tensor *c = tg_new_tensor(ctx, __func__, a->dtype, nd, shape);
    if (!c) return NULL;
    matmul_forward(ctx, __func__, c, a, b, d);
    tg_node *n = tg_record(ctx, &tg_matmul_op, c, 2, (tg_tensor *[]){a, b});
    if (n) {
        n->i[0] = d.batch, n->i[1] = d.M, n->i[2] = d.K, n->i[3] = d.N;
        /* kept by pointer: da needs b, db needs a */
        size_t bytes = 0;
        if (a->requires_grad) bytes += (size_t)b->numel * tg_esize(b->dtype);
        if (b->requires_grad && b != a) bytes += (size_t)a->numel * tg_esize(a->dtype);
        tg_node_count_saved(ctx, n, bytes);
    }
    return tg_ok(ctx) ? c : NULL;
}

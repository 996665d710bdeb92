/* Linear: y = x W^T + b as one fused op (one tape record) and as a module
 * with PyTorch's default init.
 *
 * x is viewed as M rows of K = in_features elements (all leading dims
 * flattened; tensors are contiguous, so this is free), W is (N, K) with
 * N = out_features, b is (N), y is (M, N). Every product goes through the
 * internal GEMM (tensor/gemm.h), whose transposed cases give the three
 * products without copying a transpose:
 *   forward   y  = x W^T      trans_b    (M x N, depth K)
 *   backward  dx += dy W      none       (M x K, depth N)
 *             dW += dy^T x    trans_a    (N x K, depth M)
 * GEMM workspaces come from the context's arena, so a warmed-up training
 * step allocates nothing from malloc, and go back to it after each product
 * (tg_arena_release), so every product reuses the same memory. */
#include "autograd/lowp.h"
#include "autograd/tape.h"
#include "layers/grad_rules.h"
#include "layers/module.h"
#include "tensor/gemm.h"
#include "tensor/parallel.h"

#include <math.h>
#include <string.h>

/* Below this many elements of dy the bias column sums run on one thread. */
#define LIN_PAR_MIN 65536

/* C (M,N) = op(A) op(B) + beta C in dtype dt, workspace from the arena. */
static void lin_gemm(tg_ctx *ctx, const char *fn, tg_dtype dt, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                     const void *A, int64_t lda, const void *B, int64_t ldb, double beta, void *C, int64_t ldc) {
    if (M == 0 || N == 0) return;
    int threads = tg_threads(ctx);
    size_t ws = tg_gemm_workspace_size(M, N, K, tg_esize(dt), threads);
    tg_arena_pos before = tg_arena_mark(ctx); /* the workspace is given back after the product */
    void *work = ws ? tg_arena_alloc_fn(ctx, fn, ws) : NULL;
    if (ws && !work) return;
    if (dt == TG_F64) tg_gemm_f64_ws(ta, tb, M, N, K, 1.0, A, lda, B, ldb, beta, C, ldc, threads, work, ws);
    else tg_gemm_f32_ws(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, (float)beta, C, ldc, threads, work, ws);
    tg_arena_release(ctx, before);
}

/* db_j += sum_i dy_ij over the M rows of dy (M,N), for the columns j0..j1-1,
 * row by row in order 0..M-1 (summed in double for float32). */
#define LIN_DEFINE_BIAS_BLOCK(T, SUF)                                                                                  \
    static void bias_grad_block_##SUF(T *db, const T *dy, double *acc, int64_t M, int64_t N, int64_t j0, int64_t j1) { \
        for (int64_t j = j0; j < j1; j++) acc[j] = 0.0;                                                                \
        for (int64_t i = 0; i < M; i++) {                                                                              \
            const T *row = dy + i * N;                                                                                 \
            for (int64_t j = j0; j < j1; j++) acc[j] += (double)row[j];                                                \
        }                                                                                                              \
        for (int64_t j = j0; j < j1; j++) db[j] = (T)((double)db[j] + acc[j]);                                         \
    }
LIN_DEFINE_BIAS_BLOCK(float, f32)
LIN_DEFINE_BIAS_BLOCK(double, f64)

typedef struct {
    tg_dtype dt;
    void *db;
    const void *dy;
    double *acc;
    int64_t M, N;
} bias_job;

/* Columns [j0, j1) of the bias gradient: one task of the pool. */
static void bias_grad_task(void *p, int64_t j0, int64_t j1, int worker) {
    const bias_job *b = p;
    (void)worker;
    if (b->dt == TG_F64) bias_grad_block_f64(b->db, b->dy, b->acc, b->M, b->N, j0, j1);
    else bias_grad_block_f32(b->db, b->dy, b->acc, b->M, b->N, j0, j1);
}

/* The bias gradient (column sums of dy) in blocks of 256 columns, the
 * tasks of the pool; threads split the columns, never the rows, so every
 * column is summed in the same order for any thread count. acc: N doubles
 * of scratch. */
static void bias_grad(tg_dtype dt, void *db, const void *dy, double *acc, int64_t M, int64_t N, int threads) {
    bias_job b = {dt, db, dy, acc, M, N};
    tg_parallel_range(M * N >= LIN_PAR_MIN ? threads : 1, N, 256, bias_grad_task, &b);
}

/* Forward: y_ij = sum_k x_ik W_jk + b_j,   x (M,K)  W (N,K)  b (N) or NULL
 * y (M,N). The bias is added in the same pass as the product: y's rows are
 * prefilled with b and the GEMM accumulates x W^T onto them (beta = 1);
 * without a bias the GEMM overwrites y (beta = 0). Saves nothing: backward
 * reads x and W through the record's inputs. */
static void linear_forward(tg_ctx *ctx, const char *fn, tg_tensor *y, const tg_tensor *x, const tg_tensor *w,
                           const tg_tensor *b, int64_t M, int64_t N, int64_t K) {
    const size_t es = tg_esize(y->dtype);
    if (b) {
        for (int64_t i = 0; i < M; i++) memcpy((char *)y->data + (size_t)(i * N) * es, b->data, (size_t)N * es);
    } else if (K == 0 && y->numel) {
        memset(y->data, 0, (size_t)y->numel * es); /* an empty sum */
    }
    lin_gemm(ctx, fn, y->dtype, false, true, M, N, K, x->data, K, w->data, K, b ? 1.0 : 0.0, y->data, N);
}

/* Forward was y_ij = sum_k x_ik W_jk + b_j. dy_ij reaches x_ik through W_jk,
 * W_jk through x_ik, and b_j directly, once per row:
 *   dx_ik += sum_j dy_ij W_jk      dx += dy W       (M,N)(N,K)
 *   dW_jk += sum_i dy_ij x_ik      dW += dy^T x     (N,M)(M,K)
 *   db_j  += sum_i dy_ij           column sums of dy
 * beta = 1 makes the GEMMs accumulate into the grads. */
static void linear_backward(tg_ctx *ctx, tg_node *n) {
    const tg_tensor *dy = n->out->grad;
    tg_tensor *x = n->in[0], *w = n->in[1], *b = n->n_in > 2 ? n->in[2] : NULL;
    const int64_t M = n->i[0], N = n->i[1], K = n->i[2];
    tg_tensor *dx = tg_grad_of(ctx, x);
    tg_tensor *dw = tg_grad_of(ctx, w);
    tg_tensor *db = tg_grad_of(ctx, b);
    if (!tg_ok(ctx)) return;
    const tg_dtype dt = dy->dtype;
    /* dx (M,K) = dy (M,N) W (N,K) */
    if (dx && K > 0 && N > 0)
        lin_gemm(ctx, n->op, dt, false, false, M, K, N, dy->data, N, w->data, K, 1.0, dx->data, K);
    /* dW (N,K) = dy^T (N,M) x (M,K); dy read transposed */
    if (dw && K > 0 && M > 0) lin_gemm(ctx, n->op, dt, true, false, N, K, M, dy->data, N, x->data, K, 1.0, dw->data, K);
    if (db && N > 0 && M > 0) {
        double *acc = tg_arena_alloc_fn(ctx, n->op, (size_t)N * sizeof *acc);
        if (!acc) return;
        bias_grad(dt, db->data, dy->data, acc, M, N, tg_threads(ctx));
    }
}

tg_tensor *tg_linear_fused(tg_ctx *ctx, tg_tensor *x, tg_tensor *weight, tg_tensor *bias) {
    if (tg_lowp_args(ctx, __func__, 3, (tg_tensor *[]){x, weight, bias})) /* f32 GEMM on widened copies */
        return tg_lowp_out(ctx,
                           tg_linear_fused(ctx, tg_lowp_in(ctx, x), tg_lowp_in(ctx, weight), tg_lowp_in(ctx, bias)), x);
    if (!tg_check_arg(ctx, __func__, "x", x) || !tg_check_arg(ctx, __func__, "weight", weight)) return NULL;
    if (!tg_check_same_dtype(ctx, __func__, x, weight)) return NULL;
    if (bias && !tg_check_same_dtype(ctx, __func__, x, bias)) return NULL;
    char sx[TG_SHAPE_STR], sw[TG_SHAPE_STR], sb[TG_SHAPE_STR];
    if (weight->ndim != 2) {
        tg_error(ctx, TG_ERR_SHAPE, __func__, "weight %s must be 2-d (out_features, in_features)",
                 tg_shape_of(sw, weight));
        return NULL;
    }
    const int64_t N = weight->shape[0], K = weight->shape[1];
    if (x->ndim < 1) {
        tg_error(ctx, TG_ERR_SHAPE, __func__, "input %s must have at least 1 dim (..., in_features=%lld)",
                 tg_shape_of(sx, x), (long long)K);
        return NULL;
    }
    if (x->shape[x->ndim - 1] != K) {
        tg_error(ctx, TG_ERR_SHAPE, __func__, "input %s last dim %lld != in_features %lld of weight %s",
                 tg_shape_of(sx, x), (long long)x->shape[x->ndim - 1], (long long)K, tg_shape_of(sw, weight));
        return NULL;
    }
    if (bias && (bias->ndim != 1 || bias->shape[0] != N)) {
        tg_error(ctx, TG_ERR_SHAPE, __func__, "bias %s is not (%lld,), the out_features of weight %s",
                 tg_shape_of(sb, bias), (long long)N, tg_shape_of(sw, weight));
        return NULL;
    }
    int64_t shape[TG_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] = N;
    int64_t rows = 1; /* M: the product of the leading dims (also when K == 0) */
    for (int d = 0; d < x->ndim - 1; d++) rows *= x->shape[d];
    tg_tensor *y = tg_new_tensor(ctx, __func__, x->dtype, x->ndim, shape);
    if (!y) return NULL;
    linear_forward(ctx, __func__, y, x, weight, bias, rows, N, K);
    tg_tensor *in[3] = {x, weight, bias};
    tg_node *n = tg_record(ctx, "linear", linear_backward, y, bias ? 3 : 2, in);
    if (n) {
        n->i[0] = rows, n->i[1] = N, n->i[2] = K;
        n->grad_rule = tg_linear_grad_rule;
        /* kept by pointer: dx needs W, dW needs x */
        size_t es = tg_esize(x->dtype), bytes = 0;
        if (x->requires_grad) bytes += (size_t)weight->numel * es;
        if (weight->requires_grad) bytes += (size_t)x->numel * es;
        tg_node_count_saved(ctx, n, bytes);
    }
    return tg_ok(ctx) ? y : NULL;
}

/* ---- the module ------------------------------------------------------------------ */

static size_t linear_repr(const tg_module *m, char *buf, size_t size) {
    const tg_linear *l = (const tg_linear *)m;
    int n = snprintf(buf, size, "Linear(in_features=%lld, out_features=%lld, bias=%s)", (long long)l->in_features,
                     (long long)l->out_features, l->bias ? "true" : "false");
    return n > 0 ? (size_t)n : 0;
}

static bool linear_params_m(tg_ctx *ctx, tg_module *m, const char *prefix, tg_params *list) {
    tg_linear *l = (tg_linear *)m;
    if (!tg_params_add(ctx, list, prefix, "weight", l->weight, true)) return false;
    return !l->bias || tg_params_add(ctx, list, prefix, "bias", l->bias, false);
}

static int64_t linear_numel(const tg_module *m) {
    const tg_linear *l = (const tg_linear *)m;
    return l->weight->numel + (l->bias ? l->bias->numel : 0);
}

static void linear_free_m(tg_ctx *ctx, tg_module *m) {
    tg_linear *l = (tg_linear *)m;
    tg_tensor_free(ctx, l->weight);
    tg_tensor_free(ctx, l->bias);
    tg_heap_free(ctx, l);
}

static tg_tensor *linear_forward_m(tg_ctx *ctx, tg_module *m, tg_tensor *x) {
    return tg_linear_forward(ctx, (tg_linear *)m, x);
}

static const tg_module_ops LINEAR_OPS = {.repr = linear_repr,
                                         .params = linear_params_m,
                                         .numel = linear_numel,
                                         .free = linear_free_m,
                                         .forward = linear_forward_m};

/* The constructors' common part; errors name fn. */
static tg_linear *linear_new(tg_ctx *ctx, const char *fn, const char *name, int64_t in_features, int64_t out_features,
                             bool bias, tg_dtype dtype) {
    if (!tg_ok(ctx)) return NULL;
    if (!tg_check_size_arg(ctx, fn, "in_features", in_features) ||
        !tg_check_size_arg(ctx, fn, "out_features", out_features))
        return NULL;
    int64_t numel;
    if (!tg_check_shape(ctx, fn, 2, (const int64_t[]){out_features, in_features}, &numel)) return NULL;
    tg_linear *l = tg_module_alloc(ctx, fn, sizeof *l, "Linear", name, dtype, &LINEAR_OPS);
    if (!l) return NULL;
    l->in_features = in_features;
    l->out_features = out_features;
    /* PyTorch: kaiming_uniform_(a=sqrt(5)) for W and U(-1/sqrt(fan_in), .)
     * for b; both reduce to U(-1/sqrt(in), 1/sqrt(in)). */
    const double bound = 1.0 / sqrt((double)in_features);
    l->weight = tg_param_from(ctx, tg_rand(ctx, dtype, TG_SHAPE(out_features, in_features), -bound, bound));
    if (bias) l->bias = tg_param_from(ctx, tg_rand(ctx, dtype, TG_SHAPE(out_features), -bound, bound));
    return tg_module_built(ctx, &l->base);
}

tg_linear_opts tg_linear_defaults(void) { return (tg_linear_opts){.bias = true, .dtype = TG_F32}; }

tg_linear *tg_linear_new(tg_ctx *ctx, const char *name, int64_t in_features, int64_t out_features, bool bias,
                         tg_dtype dtype) {
    return linear_new(ctx, __func__, name, in_features, out_features, bias, dtype);
}

tg_linear *tg_linear_new_ex(tg_ctx *ctx, const char *name, int64_t in_features, int64_t out_features,
                            const tg_linear_opts *opts) {
    const tg_linear_opts o = opts ? *opts : tg_linear_defaults();
    return linear_new(ctx, __func__, name, in_features, out_features, o.bias, o.dtype);
}

tg_linear *tg_linear_new1(tg_ctx *ctx, const char *name, int64_t in_features, int64_t out_features) {
    const tg_linear_opts o = tg_linear_defaults();
    return linear_new(ctx, __func__, name, in_features, out_features, o.bias, o.dtype);
}

tg_tensor *tg_linear_forward(tg_ctx *ctx, tg_linear *layer, tg_tensor *x) {
    if (!tg_check_layer(ctx, __func__, layer)) return NULL;
    if (!tg_check_arg_any(ctx, __func__, "x", x) || !tg_check_layer_dtype(ctx, __func__, x, layer->base.dtype))
        return NULL;
    if (x->ndim < 1 || x->shape[x->ndim - 1] != layer->in_features) {
        char sx[TG_SHAPE_STR];
        tg_error(ctx, TG_ERR_SHAPE, __func__, "input %s last dim %lld != in_features %lld", tg_shape_of(sx, x),
                 x->ndim ? (long long)x->shape[x->ndim - 1] : 0LL, (long long)layer->in_features);
        return NULL;
    }
    /* under autocast: x and the parameters' copies in the compute dtype */
    return tg_linear_fused(ctx, tg_autocast_input(ctx, x), tg_autocast_param(ctx, layer->weight),
                           tg_autocast_param(ctx, layer->bias));
}

bool tg_linear_params(tg_ctx *ctx, tg_linear *layer, tg_params *list) {
    return tg_module_params(ctx, TG_MODULE(layer), list);
}

void tg_linear_free(tg_ctx *ctx, tg_linear *layer) { tg_module_free(ctx, TG_MODULE(layer)); }

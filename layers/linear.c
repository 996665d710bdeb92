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
 * (tg_arena_release), so every product reuses the same memory.
 *
 * bfloat16 runs the same three products in bfloat16 (tg_gemm_bf16_ws:
 * bfloat16 products, float32 sums, each result rounded once to bfloat16;
 * docs/mixed-precision.md): y = round(x W^T + b) with b added in the
 * GEMM's store, dx = round(dx + dy W), dW = round(dW + dy^T x). float16
 * takes the ops' low-precision path (autograd/lowp.h): the float32 GEMM on
 * widened copies.
 *
 * The module under bfloat16 autocast (linear_autocast) records its float32
 * parameters themselves: the GEMM reads W as float32 and rounds it to
 * bfloat16 as it packs it (the bits of W's autocast copy, which is never
 * made), and dW += dy^T x is summed straight into W's float32 grad (the
 * GEMM writes float32: no rounding of dW to bfloat16, no cast backward),
 * db likewise. */
#include "autograd/lowp.h"
#include "autograd/tape.h"
#include "layers/ops.h"
#include "layers/module.h"
#include "tensor/gemm.h"
#include "tensor/parallel.h"

#include <math.h>
#include <string.h>

/* Below this many elements of dy the bias column sums run on one thread. */
#define LIN_PAR_MIN 65536

/* C (M,N) = op(A) op(B) + beta C with A and B of dtype dt and C of dtype
 * ct (ct == dt, or float32 C for bfloat16 A and B), workspace from the
 * arena. For bfloat16 only: bias, beta's C is this one row for every row
 * of C, instead of C (float32 and float64 prefill C); b_f32, B is float32,
 * rounded to bfloat16 as the GEMM packs it. */
static void lin_gemm(tg_ctx *ctx, const char *fn, tg_dtype dt, tg_dtype ct, bool ta, bool tb, int64_t M, int64_t N,
                     int64_t K, const void *A, int64_t lda, const void *B, int64_t ldb, bool b_f32, double beta,
                     void *C, int64_t ldc, const void *bias) {
    if (M == 0 || N == 0) return;
    const int threads = tg_threads(ctx);
    const tg_gemm_bf16_args g = {.trans_a = ta,
                                 .trans_b = tb,
                                 .M = M,
                                 .N = N,
                                 .K = K,
                                 .alpha = 1,
                                 .beta = (float)beta,
                                 .A = A,
                                 .lda = lda,
                                 .B = B,
                                 .ldb = ldb,
                                 .b_f32 = b_f32,
                                 .C = C,
                                 .ldc = ldc,
                                 .c_bf16 = ct == TG_BF16,
                                 .c_in = bias,
                                 .ldc_in = 0,
                                 .threads = threads};
    size_t ws =
        dt == TG_BF16 ? tg_gemm_bf16_workspace_size(&g) : tg_gemm_workspace_size(M, N, K, tg_esize(dt), threads);
    tg_arena_pos before = tg_arena_mark(ctx); /* the workspace is given back after the product */
    void *work = ws ? tg_arena_alloc_fn(ctx, fn, ws) : NULL;
    if (ws && !work) return;
    if (dt == TG_BF16) tg_gemm_bf16_ws(&g, work, ws);
    else if (dt == TG_F64) tg_gemm_f64_ws(ta, tb, M, N, K, 1.0, A, lda, B, ldb, beta, C, ldc, threads, work, ws);
    else tg_gemm_f32_ws(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, (float)beta, C, ldc, threads, work, ws);
    tg_arena_release(ctx, before);
}

/* db_j += sum_i dy_ij over the M rows of dy (M,N), for the columns j0..j1-1:
 * the column sums in double, row by row in order 0..M-1, then added to db
 * in double and rounded once to db's dtype (a bfloat16 db through
 * float32, as every bfloat16 result is rounded). dy and db have the same
 * dtype, or dy is bfloat16 and db float32 (a Linear under autocast). */
#define LIN_DEFINE_COLUMN_SUMS(T, SUF, LOAD)                                                                \
    static void column_sums_##SUF(double *acc, const T *dy, int64_t M, int64_t N, int64_t j0, int64_t j1) { \
        for (int64_t j = j0; j < j1; j++) acc[j] = 0.0;                                                     \
        for (int64_t i = 0; i < M; i++) {                                                                   \
            const T *row = dy + i * N;                                                                      \
            for (int64_t j = j0; j < j1; j++) acc[j] += (double)LOAD(row[j]);                               \
        }                                                                                                   \
    }
#define LIN_PLAIN(v) (v)
LIN_DEFINE_COLUMN_SUMS(float, f32, LIN_PLAIN)
LIN_DEFINE_COLUMN_SUMS(double, f64, LIN_PLAIN)
LIN_DEFINE_COLUMN_SUMS(uint16_t, bf16, tg_bf16_to_f32)

typedef struct {
    tg_dtype dt, bt; /* dy's dtype, db's */
    void *db;
    const void *dy;
    double *acc;
    int64_t M, N;
} bias_job;

/* Columns [j0, j1) of the bias gradient: one task of the pool. */
static void bias_grad_task(void *p, int64_t j0, int64_t j1, int worker) {
    const bias_job *b = p;
    (void)worker;
    if (b->dt == TG_F64) column_sums_f64(b->acc, b->dy, b->M, b->N, j0, j1);
    else if (b->dt == TG_BF16) column_sums_bf16(b->acc, b->dy, b->M, b->N, j0, j1);
    else column_sums_f32(b->acc, b->dy, b->M, b->N, j0, j1);
    for (int64_t j = j0; j < j1; j++) {
        if (b->bt == TG_F64) ((double *)b->db)[j] += b->acc[j];
        else if (b->bt == TG_BF16) {
            uint16_t *d = (uint16_t *)b->db + j;
            *d = tg_f32_to_bf16((float)((double)tg_bf16_to_f32(*d) + b->acc[j]));
        } else {
            float *d = (float *)b->db + j;
            *d = (float)((double)*d + b->acc[j]);
        }
    }
}

/* The bias gradient (column sums of dy) in blocks of 256 columns, the
 * tasks of the pool; threads split the columns, never the rows, so every
 * column is summed in the same order for any thread count. acc: N doubles
 * of scratch. */
static void bias_grad(tg_dtype dt, tg_dtype bt, void *db, const void *dy, double *acc, int64_t M, int64_t N,
                      int threads) {
    bias_job b = {dt, bt, db, dy, acc, M, N};
    tg_parallel_range(M * N >= LIN_PAR_MIN ? threads : 1, N, 256, bias_grad_task, &b);
}

/* Forward: y_ij = sum_k x_ik W_jk + b_j,   x (M,K)  W (N,K)  b (N) or NULL
 * y (M,N). The bias is added in the same pass as the product: y's rows are
 * prefilled with b and the GEMM accumulates x W^T onto them (beta = 1);
 * in bfloat16 the GEMM reads b as beta's row itself (and W may be the
 * float32 master weight, rounded as it is packed). Without a bias the
 * GEMM overwrites y (beta = 0). Saves nothing: backward reads x and W
 * through the record's inputs. */
static void linear_forward(tg_ctx *ctx, const char *fn, tg_tensor *y, const tg_tensor *x, const tg_tensor *w,
                           const tg_tensor *b, int64_t M, int64_t N, int64_t K) {
    const size_t es = tg_esize(y->dtype);
    if (y->dtype == TG_BF16) {
        lin_gemm(ctx, fn, TG_BF16, TG_BF16, false, true, M, N, K, x->data, K, w->data, K, w->dtype == TG_F32,
                 b ? 1.0 : 0.0, y->data, N, b ? b->data : NULL);
        return;
    }
    if (b) {
        for (int64_t i = 0; i < M; i++) memcpy((char *)y->data + (size_t)(i * N) * es, b->data, (size_t)N * es);
    } else if (K == 0 && y->numel) {
        memset(y->data, 0, (size_t)y->numel * es); /* an empty sum */
    }
    lin_gemm(ctx, fn, y->dtype, y->dtype, false, true, M, N, K, x->data, K, w->data, K, false, b ? 1.0 : 0.0, y->data,
             N, NULL);
}

/* Forward was y_ij = sum_k x_ik W_jk + b_j. dy_ij reaches x_ik through W_jk,
 * W_jk through x_ik, and b_j directly, once per row:
 *   dx_ik += sum_j dy_ij W_jk      dx += dy W       (M,N)(N,K)
 *   dW_jk += sum_i dy_ij x_ik      dW += dy^T x     (N,M)(M,K)
 *   db_j  += sum_i dy_ij           column sums of dy
 * beta = 1 makes the GEMMs accumulate into the grads. A record of
 * linear_autocast has a bfloat16 dy and x and a float32 W (rounded to
 * bfloat16 as the GEMM packs it) and b, whose grads get dW and db in
 * float32. */
static void linear_backward(tg_ctx *ctx, tg_node *n) {
    const tg_tensor *dy = n->out->grad;
    tg_tensor *x = n->in[0], *w = n->in[1], *b = n->n_in > 2 ? n->in[2] : NULL;
    const int64_t M = n->i[0], N = n->i[1], K = n->i[2];
    const bool w_f32 = dy->dtype == TG_BF16 && w->dtype == TG_F32;
    tg_tensor *dx = tg_grad_of(ctx, x);
    tg_tensor *dw = tg_grad_of(ctx, w);
    tg_tensor *db = tg_grad_of(ctx, b);
    if (!tg_ok(ctx)) return;
    const tg_dtype dt = dy->dtype;
    /* dx (M,K) = dy (M,N) W (N,K) */
    if (dx && K > 0 && N > 0)
        lin_gemm(ctx, n->op->name, dt, dx->dtype, false, false, M, K, N, dy->data, N, w->data, K, w_f32, 1.0, dx->data,
                 K, NULL);
    /* dW (N,K) = dy^T (N,M) x (M,K); dy read transposed */
    if (dw && K > 0 && M > 0)
        lin_gemm(ctx, n->op->name, dt, dw->dtype, true, false, N, K, M, dy->data, N, x->data, K, false, 1.0, dw->data,
                 K, NULL);
    if (db && N > 0 && M > 0) {
        double *acc = tg_arena_alloc_fn(ctx, n->op->name, (size_t)N * sizeof *acc);
        if (!acc) return;
        bias_grad(dt, db->dtype, db->data, dy->data, acc, M, N, tg_threads(ctx));
    }
}

/* linear_autocast's double-backward rule: linear_grad's products
 * on the bfloat16 values, W's copy remade by a recorded cast (so the
 * second derivative reaches W), dW and db cast to float32:
 *   dx = dy bf16(W),  dW = f32(dy^T x),  db = f32(sum_rows dy). */
static bool linear_autocast_grad(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    tg_tensor *x = n->in[0], *w = n->in[1], *b = n->n_in > 2 ? n->in[2] : NULL;
    const int64_t M = n->i[0], N = n->i[1], K = n->i[2];
    tg_tensor *dy2 = tg_reshape(ctx, dy, 2, (int64_t[]){M, N});
    if (x->requires_grad) dx[0] = tg_reshape(ctx, tg_matmul(ctx, dy2, tg_cast(ctx, w, TG_BF16)), x->ndim, x->shape);
    if (w->requires_grad)
        dx[1] = tg_cast(ctx, tg_matmul(ctx, tg_transpose(ctx, dy2), tg_reshape(ctx, x, 2, (int64_t[]){M, K})), TG_F32);
    if (b && b->requires_grad) dx[2] = tg_cast(ctx, tg_sum_axis(ctx, dy2, 0, false), TG_F32);
    return tg_ok(ctx);
}

/* linear: y = x W^T + b with x viewed as (M, K) rows: dx = dy W,
 * dW = dy^T x, db = sum_rows dy. */
static bool linear_grad(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    tg_tensor *x = n->in[0], *w = n->in[1], *b = n->n_in > 2 ? n->in[2] : NULL;
    const int64_t M = n->i[0], N = n->i[1], K = n->i[2];
    tg_tensor *dy2 = tg_reshape(ctx, dy, 2, (int64_t[]){M, N});
    if (x->requires_grad) dx[0] = tg_reshape(ctx, tg_matmul(ctx, dy2, w), x->ndim, x->shape);
    if (w->requires_grad) dx[1] = tg_matmul(ctx, tg_transpose(ctx, dy2), tg_reshape(ctx, x, 2, (int64_t[]){M, K}));
    if (b && b->requires_grad) dx[2] = tg_sum_axis(ctx, dy2, 0, false);
    return tg_ok(ctx);
}

/* y = x W^T + b over rows of x (K features in, N out):
 *   t_y = t_x W^T + x t_W^T + t_b */
static tg_tensor *linear_jvp(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) {
    const int64_t rows = n->i[0], N = n->i[1], K = n->i[2];
    const tg_tensor *x = n->in[0], *w = n->in[1];
    tg_tensor *y = tg_new_like(ctx, "tg_jvp", n->out);
    for (int64_t r = 0; y && r < rows; r++)
        for (int64_t o = 0; o < N; o++) {
            double s = n->n_in > 2 && t[2] ? tg_load(t[2], o) : 0.0;
            for (int64_t c = 0; c < K; c++)
                s +=
                    tg_load(t[0], r * K + c) * tg_load(w, o * K + c) + tg_load(x, r * K + c) * tg_load(t[1], o * K + c);
            tg_store(y, r * N + o, s);
        }
    return y;
}

/* Linear in each input, so a check's float32 step can be large. */
const tg_op_def tg_linear_op = TG_OP("linear", linear_backward, linear_grad, linear_jvp, .args = "bias=1",
                                     .inputs = "x=-2:2,weight=-2:2,bias=-2:2", .f32 = {.h = 0.1});

tg_tensor *tg_linear_fused(tg_ctx *ctx, tg_tensor *x, tg_tensor *weight, tg_tensor *bias) {
    /* bfloat16 in its own GEMM; float16 (or a dtype error, reported on the
     * way) through the float32 GEMM on widened copies */
    const bool lowp = tg_lowp_args(ctx, __func__, 3, (tg_tensor *[]){x, weight, bias});
    const bool bf16 = lowp && tg_ok(ctx) && x && !tg_stale(ctx, x) && x->dtype == TG_BF16;
    if (lowp && !bf16)
        return tg_lowp_out(ctx,
                           tg_linear_fused(ctx, tg_lowp_in(ctx, x), tg_lowp_in(ctx, weight), tg_lowp_in(ctx, bias)), x);
    if (!tg_check_arg_any(ctx, __func__, "x", x) || !tg_check_arg_any(ctx, __func__, "weight", weight)) return NULL;
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
    tg_node *n = tg_record(ctx, &tg_linear_op, y, bias ? 3 : 2, in);
    if (n) {
        n->i[0] = rows, n->i[1] = N, n->i[2] = K;
        /* kept by pointer: dx needs W, dW needs x */
        size_t es = tg_esize(x->dtype), bytes = 0;
        if (x->requires_grad) bytes += (size_t)weight->numel * es;
        if (weight->requires_grad) bytes += (size_t)x->numel * es;
        tg_node_count_saved(ctx, n, bytes);
    }
    return tg_ok(ctx) ? y : NULL;
}

/* The module under bfloat16 autocast: y = x W^T + b in bfloat16, W read
 * as float32 and rounded to bfloat16 as the GEMM packs it (the bits of its
 * autocast copy, which is never made) and b's copy (tg_autocast_data, no
 * cast on the tape), recorded with w and b themselves as inputs (see the
 * top of this file). x is bfloat16 (tg_autocast_input made it so); its
 * last dim was checked by tg_linear_forward. */
/* Its records: Linear's backward and tangent rule, its own double
 * backward. */
static const tg_op_def LINEAR_AUTOCAST = {
    .name = "linear", .backward = linear_backward, .backward_graph = linear_autocast_grad, .jvp = linear_jvp};

static tg_tensor *linear_autocast(tg_ctx *ctx, tg_tensor *x, tg_tensor *w, tg_tensor *b) {
    static const char fn[] = "tg_linear_forward";
    tg_tensor *b16 = tg_autocast_data(ctx, b);
    if (!x || (b && !b16) || !tg_ok(ctx)) return NULL;
    const int64_t N = w->shape[0], K = w->shape[1];
    int64_t shape[TG_MAX_DIMS], rows = 1;
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] = N;
    for (int d = 0; d < x->ndim - 1; d++) rows *= x->shape[d];
    tg_tensor *y = tg_new_tensor(ctx, fn, TG_BF16, x->ndim, shape);
    if (!y) return NULL;
    linear_forward(ctx, fn, y, x, w, b16, rows, N, K);
    tg_tensor *in[3] = {x, w, b};
    tg_node *n = tg_record(ctx, &LINEAR_AUTOCAST, y, b ? 3 : 2, in);
    if (n) {
        n->i[0] = rows, n->i[1] = N, n->i[2] = K;
        /* kept by pointer: dx needs W, dW needs x */
        size_t bytes = 0;
        if (x->requires_grad) bytes += (size_t)w->numel * tg_esize(w->dtype);
        if (w->requires_grad) bytes += (size_t)x->numel * tg_esize(x->dtype);
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
    tg_tensor *xc = tg_autocast_input(ctx, x);
    if (tg_ctx_autocast(ctx) == TG_BF16 && layer->weight->dtype == TG_F32 && xc && xc->dtype == TG_BF16)
        return linear_autocast(ctx, xc, layer->weight, layer->bias);
    return tg_linear_fused(ctx, xc, tg_autocast_param(ctx, layer->weight), tg_autocast_param(ctx, layer->bias));
}

bool tg_linear_params(tg_ctx *ctx, tg_linear *layer, tg_params *list) {
    return tg_module_params(ctx, TG_MODULE(layer), list);
}

void tg_linear_free(tg_ctx *ctx, tg_linear *layer) { tg_module_free(ctx, TG_MODULE(layer)); }

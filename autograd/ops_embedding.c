/* Embedding lookup: rows of a weight matrix picked by integer indices.
 *
 *   y[i, :] = W[idx_i, :]     W (V,D), idx (n) with shape S, y S + (D)
 *
 * The forward copies rows; the backward scatter-adds the gradient rows
 * back. The indices are copied at the forward (the caller's buffer may
 * change before backward): that copy is all the op saves.
 *
 * The kernel, written once for T (float, double), opens the file, which
 * instantiates itself (tensor/instantiate.h) and so defines
 *   embedding_scatter_add_f32  embedding_scatter_add_f64 */
#ifdef T /* the kernels, compiled once per element type (tensor/instantiate.h) */

/* dw[idx[i], d] += dy[i, d] for i < n (in increasing i) and d0 <= d < d1.
 * dw: (V, D)   dy: (n, D)   idx: (n), each in 0..V-1 */
static void TG_FN(embedding_scatter_add)(T *restrict dw, const T *restrict dy, const int64_t *restrict idx, int64_t n,
                                         int64_t D, int64_t d0, int64_t d1) {
    for (int64_t i = 0; i < n; i++) {
        T *row = dw + idx[i] * D;
        const T *g = dy + i * D;
        for (int64_t d = d0; d < d1; d++) row[d] += g[d];
    }
}

#else /* the op, compiled once */

#include "autograd/lowp.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "tensor/parallel.h"

#include <string.h>

#define TG_TEMPLATE "autograd/ops_embedding.c"
#include "tensor/instantiate.h"

/* Below this many gradient elements one thread does the scatter. */
#define EMB_PAR_MIN 65536

/* Forward: y[i, :] = W[idx_i, :], a row copy per index.
 * y: (n, D)   w: (V, D)   idx: (n) */
static void embedding_forward(void *y, const void *w, const int64_t *idx, int64_t n, int64_t D, size_t es) {
    size_t row = (size_t)D * es;
    for (int64_t i = 0; i < n; i++)
        memcpy((unsigned char *)y + (size_t)i * row, (const unsigned char *)w + (size_t)idx[i] * row, row);
}

/* Forward was y[i, d] = W[idx_i, d]: element (v, d) of W reaches every
 * output row i with idx_i = v, so
 *   dW[v, d] += sum over {i : idx_i = v} of dy[i, d]
 * i.e. scatter-add each dy row into row idx_i; repeated indices
 * accumulate. Threads split the columns d (never the rows i), and each
 * column is summed in increasing i, so the result is the same for any
 * thread count. */
typedef struct {
    tg_tensor *dw;
    const tg_tensor *dy;
    const int64_t *idx;
    int64_t cnt, D;
} emb_job;

/* Columns [d0, d1) of the scatter: one task of the pool. */
static void embedding_task(void *p, int64_t d0, int64_t d1, int worker) {
    const emb_job *j = p;
    (void)worker;
    if (j->dw->dtype == TG_F64) embedding_scatter_add_f64(j->dw->data, j->dy->data, j->idx, j->cnt, j->D, d0, d1);
    else embedding_scatter_add_f32(j->dw->data, j->dy->data, j->idx, j->cnt, j->D, d0, d1);
}

static void embedding_backward(tg_ctx *ctx, tg_node *n) {
    tg_tensor *dw = tg_grad_of(ctx, n->in[0]);
    if (!dw) return;
    emb_job j = {dw, n->out->grad, n->saved, n->i[0], dw->shape[1]};
    /* one piece of whole 16-column groups per thread */
    const int nt = j.cnt * j.D >= EMB_PAR_MIN && j.D >= 16 ? tg_threads(ctx) : 1;
    const int64_t per = (j.D + nt - 1) / nt;
    tg_parallel_range(nt, j.D, (per + 15) / 16 * 16, embedding_task, &j);
}

/* y[i, :] = W[idx_i, :]: dW = onehot^T dy', onehot (cnt, V) constant. */
static bool embedding_grad(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    tg_tensor *w = n->in[0];
    const int64_t cnt = n->i[0], V = w->shape[0], D = w->shape[1];
    const int64_t *idx = n->saved;
    tg_tensor *oh = tg_zeros(ctx, w->dtype, 2, (int64_t[]){cnt, V});
    if (!oh) return false;
    for (int64_t i = 0; i < cnt; i++) tg_store(oh, i * V + idx[i], 1.0);
    dx[0] = tg_matmul(ctx, tg_transpose(ctx, oh), tg_reshape(ctx, dy, 2, (int64_t[]){cnt, D}));
    return tg_ok(ctx);
}

/* y[..., :] = weight[idx[...], :]: t_y = the same rows of t_weight. */
static tg_tensor *embedding_jvp(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) {
    return tg_embedding(ctx, t[0], n->out->ndim - 1, n->out->shape, n->saved);
}

/* A check draws the indices with at least one repeat. */
const tg_op_def tg_embedding_op =
    TG_OP("embedding", embedding_backward, embedding_grad, embedding_jvp, .inputs = "weight=-2:2");

tg_tensor *tg_embedding(tg_ctx *ctx, tg_tensor *weight, int ndim, const int64_t *shape, const int64_t *indices) {
    if (tg_lowp_args(ctx, __func__, 1, &weight)) /* the rows gathered, and dW scattered, in float32 */
        return tg_lowp_out(ctx, tg_embedding(ctx, tg_lowp_in(ctx, weight), ndim, shape, indices), weight);
    if (!tg_check_arg(ctx, __func__, "weight", weight)) return NULL;
    char sw[TG_SHAPE_STR], ss[TG_SHAPE_STR];
    if (weight->ndim != 2) {
        tg_error(ctx, TG_ERR_SHAPE, __func__, "weight of shape %s is not 2-D (V, D)", tg_shape_of(sw, weight));
        return NULL;
    }
    if (ndim < 0 || ndim > TG_MAX_DIMS - 1) {
        tg_error(ctx, TG_ERR_SHAPE, __func__, "indices ndim %d is outside 0..%d (the result adds a dim)", ndim,
                 TG_MAX_DIMS - 1);
        return NULL;
    }
    int64_t cnt;
    if (!tg_check_shape(ctx, __func__, ndim, shape, &cnt)) return NULL;
    if (cnt > 0 && !indices) {
        tg_null_error(ctx, __func__, "indices");
        return NULL;
    }
    int64_t V = weight->shape[0], D = weight->shape[1];
    for (int64_t i = 0; i < cnt; i++) {
        if (indices[i] < 0 || indices[i] >= V) {
            tg_error(ctx, TG_ERR_INDEX, __func__,
                     "indices[%lld] = %lld is out of range 0..%lld for weight %s (indices %s)", (long long)i,
                     (long long)indices[i], (long long)V - 1, tg_shape_of(sw, weight),
                     tg_shape_str(ss, sizeof ss, ndim, shape));
            return NULL;
        }
    }
    int64_t oshape[TG_MAX_DIMS];
    for (int d = 0; d < ndim; d++) oshape[d] = shape[d];
    oshape[ndim] = D;
    tg_tensor *y = tg_new_tensor(ctx, __func__, weight->dtype, ndim + 1, oshape);
    if (!y) return NULL;
    embedding_forward(y->data, weight->data, indices, cnt, D, tg_esize(weight->dtype));
    tg_node *n = tg_record(ctx, &tg_embedding_op, y, 1, &weight);
    if (n) {
        n->i[0] = cnt;
        int64_t *saved = tg_node_save(ctx, n, (size_t)(cnt > 0 ? cnt : 1) * sizeof *saved);
        if (saved && cnt) memcpy(saved, indices, (size_t)cnt * sizeof *saved);
    }
    return tg_ok(ctx) ? y : NULL;
}

#endif

/* Fused scaled-dot-product attention, one tape record:
 *   o = softmax_rows(scale q k^T + mask) v
 * over q (..., Tq, D), k (..., Tk, D), v (..., Tk, Dv) -> o (..., Tq, Dv),
 * the leading dims (batch, heads) the same for all four. The optional
 * causal mask hides key j from query i when j > i (Tq == Tk).
 *
 * Flash-attention style (Dao et al. 2022): the forward computes the
 * (Tq, Tk) scores a block of query rows at a time and keeps only one
 * number per query row, the log-sum-exp of its scores; the backward
 * recomputes each block of probabilities from q, k and that number. So
 * the extra memory is O(Tq) per head, where autograd through the composed
 * ops (tg_attention_composed) keeps the (Tq, Tk) probabilities, twice.
 * The kernels and their derivation are in ops_attention.inc; the
 * derivation in full, the memory table and a worked example in
 * docs/attention-gradients.md.
 *
 * Threads: the (batch, head) pairs are independent. They are cut into one
 * contiguous run per thread, each run done by one thread in pair order
 * with its own scratch, and each pair by the same one-thread kernel: the
 * result is bitwise the same for any thread count. */
#include "autograd/lowp.h"
#include "autograd/grad_graph.h"
#include "autograd/jvp.h"
#include "autograd/ops.h"
#include "autograd/ops_attention.h"
#include "autograd/tape.h"
#include "tensor/gemm.h"
#include "tensor/parallel.h"

#include <math.h>
#include <string.h>

/* Query rows per block (BR): the scratch of a pair is (BR, Tk), one block
 * of scores (two in backward: P and dP), which stays in L2 for Tk in the
 * thousands. Taller blocks make better GEMMs (each block of k is reused
 * over more rows); with the causal mask a block computes the whole square
 * on its diagonal, half of it masked, so shorter blocks waste less.
 * Measured at (B, H) = (4, 6), D = 32 and 64, T = 64 .. 1024, one thread:
 * with the mask 32 is the best or within noise of it (64 cost 10-15% at
 * T = 64), without it 64. */
static int64_t attn_block_rows(bool causal) { return causal ? 32 : 64; }

#define TG_TEMPLATE "autograd/ops_attention.inc"
#include "tensor/instantiate.h"

/* Threads for `pairs` problems (tasks of the pool, one pair each): at
 * most one per pair. */
static int attn_threads(const tg_ctx *ctx, int64_t pairs) {
    int nt = tg_threads(ctx);
    if (nt < 1) nt = 1;
    return pairs < nt ? (int)(pairs > 0 ? pairs : 1) : nt;
}

/* bytes rounded up to the arena's alignment: every scratch buffer starts
 * aligned (the f64 `inv` after f32 buffers of odd length would not be). */
static size_t attn_aligned(size_t bytes) { return (bytes + TG_ALIGN - 1) / TG_ALIGN * TG_ALIGN; }

/* Scratch of `nt` runs of `bytes` each (rounded up to the alignment), from
 * the arena; *stride gets the rounded size. */
static unsigned char *attn_scratch(tg_ctx *ctx, const char *fn, int nt, size_t bytes, size_t *stride) {
    *stride = attn_aligned(bytes);
    return tg_arena_alloc_fn(ctx, fn, *stride * (size_t)nt);
}

/* What the tasks (one (batch, head) pair each) read; each runner uses the
 * scratch of its worker id. */
typedef struct {
    tg_tensor *o, *dq, *dk, *dv;
    const tg_tensor *q, *k, *v, *dout;
    double *lse;
    tg_attn_dims d;
    double scale;
    bool causal;
    int64_t off; /* the causal mask's offset: query i sees keys j <= off + i */
    int64_t cap; /* a KV cache's rows per pair (tg_attention_cached) */
    int64_t BR;
    unsigned char *scratch;
    size_t stride, off1, off2; /* scratch per worker; offsets in it */
} attn_job;

/* The fields both directions set; the caller adds its tensors. */
static attn_job attn_job_of(const tg_tensor *q, const tg_tensor *k, const tg_tensor *v, double *lse, tg_attn_dims d,
                            double scale, bool causal, int64_t BR, unsigned char *scratch, size_t stride, size_t off1,
                            size_t off2) {
    attn_job j = {0};
    j.q = q, j.k = k, j.v = v, j.lse = lse, j.d = d, j.scale = scale, j.causal = causal, j.BR = BR;
    j.scratch = scratch, j.stride = stride, j.off1 = off1, j.off2 = off2;
    return j;
}

static void attention_forward_task(void *arg, int64_t b, int worker) {
    const attn_job *j = arg;
    const tg_attn_dims d = j->d;
    unsigned char *s = j->scratch + j->stride * (size_t)worker, *kt = s + j->off1;
    double *inv = (double *)(s + j->off2);
    const int64_t oq = b * d.Tq * d.D, ok = b * d.Tk * d.D, ov = b * d.Tk * d.Dv, oo = b * d.Tq * d.Dv;
    if (j->q->dtype == TG_F64)
        attention_forward_f64((double *)j->o->data + oo, j->lse + b * d.Tq, (const double *)j->q->data + oq,
                              (const double *)j->k->data + ok, (const double *)j->v->data + ov, d.Tq, d.Tk, d.D, d.Dv,
                              j->scale, j->causal, j->off, j->BR, (double *)s, (double *)kt, inv);
    else
        attention_forward_f32((float *)j->o->data + oo, j->lse + b * d.Tq, (const float *)j->q->data + oq,
                              (const float *)j->k->data + ok, (const float *)j->v->data + ov, d.Tq, d.Tk, d.D, d.Dv,
                              j->scale, j->causal, j->off, j->BR, (float *)s, (float *)kt, inv);
}

/* Forward over every pair: o and lse (pairs x Tq doubles). */
static void attention_run(tg_ctx *ctx, const char *fn, tg_tensor *o, double *lse, const tg_tensor *q,
                          const tg_tensor *k, const tg_tensor *v, tg_attn_dims d, double scale, bool causal) {
    const int nt = attn_threads(ctx, d.pairs);
    const size_t es = tg_esize(q->dtype);
    size_t stride;
    /* s (BR, Tk), kt (D, Tk), then inv (BR doubles) */
    const int64_t BR = attn_block_rows(causal);
    const size_t kt_off = attn_aligned((size_t)(BR * d.Tk) * es),
                 inv_off = kt_off + attn_aligned((size_t)(d.D * d.Tk) * es);
    unsigned char *scratch = attn_scratch(ctx, fn, nt, inv_off + (size_t)BR * sizeof(double), &stride);
    if (!scratch) return;
    attn_job j = attn_job_of(q, k, v, lse, d, scale, causal, BR, scratch, stride, kt_off, inv_off);
    j.o = o;
    tg_parallel(nt, d.pairs, attention_forward_task, &j);
}

/* The element pointer of t at offset off, or NULL for a NULL t (a grad
 * that is not wanted). */
static void *at(tg_tensor *t, int64_t off) {
    return t ? (unsigned char *)t->data + (size_t)off * tg_esize(t->dtype) : NULL;
}

static void attention_backward_task(void *arg, int64_t b, int worker) {
    const attn_job *j = arg;
    const tg_attn_dims d = j->d;
    unsigned char *s = j->scratch + j->stride * (size_t)worker, *kt = s + j->off1, *vt = s + j->off2;
    const int64_t oq = b * d.Tq * d.D, ok = b * d.Tk * d.D, ov = b * d.Tk * d.Dv, oo = b * d.Tq * d.Dv;
    if (j->q->dtype == TG_F64)
        attention_backward_f64(at(j->dq, oq), at(j->dk, ok), at(j->dv, ov), (const double *)j->dout->data + oo,
                               (const double *)j->q->data + oq, (const double *)j->k->data + ok,
                               (const double *)j->v->data + ov, (const double *)j->o->data + oo, j->lse + b * d.Tq,
                               d.Tq, d.Tk, d.D, d.Dv, j->scale, j->causal, j->BR, (double *)s, (double *)kt,
                               (double *)vt);
    else
        attention_backward_f32(at(j->dq, oq), at(j->dk, ok), at(j->dv, ov), (const float *)j->dout->data + oo,
                               (const float *)j->q->data + oq, (const float *)j->k->data + ok,
                               (const float *)j->v->data + ov, (const float *)j->o->data + oo, j->lse + b * d.Tq, d.Tq,
                               d.Tk, d.D, d.Dv, j->scale, j->causal, j->BR, (float *)s, (float *)kt, (float *)vt);
}

/* Forward was o = softmax_rows(scale q k^T + mask) v with lse saved per
 * query row. With P the probabilities, dO the gradient of o and
 * D_i = sum_e dO_ie o_ie:
 *   dV += P^T dO
 *   dS  = P o (dO V^T - D)    (o: elementwise; D broadcast along rows)
 *   dQ += scale dS K
 *   dK += scale dS^T Q
 * P recomputed block by block as exp(scale q k^T - lse): see
 * attention_backward in ops_attention.inc and, step by step,
 * docs/attention-gradients.md. */
static void attention_backward(tg_ctx *ctx, tg_node *n) {
    tg_tensor *q = n->in[0], *k = n->in[1], *v = n->in[2];
    tg_tensor *dq = tg_grad_of(ctx, q), *dk = tg_grad_of(ctx, k), *dv = tg_grad_of(ctx, v);
    const tg_tensor *o = n->out, *dout = n->out->grad;
    const double *lse = n->saved;
    const tg_attn_dims d = {n->i[1], n->i[2], n->i[3], q->shape[q->ndim - 1], v->shape[v->ndim - 1]};
    const double scale = n->f[0];
    const bool causal = n->i[0] != 0;
    if ((!dq && !dk && !dv) || o->numel == 0) return;
    const int nt = attn_threads(ctx, d.pairs);
    const size_t es = tg_esize(q->dtype);
    size_t stride;
    /* P and dP 2 (BR, Tk), kt (D, Tk), vt (Dv, Tk) */
    const int64_t BR = attn_block_rows(causal);
    const size_t kt_off = attn_aligned((size_t)(2 * BR * d.Tk) * es),
                 vt_off = kt_off + attn_aligned((size_t)(d.D * d.Tk) * es);
    unsigned char *scratch = attn_scratch(ctx, n->op->name, nt, vt_off + (size_t)(d.Dv * d.Tk) * es, &stride);
    if (!scratch) return;
    attn_job j = attn_job_of(q, k, v, (double *)lse, d, scale, causal, BR, scratch, stride, kt_off, vt_off);
    j.dq = dq, j.dk = dk, j.dv = dv, j.o = (tg_tensor *)o, j.dout = dout;
    tg_parallel(nt, d.pairs, attention_backward_task, &j);
}

bool tg_attention_check(tg_ctx *ctx, const char *fn, const tg_tensor *q, const tg_tensor *k, const tg_tensor *v,
                        bool causal, double *scale, tg_attn_dims *d) {
    if (!tg_check_arg(ctx, fn, "q", q) || !tg_check_arg(ctx, fn, "k", k) || !tg_check_arg(ctx, fn, "v", v))
        return false;
    if (!tg_check_same_dtype(ctx, fn, q, k) || !tg_check_same_dtype(ctx, fn, q, v)) return false;
    char sq[TG_SHAPE_STR], sk[TG_SHAPE_STR], sv[TG_SHAPE_STR];
    const int nd = q->ndim;
    const char *bad = NULL;
    if (nd < 2 || k->ndim != nd || v->ndim != nd) bad = "need the same number of dims, at least 2";
    for (int i = 0; !bad && i < nd - 2; i++)
        if (k->shape[i] != q->shape[i] || v->shape[i] != q->shape[i]) bad = "the leading dims differ";
    if (!bad && k->shape[nd - 1] != q->shape[nd - 1]) bad = "q and k differ in the last dim (D)";
    if (!bad && v->shape[nd - 2] != k->shape[nd - 2]) bad = "k and v differ in the number of keys (Tk)";
    if (!bad && k->shape[nd - 2] == 0) bad = "there are no keys (Tk = 0): the softmax of an empty row";
    if (!bad && q->shape[nd - 1] == 0) bad = "D = 0";
    if (!bad && causal && q->shape[nd - 2] != k->shape[nd - 2]) bad = "the causal mask needs Tq == Tk";
    if (bad) {
        tg_error(ctx, TG_ERR_SHAPE, fn, "q %s, k %s, v %s: %s (q (..., Tq, D), k (..., Tk, D), v (..., Tk, Dv))",
                 tg_shape_of(sq, q), tg_shape_of(sk, k), tg_shape_of(sv, v), bad);
        return false;
    }
    if (!isfinite(*scale)) {
        tg_error(ctx, TG_ERR_VALUE, fn, "scale = %g is not finite (0 means 1/sqrt(D))", *scale);
        return false;
    }
    d->pairs = 1;
    for (int i = 0; i < nd - 2; i++) d->pairs *= q->shape[i];
    d->Tq = q->shape[nd - 2];
    d->Tk = k->shape[nd - 2];
    d->D = q->shape[nd - 1];
    d->Dv = v->shape[nd - 1];
    if (*scale == 0) *scale = 1.0 / sqrt((double)d->D);
    return true;
}

/* o = softmax(scale q k^T + mask) v. Its gradient is the create_graph
 * gradient of the same function composed from recorded ops (matmul,
 * masked_fill, softmax), walked over those records only: the composed
 * ops' own rules give the second derivatives. */
static bool attention_grad(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx) {
    tg_tensor *q = n->in[0], *k = n->in[1], *v = n->in[2];
    const int64_t floor = ctx->tape.n_nodes, Tq = q->shape[q->ndim - 2], Tk = k->shape[k->ndim - 2];
    tg_tensor *s = tg_mul_scalar(ctx, tg_matmul(ctx, q, tg_transpose(ctx, k)), n->f[0]);
    if (n->i[0] && s) {
        tg_tensor *mask = tg_zeros(ctx, q->dtype, 2, (int64_t[]){Tq, Tk});
        if (!mask) return false;
        for (int64_t i = 0; i < Tq; i++)
            for (int64_t j = i + 1; j < Tk; j++) tg_store(mask, i * Tk + j, 1.0);
        s = tg_masked_fill(ctx, s, mask, -INFINITY);
    }
    tg_tensor *o = tg_matmul(ctx, tg_softmax(ctx, s), v);
    if (!tg_ok(ctx)) return false;
    if (!o->requires_grad) return true;
    tg_tensor *g[3];
    if (!tg_grad_walk(ctx, "tg_grad", o, dy, floor, 3, n->in, g, true)) return false;
    for (int i = 0; i < 3; i++)
        if (tg_node_needs_grad(n, i)) dx[i] = g[i];
    return true;
}

/* For each (batch, head) pair and query row i:
 *   s_ij = scale q_i . k_j  (j <= i when causal),  P_i = softmax(s_i),
 *   o_i = sum_j P_ij v_j
 * so
 *   t_s_ij = scale (t_q_i . k_j + q_i . t_k_j)
 *   t_P_ij = P_ij (t_s_ij - sum_l P_il t_s_il)
 *   t_o_i  = sum_j (t_P_ij v_j + P_ij t_v_j) */
static tg_tensor *attention_jvp(tg_ctx *ctx, tg_node *n, tg_tensor *const *t) {
    const tg_tensor *q = n->in[0], *k = n->in[1], *v = n->in[2];
    const double scale = n->f[0];
    const bool causal = n->i[0] != 0;
    const int64_t pairs = n->i[1], Tq = n->i[2], Tk = n->i[3];
    const int64_t D = q->shape[q->ndim - 1], Dv = v->shape[v->ndim - 1];
    double *Q = tg_jvp_values(ctx, q), *K = tg_jvp_values(ctx, k), *V = tg_jvp_values(ctx, v);
    double *tQ = tg_jvp_values(ctx, t[0]), *tK = tg_jvp_values(ctx, t[1]), *tV = tg_jvp_values(ctx, t[2]);
    double *P = tg_arena_alloc_fn(ctx, "tg_jvp", (size_t)(2 * Tk) * sizeof *P);
    double *to = tg_arena_alloc_fn(ctx, "tg_jvp", (size_t)(n->out->numel ? n->out->numel : 1) * sizeof *to);
    if (!tg_ok(ctx)) return NULL;
    double *ts = P + Tk;
    for (int64_t b = 0; b < pairs; b++) {
        const double *qb = Q + b * Tq * D, *kb = K + b * Tk * D, *vb = V + b * Tk * Dv;
        const double *tqb = tQ + b * Tq * D, *tkb = tK + b * Tk * D, *tvb = tV + b * Tk * Dv;
        for (int64_t i = 0; i < Tq; i++) {
            const int64_t nk = causal ? i + 1 : Tk;
            double m = -INFINITY, z = 0, mean_ts = 0;
            for (int64_t j = 0; j < nk; j++) {
                double s = 0, d = 0;
                for (int64_t c = 0; c < D; c++) {
                    s += qb[i * D + c] * kb[j * D + c];
                    d += tqb[i * D + c] * kb[j * D + c] + qb[i * D + c] * tkb[j * D + c];
                }
                P[j] = scale * s;
                ts[j] = scale * d;
                m = fmax(m, P[j]);
            }
            for (int64_t j = 0; j < nk; j++) z += (P[j] = exp(P[j] - m));
            for (int64_t j = 0; j < nk; j++) mean_ts += (P[j] /= z) * ts[j];
            double *out = to + (b * Tq + i) * Dv;
            for (int64_t c = 0; c < Dv; c++) out[c] = 0;
            for (int64_t j = 0; j < nk; j++) {
                const double tp = P[j] * (ts[j] - mean_ts);
                for (int64_t c = 0; c < Dv; c++) out[c] += tp * vb[j * Dv + c] + P[j] * tvb[j * Dv + c];
            }
        }
    }
    return tg_jvp_tensor(ctx, n->out, to);
}

/* A check's float32 step: a perturbed element moves a whole row of
 * scores. */
const tg_op_def tg_attention_op =
    TG_OP("attention", attention_backward, attention_grad, attention_jvp, .args = "causal=1,scale=0",
          .inputs = "q=-2:2,k=-2:2,v=-2:2", .f32 = {.h = 1e-2});

tg_tensor *tg_attention(tg_ctx *ctx, tg_tensor *q, tg_tensor *k, tg_tensor *v, bool causal, double scale) {
    if (tg_lowp_args(ctx, __func__, 3, (tg_tensor *[]){q, k, v})) { /* bfloat16, float16: autograd/lowp.h */
        tg_tensor *w[3];
        tg_lowp_in_all(ctx, 3, (tg_tensor *[]){q, k, v}, w);
        return tg_lowp_out(ctx, tg_attention(ctx, w[0], w[1], w[2], causal, scale), q);
    }
    tg_attn_dims d;
    if (!tg_attention_check(ctx, __func__, q, k, v, causal, &scale, &d)) return NULL;
    int64_t shape[TG_MAX_DIMS];
    memcpy(shape, q->shape, sizeof shape);
    shape[q->ndim - 1] = d.Dv;
    tg_tensor *o = tg_new_tensor(ctx, __func__, q->dtype, q->ndim, shape);
    double *lse = tg_arena_alloc_fn(ctx, __func__, (size_t)(d.pairs * d.Tq + 1) * sizeof(double));
    if (!o || !lse) return NULL;
    if (o->numel) attention_run(ctx, __func__, o, lse, q, k, v, d, scale, causal);
    tg_node *n = tg_record(ctx, &tg_attention_op, o, 3, (tg_tensor *[]){q, k, v});
    if (n) {
        n->saved = lse;
        n->f[0] = scale;
        n->i[0] = causal, n->i[1] = d.pairs, n->i[2] = d.Tq, n->i[3] = d.Tk;
        /* saved: lse, one double per query row; kept by pointer: q and k
         * (to recompute P), and v and o when dq or dk is wanted (dP = dO
         * V^T, D = rowsum(dO o)); each distinct tensor once */
        const size_t es = tg_esize(q->dtype);
        size_t bytes = (size_t)(d.pairs * d.Tq) * sizeof(double) + (size_t)q->numel * es;
        if (k != q) bytes += (size_t)k->numel * es;
        if (q->requires_grad || k->requires_grad) {
            if (v != q && v != k) bytes += (size_t)v->numel * es;
            bytes += (size_t)o->numel * es;
        }
        tg_node_count_saved(ctx, n, bytes);
    }
    return tg_ok(ctx) ? o : NULL;
}

/* ---- attention over a KV cache (generation) ------------------------------ */

/* One pair of tg_attention_cached: the queries of pair b over the first
 * Tk positions of its cached keys, kept transposed (D, cap), and values
 * (cap, Dv). */
static void attention_cached_task(void *arg, int64_t b, int worker) {
    const attn_job *j = arg;
    const tg_attn_dims d = j->d;
    unsigned char *s = j->scratch + j->stride * (size_t)worker;
    double *inv = (double *)(s + j->off2);
    const int64_t oq = b * d.Tq * d.D, ok = b * d.D * j->cap, ov = b * j->cap * d.Dv, oo = b * d.Tq * d.Dv;
    if (j->q->dtype == TG_F64)
        attention_forward_kt_f64((double *)j->o->data + oo, j->lse + b * d.Tq, (const double *)j->q->data + oq,
                                 (const double *)j->k->data + ok, j->cap, (const double *)j->v->data + ov, d.Tq, d.Tk,
                                 d.D, d.Dv, j->scale, true, j->off, j->BR, (double *)s, inv);
    else
        attention_forward_kt_f32((float *)j->o->data + oo, j->lse + b * d.Tq, (const float *)j->q->data + oq,
                                 (const float *)j->k->data + ok, j->cap, (const float *)j->v->data + ov, d.Tq, d.Tk,
                                 d.D, d.Dv, j->scale, true, j->off, j->BR, (float *)s, inv);
}

/* The float32 copy of the first `cols` columns of each row of x (..., R,
 * cap), as (..., R, cols): a 16-bit cache widened for the float32 kernel,
 * as tg_attention widens its 16-bit inputs. */
static tg_tensor *attn_widen(tg_ctx *ctx, const char *fn, const tg_tensor *x, int64_t cols) {
    const int64_t cap = x->shape[x->ndim - 1], rows = x->numel / cap;
    int64_t shape[TG_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] = cols;
    tg_tensor *y = tg_new_tensor(ctx, fn, TG_F32, x->ndim, shape);
    if (!y) return NULL;
    for (int64_t r = 0; r < rows; r++)
        tg_convert_n((float *)y->data + r * cols, TG_F32, (const uint16_t *)x->data + r * cap, x->dtype, (size_t)cols);
    return y;
}

tg_tensor *tg_attention_cached(tg_ctx *ctx, const char *fn, tg_tensor *q, const tg_tensor *kt, const tg_tensor *v,
                               int64_t Tk) {
    if (!tg_check_arg_any(ctx, fn, "q", q) || !tg_check_arg_any(ctx, fn, "kt", kt) ||
        !tg_check_arg_any(ctx, fn, "v", v))
        return NULL;
    const int nd = q->ndim;
    char sq[TG_SHAPE_STR], sk[TG_SHAPE_STR], sv[TG_SHAPE_STR];
    const char *bad = NULL;
    if (nd < 2 || kt->ndim != nd || v->ndim != nd) bad = "need the same number of dims, at least 2";
    for (int i = 0; !bad && i < nd - 2; i++)
        if (kt->shape[i] != q->shape[i] || v->shape[i] != q->shape[i]) bad = "the leading dims differ";
    if (!bad && (kt->shape[nd - 2] != q->shape[nd - 1] || q->shape[nd - 1] < 1)) bad = "q and k differ in D, or D = 0";
    if (!bad && v->shape[nd - 2] != kt->shape[nd - 1]) bad = "k and v hold different numbers of positions";
    if (!bad && (q->shape[nd - 2] < 1 || Tk < q->shape[nd - 2] || Tk > kt->shape[nd - 1]))
        bad = "need 1 <= Tq <= Tk <= the cache's positions";
    if (!bad && (q->dtype != kt->dtype || q->dtype != v->dtype)) bad = "q, k and v differ in dtype";
    if (bad) {
        tg_error(ctx, TG_ERR_SHAPE, fn, "q %s, k cache %s (transposed), v cache %s, Tk = %lld: %s", tg_shape_of(sq, q),
                 tg_shape_of(sk, kt), tg_shape_of(sv, v), (long long)Tk, bad);
        return NULL;
    }
    if (tg_grad_enabled(ctx) && q->requires_grad) {
        tg_error(ctx, TG_ERR_STATE, fn, "the attention over a KV cache has no backward: run it with grad mode off");
        return NULL;
    }
    tg_attn_dims d = {1, q->shape[nd - 2], Tk, q->shape[nd - 1], v->shape[nd - 1]};
    for (int i = 0; i < nd - 2; i++) d.pairs *= q->shape[i];
    if (tg_is_lowp(q->dtype)) { /* float32 on widened copies, one rounding out (tg_attention's path) */
        tg_tensor *q32 = tg_to_dtype(ctx, q, TG_F32), *k32 = attn_widen(ctx, fn, kt, Tk);
        tg_tensor *v32 = tg_to_dtype(ctx, tg_slice(ctx, (tg_tensor *)v, nd - 2, 0, Tk), TG_F32);
        tg_tensor *o = q32 && k32 && v32 ? tg_attention_cached(ctx, fn, q32, k32, v32, Tk) : NULL;
        return o ? tg_to_dtype(ctx, o, q->dtype) : NULL;
    }
    int64_t shape[TG_MAX_DIMS];
    memcpy(shape, q->shape, sizeof shape);
    shape[nd - 1] = d.Dv;
    tg_tensor *o = tg_new_tensor(ctx, fn, q->dtype, nd, shape);
    double *lse = tg_arena_alloc_fn(ctx, fn, (size_t)(d.pairs * d.Tq + 1) * sizeof(double));
    if (!o || !lse) return NULL;
    /* per worker: s (BR, Tk), then inv (BR doubles) */
    const int nt = attn_threads(ctx, d.pairs);
    const int64_t BR = attn_block_rows(true);
    const size_t inv_off = attn_aligned((size_t)(BR * d.Tk) * tg_esize(q->dtype));
    size_t stride;
    unsigned char *scratch = attn_scratch(ctx, fn, nt, inv_off + (size_t)BR * sizeof(double), &stride);
    if (!scratch) return NULL;
    attn_job j = attn_job_of(q, kt, v, lse, d, 1.0 / sqrt((double)d.D), true, BR, scratch, stride, 0, inv_off);
    j.o = o, j.off = d.Tk - d.Tq, j.cap = kt->shape[nd - 1];
    tg_parallel(nt, d.pairs, attention_cached_task, &j);
    return tg_ok(ctx) ? o : NULL;
}

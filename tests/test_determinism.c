/* Determinism: every result is bitwise identical whatever the thread count
 * (a design rule, docs/DESIGN.md). Each case builds the same
 * inputs from the same seed in a fresh context, runs with 1 thread, then
 * with 2 and 3 threads, and compares every output and gradient byte for
 * byte:
 *   - Linear forward+backward big enough for the GEMM to split its tiles
 *     and the bias gradient to split its columns, and at the GPT-2 small
 *     step's shapes (256 rows, K up to 1536);
 *   - fused RMSNorm and LayerNorm forward+backward (the dgamma/dbeta
 *     reductions over rows);
 *   - matmul (2-D and batched 3-D) forward+backward;
 *   - softmax cross-entropy (label smoothing, ignored rows) and its grad;
 *   - embedding backward with many repeated indices (scatter-add);
 *   - elementwise ops, reductions, softmax, MSE, dropout, attention and a
 *     batched matmul of small items, each above its threading threshold;
 *   - an MLP training step: the parameters after 3 Adam steps;
 *   - the shape ops' row moves (permute, slice, concat, reshape) and two
 *     AdamW steps over parameters of odd sizes.
 * Built without OpenMP, tg_threads() stays 1: the test still runs, the
 * comparison is then trivially equal, and it says so on stderr. Under
 * valgrind (TG_UNDER_VALGRIND=1) only 1 and 2 threads are compared. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

/* ---- snapshots of results ------------------------------------------------ */

#define SNAP_MAX 16

/* Copies of a run's outputs and gradients, by name. */
typedef struct snap {
    int n;
    char name[SNAP_MAX][64];
    void *buf[SNAP_MAX];
    size_t size[SNAP_MAX];
    tg_dtype dtype[SNAP_MAX];
} snap;

static void snap_add(snap *s, const char *name, const tg_tensor *t) {
    ck_assert_msg(t != NULL, "%s: no tensor", name);
    ck_assert_int_lt(s->n, SNAP_MAX);
    size_t size = (size_t)t->numel * tg_dtype_size(t->dtype);
    void *p = tg_test_malloc(size);
    memcpy(p, t->data, size);
    snprintf(s->name[s->n], sizeof s->name[s->n], "%s", name);
    s->buf[s->n] = p;
    s->size[s->n] = size;
    s->dtype[s->n] = t->dtype;
    s->n++;
}

static void snap_free(snap *s) {
    for (int i = 0; i < s->n; i++) free(s->buf[i]);
    s->n = 0;
}

static double elem(const void *buf, tg_dtype dt, size_t i) {
    return dt == TG_F64 ? ((const double *)buf)[i] : (double)((const float *)buf)[i];
}

/* Every snapshot is finite and not all zero: a sanity check that the case
 * computed something (a comparison of two empty results proves nothing). */
static void assert_meaningful(const snap *s, const char *what) {
    for (int k = 0; k < s->n; k++) {
        size_t n = s->size[k] / tg_dtype_size(s->dtype[k]);
        bool nonzero = false;
        for (size_t i = 0; i < n; i++) {
            double v = elem(s->buf[k], s->dtype[k], i);
            /* not ck_assert per element: Check logs every passing assert */
            if (!isfinite(v)) ck_abort_msg("%s: %s[%zu] = %g is not finite", what, s->name[k], i, v);
            nonzero |= v != 0;
        }
        ck_assert_msg(nonzero, "%s: %s is all zero", what, s->name[k]);
    }
}

static void assert_bitwise_equal(const snap *a, const snap *b, int threads, const char *what) {
    ck_assert_int_eq(a->n, b->n);
    for (int k = 0; k < a->n; k++) {
        ck_assert_uint_eq(a->size[k], b->size[k]);
        if (memcmp(a->buf[k], b->buf[k], a->size[k]) == 0) continue;
        size_t es = tg_dtype_size(a->dtype[k]), n = a->size[k] / es, i = 0;
        while (i < n && memcmp((const char *)a->buf[k] + i * es, (const char *)b->buf[k] + i * es, es) == 0) i++;
        ck_abort_msg("%s: %s differs between 1 and %d threads at element %zu: %.17g vs %.17g", what, a->name[k],
                     threads, i, elem(a->buf[k], a->dtype[k], i), elem(b->buf[k], b->dtype[k], i));
    }
}

/* ---- running a case with several thread counts --------------------------- */

typedef void (*case_fn)(tg_ctx *ctx, tg_dtype dt, snap *out);

static bool have_threads = true; /* false when built without OpenMP */

static void run_case(case_fn f, int threads, tg_dtype dt, snap *out, const char *what) {
    tg_ctx *ctx = tg_ctx_new(20240601);
    ck_assert_ptr_nonnull(ctx);
    tg_set_threads(ctx, threads);
    if (threads > 1 && tg_threads(ctx) == 1) have_threads = false;
    memset(out, 0, sizeof *out);
    f(ctx, dt, out);
    ck_assert_msg(tg_ok(ctx), "%s (%d threads): %s", what, threads, tg_error_message(ctx));
    tg_ctx_free(ctx);
}

static void check_case(case_fn f, tg_dtype dt, const char *name) {
    char what[96];
    snprintf(what, sizeof what, "%s %s", name, tg_dtype_name(dt));
    snap ref;
    run_case(f, 1, dt, &ref, what);
    assert_meaningful(&ref, what);
    /* under valgrind (~30x slower, scripts/memcheck.sh) 1 vs 2 threads only */
    const int max_threads = tg_test_under_valgrind() ? 2 : 3;
    for (int threads = 2; threads <= max_threads; threads++) {
        snap got;
        run_case(f, threads, dt, &got, what);
        assert_bitwise_equal(&ref, &got, threads, what);
        snap_free(&got);
    }
    snap_free(&ref);
    if (!have_threads)
        fprintf(stderr,
                "test_determinism: %s: built without OpenMP, so 1, 2 and 3 threads run the same "
                "single-threaded code and are trivially equal\n",
                what);
}

static tg_tensor *leaf(tg_ctx *ctx, tg_dtype dt, int ndim, const int64_t *shape, double lo, double hi) {
    return tg_requires_grad(ctx, tg_test_rand(ctx, dt, ndim, shape, lo, hi));
}

/* Back-propagates dy (NULL: y is a scalar loss) from y and records y as
 * `name`; the caller records the grads. */
static void backward_and_add(tg_ctx *ctx, snap *out, const char *name, tg_tensor *y, tg_tensor *dy) {
    ck_assert_msg(y != NULL, "%s: %s", name, tg_error_message(ctx));
    if (dy) tg_backward_ex(ctx, y, dy, false);
    else tg_backward(ctx, y);
    snap_add(out, name, y);
}

/* ---- the cases ------------------------------------------------------------ */

/* Linear: y = x W^T + b, x (2,176,384) -> M = 352 rows, W (256,384): the
 * GEMM splits its output tiles across threads (the forward takes the
 * direct path in float32 and the packed one in float64; both backward
 * products are packed), and the bias gradient splits its columns
 * (M N = 90112 >= the library's parallel threshold). */
static void case_linear(tg_ctx *ctx, tg_dtype dt, snap *out) {
    tg_tensor *x = leaf(ctx, dt, TG_SHAPE(2, 176, 384), -1, 1);
    tg_tensor *w = leaf(ctx, dt, TG_SHAPE(256, 384), -0.05, 0.05);
    tg_tensor *b = leaf(ctx, dt, TG_SHAPE(256), -0.05, 0.05);
    tg_tensor *dy = tg_test_rand(ctx, dt, TG_SHAPE(2, 176, 256), -1, 1);
    tg_tensor *y = tg_linear_fused(ctx, x, w, b);
    backward_and_add(ctx, out, "y", y, dy);
    snap_add(out, "dx", x->grad);
    snap_add(out, "dW", w->grad);
    snap_add(out, "db", b->grad);
}

/* Linear at the GPT-2 small step's MLP projection (B T = 256 rows, 1536 ->
 * 384): few row tiles and several K slices, the shape where each thread
 * packs its own copy of the B panels (tensor/gemm_impl.inc) and the task
 * grid is cut from few rows. */
static void case_linear_gpt(tg_ctx *ctx, tg_dtype dt, snap *out) {
    tg_tensor *x = leaf(ctx, dt, TG_SHAPE(4, 64, 1536), -1, 1);
    tg_tensor *w = leaf(ctx, dt, TG_SHAPE(384, 1536), -0.05, 0.05);
    tg_tensor *dy = tg_test_rand(ctx, dt, TG_SHAPE(4, 64, 384), -1, 1);
    tg_tensor *y = tg_linear_fused(ctx, x, w, NULL);
    backward_and_add(ctx, out, "y", y, dy);
    snap_add(out, "dx", x->grad);
    snap_add(out, "dW", w->grad);
}

/* Fused norms over (1024, 384) rows: dgamma and dbeta sum over all rows. */
static void norm_case(tg_ctx *ctx, tg_dtype dt, snap *out, bool layernorm) {
    tg_tensor *x = leaf(ctx, dt, TG_SHAPE(1024, 384), -2, 2);
    tg_tensor *g = leaf(ctx, dt, TG_SHAPE(384), 0.5, 1.5);
    tg_tensor *b = leaf(ctx, dt, TG_SHAPE(384), -0.5, 0.5);
    tg_tensor *dy = tg_test_rand(ctx, dt, TG_SHAPE(1024, 384), -1, 1);
    tg_tensor *y = layernorm ? tg_layernorm_fused(ctx, x, g, b, 1, 1e-5) : tg_rmsnorm_fused(ctx, x, g, b, 1, 1e-6);
    backward_and_add(ctx, out, "y", y, dy);
    snap_add(out, "dx", x->grad);
    snap_add(out, "dgamma", g->grad);
    snap_add(out, "dbeta", b->grad);
}
static void case_rmsnorm(tg_ctx *ctx, tg_dtype dt, snap *out) { norm_case(ctx, dt, out, false); }
static void case_layernorm(tg_ctx *ctx, tg_dtype dt, snap *out) { norm_case(ctx, dt, out, true); }

/* matmul: (300,200) x (200,260), and a batched (4,96,128) x (4,128,112). */
static void case_matmul(tg_ctx *ctx, tg_dtype dt, snap *out) {
    tg_tensor *a = leaf(ctx, dt, TG_SHAPE(300, 200), -1, 1);
    tg_tensor *b = leaf(ctx, dt, TG_SHAPE(200, 260), -1, 1);
    tg_tensor *c = tg_matmul(ctx, a, b);
    backward_and_add(ctx, out, "c", c, tg_test_rand(ctx, dt, TG_SHAPE(300, 260), -1, 1));
    snap_add(out, "da", a->grad);
    snap_add(out, "db", b->grad);

    tg_tensor *p = leaf(ctx, dt, TG_SHAPE(4, 96, 128), -1, 1);
    tg_tensor *q = leaf(ctx, dt, TG_SHAPE(4, 128, 112), -1, 1);
    tg_tensor *r = tg_matmul(ctx, p, q);
    backward_and_add(ctx, out, "batched c", r, tg_test_rand(ctx, dt, TG_SHAPE(4, 96, 112), -1, 1));
    snap_add(out, "batched da", p->grad);
    snap_add(out, "batched db", q->grad);
}

/* Cross-entropy from logits (512, 200) with label smoothing 0.1 and every
 * 7th row ignored: rows split across threads, and the mean over rows is one
 * reduction. */
static void case_cross_entropy(tg_ctx *ctx, tg_dtype dt, snap *out) {
    const int64_t N = 512, C = 200;
    tg_tensor *logits = leaf(ctx, dt, TG_SHAPE(N, C), -4, 4);
    int64_t *t = tg_test_malloc((size_t)N * sizeof *t);
    for (int64_t i = 0; i < N; i++) t[i] = i % 7 == 3 ? -100 : (i * 37 + 11) % C;
    tg_cross_entropy_opts o = TG_CROSS_ENTROPY_DEFAULTS;
    o.label_smoothing = 0.1;
    tg_tensor *loss = tg_cross_entropy(ctx, logits, t, &o);
    free(t);
    backward_and_add(ctx, out, "loss", loss, NULL);
    snap_add(out, "dlogits", logits->grad);
}

/* Embedding (64, 128) looked up at 1024 indices, each row 16 times: the
 * backward scatter-adds many dy rows into the same dweight rows (its
 * threads split the columns). */
static void case_embedding(tg_ctx *ctx, tg_dtype dt, snap *out) {
    const int64_t V = 64, D = 128, n = 1024;
    tg_tensor *w = leaf(ctx, dt, TG_SHAPE(V, D), -1, 1);
    int64_t *idx = tg_test_malloc((size_t)n * sizeof *idx);
    for (int64_t i = 0; i < n; i++) idx[i] = (i * 29 + i / 5) % V;
    tg_tensor *y = tg_embedding(ctx, w, TG_SHAPE(32, 32), idx);
    free(idx);
    backward_and_add(ctx, out, "y", y, tg_test_rand(ctx, dt, TG_SHAPE(32, 32, 128), -1, 1));
    snap_add(out, "dweight", w->grad);
}

/* An MLP 256-384-384-10 with RMSNorm and LayerNorm, batch 128, Adam:
 * the parameters after 3 training steps (forward, cross-entropy, backward,
 * Adam update, reset). */
static void case_mlp(tg_ctx *ctx, tg_dtype dt, snap *out) {
    const int64_t B = 128, I = 256, H = 384, O = 10;
    tg_model model = {0};
    tg_linear *fc1 = tg_linear_new(ctx, "fc1", I, H, true, dt);
    tg_rmsnorm *n1 = tg_rmsnorm_new(ctx, "norm1", 1, (int64_t[]){H}, 1e-6, true, false, dt);
    tg_linear *fc2 = tg_linear_new(ctx, "fc2", H, H, true, dt);
    tg_layernorm *n2 = tg_layernorm_new(ctx, "norm2", 1, (int64_t[]){H}, 1e-5, true, true, dt);
    tg_linear *fc3 = tg_linear_new(ctx, "fc3", H, O, true, dt);
    tg_model_add(ctx, &model, TG_MODULE(fc1));
    tg_model_add(ctx, &model, TG_MODULE(n1));
    tg_model_add(ctx, &model, TG_MODULE(fc2));
    tg_model_add(ctx, &model, TG_MODULE(n2));
    tg_model_add(ctx, &model, TG_MODULE(fc3));
    tg_params params = {0};
    tg_model_params(ctx, &model, &params);
    tg_adam_opts ao = tg_adam_defaults();
    tg_optim *opt = tg_adam_new(ctx, &params, &ao);
    ck_assert_msg(opt != NULL, "%s", tg_error_message(ctx));
    tg_tensor *x = tg_persist(ctx, tg_test_rand(ctx, dt, TG_SHAPE(B, I), -1, 1));
    int64_t targets[128];
    for (int64_t i = 0; i < B; i++) targets[i] = (i * 7 + 3) % O;
    for (int step = 0; step < 3; step++) {
        tg_optim_zero_grad(ctx, opt);
        tg_tensor *h = tg_relu(ctx, tg_rmsnorm_forward(ctx, n1, tg_linear_forward(ctx, fc1, x)));
        h = tg_relu(ctx, tg_layernorm_forward(ctx, n2, tg_linear_forward(ctx, fc2, h)));
        tg_tensor *loss = tg_cross_entropy(ctx, tg_linear_forward(ctx, fc3, h), targets, NULL);
        ck_assert_msg(loss != NULL, "%s", tg_error_message(ctx));
        tg_backward(ctx, loss);
        tg_optim_step(ctx, opt);
        tg_ctx_reset(ctx);
    }
    ck_assert_msg(tg_ok(ctx), "%s", tg_error_message(ctx));
    for (int i = 0; i < params.count; i++) snap_add(out, params.items[i].name, params.items[i].value);
    tg_optim_free(ctx, opt);
    tg_params_free(&params);
    tg_model_free(ctx, &model);
    tg_tensor_free(ctx, x);
}

/* The other ops that split work over the task pool, each above its
 * threshold: elementwise (broadcast rows, a one-row plan, unary), axis and
 * whole-tensor sums and means, softmax and log_softmax, MSE, dropout,
 * attention (pairs split), and a batched matmul of many small items (the
 * items split), all feeding one loss. */
static void case_pool_ops(tg_ctx *ctx, tg_dtype dt, snap *out) {
    tg_tensor *x = leaf(ctx, dt, TG_SHAPE(64, 2048), -1, 1);
    tg_tensor *b = leaf(ctx, dt, TG_SHAPE(2048), -1, 1);
    tg_tensor *z = leaf(ctx, dt, TG_SHAPE(64, 2048), -1, 1);
    tg_tensor *u = tg_mul(ctx, tg_add(ctx, x, b), z);
    tg_tensor *e = tg_exp(ctx, u);
    tg_tensor *sm = tg_softmax(ctx, e), *ls = tg_log_softmax(ctx, u);
    tg_tensor *d = tg_dropout(ctx, u, 0.3, true);
    tg_tensor *loss =
        tg_add(ctx, tg_sum(ctx, tg_sum_axis(ctx, d, 0, false)), tg_mean(ctx, tg_mean_axis(ctx, ls, 1, true)));
    loss = tg_add(ctx, loss, tg_sum(ctx, e));
    loss = tg_add(ctx, loss, tg_mse_loss(ctx, sm, tg_div(ctx, e, tg_add_scalar(ctx, e, 1.0))));
    tg_tensor *q = leaf(ctx, dt, TG_SHAPE(4, 4, 64, 32), -1, 1);
    tg_tensor *k = leaf(ctx, dt, TG_SHAPE(4, 4, 64, 32), -1, 1);
    tg_tensor *v = leaf(ctx, dt, TG_SHAPE(4, 4, 64, 32), -1, 1);
    tg_tensor *o = tg_attention(ctx, q, k, v, true, 0);
    tg_tensor *p = leaf(ctx, dt, TG_SHAPE(256, 32, 64), -1, 1);
    tg_tensor *r = leaf(ctx, dt, TG_SHAPE(256, 64, 32), -1, 1);
    tg_tensor *c = tg_matmul(ctx, p, r);
    loss = tg_add(ctx, loss, tg_sum(ctx, tg_mul(ctx, o, o)));
    loss = tg_add(ctx, loss, tg_mean(ctx, tg_mul(ctx, c, c)));
    backward_and_add(ctx, out, "loss", loss, NULL);
    snap_add(out, "exp", e);
    snap_add(out, "softmax", sm);
    snap_add(out, "log_softmax", ls);
    snap_add(out, "dropout", d);
    snap_add(out, "attention", o);
    snap_add(out, "batched matmul", c);
    snap_add(out, "dx", x->grad);
    snap_add(out, "db", b->grad);
    snap_add(out, "dz", z->grad);
    snap_add(out, "dq", q->grad);
    snap_add(out, "dk", k->grad);
    snap_add(out, "dv", v->grad);
    snap_add(out, "dp", p->grad);
    snap_add(out, "dr", r->grad);
}

/* The shape ops that move rows on the task pool, above its threshold and
 * with sizes that are no multiple of the pieces: permute by tiles (x's
 * last dim moves) and by runs (it stays last), slices along a middle and
 * the last axis (partial rows), a concat, a reshape's gradient; then two
 * AdamW steps (amsgrad, weight decay on some) over parameters of odd sizes,
 * some bigger than a piece, some tiny: one job of the pool over all. */
static void case_shape_adamw(tg_ctx *ctx, tg_dtype dt, snap *out) {
    tg_tensor *x = tg_persist(ctx, tg_test_rand(ctx, dt, TG_SHAPE(5, 67, 3, 131), -1, 1));
    tg_tensor *w = tg_persist(ctx, tg_test_rand(ctx, dt, TG_SHAPE(3, 131), -1, 1));
    tg_tensor *c = tg_persist(ctx, tg_test_rand(ctx, dt, TG_SHAPE(7), -1, 1));
    tg_params params = {0};
    tg_params_add(ctx, &params, NULL, "x", tg_requires_grad(ctx, x), true);
    tg_params_add(ctx, &params, NULL, "w", tg_requires_grad(ctx, w), false);
    tg_params_add(ctx, &params, NULL, "c", tg_requires_grad(ctx, c), true);
    tg_tensor *xw = tg_mul(ctx, x, w);
    tg_tensor *tiles = tg_permute(ctx, xw, (const int[]){2, 0, 3, 1}); /* (3,5,131,67) */
    tg_tensor *runs = tg_permute(ctx, xw, (const int[]){2, 1, 0, 3});  /* (3,67,5,131) */
    tg_tensor *mid = tg_slice(ctx, runs, 1, 5, 60), *last = tg_slice(ctx, tiles, 3, 7, 61);
    tg_tensor *cat = tg_concat(ctx, 2, (tg_tensor *const[]){last, tg_slice(ctx, tiles, 3, 0, 13)}, 3);
    tg_tensor *flat = tg_reshape(ctx, mid, TG_SHAPE(3 * 55 * 5 * 131));
    tg_tensor *loss = tg_add(ctx, tg_sum(ctx, tg_mul(ctx, cat, cat)), tg_sum(ctx, tg_exp(ctx, flat)));
    loss = tg_add(ctx, loss, tg_sum(ctx, tg_mul(ctx, c, c)));
    backward_and_add(ctx, out, "loss", loss, NULL);
    snap_add(out, "tiles", tiles);
    snap_add(out, "runs", runs);
    snap_add(out, "concat", cat);
    snap_add(out, "dx", x->grad);
    snap_add(out, "dw", w->grad);
    tg_adam_opts ao = tg_adamw_defaults();
    ao.amsgrad = true, ao.weight_decay = 0.1;
    tg_optim *opt = tg_adamw_new(ctx, &params, &ao);
    ck_assert_msg(opt != NULL, "%s", tg_error_message(ctx));
    tg_optim_step(ctx, opt);
    tg_optim_step(ctx, opt);
    ck_assert_msg(tg_ok(ctx), "%s", tg_error_message(ctx));
    snap_add(out, "x after AdamW", x);
    snap_add(out, "w after AdamW", w);
    snap_add(out, "c after AdamW", c);
    tg_optim_free(ctx, opt);
    tg_params_free(&params);
    tg_tensor_free(ctx, x);
    tg_tensor_free(ctx, w);
    tg_tensor_free(ctx, c);
}

/* ---- tests ---------------------------------------------------------------- */

static const struct {
    case_fn f;
    const char *name;
} CASES[] = {
    {case_linear, "Linear forward+backward"},
    {case_linear_gpt, "Linear 256x1536 -> 384 (GPT-2 small's projection)"},
    {case_rmsnorm, "RMSNorm fused forward+backward"},
    {case_layernorm, "LayerNorm fused forward+backward"},
    {case_matmul, "matmul forward+backward"},
    {case_cross_entropy, "softmax cross-entropy"},
    {case_embedding, "embedding backward"},
    {case_mlp, "MLP after 3 Adam steps"},
    {case_pool_ops, "elementwise, reductions, softmax, MSE, dropout, attention, batched matmul"},
    {case_shape_adamw, "permute, slice, concat, reshape, AdamW"},
};
#define N_CASES ((int)(sizeof CASES / sizeof CASES[0]))

/* Loop test over CASES x {float32, float64}. */
START_TEST(test_case) { check_case(CASES[_i / 2].f, _i % 2 ? TG_F64 : TG_F32, CASES[_i / 2].name); }
END_TEST

/* The comparison is only meaningful if 2 threads really ran 2 threads;
 * without OpenMP the library must say 1 (and the test above says so). */
START_TEST(test_thread_count_is_honoured) {
    tg_ctx *ctx = tg_ctx_new(1);
    tg_set_threads(ctx, 2);
    int t = tg_threads(ctx);
    ck_assert_msg(t == 2 || t == 1, "tg_threads after tg_set_threads(2) is %d", t);
    if (t == 1) fprintf(stderr, "test_determinism: built without OpenMP: every thread count runs 1 thread\n");
    tg_ctx_free(ctx);
}
END_TEST

Suite *make_determinism_suite(void) {
    Suite *s = suite_create("determinism");
    TCase *tc = tg_test_tcase(s, "threads", NULL, NULL, test_thread_count_is_honoured, NULL);
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, test_case, 0, 2 * N_CASES);
    return s;
}

int main(void) { return tg_test_run(make_determinism_suite()); }

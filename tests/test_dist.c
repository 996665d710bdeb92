/* Data-parallel training (tapegrad/dist.h): the same suite runs as one
 * process (ctest's test_dist, in every build) and under mpirun with 2, 3
 * and 4 processes (tests/dist.cmake), where every rank runs every test:
 *   - tg_dist_split tiles any total; tg_dist_draw draws the same global
 *     batch however it is split;
 *   - broadcast: every rank ends with rank 0's bits, for f32 and f64
 *     tensors of odd sizes (1, 7, 1001, empty...) over buckets that cut
 *     tensors and chunks unevenly, and the RNG and optimizer state;
 *   - all-reduce: every element is ((w_0 x_0 + w_1 x_1) + ...) in rank
 *     order, bit for bit against a plain loop, in f32 and f64, whatever
 *     the bucket size; data chosen so other orders differ (P >= 3);
 *   - training: P ranks, each with its slice of a global batch, give
 *     parameters bitwise identical to one process running the P slices as
 *     micro-batches through the gradient accumulator (and with another
 *     thread count), after several Adam steps;
 *   - errors: one rank's error (or a layout that differs) ends every
 *     collective on every rank with a message naming the rank, and the
 *     ranks stay in step for the next collective;
 *   - tg_dist_backward (the all-reduce under backward): the bits of
 *     tg_backward then tg_dist_allreduce_grads, some buckets sent early;
 *   - the optimizer state split over the ranks (tg_dist_shard): the bits
 *     of one process with an optimizer over every parameter;
 *   - the deadline's and the build fingerprint's settings;
 *   - the accumulator's own contract (one process).
 * Check runs the tests in-process (CK_FORK=no, set by main): a forked
 * child cannot take part in MPI collectives. A test makes all its
 * collectives before it asserts, so one failing rank does not leave the
 * others waiting. */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tapegrad/dist.h"
#include "testutil.h"

static tg_dist *world; /* made by main, shared by the tests */
static int rank = 0, nproc = 1;
static tg_ctx *ctx; /* a fresh context per test */

static void setup(void) {
    ctx = tg_ctx_new(11);
    ck_assert_ptr_nonnull(ctx);
    tg_dist_set_bucket_bytes(world, 4 << 20);
}
static void teardown(void) { tg_ctx_free(ctx); }

/* ---- split --------------------------------------------------------------- */

START_TEST(test_split_tiles) {
    for (int64_t total = 0; total <= 40; total++)
        for (int parts = 1; parts <= 7; parts++) {
            int64_t next = 0;
            for (int part = 0; part < parts; part++) {
                int64_t start, count;
                tg_dist_split(total, parts, part, &start, &count);
                ck_assert_int_eq(start, next);
                ck_assert_int_ge(count, total / parts);
                ck_assert_int_le(count, total / parts + 1);
                next = start + count;
            }
            ck_assert_int_eq(next, total);
        }
    /* no overflow near the top of int64 */
    int64_t start, count, big = INT64_MAX - 5;
    tg_dist_split(big, 3, 2, &start, &count);
    ck_assert_int_eq(start + count, big);
    ck_assert_int_eq(start, big / 3 * 2 + (big % 3) * 2 / 3);
    tg_dist_split(10, 3, 3, &start, &count);
    ck_assert_int_eq(start, 0);
    ck_assert_int_eq(count, 0);
}
END_TEST

/* tg_dist_draw: any split of a global batch draws the rows of the whole
 * batch drawn at once; the rows are floor(u n) of the RNG's numbers at
 * their positions; the RNG is left where it was; bad arguments. */
START_TEST(test_draw_any_split) {
    enum { B = 37, N = 11 };
    tg_rng_set_state(ctx, 5, 1000);
    int64_t whole[B], part[B];
    ck_assert(tg_dist_draw(ctx, N, 0, B, whole));
    uint64_t seed, offset;
    tg_rng_state(ctx, &seed, &offset);
    ck_assert_uint_eq(seed, 5);
    ck_assert_uint_eq(offset, 1000);
    int seen[N] = {0};
    for (int64_t i = 0; i < B; i++) {
        const double u = tg_rng_uniform(ctx); /* position 1000 + i */
        ck_assert_int_eq(whole[i], (int64_t)(u * N));
        seen[whole[i]]++;
    }
    int distinct = 0;
    for (int k = 0; k < N; k++) distinct += seen[k] > 0;
    ck_assert_int_ge(distinct, 8); /* 37 draws from 11: not a constant */
    tg_rng_set_state(ctx, 5, 1000);
    for (int parts = 1; parts <= 7; parts++) {
        memset(part, 0xff, sizeof part);
        for (int k = parts - 1; k >= 0; k--) { /* any order */
            int64_t start, count;
            tg_dist_split(B, parts, k, &start, &count);
            ck_assert(tg_dist_draw(ctx, N, start, count, part + start));
        }
        ck_assert_mem_eq(part, whole, sizeof whole);
    }
    /* n = 1: every row is item 0 */
    ck_assert(tg_dist_draw(ctx, 1, 3, 5, part));
    for (int i = 0; i < 5; i++) ck_assert_int_eq(part[i], 0);
    ck_assert(tg_dist_draw(ctx, N, 0, 0, NULL));
    ck_assert(!tg_dist_draw(ctx, 0, 0, 1, part));
    tg_test_assert_error(ctx, TG_ERR_VALUE, "tg_dist_draw", "n = 0", NULL);
    ck_assert(!tg_dist_draw(ctx, N, -1, 1, part));
    tg_test_assert_error(ctx, TG_ERR_VALUE, "tg_dist_draw", "start = -1", NULL);
    ck_assert(!tg_dist_draw(ctx, N, 0, 2, NULL));
    tg_test_assert_error(ctx, TG_ERR_NULL, "tg_dist_draw", "'index'", NULL);
}
END_TEST

START_TEST(test_world) {
    ck_assert_int_ge(rank, 0);
    ck_assert_int_lt(rank, nproc);
    ck_assert_int_ge(tg_dist_local_size(world), 1);
    ck_assert_int_le(tg_dist_local_size(world), nproc);
    ck_assert(strlen(tg_dist_backend(world)) > 0);
    const char *launched = getenv("OMPI_COMM_WORLD_SIZE");
    if (launched) ck_assert_int_eq(nproc, atoi(launched));
    else ck_assert_int_eq(nproc, 1);
    /* NULL: one process */
    ck_assert_int_eq(tg_dist_rank(NULL), 0);
    ck_assert_int_eq(tg_dist_size(NULL), 1);
}
END_TEST

/* The deadline: TG_DIST_TIMEOUT's value or 600 s at the start; set and
 * read back; bad values refused and the deadline kept. */
START_TEST(test_timeout) {
    const char *env = getenv("TG_DIST_TIMEOUT");
    const double start = tg_dist_timeout(world);
    ck_assert(start == (env && *env ? strtod(env, NULL) : 600.0));
    ck_assert(tg_dist_set_timeout(ctx, world, 2.5));
    ck_assert(tg_dist_timeout(world) == 2.5);
    ck_assert(tg_dist_set_timeout(ctx, world, 0)); /* no deadline */
    ck_assert(tg_dist_timeout(world) == 0);
    ck_assert(!tg_dist_set_timeout(ctx, world, -1));
    tg_test_assert_error(ctx, TG_ERR_VALUE, "tg_dist_set_timeout", "seconds = -1", "want >= 0", NULL);
    ck_assert(!tg_dist_set_timeout(ctx, world, NAN));
    tg_test_assert_error(ctx, TG_ERR_VALUE, "tg_dist_set_timeout", "seconds = nan", NULL);
    ck_assert(!tg_dist_set_timeout(ctx, NULL, 1));
    tg_test_assert_error(ctx, TG_ERR_NULL, "tg_dist_set_timeout", "'d' is NULL", NULL);
    ck_assert(tg_dist_timeout(world) == 0);
    ck_assert(tg_dist_timeout(NULL) == 0);
    ck_assert(tg_dist_set_timeout(ctx, world, start));
    /* a collective under a deadline works as before, and its wait is kept */
    double v = 1;
    ck_assert_msg(tg_dist_allreduce_f64(ctx, world, &v, 1, 1.0), "%s", tg_error_message(ctx));
    ck_assert(v == nproc);
    ck_assert(tg_dist_longest_wait(world) >= 0 && tg_dist_longest_wait(world) < start);
}
END_TEST

/* The build's fingerprint: what decides the bits, the same on every rank
 * (tg_dist_init compared them). */
START_TEST(test_fingerprint) {
    const char *fp = tg_dist_fingerprint(world);
    ck_assert_msg(strstr(fp, "tapegrad 0.") == fp, "%s", fp);
    ck_assert_msg(strstr(fp, "GEMM kernels ") && strstr(fp, "isa ") && strstr(fp, "C library ") &&
                      strstr(fp, "autocast float32"),
                  "%s", fp);
    ck_assert_msg(tg_dist_same(ctx, world, fp, strlen(fp), "the fingerprints"), "%s", tg_error_message(ctx));
    ck_assert_str_eq(tg_dist_fingerprint(NULL), "");
}
END_TEST

/* ---- broadcast ------------------------------------------------------------ */

/* The tensors of the odd-size cases: sizes that leave remainders against
 * every bucket and chunk count, an empty one and a scalar, both dtypes. */
#define NODD 7
static const int64_t odd_numel[NODD] = {1, 7, 1001, 0, 3, 257, 1};
static const tg_dtype odd_dtype[NODD] = {TG_F32, TG_F32, TG_F32, TG_F32, TG_F64, TG_F64, TG_F64};

/* Rank `who`'s values for the odd-size tensors, drawn from a seed of its
 * own; with magnitudes from 2^-20 to 2^20, so sums depend on their order. */
static void odd_tensors(tg_ctx *c, int who, tg_tensor **t) {
    tg_rng_seed(c, 1000 + (uint64_t)who);
    for (int i = 0; i < NODD; i++) {
        t[i] = odd_numel[i] == 1 && i == 6 ? tg_zeros(c, odd_dtype[i], 0, NULL)
                                           : tg_zeros(c, odd_dtype[i], TG_SHAPE(odd_numel[i]));
        for (int64_t k = 0; k < odd_numel[i]; k++)
            tg_set_flat(c, t[i], k, (tg_rng_uniform(c) - 0.5) * ldexp(1.0, (int)(k * 7 % 41) - 20));
    }
    ck_assert_msg(tg_ok(c), "%s", tg_error_message(c));
}

START_TEST(test_broadcast_odd_sizes) {
    static const size_t buckets[] = {64, 1000, 4 << 20};
    bool ok[3];
    tg_tensor *t[3][NODD];
    for (int b = 0; b < 3; b++) {
        odd_tensors(ctx, rank == 0 ? 0 : 50 + rank, t[b]); /* only rank 0's are the truth */
        tg_dist_set_bucket_bytes(world, buckets[b]);
        ok[b] = tg_dist_broadcast(ctx, world, t[b], NODD);
    }
    tg_tensor *want[NODD];
    odd_tensors(ctx, 0, want);
    for (int b = 0; b < 3; b++) {
        ck_assert_msg(ok[b], "bucket %zu: %s", buckets[b], tg_error_message(ctx));
        for (int i = 0; i < NODD; i++) {
            char what[64];
            snprintf(what, sizeof what, "bucket %zu, tensor %d, rank %d", buckets[b], i, rank);
            tg_test_assert_same_bits(what, t[b][i], want[i]);
        }
    }
}
END_TEST

START_TEST(test_broadcast_rng_and_optim) {
    /* RNG: rank 0's state wins */
    tg_rng_set_state(ctx, rank == 0 ? 5 : 77, rank == 0 ? 123 : (uint64_t)rank);
    bool rng_ok = tg_dist_broadcast_rng(ctx, world);
    uint64_t seed, offset;
    tg_rng_state(ctx, &seed, &offset);
    /* optimizer: rank 0 takes two steps, the others none */
    tg_linear *fc = tg_linear_new(ctx, "fc", 3, 2, true, TG_F32);
    tg_params params = {0};
    tg_linear_params(ctx, fc, &params);
    tg_adam_opts o = tg_adam_defaults();
    tg_optim *opt = tg_adam_new(ctx, &params, &o);
    for (int s = 0; s < 2 && rank == 0; s++) {
        for (int i = 0; i < params.count; i++) tg_fill(ctx, params.items[i].value->grad, 0.25 * (s + 1) + i);
        tg_optim_step(ctx, opt);
    }
    bool optim_ok = tg_dist_broadcast_optim(ctx, world, opt);
    /* every rank's state now hashes the same */
    tg_params *st = tg_optim_state(opt);
    bool same = true;
    for (int i = 0; i < st->count; i++) {
        const tg_tensor *v = st->items[i].value;
        same = tg_dist_same(ctx, world, v->data, (size_t)v->numel * tg_dtype_size(v->dtype), "the state") && same;
    }
    ck_assert_msg(rng_ok && optim_ok && same, "%s", tg_error_message(ctx));
    ck_assert_uint_eq(seed, 5);
    ck_assert_uint_eq(offset, 123);
    ck_assert_int_eq(tg_optim_steps(opt), 2);
    double m = tg_get_flat(ctx, tg_params_find(st, "optim.fc.weight.exp_avg")->value, 0);
    ck_assert(m != 0);
    tg_optim_free(ctx, opt);
    tg_params_free(&params);
    tg_linear_free(ctx, fc);
}
END_TEST

/* ---- all-reduce ------------------------------------------------------------ */

/* Rank r's weight: not a power of two, so the products round. */
static double weight_of(int r) { return 1.0 / (r + 1.5); }

/* The reference: ((w_0 x_0 + w_1 x_1) + ...) in rank order (forward) or
 * the reverse order, by plain loops in the dtype, into out[i]. */
static tg_tensor *reference_sum(tg_ctx *c, int i, bool forward) {
    tg_tensor *out = tg_zeros(c, odd_dtype[i], TG_SHAPE(odd_numel[i]));
    for (int k = 0; k < nproc; k++) {
        int q = forward ? k : nproc - 1 - k;
        tg_tensor *x[NODD];
        uint64_t seed, offset;
        tg_rng_state(c, &seed, &offset);
        odd_tensors(c, q, x);
        tg_rng_set_state(c, seed, offset);
        for (int64_t e = 0; e < odd_numel[i]; e++) {
            if (odd_dtype[i] == TG_F64) {
                double t = weight_of(q) * ((double *)x[i]->data)[e], *y = (double *)out->data + e;
                *y = k == 0 ? t : *y + t;
            } else {
                float t = (float)weight_of(q) * ((float *)x[i]->data)[e], *y = (float *)out->data + e;
                *y = k == 0 ? t : *y + t;
            }
        }
    }
    return out;
}

START_TEST(test_allreduce_rank_order) {
    static const size_t buckets[] = {64, 1000, 4 << 20};
    bool ok[3];
    tg_tensor *t[3][NODD];
    tg_dist_reset_stats(world);
    for (int b = 0; b < 3; b++) {
        odd_tensors(ctx, rank, t[b]);
        tg_dist_set_bucket_bytes(world, buckets[b]);
        ok[b] = tg_dist_allreduce(ctx, world, t[b], NODD, weight_of(rank));
    }
    tg_dist_stats st = tg_dist_get_stats(world);
    int order_matters = 0;
    for (int b = 0; b < 3; b++) ck_assert_msg(ok[b], "bucket %zu: %s", buckets[b], tg_error_message(ctx));
    for (int i = 0; i < NODD; i++) {
        tg_tensor *want = reference_sum(ctx, i, true), *reverse = reference_sum(ctx, i, false);
        for (int b = 0; b < 3; b++) {
            char what[64];
            snprintf(what, sizeof what, "bucket %zu, tensor %d, rank %d of %d", buckets[b], i, rank, nproc);
            ck_assert_int_eq(t[b][i]->ndim, i == 6 ? 0 : 1);
            tg_test_assert_same_bits(what, t[b][i], want);
        }
        order_matters += memcmp(want->data, reverse->data, (size_t)want->numel * tg_dtype_size(want->dtype)) != 0;
    }
    /* the data tell the orders apart once there are three terms */
    if (nproc >= 3) ck_assert_int_gt(order_matters, 0);
    /* the stats: three calls; per call the head exchange and 2 messages per window */
    ck_assert_int_eq(st.calls, 3);
    ck_assert(st.seconds >= 0);
    double bytes = 0;
    for (int i = 0; i < NODD; i++) bytes += (double)odd_numel[i] * (double)tg_dtype_size(odd_dtype[i]);
    ck_assert(st.bytes == 3 * bytes);
    int64_t messages = 0;
    for (int b = 0; b < 3; b++) {
        int64_t n32 = 1 + 7 + 1001, n64 = 3 + 257 + 1, w32 = (int64_t)buckets[b] / 4, w64 = (int64_t)buckets[b] / 8;
        messages += 1 + 2 * ((n32 + w32 - 1) / w32 + (n64 + w64 - 1) / w64);
    }
    ck_assert_int_eq(st.messages, nproc > 1 ? messages : 0);
}
END_TEST

START_TEST(test_allreduce_f64_values) {
    double v[5], want[5];
    for (int i = 0; i < 5; i++) v[i] = (rank + 1) * 0.1 + i * 1e-17;
    tg_dist_reset_stats(world);
    bool ok = tg_dist_allreduce_f64(ctx, world, v, 5, weight_of(rank));
    bool empty = tg_dist_allreduce_f64(ctx, world, NULL, 0, 1.0);
    ck_assert_msg(ok && empty, "%s", tg_error_message(ctx));
    /* a few values (a loss) travel in the head exchange: one message a call */
    ck_assert_int_eq(tg_dist_get_stats(world).messages, nproc > 1 ? 2 : 0);
    for (int i = 0; i < 5; i++) {
        for (int q = 0; q < nproc; q++) {
            double t = weight_of(q) * ((q + 1) * 0.1 + i * 1e-17);
            want[i] = q == 0 ? t : want[i] + t;
        }
        ck_assert_msg(memcmp(&v[i], &want[i], sizeof v[i]) == 0, "value %d: %.17g, want %.17g", i, v[i], want[i]);
    }
}
END_TEST

/* ---- training: P ranks == one process with P micro-batches ----------------- */

#define B 11 /* global batch: not a multiple of 2, 3 or 4 */
#define IN 3
#define CLASSES 4
#define STEPS 4

typedef struct net {
    tg_model model;
    tg_linear *fc1, *fc2;
    tg_layernorm *norm;
    tg_params params;
    tg_optim *opt;
} net;

static void net_init(tg_ctx *c, net *n) {
    memset(n, 0, sizeof *n);
    tg_rng_seed(c, 3);
    tg_model_add(c, &n->model, TG_MODULE(n->fc1 = tg_linear_new(c, "fc1", IN, 8, true, TG_F32)));
    tg_model_add(c, &n->model,
                 TG_MODULE(n->norm = tg_layernorm_new(c, "norm", 1, (int64_t[]){8}, 1e-5, true, true, TG_F32)));
    tg_model_add(c, &n->model, TG_MODULE(n->fc2 = tg_linear_new(c, "fc2", 8, CLASSES, true, TG_F32)));
    tg_model_params(c, &n->model, &n->params);
    tg_adam_opts o = tg_adam_defaults();
    o.lr = 0.05;
    n->opt = tg_adam_new(c, &n->params, &o);
}

static void net_free(tg_ctx *c, net *n) {
    tg_optim_free(c, n->opt);
    tg_params_free(&n->params);
    tg_model_free(c, &n->model);
}

/* The global batch of step s (the same on every rank). */
static void batch(int s, float *x, int64_t *y) {
    for (int i = 0; i < B; i++) {
        for (int j = 0; j < IN; j++) x[i * IN + j] = (float)sin(1.7 * (s * B + i) + 0.9 * j);
        y[i] = (s * 5 + i * 3) % CLASSES;
    }
}

/* Forward and backward of slice `part` of `parts` of the batch: the
 * parameters' grads hold the gradient of its mean loss. Returns b / B. */
static double slice_backward(tg_ctx *c, net *n, const float *x, const int64_t *y, int parts, int part) {
    int64_t start, count;
    tg_dist_split(B, parts, part, &start, &count);
    tg_tensor *xs = tg_from_buffer(c, TG_F32, TG_SHAPE(count, IN), x + start * IN);
    tg_tensor *h = tg_relu(c, tg_layernorm_forward(c, n->norm, tg_linear_forward(c, n->fc1, xs)));
    tg_tensor *loss = tg_cross_entropy(c, tg_linear_forward(c, n->fc2, h), y + start, NULL);
    tg_optim_zero_grad(c, n->opt);
    tg_backward(c, loss);
    return (double)count / B;
}

START_TEST(test_ranks_equal_accumulation) {
    /* the run across the ranks: each its slice, the sum by all-reduce */
    net dist;
    net_init(ctx, &dist);
    tg_set_threads(ctx, 1);
    bool ok = tg_dist_broadcast_params(ctx, world, &dist.params);
    float x[B * IN];
    int64_t y[B];
    for (int s = 0; s < STEPS; s++) {
        batch(s, x, y);
        double w = slice_backward(ctx, &dist, x, y, nproc, rank);
        ok = tg_dist_allreduce_grads(ctx, world, &dist.params, w) && ok;
        tg_optim_step(ctx, dist.opt);
        tg_ctx_reset(ctx);
    }
    /* every rank holds the same parameters */
    for (int i = 0; i < dist.params.count; i++) {
        const tg_tensor *v = dist.params.items[i].value;
        ok = tg_dist_same(ctx, world, v->data, (size_t)v->numel * 4, "the parameters") && ok;
    }
    ck_assert_msg(ok, "%s", tg_error_message(ctx));

    /* one process, with another thread count: the same P slices as
     * micro-batches through the accumulator */
    tg_ctx *one = tg_ctx_new(11);
    tg_set_threads(one, 2);
    net acc_net;
    net_init(one, &acc_net);
    tg_grad_accum *acc = tg_grad_accum_new(one, &acc_net.params);
    for (int s = 0; s < STEPS; s++) {
        batch(s, x, y);
        for (int m = 0; m < nproc; m++) {
            double w = slice_backward(one, &acc_net, x, y, nproc, m);
            tg_grad_accum_add(one, acc, w);
            tg_ctx_reset(one);
        }
        ck_assert_int_eq(tg_grad_accum_count(acc), nproc);
        tg_grad_accum_finish(one, acc);
        tg_optim_step(one, acc_net.opt);
    }
    ck_assert_msg(tg_ok(one), "%s", tg_error_message(one));
    for (int i = 0; i < dist.params.count; i++) {
        char what[160];
        snprintf(what, sizeof what, "%s after %d steps, %d ranks vs %d micro-batches", dist.params.items[i].name, STEPS,
                 nproc, nproc);
        tg_test_assert_same_bits(what, dist.params.items[i].value, acc_net.params.items[i].value);
    }
    /* and the training moved them */
    net fresh;
    net_init(one, &fresh);
    ck_assert(memcmp(fresh.params.items[0].value->data, dist.params.items[0].value->data, 4 * 8 * IN) != 0);
    net_free(one, &fresh);
    tg_grad_accum_free(one, acc);
    net_free(one, &acc_net);
    tg_ctx_free(one);
    net_free(ctx, &dist);
}
END_TEST

/* tg_dist_backward: backward with the all-reduce under it gives the bits
 * of tg_backward then tg_dist_allreduce_grads, step after step, for any
 * bucket size; with small buckets some start while backward runs. A rank
 * in error fails it on every rank. */
START_TEST(test_backward_overlaps) {
    static const size_t buckets[] = {64, 1000, 4 << 20};
    float x[B * IN];
    int64_t y[B];
    bool ok = true;
    int64_t early = 0;
    for (int b = 0; b < 3; b++) {
        tg_dist_set_bucket_bytes(world, buckets[b]);
        net two[2];
        net_init(ctx, &two[0]);
        net_init(ctx, &two[1]);
        for (int s = 0; s < STEPS; s++) {
            batch(s, x, y);
            for (int k = 0; k < 2; k++) {
                int64_t start, count;
                tg_dist_split(B, nproc, rank, &start, &count);
                net *n = &two[k];
                tg_tensor *xs = tg_from_buffer(ctx, TG_F32, TG_SHAPE(count, IN), x + start * IN);
                tg_tensor *h = tg_relu(ctx, tg_layernorm_forward(ctx, n->norm, tg_linear_forward(ctx, n->fc1, xs)));
                tg_tensor *loss = tg_cross_entropy(ctx, tg_linear_forward(ctx, n->fc2, h), y + start, NULL);
                tg_optim_zero_grad(ctx, n->opt);
                tg_dist_reset_stats(world);
                if (k == 0) {
                    tg_backward(ctx, loss);
                    ok = tg_dist_allreduce_grads(ctx, world, &n->params, (double)count / B) && ok;
                } else {
                    ok = tg_dist_backward(ctx, world, loss, &n->params, (double)count / B) && ok;
                    early += tg_dist_get_stats(world).early;
                }
            }
            for (int i = 0; i < two[0].params.count; i++) {
                char what[160];
                snprintf(what, sizeof what, "grad of %s, step %d, bucket %zu, rank %d of %d",
                         two[0].params.items[i].name, s, buckets[b], rank, nproc);
                tg_test_assert_same_bits(what, two[1].params.items[i].value->grad, two[0].params.items[i].value->grad);
            }
            tg_optim_step(ctx, two[0].opt);
            tg_optim_step(ctx, two[1].opt);
            tg_ctx_reset(ctx);
        }
        net_free(ctx, &two[0]);
        net_free(ctx, &two[1]);
    }
    ck_assert_msg(ok, "%s", tg_error_message(ctx));
    if (nproc > 1) ck_assert_int_gt(early, 0); /* 64-byte buckets: the last layers' go out during backward */
    else ck_assert_int_eq(early, 0);
    /* the last rank in error before: every rank fails, none waits */
    tg_ctx *c = tg_ctx_new(1);
    net n;
    net_init(c, &n);
    batch(0, x, y);
    tg_tensor *xs = tg_from_buffer(c, TG_F32, TG_SHAPE(B, IN), x);
    tg_tensor *loss =
        tg_cross_entropy(c, tg_linear_forward(c, n.fc2, tg_relu(c, tg_linear_forward(c, n.fc1, xs))), y, NULL);
    if (rank == nproc - 1) tg_error(c, TG_ERR_IO, "loader", "disk on fire");
    ck_assert(!tg_dist_backward(c, world, loss, &n.params, 1.0));
    if (rank == nproc - 1) tg_test_assert_error(c, TG_ERR_IO, "loader: disk on fire", NULL);
    else tg_test_assert_error(c, TG_ERR_IO, "tg_dist_backward", "failed: loader: disk on fire", NULL);
    net_free(c, &n);
    tg_ctx_free(c);
    ck_assert(!tg_dist_backward(ctx, NULL, loss, NULL, 1.0));
    tg_test_assert_error(ctx, TG_ERR_NULL, "tg_dist_backward", "'d' is NULL", NULL);
}
END_TEST

/* The optimizer state split over the ranks: after several AdamW steps,
 * every rank's parameters are bitwise those of one process with an
 * optimizer over all of them and the P slices as micro-batches; each
 * rank's state is its share's (all of it with one rank), and the shares
 * tile the parameters. Buckets that cut parameters between ranks. */
START_TEST(test_shard_equals_full) {
    static const size_t buckets[] = {64, 1000, 4 << 20};
    float x[B * IN];
    int64_t y[B];
    for (int b = 0; b < 3; b++) {
        tg_dist_set_bucket_bytes(world, buckets[b]);
        net sh;
        net_init(ctx, &sh);
        tg_optim_free(ctx, sh.opt); /* replaced by one over this rank's share */
        tg_dist_shard *s = tg_dist_shard_new(ctx, world, &sh.params);
        ck_assert_msg(s != NULL, "%s", tg_error_message(ctx));
        tg_adam_opts o = tg_adamw_defaults();
        o.lr = 0.05;
        sh.opt = tg_adamw_new(ctx, tg_dist_shard_params(s), &o);
        bool ok = true;
        for (int st = 0; st < STEPS; st++) {
            batch(st, x, y);
            tg_params_zero_grad(ctx, &sh.params);
            int64_t start, count;
            tg_dist_split(B, nproc, rank, &start, &count);
            tg_tensor *xs = tg_from_buffer(ctx, TG_F32, TG_SHAPE(count, IN), x + start * IN);
            tg_tensor *h = tg_relu(ctx, tg_layernorm_forward(ctx, sh.norm, tg_linear_forward(ctx, sh.fc1, xs)));
            tg_tensor *loss = tg_cross_entropy(ctx, tg_linear_forward(ctx, sh.fc2, h), y + start, NULL);
            ok = tg_dist_backward(ctx, world, loss, &sh.params, (double)count / B) && ok;
            tg_optim_step(ctx, sh.opt);
            ok = tg_dist_shard_gather(ctx, s) && ok;
            tg_ctx_reset(ctx);
        }
        ck_assert_msg(ok, "%s", tg_error_message(ctx));
        /* the state: 1 + 2 per view, the views' elements this rank's share */
        int64_t mine = 0, total = tg_params_numel(&sh.params), state = 0;
        tg_params *share = tg_dist_shard_params(s);
        for (int i = 0; i < share->count; i++) mine += share->items[i].value->numel;
        tg_params *opt_state = tg_optim_state(sh.opt);
        for (int i = 1; i < opt_state->count; i++) state += opt_state->items[i].value->numel;
        ck_assert_int_eq(state, 2 * mine);
        double shares = (double)mine;
        ck_assert(tg_dist_allreduce_f64(ctx, world, &shares, 1, 1.0));
        ck_assert(shares == (double)total);
        if (nproc == 1) ck_assert_int_eq(mine, total);
        else ck_assert_int_le(mine, total / nproc + 64); /* about 1/P: a window's chunks differ by an element */
        /* one process, a whole optimizer, the P slices as micro-batches */
        tg_ctx *one = tg_ctx_new(11);
        net full;
        net_init(one, &full);
        tg_optim_free(one, full.opt);
        full.opt = tg_adamw_new(one, &full.params, &o);
        tg_grad_accum *acc = tg_grad_accum_new(one, &full.params);
        for (int st = 0; st < STEPS; st++) {
            batch(st, x, y);
            for (int m = 0; m < nproc; m++) {
                tg_grad_accum_add(one, acc, slice_backward(one, &full, x, y, nproc, m));
                tg_ctx_reset(one);
            }
            tg_grad_accum_finish(one, acc);
            tg_optim_step(one, full.opt);
        }
        ck_assert_msg(tg_ok(one), "%s", tg_error_message(one));
        for (int i = 0; i < full.params.count; i++) {
            char what[160];
            snprintf(what, sizeof what, "%s, bucket %zu, rank %d of %d", full.params.items[i].name, buckets[b], rank,
                     nproc);
            tg_test_assert_same_bits(what, sh.params.items[i].value, full.params.items[i].value);
        }
        tg_grad_accum_free(one, acc);
        net_free(one, &full);
        tg_ctx_free(one);
        tg_optim_free(ctx, sh.opt);
        sh.opt = NULL;
        tg_dist_shard_free(ctx, s);
        net_free(ctx, &sh);
    }
    ck_assert_ptr_null(tg_dist_shard_new(ctx, NULL, NULL));
    tg_test_assert_error(ctx, TG_ERR_NULL, "tg_dist_shard_new", "'d' is NULL", NULL);
}
END_TEST

/* ---- errors ------------------------------------------------------------------ */

START_TEST(test_one_rank_error_ends_all) {
    const int bad = nproc - 1;
    tg_ctx *c[5];
    bool ok[5];
    for (int k = 0; k < 5; k++) {
        c[k] = tg_ctx_new(1);
        if (rank == bad) tg_error(c[k], TG_ERR_IO, "loader", "disk %d on fire", k);
    }
    double v[3] = {1, 2, 3};
    tg_tensor *t = tg_ones(ctx, TG_F32, TG_SHAPE(4));
    tg_params none = {0};
    ok[0] = tg_dist_allreduce_f64(c[0], world, v, 3, 1.0);
    ok[1] = tg_dist_broadcast(c[1], world, &t, 1);
    ok[2] = tg_dist_agree(c[2], world, true);
    ok[3] = tg_dist_same(c[3], world, "x", 1, "x");
    ok[4] = tg_dist_allreduce_grads(c[4], world, &none, 1.0);
    /* the ranks are still in step: a collective on a good context works */
    bool after = tg_dist_allreduce_f64(ctx, world, v, 3, 1.0);
    static const char *const fn[5] = {"tg_dist_allreduce_f64", "tg_dist_broadcast", "tg_dist_agree", "tg_dist_same",
                                      "tg_dist_allreduce_grads"};
    for (int k = 0; k < 5; k++) {
        ck_assert_msg(!ok[k], "%s succeeded on rank %d with rank %d in error", fn[k], rank, bad);
        char own[32], who[32];
        snprintf(own, sizeof own, "disk %d on fire", k);
        snprintf(who, sizeof who, "rank %d failed", bad);
        if (rank == bad) tg_test_assert_error(c[k], TG_ERR_IO, "loader: ", own, NULL);
        else tg_test_assert_error(c[k], TG_ERR_IO, fn[k], who, own, NULL);
        tg_ctx_free(c[k]);
    }
    ck_assert_msg(after, "%s", tg_error_message(ctx));
    ck_assert(v[0] == nproc && v[2] == 3.0 * nproc);
}
END_TEST

START_TEST(test_agree_failed_without_error) {
    /* rank 0 says it failed (it printed why itself); its context stays clean */
    bool ok = tg_dist_agree(ctx, world, rank != 0);
    ck_assert(!ok);
    if (rank == 0) ck_assert_msg(tg_ok(ctx), "%s", tg_error_message(ctx));
    else tg_test_assert_error(ctx, TG_ERR_STATE, "tg_dist_agree: rank 0 failed", "its own output says why", NULL);
    ck_assert(tg_dist_agree(ctx, world, true));
}
END_TEST

START_TEST(test_layout_mismatch) {
    /* another size on the last rank, then another bucket size: with one
     * rank there is nothing to differ from */
    tg_tensor *t = tg_ones(ctx, TG_F32, TG_SHAPE(nproc > 1 && rank == nproc - 1 ? 5 : 4));
    tg_ctx *c2 = tg_ctx_new(1), *c3 = tg_ctx_new(1), *c4 = tg_ctx_new(1);
    bool size_ok = tg_dist_allreduce(ctx, world, &t, 1, 1.0);
    tg_tensor *u = tg_ones(c2, TG_F64, TG_SHAPE(4));
    tg_dist_set_bucket_bytes(world, rank == nproc - 1 ? 128 : 256);
    bool bucket_ok = tg_dist_broadcast(c2, world, &u, 1);
    tg_dist_set_bucket_bytes(world, 4 << 20);
    char mine[16];
    snprintf(mine, sizeof mine, "rank %d", rank);
    bool same_ok = tg_dist_same(c3, world, mine, strlen(mine), "the names");
    bool equal_ok = tg_dist_same(c4, world, "same", 4, "the words");
    if (nproc == 1) {
        ck_assert(size_ok && bucket_ok && same_ok);
    } else {
        ck_assert(!size_ok && !bucket_ok && !same_ok);
        tg_test_assert_error(ctx, TG_ERR_STATE, "tg_dist_allreduce: the tensors", "differ between the ranks", NULL);
        tg_test_assert_error(c2, TG_ERR_STATE, "tg_dist_broadcast:", "bucket sizes differ between the ranks", NULL);
        tg_test_assert_error(c3, TG_ERR_STATE, "tg_dist_same: the names differ between the ranks", NULL);
    }
    ck_assert_msg(equal_ok, "%s", tg_error_message(c4));
    tg_ctx_free(c2);
    tg_ctx_free(c3);
    tg_ctx_free(c4);
}
END_TEST

START_TEST(test_bad_arguments) {
    /* the same bad call on every rank: each names the function and the argument */
    double v = 1;
    ck_assert(!tg_dist_allreduce_f64(ctx, world, &v, 1, NAN));
    tg_test_assert_error(ctx, TG_ERR_VALUE, "tg_dist_allreduce_f64", "weight = nan", NULL);
    ck_assert(!tg_dist_allreduce(ctx, world, NULL, 2, 1.0));
    tg_test_assert_error(ctx, TG_ERR_NULL, "tg_dist_allreduce", "2 tensors", NULL);
    tg_tensor *list[2] = {tg_ones(ctx, TG_F32, TG_SHAPE(2)), NULL};
    ck_assert(!tg_dist_broadcast(ctx, world, list, 2));
    tg_test_assert_error(ctx, TG_ERR_NULL, "tg_dist_broadcast", "argument 'tensors[1]' is NULL", NULL);
    ck_assert(!tg_dist_broadcast_optim(ctx, world, NULL));
    tg_test_assert_error(ctx, TG_ERR_NULL, "tg_dist_broadcast_optim", "'opt'", NULL);
    ck_assert(!tg_dist_allreduce_grads(ctx, world, NULL, 1.0));
    tg_test_assert_error(ctx, TG_ERR_NULL, "tg_dist_allreduce_grads", "'params'", NULL);
    /* a NULL d joins nothing (no rank waits for it: every rank passes NULL) */
    ck_assert(!tg_dist_agree(ctx, NULL, true));
    tg_test_assert_error(ctx, TG_ERR_NULL, "tg_dist_agree", "'d' is NULL", NULL);
    /* a parameter without a grad (its grad taken away for the call) */
    tg_tensor *p = tg_persist(ctx, tg_ones(ctx, TG_F32, TG_SHAPE(3)));
    tg_params params = {0};
    tg_params_add(ctx, &params, NULL, "p", p, false);
    tg_tensor *grad = p->grad;
    p->grad = NULL;
    ck_assert(!tg_dist_allreduce_grads(ctx, world, &params, 1.0));
    tg_test_assert_error(ctx, TG_ERR_STATE, "tg_dist_allreduce_grads", "\"p\" has no grad", NULL);
    p->grad = grad;
    tg_params_free(&params);
    tg_tensor_free(ctx, p);
    /* bucket sizes are clamped */
    tg_dist_set_bucket_bytes(world, 1);
    ck_assert_uint_eq(tg_dist_bucket_bytes(world), 64);
    tg_dist_set_bucket_bytes(world, (size_t)1 << 40);
    ck_assert_uint_eq(tg_dist_bucket_bytes(world), (size_t)1 << 30);
}
END_TEST

/* ---- the accumulator (one process) -------------------------------------------- */

START_TEST(test_accum_folds_in_order) {
    /* an f32 and an f64 parameter; three micro-batches of known grads */
    tg_tensor *a = tg_persist(ctx, tg_zeros(ctx, TG_F32, TG_SHAPE(2, 3)));
    tg_tensor *b = tg_persist(ctx, tg_zeros(ctx, TG_F64, TG_SHAPE(5)));
    tg_requires_grad(ctx, a);
    tg_requires_grad(ctx, b);
    tg_params params = {0};
    tg_params_add(ctx, &params, NULL, "a", a, true);
    tg_params_add(ctx, &params, NULL, "b", b, true);
    tg_grad_accum *acc = tg_grad_accum_new(ctx, &params);
    ck_assert_msg(acc != NULL, "%s", tg_error_message(ctx));
    static const double w[3] = {0.3, 1.0 / 3.0, 0.7};
    float fa[6] = {0};
    double fb[5] = {0};
    for (int m = 0; m < 3; m++) {
        for (int i = 0; i < 6; i++) ((float *)a->grad->data)[i] = (float)ldexp(1.0 + m, 10 * m - 10) + (float)i;
        for (int i = 0; i < 5; i++) ((double *)b->grad->data)[i] = ldexp(1.0 + m, 40 * m - 40) + i;
        ck_assert(tg_grad_accum_add(ctx, acc, w[m]));
        for (int i = 0; i < 6; i++) {
            float t = (float)w[m] * ((float *)a->grad->data)[i];
            fa[i] = m == 0 ? t : fa[i] + t;
        }
        for (int i = 0; i < 5; i++) {
            double t = w[m] * ((double *)b->grad->data)[i];
            fb[i] = m == 0 ? t : fb[i] + t;
        }
    }
    ck_assert_int_eq(tg_grad_accum_count(acc), 3);
    ck_assert(tg_grad_accum_finish(ctx, acc));
    ck_assert_int_eq(tg_grad_accum_count(acc), 0);
    ck_assert(memcmp(a->grad->data, fa, sizeof fa) == 0);
    ck_assert(memcmp(b->grad->data, fb, sizeof fb) == 0);
    /* a new sum starts after finish */
    tg_fill(ctx, a->grad, 2);
    tg_fill(ctx, b->grad, 2);
    tg_grad_accum_add(ctx, acc, 0.5);
    tg_grad_accum_finish(ctx, acc);
    ck_assert(tg_get_flat(ctx, a->grad, 5) == 1.0 && tg_get_flat(ctx, b->grad, 4) == 1.0);

    /* errors: nothing added, a bad weight, a list that grew */
    ck_assert(!tg_grad_accum_finish(ctx, acc));
    tg_test_assert_error(ctx, TG_ERR_STATE, "tg_grad_accum_finish", "no micro-batch was added", NULL);
    ck_assert(!tg_grad_accum_add(ctx, acc, INFINITY));
    tg_test_assert_error(ctx, TG_ERR_VALUE, "tg_grad_accum_add", "weight = inf", NULL);
    ck_assert(!tg_grad_accum_add(ctx, NULL, 1));
    tg_test_assert_error(ctx, TG_ERR_NULL, "tg_grad_accum_add", "'acc'", NULL);
    tg_tensor *c = tg_persist(ctx, tg_zeros(ctx, TG_F32, TG_SHAPE(1)));
    tg_params_add(ctx, &params, NULL, "c", c, true);
    ck_assert(!tg_grad_accum_add(ctx, acc, 1));
    tg_test_assert_error(ctx, TG_ERR_STATE, "tg_grad_accum_add", "3 parameters", "made for 2", NULL);
    ck_assert_ptr_null(tg_grad_accum_new(ctx, NULL));
    tg_test_assert_error(ctx, TG_ERR_NULL, "tg_grad_accum_new", "'params'", NULL);
    /* a parameter without a grad (its grad taken away for the call) */
    tg_grad_accum *acc3 = tg_grad_accum_new(ctx, &params);
    tg_tensor *grad = c->grad;
    c->grad = NULL;
    ck_assert(!tg_grad_accum_add(ctx, acc3, 1));
    tg_test_assert_error(ctx, TG_ERR_STATE, "tg_grad_accum_add", "\"c\" has no grad", NULL);
    c->grad = grad;
    tg_grad_accum_free(ctx, acc3);
    tg_grad_accum_free(ctx, acc);
    tg_params_free(&params);
}
END_TEST

static Suite *make_dist_suite(void) {
    Suite *s = suite_create("dist");
    tg_test_tcase(s, "world", setup, teardown, test_split_tiles, test_draw_any_split, test_world, test_timeout,
                  test_fingerprint, NULL);
    tg_test_tcase(s, "broadcast", setup, teardown, test_broadcast_odd_sizes, test_broadcast_rng_and_optim, NULL);
    tg_test_tcase(s, "allreduce", setup, teardown, test_allreduce_rank_order, test_allreduce_f64_values, NULL);
    tg_test_tcase(s, "training", setup, teardown, test_ranks_equal_accumulation, test_backward_overlaps,
                  test_shard_equals_full, NULL);
    tg_test_tcase(s, "errors", setup, teardown, test_one_rank_error_ends_all, test_agree_failed_without_error,
                  test_layout_mismatch, test_bad_arguments, NULL);
    tg_test_tcase(s, "accumulator", setup, teardown, test_accum_folds_in_order, NULL);
    return s;
}

int main(int argc, char **argv) {
    tg_ctx *init = tg_ctx_new(0);
    world = tg_dist_init(init, &argc, &argv);
    if (!world) {
        fprintf(stderr, "test_dist: %s\n", tg_error_message(init));
        tg_ctx_free(init);
        return EXIT_FAILURE;
    }
    rank = tg_dist_rank(world);
    nproc = tg_dist_size(world);
    if (rank == 0) printf("test_dist: %d process%s (%s)\n", nproc, nproc > 1 ? "es" : "", tg_dist_backend(world));
    setenv("CK_FORK", "no", 1); /* a forked child cannot join the collectives */
    int rc = tg_test_run(make_dist_suite());
    tg_dist_free(world);
    tg_ctx_free(init);
    return rc;
}

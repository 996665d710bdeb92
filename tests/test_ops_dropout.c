/* tg_dropout: eval and p = 0 are the identity; in training the mask is the
 * documented one (recomputed here from the public Philox function), kept
 * values are scaled by 1/(1-p), the drop rate is near p, the RNG offset
 * advances by numel, the mask does not depend on the thread count; backward
 * by hand and by finite differences; the error paths. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static tg_ctx *ctx;

static void setup(void) { ctx = tg_ctx_new(2024); }
static void teardown(void) { tg_ctx_free(ctx); }

/* u_i as tapegrad.h documents it: Philox4x32-10 with counter (offset + i)
 * split low/high, 0, 0 and key = seed split low/high; the f64 uniform is
 * the top 53 bits of (x0:x1). */
static double doc_uniform(uint64_t seed, uint64_t offset, int64_t i) {
    uint64_t c = offset + (uint64_t)i;
    uint32_t ctr[4] = {(uint32_t)c, (uint32_t)(c >> 32), 0, 0};
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint32_t x[4];
    tg_philox4x32_10(x, ctr, key);
    uint64_t w = ((uint64_t)x[0] << 32) | x[1];
    return (double)(w >> 11) * 0x1.0p-53;
}

START_TEST(test_eval_and_zero_p) {
    tg_tensor *x = tg_requires_grad(ctx, tg_randn(ctx, TG_F32, TG_SHAPE(3, 4), 0, 1));
    uint64_t s0, o0, s1, o1;
    tg_rng_state(ctx, &s0, &o0);
    ck_assert_ptr_eq(tg_dropout(ctx, x, 0.5, false), x);
    ck_assert_ptr_eq(tg_dropout(ctx, x, 0.0, true), x);
    tg_rng_state(ctx, &s1, &o1);
    ck_assert_uint_eq(o0, o1); /* nothing drawn */
    ck_assert_int_eq(tg_tape_size(ctx), 0);
}
END_TEST

static void mask_matches_doc(tg_dtype dt, int64_t n, double p) {
    tg_tensor *x = tg_rand(ctx, dt, TG_SHAPE(n), 0.5, 2.0);
    uint64_t seed, off, off2;
    tg_rng_state(ctx, &seed, &off);
    tg_tensor *y = tg_dropout(ctx, x, p, true);
    ck_assert_ptr_nonnull(y);
    ck_assert_ptr_ne(y, x);
    tg_rng_state(ctx, NULL, &off2);
    ck_assert_uint_eq(off2, off + (uint64_t)n);
    int64_t dropped = 0;
    for (int64_t i = 0; i < n; i++) {
        bool keep = doc_uniform(seed, off, i) >= p;
        double xv = tg_get_flat(ctx, x, i), yv = tg_get_flat(ctx, y, i);
        if (keep) {
            double want = dt == TG_F32 ? (double)((float)xv * (float)(1.0 / (1.0 - p))) : xv * (1.0 / (1.0 - p));
            ck_assert_msg(yv == want, "element %lld: %.9g, expected %.9g", (long long)i, yv, want);
        } else {
            ck_assert_msg(yv == 0.0, "element %lld dropped but %.9g", (long long)i, yv);
            dropped++;
        }
    }
    /* the drop rate is p within 5 standard deviations */
    double rate = (double)dropped / (double)n, sd = sqrt(p * (1 - p) / (double)n);
    ck_assert_msg(fabs(rate - p) <= 5 * sd + 1e-12, "drop rate %g for p %g", rate, p);
}

START_TEST(test_mask_is_documented_stream) {
    mask_matches_doc(TG_F32, 20000, 0.3);
    mask_matches_doc(TG_F64, 5000, 0.5);
    mask_matches_doc(TG_F64, 1000, 0.9);
    mask_matches_doc(TG_F32, 3, 0.1);
}
END_TEST

START_TEST(test_threads_and_seeds) {
    tg_tensor *x = tg_randn(ctx, TG_F32, TG_SHAPE(100, 400), 0, 1);
    tg_tensor *y[2];
    for (int r = 0; r < 2; r++) {
        tg_set_threads(ctx, r + 1);
        tg_rng_set_state(ctx, 77, 1000);
        y[r] = tg_dropout(ctx, x, 0.4, true);
    }
    tg_test_assert_same_bits("1 vs 2 threads", y[0], y[1]);
    /* the next call continues the stream: a different mask */
    tg_tensor *z = tg_dropout(ctx, x, 0.4, true);
    ck_assert(memcmp(y[1]->data, z->data, 40000 * 4) != 0);
}
END_TEST

START_TEST(test_backward_by_hand) {
    tg_tensor *x = tg_requires_grad(ctx, tg_randn(ctx, TG_F64, TG_SHAPE(50), 0, 1));
    tg_tensor *y = tg_dropout(ctx, x, 0.25, true);
    tg_tensor *dy = tg_randn(ctx, TG_F64, TG_SHAPE(50), 0, 1);
    tg_backward_ex(ctx, y, dy, false);
    ck_assert(tg_ok(ctx));
    ck_assert_uint_eq(tg_tape_saved_bytes(ctx), 50); /* one byte of mask per element */
    for (int64_t i = 0; i < 50; i++) {
        bool kept = tg_get_flat(ctx, y, i) != 0.0;
        double want = kept ? tg_get_flat(ctx, dy, i) / 0.75 : 0.0;
        ck_assert_double_eq_tol(tg_get_flat(ctx, x->grad, i), want, 1e-15);
    }
}
END_TEST

static tg_tensor *f_dropout(tg_ctx *c, tg_tensor *const *in, void *u) {
    (void)u;
    return tg_dropout(c, in[0], 0.3, true);
}

START_TEST(test_fd) {
    tg_tensor *in[1] = {tg_requires_grad(ctx, tg_randn(ctx, TG_F64, TG_SHAPE(4, 5), 0, 1))};
    tg_test_op_gradcheck(ctx, "dropout", f_dropout, NULL, 1, in);
}
END_TEST

START_TEST(test_errors) {
    tg_tensor *x = tg_zeros(ctx, TG_F32, TG_SHAPE(2));
    double bad[] = {1.0, -0.1, 1.5, NAN};
    for (int i = 0; i < 4; i++) {
        tg_test_assert_fails(ctx, tg_dropout(ctx, x, bad[i], true), TG_ERR_VALUE, "tg_dropout", "p = ", "[0, 1)", NULL);
    }
    /* checked in eval mode too */
    tg_test_assert_fails(ctx, tg_dropout(ctx, x, 1.0, false), TG_ERR_VALUE, "tg_dropout", "p = 1", NULL);
    tg_test_assert_fails(ctx, tg_dropout(ctx, NULL, 0.5, true), TG_ERR_NULL, "tg_dropout", "'x'", NULL);
}
END_TEST

Suite *make_ops_dropout_suite(void) {
    return tg_test_suite("ops_dropout", setup, teardown, test_eval_and_zero_p, test_mask_is_documented_stream,
                         test_threads_and_seeds, test_backward_by_hand, test_fd, test_errors, NULL);
}

int main(void) { return tg_test_run(make_ops_dropout_suite()); }

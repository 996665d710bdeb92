/* tg_attention, the fused scaled-dot-product attention: forward and
 * gradients against PyTorch (tests/fixtures/transformer_ops.txt), against
 * a naive float64 reference written here over shapes that cover the
 * blocking (one row, one block, a block and one row, several blocks, one
 * key, Tq != Tk), against central finite differences, closed forms (a
 * causal first row copies v's first row; equal scores average v), the
 * invariance to a shift of every key, thread-count independence to the
 * bit, gradients for any subset of inputs, q = k = v, the default scale,
 * what its one record saves, large scores, and every error. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static tg_ctx *ctx;
static void setup(void) { ctx = tg_ctx_new(99); }
static void teardown(void) { tg_ctx_free(ctx); }

static const char FX[] = "transformer_ops.txt";

/* ---- the reference: attention by its formulas, in double ---------------------- */

/* One call's sizes. */
typedef struct shape5 {
    int64_t pairs, Tq, Tk, D, Dv;
    bool causal;
} shape5;

/* For every pair, by the textbook formulas (double, no blocking):
 *   S = scale q k^T, masked to -inf above the diagonal when causal,
 *   P = softmax_rows(S), o = P v;
 * and when dO is not NULL, the gradients of sum(dO * o):
 *   dv = P^T dO, dP = dO v^T, dS_ij = P_ij (dP_ij - sum_l P_il dP_il),
 *   dq = scale dS k, dk = scale dS^T q. */
static void ref_attention(const double *q, const double *k, const double *v, const double *dO, double *o, double *dq,
                          double *dk, double *dv, shape5 s, double scale) {
    double *P = tg_test_malloc(sizeof(double) * (size_t)(s.Tq * s.Tk));
    double *dP = tg_test_malloc(sizeof(double) * (size_t)(s.Tq * s.Tk));
    for (int64_t b = 0; b < s.pairs; b++) {
        const double *qb = q + b * s.Tq * s.D, *kb = k + b * s.Tk * s.D, *vb = v + b * s.Tk * s.Dv;
        for (int64_t i = 0; i < s.Tq; i++) {
            double m = -INFINITY;
            for (int64_t j = 0; j < s.Tk; j++) {
                double dot = 0;
                for (int64_t e = 0; e < s.D; e++) dot += qb[i * s.D + e] * kb[j * s.D + e];
                P[i * s.Tk + j] = s.causal && j > i ? -INFINITY : scale * dot;
                if (P[i * s.Tk + j] > m) m = P[i * s.Tk + j];
            }
            double z = 0;
            for (int64_t j = 0; j < s.Tk; j++) z += P[i * s.Tk + j] = exp(P[i * s.Tk + j] - m);
            for (int64_t j = 0; j < s.Tk; j++) P[i * s.Tk + j] /= z;
            for (int64_t e = 0; e < s.Dv; e++) {
                double acc = 0;
                for (int64_t j = 0; j < s.Tk; j++) acc += P[i * s.Tk + j] * vb[j * s.Dv + e];
                o[(b * s.Tq + i) * s.Dv + e] = acc;
            }
        }
        if (!dO) continue;
        const double *dOb = dO + b * s.Tq * s.Dv;
        for (int64_t j = 0; j < s.Tk; j++)
            for (int64_t e = 0; e < s.Dv; e++) {
                double acc = 0;
                for (int64_t i = 0; i < s.Tq; i++) acc += P[i * s.Tk + j] * dOb[i * s.Dv + e];
                dv[(b * s.Tk + j) * s.Dv + e] = acc;
            }
        for (int64_t i = 0; i < s.Tq; i++) {
            double di = 0;
            for (int64_t j = 0; j < s.Tk; j++) {
                double acc = 0;
                for (int64_t e = 0; e < s.Dv; e++) acc += dOb[i * s.Dv + e] * vb[j * s.Dv + e];
                dP[i * s.Tk + j] = acc;
                di += P[i * s.Tk + j] * acc;
            }
            for (int64_t j = 0; j < s.Tk; j++) dP[i * s.Tk + j] = P[i * s.Tk + j] * (dP[i * s.Tk + j] - di);
        }
        for (int64_t i = 0; i < s.Tq; i++)
            for (int64_t e = 0; e < s.D; e++) {
                double acc = 0;
                for (int64_t j = 0; j < s.Tk; j++) acc += dP[i * s.Tk + j] * kb[j * s.D + e];
                dq[(b * s.Tq + i) * s.D + e] = scale * acc;
            }
        for (int64_t j = 0; j < s.Tk; j++)
            for (int64_t e = 0; e < s.D; e++) {
                double acc = 0;
                for (int64_t i = 0; i < s.Tq; i++) acc += dP[i * s.Tk + j] * qb[i * s.D + e];
                dk[(b * s.Tk + j) * s.D + e] = scale * acc;
            }
    }
    free(P);
    free(dP);
}

/* q, k, v of shape s, as (pairs, T, D) tensors, uniform in [-lim, lim). */
static void make_qkv(shape5 s, tg_dtype dt, double lim, tg_tensor **q, tg_tensor **k, tg_tensor **v) {
    *q = tg_requires_grad(ctx, tg_test_rand(ctx, dt, TG_SHAPE(s.pairs, s.Tq, s.D), -lim, lim));
    *k = tg_requires_grad(ctx, tg_test_rand(ctx, dt, TG_SHAPE(s.pairs, s.Tk, s.D), -lim, lim));
    *v = tg_requires_grad(ctx, tg_test_rand(ctx, dt, TG_SHAPE(s.pairs, s.Tk, s.Dv), -lim, lim));
}

/* The fused op against the reference, forward and backward (seeded with a
 * random dO), within tol (relative to max(1, |ref|)). */
static void check_vs_ref(shape5 s, tg_dtype dt, double scale, double lim, double tol) {
    tg_tensor *q, *k, *v;
    make_qkv(s, dt, lim, &q, &k, &v);
    tg_tensor *dO = tg_test_rand(ctx, dt, TG_SHAPE(s.pairs, s.Tq, s.Dv), -1, 1);
    tg_tensor *o = tg_attention(ctx, q, k, v, s.causal, scale);
    ck_assert_msg(o != NULL, "%s", tg_error_message(ctx));
    ck_assert_int_eq(o->ndim, 3);
    ck_assert_int_eq(o->shape[1], s.Tq);
    ck_assert_int_eq(o->shape[2], s.Dv);
    tg_backward_ex(ctx, o, dO, false);
    ck_assert_msg(tg_ok(ctx), "%s", tg_error_message(ctx));

    double *qv = tg_test_values(ctx, q), *kv = tg_test_values(ctx, k), *vv = tg_test_values(ctx, v);
    double *dOv = tg_test_values(ctx, dO);
    double *ro = tg_test_malloc(sizeof(double) * (size_t)(o->numel + 1));
    double *rq = tg_test_malloc(sizeof(double) * (size_t)(q->numel + 1));
    double *rk = tg_test_malloc(sizeof(double) * (size_t)(k->numel + 1));
    double *rv = tg_test_malloc(sizeof(double) * (size_t)(v->numel + 1));
    ref_attention(qv, kv, vv, dOv, ro, rq, rk, rv, s, scale == 0 ? 1 / sqrt((double)s.D) : scale);
    char what[128];
    snprintf(what, sizeof what, "%s pairs %lld Tq %lld Tk %lld D %lld Dv %lld causal %d: o", tg_dtype_name(dt),
             (long long)s.pairs, (long long)s.Tq, (long long)s.Tk, (long long)s.D, (long long)s.Dv, s.causal);
    tg_test_assert_close(ctx, what, o, ro, o->numel, tol, tol);
    tg_test_assert_close(ctx, "dq", q->grad, rq, q->numel, tol, tol);
    tg_test_assert_close(ctx, "dk", k->grad, rk, k->numel, tol, tol);
    tg_test_assert_close(ctx, "dv", v->grad, rv, v->numel, tol, tol);
    free(qv), free(kv), free(vv), free(dOv), free(ro), free(rq), free(rk), free(rv);
    tg_ctx_reset(ctx);
}

/* The blocks are 64 query rows: shapes below, at and across one block, a
 * partial last block, one query, one key, Tq != Tk, D != Dv. */
static const shape5 SHAPES[] = {
    {1, 1, 1, 1, 1, true},    {2, 3, 3, 2, 4, true},       {6, 17, 17, 8, 8, true},    {2, 64, 64, 16, 16, true},
    {2, 65, 65, 4, 8, true},  {3, 130, 130, 32, 32, true}, {1, 200, 200, 8, 3, true},  {5, 70, 33, 8, 4, false},
    {2, 1, 150, 8, 8, false}, {2, 150, 1, 8, 8, false},    {4, 64, 64, 16, 16, false}, {1, 129, 257, 5, 7, false},
};

START_TEST(test_vs_reference_f64) {
    for (size_t i = 0; i < sizeof SHAPES / sizeof SHAPES[0]; i++) check_vs_ref(SHAPES[i], TG_F64, 0, 2, 1e-12);
    check_vs_ref(SHAPES[5], TG_F64, 0.05, 2, 1e-12); /* an explicit scale */
}
END_TEST

/* float32: the GEMM's rounding and the vectorized exp (1.4 ulp). */
START_TEST(test_vs_reference_f32) {
    for (size_t i = 0; i < sizeof SHAPES / sizeof SHAPES[0]; i++) check_vs_ref(SHAPES[i], TG_F32, 0, 2, 2e-5);
}
END_TEST

/* Scores up to about +-1e3 (q, k in [-12, 12), D = 8, scale 1): the
 * softmax starts from each row's max, so float32 stays finite and close
 * to the float64 reference; the gradients are near zero but for a few
 * dominant keys. */
START_TEST(test_large_scores) {
    check_vs_ref((shape5){2, 90, 90, 8, 8, true}, TG_F32, 1.0, 12, 2e-3);
    check_vs_ref((shape5){2, 90, 90, 8, 8, true}, TG_F64, 1.0, 12, 1e-10);
}
END_TEST

/* ---- against PyTorch -------------------------------------------------------------- */

typedef struct fx_case {
    const char *name;
    int nlead;
    int64_t lead[2], Tq, Tk, D, Dv;
    bool causal;
    double scale;
} fx_case;

static const fx_case FX_CASES[] = {
    {"attn_causal", 2, {2, 3}, 7, 7, 4, 5, true, 0},
    {"attn_cross", 1, {2, 0}, 5, 9, 6, 3, false, 0.3},
    {"attn_blocks", 2, {1, 1}, 70, 70, 4, 3, true, 0},
};

static tg_tensor *fx_tensor(const fx_case *c, const char *dn, const char *what, tg_dtype dt, int64_t T, int64_t W) {
    char name[64];
    int64_t shape[4];
    for (int i = 0; i < c->nlead; i++) shape[i] = c->lead[i];
    shape[c->nlead] = T, shape[c->nlead + 1] = W;
    snprintf(name, sizeof name, "%s.%s.%s", c->name, dn, what);
    return tg_requires_grad(ctx, tg_test_fixture_tensor(ctx, FX, name, dt, c->nlead + 2, shape));
}

START_TEST(test_vs_pytorch) {
    for (size_t i = 0; i < sizeof FX_CASES / sizeof FX_CASES[0]; i++)
        for (int d = 0; d < 2; d++) {
            const fx_case *c = &FX_CASES[i];
            const tg_dtype dt = d ? TG_F64 : TG_F32;
            const char *dn = d ? "f64" : "f32";
            const double tol = d ? 1e-12 : 1e-5;
            tg_tensor *q = fx_tensor(c, dn, "q", dt, c->Tq, c->D), *k = fx_tensor(c, dn, "k", dt, c->Tk, c->D);
            tg_tensor *v = fx_tensor(c, dn, "v", dt, c->Tk, c->Dv);
            tg_tensor *o = tg_attention(ctx, q, k, v, c->causal, c->scale);
            ck_assert_msg(o != NULL, "%s: %s", c->name, tg_error_message(ctx));
            char name[64];
            snprintf(name, sizeof name, "%s.%s.y", c->name, dn);
            tg_test_assert_fixture(ctx, o, FX, name, tol);
            tg_backward_ex(ctx, o, tg_test_fixture_weights(ctx, FX, dt, o->ndim, o->shape), false);
            const char *g[3] = {"dq", "dk", "dv"};
            tg_tensor *in[3] = {q, k, v};
            for (int j = 0; j < 3; j++) {
                snprintf(name, sizeof name, "%s.%s.%s", c->name, dn, g[j]);
                tg_test_assert_fixture(ctx, in[j]->grad, FX, name, tol);
            }
            tg_ctx_reset(ctx);
        }
}
END_TEST

/* ---- closed forms ------------------------------------------------------------------- */

/* Causal row 0 sees key 0 alone: P = 1, so o_0 = v_0 exactly. q = 0 makes
 * every score 0, so P is uniform over the keys a row sees: o_i is the mean
 * of v_0..v_i (causal) or of every v_j. */
START_TEST(test_closed_forms) {
    for (int d = 0; d < 2; d++) {
        const tg_dtype dt = d ? TG_F64 : TG_F32;
        const int64_t T = 100, D = 4, Dv = 3;
        tg_tensor *q = tg_test_rand(ctx, dt, TG_SHAPE(2, T, D), -1, 1),
                  *k = tg_test_rand(ctx, dt, TG_SHAPE(2, T, D), -1, 1);
        tg_tensor *v = tg_test_rand(ctx, dt, TG_SHAPE(2, T, Dv), -1, 1);
        tg_tensor *o = tg_attention(ctx, q, k, v, true, 0);
        for (int64_t b = 0; b < 2; b++)
            for (int64_t e = 0; e < Dv; e++)
                ck_assert(tg_get(ctx, o, (int64_t[]){b, 0, e}) == tg_get(ctx, v, (int64_t[]){b, 0, e}));
        tg_tensor *z = tg_zeros(ctx, dt, TG_SHAPE(2, T, D));
        for (int causal = 0; causal < 2; causal++) {
            o = tg_attention(ctx, z, k, v, causal, 0);
            for (int64_t b = 0; b < 2; b++)
                for (int64_t i = 0; i < T; i++)
                    for (int64_t e = 0; e < Dv; e++) {
                        const int64_t n = causal ? i + 1 : T;
                        double mean = 0;
                        for (int64_t j = 0; j < n; j++) mean += tg_get(ctx, v, (int64_t[]){b, j, e});
                        mean /= (double)n;
                        ck_assert_double_eq_tol(tg_get(ctx, o, (int64_t[]){b, i, e}), mean, d ? 1e-14 : 1e-6);
                    }
        }
        tg_ctx_reset(ctx);
    }
}
END_TEST

/* Each row of dS sums to zero over the keys it sees (softmax's gradient
 * is orthogonal to a shift of its row), so moving every key by the same
 * vector changes nothing: sum_j dk_j = scale sum_i q_i sum_j dS_ij = 0
 * for every pair and feature, with or without the mask. */
START_TEST(test_key_shift_invariance) {
    for (int causal = 0; causal < 2; causal++) {
        const int64_t P = 3, T = 90, D = 8;
        tg_tensor *q, *k, *v;
        make_qkv((shape5){P, T, T, D, 5, causal}, TG_F64, 2, &q, &k, &v);
        tg_backward_ex(ctx, tg_attention(ctx, q, k, v, causal, 0), tg_test_rand(ctx, TG_F64, TG_SHAPE(P, T, 5), -1, 1),
                       false);
        ck_assert_msg(tg_ok(ctx), "%s", tg_error_message(ctx));
        tg_tensor *sum = tg_sum_axis(ctx, k->grad, 1, false); /* (P, D) */
        for (int64_t i = 0; i < sum->numel; i++) ck_assert_double_eq_tol(tg_get_flat(ctx, sum, i), 0, 1e-13);
        tg_ctx_reset(ctx);
    }
}
END_TEST

/* ---- finite differences --------------------------------------------------------------- */

typedef struct attn_args {
    bool causal;
    double scale;
    int self; /* 1: q = k = v = in[0] */
} attn_args;

static tg_tensor *f_attention(tg_ctx *c, tg_tensor *const *in, void *u) {
    const attn_args *a = u;
    if (a->self) return tg_attention(c, in[0], in[0], in[0], a->causal, a->scale);
    return tg_attention(c, in[0], in[1], in[2], a->causal, a->scale);
}

START_TEST(test_gradcheck) {
    attn_args causal = {true, 0, 0}, cross = {false, 0.8, 0}, self = {true, 0, 1};
    tg_tensor *in[3] = {tg_test_smooth_leaf(ctx, TG_SHAPE(1, 2, 5, 3), 1),
                        tg_test_smooth_leaf(ctx, TG_SHAPE(1, 2, 5, 3), 2),
                        tg_test_smooth_leaf(ctx, TG_SHAPE(1, 2, 5, 4), 3)};
    tg_test_op_gradcheck(ctx, "attention causal", f_attention, &causal, 3, in);
    tg_tensor *in2[3] = {tg_test_smooth_leaf(ctx, TG_SHAPE(2, 4, 3), 4), tg_test_smooth_leaf(ctx, TG_SHAPE(2, 6, 3), 5),
                         tg_test_smooth_leaf(ctx, TG_SHAPE(2, 6, 2), 6)};
    tg_test_op_gradcheck(ctx, "attention cross", f_attention, &cross, 3, in2);
    /* one tensor as q, k and v: its gradient is the sum of the three */
    tg_tensor *in3[1] = {tg_test_smooth_leaf(ctx, TG_SHAPE(2, 6, 4), 7)};
    tg_test_op_gradcheck(ctx, "attention self", f_attention, &self, 1, in3);
}
END_TEST

/* ---- threads, subsets of gradients, aliasing, defaults ------------------------------------ */

/* o and every gradient, as copies. */
typedef struct run_out {
    tg_tensor *o, *dq, *dk, *dv;
} run_out;

static run_out run(tg_tensor *q, tg_tensor *k, tg_tensor *v, tg_tensor *dO, bool causal, double scale) {
    tg_tensor *in[3] = {q, k, v};
    for (int j = 0; j < 3; j++)
        if (in[j]->requires_grad) tg_zero_grad(ctx, in[j]);
    tg_tensor *o = tg_attention(ctx, q, k, v, causal, scale);
    ck_assert_msg(o != NULL, "%s", tg_error_message(ctx));
    run_out r = {tg_copy(ctx, o), NULL, NULL, NULL};
    if (o->requires_grad) {
        tg_backward_ex(ctx, o, dO, false);
        ck_assert_msg(tg_ok(ctx), "%s", tg_error_message(ctx));
        r.dq = q->grad ? tg_copy(ctx, q->grad) : NULL;
        r.dk = k->grad ? tg_copy(ctx, k->grad) : NULL;
        r.dv = v->grad ? tg_copy(ctx, v->grad) : NULL;
    }
    return r;
}

/* 1, 2, 3 and 4 threads over 5 pairs of 100 rows: the same bits. */
START_TEST(test_threads_bitwise) {
    for (int d = 0; d < 2; d++) {
        const tg_dtype dt = d ? TG_F64 : TG_F32;
        for (int causal = 0; causal < 2; causal++) {
            tg_tensor *q, *k, *v;
            make_qkv((shape5){5, 100, 100, 16, 16, causal}, dt, 2, &q, &k, &v);
            tg_tensor *dO = tg_test_rand(ctx, dt, TG_SHAPE(5, 100, 16), -1, 1);
            tg_set_threads(ctx, 1);
            run_out one = run(q, k, v, dO, causal, 0);
            for (int nt = 2; nt <= 4; nt++) {
                tg_set_threads(ctx, nt);
                run_out r = run(q, k, v, dO, causal, 0);
                tg_test_assert_same_bits("o", r.o, one.o);
                tg_test_assert_same_bits("dq", r.dq, one.dq);
                tg_test_assert_same_bits("dk", r.dk, one.dk);
                tg_test_assert_same_bits("dv", r.dv, one.dv);
            }
            tg_set_threads(ctx, 0);
            tg_ctx_reset(ctx);
        }
    }
}
END_TEST

/* Any subset of q, k, v requiring grad gets the bits it gets when all
 * three do; with none, nothing is recorded. */
START_TEST(test_grad_subsets) {
    const tg_dtype dt = TG_F64;
    tg_tensor *q, *k, *v;
    make_qkv((shape5){3, 70, 70, 8, 5, true}, dt, 2, &q, &k, &v);
    tg_tensor *dO = tg_test_rand(ctx, dt, TG_SHAPE(3, 70, 5), -1, 1);
    run_out all = run(q, k, v, dO, true, 0);
    for (int mask = 0; mask < 8; mask++) {
        tg_tensor *c[3] = {tg_copy(ctx, q), tg_copy(ctx, k), tg_copy(ctx, v)};
        for (int j = 0; j < 3; j++)
            if (mask >> j & 1) tg_requires_grad(ctx, c[j]);
        run_out r = run(c[0], c[1], c[2], dO, true, 0);
        tg_test_assert_same_bits("o", r.o, all.o);
        if (mask & 1) tg_test_assert_same_bits("dq", r.dq, all.dq);
        if (mask & 2) tg_test_assert_same_bits("dk", r.dk, all.dk);
        if (mask & 4) tg_test_assert_same_bits("dv", r.dv, all.dv);
        if (mask == 0) ck_assert(r.dq == NULL && r.dk == NULL && r.dv == NULL); /* o required no grad */
    }
}
END_TEST

/* Self-attention on one tensor x (q = k = v = x): x's gradient is
 * dq + dk + dv of three separate copies. */
START_TEST(test_same_tensor_thrice) {
    const tg_dtype dt = TG_F64;
    tg_tensor *x = tg_requires_grad(ctx, tg_test_rand(ctx, dt, TG_SHAPE(2, 80, 8), -1, 1));
    tg_tensor *dO = tg_test_rand(ctx, dt, TG_SHAPE(2, 80, 8), -1, 1);
    run_out self = run(x, x, x, dO, true, 0);
    tg_tensor *c[3];
    for (int j = 0; j < 3; j++) c[j] = tg_requires_grad(ctx, tg_copy(ctx, x));
    run_out sep = run(c[0], c[1], c[2], dO, true, 0);
    tg_test_assert_same_bits("o", self.o, sep.o);
    tg_tensor *sum = tg_add(ctx, tg_add(ctx, sep.dq, sep.dk), sep.dv);
    tg_test_assert_close_tensors(ctx, "dx = dq + dk + dv", self.dq, sum, 1e-13, 1e-13);
}
END_TEST

/* scale 0 is 1/sqrt(D): the same bits as passing it. */
START_TEST(test_default_scale) {
    tg_tensor *q, *k, *v;
    make_qkv((shape5){2, 30, 30, 16, 16, true}, TG_F32, 2, &q, &k, &v);
    tg_tensor *dO = tg_test_rand(ctx, TG_F32, TG_SHAPE(2, 30, 16), -1, 1);
    run_out a = run(q, k, v, dO, true, 0), b = run(q, k, v, dO, true, 0.25);
    tg_test_assert_same_bits("o", a.o, b.o);
    tg_test_assert_same_bits("dq", a.dq, b.dq);
    tg_test_assert_same_bits("dk", a.dk, b.dk);
}
END_TEST

/* ---- the record --------------------------------------------------------------------------- */

/* One record, any leading dims: (B,H,T,D) works as (B*H,T,D). It saves
 * one float64 per query row and keeps q, k, v and o (v and o only when
 * dq or dk is wanted). */
START_TEST(test_record_and_saved_bytes) {
    const int64_t B = 2, H = 3, T = 20, D = 8, Dv = 6;
    for (int d = 0; d < 2; d++) {
        const tg_dtype dt = d ? TG_F64 : TG_F32;
        const size_t es = tg_dtype_size(dt);
        tg_tensor *q = tg_requires_grad(ctx, tg_test_rand(ctx, dt, TG_SHAPE(B, H, T, D), -1, 1));
        tg_tensor *k = tg_requires_grad(ctx, tg_test_rand(ctx, dt, TG_SHAPE(B, H, T, D), -1, 1));
        tg_tensor *v = tg_requires_grad(ctx, tg_test_rand(ctx, dt, TG_SHAPE(B, H, T, Dv), -1, 1));
        tg_tensor *o = tg_attention(ctx, q, k, v, true, 0);
        ck_assert_ptr_nonnull(o);
        ck_assert_int_eq(o->ndim, 4);
        ck_assert_int_eq(o->shape[3], Dv);
        ck_assert_int_eq(tg_tape_size(ctx), 1);
        const size_t lse = (size_t)(B * H * T) * 8;
        ck_assert_uint_eq(tg_tape_saved_bytes(ctx), lse + (size_t)(B * H * T * (D + D + Dv + Dv)) * es);
        /* the 4-D result has the bits of the same problem as (B*H, T, D) */
        tg_tensor *o3 =
            tg_attention(ctx, tg_view(ctx, q, TG_SHAPE(B * H, T, D)), tg_view(ctx, k, TG_SHAPE(B * H, T, D)),
                         tg_view(ctx, v, TG_SHAPE(B * H, T, Dv)), true, 0);
        tg_test_assert_same_bits("4-D vs 3-D", o, o3);
        tg_ctx_reset(ctx);
        /* only v requires grad: lse, q and k */
        q = tg_test_rand(ctx, dt, TG_SHAPE(B, H, T, D), -1, 1);
        k = tg_test_rand(ctx, dt, TG_SHAPE(B, H, T, D), -1, 1);
        v = tg_requires_grad(ctx, tg_test_rand(ctx, dt, TG_SHAPE(B, H, T, Dv), -1, 1));
        ck_assert_ptr_nonnull(tg_attention(ctx, q, k, v, false, 0));
        ck_assert_uint_eq(tg_tape_saved_bytes(ctx), lse + (size_t)(B * H * T * 2 * D) * es);
        tg_ctx_reset(ctx);
    }
    /* no grad wanted: no record */
    tg_tensor *x = tg_test_rand(ctx, TG_F32, TG_SHAPE(2, 5, 4), -1, 1);
    tg_tensor *o = tg_attention(ctx, x, x, x, true, 0);
    ck_assert_ptr_nonnull(o);
    ck_assert(!o->requires_grad);
    ck_assert_int_eq(tg_tape_size(ctx), 0);
}
END_TEST

/* Empty problems: no pairs or no queries give an empty o, and backward
 * gives zero gradients. */
START_TEST(test_empty) {
    tg_tensor *q = tg_requires_grad(ctx, tg_zeros(ctx, TG_F64, TG_SHAPE(0, 3, 4)));
    tg_tensor *o = tg_attention(ctx, q, q, q, true, 0);
    ck_assert_ptr_nonnull(o);
    ck_assert_int_eq(o->numel, 0);
    tg_tensor *q2 = tg_requires_grad(ctx, tg_zeros(ctx, TG_F64, TG_SHAPE(2, 0, 4)));
    tg_tensor *k2 = tg_requires_grad(ctx, tg_test_rand(ctx, TG_F64, TG_SHAPE(2, 3, 4), -1, 1));
    o = tg_attention(ctx, q2, k2, k2, false, 0);
    ck_assert_ptr_nonnull(o);
    tg_backward_ex(ctx, tg_sum(ctx, o), NULL, false);
    ck_assert_msg(tg_ok(ctx), "%s", tg_error_message(ctx));
    for (int64_t i = 0; i < k2->numel; i++) ck_assert(tg_get_flat(ctx, k2->grad, i) == 0);
}
END_TEST

/* ---- errors --------------------------------------------------------------------------------- */

START_TEST(test_errors) {
    tg_tensor *q = tg_zeros(ctx, TG_F32, TG_SHAPE(2, 3, 5, 4));
    tg_tensor *k = tg_zeros(ctx, TG_F32, TG_SHAPE(2, 3, 5, 4));
    tg_tensor *v = tg_zeros(ctx, TG_F32, TG_SHAPE(2, 3, 5, 6));
    tg_test_assert_fails(ctx, tg_attention(ctx, NULL, k, v, true, 0), TG_ERR_NULL, "tg_attention", "'q'", NULL);
    tg_test_assert_fails(ctx, tg_attention(ctx, q, NULL, v, true, 0), TG_ERR_NULL, "tg_attention", "'k'", NULL);
    tg_test_assert_fails(ctx, tg_attention(ctx, q, k, NULL, true, 0), TG_ERR_NULL, "tg_attention", "'v'", NULL);
    tg_tensor *k64 = tg_zeros(ctx, TG_F64, TG_SHAPE(2, 3, 5, 4));
    tg_test_assert_fails(ctx, tg_attention(ctx, q, k64, v, true, 0), TG_ERR_DTYPE, "tg_attention", "float32", "float64",
                         NULL);
    tg_tensor *vec = tg_zeros(ctx, TG_F32, TG_SHAPE(4));
    tg_test_assert_fails(ctx, tg_attention(ctx, vec, vec, vec, false, 0), TG_ERR_SHAPE, "tg_attention", "(4,)",
                         "at least 2", NULL);
    tg_tensor *k3 = tg_zeros(ctx, TG_F32, TG_SHAPE(6, 5, 4));
    tg_test_assert_fails(ctx, tg_attention(ctx, q, k3, v, true, 0), TG_ERR_SHAPE, "tg_attention", "(2, 3, 5, 4)",
                         "(6, 5, 4)", NULL);
    tg_tensor *kh = tg_zeros(ctx, TG_F32, TG_SHAPE(2, 4, 5, 4));
    tg_test_assert_fails(ctx, tg_attention(ctx, q, kh, v, true, 0), TG_ERR_SHAPE, "tg_attention", "(2, 4, 5, 4)",
                         "leading dims", NULL);
    tg_tensor *kd = tg_zeros(ctx, TG_F32, TG_SHAPE(2, 3, 5, 3));
    tg_test_assert_fails(ctx, tg_attention(ctx, q, kd, v, true, 0), TG_ERR_SHAPE, "tg_attention", "last dim (D)", NULL);
    tg_tensor *vt = tg_zeros(ctx, TG_F32, TG_SHAPE(2, 3, 7, 6));
    tg_test_assert_fails(ctx, tg_attention(ctx, q, k, vt, false, 0), TG_ERR_SHAPE, "tg_attention", "(2, 3, 7, 6)", "Tk",
                         NULL);
    tg_tensor *k7 = tg_zeros(ctx, TG_F32, TG_SHAPE(2, 3, 7, 4));
    ck_assert_ptr_nonnull(tg_attention(ctx, q, k7, vt, false, 0)); /* Tq != Tk is fine without the mask */
    tg_test_assert_fails(ctx, tg_attention(ctx, q, k7, vt, true, 0), TG_ERR_SHAPE, "tg_attention", "causal", "Tq == Tk",
                         NULL);
    tg_tensor *k0 = tg_zeros(ctx, TG_F32, TG_SHAPE(2, 3, 0, 4)), *v0 = tg_zeros(ctx, TG_F32, TG_SHAPE(2, 3, 0, 6));
    tg_test_assert_fails(ctx, tg_attention(ctx, q, k0, v0, false, 0), TG_ERR_SHAPE, "tg_attention", "no keys", NULL);
    tg_test_assert_fails(ctx, tg_attention(ctx, q, k, v, true, INFINITY), TG_ERR_VALUE, "tg_attention", "scale", "inf",
                         NULL);
    tg_test_assert_fails(ctx, tg_attention(ctx, q, k, v, true, NAN), TG_ERR_VALUE, "tg_attention", "scale", NULL);
    /* the composed twin refuses the same inputs with its own name */
    tg_test_assert_fails(ctx, tg_attention_composed(ctx, q, k7, vt, true, 0), TG_ERR_SHAPE, "tg_attention_composed",
                         "Tq == Tk", NULL);
    /* a context in error: NULL, nothing done, the first error kept */
    tg_error(ctx, TG_ERR_VALUE, "test", "first");
    ck_assert_ptr_null(tg_attention(ctx, q, k, v, true, 0));
    ck_assert_str_eq(tg_error_message(ctx), "test: first");
    tg_clear_error(ctx);
    ck_assert_ptr_null(tg_attention(NULL, q, k, v, true, 0));
}
END_TEST

Suite *make_ops_attention_suite(void) {
    Suite *s = suite_create("ops_attention");
    TCase *tc = tg_test_tcase(s, "ops_attention", setup, teardown, test_vs_reference_f64, test_vs_reference_f32,
                              test_large_scores, test_vs_pytorch, test_closed_forms, test_key_shift_invariance,
                              test_gradcheck, test_threads_bitwise, test_grad_subsets, test_same_tensor_thrice,
                              test_default_scale, test_record_and_saved_bytes, test_empty, test_errors, NULL);
    tcase_set_timeout(tc, 120);
    return s;
}

int main(void) { return tg_test_run(make_ops_attention_suite()); }

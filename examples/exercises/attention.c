/* Exercise (e): the backward of (single-head, non-causal) attention.
 *
 * The forward is given: queries, keys, values Q, K, V (T, D),
 *   S = Q K^T / sqrt(D)                 (T, T)
 *   P = softmax of each row of S        (T, T), saved
 *   O = P V                             (T, D)
 * Write attention_backward: dQ, dK, dV from dO. Section 2 of
 * docs/attention-gradients.md derives them (the softmax step is the one
 * where a row sum appears).
 *
 *   cmake --build build --target exercise_attention && build/examples/exercises/exercise_attention
 *
 * The reference solution is solutions/attention.c. */
#include <math.h>

#include "exercise.h"

static tg_tensor *attention_forward(tg_ctx *ctx, tg_node *node, tg_tensor *const *in, void *user) {
    (void)user;
    int64_t T = in[0]->shape[0], D = in[0]->shape[1];
    if (T > 64) { /* the solution keeps a row of dS on the stack */
        tg_node_error(ctx, node, "this exercise takes at most 64 tokens, not %lld", (long long)T);
        return NULL;
    }
    const double *q = tg_data_f64(ctx, in[0]), *k = tg_data_f64(ctx, in[1]), *v = tg_data_f64(ctx, in[2]);
    tg_tensor *o = tg_zeros(ctx, TG_F64, 2, in[0]->shape), *p = tg_zeros(ctx, TG_F64, TG_SHAPE(T, T));
    if (!o || !p) return NULL;
    double *od = tg_data_f64(ctx, o), *pd = tg_data_f64(ctx, p), scale = 1.0 / sqrt((double)D);
    for (int64_t i = 0; i < T; i++) {
        double mx = -INFINITY, s = 0;
        for (int64_t j = 0; j < T; j++) {
            double sij = 0;
            for (int64_t c = 0; c < D; c++) sij += q[i * D + c] * k[j * D + c];
            pd[i * T + j] = sij * scale;
            mx = fmax(mx, pd[i * T + j]);
        }
        for (int64_t j = 0; j < T; j++) s += pd[i * T + j] = exp(pd[i * T + j] - mx);
        for (int64_t j = 0; j < T; j++) pd[i * T + j] /= s;
        for (int64_t j = 0; j < T; j++)
            for (int64_t c = 0; c < D; c++) od[i * D + c] += pd[i * T + j] * v[j * D + c];
    }
    tg_node_save_tensor(ctx, node, p);
    return o;
}

/* Your backward, as a plain function (outputs first, then inputs, sizes):
 *   dq, dk, dv (T, D): write them (they start at 0);
 *   dout (T, D), q, k, v (T, D), p (T, T): read them. */
#ifdef TG_EXERCISE_SOLUTION
#include "solutions/attention.c"
#else
static void attention_backward_rows(double *dq, double *dk, double *dv, const double *dout, const double *q,
                                    const double *k, const double *v, const double *p, int64_t T, int64_t D) {
    /* your derivation: dv = ..., then dP, dS (a row sum appears), dq, dk */
    (void)dq, (void)dk, (void)dv, (void)dout, (void)q, (void)k, (void)v, (void)p, (void)T, (void)D;
}
#endif

/* The op's backward: unpacks the record, calls yours, adds the gradients
 * into the inputs'. */
static void attention_backward(tg_ctx *ctx, tg_node *node) {
    tg_tensor *Q = tg_node_input(node, 0);
    tg_tensor *dQ = tg_zeros(ctx, TG_F64, 2, Q->shape), *dK = tg_zeros(ctx, TG_F64, 2, Q->shape),
              *dV = tg_zeros(ctx, TG_F64, 2, Q->shape);
    if (!dQ || !dK || !dV) return;
    attention_backward_rows(tg_data_f64(ctx, dQ), tg_data_f64(ctx, dK), tg_data_f64(ctx, dV),
                            tg_data_f64(ctx, tg_node_grad_output(node)), tg_data_f64(ctx, Q),
                            tg_data_f64(ctx, tg_node_input(node, 1)), tg_data_f64(ctx, tg_node_input(node, 2)),
                            tg_data_f64(ctx, tg_node_saved_tensor(node, 0)), Q->shape[0], Q->shape[1]);
    tg_node_accumulate(ctx, node, 0, dQ);
    tg_node_accumulate(ctx, node, 1, dK);
    tg_node_accumulate(ctx, node, 2, dV);
}

static const tg_op_def OP = {.name = "attention", .forward = attention_forward, .backward = attention_backward};

static tg_tensor *op(tg_ctx *ctx, tg_tensor *const *in, void *user) { return tg_op_apply(ctx, &OP, 3, in, user); }

static bool make_inputs(tg_ctx *ctx, tg_exercise *e) {
    for (int k = 0; k < 3; k++) e->inputs[k] = tg_rand(ctx, TG_F64, TG_SHAPE(4, 3), -1, 1);
    return tg_ok(ctx);
}

int main(int argc, char **argv) {
    tg_exercise e = {.name = "(e) attention: dQ, dK, dV",
                     .guide = "docs/attention-gradients.md, section 2",
                     .f = op,
                     .n_inputs = 3,
                     .input_names = {"q", "k", "v"}};
    return tg_exercise_main(argc, argv, &e, make_inputs);
}

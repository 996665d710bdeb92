/* Exercise (d): the backward of softmax cross-entropy.
 *
 * The forward is given: logits z (N, C), a target class t_n per row,
 *   p_nj = exp(z_nj) / sum_k exp(z_nk)          saved (N, C)
 *   loss = (1/N) sum_n -log p_{n, t_n}          a scalar
 * Write softmax_ce_backward: dz from dloss (a scalar gradient). The
 * derivative of log-sum-exp is the softmax; the target adds a one-hot.
 *
 *   cmake --build build --target exercise_softmax_ce && build/examples/exercises/exercise_softmax_ce
 *
 * The reference solution is solutions/softmax_ce.c. */
#include <math.h>

#include "exercise.h"

/* the target class of each row (the op's constant data, through user) */
static const int64_t TARGETS[4] = {2, 0, 4, 1};

static tg_tensor *softmax_ce_forward(tg_ctx *ctx, tg_node *node, tg_tensor *const *in, void *user) {
    const int64_t *t = user;
    tg_tensor *z = in[0];
    int64_t N = z->shape[0], C = z->shape[1];
    tg_tensor *p = tg_zeros(ctx, TG_F64, 2, z->shape), *loss = tg_zeros(ctx, TG_F64, 0, NULL);
    if (!p || !loss) return NULL;
    const double *zd = tg_data_f64(ctx, z);
    double *pd = tg_data_f64(ctx, p), l = 0;
    for (int64_t n = 0; n < N; n++) {
        double mx = zd[n * C], s = 0;
        for (int64_t j = 1; j < C; j++) mx = fmax(mx, zd[n * C + j]);
        for (int64_t j = 0; j < C; j++) s += exp(zd[n * C + j] - mx);
        for (int64_t j = 0; j < C; j++) pd[n * C + j] = exp(zd[n * C + j] - mx) / s;
        l -= log(pd[n * C + t[n]]) / (double)N;
    }
    tg_data_f64(ctx, loss)[0] = l;
    tg_node_save_tensor(ctx, node, p);
    return loss;
}

/* Your backward, as a plain function (outputs first, then inputs, sizes):
 *   dz (N, C): write it;  dloss (the loss's gradient), p (N, C), the
 *   targets t (N): read them. */
#ifdef TG_EXERCISE_SOLUTION
#include "solutions/softmax_ce.c"
#else
static void softmax_ce_backward_rows(double *dz, double dloss, const double *p, const int64_t *t, int64_t N,
                                     int64_t C) {
    for (int64_t n = 0; n < N; n++) {
        for (int64_t j = 0; j < C; j++) {
            /* your derivation: dz[n * C + j] = ... from dloss, p, t[n], N */
            (void)dz, (void)dloss, (void)p, (void)t;
        }
    }
}
#endif

/* The op's backward: unpacks the record, calls yours, adds dz into z's
 * gradient. */
static void softmax_ce_backward(tg_ctx *ctx, tg_node *node) {
    tg_tensor *p = tg_node_saved_tensor(node, 0), *dz = tg_zeros(ctx, TG_F64, 2, p->shape);
    if (!dz) return;
    softmax_ce_backward_rows(tg_data_f64(ctx, dz), tg_get_flat(ctx, tg_node_grad_output(node), 0), tg_data_f64(ctx, p),
                             TARGETS, p->shape[0], p->shape[1]);
    tg_node_accumulate(ctx, node, 0, dz);
}

static const tg_op_def OP = {.name = "softmax_ce", .forward = softmax_ce_forward, .backward = softmax_ce_backward};

static tg_tensor *op(tg_ctx *ctx, tg_tensor *const *in, void *user) { return tg_op_apply(ctx, &OP, 1, in, user); }

static bool make_inputs(tg_ctx *ctx, tg_exercise *e) {
    e->inputs[0] = tg_rand(ctx, TG_F64, TG_SHAPE(4, 5), -2, 2);
    return tg_ok(ctx);
}

int main(int argc, char **argv) {
    tg_exercise e = {.name = "(d) softmax cross-entropy: dz",
                     .guide = "docs/normalization-gradients.md, section 10 (exercises), and the comment above "
                              "tg_cross_entropy in include/tapegrad/autograd.h",
                     .f = op,
                     .user = (void *)TARGETS,
                     .n_inputs = 1,
                     .input_names = {"z"}};
    return tg_exercise_main(argc, argv, &e, make_inputs);
}

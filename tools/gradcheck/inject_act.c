/* A seeded bug that lives in part of the input domain: softplus whose
 * backward takes the slope of its linear branch, 1, above x = size
 * (default 1.9) -- a threshold of a linear branch put at 1.9 in the
 * backward alone (PyTorch's softplus switches to x at 20). Below it the
 * backward is right, sigmoid(x); above, the error is 1 - sigmoid(x), 0.13
 * at 1.9. The registry draws softplus's x in [-2, 2), so a check catches
 * it only when some element lands in (1.9, 2): for 32 elements about half
 * the seeds. `check --cover` draws x across softplus's regions and finds
 * it on every seed (docs/gradcheck-guide.md, inputs a check did not see).
 * Written with the custom-op API: the forward is tg_softplus, the
 * tangent rule right.
 *
 * Layer: target (tool.h): the forward inject.c lists; calls nothing of the tool. */
#include <math.h>
#include <stdlib.h>

#include "tools/gradcheck/tool.h"

static tg_tensor *high_forward(tg_ctx *ctx, tg_node *node, tg_tensor *const *in, void *user) {
    tg_node_set_scalar(ctx, node, 0, *(const double *)user);
    return tg_softplus(ctx, in[0]);
}

/* sigmoid x without overflow */
static double sigmoid(double x) { return x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x)); }

/* dx = dy sigmoid(x), but dy 1 above the threshold (scalar 0): the bug */
static void high_backward(tg_ctx *ctx, tg_node *node) {
    double at = tg_node_scalar(node, 0);
    tg_tensor *x = tg_node_input(node, 0), *dy = tg_node_grad_output(node);
    tg_tensor *dx = tg_zeros(ctx, x->dtype, x->ndim, x->shape);
    if (!dx) return;
    for (int64_t i = 0; i < x->numel; i++) {
        double v = tg_get_flat(ctx, x, i);
        tg_set_flat(ctx, dx, i, tg_get_flat(ctx, dy, i) * (v > at ? 1.0 : sigmoid(v)));
    }
    tg_node_accumulate(ctx, node, 0, dx);
}

/* The right tangent: t_y = sigmoid(x) t_x. */
static tg_tensor *high_jvp(tg_ctx *ctx, tg_node *node, tg_tensor *const *t) {
    return tg_mul(ctx, tg_sigmoid(ctx, tg_node_input(node, 0)), t[0]);
}

tg_tensor *gct_bug_softplus_high(tg_ctx *ctx, tg_tensor *const *in, void *user) {
    const char *sz = tg_registry_arg(user, "size");
    double at = sz ? strtod(sz, NULL) : 1.9;
    tg_op_def def = {.name = "softplus[bug:high]", .forward = high_forward, .backward = high_backward, .jvp = high_jvp};
    return tg_op_apply(ctx, &def, 1, in, &at);
}

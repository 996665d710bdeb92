/* XOR: the smallest complete tapegrad program. A 2-8-1 MLP learns the
 * four points of XOR: model, loop, loss, result. */
#include <stdio.h>

#include "common/example.h"

int main(int argc, char **argv) {
    ex_args args = {.steps = 500, .lr = 0.05, .seed = 42, .out = "out/xor", .every = 100};
    int rc = ex_parse(&args, argc, argv, "xor", "Trains a 2-8-1 MLP on XOR.", NULL, 0);
    if (rc >= 0) return rc;
    tg_ctx *ctx = tg_ctx_new(args.seed);
    ex_setup(ctx, &args);

    /* the model: Linear(2, 8) -> tanh -> Linear(8, 1) -> sigmoid */
    tg_model model = {0};
    tg_linear *fc1 = tg_linear_new(ctx, "fc1", 2, 8, true, TG_F32);
    tg_linear *fc2 = tg_linear_new(ctx, "fc2", 8, 1, true, TG_F32);
    tg_model_add(ctx, &model, TG_MODULE(fc1));
    tg_model_add(ctx, &model, TG_MODULE(fc2));
    tg_params params = {0};
    tg_model_params(ctx, &model, &params);
    tg_adam_opts opts = tg_adam_defaults();
    opts.lr = args.lr;
    tg_optim *opt = tg_adam_new(ctx, &params, &opts);

    const float x[4][2] = {{0, 0}, {0, 1}, {1, 0}, {1, 1}};
    const float y[4][1] = {{0}, {1}, {1}, {0}};
    double loss_value = 0;
    for (int64_t step = 1; step <= args.steps; step++) {
        tg_tensor *in = tg_from_buffer(ctx, TG_F32, TG_SHAPE(4, 2), x);
        tg_tensor *target = tg_from_buffer(ctx, TG_F32, TG_SHAPE(4, 1), y);
        tg_tensor *h = tg_tanh(ctx, tg_linear_forward(ctx, fc1, in));
        tg_tensor *pred = tg_sigmoid(ctx, tg_linear_forward(ctx, fc2, h));
        tg_tensor *loss = tg_mse_loss(ctx, pred, target);
        tg_optim_zero_grad(ctx, opt);
        tg_backward(ctx, loss);
        tg_optim_step(ctx, opt);
        if (ex_failed(ctx)) return 1;
        loss_value = tg_get_flat(ctx, loss, 0);
        if (step % args.every == 0 || step == 1) printf("step %4lld  loss %.6f\n", (long long)step, loss_value);
        tg_ctx_reset(ctx); /* frees the step's tensors at once */
    }

    /* the result, in no-grad mode */
    tg_set_grad_enabled(ctx, false);
    tg_tensor *in = tg_from_buffer(ctx, TG_F32, TG_SHAPE(4, 2), x);
    tg_tensor *pred = tg_sigmoid(ctx, tg_linear_forward(ctx, fc2, tg_tanh(ctx, tg_linear_forward(ctx, fc1, in))));
    for (int i = 0; i < 4; i++)
        printf("%g xor %g = %.3f (want %g)\n", x[i][0], x[i][1], tg_get_flat(ctx, pred, i), y[i][0]);
    printf("final loss %.6f\n", loss_value);
    tg_optim_free(ctx, opt);
    tg_params_free(&params);
    tg_model_free(ctx, &model);
    tg_ctx_free(ctx);
    return 0;
}

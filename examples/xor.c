/* XOR: the smallest complete tapegrad program. A 2-8-1 MLP learns the
 * four points of XOR: model, loop, loss, result, a loss plot, and a
 * training state to stop and resume. It needs only the installed library:
 *   cc xor.c $(pkg-config --cflags --libs tapegrad) -o xor */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tapegrad.h>

/* The flags, each --name VALUE. */
typedef struct flags {
    long long steps, stop_after, seed;
    double lr;
    const char *out, *save, *resume;
} flags;

static int usage(FILE *f, int status) {
    fprintf(f, "usage: xor [flags]\nTrains a 2-8-1 MLP on XOR.\n\nflags:\n"
               "  --steps N       training steps (default 500)\n"
               "  --lr X          learning rate (default 0.05)\n"
               "  --seed N        RNG seed: same seed, same run (default 42)\n"
               "  --out DIR       where the loss log and plot go (default out/xor)\n"
               "  --save FILE     write the training state at the end\n"
               "  --resume FILE   continue from a state written by --save\n"
               "  --stop-after K  stop after step K of the --steps run (then --save, and --resume later)\n"
               "  --help          this text\n");
    return status;
}

/* Returns -1 to go on, or the exit status: 0 after --help, 2 for a bad flag. */
static int parse(flags *fl, int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *flag = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(flag, "--help") || !strcmp(flag, "-h")) return usage(stdout, 0);
        long long *num = !strcmp(flag, "--steps")        ? &fl->steps
                         : !strcmp(flag, "--seed")       ? &fl->seed
                         : !strcmp(flag, "--stop-after") ? &fl->stop_after
                                                         : NULL;
        const char **str = !strcmp(flag, "--out")      ? &fl->out
                           : !strcmp(flag, "--save")   ? &fl->save
                           : !strcmp(flag, "--resume") ? &fl->resume
                                                       : NULL;
        bool lr = !strcmp(flag, "--lr"), ok = true;
        if (!num && !str && !lr) {
            fprintf(stderr, "xor: unknown flag '%s'\n\n", flag);
            return usage(stderr, 2);
        }
        if (!val) {
            fprintf(stderr, "xor: missing value for '%s'\n\n", flag);
            return usage(stderr, 2);
        }
        char *end = NULL;
        errno = 0;
        if (num) *num = strtoll(val, &end, 10), ok = *num >= (num == &fl->seed ? 0 : 1);
        if (lr) fl->lr = strtod(val, &end), ok = isfinite(fl->lr) && fl->lr > 0;
        if (str) *str = val;
        if (!ok || errno || (end && (end == val || *end))) {
            fprintf(stderr, "xor: bad value for '%s': %s\n\n", flag, val);
            return usage(stderr, 2);
        }
        i++;
    }
    return -1;
}

/* Why a file call failed: errno's text, or the status when no system call did. */
static const char *why(tg_status st) { return errno ? strerror(errno) : tg_status_name(st); }

int main(int argc, char **argv) {
    flags fl = {.steps = 500, .lr = 0.05, .seed = 42, .out = "out/xor"};
    int rc = parse(&fl, argc, argv);
    if (rc >= 0) return rc;
    int64_t last = fl.stop_after > 0 && fl.stop_after < fl.steps ? fl.stop_after : fl.steps;
    tg_ctx *ctx = tg_ctx_new((uint64_t)fl.seed);

    /* the model: Linear(2, 8) -> tanh -> Linear(8, 1) -> sigmoid */
    tg_model model = {0};
    tg_linear *fc1 = tg_linear_new(ctx, "fc1", 2, 8, true, TG_F32);
    tg_linear *fc2 = tg_linear_new(ctx, "fc2", 8, 1, true, TG_F32);
    tg_model_add(ctx, &model, TG_MODULE(fc1));
    tg_model_add(ctx, &model, TG_MODULE(fc2));
    tg_params params = {0};
    tg_model_params(ctx, &model, &params);
    tg_adam_opts opts = tg_adam_defaults();
    opts.lr = fl.lr;
    tg_optim *opt = tg_adam_new(ctx, &params, &opts);

    /* --resume: parameters, Adam's state and step, the RNG, all in one call */
    int64_t first = 1;
    if (fl.resume && tg_train_load(ctx, fl.resume, &params, opt, NULL) == TG_OK) {
        first = tg_optim_steps(opt) + 1;
        printf("resumed from %s at step %lld\n", fl.resume, (long long)first - 1);
        if (first > last)
            tg_error(ctx, TG_ERR_VALUE, "xor", "%s is at step %lld: nothing to train up to step %lld", fl.resume,
                     (long long)first - 1, (long long)last);
    }
    /* the loss log OUT/loss.dat (it goes on from the earlier rows after a resume) */
    const char *cols[] = {"step", "loss"};
    tg_plot *log = NULL;
    tg_status st = tg_ok(ctx) ? tg_plot_open_resume(&log, fl.out, "loss", 2, cols, first - 1) : TG_OK;
    if (st != TG_OK) tg_error(ctx, st, "xor", "cannot write %s/loss.dat: %s", fl.out, why(st));

    const float x[4][2] = {{0, 0}, {0, 1}, {1, 0}, {1, 1}};
    const float y[4][1] = {{0}, {1}, {1}, {0}};
    double loss_value = 0;
    for (int64_t step = first; step <= last && tg_ok(ctx); step++) {
        tg_tensor *in = tg_from_buffer(ctx, TG_F32, TG_SHAPE(4, 2), x);
        tg_tensor *target = tg_from_buffer(ctx, TG_F32, TG_SHAPE(4, 1), y);
        tg_tensor *h = tg_tanh(ctx, tg_linear_forward(ctx, fc1, in));
        tg_tensor *pred = tg_sigmoid(ctx, tg_linear_forward(ctx, fc2, h));
        tg_tensor *loss = tg_mse_loss(ctx, pred, target);
        tg_optim_zero_grad(ctx, opt);
        tg_backward(ctx, loss);
        tg_optim_step(ctx, opt);
        if (!tg_ok(ctx)) break; /* one check per step: every call above is a no-op after an error */
        loss_value = tg_get_flat(ctx, loss, 0);
        if ((st = tg_plot_row(log, (double[]){(double)step, loss_value})) != TG_OK)
            tg_error(ctx, st, "xor", "cannot write %s: %s", tg_plot_dat_path(log), why(st));
        if (step % 100 == 0 || step == 1) printf("step %4lld  loss %.6f\n", (long long)step, loss_value);
        tg_ctx_reset(ctx); /* frees the step's tensors at once */
    }

    /* the plot OUT/loss.png (when gnuplot is installed), then --save */
    if (log) {
        char msg[512];
        tg_plot_style style = {.title = "XOR: training loss", .ylabel = "mean squared error", .logy = true};
        st = tg_plot_close(log, &style, NULL, msg, sizeof msg);
        if (tg_ok(ctx) && st != TG_OK) tg_error(ctx, st, "xor", "%s", msg);
        else if (tg_ok(ctx)) printf("%s\n", msg);
    }
    if (fl.save && tg_train_save(ctx, fl.save, &params, opt, NULL) == TG_OK)
        printf("saved the training state to %s\n", fl.save);

    /* the result, in no-grad mode */
    tg_set_grad_enabled(ctx, false);
    tg_tensor *in = tg_from_buffer(ctx, TG_F32, TG_SHAPE(4, 2), x);
    tg_tensor *pred = tg_sigmoid(ctx, tg_linear_forward(ctx, fc2, tg_tanh(ctx, tg_linear_forward(ctx, fc1, in))));
    for (int i = 0; i < 4 && tg_ok(ctx); i++)
        printf("%g xor %g = %.3f (want %g)\n", x[i][0], x[i][1], tg_get_flat(ctx, pred, i), y[i][0]);
    if (tg_ok(ctx)) printf("final loss %.6f\n", loss_value);
    else fprintf(stderr, "error: %s\n", tg_error_message(ctx));
    rc = tg_ok(ctx) ? 0 : 1;
    if (fflush(stdout) != 0) rc = 1, fprintf(stderr, "xor: cannot write the output: %s\n", strerror(errno));
    tg_optim_free(ctx, opt);
    tg_params_free(&params);
    tg_model_free(ctx, &model);
    tg_ctx_free(ctx);
    return rc;
}

/* Spiral: 3-class classification of three interleaved spirals (the data
 * made with the seeded RNG) by an MLP, with a choice of normalization:
 *
 *   Linear(2, H) -> [norm] -> relu -> Linear(H, H) -> [norm] -> relu -> Linear(H, 3)
 *
 * --norm none|rmsnorm|layernorm trains one model; --norm all (what
 * `make demo` runs) trains the three with the same seed and data and draws
 * them together. Writes OUT/loss.png (training loss, log scale) and
 * OUT/boundary.png (the learned decision regions with the data points). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/example.h"

#define CLASSES 3
#define HIDDEN 64
#define GRID 120 /* decision-boundary grid is GRID x GRID */
#define EXTENT 1.15

typedef struct spiral_data {
    int64_t n;        /* points */
    float *x;         /* (n, 2) */
    int64_t *label;   /* (n) */
} spiral_data;

/* Class k's i-th point: radius r = i / (m - 1) and angle
 * t = 4k + 4r + 0.2 z (z standard normal), at (r sin t, r cos t). */
static void make_spirals(tg_ctx *ctx, spiral_data *d, int64_t per_class) {
    d->n = per_class * CLASSES;
    d->x = malloc((size_t)d->n * 2 * sizeof *d->x);
    d->label = malloc((size_t)d->n * sizeof *d->label);
    for (int k = 0; k < CLASSES; k++)
        for (int64_t i = 0; i < per_class; i++) {
            int64_t j = k * per_class + i;
            double r = (double)i / (double)(per_class - 1);
            double t = 4.0 * k + 4.0 * r + 0.2 * tg_rng_normal(ctx);
            d->x[2 * j] = (float)(r * sin(t));
            d->x[2 * j + 1] = (float)(r * cos(t));
            d->label[j] = k;
        }
}

typedef struct mlp {
    const char *norm; /* "none", "rmsnorm" or "layernorm" */
    tg_model model;
    tg_linear *fc1, *fc2, *fc3;
    tg_module *norm1, *norm2; /* NULL for "none" */
} mlp;

static tg_module *make_norm(tg_ctx *ctx, const char *kind, const char *name) {
    int64_t shape[1] = {HIDDEN};
    if (strcmp(kind, "rmsnorm") == 0)
        return TG_MODULE(tg_rmsnorm_new(ctx, name, 1, shape, TG_RMSNORM_EPS, true, false, TG_F32));
    if (strcmp(kind, "layernorm") == 0)
        return TG_MODULE(tg_layernorm_new(ctx, name, 1, shape, TG_LAYERNORM_EPS, true, true, TG_F32));
    return NULL;
}

static void mlp_init(tg_ctx *ctx, mlp *m, const char *norm) {
    memset(m, 0, sizeof *m);
    m->norm = norm;
    m->fc1 = tg_linear_new(ctx, "fc1", 2, HIDDEN, true, TG_F32);
    tg_model_add(ctx, &m->model, TG_MODULE(m->fc1));
    if ((m->norm1 = make_norm(ctx, norm, "norm1"))) tg_model_add(ctx, &m->model, m->norm1);
    m->fc2 = tg_linear_new(ctx, "fc2", HIDDEN, HIDDEN, true, TG_F32);
    tg_model_add(ctx, &m->model, TG_MODULE(m->fc2));
    if ((m->norm2 = make_norm(ctx, norm, "norm2"))) tg_model_add(ctx, &m->model, m->norm2);
    m->fc3 = tg_linear_new(ctx, "fc3", HIDDEN, CLASSES, true, TG_F32);
    tg_model_add(ctx, &m->model, TG_MODULE(m->fc3));
}

static tg_tensor *apply_norm(tg_ctx *ctx, tg_module *norm, tg_tensor *h) {
    if (!norm) return h;
    if (strcmp(norm->kind, "RMSNorm") == 0) return tg_rmsnorm_forward(ctx, (tg_rmsnorm *)(void *)norm, h);
    return tg_layernorm_forward(ctx, (tg_layernorm *)(void *)norm, h);
}

/* logits (n, 3) for points x (n, 2) */
static tg_tensor *mlp_forward(tg_ctx *ctx, mlp *m, tg_tensor *x) {
    tg_tensor *h = tg_relu(ctx, apply_norm(ctx, m->norm1, tg_linear_forward(ctx, m->fc1, x)));
    h = tg_relu(ctx, apply_norm(ctx, m->norm2, tg_linear_forward(ctx, m->fc2, h)));
    return tg_linear_forward(ctx, m->fc3, h);
}

static int64_t argmax_row(tg_ctx *ctx, tg_tensor *logits, int64_t row) {
    int64_t best = 0;
    for (int64_t k = 1; k < CLASSES; k++)
        if (tg_get_flat(ctx, logits, row * CLASSES + k) > tg_get_flat(ctx, logits, row * CLASSES + best)) best = k;
    return best;
}

/* --optim and --schedule: every optimizer of the library trains this model. */
static const char *optim_name = "adam", *schedule_name = "constant";

static tg_optim *make_optimizer(tg_ctx *ctx, const ex_args *args, tg_params *params) {
    tg_optim *opt;
    if (strcmp(optim_name, "sgd") == 0) {
        tg_sgd_opts o = tg_sgd_defaults(args->lr);
        o.momentum = 0.9;
        opt = tg_sgd_new(ctx, params, &o);
    } else {
        tg_adam_opts o = strcmp(optim_name, "adamw") == 0 ? tg_adamw_defaults() : tg_adam_defaults();
        o.lr = args->lr;
        opt = strcmp(optim_name, "adamw") == 0 ? tg_adamw_new(ctx, params, &o) : tg_adam_new(ctx, params, &o);
    }
    if (strcmp(schedule_name, "cosine") == 0) {
        tg_schedule s = {.kind = TG_SCHED_WARMUP_COSINE, .warmup_steps = args->steps / 10,
                         .total_steps = args->steps, .start_factor = 0.1, .min_lr = args->lr / 100};
        tg_optim_set_schedule(ctx, opt, &s);
    }
    return opt;
}

typedef struct result {
    double loss, accuracy;
} result;

/* Trains one model; logs OUT/loss_NORM.dat and writes the model's decision
 * regions to OUT/regions_NORM.dat. */
static bool train(tg_ctx *ctx, const ex_args *args, const spiral_data *d, const char *norm, result *res) {
    tg_rng_seed(ctx, args->seed + 1); /* same init for every norm */
    mlp m;
    mlp_init(ctx, &m, norm);
    tg_params params = {0};
    tg_model_params(ctx, &m.model, &params);
    tg_optim *opt = make_optimizer(ctx, args, &params);
    if (ex_failed(ctx) || !ex_resume(ctx, args, &params, opt)) return false;
    printf("\n== spiral --norm %s\n", norm);
    tg_model_print(stdout, &m.model);

    char name[64];
    snprintf(name, sizeof name, "loss_%s", norm);
    const char *cols[] = {"step", "loss", "accuracy"};
    tg_plot *log = NULL;
    if (tg_plot_open(&log, args->out, name, 3, cols) != TG_OK) {
        fprintf(stderr, "spiral: cannot write %s/%s.dat\n", args->out, name);
        return false;
    }
    tg_progress progress;
    tg_progress_init(&progress, stdout, args->steps, args->every);
    for (int64_t step = tg_optim_steps(opt) + 1; step <= ex_last_step(args); step++) {
        tg_tensor *x = tg_from_buffer(ctx, TG_F32, TG_SHAPE(d->n, 2), d->x);
        tg_tensor *logits = mlp_forward(ctx, &m, x);
        tg_tensor *loss = tg_cross_entropy(ctx, logits, d->label, NULL);
        tg_optim_zero_grad(ctx, opt);
        tg_backward(ctx, loss);
        double gnorm = tg_grad_norm(ctx, &params);
        double lr = tg_optim_lr(opt);
        tg_optim_step(ctx, opt);
        if (ex_failed(ctx)) return false;
        int64_t correct = 0;
        for (int64_t i = 0; i < d->n; i++) correct += argmax_row(ctx, logits, i) == d->label[i];
        res->loss = tg_get_flat(ctx, loss, 0);
        res->accuracy = (double)correct / (double)d->n;
        tg_plot_row(log, (double[]){(double)step, res->loss, res->accuracy});
        tg_progress_update(&progress, step, res->loss, lr, gnorm);
        tg_ctx_reset(ctx);
    }
    tg_progress_finish(&progress);
    tg_plot_close_data(log);
    if (!ex_save(ctx, args, &params, opt)) return false;

    /* decision regions: the predicted class over a grid, in no-grad mode */
    snprintf(name, sizeof name, "%s/regions_%s.dat", args->out, norm);
    FILE *f = fopen(name, "w");
    if (!f) {
        fprintf(stderr, "spiral: cannot write %s\n", name);
        return false;
    }
    bool was = tg_set_grad_enabled(ctx, false);
    static float grid[GRID * GRID * 2];
    for (int i = 0; i < GRID; i++)
        for (int j = 0; j < GRID; j++) {
            grid[2 * (i * GRID + j)] = (float)(-EXTENT + 2 * EXTENT * j / (GRID - 1));
            grid[2 * (i * GRID + j) + 1] = (float)(-EXTENT + 2 * EXTENT * i / (GRID - 1));
        }
    tg_tensor *logits = mlp_forward(ctx, &m, tg_from_buffer(ctx, TG_F32, TG_SHAPE(GRID * GRID, 2), grid));
    for (int64_t p = 0; p < GRID * GRID && tg_ok(ctx); p++)
        fprintf(f, "%g %g %lld\n", grid[2 * p], grid[2 * p + 1], (long long)argmax_row(ctx, logits, p));
    fclose(f);
    tg_set_grad_enabled(ctx, was);
    tg_ctx_reset(ctx);
    tg_optim_free(ctx, opt);
    tg_params_free(&params);
    tg_model_free(ctx, &m.model);
    return !ex_failed(ctx);
}

/* OUT/boundary.gp: one panel per trained model, regions as an image and
 * the data points on top. */
static void plot_boundaries(const ex_args *args, const spiral_data *d, const char *const *norms, int count) {
    char path[512];
    snprintf(path, sizeof path, "%s/points.dat", args->out);
    FILE *f = fopen(path, "w");
    if (!f) return;
    for (int64_t i = 0; i < d->n; i++) fprintf(f, "%g %g %lld\n", d->x[2 * i], d->x[2 * i + 1], (long long)d->label[i]);
    fclose(f);
    snprintf(path, sizeof path, "%s/boundary.gp", args->out);
    if (!(f = fopen(path, "w"))) return;
    tg_plot_write_preamble(f, "boundary.png", 420 * count, 460);
    fprintf(f, "set multiplot layout 1,%d title 'Spiral: learned decision regions (seed %llu)'\n", count,
            (unsigned long long)args->seed);
    fprintf(f, "set palette defined (0 '#fbb4ae', 1 '#b3cde3', 2 '#ccebc5')\nset cbrange [0:2]\nunset colorbox\n");
    fprintf(f, "set size ratio -1\nset xrange [%g:%g]\nset yrange [%g:%g]\nset xlabel 'x1'\nset ylabel 'x2'\n",
            -EXTENT, EXTENT, -EXTENT, EXTENT);
    for (int k = 0; k < count; k++)
        fprintf(f,
                "set title 'norm: %s'\nplot 'regions_%s.dat' using 1:2:3 with image notitle, \\\n"
                "  'points.dat' using 1:2:($3+1) with points pt 7 ps 0.6 lc variable title 'data'\n",
                norms[k], norms[k]);
    fprintf(f, "unset multiplot\n");
    fclose(f);
    bool rendered = false;
    char msg[512];
    tg_plot_render(path, &rendered, msg, sizeof msg);
    if (rendered) printf("wrote %s/boundary.png\n", args->out);
    else printf("%s\n", msg);
}

int main(int argc, char **argv) {
    ex_args args = {.steps = 1000, .lr = 0.01, .seed = 1, .out = "out/spiral", .every = 100};
    const char *norm = "all";
    int64_t per_class = 100;
    static const char *const choices[] = {"none", "rmsnorm", "layernorm", "all", NULL};
    static const char *const optims[] = {"sgd", "adam", "adamw", NULL};
    static const char *const schedules[] = {"constant", "cosine", NULL};
    ex_flag extra[] = {
        {"norm", EX_STR, &norm, "normalization after each hidden Linear (default all)", choices},
        {"optim", EX_STR, &optim_name, "optimizer; sgd has momentum 0.9 (default adam)", optims},
        {"schedule", EX_STR, &schedule_name, "lr schedule; cosine warms up for 10% of the steps (default constant)",
         schedules},
        {"points", EX_INT, &per_class, "points per class (default 100)", NULL},
    };
    int rc = ex_parse(&args, argc, argv, "spiral", "Trains an MLP to classify three spirals.", extra, 4);
    if (rc >= 0) return rc;
    if (per_class < 2) {
        fprintf(stderr, "spiral: --points must be at least 2\n");
        return 2;
    }
    if (args.resume && strcmp(norm, "all") == 0) {
        fprintf(stderr, "spiral: --resume needs one --norm (none|rmsnorm|layernorm)\n");
        return 2;
    }
    tg_ctx *ctx = tg_ctx_new(args.seed);
    ex_setup(ctx, &args);
    spiral_data d;
    make_spirals(ctx, &d, per_class);

    const char *all[] = {"none", "rmsnorm", "layernorm"};
    const char *const *norms = strcmp(norm, "all") == 0 ? all : &norm;
    int count = strcmp(norm, "all") == 0 ? 3 : 1;
    result res[3];
    bool ok = true;
    for (int k = 0; k < count && ok; k++) ok = train(ctx, &args, &d, norms[k], &res[k]);
    if (ok) {
        tg_plot_series series[3];
        char dats[3][512];
        for (int k = 0; k < count; k++) {
            snprintf(dats[k], sizeof dats[k], "%s/loss_%s.dat", args.out, norms[k]);
            series[k] = (tg_plot_series){dats[k], 1, 2, norms[k]};
        }
        tg_plot_style style = {.title = "Spiral: training loss by normalization", .xlabel = "step",
                               .ylabel = "cross-entropy loss", .logy = true};
        char msg[512];
        tg_plot_overlay(args.out, "loss", &style, series, count, NULL, msg, sizeof msg);
        printf("\n%s\n", msg);
        plot_boundaries(&args, &d, norms, count);
        printf("\n%-10s %12s %10s\n", "norm", "final loss", "accuracy");
        for (int k = 0; k < count; k++) printf("%-10s %12.6f %9.1f%%\n", norms[k], res[k].loss, 100 * res[k].accuracy);
        printf("\npictures: %s/loss.png and %s/boundary.png\n", args.out, args.out);
    }
    free(d.x);
    free(d.label);
    tg_ctx_free(ctx);
    return ok ? 0 : 1;
}

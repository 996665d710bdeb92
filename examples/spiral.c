/* Spiral: 3-class classification of three interleaved spirals (the data
 * made with the seeded RNG) by an MLP, with a choice of normalization:
 *
 *   Linear(2, H) -> [norm] -> relu -> Linear(H, H) -> [norm] -> relu -> Linear(H, 3)
 *
 * --norm none|rmsnorm|layernorm trains one model; --norm all (what
 * `make demo` runs) trains the three with the same seed and data and draws
 * them together. Writes OUT/loss.png (training loss, log scale) and
 * OUT/boundary.png (the learned decision regions with the data points).
 * --save writes every model trained, with its optimizer, to one training
 * state file (tg_train_save_parts, one part per norm); --resume continues
 * all of them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/example.h"

#define CLASSES 3
#define HIDDEN 64
#define GRID 120 /* decision-boundary grid is GRID x GRID */
#define EXTENT 1.15

typedef struct spiral_data {
    int64_t n;      /* points */
    float *x;       /* (n, 2) */
    int64_t *label; /* (n) */
} spiral_data;

/* Class k's i-th point: radius r = i / (m - 1) and angle
 * t = 4k + 4r + 0.2 z (z standard normal), at (r sin t, r cos t). */
static bool make_spirals(tg_ctx *ctx, spiral_data *d, int64_t per_class) {
    d->n = per_class * CLASSES;
    d->x = malloc((size_t)d->n * 2 * sizeof *d->x);
    d->label = malloc((size_t)d->n * sizeof *d->label);
    if (!d->x || !d->label) {
        fprintf(stderr, "spiral: out of memory for %lld points\n", (long long)d->n);
        return false;
    }
    for (int k = 0; k < CLASSES; k++)
        for (int64_t i = 0; i < per_class; i++) {
            int64_t j = k * per_class + i;
            double r = (double)i / (double)(per_class - 1);
            double t = 4.0 * k + 4.0 * r + 0.2 * tg_rng_normal(ctx);
            d->x[2 * j] = (float)(r * sin(t));
            d->x[2 * j + 1] = (float)(r * cos(t));
            d->label[j] = k;
        }
    return true;
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
        tg_schedule s = {.kind = TG_SCHED_WARMUP_COSINE,
                         .warmup_steps = args->steps / 10,
                         .total_steps = args->steps,
                         .start_factor = 0.1,
                         .min_lr = args->lr / 100};
        tg_optim_set_schedule(ctx, opt, &s);
    }
    return opt;
}

/* One model trained on the data: its parameters, optimizer and results. */
typedef struct run {
    const char *norm;
    mlp m;
    tg_params params;
    tg_optim *opt;
    double loss, accuracy;
} run;

/* Trains r from step start + 1 to the last step; logs OUT/loss_NORM.dat. */
static bool train(tg_ctx *ctx, const ex_args *args, const spiral_data *d, run *r, int64_t start) {
    printf("\n== spiral --norm %s\n", r->norm);
    tg_model_print(stdout, &r->m.model);
    char name[64];
    snprintf(name, sizeof name, "loss_%s", r->norm);
    const char *cols[] = {"step", "loss", "accuracy"};
    tg_plot *log = NULL;
    if (!ex_log_open(&log, args, name, 3, cols, start)) return false;
    tg_progress progress;
    tg_progress_init(&progress, stdout, args->steps, args->every);
    tg_progress_resume(&progress, start);
    for (int64_t step = start + 1; step <= ex_last_step(args); step++) {
        tg_tensor *x = tg_from_buffer(ctx, TG_F32, TG_SHAPE(d->n, 2), d->x);
        tg_tensor *logits = mlp_forward(ctx, &r->m, x);
        tg_tensor *loss = tg_cross_entropy(ctx, logits, d->label, NULL);
        tg_optim_zero_grad(ctx, r->opt);
        tg_backward(ctx, loss);
        double gnorm = tg_grad_norm(ctx, &r->params);
        double lr = tg_optim_lr(r->opt);
        tg_optim_step(ctx, r->opt);
        if (ex_failed(ctx)) {
            ex_log_close(&log);
            return false;
        }
        int64_t correct = 0;
        for (int64_t i = 0; i < d->n; i++) correct += argmax_row(ctx, logits, i) == d->label[i];
        r->loss = tg_get_flat(ctx, loss, 0);
        r->accuracy = (double)correct / (double)d->n;
        if (!ex_log_row(&log, (double[]){(double)step, r->loss, r->accuracy})) return false;
        tg_progress_update(&progress, step, r->loss, lr, gnorm);
        tg_ctx_reset(ctx);
    }
    tg_progress_finish(&progress);
    return ex_log_close(&log);
}

/* OUT/regions_NORM.dat: the class r's model predicts over a GRID x GRID
 * grid, in no-grad mode. */
static bool write_regions(tg_ctx *ctx, const ex_args *args, run *r) {
    static float grid[GRID * GRID * 2];
    for (int i = 0; i < GRID; i++)
        for (int j = 0; j < GRID; j++) {
            grid[2 * (i * GRID + j)] = (float)(-EXTENT + 2 * EXTENT * j / (GRID - 1));
            grid[2 * (i * GRID + j) + 1] = (float)(-EXTENT + 2 * EXTENT * i / (GRID - 1));
        }
    bool was = tg_set_grad_enabled(ctx, false);
    tg_tensor *logits = mlp_forward(ctx, &r->m, tg_from_buffer(ctx, TG_F32, TG_SHAPE(GRID * GRID, 2), grid));
    tg_set_grad_enabled(ctx, was);
    if (ex_failed(ctx)) return false;
    char path[512];
    snprintf(path, sizeof path, "%s/regions_%s.dat", args->out, r->norm);
    FILE *f = ex_create(path);
    if (!f) return false;
    for (int64_t p = 0; p < GRID * GRID; p++)
        fprintf(f, "%g %g %lld\n", grid[2 * p], grid[2 * p + 1], (long long)argmax_row(ctx, logits, p));
    tg_ctx_reset(ctx);
    return ex_close(f, path);
}

/* Each class's colours: a pale one for its region, the saturated one of
 * the same hue for its points (ColorBrewer's Pastel1 and Set1). */
static const char *const region_colour[CLASSES] = {"#fbb4ae", "#b3cde3", "#ccebc5"};
static const char *const point_colour[CLASSES] = {"#e41a1c", "#377eb8", "#4daf4a"};

/* OUT/boundary.gp, drawn as OUT/boundary.png: one panel per trained model,
 * its regions as an image and the data points on top, a legend entry per
 * class. Sets *drawn when the picture exists; false on a failure. */
static bool plot_boundaries(const ex_args *args, const spiral_data *d, const run *runs, int count, bool *drawn) {
    char path[512], png[512];
    snprintf(path, sizeof path, "%s/points.dat", args->out);
    FILE *f = ex_create(path);
    if (!f) return false;
    for (int64_t i = 0; i < d->n; i++) fprintf(f, "%g %g %lld\n", d->x[2 * i], d->x[2 * i + 1], (long long)d->label[i]);
    if (!ex_close(f, path)) return false;
    snprintf(path, sizeof path, "%s/boundary.gp", args->out);
    if (!(f = ex_create(path))) return false;
    tg_plot_write_preamble(f, "boundary.png", 420 * count, 460);
    fprintf(f, "set multiplot layout 1,%d title 'Spiral: learned decision regions (seed %llu)'\n", count,
            (unsigned long long)args->seed);
    fprintf(f, "set palette defined (0 '%s', 1 '%s', 2 '%s')\nset cbrange [0:2]\nunset colorbox\n", region_colour[0],
            region_colour[1], region_colour[2]);
    fprintf(f, "set size ratio -1\nset xrange [%g:%g]\nset yrange [%g:%g]\nset xlabel 'x1'\nset ylabel 'x2'\n", -EXTENT,
            EXTENT, -EXTENT, EXTENT);
    fprintf(f, "set key top right opaque\n");
    for (int k = 0; k < count; k++) {
        fprintf(f, "set title 'norm: %s'\nplot 'regions_%s.dat' using 1:2:3 with image notitle", runs[k].norm,
                runs[k].norm);
        for (int c = 0; c < CLASSES; c++)
            fprintf(f,
                    ", \\\n  'points.dat' using 1:($3 == %d ? $2 : 1/0) with points pt 7 ps 0.6 lc rgb '%s' "
                    "title 'class %d'",
                    c, point_colour[c], c);
        fprintf(f, "\n");
    }
    fprintf(f, "unset multiplot\n");
    if (!ex_close(f, path)) return false;
    /* A picture from an earlier run must not pass for this one's. */
    snprintf(png, sizeof png, "%s/boundary.png", args->out);
    unlink(png);
    bool rendered = false, failed = false;
    char msg[512];
    tg_status st = tg_plot_render(path, &rendered, msg, sizeof msg);
    *drawn = ex_picture(st, rendered, msg, png, &failed);
    return !failed;
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
    if (per_class < 2 || per_class > 1000000) {
        fprintf(stderr, "spiral: --points must be in 2..1000000\n");
        return 2;
    }
    tg_ctx *ctx = tg_ctx_new(args.seed);
    if (!ctx) {
        fprintf(stderr, "spiral: out of memory\n");
        return 1;
    }
    ex_setup(ctx, &args);
    spiral_data d;
    bool ok = make_spirals(ctx, &d, per_class);

    /* The models, built in turn from the same seed (the same first layers),
     * and their optimizers: one part each of the training state. */
    static const char *const all[] = {"none", "rmsnorm", "layernorm"};
    int count = strcmp(norm, "all") == 0 ? 3 : 1;
    run runs[3];
    tg_train_part parts[3];
    memset(runs, 0, sizeof runs);
    for (int k = 0; k < count && ok; k++) {
        run *r = &runs[k];
        r->norm = count == 3 ? all[k] : norm;
        tg_rng_seed(ctx, args.seed + 1);
        mlp_init(ctx, &r->m, r->norm);
        tg_model_params(ctx, &r->m.model, &r->params);
        r->opt = make_optimizer(ctx, &args, &r->params);
        parts[k] = (tg_train_part){r->norm, &r->params, r->opt};
        ok = !ex_failed(ctx);
    }
    int64_t start = 0;
    ok = ok && ex_resume(ctx, &args, parts, count, &start);
    for (int k = 0; k < count && ok; k++) ok = train(ctx, &args, &d, &runs[k], start);
    ok = ok && ex_save(ctx, &args, parts, count);
    for (int k = 0; k < count && ok; k++) ok = write_regions(ctx, &args, &runs[k]);

    if (ok) {
        tg_plot_series series[3];
        char dats[3][512], png[512], msg[512];
        for (int k = 0; k < count; k++) {
            snprintf(dats[k], sizeof dats[k], "%s/loss_%s.dat", args.out, runs[k].norm);
            series[k] = (tg_plot_series){dats[k], 1, 2, runs[k].norm};
        }
        tg_plot_style style = {.title = "Spiral: training loss by normalization",
                               .xlabel = "step",
                               .ylabel = "cross-entropy loss",
                               .logy = true};
        bool rendered = false, failed = false, loss_drawn, boundary_drawn = false;
        tg_status st = tg_plot_overlay(args.out, "loss", &style, series, count, &rendered, msg, sizeof msg);
        snprintf(png, sizeof png, "%s/loss.png", args.out);
        printf("\n");
        loss_drawn = ex_picture(st, rendered, msg, png, &failed);
        ok = plot_boundaries(&args, &d, runs, count, &boundary_drawn) && !failed;
        printf("\n%-10s %12s %10s\n", "norm", "final loss", "accuracy");
        for (int k = 0; k < count; k++)
            printf("%-10s %12.6f %9.1f%%\n", runs[k].norm, runs[k].loss, 100 * runs[k].accuracy);
        if (loss_drawn && boundary_drawn) printf("\npictures: %s/loss.png and %s/boundary.png\n", args.out, args.out);
        else if (loss_drawn || boundary_drawn)
            printf("\npicture: %s/%s.png\n", args.out, loss_drawn ? "loss" : "boundary");
    }
    for (int k = 0; k < count; k++) {
        tg_optim_free(ctx, runs[k].opt);
        tg_params_free(&runs[k].params);
        tg_model_free(ctx, &runs[k].m.model);
    }
    free(d.x);
    free(d.label);
    tg_ctx_free(ctx);
    return ex_exit(ok);
}

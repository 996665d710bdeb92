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
 * all of them.
 *
 * Mixed precision (--dtype bf16|f16; docs/mixed-precision.md): the model
 * keeps float32 parameters, the master weights the optimizer updates, and
 * runs under autocast (tg_ctx_set_autocast): every layer computes in 16
 * bits from a 16-bit copy of its parameters, the loss is computed in
 * float32 from the logits cast up, and the grads come back to the float32
 * parameters. float16 also scales the loss (tg_grad_scaler), so that small
 * gradients do not flush to zero; a step whose gradient overflowed is
 * skipped.
 *
 * Batches and processes (tapegrad/dist.h, docs/distributed.md): each step
 * trains on a global batch -- all the points, or --batch B points drawn
 * from the seeded RNG -- split into micro-batches: --micro K per process,
 * and under `mpirun -np P` P processes. Each micro-batch's gradient is
 * folded in order (the gradient accumulator, then the all-reduce in rank
 * order), so P processes give bitwise the parameters of one process with
 * --micro P. Every process builds the same models and data from the seed
 * and continues from rank 0's state; only rank 0 prints, logs, plots and
 * saves. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/dist.h"
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
/* --dtype: the compute dtype, TG_F32 or the autocast dtype */
static const char *dtype_flag = "f32";
static tg_dtype compute = TG_F32;

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
    tg_grad_accum *acc;     /* folds this process's micro-batches */
    tg_grad_scaler *scaler; /* --dtype f16: the loss scaler; else NULL */
    int64_t skipped;        /* steps the scaler skipped (a gradient overflowed) */
    double loss, accuracy;
} run;

/* How each step's global batch is made and split (docs at the top). */
typedef struct batching {
    tg_dist *dist;  /* the processes (a world of one without mpirun) */
    bool lead;      /* rank 0: the one that prints, logs, plots and saves */
    int64_t batch;  /* --batch: points drawn per step; 0: all of them */
    int64_t micro;  /* --micro: micro-batches per process */
    float *x;       /* (size of the largest micro-batch, 2), for --batch */
    int64_t *label; /* (the same) */
} batching;

/* True on every rank when ok is true on every rank; else false on every
 * rank, and a rank that had not failed itself says which one did (a rank
 * that failed printed its reason where it failed). With one process: ok. */
static bool all_ok(tg_ctx *ctx, const batching *b, bool ok) { return ex_dist_agree(ctx, b->dist, ok); }

/* The points of positions [start, start + count) of the step's global
 * batch into *x (count, 2) and *label (count). Without --batch, position
 * i is point i (no copy). With --batch, the points tg_dist_draw picks
 * from the RNG's stream at the step's offset: a function of the position
 * alone, so each process draws just its own slice and the global batch is
 * the same however it is split. */
static void micro_batch(tg_ctx *ctx, const spiral_data *d, const batching *b, int64_t start, int64_t count,
                        const float **x, const int64_t **label) {
    if (!b->batch) {
        *x = d->x + 2 * start;
        *label = d->label + start;
        return;
    }
    /* the points' indices first, then each replaced by its label */
    tg_dist_draw(ctx, d->n, start, count, b->label);
    for (int64_t i = 0; i < count && tg_ok(ctx); i++) {
        const int64_t p = b->label[i];
        b->x[2 * i] = d->x[2 * p];
        b->x[2 * i + 1] = d->x[2 * p + 1];
        b->label[i] = d->label[p];
    }
    *x = b->x;
    *label = b->label;
}

/* One step's gradient: this process's micro-batches of the global batch,
 * each folded into the accumulator with weight (its points) / B, then the
 * processes' sums folded in rank order; the same for the loss (the mean
 * over the global batch) and the count of correct predictions, in
 * stats[0] and stats[1]. */
static bool step_gradient(tg_ctx *ctx, const spiral_data *d, const batching *b, run *r, double stats[2]) {
    const int64_t B = b->batch ? b->batch : d->n, parts = tg_dist_size(b->dist) * b->micro;
    uint64_t seed, base;
    tg_rng_state(ctx, &seed, &base);
    double loss = 0, correct = 0;
    for (int64_t k = 0; k < b->micro; k++) {
        int64_t start, count;
        tg_dist_split(B, (int)parts, (int)(tg_dist_rank(b->dist) * b->micro + k), &start, &count);
        const float *xs;
        const int64_t *labels;
        micro_batch(ctx, d, b, start, count, &xs, &labels);
        tg_tensor *logits = mlp_forward(ctx, &r->m, tg_from_buffer(ctx, TG_F32, TG_SHAPE(count, 2), xs));
        /* the loss in float32 (autocast's rule for losses) */
        tg_tensor *l = tg_cross_entropy(ctx, compute == TG_F32 ? logits : tg_cast(ctx, logits, TG_F32), labels, NULL);
        tg_optim_zero_grad(ctx, r->opt);
        /* float16: backward from scale * loss, unscaled before the step */
        tg_backward(ctx, r->scaler ? tg_grad_scaler_scale(ctx, r->scaler, l) : l);
        /* the fold of tg_grad_accum_add, for the loss: w l, then + w l */
        const double w = (double)count / (double)B, t = w * tg_get_flat(ctx, l, 0);
        tg_grad_accum_add(ctx, r->acc, w);
        loss = k == 0 ? t : loss + t;
        for (int64_t i = 0; i < count; i++) correct += argmax_row(ctx, logits, i) == labels[i];
        tg_ctx_reset(ctx);
    }
    /* the whole global batch is drawn, whatever this process's share */
    if (b->batch) tg_rng_set_state(ctx, seed, base + (uint64_t)B);
    tg_grad_accum_finish(ctx, r->acc);
    stats[0] = loss;
    stats[1] = correct;
    /* collectives: reached by every rank, also one in error (it then
     * fails them on every rank) */
    bool ok = tg_dist_allreduce_f64(ctx, b->dist, stats, 2, 1.0);
    return tg_dist_allreduce_grads(ctx, b->dist, &r->params, 1.0) && ok;
}

/* Trains r from step start + 1 to the last step; rank 0 logs
 * OUT/loss_NORM.dat. */
static bool train(tg_ctx *ctx, const ex_args *args, const spiral_data *d, const batching *b, run *r, int64_t start) {
    tg_plot *log = NULL;
    bool ok = true;
    if (b->lead) {
        printf("\n== spiral --norm %s --dtype %s\n", r->norm, dtype_flag);
        tg_model_print(stdout, &r->m.model);
        char name[64];
        snprintf(name, sizeof name, "loss_%s", r->norm);
        const char *cols[] = {"step", "loss", "accuracy"};
        ok = ex_log_open(&log, args, name, 3, cols, start);
    }
    if (!all_ok(ctx, b, ok)) return false;
    tg_progress progress;
    tg_progress_init(&progress, b->lead ? stdout : NULL, args->steps, args->every);
    tg_progress_resume(&progress, start);
    const int64_t B = b->batch ? b->batch : d->n;
    for (int64_t step = start + 1; step <= ex_last_step(args); step++) {
        double stats[2];
        bool reduced = step_gradient(ctx, d, b, r, stats);
        if (r->scaler) tg_grad_scaler_unscale(ctx, r->scaler, r->opt); /* the true gradient, for its norm */
        double gnorm = tg_grad_norm(ctx, &r->params);
        double lr = tg_optim_lr(r->opt);
        if (r->scaler) {
            /* skipped when the gradient overflowed; the scale adapts */
            r->skipped += !tg_grad_scaler_step(ctx, r->scaler, r->opt);
            tg_grad_scaler_update(ctx, r->scaler);
        } else {
            tg_optim_step(ctx, r->opt);
        }
        if (ex_failed(ctx) || !reduced) {
            ex_log_close(&log);
            return false;
        }
        r->loss = stats[0];
        r->accuracy = stats[1] / (double)B;
        ok = !b->lead || ex_log_row(&log, (double[]){(double)step, r->loss, r->accuracy});
        if (!all_ok(ctx, b, ok)) {
            ex_log_close(&log);
            return false;
        }
        tg_progress_update(&progress, step, r->loss, lr, gnorm);
        tg_ctx_reset(ctx);
    }
    tg_progress_finish(&progress);
    if (r->scaler && b->lead)
        printf("loss scale %g; %lld step%s skipped (gradient overflow)\n", tg_grad_scaler_get_scale(r->scaler),
               (long long)r->skipped, r->skipped == 1 ? "" : "s");
    return all_ok(ctx, b, ex_log_close(&log));
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

/* Every process continues from rank 0's state: the parameters, the
 * optimizers and the RNG (the same everywhere when built from the seed;
 * after --resume, what rank 0 loaded). A collective, called by every rank,
 * also one that failed: the failure then ends every rank. */
static bool sync_from_rank0(tg_ctx *ctx, const batching *b, run *runs, int count, bool ok) {
    if (!all_ok(ctx, b, ok)) return false;
    for (int k = 0; k < count && ok; k++)
        ok = tg_dist_broadcast_params(ctx, b->dist, &runs[k].params) &&
             tg_dist_broadcast_optim(ctx, b->dist, runs[k].opt) &&
             (!runs[k].scaler || (tg_dist_broadcast_params(ctx, b->dist, tg_grad_scaler_state(runs[k].scaler)) &&
                                  (tg_grad_scaler_sync_state(ctx, runs[k].scaler), tg_ok(ctx))));
    ok = ok && tg_dist_broadcast_rng(ctx, b->dist);
    if (!ok) ex_failed(ctx);
    return ok;
}

int main(int argc, char **argv) {
    ex_args args = {.steps = 1000, .lr = 0.01, .seed = 1, .out = "out/spiral", .every = 100};
    const char *norm = "all";
    int64_t per_class = 100, batch = 0, micro = 1;
    static const char *const choices[] = {"none", "rmsnorm", "layernorm", "all", NULL};
    static const char *const optims[] = {"sgd", "adam", "adamw", NULL};
    static const char *const schedules[] = {"constant", "cosine", NULL};
    static const char *const dtypes[] = {"f32", "bf16", "f16", NULL};
    ex_flag extra[] = {
        {"norm", EX_STR, &norm, "normalization after each hidden Linear (default all)", choices},
        {"optim", EX_STR, &optim_name, "optimizer; sgd has momentum 0.9 (default adam)", optims},
        {"schedule", EX_STR, &schedule_name, "lr schedule; cosine warms up for 10% of the steps (default constant)",
         schedules},
        {"points", EX_INT, &per_class, "points per class (default 100)", NULL},
        {"batch", EX_INT, &batch, "points drawn from the seeded RNG for each step (default 0: all, in order)", NULL},
        {"micro", EX_INT, &micro, "micro-batches per process, gradients accumulated (default 1)", NULL},
        {"dtype", EX_STR, &dtype_flag,
         "compute dtype; bf16 and f16 are mixed precision (float32 master weights, autocast; f16 scales the loss) "
         "(default f32)",
         dtypes},
        EX_FLAG_DIST_TIMEOUT(args),
    };
    int rc = ex_parse(&args, argc, argv, "spiral", "Trains an MLP to classify three spirals.", extra,
                      (int)(sizeof extra / sizeof *extra));
    if (rc >= 0) return rc;
    if (per_class < 2 || per_class > 1000000) {
        fprintf(stderr, "spiral: --points must be in 2..1000000\n");
        return 2;
    }
    if (batch > 100000000 || micro < 1 || micro > 1000000) {
        fprintf(stderr, "spiral: --batch must be in 0..100000000 and --micro in 1..1000000\n");
        return 2;
    }
    tg_ctx *ctx = tg_ctx_new(args.seed);
    if (!ctx) {
        fprintf(stderr, "spiral: out of memory\n");
        return 1;
    }
    compute = strcmp(dtype_flag, "bf16") == 0 ? TG_BF16 : strcmp(dtype_flag, "f16") == 0 ? TG_F16 : TG_F32;
    tg_ctx_set_autocast(ctx, compute); /* TG_F32: off */
    /* The processes: a world of one unless mpirun started this one. Only
     * rank 0 prints; the others' output goes nowhere (errors still go to
     * stderr from every rank). */
    batching b = {.batch = batch, .micro = micro};
    if (!(b.dist = ex_dist_join(ctx, &args, &argc, &argv, "spiral"))) {
        tg_ctx_free(ctx);
        return 1;
    }
    const int nproc = tg_dist_size(b.dist);
    b.lead = tg_dist_rank(b.dist) == 0;
    ex_dist_set_split(&args, b.dist, micro);
    /* The flags that decide what each process computes must be the same
     * everywhere, or the processes would wait for each other forever. */
    char settings[512];
    snprintf(settings, sizeof settings,
             "steps=%lld stop-after=%lld seed=%llu lr=%.17g norm=%s optim=%s schedule=%s points=%lld batch=%lld "
             "micro=%lld dtype=%s",
             (long long)args.steps, (long long)args.stop_after, (unsigned long long)args.seed, args.lr, norm,
             optim_name, schedule_name, (long long)per_class, (long long)batch, (long long)micro, dtype_flag);
    bool ok = tg_dist_same(ctx, b.dist, settings, strlen(settings),
                           "the flags (--steps, --stop-after, --seed, --lr, --norm, --optim, --schedule, --points, "
                           "--batch, --micro, --dtype)") ||
              !ex_failed(ctx);
    const int64_t B = batch ? batch : CLASSES * per_class, parts = nproc * micro;
    if (ok && B < parts) {
        fprintf(stderr, "spiral: a batch of %lld points cannot make %lld micro-batches (%d process%s x --micro %lld)\n",
                (long long)B, (long long)parts, nproc, nproc > 1 ? "es" : "", (long long)micro);
        tg_dist_free(b.dist);
        tg_ctx_free(ctx);
        return 2;
    }
    if (ok && batch) { /* room for the largest micro-batch */
        b.x = malloc((size_t)(B / parts + 1) * 2 * sizeof *b.x);
        b.label = malloc((size_t)(B / parts + 1) * sizeof *b.label);
        if (!b.x || !b.label) tg_error(ctx, TG_ERR_OOM, "spiral", "out of memory for a batch of %lld", (long long)B);
    }
    spiral_data d = {0};
    ok = ok && !ex_failed(ctx) && make_spirals(ctx, &d, per_class);

    /* The models, built in turn from the same seed (the same first layers),
     * and their optimizers: one part each of the training state. */
    static const char *const all[] = {"none", "rmsnorm", "layernorm"};
    int count = strcmp(norm, "all") == 0 ? 3 : 1;
    run runs[3];
    tg_train_part parts_of_state[3];
    memset(runs, 0, sizeof runs);
    for (int k = 0; k < count && ok; k++) {
        run *r = &runs[k];
        r->norm = count == 3 ? all[k] : norm;
        tg_rng_seed(ctx, args.seed + 1);
        mlp_init(ctx, &r->m, r->norm);
        tg_model_params(ctx, &r->m.model, &r->params);
        r->opt = make_optimizer(ctx, &args, &r->params);
        r->acc = tg_grad_accum_new(ctx, &r->params);
        if (compute == TG_F16) r->scaler = tg_grad_scaler_new(ctx, NULL);
        parts_of_state[k] = (tg_train_part){r->norm, &r->params, r->opt, r->scaler};
        ok = !ex_failed(ctx);
    }
    int64_t start = 0;
    /* only rank 0 reads --resume: the others receive its state below */
    ok = ok && (!b.lead || ex_resume(ctx, &args, parts_of_state, count, &start));
    ok = sync_from_rank0(ctx, &b, runs, count, ok);
    if (ok) start = tg_optim_steps(runs[0].opt);
    if (ok && (nproc > 1 || micro > 1))
        printf("spiral: %d process%s (%s), %d thread%s each; a global batch of %lld points in %lld micro-batch%s\n",
               nproc, nproc > 1 ? "es" : "", tg_dist_backend(b.dist), tg_threads(ctx), tg_threads(ctx) > 1 ? "s" : "",
               (long long)B, (long long)parts, parts > 1 ? "es" : "");
    for (int k = 0; k < count && ok; k++) ok = train(ctx, &args, &d, &b, &runs[k], start);
    if (ok) ok = all_ok(ctx, &b, !b.lead || ex_save(ctx, &args, parts_of_state, count, 0));

    /* What only rank 0 does: the decision regions, the pictures, the table. */
    const bool synced = ok;
    for (int k = 0; k < count && ok && b.lead; k++) ok = write_regions(ctx, &args, &runs[k]);
    if (ok && b.lead) {
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
    /* every rank ends with rank 0's status */
    if (synced) ok = all_ok(ctx, &b, ok);
    for (int k = 0; k < count; k++) {
        tg_grad_accum_free(ctx, runs[k].acc);
        tg_grad_scaler_free(ctx, runs[k].scaler);
        tg_optim_free(ctx, runs[k].opt);
        tg_params_free(&runs[k].params);
        tg_model_free(ctx, &runs[k].m.model);
    }
    free(d.x);
    free(d.label);
    free(b.x);
    free(b.label);
    tg_dist_free(b.dist);
    tg_ctx_free(ctx);
    return ex_exit(ok);
}

/* `tapegrad-gradcheck sweep NAME`: the error of the finite-difference
 * gradient as the step h goes from 1e-1 to 1e-12 (four steps a decade, or
 * --h-grid), for forward and central differences in float32 and float64
 * (--scheme and --dtype pick fewer), over one seed or many (--seeds).
 *
 * The error is e(h) = max over checked elements |analytic - numeric|, the
 * analytic gradient (exact up to round-off) standing in for the truth. Two
 * effects add up:
 *   truncation  forward (L(x+h) - L(x)) / h          ~ h |L''| / 2
 *               central (L(x+h) - L(x-h)) / 2h       ~ h^2 |L'''| / 6
 *   round-off   each L carries ~eps |L| of rounding, divided by h:
 *               ~ eps |L| / h
 * Truncation falls as h shrinks and round-off grows: on a log-log plot a V
 * whose bottom, where the two are equal, sits near
 *   forward  h* ~ sqrt(eps) l    1.5e-8 l (float64)   3.5e-4 l (float32)
 *   central  h* ~ cbrt(eps) l    6.1e-6 l (float64)   4.9e-3 l (float32)
 * where l is the input's length scale (each derivative of L brings a 1 / l:
 * for RMSNorm the row's sqrt(mean x^2 + eps)), up to factors of order one;
 * docs/experiments.md measures h* = 1.6..1.9 cbrt(eps) l for the norms.
 *
 * Reports: the error over all inputs (as above; the median over seeds),
 * and for each input its error relative to its own gradient's scale,
 * max |a - n| / G (median and 10%..90% over seeds), each with its best h
 * against the theory scaled by that input's l. A step that rounds away
 * (x +- h == x) is marked `vanished`, never plotted as an error of 0.
 * Writes DIR/sweep_NAME.dat (the errors over all inputs), .gp and .png,
 * and DIR/sweep_NAME_inputs.dat, .gp and .png (the relative errors).
 *
 * Layer: command (tool.h): calls the report, target and base layers. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tools/gradcheck/tool.h"

#define SWEEP_CURVES 4

typedef struct curve_info {
    const char *label;  /* table and legend */
    const char *column; /* .dat column name */
    tg_dtype dtype;
    bool forward;
    const char *color;
    int dash; /* gnuplot dash type */
} curve_info;

static const curve_info CURVES[SWEEP_CURVES] = {
    {"f64 central", "f64_central", TG_F64, false, "#1f4e9c", 1},
    {"f64 forward", "f64_forward", TG_F64, true, "#5fa8d3", 2},
    {"f32 central", "f32_central", TG_F32, false, "#b2182b", 1},
    {"f32 forward", "f32_forward", TG_F32, true, "#f4a261", 2},
};

/* The measured constant of the central-difference optimum: h* = RULE
 * cbrt(eps) l (docs/experiments.md). */
#define SWEEP_RULE 1.7

static double curve_eps(const curve_info *c) { return c->dtype == TG_F64 ? DBL_EPSILON : FLT_EPSILON; }

/* The theory's optimal step for a curve, at length scale l: cbrt(eps) l
 * central, sqrt(eps) l forward. */
static double theory_h(const curve_info *c, double l) {
    double eps = curve_eps(c);
    return (c->forward ? sqrt(eps) : cbrt(eps)) * l;
}

/* What the sweep measured: per curve, step, seed and input. */
typedef struct sweep_data {
    int nc, nk, ns, ni;      /* curves, steps, seeds, inputs */
    int curve[SWEEP_CURVES]; /* indices into CURVES */
    const double *h;         /* the steps */
    double *all;             /* [c][k][s] max |a - n| over inputs */
    double *rel;             /* [c][k][i][s] max |a - n| / G of input i */
    double *pall, *prel;     /* the same for the predicted error (tg_gradcheck_input.pred_max) */
    double *scale;           /* [c][i][s] the input's length scale l */
    int *vanished;           /* [c][k] seeds whose step vanished */
    int input_index[TG_GRADCHECK_MAX_INPUTS];
    char input_name[TG_GRADCHECK_MAX_INPUTS][16]; /* copies: a case's names live in its step's arena */
} sweep_data;

#define ALL(d, c, k, s) (d)->all[((size_t)(c) * (d)->nk + (k)) * (d)->ns + (s)]
#define REL(d, c, k, i, s) (d)->rel[(((size_t)(c) * (d)->nk + (k)) * (d)->ni + (i)) * (d)->ns + (s)]
#define PALL(d, c, k, s) (d)->pall[((size_t)(c) * (d)->nk + (k)) * (d)->ns + (s)]
#define PREL(d, c, k, i, s) (d)->prel[(((size_t)(c) * (d)->nk + (k)) * (d)->ni + (i)) * (d)->ns + (s)]
#define SCALE(d, c, i, s) (d)->scale[((size_t)(c) * (d)->ni + (i)) * (d)->ns + (s)]

/* The q-quantile over seeds of v(s); NaN when a seed's step vanished. */
static double over_seeds(const sweep_data *d, int c, int k, const double *v, size_t stride, double q, double *tmp) {
    if (d->vanished[c * d->nk + k]) return NAN;
    for (int s = 0; s < d->ns; s++) tmp[s] = v[(size_t)s * stride];
    return gct_quantile(tmp, d->ns, q);
}

/* Summary of one curve of one input (i = -1: all inputs). */
typedef struct best_point {
    double *med, *lo, *hi; /* per step: median, 10%, 90% */
    double *pred;          /* per step: the median predicted error */
    int k;                 /* the best step's index, -1: none */
    double l;              /* the length scale for the theory (1 with relative steps) */
} best_point;

static void summarize(const sweep_data *d, int c, int i, bool relative_steps, best_point *b, double *tmp) {
    b->k = -1;
    for (int k = 0; k < d->nk; k++) {
        const double *v = i < 0 ? &ALL(d, c, k, 0) : &REL(d, c, k, i, 0);
        b->med[k] = over_seeds(d, c, k, v, 1, 0.5, tmp);
        b->pred[k] = over_seeds(d, c, k, i < 0 ? &PALL(d, c, k, 0) : &PREL(d, c, k, i, 0), 1, 0.5, tmp);
        b->lo[k] = over_seeds(d, c, k, v, 1, 0.1, tmp);
        b->hi[k] = over_seeds(d, c, k, v, 1, 0.9, tmp);
        if (isfinite(b->med[k]) && (b->k < 0 || b->med[k] < b->med[b->k])) b->k = k;
    }
    int ii = i < 0 ? 0 : i;
    for (int s = 0; s < d->ns; s++) tmp[s] = SCALE(d, c, ii, s);
    b->l = relative_steps ? 1.0 : gct_quantile(tmp, d->ns, 0.5);
}

/* Writes the gnuplot script of the all-inputs errors: the curves on
 * log-log axes, the best h of each circled and labelled, the theory's h*
 * (times l) as dotted lines. */
static bool write_script(const char *gp_path, const char *png, const char *dat, const char *title, const sweep_data *d,
                         const best_point *best) {
    FILE *f = fopen(gp_path, "w");
    if (!f) return false;
    tg_status st = tg_plot_write_preamble(f, png, 900, 560);
    fprintf(f, "set datafile missing 'NaN'\n");
    fprintf(f, "set title '%s'\n", title);
    fprintf(f, "set xlabel 'step h      (dotted: eps^(1/3) l and eps^(1/2) l of each dtype, the optimal steps in "
               "theory)'\n"
               "set ylabel 'max |analytic - numeric|'\n");
    fprintf(f, "set logscale xy\nset format x '%%.0e'\nset format y '%%.0e'\n");
    fprintf(f, "set offsets 0, 0, graph 0.06, graph 0.04\nset grid\nset key bottom left box opaque\n");
    for (int c = 0; c < d->nc; c++) {
        const curve_info *ci = &CURVES[d->curve[c]];
        double t = theory_h(ci, best[c].l);
        fprintf(f, "set arrow from %.6g, graph 0 to %.6g, graph 1 nohead dt 3 lc rgb '%s'\n", t, t, ci->color);
    }
    fprintf(f, "$best << EOD\n");
    for (int c = 0; c < d->nc; c++)
        if (best[c].k >= 0)
            fprintf(f, "%.6g %.6g \"h=%.1e\" %d\n", d->h[best[c].k], best[c].med[best[c].k], d->h[best[c].k], c);
    fprintf(f, "EOD\n");
    fprintf(f, "plot ");
    for (int c = 0; c < d->nc; c++) {
        const curve_info *ci = &CURVES[d->curve[c]];
        fprintf(f, "'%s' using 1:%d with linespoints lw 2 dt %d pt 7 ps 0.6 lc rgb '%s' title '%s', \\\n     ", dat,
                c + 2, ci->dash, ci->color, ci->label);
        fprintf(f, "'%s' using 1:%d with lines lw 1 dt 4 lc rgb '%s' title '%s predicted', \\\n     ", dat,
                d->nc + c + 2, ci->color, ci->label);
    }
    fprintf(f, "$best using 1:2 with points pt 6 ps 2.6 lw 2 lc rgb 'black' title 'best h', \\\n"
               "     $best using 1:2:3 with labels offset 0,1.5 font ',9' notitle\n");
    return gct_fclose(f) && st == TG_OK;
}

/* The per-input script: each input's relative error (median over seeds, a
 * band from 10% to 90% when there are several seeds), one colour per
 * curve, one dash per input; the theory lines at cbrt(eps) l. */
static bool write_inputs_script(const char *gp_path, const char *png, const char *dat, const char *title,
                                const sweep_data *d, const best_point *bi) {
    FILE *f = fopen(gp_path, "w");
    if (!f) return false;
    tg_status st = tg_plot_write_preamble(f, png, 900, 560);
    fprintf(f, "set datafile missing 'NaN'\nset title '%s'\n", title);
    fprintf(f, "set xlabel 'step h      (dotted: 1.7 eps^(1/3) l of each central curve, the measured optimum)'\n"
               "set ylabel 'max |analytic - numeric| / G   (G: the gradient''s scale)'\n");
    fprintf(f, "set logscale xy\nset format x '%%.0e'\nset format y '%%.0e'\nset grid\n"
               "set key bottom left box opaque\nset style fill transparent solid 0.15 noborder\n");
    for (int c = 0; c < d->nc; c++) {
        const curve_info *ci = &CURVES[d->curve[c]];
        if (ci->forward) continue;
        double t = SWEEP_RULE * theory_h(ci, bi[c * d->ni].l);
        fprintf(f, "set arrow from %.6g, graph 0 to %.6g, graph 1 nohead dt 3 lc rgb '%s'\n", t, t, ci->color);
    }
    fprintf(f, "plot ");
    int col = 2;
    bool first = true;
    for (int c = 0; c < d->nc; c++) {
        const curve_info *ci = &CURVES[d->curve[c]];
        for (int i = 0; i < d->ni; i++, col += 3) {
            if (d->ns > 1)
                fprintf(f, "%s'%s' using 1:%d:%d with filledcurves lc rgb '%s' notitle", first ? "" : ", \\\n     ",
                        dat, col + 1, col + 2, ci->color),
                    first = false;
            fprintf(f, "%s'%s' using 1:%d with linespoints lw 2 dt %d pt %d ps 0.6 lc rgb '%s' title '%s %s'",
                    first ? "" : ", \\\n     ", dat, col, 1 + i, 7 + 2 * i, ci->color, ci->label, d->input_name[i]);
            first = false;
        }
    }
    fprintf(f, "\n");
    return gct_fclose(f) && st == TG_OK;
}

static void put_err_cell(gct_cell *cell, double e, bool vanished, bool best) {
    if (vanished) gct_cell_set(cell, GCT_DIM, "vanished");
    else if (isnan(e)) gct_cell_set(cell, GCT_DIM, "-  ");
    else if (best) gct_cell_set(cell, GCT_GOOD, "%.2e *", e);
    else gct_cell_set(cell, GCT_PLAIN, "%.2e  ", e);
}

static void put_pred_cell(gct_cell *cell, double p, bool vanished) {
    if (vanished || isnan(p)) gct_cell_set(cell, GCT_DIM, "-");
    else gct_cell_set(cell, GCT_DIM, "%.1e", p);
}

/* A table with a column `first` (the steps), then for each curve its error
 * and the predicted error beside it. */
static void curve_table_init(gct_table *t, const sweep_data *d, const char *first) {
    gct_table_init(t, "rrrrrrrrr", first, "", "", "", "", "", "", "", "");
    t->ncols = 1 + 2 * d->nc;
    for (int c = 0; c < d->nc; c++) {
        snprintf(t->head[2 * c + 1], sizeof t->head[0], "%s", CURVES[d->curve[c]].label);
        snprintf(t->head[2 * c + 2], sizeof t->head[0], "pred");
    }
}

static void json_array(FILE *f, const double *v, int n) {
    fputc('[', f);
    for (int k = 0; k < n; k++) {
        if (k) fputc(',', f);
        gct_json_num(f, v[k]);
    }
    fputc(']', f);
}

/* Runs every check of the sweep into d. Returns -1, or the exit status. */
static int measure(tg_ctx *ctx, const gct_args *a, const tg_op_info *op, const gct_bug *bug, sweep_data *d, char *spec,
                   char *label, char *function, int64_t *numel) {
    uint64_t s0 = gct_first_seed(a);
    for (int c = 0; c < d->nc; c++) {
        const curve_info *ci = &CURVES[d->curve[c]];
        for (int k = 0; k < d->nk; k++) {
            for (int s = 0; s < d->ns; s++) {
                gct_target t;
                tg_ctx_reset(ctx);
                /* the same inputs (rounded to the dtype) for every h */
                if (!gct_target_make(ctx, a, op, bug, a->shape, ci->dtype, s0 + (uint64_t)s, &t))
                    return gct_build_failed(ctx);
                if (c == 0 && k == 0 && s == 0) {
                    snprintf(spec, 128, "%s", t.c.spec);
                    snprintf(label, 160, "%s", t.label);
                    snprintf(function, 160, "%s", t.function);
                    *numel = gct_target_numel(&t);
                    d->ni = 0;
                    for (int i = 0; i < t.c.n_inputs; i++)
                        if (t.c.check >> i & 1u) {
                            d->input_index[d->ni] = i;
                            snprintf(d->input_name[d->ni++], sizeof d->input_name[0], "%s", t.c.input_names[i]);
                        }
                }
                tg_gradcheck_opts o = gct_target_opts(&t, a, s0 + (uint64_t)s);
                o.h = d->h[k];
                o.forward_diff = ci->forward;
                o.step = a->step_set ? a->step : TG_GRADCHECK_STEP_ABSOLUTE;
                tg_gradcheck_result r;
                gct_target_check(ctx, &t, &o, &r);
                if (!tg_ok(ctx) && r.step_vanished) {
                    d->vanished[c * d->nk + k]++;
                    tg_clear_error(ctx);
                } else if (!tg_ok(ctx)) {
                    fprintf(stderr, "tapegrad-gradcheck: sweep %s, h=%g: %s\n", label, o.h, tg_error_message(ctx));
                    return GCT_EXIT_ERROR;
                }
                ALL(d, c, k, s) = r.max_abs_err;
                PALL(d, c, k, s) = 0;
                for (int i = 0; i < d->ni; i++) {
                    const tg_gradcheck_input *in = &r.input[d->input_index[i]];
                    REL(d, c, k, i, s) = in->grad_scale > 0 ? in->max_abs_err / in->grad_scale : in->max_abs_err;
                    PREL(d, c, k, i, s) = in->grad_scale > 0 ? in->pred_max / in->grad_scale : in->pred_max;
                    PALL(d, c, k, s) = fmax(PALL(d, c, k, s), in->pred_max);
                    if (k == 0) SCALE(d, c, i, s) = in->scale;
                }
            }
        }
    }
    return -1;
}

/* A sweep under way: the case, what it measured, and the summaries the
 * reports and the pictures read. */
typedef struct sweep_run {
    const gct_args *a;
    const tg_op_info *op;
    const gct_bug *bug;
    sweep_data d;
    double grid[GCT_MAX_GRID];                             /* the steps h */
    double *tmp;                                           /* ns values: scratch for quantiles */
    double *stats;                                         /* the arrays of best and bi */
    best_point best[SWEEP_CURVES];                         /* per curve, all inputs */
    best_point bi[SWEEP_CURVES * TG_GRADCHECK_MAX_INPUTS]; /* per curve and input: bi[c * ni + i] */
    bool relative;                                         /* relative steps (--step element|scaled) */
    const char *step_name;
    char spec[128], label[160], function[160];
    int64_t numel;
    char name[200]; /* sweep_NAME: the stem of the files */
} sweep_run;

/* The steps (--h-grid, or 1e-1 .. 1e-12, four a decade), the curves the
 * command line asks for, and the arrays. False when out of memory. */
static bool sweep_setup(sweep_run *w) {
    const gct_args *a = w->a;
    sweep_data *d = &w->d;
    int nk = a->n_grid;
    if (nk) memcpy(w->grid, a->grid, (size_t)nk * sizeof *w->grid);
    else
        for (nk = 0; nk < 45; nk++) w->grid[nk] = pow(10.0, -(double)(4 + nk) / 4);
    for (int c = 0; c < SWEEP_CURVES; c++) {
        const curve_info *ci = &CURVES[c];
        if (a->dtype_set && ci->dtype != a->dtype) continue;
        if (a->schemes && (a->schemes == 2) != ci->forward) continue;
        d->curve[d->nc++] = c;
    }
    d->nk = nk;
    d->ns = (int)gct_seed_count(a);
    d->ni = TG_GRADCHECK_MAX_INPUTS;
    d->h = w->grid;
    size_t n_all = (size_t)d->nc * (size_t)d->nk * (size_t)d->ns;
    d->all = calloc(n_all, sizeof *d->all);
    d->rel = calloc(n_all * TG_GRADCHECK_MAX_INPUTS, sizeof *d->rel);
    d->pall = calloc(n_all, sizeof *d->pall);
    d->prel = calloc(n_all * TG_GRADCHECK_MAX_INPUTS, sizeof *d->prel);
    d->scale = calloc((size_t)d->nc * TG_GRADCHECK_MAX_INPUTS * (size_t)d->ns, sizeof *d->scale);
    d->vanished = calloc((size_t)d->nc * (size_t)d->nk, sizeof *d->vanished);
    w->tmp = malloc((size_t)d->ns * sizeof *w->tmp);
    w->stats = calloc((size_t)4 * (size_t)d->nk * SWEEP_CURVES * (1 + TG_GRADCHECK_MAX_INPUTS), sizeof *w->stats);
    return d->all && d->rel && d->pall && d->prel && d->scale && d->vanished && w->tmp && w->stats;
}

static void sweep_free(sweep_run *w) {
    free(w->d.all);
    free(w->d.rel);
    free(w->d.pall);
    free(w->d.prel);
    free(w->d.scale);
    free(w->d.vanished);
    free(w->tmp);
    free(w->stats);
}

/* Each curve's summary over all inputs (best) and per input (bi), the
 * name of the steps and the stem of the files. */
static void sweep_summarize(sweep_run *w) {
    const gct_args *a = w->a;
    const sweep_data *d = &w->d;
    w->relative = a->step_set && a->step != TG_GRADCHECK_STEP_ABSOLUTE;
    double *p = w->stats;
    for (int c = 0; c < d->nc; c++) {
        w->best[c] = (best_point){p, p + d->nk, p + 2 * d->nk, p + 3 * d->nk, -1, 1.0};
        p += 4 * d->nk;
        summarize(d, c, -1, w->relative, &w->best[c], w->tmp);
        for (int i = 0; i < d->ni; i++) {
            best_point *b = &w->bi[c * d->ni + i];
            *b = (best_point){p, p + d->nk, p + 2 * d->nk, p + 3 * d->nk, -1, 1.0};
            p += 4 * d->nk;
            summarize(d, c, i, w->relative, b, w->tmp);
        }
    }
    w->step_name = w->relative ? tg_gradcheck_step_name(a->step) : "absolute";
    snprintf(w->name, sizeof w->name, "sweep_%s", w->bug ? w->bug->name : w->op->def->name);
}

/* ---- --format json ------------------------------------------------------------ */

/* One input of a curve in "sweep": its relative errors over the steps. */
static void json_input(const sweep_run *w, const curve_info *ci, const best_point *b, int i) {
    int nk = w->d.nk;
    printf("%s{\"name\":", i ? "," : "");
    gct_json_str(stdout, w->d.input_name[i]);
    printf(",\"scale\":");
    gct_json_num(stdout, b->l);
    printf(",\"median\":");
    json_array(stdout, b->med, nk);
    printf(",\"p10\":");
    json_array(stdout, b->lo, nk);
    printf(",\"p90\":");
    json_array(stdout, b->hi, nk);
    printf(",\"predicted\":");
    json_array(stdout, b->pred, nk);
    printf(",\"best_h\":");
    gct_json_num(stdout, b->k >= 0 ? w->grid[b->k] : NAN);
    printf(",\"best_rel_err\":");
    gct_json_num(stdout, b->k >= 0 ? b->med[b->k] : NAN);
    printf(",\"theory_h\":");
    gct_json_num(stdout, theory_h(ci, b->l));
    printf("}");
}

/* One curve of "sweep": its vanished steps, the errors over all inputs,
 * then each input's. */
static void json_curve(const sweep_run *w, int c) {
    const sweep_data *d = &w->d;
    const curve_info *ci = &CURVES[d->curve[c]];
    const best_point *best = &w->best[c];
    printf("%s{\"dtype\":\"%s\",\"scheme\":\"%s\",\"vanished\":[", c ? "," : "", tg_dtype_name(ci->dtype),
           ci->forward ? "forward" : "central");
    for (int k = 0; k < d->nk; k++) printf("%s%d", k ? "," : "", d->vanished[c * d->nk + k]);
    printf("],\"all\":{\"median\":");
    json_array(stdout, best->med, d->nk);
    printf(",\"predicted\":");
    json_array(stdout, best->pred, d->nk);
    printf(",\"best_h\":");
    gct_json_num(stdout, best->k >= 0 ? w->grid[best->k] : NAN);
    printf(",\"theory_h\":");
    gct_json_num(stdout, theory_h(ci, best->l));
    printf("},\"inputs\":[");
    for (int i = 0; i < d->ni; i++) json_input(w, ci, &w->bi[c * d->ni + i], i);
    printf("]}");
}

/* The document's envelope (json.c), the sweep in its own field. */
static void print_json(const sweep_run *w, double t_start) {
    const gct_args *a = w->a;
    gct_json J;
    gct_json_open(&J, a);
    gct_json_checks_close(&J);
    printf(",\n\"sweep\":{\"op\":");
    gct_json_str(stdout, w->op->def->name);
    printf(",\"bug\":");
    if (w->bug) gct_json_str(stdout, w->bug->name);
    else printf("null");
    printf(",\"spec\":");
    gct_json_str(stdout, w->spec);
    printf(",\"mode\":\"%s\",\"step\":\"%s\",\"h\":", tg_gradcheck_mode_name(a->mode), w->step_name);
    json_array(stdout, w->grid, w->d.nk);
    printf(",\"curves\":[");
    for (int c = 0; c < w->d.nc; c++) json_curve(w, c);
    printf("]}");
    gct_tally none = {0};
    gct_json_summary(a, &none, &none, 1, 1, gct_now() - t_start, gct_now() - t_start);
}

/* ---- --format csv ------------------------------------------------------------- */

/* A row per curve, input (or all) and step. */
static void print_csv(const sweep_run *w) {
    const sweep_data *d = &w->d;
    printf("op,bug,spec,dtype,scheme,input,measure,h,seeds,vanished,p50,p10,p90,scale,theory_h,best,predicted\n");
    for (int c = 0; c < d->nc; c++) {
        const curve_info *ci = &CURVES[d->curve[c]];
        for (int i = -1; i < d->ni; i++) {
            const best_point *b = i < 0 ? &w->best[c] : &w->bi[c * d->ni + i];
            for (int k = 0; k < d->nk; k++) {
                printf("%s,%s,", w->op->def->name, w->bug ? w->bug->name : "");
                for (const char *q = w->spec; *q; q++) putchar(*q == ',' ? ';' : *q);
                printf(",%s,%s,%s,%s,%.17g,%d,%d,%.17g,%.17g,%.17g,%.17g,%.17g,%d,%.17g\n", tg_dtype_name(ci->dtype),
                       ci->forward ? "forward" : "central", i < 0 ? "all" : d->input_name[i], i < 0 ? "abs" : "rel",
                       w->grid[k], d->ns, d->vanished[c * d->nk + k], b->med[k], b->lo[k], b->hi[k], b->l,
                       theory_h(ci, b->l), k == b->k, b->pred[k]);
            }
        }
    }
}

/* ---- text ----------------------------------------------------------------------- */

/* The title, the case and what the columns mean. */
static void text_header(const sweep_run *w) {
    const gct_args *a = w->a;
    gct_put_title(a, w->op, w->bug, w->function);
    printf("  spec %s: %lld elements checked, %s, %s steps", w->spec, (long long)w->numel,
           a->mode == TG_GRADCHECK_FULL ? "every element" : "one random direction per input", w->step_name);
    if (w->d.ns > 1)
        printf(", seeds %llu..%llu (medians over seeds)", (unsigned long long)gct_first_seed(a),
               (unsigned long long)(gct_first_seed(a) + (uint64_t)w->d.ns - 1));
    printf("\n  error = max |analytic - numeric| over the checked elements; * marks each column's minimum;\n"
           "  pred = the error the check predicts for itself at that h (truncation + rounding, the largest)\n\n");
}

/* The errors over all inputs, a row per step (not with -q). */
static void text_errors(const sweep_run *w) {
    const sweep_data *d = &w->d;
    gct_table t;
    curve_table_init(&t, d, "h");
    bool any_vanished = false;
    for (int k = 0; k < d->nk && !w->a->quiet; k++) {
        gct_cell *row = gct_table_row(&t);
        if (!row) break;
        gct_cell_set(&row[0], GCT_PLAIN, "%.1e", w->grid[k]);
        for (int c = 0; c < d->nc; c++) {
            bool v = d->vanished[c * d->nk + k] > 0;
            any_vanished |= v;
            put_err_cell(&row[2 * c + 1], w->best[c].med[k], v, k == w->best[c].k);
            put_pred_cell(&row[2 * c + 2], w->best[c].pred[k], v);
        }
    }
    if (!w->a->quiet) gct_table_print(stdout, &t, 2, w->a->color);
    gct_table_free(&t);
    if (any_vanished)
        printf("  vanished: the step rounds away (x +- h == x for an element, or most of h v in a direction):\n"
               "  a check there is an error, not a point\n");
}

/* Each curve's best step against the theory's. */
static void text_best(const sweep_run *w) {
    const sweep_data *d = &w->d;
    printf("\n");
    gct_table s;
    gct_table_init(&s, "lrrrrl", "curve", "best h", "error there", "pred there", "theory h*", "theory");
    for (int c = 0; c < d->nc; c++) {
        const curve_info *ci = &CURVES[d->curve[c]];
        const best_point *b = &w->best[c];
        gct_cell *row = gct_table_row(&s);
        if (!row) break;
        gct_cell_set(&row[0], GCT_PLAIN, "%s", ci->label);
        if (b->k >= 0) {
            gct_cell_set(&row[1], GCT_GOOD, "%.1e", w->grid[b->k]);
            gct_cell_set(&row[2], GCT_PLAIN, "%.2e", b->med[b->k]);
            gct_cell_set(&row[3], GCT_DIM, "%.2e", b->pred[b->k]);
        } else {
            gct_cell_set(&row[1], GCT_BAD, "none");
        }
        gct_cell_set(&row[4], GCT_PLAIN, "%.1e", theory_h(ci, b->l));
        /* eps and its root each with its own value: "eps^(1/3) l,
         * eps = 2.22e-16" read as if the cube root were 2.22e-16 */
        gct_cell_set(&row[5], GCT_DIM, "%s l; eps = %.3g, %s = %.3g, l = %.3g (%s)",
                     ci->forward ? "eps^(1/2)" : "eps^(1/3)", curve_eps(ci), ci->forward ? "eps^(1/2)" : "eps^(1/3)",
                     theory_h(ci, 1.0), b->l, w->relative ? "relative steps" : d->input_name[0]);
    }
    gct_table_print(stdout, &s, 2, w->a->color);
    gct_table_free(&s);
}

/* Each input on its own: its error relative to its gradient, a table per
 * input (not with -q). */
static void text_inputs(const sweep_run *w) {
    const sweep_data *d = &w->d;
    printf("\n  each input: max |analytic - numeric| / G, G the input's gradient scale, and the predicted error / "
           "G%s\n\n",
           d->ns > 1 ? " (median over seeds)" : "");
    for (int i = 0; i < d->ni && !w->a->quiet; i++) {
        gct_table ti;
        char head[64];
        snprintf(head, sizeof head, "%s: h", d->input_name[i]);
        curve_table_init(&ti, d, head);
        for (int k = 0; k < d->nk; k++) {
            gct_cell *row = gct_table_row(&ti);
            if (!row) break;
            gct_cell_set(&row[0], GCT_PLAIN, "%.1e", w->grid[k]);
            for (int c = 0; c < d->nc; c++) {
                const best_point *b = &w->bi[c * d->ni + i];
                bool v = d->vanished[c * d->nk + k] > 0;
                put_err_cell(&row[2 * c + 1], b->med[k], v, k == b->k);
                put_pred_cell(&row[2 * c + 2], b->pred[k], v);
            }
        }
        gct_table_print(stdout, &ti, 2, w->a->color);
        gct_table_free(&ti);
        printf("\n");
    }
}

/* Each input's best step against the theory and the measured rule. */
static void text_inputs_best(const sweep_run *w) {
    const sweep_data *d = &w->d;
    gct_table sb;
    gct_table_init(&sb, "llrrrrrr", "curve", "input", "best h", "rel err there", "l", "theory eps^k l",
                   "rule 1.7 cbrt(eps) l", "best / rule");
    for (int c = 0; c < d->nc; c++) {
        const curve_info *ci = &CURVES[d->curve[c]];
        for (int i = 0; i < d->ni; i++) {
            const best_point *b = &w->bi[c * d->ni + i];
            gct_cell *row = gct_table_row(&sb);
            if (!row) break;
            if (i == 0 && c) gct_table_group(&sb);
            gct_cell_set(&row[0], GCT_PLAIN, "%s", i == 0 ? ci->label : "");
            gct_cell_set(&row[1], GCT_PLAIN, "%s", d->input_name[i]);
            if (b->k >= 0) {
                gct_cell_set(&row[2], GCT_GOOD, "%.2e", w->grid[b->k]);
                gct_cell_set(&row[3], GCT_PLAIN, "%.2e", b->med[b->k]);
            } else {
                gct_cell_set(&row[2], GCT_BAD, "none");
            }
            gct_cell_set(&row[4], GCT_PLAIN, "%.3g", b->l);
            gct_cell_set(&row[5], GCT_PLAIN, "%.2e", theory_h(ci, b->l));
            if (!ci->forward) {
                gct_cell_set(&row[6], GCT_PLAIN, "%.2e", SWEEP_RULE * theory_h(ci, b->l));
                if (b->k >= 0)
                    gct_cell_set(&row[7], GCT_PLAIN, "%.2f", w->grid[b->k] / (SWEEP_RULE * theory_h(ci, b->l)));
            }
        }
    }
    gct_table_print(stdout, &sb, 2, w->a->color);
    gct_table_free(&sb);
}

static void print_text(const sweep_run *w) {
    text_header(w);
    text_errors(w);
    text_best(w);
    text_inputs(w);
    text_inputs_best(w);
}

/* ---- the data files, the scripts, the pictures ------------------------------------ */

/* DIR/NAME.dat: h, each curve's error, then each curve's predicted error. */
static tg_status write_all_data(const sweep_run *w) {
    const sweep_data *d = &w->d;
    const char *cols[1 + 2 * SWEEP_CURVES] = {"h"};
    char pcols[SWEEP_CURVES][32];
    for (int c = 0; c < d->nc; c++) {
        cols[1 + c] = CURVES[d->curve[c]].column;
        snprintf(pcols[c], sizeof pcols[c], "%s_pred", CURVES[d->curve[c]].column);
        cols[1 + d->nc + c] = pcols[c];
    }
    tg_plot *pl;
    tg_status st = tg_plot_open(&pl, w->a->out_dir, w->name, 1 + 2 * d->nc, cols);
    for (int k = 0; st == TG_OK && k < d->nk; k++) {
        double row[1 + 2 * SWEEP_CURVES] = {w->grid[k]};
        for (int c = 0; c < d->nc; c++) row[1 + c] = w->best[c].med[k], row[1 + d->nc + c] = w->best[c].pred[k];
        st = tg_plot_row(pl, row);
    }
    if (pl) {
        tg_status st2 = tg_plot_close_data(pl);
        if (st == TG_OK) st = st2;
    }
    return st;
}

/* DIR/NAME_inputs.dat (path): each input's median, 10% and 90% per curve
 * and step. */
static tg_status write_inputs_data(const sweep_run *w, const char *path) {
    const sweep_data *d = &w->d;
    FILE *f = fopen(path, "w");
    if (!f) return TG_ERR_IO;
    fprintf(f, "# h");
    for (int c = 0; c < d->nc; c++)
        for (int i = 0; i < d->ni; i++)
            fprintf(f, " %s_%s_p50 %s_%s_p10 %s_%s_p90", CURVES[d->curve[c]].column, d->input_name[i],
                    CURVES[d->curve[c]].column, d->input_name[i], CURVES[d->curve[c]].column, d->input_name[i]);
    fprintf(f, "\n");
    for (int k = 0; k < d->nk; k++) {
        fprintf(f, "%.6g", w->grid[k]);
        for (int c = 0; c < d->nc; c++)
            for (int i = 0; i < d->ni; i++) {
                const best_point *b = &w->bi[c * d->ni + i];
                fprintf(f, " %.6g %.6g %.6g", b->med[k], b->lo[k], b->hi[k]);
            }
        fprintf(f, "\n");
    }
    return gct_fclose(f) ? TG_OK : TG_ERR_IO;
}

/* A picture's title: "LABEL  SPEC: what", without the quotes gnuplot's
 * strings cannot hold. */
static void plot_title(char *title, size_t size, const sweep_run *w, const char *what) {
    snprintf(title, size, "%s  %s: %s", w->label, w->spec, what);
    for (char *q = title; *q; q++)
        if (*q == '\'') *q = ' ';
}

/* Where write_plot puts a picture's script path and picture name, and
 * whether gnuplot rendered it. */
typedef struct {
    char *gp;
    size_t gp_size;
    char *png;
    size_t png_size;
    bool *rendered;
} plot_out;

/* One picture of the sweep: the script out_dir/NAME{suffix}.gp, written by
 * `script` over NAME{suffix}.dat, titled `what`, then rendered to
 * NAME{suffix}.png unless an earlier render failed (*st). False when the
 * script cannot be written (said on stderr). */
static bool write_plot(const sweep_run *w, const char *suffix, const char *what,
                       bool (*script)(const char *, const char *, const char *, const char *, const sweep_data *,
                                      const best_point *),
                       const best_point *best, plot_out out, tg_status *st, char *msg, size_t msg_size) {
    char dat[300], title[512];
    snprintf(dat, sizeof dat, "%s%s.dat", w->name, suffix);
    snprintf(out.png, out.png_size, "%s%s.png", w->name, suffix);
    snprintf(out.gp, out.gp_size, "%s/%s%s.gp", w->a->out_dir, w->name, suffix);
    plot_title(title, sizeof title, w, what);
    if (!script(out.gp, out.png, dat, title, &w->d, best)) {
        fprintf(stderr, "tapegrad-gradcheck: cannot write %s\n", out.gp);
        return false;
    }
    if (*st == TG_OK) *st = tg_plot_render(out.gp, out.rendered, msg, msg_size);
    return true;
}

/* Writes the data files and both scripts and renders them (a note on
 * what was written in text). Returns the exit status. */
static int write_files(const sweep_run *w) {
    const gct_args *a = w->a;
    const char *name = w->name;
    char path[4096], gp[4096], png[256], gp2[4096], png2[300];
    snprintf(path, sizeof path, "%s/%s_inputs.dat", a->out_dir, name);
    tg_status st = write_all_data(w);
    if (st == TG_OK) st = write_inputs_data(w, path);
    if (st != TG_OK) {
        fprintf(stderr, "tapegrad-gradcheck: cannot write %s/%s.dat or %s: %s\n", a->out_dir, name, path,
                tg_status_name(st));
        return GCT_EXIT_ERROR;
    }
    bool rendered = false, rendered2 = false;
    char msg[512] = "";
    const plot_out errors = {gp, sizeof gp, png, sizeof png, &rendered},
                   inputs = {gp2, sizeof gp2, png2, sizeof png2, &rendered2};
    if (!write_plot(w, "", "finite-difference error vs step h", write_script, w->best, errors, &st, msg, sizeof msg) ||
        !write_plot(w, "_inputs", "the error of each input relative to its gradient", write_inputs_script, w->bi,
                    inputs, &st, msg, sizeof msg))
        return GCT_EXIT_ERROR;
    if (a->format == GCT_TEXT) {
        printf("\nwrote %s/%s.dat, %s_inputs.dat, %s and %s", a->out_dir, name, name, gp, gp2);
        if (rendered && rendered2) printf(" and the pictures %s, %s\n", png, png2);
        else printf("\n%s\n", msg);
    }
    return st == TG_OK ? GCT_EXIT_PASS : GCT_EXIT_ERROR;
}

int gct_cmd_sweep(const gct_args *a) {
    static sweep_run w;
    if (a->mode == TG_GRADCHECK_FAST)
        return gct_usage_error("sweep draws a curve per input; --mode fast has one comparison for all inputs "
                               "(use --mode directional)");
    memset(&w, 0, sizeof w);
    w.a = a;
    tg_ctx *ctx;
    int status = gct_begin(a, &w.op, &w.bug, &ctx);
    if (status >= 0) return status;
    const double t_start = gct_now();
    if (!sweep_setup(&w)) {
        fprintf(stderr, "tapegrad-gradcheck: out of memory\n");
        status = GCT_EXIT_ERROR;
    } else {
        status = measure(ctx, a, w.op, w.bug, &w.d, w.spec, w.label, w.function, &w.numel);
    }
    tg_ctx_free(ctx);
    if (status < 0) {
        sweep_summarize(&w);
        if (a->format == GCT_JSON) print_json(&w, t_start);
        else if (a->format == GCT_CSV) print_csv(&w);
        else print_text(&w);
        status = write_files(&w);
    }
    sweep_free(&w);
    return status;
}

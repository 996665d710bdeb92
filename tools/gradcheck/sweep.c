/* `tapegrad-gradcheck sweep NAME`: the error of the finite-difference
 * gradient as the step h goes from 1e-1 to 1e-12 (four steps a decade),
 * for forward and central differences in float32 and float64.
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
 *   forward  h* ~ sqrt(eps)     1.5e-8 (float64)   3.5e-4 (float32)
 *   central  h* ~ cbrt(eps)     6.1e-6 (float64)   4.9e-3 (float32)
 * (eps = 2^-52 or 2^-23, up to factors of the function's derivatives).
 * Writes DIR/sweep_NAME.dat (h and the four errors), DIR/sweep_NAME.gp and
 * renders DIR/sweep_NAME.png; prints the table and the best h of each
 * curve. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "tools/gradcheck/tool.h"

#define SWEEP_PER_DECADE 4
#define SWEEP_N (11 * SWEEP_PER_DECADE + 1) /* 1e-1 .. 1e-12 */
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

/* The step of row k: 10^-(1 + k / SWEEP_PER_DECADE). */
static double sweep_h(int k) { return pow(10.0, -(double)(SWEEP_PER_DECADE + k) / SWEEP_PER_DECADE); }

/* The theory's optimal step for a curve: cbrt(eps) central, sqrt(eps)
 * forward. */
static double theory_h(const curve_info *c) {
    double eps = c->dtype == TG_F64 ? DBL_EPSILON : FLT_EPSILON;
    return c->forward ? sqrt(eps) : cbrt(eps);
}

/* Writes the gnuplot script: the four curves on log-log axes, the best h of
 * each curve circled and labelled, the theory's h* as dotted lines. */
static bool write_script(const char *gp_path, const char *png, const char *dat, const char *title,
                         const double best_h[SWEEP_CURVES], const double best_e[SWEEP_CURVES]) {
    FILE *f = fopen(gp_path, "w");
    if (!f) return false;
    tg_status st = tg_plot_write_preamble(f, png, 900, 560);
    fprintf(f, "set datafile missing 'NaN'\n");
    fprintf(f, "set title '%s'\n", title);
    fprintf(f, "set xlabel 'step h      (dotted: eps^(1/3) and eps^(1/2) of each dtype, the optimal steps in theory)'\n"
               "set ylabel 'max |analytic - numeric|'\n");
    fprintf(f, "set logscale xy\nset format x '%%.0e'\nset format y '%%.0e'\n");
    fprintf(f, "set xrange [5e-13:2e-1]\nset offsets 0, 0, graph 0.06, graph 0.04\nset grid\n"
               "set key bottom left box opaque\n");
    for (int c = 0; c < SWEEP_CURVES; c++)
        fprintf(f, "set arrow from %.6g, graph 0 to %.6g, graph 1 nohead dt 3 lc rgb '%s'\n", theory_h(&CURVES[c]),
                theory_h(&CURVES[c]), CURVES[c].color);
    fprintf(f, "$best << EOD\n");
    for (int c = 0; c < SWEEP_CURVES; c++)
        if (isfinite(best_e[c])) fprintf(f, "%.6g %.6g \"h=%.1e\" %d\n", best_h[c], best_e[c], best_h[c], c);
    fprintf(f, "EOD\n");
    fprintf(f, "plot ");
    for (int c = 0; c < SWEEP_CURVES; c++)
        fprintf(f, "'%s' using 1:%d with linespoints lw 2 dt %d pt 7 ps 0.6 lc rgb '%s' title '%s', \\\n     ", dat,
                c + 2, CURVES[c].dash, CURVES[c].color, CURVES[c].label);
    fprintf(f, "$best using 1:2 with points pt 6 ps 2.6 lw 2 lc rgb 'black' title 'best h', \\\n"
               "     $best using 1:2:3 with labels offset 0,1.5 font ',9' notitle\n");
    return gct_fclose(f) && st == TG_OK;
}

int gct_cmd_sweep(const gct_args *a) {
    const tg_op_info *op;
    const gct_bug *bug;
    tg_ctx *ctx;
    int status = gct_begin(a, &op, &bug, &ctx);
    if (status >= 0) return status;
    double err[SWEEP_CURVES][SWEEP_N];
    char spec[128] = "", label[160] = "", function[160] = "";
    int64_t numel = 0;
    for (int c = 0; c < SWEEP_CURVES; c++) {
        for (int k = 0; k < SWEEP_N; k++) {
            gct_target t;
            tg_ctx_reset(ctx);
            tg_rng_seed(ctx, a->seed); /* the same inputs (rounded to the dtype) for every h */
            if (!gct_target_build(ctx, op, bug, a->shape, CURVES[c].dtype, &t)) {
                int st = gct_build_failed(ctx);
                tg_ctx_free(ctx);
                return st;
            }
            snprintf(spec, sizeof spec, "%s", t.c.spec);
            snprintf(label, sizeof label, "%s", t.label);
            snprintf(function, sizeof function, "%s", t.function);
            numel = gct_target_numel(&t);
            tg_gradcheck_opts o = gct_target_opts(&t, a);
            o.h = sweep_h(k);
            o.forward_diff = CURVES[c].forward;
            tg_gradcheck_result r;
            gct_target_check(ctx, &t, &o, &r);
            if (!tg_ok(ctx)) {
                fprintf(stderr, "tapegrad-gradcheck: sweep %s, h=%g: %s\n", label, o.h, tg_error_message(ctx));
                tg_ctx_free(ctx);
                return GCT_EXIT_ERROR;
            }
            err[c][k] = r.max_abs_err;
        }
    }
    tg_ctx_free(ctx);

    double best_h[SWEEP_CURVES], best_e[SWEEP_CURVES];
    int best_k[SWEEP_CURVES];
    for (int c = 0; c < SWEEP_CURVES; c++) {
        best_k[c] = -1;
        best_e[c] = INFINITY;
        best_h[c] = NAN;
        for (int k = 0; k < SWEEP_N; k++)
            if (isfinite(err[c][k]) && err[c][k] < best_e[c]) {
                best_e[c] = err[c][k];
                best_k[c] = k;
                best_h[c] = sweep_h(k);
            }
    }

    /* the table */
    gct_put_title(a, op, bug, function);
    printf("  spec %s: %lld elements checked, %s\n", spec, (long long)numel,
           a->mode == TG_GRADCHECK_FULL ? "every element" : "one random direction per input");
    printf("  error = max |analytic - numeric| over the checked elements; * marks each column's minimum\n\n");
    gct_table t;
    gct_table_init(&t, "rrrrr", "h", CURVES[0].label, CURVES[1].label, CURVES[2].label, CURVES[3].label);
    bool vanished = false;
    for (int k = 0; k < SWEEP_N; k++) {
        gct_cell *row = gct_table_row(&t);
        if (!row) break;
        gct_cell_set(&row[0], GCT_PLAIN, "%.1e", sweep_h(k));
        for (int c = 0; c < SWEEP_CURVES; c++) {
            double e = err[c][k];
            if (isnan(e)) {
                gct_cell_set(&row[c + 1], GCT_DIM, "-  ");
                vanished = true;
            } else if (k == best_k[c]) {
                gct_cell_set(&row[c + 1], GCT_GOOD, "%.2e *", e);
            } else {
                gct_cell_set(&row[c + 1], GCT_PLAIN, "%.2e  ", e);
            }
        }
    }
    gct_table_print(stdout, &t, 2, a->color);
    gct_table_free(&t);
    if (vanished) printf("  -: no result; the step vanished (x + h rounds to x for some element, 0/0)\n");

    printf("\n");
    gct_table s;
    gct_table_init(&s, "lrrrl", "curve", "best h", "error there", "theory h*", "theory");
    for (int c = 0; c < SWEEP_CURVES; c++) {
        gct_cell *row = gct_table_row(&s);
        if (!row) break;
        gct_cell_set(&row[0], GCT_PLAIN, "%s", CURVES[c].label);
        if (best_k[c] >= 0) {
            gct_cell_set(&row[1], GCT_GOOD, "%.1e", best_h[c]);
            gct_cell_set(&row[2], GCT_PLAIN, "%.2e", best_e[c]);
        } else {
            gct_cell_set(&row[1], GCT_BAD, "none");
        }
        gct_cell_set(&row[3], GCT_PLAIN, "%.1e", theory_h(&CURVES[c]));
        gct_cell_set(&row[4], GCT_DIM, "%s of %s = %.2e", CURVES[c].forward ? "eps^(1/2)" : "eps^(1/3)",
                     CURVES[c].dtype == TG_F64 ? "float64" : "float32",
                     CURVES[c].dtype == TG_F64 ? DBL_EPSILON : FLT_EPSILON);
    }
    gct_table_print(stdout, &s, 2, a->color);
    gct_table_free(&s);

    /* the data file, the script, the picture */
    char name[200], gp[4096], png[256], dat[256], title[512];
    snprintf(name, sizeof name, "sweep_%s", bug ? bug->name : op->name);
    const char *cols[1 + SWEEP_CURVES] = {"h", CURVES[0].column, CURVES[1].column, CURVES[2].column, CURVES[3].column};
    tg_plot *p;
    tg_status st = tg_plot_open(&p, a->out_dir, name, 1 + SWEEP_CURVES, cols);
    for (int k = 0; st == TG_OK && k < SWEEP_N; k++) {
        double row[1 + SWEEP_CURVES] = {sweep_h(k), err[0][k], err[1][k], err[2][k], err[3][k]};
        st = tg_plot_row(p, row);
    }
    if (p) {
        tg_status st2 = tg_plot_close_data(p);
        if (st == TG_OK) st = st2;
    }
    if (st != TG_OK) {
        fprintf(stderr, "tapegrad-gradcheck: cannot write %s/%s.dat: %s\n", a->out_dir, name, tg_status_name(st));
        return GCT_EXIT_ERROR;
    }
    snprintf(dat, sizeof dat, "%s.dat", name);
    snprintf(png, sizeof png, "%s.png", name);
    snprintf(gp, sizeof gp, "%s/%s.gp", a->out_dir, name);
    snprintf(title, sizeof title, "%s  %s: finite-difference error vs step h", label, spec);
    if (!write_script(gp, png, dat, title, best_h, best_e)) {
        fprintf(stderr, "tapegrad-gradcheck: cannot write %s\n", gp);
        return GCT_EXIT_ERROR;
    }
    bool rendered = false;
    char msg[512] = "";
    st = tg_plot_render(gp, &rendered, msg, sizeof msg);
    printf("\nwrote %s/%s.dat, %s", a->out_dir, name, gp);
    if (rendered) printf(" and %s/%s\n", a->out_dir, png);
    else printf("\n%s\n", msg);
    return st == TG_OK ? GCT_EXIT_PASS : GCT_EXIT_ERROR;
}

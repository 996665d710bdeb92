/* The heatmap pictures of tapegrad-gradcheck: matrices side by side, each
 * panel with its own title, panels of one colour group on one symmetric
 * colour range (jacobian's Jacobians and their difference; the projection
 * view's parts). The data go to DIR/NAME.dat, the gnuplot script to
 * DIR/NAME.gp (rendered by the caller with tg_plot_render).
 *
 * Layer: report (tool.h): calls the base. */
#include <math.h>
#include <stdio.h>

#include "tools/gradcheck/tool.h"

bool gct_write_heatmaps(const char *dir, const char *name, const char *title, const char *xname, int64_t M, int64_t N,
                        int n, const gct_heatmap *maps) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.dat", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) return false;
    double range[GCT_MAX_HEATMAPS] = {0}; /* per colour group: max |entry| */
    for (int b = 0; b < n; b++) {
        fprintf(f, "%s# %s: %lld rows (output elements) x %lld columns (elements of %s)\n", b ? "\n\n" : "",
                maps[b].title, (long long)M, (long long)N, xname);
        for (int64_t j = 0; j < M; j++) {
            for (int64_t i = 0; i < N; i++) {
                double val = maps[b].mat[j * N + i];
                fprintf(f, "%s%.10g", i ? " " : "", val);
                if (isfinite(val)) range[maps[b].group] = fmax(range[maps[b].group], fabs(val));
            }
            fputc('\n', f);
        }
    }
    if (!gct_fclose(f)) return false;

    snprintf(path, sizeof path, "%s/%s.gp", dir, name);
    f = fopen(path, "w");
    if (!f) return false;
    char png[300];
    snprintf(png, sizeof png, "%s.png", name);
    tg_status st = tg_plot_write_preamble(f, png, 450 * n, 470);
    fprintf(f, "set multiplot layout 1,%d title '%s'\n", n, title);
    fprintf(f, "set palette defined (-1 '#2166ac', 0 '#f7f7f7', 1 '#b2182b')\n");
    fprintf(f, "set xrange [-0.5:%lld.5]\nset yrange [%lld.5:-0.5]\n", (long long)N - 1, (long long)M - 1);
    fprintf(f, "set xlabel 'element of %s (flat index i)'\nset ylabel 'output element (flat index j)'\n", xname);
    if (N <= 24) fprintf(f, "set xtics 1\n");
    if (M <= 24) fprintf(f, "set ytics 1\n");
    fprintf(f, "set tics out nomirror\nset size ratio %g\n", M == 1 ? 0.15 : fmin(2.0, (double)M / (double)N));
    for (int b = 0; b < n; b++) {
        double m = range[maps[b].group] > 0 ? range[maps[b].group] : 1;
        fprintf(f, "set cbrange [%.6g:%.6g]\n", -m, m);
        fprintf(f, "set format cb '%s'\n", maps[b].exp_format ? "%.0e" : "% h");
        fprintf(f, "set title '%s'\n", maps[b].title);
        fprintf(f, "plot '%s.dat' index %d matrix with image notitle\n", name, b);
    }
    fprintf(f, "unset multiplot\n");
    return gct_fclose(f) && st == TG_OK;
}

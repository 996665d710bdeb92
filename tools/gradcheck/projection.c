/* The projection view of `jacobian` (docs/normalization-gradients.md,
 * section 5): for rmsnorm or layernorm with affine=0 and the input x, each
 * row's block of the numeric Jacobian is
 *   RMSNorm    J = r (I - xhat xhat^T / C)
 *   LayerNorm  J = r (I - 1 1^T / C - xhat xhat^T / C)
 * a projection scaled by r. This prints, per row, its eigenvalues (r with
 * multiplicity C - 1 and ~0 for RMSNorm; r with multiplicity C - 2 and two
 * ~0 for LayerNorm: the removed directions keep r eps / (stat + eps)),
 * checks J^2 = r J (exact at eps = 0; otherwise J^2 - r J is
 * -r^2 eps / (stat + eps) xhat xhat^T / C), and the parts r I, - r xhat
 * xhat^T / C and - r 1 1^T / C, built from x alone: how well they add up
 * to the numeric J per row, and over every entry to the analytic J
 * (rounding) and the numeric J (the differences' error); drawn as heatmaps
 * beside their sum (DIR/jacobian_NAME_x_parts.png).
 *
 * Layer: analysis (tool.h): called by jacobian.c; calls plot.c and the base. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tools/gradcheck/tool.h"

/* Eigenvalues of the symmetric n x n matrix a (destroyed) by cyclic Jacobi
 * rotations, into w, ascending. */
static void sym_eigenvalues(double *a, int64_t n, double *w) {
    for (int sweep = 0; sweep < 100; sweep++) {
        double off = 0;
        for (int64_t p = 0; p < n; p++)
            for (int64_t q = p + 1; q < n; q++) off += a[p * n + q] * a[p * n + q];
        if (off < 1e-30) break;
        for (int64_t p = 0; p < n; p++)
            for (int64_t q = p + 1; q < n; q++) {
                double apq = a[p * n + q];
                if (fabs(apq) < 1e-300) continue;
                double theta = (a[q * n + q] - a[p * n + p]) / (2 * apq);
                double t = (theta >= 0 ? 1 : -1) / (fabs(theta) + sqrt(theta * theta + 1));
                double c = 1 / sqrt(t * t + 1), s = t * c;
                for (int64_t k = 0; k < n; k++) { /* columns p, q */
                    double akp = a[k * n + p], akq = a[k * n + q];
                    a[k * n + p] = c * akp - s * akq;
                    a[k * n + q] = s * akp + c * akq;
                }
                for (int64_t k = 0; k < n; k++) { /* rows p, q */
                    double apk = a[p * n + k], aqk = a[q * n + k];
                    a[p * n + k] = c * apk - s * aqk;
                    a[q * n + k] = s * apk + c * aqk;
                }
            }
    }
    for (int64_t i = 0; i < n; i++) w[i] = a[i * n + i];
    for (int64_t i = 1; i < n; i++) /* insertion sort, ascending */
        for (int64_t j = i; j > 0 && w[j] < w[j - 1]; j--) {
            double tmp = w[j];
            w[j] = w[j - 1];
            w[j - 1] = tmp;
        }
}

/* The parts of the Jacobian of x, block-diagonal over the R rows (K = R C
 * entries a side): part[0] = r I, part[1] = - r xhat xhat^T / C, part[2] =
 * - r 1 1^T / C (LayerNorm), with each row's r and xhat from x alone; xh:
 * scratch of C values. */
static void build_parts(tg_ctx *ctx, const tg_tensor *x, bool ln, double eps, int64_t R, int64_t C, double *xh,
                        double *part[3]) {
    int64_t K = R * C;
    for (int p = 0; p < (ln ? 3 : 2); p++) memset(part[p], 0, (size_t)(K * K) * sizeof *part[p]);
    for (int64_t n = 0; n < R; n++) {
        double mu = 0, st = 0;
        for (int64_t j = 0; j < C; j++) mu += ln ? tg_get_flat(ctx, x, n * C + j) / (double)C : 0;
        for (int64_t j = 0; j < C; j++) {
            double d = tg_get_flat(ctx, x, n * C + j) - mu;
            st += d * d / (double)C;
        }
        double r = 1 / sqrt(st + eps);
        for (int64_t j = 0; j < C; j++) xh[j] = (tg_get_flat(ctx, x, n * C + j) - mu) * r;
        for (int64_t i = 0; i < C; i++)
            for (int64_t j = 0; j < C; j++) {
                int64_t e = (n * C + i) * K + n * C + j;
                part[0][e] = i == j ? r : 0;
                part[1][e] = -r * xh[i] * xh[j] / (double)C;
                if (ln) part[2][e] = -r / (double)C;
            }
    }
}

/* Long: the rows' eigenvalues and the parts share their scratch; not yet split into steps. */
int gct_projection_view(tg_ctx *ctx, const gct_target *t, int k, const double *ja, const double *jn, const char *dir,
                        const char *name, const char *title, bool print) {
    const char *op = t->op->def->name, *affine = tg_registry_arg(&t->c, "affine"),
               *norm = tg_registry_arg(&t->c, "norm");
    bool ln = !strcmp(op, "layernorm");
    if ((!ln && strcmp(op, "rmsnorm")) || t->bug || k != 0 || !affine || strcmp(affine, "0") || !norm ||
        strcmp(norm, "1"))
        return -1;
    const tg_tensor *x = t->c.inputs[0];
    int64_t C = x->shape[x->ndim - 1], R = x->numel / C, K = x->numel;
    if (C < 2) return -1;
    double eps = strtod(tg_registry_arg(&t->c, "eps"), NULL);
    int np = ln ? 3 : 2;
    double *b = malloc((size_t)(4 * C * C + 3 * C + (np + 1) * K * K) * sizeof *b);
    if (!b) {
        fprintf(stderr, "tapegrad-gradcheck: out of memory\n");
        return GCT_EXIT_ERROR;
    }
    double *sym = b + C * C, *sq = sym + C * C, *parts = sq + C * C, *w = parts + C * C, *xh = w + C, *xr = xh + C;
    double *part[3] = {xr + C, xr + C + K * K, ln ? xr + C + 2 * K * K : NULL}, *sum = xr + C + np * K * K;
    build_parts(ctx, x, ln, eps, R, C, xh, part);
    /* the parts summed, against both Jacobians over every entry */
    double err_a = 0, err_n = 0, jmax = 0;
    for (int64_t e = 0; e < K * K; e++) {
        sum[e] = part[0][e] + part[1][e] + (ln ? part[2][e] : 0);
        err_a = fmax(err_a, fabs(sum[e] - ja[e]));
        err_n = fmax(err_n, fabs(sum[e] - jn[e]));
        jmax = fmax(jmax, fabs(ja[e]));
    }
    if (print)
        printf("\n  projection view (affine=0; normalization-gradients.md, section 5): J = r (I - %sxhat xhat^T / C)\n",
               ln ? "1 1^T / C - " : "");
    for (int64_t n = 0; print && n < R && n < 4; n++) {
        double mu = 0, st = 0;
        for (int64_t j = 0; j < C; j++) xr[j] = tg_get_flat(ctx, x, n * C + j), mu += ln ? xr[j] / (double)C : 0;
        for (int64_t j = 0; j < C; j++) st += (xr[j] - mu) * (xr[j] - mu) / (double)C;
        double r = 1 / sqrt(st + eps);
        for (int64_t j = 0; j < C; j++) xh[j] = (xr[j] - mu) * r;
        double res_sq = 0, res_parts = 0;
        for (int64_t i = 0; i < C; i++)
            for (int64_t j = 0; j < C; j++) {
                b[i * C + j] = jn[(n * C + i) * K + n * C + j];
                parts[i * C + j] = r * ((i == j) - (ln ? 1.0 / (double)C : 0) - xh[i] * xh[j] / (double)C);
                res_parts = fmax(res_parts, fabs(b[i * C + j] - parts[i * C + j]));
            }
        for (int64_t i = 0; i < C; i++)
            for (int64_t j = 0; j < C; j++) {
                double s = 0;
                for (int64_t l = 0; l < C; l++) s += b[i * C + l] * b[l * C + j];
                sq[i * C + j] = s;
                res_sq = fmax(res_sq, fabs(s - r * b[i * C + j]));
                sym[i * C + j] = 0.5 * (b[i * C + j] + b[j * C + i]);
            }
        sym_eigenvalues(sym, C, w);
        double small = r * eps / (st + eps), xh2 = 0;
        for (int64_t j = 0; j < C; j++) xh2 = fmax(xh2, xh[j] * xh[j]);
        int n_r = 0;
        for (int64_t i = 0; i < C; i++) n_r += fabs(w[i] - r) <= 1e-6 * r;
        printf("    row %lld: r = %.6g; eigenvalues", (long long)n, r);
        for (int64_t i = 0; i < C; i++) printf(" %.6g", w[i] + 0.0);
        printf("\n           %d of them r (expected %lld), the rest ~0 (expected r eps / (%s + eps) = %.3g%s)\n", n_r,
               (long long)(C - (ln ? 2 : 1)), ln ? "var" : "mean x^2", small, ln ? ", and 0 along 1" : "");
        printf("           max |J^2 - r J| = %.3g (expected r^2 eps / (%s + eps) max xhat_i^2 / C = %.3g: 0 at eps = "
               "0)\n           the parts r I, - r xhat xhat^T / C%s add up to the numeric J within %.3g\n",
               res_sq, ln ? "var" : "mean x^2", r * small * xh2 / (double)C, ln ? ", - r 1 1^T / C" : "", res_parts);
    }
    if (print && R > 4) printf("    (%lld more rows)\n", (long long)(R - 4));
    if (print)
        printf("  the parts summed, every entry of J (%lld x %lld): max |sum - analytic J| = %.3g (rounding: %.3g x "
               "max |J|), max |sum - numeric J| = %.3g (the differences' own error)\n",
               (long long)K, (long long)K, err_a, jmax > 0 ? err_a / jmax : 0.0, err_n);

    /* the parts as heatmaps, on one colour scale, beside their sum */
    char pname[300], tsum[160];
    snprintf(pname, sizeof pname, "%s_parts", name);
    snprintf(tsum, sizeof tsum, "sum of the parts = J (max |sum - J| = %.1e)", err_a);
    gct_heatmap maps[4] = {{part[0], "r I", 0, false}, {part[1], "- r xhat xhat^T / C", 0, false}};
    int n = 2;
    if (ln) maps[n++] = (gct_heatmap){part[2], "- r 1 1^T / C", 0, false};
    maps[n++] = (gct_heatmap){sum, tsum, 0, false};
    int status = 0;
    if (!gct_write_heatmaps(dir, pname, title, t->c.input_names[0], K, K, n, maps)) {
        fprintf(stderr, "tapegrad-gradcheck: cannot write %s/%s.dat or .gp\n", dir, pname);
        status = GCT_EXIT_ERROR;
    } else {
        char gp[4096], msg[512] = "";
        snprintf(gp, sizeof gp, "%s/%s.gp", dir, pname);
        bool rendered = false;
        if (tg_plot_render(gp, &rendered, msg, sizeof msg) != TG_OK) status = GCT_EXIT_ERROR;
        if (print && rendered)
            printf("  wrote %s/%s.png: the parts as heatmaps, one colour scale (data %s.dat, script %s.gp)\n", dir,
                   pname, pname, pname);
        else if (print) printf("  wrote %s/%s.dat and %s\n  %s\n", dir, pname, gp, msg);
    }
    free(b);
    return status;
}

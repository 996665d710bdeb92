/* `tapegrad-gradcheck explain rmsnorm|layernorm`: the backward of one
 * normalization worked out on numbers the learner chooses, quantity by
 * quantity in the order and the notation of
 * docs/normalization-gradients.md (sections 1-4 and the worked example of
 * section 7), with its invariants checked and dx compared with central
 * differences of L = sum_i dy_i y_i. Everything is float64 and printed to
 * full precision (%.17g where it is an input), so the learner can redo
 * any step.
 *
 *   tapegrad-gradcheck explain rmsnorm --x 1,2,2 --gamma 1,0.5,2 --beta 0.1,0,-0.1 --dy 1,-1,-0.5 --eps 0
 *
 * Rows: --shape NxC splits --x into N rows of C (default one row).
 *
 * Layer: command (tool.h): calls the base (its own arithmetic, no target). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tools/gradcheck/tool.h"

#define EX_MAX 4096 /* most numbers in --x */

/* Parses "1,2,3" into v (at most max numbers); -1 on a bad list. */
static int parse_list(const char *opt, const char *s, double *v, int max) {
    int n = 0;
    const char *p = s;
    while (*p) {
        char *e;
        errno = 0;
        double d = strtod(p, &e);
        if (e == p || errno || !isfinite(d) || n == max || (*e && *e != ',')) {
            gct_usage_error("%s wants finite numbers separated by commas (at most %d), not '%s'", opt, max, s);
            return -1;
        }
        v[n++] = d;
        p = *e ? e + 1 : e;
    }
    if (n == 0) gct_usage_error("%s wants at least one number", opt);
    return n ? n : -1;
}

static void put_vec(const char *name, const double *v, int64_t n, const char *eq) {
    printf("  %-10s =", name);
    for (int64_t i = 0; i < n; i++) printf(" %12.9g", v[i] + 0.0); /* no -0 */
    printf("%s%s\n", eq ? "    " : "", eq ? eq : "");
}

/* y of one row for given x (the forward, for the finite differences) */
static void row_forward(bool ln, const double *x, const double *g, const double *b, int64_t C, double eps, double *y) {
    double mu = 0, ms = 0;
    for (int64_t j = 0; ln && j < C; j++) mu += x[j] / (double)C;
    for (int64_t j = 0; j < C; j++) ms += (x[j] - mu) * (x[j] - mu) / (double)C;
    double r = 1.0 / sqrt(ms + eps);
    for (int64_t j = 0; j < C; j++) y[j] = g[j] * (x[j] - mu) * r + b[j];
}

/* Long: the worked example, in the order of docs/normalization-gradients.md,
 * reads top to bottom; not yet split into steps. */
int gct_cmd_explain(const gct_args *a) {
    bool ln;
    if (!a->name) return gct_usage_error("explain needs rmsnorm or layernorm");
    if (!strcmp(a->name, "rmsnorm")) ln = false;
    else if (!strcmp(a->name, "layernorm")) ln = true;
    else return gct_usage_error("explain takes rmsnorm or layernorm, not '%s'", a->name);
    if (!a->x) return gct_usage_error("explain needs --x (the input, e.g. --x 1,2,2)");
    static double x[EX_MAX], g[EX_MAX], b[EX_MAX], dy[EX_MAX];
    int n = parse_list("--x", a->x, x, EX_MAX);
    if (n < 0) return GCT_EXIT_USAGE;
    int64_t N = 1, C = n;
    if (a->shape) {
        long long rn, rc;
        char tail;
        if (sscanf(a->shape, "%lldx%lld%c", &rn, &rc, &tail) != 2 || rn < 1 || rc < 1 || rn * rc != n)
            return gct_usage_error("--shape for explain is NxC with N*C = %d numbers of --x, not '%s'", n, a->shape);
        N = rn, C = rc;
    }
    if (C < 2) return gct_usage_error("explain wants rows of at least 2 elements (C = %lld)", (long long)C);
    for (int64_t j = 0; j < C; j++) g[j] = 1, b[j] = 0;
    for (int64_t i = 0; i < n; i++) dy[i] = 1;
    struct {
        const char *opt, *text;
        double *v;
        int want;
    } lists[] = {{"--gamma", a->gamma, g, (int)C}, {"--beta", a->beta, b, (int)C}, {"--dy", a->dy, dy, n}};
    for (int k = 0; k < 3; k++) {
        if (!lists[k].text) continue;
        int m = parse_list(lists[k].opt, lists[k].text, lists[k].v, EX_MAX);
        if (m < 0) return GCT_EXIT_USAGE;
        if (m != lists[k].want)
            return gct_usage_error("%s has %d numbers; it wants %d", lists[k].opt, m, lists[k].want);
    }
    double eps = isnan(a->eps) ? 1e-5 : a->eps;
    if (!(eps >= 0)) return gct_usage_error("--eps wants a number >= 0");

    printf("%s backward on your numbers (docs/normalization-gradients.md, %s; float64)\n", ln ? "LayerNorm" : "RMSNorm",
           ln ? "sections 1, 2, 4 and 7" : "sections 1, 2, 3 and 7");
    printf("  inputs, to full precision:\n");
    printf("    eps   = %.17g\n    x     =", eps);
    for (int i = 0; i < n; i++) printf(" %.17g", x[i]);
    printf("\n    gamma =");
    for (int64_t j = 0; j < C; j++) printf(" %.17g", g[j]);
    printf("\n    beta  =");
    for (int64_t j = 0; j < C; j++) printf(" %.17g", b[j]);
    printf("\n    dy    =");
    for (int i = 0; i < n; i++) printf(" %.17g", dy[i]);
    printf("\n");
    bool ok = true, undefined = false;
    for (int64_t row = 0; row < N; row++) {
        const double *xr = x + row * C, *d = dy + row * C;
        double xc[EX_MAX], xh[EX_MAX], y[EX_MAX], u[EX_MAX], dx[EX_MAX], dg[EX_MAX], fd[EX_MAX];
        double mu = 0, ms = 0, mu_u = 0, m = 0;
        for (int64_t j = 0; ln && j < C; j++) mu += xr[j] / (double)C;
        for (int64_t j = 0; j < C; j++) xc[j] = xr[j] - mu, ms += xc[j] * xc[j] / (double)C;
        double r = 1.0 / sqrt(ms + eps);
        for (int64_t j = 0; j < C; j++) {
            xh[j] = xc[j] * r;
            y[j] = g[j] * xh[j] + b[j];
            u[j] = g[j] * d[j];
            mu_u += u[j] / (double)C;
            m += u[j] * xh[j] / (double)C;
        }
        for (int64_t j = 0; j < C; j++) {
            dx[j] = r * (u[j] - (ln ? mu_u : 0) - xh[j] * m);
            dg[j] = d[j] * xh[j];
        }
        printf("\nrow %lld, C = %lld\n  forward:\n", (long long)row, (long long)C);
        put_vec("x", xr, C, NULL);
        if (ln) {
            printf("  %-10s = %.12g    mean_j x_j\n", "mu", mu);
            put_vec("x - mu", xc, C, NULL);
            printf("  %-10s = %.12g    mean_j (x_j - mu)^2\n", "var", ms);
        } else {
            printf("  %-10s = %.12g    mean_j x_j^2\n", "mean x^2", ms);
        }
        printf("  %-10s = %.12g    1 / sqrt(%s + eps)\n", "r", r, ln ? "var" : "mean x^2");
        put_vec("xhat", xh, C, ln ? "(x - mu) r" : "x r");
        put_vec("y", y, C, "gamma xhat + beta");
        printf("  backward:\n");
        put_vec("dy", d, C, NULL);
        put_vec("g", u, C, "gamma dy (the gradient reaching xhat; u in the code)");
        if (ln) printf("  %-10s = %.12g    mean_j g_j\n", "mean g", mu_u);
        printf("  %-10s = %.12g    mean_j (g_j xhat_j)\n", "m", m);
        put_vec("dx", dx, C, ln ? "r (g - mean g - xhat m)" : "r (g - xhat m)");
        put_vec("dgamma", dg, C, "dy xhat (summed over rows)");
        put_vec("dbeta", d, C, "dy (summed over rows)");

        /* central differences of L = sum_i dy_i y_i */
        double h = 1e-6, worst = 0, scale = 0;
        bool nan = !isfinite(r); /* var + eps = 0: r, xhat, y and dx are undefined */
        for (int64_t j = 0; j < C; j++) {
            double xp[EX_MAX], yp[EX_MAX], ym[EX_MAX], lp = 0, lm = 0;
            memcpy(xp, xr, (size_t)C * sizeof *xp);
            xp[j] = xr[j] + h;
            row_forward(ln, xp, g, b, C, eps, yp);
            xp[j] = xr[j] - h;
            row_forward(ln, xp, g, b, C, eps, ym);
            for (int64_t i = 0; i < C; i++) lp += d[i] * yp[i], lm += d[i] * ym[i];
            fd[j] = (lp - lm) / (2 * h);
            nan |= !isfinite(fd[j]) || !isfinite(dx[j]);
            worst = fmax(worst, fabs(fd[j] - dx[j]));
            scale = fmax(scale, fabs(fd[j]));
        }
        put_vec("numeric dx", fd, C, "(L(x + h e_i) - L(x - h e_i)) / 2h, L = sum dy y, h = 1e-6");
        bool agree = !nan && worst <= 1e-7 + 1e-6 * scale;
        if (nan)
            printf("  dx is not a number here: %s, so nothing can be checked%s\n",
                   isfinite(r) ? "a quantity of the row is NaN or infinite"
                               : "r = 1 / sqrt(0) is infinite (the row's statistic plus eps is 0)",
                   eps == 0 ? " -- give eps > 0 (--eps), or a row whose values differ" : "");
        else
            printf("  dx %s central differences (max |difference| %.2e)\n", agree ? "agrees with" : "DIFFERS from",
                   worst);
        ok &= agree || nan;
        undefined |= nan;

        /* the invariants */
        printf("  invariants:\n");
        double sdx = 0, xdx = 0, hdx = 0;
        for (int64_t j = 0; j < C; j++) sdx += dx[j], xdx += xr[j] * dx[j], hdx += xh[j] * dx[j];
        /* J xhat: the change of y along xhat, J[i][j] = dy_i / dx_j from the formula */
        double jx = 0;
        for (int64_t i = 0; i < C; i++) {
            double s = 0;
            for (int64_t j = 0; j < C; j++)
                s += g[i] * r * ((i == j) - (ln ? 1.0 / (double)C : 0) - xh[i] * xh[j] / (double)C) * xh[j];
            jx = fmax(jx, fabs(s));
        }
        if (ln) {
            printf("    sum_i dx_i   = %.3g    (0: shifting a row does not change y)\n", sdx);
            printf("    xhat . dx    = %.3g    (0 when eps = 0: scaling x - mu does not change y)\n", hdx);
        } else {
            printf("    x . dx       = %.3g    (0 when eps = 0: scaling x does not change y)\n", xdx);
        }
        printf("    max |J xhat| = %.3g    (0 when eps = 0: J = diag(gamma) r (I - %sxhat xhat^T / C))\n", jx,
               ln ? "1 1^T / C - " : "");
        /* a NaN invariant holds nothing: undefined, never "holds" */
        double tol = 1e-12 * (1 + scale) * (double)C;
        if (!nan && ln && !(fabs(sdx) <= tol)) ok = false, printf("    sum_i dx_i is not 0: check the inputs\n");
        if (!nan && eps == 0 && !(fabs(ln ? hdx : xdx) <= tol)) ok = false, printf("    the invariant fails\n");
        if (nan) printf("    (not numbers: the invariants cannot hold or fail here)\n");
    }
    if (!ok) printf("\na check failed\n");
    else if (undefined) printf("\ninconclusive: dx is not a number in some row, so it could not be checked\n");
    else printf("\nevery check holds\n");
    return !ok ? GCT_EXIT_WRONG : undefined ? GCT_EXIT_INCONCLUSIVE : GCT_EXIT_PASS;
}

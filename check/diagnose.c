/* Diagnosis of a failed gradient check (tapegrad/check.h:
 * tg_gradcheck_diagnose): what is wrong, read from the structure of the
 * difference D = Ja - Jn of the analytic and numeric Jacobians of one input.
 *
 * Jacobians are J[j][i] = d out_j / d x_i (rows: outputs, columns: input
 * elements). The tests, in order, each a least-squares fit whose residual
 * must be small against |D| (or the check's tolerance):
 *
 *   Ja = 0                 the backward never wrote this input's gradient
 *   Ja = -Jn               a sign flip
 *   Ja = c Jn, c uniform   a wrong factor: c = C or 1/C (sum for mean),
 *                          sqrt(C), 2, ...
 *   Ja = Jn^T              a transposed Jacobian (square only)
 * and when x has the output's shape (..., C) and D lives in the (C x C)
 * blocks of the rows (a normalization: row n of y depends on row n of x):
 *   D_n = -c I             a missing identity term: c dy_i lost from dx_i
 *                          (x used twice, a gradient overwritten)
 *   D_n = a 1^T            constant along each row: a dropped mean term
 *                          (LayerNorm's - mean(u), u = gamma * dy)
 *   D_n = a v^T            v = x_n (RMSNorm) or x_n - mean (LayerNorm): a
 *                          projection term - xhat mean(xhat u) dropped
 *                          (factor -1) or summed instead of averaged (C-1)
 *   Ja_n = s_n Jn_n        a per-row factor: a wrong power of a saved
 *                          statistic (std for rstd: s_n = mean x^2 per row)
 * and for any input, with y the op's output in rows of its last dim:
 *   D = y_i b_i^T per row  the error of dx is (dy_i . y_i) b_i: a
 *                          softmax's row-sum term delta dropped
 *                          (attention: dS = P (dP - delta))
 *
 * The factor of a rank-one term is measured against the matching term of
 * Jn itself (fit on the off-diagonal entries, where the identity part is
 * absent): D = f (that term of Jn). Jn's terms of a normalization are
 * r diag(gamma) 1 1^T / C (mean) and r diag(gamma) xhat xhat^T / C (projection);
 * the fit needs neither gamma nor r nor eps. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/tape.h"
#include "check/registry.h"
#include "tensor/internal.h"

/* The Jacobians of one input and the sizes of its row structure. */
typedef struct jac {
    const double *a, *n; /* (M, K) row-major */
    int64_t M, K;
    const tg_tensor *x; /* the input */
    double noise;       /* an entry of D below this is agreement */
    int64_t C, rows;    /* row structure: rows of C (C 0: none) */
} jac;

static double D(const jac *J, int64_t j, int64_t i) { return J->a[j * J->K + i] - J->n[j * J->K + i]; }

static void say(char *buf, size_t size, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static void say(char *buf, size_t size, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, size, fmt, ap);
    va_end(ap);
}

/* max |v| over n entries */
static double max_abs(const double *v, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) m = fmax(m, fabs(v[i]));
    return m;
}

/* The best c with Ja ~ c Jn over all entries, and the largest residual. */
static double fit_scale(const jac *J, double *resid) {
    double an = 0, nn = 0;
    for (int64_t e = 0; e < J->M * J->K; e++) an += J->a[e] * J->n[e], nn += J->n[e] * J->n[e];
    double c = nn > 0 ? an / nn : 0;
    double r = 0;
    for (int64_t e = 0; e < J->M * J->K; e++) r = fmax(r, fabs(J->a[e] - c * J->n[e]));
    *resid = r;
    return c;
}

/* A factor in words, when it is a simple function of the row size C or of
 * the number of elements: "1/sqrt(C) = 1/sqrt(8)". Empty when none fits. */
static void name_factor(char *buf, size_t size, double c, int64_t C, int64_t K) {
    buf[0] = '\0';
    struct {
        double v;
        const char *fmt;
        int64_t n;
    } cand[] = {
        {(double)C, "C = %lld", C},
        {1.0 / (double)C, "1/C = 1/%lld", C},
        {sqrt((double)C), "sqrt(C) = sqrt(%lld)", C},
        {1.0 / sqrt((double)C), "1/sqrt(C) = 1/sqrt(%lld)", C},
        {(double)K, "numel = %lld", K},
        {1.0 / (double)K, "1/numel = 1/%lld", K},
        {sqrt((double)(C - 1) / (double)C), "sqrt((C-1)/C), C = %lld", C},
        {sqrt((double)C / (double)(C - 1)), "sqrt(C/(C-1)), C = %lld", C},
        {2.0, "2%.0lld", 0},
        {0.5, "1/2%.0lld", 0},
    };
    for (size_t k = 0; k < sizeof cand / sizeof cand[0]; k++) {
        if (C < 2 && k < 8) continue; /* C = 1: every candidate is 1 or infinite */
        if (fabs(c - cand[k].v) <= 1e-3 * fabs(cand[k].v)) {
            say(buf, size, cand[k].fmt, (long long)cand[k].n);
            return;
        }
    }
}

/* Where D is nonzero, over the input's elements: "every element", or the
 * rows and columns (last dim) of x it touches. Returns the count. */
static int64_t locate(const jac *J, char *buf, size_t size) {
    int64_t K = J->K, C = J->x->ndim ? J->x->shape[J->x->ndim - 1] : 1, R = C ? K / C : 0;
    char *rows = calloc((size_t)(R + C + 1), 1);
    if (!rows) {
        say(buf, size, "(out of memory)");
        return 0;
    }
    char *cols = rows + R;
    int64_t n = 0;
    for (int64_t i = 0; i < K; i++) {
        bool bad = false;
        for (int64_t j = 0; j < J->M && !bad; j++) bad = fabs(D(J, j, i)) > J->noise;
        if (!bad) continue;
        n++;
        rows[i / C] = cols[i % C] = 1;
    }
    if (n == K) {
        say(buf, size, "every element's column of the Jacobians (%lld of %lld)", (long long)n, (long long)K);
    } else if (J->x->ndim < 2) {
        size_t l = (size_t)snprintf(buf, size, "%lld of %lld elements:", (long long)n, (long long)K);
        for (int64_t i = 0, shown = 0; i < K && l < size; i++)
            if (cols[i % C] && rows[i / C] && shown++ < 8)
                l += (size_t)snprintf(buf + l, size - l, " %lld", (long long)i);
    } else {
        int64_t nr = 0, nc = 0;
        for (int64_t r = 0; r < R; r++) nr += rows[r];
        for (int64_t c = 0; c < C; c++) nc += cols[c];
        size_t l = (size_t)snprintf(buf, size, "%lld of %lld elements, in rows", (long long)n, (long long)K);
        for (int64_t r = 0, s = 0; r < R && l < size; r++)
            if (rows[r] && s++ < 8) l += (size_t)snprintf(buf + l, size - l, " %lld", (long long)r);
        if (l < size) l += (size_t)snprintf(buf + l, size - l, " (%lld of %lld), columns", (long long)nr, (long long)R);
        for (int64_t c = 0, s = 0; c < C && l < size; c++)
            if (cols[c] && s++ < 8) l += (size_t)snprintf(buf + l, size - l, " %lld", (long long)c);
        if (l < size) snprintf(buf + l, size - l, " (%lld of %lld)", (long long)nc, (long long)C);
    }
    free(rows);
    return n;
}

/* ---- the row structure of a normalization ---------------------------------- */

/* Entry (j, i) of row block n of a Jacobian (j, i in 0..C-1). */
static double blk(const double *m, const jac *J, int64_t n, int64_t j, int64_t i) {
    return m[(n * J->C + j) * J->K + n * J->C + i];
}
static double dblk(const jac *J, int64_t n, int64_t j, int64_t i) {
    return blk(J->a, J, n, j, i) - blk(J->n, J, n, j, i);
}

/* True when D (and Jn) vanish outside the row blocks. */
static bool block_diagonal(const jac *J) {
    for (int64_t j = 0; j < J->M; j++)
        for (int64_t i = 0; i < J->K; i++)
            if (j / J->C != i / J->C && (fabs(D(J, j, i)) > J->noise || fabs(J->n[j * J->K + i]) > J->noise))
                return false;
    return true;
}

/* True when every row block of Jn maps 1 to 0 (shift invariance: the
 * output does not change when a constant is added to a row -- a centred
 * norm, LayerNorm). */
static bool shift_invariant(const jac *J) {
    for (int64_t n = 0; n < J->rows; n++)
        for (int64_t j = 0; j < J->C; j++) {
            double s = 0, m = 0;
            for (int64_t i = 0; i < J->C; i++) s += blk(J->n, J, n, j, i), m = fmax(m, fabs(blk(J->n, J, n, j, i)));
            if (fabs(s) > 1e-4 * m + J->noise) return false;
        }
    return true;
}

/* The row's vector v that a projection term is made of: x_n, or x_n minus
 * its mean when centred; and its mean square (the statistic r is made of,
 * eps aside). */
static double row_vector(const jac *J, int64_t n, bool centred, double *v) {
    double mu = 0, ms = 0;
    for (int64_t i = 0; i < J->C; i++) mu += tg_load(J->x, n * J->C + i) / (double)J->C;
    for (int64_t i = 0; i < J->C; i++) {
        v[i] = tg_load(J->x, n * J->C + i) - (centred ? mu : 0);
        ms += v[i] * v[i] / (double)J->C;
    }
    return ms;
}

/* D_n ~ a b^T with b the given unit-free vector: a_j = <D_n[j], b>/<b, b>;
 * returns the largest residual. */
static double fit_right(const jac *J, int64_t n, const double *b, double *a) {
    double bb = 0, r = 0;
    for (int64_t i = 0; i < J->C; i++) bb += b[i] * b[i];
    for (int64_t j = 0; j < J->C; j++) {
        double s = 0;
        for (int64_t i = 0; i < J->C; i++) s += dblk(J, n, j, i) * b[i];
        a[j] = bb > 0 ? s / bb : 0;
        for (int64_t i = 0; i < J->C; i++) r = fmax(r, fabs(dblk(J, n, j, i) - a[j] * b[i]));
    }
    return r;
}

/* How much of Jn_n is the term a b^T: the lam of
 *   Jn_n[j][i] = delta_j [i == j] + lam a_j b_i + l_j o_i
 * with a diagonal (the identity part) and the other rank-one term of a
 * normalization (o = 1 beside a projection term, o = xhat beside a mean
 * term) free in each row j. Row by row, both are projected out (the
 * complement of span{e_j, o}), and lam is the least-squares fit of what is
 * left. D_n = a b^T is then (1/lam) x that term of Jn. */
static double term_in_jn(const jac *J, int64_t n, const double *a, const double *b, const double *o) {
    int64_t C = J->C;
    double num = 0, den = 0;
    for (int64_t j = 0; j < C; j++) {
        /* u = (o without its j-th entry), normalized */
        double uu = 0;
        for (int64_t i = 0; i < C; i++) uu += i == j ? 0 : o[i] * o[i];
        double pj = 0, pb = 0;
        for (int64_t i = 0; i < C; i++) {
            if (i == j || uu == 0) continue;
            pj += blk(J->n, J, n, j, i) * o[i];
            pb += b[i] * o[i];
        }
        for (int64_t i = 0; i < C; i++) {
            if (i == j) continue;
            double y = blk(J->n, J, n, j, i) - (uu > 0 ? pj / uu * o[i] : 0);
            double q = a[j] * (b[i] - (uu > 0 ? pb / uu * o[i] : 0));
            num += y * q, den += q * q;
        }
    }
    return den > 0 ? num / den : 0;
}

/* Splits Jn_n into its parts Id + P + M: per output j, the off-diagonal
 * entries fitted as c_j v_i (P: the projection term, v the row's (centred)
 * values) plus m_j (M: the mean term, centred norms only); Id is the
 * diagonal that is left. Then fits Ja_n ~ al Id + be P + ga M. False when
 * either fit leaves a residual above tol. */
static bool fit_parts(const jac *J, int64_t n, bool centred, double tol, double *v, double *al, double *be) {
    int64_t C = J->C;
    row_vector(J, n, centred, v);
    /* the three parts, as C x C blocks, built on the heap */
    double *id = calloc((size_t)(3 * C * C), sizeof *id);
    if (!id) return false;
    double *P = id + C * C, *M = P + C * C;
    bool ok = true;
    for (int64_t j = 0; j < C && ok; j++) {
        double vv = 0, v1 = 0, n1 = 0, jv = 0, j1 = 0;
        for (int64_t i = 0; i < C; i++) {
            if (i == j) continue;
            double y = blk(J->n, J, n, j, i);
            vv += v[i] * v[i], v1 += v[i], n1 += 1, jv += y * v[i], j1 += y;
        }
        double c = 0, m = 0, det = vv * n1 - v1 * v1;
        if (centred && fabs(det) > 1e-12 * vv * n1) c = (jv * n1 - j1 * v1) / det, m = (vv * j1 - v1 * jv) / det;
        else if (vv > 0) c = jv / vv;
        for (int64_t i = 0; i < C; i++) {
            P[j * C + i] = c * v[i];
            M[j * C + i] = m;
            if (i != j && fabs(blk(J->n, J, n, j, i) - c * v[i] - m) > tol) ok = false;
        }
        id[j * C + j] = blk(J->n, J, n, j, j) - c * v[j] - m;
    }
    /* Ja_n ~ al Id + be P + ga M: normal equations (3 x 3; 2 x 2 when not
     * centred), solved by Cramer's rule */
    double A[3][3] = {{0}}, rhs[3] = {0}, x[3] = {0};
    const double *B[3] = {id, P, M};
    int k = centred ? 3 : 2;
    for (int64_t e = 0; e < C * C && ok; e++) {
        double y = blk(J->a, J, n, e / C, e % C);
        for (int p = 0; p < k; p++) {
            rhs[p] += B[p][e] * y;
            for (int q = 0; q < k; q++) A[p][q] += B[p][e] * B[q][e];
        }
    }
    if (ok && k == 2) {
        double det = A[0][0] * A[1][1] - A[0][1] * A[1][0];
        ok = fabs(det) > 0;
        if (ok) x[0] = (rhs[0] * A[1][1] - A[0][1] * rhs[1]) / det, x[1] = (A[0][0] * rhs[1] - A[1][0] * rhs[0]) / det;
    } else if (ok) {
        double det = A[0][0] * (A[1][1] * A[2][2] - A[1][2] * A[2][1]) -
                     A[0][1] * (A[1][0] * A[2][2] - A[1][2] * A[2][0]) +
                     A[0][2] * (A[1][0] * A[2][1] - A[1][1] * A[2][0]);
        ok = fabs(det) > 0;
        for (int c = 0; c < 3 && ok; c++) {
            double T[3][3];
            memcpy(T, A, sizeof T);
            for (int r = 0; r < 3; r++) T[r][c] = rhs[r];
            x[c] =
                (T[0][0] * (T[1][1] * T[2][2] - T[1][2] * T[2][1]) - T[0][1] * (T[1][0] * T[2][2] - T[1][2] * T[2][0]) +
                 T[0][2] * (T[1][0] * T[2][1] - T[1][1] * T[2][0])) /
                det;
        }
    }
    for (int64_t e = 0; e < C * C && ok; e++)
        ok = fabs(blk(J->a, J, n, e / C, e % C) - x[0] * id[e] - x[1] * P[e] - x[2] * M[e]) <= tol;
    free(id);
    *al = x[0];
    *be = x[1];
    return ok;
}

/* Ja_n = rho_n Id + rho_n^3 (P + ...): the backward used r rho_n in place
 * of r. Names rho when it is the same in every row, else reads it as a
 * missing eps when (rho_n^2 - 1) mean(x^2)_n is the same in every row. */
static bool diagnose_statistic(const jac *J, bool centred, double tol, double *scratch, tg_gradcheck_diagnosis *d) {
    int64_t C = J->C, R = J->rows;
    double *rho = scratch + C, *ms = rho + R;
    for (int64_t n = 0; n < R; n++) {
        double al, be;
        if (!fit_parts(J, n, centred, tol, scratch, &al, &be)) return false;
        if (!(al > 0) || fabs(be - al * al * al) > 0.02 * fabs(be) + 1e-9) return false;
        rho[n] = al;
        ms[n] = row_vector(J, n, centred, scratch);
    }
    double rmin = rho[0], rmax = rho[0], emin = INFINITY, emax = -INFINITY;
    for (int64_t n = 0; n < R; n++) {
        rmin = fmin(rmin, rho[n]), rmax = fmax(rmax, rho[n]);
        double e = (rho[n] * rho[n] - 1) * ms[n];
        emin = fmin(emin, e), emax = fmax(emax, e);
    }
    const char *stat = centred ? "variance" : "mean x^2";
    d->kind = TG_DIAG_STATISTIC;
    if (rmax - rmin <= 1e-3 * rmax) {
        char named[64];
        name_factor(named, sizeof named, rmin, C, J->K);
        d->factor = rmin;
        say(d->finding, sizeof d->finding,
            "in every row, the identity part of the Jacobian is scaled by %.6g and the projection part by its cube: "
            "the backward uses r x %.6g%s%s%s in place of r",
            rmin, rmin, named[0] ? " (" : "", named, named[0] ? ")" : "");
        if (strstr(named, "(C-1)"))
            say(d->cause, sizeof d->cause,
                "the backward recomputes r from the %s variance (divided by C - 1) where the forward divides by C "
                "(%s)",
                strncmp(named, "sqrt((C-1)", 10) == 0 ? "unbiased" : "biased", named);
        else if (strstr(named, "sqrt(C)"))
            say(d->cause, sizeof d->cause,
                "the backward recomputes r = 1/sqrt(%s) from the %s of squares instead of the %s (%s)", stat,
                strstr(named, "1/") == named ? "sum" : "mean", strstr(named, "1/") == named ? "mean" : "sum", named);
        else
            say(d->cause, sizeof d->cause,
                "the backward uses a wrong r (a stale or recomputed statistic), %.4g x the "
                "saved one",
                rmin);
    } else if (emin > 0 && emax - emin <= 0.02 * emax) {
        d->factor = 0.5 * (emin + emax);
        say(d->finding, sizeof d->finding,
            "the backward uses r x rho_n with rho_n different per row (%.4g .. %.4g) and (rho_n^2 - 1) %s_n = %.4g "
            "in every row: rho_n = sqrt(1 + eps / %s)",
            rmin, rmax, stat, d->factor, stat);
        say(d->cause, sizeof d->cause,
            "a missing eps: the backward computes r = 1/sqrt(%s) without eps (eps = %.4g); the error grows as "
            "eps / %s grows and vanishes at eps -> 0",
            stat, d->factor, stat);
    } else {
        d->factor = NAN;
        say(d->finding, sizeof d->finding, "the backward uses r x rho_n with rho_n different per row (%.4g .. %.4g)",
            rmin, rmax);
        say(d->cause, sizeof d->cause,
            "a wrong per-row statistic r in the backward (stale, recomputed, or of "
            "another row)");
    }
    return true;
}

/* The diagnosis of a normalization-shaped input, or false when no row
 * pattern fits. */
static bool diagnose_rows(const jac *J, tg_gradcheck_diagnosis *d) {
    if (J->C < 2 || !block_diagonal(J)) return false;
    int64_t C = J->C, R = J->rows;
    double *v = calloc((size_t)(5 * C + 3 * R), sizeof *v);
    if (!v) return false;
    double *a = v + C, *one = a + C, *t = one + C, *s = t + C, *ms = s + R + C;
    for (int64_t i = 0; i < C; i++) one[i] = 1;
    bool centred = shift_invariant(J);
    double dmax = 0;
    for (int64_t n = 0; n < R; n++)
        for (int64_t j = 0; j < C; j++)
            for (int64_t i = 0; i < C; i++) dmax = fmax(dmax, fabs(dblk(J, n, j, i)));
    double tol = fmax(0.02 * dmax, J->noise);
    bool found = false;

    /* D_n = -c I: the same c on every diagonal entry, nothing off it */
    bool diag = true;
    double c0 = -dblk(J, 0, 0, 0);
    for (int64_t n = 0; n < R && diag; n++)
        for (int64_t j = 0; j < C && diag; j++)
            for (int64_t i = 0; i < C && diag; i++) diag = fabs(dblk(J, n, j, i) - (i == j ? -c0 : 0)) <= tol;
    if (diag) {
        d->kind = TG_DIAG_IDENTITY;
        d->factor = c0;
        say(d->finding, sizeof d->finding,
            "analytic - numeric = %.6g I in every row: dx_i %s %.6g dy_i, a term of the identity", -c0,
            c0 > 0 ? "lacks" : "has an extra", fabs(c0));
        say(d->cause, sizeof d->cause, "%s",
            fabs(c0 - 1) < 1e-3
                ? "x is used twice (y = op(x) + x, a residual): the gradient of one use was overwritten instead of "
                  "accumulated (dx = ... where dx += ... is needed)"
                : "a missing or extra term proportional to dy in dx (check the diagonal, identity part of the "
                  "derivative)");
        found = true;
    }

    /* D_n = a 1^T (the mean term) or a v^T (the projection term) */
    for (int pass = 0; pass < 2 && !found; pass++) {
        bool fits = true;
        double f = 0;
        int64_t counted = 0;
        for (int64_t n = 0; n < R && fits; n++) {
            row_vector(J, n, centred, t);
            const double *b = pass == 0 ? one : t, *other = pass == 0 ? t : one;
            if (fit_right(J, n, b, a) > tol) fits = false;
            if (max_abs(a, C) <= J->noise) continue; /* this row is right */
            double lam = term_in_jn(J, n, a, b, other);
            if (lam == 0) fits = false;
            else f += 1.0 / lam, counted++;
        }
        if (!fits || !counted) continue;
        f /= (double)counted;
        if (pass == 0) {
            d->kind = TG_DIAG_MEAN_TERM;
            d->factor = f;
            say(d->finding, sizeof d->finding,
                "analytic - numeric is constant along each row of x (rank one, a 1^T per row), %.4g x the mean "
                "term of the true Jacobian",
                f);
            say(d->cause, sizeof d->cause, "%s",
                fabs(f + 1) < 0.02
                    ? "a dropped mean term: dx lacks - mean_j(u_j), u = gamma * dy (LayerNorm's term from the mean "
                      "mu; the mean treated as a constant)"
                    : "a wrong mean term in dx (- mean_j(u_j), u = gamma * dy, LayerNorm's term from the mean mu): "
                      "wrong factor");
        } else {
            d->kind = TG_DIAG_PROJECTION;
            d->factor = f;
            say(d->finding, sizeof d->finding,
                "analytic - numeric is, in each row, a rank-one a xhat^T along the row's %svalues: %.4g x the "
                "projection term -r diag(gamma) xhat xhat^T / C of the true Jacobian",
                centred ? "centred " : "", f);
            if (fabs(f + 1) < 0.02)
                say(d->cause, sizeof d->cause,
                    "the projection term - xhat mean(xhat u) is dropped from dx: the statistic %s treated as a "
                    "constant (its derivative through x forgotten)",
                    centred ? "rstd (of the variance)" : "r = rstd");
            else if (fabs(f - (double)(C - 1)) < 0.02 * (double)C)
                say(d->cause, sizeof d->cause,
                    "m = mean(xhat u) summed instead of averaged (x C): the term is C times too big, D = (C - 1) x "
                    "the term, C = %lld",
                    (long long)C);
            else
                say(d->cause, sizeof d->cause, "the projection term - xhat mean(xhat u) has a wrong factor (%.4g x)",
                    f + 1);
        }
        found = true;
    }

    /* Ja_n = rho_n Id + rho_n^3 P: a wrong r */
    if (!found) found = diagnose_statistic(J, centred, tol, v, d);

    /* Ja_n = s_n Jn_n, s_n varying per row */
    if (!found) {
        bool fits = true;
        for (int64_t n = 0; n < R && fits; n++) {
            double an = 0, nn = 0;
            for (int64_t j = 0; j < C; j++)
                for (int64_t i = 0; i < C; i++)
                    an += blk(J->a, J, n, j, i) * blk(J->n, J, n, j, i),
                        nn += blk(J->n, J, n, j, i) * blk(J->n, J, n, j, i);
            s[n] = nn > 0 ? an / nn : 0;
            for (int64_t j = 0; j < C && fits; j++)
                for (int64_t i = 0; i < C && fits; i++)
                    fits = fabs(blk(J->a, J, n, j, i) - s[n] * blk(J->n, J, n, j, i)) <= tol;
            ms[n] = row_vector(J, n, centred, t);
        }
        if (fits && R >= 2) {
            /* s_n against the row's mean square (variance): s = k ms^p */
            double sx = 0, sy = 0, sxx = 0, sxy = 0;
            int64_t m = 0;
            for (int64_t n = 0; n < R; n++) {
                if (!(s[n] > 0) || !(ms[n] > 0)) continue;
                double lx = log(ms[n]), ly = log(s[n]);
                sx += lx, sy += ly, sxx += lx * lx, sxy += lx * ly, m++;
            }
            double den = (double)m * sxx - sx * sx;
            double p = m >= 2 && den > 1e-12 ? ((double)m * sxy - sx * sy) / den : NAN;
            d->kind = TG_DIAG_ROW_SCALE;
            d->factor = p;
            size_t l = (size_t)snprintf(d->finding, sizeof d->finding, "analytic = numeric x a factor per row of x:");
            for (int64_t n = 0; n < R && n < 6 && l < sizeof d->finding; n++)
                l += (size_t)snprintf(d->finding + l, sizeof d->finding - l, " %.4g", s[n]);
            if (l < sizeof d->finding)
                snprintf(d->finding + l, sizeof d->finding - l, "%s; ~ (mean %s)^%.2f", R > 6 ? " ..." : "",
                         centred ? "variance" : "x^2", p);
            if (fabs(p - 1) < 0.1)
                say(d->cause, sizeof d->cause,
                    "dx is scaled by 1/r^2 = mean %s + eps per row: std used where rstd belongs (or r divided out "
                    "twice)",
                    centred ? "variance" : "x^2");
            else if (fabs(p + 1) < 0.1)
                say(d->cause, sizeof d->cause, "dx is scaled by r^2 per row: rstd applied twice (r^3 where r belongs)");
            else if (fabs(p - 0.5) < 0.1)
                say(d->cause, sizeof d->cause, "dx is scaled by 1/r per row: a missing factor rstd");
            else if (fabs(p + 0.5) < 0.1)
                say(d->cause, sizeof d->cause, "dx is scaled by r per row: an extra factor rstd");
            else
                say(d->cause, sizeof d->cause,
                    "a wrong scale by a per-row statistic (a stale or recomputed rstd; a missing eps when the "
                    "factor shrinks as mean x^2 grows)");
            found = true;
        }
    }
    free(v);
    return found;
}

/* ---- linearity in dy ------------------------------------------------------------ */

/* f run as the check runs it: on copies of the inputs (xs), a private
 * tape, from the same RNG state, grad on or off; sandbox_leave puts the
 * context back. */
typedef struct sandbox {
    tg_tape saved;
    uint64_t seed, offset;
    bool was;
} sandbox;

static tg_tensor *sandbox_run(tg_ctx *ctx, sandbox *s, bool grad, tg_gradcheck_fn f, void *user, int n,
                              tg_tensor *const *inputs, int k, tg_tensor **xs) {
    tg_rng_state(ctx, &s->seed, &s->offset);
    tg_tape_stash(ctx, &s->saved);
    s->was = tg_set_grad_enabled(ctx, grad);
    for (int i = 0; i < n; i++) xs[i] = tg_copy(ctx, inputs[i]);
    if (k >= 0 && tg_ok(ctx)) tg_requires_grad(ctx, xs[k]);
    return tg_ok(ctx) ? f(ctx, xs, user) : NULL;
}

static void sandbox_leave(tg_ctx *ctx, sandbox *s) {
    tg_set_grad_enabled(ctx, s->was);
    tg_tape_restore(ctx, &s->saved);
    tg_rng_set_state(ctx, s->seed, s->offset);
}

/* The backward of f seeded with the weighting r (M values), run as the
 * check runs it (sandbox_run), into g (numel of input k). False on an
 * error. */
static bool backward_with(tg_ctx *ctx, tg_gradcheck_fn f, void *user, int n, tg_tensor *const *inputs, int k,
                          const double *r, int64_t M, double *g) {
    sandbox s;
    tg_tensor *xs[TG_GRADCHECK_MAX_INPUTS];
    tg_tensor *y = sandbox_run(ctx, &s, true, f, user, n, inputs, k, xs);
    bool ok = y && y->numel == M;
    if (ok && y->requires_grad) {
        tg_tensor *u = tg_new_like(ctx, "tg_gradcheck_diagnose", y), *gx = NULL;
        for (int64_t j = 0; u && j < M; j++) tg_store(u, j, r[j]);
        ok = u && tg_grad(ctx, y, u, 1, &xs[k], &gx, false);
        for (int64_t i = 0; ok && i < xs[k]->numel; i++) g[i] = gx ? tg_load(gx, i) : 0.0;
    } else if (ok) {
        memset(g, 0, (size_t)xs[k]->numel * sizeof *g);
    }
    sandbox_leave(ctx, &s);
    return ok && tg_ok(ctx);
}

/* Whether the backward is linear in the gradient it receives, dy: the
 * Jacobian read row by row from unit dy (e_j) describes what a check with
 * a weighting r sees only if backward(r) = sum_j r_j backward(e_j). A
 * backward that ignores dy (dx = J^T 1 whatever dy) gives every row the
 * same, and a Jacobian read that way can even agree with the numeric one
 * while the check, with its random r, fails. So: backward(r) against Ja^T
 * r, and backward(2 r) against backward(r). True with d filled when the
 * backward is not linear (d->kind set); false when it is, or on an error
 * (*err set). */
static bool diagnose_dy(tg_ctx *ctx, tg_gradcheck_fn f, void *user, int n, tg_tensor *const *inputs, int k,
                        const tg_gradcheck_opts *o, const jac *J, tg_gradcheck_diagnosis *d, bool *err) {
    int64_t M = J->M, K = J->K;
    double *r = calloc((size_t)(2 * M + 4 * K + 2), sizeof *r);
    *err = false;
    if (!r) return false;
    double *r2 = r + M, *ga = r2 + M, *g2 = ga + K, *gJ = g2 + K, *g1 = gJ + K;
    for (int64_t j = 0; j < M; j++) {
        r[j] = o->r.data && o->r.numel == M ? o->r.data[j] : tg_gradcheck_weight(o->seed, j);
        r2[j] = 2 * r[j];
    }
    if (!backward_with(ctx, f, user, n, inputs, k, r, M, ga) || !backward_with(ctx, f, user, n, inputs, k, r2, M, g2)) {
        free(r);
        *err = true;
        return false;
    }
    /* the scale of the terms, and what rounding allows between the two
     * ways of forming the same sum */
    double scale = 0, lin = 0, same = 0, dbl = 0, ones = 0, gmax = 0, rsum = 0;
    for (int64_t j = 0; j < M; j++) rsum += fabs(r[j]);
    int64_t wrong = 0; /* elements of backward(r) off Jn^T r, as the check counts them */
    for (int64_t i = 0; i < K; i++) {
        double t = 0, s = 0, s1 = 0, sn = 0;
        for (int64_t j = 0; j < M; j++) {
            t += fabs(r[j] * J->a[j * K + i]);
            s += r[j] * J->a[j * K + i];
            s1 += J->n[j * K + i];
            sn += r[j] * J->n[j * K + i];
        }
        wrong += fabs(ga[i] - sn) > J->noise * fmax(rsum, 1.0);
        gJ[i] = s;
        g1[i] = s1;
        scale = fmax(scale, fmax(t, fabs(ga[i])));
        gmax = fmax(gmax, fabs(ga[i]));
    }
    double eps = J->x->dtype == TG_F32 ? 1.2e-7 : 2.3e-16, tol = 64 * eps * sqrt((double)M + 1) * scale;
    for (int64_t i = 0; i < K; i++) {
        lin = fmax(lin, fabs(ga[i] - gJ[i]));
        same = fmax(same, fabs(g2[i] - ga[i]));
        dbl = fmax(dbl, fabs(g2[i] - 2 * ga[i]));
        ones = fmax(ones, fabs(ga[i] - g1[i]));
    }
    free(r);
    if (!(lin > tol) && !(dbl > tol)) return false; /* linear in dy */
    d->max_diff = fmax(lin, dbl);
    d->n_wrong = wrong;
    if (!(same > tol) && gmax > tol) {
        d->kind = TG_DIAG_IGNORES_DY;
        say(d->finding, sizeof d->finding,
            "dx does not change when dy is doubled (max |dx(2 dy) - dx(dy)| %.2g against |dx| up to %.3g)%s", same,
            gmax, ones <= fmax(tol, 1e-6 * gmax) ? ": it is J^T 1, the gradient of sum(y), whatever dy" : "");
        say(d->cause, sizeof d->cause,
            "the backward ignores the incoming gradient: it computes d(sum y)/dx, as if dy were all ones, instead of "
            "multiplying by dy (grad_output) -- dx = J^T 1 where J^T dy belongs");
    } else {
        d->kind = TG_DIAG_NONLINEAR;
        say(d->finding, sizeof d->finding,
            "dx is not linear in dy: dx(2 dy) - 2 dx(dy) is up to %.3g, and dx(dy) differs from the sum of "
            "its rows dy_j dx(e_j) by up to %.3g",
            dbl, lin);
        say(d->cause, sizeof d->cause,
            "the backward uses dy other than linearly: a term that does not scale with dy (a constant or a leftover "
            "gradient added in), dy squared or its absolute value, or state kept from an earlier call");
    }
    return true;
}

/* ---- a learner's mistakes ------------------------------------------------------------ */

/* The output of f at these inputs, as the check computes it
 * (sandbox_run), into a new array of *M values (the caller frees), with
 * the size of its last dim in *C. NULL on an error. */
static double *output_of(tg_ctx *ctx, tg_gradcheck_fn f, void *user, int n, tg_tensor *const *inputs, int64_t *M,
                         int64_t *C) {
    sandbox s;
    tg_tensor *xs[TG_GRADCHECK_MAX_INPUTS];
    tg_tensor *y = sandbox_run(ctx, &s, false, f, user, n, inputs, -1, xs);
    double *v = y ? malloc((size_t)y->numel * sizeof *v) : NULL;
    for (int64_t j = 0; v && j < y->numel; j++) v[j] = tg_load(y, j);
    if (v) *M = y->numel, *C = y->ndim ? y->shape[y->ndim - 1] : 1;
    sandbox_leave(ctx, &s);
    return v;
}

/* D = y_i b_i^T for each row i of the output y (rows of its last dim C):
 * row (i, e) of D is y_ie times one vector b_i over the input. Then the
 * error of dx is sum_i (dy_i . y_i) b_i: a term in the row statistic
 * dy_i . y_i dropped or mis-weighted -- a softmax's row sum: dx = y (dy -
 * delta), delta_i = sum_j y_ij dy_ij, and attention's delta_i = sum_j P_ij
 * dP_ij = dO_i . o_i in dS = P (dP - delta). */
static bool diagnose_row_sum(tg_ctx *ctx, tg_gradcheck_fn f, void *user, int n, tg_tensor *const *inputs, const jac *J,
                             double tol, tg_gradcheck_diagnosis *d, bool *err) {
    int64_t M = 0, C = 0, K = J->K;
    *err = false;
    double *y = output_of(ctx, f, user, n, inputs, &M, &C);
    if (!y) return !(*err = !tg_ok(ctx));
    bool fits = M == J->M && C >= 2 && M % C == 0, any = false;
    for (int64_t i = 0; fits && i < M / C; i++) {
        const double *yi = y + i * C;
        double yy = 0, ymin = yi[0], ymax = yi[0];
        for (int64_t e = 0; e < C; e++) yy += yi[e] * yi[e], ymin = fmin(ymin, yi[e]), ymax = fmax(ymax, yi[e]);
        /* a row of equal outputs cannot tell y_i from 1 */
        if (!(ymax - ymin > 1e-6 * fmax(fabs(ymax), fabs(ymin)))) fits = false;
        for (int64_t c = 0; fits && c < K; c++) {
            double s = 0;
            for (int64_t e = 0; e < C; e++) s += yi[e] * D(J, i * C + e, c);
            double b = yy > 0 ? s / yy : 0;
            if (fabs(b) * sqrt(yy) > tol) any = true;
            for (int64_t e = 0; e < C && fits; e++) fits = fabs(D(J, i * C + e, c) - yi[e] * b) <= tol;
        }
    }
    free(y);
    if (!fits || !any) return false;
    d->kind = TG_DIAG_PROJECTION;
    d->factor = 0;
    say(d->finding, sizeof d->finding,
        "analytic - numeric = y_i b_i^T for each row i of the output y: the error of dx is (dy_i . y_i) b_i, a "
        "term in the row statistic dy_i . y_i (rows of %lld outputs)",
        (long long)C);
    say(d->cause, sizeof d->cause,
        "a softmax's row-sum term dropped (or mis-weighted): in attention, delta_i = sum_j P_ij dP_ij = dO_i . o_i "
        "left out of dS = P (dP - delta); in a softmax, dx = y (dy - delta) with delta_i = sum_j y_ij dy_ij");
    return true;
}

/* Ja = Jn on some output rows and 0 on the others (each row of the
 * Jacobian an output element): the gradient takes the contributions of
 * only some outputs -- a sum over rows written with `=` for one row (the
 * last one wins) instead of accumulated. The outputs that reach it are
 * named by their rows of `C` (the input's numel, its last dim). */
static bool diagnose_partial(const jac *J, double tol, tg_gradcheck_diagnosis *d) {
    int64_t kept = 0, lost = 0, first = -1, last = -1, C = J->K;
    for (int64_t j = 0; j < J->M; j++) {
        double nn = 0, ok = 0, zero = 0;
        for (int64_t i = 0; i < J->K; i++) {
            double a = J->a[j * J->K + i], n = J->n[j * J->K + i];
            nn = fmax(nn, fabs(n)), ok = fmax(ok, fabs(a - n)), zero = fmax(zero, fabs(a));
        }
        if (!(nn > tol)) continue; /* no gradient flows from this output */
        if (ok <= tol) {
            kept++;
            if (first < 0) first = j;
            last = j;
        } else if (zero <= tol) {
            lost++;
        } else {
            return false;
        }
    }
    if (!kept || !lost) return false;
    d->kind = TG_DIAG_PARTIAL;
    d->factor = (double)kept / (double)(kept + lost);
    if (C > 0 && J->M % C == 0 && first / C == last / C)
        say(d->finding, sizeof d->finding,
            "only the outputs of row %lld (of %lld rows of %lld) reach this input's gradient: the other rows' "
            "contributions are missing, the ones that reach it exact",
            (long long)(first / C), (long long)(J->M / C), (long long)C);
    else
        say(d->finding, sizeof d->finding,
            "only %lld of the %lld outputs that depend on this input reach its gradient, exactly; the others "
            "contribute nothing",
            (long long)kept, (long long)(kept + lost));
    say(d->cause, sizeof d->cause,
        "a gradient summed over rows written with = for each row (dgamma = dy xhat of one row, the last one "
        "winning) instead of accumulated: dgamma_i = sum over rows of dy_i xhat_i");
    return true;
}

/* Ja = Jn / w_c row by row, c the output element's position in a row of
 * C = numel(w), w another input of the op (the gain): the backward left
 * w out of u = w dy. Inputs other than `input`, of numel dividing M. */
static bool diagnose_missing_gain(const jac *J, double tol, int n_inputs, tg_tensor *const *inputs, int input,
                                  tg_gradcheck_diagnosis *d) {
    for (int k = 0; k < n_inputs; k++) {
        const tg_tensor *w = inputs[k];
        if (k == input || !w || w->numel < 2 || J->M % w->numel) continue;
        const int64_t C = w->numel;
        bool fits = true, any = false;
        for (int64_t j = 0; j < J->M && fits; j++) {
            double wc = tg_load(w, j % C);
            for (int64_t i = 0; i < J->K && fits; i++) {
                double a = J->a[j * J->K + i], n = J->n[j * J->K + i];
                if (fabs(n) > tol) any = true;
                fits = wc != 0 && fabs(a * wc - n) <= tol * fmax(1.0, fabs(wc));
            }
        }
        if (!fits || !any) continue;
        d->kind = TG_DIAG_MISSING_GAIN;
        d->factor = k;
        say(d->finding, sizeof d->finding,
            "analytic = numeric / w_c output by output, w = input %d (%lld values, the position c in a row): the "
            "gradient lacks the factor that input puts on the output",
            k, (long long)C);
        say(d->cause, sizeof d->cause,
            "the gain gamma (input %d) left out of u = gamma * dy: the gradient that reaches xhat is gamma * dy, "
            "not dy (dx = r (u - xhat mean(u xhat)) with u = gamma * dy)",
            k);
        return true;
    }
    return false;
}

/* The analytic Jacobian of this input is the numeric one of another input
 * of its size: the two gradients are swapped (dgamma computed as dbeta's
 * formula, or written into the other's place). */
static bool diagnose_swapped(tg_ctx *ctx, tg_gradcheck_fn f, void *user, int n_inputs, tg_tensor *const *inputs,
                             int input, const tg_gradcheck_opts *o, const jac *J, double tol, tg_gradcheck_diagnosis *d,
                             bool *err) {
    *err = false;
    for (int k = 0; k < n_inputs; k++) {
        if (k == input || !inputs[k] || inputs[k]->numel != J->K) continue;
        tg_tensor *ja, *jn;
        if (!tg_gradcheck_jacobian(ctx, f, user, n_inputs, inputs, k, o, &ja, &jn)) {
            /* not differentiable, or not checkable: not a candidate */
            tg_clear_error(ctx);
            continue;
        }
        bool same = true;
        double scale = 0;
        for (int64_t e = 0; e < J->M * J->K; e++) scale = fmax(scale, fabs(tg_load(jn, e)));
        for (int64_t e = 0; e < J->M * J->K && same; e++) same = fabs(J->a[e] - tg_load(jn, e)) <= tol;
        if (!same || !(scale > tol)) continue;
        d->kind = TG_DIAG_SWAPPED;
        d->factor = k;
        say(d->finding, sizeof d->finding,
            "the analytic Jacobian of this input is the numeric Jacobian of input %d: this input gets input %d's "
            "gradient",
            k, k);
        say(d->cause, sizeof d->cause,
            "the gradients of two inputs swapped (dgamma and dbeta: dgamma = sum dy xhat, dbeta = sum dy), each "
            "written into the other's place");
        return true;
    }
    return !tg_ok(ctx) ? (*err = true, false) : false;
}

/* ---- the entry point ---------------------------------------------------------- */

bool tg_gradcheck_diagnose(tg_ctx *ctx, tg_gradcheck_fn f, void *user, int n_inputs, tg_tensor *const *inputs,
                           int input, const tg_gradcheck_opts *opts, tg_gradcheck_diagnosis *d) {
    static const char fn[] = "tg_gradcheck_diagnose";
    if (d) memset(d, 0, sizeof *d);
    if (!tg_ok(ctx)) return false;
    if (!d || !f || !inputs) {
        tg_null_error(ctx, fn, !d ? "d" : !f ? "f" : "inputs");
        return false;
    }
    if (input < 0 || input >= n_inputs) {
        tg_error(ctx, TG_ERR_INDEX, fn, "input %d is outside 0..%d", input, n_inputs - 1);
        return false;
    }
    d->input = input;
    tg_tensor *ja, *jn;
    if (!tg_gradcheck_jacobian(ctx, f, user, n_inputs, inputs, input, opts, &ja, &jn)) return false;
    tg_gradcheck_opts o = opts ? *opts : tg_gradcheck_defaults();
    tg_gradcheck_tol def = tg_gradcheck_dtype_tol(inputs[input]->dtype);
    double atol = o.atol > 0 || o.no_defaults ? o.atol : def.atol,
           rtol = o.rtol > 0 || o.no_defaults ? o.rtol : def.rtol;
    jac J = {.a = ja->data, .n = jn->data, .M = ja->shape[0], .K = ja->shape[1], .x = inputs[input]};
    double nmax = max_abs(J.n, J.M * J.K), amax = max_abs(J.a, J.M * J.K);
    /* atol relative to the Jacobian's scale, as the check's (its root mean
     * square over the entries that are not zero) */
    if (o.atol_scale != TG_GRADCHECK_ATOL_ABSOLUTE) {
        double ss = 0;
        int64_t nz = 0;
        for (int64_t e = 0; e < J.M * J.K; e++) {
            double v = fmax(fabs(J.a[e]), fabs(J.n[e]));
            if (v > 0 && isfinite(v)) ss += v * v, nz++;
        }
        atol *= nz ? sqrt(ss / (double)nz) : 0.0;
    }
    J.noise = atol + rtol * nmax;
    d->n_elements = J.K;

    /* first: is the backward linear in dy at all? */
    bool err;
    if (diagnose_dy(ctx, f, user, n_inputs, inputs, input, &o, &J, d, &err)) {
        /* the count is the elements the check's weighted sum finds off;
         * the unit-dy Jacobians may not show them */
        int64_t wrong = d->n_wrong;
        if (locate(&J, d->where, sizeof d->where) == 0)
            say(d->where, sizeof d->where, "%lld of %lld elements, through dy (the unit-dy Jacobians cannot show it)",
                (long long)wrong, (long long)J.K);
        d->n_wrong = wrong;
        return true;
    }
    if (err) return false;

    double dmax = 0;
    for (int64_t e = 0; e < J.M * J.K; e++) dmax = fmax(dmax, fabs(J.a[e] - J.n[e]));
    d->max_diff = dmax;
    if (!(dmax > J.noise)) {
        d->kind = TG_DIAG_NONE;
        say(d->finding, sizeof d->finding, "analytic and numeric Jacobians agree (max |difference| %.2e)", dmax);
        return true;
    }
    d->n_wrong = locate(&J, d->where, sizeof d->where);
    int64_t C = J.x->ndim ? J.x->shape[J.x->ndim - 1] : 1;
    char named[64];

    if (amax <= J.noise) {
        d->kind = TG_DIAG_ZERO;
        say(d->finding, sizeof d->finding, "the analytic Jacobian is zero: no gradient reaches this input");
        say(d->cause, sizeof d->cause,
            "the backward never adds into this input's gradient (a missing tg_node_accumulate / tg_grad_of, or a "
            "gradient written into a copy)");
        return true;
    }
    double resid, c = fit_scale(&J, &resid);
    double tol = fmax(0.02 * dmax, J.noise);
    if (resid <= tol) {
        d->factor = c;
        if (fabs(c + 1) < 1e-3) {
            d->kind = TG_DIAG_SIGN;
            say(d->finding, sizeof d->finding, "analytic = -numeric everywhere");
            say(d->cause, sizeof d->cause, "a sign flip: a subtraction the wrong way round, or -= for +=");
        } else {
            d->kind = TG_DIAG_SCALE;
            name_factor(named, sizeof named, c, C, J.K);
            say(d->finding, sizeof d->finding, "analytic = numeric x %.6g everywhere%s%s%s", c, named[0] ? " (" : "",
                named, named[0] ? ")" : "");
            if (named[0] == 'C' || !strncmp(named, "numel", 5))
                say(d->cause, sizeof d->cause, "a sum where the forward takes a mean (or a missing 1/C)");
            else if (!strncmp(named, "1/C", 3) || !strncmp(named, "1/numel", 7))
                say(d->cause, sizeof d->cause, "a mean where the forward takes a sum (or an extra 1/C)");
            else if (strstr(named, "(C-1)"))
                say(d->cause, sizeof d->cause,
                    "a statistic computed with the %s variance (C - 1 for C): the rstd the backward uses is off by "
                    "%s",
                    c < 1 ? "unbiased" : "biased", named);
            else if (strstr(named, "sqrt") && c > 1)
                say(d->cause, sizeof d->cause,
                    "the score scale left out of the backward: attention's S = scale q k^T with scale = 1/sqrt(D) "
                    "(D = %lld, the head size, this input's last dim) needs dq = scale dS k and dk = scale dS^T q "
                    "-- a scale 1/sqrt(C) the forward applies and the backward forgets",
                    (long long)C);
            else if (strstr(named, "sqrt"))
                say(d->cause, sizeof d->cause,
                    "a root of a sum where the forward has the root of a mean (r from the sum of squares, C = %lld "
                    "the input's last dim), or a scale 1/sqrt(C) applied twice (attention's dq = scale dS k with "
                    "scale = 1/sqrt(D) used once more)",
                    (long long)C);
            else if (named[0])
                say(d->cause, sizeof d->cause,
                    "a factor %s too %s: a derivative of x^2 taken as x, or a term counted %s", named,
                    c > 1 ? "big" : "small", c > 1 ? "twice" : "half");
            else say(d->cause, sizeof d->cause, "a constant factor %.6g on the whole gradient", c);
        }
        return true;
    }
    if (J.M == J.K) {
        double r = 0, asym = 0;
        for (int64_t j = 0; j < J.M; j++)
            for (int64_t i = 0; i < J.K; i++) {
                r = fmax(r, fabs(J.a[j * J.K + i] - J.n[i * J.K + j]));
                asym = fmax(asym, fabs(J.n[j * J.K + i] - J.n[i * J.K + j]));
            }
        if (r <= tol && asym > J.noise) {
            d->kind = TG_DIAG_TRANSPOSE;
            say(d->finding, sizeof d->finding, "analytic = numeric transposed (Ja = Jn^T)");
            say(d->cause, sizeof d->cause,
                "a transposed Jacobian: the backward applies J where it must apply J^T (swapped indices, a "
                "matmul by W where W^T belongs)");
            return true;
        }
    }
    /* a learner's mistakes that are not of one factor */
    if (diagnose_partial(&J, tol, d)) return true;
    if (diagnose_missing_gain(&J, tol, n_inputs, inputs, input, d)) return true;
    if (diagnose_swapped(ctx, f, user, n_inputs, inputs, input, &o, &J, tol, d, &err)) return true;
    if (err) return false;
    /* a normalization: x of the output's shape, rows of C */
    J.C = C;
    J.rows = C ? J.K / C : 0;
    if (J.x->ndim >= 1 && J.M == J.K && diagnose_rows(&J, d)) return true;
    if (diagnose_row_sum(ctx, f, user, n_inputs, inputs, &J, tol, d, &err)) return true;
    if (err) return false;
    d->kind = TG_DIAG_UNSTRUCTURED;
    say(d->finding, sizeof d->finding,
        "no simple structure: not a uniform factor, sign, transpose, or a row pattern (max |difference| %.3g)", dmax);
    say(d->cause, sizeof d->cause,
        "compare the Jacobians element by element (tapegrad-gradcheck jacobian); for an op with eps, a recomputed "
        "statistic without eps shows as an error that shrinks with eps");
    return true;
}

const char *tg_diagnosis_name(tg_diagnosis_kind kind) {
    switch (kind) {
    case TG_DIAG_NONE: return "none";
    case TG_DIAG_ZERO: return "zero";
    case TG_DIAG_SIGN: return "sign";
    case TG_DIAG_SCALE: return "scale";
    case TG_DIAG_TRANSPOSE: return "transpose";
    case TG_DIAG_IDENTITY: return "identity";
    case TG_DIAG_MEAN_TERM: return "mean-term";
    case TG_DIAG_PROJECTION: return "projection";
    case TG_DIAG_ROW_SCALE: return "row-scale";
    case TG_DIAG_STATISTIC: return "statistic";
    case TG_DIAG_UNSTRUCTURED: return "unstructured";
    case TG_DIAG_IGNORES_DY: return "ignores-dy";
    case TG_DIAG_NONLINEAR: return "nonlinear-in-dy";
    case TG_DIAG_PARTIAL: return "partial-sum";
    case TG_DIAG_MISSING_GAIN: return "missing-gain";
    case TG_DIAG_SWAPPED: return "swapped";
    }
    return "?";
}

/* `tapegrad-gradcheck jacobian NAME --shape SMALL`: the full Jacobians
 * J[j][i] = d out_j / d x_i of an op's output by each differentiable input,
 * analytic (one backward per output element) and numeric (central
 * differences, one pair of forwards per input element), printed side by
 * side with their difference, and drawn as three heatmaps in
 * DIR/jacobian_NAME_INPUT.png (data in the .dat beside it).
 *
 * Layer: command (tool.h): calls the analysis (projection.c) and below. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "tools/gradcheck/tool.h"

/* Entries above this are refused: the picture and the printout stop being
 * readable long before tg_gradcheck_jacobian's own cap. */
#define JAC_MAX_ENTRIES 65536
/* Widest text line the printout aims for. */
#define JAC_LINE 150

typedef struct jac_view {
    const tg_tensor *out, *x; /* shapes for the labels */
    const char *xname;
    int64_t M, N;             /* rows (outputs), columns (input elements) */
    const double *A, *Nu, *D; /* analytic, numeric, difference, M x N */
} jac_view;

static int label_width(const tg_tensor *t, int64_t n) {
    char buf[64];
    int w = 0;
    for (int64_t i = 0; i < n; i++) {
        int l = (int)strlen(gct_index_text(buf, sizeof buf, t->ndim, t->shape, i));
        if (l > w) w = l;
    }
    return w;
}

/* One row of a matrix, each value in `fmt` after a space; exact zeros as
 * "0" so the structure (diagonal, blocks) stands out. */
static void put_row(const double *row, int64_t N, const char *fmt, int w) {
    for (int64_t i = 0; i < N; i++) {
        fputc(' ', stdout);
        if (row[i] == 0) printf("%*s", w, "0");
        else printf(fmt, row[i]);
    }
}

static void put_header(const jac_view *v, int w, int lw, bool with_rowlabel) {
    char buf[64];
    if (with_rowlabel) printf("  %*s ", lw + 3, "");
    for (int64_t i = 0; i < v->N; i++) {
        gct_index_text(buf, sizeof buf, v->x->ndim, v->x->shape, i);
        char col[80];
        snprintf(col, sizeof col, "%s%s", v->xname, buf);
        printf(" %*s", w, col);
    }
}

/* The rows of matrix `mat` under their labels "out[j]", each followed by
 * "  | " and the row of `right` when given (side by side). */
static void put_rows(const jac_view *v, const double *mat, const double *right, const char *fmt, int w, int lw) {
    char buf[64];
    for (int64_t j = 0; j < v->M; j++) {
        printf("  out%-*s ", lw, gct_index_text(buf, sizeof buf, v->out->ndim, v->out->shape, j));
        put_row(mat + j * v->N, v->N, fmt, w);
        if (right) {
            printf("  | ");
            put_row(right + j * v->N, v->N, fmt, w);
        }
        printf("\n");
    }
}

/* Prints analytic and numeric side by side when they fit, one after the
 * other otherwise, then the difference. */
static void print_matrices(const jac_view *v, bool color) {
    double m = 0;
    for (int64_t e = 0; e < v->M * v->N; e++) m = fmax(m, fmax(fabs(v->A[e]), fabs(v->Nu[e])));
    /* fixed point for ordinary magnitudes, else exponents; columns at
     * least as wide as their headers ("x[3]") */
    bool fixed = m == 0 || (m >= 1e-3 && m < 1e4);
    int xl = (int)strlen(v->xname) + label_width(v->x, v->N);
    int w = fixed ? 9 : 10, wd = 9;
    if (xl > w) w = xl;
    if (xl > wd) wd = xl;
    char fmtw[16], fmtd[16];
    snprintf(fmtw, sizeof fmtw, fixed ? "%%%d.4f" : "%%%d.2e", w);
    snprintf(fmtd, sizeof fmtd, "%%%d.1e", wd);
    int lw = label_width(v->out, v->M);
    int block = (int)v->N * (w + 1);
    bool side = 2 + lw + 3 + 2 * block + 5 <= JAC_LINE;

    if (side) {
        printf("  %*s  ", lw + 3, "");
        gct_puts_tone(stdout, "analytic", GCT_BOLD, color);
        printf("%*s", block - 8 + 5, "");
        gct_puts_tone(stdout, "numeric", GCT_BOLD, color);
        printf("\n");
        put_header(v, w, lw, true);
        printf("  | ");
        put_header(v, w, lw, false);
        printf("\n");
        put_rows(v, v->A, v->Nu, fmtw, w, lw);
    } else {
        for (int which = 0; which < 2; which++) {
            printf("  ");
            gct_puts_tone(stdout, which ? "numeric" : "analytic", GCT_BOLD, color);
            printf("\n");
            put_header(v, w, lw, true);
            printf("\n");
            put_rows(v, which ? v->Nu : v->A, NULL, fmtw, w, lw);
            if (!which) printf("\n");
        }
    }
    printf("\n  ");
    gct_puts_tone(stdout, "difference", GCT_BOLD, color);
    printf(" (analytic - numeric)\n");
    put_header(v, wd, lw, true);
    printf("\n");
    put_rows(v, v->D, NULL, fmtd, wd, lw);
}

/* DIR/NAME.dat: three matrices (gnuplot `index` 0, 1, 2), and NAME.gp
 * drawing them side by side: analytic and numeric on one colour scale,
 * the difference on its own. */
static bool write_heatmaps(const char *dir, const char *name, const char *title, const jac_view *v, double h) {
    double md = 0;
    for (int64_t e = 0; e < v->M * v->N; e++)
        if (isfinite(v->D[e])) md = fmax(md, fabs(v->D[e]));
    char ta[128], tn[128], td[128];
    snprintf(ta, sizeof ta, "analytic d out_j / d %s_i", v->xname);
    snprintf(tn, sizeof tn, "numeric (central differences, h=%g)", h);
    snprintf(td, sizeof td, "difference: max |analytic - numeric| = %.1e", md);
    gct_heatmap maps[3] = {{v->A, ta, 0, false}, {v->Nu, tn, 0, false}, {v->D, td, 1, true}};
    return gct_write_heatmaps(dir, name, title, v->xname, v->M, v->N, 3, maps);
}

/* Each entry's predicted error, as the JACOBIAN mode's comparisons give
 * it (tg_gradcheck_element.bound): pred[k][j * N_k + i]. */
typedef struct jac_bounds {
    double *pred[TG_GRADCHECK_MAX_INPUTS];
    int64_t N[TG_GRADCHECK_MAX_INPUTS];
} jac_bounds;

static void collect_bound(void *user, const tg_gradcheck_element *e) {
    jac_bounds *b = user;
    if (b->pred[e->input] && e->output >= 0 && e->index >= 0)
        b->pred[e->input][e->output * b->N[e->input] + e->index] = e->bound;
}

/* Long: the report per input (text, JSON, CSV, pictures) is one loop; not yet split into steps. */
int gct_cmd_jacobian(const gct_args *a) {
    const tg_op_info *op;
    const gct_bug *bug;
    tg_ctx *ctx;
    if (a->n_seeds) {
        /* many seeds: the JACOBIAN mode of check, one row per input */
        static gct_args b;
        b = *a;
        b.mode = TG_GRADCHECK_JACOBIAN;
        return gct_cmd_check(&b);
    }
    int status = gct_begin(a, &op, &bug, &ctx);
    if (status >= 0) return status;
    status = GCT_EXIT_PASS;
    const double t_start = gct_now();
    gct_target t;
    if (!gct_target_make(ctx, a, op, bug, a->shape, a->dtype, a->seed, &t)) {
        status = gct_build_failed(ctx);
        tg_ctx_free(ctx);
        return status;
    }
    /* which inputs */
    uint32_t which = t.c.check;
    if (a->input) {
        which = 0;
        char names[256] = "";
        size_t nl = 0;
        for (int k = 0; k < t.c.n_inputs; k++) {
            if (!(t.c.check >> k & 1u)) continue;
            if (!strcmp(t.c.input_names[k], a->input)) which = (uint32_t)1 << k;
            if (nl < sizeof names)
                nl += (size_t)snprintf(names + nl, sizeof names - nl, "%s%s", nl ? ", " : "", t.c.input_names[k]);
        }
        if (!which) {
            status = gct_usage_error("%s %s has no differentiable input '%s' (it has: %s)", op->def->name, t.c.spec,
                                     a->input, names);
            tg_ctx_free(ctx);
            return status;
        }
    }
    const tg_tensor *y = t.out;
    for (int k = 0; k < t.c.n_inputs; k++) {
        if (!(which >> k & 1u)) continue;
        int64_t M = y->numel, N = t.c.inputs[k]->numel;
        if (N > 0 && M > JAC_MAX_ENTRIES / N) {
            char s1[64], s2[64];
            status =
                gct_usage_error("the Jacobian of %s (output %s by %s %s) has %lld entries; jacobian is for "
                                "small shapes (at most %d entries): try --shape %s",
                                op->def->name, gct_shape_text(s1, sizeof s1, y->ndim, y->shape), t.c.input_names[k],
                                gct_shape_text(s2, sizeof s2, t.c.inputs[k]->ndim, t.c.inputs[k]->shape),
                                (long long)(M * N), JAC_MAX_ENTRIES, bug ? bug->default_spec : "with fewer elements");
            tg_ctx_free(ctx);
            return status;
        }
    }

    /* the step and tolerances tg_gradcheck would use, for counting entries */
    tg_gradcheck_opts o = gct_target_opts(&t, a, a->seed);
    /* the JACOBIAN mode's verdict, steps and tolerances; the matrices below */
    tg_gradcheck_result res;
    o.mode = TG_GRADCHECK_JACOBIAN;
    o.inputs = which;
    jac_bounds jb = {0};
    for (int k = 0; k < t.c.n_inputs; k++) {
        if (!(which >> k & 1u)) continue;
        int64_t n = y->numel * t.c.inputs[k]->numel;
        jb.N[k] = t.c.inputs[k]->numel;
        jb.pred[k] = tg_arena_alloc(ctx, (size_t)(n > 0 ? n : 1) * sizeof(double));
        if (!jb.pred[k]) {
            fprintf(stderr, "tapegrad-gradcheck: out of memory\n");
            tg_ctx_free(ctx);
            return GCT_EXIT_ERROR;
        }
        for (int64_t e = 0; e < n; e++) jb.pred[k][e] = NAN;
    }
    o.each = collect_bound;
    o.each_user = &jb;
    gct_target_check(ctx, &t, &o, &res);
    o.each = NULL;
    if (!tg_ok(ctx)) {
        fprintf(stderr, "tapegrad-gradcheck: %s: %s\n", t.label, tg_error_message(ctx));
        tg_ctx_free(ctx);
        return GCT_EXIT_ERROR;
    }
    double h = res.h, rtol = res.rtol;
    bool text = a->format == GCT_TEXT, json = a->format == GCT_JSON;
    char sy[64];
    if (text) {
        gct_put_title(a, op, bug, t.function);
        printf("  spec %s: output %s, %s, %s differences h=%g%s\n", t.c.spec,
               gct_shape_text(sy, sizeof sy, y->ndim, y->shape), tg_dtype_name(a->dtype),
               res.forward_diff ? "forward" : "central", h,
               res.step == TG_GRADCHECK_STEP_SCALED    ? " x l_i (relative steps)"
               : res.step == TG_GRADCHECK_STEP_ELEMENT ? " x max(|x_i|, floor)"
                                                       : "");
        gct_put_sources(a, op, res.dtype, "  ");
    } else if (json) {
        /* the document's envelope (json.c): the JACOBIAN mode's check, then the matrices */
        gct_json J;
        gct_json_open(&J, a);
        gct_json_check_open(&J, a, &t, a->seed, "rev");
        gct_json_check_result(&t, ctx, &res);
        printf("}");
        gct_json_checks_close(&J);
        printf(",\n\"jacobians\":[");
    } else {
        printf("op,bug,spec,dtype,input,output,index,analytic,numeric,difference,predicted\n");
    }
    int n_json = 0;
    if (!gct_mkdir_p(a->out_dir)) {
        tg_ctx_free(ctx);
        return GCT_EXIT_ERROR;
    }
    for (int k = 0; k < t.c.n_inputs; k++) {
        if (!(which >> k & 1u)) continue;
        tg_tensor *Ja, *Jn;
        if (!tg_gradcheck_jacobian(ctx, t.fn, &t.c, t.c.n_inputs, t.c.inputs, k, &o, &Ja, &Jn)) {
            fprintf(stderr, "tapegrad-gradcheck: %s: %s\n", t.label, tg_error_message(ctx));
            tg_ctx_free(ctx);
            return GCT_EXIT_ERROR;
        }
        const tg_tensor *x = t.c.inputs[k];
        int64_t M = Ja->shape[0], N = Ja->shape[1];
        double *D = tg_arena_alloc(ctx, (size_t)(M * N > 0 ? M * N : 1) * sizeof *D);
        if (!D) {
            fprintf(stderr, "tapegrad-gradcheck: out of memory\n");
            tg_ctx_free(ctx);
            return GCT_EXIT_ERROR;
        }
        const double *A = Ja->data, *Nu = Jn->data;
        double maxd = 0, atol = res.input[k].atol_used;
        int64_t worst = 0, n_bad = 0;
        for (int64_t e = 0; e < M * N; e++) {
            D[e] = A[e] - Nu[e];
            double ad = fabs(D[e]);
            if (!(ad <= atol + rtol * fabs(Nu[e]))) n_bad++;
            if (isnan(ad) || ad > maxd) maxd = isnan(ad) ? INFINITY : ad, worst = e;
        }
        jac_view v = {y, x, t.c.input_names[k], M, N, A, Nu, D};
        char sx[64], bj[64], bi[64];
        if (json) {
            printf("%s{\"input\":", n_json++ ? "," : "");
            gct_json_str(stdout, v.xname);
            printf(",\"rows\":%lld,\"cols\":%lld,\"n_bad\":%lld,\"atol\":", (long long)M, (long long)N,
                   (long long)n_bad);
            gct_json_num(stdout, atol);
            printf(",\"max_abs_err\":");
            gct_json_num(stdout, maxd);
            printf(",\"pred_max\":");
            gct_json_num(stdout, res.input[k].pred_max);
            printf(",\"pred_trunc\":");
            gct_json_num(stdout, res.input[k].pred_trunc);
            printf(",\"pred_round\":");
            gct_json_num(stdout, res.input[k].pred_round);
            const char *keys[3] = {"analytic", "numeric", "predicted"};
            const double *mats[3] = {A, Nu, jb.pred[k]};
            for (int m = 0; m < 3; m++) {
                printf(",\"%s\":[", keys[m]);
                for (int64_t j = 0; j < M; j++) {
                    printf("%s[", j ? "," : "");
                    for (int64_t i = 0; i < N; i++) {
                        if (i) printf(",");
                        gct_json_num(stdout, mats[m][j * N + i]);
                    }
                    printf("]");
                }
                printf("]");
            }
            printf("}");
        } else if (!text) {
            for (int64_t j = 0; j < M; j++)
                for (int64_t i = 0; i < N; i++) {
                    printf("%s,%s,", op->def->name, bug ? bug->name : "");
                    for (const char *q = t.c.spec; *q; q++) putchar(*q == ',' ? ';' : *q);
                    printf(",%s,%s,%lld,%lld,%.17g,%.17g,%.17g,%.17g\n", tg_dtype_name(a->dtype), v.xname, (long long)j,
                           (long long)i, A[j * N + i], Nu[j * N + i], D[j * N + i], jb.pred[k][j * N + i]);
                }
        } else {
            printf("\n");
            gct_puts_tone(stdout, "d out / d ", GCT_BOLD, a->color);
            gct_puts_tone(stdout, v.xname, GCT_BOLD, a->color);
            printf("   %lld rows (output elements) x %lld columns (%s %s)\n\n", (long long)M, (long long)N, v.xname,
                   gct_shape_text(sx, sizeof sx, x->ndim, x->shape));
            if (N * 10 <= 2 * JAC_LINE && M <= 64) print_matrices(&v, a->color);
            else printf("  (too large to print: %lld x %lld; see the heatmap)\n", (long long)M, (long long)N);
            printf("\n  max |analytic - numeric| = %.2e at out%s, %s%s;  ", maxd,
                   gct_index_text(bj, sizeof bj, y->ndim, y->shape, N ? worst / N : 0), v.xname,
                   gct_index_text(bi, sizeof bi, x->ndim, x->shape, N ? worst % N : 0));
            char verdict[160];
            if (res.atol_scale == TG_GRADCHECK_ATOL_GRADIENT)
                snprintf(verdict, sizeof verdict, "%lld of %lld entries outside %g G + %g |numeric| (G = %.3g)",
                         (long long)n_bad, (long long)(M * N), res.atol, rtol, res.input[k].grad_scale);
            else
                snprintf(verdict, sizeof verdict, "%lld of %lld entries outside %g + %g |numeric|", (long long)n_bad,
                         (long long)(M * N), atol, rtol);
            gct_puts_tone(stdout, verdict, n_bad ? GCT_BAD : GCT_GOOD, a->color);
            printf(": ");
            gct_puts_tone(stdout, gct_verdict_word(res.input[k].verdict), gct_verdict_tone(res.input[k].verdict),
                          a->color);
            if (res.input[k].verdict == TG_VERDICT_INCONCLUSIVE)
                printf(" (%s)", tg_gradcheck_reason_name(res.input[k].reason));
            printf(
                "\n  predicted: the differences' own error at h = %g is %.2e at that entry, at most %.2e (truncation "
                "%.2e + rounding %.2e)\n",
                h, jb.pred[k][worst], res.input[k].pred_max, res.input[k].pred_trunc, res.input[k].pred_round);
        }

        char name[256], title[512];
        snprintf(name, sizeof name, "jacobian_%s_%s", bug ? bug->name : op->def->name, v.xname);
        snprintf(title, sizeof title, "%s  %s  (%s): d out / d %s", t.label, t.c.spec, tg_dtype_name(a->dtype),
                 v.xname);
        for (char *p = title; *p; p++)
            if (*p == '\'') *p = ' ';
        if (gct_projection_view(ctx, &t, k, A, Nu, a->out_dir, name, title, text) > 0) status = GCT_EXIT_ERROR;
        char gp[4096], msg[512] = "";
        if (!write_heatmaps(a->out_dir, name, title, &v, h)) {
            fprintf(stderr, "tapegrad-gradcheck: cannot write %s/%s.dat or .gp\n", a->out_dir, name);
            tg_ctx_free(ctx);
            return GCT_EXIT_ERROR;
        }
        snprintf(gp, sizeof gp, "%s/%s.gp", a->out_dir, name);
        bool rendered = false;
        tg_status st = tg_plot_render(gp, &rendered, msg, sizeof msg);
        if (text && rendered) printf("  wrote %s/%s.png (data %s.dat, script %s.gp)\n", a->out_dir, name, name, name);
        else if (text) printf("  wrote %s/%s.dat and %s\n  %s\n", a->out_dir, name, gp, msg);
        if (st != TG_OK) status = GCT_EXIT_ERROR;
    }
    if (json) {
        printf("]");
        gct_tally inputs = {0}, runs = {0};
        for (int k = 0; k < t.c.n_inputs; k++)
            if (res.input[k].checked) gct_tally_add(&inputs, res.input[k].verdict);
        gct_tally_add(&runs, res.verdict);
        gct_json_summary(a, &inputs, &runs, 1, 1, gct_now() - t_start, gct_now() - t_start);
    }
    tg_ctx_free(ctx);
    if (status == GCT_EXIT_PASS) status = gct_verdict_status(res.verdict);
    return status;
}

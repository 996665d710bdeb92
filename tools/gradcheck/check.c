/* `tapegrad-gradcheck check NAME|all`: tg_gradcheck on every built-in shape
 * variant of an op (or one --shape), printed as one table per op with a
 * row per input: elements failing, max abs and rel error, the worst
 * element with its analytic and numeric values, pass or FAIL. */
#include <math.h>
#include <string.h>

#include "tools/gradcheck/tool.h"

/* Totals over the run. */
typedef struct check_totals {
    int ops, cases, inputs, failed_inputs, failed_cases, errors;
    double f32_worst_ratio; /* float32: the largest error / tolerance of a failing input */
    char failures[2048];    /* "rmsnorm 4x8: x, gamma; ..." */
    size_t flen;
} check_totals;

static void note_failure(check_totals *T, const char *fmt, const char *a, const char *b, const char *c) {
    if (T->flen < sizeof T->failures)
        T->flen += (size_t)snprintf(T->failures + T->flen, sizeof T->failures - T->flen, fmt, a, b, c);
}

static void fmt_err(gct_cell *c, double v) {
    if (isnan(v)) gct_cell_set(c, GCT_BAD, "nan");
    else if (v == 0) gct_cell_set(c, GCT_PLAIN, "0");
    else gct_cell_set(c, GCT_PLAIN, "%.2e", v);
}

/* The settings line under an op's name. */
static void put_settings(const gct_args *a, const tg_gradcheck_result *r, tg_dtype dt) {
    printf("  %s, %s, central differences h=%g, passes when |analytic - numeric| <= %g + %g |numeric|, seed %llu\n",
           tg_dtype_name(dt), a->mode == TG_GRADCHECK_FULL ? "every element" : "one random direction per input", r->h,
           r->atol, r->rtol, (unsigned long long)a->seed);
}

/* Appends the rows of one checked case to the table. Returns the number of
 * failing inputs. */
static int add_case_rows(gct_table *t, const gct_target *tg, const tg_gradcheck_result *r, bool quiet,
                         check_totals *T) {
    int failed = 0;
    bool first = true;
    char names[256] = "";
    size_t nl = 0;
    for (int k = 0; k < tg->c.n_inputs; k++) {
        const tg_gradcheck_input *in = &r->input[k];
        if (!in->checked) continue;
        T->inputs++;
        if (!in->pass) {
            failed++;
            if (tg->c.dtype == TG_F32 && in->worst_ratio > T->f32_worst_ratio) T->f32_worst_ratio = in->worst_ratio;
            if (nl < sizeof names)
                nl += (size_t)snprintf(names + nl, sizeof names - nl, "%s%s", failed > 1 ? ", " : "",
                                       tg->c.input_names[k]);
        }
        if (quiet && in->pass) continue;
        gct_cell *row = gct_table_row(t);
        if (!row) return failed;
        if (first) gct_table_group(t);
        const tg_tensor *x = tg->c.inputs[k];
        char sh[64], idx[64];
        gct_cell_set(&row[0], GCT_PLAIN, "%s", first ? tg->c.spec : "");
        gct_cell_set(&row[1], GCT_PLAIN, "%s", tg->c.input_names[k]);
        gct_cell_set(&row[2], GCT_PLAIN, "%s", gct_shape_text(sh, sizeof sh, x->ndim, x->shape));
        gct_cell_set(&row[3], in->n_failed ? GCT_BAD : GCT_PLAIN, "%lld/%lld", (long long)in->n_failed,
                     (long long)in->n_checked);
        fmt_err(&row[4], in->max_abs_err);
        fmt_err(&row[5], in->max_rel_err);
        if (in->n_checked == 0) {
            gct_cell_set(&row[6], GCT_DIM, "-");
        } else {
            if (in->worst_index < 0) gct_cell_set(&row[6], GCT_PLAIN, "direction");
            else
                gct_cell_set(&row[6], GCT_PLAIN, "%s",
                             gct_index_text(idx, sizeof idx, x->ndim, x->shape, in->worst_index));
            gct_cell_set(&row[7], GCT_PLAIN, "%.10g", in->worst_analytic);
            gct_cell_set(&row[8], GCT_PLAIN, "%.10g", in->worst_numeric);
        }
        gct_cell_set(&row[9], in->pass ? GCT_GOOD : GCT_BAD, "%s", in->pass ? "pass" : "FAIL");
        first = false;
    }
    if (failed) {
        T->failed_inputs += failed;
        T->failed_cases++;
        note_failure(T, "\n    %s  %s: %s", tg->label, tg->c.spec, names);
    }
    return failed;
}

/* Checks one op (every variant, or a->shape). Returns -1, or the exit
 * status when a spec given on the command line was refused (printed). */
static int check_op(tg_ctx *ctx, const gct_args *a, const tg_op_info *op, const gct_bug *bug, check_totals *T) {
    gct_table t;
    gct_table_init(&t, "lllrrrlrrl", "spec", "input", "shape", "failed", "max abs err", "max rel err", "worst at",
                   "analytic", "numeric", "result");
    int n_specs = a->shape || bug ? 1 : op->n_variants;
    tg_gradcheck_result first = {0};
    bool have_first = false, op_failed = false;
    char function[160] = "";
    char errors[1024] = "", diag[8192] = "";
    size_t el = 0, dl = 0;
    for (int v = 0; v < n_specs; v++) {
        const char *spec = a->shape ? a->shape : bug ? NULL : op->variants[v];
        gct_target tg;
        tg_rng_seed(ctx, a->seed); /* a spec's inputs do not depend on the order of the run */
        if (!gct_target_build(ctx, op, bug, spec, a->dtype, &tg)) {
            if (a->shape) {
                gct_table_free(&t);
                return gct_build_failed(ctx);
            }
            /* a built-in variant that does not build is a bug of the registry */
            if (el < sizeof errors)
                el += (size_t)snprintf(errors + el, sizeof errors - el, "    ERROR %s: %s\n", spec,
                                       tg_error_message(ctx));
            T->errors++;
            T->failed_cases++;
            note_failure(T, "\n    %s  %s: %s", op->name, spec, "does not build");
            op_failed = true;
            tg_clear_error(ctx);
            tg_ctx_reset(ctx);
            continue;
        }
        snprintf(function, sizeof function, "%s", tg.function);
        if (a->print_inputs) gct_print_inputs(ctx, &tg);
        tg_gradcheck_opts o = gct_target_opts(&tg, a);
        tg_gradcheck_result r;
        gct_target_check(ctx, &tg, &o, &r);
        T->cases++;
        if (!tg_ok(ctx)) {
            if (el < sizeof errors)
                el += (size_t)snprintf(errors + el, sizeof errors - el, "    ERROR %s: %s\n", tg.c.spec,
                                       tg_error_message(ctx));
            T->errors++;
            T->failed_cases++;
            note_failure(T, "\n    %s  %s: %s", tg.label, tg.c.spec, "error");
            op_failed = true;
            tg_clear_error(ctx);
        } else {
            if (!have_first) first = r, have_first = true;
            if (add_case_rows(&t, &tg, &r, a->quiet, T)) {
                op_failed = true;
                dl += gct_diagnose_case(ctx, a, &tg, &o, &r, diag + dl, sizeof diag - dl);
            }
        }
        tg_ctx_reset(ctx);
    }
    T->ops++;
    if (!a->quiet || op_failed) {
        printf("%s", T->ops > 1 || a->quiet ? "\n" : "");
        gct_put_title(a, op, bug, function);
        if (have_first) put_settings(a, &first, a->dtype);
        if (t.nrows) {
            fputc('\n', stdout);
            gct_table_print(stdout, &t, 2, a->color);
        }
        if (dl) printf("\n%s", diag);
        if (el) printf("\n%s", errors);
    }
    gct_table_free(&t);
    return -1;
}

int gct_cmd_check(const gct_args *a) {
    const tg_op_info *op = NULL;
    const gct_bug *bug = NULL;
    bool all = a->name && !strcmp(a->name, "all");
    if (all && a->inject) return gct_usage_error("--inject checks one op: leave out 'all'");
    if (all && a->shape) return gct_usage_error("--shape SPEC is for one op, not 'all' (ops take different specs)");
    if (!all && !gct_resolve(a, a->name, &op, &bug)) return GCT_EXIT_USAGE;

    tg_ctx *ctx = gct_ctx_new(a->seed);
    if (!ctx) return GCT_EXIT_ERROR;
    check_totals T;
    memset(&T, 0, sizeof T);
    double t0 = gct_now();
    int refused = -1;
    if (all) {
        for (int i = 0; i < tg_registry_count() && refused < 0; i++)
            refused = check_op(ctx, a, tg_registry_get(i), NULL, &T);
    } else {
        refused = check_op(ctx, a, op, bug, &T);
    }
    tg_ctx_free(ctx);
    if (refused >= 0) return refused;

    double secs = gct_now() - t0;
    bool pass = T.failed_cases == 0 && T.errors == 0;
    printf("\n");
    gct_puts_tone(stdout, "summary:", GCT_BOLD, a->color);
    printf(" %d op%s, %d case%s, %d input%s checked in %s (%s) in %.2f s: ", T.ops, T.ops == 1 ? "" : "s", T.cases,
           T.cases == 1 ? "" : "s", T.inputs, T.inputs == 1 ? "" : "s", tg_dtype_name(a->dtype),
           a->mode == TG_GRADCHECK_DIRECTIONAL ? "directional" : "full", secs);
    if (pass) {
        gct_puts_tone(stdout, "all pass", GCT_GOOD, a->color);
        printf("\n");
        return GCT_EXIT_PASS;
    }
    char line[128];
    snprintf(line, sizeof line, "%d input%s FAIL in %d case%s", T.failed_inputs, T.failed_inputs == 1 ? "" : "s",
             T.failed_cases, T.failed_cases == 1 ? "" : "s");
    gct_puts_tone(stdout, line, GCT_BAD, a->color);
    if (T.errors) printf(", %d error%s", T.errors, T.errors == 1 ? "" : "s");
    printf("%s\n", T.failures);
    if (T.f32_worst_ratio > 0 && T.f32_worst_ratio < 3)
        printf("\n  note: every float32 failure is within %.1fx of its tolerance: in float32 that is likely the\n"
               "  round-off of the check, not a wrong backward (error ~ 6e-8 |f| / h). Try --h 1e-2, or check in\n"
               "  float64, where a wrong backward stands out by orders of magnitude (docs/gradcheck.md).\n",
               T.f32_worst_ratio);
    return GCT_EXIT_FAIL;
}

/* `tapegrad-gradcheck check NAME|all`: tg_gradcheck on every built-in shape
 * variant of an op (or one --shape), printed as one table per op with a
 * row per input: elements failing, max abs and rel error, the worst
 * element with its analytic and numeric values, pass or FAIL.
 *
 * With --seeds the same check runs over many seeds in one process (inputs
 * and probe vectors drawn anew for each, unless --input-seed or
 * --probe-seed holds one fixed) and the table gives, per input, the pass
 * rate and quantiles of the error over the seeds. --format json and csv
 * write the same for programs (tg_gradcheck_write).
 *
 * Layer: command (tool.h): calls modes.c, the analysis (diagnose.c) and below. */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/gradcheck/tool.h"

/* Totals over the run. */
typedef struct check_totals {
    int ops, cases;
    gct_tally inputs;  /* input checks by verdict (over --seeds: an input's
                          seeds joined); errors: cases that stopped on one */
    gct_tally runs;    /* every check run (a case times its seeds) by verdict */
    double check_secs; /* in tg_gradcheck alone */
    bool f32;
    /* the inputs that did not pass, for the note */
    int n_note;
    gct_note notes[64];
    char failures[2048]; /* "\n    WRONG  rmsnorm 4x8: x, gamma" ... */
    size_t flen;
    gct_json json;   /* --format json */
    gct_cover cover; /* the op's inputs seen (coverage.c) */
} check_totals;

static void note_failure(check_totals *T, const char *what, const char *label, const char *spec, const char *names) {
    if (T->flen < sizeof T->failures)
        T->flen += (size_t)snprintf(T->failures + T->flen, sizeof T->failures - T->flen, "\n    %-12s  %s  %s: %s",
                                    what, label, spec, names);
}

static void note_input(check_totals *T, const gct_target *tg, int k, tg_gradcheck_verdict v, tg_gradcheck_reason why,
                       double excess) {
    if (T->n_note == 64) return;
    gct_note *e = &T->notes[T->n_note++];
    snprintf(e->name, sizeof e->name, "%s %s %s", tg->label, tg->c.spec, tg->c.input_names[k]);
    e->verdict = v;
    e->reason = why;
    e->excess = excess;
}

/* The names of a case's inputs that got verdict v: "x, gamma" (the reason
 * after an inconclusive one: "x (all-zero)"). */
typedef struct case_names {
    char wrong[256], inconclusive[256];
    size_t wl, il;
} case_names;

static void case_name_add(case_names *n, const char *name, tg_gradcheck_verdict v, tg_gradcheck_reason why) {
    if (v == TG_VERDICT_WRONG && n->wl < sizeof n->wrong)
        n->wl += (size_t)snprintf(n->wrong + n->wl, sizeof n->wrong - n->wl, "%s%s", n->wl ? ", " : "", name);
    if (v == TG_VERDICT_INCONCLUSIVE && n->il < sizeof n->inconclusive)
        n->il += (size_t)snprintf(n->inconclusive + n->il, sizeof n->inconclusive - n->il, "%s%s (%s)",
                                  n->il ? ", " : "", name, tg_gradcheck_reason_name(why));
}

static void case_names_note(check_totals *T, const case_names *n, const char *label, const char *spec) {
    if (n->wl) note_failure(T, "WRONG", label, spec, n->wrong);
    if (n->il) note_failure(T, "inconclusive", label, spec, n->inconclusive);
}

static void fmt_err(gct_cell *c, double v) {
    if (isnan(v)) gct_cell_set(c, GCT_BAD, "nan");
    else if (v == 0) gct_cell_set(c, GCT_PLAIN, "0");
    else gct_cell_set(c, GCT_PLAIN, "%.2e", v);
}

/* The predicted error of an input: its largest over the comparisons, and
 * the two parts there (truncation from h and l, rounding from eps and h). */
static void put_predicted(gct_cell *c, const tg_gradcheck_input *in) {
    if (in->n_checked == 0) gct_cell_set(c, GCT_DIM, "-");
    else gct_cell_set(c, GCT_DIM, "%.1e = %.1e + %.1e", in->pred_max, in->pred_trunc, in->pred_round);
}

/* ---- every comparison (--elements) ------------------------------------------ */

typedef struct elem_list {
    tg_gradcheck_element *e;
    int64_t n, cap;
    bool oom;
} elem_list;

static void collect_element(void *user, const tg_gradcheck_element *e) {
    elem_list *L = user;
    if (L->n == L->cap) {
        int64_t cap = L->cap ? 2 * L->cap : 256;
        tg_gradcheck_element *p = realloc(L->e, (size_t)cap * sizeof *p);
        if (!p) {
            L->oom = true;
            return;
        }
        L->e = p;
        L->cap = cap;
    }
    L->e[L->n++] = *e;
}

static void print_elements_text(FILE *f, const gct_target *tg, const elem_list *L, bool color) {
    gct_table t;
    gct_table_init(&t, "llrrrrrl", "input", "at", "analytic", "numeric", "|a - n|", "tolerance", "predicted", "result");
    char idx[64], out[64];
    for (int64_t e = 0; e < L->n; e++) {
        const tg_gradcheck_element *el = &L->e[e];
        const tg_tensor *x = tg->c.inputs[el->input];
        gct_cell *row = gct_table_row(&t);
        if (!row) break;
        gct_cell_set(&row[0], GCT_PLAIN, "%s", tg->c.input_names[el->input]);
        if (el->index < 0) gct_cell_set(&row[1], GCT_PLAIN, "direction");
        else if (el->output >= 0)
            gct_cell_set(&row[1], GCT_PLAIN, "out%s %s",
                         gct_index_text(out, sizeof out, tg->out->ndim, tg->out->shape, el->output),
                         gct_index_text(idx, sizeof idx, x->ndim, x->shape, el->index));
        else gct_cell_set(&row[1], GCT_PLAIN, "%s", gct_index_text(idx, sizeof idx, x->ndim, x->shape, el->index));
        gct_cell_set(&row[2], GCT_PLAIN, "%.10g", el->analytic);
        gct_cell_set(&row[3], GCT_PLAIN, "%.10g", el->numeric);
        fmt_err(&row[4], fabs(el->analytic - el->numeric));
        fmt_err(&row[5], el->tol);
        fmt_err(&row[6], el->bound);
        gct_cell_set(&row[7], el->pass ? GCT_GOOD : GCT_BAD, "%s", el->pass ? "pass" : "FAIL");
    }
    fprintf(f, "\n  %s: every comparison (predicted: the error the check itself makes there)\n", tg->c.spec);
    gct_table_print(f, &t, 2, color);
    gct_table_free(&t);
}

static void print_elements_json(const gct_target *tg, const elem_list *L) {
    printf(",\"elements\":[");
    for (int64_t e = 0; e < L->n; e++) {
        const tg_gradcheck_element *el = &L->e[e];
        printf("%s{\"input\":", e ? "," : "");
        gct_json_str(stdout, tg->c.input_names[el->input]);
        printf(",\"index\":%lld,\"output\":%lld,\"analytic\":", (long long)el->index, (long long)el->output);
        gct_json_num(stdout, el->analytic);
        printf(",\"numeric\":");
        gct_json_num(stdout, el->numeric);
        printf(",\"step\":");
        gct_json_num(stdout, el->step);
        printf(",\"tol\":");
        gct_json_num(stdout, el->tol);
        printf(",\"bound\":");
        gct_json_num(stdout, el->bound);
        printf(",\"pass\":%s}", el->pass ? "true" : "false");
    }
    printf("]");
}

#define CSV_ELEMENT_COLUMNS "input,index,output,analytic,numeric,step,tol,bound,pass"

static void print_elements_csv(const gct_target *tg, const elem_list *L, const char *prefix) {
    for (int64_t e = 0; e < L->n; e++) {
        const tg_gradcheck_element *el = &L->e[e];
        printf("%s%s,%lld,%lld,%.17g,%.17g,%.17g,%.17g,%.17g,%d\n", prefix, tg->c.input_names[el->input],
               (long long)el->index, (long long)el->output, el->analytic, el->numeric, el->step, el->tol, el->bound,
               el->pass ? 1 : 0);
    }
}

/* One run's report for a program: in JSON a check of "checks" (the case,
 * its seeds, the result or the error, the inputs with --print-inputs, the
 * comparisons with --elements); in CSV its rows. */
static void print_run(tg_ctx *ctx, const gct_args *a, gct_target *tg, const tg_gradcheck_result *r, const elem_list *L,
                      bool ok, uint64_t seed, check_totals *T) {
    if (a->format == GCT_JSON) {
        gct_json_check_open(&T->json, a, tg, seed, "rev");
        gct_json_check_result(tg, ctx, ok ? r : NULL);
        if (a->print_inputs) {
            printf(",\"values\":");
            gct_json_inputs(stdout, tg);
        }
        if (ok && a->elements) print_elements_json(tg, L);
        printf("}");
    } else if (a->format == GCT_CSV && ok) {
        char prefix[256];
        gct_csv_prefix(prefix, sizeof prefix, tg, gct_input_seed(a, seed), gct_probe_seed(a, seed));
        if (a->elements) print_elements_csv(tg, L, prefix);
        else tg_gradcheck_write(stdout, r, tg->c.input_names, TG_GRADCHECK_CSV, prefix);
    }
}

/* ---- one case, one seed -------------------------------------------------------- */

/* Appends the rows of one checked case to the table and counts its
 * inputs' verdicts. Returns the case's verdict. */
static tg_gradcheck_verdict add_case_rows(gct_table *t, const gct_target *tg, const tg_gradcheck_result *r, bool quiet,
                                          check_totals *T) {
    bool first = true;
    case_names names = {0};
    for (int k = 0; k < tg->c.n_inputs; k++) {
        const tg_gradcheck_input *in = &r->input[k];
        if (!in->checked) continue;
        gct_tally_add(&T->inputs, in->verdict);
        if (in->verdict != TG_VERDICT_PASS) {
            note_input(T, tg, k, in->verdict, in->reason, in->fail_excess);
            case_name_add(&names, tg->c.input_names[k], in->verdict, in->reason);
        }
        if (quiet && in->pass) continue;
        gct_cell *row = gct_table_row(t);
        if (!row) break;
        if (first) gct_table_group(t);
        const tg_tensor *x = tg->c.inputs[k];
        char sh[64], idx[64], out[64];
        gct_cell_set(&row[0], GCT_PLAIN, "%s", first ? tg->c.spec : "");
        gct_cell_set(&row[1], GCT_PLAIN, "%s", tg->c.input_names[k]);
        if (gct_fast_joint(r)) gct_cell_set(&row[2], GCT_PLAIN, "%lld el.", (long long)gct_target_numel(tg));
        else gct_cell_set(&row[2], GCT_PLAIN, "%s", gct_shape_text(sh, sizeof sh, x->ndim, x->shape));
        gct_cell_set(&row[3], in->n_failed ? GCT_BAD : GCT_PLAIN, "%lld/%lld", (long long)in->n_failed,
                     (long long)in->n_checked);
        fmt_err(&row[4], in->max_abs_err);
        put_predicted(&row[5], in);
        fmt_err(&row[6], in->max_rel_err);
        if (in->n_checked == 0) {
            gct_cell_set(&row[7], GCT_DIM, "-");
        } else {
            if (in->worst_index < 0) gct_cell_set(&row[7], GCT_PLAIN, "direction");
            else if (in->worst_output >= 0)
                gct_cell_set(&row[7], GCT_PLAIN, "out%s %s",
                             gct_index_text(out, sizeof out, tg->out->ndim, tg->out->shape, in->worst_output),
                             gct_index_text(idx, sizeof idx, x->ndim, x->shape, in->worst_index));
            else
                gct_cell_set(&row[7], GCT_PLAIN, "%s",
                             gct_index_text(idx, sizeof idx, x->ndim, x->shape, in->worst_index));
            gct_cell_set(&row[8], GCT_PLAIN, "%.10g", in->worst_analytic);
            gct_cell_set(&row[9], GCT_PLAIN, "%.10g", in->worst_numeric);
        }
        gct_cell_set(&row[10], GCT_PLAIN, "%.2g", in->n_failed ? in->fail_excess : in->max_excess);
        gct_cell_set(&row[11], gct_verdict_tone(in->verdict), "%s", gct_verdict_word(in->verdict));
        first = false;
    }
    case_names_note(T, &names, tg->label, tg->c.spec);
    return names.wl ? TG_VERDICT_WRONG : names.il ? TG_VERDICT_INCONCLUSIVE : TG_VERDICT_PASS;
}

/* One check of tg at seed s with opts o: *r; each element into L when
 * --elements. False when the check raised an error (in the context). */
static bool run_check(tg_ctx *ctx, const gct_args *a, gct_target *tg, uint64_t s, tg_gradcheck_result *r, elem_list *L,
                      check_totals *T) {
    tg_gradcheck_opts o = gct_target_opts(tg, a, s);
    if (a->elements) {
        L->n = 0;
        o.each = collect_element;
        o.each_user = L;
    }
    double t0 = gct_now();
    if (a->order == 2) gct_order2_check(ctx, tg, &o, r);
    else gct_target_check(ctx, tg, &o, r);
    T->check_secs += gct_now() - t0;
    return tg_ok(ctx);
}

/* ---- a batch over seeds ------------------------------------------------------------ */

/* Per input of a case: what its seeds gave. */
typedef struct batch_input {
    int64_t runs, pass, wrong, inconclusive; /* the seeds that ran, by verdict */
    tg_gradcheck_reason reason;              /* the first inconclusive seed's */
    double *rel, *ratio, *excess;            /* per seed: max |a - n| / G, worst ratio, excess */
    double *pred;                            /* per seed: the predicted error / G (as rel) */
    tg_gradcheck_verdict *verdict;
} batch_input;

static void batch_free(batch_input *B, int n) {
    for (int k = 0; k < n; k++) {
        free(B[k].pred);
        free(B[k].rel);
        free(B[k].ratio);
        free(B[k].excess);
        free(B[k].verdict);
    }
}

static void json_quantiles(FILE *f, const char *key, double *v, int64_t n) {
    fprintf(f, "\"%s\":{\"p50\":", key);
    gct_json_num(f, gct_quantile(v, n, 0.5));
    fprintf(f, ",\"p90\":");
    gct_json_num(f, gct_quantile(v, n, 0.9));
    fprintf(f, ",\"p99\":");
    gct_json_num(f, gct_quantile(v, n, 0.99));
    fprintf(f, ",\"max\":");
    gct_json_num(f, gct_quantile(v, n, 1.0));
    fprintf(f, "}");
}

/* The median excess of an input's seeds with verdict v (for the note). */
static double batch_excess(const batch_input *b, tg_gradcheck_verdict v) {
    double *e = malloc((size_t)(b->runs ? b->runs : 1) * sizeof *e);
    int64_t m = 0;
    for (int64_t i = 0; e && i < b->runs; i++)
        if (b->verdict[i] == v) e[m++] = b->excess[i];
    double q = e && m ? gct_quantile(e, m, 0.5) : NAN;
    free(e);
    return q;
}

/* Runs the case over every seed. Returns -1, or the exit status of a
 * usage error (a --shape that does not build).
 * Long: a batch is one loop over seeds whose rows, JSON and error notes
 * share its state; not yet split into steps. */
static int check_batch(tg_ctx *ctx, const gct_args *a, const tg_op_info *op, const gct_bug *bug, const char *spec,
                       gct_table *t, check_totals *T, char *errors, size_t *el, size_t esize, char *function,
                       tg_gradcheck_result *first, bool *have_first, bool *op_shown) {
    uint64_t s0 = gct_first_seed(a);
    int64_t n = gct_seed_count(a);
    batch_input B[TG_GRADCHECK_MAX_INPUTS];
    memset(B, 0, sizeof B);
    gct_target tg;
    elem_list L = {0};
    bool json = a->format == GCT_JSON, opened = false;
    int64_t n_errors = 0;
    uint32_t folded = 0; /* --mode fast: inputs folded into another's row */
    char first_error[512] = "";
    for (int64_t i = 0; i < n; i++) {
        uint64_t s = s0 + (uint64_t)i;
        tg_ctx_reset(ctx);
        if (!gct_target_make(ctx, a, op, bug, spec, a->dtype, s, &tg)) {
            batch_free(B, TG_GRADCHECK_MAX_INPUTS);
            free(L.e);
            if (a->shape || i > 0) return gct_build_failed(ctx);
            if (*el < esize)
                *el += (size_t)snprintf(errors + *el, esize - *el, "    ERROR %s: %s\n", spec, tg_error_message(ctx));
            T->inputs.errors++;
            T->runs.errors++;
            note_failure(T, "error", op->def->name, spec, "does not build");
            *op_shown = true;
            tg_clear_error(ctx);
            return -1;
        }
        if (i == 0) {
            snprintf(function, 160, "%s", tg.function);
            for (int k = 0; k < tg.c.n_inputs; k++) {
                if (!(tg.c.check >> k & 1u)) continue;
                B[k].rel = malloc((size_t)n * sizeof(double));
                B[k].ratio = malloc((size_t)n * sizeof(double));
                B[k].excess = malloc((size_t)n * sizeof(double));
                B[k].pred = malloc((size_t)n * sizeof(double));
                B[k].verdict = malloc((size_t)n * sizeof(tg_gradcheck_verdict));
                if (!B[k].rel || !B[k].ratio || !B[k].excess || !B[k].pred || !B[k].verdict) {
                    batch_free(B, TG_GRADCHECK_MAX_INPUTS);
                    fprintf(stderr, "tapegrad-gradcheck: out of memory\n");
                    return GCT_EXIT_ERROR;
                }
            }
            if (json && T->json.batches) {
                /* the batch, held until the checks are written */
                FILE *f = T->json.batches;
                fprintf(f, "%s\n{\"op\":", T->json.n_batches++ ? "," : "");
                gct_json_str(f, tg.op->def->name);
                fprintf(f, ",\"bug\":");
                if (tg.bug) gct_json_str(f, tg.bug->name);
                else fprintf(f, "null");
                fprintf(f, ",\"function\":");
                gct_json_str(f, tg.bug ? tg.function : tg.op->def->name);
                fprintf(f, ",\"spec\":");
                gct_json_str(f, tg.c.spec);
                fprintf(f, ",\"dtype\":\"%s\",\"order\":%d,\"mode\":\"rev\",\"seeds\":[", tg_dtype_name(tg.c.dtype),
                        a->order);
                for (int64_t q = 0; q < n; q++) fprintf(f, "%s%llu", q ? "," : "", (unsigned long long)(s0 + q));
                fprintf(f, "]");
                opened = true;
            }
        }
        gct_cover_add(&T->cover, &tg);
        if (a->save_inputs) {
            char dir[4096];
            snprintf(dir, sizeof dir, "%s/s%llu", a->save_inputs, (unsigned long long)s);
            if (!gct_save_inputs(&tg, dir)) {
                batch_free(B, TG_GRADCHECK_MAX_INPUTS);
                free(L.e);
                return GCT_EXIT_ERROR;
            }
        }
        tg_gradcheck_result r;
        bool ok = run_check(ctx, a, &tg, s, &r, &L, T);
        print_run(ctx, a, &tg, &r, &L, ok, s, T);
        if (!ok) {
            if (!n_errors++) snprintf(first_error, sizeof first_error, "%s", tg_error_message(ctx));
            T->runs.errors++;
            tg_clear_error(ctx);
            continue;
        }
        gct_fast_name(ctx, &tg, &r); /* --mode fast: one row for the inputs together (after the JSON) */
        gct_tally_add(&T->runs, r.verdict);
        if (!*have_first) *first = r, *have_first = true;
        folded |= r.joint & (r.joint - 1); /* all but the lowest: it holds the one comparison */
        for (int k = 0; k < tg.c.n_inputs; k++) {
            const tg_gradcheck_input *in = &r.input[k];
            if (!in->checked || !B[k].rel) continue;
            batch_input *b = &B[k];
            b->rel[b->runs] = in->grad_scale > 0 ? in->max_abs_err / in->grad_scale : in->max_abs_err;
            b->pred[b->runs] = in->grad_scale > 0 ? in->pred_max / in->grad_scale : in->pred_max;
            b->ratio[b->runs] = in->worst_ratio;
            b->excess[b->runs] = in->n_failed ? in->fail_excess : in->max_excess;
            b->verdict[b->runs] = in->verdict;
            b->runs++;
            if (in->verdict == TG_VERDICT_PASS) b->pass++;
            else if (in->verdict == TG_VERDICT_WRONG) b->wrong++;
            else if (!b->inconclusive++) b->reason = in->reason;
        }
    }
    free(L.e);
    FILE *jf = T->json.batches;
    if (opened) fprintf(jf, ",\"runs\":%lld,\"errors\":%lld,\"inputs\":[", (long long)n, (long long)n_errors);

    /* the rows: one per input */
    bool first_row = true, first_json_input = true;
    case_names names = {0};
    T->cases++;
    for (int k = 0; k < tg.c.n_inputs; k++) {
        batch_input *b = &B[k];
        if (!b->rel || folded >> k & 1u) continue;
        /* the input over its seeds: wrong if any seed is, else inconclusive
         * if any seed is (or did not run), else pass */
        tg_gradcheck_verdict v = b->wrong                         ? TG_VERDICT_WRONG
                                 : b->inconclusive || b->runs < n ? TG_VERDICT_INCONCLUSIVE
                                                                  : TG_VERDICT_PASS;
        tg_gradcheck_reason why = b->inconclusive ? b->reason : TG_REASON_ERROR;
        if (b->runs > 0) gct_tally_add(&T->inputs, v); /* an input no seed ran: the case's error */
        if (v != TG_VERDICT_PASS && b->runs > 0) {
            note_input(T, &tg, k, v, why, batch_excess(b, v));
            case_name_add(&names, tg.c.input_names[k], v, why);
        }
        double rate = (double)b->pass / (double)n;
        if (opened) {
            fprintf(jf, "%s{\"name\":", first_json_input ? "" : ",");
            first_json_input = false;
            gct_json_str(jf, tg.c.input_names[k]);
            fprintf(jf,
                    ",\"runs\":%lld,\"pass\":%lld,\"wrong\":%lld,\"inconclusive\":%lld,\"verdict\":\"%s\","
                    "\"reason\":\"%s\",\"pass_rate\":",
                    (long long)b->runs, (long long)b->pass, (long long)b->wrong, (long long)b->inconclusive,
                    tg_gradcheck_verdict_name(v),
                    tg_gradcheck_reason_name(v == TG_VERDICT_INCONCLUSIVE ? why : TG_REASON_NONE));
            gct_json_num(jf, rate);
            fprintf(jf, ",");
            json_quantiles(jf, "rel_err", b->rel, b->runs);
            fprintf(jf, ",");
            json_quantiles(jf, "ratio", b->ratio, b->runs);
            fprintf(jf, ",");
            json_quantiles(jf, "excess", b->excess, b->runs);
            fprintf(jf, ",");
            json_quantiles(jf, "pred_rel", b->pred, b->runs);
            /* null for --mode fast's joint row (x+gamma+...): each check's
             * "coverage" gives its inputs one by one */
            const gct_cover_row *cr = gct_cover_find(&T->cover, tg.c.spec, tg.c.input_names[k]);
            fprintf(jf, ",\"coverage\":");
            if (cr) gct_json_cover_row(jf, cr);
            else fprintf(jf, "null");
            fprintf(jf, "}");
        }
        if (a->format != GCT_TEXT || (a->quiet && v == TG_VERDICT_PASS) || b->runs == 0) continue;
        gct_cell *row = gct_table_row(t);
        if (!row) break;
        if (first_row) gct_table_group(t);
        gct_cell_set(&row[0], GCT_PLAIN, "%s", first_row ? tg.c.spec : "");
        gct_cell_set(&row[1], GCT_PLAIN, "%s", tg.c.input_names[k]);
        gct_cell_set(&row[2], GCT_PLAIN, "%lld", (long long)n);
        gct_cell_set(&row[3], b->wrong ? GCT_BAD : GCT_PLAIN, "%lld", (long long)b->wrong);
        gct_cell_set(&row[4], b->inconclusive ? GCT_BOLD : GCT_PLAIN, "%lld", (long long)b->inconclusive);
        gct_cell_set(&row[5], gct_verdict_tone(v), "%.1f%%", 100.0 * rate);
        double q50 = gct_quantile(b->rel, b->runs, 0.5), q90 = gct_quantile(b->rel, b->runs, 0.9),
               qmax = gct_quantile(b->rel, b->runs, 1.0);
        fmt_err(&row[6], q50);
        fmt_err(&row[7], q90);
        fmt_err(&row[8], qmax);
        fmt_err(&row[9], gct_quantile(b->pred, b->runs, 0.5));
        gct_cell_set(&row[10], GCT_PLAIN, "%.2g", gct_quantile(b->ratio, b->runs, 0.5));
        gct_cell_set(&row[11], GCT_PLAIN, "%.2g", gct_quantile(b->ratio, b->runs, 1.0));
        gct_cell_set(&row[12], GCT_PLAIN, "%.2g", gct_quantile(b->excess, b->runs, 1.0));
        gct_cell_set(&row[13], gct_verdict_tone(v), "%s", gct_verdict_word(v));
        first_row = false;
    }
    if (opened) fprintf(jf, "]}");
    batch_free(B, TG_GRADCHECK_MAX_INPUTS);
    if (n_errors) {
        /* a seed that stopped on an error checked nothing: the case is
         * counted once as an error, its inputs not as failures */
        T->inputs.errors++;
        if (*el < esize)
            *el += (size_t)snprintf(errors + *el, esize - *el, "    ERROR %s: %lld of %lld seeds, the first: %s\n",
                                    tg.c.spec, (long long)n_errors, (long long)n, first_error);
        char what[64];
        snprintf(what, sizeof what, "%lld of %lld seeds stopped on an error", (long long)n_errors, (long long)n);
        note_failure(T, "error", tg.label, tg.c.spec, what);
    }
    case_names_note(T, &names, tg.label, tg.c.spec);
    if (n_errors || names.wl || names.il) *op_shown = true;
    return -1;
}

/* ---- one op --------------------------------------------------------------------- */

/* Checks one op (every variant, or a->shape), at one seed or over --seeds.
 * Returns -1, or the exit status when a spec given on the command line was
 * refused (printed).
 * Long: one loop over the variants with the table, the diagnosis and the
 * extra text it collects; not yet split into steps. */
static int check_op(tg_ctx *ctx, const gct_args *a, const tg_op_info *op, const gct_bug *bug, check_totals *T) {
    bool batch = a->n_seeds > 0, text = a->format == GCT_TEXT;
    gct_table t;
    if (batch)
        gct_table_init(&t, "lllrrrrrrrrrrl", "spec", "input", "seeds", "wrong", "inconcl.", "pass rate", "rel err p50",
                       "p90", "max", "pred p50", "err/tol p50", "max", "err/pred max", "result");
    else
        gct_table_init(&t, "lllrrlrlrrrl", "spec", "input", "shape", "failed", "max abs err",
                       "predicted = trunc + round", "max rel err", "worst at", "analytic", "numeric", "err/pred",
                       "result");
    int n_specs = a->shape || bug ? 1 : op->n_variants;
    tg_gradcheck_result first = {0};
    bool have_first = false, op_shown = false;
    char function[160] = "";
    char errors[1024] = "", diag[8192] = "";
    size_t el = 0, dl = 0;
    elem_list L = {0};
    /* --elements and --print-inputs: printed under the op's table */
    char *extra_text = NULL;
    size_t extra_len = 0;
    FILE *extra = text && (a->elements || a->print_inputs) ? open_memstream(&extra_text, &extra_len) : NULL;
    for (int v = 0; v < n_specs; v++) {
        const char *spec = a->shape ? a->shape : bug ? NULL : op->variants[v];
        if (batch) {
            int st = check_batch(ctx, a, op, bug, spec, &t, T, errors, &el, sizeof errors, function, &first,
                                 &have_first, &op_shown);
            tg_ctx_reset(ctx);
            if (st >= 0) {
                gct_table_free(&t);
                if (extra) fclose(extra);
                free(extra_text);
                return st;
            }
            continue;
        }
        gct_target tg;
        /* a spec's inputs do not depend on the order of the run */
        if (!gct_target_make(ctx, a, op, bug, spec, a->dtype, a->seed, &tg)) {
            if (a->shape || a->n_ctl) {
                gct_table_free(&t);
                free(L.e);
                if (extra) fclose(extra);
                free(extra_text);
                return gct_build_failed(ctx);
            }
            /* a built-in variant that does not build is a bug of the registry */
            if (el < sizeof errors)
                el += (size_t)snprintf(errors + el, sizeof errors - el, "    ERROR %s: %s\n", spec,
                                       tg_error_message(ctx));
            T->inputs.errors++;
            T->runs.errors++;
            note_failure(T, "error", op->def->name, spec, "does not build");
            op_shown = true;
            tg_clear_error(ctx);
            tg_ctx_reset(ctx);
            continue;
        }
        if (a->save_inputs && !gct_save_inputs(&tg, a->save_inputs)) {
            gct_table_free(&t);
            free(L.e);
            if (extra) fclose(extra);
            free(extra_text);
            return GCT_EXIT_ERROR;
        }
        snprintf(function, sizeof function, "%s", tg.function);
        gct_cover_add(&T->cover, &tg);
        tg_gradcheck_result r;
        bool ok = run_check(ctx, a, &tg, a->seed, &r, &L, T);
        T->cases++;
        print_run(ctx, a, &tg, &r, &L, ok, a->seed, T);
        if (!ok) {
            if (el < sizeof errors)
                el += (size_t)snprintf(errors + el, sizeof errors - el, "    ERROR %s: %s\n", tg.c.spec,
                                       tg_error_message(ctx));
            /* nothing was checked: one error, no input counted as failing */
            T->inputs.errors++;
            T->runs.errors++;
            note_failure(T, "error", tg.label, tg.c.spec, "stopped on an error");
            op_shown = true;
            tg_clear_error(ctx);
        } else {
            gct_fast_name(ctx, &tg, &r); /* --mode fast: one row for the inputs together (after the JSON) */
            if (!have_first) first = r, have_first = true;
            gct_tally_add(&T->runs, r.verdict);
            if (add_case_rows(&t, &tg, &r, a->quiet || !text, T) != TG_VERDICT_PASS) op_shown = true;
            if (text && r.verdict == TG_VERDICT_WRONG) { /* the diagnosis, under the table (diagnose.c) */
                tg_gradcheck_opts o = gct_target_opts(&tg, a, a->seed);
                tg_gradcheck_result rd = r; /* --mode fast: localized first (fast.c) */
                dl += gct_fast_localize(ctx, &tg, &o, &rd, diag + dl, sizeof diag - dl);
                dl += gct_diagnose_case(ctx, a, &tg, &o, &rd, diag + dl, sizeof diag - dl);
            }
            if (text && extra && a->elements) print_elements_text(extra, &tg, &L, a->color);
        }
        if (text && extra && a->print_inputs) {
            fprintf(extra, "\n  inputs of %s (input seed %llu):\n", tg.c.spec,
                    (unsigned long long)gct_input_seed(a, a->seed));
            gct_print_inputs(extra, &tg, 4);
        }
        tg_ctx_reset(ctx);
    }
    free(L.e);
    T->ops++;
    if (text && (!a->quiet || op_shown)) {
        printf("%s", T->ops > 1 || a->quiet ? "\n" : "");
        gct_put_title(a, op, bug, function);
        if (have_first) gct_put_settings(a, &first), gct_put_sources(a, op, first.dtype, "  ");
        if (t.nrows) {
            fputc('\n', stdout);
            gct_table_print(stdout, &t, 2, a->color);
        }
        gct_cover_print(stdout, &T->cover, a, 2);
        if (dl) printf("\n%s", diag);
        if (el) printf("\n%s", errors);
    }
    gct_cover_free(&T->cover);
    if (extra) {
        fclose(extra);
        if (extra_text) fputs(extra_text, stdout);
        free(extra_text);
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
    if (all && (a->n_ctl || a->r)) return gct_usage_error("inputs given by name are for one op, not 'all'");
    if (!all && !gct_resolve(a, a->name, &op, &bug)) return GCT_EXIT_USAGE;
    if (a->modes || a->adjoint) return gct_cmd_check_modes(a, op, bug); /* forward mode: modes.c */

    tg_ctx *ctx = gct_ctx_new(gct_first_seed(a));
    if (!ctx) return GCT_EXIT_ERROR;
    check_totals T;
    memset(&T, 0, sizeof T);
    T.f32 = a->dtype == TG_F32;
    if (a->format == GCT_JSON) gct_json_open(&T.json, a);
    if (a->format == GCT_CSV)
        printf("op,bug,spec,dtype,input_seed,probe_seed,%s\n",
               a->elements ? CSV_ELEMENT_COLUMNS : TG_GRADCHECK_CSV_COLUMNS);
    double t0 = gct_now();
    int refused = -1;
    if (all) {
        for (int i = 0; i < tg_registry_count() && refused < 0; i++)
            refused = check_op(ctx, a, tg_registry_get(i), NULL, &T);
    } else {
        refused = check_op(ctx, a, op, bug, &T);
    }
    tg_ctx_free(ctx);
    if (refused >= 0) {
        gct_cover_free(&T.cover);
        if (T.json.batches) fclose(T.json.batches);
        free(T.json.batch_text);
        return refused;
    }

    double secs = gct_now() - t0;
    int status = gct_tally_status(&T.inputs);
    int64_t n_inputs = T.inputs.pass + T.inputs.wrong + T.inputs.inconclusive;
    int64_t n_runs = T.runs.pass + T.runs.wrong + T.runs.inconclusive + T.runs.errors;
    if (a->format == GCT_JSON) {
        gct_json_checks_close(&T.json);
        gct_json_summary(a, &T.inputs, &T.runs, T.ops, T.cases, secs, T.check_secs);
        return status;
    }
    if (a->format == GCT_CSV) return status;
    printf("\n");
    gct_puts_tone(stdout, "summary:", GCT_BOLD, a->color);
    printf(" %d op%s, %d case%s", T.ops, T.ops == 1 ? "" : "s", T.cases, T.cases == 1 ? "" : "s");
    if (a->n_seeds) printf(" x %lld seeds", (long long)a->n_seeds);
    printf(", %lld input%s checked in %s (%s%s) in %.2f s", (long long)n_inputs, n_inputs == 1 ? "" : "s",
           tg_dtype_name(a->dtype), tg_gradcheck_mode_name(a->mode), a->order == 2 ? ", order 2" : "", secs);
    if (a->n_seeds)
        printf(" (%.1f us a check, %.1f us with making its inputs)", 1e6 * T.check_secs / (double)(n_runs ? n_runs : 1),
               1e6 * secs / (double)(n_runs ? n_runs : 1));
    printf(": ");
    gct_put_tally(&T.inputs, "input", a->color);
    if (a->n_seeds && status != GCT_EXIT_PASS) {
        printf(" (of %lld checks: ", (long long)n_runs);
        gct_put_tally(&T.runs, "", false);
        printf(")");
    }
    printf("%s\n", T.failures);
    gct_put_notes(T.notes, T.n_note, T.f32);
    return status;
}

/* `tapegrad-gradcheck check NAME|all --modes fwd,rev [--adjoint]`: the
 * forward-mode checks beside the reverse-mode one, as JAX's check_grads
 * does (modes=('fwd', 'rev')):
 *   rev      the backward against finite differences (tg_gradcheck, the
 *            plain `check`; --mode full|directional|jacobian applies)
 *   fwd      the JVP, J v from tg_jvp, against finite differences along v,
 *            every output element (tg_gradcheck_fwd)
 *   adjoint  <u, J v> (forward mode) against <J^T u, v> (reverse mode) for
 *            random u and v: no step h, a tolerance of a few roundings
 *            (tg_gradcheck_adjoint)
 * One table per op, a row per input and mode (and seed, with --seeds);
 * --format json gives every check (a case, seed and mode) with its full
 * result (json.c), csv one record per input, mode and seed. With --order 2
 * every mode runs on the first gradient g = J^T u: rev is gradgradcheck,
 * fwd and adjoint forward over reverse (tg_jvp through g's recorded double
 * backward) -- Hessian-vector products against differences of g and
 * against reverse over reverse.
 *
 * Layer: command (tool.h): called by check.c; calls the report, target and base layers. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tapegrad/op.h"
#include "tools/gradcheck/tool.h"

typedef struct modes_totals {
    int ops, cases, rows, errors;
    gct_tally tally; /* rows by verdict, and the errors */
    gct_tally runs;  /* checks (a case, seed and mode) by verdict */
    gct_json json;   /* --format json */
    char failures[2048];
    size_t flen;
    char errors_text[2048]; /* this op's errors, printed under its table */
    size_t elen;
} modes_totals;

static void fmt_num(gct_cell *c, const char *fmt, double v) {
    if (isnan(v)) gct_cell_set(c, GCT_BAD, "nan");
    else if (v == 0) gct_cell_set(c, GCT_PLAIN, "0");
    else gct_cell_set(c, GCT_PLAIN, fmt, v);
}

/* A row for --format csv: one per input, mode and seed. in is NULL for an
 * error (its message in `error`). */
static void csv_row(const gct_args *a, const gct_target *tg, uint64_t seed, const char *mode, int k,
                    const tg_gradcheck_input *in, const char *error) {
    char prefix[512];
    gct_csv_prefix(prefix, sizeof prefix, tg, gct_input_seed(a, seed), gct_probe_seed(a, seed));
    printf("%s%s,%s,", prefix, k >= 0 ? tg->c.input_names[k] : "", mode);
    if (in) {
        printf("%lld,%lld,%.17g,%.17g,%.17g,%.17g,%d,%s,%s,\n", (long long)in->n_checked, (long long)in->n_failed,
               in->max_abs_err, in->worst_analytic, in->worst_numeric, in->worst_ratio, in->pass ? 1 : 0,
               tg_gradcheck_verdict_name(in->verdict), tg_gradcheck_reason_name(in->reason));
    } else {
        printf(",,,,,,0,inconclusive,error,\"");
        for (const char *c = error; *c; c++) fputs(*c == '"' ? "\"\"" : (char[]){*c, 0}, stdout);
        printf("\"\n");
    }
}

/* The rows of one mode's result: one per checked input. */
static void add_rows(const gct_args *a, gct_table *t, const gct_target *tg, uint64_t seed, const char *mode,
                     const tg_gradcheck_result *r, bool *first, modes_totals *T) {
    for (int k = 0; k < tg->c.n_inputs; k++) {
        const tg_gradcheck_input *in = &r->input[k];
        if (!in->checked) continue;
        T->rows++;
        gct_tally_add(&T->tally, in->verdict);
        if (!in->pass && T->flen < sizeof T->failures)
            T->flen += (size_t)snprintf(
                T->failures + T->flen, sizeof T->failures - T->flen, "\n    %-12s  %s  %s: %s %s%s%s%s",
                gct_verdict_word(in->verdict), tg->label, tg->c.spec, tg->c.input_names[k], mode,
                in->verdict == TG_VERDICT_INCONCLUSIVE ? " (" : "",
                in->verdict == TG_VERDICT_INCONCLUSIVE ? tg_gradcheck_reason_name(in->reason) : "",
                in->verdict == TG_VERDICT_INCONCLUSIVE ? ")" : "");
        if (a->format == GCT_CSV) csv_row(a, tg, seed, mode, k, in, NULL);
        if (a->format != GCT_TEXT) continue;
        if (a->quiet && in->pass) continue;
        gct_cell *row = gct_table_row(t);
        if (!row) return;
        if (*first) gct_table_group(t);
        char sh[64], at[64];
        const tg_tensor *x = tg->c.inputs[k];
        if (!*first) gct_cell_set(&row[0], GCT_PLAIN, "%s", "");
        else if (a->n_seeds) gct_cell_set(&row[0], GCT_PLAIN, "%s  seed %llu", tg->c.spec, (unsigned long long)seed);
        else gct_cell_set(&row[0], GCT_PLAIN, "%s", tg->c.spec);
        gct_cell_set(&row[1], GCT_PLAIN, "%s", tg->c.input_names[k]);
        gct_cell_set(&row[2], GCT_PLAIN, "%s", gct_shape_text(sh, sizeof sh, x->ndim, x->shape));
        gct_cell_set(&row[3], GCT_PLAIN, "%s", mode);
        gct_cell_set(&row[4], in->n_failed ? GCT_BAD : GCT_PLAIN, "%lld/%lld", (long long)in->n_failed,
                     (long long)in->n_checked);
        fmt_num(&row[5], "%.2e", in->max_abs_err);
        if (in->n_checked == 0) gct_cell_set(&row[6], GCT_DIM, "-");
        else if (in->worst_index >= 0)
            gct_cell_set(&row[6], GCT_PLAIN, "%s", gct_index_text(at, sizeof at, x->ndim, x->shape, in->worst_index));
        else if (in->worst_output >= 0)
            gct_cell_set(&row[6], GCT_PLAIN, "out%s",
                         gct_index_text(at, sizeof at, tg->out->ndim, tg->out->shape, in->worst_output));
        else gct_cell_set(&row[6], GCT_PLAIN, "<u,Jv>");
        fmt_num(&row[7], "%.12g", in->worst_analytic);
        fmt_num(&row[8], "%.12g", in->worst_numeric);
        fmt_num(&row[9], "%.2g", in->worst_ratio);
        gct_cell_set(&row[10], gct_verdict_tone(in->verdict), "%s", gct_verdict_word(in->verdict));
        *first = false;
    }
}

/* One case in every mode asked for; an error is noted and the next mode runs. */
static void run_case(tg_ctx *ctx, const gct_args *a, gct_target *tg, uint64_t seed, gct_table *t, modes_totals *T,
                     bool *op_failed) {
    tg_gradcheck_opts o = gct_target_opts(tg, a, seed);
    bool first = true;
    const int modes = a->modes ? a->modes : GCT_MODE_REV;
    for (int m = 0; m < 3; m++) {
        tg_gradcheck_result r;
        const char *name = m == 0 ? "rev" : m == 1 ? "fwd" : "adjoint";
        bool ok = true;
        /* --order 2: the same modes on g = J^T u (gradcheck_order2.c):
         * rev is gradgradcheck, fwd and adjoint forward over reverse */
        bool two = a->order == 2;
        tg_tensor *const *in = tg->c.inputs;
        const int n = tg->c.n_inputs;
        if (m == 0 && (modes & GCT_MODE_REV))
            ok = (two ? gct_order2_check(ctx, tg, &o, &r) : gct_target_check(ctx, tg, &o, &r)) || tg_ok(ctx);
        else if (m == 1 && (modes & GCT_MODE_FWD))
            ok = (two ? tg_gradgradcheck_fwd : tg_gradcheck_fwd)(ctx, tg->fn, &tg->c, n, in, &o, &r) || tg_ok(ctx);
        else if (m == 2 && a->adjoint)
            ok = (two ? tg_gradgradcheck_adjoint : tg_gradcheck_adjoint)(ctx, tg->fn, &tg->c, n, in, &o, &r) ||
                 tg_ok(ctx);
        else continue;
        if (!ok) {
            T->errors++;
            T->tally.errors++;
            T->runs.errors++;
            gct_cell *row = a->format == GCT_TEXT ? gct_table_row(t) : NULL;
            if (a->format == GCT_CSV) csv_row(a, tg, seed, name, -1, NULL, tg_error_message(ctx));
            if (a->format == GCT_JSON) {
                gct_json_check_open(&T->json, a, tg, seed, name);
                gct_json_check_result(tg, ctx, NULL);
                printf("}");
            }
            if (row) {
                if (first) gct_table_group(t);
                gct_cell_set(&row[0], GCT_PLAIN, "%s", first ? tg->c.spec : "");
                gct_cell_set(&row[3], GCT_PLAIN, "%s", name);
                gct_cell_set(&row[10], GCT_BAD, "ERROR");
                first = false;
            }
            if (T->elen < sizeof T->errors_text)
                T->elen += (size_t)snprintf(T->errors_text + T->elen, sizeof T->errors_text - T->elen,
                                            "    ERROR %s (%s): %s\n", tg->c.spec, name, tg_error_message(ctx));
            if (T->flen < sizeof T->failures)
                T->flen += (size_t)snprintf(T->failures + T->flen, sizeof T->failures - T->flen,
                                            "\n    %-12s  %s  %s: %s", "error", tg->label, tg->c.spec, name);
            tg_clear_error(ctx);
            *op_failed = true;
            continue;
        }
        if (a->format == GCT_JSON) {
            gct_json_check_open(&T->json, a, tg, seed, name);
            gct_json_check_result(tg, ctx, &r);
            printf("}");
        }
        gct_tally_add(&T->runs, r.verdict);
        add_rows(a, t, tg, seed, name, &r, &first, T);
        if (!r.pass) *op_failed = true;
    }
}

static int modes_op(tg_ctx *ctx, const gct_args *a, const tg_op_info *op, const gct_bug *bug, modes_totals *T) {
    gct_table t;
    gct_table_init(&t, "llllrrlrrrl", "spec", "input", "shape", "mode", "failed", "max abs err", "worst at",
                   "analytic | fwd", "numeric | rev", "err/tol", "result");
    int n_specs = a->shape || bug ? 1 : op->n_variants;
    bool op_failed = false;
    char function[160] = "";
    for (int v = 0; v < n_specs; v++) {
        const char *spec = a->shape ? a->shape : bug ? NULL : op->variants[v];
        for (int64_t i = 0; i < gct_seed_count(a); i++) {
            const uint64_t seed = gct_first_seed(a) + (uint64_t)i;
            gct_target tg;
            if (!gct_target_make(ctx, a, op, bug, spec, a->dtype, seed, &tg)) {
                gct_table_free(&t);
                return gct_build_failed(ctx);
            }
            snprintf(function, sizeof function, "%s", tg.function);
            T->cases += i == 0; /* a case is a spec; --seeds runs it at each seed */
            run_case(ctx, a, &tg, seed, &t, T, &op_failed);
            tg_ctx_reset(ctx);
        }
    }
    T->ops++;
    if (a->format == GCT_TEXT && (!a->quiet || op_failed)) {
        printf("%s", T->ops > 1 || a->quiet ? "\n" : "");
        gct_put_title(a, op, bug, function);
        if (t.nrows) {
            fputc('\n', stdout);
            gct_table_print(stdout, &t, 2, a->color);
        }
        if (T->elen) printf("\n%s", T->errors_text);
    }
    T->elen = 0;
    gct_table_free(&t);
    return -1;
}

int gct_cmd_check_modes(const gct_args *a, const tg_op_info *op, const gct_bug *bug) {
    if (a->mode == TG_GRADCHECK_FAST)
        return gct_usage_error("--modes and --adjoint report one row per input and mode; --mode fast has one "
                               "comparison for all inputs (use --mode directional)");
    if (a->elements || a->print_inputs || a->save_inputs)
        return gct_usage_error("--modes and --adjoint report one row per input and mode (no --elements, "
                               "--print-inputs, --save-inputs)");
    tg_ctx *ctx = gct_ctx_new(gct_first_seed(a));
    if (!ctx) return GCT_EXIT_ERROR;
    const int modes = a->modes ? a->modes : GCT_MODE_REV;
    modes_totals T;
    memset(&T, 0, sizeof T);
    if (a->format == GCT_JSON) gct_json_open(&T.json, a);
    else if (a->format == GCT_CSV)
        printf("op,bug,spec,dtype,input_seed,probe_seed,input,mode,checked,failed,max_abs_err,worst_analytic,"
               "worst_numeric,worst_ratio,pass,verdict,reason,error\n");
    else {
        printf("modes:%s%s%s  (%s, ", modes & GCT_MODE_REV ? " rev (backward vs differences)" : "",
               modes & GCT_MODE_FWD ? " fwd (J v from tg_jvp vs differences along v)" : "",
               a->adjoint ? " adjoint (<u, J v> forward vs <J^T u, v> reverse, no step)" : "", tg_dtype_name(a->dtype));
        if (a->n_seeds)
            printf("seeds %llu..%llu)\n", (unsigned long long)gct_first_seed(a),
                   (unsigned long long)(gct_first_seed(a) + gct_seed_count(a) - 1));
        else printf("seed %llu)\n", (unsigned long long)a->seed);
    }
    double t0 = gct_now();
    int st = -1;
    for (int i = 0; !op && i < tg_registry_count() && st < 0; i++) st = modes_op(ctx, a, tg_registry_get(i), NULL, &T);
    if (op) st = modes_op(ctx, a, op, bug, &T);
    tg_ctx_free(ctx);
    if (st >= 0) {
        if (T.json.batches) fclose(T.json.batches);
        free(T.json.batch_text);
        return st;
    }
    const int status = gct_tally_status(&T.tally);
    if (a->format == GCT_JSON) {
        /* the inputs of the summary: every row, an input in one mode */
        gct_json_checks_close(&T.json);
        gct_json_summary(a, &T.tally, &T.runs, T.ops, T.cases, gct_now() - t0, gct_now() - t0);
    }
    if (a->format != GCT_TEXT) return status;
    printf("\n");
    gct_puts_tone(stdout, "summary:", GCT_BOLD, a->color);
    printf(" %d op%s, %d case%s", T.ops, T.ops == 1 ? "" : "s", T.cases, T.cases == 1 ? "" : "s");
    if (a->n_seeds) printf(" x %lld seeds", (long long)a->n_seeds);
    printf(", %d check%s in %s in %.2f s: ", T.rows, T.rows == 1 ? "" : "s", tg_dtype_name(a->dtype), gct_now() - t0);
    gct_put_tally(&T.tally, "", a->color);
    printf("%s\n", T.failures);
    return status;
}

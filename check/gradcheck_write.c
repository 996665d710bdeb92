/* tg_gradcheck_write: a tg_gradcheck_result as text, JSON or CSV, so a
 * program (the tool, an experiment script) records what a check found
 * without re-implementing it. JSON has no NaN or infinity: they are
 * written as null; CSV writes them as nan, inf and -inf, which awk,
 * gnuplot, Python and R read back. */
#include <math.h>
#include <stdio.h>

#include "tapegrad/check.h"

/* A number for JSON: full precision, null when not finite. */
static void put_json_num(FILE *f, const char *key, double v, bool comma) {
    if (isfinite(v)) fprintf(f, "\"%s\":%.17g%s", key, v, comma ? "," : "");
    else fprintf(f, "\"%s\":null%s", key, comma ? "," : "");
}

/* A JSON string, with quotes, backslashes and control characters escaped. */
static void put_json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

/* Input k's name: names[k], else its number. */
static const char *input_name(const char *const *names, int k, char *buf, size_t size) {
    if (names && names[k]) return names[k];
    snprintf(buf, size, "%d", k);
    return buf;
}

/* The name of input k's row: its own, or in FAST mode, for the entry
 * holding the one comparison, every input it covers: "x+gamma+beta". */
static const char *row_name(const tg_gradcheck_result *r, const char *const *names, int k, char *buf, size_t size) {
    char one[16];
    if (!(r->joint >> k & 1u) || !(r->joint & ~((uint32_t)1 << k))) return input_name(names, k, buf, size);
    size_t len = 0;
    buf[0] = 0;
    for (int j = 0; j < r->n_inputs && len < size; j++)
        if (r->joint >> j & 1u)
            len +=
                (size_t)snprintf(buf + len, size - len, "%s%s", len ? "+" : "", input_name(names, j, one, sizeof one));
    return buf;
}

static void put_csv_num(FILE *f, double v) {
    if (isnan(v)) fputs("nan", f);
    else if (isinf(v)) fputs(v > 0 ? "inf" : "-inf", f);
    else fprintf(f, "%.17g", v);
}

static void write_json(FILE *f, const tg_gradcheck_result *r, const char *const *names) {
    char buf[16];
    fprintf(f, "{\"pass\":%s,\"verdict\":\"%s\",\"reason\":\"%s\",\"mode\":\"%s\",\"forward_diff\":%s,\"step\":\"%s\",",
            r->pass ? "true" : "false", tg_gradcheck_verdict_name(r->verdict), tg_gradcheck_reason_name(r->reason),
            tg_gradcheck_mode_name(r->mode), r->forward_diff ? "true" : "false", tg_gradcheck_step_name(r->step));
    put_json_num(f, "h", r->h, true);
    fprintf(f, "\"atol_scale\":\"%s\",", tg_gradcheck_atol_scale_name(r->atol_scale));
    put_json_num(f, "atol", r->atol, true);
    put_json_num(f, "rtol", r->rtol, true);
    fprintf(f, "\"dtype\":\"%s\",", tg_dtype_name(r->dtype));
    put_json_num(f, "eps", r->eps, true);
    fprintf(
        f, "\"seed\":%llu,\"n_checked\":%lld,\"n_failed\":%lld,\"n_wrong\":%lld,\"n_evals\":%lld,\"n_backwards\":%lld,",
        (unsigned long long)r->seed, (long long)r->n_checked, (long long)r->n_failed, (long long)r->n_wrong,
        (long long)r->n_evals, (long long)r->n_backwards);
    put_json_num(f, "max_abs_err", r->max_abs_err, true);
    put_json_num(f, "max_rel_err", r->max_rel_err, true);
    put_json_num(f, "max_excess", r->max_excess, true);
    put_json_num(f, "fail_excess", r->fail_excess, true);
    fprintf(f, "\"worst_input\":");
    if (r->worst_input >= 0) put_json_str(f, input_name(names, r->worst_input, buf, sizeof buf));
    else fputs("null", f);
    fprintf(f, ",\"worst_index\":%lld,\"worst_output\":%lld,", (long long)r->worst_index, (long long)r->worst_output);
    put_json_num(f, "worst_analytic", r->worst_analytic, true);
    put_json_num(f, "worst_numeric", r->worst_numeric, true);
    put_json_num(f, "worst_ratio", r->worst_ratio, true);
    fprintf(f, "\"step_vanished\":%s,\"vanished_input\":", r->step_vanished ? "true" : "false");
    if (r->vanished_input >= 0) put_json_str(f, input_name(names, r->vanished_input, buf, sizeof buf));
    else fputs("null", f);
    fprintf(f, ",\"vanished_index\":%lld,\"joint\":[", (long long)r->vanished_index);
    for (int k = 0, first = 1; k < r->n_inputs; k++)
        if (r->joint >> k & 1u)
            fputs(first ? "" : ",", f), put_json_str(f, input_name(names, k, buf, sizeof buf)), first = 0;
    fputs("],\"inputs\":[", f);
    for (int k = 0; k < r->n_inputs; k++) {
        const tg_gradcheck_input *in = &r->input[k];
        fprintf(f, "%s{\"name\":", k ? "," : "");
        put_json_str(f, input_name(names, k, buf, sizeof buf));
        fprintf(f,
                ",\"checked\":%s,\"pass\":%s,\"verdict\":\"%s\",\"reason\":\"%s\",\"n_checked\":%lld,\"n_failed\":%lld,"
                "\"n_wrong\":%lld,\"n_resolved\":%lld,\"constant\":%s,",
                in->checked ? "true" : "false", in->pass ? "true" : "false", tg_gradcheck_verdict_name(in->verdict),
                tg_gradcheck_reason_name(in->reason), (long long)in->n_checked, (long long)in->n_failed,
                (long long)in->n_wrong, (long long)in->n_resolved, in->constant ? "true" : "false");
        put_json_num(f, "max_abs_err", in->max_abs_err, true);
        put_json_num(f, "max_rel_err", in->max_rel_err, true);
        fprintf(f, "\"worst_index\":%lld,\"worst_output\":%lld,", (long long)in->worst_index,
                (long long)in->worst_output);
        put_json_num(f, "worst_analytic", in->worst_analytic, true);
        put_json_num(f, "worst_numeric", in->worst_numeric, true);
        put_json_num(f, "worst_ratio", in->worst_ratio, true);
        put_json_num(f, "worst_step", in->worst_step, true);
        put_json_num(f, "worst_bound", in->worst_bound, true);
        put_json_num(f, "step_min", in->step_min, true);
        put_json_num(f, "step_max", in->step_max, true);
        put_json_num(f, "scale", in->scale, true);
        put_json_num(f, "grad_scale", in->grad_scale, true);
        put_json_num(f, "atol_used", in->atol_used, true);
        put_json_num(f, "max_excess", in->max_excess, true);
        put_json_num(f, "fail_excess", in->fail_excess, true);
        put_json_num(f, "pred_max", in->pred_max, true);
        put_json_num(f, "pred_trunc", in->pred_trunc, true);
        put_json_num(f, "pred_round", in->pred_round, false);
        fputc('}', f);
    }
    fputs("]}", f);
}

static void write_csv(FILE *f, const tg_gradcheck_result *r, const char *const *names, const char *prefix) {
    char buf[256];
    for (int k = 0; k < r->n_inputs; k++) {
        const tg_gradcheck_input *in = &r->input[k];
        if (!in->checked) continue;
        fprintf(f, "%s%s,%d,%lld,%lld,", prefix ? prefix : "", row_name(r, names, k, buf, sizeof buf), in->pass ? 1 : 0,
                (long long)in->n_checked, (long long)in->n_failed);
        const double cols[] = {in->max_abs_err, in->max_rel_err};
        for (int c = 0; c < 2; c++) put_csv_num(f, cols[c]), fputc(',', f);
        fprintf(f, "%lld,%lld,", (long long)in->worst_index, (long long)in->worst_output);
        const double more[] = {in->worst_analytic, in->worst_numeric, in->worst_ratio, in->worst_step, in->worst_bound,
                               in->step_min,       in->step_max,      in->scale,       in->grad_scale, in->atol_used,
                               in->max_excess,     in->fail_excess,   in->pred_max,    in->pred_trunc, in->pred_round};
        for (size_t c = 0; c < sizeof more / sizeof more[0]; c++) put_csv_num(f, more[c]), fputc(',', f);
        fprintf(f, "%s,%s,", tg_gradcheck_mode_name(r->mode), tg_gradcheck_step_name(r->step));
        put_csv_num(f, r->h);
        fprintf(f, ",%s,", tg_gradcheck_atol_scale_name(r->atol_scale));
        put_csv_num(f, r->atol);
        fputc(',', f);
        put_csv_num(f, r->rtol);
        fprintf(f, ",%s,%llu,%d,%s,%s,%lld,%lld\n", tg_dtype_name(r->dtype), (unsigned long long)r->seed,
                r->forward_diff ? 1 : 0, tg_gradcheck_verdict_name(in->verdict), tg_gradcheck_reason_name(in->reason),
                (long long)in->n_wrong, (long long)in->n_resolved);
    }
}

static void write_text(FILE *f, const tg_gradcheck_result *r, const char *const *names) {
    char buf[256];
    fprintf(f, "%s%s%s: %lld of %lld comparisons failed, %lld wrong (%s, %s%s); h=%g %s, |a - n| <= %g%s + %g |n|\n",
            r->verdict == TG_VERDICT_PASS    ? "pass"
            : r->verdict == TG_VERDICT_WRONG ? "WRONG"
                                             : "INCONCLUSIVE",
            r->verdict == TG_VERDICT_INCONCLUSIVE ? " -- " : "",
            r->verdict == TG_VERDICT_INCONCLUSIVE ? tg_gradcheck_reason_name(r->reason) : "", (long long)r->n_failed,
            (long long)r->n_checked, (long long)r->n_wrong, tg_gradcheck_mode_name(r->mode), tg_dtype_name(r->dtype),
            r->forward_diff ? ", forward differences" : "", r->h,
            r->step == TG_GRADCHECK_STEP_SCALED    ? "x l_i"
            : r->step == TG_GRADCHECK_STEP_ELEMENT ? "x max(|x_i|, floor)"
                                                   : "absolute",
            r->atol, r->atol_scale == TG_GRADCHECK_ATOL_GRADIENT ? " G" : "", r->rtol);
    if (r->step_vanished)
        fprintf(f, "  the step vanished (input %d, element %lld)\n", r->vanished_input, (long long)r->vanished_index);
    if (r->joint & (r->joint - 1))
        fprintf(f, "  (fast mode: the one comparison below covers the inputs it names together; wrong says some "
                   "gradient among them is wrong, not which: rerun in directional or full mode to localize)\n");
    for (int k = 0; k < r->n_inputs; k++) {
        const tg_gradcheck_input *in = &r->input[k];
        if (!in->checked) continue;
        fprintf(f,
                "  %s: %s, %lld/%lld failed, max abs err %.3g, max rel err %.3g; worst %lld: analytic %.10g, numeric "
                "%.10g; predicted error %.3g there, up to %.3g (truncation %.3g + rounding %.3g) (max excess "
                "%.3g, over failures %.3g)\n",
                row_name(r, names, k, buf, sizeof buf), tg_gradcheck_verdict_name(in->verdict), (long long)in->n_failed,
                (long long)in->n_checked, in->max_abs_err, in->max_rel_err, (long long)in->worst_index,
                in->worst_analytic, in->worst_numeric, in->worst_bound, in->pred_max, in->pred_trunc, in->pred_round,
                in->max_excess, in->fail_excess);
    }
}

tg_status tg_gradcheck_write(FILE *f, const tg_gradcheck_result *r, const char *const *names,
                             tg_gradcheck_format format, const char *prefix) {
    if (!f || !r) return TG_ERR_NULL;
    switch (format) {
    case TG_GRADCHECK_TEXT: write_text(f, r, names); break;
    case TG_GRADCHECK_JSON: write_json(f, r, names); break;
    case TG_GRADCHECK_CSV: write_csv(f, r, names, prefix); break;
    default: return TG_ERR_VALUE;
    }
    return ferror(f) ? TG_ERR_IO : TG_OK;
}

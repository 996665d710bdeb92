/* The one JSON document every command of tapegrad-gradcheck writes with
 * --format json (schema GCT_JSON_SCHEMA; docs/gradcheck.md, "Results for
 * programs", describes every field, and tests/gradcheck_schema.py
 * validates every command's output against it):
 *
 *   {"schema": 1, "tool": "tapegrad-gradcheck", "version": "0.2.0",
 *    "command": "check" | "sweep" | "jacobian",
 *    "settings": {...the command line's...},
 *    "seeds": [every seed run, as a list],
 *    "checks": [CHECK, ...],   every check run: one per case, seed and mode
 *    "batches": [BATCH, ...],  per case over --seeds (else empty)
 *    "sweep": {...}            sweep only
 *    "jacobians": [...]        jacobian only
 *    "summary": {...}}
 *
 * A CHECK is the case (op, bug, function, spec, dtype, input_names), its
 * seeds, order and mode (rev, fwd, adjoint), what its inputs covered
 * ("coverage": per input the range, signs, decades and the op's regions
 * seen and not seen), then "result" (the library's
 * tg_gradcheck_write object) or "error", and on request "elements" and
 * "values". Numbers carry 17 significant digits; NaN and infinities are
 * null. Checks are written as they run; batches are held until the checks
 * are done.
 *
 * Layer: report (tool.h): calls the base. */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/gradcheck/tool.h"

void gct_json_str(FILE *out, const char *s) {
    fputc('"', out);
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(out, "\\%c", c);
        else if (c < 0x20) fprintf(out, "\\u%04x", c);
        else fputc(c, out);
    }
    fputc('"', out);
}

void gct_json_num(FILE *out, double v) {
    if (isfinite(v)) fprintf(out, "%.17g", v);
    else fputs("null", out);
}

static void json_opt_num(const char *key, double v) {
    printf(",\"%s\":", key);
    if (isnan(v)) printf("null");
    else gct_json_num(stdout, v);
}

void gct_json_open(gct_json *j, const gct_args *a) {
    memset(j, 0, sizeof *j);
    j->batches = open_memstream(&j->batch_text, &j->batch_len);
    printf("{\"schema\":%d,\"tool\":\"tapegrad-gradcheck\",\"version\":\"%d.%d.%d\",\"command\":", GCT_JSON_SCHEMA,
           TAPEGRAD_VERSION_MAJOR, TAPEGRAD_VERSION_MINOR, TAPEGRAD_VERSION_PATCH);
    gct_json_str(stdout, a->command);
    printf(",\"settings\":{\"op\":");
    if (a->name) gct_json_str(stdout, a->name);
    else printf("null");
    printf(",\"inject\":");
    if (a->inject) gct_json_str(stdout, a->inject);
    else printf("null");
    printf(",\"shape\":");
    if (a->shape) gct_json_str(stdout, a->shape);
    else printf("null");
    printf(",\"dtype\":");
    if (!strcmp(a->command, "sweep") && !a->dtype_set) printf("null");
    else printf("\"%s\"", tg_dtype_name(a->dtype));
    printf(",\"mode\":\"%s\",\"order\":%d,\"modes\":[", tg_gradcheck_mode_name(a->mode), a->order);
    const char *sep = "";
    if (!a->modes || (a->modes & 1)) printf("\"rev\""), sep = ",";
    if (a->modes & 2) printf("%s\"fwd\"", sep), sep = ",";
    if (a->adjoint) printf("%s\"adjoint\"", sep);
    printf("],\"scheme\":\"%s\",\"step\":\"%s\",\"atol_scale\":\"%s\"", a->schemes == 2 ? "forward" : "central",
           tg_gradcheck_step_name(a->step), tg_gradcheck_atol_scale_name(a->atol_scale));
    json_opt_num("h", a->h);
    json_opt_num("atol", a->atol);
    json_opt_num("rtol", a->rtol);
    printf(",\"cover\":%s},\"seeds\":[", a->cover ? "true" : "false");
    uint64_t s0 = gct_first_seed(a);
    for (int64_t i = 0; i < gct_seed_count(a); i++) printf("%s%llu", i ? "," : "", (unsigned long long)(s0 + i));
    printf("],\"checks\":[");
}

/* The names of r's regions seen (or not seen) as a JSON list. */
static void json_region_names(FILE *out, const gct_cover_row *r, bool seen) {
    fprintf(out, "[");
    const char *sep = "";
    for (int j = 0; j < r->regions.n; j++) {
        if ((bool)(r->cov.seen >> j & 1u) != seen) continue;
        fprintf(out, "%s", sep);
        gct_json_str(out, r->regions.r[j].name);
        sep = ",";
    }
    fprintf(out, "]");
}

void gct_json_cover_row(FILE *out, const gct_cover_row *r) {
    const tg_coverage *c = &r->cov;
    fprintf(out, "{\"name\":");
    gct_json_str(out, r->name);
    fprintf(out, ",\"numel\":%lld,\"min\":", (long long)c->numel);
    gct_json_num(out, c->min);
    fprintf(out, ",\"max\":");
    gct_json_num(out, c->max);
    fprintf(out, ",\"n_neg\":%lld,\"n_zero\":%lld,\"n_pos\":%lld,\"decade_min\":", (long long)c->n_neg,
            (long long)c->n_zero, (long long)c->n_pos);
    if (c->decade_min > c->decade_max) fprintf(out, "null,\"decade_max\":null");
    else fprintf(out, "%d,\"decade_max\":%d", c->decade_min, c->decade_max);
    fprintf(out, ",\"regions_seen\":");
    json_region_names(out, r, true);
    fprintf(out, ",\"regions_not_seen\":");
    json_region_names(out, r, false);
    fprintf(out, "}");
}

/* ,"coverage":[...]: what each differentiable input of t held. */
static void json_coverage(const gct_target *t) {
    printf(",\"coverage\":[");
    const char *sep = "";
    for (int k = 0; k < t->c.n_inputs; k++) {
        if (!(t->c.check >> k & 1u)) continue;
        gct_cover_row r;
        memset(&r, 0, sizeof r);
        snprintf(r.name, sizeof r.name, "%s", t->c.input_names[k]);
        r.regions = t->regions[k];
        r.cov = t->cov[k];
        printf("%s", sep);
        gct_json_cover_row(stdout, &r);
        sep = ",";
    }
    printf("]");
}

void gct_json_check_open(gct_json *j, const gct_args *a, const gct_target *t, uint64_t seed, const char *mode) {
    printf("%s\n{\"op\":", j->n_checks++ ? "," : "");
    gct_json_str(stdout, t->op->def->name);
    printf(",\"bug\":");
    if (t->bug) gct_json_str(stdout, t->bug->name);
    else printf("null");
    printf(",\"function\":");
    gct_json_str(stdout, t->bug ? t->function : t->op->def->name);
    printf(",\"spec\":");
    gct_json_str(stdout, t->c.spec);
    printf(",\"dtype\":\"%s\",\"input_names\":[", tg_dtype_name(t->c.dtype));
    for (int k = 0; k < t->c.n_inputs; k++) {
        if (k) printf(",");
        gct_json_str(stdout, t->c.input_names[k]);
    }
    printf("],\"seed\":%llu,\"input_seed\":%llu,\"probe_seed\":%llu,\"order\":%d,\"mode\":\"%s\"",
           (unsigned long long)seed, (unsigned long long)gct_input_seed(a, seed),
           (unsigned long long)gct_probe_seed(a, seed), a->order, mode);
    json_coverage(t);
}

void gct_json_check_result(const gct_target *t, tg_ctx *ctx, const tg_gradcheck_result *r) {
    if (r) {
        printf(",\"error\":null,\"result\":");
        tg_gradcheck_write(stdout, r, t->c.input_names, TG_GRADCHECK_JSON, NULL);
    } else {
        printf(",\"error\":");
        gct_json_str(stdout, tg_error_message(ctx));
        printf(",\"result\":null");
    }
}

void gct_json_checks_close(gct_json *j) {
    printf("],\n\"batches\":[");
    if (j->batches) {
        fclose(j->batches);
        j->batches = NULL;
        if (j->batch_text) fputs(j->batch_text, stdout);
    }
    free(j->batch_text);
    j->batch_text = NULL;
    printf("]");
}

void gct_json_summary(const gct_args *a, const gct_tally *inputs, const gct_tally *runs, int ops, int cases,
                      double secs, double check_secs) {
    (void)a;
    int status = gct_tally_status(inputs);
    printf(",\n\"summary\":{\"verdict\":\"%s\",\"pass\":%s,\"exit_status\":%d,\"ops\":%d,\"cases\":%d",
           status == GCT_EXIT_PASS    ? "pass"
           : status == GCT_EXIT_WRONG ? "wrong"
                                      : "inconclusive",
           status == GCT_EXIT_PASS ? "true" : "false", status, ops, cases);
    printf(",\"inputs\":{\"pass\":%lld,\"wrong\":%lld,\"inconclusive\":%lld,\"errors\":%lld}", (long long)inputs->pass,
           (long long)inputs->wrong, (long long)inputs->inconclusive, (long long)inputs->errors);
    printf(",\"checks\":{\"pass\":%lld,\"wrong\":%lld,\"inconclusive\":%lld,\"errors\":%lld}", (long long)runs->pass,
           (long long)runs->wrong, (long long)runs->inconclusive, (long long)runs->errors);
    printf(",\"seconds\":");
    gct_json_num(stdout, secs);
    printf(",\"check_seconds\":");
    gct_json_num(stdout, check_secs);
    printf("}}\n");
}

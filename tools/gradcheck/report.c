/* What the reports of tapegrad-gradcheck share: quantiles over seeds, the
 * pieces of JSON and CSV output, the settings line under a title, and the
 * note that says whether a failure is the check's own error. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tools/gradcheck/tool.h"

static int cmp_double(const void *pa, const void *pb) {
    double a = *(const double *)pa, b = *(const double *)pb;
    if (isnan(a)) return isnan(b) ? 0 : 1;
    if (isnan(b)) return -1;
    return (a > b) - (a < b);
}

double gct_quantile(double *v, int64_t n, double q) {
    if (n <= 0) return NAN;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    double pos = q * (double)(n - 1);
    int64_t lo = (int64_t)floor(pos), hi = lo + 1 < n ? lo + 1 : lo;
    double f = pos - (double)lo;
    if (isnan(v[hi]) || isnan(v[lo])) return v[hi];
    return f == 0 ? v[lo] : v[lo] + f * (v[hi] - v[lo]);
}

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

void gct_json_head(const char *command, const tg_op_info *op, const gct_bug *bug, const char *spec) {
    printf("{\"tool\":\"tapegrad-gradcheck\",\"command\":\"%s\",\"op\":", command);
    gct_json_str(stdout, op->def->name);
    printf(",\"bug\":");
    if (bug) gct_json_str(stdout, bug->name);
    else printf("null");
    printf(",\"spec\":");
    gct_json_str(stdout, spec);
}

void gct_json_num(FILE *out, double v) {
    if (isfinite(v)) fprintf(out, "%.17g", v);
    else fputs("null", out);
}

void gct_csv_prefix(char *buf, size_t size, const gct_target *t, uint64_t input_seed, uint64_t probe_seed) {
    int n = snprintf(buf, size, "%s,%s,", t->op->def->name, t->bug ? t->bug->name : "");
    for (const char *p = t->c.spec; *p && n > 0 && (size_t)n + 2 < size; p++) buf[n++] = *p == ',' ? ';' : *p;
    if (n > 0 && (size_t)n < size)
        snprintf(buf + n, size - (size_t)n, ",%s,%llu,%llu,", tg_dtype_name(t->c.dtype), (unsigned long long)input_seed,
                 (unsigned long long)probe_seed);
}

void gct_put_sources(const gct_args *a, const tg_op_info *op, tg_dtype dtype, const char *indent) {
    tg_gradcheck_tol own = dtype == TG_F32 ? op->def->f32 : op->def->f64, def = tg_gradcheck_dtype_tol(dtype);
    const char *names[3] = {"h", "atol", "rtol"};
    double given[3] = {a->h, a->atol, a->rtol}, owns[3] = {own.h, own.atol, own.rtol},
           defs[3] = {def.h, def.atol, def.rtol};
    printf("%sstep and tolerances: ", indent);
    for (int i = 0; i < 3; i++) {
        printf("%s%s %g ", i ? ", " : "", names[i], !isnan(given[i]) ? given[i] : owns[i] > 0 ? owns[i] : defs[i]);
        if (!isnan(given[i])) printf("(given)");
        else if (owns[i] > 0) printf("(%s's own for %s, its descriptor)", op->def->name, tg_dtype_name(dtype));
        else printf("(the %s default)", tg_dtype_name(dtype));
    }
    printf("\n");
}

void gct_put_settings(const gct_args *a, const tg_gradcheck_result *r) {
    const char *what = r->mode == TG_GRADCHECK_FULL          ? "every element"
                       : r->mode == TG_GRADCHECK_DIRECTIONAL ? "one random direction per input"
                                                             : "every Jacobian entry";
    printf("  %s, %s, %s differences h=%g", tg_dtype_name(r->dtype), what, r->forward_diff ? "forward" : "central",
           r->h);
    if (r->step == TG_GRADCHECK_STEP_SCALED) printf(", relative steps h l_i (l_i: the element's length scale)");
    else if (r->step == TG_GRADCHECK_STEP_ELEMENT) printf(", relative steps h max(|x_i|, floor)");
    printf(", passes when |analytic - numeric| <= %g%s + %g |numeric|", r->atol,
           r->atol_scale == TG_GRADCHECK_ATOL_GRADIENT ? " G" : "", r->rtol);
    if (r->atol_scale == TG_GRADCHECK_ATOL_GRADIENT) printf(" (G: the gradient's scale)");
    uint64_t s0 = gct_first_seed(a);
    int64_t n = gct_seed_count(a);
    if (n > 1) {
        printf(", seeds %llu..%llu", (unsigned long long)s0, (unsigned long long)(s0 + (uint64_t)n - 1));
        if (a->input_seed_set) printf(" (inputs fixed at seed %llu)", (unsigned long long)a->input_seed);
        if (a->probe_seed_set) printf(" (probe fixed at seed %llu)", (unsigned long long)a->probe_seed);
    } else if (a->input_seed_set || a->probe_seed_set) {
        printf(", input seed %llu, probe seed %llu", (unsigned long long)gct_input_seed(a, s0),
               (unsigned long long)gct_probe_seed(a, s0));
    } else {
        printf(", seed %llu", (unsigned long long)s0);
    }
    printf("\n");
}

/* Above this many times the predicted error, a failure is not the check's. */
#define GCT_EXCESS_WRONG 4.0

void gct_put_excess_note(const double *excess, const char *const *names, int n, bool f32) {
    if (n <= 0) return;
    printf("\n  note: each failing input's error against the error the check itself makes at its step --\n"
           "  rounding from the dtype's epsilon and the outputs a step moves, truncation from h and the length\n"
           "  scale l (docs/gradcheck.md):\n");
    for (int k = 0; k < n; k++) {
        double e = excess[k];
        if (!isfinite(e)) printf("    %s: not finite: a derivative that is NaN or infinite, not round-off\n", names[k]);
        else if (e > GCT_EXCESS_WRONG)
            printf("    %s: %.3g times the predicted error: a wrong backward, not the check\n", names[k], e);
        else if (e > 1)
            printf("    %s: %.2g times the predicted error, just above it: not conclusive; check in float64 or\n"
                   "      at another h\n",
                   names[k], e);
        else
            printf("    %s: within the predicted error (%.2g of it): the check's own %s, not a wrong backward;\n"
                   "      %s\n",
                   names[k], e, f32 ? "round-off" : "error",
                   f32 ? "try the op's best step (sweep), or check in float64, where a wrong backward stands out"
                       : "try the best step (sweep)");
    }
}

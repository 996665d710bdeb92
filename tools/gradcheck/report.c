/* What the reports of tapegrad-gradcheck share: quantiles over seeds, the
 * start of a CSV row, the title and settings lines, the tally of verdicts
 * and the note that says, for an input that did not pass, whether the
 * backward is wrong or the check could not decide.
 *
 * Layer: report (tool.h): calls the base. */
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

void gct_csv_prefix(char *buf, size_t size, const gct_target *t, uint64_t input_seed, uint64_t probe_seed) {
    int n = snprintf(buf, size, "%s,%s,", t->op->def->name, t->bug ? t->bug->name : "");
    for (const char *p = t->c.spec; *p && n > 0 && (size_t)n + 2 < size; p++) buf[n++] = *p == ',' ? ';' : *p;
    if (n > 0 && (size_t)n < size)
        snprintf(buf + n, size - (size_t)n, ",%s,%llu,%llu,", tg_dtype_name(t->c.dtype), (unsigned long long)input_seed,
                 (unsigned long long)probe_seed);
}

void gct_put_title(const gct_args *a, const tg_op_info *op, const gct_bug *bug, const char *function) {
    gct_puts_tone(stdout, op->def->name, GCT_BOLD, a->color);
    if (!bug) {
        printf("  %s\n", op->summary);
        return;
    }
    printf("  with injected bug ");
    gct_puts_tone(stdout, bug->name, GCT_BAD, a->color);
    printf(": %s\n  function checked: %s\n", bug->what, function);
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

/* What a one-direction mode can and cannot catch, under the settings. */
static void put_reach(tg_gradcheck_mode mode) {
    if (mode == TG_GRADCHECK_DIRECTIONAL)
        printf("  directional: per input one number, (J^T r) . v_k, v_k random: a wrong gradient of input k is caught "
               "unless its error is nearly orthogonal to v_k (probability ~0 for an error above the tolerance); it "
               "says which input is wrong, not which element (--mode full)\n");
    else if (mode == TG_GRADCHECK_FAST)
        printf("  fast: one number for all inputs, (J^T r) . u, u random over every input at once: a wrong gradient "
               "is caught unless its error is nearly orthogonal to u -- errors in two inputs cancel only by chance "
               "(probability ~0), but an input with a small gradient is held to the scale of all of them; it says "
               "neither which input nor which element is wrong (--mode directional, full)\n");
}

void gct_put_settings(const gct_args *a, const tg_gradcheck_result *r) {
    const char *what = r->mode == TG_GRADCHECK_FULL          ? "every element"
                       : r->mode == TG_GRADCHECK_DIRECTIONAL ? "one random direction per input"
                       : r->mode == TG_GRADCHECK_FAST        ? "one random direction over all inputs at once"
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
    put_reach(r->mode);
}

void gct_tally_add(gct_tally *t, tg_gradcheck_verdict v) {
    if (v == TG_VERDICT_PASS) t->pass++;
    else if (v == TG_VERDICT_WRONG) t->wrong++;
    else t->inconclusive++;
}

int gct_tally_status(const gct_tally *t) {
    return t->wrong ? GCT_EXIT_WRONG : t->inconclusive || t->errors ? GCT_EXIT_INCONCLUSIVE : GCT_EXIT_PASS;
}

int gct_verdict_status(tg_gradcheck_verdict v) {
    return v == TG_VERDICT_PASS ? GCT_EXIT_PASS : v == TG_VERDICT_WRONG ? GCT_EXIT_WRONG : GCT_EXIT_INCONCLUSIVE;
}

void gct_put_tally(const gct_tally *t, const char *unit, bool color) {
    if (!t->wrong && !t->inconclusive && !t->errors) {
        gct_puts_tone(stdout, "all pass", GCT_GOOD, color);
        return;
    }
    /* the unit (pluralized) on the first count only: "2 inputs WRONG, 1 inconclusive" */
    const int64_t counts[2] = {t->wrong, t->inconclusive};
    const char *words[2] = {"WRONG", "inconclusive"};
    const char *sep = "";
    for (int i = 0; i < 2; i++) {
        if (!counts[i]) continue;
        char buf[160];
        snprintf(buf, sizeof buf, "%lld%s%s%s %s", (long long)counts[i], *sep || !*unit ? "" : " ", *sep ? "" : unit,
                 *sep || !*unit || counts[i] == 1 ? "" : "s", words[i]);
        fputs(sep, stdout);
        gct_puts_tone(stdout, buf, i == 0 ? GCT_BAD : GCT_BOLD, color);
        sep = ", ";
    }
    if (t->errors) printf("%s%lld error%s", sep, (long long)t->errors, t->errors == 1 ? "" : "s"), sep = ", ";
    if (t->pass) printf("%s%lld pass", sep, (long long)t->pass);
}

const char *gct_verdict_word(tg_gradcheck_verdict v) {
    return v == TG_VERDICT_PASS ? "pass" : v == TG_VERDICT_WRONG ? "WRONG" : "inconclusive";
}

gct_tone gct_verdict_tone(tg_gradcheck_verdict v) {
    return v == TG_VERDICT_PASS ? GCT_GOOD : v == TG_VERDICT_WRONG ? GCT_BAD : GCT_BOLD;
}

tg_gradcheck_verdict gct_verdict_join(tg_gradcheck_verdict a, tg_gradcheck_verdict b) {
    if (a == TG_VERDICT_WRONG || b == TG_VERDICT_WRONG) return TG_VERDICT_WRONG;
    if (a == TG_VERDICT_INCONCLUSIVE || b == TG_VERDICT_INCONCLUSIVE) return TG_VERDICT_INCONCLUSIVE;
    return TG_VERDICT_PASS;
}

void gct_put_notes(const gct_note *notes, int n, bool f32) {
    if (n <= 0) return;
    printf("\n  note: against the error the check itself makes at its step -- rounding from the dtype's\n"
           "  epsilon and the outputs a step moves, truncation measured at h/2 and h/4 (docs/gradcheck-guide.md):\n");
    /* one paragraph per kind, its inputs under it */
    enum { K_WRONG, K_NAN, K_UNRESOLVED, K_ALL_ZERO, K_EMPTY, K_ERROR, K_N };
    static const char *const what[K_N] = {
        "WRONG: beyond %g times the check's own error, so the backward is wrong, not the check",
        "WRONG: a derivative that is NaN or infinite where the differences are finite",
        "inconclusive: a failure by no more than the check's own error at this step (or a numeric\n"
        "    side that is not finite): the check cannot decide there",
        "inconclusive: no comparison saw a gradient -- both sides (near) zero, or f(x+h) == f(x-h) in\n"
        "    the dtype -- so a backward that gave 0 would pass too",
        "inconclusive: nothing to compare (no elements)",
        "inconclusive: the check stopped on an error (above)",
    };
    const char *advice[K_N] = {NULL,
                               NULL,
                               f32 ? "try the op's best step (sweep), or check in float64"
                                   : "try the best step (sweep)",
                               f32 ? "check where the gradient is not zero (--scale, --dist), or in float64"
                                   : "check where the gradient is not zero (--scale, --dist)",
                               NULL,
                               NULL};
    for (int kind = 0; kind < K_N; kind++) {
        bool any = false;
        for (int k = 0; k < n; k++) {
            const gct_note *e = &notes[k];
            int ek = e->verdict == TG_VERDICT_WRONG      ? (isfinite(e->excess) ? K_WRONG : K_NAN)
                     : e->reason == TG_REASON_UNRESOLVED ? K_UNRESOLVED
                     : e->reason == TG_REASON_ALL_ZERO   ? K_ALL_ZERO
                     : e->reason == TG_REASON_EMPTY      ? K_EMPTY
                                                         : K_ERROR;
            if (ek != kind) continue;
            if (!any) {
                printf("  ");
                printf(what[kind], TG_GRADCHECK_WRONG_EXCESS);
                printf("%s\n", advice[kind] ? ";" : ":");
                if (advice[kind]) printf("    %s:\n", advice[kind]);
                any = true;
            }
            if (kind == K_WRONG || kind == K_UNRESOLVED)
                printf("      %s: %.3g times the check's own error\n", e->name, e->excess);
            else printf("      %s\n", e->name);
        }
    }
}

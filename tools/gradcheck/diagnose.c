/* The diagnosis under a failing `check` table: for each input found wrong,
 * tg_gradcheck_diagnose's reading of analytic - numeric Jacobian (which
 * input, where, the likely cause), and for an op with an eps argument the
 * experiment that exposes a missing eps: the same inputs at eps / 1000. A
 * difference that shrinks with eps (and would vanish at eps = 0) is a
 * statistic computed without eps in the backward.
 *
 * Layer: analysis (tool.h): called by check.c; calls the target and base layers. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/text.h"
#include "tools/gradcheck/tool.h"

/* Jacobians above this many entries are not diagnosed (time and memory). */
#define DIAG_MAX_ENTRIES ((int64_t)1 << 20)

/* The max |a - n| of input k with the case's eps divided by 1000 (the same
 * inputs: the same seed); NAN when that cannot run. */
static double err_at_smaller_eps(tg_ctx *ctx, const gct_args *a, const gct_target *t, int k, double eps) {
    char spec[sizeof t->c.spec], *p;
    snprintf(spec, sizeof spec, "%s", t->c.spec);
    if ((p = strstr(spec, ";eps=")) != NULL) {
        char *end = strchr(p + 1, ';');
        memmove(p, end ? end : p + strlen(p), strlen(end ? end : p + strlen(p)) + 1);
    }
    size_t n = strlen(spec);
    snprintf(spec + n, sizeof spec - n, ";eps=%.17g", eps / 1000);
    uint64_t seed, offset;
    tg_rng_state(ctx, &seed, &offset);
    gct_target t2;
    double err = NAN;
    if (gct_target_make(ctx, a, t->op, t->bug, spec, t->c.dtype, a->seed, &t2)) {
        tg_gradcheck_opts o = gct_target_opts(&t2, a, a->seed);
        o.inputs = 1u << k;
        tg_gradcheck_result r;
        if (gct_target_check(ctx, &t2, &o, &r) || tg_ok(ctx)) err = r.input[k].max_abs_err;
    }
    tg_clear_error(ctx);
    tg_rng_set_state(ctx, seed, offset);
    return err;
}

size_t gct_diagnose_case(tg_ctx *ctx, const gct_args *a, gct_target *t, const tg_gradcheck_opts *o,
                         const tg_gradcheck_result *r, char *buf, size_t size) {
    if (!size) return 0;
    tg_text b = tg_text_buf(buf, size);
    for (int k = 0; k < t->c.n_inputs; k++) {
        const tg_gradcheck_input *in = &r->input[k];
        if (!in->checked || in->verdict != TG_VERDICT_WRONG) continue;
        const tg_tensor *x = t->c.inputs[k];
        char sh[64];
        gct_shape_text(sh, sizeof sh, x->ndim, x->shape);
        tg_text_printf(&b, "  diagnosis of %s %s (%s):", t->c.input_names[k], sh, t->c.spec);
        if (t->out->numel * x->numel > DIAG_MAX_ENTRIES) {
            tg_text_printf(&b, " its Jacobian is too big to read here (%lld x %lld); rerun with a smaller --shape\n",
                           (long long)t->out->numel, (long long)x->numel);
            continue;
        }
        tg_gradcheck_diagnosis d;
        tg_gradcheck_opts od = *o;
        od.mode = TG_GRADCHECK_FULL;
        if (!tg_gradcheck_diagnose(ctx, t->fn, &t->c, t->c.n_inputs, t->c.inputs, k, &od, &d)) {
            tg_text_printf(&b, " could not run: %s\n", tg_error_message(ctx));
            tg_clear_error(ctx);
            continue;
        }
        tg_text_printf(&b, " %s\n    where:        %s\n    found:        %s\n", tg_diagnosis_name(d.kind),
                       d.where[0] ? d.where : "(no element beyond the tolerance in the Jacobians)", d.finding);
        if (d.kind == TG_DIAG_NONE)
            snprintf(d.cause, sizeof d.cause, "%s",
                     "no structure beyond the tolerance of the whole Jacobian, whose largest entries set it: the "
                     "failing comparisons are small against them (see --elements, or jacobian with a smaller "
                     "--shape)");
        /* the check's own numbers, the ones its verdict and the note use */
        double off = fabs(in->worst_analytic - in->worst_numeric);
        tg_text_printf(
            &b,
            "    check error:  the worst comparison is off by %.3g where the check itself may err by %.2g at its "
            "step (rounding + truncation measured at h/2 and h/4), %.3g times that; the failing comparisons are up "
            "to %.3g times theirs, beyond %g: the backward is wrong, not the check\n",
            off, in->worst_bound, in->worst_bound > 0 ? off / in->worst_bound : INFINITY, in->fail_excess,
            TG_GRADCHECK_WRONG_EXCESS);
        const char *eps_text = tg_registry_arg(&t->c, "eps");
        double eps = eps_text ? strtod(eps_text, NULL) : 0;
        if ((d.kind == TG_DIAG_UNSTRUCTURED || d.kind == TG_DIAG_ROW_SCALE) && eps > 0) {
            double e2 = err_at_smaller_eps(ctx, a, t, k, eps);
            if (e2 < in->max_abs_err / 30) {
                tg_text_printf(
                    &b,
                    "    eps test:     max |analytic - numeric| %.3g at eps = %g, %.3g at eps = %g: the difference "
                    "shrinks with eps\n",
                    in->max_abs_err, eps, e2, eps / 1000);
                tg_text_printf(&b,
                               "    likely cause: a missing eps: the backward computes a statistic (rstd) without eps; "
                               "the error grows as eps / mean(x^2) grows and vanishes at eps -> 0\n");
                continue;
            }
            if (!isnan(e2))
                tg_text_printf(
                    &b, "    eps test:     max |analytic - numeric| %.3g at eps = %g, %.3g at eps = %g: not eps\n",
                    in->max_abs_err, eps, e2, eps / 1000);
        }
        tg_text_printf(&b, "    likely cause: %s\n", d.cause);
    }
    return tg_text_kept(&b);
}

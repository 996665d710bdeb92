/* The exercises' runner (exercise.h). */
#include "exercise.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int usage(const char *prog, int status) {
    fprintf(status ? stderr : stdout,
            "usage: %s [--seed N]\n"
            "Checks the backward you wrote in this exercise against finite differences and,\n"
            "when it is wrong, says where and what the likely mistake is.\n",
            prog);
    return status;
}

int tg_exercise_main(int argc, char **argv, tg_exercise *e, bool (*make_inputs)(tg_ctx *ctx, tg_exercise *e)) {
    uint64_t seed = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return usage(argv[0], 0);
        if (!strcmp(argv[i], "--seed") && i + 1 < argc) {
            char *end;
            seed = strtoull(argv[++i], &end, 10);
            if (*end || argv[i][0] == '-') return usage(argv[0], 2);
        } else {
            return usage(argv[0], 2);
        }
    }
    tg_ctx *ctx = tg_ctx_new(seed);
    if (!ctx) {
        fprintf(stderr, "%s: out of memory\n", e->name);
        return 3;
    }
    int status = 3;
    tg_gradcheck_result r;
    tg_gradcheck_opts o = tg_gradcheck_defaults();
    if (!make_inputs(ctx, e)) goto out;
    o.inputs = e->check;
    printf("exercise %s\n", e->name);
    bool pass = tg_gradcheck(ctx, e->f, e->user, e->n_inputs, e->inputs, &o, &r);
    if (!tg_ok(ctx)) {
        printf("  your op stopped with an error: %s\n", tg_error_message(ctx));
        status = 1;
        goto out;
    }
    for (int k = 0; k < e->n_inputs; k++) {
        const tg_gradcheck_input *in = &r.input[k];
        if (!in->checked) continue;
        printf("  d%-6s %s  (%lld/%lld elements wrong, max |yours - numeric| %.3g)\n", e->input_names[k],
               in->verdict == TG_VERDICT_PASS    ? "right"
               : in->verdict == TG_VERDICT_WRONG ? "WRONG"
                                                 : "undecided",
               (long long)in->n_wrong, (long long)in->n_checked, in->max_abs_err);
    }
    if (pass) {
        printf("solved: every gradient matches central differences (float64, h = %g)\n", r.h);
        status = 0;
        goto out;
    }
    for (int k = 0; k < e->n_inputs; k++) {
        if (!r.input[k].checked || r.input[k].verdict != TG_VERDICT_WRONG) continue;
        tg_gradcheck_diagnosis d;
        if (!tg_gradcheck_diagnose(ctx, e->f, e->user, e->n_inputs, e->inputs, k, &o, &d)) {
            printf("  (no diagnosis: %s)\n", tg_error_message(ctx));
            tg_clear_error(ctx);
            continue;
        }
        printf("\n  d%s: %s\n    where:        %s\n", e->input_names[k], tg_diagnosis_name(d.kind), d.where);
        /* the check counts the elements its weighted sum finds off; the
         * diagnosis the Jacobian columns that differ: a column can differ
         * while its weighted sum stays within the tolerance */
        if (d.n_wrong != r.input[k].n_wrong)
            printf(
                "                  (%lld of them beyond the check's tolerance in its weighted sum, the count above)\n",
                (long long)r.input[k].n_wrong);
        printf("    found:        %s\n    likely cause: %s\n", d.finding, d.cause);
    }
    printf("\nnot solved yet: the derivation is in %s\n", e->guide);
    status = 1;
out:
    if (status == 3) fprintf(stderr, "%s: %s\n", e->name, tg_error_message(ctx));
    tg_ctx_free(ctx);
    return status;
}

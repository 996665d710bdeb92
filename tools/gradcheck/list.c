/* `tapegrad-gradcheck list`: every registered op and layer with its spec
 * (options), built-in shape variants and inputs, then the seeded bugs.
 *
 * Layer: command (tool.h): calls the target and base layers. */
#include <string.h>

#include "tools/gradcheck/tool.h"

#define WRAP 100

/* Prints `label` padded to `lw` columns at `indent`, then the words of
 * text wrapped at WRAP columns, continuation lines under the text.
 * `sep` separates the words (" " for prose; a list uses "  "). */
static void put_wrapped(const char *label, int indent, int lw, const char *const *words, int n, const char *sep) {
    int col = printf("%*s%-*s", indent, "", lw, label);
    int start = col;
    for (int i = 0; i < n; i++) {
        int w = (int)strlen(words[i]);
        int s = i ? (int)strlen(sep) : 0;
        if (i && col + s + w > WRAP) {
            printf("\n%*s", start, "");
            col = start;
            s = 0;
        } else if (i) {
            fputs(sep, stdout);
        }
        fputs(words[i], stdout);
        col += s + w;
    }
    fputc('\n', stdout);
}

/* Splits prose into words in buf (modified) and prints it wrapped. */
static void put_prose(const char *label, int indent, int lw, const char *text) {
    char buf[1024];
    const char *words[256];
    int n = 0;
    snprintf(buf, sizeof buf, "%s", text);
    for (char *p = strtok(buf, " "); p && n < 256; p = strtok(NULL, " ")) words[n++] = p;
    put_wrapped(label, indent, lw, words, n, " ");
}

/* What --cover draws for each differentiable input of c: its domain, the
 * decades of |x|, the kinks kept apart from, and the number of regions. */
static void put_cover_regions(tg_ctx *ctx, const tg_op_case *c) {
    for (int k = 0, first = 1; k < c->n_inputs; k++) {
        tg_regions r;
        if (!(c->check >> k & 1u)) continue;
        if (!tg_registry_regions(ctx, c, k, &r)) {
            printf("      %-10s%s: %s\n", "--cover", c->input_names[k], tg_error_message(ctx));
            tg_clear_error(ctx);
            continue;
        }
        printf("      %-10s%s: %s, |x| %g..%g by decade%s", first ? "--cover" : "", c->input_names[k],
               r.positive  ? "positive"
               : r.nonzero ? "both signs, not 0"
                           : "both signs",
               r.mag_lo, r.mag_hi, r.positive || r.nonzero ? "" : " and below");
        for (int j = 0; j < r.n_kinks; j++) printf("%s%g", j ? ", " : ", near ", r.kinks[j]);
        printf("%s (%d regions)\n", r.distinct ? ", values apart" : "", r.n);
        first = 0;
    }
}

/* Long: one entry per op, then the bug catalogue, printed in order; not yet split into steps. */
int gct_cmd_list(const gct_args *a) {
    tg_ctx *ctx = gct_ctx_new(a->seed);
    if (!ctx) return GCT_EXIT_ERROR;
    int n_ops = tg_registry_count(), n_variants = 0;
    /* list NAME: that entry only */
    const tg_op_info *only = a->name ? tg_registry_find(a->name) : NULL;
    if (a->name && !only) {
        tg_ctx_free(ctx);
        return gct_usage_error("no registered op named '%s' (`tapegrad-gradcheck list` shows them)", a->name);
    }
    for (int i = 0; i < n_ops; i++) n_variants += tg_registry_get(i)->n_variants;
    if (!only) {
        printf("%d registered ops and layers, %d built-in shape variants\n", n_ops, n_variants);
        printf("(check NAME runs every variant; --shape SPEC runs one, a variant or your own)\n\n");
    }
    for (int i = 0; i < n_ops; i++) {
        const tg_op_info *op = tg_registry_get(i);
        if (only && op != only) continue;
        printf("  ");
        gct_puts_tone(stdout, op->def->name, GCT_BOLD, a->color);
        printf("%*s%s%s\n", 20 - (int)strlen(op->def->name) > 1 ? 20 - (int)strlen(op->def->name) : 1, "", op->summary,
               op->random ? "  [random: one mask per check]" : "");
        put_prose("spec", 6, 10, op->spec_help);
        /* the inputs of the first variant, with their shapes */
        tg_op_case c;
        char line[512] = "", sh[64];
        size_t n = 0;
        if (tg_registry_build(ctx, op, NULL, TG_F64, &c)) {
            for (int k = 0; k < c.n_inputs && n < sizeof line; k++)
                n += (size_t)snprintf(line + n, sizeof line - n, "%s%s %s%s", k ? ", " : "", c.input_names[k],
                                      gct_shape_text(sh, sizeof sh, c.inputs[k]->ndim, c.inputs[k]->shape),
                                      c.check >> k & 1u ? "" : " (not differentiated)");
            if (c.n_index && n < sizeof line)
                snprintf(line + n, sizeof line - n, "; %lld integer indices", (long long)c.n_index);
            printf("      %-10s%s  (for %s)\n", "inputs", line, c.spec);
            /* how the builder draws each input: it shapes what a Jacobian looks like */
            for (int k = 0; k < c.n_inputs; k++)
                if (c.input_dist[k]) printf("      %-10s%s: %s\n", k ? "" : "drawn", c.input_names[k], c.input_dist[k]);
            put_cover_regions(ctx, &c);
        } else {
            printf("      %-10s(the first variant does not build: %s)\n", "inputs", tg_error_message(ctx));
            tg_clear_error(ctx);
        }
        put_wrapped("variants", 6, 10, (const char *const *)op->variants, op->n_variants, "   ");
        /* its own step and tolerances, where it has them */
        for (int d = 0; d < 2; d++) {
            tg_gradcheck_tol own = d ? op->def->f32 : op->def->f64;
            const char *names[3] = {"h", "atol", "rtol"};
            double vals[3] = {own.h, own.atol, own.rtol};
            char text[128] = "";
            size_t n = 0;
            for (int k = 0; k < 3 && n < sizeof text; k++)
                if (vals[k] > 0) n += (size_t)snprintf(text + n, sizeof text - n, " %s=%g", names[k], vals[k]);
            if (n)
                printf("      %-10s%s%s%s (the rest: the defaults)\n", "own", tg_dtype_name(d ? TG_F32 : TG_F64), text,
                       d ? " (relative: h l_i)" : "");
        }
        fputc('\n', stdout);
        tg_ctx_reset(ctx);
    }
    if (only) {
        tg_ctx_free(ctx);
        return GCT_EXIT_PASS;
    }

    printf(
        "seeded bugs (--inject BUG: a known-wrong backward in place of the op's; the report must find it WRONG)\n\n");
    gct_table t;
    gct_table_init(&t, "llll", "bug", "op", "function checked", "what is wrong");
    for (int i = 0; i < gct_bug_count(); i++) {
        const gct_bug *b = gct_bug_get(i);
        gct_target tg;
        gct_cell *row = gct_table_row(&t);
        if (!row) break;
        gct_cell_set(&row[0], GCT_BOLD, "%s", b->name);
        gct_cell_set(&row[1], GCT_PLAIN, "%s", b->op);
        /* the function of the default spec */
        if (gct_target_build(ctx, tg_registry_find(b->op), b, NULL, TG_F64, &tg))
            gct_cell_set(&row[2], GCT_PLAIN, "%s", tg.function);
        else gct_cell_set(&row[2], GCT_BAD, "(%s)", tg_error_message(ctx));
        gct_cell_set(&row[3], GCT_PLAIN, "%s", b->what);
        tg_clear_error(ctx);
        tg_ctx_reset(ctx);
    }
    gct_table_print(stdout, &t, 2, a->color);
    gct_table_free(&t);
    tg_ctx_free(ctx);
    for (int i = 0; i < gct_bug_count(); i++) {
        const gct_bug *b = gct_bug_get(i);
        if (b->then_once)
            printf("\n  %s: add ;uses=1 to the spec (--shape '%s;uses=1') to check the op with %s: the bug hides "
                   "there\n",
                   b->name, b->default_spec, b->then_once + 2);
    }
    printf("\ne.g.  tapegrad-gradcheck check --inject rmsnorm-sum\n");
    return GCT_EXIT_PASS;
}

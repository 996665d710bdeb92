/* `check --mode fast`: one comparison over every input at once
 * (TG_GRADCHECK_FAST: 2 forwards in all, where directional mode and
 * PyTorch's fast mode take 2 per input). The library records it in the
 * entry of the first checked input and leaves the others unchecked
 * (result.joint); here that entry is named after every input it covers
 * ("x+gamma+beta"), so the table, the notes and JSON do not blame one
 * input for the whole. A wrong verdict says only that some gradient is
 * wrong: the tool then localizes it with a directional check of the same
 * case (two forwards per input), whose per-input verdicts the diagnosis
 * reads.
 *
 * Layer: analysis (tool.h): called by check.c; calls the target and base layers. */
#include <string.h>

#include "tensor/text.h"
#include "tools/gradcheck/tool.h"

bool gct_fast_joint(const tg_gradcheck_result *r) { return (r->joint & (r->joint - 1)) != 0; }

void gct_fast_name(tg_ctx *ctx, gct_target *t, const tg_gradcheck_result *r) {
    if (!gct_fast_joint(r)) return;
    char name[256];
    size_t len = 0;
    int first = -1;
    name[0] = 0;
    for (int k = 0; k < t->c.n_inputs && len < sizeof name; k++) {
        if (!(r->joint >> k & 1u)) continue;
        if (first < 0) first = k;
        len += (size_t)snprintf(name + len, sizeof name - len, "%s%s", len ? "+" : "", t->c.input_names[k]);
    }
    /* the joint name, then after its NUL the input's own (gct_fast_localize
     * gives it back) */
    if (first < 0) return;
    len = strlen(name) + 1;
    size_t own = strlen(t->c.input_names[first]) + 1;
    char *kept = tg_arena_alloc(ctx, len + own);
    if (!kept) return; /* out of memory: the first input's own name stays */
    memcpy(kept, name, len);
    memcpy(kept + len, t->c.input_names[first], own);
    t->c.input_names[first] = kept;
}

/* Gives the input named by gct_fast_name its own name back. */
static void own_name(gct_target *t, const tg_gradcheck_result *r) {
    for (int k = 0; k < t->c.n_inputs; k++) {
        if (!(r->joint >> k & 1u)) continue;
        const char *name = t->c.input_names[k];
        if (strchr(name, '+')) t->c.input_names[k] = name + strlen(name) + 1;
        return;
    }
}

size_t gct_fast_localize(tg_ctx *ctx, gct_target *t, tg_gradcheck_opts *o, tg_gradcheck_result *r, char *buf,
                         size_t size) {
    if (!size || !gct_fast_joint(r) || r->verdict != TG_VERDICT_WRONG) return 0;
    tg_text b = tg_text_buf(buf, size);
    tg_gradcheck_opts od = *o;
    od.mode = TG_GRADCHECK_DIRECTIONAL;
    od.inputs = r->joint;
    tg_gradcheck_result rd;
    own_name(t, r);
    tg_text_printf(&b, "  fast mode found a wrong gradient but cannot say which input's (one comparison over");
    for (int k = 0, n = 0; k < t->c.n_inputs; k++)
        if (r->joint >> k & 1u) tg_text_printf(&b, "%s %s", n++ ? "," : "", t->c.input_names[k]);
    tg_text_printf(&b, "); a directional check of the same case, one direction per input, says:");
    if (!gct_target_check(ctx, t, &od, &rd) && !tg_ok(ctx)) {
        tg_text_printf(&b, " it could not run: %s\n", tg_error_message(ctx));
        tg_clear_error(ctx);
        return tg_text_kept(&b);
    }
    for (int k = 0, n = 0; k < t->c.n_inputs; k++)
        if (rd.input[k].checked)
            tg_text_printf(&b, "%s %s %s", n++ ? "," : "", t->c.input_names[k], gct_verdict_word(rd.input[k].verdict));
    tg_text_printf(&b, "%s\n",
                   rd.verdict == TG_VERDICT_WRONG ? ""
                                                  : " (rerun with --mode full: a single direction "
                                                    "per input can miss what the joint one saw)");
    *o = od;
    *r = rd;
    return tg_text_kept(&b);
}

/* check --order 2: the target's gradgradcheck (tg_gradgradcheck,
 * check/gradcheck_order2.c): its first gradient, a function of the
 * inputs, checked like any function -- the double backward against
 * differences of plain backwards. Everything else of `check` (seeds,
 * formats, --inject, --elements) is unchanged. */
#include "tool.h"

bool gct_order2_check(tg_ctx *ctx, gct_target *t, const tg_gradcheck_opts *o, tg_gradcheck_result *r) {
    return tg_gradgradcheck(ctx, t->fn, &t->c, t->c.n_inputs, t->c.inputs, o, r);
}

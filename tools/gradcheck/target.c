/* What tapegrad-gradcheck checks: a registered op on inputs built from a
 * spec, or the same inputs run through an injected bug's function. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tools/gradcheck/tool.h"

tg_ctx *gct_ctx_new(uint64_t seed) {
    tg_ctx *ctx = tg_ctx_new(seed);
    if (!ctx) fprintf(stderr, "tapegrad-gradcheck: out of memory\n");
    return ctx;
}

bool gct_resolve(const gct_args *a, const char *name, const tg_op_info **op, const gct_bug **bug) {
    *op = NULL;
    *bug = NULL;
    if (a->inject) {
        *bug = gct_bug_find(a->inject);
        if (!*bug) {
            gct_usage_error("unknown bug '%s' for --inject (`tapegrad-gradcheck list` shows the catalogue)", a->inject);
            return false;
        }
        if (name && strcmp(name, (*bug)->op) != 0) {
            gct_usage_error("bug '%s' is injected into %s, not %s (leave NAME out, or give %s)", (*bug)->name,
                            (*bug)->op, name, (*bug)->op);
            return false;
        }
        name = (*bug)->op;
    }
    if (!name) {
        gct_usage_error("%s needs an op NAME (`tapegrad-gradcheck list` shows them)", a->command);
        return false;
    }
    *op = tg_registry_find(name);
    if (!*op) {
        gct_usage_error("no registered op named '%s' (`tapegrad-gradcheck list` shows them)", name);
        return false;
    }
    return true;
}

int gct_begin(const gct_args *a, const tg_op_info **op, const gct_bug **bug, tg_ctx **ctx) {
    *ctx = NULL;
    if (!gct_resolve(a, a->name, op, bug)) return GCT_EXIT_USAGE;
    *ctx = gct_ctx_new(a->seed);
    return *ctx ? -1 : GCT_EXIT_ERROR;
}

/* A bug's own spec argument "uses=1|2" (gct_bug.then_once): taken out of
 * spec into base (what the registry builds) and *uses ('\0' when absent).
 * False and the context's error for a bad value. */
static bool split_uses(tg_ctx *ctx, const gct_bug *bug, const char *spec, char *base, size_t size, char *uses) {
    *uses = '\0';
    snprintf(base, size, "%s", spec);
    char *p = strstr(base, ";uses=");
    if (!p || !bug->then_once) return true;
    char *end = strchr(p + 1, ';');
    size_t vlen = end ? (size_t)(end - (p + 6)) : strlen(p + 6);
    if (vlen != 1 || (p[6] != '1' && p[6] != '2')) {
        tg_error(ctx, TG_ERR_FORMAT, "--inject", "%s: spec '%s': uses=2 checks x used twice (the default), uses=1 once",
                 bug->name, spec);
        return false;
    }
    *uses = p[6];
    memmove(p, p + 6 + vlen, strlen(p + 6 + vlen) + 1);
    return true;
}

/* "rmsnorm(x; gamma, beta)": the op on the case's inputs, then the bug's
 * `then` (or `then_once` with uses=1). */
static void bug_function(gct_target *t, char uses) {
    const tg_op_case *c = &t->c;
    size_t n = (size_t)snprintf(t->function, sizeof t->function, "%s(%s", t->op->name, c->input_names[0]);
    for (int k = 1; k < c->n_inputs && n < sizeof t->function; k++)
        n += (size_t)snprintf(t->function + n, sizeof t->function - n, "%s%s", k == 1 ? "; " : ", ", c->input_names[k]);
    if (n < sizeof t->function)
        snprintf(t->function + n, sizeof t->function - n, ")%s", uses == '1' ? t->bug->then_once : t->bug->then);
}

bool gct_target_build(tg_ctx *ctx, const tg_op_info *op, const gct_bug *bug, const char *spec, tg_dtype dtype,
                      gct_target *t) {
    memset(t, 0, sizeof *t);
    t->op = op;
    t->bug = bug;
    if (!spec && bug) spec = bug->default_spec;
    char base[sizeof t->c.spec], uses = '\0';
    if (bug && spec) {
        if (!split_uses(ctx, bug, spec, base, sizeof base, &uses)) return false;
        spec = base;
    }
    if (!tg_registry_build(ctx, op, spec, dtype, &t->c)) return false;
    if (uses && t->c.n_args < TG_OP_MAX_ARGS) {
        /* handed to the bug's forward as one more argument of the case */
        snprintf(t->c.arg_name[t->c.n_args], sizeof t->c.arg_name[0], "uses");
        snprintf(t->c.arg_value[t->c.n_args], sizeof t->c.arg_value[0], "%c", uses);
        t->c.n_args++;
        size_t n = strlen(t->c.spec);
        snprintf(t->c.spec + n, sizeof t->c.spec - n, ";uses=%c", uses);
    }
    t->fn = bug ? bug->forward : op->forward;
    if (bug) {
        bug_function(t, uses);
        snprintf(t->label, sizeof t->label, "%s  with bug %s", op->name, bug->name);
    } else {
        snprintf(t->label, sizeof t->label, "%s", op->name);
    }
    /* The registry builds what its parser and builders accept; the op
     * itself refuses the rest (shapes that do not fit, eps <= 0) when it
     * runs. One plain run finds out, without moving the RNG. */
    uint64_t seed, offset;
    tg_rng_state(ctx, &seed, &offset);
    bool was = tg_set_grad_enabled(ctx, false);
    t->out = t->fn(ctx, t->c.inputs, &t->c);
    tg_set_grad_enabled(ctx, was);
    tg_rng_set_state(ctx, seed, offset);
    if (t->out || !tg_ok(ctx)) return t->out != NULL;
    tg_error(ctx, TG_ERR_STATE, "tapegrad-gradcheck", "%s: the forward returned NULL without an error", t->label);
    return false;
}

int gct_build_failed(tg_ctx *ctx) {
    if (tg_status_of(ctx) == TG_ERR_OOM) {
        fprintf(stderr, "tapegrad-gradcheck: %s\n", tg_error_message(ctx));
        return GCT_EXIT_ERROR;
    }
    return gct_usage_error("%s", tg_error_message(ctx));
}

void gct_put_title(const gct_args *a, const tg_op_info *op, const gct_bug *bug, const char *function) {
    gct_puts_tone(stdout, op->name, GCT_BOLD, a->color);
    if (!bug) {
        printf("  %s\n", op->summary);
        return;
    }
    printf("  with injected bug ");
    gct_puts_tone(stdout, bug->name, GCT_BAD, a->color);
    printf(": %s\n  function checked: %s\n", bug->what, function);
}

tg_gradcheck_opts gct_target_opts(const gct_target *t, const gct_args *a) {
    tg_gradcheck_opts o = tg_registry_opts(t->op, t->c.dtype, NULL);
    if (!isnan(a->h)) o.h = a->h;
    if (!isnan(a->atol)) o.atol = a->atol;
    if (!isnan(a->rtol)) o.rtol = a->rtol;
    o.mode = a->mode;
    o.seed = a->seed;
    o.allow_float32 = true;
    o.inputs = t->c.check;
    return o;
}

bool gct_target_check(tg_ctx *ctx, gct_target *t, const tg_gradcheck_opts *o, tg_gradcheck_result *r) {
    return tg_gradcheck(ctx, t->fn, &t->c, t->c.n_inputs, t->c.inputs, o, r);
}

int64_t gct_target_numel(const gct_target *t) {
    int64_t n = 0;
    for (int k = 0; k < t->c.n_inputs; k++)
        if (t->c.check >> k & 1u) n += t->c.inputs[k]->numel;
    return n;
}

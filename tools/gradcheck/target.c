/* What tapegrad-gradcheck checks: a registered op on inputs built from a
 * spec, or the same inputs run through an injected bug's function; the
 * inputs as the command line shapes them (seeds, --cover, distributions,
 * scales, explicit values); the options of tg_gradcheck, and the check run.
 *
 * Layer: target (tool.h): calls the bugs (inject.c) and the base. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tensor/internal.h"
#include "tools/gradcheck/tool.h"

static const gct_input_ctl *ctl_for(const gct_args *a, const char *name, bool all);

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

/* A bug's size, ";size=S" (gct_bug.size): taken out of base (in place)
 * into size[48] (the default when absent). False and the context's error
 * for a value that is not a finite number. */
static bool split_size(tg_ctx *ctx, const gct_bug *bug, char *base, char *size) {
    snprintf(size, 48, "%g", bug->size);
    char *p = strstr(base, ";size=");
    if (!p || !bug->size) return true;
    char *end = strchr(p + 1, ';');
    size_t vlen = end ? (size_t)(end - (p + 6)) : strlen(p + 6);
    char *e;
    snprintf(size, 48, "%.*s", (int)vlen, p + 6);
    double v = strtod(size, &e);
    if (vlen == 0 || vlen >= 48 || *e || !isfinite(v)) {
        tg_error(ctx, TG_ERR_FORMAT, "--inject", "%s: size=%.*s in the spec is not a finite number", bug->name,
                 (int)vlen, p + 6);
        return false;
    }
    memmove(p, p + 6 + vlen, strlen(p + 6 + vlen) + 1);
    return true;
}

/* Appends argument key=value to a built case, and to its spec: handed to
 * the bug's forward as one more argument of the case. */
static void add_case_arg(tg_op_case *c, const char *key, const char *value) {
    if (c->n_args == TG_OP_MAX_ARGS) return;
    snprintf(c->arg_name[c->n_args], sizeof c->arg_name[0], "%s", key);
    snprintf(c->arg_value[c->n_args], sizeof c->arg_value[0], "%s", value);
    c->n_args++;
    size_t n = strlen(c->spec);
    snprintf(c->spec + n, sizeof c->spec - n, ";%s=%s", key, value);
}

/* "rmsnorm(x; gamma, beta)": the op on the case's inputs, then the bug's
 * `then` (or `then_once` with uses=1). */
static void bug_function(gct_target *t, char uses) {
    const tg_op_case *c = &t->c;
    size_t n = (size_t)snprintf(t->function, sizeof t->function, "%s(%s", t->op->def->name, c->input_names[0]);
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
    char base[sizeof t->c.spec], uses = '\0', size[48] = "";
    if (bug && spec) {
        if (!split_uses(ctx, bug, spec, base, sizeof base, &uses) || !split_size(ctx, bug, base, size)) return false;
        spec = base;
    }
    if (!tg_registry_build(ctx, op, spec, dtype, &t->c)) return false;
    for (int k = 0; k < t->c.n_inputs; k++)
        if ((t->c.check >> k & 1u) && !tg_registry_regions(ctx, &t->c, k, &t->regions[k])) return false;
    if (uses) add_case_arg(&t->c, "uses", (char[]){uses, '\0'});
    if (bug && bug->size) add_case_arg(&t->c, "size", size);
    t->fn = bug ? bug->forward : op->forward;
    if (bug) {
        bug_function(t, uses);
        snprintf(t->label, sizeof t->label, "%s  with bug %s", op->def->name, bug->name);
    } else {
        snprintf(t->label, sizeof t->label, "%s", op->def->name);
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

tg_gradcheck_opts gct_target_opts(const gct_target *t, const gct_args *a, uint64_t seed) {
    tg_gradcheck_opts o = tg_registry_opts(t->op, t->c.dtype, NULL);
    if (!isnan(a->h)) o.h = a->h;
    if (!isnan(a->atol)) o.atol = a->atol;
    if (!isnan(a->rtol)) o.rtol = a->rtol;
    o.mode = a->mode;
    o.seed = gct_probe_seed(a, seed);
    o.allow_float32 = true;
    o.inputs = t->c.check;
    for (int k = 0; a->input && k < t->c.n_inputs; k++)
        if (!strcmp(t->c.input_names[k], a->input)) o.inputs &= (uint32_t)1 << k;
    o.step = a->step;
    o.step_floor = a->step_floor;
    o.atol_scale = a->atol_scale;
    o.forward_diff = a->schemes == 2;
    o.scale = t->c.scale;
    if (a->r) o.r = (tg_gradcheck_vec){a->r, a->n_r};
    for (int k = 0; k < t->c.n_inputs; k++) {
        const gct_input_ctl *c = ctl_for(a, t->c.input_names[k], false);
        if (c && c->v) o.v[k] = (tg_gradcheck_vec){c->v, c->n_v};
    }
    return o;
}

bool gct_target_check(tg_ctx *ctx, gct_target *t, const tg_gradcheck_opts *o, tg_gradcheck_result *r) {
    return tg_gradcheck(ctx, t->fn, &t->c, t->c.n_inputs, t->c.inputs, o, r);
}

/* check --order 2 (tg_gradgradcheck, check/gradcheck_order2.c): the
 * target's first gradient, a function of the inputs, checked like any
 * function -- the double backward against differences of plain backwards. */
bool gct_order2_check(tg_ctx *ctx, gct_target *t, const tg_gradcheck_opts *o, tg_gradcheck_result *r) {
    return tg_gradgradcheck(ctx, t->fn, &t->c, t->c.n_inputs, t->c.inputs, o, r);
}

/* ---- inputs under control: --dist, --scale, --offset, --values ------------ */

/* The controls for input `name`: its own entry, else (when `all`) the
 * entry "all". */
static const gct_input_ctl *ctl_for(const gct_args *a, const char *name, bool all) {
    for (int k = 0; k < a->n_ctl; k++)
        if (!strcmp(a->ctl[k].name, name)) return &a->ctl[k];
    for (int k = 0; all && k < a->n_ctl; k++)
        if (!strcmp(a->ctl[k].name, "all")) return &a->ctl[k];
    return NULL;
}

/* Applies the controls to t's inputs: values (or a fresh draw), then
 * scale, then offset. False and the context's error for an unknown name or
 * a wrong number of values. */
static bool apply_controls(tg_ctx *ctx, const gct_args *a, gct_target *t) {
    for (int j = 0; j < a->n_ctl; j++) {
        const gct_input_ctl *c = &a->ctl[j];
        bool found = !strcmp(c->name, "all");
        for (int k = 0; k < t->c.n_inputs; k++) found |= !strcmp(c->name, t->c.input_names[k]);
        if (!found) {
            char names[256] = "";
            size_t n = 0;
            for (int k = 0; k < t->c.n_inputs && n < sizeof names; k++)
                n += (size_t)snprintf(names + n, sizeof names - n, "%s%s", k ? ", " : "", t->c.input_names[k]);
            tg_error(ctx, TG_ERR_VALUE, "tapegrad-gradcheck", "%s %s has no input '%s' (it has: %s; or all)",
                     t->op->def->name, t->c.spec, c->name, names);
            return false;
        }
    }
    for (int k = 0; k < t->c.n_inputs; k++) {
        if (!(t->c.check >> k & 1u) && !ctl_for(a, t->c.input_names[k], false)) continue;
        const gct_input_ctl *c = ctl_for(a, t->c.input_names[k], t->c.check >> k & 1u);
        if (!c) continue;
        tg_tensor *x = t->c.inputs[k];
        if (c->values && c->n_values != x->numel) {
            tg_error(ctx, TG_ERR_SHAPE, "tapegrad-gradcheck", "--values %s: %lld values for an input of %lld elements",
                     c->name, (long long)c->n_values, (long long)x->numel);
            return false;
        }
        if (c->v && c->n_v != x->numel) {
            tg_error(ctx, TG_ERR_SHAPE, "tapegrad-gradcheck", "--v %s: %lld values for an input of %lld elements",
                     c->name, (long long)c->n_v, (long long)x->numel);
            return false;
        }
        for (int64_t i = 0; i < x->numel; i++) {
            double v = tg_get_flat(ctx, x, i);
            if (c->values) v = c->values[i];
            else if (c->dist == GCT_DIST_UNIFORM) v = c->d1 + (c->d2 - c->d1) * tg_rng_uniform(ctx);
            else if (c->dist == GCT_DIST_NORMAL) v = c->d1 + c->d2 * tg_rng_normal(ctx);
            if (c->scale_set) v *= c->scale;
            if (c->offset_set) v += c->offset;
            tg_set_flat(ctx, x, i, v);
        }
    }
    return tg_ok(ctx);
}

/* --cover: t's inputs redrawn across the op's regions, stratum the input
 * seed, kept 4 steps from every kink (the step as the check will take it:
 * relative to the input's scale unless --step absolute). */
static bool cover(tg_ctx *ctx, const gct_args *a, gct_target *t, uint64_t input_seed) {
    double h = isnan(a->h) ? tg_registry_opts(t->op, t->c.dtype, NULL).h : a->h;
    bool absolute = a->step == TG_GRADCHECK_STEP_ABSOLUTE;
    return tg_registry_cover(ctx, &t->c, input_seed, absolute ? 0 : 4 * h, absolute ? 4 * h : 0);
}

/* t->cov: what each checked input holds, measured once for the reports. */
static bool measure_coverage(tg_ctx *ctx, gct_target *t) {
    for (int k = 0; k < t->c.n_inputs; k++)
        if ((t->c.check >> k & 1u) && !tg_coverage_of(ctx, t->c.inputs[k], &t->regions[k], &t->cov[k])) return false;
    return true;
}

bool gct_target_make(tg_ctx *ctx, const gct_args *a, const tg_op_info *op, const gct_bug *bug, const char *spec,
                     tg_dtype dtype, uint64_t seed, gct_target *t) {
    tg_rng_seed(ctx, gct_input_seed(a, seed));
    return gct_target_build(ctx, op, bug, spec, dtype, t) && (!a->cover || cover(ctx, a, t, gct_input_seed(a, seed))) &&
           apply_controls(ctx, a, t) && measure_coverage(ctx, t);
}

int64_t gct_target_numel(const gct_target *t) {
    int64_t n = 0;
    for (int k = 0; k < t->c.n_inputs; k++)
        if (t->c.check >> k & 1u) n += t->c.inputs[k]->numel;
    return n;
}

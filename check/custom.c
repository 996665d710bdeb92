/* The registry's builder for a user's op (tapegrad/check.h:
 * tg_registry_build_ranges): inputs named and ranged by the op's `inputs`
 * text, so a plugin or a program registers its op without writing a
 * builder. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "check/registry.h"
#include "tensor/internal.h"

/* Parses item k of "x=-2:2,gamma=0.5:1.5" into its name (a copy in the
 * arena) and range. False when there is no item k or it is malformed. */
static bool range_item(tg_ctx *ctx, const char *text, int k, const char **name, double *lo, double *hi) {
    const char *p = text;
    for (int i = 0; i < k; i++) {
        p = strchr(p, ',');
        if (!p) return false;
        p++;
    }
    const char *eq = strchr(p, '='), *end = strchr(p, ',');
    if (!end) end = p + strlen(p);
    if (!eq || eq >= end || eq == p) return false;
    char *e;
    errno = 0;
    *lo = strtod(eq + 1, &e);
    if (e == eq + 1 || *e != ':' || errno) return false;
    const char *h = e + 1;
    *hi = strtod(h, &e);
    if (e == h || e != end || errno || !(*lo < *hi)) return false;
    char *copy = tg_arena_alloc_fn(ctx, "tg_registry_build_ranges", (size_t)(eq - p) + 1);
    if (!copy) return false;
    memcpy(copy, p, (size_t)(eq - p));
    copy[eq - p] = '\0';
    *name = copy;
    return true;
}

static int count_items(const char *text) {
    int n = 1;
    for (const char *p = text; (p = strchr(p, ',')) != NULL; p++) n++;
    return n;
}

bool tg_registry_build_ranges(tg_ctx *ctx, tg_op_case *c) {
    static const char fn[] = "tg_registry_build_ranges";
    if (!tg_ok(ctx)) return false;
    if (!c || !c->op) {
        tg_error(ctx, TG_ERR_NULL, fn, "argument 'c' is NULL or has no op");
        return false;
    }
    const char *text = c->op->inputs;
    if (!text || !*text) {
        tg_error(ctx, TG_ERR_FORMAT, fn, "%s: its tg_op_info has no inputs text (\"x=-2:2,gamma=0.5:1.5\")",
                 c->op->name);
        return false;
    }
    int n = count_items(text);
    if (n > TG_GRADCHECK_MAX_INPUTS || n != c->n_shapes) {
        tg_error(ctx, TG_ERR_FORMAT, fn, "%s: spec '%s' gives %d shape%s, the op takes %d (%s)", c->op->name, c->spec,
                 c->n_shapes, c->n_shapes == 1 ? "" : "s", n, text);
        return false;
    }
    for (int k = 0; k < n; k++) {
        const char *name;
        double lo, hi;
        if (!range_item(ctx, text, k, &name, &lo, &hi)) {
            if (tg_ok(ctx))
                tg_error(ctx, TG_ERR_FORMAT, fn, "%s: input %d of '%s' is not NAME=LO:HI with LO < HI", c->op->name, k,
                         text);
            return false;
        }
        tg_tensor *t = tg_new_tensor(ctx, fn, c->dtype, c->ndim[k], c->shape[k]);
        if (!t) return false;
        for (int64_t i = 0; i < t->numel; i++) tg_store(t, i, lo + (hi - lo) * tg_rng_uniform(ctx));
        char *dist = tg_arena_alloc_fn(ctx, fn, 64);
        if (!dist) return false;
        snprintf(dist, 64, "uniform [%g, %g)", lo, hi);
        c->inputs[k] = t;
        c->input_names[k] = name;
        c->input_dist[k] = dist;
        c->check |= (uint32_t)1 << k;
    }
    c->n_inputs = n;
    return true;
}

/* What a check draws for an op's inputs. The op's descriptor names each
 * tensor input and the values drawn for it (tg_op_def.inputs, tapegrad/op.h,
 * "x=-2:2,gamma=0.5:1.5"): the registry's builders make their inputs from
 * it (tg_registry_input), so the domain of an op -- log's positive x, a
 * kink kept away from, max without ties -- is said once, beside the op;
 * and a user's op needs no builder at all (tg_registry_build_ranges: input
 * k has the spec's k-th shape). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "check/registry.h"
#include "tensor/internal.h"

/* One input as the text says it is drawn. */
typedef enum draw_kind {
    DRAW_UNIFORM,  /* LO:HI         uniform in [LO, HI) */
    DRAW_SIGNED,   /* +-LO:HI       |x| uniform in [LO, HI), either sign */
    DRAW_DISTINCT, /* LO:HI distinct  a shuffled even ramp over [LO, HI) */
    DRAW_MASK      /* 0|1           zeros and ones (not differentiable) */
} draw_kind;

typedef struct input_draw {
    const char *name; /* in the text; name_len characters */
    size_t name_len;
    draw_kind kind;
    double lo, hi;
} input_draw;

/* The number of items of an inputs text (0 for NULL or ""). */
static int count_items(const char *text) {
    if (!text || !*text) return 0;
    int n = 1;
    for (const char *p = text; (p = strchr(p, ',')) != NULL; p++) n++;
    return n;
}

/* Parses item k of the text into *d: NAME=LO:HI, NAME=+-LO:HI,
 * NAME=LO:HI distinct, NAME=0|1. False when there is no item k or it is
 * malformed. */
static bool parse_item(const char *text, int k, input_draw *d) {
    const char *p = text;
    for (int i = 0; p && i < k; i++)
        if ((p = strchr(p, ',')) != NULL) p++;
    if (!p || !*p) return false;
    const char *eq = strchr(p, '='), *end = strchr(p, ',');
    if (!end) end = p + strlen(p);
    if (!eq || eq >= end || eq == p) return false;
    *d = (input_draw){.name = p, .name_len = (size_t)(eq - p), .kind = DRAW_UNIFORM};
    const char *v = eq + 1;
    if ((size_t)(end - v) == 3 && strncmp(v, "0|1", 3) == 0) {
        d->kind = DRAW_MASK;
        return true;
    }
    if (strncmp(v, "+-", 2) == 0) d->kind = DRAW_SIGNED, v += 2;
    char *e;
    errno = 0;
    d->lo = strtod(v, &e);
    if (e == v || *e != ':' || errno) return false;
    const char *h = e + 1;
    d->hi = strtod(h, &e);
    if (e == h || errno || !(d->lo < d->hi)) return false;
    if (d->kind == DRAW_UNIFORM && (size_t)(end - e) == 9 && strncmp(e, " distinct", 9) == 0) {
        d->kind = DRAW_DISTINCT;
        e += 9;
    }
    return e == end;
}

/* Fills t by d with the context's RNG. */
static void draw(tg_ctx *ctx, tg_tensor *t, const input_draw *d) {
    const int64_t n = t->numel;
    const double w = d->hi - d->lo;
    if (d->kind == DRAW_DISTINCT) {
        /* Fisher-Yates shuffle of 0..n-1, then an even ramp */
        for (int64_t i = 0; i < n; i++) tg_store(t, i, (double)i);
        for (int64_t i = n - 1; i > 0; i--) {
            int64_t j = (int64_t)(tg_rng_uniform(ctx) * (double)(i + 1));
            if (j > i) j = i;
            double a = tg_load(t, i), b = tg_load(t, j);
            tg_store(t, i, b);
            tg_store(t, j, a);
        }
        for (int64_t i = 0; i < n; i++) tg_store(t, i, d->lo + w * (tg_load(t, i) + 0.5) / (double)n);
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        double u = tg_rng_uniform(ctx), v;
        switch (d->kind) {
        case DRAW_MASK: v = u < 0.5 ? 1.0 : 0.0; break;
        case DRAW_SIGNED: v = (u < 0.5 ? -1 : 1) * (d->lo + w * tg_rng_uniform(ctx)); break;
        default: v = d->lo + w * u; break;
        }
        tg_store(t, i, v);
    }
}

/* How d draws, in words (an arena string; NULL when out of memory). */
static const char *draw_text(tg_ctx *ctx, const input_draw *d) {
    char *s = tg_arena_alloc_fn(ctx, "tg_registry_build", 80);
    if (!s) return NULL;
    switch (d->kind) {
    case DRAW_MASK: snprintf(s, 80, "0 or 1, a mask (not checked)"); break;
    case DRAW_SIGNED: snprintf(s, 80, "|x| uniform [%g, %g), random sign", d->lo, d->hi); break;
    case DRAW_DISTINCT: snprintf(s, 80, "a shuffled even ramp over [%g, %g)", d->lo, d->hi); break;
    default: snprintf(s, 80, "uniform [%g, %g)", d->lo, d->hi); break;
    }
    return s;
}

tg_tensor *tg_registry_input(tg_ctx *ctx, tg_op_case *c, int k, int ndim, const int64_t *shape) {
    static const char fn[] = "tg_registry_build";
    const tg_op_def *op = c->op->def;
    input_draw d;
    if (k < 0 || k >= TG_GRADCHECK_MAX_INPUTS || !op->inputs || !parse_item(op->inputs, k, &d)) {
        tg_error(ctx, TG_ERR_FORMAT, fn,
                 "%s: input %d of its inputs text '%s' is not NAME=LO:HI, NAME=+-LO:HI, NAME=LO:HI distinct or "
                 "NAME=0|1 (LO < HI)",
                 op->name, k, op->inputs ? op->inputs : "(none)");
        return NULL;
    }
    char *name = tg_arena_alloc_fn(ctx, fn, d.name_len + 1);
    tg_tensor *t = name ? tg_new_tensor(ctx, fn, c->dtype, ndim, shape) : NULL;
    const char *how = t ? draw_text(ctx, &d) : NULL;
    if (!how) return NULL;
    memcpy(name, d.name, d.name_len);
    name[d.name_len] = '\0';
    draw(ctx, t, &d);
    c->inputs[k] = t;
    c->input_names[k] = name;
    c->input_dist[k] = how;
    if (d.kind != DRAW_MASK) c->check |= (uint32_t)1 << k;
    if (k + 1 > c->n_inputs) c->n_inputs = k + 1;
    return t;
}

bool tg_registry_build_ranges(tg_ctx *ctx, tg_op_case *c) {
    static const char fn[] = "tg_registry_build_ranges";
    if (!tg_ok(ctx)) return false;
    if (!c || !c->op || !c->op->def) {
        tg_error(ctx, TG_ERR_NULL, fn, "argument 'c' is NULL or has no op");
        return false;
    }
    const tg_op_def *op = c->op->def;
    int n = count_items(op->inputs);
    if (n == 0) {
        tg_error(ctx, TG_ERR_FORMAT, fn, "%s: its tg_op_def has no inputs text (\"x=-2:2,gamma=0.5:1.5\")", op->name);
        return false;
    }
    if (n > TG_GRADCHECK_MAX_INPUTS || n != c->n_shapes) {
        tg_error(ctx, TG_ERR_FORMAT, fn, "%s: spec '%s' gives %d shape%s, the op takes %d (%s)", op->name, c->spec,
                 c->n_shapes, c->n_shapes == 1 ? "" : "s", n, op->inputs);
        return false;
    }
    for (int k = 0; k < n; k++)
        if (!tg_registry_input(ctx, c, k, c->ndim[k], c->shape[k])) return false;
    return true;
}

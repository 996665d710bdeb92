/* Sequential: a module holding other modules and running them in order,
 * y = m_n(... m_2(m_1(x))), as torch.nn.Sequential.
 *
 * It is a container module (layers/module.h): it lists its modules through
 * the `children` method, so tg_module_params names their parameters under
 * their names or positions, tg_module_numel adds them up and
 * tg_module_format prints them indented, all in layers/module.c. What is
 * its own is the list (a tg_model, so adding has tg_model_add's ownership
 * rules), the forward and the checks that keep the list a tree. */
#include "layers/module.h"

#include <stdio.h>

static size_t sequential_repr(const tg_module *m, char *buf, size_t size) {
    (void)m;
    int n = snprintf(buf, size, "Sequential");
    return n > 0 ? (size_t)n : 0;
}

static const tg_model *sequential_children(const tg_module *m) { return &((const tg_sequential *)m)->modules; }

static void sequential_free_m(tg_ctx *ctx, tg_module *m) {
    tg_sequential *s = (tg_sequential *)m;
    tg_model_free(ctx, &s->modules);
    tg_heap_free(ctx, s);
}

/* x through each module in order (tg_sequential_forward, and the generic
 * forward of a Sequential). */
static tg_tensor *sequential_forward_m(tg_ctx *ctx, tg_module *seq_m, tg_tensor *x) {
    static const char fn[] = "tg_sequential_forward";
    if (!tg_check_layer(ctx, fn, seq_m) || !tg_check_arg_any(ctx, fn, "x", x)) return NULL;
    const tg_model *mods = &((const tg_sequential *)seq_m)->modules;
    tg_tensor *h = x;
    for (int i = 0; i < mods->count; i++) {
        tg_module *m = mods->items[i];
        h = m->ops_->forward(ctx, m, h);
        if (!h || !tg_ok(ctx)) {
            /* Say which module failed: the error stays the same (status and
             * message), with the module's place in front of the message. */
            tg_status st = tg_status_of(ctx);
            char inner[sizeof ctx->message];
            snprintf(inner, sizeof inner, "%s", tg_error_message(ctx));
            char key[16];
            tg_clear_error(ctx);
            tg_error(ctx, st == TG_OK ? TG_ERR_STATE : st, fn, "in (%s) %s: %s", tg_module_child_key(key, m, i),
                     m->kind, inner);
            return NULL;
        }
    }
    return h;
}

static const tg_module_ops SEQUENTIAL_OPS = {.repr = sequential_repr,
                                             .free = sequential_free_m,
                                             .forward = sequential_forward_m,
                                             .children = sequential_children};

tg_sequential *tg_sequential_new(tg_ctx *ctx, const char *name) {
    /* no parameters of its own: the dtype field says TG_F32 */
    return tg_module_alloc(ctx, __func__, sizeof(tg_sequential), "Sequential", name, TG_F32, &SEQUENTIAL_OPS);
}

/* Whether `inner` is `outer` or somewhere inside it. */
static bool holds(const tg_module *outer, const tg_module *inner) {
    if (outer == inner) return true;
    const tg_model *kids = outer->ops_->children ? outer->ops_->children(outer) : NULL;
    for (int i = 0; kids && i < kids->count; i++)
        if (holds(kids->items[i], inner)) return true;
    return false;
}

bool tg_sequential_add(tg_ctx *ctx, tg_sequential *seq, tg_module *m) {
    if (!seq) {
        if (tg_ok(ctx)) tg_null_error(ctx, __func__, "seq");
        tg_module_free(ctx, m); /* taken in every case */
        return false;
    }
    /* Both this context's before either is read (tg_module_free frees
     * neither another context's module nor a held one). */
    if (!tg_ok(ctx) || !tg_check_owned(ctx, __func__, "seq", seq, TG_OWN_LAYER)) {
        tg_module_free(ctx, m);
        return false;
    }
    if (m && !tg_check_owned(ctx, __func__, "the module", m, TG_OWN_LAYER)) return false;
    if (m && holds(m, &seq->base)) {
        /* seq itself, or a module holding seq: freeing it would free seq */
        char lm[TG_MODULE_LABEL], ls[TG_MODULE_LABEL];
        if (tg_ok(ctx))
            tg_error(ctx, TG_ERR_VALUE, __func__, "%s %s %s, which it would be added to: a cycle",
                     tg_module_label(lm, m), m == &seq->base ? "is" : "holds", tg_module_label(ls, &seq->base));
        return false;
    }
    bool in_seq = false;
    for (int i = 0; m && i < seq->modules.count; i++) in_seq |= seq->modules.items[i] == m;
    if (m && !in_seq && !m->ops_->forward) {
        tg_module_no_forward(ctx, __func__, m);
        tg_module_free(ctx, m);
        return false;
    }
    return tg_module_list_add(ctx, __func__, "Sequential", &seq->modules, m);
}

tg_tensor *tg_sequential_forward(tg_ctx *ctx, tg_sequential *seq, tg_tensor *x) {
    return sequential_forward_m(ctx, TG_MODULE(seq), x);
}

bool tg_sequential_params(tg_ctx *ctx, tg_sequential *seq, tg_params *list) {
    return tg_module_params(ctx, TG_MODULE(seq), list);
}

void tg_sequential_free(tg_ctx *ctx, tg_sequential *seq) { tg_module_free(ctx, TG_MODULE(seq)); }

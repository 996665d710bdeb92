/* Autocast: float32 layers computing in bfloat16 or float16, as
 * torch.autocast runs a float32 model (tapegrad/layers.h, "Autocast").
 *
 * The parameters stay float32: they are the master weights, which the
 * optimizer updates in float32 and checkpoints save exactly. A layer under
 * autocast runs its fused op on 16-bit copies instead,
 *     w16 = tg_cast(w, dtype)          once per parameter per step
 * so the tape holds one cast record per parameter, and backward brings the
 * gradient of every use of w16 back through it into w's float32 grad:
 * tg_cast's backward adds dy (the sum of the uses' gradients, in 16 bits)
 * into w->grad, converted exactly to float32. A parameter used twice in a
 * step (GPT-2's tied token table, a layer called on two inputs) gets the
 * same copy twice; the copies live in a small table of the context, valid
 * for one step (its epoch), and a copy is reused only while it is still
 * what a new cast would give: the parameter not written since (its version
 * count) and, when the use is recorded, its cast record still on the live
 * tape (a backward has not consumed it).
 *
 * A Linear under bfloat16 autocast reads its copies without their casts on
 * the tape (tg_autocast_data): its record takes the float32 parameters
 * themselves, and its backward sums dW and db into their float32 grads in
 * float32 (layers/linear.c). A copy made that way serves a later recorded
 * use only once remade with its cast (the cast is not on the tape). */
#include "autograd/tape.h"
#include "layers/module.h"

#include <string.h>

/* The context's copy of p in dtype for this step, or NULL. Forgets every
 * copy of an earlier step first. */
static tg_tensor *cached_copy(tg_ctx *ctx, const tg_tensor *p, tg_dtype dtype, bool record, int *slot) {
    if (ctx->autocast_epoch != ctx->epoch) {
        ctx->autocast_epoch = ctx->epoch;
        ctx->autocast_count = 0;
    }
    *slot = ctx->autocast_count;
    for (int i = 0; i < ctx->autocast_count; i++) {
        const tg_autocast_copy *c = &ctx->autocast_copies[i];
        if (c->param != p || c->dtype != dtype) continue;
        *slot = i; /* a stale copy of p is replaced in place */
        if (c->version != tg_version(p)) return NULL;
        if (record && !tg_tape_holds(ctx, c->copy)) return NULL;
        return c->copy;
    }
    return NULL;
}

/* Stores copy in the table at slot (== count: appended). */
static bool remember(tg_ctx *ctx, int slot, const tg_tensor *p, tg_tensor *copy, tg_dtype dtype) {
    if (slot == ctx->autocast_cap) {
        int cap = ctx->autocast_cap ? 2 * ctx->autocast_cap : 64;
        tg_autocast_copy *grown = tg_heap_alloc(ctx, (size_t)cap * sizeof *grown);
        if (!grown) {
            tg_error(ctx, TG_ERR_OOM, "tg_autocast_param", "out of memory for %d autocast copies", cap);
            return false;
        }
        if (ctx->autocast_count) memcpy(grown, ctx->autocast_copies, (size_t)ctx->autocast_count * sizeof *grown);
        tg_heap_free(ctx, ctx->autocast_copies);
        ctx->autocast_copies = grown;
        ctx->autocast_cap = cap;
    }
    ctx->autocast_copies[slot] = (tg_autocast_copy){.param = p, .copy = copy, .version = tg_version(p), .dtype = dtype};
    if (slot == ctx->autocast_count) ctx->autocast_count++;
    return true;
}

/* p's copy for this step (tg_autocast_param, tg_autocast_data); record:
 * the copy's cast goes on the tape (when grad mode and p call for it). */
static tg_tensor *copy_of(tg_ctx *ctx, const char *fn, tg_tensor *p, bool record) {
    if (!tg_ok(ctx) || !p) return NULL; /* an absent bias or gamma stays absent */
    if (!tg_check_arg_any(ctx, fn, "p", p)) return NULL;
    const tg_dtype dtype = ctx->autocast;
    if (dtype == TG_F32 || p->dtype != TG_F32) return p;
    record = record && tg_grad_enabled(ctx) && p->requires_grad;
    int slot;
    tg_tensor *copy = cached_copy(ctx, p, dtype, record, &slot);
    if (copy) return copy;
    const bool grad = tg_grad_enabled(ctx);
    if (!record) tg_set_grad_enabled(ctx, false);
    copy = tg_cast(ctx, p, dtype);
    tg_set_grad_enabled(ctx, grad);
    return copy && remember(ctx, slot, p, copy, dtype) ? copy : NULL;
}

tg_tensor *tg_autocast_param(tg_ctx *ctx, tg_tensor *p) { return copy_of(ctx, __func__, p, true); }

tg_tensor *tg_autocast_data(tg_ctx *ctx, tg_tensor *p) { return copy_of(ctx, "tg_autocast_param", p, false); }

tg_tensor *tg_autocast_input(tg_ctx *ctx, tg_tensor *x) {
    if (!tg_check_arg_any(ctx, __func__, "x", x)) return NULL;
    if (ctx->autocast == TG_F32 || x->dtype != TG_F32) return x;
    return tg_cast(ctx, x, ctx->autocast);
}

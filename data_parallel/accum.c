/* Gradient accumulation: a global batch run as micro-batches, one after
 * the other, in one process.
 *
 * After each micro-batch's backward, tg_grad_accum_add folds the grads
 * into one persistent sum per parameter with tg_fold (data_parallel/fold.c):
 *   sum = w_0 g_0,   then   sum = sum + w_m g_m   for m = 1, 2, ...
 * and tg_grad_accum_finish writes the sums into the grads for the
 * optimizer. tg_dist_allreduce folds the ranks' w_r g_r in rank order with
 * the same steps, so M micro-batches here and M ranks with one micro-batch
 * each give the same bits (docs/distributed.md). */
#include "data_parallel/internal.h"

#include <string.h>

struct tg_grad_accum {
    tg_params *params;
    int nparams;      /* params->count when made: the list must not grow */
    tg_tensor **sums; /* persistent, one per parameter, its grad's dtype and shape */
    int count;        /* micro-batches folded since the last finish */
};

void tg_grad_accum_free(tg_ctx *ctx, tg_grad_accum *acc) {
    if (!ctx || !acc) return;
    for (int i = 0; acc->sums && i < acc->nparams; i++)
        if (acc->sums[i]) tg_tensor_free(ctx, acc->sums[i]);
    tg_heap_free(ctx, acc->sums);
    tg_heap_free(ctx, acc);
}

tg_grad_accum *tg_grad_accum_new(tg_ctx *ctx, tg_params *params) {
    if (!tg_ok(ctx)) return NULL;
    if (!params) {
        tg_null_error(ctx, __func__, "params");
        return NULL;
    }
    tg_grad_accum *acc = tg_heap_alloc(ctx, sizeof *acc);
    tg_tensor **sums = tg_heap_alloc(ctx, (size_t)(params->count ? params->count : 1) * sizeof *sums);
    if (!acc || !sums) {
        tg_heap_free(ctx, acc);
        tg_heap_free(ctx, sums);
        tg_error(ctx, TG_ERR_OOM, __func__, "out of memory for %d parameters", params->count);
        return NULL;
    }
    memset(sums, 0, (size_t)(params->count ? params->count : 1) * sizeof *sums);
    *acc = (tg_grad_accum){.params = params, .nparams = params->count, .sums = sums};
    for (int i = 0; i < params->count; i++) {
        const tg_tensor *v = params->items[i].value;
        if (!(acc->sums[i] = tg_persist(ctx, tg_zeros(ctx, v->dtype, v->ndim, v->shape)))) {
            tg_grad_accum_free(ctx, acc);
            return NULL;
        }
    }
    return acc;
}

/* False (and the error) unless acc is usable with its parameter list as it
 * is now, every parameter with a grad of its sum's size and dtype. */
static bool accum_check(tg_ctx *ctx, const char *fn, const tg_grad_accum *acc) {
    if (!tg_ok(ctx)) return false;
    if (!acc) {
        tg_null_error(ctx, fn, "acc");
        return false;
    }
    if (acc->params->count != acc->nparams) {
        tg_error(ctx, TG_ERR_STATE, fn, "the parameter list has %d parameters, the accumulator was made for %d",
                 acc->params->count, acc->nparams);
        return false;
    }
    for (int i = 0; i < acc->nparams; i++) {
        const tg_param *p = &acc->params->items[i];
        if (!p->value->grad) {
            tg_error(ctx, TG_ERR_STATE, fn, "parameter \"%s\" has no grad", p->name);
            return false;
        }
        if (p->value->grad->numel != acc->sums[i]->numel || p->value->grad->dtype != acc->sums[i]->dtype) {
            tg_error(ctx, TG_ERR_STATE, fn, "parameter \"%s\" is not the one the accumulator was made for", p->name);
            return false;
        }
    }
    return true;
}

bool tg_grad_accum_add(tg_ctx *ctx, tg_grad_accum *acc, double weight) {
    if (!accum_check(ctx, __func__, acc) || !tg_check_finite(ctx, __func__, "weight", weight)) return false;
    for (int i = 0; i < acc->nparams; i++) {
        tg_tensor *g = acc->params->items[i].value->grad, *s = acc->sums[i];
        tg_fold(s->data, g->data, g->dtype, weight, g->numel, acc->count == 0);
    }
    acc->count++;
    return true;
}

bool tg_grad_accum_finish(tg_ctx *ctx, tg_grad_accum *acc) {
    if (!accum_check(ctx, __func__, acc)) return false;
    if (acc->count == 0) {
        tg_error(ctx, TG_ERR_STATE, __func__, "no micro-batch was added since the last finish");
        return false;
    }
    for (int i = 0; i < acc->nparams; i++) {
        tg_tensor *g = acc->params->items[i].value->grad, *s = acc->sums[i];
        memcpy(g->data, s->data, (size_t)g->numel * tg_esize(g->dtype));
    }
    acc->count = 0;
    return true;
}

int tg_grad_accum_count(const tg_grad_accum *acc) { return acc ? acc->count : 0; }

/* Activations as modules (ReLU, GELU, ...): no parameters, a forward that
 * calls the op (autograd/ops_activation.c), a repr as PyTorch prints it.
 * They exist so that a Sequential can hold the whole chain
 * Linear -> RMSNorm -> ReLU -> Linear; a forward written by hand calls the
 * op directly. */
#include "layers/module.h"

/* Each kind's module name and the arguments its repr shows. */
static const struct {
    const char *kind;
    const char *args;
} ACTIVATIONS[] = {
    [TG_ACT_RELU] = {"ReLU", ""},
    [TG_ACT_LEAKY_RELU] = {"LeakyReLU", "negative_slope=0.01"},
    [TG_ACT_SIGMOID] = {"Sigmoid", ""},
    [TG_ACT_TANH] = {"Tanh", ""},
    [TG_ACT_GELU] = {"GELU", "approximate='none'"},
    [TG_ACT_GELU_TANH] = {"GELU", "approximate='tanh'"},
    [TG_ACT_SILU] = {"SiLU", ""},
};
#define N_ACTIVATIONS ((int)(sizeof ACTIVATIONS / sizeof ACTIVATIONS[0]))

/* PyTorch's default slope of nn.LeakyReLU. */
#define LEAKY_SLOPE 0.01

static size_t activation_repr(const tg_module *m, char *buf, size_t size) {
    const tg_activation *a = (const tg_activation *)m;
    int n = snprintf(buf, size, "%s(%s)", m->kind, ACTIVATIONS[a->act].args);
    return n > 0 ? (size_t)n : 0;
}

static void activation_free_m(tg_ctx *ctx, tg_module *m) { tg_heap_free(ctx, m); }

static tg_tensor *activation_forward_m(tg_ctx *ctx, tg_module *m, tg_tensor *x) {
    return tg_activation_forward(ctx, (tg_activation *)m, x);
}

static const tg_module_ops ACTIVATION_OPS = {
    .repr = activation_repr, .free = activation_free_m, .forward = activation_forward_m};

tg_activation *tg_activation_new(tg_ctx *ctx, const char *name, tg_activation_kind act) {
    if (!tg_ok(ctx)) return NULL;
    if ((int)act < 0 || (int)act >= N_ACTIVATIONS) {
        tg_error(ctx, TG_ERR_VALUE, __func__, "act = %d is not a tg_activation_kind (0..%d)", (int)act,
                 N_ACTIVATIONS - 1);
        return NULL;
    }
    /* no parameters: the dtype field says TG_F32, the forward takes either */
    tg_activation *a = tg_module_alloc(ctx, __func__, sizeof *a, ACTIVATIONS[act].kind, name, TG_F32, &ACTIVATION_OPS);
    if (!a) return NULL;
    a->act = act;
    return a;
}

tg_tensor *tg_activation_forward(tg_ctx *ctx, tg_activation *layer, tg_tensor *x) {
    if (!tg_check_layer(ctx, __func__, layer) || !tg_check_arg_any(ctx, __func__, "x", x)) return NULL;
    switch (layer->act) {
    case TG_ACT_RELU: return tg_relu(ctx, x);
    case TG_ACT_LEAKY_RELU: return tg_leaky_relu(ctx, x, LEAKY_SLOPE);
    case TG_ACT_SIGMOID: return tg_sigmoid(ctx, x);
    case TG_ACT_TANH: return tg_tanh(ctx, x);
    case TG_ACT_GELU: return tg_gelu(ctx, x, false);
    case TG_ACT_GELU_TANH: return tg_gelu(ctx, x, true);
    case TG_ACT_SILU: return tg_silu(ctx, x);
    }
    tg_error(ctx, TG_ERR_VALUE, __func__, "act = %d is not a tg_activation_kind", (int)layer->act);
    return NULL;
}

void tg_activation_free(tg_ctx *ctx, tg_activation *layer) { tg_module_free(ctx, TG_MODULE(layer)); }

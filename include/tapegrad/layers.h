/* tapegrad/layers.h: parameters, fused layer ops and modules (layers/).
 *
 * The parameter list that optimizers, clipping and checkpoints share; the
 * fused ops (Linear, RMSNorm, LayerNorm) and their composed twins; the
 * modules (the layers, activations, Sequential) and the model list. */
#ifndef TAPEGRAD_LAYERS_H
#define TAPEGRAD_LAYERS_H

#include "tapegrad/autograd.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================== */
/* Parameters                                                               */
/* ======================================================================== */

/* A model's named parameters, used by optimizers, clipping, checkpoints and
 * the model summary. */
typedef struct tg_param {
    char name[64];     /* dotted name, e.g. "fc1.weight" */
    tg_tensor *value;  /* persistent, requires grad */
    bool weight_decay; /* whether weight decay applies */
} tg_param;

/* Start from tg_params list = {0}; free with tg_params_free. */
typedef struct tg_params {
    tg_param *items;
    int count;
    int capacity;
    /* internal */
    tg_allocator alloc_; /* where items come from: the allocator of the
                             context that first grew the list (zero: none yet) */
} tg_params;

/* Appends a parameter named prefix + "." + name (just name when prefix is
 * NULL or ""). Errors: NULL value, a name over 63 bytes, a duplicate name,
 * a tensor that is not persistent. Returns false on error. */
TG_API bool tg_params_add(tg_ctx *ctx, tg_params *list, const char *prefix, const char *name, tg_tensor *value,
                          bool weight_decay);
/* The parameter with that name, or NULL. */
TG_API tg_param *tg_params_find(tg_params *list, const char *name);
/* Total number of scalar parameters. */
TG_API int64_t tg_params_numel(const tg_params *list);
/* Zeroes every parameter's grad. */
TG_API void tg_params_zero_grad(tg_ctx *ctx, tg_params *list);
/* Frees the list's array (not the tensors, which their layers own). */
TG_API void tg_params_free(tg_params *list);

/* ======================================================================== */
/* Layers: fused ops and modules                                            */
/* ======================================================================== */
/* Layers come in two levels (files in layers/), as in kann:
 *  - fused differentiable ops that take their parameters as tensors:
 *    tg_linear_fused, tg_rmsnorm_fused, tg_layernorm_fused. Each is ONE
 *    tape record with a hand-derived backward (derivations above the code
 *    and in docs/normalization-gradients.md). The norms also have composed
 *    twins, tg_rmsnorm_composed and tg_layernorm_composed, built only from
 *    primitive ops: same math, same gradients, many records.
 *  - modules: a struct owning its persistent parameters, made by _new
 *    (or _new1, _new_ex: see Modules below), run by _forward (which calls
 *    the fused op) or tg_module_forward, listed by _params, freed by
 *    _free. PyTorch's semantics, defaults, init and repr. A Sequential
 *    chains modules and is one itself.
 *
 * Tape accounting (tg_tape_size, tg_tape_saved_bytes) is done the same way
 * for fused and primitive ops: a record counts what it allocates for
 * backward (a norm's per-row float64 statistics) plus every tensor its
 * backward reads through the record (x, weight, gamma; what a primitive op
 * like mul or div counts too), so fused and composed forms compare fairly. */

/* The modules' default eps. RMSNorm's 1e-6 is not PyTorch's: torch.nn.RMSNorm
 * (PyTorch 2.4 and later) defaults to eps=None, which means the machine
 * epsilon of the input's dtype (torch.finfo(x.dtype).eps: 1.2e-7 for
 * float32, 2.2e-16 for float64). 1e-6 is what the LLaMA-style code this
 * project follows uses: RMSNorm(dim, eps=1e-6) in Meta's LLaMA reference
 * model, norm_eps 1e-6 in its configurations, and the same default in T5's
 * LayerNorm (an RMSNorm), Hugging Face's LlamaRMSNorm and torchtune's
 * RMSNorm. Other libraries differ: burn (RmsNormConfig) and Equinox
 * (nn.RMSNorm) use 1e-5. Pass eps explicitly to match one of them.
 * LayerNorm's 1e-5 is torch.nn.LayerNorm's default. */
#define TG_RMSNORM_EPS 1e-6
#define TG_LAYERNORM_EPS 1e-5

/* y = x W^T + b with x (..., in), weight W (out, in), bias b (out) or NULL;
 * y is (..., out). Any number of leading dims (x is flattened to rows; a
 * 1-d x is one row). One GEMM writes x W^T onto rows prefilled with b, so
 * the bias costs no extra pass. Backward: dx += dy W, dW += dy^T x,
 * db += column sums of dy (transposed GEMM cases, no transposed copies).
 * bfloat16 / float16 x, W and b (one dtype): the float32 GEMMs on widened
 * copies (float32 accumulation), y and each gradient rounded once to the
 * 16-bit dtype (tapegrad/tensor.h, Low precision). */
TG_API tg_tensor *tg_linear_fused(tg_ctx *ctx, tg_tensor *x, tg_tensor *weight, tg_tensor *bias);

/* Normalizations over the last ndim_norm dims of x (1 <= ndim_norm <=
 * x->ndim): each "row" is C = the product of those sizes elements (C >= 1),
 * and there are N = numel / C rows. gamma and beta have exactly the
 * normalized shape (x's trailing ndim_norm sizes) and x's dtype, or are
 * NULL (gamma NULL: gain 1; beta NULL: no bias). eps must be finite and
 * >= 0 here; eps = 0 is allowed for studying the invariants (a zero row
 * then gives NaN, as the formula says); the modules require eps > 0.
 * The output has x's shape and dtype. Row statistics are accumulated in
 * float64 for both dtypes and saved as float64 (8 bytes per row). Why:
 * float32 squares always fit a double, so float32 rows around 1e20 (whose
 * sum of squares overflows float32) or 1e-20 normalize correctly and have
 * finite gradients; a float32 row of 1e4 + small noise keeps its mean to
 * far below a float32 ulp; backward sees exactly forward's statistics; and
 * it costs nothing measurable (the kernels are memory-bound). float64 rows
 * that would overflow are rescaled by a power of two (exact). The variance
 * is two-pass, never E[x^2] - E[x]^2. See layers/norm_kernels.h. */

/* RMSNorm, one record saving only rstd per row:
 *   r = 1 / sqrt(mean_j x_j^2 + eps),   y = x r * gamma + beta
 * Backward, with xhat = x r, u = gamma dy:
 *   dx = r (u - xhat mean_j(u_j xhat_j)),  dgamma = sum_rows dy xhat,
 *   dbeta = sum_rows dy. */
TG_API tg_tensor *tg_rmsnorm_fused(tg_ctx *ctx, tg_tensor *x, tg_tensor *gamma, tg_tensor *beta, int ndim_norm,
                                   double eps);
/* LayerNorm, one record saving only mean and rstd per row:
 *   mu = mean_j x_j, var = mean_j (x_j - mu)^2 (biased, two-pass: no
 *   E[x^2] - E[x]^2 cancellation), r = 1 / sqrt(var + eps),
 *   y = (x - mu) r * gamma + beta
 * Backward, with xhat = (x - mu) r, u = gamma dy:
 *   dx = r (u - mean_j u_j - xhat mean_j(u_j xhat_j)),
 *   dgamma = sum_rows dy xhat,  dbeta = sum_rows dy. */
TG_API tg_tensor *tg_layernorm_fused(tg_ctx *ctx, tg_tensor *x, tg_tensor *gamma, tg_tensor *beta, int ndim_norm,
                                     double eps);
/* Both fused ops also take bfloat16 / float16 x (gamma and beta of x's
 * dtype): statistics, normalization and scaling in float32, one rounding
 * to x's dtype at the end; backward through the float32 formulas, each
 * gradient rounded once (docs/normalization-gradients.md, section 8). */
/* The composed twins: the same functions and arguments, built only from
 * primitive ops as PyTorch users write them, e.g. RMSNorm
 * x * (mean(x^2, -1) + eps)^(-1/2) * gamma (+ beta) with tg_pow_scalar,
 * tg_mean_axis, tg_add_scalar, tg_mul (tg_sub for LayerNorm's x - mean;
 * tg_reshape to rows and back when several dims are normalized), so
 * autograd derives their backward: 6 records for RMSNorm with gamma, 9 for
 * LayerNorm with gamma and beta. Statistics are in x's dtype (the float32
 * range limits of the plain formula apply); on bfloat16 / float16 each op
 * computes in float32 and stores in x's dtype, as PyTorch does, so x^2
 * overflows float16 from |x| >= 256 where the fused ops stay right. For
 * tests, learners and benchmarks. */
TG_API tg_tensor *tg_rmsnorm_composed(tg_ctx *ctx, tg_tensor *x, tg_tensor *gamma, tg_tensor *beta, int ndim_norm,
                                      double eps);
TG_API tg_tensor *tg_layernorm_composed(tg_ctx *ctx, tg_tensor *x, tg_tensor *gamma, tg_tensor *beta, int ndim_norm,
                                        double eps);
/* The composed twin of tg_attention (tapegrad/autograd.h), same arguments
 * and checks: tg_matmul(q, tg_transpose(k)) * scale, tg_masked_fill with
 * tg_triu(ones, 1) and -inf when causal, tg_softmax, tg_matmul with v.
 * 5 records (6 causal), keeping the (Tq, Tk) probabilities for backward
 * where the fused op keeps one log-sum-exp per row. For tests, learners
 * and benchmarks. */
TG_API tg_tensor *tg_attention_composed(tg_ctx *ctx, tg_tensor *q, tg_tensor *k, tg_tensor *v, bool causal,
                                        double scale);

/* Modules. Every layer struct starts with a tg_module (its member `base`),
 * the generic view used by models, sequentials, summaries and parameter
 * lists. Fields are read-only for users. A layer's parameters are
 * persistent tensors that require grad (they survive tg_ctx_reset); the
 * layer owns them and its _free frees them. Free layers (or their model)
 * before the context. A layer belongs to the context that made it: another
 * context refuses it in every call (its forward, parameter list, model)
 * with TG_ERR_STATE, without reading it.
 *
 * Constructors come in three forms, which differ in how the options are
 * given:
 *  - the short form, every option at its default (float32; a norm over one
 *    dim):
 *      tg_rmsnorm_new1(ctx, "norm", 64)
 *  - an options struct started from its defaults, as the optimizers have
 *    (NULL options: the defaults):
 *      tg_rmsnorm_opts o = tg_rmsnorm_defaults();
 *      o.bias = true;
 *      tg_rmsnorm_new_ex(ctx, "norm", TG_SHAPE(4, 64), &o)
 *  - every option in place:
 *      tg_rmsnorm_new(ctx, "norm", 1, (int64_t[]){64}, TG_RMSNORM_EPS, true, false, TG_F32)
 * A zeroed options struct is not the defaults (a norm refuses its eps of 0,
 * naming the _defaults function to start from). */
typedef struct tg_module_ops tg_module_ops; /* internal: the layer's methods */
typedef struct tg_module {
    /* "Linear", "RMSNorm", "LayerNorm", "Embedding", an activation ("ReLU",
     * "GELU", ...), "Sequential" */
    const char *kind;
    char name[48]; /* prefix of its parameter names ("fc1"), or "" */
    /* its parameters' dtype; TG_F32 for the modules without parameters of
     * their own (activations, Sequential), which run on either dtype */
    tg_dtype dtype;
    const tg_module_ops *ops_; /* internal */
} tg_module;
/* The generic view of a layer pointer (NULL stays NULL). `layer` is
 * evaluated once (the sizeof only checks, at compile time, that it is a
 * layer), so TG_MODULE(tg_linear_new(...)) is fine. */
#define TG_MODULE(layer) ((void)sizeof(&(layer)->base == (tg_module *)0), (tg_module *)(void *)(layer))

/* Appends the module's parameters to list as "name.param" (just "param"
 * when the name is ""), with their weight-decay flags. A Sequential's are
 * its modules', each under its name or, when unnamed, its position:
 * "mlp.fc1.weight", "mlp.2.gamma" ("2.gamma" when the Sequential is
 * unnamed, as PyTorch's state_dict). False on error. */
TG_API bool tg_module_params(tg_ctx *ctx, tg_module *m, tg_params *list);
/* Number of scalar parameters (a Sequential: of all its modules). */
TG_API int64_t tg_module_numel(const tg_module *m);
/* The module's forward on one input tensor, whatever its kind: the same as
 * tg_linear_forward, tg_rmsnorm_forward, tg_layernorm_forward,
 * tg_activation_forward or tg_sequential_forward, with the same checks and
 * errors. Errors: NULL m or x (TG_ERR_NULL); an Embedding, which takes
 * indices rather than a tensor (TG_ERR_VALUE, pointing at
 * tg_embedding_layer_forward). */
TG_API tg_tensor *tg_module_forward(tg_ctx *ctx, tg_module *m, tg_tensor *x);
/* Writes the module's repr and parameter count into buf (snprintf
 * semantics: returns the length the full text needs), e.g.
 *   Linear(in_features=784, out_features=256, bias=true)  params=200960
 *   RMSNorm(dim=384, eps=1e-06, affine=true, bias=false)  params=384
 *   LayerNorm(dim=(4, 8), eps=1e-05, affine=true, bias=true)  params=64
 * A Sequential takes one line per module, indented, and a closing line:
 *   Sequential(
 *     (0): Linear(in_features=2, out_features=8, bias=true)  params=24
 *     (1): ReLU()  params=0
 *   )  params=24 */
TG_API size_t tg_module_format(char *buf, size_t size, const tg_module *m);
/* Prints tg_module_format's text and a newline to out (any length). */
TG_API void tg_module_print(FILE *out, const tg_module *m);
/* Frees the module and its parameters (any layer kind). NULL is a no-op. A
 * module a model, a Sequential or a bigger module (a GPT's lm_head) holds
 * is refused (TG_ERR_STATE): its holder frees it. */
TG_API void tg_module_free(tg_ctx *ctx, tg_module *m);

/* Linear(in_features, out_features, bias=true), as torch.nn.Linear:
 * y = x W^T + b. weight (out, in) and bias (out) are drawn uniform in
 * [-1/sqrt(in), 1/sqrt(in)) from the context's RNG, weight first (PyTorch's
 * default init). Parameters: "weight" (weight decay on), "bias" (off). */
typedef struct tg_linear {
    tg_module base;
    int64_t in_features, out_features;
    tg_tensor *weight; /* (out_features, in_features) */
    tg_tensor *bias;   /* (out_features), or NULL when made with bias=false */
} tg_linear;
/* Linear's options. Defaults: bias true, float32 (torch.nn.Linear's). */
typedef struct tg_linear_opts {
    bool bias;      /* a bias vector b */
    tg_dtype dtype; /* of weight and bias, and so of the inputs */
} tg_linear_opts;
TG_API tg_linear_opts tg_linear_defaults(void);
/* Linear(in_features, out_features) with the options (NULL: the defaults).
 * Errors: in or out < 1, a name over 47 bytes, an unknown dtype. */
TG_API tg_linear *tg_linear_new_ex(tg_ctx *ctx, const char *name, int64_t in_features, int64_t out_features,
                                   const tg_linear_opts *opts);
/* The short form: the defaults, float32 with a bias. */
TG_API tg_linear *tg_linear_new1(tg_ctx *ctx, const char *name, int64_t in_features, int64_t out_features);
/* Every option in place (the same layer as tg_linear_new_ex). */
TG_API tg_linear *tg_linear_new(tg_ctx *ctx, const char *name, int64_t in_features, int64_t out_features, bool bias,
                                tg_dtype dtype);
/* tg_linear_fused(x, weight, bias); x's last dim must be in_features and
 * its dtype the layer's. */
TG_API tg_tensor *tg_linear_forward(tg_ctx *ctx, tg_linear *layer, tg_tensor *x);
TG_API bool tg_linear_params(tg_ctx *ctx, tg_linear *layer, tg_params *list);
TG_API void tg_linear_free(tg_ctx *ctx, tg_linear *layer);

/* RMSNorm(normalized_shape, eps=1e-6, affine=true, bias=false) and
 * LayerNorm(normalized_shape, eps=1e-5, affine=true, bias=true) over the
 * trailing dims normalized_shape[0..ndim-1] of their input. affine=false:
 * no gamma and no beta (zero parameters; `bias` is then ignored, as in
 * PyTorch); bias=false: no beta. gamma starts at 1, beta at 0, so a fresh
 * layer with bias computes the same as one without. Parameters: "gamma",
 * "beta", both without weight decay. (Where the eps defaults come from:
 * TG_RMSNORM_EPS above.) */
typedef struct tg_rmsnorm {
    tg_module base;
    int ndim; /* normalized dims, 1..TG_MAX_DIMS */
    int64_t normalized_shape[TG_MAX_DIMS];
    double eps;
    bool affine, bias; /* bias: the layer has a beta */
    tg_tensor *gamma;  /* normalized_shape, or NULL */
    tg_tensor *beta;   /* normalized_shape, or NULL */
} tg_rmsnorm;
typedef struct tg_layernorm {
    tg_module base;
    int ndim;
    int64_t normalized_shape[TG_MAX_DIMS];
    double eps;
    bool affine, bias;
    tg_tensor *gamma;
    tg_tensor *beta;
} tg_layernorm;
/* The norms' options. Defaults: RMSNorm eps TG_RMSNORM_EPS (1e-6), affine,
 * no bias; LayerNorm eps TG_LAYERNORM_EPS (1e-5), affine, bias; float32. */
typedef struct tg_rmsnorm_opts {
    double eps;     /* > 0 and finite */
    bool affine;    /* a gain gamma (and, with bias, a beta) */
    bool bias;      /* a bias beta (only with affine) */
    tg_dtype dtype; /* of gamma and beta, and so of the inputs */
} tg_rmsnorm_opts;
typedef struct tg_layernorm_opts {
    double eps;
    bool affine, bias;
    tg_dtype dtype;
} tg_layernorm_opts;
TG_API tg_rmsnorm_opts tg_rmsnorm_defaults(void);
TG_API tg_layernorm_opts tg_layernorm_defaults(void);
/* A norm over normalized_shape[0..ndim-1] with the options (NULL: the
 * defaults); TG_SHAPE fits: tg_layernorm_new_ex(ctx, "ln", TG_SHAPE(4, 8),
 * &o). Errors (TG_ERR_VALUE, naming the argument and its value): ndim
 * outside 1..TG_MAX_DIMS, a size < 1, eps <= 0, NaN or inf; a name over 47
 * bytes; a NULL normalized_shape; an unknown dtype. */
TG_API tg_rmsnorm *tg_rmsnorm_new_ex(tg_ctx *ctx, const char *name, int ndim, const int64_t *normalized_shape,
                                     const tg_rmsnorm_opts *opts);
TG_API tg_layernorm *tg_layernorm_new_ex(tg_ctx *ctx, const char *name, int ndim, const int64_t *normalized_shape,
                                         const tg_layernorm_opts *opts);
/* The short forms: one normalized dim of size dim, the defaults, float32. */
TG_API tg_rmsnorm *tg_rmsnorm_new1(tg_ctx *ctx, const char *name, int64_t dim);
TG_API tg_layernorm *tg_layernorm_new1(tg_ctx *ctx, const char *name, int64_t dim);
/* Every option in place (the same layers as the _new_ex forms). */
TG_API tg_rmsnorm *tg_rmsnorm_new(tg_ctx *ctx, const char *name, int ndim, const int64_t *normalized_shape, double eps,
                                  bool affine, bool bias, tg_dtype dtype);
TG_API tg_layernorm *tg_layernorm_new(tg_ctx *ctx, const char *name, int ndim, const int64_t *normalized_shape,
                                      double eps, bool affine, bool bias, tg_dtype dtype);
/* The fused op on x, whose trailing dims must equal normalized_shape
 * (TG_ERR_SHAPE naming both shapes otherwise) and whose dtype must be the
 * layer's. */
TG_API tg_tensor *tg_rmsnorm_forward(tg_ctx *ctx, tg_rmsnorm *layer, tg_tensor *x);
TG_API tg_tensor *tg_layernorm_forward(tg_ctx *ctx, tg_layernorm *layer, tg_tensor *x);
TG_API bool tg_rmsnorm_params(tg_ctx *ctx, tg_rmsnorm *layer, tg_params *list);
TG_API bool tg_layernorm_params(tg_ctx *ctx, tg_layernorm *layer, tg_params *list);
TG_API void tg_rmsnorm_free(tg_ctx *ctx, tg_rmsnorm *layer);
TG_API void tg_layernorm_free(tg_ctx *ctx, tg_layernorm *layer);

/* Embedding(num_embeddings, embedding_dim), as torch.nn.Embedding: a table
 * of num_embeddings rows initialized N(0, 1) from the context's RNG; the
 * forward is tg_embedding on it. Parameter: "weight" (weight decay on).
 * Its input is indices, not a tensor, so it has no tg_module_forward and
 * cannot go into a Sequential: run it first, and the Sequential on its
 * output. */
typedef struct tg_embedding_layer {
    tg_module base;
    int64_t num_embeddings, embedding_dim;
    tg_tensor *weight; /* (num_embeddings, embedding_dim) */
} tg_embedding_layer;
/* Errors: a size < 1, a name over 47 bytes, an unknown dtype. */
TG_API tg_embedding_layer *tg_embedding_layer_new(tg_ctx *ctx, const char *name, int64_t num_embeddings,
                                                  int64_t embedding_dim, tg_dtype dtype);
/* Rows of the table for the numel(shape) indices: shape + (embedding_dim). */
TG_API tg_tensor *tg_embedding_layer_forward(tg_ctx *ctx, tg_embedding_layer *layer, int ndim, const int64_t *shape,
                                             const int64_t *indices);
TG_API bool tg_embedding_layer_params(tg_ctx *ctx, tg_embedding_layer *layer, tg_params *list);
TG_API void tg_embedding_layer_free(tg_ctx *ctx, tg_embedding_layer *layer);

/* An activation as a module, so that it can take its place in a
 * Sequential (in a forward of your own, call the op itself: tg_relu(ctx,
 * x)). No parameters; the input may be either dtype; the output is the
 * op's. The kinds, their ops and reprs (PyTorch's):
 *   TG_ACT_RELU        tg_relu                         ReLU()
 *   TG_ACT_LEAKY_RELU  tg_leaky_relu, slope 0.01       LeakyReLU(negative_slope=0.01)
 *   TG_ACT_SIGMOID     tg_sigmoid                      Sigmoid()
 *   TG_ACT_TANH        tg_tanh                         Tanh()
 *   TG_ACT_GELU        tg_gelu, exact (erf)            GELU(approximate='none')
 *   TG_ACT_GELU_TANH   tg_gelu, tanh approximation     GELU(approximate='tanh')
 *   TG_ACT_SILU        tg_silu                         SiLU() */
typedef enum tg_activation_kind {
    TG_ACT_RELU = 0,
    TG_ACT_LEAKY_RELU,
    TG_ACT_SIGMOID,
    TG_ACT_TANH,
    TG_ACT_GELU,
    TG_ACT_GELU_TANH,
    TG_ACT_SILU
} tg_activation_kind;
typedef struct tg_activation {
    tg_module base;
    tg_activation_kind act;
} tg_activation;
/* Errors: an unknown kind (TG_ERR_VALUE), a name over 47 bytes. */
TG_API tg_activation *tg_activation_new(tg_ctx *ctx, const char *name, tg_activation_kind act);
/* The activation's op on x. */
TG_API tg_tensor *tg_activation_forward(tg_ctx *ctx, tg_activation *layer, tg_tensor *x);
TG_API void tg_activation_free(tg_ctx *ctx, tg_activation *layer);

/* A model: an ordered list of modules, for the parameter list, the summary
 * and freeing. The forward is the user's own C code calling the layers.
 * Start from tg_model m = {0}. The model owns the modules added to it. */
typedef struct tg_model {
    tg_module **items;
    int count;
    int capacity;
} tg_model;
/* Appends m; the model owns it from then on (tg_module_free refuses it;
 * tg_model_free frees it). It takes m in every case: if m cannot be added
 * (the context in error, a duplicate name, out of memory) m is freed, so
 * tg_model_add(ctx, &model, TG_MODULE(tg_linear_new(...))) never leaks.
 * NULL m is TG_ERR_NULL (when the context is healthy). Left where they
 * are: a module already in the model or held by another model or
 * container (TG_ERR_VALUE: a module has one holder), and a layer of
 * another context (TG_ERR_STATE). */
TG_API bool tg_model_add(tg_ctx *ctx, tg_model *model, tg_module *m);
/* Appends every module's parameters to list, in the order added. */
TG_API bool tg_model_params(tg_ctx *ctx, const tg_model *model, tg_params *list);
/* Number of scalar parameters of every module. */
TG_API int64_t tg_model_numel(const tg_model *model);
/* The summary, one line per module and the total (snprintf semantics):
 *   (fc1): Linear(in_features=784, out_features=256, bias=true)  params=200960
 *   (norm1): RMSNorm(dim=256, eps=1e-06, affine=true, bias=false)  params=256
 *   total params=201216
 * An unnamed module shows its position, "(0): ...". A Sequential spans
 * several lines, as tg_module_format shows. */
TG_API size_t tg_model_format(char *buf, size_t size, const tg_model *model);
/* Prints the summary to out. */
TG_API void tg_model_print(FILE *out, const tg_model *model);
/* Frees every module and the list; the model is empty again. */
TG_API void tg_model_free(tg_ctx *ctx, tg_model *model);

/* Sequential: modules run one after the other, each on the output of the
 * one before, as torch.nn.Sequential. It is a module itself, so it goes
 * into a model, or into another Sequential, like any layer: its
 * parameters, summary and free are its modules' (tg_module_params,
 * tg_module_format above), and tg_module_forward runs it. It owns its
 * modules. A model Linear -> RMSNorm -> ReLU -> Linear:
 *   tg_sequential *mlp = tg_sequential_new(ctx, "mlp");
 *   tg_sequential_add(ctx, mlp, TG_MODULE(tg_linear_new1(ctx, NULL, 2, 64)));
 *   tg_sequential_add(ctx, mlp, TG_MODULE(tg_rmsnorm_new1(ctx, NULL, 64)));
 *   tg_sequential_add(ctx, mlp, TG_MODULE(tg_activation_new(ctx, NULL, TG_ACT_RELU)));
 *   tg_sequential_add(ctx, mlp, TG_MODULE(tg_linear_new1(ctx, NULL, 64, 3)));
 *   tg_tensor *logits = tg_sequential_forward(ctx, mlp, x);
 * One statement per module: constructors draw their initial weights from
 * the context's RNG in the order they run, and C leaves the order of the
 * arguments of one call (or the initializers of one array) unspecified, so
 * building several modules inside one expression would leave their
 * weights to the compiler. The forward records exactly the ops of the
 * layers called by hand, so outputs and gradients are bitwise the same. */
typedef struct tg_sequential {
    tg_module base;
    tg_model modules; /* in order of addition; owned */
} tg_sequential;
/* An empty Sequential (its forward returns its input). Errors: a name over
 * 47 bytes. */
TG_API tg_sequential *tg_sequential_new(tg_ctx *ctx, const char *name);
/* Appends m, which then belongs to seq. It takes m in every case, as
 * tg_model_add: m is freed when it cannot be added (the context in error,
 * NULL seq, a duplicate name, a module without a tensor forward such as an
 * Embedding, out of memory), so a failed add never leaks. Two exceptions
 * keep m where it is and set TG_ERR_VALUE: m already in seq or held by
 * another model or container, and m being seq or holding it (a cycle). A
 * module belongs to one model or Sequential at a time. Another context's
 * seq or m is TG_ERR_STATE. */
TG_API bool tg_sequential_add(tg_ctx *ctx, tg_sequential *seq, tg_module *m);
/* x through every module in order. An error inside names the module, by
 * name or position, before the module's own message:
 *   tg_sequential_forward: in (1) RMSNorm: tg_rmsnorm_forward: input (4, 63)
 *   does not end with normalized_shape (64,) */
TG_API tg_tensor *tg_sequential_forward(tg_ctx *ctx, tg_sequential *seq, tg_tensor *x);
TG_API bool tg_sequential_params(tg_ctx *ctx, tg_sequential *seq, tg_params *list);
/* Frees seq and every module in it. */
TG_API void tg_sequential_free(tg_ctx *ctx, tg_sequential *seq);

/* ======================================================================== */
/* Autocast: mixed precision with float32 master weights (layers/autocast.c) */
/* ======================================================================== */
/* With tg_ctx_set_autocast(ctx, TG_BF16) (or TG_F16; tapegrad/tensor.h),
 * float32 layers compute in that dtype, as under torch.autocast:
 *  - Linear, RMSNorm, LayerNorm run their fused op on a 16-bit copy of
 *    each parameter (tg_autocast_param) and on their input cast to the
 *    compute dtype when it is float32 (tg_autocast_input): the output is
 *    16-bit. The norms keep their statistics in float32. A Linear under
 *    bfloat16 multiplies in bfloat16 and reads W as float32, rounded to
 *    bfloat16 as its GEMM packs it (the copy's bits; no copy is made).
 *  - Embedding looks the rows up in its float32 table and casts them (the
 *    same values as a lookup in a cast table; its grad stays float32).
 *  - The transformer modules and tg_gpt are made of those, with the
 *    residual stream in the compute dtype; tg_gpt's tied output projection
 *    uses the token table's copy, so that table's grad sums both uses.
 *    tg_gpt_forward's logits are 16-bit; tg_gpt_loss casts them to
 *    float32 first (autocast computes losses in float32: do the same
 *    before tg_cross_entropy in a forward of your own).
 * Parameters, their grads, optimizer state and checkpoints stay float32,
 * so nothing else changes: the optimizer updates the master weights, a
 * checkpoint saves them exactly. Gradients reach them through tg_cast's
 * backward; a Linear under bfloat16 sums dW and db into the float32 grads
 * in float32 itself. A float16 run needs loss scaling (tg_grad_scaler,
 * tapegrad/optim.h): float16 gradients below 2^-24 are 0. Outside autocast
 * a 16-bit input to a float32 layer stays an error (TG_ERR_DTYPE, naming
 * tg_ctx_set_autocast): dtypes are never mixed silently. */

/* p's copy in the autocast dtype, tg_cast(ctx, p, dtype), made once per step
 * and parameter: later calls in the same step return the same tensor, as
 * long as p was not written since and, when recording, the copy's cast is
 * still on the live tape. p itself when autocast is off or p is not float32;
 * NULL for a NULL p (an absent bias). For the fused ops called by hand on a
 * layer's parameters (tg_gpt's tied lm_head does). */
TG_API tg_tensor *tg_autocast_param(tg_ctx *ctx, tg_tensor *p);
/* x cast to the autocast dtype (tg_cast, recorded) when autocast is on and x
 * is float32; x itself otherwise. Where a model's input enters. */
TG_API tg_tensor *tg_autocast_input(tg_ctx *ctx, tg_tensor *x);

/* ======================================================================== */
/* Transformer modules (layers/transformer.c, layers/gpt.c)                 */
/* ======================================================================== */
/* The pieces of a GPT-2 or LLaMA style decoder, as containers of the layers
 * above (their parameters are their children's, named "attn.qkv.weight",
 * "mlp.fc.weight", ...), plus a whole byte-level language model, tg_gpt,
 * which examples/gpt.c trains and scripts/gpt_torch.py checks against
 * PyTorch. Inputs are (B, T, C): batch, positions, channels. */

/* Multi-head causal self-attention, as GPT-2's (nanoGPT's
 * CausalSelfAttention) with LLaMA's optional rotary embedding:
 *   q, k, v = split(qkv(x), C)           one Linear C -> 3C; q is columns
 *                                        0..C-1, k C..2C-1, v 2C..3C-1,
 *                                        head h the D = C/H columns h*D..
 *   q, k, v: (B,T,C) -> (B,H,T,D)        (tg_reshape, tg_permute)
 *   q, k = rope(q), rope(k)              when rope_base > 0 (tg_rope)
 *   o = attention(q, k, v, causal, 1/sqrt(D))   the fused tg_attention
 *   y = proj(o as (B,T,C))               Linear C -> C
 * Parameters "qkv.weight" (3C, C), "proj.weight" (C, C) and, with bias,
 * "qkv.bias", "proj.bias". */
typedef struct tg_mha {
    tg_module base;
    int64_t n_embd, n_head, head_dim; /* C, H, D = C / H */
    bool bias;
    double rope_base; /* 0: no rotary embedding */
    tg_linear *qkv;   /* C -> 3C */
    tg_linear *proj;  /* C -> C */
    tg_model children_;
} tg_mha;
/* Errors: n_embd or n_head < 1, n_head not dividing n_embd, rope_base < 0
 * or not finite, an odd head size with RoPE (it rotates pairs). */
TG_API tg_mha *tg_mha_new(tg_ctx *ctx, const char *name, int64_t n_embd, int64_t n_head, bool bias, double rope_base,
                          tg_dtype dtype);
/* y (B,T,C) for x (B,T,C), every position attending to itself and the
 * positions before it. */
TG_API tg_tensor *tg_mha_forward(tg_ctx *ctx, tg_mha *layer, tg_tensor *x);

/* The MLP of a transformer block:
 *   TG_MLP_GELU_TANH (GPT-2):  y = proj(gelu_tanh(fc(x)))
 *   TG_MLP_SWIGLU (LLaMA):     y = proj(silu(fc(x)) * gate(x))
 *                              (Meta's w2(silu(w1 x) * w3 x))
 * fc and gate are C -> hidden, proj hidden -> C. */
typedef enum tg_mlp_kind { TG_MLP_GELU_TANH = 0, TG_MLP_SWIGLU } tg_mlp_kind;
typedef struct tg_mlp {
    tg_module base;
    tg_mlp_kind kind;
    int64_t n_embd, hidden;
    tg_linear *fc, *gate, *proj; /* gate: SwiGLU only, else NULL */
    tg_model children_;
} tg_mlp;
/* hidden 0: the kind's default, tg_mlp_hidden. Errors: n_embd < 1,
 * hidden < 0, an unknown kind. */
TG_API tg_mlp *tg_mlp_new(tg_ctx *ctx, const char *name, int64_t n_embd, int64_t hidden, tg_mlp_kind kind, bool bias,
                          tg_dtype dtype);
/* The default hidden size: 4C for GELU (GPT-2); for SwiGLU LLaMA's 2/3 of
 * 4C (so the three matrices hold as many weights as GELU's two), rounded
 * up to a multiple of 32. */
TG_API int64_t tg_mlp_hidden(tg_mlp_kind kind, int64_t n_embd);
TG_API tg_tensor *tg_mlp_forward(tg_ctx *ctx, tg_mlp *layer, tg_tensor *x);

/* A pre-norm transformer block:
 *   h = x + attn(ln_1(x)),   y = h + mlp(ln_2(h))
 * with ln_1, ln_2 RMSNorm or LayerNorm over C (with a beta when bias). */
typedef enum tg_norm_kind { TG_NORM_RMS = 0, TG_NORM_LAYER } tg_norm_kind;
typedef struct tg_block_opts {
    tg_norm_kind norm;
    double eps; /* the norms' eps; 0: TG_RMSNORM_EPS or TG_LAYERNORM_EPS */
    tg_mlp_kind mlp;
    int64_t hidden;   /* the MLP's; 0: tg_mlp_hidden */
    bool bias;        /* biases in the Linears, betas in the norms */
    double rope_base; /* 0: no RoPE */
    tg_dtype dtype;
} tg_block_opts;
/* LLaMA's block: RMSNorm, SwiGLU, no biases, RoPE base 10000, float32. */
TG_API tg_block_opts tg_block_llama(void);
/* GPT-2's block: LayerNorm, GELU-tanh, biases, no RoPE, float32. */
TG_API tg_block_opts tg_block_gpt2(void);
typedef struct tg_block {
    tg_module base;
    tg_block_opts opts;
    tg_module *ln_1, *ln_2; /* a tg_rmsnorm or a tg_layernorm */
    tg_mha *attn;
    tg_mlp *mlp;
    tg_model children_;
} tg_block;
/* opts NULL: tg_block_llama(). Errors: those of its layers. */
TG_API tg_block *tg_block_new(tg_ctx *ctx, const char *name, int64_t n_embd, int64_t n_head, const tg_block_opts *opts);
TG_API tg_tensor *tg_block_forward(tg_ctx *ctx, tg_block *layer, tg_tensor *x);

/* A decoder-only language model over token ids 0..vocab_size-1:
 *   x = wte[idx] (+ wpe[0..T-1] for GPT-2)
 *   x = h.0(x), ..., h.{L-1}(x)        tg_blocks, in a Sequential "h"
 *   logits = lm_head(ln_f(x))          GPT-2: tied, ln_f(x) wte^T
 * TG_GPT_LLAMA: RMSNorm, RoPE, SwiGLU, no biases, its own lm_head.
 * TG_GPT_GPT2: LayerNorm, learned positions, GELU-tanh, biases, the
 * embedding table reused as the output projection (weight tying).
 * Init (GPT-2's, as nanoGPT and llm.c): weights and embeddings
 * N(0, 0.02), the residual projections (attn.proj, mlp.proj)
 * N(0, 0.02 / sqrt(2 L)), biases 0, gains 1, drawn from the context's RNG
 * in the order of the parameter list. */
typedef enum tg_gpt_arch { TG_GPT_LLAMA = 0, TG_GPT_GPT2 } tg_gpt_arch;
typedef struct tg_gpt_config {
    tg_gpt_arch arch;
    int64_t vocab_size; /* >= 1 */
    int64_t context;    /* the most positions a sequence may have */
    int64_t n_layer, n_head, n_embd;
    int64_t hidden;   /* the MLP's; 0: tg_mlp_hidden */
    double norm_eps;  /* every norm's eps; 0: TG_LAYERNORM_EPS, TG_RMSNORM_EPS
                         (LLaMA-2 and 3 use 1e-5) */
    double rope_base; /* LLaMA's RoPE base (> 0) */
    tg_dtype dtype;
    /* run each block under tg_checkpoint when recording: backward
     * recomputes a block's activations instead of keeping them (the same
     * gradients, bit for bit; docs/activation-checkpointing.md). Default
     * false. It changes no parameter: set it on a model's config at any
     * time (gpt->config.checkpoint = true). */
    bool checkpoint;
} tg_gpt_config;
/* The defaults of an arch: vocab 128, context 64, 4 layers of 4 heads,
 * 128 channels, RoPE base 10000, float32 (the "tiny" size). */
TG_API tg_gpt_config tg_gpt_defaults(tg_gpt_arch arch);
/* "llama" or "gpt2". */
TG_API const char *tg_gpt_arch_name(tg_gpt_arch arch);
typedef struct tg_gpt {
    tg_module base;
    tg_gpt_config config;
    tg_embedding_layer *wte; /* (vocab_size, C) */
    tg_embedding_layer *wpe; /* (context, C), GPT-2 only */
    tg_sequential *h;        /* the blocks */
    tg_module *ln_f;         /* the final norm */
    tg_linear *lm_head;      /* C -> vocab_size, LLaMA only */
    tg_model children_;
} tg_gpt;
/* Errors name the config's values: sizes < 1, n_head not dividing n_embd,
 * an unknown arch, a bad rope_base. */
TG_API tg_gpt *tg_gpt_new(tg_ctx *ctx, const char *name, const tg_gpt_config *config);
/* logits (B, T, vocab_size) for B sequences of T token ids idx (B*T,
 * row-major). Errors: B or T < 1, T over the context, an id out of range. */
TG_API tg_tensor *tg_gpt_forward(tg_ctx *ctx, tg_gpt *gpt, int64_t B, int64_t T, const int64_t *idx);
/* The mean cross-entropy of the next tokens: targets (B*T) are the ids
 * that follow idx (targets[i] = the token after idx[i]). A scalar. */
TG_API tg_tensor *tg_gpt_loss(tg_ctx *ctx, tg_gpt *gpt, int64_t B, int64_t T, const int64_t *idx,
                              const int64_t *targets);
/* The same loss from logits a forward already made, so one forward gives
 * both: logits (..., vocab_size) (tg_gpt_forward's (B, T, vocab_size)),
 * targets one id per row; 16-bit logits are cast to float32 first, as
 * autocast computes losses. tg_gpt_loss is tg_gpt_forward then this. */
TG_API tg_tensor *tg_gpt_loss_from(tg_ctx *ctx, tg_tensor *logits, const int64_t *targets);
/* Frees the model and its parameters (tg_module_free(ctx, TG_MODULE(gpt))).
 * NULL is a no-op. */
TG_API void tg_gpt_free(tg_ctx *ctx, tg_gpt *gpt);

/* ======================================================================== */
/* Generation: KV cache and sampling (layers/generate.c)                    */
/* ======================================================================== */
/* Text from a tg_gpt, one token at a time, without the tape (grad mode is
 * off inside). The KV cache keeps each block's keys and values of the
 * positions seen, so a new token costs one position instead of a forward
 * over the whole window, and its logits are bitwise those of the full
 * forward (float32 and float64, up to 256 positions in float64 and 384 in
 * float32; beyond, to rounding: layers/generate.c says why).
 *
 * Life cycle: a cache is persistent (2 n_layer n_embd context elements)
 * and belongs to one model: make it with tg_gpt_cache_new, feed it tokens
 * with tg_gpt_cache_forward (each call's activations and logits are arena
 * tensors, gone at the next tg_ctx_reset, as in training; the cache's
 * contents survive resets), empty it with tg_gpt_cache_clear, free it
 * with tg_gpt_cache_free before the model. tg_gpt_generate does all of
 * this itself and gives the arena back after every token: it needs
 * nothing from the caller but the prompt.
 *
 * When the context fills, tg_gpt_generate slides: the cache is refilled
 * by one forward over the last `keep` tokens (default half the context),
 * which then continue at positions 0 .. keep - 1; keep = context gives
 * every token the last `context` tokens, as a loop without a cache (and
 * nanoGPT's generate) does, at that loop's cost. */
typedef struct tg_gpt_cache tg_gpt_cache;
/* An empty cache for gpt, in the dtype its blocks compute in (under
 * autocast, the 16-bit one: use it under the same autocast). */
TG_API tg_gpt_cache *tg_gpt_cache_new(tg_ctx *ctx, tg_gpt *gpt);
/* Runs T >= 1 new tokens idx[0 .. T-1] (one sequence) at the next T
 * positions, appending their keys and values: logits (1, T, vocab_size),
 * those of the full forward over every token fed since the last clear.
 * Errors: more tokens than the context has room left (clear first), a
 * changed autocast dtype, the errors of tg_gpt_forward. */
TG_API tg_tensor *tg_gpt_cache_forward(tg_ctx *ctx, tg_gpt_cache *cache, int64_t T, const int64_t *idx);
/* Positions the cache holds (0 for NULL). */
TG_API int64_t tg_gpt_cache_len(const tg_gpt_cache *cache);
/* Forgets every position (the next token is at position 0 again). */
TG_API void tg_gpt_cache_clear(tg_gpt_cache *cache);
/* Frees the cache. NULL is a no-op. */
TG_API void tg_gpt_cache_free(tg_ctx *ctx, tg_gpt_cache *cache);

/* How tokens are drawn and generation runs. Start from tg_gen_defaults(). */
typedef struct tg_gen_opts {
    double temperature; /* logits / temperature; finite, >= 0; 0: greedy (the argmax). Default 1 */
    int64_t top_k;      /* keep the k most likely tokens; 0 (default): all */
    double top_p;       /* then the fewest most likely whose probability reaches top_p; (0, 1], 1 (default): all */
    uint64_t seed;      /* draw i uses Philox(seed, i): the same seed, the same tokens. Default 0 */
    int64_t stop;       /* a token id that ends generation (it is output); -1 (default): none */
    int64_t keep;       /* tokens kept when the context fills, 1..context; 0 (default): context / 2 */
    bool use_cache;     /* false: a forward over the whole window per token (for comparison). Default true */
    /* called with each new token; returning false stops. NULL (default): none */
    bool (*on_token)(void *user, int64_t token);
    void *user;
} tg_gen_opts;
TG_API tg_gen_opts tg_gen_defaults(void);
/* The next token after the last row of logits (..., vocab_size), drawn as
 * opts says (NULL: the defaults) with draw number `draw` (the Philox
 * counter). -1 on error: bad options (a negative or NaN temperature, top_p
 * outside (0, 1], top_k < 0, a stop id out of range), a NaN or +inf
 * logit, every logit -inf. */
TG_API int64_t tg_sample_token(tg_ctx *ctx, const tg_tensor *logits, const tg_gen_opts *opts, uint64_t draw);
/* Up to n_new tokens after the prompt (n_prompt ids, 1 <= n_prompt <=
 * context), written to out; the number written (fewer after the stop
 * token or a false from on_token), or -1 on error (the context's error:
 * bad options, a prompt longer than the context or with an id out of
 * range). Token i is drawn with draw number i. The arena is as it was
 * when the call returns. */
TG_API int64_t tg_gpt_generate(tg_ctx *ctx, tg_gpt *gpt, int64_t n_prompt, const int64_t *prompt, int64_t n_new,
                               const tg_gen_opts *opts, int64_t *out);

#ifdef __cplusplus
}
#endif

#endif /* TAPEGRAD_LAYERS_H */

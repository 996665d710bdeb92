/* The RMSNorm and LayerNorm modules, one implementation for both: the two
 * differ only in their name and their fused op (a small descriptor,
 * norm_kind), so constructor checks, parameters, repr, forward checks and
 * free are written once here. Also the parts of the fused ops that do not
 * depend on the norm (layers/norm.h).
 *
 * The ops themselves, their backward passes and derivations, are in
 * layers/rmsnorm.c and layers/layernorm.c; the math in full is in
 * docs/normalization-gradients.md; how layers fit together, in
 * docs/DESIGN.md. */
#include "layers/norm.h"

#include "layers/module.h"

#include <math.h>
#include <stddef.h>

/* ---- the fused and composed ops' shared parts --------------------------------- */

bool tg_norm_check_args(tg_ctx *ctx, const char *fn, const tg_tensor *x, const tg_tensor *gamma, const tg_tensor *beta,
                        int ndim_norm, double eps, int64_t *N, int64_t *C) {
    if (!tg_check_arg(ctx, fn, "x", x)) return false;
    char sx[TG_SHAPE_STR], sp[TG_SHAPE_STR], sn[TG_SHAPE_STR];
    if (ndim_norm < 1 || ndim_norm > x->ndim) {
        tg_error(ctx, TG_ERR_VALUE, fn, "ndim_norm = %d must be in 1..%d (the dims of x %s)", ndim_norm, x->ndim,
                 tg_shape_of(sx, x));
        return false;
    }
    if (!isfinite(eps) || eps < 0) {
        tg_error(ctx, TG_ERR_VALUE, fn, "eps = %g must be finite and >= 0", eps);
        return false;
    }
    const int lead = x->ndim - ndim_norm;
    const int64_t *nshape = x->shape + lead;
    int64_t c = 1;
    for (int d = 0; d < ndim_norm; d++) c *= nshape[d];
    if (c < 1) {
        tg_error(ctx, TG_ERR_SHAPE, fn, "x %s: the normalized dims %s hold no element", tg_shape_of(sx, x),
                 tg_shape_str(sn, sizeof sn, ndim_norm, nshape));
        return false;
    }
    const tg_tensor *ps[2] = {gamma, beta};
    const char *names[2] = {"gamma", "beta"};
    for (int k = 0; k < 2; k++) {
        const tg_tensor *p = ps[k];
        if (!p) continue;
        if (!tg_check_same_dtype(ctx, fn, x, p)) return false;
        bool same = p->ndim == ndim_norm;
        for (int d = 0; same && d < ndim_norm; d++) same = p->shape[d] == nshape[d];
        if (!same) {
            tg_error(ctx, TG_ERR_SHAPE, fn, "%s %s is not the normalized shape %s (the last %d dims of x %s)", names[k],
                     tg_shape_of(sp, p), tg_shape_str(sn, sizeof sn, ndim_norm, nshape), ndim_norm, tg_shape_of(sx, x));
            return false;
        }
    }
    *C = c;
    *N = c ? x->numel / c : 0;
    return true;
}

bool tg_norm_check_args_lowp(tg_ctx *ctx, const char *fn, const tg_tensor *x, const tg_tensor *gamma,
                             const tg_tensor *beta, int ndim_norm, double eps, int64_t *N, int64_t *C) {
    if (!tg_check_arg_any(ctx, fn, "x", x)) return false;
    if (!tg_is_lowp(x->dtype)) return tg_norm_check_args(ctx, fn, x, gamma, beta, ndim_norm, eps, N, C);
    if ((gamma && !tg_check_arg_any(ctx, fn, "gamma", gamma)) || (beta && !tg_check_arg_any(ctx, fn, "beta", beta)))
        return false;
    if ((gamma && !tg_check_same_dtype(ctx, fn, x, gamma)) || (beta && !tg_check_same_dtype(ctx, fn, x, beta)))
        return false;
    tg_tensor_impl hx = *tg_impl(x), hg = gamma ? *tg_impl(gamma) : hx, hb = beta ? *tg_impl(beta) : hx;
    hx.pub.dtype = hg.pub.dtype = hb.pub.dtype = TG_F32;
    return tg_norm_check_args(ctx, fn, &hx.pub, gamma ? &hg.pub : NULL, beta ? &hb.pub : NULL, ndim_norm, eps, N, C);
}

static void *data_of(const tg_tensor *t) { return t ? t->data : NULL; }

bool tg_norm_record(tg_ctx *ctx, const char *fn, const tg_op_def *op, tg_tensor *x, tg_tensor *gamma, tg_tensor *beta,
                    int ndim_norm, double eps, int n_stats, tg_norm_fwd *f) {
    int64_t N, C;
    if (!tg_norm_check_args(ctx, fn, x, gamma, beta, ndim_norm, eps, &N, &C)) return false;
    tg_tensor *y = tg_new_like(ctx, fn, x);
    if (!y) return false;
    tg_tensor *in[3] = {x, gamma, beta};
    double *saved = NULL;
    tg_node *n = tg_record(ctx, op, y, 3, in);
    if (n) {
        n->i[0] = N, n->i[1] = C;
        n->f[0] = eps;
        saved = tg_node_save(ctx, n, (size_t)(N > 0 ? n_stats * N : 1) * sizeof *saved);
        size_t es = tg_esize(x->dtype);
        tg_node_count_saved(ctx, n, (size_t)x->numel * es + (gamma ? (size_t)C * es : 0));
    }
    if (!tg_ok(ctx)) return false;
    *f = (tg_norm_fwd){.out = y,
                       .y = y->data,
                       .x = x->data,
                       .g = data_of(gamma),
                       .b = data_of(beta),
                       .saved = saved,
                       .N = N,
                       .C = C,
                       .f64 = x->dtype == TG_F64,
                       .threads = tg_threads(ctx)};
    return true;
}

bool tg_norm_grads(tg_ctx *ctx, tg_node *n, tg_norm_bwd *b) {
    tg_tensor *x = n->in[0], *gamma = n->in[1], *beta = n->in[2];
    tg_tensor *dx = tg_grad_of(ctx, x), *dg = tg_grad_of(ctx, gamma), *db = tg_grad_of(ctx, beta);
    if (!tg_ok(ctx)) return false;
    *b = (tg_norm_bwd){.dx = data_of(dx),
                       .dg = data_of(dg),
                       .db = data_of(db),
                       .dy = n->out->grad->data,
                       .x = x->data,
                       .g = data_of(gamma),
                       .saved = n->saved,
                       .N = n->i[0],
                       .C = n->i[1],
                       .f64 = x->dtype == TG_F64,
                       .threads = tg_threads(ctx)};
    return true;
}

/* ---- the modules ------------------------------------------------------------------ */

/* What tells RMSNorm and LayerNorm apart. */
typedef struct norm_kind {
    const char *name;     /* the module's kind, "RMSNorm" or "LayerNorm" */
    size_t size;          /* of its struct */
    const char *defaults; /* the function giving its options' defaults */
    tg_tensor *(*fused)(tg_ctx *ctx, tg_tensor *x, tg_tensor *gamma, tg_tensor *beta, int ndim_norm, double eps);
    const tg_module_ops *ops; /* its methods: the shared ones, its forward */
} norm_kind;

/* tg_rmsnorm and tg_layernorm (include/tapegrad/layers.h) have the same
 * members, in two structs so that each kind's functions take their own
 * type. The shared code reaches the members through pointers taken from
 * the layer's own struct, the kind told by its methods. */
typedef struct norm_fields {
    int *ndim;
    int64_t *normalized_shape; /* TG_MAX_DIMS of them */
    double *eps;
    bool *affine, *bias;
    tg_tensor **gamma, **beta;
} norm_fields;
#define NORM_FIELDS(l) \
    ((norm_fields){&(l)->ndim, (l)->normalized_shape, &(l)->eps, &(l)->affine, &(l)->bias, &(l)->gamma, &(l)->beta})

static const tg_module_ops LAYERNORM_OPS; /* defined below, with the functions it lists */

/* The members of a norm layer of either kind. */
static norm_fields fields_of(const tg_module *m) {
    void *layer = (void *)(uintptr_t)m;
    if (m->ops_ == &LAYERNORM_OPS) return NORM_FIELDS((tg_layernorm *)layer);
    return NORM_FIELDS((tg_rmsnorm *)layer);
}

/* "RMSNorm(dim=384, eps=1e-06, affine=true, bias=false)"; dim is "(4, 8)"
 * when more than one dim is normalized. */
static size_t norm_repr(const tg_module *m, char *buf, size_t size) {
    const norm_fields l = fields_of(m);
    char dim[TG_SHAPE_STR];
    if (*l.ndim == 1) snprintf(dim, sizeof dim, "%lld", (long long)l.normalized_shape[0]);
    else tg_shape_str(dim, sizeof dim, *l.ndim, l.normalized_shape);
    int n = snprintf(buf, size, "%s(dim=%s, eps=%g, affine=%s, bias=%s)", m->kind, dim, *l.eps,
                     *l.affine ? "true" : "false", *l.bias ? "true" : "false");
    return n > 0 ? (size_t)n : 0;
}

static bool norm_params(tg_ctx *ctx, tg_module *m, const char *prefix, tg_params *list) {
    const norm_fields l = fields_of(m);
    if (*l.gamma && !tg_params_add(ctx, list, prefix, "gamma", *l.gamma, false)) return false;
    return !*l.beta || tg_params_add(ctx, list, prefix, "beta", *l.beta, false);
}

static int64_t norm_numel(const tg_module *m) {
    const norm_fields l = fields_of(m);
    return (*l.gamma ? (*l.gamma)->numel : 0) + (*l.beta ? (*l.beta)->numel : 0);
}

static void norm_free(tg_ctx *ctx, tg_module *m) {
    const norm_fields l = fields_of(m);
    tg_tensor_free(ctx, *l.gamma);
    tg_tensor_free(ctx, *l.beta);
    tg_heap_free(ctx, m);
}

/* The generic forward (tg_module_forward, Sequential) of either kind. */
static tg_tensor *rmsnorm_forward_m(tg_ctx *ctx, tg_module *m, tg_tensor *x) {
    return tg_rmsnorm_forward(ctx, (tg_rmsnorm *)(void *)m, x);
}
static tg_tensor *layernorm_forward_m(tg_ctx *ctx, tg_module *m, tg_tensor *x) {
    return tg_layernorm_forward(ctx, (tg_layernorm *)(void *)m, x);
}

static const tg_module_ops RMSNORM_OPS = {
    .repr = norm_repr, .params = norm_params, .numel = norm_numel, .free = norm_free, .forward = rmsnorm_forward_m};
static const tg_module_ops LAYERNORM_OPS = {
    .repr = norm_repr, .params = norm_params, .numel = norm_numel, .free = norm_free, .forward = layernorm_forward_m};

static const norm_kind RMSNORM = {"RMSNorm", sizeof(tg_rmsnorm), "tg_rmsnorm_defaults", tg_rmsnorm_fused, &RMSNORM_OPS};
static const norm_kind LAYERNORM = {"LayerNorm", sizeof(tg_layernorm), "tg_layernorm_defaults", tg_layernorm_fused,
                                    &LAYERNORM_OPS};

/* The constructor arguments: ndim in 1..TG_MAX_DIMS, normalized_shape
 * non-NULL with sizes >= 1, eps > 0 and finite, a known dtype. Errors name
 * the argument and its value. */
static bool check_new(tg_ctx *ctx, const char *fn, int ndim, const int64_t *normalized_shape, double eps,
                      tg_dtype dtype) {
    if (!tg_ok(ctx)) return false;
    if (ndim < 1 || ndim > TG_MAX_DIMS) {
        tg_error(ctx, TG_ERR_VALUE, fn, "ndim = %d must be in 1..%d", ndim, TG_MAX_DIMS);
        return false;
    }
    if (!normalized_shape) {
        tg_null_error(ctx, fn, "normalized_shape");
        return false;
    }
    for (int d = 0; d < ndim; d++) {
        if (normalized_shape[d] < 1) {
            char s[TG_SHAPE_STR];
            tg_error(ctx, TG_ERR_VALUE, fn, "normalized_shape[%d] = %lld must be >= 1 (normalized_shape %s)", d,
                     (long long)normalized_shape[d], tg_shape_str(s, sizeof s, ndim, normalized_shape));
            return false;
        }
    }
    int64_t numel;
    if (!tg_check_shape(ctx, fn, ndim, normalized_shape, &numel)) return false;
    if (!(eps > 0) || !isfinite(eps)) {
        tg_error(ctx, TG_ERR_VALUE, fn, "eps = %g must be > 0 and finite", eps);
        return false;
    }
    return tg_check_dtype_value(ctx, fn, dtype);
}

/* A new layer of the given kind; gamma starts at 1, beta at 0. */
static void *norm_new(tg_ctx *ctx, const char *fn, const norm_kind *kind, const char *name, int ndim,
                      const int64_t *normalized_shape, double eps, bool affine, bool bias, tg_dtype dtype) {
    if (!check_new(ctx, fn, ndim, normalized_shape, eps, dtype)) return NULL;
    tg_module *m = tg_module_alloc(ctx, fn, kind->size, kind->name, name, dtype, kind->ops);
    if (!m) return NULL;
    const norm_fields l = fields_of(m);
    *l.ndim = ndim;
    for (int d = 0; d < ndim; d++) l.normalized_shape[d] = normalized_shape[d];
    for (int d = ndim; d < TG_MAX_DIMS; d++) l.normalized_shape[d] = 1;
    *l.eps = eps;
    *l.affine = affine;
    *l.bias = affine && bias; /* no affine: no parameters at all (PyTorch) */
    if (*l.affine) *l.gamma = tg_param_from(ctx, tg_full(ctx, dtype, ndim, normalized_shape, 1.0));
    if (*l.bias) *l.beta = tg_param_from(ctx, tg_full(ctx, dtype, ndim, normalized_shape, 0.0));
    return tg_module_built(ctx, m);
}

/* The kind's fused op on x, whose trailing dims must be the layer's
 * normalized_shape and whose dtype the layer's. */
static tg_tensor *norm_forward(tg_ctx *ctx, const char *fn, const norm_kind *kind, tg_module *m, tg_tensor *x) {
    if (!tg_check_layer(ctx, fn, m)) return NULL;
    const norm_fields l = fields_of(m);
    if (!tg_check_arg_any(ctx, fn, "x", x)) return NULL;
    bool fits = x->ndim >= *l.ndim;
    for (int d = 0; fits && d < *l.ndim; d++) fits = x->shape[x->ndim - *l.ndim + d] == l.normalized_shape[d];
    if (!fits) {
        char sx[TG_SHAPE_STR], sn[TG_SHAPE_STR];
        tg_error(ctx, TG_ERR_SHAPE, fn, "input %s does not end with normalized_shape %s", tg_shape_of(sx, x),
                 tg_shape_str(sn, sizeof sn, *l.ndim, l.normalized_shape));
        return NULL;
    }
    if (!tg_check_layer_dtype(ctx, fn, x, m->dtype)) return NULL;
    /* under autocast: x, gamma and beta in the compute dtype (layers/autocast.c) */
    return kind->fused(ctx, tg_autocast_input(ctx, x), tg_autocast_param(ctx, *l.gamma),
                       tg_autocast_param(ctx, *l.beta), *l.ndim, *l.eps);
}

/* norm_new for the _new_ex forms, whose options come in a struct: a zero
 * eps most likely means a zeroed struct, so the message says where the
 * defaults are. */
static void *norm_new_opts(tg_ctx *ctx, const char *fn, const norm_kind *kind, const char *name, int ndim,
                           const int64_t *normalized_shape, double eps, bool affine, bool bias, tg_dtype dtype) {
    if (eps == 0 && tg_ok(ctx)) {
        tg_error(ctx, TG_ERR_VALUE, fn,
                 "eps = 0 must be > 0 and finite (start the options from %s(): a zeroed "
                 "struct is not the defaults)",
                 kind->defaults);
        return NULL;
    }
    return norm_new(ctx, fn, kind, name, ndim, normalized_shape, eps, affine, bias, dtype);
}

/* ---- the public functions ---------------------------------------------------------- */

tg_rmsnorm_opts tg_rmsnorm_defaults(void) {
    return (tg_rmsnorm_opts){.eps = TG_RMSNORM_EPS, .affine = true, .bias = false, .dtype = TG_F32};
}

tg_layernorm_opts tg_layernorm_defaults(void) {
    return (tg_layernorm_opts){.eps = TG_LAYERNORM_EPS, .affine = true, .bias = true, .dtype = TG_F32};
}

tg_rmsnorm *tg_rmsnorm_new(tg_ctx *ctx, const char *name, int ndim, const int64_t *normalized_shape, double eps,
                           bool affine, bool bias, tg_dtype dtype) {
    return norm_new(ctx, __func__, &RMSNORM, name, ndim, normalized_shape, eps, affine, bias, dtype);
}

tg_layernorm *tg_layernorm_new(tg_ctx *ctx, const char *name, int ndim, const int64_t *normalized_shape, double eps,
                               bool affine, bool bias, tg_dtype dtype) {
    return norm_new(ctx, __func__, &LAYERNORM, name, ndim, normalized_shape, eps, affine, bias, dtype);
}

tg_rmsnorm *tg_rmsnorm_new_ex(tg_ctx *ctx, const char *name, int ndim, const int64_t *normalized_shape,
                              const tg_rmsnorm_opts *opts) {
    const tg_rmsnorm_opts o = opts ? *opts : tg_rmsnorm_defaults();
    return norm_new_opts(ctx, __func__, &RMSNORM, name, ndim, normalized_shape, o.eps, o.affine, o.bias, o.dtype);
}

tg_layernorm *tg_layernorm_new_ex(tg_ctx *ctx, const char *name, int ndim, const int64_t *normalized_shape,
                                  const tg_layernorm_opts *opts) {
    const tg_layernorm_opts o = opts ? *opts : tg_layernorm_defaults();
    return norm_new_opts(ctx, __func__, &LAYERNORM, name, ndim, normalized_shape, o.eps, o.affine, o.bias, o.dtype);
}

tg_rmsnorm *tg_rmsnorm_new1(tg_ctx *ctx, const char *name, int64_t dim) {
    const tg_rmsnorm_opts o = tg_rmsnorm_defaults();
    return norm_new(ctx, __func__, &RMSNORM, name, 1, &dim, o.eps, o.affine, o.bias, o.dtype);
}

tg_layernorm *tg_layernorm_new1(tg_ctx *ctx, const char *name, int64_t dim) {
    const tg_layernorm_opts o = tg_layernorm_defaults();
    return norm_new(ctx, __func__, &LAYERNORM, name, 1, &dim, o.eps, o.affine, o.bias, o.dtype);
}

tg_tensor *tg_rmsnorm_forward(tg_ctx *ctx, tg_rmsnorm *layer, tg_tensor *x) {
    return norm_forward(ctx, __func__, &RMSNORM, TG_MODULE(layer), x);
}

tg_tensor *tg_layernorm_forward(tg_ctx *ctx, tg_layernorm *layer, tg_tensor *x) {
    return norm_forward(ctx, __func__, &LAYERNORM, TG_MODULE(layer), x);
}

bool tg_rmsnorm_params(tg_ctx *ctx, tg_rmsnorm *layer, tg_params *list) {
    return tg_module_params(ctx, TG_MODULE(layer), list);
}

bool tg_layernorm_params(tg_ctx *ctx, tg_layernorm *layer, tg_params *list) {
    return tg_module_params(ctx, TG_MODULE(layer), list);
}

void tg_rmsnorm_free(tg_ctx *ctx, tg_rmsnorm *layer) { tg_module_free(ctx, TG_MODULE(layer)); }

void tg_layernorm_free(tg_ctx *ctx, tg_layernorm *layer) { tg_module_free(ctx, TG_MODULE(layer)); }

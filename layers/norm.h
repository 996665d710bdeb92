/* What RMSNorm and LayerNorm share (layers/norm.c): the argument check of
 * their fused and composed ops, and the two halves of a fused norm's tape
 * record that do not depend on the norm — recording the forward, and
 * gathering the backward's tensors. The norm-specific parts, the kernels'
 * calls and the derivations, are in layers/rmsnorm.c and layers/layernorm.c;
 * the modules (tg_rmsnorm_new, tg_layernorm_new, ...) are in layers/norm.c.
 * Not installed. */
#ifndef TG_LAYERS_NORM_H
#define TG_LAYERS_NORM_H

#include "autograd/tape.h"
#include "layers/module.h"

/* The arguments of a fused or composed norm, checked: x non-NULL; ndim_norm
 * in 1..x->ndim; gamma/beta NULL or of the normalized shape (x's trailing
 * ndim_norm sizes) and x's dtype; eps finite and >= 0; the row size C >= 1.
 * Fills N (rows) and C (row size). */
bool tg_norm_check_args(tg_ctx *ctx, const char *fn, const tg_tensor *x, const tg_tensor *gamma, const tg_tensor *beta,
                        int ndim_norm, double eps, int64_t *N, int64_t *C);
/* tg_norm_check_args for a norm that also takes bfloat16 / float16 x (then
 * gamma and beta must share its dtype): the same checks and messages, the
 * shape checks run on float32 copies of the headers (no data is read). */
bool tg_norm_check_args_lowp(tg_ctx *ctx, const char *fn, const tg_tensor *x, const tg_tensor *gamma,
                             const tg_tensor *beta, int ndim_norm, double eps, int64_t *N, int64_t *C);

/* A fused norm's forward, ready for its kernel: x viewed as N rows of C,
 * gamma and beta of C elements (the kernels' g and b). */
typedef struct tg_norm_fwd {
    tg_tensor *out;        /* y, the op's result */
    void *y;               /* out->data */
    const void *x, *g, *b; /* the data of x, gamma, beta; NULL when absent */
    double *saved;         /* n_stats arrays of N doubles for the backward;
                              NULL when no backward will run */
    int64_t N, C;
    bool f64; /* float64 data (else float32) */
    int threads;
} tg_norm_fwd;

/* Checks the arguments (tg_norm_check_args, errors naming `fn`), makes y
 * like x, records op `op` (its descriptor) on inputs (x, gamma, beta) with
 * i[0] = N, i[1] = C, f[0] = eps, and saves n_stats doubles per row (the
 * row statistics the kernel writes), counting x and gamma as kept by
 * pointer. False on error. */
bool tg_norm_record(tg_ctx *ctx, const char *fn, const tg_op_def *op, tg_tensor *x, tg_tensor *gamma, tg_tensor *beta,
                    int ndim_norm, double eps, int n_stats, tg_norm_fwd *f);

/* A fused norm's backward, ready for its kernel. */
typedef struct tg_norm_bwd {
    void *dx, *dg, *db;     /* the gradients to add into; NULL when not wanted */
    const void *dy, *x, *g; /* g NULL: no gamma */
    const double *saved;    /* the row statistics the forward saved */
    int64_t N, C;
    bool f64;
    int threads;
} tg_norm_bwd;

/* The fused op on a bfloat16 / float16 x (layers/norm_lowp.c): statistics,
 * normalization and scaling in float32, one rounding to x's dtype at the
 * end; gamma and beta of x's dtype. Errors name fn. */
tg_tensor *tg_norm_lowp(tg_ctx *ctx, const char *fn, bool layernorm, tg_tensor *x, tg_tensor *gamma, tg_tensor *beta,
                        int ndim_norm, double eps);

/* Gathers the backward's arrays from a record made by tg_norm_record.
 * False when the context is in error (nothing to do). */
bool tg_norm_grads(tg_ctx *ctx, tg_node *n, tg_norm_bwd *b);

/* The fused norms' double-backward and tangent rules (layers/norm_rules.c),
 * for their descriptors (rmsnorm.c, layernorm.c; the 16-bit path's in
 * norm_lowp.c takes the tangent rules): records with inputs x, gamma,
 * beta, i[0] = N, i[1] = C, f[0] = eps. */
bool tg_rmsnorm_grad(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx);
bool tg_layernorm_grad(tg_ctx *ctx, const tg_node *n, tg_tensor *dy, tg_tensor **dx);
tg_tensor *tg_rmsnorm_jvp(tg_ctx *ctx, tg_node *n, tg_tensor *const *t);
tg_tensor *tg_layernorm_jvp(tg_ctx *ctx, tg_node *n, tg_tensor *const *t);

#endif

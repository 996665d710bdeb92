/* The shared driver of elementwise unary ops (exp, relu, pow by a scalar,
 * ...). Internal (not installed).
 *
 * An op supplies, for each dtype, a forward kernel y = f(x) and a backward
 * kernel dx += dy * f'(x) over n contiguous elements (the op's one scalar
 * argument `a` passed to both), and says whether backward reads x and/or
 * y. The driver checks the argument, makes the output, runs the kernels
 * (split over threads in fixed chunks for big tensors: tg_split, which the
 * reductions use too), and records the op; its backward and tangent rule
 * are shared by every unary op (tg_unary_backward, tg_unary_jvp).
 * bfloat16 and float16 run the float32 kernels on blocks widened from the
 * 16-bit data, each result rounded once (unary.c). */
#ifndef TG_AUTOGRAD_UNARY_H
#define TG_AUTOGRAD_UNARY_H

#include "autograd/tape.h"
#include "tensor/parallel.h" /* TG_PAR_MIN, TG_PAR_CHUNK */

/* x, y, dx, dy: (n) contiguous */
typedef void (*tg_unary_fwd_f32)(float *restrict y, const float *restrict x, int64_t n, double a);
typedef void (*tg_unary_fwd_f64)(double *restrict y, const double *restrict x, int64_t n, double a);
typedef void (*tg_unary_bwd_f32)(float *restrict dx, const float *restrict dy, const float *restrict x,
                                 const float *restrict y, int64_t n, double a);
typedef void (*tg_unary_bwd_f64)(double *restrict dx, const double *restrict dy, const double *restrict x,
                                 const double *restrict y, int64_t n, double a);

/* A unary op: its descriptor (first, so that a record's n->op is the
 * op's: the shared backward and tangent rule below find the kernels
 * through it) and its kernels. */
typedef struct tg_unary_op {
    tg_op_def def;  /* name, backward (tg_unary_backward), rules, check facts */
    const char *fn; /* the public function, for messages: "tg_exp" */
    tg_unary_fwd_f32 fwd_f32;
    tg_unary_fwd_f64 fwd_f64;
    tg_unary_bwd_f32 bwd_f32;
    tg_unary_bwd_f64 bwd_f64;
    bool uses_x; /* backward reads the input (counted as saved bytes) */
    bool uses_y; /* backward reads the output */
    /* f'(x) in double, from x, y = f(x) and the scalar a: what the tangent
     * rule (tg_unary_jvp) multiplies t_x by. Written from the forward, not
     * taken from the backward kernel, so the adjoint test (tapegrad::check)
     * holds one against the other. */
    double (*deriv)(double x, double y, double a);
} tg_unary_op;

/* The kernels of op NAME in a tg_unary_op initializer: NAME_forward_f32,
 * _f64 and NAME_backward_f32, _f64, from the op family's template (e.g.
 * ops_elementwise.inc). */
#define TG_UNARY_KERNELS(NAME)                                                                    \
    .fwd_f32 = NAME##_forward_f32, .fwd_f64 = NAME##_forward_f64, .bwd_f32 = NAME##_backward_f32, \
    .bwd_f64 = NAME##_backward_f64

/* y = op(x; a), recorded with op's descriptor. NULL when ctx is NULL or in
 * error, or x is NULL. */
tg_tensor *tg_unary_apply(tg_ctx *ctx, const tg_unary_op *op, tg_tensor *x, double a);
/* The backward of every unary op (its descriptor's): dx += dy * f'(x) by
 * the op's backward kernel. */
void tg_unary_backward(tg_ctx *ctx, tg_node *n);
/* The tangent rule of every unary op: t_y = f'(x) t_x, f' the op's deriv. */
tg_tensor *tg_unary_jvp(tg_ctx *ctx, tg_node *n, tg_tensor *const *t);

/* Whole rows of `row` elements per piece, for row-wise work: about
 * TG_PAR_CHUNK elements, at least one row. */
static inline int64_t tg_rows_per_piece(int64_t row) {
    return row >= TG_PAR_CHUNK ? 1 : TG_PAR_CHUNK / (row > 0 ? row : 1);
}

/* A piece of elementwise work: elements [i0, i0 + len) of what arg
 * describes (its pointers, sizes and scalars, in a struct of the caller's). */
typedef void (*tg_piece_fn)(void *arg, int64_t i0, int64_t len);

/* tg_split's threaded case: the TG_PAR_CHUNK pieces of [0, n) as tasks of
 * the task pool (tensor/parallel.h) on nt threads. */
void tg_split_parallel(int nt, int64_t n, tg_piece_fn piece, void *arg);

/* Calls piece(arg, i0, len) over [0, n): once for all of it, or for
 * TG_PAR_CHUNK-sized pieces spread over the context's threads when
 * n >= TG_PAR_MIN and more than one thread is allowed. Inline, so that the
 * serial call, whose piece the caller names, is inlined too: out of line it
 * cost ~3 ns per op (bench --only tiny: 66 -> 70 ns). */
static inline void tg_split(tg_ctx *ctx, int64_t n, tg_piece_fn piece, void *arg) {
    const int nt = tg_threads(ctx);
    if (nt > 1 && n >= TG_PAR_MIN) tg_split_parallel(nt, n, piece, arg);
    else piece(arg, 0, n);
}

#endif

/* Instantiates a kernel template once per element type: the one template
 * idiom of the tree (docs/DESIGN.md, "Kernels for float and double").
 *
 * A template is a file of kernels (*.inc) written once for an element type
 * T. A .c file instantiates it with two lines:
 *
 *   #define TG_TEMPLATE "layers/rmsnorm_kernel.inc"
 *   #include "tensor/instantiate.h"
 *
 * which includes the template twice, with
 *
 *   macro        first pass            second pass
 *   T            float                 double
 *   TG_FN(name)  name##_f32            name##_f64
 *   TG_M(f)      f##f (expf, sqrtf)    f (exp, sqrt): libm for T
 *   TG_F64       0                     1
 *
 * and undefines all of them, TG_TEMPLATE included, afterwards. So a template
 * line `static void TG_FN(add_row)(T *y, ...)` defines add_row_f32 and
 * add_row_f64. Every template lists the names it defines in its opening
 * comment, so that grep, ctags readers and debugger users find
 * add_row_f32 as text.
 *
 * Kernels small enough to live in their op's .c file stay there: the file
 * instantiates itself. Its kernels sit at the top inside `#ifdef T`, the op
 * code after `#else` (compiled once), and the file names itself by its path
 * from the source root (not __FILE__: that would name this header where it
 * is expanded):
 *
 *   #ifdef T
 *   static void TG_FN(dropout_apply)(T *restrict y, ...) { ... }
 *   #else
 *   #include "autograd/tape.h"
 *   #define TG_TEMPLATE "autograd/ops_dropout.c"
 *   #include "tensor/instantiate.h"
 *   ... the op, calling dropout_apply_f32 / dropout_apply_f64 ...
 *   #endif
 *
 * No include guard: this file is meant to be included once per template. */
#ifndef TG_TEMPLATE
#error "define TG_TEMPLATE as the template's path before including tensor/instantiate.h"
#endif
#ifdef TG_INSTANTIATING
#error "tensor/instantiate.h included from a template: is TG_TEMPLATE __FILE__? Give the template's path."
#endif
#define TG_INSTANTIATING

#define T float
#define TG_FN(name) name##_f32
#define TG_M(fn) fn##f
#define TG_F64 0
#include TG_TEMPLATE
#undef T
#undef TG_FN
#undef TG_M
#undef TG_F64

#define T double
#define TG_FN(name) name##_f64
#define TG_M(fn) fn
#define TG_F64 1
#include TG_TEMPLATE
#undef T
#undef TG_FN
#undef TG_M
#undef TG_F64

#undef TG_INSTANTIATING
#undef TG_TEMPLATE

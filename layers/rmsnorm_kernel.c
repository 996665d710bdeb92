/* RMSNorm raw kernels, float32 and float64: the code is written once in
 * rmsnorm_kernel.inc and instantiated here for both types.
 * Declarations and conventions: layers/norm_kernels.h.
 *
 * TG_T_SAFE_LO/HI bound the rstd for which elementwise work is done in the
 * input type with r rounded to it once. For float, r outside [2^-120, 2^120]
 * (rows with rms near FLT_MAX, or eps < 1e-72 with a near-zero row) would
 * make x*r lose precision or overflow, so such rows are done in double. For
 * double the whole range is fine. TG_T_MIN is the type's smallest normal
 * number (see the underflow test in norm_kernels_util.h).
 *
 * These loops are the hot path of every norm layer: the build compiles
 * this file at -O3 (CMakeLists.txt, TG_O3_SOURCES). */

#include "layers/norm_kernels.h"

#include "layers/norm_kernels_util.h"

#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#define TG_T float
#define TG_N(name) name##_f32
#define TG_T_MIN ((double)FLT_MIN)
#define TG_T_SAFE_LO 0x1p-120
#define TG_T_SAFE_HI 0x1p+120
#include "layers/norm_reduce.inc"
#include "layers/rmsnorm_kernel.inc"
#undef TG_T
#undef TG_N
#undef TG_T_SAFE_LO
#undef TG_T_SAFE_HI
#undef TG_T_MIN

#define TG_T double
#define TG_N(name) name##_f64
#define TG_T_MIN DBL_MIN
#define TG_T_SAFE_LO 0.0
#define TG_T_SAFE_HI HUGE_VAL
#include "layers/norm_reduce.inc"
#include "layers/rmsnorm_kernel.inc"
#undef TG_T
#undef TG_N
#undef TG_T_SAFE_LO
#undef TG_T_SAFE_HI
#undef TG_T_MIN

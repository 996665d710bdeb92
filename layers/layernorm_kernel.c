/* LayerNorm raw kernels, float32 and float64, and on bfloat16 / float16
 * storage: the code is written once in layers/layernorm_kernel.inc and
 * instantiated here for each (layers/norm_instantiate.h). Declarations
 * and conventions: layers/norm_kernels.h.
 *
 * These loops are the hot path of every norm layer: the build compiles
 * this file at -O3 (CMakeLists.txt, TG_O3_SOURCES). */
#include "layers/norm_kernels.h"

#include "layers/norm_kernels_util.h"
#include "tensor/half.h"
#include "tensor/parallel.h"

#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#define TG_NORM_TEMPLATE "layers/layernorm_kernel.inc"
#include "layers/norm_instantiate.h"

/* tapegrad's matrix multiply: a packed, cache-blocked GEMM with a
 * register-tiled SIMD micro-kernel. Internal (not installed): every matmul and
 * Linear in the library goes through it.
 *
 *   C = alpha * op(A) op(B) + beta * C          (row-major everywhere)
 *
 *   op(A) is (M,K): A is (M,K) with row stride lda, or (K,M) when trans_a.
 *   op(B) is (K,N): B is (K,N) with row stride ldb, or (N,K) when trans_b.
 *   C is (M,N) with row stride ldc.
 *   beta == 0 means C is overwritten: it is never read, so NaN garbage in C
 *   is ignored. alpha == 0 or K == 0 gives C = beta * C (A, B not read).
 *   C must not overlap A or B. Arguments are not checked (internal kernel):
 *   the caller guarantees lda, ldb, ldc >= the row widths above.
 *
 * The transposes are absorbed while packing panels of A and B into
 * contiguous buffers; no transposed copy is ever made. Linear uses
 *   y  = x W^T   (trans_b)   dx = dy W   (none)   dW = dy^T x   (trans_a).
 *
 * Two paths, chosen per call from the shape (tensor/gemm.c says how):
 *  - packed (Goto/BLIS), for large problems: loop over NC-wide column blocks
 *    of C, then KC-deep slices of K; op(B) is packed into NR-wide panels,
 *    MC x KC blocks of op(A) into MR-high panels, and the MR x NR
 *    micro-kernel runs over the tiles. With several threads there is no
 *    barrier: C is cut into tasks (row chunks x column chunks) handed out
 *    one at a time by the task pool (tensor/parallel.h), each thread packs
 *    its own A blocks, and the B panels (whole K depth, shared) are packed
 *    by the first thread that needs each one (or privately, by a thread
 *    that would otherwise wait for a packer that lost its core). Needs a workspace (below): with several threads
 *    it holds op(B) whole-depth, up to 16 MB per super-block of columns.
 *  - direct, for small batches and small problems: A and B are read in
 *    place (KC x 2-vector blocks of B are transposed into a stack buffer
 *    when trans_b), with a smaller register tile; no workspace.
 * The micro-kernels are chosen at compile time: AVX-512 (__AVX512F__),
 * AVX2+FMA (__AVX2__ && __FMA__) or portable C; tg_gemm_kernel_name() says
 * which.
 *
 * Determinism: each element of C is computed by exactly one thread, as
 *   for each KC slice s (in order):  acc = sum over k in s, one FMA at a
 *   time in increasing k, starting from 0;
 *   C = alpha*acc + beta*C on the first slice (alpha*acc when beta == 0),
 *   C = alpha*acc + C on the later ones (each one fused multiply-add).
 * The slice boundaries depend only on K and the dtype. Threads split the
 * output tiles (rows or column panels of C), never K, so the result is
 * bitwise identical for any thread count. Both paths follow this same
 * per-element recipe, so they give the same bits, and a row of C does not
 * depend on M either (a batch of 1 gives the same bits as that row inside
 * a batch of 64). Without FMA hardware (portable build) "FMA" above is a
 * separate multiply and add.
 *
 * Workspace: the packed path's buffers. Ask tg_gemm_workspace_size() and
 * pass that many bytes (64-byte aligned, e.g. from the context's arena) to
 * the _ws variants; the same buffer can be reused across calls. With
 * work == NULL or too small, the call allocates its own buffer with
 * aligned_alloc and frees it (page faults on every call: avoid in hot
 * paths); a buffer big enough for fewer threads runs with fewer threads
 * (same bits). If the allocation fails, the call takes the direct path. */
#ifndef TG_TENSOR_GEMM_H
#define TG_TENSOR_GEMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tensor/friend.h"

/* Bytes of workspace the _ws variants want for an (M,N,K) problem with this
 * many threads, whatever the transposes; elem_size is sizeof(float) or
 * sizeof(double). 0 when no call of that shape packs (then work may be
 * NULL). Includes 64 bytes of slack, so an unaligned buffer of this size
 * also works. */
size_t tg_gemm_workspace_size(int64_t M, int64_t N, int64_t K, size_t elem_size, int threads);

/* C (M,N) = alpha * op(A) op(B) + beta * C, see above. threads >= 1 (values
 * below 1 count as 1; ignored without OpenMP). work: work_size bytes of
 * scratch, or NULL. */
void tg_gemm_f32_ws(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                    int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc, int threads,
                    void *work, size_t work_size);
void tg_gemm_f64_ws(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha, const double *A,
                    int64_t lda, const double *B, int64_t ldb, double beta, double *C, int64_t ldc, int threads,
                    void *work, size_t work_size);

/* Same, allocating the workspace per call when the problem needs one. */
void tg_gemm_f32(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                 const float *B, int64_t ldb, float beta, float *C, int64_t ldc, int threads);
void tg_gemm_f64(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha, const double *A,
                 int64_t lda, const double *B, int64_t ldb, double beta, double *C, int64_t ldc, int threads);

/* Always the direct path (no workspace, no allocation): same bits as the
 * calls above, slower on large problems. */
void tg_gemm_f32_direct(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                        int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc, int threads);
void tg_gemm_f64_direct(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha, const double *A,
                        int64_t lda, const double *B, int64_t ldb, double beta, double *C, int64_t ldc, int threads);

/* Which micro-kernel was compiled in: "avx512", "avx2" or "portable". */
TG_FRIEND const char *tg_gemm_kernel_name(void);

/* ---- bfloat16 operands (tensor/gemm_bf16.c) -------------------------------
 * C (M,N) = alpha * op(A) op(B) + beta * C with A and B bfloat16 (the bits,
 * tensor/half.h) multiplied in bfloat16 and summed in float32, and C float32
 * or bfloat16. Shapes, strides, transposes, beta == 0 and the trivial cases
 * as above (a bfloat16 C then gets beta * C rounded once); the arguments
 * come in a struct (tg_gemm_bf16_args, below).
 *
 * The rule for each element of C, the same bits for every kernel, thread
 * count, workspace and M (docs/mixed-precision.md):
 *   K is read in pairs (k = 2p, 2p+1; an odd K ends with a zero), the pairs
 *   cut into equal slices of at most 384 pairs (depending on K only);
 *   for each slice in order: acc = 0, then for each pair in increasing p
 *       acc = acc + a[2p+1] b[2p+1],  then  acc = acc + a[2p] b[2p]
 *   each step one rounding to float32 (nearest even) of the exact sum, as
 *   if the exponent were unbounded; a result below 2^-126 in magnitude
 *   becomes a zero of its sign, and a subnormal bfloat16 input counts as a
 *   zero of its sign (the rule of VDPBF16PS, checked bitwise on this
 *   project's CPU);
 *   r = alpha*acc + beta*C after the first slice (beta*C rounded first,
 *   then one fused multiply-add; alpha*acc when beta == 0), r = alpha*acc + r
 *   after each later one (fused, no flushing);
 *   C = r, rounded once to bfloat16 (nearest even) when C is bfloat16.
 * NaN results are NaN (payload unspecified).
 *
 * Kernels, chosen per call: AVX-512 BF16 (VDPBF16PS) when the CPU has it,
 * else AVX2+FMA (two fused multiply-adds per pair, with the FTZ/DAZ bits of
 * MXCSR set for the sums), else portable C; asked of the CPU at run time,
 * so every build carries all three. TG_GEMM_BF16=avx512bf16|avx2|portable
 * in the environment picks one for TG_GEMM_BF16_AUTO (if the CPU has it).
 * REFERENCE is the rule above written out element by element (no packing,
 * no workspace): the tests' yardstick, and the fallback when no workspace
 * can be had. */
typedef enum tg_gemm_bf16_kernel {
    TG_GEMM_BF16_AUTO,      /* the fastest this CPU has (or TG_GEMM_BF16) */
    TG_GEMM_BF16_AVX512,    /* VDPBF16PS: "avx512bf16" */
    TG_GEMM_BF16_AVX2,      /* AVX2 + FMA: "avx2" */
    TG_GEMM_BF16_PORTABLE,  /* C, packed: "portable" */
    TG_GEMM_BF16_REFERENCE, /* C, element by element: "reference" */
} tg_gemm_bf16_kernel;

/* True when this CPU (and build) can run the kernel; AUTO, PORTABLE and
 * REFERENCE always can. */
bool tg_gemm_bf16_available(tg_gemm_bf16_kernel kernel);
/* The kernel AUTO stands for here: AVX512, AVX2 or PORTABLE. */
tg_gemm_bf16_kernel tg_gemm_bf16_auto(void);
/* "avx512bf16", "avx2", "portable", "reference" (AUTO: its kernel's name). */
const char *tg_gemm_bf16_name(tg_gemm_bf16_kernel kernel);

/* One product: C (M,N) = alpha * op(A) op(B) + beta * C_in, written to C.
 * C_in is C itself (c_in == NULL) or another matrix of C's dtype with row
 * stride ldc_in, which may be 0: the same row for every row of C (a bias:
 * C = op(A) op(B) + b with beta = 1 rounds once, where copying b into C
 * first would write C twice). Not read when beta == 0. */
typedef struct tg_gemm_bf16_args {
    tg_gemm_bf16_kernel kernel; /* AUTO unless a test or benchmark picks one */
    bool trans_a, trans_b;
    int64_t M, N, K;
    float alpha, beta;
    const uint16_t *A; /* bfloat16 */
    int64_t lda;
    const void *B; /* bfloat16 (uint16_t *), or float * when b_f32 */
    int64_t ldb;
    bool b_f32; /* B float32, rounded to bfloat16 (nearest even, tensor/half.h) as it is read */
    void *C;    /* float *, or uint16_t * (bfloat16) when c_bf16 */
    int64_t ldc;
    bool c_bf16;
    const void *c_in; /* NULL: C */
    int64_t ldc_in;
    int threads; /* values below 1 count as 1 */
} tg_gemm_bf16_args;

/* Bytes of workspace tg_gemm_bf16_ws wants for this product (0: none); 64
 * bytes of slack included, as tg_gemm_workspace_size. */
size_t tg_gemm_bf16_workspace_size(const tg_gemm_bf16_args *g);

/* The product g by the rule above. A kernel this CPU lacks runs as AUTO.
 * work: work_size bytes of scratch, or NULL (then the call allocates; a
 * buffer big enough for one thread runs one thread, with the same bits). */
void tg_gemm_bf16_ws(const tg_gemm_bf16_args *g, void *work, size_t work_size);

#endif

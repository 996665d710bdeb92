/* tapegrad/tensor.h: tensors and the context (tensor/).
 *
 * Core types and status codes, the context (arena, persistent tensors,
 * error state, threads), the seeded RNG, tensor creation, manipulation and
 * printing. Include <tapegrad.h> for the whole library. */
#ifndef TAPEGRAD_TENSOR_H
#define TAPEGRAD_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* TG_API marks every function of the API, in every public header: the
 * libraries are compiled with hidden visibility, so these are the only
 * symbols a shared libtapegrad (and libtapegrad_check, libtapegrad_dist)
 * exports. A public function declared without it is missing from the shared
 * library; tests/source/exports.sh names it. */
#if defined(__GNUC__) || defined(__clang__)
#define TG_API __attribute__((visibility("default")))
#else
#define TG_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================== */
/* Core types                                                               */
/* ======================================================================== */

/* Maximum number of dimensions of a tensor. */
#define TG_MAX_DIMS 8

/* Element types. Mixing dtypes in one op is an error, never a silent cast.
 * TG_BF16 (bfloat16) and TG_F16 (IEEE half) are 16-bit storage types: the
 * ops take them, compute in float32 and store the input's dtype; a function
 * without a low-precision path refuses them (TG_ERR_DTYPE naming it).
 * See "Low precision" below. */
typedef enum tg_dtype { TG_F32 = 0, TG_F64 = 1, TG_BF16 = 2, TG_F16 = 3 } tg_dtype;

/* Status codes: the kind of the context's first error (TG_OK when none). */
typedef enum tg_status {
    TG_OK = 0,
    TG_ERR_NULL,  /* a NULL argument where a value was required */
    TG_ERR_SHAPE, /* shapes that do not fit the operation */
    TG_ERR_DTYPE, /* dtypes that differ or are not supported */
    TG_ERR_VALUE, /* a bad scalar argument (eps <= 0, NaN, out of range) */
    TG_ERR_INDEX, /* an index out of range */
    TG_ERR_OOM,   /* the allocator returned NULL, or a size overflowed */
    TG_ERR_STATE, /* a call that is invalid in the current state */
    TG_ERR_IO,    /* a file could not be read or written */
    TG_ERR_FORMAT /* a file or string is malformed */
} tg_status;

typedef struct tg_ctx tg_ctx;

/* An n-d tensor. Fields are read-only for users: use the functions below to
 * make and change tensors. data points at numel contiguous row-major
 * elements of dtype (float, double, or uint16_t bit patterns for bfloat16
 * and float16).
 *
 * Lifetime. A tensor made by a creation function or an op lives in the
 * context's arena until the next tg_ctx_reset; after it, any use of the
 * tensor is an error (TG_ERR_STATE) naming the call and the step it came
 * from:
 *   tg_add: argument 'a', a (2, 2) float32 tensor, is from step 3, before
 *   tg_ctx_reset; the context is at step 4 (...)
 * Every build checks the tensor's step; but in a Release build the arena
 * hands the freed memory out again at once, and a tensor whose header a new
 * tensor has taken looks like that new tensor. Builds with TG_CHECKED (the
 * CMake option; on in every build type but Release and MinSizeRel) hold the
 * previous step's memory back for one step, so a tensor from the previous
 * step is always caught; AddressSanitizer builds also poison the arena
 * memory not handed out, so reading a stale tensor's data through a saved
 * pointer is reported. tg_persist makes a tensor that survives resets.
 * A tensor belongs to the context that made it: any other context refuses
 * it (TG_ERR_STATE, "... was made by another context").
 *
 * In-place writes. Each tensor counts the writes the library makes into its
 * data in place (tg_fill, tg_assign, tg_set, tg_set_flat; tg_zero_grad and
 * backward on a grad; an optimizer step on a parameter and its state;
 * tg_clip_grad_norm; a checkpoint load), a view sharing its tensor's count.
 * tg_backward refuses an op whose inputs or output were written since the op
 * ran (see tapegrad/autograd.h). Writes through the pointers of
 * tg_data_f32 / tg_data_f64 or `data` are not seen.
 *
 * The library makes every tensor, with what it keeps about it (its step,
 * write count, tape record) after these fields: use tensors through the
 * pointers it hands out, never through a copy of the struct. */
typedef struct tg_tensor {
    tg_dtype dtype;
    int ndim;                   /* 0 (a scalar) .. TG_MAX_DIMS */
    int64_t shape[TG_MAX_DIMS]; /* sizes, >= 0; unused entries are 1 */
    int64_t numel;              /* product of shape */
    void *data;                 /* float* or double*, numel elements */
    struct tg_tensor *grad;     /* gradient, same shape and dtype, or NULL */
    bool requires_grad;         /* record ops on it; accumulate into grad */
    bool persistent;            /* lives on the heap, survives resets */
} tg_tensor;

/* A custom allocator (tests use it to simulate allocation failure). alloc
 * returns memory aligned to `align` bytes (a power of two >= 8) or NULL. */
typedef struct tg_allocator {
    void *(*alloc)(size_t size, size_t align, void *user);
    void (*free)(void *ptr, void *user);
    void *user;
} tg_allocator;

/* ======================================================================== */
/* Context: arena, persistent tensors, RNG, tape, error state               */
/* ======================================================================== */

/* A new context whose RNG is seeded with `seed`. NULL if out of memory. */
TG_API tg_ctx *tg_ctx_new(uint64_t seed);
/* As tg_ctx_new, with every allocation made through `alloc` (copied). */
TG_API tg_ctx *tg_ctx_new_with_allocator(uint64_t seed, const tg_allocator *alloc);
/* Frees the context, its arena and every persistent tensor it still owns
 * (layers and optimizers not freed by then leak their structs). */
TG_API void tg_ctx_free(tg_ctx *ctx);
/* Ends a step: frees every arena tensor and the tape at once, in O(1); keeps
 * persistent tensors and the arena's memory for reuse (no malloc per step
 * once warm). An arena tensor from before the reset is stale: using it is an
 * error (see tg_tensor above). */
TG_API void tg_ctx_reset(tg_ctx *ctx);

/* True when the context has no error. False for NULL. */
TG_API bool tg_ok(const tg_ctx *ctx);
/* The first error's status (TG_OK when none; TG_ERR_NULL for a NULL ctx). */
TG_API tg_status tg_status_of(const tg_ctx *ctx);
/* The first error's message, "tg_fn: what was wrong", or "" when none. */
TG_API const char *tg_error_message(const tg_ctx *ctx);
/* Clears the error so the context can be used again. */
TG_API void tg_clear_error(tg_ctx *ctx);
/* Sets the context's error unless one is already set (the first error wins).
 * `fn` is the public function's name. Aborts with the message when
 * TG_ABORT_ON_ERROR=1 was in the environment at tg_ctx_new or when
 * tg_set_abort_on_error(ctx, true) was called. The one place to set a
 * breakpoint on. */
TG_API void tg_error(tg_ctx *ctx, tg_status status, const char *fn, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
/* Turns abort-at-first-error on or off for this context. */
TG_API void tg_set_abort_on_error(tg_ctx *ctx, bool on);
/* A short name for a status, e.g. "shape error". */
TG_API const char *tg_status_name(tg_status status);

/* Bytes the arena holds from the allocator (its footprint), bytes in use
 * now, and the most bytes in use at once since the last reset (a step's
 * high-water mark). Gradients of intermediate tensors count too: backward
 * releases each once the walk is past the op that reads it, and its
 * scratch after each op, so the arena in use can fall before a reset. */
TG_API size_t tg_arena_capacity(const tg_ctx *ctx);
TG_API size_t tg_arena_used(const tg_ctx *ctx);
TG_API size_t tg_arena_peak(const tg_ctx *ctx);
/* Bytes of the capacity held back from reuse since the last reset: in
 * checked builds (TG_CHECKED) the previous step's chunks, so that a tensor
 * kept across tg_ctx_reset keeps its header and is reported; 0 otherwise. */
TG_API size_t tg_arena_quarantined(const tg_ctx *ctx);

/* ---- per-op profile --------------------------------------------------------
 * Where a step's time goes, op by op: while on, the context times each
 * recorded op's forward (the time from the previous record to this one),
 * each record's backward, and what runs without a record before the
 * backward and after it until tg_ctx_reset (the optimizer, clipping), and
 * counts steps by tg_ctx_reset. Only recorded ops are seen: profile steps
 * with grad mode on. Off by default; the cost when on is two clock reads a
 * record. */

/* Turns the profile on (starting it afresh) or off. */
TG_API void tg_profile_enable(tg_ctx *ctx, bool on);
/* One row of the profile: totals since tg_profile_enable. */
typedef struct tg_profile_row {
    const char *op; /* the record's name, or a "(no record: ...)" row */
    double forward_s, backward_s;
    int64_t calls; /* records made */
} tg_profile_row;
/* Fills rows[0..max) with the profile's rows, most time first, and *steps
 * (may be NULL) with the steps profiled; returns the rows written (0 when
 * the profile is off). */
TG_API size_t tg_profile_rows(const tg_ctx *ctx, tg_profile_row *rows, size_t max, int64_t *steps);
/* Prints the profile as a table of milliseconds per step. */
TG_API void tg_profile_print(FILE *f, const tg_ctx *ctx);
/* Allocates `size` bytes, 64-byte aligned, from the arena (freed at reset).
 * For kernels' scratch space and saved tensors. NULL on error. */
TG_API void *tg_arena_alloc(tg_ctx *ctx, size_t size);

/* Number of threads kernels may use (OpenMP); 1 without OpenMP. Results do
 * not depend on it. n <= 0 restores the default, tg_default_threads(). */
TG_API void tg_set_threads(tg_ctx *ctx, int n);
TG_API int tg_threads(const tg_ctx *ctx);
/* The thread count a new context starts with: the environment variable
 * TG_THREADS=N (N >= 1) when set, otherwise the CPUs this process may
 * actually use -- the CPUs in its affinity mask (taskset, cpusets), fewer
 * when its cgroup's CPU quota (cgroup v2 cpu.max, v1 cfs_quota_us) is
 * lower, rounded up, and at most OMP_NUM_THREADS when that is set -- not
 * the machine's core count. 1 without OpenMP. */
TG_API int tg_default_threads(void);

/* Autocast, mixed-precision training as torch.autocast does it: with
 * TG_BF16 or TG_F16, the float32 layers (Linear, RMSNorm, LayerNorm,
 * Embedding, the transformer modules, tg_gpt) compute in that dtype from a
 * 16-bit copy of each parameter, made once per step; the parameters stay
 * float32 (the master weights: optimizers and checkpoints are unchanged),
 * and their grads come back float32 through the copy's tg_cast.
 * tapegrad/layers.h, "Autocast", says what each layer does. TG_F32 turns
 * it off (the default); TG_F64 or another value is TG_ERR_VALUE. Float64
 * layers are never cast. A context setting, like the thread count. */
TG_API void tg_ctx_set_autocast(tg_ctx *ctx, tg_dtype dtype);
/* The autocast dtype: TG_BF16 or TG_F16, TG_F32 when off (or ctx NULL). */
TG_API tg_dtype tg_ctx_autocast(const tg_ctx *ctx);

/* ======================================================================== */
/* Random numbers                                                           */
/* ======================================================================== */

/* Philox4x32-10 (Salmon et al., SC'11, "Parallel random
 * numbers: as easy as 1, 2, 3").
 *
 * The context holds a 64-bit seed and a 64-bit offset. The i-th number drawn
 * by a call is made from one Philox block: counter = (offset + i) as two
 * 32-bit words (low, high), then 0, 0; key = seed as two 32-bit words (low,
 * high). A call then advances the offset by the count it drew. So a number
 * depends only on the seed and its position in the stream, never on the
 * thread count. From the block's four words x0..x3:
 *   uniform f32 = (x0 >> 8) * 2^-24                       in [0, 1)
 *   uniform f64 = ((x0 << 21) ^ (x1 >> 11)) * 2^-53, i.e. the top 53 bits
 *                 of the 64-bit word (x0:x1)               in [0, 1)
 *   normal      = Box-Muller: sqrt(-2 ln(1 - u1)) * cos(2 pi u2) with u1,
 *                 u2 the f64 uniforms of words (x0:x1) and (x2:x3).        */

/* One Philox4x32-10 block: out = philox(counter, key). */
TG_API void tg_philox4x32_10(uint32_t out[4], const uint32_t counter[4], const uint32_t key[2]);
/* Reseeds the context's RNG and rewinds its offset to 0. */
TG_API void tg_rng_seed(tg_ctx *ctx, uint64_t seed);
/* Reads or restores the RNG state (for checkpoints). */
TG_API void tg_rng_state(const tg_ctx *ctx, uint64_t *seed, uint64_t *offset);
TG_API void tg_rng_set_state(tg_ctx *ctx, uint64_t seed, uint64_t offset);
/* Draws one uniform double in [0, 1) and advances the stream by one. */
TG_API double tg_rng_uniform(tg_ctx *ctx);
/* Draws one standard normal double and advances the stream by one. */
TG_API double tg_rng_normal(tg_ctx *ctx);

/* ======================================================================== */
/* Tensor creation. All return a new arena tensor, or NULL on error.        */
/* ======================================================================== */

/* Zeros of the given shape (ndim 0..TG_MAX_DIMS, every size >= 0). */
TG_API tg_tensor *tg_zeros(tg_ctx *ctx, tg_dtype dtype, int ndim, const int64_t *shape);
/* Ones of the given shape. */
TG_API tg_tensor *tg_ones(tg_ctx *ctx, tg_dtype dtype, int ndim, const int64_t *shape);
/* Every element `value`. */
TG_API tg_tensor *tg_full(tg_ctx *ctx, tg_dtype dtype, int ndim, const int64_t *shape, double value);
/* The 1-d tensor start, start+step, ... below `end` (above it for step < 0). */
TG_API tg_tensor *tg_arange(tg_ctx *ctx, tg_dtype dtype, double start, double end, double step);
/* A copy of `data`, which holds numel elements of dtype (float or double). */
TG_API tg_tensor *tg_from_buffer(tg_ctx *ctx, tg_dtype dtype, int ndim, const int64_t *shape, const void *data);
/* Uniform numbers in [low, high) from the context's RNG. */
TG_API tg_tensor *tg_rand(tg_ctx *ctx, tg_dtype dtype, int ndim, const int64_t *shape, double low, double high);
/* Normal numbers with the given mean and standard deviation. */
TG_API tg_tensor *tg_randn(tg_ctx *ctx, tg_dtype dtype, int ndim, const int64_t *shape, double mean, double std);
/* Shape shorthands: TG_SHAPE(2, 3) expands to `2, (const int64_t[]){2, 3}`. */
#define TG_SHAPE(...) \
    (int)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (const int64_t[]) { __VA_ARGS__ }

/* Moves `t` out of the arena into a heap tensor that survives resets and is
 * owned by the context (freed by tg_tensor_free or tg_ctx_free). Returns the
 * persistent tensor; `t` itself stays valid until the next reset. */
TG_API tg_tensor *tg_persist(tg_ctx *ctx, tg_tensor *t);
/* Frees a persistent tensor (and its grad). Arena tensors are freed by reset
 * (passing one does nothing). The context keeps a registry of the objects
 * it handed out on its heap (persistent tensors and their grads, layers,
 * optimizers) and looks the pointer up before touching it, so these are
 * errors (TG_ERR_STATE) that never read freed memory:
 *  - a tensor of another context: "... is not a persistent tensor of this
 *    context: it was made by another context (free it through that one)";
 *  - a second free: "the persistent tensor at 0x... was already freed";
 *  - a layer's parameter or an optimizer's state: "tensor (4, 2) float32 is
 *    the parameter 'fc1.weight' of a layer; free the layer" (the layer or
 *    optimizer frees it);
 *  - a persistent tensor's grad (it is freed with its tensor).
 * The same holds for layers (tg_module_free and the tg_*_free of each
 * layer) and optimizers (tg_optim_free with a context). What cannot be
 * seen: a freed object's address that the allocator has handed out again
 * for a new object of the same kind in the same context (the new object is
 * freed), and a second tg_optim_free without a context. */
TG_API void tg_tensor_free(tg_ctx *ctx, tg_tensor *t);

/* ======================================================================== */
/* Tensor manipulation                                                      */
/* ======================================================================== */

/* Not recorded on the tape; see tapegrad/autograd.h for the differentiable
 * versions. */

/* A view of t with a new shape of the same numel; shares t's data. One size
 * may be -1 (inferred). */
TG_API tg_tensor *tg_view(tg_ctx *ctx, tg_tensor *t, int ndim, const int64_t *shape);
/* A contiguous copy of t (an arena tensor with its own data). */
TG_API tg_tensor *tg_copy(tg_ctx *ctx, const tg_tensor *t);
/* t converted to dtype (a copy, even when the dtype is the same), by the
 * rules of "Low precision" below. Not recorded: tg_cast (tapegrad/autograd.h)
 * is the differentiable conversion. */
TG_API tg_tensor *tg_to_dtype(tg_ctx *ctx, const tg_tensor *t, tg_dtype dtype);
/* Copies src's values into dst (same shape and dtype). Returns dst or NULL.
 * An in-place write to dst (see tg_tensor above). */
TG_API tg_tensor *tg_assign(tg_ctx *ctx, tg_tensor *dst, const tg_tensor *src);
/* Sets every element of t to value (an in-place write). */
TG_API void tg_fill(tg_ctx *ctx, tg_tensor *t, double value);

/* Element access by multi-index (ndim entries) or flat row-major index.
 * Out-of-range indices set an error; get then returns NaN. The setters are
 * in-place writes (see tg_tensor above). */
TG_API double tg_get(tg_ctx *ctx, const tg_tensor *t, const int64_t *index);
TG_API void tg_set(tg_ctx *ctx, tg_tensor *t, const int64_t *index, double value);
TG_API double tg_get_flat(tg_ctx *ctx, const tg_tensor *t, int64_t i);
TG_API void tg_set_flat(tg_ctx *ctx, tg_tensor *t, int64_t i, double value);
/* Typed data pointers: NULL (and an error) when the dtype differs. Writes
 * through them are invisible to the in-place write count: an op that saved
 * t and runs its backward after such a write uses the new values. */
TG_API float *tg_data_f32(tg_ctx *ctx, tg_tensor *t);
TG_API double *tg_data_f64(tg_ctx *ctx, tg_tensor *t);
/* The 16-bit patterns of a bfloat16 / float16 tensor (see Low precision). */
TG_API uint16_t *tg_data_bf16(tg_ctx *ctx, tg_tensor *t);
TG_API uint16_t *tg_data_f16(tg_ctx *ctx, tg_tensor *t);

/* Size in bytes of one element of dtype (4, 8, 2, 2); "float32", "float64",
 * "bfloat16" or "float16". */
TG_API size_t tg_dtype_size(tg_dtype dtype);
TG_API const char *tg_dtype_name(tg_dtype dtype);
/* True when a and b have the same ndim and sizes. */
TG_API bool tg_same_shape(const tg_tensor *a, const tg_tensor *b);
/* Writes "(2, 3)" into buf (at most size bytes, always terminated); returns buf. */
TG_API char *tg_shape_str(char *buf, size_t size, int ndim, const int64_t *shape);

/* Prints t in PyTorch's format, e.g. tensor([[0.1000, 0.2000]], dtype=float32).
 * Tensors over 1000 elements are summarized with "..." (3 items per edge). */
TG_API void tg_print(FILE *out, const tg_tensor *t);
/* As tg_print into buf; returns the length the full text needs (snprintf
 * semantics). */
TG_API size_t tg_format(char *buf, size_t size, const tg_tensor *t);

/* ======================================================================== */
/* Low precision: bfloat16 and float16                                      */
/* ======================================================================== */

/* TG_BF16: 1 sign, 8 exponent, 7 mantissa bits: float32's range with 8
 * significant bits (epsilon 2^-7 = 0.0078). TG_F16: IEEE binary16, 5
 * exponent and 10 mantissa bits: largest finite 65504, smallest normal
 * 2^-14, subnormals down to 2^-24 (epsilon 2^-10 = 0.00098).
 *
 * They are storage types, as on PyTorch's CPU backend: an op reads
 * float32, computes in float32 and rounds its result once to the input's
 * dtype. Every differentiable op of tapegrad/autograd.h takes them --
 * elementwise, activations, reductions (accumulated in float32 or double),
 * softmax, log-softmax and the losses (float32 inside; the loss in the
 * logits' dtype), matmul, embedding, the shape ops, masks, dropout, rope,
 * attention -- and so do tg_linear_fused (bfloat16: products in
 * bfloat16, sums in float32; float16: a float32 GEMM on widened copies)
 * and the fused norms (tapegrad/layers.h). Most run as
 *   y = tg_cast(op(tg_cast(a, TG_F32), ...), a's dtype)
 * recorded on the tape: the result is the float32 op on the widened inputs
 * rounded once, and each input's 16-bit gradient is the float32 gradient
 * rounded once into it (tg_cast's backward); double backward and forward
 * mode go through tg_cast's rules. The shape ops, the unary ops
 * (activations, exp, ...) and an add of two tensors of one shape compute
 * the same values in one record, without the float32 tensors. All tensor inputs of one op share one
 * dtype: bfloat16 with float32 is TG_ERR_DTYPE naming the op and both
 * dtypes, never a silent cast (integer indices and targets are not
 * tensors). A function without a low-precision path (a custom op of
 * tapegrad/op.h, a layer's forward, tg_grad and tg_jvp's inputs) refuses a
 * 16-bit tensor with TG_ERR_DTYPE:
 *   twice: argument 'input 0' is a bfloat16 tensor, and twice has no
 *   bfloat16 path; convert it first (tg_cast(ctx, input 0, TG_F32), ...
 * Creation (tg_zeros ... tg_randn: values made in float64, rounded through
 * float32), tg_view, tg_copy, tg_to_dtype, tg_assign, tg_fill, the element
 * getters and setters, printing, tg_persist, safetensors checkpoints and
 * tg_cast take every dtype.
 *
 * Conversions. To float32 (and float64) is exact. From float32 rounds to
 * nearest, ties to even; NaN stays NaN (sign and top payload bits, made
 * quiet), +-inf stays +-inf, a finite value that rounds past the largest
 * finite overflows to +-inf (float16: |x| >= 65520), float16 subnormals are
 * kept (|x| <= 2^-25 gives a signed zero). From float64 rounds to float32
 * first, as PyTorch does. Array conversions use the CPU's F16C and AVX-512
 * BF16 instructions when it has them (asked at run time) and exact bit
 * manipulation otherwise, with the same bits. Printing shows the value the
 * 16 bits hold, as PyTorch does: 0.1 in bfloat16 prints as 0.1001. */

/* The instructions the conversions use on this CPU: "f16c+avx512bf16",
 * "f16c", "avx512bf16" or "scalar". */
TG_API const char *tg_lowp_isa(void);

#ifdef __cplusplus
}
#endif

#endif /* TAPEGRAD_TENSOR_H */

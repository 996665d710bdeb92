/* tapegrad: a tape-based autodiff training micro-framework in C11.
 *
 * This is the one header a user includes. Every public function is declared
 * here with a line or two of documentation. Sections follow the layout of the
 * source tree: tensor core, context, autograd, layers, optimizers, I/O.
 *
 * Conventions
 *  - Every function takes the context first and returns a new tensor (or a
 *    status). Chains read like math: y = tg_relu(ctx, tg_add(ctx, a, b)).
 *  - Errors are values (the cairo model). Misuse sets a sticky error on the
 *    context with a message naming the function and the offending shapes or
 *    values. A function handed NULL, or called while the context is in
 *    error, returns NULL (or a failure status) and does nothing. Check once
 *    per step with tg_ok(ctx). Set TG_ABORT_ON_ERROR=1 in the environment to
 *    abort at the first error with its message.
 *  - Tensors are always contiguous and row-major. Tensors made during a step
 *    live in the context's arena and die at tg_ctx_reset(); parameters are
 *    made persistent with tg_persist() and survive resets.
 *  - The library never prints unasked and never calls exit().
 */
#ifndef TAPEGRAD_H
#define TAPEGRAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TAPEGRAD_VERSION_MAJOR 0
#define TAPEGRAD_VERSION_MINOR 1
#define TAPEGRAD_VERSION_PATCH 0

/* ------------------------------------------------------------------------ */
/* Core types                                                               */
/* ------------------------------------------------------------------------ */

/* Maximum number of dimensions of a tensor. */
#define TG_MAX_DIMS 8

/* Element types. Mixing dtypes in one op is an error, never a silent cast. */
typedef enum tg_dtype { TG_F32 = 0, TG_F64 = 1 } tg_dtype;

/* Status codes: the kind of the context's first error (TG_OK when none). */
typedef enum tg_status {
    TG_OK = 0,
    TG_ERR_NULL,     /* a NULL argument where a value was required */
    TG_ERR_SHAPE,    /* shapes that do not fit the operation */
    TG_ERR_DTYPE,    /* dtypes that differ or are not supported */
    TG_ERR_VALUE,    /* a bad scalar argument (eps <= 0, NaN, out of range) */
    TG_ERR_INDEX,    /* an index out of range */
    TG_ERR_OOM,      /* the allocator returned NULL, or a size overflowed */
    TG_ERR_STATE,    /* a call that is invalid in the current state */
    TG_ERR_IO,       /* a file could not be read or written */
    TG_ERR_FORMAT    /* a file or string is malformed */
} tg_status;

typedef struct tg_ctx tg_ctx;

/* An n-d tensor. Fields are read-only for users: use the functions below to
 * make and change tensors. data points at numel contiguous row-major
 * elements of dtype (float or double). */
typedef struct tg_tensor {
    tg_dtype dtype;
    int ndim;                     /* 0 (a scalar) .. TG_MAX_DIMS */
    int64_t shape[TG_MAX_DIMS];   /* sizes, >= 0; unused entries are 1 */
    int64_t numel;                /* product of shape */
    void *data;                   /* float* or double*, numel elements */
    struct tg_tensor *grad;       /* gradient, same shape and dtype, or NULL */
    bool requires_grad;           /* record ops on it; accumulate into grad */
    bool persistent;              /* lives on the heap, survives resets */
    /* internal */
    bool is_view_;                /* data belongs to another tensor */
    int32_t node_;                /* index of the tape record that made it, or -1 */
    uint32_t epoch_;              /* arena epoch it was made in (persistent: 0) */
    struct tg_tensor *next_;      /* persistent list links */
    struct tg_tensor *prev_;
} tg_tensor;

/* A custom allocator (tests use it to simulate allocation failure). alloc
 * returns memory aligned to `align` bytes (a power of two >= 8) or NULL. */
typedef struct tg_allocator {
    void *(*alloc)(size_t size, size_t align, void *user);
    void (*free)(void *ptr, void *user);
    void *user;
} tg_allocator;

/* ------------------------------------------------------------------------ */
/* Context: arena, persistent tensors, RNG, tape, error state               */
/* ------------------------------------------------------------------------ */

/* A new context whose RNG is seeded with `seed`. NULL if out of memory. */
tg_ctx *tg_ctx_new(uint64_t seed);
/* As tg_ctx_new, with every allocation made through `alloc` (copied). */
tg_ctx *tg_ctx_new_with_allocator(uint64_t seed, const tg_allocator *alloc);
/* Frees the context, its arena and every persistent tensor it still owns. */
void tg_ctx_free(tg_ctx *ctx);
/* Frees every arena tensor and the tape at once, in O(1); keeps persistent
 * tensors and the arena's memory for reuse (no malloc per step once warm). */
void tg_ctx_reset(tg_ctx *ctx);

/* True when the context has no error. False for NULL. */
bool tg_ok(const tg_ctx *ctx);
/* The first error's status (TG_OK when none; TG_ERR_NULL for a NULL ctx). */
tg_status tg_status_of(const tg_ctx *ctx);
/* The first error's message, "tg_fn: what was wrong", or "" when none. */
const char *tg_error_message(const tg_ctx *ctx);
/* Clears the error so the context can be used again. */
void tg_clear_error(tg_ctx *ctx);
/* Sets the context's error unless one is already set (the first error wins).
 * `fn` is the public function's name. Aborts with the message when
 * TG_ABORT_ON_ERROR=1 was in the environment at tg_ctx_new or when
 * tg_set_abort_on_error(ctx, true) was called. The one place to set a
 * breakpoint on. */
void tg_error(tg_ctx *ctx, tg_status status, const char *fn, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
/* Turns abort-at-first-error on or off for this context. */
void tg_set_abort_on_error(tg_ctx *ctx, bool on);
/* A short name for a status, e.g. "shape error". */
const char *tg_status_name(tg_status status);

/* Bytes the arena holds from the allocator (its footprint), and bytes in use
 * since the last reset. */
size_t tg_arena_capacity(const tg_ctx *ctx);
size_t tg_arena_used(const tg_ctx *ctx);
/* Allocates `size` bytes, 64-byte aligned, from the arena (freed at reset).
 * For kernels' scratch space and saved tensors. NULL on error. */
void *tg_arena_alloc(tg_ctx *ctx, size_t size);

/* Number of threads kernels may use (OpenMP); 1 without OpenMP. Results do
 * not depend on it. n <= 0 restores the default. */
void tg_set_threads(tg_ctx *ctx, int n);
int tg_threads(const tg_ctx *ctx);

/* ------------------------------------------------------------------------ */
/* Random numbers: Philox4x32-10 (Salmon et al., SC'11, "Parallel random
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
/* ------------------------------------------------------------------------ */

/* One Philox4x32-10 block: out = philox(counter, key). */
void tg_philox4x32_10(uint32_t out[4], const uint32_t counter[4], const uint32_t key[2]);
/* Reseeds the context's RNG and rewinds its offset to 0. */
void tg_rng_seed(tg_ctx *ctx, uint64_t seed);
/* Reads or restores the RNG state (for checkpoints). */
void tg_rng_state(const tg_ctx *ctx, uint64_t *seed, uint64_t *offset);
void tg_rng_set_state(tg_ctx *ctx, uint64_t seed, uint64_t offset);
/* Draws one uniform double in [0, 1) and advances the stream by one. */
double tg_rng_uniform(tg_ctx *ctx);
/* Draws one standard normal double and advances the stream by one. */
double tg_rng_normal(tg_ctx *ctx);

/* ------------------------------------------------------------------------ */
/* Tensor creation. All return a new arena tensor, or NULL on error.        */
/* ------------------------------------------------------------------------ */

/* Zeros of the given shape (ndim 0..TG_MAX_DIMS, every size >= 0). */
tg_tensor *tg_zeros(tg_ctx *ctx, tg_dtype dtype, int ndim, const int64_t *shape);
/* Ones of the given shape. */
tg_tensor *tg_ones(tg_ctx *ctx, tg_dtype dtype, int ndim, const int64_t *shape);
/* Every element `value`. */
tg_tensor *tg_full(tg_ctx *ctx, tg_dtype dtype, int ndim, const int64_t *shape, double value);
/* The 1-d tensor start, start+step, ... below `end` (above it for step < 0). */
tg_tensor *tg_arange(tg_ctx *ctx, tg_dtype dtype, double start, double end, double step);
/* A copy of `data`, which holds numel elements of dtype (float or double). */
tg_tensor *tg_from_buffer(tg_ctx *ctx, tg_dtype dtype, int ndim, const int64_t *shape, const void *data);
/* Uniform numbers in [low, high) from the context's RNG. */
tg_tensor *tg_rand(tg_ctx *ctx, tg_dtype dtype, int ndim, const int64_t *shape, double low, double high);
/* Normal numbers with the given mean and standard deviation. */
tg_tensor *tg_randn(tg_ctx *ctx, tg_dtype dtype, int ndim, const int64_t *shape, double mean, double std);
/* Shape shorthands: TG_SHAPE(2, 3) expands to `2, (const int64_t[]){2, 3}`. */
#define TG_SHAPE(...) \
    (int)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (const int64_t[]){__VA_ARGS__}

/* Moves `t` out of the arena into a heap tensor that survives resets and is
 * owned by the context (freed by tg_tensor_free or tg_ctx_free). Returns the
 * persistent tensor; `t` itself stays valid until the next reset. */
tg_tensor *tg_persist(tg_ctx *ctx, tg_tensor *t);
/* Frees a persistent tensor (and its grad). Arena tensors are freed by reset. */
void tg_tensor_free(tg_ctx *ctx, tg_tensor *t);

/* ------------------------------------------------------------------------ */
/* Tensor manipulation (not recorded on the tape; see autograd for the
 * differentiable versions).                                                 */
/* ------------------------------------------------------------------------ */

/* A view of t with a new shape of the same numel; shares t's data. One size
 * may be -1 (inferred). */
tg_tensor *tg_view(tg_ctx *ctx, tg_tensor *t, int ndim, const int64_t *shape);
/* A contiguous copy of t (an arena tensor with its own data). */
tg_tensor *tg_copy(tg_ctx *ctx, const tg_tensor *t);
/* t converted to dtype (a copy, even when the dtype is the same). */
tg_tensor *tg_to_dtype(tg_ctx *ctx, const tg_tensor *t, tg_dtype dtype);
/* Copies src's values into dst (same shape and dtype). Returns dst or NULL. */
tg_tensor *tg_assign(tg_ctx *ctx, tg_tensor *dst, const tg_tensor *src);
/* Sets every element of t to value. */
void tg_fill(tg_ctx *ctx, tg_tensor *t, double value);

/* Element access by multi-index (ndim entries) or flat row-major index.
 * Out-of-range indices set an error; get then returns NaN. */
double tg_get(tg_ctx *ctx, const tg_tensor *t, const int64_t *index);
void tg_set(tg_ctx *ctx, tg_tensor *t, const int64_t *index, double value);
double tg_get_flat(tg_ctx *ctx, const tg_tensor *t, int64_t i);
void tg_set_flat(tg_ctx *ctx, tg_tensor *t, int64_t i, double value);
/* Typed data pointers: NULL (and an error) when the dtype differs. */
float *tg_data_f32(tg_ctx *ctx, tg_tensor *t);
double *tg_data_f64(tg_ctx *ctx, tg_tensor *t);

/* Size in bytes of one element of dtype; "float32" or "float64". */
size_t tg_dtype_size(tg_dtype dtype);
const char *tg_dtype_name(tg_dtype dtype);
/* True when a and b have the same ndim and sizes. */
bool tg_same_shape(const tg_tensor *a, const tg_tensor *b);
/* Writes "(2, 3)" into buf (at most size bytes, always terminated); returns buf. */
char *tg_shape_str(char *buf, size_t size, int ndim, const int64_t *shape);

/* Prints t in PyTorch's format, e.g. tensor([[0.1000, 0.2000]], dtype=float32).
 * Tensors over 1000 elements are summarized with "..." (3 items per edge). */
void tg_print(FILE *out, const tg_tensor *t);
/* As tg_print into buf; returns the length the full text needs (snprintf
 * semantics). */
size_t tg_format(char *buf, size_t size, const tg_tensor *t);

/* ------------------------------------------------------------------------ */
/* Autograd                                                                 */
/* ------------------------------------------------------------------------ */

/* Marks t as a leaf that requires grad and gives it a zeroed grad of the same
 * kind (persistent for persistent tensors). Returns t. */
tg_tensor *tg_requires_grad(tg_ctx *ctx, tg_tensor *t);
/* Turns recording on or off (no-grad mode for evaluation); returns the
 * previous setting. */
bool tg_set_grad_enabled(tg_ctx *ctx, bool enabled);
bool tg_grad_enabled(const tg_ctx *ctx);
/* Zeroes t's grad (if it has one). */
void tg_zero_grad(tg_ctx *ctx, tg_tensor *t);
/* A tensor sharing t's data that requires no grad and has no history. */
tg_tensor *tg_detach(tg_ctx *ctx, tg_tensor *t);

/* Back-propagates from a scalar `loss` (numel 1): walks the tape in reverse
 * and accumulates (+=) gradients into the grad of every leaf that requires
 * grad. The tape is consumed: a second backward is an error. */
void tg_backward(tg_ctx *ctx, tg_tensor *loss);
/* General form: `grad_out` (same shape as out) seeds the gradient, NULL
 * meaning 1 for a scalar; keep_tape=true keeps the tape for another
 * backward (PyTorch's retain_graph). */
void tg_backward_ex(tg_ctx *ctx, tg_tensor *out, const tg_tensor *grad_out, bool keep_tape);
/* Number of records on the tape, and bytes they saved for backward. */
int64_t tg_tape_size(const tg_ctx *ctx);
size_t tg_tape_saved_bytes(const tg_ctx *ctx);

/* ------------------------------------------------------------------------ */
/* Parameters: a model's named parameters, used by optimizers, clipping,    */
/* checkpoints and the model summary.                                        */
/* ------------------------------------------------------------------------ */

typedef struct tg_param {
    char name[64];        /* dotted name, e.g. "fc1.weight" */
    tg_tensor *value;     /* persistent, requires grad */
    bool weight_decay;    /* whether weight decay applies */
} tg_param;

typedef struct tg_params {
    tg_param *items;
    int count;
    int capacity;
} tg_params;

/* Appends a parameter named prefix + "." + name (just name when prefix is
 * NULL or ""). Errors: NULL value, a name over 63 bytes, a duplicate name,
 * a tensor that is not persistent. Returns false on error. */
bool tg_params_add(tg_ctx *ctx, tg_params *list, const char *prefix, const char *name,
                   tg_tensor *value, bool weight_decay);
/* The parameter with that name, or NULL. */
tg_param *tg_params_find(tg_params *list, const char *name);
/* Total number of scalar parameters. */
int64_t tg_params_numel(const tg_params *list);
/* Zeroes every parameter's grad. */
void tg_params_zero_grad(tg_ctx *ctx, tg_params *list);
/* Frees the list's array (not the tensors, which their layers own). */
void tg_params_free(tg_params *list);

/* --- Training logs: plots and progress --- */

/* Loss logs and gnuplot plots (io/plot.c, io/gnuplot.c). These are I/O
 * edges: they need no context and return a status, SQLite-style: TG_OK,
 * TG_ERR_NULL (a NULL argument), TG_ERR_VALUE (a bad count, column, name or
 * path), TG_ERR_IO (a file could not be written, gnuplot failed),
 * TG_ERR_OOM. Paths, names and file names must not contain quotes (' " `)
 * or control characters (TG_ERR_VALUE), so they go into gnuplot scripts and
 * shell commands unescaped. Titles and labels may contain anything but
 * control characters; they are drawn as plain text (no enhanced markup).
 *
 * A data file NAME.dat is a "# col1 col2 ..." header line, then one
 * whitespace-separated row per call, values written with %.10g; NaN and
 * infinities are written as NaN (a gap in the curve). A script NAME.gp
 * renders NAME.png from the directory it lives in: `cd DIR && gnuplot
 * NAME.gp`. It picks the pngcairo terminal when gnuplot has it, png
 * otherwise, so it can also be rendered later on another machine.
 *
 * Where a function renders, it tells whether a PNG was made in *rendered
 * (may be NULL) and fills msg (may be NULL) with a line to show the user:
 * "wrote DIR/NAME.png", or when gnuplot is not installed (TG_OK, *rendered
 * false) the exact command that renders it later, or what went wrong. */

/* A data log being written (opaque). */
typedef struct tg_plot tg_plot;

/* How a plot looks. Zero-initialize and set what you need; NULL strings get
 * defaults so every plot has a title, axis labels and a legend. */
typedef struct tg_plot_style {
    const char *title;    /* NULL: the plot's name */
    const char *xlabel;   /* NULL: the x column's name (close), "step" (overlay) */
    const char *ylabel;   /* NULL: the one series' label, or "value" */
    bool logy;            /* log-scale y axis (values <= 0 are not drawn) */
    int width, height;    /* PNG size in pixels; 0 means 800 x 500 */
} tg_plot_style;

/* One curve: column `ycol` against column `xcol` (1-based, as gnuplot
 * counts) of a data file, e.g. several runs' NAME.dat overlaid. */
typedef struct tg_plot_series {
    const char *dat;      /* path of the data file (it must exist) */
    int xcol;             /* x column; 0 means 1 (the step) */
    int ycol;             /* y column, >= 1 */
    const char *label;    /* legend entry (required) */
} tg_plot_series;

/* Starts DIR/NAME.dat (DIR and its parents are created if missing; an
 * existing file is replaced) with `ncols` columns (2..64) named `colnames`
 * (no whitespace); the first column is the x value, usually the step.
 * On error *out is NULL. */
tg_status tg_plot_open(tg_plot **out, const char *dir, const char *name, int ncols,
                       const char *const *colnames);
/* Appends one row of ncols values (values[0] is the step) and flushes it,
 * so a crash loses at most the row being written. */
tg_status tg_plot_row(tg_plot *p, const double *values);
/* The data file's path ("DIR/NAME.dat"), valid until the plot is closed. */
const char *tg_plot_dat_path(const tg_plot *p);
/* Closes the data file and writes DIR/NAME.gp plotting every column after
 * the first against it, labelled with the column names (style may be NULL
 * for the defaults), then renders DIR/NAME.png. Always frees p. With no
 * rows logged: TG_ERR_STATE (the script is written, nothing is drawn). */
tg_status tg_plot_close(tg_plot *p, const tg_plot_style *style, bool *rendered,
                        char *msg, size_t msgsize);
/* Closes the data file without writing a script or a picture (e.g. one run
 * of several later drawn together with tg_plot_overlay). Always frees p. */
tg_status tg_plot_close_data(tg_plot *p);
/* Writes DIR/NAME.gp drawing the `nseries` curves (from any data files) in
 * one plot and renders DIR/NAME.png; DIR is created if missing. */
tg_status tg_plot_overlay(const char *dir, const char *name, const tg_plot_style *style,
                          const tg_plot_series *series, int nseries, bool *rendered,
                          char *msg, size_t msgsize);

/* Lower level, for hand-written scripts (heatmaps `with image`, points...). */
/* Writes the first lines of a PNG script to gp: the terminal (pngcairo when
 * the gnuplot that runs it has it, else png; width x height, 0 for 800 x
 * 500), plain-text labels, and `set output 'png_name'` (relative to the
 * script's directory). */
tg_status tg_plot_write_preamble(FILE *gp, const char *png_name, int width, int height);
/* Renders an existing script with gnuplot, run in the script's directory;
 * the script names its own output (see tg_plot_write_preamble). */
tg_status tg_plot_render(const char *gp_path, bool *rendered, char *msg, size_t msgsize);
/* Looks for an executable `gnuplot` in PATH: TG_OK and its path in
 * path[size] (path may be NULL), or TG_ERR_IO when there is none. */
tg_status tg_gnuplot_find(char *path, size_t size);
/* Sets *has to whether the installed gnuplot offers terminal `term` (e.g.
 * "pngcairo"), from the list `gnuplot -e "set terminal"` prints.
 * TG_ERR_IO when gnuplot is missing or does not run. */
tg_status tg_gnuplot_has_terminal(const char *term, bool *has);

/* Progress output for training loops (io/progress.c): every `every` steps,
 * the step, loss, lr, gradient norm, steps/s and ETA. On a terminal it is one
 * line redrawn in place with a bar (\r, the newline comes at finish); on a
 * pipe or file, plain lines. It prints only to the FILE* it is given. */
typedef enum tg_progress_mode {
    TG_PROGRESS_AUTO = 0, /* BAR when out is a terminal, else PLAIN (at init) */
    TG_PROGRESS_PLAIN,    /* one full line every `every` steps */
    TG_PROGRESS_BAR,      /* one line with a bar, redrawn with \r */
    TG_PROGRESS_QUIET     /* prints nothing */
} tg_progress_mode;

/* A plain struct the caller owns (no allocation, nothing to free). Set it up
 * with tg_progress_init; the public fields may be changed afterwards. */
typedef struct tg_progress {
    FILE *out;              /* where lines go (NULL: nowhere) */
    int64_t total;          /* steps in the run; <= 0 if unknown (no bar, no ETA) */
    int64_t every;          /* print every `every` steps, >= 1 */
    tg_progress_mode mode;  /* PLAIN, BAR or QUIET once initialized */
    int width;              /* BAR: columns the line may use (the terminal's, or 80) */
    /* internal */
    double (*clock_)(void *user); /* seconds; NULL: CLOCK_MONOTONIC */
    void *clock_user_;
    double t_init_, t_first_, t_last_;
    int64_t step_first_, step_last_, step_shown_;
    double loss_, lr_, gnorm_;
    int line_len_;
    bool seen_, line_open_;
} tg_progress;

/* Starts progress output for a run of total_steps steps (<= 0: unknown),
 * printed every `every` steps (values < 1 mean 1), in AUTO mode. */
void tg_progress_init(tg_progress *p, FILE *out, int64_t total_steps, int64_t every);
/* Forces a mode (AUTO decides again from isatty(fileno(out))). */
void tg_progress_set_mode(tg_progress *p, tg_progress_mode mode);
/* Reports that `step` steps are done (1..total) with this loss, learning rate
 * and gradient norm (NaN for lr or grad_norm: not shown). Prints when step is
 * a multiple of `every` or the last step. */
void tg_progress_update(tg_progress *p, int64_t step, double loss, double lr, double grad_norm);
/* Ends the output: redraws the last state if it was not shown, ends the bar
 * line, and prints "done: N steps in T s (R steps/s), final loss L". */
void tg_progress_finish(tg_progress *p);
/* Replaces the clock (seconds as a double; NULL: CLOCK_MONOTONIC), e.g. with
 * a fake one in tests, and restarts the timing from its current reading. */
void tg_progress_set_clock(tg_progress *p, double (*clock)(void *user), void *user);
/* Writes the line `update` would print for the current state into buf
 * (without \r or newline; BAR mode includes the bar). Returns buf. */
char *tg_progress_format(const tg_progress *p, char *buf, size_t size);

/* --- Checkpoints (safetensors) --- */
/* Files in the safetensors format (io/checkpoint.c, io/safetensors.c), so a
 * checkpoint opens in PyTorch (scripts/interop_torch.py shows how):
 *   8 bytes  N, the header's length, unsigned little-endian
 *   N bytes  JSON: {"__metadata__": {"key": "value", ...},
 *                   "fc1.weight": {"dtype": "F32", "shape": [4, 2],
 *                                  "data_offsets": [0, 32]}, ...}
 *            padded with spaces to a multiple of 8 bytes
 *   rest     the tensors' raw little-endian bytes, back to back in the order
 *            of their offsets (counted from the start of this section).
 * Dtypes "F32" and "F64". Tensor names are the parameters' dotted names.
 *
 * Training state for resuming lives in the same file: the optimizer's
 * tensors (moments, momentum buffers) as a second named list `state` (give
 * them a prefix, e.g. "optim.fc1.weight.exp_avg", so no name clashes with a
 * parameter), and scalars (step count, schedule position, RNG state) as
 * metadata strings (tg_meta_set_u64, tg_meta_set_rng).
 *
 * Statuses: TG_ERR_IO (open, read, write, fsync or rename failed),
 * TG_ERR_FORMAT (a damaged or malformed file), TG_ERR_SHAPE / TG_ERR_DTYPE
 * (a tensor whose shape or dtype differs from the model's), TG_ERR_VALUE
 * (a tensor missing from the file or the model, bad names), TG_ERR_OOM,
 * TG_ERR_NULL. Each also sets the context's error, naming the file, the
 * tensor and the problem. */

/* String metadata (the file's "__metadata__"): key/value pairs, copied.
 * Start from tg_meta m = {0}; free with tg_meta_free. Keys are unique. */
typedef struct tg_meta_item {
    char *key;
    char *value;
} tg_meta_item;
typedef struct tg_meta {
    tg_meta_item *items;
    int count;
    int capacity;
} tg_meta;

/* Sets key to value (both copied, valid UTF-8), replacing an old value.
 * Returns false on error. */
bool tg_meta_set(tg_ctx *ctx, tg_meta *meta, const char *key, const char *value);
/* Sets key to value written in decimal. */
bool tg_meta_set_u64(tg_ctx *ctx, tg_meta *meta, const char *key, uint64_t value);
/* The value of key, or NULL when absent (sets no error). */
const char *tg_meta_get(const tg_meta *meta, const char *key);
/* Reads key's value as a decimal uint64 into *value. Errors: key absent
 * (TG_ERR_VALUE), not a decimal number below 2^64 (TG_ERR_FORMAT). */
bool tg_meta_get_u64(tg_ctx *ctx, const tg_meta *meta, const char *key, uint64_t *value);
/* Frees every key and value and empties the list. */
void tg_meta_free(tg_meta *meta);
/* Stores the context's RNG state as "tapegrad.rng.seed" and
 * "tapegrad.rng.offset", and restores it from them. */
bool tg_meta_set_rng(tg_ctx *ctx, tg_meta *meta);
bool tg_meta_get_rng(tg_ctx *ctx, const tg_meta *meta);

/* The file operations a save makes, replaceable per call (tests use this to
 * inject a failure at every write point). Each behaves like its POSIX
 * namesake: -1 (errno set) on failure. A NULL member uses the POSIX call. */
typedef struct tg_ckpt_io {
    /* open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644) */
    int (*create)(const char *path, void *user);
    /* write(fd, buf, n): bytes written (may be fewer than n) or -1 */
    ptrdiff_t (*write)(int fd, const void *buf, size_t n, void *user);
    int (*fsync)(int fd, void *user);
    int (*close)(int fd, void *user);
    int (*rename)(const char *from, const char *to, void *user);
    /* open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC), to fsync a folder */
    int (*open_dir)(const char *path, void *user);
    /* unlink(path), to remove the temporary file after a failure */
    int (*remove)(const char *path, void *user);
    void *user;
} tg_ckpt_io;

/* The POSIX implementations, e.g. for a hook that wraps them. */
tg_ckpt_io tg_ckpt_io_posix(void);

typedef struct tg_ckpt_options {
    const tg_ckpt_io *io; /* save: file operations (NULL: POSIX) */
    bool ignore_extra;    /* load: skip tensors of the file that are in neither
                             list (e.g. only the model from a training file) */
} tg_ckpt_options;

/* Saves params, plus state and meta when not NULL, to path atomically: a
 * temporary file beside it is written, fsync'ed and renamed over path, then
 * the folder is fsync'ed. On failure path keeps its old contents and the
 * temporary is removed; only when fsyncing the folder after the rename
 * fails does path already hold the new checkpoint. Names must be unique
 * across both lists and not "__metadata__". */
tg_status tg_ckpt_save(tg_ctx *ctx, const char *path, const tg_params *params,
                       const tg_params *state, const tg_meta *meta);
/* As tg_ckpt_save with options (NULL: defaults). */
tg_status tg_ckpt_save_ex(tg_ctx *ctx, const char *path, const tg_params *params,
                          const tg_params *state, const tg_meta *meta,
                          const tg_ckpt_options *opt);
/* Loads path into the existing tensors of params (and state, when not NULL)
 * by name. The file must hold exactly those tensors, each with the same
 * dtype and shape; the whole file is validated and read before any tensor
 * is written, so on error nothing changes. meta (may be NULL) receives the
 * file's metadata, replacing its contents. */
tg_status tg_ckpt_load(tg_ctx *ctx, const char *path, tg_params *params, tg_params *state,
                       tg_meta *meta);
/* As tg_ckpt_load with options (NULL: defaults). */
tg_status tg_ckpt_load_ex(tg_ctx *ctx, const char *path, tg_params *params, tg_params *state,
                          tg_meta *meta, const tg_ckpt_options *opt);

/* --- Autograd ops: matmul, shapes, embedding, softmax, losses, dropout --- */
/* Differentiable ops (autograd/ops_matmul.c, ops_shape.c, ops_embedding.c,
 * ops_softmax.c, ops_loss.c, ops_dropout.c), float32 and float64. Each
 * returns a new arena tensor of its inputs' dtype (tensor inputs must share
 * one dtype) and records itself on the tape when an input requires grad and
 * grad mode is on. On error: NULL and the context's error names the op and
 * the offending shapes or values. Axis arguments may be negative (counted
 * from the end, -1 is the last dim). */

/* Matrix product c = a b, c_ij = sum_k a_ik b_kj:
 *   a (M,K)   x b (K,N)   -> (M,N)
 *   a (B,M,K) x b (B,K,N) -> (B,M,N)   (batched: one product per batch)
 *   a (B,M,K) x b (K,N)   -> (B,M,N)   (b shared by every batch)
 * Backward uses the transposed GEMM cases (da = dc b^T, db = a^T dc)
 * without copying a transpose. */
tg_tensor *tg_matmul(tg_ctx *ctx, tg_tensor *a, tg_tensor *b);
/* Swaps the last two dims (ndim >= 2): y[..., j, i] = x[..., i, j]. A copy. */
tg_tensor *tg_transpose(tg_ctx *ctx, tg_tensor *x);
/* x with a new shape of the same numel; one size may be -1 (inferred).
 * Shares x's data like tg_view, but is recorded (dx = dy reshaped). */
tg_tensor *tg_reshape(tg_ctx *ctx, tg_tensor *x, int ndim, const int64_t *shape);
/* Joins n >= 1 tensors along `axis`; all have the same ndim and the same
 * sizes except along axis. */
tg_tensor *tg_concat(tg_ctx *ctx, int n, tg_tensor *const *xs, int axis);
/* Elements start..end-1 of x along `axis` (0 <= start <= end <= size; no
 * clamping: out of range is an error). A copy. */
tg_tensor *tg_slice(tg_ctx *ctx, tg_tensor *x, int axis, int64_t start, int64_t end);

/* Embedding lookup: y[i, :] = weight[indices[i], :] for weight (V,D) and
 * the numel(shape) indices (row-major, each in 0..V-1, copied); the result
 * has shape + (D), so ndim <= TG_MAX_DIMS - 1. Backward scatter-adds dy
 * rows into dweight; repeated indices accumulate. */
tg_tensor *tg_embedding(tg_ctx *ctx, tg_tensor *weight, int ndim, const int64_t *shape,
                        const int64_t *indices);

/* Softmax over the last axis: y_i = exp(x_i - m) / sum_j exp(x_j - m), with
 * m the row's max (so logits of +-1e4 stay finite in float32). A 0-d x is
 * one row of one element. */
tg_tensor *tg_softmax(tg_ctx *ctx, tg_tensor *x);
/* log_softmax over the last axis: y_i = x_i - m - log(sum_j exp(x_j - m)).
 * Finite for finite logits; a -inf logit gives -inf, as in PyTorch. */
tg_tensor *tg_log_softmax(tg_ctx *ctx, tg_tensor *x);

/* Options of tg_cross_entropy, as PyTorch's F.cross_entropy. Defaults
 * (also what a NULL opts means): ignore_index = -100, label_smoothing = 0.
 * Start from TG_CROSS_ENTROPY_DEFAULTS and change what you need. */
typedef struct tg_cross_entropy_opts {
    int64_t ignore_index;   /* rows whose target equals it add nothing */
    double label_smoothing; /* eps in [0, 1]: the target distribution is
                               (1 - eps) one_hot(t) + eps / C */
} tg_cross_entropy_opts;
#define TG_CROSS_ENTROPY_DEFAULTS ((tg_cross_entropy_opts){-100, 0.0})

/* Cross-entropy from logits (N,C) with targets[N] (int64, each in 0..C-1
 * or ignore_index), mean reduction over the non-ignored rows:
 *   loss = 1/|R| sum_{i in R} [ -(1 - eps) logp_i[t_i] - eps/C sum_c logp_i[c] ]
 * with logp = log_softmax(logits) and R the rows not ignored. Fused with
 * log_softmax: one tape record saving the targets and each row's
 * log-sum-exp. A scalar. When every row is ignored the loss is NaN (0/0,
 * as in PyTorch) and its gradient is 0. N = 0 or C = 0 is an error. */
tg_tensor *tg_cross_entropy(tg_ctx *ctx, tg_tensor *logits, const int64_t *targets,
                            const tg_cross_entropy_opts *opts);
/* Mean squared error, a scalar: mean((pred - target)^2). Same shapes, at
 * least one element. Both inputs may require grad. */
tg_tensor *tg_mse_loss(tg_ctx *ctx, tg_tensor *pred, tg_tensor *target);

/* Dropout (inverted): in training, y_i = x_i / (1 - p) when kept, 0 when
 * dropped, each element dropped with probability p in [0, 1). Element i is
 * dropped when u_i < p, u_i the f64 uniform of Philox block i of the
 * context's stream (see Random numbers), so the mask depends only on the
 * seed and offset, never on the thread count; the offset then advances by
 * numel. With training=false or p = 0 it returns x itself and draws
 * nothing. */
tg_tensor *tg_dropout(tg_ctx *ctx, tg_tensor *x, double p, bool training);

/* --- Autograd ops: elementwise, activations, reductions --- */
/* Differentiable ops (autograd/ops_elementwise.c, ops_activation.c,
 * ops_reduce.c), float32 and float64, with PyTorch's semantics. Each returns
 * a new arena tensor of its input's dtype and records itself on the tape
 * when an input requires grad and grad mode is on. NULL inputs (TG_ERR_NULL)
 * or a context already in error: NULL, nothing done.
 *
 * Broadcasting (NumPy rules) in tg_add, tg_sub, tg_mul, tg_div: shapes are
 * aligned at their last dims, missing leading dims count as 1, and two sizes
 * fit when they are equal or one of them is 1; the result takes the larger.
 * Shapes that do not fit are TG_ERR_SHAPE naming both; dtypes that differ
 * are TG_ERR_DTYPE. Backward sums the gradient over the dims an input was
 * broadcast along, so each input's grad has the input's own shape.
 *
 * Non-finite values follow IEEE and PyTorch: log(0) = -inf, log(x<0) = NaN,
 * sqrt(0)'s gradient is inf, NaN propagates. */

/* a + b, a - b, a * b, a / b elementwise, with broadcasting. */
tg_tensor *tg_add(tg_ctx *ctx, tg_tensor *a, tg_tensor *b);
tg_tensor *tg_sub(tg_ctx *ctx, tg_tensor *a, tg_tensor *b);
tg_tensor *tg_mul(tg_ctx *ctx, tg_tensor *a, tg_tensor *b);
tg_tensor *tg_div(tg_ctx *ctx, tg_tensor *a, tg_tensor *b);
/* y = -x */
tg_tensor *tg_neg(tg_ctx *ctx, tg_tensor *x);
/* y = x + s  (any s; e.g. -inf for masks) */
tg_tensor *tg_add_scalar(tg_ctx *ctx, tg_tensor *x, double s);
/* y = s x  (any s) */
tg_tensor *tg_mul_scalar(tg_ctx *ctx, tg_tensor *x, double s);
/* y = x^p with p finite (TG_ERR_VALUE otherwise); dy/dx = p x^(p-1), and 0
 * when p == 0 (as PyTorch). At x = 0 with p < 1 the gradient is inf/NaN. */
tg_tensor *tg_pow_scalar(tg_ctx *ctx, tg_tensor *x, double p);
/* y = e^x */
tg_tensor *tg_exp(tg_ctx *ctx, tg_tensor *x);
/* y = ln x; ln 0 = -inf, ln of a negative = NaN; dy/dx = 1/x */
tg_tensor *tg_log(tg_ctx *ctx, tg_tensor *x);
/* y = sqrt(x); dy/dx = 1/(2 sqrt x), inf at x = 0 */
tg_tensor *tg_sqrt(tg_ctx *ctx, tg_tensor *x);
/* y = |x|; dy/dx = sign(x), 0 at x = 0 */
tg_tensor *tg_abs(tg_ctx *ctx, tg_tensor *x);

/* Activations (autograd/ops_activation.c). */
/* y = max(x, 0); dy/dx = 1 for x > 0, 0 for x <= 0 (0 at the kink) */
tg_tensor *tg_relu(tg_ctx *ctx, tg_tensor *x);
/* y = x for x > 0, negative_slope * x otherwise; negative_slope finite
 * (TG_ERR_VALUE otherwise). PyTorch's default slope is 0.01. */
tg_tensor *tg_leaky_relu(tg_ctx *ctx, tg_tensor *x, double negative_slope);
/* y = 1 / (1 + e^-x), without overflow for any x; dy/dx = y (1 - y) */
tg_tensor *tg_sigmoid(tg_ctx *ctx, tg_tensor *x);
/* y = tanh x; dy/dx = 1 - y^2 */
tg_tensor *tg_tanh(tg_ctx *ctx, tg_tensor *x);
/* GELU. Exact (tanh_approx false): y = x/2 (1 + erf(x / sqrt 2)).
 * tanh_approx: y = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), PyTorch's
 * approximate='tanh'. */
tg_tensor *tg_gelu(tg_ctx *ctx, tg_tensor *x, bool tanh_approx);
/* SiLU (swish): y = x sigmoid(x) */
tg_tensor *tg_silu(tg_ctx *ctx, tg_tensor *x);

/* Reductions (autograd/ops_reduce.c). `axis` may be negative (-1 is the
 * last dim); out of range is TG_ERR_SHAPE. A 0-d tensor takes axis 0 or -1
 * and is its own sum (PyTorch does the same). keepdim keeps the reduced dim
 * with size 1, else it is removed. Sums and means accumulate in double
 * (float32 too), each output in a fixed order: results never depend on the
 * thread count. */
/* Sum of all elements: a 0-d tensor (0 for an empty x). */
tg_tensor *tg_sum(tg_ctx *ctx, tg_tensor *x);
/* Mean of all elements: a 0-d tensor. An empty x is TG_ERR_VALUE "empty
 * reduction": PyTorch returns NaN there; we call it misuse. */
tg_tensor *tg_mean(tg_ctx *ctx, tg_tensor *x);
/* Sum over one axis (an axis of size 0 sums to 0). */
tg_tensor *tg_sum_axis(tg_ctx *ctx, tg_tensor *x, int axis, bool keepdim);
/* Mean over one axis; an axis of size 0 is TG_ERR_VALUE "empty reduction". */
tg_tensor *tg_mean_axis(tg_ctx *ctx, tg_tensor *x, int axis, bool keepdim);
/* Max over one axis (values only). Ties: the gradient goes to the first
 * maximal element along the axis (lowest index), the others get 0. NaN
 * counts as the largest value (the first NaN wins), as PyTorch propagates
 * it. An axis of size 0 is TG_ERR_VALUE "empty reduction". */
tg_tensor *tg_max_axis(tg_ctx *ctx, tg_tensor *x, int axis, bool keepdim);

/* --- Gradient checking and the op registry --- */
/* tg_gradcheck compares an op's hand-written backward with central finite
 * differences (autograd/gradcheck.c). For f(inputs) and a random weighting
 * r of f's outputs (uniform in [-1, 1), from opts.seed), L = sum_j r_j f_j:
 *   analytic  a_i = dL/dx_i              one tg_backward_ex seeded with r
 *   numeric   n_i = (L(x + h e_i) - L(x - h e_i)) / 2h
 * and an element passes when |a_i - n_i| <= atol + rtol |n_i| (PyTorch's
 * gradcheck rule; defaults h = 1e-6, atol = 1e-5, rtol = 1e-3). The
 * denominator is the step actually stored (x+h and x-h rounded to the
 * dtype), so float32 checks are not biased by rounding of the step.
 *
 * Forward evaluations for the differences run in no-grad mode, each from
 * the same RNG state (so dropout sees one mask throughout); afterwards the
 * RNG is left where one call of f leaves it. The check uses its own tape
 * (the caller's tape, tensors and grads are untouched) and copies of the
 * inputs. Its tensors live in the arena; memory of the difference
 * evaluations is reused, so a big check does not grow the arena with the
 * number of evaluations. Never call tg_ctx_reset inside f.
 *
 * It refuses float32 inputs unless allow_float32: float32 round-off (~1e-7
 * relative) swamps the difference quotient: with h = 1e-6 the error of
 * f(x +- h) is ~1e-7 |f|, which divided by 2h is ~0.05 |f|. With
 * allow_float32, unset h/atol/rtol default to 1e-3, 1e-3, 1e-2. */

/* The function checked: builds its output from inputs[0..n-1] with
 * differentiable ops; `user` is passed through (op arguments, a layer...).
 * It must give the same output for the same inputs and RNG state. */
typedef tg_tensor *(*tg_gradcheck_fn)(tg_ctx *ctx, tg_tensor *const *inputs, void *user);

/* Most inputs a checked function may take. */
#define TG_GRADCHECK_MAX_INPUTS 8

typedef enum tg_gradcheck_mode {
    TG_GRADCHECK_FULL = 0,    /* every element of every checked input:
                                 2 forwards per element */
    TG_GRADCHECK_DIRECTIONAL  /* one random unit direction v per input:
                                 compares dL/dx . v with
                                 (L(x + h v) - L(x - h v)) / 2h; 2 forwards
                                 per input, for big tensors */
} tg_gradcheck_mode;

/* Options. Zero-initialized means the defaults (NULL opts too); a zero h,
 * atol or rtol means "the default" (or the op's own, in the registry). */
typedef struct tg_gradcheck_opts {
    double h;              /* finite-difference step (> 0) */
    double atol, rtol;     /* tolerances (>= 0) */
    tg_gradcheck_mode mode;
    uint64_t seed;         /* seeds r and the directions v (not the ctx RNG) */
    bool allow_float32;    /* check float32 inputs anyway */
    uint32_t inputs;       /* bit k set: check input k; 0: every input */
    bool forward_diff;     /* one-sided (L(x + h) - L(x)) / h instead of
                              central differences: error O(h), not O(h^2);
                              for comparing the schemes (step sweeps) */
} tg_gradcheck_opts;

/* The outcome for one input. */
typedef struct tg_gradcheck_input {
    bool checked;          /* false: skipped (not in opts.inputs) */
    bool pass;
    int64_t n_checked;     /* elements (FULL) or directions (DIRECTIONAL) */
    int64_t n_failed;
    double max_abs_err;    /* max |a - n| */
    double max_rel_err;    /* max |a - n| / max(|n|, atol) */
    int64_t worst_index;   /* flat index of the worst element; -1 in
                              DIRECTIONAL mode or when nothing was checked */
    double worst_analytic, worst_numeric;
    double worst_ratio;    /* |a - n| / (atol + rtol |n|): pass when <= 1 */
} tg_gradcheck_input;

/* The outcome of a check: what the caller asserts on. "Worst" is the
 * comparison with the largest ratio |a - n| / (atol + rtol |n|) (NaN counts
 * as the worst of all). */
typedef struct tg_gradcheck_result {
    bool pass;             /* every comparison passed (and no error) */
    int64_t n_checked;     /* comparisons over all inputs */
    int64_t n_failed;
    int64_t n_evals;       /* forward evaluations of f: 1 + 2 per element
                              (FULL) or per input (DIRECTIONAL); 2 + 1 per
                              with forward_diff */
    double max_abs_err, max_rel_err;
    int worst_input;       /* -1 when nothing was checked */
    int64_t worst_index;   /* as in tg_gradcheck_input */
    double worst_analytic, worst_numeric, worst_ratio;
    double h, atol, rtol;  /* the values used */
    tg_gradcheck_mode mode;
    bool forward_diff;
    int n_inputs;
    tg_gradcheck_input input[TG_GRADCHECK_MAX_INPUTS];
} tg_gradcheck_result;

/* The defaults: h = 1e-6, atol = 1e-5, rtol = 1e-3, FULL, seed 0, every
 * input. */
tg_gradcheck_opts tg_gradcheck_defaults(void);
/* Checks f's backward at inputs[0..n_inputs-1] (1..TG_GRADCHECK_MAX_INPUTS)
 * and fills *result. Returns result->pass. A failed comparison is a result,
 * not an error; errors (bad arguments, float32 refused, f failing) set the
 * context's error and return false. */
bool tg_gradcheck(tg_ctx *ctx, tg_gradcheck_fn f, void *user, int n_inputs, tg_tensor *const *inputs,
                  const tg_gradcheck_opts *opts, tg_gradcheck_result *result);
/* The full Jacobians of f's output with respect to input `input`, as float64
 * arena tensors of shape (numel(out), numel(input)): J[j][i] = d out_j / d x_i.
 * *analytic from one backward per output element, *numeric from central
 * differences (h from opts as above). For small functions: at most 2^22
 * entries. Returns false (and sets the error) on failure. */
bool tg_gradcheck_jacobian(tg_ctx *ctx, tg_gradcheck_fn f, void *user, int n_inputs,
                           tg_tensor *const *inputs, int input, const tg_gradcheck_opts *opts,
                           tg_tensor **analytic, tg_tensor **numeric);

/* The op registry (layers/registry.c): every differentiable op registers
 * its name, a builder of random valid inputs and its forward, so tests and
 * the gradient-check tool can check every op by iterating over it.
 *
 * Inputs are described by a spec string: the input shapes separated by
 * commas, each as sizes joined by 'x' ("()" for a 0-d tensor), then
 * optional ";key=value" arguments, e.g. "2x1x3,4x3" (add broadcasting from
 * both sides), "2x3x4;axis=1;keepdim=1" (sum_axis), "4x5;smoothing=0.1"
 * (cross_entropy). Each op documents its spec in spec_help and lists
 * built-in specs (its shape variants). Builders keep inputs away from the
 * op's kinks: relu/abs/leaky_relu inputs away from 0, max without ties,
 * log/sqrt/pow inputs positive, div denominators away from 0. */

/* Most key=value arguments in a spec. */
#define TG_OP_MAX_ARGS 8

struct tg_op_info;

/* One concrete input set of an op, made by tg_registry_build. */
typedef struct tg_op_case {
    const struct tg_op_info *op;
    char spec[128];                /* the spec it was built from */
    tg_dtype dtype;
    int n_inputs;                  /* tensor inputs of the forward */
    tg_tensor *inputs[TG_GRADCHECK_MAX_INPUTS];
    const char *input_names[TG_GRADCHECK_MAX_INPUTS]; /* "a", "b", "x", "weight"... */
    uint32_t check;                /* bit k: input k is differentiable */
    /* the spec, parsed */
    int n_shapes;
    int ndim[TG_GRADCHECK_MAX_INPUTS];
    int64_t shape[TG_GRADCHECK_MAX_INPUTS][TG_MAX_DIMS];
    int n_args;
    char arg_name[TG_OP_MAX_ARGS][16];
    char arg_value[TG_OP_MAX_ARGS][48];
    /* integer data the forward needs (embedding indices, class targets),
     * in the arena; NULL when none */
    int64_t *index;
    int64_t n_index;
} tg_op_case;

/* A registered op. */
typedef struct tg_op_info {
    int id;                        /* its position in the registry */
    const char *name;              /* "add", "matmul", ... */
    const char *summary;           /* what it computes, one line */
    const char *spec_help;         /* the spec it takes and its arguments */
    const char *const *variants;   /* built-in specs, NULL-terminated */
    int n_variants;
    bool random;                   /* draws from the context's RNG (dropout) */
    double h, atol, rtol;          /* its own float64 step and tolerances;
                                      0: the gradcheck default */
    /* Makes c->inputs (and c->index) from c's parsed spec and dtype with
     * the context's RNG; false and an error on a bad spec. */
    bool (*build)(tg_ctx *ctx, tg_op_case *c);
    /* The op applied to inputs (c->inputs or copies of them); user is the
     * tg_op_case. */
    tg_gradcheck_fn forward;
} tg_op_info;

/* Number of registered ops, the i-th (NULL when out of range), and the one
 * named `name` (NULL when there is none). */
int tg_registry_count(void);
const tg_op_info *tg_registry_get(int i);
const tg_op_info *tg_registry_find(const char *name);
/* Parses spec (NULL: the op's first variant) and builds random valid inputs
 * of dtype into *c. Errors (TG_ERR_FORMAT for a malformed spec,
 * TG_ERR_SHAPE / TG_ERR_VALUE for shapes or arguments the op cannot take)
 * name the op and the spec. */
bool tg_registry_build(tg_ctx *ctx, const tg_op_info *op, const char *spec, tg_dtype dtype, tg_op_case *c);
/* The op's forward on c's inputs. */
tg_tensor *tg_registry_forward(tg_ctx *ctx, tg_op_case *c);
/* Builds the op's variant-th built-in spec (0..n_variants-1), or `spec`,
 * and gradchecks it: opts (NULL: defaults) with the op's own h, atol and
 * rtol where opts leaves them 0 (float64 only), over the differentiable
 * inputs (intersected with opts->inputs when set). As tg_gradcheck. */
bool tg_registry_check(tg_ctx *ctx, const tg_op_info *op, int variant, tg_dtype dtype,
                       const tg_gradcheck_opts *opts, tg_gradcheck_result *result);
bool tg_registry_check_spec(tg_ctx *ctx, const tg_op_info *op, const char *spec, tg_dtype dtype,
                            const tg_gradcheck_opts *opts, tg_gradcheck_result *result);

/* --- Optimizers, learning-rate schedules, gradient clipping --- */
/* An optimizer updates the parameters of a tg_params list (which must
 * outlive it) from their grads, with PyTorch's formulas (optim/sgd.c,
 * optim/adam.c). Parameters whose weight_decay flag is false get no decay.
 * Hyper-parameters are checked when the optimizer is made:
 * lr >= 0, momentum >= 0, dampening finite, weight_decay >= 0,
 * betas in [0, 1), eps > 0, nesterov only with momentum > 0 and
 * dampening 0; NaN or inf anywhere is refused. */
typedef struct tg_optim tg_optim;

/* SGD: with d = g + weight_decay * p,
 *   buf = d (first step), buf = momentum * buf + (1 - dampening) * d (after);
 *   d = d + momentum * buf (nesterov) or d = buf (momentum > 0);  p -= lr * d */
typedef struct tg_sgd_opts {
    double lr, momentum, dampening, weight_decay;
    bool nesterov;
} tg_sgd_opts;
/* Adam / AdamW: m = b1 m + (1-b1) g,  v = b2 v + (1-b2) g^2,
 *   p -= lr/(1-b1^t) * m / (sqrt(v')/sqrt(1-b2^t) + eps), v' = v or the
 *   running max of v (amsgrad). Adam adds weight_decay * p to g (L2);
 *   AdamW first scales p by (1 - lr * weight_decay) (decoupled). */
typedef struct tg_adam_opts {
    double lr, beta1, beta2, eps, weight_decay;
    bool amsgrad;
} tg_adam_opts;

/* PyTorch's defaults: SGD momentum 0; Adam lr 1e-3, betas (0.9, 0.999),
 * eps 1e-8, weight_decay 0; AdamW the same with weight_decay 1e-2. */
tg_sgd_opts tg_sgd_defaults(double lr);
tg_adam_opts tg_adam_defaults(void);
tg_adam_opts tg_adamw_defaults(void);

/* New optimizers over `params`; NULL (and an error) on bad hyper-parameters.
 * Their state tensors are persistent, made zero at creation. */
tg_optim *tg_sgd_new(tg_ctx *ctx, tg_params *params, const tg_sgd_opts *opts);
tg_optim *tg_adam_new(tg_ctx *ctx, tg_params *params, const tg_adam_opts *opts);
tg_optim *tg_adamw_new(tg_ctx *ctx, tg_params *params, const tg_adam_opts *opts);
/* Frees the optimizer and its state tensors. */
void tg_optim_free(tg_ctx *ctx, tg_optim *opt);
/* One update of every parameter from its grad, at the schedule's lr for the
 * current step; then the step count advances. */
void tg_optim_step(tg_ctx *ctx, tg_optim *opt);
/* Zeroes the grads of the optimizer's parameters. */
void tg_optim_zero_grad(tg_ctx *ctx, tg_optim *opt);
/* The lr the next step will use (for logging), and the base lr. */
double tg_optim_lr(const tg_optim *opt);
/* Sets the base lr (the schedule scales it). lr < 0 or NaN: error. */
void tg_optim_set_lr(tg_ctx *ctx, tg_optim *opt, double lr);
/* Steps taken so far. */
int64_t tg_optim_steps(const tg_optim *opt);
/* The optimizer's state by name, for checkpoints: "optim.step" (a float64
 * scalar holding the step count), and per parameter P "optim.P.exp_avg",
 * "optim.P.exp_avg_sq", "optim.P.max_exp_avg_sq" (amsgrad) or
 * "optim.P.momentum_buffer" (SGD with momentum). The tensors are the live
 * state: writing them (e.g. loading a checkpoint) restores it; call
 * tg_optim_sync_state after writing "optim.step". */
tg_params *tg_optim_state(tg_optim *opt);
/* Reads "optim.step" back into the step count after a restore. */
void tg_optim_sync_state(tg_ctx *ctx, tg_optim *opt);

/* Learning-rate schedules: lr(t) = base_lr * factor(t) at step t (0-based). */
typedef enum tg_schedule_kind {
    TG_SCHED_CONSTANT = 0, /* factor 1 */
    TG_SCHED_STEP,         /* gamma^floor(t / step_size) (PyTorch StepLR) */
    TG_SCHED_WARMUP_COSINE,/* linear from start_factor to 1 over warmup_steps,
                              then cosine from base_lr to min_lr over the
                              remaining total_steps - warmup_steps, then min_lr */
    TG_SCHED_CALLBACK      /* lr(t) = fn(t, base_lr, user) */
} tg_schedule_kind;
typedef struct tg_schedule {
    tg_schedule_kind kind;
    int64_t step_size;       /* STEP */
    double gamma;            /* STEP */
    int64_t warmup_steps;    /* WARMUP_COSINE */
    int64_t total_steps;     /* WARMUP_COSINE */
    double start_factor;     /* WARMUP_COSINE, in (0, 1] */
    double min_lr;           /* WARMUP_COSINE */
    double (*fn)(int64_t step, double base_lr, void *user); /* CALLBACK */
    void *user;
} tg_schedule;
/* The lr of `sched` at step t for a base lr; NaN for an invalid schedule. */
double tg_schedule_lr(const tg_schedule *sched, double base_lr, int64_t step);
/* Attaches a schedule (copied) to the optimizer; NULL restores constant. */
void tg_optim_set_schedule(tg_ctx *ctx, tg_optim *opt, const tg_schedule *sched);

/* Scales all grads so their global L2 norm is at most max_norm (PyTorch's
 * clip_grad_norm_: coef = max_norm / (norm + 1e-6), applied when < 1).
 * Returns the norm before clipping. A non-finite norm is an error and the
 * grads are left unchanged. */
double tg_clip_grad_norm(tg_ctx *ctx, tg_params *params, double max_norm);
/* The global L2 norm of all grads (no change). */
double tg_grad_norm(tg_ctx *ctx, const tg_params *params);
/* Clamps every grad element to [-clip_value, clip_value]. */
void tg_clip_grad_value(tg_ctx *ctx, tg_params *params, double clip_value);
/* Anomaly check, to call after backward: false (and an error naming the
 * first parameter and element) when a grad holds NaN or inf. */
bool tg_check_grads_finite(tg_ctx *ctx, const tg_params *params);

/* --- Layers: modules and parameters --- */
/* Layers come in two levels (files in layers/), as in kann:
 *  - fused differentiable ops that take their parameters as tensors:
 *    tg_linear_fused, tg_rmsnorm_fused, tg_layernorm_fused. Each is ONE
 *    tape record with a hand-derived backward (derivations above the code
 *    and in docs/normalization-gradients.md). The norms also have composed
 *    twins, tg_rmsnorm_composed and tg_layernorm_composed, built only from
 *    primitive ops: same math, same gradients, many records.
 *  - modules: a struct owning its persistent parameters, made by _new, run
 *    by _forward (which calls the fused op), listed by _params, freed by
 *    _free. PyTorch's semantics, defaults, init and repr.
 *
 * Tape accounting (tg_tape_size, tg_tape_saved_bytes) is done the same way
 * for fused and primitive ops: a record counts what it allocates for
 * backward (a norm's per-row float64 statistics) plus every tensor its
 * backward reads through the record (x, weight, gamma; what a primitive op
 * like mul or div counts too), so fused and composed forms compare fairly. */

/* Defaults of PyTorch's nn.RMSNorm (as used in LLaMA) and nn.LayerNorm. */
#define TG_RMSNORM_EPS 1e-6
#define TG_LAYERNORM_EPS 1e-5

/* y = x W^T + b with x (..., in), weight W (out, in), bias b (out) or NULL;
 * y is (..., out). Any number of leading dims (x is flattened to rows; a
 * 1-d x is one row). One GEMM writes x W^T onto rows prefilled with b, so
 * the bias costs no extra pass. Backward: dx += dy W, dW += dy^T x,
 * db += column sums of dy (transposed GEMM cases, no transposed copies). */
tg_tensor *tg_linear_fused(tg_ctx *ctx, tg_tensor *x, tg_tensor *weight, tg_tensor *bias);

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
tg_tensor *tg_rmsnorm_fused(tg_ctx *ctx, tg_tensor *x, tg_tensor *gamma, tg_tensor *beta, int ndim_norm,
                            double eps);
/* LayerNorm, one record saving only mean and rstd per row:
 *   mu = mean_j x_j, var = mean_j (x_j - mu)^2 (biased, two-pass: no
 *   E[x^2] - E[x]^2 cancellation), r = 1 / sqrt(var + eps),
 *   y = (x - mu) r * gamma + beta
 * Backward, with xhat = (x - mu) r, u = gamma dy:
 *   dx = r (u - mean_j u_j - xhat mean_j(u_j xhat_j)),
 *   dgamma = sum_rows dy xhat,  dbeta = sum_rows dy. */
tg_tensor *tg_layernorm_fused(tg_ctx *ctx, tg_tensor *x, tg_tensor *gamma, tg_tensor *beta, int ndim_norm,
                              double eps);
/* The composed twins: the same functions and arguments, built only from
 * primitive ops as PyTorch users write them, e.g. RMSNorm
 * x * (mean(x^2, -1) + eps)^(-1/2) * gamma (+ beta) with tg_pow_scalar,
 * tg_mean_axis, tg_add_scalar, tg_mul (tg_sub for LayerNorm's x - mean;
 * tg_reshape to rows and back when several dims are normalized), so
 * autograd derives their backward: 6 records for RMSNorm with gamma, 9 for
 * LayerNorm with gamma and beta. Statistics are in x's dtype (the float32
 * range limits of the plain formula apply). For tests, learners and
 * benchmarks. */
tg_tensor *tg_rmsnorm_composed(tg_ctx *ctx, tg_tensor *x, tg_tensor *gamma, tg_tensor *beta, int ndim_norm,
                               double eps);
tg_tensor *tg_layernorm_composed(tg_ctx *ctx, tg_tensor *x, tg_tensor *gamma, tg_tensor *beta, int ndim_norm,
                                 double eps);

/* Modules. Every layer struct starts with a tg_module (its member `base`),
 * the generic view used by models, summaries and parameter lists. Fields
 * are read-only for users. A layer's parameters are persistent tensors that
 * require grad (they survive tg_ctx_reset); the layer owns them and its
 * _free frees them. Free layers (or their model) before the context. */
typedef struct tg_module_ops tg_module_ops; /* internal: the layer's methods */
typedef struct tg_module {
    const char *kind;          /* "Linear", "RMSNorm", "LayerNorm", "Embedding" */
    char name[48];             /* prefix of its parameter names ("fc1"), or "" */
    tg_dtype dtype;
    const tg_module_ops *ops_; /* internal */
} tg_module;
/* The generic view of a layer pointer (NULL stays NULL). `layer` is
 * evaluated once (the sizeof only checks, at compile time, that it is a
 * layer), so TG_MODULE(tg_linear_new(...)) is fine. */
#define TG_MODULE(layer) ((void)sizeof(&(layer)->base == (tg_module *)0), (tg_module *)(void *)(layer))

/* Appends the module's parameters to list as "name.param" (just "param"
 * when the name is ""), with their weight-decay flags. False on error. */
bool tg_module_params(tg_ctx *ctx, tg_module *m, tg_params *list);
/* Number of scalar parameters. */
int64_t tg_module_numel(const tg_module *m);
/* Writes the module's repr and parameter count into buf (snprintf
 * semantics: returns the length the full text needs), e.g.
 *   Linear(in_features=784, out_features=256, bias=true)  params=200960
 *   RMSNorm(dim=384, eps=1e-06, affine=true, bias=false)  params=384
 *   LayerNorm(dim=(4, 8), eps=1e-05, affine=true, bias=true)  params=64 */
size_t tg_module_format(char *buf, size_t size, const tg_module *m);
/* Frees the module and its parameters (any layer kind). NULL is a no-op. */
void tg_module_free(tg_ctx *ctx, tg_module *m);

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
/* Errors: in or out < 1, a name over 47 bytes, an unknown dtype. */
tg_linear *tg_linear_new(tg_ctx *ctx, const char *name, int64_t in_features, int64_t out_features, bool bias,
                         tg_dtype dtype);
/* tg_linear_fused(x, weight, bias); x's last dim must be in_features and
 * its dtype the layer's. */
tg_tensor *tg_linear_forward(tg_ctx *ctx, tg_linear *layer, tg_tensor *x);
bool tg_linear_params(tg_ctx *ctx, tg_linear *layer, tg_params *list);
void tg_linear_free(tg_ctx *ctx, tg_linear *layer);

/* RMSNorm(normalized_shape, eps=1e-6, affine=true, bias=false) and
 * LayerNorm(normalized_shape, eps=1e-5, affine=true, bias=true) over the
 * trailing dims normalized_shape[0..ndim-1] of their input. affine=false:
 * no gamma and no beta (zero parameters; `bias` is then ignored, as in
 * PyTorch); bias=false: no beta. gamma starts at 1, beta at 0, so a fresh
 * layer with bias computes the same as one without. Parameters: "gamma",
 * "beta", both without weight decay. */
typedef struct tg_rmsnorm {
    tg_module base;
    int ndim;                              /* normalized dims, 1..TG_MAX_DIMS */
    int64_t normalized_shape[TG_MAX_DIMS];
    double eps;
    bool affine, bias;                     /* bias: the layer has a beta */
    tg_tensor *gamma;                      /* normalized_shape, or NULL */
    tg_tensor *beta;                       /* normalized_shape, or NULL */
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
/* Errors (TG_ERR_VALUE, naming the argument and its value): ndim outside
 * 1..TG_MAX_DIMS, a size < 1, eps <= 0, NaN or inf; a name over 47 bytes;
 * a NULL normalized_shape; an unknown dtype. */
tg_rmsnorm *tg_rmsnorm_new(tg_ctx *ctx, const char *name, int ndim, const int64_t *normalized_shape, double eps,
                           bool affine, bool bias, tg_dtype dtype);
tg_layernorm *tg_layernorm_new(tg_ctx *ctx, const char *name, int ndim, const int64_t *normalized_shape,
                               double eps, bool affine, bool bias, tg_dtype dtype);
/* The fused op on x, whose trailing dims must equal normalized_shape
 * (TG_ERR_SHAPE naming both shapes otherwise) and whose dtype must be the
 * layer's. */
tg_tensor *tg_rmsnorm_forward(tg_ctx *ctx, tg_rmsnorm *layer, tg_tensor *x);
tg_tensor *tg_layernorm_forward(tg_ctx *ctx, tg_layernorm *layer, tg_tensor *x);
bool tg_rmsnorm_params(tg_ctx *ctx, tg_rmsnorm *layer, tg_params *list);
bool tg_layernorm_params(tg_ctx *ctx, tg_layernorm *layer, tg_params *list);
void tg_rmsnorm_free(tg_ctx *ctx, tg_rmsnorm *layer);
void tg_layernorm_free(tg_ctx *ctx, tg_layernorm *layer);

/* Embedding(num_embeddings, embedding_dim), as torch.nn.Embedding: a table
 * of num_embeddings rows initialized N(0, 1) from the context's RNG; the
 * forward is tg_embedding on it. Parameter: "weight" (weight decay on). */
typedef struct tg_embedding_layer {
    tg_module base;
    int64_t num_embeddings, embedding_dim;
    tg_tensor *weight; /* (num_embeddings, embedding_dim) */
} tg_embedding_layer;
/* Errors: a size < 1, a name over 47 bytes, an unknown dtype. */
tg_embedding_layer *tg_embedding_layer_new(tg_ctx *ctx, const char *name, int64_t num_embeddings,
                                           int64_t embedding_dim, tg_dtype dtype);
/* Rows of the table for the numel(shape) indices: shape + (embedding_dim). */
tg_tensor *tg_embedding_layer_forward(tg_ctx *ctx, tg_embedding_layer *layer, int ndim, const int64_t *shape,
                                      const int64_t *indices);
bool tg_embedding_layer_params(tg_ctx *ctx, tg_embedding_layer *layer, tg_params *list);
void tg_embedding_layer_free(tg_ctx *ctx, tg_embedding_layer *layer);

/* A model: an ordered list of modules, for the parameter list, the summary
 * and freeing. The forward is the user's own C code calling the layers.
 * Start from tg_model m = {0}. The model owns the modules added to it. */
typedef struct tg_model {
    tg_module **items;
    int count;
    int capacity;
} tg_model;
/* Appends m; the model owns it from then on. It takes m in every case: if
 * m cannot be added (the context in error, a duplicate name, out of
 * memory) m is freed, so tg_model_add(ctx, &model,
 * TG_MODULE(tg_linear_new(...))) never leaks. NULL m is TG_ERR_NULL (when
 * the context is healthy); a module already in the model is TG_ERR_VALUE
 * and stays owned by it. */
bool tg_model_add(tg_ctx *ctx, tg_model *model, tg_module *m);
/* Appends every module's parameters to list, in the order added. */
bool tg_model_params(tg_ctx *ctx, const tg_model *model, tg_params *list);
/* Number of scalar parameters of every module. */
int64_t tg_model_numel(const tg_model *model);
/* The summary, one line per module and the total (snprintf semantics):
 *   (fc1): Linear(in_features=784, out_features=256, bias=true)  params=200960
 *   (norm1): RMSNorm(dim=256, eps=1e-06, affine=true, bias=false)  params=256
 *   total params=201216
 * An unnamed module shows its position, "(0): ...". */
size_t tg_model_format(char *buf, size_t size, const tg_model *model);
/* Prints the summary to out. */
void tg_model_print(FILE *out, const tg_model *model);
/* Frees every module and the list; the model is empty again. */
void tg_model_free(tg_ctx *ctx, tg_model *model);

#ifdef __cplusplus
}
#endif

#endif /* TAPEGRAD_H */

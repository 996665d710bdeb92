/* tapegrad/train.h: what a training loop shows and keeps (train/): loss
 * logs and gnuplot plots, progress lines, and the training state saved and
 * resumed in one call. */
#ifndef TAPEGRAD_TRAIN_H
#define TAPEGRAD_TRAIN_H

#include "tapegrad/io.h"    /* a training state is a checkpoint... */
#include "tapegrad/optim.h" /* ...of a model and its optimizers */

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================== */
/* Training logs: plots and progress                                        */
/* ======================================================================== */

/* Loss logs and gnuplot plots (train/plot.c, train/gnuplot.c). These are I/O
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
    const char *title;  /* NULL: the plot's name */
    const char *xlabel; /* NULL: the x column's name (close), "step" (overlay) */
    const char *ylabel; /* NULL: the one series' label, or "value" */
    bool logy;          /* log-scale y axis (values <= 0 are not drawn) */
    int width, height;  /* PNG size in pixels; 0 means 800 x 500 */
} tg_plot_style;

/* One curve: column `ycol` against column `xcol` (1-based, as gnuplot
 * counts) of a data file, e.g. several runs' NAME.dat overlaid. */
typedef struct tg_plot_series {
    const char *dat;   /* path of the data file (it must exist) */
    int xcol;          /* x column; 0 means 1 (the step) */
    int ycol;          /* y column, >= 1 */
    const char *label; /* legend entry (required) */
} tg_plot_series;

/* Starts DIR/NAME.dat (DIR and its parents are created if missing; an
 * existing file is replaced) with `ncols` columns (2..64) named `colnames`
 * (no whitespace); the first column is the x value, usually the step.
 * On error *out is NULL. */
TG_API tg_status tg_plot_open(tg_plot **out, const char *dir, const char *name, int ncols, const char *const *colnames);
/* Appends one row of ncols values (values[0] is the step) and flushes it,
 * so a crash loses at most the row being written. */
TG_API tg_status tg_plot_row(tg_plot *p, const double *values);
/* The data file's path ("DIR/NAME.dat"), valid until the plot is closed. */
TG_API const char *tg_plot_dat_path(const tg_plot *p);
/* Closes the data file and writes DIR/NAME.gp plotting every column after
 * the first against it, labelled with the column names (style may be NULL
 * for the defaults), then renders DIR/NAME.png. Always frees p. With no
 * rows logged: TG_ERR_STATE (the script is written, nothing is drawn). A
 * picture gnuplot left incomplete (it exits 0 when the disk fills up) is
 * removed: TG_ERR_IO, and msg says so (tg_plot_png_complete). */
TG_API tg_status tg_plot_close(tg_plot *p, const tg_plot_style *style, bool *rendered, char *msg, size_t msgsize);
/* Closes the data file without writing a script or a picture (e.g. one run
 * of several later drawn together with tg_plot_overlay). Always frees p. */
TG_API tg_status tg_plot_close_data(tg_plot *p);
/* Writes DIR/NAME.gp drawing the `nseries` curves (from any data files) in
 * one plot and renders DIR/NAME.png; DIR is created if missing. */
TG_API tg_status tg_plot_overlay(const char *dir, const char *name, const tg_plot_style *style,
                                 const tg_plot_series *series, int nseries, bool *rendered, char *msg, size_t msgsize);

/* Lower level, for hand-written scripts (heatmaps `with image`, points...). */
/* Writes the first lines of a PNG script to gp: the terminal (pngcairo when
 * the gnuplot that runs it has it, else png; width x height, 0 for 800 x
 * 500), plain-text labels, and `set output 'png_name'` (relative to the
 * script's directory). */
TG_API tg_status tg_plot_write_preamble(FILE *gp, const char *png_name, int width, int height);
/* Renders an existing script with gnuplot, run in the script's directory;
 * the script names its own output (see tg_plot_write_preamble), so check
 * it with tg_plot_png_complete before announcing it. */
TG_API tg_status tg_plot_render(const char *gp_path, bool *rendered, char *msg, size_t msgsize);
/* True when path is a regular file holding a whole PNG: the 8-byte PNG
 * signature first and the IEND chunk (the PNG's last, 12 bytes) last. A
 * picture cut short by a full disk ends elsewhere. */
TG_API bool tg_plot_png_complete(const char *path);
/* Looks for an executable `gnuplot` in PATH: TG_OK and its path in
 * path[size] (path may be NULL), or TG_ERR_IO when there is none. */
TG_API tg_status tg_gnuplot_find(char *path, size_t size);
/* Sets *has to whether the installed gnuplot offers terminal `term` (e.g.
 * "pngcairo"), from the list `gnuplot -e "set terminal"` prints.
 * TG_ERR_IO when gnuplot is missing or does not run. */
TG_API tg_status tg_gnuplot_has_terminal(const char *term, bool *has);

/* Progress output for training loops (train/progress.c): every `every` steps,
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
    FILE *out;             /* where lines go (NULL: nowhere) */
    int64_t total;         /* steps in the run; <= 0 if unknown (no bar, no ETA) */
    int64_t every;         /* print every `every` steps, >= 1 */
    tg_progress_mode mode; /* PLAIN, BAR or QUIET once initialized */
    int width;             /* BAR: columns the line may use (the terminal's, or 80) */
    /* internal */
    double (*clock_)(void *user); /* seconds; NULL: CLOCK_MONOTONIC */
    void *clock_user_;
    double t_init_, t_first_, t_last_;
    int64_t step_first_, step_last_, step_shown_;
    int64_t step_base_; /* steps done before this run (tg_progress_resume) */
    double loss_, lr_, gnorm_;
    int line_len_;
    bool seen_, line_open_;
} tg_progress;

/* Starts progress output for a run of total_steps steps (<= 0: unknown),
 * printed every `every` steps (values < 1 mean 1), in AUTO mode. */
TG_API void tg_progress_init(tg_progress *p, FILE *out, int64_t total_steps, int64_t every);
/* Forces a mode (AUTO decides again from isatty(fileno(out))). */
TG_API void tg_progress_set_mode(tg_progress *p, tg_progress_mode mode);
/* Reports that `step` steps are done (1..total) with this loss, learning rate
 * and gradient norm (NaN for lr or grad_norm: not shown). Prints when step is
 * a multiple of `every` or the last step. */
TG_API void tg_progress_update(tg_progress *p, int64_t step, double loss, double lr, double grad_norm);
/* Ends the output: redraws the last state if it was not shown, ends the bar
 * line, and prints "done: N steps in T s (R steps/s), final loss L". */
TG_API void tg_progress_finish(tg_progress *p);
/* Replaces the clock (seconds as a double; NULL: CLOCK_MONOTONIC), e.g. with
 * a fake one in tests, and restarts the timing from its current reading. */
TG_API void tg_progress_set_clock(tg_progress *p, double (*clock)(void *user), void *user);
/* Writes the line `update` would print for the current state into buf
 * (without \r or newline; BAR mode includes the bar). Returns buf. */
TG_API char *tg_progress_format(const tg_progress *p, char *buf, size_t size);
/* Says the run resumes after `step` steps done earlier (call it after init,
 * before the first update): rates, the ETA and the closing "done: N steps"
 * count only the steps this run takes. */
TG_API void tg_progress_resume(tg_progress *p, int64_t step);

/* ======================================================================== */
/* Training state: save and resume a run in one call (train/state.c)        */
/* ======================================================================== */

/* A training-state file is a checkpoint (tapegrad/io.h: safetensors, saved
 * atomically) holding all a run needs to continue bit for bit:
 *  - the parameters, by name;
 *  - the optimizer's state (tg_optim_state): moments or momentum buffers and
 *    "optim.step", the step count, which is also the schedule's position;
 *  - metadata: "tapegrad.train" (the format, "1"), the RNG state
 *    (tg_meta_set_rng), the optimizer's kind and hyper-parameters and its lr
 *    schedule as text ("tapegrad.optim", "tapegrad.schedule", e.g.
 *    "adamw lr=0.003 beta1=0.9 ..."), the context's compute dtype
 *    ("tapegrad.compute": "float32", or the autocast dtype "bfloat16",
 *    "float16") and the caller's own keys.
 * The training step is the optimizer's step count (tg_optim_steps after a
 * load); keep any other counter in meta.
 *
 * Loading checks before it changes anything: the file must hold exactly the
 * model's and the optimizer's tensors (names, dtypes, shapes), and the
 * optimizer must be made as when the run started (same kind,
 * hyper-parameters and schedule: compared with the file's text, and an
 * error shows both), as must the parts (their names: an error lists the
 * file's and the call's) and the context's compute dtype (autocast;
 * a file without the key, from before it was written, fits any). A file
 * whose tensors do not fit is explained by the first of these settings
 * that differs, else by the first tensor that does. To change the lr or
 * the schedule on resuming, change them after the load. A schedule given by a callback is compared by kind
 * only. On any error nothing changes: parameters, optimizer, RNG and meta
 * keep their values. Only regular files are read or replaced: a device or
 * a pipe may never end (/dev/zero), and a save renames its temporary file
 * over the path, which would replace a device node.
 * Errors name tg_train_save / tg_train_load and the problem (an error of
 * the checkpoint layer is quoted after it); statuses as in tapegrad/io.h. */

/* Saves params, optim's state (optim may be NULL: parameters only), the RNG
 * state and meta (may be NULL; its keys starting with "tapegrad." are
 * replaced by the library's) to path, atomically. */
TG_API tg_status tg_train_save(tg_ctx *ctx, const char *path, const tg_params *params, tg_optim *optim,
                               const tg_meta *meta);
/* Restores what tg_train_save wrote into params and optim (NULL if the file
 * has no optimizer state) and the context's RNG; meta (may be NULL)
 * receives the file's metadata, replacing its contents. */
TG_API tg_status tg_train_load(tg_ctx *ctx, const char *path, tg_params *params, tg_optim *optim, tg_meta *meta);

/* Several models in one file, e.g. the same network trained three ways.
 * Each part's tensors are stored under "NAME." + their names
 * ("rmsnorm.fc1.weight", "rmsnorm.optim.step"), its optimizer's text under
 * "tapegrad.optim.NAME" and "tapegrad.schedule.NAME"; a NULL or empty name
 * adds no prefix (what tg_train_save does with its one part). Names must be
 * unique, without '.', and the prefixed names shorter than 64 bytes. The
 * RNG state and meta are the file's, once. */
typedef struct tg_train_part {
    const char *name;  /* prefix of the part's names, or NULL */
    tg_params *params; /* the part's parameters (required) */
    tg_optim *optim;   /* its optimizer, or NULL */
    /* its float16 loss scaler, or NULL: its state ("scaler.scale",
     * "scaler.growth_tracker") is saved with the optimizer's, its settings
     * as "tapegrad.scaler[.NAME]" text, compared on load like the
     * optimizer's (the scale itself comes from the file) */
    tg_grad_scaler *scaler;
} tg_train_part;
TG_API tg_status tg_train_save_parts(tg_ctx *ctx, const char *path, const tg_train_part *parts, int nparts,
                                     const tg_meta *meta);
TG_API tg_status tg_train_load_parts(tg_ctx *ctx, const char *path, const tg_train_part *parts, int nparts,
                                     tg_meta *meta);

/* As tg_plot_open, for a run resumed after `step`: the rows of an existing
 * DIR/NAME.dat with the same columns whose step (first value) is at most
 * `step` are written again first, so the log and its plot continue the
 * earlier run's (rows past `step`, from a run that went further than the
 * checkpoint, are dropped). With step <= 0, or no such file, it is
 * tg_plot_open. */
TG_API tg_status tg_plot_open_resume(tg_plot **out, const char *dir, const char *name, int ncols,
                                     const char *const *colnames, int64_t step);

#ifdef __cplusplus
}
#endif

#endif /* TAPEGRAD_TRAIN_H */

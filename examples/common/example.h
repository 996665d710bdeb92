/* What spiral and charlm share: command-line flags and the training-loop
 * chores (error checks, checkpoints, logs, output files). Kept small so
 * each example still reads top to bottom on its own. xor.c, the README's
 * first program, does without it: it uses only the installed library. */
#ifndef TG_EXAMPLE_H
#define TG_EXAMPLE_H

#include <stdio.h>

#include "tapegrad.h"

/* The flags every example takes. */
typedef struct ex_args {
    int64_t steps;
    double lr;
    uint64_t seed;
    const char *out;          /* output folder for logs and plots */
    int threads;              /* 0: the default */
    int64_t every;            /* progress every N steps */
    const char *save;         /* training state to write at the end, or NULL */
    const char *resume;       /* training state to start from, or NULL */
    int64_t stop_after;       /* stop after this step (0: run all steps), e.g. to --save and --resume later */
    int64_t save_every;       /* also --save after every N steps (0: only at the end); EX_FLAG_SAVE_EVERY */
    const char *dist_timeout; /* a collective's deadline in seconds, or NULL; EX_FLAG_DIST_TIMEOUT (common/dist.h) */
    char split[32];           /* the order of each batch's gradient sum, kept by --save and compared on --resume:
                       "M" slices in a row, or "PxK" (ex_dist_set_split); "": not recorded */
} ex_args;

/* An example-specific flag: --name VALUE, or a switch --name (EX_BOOL: no
 * value; sets its bool target to true). */
typedef enum { EX_STR, EX_INT, EX_DBL, EX_BOOL } ex_kind;
typedef struct ex_flag {
    const char *name; /* without the leading dashes */
    ex_kind kind;
    void *target; /* const char **, int64_t *, double *, bool * */
    const char *help;
    const char *const *choices; /* for EX_STR: NULL-terminated allowed values, or NULL */
} ex_flag;

/* --save-every N, for an example that trains long enough to lose work:
 * put it in the example's extra flags, and call ex_save_due in its loop. */
#define EX_FLAG_SAVE_EVERY(args)                                                                                     \
    {                                                                                                                \
        "save-every", EX_INT, &(args).save_every,                                                                    \
            "also write --save after every N steps (atomically: a crash leaves the last whole save) (default 0: at " \
            "the end)",                                                                                              \
            NULL                                                                                                     \
    }

/* Parses argv into args (whose fields hold the defaults) and the extra
 * flags; numbers must be finite. Returns -1 to go on, or the exit status to
 * return at once: 0 after --help, 2 after printing the usage for an unknown
 * flag, a missing or a bad value. Remembers prog for the messages below. */
int ex_parse(ex_args *args, int argc, char **argv, const char *prog, const char *about, const ex_flag *extra,
             int nextra);

/* The last step to run: min(steps, stop_after) when stop_after is set. */
int64_t ex_last_step(const ex_args *args);

/* Prints the context's error to stderr and returns true when there is one. */
bool ex_failed(tg_ctx *ctx);

/* Applies --threads to the context; more threads than cores would only
 * slow the run down, so they are capped at the core count, with a note. */
void ex_setup(tg_ctx *ctx, const ex_args *args);

/* --resume: loads the training state (tg_train_load_parts) and sets *start
 * to the step it holds (0 without --resume). Fails (printed) when the file
 * does not fit, or when it is already at or past the last step to run:
 * there is nothing to train, and no numbers to report. */
bool ex_resume(tg_ctx *ctx, const ex_args *args, const tg_train_part *parts, int nparts, int64_t *start);
/* --save: writes the training state (tg_train_save_parts), at the end
 * (step 0: "saved the training state to FILE") or after step `step` of
 * --save-every (ex_saved_at's line). */
bool ex_save(tg_ctx *ctx, const ex_args *args, const tg_train_part *parts, int nparts, int64_t step);
/* After --resume: when the checkpoint's run split its batches otherwise
 * (theirs: its "dist.split" metadata, or NULL) than args->split, prints a
 * note that the sums now round otherwise, so the run goes on but will not
 * match an uninterrupted one bit for bit. */
void ex_note_split(const ex_args *args, const char *theirs);
/* True when step is one of --save-every's (not the last step to run,
 * whose save is the final one). */
bool ex_save_due(const ex_args *args, int64_t step);
/* Says a periodic save happened ("step N: saved the training state to FILE"). */
void ex_saved_at(const ex_args *args, int64_t step);
/* --save's folder exists and is a folder, so a run is refused at the start
 * instead of failing to save after the last step; false (printed) if not. */
bool ex_save_folder_ok(const ex_args *args);

/* A loss log in --out that continues the earlier rows after a resume
 * (tg_plot_open_resume); each failure is printed with errno's text. */
bool ex_log_open(tg_plot **log, const ex_args *args, const char *name, int ncols, const char *const *cols,
                 int64_t start);
bool ex_log_row(tg_plot **log, const double *values);
bool ex_log_close(tg_plot **log);

/* An output file of our own (regions, points, scripts): opened for
 * writing, and closed with every write checked (ferror, fclose), each
 * failure printed with errno's text. */
FILE *ex_create(const char *path);
bool ex_close(FILE *f, const char *path);

/* Reports a plot call (tg_plot_overlay, tg_plot_render, ...) that should
 * have drawn png_path, from its status, *rendered and message: true when
 * the picture is a whole PNG (tg_plot_png_complete; "wrote PATH"); false
 * with *failed set when gnuplot failed, wrote nothing or left the picture
 * incomplete (printed to stderr); false alone when gnuplot is not
 * installed (the message says how to render it later). */
bool ex_picture(tg_status st, bool rendered, const char *msg, const char *png_path, bool *failed);

/* OUT/loss.png: the per-step training loss of OUT/train.dat and the
 * validation loss of OUT/val.dat (what ex_log_open wrote as "train" and
 * "val") in one plot with `title`, y labelled "loss (nats)"; reported by
 * ex_picture. False when gnuplot failed or wrote nothing. */
bool ex_plot_train_val(const ex_args *args, const char *title);

/* The exit status: 1 when !ok, or when stdout could not be written (a full
 * disk, /dev/full: said on stderr); else 0. */
int ex_exit(bool ok);

#endif

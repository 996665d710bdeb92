/* What every example shares: command-line flags and the training-loop
 * chores (error check, progress). Kept small so each example still reads
 * top to bottom on its own. */
#ifndef TG_EXAMPLE_H
#define TG_EXAMPLE_H

#include "tapegrad.h"

/* The flags every example takes. */
typedef struct ex_args {
    int64_t steps;
    double lr;
    uint64_t seed;
    const char *out;    /* output folder for logs and plots */
    int threads;        /* 0: the default */
    int64_t every;      /* progress every N steps */
    const char *save;   /* checkpoint to write at the end, or NULL */
    const char *resume; /* checkpoint to start from, or NULL */
    int64_t stop_after; /* stop after this step (0: run all steps), e.g. to --save and --resume later */
} ex_args;

/* An example-specific flag: --name VALUE. */
typedef enum { EX_STR, EX_INT, EX_DBL } ex_kind;
typedef struct ex_flag {
    const char *name;   /* without the leading dashes */
    ex_kind kind;
    void *target;       /* const char **, int64_t *, double * */
    const char *help;
    const char *const *choices; /* for EX_STR: NULL-terminated allowed values, or NULL */
} ex_flag;

/* Parses argv into args (whose fields hold the defaults) and the extra
 * flags. Returns -1 to go on, or the exit status to return at once: 0 after
 * --help, 2 after printing the usage for a bad flag or value. */
int ex_parse(ex_args *args, int argc, char **argv, const char *prog, const char *about, const ex_flag *extra,
             int nextra);

/* The last step to run: min(steps, stop_after) when stop_after is set. */
int64_t ex_last_step(const ex_args *args);

/* Prints the context's error to stderr and returns true when there is one. */
bool ex_failed(tg_ctx *ctx);

/* Applies --threads to the context. */
void ex_setup(tg_ctx *ctx, const ex_args *args);

/* Saves params (+ optimizer state and RNG) to args->save when set; loads
 * them from args->resume when set. Return false on error (printed). */
bool ex_save(tg_ctx *ctx, const ex_args *args, tg_params *params, tg_optim *opt);
bool ex_resume(tg_ctx *ctx, const ex_args *args, tg_params *params, tg_optim *opt);

#endif

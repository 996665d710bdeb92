/* tapegrad-gradcheck: the gradient-check tool (internal to tools/).
 *
 * Its files stand in layers; a file calls its own layer and the ones
 * below, never one above, and no files call each other round in a cycle
 * (ctest gradcheck_tool_layering, tests/source/tool_layering.sh, reads the
 * line below and each file's " * Layer: " line):
 *
 * layers: main > command > analysis > report > target > base
 *
 *   main      main.c       loads plugins, parses, dispatches to a command
 *   command   list.c       `list`: every registered op, its spec and variants
 *             check.c      `check`: one table per op, a row per input
 *             modes.c      check --modes fwd,rev and --adjoint: forward mode
 *             sweep.c      `sweep`: error against the step h, log-log pictures
 *             jacobian.c   `jacobian`: both Jacobians side by side, heatmaps
 *             explain.c    `explain`: a norm's backward on the learner's numbers
 *             memory.c     `memory`: fused vs composed records, saved and arena bytes
 *   analysis  diagnose.c   the diagnosis under a failing check
 *             fast.c       --mode fast: the joint comparison named, localized
 *             projection.c jacobian's projection view of a norm without gamma
 *   report    report.c     what reports share: quantiles, the title and
 *                          settings lines, tallies, verdicts, the note on
 *                          the predicted error, the start of a CSV row
 *             json.c       the JSON document (--format json) and its pieces
 *             inputs.c     a target's inputs printed, as JSON, saved to files
 *             plot.c       heatmap pictures (data and gnuplot script)
 *             coverage.c   the values each input held and the op's regions
 *                          it reached (a table, JSON)
 *   target    target.c     what is checked: a registered op, or one with
 *                          an injected bug; options for tg_gradcheck; the check
 *             inject.c     the seeded bugs (known-wrong backward passes)
 *             inject_norm.c  more of them, written with the custom-op API
 *             inject_act.c   a softplus wrong in part of its domain
 *             plugin.c     --plugin PATH: a user's ops from a shared object
 *   base      args.c       the command line into gct_args; usage errors
 *             usage.c      the usage text
 *             table.c      aligned text tables, tones, shape and index text,
 *                          directories, files, the clock
 *
 * The tool prints to stdout (reports) and stderr (usage errors). Exit
 * status, one meaning each: 0 every check passed; 1 a wrong gradient was
 * found; 3 inconclusive -- nothing wrong was found, but some check could
 * not decide (all-zero, a failure within the check's own error, an error
 * while running, a report that could not be written); 2 bad usage (the
 * reason is printed). */
#ifndef TG_TOOLS_GRADCHECK_TOOL_H
#define TG_TOOLS_GRADCHECK_TOOL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "tapegrad.h"
#include "tapegrad/check.h"

enum { GCT_EXIT_PASS = 0, GCT_EXIT_WRONG = 1, GCT_EXIT_USAGE = 2, GCT_EXIT_INCONCLUSIVE = 3 };
/* An error while running (out of memory, a file not written) decides
 * nothing: inconclusive. */
#define GCT_EXIT_ERROR GCT_EXIT_INCONCLUSIVE

/* ---- the command line, parsed ---------------------------------------------- */

typedef enum gct_format { GCT_TEXT = 0, GCT_JSON, GCT_CSV } gct_format;

typedef enum gct_dist { GCT_DIST_NONE = 0, GCT_DIST_UNIFORM, GCT_DIST_NORMAL } gct_dist;

/* What the command line says about one input (by name, or "all": every
 * differentiable input): drawn from another distribution, scaled, offset,
 * or given explicitly; and DIRECTIONAL's direction for it. */
typedef struct gct_input_ctl {
    char name[32];
    gct_dist dist; /* --dist NAME=uniform:LO:HI | normal:MEAN:STD */
    double d1, d2;
    bool scale_set, offset_set;
    double scale, offset; /* --scale NAME=S, --offset NAME=O: x <- S x + O */
    double *values;       /* --values NAME=V,V,... | @FILE (heap) */
    int64_t n_values;
    double *v; /* --v NAME=V,V,... | @FILE: the direction (heap) */
    int64_t n_v;
} gct_input_ctl;

/* The bits of gct_args.modes. */
enum { GCT_MODE_REV = 1, GCT_MODE_FWD = 2 };

#define GCT_MAX_CTL 9
#define GCT_MAX_GRID 512

typedef struct gct_args {
    const char *command; /* "list", "check", "sweep", "jacobian" */
    const char *name;    /* op name, "all", or NULL */
    const char *shape;   /* --shape SPEC, or NULL */
    tg_dtype dtype;      /* --dtype (default TG_F64) */
    bool dtype_set;
    double h, atol, rtol;   /* NAN: not given */
    tg_gradcheck_mode mode; /* --mode (default FULL) */
    int order;              /* --order 1|2 (check; default 1): 2 gradgradchecks */
    tg_gradcheck_step step; /* --step (default AUTO; sweep: ABSOLUTE) */
    bool step_set;
    double step_floor;                  /* --step-floor (0: the default) */
    tg_gradcheck_atol_scale atol_scale; /* --atol-scale (default AUTO) */
    int schemes;                        /* --scheme: bit 0 central, bit 1 forward;
                                           0: check central, sweep both */
    uint64_t seed;                      /* --seed (default 0): inputs and probe */
    bool seed_set;                      /* --seed given */
    uint64_t input_seed, probe_seed;    /* --input-seed, --probe-seed */
    bool input_seed_set, probe_seed_set;
    int64_t n_seeds; /* --seeds: 0 a single run at seed, else seeds first.. */
    uint64_t seed_first;
    bool seeds_from_seed;              /* --seeds N: first is --seed */
    const char *inject;                /* --inject BUG, or NULL */
    const char *input;                 /* --input NAME (jacobian), or NULL */
    const char *out_dir;               /* --out DIR (default out/gradcheck) */
    bool quiet;                        /* -q: failures and the summary only */
    bool color;                        /* ANSI colours (a terminal, NO_COLOR unset) */
    gct_format format;                 /* --format text|json|csv */
    bool print_inputs;                 /* --print-inputs */
    const char *x, *gamma, *beta, *dy; /* explain: --x, --gamma, --beta, --dy lists */
    double eps;                        /* explain: --eps (NAN: not given) */
    const char *save_inputs;           /* --save-inputs DIR */
    bool elements;                     /* --elements: every comparison */
    double *r;                         /* --r V,V,...|@FILE (heap), n_r values */
    int64_t n_r;
    double grid[GCT_MAX_GRID]; /* --h-grid (sweep); n_grid 0: the default */
    int n_grid;
    gct_input_ctl ctl[GCT_MAX_CTL]; /* per-input controls */
    int n_ctl;
    int modes;    /* --modes fwd,rev: GCT_MODE_REV | GCT_MODE_FWD (modes.c); 0: rev */
    bool adjoint; /* --adjoint: the dot-product test (modes.c) */
    bool cover;   /* --cover: inputs across the op's regions (target.c) */
} gct_args;

/* The input and probe seeds of run `s` (a seed of --seeds, or --seed):
 * --input-seed and --probe-seed hold theirs fixed. */
uint64_t gct_input_seed(const gct_args *a, uint64_t s);
uint64_t gct_probe_seed(const gct_args *a, uint64_t s);
/* The seeds a command runs: first and count (1 without --seeds). */
uint64_t gct_first_seed(const gct_args *a);
int64_t gct_seed_count(const gct_args *a);

/* Parses argv into *a (args.c). Returns -1 when the command can run, else
 * the exit status (a usage error was printed, or help was asked for). */
int gct_parse_args(int argc, char **argv, gct_args *a);
/* Frees what gct_parse_args allocated in *a. */
void gct_args_free(gct_args *a);
/* Prints the usage text to `out` (usage.c). */
void gct_usage(FILE *out);
/* A usage error: "tapegrad-gradcheck: <message>", then a line pointing at
 * --help, both on stderr. Returns GCT_EXIT_USAGE. */
int gct_usage_error(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

/* Reads numbers separated by blanks or commas ('#' starts a comment) from
 * "V,V,..." or "@FILE" into a heap array (args.c). False (and a message naming opt)
 * when malformed or unreadable. */
bool gct_parse_values(const char *opt, const char *text, double **values, int64_t *n);

int gct_cmd_list(const gct_args *a);
int gct_cmd_check(const gct_args *a);
int gct_cmd_sweep(const gct_args *a);
int gct_cmd_jacobian(const gct_args *a);
int gct_cmd_explain(const gct_args *a);
int gct_cmd_memory(const gct_args *a);
/* Takes every "--plugin PATH" out of argv (adjusting *argc), loads the
 * shared objects and adds their ops to the registry (plugin.c). Returns -1
 * to go on, else the exit status (2: a plugin that does not load, with the
 * reason printed). */
int gct_load_plugins(int *argc, char **argv);

/* ---- seeded bugs (inject.c) -------------------------------------------- */

/* A known-wrong backward, swapped in for a registered op. The forward is
 * the op's own (the raw kernels), so the output is right and only the
 * gradient is wrong, as in a real bug. The function checked is the op on
 * the case's inputs ("rmsnorm(x; gamma, beta)"), then `then`. */
typedef struct gct_bug {
    const char *name;         /* "rmsnorm-sum", ... */
    const char *op;           /* the registered op whose inputs it takes */
    const char *what;         /* the bug, one line */
    const char *then;         /* what the function does after the op: "" or " + x" */
    const char *default_spec; /* a spec that exposes it */
    tg_gradcheck_fn forward;  /* user: the op's tg_op_case */
    const char *then_once;    /* non-NULL: the spec may add ";uses=1", and
                                  the op then ends with this (x used once) */
    double size;              /* non-zero: the bug's size, the default of the
                                  spec's ";size=S" (e.g. the relative error
                                  it puts into dx) */
} gct_bug;

/* The bugs of inject_norm.c (forwards of the catalogue's entries). */
tg_tensor *gct_bug_rmsnorm_r_const(tg_ctx *ctx, tg_tensor *const *in, void *user);
tg_tensor *gct_bug_rmsnorm_m_sum(tg_ctx *ctx, tg_tensor *const *in, void *user);
tg_tensor *gct_bug_rmsnorm_ignore_dy(tg_ctx *ctx, tg_tensor *const *in, void *user);
tg_tensor *gct_bug_linear_scale(tg_ctx *ctx, tg_tensor *const *in, void *user);
/* The bug of inject_act.c. */
tg_tensor *gct_bug_softplus_high(tg_ctx *ctx, tg_tensor *const *in, void *user);

int gct_bug_count(void);
const gct_bug *gct_bug_get(int i);
const gct_bug *gct_bug_find(const char *name);

/* check with --modes or --adjoint (modes.c): op NULL for all, else the op
 * and bug gct_cmd_check resolved. */
int gct_cmd_check_modes(const gct_args *a, const tg_op_info *op, const gct_bug *bug);

/* ---- what is checked (target.c) -------------------------- */

/* A registered op with inputs built from a spec, or the same inputs with an
 * injected bug's function. Do not copy a built target: the function's
 * `user` is &t->c. */
typedef struct gct_target {
    const tg_op_info *op;
    const gct_bug *bug;   /* NULL: the op as registered */
    tg_op_case c;         /* the inputs */
    tg_gradcheck_fn fn;   /* op->forward or bug->forward */
    const tg_tensor *out; /* fn's output on the inputs (its shape) */
    char function[160];   /* with a bug, the function checked:
                                  "rmsnorm(x; gamma) + x"; else "" */
    char label[160];      /* "rmsnorm" or "rmsnorm  with bug rmsnorm-sum" */
    /* each input's regions (tg_registry_regions; n 0 for inputs not
     * differentiable) */
    tg_regions regions[TG_GRADCHECK_MAX_INPUTS];
    /* what each checked input holds once made (gct_target_make), as the
     * reports print it */
    tg_coverage cov[TG_GRADCHECK_MAX_INPUTS];
} gct_target;

/* A context seeded with `seed`; NULL (and a message) when out of memory. */
tg_ctx *gct_ctx_new(uint64_t seed);
/* Finds NAME (and --inject) as the command line gives them: the op, and
 * the bug or NULL. On a usage error prints it and returns false. */
bool gct_resolve(const gct_args *a, const char *name, const tg_op_info **op, const gct_bug **bug);
/* The start of a command on one op: resolves NAME and --inject (a usage
 * error is printed) and makes the context. Returns -1 to go on, or the
 * exit status. */
int gct_begin(const gct_args *a, const tg_op_info **op, const gct_bug **bug, tg_ctx **ctx);
/* Builds t's inputs from spec (NULL: the bug's default spec, else the op's
 * first variant) in dtype from the context's RNG, and runs the function
 * once on them (no grad; the RNG left as it was). False and the context's
 * error on a spec the registry or the op itself refuses (a matmul of 2x3 by
 * 4x5, eps=-1). */
bool gct_target_build(tg_ctx *ctx, const tg_op_info *op, const gct_bug *bug, const char *spec, tg_dtype dtype,
                      gct_target *t);
/* gct_target_build with the command line's input seed for run `seed`,
 * with --cover its inputs redrawn across the op's regions (stratum: the
 * input seed), and its input controls (--dist, --scale, --offset,
 * --values) applied. */
bool gct_target_make(tg_ctx *ctx, const gct_args *a, const tg_op_info *op, const gct_bug *bug, const char *spec,
                     tg_dtype dtype, uint64_t seed, gct_target *t);
/* After gct_target_build failed: the exit status, with the message
 * printed -- a refused spec is a usage error (2), running out of memory an
 * error (3). */
int gct_build_failed(tg_ctx *ctx);
/* The gradcheck options for t from the command line: the values given,
 * else the op's own for t's dtype, else the dtype's defaults (as
 * tg_registry_opts); float32 allowed; the probe seed of run `seed`; the
 * case's length scales; --r and --v. */
tg_gradcheck_opts gct_target_opts(const gct_target *t, const gct_args *a, uint64_t seed);
/* Runs tg_gradcheck on t. */
bool gct_target_check(tg_ctx *ctx, gct_target *t, const tg_gradcheck_opts *o, tg_gradcheck_result *r);
/* check --order 2: t's gradgradcheck (target.c). */
bool gct_order2_check(tg_ctx *ctx, gct_target *t, const tg_gradcheck_opts *o, tg_gradcheck_result *r);
/* Number of differentiable elements of t's inputs. */
int64_t gct_target_numel(const gct_target *t);

/* ---- a target's inputs (inputs.c) ------------------------------------------ */

/* The inputs of t as text (--print-inputs): "x 4x8 = 1.2, -0.3, ..." per
 * input, full precision. */
void gct_print_inputs(FILE *out, const gct_target *t, int indent);
/* The inputs of t as a JSON object {"x": {"shape": [4, 8], "values": [...]}}. */
void gct_json_inputs(FILE *out, const gct_target *t);
/* Writes each input of t to DIR/NAME.txt (numbers, loadable by --values
 * NAME=@DIR/NAME.txt). False (and a message) when a file cannot be written. */
bool gct_save_inputs(const gct_target *t, const char *dir);

/* ---- what the inputs covered (coverage.c) ------------------------------------ */

/* One input of one case, over the seeds that ran it. */
typedef struct gct_cover_row {
    char spec[128], name[32];
    int64_t runs;
    tg_regions regions;
    tg_coverage cov;
} gct_cover_row;
typedef struct gct_cover {
    gct_cover_row *rows;
    int n, cap;
} gct_cover;
/* Joins the coverage of t's checked inputs into the rows of its spec. */
void gct_cover_add(gct_cover *cv, const gct_target *t);
/* The table "inputs seen": per row the range, the signs, the decades of
 * |x|, the regions seen of the op's and those not seen. */
void gct_cover_print(FILE *out, const gct_cover *cv, const gct_args *a, int indent);
void gct_cover_free(gct_cover *cv);
/* The row of (spec, input name); NULL when there is none. */
const gct_cover_row *gct_cover_find(const gct_cover *cv, const char *spec, const char *name);
/* One row as a JSON object (the schema's "coverage"; json.c, which also
 * writes one per checked input into every check of "checks"). */
void gct_json_cover_row(FILE *out, const gct_cover_row *r);

/* ---- pictures (plot.c) ------------------------------------------------------- */

/* One panel of a heatmap picture: an M x N matrix, its title, its colour
 * group (panels of a group share one symmetric colour range) and whether
 * the colour bar is in exponents (for differences near rounding). */
typedef struct gct_heatmap {
    const double *mat;
    const char *title;
    int group; /* 0 .. GCT_MAX_HEATMAPS - 1 */
    bool exp_format;
} gct_heatmap;

#define GCT_MAX_HEATMAPS 8

/* Writes n <= GCT_MAX_HEATMAPS matrices to DIR/NAME.dat (gnuplot `index`
 * 0 .. n-1) and DIR/NAME.gp drawing them side by side into NAME.png
 * (plot.c). False when a file cannot be written. */
bool gct_write_heatmaps(const char *dir, const char *name, const char *title, const char *xname, int64_t M, int64_t N,
                        int n, const gct_heatmap *maps);

/* ---- analysis: diagnose.c, projection.c ------------------------------------- */

/* The diagnosis of every input r found wrong (diagnose.c), as text for
 * the report: which input, where, what structure analytic - numeric
 * Jacobian has, the check's own error against the error found (the
 * numbers of the verdict) and the likely cause. Inputs that pass or are
 * inconclusive get none: there is nothing to diagnose. Writes at most size
 * bytes into buf; returns the length written. */
size_t gct_diagnose_case(tg_ctx *ctx, const gct_args *a, gct_target *t, const tg_gradcheck_opts *o,
                         const tg_gradcheck_result *r, char *buf, size_t size);
/* check --mode fast (fast.c): whether r is one comparison over several
 * inputs (result.joint); t's name for the entry holding it, every input
 * it covers ("x+gamma+beta", in the arena); and after a wrong one, the
 * same case checked in directional mode to say which input is wrong: its
 * line written into buf (at most size bytes, the length returned), and *o
 * and *r replaced by the directional check's, for the diagnosis. */
bool gct_fast_joint(const tg_gradcheck_result *r);
void gct_fast_name(tg_ctx *ctx, gct_target *t, const tg_gradcheck_result *r);
size_t gct_fast_localize(tg_ctx *ctx, gct_target *t, tg_gradcheck_opts *o, tg_gradcheck_result *r, char *buf,
                         size_t size);
/* jacobian's projection view (projection.c): for rmsnorm or layernorm
 * with affine=0 and input 0 (x), each row's eigenvalues, J^2 = r J, and
 * the parts of J (r I, - r xhat xhat^T / C, and - r 1 1^T / C for
 * LayerNorm) built from x alone, summed and compared with the analytic
 * ja and the numeric jn (M x N, the whole Jacobian of x). The parts are
 * drawn as heatmaps into DIR/NAME_parts.{dat,gp,png}, the report printed
 * when `print`. Returns -1 for other targets (nothing done), 0 done, or
 * GCT_EXIT_ERROR when a file cannot be written. */
int gct_projection_view(tg_ctx *ctx, const gct_target *t, int k, const double *ja, const double *jn, const char *dir,
                        const char *name, const char *title, bool print);

/* ---- reporting helpers (report.c) ------------------------------------------ */

/* The q-quantile (0..1) of v[0..n-1] (sorted in place; NaN sorts last). */
double gct_quantile(double *v, int64_t n, double q);
/* A JSON string (escaped, quoted; json.c). */
void gct_json_str(FILE *out, const char *s);
/* A JSON number (null when not finite; json.c). */
void gct_json_num(FILE *out, double v);
/* "op,bug,spec,dtype,input_seed,probe_seed," for a CSV row of t (the bug
 * empty when none); commas in the spec become ';'. */
void gct_csv_prefix(char *buf, size_t size, const gct_target *t, uint64_t input_seed, uint64_t probe_seed);
/* The title of a report: "NAME  summary", or with a bug, its name, what
 * is wrong and the function checked. */
void gct_put_title(const gct_args *a, const tg_op_info *op, const gct_bug *bug, const char *function);
/* The settings line under a report's title: dtype, mode, scheme, step, the
 * pass rule and the seeds. */
void gct_put_settings(const gct_args *a, const tg_gradcheck_result *r);
/* One line under the settings: where h, atol and rtol came from -- given
 * on the command line, the op's own entry for dtype in the registry, or
 * the dtype's default -- so a learner sees the op's own values at work. */
void gct_put_sources(const gct_args *a, const tg_op_info *op, tg_dtype dtype, const char *indent);
/* ---- verdicts ---------------------------------------------------------------- */

/* How a table cell is drawn when colours are on. */
typedef enum gct_tone { GCT_PLAIN = 0, GCT_GOOD, GCT_BAD, GCT_DIM, GCT_BOLD } gct_tone;

/* Verdicts counted over a run's inputs (or rows), and the errors. */
typedef struct gct_tally {
    int64_t pass, wrong, inconclusive, errors;
} gct_tally;

void gct_tally_add(gct_tally *t, tg_gradcheck_verdict v);
/* The exit status: 1 when anything is wrong, else 3 when anything is
 * inconclusive or an error, else 0. */
int gct_tally_status(const gct_tally *t);
/* The exit status of one verdict. */
int gct_verdict_status(tg_gradcheck_verdict v);
/* "all pass", or "2 WRONG, 1 inconclusive, 1 error, 5 pass" (unit after
 * the first count: "2 inputs WRONG"). */
void gct_put_tally(const gct_tally *t, const char *unit, bool color);
/* A verdict in a table cell: "pass", "WRONG", "inconclusive". */
const char *gct_verdict_word(tg_gradcheck_verdict v);
gct_tone gct_verdict_tone(tg_gradcheck_verdict v);
/* The verdict of several: wrong beats inconclusive beats pass. */
tg_gradcheck_verdict gct_verdict_join(tg_gradcheck_verdict a, tg_gradcheck_verdict b);

/* One input that did not pass, for the note under a report. */
typedef struct gct_note {
    char name[400];
    tg_gradcheck_verdict verdict;
    tg_gradcheck_reason reason;
    double excess; /* its error over the check's own predicted error */
} gct_note;

/* The note on inputs that did not pass, one line each in the words of the
 * verdict: wrong (how far beyond the check's own error), or why the check
 * could not decide. */
void gct_put_notes(const gct_note *notes, int n, bool f32);

/* ---- the JSON document (json.c) --------------------------------------------- */

/* Its schema version: a field renamed, removed or changing meaning makes
 * a new one; a field added does not. */
#define GCT_JSON_SCHEMA 1

typedef struct gct_json {
    int n_checks;     /* checks written */
    int n_batches;    /* batches written into `batches` */
    FILE *batches;    /* held until the checks are done */
    char *batch_text; /* its text */
    size_t batch_len;
} gct_json;

/* Opens the document on stdout: schema, tool, version, command, settings,
 * seeds, and the "checks" array. */
void gct_json_open(gct_json *j, const gct_args *a);
/* Opens one check of "checks": the case, its seeds, order and mode; the
 * caller adds the result (gct_json_check_result) and any extra fields,
 * then "}". */
void gct_json_check_open(gct_json *j, const gct_args *a, const gct_target *t, uint64_t seed, const char *mode);
/* ,"error":null,"result":{...}, or with r NULL ,"error":"ctx's message","result":null */
void gct_json_check_result(const gct_target *t, tg_ctx *ctx, const tg_gradcheck_result *r);
/* Closes "checks" and writes "batches" from j->batches. */
void gct_json_checks_close(gct_json *j);
/* The "summary" (verdict, exit status, counts, seconds), and the end. */
void gct_json_summary(const gct_args *a, const gct_tally *inputs, const gct_tally *runs, int ops, int cases,
                      double secs, double check_secs);

/* ---- small helpers (table.c) ------------------------------- */

#define GCT_MAX_COLS 16
#define GCT_CELL 96

typedef struct gct_cell {
    char text[GCT_CELL];
    gct_tone tone;
} gct_cell;

/* A table of text cells printed with aligned columns: headers, a rule,
 * rows; 'l' or 'r' alignment per column. */
typedef struct gct_table {
    int ncols;
    char head[GCT_MAX_COLS][GCT_CELL];
    char align[GCT_MAX_COLS];
    gct_cell *cells; /* nrows * ncols */
    int nrows, cap;
    int *rule_before; /* nrows flags: a blank line before the row */
} gct_table;

void gct_table_init(gct_table *t, const char *align, ...); /* the headers, ncols = strlen(align) */
/* Appends a row of empty cells; NULL when out of memory. */
gct_cell *gct_table_row(gct_table *t);
/* Marks the last row as starting a new group (a blank line before it). */
void gct_table_group(gct_table *t);
void gct_cell_set(gct_cell *c, gct_tone tone, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
void gct_table_print(FILE *out, const gct_table *t, int indent, bool color);
void gct_table_free(gct_table *t);

/* Text in a tone (ANSI escapes when color). */
void gct_puts_tone(FILE *out, const char *s, gct_tone tone, bool color);
/* "(4, 8)" as "4x8", "()" for 0-d. */
char *gct_shape_text(char *buf, size_t size, int ndim, const int64_t *shape);
/* The multi-index of flat index i in a tensor of that shape: "[2,5]". */
char *gct_index_text(char *buf, size_t size, int ndim, const int64_t *shape, int64_t i);
/* Makes directory `dir` and its parents (like mkdir -p). False on error,
 * with a message on stderr. */
bool gct_mkdir_p(const char *dir);
/* Closes f: false when a write to it or the close failed. */
bool gct_fclose(FILE *f);
/* Seconds on a monotonic clock. */
double gct_now(void);

#endif

/* Flag parsing and small chores shared by the examples. */
#define _POSIX_C_SOURCE 200809L

#include "example.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *prog = "example";

static void usage(FILE *f, const ex_args *d, const char *about, const ex_flag *extra, int nextra) {
    fprintf(f, "usage: %s [flags]\n%s\n\nflags:\n", prog, about);
    fprintf(f, "  --steps N       training steps (default %lld)\n", (long long)d->steps);
    fprintf(f, "  --lr X          learning rate (default %g)\n", d->lr);
    fprintf(f, "  --seed N        RNG seed: same seed, same run (default %llu)\n", (unsigned long long)d->seed);
    fprintf(f, "  --out DIR       where logs and plots go (default %s)\n", d->out);
    fprintf(f, "  --threads N     kernel threads, at most the cores; results do not depend on it (default: all)\n");
    fprintf(f, "  --every N       progress every N steps (default %lld)\n", (long long)d->every);
    fprintf(f, "  --save FILE     write the training state (safetensors) at the end\n");
    fprintf(f, "  --resume FILE   continue from a state written by --save (same flags otherwise)\n");
    fprintf(f, "  --stop-after K  stop after step K of the --steps run (then --save, and --resume later)\n");
    for (int i = 0; i < nextra; i++) {
        fprintf(f, "  --%-13s %s", extra[i].name, extra[i].help);
        if (extra[i].choices) {
            fprintf(f, " (");
            for (int c = 0; extra[i].choices[c]; c++) fprintf(f, "%s%s", c ? "|" : "", extra[i].choices[c]);
            fprintf(f, ")");
        }
        fprintf(f, "\n");
    }
    fprintf(f, "  --help          this text\n");
}

static bool parse_int(const char *s, int64_t lo, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo) return false;
    *out = v;
    return true;
}

/* A finite number: "inf" and "nan" would only fail later, less clearly. */
static bool parse_dbl(const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v)) return false;
    *out = v;
    return true;
}

static const char *const common_flags[] = {"steps", "lr",   "seed",   "out",       "threads",
                                           "every", "save", "resume", "stop-after"};

static bool known_flag(const char *name, const ex_flag *extra, int nextra) {
    for (size_t k = 0; k < sizeof common_flags / sizeof *common_flags; k++)
        if (strcmp(name, common_flags[k]) == 0) return true;
    for (int k = 0; k < nextra; k++)
        if (strcmp(name, extra[k].name) == 0) return true;
    return false;
}

/* The switch (EX_BOOL) named name, or NULL. */
static const ex_flag *switch_flag(const char *name, const ex_flag *extra, int nextra) {
    for (int k = 0; k < nextra; k++)
        if (extra[k].kind == EX_BOOL && strcmp(name, extra[k].name) == 0) return &extra[k];
    return NULL;
}

int ex_parse(ex_args *a, int argc, char **argv, const char *name_of_prog, const char *about, const ex_flag *extra,
             int nextra) {
    prog = name_of_prog;
    ex_args defaults = *a;
    for (int i = 1; i < argc; i++) {
        const char *flag = argv[i];
        if (strcmp(flag, "--help") == 0 || strcmp(flag, "-h") == 0) {
            usage(stdout, &defaults, about, extra, nextra);
            return 0;
        }
        const ex_flag *sw = strncmp(flag, "--", 2) == 0 ? switch_flag(flag + 2, extra, nextra) : NULL;
        if (sw) {
            *(bool *)sw->target = true;
            continue;
        }
        const char *problem = strncmp(flag, "--", 2) != 0            ? "unexpected argument"
                              : !known_flag(flag + 2, extra, nextra) ? "unknown flag"
                              : i + 1 >= argc                        ? "missing value for"
                                                                     : NULL;
        if (problem) {
            fprintf(stderr, "%s: %s '%s'\n\n", prog, problem, flag);
            usage(stderr, &defaults, about, extra, nextra);
            return 2;
        }
        const char *name = flag + 2, *val = argv[++i];
        bool ok = true;
        int64_t n = 0;
        if (strcmp(name, "steps") == 0) ok = parse_int(val, 1, &a->steps);
        else if (strcmp(name, "every") == 0) ok = parse_int(val, 1, &a->every);
        else if (strcmp(name, "stop-after") == 0) ok = parse_int(val, 1, &a->stop_after);
        else if (strcmp(name, "seed") == 0) {
            ok = parse_int(val, 0, &n);
            a->seed = (uint64_t)n;
        } else if (strcmp(name, "threads") == 0) {
            ok = parse_int(val, 1, &n) && n <= 1024;
            a->threads = (int)n;
        } else if (strcmp(name, "lr") == 0) ok = parse_dbl(val, &a->lr) && a->lr > 0;
        else if (strcmp(name, "out") == 0) a->out = val;
        else if (strcmp(name, "save") == 0) a->save = val;
        else if (strcmp(name, "resume") == 0) a->resume = val;
        for (int k = 0; k < nextra; k++) {
            if (strcmp(name, extra[k].name) != 0) continue;
            if (extra[k].kind == EX_INT) ok = parse_int(val, 0, (int64_t *)extra[k].target);
            else if (extra[k].kind == EX_DBL) ok = parse_dbl(val, (double *)extra[k].target);
            else {
                ok = extra[k].choices == NULL;
                for (int c = 0; extra[k].choices && extra[k].choices[c]; c++)
                    if (strcmp(val, extra[k].choices[c]) == 0) ok = true;
                if (ok) *(const char **)extra[k].target = val;
            }
        }
        if (!ok) {
            fprintf(stderr, "%s: bad value for '%s': %s\n\n", prog, flag, val);
            usage(stderr, &defaults, about, extra, nextra);
            return 2;
        }
    }
    return -1;
}

int64_t ex_last_step(const ex_args *args) {
    return args->stop_after > 0 && args->stop_after < args->steps ? args->stop_after : args->steps;
}

bool ex_failed(tg_ctx *ctx) {
    if (tg_ok(ctx)) return false;
    fprintf(stderr, "%s: error: %s\n", prog, tg_error_message(ctx));
    return true;
}

void ex_setup(tg_ctx *ctx, const ex_args *args) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int threads = args->threads;
    if (cores > 0 && threads > cores) {
        fprintf(stderr,
                "%s: note: --threads %d is more than the %ld cores here, which only slows the kernels "
                "down; using %ld\n",
                prog, threads, cores, cores);
        threads = (int)cores;
    }
    tg_set_threads(ctx, threads);
}

bool ex_resume(tg_ctx *ctx, const ex_args *args, const tg_train_part *parts, int nparts, int64_t *start) {
    *start = 0;
    if (!args->resume) return true;
    tg_meta meta = {0};
    if (tg_train_load_parts(ctx, args->resume, parts, nparts, &meta) != TG_OK) {
        tg_meta_free(&meta);
        ex_failed(ctx);
        return false;
    }
    ex_note_split(args, tg_meta_get(&meta, "dist.split"));
    tg_meta_free(&meta);
    *start = parts[0].optim ? tg_optim_steps(parts[0].optim) : 0;
    if (*start >= ex_last_step(args)) {
        fprintf(stderr,
                "%s: %s holds the state after step %lld, and this run would stop at step %lld: nothing to "
                "train (pass a larger --steps to go on)\n",
                prog, args->resume, (long long)*start, (long long)ex_last_step(args));
        return false;
    }
    printf("resumed from %s at step %lld\n", args->resume, (long long)*start);
    return true;
}

bool ex_save(tg_ctx *ctx, const ex_args *args, const tg_train_part *parts, int nparts, int64_t step) {
    if (!args->save) return true;
    tg_meta meta = {0};
    bool ok = (!args->split[0] || tg_meta_set(ctx, &meta, "dist.split", args->split)) &&
              tg_train_save_parts(ctx, args->save, parts, nparts, &meta) == TG_OK;
    tg_meta_free(&meta);
    if (!ok) {
        ex_failed(ctx);
        return false;
    }
    if (step) ex_saved_at(args, step);
    else printf("saved the training state to %s\n", args->save);
    return true;
}

void ex_note_split(const ex_args *args, const char *theirs) {
    if (!theirs || !args->split[0] || strcmp(theirs, args->split) == 0) return;
    printf("%s: note: %s was trained with each batch's gradient summed over %s slices, this run sums it over %s "
           "(processes x micro-batches): the sums round otherwise from here on, so the run goes on as the same "
           "training but will not match an uninterrupted run bit for bit\n",
           prog, args->resume, theirs, args->split);
}

bool ex_save_due(const ex_args *args, int64_t step) {
    return args->save && args->save_every > 0 && step % args->save_every == 0 && step < ex_last_step(args);
}

void ex_saved_at(const ex_args *args, int64_t step) {
    printf("step %lld: saved the training state to %s\n", (long long)step, args->save);
    fflush(stdout);
}

bool ex_save_folder_ok(const ex_args *args) {
    if (!args->save) return true;
    const char *slash = strrchr(args->save, '/');
    if (!slash) return true; /* the current folder */
    size_t n = slash == args->save ? 1 : (size_t)(slash - args->save);
    char *dir = strndup(args->save, n);
    struct stat sb;
    errno = 0;
    bool ok = dir && stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode) && access(dir, W_OK) == 0;
    if (!ok)
        fprintf(stderr, "%s: --save %s: cannot write into the folder %s: %s\n", prog, args->save, dir ? dir : "",
                !dir    ? "out of memory"
                : errno ? strerror(errno)
                        : "not a folder");
    free(dir);
    return ok;
}

/* "DIR/NAME.dat: No space left on device", or the status's name when the
 * call failed before any system call (errno was left 0). */
static void log_failed(const char *dir, const char *name, tg_status st, int err) {
    fprintf(stderr, "%s: cannot write %s/%s.dat: %s\n", prog, dir, name,
            err                  ? strerror(err)
            : st == TG_ERR_VALUE ? "the folder's name holds a quote or a control character, which the plot "
                                   "scripts cannot carry"
                                 : tg_status_name(st));
}

bool ex_log_open(tg_plot **log, const ex_args *args, const char *name, int ncols, const char *const *cols,
                 int64_t start) {
    errno = 0;
    tg_status st = tg_plot_open_resume(log, args->out, name, ncols, cols, start);
    if (st == TG_OK) return true;
    log_failed(args->out, name, st, errno);
    return false;
}

bool ex_log_row(tg_plot **log, const double *values) {
    errno = 0;
    tg_status st = tg_plot_row(*log, values);
    if (st == TG_OK) return true;
    fprintf(stderr, "%s: cannot write %s: %s\n", prog, tg_plot_dat_path(*log),
            errno ? strerror(errno) : tg_status_name(st));
    ex_log_close(log);
    return false;
}

bool ex_log_close(tg_plot **log) {
    if (!*log) return true;
    char *path = strdup(tg_plot_dat_path(*log));
    errno = 0;
    tg_status st = tg_plot_close_data(*log);
    *log = NULL;
    if (st != TG_OK)
        fprintf(stderr, "%s: cannot write %s: %s\n", prog, path ? path : "the log",
                errno ? strerror(errno) : tg_status_name(st));
    free(path);
    return st == TG_OK;
}

FILE *ex_create(const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) fprintf(stderr, "%s: cannot write %s: %s\n", prog, path, strerror(errno));
    return f;
}

bool ex_close(FILE *f, const char *path) {
    errno = 0;
    bool ok = fflush(f) == 0 && !ferror(f);
    int err = errno;
    if (fclose(f) != 0 && ok) ok = false, err = errno;
    if (!ok) fprintf(stderr, "%s: cannot write %s: %s\n", prog, path, err ? strerror(err) : "write error");
    return ok;
}

bool ex_picture(tg_status st, bool rendered, const char *msg, const char *png_path, bool *failed) {
    /* gnuplot exits 0 after a write failed (a full disk): only a whole PNG is a picture */
    bool exists = tg_plot_png_complete(png_path);
    if (st != TG_OK || (rendered && !exists)) {
        fprintf(stderr, "%s: %s%s\n", prog, st != TG_OK ? msg : "gnuplot ran but wrote no complete PNG ",
                st != TG_OK ? "" : png_path);
        *failed = true;
        return false;
    }
    if (exists) printf("wrote %s\n", png_path);
    else printf("%s\n", msg);
    return exists;
}

bool ex_plot_train_val(const ex_args *args, const char *title) {
    char tdat[512], vdat[512], png[512], msg[512];
    snprintf(tdat, sizeof tdat, "%s/train.dat", args->out);
    snprintf(vdat, sizeof vdat, "%s/val.dat", args->out);
    snprintf(png, sizeof png, "%s/loss.png", args->out);
    tg_plot_series series[2] = {{tdat, 1, 2, "train (one batch)"}, {vdat, 1, 2, "validation"}};
    tg_plot_style style = {.title = title, .xlabel = "step", .ylabel = "loss (nats)"};
    bool rendered = false, failed = false;
    tg_status st = tg_plot_overlay(args->out, "loss", &style, series, 2, &rendered, msg, sizeof msg);
    ex_picture(st, rendered, msg, png, &failed);
    return !failed;
}

int ex_exit(bool ok) {
    errno = 0;
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "%s: cannot write the output: %s\n", prog, errno ? strerror(errno) : "write error");
        return 1;
    }
    return ok ? 0 : 1;
}

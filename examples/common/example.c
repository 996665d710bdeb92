/* Flag parsing and small chores shared by the examples. */
#include "example.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f, const ex_args *d, const char *prog, const char *about, const ex_flag *extra,
                  int nextra) {
    fprintf(f, "usage: %s [flags]\n%s\n\nflags:\n", prog, about);
    fprintf(f, "  --steps N       training steps (default %lld)\n", (long long)d->steps);
    fprintf(f, "  --lr X          learning rate (default %g)\n", d->lr);
    fprintf(f, "  --seed N        RNG seed: same seed, same run (default %llu)\n", (unsigned long long)d->seed);
    fprintf(f, "  --out DIR       where logs and plots go (default %s)\n", d->out);
    fprintf(f, "  --threads N     kernel threads, results do not depend on it (default: all cores)\n");
    fprintf(f, "  --every N       progress every N steps (default %lld)\n", (long long)d->every);
    fprintf(f, "  --save FILE     write a checkpoint (safetensors) at the end\n");
    fprintf(f, "  --resume FILE   start from a checkpoint written by --save\n");
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

static bool parse_dbl(const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || v != v) return false;
    *out = v;
    return true;
}

int ex_parse(ex_args *a, int argc, char **argv, const char *prog, const char *about, const ex_flag *extra,
             int nextra) {
    ex_args defaults = *a;
    for (int i = 1; i < argc; i++) {
        const char *flag = argv[i];
        if (strcmp(flag, "--help") == 0 || strcmp(flag, "-h") == 0) {
            usage(stdout, &defaults, prog, about, extra, nextra);
            return 0;
        }
        if (strncmp(flag, "--", 2) != 0 || i + 1 >= argc) {
            fprintf(stderr, "%s: %s '%s'\n\n", prog, strncmp(flag, "--", 2) ? "unexpected argument" : "missing value for",
                    flag);
            usage(stderr, &defaults, prog, about, extra, nextra);
            return 2;
        }
        const char *name = flag + 2, *val = argv[++i];
        bool ok = true, known = true;
        int64_t n;
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
        else {
            known = false;
            for (int k = 0; k < nextra; k++) {
                if (strcmp(name, extra[k].name) != 0) continue;
                known = true;
                if (extra[k].kind == EX_INT) ok = parse_int(val, 0, (int64_t *)extra[k].target);
                else if (extra[k].kind == EX_DBL) ok = parse_dbl(val, (double *)extra[k].target);
                else {
                    ok = extra[k].choices == NULL;
                    for (int c = 0; extra[k].choices && extra[k].choices[c]; c++)
                        if (strcmp(val, extra[k].choices[c]) == 0) ok = true;
                    if (ok) *(const char **)extra[k].target = val;
                }
            }
        }
        if (!known || !ok) {
            fprintf(stderr, "%s: %s '%s'%s%s\n\n", prog, known ? "bad value for" : "unknown flag", flag,
                    known ? ": " : "", known ? val : "");
            usage(stderr, &defaults, prog, about, extra, nextra);
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
    fprintf(stderr, "error: %s\n", tg_error_message(ctx));
    return true;
}

void ex_setup(tg_ctx *ctx, const ex_args *args) { tg_set_threads(ctx, args->threads); }

/* A checkpoint holds the parameters, the optimizer's state (its step count
 * is the schedule's position) and the RNG state, so a resumed run continues
 * bit for bit where the saved one stopped. */
bool ex_save(tg_ctx *ctx, const ex_args *args, tg_params *params, tg_optim *opt) {
    if (!args->save) return true;
    tg_meta meta = {0};
    tg_meta_set_rng(ctx, &meta);
    tg_ckpt_save(ctx, args->save, params, opt ? tg_optim_state(opt) : NULL, &meta);
    tg_meta_free(&meta);
    if (ex_failed(ctx)) return false;
    printf("saved checkpoint %s\n", args->save);
    return true;
}

bool ex_resume(tg_ctx *ctx, const ex_args *args, tg_params *params, tg_optim *opt) {
    if (!args->resume) return true;
    tg_meta meta = {0};
    tg_ckpt_load(ctx, args->resume, params, opt ? tg_optim_state(opt) : NULL, &meta);
    if (tg_ok(ctx)) tg_meta_get_rng(ctx, &meta);
    if (tg_ok(ctx) && opt) tg_optim_sync_state(ctx, opt);
    tg_meta_free(&meta);
    if (ex_failed(ctx)) return false;
    printf("resumed from %s at step %lld\n", args->resume, (long long)(opt ? tg_optim_steps(opt) : 0));
    return true;
}

/* tapegrad-gradcheck: gradient-check experiments on every registered op and
 * layer, one command each (docs/gradcheck.md).
 *
 *   tapegrad-gradcheck list
 *   tapegrad-gradcheck check NAME|all [--shape SPEC] [--dtype f32|f64] ...
 *   tapegrad-gradcheck sweep NAME [--shape SPEC] [--out DIR]
 *   tapegrad-gradcheck jacobian NAME --shape SMALL [--out DIR]
 *   ... --inject BUG swaps in a known-wrong backward (see `list`)
 *
 * This file parses the command line and dispatches; the commands live in
 * the other files of tools/gradcheck/ (see tool.h). */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/gradcheck/tool.h"

void gct_usage(FILE *out) {
    fputs("usage: tapegrad-gradcheck COMMAND [NAME] [OPTIONS]\n"
          "\n"
          "Checks the hand-written backward of tapegrad's registered ops and layers\n"
          "against finite differences.\n"
          "\n"
          "commands:\n"
          "  list [NAME]       every registered op and layer (or NAME's entry): spec, options,\n"
          "                    shape variants, inputs and how they are drawn; and the seeded bugs\n"
          "  check NAME|all    analytic gradient vs central differences, one table per op\n"
          "                    with a row per input (every built-in variant unless --shape)\n"
          "  sweep NAME        gradient error as h goes from 1e-1 to 1e-12, forward and central\n"
          "                    differences, float32 and float64: a table, DIR/sweep_NAME.dat and\n"
          "                    a log-log DIR/sweep_NAME.png with the best h of each curve marked\n"
          "  jacobian NAME     analytic and numeric Jacobians side by side (use a small\n"
          "                    --shape), and DIR/jacobian_NAME_INPUT.png heatmaps of both and\n"
          "                    of their difference\n"
          "  memory rmsnorm|layernorm\n"
          "                    fused vs composed: records, saved bytes (all, and beyond x and gamma),\n"
          "                    arena bytes; default --shape 4096x768 --dtype f32 (the guide's table)\n"
          "  explain rmsnorm|layernorm\n"
          "                    the backward on your numbers (--x, --gamma, --beta, --dy, --eps),\n"
          "                    every quantity of docs/normalization-gradients.md, the invariants\n"
          "                    and dx against central differences\n"
          "  help              this text\n"
          "\n"
          "options:\n"
          "  --shape SPEC      inputs, e.g. 4x8 or '2x3x4;norm=2;bias=1' (see list); default:\n"
          "                    check every built-in variant, sweep/jacobian the first\n"
          "  --dtype f32|f64   check, jacobian (default f64; sweep runs both)\n"
          "  --h H             step of the differences (> 0)\n"
          "  --atol A          an element passes when |analytic - numeric| <= atol + rtol |numeric|\n"
          "  --rtol R          (>= 0; atol 0: a purely relative test)\n"
          "                    defaults: the op's own where `list` shows them, else by dtype:\n"
          "                    f64 h 1e-6, atol 1e-5, rtol 1e-3; f32 h 1e-3, atol 1e-3, rtol 1e-2\n"
          "  --mode full|directional\n"
          "                    every element (default), or one random direction per input\n"
          "  --seed N          seeds the inputs, the output weighting and directions (default 0)\n"
          "  --inject BUG      swap in a known-wrong backward (check, sweep, jacobian); NAME may\n"
          "                    then be left out: rmsnorm-sum, rmsnorm-no-eps, layernorm-no-mean,\n"
          "                    overwrite, rmsnorm-r-const, rmsnorm-m-sum, layernorm-unbiased\n"
          "  --input NAME      jacobian: only this input (x, gamma, ...; default all)\n"
          "  --out DIR         sweep, jacobian: where .dat, .gp and .png go (default out/gradcheck)\n"
          "  -q, --quiet       check: print only failing rows and the summary\n"
          "  --x, --gamma, --beta, --dy LIST, --eps E\n"
          "                    explain: the numbers (comma-separated; --shape NxC splits --x into\n"
          "                    rows; gamma 1, beta 0, dy 1 and eps 1e-5 unless given)\n"
          "  --print-inputs    check, jacobian: print the inputs to full precision (for explain)\n"
          "  --plugin PATH     every command: load a shared object with your own ops\n"
          "                    (TG_GRADCHECK_PLUGIN, tapegrad/check.h); may repeat\n"
          "\n"
          "exit status: 0 every check passes, 1 a check fails, 2 bad usage,\n"
          "             3 an error while running (e.g. a file could not be written)\n"
          "\n"
          "examples:\n"
          "  tapegrad-gradcheck check all\n"
          "  tapegrad-gradcheck check layernorm --shape '2x3x4;norm=2' --dtype f32\n"
          "  tapegrad-gradcheck check --inject overwrite\n"
          "  tapegrad-gradcheck sweep rmsnorm --out out/gradcheck\n"
          "  tapegrad-gradcheck jacobian rmsnorm --shape 1x5\n"
          "  tapegrad-gradcheck explain rmsnorm --x 1,2,2 --gamma 1,0.5,2 --dy 1,-1,-0.5 --eps 0\n",
          out);
}

int gct_usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("tapegrad-gradcheck: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs("\n\n", stderr);
    va_end(ap);
    gct_usage(stderr);
    return GCT_EXIT_USAGE;
}

/* A number option: finite and > 0 (the step), or >= 0 (a tolerance: 0 is
 * used as given, see gct_target_opts). */
static bool parse_number(const char *opt, const char *s, bool zero_ok, double *out) {
    char *e;
    errno = 0;
    double v = strtod(s, &e);
    if (e == s || *e || errno || !isfinite(v) || !(zero_ok ? v >= 0 : v > 0)) {
        gct_usage_error("%s wants a finite number %s, not '%s'", opt, zero_ok ? ">= 0" : "> 0", s);
        return false;
    }
    *out = v;
    return true;
}

/* Which options each command takes. */
typedef struct opt_use {
    const char *opt;
    const char *commands; /* space-separated */
} opt_use;

static const opt_use OPT_USE[] = {
    {"--shape", "check sweep jacobian explain memory"},
    {"--dtype", "check jacobian memory"},
    {"--h", "check jacobian"},
    {"--atol", "check jacobian"},
    {"--rtol", "check jacobian"},
    {"--mode", "check sweep"},
    {"--seed", "check sweep jacobian"},
    {"--inject", "check sweep jacobian"},
    {"--input", "jacobian"},
    {"--out", "sweep jacobian"},
    {"--quiet", "check"},
    {"--print-inputs", "check jacobian"},
    {"--x", "explain"},
    {"--gamma", "explain"},
    {"--beta", "explain"},
    {"--dy", "explain"},
    {"--eps", "explain"},
};

static bool takes(const char *command, const char *opt) {
    for (size_t i = 0; i < sizeof OPT_USE / sizeof OPT_USE[0]; i++) {
        if (strcmp(OPT_USE[i].opt, opt) != 0) continue;
        size_t n = strlen(command);
        for (const char *p = OPT_USE[i].commands; (p = strstr(p, command)) != NULL; p += n)
            if ((p == OPT_USE[i].commands || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0')) return true;
        return false;
    }
    return false;
}

/* Parses argv into *a. Returns -1 when the command can run, else the exit
 * status (a usage error was printed, or help was asked for). */
static int parse_args(int argc, char **argv, gct_args *a) {
    memset(a, 0, sizeof *a);
    a->dtype = TG_F64;
    a->mode = TG_GRADCHECK_FULL;
    a->out_dir = "out/gradcheck";
    a->h = a->atol = a->rtol = a->eps = NAN;
    a->color = isatty(fileno(stdout)) && !getenv("NO_COLOR");
    if (argc < 2) return gct_usage_error("no command given");
    a->command = argv[1];
    if (!strcmp(a->command, "help") || !strcmp(a->command, "--help") || !strcmp(a->command, "-h")) {
        gct_usage(stdout);
        return GCT_EXIT_PASS;
    }
    if (strcmp(a->command, "list") && strcmp(a->command, "check") && strcmp(a->command, "sweep") &&
        strcmp(a->command, "jacobian") && strcmp(a->command, "explain") && strcmp(a->command, "memory"))
        return gct_usage_error("unknown command '%s'", a->command);

    for (int i = 2; i < argc; i++) {
        const char *arg = argv[i];
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
            gct_usage(stdout);
            return GCT_EXIT_PASS;
        }
        if (arg[0] != '-' || arg[1] == '\0') {
            if (a->name) return gct_usage_error("one NAME only: got '%s' and '%s'", a->name, arg);
            a->name = arg;
            continue;
        }
        const char *opt = !strcmp(arg, "-q") ? "--quiet" : arg;
        bool known = false;
        for (size_t k = 0; k < sizeof OPT_USE / sizeof OPT_USE[0]; k++) known |= !strcmp(OPT_USE[k].opt, opt);
        if (!known) return gct_usage_error("unknown option '%s'", arg);
        if (!takes(a->command, opt)) return gct_usage_error("option %s does not apply to %s", opt, a->command);
        if (!strcmp(opt, "--quiet")) {
            a->quiet = true;
            continue;
        }
        if (!strcmp(opt, "--print-inputs")) {
            a->print_inputs = true;
            continue;
        }
        if (i + 1 >= argc) return gct_usage_error("option %s needs a value", opt);
        const char *v = argv[++i];
        if (!strcmp(opt, "--shape")) {
            a->shape = v;
        } else if (!strcmp(opt, "--dtype")) {
            if (!strcmp(v, "f32") || !strcmp(v, "float32")) a->dtype = TG_F32;
            else if (!strcmp(v, "f64") || !strcmp(v, "float64")) a->dtype = TG_F64;
            else return gct_usage_error("--dtype is f32 or f64, not '%s'", v);
            a->dtype_set = true;
        } else if (!strcmp(opt, "--h")) {
            if (!parse_number(opt, v, false, &a->h)) return GCT_EXIT_USAGE;
        } else if (!strcmp(opt, "--atol")) {
            if (!parse_number(opt, v, true, &a->atol)) return GCT_EXIT_USAGE;
        } else if (!strcmp(opt, "--rtol")) {
            if (!parse_number(opt, v, true, &a->rtol)) return GCT_EXIT_USAGE;
        } else if (!strcmp(opt, "--mode")) {
            if (!strcmp(v, "full")) a->mode = TG_GRADCHECK_FULL;
            else if (!strcmp(v, "directional")) a->mode = TG_GRADCHECK_DIRECTIONAL;
            else return gct_usage_error("--mode is full or directional, not '%s'", v);
        } else if (!strcmp(opt, "--seed")) {
            char *e;
            errno = 0;
            unsigned long long s = strtoull(v, &e, 10);
            if (e == v || *e || errno || v[0] == '-')
                return gct_usage_error("--seed wants an integer >= 0, not '%s'", v);
            a->seed = (uint64_t)s;
        } else if (!strcmp(opt, "--inject")) {
            a->inject = v;
        } else if (!strcmp(opt, "--input")) {
            a->input = v;
        } else if (!strcmp(opt, "--x")) {
            a->x = v;
        } else if (!strcmp(opt, "--gamma")) {
            a->gamma = v;
        } else if (!strcmp(opt, "--beta")) {
            a->beta = v;
        } else if (!strcmp(opt, "--dy")) {
            a->dy = v;
        } else if (!strcmp(opt, "--eps")) {
            if (!parse_number(opt, v, true, &a->eps)) return GCT_EXIT_USAGE;
        } else if (!strcmp(opt, "--out")) {
            if (!*v) return gct_usage_error("--out wants a directory");
            a->out_dir = v;
        }
    }
    return -1;
}

int main(int argc, char **argv) {
    gct_args a;
    int st = gct_load_plugins(&argc, argv);
    if (st >= 0) return st;
    st = parse_args(argc, argv, &a);
    if (st >= 0) return st;
    if (!strcmp(a.command, "list")) return gct_cmd_list(&a);
    if (!strcmp(a.command, "check")) return gct_cmd_check(&a);
    if (!strcmp(a.command, "sweep")) return gct_cmd_sweep(&a);
    if (!strcmp(a.command, "explain")) return gct_cmd_explain(&a);
    if (!strcmp(a.command, "memory")) return gct_cmd_memory(&a);
    return gct_cmd_jacobian(&a);
}

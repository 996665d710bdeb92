/* The command line of tapegrad-gradcheck, parsed into gct_args: which
 * options each command takes, their values (numbers, seeds, the step
 * grid, per-input controls, lists of numbers from the command line or a
 * file), and the usage errors that refuse the rest.
 *
 * Layer: base (tool.h): calls only usage.c. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tensor/internal.h"
#include "tools/gradcheck/tool.h"

int gct_usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("tapegrad-gradcheck: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs("\n", stderr);
    va_end(ap);
    /* The reason stays the last thing printed: the whole usage after it
     * would scroll it away. */
    fputs("run 'tapegrad-gradcheck --help' for the usage\n", stderr);
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

/* An integer >= 0. */
static bool parse_seed(const char *opt, const char *v, uint64_t *out) {
    char *e;
    errno = 0;
    unsigned long long s = strtoull(v, &e, 10);
    if (e == v || *e || errno || v[0] == '-') {
        gct_usage_error("%s wants an integer >= 0, not '%s'", opt, v);
        return false;
    }
    *out = (uint64_t)s;
    return true;
}

/* --seeds N (from --seed) or A..B. */
static bool parse_seeds(const char *v, gct_args *a) {
    const char *dots = strstr(v, "..");
    uint64_t lo, hi;
    if (dots) {
        char left[32];
        size_t n = (size_t)(dots - v);
        if (n == 0 || n >= sizeof left) return gct_usage_error("--seeds wants N or A..B, not '%s'", v), false;
        memcpy(left, v, n);
        left[n] = '\0';
        if (!parse_seed("--seeds", left, &lo) || !parse_seed("--seeds", dots + 2, &hi)) return false;
        if (hi < lo) return gct_usage_error("--seeds %s: the range is empty", v), false;
        a->seed_first = lo;
        a->seeds_from_seed = false;
        a->n_seeds = (int64_t)(hi - lo + 1);
    } else {
        if (!parse_seed("--seeds", v, &hi)) return false;
        if (hi < 1) return gct_usage_error("--seeds wants at least 1 seed"), false;
        a->seeds_from_seed = true; /* first: --seed, once all options are read */
        a->n_seeds = (int64_t)hi;
    }
    if (a->n_seeds > 100000000) return gct_usage_error("--seeds %s: at most 1e8 seeds", v), false;
    return true;
}

/* --h-grid H1,H2,... or FROM:TO:PER_DECADE (descending or ascending). */
static bool parse_grid(const char *v, gct_args *a) {
    if (strchr(v, ':')) {
        double from, to, per;
        char tail;
        if (sscanf(v, "%lf:%lf:%lf%c", &from, &to, &per, &tail) != 3 || !(from > 0) || !(to > 0) || !(per >= 1) ||
            !isfinite(from) || !isfinite(to) || per != floor(per))
            return gct_usage_error("--h-grid FROM:TO:PER_DECADE wants steps > 0 and a whole number of points a "
                                   "decade, not '%s'",
                                   v),
                   false;
        double decades = fabs(log10(to / from));
        int n = (int)floor(decades * per + 0.5) + 1;
        if (n > GCT_MAX_GRID) return gct_usage_error("--h-grid %s: %d steps, at most %d", v, n, GCT_MAX_GRID), false;
        for (int k = 0; k < n; k++) a->grid[k] = from * pow(10.0, (to < from ? -1 : 1) * (double)k / per);
        a->n_grid = n;
        return true;
    }
    double *vals;
    int64_t n;
    if (!gct_parse_values("--h-grid", v, &vals, &n)) return false;
    bool ok = n >= 1 && n <= GCT_MAX_GRID;
    for (int64_t k = 0; ok && k < n; k++) ok = vals[k] > 0 && isfinite(vals[k]);
    if (ok)
        for (int64_t k = 0; k < n; k++) a->grid[k] = vals[k];
    a->n_grid = ok ? (int)n : 0;
    free(vals);
    if (!ok) gct_usage_error("--h-grid wants 1..%d steps > 0, not '%s'", GCT_MAX_GRID, v);
    return ok;
}

/* The control entry of input NAME (made when new); NULL on a usage error. */
static gct_input_ctl *ctl_of(gct_args *a, const char *opt, const char *v, const char **rest) {
    const char *eq = strchr(v, '=');
    if (!eq || eq == v || (size_t)(eq - v) >= sizeof a->ctl[0].name || !eq[1]) {
        gct_usage_error("%s wants NAME=VALUE (NAME an input, or all), not '%s'", opt, v);
        return NULL;
    }
    *rest = eq + 1;
    size_t n = (size_t)(eq - v);
    for (int k = 0; k < a->n_ctl; k++)
        if (strlen(a->ctl[k].name) == n && !strncmp(a->ctl[k].name, v, n)) return &a->ctl[k];
    if (a->n_ctl == GCT_MAX_CTL) {
        gct_usage_error("%s: controls for at most %d inputs", opt, GCT_MAX_CTL);
        return NULL;
    }
    gct_input_ctl *c = &a->ctl[a->n_ctl++];
    memcpy(c->name, v, n);
    c->name[n] = '\0';
    return c;
}

/* --dist NAME=uniform:LO:HI|normal:MEAN:STD */
static bool parse_dist(gct_input_ctl *c, const char *v) {
    double p, q;
    char tail;
    if (sscanf(v, "uniform:%lf:%lf%c", &p, &q, &tail) == 2 && isfinite(p) && isfinite(q) && q > p) {
        c->dist = GCT_DIST_UNIFORM;
    } else if (sscanf(v, "normal:%lf:%lf%c", &p, &q, &tail) == 2 && isfinite(p) && isfinite(q) && q >= 0) {
        c->dist = GCT_DIST_NORMAL;
    } else {
        gct_usage_error("--dist %s=%s: want uniform:LO:HI (LO < HI) or normal:MEAN:STD (STD >= 0)", c->name, v);
        return false;
    }
    c->d1 = p;
    c->d2 = q;
    return true;
}

/* A finite number, any sign (--scale, --offset). */
static bool parse_real(const char *opt, const char *s, double *out) {
    char *e;
    errno = 0;
    double v = strtod(s, &e);
    if (e == s || *e || errno || !isfinite(v)) {
        gct_usage_error("%s wants a finite number, not '%s'", opt, s);
        return false;
    }
    *out = v;
    return true;
}

/* True when v[0..n-1] are finite and not all zero. */
static bool nonzero_finite(const double *v, int64_t n) {
    bool nonzero = false, finite = true;
    for (int64_t i = 0; i < n; i++) nonzero |= v[i] != 0, finite &= isfinite(v[i]) != 0;
    return nonzero && finite;
}

/* --modes fwd,rev (bits GCT_MODE_*) and --adjoint. */
static bool parse_modes(gct_args *a, const char *opt, const char *v) {
    if (!strcmp(opt, "--adjoint")) {
        a->adjoint = true;
        return true;
    }
    a->modes = 0;
    char buf[64];
    snprintf(buf, sizeof buf, "%s", v);
    for (char *save = NULL, *m = strtok_r(buf, ",", &save); m; m = strtok_r(NULL, ",", &save)) {
        if (!strcmp(m, "fwd")) a->modes |= GCT_MODE_FWD;
        else if (!strcmp(m, "rev")) a->modes |= GCT_MODE_REV;
        else return gct_usage_error("--modes is a list of fwd and rev (fwd,rev), not '%s'", v), false;
    }
    if (!a->modes) return gct_usage_error("--modes is a list of fwd and rev (fwd,rev), not '%s'", v), false;
    return true;
}

/* Which options each command takes. */
typedef struct opt_use {
    const char *opt;
    const char *commands; /* space-separated */
    bool flag;            /* takes no value */
} opt_use;

static const opt_use OPT_USE[] = {
    {"--shape", "check sweep jacobian explain memory", false},
    {"--dtype", "check sweep jacobian memory", false},
    {"--h", "check jacobian", false},
    {"--atol", "check jacobian", false},
    {"--rtol", "check jacobian", false},
    {"--atol-scale", "check jacobian", false},
    {"--mode", "check sweep", false},
    {"--order", "check", false},
    {"--scheme", "check sweep jacobian", false},
    {"--step", "check sweep jacobian", false},
    {"--step-floor", "check sweep jacobian", false},
    {"--seed", "check sweep jacobian", false},
    {"--input-seed", "check sweep jacobian", false},
    {"--probe-seed", "check sweep jacobian", false},
    {"--seeds", "check sweep jacobian", false},
    {"--inject", "check sweep jacobian", false},
    {"--input", "jacobian", false},
    {"--out", "sweep jacobian", false},
    {"--quiet", "check sweep", true},
    {"--format", "check sweep jacobian", false},
    {"--print-inputs", "check sweep jacobian", true},
    {"--save-inputs", "check sweep jacobian", false},
    {"--elements", "check", true},
    {"--modes", "check", false},
    {"--adjoint", "check", true},
    {"--cover", "check", true},
    {"--r", "check", false},
    {"--v", "check", false},
    {"--h-grid", "sweep", false},
    {"--dist", "check sweep jacobian", false},
    {"--scale", "check sweep jacobian", false},
    {"--offset", "check sweep jacobian", false},
    {"--values", "check sweep jacobian", false},
    {"--x", "explain", false},
    {"--gamma", "explain", false},
    {"--beta", "explain", false},
    {"--dy", "explain", false},
    {"--eps", "explain", false},
};

static const opt_use *find_opt(const char *opt) {
    for (size_t k = 0; k < sizeof OPT_USE / sizeof OPT_USE[0]; k++)
        if (!strcmp(OPT_USE[k].opt, opt)) return &OPT_USE[k];
    return NULL;
}

static bool takes(const char *command, const opt_use *u) {
    size_t n = strlen(command);
    for (const char *p = u->commands; (p = strstr(p, command)) != NULL; p += n)
        if ((p == u->commands || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0')) return true;
    return false;
}

/* The options of a group below: 1 parsed, 0 a usage error (printed), -1
 * not an option of the group. */
#define OPT_OK(ok) ((ok) ? 1 : 0)

/* Flags and options whose value is kept as text. */
static int parse_text_option(gct_args *a, const char *opt, const char *v) {
    if (!strcmp(opt, "--quiet")) a->quiet = true;
    else if (!strcmp(opt, "--print-inputs")) a->print_inputs = true;
    else if (!strcmp(opt, "--elements")) a->elements = true;
    else if (!strcmp(opt, "--cover")) a->cover = true;
    else if (!strcmp(opt, "--modes") || !strcmp(opt, "--adjoint")) return OPT_OK(parse_modes(a, opt, v));
    else if (!strcmp(opt, "--shape")) a->shape = v;
    else if (!strcmp(opt, "--x")) a->x = v;
    else if (!strcmp(opt, "--gamma")) a->gamma = v;
    else if (!strcmp(opt, "--beta")) a->beta = v;
    else if (!strcmp(opt, "--dy")) a->dy = v;
    else if (!strcmp(opt, "--inject")) a->inject = v;
    else if (!strcmp(opt, "--input")) a->input = v;
    else if (!strcmp(opt, "--out")) {
        if (!*v) return gct_usage_error("--out wants a directory"), 0;
        a->out_dir = v;
    } else if (!strcmp(opt, "--save-inputs")) {
        if (!*v) return gct_usage_error("--save-inputs wants a directory"), 0;
        a->save_inputs = v;
    } else return -1;
    return 1;
}

/* --dtype: f32 or f64; a 16-bit dtype is refused with the reason. */
static bool parse_dtype(gct_args *a, const char *v) {
    if (!strcmp(v, "f32") || !strcmp(v, "float32")) a->dtype = TG_F32;
    else if (!strcmp(v, "f64") || !strcmp(v, "float64")) a->dtype = TG_F64;
    else if (!strcmp(v, "bf16") || !strcmp(v, "bfloat16") || !strcmp(v, "f16") || !strcmp(v, "float16"))
        return gct_usage_error("--dtype %s: finite differences cannot check a 16-bit dtype (its rounding, "
                               "epsilon 2^-7 or 2^-10, swamps any difference quotient); check in f64, and "
                               "compare the %s backward with the float64 one in C with tg_gradcheck_lowp "
                               "(tapegrad/check.h)",
                               v, v),
               false;
    else return gct_usage_error("--dtype is f32 or f64, not '%s'", v), false;
    a->dtype_set = true;
    return true;
}

/* Options that pick one of a few words. */
static int parse_choice_option(gct_args *a, const char *opt, const char *v) {
    if (!strcmp(opt, "--dtype")) {
        return OPT_OK(parse_dtype(a, v));
    } else if (!strcmp(opt, "--atol-scale")) {
        if (!strcmp(v, "absolute")) a->atol_scale = TG_GRADCHECK_ATOL_ABSOLUTE;
        else if (!strcmp(v, "gradient")) a->atol_scale = TG_GRADCHECK_ATOL_GRADIENT;
        else return gct_usage_error("--atol-scale is absolute or gradient, not '%s'", v), 0;
    } else if (!strcmp(opt, "--mode")) {
        if (!strcmp(v, "full")) a->mode = TG_GRADCHECK_FULL;
        else if (!strcmp(v, "directional")) a->mode = TG_GRADCHECK_DIRECTIONAL;
        else if (!strcmp(v, "jacobian")) a->mode = TG_GRADCHECK_JACOBIAN;
        else if (!strcmp(v, "fast")) a->mode = TG_GRADCHECK_FAST;
        else return gct_usage_error("--mode is full, directional, jacobian or fast, not '%s'", v), 0;
    } else if (!strcmp(opt, "--order")) {
        if (!strcmp(v, "1") || !strcmp(v, "2")) a->order = v[0] - '0';
        else return gct_usage_error("--order is 1 or 2, not '%s'", v), 0;
    } else if (!strcmp(opt, "--scheme")) {
        if (!strcmp(v, "central")) a->schemes = 1;
        else if (!strcmp(v, "forward")) a->schemes = 2;
        else return gct_usage_error("--scheme is central or forward, not '%s'", v), 0;
    } else if (!strcmp(opt, "--step")) {
        if (!strcmp(v, "absolute")) a->step = TG_GRADCHECK_STEP_ABSOLUTE;
        else if (!strcmp(v, "element")) a->step = TG_GRADCHECK_STEP_ELEMENT;
        else if (!strcmp(v, "scaled")) a->step = TG_GRADCHECK_STEP_SCALED;
        else return gct_usage_error("--step is absolute, element or scaled, not '%s'", v), 0;
        a->step_set = true;
    } else if (!strcmp(opt, "--format")) {
        if (!strcmp(v, "text")) a->format = GCT_TEXT;
        else if (!strcmp(v, "json")) a->format = GCT_JSON;
        else if (!strcmp(v, "csv")) a->format = GCT_CSV;
        else return gct_usage_error("--format is text, json or csv, not '%s'", v), 0;
    } else {
        return -1;
    }
    return 1;
}

/* --r V,V,...|@FILE: the output weighting. */
static bool parse_r(gct_args *a, const char *opt, const char *v) {
    free(a->r);
    a->r = NULL;
    if (!gct_parse_values(opt, v, &a->r, &a->n_r)) return false;
    /* a zero r weights every output by 0: L = 0, and the check would
     * compare 0 with 0 whatever the backward */
    if (!nonzero_finite(a->r, a->n_r))
        return gct_usage_error("--r %s: the weighting must be finite and not all zero (L = sum_j r_j y_j would "
                               "not see the output)",
                               v),
               false;
    return true;
}

/* Options whose value is a number, seeds or a list of numbers. */
static int parse_number_option(gct_args *a, const char *opt, const char *v) {
    if (!strcmp(opt, "--eps")) return OPT_OK(parse_number(opt, v, true, &a->eps));
    if (!strcmp(opt, "--h")) return OPT_OK(parse_number(opt, v, false, &a->h));
    if (!strcmp(opt, "--atol")) return OPT_OK(parse_number(opt, v, true, &a->atol));
    if (!strcmp(opt, "--rtol")) return OPT_OK(parse_number(opt, v, true, &a->rtol));
    if (!strcmp(opt, "--step-floor")) return OPT_OK(parse_number(opt, v, false, &a->step_floor));
    if (!strcmp(opt, "--seed")) return a->seed_set = true, OPT_OK(parse_seed(opt, v, &a->seed));
    if (!strcmp(opt, "--input-seed")) return a->input_seed_set = true, OPT_OK(parse_seed(opt, v, &a->input_seed));
    if (!strcmp(opt, "--probe-seed")) return a->probe_seed_set = true, OPT_OK(parse_seed(opt, v, &a->probe_seed));
    if (!strcmp(opt, "--seeds")) return OPT_OK(parse_seeds(v, a));
    if (!strcmp(opt, "--r")) return OPT_OK(parse_r(a, opt, v));
    if (!strcmp(opt, "--h-grid")) return OPT_OK(parse_grid(v, a));
    return -1;
}

/* Per input: --v, --dist, --scale, --offset, --values NAME=... */
static bool parse_input_option(gct_args *a, const char *opt, const char *v) {
    const char *rest;
    gct_input_ctl *c = ctl_of(a, opt, v, &rest);
    if (!c) return false;
    if (!strcmp(opt, "--v")) {
        free(c->v);
        c->v = NULL;
        if (!gct_parse_values(opt, rest, &c->v, &c->n_v)) return false;
        if (!nonzero_finite(c->v, c->n_v))
            return gct_usage_error("--v %s: the direction must be finite and not all zero", v), false;
        return true;
    }
    if (!strcmp(opt, "--values")) {
        free(c->values);
        return gct_parse_values(opt, rest, &c->values, &c->n_values);
    }
    if (!strcmp(opt, "--dist")) return parse_dist(c, rest);
    if (!strcmp(opt, "--scale")) return (c->scale_set = true) && parse_real(opt, rest, &c->scale);
    return (c->offset_set = true) && parse_real(opt, rest, &c->offset);
}

/* One option with its value v (NULL for a flag). False on a usage error
 * (printed). */
static bool parse_option(gct_args *a, const char *opt, const char *v) {
    int st = parse_text_option(a, opt, v);
    if (st < 0) st = parse_choice_option(a, opt, v);
    if (st < 0) st = parse_number_option(a, opt, v);
    if (st < 0) return parse_input_option(a, opt, v);
    return st == 1;
}

int gct_parse_args(int argc, char **argv, gct_args *a) {
    memset(a, 0, sizeof *a);
    a->dtype = TG_F64;
    a->mode = TG_GRADCHECK_FULL;
    a->order = 1;
    a->out_dir = "out/gradcheck";
    a->h = a->atol = a->rtol = a->eps = NAN;
    a->color = isatty(fileno(stdout)) && !getenv("NO_COLOR");
    if (argc < 2) {
        gct_usage(stderr);
        return GCT_EXIT_USAGE;
    }
    a->command = argv[1];
    if (!strcmp(a->command, "help") || !strcmp(a->command, "--help") || !strcmp(a->command, "-h")) {
        gct_usage(stdout);
        return GCT_EXIT_PASS;
    }
    if (!strcmp(a->command, "--version") || !strcmp(a->command, "version")) {
        printf("tapegrad-gradcheck %d.%d.%d (JSON schema %d)\n", TAPEGRAD_VERSION_MAJOR, TAPEGRAD_VERSION_MINOR,
               TAPEGRAD_VERSION_PATCH, GCT_JSON_SCHEMA);
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
        const opt_use *u = find_opt(opt);
        if (!u) return gct_usage_error("unknown option '%s'", arg);
        if (!takes(a->command, u)) return gct_usage_error("option %s does not apply to %s", opt, a->command);
        const char *v = NULL;
        if (!u->flag) {
            if (i + 1 >= argc) return gct_usage_error("option %s needs a value", opt);
            v = argv[++i];
        }
        if (!parse_option(a, opt, v)) return GCT_EXIT_USAGE;
    }
    const bool seed_given = a->seed_set;
    /* --seeds names every seed it runs; a --seed beside it would be
     * ignored (or silently move the range): refused */
    if (a->n_seeds && seed_given)
        return gct_usage_error("--seed and --seeds together: --seeds N runs seeds 0..N-1, --seeds A..B the range "
                               "A..B (--input-seed, --probe-seed hold one of the two fixed)");
    if (a->seeds_from_seed) a->seed_first = a->seed;
    if (a->format == GCT_CSV && !strcmp(a->command, "jacobian") && a->n_seeds)
        return gct_usage_error("jacobian --seeds reports in text or json");
    return -1;
}

void gct_args_free(gct_args *a) {
    free(a->r);
    for (int k = 0; k < a->n_ctl; k++) {
        free(a->ctl[k].values);
        free(a->ctl[k].v);
    }
}

bool gct_parse_values(const char *opt, const char *text, double **values, int64_t *n) {
    *values = NULL;
    *n = 0;
    char *buf = NULL;
    if (text[0] == '@') {
        char why[512]; /* a regular file: a device or a pipe need not end */
        int fd = tg_open_regular(text + 1, why, sizeof why);
        FILE *f = fd >= 0 ? fdopen(fd, "r") : NULL;
        if (fd >= 0 && !f) {
            snprintf(why, sizeof why, "cannot read %s: %s", text + 1, strerror(errno));
            close(fd);
        }
        if (!f) {
            gct_usage_error("%s: %s", opt, why);
            return false;
        }
        size_t cap = 4096, len = 0;
        buf = malloc(cap);
        for (size_t got; buf && (got = fread(buf + len, 1, cap - len - 1, f)) > 0;) {
            len += got;
            if (len + 1 == cap) {
                char *b = realloc(buf, cap *= 2);
                if (!b) free(buf);
                buf = b;
            }
        }
        fclose(f);
        if (!buf) {
            fprintf(stderr, "tapegrad-gradcheck: out of memory\n");
            return false;
        }
        buf[len] = '\0';
    } else {
        buf = strdup(text);
        if (!buf) return false;
    }
    int64_t cap = 64, count = 0;
    double *v = malloc((size_t)cap * sizeof *v);
    bool ok = v != NULL;
    for (char *p = buf; ok && *p;) {
        if (*p == '#') {
            p += strcspn(p, "\n");
            continue;
        }
        if (strchr(" \t\r\n,;[]", *p)) {
            p++;
            continue;
        }
        char *e;
        errno = 0;
        double x = strtod(p, &e);
        if (e == p || errno || !isfinite(x)) {
            gct_usage_error("%s: '%.20s' in %s is not a finite number", opt, p, text[0] == '@' ? text + 1 : "the list");
            ok = false;
            break;
        }
        if (count == cap) {
            double *w = realloc(v, (size_t)(cap *= 2) * sizeof *v);
            if (!w) {
                ok = false;
                break;
            }
            v = w;
        }
        v[count++] = x;
        p = e;
    }
    free(buf);
    if (ok && count == 0) {
        gct_usage_error("%s: no numbers in '%s'", opt, text);
        ok = false;
    }
    if (!ok) {
        free(v);
        return false;
    }
    *values = v;
    *n = count;
    return true;
}

uint64_t gct_input_seed(const gct_args *a, uint64_t s) { return a->input_seed_set ? a->input_seed : s; }
uint64_t gct_probe_seed(const gct_args *a, uint64_t s) { return a->probe_seed_set ? a->probe_seed : s; }
uint64_t gct_first_seed(const gct_args *a) { return a->n_seeds ? a->seed_first : a->seed; }
int64_t gct_seed_count(const gct_args *a) { return a->n_seeds ? a->n_seeds : 1; }

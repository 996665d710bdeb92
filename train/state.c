/* Training state in one call: tg_train_save / tg_train_load and their
 * several-model forms, and tg_plot_open_resume for the loss log of a
 * resumed run (include/tapegrad/train.h).
 *
 * A save gathers one list of parameters and one of optimizer state, with
 * each part's prefix on the names, adds the metadata (format, RNG state,
 * each optimizer's description) to the caller's, and hands them to
 * tg_ckpt_save, which writes atomically.
 *
 * A load must change nothing when it fails, but some checks need the
 * file's metadata, which comes with its tensors. So it loads into scratch
 * copies of every tensor first, checks the metadata and the step counts,
 * and only then copies the scratch values into the model and the
 * optimizers and restores the RNG (a commit that cannot fail: same shapes
 * and dtypes by construction). The scratch copies cost the model's and the
 * state's size once, for the duration of the call. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tapegrad.h"
#include "tensor/internal.h" /* tg_check_ptr, tg_null_error */

#define FORMAT_KEY "tapegrad.train"
#define COMPUTE_KEY "tapegrad.compute" /* the context's compute dtype (autocast): "float32", "bfloat16", ... */
#define FORMAT_VERSION "1"
#define RESERVED_PREFIX "tapegrad."
#define MAX_PARTS 64

/* "tapegrad.optim" or "tapegrad.optim.NAME" */
static void part_key(char *buf, size_t size, const char *what, const tg_train_part *part) {
    if (part->name && *part->name) snprintf(buf, size, "tapegrad.%s.%s", what, part->name);
    else snprintf(buf, size, "tapegrad.%s", what);
}

/* ---- the lists of tensors, with each part's prefix ------------------------------ */

/* Fills list's next entry (allocated by gather): `value` under prefix + "."
 * + name, or name. */
static bool put(tg_ctx *ctx, const char *fn, tg_params *list, const char *prefix, const char *name, tg_tensor *value) {
    tg_param *p = &list->items[list->count];
    bool has_prefix = prefix && *prefix;
    int n = snprintf(p->name, sizeof p->name, "%s%s%s", has_prefix ? prefix : "", has_prefix ? "." : "", name);
    if (n < 0 || (size_t)n >= sizeof p->name) {
        tg_error(ctx, TG_ERR_VALUE, fn, "the name \"%s%s%s\" is longer than %zu bytes", has_prefix ? prefix : "",
                 has_prefix ? "." : "", name, sizeof p->name - 1);
        return false;
    }
    p->value = value;
    list->count++;
    return true;
}

/* Checks the parts: at least one, each with params, names unique and
 * without '.', every tensor present. */
static bool check_parts(tg_ctx *ctx, const char *fn, const tg_train_part *parts, int nparts) {
    if (!parts) return tg_null_error(ctx, fn, "parts");
    if (nparts < 1 || nparts > MAX_PARTS) {
        tg_error(ctx, TG_ERR_VALUE, fn, "nparts = %d must be in 1..%d", nparts, MAX_PARTS);
        return false;
    }
    for (int i = 0; i < nparts; i++) {
        const tg_train_part *p = &parts[i];
        const char *name = p->name ? p->name : "";
        if (!p->params && nparts == 1 && !p->name) { /* tg_train_save / tg_train_load */
            return tg_null_error(ctx, fn, "params");
        }
        if (!p->params) {
            tg_error(ctx, TG_ERR_NULL, fn, "part %d (\"%s\") has no params", i, name);
            return false;
        }
        if (strchr(name, '.')) {
            tg_error(ctx, TG_ERR_VALUE, fn, "part %d: the name \"%s\" holds a '.'", i, name);
            return false;
        }
        for (int j = 0; j < i; j++) {
            if (strcmp(parts[j].name ? parts[j].name : "", name) == 0) {
                tg_error(ctx, TG_ERR_VALUE, fn, "parts %d and %d are both named \"%s\"", j, i, name);
                return false;
            }
        }
        if (p->params->count < 0 || (p->params->count > 0 && !p->params->items)) {
            tg_error(ctx, TG_ERR_NULL, fn, "part %d (\"%s\"): params has %d items but no array", i, name,
                     p->params->count);
            return false;
        }
        for (int k = 0; k < p->params->count; k++) {
            if (!p->params->items[k].value) {
                tg_error(ctx, TG_ERR_NULL, fn, "part %d (\"%s\"): parameter %d has no tensor", i, name, k);
                return false;
            }
        }
    }
    return true;
}

/* The parts' parameters and optimizer state as two named lists. With
 * scratch, each entry is a new zero persistent tensor of the same dtype and
 * shape (to load into) instead of the live one. */
static bool gather(tg_ctx *ctx, const char *fn, const tg_train_part *parts, int nparts, bool scratch, tg_params *params,
                   tg_params *state) {
    tg_params *lists[2] = {params, state};
    for (int i = 0; i < nparts; i++) {
        params->capacity += parts[i].params->count;
        state->capacity += parts[i].optim ? tg_optim_state(parts[i].optim)->count : 0;
        state->capacity += parts[i].scaler ? tg_grad_scaler_state(parts[i].scaler)->count : 0;
    }
    for (int l = 0; l < 2; l++) {
        lists[l]->items = calloc(lists[l]->capacity ? (size_t)lists[l]->capacity : 1, sizeof *lists[l]->items);
        if (!lists[l]->items) {
            tg_error(ctx, TG_ERR_OOM, fn, "out of memory for a list of %d tensors", lists[l]->capacity);
            return false;
        }
    }
    for (int i = 0; i < nparts; i++)
        for (int l = 0; l < 3; l++) { /* the parameters, the optimizer's state, the scaler's state */
            const tg_params *from = l == 0   ? parts[i].params
                                    : l == 1 ? tg_optim_state(parts[i].optim)
                                             : tg_grad_scaler_state(parts[i].scaler);
            for (int k = 0; from && k < from->count; k++) {
                tg_tensor *t = from->items[k].value;
                if (scratch && !(t = tg_persist(ctx, tg_zeros(ctx, t->dtype, t->ndim, t->shape)))) return false;
                if (!put(ctx, fn, lists[l ? 1 : 0], parts[i].name, from->items[k].name, t)) {
                    if (scratch) tg_tensor_free(ctx, t);
                    return false;
                }
            }
        }
    return true;
}

static void free_scratch(tg_ctx *ctx, tg_params *list) {
    for (int i = 0; i < list->count; i++) tg_tensor_free(ctx, list->items[i].value);
    tg_params_free(list);
}

/* Quotes an error raised below us after our own function name, so every
 * error of these calls names the call the user made:
 * "tg_train_load: tg_ckpt_load: cannot open a.st: No such file ...". */
static tg_status name_error(tg_ctx *ctx, const char *fn) {
    tg_status st = tg_status_of(ctx);
    const char *msg = tg_error_message(ctx);
    size_t n = strlen(fn);
    if (st == TG_OK || (strncmp(msg, fn, n) == 0 && msg[n] == ':')) return st;
    char inner[512];
    snprintf(inner, sizeof inner, "%s", msg);
    tg_clear_error(ctx);
    tg_error(ctx, st, fn, "%s", inner);
    return st;
}

/* A save replaces only a regular file, or makes a new one: see train.h for
 * why. (A load reads only a regular file: tg_ckpt_load checks it.) */
static bool check_save_path(tg_ctx *ctx, const char *fn, const char *path) {
    struct stat sb;
    if (stat(path, &sb) != 0) {
        if (errno == ENOENT) return true;
        tg_error(ctx, TG_ERR_IO, fn, "cannot open %s: %s", path, strerror(errno));
        return false;
    }
    if (S_ISREG(sb.st_mode)) return true;
    tg_error(ctx, TG_ERR_IO, fn, "%s is %s, not a regular file: a save replaces the file at the path", path,
             tg_file_kind((unsigned)sb.st_mode));
    return false;
}

/* The checks every call starts with: false when it must stop (the
 * context's status says why, TG_ERR_NULL for a NULL context). */
static bool begin(tg_ctx *ctx, const char *fn, const char *path, const tg_train_part *parts, int nparts, bool saving) {
    if (!tg_check_ptr(ctx, fn, "path", path)) return false;
    return check_parts(ctx, fn, parts, nparts) && (!saving || check_save_path(ctx, fn, path));
}

/* ---- save ------------------------------------------------------------------------ */

static tg_status save_parts(tg_ctx *ctx, const char *fn, const char *path, const tg_train_part *parts, int nparts,
                            const tg_meta *user) {
    if (!begin(ctx, fn, path, parts, nparts, true)) return tg_status_of(ctx);
    if (user && (user->count < 0 || (user->count > 0 && !user->items))) {
        tg_error(ctx, TG_ERR_NULL, fn, "meta has %d items but no array", user->count);
        return TG_ERR_NULL;
    }
    tg_params params = {0}, state = {0};
    tg_meta meta = {0};
    for (int i = 0; user && i < user->count && tg_ok(ctx); i++) {
        const tg_meta_item *it = &user->items[i];
        if (it->key && strncmp(it->key, RESERVED_PREFIX, strlen(RESERVED_PREFIX)) == 0) continue;
        tg_meta_set(ctx, &meta, it->key, it->value);
    }
    tg_meta_set(ctx, &meta, FORMAT_KEY, FORMAT_VERSION);
    tg_meta_set(ctx, &meta, COMPUTE_KEY, tg_dtype_name(tg_ctx_autocast(ctx)));
    tg_meta_set_rng(ctx, &meta);
    for (int i = 0; i < nparts && tg_ok(ctx); i++) {
        if (!parts[i].optim) continue;
        char key[96], text[512];
        part_key(key, sizeof key, "optim", &parts[i]);
        tg_optim_format(text, sizeof text, parts[i].optim);
        tg_meta_set(ctx, &meta, key, text);
        part_key(key, sizeof key, "schedule", &parts[i]);
        tg_optim_format_schedule(text, sizeof text, parts[i].optim);
        tg_meta_set(ctx, &meta, key, text);
    }
    for (int i = 0; i < nparts && tg_ok(ctx); i++) {
        if (!parts[i].scaler) continue;
        char key[96], text[512];
        part_key(key, sizeof key, "scaler", &parts[i]);
        tg_grad_scaler_format(text, sizeof text, parts[i].scaler);
        tg_meta_set(ctx, &meta, key, text);
    }
    if (gather(ctx, fn, parts, nparts, false, &params, &state)) tg_ckpt_save(ctx, path, &params, &state, &meta);
    tg_params_free(&params);
    tg_params_free(&state);
    tg_meta_free(&meta);
    return name_error(ctx, fn);
}

tg_status tg_train_save_parts(tg_ctx *ctx, const char *path, const tg_train_part *parts, int nparts,
                              const tg_meta *meta) {
    return save_parts(ctx, __func__, path, parts, nparts, meta);
}

tg_status tg_train_save(tg_ctx *ctx, const char *path, const tg_params *params, tg_optim *optim, const tg_meta *meta) {
    /* The part's params are only read here. */
    tg_train_part part = {NULL, (tg_params *)params, optim, NULL};
    return save_parts(ctx, __func__, path, &part, 1, meta);
}

/* ---- load ------------------------------------------------------------------------ */

/* The file's format key says it is a training state this library reads. */
static bool check_format(tg_ctx *ctx, const char *fn, const char *path, const tg_meta *meta) {
    const char *format = tg_meta_get(meta, FORMAT_KEY);
    if (format && strcmp(format, FORMAT_VERSION) == 0) return true;
    if (format)
        tg_error(ctx, TG_ERR_FORMAT, fn, "%s: training-state format \"%.40s\", this library reads \"%s\"", path, format,
                 FORMAT_VERSION);
    else
        tg_error(ctx, TG_ERR_FORMAT, fn,
                 "%s has no \"%s\" key: not a training-state file (a checkpoint of tg_ckpt_save? load it with "
                 "tg_ckpt_load)",
                 path, FORMAT_KEY);
    return false;
}

/* Appends ", \"name\"" (the first without the comma) to buf[size]. */
static void put_name(char *buf, size_t size, const char *name) {
    size_t len = strlen(buf);
    if (len < size) snprintf(buf + len, size - len, "%s\"%s\"", len ? ", " : "", name);
}

/* The parts the file holds an optimizer for (its "tapegrad.optim[.NAME]"
 * keys), quoted, into buf; how many. */
static int file_parts(const tg_meta *meta, char *buf, size_t size) {
    static const char prefix[] = "tapegrad.optim";
    const size_t k = sizeof prefix - 1;
    int n = 0;
    buf[0] = '\0';
    for (int i = 0; i < meta->count; i++) {
        const char *key = meta->items[i].key;
        if (strncmp(key, prefix, k) != 0 || (key[k] && key[k] != '.')) continue;
        put_name(buf, size, key[k] ? key + k + 1 : "");
        n++;
    }
    return n;
}

/* The settings the file was saved with agree with the parts and the
 * context: the same parts, each optimizer's description and schedule, the
 * gradient scalers' settings, the compute dtype. Metadata only, so it also
 * explains a file whose tensors do not fit (explain_mismatch). */
static bool settings_agree(tg_ctx *ctx, const char *fn, const char *path, const tg_train_part *parts, int nparts,
                           const tg_meta *meta) {
    /* The same parts (those with an optimizer, whose keys name them). */
    char key[96], theirs_parts[256], ours[256] = "";
    int n_file = file_parts(meta, theirs_parts, sizeof theirs_parts), n_ours = 0;
    bool missing = false;
    for (int i = 0; i < nparts; i++) {
        if (!parts[i].optim) continue;
        put_name(ours, sizeof ours, parts[i].name ? parts[i].name : "");
        n_ours++;
        part_key(key, sizeof key, "optim", &parts[i]);
        missing |= !tg_meta_get(meta, key);
    }
    if (n_file > 0 && (missing || n_file != n_ours)) {
        tg_error(ctx, TG_ERR_VALUE, fn,
                 "%s holds the parts %s, and this load has %s: it was saved with other settings (another model; "
                 "load it with the parts it was saved with)",
                 path, theirs_parts, n_ours ? ours : "none with an optimizer");
        return false;
    }
    for (int i = 0; i < nparts; i++) {
        if (!parts[i].optim) continue;
        char part[96] = ""; /* which one, when there are names */
        if (parts[i].name && *parts[i].name) snprintf(part, sizeof part, " (part \"%s\")", parts[i].name);
        for (int what = 0; what < 2; what++) {
            char mine[512];
            part_key(key, sizeof key, what == 0 ? "optim" : "schedule", &parts[i]);
            if (what == 0) tg_optim_format(mine, sizeof mine, parts[i].optim);
            else tg_optim_format_schedule(mine, sizeof mine, parts[i].optim);
            const char *theirs = tg_meta_get(meta, key);
            if (!theirs) {
                tg_error(ctx, TG_ERR_FORMAT, fn, "%s has no \"%s\" key", path, key);
                return false;
            }
            if (strcmp(theirs, mine) != 0) {
                tg_error(ctx, TG_ERR_VALUE, fn,
                         "%s%s was saved by an optimizer with %s \"%.160s\", this one has \"%.160s\" (make it as "
                         "when the run started; change it after loading)",
                         path, part, what == 0 ? "settings" : "schedule", theirs, mine);
                return false;
            }
        }
    }
    /* Files from before the key was written say nothing: any dtype. */
    const char *compute = tg_meta_get(meta, COMPUTE_KEY), *dtype = tg_dtype_name(tg_ctx_autocast(ctx));
    if (compute && strcmp(compute, dtype) != 0) {
        tg_error(ctx, TG_ERR_VALUE, fn,
                 "%s was saved by a run computing in %.40s, and this context computes in %s (tg_ctx_set_autocast "
                 "as when the run started, before the load; change it after)",
                 path, compute, dtype);
        return false;
    }
    for (int i = 0; i < nparts; i++) {
        if (!parts[i].scaler) continue;
        char mine[512];
        part_key(key, sizeof key, "scaler", &parts[i]);
        tg_grad_scaler_format(mine, sizeof mine, parts[i].scaler);
        const char *theirs = tg_meta_get(meta, key);
        if (!theirs) {
            tg_error(ctx, TG_ERR_FORMAT, fn, "%s has no \"%s\" key (saved without a gradient scaler?)", path, key);
            return false;
        }
        if (strcmp(theirs, mine) != 0) {
            tg_error(ctx, TG_ERR_VALUE, fn,
                     "%s was saved by a gradient scaler with settings \"%.160s\", this one has \"%.160s\"", path,
                     theirs, mine);
            return false;
        }
    }
    return true;
}

/* After a load whose tensors did not fit the parts (a name, shape or dtype
 * that differs, status st): when the file's metadata shows why, other
 * parts or other settings (TG_ERR_VALUE from settings_agree), that is the
 * error, naming both; else the tensor's error stays (a key missing from
 * the file says less than the tensor missing from it). Reads the metadata
 * again, only on this path. */
static void explain_mismatch(tg_ctx *ctx, const char *fn, const char *path, const tg_train_part *parts, int nparts) {
    tg_status st = tg_status_of(ctx);
    if (st != TG_ERR_VALUE && st != TG_ERR_SHAPE && st != TG_ERR_DTYPE) return;
    char inner[512];
    snprintf(inner, sizeof inner, "%s", tg_error_message(ctx));
    tg_clear_error(ctx);
    tg_params none = {0};
    tg_meta meta = {0};
    const tg_ckpt_options only_meta = {.ignore_extra = true};
    bool explained = tg_ckpt_load_ex(ctx, path, &none, NULL, &meta, &only_meta) == TG_OK &&
                     tg_meta_get(&meta, FORMAT_KEY) && !settings_agree(ctx, fn, path, parts, nparts, &meta) &&
                     tg_status_of(ctx) == TG_ERR_VALUE;
    tg_meta_free(&meta);
    if (explained) return;
    tg_clear_error(ctx);
    tg_error(ctx, st, fn, "%s", inner);
}

/* The file's metadata agrees with the parts (check_format,
 * settings_agree); the scalers' and the optimizers' step counts are in
 * range; the RNG state reads. Sets *seed and *offset. */
static bool check_loaded(tg_ctx *ctx, const char *fn, const char *path, const tg_train_part *parts, int nparts,
                         const tg_meta *meta, const tg_params *state, uint64_t *seed, uint64_t *offset) {
    if (!check_format(ctx, fn, path, meta) || !settings_agree(ctx, fn, path, parts, nparts, meta)) return false;
    for (int i = 0; i < nparts; i++) {
        if (!parts[i].scaler) continue;
        /* the rules tg_grad_scaler_sync_state applies, before anything is written */
        char name[160];
        const bool named = parts[i].name && *parts[i].name;
        snprintf(name, sizeof name, "%s%sscaler.scale", named ? parts[i].name : "", named ? "." : "");
        const tg_param *sp = tg_params_find((tg_params *)state, name);
        snprintf(name, sizeof name, "%s%sscaler.growth_tracker", named ? parts[i].name : "", named ? "." : "");
        const tg_param *tp = tg_params_find((tg_params *)state, name);
        const double scale = sp ? *(const double *)sp->value->data : NAN;
        const double tracker = tp ? *(const double *)tp->value->data : NAN;
        const int64_t interval = tg_grad_scaler_get_opts(parts[i].scaler).growth_interval;
        if (!(scale > 0) || !isfinite(scale) || (double)(float)scale != scale || !(tracker >= 0) ||
            tracker != floor(tracker) || tracker >= (double)interval) {
            tg_error(ctx, TG_ERR_FORMAT, fn,
                     "%s: the gradient scaler's scale %g (a positive finite float32) or growth tracker %g (a "
                     "count below %lld) is out of range",
                     path, scale, tracker, (long long)interval);
            return false;
        }
    }
    /* The rule tg_optim_sync_state applies, checked before anything is written. */
    for (int i = 0; i < state->count; i++) {
        const char *name = state->items[i].name;
        size_t n = strlen(name), k = strlen("optim.step");
        if (n < k || strcmp(name + n - k, "optim.step") != 0 || (n > k && name[n - k - 1] != '.')) continue;
        double s = *(const double *)state->items[i].value->data;
        if (!(s >= 0) || s > 9e15 || s != floor(s)) {
            tg_error(ctx, TG_ERR_FORMAT, fn, "%s: \"%s\" = %g is not a step count", path, name, s);
            return false;
        }
    }
    return tg_meta_get_u64(ctx, meta, "tapegrad.rng.seed", seed) &&
           tg_meta_get_u64(ctx, meta, "tapegrad.rng.offset", offset);
}

static tg_status load_parts(tg_ctx *ctx, const char *fn, const char *path, const tg_train_part *parts, int nparts,
                            tg_meta *meta) {
    if (!begin(ctx, fn, path, parts, nparts, false)) return tg_status_of(ctx);
    tg_params live_params = {0}, live_state = {0}, params = {0}, state = {0};
    tg_meta file_meta = {0};
    uint64_t seed = 0, offset = 0;
    const bool gathered = gather(ctx, fn, parts, nparts, false, &live_params, &live_state) &&
                          gather(ctx, fn, parts, nparts, true, &params, &state);
    const bool loaded = gathered && tg_ckpt_load(ctx, path, &params, &state, &file_meta) == TG_OK;
    if (gathered && !loaded) explain_mismatch(ctx, fn, path, parts, nparts);
    if (loaded && check_loaded(ctx, fn, path, parts, nparts, &file_meta, &state, &seed, &offset)) {
        /* Everything checked: commit. The lists match entry for entry. */
        for (int i = 0; i < params.count; i++) tg_assign(ctx, live_params.items[i].value, params.items[i].value);
        for (int i = 0; i < state.count; i++) tg_assign(ctx, live_state.items[i].value, state.items[i].value);
        for (int i = 0; i < nparts; i++)
            if (parts[i].optim) tg_optim_sync_state(ctx, parts[i].optim);
        for (int i = 0; i < nparts; i++)
            if (parts[i].scaler) tg_grad_scaler_sync_state(ctx, parts[i].scaler);
        tg_rng_set_state(ctx, seed, offset);
        if (meta) {
            tg_meta_free(meta);
            *meta = file_meta;
            file_meta = (tg_meta){0};
        }
    }
    tg_params_free(&live_params);
    tg_params_free(&live_state);
    free_scratch(ctx, &params);
    free_scratch(ctx, &state);
    tg_meta_free(&file_meta);
    return name_error(ctx, fn);
}

tg_status tg_train_load_parts(tg_ctx *ctx, const char *path, const tg_train_part *parts, int nparts, tg_meta *meta) {
    return load_parts(ctx, __func__, path, parts, nparts, meta);
}

tg_status tg_train_load(tg_ctx *ctx, const char *path, tg_params *params, tg_optim *optim, tg_meta *meta) {
    tg_train_part part = {NULL, params, optim, NULL};
    return load_parts(ctx, __func__, path, &part, 1, meta);
}

/* ---- the loss log of a resumed run ----------------------------------------------- */

/* The rows of DIR/NAME.dat (a regular file whose header names colnames)
 * with a step <= step, as ncols doubles each, into *rows / *nrows. A
 * missing or other file gives no rows; a line that does not parse (the
 * half-written last row of a killed run) is skipped. */
static tg_status read_rows(const char *dir, const char *name, int ncols, const char *const *colnames, int64_t step,
                           double **rows, size_t *nrows) {
    *rows = NULL;
    *nrows = 0;
    size_t plen = strlen(dir) + strlen(name) + 6;
    char *path = malloc(plen);
    if (!path) return TG_ERR_OOM;
    snprintf(path, plen, "%s/%s.dat", dir, name);
    int fd = tg_open_regular(path, NULL, 0); /* a pipe would block, a device never end */
    free(path);
    FILE *f = fd >= 0 ? fdopen(fd, "r") : NULL;
    if (!f) {
        if (fd >= 0) close(fd);
        return TG_OK;
    }
    tg_status st = TG_OK;
    char *line = NULL;
    size_t cap = 0, have = 0;
    bool header = false;
    ssize_t n;
    while ((n = getline(&line, &cap, f)) > 0) {
        line[strcspn(line, "\n")] = '\0';
        if (!header) { /* "# step loss ...": the same columns, or no rows */
            const char *s = line;
            header = *s++ == '#';
            for (int c = 0; header && c < ncols; c++) {
                size_t k = strlen(colnames[c]);
                header = *s++ == ' ' && strncmp(s, colnames[c], k) == 0;
                s += header ? k : 0;
            }
            if (!header || *s) break;
            continue;
        }
        double v[64];
        const char *s = line;
        int c = 0;
        for (char *end; c < ncols && c < 64; c++, s = end) {
            v[c] = strtod(s, &end);
            if (end == s) break;
        }
        if (c < ncols || *s || !(v[0] <= (double)step)) continue;
        if (*nrows == have) {
            have = have ? 2 * have : 256;
            double *r = realloc(*rows, have * (size_t)ncols * sizeof *r);
            if (!r) {
                st = TG_ERR_OOM;
                break;
            }
            *rows = r;
        }
        memcpy(*rows + *nrows * (size_t)ncols, v, (size_t)ncols * sizeof *v);
        (*nrows)++;
    }
    free(line);
    fclose(f);
    return st;
}

tg_status tg_plot_open_resume(tg_plot **out, const char *dir, const char *name, int ncols, const char *const *colnames,
                              int64_t step) {
    if (!out) return TG_ERR_NULL;
    *out = NULL;
    if (!dir || !name || !colnames) return TG_ERR_NULL;
    if (ncols < 2 || ncols > 64) return TG_ERR_VALUE;
    for (int c = 0; c < ncols; c++)
        if (!colnames[c]) return TG_ERR_NULL;
    double *rows = NULL;
    size_t nrows = 0;
    /* Read before tg_plot_open replaces the file. */
    tg_status st = step > 0 ? read_rows(dir, name, ncols, colnames, step, &rows, &nrows) : TG_OK;
    errno = 0; /* so after a failure errno tells tg_plot_open's, not a missing old log */
    if (st == TG_OK) st = tg_plot_open(out, dir, name, ncols, colnames);
    for (size_t i = 0; i < nrows && st == TG_OK; i++) st = tg_plot_row(*out, rows + i * (size_t)ncols);
    if (st != TG_OK && *out) {
        tg_plot_close_data(*out);
        *out = NULL;
    }
    free(rows);
    return st;
}

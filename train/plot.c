/* Training-log plots: NAME.dat (one row per step), NAME.gp (a gnuplot
 * script), NAME.png (rendered by gnuplot when it is installed).
 *
 * The data file is the record that matters: it is flushed after every row,
 * so a run that crashes keeps every finished row (flushed to the kernel,
 * not fsync'ed: a power cut may still lose the tail). The script is written
 * to live beside its data and refers to it by file name, so the folder can
 * be moved and rendered later with `cd DIR && gnuplot NAME.gp`. Series from
 * data files in other folders are referred to by absolute path. */
#define _XOPEN_SOURCE 700

#include "train/gnuplot.h"

#include "tapegrad/io.h" /* tg_open_regular */

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TG_PLOT_MAX_COLS 64
#define TG_PLOT_MAX_SERIES 64

struct tg_plot {
    FILE *f;
    char *dir;
    char *name;
    char *dat; /* "DIR/NAME.dat" */
    int ncols;
    char **colnames; /* ncols names */
    int64_t rows;
    tg_status err; /* first write error; later rows return it too */
};

/* One curve as written into the script: file is relative to the script's
 * folder (a bare file name) or absolute. */
typedef struct plot_curve {
    const char *file;
    int xcol, ycol;
    const char *label;
} plot_curve;

/* A file name: no '/', not "." or "..", no leading '-' (gnuplot would
 * take it for an option). */
static bool name_ok(const char *name) {
    return tg_plot_path_ok(name) && !strchr(name, '/') && strcmp(name, ".") != 0 && strcmp(name, "..") != 0 &&
           name[0] != '-';
}

/* fopen(path, "w") that never blocks: a pipe (FIFO) at the path with no
 * reader fails at once (ENXIO) instead of stopping the run until one
 * comes. NULL with errno set on failure. */
static FILE *create_file(const char *path) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NONBLOCK, 0666);
    int flags = fd >= 0 ? fcntl(fd, F_GETFL) : -1;
    FILE *f = flags >= 0 && fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) == 0 ? fdopen(fd, "w") : NULL;
    if (!f && fd >= 0) {
        int err = errno;
        close(fd);
        errno = err;
    }
    return f;
}

/* A malloc'd copy of dir without trailing slashes ("out/" -> "out"; "/"
 * stays), so the paths we build and print read cleanly. */
static char *trimmed_dir(const char *dir) {
    char *d = tg_plot_concat(1, dir);
    if (!d) return NULL;
    size_t n = strlen(d);
    while (n > 1 && d[n - 1] == '/') d[--n] = '\0';
    return d;
}

static bool colname_ok(const char *s) {
    if (!*s || !tg_plot_label_ok(s)) return false;
    return strpbrk(s, " ") == NULL;
}

static void plot_free(tg_plot *p) {
    if (!p) return;
    if (p->colnames)
        for (int i = 0; i < p->ncols; i++) free(p->colnames[i]);
    free(p->colnames);
    free(p->dir);
    free(p->name);
    free(p->dat);
    free(p);
}

tg_status tg_plot_open(tg_plot **out, const char *dir, const char *name, int ncols, const char *const *colnames) {
    if (!out) return TG_ERR_NULL;
    *out = NULL;
    if (!dir || !name || !colnames) return TG_ERR_NULL;
    if (!tg_plot_path_ok(dir) || !name_ok(name)) return TG_ERR_VALUE;
    if (ncols < 2 || ncols > TG_PLOT_MAX_COLS) return TG_ERR_VALUE;
    for (int i = 0; i < ncols; i++) {
        if (!colnames[i]) return TG_ERR_NULL;
        if (!colname_ok(colnames[i])) return TG_ERR_VALUE;
    }

    tg_plot *p = calloc(1, sizeof *p);
    if (!p) return TG_ERR_OOM;
    p->ncols = ncols;
    p->dir = trimmed_dir(dir);
    p->name = tg_plot_concat(1, name);
    p->dat = p->dir ? tg_plot_concat(4, p->dir, strcmp(p->dir, "/") ? "/" : "", name, ".dat") : NULL;
    p->colnames = calloc((size_t)ncols, sizeof *p->colnames);
    bool oom = !p->dir || !p->name || !p->dat || !p->colnames;
    for (int i = 0; !oom && i < ncols; i++) oom = !(p->colnames[i] = tg_plot_concat(1, colnames[i]));
    if (oom) {
        plot_free(p);
        return TG_ERR_OOM;
    }

    tg_status st = tg_plot_mkdirs(p->dir);
    if (st != TG_OK) {
        plot_free(p);
        return st;
    }
    p->f = create_file(p->dat);
    if (!p->f) {
        plot_free(p);
        return TG_ERR_IO;
    }
    /* "# step loss lr": a comment for gnuplot, a header for people. */
    fputc('#', p->f);
    for (int i = 0; i < ncols; i++) fprintf(p->f, " %s", colnames[i]);
    fputc('\n', p->f);
    if (fflush(p->f) != 0 || ferror(p->f)) {
        fclose(p->f);
        plot_free(p);
        return TG_ERR_IO;
    }
    *out = p;
    return TG_OK;
}

tg_status tg_plot_row(tg_plot *p, const double *values) {
    if (!p || !values) return TG_ERR_NULL;
    if (p->err != TG_OK) return p->err;
    for (int i = 0; i < p->ncols; i++) {
        if (i) fputc(' ', p->f);
        /* NaN and infinities: "NaN", declared missing in the script, so
         * the curve shows a gap instead of breaking the autoscale. */
        if (isfinite(values[i])) fprintf(p->f, "%.10g", values[i]);
        else fputs("NaN", p->f);
    }
    fputc('\n', p->f);
    if (fflush(p->f) != 0 || ferror(p->f)) {
        p->err = TG_ERR_IO;
        return p->err;
    }
    p->rows++;
    return TG_OK;
}

const char *tg_plot_dat_path(const tg_plot *p) { return p ? p->dat : NULL; }

static bool style_ok(const tg_plot_style *s) {
    if (!s) return true;
    if (s->title && !tg_plot_label_ok(s->title)) return false;
    if (s->xlabel && !tg_plot_label_ok(s->xlabel)) return false;
    if (s->ylabel && !tg_plot_label_ok(s->ylabel)) return false;
    return s->width >= 0 && s->height >= 0 && s->width <= 20000 && s->height <= 20000;
}

/* Writes DIR/NAME.gp drawing the curves into NAME.png. Labels the style
 * leaves NULL get the given defaults. */
static tg_status write_script(const char *dir, const char *name, const tg_plot_style *style, const char *def_xlabel,
                              const plot_curve *curves, int n) {
    static const tg_plot_style no_style;
    if (!style) style = &no_style;
    const char *title = style->title ? style->title : name;
    const char *xlabel = style->xlabel ? style->xlabel : def_xlabel;
    const char *ylabel = style->ylabel ? style->ylabel : n == 1 ? curves[0].label : "value";

    char *gp_path = tg_plot_concat(4, dir, "/", name, ".gp");
    char *png = tg_plot_concat(2, name, ".png");
    if (!gp_path || !png) {
        free(gp_path);
        free(png);
        return TG_ERR_OOM;
    }
    FILE *f = create_file(gp_path);
    free(gp_path);
    if (!f) {
        free(png);
        return TG_ERR_IO;
    }
    fprintf(f,
            "# %s.gp, written by tapegrad: draws %s.png from the data beside it.\n"
            "# Render it from this folder with: gnuplot '%s.gp'\n",
            name, name, name);
    tg_status st = tg_plot_write_preamble(f, png, style->width, style->height);
    free(png);
    fputs("set datafile missing \"NaN\"\n", f);
    fputs("set title ", f);
    tg_plot_put_label(f, title);
    fputs("\nset xlabel ", f);
    tg_plot_put_label(f, xlabel);
    fputs("\nset ylabel ", f);
    tg_plot_put_label(f, ylabel);
    fputs("\nset key top right\nset grid\n", f);
    /* %g: "0.01", not gnuplot's "0.010000" on a log axis. */
    if (style->logy) fputs("set logscale y\nset format y '%g'\n", f);
    fputs("plot ", f);
    for (int i = 0; i < n; i++) {
        fprintf(f, "%s'%s' using %d:%d with lines lw 2 title ", i ? ", \\\n     " : "", curves[i].file, curves[i].xcol,
                curves[i].ycol);
        tg_plot_put_label(f, curves[i].label);
    }
    fputc('\n', f);
    if (ferror(f) && st == TG_OK) st = TG_ERR_IO;
    if (fclose(f) != 0 && st == TG_OK) st = TG_ERR_IO;
    return st;
}

/* A PNG is the signature, then chunks (4-byte length, 4-byte type, data,
 * 4-byte CRC), the last of which is IEND: no data, so always these 12
 * bytes. gnuplot writes the file front to back and IEND last, and exits 0
 * even when a write failed (a full disk), so a picture whose last 12 bytes
 * are not IEND was cut short. */
bool tg_plot_png_complete(const char *path) {
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    static const unsigned char iend[12] = {0, 0, 0, 0, 'I', 'E', 'N', 'D', 0xae, 0x42, 0x60, 0x82};
    int fd = path ? tg_open_regular(path, NULL, 0) : -1;
    if (fd < 0) return false;
    unsigned char head[8], tail[12];
    struct stat sb;
    bool ok = fstat(fd, &sb) == 0 && sb.st_size >= (off_t)(sizeof sig + sizeof iend) &&
              pread(fd, head, sizeof head, 0) == (ssize_t)sizeof head &&
              pread(fd, tail, sizeof tail, sb.st_size - (off_t)sizeof tail) == (ssize_t)sizeof tail &&
              memcmp(head, sig, sizeof sig) == 0 && memcmp(tail, iend, sizeof iend) == 0;
    close(fd);
    return ok;
}

/* Removes a stale NAME.png, renders NAME.gp, and checks the picture. */
static tg_status render(const char *dir, const char *name, bool *rendered, char *msg, size_t msgsize) {
    char *gp = tg_plot_concat(2, name, ".gp");
    char *png = tg_plot_concat(4, dir, "/", name, ".png");
    if (!gp || !png) {
        free(gp);
        free(png);
        tg_plot_msgf(msg, msgsize, "out of memory");
        return TG_ERR_OOM;
    }
    /* The picture is current or absent, never left over from an old run. */
    unlink(png);
    bool done = false;
    tg_status st = tg_plot_run_gnuplot(dir, gp, &done, msg, msgsize);
    if (st != TG_OK) unlink(png); /* gnuplot opened it at `set output` */
    if (st == TG_OK && done) {
        struct stat sb;
        bool none = stat(png, &sb) != 0 || sb.st_size == 0;
        if (none || !tg_plot_png_complete(png)) {
            if (none) tg_plot_msgf(msg, msgsize, "gnuplot ran %s/%s but wrote no %s", dir, gp, png);
            else
                tg_plot_msgf(msg, msgsize,
                             "gnuplot ran %s/%s but left %s incomplete (%lld bytes, not ending with the PNG's "
                             "IEND chunk: is the disk full?); removed it",
                             dir, gp, png, (long long)sb.st_size);
            unlink(png);
            st = TG_ERR_IO;
            done = false;
        } else {
            tg_plot_msgf(msg, msgsize, "wrote %s", png);
        }
    }
    if (rendered) *rendered = done;
    free(gp);
    free(png);
    return st;
}

tg_status tg_plot_close_data(tg_plot *p) {
    if (!p) return TG_ERR_NULL;
    tg_status st = p->err;
    if (fclose(p->f) != 0 && st == TG_OK) st = TG_ERR_IO;
    plot_free(p);
    return st;
}

tg_status tg_plot_close(tg_plot *p, const tg_plot_style *style, bool *rendered, char *msg, size_t msgsize) {
    if (rendered) *rendered = false;
    if (!p) {
        tg_plot_msgf(msg, msgsize, "tg_plot_close: plot is NULL");
        return TG_ERR_NULL;
    }
    tg_status st = p->err;
    if (fclose(p->f) != 0 && st == TG_OK) st = TG_ERR_IO;
    p->f = NULL;
    if (st != TG_OK) {
        tg_plot_msgf(msg, msgsize, "tg_plot_close: could not write %s", p->dat);
        plot_free(p);
        return st;
    }
    if (!style_ok(style)) {
        tg_plot_msgf(msg, msgsize,
                     "tg_plot_close: a style label holds a control character, or the size "
                     "is outside 0..20000");
        plot_free(p);
        return TG_ERR_VALUE;
    }

    plot_curve curves[TG_PLOT_MAX_COLS];
    char *file = tg_plot_concat(2, p->name, ".dat");
    if (!file) {
        plot_free(p);
        tg_plot_msgf(msg, msgsize, "out of memory");
        return TG_ERR_OOM;
    }
    for (int i = 1; i < p->ncols; i++) curves[i - 1] = (plot_curve){file, 1, i + 1, p->colnames[i]};
    st = write_script(p->dir, p->name, style, p->colnames[0], curves, p->ncols - 1);
    free(file);
    if (st != TG_OK) {
        tg_plot_msgf(msg, msgsize, "tg_plot_close: could not write %s/%s.gp", p->dir, p->name);
    } else if (p->rows == 0) {
        /* gnuplot would fail on an empty file; say why instead. */
        tg_plot_msgf(msg, msgsize, "tg_plot_close: no rows were logged to %s, so there is nothing to draw", p->dat);
        st = TG_ERR_STATE;
    } else {
        st = render(p->dir, p->name, rendered, msg, msgsize);
    }
    plot_free(p);
    return st;
}

/* The folder part of a path ("a/b.dat" -> "a", "b.dat" -> "."), malloc'd. */
static char *dir_of(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return tg_plot_concat(1, ".");
    if (slash == path) return tg_plot_concat(1, "/");
    char *d = tg_plot_concat(1, path);
    if (d) d[slash - path] = '\0';
    return d;
}

static tg_status overlay(const char *dir, const char *name, const tg_plot_style *style, const tg_plot_series *series,
                         int nseries, bool *rendered, char *msg, size_t msgsize) {
    if (rendered) *rendered = false;
    if (!dir || !name || !series) {
        tg_plot_msgf(msg, msgsize, "tg_plot_overlay: %s is NULL", !dir ? "dir" : !name ? "name" : "series");
        return TG_ERR_NULL;
    }
    if (!tg_plot_path_ok(dir) || !name_ok(name)) {
        tg_plot_msgf(msg, msgsize,
                     "tg_plot_overlay: dir or name is empty or holds a quote, a control "
                     "character, or the name a '/' or a leading '-'");
        return TG_ERR_VALUE;
    }
    if (nseries < 1 || nseries > TG_PLOT_MAX_SERIES) {
        tg_plot_msgf(msg, msgsize, "tg_plot_overlay: nseries %d is not in 1..%d", nseries, TG_PLOT_MAX_SERIES);
        return TG_ERR_VALUE;
    }
    if (!style_ok(style)) {
        tg_plot_msgf(msg, msgsize,
                     "tg_plot_overlay: a style label holds a control character, or the size "
                     "is outside 0..20000");
        return TG_ERR_VALUE;
    }
    for (int i = 0; i < nseries; i++) {
        const tg_plot_series *s = &series[i];
        if (!s->dat || !s->label) {
            tg_plot_msgf(msg, msgsize, "tg_plot_overlay: series %d has a NULL %s", i, !s->dat ? "dat" : "label");
            return TG_ERR_NULL;
        }
        if (!tg_plot_path_ok(s->dat) || !tg_plot_label_ok(s->label) || s->xcol < 0 || s->ycol < 1 || s->xcol > 1000 ||
            s->ycol > 1000) {
            tg_plot_msgf(msg, msgsize,
                         "tg_plot_overlay: series %d: bad path, label or columns (xcol %d, "
                         "ycol %d)",
                         i, s->xcol, s->ycol);
            return TG_ERR_VALUE;
        }
    }

    tg_status st = tg_plot_mkdirs(dir);
    if (st != TG_OK) {
        tg_plot_msgf(msg, msgsize, "tg_plot_overlay: cannot create folder %s", dir);
        return st;
    }

    /* Resolve each data file against the script's folder: a bare file name
     * when it lies beside the script, else its absolute path. */
    plot_curve curves[TG_PLOT_MAX_SERIES];
    char *owned[TG_PLOT_MAX_SERIES] = {0};
    char real_dir[PATH_MAX];
    if (!realpath(dir, real_dir)) {
        tg_plot_msgf(msg, msgsize, "tg_plot_overlay: cannot resolve %s", dir);
        return TG_ERR_IO;
    }
    for (int i = 0; i < nseries && st == TG_OK; i++) {
        char real[PATH_MAX];
        if (!realpath(series[i].dat, real)) {
            tg_plot_msgf(msg, msgsize, "tg_plot_overlay: cannot read data file %s: %s", series[i].dat, strerror(errno));
            st = TG_ERR_IO;
            break;
        }
        char *folder = dir_of(real);
        if (!folder) {
            st = TG_ERR_OOM;
            break;
        }
        bool beside = strcmp(folder, real_dir) == 0;
        free(folder);
        owned[i] = tg_plot_concat(1, beside ? strrchr(real, '/') + 1 : real);
        if (!owned[i]) {
            st = TG_ERR_OOM;
            break;
        }
        if (!tg_plot_path_ok(owned[i])) {
            tg_plot_msgf(msg, msgsize, "tg_plot_overlay: %s resolves to a path with a quote", series[i].dat);
            st = TG_ERR_VALUE;
            break;
        }
        curves[i] = (plot_curve){owned[i], series[i].xcol ? series[i].xcol : 1, series[i].ycol, series[i].label};
    }
    if (st == TG_OK) {
        st = write_script(dir, name, style, "step", curves, nseries);
        if (st != TG_OK) tg_plot_msgf(msg, msgsize, "tg_plot_overlay: could not write %s/%s.gp", dir, name);
        else st = render(dir, name, rendered, msg, msgsize);
    } else if (st == TG_ERR_OOM) {
        tg_plot_msgf(msg, msgsize, "out of memory");
    }
    for (int i = 0; i < nseries; i++) free(owned[i]);
    return st;
}

tg_status tg_plot_overlay(const char *dir, const char *name, const tg_plot_style *style, const tg_plot_series *series,
                          int nseries, bool *rendered, char *msg, size_t msgsize) {
    if (!dir) return overlay(dir, name, style, series, nseries, rendered, msg, msgsize);
    char *d = trimmed_dir(dir);
    if (!d) {
        if (rendered) *rendered = false;
        tg_plot_msgf(msg, msgsize, "out of memory");
        return TG_ERR_OOM;
    }
    tg_status st = overlay(d, name, style, series, nseries, rendered, msg, msgsize);
    free(d);
    return st;
}

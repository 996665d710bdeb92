/* Internal helpers shared by train/plot.c and train/gnuplot.c (not public API).
 *
 * Paths and labels end up inside gnuplot scripts ('single-quoted' strings)
 * and inside the shell command we print when gnuplot is missing. Rather than
 * escaping for two languages, paths with quotes or control characters are
 * refused (TG_ERR_VALUE); labels may hold a single quote, doubled in the
 * script as gnuplot wants ('it''s'). */
#ifndef TG_IO_GNUPLOT_H
#define TG_IO_GNUPLOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "tapegrad/train.h"

/* Default PNG size in pixels. */
#define TG_PLOT_DEFAULT_WIDTH 800
#define TG_PLOT_DEFAULT_HEIGHT 500

/* True when s is a usable path: non-empty, no ' " ` and no control
 * characters (newline, tab, ...). */
bool tg_plot_path_ok(const char *s);
/* True when s can be written as a gnuplot label: no control characters. */
bool tg_plot_label_ok(const char *s);
/* Writes s to f as a gnuplot single-quoted string ('' for each '). */
void tg_plot_put_label(FILE *f, const char *s);

/* snprintf into msg (when msg != NULL and msgsize > 0); always terminated. */
void tg_plot_msgf(char *msg, size_t msgsize, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* A malloc'd copy of the concatenation of the n strings (NULL if out of
 * memory). */
char *tg_plot_concat(int n, ...);

/* Creates dir and its missing parents (like mkdir -p). TG_ERR_IO on failure,
 * TG_ERR_OOM if out of memory. */
tg_status tg_plot_mkdirs(const char *dir);

/* Runs the script `gp_name` with gnuplot, in directory `dir` (so relative
 * paths in the script are relative to it). *rendered tells whether gnuplot
 * ran and succeeded. When gnuplot is missing: TG_OK, *rendered = false and
 * msg holds the command to run later. When gnuplot fails: TG_ERR_IO and msg
 * holds its first error line. */
tg_status tg_plot_run_gnuplot(const char *dir, const char *gp_name, bool *rendered, char *msg, size_t msgsize);

#endif /* TG_IO_GNUPLOT_H */

/* Running gnuplot: finding it in PATH, asking it for its terminals, and
 * rendering a script in its own directory.
 *
 * gnuplot runs as a child process (fork + execv of the absolute path found
 * in PATH; no shell, so no quoting issue on our side). Its stdin is
 * /dev/null, so a `pause` in a script cannot hang us; its stdout and stderr
 * are captured, never shown, because the library does not print unasked:
 * when gnuplot fails, its last error line goes into the caller's message.
 * Between fork and exec the child only makes async-signal-safe calls, so
 * this is safe in a program that runs OpenMP threads. */
#define _XOPEN_SOURCE 700

#include "train/gnuplot.h"

#include "tapegrad/io.h" /* tg_open_regular */

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* Small string helpers                                                     */
/* ------------------------------------------------------------------------ */

bool tg_plot_label_ok(const char *s) {
    if (!s) return false;
    for (const unsigned char *c = (const unsigned char *)s; *c; c++)
        if (*c < 0x20 || *c == 0x7f) return false;
    return true;
}

bool tg_plot_path_ok(const char *s) {
    if (!s || !*s || !tg_plot_label_ok(s)) return false;
    return strpbrk(s, "'\"`") == NULL;
}

void tg_plot_put_label(FILE *f, const char *s) {
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'') fputc('\'', f); /* gnuplot: '' inside '...' is one ' */
        fputc(*s, f);
    }
    fputc('\'', f);
}

void tg_plot_msgf(char *msg, size_t msgsize, const char *fmt, ...) {
    if (!msg || msgsize == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, msgsize, fmt, ap);
    va_end(ap);
}

char *tg_plot_concat(int n, ...) {
    va_list ap;
    size_t len = 0;
    va_start(ap, n);
    for (int i = 0; i < n; i++) len += strlen(va_arg(ap, const char *));
    va_end(ap);
    char *s = malloc(len + 1);
    if (!s) return NULL;
    char *w = s;
    va_start(ap, n);
    for (int i = 0; i < n; i++) {
        const char *part = va_arg(ap, const char *);
        size_t k = strlen(part);
        memcpy(w, part, k);
        w += k;
    }
    va_end(ap);
    *w = '\0';
    return s;
}

tg_status tg_plot_mkdirs(const char *dir) {
    char *buf = tg_plot_concat(1, dir);
    if (!buf) return TG_ERR_OOM;
    /* mkdir each prefix ending before a '/', then the whole path. */
    for (char *c = buf + 1;; c++) {
        if (*c == '/' || *c == '\0') {
            char saved = *c;
            *c = '\0';
            if (mkdir(buf, 0777) != 0 && errno != EEXIST) {
                free(buf);
                return TG_ERR_IO;
            }
            *c = saved;
            if (saved == '\0') break;
        }
    }
    free(buf);
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return TG_ERR_IO;
    return TG_OK;
}

/* ------------------------------------------------------------------------ */
/* Finding gnuplot                                                          */
/* ------------------------------------------------------------------------ */

/* *out = malloc'd absolute (or PATH-relative) path of gnuplot, or NULL when
 * there is none (TG_ERR_IO). An empty PATH entry means the current folder,
 * as for execvp; an unset PATH means /usr/bin:/bin. */
static tg_status find_gnuplot(char **out) {
    *out = NULL;
    const char *path = getenv("PATH");
    if (!path) path = "/usr/bin:/bin";
    const char *seg = path;
    for (;;) {
        const char *end = strchr(seg, ':');
        size_t len = end ? (size_t)(end - seg) : strlen(seg);
        char *cand = malloc(len + sizeof "/gnuplot" + 1);
        if (!cand) return TG_ERR_OOM;
        if (len == 0) {
            strcpy(cand, "./gnuplot");
        } else {
            memcpy(cand, seg, len);
            strcpy(cand + len, "/gnuplot");
        }
        struct stat st;
        if (stat(cand, &st) == 0 && S_ISREG(st.st_mode) && access(cand, X_OK) == 0) {
            *out = cand;
            return TG_OK;
        }
        free(cand);
        if (!end) break;
        seg = end + 1;
    }
    return TG_ERR_IO;
}

tg_status tg_gnuplot_find(char *path, size_t size) {
    char *found = NULL;
    tg_status st = find_gnuplot(&found);
    if (st != TG_OK) return st;
    if (path) {
        if (strlen(found) >= size) {
            free(found);
            return TG_ERR_VALUE;
        }
        strcpy(path, found);
    }
    free(found);
    return TG_OK;
}

/* ------------------------------------------------------------------------ */
/* Running a child and capturing its output                                 */
/* ------------------------------------------------------------------------ */

/* Most output we keep from a child: the terminal list is ~4 KB, errors are
 * a few lines. The rest is read and dropped so the child never blocks. */
#define TG_CAPTURE_MAX (256 * 1024)

/* Runs argv[0] (a path) with argv, in folder cwd (NULL: ours), stdin from
 * /dev/null, stdout and stderr captured into *out (malloc'd, terminated;
 * the caller frees it). *exit_status is the exit code, or -1 when the
 * child died from a signal. Returns TG_OK when the child ran to the end. */
static tg_status run_capture(char *const argv[], const char *cwd, char **out, int *exit_status) {
    *out = NULL;
    *exit_status = -1;
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    if (!buf) return TG_ERR_OOM;

    int fds[2];
    if (pipe(fds) != 0) {
        free(buf);
        return TG_ERR_IO;
    }
    fcntl(fds[0], F_SETFD, FD_CLOEXEC);
    fcntl(fds[1], F_SETFD, FD_CLOEXEC);

    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        free(buf);
        return TG_ERR_IO;
    }
    if (pid == 0) {
        /* Child: async-signal-safe calls only, then exec. dup2 clears
         * FD_CLOEXEC on the copies, so 1 and 2 survive the exec. */
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0) dup2(devnull, 0);
        dup2(fds[1], 1);
        dup2(fds[1], 2);
        if (cwd && chdir(cwd) != 0) _exit(126);
        execv(argv[0], argv);
        _exit(127);
    }
    close(fds[1]);

    tg_status st = TG_OK;
    for (;;) {
        char chunk[4096];
        ssize_t n = read(fds[0], chunk, sizeof chunk);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        size_t keep = (size_t)n;
        if (len + keep > TG_CAPTURE_MAX) keep = TG_CAPTURE_MAX - len;
        if (keep > 0 && len + keep + 1 > cap) {
            size_t ncap = cap;
            while (len + keep + 1 > ncap) ncap *= 2;
            char *nb = realloc(buf, ncap);
            if (!nb) {
                st = TG_ERR_OOM;
                keep = 0; /* keep draining so the child can finish */
            } else {
                buf = nb;
                cap = ncap;
            }
        }
        memcpy(buf + len, chunk, keep);
        len += keep;
    }
    close(fds[0]);
    buf[len] = '\0';

    int wstatus = 0;
    pid_t w;
    do {
        w = waitpid(pid, &wstatus, 0);
    } while (w < 0 && errno == EINTR);
    if (w < 0) {
        /* ECHILD: the caller ignores SIGCHLD, so the status is lost. */
        *exit_status = errno == ECHILD ? 0 : -1;
        if (errno != ECHILD && st == TG_OK) st = TG_ERR_IO;
    } else if (WIFEXITED(wstatus)) {
        *exit_status = WEXITSTATUS(wstatus);
    }
    *out = buf;
    return st;
}

/* The last non-empty line of text, copied into line[size]. gnuplot puts
 * the reason last: `"x.gp" line 3: unrecognized plot type`. */
static void last_line(char *line, size_t size, const char *text) {
    const char *end = text + strlen(text);
    while (end > text && (end[-1] == '\n' || end[-1] == '\r' || end[-1] == ' ')) end--;
    const char *start = end;
    while (start > text && start[-1] != '\n') start--;
    size_t n = (size_t)(end - start);
    if (n >= size) n = size - 1;
    memcpy(line, start, n);
    line[n] = '\0';
}

/* ------------------------------------------------------------------------ */
/* Public: terminals, rendering, preamble                                   */
/* ------------------------------------------------------------------------ */

tg_status tg_gnuplot_has_terminal(const char *term, bool *has) {
    if (!term || !has) return TG_ERR_NULL;
    *has = false;
    if (!*term) return TG_ERR_VALUE;
    for (const char *c = term; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '_')) return TG_ERR_VALUE;

    char *gnuplot = NULL;
    tg_status st = find_gnuplot(&gnuplot);
    if (st != TG_OK) return st;
    char arg_e[] = "-e", arg_cmd[] = "set terminal";
    char *argv[] = {gnuplot, arg_e, arg_cmd, NULL};
    char *text = NULL;
    int code = -1;
    st = run_capture(argv, NULL, &text, &code);
    free(gnuplot);
    if (st == TG_OK && code != 0) st = TG_ERR_IO;
    if (st == TG_OK) {
        /* Lines look like "       pngcairo  png terminal based on cairo":
         * the terminal's name is the first word. */
        size_t tlen = strlen(term);
        for (const char *line = text; *line;) {
            const char *w = line;
            while (*w == ' ' || *w == '\t') w++;
            if (strncmp(w, term, tlen) == 0 &&
                (w[tlen] == ' ' || w[tlen] == '\t' || w[tlen] == '\n' || w[tlen] == '\0')) {
                *has = true;
                break;
            }
            const char *nl = strchr(line, '\n');
            if (!nl) break;
            line = nl + 1;
        }
    }
    free(text);
    return st;
}

tg_status tg_plot_run_gnuplot(const char *dir, const char *gp_name, bool *rendered, char *msg, size_t msgsize) {
    if (rendered) *rendered = false;
    /* "./-x.gp", so gnuplot does not take a leading '-' for an option. */
    char *name = tg_plot_concat(2, gp_name[0] == '-' ? "./" : "", gp_name);
    if (!name) {
        tg_plot_msgf(msg, msgsize, "out of memory");
        return TG_ERR_OOM;
    }
    char *gnuplot = NULL;
    tg_status st = find_gnuplot(&gnuplot);
    if (st == TG_ERR_OOM) {
        free(name);
        tg_plot_msgf(msg, msgsize, "out of memory");
        return st;
    }
    if (st != TG_OK) {
        tg_plot_msgf(msg, msgsize,
                     "gnuplot is not installed (not found in PATH), so %s/%s was not rendered; "
                     "once it is (e.g. apt-get install gnuplot-nox), run: cd '%s' && gnuplot '%s'",
                     dir, gp_name, dir, name);
        free(name);
        return TG_OK;
    }
    char *argv[] = {gnuplot, name, NULL};
    char *text = NULL;
    int code = -1;
    st = run_capture(argv, dir, &text, &code);
    free(gnuplot);
    free(name);
    if (st != TG_OK) {
        free(text);
        tg_plot_msgf(msg, msgsize, "could not run gnuplot on %s/%s", dir, gp_name);
        return st;
    }
    if (code != 0) {
        char line[512];
        last_line(line, sizeof line, text);
        if (code == 126) tg_plot_msgf(msg, msgsize, "gnuplot could not enter folder '%s'", dir);
        else if (code < 0) tg_plot_msgf(msg, msgsize, "gnuplot was killed by a signal on %s/%s", dir, gp_name);
        else
            tg_plot_msgf(msg, msgsize, "gnuplot failed on %s/%s (exit status %d): %s", dir, gp_name, code,
                         line[0] ? line : "(no output)");
        free(text);
        return TG_ERR_IO;
    }
    free(text);
    if (rendered) *rendered = true;
    tg_plot_msgf(msg, msgsize, "rendered %s/%s", dir, gp_name);
    return TG_OK;
}

tg_status tg_plot_render(const char *gp_path, bool *rendered, char *msg, size_t msgsize) {
    if (rendered) *rendered = false;
    if (!gp_path) {
        tg_plot_msgf(msg, msgsize, "tg_plot_render: gp_path is NULL");
        return TG_ERR_NULL;
    }
    if (!tg_plot_path_ok(gp_path)) {
        tg_plot_msgf(msg, msgsize, "tg_plot_render: path is empty or holds a quote or control character");
        return TG_ERR_VALUE;
    }
    char why[512]; /* gnuplot reads the script whole: a pipe or a device need not end */
    int fd = tg_open_regular(gp_path, why, sizeof why);
    if (fd < 0) {
        tg_plot_msgf(msg, msgsize, "tg_plot_render: %s", why);
        return TG_ERR_IO;
    }
    close(fd);

    /* Split into folder and file name; gnuplot runs in the folder. */
    char *dir = tg_plot_concat(1, gp_path);
    if (!dir) {
        tg_plot_msgf(msg, msgsize, "out of memory");
        return TG_ERR_OOM;
    }
    char *slash = strrchr(dir, '/');
    const char *base;
    const char *folder;
    if (!slash) {
        base = gp_path;
        folder = ".";
    } else {
        base = gp_path + (slash - dir) + 1;
        if (slash == dir) slash[1] = '\0'; /* "/x.gp": folder "/" */
        else *slash = '\0';
        folder = dir;
    }
    if (!*base) {
        free(dir);
        tg_plot_msgf(msg, msgsize, "tg_plot_render: %s names a folder, not a script", gp_path);
        return TG_ERR_VALUE;
    }
    tg_status st = tg_plot_run_gnuplot(folder, base, rendered, msg, msgsize);
    free(dir);
    return st;
}

tg_status tg_plot_write_preamble(FILE *gp, const char *png_name, int width, int height) {
    if (!gp || !png_name) return TG_ERR_NULL;
    if (!tg_plot_path_ok(png_name)) return TG_ERR_VALUE;
    if (width < 0 || height < 0 || width > 20000 || height > 20000) return TG_ERR_VALUE;
    if (width == 0) width = TG_PLOT_DEFAULT_WIDTH;
    if (height == 0) height = TG_PLOT_DEFAULT_HEIGHT;
    /* GPVAL_TERMINALS lists the terminals of the gnuplot running the script
     * (" cairolatex canvas ... pngcairo ... "), so the choice is made where
     * the picture is rendered. noenhanced: labels are plain text, so names
     * like train_loss keep their underscore. */
    fprintf(gp,
            "if (strstrt(GPVAL_TERMINALS, \" pngcairo \") > 0) {\n"
            "    set terminal pngcairo size %d,%d noenhanced font \"sans,10\"\n"
            "} else {\n"
            "    set terminal png size %d,%d noenhanced\n"
            "}\n"
            "set encoding utf8\n"
            "set output '%s'\n",
            width, height, width, height, png_name);
    return ferror(gp) ? TG_ERR_IO : TG_OK;
}

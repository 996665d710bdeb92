/* Tests for train/plot.c and train/gnuplot.c: data files, gnuplot scripts, PNG
 * rendering with and without gnuplot, and argument checking.
 *
 * Each test works in its own mkdtemp folder, removed at the end. "gnuplot
 * missing" is simulated by pointing PATH at an empty folder; a fake gnuplot
 * (a shell script) checks terminal detection. The PNG tests need the real
 * gnuplot (make test and CI install gnuplot-nox); without it they say so on
 * stderr and check the no-gnuplot behaviour instead. */
#define _XOPEN_SOURCE 700

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */
/* ------------------------------------------------------------------------ */

static char tmp[256];         /* this test's folder */
static char saved_path[8192]; /* PATH before the test */

static void setup(void) {
    tg_test_make_tmpdir(tmp, sizeof tmp, "tg_test_plot");
    const char *path = getenv("PATH");
    snprintf(saved_path, sizeof saved_path, "%s", path ? path : "/usr/bin:/bin");
}

static void teardown(void) {
    setenv("PATH", saved_path, 1);
    tg_test_remove_tree(tmp);
}

/* tmp + "/" + rel, in a static rotating buffer (4 live at once). */
static const char *in_tmp(const char *rel) {
    static char bufs[4][512];
    static int k;
    char *b = bufs[k++ % 4];
    snprintf(b, 512, "%s/%s", tmp, rel);
    return b;
}

static bool exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static bool have_gnuplot(void) {
    bool ok = tg_gnuplot_find(NULL, 0) == TG_OK;
    if (!ok) fprintf(stderr, "test_plot: gnuplot not installed; PNG checks skipped\n");
    return ok;
}

/* A real PNG: the 8-byte signature and more than 1 KB (a drawn plot). */
static void assert_png(const char *path) {
    size_t size = 0;
    char *data = tg_test_read_file(path, &size);
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    ck_assert_msg(size >= 8 && memcmp(data, sig, 8) == 0, "%s lacks the PNG signature", path);
    ck_assert_msg(size > 1024, "%s is only %zu bytes", path, size);
    free(data);
}

/* Counts the whitespace-separated fields of a line. */
static int count_fields(const char *line) {
    int n = 0;
    bool in = false;
    for (; *line && *line != '\n'; line++) {
        bool sp = *line == ' ' || *line == '\t';
        if (!sp && !in) n++;
        in = !sp;
    }
    return n;
}

/* A 3-column log (step, loss, lr) of `rows` rows of a decaying loss. */
static tg_plot *make_log(const char *dir, const char *name, int rows, double scale) {
    static const char *const cols[] = {"step", "loss", "lr"};
    tg_plot *p = NULL;
    ck_assert_int_eq(tg_plot_open(&p, dir, name, 3, cols), TG_OK);
    ck_assert_ptr_nonnull(p);
    for (int i = 1; i <= rows; i++) {
        double v[3] = {i, scale * 2.0 * exp(-0.05 * i) + 0.01, 1e-3 * (1.0 - (double)i / rows)};
        ck_assert_int_eq(tg_plot_row(p, v), TG_OK);
    }
    return p;
}

/* Puts a fake `gnuplot` shell script into folder dir: it lists only the
 * png terminal, as a gnuplot built without cairo would. */
static void write_fake_gnuplot(const char *dir) {
    char path[600];
    snprintf(path, sizeof path, "%s/gnuplot", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("#!/bin/sh\n"
          "echo '' >&2\n"
          "echo 'Available terminal types:' >&2\n"
          "echo '             png  PNG images using libgd and TrueType fonts' >&2\n"
          "echo '      postscript  PostScript graphics' >&2\n"
          "exit 0\n",
          f);
    fclose(f);
    ck_assert_int_eq(chmod(path, 0755), 0);
}

/* Puts into folder dir a fake `gnuplot` that draws the output its script
 * names (`set output 'NAME.png'`) as a PNG signature and 300 bytes, then,
 * when `whole`, the IEND chunk that ends every PNG: without it, what a
 * gnuplot that exits 0 after filling the disk leaves. */
static void write_drawing_gnuplot(const char *dir, bool whole) {
    char path[600];
    snprintf(path, sizeof path, "%s/gnuplot", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f,
            "#!/bin/sh\n"
            "PATH=/usr/bin:/bin\n"
            "out=$(sed -n \"s/^set output '\\(.*\\)'$/\\1/p\" \"$1\")\n"
            "printf '\\211PNG\\r\\n\\032\\n' > \"$out\"\n"
            "head -c 300 /dev/zero >> \"$out\"\n"
            "%s"
            "exit 0\n",
            whole ? "printf '\\0\\0\\0\\0IEND\\256B`\\202' >> \"$out\"\n" : "");
    fclose(f);
    ck_assert_int_eq(chmod(path, 0755), 0);
}

/* ------------------------------------------------------------------------ */
/* Data files                                                               */
/* ------------------------------------------------------------------------ */

START_TEST(test_dat_rows_and_columns) {
    static const char *const cols[] = {"step", "train_loss", "val_loss", "lr"};
    const char *dir = in_tmp("a/b/c"); /* nested, created on open */
    tg_plot *p = NULL;
    ck_assert_int_eq(tg_plot_open(&p, dir, "loss", 4, cols), TG_OK);
    ck_assert_str_eq(tg_plot_dat_path(p), in_tmp("a/b/c/loss.dat"));
    const double rows[5][4] = {{1, 2.5, 2.75, 1e-3},
                               {2, 1.25, 1.5, 1e-3},
                               {3, NAN, 1.0, 5e-4},
                               {4, 0.5, INFINITY, 2.5e-4},
                               {5, 0.125, 0.3333333333333333, 0}};
    for (int i = 0; i < 5; i++) ck_assert_int_eq(tg_plot_row(p, rows[i]), TG_OK);

    /* Flushed per row: the rows are on disk before the file is closed. */
    char *text = tg_test_read_file(in_tmp("a/b/c/loss.dat"), NULL);
    ck_assert_ptr_nonnull(strstr(text, "5 0.125 0.3333333333 0\n"));
    free(text);
    ck_assert_int_eq(tg_plot_close_data(p), TG_OK);

    text = tg_test_read_file(in_tmp("a/b/c/loss.dat"), NULL);
    ck_assert_msg(strncmp(text, "# step train_loss val_loss lr\n", 30) == 0, "header: %s", text);
    int nrows = 0;
    char *line = strchr(text, '\n') + 1;
    while (*line) {
        ck_assert_int_eq(count_fields(line), 4);
        char *end = line;
        for (int j = 0; j < 4; j++) {
            double v = strtod(end, &end);
            double want = rows[nrows][j];
            if (isfinite(want)) ck_assert_double_eq_tol(v, want, 1e-9 * (fabs(want) + 1e-300));
            else ck_assert_msg(isnan(v), "row %d col %d: non-finite written as NaN", nrows, j);
        }
        nrows++;
        line = strchr(line, '\n') + 1;
    }
    ck_assert_int_eq(nrows, 5);
    ck_assert_ptr_nonnull(strstr(text, "\n3 NaN 1 0.0005\n"));
    free(text);
    /* close_data writes no script and no picture. */
    ck_assert(!exists(in_tmp("a/b/c/loss.gp")));
    ck_assert(!exists(in_tmp("a/b/c/loss.png")));
}
END_TEST

START_TEST(test_trailing_slash) {
    char dir[600];
    snprintf(dir, sizeof dir, "%s/out//", tmp);
    tg_plot *p = make_log(dir, "run", 4, 1.0);
    ck_assert_str_eq(tg_plot_dat_path(p), in_tmp("out/run.dat"));
    ck_assert_int_eq(tg_plot_close_data(p), TG_OK);
    ck_assert(exists(in_tmp("out/run.dat")));
}
END_TEST

START_TEST(test_open_replaces_old_file) {
    tg_plot *p = make_log(tmp, "run", 10, 1.0);
    ck_assert_int_eq(tg_plot_close_data(p), TG_OK);
    p = make_log(tmp, "run", 3, 1.0);
    ck_assert_int_eq(tg_plot_close_data(p), TG_OK);
    char *text = tg_test_read_file(in_tmp("run.dat"), NULL);
    int lines = 0;
    for (char *c = text; *c; c++) lines += *c == '\n';
    ck_assert_int_eq(lines, 1 + 3);
    free(text);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Scripts and pictures                                                     */
/* ------------------------------------------------------------------------ */

START_TEST(test_close_renders_png) {
    tg_plot *p = make_log(tmp, "loss", 200, 1.0);
    tg_plot_style style = {
        .title = "Spiral MLP training", .xlabel = "step", .ylabel = "cross-entropy loss", .logy = true};
    bool rendered = true;
    char msg[1024];
    tg_status st = tg_plot_close(p, &style, &rendered, msg, sizeof msg);
    ck_assert_msg(st == TG_OK, "status %d: %s", st, msg);

    char *gp = tg_test_read_file(in_tmp("loss.gp"), NULL);
    tg_test_assert_contains(gp, "set title 'Spiral MLP training'\n", "set xlabel 'step'\n",
                            "set ylabel 'cross-entropy loss'\n", "set logscale y\n", "set key",
                            "set output 'loss.png'\n", "'loss.dat' using 1:2 with lines lw 2 title 'loss'",
                            "'loss.dat' using 1:3 with lines lw 2 title 'lr'", "pngcairo", NULL);
    free(gp);
    ck_assert(exists(in_tmp("loss.dat")));

    if (tg_gnuplot_find(NULL, 0) == TG_OK) {
        ck_assert(rendered);
        ck_assert_ptr_nonnull(strstr(msg, in_tmp("loss.png")));
        assert_png(in_tmp("loss.png"));
    } else {
        ck_assert(!rendered);
    }
}
END_TEST

START_TEST(test_close_default_style) {
    tg_plot *p = make_log(tmp, "train", 20, 1.0);
    char msg[1024];
    ck_assert_int_eq(tg_plot_close(p, NULL, NULL, msg, sizeof msg), TG_OK);
    char *gp = tg_test_read_file(in_tmp("train.gp"), NULL);
    /* Defaults: the name as title, the step column as x label, "value" for
     * two series, a legend entry per column; linear y. */
    tg_test_assert_contains(gp, "set title 'train'\n", "set xlabel 'step'\n", "set ylabel 'value'\n", "title 'loss'",
                            "title 'lr'", NULL);
    ck_assert_ptr_null(strstr(gp, "logscale"));
    free(gp);
}
END_TEST

START_TEST(test_labels_with_quotes) {
    static const char *const cols[] = {"epoch", "it's"};
    tg_plot *p = NULL;
    ck_assert_int_eq(tg_plot_open(&p, tmp, "q", 2, cols), TG_OK);
    for (int i = 0; i < 10; i++) {
        double v[2] = {i, 10 - i};
        ck_assert_int_eq(tg_plot_row(p, v), TG_OK);
    }
    tg_plot_style style = {.title = "Karpathy's \"toy\" run", .width = 640, .height = 400};
    bool rendered = false;
    char msg[1024];
    ck_assert_int_eq(tg_plot_close(p, &style, &rendered, msg, sizeof msg), TG_OK);
    char *gp = tg_test_read_file(in_tmp("q.gp"), NULL);
    /* the one series names the y axis */
    tg_test_assert_contains(gp, "set title 'Karpathy''s \"toy\" run'\n", "set xlabel 'epoch'\n", "set ylabel 'it''s'\n",
                            "size 640,400", NULL);
    free(gp);
    if (have_gnuplot()) {
        ck_assert_msg(rendered, "%s", msg);
        assert_png(in_tmp("q.png"));
    }
}
END_TEST

START_TEST(test_without_gnuplot_keeps_files_and_says_how) {
    /* First a real render, so a stale picture exists... */
    bool with_gnuplot = have_gnuplot();
    tg_plot *p = make_log(tmp, "loss", 30, 1.0);
    ck_assert_int_eq(tg_plot_close(p, NULL, NULL, NULL, 0), TG_OK);
    ck_assert(exists(in_tmp("loss.png")) == with_gnuplot);

    /* ...then no gnuplot on PATH. */
    mkdir(in_tmp("emptybin"), 0755);
    setenv("PATH", in_tmp("emptybin"), 1);
    ck_assert_int_eq(tg_gnuplot_find(NULL, 0), TG_ERR_IO);

    p = make_log(tmp, "loss", 30, 1.0);
    bool rendered = true;
    char msg[1024] = "";
    tg_status st = tg_plot_close(p, NULL, &rendered, msg, sizeof msg);
    ck_assert_int_eq(st, TG_OK);
    ck_assert(!rendered);
    ck_assert(exists(in_tmp("loss.dat")));
    ck_assert(exists(in_tmp("loss.gp")));
    ck_assert_msg(!exists(in_tmp("loss.png")), "a stale picture was left behind");
    char want[600];
    snprintf(want, sizeof want, "cd '%s' && gnuplot 'loss.gp'", tmp);
    ck_assert_msg(strstr(msg, want) != NULL, "message lacks the command: %s", msg);
    ck_assert_ptr_nonnull(strstr(msg, "gnuplot is not installed"));

    /* The command in the message works once gnuplot is back. */
    setenv("PATH", saved_path, 1);
    if (with_gnuplot) {
        char cmd[800];
        snprintf(cmd, sizeof cmd, "%s 2>/dev/null", want);
        ck_assert_int_eq(system(cmd), 0);
        assert_png(in_tmp("loss.png"));
    }
}
END_TEST

START_TEST(test_overlay_three_runs) {
    const char *names[3] = {"loss_none", "loss_rmsnorm", "loss_layernorm"};
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(tg_plot_close_data(make_log(in_tmp("demo"), names[i], 150, 1.0 + i)), TG_OK);
    /* A fourth run in another folder: referred to by absolute path. */
    ck_assert_int_eq(tg_plot_close_data(make_log(in_tmp("other"), "far", 150, 0.5)), TG_OK);

    char dats[4][512];
    for (int i = 0; i < 3; i++) snprintf(dats[i], 512, "%s/demo/%s.dat", tmp, names[i]);
    snprintf(dats[3], 512, "%s/other/far.dat", tmp);
    tg_plot_series s[4] = {{dats[0], 0, 2, "no norm"},
                           {dats[1], 1, 2, "RMSNorm"},
                           {dats[2], 1, 2, "LayerNorm"},
                           {dats[3], 1, 2, "far away"}};
    tg_plot_style style = {.title = "Spiral: training loss", .ylabel = "loss", .logy = true};
    bool rendered = false;
    char msg[1024];
    tg_status st = tg_plot_overlay(in_tmp("demo"), "loss", &style, s, 4, &rendered, msg, sizeof msg);
    ck_assert_msg(st == TG_OK, "status %d: %s", st, msg);

    char *gp = tg_test_read_file(in_tmp("demo/loss.gp"), NULL);
    tg_test_assert_contains(gp, "set title 'Spiral: training loss'\n", "set xlabel 'step'\n", "set ylabel 'loss'\n",
                            "set logscale y\n", "'loss_none.dat' using 1:2 with lines lw 2 title 'no norm'",
                            "'loss_rmsnorm.dat' using 1:2 with lines lw 2 title 'RMSNorm'",
                            "'loss_layernorm.dat' using 1:2 with lines lw 2 title 'LayerNorm'", NULL);
    char far[600];
    char real_tmp[512];
    ck_assert_ptr_nonnull(realpath(tmp, real_tmp));
    snprintf(far, sizeof far, "'%s/other/far.dat' using 1:2", real_tmp);
    ck_assert_msg(strstr(gp, far) != NULL, "no absolute path for the far series:\n%s", gp);
    free(gp);
    if (have_gnuplot()) {
        ck_assert(rendered);
        assert_png(in_tmp("demo/loss.png"));
    }
}
END_TEST

START_TEST(test_render_custom_script) {
    /* A decision-boundary style picture: a grid `with image` plus points,
     * from a hand-written script that starts with the preamble. */
    FILE *g = fopen(in_tmp("grid.dat"), "w");
    ck_assert_ptr_nonnull(g);
    for (int i = 0; i < 40; i++) {
        for (int j = 0; j < 40; j++) fprintf(g, "%g %g %d\n", -1 + i / 20.0, -1 + j / 20.0, (i * i + j * j) % 3);
        fputc('\n', g);
    }
    fclose(g);
    FILE *pts = fopen(in_tmp("points.dat"), "w");
    for (int i = 0; i < 60; i++) fprintf(pts, "%g %g %d\n", cos(i) * i / 60.0, sin(i) * i / 60.0, i % 3);
    fclose(pts);

    FILE *gp = fopen(in_tmp("boundary.gp"), "w");
    ck_assert_ptr_nonnull(gp);
    ck_assert_int_eq(tg_plot_write_preamble(gp, "boundary.png", 500, 500), TG_OK);
    fputs("set title 'decision regions'\nset xlabel 'x1'\nset ylabel 'x2'\n"
          "set key top right\nset palette maxcolors 3\n"
          "plot 'grid.dat' using 1:2:3 with image notitle, "
          "'points.dat' using 1:2:3 with points pt 7 lc palette title 'data'\n",
          gp);
    fclose(gp);

    bool rendered = false;
    char msg[1024];
    /* A leading '-' in the file name must not reach gnuplot as an option. */
    ck_assert_int_eq(rename(in_tmp("boundary.gp"), in_tmp("-boundary.gp")), 0);
    tg_status st = tg_plot_render(in_tmp("-boundary.gp"), &rendered, msg, sizeof msg);
    ck_assert_msg(st == TG_OK, "status %d: %s", st, msg);
    if (have_gnuplot()) {
        ck_assert(rendered);
        assert_png(in_tmp("boundary.png"));
    } else {
        ck_assert(!rendered);
        ck_assert_ptr_nonnull(strstr(msg, "gnuplot './-boundary.gp'"));
    }
}
END_TEST

START_TEST(test_render_failure_reports_gnuplot_error) {
    if (!have_gnuplot()) return;
    FILE *gp = fopen(in_tmp("bad.gp"), "w");
    ck_assert_int_eq(tg_plot_write_preamble(gp, "bad.png", 0, 0), TG_OK);
    fputs("plot sin(x) with no_such_style\n", gp);
    fclose(gp);
    bool rendered = true;
    char msg[1024] = "";
    ck_assert_int_eq(tg_plot_render(in_tmp("bad.gp"), &rendered, msg, sizeof msg), TG_ERR_IO);
    ck_assert(!rendered);
    ck_assert_msg(strstr(msg, "gnuplot failed") && strstr(msg, "line"), "msg: %s", msg);

    /* A log whose values are all <= 0 on a log scale: gnuplot refuses. */
    static const char *const cols[] = {"step", "loss"};
    tg_plot *p = NULL;
    ck_assert_int_eq(tg_plot_open(&p, tmp, "neg", 2, cols), TG_OK);
    for (int i = 0; i < 5; i++) tg_plot_row(p, (double[]){i, -1.0});
    tg_plot_style style = {.logy = true};
    ck_assert_int_eq(tg_plot_close(p, &style, &rendered, msg, sizeof msg), TG_ERR_IO);
    ck_assert(!rendered);
    ck_assert(!exists(in_tmp("neg.png")));
}
END_TEST

START_TEST(test_close_without_rows) {
    static const char *const cols[] = {"step", "loss"};
    tg_plot *p = NULL;
    ck_assert_int_eq(tg_plot_open(&p, tmp, "empty", 2, cols), TG_OK);
    char msg[512];
    ck_assert_int_eq(tg_plot_close(p, NULL, NULL, msg, sizeof msg), TG_ERR_STATE);
    ck_assert_ptr_nonnull(strstr(msg, "no rows"));
    ck_assert(exists(in_tmp("empty.gp")));
}
END_TEST

/* gnuplot exits 0 after a full disk cut its picture short: the picture is
 * removed and the close fails, saying so; a whole one is announced. */
START_TEST(test_truncated_png_is_not_a_picture) {
    mkdir(in_tmp("fakebin"), 0755);
    write_drawing_gnuplot(in_tmp("fakebin"), false);
    setenv("PATH", in_tmp("fakebin"), 1);
    bool rendered = true;
    char msg[512];
    ck_assert_int_eq(tg_plot_close(make_log(tmp, "loss", 10, 1.0), NULL, &rendered, msg, sizeof msg), TG_ERR_IO);
    ck_assert(!rendered);
    tg_test_assert_contains(msg, "loss.gp but left ", "loss.png incomplete (308 bytes, not ending with the PNG's IEND",
                            NULL);
    ck_assert(!exists(in_tmp("loss.png")));
    tg_plot_series s = {in_tmp("loss.dat"), 1, 2, "loss"};
    ck_assert_int_eq(tg_plot_overlay(tmp, "both", NULL, &s, 1, &rendered, msg, sizeof msg), TG_ERR_IO);
    tg_test_assert_contains(msg, "both.png incomplete", NULL);

    write_drawing_gnuplot(in_tmp("fakebin"), true);
    ck_assert_int_eq(tg_plot_close(make_log(tmp, "loss", 10, 1.0), NULL, &rendered, msg, sizeof msg), TG_OK);
    ck_assert(rendered);
    tg_test_assert_contains(msg, "wrote ", "loss.png", NULL);
    ck_assert(exists(in_tmp("loss.png")));
}
END_TEST

/* The check itself: the signature first and IEND last, in a regular file. */
START_TEST(test_png_complete) {
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    static const unsigned char iend[12] = {0, 0, 0, 0, 'I', 'E', 'N', 'D', 0xae, 0x42, 0x60, 0x82};
    unsigned char png[60] = {0};
    memcpy(png, sig, 8);
    memcpy(png + 48, iend, 12);
    tg_test_write_file(in_tmp("whole.png"), png, sizeof png);
    ck_assert(tg_plot_png_complete(in_tmp("whole.png")));
    tg_test_write_file(in_tmp("cut.png"), png, 59);
    ck_assert(!tg_plot_png_complete(in_tmp("cut.png")));
    tg_test_write_file(in_tmp("short.png"), png + 40, 20); /* IEND, no signature */
    ck_assert(!tg_plot_png_complete(in_tmp("short.png")));
    tg_test_write_file(in_tmp("empty.png"), png, 0);
    ck_assert(!tg_plot_png_complete(in_tmp("empty.png")));
    ck_assert(!tg_plot_png_complete(in_tmp("missing.png")));
    ck_assert(!tg_plot_png_complete(tmp));
    ck_assert(!tg_plot_png_complete("/dev/zero"));
    ck_assert(!tg_plot_png_complete(NULL));
}
END_TEST

/* ------------------------------------------------------------------------ */
/* gnuplot detection                                                        */
/* ------------------------------------------------------------------------ */

START_TEST(test_gnuplot_detection) {
    if (have_gnuplot()) {
        char path[512];
        ck_assert_int_eq(tg_gnuplot_find(path, sizeof path), TG_OK);
        ck_assert_int_eq(access(path, X_OK), 0);
        ck_assert_int_eq(tg_gnuplot_find(path, 3), TG_ERR_VALUE); /* too small */
        bool has = false;
        ck_assert_int_eq(tg_gnuplot_has_terminal("png", &has), TG_OK);
        ck_assert(has);
        ck_assert_int_eq(tg_gnuplot_has_terminal("no_such_terminal", &has), TG_OK);
        ck_assert(!has);
        /* A prefix of a terminal's name is not that terminal. */
        ck_assert_int_eq(tg_gnuplot_has_terminal("pngc", &has), TG_OK);
        ck_assert(!has);
    }

    /* A fake gnuplot without cairo: png yes, pngcairo no. */
    mkdir(in_tmp("fakebin"), 0755);
    write_fake_gnuplot(in_tmp("fakebin"));
    setenv("PATH", in_tmp("fakebin"), 1);
    char path[512];
    ck_assert_int_eq(tg_gnuplot_find(path, sizeof path), TG_OK);
    ck_assert_str_eq(path, in_tmp("fakebin/gnuplot"));
    bool has = true;
    ck_assert_int_eq(tg_gnuplot_has_terminal("pngcairo", &has), TG_OK);
    ck_assert(!has);
    ck_assert_int_eq(tg_gnuplot_has_terminal("png", &has), TG_OK);
    ck_assert(has);
    ck_assert_int_eq(tg_gnuplot_has_terminal("postscript", &has), TG_OK);
    ck_assert(has);

    /* No gnuplot at all. */
    setenv("PATH", "", 1);
    ck_assert_int_eq(tg_gnuplot_find(NULL, 0), TG_ERR_IO);
    ck_assert_int_eq(tg_gnuplot_has_terminal("png", &has), TG_ERR_IO);
    ck_assert(!has);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Bad arguments                                                            */
/* ------------------------------------------------------------------------ */

START_TEST(test_bad_arguments) {
    static const char *const cols[] = {"step", "loss", "lr"};
    static const char *const spaced[] = {"step", "train loss"};
    static const char *const with_null[] = {"step", NULL};
    tg_plot *p = (tg_plot *)&p; /* not NULL: open must reset it */

    ck_assert_int_eq(tg_plot_open(NULL, tmp, "x", 3, cols), TG_ERR_NULL);
    ck_assert_int_eq(tg_plot_open(&p, NULL, "x", 3, cols), TG_ERR_NULL);
    ck_assert_ptr_null(p);
    ck_assert_int_eq(tg_plot_open(&p, tmp, NULL, 3, cols), TG_ERR_NULL);
    ck_assert_int_eq(tg_plot_open(&p, tmp, "x", 3, NULL), TG_ERR_NULL);
    ck_assert_int_eq(tg_plot_open(&p, tmp, "x", 2, with_null), TG_ERR_NULL);
    ck_assert_int_eq(tg_plot_open(&p, tmp, "x", 1, cols), TG_ERR_VALUE);
    ck_assert_int_eq(tg_plot_open(&p, tmp, "x", 0, cols), TG_ERR_VALUE);
    ck_assert_int_eq(tg_plot_open(&p, tmp, "x", 65, cols), TG_ERR_VALUE);
    ck_assert_int_eq(tg_plot_open(&p, tmp, "x", 2, spaced), TG_ERR_VALUE);
    ck_assert_int_eq(tg_plot_open(&p, tmp, "", 3, cols), TG_ERR_VALUE);
    ck_assert_int_eq(tg_plot_open(&p, tmp, "a/b", 3, cols), TG_ERR_VALUE);
    ck_assert_int_eq(tg_plot_open(&p, tmp, "-x", 3, cols), TG_ERR_VALUE); /* an option */
    ck_assert_int_eq(tg_plot_open(&p, tmp, "..", 3, cols), TG_ERR_VALUE);
    ck_assert_int_eq(tg_plot_open(&p, tmp, "it's", 3, cols), TG_ERR_VALUE);
    ck_assert_int_eq(tg_plot_open(&p, tmp, "a\"b", 3, cols), TG_ERR_VALUE);
    ck_assert_int_eq(tg_plot_open(&p, tmp, "line\nbreak", 3, cols), TG_ERR_VALUE);
    ck_assert_int_eq(tg_plot_open(&p, in_tmp("it's"), "x", 3, cols), TG_ERR_VALUE);
    ck_assert_int_eq(tg_plot_open(&p, in_tmp("new\nline"), "x", 3, cols), TG_ERR_VALUE);
    ck_assert_int_eq(tg_plot_open(&p, "", "x", 3, cols), TG_ERR_VALUE);
    ck_assert_ptr_null(p);
    ck_assert(!exists(in_tmp("it's"))); /* refused before touching the disk */

    /* A folder that cannot be made: a file is in the way. */
    FILE *f = fopen(in_tmp("file"), "w");
    fclose(f);
    ck_assert_int_eq(tg_plot_open(&p, in_tmp("file/sub"), "x", 3, cols), TG_ERR_IO);
    ck_assert_ptr_null(p);

    ck_assert_int_eq(tg_plot_row(NULL, (double[]){1, 2, 3}), TG_ERR_NULL);
    ck_assert_int_eq(tg_plot_open(&p, tmp, "ok", 3, cols), TG_OK);
    ck_assert_int_eq(tg_plot_row(p, NULL), TG_ERR_NULL);
    ck_assert_ptr_null(tg_plot_dat_path(NULL));
    /* A bad style is refused, and the plot is still freed. */
    tg_plot_row(p, (double[]){1, 2, 3});
    tg_plot_style bad = {.title = "two\nlines"};
    char msg[512] = "";
    ck_assert_int_eq(tg_plot_close(p, &bad, NULL, msg, sizeof msg), TG_ERR_VALUE);
    ck_assert_ptr_nonnull(strstr(msg, "tg_plot_close"));
    ck_assert_int_eq(tg_plot_open(&p, tmp, "ok", 3, cols), TG_OK);
    tg_plot_style big = {.width = -1};
    ck_assert_int_eq(tg_plot_close(p, &big, NULL, NULL, 0), TG_ERR_VALUE);
    ck_assert_int_eq(tg_plot_close(NULL, NULL, NULL, msg, sizeof msg), TG_ERR_NULL);
    ck_assert_int_eq(tg_plot_close_data(NULL), TG_ERR_NULL);

    /* Overlay. */
    ck_assert_int_eq(tg_plot_close_data(make_log(tmp, "r", 5, 1.0)), TG_OK);
    const char *dat = in_tmp("r.dat");
    tg_plot_series good = {dat, 1, 2, "r"};
    ck_assert_int_eq(tg_plot_overlay(NULL, "o", NULL, &good, 1, NULL, NULL, 0), TG_ERR_NULL);
    ck_assert_int_eq(tg_plot_overlay(tmp, NULL, NULL, &good, 1, NULL, NULL, 0), TG_ERR_NULL);
    ck_assert_int_eq(tg_plot_overlay(tmp, "o", NULL, NULL, 1, NULL, NULL, 0), TG_ERR_NULL);
    ck_assert_int_eq(tg_plot_overlay(tmp, "o", NULL, &good, 0, NULL, NULL, 0), TG_ERR_VALUE);
    ck_assert_int_eq(tg_plot_overlay(tmp, "o", NULL, &good, 65, NULL, NULL, 0), TG_ERR_VALUE);
    ck_assert_int_eq(tg_plot_overlay(tmp, "o/p", NULL, &good, 1, NULL, NULL, 0), TG_ERR_VALUE);
    tg_plot_series s = good;
    s.label = NULL;
    ck_assert_int_eq(tg_plot_overlay(tmp, "o", NULL, &s, 1, NULL, NULL, 0), TG_ERR_NULL);
    s = good;
    s.dat = NULL;
    ck_assert_int_eq(tg_plot_overlay(tmp, "o", NULL, &s, 1, NULL, NULL, 0), TG_ERR_NULL);
    s = good;
    s.ycol = 0;
    ck_assert_int_eq(tg_plot_overlay(tmp, "o", NULL, &s, 1, NULL, NULL, 0), TG_ERR_VALUE);
    s = good;
    s.xcol = -1;
    ck_assert_int_eq(tg_plot_overlay(tmp, "o", NULL, &s, 1, NULL, NULL, 0), TG_ERR_VALUE);
    s = good;
    s.dat = "/tmp/it's.dat";
    ck_assert_int_eq(tg_plot_overlay(tmp, "o", NULL, &s, 1, NULL, NULL, 0), TG_ERR_VALUE);
    s = good;
    s.label = "tab\there";
    ck_assert_int_eq(tg_plot_overlay(tmp, "o", NULL, &s, 1, NULL, NULL, 0), TG_ERR_VALUE);
    s = good;
    s.dat = in_tmp("missing.dat");
    ck_assert_int_eq(tg_plot_overlay(tmp, "o", NULL, &s, 1, NULL, msg, sizeof msg), TG_ERR_IO);
    ck_assert_ptr_nonnull(strstr(msg, "missing.dat"));
    ck_assert(!exists(in_tmp("o.gp")));

    /* Render and preamble. */
    ck_assert_int_eq(tg_plot_render(NULL, NULL, NULL, 0), TG_ERR_NULL);
    ck_assert_int_eq(tg_plot_render("/tmp/x'y.gp", NULL, NULL, 0), TG_ERR_VALUE);
    ck_assert_int_eq(tg_plot_render("", NULL, NULL, 0), TG_ERR_VALUE);
    ck_assert_int_eq(tg_plot_render(in_tmp("nope.gp"), NULL, msg, sizeof msg), TG_ERR_IO);
    ck_assert_ptr_nonnull(strstr(msg, "nope.gp"));
    ck_assert_int_eq(tg_plot_write_preamble(NULL, "a.png", 0, 0), TG_ERR_NULL);
    f = fopen(in_tmp("pre.gp"), "w");
    ck_assert_int_eq(tg_plot_write_preamble(f, NULL, 0, 0), TG_ERR_NULL);
    ck_assert_int_eq(tg_plot_write_preamble(f, "a'.png", 0, 0), TG_ERR_VALUE);
    ck_assert_int_eq(tg_plot_write_preamble(f, "a.png", -5, 0), TG_ERR_VALUE);
    fclose(f);
    bool has;
    ck_assert_int_eq(tg_gnuplot_has_terminal(NULL, &has), TG_ERR_NULL);
    ck_assert_int_eq(tg_gnuplot_has_terminal("png", NULL), TG_ERR_NULL);
    ck_assert_int_eq(tg_gnuplot_has_terminal("", &has), TG_ERR_VALUE);
    ck_assert_int_eq(tg_gnuplot_has_terminal("png; rm", &has), TG_ERR_VALUE);
}
END_TEST

Suite *make_plot_suite(void) {
    Suite *s = suite_create("plot");
    TCase *tc = tg_test_tcase(
        s, "files", setup, teardown, test_dat_rows_and_columns, test_open_replaces_old_file, test_trailing_slash,
        test_close_renders_png, test_close_default_style, test_labels_with_quotes,
        test_without_gnuplot_keeps_files_and_says_how, test_overlay_three_runs, test_render_custom_script,
        test_render_failure_reports_gnuplot_error, test_close_without_rows, test_truncated_png_is_not_a_picture,
        test_png_complete, test_gnuplot_detection, test_bad_arguments, NULL);
    tcase_set_timeout(tc, 120);
    return s;
}

int main(void) { return tg_test_run(make_plot_suite()); }

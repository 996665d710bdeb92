/* Tests for train/progress.c: plain lines, the terminal bar, mode detection,
 * speed and ETA (with a fake clock, so the numbers are exact). */
#define _XOPEN_SOURCE 700

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

/* A fake clock: the seconds are whatever the test stores in *user. */
static double fake_clock(void *user) { return *(double *)user; }

/* Everything written to f, malloc'd and terminated. */
static char *contents(FILE *f) {
    fflush(f);
    long n = ftell(f);
    rewind(f);
    char *s = tg_test_malloc((size_t)n + 1);
    ck_assert_int_eq((long)fread(s, 1, (size_t)n, f), n);
    s[n] = '\0';
    return s;
}

/* Asserts line i (0-based) of text is `want`. */
static void assert_line(const char *text, int i, const char *want) {
    for (int k = i; k > 0 && text; k--) {
        text = strchr(text, '\n');
        if (text) text++;
    }
    ck_assert_msg(text != NULL, "no line %d", i);
    char line[256];
    size_t n = strcspn(text, "\n");
    ck_assert_uint_lt(n, sizeof line);
    memcpy(line, text, n);
    line[n] = '\0';
    ck_assert_str_eq(line, want);
}

/* A progress of `total` steps shown every `every` into a new temporary
 * file (returned), in `mode` unless TG_PROGRESS_AUTO (then as detected),
 * on the fake clock reading *t unless t is NULL. */
static FILE *open_progress(tg_progress *p, int64_t total, int64_t every, tg_progress_mode mode, double *t) {
    FILE *f = tmpfile();
    ck_assert_ptr_nonnull(f);
    tg_progress_init(p, f, total, every);
    if (mode != TG_PROGRESS_AUTO) tg_progress_set_mode(p, mode);
    if (t) tg_progress_set_clock(p, fake_clock, t);
    return f;
}

/* Finishes p and returns everything written to f (free it); closes f. */
static char *finish_progress(tg_progress *p, FILE *f) {
    tg_progress_finish(p);
    char *out = contents(f);
    fclose(f);
    return out;
}

static int count_char(const char *s, char c) {
    int n = 0;
    for (; *s; s++) n += *s == c;
    return n;
}

START_TEST(test_plain_lines) {
    tg_progress p;
    double t = 0;
    FILE *f = open_progress(&p, 100, 10, TG_PROGRESS_AUTO, &t);
    ck_assert_int_eq(p.mode, TG_PROGRESS_PLAIN); /* a file is not a terminal */
    for (int step = 1; step <= 100; step++) {
        t = 0.5 * step; /* 2 steps/s */
        tg_progress_update(&p, step, 1.0 / step, 0.01, 2.0);
    }
    char *out = finish_progress(&p, f);

    ck_assert_int_eq(count_char(out, '\n'), 10 + 1); /* steps 10..100, then done */
    ck_assert_ptr_null(strchr(out, '\r'));
    /* Step 10: (10 - 1) steps in (5 - 0.5) s = 2 steps/s; 90 left -> 45 s. */
    assert_line(out, 0, "step 10/100  loss 0.1  lr 0.01  grad_norm 2  2.0 steps/s  ETA 0:45");
    assert_line(out, 4, "step 50/100  loss 0.02  lr 0.01  grad_norm 2  2.0 steps/s  ETA 0:25");
    assert_line(out, 9, "step 100/100  loss 0.01  lr 0.01  grad_norm 2  2.0 steps/s  ETA 0:00");
    assert_line(out, 10, "done: 100 steps in 50.0 s (2.0 steps/s), final loss 0.01");
    free(out);
}
END_TEST

START_TEST(test_plain_last_step_and_unknown_fields) {
    tg_progress p;
    double t = 0;
    FILE *f = open_progress(&p, 25, 10, TG_PROGRESS_PLAIN, &t);
    for (int step = 1; step <= 25; step++) {
        t = step;
        tg_progress_update(&p, step, 3.0, NAN, NAN); /* lr, norm unknown */
    }
    char *out = finish_progress(&p, f);
    /* 10, 20 and the last step 25 even though 25 % 10 != 0. */
    ck_assert_int_eq(count_char(out, '\n'), 3 + 1);
    assert_line(out, 0, "step 10/25  loss 3  1.0 steps/s  ETA 0:15");
    assert_line(out, 2, "step 25/25  loss 3  1.0 steps/s  ETA 0:00");
    ck_assert_ptr_null(strstr(out, "lr "));
    ck_assert_ptr_null(strstr(out, "grad_norm"));
    free(out);
}
END_TEST

START_TEST(test_unknown_total_and_finish_shows_last) {
    tg_progress p;
    double t = 100;
    FILE *f = open_progress(&p, 0, 10, TG_PROGRESS_AUTO, &t);
    for (int step = 1; step <= 15; step++) {
        t = 100 + 0.25 * step;
        tg_progress_update(&p, step, 0.5, 1e-4, 0.125);
    }
    t = 104;
    char *out = finish_progress(&p, f);
    assert_line(out, 0, "step 10  loss 0.5  lr 0.0001  grad_norm 0.125  4.0 steps/s");
    /* finish redraws step 15, never shown by update. */
    assert_line(out, 1, "step 15  loss 0.5  lr 0.0001  grad_norm 0.125  4.0 steps/s");
    assert_line(out, 2, "done: 15 steps in 4.0 s (3.8 steps/s), final loss 0.5");
    ck_assert_ptr_null(strstr(out, "ETA"));
    free(out);
}
END_TEST

START_TEST(test_eta_hours) {
    tg_progress p;
    double t = 0;
    tg_progress_init(&p, NULL, 100000, 1);
    tg_progress_set_clock(&p, fake_clock, &t);
    t = 1;
    tg_progress_update(&p, 1, 1.0, NAN, NAN);
    t = 10;
    tg_progress_update(&p, 10, 1.0, NAN, NAN);
    char buf[256];
    tg_progress_format(&p, buf, sizeof buf);
    /* 1 step/s, 99990 steps left: 27 h 46 min 30 s. */
    ck_assert_msg(strstr(buf, "ETA 27:46:30") != NULL, "%s", buf);
    /* 250 steps/s prints without decimals. */
    t = 1 + 4999.0 / 250; /* (5000 - 1) steps since step 1 */
    tg_progress_update(&p, 5000, 1.0, NAN, NAN);
    tg_progress_format(&p, buf, sizeof buf);
    ck_assert_msg(strstr(buf, " 250 steps/s") != NULL, "%s", buf);
}
END_TEST

START_TEST(test_bar_mode) {
    tg_progress p;
    double t = 0;
    FILE *f = open_progress(&p, 200, 20, TG_PROGRESS_BAR, &t);
    p.width = 120;
    for (int step = 1; step <= 200; step++) {
        t = 0.01 * step;
        /* The loss's text gets shorter late in the run. */
        tg_progress_update(&p, step, step < 150 ? 1.2345678 : 1.0, 3e-4, 0.75);
    }
    char *before = contents(f);
    /* Before finish: one line redrawn with \r, no newline yet. */
    ck_assert_int_eq(count_char(before, '\r'), 10);
    ck_assert_ptr_null(strchr(before, '\n'));
    tg_test_assert_contains(before, "\r[======>", " 50% step 100/200  loss 1.23457", "ETA 0:01",
                            "[==============================] 100% step 200/200", NULL);
    /* Every redraw fits in width - 1 columns, and a shorter line is padded
     * with spaces over the end of the longer one before it. */
    size_t prev = 0;
    for (char *seg = strtok(before, "\r"); seg; seg = strtok(NULL, "\r")) {
        size_t len = strlen(seg);
        ck_assert_uint_le(len, 119);
        ck_assert_uint_ge(len, prev);
        prev = strlen(seg);
        while (prev > 0 && seg[prev - 1] == ' ') prev--; /* text without padding */
    }
    free(before);

    fseek(f, 0, SEEK_END);
    char *out = finish_progress(&p, f);
    /* finish ends the bar line, then prints the summary. */
    ck_assert_ptr_nonnull(strstr(out, "ETA 0:00\ndone: 200 steps in 2.0 s (100.0 steps/s), final loss 1\n"));
    ck_assert_int_eq(count_char(out, '\n'), 2);
    free(out);
}
END_TEST

START_TEST(test_bar_narrow_terminal) {
    tg_progress p;
    FILE *f = open_progress(&p, 50, 5, TG_PROGRESS_BAR, NULL);
    p.width = 40;
    for (int step = 1; step <= 50; step++) tg_progress_update(&p, step, 0.123456, 0.001, 1.5);
    char *out = finish_progress(&p, f);
    ck_assert_ptr_null(strchr(out, '[')); /* no room for a bar */
    char *done = strstr(out, "\ndone:");
    ck_assert_ptr_nonnull(done);
    *done = '\0';
    for (char *seg = strtok(out, "\r"); seg; seg = strtok(NULL, "\r")) {
        ck_assert_uint_le(strlen(seg), 39);
        ck_assert_ptr_nonnull(strstr(seg, "% step "));
    }
    free(out);
}
END_TEST

START_TEST(test_auto_mode_on_a_terminal) {
    /* A pseudo-terminal: AUTO picks the bar there. */
    int master = posix_openpt(O_RDWR | O_NOCTTY);
    if (master < 0) {
        fprintf(stderr, "test_progress: no pseudo-terminal; AUTO-on-a-terminal skipped\n");
        return;
    }
    ck_assert_int_eq(grantpt(master), 0);
    ck_assert_int_eq(unlockpt(master), 0);
    int slave = open(ptsname(master), O_RDWR | O_NOCTTY);
    ck_assert_int_ge(slave, 0);
    FILE *tty = fdopen(slave, "w");
    ck_assert_ptr_nonnull(tty);

    tg_progress p;
    tg_progress_init(&p, tty, 10, 1);
    ck_assert_int_eq(p.mode, TG_PROGRESS_BAR);
    ck_assert_int_gt(p.width, 1);
    for (int step = 1; step <= 10; step++) tg_progress_update(&p, step, 1.0, 0.1, 1.0);
    tg_progress_finish(&p);
    fclose(tty);

    /* The terminal may hand the output over in several reads; after the
     * slave side is closed, read returns 0 or fails with EIO at the end. */
    char buf[8192];
    size_t got = 0;
    ssize_t n;
    while (got < sizeof buf - 1 && (n = read(master, buf + got, sizeof buf - 1 - got)) > 0) got += (size_t)n;
    ck_assert_uint_gt(got, 0);
    buf[got] = '\0';
    ck_assert_ptr_nonnull(strchr(buf, '\r'));
    ck_assert_ptr_nonnull(strstr(buf, "step 10/10"));
    close(master);

    /* A pipe-like file: AUTO picks plain lines. */
    FILE *f = tmpfile();
    tg_progress_init(&p, f, 10, 1);
    ck_assert_int_eq(p.mode, TG_PROGRESS_PLAIN);
    tg_progress_set_mode(&p, TG_PROGRESS_BAR);
    ck_assert_int_eq(p.mode, TG_PROGRESS_BAR);
    tg_progress_set_mode(&p, TG_PROGRESS_AUTO);
    ck_assert_int_eq(p.mode, TG_PROGRESS_PLAIN);
    tg_progress_set_mode(&p, (tg_progress_mode)42); /* nonsense: plain */
    ck_assert_int_eq(p.mode, TG_PROGRESS_PLAIN);
    fclose(f);
}
END_TEST

START_TEST(test_quiet_null_and_real_clock) {
    tg_progress p;
    FILE *f = open_progress(&p, 10, 1, TG_PROGRESS_QUIET, NULL);
    for (int step = 1; step <= 10; step++) tg_progress_update(&p, step, 1.0, 0.1, 1.0);
    tg_progress_finish(&p);
    fflush(f);
    ck_assert_int_eq(ftell(f), 0);
    fclose(f);

    /* NULL out or NULL progress: nothing happens, nothing crashes. */
    tg_progress_init(&p, NULL, 10, 0);
    ck_assert_int_eq(p.every, 1); /* every < 1 means 1 */
    tg_progress_update(&p, 1, 1.0, 0.1, 1.0);
    tg_progress_finish(&p);
    tg_progress_init(NULL, stdout, 10, 1);
    tg_progress_set_mode(NULL, TG_PROGRESS_BAR);
    tg_progress_set_clock(NULL, NULL, NULL);
    tg_progress_update(NULL, 1, 1.0, 0.1, 1.0);
    tg_progress_finish(NULL);
    char buf[64] = "x";
    ck_assert_str_eq(tg_progress_format(NULL, buf, sizeof buf), "");
    ck_assert_ptr_null(tg_progress_format(&p, NULL, 0));

    /* The monotonic clock: the measured speed is positive and finite. */
    tg_progress_init(&p, NULL, 1000, 100);
    volatile double sink = 0;
    for (int step = 1; step <= 1000; step++) {
        for (int k = 0; k < 20000; k++) sink += k * 1e-9;
        tg_progress_update(&p, step, 1.0, NAN, NAN);
    }
    char line[256];
    tg_progress_format(&p, line, sizeof line);
    double r = 0;
    char *at = strstr(line, "steps/s");
    ck_assert_ptr_nonnull(at);
    while (at > line && at[-1] == ' ') at--;
    while (at > line && at[-1] != ' ') at--;
    r = strtod(at, NULL);
    ck_assert_msg(r > 0 && isfinite(r), "%s", line);
    ck_assert_ptr_nonnull(strstr(line, "ETA 0:00"));
    (void)sink;
}
END_TEST

Suite *make_progress_suite(void) {
    return tg_test_suite("progress", NULL, NULL, test_plain_lines, test_plain_last_step_and_unknown_fields,
                         test_unknown_total_and_finish_shows_last, test_eta_hours, test_bar_mode,
                         test_bar_narrow_terminal, test_auto_mode_on_a_terminal, test_quiet_null_and_real_clock, NULL);
}

int main(void) { return tg_test_run(make_progress_suite()); }

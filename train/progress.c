/* Progress output for training loops.
 *
 *   step 300/1000  loss 0.6931  lr 0.001  grad_norm 1.23  412 steps/s  ETA 0:02
 *
 * PLAIN mode prints that line every `every` steps (for pipes, files, CI
 * logs). BAR mode, the default on a terminal, keeps one line and redraws it
 * in place: "\r[=======>      ]  30% step 300/1000 ...", padded with spaces
 * over the previous text and kept narrower than the terminal so it never
 * wraps (a wrapped line cannot be redrawn with \r). The newline comes at
 * finish.
 *
 * Speed is measured from the first update on, so the first step's warm-up
 * (page faults, allocations) does not bias it:
 *   rate = (step - step_first) / (t - t_first),   ETA = (total - step) / rate
 * and at the first update from the start: (step - base) / (t - t_init), where
 * base is 0, or the step a resumed run starts after (tg_progress_resume).
 * Times come from a monotonic clock, immune to wall-clock jumps. */
#define _XOPEN_SOURCE 700

#include "tapegrad/train.h"
#include "tensor/text.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#define TG_PROGRESS_BAR_MAX 30 /* widest bar, in cells */
#define TG_PROGRESS_BAR_MIN 10 /* narrower than this: no bar, just the % */

static double monotonic_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double now(const tg_progress *p) { return p->clock_ ? p->clock_(p->clock_user_) : monotonic_seconds(); }

/* Columns of the terminal behind f, or 80. */
static int terminal_width(FILE *f) {
#ifdef TIOCGWINSZ
    struct winsize ws;
    if (f && ioctl(fileno(f), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
#else
    (void)f;
#endif
    return 80;
}

void tg_progress_set_mode(tg_progress *p, tg_progress_mode mode) {
    if (!p) return;
    if (mode == TG_PROGRESS_AUTO) mode = p->out && isatty(fileno(p->out)) ? TG_PROGRESS_BAR : TG_PROGRESS_PLAIN;
    if (mode != TG_PROGRESS_PLAIN && mode != TG_PROGRESS_BAR && mode != TG_PROGRESS_QUIET) mode = TG_PROGRESS_PLAIN;
    p->mode = mode;
    p->width = mode == TG_PROGRESS_BAR && p->out && isatty(fileno(p->out)) ? terminal_width(p->out) : 80;
}

void tg_progress_init(tg_progress *p, FILE *out, int64_t total_steps, int64_t every) {
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->out = out;
    p->total = total_steps > 0 ? total_steps : 0;
    p->every = every >= 1 ? every : 1;
    p->step_shown_ = -1;
    p->loss_ = p->lr_ = p->gnorm_ = NAN;
    tg_progress_set_mode(p, TG_PROGRESS_AUTO);
    p->t_init_ = now(p);
}

void tg_progress_resume(tg_progress *p, int64_t step) {
    if (!p) return;
    p->step_base_ = step > 0 ? step : 0;
    p->t_init_ = now(p);
}

void tg_progress_set_clock(tg_progress *p, double (*clock)(void *user), void *user) {
    if (!p) return;
    p->clock_ = clock;
    p->clock_user_ = user;
    p->t_init_ = now(p);
}

/* Steps per second at the last update, or NaN while unknown. */
static double rate(const tg_progress *p) {
    if (!p->seen_) return NAN;
    if (p->step_last_ > p->step_first_ && p->t_last_ > p->t_first_)
        return (double)(p->step_last_ - p->step_first_) / (p->t_last_ - p->t_first_);
    if (p->step_last_ > p->step_base_ && p->t_last_ > p->t_init_)
        return (double)(p->step_last_ - p->step_base_) / (p->t_last_ - p->t_init_);
    return NAN;
}

/* "1:05" (m:ss) or "2:01:05" (h:mm:ss) for a duration in seconds. */
static void format_duration(char *buf, size_t size, double s) {
    if (!isfinite(s) || s < 0 || s > 1e9) {
        snprintf(buf, size, "?");
        return;
    }
    long long t = (long long)(s + 0.5);
    if (t >= 3600) snprintf(buf, size, "%lld:%02lld:%02lld", t / 3600, t / 60 % 60, t % 60);
    else snprintf(buf, size, "%lld:%02lld", t / 60, t % 60);
}

/* The fields after the bar: step, loss, lr, grad_norm, steps/s, ETA. */
static size_t format_fields(const tg_progress *p, char *buf, size_t size) {
    tg_text t = tg_text_buf(buf, size);
    if (p->total > 0) tg_text_printf(&t, "step %lld/%lld", (long long)p->step_last_, (long long)p->total);
    else tg_text_printf(&t, "step %lld", (long long)p->step_last_);
    tg_text_printf(&t, "  loss %.6g", p->loss_);
    if (!isnan(p->lr_)) tg_text_printf(&t, "  lr %.3g", p->lr_);
    if (!isnan(p->gnorm_)) tg_text_printf(&t, "  grad_norm %.3g", p->gnorm_);
    double r = rate(p);
    if (isnan(r)) tg_text_put(&t, "  ? steps/s");
    else tg_text_printf(&t, r < 100 ? "  %.1f steps/s" : "  %.0f steps/s", r);
    if (p->total > 0) {
        char eta[32];
        double left = (double)(p->total - p->step_last_);
        format_duration(eta, sizeof eta, left <= 0 ? 0.0 : left / r);
        tg_text_printf(&t, "  ETA %s", eta);
    }
    return tg_text_kept(&t);
}

char *tg_progress_format(const tg_progress *p, char *buf, size_t size) {
    if (!buf || size == 0) return buf;
    buf[0] = '\0';
    if (!p) return buf;
    char fields[256];
    size_t flen = format_fields(p, fields, sizeof fields);
    if (p->mode != TG_PROGRESS_BAR || p->total <= 0) {
        snprintf(buf, size, "%s", fields);
        return buf;
    }
    /* Bar mode: "[====>     ]  42% " then the fields, all within width-1
     * columns (the last column would make some terminals wrap). */
    double frac = (double)p->step_last_ / (double)p->total;
    if (frac < 0) frac = 0;
    if (frac > 1) frac = 1;
    int avail = (p->width > 1 ? p->width : 80) - 1;
    int cells = avail - (int)flen - 8; /* "[" "]" " 100% " around the bar */
    if (cells > TG_PROGRESS_BAR_MAX) cells = TG_PROGRESS_BAR_MAX;
    tg_text t = tg_text_buf(buf, size);
    if (cells >= TG_PROGRESS_BAR_MIN) {
        int filled = (int)(frac * cells);
        tg_text_put(&t, "[");
        for (int i = 0; i < cells; i++) tg_text_printf(&t, "%c", i < filled ? '=' : i == filled ? '>' : ' ');
        tg_text_put(&t, "]");
    }
    tg_text_printf(&t, " %3d%% %s", (int)(frac * 100), fields);
    if (avail > 0 && tg_text_kept(&t) > (size_t)avail) buf[avail] = '\0';
    return buf;
}

static void draw(tg_progress *p) {
    char line[512];
    tg_progress_format(p, line, sizeof line);
    int len = (int)strlen(line);
    if (p->mode == TG_PROGRESS_BAR) {
        /* Pad over the tail of a longer previous line. */
        int pad = p->line_len_ > len ? p->line_len_ - len : 0;
        fprintf(p->out, "\r%s%*s", line, pad, "");
        p->line_len_ = len;
        p->line_open_ = true;
    } else {
        fprintf(p->out, "%s\n", line);
    }
    fflush(p->out);
    p->step_shown_ = p->step_last_;
}

void tg_progress_update(tg_progress *p, int64_t step, double loss, double lr, double grad_norm) {
    if (!p) return;
    double t = now(p);
    if (!p->seen_) {
        p->seen_ = true;
        p->t_first_ = t;
        p->step_first_ = step;
    }
    p->t_last_ = t;
    p->step_last_ = step;
    p->loss_ = loss;
    p->lr_ = lr;
    p->gnorm_ = grad_norm;
    if (!p->out || p->mode == TG_PROGRESS_QUIET) return;
    if (step % p->every == 0 || (p->total > 0 && step >= p->total)) draw(p);
}

void tg_progress_finish(tg_progress *p) {
    if (!p || !p->out || p->mode == TG_PROGRESS_QUIET) return;
    if (p->seen_ && p->step_shown_ != p->step_last_) draw(p);
    if (p->line_open_) {
        fputc('\n', p->out);
        p->line_open_ = false;
        p->line_len_ = 0;
    }
    double elapsed = now(p) - p->t_init_;
    char took[32];
    if (elapsed < 60) snprintf(took, sizeof took, "%.1f s", elapsed < 0 ? 0.0 : elapsed);
    else format_duration(took, sizeof took, elapsed);
    long long steps = p->seen_ ? (long long)(p->step_last_ - p->step_base_) : 0;
    fprintf(p->out, "done: %lld steps in %s", steps, took);
    if (steps > 0 && elapsed > 0) fprintf(p->out, " (%.1f steps/s)", (double)steps / elapsed);
    if (p->seen_) fprintf(p->out, ", final loss %.6g", p->loss_);
    fputc('\n', p->out);
    fflush(p->out);
}

/* Learning-rate schedules, as closed forms of step t (0-based: the lr used
 * by the t-th optimizer step, which is what PyTorch's scheduler gives after
 * t calls of scheduler.step()).
 *
 *   constant        lr = base
 *   step decay      lr = base * gamma^floor(t / step_size)         (StepLR)
 *   warmup-cosine   W = warmup_steps, T = total_steps, s = start_factor
 *                   t < W:       lr = base * (s + (1 - s) * t / W)  (LinearLR)
 *                   W <= t < T:  lr = min + (base - min) * (1 + cos(pi (t - W) / (T - W))) / 2
 *                                                           (CosineAnnealingLR)
 *                   t >= T:      lr = min
 *   callback        lr = fn(t, base, user) */
#include "optim/internal.h"

#include <math.h>

double tg_schedule_lr(const tg_schedule *s, double base, int64_t t) {
    if (!s) return base;
    if (t < 0) return NAN;
    switch (s->kind) {
    case TG_SCHED_CONSTANT: return base;
    case TG_SCHED_STEP:
        if (s->step_size <= 0 || !isfinite(s->gamma) || s->gamma < 0) return NAN;
        return base * pow(s->gamma, (double)(t / s->step_size));
    case TG_SCHED_WARMUP_COSINE: {
        int64_t W = s->warmup_steps, T = s->total_steps;
        double sf = s->start_factor;
        if (W < 0 || T < W || !(sf > 0 && sf <= 1) || !isfinite(s->min_lr) || s->min_lr < 0) return NAN;
        if (t < W) return base * (sf + (1.0 - sf) * (double)t / (double)W);
        if (t >= T) return s->min_lr;
        const double pi = 3.14159265358979323846;
        return s->min_lr + (base - s->min_lr) * (1.0 + cos(pi * (double)(t - W) / (double)(T - W))) / 2.0;
    }
    case TG_SCHED_CALLBACK:
        if (!s->fn) return NAN;
        return s->fn(t, base, s->user);
    }
    return NAN;
}

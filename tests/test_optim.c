/* Optimizers, schedules and clipping against PyTorch 1.13.
 * Reference values: tests/fixtures/optim_trajectories.txt, made by
 * tests/fixtures/make_optim_fixture.py (the problem is described there). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define FIXTURE TG_TEST_DIR "/fixtures/optim_trajectories.txt"

static tg_ctx *ctx;
static void setup(void) { ctx = tg_ctx_new(1); }
static void teardown(void) { tg_ctx_free(ctx); }

/* ---- fixture reading ------------------------------------------------------ */

/* The next line of the fixture starting with `prefix`, or NULL at its end:
 * strtok_r over text (the fixture, read whole) with *save; text is NULL
 * after the first call. */
static char *next_line(char *text, char **save, const char *prefix) {
    for (char *line = strtok_r(text, "\n", save); line; line = strtok_r(NULL, "\n", save))
        if (strncmp(line, prefix, strlen(prefix)) == 0) return line;
    return NULL;
}

/* The value of "key=" in a line, or `dflt` when absent. */
static double kv(const char *line, const char *key, double dflt) {
    char pat[64];
    snprintf(pat, sizeof pat, " %s=", key);
    const char *p = strstr(line, pat);
    return p ? strtod(p + strlen(pat), NULL) : dflt;
}

/* Parses up to n numbers after the first `skip` space-separated words. */
static int numbers_after(const char *line, int skip, double *out, int n) {
    const char *p = line;
    for (int w = 0; w < skip; w++) {
        p = strchr(p, ' ');
        if (!p) return 0;
        p++;
    }
    int k = 0;
    char *end;
    while (k < n) {
        double v = strtod(p, &end);
        if (end == p) break;
        out[k++] = v;
        p = end;
    }
    return k;
}

/* t made persistent and added to ps as "<module>.<name>" (just "<name>"
 * when module is NULL), with its weight-decay flag. */
static tg_tensor *add_param(tg_params *ps, const char *module, const char *name, tg_tensor *t, bool decay) {
    t = tg_persist(ctx, t);
    ck_assert_msg(tg_params_add(ctx, ps, module, name, t, decay), "%s", tg_error_message(ctx));
    return t;
}

/* ---- the problem: L = sum((tanh(W x + b) - t)^2) ------------------------- */

static const double X[4] = {0.5, -1.0, 2.0, 0.25};
static const double T[3] = {0.3, -0.2, 0.7};
static const double W0[12] = {0.1, -0.2, 0.3, 0.05, 0.0, 0.4, -0.1, 0.2, -0.3, 0.1, 0.2, -0.05};
static const double B0[3] = {0.01, -0.02, 0.03};

/* dz = 2 (tanh z - t)(1 - tanh^2 z);  dW = dz x^T;  db = dz */
static void problem_grad(tg_tensor *W, tg_tensor *b) {
    const double *w = W->data, *bb = b->data;
    double *dw = W->grad->data, *db = b->grad->data;
    for (int i = 0; i < 3; i++) {
        double z = bb[i];
        for (int j = 0; j < 4; j++) z += w[i * 4 + j] * X[j];
        double th = tanh(z);
        double dz = 2.0 * (th - T[i]) * (1.0 - th * th);
        for (int j = 0; j < 4; j++) dw[i * 4 + j] = dz * X[j];
        db[i] = dz;
    }
}

static tg_optim *make_optim(tg_params *ps, const char *line) {
    const char *kind = line + 5;
    if (strncmp(kind, "sgd", 3) == 0) {
        tg_sgd_opts o = tg_sgd_defaults(kv(line, "lr", 0));
        o.momentum = kv(line, "momentum", 0);
        o.dampening = kv(line, "dampening", 0);
        o.weight_decay = kv(line, "weight_decay", 0);
        o.nesterov = kv(line, "nesterov", 0) != 0;
        return tg_sgd_new(ctx, ps, &o);
    }
    tg_adam_opts o = tg_adam_defaults();
    o.lr = kv(line, "lr", 0);
    o.beta1 = kv(line, "beta1", 0.9);
    o.beta2 = kv(line, "beta2", 0.999);
    o.eps = kv(line, "eps", 1e-8);
    o.weight_decay = kv(line, "weight_decay", 0);
    o.amsgrad = kv(line, "amsgrad", 0) != 0;
    return strncmp(kind, "adamw", 5) == 0 ? tg_adamw_new(ctx, ps, &o) : tg_adam_new(ctx, ps, &o);
}

START_TEST(test_trajectories_match_pytorch) {
    char *text = tg_test_read_file(FIXTURE, NULL);
    int cases = 0, steps_checked = 0;
    double worst = 0;
    char *save = NULL;
    tg_params ps = {0};
    tg_optim *opt = NULL;
    tg_tensor *W = NULL, *b = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (strncmp(line, "case ", 5) == 0) {
            tg_optim_free(ctx, opt);
            tg_params_free(&ps);
            if (W) tg_tensor_free(ctx, W);
            if (b) tg_tensor_free(ctx, b);
            W = add_param(&ps, "fc", "weight", tg_from_buffer(ctx, TG_F64, TG_SHAPE(3, 4), W0), true);
            b = add_param(&ps, "fc", "bias", tg_from_buffer(ctx, TG_F64, TG_SHAPE(3), B0), false);
            opt = make_optim(&ps, line);
            ck_assert_msg(opt != NULL, "%s: %s", line, tg_error_message(ctx));
            cases++;
        } else if (strncmp(line, "step ", 5) == 0) {
            double want[15];
            ck_assert_int_eq(numbers_after(line, 2, want, 15), 15);
            tg_optim_zero_grad(ctx, opt);
            problem_grad(W, b);
            tg_optim_step(ctx, opt);
            ck_assert(tg_ok(ctx));
            for (int k = 0; k < 15; k++) {
                double got = k < 12 ? ((double *)W->data)[k] : ((double *)b->data)[k - 12];
                double err = fabs(got - want[k]);
                if (err > worst) worst = err;
                ck_assert_msg(err <= 1e-10, "case %d step %lld value %d: %.17g vs PyTorch %.17g", cases,
                              (long long)tg_optim_steps(opt), k, got, want[k]);
            }
            steps_checked++;
        }
    }
    tg_optim_free(ctx, opt);
    tg_params_free(&ps);
    free(text);
    ck_assert_int_eq(cases, 14);
    ck_assert_int_eq(steps_checked, 14 * 25);
}
END_TEST

START_TEST(test_schedules_match_pytorch) {
    char *text = tg_test_read_file(FIXTURE, NULL);
    int found = 0;
    char *save = NULL;
    for (char *line = next_line(text, &save, "sched "); line; line = next_line(NULL, &save, "sched ")) {
        tg_schedule s = {0};
        int skip;
        if (strncmp(line + 6, "step ", 5) == 0) {
            s.kind = TG_SCHED_STEP;
            s.step_size = (int64_t)kv(line, "step_size", 0);
            s.gamma = kv(line, "gamma", 0);
            skip = 5;
        } else {
            s.kind = TG_SCHED_WARMUP_COSINE;
            s.warmup_steps = (int64_t)kv(line, "warmup", 0);
            s.total_steps = (int64_t)kv(line, "total", 0);
            s.start_factor = kv(line, "start_factor", 0);
            s.min_lr = kv(line, "min_lr", 0);
            skip = 7;
        }
        double want[30];
        ck_assert_int_eq(numbers_after(line, skip, want, 30), 30);
        /* through an optimizer, as a training loop reads it */
        tg_params ps = {0};
        add_param(&ps, NULL, "p", tg_zeros(ctx, TG_F64, TG_SHAPE(1)), true);
        tg_sgd_opts o = tg_sgd_defaults(kv(line, "base", 0));
        tg_optim *opt = tg_sgd_new(ctx, &ps, &o);
        tg_optim_set_schedule(ctx, opt, &s);
        for (int t = 0; t < 30; t++) {
            /* PyTorch's CosineAnnealingLR is periodic: past T_max it climbs
             * again. Ours holds the floor, so compare up to total_steps. */
            if (s.kind == TG_SCHED_WARMUP_COSINE && t > s.total_steps) want[t] = s.min_lr;
            ck_assert_double_eq_tol(tg_optim_lr(opt), want[t], 1e-12);
            ck_assert_double_eq_tol(tg_schedule_lr(&s, o.lr, t), want[t], 1e-12);
            tg_optim_step(ctx, opt);
        }
        ck_assert(tg_ok(ctx));
        tg_optim_free(ctx, opt);
        tg_params_free(&ps);
        found++;
    }
    free(text);
    ck_assert_int_eq(found, 2);
}
END_TEST

static double halve_every_ten(int64_t step, double base, void *user) {
    (void)user;
    return base / (double)(1 + step / 10);
}

START_TEST(test_callback_schedule) {
    tg_schedule s = {.kind = TG_SCHED_CALLBACK, .fn = halve_every_ten};
    ck_assert_double_eq(tg_schedule_lr(&s, 1.0, 0), 1.0);
    ck_assert_double_eq(tg_schedule_lr(&s, 1.0, 25), 1.0 / 3.0);
    s.fn = NULL;
    ck_assert(isnan(tg_schedule_lr(&s, 1.0, 0)));
}
END_TEST

START_TEST(test_clip_grad_norm_matches_pytorch) {
    char *text = tg_test_read_file(FIXTURE, NULL);
    int found = 0;
    char *save = NULL;
    for (char *line = next_line(text, &save, "clip "); line; line = next_line(NULL, &save, "clip ")) {
        double want[10];
        ck_assert_int_eq(numbers_after(line, 3, want, 10), 10);
        tg_params ps = {0};
        tg_tensor *a = add_param(&ps, NULL, "a", tg_zeros(ctx, TG_F64, TG_SHAPE(2, 3)), true);
        tg_tensor *c = add_param(&ps, NULL, "c", tg_zeros(ctx, TG_F64, TG_SHAPE(4)), true);
        const double ga[6] = {1.0, -2.0, 3.0, 0.5, 0.25, -4.0}, gc[4] = {2.0, -1.0, 0.0, 6.0};
        memcpy(a->grad->data, ga, sizeof ga);
        memcpy(c->grad->data, gc, sizeof gc);
        double norm = tg_clip_grad_norm(ctx, &ps, kv(line, "max_norm", 0));
        ck_assert_double_eq_tol(norm, kv(line, "norm", 0), 1e-12);
        for (int k = 0; k < 10; k++) {
            double got = k < 6 ? ((double *)a->grad->data)[k] : ((double *)c->grad->data)[k - 6];
            ck_assert_double_eq_tol(got, want[k], 1e-12);
        }
        tg_params_free(&ps);
        found++;
    }
    free(text);
    ck_assert_int_eq(found, 2);
}
END_TEST

START_TEST(test_clip_value_and_anomaly) {
    tg_params ps = {0};
    tg_tensor *a = add_param(&ps, "fc1", "weight", tg_zeros(ctx, TG_F32, TG_SHAPE(4)), true);
    tg_tensor *c = add_param(&ps, "fc1", "bias", tg_zeros(ctx, TG_F32, TG_SHAPE(2)), false);
    float *g = a->grad->data;
    g[0] = 3;
    g[1] = -0.5f;
    g[2] = -7;
    g[3] = 1;
    tg_clip_grad_value(ctx, &ps, 1.0);
    ck_assert_float_eq(g[0], 1);
    ck_assert_float_eq(g[1], -0.5f);
    ck_assert_float_eq(g[2], -1);
    ck_assert(tg_check_grads_finite(ctx, &ps));
    ((float *)c->grad->data)[1] = NAN;
    ck_assert(!tg_check_grads_finite(ctx, &ps));
    ck_assert_ptr_nonnull(strstr(tg_error_message(ctx), "the gradient of 'fc1.bias' holds nan at flat index 1"));
    tg_clear_error(ctx);
    /* a non-finite norm is reported and nothing is scaled */
    double norm = tg_clip_grad_norm(ctx, &ps, 0.1);
    ck_assert(isnan(norm));
    ck_assert_int_eq(tg_status_of(ctx), TG_ERR_VALUE);
    ck_assert_ptr_nonnull(strstr(tg_error_message(ctx), "non-finite"));
    ck_assert_float_eq(g[0], 1);
    tg_params_free(&ps);
}
END_TEST

START_TEST(test_invalid_hyperparameters) {
    tg_params ps = {0};
    add_param(&ps, NULL, "p", tg_zeros(ctx, TG_F64, TG_SHAPE(2)), true);
    struct {
        tg_sgd_opts o;
        const char *msg;
    } sgd_bad[] = {
        {{-0.1, 0, 0, 0, false}, "tg_sgd_new: lr=-0.1 must be finite and >= 0"},
        {{NAN, 0, 0, 0, false}, "lr=nan"},
        {{0.1, -0.9, 0, 0, false}, "momentum=-0.9"},
        {{0.1, 0, 0, -1, false}, "weight_decay=-1"},
        {{0.1, 0, 0, 0, true}, "nesterov needs momentum > 0"},
        {{0.1, 0.9, 0.1, 0, true}, "dampening 0"},
    };
    for (size_t i = 0; i < sizeof sgd_bad / sizeof sgd_bad[0]; i++)
        tg_test_assert_fails(ctx, tg_sgd_new(ctx, &ps, &sgd_bad[i].o), TG_ERR_VALUE, sgd_bad[i].msg, NULL);
    struct {
        tg_adam_opts o;
        const char *msg;
    } adam_bad[] = {
        {{-1e-3, 0.9, 0.999, 1e-8, 0, false}, "tg_adam_new: lr=-0.001"},
        {{1e-3, 1.0, 0.999, 1e-8, 0, false}, "betas=(1, 0.999) must lie in [0, 1)"},
        {{1e-3, 0.9, -0.1, 1e-8, 0, false}, "betas=(0.9, -0.1)"},
        {{1e-3, 0.9, NAN, 1e-8, 0, false}, "betas=(0.9, nan)"},
        {{1e-3, 0.9, 0.999, 0, 0, false}, "eps=0 must be finite and > 0"},
        {{1e-3, 0.9, 0.999, 1e-8, INFINITY, false}, "weight_decay=inf"},
    };
    for (size_t i = 0; i < sizeof adam_bad / sizeof adam_bad[0]; i++)
        tg_test_assert_fails(ctx, tg_adam_new(ctx, &ps, &adam_bad[i].o), TG_ERR_VALUE, adam_bad[i].msg, NULL);
    /* NULL options are the defaults (tests/test_modules.c checks each kind) */
    tg_optim *dflt = tg_adamw_new(ctx, &ps, NULL);
    ck_assert_ptr_nonnull(dflt);
    ck_assert_double_eq(tg_optim_lr(dflt), tg_adamw_defaults().lr);
    tg_optim_free(ctx, dflt);
    tg_params_free(&ps);
}
END_TEST

/* Parameters with weight_decay=false get no decay: with a zero gradient,
 * AdamW shrinks the decaying parameter and leaves the other one alone. */
START_TEST(test_no_decay_flag_and_state_names) {
    tg_params ps = {0};
    tg_tensor *w = add_param(&ps, "fc", "weight", tg_ones(ctx, TG_F64, TG_SHAPE(2)), true);
    tg_tensor *g = add_param(&ps, "norm", "gamma", tg_ones(ctx, TG_F64, TG_SHAPE(2)), false);
    tg_adam_opts o = tg_adamw_defaults();
    o.lr = 0.1;
    o.weight_decay = 0.5;
    o.amsgrad = true;
    tg_optim *opt = tg_adamw_new(ctx, &ps, &o);
    tg_optim_step(ctx, opt);
    ck_assert_double_eq_tol(((double *)w->data)[0], 1.0 - 0.1 * 0.5, 1e-15);
    ck_assert_double_eq(((double *)g->data)[0], 1.0);
    tg_params *st = tg_optim_state(opt);
    ck_assert_ptr_nonnull(tg_params_find(st, "optim.step"));
    ck_assert_ptr_nonnull(tg_params_find(st, "optim.fc.weight.exp_avg"));
    ck_assert_ptr_nonnull(tg_params_find(st, "optim.norm.gamma.exp_avg_sq"));
    ck_assert_ptr_nonnull(tg_params_find(st, "optim.norm.gamma.max_exp_avg_sq"));
    ck_assert_ptr_null(tg_params_find(st, "optim.fc.weight.momentum_buffer"));
    ck_assert_double_eq(*(double *)tg_params_find(st, "optim.step")->value->data, 1.0);
    /* restoring the step count from the state tensor */
    *(double *)tg_params_find(st, "optim.step")->value->data = 7;
    tg_optim_sync_state(ctx, opt);
    ck_assert_int_eq(tg_optim_steps(opt), 7);
    ck_assert(tg_ok(ctx));
    tg_optim_free(ctx, opt);
    tg_params_free(&ps);
}
END_TEST

/* The one-line texts a training state saves: kind and settings in their
 * shortest exact digits, snprintf's semantics (the length the whole text
 * needs, what fits kept and terminated), "" for NULL. */
START_TEST(test_format_settings) {
    tg_params ps = {0};
    add_param(&ps, "fc", "weight", tg_ones(ctx, TG_F64, TG_SHAPE(2)), true);
    tg_adam_opts ao = tg_adamw_defaults();
    ao.lr = 0.003;
    tg_optim *adamw = tg_adamw_new(ctx, &ps, &ao);
    tg_sgd_opts so = tg_sgd_defaults(0.1);
    so.momentum = 0.9;
    tg_optim *sgd = tg_sgd_new(ctx, &ps, &so);
    char buf[256];
    const char *want = "adamw lr=0.003 beta1=0.9 beta2=0.999 eps=1e-08 weight_decay=0.01 amsgrad=0";
    ck_assert_uint_eq(tg_optim_format(buf, sizeof buf, adamw), strlen(want));
    ck_assert_str_eq(buf, want);
    tg_optim_format(buf, sizeof buf, sgd);
    ck_assert_str_eq(buf, "sgd lr=0.1 momentum=0.9 dampening=0 weight_decay=0 nesterov=0");
    tg_optim_format_schedule(buf, sizeof buf, sgd);
    ck_assert_str_eq(buf, "constant");
    tg_schedule sched = {
        .kind = TG_SCHED_WARMUP_COSINE, .warmup_steps = 4, .total_steps = 40, .start_factor = 0.1, .min_lr = 1e-4};
    tg_optim_set_schedule(ctx, sgd, &sched);
    tg_optim_format_schedule(buf, sizeof buf, sgd);
    ck_assert_str_eq(buf, "warmup_cosine warmup_steps=4 total_steps=40 start_factor=0.1 min_lr=0.0001");
    /* cut: the full length, the kept part terminated */
    char small[8];
    ck_assert_uint_eq(tg_optim_format(small, sizeof small, adamw), strlen(want));
    ck_assert_str_eq(small, "adamw l");
    ck_assert_uint_eq(tg_optim_format(NULL, 0, adamw), strlen(want));
    ck_assert_uint_eq(tg_optim_format(buf, sizeof buf, NULL), 0);
    ck_assert_str_eq(buf, "");

    tg_grad_scaler_opts go = tg_grad_scaler_defaults();
    go.growth_interval = 100;
    tg_grad_scaler *scaler = tg_grad_scaler_new(ctx, &go);
    ck_assert_int_eq(tg_grad_scaler_get_opts(scaler).growth_interval, 100);
    ck_assert_int_eq(tg_grad_scaler_get_opts(NULL).growth_interval, tg_grad_scaler_defaults().growth_interval);
    tg_grad_scaler_format(buf, sizeof buf, scaler);
    ck_assert_str_eq(buf, "grad_scaler growth_factor=2 backoff_factor=0.5 growth_interval=100 enabled=1");
    ck_assert(tg_ok(ctx));
    tg_grad_scaler_free(ctx, scaler);
    tg_optim_free(ctx, sgd);
    tg_optim_free(ctx, adamw);
    tg_params_free(&ps);
}
END_TEST

Suite *make_optim_suite(void) {
    Suite *s = suite_create("optim");
    tg_test_tcase(s, "pytorch", setup, teardown, test_trajectories_match_pytorch, test_schedules_match_pytorch,
                  test_callback_schedule, test_clip_grad_norm_matches_pytorch, NULL);
    tg_test_tcase(s, "checks", setup, teardown, test_clip_value_and_anomaly, test_invalid_hyperparameters,
                  test_no_decay_flag_and_state_names, test_format_settings, NULL);
    return s;
}

int main(void) { return tg_test_run(make_optim_suite()); }

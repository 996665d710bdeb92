/* Tests of the training state (train/state.c): tg_train_save / tg_train_load
 * resume a run bit for bit; a damaged file, another model, another
 * optimizer setting, a file that is not a training state, a device or a
 * pipe are refused with an error naming the call and leave everything as
 * it was; several models in one file; the stale temporary files of killed
 * saves are removed; a resumed progress line counts only the steps run. */
#define _XOPEN_SOURCE 700 /* nftw */

#include <check.h>
#include <ftw.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tapegrad.h"
#include "testutil.h"

/* Each test runs in a new temporary folder, its working directory, so the
 * files it makes are named plainly ("s.st"); teardown removes the folder. */
static char dir[256], home[4096];

static void setup(void) {
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/tg-train-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    ck_assert_ptr_nonnull(getcwd(home, sizeof home));
    ck_assert_ptr_nonnull(mkdtemp(dir));
    ck_assert_int_eq(chdir(dir), 0);
}

static int remove_entry(const char *path, const struct stat *sb, int type, struct FTW *ftw) {
    (void)sb, (void)type, (void)ftw;
    return remove(path);
}

static void teardown(void) {
    ck_assert_int_eq(chdir(home), 0);
    nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static bool exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* ---- a small network and its training loop --------------------------------------- */

enum { OPT_SGD, OPT_ADAM, OPT_ADAMW, OPT_KINDS };

/* Linear(3, hidden) -> tanh -> Linear(hidden, 1), with an optimizer. */
typedef struct net {
    tg_model model;
    tg_linear *fc1, *fc2;
    tg_params params;
    tg_optim *opt;
} net;

static void net_init(tg_ctx *ctx, net *n, int64_t hidden, int kind, double lr) {
    memset(n, 0, sizeof *n);
    n->fc1 = tg_linear_new(ctx, "fc1", 3, hidden, true, TG_F32);
    n->fc2 = tg_linear_new(ctx, "fc2", hidden, 1, true, TG_F32);
    tg_model_add(ctx, &n->model, TG_MODULE(n->fc1));
    tg_model_add(ctx, &n->model, TG_MODULE(n->fc2));
    tg_model_params(ctx, &n->model, &n->params);
    if (kind == OPT_SGD) {
        tg_sgd_opts o = tg_sgd_defaults(lr);
        o.momentum = 0.9;
        n->opt = tg_sgd_new(ctx, &n->params, &o);
    } else {
        tg_adam_opts o = kind == OPT_ADAM ? tg_adam_defaults() : tg_adamw_defaults();
        o.lr = lr;
        o.amsgrad = kind == OPT_ADAM;
        n->opt = kind == OPT_ADAM ? tg_adam_new(ctx, &n->params, &o) : tg_adamw_new(ctx, &n->params, &o);
    }
    tg_schedule s = {
        .kind = TG_SCHED_WARMUP_COSINE, .warmup_steps = 3, .total_steps = 12, .start_factor = 0.1, .min_lr = lr / 10};
    tg_optim_set_schedule(ctx, n->opt, &s);
    ck_assert_msg(tg_ok(ctx), "%s", tg_error_message(ctx));
}

static void net_free(tg_ctx *ctx, net *n) {
    tg_optim_free(ctx, n->opt);
    tg_params_free(&n->params);
    tg_model_free(ctx, &n->model);
}

/* Frees the net and its context. */
static void done(tg_ctx *ctx, net *n) {
    net_free(ctx, n);
    tg_ctx_free(ctx);
}

/* One step on a fresh random batch (drawn from the context's RNG, so a
 * resume that lost the RNG state would train on other data). */
static double net_step(tg_ctx *ctx, net *n) {
    tg_tensor *x = tg_rand(ctx, TG_F32, TG_SHAPE(8, 3), -1, 1);
    tg_tensor *y = tg_sum_axis(ctx, x, 1, true);
    tg_tensor *pred = tg_linear_forward(ctx, n->fc2, tg_tanh(ctx, tg_linear_forward(ctx, n->fc1, x)));
    tg_tensor *loss = tg_mse_loss(ctx, pred, y);
    tg_optim_zero_grad(ctx, n->opt);
    tg_backward(ctx, loss);
    tg_optim_step(ctx, n->opt);
    ck_assert_msg(tg_ok(ctx), "%s", tg_error_message(ctx));
    double v = tg_get_flat(ctx, loss, 0);
    tg_ctx_reset(ctx);
    return v;
}

/* Everything a resume must restore, as bytes: parameters, optimizer state,
 * the step count and the RNG state. */
typedef struct snapshot {
    unsigned char *bytes;
    size_t len;
} snapshot;

static void snap_put(snapshot *s, const void *p, size_t n) {
    s->bytes = realloc(s->bytes, s->len + n);
    ck_assert_ptr_nonnull(s->bytes);
    memcpy(s->bytes + s->len, p, n);
    s->len += n;
}

static snapshot snap(tg_ctx *ctx, net *n) {
    snapshot s = {NULL, 0};
    const tg_params *lists[2] = {&n->params, tg_optim_state(n->opt)};
    for (int l = 0; l < 2; l++)
        for (int i = 0; i < lists[l]->count; i++) {
            const tg_tensor *t = lists[l]->items[i].value;
            snap_put(&s, t->data, (size_t)t->numel * tg_dtype_size(t->dtype));
        }
    int64_t step = tg_optim_steps(n->opt);
    uint64_t rng[2];
    tg_rng_state(ctx, &rng[0], &rng[1]);
    snap_put(&s, &step, sizeof step);
    snap_put(&s, rng, sizeof rng);
    return s;
}

static void assert_same(snapshot a, snapshot b, const char *what) {
    ck_assert_msg(a.len == b.len && memcmp(a.bytes, b.bytes, a.len) == 0, "%s", what);
    free(a.bytes);
    free(b.bytes);
}

/* ---- save, load into a fresh model and optimizer, continue ------------------------ */

/* 12 steps straight against 5 steps, save, a new context (another seed, so
 * another initialization and RNG) with a new model and optimizer, load, 7
 * more steps: the losses of steps 6-12 and the final state are identical,
 * for SGD with momentum, Adam with amsgrad and AdamW, all under a
 * warmup-cosine schedule. */
START_TEST(test_resume_bit_exact) {
    const int kind = _i;
    double straight[12], resumed[12];
    tg_ctx *a = tg_ctx_new(7);
    net na;
    net_init(a, &na, 6, kind, 0.05);
    for (int s = 0; s < 12; s++) straight[s] = net_step(a, &na);

    tg_ctx *b = tg_ctx_new(7);
    net nb;
    net_init(b, &nb, 6, kind, 0.05);
    for (int s = 0; s < 5; s++) resumed[s] = net_step(b, &nb);
    tg_meta meta = {0};
    tg_meta_set(b, &meta, "run", "test");
    ck_assert_int_eq(tg_train_save(b, "s.st", &nb.params, nb.opt, &meta), TG_OK);
    tg_meta_free(&meta);
    done(b, &nb);

    tg_ctx *c = tg_ctx_new(99);
    net nc;
    net_init(c, &nc, 6, kind, 0.05);
    tg_rng_uniform(c);
    ck_assert_int_eq(tg_train_load(c, "s.st", &nc.params, nc.opt, &meta), TG_OK);
    ck_assert_int_eq(tg_optim_steps(nc.opt), 5);
    ck_assert_str_eq(tg_meta_get(&meta, "run"), "test");
    ck_assert_str_eq(tg_meta_get(&meta, "tapegrad.train"), "1");
    ck_assert_ptr_nonnull(strstr(tg_meta_get(&meta, "tapegrad.schedule"), "warmup_cosine warmup_steps=3"));
    tg_meta_free(&meta);
    for (int s = 5; s < 12; s++) resumed[s] = net_step(c, &nc);
    for (int s = 5; s < 12; s++)
        ck_assert_msg(memcmp(&straight[s], &resumed[s], sizeof(double)) == 0, "step %d: loss %.17g vs %.17g", s + 1,
                      straight[s], resumed[s]);
    assert_same(snap(a, &na), snap(c, &nc), "the resumed run's state differs from the straight run's");
    done(a, &na);
    done(c, &nc);
}
END_TEST

/* Parameters only (no optimizer): the values and the RNG come back. */
START_TEST(test_params_only) {
    tg_ctx *a = tg_ctx_new(1), *b = tg_ctx_new(2);
    net na, nb;
    net_init(a, &na, 4, OPT_ADAM, 0.01);
    net_init(b, &nb, 4, OPT_ADAM, 0.01);
    ck_assert_int_eq(tg_train_save(a, "p.st", &na.params, NULL, NULL), TG_OK);
    ck_assert_int_eq(tg_train_load(b, "p.st", &nb.params, NULL, NULL), TG_OK);
    for (int i = 0; i < na.params.count; i++) {
        const tg_tensor *x = na.params.items[i].value, *y = nb.params.items[i].value;
        ck_assert(memcmp(x->data, y->data, (size_t)x->numel * 4) == 0);
    }
    ck_assert(tg_rng_uniform(a) == tg_rng_uniform(b));
    /* The file has no optimizer state: loading one is refused. */
    ck_assert_int_eq(tg_train_load(b, "p.st", &nb.params, nb.opt, NULL), TG_ERR_VALUE);
    tg_test_assert_error(b, TG_ERR_VALUE, "tg_train_load: ", "optim.step", "missing from the file", NULL);
    done(a, &na);
    done(b, &nb);
}
END_TEST

/* Two models, two optimizers in one file, under prefixes. */
START_TEST(test_parts) {
    tg_ctx *a = tg_ctx_new(3), *b = tg_ctx_new(4);
    net x, y, x2, y2;
    net_init(a, &x, 4, OPT_ADAMW, 0.01);
    net_init(a, &y, 5, OPT_SGD, 0.1);
    for (int s = 0; s < 3; s++) net_step(a, &x);
    for (int s = 0; s < 2; s++) net_step(a, &y);
    tg_train_part parts[2] = {{"x", &x.params, x.opt, NULL}, {"y", &y.params, y.opt, NULL}};
    ck_assert_int_eq(tg_train_save_parts(a, "two.st", parts, 2, NULL), TG_OK);
    net_init(b, &x2, 4, OPT_ADAMW, 0.01);
    net_init(b, &y2, 5, OPT_SGD, 0.1);
    tg_train_part parts2[2] = {{"x", &x2.params, x2.opt, NULL}, {"y", &y2.params, y2.opt, NULL}};
    tg_meta meta = {0};
    ck_assert_int_eq(tg_train_load_parts(b, "two.st", parts2, 2, &meta), TG_OK);
    ck_assert_ptr_nonnull(tg_meta_get(&meta, "tapegrad.optim.x"));
    ck_assert_ptr_nonnull(strstr(tg_meta_get(&meta, "tapegrad.optim.y"), "sgd lr=0.1 momentum=0.9"));
    tg_meta_free(&meta);
    assert_same(snap(a, &x), snap(b, &x2), "part x");
    assert_same(snap(a, &y), snap(b, &y2), "part y");
    /* The parts swapped: refused, naming the settings that differ. */
    tg_train_part swapped[2] = {{"y", &x2.params, x2.opt, NULL}, {"x", &y2.params, y2.opt, NULL}};
    ck_assert_int_ne(tg_train_load_parts(b, "two.st", swapped, 2, NULL), TG_OK);
    tg_test_assert_error(b, TG_ERR_VALUE,
                         "tg_train_load_parts: two.st (part \"y\") was saved by an optimizer with settings \"sgd "
                         "lr=0.1",
                         "this one has \"adamw lr=0.01", NULL);
    /* Bad part lists. */
    tg_train_part same[2] = {{"x", &x2.params, NULL, NULL}, {"x", &y2.params, NULL, NULL}};
    tg_train_load_parts(b, "two.st", same, 2, NULL);
    tg_test_assert_error(b, TG_ERR_VALUE, "tg_train_load_parts: ", "both named \"x\"", NULL);
    tg_train_part dotted[1] = {{"a.b", &x2.params, NULL, NULL}};
    tg_train_save_parts(b, "d.st", dotted, 1, NULL);
    tg_test_assert_error(b, TG_ERR_VALUE, "tg_train_save_parts: ", "holds a '.'", NULL);
    tg_train_save_parts(b, "d.st", parts2, 0, NULL);
    tg_test_assert_error(b, TG_ERR_VALUE, "tg_train_save_parts: ", "nparts = 0", NULL);
    net_free(a, &x);
    net_free(a, &y);
    net_free(b, &x2);
    net_free(b, &y2);
    tg_ctx_free(a);
    tg_ctx_free(b);
}
END_TEST

/* ---- refused loads change nothing ------------------------------------------------- */

typedef struct fixture {
    tg_ctx *ctx;
    net n;
    tg_meta meta; /* holds "kept" = "yes" */
    snapshot before;
} fixture;

/* A trained net in a fresh context, with a snapshot to compare against. */
static void fixture_init(fixture *f, int64_t hidden, int kind, double lr) {
    f->ctx = tg_ctx_new(11);
    net_init(f->ctx, &f->n, hidden, kind, lr);
    net_step(f->ctx, &f->n);
    f->meta = (tg_meta){0};
    tg_meta_set(f->ctx, &f->meta, "kept", "yes");
    f->before = snap(f->ctx, &f->n);
}

/* The load failed with `status` and a message naming tg_train_load and
 * `detail`; nothing changed. */
static void fixture_expect_refused(fixture *f, const char *path, tg_status status, const char *detail) {
    ck_assert_int_eq(tg_train_load(f->ctx, path, &f->n.params, f->n.opt, &f->meta), status);
    tg_test_assert_error(f->ctx, status, "tg_train_load: ", detail, NULL);
    assert_same(f->before, snap(f->ctx, &f->n), "a refused load changed the model, optimizer or RNG");
    ck_assert_int_eq(f->meta.count, 1);
    ck_assert_str_eq(tg_meta_get(&f->meta, "kept"), "yes");
    f->before = snap(f->ctx, &f->n);
}

static void fixture_free(fixture *f) {
    free(f->before.bytes);
    tg_meta_free(&f->meta);
    net_free(f->ctx, &f->n);
    tg_ctx_free(f->ctx);
}

/* Saves a 4-hidden AdamW net after 3 steps to path. */
static void save_reference(const char *path) {
    tg_ctx *ctx = tg_ctx_new(5);
    net n;
    net_init(ctx, &n, 4, OPT_ADAMW, 0.01);
    for (int s = 0; s < 3; s++) net_step(ctx, &n);
    ck_assert_int_eq(tg_train_save(ctx, path, &n.params, n.opt, NULL), TG_OK);
    done(ctx, &n);
}

static unsigned char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*len ? *len : 1);
    ck_assert_uint_eq(fread(b, 1, *len, f), *len);
    fclose(f);
    return b;
}

static void write_all(const char *path, const unsigned char *b, size_t len) {
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(b, 1, len, f), len);
    ck_assert_int_eq(fclose(f), 0);
}

/* A damaged file: truncated, a header byte changed, the first 8 bytes
 * zeroed; a missing file; one that is not a training state; a step count
 * that is not one. */
START_TEST(test_damaged_file) {
    const char *ref = "ref.st";
    save_reference(ref);
    size_t len;
    unsigned char *b = read_all(ref, &len);
    fixture f;
    fixture_init(&f, 4, OPT_ADAMW, 0.01);

    write_all("cut.st", b, len - 5);
    fixture_expect_refused(&f, "cut.st", TG_ERR_FORMAT, "cut.st");
    unsigned char *c = malloc(len);
    memcpy(c, b, len);
    c[12] = '{'; /* inside the JSON header */
    write_all("json.st", c, len);
    fixture_expect_refused(&f, "json.st", TG_ERR_FORMAT, "json.st");
    memcpy(c, b, len);
    memset(c, 0, 8);
    write_all("zero.st", c, len);
    fixture_expect_refused(&f, "zero.st", TG_ERR_FORMAT, "zero.st");
    fixture_expect_refused(&f, "missing.st", TG_ERR_IO, "No such file");

    /* A plain checkpoint (tg_ckpt_save) of the same tensors: not a training state. */
    ck_assert_int_eq(tg_ckpt_save(f.ctx, "plain.st", &f.n.params, tg_optim_state(f.n.opt), NULL), TG_OK);
    fixture_expect_refused(&f, "plain.st", TG_ERR_FORMAT, "not a training-state file");
    /* A step count that is not one (optim.step = 2.5), refused before anything is written. */
    tg_tensor *step = tg_params_find(tg_optim_state(f.n.opt), "optim.step")->value;
    double was = tg_get_flat(f.ctx, step, 0);
    tg_set_flat(f.ctx, step, 0, 2.5);
    ck_assert_int_eq(tg_train_save(f.ctx, "half.st", &f.n.params, f.n.opt, NULL), TG_OK);
    tg_set_flat(f.ctx, step, 0, was);
    fixture_expect_refused(&f, "half.st", TG_ERR_FORMAT, "\"optim.step\" = 2.5 is not a step count");
    free(c);
    free(b);
    fixture_free(&f);
}
END_TEST

/* Another model (hidden 5 instead of 4), another optimizer kind, other
 * settings, another schedule: refused, each with a message that says so. */
START_TEST(test_mismatch) {
    const char *ref = "ref.st";
    save_reference(ref);
    fixture f;
    fixture_init(&f, 5, OPT_ADAMW, 0.01);
    fixture_expect_refused(&f, ref, TG_ERR_SHAPE, "fc1.weight\" has shape (4, 3) in the file but (5, 3)");
    fixture_free(&f);

    fixture_init(&f, 4, OPT_SGD, 0.01);
    fixture_expect_refused(&f, ref, TG_ERR_VALUE,
                           "settings \"adamw lr=0.01 beta1=0.9 beta2=0.999 eps=1e-08 weight_decay=0.01 amsgrad=0\", "
                           "this one has \"sgd lr=0.01");
    fixture_free(&f);

    fixture_init(&f, 4, OPT_ADAMW, 0.02);
    fixture_expect_refused(&f, ref, TG_ERR_VALUE,
                           "\"adamw lr=0.01 beta1=0.9 beta2=0.999 eps=1e-08 "
                           "weight_decay=0.01 amsgrad=0\", this one has \"adamw lr=0.02");
    fixture_free(&f);

    fixture_init(&f, 4, OPT_ADAMW, 0.01);
    tg_optim_set_schedule(f.ctx, f.n.opt, NULL);
    fixture_expect_refused(&f, ref, TG_ERR_VALUE,
                           "schedule \"warmup_cosine warmup_steps=3 total_steps=12 "
                           "start_factor=0.1 min_lr=0.001\", this one has \"constant\"");
    /* Changing it after the load is the way to go on differently. */
    tg_schedule s = {
        .kind = TG_SCHED_WARMUP_COSINE, .warmup_steps = 3, .total_steps = 12, .start_factor = 0.1, .min_lr = 0.001};
    tg_optim_set_schedule(f.ctx, f.n.opt, &s);
    ck_assert_int_eq(tg_train_load(f.ctx, ref, &f.n.params, f.n.opt, NULL), TG_OK);
    ck_assert_int_eq(tg_optim_steps(f.n.opt), 3);
    tg_optim_set_schedule(f.ctx, f.n.opt, NULL);
    tg_optim_set_lr(f.ctx, f.n.opt, 0.5);
    ck_assert(tg_optim_lr(f.n.opt) == 0.5);
    fixture_free(&f);
}
END_TEST

/* A file of other parts (spiral --norm rmsnorm resumed with --norm
 * layernorm, or with --norm all): both lists of parts, not the first
 * tensor that differs; the model is untouched. */
START_TEST(test_other_parts) {
    tg_ctx *a = tg_ctx_new(3), *b = tg_ctx_new(4);
    net x, y, z, w;
    net_init(a, &x, 4, OPT_ADAM, 0.01);
    net_init(a, &y, 4, OPT_ADAM, 0.01);
    tg_train_part saved[1] = {{"rmsnorm", &x.params, x.opt, NULL}};
    ck_assert_int_eq(tg_train_save_parts(a, "r.st", saved, 1, NULL), TG_OK);
    tg_train_part two[2] = {{"none", &x.params, x.opt, NULL}, {"rmsnorm", &y.params, y.opt, NULL}};
    ck_assert_int_eq(tg_train_save_parts(a, "two.st", two, 2, NULL), TG_OK);
    net_init(b, &z, 4, OPT_ADAM, 0.01);
    net_init(b, &w, 4, OPT_ADAM, 0.01);
    snapshot before = snap(b, &z);
    tg_train_part other[1] = {{"layernorm", &z.params, z.opt, NULL}};
    ck_assert_int_eq(tg_train_load_parts(b, "r.st", other, 1, NULL), TG_ERR_VALUE);
    tg_test_assert_error(b, TG_ERR_VALUE,
                         "tg_train_load_parts: r.st holds the parts \"rmsnorm\", and this load has \"layernorm\": "
                         "it was saved with other settings",
                         NULL);
    assert_same(before, snap(b, &z), "a refused load changed the model");
    tg_train_part one[1] = {{"rmsnorm", &z.params, z.opt, NULL}};
    ck_assert_int_eq(tg_train_load_parts(b, "two.st", one, 1, NULL), TG_ERR_VALUE);
    tg_test_assert_error(b, TG_ERR_VALUE, "two.st holds the parts \"none\", \"rmsnorm\", and this load has \"rmsnorm\"",
                         NULL);
    tg_train_part more[2] = {{"rmsnorm", &z.params, z.opt, NULL}, {"layernorm", &w.params, w.opt, NULL}};
    ck_assert_int_eq(tg_train_load_parts(b, "r.st", more, 2, NULL), TG_ERR_VALUE);
    tg_test_assert_error(b, TG_ERR_VALUE,
                         "r.st holds the parts \"rmsnorm\", and this load has \"rmsnorm\", \"layernorm\"", NULL);
    ck_assert_int_eq(tg_train_load_parts(b, "r.st", one, 1, NULL), TG_OK);
    net_free(a, &y);
    done(a, &x);
    net_free(b, &w);
    done(b, &z);
}
END_TEST

/* The compute dtype (autocast) is saved and compared: a bfloat16 run's
 * state does not resume into a float32 one, nor the reverse, without a
 * word; the same dtype resumes. */
START_TEST(test_compute_dtype) {
    tg_ctx *a = tg_ctx_new(3), *b = tg_ctx_new(4);
    net x, y;
    net_init(a, &x, 4, OPT_ADAMW, 0.01);
    net_init(b, &y, 4, OPT_ADAMW, 0.01);
    tg_ctx_set_autocast(a, TG_BF16);
    ck_assert_int_eq(tg_train_save(a, "bf16.st", &x.params, x.opt, NULL), TG_OK);
    snapshot before = snap(b, &y);
    ck_assert_int_eq(tg_train_load(b, "bf16.st", &y.params, y.opt, NULL), TG_ERR_VALUE);
    tg_test_assert_error(b, TG_ERR_VALUE,
                         "tg_train_load: bf16.st was saved by a run computing in bfloat16, and this context computes "
                         "in float32",
                         NULL);
    assert_same(before, snap(b, &y), "a refused load changed the model");
    tg_ctx_set_autocast(b, TG_BF16);
    ck_assert_int_eq(tg_train_load(b, "bf16.st", &y.params, y.opt, NULL), TG_OK);
    tg_meta meta = {0};
    tg_ctx_set_autocast(a, TG_F32);
    ck_assert_int_eq(tg_train_save(a, "f32.st", &x.params, x.opt, NULL), TG_OK);
    ck_assert_int_eq(tg_train_load(b, "f32.st", &y.params, y.opt, &meta), TG_ERR_VALUE);
    tg_test_assert_error(b, TG_ERR_VALUE, "computing in float32, and this context computes in bfloat16", NULL);
    tg_ctx_set_autocast(b, TG_F32);
    ck_assert_int_eq(tg_train_load(b, "f32.st", &y.params, y.opt, &meta), TG_OK);
    ck_assert_str_eq(tg_meta_get(&meta, "tapegrad.compute"), "float32");
    tg_meta_free(&meta);
    done(a, &x);
    done(b, &y);
}
END_TEST

/* A device or a pipe: refused up front, never read or replaced. */
START_TEST(test_not_regular) {
    fixture f;
    fixture_init(&f, 4, OPT_ADAMW, 0.01);
    fixture_expect_refused(&f, "/dev/zero", TG_ERR_IO, "/dev/zero is a character device, not a regular file");
    fixture_expect_refused(&f, dir, TG_ERR_IO, "is a directory");
    const char *fifo = "fifo";
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    ck_assert_int_eq(tg_train_save(f.ctx, fifo, &f.n.params, f.n.opt, NULL), TG_ERR_IO);
    tg_test_assert_error(f.ctx, TG_ERR_IO, "tg_train_save: ", "a pipe (FIFO), not a regular file", NULL);
    struct stat sb;
    ck_assert_int_eq(stat(fifo, &sb), 0);
    ck_assert(S_ISFIFO(sb.st_mode));
    fixture_expect_refused(&f, fifo, TG_ERR_IO, "a pipe (FIFO)");
    fixture_free(&f);
}
END_TEST

/* NULL arguments, a context already in error, reserved metadata keys. */
START_TEST(test_arguments) {
    tg_ctx *ctx = tg_ctx_new(1);
    net n;
    net_init(ctx, &n, 3, OPT_ADAM, 0.01);
    ck_assert_int_eq(tg_train_save(ctx, NULL, &n.params, n.opt, NULL), TG_ERR_NULL);
    tg_test_assert_error(ctx, TG_ERR_NULL, "tg_train_save: argument 'path' is NULL", NULL);
    ck_assert_int_eq(tg_train_load(ctx, "x.st", NULL, n.opt, NULL), TG_ERR_NULL);
    tg_test_assert_error(ctx, TG_ERR_NULL, "tg_train_load: argument 'params' is NULL", NULL);
    ck_assert_int_eq(tg_train_save(NULL, "x.st", &n.params, n.opt, NULL), TG_ERR_NULL);
    tg_error(ctx, TG_ERR_SHAPE, "earlier", "an earlier error");
    ck_assert_int_eq(tg_train_save(ctx, "x.st", &n.params, n.opt, NULL), TG_ERR_SHAPE);
    ck_assert(!exists("x.st"));
    tg_test_assert_error(ctx, TG_ERR_SHAPE, "earlier: an earlier error", NULL);
    /* The caller's "tapegrad." keys are the library's to write. */
    tg_meta meta = {0};
    tg_meta_set(ctx, &meta, "tapegrad.train", "99");
    tg_meta_set(ctx, &meta, "mine", "1");
    ck_assert_int_eq(tg_train_save(ctx, "x.st", &n.params, n.opt, &meta), TG_OK);
    ck_assert_int_eq(tg_train_load(ctx, "x.st", &n.params, n.opt, &meta), TG_OK);
    ck_assert_str_eq(tg_meta_get(&meta, "tapegrad.train"), "1");
    ck_assert_str_eq(tg_meta_get(&meta, "mine"), "1");
    tg_meta_free(&meta);
    done(ctx, &n);
}
END_TEST

/* ---- stale temporary files of killed saves ----------------------------------------- */

/* The pid of a process that has exited (reaped), so it is gone. */
static pid_t dead_pid(void) {
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) _exit(0);
    ck_assert_int_eq(waitpid(pid, NULL, 0), pid);
    return pid;
}

/* A save removes "PATH.tmp-PID-N" files of its own target whose process is
 * gone (left by a save killed with kill -9); it keeps those of a live
 * process (a save in progress), those of other targets and other names. */
START_TEST(test_stale_temporaries_removed) {
    /* (the children first, so they inherit no context to leak under valgrind) */
    pid_t gone = dead_pid(), gone2 = dead_pid();
    tg_ctx *ctx = tg_ctx_new(1);
    net n;
    net_init(ctx, &n, 3, OPT_ADAM, 0.01);
    const char *target = "a.st";
    char dead[3][600], keep[5][600];
    snprintf(dead[0], sizeof dead[0], "%s.tmp-%ld-0", target, (long)gone);
    snprintf(dead[1], sizeof dead[1], "%s.tmp-%ld-7", target, (long)gone);
    snprintf(dead[2], sizeof dead[2], "%s.tmp-%ld-0", target, (long)gone2);
    snprintf(keep[0], sizeof keep[0], "%s.tmp-%ld-0", target, (long)getppid()); /* alive */
    snprintf(keep[1], sizeof keep[1], "%s.tmp-%ld-0", target, (long)getpid());  /* this process */
    snprintf(keep[2], sizeof keep[2], "b.st.tmp-%ld-0", (long)gone);            /* another target */
    snprintf(keep[3], sizeof keep[3], "%s.tmp-%ldx-0", target, (long)gone);     /* not a temporary's name */
    snprintf(keep[4], sizeof keep[4], "%s.tmp-%ld-0.bak", target, (long)gone);
    for (int i = 0; i < 3; i++) write_all(dead[i], (const unsigned char *)"x", 1);
    for (int i = 0; i < 5; i++) write_all(keep[i], (const unsigned char *)"x", 1);
    ck_assert_int_eq(tg_train_save(ctx, target, &n.params, n.opt, NULL), TG_OK);
    for (int i = 0; i < 3; i++) ck_assert_msg(!exists(dead[i]), "%s was not removed", dead[i]);
    for (int i = 0; i < 5; i++) ck_assert_msg(exists(keep[i]), "%s was removed", keep[i]);
    ck_assert_int_eq(tg_train_load(ctx, target, &n.params, n.opt, NULL), TG_OK);
    done(ctx, &n);
}
END_TEST

/* ---- progress after a resume ------------------------------------------------------- */

static double fake_now;
static double fake_clock(void *user) {
    (void)user;
    return fake_now;
}

/* A run resumed after step 20 of 40 runs at 10 steps/s: the first line and
 * the summary say 10 steps/s and 20 steps, not 21 steps in 0.1 s. */
START_TEST(test_progress_resume) {
    char path[600];
    snprintf(path, sizeof path, "%s/progress.txt", dir);
    FILE *out = fopen(path, "w+");
    ck_assert_ptr_nonnull(out);
    tg_progress p;
    fake_now = 100;
    tg_progress_init(&p, out, 40, 1);
    tg_progress_set_mode(&p, TG_PROGRESS_PLAIN);
    tg_progress_set_clock(&p, fake_clock, NULL);
    tg_progress_resume(&p, 20);
    for (int s = 21; s <= 40; s++) {
        fake_now += 0.1;
        tg_progress_update(&p, s, 1.0, NAN, NAN);
    }
    tg_progress_finish(&p);
    rewind(out);
    char line[512];
    ck_assert_ptr_nonnull(fgets(line, sizeof line, out));
    ck_assert_msg(strstr(line, "step 21/40") && strstr(line, " 10.0 steps/s"), "first line: %s", line);
    bool found = false;
    while (fgets(line, sizeof line, out))
        if (strncmp(line, "done:", 5) == 0) {
            found = true;
            ck_assert_msg(strstr(line, "done: 20 steps in 2.0 s (10.0 steps/s)"), "summary: %s", line);
        }
    ck_assert(found);
    fclose(out);
}
END_TEST

/* ---- the loss log of a resumed run ------------------------------------------------- */

static char *slurp(const char *path) {
    size_t len;
    unsigned char *b = read_all(path, &len);
    b = realloc(b, len + 1);
    b[len] = '\0';
    return (char *)b;
}

/* A run logs steps 1..10, a checkpoint was taken at step 6: the resumed
 * log keeps rows 1..6 (NaN included) and goes on from there. Other columns
 * or step 0: a new log. */
START_TEST(test_plot_open_resume) {
    const char *cols[] = {"step", "loss"}, *other[] = {"step", "accuracy"};
    tg_plot *log;
    ck_assert_int_eq(tg_plot_open(&log, dir, "loss", 2, cols), TG_OK);
    for (int s = 1; s <= 10; s++) tg_plot_row(log, (double[]){s, s == 3 ? NAN : 1.0 / s});
    ck_assert_int_eq(tg_plot_close_data(log), TG_OK);
    ck_assert_int_eq(tg_plot_open_resume(&log, dir, "loss", 2, cols, 6), TG_OK);
    tg_plot_row(log, (double[]){7, 0.5});
    ck_assert_int_eq(tg_plot_close_data(log), TG_OK);
    char *got = slurp("loss.dat");
    ck_assert_str_eq(got, "# step loss\n1 1\n2 0.5\n3 NaN\n4 0.25\n5 0.2\n6 0.1666666667\n7 0.5\n");
    free(got);
    ck_assert_int_eq(tg_plot_open_resume(&log, dir, "loss", 2, other, 6), TG_OK);
    ck_assert_int_eq(tg_plot_close_data(log), TG_OK);
    got = slurp("loss.dat");
    ck_assert_str_eq(got, "# step accuracy\n");
    free(got);
    ck_assert_int_eq(tg_plot_open_resume(&log, dir, "new", 2, cols, 6), TG_OK);
    ck_assert_int_eq(tg_plot_close_data(log), TG_OK);
    ck_assert_int_eq(tg_plot_open_resume(NULL, dir, "loss", 2, cols, 6), TG_ERR_NULL);
    ck_assert_int_eq(tg_plot_open_resume(&log, dir, "loss", 1, cols, 6), TG_ERR_VALUE);
    ck_assert_ptr_null(log);
}
END_TEST

Suite *make_train_state_suite(void) {
    Suite *s = suite_create("train_state");
    TCase *tc = tcase_create("state");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_loop_test(tc, test_resume_bit_exact, 0, OPT_KINDS);
    tcase_add_test(tc, test_params_only);
    tcase_add_test(tc, test_parts);
    tcase_add_test(tc, test_damaged_file);
    tcase_add_test(tc, test_mismatch);
    tcase_add_test(tc, test_other_parts);
    tcase_add_test(tc, test_compute_dtype);
    tcase_add_test(tc, test_not_regular);
    tcase_add_test(tc, test_arguments);
    tcase_add_test(tc, test_stale_temporaries_removed);
    tcase_add_test(tc, test_progress_resume);
    tcase_add_test(tc, test_plot_open_resume);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tg_test_run(make_train_state_suite()); }

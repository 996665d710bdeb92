/* Files that are not files: every reader of a user-named file refuses a
 * device (/dev/zero never ends: a reader filled 1.4 GB in 15 s) and a pipe
 * (opening a FIFO blocks until a writer comes, forever if none does), at
 * once and with a message, through tg_open_regular. Check's per-test
 * timeout (4 s) fails a reader that hangs.
 *
 *  - tg_open_regular itself: a regular file opens; a missing path, a
 *    directory, /dev/zero and a FIFO are refused, each named;
 *  - checkpoint loads (tg_ckpt_load, tg_ckpt_load_ex) and training-state
 *    loads (tg_train_load) of /dev/zero and a FIFO;
 *  - the loss log of a resumed run (tg_plot_open_resume) when NAME.dat is
 *    a FIFO, and tg_plot_render of a FIFO script. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"

static tg_ctx *ctx;
static char dir[256];
static char fifo[512];

static void setup(void) {
    ctx = tg_ctx_new(3);
    tg_test_make_tmpdir(dir, sizeof dir, "hostile");
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
}
static void teardown(void) {
    tg_test_remove_tree(dir);
    tg_ctx_free(ctx);
}

/* A model of one tensor, saved to DIR/NAME (a training state with an SGD
 * optimizer when `train`). */
typedef struct model {
    tg_tensor *w;
    tg_params params;
    tg_optim *opt;
} model;

static void model_init(model *m) {
    m->w = tg_persist(ctx, tg_full(ctx, TG_F32, TG_SHAPE(3), 2.0));
    m->params = (tg_params){0};
    ck_assert(tg_params_add(ctx, &m->params, NULL, "w", m->w, false));
    tg_sgd_opts o = tg_sgd_defaults(0.1);
    m->opt = tg_sgd_new(ctx, &m->params, &o);
    ck_assert_ptr_nonnull(m->opt);
}

static void model_free(model *m) {
    tg_optim_free(ctx, m->opt);
    tg_params_free(&m->params);
    tg_tensor_free(ctx, m->w);
}

START_TEST(test_open_regular) {
    char path[512], why[512];
    snprintf(path, sizeof path, "%s/a.txt", dir);
    tg_test_write_file(path, "abc", 3);
    int fd = tg_open_regular(path, why, sizeof why);
    ck_assert_int_ge(fd, 0);
    char buf[8];
    ck_assert_int_eq(read(fd, buf, sizeof buf), 3);
    close(fd);
    ck_assert_str_eq(why, "");

    snprintf(path, sizeof path, "%s/missing", dir);
    ck_assert_int_eq(tg_open_regular(path, why, sizeof why), -1);
    ck_assert_int_eq(errno, ENOENT);
    tg_test_assert_contains(why, "cannot open ", path, ": No such file or directory", NULL);
    ck_assert_int_eq(tg_open_regular(dir, why, sizeof why), -1);
    ck_assert_int_eq(errno, EISDIR);
    tg_test_assert_contains(why, dir, " is a directory, not a regular file", NULL);
    ck_assert_int_eq(tg_open_regular("/dev/zero", why, sizeof why), -1);
    ck_assert_str_eq(why, "/dev/zero is a character device, not a regular file (a device or a pipe need not end)");
    ck_assert_int_eq(tg_open_regular(fifo, why, sizeof why), -1);
    tg_test_assert_contains(why, fifo, " is a pipe (FIFO), not a regular file", NULL);
    ck_assert_int_eq(tg_open_regular(fifo, NULL, 0), -1); /* no reason wanted */
}
END_TEST

/* The calls: a checkpoint load of /dev/zero or a FIFO returns at
 * once with TG_ERR_IO naming the file, and the model keeps its values. */
START_TEST(test_checkpoint_load_of_a_device_or_a_pipe) {
    model m;
    model_init(&m);
    const char *paths[2] = {"/dev/zero", fifo};
    const char *kinds[2] = {"is a character device, not a regular file", "is a pipe (FIFO), not a regular file"};
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(tg_ckpt_load(ctx, paths[i], &m.params, NULL, NULL), TG_ERR_IO);
        tg_test_assert_error(ctx, TG_ERR_IO, "tg_ckpt_load: ", paths[i], kinds[i], NULL);
        tg_ckpt_options o = {.ignore_extra = true};
        tg_params none = {0};
        tg_meta meta = {0};
        ck_assert_int_eq(tg_ckpt_load_ex(ctx, paths[i], &none, NULL, &meta, &o), TG_ERR_IO);
        tg_test_assert_error(ctx, TG_ERR_IO, "tg_ckpt_load_ex: ", paths[i], kinds[i], NULL);
        ck_assert_int_eq(meta.count, 0);
        ck_assert_int_eq(tg_train_load(ctx, paths[i], &m.params, m.opt, NULL), TG_ERR_IO);
        tg_test_assert_error(ctx, TG_ERR_IO, "tg_train_load: ", paths[i], kinds[i], NULL);
    }
    ck_assert_double_eq(tg_get_flat(ctx, m.w, 2), 2.0);
    /* a regular file still loads */
    char path[512];
    snprintf(path, sizeof path, "%s/w.st", dir);
    ck_assert_int_eq(tg_train_save(ctx, path, &m.params, m.opt, NULL), TG_OK);
    ck_assert_int_eq(tg_train_load(ctx, path, &m.params, m.opt, NULL), TG_OK);
    model_free(&m);
}
END_TEST

/* A resumed run's loss log whose old NAME.dat is a FIFO: no rows to carry
 * over, and the new log cannot be written there (no reader): TG_ERR_IO at
 * once, not a run stopped at its start. */
START_TEST(test_resumed_log_that_is_a_pipe) {
    const char *cols[2] = {"step", "loss"};
    char path[512];
    snprintf(path, sizeof path, "%s/log.dat", dir);
    ck_assert_int_eq(mkfifo(path, 0600), 0);
    tg_plot *p = NULL;
    errno = 0;
    ck_assert_int_eq(tg_plot_open_resume(&p, dir, "log", 2, cols, 10), TG_ERR_IO);
    ck_assert_ptr_null(p);
    ck_assert_int_eq(errno, ENXIO);
    /* the log of a regular file goes on from its rows */
    snprintf(path, sizeof path, "%s/loss.dat", dir);
    tg_test_write_file(path, "# step loss\n1 0.5\n2 0.25\n", 24);
    ck_assert_int_eq(tg_plot_open_resume(&p, dir, "loss", 2, cols, 1), TG_OK);
    ck_assert_int_eq(tg_plot_close_data(p), TG_OK);
    size_t n;
    char *text = tg_test_read_file(path, &n);
    ck_assert_str_eq(text, "# step loss\n1 0.5\n");
    free(text);
}
END_TEST

/* A gnuplot script that is a FIFO is refused before gnuplot runs. */
START_TEST(test_render_of_a_pipe) {
    bool rendered = true;
    char msg[512];
    ck_assert_int_eq(tg_plot_render(fifo, &rendered, msg, sizeof msg), TG_ERR_IO);
    ck_assert(!rendered);
    tg_test_assert_contains(msg, "tg_plot_render: ", fifo, " is a pipe (FIFO), not a regular file", NULL);
}
END_TEST

Suite *make_hostile_files_suite(void) {
    return tg_test_suite("hostile_files", setup, teardown, test_open_regular,
                         test_checkpoint_load_of_a_device_or_a_pipe, test_resumed_log_that_is_a_pipe,
                         test_render_of_a_pipe, NULL);
}

int main(void) { return tg_test_run(make_hostile_files_suite()); }

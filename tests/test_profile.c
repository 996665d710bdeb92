/* The per-op profile (tg_profile_*): which rows it keeps, how it counts
 * records and steps, and that it is off by default. Times are asserted only
 * to be sane (>= 0, a positive total): their values are the machine's. */
#include "testutil.h"

#include <string.h>

static tg_ctx *ctx;
static void setup(void) { ctx = tg_ctx_new(1); }
static void teardown(void) { tg_ctx_free(ctx); }

/* One training-like step: 2 muls, a sum, backward, an SGD-like update. */
static void step(tg_tensor *w) {
    tg_tensor *x = tg_randn(ctx, TG_F32, TG_SHAPE(64, 32), 0, 1);
    tg_tensor *y = tg_mul(ctx, tg_mul(ctx, x, w), w);
    tg_backward(ctx, tg_sum(ctx, y));
    tg_zero_grad(ctx, w);
    tg_ctx_reset(ctx);
}

static const tg_profile_row *find(const tg_profile_row *rows, size_t n, const char *op) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(rows[i].op, op) == 0) return &rows[i];
    return NULL;
}

START_TEST(test_profile_counts_records_and_steps) {
    tg_tensor *w = tg_persist(ctx, tg_randn(ctx, TG_F32, TG_SHAPE(64, 32), 0, 1));
    tg_requires_grad(ctx, w);
    tg_profile_row rows[16];
    int64_t steps = -1;
    step(w); /* off: nothing is counted */
    ck_assert_uint_eq(tg_profile_rows(ctx, rows, 16, &steps), 0);
    ck_assert_int_eq(steps, 0);

    tg_profile_enable(ctx, true);
    for (int i = 0; i < 3; i++) step(w);
    size_t n = tg_profile_rows(ctx, rows, 16, &steps);
    ck_assert(tg_ok(ctx));
    ck_assert_int_eq(steps, 3);
    const tg_profile_row *mul = find(rows, n, "mul"), *sum = find(rows, n, "sum");
    ck_assert_ptr_nonnull(mul);
    ck_assert_ptr_nonnull(sum);
    ck_assert_int_eq(mul->calls, 6);
    ck_assert_int_eq(sum->calls, 3);
    ck_assert_ptr_nonnull(find(rows, n, "(no record: after backward)"));
    double total = 0;
    for (size_t i = 0; i < n; i++) {
        ck_assert(rows[i].forward_s >= 0 && rows[i].backward_s >= 0);
        if (i > 0) /* most time first */
            ck_assert(rows[i - 1].forward_s + rows[i - 1].backward_s >= rows[i].forward_s + rows[i].backward_s);
        total += rows[i].forward_s + rows[i].backward_s;
    }
    ck_assert(total > 0);
    ck_assert(mul->backward_s > 0);

    /* the table names the ops and the step count */
    FILE *f = tmpfile();
    ck_assert_ptr_nonnull(f);
    tg_profile_print(f, ctx);
    rewind(f);
    char text[4096] = {0};
    ck_assert_uint_gt(fread(text, 1, sizeof text - 1, f), 0);
    fclose(f);
    tg_test_assert_contains(text, "mul", "over 3 steps", NULL);

    /* enabling again starts afresh; off forgets */
    tg_profile_enable(ctx, true);
    ck_assert_uint_eq(tg_profile_rows(ctx, rows, 16, &steps), 0);
    tg_profile_enable(ctx, false);
    step(w);
    ck_assert_uint_eq(tg_profile_rows(ctx, rows, 16, &steps), 0);
    tg_tensor_free(ctx, w);
}
END_TEST

/* Custom ops with 200 distinct names: the first 127 get rows of their own,
 * the rest share the "(other ops)" row, and no record is lost. */
static tg_tensor *copy_forward(tg_ctx *c, tg_node *node, tg_tensor *const *in, void *user) {
    (void)node, (void)user;
    return tg_copy(c, in[0]);
}
static void copy_backward(tg_ctx *c, tg_node *node) { tg_node_accumulate(c, node, 0, tg_node_grad_output(node)); }

START_TEST(test_profile_many_ops_share_a_row) {
    enum { N = 200 };
    static char names[N][16];
    static tg_op_def defs[N];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "op%d", i);
        defs[i] = (tg_op_def){.name = names[i], .forward = copy_forward, .backward = copy_backward};
    }
    tg_profile_enable(ctx, true);
    tg_tensor *x = tg_randn(ctx, TG_F32, TG_SHAPE(4), 0, 1);
    tg_requires_grad(ctx, x);
    for (int i = 0; i < N; i++) x = tg_op_apply(ctx, &defs[i], 1, &x, NULL);
    tg_backward(ctx, tg_sum(ctx, x));
    tg_ctx_reset(ctx);
    ck_assert(tg_ok(ctx));
    tg_profile_row rows[300];
    size_t n = tg_profile_rows(ctx, rows, 300, NULL);
    ck_assert_uint_eq(n, 128);
    int64_t calls = 0;
    for (size_t i = 0; i < n; i++) calls += rows[i].calls;
    ck_assert_int_eq(calls, N + 1); /* the ops and the sum */
    const tg_profile_row *other = find(rows, n, "(other ops)");
    ck_assert_ptr_nonnull(other);
    ck_assert(tg_profile_rows(ctx, rows, 5, NULL) == 5); /* max is honoured */
}
END_TEST

Suite *make_profile_suite(void) {
    return tg_test_suite("profile", setup, teardown, test_profile_counts_records_and_steps,
                         test_profile_many_ops_share_a_row, NULL);
}

int main(void) { return tg_test_run(make_profile_suite()); }

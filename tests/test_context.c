/* The context: the sticky error state and every error path of the tensor
 * core, the allocator hook, the arena and persistent tensors. */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

static tg_ctx *ctx;

static void setup(void) { ctx = tg_ctx_new(1); }
static void teardown(void) { tg_ctx_free(ctx); }

/* Asserts the context holds `status` and a message containing `text`, then
 * clears it and checks it is usable again. */
static void expect_error(tg_status status, const char *text) {
    ck_assert_msg(tg_status_of(ctx) == status, "status %d (%s), want %d; message: %s", tg_status_of(ctx),
                  tg_status_name(tg_status_of(ctx)), status, tg_error_message(ctx));
    ck_assert_msg(strstr(tg_error_message(ctx), text) != NULL, "message '%s' lacks '%s'", tg_error_message(ctx), text);
    tg_clear_error(ctx);
    ck_assert(tg_ok(ctx));
    ck_assert_str_eq(tg_error_message(ctx), "");
    ck_assert_ptr_nonnull(tg_zeros(ctx, TG_F32, TG_SHAPE(2)));
}

START_TEST(test_bad_shapes) {
    ck_assert_ptr_null(tg_zeros(ctx, TG_F32, TG_SHAPE(2, -3)));
    expect_error(TG_ERR_SHAPE, "tg_zeros: negative size -3 in dim 1 of shape (2, -3)");
    int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    ck_assert_ptr_null(tg_ones(ctx, TG_F64, 9, nine));
    expect_error(TG_ERR_SHAPE, "tg_ones: ndim 9 is outside 0..8");
    ck_assert_ptr_null(tg_full(ctx, TG_F64, -1, nine, 0));
    expect_error(TG_ERR_SHAPE, "tg_full: ndim -1");
    ck_assert_ptr_null(tg_zeros(ctx, TG_F32, 2, NULL));
    expect_error(TG_ERR_NULL, "tg_zeros: argument 'shape' is NULL");
    ck_assert_ptr_null(tg_zeros(ctx, (tg_dtype)7, TG_SHAPE(2)));
    expect_error(TG_ERR_DTYPE, "tg_zeros: unknown dtype 7");
}
END_TEST

START_TEST(test_size_overflow) {
    /* 2^62 elements: numel alone overflows any sane limit, bytes overflow int64 */
    ck_assert_ptr_null(tg_zeros(ctx, TG_F64, TG_SHAPE(1 << 30, 1 << 30, 4)));
    expect_error(TG_ERR_OOM, "tg_zeros: shape (1073741824, 1073741824, 4) has more than 2^56 elements");
    ck_assert_ptr_null(tg_randn(ctx, TG_F32, TG_SHAPE(INT64_MAX, INT64_MAX), 0, 1));
    expect_error(TG_ERR_OOM, "tg_randn");
    /* a zero size makes any product fine */
    ck_assert_ptr_nonnull(tg_zeros(ctx, TG_F32, TG_SHAPE(INT64_MAX, 0)));
    ck_assert(tg_ok(ctx));
}
END_TEST

START_TEST(test_null_inputs) {
    ck_assert_ptr_null(tg_copy(ctx, NULL));
    expect_error(TG_ERR_NULL, "tg_copy: argument 't' is NULL");
    ck_assert_ptr_null(tg_view(ctx, NULL, TG_SHAPE(1)));
    expect_error(TG_ERR_NULL, "tg_view: argument 't' is NULL");
    ck_assert_ptr_null(tg_from_buffer(ctx, TG_F32, TG_SHAPE(2), NULL));
    expect_error(TG_ERR_NULL, "tg_from_buffer: argument 'data' is NULL");
    ck_assert_ptr_null(tg_persist(ctx, NULL));
    expect_error(TG_ERR_NULL, "tg_persist");
    /* a NULL context: nothing happens, nothing crashes */
    ck_assert_ptr_null(tg_zeros(NULL, TG_F32, TG_SHAPE(2)));
    ck_assert_ptr_null(tg_copy(NULL, NULL));
    ck_assert(!tg_ok(NULL));
    ck_assert_int_eq(tg_status_of(NULL), TG_ERR_NULL);
    tg_ctx_reset(NULL);
    tg_ctx_free(NULL);
    tg_clear_error(NULL);
}
END_TEST

START_TEST(test_mismatched_dtypes_and_shapes) {
    tg_tensor *a = tg_zeros(ctx, TG_F32, TG_SHAPE(2, 3));
    tg_tensor *b = tg_zeros(ctx, TG_F64, TG_SHAPE(2, 3));
    tg_tensor *c = tg_zeros(ctx, TG_F32, TG_SHAPE(3, 2));
    ck_assert_ptr_null(tg_assign(ctx, a, b));
    expect_error(TG_ERR_DTYPE, "tg_assign: dtypes differ: float32 and float64");
    ck_assert_ptr_null(tg_assign(ctx, a, c));
    expect_error(TG_ERR_SHAPE, "tg_assign: shapes differ: (2, 3) and (3, 2)");
}
END_TEST

START_TEST(test_first_error_wins_and_calls_do_nothing) {
    tg_tensor *a = tg_ones(ctx, TG_F32, TG_SHAPE(4));
    ck_assert_ptr_null(tg_zeros(ctx, TG_F32, TG_SHAPE(-1)));
    char first[512];
    snprintf(first, sizeof first, "%s", tg_error_message(ctx));
    /* in error: calls return NULL and change nothing, even valid ones */
    ck_assert_ptr_null(tg_zeros(ctx, TG_F32, TG_SHAPE(2)));
    ck_assert_ptr_null(tg_copy(ctx, a));
    tg_fill(ctx, a, 5.0);
    ck_assert_float_eq(((float *)a->data)[0], 1.0f);
    ck_assert_ptr_null(tg_view(ctx, a, TG_SHAPE(-7))); /* a second misuse */
    ck_assert_str_eq(tg_error_message(ctx), first);
    expect_error(TG_ERR_SHAPE, "tg_zeros: negative size -1");
}
END_TEST

START_TEST(test_error_message_names_values) {
    ck_assert_ptr_null(tg_rand(ctx, TG_F32, TG_SHAPE(2), 1.0, -1.0));
    expect_error(TG_ERR_VALUE, "tg_rand: low=1 > high=-1");
    ck_assert_ptr_null(tg_randn(ctx, TG_F32, TG_SHAPE(2), 0.0, -2.0));
    expect_error(TG_ERR_VALUE, "tg_randn: std=-2 is negative");
    ck_assert_ptr_null(tg_rand(ctx, TG_F32, TG_SHAPE(2), 0.0, INFINITY));
    expect_error(TG_ERR_VALUE, "must be finite");
}
END_TEST

/* TG_ABORT_ON_ERROR=1 aborts at the first error with its message: run it in
 * a child process and look at how the child ended and what it printed. */
START_TEST(test_abort_on_error_env) {
    int pipefd[2];
    ck_assert_int_eq(pipe(pipefd), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        dup2(pipefd[1], 2);
        close(pipefd[0]);
        setenv("TG_ABORT_ON_ERROR", "1", 1);
        tg_ctx *c = tg_ctx_new(0);
        tg_zeros(c, TG_F32, TG_SHAPE(-5));
        _exit(0); /* not reached when it aborts */
    }
    close(pipefd[1]);
    char out[1024] = {0};
    size_t got = 0;
    ssize_t n;
    while ((n = read(pipefd[0], out + got, sizeof out - 1 - got)) > 0) got += (size_t)n;
    close(pipefd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    ck_assert(WIFSIGNALED(status));
    ck_assert_int_eq(WTERMSIG(status), SIGABRT);
    ck_assert_ptr_nonnull(strstr(out, "tg_zeros: negative size -5"));
}
END_TEST

/* ---- allocator hook ------------------------------------------------------ */

typedef struct counting_alloc {
    int calls;   /* allocations so far */
    int fail_at; /* the allocation number that fails (1-based), 0: never */
    int live;    /* allocations not yet freed */
} counting_alloc;

static void *hook_alloc(size_t size, size_t align, void *user) {
    counting_alloc *a = user;
    a->calls++;
    if (a->fail_at && a->calls == a->fail_at) return NULL;
    size = (size + align - 1) / align * align;
    void *p = aligned_alloc(align, size ? size : align);
    if (p) a->live++;
    return p;
}

static void hook_free(void *p, void *user) {
    counting_alloc *a = user;
    if (p) a->live--;
    free(p);
}

START_TEST(test_allocation_failure_is_an_error) {
    /* Fail each allocation in turn: every failure is reported (or the
     * context cannot be made at all), nothing crashes, nothing leaks, and
     * after clearing the error the context works. */
    for (int fail = 1; fail <= 12; fail++) {
        counting_alloc state = {0, fail, 0};
        tg_allocator alloc = {hook_alloc, hook_free, &state};
        tg_ctx *c = tg_ctx_new_with_allocator(3, &alloc);
        if (!c) {
            ck_assert_int_eq(state.live, 0);
            continue;
        }
        tg_tensor *t = NULL;
        for (int step = 0; step < 3 && tg_ok(c); step++) {
            t = tg_randn(c, TG_F32, TG_SHAPE(1000, 600), 0, 1); /* > one chunk */
            tg_tensor *p = tg_persist(c, tg_ones(c, TG_F64, TG_SHAPE(10)));
            (void)p;
            tg_ctx_reset(c);
        }
        if (!tg_ok(c)) {
            ck_assert_int_eq(tg_status_of(c), TG_ERR_OOM);
            ck_assert_ptr_nonnull(strstr(tg_error_message(c), "out of memory"));
            tg_clear_error(c);
            state.fail_at = 0;
            t = tg_zeros(c, TG_F32, TG_SHAPE(8));
            ck_assert_ptr_nonnull(t);
        }
        tg_ctx_free(c);
        ck_assert_int_eq(state.live, 0);
    }
}
END_TEST

START_TEST(test_custom_allocator_used) {
    counting_alloc state = {0, 0, 0};
    tg_allocator alloc = {hook_alloc, hook_free, &state};
    tg_ctx *c = tg_ctx_new_with_allocator(3, &alloc);
    ck_assert_ptr_nonnull(c);
    tg_zeros(c, TG_F32, TG_SHAPE(100));
    ck_assert_int_gt(state.calls, 1);
    tg_ctx_free(c);
    ck_assert_int_eq(state.live, 0);
    tg_allocator bad = {NULL, hook_free, &state};
    ck_assert_ptr_null(tg_ctx_new_with_allocator(3, &bad));
}
END_TEST

/* ---- arena ----------------------------------------------------------------- */

START_TEST(test_arena_alignment_and_reset) {
    for (int i = 1; i < 50; i++) {
        tg_tensor *t = tg_zeros(ctx, TG_F32, TG_SHAPE(i));
        ck_assert_uint_eq((uintptr_t)t->data % 64, 0);
        void *p = tg_arena_alloc(ctx, (size_t)i * 3);
        ck_assert_uint_eq((uintptr_t)p % 64, 0);
    }
    ck_assert_uint_gt(tg_arena_used(ctx), 0);
    tg_ctx_reset(ctx);
    ck_assert_uint_eq(tg_arena_used(ctx), 0);
}
END_TEST

/* Steps of very different sizes alternating (a big step, a tiny one, an
 * empty one, a big one: what a loop of micro-batches and evaluations does) keep the
 * footprint within a few of the biggest step: in checked builds the live
 * and quarantined chunks must not grow into each other (they once doubled
 * at every such cycle, to 32 GiB under ASan). */
START_TEST(test_arena_footprint_bounded_when_steps_vary) {
    const size_t big = (size_t)26 << 20;
    for (int step = 0; step < 200; step++) {
        const size_t bytes = step % 4 == 1 ? 100 : step % 4 == 2 ? 0 : big;
        for (size_t done = 0; done < bytes; done += (size_t)3 << 20)
            ck_assert_ptr_nonnull(
                tg_arena_alloc(ctx, bytes - done < ((size_t)3 << 20) ? bytes - done : (size_t)3 << 20));
        tg_ctx_reset(ctx);
        ck_assert_uint_le(tg_arena_capacity(ctx), 4 * big);
    }
    ck_assert(tg_ok(ctx));
}
END_TEST

/* 10,000 allocate/reset cycles of a varying, multi-chunk step: after the
 * first steps the footprint stays flat and the allocator is not called. */
START_TEST(test_arena_footprint_flat) {
    counting_alloc state = {0, 0, 0};
    tg_allocator alloc = {hook_alloc, hook_free, &state};
    tg_ctx *c = tg_ctx_new_with_allocator(5, &alloc);
    size_t cap_after_warmup = 0;
    int calls_after_warmup = 0;
    for (int step = 0; step < 10000; step++) {
        for (int k = 0; k < 20; k++) tg_zeros(c, TG_F32, TG_SHAPE(100 + (step * 7 + k * 13) % 300, 64));
        tg_ctx_reset(c);
        if (step == 10) {
            cap_after_warmup = tg_arena_capacity(c);
            calls_after_warmup = state.calls;
        }
    }
    ck_assert(tg_ok(c));
    ck_assert_uint_eq(tg_arena_capacity(c), cap_after_warmup);
    ck_assert_int_eq(state.calls, calls_after_warmup);
    /* the footprint is about one step's worth (20 * 400 * 64 * 4 bytes max) */
    ck_assert_uint_le(tg_arena_capacity(c), 4u << 20);
    tg_ctx_free(c);
    ck_assert_int_eq(state.live, 0);
}
END_TEST

/* Steps that alternate with empty ones (a training step, then a reset with
 * nothing in between, as the examples do around evaluation and logging),
 * and the mixed cycle above: after the first steps the allocator is not
 * called again, so no page is given back and faulted in anew each step
 * (checked builds once freed and reallocated their chunks at every empty
 * step: 765k page faults in 40 steps of the GPT example). */
START_TEST(test_arena_no_allocations_when_steps_alternate) {
    counting_alloc state = {0, 0, 0};
    tg_allocator alloc = {hook_alloc, hook_free, &state};
    tg_ctx *c = tg_ctx_new_with_allocator(5, &alloc);
    const size_t big = (size_t)5 << 20;
    int calls_after_warmup = 0;
    for (int step = 0; step < 400; step++) {
        const int phase = _i == 0 ? step % 2 : step % 4;
        const size_t bytes = phase == 0 ? big : phase == 1 ? 0 : phase == 2 ? 100 : big / 2;
        if (bytes) ck_assert_ptr_nonnull(tg_arena_alloc(c, bytes));
        tg_ctx_reset(c);
        if (step == 20) calls_after_warmup = state.calls;
    }
    ck_assert(tg_ok(c));
    ck_assert_int_eq(state.calls, calls_after_warmup);
    ck_assert_uint_le(tg_arena_capacity(c), 4 * big);
    tg_ctx_free(c);
    ck_assert_int_eq(state.live, 0);
}
END_TEST

START_TEST(test_persistent_survives_reset) {
    tg_tensor *w = tg_persist(ctx, tg_arange(ctx, TG_F32, 0, 6, 1));
    ck_assert(w->persistent);
    tg_requires_grad(ctx, w);
    ck_assert_ptr_nonnull(w->grad);
    ck_assert(w->grad->persistent);
    for (int i = 0; i < 5; i++) {
        tg_randn(ctx, TG_F32, TG_SHAPE(1000), 0, 1);
        tg_ctx_reset(ctx);
    }
    for (int i = 0; i < 6; i++) ck_assert_float_eq(((float *)w->data)[i], (float)i);
    tg_tensor *u = tg_persist(ctx, tg_ones(ctx, TG_F64, TG_SHAPE(3)));
    tg_tensor_free(ctx, w); /* explicit free; u is freed by tg_ctx_free */
    ck_assert_double_eq(((double *)u->data)[2], 1.0);
}
END_TEST

START_TEST(test_params_list) {
    tg_params ps = {0};
    tg_tensor *w = tg_persist(ctx, tg_zeros(ctx, TG_F32, TG_SHAPE(3, 2)));
    tg_tensor *b = tg_persist(ctx, tg_zeros(ctx, TG_F32, TG_SHAPE(3)));
    ck_assert(tg_params_add(ctx, &ps, "fc1", "weight", w, true));
    ck_assert(tg_params_add(ctx, &ps, "fc1", "bias", b, false));
    ck_assert_int_eq(ps.count, 2);
    ck_assert_int_eq(tg_params_numel(&ps), 9);
    ck_assert_ptr_eq(tg_params_find(&ps, "fc1.bias")->value, b);
    ck_assert(w->requires_grad && w->grad);
    ck_assert(!tg_params_add(ctx, &ps, "fc1", "weight", b, true));
    expect_error(TG_ERR_VALUE, "tg_params_add: duplicate parameter name 'fc1.weight'");
    ck_assert(!tg_params_add(ctx, &ps, NULL, "x", tg_zeros(ctx, TG_F32, TG_SHAPE(1)), true));
    expect_error(TG_ERR_STATE, "arena tensor");
    tg_params_free(&ps);
}
END_TEST

Suite *make_context_suite(void) {
    Suite *s = suite_create("context");
    tg_test_tcase(s, "errors", setup, teardown, test_bad_shapes, test_size_overflow, test_null_inputs,
                  test_mismatched_dtypes_and_shapes, test_first_error_wins_and_calls_do_nothing,
                  test_error_message_names_values, test_abort_on_error_env, NULL);
    TCase *tc = tg_test_tcase(s, "memory", setup, teardown, test_allocation_failure_is_an_error,
                              test_custom_allocator_used, test_arena_alignment_and_reset, test_arena_footprint_flat,
                              test_arena_footprint_bounded_when_steps_vary, test_persistent_survives_reset,
                              test_params_list, NULL);
    tcase_add_loop_test(tc, test_arena_no_allocations_when_steps_alternate, 0, 2);
    tcase_set_timeout(tc, 120);
    return s;
}

int main(void) { return tg_test_run(make_context_suite()); }

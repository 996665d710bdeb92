/* Lifetime safety: the misuses that used to give silent wrong answers or
 * crashes, each now an error naming the call.
 *
 *  - stale: a tensor kept across tg_ctx_reset (the arena has handed its
 *    memory out again) is refused by every call, and a backward on a loss
 *    from before the reset too; tg_record refuses a stale input, and
 *    another context's (tests/test_ownership.c has the rest of those);
 *  - version: an input an op saved, changed in place before the backward
 *    (tg_fill, tg_assign, tg_set*, an optimizer step, a checkpoint load),
 *    makes the backward an error instead of a gradient from the new values;
 *  - ownership: freeing through the wrong context, freeing a layer's or an
 *    optimizer's own tensor, and freeing twice are errors, not crashes.
 *
 * The alias scenarios need the checked build (TG_CHECKED, on in every build
 * but Release): it keeps the previous step's arena memory out of use, so
 * the stale tensor keeps its header. A Release build of the tests skips
 * them, saying so. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/tape.h" /* tg_record, for an op written here; TG_UNPOISON */
#include "testutil.h"

static tg_ctx *ctx;
static void setup(void) { ctx = tg_ctx_new(17); }
static void teardown(void) { tg_ctx_free(ctx); }

/* True in a checked build; called right after a reset of a used arena. */
static bool checked_build(void) {
    if (tg_arena_quarantined(ctx) > 0) return true;
    fprintf(stderr, "test_lifetime: TG_CHECKED is off (a Release build): skipping a scenario it needs\n");
    return false;
}

/* ---- stale tensors -------------------------------------------------------------- */

/* The scenario: a 2x2 float32 `a`, a reset, a 5x5 float64 made in
 * a's old memory, then a used: an error, not the new tensor's values. */
START_TEST(test_use_after_reset_is_an_error) {
    tg_tensor *a = tg_ones(ctx, TG_F32, TG_SHAPE(2, 2));
    ck_assert_ptr_nonnull(a);
    tg_ctx_reset(ctx);
    tg_tensor *b = tg_full(ctx, TG_F64, TG_SHAPE(5, 5), 7.0);
    ck_assert_ptr_nonnull(b);
    if (!checked_build()) return;
    tg_test_assert_fails(ctx, tg_add(ctx, a, a), TG_ERR_STATE,
                         "tg_add: argument 'a', a (2, 2) float32 tensor, is from step 0, before tg_ctx_reset; the "
                         "context is at step 1",
                         NULL);
    tg_test_assert_fails(ctx, tg_mul(ctx, b, a), TG_ERR_STATE, "tg_mul: argument 'b'", "from step 0", NULL);
    /* b is what it was */
    ck_assert_double_eq(tg_get_flat(ctx, b, 24), 7.0);
    ck_assert(tg_ok(ctx));
}
END_TEST

/* The second scenario: a backward on a loss from before the reset,
 * with a new step's tape in place. */
START_TEST(test_backward_after_reset_is_an_error) {
    tg_tensor *x = tg_requires_grad(ctx, tg_arange(ctx, TG_F32, 1, 4, 1));
    tg_tensor *loss = tg_sum(ctx, tg_mul(ctx, x, x));
    ck_assert_ptr_nonnull(loss);
    tg_ctx_reset(ctx);
    tg_tensor *y = tg_requires_grad(ctx, tg_ones(ctx, TG_F64, TG_SHAPE(5, 5)));
    tg_tensor *l2 = tg_sum(ctx, tg_exp(ctx, y));
    ck_assert_ptr_nonnull(l2);
    if (!checked_build()) return;
    tg_backward(ctx, loss);
    tg_test_assert_error(ctx, TG_ERR_STATE, "tg_backward: argument 'out', a () float32 tensor, is from step 0", NULL);
    /* the new step's tape is intact */
    tg_backward(ctx, l2);
    ck_assert(tg_ok(ctx));
    ck_assert_double_eq_tol(tg_get_flat(ctx, y->grad, 0), exp(1.0), 1e-12);
}
END_TEST

/* Without any new allocation the stale header is intact in every build,
 * Release included: the always-on check sees it. */
START_TEST(test_stale_seen_in_every_build) {
    tg_tensor *a = tg_arange(ctx, TG_F64, 0, 6, 1);
    tg_ctx_reset(ctx);
    tg_test_assert_fails(ctx, tg_sum(ctx, a), TG_ERR_STATE, "tg_sum: argument 'x', a (6,) float64 tensor",
                         "from step 0", "at step 1", NULL);
    tg_ctx_reset(ctx);
    tg_ctx_reset(ctx);
    tg_test_assert_fails(ctx, tg_copy(ctx, a), TG_ERR_STATE, "tg_copy", "from step 0", "at step 3", NULL);
}
END_TEST

/* Every kind of call refuses a stale tensor, naming itself. */
START_TEST(test_stale_refused_everywhere) {
    tg_tensor *a = tg_ones(ctx, TG_F32, TG_SHAPE(3));
    tg_tensor *w = tg_persist(ctx, tg_ones(ctx, TG_F32, TG_SHAPE(3)));
    tg_tensor *v = tg_view(ctx, w, TG_SHAPE(1, 3)); /* an arena view of a persistent tensor */
    tg_ctx_reset(ctx);
    tg_tensor *fresh = tg_zeros(ctx, TG_F32, TG_SHAPE(3));
    (void)fresh;
    if (!checked_build()) return;
    tg_test_assert_fails(ctx, tg_persist(ctx, a), TG_ERR_STATE, "tg_persist", "before tg_ctx_reset", NULL);
    tg_test_assert_fails(ctx, tg_view(ctx, a, TG_SHAPE(3, 1)), TG_ERR_STATE, "tg_view", NULL);
    tg_test_assert_fails(ctx, tg_requires_grad(ctx, a), TG_ERR_STATE, "tg_requires_grad", NULL);
    tg_test_assert_fails(ctx, tg_sum(ctx, v), TG_ERR_STATE, "tg_sum", "(1, 3) float32", NULL);
    ck_assert(isnan(tg_get_flat(ctx, a, 0)));
    tg_test_assert_error(ctx, TG_ERR_STATE, "tg_get_flat", NULL);
    tg_fill(ctx, a, 2.0);
    tg_test_assert_error(ctx, TG_ERR_STATE, "tg_fill", NULL);
    tg_test_assert_fails(ctx, tg_assign(ctx, w, a), TG_ERR_STATE, "tg_assign: argument 'src'", NULL);
    tg_backward_ex(ctx, tg_mul(ctx, tg_requires_grad(ctx, tg_ones(ctx, TG_F32, TG_SHAPE(3))), w), a, false);
    tg_test_assert_error(ctx, TG_ERR_STATE, "tg_backward: argument 'grad_out'", NULL);
    /* persistent tensors are never stale */
    tg_tensor *s = tg_sum(ctx, tg_mul(ctx, w, w));
    ck_assert_ptr_nonnull(s);
    ck_assert_double_eq(tg_get_flat(ctx, s, 0), 3.0);
    tg_tensor_free(ctx, w);
    ck_assert(tg_ok(ctx));
}
END_TEST

/* Parameters and their grads survive any number of resets: a step per
 * reset trains as before. */
START_TEST(test_persistent_never_stale) {
    tg_tensor *w = tg_requires_grad(ctx, tg_persist(ctx, tg_arange(ctx, TG_F64, 1, 4, 1)));
    for (int step = 0; step < 5; step++) {
        tg_zero_grad(ctx, w);
        tg_backward(ctx, tg_sum(ctx, tg_mul(ctx, w, w)));
        ck_assert_msg(tg_ok(ctx), "step %d: %s", step, tg_error_message(ctx));
        ck_assert_double_eq(tg_get_flat(ctx, w->grad, 2), 6.0);
        tg_ctx_reset(ctx);
    }
}
END_TEST

/* Every op of the registry (its first variant, float64) refuses inputs
 * made before the reset. ASan builds poison the stale tensors; their
 * headers are unpoisoned here so that the registry's own forwards, which
 * read a shape or two (slice), can run: the check then goes by the
 * header's step, and the data stays poisoned, so an op that read its
 * inputs before checking them would be reported. */
START_TEST(test_every_op_refuses_stale_inputs) {
    for (int i = 0; i < tg_registry_count(); i++) {
        const tg_op_info *op = tg_registry_get(i);
        tg_op_case c;
        ck_assert_msg(tg_registry_build(ctx, op, NULL, TG_F64, &c), "%s: %s", op->def->name, tg_error_message(ctx));
        int64_t *index = NULL; /* the integer data lives in the arena too */
        if (c.index) {
            index = tg_test_malloc((size_t)c.n_index * sizeof *index);
            memcpy(index, c.index, (size_t)c.n_index * sizeof *index);
            c.index = index;
        }
        tg_ctx_reset(ctx);
        tg_zeros(ctx, TG_F64, TG_SHAPE(64)); /* something new in the arena */
        for (int k = 0; k < c.n_inputs; k++) TG_UNPOISON(c.inputs[k], sizeof(tg_tensor_impl));
        tg_tensor *y = tg_registry_forward(ctx, &c);
        ck_assert_msg(y == NULL && tg_status_of(ctx) == TG_ERR_STATE &&
                          strstr(tg_error_message(ctx), "before tg_ctx_reset"),
                      "%s: %s", op->def->name, tg_ok(ctx) ? "accepted stale inputs" : tg_error_message(ctx));
        tg_clear_error(ctx);
        free(index);
        tg_ctx_reset(ctx);
    }
}
END_TEST

/* An op that forgets to check its arguments: it only makes an output of
 * its input's shape and records itself. */
static void forgetful_backward(tg_ctx *c, tg_node *n) {
    (void)c;
    (void)n;
}

static const tg_op_def FORGETFUL = {.name = "forgetful", .backward = forgetful_backward};

static tg_tensor *forgetful(tg_ctx *c, tg_tensor *x) {
    tg_tensor *y = tg_new_tensor(c, "forgetful", x->dtype, x->ndim, x->shape);
    if (!y) return NULL;
    tg_record(c, &FORGETFUL, y, 1, &x);
    return tg_ok(c) ? y : NULL;
}

/* tg_record refuses a stale input, so no stale tensor reaches the tape even
 * through such an op (the header is unpoisoned for ASan builds, as above). */
START_TEST(test_record_refuses_stale_inputs) {
    tg_tensor *x = tg_requires_grad(ctx, tg_ones(ctx, TG_F64, TG_SHAPE(3)));
    tg_ctx_reset(ctx);
    tg_zeros(ctx, TG_F64, TG_SHAPE(64));
    if (!checked_build()) return;
    TG_UNPOISON(x, sizeof *x);
    tg_test_assert_fails(ctx, forgetful(ctx, x), TG_ERR_STATE,
                         "forgetful: input 0, a (3,) float64 tensor, is from step 0, before tg_ctx_reset", NULL);
    ck_assert_int_eq(tg_tape_size(ctx), 0);
}
END_TEST

/* tg_record refuses another context's input too: an op that forgot its
 * checks cannot put it on this context's tape. */
START_TEST(test_record_refuses_foreign_inputs) {
    tg_ctx *other = tg_ctx_new(18);
    tg_tensor *x = tg_requires_grad(other, tg_ones(other, TG_F64, TG_SHAPE(3)));
    tg_test_assert_fails(ctx, forgetful(ctx, x), TG_ERR_STATE, "forgetful: input 0, a (3,) float64 tensor",
                         "was made by another context", NULL);
    ck_assert_int_eq(tg_tape_size(ctx), 0);
    ck_assert(tg_ok(other));
    tg_ctx_free(other);
}
END_TEST

/* ---- in-place writes to saved inputs -------------------------------------------- */

/* The scenario, with each in-place writer: q = sum(x * x), x
 * changed, backward: an error naming the op and the input, and x's grad
 * untouched (it would have been 200 from the new x). */
START_TEST(test_saved_input_changed_is_an_error) {
    const int writer = _i;
    tg_tensor *x = tg_requires_grad(ctx, tg_from_buffer(ctx, TG_F64, TG_SHAPE(3), (double[]){1, 2, 3}));
    tg_tensor *q = tg_sum(ctx, tg_mul(ctx, x, x));
    ck_assert_ptr_nonnull(q);
    switch (writer) {
    case 0: tg_fill(ctx, x, 100); break;
    case 1: tg_assign(ctx, x, tg_full(ctx, TG_F64, TG_SHAPE(3), 100)); break;
    case 2: tg_set(ctx, x, (int64_t[]){1}, 100); break;
    default: tg_set_flat(ctx, x, 2, 100); break;
    }
    ck_assert(tg_ok(ctx));
    tg_backward(ctx, q);
    tg_test_assert_error(ctx, TG_ERR_STATE,
                         "tg_backward: input 0 (3,) of 'mul' was modified in place (version 1, recorded at 0) after "
                         "the op used it",
                         NULL);
    for (int i = 0; i < 3; i++) ck_assert_double_eq(tg_get_flat(ctx, x->grad, i), 0.0);
    /* the right way: change x, then run the forward */
    tg_backward(ctx, tg_sum(ctx, tg_mul(ctx, x, x)));
    ck_assert(tg_ok(ctx));
    double x1 = tg_get_flat(ctx, x, 1);
    ck_assert_double_eq(tg_get_flat(ctx, x->grad, 1), 2 * x1);
}
END_TEST

/* A write before the forward, a zero-grad between forward and backward (a
 * grad is no op's input) and a write after the backward are all fine. */
START_TEST(test_writes_outside_the_window_are_fine) {
    tg_tensor *w = tg_requires_grad(ctx, tg_persist(ctx, tg_zeros(ctx, TG_F64, TG_SHAPE(3))));
    tg_fill(ctx, w, 3.0);
    tg_tensor *q = tg_sum(ctx, tg_mul(ctx, w, w));
    tg_zero_grad(ctx, w);
    tg_backward(ctx, q);
    ck_assert(tg_ok(ctx));
    ck_assert_double_eq(tg_get_flat(ctx, w->grad, 0), 6.0);
    tg_fill(ctx, w, 1.0);
    ck_assert(tg_ok(ctx));
}
END_TEST

/* The output, which some backwards read (exp's: dx = dy * y), counts too. */
START_TEST(test_saved_output_changed_is_an_error) {
    tg_tensor *x = tg_requires_grad(ctx, tg_zeros(ctx, TG_F64, TG_SHAPE(3)));
    tg_tensor *y = tg_exp(ctx, x);
    tg_fill(ctx, y, 5.0);
    tg_backward_ex(ctx, y, tg_ones(ctx, TG_F64, TG_SHAPE(3)), false);
    tg_test_assert_error(ctx, TG_ERR_STATE, "tg_backward: the output (3,) of 'exp' was modified in place", NULL);
}
END_TEST

/* A view and a detached tensor share their tensor's data, so its version:
 * writing through them counts. */
START_TEST(test_write_through_a_view_is_seen) {
    tg_tensor *x = tg_requires_grad(ctx, tg_ones(ctx, TG_F64, TG_SHAPE(2, 3)));
    tg_tensor *q = tg_sum(ctx, tg_mul(ctx, x, x));
    tg_set_flat(ctx, tg_view(ctx, x, TG_SHAPE(6)), 0, 5.0);
    tg_backward_ex(ctx, q, NULL, true);
    tg_test_assert_error(ctx, TG_ERR_STATE, "input 0 (2, 3) of 'mul' was modified in place (version 1, recorded at 0)",
                         NULL);
    tg_tensor *q2 = tg_sum(ctx, tg_mul(ctx, x, x));
    tg_fill(ctx, tg_detach(ctx, x), 2.0);
    tg_backward(ctx, q2);
    tg_test_assert_error(ctx, TG_ERR_STATE, "(version 2, recorded at 1)", NULL);
}
END_TEST

/* An optimizer step writes its parameters in place: a tape kept across it
 * (keep_tape) cannot be walked again. */
START_TEST(test_optimizer_step_on_a_pending_tape) {
    tg_tensor *w = tg_persist(ctx, tg_ones(ctx, TG_F32, TG_SHAPE(3)));
    tg_params params = {0};
    ck_assert(tg_params_add(ctx, &params, "fc", "w", w, false));
    tg_sgd_opts o = tg_sgd_defaults(0.1);
    tg_optim *sgd = tg_sgd_new(ctx, &params, &o);
    tg_tensor *loss = tg_sum(ctx, tg_mul(ctx, w, w));
    tg_backward_ex(ctx, loss, NULL, true);
    tg_optim_step(ctx, sgd);
    ck_assert(tg_ok(ctx));
    tg_backward(ctx, loss);
    tg_test_assert_error(ctx, TG_ERR_STATE, "input 0 (3,) of 'mul' was modified in place", NULL);
    tg_optim_free(ctx, sgd);
    tg_params_free(&params);
}
END_TEST

/* A checkpoint load writes into the parameters in place, too. */
START_TEST(test_checkpoint_load_on_a_pending_tape) {
    char dir[512], path[600];
    tg_test_make_tmpdir(dir, sizeof dir, "tg-lifetime");
    snprintf(path, sizeof path, "%s/w.safetensors", dir);
    tg_tensor *w = tg_requires_grad(ctx, tg_persist(ctx, tg_ones(ctx, TG_F64, TG_SHAPE(2))));
    tg_params params = {0};
    ck_assert(tg_params_add(ctx, &params, NULL, "w", w, false));
    ck_assert_int_eq(tg_ckpt_save(ctx, path, &params, NULL, NULL), TG_OK);
    tg_tensor *loss = tg_sum(ctx, tg_mul(ctx, w, w));
    ck_assert_int_eq(tg_ckpt_load(ctx, path, &params, NULL, NULL), TG_OK);
    tg_backward(ctx, loss);
    tg_test_assert_error(ctx, TG_ERR_STATE, "input 0 (2,) of 'mul' was modified in place", NULL);
    tg_params_free(&params);
    tg_test_remove_tree(dir);
}
END_TEST

/* ---- ownership -------------------------------------------------------------------- */

/* The scenario: t persistent in B, freed through A. An error in A;
 * t stays B's, and B frees it (no use after free). */
START_TEST(test_free_through_the_wrong_context) {
    tg_ctx *b = tg_ctx_new(2);
    tg_tensor *t = tg_persist(b, tg_full(b, TG_F32, TG_SHAPE(4), 3.0));
    tg_tensor_free(ctx, t);
    tg_test_assert_error(ctx, TG_ERR_STATE, "tg_tensor_free:", "is not a persistent tensor of this context",
                         "another context", NULL);
    ck_assert_double_eq(tg_get_flat(b, t, 3), 3.0);
    tg_embedding_layer *e = tg_embedding_layer_new(b, "emb", 3, 2, TG_F32);
    tg_embedding_layer_free(ctx, e);
    tg_test_assert_error(ctx, TG_ERR_STATE, "tg_module_free:", "is not a layer of this context", NULL);
    tg_embedding_layer_free(b, e);
    ck_assert(tg_ok(b));
    tg_ctx_free(b);
}
END_TEST

/* The scenario: a layer's own parameter freed, then the layer. The
 * first is an error naming the parameter; the layer then frees it once. */
START_TEST(test_free_a_layers_parameter) {
    tg_embedding_layer *fc1 = tg_embedding_layer_new(ctx, "fc1", 4, 2, TG_F32);
    ck_assert_ptr_nonnull(fc1);
    tg_tensor_free(ctx, fc1->weight);
    tg_test_assert_error(
        ctx, TG_ERR_STATE,
        "tg_tensor_free: tensor (4, 2) float32 is the parameter 'fc1.weight' of a layer; free the layer", NULL);
    tg_tensor_free(ctx, fc1->weight->grad);
    tg_test_assert_error(ctx, TG_ERR_STATE, "is the grad of a persistent tensor; it is freed with that tensor", NULL);
    tg_embedding_layer_free(ctx, fc1);
    ck_assert(tg_ok(ctx));
}
END_TEST

/* Double frees of a persistent tensor, a layer and an optimizer: errors
 * (the freed objects are never read), and an optimizer's state is its own. */
START_TEST(test_double_frees) {
    tg_tensor *t = tg_persist(ctx, tg_ones(ctx, TG_F64, TG_SHAPE(2)));
    tg_tensor_free(ctx, t);
    ck_assert(tg_ok(ctx));
    tg_tensor_free(ctx, t);
    tg_test_assert_error(ctx, TG_ERR_STATE, "tg_tensor_free: the persistent tensor at", "was already freed", NULL);

    tg_embedding_layer *e = tg_embedding_layer_new(ctx, "emb", 3, 2, TG_F32);
    tg_embedding_layer_free(ctx, e);
    ck_assert(tg_ok(ctx));
    tg_embedding_layer_free(ctx, e);
    tg_test_assert_error(ctx, TG_ERR_STATE, "tg_module_free: the layer at", "was already freed", NULL);

    tg_tensor *w = tg_persist(ctx, tg_ones(ctx, TG_F32, TG_SHAPE(3)));
    tg_params params = {0};
    ck_assert(tg_params_add(ctx, &params, "fc", "w", w, false));
    tg_sgd_opts o = tg_sgd_defaults(0.1);
    o.momentum = 0.9;
    tg_optim *sgd = tg_sgd_new(ctx, &params, &o);
    ck_assert_ptr_nonnull(sgd);
    tg_tensor_free(ctx, tg_optim_state(sgd)->items[1].value);
    tg_test_assert_error(ctx, TG_ERR_STATE,
                         "tg_tensor_free: tensor (3,) float32 is the state 'optim.fc.w.momentum_buffer' of an "
                         "optimizer; free the optimizer",
                         NULL);
    tg_optim_free(ctx, sgd);
    ck_assert(tg_ok(ctx));
    tg_optim_free(ctx, sgd);
    tg_test_assert_error(ctx, TG_ERR_STATE, "tg_optim_free: the optimizer at", "was already freed", NULL);

    /* an arena tensor is the reset's to free: no error */
    tg_tensor_free(ctx, tg_ones(ctx, TG_F32, TG_SHAPE(2)));
    ck_assert(tg_ok(ctx));
    tg_params_free(&params);
}
END_TEST

/* Many persistent tensors made and freed in an interleaved order: the
 * registry grows and shrinks, a second free of any of them is an error
 * (long after: "freed already"), and tg_ctx_free frees the others (the
 * sanitizer and valgrind builds check nothing leaks). */
START_TEST(test_many_frees) {
    enum { N = 1000 };
    tg_tensor **t = tg_test_malloc(N * sizeof *t);
    for (int i = 0; i < N; i++) t[i] = tg_persist(ctx, tg_full(ctx, TG_F32, TG_SHAPE(2), i));
    for (int i = 0; i < N; i += 2) tg_tensor_free(ctx, t[i]);
    ck_assert(tg_ok(ctx));
    for (int i = 0; i < N; i += 2) {
        tg_tensor_free(ctx, t[i]);
        ck_assert_msg(tg_status_of(ctx) == TG_ERR_STATE && (strstr(tg_error_message(ctx), "already freed") ||
                                                            strstr(tg_error_message(ctx), "freed already")),
                      "tensor %d: %s", i, tg_error_message(ctx));
        tg_clear_error(ctx);
    }
    for (int i = 1; i < N; i += 2) ck_assert_double_eq(tg_get_flat(ctx, t[i], 1), i);
    free(t);
}
END_TEST

Suite *make_lifetime_suite(void) {
    Suite *s = suite_create("lifetime");
    tg_test_tcase(s, "stale", setup, teardown, test_use_after_reset_is_an_error, test_backward_after_reset_is_an_error,
                  test_stale_seen_in_every_build, test_stale_refused_everywhere, test_persistent_never_stale,
                  test_every_op_refuses_stale_inputs, test_record_refuses_stale_inputs,
                  test_record_refuses_foreign_inputs, NULL);
    TCase *tc = tg_test_tcase(s, "version", setup, teardown, test_writes_outside_the_window_are_fine,
                              test_saved_output_changed_is_an_error, test_write_through_a_view_is_seen,
                              test_optimizer_step_on_a_pending_tape, test_checkpoint_load_on_a_pending_tape, NULL);
    tcase_add_loop_test(tc, test_saved_input_changed_is_an_error, 0, 4);
    tg_test_tcase(s, "ownership", setup, teardown, test_free_through_the_wrong_context, test_free_a_layers_parameter,
                  test_double_frees, test_many_frees, NULL);
    return s;
}

int main(void) { return tg_test_run(make_lifetime_suite()); }

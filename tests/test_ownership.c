/* Who owns what: objects of one context used through another, and modules
 * freed while a model or a container still holds them.
 *
 *  - contexts: a tensor (arena or persistent), a layer, an optimizer or a
 *    gradient scaler of context B given to context A is an error naming
 *    the call (every op, tg_backward, layer forwards, parameter lists,
 *    tg_model_add, optimizer calls; tg_record in tests/test_lifetime.c),
 *    and B's object is left as it was, for B to use and free;
 *  - holders: a layer in a model, a Sequential or a GPT cannot be freed on
 *    its own (the holder would read it, then free it again); the holder
 *    frees it once, and a layer has one holder. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static tg_ctx *ctx, *other;
static void setup(void) {
    ctx = tg_ctx_new(17);
    other = tg_ctx_new(18);
}
static void teardown(void) {
    tg_ctx_free(ctx);
    tg_ctx_free(other);
}

/* ---- objects of another context ------------------------------------------------ */

/* Every op of the registry, its inputs made by the other context: refused,
 * naming the call and the other context. */
START_TEST(test_every_op_refuses_foreign_inputs) {
    for (int i = 0; i < tg_registry_count(); i++) {
        const tg_op_info *op = tg_registry_get(i);
        tg_op_case c;
        ck_assert_msg(tg_registry_build(other, op, NULL, TG_F64, &c), "%s: %s", op->def->name, tg_error_message(other));
        tg_tensor *y = tg_registry_forward(ctx, &c);
        ck_assert_msg(y == NULL && tg_status_of(ctx) == TG_ERR_STATE &&
                          strstr(tg_error_message(ctx), "was made by another context"),
                      "%s: %s", op->def->name,
                      tg_ok(ctx) ? "accepted another context's inputs" : tg_error_message(ctx));
        tg_clear_error(ctx);
        ck_assert_int_eq(tg_tape_size(ctx), 0);
        tg_ctx_reset(other);
    }
}
END_TEST

/* The message, for an arena tensor and a persistent one; the other
 * context's tensors are unharmed. */
START_TEST(test_foreign_tensor_message) {
    tg_tensor *a = tg_ones(ctx, TG_F32, TG_SHAPE(2, 2));
    tg_tensor *b = tg_ones(other, TG_F32, TG_SHAPE(2, 2));
    tg_tensor *p = tg_persist(other, tg_full(other, TG_F64, TG_SHAPE(3), 2.0));
    char mine[32];
    snprintf(mine, sizeof mine, "not this one (%p)", (void *)ctx);
    tg_test_assert_fails(ctx, tg_add(ctx, a, b), TG_ERR_STATE,
                         "tg_add: argument 'b', a (2, 2) float32 tensor, was made by another context", mine, NULL);
    tg_test_assert_fails(ctx, tg_exp(ctx, p), TG_ERR_STATE, "argument", "a (3,) float64 tensor", "another context",
                         NULL);
    ck_assert_double_eq(tg_get_flat(other, tg_add(other, b, b), 3), 2.0);
    ck_assert_double_eq(tg_get_flat(other, p, 2), 2.0);
    ck_assert(tg_ok(other));
}
END_TEST

/* A backward given the other context's loss names the problem (it used to
 * say that the tape was already consumed), and the other context's
 * backward still works. */
START_TEST(test_backward_of_a_foreign_loss) {
    tg_tensor *x = tg_requires_grad(other, tg_ones(other, TG_F64, TG_SHAPE(3)));
    tg_tensor *loss = tg_sum(other, tg_mul(other, x, x));
    tg_backward(ctx, loss);
    tg_test_assert_error(ctx, TG_ERR_STATE, "tg_backward: argument 'out'", "was made by another context", NULL);
    tg_backward(other, loss);
    ck_assert(tg_ok(other));
    ck_assert_double_eq(tg_get_flat(other, x->grad, 0), 2.0);
}
END_TEST

/* Layer forwards, parameter lists and tg_model_add refuse a layer of the
 * other context without reading it; the layer stays the other's. */
START_TEST(test_foreign_layers) {
    tg_linear *l = tg_linear_new(other, "fc", 3, 2, true, TG_F32);
    tg_sequential *seq = tg_sequential_new(other, "seq");
    ck_assert_ptr_nonnull(l);
    ck_assert_ptr_nonnull(seq);
    tg_tensor *x = tg_ones(ctx, TG_F32, TG_SHAPE(1, 3));
    tg_test_assert_fails(ctx, tg_linear_forward(ctx, l, x), TG_ERR_STATE, "tg_linear_forward: the layer at",
                         "is not a layer of this context", "another context", NULL);
    tg_test_assert_fails(ctx, tg_module_forward(ctx, TG_MODULE(l), x), TG_ERR_STATE,
                         "tg_module_forward:", "is not a layer of this context", NULL);
    tg_test_assert_fails(ctx, tg_sequential_forward(ctx, seq, x), TG_ERR_STATE,
                         "tg_sequential_forward:", "is not a layer of this context", NULL);
    tg_params list = {0};
    ck_assert(!tg_linear_params(ctx, l, &list));
    tg_test_assert_error(ctx, TG_ERR_STATE, "tg_module_params: the layer at", "is not a layer of this context", NULL);
    ck_assert_int_eq(list.count, 0);
    tg_model model = {0};
    ck_assert(!tg_model_add(ctx, &model, TG_MODULE(l)));
    tg_test_assert_error(ctx, TG_ERR_STATE, "tg_model_add: the module at", "is not a layer of this context", NULL);
    ck_assert_int_eq(model.count, 0);
    ck_assert(!tg_model_params(ctx, &model, &list) || list.count == 0);
    tg_linear *mine = tg_linear_new(ctx, "mine", 3, 2, true, TG_F32);
    ck_assert(!tg_sequential_add(ctx, seq, TG_MODULE(mine)));
    tg_test_assert_error(ctx, TG_ERR_STATE, "tg_sequential_add: seq at", "is not a layer of this context", NULL);
    /* the other context's layers are whole, used and freed there */
    tg_tensor *y = tg_linear_forward(other, l, tg_ones(other, TG_F32, TG_SHAPE(1, 3)));
    ck_assert_ptr_nonnull(y);
    ck_assert(tg_linear_params(other, l, &list));
    ck_assert_int_eq(list.count, 2);
    ck_assert(tg_sequential_add(other, seq, TG_MODULE(l)));
    tg_sequential_free(other, seq);
    ck_assert(tg_ok(other));
    ck_assert(tg_ok(ctx));
    tg_params_free(&list);
    tg_model_free(ctx, &model);
}
END_TEST

/* Optimizers: one made over the other context's parameters is refused,
 * and the other context's optimizer is refused by every call taking a
 * context ("an optimizer", with its article). */
START_TEST(test_foreign_optimizers) {
    tg_tensor *w = tg_persist(other, tg_ones(other, TG_F32, TG_SHAPE(3)));
    tg_params params = {0};
    ck_assert(tg_params_add(other, &params, NULL, "w", w, false));
    tg_adam_opts ao = tg_adam_defaults();
    tg_test_assert_fails(ctx, tg_adam_new(ctx, &params, &ao), TG_ERR_STATE,
                         "tg_adam_new: argument 'params.items[0] ('w')'", "another context", NULL);
    tg_optim *opt = tg_adam_new(other, &params, &ao);
    ck_assert_ptr_nonnull(opt);
    tg_optim_step(ctx, opt);
    tg_test_assert_error(ctx, TG_ERR_STATE, "tg_optim_step: the optimizer at", "is not an optimizer of this context",
                         NULL);
    tg_optim_zero_grad(ctx, opt);
    tg_test_assert_error(ctx, TG_ERR_STATE, "tg_optim_zero_grad:", "is not an optimizer of this context", NULL);
    tg_optim_set_lr(ctx, opt, 0.5);
    tg_test_assert_error(ctx, TG_ERR_STATE, "tg_optim_set_lr:", "is not an optimizer of this context", NULL);
    ck_assert_double_eq(tg_optim_lr(opt), ao.lr);
    tg_grad_scaler *sc = tg_grad_scaler_new(other, NULL);
    tg_grad_scaler_step(ctx, sc, opt);
    tg_test_assert_error(ctx, TG_ERR_STATE, "tg_grad_scaler_step: the scaler at", "is not a gradient scaler of this",
                         NULL);
    tg_optim_free(ctx, opt);
    tg_test_assert_error(ctx, TG_ERR_STATE, "tg_optim_free:", "is not an optimizer of this context", NULL);
    tg_optim_step(other, opt);
    ck_assert_int_eq(tg_optim_steps(opt), 1);
    tg_grad_scaler_free(other, sc);
    tg_optim_free(other, opt);
    ck_assert(tg_ok(other));
    tg_params_free(&params);
}
END_TEST

/* ---- modules a holder frees ------------------------------------------------------ */

/* The scenario: a Linear in a model, freed on its own, then the
 * model printed. The free is refused; the summary reads a live layer; the
 * model frees it once. */
START_TEST(test_free_a_layer_a_model_holds) {
    tg_model m = {0};
    tg_linear *l = tg_linear_new(ctx, "fc1", 4, 2, true, TG_F32);
    ck_assert(tg_model_add(ctx, &m, TG_MODULE(l)));
    tg_linear_free(ctx, l);
    tg_test_assert_error(ctx, TG_ERR_STATE, "tg_module_free: Linear 'fc1' is held by a model", "tg_model_free", NULL);
    char text[256];
    tg_model_format(text, sizeof text, &m);
    tg_test_assert_contains(text, "(fc1): Linear(in_features=4, out_features=2, bias=true)  params=10", NULL);
    tg_model_free(ctx, &m);
    ck_assert(tg_ok(ctx));
}
END_TEST

/* The second scenario: a GPT's lm_head freed, then the forward.
 * The free is refused and the forward runs. A Sequential's module too. */
START_TEST(test_free_a_module_a_container_holds) {
    tg_gpt_config c = tg_gpt_defaults(TG_GPT_LLAMA);
    c.vocab_size = 16, c.context = 4, c.n_layer = 1, c.n_head = 2, c.n_embd = 8;
    tg_gpt *g = tg_gpt_new(ctx, "gpt", &c);
    ck_assert_ptr_nonnull(g);
    tg_module_free(ctx, TG_MODULE(g->lm_head));
    tg_test_assert_error(ctx, TG_ERR_STATE, "tg_module_free: Linear 'lm_head' is held by", NULL);
    int64_t idx[4] = {1, 2, 3, 4};
    tg_tensor *logits = tg_gpt_forward(ctx, g, 1, 4, idx);
    ck_assert_msg(logits != NULL, "%s", tg_error_message(ctx));
    ck_assert_int_eq(logits->shape[2], 16);
    tg_module_free(ctx, TG_MODULE(g->h));
    tg_test_assert_error(ctx, TG_ERR_STATE, "Sequential 'h' is held by", NULL);
    tg_module_free(ctx, TG_MODULE(g));
    ck_assert(tg_ok(ctx));

    tg_sequential *seq = tg_sequential_new(ctx, "seq");
    tg_activation *relu = tg_activation_new(ctx, "act", TG_ACT_RELU);
    ck_assert(tg_sequential_add(ctx, seq, TG_MODULE(relu)));
    tg_activation_free(ctx, relu);
    tg_test_assert_error(ctx, TG_ERR_STATE, "tg_module_free: ReLU 'act' is held by", NULL);
    tg_sequential_free(ctx, seq);
    ck_assert(tg_ok(ctx));
}
END_TEST

/* A layer has one holder: a second model is refused (both would free it),
 * and the first frees it once. */
START_TEST(test_a_module_has_one_holder) {
    tg_model a = {0}, b = {0};
    tg_linear *l = tg_linear_new(ctx, "fc", 2, 2, false, TG_F64);
    ck_assert(tg_model_add(ctx, &a, TG_MODULE(l)));
    ck_assert(!tg_model_add(ctx, &b, TG_MODULE(l)));
    tg_test_assert_error(ctx, TG_ERR_VALUE, "tg_model_add: Linear 'fc' is already held by another model", NULL);
    ck_assert_int_eq(b.count, 0);
    tg_sequential *seq = tg_sequential_new(ctx, "seq");
    ck_assert(!tg_sequential_add(ctx, seq, TG_MODULE(l)));
    tg_test_assert_error(ctx, TG_ERR_VALUE, "tg_sequential_add: Linear 'fc' is already held", NULL);
    ck_assert(!tg_model_add(ctx, &a, TG_MODULE(l)));
    tg_test_assert_error(ctx, TG_ERR_VALUE, "already in the model", NULL);
    tg_model_free(ctx, &a);
    tg_model_free(ctx, &b);
    tg_sequential_free(ctx, seq);
    ck_assert(tg_ok(ctx));
    /* freed with its model: a second free is the usual error */
    tg_linear_free(ctx, l);
    tg_test_assert_error(ctx, TG_ERR_STATE, "the layer at", "was already freed", NULL);
}
END_TEST

Suite *make_ownership_suite(void) {
    Suite *s = suite_create("ownership");
    tg_test_tcase(s, "contexts", setup, teardown, test_every_op_refuses_foreign_inputs, test_foreign_tensor_message,
                  test_backward_of_a_foreign_loss, test_foreign_layers, test_foreign_optimizers, NULL);
    tg_test_tcase(s, "holders", setup, teardown, test_free_a_layer_a_model_holds, test_free_a_module_a_container_holds,
                  test_a_module_has_one_holder, NULL);
    return s;
}

int main(void) { return tg_test_run(make_ownership_suite()); }

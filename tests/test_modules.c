/* Modules and models: the summary (each layer with its options and
 * parameter count, and the total), the model's parameter list with dotted
 * names and weight-decay flags, ownership (tg_model_add takes the module in
 * every case, so nothing leaks under ASan/valgrind), the Embedding module,
 * the generic forward (tg_module_forward) of every kind and the activation
 * modules, NULL options meaning the defaults in every call that takes
 * options, allocation failures while making any module (nothing leaks),
 * and a small training loop through Linear -> RMSNorm ->
 * LayerNorm -> Linear whose loss falls and whose arena stops growing after
 * warm-up. (Sequential has its own suite, tests/test_sequential.c.) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static tg_ctx *ctx;
static void setup(void) { ctx = tg_ctx_new(99); }
static void teardown(void) { tg_ctx_free(ctx); }

/* fc1, norm1, ln, an unnamed Embedding */
static void build_model(tg_model *m) {
    ck_assert(tg_model_add(ctx, m, TG_MODULE(tg_linear_new(ctx, "fc1", 784, 256, true, TG_F32))));
    ck_assert(tg_model_add(
        ctx, m, TG_MODULE(tg_rmsnorm_new(ctx, "norm1", 1, (int64_t[]){256}, TG_RMSNORM_EPS, true, false, TG_F32))));
    ck_assert(tg_model_add(
        ctx, m, TG_MODULE(tg_layernorm_new(ctx, "ln", 2, (int64_t[]){4, 64}, TG_LAYERNORM_EPS, true, true, TG_F32))));
    ck_assert(tg_model_add(ctx, m, TG_MODULE(tg_embedding_layer_new(ctx, NULL, 65, 64, TG_F32))));
}

static const char SUMMARY[] = "(fc1): Linear(in_features=784, out_features=256, bias=true)  params=200960\n"
                              "(norm1): RMSNorm(dim=256, eps=1e-06, affine=true, bias=false)  params=256\n"
                              "(ln): LayerNorm(dim=(4, 64), eps=1e-05, affine=true, bias=true)  params=512\n"
                              "(3): Embedding(num_embeddings=65, embedding_dim=64)  params=4160\n"
                              "total params=205888\n";

START_TEST(test_summary) {
    tg_model m = {0};
    build_model(&m);
    ck_assert_int_eq(m.count, 4);
    char buf[1024];
    size_t n = tg_model_format(buf, sizeof buf, &m);
    ck_assert_str_eq(buf, SUMMARY);
    ck_assert_uint_eq(n, strlen(SUMMARY));
    ck_assert_int_eq(tg_model_numel(&m), 205888);
    /* snprintf semantics: a short buffer gets a terminated prefix */
    char small[20];
    ck_assert_uint_eq(tg_model_format(small, sizeof small, &m), n);
    ck_assert_int_eq(strncmp(small, SUMMARY, sizeof small - 1), 0);
    ck_assert_uint_eq(strlen(small), sizeof small - 1);
    ck_assert_uint_eq(tg_model_format(NULL, 0, &m), n);
    /* printing writes the same text */
    FILE *f = tmpfile();
    ck_assert_ptr_nonnull(f);
    tg_model_print(f, &m);
    rewind(f);
    char got[1024] = {0};
    ck_assert_uint_eq(fread(got, 1, sizeof got - 1, f), n);
    fclose(f);
    ck_assert_str_eq(got, SUMMARY);
    /* an empty model */
    tg_model e = {0};
    tg_model_format(buf, sizeof buf, &e);
    ck_assert_str_eq(buf, "total params=0\n");
    tg_model_free(ctx, &m);
    ck_assert_int_eq(m.count, 0);
    ck_assert_ptr_null(m.items);
}
END_TEST

/* A summary longer than tg_model_print's buffer prints the same text. */
START_TEST(test_long_summary) {
    tg_model m = {0};
    for (int i = 0; i < 40; i++) {
        char name[16];
        snprintf(name, sizeof name, "layer%02d", i);
        ck_assert(tg_model_add(ctx, &m, TG_MODULE(tg_linear_new(ctx, name, 3, 2, i % 2, TG_F64))));
    }
    size_t n = tg_model_format(NULL, 0, &m);
    ck_assert(n > 2000);
    char *want = malloc(n + 1);
    tg_model_format(want, n + 1, &m);
    ck_assert_ptr_nonnull(strstr(want, "(layer39): Linear(in_features=3, out_features=2, bias=true)  params=8\n"));
    ck_assert_ptr_nonnull(strstr(want, "total params=280\n"));
    FILE *f = tmpfile();
    tg_model_print(f, &m);
    rewind(f);
    char *got = calloc(n + 2, 1);
    ck_assert_uint_eq(fread(got, 1, n + 1, f), n);
    fclose(f);
    ck_assert_str_eq(got, want);
    free(want), free(got);
    tg_model_free(ctx, &m);
}
END_TEST

/* The model's parameter list: modules in order, dotted names, weight decay
 * on for Linear and Embedding weights only. */
START_TEST(test_params_list) {
    tg_model m = {0};
    build_model(&m);
    tg_params p = {0};
    ck_assert(tg_model_params(ctx, &m, &p));
    const char *names[] = {"fc1.weight", "fc1.bias", "norm1.gamma", "ln.gamma", "ln.beta", "weight"};
    const bool wd[] = {true, false, false, false, false, true};
    ck_assert_int_eq(p.count, 6);
    for (int i = 0; i < 6; i++) {
        ck_assert_str_eq(p.items[i].name, names[i]);
        ck_assert_int_eq(p.items[i].weight_decay, wd[i]);
        ck_assert(p.items[i].value->persistent && p.items[i].value->requires_grad);
    }
    ck_assert_int_eq(tg_params_numel(&p), tg_model_numel(&m));
    tg_params_free(&p);
    /* the generic view works for any module */
    tg_params q = {0};
    ck_assert(tg_module_params(ctx, m.items[2], &q));
    ck_assert_int_eq(q.count, 2);
    ck_assert_str_eq(m.items[2]->kind, "LayerNorm");
    ck_assert_int_eq(m.items[2]->dtype, TG_F32);
    tg_params_free(&q);
    ck_assert(!tg_model_params(ctx, NULL, &q));
    tg_test_assert_error(ctx, TG_ERR_NULL, "tg_model_params", "'model'", NULL);
    ck_assert(!tg_module_params(ctx, m.items[0], NULL));
    tg_test_assert_error(ctx, TG_ERR_NULL, "tg_module_params", "'list'", NULL);
    ck_assert(!tg_rmsnorm_params(ctx, NULL, &q));
    tg_test_assert_error(ctx, TG_ERR_NULL, "argument 'm' is NULL", NULL);
    tg_model_free(ctx, &m);
}
END_TEST

/* tg_model_add takes the module in every case: a refused module is freed
 * (ASan and valgrind would report a leak otherwise); a module already in
 * the model stays owned by it. */
START_TEST(test_add_ownership) {
    tg_model m = {0};
    tg_linear *a = tg_linear_new(ctx, "fc", 2, 2, true, TG_F32);
    ck_assert(tg_model_add(ctx, &m, TG_MODULE(a)));
    ck_assert(!tg_model_add(ctx, &m, TG_MODULE(a)));
    tg_test_assert_error(ctx, TG_ERR_VALUE, "tg_model_add", "already in the model", NULL);
    ck_assert(!tg_model_add(ctx, &m, TG_MODULE(tg_linear_new(ctx, "fc", 3, 3, true, TG_F32))));
    tg_test_assert_error(ctx, TG_ERR_VALUE, "tg_model_add", "duplicate module name 'fc'", NULL);
    ck_assert(!tg_model_add(ctx, &m, NULL));
    tg_test_assert_error(ctx, TG_ERR_NULL, "tg_model_add", "'m'", NULL);
    ck_assert(!tg_model_add(ctx, NULL, TG_MODULE(tg_linear_new(ctx, "x", 3, 3, true, TG_F32))));
    tg_test_assert_error(ctx, TG_ERR_NULL, "tg_model_add", "'model'", NULL);
    /* a failed constructor gives NULL: no second error, nothing to free */
    ck_assert(!tg_model_add(ctx, &m, TG_MODULE(tg_linear_new(ctx, "bad", 0, 3, true, TG_F32))));
    tg_test_assert_error(ctx, TG_ERR_VALUE, "tg_linear_new", "in_features = 0", NULL);
    /* a context in error: the module is freed, the first error stays */
    tg_rmsnorm *r = tg_rmsnorm_new(ctx, "r", 1, (int64_t[]){4}, 1e-6, true, true, TG_F64);
    tg_error(ctx, TG_ERR_STATE, "test", "first");
    ck_assert(!tg_model_add(ctx, &m, TG_MODULE(r)));
    ck_assert_str_eq(tg_error_message(ctx), "test: first");
    tg_clear_error(ctx);
    /* unnamed modules may repeat */
    ck_assert(tg_model_add(ctx, &m, TG_MODULE(tg_linear_new(ctx, "", 2, 2, true, TG_F32))));
    ck_assert(tg_model_add(ctx, &m, TG_MODULE(tg_linear_new(ctx, NULL, 2, 2, true, TG_F32))));
    ck_assert_int_eq(m.count, 3);
    tg_model_free(ctx, &m);
    tg_model_free(ctx, &m); /* empty: a no-op */
    tg_module_free(ctx, NULL);
}
END_TEST

/* Embedding: the forward is a lookup of rows; init N(0, 1). */
START_TEST(test_embedding_layer) {
    tg_embedding_layer *e = tg_embedding_layer_new(ctx, "tok", 64, 64, TG_F64);
    ck_assert_ptr_nonnull(e);
    ck_assert_int_eq(e->weight->shape[0], 64);
    ck_assert_int_eq(e->weight->shape[1], 64);
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < 4096; i++) {
        double v = tg_get_flat(ctx, e->weight, i);
        s += v, s2 += v * v;
    }
    double mean = s / 4096, sd = sqrt(s2 / 4096 - mean * mean);
    ck_assert_msg(fabs(mean) < 0.06 && fabs(sd - 1) < 0.05, "mean %g sd %g", mean, sd); /* 4 sigma */
    const int64_t idx[] = {3, 0, 3, 63, 7, 1};
    tg_tensor *y = tg_embedding_layer_forward(ctx, e, TG_SHAPE(2, 3), idx);
    ck_assert_ptr_nonnull(y);
    ck_assert_int_eq(y->ndim, 3);
    ck_assert_int_eq(y->shape[2], 64);
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 64; j++)
            ck_assert_double_eq(tg_get_flat(ctx, y, i * 64 + j), tg_get_flat(ctx, e->weight, idx[i] * 64 + j));
    tg_backward_ex(ctx, y, tg_ones(ctx, TG_F64, TG_SHAPE(2, 3, 64)), false);
    ck_assert_double_eq(tg_get_flat(ctx, e->weight->grad, 3 * 64), 2.0); /* index 3 twice */
    ck_assert_double_eq(tg_get_flat(ctx, e->weight->grad, 2 * 64), 0.0);
    tg_params p = {0};
    ck_assert(tg_embedding_layer_params(ctx, e, &p));
    ck_assert_str_eq(p.items[0].name, "tok.weight");
    ck_assert(p.items[0].weight_decay);
    tg_params_free(&p);
    char buf[128];
    tg_module_format(buf, sizeof buf, TG_MODULE(e));
    ck_assert_str_eq(buf, "Embedding(num_embeddings=64, embedding_dim=64)  params=4096");
    tg_test_assert_fails(ctx, tg_embedding_layer_forward(ctx, e, TG_SHAPE(1), (int64_t[]){64}), TG_ERR_INDEX,
                         "tg_embedding", NULL);
    tg_test_assert_fails(ctx, tg_embedding_layer_forward(ctx, NULL, TG_SHAPE(1), (int64_t[]){0}), TG_ERR_NULL,
                         "tg_embedding_layer_forward", "'layer'", NULL);
    tg_test_assert_fails(ctx, tg_embedding_layer_new(ctx, "e", 0, 4, TG_F32), TG_ERR_VALUE, "tg_embedding_layer_new",
                         "num_embeddings = 0", NULL);
    tg_test_assert_fails(ctx, tg_embedding_layer_new(ctx, "e", 4, -1, TG_F32), TG_ERR_VALUE, "tg_embedding_layer_new",
                         "embedding_dim = -1", NULL);
    tg_embedding_layer_free(ctx, e);
}
END_TEST

/* tg_module_forward runs any single-input module as its own forward does:
 * the same output bits, the same errors; an Embedding (indices, not a
 * tensor) is refused with a pointer to its own forward. */
START_TEST(test_module_forward) {
    tg_linear *fc = tg_linear_new_ex(ctx, "fc", 6, 8, &(tg_linear_opts){.bias = true, .dtype = TG_F64});
    tg_rmsnorm *rms = tg_rmsnorm_new_ex(ctx, "rms", TG_SHAPE(8), &(tg_rmsnorm_opts){1e-6, true, true, TG_F64});
    tg_layernorm *ln = tg_layernorm_new_ex(ctx, "ln", TG_SHAPE(2, 4), &(tg_layernorm_opts){1e-5, true, true, TG_F64});
    ck_assert(tg_ok(ctx));
    tg_tensor *x = tg_test_rand(ctx, TG_F64, TG_SHAPE(3, 6), -2, 2);
    tg_tensor *h = tg_linear_forward(ctx, fc, x);
    tg_test_assert_same_bits("Linear", tg_module_forward(ctx, TG_MODULE(fc), x), h);
    tg_test_assert_same_bits("RMSNorm", tg_module_forward(ctx, TG_MODULE(rms), h), tg_rmsnorm_forward(ctx, rms, h));
    tg_tensor *h3 = tg_reshape(ctx, h, TG_SHAPE(3, 2, 4));
    tg_test_assert_same_bits("LayerNorm", tg_module_forward(ctx, TG_MODULE(ln), h3), tg_layernorm_forward(ctx, ln, h3));
    /* errors are the module's own */
    tg_test_assert_fails(ctx, tg_module_forward(ctx, TG_MODULE(fc), h), TG_ERR_SHAPE, "tg_linear_forward",
                         "8 != in_features 6", NULL);
    tg_test_assert_fails(ctx, tg_module_forward(ctx, TG_MODULE(rms), tg_zeros(ctx, TG_F32, TG_SHAPE(8))), TG_ERR_DTYPE,
                         "tg_rmsnorm_forward", NULL);
    tg_test_assert_fails(ctx, tg_module_forward(ctx, NULL, x), TG_ERR_NULL, "tg_module_forward", "'m'", NULL);
    tg_test_assert_fails(ctx, tg_module_forward(ctx, TG_MODULE(fc), NULL), TG_ERR_NULL, "tg_module_forward", "'x'",
                         NULL);
    tg_embedding_layer *e = tg_embedding_layer_new(ctx, "tok", 10, 4, TG_F64);
    tg_test_assert_fails(ctx, tg_module_forward(ctx, TG_MODULE(e), x), TG_ERR_VALUE, "tg_module_forward",
                         "Embedding 'tok'", "takes indices", "tg_embedding_layer_forward", NULL);
    /* a context in error: nothing runs, the first error stays */
    tg_error(ctx, TG_ERR_STATE, "test", "first");
    ck_assert_ptr_null(tg_module_forward(ctx, TG_MODULE(fc), x));
    ck_assert_str_eq(tg_error_message(ctx), "test: first");
    tg_clear_error(ctx);
    tg_linear_free(ctx, fc);
    tg_rmsnorm_free(ctx, rms);
    tg_layernorm_free(ctx, ln);
    tg_embedding_layer_free(ctx, e);
}
END_TEST

/* The activation modules: each kind runs its op (the same bits, by its own
 * forward and by tg_module_forward), in either dtype, has no parameters and
 * PyTorch's repr; an unknown kind is refused. */
static tg_tensor *leaky_default(tg_ctx *c, tg_tensor *x) { return tg_leaky_relu(c, x, 0.01); }
static tg_tensor *gelu_exact(tg_ctx *c, tg_tensor *x) { return tg_gelu(c, x, false); }
static tg_tensor *gelu_tanh(tg_ctx *c, tg_tensor *x) { return tg_gelu(c, x, true); }

START_TEST(test_activations) {
    const struct {
        tg_activation_kind act;
        tg_tensor *(*op)(tg_ctx *, tg_tensor *);
        const char *kind, *repr;
    } cases[] = {
        {TG_ACT_RELU, tg_relu, "ReLU", "ReLU()  params=0"},
        {TG_ACT_LEAKY_RELU, leaky_default, "LeakyReLU", "LeakyReLU(negative_slope=0.01)  params=0"},
        {TG_ACT_SIGMOID, tg_sigmoid, "Sigmoid", "Sigmoid()  params=0"},
        {TG_ACT_TANH, tg_tanh, "Tanh", "Tanh()  params=0"},
        {TG_ACT_GELU, gelu_exact, "GELU", "GELU(approximate='none')  params=0"},
        {TG_ACT_GELU_TANH, gelu_tanh, "GELU", "GELU(approximate='tanh')  params=0"},
        {TG_ACT_SILU, tg_silu, "SiLU", "SiLU()  params=0"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tg_activation *a = tg_activation_new(ctx, i % 2 ? "act" : NULL, cases[i].act);
        ck_assert_ptr_nonnull(a);
        ck_assert_str_eq(a->base.kind, cases[i].kind);
        char buf[128];
        tg_module_format(buf, sizeof buf, TG_MODULE(a));
        ck_assert_str_eq(buf, cases[i].repr);
        ck_assert_int_eq(tg_module_numel(TG_MODULE(a)), 0);
        tg_params p = {0};
        ck_assert(tg_module_params(ctx, TG_MODULE(a), &p));
        ck_assert_int_eq(p.count, 0);
        for (int dt = 0; dt < 2; dt++) {
            tg_tensor *x = tg_test_rand(ctx, dt ? TG_F64 : TG_F32, TG_SHAPE(4, 5), -3, 3);
            tg_tensor *want = cases[i].op(ctx, x);
            tg_test_assert_same_bits(cases[i].kind, tg_activation_forward(ctx, a, x), want);
            tg_test_assert_same_bits(cases[i].kind, tg_module_forward(ctx, TG_MODULE(a), x), want);
        }
        tg_activation_free(ctx, a);
    }
    tg_test_assert_fails(ctx, tg_activation_new(ctx, NULL, (tg_activation_kind)99), TG_ERR_VALUE, "tg_activation_new",
                         "act = 99", NULL);
    tg_test_assert_fails(ctx, tg_activation_new(ctx, NULL, (tg_activation_kind)-1), TG_ERR_VALUE, "tg_activation_new",
                         "act = -1", NULL);
    tg_test_assert_fails(ctx, tg_activation_forward(ctx, NULL, tg_zeros(ctx, TG_F32, TG_SHAPE(2))), TG_ERR_NULL,
                         "tg_activation_forward", "'layer'", NULL);
    tg_activation_free(ctx, NULL);
}
END_TEST

/* NULL options mean the defaults, in every call of the public API that
 * takes an options struct: the optimizers (SGD at TG_SGD_LR), the layers'
 * _new_ex, cross-entropy, tg_gradcheck, checkpoints. Each NULL gives
 * bitwise what the explicit defaults give. (tg_plot_close's NULL style is
 * tested in tests/test_plot.c.) */
static tg_linear *seeded_linear(void) {
    tg_rng_seed(ctx, 3);
    return tg_linear_new_ex(ctx, NULL, 3, 2, &(tg_linear_opts){.bias = true, .dtype = TG_F64});
}
/* Two steps of opt on sum(layer(x)) for a fixed x. */
static void two_steps(tg_linear *l, tg_optim *opt) {
    for (int s = 0; s < 2; s++) {
        tg_tensor *x = tg_test_tensor(ctx, TG_F64, TG_SHAPE(2, 3), (double[]){0.5, -1, 2, 0.25, 1.5, -0.75});
        tg_optim_zero_grad(ctx, opt);
        tg_backward(ctx, tg_sum(ctx, tg_linear_forward(ctx, l, x)));
        tg_optim_step(ctx, opt);
    }
    ck_assert_msg(tg_ok(ctx), "%s", tg_error_message(ctx));
}
static tg_tensor *tanh_fn(tg_ctx *c, tg_tensor *const *in, void *user) {
    (void)user;
    return tg_tanh(c, in[0]);
}

START_TEST(test_null_options_are_defaults) {
    const tg_sgd_opts sgd = tg_sgd_defaults(TG_SGD_LR);
    const tg_adam_opts adam = tg_adam_defaults(), adamw = tg_adamw_defaults();
    ck_assert_double_eq(TG_SGD_LR, 1e-3);
    for (int k = 0; k < 3; k++) {
        tg_linear *la = seeded_linear(), *lb = seeded_linear();
        tg_params pa = {0}, pb = {0};
        ck_assert(tg_linear_params(ctx, la, &pa) && tg_linear_params(ctx, lb, &pb));
        tg_optim *oa = k == 0   ? tg_sgd_new(ctx, &pa, NULL)
                       : k == 1 ? tg_adam_new(ctx, &pa, NULL)
                                : tg_adamw_new(ctx, &pa, NULL);
        tg_optim *ob = k == 0   ? tg_sgd_new(ctx, &pb, &sgd)
                       : k == 1 ? tg_adam_new(ctx, &pb, &adam)
                                : tg_adamw_new(ctx, &pb, &adamw);
        ck_assert_msg(oa && ob, "%s", tg_error_message(ctx));
        ck_assert_double_eq(tg_optim_lr(oa), k == 0 ? 1e-3 : adam.lr);
        two_steps(la, oa);
        two_steps(lb, ob);
        tg_test_assert_same_bits("weight after 2 steps", la->weight, lb->weight);
        tg_test_assert_same_bits("bias after 2 steps", la->bias, lb->bias);
        /* the defaults moved the weights (the comparison means something) */
        tg_linear *fresh = seeded_linear();
        ck_assert(tg_test_max_abs_diff(ctx, la->weight, fresh->weight) > 0);
        tg_linear_free(ctx, fresh);
        tg_optim_free(ctx, oa);
        tg_optim_free(ctx, ob);
        tg_params_free(&pa);
        tg_params_free(&pb);
        tg_linear_free(ctx, la);
        tg_linear_free(ctx, lb);
    }
    /* the layers */
    tg_linear *l = tg_linear_new_ex(ctx, "l", 3, 2, NULL);
    tg_rmsnorm *r = tg_rmsnorm_new_ex(ctx, "r", TG_SHAPE(4), NULL);
    tg_layernorm *n = tg_layernorm_new_ex(ctx, "n", TG_SHAPE(4), NULL);
    ck_assert(l && r && n);
    ck_assert(l->bias && l->base.dtype == TG_F32);
    ck_assert(r->eps == TG_RMSNORM_EPS && r->affine && !r->bias && r->base.dtype == TG_F32);
    ck_assert(n->eps == TG_LAYERNORM_EPS && n->affine && n->bias && n->base.dtype == TG_F32);
    /* cross-entropy */
    tg_tensor *logits = tg_test_rand(ctx, TG_F64, TG_SHAPE(3, 5), -2, 2);
    const int64_t targets[] = {4, 0, 2};
    tg_test_assert_same_bits("cross-entropy", tg_cross_entropy(ctx, logits, targets, NULL),
                             tg_cross_entropy(ctx, logits, targets, &TG_CROSS_ENTROPY_DEFAULTS));
    /* gradcheck */
    tg_tensor *in[] = {tg_requires_grad(ctx, tg_test_rand(ctx, TG_F64, TG_SHAPE(4), -1, 1))};
    tg_gradcheck_result res;
    ck_assert_msg(tg_gradcheck(ctx, tanh_fn, NULL, 1, in, NULL, &res), "%s", tg_error_message(ctx));
    const tg_gradcheck_tol tol = tg_gradcheck_dtype_tol(TG_F64);
    ck_assert(res.h == tol.h && res.atol == tol.atol && res.rtol == tol.rtol);
    /* checkpoints */
    char dir[256], path[320];
    tg_test_make_tmpdir(dir, sizeof dir, "tg-null-opts");
    snprintf(path, sizeof path, "%s/l.safetensors", dir);
    tg_params p = {0};
    ck_assert(tg_linear_params(ctx, l, &p));
    ck_assert_int_eq(tg_ckpt_save_ex(ctx, path, &p, NULL, NULL, NULL), TG_OK);
    ck_assert_int_eq(tg_ckpt_load_ex(ctx, path, &p, NULL, NULL, NULL), TG_OK);
    tg_test_remove_tree(dir);
    tg_params_free(&p);
    tg_linear_free(ctx, l);
    tg_rmsnorm_free(ctx, r);
    tg_layernorm_free(ctx, n);
}
END_TEST

/* Allocation failures while making a module leave nothing behind: for
 * every kind (and a Sequential built of four), the n-th allocation fails
 * for n = 0, 1, ... until the module is made; each failure is TG_ERR_OOM
 * and ASan/valgrind see no leak. */
static int fail_after;
static void *failing_alloc(size_t size, size_t align, void *user) {
    (void)user;
    if (fail_after-- <= 0) return NULL;
    size = (size + align - 1) / align * align;
    return aligned_alloc(align, size);
}
static void plain_free(void *p, void *user) {
    (void)user;
    free(p);
}

static tg_module *make_kind(tg_ctx *c, int kind) {
    switch (kind) {
    case 0: return TG_MODULE(tg_linear_new(c, "fc", 20, 10, true, TG_F64));
    case 1: return TG_MODULE(tg_rmsnorm_new1(c, "rms", 16));
    case 2: return TG_MODULE(tg_layernorm_new_ex(c, "ln", TG_SHAPE(2, 8), NULL));
    case 3: return TG_MODULE(tg_embedding_layer_new(c, "tok", 10, 4, TG_F32));
    case 4: return TG_MODULE(tg_activation_new(c, "act", TG_ACT_GELU));
    default: {
        tg_sequential *s = tg_sequential_new(c, "mlp");
        tg_sequential_add(c, s, TG_MODULE(tg_linear_new1(c, "fc1", 3, 8)));
        tg_sequential_add(c, s, TG_MODULE(tg_rmsnorm_new1(c, "norm", 8)));
        tg_sequential_add(c, s, TG_MODULE(tg_activation_new(c, NULL, TG_ACT_RELU)));
        tg_sequential_add(c, s, TG_MODULE(tg_linear_new1(c, "fc2", 8, 2)));
        return TG_MODULE(s);
    }
    }
}

START_TEST(test_oom_no_leak) {
    /* fail the n-th allocation for every n until construction succeeds */
    for (int n = 0; n < 200; n++) {
        tg_allocator a = {failing_alloc, plain_free, NULL};
        fail_after = 1 << 30;
        tg_ctx *c = tg_ctx_new_with_allocator(1, &a);
        ck_assert_ptr_nonnull(c);
        fail_after = n;
        tg_module *m = make_kind(c, _i);
        fail_after = 1 << 30;
        bool ok = tg_ok(c);
        if (ok) ck_assert_ptr_nonnull(m);
        else ck_assert_int_eq(tg_status_of(c), TG_ERR_OOM);
        if (_i == 5 && ok) ck_assert_int_eq(((tg_sequential *)(void *)m)->modules.count, 4);
        tg_module_free(c, m); /* a Sequential left incomplete by a failed add */
        tg_ctx_free(c);
        if (ok) return;
    }
    ck_abort_msg("module kind %d was never made", _i);
}
END_TEST

/* Linear -> RMSNorm -> LayerNorm -> Linear regressing a fixed random
 * target with AdamW: the loss falls by 10x; after warm-up a step allocates
 * nothing new (the arena's capacity stays the same). */
START_TEST(test_training_loop) {
    tg_model m = {0};
    tg_linear *fc1 = tg_linear_new(ctx, "fc1", 8, 32, true, TG_F32);
    tg_rmsnorm *rms = tg_rmsnorm_new(ctx, "rms", 1, (int64_t[]){32}, TG_RMSNORM_EPS, true, true, TG_F32);
    tg_layernorm *ln = tg_layernorm_new(ctx, "ln", 1, (int64_t[]){32}, TG_LAYERNORM_EPS, true, true, TG_F32);
    tg_linear *fc2 = tg_linear_new(ctx, "fc2", 32, 4, true, TG_F32);
    ck_assert(tg_model_add(ctx, &m, TG_MODULE(fc1)) && tg_model_add(ctx, &m, TG_MODULE(rms)) &&
              tg_model_add(ctx, &m, TG_MODULE(ln)) && tg_model_add(ctx, &m, TG_MODULE(fc2)));
    tg_params p = {0};
    ck_assert(tg_model_params(ctx, &m, &p));
    tg_adam_opts o = tg_adamw_defaults();
    o.lr = 1e-2;
    tg_optim *opt = tg_adamw_new(ctx, &p, &o);
    ck_assert_ptr_nonnull(opt);
    float xs[16 * 8], ts[16 * 4];
    for (int i = 0; i < 16 * 8; i++) xs[i] = (float)(2 * tg_rng_uniform(ctx) - 1);
    for (int i = 0; i < 16 * 4; i++) ts[i] = (float)(2 * tg_rng_uniform(ctx) - 1);
    double first = 0, last = 0;
    size_t cap3 = 0;
    for (int step = 0; step < 300; step++) {
        tg_ctx_reset(ctx);
        tg_tensor *x = tg_from_buffer(ctx, TG_F32, TG_SHAPE(16, 8), xs);
        tg_tensor *t = tg_from_buffer(ctx, TG_F32, TG_SHAPE(16, 4), ts);
        tg_tensor *h = tg_relu(ctx, tg_linear_forward(ctx, fc1, x));
        h = tg_layernorm_forward(ctx, ln, tg_rmsnorm_forward(ctx, rms, h));
        tg_tensor *loss = tg_mse_loss(ctx, tg_linear_forward(ctx, fc2, h), t);
        tg_optim_zero_grad(ctx, opt);
        tg_backward(ctx, loss);
        tg_optim_step(ctx, opt);
        ck_assert_msg(tg_ok(ctx), "step %d: %s", step, tg_error_message(ctx));
        double l = tg_get_flat(ctx, loss, 0);
        if (step == 0) first = l;
        last = l;
        if (step == 3) cap3 = tg_arena_capacity(ctx);
        if (step > 3) ck_assert_uint_eq(tg_arena_capacity(ctx), cap3);
    }
    ck_assert_msg(last < first / 10, "loss %g -> %g", first, last);
    tg_optim_free(ctx, opt);
    tg_params_free(&p);
    tg_model_free(ctx, &m);
}
END_TEST

Suite *make_modules_suite(void) {
    Suite *s = tg_test_suite("modules", setup, teardown, test_summary, test_long_summary, test_params_list,
                             test_add_ownership, test_embedding_layer, test_module_forward, test_activations,
                             test_null_options_are_defaults, test_training_loop, NULL);
    TCase *oom = tg_test_tcase(s, "oom", NULL, NULL, NULL);
    tcase_add_loop_test(oom, test_oom_no_leak, 0, 6);
    return s;
}

int main(void) { return tg_test_run(make_modules_suite()); }

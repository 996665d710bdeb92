/* Sequential: modules chained, y = m_n(... m_1(x)), itself a module.
 *
 * A Linear -> RMSNorm -> ReLU -> Linear Sequential gives bitwise the
 * outputs, the tape, the gradients and the AdamW steps of the same layers
 * called by hand (float32 and float64, through tg_sequential_forward and
 * tg_module_forward); its parameters are named under its modules' names or
 * positions, its summary lists them indented (also nested and inside a
 * model); adding follows tg_model_add's ownership rules (a refused module
 * is freed, nothing leaks under make sanitize, a cycle is refused and
 * nothing is freed twice; allocation failures: tests/test_modules.c); an error inside the chain names the module; the
 * Sequential code of docs/building-models.md is this file's, and its
 * summary is what that code prints. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static tg_ctx *ctx;
static void setup(void) { ctx = tg_ctx_new(21); }
static void teardown(void) { tg_ctx_free(ctx); }

/* docs mlp_code: begin */
/* Linear -> RMSNorm -> ReLU -> Linear as one module, with the defaults. */
static tg_sequential *make_mlp(tg_ctx *ctx, int64_t in, int64_t hidden, int64_t out) {
    tg_sequential *mlp = tg_sequential_new(ctx, "mlp");
    tg_sequential_add(ctx, mlp, TG_MODULE(tg_linear_new1(ctx, "fc1", in, hidden)));
    tg_sequential_add(ctx, mlp, TG_MODULE(tg_rmsnorm_new1(ctx, "norm", hidden)));
    tg_sequential_add(ctx, mlp, TG_MODULE(tg_activation_new(ctx, NULL, TG_ACT_RELU)));
    tg_sequential_add(ctx, mlp, TG_MODULE(tg_linear_new1(ctx, "fc2", hidden, out)));
    return mlp;
}

/* The same chain in float64 with a LayerNorm without bias and GELU: the
 * options structs start from the defaults and change what differs. */
static tg_sequential *make_mlp_f64(tg_ctx *ctx, int64_t in, int64_t hidden, int64_t out) {
    tg_linear_opts lin = tg_linear_defaults();
    lin.dtype = TG_F64;
    tg_layernorm_opts norm = tg_layernorm_defaults();
    norm.bias = false;
    norm.dtype = TG_F64;
    tg_sequential *mlp = tg_sequential_new(ctx, NULL);
    tg_sequential_add(ctx, mlp, TG_MODULE(tg_linear_new_ex(ctx, NULL, in, hidden, &lin)));
    tg_sequential_add(ctx, mlp, TG_MODULE(tg_layernorm_new_ex(ctx, NULL, TG_SHAPE(hidden), &norm)));
    tg_sequential_add(ctx, mlp, TG_MODULE(tg_activation_new(ctx, NULL, TG_ACT_GELU)));
    tg_sequential_add(ctx, mlp, TG_MODULE(tg_linear_new_ex(ctx, NULL, hidden, out, &lin)));
    return mlp;
}

/* One training step: the Sequential runs like any layer. */
static tg_tensor *mlp_step(tg_ctx *ctx, tg_sequential *mlp, tg_optim *opt, tg_tensor *x, const int64_t *labels) {
    tg_tensor *loss = tg_cross_entropy(ctx, tg_sequential_forward(ctx, mlp, x), labels, NULL);
    tg_optim_zero_grad(ctx, opt);
    tg_backward(ctx, loss);
    tg_optim_step(ctx, opt);
    return loss;
}
/* docs mlp_code: end */

static const char MLP_SUMMARY[] = "Sequential(\n"
                                  "  (fc1): Linear(in_features=2, out_features=64, bias=true)  params=192\n"
                                  "  (norm): RMSNorm(dim=64, eps=1e-06, affine=true, bias=false)  params=64\n"
                                  "  (2): ReLU()  params=0\n"
                                  "  (fc2): Linear(in_features=64, out_features=3, bias=true)  params=195\n"
                                  ")  params=451";

/* ---- the same as by hand ------------------------------------------------------------ */

/* The layers of make_mlp or make_mlp_f64, made in the same order (so from
 * the same RNG state, with the same weights), and their forward by hand. */
typedef struct by_hand {
    bool f64;
    tg_linear *fc1, *fc2;
    tg_rmsnorm *rms;  /* make_mlp */
    tg_layernorm *ln; /* make_mlp_f64 */
    tg_params params; /* in the Sequential's order */
} by_hand;

static by_hand make_by_hand(tg_ctx *c, bool f64, int64_t in, int64_t hidden, int64_t out) {
    by_hand h = {.f64 = f64};
    if (f64) {
        tg_linear_opts lin = tg_linear_defaults();
        lin.dtype = TG_F64;
        tg_layernorm_opts norm = tg_layernorm_defaults();
        norm.bias = false;
        norm.dtype = TG_F64;
        h.fc1 = tg_linear_new_ex(c, "0", in, hidden, &lin);
        h.ln = tg_layernorm_new_ex(c, "1", TG_SHAPE(hidden), &norm);
        h.fc2 = tg_linear_new_ex(c, "3", hidden, out, &lin);
    } else {
        h.fc1 = tg_linear_new1(c, "fc1", in, hidden);
        h.rms = tg_rmsnorm_new1(c, "norm", hidden);
        h.fc2 = tg_linear_new1(c, "fc2", hidden, out);
    }
    ck_assert(tg_linear_params(c, h.fc1, &h.params));
    ck_assert(f64 ? tg_layernorm_params(c, h.ln, &h.params) : tg_rmsnorm_params(c, h.rms, &h.params));
    ck_assert(tg_linear_params(c, h.fc2, &h.params));
    return h;
}

static tg_tensor *forward_by_hand(tg_ctx *c, const by_hand *h, tg_tensor *x) {
    tg_tensor *a = tg_linear_forward(c, h->fc1, x);
    if (h->f64) return tg_linear_forward(c, h->fc2, tg_gelu(c, tg_layernorm_forward(c, h->ln, a), false));
    return tg_linear_forward(c, h->fc2, tg_relu(c, tg_rmsnorm_forward(c, h->rms, a)));
}

static void free_by_hand(tg_ctx *c, by_hand *h) {
    tg_params_free(&h->params);
    tg_linear_free(c, h->fc1);
    tg_rmsnorm_free(c, h->rms);
    tg_layernorm_free(c, h->ln);
    tg_linear_free(c, h->fc2);
}

/* Three contexts from one seed: the Sequential run by tg_sequential_forward
 * (0) and by tg_module_forward (1), the layers by hand (2). The same
 * weights; per step, the same output bits, tape, saved bytes, gradient
 * bits of x and of every parameter; and after three AdamW steps the same
 * parameters. _i: 0 float32 (make_mlp), 1 float64 (make_mlp_f64). */
START_TEST(test_same_as_by_hand) {
    const bool f64 = _i == 1;
    const tg_dtype dt = f64 ? TG_F64 : TG_F32;
    enum { SEQ, GENERIC, HAND };
    tg_ctx *c[3];
    tg_sequential *seq[2] = {NULL, NULL};
    by_hand hand = {0};
    tg_params params[3] = {{0}};
    tg_optim *opt[3];
    for (int k = 0; k < 3; k++) {
        c[k] = tg_ctx_new(1234);
        if (k == HAND) {
            hand = make_by_hand(c[k], f64, 5, 16, 3);
            params[k] = hand.params;
        } else {
            seq[k] = f64 ? make_mlp_f64(c[k], 5, 16, 3) : make_mlp(c[k], 5, 16, 3);
            ck_assert(tg_sequential_params(c[k], seq[k], &params[k]));
        }
        ck_assert_msg(tg_ok(c[k]), "%s", tg_error_message(c[k]));
        tg_adam_opts o = tg_adamw_defaults();
        o.lr = 1e-2;
        opt[k] = tg_adamw_new(c[k], &params[k], &o);
    }
    ck_assert_int_eq(params[SEQ].count, 5);
    for (int i = 0; i < 5; i++) {
        const char *name = params[SEQ].items[i].name; /* "mlp.fc1.weight" for "fc1.weight" */
        if (!f64) {
            ck_assert_int_eq(strncmp(name, "mlp.", 4), 0);
            name += 4;
        }
        ck_assert_str_eq(name, params[HAND].items[i].name);
        tg_test_assert_same_bits("initial weights", params[SEQ].items[i].value, params[HAND].items[i].value);
        ck_assert_int_eq(params[SEQ].items[i].weight_decay, params[HAND].items[i].weight_decay);
    }
    double xs[4 * 5], dys[4 * 3];
    for (int i = 0; i < 20; i++) xs[i] = 0.37 * i - 3.1 + 0.05 * (i % 3);
    for (int i = 0; i < 12; i++) dys[i] = 0.25 * (i % 5) - 0.6;
    for (int step = 0; step < 3; step++) {
        tg_tensor *x[3], *y[3];
        for (int k = 0; k < 3; k++) {
            tg_ctx_reset(c[k]);
            x[k] = tg_requires_grad(c[k], tg_test_tensor(c[k], dt, TG_SHAPE(4, 5), xs));
            y[k] = k == SEQ       ? tg_sequential_forward(c[k], seq[k], x[k])
                   : k == GENERIC ? tg_module_forward(c[k], TG_MODULE(seq[k]), x[k])
                                  : forward_by_hand(c[k], &hand, x[k]);
            ck_assert_msg(y[k], "%s", tg_error_message(c[k]));
        }
        for (int k = 0; k < 2; k++) {
            tg_test_assert_same_bits("output", y[k], y[HAND]);
            ck_assert_int_eq(tg_tape_size(c[k]), tg_tape_size(c[HAND]));
            ck_assert_uint_eq(tg_tape_saved_bytes(c[k]), tg_tape_saved_bytes(c[HAND]));
        }
        for (int k = 0; k < 3; k++) {
            tg_optim_zero_grad(c[k], opt[k]);
            tg_backward_ex(c[k], y[k], tg_test_tensor(c[k], dt, TG_SHAPE(4, 3), dys), false);
            ck_assert_msg(tg_ok(c[k]), "%s", tg_error_message(c[k]));
        }
        for (int k = 0; k < 2; k++) {
            tg_test_assert_same_bits("dx", x[k]->grad, x[HAND]->grad);
            for (int i = 0; i < 5; i++)
                tg_test_assert_same_bits(params[k].items[i].name, params[k].items[i].value->grad,
                                         params[HAND].items[i].value->grad);
        }
        for (int k = 0; k < 3; k++) tg_optim_step(c[k], opt[k]);
    }
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 5; i++)
            tg_test_assert_same_bits("after 3 steps", params[k].items[i].value, params[HAND].items[i].value);
    for (int k = 0; k < 3; k++) {
        tg_optim_free(c[k], opt[k]);
        if (k == HAND) free_by_hand(c[k], &hand);
        else tg_params_free(&params[k]), tg_sequential_free(c[k], seq[k]);
        tg_ctx_free(c[k]);
    }
}
END_TEST

/* ---- parameters and summary --------------------------------------------------------- */

/* Parameter names: the Sequential's name, then each module's name or
 * position; the weight-decay flags of the layers; the total count. */
START_TEST(test_params) {
    tg_sequential *mlp = make_mlp(ctx, 2, 64, 3);
    tg_sequential *anon = make_mlp_f64(ctx, 2, 8, 3);
    ck_assert(tg_ok(ctx));
    tg_params p = {0};
    ck_assert(tg_sequential_params(ctx, mlp, &p));
    const char *names[] = {"mlp.fc1.weight", "mlp.fc1.bias", "mlp.norm.gamma", "mlp.fc2.weight", "mlp.fc2.bias"};
    const bool wd[] = {true, false, false, true, false};
    ck_assert_int_eq(p.count, 5);
    for (int i = 0; i < 5; i++) {
        ck_assert_str_eq(p.items[i].name, names[i]);
        ck_assert_int_eq(p.items[i].weight_decay, wd[i]);
    }
    ck_assert_int_eq(tg_params_numel(&p), 451);
    ck_assert_int_eq(tg_module_numel(TG_MODULE(mlp)), 451);
    tg_params_free(&p);
    /* unnamed: positions only, as PyTorch's state_dict of nn.Sequential */
    ck_assert(tg_module_params(ctx, TG_MODULE(anon), &p));
    const char *anon_names[] = {"0.weight", "0.bias", "1.gamma", "3.weight", "3.bias"};
    ck_assert_int_eq(p.count, 5);
    for (int i = 0; i < 5; i++) ck_assert_str_eq(p.items[i].name, anon_names[i]);
    ck_assert_int_eq(p.items[2].value->dtype, TG_F64);
    tg_params_free(&p);
    /* nested: a Sequential inside a Sequential */
    tg_sequential *blocks = tg_sequential_new(ctx, "blocks");
    ck_assert(tg_sequential_add(ctx, blocks, TG_MODULE(anon)));
    ck_assert(tg_sequential_add(ctx, blocks, TG_MODULE(mlp)));
    ck_assert(tg_module_params(ctx, TG_MODULE(blocks), &p));
    ck_assert_int_eq(p.count, 10);
    ck_assert_str_eq(p.items[0].name, "blocks.0.0.weight");
    ck_assert_str_eq(p.items[4].name, "blocks.0.3.bias");
    ck_assert_str_eq(p.items[5].name, "blocks.mlp.fc1.weight");
    ck_assert_int_eq(tg_module_numel(TG_MODULE(blocks)), 451 + (2 * 8 + 8) + 8 + (8 * 3 + 3));
    tg_params_free(&p);
    /* a path over 63 bytes is refused, naming it */
    tg_sequential *deep = tg_sequential_new(ctx, "a_name_of_forty_bytes_aaaaaaaaaaaaaaaaaa");
    tg_sequential *deeper = tg_sequential_new(ctx, "another_name_of_thirty_bytes_x");
    ck_assert(tg_sequential_add(ctx, deeper, TG_MODULE(tg_linear_new1(ctx, "fc", 2, 2))));
    ck_assert(tg_sequential_add(ctx, deep, TG_MODULE(deeper)));
    ck_assert(!tg_module_params(ctx, TG_MODULE(deep), &p));
    tg_test_assert_error(ctx, TG_ERR_VALUE, "tg_module_params", "another_name_of_thirty_bytes_x", "over 63 bytes",
                         NULL);
    tg_params_free(&p);
    tg_sequential_free(ctx, deep);
    tg_sequential_free(ctx, blocks);
}
END_TEST

/* The summary: PyTorch's layout with our parameter counts, indented by
 * nesting, inside a model's summary too; tg_module_print prints the same
 * text; snprintf semantics. */
START_TEST(test_summary) {
    tg_sequential *mlp = make_mlp(ctx, 2, 64, 3);
    char buf[2048];
    size_t n = tg_module_format(buf, sizeof buf, TG_MODULE(mlp));
    ck_assert_str_eq(buf, MLP_SUMMARY);
    ck_assert_uint_eq(n, strlen(MLP_SUMMARY));
    ck_assert_uint_eq(tg_module_format(NULL, 0, TG_MODULE(mlp)), n);
    char small[16];
    ck_assert_uint_eq(tg_module_format(small, sizeof small, TG_MODULE(mlp)), n);
    ck_assert_str_eq(small, "Sequential(\n  (");
    FILE *f = tmpfile();
    tg_module_print(f, TG_MODULE(mlp));
    rewind(f);
    char got[2048] = {0};
    ck_assert_uint_eq(fread(got, 1, sizeof got - 1, f), n + 1);
    fclose(f);
    ck_assert_int_eq(strncmp(got, MLP_SUMMARY, n), 0);
    ck_assert_int_eq(got[n], '\n');
    /* nested, in a model beside other layers */
    tg_model model = {0};
    tg_sequential *inner = tg_sequential_new(ctx, NULL);
    ck_assert(tg_sequential_add(ctx, inner, TG_MODULE(tg_activation_new(ctx, NULL, TG_ACT_TANH))));
    tg_sequential *outer = tg_sequential_new(ctx, "body");
    ck_assert(tg_sequential_add(ctx, outer, TG_MODULE(inner)));
    ck_assert(tg_sequential_add(ctx, outer, TG_MODULE(tg_sequential_new(ctx, "empty"))));
    ck_assert(tg_model_add(ctx, &model, TG_MODULE(tg_embedding_layer_new(ctx, "tok", 10, 2, TG_F32))));
    ck_assert(tg_model_add(ctx, &model, TG_MODULE(outer)));
    ck_assert(tg_model_add(ctx, &model, TG_MODULE(mlp)));
    static const char MODEL[] = "(tok): Embedding(num_embeddings=10, embedding_dim=2)  params=20\n"
                                "(body): Sequential(\n"
                                "  (0): Sequential(\n"
                                "    (0): Tanh()  params=0\n"
                                "  )  params=0\n"
                                "  (empty): Sequential()  params=0\n"
                                ")  params=0\n"
                                "(mlp): Sequential(\n"
                                "  (fc1): Linear(in_features=2, out_features=64, bias=true)  params=192\n"
                                "  (norm): RMSNorm(dim=64, eps=1e-06, affine=true, bias=false)  params=64\n"
                                "  (2): ReLU()  params=0\n"
                                "  (fc2): Linear(in_features=64, out_features=3, bias=true)  params=195\n"
                                ")  params=451\n"
                                "total params=471\n";
    n = tg_model_format(buf, sizeof buf, &model);
    ck_assert_str_eq(buf, MODEL);
    ck_assert_uint_eq(n, strlen(MODEL));
    f = tmpfile();
    tg_model_print(f, &model);
    rewind(f);
    memset(got, 0, sizeof got);
    ck_assert_uint_eq(fread(got, 1, sizeof got - 1, f), n);
    fclose(f);
    ck_assert_str_eq(got, MODEL);
    /* a model's parameter list goes through the Sequential too */
    tg_params p = {0};
    ck_assert(tg_model_params(ctx, &model, &p));
    ck_assert_int_eq(p.count, 6);
    ck_assert_str_eq(p.items[1].name, "mlp.fc1.weight");
    tg_params_free(&p);
    tg_model_free(ctx, &model);
}
END_TEST

/* ---- adding: ownership and refusals ---------------------------------------------------- */

/* tg_sequential_add takes the module in every case (a refused one is freed:
 * ASan would report a leak otherwise), except when it is already in the
 * Sequential or when adding it would make a cycle: then nothing is freed
 * (freeing would free the Sequential itself or free a module twice). */
START_TEST(test_add_rules) {
    tg_sequential *s = tg_sequential_new(ctx, "s");
    tg_linear *fc = tg_linear_new1(ctx, "fc", 4, 4);
    ck_assert(tg_sequential_add(ctx, s, TG_MODULE(fc)));
    /* refused and freed */
    ck_assert(!tg_sequential_add(ctx, s, TG_MODULE(tg_embedding_layer_new(ctx, "tok", 10, 4, TG_F32))));
    tg_test_assert_error(ctx, TG_ERR_VALUE, "tg_sequential_add", "Embedding 'tok'", "tg_embedding_layer_forward", NULL);
    ck_assert(!tg_sequential_add(ctx, s, TG_MODULE(tg_linear_new1(ctx, "fc", 4, 4))));
    tg_test_assert_error(ctx, TG_ERR_VALUE, "tg_sequential_add", "duplicate module name 'fc'", NULL);
    ck_assert(!tg_sequential_add(ctx, NULL, TG_MODULE(tg_linear_new1(ctx, "x", 4, 4))));
    tg_test_assert_error(ctx, TG_ERR_NULL, "tg_sequential_add", "'seq'", NULL);
    ck_assert(!tg_sequential_add(ctx, s, NULL));
    tg_test_assert_error(ctx, TG_ERR_NULL, "tg_sequential_add", "'m'", NULL);
    tg_rmsnorm *r = tg_rmsnorm_new1(ctx, "r", 4);
    tg_error(ctx, TG_ERR_STATE, "test", "first");
    ck_assert(!tg_sequential_add(ctx, s, TG_MODULE(r)));
    ck_assert_str_eq(tg_error_message(ctx), "test: first");
    tg_clear_error(ctx);
    /* a failed constructor gives NULL: no second error, nothing to free */
    ck_assert(!tg_sequential_add(ctx, s, TG_MODULE(tg_linear_new1(ctx, "bad", 0, 4))));
    tg_test_assert_error(ctx, TG_ERR_VALUE, "tg_linear_new1", "in_features = 0", NULL);
    /* kept: already in it, itself, a module holding it */
    ck_assert(!tg_sequential_add(ctx, s, TG_MODULE(fc)));
    tg_test_assert_error(ctx, TG_ERR_VALUE, "tg_sequential_add", "'fc' is already in the Sequential", NULL);
    ck_assert(!tg_sequential_add(ctx, s, TG_MODULE(s)));
    tg_test_assert_error(ctx, TG_ERR_VALUE, "tg_sequential_add", "Sequential 's' is Sequential 's'", "a cycle", NULL);
    tg_sequential *outer = tg_sequential_new(ctx, "outer");
    ck_assert(tg_sequential_add(ctx, outer, TG_MODULE(s)));
    ck_assert(!tg_sequential_add(ctx, s, TG_MODULE(outer)));
    tg_test_assert_error(ctx, TG_ERR_VALUE, "tg_sequential_add", "Sequential 'outer' holds Sequential 's'", "a cycle",
                         NULL);
    ck_assert_int_eq(s->modules.count, 1);
    ck_assert_int_eq(outer->modules.count, 1);
    /* the constructor's own errors */
    tg_test_assert_fails(ctx, tg_sequential_new(ctx, "a_name_that_is_much_longer_than_forty_seven_bytes_x"),
                         TG_ERR_VALUE, "tg_sequential_new", "at most 47", NULL);
    tg_sequential_free(ctx, outer); /* frees s and fc */
    tg_sequential_free(ctx, NULL);
}
END_TEST

/* ---- forward ------------------------------------------------------------------------------- */

/* An error inside the chain names the module (name or position, kind)
 * before the module's own message, and keeps its status; nested
 * Sequentials name each level. An empty Sequential is the identity. */
START_TEST(test_forward_errors) {
    tg_sequential *mlp = make_mlp(ctx, 2, 64, 3);
    tg_test_assert_fails(ctx, tg_sequential_forward(ctx, mlp, tg_zeros(ctx, TG_F32, TG_SHAPE(4, 3))), TG_ERR_SHAPE,
                         "tg_sequential_forward: in (fc1) Linear: tg_linear_forward: input (4, 3) last dim 3 != "
                         "in_features 2",
                         NULL);
    tg_test_assert_fails(ctx, tg_sequential_forward(ctx, mlp, tg_zeros(ctx, TG_F64, TG_SHAPE(4, 2))), TG_ERR_DTYPE,
                         "tg_sequential_forward: in (fc1) Linear: tg_linear_forward", "float64", NULL);
    tg_test_assert_fails(ctx, tg_sequential_forward(ctx, mlp, NULL), TG_ERR_NULL, "tg_sequential_forward", "'x'", NULL);
    tg_test_assert_fails(ctx, tg_sequential_forward(ctx, NULL, tg_zeros(ctx, TG_F32, TG_SHAPE(2))), TG_ERR_NULL,
                         "tg_sequential_forward", "'layer'", NULL);
    /* in the middle, unnamed, and one level down */
    tg_sequential *bad = tg_sequential_new(ctx, NULL);
    ck_assert(tg_sequential_add(ctx, bad, TG_MODULE(tg_linear_new1(ctx, NULL, 2, 8))));
    ck_assert(tg_sequential_add(ctx, bad, TG_MODULE(tg_rmsnorm_new1(ctx, NULL, 7))));
    tg_tensor *x = tg_zeros(ctx, TG_F32, TG_SHAPE(4, 2));
    tg_test_assert_fails(ctx, tg_sequential_forward(ctx, bad, x), TG_ERR_SHAPE,
                         "tg_sequential_forward: in (1) RMSNorm: tg_rmsnorm_forward: input (4, 8) does not end with "
                         "normalized_shape (7,)",
                         NULL);
    tg_sequential *outer = tg_sequential_new(ctx, "outer");
    ck_assert(tg_sequential_add(ctx, outer, TG_MODULE(bad)));
    tg_test_assert_fails(ctx, tg_module_forward(ctx, TG_MODULE(outer), x), TG_ERR_SHAPE,
                         "tg_sequential_forward: in (0) Sequential: tg_sequential_forward: in (1) RMSNorm: "
                         "tg_rmsnorm_forward",
                         NULL);
    /* a context in error: nothing runs, the first error stays */
    tg_error(ctx, TG_ERR_STATE, "test", "first");
    ck_assert_ptr_null(tg_sequential_forward(ctx, mlp, tg_zeros(ctx, TG_F32, TG_SHAPE(4, 2))));
    ck_assert_str_eq(tg_error_message(ctx), "test: first");
    tg_clear_error(ctx);
    /* empty: the identity */
    tg_sequential *empty = tg_sequential_new(ctx, "id");
    ck_assert_ptr_eq(tg_sequential_forward(ctx, empty, x), x);
    tg_sequential_free(ctx, empty);
    tg_sequential_free(ctx, outer);
    tg_sequential_free(ctx, mlp);
}
END_TEST

/* A few steps of make_mlp learning three points, through the docs'
 * mlp_step; its parameters go through a checkpoint and back by their
 * dotted names. */
START_TEST(test_train_and_checkpoint) {
    tg_sequential *mlp = make_mlp(ctx, 2, 16, 3);
    tg_params p = {0};
    ck_assert(tg_sequential_params(ctx, mlp, &p));
    tg_adam_opts o = tg_adam_defaults();
    o.lr = 1e-2;
    tg_optim *opt = tg_adam_new(ctx, &p, &o);
    const float xs[] = {1, 0, 0, 1, -1, -1};
    const int64_t labels[] = {0, 1, 2};
    double first = 0, last = 0;
    for (int step = 0; step < 60; step++) {
        tg_ctx_reset(ctx);
        tg_tensor *loss = mlp_step(ctx, mlp, opt, tg_from_buffer(ctx, TG_F32, TG_SHAPE(3, 2), xs), labels);
        ck_assert_msg(tg_ok(ctx), "step %d: %s", step, tg_error_message(ctx));
        last = tg_get_flat(ctx, loss, 0);
        if (step == 0) first = last;
    }
    ck_assert_msg(last < first / 2, "loss %g -> %g", first, last);
    char dir[256], path[320];
    tg_test_make_tmpdir(dir, sizeof dir, "tg-sequential");
    snprintf(path, sizeof path, "%s/mlp.safetensors", dir);
    ck_assert_int_eq(tg_ckpt_save(ctx, path, &p, NULL, NULL), TG_OK);
    tg_sequential *again = make_mlp(ctx, 2, 16, 3);
    tg_params q = {0};
    ck_assert(tg_sequential_params(ctx, again, &q));
    ck_assert_int_eq(tg_ckpt_load(ctx, path, &q, NULL, NULL), TG_OK);
    for (int i = 0; i < p.count; i++) tg_test_assert_same_bits(p.items[i].name, q.items[i].value, p.items[i].value);
    tg_test_remove_tree(dir);
    tg_optim_free(ctx, opt);
    tg_params_free(&p);
    tg_params_free(&q);
    tg_sequential_free(ctx, mlp);
    tg_sequential_free(ctx, again);
}
END_TEST

/* ---- docs/building-models.md ------------------------------------------------------------ */

/* The fenced block after the doc's comment that names `tag` (a malloc'ed
 * string), as tests/examples/check.sh reads the docs' other blocks. */
static char *doc_block(const char *tag) {
    char *doc = tg_test_read_file(TG_TEST_DIR "/../docs/building-models.md", NULL);
    char marker[128];
    snprintf(marker, sizeof marker, "tests/test_sequential.c (%s)", tag);
    char *at = strstr(doc, marker);
    ck_assert_msg(at, "no block of docs/building-models.md tested as '%s'", marker);
    char *open = strstr(at, "\n```");
    ck_assert_ptr_nonnull(open);
    char *start = strchr(open + 1, '\n') + 1;
    char *end = strstr(start, "\n```");
    ck_assert_ptr_nonnull(end);
    size_t n = (size_t)(end - start) + 1; /* with the last newline */
    char *block = tg_test_malloc(n + 1);
    memcpy(block, start, n);
    block[n] = '\0';
    free(doc);
    return block;
}

/* docs/building-models.md shows make_mlp, make_mlp_f64 and mlp_step
 * exactly as this file has them (the lines between the "docs mlp_code"
 * markers), and the summary make_mlp(ctx, 2, 64, 3) prints. */
START_TEST(test_doc) {
    char *src = tg_test_read_file(TG_TEST_DIR "/test_sequential.c", NULL);
    char *begin = strstr(src, "/* docs mlp_code: begin */\n");
    char *end = strstr(src, "/* docs mlp_code: end */");
    ck_assert(begin && end && begin < end);
    begin = strchr(begin, '\n') + 1;
    *end = '\0';
    char *code = doc_block("mlp_code");
    ck_assert_str_eq(code, begin);
    free(code);
    free(src);
    char *summary = doc_block("mlp_summary");
    tg_sequential *mlp = make_mlp(ctx, 2, 64, 3);
    char buf[1024];
    tg_module_format(buf, sizeof buf, TG_MODULE(mlp));
    strcat(buf, "\n");
    ck_assert_str_eq(summary, buf);
    free(summary);
    tg_sequential_free(ctx, mlp);
}
END_TEST

Suite *make_sequential_suite(void) {
    Suite *s = suite_create("sequential");
    TCase *tc = tg_test_tcase(s, "sequential", setup, teardown, test_params, test_summary, test_add_rules,
                              test_forward_errors, test_train_and_checkpoint, test_doc, NULL);
    tcase_add_loop_test(tc, test_same_as_by_hand, 0, 2);
    return s;
}

int main(void) { return tg_test_run(make_sequential_suite()); }

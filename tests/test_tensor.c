/* Tensor core: creation and values, the RNG, views, copies, conversion,
 * element access and printing. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/text.h"
#include "testutil.h"

static tg_ctx *ctx;

static void setup(void) { ctx = tg_ctx_new(1234); }
static void teardown(void) { tg_ctx_free(ctx); }

/* ---- creation ----------------------------------------------------------- */

START_TEST(test_zeros_ones_full) {
    tg_tensor *z = tg_zeros(ctx, TG_F32, TG_SHAPE(2, 3));
    tg_tensor *o = tg_ones(ctx, TG_F64, TG_SHAPE(4));
    tg_tensor *f = tg_full(ctx, TG_F32, TG_SHAPE(2, 2, 2), -2.5);
    ck_assert_ptr_nonnull(z);
    ck_assert_int_eq(z->ndim, 2);
    ck_assert_int_eq(z->shape[0], 2);
    ck_assert_int_eq(z->shape[1], 3);
    ck_assert_int_eq(z->numel, 6);
    ck_assert_int_eq(z->dtype, TG_F32);
    for (int i = 0; i < 6; i++) ck_assert_float_eq(((float *)z->data)[i], 0.0f);
    for (int i = 0; i < 4; i++) ck_assert_double_eq(((double *)o->data)[i], 1.0);
    for (int i = 0; i < 8; i++) ck_assert_float_eq(((float *)f->data)[i], -2.5f);
    ck_assert_uint_eq((uintptr_t)z->data % 64, 0);
    ck_assert_uint_eq((uintptr_t)o->data % 64, 0);
    ck_assert(tg_ok(ctx));
}
END_TEST

START_TEST(test_scalar_and_empty) {
    tg_tensor *s = tg_full(ctx, TG_F64, 0, NULL, 3.0);
    ck_assert_ptr_nonnull(s);
    ck_assert_int_eq(s->ndim, 0);
    ck_assert_int_eq(s->numel, 1);
    ck_assert_double_eq(tg_get(ctx, s, NULL), 3.0);
    tg_tensor *e = tg_zeros(ctx, TG_F32, TG_SHAPE(0, 5));
    ck_assert_ptr_nonnull(e);
    ck_assert_int_eq(e->numel, 0);
    ck_assert(tg_ok(ctx));
}
END_TEST

START_TEST(test_arange) {
    tg_tensor *a = tg_arange(ctx, TG_F64, 0, 5, 1);
    ck_assert_int_eq(a->numel, 5);
    for (int i = 0; i < 5; i++) ck_assert_double_eq(tg_get_flat(ctx, a, i), i);
    tg_tensor *b = tg_arange(ctx, TG_F32, 1, 2, 0.25); /* 1, 1.25, 1.5, 1.75 */
    ck_assert_int_eq(b->numel, 4);
    ck_assert_float_eq(((float *)b->data)[3], 1.75f);
    tg_tensor *c = tg_arange(ctx, TG_F64, 3, 0, -1); /* 3, 2, 1 */
    ck_assert_int_eq(c->numel, 3);
    ck_assert_double_eq(tg_get_flat(ctx, c, 2), 1.0);
    tg_tensor *d = tg_arange(ctx, TG_F64, 3, 0, 1); /* empty */
    ck_assert_int_eq(d->numel, 0);
    ck_assert(tg_ok(ctx));
    ck_assert_ptr_null(tg_arange(ctx, TG_F64, 0, 1, 0));
    ck_assert_int_eq(tg_status_of(ctx), TG_ERR_VALUE);
    ck_assert_ptr_nonnull(strstr(tg_error_message(ctx), "tg_arange"));
}
END_TEST

START_TEST(test_from_buffer_copies) {
    double src[6] = {1, 2, 3, 4, 5, 6};
    tg_tensor *t = tg_from_buffer(ctx, TG_F64, TG_SHAPE(3, 2), src);
    src[0] = 100; /* the tensor holds a copy */
    ck_assert_double_eq(tg_get(ctx, t, (int64_t[]){0, 0}), 1.0);
    ck_assert_double_eq(tg_get(ctx, t, (int64_t[]){2, 1}), 6.0);
    ck_assert_double_eq(tg_get(ctx, t, (int64_t[]){1, 0}), 3.0);
}
END_TEST

/* ---- RNG ---------------------------------------------------------------- */

/* Known-answer vectors of Philox4x32-10 published with Random123
 * (kat_vectors: "philox4x32 10"). */
START_TEST(test_philox_known_answers) {
    static const uint32_t ctr[3][4] = {{0, 0, 0, 0},
                                       {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
                                       {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}};
    static const uint32_t key[3][2] = {{0, 0}, {0xffffffffu, 0xffffffffu}, {0xa4093822u, 0x299f31d0u}};
    static const uint32_t want[3][4] = {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u},
                                        {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu},
                                        {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}};
    for (int v = 0; v < 3; v++) {
        uint32_t out[4];
        tg_philox4x32_10(out, ctr[v], key[v]);
        for (int w = 0; w < 4; w++) ck_assert_uint_eq(out[w], want[v][w]);
    }
}
END_TEST

/* The first uniform of seed 0 comes from block philox((0,0,0,0), (0,0)),
 * whose words are the first known-answer vector. */
START_TEST(test_rng_follows_documented_mapping) {
    tg_ctx *c = tg_ctx_new(0);
    tg_tensor *u = tg_rand(c, TG_F64, TG_SHAPE(1), 0, 1);
    uint64_t w = ((uint64_t)0x6627e8d5u << 32) | 0xe169c58du;
    ck_assert_double_eq(tg_get_flat(c, u, 0), (double)(w >> 11) * 0x1.0p-53);
    tg_rng_seed(c, 0);
    tg_tensor *f = tg_rand(c, TG_F32, TG_SHAPE(1), 0, 1);
    ck_assert_float_eq(((float *)f->data)[0], (float)(0x6627e8d5u >> 8) * 0x1.0p-24f);
    uint64_t seed, offset;
    tg_rng_state(c, &seed, &offset);
    ck_assert_uint_eq(seed, 0);
    ck_assert_uint_eq(offset, 1);
    tg_ctx_free(c);
}
END_TEST

START_TEST(test_rng_same_seed_same_numbers) {
    tg_ctx *a = tg_ctx_new(7), *b = tg_ctx_new(7), *c = tg_ctx_new(8);
    tg_tensor *ta = tg_randn(a, TG_F32, TG_SHAPE(100), 0, 1);
    tg_tensor *tb = tg_randn(b, TG_F32, TG_SHAPE(100), 0, 1);
    tg_tensor *tc = tg_randn(c, TG_F32, TG_SHAPE(100), 0, 1);
    ck_assert_mem_eq(ta->data, tb->data, 400);
    ck_assert(memcmp(ta->data, tc->data, 400) != 0);
    /* the stream continues: a second draw differs from the first */
    tg_tensor *ta2 = tg_randn(a, TG_F32, TG_SHAPE(100), 0, 1);
    ck_assert(memcmp(ta->data, ta2->data, 400) != 0);
    /* position, not call pattern: 60 + 40 numbers equal 100 numbers */
    tg_ctx *d = tg_ctx_new(7);
    tg_tensor *d1 = tg_randn(d, TG_F32, TG_SHAPE(60), 0, 1);
    tg_tensor *d2 = tg_randn(d, TG_F32, TG_SHAPE(40), 0, 1);
    ck_assert_mem_eq(d1->data, ta->data, 240);
    ck_assert_mem_eq(d2->data, (float *)ta->data + 60, 160);
    tg_ctx_free(a);
    tg_ctx_free(b);
    tg_ctx_free(c);
    tg_ctx_free(d);
}
END_TEST

START_TEST(test_rng_state_restores_stream) {
    tg_randn(ctx, TG_F64, TG_SHAPE(13), 0, 1);
    uint64_t seed, off;
    tg_rng_state(ctx, &seed, &off);
    tg_tensor *x = tg_rand(ctx, TG_F64, TG_SHAPE(5), -1, 1);
    tg_rng_set_state(ctx, seed, off);
    tg_tensor *y = tg_rand(ctx, TG_F64, TG_SHAPE(5), -1, 1);
    ck_assert_mem_eq(x->data, y->data, 40);
}
END_TEST

START_TEST(test_rng_distribution) {
    int64_t n = 200000;
    tg_tensor *u = tg_rand(ctx, TG_F64, TG_SHAPE(n), 2, 4);
    tg_tensor *g = tg_randn(ctx, TG_F64, TG_SHAPE(n), 1, 3);
    double su = 0, sg = 0, sg2 = 0, lo = 10, hi = -10;
    for (int64_t i = 0; i < n; i++) {
        double v = ((double *)u->data)[i];
        su += v;
        if (v < lo) lo = v;
        if (v > hi) hi = v;
        double w = ((double *)g->data)[i];
        sg += w;
        sg2 += w * w;
    }
    ck_assert(lo >= 2 && hi < 4);
    ck_assert_double_eq_tol(su / n, 3.0, 0.01);
    double mean = sg / n, var = sg2 / n - mean * mean;
    ck_assert_double_eq_tol(mean, 1.0, 0.03);
    ck_assert_double_eq_tol(sqrt(var), 3.0, 0.03);
}
END_TEST

/* ---- views, copies, conversion, access ---------------------------------- */

START_TEST(test_view_shares_data) {
    tg_tensor *a = tg_arange(ctx, TG_F32, 0, 12, 1);
    tg_tensor *v = tg_view(ctx, a, TG_SHAPE(3, -1));
    ck_assert_ptr_nonnull(v);
    ck_assert_int_eq(v->shape[1], 4);
    ck_assert_ptr_eq(v->data, a->data);
    tg_set(ctx, v, (int64_t[]){2, 3}, 99);
    ck_assert_double_eq(tg_get_flat(ctx, a, 11), 99);
    ck_assert_ptr_null(tg_view(ctx, a, TG_SHAPE(5, -1)));
    ck_assert_int_eq(tg_status_of(ctx), TG_ERR_SHAPE);
    ck_assert_ptr_nonnull(strstr(tg_error_message(ctx), "tg_view: cannot view (12,)"));
}
END_TEST

START_TEST(test_copy_and_convert) {
    tg_tensor *a = tg_randn(ctx, TG_F64, TG_SHAPE(3, 4), 0, 1);
    tg_tensor *c = tg_copy(ctx, a);
    ck_assert_ptr_ne(c->data, a->data);
    ck_assert_mem_eq(c->data, a->data, 12 * sizeof(double));
    tg_tensor *f = tg_to_dtype(ctx, a, TG_F32);
    ck_assert_int_eq(f->dtype, TG_F32);
    ck_assert(tg_same_shape(f, a));
    for (int i = 0; i < 12; i++) ck_assert_float_eq(((float *)f->data)[i], (float)((double *)a->data)[i]);
    tg_tensor *back = tg_to_dtype(ctx, f, TG_F64);
    for (int i = 0; i < 12; i++) ck_assert_double_eq_tol(((double *)back->data)[i], ((double *)a->data)[i], 1e-6);
    ck_assert_ptr_null(tg_assign(ctx, a, f));
    ck_assert_int_eq(tg_status_of(ctx), TG_ERR_DTYPE);
    ck_assert_ptr_nonnull(strstr(tg_error_message(ctx), "tg_assign: dtypes differ: float64 and float32"));
}
END_TEST

START_TEST(test_typed_data_and_index_errors) {
    tg_tensor *a = tg_zeros(ctx, TG_F32, TG_SHAPE(2, 2));
    ck_assert_ptr_nonnull(tg_data_f32(ctx, a));
    ck_assert_ptr_null(tg_data_f64(ctx, a));
    ck_assert_int_eq(tg_status_of(ctx), TG_ERR_DTYPE);
    tg_clear_error(ctx);
    ck_assert(isnan(tg_get(ctx, a, (int64_t[]){2, 0})));
    ck_assert_int_eq(tg_status_of(ctx), TG_ERR_INDEX);
    ck_assert_ptr_nonnull(strstr(tg_error_message(ctx), "tg_get: index 2 is out of range for dim 0 of shape (2, 2)"));
    tg_clear_error(ctx);
    tg_set_flat(ctx, a, -1, 1.0);
    ck_assert_int_eq(tg_status_of(ctx), TG_ERR_INDEX);
}
END_TEST

/* ---- printing ------------------------------------------------------------ */

START_TEST(test_print_pytorch_format) {
    char buf[512];
    float v[2] = {0.1f, 0.2f};
    tg_format(buf, sizeof buf, tg_from_buffer(ctx, TG_F32, TG_SHAPE(1, 2), v));
    ck_assert_str_eq(buf, "tensor([[0.1000, 0.2000]], dtype=float32)");
    tg_format(buf, sizeof buf, tg_view(ctx, tg_arange(ctx, TG_F64, 0, 4, 1), TG_SHAPE(2, 2)));
    ck_assert_str_eq(buf, "tensor([[0., 1.],\n        [2., 3.]], dtype=float64)");
    double w[3] = {-1.5, 2.25, 10.0};
    tg_format(buf, sizeof buf, tg_from_buffer(ctx, TG_F64, TG_SHAPE(3), w));
    ck_assert_str_eq(buf, "tensor([-1.5000,  2.2500, 10.0000], dtype=float64)");
    double s[2] = {1e-5, 1.0};
    tg_format(buf, sizeof buf, tg_from_buffer(ctx, TG_F64, TG_SHAPE(2), s));
    ck_assert_str_eq(buf, "tensor([1.0000e-05, 1.0000e+00], dtype=float64)");
    tg_format(buf, sizeof buf, tg_full(ctx, TG_F32, 0, NULL, 2.5));
    ck_assert_str_eq(buf, "tensor(2.5000, dtype=float32)");
    double nf[3] = {NAN, INFINITY, 0.5};
    tg_format(buf, sizeof buf, tg_from_buffer(ctx, TG_F64, TG_SHAPE(3), nf));
    ck_assert_str_eq(buf, "tensor([   nan,    inf, 0.5000], dtype=float64)");
}
END_TEST

START_TEST(test_print_summarizes_large) {
    tg_tensor *a = tg_view(ctx, tg_arange(ctx, TG_F64, 1, 2.9995, 0.001), TG_SHAPE(40, 50));
    char buf[2048];
    size_t n = tg_format(buf, sizeof buf, a);
    ck_assert_uint_lt(n, sizeof buf);
    ck_assert_ptr_nonnull(strstr(buf, "tensor([[1.0000, 1.0010, 1.0020,  ..., 1.0470, 1.0480, 1.0490],"));
    ck_assert_ptr_nonnull(strstr(buf, "        ...,\n"));
    ck_assert_ptr_nonnull(strstr(buf, "[2.9500, 2.9510, 2.9520,  ..., 2.9970, 2.9980, 2.9990]], dtype=float64)"));
    /* snprintf semantics: a short buffer gets a truncated, terminated text */
    char small[16];
    size_t need = tg_format(small, sizeof small, a);
    ck_assert_uint_eq(need, n);
    ck_assert_uint_eq(strlen(small), 15);
}
END_TEST

/* The string builder every printer uses (tensor/text.h): snprintf's
 * semantics into a buffer (the whole length counted, what fits kept and
 * terminated), a measuring text without a buffer, a FILE, and numbers in
 * their shortest exact digits. */
START_TEST(test_text_builder) {
    char buf[8];
    tg_text t = tg_text_buf(buf, sizeof buf);
    tg_text_put(&t, "abc");
    tg_text_printf(&t, "%d-%s", 42, "xyz");
    ck_assert_uint_eq(t.len, 9);
    ck_assert_str_eq(buf, "abc42-x");
    ck_assert_uint_eq(tg_text_kept(&t), 7);
    size_t room;
    ck_assert_ptr_null(tg_text_room(&t, &room));
    ck_assert_uint_eq(room, 0);
    tg_text m = tg_text_buf(NULL, 0);
    tg_text_put(&m, "hello");
    ck_assert_uint_eq(m.len, 5);
    ck_assert_uint_eq(tg_text_kept(&m), 0);

    const double v[] = {0.003, 0.1 + 0.2, 1e-8, 2, NAN};
    const char *want[] = {"0.003", "0.30000000000000004", "1e-08", "2", "nan"};
    for (int i = 0; i < 5; i++) {
        char num[32];
        tg_text n = tg_text_buf(num, sizeof num);
        tg_text_shortest(&n, v[i]);
        ck_assert_str_eq(num, want[i]);
    }

    FILE *f = tmpfile();
    ck_assert_ptr_nonnull(f);
    tg_text ft = tg_text_file(f);
    tg_text_printf(&ft, "x=%d", 5);
    tg_text_put(&ft, "; done");
    ck_assert_uint_eq(ft.len, 9);
    rewind(f);
    char back[16] = {0};
    ck_assert_ptr_nonnull(fgets(back, sizeof back, f));
    ck_assert_str_eq(back, "x=5; done");
    fclose(f);
}
END_TEST

Suite *make_tensor_suite(void) {
    Suite *s = suite_create("tensor");
    tg_test_tcase(s, "create", setup, teardown, test_zeros_ones_full, test_scalar_and_empty, test_arange,
                  test_from_buffer_copies, NULL);
    tg_test_tcase(s, "rng", setup, teardown, test_philox_known_answers, test_rng_follows_documented_mapping,
                  test_rng_same_seed_same_numbers, test_rng_state_restores_stream, test_rng_distribution, NULL);
    tg_test_tcase(s, "views", setup, teardown, test_view_shares_data, test_copy_and_convert,
                  test_typed_data_and_index_errors, NULL);
    tg_test_tcase(s, "print", setup, teardown, test_print_pytorch_format, test_print_summarizes_large,
                  test_text_builder, NULL);
    return s;
}

int main(void) { return tg_test_run(make_tensor_suite()); }

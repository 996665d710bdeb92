/* Helpers shared by every Check suite: see tests/testutil.h. */
#define _XOPEN_SOURCE 700 /* mkdtemp, nftw */

#include "testutil.h"

#include <ftw.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- running --------------------------------------------------------------- */

int tg_test_run(Suite *suite) {
    SRunner *sr = srunner_create(suite);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

/* A test case of the listed tests (ap: NULL-terminated), added to suite. */
static TCase *add_tcase(Suite *suite, const char *name, void (*setup)(void), void (*teardown)(void), va_list ap) {
    TCase *tc = tcase_create(name);
    if (setup || teardown) tcase_add_checked_fixture(tc, setup, teardown);
    for (const TTest *t = va_arg(ap, const TTest *); t; t = va_arg(ap, const TTest *)) tcase_add_test(tc, t);
    suite_add_tcase(suite, tc);
    return tc;
}

TCase *tg_test_tcase(Suite *suite, const char *name, void (*setup)(void), void (*teardown)(void), ...) {
    va_list ap;
    va_start(ap, teardown);
    TCase *tc = add_tcase(suite, name, setup, teardown, ap);
    va_end(ap);
    return tc;
}

Suite *tg_test_suite(const char *name, void (*setup)(void), void (*teardown)(void), ...) {
    Suite *s = suite_create(name);
    va_list ap;
    va_start(ap, teardown);
    add_tcase(s, name, setup, teardown, ap);
    va_end(ap);
    return s;
}

bool tg_test_under_valgrind(void) {
    const char *v = getenv("TG_UNDER_VALGRIND");
    return v && strcmp(v, "1") == 0;
}

bool tg_test_under_sanitizer(void) {
#if defined(__SANITIZE_ADDRESS__)
    return true;
#else
    return false;
#endif
}

void *tg_test_malloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    ck_assert_msg(p != NULL, "out of memory for %zu bytes", bytes);
    return p;
}

/* ---- tensors --------------------------------------------------------------- */

tg_tensor *tg_test_tensor(tg_ctx *ctx, tg_dtype dtype, int ndim, const int64_t *shape, const double *v) {
    tg_tensor *t = tg_zeros(ctx, dtype, ndim, shape);
    ck_assert_msg(t != NULL, "tg_zeros: %s", tg_error_message(ctx));
    for (int64_t i = 0; i < t->numel; i++) tg_set_flat(ctx, t, i, v[i]);
    return t;
}

tg_tensor *tg_test_rand(tg_ctx *ctx, tg_dtype dtype, int ndim, const int64_t *shape, double lo, double hi) {
    tg_tensor *t = tg_rand(ctx, dtype, ndim, shape, lo, hi);
    ck_assert_msg(t != NULL, "tg_rand: %s", tg_error_message(ctx));
    return t;
}

/* A number in [-1, 1) fixed by i (splitmix64 of i). */
static double pattern(int64_t i) {
    uint64_t z = (uint64_t)i * 0x9E3779B97F4A7C15ull + 0xA5A5A5A5ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1.0p-52 - 1.0;
}

tg_tensor *tg_test_smooth_leaf(tg_ctx *ctx, int ndim, const int64_t *shape, int salt) {
    tg_tensor *t = tg_zeros(ctx, TG_F64, ndim, shape);
    ck_assert_msg(t != NULL, "tg_zeros: %s", tg_error_message(ctx));
    for (int64_t i = 0; i < t->numel; i++) {
        double v = 1.9 * pattern(i * 7 + salt * 1000003);
        if (fabs(v) < 0.05) v = v < 0 ? v - 0.05 : v + 0.05;
        ((double *)t->data)[i] = v;
    }
    return tg_requires_grad(ctx, t);
}

double *tg_test_values(tg_ctx *ctx, const tg_tensor *t) {
    double *v = tg_test_malloc((size_t)t->numel * sizeof *v);
    for (int64_t i = 0; i < t->numel; i++) v[i] = tg_get_flat(ctx, t, i);
    return v;
}

double tg_test_max_abs_diff(tg_ctx *ctx, const tg_tensor *a, const tg_tensor *b) {
    ck_assert_int_eq(a->numel, b->numel);
    double m = 0;
    for (int64_t i = 0; i < a->numel; i++) {
        double d = fabs(tg_get_flat(ctx, a, i) - tg_get_flat(ctx, b, i));
        if (d > m || d != d) m = d;
    }
    return m;
}

/* ---- asserts ---------------------------------------------------------------- */

/* Element i of `what`: v against ref. */
static void assert_close_at(const char *what, int64_t i, double v, double ref, double atol, double rtol) {
    if (isnan(ref) || isinf(ref)) {
        ck_assert_msg(isnan(ref) ? isnan(v) : v == ref, "%s[%lld] = %.17g, expected %g", what, (long long)i, v, ref);
        return;
    }
    double tol = fmax(atol, rtol * fabs(ref));
    ck_assert_msg(fabs(v - ref) <= tol, "%s[%lld] = %.17g, expected %.17g (atol %g, rtol %g)", what, (long long)i, v,
                  ref, atol, rtol);
}

void tg_test_assert_close(tg_ctx *ctx, const char *what, const tg_tensor *t, const double *ref, int64_t n, double atol,
                          double rtol) {
    ck_assert_msg(t != NULL, "%s: NULL tensor (%s)", what, tg_error_message(ctx));
    ck_assert_msg(t->numel == n, "%s: %lld elements, expected %lld", what, (long long)t->numel, (long long)n);
    for (int64_t i = 0; i < n; i++) assert_close_at(what, i, tg_get_flat(ctx, t, i), ref[i], atol, rtol);
}

void tg_test_assert_close_tensors(tg_ctx *ctx, const char *what, const tg_tensor *a, const tg_tensor *b, double atol,
                                  double rtol) {
    ck_assert_msg(a != NULL && b != NULL, "%s: NULL tensor (%s)", what, tg_error_message(ctx));
    ck_assert_msg(a->numel == b->numel, "%s: %lld vs %lld elements", what, (long long)a->numel, (long long)b->numel);
    for (int64_t i = 0; i < a->numel; i++)
        assert_close_at(what, i, tg_get_flat(ctx, a, i), tg_get_flat(ctx, b, i), atol, rtol);
}

/* The error check of tg_test_assert_error and tg_test_assert_fails. */
static void assert_error_v(tg_ctx *ctx, tg_status status, va_list ap) {
    ck_assert_msg(!tg_ok(ctx), "expected an error, got none");
    ck_assert_msg(tg_status_of(ctx) == status, "status %s, expected %s (%s)", tg_status_name(tg_status_of(ctx)),
                  tg_status_name(status), tg_error_message(ctx));
    const char *msg = tg_error_message(ctx);
    for (const char *s = va_arg(ap, const char *); s; s = va_arg(ap, const char *))
        ck_assert_msg(strstr(msg, s) != NULL, "error message \"%s\" lacks \"%s\"", msg, s);
    tg_clear_error(ctx);
}

void tg_test_assert_error(tg_ctx *ctx, tg_status status, ...) {
    va_list ap;
    va_start(ap, status);
    assert_error_v(ctx, status, ap);
    va_end(ap);
}

void tg_test_assert_fails(tg_ctx *ctx, const void *got, tg_status status, ...) {
    ck_assert_msg(got == NULL, "expected NULL from a call failing with %s, got %p", tg_status_name(status), got);
    va_list ap;
    va_start(ap, status);
    assert_error_v(ctx, status, ap);
    va_end(ap);
}

/* Element i of a float32 or float64 tensor, without a context. */
static double elem(const tg_tensor *t, int64_t i) {
    return t->dtype == TG_F64 ? ((const double *)t->data)[i] : (double)((const float *)t->data)[i];
}

void tg_test_assert_same_bits(const char *what, const tg_tensor *a, const tg_tensor *b) {
    ck_assert_msg(a != NULL && b != NULL, "%s: NULL tensor", what);
    ck_assert_msg(a->dtype == b->dtype && a->numel == b->numel, "%s: %s[%lld] vs %s[%lld]", what,
                  tg_dtype_name(a->dtype), (long long)a->numel, tg_dtype_name(b->dtype), (long long)b->numel);
    size_t es = tg_dtype_size(a->dtype);
    for (int64_t i = 0; i < a->numel; i++)
        if (memcmp((const char *)a->data + (size_t)i * es, (const char *)b->data + (size_t)i * es, es) != 0)
            ck_abort_msg("%s: element %lld differs: %.17g vs %.17g", what, (long long)i, elem(a, i), elem(b, i));
}

void tg_test_assert_contains(const char *text, ...) {
    ck_assert_msg(text != NULL, "no text");
    va_list ap;
    va_start(ap, text);
    for (const char *s = va_arg(ap, const char *); s; s = va_arg(ap, const char *))
        ck_assert_msg(strstr(text, s) != NULL, "\"%s\" not found in:\n%s", s, text);
    va_end(ap);
}

/* ---- fixtures ------------------------------------------------------------------ */

double *tg_test_fixture(const char *file, const char *name, int64_t *n) {
    char path[1024];
    snprintf(path, sizeof path, "%s/fixtures/%s", TG_TEST_DIR, file);
    FILE *fp = fopen(path, "r");
    ck_assert_msg(fp != NULL, "cannot open fixture %s", path);
    char word[128];
    double *v = NULL;
    while (fscanf(fp, "%127s", word) == 1) {
        if (word[0] == '#') { /* a comment: skip the rest of the line */
            int c;
            while ((c = fgetc(fp)) != EOF && c != '\n') {}
            continue;
        }
        long long count;
        ck_assert_msg(fscanf(fp, "%lld", &count) == 1 && count >= 0, "fixture %s: bad count for %s", path, word);
        bool want = strcmp(word, name) == 0;
        if (want) v = tg_test_malloc(sizeof *v * (size_t)count);
        for (long long i = 0; i < count; i++) {
            char num[64];
            ck_assert_msg(fscanf(fp, "%63s", num) == 1, "fixture %s: %s is short", path, word);
            if (want) v[i] = strtod(num, NULL);
        }
        if (want) {
            *n = count;
            break;
        }
    }
    fclose(fp);
    ck_assert_msg(v != NULL, "fixture %s has no array %s", path, name);
    return v;
}

tg_tensor *tg_test_fixture_tensor(tg_ctx *ctx, const char *file, const char *name, tg_dtype dtype, int ndim,
                                  const int64_t *shape) {
    int64_t n;
    double *v = tg_test_fixture(file, name, &n);
    tg_tensor *t = ndim < 0 ? tg_test_tensor(ctx, dtype, TG_SHAPE(n), v) : tg_test_tensor(ctx, dtype, ndim, shape, v);
    ck_assert_msg(t->numel == n, "fixture %s: %s has %lld values for a tensor of %lld", file, name, (long long)n,
                  (long long)t->numel);
    free(v);
    return t;
}

tg_tensor *tg_test_fixture_weights(tg_ctx *ctx, const char *file, tg_dtype dtype, int ndim, const int64_t *shape) {
    int64_t n;
    double *w = tg_test_fixture(file, "w", &n);
    tg_tensor *t = tg_zeros(ctx, dtype, ndim, shape);
    ck_assert_msg(t != NULL, "tg_zeros: %s", tg_error_message(ctx));
    ck_assert_msg(t->numel <= n, "fixture %s: w has %lld values, %lld needed", file, (long long)n, (long long)t->numel);
    for (int64_t i = 0; i < t->numel; i++) tg_set_flat(ctx, t, i, w[i]);
    free(w);
    return t;
}

void tg_test_assert_fixture(tg_ctx *ctx, const tg_tensor *t, const char *file, const char *name, double tol) {
    int64_t n;
    double *v = tg_test_fixture(file, name, &n);
    tg_test_assert_close(ctx, name, t, v, n, tol, tol);
    free(v);
}

tg_tensor *tg_test_op_vs_fixture(tg_ctx *ctx, const char *file, const char *prefix, tg_dtype dtype, int ndim,
                                 const int64_t *shape, tg_gradcheck_fn f, void *user, double tol) {
    char name[128];
    snprintf(name, sizeof name, "%s.x", prefix);
    tg_tensor *x = tg_requires_grad(ctx, tg_test_fixture_tensor(ctx, file, name, dtype, ndim, shape));
    tg_tensor *y = f(ctx, &x, user);
    ck_assert_msg(y != NULL, "%s: %s", prefix, tg_error_message(ctx));
    ck_assert_int_eq(y->dtype, dtype);
    snprintf(name, sizeof name, "%s.y", prefix);
    tg_test_assert_fixture(ctx, y, file, name, tol);
    tg_backward_ex(ctx, y, tg_test_fixture_weights(ctx, file, dtype, y->ndim, y->shape), false);
    ck_assert_msg(tg_ok(ctx), "%s: %s", prefix, tg_error_message(ctx));
    snprintf(name, sizeof name, "%s.dx", prefix);
    tg_test_assert_fixture(ctx, x->grad, file, name, tol);
    return y;
}

/* ---- gradients ------------------------------------------------------------- */

void tg_test_gradcheck(tg_ctx *ctx, const char *what, tg_gradcheck_fn f, void *user, int n, tg_tensor *const *in,
                       tg_gradcheck_opts opts) {
    tg_gradcheck_result r;
    bool pass = tg_gradcheck(ctx, f, user, n, in, &opts, &r);
    ck_assert_msg(tg_ok(ctx), "%s: gradcheck error: %s", what, tg_error_message(ctx));
    ck_assert_msg(pass && r.pass,
                  "%s (%s, h %g, atol %g, rtol %g): gradcheck failed %lld of %lld; worst input %d index %lld "
                  "analytic %.12g numeric %.12g",
                  what, opts.mode == TG_GRADCHECK_FULL ? "full" : "directional", r.h, r.atol, r.rtol,
                  (long long)r.n_failed, (long long)r.n_checked, r.worst_input, (long long)r.worst_index,
                  r.worst_analytic, r.worst_numeric);
    ck_assert_msg(r.n_checked > 0, "%s: nothing checked", what);
}

void tg_test_op_gradcheck(tg_ctx *ctx, const char *what, tg_gradcheck_fn f, void *user, int n, tg_tensor *const *in) {
    uint32_t mask = 0;
    for (int k = 0; k < n; k++)
        if (in[k] && in[k]->requires_grad) mask |= (uint32_t)1 << k;
    ck_assert_msg(mask != 0, "%s: no input requires grad", what);
    tg_gradcheck_opts o = {
        .h = TG_TEST_OP_H, .atol = TG_TEST_OP_ATOL, .rtol = TG_TEST_OP_RTOL, .mode = TG_GRADCHECK_FULL, .inputs = mask};
    tg_test_gradcheck(ctx, what, f, user, n, in, o);
}

tg_tensor *tg_test_backward(tg_ctx *ctx, tg_gradcheck_fn f, void *user, int n, tg_tensor *const *in) {
    for (int k = 0; k < n; k++)
        if (in[k]->requires_grad) tg_zero_grad(ctx, in[k]);
    tg_tensor *y = f(ctx, in, user);
    ck_assert_msg(y != NULL, "forward failed: %s", tg_error_message(ctx));
    tg_backward_ex(ctx, y, tg_full(ctx, y->dtype, y->ndim, y->shape, 1.0), false);
    ck_assert_msg(tg_ok(ctx), "backward failed: %s", tg_error_message(ctx));
    return y;
}

/* ---- files ----------------------------------------------------------------- */

char *tg_test_read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    ck_assert_msg(n >= 0, "cannot tell the size of %s", path);
    rewind(f);
    char *s = tg_test_malloc((size_t)n + 1);
    ck_assert_msg(fread(s, 1, (size_t)n, f) == (size_t)n, "short read of %s", path);
    s[n] = '\0';
    fclose(f);
    if (size) *size = (size_t)n;
    return s;
}

void tg_test_write_file(const char *path, const void *bytes, size_t n) {
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "cannot create %s", path);
    ck_assert_uint_eq(fwrite(bytes, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
}

void tg_test_make_tmpdir(char *buf, size_t size, const char *prefix) {
    const char *tmp = getenv("TMPDIR");
    int len = snprintf(buf, size, "%s/%s-XXXXXX", tmp && *tmp ? tmp : "/tmp", prefix);
    ck_assert_msg(len > 0 && (size_t)len < size, "temporary folder name too long");
    ck_assert_msg(mkdtemp(buf) != NULL, "mkdtemp %s failed", buf);
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

void tg_test_remove_tree(const char *path) { nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

/* ---- norms ----------------------------------------------------------------- */

void tg_test_norm_ref(bool centered, const double *x, const double *g, const double *b, int64_t N, int64_t C,
                      double eps, double *xhat, double *y) {
    for (int64_t n = 0; n < N; n++) {
        const double *r = x + n * C;
        long double mu = 0;
        if (centered) {
            for (int64_t j = 0; j < C; j++) mu += r[j];
            mu /= C;
        }
        long double ss = 0;
        for (int64_t j = 0; j < C; j++) ss += ((long double)r[j] - mu) * ((long double)r[j] - mu);
        long double rstd = 1.0L / sqrtl(ss / C + eps);
        for (int64_t j = 0; j < C; j++) {
            double xh = (double)(((long double)r[j] - mu) * rstd);
            if (xhat) xhat[n * C + j] = xh;
            if (y) y[n * C + j] = xh * (g ? g[j] : 1.0) + (b ? b[j] : 0.0);
        }
    }
}

tg_tensor *tg_test_norm_fn(tg_ctx *ctx, tg_tensor *const *in, void *user) {
    const tg_test_norm_case *c = user;
    int k = 1;
    tg_tensor *g = c->affine ? in[k++] : NULL;
    tg_tensor *b = c->bias ? in[k++] : NULL;
    return c->op(ctx, in[0], g, b, c->ndim_norm, c->eps);
}

int tg_test_norm_inputs(tg_ctx *ctx, const tg_test_norm_case *c, tg_dtype dtype, int ndim, const int64_t *shape,
                        double scale, tg_tensor **in) {
    int n = 0;
    in[n++] = tg_requires_grad(ctx, tg_test_rand(ctx, dtype, ndim, shape, -scale, scale));
    const int64_t *ns = shape + ndim - c->ndim_norm;
    if (c->affine) in[n++] = tg_requires_grad(ctx, tg_test_rand(ctx, dtype, c->ndim_norm, ns, 0.5, 1.5));
    if (c->bias) in[n++] = tg_requires_grad(ctx, tg_test_rand(ctx, dtype, c->ndim_norm, ns, -1, 1));
    return n;
}

/* Helpers shared by every Check suite (tests/testutil.c, linked into each
 * test program as the library tg_testutil). All names start with tg_test_.
 *
 *  - running: tg_test_run (a suite's main), tg_test_tcase (a test case with
 *    its fixture and tests), tg_test_suite (a suite of one test case),
 *    tg_test_under_valgrind, tg_test_under_sanitizer, tg_test_malloc;
 *  - tensors: tg_test_tensor, tg_test_rand, tg_test_smooth_leaf,
 *    tg_test_values, tg_test_max_abs_diff;
 *  - asserts: tg_test_assert_close (tensor vs values), tg_test_assert_close_tensors,
 *    tg_test_assert_same_bits, tg_test_assert_contains, tg_test_assert_error,
 *    tg_test_assert_fails;
 *  - fixtures (text files in tests/fixtures/, "name count v1 v2 ..."):
 *    tg_test_fixture, tg_test_fixture_tensor, tg_test_fixture_weights,
 *    tg_test_assert_fixture, tg_test_op_vs_fixture;
 *  - gradients: tg_test_gradcheck, tg_test_op_gradcheck (tg_gradcheck with
 *    its result asserted), tg_test_backward;
 *  - files: tg_test_read_file, tg_test_write_file, tg_test_make_tmpdir,
 *    tg_test_remove_tree;
 *  - norms: tg_test_norm_ref (a naive float64 RMSNorm / LayerNorm), and
 *    tg_test_norm_case with tg_test_norm_fn / tg_test_norm_inputs (a norm as
 *    a checked function).
 * Every helper fails the running test (a Check assert) when something it
 * needs goes wrong, so callers need not check what they get back. */
#ifndef TG_TESTS_TESTUTIL_H
#define TG_TESTS_TESTUTIL_H

#include <check.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tapegrad.h"
#include "tapegrad/check.h"

/* ---- running --------------------------------------------------------------- */

/* Runs the suite (CK_NORMAL output; CK_FORK etc. from the environment) and
 * frees it: EXIT_SUCCESS when every test passed. A suite's whole main:
 *   int main(void) { return tg_test_run(make_foo_suite()); } */
int tg_test_run(Suite *suite);

/* Adds to `suite` a test case `name` with the checked fixture setup /
 * teardown (both NULL: none) and the tests listed after them, a
 * NULL-terminated list of START_TEST names. Returns the case, for loop
 * tests (tcase_add_loop_test) or a timeout. */
TCase *tg_test_tcase(Suite *suite, const char *name, void (*setup)(void), void (*teardown)(void), ...);

/* A suite `name` of one test case of the same name, with the fixture and
 * the NULL-terminated tests as tg_test_tcase. */
Suite *tg_test_suite(const char *name, void (*setup)(void), void (*teardown)(void), ...);

/* True when scripts/memcheck.sh runs the test (TG_UNDER_VALGRIND=1): the
 * heaviest sweeps shrink there (valgrind runs code ~30x slower). */
bool tg_test_under_valgrind(void);

/* True in the AddressSanitizer build (make sanitize: code runs ~3x
 * slower): report-only rows at benchmark sizes are left to the plain build. */
bool tg_test_under_sanitizer(void);

/* malloc that fails the test instead of returning NULL (0 bytes: 1). */
void *tg_test_malloc(size_t bytes);

/* ---- tensors --------------------------------------------------------------- */

/* A tensor of dtype and shape holding v[0 .. numel) (read as doubles). */
tg_tensor *tg_test_tensor(tg_ctx *ctx, tg_dtype dtype, int ndim, const int64_t *shape, const double *v);
/* Uniform values in [lo, hi) from the context's RNG (tg_rand). */
tg_tensor *tg_test_rand(tg_ctx *ctx, tg_dtype dtype, int ndim, const int64_t *shape, double lo, double hi);
/* A float64 leaf requiring grad with values from a fixed smooth pattern
 * picked by salt: distinct, in about [-2, 2], none within 0.05 of 0 (away
 * from the kinks of relu, abs, max...). Draws nothing from the RNG. */
tg_tensor *tg_test_smooth_leaf(tg_ctx *ctx, int ndim, const int64_t *shape, int salt);
/* t's values as a malloc'ed array of doubles (free it). */
double *tg_test_values(tg_ctx *ctx, const tg_tensor *t);
/* max_i |a_i - b_i| (NaN if any difference is NaN); same numel asserted. */
double tg_test_max_abs_diff(tg_ctx *ctx, const tg_tensor *a, const tg_tensor *b);

/* ---- asserts ---------------------------------------------------------------- */

/* Asserts t holds n values and t_i matches ref_i for every i:
 *   |t_i - ref_i| <= max(atol, rtol |ref_i|)
 * (an absolute tolerance near 0, a relative one for large values; atol =
 * rtol = tol is "tol relative to max(1, |ref_i|)"); NaN matches NaN and an
 * infinity the same infinity. The message names `what` and the element. */
void tg_test_assert_close(tg_ctx *ctx, const char *what, const tg_tensor *t, const double *ref, int64_t n, double atol,
                          double rtol);
/* The same, between two tensors of the same numel (b is the reference). */
void tg_test_assert_close_tensors(tg_ctx *ctx, const char *what, const tg_tensor *a, const tg_tensor *b, double atol,
                                  double rtol);
/* Asserts the context holds an error of `status` whose message contains
 * each of the NULL-terminated strings, then clears it. */
void tg_test_assert_error(tg_ctx *ctx, tg_status status, ...);
/* Asserts a and b have the same dtype, numel and bits (the message names
 * the first element that differs). */
void tg_test_assert_same_bits(const char *what, const tg_tensor *a, const tg_tensor *b);
/* Asserts text contains each of the NULL-terminated strings. */
void tg_test_assert_contains(const char *text, ...);
/* Asserts a call failed: it returned NULL (got) and left such an error
 * (then cleared), e.g.
 *   tg_test_assert_fails(ctx, tg_matmul(ctx, a, b), TG_ERR_SHAPE, "tg_matmul", "(2, 3)", NULL); */
void tg_test_assert_fails(tg_ctx *ctx, const void *got, tg_status status, ...);

/* ---- fixtures ----------------------------------------------------------------
 * Text files tests/fixtures/<file> written by the scripts beside them: one
 * array a line, "name count v1 v2 ..." (strtod reads nan, inf, -inf), and
 * '#' comment lines. */

/* The array `name` of fixture file `file`: a malloc'ed array (free it) of
 * *n doubles. */
double *tg_test_fixture(const char *file, const char *name, int64_t *n);
/* A tensor of dtype and shape holding the array (numel values exactly);
 * ndim < 0: a 1-d tensor of the whole array. */
tg_tensor *tg_test_fixture_tensor(tg_ctx *ctx, const char *file, const char *name, tg_dtype dtype, int ndim,
                                  const int64_t *shape);
/* A tensor of dtype and shape holding the first numel values of the array
 * "w" (a weighting of an op's outputs, to seed its backward). */
tg_tensor *tg_test_fixture_weights(tg_ctx *ctx, const char *file, tg_dtype dtype, int ndim, const int64_t *shape);
/* tg_test_assert_close of t against the whole array (atol = rtol = tol). */
void tg_test_assert_fixture(tg_ctx *ctx, const tg_tensor *t, const char *file, const char *name, double tol);
/* A one-input op against a fixture of its values and gradient: x is the
 * array "<prefix>.x" in dtype and shape (ndim < 0: 1-d), requiring grad;
 * y = f(x) must match "<prefix>.y", and x's grad after a backward seeded
 * with the first numel(y) values of the array "w" must match
 * "<prefix>.dx", both within tol. Returns y, for checks of its shape. */
tg_tensor *tg_test_op_vs_fixture(tg_ctx *ctx, const char *file, const char *prefix, tg_dtype dtype, int ndim,
                                 const int64_t *shape, tg_gradcheck_fn f, void *user, double tol);

/* ---- gradients ------------------------------------------------------------- */

/* tg_gradcheck of f at in[0 .. n) with opts, asserting that it ran, checked
 * something and passed; a failure names `what`, the mode and the worst
 * element with both derivatives. */
void tg_test_gradcheck(tg_ctx *ctx, const char *what, tg_gradcheck_fn f, void *user, int n, tg_tensor *const *in,
                       tg_gradcheck_opts opts);
/* The op suites' check of an op's backward: tg_test_gradcheck in full mode
 * (every element) over the inputs that require grad, in float64, with
 * h = 1e-6 and |analytic - numeric| <= 1e-7 + 1e-6 |numeric| (tighter than
 * tg_gradcheck's defaults, 1e-5 + 1e-3 |numeric|). */
#define TG_TEST_OP_H 1e-6
#define TG_TEST_OP_ATOL 1e-7
#define TG_TEST_OP_RTOL 1e-6
void tg_test_op_gradcheck(tg_ctx *ctx, const char *what, tg_gradcheck_fn f, void *user, int n, tg_tensor *const *in);
/* One recorded forward of f at in[0 .. n) and a backward seeded with ones
 * into the grads of the inputs that require grad (zeroed first), for tests
 * that assert on those grads (tg_gradcheck works on copies and leaves the
 * caller's grads alone). Returns f's output. */
tg_tensor *tg_test_backward(tg_ctx *ctx, tg_gradcheck_fn f, void *user, int n, tg_tensor *const *in);

/* ---- files ----------------------------------------------------------------- */

/* The whole file, malloc'ed with a terminating NUL (free it); *size gets
 * its length unless size is NULL. */
char *tg_test_read_file(const char *path, size_t *size);
/* Writes n bytes to path (replacing it). */
void tg_test_write_file(const char *path, const void *bytes, size_t n);
/* Makes a fresh folder $TMPDIR/<prefix>-XXXXXX (/tmp without TMPDIR) and
 * writes its path into buf. */
void tg_test_make_tmpdir(char *buf, size_t size, const char *prefix);
/* Removes path and everything below it (no error if it is gone). */
void tg_test_remove_tree(const char *path);

/* ---- norms ----------------------------------------------------------------- */

/* The naive float64 reference of RMSNorm (centered = false) and LayerNorm
 * (centered = true), independent of the library's kernels (plain loops
 * over the formula, long double sums): for rows of C elements of x (N*C
 * values),
 *   xhat = x / sqrt(mean x^2 + eps)                        (RMSNorm)
 *   xhat = (x - mean) / sqrt(mean (x - mean)^2 + eps)      (LayerNorm, biased)
 *   y = xhat * g + b  (g, b may be NULL)
 * Writes xhat and y (either may be NULL). */
void tg_test_norm_ref(bool centered, const double *x, const double *g, const double *b, int64_t N, int64_t C,
                      double eps, double *xhat, double *y);

/* A fused or composed norm op: tg_rmsnorm_fused, tg_layernorm_composed... */
typedef tg_tensor *(*tg_test_norm_op)(tg_ctx *ctx, tg_tensor *x, tg_tensor *gamma, tg_tensor *beta, int ndim_norm,
                                      double eps);
/* A norm op with its options, as the `user` of tg_test_norm_fn. */
typedef struct tg_test_norm_case {
    tg_test_norm_op op;
    int ndim_norm;
    double eps;
    bool affine, bias; /* inputs: x, then gamma (affine), then beta (bias) */
} tg_test_norm_case;
/* The case's op of in[0] with gamma = in[1] when affine and beta = the next
 * input when bias (a tg_gradcheck_fn; user is a tg_test_norm_case). */
tg_tensor *tg_test_norm_fn(tg_ctx *ctx, tg_tensor *const *in, void *user);
/* The case's inputs in dtype, requiring grad, drawn in this order: x of
 * shape uniform in scale * [-1, 1), gamma in [0.5, 1.5), beta in [-1, 1).
 * Returns their count. */
int tg_test_norm_inputs(tg_ctx *ctx, const tg_test_norm_case *c, tg_dtype dtype, int ndim, const int64_t *shape,
                        double scale, tg_tensor **in);

#endif

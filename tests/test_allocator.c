/* Tests of the allocator policy (include/tapegrad/tensor.h): a context made
 * with tg_ctx_new_with_allocator routes every allocation the library makes
 * for it through that allocator -- tensors and the arena, modules and the
 * model, parameter lists, optimizers, metadata, and the buffers of a
 * checkpoint save and load.
 *
 * A recording allocator keeps every block it hands out; each free must name
 * one of them, and at the end none is left (so a block freed with free(),
 * or a malloc'd block handed back to it, fails the test). On glibc builds
 * without a sanitizer, malloc, calloc, realloc and aligned_alloc are also
 * interposed (a test-only wrapper over glibc's __libc_* entry points):
 * while a scenario runs, a call made from tapegrad's own code (the caller's
 * return address lies in the object that holds tg_ctx_new) is counted, and
 * the count must be zero. Calls that libc, libgomp or the recorder make are
 * not tapegrad's and are not counted. free is left alone: it is often
 * reached by a tail call, whose return address is the caller's caller
 * (libgomp frees its team that way, into the op that ran a parallel loop),
 * and a stray free shows in the recorder anyway. Sanitizers and valgrind
 * bring their own malloc, so there only the recorder checks.
 *
 * Then the same scenario runs with the allocator failing at call k, for
 * every k: no crash, no leak, no malloc fallback, and the failure is
 * reported as TG_ERR_OOM. */
#define _GNU_SOURCE /* dladdr */

#include <check.h>
#include <dirent.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tapegrad.h"
#include "testutil.h"

/* ---- malloc interposition ------------------------------------------------ */

#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(memory_sanitizer) || __has_feature(thread_sanitizer)
#define TG_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TG_SANITIZED 1
#endif
#if defined(__GLIBC__) && !defined(TG_SANITIZED)
#define TG_INTERPOSE 1
#else
#define TG_INTERPOSE 0
#endif

/* volatile: the compiler takes malloc and free for builtins that touch no
 * variable of ours, and would otherwise fold these across the calls. */
static volatile int armed;                /* a scenario is running */
static const void *lib_base;              /* where tapegrad's code is loaded */
static volatile int stray_calls;          /* malloc-family calls from tapegrad's code */
static const void *volatile stray_caller; /* the first one's return address */
static volatile int reached;              /* the wrappers below were called */

#if TG_INTERPOSE
extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t size);
extern void __libc_free(void *p); /* glibc's own free takes their blocks */
extern void *__libc_memalign(size_t align, size_t size);

/* Not inlined, so that __builtin_return_address(0) is the caller's. */
#define TG_NOINLINE __attribute__((noinline))

/* Counts a call when it comes from tapegrad's code during a scenario. */
static void note(const void *caller) {
    reached = 1;
    if (!armed) return;
    Dl_info info;
    if (dladdr(caller, &info) && info.dli_fbase == lib_base) {
        if (__atomic_fetch_add(&stray_calls, 1, __ATOMIC_RELAXED) == 0) stray_caller = caller;
    }
}

TG_NOINLINE void *malloc(size_t size) {
    note(__builtin_return_address(0));
    return __libc_malloc(size);
}
TG_NOINLINE void *calloc(size_t n, size_t size) {
    note(__builtin_return_address(0));
    return __libc_calloc(n, size);
}
TG_NOINLINE void *realloc(void *p, size_t size) {
    note(__builtin_return_address(0));
    return __libc_realloc(p, size);
}
TG_NOINLINE void *aligned_alloc(size_t align, size_t size) {
    note(__builtin_return_address(0));
    return __libc_memalign(align, size);
}
/* The recording allocator's own memory, not seen by the counting. */
#define sys_aligned_alloc(align, size) __libc_memalign(align, size)
#define sys_free(p) __libc_free(p)
#else
#define sys_aligned_alloc(align, size) aligned_alloc(align, size)
#define sys_free(p) free(p)
#endif

/* The object that holds function f (ISO C has no function-to-object
 * pointer cast, so the address is copied out). */
static const void *object_of(void (*f)(void)) {
    const void *addr;
    memcpy(&addr, &f, sizeof addr);
    Dl_info info;
    return dladdr(addr, &info) ? info.dli_fbase : NULL;
}

static void arm(void) {
    stray_calls = 0;
    stray_caller = NULL;
    armed = 1;
}

static void disarm(void) { armed = 0; }

/* ---- the recording allocator ---------------------------------------------- */

#define MAX_LIVE 4096

typedef struct recorder {
    int calls;   /* allocations asked for */
    int fail_at; /* the call that fails (1-based); 0: none */
    int frees;
    int bad_frees; /* frees of a block it did not hand out */
    int nlive;
    void *live[MAX_LIVE];
} recorder;

static void *rec_alloc(size_t size, size_t align, void *user) {
    recorder *r = user;
    r->calls++;
    if (r->calls == r->fail_at || r->nlive == MAX_LIVE) return NULL;
    size = (size + align - 1) / align * align;
    void *p = sys_aligned_alloc(align, size ? size : align);
    if (p) r->live[r->nlive++] = p;
    return p;
}

static void rec_free(void *p, void *user) {
    recorder *r = user;
    if (!p) return;
    r->frees++;
    for (int i = r->nlive - 1; i >= 0; i--) {
        if (r->live[i] == p) {
            r->live[i] = r->live[--r->nlive];
            sys_free(p);
            return;
        }
    }
    r->bad_frees++;
}

/* ---- the scenario ------------------------------------------------------- */

static char dir[256];
static char path[300];

static void setup(void) {
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/tg-alloc-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    lib_base = object_of((void (*)(void))tg_ctx_new);
    ck_assert_ptr_nonnull(lib_base);
}

static void teardown(void) {
    unlink(path);
    rmdir(dir);
}

/* fsync made a no-op: the scenario saves once per injected failure, and
 * what it tests is memory, not durability. */
static int no_fsync(int fd, void *user) {
    (void)fd;
    (void)user;
    return 0;
}

/* Everything that allocates, on a context whose allocator is the recorder:
 * a model of every layer kind, its parameter list and a second one grown
 * past its first capacity, AdamW (amsgrad) and SGD (momentum) trained a few
 * steps with clipping, metadata grown and replaced, a checkpoint with the
 * optimizer state saved and loaded back, then everything freed. Returns the
 * context's status at the end (TG_ERR_OOM when it could not be made), and
 * its message in msg. */
static tg_status scenario(recorder *r, char msg[256]) {
    tg_allocator alloc = {rec_alloc, rec_free, r};
    arm();
    tg_ctx *ctx = tg_ctx_new_with_allocator(7, &alloc);
    if (!ctx) {
        disarm();
        snprintf(msg, 256, "tg_ctx_new_with_allocator: out of memory");
        return TG_ERR_OOM;
    }
    /* If an add fails, the model frees the layer and the context is in
     * error, so the pointers below are not used again. */
    const int64_t width[1] = {16};
    tg_model model = {0};
    tg_embedding_layer *emb = tg_embedding_layer_new(ctx, "emb", 10, 8, TG_F32);
    tg_model_add(ctx, &model, TG_MODULE(emb));
    tg_linear *fc1 = tg_linear_new(ctx, "fc1", 8, 16, true, TG_F32);
    tg_model_add(ctx, &model, TG_MODULE(fc1));
    tg_rmsnorm *norm = tg_rmsnorm_new(ctx, "norm", 1, width, 1e-6, true, false, TG_F32);
    tg_model_add(ctx, &model, TG_MODULE(norm));
    tg_layernorm *ln = tg_layernorm_new(ctx, "ln", 1, width, 1e-5, true, true, TG_F32);
    tg_model_add(ctx, &model, TG_MODULE(ln));
    tg_linear *fc2 = tg_linear_new(ctx, "fc2", 16, 4, true, TG_F32);
    tg_model_add(ctx, &model, TG_MODULE(fc2));
    tg_params params = {0};
    tg_model_params(ctx, &model, &params);
    tg_params extra = {0};
    for (int i = 0; i < 20 && tg_ok(ctx); i++) {
        char name[16];
        snprintf(name, sizeof name, "t%d", i);
        tg_params_add(ctx, &extra, "extra", name, tg_persist(ctx, tg_zeros(ctx, TG_F32, TG_SHAPE(3))), false);
    }

    tg_adam_opts ao = tg_adamw_defaults();
    ao.amsgrad = true;
    tg_optim *adam = tg_adamw_new(ctx, &params, &ao);
    tg_sgd_opts so = tg_sgd_defaults(0.05);
    so.momentum = 0.9;
    tg_optim *sgd = tg_sgd_new(ctx, &params, &so);
    const int64_t idx[6] = {1, 3, 5, 7, 9, 0};
    const int64_t targets[6] = {0, 1, 2, 3, 0, 1};
    for (int step = 0; step < 4 && tg_ok(ctx); step++) {
        tg_tensor *x = tg_embedding_layer_forward(ctx, emb, TG_SHAPE(6), idx);
        x = tg_relu(ctx, tg_rmsnorm_forward(ctx, norm, tg_linear_forward(ctx, fc1, x)));
        x = tg_linear_forward(ctx, fc2, tg_layernorm_forward(ctx, ln, x));
        tg_tensor *loss = tg_cross_entropy(ctx, x, targets, NULL);
        tg_optim *o = step % 2 ? sgd : adam;
        tg_optim_zero_grad(ctx, o);
        tg_backward(ctx, loss);
        tg_clip_grad_norm(ctx, &params, 1.0);
        tg_optim_step(ctx, o);
        tg_ctx_reset(ctx);
    }

    tg_meta meta = {0};
    tg_meta_set(ctx, &meta, "run", "allocator test");
    tg_meta_set(ctx, &meta, "run", "replaced");
    for (int i = 0; i < 10; i++) {
        char key[16];
        snprintf(key, sizeof key, "k%d", i);
        tg_meta_set_u64(ctx, &meta, key, (uint64_t)i * 1000);
    }
    tg_meta_set_rng(ctx, &meta);
    tg_ckpt_io io = {.fsync = no_fsync};
    tg_ckpt_options opt = {.io = &io};
    tg_ckpt_save_ex(ctx, path, &params, tg_optim_state(adam), &meta, &opt);
    tg_meta got = {0};
    tg_ckpt_load(ctx, path, &params, tg_optim_state(adam), &got);
    tg_optim_sync_state(ctx, adam);
    tg_meta_get_rng(ctx, &got);

    tg_status st = tg_status_of(ctx);
    snprintf(msg, 256, "%s", tg_error_message(ctx));
    tg_meta_free(&got);
    tg_meta_free(&meta);
    tg_optim_free(NULL, sgd); /* without a context: its state goes with the context */
    tg_optim_free(ctx, adam);
    tg_params_free(&extra);
    tg_params_free(&params);
    tg_model_free(ctx, &model);
    tg_ctx_free(ctx);
    disarm();
    return st;
}

/* Appends the recorder's state to a failure message. */
#define REC_MSG(r) "calls %d, frees %d, bad frees %d, live %d", (r).calls, (r).frees, (r).bad_frees, (r).nlive

START_TEST(test_every_allocation_through_the_allocator) {
    recorder r = {0};
    char msg[256];
    tg_status st = scenario(&r, msg);
    ck_assert_msg(st == TG_OK, "the scenario failed: %s", msg);
    /* Every layer kind, list, optimizer, metadata and checkpoint buffer
     * was made: far more than the context and one arena chunk. */
    ck_assert_msg(r.calls > 100, REC_MSG(r));
    ck_assert_msg(r.bad_frees == 0, REC_MSG(r));
    ck_assert_msg(r.nlive == 0, REC_MSG(r));
    ck_assert_int_eq(r.frees, r.calls);
    ck_assert_msg(stray_calls == 0,
                  "%d malloc-family calls from tapegrad's code bypassed the allocator (the first returns to "
                  "offset 0x%tx of its object: addr2line -f -e <binary> 0x%tx)",
                  stray_calls, (const char *)stray_caller - (const char *)lib_base,
                  (const char *)stray_caller - (const char *)lib_base);
}
END_TEST

Suite *make_allocator_suite(void);

#if TG_INTERPOSE
/* The interposition sees the calls it must see: malloc-family calls from
 * code in the same object as the library (this test, when the library is
 * linked in statically). Skipped when the library is a shared object, and
 * under valgrind, whose malloc replaces ours. */
START_TEST(test_interposition_counts) {
    if (object_of((void (*)(void))make_allocator_suite) != lib_base) return;
    reached = 0;
    void *volatile probe = malloc(1);
    free(probe);
    if (!reached) return;
    arm();
    void *volatile a = malloc(16);
    void *volatile b = calloc(2, 8);
    void *volatile c = realloc(NULL, 16);
    void *volatile d = aligned_alloc(64, 64);
    disarm();
    free(a);
    free(b);
    free(c);
    free(d);
    ck_assert_int_eq(stray_calls, 4);
}
END_TEST
#endif

START_TEST(test_failure_at_every_call) {
    recorder clean = {0};
    char msg[256];
    ck_assert(scenario(&clean, msg) == TG_OK);
    for (int k = 1; k <= clean.calls; k++) {
        recorder r = {0};
        r.fail_at = k;
        tg_status st = scenario(&r, msg);
        ck_assert_msg(st == TG_ERR_OOM && strstr(msg, "out of memory"), "failure at call %d of %d: %s (%s)", k,
                      clean.calls, tg_status_name(st), msg);
        ck_assert_msg(r.bad_frees == 0 && r.nlive == 0, REC_MSG(r));
        ck_assert_msg(stray_calls == 0, "failure at call %d: %d malloc-family calls from tapegrad's code", k,
                      stray_calls);
    }
}
END_TEST

Suite *make_allocator_suite(void) {
    Suite *s = suite_create("allocator");
    TCase *tc = tcase_create("policy");
    tcase_set_timeout(tc, 600);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_every_allocation_through_the_allocator);
#if TG_INTERPOSE
    tcase_add_test(tc, test_interposition_counts);
#endif
    tcase_add_test(tc, test_failure_at_every_call);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tg_test_run(make_allocator_suite()); }

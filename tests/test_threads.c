/* The default thread count (tensor/threads.c): TG_THREADS wins, otherwise
 * the CPUs this process may use -- its affinity mask, fewer under a cgroup
 * quota -- never the machine's core count; explicit counts stay as given. */
#define _GNU_SOURCE /* sched_setaffinity, CPU_* */
#include "tensor/internal.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

/* Without OpenMP every count is 1, and the tests below check only that. */
static bool with_openmp(void) {
    tg_ctx *ctx = tg_ctx_new(1);
    tg_set_threads(ctx, 2);
    const bool on = tg_threads(ctx) == 2;
    tg_ctx_free(ctx);
    return on;
}
#define WITH_OMP with_openmp()

/* The text of cpu.max (cgroup v2; v1's two files are joined the same
 * way): "max" is no limit, a quota rounds up to whole CPUs. */
START_TEST(test_quota_parse) {
    ck_assert_int_eq(tg_cpus_from_quota("max 100000\n"), 0);
    ck_assert_int_eq(tg_cpus_from_quota("100000 100000\n"), 1);
    ck_assert_int_eq(tg_cpus_from_quota("150000 100000"), 2);
    ck_assert_int_eq(tg_cpus_from_quota("50000 100000"), 1);
    ck_assert_int_eq(tg_cpus_from_quota("400000 100000"), 4);
    ck_assert_int_eq(tg_cpus_from_quota("-1 100000"), 0); /* v1: no limit */
    ck_assert_int_eq(tg_cpus_from_quota("100000 0"), 0);
    ck_assert_int_eq(tg_cpus_from_quota("garbage"), 0);
    ck_assert_int_eq(tg_cpus_from_quota("12x 100000"), 0);
    ck_assert_int_eq(tg_cpus_from_quota(""), 0);
    ck_assert_int_eq(tg_cpus_from_quota(NULL), 0);
}
END_TEST

/* TG_THREADS=N sets the default (and a new context's count); a value that
 * is not a positive integer is ignored. */
START_TEST(test_env_override) {
    const char *saved = getenv("TG_THREADS");
    char *keep = saved ? strdup(saved) : NULL;
    unsetenv("TG_THREADS");
    const int natural = tg_default_threads();
    ck_assert_int_ge(natural, 1);

    setenv("TG_THREADS", "3", 1);
    ck_assert_int_eq(tg_default_threads(), WITH_OMP ? 3 : 1);
    tg_ctx *ctx = tg_ctx_new(1);
    ck_assert_int_eq(tg_threads(ctx), WITH_OMP ? 3 : 1);
    tg_set_threads(ctx, 2); /* explicit wins over the environment */
    ck_assert_int_eq(tg_threads(ctx), WITH_OMP ? 2 : 1);
    tg_set_threads(ctx, 0); /* back to the default */
    ck_assert_int_eq(tg_threads(ctx), WITH_OMP ? 3 : 1);
    tg_ctx_free(ctx);

    const char *bad[] = {"0", "-2", "two", "2x", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("TG_THREADS", bad[i], 1);
        ck_assert_msg(tg_default_threads() == natural, "TG_THREADS='%s' gave %d, not %d", bad[i], tg_default_threads(),
                      natural);
    }
    if (keep) setenv("TG_THREADS", keep, 1);
    else unsetenv("TG_THREADS");
    free(keep);
}
END_TEST

/* Pinned to one CPU (as taskset -c 0 would), the default is 1 thread,
 * whatever the machine has; the old mask restores the old default. */
START_TEST(test_affinity) {
    const char *saved = getenv("TG_THREADS");
    char *keep = saved ? strdup(saved) : NULL;
    unsetenv("TG_THREADS");
    cpu_set_t old;
    ck_assert_int_eq(sched_getaffinity(0, sizeof old, &old), 0);
    const int before = tg_default_threads();
    ck_assert_int_le(before, WITH_OMP ? CPU_COUNT(&old) : 1);
    int first = 0;
    while (!CPU_ISSET(first, &old)) first++;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    ck_assert_int_eq(sched_setaffinity(0, sizeof one, &one), 0);
    ck_assert_int_eq(tg_default_threads(), 1);
    tg_ctx *ctx = tg_ctx_new(1);
    ck_assert_int_eq(tg_threads(ctx), 1);
    tg_ctx_free(ctx);
    ck_assert_int_eq(sched_setaffinity(0, sizeof old, &old), 0);
    ck_assert_int_eq(tg_default_threads(), before);
    if (keep) setenv("TG_THREADS", keep, 1);
    free(keep);
}
END_TEST

Suite *make_threads_suite(void) {
    return tg_test_suite("threads", NULL, NULL, test_quota_parse, test_env_override, test_affinity, NULL);
}

int main(void) { return tg_test_run(make_threads_suite()); }

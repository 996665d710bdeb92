/* The thread count: what tg_set_threads(ctx, 0) picks, and why.
 *
 * The default is the number of CPUs this process may actually use, not the
 * number the machine has: a process pinned to 2 of 64 cores (taskset,
 * numactl, a batch scheduler) or a container limited to 1.5 CPUs by its
 * cgroup quota gets 2 threads, not 64. More threads than that only queue
 * behind each other, and every parallel region then waits for the thread
 * that is not running (the bench's --contend rows show how much).
 *
 *   TG_THREADS=N (N >= 1)       wins over everything below
 *   otherwise  min of:  the CPUs in the affinity mask (sched_getaffinity),
 *                       the cgroup CPU quota, rounded up: cpu.max
 *                       "quota period" (cgroup v2) or cpu.cfs_quota_us /
 *                       cpu.cfs_period_us (v1), the smallest along the
 *                       path from the process's cgroup to the root,
 *                       OMP_NUM_THREADS when it is set (the usual cap
 *                       of a job's threads; its first entry)
 * The threads are the task pool's (tensor/parallel.h); the library makes no
 * OpenMP call. Built without TG_HAVE_OPENMP (the TG_OPENMP option, which
 * switches threading on) every count is 1. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "tensor/internal.h"

#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int tg_cpus_from_quota(const char *cpu_max) {
    char q[32];
    long long quota, period;
    if (!cpu_max || sscanf(cpu_max, "%31s %lld", q, &period) != 2 || period <= 0) return 0;
    if (!strcmp(q, "max")) return 0;
    char *end;
    quota = strtoll(q, &end, 10);
    if (*end || quota <= 0) return 0; /* v1 writes -1 for "no limit" */
    long long n = (quota + period - 1) / period;
    return n > INT_MAX ? INT_MAX : (int)n;
}

#ifdef TG_HAVE_OPENMP /* the CPU limits matter only when threads are built in */
/* The first line of a small file, into buf; false if unreadable. */
static bool read_line(const char *path, char *buf, size_t size) {
    FILE *f = fopen(path, "r");
    if (!f) return false;
    bool ok = fgets(buf, (int)size, f) != NULL;
    fclose(f);
    return ok;
}

/* The quota of the cgroup at `dir` and of every ancestor up to `top`, the
 * smallest (0: none). v2 reads cpu.max; v1 the two cfs files. */
static int quota_along(char *dir, size_t top, bool v2) {
    int best = 0;
    for (;;) {
        char path[4352], a[64], b[64];
        int n = 0;
        if (v2) {
            snprintf(path, sizeof path, "%s/cpu.max", dir);
            if (read_line(path, a, sizeof a)) n = tg_cpus_from_quota(a);
        } else {
            snprintf(path, sizeof path, "%s/cpu.cfs_quota_us", dir);
            if (read_line(path, a, sizeof a)) {
                snprintf(path, sizeof path, "%s/cpu.cfs_period_us", dir);
                if (read_line(path, b, sizeof b)) {
                    char both[160];
                    a[strcspn(a, "\n")] = 0;
                    snprintf(both, sizeof both, "%s %s", a, b);
                    n = tg_cpus_from_quota(both);
                }
            }
        }
        if (n > 0 && (best == 0 || n < best)) best = n;
        char *slash = strrchr(dir, '/');
        if (!slash || (size_t)(slash - dir) < top) break;
        *slash = 0;
    }
    return best;
}

/* The cgroup CPU quota of this process in CPUs, rounded up; 0 when there
 * is none (or no cgroup file system). Finds the cgroup's directory from
 * /proc/self/cgroup ("0::/path" for v2, "N:cpu,cpuacct:/path" for v1) and
 * the mount points from /proc/self/mountinfo. */
static int cgroup_cpu_limit(void) {
    char v2path[1024] = "", v1path[1024] = "", line[4096];
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f) return 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        *c1 = *c2 = 0;
        const char *ctrl = c1 + 1, *path = c2 + 1;
        if (!strcmp(line, "0") && !*ctrl) {
            snprintf(v2path, sizeof v2path, "%s", path);
        } else {
            char list[256];
            snprintf(list, sizeof list, ",%s,", ctrl);
            if (strstr(list, ",cpu,")) snprintf(v1path, sizeof v1path, "%s", path);
        }
    }
    fclose(f);
    if (!(f = fopen("/proc/self/mountinfo", "r"))) return 0;
    int best = 0;
    while (fgets(line, sizeof line, f)) {
        /* id parent major:minor root mountpoint options... - fstype source superoptions */
        char root[1024], mnt[1024], fstype[64], super[512] = "";
        const char *dash = strstr(line, " - ");
        if (!dash || sscanf(line, "%*s %*s %*s %1023s %1023s", root, mnt) != 2 ||
            sscanf(dash + 3, "%63s %*s %511s", fstype, super) < 1)
            continue;
        bool v2 = !strcmp(fstype, "cgroup2");
        char opts[520];
        snprintf(opts, sizeof opts, ",%s,", super);
        bool v1 = !strcmp(fstype, "cgroup") && strstr(opts, ",cpu,");
        const char *path = v2 ? v2path : v1 ? v1path : NULL;
        if (!path || !*path) continue;
        /* the cgroup's path is relative to the mount's root */
        size_t rl = strcmp(root, "/") ? strlen(root) : 0;
        if (rl && strncmp(path, root, rl)) continue;
        char dir[4096];
        int n = snprintf(dir, sizeof dir, "%s%s", mnt, path + rl);
        if (n < 0 || (size_t)n >= sizeof dir) continue;
        size_t len = strlen(dir);
        while (len > strlen(mnt) && dir[len - 1] == '/') dir[--len] = 0;
        int q = quota_along(dir, strlen(mnt), v2);
        if (q > 0 && (best == 0 || q < best)) best = q;
    }
    fclose(f);
    return best;
}

#endif

int tg_default_threads(void) {
#ifdef TG_HAVE_OPENMP
    const char *env = getenv("TG_THREADS");
    if (env && *env) {
        char *end;
        long n = strtol(env, &end, 10);
        if (!*end && n >= 1) return n > 4096 ? 4096 : (int)n;
    }
    int n = 0;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
    if (n < 1) n = (int)sysconf(_SC_NPROCESSORS_ONLN);
    int q = cgroup_cpu_limit();
    if (q > 0 && q < n) n = q;
    /* OMP_NUM_THREADS: "N" or a list "N,M,..." whose first entry is the
     * outer level's count, as OpenMP reads it */
    const char *omp = getenv("OMP_NUM_THREADS");
    if (omp && *omp) {
        char *end;
        long m = strtol(omp, &end, 10);
        if (end != omp && (*end == 0 || *end == ',') && m >= 1 && m < n) n = (int)m;
    }
    return n < 1 ? 1 : n;
#else
    return 1;
#endif
}

void tg_set_threads(tg_ctx *ctx, int n) {
    if (!ctx) return;
#ifdef TG_HAVE_OPENMP
    ctx->threads = n > 0 ? n : tg_default_threads();
#else
    (void)n;
    ctx->threads = 1;
#endif
}

int tg_threads(const tg_ctx *ctx) { return ctx ? ctx->threads : 1; }

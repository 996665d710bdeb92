/* Keeping measurements honest on a shared machine: waiting for thread
 * pools to go idle (bn_settle), measuring how much CPU other jobs took
 * (bn_machine_busy, bn_tasks_cpu), and a spinning process for --contend. */
#define _GNU_SOURCE /* sched_setaffinity, CPU_*, gettid via syscall */
#include "bench.h"

#include <dirent.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

int bn_tid(void) { return (int)syscall(SYS_gettid); }

double bn_tasks_cpu(int pid, int skip_tid) {
    char dir[64];
    if (pid > 0) snprintf(dir, sizeof dir, "/proc/%d/task", pid);
    else snprintf(dir, sizeof dir, "/proc/self/task");
    DIR *d = opendir(dir);
    if (!d) return 0;
    double ns = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || (skip_tid && atoi(e->d_name) == skip_tid)) continue;
        char path[320];
        if (snprintf(path, sizeof path, "%s/%s/schedstat", dir, e->d_name) >= (int)sizeof path) continue;
        FILE *f = fopen(path, "r");
        if (!f) continue; /* the thread just ended */
        unsigned long long run = 0;
        if (fscanf(f, "%llu", &run) == 1) ns += (double)run;
        fclose(f);
    }
    closedir(d);
    return ns * 1e-9;
}

double bn_machine_busy(void) {
    FILE *f = fopen("/proc/stat", "r");
    if (!f) return -1;
    unsigned long long v[8] = {0};
    int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6],
                   &v[7]);
    fclose(f);
    if (n < 8) return -1;
    /* user nice system idle iowait irq softirq steal: all but idle, iowait */
    const double ticks = (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]);
    return ticks / (double)sysconf(_SC_CLK_TCK);
}

/* CPU seconds of the processes in pids[0..n) and of this process's threads
 * other than `self`. */
static double others_cpu(const int *pids, int n, int self) {
    double s = bn_tasks_cpu(0, self);
    for (int i = 0; i < n; i++)
        if (pids[i] > 0) s += bn_tasks_cpu(pids[i], 0);
    return s;
}

double bn_settle(const int *pids, int n, double max_s) {
    const double window = 0.020, idle = 0.05 * window;
    const int self = bn_tid();
    const double t0 = bn_now();
    double c0 = others_cpu(pids, n, self);
    for (;;) {
        bn_nap_ms((long)(window * 1e3));
        const double c1 = others_cpu(pids, n, self), waited = bn_now() - t0;
        if (c1 - c0 < idle) return waited - window;
        if (waited > max_s) return -waited;
        c0 = c1;
    }
}

int bn_spinner_start(int cpu) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        if (sched_setaffinity(0, sizeof set, &set) != 0) _exit(1);
        volatile unsigned long long spin = 0;
        for (;;) spin++;
    }
    return (int)pid;
}

void bn_spinner_stop(int pid) {
    if (pid <= 0) return;
    kill(pid, SIGKILL);
    int status;
    waitpid(pid, &status, 0);
}

int bn_last_cpu(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return 0;
    for (int c = CPU_SETSIZE - 1; c >= 0; c--)
        if (CPU_ISSET(c, &set)) return c;
    return 0;
}

int bn_cpu_count(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return (int)sysconf(_SC_NPROCESSORS_ONLN);
    return CPU_COUNT(&set);
}

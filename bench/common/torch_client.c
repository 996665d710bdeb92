/* PyTorch as a subprocess: `python3 torch_bench.py --server --threads N`
 * reads one command per line on stdin and answers each with one line of
 * JSON on stdout. Keeping one server alive lets every PyTorch case run right
 * after the matching tapegrad case, so both see the same machine load. */
#define _POSIX_C_SOURCE 200809L
#include "bench.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Reads one line (without the newline) into buf; false on EOF, error or
 * after timeout_s seconds without data. */
static bool read_line(int fd, char *buf, size_t size, double timeout_s) {
    size_t n = 0;
    double deadline = bn_now() + timeout_s;
    while (n + 1 < size) {
        struct pollfd p = {fd, POLLIN, 0};
        int ms = (int)((deadline - bn_now()) * 1000);
        if (ms <= 0) return false;
        int rc = poll(&p, 1, ms);
        if (rc < 0 && errno == EINTR) continue;
        if (rc <= 0) return false;
        char c;
        ssize_t k = read(fd, &c, 1);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return false;
        if (c == '\n') break;
        buf[n++] = c;
    }
    buf[n] = 0;
    return true;
}

static bool write_all(int fd, const char *s, size_t n) {
    while (n) {
        ssize_t k = write(fd, s, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return false;
        s += k, n -= (size_t)k;
    }
    return true;
}

void bn_torch_start(bn_torch *t, const char *python, const char *script, int threads, double budget_s, bool cpu_clock,
                    const char *omp_wait) {
    memset(t, 0, sizeof *t);
    snprintf(t->omp_wait, sizeof t->omp_wait, "%s", omp_wait ? omp_wait : "");
    t->pid = -1, t->to_fd = -1, t->from_fd = -1;
    if (access(python, X_OK) != 0) {
        snprintf(t->why, sizeof t->why, "%s not found", python);
        return;
    }
    if (access(script, R_OK) != 0) {
        snprintf(t->why, sizeof t->why, "%s not found", script);
        return;
    }
    int in[2], out[2];
    if (pipe(in) != 0) {
        snprintf(t->why, sizeof t->why, "pipe: %s", strerror(errno));
        return;
    }
    if (pipe(out) != 0) {
        close(in[0]), close(in[1]);
        snprintf(t->why, sizeof t->why, "pipe: %s", strerror(errno));
        return;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(in[0]), close(in[1]), close(out[0]), close(out[1]);
        snprintf(t->why, sizeof t->why, "fork: %s", strerror(errno));
        return;
    }
    if (pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        close(in[0]), close(in[1]), close(out[0]), close(out[1]);
        char thr[16], bud[32];
        snprintf(thr, sizeof thr, "%d", threads);
        setenv("OPENBLAS_NUM_THREADS", thr, 1);
        if (omp_wait) setenv("OMP_WAIT_POLICY", omp_wait, 1);
        else unsetenv("OMP_WAIT_POLICY");
        snprintf(bud, sizeof bud, "%g", budget_s);
        char *argv[] = {(char *)python,
                        (char *)script,
                        "--server",
                        "--threads",
                        thr,
                        "--budget",
                        bud,
                        "--clock",
                        cpu_clock ? "cpu" : "wall",
                        NULL};
        execv(python, argv);
        _exit(127);
    }
    close(in[0]), close(out[1]);
    t->pid = (int)pid;
    t->to_fd = in[1];
    t->from_fd = out[0];
    signal(SIGPIPE, SIG_IGN);
    char line[1024];
    /* importing torch takes a few seconds on a busy machine */
    if (!read_line(t->from_fd, line, sizeof line, 120.0) || !strstr(line, "\"ready\"")) {
        snprintf(t->why, sizeof t->why, "%s %s could not import torch (see its stderr above)", python, script);
        bn_torch_stop(t);
        return;
    }
    const char *v = strstr(line, "\"torch\": \"");
    if (v) {
        v += strlen("\"torch\": \"");
        size_t k = strcspn(v, "\"");
        if (k >= sizeof t->version) k = sizeof t->version - 1;
        memcpy(t->version, v, k);
        t->version[k] = 0;
    }
    double thr = bn_json_number(line, "threads");
    t->threads = thr == thr ? (int)thr : 0;
    t->ok = true;
}

bool bn_torch_call(bn_torch *t, const char *cmd, char *reply, size_t size) {
    if (!t->ok) return false;
    char buf[512];
    int n = snprintf(buf, sizeof buf, "%s\n", cmd);
    if (n < 0 || (size_t)n >= sizeof buf || !write_all(t->to_fd, buf, (size_t)n) ||
        !read_line(t->from_fd, reply, size, 600.0)) {
        snprintf(t->why, sizeof t->why, "the PyTorch server stopped answering (at '%s')", cmd);
        bn_torch_stop(t);
        return false;
    }
    return strstr(reply, "\"error\"") == NULL;
}

double bn_json_number(const char *json, const char *key) {
    char pat[96];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(json, pat);
    if (!p) return NAN;
    p += strlen(pat);
    char *end;
    double v = strtod(p, &end);
    return end == p ? NAN : v;
}

void bn_torch_stop(bn_torch *t) {
    if (t->to_fd >= 0) close(t->to_fd); /* EOF: the server exits */
    if (t->from_fd >= 0) close(t->from_fd);
    t->to_fd = t->from_fd = -1;
    if (t->pid > 0) {
        int status;
        double deadline = bn_now() + 10;
        while (waitpid(t->pid, &status, WNOHANG) == 0) {
            if (bn_now() > deadline) {
                kill(t->pid, SIGKILL);
                waitpid(t->pid, &status, 0);
                break;
            }
            bn_nap_ms(10);
        }
    }
    t->pid = -1;
    t->ok = false;
}

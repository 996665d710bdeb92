/* The handle of a data-parallel run (tapegrad/dist.h): joining the world,
 * comparing the ranks' builds, the deadline, splitting a batch and drawing
 * its rows, the settings and the stats. The collectives are elsewhere:
 * data_parallel/head.c (the head exchange that begins each), data_parallel/collectives.c
 * (all-reduce and broadcast), data_parallel/overlap.c (the all-reduce that runs
 * during backward), data_parallel/shard.c (the optimizer state split over ranks). */
#define _POSIX_C_SOURCE 200809L

#include "data_parallel/internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tensor/gemm.h"
#if defined(__GLIBC__)
#include <gnu/libc-version.h>
#endif

#ifndef TG_DIST_VERSION /* the project's version, from cmake/dist.cmake */
#define TG_DIST_VERSION "unknown"
#endif

#define DEFAULT_BUCKET_BYTES ((size_t)4 << 20)
#define MIN_BUCKET_BYTES ((size_t)64)
#define MAX_BUCKET_BYTES ((size_t)1 << 30)
/* The deadline of a collective when TG_DIST_TIMEOUT does not set one: far
 * above any wait of a working run (docs/distributed.md: the longest waits
 * measured are rank 0's evaluations and saves, seconds), far below "forever". */
#define DEFAULT_TIMEOUT 600.0

double tg_dist_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void *tg_dist_mem(tg_dist *d, size_t size) { return d->alloc.alloc(size ? size : 1, TG_ALIGN, d->alloc.user); }
void tg_dist_mem_free(tg_dist *d, void *p) {
    if (p) d->alloc.free(p, d->alloc.user);
}

uint64_t tg_fnv1a(uint64_t h, const void *bytes, size_t n) {
    const unsigned char *p = bytes;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

/* What decides the bits of a rank's gradient beyond its inputs: the
 * library's version, the instruction sets it was compiled for (-march: the
 * GEMM's micro-kernels, AVX paths in the optimizer and the norms), the
 * compiler (whether it fuses a * b + c), the C library (exp, pow) and the
 * autocast dtype. Ranks compare it at the start (same_build). */
static void make_fingerprint(tg_ctx *ctx, char *buf, size_t size) {
    const char *isa = ""
#if defined(__x86_64__)
                      "x86-64"
#elif defined(__aarch64__)
                      "aarch64"
#endif
#if defined(__AVX512F__)
                      " avx512f"
#endif
#if defined(__AVX512BF16__)
                      " avx512bf16"
#endif
#if defined(__AVX2__)
                      " avx2"
#endif
#if defined(__FMA__)
                      " fma"
#endif
#if defined(__AVX__)
                      " avx"
#endif
#if defined(__F16C__)
                      " f16c"
#endif
        ;
    const char *compiler =
#if defined(__clang__)
        "clang " __clang_version__;
#elif defined(__GNUC__)
        "gcc " __VERSION__;
#else
        "an unknown compiler";
#endif
    const char *libc =
#if defined(__GLIBC__)
        gnu_get_libc_version();
#else
        "unknown";
#endif
    snprintf(buf, size, "tapegrad %s, GEMM kernels %s, isa %s, %s, C library %s, autocast %s", TG_DIST_VERSION,
             tg_gemm_kernel_name(), isa[0] ? isa : "generic", compiler, libc, tg_dtype_name(tg_ctx_autocast(ctx)));
}

/* True on every rank when every rank's fingerprint is rank 0's; else false
 * everywhere, with an error naming rank 0's and the first other one's. */
static bool same_build(tg_ctx *ctx, tg_dist *d) {
    char err[512];
    const size_t n = sizeof d->fingerprint;
    uint64_t h = tg_fnv1a(TG_FNV_OFFSET, d->fingerprint, strlen(d->fingerprint)), v[2];
    v[0] = h, v[1] = ~h;
    tg_comm_begin(d->comm, "tg_dist_init");
    if (!tg_comm_min_u64(d->comm, v, 2, err, sizeof err)) goto failed;
    if (v[0] == ~v[1]) return true;
    /* which rank differs from rank 0, and how */
    char theirs[sizeof d->fingerprint], first[sizeof d->fingerprint];
    memcpy(theirs, d->fingerprint, n);
    if (!tg_comm_bcast(d->comm, theirs, (int)n, 0, err, sizeof err)) goto failed;
    uint64_t who = strncmp(theirs, d->fingerprint, n) ? (uint64_t)d->rank : (uint64_t)d->size;
    if (!tg_comm_min_u64(d->comm, &who, 1, err, sizeof err)) goto failed;
    memcpy(first, d->fingerprint, n);
    if (who >= (uint64_t)d->size || !tg_comm_bcast(d->comm, first, (int)n, (int)who, err, sizeof err)) goto failed;
    theirs[n - 1] = first[n - 1] = '\0';
    tg_error(ctx, TG_ERR_STATE, "tg_dist_init",
             "the ranks run different builds, whose results would match no one-process run: rank 0 runs %s; "
             "rank %d runs %s (build every rank alike; on unlike CPUs with -DTG_NATIVE=OFF)",
             theirs, (int)who, first);
    return false;
failed:
    tg_error(ctx, TG_ERR_IO, "tg_dist_init", "comparing the ranks' builds: %s", err);
    return false;
}

tg_dist *tg_dist_init(tg_ctx *ctx, int *argc, char ***argv) {
    if (!tg_ok(ctx)) return NULL;
    tg_dist *d = ctx->alloc.alloc(sizeof *d, TG_ALIGN, ctx->alloc.user);
    if (!d) {
        tg_error(ctx, TG_ERR_OOM, __func__, "out of memory");
        return NULL;
    }
    memset(d, 0, sizeof *d);
    d->alloc = ctx->alloc;
    d->bucket_bytes = DEFAULT_BUCKET_BYTES;
    char err[512];
    d->comm = tg_comm_open(&d->alloc, argc, argv, err, sizeof err);
    if (!d->comm) {
        tg_error(ctx, TG_ERR_STATE, __func__, "%s", err);
        tg_dist_mem_free(d, d);
        return NULL;
    }
    d->rank = tg_comm_rank(d->comm);
    d->size = tg_comm_size(d->comm);
    d->counts = tg_dist_mem(d, 8 * (size_t)d->size * sizeof *d->counts);
    d->heads = tg_dist_mem(d, (size_t)d->size * TG_HEAD_RECORD);
    d->batch = tg_comm_batch_new(d->comm, &d->alloc);
    if (!d->counts || !d->heads || !d->batch) {
        tg_error(ctx, TG_ERR_OOM, __func__, "out of memory for %d processes", d->size);
        tg_dist_free(d);
        return NULL;
    }
    /* the deadline, then the builds compared (itself under the deadline) */
    double timeout = DEFAULT_TIMEOUT;
    const char *env = getenv("TG_DIST_TIMEOUT");
    if (env && *env) {
        char *end;
        timeout = strtod(env, &end);
        if (*end || !isfinite(timeout) || timeout < 0) {
            tg_error(ctx, TG_ERR_VALUE, __func__, "TG_DIST_TIMEOUT='%s': want seconds >= 0 (0: no deadline)", env);
            tg_dist_free(d);
            return NULL;
        }
    }
    tg_comm_set_timeout(d->comm, timeout);
    make_fingerprint(ctx, d->fingerprint, sizeof d->fingerprint);
    if (!same_build(ctx, d)) {
        tg_dist_free(d);
        return NULL;
    }
    return d;
}

void tg_dist_free(tg_dist *d) {
    if (!d) return;
    tg_dist_mem_free(d, d->buf);
    tg_dist_mem_free(d, d->recv);
    tg_dist_mem_free(d, d->heads);
    tg_dist_mem_free(d, d->counts);
    tg_dist_mem_free(d, d->segs);
    tg_comm_batch_free(d->batch, &d->alloc);
    tg_dist_slots_free(d);
    tg_comm_close(d->comm, &d->alloc);
    tg_dist_mem_free(d, d);
}

int tg_dist_rank(const tg_dist *d) { return d ? d->rank : 0; }
int tg_dist_size(const tg_dist *d) { return d ? d->size : 1; }
int tg_dist_local_size(const tg_dist *d) { return d ? tg_comm_local_size(d->comm) : 1; }
const char *tg_dist_backend(const tg_dist *d) { return d ? tg_comm_backend(d->comm) : "one process: no tg_dist"; }
const char *tg_dist_fingerprint(const tg_dist *d) { return d ? d->fingerprint : ""; }

bool tg_dist_set_timeout(tg_ctx *ctx, tg_dist *d, double seconds) {
    if (!tg_ok(ctx)) return false;
    if (!d) {
        tg_null_error(ctx, __func__, "d");
        return false;
    }
    if (!isfinite(seconds) || seconds < 0) {
        tg_error(ctx, TG_ERR_VALUE, __func__, "seconds = %g: want >= 0 (0: no deadline)", seconds);
        return false;
    }
    tg_comm_set_timeout(d->comm, seconds);
    return true;
}
double tg_dist_timeout(const tg_dist *d) { return d ? tg_comm_timeout(d->comm) : 0; }
double tg_dist_longest_wait(const tg_dist *d) { return d ? tg_comm_longest_wait(d->comm) : 0; }

void tg_dist_split(int64_t total, int parts, int part, int64_t *start, int64_t *count) {
    int64_t s = 0, c = 0;
    if (total > 0 && parts > 0 && part >= 0 && part < parts) {
        /* floor(k total / parts) = k q + floor(k r / parts) with total = q parts + r:
         * no product overflows, whatever total */
        const int64_t q = total / parts, r = total % parts;
        s = part * q + part * r / parts;
        c = (part + 1) * q + (part + 1) * r / parts - s;
    }
    if (start) *start = s;
    if (count) *count = c;
}

bool tg_dist_draw(tg_ctx *ctx, int64_t n, int64_t start, int64_t count, int64_t *index) {
    if (!tg_ok(ctx)) return false;
    if (n < 1 || start < 0 || count < 0) {
        tg_error(ctx, TG_ERR_VALUE, __func__,
                 "n = %lld, start = %lld, count = %lld: want n >= 1, start >= 0, count >= 0", (long long)n,
                 (long long)start, (long long)count);
        return false;
    }
    if (!index && count > 0) {
        tg_null_error(ctx, __func__, "index");
        return false;
    }
    uint64_t seed, offset;
    tg_rng_state(ctx, &seed, &offset);
    tg_rng_set_state(ctx, seed, offset + (uint64_t)start);
    for (int64_t i = 0; i < count; i++) {
        /* u < 1, but u n can round up to n */
        int64_t k = (int64_t)(tg_rng_uniform(ctx) * (double)n);
        index[i] = k < n ? k : n - 1;
    }
    tg_rng_set_state(ctx, seed, offset);
    return true;
}

void tg_dist_set_bucket_bytes(tg_dist *d, size_t bytes) {
    if (!d) return;
    d->bucket_bytes = bytes < MIN_BUCKET_BYTES ? MIN_BUCKET_BYTES : bytes > MAX_BUCKET_BYTES ? MAX_BUCKET_BYTES : bytes;
}
size_t tg_dist_bucket_bytes(const tg_dist *d) { return d ? d->bucket_bytes : DEFAULT_BUCKET_BYTES; }

tg_dist_stats tg_dist_get_stats(const tg_dist *d) { return d ? d->stats : (tg_dist_stats){0}; }
void tg_dist_reset_stats(tg_dist *d) {
    if (d) d->stats = (tg_dist_stats){0};
}

/* What spiral and gpt share to train across processes (tapegrad/dist.h,
 * docs/distributed.md): joining the run, and agreeing that every rank is
 * still fine. Static inline functions in a header, since only the
 * examples that link tapegrad::dist include it (the .c files of examples/common go
 * into every example). */
#ifndef TG_EXAMPLE_DIST_H
#define TG_EXAMPLE_DIST_H

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "example.h"
#include "tapegrad/dist.h"

/* --dist-timeout SECONDS, in the extra flags of an example that joins. */
#define EX_FLAG_DIST_TIMEOUT(args)                                                                                  \
    {                                                                                                               \
        "dist-timeout", EX_STR, &(args).dist_timeout,                                                               \
            "a collective's deadline: a rank that waits longer ends the run, naming the ranks that did not arrive " \
            "(default "                                                                                             \
            "TG_DIST_TIMEOUT, else 600; 0: none)",                                                                  \
            NULL                                                                                                    \
    }

/* True on every rank when ok is true on every rank (and no context is in
 * error: tg_dist_agree); else false on every rank, and a rank that had
 * not failed itself prints which one did (a rank that failed printed its
 * reason where it failed). With one process: ok and the context's state. */
static inline bool ex_dist_agree(tg_ctx *ctx, tg_dist *d, bool ok) {
    if (tg_dist_agree(ctx, d, ok)) return true;
    if (ok) ex_failed(ctx);
    return false;
}

/* Joins the processes of the run (tg_dist_init): a world of one unless
 * mpirun started this one. Only rank 0 prints: the others' standard
 * output goes to /dev/null (their errors still reach stderr). With several
 * processes and no --threads, each takes its share of this machine's
 * cores; then applies the threads (ex_setup) and --dist-timeout. Rank 0,
 * the one that saves, checks --save's folder now rather than after the
 * run. NULL, the error printed, on failure (on every rank). prog names
 * the program in messages. */
static inline tg_dist *ex_dist_join(tg_ctx *ctx, ex_args *args, int *argc, char ***argv, const char *prog) {
    tg_dist *d = tg_dist_init(ctx, argc, argv);
    if (!d) {
        ex_failed(ctx);
        return NULL;
    }
    if (tg_dist_rank(d) != 0 && !freopen("/dev/null", "w", stdout))
        fprintf(stderr, "%s: rank %d cannot send its output to /dev/null\n", prog, tg_dist_rank(d));
    if (tg_dist_size(d) > 1 && args->threads == 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN) / tg_dist_local_size(d);
        args->threads = cores > 1 ? (int)cores : 1;
    }
    ex_setup(ctx, args);
    bool ok = true;
    if (args->dist_timeout) {
        char *end;
        double s = strtod(args->dist_timeout, &end);
        if (end == args->dist_timeout || *end) {
            fprintf(stderr, "%s: --dist-timeout %s: want seconds >= 0 (0: none)\n", prog, args->dist_timeout);
            ok = false;
        } else {
            ok = tg_dist_set_timeout(ctx, d, s) || !ex_failed(ctx);
        }
    }
    ok = ok && (tg_dist_rank(d) != 0 || ex_save_folder_ok(args));
    if (!ex_dist_agree(ctx, d, ok)) {
        tg_dist_free(d);
        return NULL;
    }
    return d;
}

/* args->split for a run of d's P processes x K = `micro` micro-batches
 * each: the order of the gradient's sum. P processes of one micro-batch
 * fold like one process of P micro-batches (docs/distributed.md), so both
 * are "M" slices (M = P K); else "PxK" (K per process, then the processes). */
static inline void ex_dist_set_split(ex_args *args, const tg_dist *d, int64_t micro) {
    const int P = tg_dist_size(d);
    if (P == 1 || micro == 1) snprintf(args->split, sizeof args->split, "%lld", (long long)(P * micro));
    else snprintf(args->split, sizeof args->split, "%dx%lld", P, (long long)micro);
}

#endif

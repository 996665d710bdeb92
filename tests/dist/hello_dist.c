/* A program of a user of the installed tapegrad::dist (tests/dist/check.sh,
 * case installed): every rank adds rank + 1 in rank order, and rank 0
 * prints the world and the sum, P (P + 1) / 2. */
#include <stdio.h>
#include <tapegrad.h>
#include <tapegrad/dist.h>

int main(int argc, char **argv) {
    tg_ctx *ctx = tg_ctx_new(1);
    tg_dist *d = tg_dist_init(ctx, &argc, &argv);
    double v = tg_dist_rank(d) + 1.0;
    bool ok = d && tg_dist_allreduce_f64(ctx, d, &v, 1, 1.0);
    if (!ok) fprintf(stderr, "hello_dist: %s\n", tg_error_message(ctx));
    else if (tg_dist_rank(d) == 0) printf("%d processes, sum %g\n", tg_dist_size(d), v);
    tg_dist_free(d);
    tg_ctx_free(ctx);
    return ok ? 0 : 1;
}

/* A tiny outside program built against an *installed* tapegrad, once through
 * find_package(tapegrad) and once through pkg-config (see run.sh). It makes a
 * context and a tensor, prints it, and exits 0 only if everything worked. */
#include <stdio.h>
#include <string.h>
#include <tapegrad.h>

int main(void) {
    tg_ctx *ctx = tg_ctx_new(42);
    if (!ctx) {
        fprintf(stderr, "hello: tg_ctx_new failed\n");
        return 1;
    }
    /* x = arange(6) viewed as (2, 3): [[0, 1, 2], [3, 4, 5]] */
    tg_tensor *x = tg_view(ctx, tg_arange(ctx, TG_F32, 0, 6, 1), TG_SHAPE(2, 3));
    double x12 = tg_get(ctx, x, (const int64_t[]){1, 2});
    char text[256];
    size_t n = tg_format(text, sizeof text, x);
    int ok = tg_ok(ctx) && x12 == 5.0 && n > 0 && n < sizeof text && strncmp(text, "tensor(", 7) == 0;
    if (ok) printf("%s\n", text);
    else
        fprintf(stderr, "hello: failed: %s (x[1,2] = %g, text \"%s\")\n", tg_error_message(ctx), x12,
                n < sizeof text ? text : "");
    tg_ctx_free(ctx);
    return ok ? 0 : 1;
}

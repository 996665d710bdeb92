/* Helpers shared by every Check suite (tests/testutil.h). */
#include "testutil.h"

#include <stdarg.h>
#include <string.h>

void tg_test_assert_error(tg_ctx *ctx, tg_status status, ...) {
    ck_assert_msg(!tg_ok(ctx), "expected an error, got none");
    ck_assert_msg(tg_status_of(ctx) == status, "status %s, expected %s (%s)", tg_status_name(tg_status_of(ctx)),
                  tg_status_name(status), tg_error_message(ctx));
    const char *msg = tg_error_message(ctx);
    va_list ap;
    va_start(ap, status);
    for (const char *s = va_arg(ap, const char *); s; s = va_arg(ap, const char *))
        ck_assert_msg(strstr(msg, s) != NULL, "error message \"%s\" lacks \"%s\"", msg, s);
    va_end(ap);
    tg_clear_error(ctx);
}


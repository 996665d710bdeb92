/* Helpers shared by every Check suite (header only). */
#ifndef TG_TESTS_TESTUTIL_H
#define TG_TESTS_TESTUTIL_H

#include <check.h>
#include <stdarg.h>
#include <string.h>

#include "tapegrad.h"
#include "tapegrad/check.h"

/* Asserts the context holds an error of `status` whose message contains
 * each of the NULL-terminated strings, then clears it. */
void tg_test_assert_error(tg_ctx *ctx, tg_status status, ...);

#endif

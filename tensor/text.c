/* The string builder (tensor/text.h). */
#include "tensor/text.h"

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

tg_text tg_text_buf(char *buf, size_t size) {
    if (buf && size) buf[0] = '\0';
    return (tg_text){.buf = buf, .size = buf ? size : 0};
}

char *tg_text_room(const tg_text *t, size_t *room) {
    bool has_room = !t->out && t->buf && t->len < t->size;
    *room = has_room ? t->size - t->len : 0;
    return has_room ? t->buf + t->len : NULL;
}

void tg_text_put(tg_text *t, const char *s) {
    size_t n = strlen(s);
    if (t->out) {
        fputs(s, t->out);
    } else {
        size_t room;
        char *dst = tg_text_room(t, &room);
        if (dst) {
            size_t k = n < room - 1 ? n : room - 1;
            memcpy(dst, s, k);
            dst[k] = '\0';
        }
    }
    t->len += n;
}

void tg_text_printf(tg_text *t, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n;
    if (t->out) {
        n = vfprintf(t->out, fmt, ap);
    } else {
        size_t room;
        char *dst = tg_text_room(t, &room);
        n = vsnprintf(dst, room, fmt, ap);
    }
    va_end(ap);
    if (n > 0) t->len += (size_t)n;
}

void tg_text_shortest(tg_text *t, double v) {
    char num[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(num, sizeof num, "%.*g", prec, v);
        if (strtod(num, NULL) == v || isnan(v)) break;
    }
    tg_text_put(t, num);
}

/* The library's one string builder (tensor/text.c), for every text made of
 * pieces: reprs, tensors' printing, progress lines, the descriptions a
 * training state saves, the gradient-check tool's reports. Not installed.
 *
 * A text goes into a caller's buffer with snprintf's semantics -- len
 * counts the whole text, buf keeps what fits and is always terminated
 * (size > 0), so a function can return len and be called again with a
 * buffer that fits -- or, when made with tg_text_file, to a FILE. */
#ifndef TG_TENSOR_TEXT_H
#define TG_TENSOR_TEXT_H

#include <stddef.h>
#include <stdio.h>

typedef struct tg_text {
    char *buf;   /* where the text goes; NULL with size 0 only measures it */
    size_t size; /* bytes of buf */
    size_t len;  /* the length of the whole text so far */
    FILE *out;   /* when set, the text is written here instead */
} tg_text;

/* An empty text in buf[size] (buf[0] = '\0' when size > 0). */
tg_text tg_text_buf(char *buf, size_t size);
/* A text written to out as it is made. */
static inline tg_text tg_text_file(FILE *out) { return (tg_text){.out = out}; }

/* Appends s. */
void tg_text_put(tg_text *t, const char *s);
/* Appends printf's formatting of fmt and what follows. */
void tg_text_printf(tg_text *t, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Appends v in the fewest significant digits that read back as exactly v
 * ("0.003", not "0.0030000000000000001"), so equal values give equal text. */
void tg_text_shortest(tg_text *t, double v);

/* For a writer with snprintf's semantics (it returns the length it needs):
 * the place it writes at and the room it has there (NULL and 0 when buf is
 * full, or the text goes to a FILE); add its length to t->len after. */
char *tg_text_room(const tg_text *t, size_t *room);
/* The length of what buf holds: len, or size - 1 when the text was cut. */
static inline size_t tg_text_kept(const tg_text *t) { return t->len < t->size ? t->len : t->size ? t->size - 1 : 0; }

#endif

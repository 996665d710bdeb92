/* What io/checkpoint.c lends to the rest of io/ (internal): its whole-file
 * reader and its atomic save, reporting errors under the caller's name
 * (io/gpt_weights.c reads and writes foreign layouts through them). */
#ifndef TG_IO_CHECKPOINT_H
#define TG_IO_CHECKPOINT_H

#include <stddef.h>

#include "tapegrad/io.h"

/* Reads the whole file at path into *buf (*len bytes) from the context's
 * allocator, as tg_ckpt_load does; free it with tg_io_free(&ctx->alloc).
 * Errors (TG_ERR_IO, TG_ERR_OOM) are set on ctx as `fn`. */
tg_status tg_ckpt_read_file(tg_ctx *ctx, const char *fn, const char *path, unsigned char **buf, size_t *len);
/* tg_ckpt_save_ex, its errors set on ctx as `fn`. */
tg_status tg_ckpt_save_as(tg_ctx *ctx, const char *fn, const char *path, const tg_params *params,
                          const tg_params *state, const tg_meta *meta, const tg_ckpt_options *opt);

#endif

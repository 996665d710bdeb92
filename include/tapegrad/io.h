/* tapegrad/io.h: checkpoints in the safetensors format and their string
 * metadata (io/). */
#ifndef TAPEGRAD_IO_H
#define TAPEGRAD_IO_H

#include "tapegrad/layers.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================== */
/* Checkpoints (safetensors)                                                */
/* ======================================================================== */
/* Files in the safetensors format (io/checkpoint.c, io/safetensors.c), so a
 * checkpoint opens in PyTorch (scripts/interop_torch.py shows how):
 *   8 bytes  N, the header's length, unsigned little-endian
 *   N bytes  JSON: {"__metadata__": {"key": "value", ...},
 *                   "fc1.weight": {"dtype": "F32", "shape": [4, 2],
 *                                  "data_offsets": [0, 32]}, ...}
 *            padded with spaces to a multiple of 8 bytes
 *   rest     the tensors' raw little-endian bytes, back to back in the order
 *            of their offsets (counted from the start of this section).
 * Dtypes "F32", "F64", "BF16" and "F16". Tensor names are the parameters'
 * dotted names. A file whose tensor has another dtype than the model's is
 * refused (TG_ERR_DTYPE) unless the load asks for conversion
 * (tg_ckpt_options.convert_dtype: e.g. a bfloat16 checkpoint from PyTorch
 * into a float32 model); a save can write every tensor in one dtype
 * (convert_on_save, save_dtype: e.g. float32 weights as BF16). Conversions
 * follow tapegrad/tensor.h, Low precision (round to nearest even).
 *
 * Training state for resuming lives in the same file: the optimizer's
 * tensors (moments, momentum buffers) as a second named list `state` (give
 * them a prefix, e.g. "optim.fc1.weight.exp_avg", so no name clashes with a
 * parameter), and scalars (step count, schedule position, RNG state) as
 * metadata strings (tg_meta_set_u64, tg_meta_set_rng).
 *
 * Statuses: TG_ERR_IO (open, read, write, fsync or rename failed),
 * TG_ERR_FORMAT (a damaged or malformed file), TG_ERR_SHAPE / TG_ERR_DTYPE
 * (a tensor whose shape or dtype differs from the model's), TG_ERR_VALUE
 * (a tensor missing from the file or the model, bad names), TG_ERR_OOM,
 * TG_ERR_NULL. Each also sets the context's error, naming the file, the
 * tensor and the problem. */

/* String metadata (the file's "__metadata__"): key/value pairs, copied.
 * Start from tg_meta m = {0}; free with tg_meta_free. Keys are unique. */
typedef struct tg_meta_item {
    char *key;
    char *value;
} tg_meta_item;
typedef struct tg_meta {
    tg_meta_item *items;
    int count;
    int capacity;
    /* internal */
    tg_allocator alloc_; /* where items, keys and values come from: the
                             allocator of the context that first stored into
                             the list (zero: none yet) */
} tg_meta;

/* Sets key to value (both copied, valid UTF-8), replacing an old value.
 * Returns false on error. */
TG_API bool tg_meta_set(tg_ctx *ctx, tg_meta *meta, const char *key, const char *value);
/* Sets key to value written in decimal. */
TG_API bool tg_meta_set_u64(tg_ctx *ctx, tg_meta *meta, const char *key, uint64_t value);
/* The value of key, or NULL when absent (sets no error). */
TG_API const char *tg_meta_get(const tg_meta *meta, const char *key);
/* Reads key's value as a decimal uint64 into *value. Errors: key absent
 * (TG_ERR_VALUE), not a decimal number below 2^64 (TG_ERR_FORMAT). */
TG_API bool tg_meta_get_u64(tg_ctx *ctx, const tg_meta *meta, const char *key, uint64_t *value);
/* Frees every key and value and empties the list. */
TG_API void tg_meta_free(tg_meta *meta);
/* Stores the context's RNG state as "tapegrad.rng.seed" and
 * "tapegrad.rng.offset", and restores it from them. */
TG_API bool tg_meta_set_rng(tg_ctx *ctx, tg_meta *meta);
TG_API bool tg_meta_get_rng(tg_ctx *ctx, const tg_meta *meta);

/* The file operations a save makes, replaceable per call (tests use this to
 * inject a failure at every write point). Each behaves like its POSIX
 * namesake: -1 (errno set) on failure. A NULL member uses the POSIX call. */
typedef struct tg_ckpt_io {
    /* open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644) */
    int (*create)(const char *path, void *user);
    /* write(fd, buf, n): bytes written (may be fewer than n) or -1 */
    ptrdiff_t (*write)(int fd, const void *buf, size_t n, void *user);
    int (*fsync)(int fd, void *user);
    int (*close)(int fd, void *user);
    int (*rename)(const char *from, const char *to, void *user);
    /* open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC), to fsync a folder */
    int (*open_dir)(const char *path, void *user);
    /* unlink(path), to remove the temporary file after a failure */
    int (*remove)(const char *path, void *user);
    void *user;
} tg_ckpt_io;

/* The POSIX implementations, e.g. for a hook that wraps them. */
TG_API tg_ckpt_io tg_ckpt_io_posix(void);

typedef struct tg_ckpt_options {
    const tg_ckpt_io *io; /* save: file operations (NULL: POSIX) */
    bool ignore_extra;    /* load: skip tensors of the file that are in neither
                             list (e.g. only the model from a training file) */
    bool convert_dtype;   /* load: convert a tensor whose dtype differs from the
                             model's instead of refusing it */
    bool convert_on_save; /* save: write every tensor as save_dtype */
    tg_dtype save_dtype;
} tg_ckpt_options;

/* Saves params, plus state and meta when not NULL, to path atomically: a
 * temporary file beside it is written, fsync'ed and renamed over path, then
 * the folder is fsync'ed. On failure path keeps its old contents and the
 * temporary is removed; only when fsyncing the folder after the rename
 * fails does path already hold the new checkpoint. Names must be unique
 * across both lists and not "__metadata__". */
TG_API tg_status tg_ckpt_save(tg_ctx *ctx, const char *path, const tg_params *params, const tg_params *state,
                              const tg_meta *meta);
/* As tg_ckpt_save with options (NULL: defaults). */
TG_API tg_status tg_ckpt_save_ex(tg_ctx *ctx, const char *path, const tg_params *params, const tg_params *state,
                                 const tg_meta *meta, const tg_ckpt_options *opt);
/* Loads path into the existing tensors of params (and state, when not NULL)
 * by name. The file must hold exactly those tensors, each with the same
 * dtype and shape; the whole file is validated and read before any tensor
 * is written, so on error nothing changes. meta (may be NULL) receives the
 * file's metadata, replacing its contents. */
TG_API tg_status tg_ckpt_load(tg_ctx *ctx, const char *path, tg_params *params, tg_params *state, tg_meta *meta);
/* As tg_ckpt_load with options (NULL: defaults). */
TG_API tg_status tg_ckpt_load_ex(tg_ctx *ctx, const char *path, tg_params *params, tg_params *state, tg_meta *meta,
                                 const tg_ckpt_options *opt);

#ifdef __cplusplus
}
#endif

#endif /* TAPEGRAD_IO_H */

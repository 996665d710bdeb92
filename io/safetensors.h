/* The safetensors format: parse and validate a file held in memory, write
 * one through a byte sink, and load a validated file into named tensors
 * (internal; the public calls are tg_ckpt_* in include/tapegrad.h).
 *
 * A file is valid when (the reference implementation's rules, plus ours):
 *  - it has at least 8 bytes; N, the u64 LE header length, fits in the file
 *    and is at most TG_ST_MAX_HEADER;
 *  - the header is strict JSON (io/json.h: no duplicate keys) whose top
 *    level is an object;
 *  - "__metadata__", when present, is an object of string values with no
 *    NUL character in keys or values;
 *  - every other member is a tensor: an object with exactly "dtype",
 *    "shape" and "data_offsets"; dtype "F32", "F64", "BF16" or "F16" (other safetensors
 *    dtypes are "unsupported", anything else "unknown"); shape at most
 *    TG_MAX_DIMS non-negative integers whose product times the dtype size
 *    does not overflow; data_offsets two integers [begin, end] with
 *    begin <= end and end - begin equal to that size;
 *  - sorted by offsets, the tensors tile the data section exactly: the
 *    first begins at 0, each begins where the previous ended, the last
 *    ends at the end of the file (no overlap, no gap, no trailing bytes). */
#ifndef TG_IO_SAFETENSORS_H
#define TG_IO_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io/json.h"
#include "tapegrad/io.h"

/* The largest header accepted, as in the reference implementation. */
#define TG_ST_MAX_HEADER 100000000u
/* Containers nest at most this deep in a header (the format needs 3). */
#define TG_ST_MAX_DEPTH 8

/* What went wrong, for the caller to put in the context's error. */
typedef struct tg_st_error {
    tg_status status;
    char msg[400];
} tg_st_error;

/* One tensor of a file. Parsed: every pointer points into the file's
 * buffer or JSON document. For writing: name, dtype, shape and data are
 * read; begin/end are ignored (the writer lays tensors out in order). */
typedef struct tg_st_tensor {
    const char *name; /* NUL-terminated; name_len bytes (may hold NUL) */
    size_t name_len;
    tg_dtype dtype;
    int ndim;
    int64_t shape[TG_MAX_DIMS];
    uint64_t nbytes;     /* numel x dtype size */
    uint64_t begin, end; /* data_offsets, from the start of the data section */
    const void *data;    /* nbytes bytes (parsed: little-endian) */
} tg_st_tensor;

/* One metadata entry (NUL-terminated strings). */
typedef struct tg_st_kv {
    const char *key;
    const char *value;
} tg_st_kv;

/* A parsed, validated file. Borrows the buffer it was parsed from. */
typedef struct tg_st_file {
    tg_allocator alloc; /* where doc, tensors and meta come from (zero: malloc) */
    tg_json_doc *doc;
    tg_st_tensor *tensors; /* in header order */
    size_t count;
    tg_st_kv *meta; /* in header order */
    size_t meta_count;
    uint64_t header_len; /* N */
    const uint8_t *data; /* the data section */
    uint64_t data_len;
} tg_st_file;

/* Parses and validates buf[0 .. len) (see the rules above). On success
 * fills *f (free it with tg_st_file_free) and returns true; otherwise
 * returns false with *err naming the problem (status TG_ERR_FORMAT, or
 * TG_ERR_OOM) and leaves *f empty. Memory comes from `alloc` (copied;
 * NULL: malloc), tg_st_parse's from malloc. */
bool tg_st_parse_with(tg_st_file *f, const tg_allocator *alloc, const void *buf, size_t len, tg_st_error *err);
bool tg_st_parse(tg_st_file *f, const void *buf, size_t len, tg_st_error *err);
void tg_st_file_free(tg_st_file *f);

/* Receives the bytes of a file being written; false stops the writing. */
typedef bool (*tg_st_sink)(void *user, const void *bytes, size_t n);

/* Writes a complete file: the length, the header (tensors in the given
 * order, metadata first when meta_count > 0, padded with spaces to a
 * multiple of 8) and the data. host_order: data is in the host's byte order
 * (swapped to little-endian on a big-endian host); otherwise it is already
 * little-endian. Names, keys and values must be valid UTF-8 (the caller
 * checks). Returns false when the sink fails (err->status TG_ERR_IO, the
 * sink may add detail) or on out of memory. The header is built in memory
 * from `alloc` (NULL: malloc), tg_st_write's from malloc. */
bool tg_st_write_with(const tg_allocator *alloc, tg_st_sink sink, void *user, const tg_st_tensor *tensors, size_t count,
                      const tg_st_kv *meta, size_t meta_count, bool host_order, tg_st_error *err);
bool tg_st_write(tg_st_sink sink, void *user, const tg_st_tensor *tensors, size_t count, const tg_st_kv *meta,
                 size_t meta_count, bool host_order, tg_st_error *err);

/* Loads the file in buf[0 .. len) into params and state (state may be NULL)
 * and copies its metadata into meta (may be NULL), exactly as tg_ckpt_load
 * does for a file: validates the file and its fit to the lists first, then
 * writes. On error sets ctx's error as `fn`, naming `what` (the path, or
 * e.g. "<memory>"), and returns its status. The fuzz target calls this. */
tg_status tg_st_load_memory(tg_ctx *ctx, const char *fn, const char *what, const void *buf, size_t len,
                            tg_params *params, tg_params *state, tg_meta *meta, bool ignore_extra);
/* As tg_st_load_memory; with `convert`, a tensor whose dtype differs from
 * the model's is converted (tapegrad/tensor.h, Low precision) instead of
 * refused. */
tg_status tg_st_load_memory_ex(tg_ctx *ctx, const char *fn, const char *what, const void *buf, size_t len,
                               tg_params *params, tg_params *state, tg_meta *meta, bool ignore_extra, bool convert);

/* Replaces *out (which must be empty) by a copy of the n key/value pairs,
 * allocated with the context's allocator (io/meta.c). False when out of
 * memory (no error set; *out stays empty). */
bool tg_meta_copy_kv(tg_ctx *ctx, tg_meta *out, const tg_st_kv *kv, size_t n);

/* Reads / writes a little-endian u64. */
uint64_t tg_st_le64(const void *p);
void tg_st_put_le64(void *p, uint64_t v);

#endif

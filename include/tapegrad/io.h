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

/* ======================================================================== */
/* Files a user names                                                      */
/* ======================================================================== */

/* Opens path for reading when it names a regular file, as every reader of
 * a user-named file in tapegrad does (checkpoint loads, the loss log of a
 * resumed run, gnuplot scripts, the examples' and tools' inputs): a device
 * such as /dev/zero never ends and a pipe (FIFO) may block forever, so they
 * are refused, as are directories and sockets. Never blocks. Returns the
 * file descriptor (O_RDONLY | O_CLOEXEC; the caller closes it), or -1 with
 * errno set and the reason in why (snprintf semantics; why may be NULL):
 *   cannot open data.st: No such file or directory
 *   /dev/zero is a character device, not a regular file (a device or a
 *   pipe need not end) */
TG_API int tg_open_regular(const char *path, char *why, size_t why_size);
/* What a stat mode that is not a regular file names, with its article, for
 * messages: "a directory", "a character device", "a block device", "a pipe
 * (FIFO)", "a socket", or "not a regular file" for anything else. */
TG_API const char *tg_file_kind(unsigned mode);

/* ======================================================================== */
/* GPT weights in PyTorch's layouts (io/gpt_weights.c)                      */
/* ======================================================================== */
/* A tg_gpt from, and to, the safetensors files PyTorch users have, by the
 * mapping table of docs/weights.md:
 *  - TG_GPT_HF: Hugging Face's names. GPT-2 (GPT2LMHeadModel, or the
 *    hub's model.safetensors without the "transformer." prefix): its Conv1D
 *    weights are (in, out), transposed on the way; c_attn is tapegrad's
 *    fused qkv as it is. LLaMA (LlamaForCausalLM, "model." prefix optional):
 *    q_proj, k_proj and v_proj stacked into qkv, the rows of q_proj and
 *    k_proj permuted, since Hugging Face rotates the halves (i, i + D/2) of
 *    a head where tapegrad, as Meta, rotates the pairs (2i, 2i + 1).
 *  - TG_GPT_NANOGPT: GPT-2 under nanoGPT's names (Hugging Face's, with the
 *    "transformer." prefix) in nn.Linear's (out, in) layout.
 *  - TG_GPT_META: LLaMA under Meta's names (tok_embeddings, layers.N.
 *    attention.wq, feed_forward.w1, output), rows as tapegrad has them.
 * GPT-2's lm_head.weight is wte.weight (tied): an import checks that the
 * file's is equal when it has one; an export writes it. A LLaMA file
 * without lm_head.weight (Hugging Face's tie_word_embeddings) gives
 * lm_head a copy of the token table. Buffers PyTorch keeps beside the
 * weights (attn.bias, attn.masked_bias, rotary_emb.inv_freq, rope.freqs)
 * are skipped; any other tensor of the file that has no place in the
 * model is an error, as is a missing one or a shape that differs (naming
 * the file's tensor, tapegrad's parameter and both shapes; grouped-query
 * attention, fewer key/value heads than query heads, is refused so). What
 * tapegrad computes differently from the source models (nanoGPT's exact
 * GELU, LLaMA-2's norm eps 1e-5) is listed in docs/weights.md. */
typedef enum tg_gpt_layout { TG_GPT_HF = 0, TG_GPT_NANOGPT, TG_GPT_META } tg_gpt_layout;

/* Loads the file at path, in `layout`, into gpt's parameters (converting
 * the file's dtype to the model's). The whole file is checked against the
 * model before any parameter is written: on error the model is unchanged.
 * Memory: the file and a copy of its tensors, while it runs. Errors: a
 * layout the model's arch does not have (TG_ERR_VALUE), and those of
 * tg_ckpt_load. */
TG_API tg_status tg_gpt_import(tg_ctx *ctx, tg_gpt *gpt, const char *path, tg_gpt_layout layout);
/* A new model with the file's weights, its sizes read from the file: arch,
 * vocab_size, n_embd, n_layer, hidden, and GPT-2's context (the rows of
 * wpe). The rest, which weights do not say, comes from config: n_head,
 * norm_eps, rope_base, LLaMA's context, dtype (take them from the model's
 * config.json: n_head / num_attention_heads, rms_norm_eps, rope_theta,
 * max_position_embeddings). config NULL: those of a file tg_gpt_export
 * wrote (its metadata), else an error. The context's RNG is left as it was
 * (tg_gpt_new's init draws are undone). NULL on error. */
TG_API tg_gpt *tg_gpt_import_new(tg_ctx *ctx, const char *name, const char *path, tg_gpt_layout layout,
                                 const tg_gpt_config *config);
/* Saves gpt's parameters to path in `layout`, atomically (tg_ckpt_save),
 * under the names a PyTorch model's load_state_dict(strict=True) expects:
 * GPT-2 with the "transformer." prefix and lm_head.weight, LLaMA in
 * Hugging Face's layout with the "model." prefix. The metadata holds
 * "format": "pt" (which Hugging Face's loader asks for) and the config's
 * n_head, context, rope_base and norm_eps ("tapegrad.*"). opt (may be NULL): the
 * save's options (io, convert_on_save and save_dtype, e.g. BF16). */
TG_API tg_status tg_gpt_export(tg_ctx *ctx, tg_gpt *gpt, const char *path, tg_gpt_layout layout,
                               const tg_ckpt_options *opt);

#ifdef __cplusplus
}
#endif

#endif /* TAPEGRAD_IO_H */

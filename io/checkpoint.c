/* Checkpoints: the public tg_ckpt_* calls (include/tapegrad/io.h). The
 * format itself is io/safetensors.c, the metadata list io/meta.c.
 *
 * Atomic save, step by step (each step is a write point a test can fail):
 *   1. create a new temporary file beside the target ("<path>.tmp-<pid>-<k>",
 *      O_EXCL so it never clobbers anything), in the same folder so that
 *      the rename below stays within one filesystem;
 *   2. write the whole file into it (raw file descriptors: there is no
 *      user-space buffer to flush, write() hands bytes to the kernel);
 *   3. fsync it, so its bytes are on disk before its name is;
 *   4. close it (close can report a deferred write error);
 *   5. rename it over the target: POSIX makes this atomic, a reader sees the
 *      old file or the new one, never a mix;
 *   6. open the folder and fsync it, so the rename itself is on disk.
 * A failure in steps 1-5 removes the temporary and leaves the target as it
 * was. A failure in step 6 is still reported: the new checkpoint is in place
 * but may not survive a power cut.
 * A save killed before it can clean up (kill -9, a crash) leaves its
 * temporary behind; before step 1, a save removes the temporaries of its
 * own target whose process is gone (see remove_stale_temporaries). */
#define _POSIX_C_SOURCE 200809L

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/checkpoint.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "tensor/internal.h"

/* ---- POSIX file operations ------------------------------------------------------ */

static int posix_create(const char *path, void *user) {
    (void)user;
    return open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
}
static ptrdiff_t posix_write(int fd, const void *buf, size_t n, void *user) {
    (void)user;
    return write(fd, buf, n);
}
static int posix_fsync(int fd, void *user) {
    (void)user;
    return fsync(fd);
}
static int posix_close(int fd, void *user) {
    (void)user;
    return close(fd);
}
static int posix_rename(const char *from, const char *to, void *user) {
    (void)user;
    return rename(from, to);
}
static int posix_open_dir(const char *path, void *user) {
    (void)user;
    return open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}
static int posix_remove(const char *path, void *user) {
    (void)user;
    return unlink(path);
}

tg_ckpt_io tg_ckpt_io_posix(void) {
    return (tg_ckpt_io){posix_create, posix_write,    posix_fsync,  posix_close,
                        posix_rename, posix_open_dir, posix_remove, NULL};
}

/* The hooks with every NULL member replaced by the POSIX call. */
static tg_ckpt_io resolve_io(const tg_ckpt_io *io) {
    tg_ckpt_io r = tg_ckpt_io_posix();
    if (!io) return r;
    r.user = io->user;
    if (io->create) r.create = io->create;
    if (io->write) r.write = io->write;
    if (io->fsync) r.fsync = io->fsync;
    if (io->close) r.close = io->close;
    if (io->rename) r.rename = io->rename;
    if (io->open_dir) r.open_dir = io->open_dir;
    if (io->remove) r.remove = io->remove;
    return r;
}

/* ---- save ------------------------------------------------------------------------ */

typedef struct file_sink {
    const tg_ckpt_io *io;
    int fd;
    int err; /* errno of the failed write */
} file_sink;

static bool sink_write(void *user, const void *bytes, size_t n) {
    file_sink *s = user;
    const char *p = bytes;
    while (n > 0) {
        errno = 0;
        ptrdiff_t k = s->io->write(s->fd, p, n, s->io->user);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0 || (size_t)k > n) {
            s->err = k < 0 && errno ? errno : EIO;
            return false;
        }
        p += k;
        n -= (size_t)k;
    }
    return true;
}

/* Checks one list: names, tensors, dtypes. */
static bool check_list(tg_ctx *ctx, const char *fn, const tg_params *list, const char *list_name) {
    if (list->count < 0 || (list->count > 0 && !list->items)) {
        tg_error(ctx, TG_ERR_NULL, fn, "%s has %d items but no array", list_name, list->count);
        return false;
    }
    for (int i = 0; i < list->count; i++) {
        const tg_param *p = &list->items[i];
        size_t len = 0;
        while (len < sizeof p->name && p->name[len]) len++;
        if (len == sizeof p->name || len == 0) {
            tg_error(ctx, TG_ERR_VALUE, fn, "%s item %d has %s name", list_name, i,
                     len == 0 ? "an empty" : "an unterminated");
            return false;
        }
        char q[80];
        tg_json_quote(q, sizeof q, p->name, len);
        if (!tg_utf8_valid(p->name, len)) {
            tg_error(ctx, TG_ERR_VALUE, fn, "%s item %d: the name \"%s\" is not valid UTF-8", list_name, i, q);
            return false;
        }
        if (strcmp(p->name, "__metadata__") == 0) {
            tg_error(ctx, TG_ERR_VALUE, fn, "%s item %d: \"__metadata__\" is reserved by the format", list_name, i);
            return false;
        }
        if (!p->value) {
            tg_error(ctx, TG_ERR_NULL, fn, "%s item %d (\"%s\") has no tensor", list_name, i, q);
            return false;
        }
        if (p->value->dtype != TG_F32 && p->value->dtype != TG_F64 && !tg_is_lowp(p->value->dtype)) {
            tg_error(ctx, TG_ERR_DTYPE, fn, "%s item %d (\"%s\") has an unknown dtype %d", list_name, i, q,
                     (int)p->value->dtype);
            return false;
        }
        if (p->value->numel > 0 && !p->value->data) {
            tg_error(ctx, TG_ERR_NULL, fn, "%s item %d (\"%s\") has no data", list_name, i, q);
            return false;
        }
    }
    return true;
}

static int cmp_tensor_names(const void *a, const void *b) {
    const tg_st_tensor *x = a, *y = b;
    return strcmp(x->name, y->name);
}

static int cmp_meta_keys(const void *a, const void *b) {
    return strcmp(((const tg_st_kv *)a)->key, ((const tg_st_kv *)b)->key);
}

/* The folder of path: "dir" for "dir/x", "." for "x", "/" for "/x". */
static char *folder_of(tg_ctx *ctx, const char *path) {
    const char *slash = strrchr(path, '/');
    const char *from = slash ? path : ".";
    size_t n = !slash || slash == path ? 1 : (size_t)(slash - path);
    char *d = tg_io_alloc(&ctx->alloc, n + 1);
    if (d) {
        memcpy(d, from, n);
        d[n] = '\0';
    }
    return d;
}

/* Removes dir's files "<name>.tmp-<pid>-<k>" (name: path's last component)
 * whose process is gone: leftovers of saves of this target that were
 * killed. kill(pid, 0) failing with ESRCH says no such process; a live pid
 * is a save in progress (or a reused pid) and its file is kept. A pid is
 * only told apart within this PID namespace: a folder shared with another
 * container could lose that container's temporary mid-save, whose rename
 * then fails and leaves its target as it was. Best effort: errors are
 * ignored, the save goes on. */
static void remove_stale_temporaries(const char *dir, const char *path) {
    const char *slash = strrchr(path, '/');
    const char *name = slash ? slash + 1 : path;
    size_t n = strlen(name);
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *s = e->d_name;
        if (strncmp(s, name, n) != 0 || strncmp(s + n, ".tmp-", 5) != 0) continue;
        s += n + 5;
        char *end;
        errno = 0;
        long pid = strtol(s, &end, 10);
        if (errno || end == s || *s < '0' || *s > '9' || *end != '-' || pid <= 0 || pid == (long)getpid()) continue;
        s = end + 1;
        strtol(s, &end, 10);
        if (end == s || *s < '0' || *s > '9' || *end) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        size_t len = strlen(dir) + strlen(e->d_name) + 2;
        char *stale = malloc(len);
        if (!stale) break;
        snprintf(stale, len, "%s/%s", dir, e->d_name);
        unlink(stale);
        free(stale);
    }
    closedir(d);
}

static tg_status save_impl(tg_ctx *ctx, const char *fn, const char *path, const tg_params *params,
                           const tg_params *state, const tg_meta *meta, const tg_ckpt_options *opt) {
    if (!ctx) return TG_ERR_NULL;
    if (!tg_ok(ctx)) return tg_status_of(ctx);
    if (!path || !params) {
        tg_null_error(ctx, fn, !path ? "path" : "params");
        return TG_ERR_NULL;
    }
    if (!*path) {
        tg_error(ctx, TG_ERR_VALUE, fn, "the path is empty");
        return TG_ERR_VALUE;
    }
    if (!check_list(ctx, fn, params, "params") || (state && !check_list(ctx, fn, state, "state")))
        return tg_status_of(ctx);
    if (meta && (meta->count < 0 || (meta->count > 0 && !meta->items))) {
        tg_error(ctx, TG_ERR_NULL, fn, "meta has %d items but no array", meta->count);
        return TG_ERR_NULL;
    }

    size_t np = (size_t)params->count, ns = state ? (size_t)state->count : 0;
    size_t nt = np + ns, nm = meta ? (size_t)meta->count : 0;
    tg_st_tensor *t = tg_io_calloc(&ctx->alloc, nt ? nt : 1, sizeof *t);
    tg_st_tensor *sorted = tg_io_calloc(&ctx->alloc, nt ? nt : 1, sizeof *sorted);
    tg_st_kv *kv = tg_io_calloc(&ctx->alloc, nm ? nm : 1, sizeof *kv);
    void **converted = tg_io_calloc(&ctx->alloc, nt ? nt : 1, sizeof *converted); /* save_dtype copies */
    size_t tmp_size = strlen(path) + 64;                                          /* + ".tmp-<pid>-<attempt>" */
    char *tmp = tg_io_alloc(&ctx->alloc, tmp_size);
    char *dir = folder_of(ctx, path);
    tg_status st = TG_OK;
    if (!t || !sorted || !kv || !converted || !tmp || !dir) {
        tg_error(ctx, TG_ERR_OOM, fn, "%s: out of memory", path);
        st = TG_ERR_OOM;
        goto done;
    }

    /* Data order: 8-byte tensors first (F64), then 4-byte (F32), then
     * 2-byte (BF16, F16), each in list order, so every tensor starts at a
     * multiple of its element size, as the reference writer does (it sorts
     * by alignment). With opt->convert_on_save each tensor is written as
     * opt->save_dtype, from a converted copy. */
    bool conv = opt && opt->convert_on_save;
    if (conv && (unsigned)opt->save_dtype > (unsigned)TG_F16) {
        tg_error(ctx, TG_ERR_DTYPE, fn, "%s: save_dtype %d is not a dtype", path, (int)opt->save_dtype);
        st = TG_ERR_DTYPE;
        goto done;
    }
    size_t k = 0;
    for (size_t want = 8; want >= 2; want /= 2) {
        for (size_t i = 0; i < nt; i++) {
            const tg_param *p = i < np ? &params->items[i] : &state->items[i - np];
            tg_dtype od = conv ? opt->save_dtype : p->value->dtype;
            if (tg_dtype_size(od) != want) continue;
            tg_st_tensor *o = &t[k++];
            o->name = p->name;
            o->name_len = strlen(p->name);
            o->dtype = od;
            o->ndim = p->value->ndim;
            memcpy(o->shape, p->value->shape, sizeof o->shape);
            o->data = p->value->data;
            if (od == p->value->dtype) continue;
            size_t n = (size_t)p->value->numel;
            if (!(converted[i] = tg_io_alloc(&ctx->alloc, n ? n * want : 1))) {
                tg_error(ctx, TG_ERR_OOM, fn, "%s: out of memory converting \"%s\" to %s", path, p->name,
                         tg_dtype_name(od));
                st = TG_ERR_OOM;
                goto done;
            }
            tg_convert_n(converted[i], od, p->value->data, p->value->dtype, n);
            o->data = converted[i];
        }
    }
    memcpy(sorted, t, nt * sizeof *t);
    qsort(sorted, nt, sizeof *sorted, cmp_tensor_names);
    for (size_t i = 1; i < nt; i++) {
        if (strcmp(sorted[i].name, sorted[i - 1].name) == 0) {
            tg_error(ctx, TG_ERR_VALUE, fn, "%s: the name \"%s\" appears twice in params and state", path,
                     sorted[i].name);
            st = TG_ERR_VALUE;
            goto done;
        }
    }
    for (size_t i = 0; i < nm; i++) {
        const tg_meta_item *it = &meta->items[i];
        if (!it->key || !it->value || !tg_utf8_valid(it->key, strlen(it->key)) ||
            !tg_utf8_valid(it->value, strlen(it->value))) {
            tg_error(ctx, TG_ERR_VALUE, fn, "%s: metadata item %zu has a NULL or non-UTF-8 key or value", path, i);
            st = TG_ERR_VALUE;
            goto done;
        }
        kv[i] = (tg_st_kv){it->key, it->value};
    }
    /* Sorted keys: the same metadata always gives the same bytes. */
    qsort(kv, nm, sizeof *kv, cmp_meta_keys);
    for (size_t i = 1; i < nm; i++) {
        if (strcmp(kv[i].key, kv[i - 1].key) == 0) {
            tg_error(ctx, TG_ERR_VALUE, fn, "%s: metadata key \"%s\" appears twice", path, kv[i].key);
            st = TG_ERR_VALUE;
            goto done;
        }
    }

    /* 1. a new temporary file in the same folder (after clearing the
     * leftovers of killed saves, which may hold the space it needs) */
    remove_stale_temporaries(dir, path);
    tg_ckpt_io io = resolve_io(opt ? opt->io : NULL);
    int fd = -1, err = 0;
    for (int attempt = 0; attempt < 100 && fd < 0; attempt++) {
        snprintf(tmp, tmp_size, "%s.tmp-%ld-%d", path, (long)getpid(), attempt);
        errno = 0;
        fd = io.create(tmp, io.user);
        err = errno;
        if (fd < 0 && err != EEXIST) break;
    }
    if (fd < 0) {
        tg_error(ctx, TG_ERR_IO, fn, "%s: cannot create the temporary file %s: %s (the old file is unchanged)", path,
                 tmp, strerror(err ? err : EIO));
        st = TG_ERR_IO;
        goto done;
    }
    /* 2. write, 3. fsync, 4. close */
    file_sink sink = {&io, fd, 0};
    tg_st_error werr;
    const char *step = NULL;
    if (!tg_st_write_with(&ctx->alloc, sink_write, &sink, t, nt, kv, nm, true, &werr)) {
        if (werr.status == TG_ERR_OOM) {
            io.close(fd, io.user);
            io.remove(tmp, io.user);
            tg_error(ctx, TG_ERR_OOM, fn, "%s: %s", path, werr.msg);
            st = TG_ERR_OOM;
            goto done;
        }
        step = "write", err = sink.err;
    } else {
        errno = 0;
        if (io.fsync(fd, io.user) != 0) step = "fsync", err = errno;
    }
    if (step) {
        io.close(fd, io.user);
    } else {
        errno = 0;
        if (io.close(fd, io.user) != 0) step = "close", err = errno;
    }
    /* 5. rename over the target */
    if (!step) {
        errno = 0;
        if (io.rename(tmp, path, io.user) != 0) step = "rename", err = errno;
    }
    if (step) {
        io.remove(tmp, io.user);
        tg_error(ctx, TG_ERR_IO, fn, "%s: %s of the temporary file %s failed: %s (the old file is unchanged)", path,
                 step, tmp, strerror(err ? err : EIO));
        st = TG_ERR_IO;
        goto done;
    }
    /* 6. fsync the folder, so the rename is durable. Some filesystems cannot
     * fsync a folder and say EINVAL: nothing more can be done there. */
    errno = 0;
    int dfd = io.open_dir(dir, io.user);
    if (dfd < 0) {
        step = "open", err = errno;
    } else {
        errno = 0;
        if (io.fsync(dfd, io.user) != 0 && errno != EINVAL) step = "fsync", err = errno;
        errno = 0;
        if (io.close(dfd, io.user) != 0 && !step) step = "close", err = errno;
    }
    if (step) {
        tg_error(ctx, TG_ERR_IO, fn, "%s: saved, but %s of the folder %s failed: %s (the rename may not be durable)",
                 path, step, dir, strerror(err ? err : EIO));
        st = TG_ERR_IO;
    }
done:
    for (size_t i = 0; converted && i < nt; i++) tg_io_free(&ctx->alloc, converted[i]);
    tg_io_free(&ctx->alloc, converted);
    tg_io_free(&ctx->alloc, t);
    tg_io_free(&ctx->alloc, sorted);
    tg_io_free(&ctx->alloc, kv);
    tg_io_free(&ctx->alloc, tmp);
    tg_io_free(&ctx->alloc, dir);
    return st;
}

tg_status tg_ckpt_save(tg_ctx *ctx, const char *path, const tg_params *params, const tg_params *state,
                       const tg_meta *meta) {
    return save_impl(ctx, "tg_ckpt_save", path, params, state, meta, NULL);
}

tg_status tg_ckpt_save_ex(tg_ctx *ctx, const char *path, const tg_params *params, const tg_params *state,
                          const tg_meta *meta, const tg_ckpt_options *opt) {
    return save_impl(ctx, "tg_ckpt_save_ex", path, params, state, meta, opt);
}

/* ---- load ------------------------------------------------------------------------ */

/* Reads the whole file at path, a regular file (tg_open_regular: a device
 * or a pipe need not end), into a new buffer from the context's allocator
 * (*buf, *len). Plain read(2), no stdio: a FILE would allocate its own
 * buffer with malloc. The buffer starts one byte larger than the file, so
 * the read that returns 0 at its end proves the end (a file that grew
 * meanwhile makes it grow). */
static tg_status read_file(tg_ctx *ctx, const char *fn, const char *path, unsigned char **buf, size_t *len) {
    *buf = NULL;
    *len = 0;
    char why[512];
    int fd = tg_open_regular(path, why, sizeof why);
    if (fd < 0) {
        tg_error(ctx, TG_ERR_IO, fn, "%s", why);
        return TG_ERR_IO;
    }
    struct stat sb;
    size_t cap = 1 << 16, n = 0;
    if (fstat(fd, &sb) == 0 && sb.st_size > 0 && (uintmax_t)sb.st_size < SIZE_MAX) cap = (size_t)sb.st_size + 1;
    unsigned char *b = tg_io_alloc(&ctx->alloc, cap);
    tg_status st = TG_OK;
    while (b) {
        if (n == cap) { /* grow: allocate, copy, free */
            unsigned char *nb = cap <= SIZE_MAX / 2 ? tg_io_alloc(&ctx->alloc, cap * 2) : NULL;
            if (nb) memcpy(nb, b, n);
            tg_io_free(&ctx->alloc, b);
            b = nb;
            cap *= 2;
            continue;
        }
        ssize_t k = read(fd, b + n, cap - n);
        if (k > 0) {
            n += (size_t)k;
        } else if (k == 0) {
            break;
        } else if (errno != EINTR) {
            tg_error(ctx, TG_ERR_IO, fn, "%s: read error: %s", path, strerror(errno));
            st = TG_ERR_IO;
            break;
        }
    }
    close(fd);
    if (st == TG_OK && !b) {
        tg_error(ctx, TG_ERR_OOM, fn, "%s: out of memory reading the file", path);
        st = TG_ERR_OOM;
    }
    if (st != TG_OK) {
        tg_io_free(&ctx->alloc, b);
        return st;
    }
    *buf = b;
    *len = n;
    return TG_OK;
}

static tg_status load_impl(tg_ctx *ctx, const char *fn, const char *path, tg_params *params, tg_params *state,
                           tg_meta *meta, const tg_ckpt_options *opt) {
    if (!ctx) return TG_ERR_NULL;
    if (!tg_ok(ctx)) return tg_status_of(ctx);
    if (!path || !params) {
        tg_null_error(ctx, fn, !path ? "path" : "params");
        return TG_ERR_NULL;
    }
    unsigned char *buf;
    size_t len;
    tg_status st = read_file(ctx, fn, path, &buf, &len);
    if (st != TG_OK) return st;
    st = tg_st_load_memory_ex(ctx, fn, path, buf, len, params, state, meta, opt && opt->ignore_extra,
                              opt && opt->convert_dtype);
    tg_io_free(&ctx->alloc, buf);
    return st;
}

tg_status tg_ckpt_load(tg_ctx *ctx, const char *path, tg_params *params, tg_params *state, tg_meta *meta) {
    return load_impl(ctx, "tg_ckpt_load", path, params, state, meta, NULL);
}

tg_status tg_ckpt_load_ex(tg_ctx *ctx, const char *path, tg_params *params, tg_params *state, tg_meta *meta,
                          const tg_ckpt_options *opt) {
    return load_impl(ctx, "tg_ckpt_load_ex", path, params, state, meta, opt);
}

/* ---- for the rest of io/ (io/checkpoint.h) ----------------------------------------- */

tg_status tg_ckpt_read_file(tg_ctx *ctx, const char *fn, const char *path, unsigned char **buf, size_t *len) {
    return read_file(ctx, fn, path, buf, len);
}

tg_status tg_ckpt_save_as(tg_ctx *ctx, const char *fn, const char *path, const tg_params *params,
                          const tg_params *state, const tg_meta *meta, const tg_ckpt_options *opt) {
    return save_impl(ctx, fn, path, params, state, meta, opt);
}

/* Opening a file a user named, for reading: only a regular file.
 *
 * Every reader of a user-named file in tapegrad (checkpoints and training
 * states, the loss log a resumed run continues, gnuplot scripts, and the
 * examples' and tools' inputs) reads it whole, so it goes through
 * tg_open_regular: a character device such as /dev/zero never ends (a
 * reader would fill memory), and opening a pipe (FIFO) blocks until a
 * writer comes, forever if none does (under mpirun one such rank stops the
 * whole job). So the file is opened with O_NONBLOCK, which makes opening a
 * FIFO or a device return at once, its fstat (of what was opened, not of a
 * name that may change meanwhile) must say S_ISREG, and only then are reads
 * made blocking again (O_NONBLOCK means nothing to a regular file's reads,
 * but the caller may hand the descriptor on). */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tapegrad/io.h"

const char *tg_file_kind(unsigned mode) {
    return S_ISDIR(mode)    ? "a directory"
           : S_ISCHR(mode)  ? "a character device"
           : S_ISBLK(mode)  ? "a block device"
           : S_ISFIFO(mode) ? "a pipe (FIFO)"
           : S_ISSOCK(mode) ? "a socket"
                            : "not a regular file";
}

int tg_open_regular(const char *path, char *why, size_t why_size) {
    if (why && why_size) why[0] = '\0';
    if (!path) {
        if (why && why_size) snprintf(why, why_size, "the path is NULL");
        errno = EINVAL;
        return -1;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        int err = errno;
        if (why && why_size) snprintf(why, why_size, "cannot open %s: %s", path, strerror(err));
        errno = err;
        return -1;
    }
    struct stat sb;
    int flags;
    if (fstat(fd, &sb) != 0 ||
        (S_ISREG(sb.st_mode) && ((flags = fcntl(fd, F_GETFL)) < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0))) {
        int err = errno;
        close(fd);
        if (why && why_size) snprintf(why, why_size, "cannot open %s: %s", path, strerror(err));
        errno = err;
        return -1;
    }
    if (S_ISREG(sb.st_mode)) return fd;
    close(fd);
    if (why && why_size)
        snprintf(why, why_size, "%s is %s, not a regular file (a device or a pipe need not end)", path,
                 tg_file_kind((unsigned)sb.st_mode));
    errno = S_ISDIR(sb.st_mode) ? EISDIR : EINVAL;
    return -1;
}

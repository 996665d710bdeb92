/* Files a user names (internal; the public half is tg_open_regular in
 * include/tapegrad/io.h, io/file.c). Not installed. */
#ifndef TG_IO_FILE_H
#define TG_IO_FILE_H

/* What a stat mode that is not a regular file names, with its article:
 * "a directory", "a character device", "a block device", "a pipe (FIFO)",
 * "a socket", or "not a regular file" for anything else. */
const char *tg_file_kind(unsigned mode);

#endif

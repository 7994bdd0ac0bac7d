/* Opening an input file that must be a regular file. A FIFO, a device or a
 * socket named where a file is expected (a --config, a CSV list, one of its
 * image rows) would block the reader in open() or read() forever, or feed it
 * endless bytes; a directory would fail later with a confusing message.
 * The open never blocks (O_NONBLOCK), and anything but a regular file is an
 * error saying what it is instead. */
#ifndef DP_REGULAR_FILE_H
#define DP_REGULAR_FILE_H

#include <stdint.h>
#include <stdio.h>

/* Opens path for reading ("rb", close-on-exec). On success returns the
 * stream and, if size is not NULL, its size in bytes. On failure returns
 * NULL with dp_errmsg() = "cannot open: <reason>" or "not a regular file
 * (it is a FIFO)"; callers put the file's name in front. */
FILE *dp_fopen_regular(const char *path, int64_t *size);

#endif

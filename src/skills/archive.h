/* archive.h - reading untrusted zip and tar uploads safely (libarchive).
 * Shared by skill installs (src/skills/skills.c) and archive uploads into a
 * box (src/rest/upload.c).
 *
 * ab_archive_walk checks every entry before the caller sees it: its path must
 * be relative, without "..", and is handed over normalised ("./a//b/" ->
 * "a/b"); only regular files and directories pass (symlinks, hard links,
 * devices, fifos and sockets are refused, naming the entry); the entry count,
 * each entry's size and the total size are bounded, counting the bytes really
 * decompressed (headers may lie). Errors: AB_E_INVALID for a bad entry or an
 * unreadable archive, AB_E_LIMIT for a limit. */
#ifndef AB_ARCHIVE_H
#define AB_ARCHIVE_H

#include "base/err.h"

#include <stdbool.h>
#include <stdint.h>

typedef enum {
        AB_ARCHIVE_ANY, /* sniffed: zip or tar (plain or gzip-compressed) */
        AB_ARCHIVE_ZIP,
        AB_ARCHIVE_TAR,
} ab_archive_format;

typedef struct ab_archive_limits {
        uint64_t max_entries;     /* entries of any kind */
        uint64_t max_entry_bytes; /* decompressed size of one file */
        uint64_t max_total_bytes; /* decompressed size of all files */
} ab_archive_limits;

typedef struct ab_archive_stats {
        uint64_t files, dirs, bytes;
} ab_archive_stats;

typedef struct ab_archive_reader ab_archive_reader;

/* Called for each checked entry. `path` is normalised and safe (see above);
 * `mode` is the entry's permission bits. For a file, the callback may read its
 * data with ab_archive_data; data it does not read is skipped. Return 0 to go
 * on, or -1 with *err set to stop the walk. */
typedef int (*ab_archive_fn)(void *ud, const char *path, bool is_dir, uint32_t mode,
                             ab_archive_reader *rd, ab_err **err);

/* Writes the current file entry's data to out_fd (-1: read and discard it,
 * which still checks the limits and the archive's integrity). */
int ab_archive_data(ab_archive_reader *rd, int out_fd, ab_err **err);

/* Reads the archive in fd from its start. fn may be NULL: then every file's
 * data is read and discarded, so a walk without fn checks the whole archive
 * (names, types, limits, checksums) without writing anything. `st` (may be
 * NULL) gets the counts. 0, or -1 with *err set. */
int ab_archive_walk(int fd, ab_archive_format fmt, const ab_archive_limits *lim, ab_archive_fn fn,
                    void *ud, ab_archive_stats *st, ab_err **err);

/* "zip" / "tar" / "auto" (or NULL) -> format; -1 for anything else. */
int ab_archive_format_parse(const char *s);
/* The format a Content-Type names: zip, tar (x-tar, gzip, x-gtar...), else ANY. */
ab_archive_format ab_archive_format_of_type(const char *content_type);

#endif

/* boxfs_int.h - what boxfs.c's walks share with boxfs_export.c. Private to
 * src/native/boxfs*.c. */
#ifndef AB_BOXFS_INT_H
#define AB_BOXFS_INT_H

#include "base/util.h"

#include <dirent.h>
#include <stdbool.h>
#include <sys/stat.h>

/* Deepest directory nesting walked: the frames are small, and the setup
 * process that shifts and seeds runs on a 512 KiB stack. */
#define MAX_DEPTH 512
#define IO_CHUNK  (64 * 1024)

/* Hard links met in a walk: the first path of each (dev, inode). */
typedef struct links {
        dev_t *dev;
        ino_t *ino;
        char **path;
        size_t n, cap;
} links;

/* The first path recorded for st's inode, or NULL (owned by l). */
const char *boxfs_links_find(const links *l, const struct stat *st);
/* Records path (copied) as the first of st's inode. */
void boxfs_links_add(links *l, const struct stat *st, const char *path);
/* Frees what l holds (l itself is the caller's). */
void boxfs_links_free(links *l);

/* A directory under dfd, never through a symlink: an fd or -errno. */
int boxfs_open_dir_at(int dfd, const char *name);
/* A directory stream on a dup of fd (the caller keeps fd); NULL with errno. */
DIR *boxfs_dir_of(int fd);
/* True for "." and "..". */
bool boxfs_dots(const char *n);
/* "dir/name", or name when dir is empty (the caller frees). */
char *boxfs_join(const char *dir, const char *name);

#endif

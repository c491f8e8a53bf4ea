/* binds.h - what a box's spec adds to its root at every start (base/mounts.h):
 * volumes (idmapped through the box's user namespace), host directories (not
 * idmapped), read-only paths and hidden paths. Runs in the box's setup
 * process (host root, in the box's private mount namespace) once the root is
 * built, before the box's init exists.
 *
 * The root holds the box's own writable layer, where the box may have left
 * symlinks (/mnt/vol -> /etc, -> /proc/1/root/...) before this start. So
 * every mount point is reached from an fd of the root with openat2
 * (RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS), missing
 * directories are made one component at a time below such fds, and mounts
 * are moved onto the resulting fd (move_mount with MOVE_MOUNT_T_EMPTY_PATH):
 * no path string is ever followed through the box's tree. */
#ifndef AB_BINDS_H
#define AB_BINDS_H

#include "base/err.h"
#include "base/mounts.h"
#include <sys/types.h>

/* One entry, its source resolved on the host: for VOLUME the volume's host
 * mount (volume.h), for HOST the canonical host directory. */
typedef struct ab_bind {
        ab_mount_kind kind;
        const char *host; /* VOLUME, HOST; else NULL */
        const char *path; /* inside the box, checked with ab_box_path_check */
        bool read_only;
        /* VOLUME: the folder of host mounted instead of host itself
         * (ab_volume_sub_check), or NULL. Its missing folders are made
         * (mode 0755); a symlink on the way may not lead out of host
         * (AB_E_INVALID). */
        const char *sub;
} ab_bind;

/* Applies binds[0..n) to the root at root_fd: volumes and host directories
 * first (sorted by path, so a parent comes before what is inside it), then
 * read-only paths, then hidden paths (they win over everything). A path
 * that crosses a symlink fails the start (AB_E_INVALID naming it); a missing
 * read-only or hidden path is skipped (nothing to protect). userns_fd: the
 * box's user namespace (volumes are idmapped through it); uid_base: host uid
 * of box root (owner of the directories made). */
int ab_binds_apply(int root_fd, const ab_bind *binds, size_t n, int userns_fd, uid_t uid_base,
                   ab_err **err);

/* An O_PATH fd of the directory at path (absolute, normalised) below
 * root_fd, for a mount to be moved onto: missing directories are made one
 * component at a time, each below the fd of its parent (owned by base, mode
 * 0755). A symlink the box left as the last component (where a mount goes,
 * hidden under it while the box ran) is replaced by a directory; a symlink
 * anywhere before it gives -ELOOP, a non-directory -ENOTDIR. Returns the fd
 * (the caller closes it) or -errno. Used for every mount of a box's start
 * (rootfs.c, binds.c, box.c) so that none follows the box's symlinks. */
int ab_mount_point(int root_fd, const char *path, uid_t base);

#endif

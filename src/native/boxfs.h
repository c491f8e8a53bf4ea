/* boxfs.h - work on the files of a box's disk, as host root, on a disk
 * mounted where the caller can reach it: the uid shift of a forked disk,
 * the first-start copy of an image's /workspace, and a box's writes as an
 * OCI layer (snapshots). Every walk is fd-relative and never follows a
 * symlink; nothing here crosses into another mount (each directory is
 * opened O_NOFOLLOW and checked against the device it was reached on). */
#ifndef AB_BOXFS_H
#define AB_BOXFS_H

#include "base/err.h"

#include <stdint.h>
#include <sys/types.h>

#define AB_BOXFS_RANGE 65536u /* uids (and gids) of one box: base .. base+65535 */

/* Changes every owner under the directory dirfd (itself included) that lies
 * in [from, from + AB_BOXFS_RANGE) to the same offset from `to`, uid and gid
 * apart, with lchown semantics (a symlink's own owner). setuid/setgid bits
 * that a chown clears are set again. Owners outside the range are left as
 * they are, so a second run (or a hard link met twice) changes nothing.
 * 0 or -errno. */
int ab_boxfs_shift(int dirfd, uid_t from, uid_t to);

/* Copies the tree under directory src into the existing, empty directory
 * dst: directories, regular files (hard links among them kept), symlinks;
 * owners, modes and times as in src. Device nodes, fifos and sockets are
 * left out. 0 or -errno. */
int ab_boxfs_copy_tree(int src, int dst);

/* Removes dfd/name, a file or a whole tree, never following a link. */
int ab_boxfs_rm_tree(int dfd, const char *name);

/* Writes an uncompressed OCI layer tar to out_fd: the tree `upper` (a
 * box's overlayfs upper layer) at the root of the layer, with overlayfs
 * whiteouts (0/0 character devices) written back as ".wh.NAME" entries and
 * opaque directories (trusted.overlay.opaque=y) as ".wh..wh..opq" in them;
 * then the tree `workspace` (may be -1) as "workspace/...". Owners are
 * written box-side (host uid - base; outside the box's range: 65534).
 * Regular files, directories, symlinks and hard links; user.* xattrs are
 * not carried. */
int ab_boxfs_export_layer(int upper, int workspace, uid_t base, int out_fd, ab_err **err);

#endif

/* loopdisk.h - a box's disk: a sparse ext4 image mounted through a loop
 * device. Holds the overlay upper layer and the workspace, so the size of the
 * image is a real quota on everything the box writes (ENOSPC at the limit). */
#ifndef AB_LOOPDISK_H
#define AB_LOOPDISK_H

#include "base/err.h"
#include <stdbool.h>
#include <sys/types.h>

/* Creates dirfd/name as a sparse file of size_mib MiB and formats it ext4
 * with no reserved blocks. mkfs runs once per size: the formatted image is
 * kept in cache_dfd as disk-MIB.img and each new disk copies only its data
 * extents (a few MiB), which is several times faster than mkfs. */
int ab_disk_create(int cache_dfd, int dirfd, const char *name, uint64_t size_mib, ab_err **err);

/* Spares: copies of a template made ahead of time (cache_dfd/spare-MIB.N.img,
 * synced before they get that name), so that ab_disk_create only has to
 * rename one into place: no copy and no sync on the way of a create. A
 * create takes one when there is one and copies the template otherwise. */
#define AB_DISK_SPARES 2

/* Makes the missing spares of this size (copy + fsync each). Slow: for a
 * background thread. */
int ab_disk_make_spares(int cache_dfd, uint64_t size_mib, ab_err **err);

/* Removes what a process that died while making a template or a spare left
 * in the cache (temporary files older than a minute). */
void ab_disk_sweep_cache(int cache_dfd);

/* Copies the disk image src into dst (a new, empty file): a reflink
 * (FICLONE: copy-on-write, nearly free) where the filesystem has them,
 * else the image's data extents (copy_file_range over SEEK_DATA/SEEK_HOLE:
 * holes stay holes). *cloned tells which. With durable, dst is synced. */
int ab_disk_clone(int src, int dst, bool durable, bool *cloned, ab_err **err);

/* Grows the image to size_mib (never shrinks); takes effect at the next mount. */
int ab_disk_resize(int dirfd, const char *name, uint64_t size_mib, ab_err **err);

/* Attaches the image to a free loop device (auto-clear on last close) and
 * mounts it at `target` (nosuid, nodev). The loop device detaches itself
 * once the last mount of it is gone. Call in a private mount namespace.
 * name NULL: dirfd is the image itself (opened read-write). */
int ab_disk_mount(int dirfd, const char *name, const char *target, ab_err **err);

/* The same with plain system calls and no allocation, for a child that
 * shares its parent's memory: 0, or -errno with the failed step in *what. */
int ab_disk_mount_raw(int dirfd, const char *name, const char *target, const char **what);

/* Whether `target` is the root of a mount of the image at `image` (an
 * absolute host path) through a loop device. */
bool ab_disk_mounted_at(const char *image, const char *target);

/* Mounts the image dirfd/name (whose absolute path is `image`) at target
 * like ab_disk_mount, unless target already is a mount of it (then 0). When
 * a loop device is already attached to the image (a mount of it in another
 * mount namespace, or one a box still holds), that device is mounted, so the
 * kernel shares its one file system: one image is never mounted through two
 * devices (two ext4 mounts of one image corrupt it). The caller serialises
 * mounts of one image (a lock). */
int ab_disk_mount_once(int dirfd, const char *name, const char *image, const char *target,
                       ab_err **err);

#endif

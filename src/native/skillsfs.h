/* skillsfs.h - the skills folder on a file system of its own.
 *
 *   DATA/skills.img     a sparse ext4 image (loopdisk.h), made once
 *   DATA/skills/        where it is mounted in the host's mount namespace
 *                       (nosuid, nodev), once, when the data folder is opened
 *   DATA/skills/.staging  installs in progress (same file system, for
 *                       renames; hidden from listings and from boxes)
 *   DATA/.skills.lock   flock: one opener at a time (server and CLIs)
 *   DATA/.skills-old.*  a plain skills folder being moved into the image
 *
 * Boxes bind DATA/skills, so the root of their bind, which a box reads in
 * /proc/self/mountinfo, is "/" of that file system instead of a host path.
 * A plain DATA/skills with skills in it (a data folder of an older version,
 * or skills put there by hand while the image was not mounted) is renamed
 * to .skills-old.*, the image mounted, and every skill the image lacks
 * copied into it (staged, then renamed in) before the old folder goes: a
 * crash at any step leaves the skills in the old folder or in the image,
 * and the next open goes on. */
#ifndef AB_SKILLSFS_H
#define AB_SKILLSFS_H

#include "base/err.h"
#include <stdint.h>

typedef enum {
        AB_SKILLSFS_IMAGE = 1, /* DATA/skills is a mount of DATA/skills.img */
        AB_SKILLSFS_OTHER,     /* DATA/skills is a mount of something else (the admin's) */
        AB_SKILLSFS_PLAIN,     /* a plain directory: this host cannot loop-mount (warned) */
} ab_skillsfs_kind;

#define AB_SKILLSFS_STAGING ".staging"

/* Makes sure DATA/skills is the skills file system (see above): creates the
 * image of size_mib MiB (cache_fd: loopdisk's template cache) when there is
 * none, mounts it unless it is mounted there already, and finishes a
 * migration. data is the data folder's absolute path, data_fd an fd of it.
 * When the host has no loop devices or no mkfs.ext4, DATA/skills stays a
 * plain directory (AB_SKILLSFS_PLAIN, a warning in the log). */
int ab_skillsfs_open(int data_fd, const char *data, int cache_fd, uint64_t size_mib,
                     ab_skillsfs_kind *kind, ab_err **err);

/* Unmounts DATA/skills when it is the mount of DATA/skills.img, under the
 * same lock as ab_skillsfs_open; its loop device goes with the last mount
 * of it (a box still running keeps its own). For a server that stops
 * while no box needs the skills any more: the next ab_skillsfs_open mounts
 * it again (on the loop device a box still holds, if any). 1 when it
 * unmounted, 0 when there was nothing to unmount (no data folder, not
 * mounted, a plain folder or the admin's own mount); AB_E_CONFLICT while a
 * file is open on it. */
int ab_skillsfs_unmount(const char *data, ab_err **err);

/* Removes what installs of dead processes left in DATA/skills/.staging
 * (entries are named NAME.PID.*). */
void ab_skillsfs_sweep_staging(int skills_fd);

#endif

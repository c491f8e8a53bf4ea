/* rootfs.h - builds a box's root filesystem under BOX_DIR/root. Runs in the
 * box's setup process: host root, in a private mount namespace, before the
 * box's other namespaces exist (see docs/architecture.md, "Starting a box").
 *
 *   BOX_DIR/disk   the box's ext4 disk (loopdisk.h): upper/ work/ workspace/ uploads/ outputs/
 *   BOX_DIR/mask   tmpfs: whiteouts and opaque directories that hide host paths
 *   BOX_DIR/lower  the base (host "/", a rootfs dir or each layer of an image),
 *                  idmapped so host uid N appears as N inside the box, read-only
 *   BOX_DIR/root   overlay(lower = mask:lower, upper = disk/upper) plus binds of
 *                  /workspace, /mnt/user-data/{workspace,uploads,outputs}, /mnt/skills, /skills
 * (read-only), tmpfs /tmp /run /dev (with null zero full random urandom tty). /proc and /dev/pts
 * are mounted later by the box's init-to-be, inside its namespaces.
 *
 * The root's upper layer is the box's and survives stops, so below BOX/root
 * every mount is made with the new mount API and moved onto an fd of its
 * mount point reached without following symlinks (ab_mount_point, binds.h):
 * a symlink the box left where a mount goes is replaced, one higher up fails
 * the build (AB_E_INVALID naming the box path). */
#ifndef AB_ROOTFS_H
#define AB_ROOTFS_H

#include "base/err.h"
#include "native/binds.h"
#include "native/hide.h"
#include <sys/types.h>

typedef struct ab_rootfs_spec {
        const char *box_dir; /* absolute */
        const char *base;    /* "/" = curated host base, else a rootfs directory */
        /* An image's layer trees (absolute, bottom first, NULL-terminated):
         * when set, the root is mask/skel over them and base is unused. */
        const char *const *layers;
        const char *skills_dir; /* shown read-only at /mnt/skills and /skills; may be NULL */
        const char *hostname;   /* host base: the box's /etc/hostname and /etc/hosts name it */
        const char *const
            *hide;      /* absolute host paths never to show (data dir...), NULL-terminated */
        uid_t uid_base; /* host uid (and gid) of root inside the box */
        /* Whose files a disk without its own record of that holds (a fork's
         * copy of another box's disk: that box's uid_base); 0 = uid_base. */
        uid_t disk_uid_base;
        int userns_fd;    /* a user namespace mapping 0..65535 to uid_base.. */
        uint64_t tmp_mib; /* size of /tmp */
        /* host base: what the shared layers hide (hide.h; relative to /). */
        const ab_hide_list *unreadable;
        /* Called while the disk is being mounted (by a helper), for the
         * caller's own work meanwhile; may be NULL. Non-zero fails the build. */
        int (*while_mounting)(void *ud, ab_err **err);
        void *ud;
        /* Volumes, host directories, read-only and hidden paths (binds.h),
         * applied last. */
        const ab_bind *binds;
        size_t n_binds;
} ab_rootfs_spec;

/* Mounts everything listed above. On the way, the disk's files are given
 * to uid_base when they belong to another range (a fork: the disk records
 * its owner in BOX_DIR/disk/.uid_base), and a fresh disk of an image box
 * gets a copy of the image's /workspace (the box's /workspace is the
 * disk's).  On failure the caller's mount namespace is
 * simply discarded, so no cleanup of partial mounts is needed. */
int ab_rootfs_build(const ab_rootfs_spec *s, ab_err **err);

/* The host paths a box on the host base shares (relative to /: "usr",
 * "etc", "var/lib/dpkg", ...), NULL-terminated, static. What hide.h walks. */
const char *const *ab_rootfs_shared(void);

/* Makes the box-side directories on a freshly mounted disk (idempotent). */
int ab_rootfs_prepare_disk(const char *disk_dir, uid_t uid_base, ab_err **err);

#endif

/* mounts.h - what a box's spec adds to its root at every start: named
 * volumes, host directories, read-only paths and hidden paths; and the
 * checks on the paths inside the box they apply to. */
#ifndef AB_MOUNTS_H
#define AB_MOUNTS_H

#include "base/err.h"
#include <stdbool.h>
#include <stddef.h>

typedef enum {
        AB_MOUNT_VOLUME = 1, /* a named volume, idmapped with the box's user namespace */
        AB_MOUNT_HOST,       /* a host directory (admin only), not idmapped */
        AB_MOUNT_READONLY,   /* the box's own path, bound read-only over itself */
        AB_MOUNT_BLOCKED,    /* the box's own path, hidden (empty read-only) */
} ab_mount_kind;

typedef struct ab_box_mount {
        ab_mount_kind kind;
        /* VOLUME: the volume's name; HOST: the host directory (canonical,
         * absolute); READONLY, BLOCKED: NULL. */
        const char *source;
        const char *path; /* inside the box: absolute and normalised (ab_box_path_check) */
        bool read_only;   /* VOLUME, HOST */
        /* VOLUME: a folder of the volume mounted instead of its root
         * (ab_volume_sub_check; made when missing, as Kubernetes makes a
         * subPath), or NULL for the root. */
        const char *sub;
} ab_box_mount;

#define AB_MOUNTS_MAX 64

/* Volume names: [a-z0-9][a-z0-9_.-]{0,62}. AB_E_INVALID otherwise. */
int ab_volume_name_check(const char *name, ab_err **err);
/* A folder of a volume (sub_path, OpenSandbox's subPath): relative, its
 * names separated by single '/', none of them "." or "..", no trailing '/',
 * at most 1024 bytes. AB_E_INVALID otherwise. Symlinks inside the volume
 * are checked when it is mounted (they may not lead out of it). */
int ab_volume_sub_check(const char *sub, ab_err **err);

/* Checks a path inside the box for a mount of this kind: absolute,
 * normalised (no "//", ".", ".." or trailing "/"), at most 1024 bytes, not
 * "/", not /proc, /dev, /sys or below them; volumes and host directories
 * may not replace the box's own /workspace and /mnt/user-data folders
 * either (inside them is fine). READONLY and BLOCKED accept exactly /proc,
 * /dev and /sys as no-ops (the box's are already its own, read-only or
 * empty). AB_E_INVALID with the reason. */
int ab_box_path_check(const char *path, ab_mount_kind kind, ab_err **err);

/* True when path is one of READONLY/BLOCKED's accepted no-ops. */
bool ab_box_path_noop(const char *path);

/* Checks a whole list: each path, and no two volumes or host directories
 * on one path. */
int ab_box_mounts_check(const ab_box_mount *m, size_t n, ab_err **err);

const char *ab_mount_kind_name(ab_mount_kind k);

#endif

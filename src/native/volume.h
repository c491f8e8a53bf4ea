/* volume.h - named volumes: disks that outlive boxes and that several boxes
 * may use at once.
 *
 *   DATA/volumes/NAME/volume.json  name, size_mib, created_at, owner (written
 *                                  once, synced, before NAME gets its name)
 *   DATA/volumes/NAME/disk.img     a sparse ext4 image (loopdisk.h): the
 *                                  volume's size is a real quota
 *   DATA/volumes/NAME/mnt          where the image is mounted, once, in the
 *                                  host's mount namespace (nosuid, nodev),
 *                                  when a box first needs it
 *   DATA/volumes/NAME/lock         flock: create of a box using it, mount, delete
 *   DATA/volumes/.new.* .del.*     volumes being made or removed (swept at open)
 *
 * Files are stored with the uids boxes see (0..65535): each box binds the
 * mount idmapped through its own user namespace (native/mounts.h). One
 * image is never mounted twice (two mounts of one ext4 image through two
 * loop devices would corrupt it): a mount reuses a loop device already
 * attached to the image. */
#ifndef AB_VOLUME_H
#define AB_VOLUME_H

#include "base/err.h"
#include <stdbool.h>
#include <stdint.h>

typedef struct ab_vols ab_vols;

typedef struct ab_vol_rec {
        char name[64];
        uint64_t size_mib;
        int64_t created_at;  /* unix seconds */
        char *owner;         /* opaque (the app that made it), or NULL */
        uint64_t used_bytes; /* in use in its file system when mounted, else the image's */
        bool mounted;
} ab_vol_rec;

/* Opens DATA/volumes (made if missing) and sweeps what killed creates and
 * deletes left. data: the data folder (absolute); cache_fd: loopdisk's
 * template cache (borrowed). */
int ab_vols_open(const char *data, int cache_fd, ab_vols **out, ab_err **err);
void ab_vols_free(ab_vols *v);

/* Makes a volume: AB_E_CONFLICT when the name exists, AB_E_INVALID for a
 * bad name or size. Atomic: a crash leaves the volume whole or absent. */
int ab_vol_create(ab_vols *v, const char *name, uint64_t size_mib, const char *owner, ab_err **err);

/* Reads a volume's record (caller clears). AB_E_NOT_FOUND when absent. */
int ab_vol_get(ab_vols *v, const char *name, ab_vol_rec *out, ab_err **err);
void ab_vol_rec_clear(ab_vol_rec *r);

/* The names of every volume, sorted, NULL-terminated (free with ab_strvfreep). */
int ab_vol_names(ab_vols *v, char ***out, ab_err **err);

/* Locks the volume exclusively (a blocking flock on its lock file) and
 * returns the lock's fd (close it to unlock). AB_E_NOT_FOUND when absent. */
int ab_vol_lock(ab_vols *v, const char *name, ab_err **err);

/* With the lock held: makes sure the image is mounted at its mnt (mounting
 * it when needed) and returns that path (caller frees). */
char *ab_vol_mount_locked(ab_vols *v, const char *name, ab_err **err);

/* With the lock held: unmounts it from the host and removes it. The caller
 * has made sure no box uses it. */
int ab_vol_remove_locked(ab_vols *v, const char *name, ab_err **err);

#endif

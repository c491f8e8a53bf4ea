/* state.h - what a native box records under DATA/boxes/ID/:
 *   config.json  written once at create (id, limits, uid base, rootfs or an
 *                image's layers, created_at)
 *   state.json   present while the box runs (init pid + start time, started_at),
 *                or holding {"error": ...} after a failed start.
 * Both are replaced atomically (write temp, rename), so a crash of a process
 * leaves either the old or the new file, never half of one. config.json is
 * synced before its rename (it must survive a host crash); state.json is not
 * (it describes processes, which a host crash ends), and an empty one - what
 * a host crash can leave - reads as absent. */
#ifndef AB_STATE_H
#define AB_STATE_H

#include "base/err.h"
#include "base/limits.h"
#include "base/mounts.h"
#include <sys/types.h>

typedef struct ab_box_config {
        char id[64];
        ab_limits limits;
        uid_t uid_base;
        char *rootfs;        /* NULL = host base */
        char **layers;       /* an image's layer trees, bottom first, NULL-terminated; or NULL */
        char *image;         /* the image's id when layers are set, else NULL */
        uid_t disk_uid_base; /* a fork: the uid_base its disk's files came with; else 0 */
        int64_t created_at;
        /* Volumes, host directories, read-only and hidden paths, applied at
         * every start; the strings are owned (on read) or borrowed (on write). */
        ab_box_mount *mounts;
        size_t n_mounts;
} ab_box_config;

typedef struct ab_box_state {
        pid_t init_pid;
        uint64_t init_start;
        int64_t started_at;
        char *error; /* non-NULL: the last start failed */
} ab_box_state;

int ab_box_config_write(int boxfd, const ab_box_config *c, ab_err **err);
/* AB_E_NOT_FOUND when the file is missing (a box still being created). */
int ab_box_config_read(int boxfd, ab_box_config *c, ab_err **err);
void ab_box_config_clear(ab_box_config *c);

int ab_state_write(int boxfd, const ab_box_state *s, ab_err **err);
/* Returns 0 and fills *s, or 1 when there is no state file (stopped). */
int ab_state_read(int boxfd, ab_box_state *s, ab_err **err);
int ab_state_remove(int boxfd);
void ab_state_clear(ab_box_state *s);

#endif

/* hide.h - which host files of the shared layers (/etc, /usr, var/lib/dpkg,
 * ...) a box must not see: every entry no unprivileged host user could read
 * (private keys, service configs, debconf's passwords, apt's partial dirs)
 * and a deny list under /etc (shadow, gshadow, mailname, ...). The shared
 * layers map host root to box root, which has CAP_DAC_OVERRIDE over them,
 * so file modes alone do not keep such files from a box. rootfs.c turns the
 * list into whiteouts in each layer's mask.
 *
 * Walking the layers is the slowest part of building a rootfs, so a watch keeps
 * the result and walks again only when the host changed: inotify on every
 * directory the walk read (entries created, removed, renamed, chmod'ed or
 * chown'ed) and the mount table (poll on /proc/self/mountinfo; a change
 * counts only when a mount on, below or above a walked directory came or
 * went, since the host mounts often elsewhere: each box's volumes, skills).
 * Each watch is set before its directory is read, and the mount table noted
 * before the walk, so no change that completed before ab_hide_get() returns
 * can be missed. A walk of /usr and the rest reads some 160,000 entries
 * (about half a second of CPU).
 *
 * A process that does not watch (the CLI: one start, then it exits) starts
 * from the last walk instead, persisted in the data folder by whichever
 * process walked (ab_hide_watch_persist): it re-stats each directory that
 * walk saw (some 17,000 for the shared layers, not 160,000 entries) and
 * reads again only those whose (dev, ino, mtime, ctime) changed (an entry
 * added, removed or renamed changes its directory's mtime, a chmod or chown
 * of a directory its ctime) and directories that are new, whole; a
 * directory changed within 2 s of the walk that saw it is never trusted
 * (timestamps are coarse). A watching process's first walk starts from it
 * too, its watches set before each directory is checked, and it walks
 * fully at its first ab_hide_get() once that is max_age_s old. What a
 * directory's stat cannot show, a chmod or chown of an existing file in
 * place, is bounded in time: a walk that did not stat every entry is
 * trusted for max_age_s (AB_HIDE_CACHE_MAX_AGE_S) after the last walk that
 * did, and a watching server walks fully after every change it is told of
 * and persists that. The persisted walk is also keyed on the boot, the
 * watch's dirs and the mounts that matter; anything else (missing, corrupt,
 * truncated, another version) means a full walk. */
#ifndef AB_HIDE_H
#define AB_HIDE_H

#include "base/err.h"
#include <stdatomic.h>
#include <stddef.h>

/* The paths to hide, relative to the watch's root, at one moment. Immutable and
 * reference-counted: a start keeps its copy while the watch moves on. */
typedef struct ab_hide_list {
        size_t n;
        char **rel;
        atomic_int refs;
} ab_hide_list;

typedef struct ab_hide_watch ab_hide_watch;

/* How long (seconds) a walk that re-stat'ed only directories is trusted
 * after the last full walk: the bound on a file chmod'ed in place. */
#define AB_HIDE_CACHE_MAX_AGE_S 600

/* A watch over root/dirs[i] for each i (dirs NULL-terminated, relative to
 * root; "" is root itself; a dir that is missing or a symlink is not walked,
 * and noticed when it appears); the deny list applies below root/deny_dir.
 * Entries are relative to root ("etc/shadow"); a dir nobody else may enter
 * is an entry itself. The server uses root "/" and the shared layers
 * (ab_rootfs_shared), deny_dir "etc". Never fails: when inotify is
 * unavailable (no instances or watches left), every ab_hide_get() checks
 * the directories of the last walk again, as a one-shot watch does (see
 * above). Copies its arguments. */
ab_hide_watch *ab_hide_watch_new_dirs(const char *root, const char *const *dirs,
                                      const char *deny_dir);

/* A watch over the whole of `etc`, entries relative to it, the deny list
 * applied there (tests point it at a fake tree). */
ab_hide_watch *ab_hide_watch_new(const char *etc);
void ab_hide_watch_free(ab_hide_watch *w);

/* The current list (a new reference, release with ab_hide_list_unref);
 * walks again first when anything changed since the last walk. Thread-safe.
 * NULL with *err when the walk fails. */
ab_hide_list *ab_hide_get(ab_hide_watch *w, ab_err **err);
void ab_hide_list_unref(ab_hide_list *l);

/* How many times the watch has walked (for tests and diagnostics). */
unsigned ab_hide_walks(ab_hide_watch *w);

/* Persists every walk at `path` (a file in the data folder; 0600, written to
 * a temp file beside it and renamed, so concurrent writers never mix) and
 * lets a walk that nothing watched start from it, trusting it for
 * max_age_s (see above). Failing to read or write it only costs a full
 * walk. Call before the first ab_hide_get. Copies path. */
void ab_hide_watch_persist(ab_hide_watch *w, const char *path, unsigned max_age_s);

/* No inotify (a process that makes one start and exits: some 17,000
 * watches would cost more than they save); every ab_hide_get then checks
 * the directories of the last walk again. Call before the first ab_hide_get. */
void ab_hide_watch_one_shot(ab_hide_watch *w);

/* Of the last walk: directories read, and directories trusted unread
 * (for tests and diagnostics). */
void ab_hide_last_walk(ab_hide_watch *w, unsigned *read, unsigned *kept);

#endif

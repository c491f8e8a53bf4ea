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
 * (about half a second of CPU). */
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

/* A watch over root/dirs[i] for each i (dirs NULL-terminated, relative to
 * root; "" is root itself; a dir that is missing or a symlink is not walked,
 * and noticed when it appears); the deny list applies below root/deny_dir.
 * Entries are relative to root ("etc/shadow"); a dir nobody else may enter
 * is an entry itself. The server uses root "/" and the shared layers
 * (ab_rootfs_shared), deny_dir "etc". Never fails: when inotify is
 * unavailable (no instances or watches left), every ab_hide_get() walks
 * again, as if the host changed each time. Copies its arguments. */
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

#endif

/* layer.c - unpacking one image layer tar into an overlayfs lower directory.
 *
 * Every entry is made relative to a directory fd that was opened without
 * following a symlink: parents by openat2 RESOLVE_IN_ROOT|RESOLVE_NO_SYMLINKS
 * (or a walk of O_NOFOLLOW|O_DIRECTORY opens when a parent must be made), the
 * entry itself by *at() calls that do not follow it. Data is counted as
 * libarchive decompresses it, so a header cannot lie about sizes. */
#include "image/layer.h"
#include "base/codec.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/openat2.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>

#define NAME_MAX_SHOWN 200
#define PATH_MAX_LEN   4096
#define COMP_MAX_LEN   255
#define CHUNK          (64 * 1024)
#define WH_PREFIX      ".wh."
#define WH_META        ".wh..wh."
#define WH_OPAQUE      ".wh..wh..opq"
#define OVL_OPAQUE     "trusted.overlay.opaque"

/* A directory's times, set when every entry is in (a child changes them). */
typedef struct dir_time {
        char *path;
        struct timespec ts[2];
} dir_time;

/* The paths of the regular files this layer made: a hard link may name only these. */
typedef struct path_set {
        char **slot;
        size_t cap, n;
} path_set;

typedef struct unpack {
        struct archive *a;
        int root; /* dest, opened O_RDONLY|O_DIRECTORY here */
        uint64_t max_bytes, max_entries;
        uint64_t data; /* entry data decompressed, written or not */
        ab_layer_stats st;
        const char *shown; /* the entry's name as the tar gives it, for messages */
        char *pdir;        /* the last entry's directory, open as pfd */
        int pfd;           /* -1 when none */
        bool pstale;       /* a directory was removed since pfd was opened */
        dir_time *dirs;
        size_t n_dirs, cap_dirs;
        path_set files;
        char buf[CHUNK];
} unpack;

/* ---- names --------------------------------------------------------------- */

/* The entry's name for a message: cut, control characters replaced. */
static char *shown_name(const char *raw)
{
        if (!raw)
                return xstrdup("(unnamed)");
        size_t n = strlen(raw);
        char *s = xstrndup(raw, n > NAME_MAX_SHOWN ? NAME_MAX_SHOWN : n);
        for (char *c = s; *c; c++)
                if ((unsigned char)*c < 0x20 || *c == 0x7f)
                        *c = '?';
        if (n > NAME_MAX_SHOWN) {
                char *t = xasprintf("%s...", s);
                free(s);
                s = t;
        }
        return s;
}

/* Normalises a name of the tar ("./a//b/" -> "a/b"). Returns NULL with *out
 * set, *out NULL for the layer's root ("." or "./"), or why the name is
 * refused. */
static const char *clean_path(const char *raw, char **out)
{
        *out = NULL;
        if (!raw || !*raw)
                return "has no name";
        if (raw[0] == '/')
                return "is an absolute path";
        size_t len = strlen(raw);
        if (len > PATH_MAX_LEN)
                return "has a path longer than 4096 bytes";
        _cleanup_free_ char *res = xmalloc(len + 1);
        size_t o = 0;
        for (const char *p = raw; *p;) {
                size_t n = strcspn(p, "/");
                if (n == 2 && p[0] == '.' && p[1] == '.')
                        return "has a \"..\" component";
                if (n > COMP_MAX_LEN)
                        return "has a path component longer than 255 bytes";
                if (n && !(n == 1 && p[0] == '.')) {
                        if (o)
                                res[o++] = '/';
                        memcpy(res + o, p, n);
                        o += n;
                }
                p += n;
                while (*p == '/')
                        p++;
        }
        res[o] = 0;
        if (o)
                *out = steal_pointer(&res);
        return NULL;
}

/* Splits a clean path in place into its parent ("" for the root) and its last name. */
static const char *split_leaf(char *path, const char **dir)
{
        char *slash = strrchr(path, '/');
        if (!slash) {
                *dir = "";
                return path;
        }
        *slash = 0;
        *dir = path;
        return slash + 1;
}

/* ---- the set of files ------------------------------------------------------ */

static size_t hash_path(const char *s)
{
        uint64_t h = 1469598103934665603ull;
        for (; *s; s++)
                h = (h ^ (unsigned char)*s) * 1099511628211ull;
        return (size_t)(h ^ (h >> 32));
}

static char **set_find(const path_set *s, const char *path)
{
        size_t i = hash_path(path) & (s->cap - 1);
        while (s->slot[i] && strcmp(s->slot[i], path))
                i = (i + 1) & (s->cap - 1);
        return &s->slot[i];
}

static bool set_has(const path_set *s, const char *path)
{
        return s->cap && *set_find(s, path);
}

static void set_add(path_set *s, const char *path)
{
        if ((s->n + 1) * 2 > s->cap) {
                path_set big = {.cap = s->cap ? xmul(s->cap, 2) : 64, .n = s->n};
                big.slot = xcalloc(big.cap, sizeof(char *));
                for (size_t i = 0; i < s->cap; i++)
                        if (s->slot[i])
                                *set_find(&big, s->slot[i]) = s->slot[i];
                free(s->slot);
                *s = big;
        }
        char **p = set_find(s, path);
        if (!*p) {
                *p = xstrdup(path);
                s->n++;
        }
}

static void set_free(path_set *s)
{
        for (size_t i = 0; i < s->cap; i++)
                free(s->slot[i]);
        free(s->slot);
        *s = (path_set){0};
}

/* ---- errors --------------------------------------------------------------- */

/* A failed system call on behalf of an entry: a full disk is the host's
 * problem (AB_E_STORAGE), what the layer's shape provokes is the layer's. */
static int sys_fail(unpack *u, int errnum, const char *what, ab_err **err)
{
        ab_code code;
        switch (errnum) {
        case ENOSPC:
        case EDQUOT:
                code = AB_E_STORAGE;
                break;
        case EINVAL:
        case ENAMETOOLONG:
        case ELOOP:
        case ENOTDIR:
        case EEXIST:
        case ENOTEMPTY:
        case EISDIR:
        case ENOENT:
        case EMLINK:
        case E2BIG:
        case ERANGE:
        case EXDEV:
                code = AB_E_INVALID;
                break;
        default:
                code = AB_E_INTERNAL;
        }
        return ab_err_set(err, code, errnum, "layer entry \"%s\": %s", u->shown, what);
}

/* ---- fd-relative file system work ----------------------------------------- */

static int open_nofollow_dir(int dfd, const char *name)
{
        for (;;) {
                int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (fd >= 0)
                        return fd;
                if (errno != EINTR)
                        return -errno;
        }
}

/* -ELOOP when dfd/name is a symlink, else -ENOTDIR: why it is no directory. */
static int why_not_dir(int dfd, const char *name)
{
        struct stat st;
        if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
                return -ELOOP;
        return -ENOTDIR;
}

/* Opens the directory dir (a clean path, "" for the root) under root without
 * following a symlink, making missing components (0755, owned by us) when
 * create. Returns the fd or -errno: -ELOOP when a component is a symlink,
 * -ENOTDIR when it is something else than a directory. */
static int open_dir(int root, const char *dir, bool create)
{
        if (!*dir)
                return open_nofollow_dir(root, ".");
        struct open_how how = {
            .flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC,
            .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
        };
        long fd;
        do
                fd = syscall(SYS_openat2, root, dir, &how, sizeof(how));
        while (fd < 0 && (errno == EINTR || errno == EAGAIN));
        if (fd >= 0)
                return (int)fd;
        /* The walk below also tells a symlink (-ELOOP) from a file (-ENOTDIR). */
        if (errno != ENOSYS && errno != ELOOP && errno != ENOTDIR && (errno != ENOENT || !create))
                return -errno;

        /* Component by component, each opened O_NOFOLLOW|O_DIRECTORY. */
        _cleanup_free_ char *copy = xstrdup(dir);
        int cur = open_nofollow_dir(root, ".");
        if (cur < 0)
                return cur;
        for (char *c = copy, *next; c; c = next) {
                next = strchr(c, '/');
                if (next)
                        *next++ = 0;
                int nfd = open_nofollow_dir(cur, c);
                if (nfd == -ENOENT && create) {
                        if (mkdirat(cur, c, 0700) < 0 && errno != EEXIST) {
                                nfd = -errno;
                        } else {
                                nfd = open_nofollow_dir(cur, c);
                                if (nfd >= 0 && fchmod(nfd, 0755) < 0) {
                                        int e = -errno;
                                        close(nfd);
                                        nfd = e;
                                }
                        }
                }
                if (nfd == -ENOTDIR || nfd == -ELOOP)
                        nfd = why_not_dir(cur, c);
                close(cur);
                if (nfd < 0)
                        return nfd;
                cur = nfd;
        }
        return cur;
}

/* The names of a directory's subdirectories that were not empty. */
typedef struct pending {
        char **names;
        size_t n, next;
} pending;

static void pending_clear(pending *p)
{
        for (size_t i = 0; i < p->n; i++)
                free(p->names[i]);
        free(p->names);
}

/* Removes what dfd holds but its non-empty subdirectories, whose names it
 * returns in *out. */
static int sweep(int dfd, pending *out)
{
        *out = (pending){0};
        int dup = fcntl(dfd, F_DUPFD_CLOEXEC, 0);
        if (dup < 0)
                return -errno;
        DIR *d = fdopendir(dup);
        if (!d) {
                int r = -errno;
                close(dup);
                return r;
        }
        size_t cap = 0;
        struct dirent *de;
        int r = 0;
        while ((de = readdir(d))) {
                const char *n = de->d_name;
                if (!strcmp(n, ".") || !strcmp(n, ".."))
                        continue;
                if (unlinkat(dfd, n, 0) == 0 || errno == ENOENT)
                        continue;
                if (errno == EISDIR && unlinkat(dfd, n, AT_REMOVEDIR) == 0)
                        continue;
                if (errno != ENOTEMPTY && errno != EEXIST) {
                        r = -errno;
                        break;
                }
                if (out->n == cap) {
                        cap = cap ? xmul(cap, 2) : 8;
                        out->names = xrealloc(out->names, xmul(cap, sizeof(char *)));
                }
                out->names[out->n++] = xstrdup(n);
        }
        closedir(d);
        return r;
}

/* Removes everything inside the directory top (taken over, closed here),
 * never following a symlink. Each directory is read once, and two fds are
 * open at any depth: it goes down by name and back up by "..". */
static int empty_dir(int top)
{
        int cur = top;
        pending *stack = NULL;
        size_t depth = 0, cap = 0;
        int r = 0;
        for (;;) {
                if (depth == cap) {
                        cap = cap ? xmul(cap, 2) : 16;
                        stack = xrealloc(stack, xmul(cap, sizeof(*stack)));
                }
                r = sweep(cur, &stack[depth]);
                depth++;
                if (r < 0)
                        break;
                /* Down into the next non-empty subdirectory, up when none is left. */
                pending *p = &stack[depth - 1];
                while (p->next == p->n && depth > 1) {
                        int up = open_nofollow_dir(cur, "..");
                        if (up < 0) {
                                r = up;
                                break;
                        }
                        close(cur);
                        cur = up;
                        pending_clear(p);
                        p = &stack[--depth - 1];
                        if (unlinkat(cur, p->names[p->next - 1], AT_REMOVEDIR) < 0) {
                                r = -errno;
                                break;
                        }
                }
                if (r < 0 || p->next == p->n)
                        break;
                int down = open_nofollow_dir(cur, p->names[p->next++]);
                if (down < 0) {
                        r = down;
                        break;
                }
                close(cur);
                cur = down;
        }
        close(cur);
        while (depth)
                pending_clear(&stack[--depth]);
        free(stack);
        return r;
}

/* Removes dfd/name whatever it is (a directory with all it holds). Returns
 * 1 when it removed a directory, 0 when something else or nothing, or -errno. */
static int remove_any(int dfd, const char *name)
{
        struct stat st;
        if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return errno == ENOENT ? 0 : -errno;
        if (!S_ISDIR(st.st_mode))
                return unlinkat(dfd, name, 0) < 0 && errno != ENOENT ? -errno : 0;
        int fd = open_nofollow_dir(dfd, name);
        if (fd < 0)
                return fd;
        int r = empty_dir(fd);
        if (r < 0)
                return r;
        return unlinkat(dfd, name, AT_REMOVEDIR) < 0 ? -errno : 1;
}

/* ---- the directory of an entry --------------------------------------------- */

static void drop_parent(unpack *u)
{
        if (u->pfd >= 0)
                close(u->pfd);
        u->pfd = -1;
        free(u->pdir);
        u->pdir = NULL;
}

/* The directory dir of an entry, made when missing, opened without following
 * a symlink. Kept open (owned by u) for the next entries in the same
 * directory, as tars list them, until a directory is removed: the path might
 * then name another one. */
static int parent_dir(unpack *u, const char *dir)
{
        if (u->pfd >= 0 && !u->pstale && !strcmp(u->pdir, dir))
                return u->pfd;
        drop_parent(u);
        int fd = open_dir(u->root, dir, true);
        if (fd < 0)
                return fd;
        u->pfd = fd;
        u->pdir = xstrdup(dir);
        u->pstale = false;
        return fd;
}

/* Clears pfd/name for a new entry (or a whiteout) of that name. */
static int clear_place(unpack *u, int pfd, const char *name, ab_err **err)
{
        int r = remove_any(pfd, name);
        if (r < 0)
                return sys_fail(u, -r, "remove what it replaces", err);
        if (r > 0)
                u->pstale = true;
        return 0;
}

/* ---- entries --------------------------------------------------------------- */

/* Reads the entry's data to its end, counting it against max_bytes, and
 * writes it to fd (-1: dropped). */
static int copy_data(unpack *u, int fd, ab_err **err)
{
        for (;;) {
                la_ssize_t n = archive_read_data(u->a, u->buf, sizeof(u->buf));
                if (n == 0)
                        return 0;
                if (n < 0)
                        return ab_err_set(err, AB_E_INVALID, 0, "layer entry \"%s\": %s", u->shown,
                                          archive_error_string(u->a));
                u->data += (uint64_t)n;
                if (u->data > u->max_bytes)
                        return ab_err_set(err, AB_E_LIMIT, 0,
                                          "layer unpacks to more than %" PRIu64 " bytes",
                                          u->max_bytes);
                if (fd < 0)
                        continue;
                int r = ab_write_all(fd, u->buf, (size_t)n);
                if (r < 0)
                        return sys_fail(u, -r, "write", err);
                u->st.bytes += (uint64_t)n;
        }
}

/* The entry's owner, refused when it does not fit a uid_t (-1 means "unchanged"). */
static int entry_owner(unpack *u, struct archive_entry *e, uid_t *uid, gid_t *gid, ab_err **err)
{
        la_int64_t ou = archive_entry_uid(e), og = archive_entry_gid(e);
        if (ou < 0 || og < 0 || ou >= UINT32_MAX || og >= UINT32_MAX)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "layer entry \"%s\" has an owner out of range (%" PRId64
                                  ":%" PRId64 ")",
                                  u->shown, (int64_t)ou, (int64_t)og);
        *uid = (uid_t)ou;
        *gid = (gid_t)og;
        return 0;
}

/* atime and mtime of the entry (atime = mtime when the tar has none); left
 * alone when the tar has no mtime. */
static void entry_times(struct archive_entry *e, struct timespec ts[2])
{
        if (!archive_entry_mtime_is_set(e)) {
                ts[0] = ts[1] = (struct timespec){.tv_nsec = UTIME_OMIT};
                return;
        }
        long ns = archive_entry_mtime_nsec(e);
        ts[1] = (struct timespec){.tv_sec = (time_t)archive_entry_mtime(e),
                                  .tv_nsec = ns >= 0 && ns < 1000000000 ? ns : 0};
        ts[0] = ts[1];
        if (archive_entry_atime_is_set(e)) {
                ns = archive_entry_atime_nsec(e);
                ts[0] = (struct timespec){.tv_sec = (time_t)archive_entry_atime(e),
                                          .tv_nsec = ns >= 0 && ns < 1000000000 ? ns : 0};
        }
}

/* Only user.* xattrs are kept, and not user.overlay.* (overlayfs's own under
 * a userxattr mount): the other namespaces are the host's (trusted.*,
 * security.* file capabilities and labels). */
static int set_xattrs(unpack *u, struct archive_entry *e, int fd, ab_err **err)
{
        if (archive_entry_xattr_reset(e) == 0)
                return 0;
        const char *name;
        const void *value;
        size_t size;
        while (archive_entry_xattr_next(e, &name, &value, &size) == ARCHIVE_OK) {
                if (!name || strncmp(name, "user.", 5) || !strncmp(name, "user.overlay.", 13))
                        continue;
                if (fsetxattr(fd, name, value, size, 0) < 0 && errno != ENOTSUP)
                        return sys_fail(u, errno, "set an extended attribute", err);
        }
        return 0;
}

/* Owner, then mode (chown clears setuid/setgid), xattrs of an open file or directory. */
static int set_meta(unpack *u, struct archive_entry *e, int fd, ab_err **err)
{
        uid_t uid;
        gid_t gid;
        if (entry_owner(u, e, &uid, &gid, err) < 0)
                return -1;
        if (fchown(fd, uid, gid) < 0)
                return sys_fail(u, errno, "set the owner", err);
        if (fchmod(fd, archive_entry_perm(e) & 07777) < 0)
                return sys_fail(u, errno, "set the mode", err);
        return set_xattrs(u, e, fd, err);
}

static int make_file(unpack *u, struct archive_entry *e, int pfd, const char *leaf,
                     const char *path, ab_err **err)
{
        if (clear_place(u, pfd, leaf, err) < 0)
                return -1;
        _cleanup_close_ int fd = -1;
        do
                fd = openat(pfd, leaf, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        while (fd < 0 && errno == EINTR);
        if (fd < 0)
                return sys_fail(u, errno, "create", err);
        if (copy_data(u, fd, err) < 0 || set_meta(u, e, fd, err) < 0)
                return -1;
        struct timespec ts[2];
        entry_times(e, ts);
        if (futimens(fd, ts) < 0)
                return sys_fail(u, errno, "set the times", err);
        set_add(&u->files, path);
        return 0;
}

static void defer_dir_times(unpack *u, struct archive_entry *e, const char *path)
{
        if (u->n_dirs == u->cap_dirs) {
                u->cap_dirs = u->cap_dirs ? xmul(u->cap_dirs, 2) : 64;
                u->dirs = xrealloc(u->dirs, xmul(u->cap_dirs, sizeof(*u->dirs)));
        }
        dir_time *d = &u->dirs[u->n_dirs++];
        d->path = xstrdup(path);
        entry_times(e, d->ts);
}

/* A directory over a directory merges; over anything else it replaces it. */
static int make_dir(unpack *u, struct archive_entry *e, int pfd, const char *leaf, const char *path,
                    ab_err **err)
{
        struct stat st;
        if (fstatat(pfd, leaf, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(st.st_mode) &&
            unlinkat(pfd, leaf, 0) < 0)
                return sys_fail(u, errno, "remove what it replaces", err);
        if (mkdirat(pfd, leaf, 0700) < 0 && errno != EEXIST)
                return sys_fail(u, errno, "create", err);
        _cleanup_close_ int fd = open_nofollow_dir(pfd, leaf);
        if (fd < 0)
                return sys_fail(u, -fd, "open", err);
        if (set_meta(u, e, fd, err) < 0)
                return -1;
        defer_dir_times(u, e, path);
        return 0;
}

static int make_symlink(unpack *u, struct archive_entry *e, int pfd, const char *leaf, ab_err **err)
{
        const char *target = archive_entry_symlink(e);
        if (!target || !*target)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "layer entry \"%s\" is a symlink to nothing", u->shown);
        uid_t uid;
        gid_t gid;
        if (entry_owner(u, e, &uid, &gid, err) < 0)
                return -1;
        if (clear_place(u, pfd, leaf, err) < 0)
                return -1;
        if (symlinkat(target, pfd, leaf) < 0)
                return sys_fail(u, errno, "create the symlink", err);
        if (fchownat(pfd, leaf, uid, gid, AT_SYMLINK_NOFOLLOW) < 0)
                return sys_fail(u, errno, "set the owner", err);
        struct timespec ts[2];
        entry_times(e, ts);
        if (utimensat(pfd, leaf, ts, AT_SYMLINK_NOFOLLOW) < 0)
                return sys_fail(u, errno, "set the times", err);
        return 0;
}

/* A hard link to an earlier regular file of this layer, found again without
 * following a symlink (the layer may have replaced it since). */
static int make_hardlink(unpack *u, struct archive_entry *e, int pfd, const char *leaf,
                         const char *path, ab_err **err)
{
        _cleanup_free_ char *target = NULL;
        const char *why = clean_path(archive_entry_hardlink(e), &target);
        if (!why && !target)
                why = "is the layer's root";
        if (why)
                return ab_err_set(err, AB_E_INVALID, 0, "layer entry \"%s\" is a hard link that %s",
                                  u->shown, why);
        if (!strcmp(target, path))
                return 0;
        if (!set_has(&u->files, target))
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "layer entry \"%s\" is a hard link to something else than an "
                                  "earlier file of the layer",
                                  u->shown);
        const char *tdir;
        const char *tleaf = split_leaf(target, &tdir);
        _cleanup_close_ int tfd = open_dir(u->root, tdir, false);
        struct stat st;
        if (tfd < 0 || fstatat(tfd, tleaf, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "layer entry \"%s\" is a hard link to a file the layer has "
                                  "replaced since",
                                  u->shown);
        if (clear_place(u, pfd, leaf, err) < 0)
                return -1;
        if (linkat(tfd, tleaf, pfd, leaf, 0) < 0)
                return sys_fail(u, errno, "link", err);
        set_add(&u->files, path);
        return 0;
}

/* ".wh.NAME" -> a 0/0 character device NAME; ".wh..wh..opq" -> the directory is opaque. */
static int make_whiteout(unpack *u, int pfd, const char *leaf, ab_err **err)
{
        if (!strcmp(leaf, WH_OPAQUE)) {
                if (fsetxattr(pfd, OVL_OPAQUE, "y", 1, 0) < 0)
                        return sys_fail(u, errno, "mark the directory opaque", err);
                u->st.whiteouts++;
                return 0;
        }
        if (!strncmp(leaf, WH_META, strlen(WH_META))) /* other AUFS metadata: not ours */
                return 0;
        const char *name = leaf + strlen(WH_PREFIX);
        if (!*name || !strcmp(name, ".") || !strcmp(name, ".."))
                return ab_err_set(err, AB_E_INVALID, 0, "layer entry \"%s\" whites out nothing",
                                  u->shown);
        if (clear_place(u, pfd, name, err) < 0)
                return -1;
        if (mknodat(pfd, name, S_IFCHR, makedev(0, 0)) < 0)
                return sys_fail(u, errno, "make the whiteout", err);
        if (fchownat(pfd, name, 0, 0, AT_SYMLINK_NOFOLLOW) < 0)
                return sys_fail(u, errno, "set the whiteout's owner", err);
        u->st.whiteouts++;
        return 0;
}

/* The entry for the layer's root ("./"): only its mode is taken. */
static int root_entry(unpack *u, struct archive_entry *e, ab_err **err)
{
        if (archive_entry_hardlink(e) || archive_entry_filetype(e) != AE_IFDIR)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "layer entry \"%s\" names the root but is no directory",
                                  u->shown);
        if (fchmod(u->root, archive_entry_perm(e) & 07777) < 0)
                return sys_fail(u, errno, "set the mode", err);
        return 0;
}

static int place_entry(unpack *u, struct archive_entry *e, const char *raw, ab_err **err)
{
        const char *shown = u->shown;
        _cleanup_free_ char *path = NULL;
        const char *why = clean_path(raw, &path);
        if (why)
                return ab_err_set(err, AB_E_INVALID, 0, "layer entry \"%s\" %s", shown, why);
        if (!path)
                return root_entry(u, e, err);

        bool link = archive_entry_hardlink(e) != NULL;
        mode_t type = link ? AE_IFREG : archive_entry_filetype(e);
        _cleanup_free_ char *full = xstrdup(path);
        const char *dir;
        const char *leaf = split_leaf(path, &dir);
        bool whiteout = !strncmp(leaf, WH_PREFIX, strlen(WH_PREFIX));
        if (!whiteout && type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK) {
                u->st.skipped++; /* devices, fifos, sockets */
                return 0;
        }
        int pfd = parent_dir(u, dir);
        if (pfd == -ELOOP)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "layer entry \"%s\" lies under a symbolic link", shown);
        if (pfd == -ENOTDIR)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "layer entry \"%s\" lies under something that is no directory",
                                  shown);
        if (pfd < 0)
                return sys_fail(u, -pfd, "open its directory", err);
        if (whiteout)
                return make_whiteout(u, pfd, leaf, err);
        if (link)
                return make_hardlink(u, e, pfd, leaf, full, err);
        if (type == AE_IFREG)
                return make_file(u, e, pfd, leaf, full, err);
        if (type == AE_IFDIR)
                return make_dir(u, e, pfd, leaf, full, err);
        return make_symlink(u, e, pfd, leaf, err);
}

static int one_entry(unpack *u, struct archive_entry *e, ab_err **err)
{
        const char *raw = archive_entry_pathname(e);
        if (!raw)
                raw = archive_entry_pathname_utf8(e);
        _cleanup_free_ char *shown = shown_name(raw);
        u->shown = shown;
        int r = place_entry(u, e, raw, err);
        /* What the entry did not read is read here, counted: a device or a
         * link may carry data too, and skipping it decompresses it all the same. */
        if (r == 0)
                r = copy_data(u, -1, err);
        u->shown = "";
        return r;
}

/* Directories' times, last: their children are all in. A directory replaced
 * since (or under one replaced) is skipped. */
static int finish_dirs(unpack *u, ab_err **err)
{
        for (size_t i = 0; i < u->n_dirs; i++) {
                _cleanup_close_ int fd = open_dir(u->root, u->dirs[i].path, false);
                if (fd < 0)
                        continue;
                if (futimens(fd, u->dirs[i].ts) < 0) {
                        u->shown = u->dirs[i].path;
                        return sys_fail(u, errno, "set the times", err);
                }
        }
        return 0;
}

static int unpack_all(unpack *u, int fd, ab_err **err)
{
        archive_read_support_format_tar(u->a);
        archive_read_support_filter_gzip(u->a);
        archive_read_support_filter_zstd(u->a);
        if (archive_read_open_fd(u->a, fd, CHUNK) != ARCHIVE_OK)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "the layer is not a tar (plain, gzip or zstd): %s",
                                  archive_error_string(u->a));
        for (;;) {
                struct archive_entry *e;
                int r = archive_read_next_header(u->a, &e);
                if (r == ARCHIVE_EOF)
                        break;
                if (r != ARCHIVE_OK && r != ARCHIVE_WARN) {
                        if (!u->st.entries)
                                return ab_err_set(err, AB_E_INVALID, 0,
                                                  "the layer is not a tar (plain, gzip or zstd): "
                                                  "%s",
                                                  archive_error_string(u->a));
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "the layer is damaged after %" PRIu64 " entries: %s",
                                          u->st.entries, archive_error_string(u->a));
                }
                if (++u->st.entries > u->max_entries)
                        return ab_err_set(err, AB_E_LIMIT, 0,
                                          "layer has more than %" PRIu64 " entries",
                                          u->max_entries);
                if (one_entry(u, e, err) < 0)
                        return -1;
        }
        return finish_dirs(u, err);
}

int ab_layer_unpack(int fd, int dest_dirfd, const ab_layer_opts *o, ab_layer_stats *st,
                    ab_err **err)
{
        unpack *u = xzalloc(sizeof(*u));
        u->max_bytes = o && o->max_bytes ? o->max_bytes : AB_LAYER_DEFAULT_MAX_BYTES;
        u->max_entries = o && o->max_entries ? o->max_entries : AB_LAYER_DEFAULT_MAX_ENTRIES;
        u->shown = "";
        u->pfd = -1;
        int rc;
        u->root = open_nofollow_dir(dest_dirfd, ".");
        if (u->root < 0) {
                rc = ab_err_set(err, AB_E_INTERNAL, -u->root, "open the layer's directory");
        } else {
                u->a = archive_read_new();
                rc = unpack_all(u, fd, err);
                archive_read_free(u->a);
                drop_parent(u);
                close(u->root);
        }
        if (st)
                *st = u->st;
        for (size_t i = 0; i < u->n_dirs; i++)
                free(u->dirs[i].path);
        free(u->dirs);
        set_free(&u->files);
        free(u);
        return rc < 0 ? -1 : 0;
}

/* Room per entry for its tar headers: a header block, a PAX or GNU long-name
 * header and its data, rounded up generously. */
#define DIFF_ENTRY_ROOM 4096ull

static int hash_stream(struct archive *a, EVP_MD_CTX *md, uint64_t bound, ab_err **err)
{
        struct archive_entry *e;
        if (archive_read_next_header(a, &e) != ARCHIVE_OK)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "the layer is not plain, gzip or zstd data: %s",
                                  archive_error_string(a));
        _cleanup_free_ char *buf = xmalloc(CHUNK);
        uint64_t total = 0;
        for (;;) {
                la_ssize_t n = archive_read_data(a, buf, CHUNK);
                if (n == 0)
                        return 0;
                if (n < 0)
                        return ab_err_set(err, AB_E_INVALID, 0, "the layer is damaged: %s",
                                          archive_error_string(a));
                total += (uint64_t)n;
                if (total > bound)
                        return ab_err_set(err, AB_E_LIMIT, 0,
                                          "the layer decompresses to more than %" PRIu64 " bytes",
                                          bound);
                if (!EVP_DigestUpdate(md, buf, (size_t)n))
                        return ab_err_set(err, AB_E_INTERNAL, 0, "sha256 of the layer");
        }
}

int ab_layer_diff_id(int fd, const ab_layer_opts *o, char **out, ab_err **err)
{
        uint64_t max_bytes = o && o->max_bytes ? o->max_bytes : AB_LAYER_DEFAULT_MAX_BYTES;
        uint64_t max_entries = o && o->max_entries ? o->max_entries : AB_LAYER_DEFAULT_MAX_ENTRIES;
        uint64_t bound = max_bytes + max_entries * DIFF_ENTRY_ROOM; /* both far below 2^63 */
        struct archive *a = archive_read_new();
        EVP_MD_CTX *md = EVP_MD_CTX_new();
        int rc;
        /* the raw format hands over the decompressed stream as one entry */
        archive_read_support_format_raw(a);
        archive_read_support_filter_gzip(a);
        archive_read_support_filter_zstd(a);
        if (!md || !EVP_DigestInit_ex(md, EVP_sha256(), NULL))
                rc = ab_err_set(err, AB_E_INTERNAL, 0, "sha256 of the layer");
        else if (archive_read_open_fd(a, fd, CHUNK) != ARCHIVE_OK)
                rc = ab_err_set(err, AB_E_INVALID, 0, "the layer cannot be read: %s",
                                archive_error_string(a));
        else
                rc = hash_stream(a, md, bound, err);
        unsigned char d[EVP_MAX_MD_SIZE];
        unsigned int dn = 0;
        if (rc == 0 && (!EVP_DigestFinal_ex(md, d, &dn) || dn != 32))
                rc = ab_err_set(err, AB_E_INTERNAL, 0, "sha256 of the layer");
        if (rc == 0) {
                char hex[65];
                ab_hex_encode(d, dn, hex);
                *out = xasprintf("sha256:%s", hex);
        }
        EVP_MD_CTX_free(md);
        archive_read_free(a);
        return rc < 0 ? -1 : 0;
}

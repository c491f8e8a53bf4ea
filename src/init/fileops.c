/* fileops.c - file requests: READ WRITE LIST STAT DELETE MKDIR RENAME.
 *
 * They run in a session child inside the box's mount namespace, so every
 * path resolves inside the box. Paths are opened with openat2
 * RESOLVE_NO_MAGICLINKS (openat where the kernel lacks it); the final
 * component is not followed where following would act on something else than
 * the named entry (write, delete, stat, list recursion). */
#include "init/init_int.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#define MAX_DEPTH 64

static int openat2_compat(int dirfd, const char *path, int flags, mode_t mode)
{
        static bool no_openat2;
        if (!no_openat2) {
                struct open_how how = {
                    .flags = (uint64_t)flags,
                    .mode = (flags & O_CREAT) ? mode : 0,
                    .resolve = RESOLVE_NO_MAGICLINKS,
                };
                for (;;) {
                        long fd = syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
                        if (fd >= 0)
                                return (int)fd;
                        if (errno == EINTR)
                                continue;
                        if (errno != ENOSYS)
                                return -errno;
                        break;
                }
                no_openat2 = true;
        }
        for (;;) {
                int fd = openat(dirfd, path, flags, mode);
                if (fd >= 0)
                        return fd;
                if (errno != EINTR)
                        return -errno;
        }
}

int init_open(const init_conf *conf, const char *path, int flags, mode_t mode)
{
        if (!path[0])
                return -EINVAL;
        if (path[0] == '/')
                return openat2_compat(AT_FDCWD, path, flags, mode);
        if (conf->workdir_fd < 0)
                return -ENOENT;
        return openat2_compat(conf->workdir_fd, path, flags, mode);
}

/* Splits path into its parent directory and final name ("a/b/" -> "a", "b").
 * The root and names "." and ".." have no parent to act in: -EINVAL. */
static int split_path(const char *path, char **dir, char **name)
{
        size_t n = strlen(path);
        while (n > 1 && path[n - 1] == '/')
                n--;
        if (n == 0 || (n == 1 && path[0] == '/'))
                return -EINVAL;
        _cleanup_free_ char *p = xstrndup(path, n);
        char *slash = strrchr(p, '/');
        const char *base = slash ? slash + 1 : p;
        if (strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
                return -EINVAL;
        *name = xstrdup(base);
        if (!slash)
                *dir = xstrdup(".");
        else if (slash == p)
                *dir = xstrdup("/");
        else
                *dir = xstrndup(p, (size_t)(slash - p));
        return 0;
}

/* mkdir -p: creates the missing directories of path (the last one with
 * `mode`, the others 0755). Returns an O_PATH fd of the directory or -errno. */
static int mkdir_p(const init_conf *conf, const char *path, mode_t mode)
{
        int fd;
        if (path[0] == '/')
                fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
        else if (conf->workdir_fd >= 0)
                fd = fcntl(conf->workdir_fd, F_DUPFD_CLOEXEC, 3);
        else
                return -ENOENT;
        if (fd < 0)
                return -errno;
        const char *p = path;
        for (;;) {
                while (*p == '/')
                        p++;
                if (!*p)
                        break;
                const char *end = strchrnul(p, '/'), *rest = end;
                while (*rest == '/')
                        rest++;
                _cleanup_free_ char *comp = xstrndup(p, (size_t)(end - p));
                mode_t m = *rest ? 0755 : mode;
                p = end;
                if (strcmp(comp, ".") == 0)
                        continue;
                if (mkdirat(fd, comp, m) == 0) {
                        (void)!fchmodat(fd, comp, m, 0); /* exact mode, whatever the umask */
                } else if (errno != EEXIST) {
                        int e = -errno;
                        close(fd);
                        return e;
                }
                int nfd = openat2_compat(fd, comp, O_PATH | O_DIRECTORY | O_CLOEXEC, 0);
                close(fd);
                if (nfd < 0)
                        return nfd;
                fd = nfd;
        }
        return fd;
}

/* Opens the directory that holds path's final component (O_RDONLY, so it can
 * be fsync'ed), creating it first when mkparents. fd or -errno; *name is the
 * final component. */
static int open_parent(const init_conf *conf, const char *path, bool mkparents, char **name)
{
        _cleanup_free_ char *dir = NULL;
        int r = split_path(path, &dir, name);
        if (r < 0)
                return r;
        int fd = init_open(conf, dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
        if (fd == -ENOENT && mkparents) {
                r = mkdir_p(conf, dir, 0755);
                if (r < 0)
                        return r;
                close(r);
                fd = init_open(conf, dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
        }
        return fd;
}

static int send_ok(init_conn *c)
{
        abp_buf b = {0};
        int r = abp_enc_ok(&b, NULL);
        if (r == 0)
                r = init_send(c, &b);
        abp_buf_free(&b);
        return r;
}

static uint32_t ftype(mode_t m)
{
        if (S_ISREG(m))
                return ABP_T_FILE;
        if (S_ISDIR(m))
                return ABP_T_DIR;
        if (S_ISLNK(m))
                return ABP_T_SYMLINK;
        return ABP_T_OTHER;
}

/* The target of the symlink dirfd/name (name "" with an O_PATH fd of the link). */
static char *read_link(int dirfd, const char *name)
{
        char buf[4096];
        ssize_t n = readlinkat(dirfd, name, buf, sizeof(buf) - 1);
        if (n < 0)
                return NULL;
        return xstrndup(buf, (size_t)n);
}

/* ---- READ ---- */

/* Opens path with none of its last `tail` components followed when it is a
 * symlink (the part before them resolves as init_open does): the tail is
 * opened beneath that directory with RESOLVE_NO_SYMLINKS, or, without
 * openat2, one O_NOFOLLOW component at a time. fd or -errno (ELOOP for a
 * link in the tail, EXDEV/EINVAL for a ".." or an absolute tail). */
static int open_tail_nofollow(const init_conf *conf, const char *path, uint32_t tail, int flags)
{
        size_t n = strlen(path);
        while (n > 1 && path[n - 1] == '/')
                n--;
        /* where the tail starts: after the tail-th slash from the end */
        size_t start = n;
        for (uint32_t k = 0; k < tail && start > 0; k++) {
                while (start > 0 && path[start - 1] != '/')
                        start--;
                if (k + 1 < tail)
                        while (start > 0 && path[start - 1] == '/')
                                start--;
        }
        _cleanup_free_ char *dir =
            start == 0 ? xstrdup(path[0] == '/' ? "/" : ".") : xstrndup(path, start);
        _cleanup_free_ char *rest = xstrndup(path + start, n - start);
        if (!rest[0] || rest[0] == '/')
                return -EINVAL;
        _cleanup_close_ int dfd = init_open(conf, dir, O_PATH | O_DIRECTORY | O_CLOEXEC, 0);
        if (dfd < 0)
                return dfd;
        struct open_how how = {
            .flags = (uint64_t)(flags | O_NOFOLLOW),
            .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
        };
        for (;;) {
                long fd = syscall(SYS_openat2, dfd, rest, &how, sizeof(how));
                if (fd >= 0)
                        return (int)fd;
                if (errno == EINTR)
                        continue;
                if (errno != ENOSYS)
                        return -errno;
                break;
        }
        /* no openat2: one component at a time */
        int cur = fcntl(dfd, F_DUPFD_CLOEXEC, 3);
        if (cur < 0)
                return -errno;
        for (char *save = NULL, *comp = strtok_r(rest, "/", &save); comp;) {
                char *next = strtok_r(NULL, "/", &save);
                if (!strcmp(comp, "..")) {
                        close(cur);
                        return -EXDEV;
                }
                int f = next ? O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC : flags | O_NOFOLLOW;
                int nfd;
                do
                        nfd = openat(cur, comp, f);
                while (nfd < 0 && errno == EINTR);
                int e = errno;
                close(cur);
                if (nfd < 0)
                        return -e;
                cur = nfd;
                comp = next;
        }
        return cur;
}

static void do_read(init_conn *c, const init_conf *conf, const abp_file_req *m)
{
        const int oflags = O_RDONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC;
        _cleanup_close_ int fd = (m->flags & ABP_R_NOFOLLOW) && m->depth > 0
                                     ? open_tail_nofollow(conf, m->path, m->depth, oflags)
                                     : init_open(conf, m->path, oflags, 0);
        struct stat st;
        if (fd < 0) {
                init_send_errno(c, -fd, m->path);
                return;
        }
        if (fstat(fd, &st) < 0) {
                init_send_errno(c, errno, m->path);
                return;
        }
        if (S_ISDIR(st.st_mode)) {
                init_send_errno(c, EISDIR, m->path);
                return;
        }
        if (!S_ISREG(st.st_mode)) {
                init_send_error(c, "invalid_argument", "not a regular file: %.1024s", m->path);
                return;
        }
        if (m->offset > INT64_MAX) {
                init_send_errno(c, EINVAL, m->path);
                return;
        }
        _cleanup_free_ uint8_t *buf = xmalloc(ABP_CHUNK);
        abp_buf b = {0};
        uint64_t off = m->offset, left = m->length ? m->length : UINT64_MAX;
        while (left > 0) {
                size_t want = left < ABP_CHUNK ? (size_t)left : ABP_CHUNK;
                ssize_t n = pread(fd, buf, want, (off_t)off);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        init_send_errno(c, errno, m->path);
                        goto out;
                }
                if (n == 0)
                        break;
                if (abp_enc_data(&b, 1, buf, (size_t)n) < 0 || init_send(c, &b) < 0)
                        goto out; /* the client is gone */
                off += (uint64_t)n;
                left -= (uint64_t)n;
        }
        send_ok(c);
out:
        abp_buf_free(&b);
}

/* ---- WRITE ---- */

/* Copies DATA frames into fd until EOF. 0; 1 with *werr set when writing to
 * fd failed; -EBADMSG on a protocol error; other -errno when the client is gone. */
static int receive_into(init_conn *c, int fd, int *werr)
{
        for (;;) {
                abp_frame f;
                abp_data d;
                int r = abp_recv(c->fd, &c->rd, &f, INIT_IO_TIMEOUT_MS);
                if (r < 0)
                        return r;
                if (f.type == ABP_EOF)
                        return 0;
                if (f.type != ABP_DATA || abp_dec_data(&f, &d) < 0 || d.stream != 0)
                        return -EBADMSG;
                r = ab_write_all(fd, d.data, d.len);
                if (r < 0) {
                        *werr = -r;
                        return 1;
                }
        }
}

/* Reports the outcome of receive_into. Returns true when it succeeded. */
static bool received(init_conn *c, int r, int werr, const char *path)
{
        if (r == 1)
                init_send_errno(c, werr, path);
        else if (r == -EBADMSG)
                init_send_error(c, "invalid_argument", "expected DATA or EOF frames");
        return r == 0;
}

static void do_append(init_conn *c, int dfd, const char *name, const abp_file_req *m, mode_t mode)
{
        const int base = O_WRONLY | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC;
        bool excl = m->flags & ABP_W_EXCL;
        int werr = 0;
        _cleanup_close_ int fd = openat2_compat(dfd, name, base | O_CREAT | O_EXCL, mode);
        bool created = fd >= 0;
        if (fd == -EEXIST && !excl)
                fd = openat2_compat(dfd, name, base, 0);
        if (fd < 0) {
                init_send_errno(c, -fd, m->path);
                return;
        }
        struct stat st;
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
                init_send_error(c, "invalid_argument", "not a regular file: %.1024s", m->path);
                return;
        }
        if (created)
                (void)!fchmod(fd, mode);
        int r = receive_into(c, fd, &werr);
        if (!received(c, r, werr, m->path))
                return;
        if (fsync(fd) < 0 && errno != EINVAL) {
                init_send_errno(c, errno, m->path);
                return;
        }
        send_ok(c);
}

static int create_temp(int dfd, char **tmp)
{
        static unsigned counter;
        for (int i = 0; i < 16; i++) {
                free(*tmp);
                *tmp = xasprintf(".abtmp.%d.%u.%llx", (int)getpid(), counter++,
                                 (unsigned long long)(ab_now_ns() & 0xffffff));
                int fd =
                    openat(dfd, *tmp,
                           O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC, 0600);
                if (fd >= 0 || errno != EEXIST)
                        return fd < 0 ? -errno : fd;
        }
        return -EEXIST;
}

/* Puts tmp in place of name: atomically, and (excl) only if name is free. */
static int install(int dfd, const char *tmp, const char *name, bool excl)
{
        if (!excl)
                return renameat(dfd, tmp, dfd, name) < 0 ? -errno : 0;
        if (renameat2(dfd, tmp, dfd, name, RENAME_NOREPLACE) == 0)
                return 0;
        if (errno != EINVAL && errno != ENOSYS)
                return -errno;
        /* A filesystem without RENAME_NOREPLACE: link(2) never replaces either. */
        if (linkat(dfd, tmp, dfd, name, 0) < 0)
                return -errno;
        unlinkat(dfd, tmp, 0);
        return 0;
}

static void do_replace(init_conn *c, int dfd, const char *name, const abp_file_req *m, mode_t mode)
{
        bool excl = m->flags & ABP_W_EXCL;
        struct stat st;
        bool keep_owner = false;
        int werr = 0, r;

        if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
                if (excl) {
                        init_send_errno(c, EEXIST, m->path);
                        return;
                }
                if (S_ISDIR(st.st_mode)) {
                        init_send_errno(c, EISDIR, m->path);
                        return;
                }
                if (S_ISREG(st.st_mode)) {
                        mode = st.st_mode & 07777; /* an overwrite keeps the file's mode */
                        keep_owner = true;
                }
        } else if (errno != ENOENT) {
                init_send_errno(c, errno, m->path);
                return;
        }

        _cleanup_free_ char *tmp = NULL;
        _cleanup_close_ int fd = create_temp(dfd, &tmp);
        if (fd < 0) {
                init_send_errno(c, -fd, m->path);
                return;
        }
        r = receive_into(c, fd, &werr);
        if (!received(c, r, werr, m->path))
                goto fail;
        if (fchmod(fd, mode) < 0 || fsync(fd) < 0) {
                init_send_errno(c, errno, m->path);
                goto fail;
        }
        if (keep_owner)
                (void)!fchown(fd, st.st_uid, st.st_gid);
        r = install(dfd, tmp, name, excl);
        if (r < 0) {
                init_send_errno(c, -r, m->path);
                goto fail;
        }
        fsync(dfd);
        send_ok(c);
        return;
fail:
        unlinkat(dfd, tmp, 0);
}

static void do_write(init_conn *c, const init_conf *conf, const abp_file_req *m)
{
        mode_t mode = (m->mode & 07777) ? (m->mode & 07777) : 0644;
        _cleanup_free_ char *name = NULL;
        _cleanup_close_ int dfd = open_parent(conf, m->path, m->flags & ABP_W_MKPARENTS, &name);
        if (dfd < 0) {
                init_send_errno(c, -dfd, m->path);
                return;
        }
        if (m->flags & ABP_W_APPEND)
                do_append(c, dfd, name, m, mode);
        else
                do_replace(c, dfd, name, m, mode);
}

/* ---- LIST, STAT ---- */

typedef struct lentry {
        char *path;
        char *link;
        struct stat st;
} lentry;

typedef struct lstate {
        lentry *v;
        size_t n, cap;
        bool overflow;
} lstate;

static void walk(lstate *ls, int fd, const char *prefix, uint32_t level, uint32_t depth)
{
        DIR *d = fdopendir(fd);
        if (!d) {
                close(fd);
                return;
        }
        struct dirent *e;
        while (!ls->overflow && (e = readdir(d))) {
                struct stat st;
                if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                        continue;
                if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                        continue; /* gone meanwhile */
                if (ls->n >= ABP_MAX_ENTRIES) {
                        ls->overflow = true;
                        break;
                }
                if (ls->n == ls->cap) {
                        ls->cap = ls->cap ? ls->cap * 2 : 64;
                        ls->v = xrealloc(ls->v, xmul(ls->cap, sizeof(*ls->v)));
                }
                lentry *le = &ls->v[ls->n++];
                le->path = prefix ? xasprintf("%s/%s", prefix, e->d_name) : xstrdup(e->d_name);
                le->link = S_ISLNK(st.st_mode) ? read_link(dirfd(d), e->d_name) : NULL;
                le->st = st;
                if (S_ISDIR(st.st_mode) && level < depth) {
                        const char *sub = le->path; /* stable even if ls->v moves */
                        int sfd = openat(dirfd(d), e->d_name,
                                         O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                        if (sfd >= 0)
                                walk(ls, sfd, sub, level + 1, depth);
                }
        }
        closedir(d);
}

static int lentry_cmp(const void *a, const void *b)
{
        return strcmp(((const lentry *)a)->path, ((const lentry *)b)->path);
}

static void fill_entry(abp_entry *e, const char *path, const struct stat *st, const char *link)
{
        *e = (abp_entry){
            .path = path,
            .type = ftype(st->st_mode),
            .mode = st->st_mode & 07777,
            .size = (uint64_t)st->st_size,
            .mtime = st->st_mtim.tv_sec,
            .link = link,
            .has_ids = true,
            .uid = st->st_uid,
            .gid = st->st_gid,
        };
}

static void do_list(init_conn *c, const init_conf *conf, const abp_file_req *m)
{
        uint32_t depth = m->depth == 0 ? 1 : m->depth > MAX_DEPTH ? MAX_DEPTH : m->depth;
        int fd = init_open(conf, m->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
        if (fd < 0) {
                init_send_errno(c, -fd, m->path);
                return;
        }
        lstate ls = {0};
        walk(&ls, fd, NULL, 1, depth);
        if (ls.overflow) {
                init_send_error(c, "limit_exceeded",
                                "more than %d entries under %.1024s; list with a smaller depth",
                                ABP_MAX_ENTRIES, m->path);
                goto out;
        }
        if (ls.n > 0)
                qsort(ls.v, ls.n, sizeof(*ls.v), lentry_cmp);
        abp_buf b = {0};
        bool ok = true;
        for (size_t i = 0; i < ls.n && ok; i++) {
                abp_entry e;
                fill_entry(&e, ls.v[i].path, &ls.v[i].st, ls.v[i].link);
                if (abp_enc_entry(&b, &e) < 0)
                        continue; /* cannot happen: paths are bounded by the kernel */
                if (b.len >= 256 * 1024)
                        ok = init_send(c, &b) == 0;
        }
        if (ok && (b.len == 0 || init_send(c, &b) == 0))
                send_ok(c);
        abp_buf_free(&b);
out:
        for (size_t i = 0; i < ls.n; i++) {
                free(ls.v[i].path);
                free(ls.v[i].link);
        }
        free(ls.v);
}

static void do_stat(init_conn *c, const init_conf *conf, const abp_file_req *m)
{
        _cleanup_close_ int fd = init_open(conf, m->path, O_PATH | O_NOFOLLOW | O_CLOEXEC, 0);
        struct stat st;
        if (fd < 0) {
                init_send_errno(c, -fd, m->path);
                return;
        }
        if (fstat(fd, &st) < 0) {
                init_send_errno(c, errno, m->path);
                return;
        }
        _cleanup_free_ char *link = S_ISLNK(st.st_mode) ? read_link(fd, "") : NULL;
        _cleanup_free_ char *owner = NULL, *group = NULL;
        if (m->flags & ABP_S_NAMES)
                init_id_names(conf, st.st_uid, st.st_gid, &owner, &group);
        abp_entry e;
        abp_buf b = {0};
        fill_entry(&e, m->path, &st, link);
        e.owner = owner;
        e.group = group;
        if (abp_enc_entry(&b, &e) == 0)
                (void)!init_send(c, &b);
        abp_buf_free(&b);
}

/* ---- DELETE, MKDIR, RENAME ---- */

/* Removes dfd/name and everything below it, never following a symlink. */
static int rm_tree(int dfd, const char *name)
{
        int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        DIR *d = fdopendir(fd);
        if (!d) {
                int e = -errno;
                close(fd);
                return e;
        }
        int r = 0;
        struct dirent *e;
        while (r == 0 && (e = readdir(d))) {
                if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                        continue;
                bool isdir = e->d_type == DT_DIR;
                if (e->d_type == DT_UNKNOWN) {
                        struct stat st;
                        isdir = fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                                S_ISDIR(st.st_mode);
                }
                if (isdir)
                        r = rm_tree(dirfd(d), e->d_name);
                else if (unlinkat(dirfd(d), e->d_name, 0) < 0)
                        r = -errno;
                if (r == -ENOENT)
                        r = 0; /* removed meanwhile */
        }
        closedir(d);
        if (r == 0 && unlinkat(dfd, name, AT_REMOVEDIR) < 0)
                r = -errno;
        return r;
}

static void do_delete(init_conn *c, const init_conf *conf, const abp_file_req *m)
{
        _cleanup_free_ char *name = NULL;
        _cleanup_close_ int dfd = open_parent(conf, m->path, false, &name);
        struct stat st;
        int r;
        if (dfd < 0) {
                init_send_errno(c, -dfd, m->path);
                return;
        }
        if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
                init_send_errno(c, errno, m->path);
                return;
        }
        if (!S_ISDIR(st.st_mode))
                r = unlinkat(dfd, name, 0) < 0 ? -errno : 0;
        else if (m->flags & ABP_RECURSIVE)
                r = rm_tree(dfd, name);
        else
                r = unlinkat(dfd, name, AT_REMOVEDIR) < 0 ? -errno : 0;
        if (r < 0)
                init_send_errno(c, -r, m->path);
        else
                send_ok(c);
}

static void do_mkdir(init_conn *c, const init_conf *conf, const abp_file_req *m)
{
        mode_t mode = (m->mode & 07777) ? (m->mode & 07777) : 0755;
        if (m->flags & ABP_PARENTS) {
                int fd = mkdir_p(conf, m->path, mode);
                if (fd < 0) {
                        init_send_errno(c, -fd, m->path);
                        return;
                }
                close(fd);
                send_ok(c);
                return;
        }
        _cleanup_free_ char *name = NULL;
        _cleanup_close_ int dfd = open_parent(conf, m->path, false, &name);
        if (dfd < 0) {
                init_send_errno(c, -dfd, m->path);
                return;
        }
        if (mkdirat(dfd, name, mode) < 0) {
                init_send_errno(c, errno, m->path);
                return;
        }
        (void)!fchmodat(dfd, name, mode, 0);
        send_ok(c);
}

static void do_rename(init_conn *c, const init_conf *conf, const abp_file_req *m)
{
        _cleanup_free_ char *from_name = NULL, *to_name = NULL;
        _cleanup_close_ int from_dfd = open_parent(conf, m->path, false, &from_name);
        if (from_dfd < 0) {
                init_send_errno(c, -from_dfd, m->path);
                return;
        }
        _cleanup_close_ int to_dfd = open_parent(conf, m->to, false, &to_name);
        if (to_dfd < 0) {
                init_send_errno(c, -to_dfd, m->to);
                return;
        }
        if (renameat(from_dfd, from_name, to_dfd, to_name) < 0) {
                int e = errno;
                /* Name the path the error is about when it is clearly the target. */
                bool about_to = e == EEXIST || e == ENOTEMPTY || e == EISDIR;
                init_send_errno(c, e, about_to ? m->to : m->path);
                return;
        }
        send_ok(c);
}

/* ---- CHMOD, CHOWN, SYMLINK ---- */

/* One call on PATH's last component through its parent directory. CHMOD
 * and CHOWN follow it when it is a symlink (as chmod(1) and chown(1) do);
 * init runs in the box, so a link's target is a path of the box. */
static void do_at_parent(init_conn *c, const init_conf *conf, uint32_t type, const abp_file_req *m)
{
        uid_t uid = (uid_t)-1;
        gid_t gid = (gid_t)-1;
        _cleanup_free_ char *why = NULL;
        if (type == ABP_CHOWN &&
            init_owner_resolve(conf, m->owner, m->group, &uid, &gid, &why) < 0) {
                init_send_error(c, "invalid_argument", "%s", why);
                return;
        }
        _cleanup_free_ char *name = NULL;
        _cleanup_close_ int dfd = open_parent(conf, m->path, false, &name);
        if (dfd < 0) {
                init_send_errno(c, -dfd, m->path);
                return;
        }
        int r = type == ABP_CHMOD   ? fchmodat(dfd, name, m->mode & 07777, 0)
                : type == ABP_CHOWN ? fchownat(dfd, name, uid, gid, 0)
                                    : symlinkat(m->to, dfd, name);
        if (r < 0) {
                init_send_errno(c, errno, m->path);
                return;
        }
        send_ok(c);
}

void init_fileop(init_conn *c, const abp_frame *f, const init_conf *conf)
{
        abp_file_req m;
        if (abp_dec_file(f, &m) < 0) {
                init_send_error(c, "invalid_argument", "malformed file request");
                return;
        }
        if (!m.path[0] || (m.to && !m.to[0])) {
                init_send_error(c, "invalid_argument", "empty path");
                return;
        }
        /* The frame's buffer is reused while a WRITE receives its data. */
        _cleanup_free_ char *path = xstrdup(m.path);
        _cleanup_free_ char *to = m.to ? xstrdup(m.to) : NULL;
        m.path = path;
        m.to = to;
        /* owner and group are read before a WRITE could reuse the buffer:
         * only CHOWN reads them, and it receives nothing more. */
        switch (f->type) {
        case ABP_READ:
                do_read(c, conf, &m);
                break;
        case ABP_WRITE:
                do_write(c, conf, &m);
                break;
        case ABP_LIST:
                do_list(c, conf, &m);
                break;
        case ABP_STAT:
                do_stat(c, conf, &m);
                break;
        case ABP_DELETE:
                do_delete(c, conf, &m);
                break;
        case ABP_MKDIR:
                do_mkdir(c, conf, &m);
                break;
        case ABP_RENAME:
                do_rename(c, conf, &m);
                break;
        case ABP_CHMOD:
        case ABP_CHOWN:
        case ABP_SYMLINK:
                do_at_parent(c, conf, f->type, &m);
                break;
        }
}

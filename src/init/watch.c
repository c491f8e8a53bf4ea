/* watch.c - WATCH (docs/protocol.md): a directory's changes as they happen,
 * with inotify, in the box's session process, so what it costs is the box's
 * and it ends when the client hangs up. A recursive watch watches every
 * subdirectory (down to ABP_WATCH_DEPTH_MAX levels, at most
 * ABP_WATCH_DIRS_MAX directories) and adds those made or moved in later.
 * Events name paths relative to the watched directory, with the kinds of
 * E2B's envd (which uses inotify through Go's fsnotify): a create or a move
 * in is CREATE, a write WRITE, a removal REMOVE, a move away RENAME, an
 * attribute change CHMOD. */
#include "init_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#define WATCH_MASK                                                                                 \
        (IN_CREATE | IN_DELETE | IN_MODIFY | IN_MOVED_FROM | IN_MOVED_TO | IN_ATTRIB |             \
         IN_DELETE_SELF | IN_MOVE_SELF)

typedef struct wdir {
        int wd;    /* -1: a slot freed */
        char *rel; /* "" for the watched directory */
        int depth;
} wdir;

typedef struct watch_run {
        init_conn *c;
        int ifd;
        bool recursive;
        const char *root; /* the watched directory, as the request named it */
        wdir *dirs;
        size_t n, cap;
        uint32_t temp_cookie; /* the move of one of our temp files just seen, or 0 */
        bool gone;            /* the client is gone: nothing more is sent */
} watch_run;

/* The temp files a WRITE makes and renames into place (fileops.c): not
 * reported themselves; their arrival reads as the create and write envd's
 * in-place write would make. */
static bool is_temp(const char *name)
{
        const char *base = strrchr(name, '/');
        return !strncmp(base ? base + 1 : name, ".abtmp.", 7);
}

static int send_event(watch_run *w, uint32_t kind, const char *name);

static wdir *dir_of(watch_run *w, int wd)
{
        for (size_t i = 0; i < w->n; i++)
                if (w->dirs[i].wd == wd)
                        return &w->dirs[i];
        return NULL;
}

static char *join(const char *a, const char *b)
{
        size_t la = strlen(a), lb = strlen(b);
        char *s = malloc(la + lb + 2);
        if (!s)
                abort();
        memcpy(s, a, la);
        size_t k = la;
        if (la && lb)
                s[k++] = '/';
        memcpy(s + k, b, lb);
        s[k + lb] = 0;
        return s;
}

/* Watches directory rel (relative to the root) and, for a recursive watch,
 * its subdirectories; silently stops at the bounds. With announce (a
 * directory made or moved in while watched), what it already holds is
 * reported as created: made before its watch was in place, it would be
 * missed otherwise. */
static void add_tree(watch_run *w, const char *rel, int depth, bool announce)
{
        if (w->n >= ABP_WATCH_DIRS_MAX)
                return;
        char *abs = *rel ? join(w->root, rel) : strdup(w->root);
        if (!abs)
                abort();
        /* the root as named (a link to it is followed); below it, folders only */
        int wd =
            inotify_add_watch(w->ifd, abs, WATCH_MASK | (*rel ? IN_ONLYDIR | IN_DONT_FOLLOW : 0));
        if (wd < 0 || dir_of(w, wd)) { /* gone already, or a directory seen twice */
                free(abs);
                return;
        }
        if (w->n == w->cap) {
                w->cap = w->cap ? w->cap * 2 : 16;
                w->dirs = realloc(w->dirs, w->cap * sizeof(*w->dirs));
                if (!w->dirs)
                        abort();
        }
        w->dirs[w->n++] = (wdir){.wd = wd, .rel = strdup(rel), .depth = depth};
        if (!w->recursive || depth >= ABP_WATCH_DEPTH_MAX) {
                free(abs);
                return;
        }
        DIR *d = opendir(abs);
        free(abs);
        if (!d)
                return;
        struct dirent *e;
        while ((e = readdir(d)) && w->n < ABP_WATCH_DIRS_MAX) {
                if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                        continue;
                if (announce && !w->gone && !is_temp(e->d_name)) {
                        char *name = join(rel, e->d_name);
                        w->gone = send_event(w, ABP_WATCH_CREATE, name) < 0;
                        free(name);
                }
                bool dir = e->d_type == DT_DIR;
                if (e->d_type == DT_UNKNOWN) { /* lstat: a link to a folder is not one */
                        struct stat st;
                        dir = fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                              S_ISDIR(st.st_mode);
                }
                if (dir) {
                        char *sub = join(rel, e->d_name);
                        add_tree(w, sub, depth + 1, announce);
                        free(sub);
                }
        }
        closedir(d);
}

static uint32_t kind_of(uint32_t mask)
{
        if (mask & (IN_CREATE | IN_MOVED_TO))
                return ABP_WATCH_CREATE;
        if (mask & IN_MODIFY)
                return ABP_WATCH_WRITE;
        if (mask & IN_DELETE)
                return ABP_WATCH_REMOVE;
        if (mask & IN_MOVED_FROM)
                return ABP_WATCH_RENAME;
        if (mask & IN_ATTRIB)
                return ABP_WATCH_CHMOD;
        return 0;
}

static int send_event(watch_run *w, uint32_t kind, const char *name)
{
        abp_buf b = {0};
        abp_file_req m = {.path = name, .flags = kind};
        int r = abp_enc_file(&b, ABP_WATCH_EVENT, &m);
        if (r == 0)
                r = init_send(w->c, &b);
        abp_buf_free(&b);
        return r;
}

/* Handles what one read of the inotify fd gave: 0, 1 when the watched
 * directory itself went, -1 when the client is gone. */
static int on_events(watch_run *w, const char *buf, size_t len)
{
        for (size_t off = 0; off + sizeof(struct inotify_event) <= len;) {
                const struct inotify_event *ev = (const void *)(buf + off);
                off += sizeof(*ev) + ev->len;
                wdir *d = dir_of(w, ev->wd);
                if (!d)
                        continue;
                if (ev->mask & IN_IGNORED) { /* its directory went */
                        bool root = !*d->rel;
                        free(d->rel);
                        *d = w->dirs[--w->n];
                        if (root)
                                return 1;
                        continue;
                }
                if ((ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF)) && !*d->rel)
                        return 1;
                uint32_t kind = ev->len ? kind_of(ev->mask) : 0;
                if (!kind)
                        continue;
                if (is_temp(ev->name)) {
                        if (ev->mask & IN_MOVED_FROM)
                                w->temp_cookie = ev->cookie;
                        continue;
                }
                bool from_temp =
                    (ev->mask & IN_MOVED_TO) && ev->cookie && ev->cookie == w->temp_cookie;
                char *name = join(d->rel, ev->name);
                int r = send_event(w, kind, name);
                if (r == 0 && from_temp)
                        r = send_event(w, ABP_WATCH_WRITE, name);
                if (r == 0 && w->recursive && (ev->mask & IN_ISDIR) &&
                    (ev->mask & (IN_CREATE | IN_MOVED_TO)) && d->depth < ABP_WATCH_DEPTH_MAX)
                        add_tree(w, name, d->depth + 1, true);
                free(name);
                if (r < 0 || w->gone)
                        return -1;
        }
        return 0;
}

void init_watch(init_conn *c, const abp_frame *f, const init_conf *conf)
{
        abp_file_req m;
        if (abp_dec_file(f, &m) < 0) {
                init_send_error(c, "invalid_argument", "malformed WATCH");
                return;
        }
        char *root = m.path[0] == '/' ? strdup(m.path) : join(conf->workdir, m.path);
        if (!root)
                abort();
        watch_run w = {.c = c, .recursive = m.flags & ABP_RECURSIVE, .root = root};
        struct stat st;
        w.ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
        if (w.ifd < 0) {
                init_send_errno(c, errno, m.path);
        } else if (stat(root, &st) < 0) {
                init_send_errno(c, errno, m.path);
        } else if (!S_ISDIR(st.st_mode)) {
                init_send_errno(c, ENOTDIR, m.path);
        } else {
                errno = 0;
                add_tree(&w, "", 0, false);
                if (w.n == 0) {
                        init_send_errno(c, errno ? errno : ENOENT, m.path);
                } else {
                        abp_buf b = {0};
                        int r = abp_enc_empty(&b, ABP_OK);
                        if (r == 0)
                                r = init_send(c, &b);
                        abp_buf_free(&b);
                        char buf[16384] __attribute__((aligned(__alignof__(struct inotify_event))));
                        while (r == 0) {
                                struct pollfd p[2] = {{.fd = w.ifd, .events = POLLIN},
                                                      {.fd = c->fd, .events = POLLRDHUP}};
                                if (poll(p, 2, -1) < 0 && errno != EINTR)
                                        break;
                                if (p[1].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLIN))
                                        break; /* the client hung up (it sends nothing more) */
                                ssize_t k = read(w.ifd, buf, sizeof(buf));
                                if (k < 0 && (errno == EAGAIN || errno == EINTR))
                                        continue;
                                if (k <= 0)
                                        break;
                                r = on_events(&w, buf, (size_t)k);
                        }
                }
        }
        for (size_t i = 0; i < w.n; i++)
                free(w.dirs[i].rel);
        free(w.dirs);
        if (w.ifd >= 0)
                close(w.ifd);
        free(root);
}

#include "native/hide.h"
#include "base/buf.h"

#include <dirent.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <poll.h>
#include <pthread.h>
#include <sys/inotify.h>
#include <sys/stat.h>

/* Host files holding secrets, hidden on top of the rule that a box sees only
 * what any host user may read (fnmatch patterns relative to /etc). */
static const char *const etc_deny[] = {"shadow",      "mailname",           "shadow-",
                                       "gshadow",     "gshadow-",           "security/opasswd",
                                       "ssl/private", "ssh/ssh_host_*_key", "agentbox"};

#define WATCH_MASK                                                                                 \
        (IN_ATTRIB | IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF |        \
         IN_MOVE_SELF)
/* Deeper directories are hidden whole rather than walked (fails closed). */
#define MAX_DEPTH 48

struct ab_hide_watch {
        pthread_mutex_t lock;
        char *root;      /* entries are relative to it */
        char **dirs;     /* what is walked below root ("" = root itself), NULL-terminated */
        char *deny_dir;  /* where the deny list applies, below root ("" = root) */
        int ino;         /* inotify over the directories of the last walk; -1: none */
        int mounts;      /* /proc/self/mountinfo, polled for changes of the mount table */
        char *mount_key; /* the mounts on or above the walked dirs at the last walk */
        ab_hide_list *cur;
        unsigned walks;
};

typedef struct walk {
        ab_hide_list *l;
        size_t cap;
        int ino; /* -1 once a watch could not be set */
} walk;

static void list_add(walk *w, const char *rel)
{
        if (w->l->n == w->cap) {
                w->cap = w->cap ? xmul(w->cap, 2) : 16;
                w->l->rel = xrealloc(w->l->rel, xmul(w->cap, sizeof(char *)));
        }
        w->l->rel[w->l->n++] = xstrdup(rel);
}

/* Watches path before it is read: a change after this is reported. A path
 * that does not exist needs no watch (its parent's reports its creation). */
static void watch(walk *w, const char *path)
{
        if (w->ino >= 0 && inotify_add_watch(w->ino, path, WATCH_MASK) < 0 && errno != ENOENT &&
            errno != ENOTDIR) {
                close(w->ino);
                w->ino = -1; /* out of watches: walk again every time */
        }
}

static char *join(const char *a, const char *b)
{
        size_t n = strlen(a);
        return xasprintf("%s%s%s", a, n && a[n - 1] != '/' && b[0] ? "/" : "", b);
}

/* Lists, below root/rel, every entry no host user but its owner (or group)
 * could read; readable directories are descended. */
static int walk_unreadable(walk *w, const char *root, const char *rel, int depth)
{
        _cleanup_free_ char *path = rel[0] ? join(root, rel) : xstrdup(root);
        watch(w, path);
        DIR *d = opendir(path);
        if (!d)
                return errno == ENOENT || errno == ENOTDIR ? 0 : -errno;
        int r = 0;
        struct dirent *e;
        while (r == 0 && (e = readdir(d))) {
                if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                        continue;
                struct stat st;
                if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
                    S_ISLNK(st.st_mode))
                        continue; /* a link resolves inside the box, to what the box sees */
                _cleanup_free_ char *sub = join(rel, e->d_name);
                bool readable =
                    (st.st_mode & S_IROTH) && (!S_ISDIR(st.st_mode) || (st.st_mode & S_IXOTH));
                if (!readable || (S_ISDIR(st.st_mode) && depth >= MAX_DEPTH))
                        list_add(w, sub);
                else if (S_ISDIR(st.st_mode))
                        r = walk_unreadable(w, root, sub, depth + 1);
        }
        closedir(d);
        return r;
}

/* One directory of the watch: a top directory nobody else may enter is
 * listed itself; a link (merged /usr: /lib -> usr/lib) is not walked (what
 * it points at is, when shared). */
static int walk_top(walk *w, const char *root, const char *rel)
{
        if (!rel[0])
                return walk_unreadable(w, root, "", 0);
        _cleanup_free_ char *path = join(root, rel);
        struct stat st;
        if (lstat(path, &st) < 0 || !S_ISDIR(st.st_mode)) {
                /* its parent's watch reports it when it appears */
                _cleanup_free_ char *parent = xstrdup(path);
                char *slash = strrchr(parent, '/');
                if (slash && slash != parent)
                        *slash = '\0';
                watch(w, slash == parent ? "/" : parent);
                return 0;
        }
        if (!(st.st_mode & S_IROTH) || !(st.st_mode & S_IXOTH)) {
                list_add(w, rel);
                watch(w, path);
                return 0;
        }
        return walk_unreadable(w, root, rel, 0);
}

static int walk_deny_list(walk *w, const char *root, const char *deny_dir)
{
        for (size_t i = 0; i < AB_ARRAY_LEN(etc_deny); i++) {
                _cleanup_free_ char *pat = join(deny_dir, etc_deny[i]);
                const char *slash = strrchr(pat, '/');
                _cleanup_free_ char *dir_rel =
                    slash ? xasprintf("%.*s", (int)(slash - pat), pat) : xstrdup("");
                _cleanup_free_ char *dir = dir_rel[0] ? join(root, dir_rel) : xstrdup(root);
                const char *leaf = slash ? slash + 1 : pat;
                watch(w, dir);
                DIR *d = opendir(dir);
                if (!d)
                        continue;
                struct dirent *e;
                while ((e = readdir(d))) {
                        if (e->d_name[0] == '.' || fnmatch(leaf, e->d_name, 0) != 0)
                                continue;
                        _cleanup_free_ char *rel = join(dir_rel, e->d_name);
                        list_add(w, rel);
                }
                closedir(d);
        }
        return 0;
}

void ab_hide_list_unref(ab_hide_list *l)
{
        if (!l || atomic_fetch_sub(&l->refs, 1) != 1)
                return;
        for (size_t i = 0; i < l->n; i++)
                free(l->rel[i]);
        free(l->rel);
        free(l);
}

ab_hide_watch *ab_hide_watch_new_dirs(const char *root, const char *const *dirs,
                                      const char *deny_dir)
{
        ab_hide_watch *w = xzalloc(sizeof(*w));
        pthread_mutex_init(&w->lock, NULL);
        w->root = xstrdup(root);
        size_t n = 0;
        while (dirs[n])
                n++;
        w->dirs = xcalloc(n + 1, sizeof(char *));
        for (size_t i = 0; i < n; i++)
                w->dirs[i] = xstrdup(dirs[i]);
        w->deny_dir = xstrdup(deny_dir);
        w->ino = -1;
        w->mounts = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
        return w;
}

ab_hide_watch *ab_hide_watch_new(const char *etc)
{
        static const char *const all[] = {"", NULL};
        return ab_hide_watch_new_dirs(etc, all, "");
}

void ab_hide_watch_free(ab_hide_watch *w)
{
        if (!w)
                return;
        if (w->ino >= 0)
                close(w->ino);
        if (w->mounts >= 0)
                close(w->mounts);
        ab_hide_list_unref(w->cur);
        free(w->mount_key);
        pthread_mutex_destroy(&w->lock);
        for (size_t i = 0; w->dirs[i]; i++)
                free(w->dirs[i]);
        free(w->dirs);
        free(w->deny_dir);
        free(w->root);
        free(w);
}

/* Whether a mount at `mp` can change what root/dir shows: on it, below it or above it. */
static bool mount_matters(const char *mp, const char *path)
{
        size_t m = strlen(mp), p = strlen(path);
        if (m <= p)
                return !strncmp(path, mp, m) && (m == p || path[m] == '/' || mp[m - 1] == '/');
        return !strncmp(mp, path, p) && mp[p] == '/';
}

/* The mounts (id and mount point) of this namespace that can change what
 * the walked dirs show, in the mount table's order: the table changes with
 * every mount on the host (each box's volumes and skills), and only these
 * ask for a new walk. NULL when the table cannot be read (then any change
 * counts). */
static char *mount_key(ab_hide_watch *w)
{
        _cleanup_free_ char *txt = NULL;
        if (ab_read_file(AT_FDCWD, "/proc/self/mountinfo", &txt, NULL) < 0)
                return NULL;
        ab_buf key = {0};
        char *save = NULL;
        for (char *ln = strtok_r(txt, "\n", &save); ln; ln = strtok_r(NULL, "\n", &save)) {
                unsigned id;
                char mp[4096];
                if (sscanf(ln, "%u %*u %*s %*s %4095s", &id, mp) != 2)
                        continue;
                bool matters = false;
                for (size_t i = 0; !matters && w->dirs[i]; i++) {
                        _cleanup_free_ char *path = join(w->root, w->dirs[i]);
                        matters = mount_matters(mp, path);
                }
                if (matters)
                        ab_buf_printf(&key, "%u %s\n", id, mp);
        }
        return ab_buf_steal(&key);
}

/* Whether the host may have changed since the last walk. */
static bool changed(ab_hide_watch *w)
{
        if (!w->cur || w->ino < 0 || w->mounts < 0 || !w->mount_key)
                return true;
        char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
        ssize_t n = read(w->ino, buf, sizeof(buf));
        if (n != -1 || errno != EAGAIN)
                return true; /* an event (or an error: do not trust the watch) */
        struct pollfd p = {w->mounts, POLLPRI, 0};
        if (poll(&p, 1, 0) == 0)
                return false;
        _cleanup_free_ char *key = mount_key(w);
        return !key || strcmp(key, w->mount_key) != 0;
}

ab_hide_list *ab_hide_get(ab_hide_watch *w, ab_err **err)
{
        pthread_mutex_lock(&w->lock);
        if (changed(w)) {
                ab_hide_list_unref(w->cur);
                w->cur = NULL;
                if (w->ino >= 0)
                        close(w->ino);
                /* The mount table as it is before the walk: consume its
                 * pending change, then note the mounts that matter. */
                if (w->mounts >= 0)
                        (void)poll(&(struct pollfd){w->mounts, POLLPRI, 0}, 1, 0);
                free(w->mount_key);
                w->mount_key = mount_key(w);
                walk wk = {.l = xzalloc(sizeof(ab_hide_list)),
                           .ino = inotify_init1(IN_NONBLOCK | IN_CLOEXEC)};
                atomic_init(&wk.l->refs, 1);
                int r = 0;
                for (size_t i = 0; r == 0 && w->dirs[i]; i++)
                        r = walk_top(&wk, w->root, w->dirs[i]);
                if (r == 0)
                        r = walk_deny_list(&wk, w->root, w->deny_dir);
                w->ino = wk.ino;
                w->walks++;
                if (r < 0) {
                        ab_hide_list_unref(wk.l);
                        pthread_mutex_unlock(&w->lock);
                        ab_err_set(err, AB_E_INTERNAL, -r, "cannot read %s", w->root);
                        return NULL;
                }
                w->cur = wk.l;
        }
        ab_hide_list *l = w->cur;
        atomic_fetch_add(&l->refs, 1);
        pthread_mutex_unlock(&w->lock);
        return l;
}

unsigned ab_hide_walks(ab_hide_watch *w)
{
        pthread_mutex_lock(&w->lock);
        unsigned n = w->walks;
        pthread_mutex_unlock(&w->lock);
        return n;
}

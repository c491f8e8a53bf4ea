#include "native/hide.h"
#include "base/buf.h"

#include <dirent.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <time.h>

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
/* A directory whose mtime or ctime is this close (seconds) to a walk may
 * change again within the same timestamp tick after it was read, unseen by
 * its mtime (timestamps are coarse): it is read again next time. */
#define RACY_S 2
/* The persisted walk (see ab_hide_watch_persist): its format. */
static const char cache_magic[8] = {'a', 'b', 'h', 'i', 'd', 'e', '\n', '\0'};
#define CACHE_VERSION   1u
#define CACHE_MAX_BYTES (256u << 20)

/* What a walk saw of one directory: enough to trust it again without
 * reading it while its (dev, ino, mtime, ctime) stay the same. */
typedef struct dir_rec {
        char *rel;
        uint64_t dev, ino;
        int64_t mtime_s, ctime_s;
        uint32_t mtime_ns, ctime_ns;
        bool racy;    /* changed too close to the walk: never trusted */
        char **files; /* entries hidden that are not directories */
        char **dirs;  /* every directory entry, judged again at each use */
        size_t n_files, n_dirs, cap_files, cap_dirs;
} dir_rec;

/* Every directory one walk read or trusted, and what else its result
 * depended on. `idx` (open addressing over rel: index + 1, 0 empty) is
 * built only for a set a later walk starts from. */
typedef struct dir_set {
        dir_rec *v;
        size_t n, cap;
        size_t *idx;
        size_t idx_cap;
        int64_t full_time; /* when every entry was last stat'ed (unix seconds) */
        char *mount_key;
} dir_set;

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
        bool one_shot;       /* no inotify: every get checks the directories again */
        char *cache_path;    /* where walks persist; NULL: nowhere */
        unsigned max_age;    /* seconds a walk that did not stat every entry is trusted */
        dir_set *last;       /* the directories of the last walk */
        unsigned read, kept; /* of the last walk: directories read, trusted unread */
};

typedef struct walk {
        ab_hide_list *l;
        size_t cap;
        int ino;            /* -1 once a watch could not be set */
        const dir_set *old; /* trusted where a directory is unchanged; NULL: read all */
        dir_set seen;
        int64_t racy_from;
        unsigned read, kept;
} walk;

static void list_add(walk *w, const char *rel)
{
        if (w->l->n == w->cap) {
                w->cap = w->cap ? xmul(w->cap, 2) : 16;
                w->l->rel = xrealloc(w->l->rel, xmul(w->cap, sizeof(char *)));
        }
        w->l->rel[w->l->n++] = xstrdup(rel);
}

static void strv_add(char ***v, size_t *n, size_t *cap, const char *s)
{
        if (*n == *cap) {
                *cap = *cap ? xmul(*cap, 2) : 4;
                *v = xrealloc(*v, xmul(*cap, sizeof(char *)));
        }
        (*v)[(*n)++] = xstrdup(s);
}

static void dir_set_free(dir_set *s)
{
        if (!s)
                return;
        for (size_t i = 0; i < s->n; i++) {
                dir_rec *r = &s->v[i];
                for (size_t j = 0; j < r->n_files; j++)
                        free(r->files[j]);
                for (size_t j = 0; j < r->n_dirs; j++)
                        free(r->dirs[j]);
                free(r->files);
                free(r->dirs);
                free(r->rel);
        }
        free(s->v);
        free(s->idx);
        free(s->mount_key);
        free(s);
}

static uint64_t fnv(const void *p, size_t n)
{
        const unsigned char *c = p;
        uint64_t h = 14695981039346656037ull;
        for (size_t i = 0; i < n; i++)
                h = (h ^ c[i]) * 1099511628211ull;
        return h;
}

static void dir_set_index(dir_set *s)
{
        s->idx_cap = 16;
        while (s->idx_cap < xmul(s->n, 2))
                s->idx_cap *= 2;
        s->idx = xcalloc(s->idx_cap, sizeof(size_t));
        for (size_t i = 0; i < s->n; i++) {
                size_t k = fnv(s->v[i].rel, strlen(s->v[i].rel)) & (s->idx_cap - 1);
                while (s->idx[k])
                        k = (k + 1) & (s->idx_cap - 1);
                s->idx[k] = i + 1;
        }
}

static const dir_rec *dir_set_find(const dir_set *s, const char *rel)
{
        if (!s->idx)
                return NULL;
        size_t k = fnv(rel, strlen(rel)) & (s->idx_cap - 1);
        for (; s->idx[k]; k = (k + 1) & (s->idx_cap - 1))
                if (!strcmp(s->v[s->idx[k] - 1].rel, rel))
                        return &s->v[s->idx[k] - 1];
        return NULL;
}

static bool same_dir(const dir_rec *r, const struct stat *st)
{
        return !r->racy && r->dev == (uint64_t)st->st_dev && r->ino == (uint64_t)st->st_ino &&
               r->mtime_s == st->st_mtim.tv_sec && r->mtime_ns == (uint32_t)st->st_mtim.tv_nsec &&
               r->ctime_s == st->st_ctim.tv_sec && r->ctime_ns == (uint32_t)st->st_ctim.tv_nsec;
}

/* Notes a directory of this walk (stat'ed before it was read); its index. */
static size_t rec_add(walk *w, const char *rel, const struct stat *st)
{
        dir_set *s = &w->seen;
        if (s->n == s->cap) {
                s->cap = s->cap ? xmul(s->cap, 2) : 256;
                s->v = xrealloc(s->v, xmul(s->cap, sizeof(dir_rec)));
        }
        s->v[s->n] = (dir_rec){
            .rel = xstrdup(rel),
            .dev = st->st_dev,
            .ino = st->st_ino,
            .mtime_s = st->st_mtim.tv_sec,
            .mtime_ns = (uint32_t)st->st_mtim.tv_nsec,
            .ctime_s = st->st_ctim.tv_sec,
            .ctime_ns = (uint32_t)st->st_ctim.tv_nsec,
            .racy = st->st_mtim.tv_sec >= w->racy_from || st->st_ctim.tv_sec >= w->racy_from,
        };
        return s->n++;
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

static int walk_unreadable(walk *w, const char *root, const char *rel, int depth,
                           const struct stat *known);

/* One entry `name` of directory root/rel (its record ri), as stat'ed:
 * hidden when no host user but its owner (or group) could read it; a
 * readable directory is descended. */
static int judge(walk *w, const char *root, const char *rel, size_t ri, const char *name,
                 const struct stat *st, int depth)
{
        if (S_ISLNK(st->st_mode))
                return 0; /* a link resolves inside the box, to what the box sees */
        bool dir = S_ISDIR(st->st_mode);
        dir_rec *r = &w->seen.v[ri];
        if (dir)
                strv_add(&r->dirs, &r->n_dirs, &r->cap_dirs, name);
        _cleanup_free_ char *sub = join(rel, name);
        bool readable = (st->st_mode & S_IROTH) && (!dir || (st->st_mode & S_IXOTH));
        if (!readable || (dir && depth >= MAX_DEPTH)) {
                list_add(w, sub);
                if (!dir)
                        strv_add(&r->files, &r->n_files, &r->cap_files, name);
                return 0;
        }
        return dir ? walk_unreadable(w, root, sub, depth + 1, st) : 0;
}

/* A directory unchanged since the walk w->old describes: its hidden files
 * are taken from there unread, its subdirectories stat'ed and judged again. */
static int walk_trusted(walk *w, const char *root, const char *rel, const char *path,
                        const dir_rec *old, const struct stat *st, int depth)
{
        w->kept++;
        size_t ri = rec_add(w, rel, st);
        for (size_t i = 0; i < old->n_files; i++) {
                _cleanup_free_ char *sub = join(rel, old->files[i]);
                list_add(w, sub);
                dir_rec *r = &w->seen.v[ri];
                strv_add(&r->files, &r->n_files, &r->cap_files, old->files[i]);
        }
        int r = 0;
        for (size_t i = 0; r == 0 && i < old->n_dirs; i++) {
                _cleanup_free_ char *sub = join(path, old->dirs[i]);
                struct stat cs;
                if (lstat(sub, &cs) < 0) {
                        if (errno != ENOENT && errno != ENOTDIR)
                                r = -errno;
                        continue;
                }
                r = judge(w, root, rel, ri, old->dirs[i], &cs, depth);
        }
        return r;
}

/* Lists, below root/rel, every entry no host user but its owner (or group)
 * could read; readable directories are descended. `known` is rel's stat
 * when the caller has one (taken again when watching: the watch comes first). */
static int walk_unreadable(walk *w, const char *root, const char *rel, int depth,
                           const struct stat *known)
{
        _cleanup_free_ char *path = rel[0] ? join(root, rel) : xstrdup(root);
        struct stat st;
        if (w->ino >= 0 || !known) {
                watch(w, path);
                if (lstat(path, &st) < 0)
                        return errno == ENOENT || errno == ENOTDIR ? 0 : -errno;
                known = &st;
        }
        if (!S_ISDIR(known->st_mode))
                return 0;
        const dir_rec *old = w->old ? dir_set_find(w->old, rel) : NULL;
        if (old && same_dir(old, known))
                return walk_trusted(w, root, rel, path, old, known, depth);
        w->read++;
        int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return errno == ENOENT || errno == ENOTDIR || errno == ELOOP ? 0 : -errno;
        struct stat ds;
        DIR *d = fstat(fd, &ds) == 0 ? fdopendir(fd) : NULL;
        if (!d) {
                int e = -errno;
                close(fd);
                return e;
        }
        size_t ri = rec_add(w, rel, &ds); /* stat'ed before a single entry was read */
        int r = 0;
        struct dirent *e;
        while (r == 0 && (e = readdir(d))) {
                if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                        continue;
                struct stat cs;
                if (fstatat(dirfd(d), e->d_name, &cs, AT_SYMLINK_NOFOLLOW) == 0)
                        r = judge(w, root, rel, ri, e->d_name, &cs, depth);
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
                return walk_unreadable(w, root, "", 0, NULL);
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
        return walk_unreadable(w, root, rel, 0, NULL);
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
        w->max_age = AB_HIDE_CACHE_MAX_AGE_S;
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
        dir_set_free(w->last);
        free(w->cache_path);
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

/* The persisted walk. Native byte order (it never leaves the host):
 * magic, version, full_time, boot id, root, dirs, deny_dir, mount key, the
 * directory records, then an FNV-1a hash of everything before it. Strings
 * are a u32 length and their bytes. */

static void put_u32(ab_buf *b, uint32_t v)
{
        ab_buf_add(b, &v, sizeof(v));
}

static void put_u64(ab_buf *b, uint64_t v)
{
        ab_buf_add(b, &v, sizeof(v));
}

static void put_str(ab_buf *b, const char *s)
{
        size_t n = strlen(s);
        put_u32(b, (uint32_t)n);
        ab_buf_add(b, s, n);
}

typedef struct reader {
        const char *p;
        size_t n;
        bool bad;
} reader;

static bool take(reader *r, void *out, size_t k)
{
        if (r->bad || r->n < k) {
                r->bad = true;
                memset(out, 0, k);
                return false;
        }
        memcpy(out, r->p, k);
        r->p += k;
        r->n -= k;
        return true;
}

static uint32_t get_u32(reader *r)
{
        uint32_t v;
        take(r, &v, sizeof(v));
        return v;
}

static uint64_t get_u64(reader *r)
{
        uint64_t v;
        take(r, &v, sizeof(v));
        return v;
}

/* A string (malloc'd), or NULL and r->bad when it overruns or holds a NUL. */
static char *get_str(reader *r)
{
        uint32_t n = get_u32(r);
        if (r->bad || r->n < n || memchr(r->p, '\0', n)) {
                r->bad = true;
                return NULL;
        }
        char *s = xstrndup(r->p, n);
        r->p += n;
        r->n -= n;
        return s;
}

static bool str_is(reader *r, const char *want)
{
        _cleanup_free_ char *s = get_str(r);
        return s && !strcmp(s, want);
}

/* A count of items of at least `min` bytes each that can fit in what is left. */
static size_t get_count(reader *r, size_t min)
{
        uint32_t n = get_u32(r);
        if (n > r->n / min)
                r->bad = true;
        return r->bad ? 0 : n;
}

/* A directory entry's name as a walk records it: one path component. */
static bool name_ok(const char *s)
{
        return s && s[0] && !strchr(s, '/') && strcmp(s, ".") && strcmp(s, "..");
}

static void get_names(reader *r, char ***v, size_t *n, size_t *cap)
{
        size_t k = get_count(r, sizeof(uint32_t) + 1);
        for (size_t i = 0; i < k && !r->bad; i++) {
                _cleanup_free_ char *s = get_str(r);
                if (!name_ok(s))
                        r->bad = true;
                else
                        strv_add(v, n, cap, s);
        }
}

static char *boot_id(void)
{
        char *s = NULL;
        if (ab_read_file(AT_FDCWD, "/proc/sys/kernel/random/boot_id", &s, NULL) < 0)
                return xstrdup("");
        s[strcspn(s, "\n")] = '\0';
        return s;
}

static void put_header(ab_hide_watch *w, ab_buf *b, const dir_set *s)
{
        _cleanup_free_ char *boot = boot_id();
        ab_buf_add(b, cache_magic, sizeof(cache_magic));
        put_u32(b, CACHE_VERSION);
        put_u64(b, (uint64_t)s->full_time);
        put_str(b, boot);
        put_str(b, w->root);
        size_t n = 0;
        while (w->dirs[n])
                n++;
        put_u32(b, (uint32_t)n);
        for (size_t i = 0; i < n; i++)
                put_str(b, w->dirs[i]);
        put_str(b, w->deny_dir);
        put_str(b, s->mount_key);
}

/* Whether the header read is this watch's, on this boot. */
static bool header_ok(ab_hide_watch *w, reader *r, dir_set *s)
{
        char magic[sizeof(cache_magic)];
        if (!take(r, magic, sizeof(magic)) || memcmp(magic, cache_magic, sizeof(magic)) ||
            get_u32(r) != CACHE_VERSION)
                return false;
        s->full_time = (int64_t)get_u64(r);
        _cleanup_free_ char *boot = boot_id();
        if (!str_is(r, boot) || !str_is(r, w->root))
                return false;
        size_t n = 0;
        while (w->dirs[n])
                n++;
        if (get_u32(r) != n)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!str_is(r, w->dirs[i]))
                        return false;
        if (!str_is(r, w->deny_dir))
                return false;
        s->mount_key = get_str(r);
        return !r->bad;
}

static bool get_rec(reader *r, dir_rec *d)
{
        d->rel = get_str(r);
        d->dev = get_u64(r);
        d->ino = get_u64(r);
        d->mtime_s = (int64_t)get_u64(r);
        d->mtime_ns = get_u32(r);
        d->ctime_s = (int64_t)get_u64(r);
        d->ctime_ns = get_u32(r);
        unsigned char racy = 1;
        take(r, &racy, 1);
        d->racy = racy != 0;
        get_names(r, &d->files, &d->n_files, &d->cap_files);
        get_names(r, &d->dirs, &d->n_dirs, &d->cap_dirs);
        return !r->bad;
}

/* The persisted walk, or NULL when there is none usable: missing,
 * truncated, corrupt, of another version, boot, root or set of dirs. */
static dir_set *cache_load(ab_hide_watch *w)
{
        _cleanup_free_ char *txt = NULL;
        size_t len = 0;
        struct stat st;
        if (stat(w->cache_path, &st) < 0 || st.st_size > CACHE_MAX_BYTES ||
            ab_read_file(AT_FDCWD, w->cache_path, &txt, &len) < 0 || len < sizeof(uint64_t))
                return NULL;
        uint64_t sum;
        memcpy(&sum, txt + len - sizeof(sum), sizeof(sum));
        len -= sizeof(sum);
        if (fnv(txt, len) != sum)
                return NULL;
        reader r = {.p = txt, .n = len};
        dir_set *s = xzalloc(sizeof(*s));
        if (!header_ok(w, &r, s)) {
                dir_set_free(s);
                return NULL;
        }
        /* rel, dev, ino, mtime, ctime, racy, the two name counts */
        size_t n = get_count(&r, 4 + 8 + 8 + 8 + 4 + 8 + 4 + 1 + 4 + 4);
        s->v = xcalloc(n ? n : 1, sizeof(dir_rec));
        s->cap = n ? n : 1;
        for (; s->n < n; s->n++)
                if (!get_rec(&r, &s->v[s->n])) {
                        s->n++; /* freed with the rest */
                        break;
                }
        if (r.bad || r.n) {
                dir_set_free(s);
                return NULL;
        }
        dir_set_index(s);
        return s;
}

/* Persists s (0600, a temp file renamed over the old one: a reader sees
 * the old file or the new one, and concurrent writers each a whole one).
 * A cache: failing to write it only costs the next process a full walk. */
static void cache_save(ab_hide_watch *w, const dir_set *s)
{
        _cleanup_buf_ ab_buf b = {0};
        put_header(w, &b, s);
        put_u32(&b, (uint32_t)s->n);
        for (size_t i = 0; i < s->n; i++) {
                const dir_rec *d = &s->v[i];
                put_str(&b, d->rel);
                put_u64(&b, d->dev);
                put_u64(&b, d->ino);
                put_u64(&b, (uint64_t)d->mtime_s);
                put_u32(&b, d->mtime_ns);
                put_u64(&b, (uint64_t)d->ctime_s);
                put_u32(&b, d->ctime_ns);
                ab_buf_putc(&b, d->racy ? 1 : 0);
                put_u32(&b, (uint32_t)d->n_files);
                for (size_t j = 0; j < d->n_files; j++)
                        put_str(&b, d->files[j]);
                put_u32(&b, (uint32_t)d->n_dirs);
                for (size_t j = 0; j < d->n_dirs; j++)
                        put_str(&b, d->dirs[j]);
        }
        put_u64(&b, fnv(b.p, b.n));
        _cleanup_free_ char *tmp =
            xasprintf("%s.tmp.%d.%d", w->cache_path, (int)getpid(), (int)gettid());
        /* Written unnamed, then named and renamed: a process killed while
         * writing leaves nothing behind. */
        _cleanup_free_ char *dir = xstrdup(w->cache_path);
        char *slash = strrchr(dir, '/');
        if (slash)
                *slash = '\0';
        bool unnamed = true;
        int fd = open(slash ? (dir[0] ? dir : "/") : ".", O_WRONLY | O_TMPFILE | O_CLOEXEC, 0600);
        if (fd < 0) {
                unnamed = false;
                fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        }
        if (fd < 0)
                return;
        int r = ab_write_all(fd, b.p, b.n);
        if (r == 0 && unnamed) {
                char self[64];
                snprintf(self, sizeof(self), "/proc/self/fd/%d", fd);
                if (linkat(AT_FDCWD, self, AT_FDCWD, tmp, AT_SYMLINK_FOLLOW) < 0)
                        r = -errno;
        }
        if (close(fd) < 0 && r == 0)
                r = -errno;
        if (r == 0 && rename(tmp, w->cache_path) < 0)
                r = -errno;
        if (r < 0)
                unlink(tmp);
}

enum { WALK_NONE, WALK_CHECK, WALK_FULL };

/* Whether the host may have changed since the last walk, and how to walk:
 * WALK_CHECK when nothing watched it (the first walk, a one-shot watch,
 * inotify unavailable): re-stat the directories of the last walk or of the
 * persisted one; WALK_FULL after a change was reported. */
static int need_walk(ab_hide_watch *w)
{
        if (!w->cur || w->ino < 0)
                return WALK_CHECK;
        /* The watch sees changes from its first walk on; one that started
         * from a persisted walk may have missed a chmod in place before. */
        if (w->mounts < 0 || !w->mount_key ||
            (w->kept && time(NULL) - w->last->full_time > (int64_t)w->max_age))
                return WALK_FULL;
        char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
        ssize_t n = read(w->ino, buf, sizeof(buf));
        if (n != -1 || errno != EAGAIN)
                return WALK_FULL; /* an event (or an error: do not trust the watch) */
        struct pollfd p = {w->mounts, POLLPRI, 0};
        if (poll(&p, 1, 0) == 0)
                return WALK_NONE;
        _cleanup_free_ char *key = mount_key(w);
        return !key || strcmp(key, w->mount_key) != 0 ? WALK_FULL : WALK_NONE;
}

/* What a checking walk may start from: the last walk or the persisted one,
 * if made under the same mounts and its oldest stat of every entry is
 * recent enough (a chmod of a file in place changes no directory). */
static const dir_set *start_from(ab_hide_watch *w, int64_t now)
{
        if (!w->mount_key)
                return NULL;
        if (!w->last && w->cache_path)
                w->last = cache_load(w);
        const dir_set *s = w->last;
        if (!s || !s->mount_key || strcmp(s->mount_key, w->mount_key) || s->full_time > now + 60 ||
            now - s->full_time > (int64_t)w->max_age)
                return NULL;
        if (!s->idx)
                dir_set_index(w->last);
        return s;
}

/* The set a walk filled, moved to the heap. */
static dir_set *set_box(dir_set *s)
{
        dir_set *h = xzalloc(sizeof(*h));
        *h = *s;
        return h;
}

static int walk_all(ab_hide_watch *w, walk *wk)
{
        int r = 0;
        for (size_t i = 0; r == 0 && w->dirs[i]; i++)
                r = walk_top(wk, w->root, w->dirs[i]);
        if (r == 0)
                r = walk_deny_list(wk, w->root, w->deny_dir);
        return r;
}

ab_hide_list *ab_hide_get(ab_hide_watch *w, ab_err **err)
{
        pthread_mutex_lock(&w->lock);
        int how = need_walk(w);
        if (how != WALK_NONE) {
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
                int64_t now = time(NULL);
                walk wk = {.l = xzalloc(sizeof(ab_hide_list)),
                           .ino = w->one_shot ? -1 : inotify_init1(IN_NONBLOCK | IN_CLOEXEC),
                           .old = how == WALK_CHECK ? start_from(w, now) : NULL,
                           .racy_from = now - RACY_S};
                atomic_init(&wk.l->refs, 1);
                int r = walk_all(w, &wk);
                w->ino = wk.ino;
                w->walks++;
                w->read = wk.read;
                w->kept = wk.kept;
                if (r < 0) {
                        ab_hide_list_unref(wk.l);
                        dir_set_free(set_box(&wk.seen));
                        pthread_mutex_unlock(&w->lock);
                        ab_err_set(err, AB_E_INTERNAL, -r, "cannot read %s", w->root);
                        return NULL;
                }
                dir_set *seen = set_box(&wk.seen);
                seen->full_time = wk.old && wk.kept ? wk.old->full_time : now;
                seen->mount_key = xstrdup(w->mount_key ? w->mount_key : "");
                if (w->cache_path && w->mount_key && (!wk.old || wk.read))
                        cache_save(w, seen);
                dir_set_free(w->last);
                w->last = seen;
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

void ab_hide_watch_persist(ab_hide_watch *w, const char *path, unsigned max_age_s)
{
        pthread_mutex_lock(&w->lock);
        free(w->cache_path);
        w->cache_path = path ? xstrdup(path) : NULL;
        w->max_age = max_age_s;
        pthread_mutex_unlock(&w->lock);
}

void ab_hide_watch_one_shot(ab_hide_watch *w)
{
        pthread_mutex_lock(&w->lock);
        w->one_shot = true;
        pthread_mutex_unlock(&w->lock);
}

void ab_hide_last_walk(ab_hide_watch *w, unsigned *read, unsigned *kept)
{
        pthread_mutex_lock(&w->lock);
        *read = w->read;
        *kept = w->kept;
        pthread_mutex_unlock(&w->lock);
}

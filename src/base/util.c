#include "util.h"
#include "buf.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <time.h>

static void oom(void)
{
        static const char msg[] = "agentbox: out of memory\n";
        (void)!write(STDERR_FILENO, msg, sizeof(msg) - 1);
        abort();
}

void *xmalloc(size_t n)
{
        void *p = malloc(n ? n : 1);
        if (!p)
                oom();
        return p;
}

void *xzalloc(size_t n)
{
        void *p = calloc(1, n ? n : 1);
        if (!p)
                oom();
        return p;
}

void *xcalloc(size_t n, size_t size)
{
        return xzalloc(xmul(n, size));
}

void *xrealloc(void *p, size_t n)
{
        void *q = realloc(p, n ? n : 1);
        if (!q)
                oom();
        return q;
}

char *xstrdup(const char *s)
{
        char *p = strdup(s);
        if (!p)
                oom();
        return p;
}

char *xstrndup(const char *s, size_t n)
{
        char *p = strndup(s, n);
        if (!p)
                oom();
        return p;
}

char *xasprintf(const char *fmt, ...)
{
        va_list ap;
        char *s = NULL;
        va_start(ap, fmt);
        int r = vasprintf(&s, fmt, ap);
        va_end(ap);
        if (r < 0)
                oom();
        return s;
}

size_t xadd(size_t a, size_t b)
{
        size_t r;
        if (__builtin_add_overflow(a, b, &r))
                abort();
        return r;
}

size_t xmul(size_t a, size_t b)
{
        size_t r;
        if (__builtin_mul_overflow(a, b, &r))
                abort();
        return r;
}

int ab_write_all(int fd, const void *buf, size_t len)
{
        const char *p = buf;
        while (len > 0) {
                ssize_t n = write(fd, p, len);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                p += n;
                len -= (size_t)n;
        }
        return 0;
}

int ab_send_all(int fd, const void *buf, size_t len, int timeout_ms)
{
        const char *p = buf;
        uint64_t until = timeout_ms < 0 ? 0 : ab_now_ms() + (uint64_t)timeout_ms;
        while (len) {
                ssize_t k = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (k > 0) {
                        p += k;
                        len -= (size_t)k;
                        if (timeout_ms >= 0) /* the peer takes bytes: its time starts again */
                                until = ab_now_ms() + (uint64_t)timeout_ms;
                        continue;
                }
                if (k < 0 && errno == EINTR)
                        continue;
                if (k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
                        return k == 0 ? -EPIPE : -errno;
                int wait = -1;
                if (timeout_ms >= 0) {
                        uint64_t now = ab_now_ms();
                        if (now >= until)
                                return -ETIMEDOUT;
                        wait = (int)(until - now);
                }
                struct pollfd pf = {.fd = fd, .events = POLLOUT};
                if (poll(&pf, 1, wait) < 0 && errno != EINTR)
                        return -errno;
        }
        return 0;
}

ssize_t ab_read_full(int fd, void *buf, size_t len)
{
        char *p = buf;
        size_t got = 0;
        while (got < len) {
                ssize_t n = read(fd, p + got, len - got);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (n == 0)
                        break;
                got += (size_t)n;
        }
        return (ssize_t)got;
}

int ab_read_file(int dirfd, const char *path, char **out, size_t *len)
{
        _cleanup_close_ int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return -errno;
        _cleanup_buf_ ab_buf b = {0};
        for (;;) {
                char *p = ab_buf_reserve(&b, 4096);
                ssize_t r = read(fd, p, b.cap - b.n - 1);
                if (r < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (r == 0)
                        break;
                ab_buf_commit(&b, (size_t)r);
        }
        if (len)
                *len = b.n;
        *out = ab_buf_steal(&b);
        return 0;
}

int ab_write_file_atomic(int dirfd, const char *path, const void *data, size_t len, mode_t mode)
{
        _cleanup_free_ char *tmp = xasprintf("%s.tmp.%d", path, (int)getpid());
        _cleanup_close_ int fd =
            openat(dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
        if (fd < 0)
                return -errno;
        int r = ab_write_all(fd, data, len);
        if (r == 0 && fsync(fd) < 0)
                r = -errno;
        if (r == 0 && renameat(dirfd, tmp, dirfd, path) < 0)
                r = -errno;
        if (r < 0) {
                unlinkat(dirfd, tmp, 0);
                return r;
        }
        /* Make the rename itself durable. */
        char dir[4096];
        const char *slash = strrchr(path, '/');
        _cleanup_close_ int dfd = -1;
        if (slash) {
                snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
                dfd = openat(dirfd, dir[0] ? dir : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        } else {
                dfd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        }
        if (dfd >= 0)
                fsync(dfd);
        return 0;
}

uint64_t ab_now_ns(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int rm_tree_dev(int dfd, const char *name, dev_t dev)
{
        struct stat st;
        if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return errno == ENOENT ? 0 : -errno;
        if (!S_ISDIR(st.st_mode))
                return unlinkat(dfd, name, 0) < 0 && errno != ENOENT ? -errno : 0;
        if (st.st_dev != dev)
                return -EBUSY; /* something is mounted there: never delete through it */
        int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        DIR *d = fd < 0 ? NULL : fdopendir(fd);
        if (!d) {
                int e = errno;
                if (fd >= 0)
                        close(fd);
                return -e;
        }
        int r = 0;
        struct dirent *e;
        while ((e = readdir(d))) {
                if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                        continue;
                int q = rm_tree_dev(dirfd(d), e->d_name, dev);
                if (q < 0 && r == 0)
                        r = q;
        }
        closedir(d);
        if (unlinkat(dfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT && r == 0)
                r = -errno;
        return r;
}

int ab_rm_tree_at(int dfd, const char *name)
{
        struct stat top;
        if (fstat(dfd, &top) < 0)
                return -errno;
        return rm_tree_dev(dfd, name, top.st_dev);
}

/* Length of the valid UTF-8 sequence at s (1..4; overlong forms, surrogates
 * and code points above U+10FFFF are invalid), or 0. */
static size_t utf8_len(const unsigned char *s, uint32_t *cp)
{
        unsigned char c = s[0];
        size_t n;
        uint32_t v, min;
        if (c < 0x80) {
                *cp = c;
                return 1;
        } else if ((c & 0xe0) == 0xc0) {
                n = 2, v = c & 0x1f, min = 0x80;
        } else if ((c & 0xf0) == 0xe0) {
                n = 3, v = c & 0x0f, min = 0x800;
        } else if ((c & 0xf8) == 0xf0) {
                n = 4, v = c & 0x07, min = 0x10000;
        } else {
                return 0;
        }
        for (size_t i = 1; i < n; i++) {
                if ((s[i] & 0xc0) != 0x80)
                        return 0; /* also stops at the terminating NUL */
                v = (v << 6) | (s[i] & 0x3f);
        }
        if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
                return 0;
        *cp = v;
        return n;
}

static bool name_cp_unsafe(uint32_t cp)
{
        return cp < 0x20 || cp == 0x7f || cp == '\\' || (cp >= 0x80 && cp <= 0x9f) ||
               (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
}

char *ab_name_escape(const char *name, bool *changed)
{
        static const char hex[] = "0123456789ABCDEF";
        const unsigned char *s = (const unsigned char *)name;
        size_t len = strlen(name);
        /* at most every byte becomes three */
        if (len > (SIZE_MAX - 1) / 3)
                abort();
        char *out = xmalloc(len * 3 + 1), *o = out;
        bool any = false;
        for (size_t i = 0; i < len;) {
                uint32_t cp = 0;
                size_t n = utf8_len(s + i, &cp);
                if (n > 0 && !name_cp_unsafe(cp)) {
                        memcpy(o, s + i, n);
                        o += n;
                        i += n;
                        continue;
                }
                /* an unsafe character: each of its bytes; not UTF-8: this byte */
                size_t k = n > 0 ? n : 1;
                for (size_t j = 0; j < k; j++, i++) {
                        *o++ = '%';
                        *o++ = hex[s[i] >> 4];
                        *o++ = hex[s[i] & 15];
                }
                any = true;
        }
        *o = 0;
        if (changed)
                *changed = any;
        return out;
}

bool ab_csv_has(const char *list, const char *item)
{
        size_t n = strlen(item);
        for (const char *p = list; p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
                if (strncmp(p, item, n) == 0 && (p[n] == ',' || p[n] == '\0'))
                        return true;
        return false;
}

char *ab_proc_cgroup_path(const char *file, const char *ctrl, char **ctrls)
{
        FILE *f = fopen(file, "re");
        if (!f)
                return NULL;
        char line[1024];
        char *out = NULL;
        while (!out && fgets(line, sizeof(line), f)) {
                line[strcspn(line, "\n")] = '\0';
                char *c1 = strchr(line, ':');
                char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
                if (!c2)
                        continue;
                *c2 = '\0';
                const char *list = c1 + 1;
                bool match = ctrl ? ab_csv_has(list, ctrl) : !*list && !strncmp(line, "0:", 2);
                if (match) {
                        out = xstrdup(c2 + 1);
                        if (ctrls)
                                *ctrls = xstrdup(list);
                }
        }
        fclose(f);
        return out;
}

#include "base/selfpath.h"
#include "base/buf.h"
#include "base/util.h"

#include <limits.h>

char *ab_self_dir(void)
{
        char self[PATH_MAX];
        ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
        if (len <= 0)
                return NULL;
        self[len] = '\0';
        char *slash = strrchr(self, '/');
        if (!slash)
                return NULL;
        *slash = '\0';
        return xstrdup(self[0] ? self : "/");
}

/* path with "a/.." pairs and "." removed, without looking at the
 * filesystem (the binary's directory has no symlinks: it comes from
 * /proc/self/exe). For messages about paths that do not exist. */
static void lexical_clean(char *path)
{
        char *out = path, *p = path;
        while (*p) {
                while (*p == '/')
                        p++;
                char *end = strchrnul(p, '/');
                size_t n = (size_t)(end - p);
                if (n == 1 && p[0] == '.') {
                        /* skip */
                } else if (n == 2 && p[0] == '.' && p[1] == '.') {
                        while (out > path && *--out != '/')
                                ;
                } else if (n) {
                        *out++ = '/';
                        memmove(out, p, n);
                        out += n;
                }
                p = end;
        }
        if (out == path)
                *out++ = '/';
        *out = '\0';
}

char *ab_find_beside_self(const char *const *dirs, const char *probe, int amode, char **looked)
{
        _cleanup_free_ char *self = ab_self_dir();
        _cleanup_buf_ ab_buf tried = {0};
        for (const char *const *d = dirs; *d; d++) {
                if ((*d)[0] != '/' && !self)
                        continue;
                _cleanup_free_ char *dir = (*d)[0] == '/'         ? xstrdup(*d)
                                           : strcmp(*d, ".") == 0 ? xstrdup(self)
                                                                  : xasprintf("%s/%s", self, *d);
                _cleanup_free_ char *path = xasprintf("%s/%s", dir, probe);
                if (access(path, amode) == 0) {
                        char *real = realpath(dir, NULL);
                        if (real)
                                return real;
                }
                _cleanup_free_ char *canon = realpath(dir, NULL);
                if (!canon) {
                        canon = xstrdup(dir);
                        lexical_clean(canon);
                }
                if (tried.n)
                        ab_buf_puts(&tried, ", ");
                ab_buf_puts(&tried, canon);
                ab_buf_puts(&tried, "/");
                ab_buf_puts(&tried, probe);
        }
        if (looked)
                *looked = tried.n ? ab_buf_steal(&tried) : xstrdup("(nowhere)");
        return NULL;
}

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
                if (tried.n)
                        ab_buf_puts(&tried, ", ");
                ab_buf_puts(&tried, canon ? canon : dir);
                ab_buf_puts(&tried, "/");
                ab_buf_puts(&tried, probe);
        }
        if (looked)
                *looked = tried.n ? ab_buf_steal(&tried) : xstrdup("(nowhere)");
        return NULL;
}

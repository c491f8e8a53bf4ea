#include "backend/backend.h"
#include "backend/backend_int.h"
#include "base/selfpath.h"
#include "net/netns.h"
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void ab_box_info_clear(ab_box_info *i)
{
        free(i->id);
        free(i->rootfs);
        free(i->image);
        free(i->error);
        free(i->image_workdir);
        free(i->image_user);
        memset(i, 0, sizeof(*i));
}

void ab_volume_info_clear(ab_volume_info *v)
{
        free(v->name);
        free(v->owner);
        ab_strvfreep(&v->boxes);
        memset(v, 0, sizeof(*v));
}

char *ab_backend_find_init(const char *given, ab_err **err)
{
        const char *env = getenv("AGENTBOX_INIT");
        const char *set = given && *given ? given : env && *env ? env : NULL;
        if (set) {
                char *p = realpath(set, NULL);
                if (!p || access(p, X_OK) < 0) {
                        ab_err_set(err, AB_E_INTERNAL, errno,
                                   "agentbox-init at %s (from init_path or AGENTBOX_INIT) cannot "
                                   "be run",
                                   set);
                        free(p);
                        return NULL;
                }
                return p;
        }
        static const char *const dirs[] = {".", "../libexec/agentbox",
#ifdef AGENTBOX_LIBEXECDIR
                                           AGENTBOX_LIBEXECDIR,
#endif
                                           NULL};
        _cleanup_free_ char *looked = NULL;
        _cleanup_free_ char *dir = ab_find_beside_self(dirs, "agentbox-init", X_OK, &looked);
        if (!dir) {
                ab_err_set(err, AB_E_INTERNAL, ENOENT,
                           "agentbox-init not found: looked at %s (set init_path in the config "
                           "or AGENTBOX_INIT)",
                           looked);
                return NULL;
        }
        return xasprintf("%s/agentbox-init", dir);
}

int ab_backend_mkdir_p(const char *path, mode_t mode)
{
        char buf[4096];
        snprintf(buf, sizeof(buf), "%s", path);
        for (char *p = buf + 1; *p; p++) {
                if (*p != '/')
                        continue;
                *p = '\0';
                if (mkdir(buf, 0755) < 0 && errno != EEXIST)
                        return -errno;
                *p = '/';
        }
        if (mkdir(buf, mode) < 0 && errno != EEXIST)
                return -errno;
        return 0;
}

bool ab_backend_path_within(const char *path, const char *dir)
{
        size_t n = strlen(dir);
        if (n == 1)
                return true;
        return !strncmp(path, dir, n) && (path[n] == '\0' || path[n] == '/');
}

int ab_backend_port_netns(pid_t init_pid, const char *id, uint16_t port, int timeout_ms,
                          ab_err **err)
{
        int fd = ab_netns_connect_loopback(init_pid, port, timeout_ms);
        if (fd >= 0)
                return fd;
        if (fd == -ENOENT || fd == -ESRCH) /* init is gone: the box stopped under us */
                return ab_err_set(err, AB_E_CONFLICT, 0, "box '%s' is not running", id);
        if (fd == -ETIMEDOUT) {
                ab_err_set(err, AB_E_TIMEOUT, 0, "port %u of box '%s' does not answer", port, id);
        } else {
                ab_err_set(err, AB_E_UNAVAILABLE, 0, "port %u of box '%s': %s", port, id,
                           fd == -ECONNREFUSED || fd == -EADDRNOTAVAIL ? "nothing listens"
                                                                       : strerror(-fd));
        }
        if (err && *err)
                (*err)->errnum = fd == -EADDRNOTAVAIL ? ECONNREFUSED : -fd;
        return -1;
}

#include "base/mounts.h"
#include "base/util.h"

#include <string.h>

int ab_volume_name_check(const char *name, ab_err **err)
{
        size_t n = name ? strlen(name) : 0;
        bool ok = n >= 1 && n <= 63;
        for (size_t i = 0; ok && i < n; i++) {
                char c = name[i];
                bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
                ok = alnum || (i > 0 && (c == '_' || c == '.' || c == '-'));
        }
        if (!ok)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "bad volume name '%s': use [a-z0-9][a-z0-9_.-]{0,62}",
                                  name ? name : "");
        return 0;
}

/* path equals dir or lies below it */
static bool under(const char *path, const char *dir)
{
        size_t n = strlen(dir);
        return !strncmp(path, dir, n) && (path[n] == '\0' || path[n] == '/');
}

static const char *const kernel_dirs[] = {"/proc", "/dev", "/sys"};
static const char *const own_dirs[] = {"/workspace",
                                       "/mnt",
                                       "/mnt/user-data",
                                       "/mnt/user-data/workspace",
                                       "/mnt/user-data/uploads",
                                       "/mnt/user-data/outputs"};

bool ab_box_path_noop(const char *path)
{
        for (size_t i = 0; i < AB_ARRAY_LEN(kernel_dirs); i++)
                if (!strcmp(path, kernel_dirs[i]))
                        return true;
        return false;
}

int ab_box_path_check(const char *path, ab_mount_kind kind, ab_err **err)
{
        if (!path || path[0] != '/')
                return ab_err_set(err, AB_E_INVALID, 0, "path '%s': must be absolute",
                                  path ? path : "");
        size_t len = strlen(path);
        if (len > 1024)
                return ab_err_set(err, AB_E_INVALID, 0, "path: longer than 1024 bytes");
        if (len == 1)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "path '/': the box's root cannot be "
                                  "replaced");
        if (path[len - 1] == '/')
                return ab_err_set(err, AB_E_INVALID, 0, "path '%s': no trailing '/'", path);
        for (const char *c = path; *c;) {
                const char *e = strchr(c + 1, '/');
                size_t clen = e ? (size_t)(e - c - 1) : strlen(c + 1);
                if (clen == 0 || (clen == 1 && c[1] == '.') ||
                    (clen == 2 && c[1] == '.' && c[2] == '.'))
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "path '%s': must be normalised (no '//', '.' or '..')",
                                          path);
                if (!e)
                        break;
                c = e;
        }
        bool own_kind = kind == AB_MOUNT_READONLY || kind == AB_MOUNT_BLOCKED;
        if (own_kind && ab_box_path_noop(path))
                return 0;
        for (size_t i = 0; i < AB_ARRAY_LEN(kernel_dirs); i++)
                if (under(path, kernel_dirs[i]))
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "path '%s': nothing can be mounted in %s (the box's "
                                          "own kernel file system)",
                                          path, kernel_dirs[i]);
        if (!own_kind)
                for (size_t i = 0; i < AB_ARRAY_LEN(own_dirs); i++)
                        if (!strcmp(path, own_dirs[i]))
                                return ab_err_set(err, AB_E_INVALID, 0,
                                                  "path '%s': the box's own folder cannot be "
                                                  "replaced (mount inside it instead)",
                                                  path);
        return 0;
}

int ab_volume_sub_check(const char *sub, ab_err **err)
{
        size_t n = strlen(sub);
        if (!n || n > 1024)
                return ab_err_set(err, AB_E_INVALID, 0, "sub_path: 1 to 1024 bytes");
        if (sub[0] == '/')
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "sub_path '%s': must be relative (a folder of the volume)", sub);
        for (const char *p = sub; *p;) {
                const char *e = strchrnul(p, '/');
                size_t len = (size_t)(e - p);
                if (!len || (len == 1 && p[0] == '.') || (len == 2 && !strncmp(p, "..", 2)))
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "sub_path '%s': no empty, '.' or '..' names", sub);
                p = *e ? e + 1 : e;
                if (*e && !*p)
                        return ab_err_set(err, AB_E_INVALID, 0, "sub_path '%s': no trailing '/'",
                                          sub);
        }
        return 0;
}

const char *ab_mount_kind_name(ab_mount_kind k)
{
        switch (k) {
        case AB_MOUNT_VOLUME:
                return "volume";
        case AB_MOUNT_HOST:
                return "host";
        case AB_MOUNT_READONLY:
                return "readonly";
        case AB_MOUNT_BLOCKED:
                return "blocked";
        }
        return "?";
}

int ab_box_mounts_check(const ab_box_mount *m, size_t n, ab_err **err)
{
        if (n > AB_MOUNTS_MAX)
                return ab_err_set(err, AB_E_INVALID, 0, "at most %d volumes, mounts and paths",
                                  AB_MOUNTS_MAX);
        for (size_t i = 0; i < n; i++) {
                if (ab_box_path_check(m[i].path, m[i].kind, err) < 0)
                        return ab_err_wrap(err, "%ss[%zu]", ab_mount_kind_name(m[i].kind), i);
                if (m[i].kind == AB_MOUNT_VOLUME && ab_volume_name_check(m[i].source, err) < 0)
                        return -1;
                if (m[i].sub && m[i].kind != AB_MOUNT_VOLUME)
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "%ss[%zu]: only a volume has a sub_path",
                                          ab_mount_kind_name(m[i].kind), i);
                if (m[i].sub && ab_volume_sub_check(m[i].sub, err) < 0)
                        return ab_err_wrap(err, "volumes[%zu]", i);
                if (m[i].kind == AB_MOUNT_HOST && (!m[i].source || m[i].source[0] != '/'))
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "mounts[%zu].host_path: must be absolute", i);
                bool bind = m[i].kind == AB_MOUNT_VOLUME || m[i].kind == AB_MOUNT_HOST;
                for (size_t j = 0; bind && j < i; j++)
                        if ((m[j].kind == AB_MOUNT_VOLUME || m[j].kind == AB_MOUNT_HOST) &&
                            !strcmp(m[i].path, m[j].path))
                                return ab_err_set(err, AB_E_INVALID, 0,
                                                  "path '%s': two mounts on one path", m[i].path);
        }
        return 0;
}

/* Named volumes: the backend keeps them (ab_volume_ops); the manager scopes
 * them to apps and checks a new box's mounts before anything is recorded. */
#include "core/manager_int.h"

#include <sys/stat.h>

static int need_vol(ab_manager *m, ab_err **err)
{
        if (m->o.backend->vol)
                return 0;
        return ab_err_set(err, AB_E_UNSUPPORTED, 0, "volumes: the %s backend has none",
                          m->o.backend->ops->name);
}

static bool visible(const ab_volume_info *v, const char *scope)
{
        return !scope || (v->owner && !strcmp(v->owner, scope));
}

int ab_manager_volume_get(ab_manager *m, const char *name, const char *scope, ab_volume_info *out,
                          ab_err **err)
{
        if (need_vol(m, err) < 0)
                return -1;
        ab_backend *b = m->o.backend;
        if (b->vol->get(b, name, out, err) < 0)
                return -1;
        if (!visible(out, scope)) {
                ab_volume_info_clear(out);
                return ab_err_set(err, AB_E_NOT_FOUND, 0, "no volume named '%s'", name);
        }
        return 0;
}

int ab_manager_volume_create(ab_manager *m, const char *name, uint64_t size_mib, const char *scope,
                             ab_volume_info *out, ab_err **err)
{
        if (need_vol(m, err) < 0)
                return -1;
        ab_backend *b = m->o.backend;
        if (!size_mib)
                size_mib = m->o.limits.disk_mib;
        if (mgr_caps_check_volume(m, scope, size_mib, err) < 0)
                return -1;
        /* a new disk on the host, admitted like a box's */
        mgr_disk_ticket dt;
        if (mgr_disk_admit(m, size_mib, &dt, err) < 0)
                return -1;
        int r = b->vol->create(b, name, size_mib, scope, err);
        mgr_disk_end(m, &dt);
        if (r < 0)
                return -1;
        ab_log(AB_LOG_INFO, "volume created", "volume", name, NULL);
        return ab_manager_volume_get(m, name, scope, out, err);
}

int ab_manager_volume_list(ab_manager *m, const char *scope, ab_volume_info **out, size_t *n,
                           ab_err **err)
{
        if (need_vol(m, err) < 0)
                return -1;
        ab_backend *b = m->o.backend;
        ab_volume_info *v;
        size_t len;
        if (b->vol->list(b, &v, &len, err) < 0)
                return -1;
        size_t k = 0;
        for (size_t i = 0; i < len; i++) {
                if (visible(&v[i], scope))
                        v[k++] = v[i];
                else
                        ab_volume_info_clear(&v[i]);
        }
        *out = v;
        *n = k;
        return 0;
}

int ab_manager_volume_delete(ab_manager *m, const char *name, const char *scope, ab_err **err)
{
        ab_volume_info v;
        if (ab_manager_volume_get(m, name, scope, &v, err) < 0)
                return -1;
        ab_volume_info_clear(&v);
        ab_backend *b = m->o.backend;
        if (b->vol->remove(b, name, err) < 0)
                return -1;
        ab_log(AB_LOG_INFO, "volume deleted", "volume", name, NULL);
        return 0;
}

void mgr_mounts_clear(mgr_mounts *mm)
{
        for (size_t i = 0; i < mm->n; i++) {
                free((char *)mm->v[i].source);
                free((char *)mm->v[i].path);
                free((char *)mm->v[i].sub);
        }
        free(mm->v);
        memset(mm, 0, sizeof(*mm));
}

static ab_box_mount *mounts_add(mgr_mounts *mm, ab_mount_kind kind)
{
        mm->v = xrealloc(mm->v, (mm->n + 1) * sizeof(*mm->v));
        ab_box_mount *mt = &mm->v[mm->n++];
        memset(mt, 0, sizeof(*mt));
        mt->kind = kind;
        return mt;
}

/* One {SRC_KEY, path, read_only?} object of a list. */
static int parse_bind(json_t *o, const char *list, size_t i, const char *src_key, ab_box_mount *mt,
                      ab_err **err)
{
        if (!json_is_object(o))
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "%s[%zu]: must be {\"%s\", \"path\", "
                                  "\"read_only\"}",
                                  list, i, src_key);
        const char *k;
        json_t *v;
        json_object_foreach(o, k, v)
        {
                bool sub = !strcmp(k, "sub_path") && !strcmp(list, "volumes");
                if (strcmp(k, src_key) && strcmp(k, "path") && strcmp(k, "read_only") && !sub)
                        return ab_err_set(err, AB_E_INVALID, 0, "%s[%zu]: unknown field '%s'", list,
                                          i, k);
        }
        json_t *sub = json_object_get(o, "sub_path");
        if (sub && !json_is_null(sub)) {
                if (!json_is_string(sub))
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "%s[%zu].sub_path: must be a string", list, i);
                if (ab_volume_sub_check(json_string_value(sub), err) < 0)
                        return ab_err_wrap(err, "%s[%zu]", list, i);
                mt->sub = xstrdup(json_string_value(sub));
        }
        const char *src = json_string_value(json_object_get(o, src_key));
        const char *path = json_string_value(json_object_get(o, "path"));
        json_t *ro = json_object_get(o, "read_only");
        if (!src || !path)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "%s[%zu]: \"%s\" and \"path\" must be "
                                  "strings",
                                  list, i, src_key);
        if (ro && !json_is_boolean(ro) && !json_is_null(ro))
                return ab_err_set(err, AB_E_INVALID, 0, "%s[%zu].read_only: must be a boolean",
                                  list, i);
        mt->source = xstrdup(src);
        mt->path = xstrdup(path);
        mt->read_only = json_is_true(ro);
        return 0;
}

static bool under_dir(const char *path, const char *dir)
{
        size_t n = strlen(dir);
        while (n > 1 && dir[n - 1] == '/')
                n--;
        if (n == 1 && dir[0] == '/')
                return true;
        return !strncmp(path, dir, n) && (path[n] == '\0' || path[n] == '/');
}

/* A host directory: admin only, canonical (realpath), under a prefix. */
static int host_dir(ab_manager *m, ab_box_mount *mt, size_t i, const char *scope, ab_err **err)
{
        if (scope)
                return ab_err_set(err, AB_E_PERMISSION, 0,
                                  "mounts: host directories need the admin token; API keys "
                                  "cannot mount them");
        if (!m->o.n_host_mount_prefixes)
                return ab_err_set(err, AB_E_PERMISSION, 0,
                                  "mounts: host directories are not allowed on this server; "
                                  "list the folders boxes may mount under host_mount_prefixes "
                                  "in its config file");
        if (mt->source[0] != '/')
                return ab_err_set(err, AB_E_INVALID, 0, "mounts[%zu].host_path: must be absolute",
                                  i);
        char *real = realpath(mt->source, NULL);
        if (!real)
                return ab_err_set(err, AB_E_INVALID, errno,
                                  "mounts[%zu].host_path '%s': no such directory", i, mt->source);
        struct stat st;
        if (stat(real, &st) < 0 || !S_ISDIR(st.st_mode)) {
                free(real);
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "mounts[%zu].host_path '%s': not a directory", i, mt->source);
        }
        bool ok = false;
        for (size_t k = 0; !ok && k < m->o.n_host_mount_prefixes; k++) {
                _cleanup_free_ char *pre = realpath(m->o.host_mount_prefixes[k], NULL);
                ok = pre && under_dir(real, pre);
        }
        if (!ok) {
                int r = ab_err_set(err, AB_E_PERMISSION, 0,
                                   "mounts[%zu].host_path '%s' (really %s) is not under any of "
                                   "the server's host_mount_prefixes",
                                   i, mt->source, real);
                free(real);
                return r;
        }
        free((char *)mt->source);
        mt->source = real;
        return 0;
}

int mgr_mounts_parse(ab_manager *m, const ab_acquire_req *q, const char *scope, mgr_mounts *mm,
                     ab_err **err)
{
        memset(mm, 0, sizeof(*mm));
        static const struct {
                const char *list, *src;
                ab_mount_kind kind;
        } lists[] = {{"volumes", "name", AB_MOUNT_VOLUME},
                     {"mounts", "host_path", AB_MOUNT_HOST},
                     {"readonly_paths", NULL, AB_MOUNT_READONLY},
                     {"blocked_paths", NULL, AB_MOUNT_BLOCKED}};
        json_t *given[] = {q->volumes, q->mounts, q->readonly_paths, q->blocked_paths};
        for (size_t l = 0; l < AB_ARRAY_LEN(lists); l++) {
                json_t *a = given[l];
                if (!a || json_is_null(a))
                        continue;
                if (!json_is_array(a))
                        return ab_err_set(err, AB_E_INVALID, 0, "%s: must be a list",
                                          lists[l].list);
                for (size_t i = 0; i < json_array_size(a); i++) {
                        json_t *o = json_array_get(a, i);
                        if (mm->n >= AB_MOUNTS_MAX)
                                return ab_err_set(err, AB_E_INVALID, 0,
                                                  "at most %d volumes, mounts and paths in all",
                                                  AB_MOUNTS_MAX);
                        ab_box_mount *mt = mounts_add(mm, lists[l].kind);
                        if (!lists[l].src) {
                                if (!json_is_string(o))
                                        return ab_err_set(err, AB_E_INVALID, 0,
                                                          "%s[%zu]: must be a path (a string)",
                                                          lists[l].list, i);
                                mt->path = xstrdup(json_string_value(o));
                        } else if (parse_bind(o, lists[l].list, i, lists[l].src, mt, err) < 0) {
                                return -1;
                        }
                        if (ab_box_path_check(mt->path, mt->kind, err) < 0)
                                return ab_err_wrap(err, "%s[%zu]", lists[l].list, i);
                        if (mt->kind == AB_MOUNT_VOLUME &&
                            ab_volume_name_check(mt->source, err) < 0)
                                return ab_err_wrap(err, "volumes[%zu]", i);
                }
        }
        if (ab_box_mounts_check(mm->v, mm->n, err) < 0)
                return -1;
        size_t nh = 0;
        for (size_t i = 0; i < mm->n; i++)
                if (mm->v[i].kind == AB_MOUNT_HOST && host_dir(m, &mm->v[i], nh++, scope, err) < 0)
                        return -1;
        return 0;
}

int mgr_mounts_volumes_check(ab_manager *m, const mgr_mounts *mm, const char *scope, ab_err **err)
{
        size_t nv = 0;
        for (size_t i = 0; i < mm->n; i++) {
                if (mm->v[i].kind != AB_MOUNT_VOLUME)
                        continue;
                ab_volume_info v;
                if (ab_manager_volume_get(m, mm->v[i].source, scope, &v, err) < 0)
                        return ab_err_wrap(err, "volumes[%zu]", nv);
                nv++;
                ab_volume_info_clear(&v);
        }
        return 0;
}

json_t *mgr_mounts_spec(const ab_box_mount *mt, size_t n)
{
        json_t *vols = json_array(), *hosts = json_array(), *ro = json_array(),
               *blocked = json_array();
        for (size_t i = 0; i < n; i++) {
                switch (mt[i].kind) {
                case AB_MOUNT_VOLUME: {
                        json_t *v = json_pack("{s:s,s:s,s:b}", "name", mt[i].source, "path",
                                              mt[i].path, "read_only", mt[i].read_only);
                        if (mt[i].sub)
                                json_object_set_new(v, "sub_path", json_string(mt[i].sub));
                        json_array_append_new(vols, v);
                        break;
                }
                case AB_MOUNT_HOST:
                        json_array_append_new(hosts, json_pack("{s:s,s:s,s:b}", "host_path",
                                                               mt[i].source, "path", mt[i].path,
                                                               "read_only", mt[i].read_only));
                        break;
                case AB_MOUNT_READONLY:
                        json_array_append_new(ro, json_string(mt[i].path));
                        break;
                case AB_MOUNT_BLOCKED:
                        json_array_append_new(blocked, json_string(mt[i].path));
                        break;
                }
        }
        return json_pack("{s:o,s:o,s:o,s:o}", "volumes", vols, "mounts", hosts, "readonly_paths",
                         ro, "blocked_paths", blocked);
}

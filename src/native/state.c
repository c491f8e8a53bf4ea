#include "native/state.h"

#include <fcntl.h>
#include <jansson.h>
#include <stdatomic.h>
#include <sys/stat.h>

/* Replaces boxfd/name atomically (temp file + rename: readers see the old or
 * the new file, never half of one). With `durable` the data is on disk before
 * the rename. The directory is not synced: see the callers. */
static int replace_file(int boxfd, const char *name, const char *data, bool durable)
{
        static atomic_uint seq;
        char tmp[96];
        snprintf(tmp, sizeof(tmp), ".%s.%d.%u", name, (int)getpid(), atomic_fetch_add(&seq, 1));
        _cleanup_close_ int fd =
            openat(boxfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0)
                return -errno;
        int r = ab_write_all(fd, data, strlen(data));
        if (r == 0 && durable && fsync(fd) < 0)
                r = -errno;
        if (r == 0 && renameat(boxfd, tmp, boxfd, name) < 0)
                r = -errno;
        if (r < 0)
                unlinkat(boxfd, tmp, 0);
        return r;
}

static int write_json(int boxfd, const char *name, json_t *j, bool durable, ab_err **err)
{
        _cleanup_free_ char *s = json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS);
        json_decref(j);
        if (!s)
                abort();
        int r = replace_file(boxfd, name, s, durable);
        if (r < 0)
                return ab_err_set(err, r == -ENOSPC ? AB_E_LIMIT : AB_E_INTERNAL, -r,
                                  "cannot write %s", name);
        return 0;
}

static json_t *read_json(int boxfd, const char *name, int *missing, ab_err **err)
{
        _cleanup_free_ char *buf = NULL;
        int r = ab_read_file(boxfd, name, &buf, NULL);
        *missing = (r == -ENOENT);
        if (r < 0) {
                ab_err_set(err, r == -ENOENT ? AB_E_NOT_FOUND : AB_E_INTERNAL, -r, "cannot read %s",
                           name);
                return NULL;
        }
        json_error_t je;
        json_t *j = json_loads(buf, 0, &je);
        if (!j || !json_is_object(j)) {
                json_decref(j);
                ab_err_set(err, AB_E_INTERNAL, 0, "%s is corrupt: %s", name, je.text);
                return NULL;
        }
        return j;
}

int ab_box_config_write(int boxfd, const ab_box_config *c, ab_err **err)
{
        json_t *lim = json_pack(
            "{s:f,s:I,s:I,s:I,s:I,s:I,s:I}", "cpus", c->limits.cpus, "memory_mib",
            (json_int_t)c->limits.memory_mib, "pids", (json_int_t)c->limits.pids, "disk_mib",
            (json_int_t)c->limits.disk_mib, "timeout_s", (json_int_t)c->limits.timeout_s,
            "output_cap", (json_int_t)c->limits.output_cap, "nofile", (json_int_t)c->limits.nofile);
        json_t *j = json_pack("{s:s,s:o,s:I,s:I,s:i}", "id", c->id, "limits", lim, "uid_base",
                              (json_int_t)c->uid_base, "created_at", (json_int_t)c->created_at,
                              "version", 1);
        if (c->rootfs)
                json_object_set_new(j, "rootfs", json_string(c->rootfs));
        if (c->layers) {
                json_t *a = json_array();
                for (char **l = c->layers; *l; l++)
                        json_array_append_new(a, json_string(*l));
                json_object_set_new(j, "layers", a);
        }
        if (c->image)
                json_object_set_new(j, "image", json_string(c->image));
        if (c->n_mounts) {
                json_t *a = json_array();
                for (size_t i = 0; i < c->n_mounts; i++) {
                        const ab_box_mount *m = &c->mounts[i];
                        json_t *o = json_pack("{s:s,s:s,s:b}", "kind", ab_mount_kind_name(m->kind),
                                              "path", m->path, "read_only", m->read_only);
                        if (m->source)
                                json_object_set_new(o, "source", json_string(m->source));
                        if (m->sub)
                                json_object_set_new(o, "sub", json_string(m->sub));
                        json_array_append_new(a, o);
                }
                json_object_set_new(j, "mounts", a);
        }
        if (c->disk_uid_base)
                json_object_set_new(j, "disk_uid_base", json_integer(c->disk_uid_base));
        /* Synced: a box whose directory survives a host crash must have its
         * config. The directory entry needs no sync of its own: the config
         * is written before the box directory is renamed into boxes/, and
         * the journal keeps that order. */
        return write_json(boxfd, "config.json", j, true, err);
}

static uint64_t get_u64(json_t *o, const char *k, uint64_t dflt)
{
        json_t *v = json_object_get(o, k);
        return json_is_integer(v) ? (uint64_t)json_integer_value(v) : dflt;
}

static int read_mounts(json_t *a, ab_box_config *c)
{
        static const ab_mount_kind kinds[] = {AB_MOUNT_VOLUME, AB_MOUNT_HOST, AB_MOUNT_READONLY,
                                              AB_MOUNT_BLOCKED};
        size_t n = json_array_size(a);
        if (!n)
                return 0;
        c->mounts = xcalloc(n, sizeof(*c->mounts));
        for (size_t i = 0; i < n; i++) {
                json_t *o = json_array_get(a, i);
                const char *kind = json_string_value(json_object_get(o, "kind"));
                const char *path = json_string_value(json_object_get(o, "path"));
                const char *src = json_string_value(json_object_get(o, "source"));
                ab_box_mount *m = &c->mounts[c->n_mounts];
                for (size_t k = 0; kind && k < AB_ARRAY_LEN(kinds); k++)
                        if (!strcmp(kind, ab_mount_kind_name(kinds[k])))
                                m->kind = kinds[k];
                if (!m->kind || !path)
                        return -1;
                m->path = xstrdup(path);
                m->source = src ? xstrdup(src) : NULL;
                const char *sub = json_string_value(json_object_get(o, "sub"));
                m->sub = sub ? xstrdup(sub) : NULL;
                m->read_only = json_is_true(json_object_get(o, "read_only"));
                c->n_mounts++;
        }
        return 0;
}

int ab_box_config_read(int boxfd, ab_box_config *c, ab_err **err)
{
        int missing;
        json_t *j = read_json(boxfd, "config.json", &missing, err);
        if (!j)
                return -1;
        memset(c, 0, sizeof(*c));
        ab_limits_default(&c->limits);
        const char *id = json_string_value(json_object_get(j, "id"));
        snprintf(c->id, sizeof(c->id), "%s", id ? id : "");
        json_t *l = json_object_get(j, "limits");
        json_t *cpus = json_object_get(l, "cpus");
        if (json_is_number(cpus))
                c->limits.cpus = json_number_value(cpus);
        c->limits.memory_mib = get_u64(l, "memory_mib", c->limits.memory_mib);
        c->limits.pids = get_u64(l, "pids", c->limits.pids);
        c->limits.disk_mib = get_u64(l, "disk_mib", c->limits.disk_mib);
        c->limits.timeout_s = (uint32_t)get_u64(l, "timeout_s", c->limits.timeout_s);
        c->limits.output_cap = get_u64(l, "output_cap", c->limits.output_cap);
        c->limits.nofile = get_u64(l, "nofile", c->limits.nofile);
        c->uid_base = (uid_t)get_u64(j, "uid_base", 0);
        c->disk_uid_base = (uid_t)get_u64(j, "disk_uid_base", 0);
        c->created_at = (int64_t)get_u64(j, "created_at", 0);
        const char *rootfs = json_string_value(json_object_get(j, "rootfs"));
        c->rootfs = rootfs ? xstrdup(rootfs) : NULL;
        const char *image = json_string_value(json_object_get(j, "image"));
        c->image = image ? xstrdup(image) : NULL;
        json_t *layers = json_object_get(j, "layers");
        if (json_is_array(layers) && json_array_size(layers) > 0) {
                size_t n = json_array_size(layers);
                c->layers = xcalloc(n + 1, sizeof(char *));
                for (size_t i = 0; i < n; i++) {
                        const char *lp = json_string_value(json_array_get(layers, i));
                        c->layers[i] = xstrdup(lp ? lp : "");
                }
        }
        if (read_mounts(json_object_get(j, "mounts"), c) < 0) {
                json_decref(j);
                ab_box_config_clear(c);
                return ab_err_set(err, AB_E_INTERNAL, 0, "config.json: bad mounts");
        }
        json_decref(j);
        if (!c->uid_base || !c->id[0]) {
                ab_box_config_clear(c);
                return ab_err_set(err, AB_E_INTERNAL, 0, "config.json lacks id or uid_base");
        }
        return 0;
}

void ab_box_config_clear(ab_box_config *c)
{
        free(c->rootfs);
        c->rootfs = NULL;
        free(c->image);
        c->image = NULL;
        ab_strvfreep(&c->layers);
        c->layers = NULL;
        for (size_t i = 0; i < c->n_mounts; i++) {
                free((char *)c->mounts[i].path);
                free((char *)c->mounts[i].source);
                free((char *)c->mounts[i].sub);
        }
        free(c->mounts);
        c->mounts = NULL;
        c->n_mounts = 0;
}

int ab_state_write(int boxfd, const ab_box_state *s, ab_err **err)
{
        json_t *j;
        if (s->error)
                j = json_pack("{s:s}", "error", s->error);
        else
                j = json_pack("{s:i,s:I,s:I}", "init_pid", (int)s->init_pid, "init_start",
                              (json_int_t)s->init_start, "started_at", (json_int_t)s->started_at);
        /* Not synced (two fsyncs were most of a start's disk wait): the file
         * describes processes, which a host crash ends anyway; a file the
         * crash left empty reads as "no state" (stopped). */
        return write_json(boxfd, "state.json", j, false, err);
}

int ab_state_read(int boxfd, ab_box_state *s, ab_err **err)
{
        memset(s, 0, sizeof(*s));
        struct stat st;
        if (fstatat(boxfd, "state.json", &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
            st.st_size == 0)
                return 1; /* written but never flushed before a host crash */
        int missing;
        ab_err *e = NULL;
        json_t *j = read_json(boxfd, "state.json", &missing, &e);
        if (!j) {
                if (missing) {
                        ab_err_free(&e);
                        return 1;
                }
                if (err && !*err)
                        *err = e;
                else
                        ab_err_free(&e);
                return -1;
        }
        const char *er = json_string_value(json_object_get(j, "error"));
        s->error = er ? xstrdup(er) : NULL;
        s->init_pid = (pid_t)get_u64(j, "init_pid", 0);
        s->init_start = get_u64(j, "init_start", 0);
        s->started_at = (int64_t)get_u64(j, "started_at", 0);
        json_decref(j);
        return 0;
}

int ab_state_remove(int boxfd)
{
        if (unlinkat(boxfd, "state.json", 0) < 0 && errno != ENOENT)
                return -errno;
        return 0;
}

void ab_state_clear(ab_box_state *s)
{
        free(s->error);
        s->error = NULL;
}

/* mock_files.c - a mock box's tree of files in memory, and the calls
 * log (mock_int.h). */
#include "backend/mock_int.h"
#include "base/log.h"
#include "base/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the calls log ---- */

/* Appends {"time_ms", "box", "op", ...fields} as one line (O_APPEND: lines
 * of concurrent calls never interleave). Steals fields. */
void mock_log_call(mock *m, const char *box, const char *op, json_t *fields)
{
        if (m->log_fd < 0) {
                json_decref(fields);
                return;
        }
        json_t *j = fields ? fields : json_object();
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        json_object_set_new(j, "time_ms",
                            json_integer((json_int_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000));
        json_object_set_new(j, "box", json_string(box));
        json_object_set_new(j, "op", json_string(op));
        char *line = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
        json_decref(j);
        if (!line)
                return;
        size_t n = strlen(line);
        line = xrealloc(line, n + 2);
        line[n] = '\n';
        if (ab_write_all(m->log_fd, line, n + 1) < 0)
                ab_log(AB_LOG_WARN, "mock: cannot write the calls log", NULL);
        free(line);
}

/* ---- boxes and their files (under mu) ---- */

mbox *mock_box_get(mock *m, const char *id)
{
        for (size_t i = 0; i < m->n_boxes; i++)
                if (strcmp(m->boxes[i].id, id) == 0)
                        return &m->boxes[i];
        return NULL;
}

node *mock_node_get(mbox *x, const char *path)
{
        for (size_t i = 0; i < x->n_nodes; i++)
                if (strcmp(x->nodes[i].path, path) == 0)
                        return &x->nodes[i];
        return NULL;
}

node *mock_node_add(mbox *x, const char *path, bool dir, uint32_t mode)
{
        if (x->n_nodes == x->cap_nodes) {
                x->cap_nodes = x->cap_nodes ? x->cap_nodes * 2 : 16;
                x->nodes = xrealloc(x->nodes, xmul(x->cap_nodes, sizeof(*x->nodes)));
        }
        node *n = &x->nodes[x->n_nodes++];
        *n = (node){
            .path = xstrdup(path), .dir = dir, .mode = mode & 07777, .mtime = (int64_t)time(NULL)};
        return n;
}

void mock_node_drop(mbox *x, size_t i)
{
        x->bytes -= x->nodes[i].len;
        *x->total -= x->nodes[i].len;
        free(x->nodes[i].path);
        free(x->nodes[i].data);
        x->nodes[i] = x->nodes[--x->n_nodes];
}

void mock_box_clear(mbox *x)
{
        mock_procs_clear(x);
        while (x->n_nodes)
                mock_node_drop(x, x->n_nodes - 1);
        free(x->nodes);
        free(x->id);
}

/* Normalises a box path as the box's init resolves it: relative to
 * /workspace, "." and ".." resolved, ".." at the root staying there (the
 * box's root is its whole world). 0, or -EINVAL (empty, too long). */
int mock_path_norm(const char *in, char out[MOCK_PATH_MAX])
{
        if (!in || !*in)
                return -EINVAL;
        char tmp[MOCK_PATH_MAX];
        int w = snprintf(tmp, sizeof(tmp), "%s%s", in[0] == '/' ? "" : "/workspace/", in);
        if (w < 0 || (size_t)w >= sizeof(tmp))
                return -ENAMETOOLONG;
        size_t len = 0;
        char *save = NULL;
        for (char *c = strtok_r(tmp, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
                if (!strcmp(c, "."))
                        continue;
                if (!strcmp(c, "..")) {
                        while (len > 0 && out[len - 1] != '/')
                                len--;
                        if (len > 0)
                                len--;
                        continue;
                }
                size_t cl = strlen(c);
                memcpy(out + len, "/", 1);
                memcpy(out + len + 1, c, cl);
                len += cl + 1;
        }
        if (len == 0)
                out[len++] = '/';
        out[len] = '\0';
        return 0;
}

/* The folder holding path ("/" for "/x"), into buf. */
static void path_parent(const char *path, char buf[MOCK_PATH_MAX])
{
        snprintf(buf, MOCK_PATH_MAX, "%s", path);
        char *s = strrchr(buf, '/');
        if (s == buf)
                buf[1] = '\0';
        else if (s)
                *s = '\0';
}

/* below is `dir` itself or inside it. */
bool mock_path_under(const char *p, const char *dir)
{
        size_t n = strlen(dir);
        if (n == 1)
                return true;
        return !strncmp(p, dir, n) && (p[n] == '\0' || p[n] == '/');
}

/* 0 when path's folder exists (made with its parents when mkparents),
 * else -ENOENT / -ENOTDIR. */
int mock_ensure_parent(mbox *x, const char *path, bool mkparents)
{
        char par[MOCK_PATH_MAX];
        path_parent(path, par);
        node *p = mock_node_get(x, par);
        if (p)
                return p->dir ? 0 : -ENOTDIR;
        if (!mkparents)
                return -ENOENT;
        int r = mock_ensure_parent(x, par, true);
        if (r < 0)
                return r;
        if (x->n_nodes >= MOCK_FILES_MAX)
                return -ENOSPC;
        mock_node_add(x, par, true, 0755);
        return 0;
}

uint64_t mock_disk_cap(const mbox *x)
{
        uint64_t d = (x->limits.disk_mib ? x->limits.disk_mib : AB_DEFAULT_DISK_MIB) << 20;
        return d < MOCK_BOX_BYTES ? d : MOCK_BOX_BYTES;
}

/* mock.c - the mock backend (backend.h, ab_mock_open): boxes that exist only
 * in this process's memory, for platforms that test their agents against
 * agentbox's API with no kernel features, no root and no Docker (as the
 * MockSandbox of agent SDKs does). docs/backends.md describes it for users.
 *
 * A box is a status and a tree of files in memory. connect hands out one end
 * of a socketpair and serves the init protocol (proto.h) on the other from a
 * thread of this process, so the manager, the tools, MCP and every front
 * reach a mock box exactly as they reach a real one. EXEC runs nothing: it
 * answers from the expectations file (first rule whose command or regex
 * matches), after the rule's delay. Terminals and the balloon are
 * unsupported. Every call is appended as one JSON line to the calls log.
 *
 * A clean stop (free) writes every box and its files to state_path, and
 * the next open reads them back; a crash loses them (the records of its
 * boxes then say the backend has no such box). */
#include "backend/mock_int.h"
#include "base/id.h"
#include "base/log.h"
#include "base/util.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int no_box(const char *id, ab_err **err)
{
        return ab_err_set(err, AB_E_NOT_FOUND, 0, "no box with id '%s'", id);
}

static mock *MK(ab_backend *b)
{
        return (mock *)b;
}

/* ---- the backend ops ---- */

static int mk_create(ab_backend *b, const ab_box_spec *spec, ab_err **err)
{
        mock *m = MK(b);
        if (!spec->id || !ab_id_valid(spec->id))
                return ab_err_set(err, AB_E_INVALID, 0, "invalid box id");
        pthread_mutex_lock(&m->mu);
        if (mock_box_get(m, spec->id)) {
                pthread_mutex_unlock(&m->mu);
                return ab_err_set(err, AB_E_CONFLICT, 0, "box '%s' exists", spec->id);
        }
        if (m->n_boxes == m->cap_boxes) {
                m->cap_boxes = m->cap_boxes ? m->cap_boxes * 2 : 16;
                m->boxes = xrealloc(m->boxes, xmul(m->cap_boxes, sizeof(*m->boxes)));
        }
        mbox *x = &m->boxes[m->n_boxes++];
        int64_t now = (int64_t)time(NULL);
        *x = (mbox){.id = xstrdup(spec->id),
                    .status = AB_BOX_RUNNING,
                    .limits = spec->limits,
                    .created_at = now,
                    .started_at = now,
                    .total = &m->bytes};
        mock_node_add(x, "/", true, 0755);
        mock_node_add(x, "/tmp", true, 01777);
        mock_node_add(x, "/workspace", true, 0755);
        pthread_mutex_unlock(&m->mu);
        mock_log_call(m, spec->id, "create",
                      spec->image ? json_pack("{s:s}", "image", spec->image) : NULL);
        return 0;
}

/* start, stop, pause, resume: a status change. */
static int set_status(ab_backend *b, const char *id, const char *op, ab_err **err)
{
        mock *m = MK(b);
        pthread_mutex_lock(&m->mu);
        mbox *x = mock_box_get(m, id);
        if (!x) {
                pthread_mutex_unlock(&m->mu);
                return no_box(id, err);
        }
        int rc = 0;
        if (!strcmp(op, "start")) {
                if (x->status != AB_BOX_RUNNING)
                        x->started_at = (int64_t)time(NULL);
                x->status = AB_BOX_RUNNING;
        } else if (!strcmp(op, "stop")) {
                x->status = AB_BOX_STOPPED;
                x->started_at = 0;
                mock_procs_clear(x); /* they die with the box */
        } else if (x->status != AB_BOX_RUNNING && x->status != AB_BOX_PAUSED) {
                rc = ab_err_set(err, AB_E_CONFLICT, 0, "box %s is not running", id);
        } else {
                x->status = !strcmp(op, "pause") ? AB_BOX_PAUSED : AB_BOX_RUNNING;
        }
        pthread_mutex_unlock(&m->mu);
        if (rc == 0)
                mock_log_call(m, id, op, NULL);
        return rc;
}

static int mk_start(ab_backend *b, const char *id, ab_err **err)
{
        return set_status(b, id, "start", err);
}

static int mk_stop(ab_backend *b, const char *id, ab_err **err)
{
        return set_status(b, id, "stop", err);
}

static int mk_pause(ab_backend *b, const char *id, ab_err **err)
{
        return set_status(b, id, "pause", err);
}

static int mk_resume(ab_backend *b, const char *id, ab_err **err)
{
        return set_status(b, id, "resume", err);
}

static int mk_destroy(ab_backend *b, const char *id, ab_err **err)
{
        mock *m = MK(b);
        pthread_mutex_lock(&m->mu);
        mbox *x = mock_box_get(m, id);
        if (!x) {
                pthread_mutex_unlock(&m->mu);
                return no_box(id, err);
        }
        mock_box_clear(x);
        *x = m->boxes[--m->n_boxes];
        pthread_mutex_unlock(&m->mu);
        mock_log_call(m, id, "destroy", NULL);
        return 0;
}

static void info_of(const mbox *x, ab_box_info *out)
{
        *out = (ab_box_info){.id = xstrdup(x->id),
                             .status = x->status,
                             .limits = x->limits,
                             .created_at = x->created_at,
                             .started_at = x->started_at,
                             .backend = "mock"};
}

static int mk_info(ab_backend *b, const char *id, ab_box_info *out, ab_err **err)
{
        mock *m = MK(b);
        memset(out, 0, sizeof(*out));
        pthread_mutex_lock(&m->mu);
        mbox *x = mock_box_get(m, id);
        if (x)
                info_of(x, out);
        pthread_mutex_unlock(&m->mu);
        return x ? 0 : no_box(id, err);
}

static int cmp_info(const void *a, const void *b)
{
        return strcmp(((const ab_box_info *)a)->id, ((const ab_box_info *)b)->id);
}

static int mk_list(ab_backend *b, ab_box_info **out, size_t *n, ab_err **err)
{
        (void)err;
        mock *m = MK(b);
        pthread_mutex_lock(&m->mu);
        *out = xcalloc(m->n_boxes + 1, sizeof(**out));
        *n = m->n_boxes;
        for (size_t i = 0; i < m->n_boxes; i++)
                info_of(&m->boxes[i], &(*out)[i]);
        pthread_mutex_unlock(&m->mu);
        if (*n)
                qsort(*out, *n, sizeof(**out), cmp_info);
        return 0;
}

static int mk_connect(ab_backend *b, const char *id, ab_err **err)
{
        mock *m = MK(b);
        int sv[2];
        pthread_mutex_lock(&m->mu);
        mbox *x = mock_box_get(m, id);
        int rc = !x ? no_box(id, err)
                 : x->status != AB_BOX_RUNNING
                     ? ab_err_set(err, AB_E_CONFLICT, 0, "box %s is not running", id)
                 : m->closing ? ab_err_set(err, AB_E_UNAVAILABLE, 0, "the mock backend is closing")
                              : 0;
        if (rc == 0 && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
                rc = ab_err_set(err, AB_E_INTERNAL, errno, "socketpair");
        if (rc < 0) {
                pthread_mutex_unlock(&m->mu);
                return -1;
        }
        serve_arg *a = xzalloc(sizeof(*a));
        a->m = m;
        a->c.fd = sv[1];
        snprintf(a->box, sizeof(a->box), "%s", id);
        pthread_t t;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        int pe = pthread_create(&t, &at, mock_serve_main, a);
        pthread_attr_destroy(&at);
        if (pe != 0) {
                pthread_mutex_unlock(&m->mu);
                close(sv[0]);
                close(sv[1]);
                free(a);
                return ab_err_set(err, AB_E_UNAVAILABLE, pe, "cannot start a mock session");
        }
        a->c.next = m->conns;
        m->conns = &a->c;
        m->n_conns++;
        pthread_mutex_unlock(&m->mu);
        return sv[0];
}

static int mk_stats(ab_backend *b, const char *id, ab_box_stats *out, ab_err **err)
{
        mock *m = MK(b);
        memset(out, 0, sizeof(*out));
        pthread_mutex_lock(&m->mu);
        mbox *x = mock_box_get(m, id);
        if (x) {
                out->memory_limit = x->limits.memory_mib << 20;
                out->disk_used_bytes = x->bytes;
                out->disk_limit_bytes = mock_disk_cap(x);
        }
        pthread_mutex_unlock(&m->mu);
        return x ? 0 : no_box(id, err);
}

/* ---- kept across a clean restart ---- */

static json_t *state_box(const mbox *x)
{
        json_t *files = json_array();
        for (size_t i = 0; i < x->n_nodes; i++) {
                const node *n = &x->nodes[i];
                json_t *f = json_pack("{s:s,s:b,s:i,s:I}", "path", n->path, "dir", n->dir, "mode",
                                      (int)n->mode, "mtime", (json_int_t)n->mtime);
                if (!n->dir) {
                        char *b64 = xmalloc(xadd(xmul(n->len / 3 + 1, 4), 1));
                        EVP_EncodeBlock((unsigned char *)b64, n->data, (int)n->len);
                        json_object_set_new(f, "data", json_string(b64));
                        free(b64);
                }
                json_array_append_new(files, f);
        }
        const ab_limits *l = &x->limits;
        json_t *j = json_pack("{s:s,s:i,s:I,s:I,s:{s:f,s:I,s:I,s:I,s:i,s:I,s:I},s:o}", "id", x->id,
                              "status", (int)x->status, "created_at", (json_int_t)x->created_at,
                              "started_at", (json_int_t)x->started_at, "limits", "cpus", l->cpus,
                              "memory_mib", (json_int_t)l->memory_mib, "pids", (json_int_t)l->pids,
                              "disk_mib", (json_int_t)l->disk_mib, "timeout_s", (int)l->timeout_s,
                              "output_cap", (json_int_t)l->output_cap, "nofile",
                              (json_int_t)l->nofile, "files", files);
        if (x->n_procs) /* background processes live on, as a real box's keeper's */
                json_object_set_new(j, "processes", mock_procs_save(x));
        return j;
}

/* Writes every box to state_path (at free: a clean stop). */
static void state_save(mock *m)
{
        if (!m->state_path || !m->n_boxes)
                return;
        json_t *boxes = json_array();
        for (size_t i = 0; i < m->n_boxes; i++)
                json_array_append_new(boxes, state_box(&m->boxes[i]));
        json_t *j = json_pack("{s:i,s:o}", "version", 1, "boxes", boxes);
        char *text = json_dumps(j, JSON_COMPACT);
        json_decref(j);
        int r = text ? ab_write_file_atomic(AT_FDCWD, m->state_path, text, strlen(text), 0600)
                     : -ENOMEM;
        free(text);
        if (r < 0)
                ab_log(AB_LOG_WARN, "mock: cannot keep the boxes for the next start", "path",
                       m->state_path, "error", strerror(-r), NULL);
}

static int64_t jint(const json_t *o, const char *k)
{
        return (int64_t)json_integer_value(json_object_get(o, k));
}

/* One file of a saved box: 0, or -1 when it is malformed. */
static int state_node(mock *m, mbox *x, const json_t *f)
{
        const char *p = json_string_value(json_object_get(f, "path"));
        char norm[MOCK_PATH_MAX];
        if (!p || mock_path_norm(p, norm) < 0 || strcmp(norm, p) || mock_node_get(x, p) ||
            x->n_nodes >= MOCK_FILES_MAX)
                return -1;
        bool dir = json_is_true(json_object_get(f, "dir"));
        node *n = mock_node_add(x, p, dir, (uint32_t)jint(f, "mode"));
        n->mtime = jint(f, "mtime");
        const char *b64 = json_string_value(json_object_get(f, "data"));
        if (dir || !b64)
                return dir ? 0 : -1;
        size_t bl = strlen(b64);
        if (bl % 4 || bl > (MOCK_BOX_BYTES / 3 + 1) * 4)
                return -1;
        n->data = xmalloc(bl / 4 * 3 + 1);
        int len = EVP_DecodeBlock(n->data, (const unsigned char *)b64, (int)bl);
        if (len < 0)
                return -1;
        /* EVP_DecodeBlock counts the padding as data */
        for (size_t i = bl; i > 0 && b64[i - 1] == '=' && len > 0; i--)
                len--;
        n->len = (size_t)len;
        if (x->bytes + n->len > MOCK_BOX_BYTES || m->bytes + n->len > MOCK_TOTAL_BYTES)
                return -1;
        x->bytes += n->len;
        m->bytes += n->len;
        return 0;
}

/* Reads the boxes a clean stop left, then removes the file: a box deleted
 * after this start must not come back after a crash. */
static int state_load(mock *m, ab_err **err)
{
        if (!m->state_path)
                return 0;
        json_error_t je;
        json_t *j = json_load_file(m->state_path, 0, &je);
        if (!j && access(m->state_path, F_OK) < 0 && errno == ENOENT)
                return 0;
        const json_t *boxes = json_object_get(j, "boxes");
        bool bad = !json_is_array(boxes);
        for (size_t i = 0; !bad && i < json_array_size(boxes); i++) {
                const json_t *b = json_array_get(boxes, i), *l = json_object_get(b, "limits");
                const char *id = json_string_value(json_object_get(b, "id"));
                int64_t st = jint(b, "status");
                if (!id || !ab_id_valid(id) || mock_box_get(m, id) || st < AB_BOX_CREATING ||
                    st > AB_BOX_STATUS_MAX || !json_is_object(l)) {
                        bad = true;
                        break;
                }
                if (m->n_boxes == m->cap_boxes) {
                        m->cap_boxes = m->cap_boxes ? m->cap_boxes * 2 : 16;
                        m->boxes = xrealloc(m->boxes, xmul(m->cap_boxes, sizeof(*m->boxes)));
                }
                mbox *x = &m->boxes[m->n_boxes++];
                *x = (mbox){.id = xstrdup(id),
                            .status = (ab_box_status)st,
                            .created_at = jint(b, "created_at"),
                            .started_at = jint(b, "started_at"),
                            .limits = {.cpus = json_number_value(json_object_get(l, "cpus")),
                                       .memory_mib = (uint64_t)jint(l, "memory_mib"),
                                       .pids = (uint64_t)jint(l, "pids"),
                                       .disk_mib = (uint64_t)jint(l, "disk_mib"),
                                       .timeout_s = (uint32_t)jint(l, "timeout_s"),
                                       .output_cap = (uint64_t)jint(l, "output_cap"),
                                       .nofile = (uint64_t)jint(l, "nofile")},
                            .total = &m->bytes};
                const json_t *files = json_object_get(b, "files");
                for (size_t k = 0; !bad && k < json_array_size(files); k++)
                        bad = state_node(m, x, json_array_get(files, k)) < 0;
                bad = bad || !mock_node_get(x, "/") ||
                      mock_procs_load(x, json_object_get(b, "processes")) < 0;
        }
        json_decref(j);
        if (bad)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "mock boxes kept at %s are unreadable%s%s (remove the file to "
                                  "start without them)",
                                  m->state_path, j ? "" : ": ", j ? "" : je.text);
        if (unlink(m->state_path) < 0)
                return ab_err_set(err, AB_E_UNAVAILABLE, errno, "cannot remove %s", m->state_path);
        return 0;
}

static void mk_free(ab_backend *b)
{
        mock *m = MK(b);
        pthread_mutex_lock(&m->mu);
        m->closing = true;
        /* sessions end at once: their clients see the hang-up */
        for (conn *c = m->conns; c; c = c->next)
                shutdown(c->fd, SHUT_RDWR);
        while (m->n_conns)
                pthread_cond_wait(&m->idle, &m->mu);
        pthread_mutex_unlock(&m->mu);
        state_save(m);
        for (size_t i = 0; i < m->n_boxes; i++)
                mock_box_clear(&m->boxes[i]);
        free(m->boxes);
        mock_rules_clear(&m->rules);
        free(m->expect_path);
        free(m->state_path);
        if (m->log_fd >= 0)
                close(m->log_fd);
        pthread_cond_destroy(&m->idle);
        pthread_mutex_destroy(&m->mu);
        free(m);
}

static const ab_backend_ops mock_ops = {
    .name = "mock",
    .create = mk_create,
    .start = mk_start,
    .stop = mk_stop,
    .pause = mk_pause,
    .resume = mk_resume,
    .destroy = mk_destroy,
    .info = mk_info,
    .list = mk_list,
    .connect = mk_connect,
    .stats = mk_stats,
    .free = mk_free,
    /* connect_unix, disk_alloc, fork, snapshot, image_config: none */
};

int ab_mock_open(const ab_mock_opts *o, ab_backend **out, ab_err **err)
{
        mock *m = xzalloc(sizeof(*m));
        m->base.ops = &mock_ops;
        m->log_fd = -1;
        pthread_mutex_init(&m->mu, NULL);
        pthread_cond_init(&m->idle, NULL);
        if (o->expect_path && *o->expect_path) {
                m->expect_path = xstrdup(o->expect_path);
                if (mock_rules_load(m->expect_path, &m->rules, err) < 0) {
                        mk_free(&m->base);
                        return -1;
                }
        }
        m->state_path = o->state_path && *o->state_path ? xstrdup(o->state_path) : NULL;
        if (state_load(m, err) < 0) {
                free(m->state_path);
                m->state_path = NULL; /* kept as it is for the admin to look at */
                mk_free(&m->base);
                return -1;
        }
        if (o->log_path && *o->log_path) {
                m->log_fd =
                    open(o->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
                if (m->log_fd < 0) {
                        int e = errno;
                        mk_free(&m->base);
                        return ab_err_set(err, AB_E_INVALID, e, "mock calls log %s", o->log_path);
                }
        }
        *out = &m->base;
        return 0;
}

/* routes_move.c - moving a stopped native box to another fleet node
 * (docs/fleet.md, "Moving a box"): POST /v1/sandboxes/{id}/move on the
 * box's owner, and the node-to-node calls it makes, open only with the
 * fleet's secret (AUTH_FLEET):
 *
 *   POST /v1/fleet/moves              (target) receive a box: pull its disk
 *                                     from the owner, verify, stage it
 *   GET  /v1/fleet/moves/{ticket}/disk  (owner) the disk as a movestream
 *   POST /v1/fleet/moves/{id}/commit  (target) adopt the staged copy once
 *                                     the store names the target the owner
 *   POST /v1/fleet/moves/{id}/abort   (target) drop it
 *
 * The owner holds the box's lock from the first check to the end, so it
 * cannot start meanwhile; the store's owner changes in one compare-and-set
 * (ab_store_box_set_node) between the copy and its adoption. */
#include "rest/rest.h"
#include "kit/forward.h"
#include "fleet/fleet.h"
#include "fleet/movestream.h"
#include "http/httpmsg.h"
#include "base/id.h"
#include "base/log.h"

#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#define MOVE_CHUNK     (1u << 20)
#define MOVE_IDLE_MS   60000            /* the owner silent this long: the copy failed */
#define MOVE_MARGIN    (256ull << 20)   /* disk the target keeps free after a copy */
#define MOVE_LOG_EVERY (256ull << 20)   /* a progress line per this many bytes */
#define TICKET_MAX_AGE (10 * 60 * 1000) /* a ticket not used by then is dropped */

/* ---- the owner's tickets: which disk a target may pull ---- */

typedef struct ticket {
        struct ticket *next;
        char id[33];
        char *box;  /* backend id */
        char *node; /* the target that may pull it */
        int disk;   /* the box's disk (the move holds the box's lock) */
        int64_t made_ms;
        bool used;
} ticket;

static pthread_mutex_t tickets_mu = PTHREAD_MUTEX_INITIALIZER;
static ticket *tickets;

static void ticket_add(const char *box, const char *node, int disk, char out[33])
{
        ticket *t = xzalloc(sizeof(*t));
        char a[17], b[17];
        ab_id_random(a);
        ab_id_random(b);
        snprintf(t->id, sizeof(t->id), "%s%s", a, b);
        t->box = xstrdup(box);
        t->node = xstrdup(node);
        t->disk = disk;
        t->made_ms = (int64_t)ab_now_ms();
        memcpy(out, t->id, 33);
        pthread_mutex_lock(&tickets_mu);
        t->next = tickets;
        tickets = t;
        pthread_mutex_unlock(&tickets_mu);
}

static void ticket_remove(const char *id)
{
        pthread_mutex_lock(&tickets_mu);
        for (ticket **p = &tickets; *p; p = &(*p)->next)
                if (!strcmp((*p)->id, id)) {
                        ticket *t = *p;
                        *p = t->next;
                        free(t->box);
                        free(t->node);
                        free(t);
                        break;
                }
        pthread_mutex_unlock(&tickets_mu);
}

/* The disk of ticket id for node's pull of box (a dup the caller closes), once:
 * -1 when there is no such ticket, it is used, another node's or another
 * box's, or too old. */
static int ticket_take(const char *id, const char *box, const char *node)
{
        int fd = -1;
        pthread_mutex_lock(&tickets_mu);
        for (ticket *t = tickets; t; t = t->next)
                if (req_secret_eq(t->id, id) && !t->used && !strcmp(t->box, box) &&
                    !strcmp(t->node, node) && (int64_t)ab_now_ms() - t->made_ms < TICKET_MAX_AGE) {
                        t->used = true;
                        fd = fcntl(t->disk, F_DUPFD_CLOEXEC, 3);
                        break;
                }
        pthread_mutex_unlock(&tickets_mu);
        return fd;
}

/* ---- the owner's stream of a disk ---- */

typedef struct sender {
        int disk, out;
        char *box;
} sender;

static int put(sender *s, ab_sha256_ctx *h, const void *p, size_t n)
{
        ab_sha256_update(h, p, n);
        return ab_write_all(s->out, p, n);
}

/* Test-only knobs (docs/fleet.md): a pause after each chunk sent, or
 * after the store's switch, so a test can kill a node at that point. */
static void test_delay(const char *knob)
{
        const char *d = getenv(knob);
        long ms = d ? strtol(d, NULL, 10) : 0;
        if (ms > 0)
                usleep((useconds_t)ms * 1000);
}

/* The disk's data extents (SEEK_DATA/SEEK_HOLE: holes are not sent) as a movestream. */
static int send_disk(sender *s)
{
        struct stat st;
        if (fstat(s->disk, &st) < 0)
                return -errno;
        uint64_t size = (uint64_t)st.st_size;
        ab_sha256_ctx h;
        ab_sha256_init(&h);
        uint8_t hdr[AB_MOVESTREAM_HEAD];
        ab_movestream_head(hdr, size);
        int r = put(s, &h, hdr, sizeof(hdr));
        _cleanup_free_ char *buf = xmalloc(MOVE_CHUNK);
        off_t pos = 0;
        while (r == 0 && (uint64_t)pos < size) {
                off_t data = lseek(s->disk, pos, SEEK_DATA);
                if (data < 0 && errno == ENXIO)
                        break; /* a hole to the end */
                off_t hole = data < 0 ? -1 : lseek(s->disk, data, SEEK_HOLE);
                if (hole < 0)
                        return -errno;
                for (off_t o = data; r == 0 && o < hole;) {
                        size_t n =
                            (size_t)(hole - o) < MOVE_CHUNK ? (size_t)(hole - o) : MOVE_CHUNK;
                        ssize_t got = pread(s->disk, buf, n, o);
                        if (got <= 0)
                                return got < 0 ? -errno : -EIO;
                        ab_movestream_rec(hdr, (uint64_t)o, (uint64_t)got);
                        r = put(s, &h, hdr, sizeof(hdr));
                        if (r == 0)
                                r = put(s, &h, buf, (size_t)got);
                        o += got;
                        test_delay("AGENTBOX_TEST_MOVE_CHUNK_DELAY_MS");
                }
                pos = hole;
        }
        if (r < 0)
                return r;
        ab_movestream_rec(hdr, UINT64_MAX, 0);
        r = put(s, &h, hdr, sizeof(hdr));
        uint8_t d[AB_SHA256_LEN];
        ab_sha256_final(&h, d);
        return r < 0 ? r : ab_write_all(s->out, d, sizeof(d));
}

static void *sender_main(void *arg)
{
        sender *s = arg;
        int r = send_disk(s);
        if (r < 0)
                ab_log(AB_LOG_WARN, "fleet: a box's disk was not sent whole", "box", s->box,
                       "error", strerror(-r), NULL);
        close(s->disk);
        close(s->out); /* the end of the stream */
        free(s->box);
        free(s);
        return NULL;
}

enum MHD_Result route_fleet_move_disk(ab_req *r, const char *id)
{
        const char *box = req_query(r, "box");
        const char *from = req_header(r, FLEET_HDR_FROM);
        if (!box || !from)
                return resp_error(r, 400, "invalid_argument", "a pull names its box and node");
        int disk = ticket_take(id, box, from);
        if (disk < 0)
                return resp_error(r, 404, "not_found",
                                  "no move of box %s to node %s is waiting for its disk", box,
                                  from);
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0) {
                int e = errno;
                close(disk);
                return resp_error(r, 500, "internal", "pipe: %s", strerror(e));
        }
        sender *s = xzalloc(sizeof(*s));
        s->disk = disk;
        s->out = p[1];
        s->box = xstrdup(box);
        if (spawn_detached(sender_main, s) < 0) {
                close(p[0]);
                close(p[1]);
                close(disk);
                free(s->box);
                free(s);
                return resp_error(r, 503, "unavailable", "cannot start a thread");
        }
        return resp_stream(r, 200, "application/octet-stream", p[0], NULL);
}

/* ---- the target: pull, verify, stage ---- */

typedef struct receiver {
        int disk;
        const char *box;
        uint64_t size, next_log;
        int64_t t0;
} receiver;

static int write_extent(void *ud, uint64_t off, const void *p, size_t n)
{
        receiver *rc = ud;
        for (size_t done = 0; done < n;) {
                ssize_t w = pwrite(rc->disk, (const char *)p + done, n - done, (off_t)(off + done));
                if (w < 0 && errno == EINTR)
                        continue;
                if (w <= 0)
                        return w < 0 ? -errno : -EIO;
                done += (size_t)w;
        }
        return 0;
}

/* Reads from fd within MOVE_IDLE_MS: bytes, 0 at the end, or -errno. */
static ssize_t recv_some(int fd, char *buf, size_t cap)
{
        for (;;) {
                ssize_t n = recv(fd, buf, cap, MSG_DONTWAIT);
                if (n >= 0)
                        return n;
                if (errno == EINTR)
                        continue;
                if (errno != EAGAIN)
                        return -errno;
                struct pollfd pf = {.fd = fd, .events = POLLIN};
                int k = poll(&pf, 1, MOVE_IDLE_MS);
                if (k == 0)
                        return -ETIMEDOUT;
                if (k < 0 && errno != EINTR)
                        return -errno;
        }
}

/* Feeds the body bytes p[0..n) (de-chunked when ch) to the stream. */
static int feed_body(ab_movestream *ms, ab_chunked *ch, const char *p, size_t n, receiver *rc,
                     char *tmp)
{
        int r = 0;
        while (n && r == 0) {
                size_t used = n, made = n;
                const char *data = p;
                if (ch) {
                        if (ab_chunked_feed(ch, p, n, tmp, MOVE_CHUNK, &used, &made) < 0)
                                return -EPROTO;
                        data = tmp;
                        if (!used && !made)
                                return -EPROTO;
                }
                r = made ? ab_movestream_feed(ms, data, made, write_extent, rc) : 0;
                p += used;
                n -= used;
                if (ms->data >= rc->next_log) {
                        char got[24], of[24];
                        snprintf(got, sizeof(got), "%" PRIu64, ms->data >> 20);
                        snprintf(of, sizeof(of), "%" PRIu64, rc->size >> 20);
                        ab_log(AB_LOG_INFO, "fleet: receiving a moved box", "box", rc->box, "mib",
                               got, "disk_mib", of, NULL);
                        rc->next_log += MOVE_LOG_EVERY;
                }
        }
        return r;
}

/* Pulls ticket's disk from node from's url into rc->disk: 0 when the
 * stream ended whole and its digest matched; else an error in *err. */
static int pull_disk(ab_req *r, const char *url, const char *tk, receiver *rc, ab_err **err)
{
        _cleanup_close_ int fd = kit_fleet_connect(url);
        if (fd < 0)
                return ab_err_set(err, AB_E_UNAVAILABLE, -fd, "cannot reach the box's node");
        ab_fleet *f = r->srv->fleet;
        _cleanup_buf_ ab_buf req = {0};
        ab_buf_printf(
            &req,
            "GET /v1/fleet/moves/%s/disk?box=%s HTTP/1.1\r\nHost: fleet\r\n" FLEET_HDR_SECRET
            ": %s\r\n" FLEET_HDR_FROM ": %s\r\nConnection: close\r\n\r\n",
            tk, rc->box, ab_fleet_secret(f), ab_fleet_node(f));
        int e = ab_send_all(fd, req.p, req.n, MOVE_IDLE_MS);
        explicit_bzero(req.p, req.n);
        if (e < 0)
                return ab_err_set(err, AB_E_UNAVAILABLE, -e, "cannot reach the box's node");
        _cleanup_free_ char *buf = xmalloc(MOVE_CHUNK), *tmp = xmalloc(MOVE_CHUNK);
        size_t have = 0;
        ab_http_head h = {0};
        int hr = 0;
        while (hr == 0) {
                ssize_t n = recv_some(fd, buf + have, MOVE_CHUNK - have);
                if (n <= 0)
                        return ab_err_set(err, AB_E_UNAVAILABLE, n < 0 ? (int)-n : 0,
                                          "the box's node closed before its answer");
                have += (size_t)n;
                hr = ab_http_head_parse(buf, have, &h);
        }
        if (hr < 0)
                return ab_err_set(err, AB_E_UNAVAILABLE, 0, "the box's node answered garbage");
        int status = h.status;
        bool chunked = ab_http_head_get(&h, "Transfer-Encoding") != NULL;
        size_t off = h.head_len;
        ab_http_head_clear(&h);
        if (status != 200)
                return ab_err_set(err, AB_E_CONFLICT, 0,
                                  "the box's node refused to send its disk (HTTP %d)", status);
        ab_movestream ms;
        ab_movestream_init(&ms);
        ab_chunked ch = {0};
        int fr = feed_body(&ms, chunked ? &ch : NULL, buf + off, have - off, rc, tmp);
        while (fr == 0) {
                ssize_t n = recv_some(fd, buf, MOVE_CHUNK);
                if (n <= 0) {
                        fr = n < 0 ? (int)n : -EPIPE;
                        break;
                }
                fr = feed_body(&ms, chunked ? &ch : NULL, buf, (size_t)n, rc, tmp);
        }
        if (fr == 1)
                return 0;
        if (fr == -ENOSPC || fr == -EDQUOT)
                return ab_err_set(err, AB_E_STORAGE, -fr, "this node's disk filled up");
        if (fr == -EBADMSG)
                return ab_err_set(err, AB_E_INTERNAL, 0, "the disk arrived damaged (checksum)");
        return ab_err_set(err, AB_E_UNAVAILABLE, fr == -EPROTO ? 0 : -fr,
                          "the disk's stream was cut short or malformed");
}

static ab_backend *native_backend(ab_server *s)
{
        ab_backend *b = ab_backend_find(s->backend, "native");
        return b && b->move ? b : NULL;
}

static const char *box_backend_name(ab_server *s, const ab_box_rec *rec)
{
        const char *be =
            rec->spec ? json_string_value(json_object_get(rec->spec, "backend")) : NULL;
        return be ? be : ab_backend_default(s->backend);
}

/* The receive call's checks before any byte is written: the box is from's
 * and stopped in the store, and this node has room for data bytes. */
static int recv_check(ab_req *r, const char *box, const char *bid, const char *from, uint64_t data,
                      ab_err **err)
{
        ab_fleet *f = r->srv->fleet;
        if (ab_id_check(box, err) < 0 || ab_id_check(bid, err) < 0)
                return -1;
        if (!strcmp(from, ab_fleet_node(f)))
                return ab_err_set(err, AB_E_INVALID, 0, "a node does not move a box to itself");
        ab_box_rec rec = {0};
        if (ab_store_box_get(r->srv->store, r->srv->backend->ops->name, box, &rec, err) < 0)
                return -1;
        /* a box of no node was made before the fleet: its sender's */
        bool ok = (!rec.node || !strcmp(rec.node, from)) && rec.backend_id &&
                  !strcmp(rec.backend_id, bid) && rec.status == AB_BOX_STOPPED;
        ab_box_rec_clear(&rec);
        if (!ok)
                return ab_err_set(err, AB_E_CONFLICT, 0,
                                  "box %s is not a stopped box of node %s in the store", box, from);
        struct statvfs sv;
        if (statvfs(r->srv->cfg->data_dir, &sv) == 0) {
                uint64_t avail = (uint64_t)sv.f_bavail * sv.f_frsize;
                if (avail < data + MOVE_MARGIN)
                        return ab_err_set(err, AB_E_STORAGE, 0,
                                          "node %s has %" PRIu64 " MiB free; box %s needs %" PRIu64
                                          " MiB and %llu MiB stay free",
                                          ab_fleet_node(f), avail >> 20, box, data >> 20,
                                          MOVE_MARGIN >> 20);
        }
        return 0;
}

enum MHD_Result route_fleet_move_recv(ab_req *r, const char *id)
{
        (void)id;
        ab_server *s = r->srv;
        ab_backend *nb = native_backend(s);
        if (!s->fleet || !nb)
                return resp_error(r, 501, "unsupported",
                                  "this node cannot take moved boxes (no native backend)");
        json_t *j = NULL;
        ab_err *e = NULL;
        if (req_json(r, &j, &e) < 0)
                return resp_err(r, e);
        const char *box = NULL, *bid = NULL, *from = NULL, *tk = NULL, *config = NULL;
        int64_t size = -1, data = -1;
        if (field_str(j, "box", &box, &e) < 0 || field_str(j, "backend_id", &bid, &e) < 0 ||
            field_str(j, "from", &from, &e) < 0 || field_str(j, "ticket", &tk, &e) < 0 ||
            field_str(j, "config", &config, &e) < 0 || field_int(j, "size", &size, NULL, &e) < 0 ||
            field_int(j, "data", &data, NULL, &e) < 0) {
                json_decref(j);
                return resp_err(r, e);
        }
        if (!box || !bid || !from || !tk || !config || size < 0 || data < 0 || data > size) {
                json_decref(j);
                return resp_error(r, 400, "invalid_argument",
                                  "a move names box, backend_id, from, ticket, config, size and "
                                  "data");
        }
        _cleanup_free_ char *url = NULL;
        ab_node_state st;
        int rc = recv_check(r, box, bid, from, (uint64_t)data, &e);
        if (rc == 0 && ab_fleet_owner(s->fleet, from, &url, &st) < 0)
                rc = ab_err_set(&e, AB_E_NOT_FOUND, 0, "no fleet node %s", from);
        int lockfd = -1, disk = -1;
        if (rc == 0)
                rc = nb->move->recv_open(nb, bid, config, &lockfd, &disk, &e);
        if (rc == 0 && ftruncate(disk, (off_t)size) < 0)
                rc = ab_err_set(&e, errno == ENOSPC ? AB_E_STORAGE : AB_E_INTERNAL, errno,
                                "size the copy's disk");
        receiver rv = {
            .disk = disk, .box = bid, .size = (uint64_t)size, .t0 = (int64_t)ab_now_ms()};
        rv.next_log = MOVE_LOG_EVERY;
        if (rc == 0)
                rc = pull_disk(r, url, tk, &rv, &e);
        struct stat dst;
        if (rc == 0 && (fstat(disk, &dst) < 0 || (uint64_t)dst.st_size != (uint64_t)size))
                rc = ab_err_set(&e, AB_E_INTERNAL, 0, "the copy's size is not the disk's");
        if (rc == 0 && fdatasync(disk) < 0)
                rc = ab_err_set(&e, errno == ENOSPC ? AB_E_STORAGE : AB_E_INTERNAL, errno,
                                "sync the copy");
        if (rc == 0)
                rc = nb->move->recv_complete(nb, bid, &e);
        if (disk >= 0)
                close(disk);
        if (lockfd >= 0)
                close(lockfd);
        if (rc < 0) {
                if (lockfd >= 0)
                        nb->move->drop(nb, bid, NULL);
                json_decref(j);
                return resp_err(r, e);
        }
        char ms[24];
        snprintf(ms, sizeof(ms), "%" PRId64, (int64_t)ab_now_ms() - rv.t0);
        ab_log(AB_LOG_INFO, "fleet: a moved box's disk is here", "box", box, "from", from, "ms", ms,
               NULL);
        json_t *out = json_pack("{s:b,s:I}", "staged", true, "data", (json_int_t)data);
        json_decref(j);
        return resp_json(r, 200, out);
}

/* This node's backend that takes moved boxes, when it does and the call
 * names its box (?box=); NULL when answered (*ret). */
static ab_backend *staged_backend(ab_req *r, enum MHD_Result *ret)
{
        ab_backend *nb = native_backend(r->srv);
        if (!r->srv->fleet || !nb)
                *ret = resp_error(r, 501, "unsupported", "this node cannot take moved boxes");
        else if (!req_query(r, "box"))
                *ret = resp_error(r, 400, "invalid_argument", "the call names its box (?box=)");
        else
                return nb;
        return NULL;
}

/* The abort's look: this node takes moved boxes, and whether the store
 * names it the owner of the box the call names (?box=, whose backend id is
 * id). NULL when answered (*ret). */
static ab_backend *staged_call(ab_req *r, const char *id, bool *mine, enum MHD_Result *ret)
{
        ab_server *s = r->srv;
        ab_backend *nb = staged_backend(r, ret);
        const char *box = req_query(r, "box");
        ab_box_rec rec = {0};
        ab_err *e = NULL;
        if (!nb)
                return NULL;
        if (ab_store_box_get(s->store, s->backend->ops->name, box, &rec, &e) < 0)
                *ret = resp_err(r, e);
        else {
                *mine = rec.node && !strcmp(rec.node, ab_fleet_node(s->fleet)) && rec.backend_id &&
                        !strcmp(rec.backend_id, id);
                ab_box_rec_clear(&rec);
                return nb;
        }
        return NULL;
}

typedef struct commit_call {
        ab_server *s;
        ab_backend *nb;
        const char *box, *id;
        bool deleted; /* the box's record is gone: its copy was dropped */
} commit_call;

/* Under the box's lock (a delete of it on this node comes before or after):
 * adopts the copy when the store names this node the box's owner; drops it
 * when the box was deleted meanwhile (no record: nothing would ever name
 * the folder); AB_E_CONFLICT when another node is named. */
static int commit_locked(ab_manager *m, void *ud, ab_err **err)
{
        (void)m;
        commit_call *c = ud;
        ab_box_rec rec = {0};
        if (ab_store_box_get(c->s->store, c->s->backend->ops->name, c->box, &rec, err) < 0) {
                if ((*err)->code != AB_E_NOT_FOUND)
                        return -1;
                ab_err_free(err);
                ab_log(AB_LOG_INFO, "fleet: a moved box was deleted before it was taken up", "box",
                       c->box, NULL);
                c->deleted = true;
                /* best effort: the node's sweep removes what is left (a copy
                 * no record names is never taken up) */
                if (c->nb->move->drop(c->nb, c->id, err) < 0) {
                        ab_log(AB_LOG_WARN, "fleet: the copy of a deleted box stays for the sweep",
                               "box", c->box, "error", (*err)->msg, NULL);
                        ab_err_free(err);
                }
                return 0;
        }
        bool mine = rec.node && !strcmp(rec.node, ab_fleet_node(c->s->fleet)) && rec.backend_id &&
                    !strcmp(rec.backend_id, c->id);
        ab_box_rec_clear(&rec);
        if (!mine)
                return ab_err_set(err, AB_E_CONFLICT, 0,
                                  "the store does not name this node box %s's owner", c->box);
        /* the node's sweeper may be adopting it this moment: wait for it */
        int rc;
        for (int i = 0; (rc = c->nb->move->adopt(c->nb, c->id, err)) < 0 &&
                        (*err)->code == AB_E_CONFLICT && i < 100;
             i++) {
                ab_err_free(err);
                usleep(50 * 1000);
        }
        return rc;
}

enum MHD_Result route_fleet_move_commit(ab_req *r, const char *id)
{
        enum MHD_Result ret;
        ab_backend *nb = staged_backend(r, &ret);
        if (!nb)
                return ret;
        commit_call c = {.s = r->srv, .nb = nb, .box = req_query(r, "box"), .id = id};
        ab_err *e = NULL;
        if (ab_manager_box_locked(r->srv->mgr, c.box, commit_locked, &c, &e) < 0)
                return resp_err(r, e);
        if (c.deleted)
                return resp_error(r, 410, "gone",
                                  "box %s was deleted while it moved: its copy here is removed",
                                  c.box);
        return resp_json(r, 200, json_pack("{s:b}", "adopted", true));
}

enum MHD_Result route_fleet_move_abort(ab_req *r, const char *id)
{
        bool mine = false;
        enum MHD_Result ret;
        ab_backend *nb = staged_call(r, id, &mine, &ret);
        if (!nb)
                return ret;
        if (mine)
                return resp_error(r, 409, "conflict",
                                  "the store names this node box %s's owner: its copy stays",
                                  req_query(r, "box"));
        ab_err *e = NULL;
        if (nb->move->drop(nb, id, &e) < 0)
                return resp_err(r, e);
        return resp_json(r, 200, json_pack("{s:b}", "dropped", true));
}

/* ---- the owner: POST /v1/sandboxes/{id}/move ---- */

/* A node-to-node call about box rec; *status and the answer's JSON (or NULL). */
static int call_target(ab_req *r, const char *node, const char *target, json_t *body,
                       unsigned *status, json_t **answer, ab_err **err)
{
        _cleanup_free_ char *text = body ? json_dumps(body, JSON_COMPACT) : xstrdup("{}");
        _cleanup_buf_ ab_buf out = {0};
        if (kit_fleet_call(r, node, "POST", target, text, strlen(text), status, &out, NULL, err) <
            0)
                return -1;
        *answer = out.n ? json_loadb(out.p, out.n, 0, NULL) : NULL;
        return 0;
}

/* Answers with what the target answered (its status and error). */
static enum MHD_Result pass_on(ab_req *r, const char *node, unsigned status, json_t *answer)
{
        json_t *err = answer ? json_object_get(answer, "error") : NULL;
        const char *msg = json_string_value(json_object_get(err ? err : answer, "message"));
        const char *code = json_string_value(json_object_get(err ? err : answer, "code"));
        enum MHD_Result ret =
            resp_error(r, status >= 400 ? status : 502, code ? code : "failed",
                       "node %s did not take the box: %s", node, msg ? msg : "no reason given");
        json_decref(answer);
        return ret;
}

typedef struct move_ctx {
        ab_req *r;
        ab_box_rec rec;
        const char *node; /* the target */
        const char *self;
        ab_backend *nb;
        int lockfd, disk;
        char *config;
        uint64_t size, data;
} move_ctx;

static void move_ctx_clear(move_ctx *m)
{
        ab_box_rec_clear(&m->rec);
        if (m->disk >= 0)
                close(m->disk);
        if (m->lockfd >= 0)
                close(m->lockfd);
        free(m->config);
}

/* The disk's size and its data bytes (what travels). */
static int disk_extent_bytes(int fd, uint64_t *size, uint64_t *data)
{
        struct stat st;
        if (fstat(fd, &st) < 0)
                return -errno;
        *size = (uint64_t)st.st_size;
        *data = 0;
        for (off_t pos = 0; (uint64_t)pos < *size;) {
                off_t d = lseek(fd, pos, SEEK_DATA);
                if (d < 0)
                        return errno == ENXIO ? 0 : -errno;
                off_t h = lseek(fd, d, SEEK_HOLE);
                if (h < 0)
                        return -errno;
                *data += (uint64_t)(h - d);
                pos = h;
        }
        return 0;
}

/* The checks of docs/fleet.md before anything moves: 0, or answered. */
static int move_check(move_ctx *m, enum MHD_Result *ret)
{
        ab_req *r = m->r;
        ab_server *s = r->srv;
        const char *be = box_backend_name(s, &m->rec);
        if (strcmp(be, "native") != 0 || !m->nb) {
                *ret = resp_error(r, 501, "unsupported",
                                  "box %s runs on the %s backend: only native boxes move between "
                                  "nodes",
                                  m->rec.id, be);
                return -1;
        }
        if (m->rec.status == AB_BOX_RUNNING || m->rec.status == AB_BOX_PAUSED) {
                *ret = resp_error(r, 409, "conflict", "box %s is %s: stop it first", m->rec.id,
                                  ab_box_status_name(m->rec.status));
                return -1;
        }
        if (m->rec.status != AB_BOX_STOPPED) {
                *ret = resp_error(r, 409, "conflict", "box %s is %s: only a stopped box moves",
                                  m->rec.id, ab_box_status_name(m->rec.status));
                return -1;
        }
        ab_node_rec n;
        ab_node_state st;
        ab_err *e = NULL;
        if (ab_fleet_node_get(s->fleet, m->node, &n, &st, &e) < 0) {
                *ret = resp_err(r, e);
                return -1;
        }
        ab_node_rec_clear(&n);
        if (st == AB_NODE_DOWN) {
                *ret = resp_error(r, 503, "unavailable",
                                  "node %s is down (no heartbeat): it cannot take box %s", m->node,
                                  m->rec.id);
                return -1;
        }
        if (st == AB_NODE_DRAINING) {
                *ret = resp_error(r, 409, "conflict",
                                  "node %s is draining: it takes no boxes (undrain it first)",
                                  m->node);
                return -1;
        }
        return 0;
}

/* The store names the target the owner: the target adopts its copy, then
 * this node's copy goes. */
static enum MHD_Result move_commit(move_ctx *m)
{
        ab_req *r = m->r;
        ab_server *s = r->srv;
        _cleanup_free_ char *target =
            xasprintf("/v1/fleet/moves/%s/commit?box=%s", m->rec.backend_id, m->rec.id);
        unsigned status = 0;
        json_t *answer = NULL;
        ab_err *e = NULL;
        int rc = call_target(r, m->node, target, NULL, &status, &answer, &e);
        json_decref(answer);
        if (rc == 0 && status == 404) {
                /* the target lost its copy: the box stays here */
                if (ab_store_box_set_node(s->store, m->rec.provider, m->rec.id, m->self, m->node,
                                          NULL) == 0)
                        m->nb->move->send_mark(m->nb, m->rec.backend_id, false, NULL);
                return resp_error(r, 502, "failed",
                                  "node %s lost the copy of box %s before taking it: the box "
                                  "stays on node %s",
                                  m->node, m->rec.id, m->self);
        }
        bool deleted = rc == 0 && status == 410;
        if (deleted) {
                /* deleted through the target since the switch: the target
                 * dropped its copy, this one goes too (no record names it) */
                ab_log(AB_LOG_INFO, "fleet: a moving box was deleted meanwhile", "box", m->rec.id,
                       "node", m->node, NULL);
        } else if (rc < 0 || status != 200) {
                ab_log(AB_LOG_WARN, "fleet: a moved box's new node did not confirm", "box",
                       m->rec.id, "node", m->node, "error", e ? e->msg : "", NULL);
                ab_err_free(&e);
                return resp_error(r, 503, "unavailable",
                                  "box %s belongs to node %s now, which did not confirm: it "
                                  "takes the box up within seconds of being back",
                                  m->rec.id, m->node);
        }
        close(m->lockfd);
        m->lockfd = -1;
        close(m->disk);
        m->disk = -1;
        if (m->nb->ops->destroy(m->nb, m->rec.backend_id, &e) < 0) {
                ab_log(AB_LOG_WARN, "fleet: a moved box's old copy stays for now", "box", m->rec.id,
                       "error", e->msg, NULL);
                ab_err_free(&e);
        }
        if (deleted)
                return resp_error(r, 404, "not_found", "box %s was deleted while it moved",
                                  m->rec.id);
        ab_box_rec rec = {0};
        if (ab_store_box_get(s->store, m->rec.provider, m->rec.id, &rec, &e) < 0)
                return resp_err(r, e);
        json_t *j = box_json(s, &rec);
        ab_box_rec_clear(&rec);
        json_object_set_new(j, "moved", json_true());
        json_object_set_new(j, "from", json_string(m->self));
        json_object_set_new(j, "bytes", json_integer((json_int_t)m->data));
        return resp_json(r, 200, j);
}

static enum MHD_Result move_run(move_ctx *m)
{
        ab_req *r = m->r;
        ab_server *s = r->srv;
        ab_err *e = NULL;
        if (m->nb->move->send_open(m->nb, m->rec.backend_id, &m->lockfd, &m->disk, &m->config, &e) <
            0)
                return resp_err(r, e);
        /* under the box's lock now: read its record again */
        ab_box_rec now = {0};
        if (ab_store_box_get(s->store, m->rec.provider, m->rec.id, &now, &e) < 0)
                return resp_err(r, e);
        bool same = now.status == AB_BOX_STOPPED && (!now.node || !strcmp(now.node, m->self));
        ab_box_rec_clear(&now);
        if (!same)
                return resp_error(r, 409, "conflict", "box %s changed meanwhile: try again",
                                  m->rec.id);
        int dr = disk_extent_bytes(m->disk, &m->size, &m->data);
        if (dr < 0)
                return resp_error(r, 500, "internal", "read the disk of box %s: %s", m->rec.id,
                                  strerror(-dr));
        char tk[33];
        ticket_add(m->rec.backend_id, m->node, m->disk, tk);
        json_t *body =
            json_pack("{s:s,s:s,s:s,s:s,s:s,s:I,s:I}", "box", m->rec.id, "backend_id",
                      m->rec.backend_id, "from", m->self, "ticket", tk, "config", m->config, "size",
                      (json_int_t)m->size, "data", (json_int_t)m->data);
        unsigned status = 0;
        json_t *answer = NULL;
        uint64_t t0 = ab_now_ms();
        int rc = call_target(r, m->node, "/v1/fleet/moves", body, &status, &answer, &e);
        json_decref(body);
        ticket_remove(tk);
        if (rc < 0)
                return resp_err(r, e);
        if (status != 200)
                return pass_on(r, m->node, status, answer);
        json_decref(answer);
        /* the folder says it leaves before the store says so: an owner killed
         * after the switch finds it so at its start, whatever became of the
         * box on the target meanwhile (recovery.c never adopts it) */
        if (m->nb->move->send_mark(m->nb, m->rec.backend_id, true, &e) < 0 ||
            ab_store_box_set_node(s->store, m->rec.provider, m->rec.id, m->node, m->self, &e) < 0) {
                m->nb->move->send_mark(m->nb, m->rec.backend_id, false, NULL);
                _cleanup_free_ char *t =
                    xasprintf("/v1/fleet/moves/%s/abort?box=%s", m->rec.backend_id, m->rec.id);
                if (call_target(r, m->node, t, NULL, &status, &answer, NULL) == 0)
                        json_decref(answer);
                return resp_err(r, e);
        }
        char ms[24], mib[24];
        snprintf(ms, sizeof(ms), "%" PRIu64, ab_now_ms() - t0);
        snprintf(mib, sizeof(mib), "%" PRIu64, m->data >> 20);
        ab_log(AB_LOG_INFO, "fleet: box moved", "box", m->rec.id, "from", m->self, "to", m->node,
               "data_mib", mib, "ms", ms, NULL);
        test_delay("AGENTBOX_TEST_MOVE_SWITCH_DELAY_MS");
        return move_commit(m);
}

enum MHD_Result route_box_move(ab_req *r, const char *id)
{
        ab_server *s = r->srv;
        json_t *j = NULL;
        ab_err *e = NULL;
        const char *node = NULL;
        if (req_json(r, &j, &e) < 0)
                return resp_err(r, e);
        static const char *const known[] = {"node", NULL};
        if (fields_known(j, known, "a move", &e) < 0 || field_str(j, "node", &node, &e) < 0) {
                json_decref(j);
                return resp_err(r, e);
        }
        if (!node || !*node) {
                json_decref(j);
                return resp_error(r, 400, "invalid_argument", "a move names its \"node\"");
        }
        move_ctx m = {.r = r, .node = node, .lockfd = -1, .disk = -1};
        enum MHD_Result ret;
        if (ab_manager_get(s->mgr, id, r->scope, &m.rec, &e) < 0) {
                ret = resp_err(r, e);
        } else if (!s->fleet) {
                ret = resp_error(r, 404, "not_found",
                                 "no node \"%s\": this server is not in a fleet", node);
        } else {
                m.self = ab_fleet_node(s->fleet);
                m.nb = native_backend(s);
                ab_node_rec n;
                ab_node_state st;
                if (ab_fleet_node_get(s->fleet, node, &n, &st, &e) < 0) {
                        ret = resp_err(r, e);
                } else if (ab_node_rec_clear(&n), !strcmp(node, m.rec.node ? m.rec.node : m.self)) {
                        json_t *b = box_json(s, &m.rec);
                        json_object_set_new(b, "moved", json_false());
                        ret = resp_json(r, 200, b);
                } else if (move_check(&m, &ret) == 0) {
                        ret = move_run(&m);
                }
        }
        move_ctx_clear(&m);
        json_decref(j);
        return ret;
}

/* Ports of boxes: HTTP and WebSocket to a server listening in a box, at
 * /v1/sandboxes/{id}/ports/{port}/... or by host name PORT-ID.DOMAIN
 * (docs/api.md, "Ports"; docs/architecture.md says how it fits the server).
 *
 * The backend connects to the port on the box's own loopback (inside the
 * box's network namespace, or through a pod's init: port_connect in
 * backend.h), so a box without network is reachable, and nothing of the
 * host's own network is: a worker authenticates, connects and sends the
 * head; the relay
 * (kit/relay.h) passes the body on and streams the answer back, an upgrade
 * (WebSocket) byte for byte. */
#include "http/httpmsg.h"
#include "http/reqcheck.h"
#include "rest/rest.h"
#include "kit/relay.h"
#include "http/ws.h"
#include "base/id.h"
#include "base/log.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <inttypes.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#define PORT_PATH_SEGS 5 /* v1 sandboxes ID ports PORT */

/* What a relay to a box's port knows of its request (ab_proxy's user). */
typedef struct port_req {
        char *box;      /* box id */
        char *port_str; /* as in the request */
        int port;
        char *target; /* request target for the box's server */
        bool by_host; /* matched by Host */
} port_req;

static void port_req_free(void *p)
{
        port_req *pr = p;
        free(pr->box);
        free(pr->port_str);
        free(pr->target);
        free(pr);
}

/* ---- matching (MHD's thread) ---- */

/* Port and id from a host name "PORT-ID.DOMAIN[:N]" (any case). */
static bool host_match(const char *host, const char *domain, char **port, char **box)
{
        char p[AB_HOST_PORT_MAX + 1], b[AB_HOST_BOX_MAX + 1];
        if (!ab_req_host_box(host, domain, p, b))
                return false;
        *port = xstrdup(p);
        *box = xstrdup(b);
        return true;
}

/* The request target for the box: for the path form the raw target minus
 * /v1/sandboxes/ID/ports/PORT (which must be spelled as the decoded path
 * says: no escapes there), else all of it. NULL when it does not fit. */
static char *target_of(ab_req *r, bool by_host)
{
        const char *raw = ab_conns_raw_uri(r->conn);
        if (!raw || raw[0] != '/')
                return NULL;
        for (const char *p = raw; *p; p++)
                if ((unsigned char)*p <= 0x20 || (unsigned char)*p >= 0x7f)
                        return NULL;
        if (by_host)
                return xstrdup(raw);
        _cleanup_free_ char *pre = xasprintf("/v1/sandboxes/%s/ports/%s", r->seg[2], r->seg[4]);
        size_t n = strlen(pre);
        if (strncmp(raw, pre, n) != 0 || (raw[n] && raw[n] != '/' && raw[n] != '?'))
                return NULL;
        return raw[n] == '/' ? xstrdup(raw + n) : xasprintf("/%s", raw + n);
}

bool ports_by_host(ab_req *r)
{
        _cleanup_free_ char *port = NULL, *box = NULL;
        return host_match(req_header(r, "Host"), r->srv->cfg->ports_domain, &port, &box);
}

const char *ports_box(ab_req *r)
{
        return ((port_req *)r->proxy->user)->box;
}

bool ports_match(ab_req *r)
{
        char *port = NULL, *box = NULL;
        bool by_host = host_match(req_header(r, "Host"), r->srv->cfg->ports_domain, &port, &box);
        if (!by_host) {
                if (r->n_seg < 5 || strcmp(r->seg[0], "v1") || strcmp(r->seg[1], "sandboxes") ||
                    strcmp(r->seg[3], "ports"))
                        return false;
                /* PUT and DELETE of .../public are the public switch (routes) */
                if (r->n_seg == 6 && !strcmp(r->seg[5], "public") &&
                    (!strcmp(r->method, "PUT") || !strcmp(r->method, "DELETE")))
                        return false;
                box = xstrdup(r->seg[2]);
                port = xstrdup(r->seg[4]);
        }
        _cleanup_free_ char *peer = xasprintf("the server on port %s in box %s", port, box);
        const ab_config *c = r->srv->cfg;
        ab_proxy *px = relay_new(peer, c->ports_timeout_ms, c->ports_timeout_ms);
        port_req *pr = xzalloc(sizeof(*pr));
        pr->box = box;
        pr->port_str = port;
        pr->by_host = by_host;
        pr->target = target_of(r, by_host);
        px->user = pr;
        px->user_free = port_req_free;
        r->proxy = px;
        return true;
}

/* ---- opening (a worker) ---- */

/* 1..65535 from decimal digits, else 0. */
static int port_num(const char *s)
{
        if (!s || !*s || strlen(s) > 5)
                return 0;
        int v = 0;
        for (const char *p = s; *p; p++) {
                if (!isdigit((unsigned char)*p))
                        return 0;
                v = v * 10 + (*p - '0');
        }
        return v <= 65535 ? v : 0;
}

/* Sec-WebSocket-Protocol minus this server's own offers: a browser's token
 * ("bearer.TOKEN", http/ws.h) and the terminal protocol that carries it
 * never reach a box. */
static void protocols_without_ours(ab_buf *b, const char *v)
{
        _cleanup_buf_ ab_buf keep = {0};
        for (const char *p = v; *p;) {
                while (*p == ' ' || *p == '\t' || *p == ',')
                        p++;
                const char *e = p;
                while (*e && *e != ',')
                        e++;
                const char *t = e;
                while (t > p && (t[-1] == ' ' || t[-1] == '\t'))
                        t--;
                size_t n = (size_t)(t - p);
                bool ours = (n > 7 && strncmp(p, "bearer.", 7) == 0) ||
                            (n == strlen(WS_PROTOCOL) && strncmp(p, WS_PROTOCOL, n) == 0);
                if (n && !ours) {
                        if (keep.n)
                                ab_buf_puts(&keep, ", ");
                        ab_buf_add(&keep, p, n);
                }
                p = e;
        }
        if (keep.n)
                ab_buf_printf(b, "Sec-WebSocket-Protocol: %s\r\n", keep.p);
}

/* True when the header k: v carries a credential of this server, which
 * the box must never see: the Authorization of a private port (it was the
 * credential) or any holding a token or key of this server (a public
 * port's client may send its token along), X-API-Key and the OpenSandbox
 * SDK's key holding one, and E2B's envd access token (X-Access-Token,
 * a box's own secret) always. */
static bool credential(ab_req *r, bool drop_auth, const char *k, const char *v)
{
        if (!v)
                return false;
        if (strcasecmp(k, "Authorization") == 0) {
                if (drop_auth)
                        return true;
                if (strncasecmp(v, "Bearer ", 7) != 0)
                        return false;
                const char *tok = v + 7;
                while (*tok == ' ')
                        tok++;
                return req_is_credential(r, tok);
        }
        if (strcasecmp(k, "X-Access-Token") == 0)
                return true;
        if (strcasecmp(k, "X-API-Key") == 0 || strcasecmp(k, "OPEN-SANDBOX-API-KEY") == 0)
                return drop_auth || req_is_credential(r, v);
        return false;
}

/* The relay's header rule for a box's port: credentials of this server
 * never reach the box, nor the fleet's headers, nor this server's WebSocket
 * subprotocols. arg: a
 * bool, whether Authorization was the credential (a private port). */
static bool port_hdr(ab_req *r, void *arg, ab_buf *b, const char *k, const char *v)
{
        if (credential(r, *(bool *)arg, k, v))
                return true;
        if (strncasecmp(k, "X-Agentbox-Fleet-", 17) == 0) /* the fleet's secret and callers */
                return true;
        if (strcasecmp(k, "Sec-WebSocket-Protocol") == 0) {
                protocols_without_ours(b, v);
                return true;
        }
        return false;
}

/* The answer for a port the backend could not reach: nothing listens 502,
 * no answer 504, else the error as it is. Consumes e. */
static enum MHD_Result unreachable(ab_req *r, port_req *px, ab_err *e)
{
        enum MHD_Result ret;
        if (e->errnum == ECONNREFUSED)
                ret = resp_error(r, 502, "unavailable", "nothing listens on port %d in box %s",
                                 px->port, px->box);
        else if (e->code == AB_E_TIMEOUT)
                ret = resp_error(r, 504, "timeout", "port %d of box %s does not answer", px->port,
                                 px->box);
        else if (e->code == AB_E_UNAVAILABLE)
                ret = resp_error(r, 502, "unavailable", "cannot reach port %d in box %s: %s",
                                 px->port, px->box, e->msg);
        else
                return resp_err(r, e);
        ab_err_free(&e);
        return ret;
}

/* A connection to the box's port (ab_backend_ops.port_connect). A box
 * recorded running whose init died is started again, as a connection to
 * its init would be (use_connect). */
static int port_connect(ab_server *s, ab_use *u, int port, ab_err **err)
{
        ab_backend *b = ab_manager_backend(s->mgr);
        if (!b->ops->port_connect)
                return ab_err_set(err, AB_E_UNSUPPORTED, 0,
                                  "the %s backend cannot reach a port of box %s", b->ops->name,
                                  u->rec.id);
        for (int attempt = 0;; attempt++) {
                ab_err *e = NULL;
                int fd = b->ops->port_connect(b, u->rec.backend_id, (uint16_t)port,
                                              (int)s->cfg->ports_timeout_ms, &e);
                if (fd >= 0 || e->code != AB_E_CONFLICT || attempt == 1) {
                        if (fd < 0)
                                *err = e;
                        return fd;
                }
                ab_err_free(&e);
                int ifd = ab_manager_use_connect(s->mgr, u, err);
                if (ifd < 0)
                        return -1;
                close(ifd);
        }
}

enum MHD_Result ports_open(ab_req *r, bool *done)
{
        ab_server *s = r->srv;
        port_req *px = r->proxy->user;
        *done = true;
        px->port = port_num(px->port_str);
        /* Who may: the port is public, or the caller may use the box. An
         * unknown box is answered only to an authenticated caller. */
        ab_box_rec rec = {0};
        ab_err *e = NULL;
        bool known = px->port && ab_manager_get(s->mgr, px->box, NULL, &rec, &e) == 0;
        bool pub = known && ab_box_port_public(&rec, px->port);
        ab_box_rec_clear(&rec);
        ab_err_free(&e);
        bool ok = pub;
        enum MHD_Result ret = MHD_YES;
        if (!pub) {
                ret = req_authenticate(r, &ok);
                if (!ok)
                        return ret;
        }
        if (!px->port)
                return resp_error(r, 400, "invalid_argument", "port \"%s\" is not in 1..65535",
                                  px->port_str);
        if (!px->target)
                return resp_error(r, 400, "invalid_argument",
                                  "the request target cannot be passed on (escaped characters "
                                  "in /v1/sandboxes/ID/ports/PORT, or bytes outside ASCII)");
        if (!relay_method_ok(r->method))
                return resp_error(r, 400, "invalid_argument", "bad method");
        _cleanup_buf_ ab_buf head = {0};
        bool drop_auth = !pub || r->scope;
        if (relay_head(r, r->proxy, px->target, port_hdr, &drop_auth, NULL, &head, &ret) < 0)
                return ret;
        /* A use of the box: a paused box is thawed, a stopped one started,
         * and it counts as activity; ended when the request is done. */
        ab_use *u = xzalloc(sizeof(*u));
        if (ab_manager_use_begin(s->mgr, px->box, pub ? NULL : r->scope, u, &e) < 0) {
                free(u);
                return resp_err(r, e);
        }
        r->deferred_use = u;
        int fd = port_connect(s, u, px->port, &e);
        if (fd < 0)
                return unreachable(r, px, e);
        relay_connected(r, r->proxy, fd);
        int rc = ab_send_all(fd, head.p, head.n, (int)s->cfg->ports_timeout_ms);
        if (rc < 0) {
                ab_err_set(&e, rc == -ETIMEDOUT ? AB_E_TIMEOUT : AB_E_UNAVAILABLE, 0, "%s",
                           strerror(rc == -EPIPE ? ECONNREFUSED : -rc));
                e->errnum = rc == -EPIPE ? ECONNREFUSED : -rc;
                return unreachable(r, px, e);
        }
        *done = false;
        return MHD_YES;
}

/* ---- public ports ---- */

static enum MHD_Result set_public(ab_req *r, bool pub)
{
        int port = port_num(r->seg[4]);
        if (!port)
                return resp_error(r, 400, "invalid_argument", "port \"%s\" is not in 1..65535",
                                  r->seg[4]);
        ab_box_rec rec;
        ab_err *e = NULL;
        if (ab_manager_set_port_public(r->srv->mgr, r->seg[2], r->scope, port, pub, &rec, &e) < 0)
                return resp_err(r, e);
        json_t *list = json_object_get(rec.spec, "public_ports");
        json_t *j =
            json_pack("{s:s,s:i,s:b,s:o}", "sandbox_id", rec.id, "port", port, "public", pub,
                      "public_ports", json_is_array(list) ? json_incref(list) : json_array());
        ab_box_rec_clear(&rec);
        return resp_json(r, 200, j);
}

/* PUT /v1/sandboxes/{id}/ports/{port}/public */
enum MHD_Result route_port_public_put(ab_req *r, const char *id)
{
        (void)id;
        return set_public(r, true);
}

/* DELETE /v1/sandboxes/{id}/ports/{port}/public */
enum MHD_Result route_port_public_delete(ab_req *r, const char *id)
{
        (void)id;
        return set_public(r, false);
}

/* auth.c - the caller and auth of a request (kit/auth.h): admin token,
 * configured and stored API keys, the route tables' own header forms and
 * authenticators. */
#include "kit/server_int.h"
#include "kit/forward.h"
#include "base/codec.h"
#include "base/jsonnum.h"
#include "base/log.h"
#include "base/util.h"
#include "http/ws.h"

#include <arpa/inet.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <poll.h>
#include <sys/socket.h>

/* ---- auth ------------------------------------------------------------- */

static void sha256_hex(const char *s, char out[65])
{
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned int len = 0;
        if (!EVP_Digest(s, strlen(s), md, &len, EVP_sha256(), NULL))
                abort();
        ab_hex_encode(md, 32, out);
}

static bool same_secret(const char *a, const char *b)
{
        char ha[65], hb[65];
        sha256_hex(a, ha);
        sha256_hex(b, hb);
        return CRYPTO_memcmp(ha, hb, 64) == 0;
}

static bool peer_is_loopback(ab_req *r)
{
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        if (!ci || !ci->client_addr)
                return false;
        const struct sockaddr *sa = ci->client_addr;
        if (sa->sa_family == AF_INET) {
                const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
                return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
        }
        if (sa->sa_family == AF_INET6) {
                const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
                if (IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr))
                        return true;
                return IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr) && in6->sin6_addr.s6_addr[12] == 127;
        }
        return sa->sa_family == AF_UNIX;
}

bool req_secret_eq(const char *a, const char *b)
{
        return same_secret(a, b);
}

bool req_peer_loopback(ab_req *r)
{
        return peer_is_loopback(r);
}

bool req_client_gone(ab_req *r)
{
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (!ci)
                return false;
        struct pollfd p = {.fd = ci->connect_fd, .events = POLLRDHUP};
        return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* The credential in the header form of the clients of r's route table (the
 * OpenSandbox SDK's OPEN-SANDBOX-API-KEY), as "Bearer KEY" (malloc'd), or
 * NULL. */
static char *table_credential(ab_req *r)
{
        const char *name = r->table ? r->table->key_header : NULL;
        const char *k = name ? req_header(r, name) : NULL;
        return k && *k ? xasprintf("Bearer %s", k) : NULL;
}

/* The request's credential: its Authorization header, or E2B's X-API-Key
 * taken as a bearer token (*buf holds it then). */
static const char *auth_header(ab_req *r, char **buf)
{
        const char *h = req_header(r, "Authorization");
        const char *k = h ? NULL : req_header(r, "X-API-Key");
        if (k && *k)
                return *buf = xasprintf("Bearer %s", k);
        return h;
}

/* True when authenticating r needs the store (an API key made with POST
 * /v1/keys): then it runs on a worker, not on MHD's thread. */
bool kit_auth_may_block(ab_req *r, auth_level need)
{
        const ab_config *c = r->srv->cfg;
        if (need == AUTH_ANY)
                return false;
        if (req_header(r, FLEET_HDR_SECRET)) /* a forwarded caller's API key */
                return true;
        if (need == AUTH_OWN) /* E2B's access token reads the box's record */
                return r->table->auth_blocks;
        _cleanup_free_ char *xkey = NULL;
        const char *h = auth_header(r, &xkey);
        _cleanup_free_ char *own = h ? NULL : table_credential(r); /* the OpenSandbox SDK's */
        if (own)
                h = own;
        if (!h || strncasecmp(h, "Bearer ", 7) != 0 || !h[7])
                return false;
        const char *tok = h + 7;
        while (*tok == ' ')
                tok++;
        if (c->token && *c->token && same_secret(tok, c->token))
                return false;
        for (size_t i = 0; i < c->n_keys; i++)
                if (same_secret(tok, c->keys[i].key))
                        return false;
        return true;
}

void kit_take_key(ab_req *r, ab_api_key *k)
{
        if (k->has_quotas) {
                r->key_quotas = k->quotas;
                r->caller.quotas = &r->key_quotas;
        }
        free(r->key_id);
        r->key_id = steal_pointer(&k->key_id);
        r->caller.key_id = r->key_id;
        /* deleting the key ends this request and its stream */
        ab_conns_bind_key(r->srv->http.conns, r->conn, r->key_id);
        ab_api_key_clear(k);
}

/* Sets r->scope from the Authorization header; answers 401/403 itself. */
enum MHD_Result kit_authenticate(ab_req *r, auth_level need, bool *ok)
{
        *ok = false;
        const ab_config *c = r->srv->cfg;
        bool has_token = c->token && *c->token;
        if (need == AUTH_ANY) {
                *ok = true;
                return MHD_YES;
        }
        /* a request another fleet node passed on: its caller is in its head */
        enum MHD_Result fret = MHD_YES;
        if (kit_fleet_identity(r, need, ok, &fret) && (!*ok || need != AUTH_OWN))
                return fret;
        *ok = false;
        if (need == AUTH_FLEET)
                return resp_error(r, 401, "unauthorized",
                                  "this route is for the fleet's nodes only (the fleet's secret)");
        if (need == AUTH_OWN) {
                if (!r->table->authenticate) /* a table's mistake: refused, not let in */
                        return resp_error(r, 500, "internal", "route has no authenticator");
                return r->table->authenticate(r, ok);
        }
        _cleanup_free_ char *xkey = NULL;
        const char *h = auth_header(r, &xkey);
        /* A browser's WebSocket offers its token as a subprotocol (http/ws.c). */
        _cleanup_free_ char *ws_auth =
            h ? NULL
              : ws_auth_from_protocols(req_header(r, "Upgrade"),
                                       req_header(r, "Sec-WebSocket-Protocol"));
        if (ws_auth)
                h = ws_auth;
        _cleanup_free_ char *own = h ? NULL : table_credential(r); /* the OpenSandbox SDK's */
        if (own)
                h = own;
        if (!h) {
                if (!has_token) {
                        if (!peer_is_loopback(r))
                                return resp_error(r, 403, "permission_denied",
                                                  "this server has no token and answers "
                                                  "loopback clients only");
                        *ok = true;
                        return MHD_YES;
                }
                return resp_error(r, 401, "unauthorized",
                                  "missing \"Authorization: Bearer <token>\" header");
        }
        if (strncasecmp(h, "Bearer ", 7) != 0 || !h[7])
                return resp_error(r, 401, "unauthorized",
                                  "malformed Authorization header: expected \"Bearer <token>\"");
        const char *tok = h + 7;
        while (*tok == ' ')
                tok++;
        if (has_token && same_secret(tok, c->token)) {
                *ok = true;
                return MHD_YES;
        }
        for (size_t i = 0; i < c->n_keys; i++) {
                if (same_secret(tok, c->keys[i].key)) {
                        r->scope_buf = xstrdup(c->keys[i].app_id);
                        break;
                }
        }
        if (!r->scope_buf) {
                char hex[65];
                sha256_hex(tok, hex);
                ab_api_key k = {0};
                ab_err *e = NULL;
                if (ab_store_key_find(r->srv->store, hex, &k, &e) == 0) {
                        r->scope_buf = steal_pointer(&k.app_id);
                        kit_take_key(r, &k);
                } else if (e->code != AB_E_NOT_FOUND) {
                        return resp_err(r, e);
                } else {
                        ab_err_free(&e);
                }
        }
        if (!r->scope_buf) {
                if (!has_token && !peer_is_loopback(r))
                        return resp_error(r, 403, "permission_denied",
                                          "this server answers loopback clients only");
                if (!has_token) {
                        /* The E2B and OpenSandbox SDKs refuse to start without a
                         * key: a key that is no one's, from a loopback client of
                         * a server without a token, is that client's admin, as a
                         * request without a header is. */
                        *ok = true;
                        return MHD_YES;
                }
                return resp_error(r, 401, "unauthorized", "invalid token or API key");
        }
        r->scope = r->scope_buf;
        if (need == AUTH_ADMIN)
                return resp_error(r, 403, "permission_denied",
                                  "this route needs the admin token; API keys cannot use it");
        *ok = true;
        return MHD_YES;
}

enum MHD_Result req_authenticate(ab_req *r, bool *ok)
{
        return kit_authenticate(r, AUTH_USER, ok);
}

bool req_is_credential(ab_req *r, const char *tok)
{
        if (!tok || !*tok)
                return false;
        const ab_config *c = r->srv->cfg;
        if (c->token && *c->token && same_secret(tok, c->token))
                return true;
        for (size_t i = 0; i < c->n_keys; i++)
                if (same_secret(tok, c->keys[i].key))
                        return true;
        char hex[65];
        sha256_hex(tok, hex);
        ab_api_key k = {0};
        ab_err *e = NULL;
        if (ab_store_key_find(r->srv->store, hex, &k, &e) == 0) {
                ab_api_key_clear(&k);
                return true;
        }
        /* the store failed: treat the value as a credential (never pass on
         * what may be one) */
        bool unsure = e && e->code != AB_E_NOT_FOUND;
        ab_err_free(&e);
        return unsure;
}

/* registry.c - the pull side of the OCI distribution API (registry.h) on one
 * libcurl easy handle per session (so connections are reused).
 *
 * Every request goes through request(): it sends the session's credentials
 * (a cached Bearer token, or basic credentials once the registry asked for
 * them), and on a 401 answers the challenge once (a new token from the realm,
 * or basic credentials) and sends again. Bodies of 2xx answers go to the
 * request's sink (a bounded buffer, or an fd through sha256); other answers'
 * bodies are kept, bounded, for the registry's error code. Credentials and
 * tokens never appear in a message: errors name the registry, the repository
 * and the reference only. */
#include "image/registry.h"
#include "base/codec.h"
#include "image/manifest.h"
#include "base/addrcheck.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <strings.h>

#define MAX_REDIRS      5
#define ERR_BODY_MAX    (64u << 10)
#define TOKEN_BODY_MAX  (1u << 20)
#define TOKEN_MAX       (16u << 10)
#define DEFAULT_CONNECT 10
#define DEFAULT_STALL   60
#define CHALLENGE_MAX   4096
#define ACCEPT_MANIFESTS                                                                           \
        "Accept: " AB_MT_OCI_INDEX ", " AB_MT_OCI_MANIFEST ", " AB_MT_DOCKER_LIST                  \
        ", " AB_MT_DOCKER_MANIFEST

typedef enum { AUTH_NONE, AUTH_BEARER, AUTH_BASIC } auth_kind;

struct ab_registry {
        char *domain; /* as in the reference: names the registry in messages, finds creds */
        char *path;   /* repository */
        char *base;   /* "https://host" or "http://host" */
        bool plain_http;
        char *user, *pass; /* configured credentials, or NULL */
        auth_kind auth;
        char *token; /* cached Bearer token */
        long connect_s, stall_s;
        bool check_addrs, allow_loopback;
        char blocked[INET6_ADDRSTRLEN + 64]; /* "ADDR (why)": a connect check_addrs refused */
        CURL *curl;
        char errbuf[CURL_ERROR_SIZE];
};

/* Where a 2xx body goes. */
typedef struct sink {
        ab_buf *buf; /* buffer sink, at most max bytes */
        int fd;      /* or fd sink (buf NULL), hashed into md */
        EVP_MD_CTX *md;
        uint64_t max, done, total;
        ab_registry_progress_fn fn;
        void *ud;
} sink;

/* One transfer: what the headers said and where the body went. */
typedef struct xfer {
        sink *out;
        long status; /* of the last response seen (redirects followed) */
        char *content_type, *docker_digest;
        char *bearer;    /* the first Bearer challenge of the last response */
        bool basic;      /* a Basic challenge was in it */
        ab_buf err_body; /* body of a non-2xx answer (bounded) */
        bool too_big;
        int write_errno;
} xfer;

static void xfer_reset_headers(xfer *x)
{
        free(x->content_type);
        free(x->docker_digest);
        free(x->bearer);
        x->content_type = x->docker_digest = x->bearer = NULL;
        x->basic = false;
        x->status = 0;
        x->err_body.n = 0;
        if (x->err_body.p)
                x->err_body.p[0] = '\0';
}

static void xfer_free(xfer *x)
{
        xfer_reset_headers(x);
        ab_buf_free(&x->err_body);
}

static bool ok_status(long st)
{
        return st >= 200 && st < 300;
}

/* ---- curl callbacks ------------------------------------------------------ */

static char *trimmed(const char *p, size_t n)
{
        while (n && (*p == ' ' || *p == '\t')) {
                p++;
                n--;
        }
        while (n && (p[n - 1] == '\r' || p[n - 1] == '\n' || p[n - 1] == ' ' || p[n - 1] == '\t'))
                n--;
        return xstrndup(p, n);
}

static size_t on_header(char *p, size_t size, size_t nmemb, void *user)
{
        xfer *x = user;
        size_t n = size * nmemb;
        if (n >= 5 && strncmp(p, "HTTP/", 5) == 0) {
                /* A new response (after a redirect or a 100): forget the last one's. */
                xfer_reset_headers(x);
                const char *sp = memchr(p, ' ', n);
                if (sp && (size_t)(sp - p) + 4 <= n)
                        x->status = strtol(sp + 1, NULL, 10);
                return n;
        }
        const char *colon = memchr(p, ':', n);
        if (!colon)
                return n;
        size_t kn = (size_t)(colon - p), vn = n - kn - 1;
        const char *v = colon + 1;
        if (kn == 12 && strncasecmp(p, "Content-Type", kn) == 0) {
                free(x->content_type);
                x->content_type = trimmed(v, vn);
        } else if (kn == 21 && strncasecmp(p, "Docker-Content-Digest", kn) == 0) {
                free(x->docker_digest);
                x->docker_digest = trimmed(v, vn);
        } else if (kn == 16 && strncasecmp(p, "WWW-Authenticate", kn) == 0 && vn < CHALLENGE_MAX) {
                _cleanup_free_ char *c = trimmed(v, vn);
                if (strncasecmp(c, "Bearer ", 7) == 0 && !x->bearer)
                        x->bearer = steal_pointer(&c);
                else if (strncasecmp(c, "Basic", 5) == 0 && (c[5] == ' ' || !c[5]))
                        x->basic = true;
        } else if (kn == 14 && strncasecmp(p, "Content-Length", kn) == 0 && ok_status(x->status) &&
                   x->out) {
                _cleanup_free_ char *c = trimmed(v, vn);
                x->out->total = strtoull(c, NULL, 10);
        }
        return n;
}

static size_t on_body(char *p, size_t size, size_t nmemb, void *user)
{
        xfer *x = user;
        size_t n = size * nmemb;
        if (!ok_status(x->status)) {
                size_t room = ERR_BODY_MAX - x->err_body.n;
                ab_buf_add(&x->err_body, p, n < room ? n : room);
                return n;
        }
        sink *s = x->out;
        if (s->max && (n > s->max || s->done > s->max - n)) {
                x->too_big = true;
                return 0; /* curl fails with CURLE_WRITE_ERROR */
        }
        if (s->buf) {
                ab_buf_add(s->buf, p, n);
        } else {
                if (EVP_DigestUpdate(s->md, p, n) != 1) {
                        x->write_errno = EIO;
                        return 0;
                }
                int r = ab_write_all(s->fd, p, n);
                if (r < 0) {
                        x->write_errno = -r;
                        return 0;
                }
        }
        s->done += n;
        if (s->fn)
                s->fn(s->ud, s->done, s->total);
        return n;
}

/* ---- session ------------------------------------------------------------- */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_init(void)
{
        curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static bool same_registry(const char *configured, const char *domain)
{
        if (strcmp(configured, domain) == 0)
                return true;
        static const char *const hub[] = {"docker.io", "index.docker.io", "registry-1.docker.io"};
        bool a = false, b = false;
        for (size_t i = 0; i < AB_ARRAY_LEN(hub); i++) {
                a = a || strcmp(configured, hub[i]) == 0;
                b = b || strcmp(domain, hub[i]) == 0;
        }
        return a && b;
}

void ab_registry_free(ab_registry *r)
{
        if (!r)
                return;
        if (r->curl)
                curl_easy_cleanup(r->curl);
        free(r->domain);
        free(r->path);
        free(r->base);
        free(r->user);
        if (r->pass)
                explicit_bzero(r->pass, strlen(r->pass));
        free(r->pass);
        if (r->token)
                explicit_bzero(r->token, strlen(r->token));
        free(r->token);
        free(r);
}

int ab_registry_open(const ab_registry_opts *opts, const ab_image_ref *ref, ab_registry **out,
                     ab_err **err)
{
        *out = NULL;
        pthread_once(&curl_once, curl_init);
        if (curl_init_rc != CURLE_OK)
                return ab_err_set(err, AB_E_INTERNAL, 0, "libcurl initialisation failed");
        static const ab_registry_opts none = {0};
        if (!opts)
                opts = &none;
        ab_registry *r = xzalloc(sizeof(*r));
        r->domain = xstrdup(ref->domain);
        r->path = xstrdup(ref->path);
        r->plain_http = ab_image_ref_is_loopback(ref->domain);
        for (const char *const *p = opts->insecure; p && *p && !r->plain_http; p++)
                r->plain_http = strcmp(*p, ref->domain) == 0;
        r->base =
            xasprintf("%s://%s", r->plain_http ? "http" : "https", ab_image_ref_api_host(ref));
        for (size_t i = 0; i < opts->n_creds; i++) {
                const ab_registry_cred *c = &opts->creds[i];
                if (c->registry && c->username && c->password &&
                    same_registry(c->registry, ref->domain)) {
                        r->user = xstrdup(c->username);
                        r->pass = xstrdup(c->password);
                        break;
                }
        }
        r->check_addrs = opts->check_addrs;
        r->allow_loopback = opts->allow_loopback;
        r->connect_s = opts->connect_timeout_s > 0 ? opts->connect_timeout_s : DEFAULT_CONNECT;
        r->stall_s = opts->stall_timeout_s > 0 ? opts->stall_timeout_s : DEFAULT_STALL;
        r->curl = curl_easy_init();
        if (!r->curl) {
                ab_registry_free(r);
                return ab_err_set(err, AB_E_INTERNAL, 0, "libcurl handle creation failed");
        }
        *out = r;
        return 0;
}

/* ---- requests ------------------------------------------------------------ */

/* Every socket curl opens (the registry, redirects, the token realm) is for
 * an address it resolved itself: checking it here leaves no gap between the
 * check and the connect. */
static curl_socket_t on_open_socket(void *user, curlsocktype purpose, struct curl_sockaddr *a)
{
        ab_registry *r = user;
        (void)purpose;
        const struct sockaddr *sa = &a->addr;
        const char *why = ab_addr_reason(sa);
        if (why && r->allow_loopback && ab_addr_fixed_reason(sa) &&
            strcmp(ab_addr_fixed_reason(sa), "loopback") == 0)
                why = NULL;
        if (why) {
                char as[INET6_ADDRSTRLEN] = "?";
                if (sa->sa_family == AF_INET)
                        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, as,
                                  sizeof(as));
                else if (sa->sa_family == AF_INET6)
                        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, as,
                                  sizeof(as));
                snprintf(r->blocked, sizeof(r->blocked), "%s (%s)", as, why);
                return CURL_SOCKET_BAD;
        }
        int fd = socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
        return fd < 0 ? CURL_SOCKET_BAD : fd;
}

/* Options of one GET; basic credentials only when `basic`. */
static int set_options(ab_registry *r, const char *url, struct curl_slist *headers, xfer *x,
                       bool basic)
{
        CURL *c = r->curl;
        curl_easy_reset(c);
        r->errbuf[0] = '\0';
        const char *redir = r->plain_http ? "http,https" : "https";
        bool ok = curl_easy_setopt(c, CURLOPT_URL, url) == CURLE_OK;
#if LIBCURL_VERSION_NUM >= 0x075500
        ok = ok && curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https") == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, redir) == CURLE_OK;
#else
        ok = ok &&
             curl_easy_setopt(c, CURLOPT_PROTOCOLS, CURLPROTO_HTTP | CURLPROTO_HTTPS) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS,
                                    r->plain_http ? CURLPROTO_HTTP | CURLPROTO_HTTPS
                                                  : CURLPROTO_HTTPS) == CURLE_OK;
        (void)redir;
#endif
        ok = ok && curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_MAXREDIRS, (long)MAX_REDIRS) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_NETRC, (long)CURL_NETRC_IGNORED) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, r->connect_s) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, r->stall_s) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_HTTPGET, 1L) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_USERAGENT, "agentbox/" AGENTBOX_VERSION) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_WRITEDATA, x) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_HEADERDATA, x) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_ERRORBUFFER, r->errbuf) == CURLE_OK;
        r->blocked[0] = '\0';
        if (r->check_addrs) {
                ok = ok &&
                     curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, on_open_socket) == CURLE_OK;
                ok = ok && curl_easy_setopt(c, CURLOPT_OPENSOCKETDATA, r) == CURLE_OK;
        }
        if (basic) {
                /* Sent to this host only: curl drops them on a redirect elsewhere. */
                ok = ok && curl_easy_setopt(c, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC) == CURLE_OK;
                ok = ok && curl_easy_setopt(c, CURLOPT_USERNAME, r->user) == CURLE_OK;
                ok = ok && curl_easy_setopt(c, CURLOPT_PASSWORD, r->pass) == CURLE_OK;
        }
        return ok ? 0 : -EINVAL;
}

/* A failed transfer as an error: unreachable, too slow, too big, or the fd. */
static int transfer_error(ab_registry *r, CURLcode rc, xfer *x, const char *what, ab_err **err)
{
        if (x->too_big)
                return ab_err_set(err, AB_E_LIMIT, 0, "registry %s: %s is larger than %llu bytes",
                                  r->domain, what, (unsigned long long)x->out->max);
        if (x->write_errno) {
                int e = x->write_errno;
                return ab_err_set(err, e == ENOSPC || e == EDQUOT ? AB_E_STORAGE : AB_E_INTERNAL, e,
                                  "registry %s: writing %s failed", r->domain, what);
        }
        if (r->blocked[0])
                return ab_err_set(err, AB_E_PERMISSION, 0,
                                  "registry %s: %s: the connection to %s is not allowed for "
                                  "pulls with an API key",
                                  r->domain, what, r->blocked);
        const char *why = r->errbuf[0] ? r->errbuf : curl_easy_strerror(rc);
        if (rc == CURLE_OPERATION_TIMEDOUT)
                return ab_err_set(err, AB_E_UNAVAILABLE, 0,
                                  "registry %s timed out while sending %s (%s)", r->domain, what,
                                  why);
        if (rc == CURLE_TOO_MANY_REDIRECTS || rc == CURLE_UNSUPPORTED_PROTOCOL)
                return ab_err_set(err, AB_E_UNAVAILABLE, 0,
                                  "registry %s: %s: refused redirect (%s; at most %d, never from "
                                  "https to http)",
                                  r->domain, what, why, MAX_REDIRS);
        return ab_err_set(err, AB_E_UNAVAILABLE, 0, "registry %s cannot be reached for %s: %s",
                          r->domain, what, why);
}

/* The first "code" of the registry's {"errors":[{"code":...}]} body, or NULL. */
static char *registry_error_code(const ab_buf *b)
{
        if (!b->n)
                return NULL;
        json_t *j = json_loadb(b->p, b->n, 0, NULL);
        json_t *e = json_array_get(json_object_get(j, "errors"), 0);
        json_t *c = json_object_get(e, "code");
        char *code = NULL;
        if (json_is_string(c) && strlen(json_string_value(c)) < 64) {
                code = xstrdup(json_string_value(c));
                for (char *p = code; *p; p++)
                        if (!((*p >= 'A' && *p <= 'Z') || *p == '_'))
                                *p = '?';
        }
        json_decref(j);
        return code;
}

/* A non-2xx answer (after auth was tried) as an error. */
static int status_error(ab_registry *r, xfer *x, const char *what, ab_err **err)
{
        _cleanup_free_ char *code = registry_error_code(&x->err_body);
        char why[96];
        snprintf(why, sizeof(why), "HTTP %ld%s%s", x->status, code ? ", " : "", code ? code : "");
        bool unknown =
            code && (strcmp(code, "MANIFEST_UNKNOWN") == 0 || strcmp(code, "NAME_UNKNOWN") == 0 ||
                     strcmp(code, "BLOB_UNKNOWN") == 0);
        if (x->status == 404 || unknown)
                return ab_err_set(err, AB_E_NOT_FOUND, 0, "registry %s: %s not found (%s)",
                                  r->domain, what, why);
        if (x->status == 401 || x->status == 403 ||
            (code && (strcmp(code, "DENIED") == 0 || strcmp(code, "UNAUTHORIZED") == 0)))
                return ab_err_set(err, AB_E_PERMISSION, 0,
                                  "registry %s refused access to %s (%s)%s", r->domain, what, why,
                                  r->user ? ": check the credentials configured for it"
                                          : ": it may need credentials");
        return ab_err_set(err, AB_E_UNAVAILABLE, 0, "registry %s: %s failed (%s)", r->domain, what,
                          why);
}

/* One parameter of a challenge: key="quoted\"value" or key=token. */
static char *challenge_param(const char *c, const char *key)
{
        size_t kn = strlen(key);
        const char *p = c;
        /* Skip the scheme. */
        p += strcspn(p, " ");
        while (*p) {
                p += strspn(p, " \t,");
                const char *k = p;
                p += strcspn(p, "= \t,");
                size_t n = (size_t)(p - k);
                if (*p != '=')
                        continue;
                p++;
                ab_buf v = {0};
                if (*p == '"') {
                        for (p++; *p && *p != '"'; p++) {
                                if (*p == '\\' && p[1])
                                        p++;
                                ab_buf_putc(&v, *p);
                        }
                        if (*p == '"')
                                p++;
                } else {
                        size_t m = strcspn(p, " \t,");
                        ab_buf_add(&v, p, m);
                        p += m;
                }
                if (n == kn && strncasecmp(k, key, kn) == 0)
                        return ab_buf_steal(&v);
                ab_buf_free(&v);
        }
        return NULL;
}

static void append_query(ab_buf *url, CURL *c, const char *key, const char *val, bool *first)
{
        char *e = curl_easy_escape(c, val, 0);
        if (!e)
                abort();
        ab_buf_printf(url, "%s%s=%s", *first ? "" : "&", key, e);
        curl_free(e);
        *first = false;
}

/* A token is sent in a header: printable ASCII without blanks only. */
static bool token_valid(const char *t)
{
        size_t n = strlen(t);
        if (n == 0 || n > TOKEN_MAX)
                return false;
        for (size_t i = 0; i < n; i++)
                if (t[i] <= 0x20 || t[i] >= 0x7f)
                        return false;
        return true;
}

/* Answers a Bearer challenge: GET realm?service=&scope= (with basic
 * credentials when configured) and caches the token. */
static int fetch_token(ab_registry *r, const char *challenge, ab_err **err)
{
        _cleanup_free_ char *realm = challenge_param(challenge, "realm");
        _cleanup_free_ char *service = challenge_param(challenge, "service");
        _cleanup_free_ char *scope = challenge_param(challenge, "scope");
        bool https = realm && strncasecmp(realm, "https://", 8) == 0;
        bool http = realm && strncasecmp(realm, "http://", 7) == 0;
        if (!https && !(http && r->plain_http))
                return ab_err_set(err, AB_E_UNAVAILABLE, 0,
                                  "registry %s asked for a token from %s, which is not an %s URL",
                                  r->domain, realm ? "a realm" : "no realm",
                                  r->plain_http ? "http(s)" : "https");
        _cleanup_buf_ ab_buf url = {0};
        ab_buf_puts(&url, realm);
        ab_buf_putc(&url, strchr(realm, '?') ? '&' : '?');
        bool first = true;
        if (service)
                append_query(&url, r->curl, "service", service, &first);
        if (scope)
                append_query(&url, r->curl, "scope", scope, &first);
        else {
                _cleanup_free_ char *s = xasprintf("repository:%s:pull", r->path);
                append_query(&url, r->curl, "scope", s, &first);
        }

        _cleanup_buf_ ab_buf body = {0};
        sink s = {.buf = &body, .max = TOKEN_BODY_MAX};
        xfer x = {.out = &s};
        int ret = -1;
        if (set_options(r, url.p, NULL, &x, r->user != NULL) < 0) {
                ret = ab_err_set(err, AB_E_INTERNAL, 0, "libcurl rejected the request options");
                goto out;
        }
        CURLcode rc = curl_easy_perform(r->curl);
        if (rc != CURLE_OK) {
                ret = transfer_error(r, rc, &x, "an auth token", err);
                goto out;
        }
        if (x.status == 401 || x.status == 403) {
                ret = ab_err_set(err, AB_E_PERMISSION, 0,
                                 "registry %s: its token service refused %s (HTTP %ld)", r->domain,
                                 r->user ? "the credentials configured for it"
                                         : "anonymous access: it may need credentials",
                                 x.status);
                goto out;
        }
        if (!ok_status(x.status)) {
                ret = ab_err_set(err, AB_E_UNAVAILABLE, 0,
                                 "registry %s: its token service failed (HTTP %ld)", r->domain,
                                 x.status);
                goto out;
        }
        json_t *j = json_loadb(body.p ? body.p : "", body.n, 0, NULL);
        json_t *t = json_object_get(j, "token");
        if (!json_is_string(t) || !*json_string_value(t))
                t = json_object_get(j, "access_token");
        if (!json_is_string(t) || !token_valid(json_string_value(t))) {
                json_decref(j);
                ret = ab_err_set(err, AB_E_UNAVAILABLE, 0,
                                 "registry %s: its token service answered no usable token",
                                 r->domain);
                goto out;
        }
        if (r->token)
                explicit_bzero(r->token, strlen(r->token));
        free(r->token);
        r->token = xstrdup(json_string_value(t));
        json_decref(j);
        r->auth = AUTH_BEARER;
        ret = 0;
out:
        if (body.p)
                explicit_bzero(body.p, body.n);
        xfer_free(&x);
        return ret;
}

/* GETs base + path into out, answering auth challenges. On success x holds
 * the final answer's headers (2xx); the caller frees x. */
static int request(ab_registry *r, const char *path, const char *accept, sink *out, xfer *x,
                   const char *what, ab_err **err)
{
        _cleanup_free_ char *url = xasprintf("%s%s", r->base, path);
        bool answered = false; /* a challenge was answered with fresh credentials */
        for (;;) {
                struct curl_slist *h =
                    curl_slist_append(NULL, "Docker-Distribution-API-Version: registry/2.0");
                if (accept)
                        h = curl_slist_append(h, accept);
                _cleanup_free_ char *bearer = NULL;
                if (r->auth == AUTH_BEARER) {
                        bearer = xasprintf("Authorization: Bearer %s", r->token);
                        h = curl_slist_append(h, bearer);
                }
                if (!h)
                        abort();
                uint64_t done0 = out->done;
                int rc = set_options(r, url, h, x, r->auth == AUTH_BASIC);
                CURLcode cc = rc == 0 ? curl_easy_perform(r->curl) : CURLE_OK;
                curl_easy_setopt(r->curl, CURLOPT_HTTPHEADER, NULL);
                curl_slist_free_all(h);
                if (bearer)
                        explicit_bzero(bearer, strlen(bearer));
                if (rc < 0)
                        return ab_err_set(err, AB_E_INTERNAL, 0,
                                          "libcurl rejected the request options");
                if (cc != CURLE_OK)
                        return transfer_error(r, cc, x, what, err);
                if (ok_status(x->status))
                        return 0;
                if (x->status != 401 || answered || out->done != done0)
                        return status_error(r, x, what, err);
                answered = true;
                if (x->bearer) {
                        _cleanup_free_ char *c = xstrdup(x->bearer);
                        if (fetch_token(r, c, err) < 0)
                                return ab_err_wrap(err, "%s", what);
                } else if (x->basic && r->user) {
                        r->auth = AUTH_BASIC;
                } else {
                        return status_error(r, x, what, err);
                }
                xfer_reset_headers(x);
        }
}

/* A tag or a digest: nothing that could change the URL's meaning. */
static bool reference_valid(const char *s)
{
        if (ab_digest_valid(s))
                return true;
        size_t n = strlen(s);
        if (n == 0 || n > 128 || s[0] == '.' || s[0] == '-')
                return false;
        for (size_t i = 0; i < n; i++)
                if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
                      (s[i] >= '0' && s[i] <= '9') || s[i] == '_' || s[i] == '.' || s[i] == '-'))
                        return false;
        return true;
}

static char *hex_digest(EVP_MD_CTX *md)
{
        unsigned char d[EVP_MAX_MD_SIZE];
        unsigned int n = 0;
        if (EVP_DigestFinal_ex(md, d, &n) != 1 || n != 32)
                return NULL;
        char *s = xmalloc(7 + 64 + 1);
        memcpy(s, "sha256:", 7);
        ab_hex_encode(d, 32, s + 7);
        return s;
}

static char *sha256_of(const void *p, size_t n)
{
        EVP_MD_CTX *md = EVP_MD_CTX_new();
        if (!md)
                abort();
        char *s = NULL;
        if (EVP_DigestInit_ex(md, EVP_sha256(), NULL) == 1 && EVP_DigestUpdate(md, p, n) == 1)
                s = hex_digest(md);
        EVP_MD_CTX_free(md);
        return s;
}

/* The media type less parameters, or NULL. */
static char *bare_type(const char *ct)
{
        if (!ct || !*ct)
                return NULL;
        size_t n = strcspn(ct, "; \t");
        return n ? xstrndup(ct, n) : NULL;
}

int ab_registry_get_manifest(ab_registry *r, const char *reference, ab_buf *body, char **media_type,
                             char **digest, ab_err **err)
{
        *media_type = *digest = NULL;
        if (!reference || !reference_valid(reference))
                return ab_err_set(err, AB_E_INVALID, 0, "registry %s: '%s' is not a tag or digest",
                                  r->domain, reference ? reference : "");
        bool by_digest = ab_digest_valid(reference);
        _cleanup_free_ char *what =
            xasprintf("manifest %s/%s%s%s", r->domain, r->path, by_digest ? "@" : ":", reference);
        _cleanup_free_ char *path = xasprintf("/v2/%s/manifests/%s", r->path, reference);
        _cleanup_buf_ ab_buf got = {0};
        sink s = {.buf = &got, .max = AB_MANIFEST_MAX_BYTES};
        xfer x = {.out = &s};
        int ret = request(r, path, ACCEPT_MANIFESTS, &s, &x, what, err);
        _cleanup_free_ char *d = NULL;
        if (ret == 0) {
                d = sha256_of(got.p ? got.p : "", got.n);
                if (!d)
                        ret = ab_err_set(err, AB_E_INTERNAL, 0, "sha256 failed");
        }
        if (ret == 0 && by_digest && strcmp(d, reference) != 0)
                ret = ab_err_set(err, AB_E_UNAVAILABLE, 0,
                                 "registry %s sent a %s whose bytes have digest %s", r->domain,
                                 what, d);
        if (ret == 0 && x.docker_digest && strncmp(x.docker_digest, "sha256:", 7) == 0 &&
            strcmp(x.docker_digest, d) != 0)
                ret = ab_err_set(err, AB_E_UNAVAILABLE, 0,
                                 "registry %s sent a %s whose bytes do not match its "
                                 "Docker-Content-Digest",
                                 r->domain, what);
        if (ret == 0) {
                json_t *j = json_loadb(got.p ? got.p : "", got.n, 0, NULL);
                if (!json_is_object(j))
                        ret = ab_err_set(err, AB_E_UNAVAILABLE, 0,
                                         "registry %s sent a %s that is not a JSON document",
                                         r->domain, what);
                json_decref(j);
        }
        if (ret == 0) {
                *media_type = bare_type(x.content_type);
                *digest = steal_pointer(&d);
                ab_buf_free(body);
                *body = got;
                memset(&got, 0, sizeof(got));
        }
        xfer_free(&x);
        return ret;
}

int ab_registry_get_blob(ab_registry *r, const char *digest, int fd, uint64_t max_bytes,
                         ab_registry_progress_fn fn, void *ud, ab_err **err)
{
        if (!digest || !ab_digest_valid(digest))
                return ab_err_set(err, AB_E_INVALID, 0, "registry %s: '%s' is not a sha256 digest",
                                  r->domain, digest ? digest : "");
        _cleanup_free_ char *what = xasprintf("blob %s/%s@%s", r->domain, r->path, digest);
        _cleanup_free_ char *path = xasprintf("/v2/%s/blobs/%s", r->path, digest);
        sink s = {.fd = fd, .max = max_bytes, .fn = fn, .ud = ud};
        s.md = EVP_MD_CTX_new();
        if (!s.md)
                abort();
        xfer x = {.out = &s};
        int ret = -1;
        if (EVP_DigestInit_ex(s.md, EVP_sha256(), NULL) != 1)
                ret = ab_err_set(err, AB_E_INTERNAL, 0, "sha256 initialisation failed");
        else
                ret = request(r, path, NULL, &s, &x, what, err);
        if (ret == 0) {
                _cleanup_free_ char *d = hex_digest(s.md);
                if (!d || strcmp(d, digest) != 0)
                        ret = ab_err_set(err, AB_E_UNAVAILABLE, 0,
                                         "registry %s sent a %s whose bytes have digest %s",
                                         r->domain, what, d ? d : "(none)");
        }
        EVP_MD_CTX_free(s.md);
        xfer_free(&x);
        return ret;
}

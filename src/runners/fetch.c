/* fetch.c - httpRequest for code-runner snippets (seed 003, 3.4) on libcurl.
 *
 * Per hop: parse the URL (http/https only), refuse metadata host names,
 * resolve the name ourselves, refuse when ANY answer is internal, then pin
 * curl to the first answer with CURLOPT_CONNECT_TO so curl never resolves the
 * name itself (no DNS-rebinding window). An opensocket callback re-checks the
 * address curl is about to connect to, so a pin that somehow did not apply
 * cannot reach anything else. Redirects are followed here, not by curl, so
 * each hop goes through the same checks. */
#include "runners/fetch.h"
#include "base/buf.h"
#include "base/addrcheck.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <strings.h>
#include <sys/socket.h>

#define DEFAULT_MAX_REQUEST    ((size_t)5 * 1024 * 1024)
#define DEFAULT_MAX_RESPONSE   ((size_t)10 * 1024 * 1024)
#define DEFAULT_MAX_TIMEOUT_MS 10000L
#define DEFAULT_MAX_REDIRECTS  5
#define MAX_URL_LEN            8192
#define MAX_REQ_HEADER_BYTES   ((size_t)64 * 1024)
#define MAX_RES_HEADER_BYTES   ((size_t)256 * 1024)

/* ---- address policy: base/addrcheck.h ---- */

bool ab_fetch_addr_allowed(const struct sockaddr *sa)
{
        return ab_addr_reason(sa) == NULL;
}

static void addr_str(const struct sockaddr *sa, char *buf, size_t len)
{
        const void *a = sa->sa_family == AF_INET6
                            ? (const void *)&((const struct sockaddr_in6 *)sa)->sin6_addr
                            : (const void *)&((const struct sockaddr_in *)sa)->sin_addr;
        if (!inet_ntop(sa->sa_family, a, buf, (socklen_t)len))
                snprintf(buf, len, "?");
}

static bool same_addr(const struct sockaddr *a, const struct sockaddr *b)
{
        if (a->sa_family != b->sa_family)
                return false;
        if (a->sa_family == AF_INET) {
                const struct sockaddr_in *x = (const void *)a, *y = (const void *)b;
                return x->sin_addr.s_addr == y->sin_addr.s_addr && x->sin_port == y->sin_port;
        }
        if (a->sa_family == AF_INET6) {
                const struct sockaddr_in6 *x = (const void *)a, *y = (const void *)b;
                return memcmp(&x->sin6_addr, &y->sin6_addr, sizeof(x->sin6_addr)) == 0 &&
                       x->sin6_port == y->sin6_port;
        }
        return false;
}

/* ---- URL ---- */

typedef struct {
        char *scheme; /* "http" or "https" */
        char *host;   /* without IPv6 brackets */
        char *port;
} url_parts;

static void url_parts_clear(url_parts *p)
{
        free(p->scheme);
        free(p->host);
        free(p->port);
        memset(p, 0, sizeof(*p));
}

static char *url_get(CURLU *u, CURLUPart part, unsigned flags)
{
        char *v = NULL;
        if (curl_url_get(u, part, &v, flags) != CURLUE_OK || !v)
                return NULL;
        char *r = xstrdup(v);
        curl_free(v);
        return r;
}

static int parse_url(const char *url, url_parts *p, ab_err **err)
{
        memset(p, 0, sizeof(*p));
        if (strlen(url) > MAX_URL_LEN)
                return ab_err_set(err, AB_E_INVALID, 0, "URL is longer than %d bytes", MAX_URL_LEN);
        CURLU *u = curl_url();
        if (!u)
                abort();
        /* Accept any scheme syntactically so a refusal can name it. */
        CURLUcode rc = curl_url_set(u, CURLUPART_URL, url, CURLU_NON_SUPPORT_SCHEME);
        if (rc != CURLUE_OK) {
                curl_url_cleanup(u);
                return ab_err_set(err, AB_E_INVALID, 0, "Invalid URL '%.200s': %s", url,
                                  curl_url_strerror(rc));
        }
        p->scheme = url_get(u, CURLUPART_SCHEME, 0);
        if (!p->scheme || (strcasecmp(p->scheme, "http") != 0 && strcasecmp(p->scheme, "https"))) {
                int r = ab_err_set(err, AB_E_INVALID, 0,
                                   "Only http and https URLs are allowed (got '%s:')",
                                   p->scheme ? p->scheme : "");
                curl_url_cleanup(u);
                url_parts_clear(p);
                return r;
        }
#ifdef CURLU_PUNYCODE
        p->host = url_get(u, CURLUPART_HOST, CURLU_PUNYCODE);
#else
        p->host = url_get(u, CURLUPART_HOST, 0);
#endif
        p->port = url_get(u, CURLUPART_PORT, CURLU_DEFAULT_PORT);
        curl_url_cleanup(u);
        if (!p->host || !*p->host || !p->port) {
                url_parts_clear(p);
                return ab_err_set(err, AB_E_INVALID, 0, "Invalid URL '%.200s': no host", url);
        }
        size_t n = strlen(p->host);
        if (n >= 2 && p->host[0] == '[' && p->host[n - 1] == ']') {
                memmove(p->host, p->host + 1, n - 2);
                p->host[n - 2] = '\0';
        }
        return 0;
}

/* ---- resolution ---- */

/* Resolves host, refuses when any answer is internal, and returns the first
 * answer (with the URL's port) in *pin. */
static int resolve_checked(const ab_fetch_req *req, const url_parts *u,
                           struct sockaddr_storage *pin, ab_err **err)
{
        const char *name_why = ab_name_reason(u->host);
        if (name_why)
                return ab_err_set(err, AB_E_PERMISSION, 0, "Requests to %s (%s) are not allowed",
                                  u->host, name_why);
        /* An address literal (in any form inet_aton takes) is never looked up. */
        struct addrinfo hints = {.ai_family = AF_UNSPEC,
                                 .ai_socktype = SOCK_STREAM,
                                 .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV};
        struct addrinfo *res = NULL;
        int rc = getaddrinfo(u->host, u->port, &hints, &res);
        if (rc != 0) {
                hints.ai_flags = AI_NUMERICSERV;
                rc = req->resolve ? req->resolve(u->host, u->port, &res)
                                  : getaddrinfo(u->host, u->port, &hints, &res);
        }
        if (rc != 0 || !res) {
                if (res)
                        freeaddrinfo(res);
                return ab_err_set(err, AB_E_UNAVAILABLE, 0, "Cannot resolve host '%s': %s", u->host,
                                  rc ? gai_strerror(rc) : "no address");
        }
        int r = 0;
        const struct addrinfo *first = NULL;
        for (const struct addrinfo *ai = res; ai; ai = ai->ai_next) {
                const char *why = ai->ai_addr ? ab_addr_reason(ai->ai_addr) : "no address";
                if (!why) {
                        if (!first)
                                first = ai;
                        continue;
                }
                char a[INET6_ADDRSTRLEN] = "?";
                if (ai->ai_addr &&
                    (ai->ai_addr->sa_family == AF_INET || ai->ai_addr->sa_family == AF_INET6))
                        addr_str(ai->ai_addr, a, sizeof(a));
                if (strcasecmp(a, u->host) == 0)
                        r = ab_err_set(err, AB_E_PERMISSION, 0,
                                       "Requests to internal address %s (%s) are not allowed", a,
                                       why);
                else
                        r = ab_err_set(err, AB_E_PERMISSION, 0,
                                       "Requests to %s are not allowed: it resolves to internal "
                                       "address %s (%s)",
                                       u->host, a, why);
                break;
        }
        if (r == 0) {
                /* every answer was checked, so first is set */
                size_t len = first->ai_family == AF_INET ? sizeof(struct sockaddr_in)
                                                         : sizeof(struct sockaddr_in6);
                memset(pin, 0, sizeof(*pin));
                memcpy(pin, first->ai_addr, len);
                uint16_t port = htons((uint16_t)atoi(u->port));
                if (pin->ss_family == AF_INET)
                        ((struct sockaddr_in *)pin)->sin_port = port;
                else
                        ((struct sockaddr_in6 *)pin)->sin6_port = port;
        }
        freeaddrinfo(res);
        return r;
}

/* ---- request headers ---- */

static bool token_char(unsigned char c)
{
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* Headers curl owns (framing, connection) or that talk to a proxy: silently
 * dropped like a browser's fetch() does, so they cannot desynchronise the
 * request or override the pinned target's Host. */
static bool forbidden_header(const char *name)
{
        static const char *const names[] = {
            "host",       "content-length", "transfer-encoding",
            "connection", "keep-alive",     "upgrade",
            "te",         "trailer",        "expect",
        };
        if (strncasecmp(name, "proxy-", 6) == 0)
                return true;
        for (size_t i = 0; i < AB_ARRAY_LEN(names); i++)
                if (strcasecmp(name, names[i]) == 0)
                        return true;
        return false;
}

/* Credentials are not forwarded to another origin after a redirect. */
static bool credential_header(const char *name)
{
        return strcasecmp(name, "authorization") == 0 || strcasecmp(name, "cookie") == 0;
}

static int header_value(const char *name, json_t *v, char **out, ab_err **err)
{
        if (json_is_string(v)) {
                const char *s = json_string_value(v);
                size_t n = json_string_length(v);
                for (size_t i = 0; i < n; i++)
                        if (s[i] == '\r' || s[i] == '\n' || s[i] == '\0')
                                return ab_err_set(err, AB_E_INVALID, 0,
                                                  "Header '%s' has a line break or NUL in its "
                                                  "value",
                                                  name);
                *out = xstrndup(s, n);
        } else if (json_is_integer(v)) {
                *out = xasprintf("%" JSON_INTEGER_FORMAT, json_integer_value(v));
        } else if (json_is_real(v)) {
                *out = xasprintf("%.17g", json_real_value(v));
        } else if (json_is_boolean(v)) {
                *out = xstrdup(json_is_true(v) ? "true" : "false");
        } else {
                return ab_err_set(err, AB_E_INVALID, 0, "Header '%s' must be a string", name);
        }
        return 0;
}

/* Validates req->headers and builds curl's list ("Expect:" stops the
 * 100-continue round trip). */
static int build_headers(json_t *headers, bool drop_credentials, struct curl_slist **out,
                         ab_err **err)
{
        struct curl_slist *l = curl_slist_append(NULL, "Expect:");
        if (!l)
                abort();
        *out = l;
        if (!headers)
                return 0;
        if (!json_is_object(headers))
                return ab_err_set(err, AB_E_INVALID, 0, "headers must be an object of strings");
        size_t total = 0;
        const char *name;
        json_t *v;
        json_object_foreach(headers, name, v)
        {
                if (!*name)
                        return ab_err_set(err, AB_E_INVALID, 0, "Header name is empty");
                for (const char *c = name; *c; c++)
                        if (!token_char((unsigned char)*c))
                                return ab_err_set(err, AB_E_INVALID, 0,
                                                  "Header name '%.64s' has an invalid character",
                                                  name);
                _cleanup_free_ char *val = NULL;
                if (header_value(name, v, &val, err) < 0)
                        return -1;
                total = xadd(total, xadd(strlen(name), strlen(val) + 4));
                if (total > MAX_REQ_HEADER_BYTES)
                        return ab_err_set(err, AB_E_LIMIT, 0,
                                          "Request headers are larger than %zu bytes",
                                          MAX_REQ_HEADER_BYTES);
                if (forbidden_header(name) || (drop_credentials && credential_header(name)))
                        continue;
                /* "Name;" is curl's way to send a header with an empty value. */
                _cleanup_free_ char *line =
                    *val ? xasprintf("%s: %s", name, val) : xasprintf("%s;", name);
                l = curl_slist_append(l, line);
                if (!l)
                        abort();
                *out = l;
        }
        return 0;
}

/* ---- one transfer ---- */

typedef struct {
        size_t max_response;
        ab_buf body;
        bool body_too_big, headers_too_big;
        size_t header_bytes;
        long status;
        char *redirect_url; /* where a 3xx points, absolute */
        char *status_text;
        json_t *headers;
        char *last_name; /* for folded header lines */
        struct sockaddr_storage pin;
        bool blocked;
        char blocked_addr[INET6_ADDRSTRLEN];
        const char *blocked_why;
} xfer;

static void xfer_clear(xfer *x)
{
        ab_buf_free(&x->body);
        free(x->status_text);
        json_decref(x->headers);
        free(x->last_name);
        free(x->redirect_url);
        memset(x, 0, sizeof(*x));
}

static size_t on_body(char *p, size_t size, size_t n, void *user)
{
        xfer *x = user;
        size_t len = size * n;
        if (len > x->max_response - x->body.n) {
                x->body_too_big = true;
                return 0; /* not len: curl aborts with CURLE_WRITE_ERROR */
        }
        ab_buf_add(&x->body, p, len);
        return len;
}

static char *trimmed(const char *s, size_t n)
{
        while (n > 0 && (*s == ' ' || *s == '\t')) {
                s++;
                n--;
        }
        while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t'))
                n--;
        return xstrndup(s, n);
}

/* json_string() refuses invalid UTF-8: such a value keeps its ASCII and loses
 * the rest rather than the whole header. */
static void utf8_or_ascii(char *s)
{
        json_t *j = json_string(s);
        if (!j)
                for (; *s; s++)
                        if ((unsigned char)*s >= 0x80)
                                *s = '?';
        json_decref(j);
}

static void add_header(xfer *x, const char *name, const char *value, const char *sep)
{
        json_t *old = json_object_get(x->headers, name);
        if (old) {
                _cleanup_free_ char *j = xasprintf("%s%s%s", json_string_value(old), sep, value);
                json_object_set_new(x->headers, name, json_string(j));
        } else {
                json_object_set_new(x->headers, name, json_string(value));
        }
}

static size_t on_header(char *p, size_t size, size_t n, void *user)
{
        xfer *x = user;
        size_t len = size * n;
        x->header_bytes += len;
        if (x->header_bytes > MAX_RES_HEADER_BYTES) {
                x->headers_too_big = true;
                return 0;
        }
        size_t l = len;
        while (l > 0 && (p[l - 1] == '\r' || p[l - 1] == '\n'))
                l--;
        if (l == 0)
                return len;
        if (l >= 5 && memcmp(p, "HTTP/", 5) == 0) {
                /* A new response (after 1xx, or the next hop): start over. */
                json_object_clear(x->headers);
                free(x->last_name);
                x->last_name = NULL;
                /* "HTTP/1.1 200 OK": the reason is what follows the code. */
                const char *e = p + l, *s = memchr(p, ' ', l);
                s = s ? s + 1 : e;
                while (s < e && *s != ' ')
                        s++;
                free(x->status_text);
                x->status_text = trimmed(s, (size_t)(e - s));
                utf8_or_ascii(x->status_text);
                return len;
        }
        if (p[0] == ' ' || p[0] == '\t') {
                if (x->last_name) {
                        _cleanup_free_ char *v = trimmed(p, l);
                        add_header(x, x->last_name, v, " ");
                }
                return len;
        }
        const char *colon = memchr(p, ':', l);
        if (!colon || colon == p)
                return len;
        _cleanup_free_ char *name = trimmed(p, (size_t)(colon - p));
        for (char *c = name; *c; c++)
                if (*c >= 'A' && *c <= 'Z')
                        *c = (char)(*c - 'A' + 'a');
        _cleanup_free_ char *value = trimmed(colon + 1, (size_t)(p + l - colon - 1));
        utf8_or_ascii(name);
        utf8_or_ascii(value);
        add_header(x, name, value, ", ");
        free(x->last_name);
        x->last_name = steal_pointer(&name);
        return len;
}

static curl_socket_t on_open_socket(void *user, curlsocktype purpose, struct curl_sockaddr *a)
{
        xfer *x = user;
        const struct sockaddr *sa = &a->addr;
        const char *why = ab_addr_reason(sa);
        if (why || !same_addr(sa, (const struct sockaddr *)&x->pin)) {
                x->blocked = true;
                x->blocked_why = why ? why : "not the address that was checked";
                if (sa->sa_family == AF_INET || sa->sa_family == AF_INET6)
                        addr_str(sa, x->blocked_addr, sizeof(x->blocked_addr));
                else
                        snprintf(x->blocked_addr, sizeof(x->blocked_addr), "?");
                return CURL_SOCKET_BAD;
        }
        int fd = socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
        return fd < 0 ? CURL_SOCKET_BAD : fd;
}

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_init(void)
{
        /* Never cleaned up: other threads may fetch at any time. */
        curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

typedef struct {
        const char *url;
        const char *method;
        const char *body; /* NULL: none */
        size_t body_len;
        struct curl_slist *headers;
        long timeout_ms;       /* what is left of the whole request's */
        long total_timeout_ms; /* for messages */
} hop_req;

static int set_options(CURL *c, const hop_req *h, xfer *x, struct curl_slist *connect_to,
                       char *errbuf)
{
        bool ok = curl_easy_setopt(c, CURLOPT_URL, h->url) == CURLE_OK;
#if LIBCURL_VERSION_NUM >= 0x075500
        ok = ok && curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https") == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https") == CURLE_OK;
#else
        ok = ok &&
             curl_easy_setopt(c, CURLOPT_PROTOCOLS, CURLPROTO_HTTP | CURLPROTO_HTTPS) == CURLE_OK;
#endif
        ok = ok && curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_PROXY, "") == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_NETRC, (long)CURL_NETRC_IGNORED) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_CONNECT_TO, connect_to) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, on_open_socket) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_OPENSOCKETDATA, x) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, h->timeout_ms) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, h->timeout_ms) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_HTTPHEADER, h->headers) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_USERAGENT, "agentbox/" AGENTBOX_VERSION) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_ACCEPT_ENCODING, "") == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)x->max_response) ==
                       CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_WRITEDATA, x) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_HEADERDATA, x) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf) == CURLE_OK;
        if (strcmp(h->method, "GET") == 0) {
                ok = ok && curl_easy_setopt(c, CURLOPT_HTTPGET, 1L) == CURLE_OK;
        } else if (strcmp(h->method, "HEAD") == 0) {
                ok = ok && curl_easy_setopt(c, CURLOPT_NOBODY, 1L) == CURLE_OK;
        } else {
                if (strcmp(h->method, "POST") != 0)
                        ok =
                            ok && curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, h->method) == CURLE_OK;
                if (h->body || strcmp(h->method, "POST") == 0) {
                        ok = ok && curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE,
                                                    (curl_off_t)h->body_len) == CURLE_OK;
                        ok = ok && curl_easy_setopt(c, CURLOPT_POSTFIELDS,
                                                    h->body ? h->body : "") == CURLE_OK;
                }
        }
        return ok ? 0 : -1;
}

/* Makes one request to the pinned address; fills x. */
static int fetch_once(const hop_req *h, const url_parts *u, xfer *x, ab_err **err)
{
        char pin[INET6_ADDRSTRLEN];
        addr_str((const struct sockaddr *)&x->pin, pin, sizeof(pin));
        /* Empty host and port match every connection this handle makes. */
        _cleanup_free_ char *ct = x->pin.ss_family == AF_INET6
                                      ? xasprintf("::[%s]:%s", pin, u->port)
                                      : xasprintf("::%s:%s", pin, u->port);
        struct curl_slist *connect_to = curl_slist_append(NULL, ct);
        if (!connect_to)
                abort();
        CURL *c = curl_easy_init();
        if (!c) {
                curl_slist_free_all(connect_to);
                return ab_err_set(err, AB_E_INTERNAL, 0, "libcurl handle creation failed");
        }
        char errbuf[CURL_ERROR_SIZE] = "";
        int r = 0;
        if (set_options(c, h, x, connect_to, errbuf) < 0) {
                r = ab_err_set(err, AB_E_INTERNAL, 0, "libcurl rejected the request options");
                goto out;
        }
        CURLcode rc = curl_easy_perform(c);
        if (x->blocked)
                r = ab_err_set(err, AB_E_PERMISSION, 0,
                               "Requests to %s are not allowed: connection to %s (%s) refused",
                               u->host, x->blocked_addr, x->blocked_why);
        else if (x->body_too_big || rc == CURLE_FILESIZE_EXCEEDED)
                r = ab_err_set(err, AB_E_LIMIT, 0,
                               "Response from %s is larger than the limit of %zu bytes", u->host,
                               x->max_response);
        else if (x->headers_too_big)
                r = ab_err_set(err, AB_E_LIMIT, 0,
                               "Response headers from %s are larger than %zu bytes", u->host,
                               MAX_RES_HEADER_BYTES);
        else if (rc == CURLE_OPERATION_TIMEDOUT)
                r = ab_err_set(err, AB_E_TIMEOUT, 0, "Request to %s timed out after %ldms", u->host,
                               h->total_timeout_ms);
        else if (rc == CURLE_UNSUPPORTED_PROTOCOL || rc == CURLE_URL_MALFORMAT)
                r = ab_err_set(err, AB_E_INVALID, 0, "Invalid URL '%.200s': %s", h->url,
                               *errbuf ? errbuf : curl_easy_strerror(rc));
        else if (rc != CURLE_OK)
                r = ab_err_set(err, AB_E_UNAVAILABLE, 0, "Request to %s (%s) failed: %s", u->host,
                               pin, *errbuf ? errbuf : curl_easy_strerror(rc));
        if (r == 0) {
                char *loc = NULL;
                curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &x->status);
                if (curl_easy_getinfo(c, CURLINFO_REDIRECT_URL, &loc) == CURLE_OK && loc)
                        x->redirect_url = xstrdup(loc);
        }
out:
        curl_easy_cleanup(c);
        curl_slist_free_all(connect_to);
        return r;
}

/* ---- ab_fetch ---- */

void ab_fetch_res_clear(ab_fetch_res *r)
{
        free(r->status_text);
        json_decref(r->headers);
        free(r->body);
        memset(r, 0, sizeof(*r));
}

static const char *canonical_method(const char *m)
{
        static const char *const methods[] = {"GET",    "POST", "PUT",    "PATCH",
                                              "DELETE", "HEAD", "OPTIONS"};
        if (!m || !*m)
                return "GET";
        for (size_t i = 0; i < AB_ARRAY_LEN(methods); i++)
                if (strcasecmp(m, methods[i]) == 0)
                        return methods[i];
        return NULL;
}

static bool same_origin(const url_parts *a, const url_parts *b)
{
        return strcasecmp(a->scheme, b->scheme) == 0 && strcasecmp(a->host, b->host) == 0 &&
               strcmp(a->port, b->port) == 0;
}

static bool is_redirect(long status)
{
        return status == 301 || status == 302 || status == 303 || status == 307 || status == 308;
}

int ab_fetch(const ab_fetch_req *req, ab_fetch_res *out, ab_err **err)
{
        memset(out, 0, sizeof(*out));
        size_t max_request = req->max_request ? req->max_request : DEFAULT_MAX_REQUEST;
        size_t max_response = req->max_response ? req->max_response : DEFAULT_MAX_RESPONSE;
        long max_timeout = req->max_timeout_ms > 0 ? req->max_timeout_ms : DEFAULT_MAX_TIMEOUT_MS;
        int max_redirects = req->max_redirects > 0 ? req->max_redirects : DEFAULT_MAX_REDIRECTS;
        long timeout =
            req->timeout_ms > 0 && req->timeout_ms < max_timeout ? req->timeout_ms : max_timeout;

        if (!req->url || !*req->url)
                return ab_err_set(err, AB_E_INVALID, 0, "URL is required");
        const char *method = canonical_method(req->method);
        if (!method)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "Method '%.32s' is not allowed (use GET, POST, PUT, PATCH, "
                                  "DELETE, HEAD or OPTIONS)",
                                  req->method);
        if (req->body && req->body_len > max_request)
                return ab_err_set(err, AB_E_LIMIT, 0,
                                  "Request body of %zu bytes is larger than the limit of %zu bytes",
                                  req->body_len, max_request);
        if (req->headers && !json_is_object(req->headers))
                return ab_err_set(err, AB_E_INVALID, 0, "headers must be an object of strings");
        pthread_once(&curl_once, curl_init);
        if (curl_init_rc != CURLE_OK)
                return ab_err_set(err, AB_E_INTERNAL, 0, "libcurl initialisation failed");

        uint64_t deadline = ab_now_ms() + (uint64_t)timeout;
        _cleanup_free_ char *url = xstrdup(req->url);
        /* GET and HEAD carry no body, as in fetch(). */
        const char *body = req->body;
        if (strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0)
                body = NULL;
        url_parts origin = {0};
        bool cross_origin = false;
        int r = -1;
        for (int hop = 0;; hop++) {
                url_parts u;
                if (parse_url(url, &u, err) < 0)
                        break;
                if (hop == 0)
                        origin = (url_parts){xstrdup(u.scheme), xstrdup(u.host), xstrdup(u.port)};
                else if (!same_origin(&origin, &u))
                        cross_origin = true;
                xfer x = {.max_response = max_response, .headers = json_object()};
                struct curl_slist *hl = NULL;
                uint64_t now = ab_now_ms();
                hop_req h = {
                    .url = url,
                    .method = method,
                    .body = body,
                    .body_len = body ? req->body_len : 0,
                    .timeout_ms = now < deadline ? (long)(deadline - now) : 0,
                    .total_timeout_ms = timeout,
                };
                int rr = build_headers(req->headers, cross_origin, &hl, err);
                h.headers = hl;
                if (rr == 0 && h.timeout_ms <= 0)
                        rr = ab_err_set(err, AB_E_TIMEOUT, 0, "Request to %s timed out after %ldms",
                                        u.host, timeout);
                if (rr == 0)
                        rr = resolve_checked(req, &u, &x.pin, err);
                if (rr == 0)
                        rr = fetch_once(&h, &u, &x, err);
                curl_slist_free_all(hl);
                if (rr < 0) {
                        url_parts_clear(&u);
                        xfer_clear(&x);
                        break;
                }

                url_parts_clear(&u);
                if (is_redirect(x.status) && x.redirect_url) {
                        if (hop >= max_redirects) {
                                xfer_clear(&x);
                                ab_err_set(err, AB_E_LIMIT, 0,
                                           "Too many redirects (more than %d) from %s",
                                           max_redirects, origin.host);
                                break;
                        }
                        /* 303, and 301/302 after a POST, continue as GET without body. */
                        if ((x.status == 303 && strcmp(method, "HEAD") != 0) ||
                            ((x.status == 301 || x.status == 302) && strcmp(method, "POST") == 0)) {
                                method = "GET";
                                body = NULL;
                        }
                        free(url);
                        url = steal_pointer(&x.redirect_url);
                        xfer_clear(&x);
                        continue;
                }
                out->status = x.status;
                out->status_text = x.status_text ? steal_pointer(&x.status_text) : xstrdup("");
                out->headers = steal_pointer(&x.headers);
                out->body_len = x.body.n;
                out->body = ab_buf_steal(&x.body);
                xfer_clear(&x);
                r = 0;
                break;
        }
        url_parts_clear(&origin);
        return r;
}

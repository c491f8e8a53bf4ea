/* docker_api.c - the Docker Engine API over its unix socket (docker_api.h). */
#include "backend/docker_api.h"
#include "base/codec.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/socket.h>

#define DEFAULT_SOCKET  "/var/run/docker.sock"
#define DEFAULT_TIMEOUT 60000u
#define POOL_MAX        8 /* idle handles kept; more threads make more, then free them */
#define BODY_MAX        (64u * 1024u * 1024u)

struct ab_dapi {
        char *socket;
        pthread_mutex_t mu;
        CURL *idle[POOL_MAX];
        size_t n_idle;
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_init(void)
{
        curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

int ab_dapi_open(const char *host, ab_dapi **out, ab_err **err)
{
        *out = NULL;
        pthread_once(&curl_once, curl_init);
        if (curl_init_rc != CURLE_OK)
                return ab_err_set(err, AB_E_INTERNAL, 0, "libcurl initialisation failed");
        if (!host || !*host)
                host = getenv("DOCKER_HOST");
        if (!host || !*host)
                host = "unix://" DEFAULT_SOCKET;
        if (strncmp(host, "unix://", 7) != 0)
                return ab_err_set(err, AB_E_UNSUPPORTED, 0,
                                  "docker host '%s': only a local engine (unix:///path) is "
                                  "supported: the Docker backend reaches a box's init through a "
                                  "folder of this host and its processes through /proc",
                                  host);
        const char *path = host + 7;
        if (path[0] != '/' || strlen(path) >= 108)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "docker host '%s': the socket must be an absolute path shorter "
                                  "than 108 bytes",
                                  host);
        ab_dapi *d = xzalloc(sizeof(*d));
        d->socket = xstrdup(path);
        pthread_mutex_init(&d->mu, NULL);
        *out = d;
        return 0;
}

void ab_dapi_free(ab_dapi *d)
{
        if (!d)
                return;
        for (size_t i = 0; i < d->n_idle; i++)
                curl_easy_cleanup(d->idle[i]);
        pthread_mutex_destroy(&d->mu);
        free(d->socket);
        free(d);
}

const char *ab_dapi_socket(const ab_dapi *d)
{
        return d->socket;
}

void ab_dapi_res_clear(ab_dapi_res *r)
{
        if (r->json)
                json_decref(r->json);
        ab_buf_free(&r->body);
        memset(r, 0, sizeof(*r));
}

static CURL *take(ab_dapi *d)
{
        pthread_mutex_lock(&d->mu);
        CURL *c = d->n_idle ? d->idle[--d->n_idle] : NULL;
        pthread_mutex_unlock(&d->mu);
        return c ? c : curl_easy_init();
}

static void give_back(ab_dapi *d, CURL *c)
{
        pthread_mutex_lock(&d->mu);
        if (d->n_idle < POOL_MAX) {
                d->idle[d->n_idle++] = c;
                c = NULL;
        }
        pthread_mutex_unlock(&d->mu);
        if (c)
                curl_easy_cleanup(c);
}

static size_t on_body(char *p, size_t size, size_t n, void *ud)
{
        ab_buf *b = ud;
        size_t len = size * n;
        if (b->n + len > BODY_MAX)
                return 0; /* aborts the transfer */
        ab_buf_add(b, p, len);
        return len;
}

/* The connection to the engine is root on this host: it must never leak
 * into a child the server starts (a box's init, a helper). libcurl makes
 * its sockets without close-on-exec; this makes them with it, atomically. */
static curl_socket_t open_cloexec(void *ud, curlsocktype purpose, struct curl_sockaddr *a)
{
        (void)ud;
        (void)purpose;
        int fd = socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
        return fd < 0 ? CURL_SOCKET_BAD : fd;
}

int ab_dapi_call(ab_dapi *d, const char *method, const char *path, const json_t *body,
                 uint32_t timeout_ms, ab_dapi_res *res, ab_err **err)
{
        memset(res, 0, sizeof(*res));
        CURL *c = take(d);
        if (!c)
                return ab_err_set(err, AB_E_INTERNAL, 0, "libcurl handle creation failed");
        _cleanup_free_ char *url = xasprintf("http://docker/" AB_DAPI_VERSION "%s", path);
        _cleanup_free_ char *json = body ? json_dumps(body, JSON_COMPACT) : NULL;
        struct curl_slist *hdr = NULL;
        if (json)
                hdr = curl_slist_append(hdr, "Content-Type: application/json");
        char errbuf[CURL_ERROR_SIZE] = "";
        curl_easy_reset(c);
        bool ok = curl_easy_setopt(c, CURLOPT_UNIX_SOCKET_PATH, d->socket) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_URL, url) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, open_cloexec) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_TIMEOUT_MS,
                                    (long)(timeout_ms ? timeout_ms : DEFAULT_TIMEOUT)) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_WRITEDATA, &res->body) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr) == CURLE_OK;
        if (json) {
                ok = ok && curl_easy_setopt(c, CURLOPT_POSTFIELDS, json) == CURLE_OK;
                ok = ok &&
                     curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(json)) == CURLE_OK;
        } else if (!strcmp(method, "POST") || !strcmp(method, "PUT")) {
                ok = ok && curl_easy_setopt(c, CURLOPT_POSTFIELDS, "") == CURLE_OK;
                ok = ok && curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, 0L) == CURLE_OK;
        } else if (!strcmp(method, "GET")) {
                ok = ok && curl_easy_setopt(c, CURLOPT_HTTPGET, 1L) == CURLE_OK;
        }
        CURLcode rc = ok ? curl_easy_perform(c) : CURLE_FAILED_INIT;
        curl_slist_free_all(hdr);
        if (rc != CURLE_OK) {
                curl_easy_cleanup(c);
                ab_buf_free(&res->body);
                return ab_err_set(err,
                                  rc == CURLE_OPERATION_TIMEDOUT ? AB_E_TIMEOUT : AB_E_UNAVAILABLE,
                                  0, "docker engine at unix://%s: %s %s: %s", d->socket, method,
                                  path, *errbuf ? errbuf : curl_easy_strerror(rc));
        }
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &res->status);
        give_back(d, c);
        if (res->body.n)
                res->json = json_loadb(res->body.p, res->body.n, 0, NULL);
        return 0;
}

const char *ab_dapi_message(const ab_dapi_res *res)
{
        const char *m = json_string_value(json_object_get(res->json, "message"));
        if (m && *m)
                return m;
        if (res->body.n && res->body.p)
                return res->body.p;
        static __thread char buf[32];
        snprintf(buf, sizeof(buf), "HTTP %ld", res->status);
        return buf;
}

char *ab_dapi_escape(const char *s)
{
        return ab_pct_encode(s);
}

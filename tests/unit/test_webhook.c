/* Unit tests: webhook posts against a tiny HTTP server on 127.0.0.1 run by a
 * test thread: the request as sent (method, headers, body), retries on 5xx,
 * no retry and no following of redirects, per-attempt timeouts, an
 * unreachable port, queue overflow, flushing on free, URL checks. */
#include "core/webhook.h"
#include "tap.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>

typedef struct server {
        int fd, port;
        int status;   /* answer with this status */
        int delay_ms; /* before answering */
        bool hang;    /* never answer; wait for the client to give up */
        atomic_bool stop;
        pthread_t th;
        pthread_mutex_t mu;
        int requests;
        char method[16], path[256], ctype[128], ua[128], body[1024];
} server;

/* The value of header `name` in the request head, or "" */
static void header_value(const char *head, const char *name, char *out, size_t len)
{
        out[0] = '\0';
        char pat[64];
        snprintf(pat, sizeof(pat), "\r\n%s:", name);
        const char *p = strcasestr(head, pat);
        if (!p)
                return;
        p += strlen(pat);
        while (*p == ' ')
                p++;
        size_t n = strcspn(p, "\r\n");
        snprintf(out, len, "%.*s", (int)(n < len - 1 ? n : len - 1), p);
}

static void handle(server *s, int c)
{
        char buf[8192];
        size_t n = 0;
        char *end = NULL;
        while (n < sizeof(buf) - 1) {
                ssize_t r = read(c, buf + n, sizeof(buf) - 1 - n);
                if (r <= 0)
                        return;
                n += (size_t)r;
                buf[n] = '\0';
                if ((end = strstr(buf, "\r\n\r\n")))
                        break;
        }
        if (!end)
                return;
        *end = '\0';
        char cl[32];
        header_value(buf, "Content-Length", cl, sizeof(cl));
        size_t want = (size_t)atol(cl), have = n - (size_t)(end + 4 - buf);
        char *body = end + 4;
        while (have < want && (size_t)(body - buf) + have < sizeof(buf) - 1) {
                ssize_t r = read(c, body + have, want - have);
                if (r <= 0)
                        return;
                have += (size_t)r;
        }
        body[have] = '\0';

        pthread_mutex_lock(&s->mu);
        s->requests++;
        sscanf(buf, "%15s %255s", s->method, s->path);
        header_value(buf, "Content-Type", s->ctype, sizeof(s->ctype));
        header_value(buf, "User-Agent", s->ua, sizeof(s->ua));
        snprintf(s->body, sizeof(s->body), "%s", body);
        pthread_mutex_unlock(&s->mu);

        if (s->hang) {
                /* Until the client hangs up (its timeout) or the test ends. */
                struct pollfd pfd = {.fd = c, .events = POLLIN};
                while (!atomic_load(&s->stop) && poll(&pfd, 1, 50) == 0)
                        ;
                return;
        }
        if (s->delay_ms)
                usleep((useconds_t)s->delay_ms * 1000);
        char resp[256];
        int len = snprintf(resp, sizeof(resp),
                           "HTTP/1.1 %d X\r\n%sContent-Length: 2\r\nConnection: close\r\n\r\nok",
                           s->status, s->status / 100 == 3 ? "Location: /elsewhere\r\n" : "");
        (void)!write(c, resp, (size_t)len);
}

static void *serve(void *arg)
{
        server *s = arg;
        while (!atomic_load(&s->stop)) {
                struct pollfd pfd = {.fd = s->fd, .events = POLLIN};
                if (poll(&pfd, 1, 50) <= 0)
                        continue;
                int c = accept4(s->fd, NULL, NULL, SOCK_CLOEXEC);
                if (c < 0)
                        continue;
                handle(s, c);
                close(c);
        }
        return NULL;
}

static int listen_socket(int *port)
{
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t al = sizeof(a);
        if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 16) < 0 ||
            getsockname(fd, (struct sockaddr *)&a, &al) < 0)
                return -1;
        *port = ntohs(a.sin_port);
        return fd;
}

static server *server_start(int status)
{
        server *s = xzalloc(sizeof(*s));
        s->status = status;
        pthread_mutex_init(&s->mu, NULL);
        s->fd = listen_socket(&s->port);
        if (s->fd < 0)
                tap_skip_all("cannot listen on 127.0.0.1");
        pthread_create(&s->th, NULL, serve, s);
        return s;
}

static void server_stop(server *s)
{
        atomic_store(&s->stop, true);
        pthread_join(s->th, NULL);
        close(s->fd);
        pthread_mutex_destroy(&s->mu);
        free(s);
}

static int requests(server *s)
{
        pthread_mutex_lock(&s->mu);
        int n = s->requests;
        pthread_mutex_unlock(&s->mu);
        return n;
}

static char *url_of(server *s, const char *path)
{
        return xasprintf("http://127.0.0.1:%d%s", s->port, path);
}

/* Waits until sent + failed reaches n (or 10 s pass); returns the stats. */
static ab_webhook_stats wait_done(ab_webhook *w, uint64_t n)
{
        ab_webhook_stats st;
        uint64_t until = ab_now_ms() + 10000;
        do {
                ab_webhook_stats_get(w, &st);
                if (st.sent + st.failed >= n)
                        break;
                usleep(20 * 1000);
        } while (ab_now_ms() < until);
        return st;
}

static void test_post(void)
{
        server *s = server_start(200);
        _cleanup_free_ char *url = url_of(s, "/hook?k=secret");
        ab_webhook *w = NULL;
        ab_err *e = NULL;
        TAP_IS_INT(ab_webhook_new(url, 2000, 16, &w, &e), 0, "webhook created");
        ab_webhook_post(w, "{\"type\":\"alert\",\"pct\":93}");
        ab_webhook_stats st = wait_done(w, 1);
        tap_ok(st.sent == 1 && st.failed == 0 && st.dropped == 0, "one post sent");
        TAP_IS_INT(requests(s), 1, "the server saw one request");
        TAP_IS_STR(s->method, "POST", "method is POST");
        TAP_IS_STR(s->path, "/hook?k=secret", "path and query kept");
        TAP_IS_STR(s->ctype, "application/json", "Content-Type is application/json");
        TAP_IS_STR(s->ua, "agentbox/" AGENTBOX_VERSION, "User-Agent is agentbox/VERSION");
        TAP_IS_STR(s->body, "{\"type\":\"alert\",\"pct\":93}", "body sent as given");

        /* free flushes what is still queued. */
        ab_webhook_post(w, "{\"n\":1}");
        ab_webhook_post(w, "{\"n\":2}");
        ab_webhook_post(w, "{\"n\":3}");
        ab_webhook_free(w);
        TAP_IS_INT(requests(s), 4, "free sent the queued posts before returning");
        TAP_IS_STR(s->body, "{\"n\":3}", "in order, the last one last");
        server_stop(s);
}

static void test_retry(void)
{
        server *s = server_start(500);
        _cleanup_free_ char *url = url_of(s, "/");
        ab_webhook *w = NULL;
        TAP_IS_INT(ab_webhook_new(url, 2000, 16, &w, NULL), 0, "webhook to a 500 server");
        uint64_t t0 = ab_now_ms();
        ab_webhook_post(w, "{}");
        ab_webhook_stats st = wait_done(w, 1);
        uint64_t dt = ab_now_ms() - t0;
        tap_ok(st.failed == 1 && st.sent == 0, "a post answered 500 fails");
        TAP_IS_INT(requests(s), 3, "after 3 attempts");
        tap_ok(dt >= 1100, "with backoff between them (%llu ms)", (unsigned long long)dt);
        ab_webhook_free(w);
        server_stop(s);

        /* A redirect is neither followed nor retried. */
        s = server_start(302);
        _cleanup_free_ char *url2 = url_of(s, "/first");
        TAP_IS_INT(ab_webhook_new(url2, 2000, 16, &w, NULL), 0, "webhook to a 302 server");
        ab_webhook_post(w, "{}");
        st = wait_done(w, 1);
        tap_ok(st.failed == 1 && st.sent == 0, "a redirect counts as a failure");
        usleep(300 * 1000);
        TAP_IS_INT(requests(s), 1, "one request, no retry, redirect not followed");
        TAP_IS_STR(s->path, "/first", "only the original path was asked for");
        ab_webhook_free(w);
        server_stop(s);

        /* A server that never answers: each attempt ends at the timeout. */
        s = server_start(200);
        s->hang = true;
        _cleanup_free_ char *url3 = url_of(s, "/");
        TAP_IS_INT(ab_webhook_new(url3, 300, 16, &w, NULL), 0, "webhook to a silent server");
        t0 = ab_now_ms();
        ab_webhook_post(w, "{}");
        st = wait_done(w, 1);
        dt = ab_now_ms() - t0;
        tap_ok(st.failed == 1, "a silent server fails the post");
        TAP_IS_INT(requests(s), 3, "3 attempts, each timed out");
        tap_ok(dt >= 2000 && dt < 6000, "3 x 300 ms + backoff (%llu ms)", (unsigned long long)dt);
        ab_webhook_free(w);
        server_stop(s);

        /* free does not sit out a backoff. */
        s = server_start(503);
        _cleanup_free_ char *url4 = url_of(s, "/");
        TAP_IS_INT(ab_webhook_new(url4, 2000, 16, &w, NULL), 0, "webhook to a 503 server");
        ab_webhook_post(w, "{}");
        usleep(100 * 1000);
        t0 = ab_now_ms();
        ab_webhook_free(w);
        dt = ab_now_ms() - t0;
        tap_ok(dt < 700, "free interrupts the retry backoff (%llu ms)", (unsigned long long)dt);
        server_stop(s);
}

static void test_unreachable(void)
{
        int port;
        int fd = listen_socket(&port);
        close(fd); /* nobody listens there now */
        _cleanup_free_ char *url = xasprintf("http://127.0.0.1:%d/", port);
        ab_webhook *w = NULL;
        TAP_IS_INT(ab_webhook_new(url, 1000, 16, &w, NULL), 0, "webhook to a closed port");
        uint64_t t0 = ab_now_ms();
        ab_webhook_post(w, "{}");
        ab_webhook_stats st = wait_done(w, 1);
        tap_ok(st.failed == 1 && st.sent == 0, "unreachable: counted as failed");
        tap_ok(ab_now_ms() - t0 < 5000, "without hanging");
        ab_webhook_free(w);
}

static void test_overflow(void)
{
        server *s = server_start(200);
        s->delay_ms = 300;
        _cleanup_free_ char *url = url_of(s, "/");
        ab_webhook *w = NULL;
        TAP_IS_INT(ab_webhook_new(url, 3000, 2, &w, NULL), 0, "webhook with a queue of 2");
        for (int i = 0; i < 6; i++) {
                char b[32];
                snprintf(b, sizeof(b), "{\"i\":%d}", i);
                ab_webhook_post(w, b);
        }
        ab_webhook_stats st;
        ab_webhook_stats_get(w, &st);
        /* At most one post left the queue for the wire; 2 wait; the rest went. */
        tap_ok(st.dropped >= 3 && st.dropped <= 4, "overflow drops the oldest (%llu dropped)",
               (unsigned long long)st.dropped);
        ab_webhook_free(w);
        TAP_IS_INT(requests(s) + (int)st.dropped, 6, "every post either sent or dropped");
        TAP_IS_STR(s->body, "{\"i\":5}", "the newest post survived");
        server_stop(s);
}

static void test_bad_urls(void)
{
        static const char *const bad[] = {"ftp://example.com/x",    "file:///etc/passwd",
                                          "gopher://example.com",   "",
                                          "example.com/hook",       "http://",
                                          "dict://127.0.0.1:11211/"};
        for (size_t i = 0; i < AB_ARRAY_LEN(bad); i++) {
                ab_webhook *w = (ab_webhook *)1;
                ab_err *e = NULL;
                int r = ab_webhook_new(bad[i], 1000, 4, &w, &e);
                tap_ok(r < 0 && e && e->code == AB_E_INVALID && w == NULL,
                       "'%s' is refused as invalid", bad[i]);
                ab_err_free(&e);
        }
        ab_webhook *w = NULL;
        ab_err *e = NULL;
        tap_ok(ab_webhook_new(NULL, 1000, 4, &w, &e) < 0 && e && e->code == AB_E_INVALID,
               "a NULL URL is refused");
        ab_err_free(&e);
        tap_ok(ab_webhook_new("HTTPS://example.com/h", 1000, 4, &w, &e) == 0 && w,
               "an upper-case HTTPS scheme is accepted");
        ab_webhook_free(w);
        ab_webhook_post(NULL, "{}"); /* no webhook configured: a no-op */
        tap_ok(1, "posting to a NULL webhook is a no-op");
}

int main(void)
{
        test_bad_urls();
        test_post();
        test_retry();
        test_unreachable();
        test_overflow();
        return tap_done();
}

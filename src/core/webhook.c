/* webhook.c - one worker thread drains a bounded ring of JSON bodies and POSTs
 * each with libcurl: at most 3 attempts (backoff 200 ms, then 1 s), a timeout
 * per attempt, no redirects, http/https only. Callers only ever take the
 * queue lock for a moment. */
#include "core/webhook.h"
#include "base/log.h"

#include <curl/curl.h>
#include <pthread.h>
#include <strings.h>
#include <time.h>

#define MAX_ATTEMPTS 3
static const long backoff_ms[MAX_ATTEMPTS - 1] = {200, 1000};

struct ab_webhook {
        char *host; /* for logs: the URL's path or query may hold a secret */
        long timeout_ms;
        CURL *curl;
        struct curl_slist *headers;
        char errbuf[CURL_ERROR_SIZE];

        pthread_mutex_t mu;
        pthread_cond_t cv; /* CLOCK_MONOTONIC; signalled on post and on stop */
        char **q;          /* ring of queue_max bodies */
        size_t q_max, q_head, q_len;
        bool stopping;
        struct timespec flush_deadline; /* valid once stopping */
        ab_webhook_stats stats;
        pthread_t thread;
};

static void deadline_in(struct timespec *ts, long ms)
{
        clock_gettime(CLOCK_MONOTONIC, ts);
        ts->tv_sec += ms / 1000;
        ts->tv_nsec += (ms % 1000) * 1000000L;
        if (ts->tv_nsec >= 1000000000L) {
                ts->tv_sec++;
                ts->tv_nsec -= 1000000000L;
        }
}

static bool past(const struct timespec *ts)
{
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        return now.tv_sec > ts->tv_sec || (now.tv_sec == ts->tv_sec && now.tv_nsec >= ts->tv_nsec);
}

static size_t discard(char *ptr, size_t size, size_t nmemb, void *user)
{
        return size * nmemb;
}

/* One attempt. Returns 0 on a 2xx answer, else -1 with a reason in why and
 * *retry telling whether another attempt could help. */
static int post_once(ab_webhook *w, const char *body, char *why, size_t why_len, bool *retry)
{
        w->errbuf[0] = '\0';
        curl_easy_setopt(w->curl, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(w->curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
        CURLcode rc = curl_easy_perform(w->curl);
        if (rc != CURLE_OK) {
                snprintf(why, why_len, "%s", w->errbuf[0] ? w->errbuf : curl_easy_strerror(rc));
                *retry = true;
                return -1;
        }
        long status = 0;
        curl_easy_getinfo(w->curl, CURLINFO_RESPONSE_CODE, &status);
        if (status >= 200 && status < 300)
                return 0;
        snprintf(why, why_len, "HTTP status %ld", status);
        /* A redirect is never followed and a 4xx will not change on its own. */
        *retry = status >= 500 || status == 408 || status == 429;
        return -1;
}

/* Sleeps ms unless the webhook is stopping; returns false when it is. */
static bool backoff(ab_webhook *w, long ms)
{
        struct timespec until;
        deadline_in(&until, ms);
        pthread_mutex_lock(&w->mu);
        while (!w->stopping && pthread_cond_timedwait(&w->cv, &w->mu, &until) != ETIMEDOUT)
                ;
        bool go_on = !w->stopping;
        pthread_mutex_unlock(&w->mu);
        return go_on;
}

static void deliver(ab_webhook *w, const char *body)
{
        char why[CURL_ERROR_SIZE + 32] = "";
        int attempt;
        for (attempt = 1; attempt <= MAX_ATTEMPTS; attempt++) {
                bool retry = false;
                if (post_once(w, body, why, sizeof(why), &retry) == 0) {
                        pthread_mutex_lock(&w->mu);
                        w->stats.sent++;
                        pthread_mutex_unlock(&w->mu);
                        return;
                }
                char n[16];
                snprintf(n, sizeof(n), "%d", attempt);
                ab_log(AB_LOG_WARN, "webhook post failed", "host", w->host, "attempt", n, "error",
                       why, NULL);
                if (!retry || attempt == MAX_ATTEMPTS || !backoff(w, backoff_ms[attempt - 1]))
                        break;
        }
        pthread_mutex_lock(&w->mu);
        w->stats.failed++;
        pthread_mutex_unlock(&w->mu);
        ab_log(AB_LOG_ERROR, "webhook post given up", "host", w->host, "error", why, NULL);
}

static void *worker(void *arg)
{
        ab_webhook *w = arg;
        for (;;) {
                pthread_mutex_lock(&w->mu);
                while (w->q_len == 0 && !w->stopping)
                        pthread_cond_wait(&w->cv, &w->mu);
                if (w->q_len == 0) {
                        pthread_mutex_unlock(&w->mu);
                        return NULL;
                }
                if (w->stopping && past(&w->flush_deadline)) {
                        /* Shutting down and out of time: what is left is dropped. */
                        size_t left = w->q_len;
                        for (; w->q_len; w->q_len--) {
                                free(w->q[w->q_head]);
                                w->q[w->q_head] = NULL;
                                w->q_head = (w->q_head + 1) % w->q_max;
                        }
                        w->stats.dropped += left;
                        pthread_mutex_unlock(&w->mu);
                        char n[32];
                        snprintf(n, sizeof(n), "%zu", left);
                        ab_log(AB_LOG_WARN, "webhook posts dropped at shutdown", "host", w->host,
                               "count", n, NULL);
                        return NULL;
                }
                char *body = steal_pointer(&w->q[w->q_head]);
                w->q_head = (w->q_head + 1) % w->q_max;
                w->q_len--;
                pthread_mutex_unlock(&w->mu);
                deliver(w, body);
                free(body);
        }
}

static void webhook_destroy(ab_webhook *w)
{
        for (size_t i = 0; i < w->q_max; i++)
                free(w->q[i]);
        free(w->q);
        if (w->curl)
                curl_easy_cleanup(w->curl);
        curl_slist_free_all(w->headers);
        pthread_cond_destroy(&w->cv);
        pthread_mutex_destroy(&w->mu);
        free(w->host);
        free(w);
        curl_global_cleanup();
}

/* Checks the scheme and the syntax; returns the host for logs. */
static int check_url(const char *url, char **host, ab_err **err)
{
        if (!url || !(strncasecmp(url, "http://", 7) == 0 || strncasecmp(url, "https://", 8) == 0))
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "webhook URL '%s' is not an http:// or https:// URL",
                                  url ? url : "");
        CURLU *u = curl_url();
        if (!u)
                abort();
        char *h = NULL;
        CURLUcode rc = curl_url_set(u, CURLUPART_URL, url, 0);
        if (rc == CURLUE_OK)
                rc = curl_url_get(u, CURLUPART_HOST, &h, 0);
        if (rc != CURLUE_OK || !h || !*h) {
                curl_free(h);
                curl_url_cleanup(u);
                return ab_err_set(err, AB_E_INVALID, 0, "webhook URL '%s' is malformed: %s", url,
                                  rc != CURLUE_OK ? curl_url_strerror(rc) : "no host");
        }
        *host = xstrdup(h);
        curl_free(h);
        curl_url_cleanup(u);
        return 0;
}

int ab_webhook_new(const char *url, long timeout_ms, size_t queue_max, ab_webhook **out,
                   ab_err **err)
{
        *out = NULL;
        _cleanup_free_ char *host = NULL;
        if (check_url(url, &host, err) < 0)
                return -1;
        if (timeout_ms <= 0)
                return ab_err_set(err, AB_E_INVALID, 0, "webhook timeout must be positive");
        if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
                return ab_err_set(err, AB_E_INTERNAL, 0, "libcurl initialisation failed");

        ab_webhook *w = xzalloc(sizeof(*w));
        w->host = steal_pointer(&host);
        w->timeout_ms = timeout_ms;
        w->q_max = queue_max ? queue_max : 1;
        w->q = xcalloc(w->q_max, sizeof(*w->q));
        pthread_mutex_init(&w->mu, NULL);
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&w->cv, &ca);
        pthread_condattr_destroy(&ca);

        w->curl = curl_easy_init();
        if (!w->curl) {
                webhook_destroy(w);
                return ab_err_set(err, AB_E_INTERNAL, 0, "libcurl handle creation failed");
        }
        w->headers = curl_slist_append(NULL, "Content-Type: application/json");
        /* No "Expect: 100-continue" round trip for larger bodies. */
        w->headers = curl_slist_append(w->headers, "Expect:");
        if (!w->headers)
                abort();
        CURL *c = w->curl;
        bool ok = curl_easy_setopt(c, CURLOPT_URL, url) == CURLE_OK;
#if LIBCURL_VERSION_NUM >= 0x075500
        ok = ok && curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https") == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https") == CURLE_OK;
#else
        ok = ok &&
             curl_easy_setopt(c, CURLOPT_PROTOCOLS, CURLPROTO_HTTP | CURLPROTO_HTTPS) == CURLE_OK;
#endif
        ok = ok && curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_POST, 1L) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_HTTPHEADER, w->headers) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_USERAGENT, "agentbox/" AGENTBOX_VERSION) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_ERRORBUFFER, w->errbuf) == CURLE_OK;
        if (!ok) {
                webhook_destroy(w);
                return ab_err_set(err, AB_E_INTERNAL, 0, "libcurl rejected the webhook options");
        }

        int r = pthread_create(&w->thread, NULL, worker, w);
        if (r != 0) {
                webhook_destroy(w);
                return ab_err_set(err, AB_E_INTERNAL, r, "cannot start the webhook thread");
        }
        *out = w;
        return 0;
}

void ab_webhook_free(ab_webhook *w)
{
        if (!w)
                return;
        pthread_mutex_lock(&w->mu);
        w->stopping = true;
        /* Flush budget: what is queued gets one attempt each (no more
         * backoff) for about one post timeout, then the rest is dropped. */
        deadline_in(&w->flush_deadline, w->timeout_ms + 1000);
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
        pthread_join(w->thread, NULL);
        webhook_destroy(w);
}

void ab_webhook_post(ab_webhook *w, const char *json)
{
        if (!w || !json)
                return;
        char *copy = xstrdup(json);
        char *old = NULL;
        pthread_mutex_lock(&w->mu);
        if (w->q_len == w->q_max) {
                old = steal_pointer(&w->q[w->q_head]);
                w->q_head = (w->q_head + 1) % w->q_max;
                w->q_len--;
                w->stats.dropped++;
        }
        w->q[(w->q_head + w->q_len) % w->q_max] = copy;
        w->q_len++;
        pthread_cond_signal(&w->cv);
        pthread_mutex_unlock(&w->mu);
        if (old) {
                free(old);
                ab_log(AB_LOG_WARN, "webhook queue full: oldest post dropped", "host", w->host,
                       NULL);
        }
}

void ab_webhook_stats_get(ab_webhook *w, ab_webhook_stats *out)
{
        pthread_mutex_lock(&w->mu);
        *out = w->stats;
        pthread_mutex_unlock(&w->mu);
}

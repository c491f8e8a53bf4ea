/* webhook.h - fire-and-forget JSON POSTs to a configured URL (alert events),
 * sent by one background thread with libcurl so no caller ever waits on the
 * network. A bounded queue: when it is full, the oldest pending post is
 * dropped and counted. Each post has a timeout; failures are logged, retried
 * up to 3 times with backoff, then dropped. Thread-safe. */
#ifndef AB_WEBHOOK_H
#define AB_WEBHOOK_H

#include "base/err.h"
#include <stdint.h>

typedef struct ab_webhook ab_webhook;

/* url: http:// or https:// (AB_E_INVALID otherwise). timeout_ms per attempt. */
int ab_webhook_new(const char *url, long timeout_ms, size_t queue_max, ab_webhook **out,
                   ab_err **err);
/* Sends what is queued (waiting up to the posts' timeouts), then frees. */
void ab_webhook_free(ab_webhook *w);
/* Queues a copy of `json` (a complete JSON document) for posting. */
void ab_webhook_post(ab_webhook *w, const char *json);

typedef struct ab_webhook_stats {
        uint64_t sent, failed, dropped;
} ab_webhook_stats;
void ab_webhook_stats_get(ab_webhook *w, ab_webhook_stats *out);

#endif

/* conn.h - what the HTTP server knows of its connections, so that no client
 * can deny service to others:
 *
 * - every open connection is in a table with its peer address; an address
 *   over its connection cap, or a server over its total, is refused at
 *   accept (the socket is closed at once);
 * - a request head must be complete within head_timeout of the connection
 *   opening (or, on a kept-alive connection, of the request line arriving,
 *   and at most keepalive after the previous response): else the timer thread
 *   shuts the socket down, however slowly the client trickles bytes;
 * - long-lived streams (SSE, exec streams, terminals) take a stream slot,
 *   counted apart from connections and requests, per address and in total;
 * - a streaming response with nothing to send parks: its connection is
 *   suspended (it costs a socket and a little memory, no thread) until its
 *   data fd is readable, the event bus has news, the client hangs up, a
 *   deadline passes, or its producer wakes it;
 * - a request authenticated with an API key from the store is bound to that
 *   key: when the key is deleted, every connection bound to it is shut down
 *   (its streams, WebSockets and port relays end with it), at once on this
 *   server and within key_check_ms when another server deleted it.
 *
 * One timer thread serves the deadlines and the parked streams. All
 * functions are thread-safe unless they say where they must be called. */
#ifndef AB_CONN_H
#define AB_CONN_H

#include "base/buf.h"
#include "base/events.h"

#include <microhttpd.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct ab_conns ab_conns;

typedef struct ab_conns_opts {
        int64_t head_timeout_ms;  /* a request head must be complete in this time */
        int64_t keepalive_ms;     /* a kept-alive connection waits this long for its next head */
        int64_t max_connections;  /* open connections in total */
        int64_t max_per_address;  /* open connections from one address */
        int64_t max_streams;      /* long-lived streams in total */
        int64_t max_streams_addr; /* long-lived streams from one address */
        ab_events *events;        /* parked event streams wake on its news; may be NULL */
        /* Asked every key_check_ms (0 = AB_KEY_CHECK_MS), on a thread of its
         * own, about the keys bound to open connections (keys[0..n), sorted,
         * distinct): sets gone[i] for each key that no longer exists (those
         * are revoked). 0, or -1 when it cannot tell (nothing is revoked).
         * May block (the store). NULL = no such check. */
        int (*keys_gone)(void *arg, const char *const *keys, size_t n, bool *gone);
        void *key_arg;
        int64_t key_check_ms;
} ab_conns_opts;

/* How often bound keys are checked against the store by default. */
#define AB_KEY_CHECK_MS 2000

/* Makes the table and starts the timer thread. NULL when the thread or its
 * epoll cannot be made (errno set). */
ab_conns *ab_conns_new(const ab_conns_opts *o);
/* Stops the timer thread and frees. Call after MHD_stop_daemon (every
 * connection closed, every response freed). */
void ab_conns_free(ab_conns *c);

/* MHD callbacks: pass c as their closure. */
enum MHD_Result ab_conns_accept(void *c, const struct sockaddr *addr, socklen_t len);
void ab_conns_notify(void *c, struct MHD_Connection *conn, void **socket_context,
                     enum MHD_ConnectionNotificationCode code);
void *ab_conns_uri_seen(void *c, const char *uri, struct MHD_Connection *conn);

/* The target of conn's current request as the client sent it (path and
 * query, not decoded), or NULL. Valid on MHD's thread until the next request
 * of conn; the access handler copies it. */
const char *ab_conns_raw_uri(struct MHD_Connection *conn);

/* The head of conn's current request is complete: no deadline until the
 * response is done. Call from the access handler's first call. */
void ab_conns_head_done(ab_conns *c, struct MHD_Connection *conn);
/* conn's request is done: it may wait keepalive for its next head. Call from
 * the request-completed callback. */
void ab_conns_request_done(ab_conns *c, struct MHD_Connection *conn);

/* ---- streams ------------------------------------------------------------ */

typedef struct ab_stream_slot ab_stream_slot;

typedef enum {
        AB_SLOT_OK,
        AB_SLOT_FULL,         /* max_streams reached (503) */
        AB_SLOT_ADDRESS_FULL, /* max_streams_addr reached for this address (429) */
} ab_slot_result;

/* Takes a stream slot for a stream of conn's client. *out is set on
 * AB_SLOT_OK; release it with ab_stream_slot_release (any thread, once). */
ab_slot_result ab_stream_slot_take(ab_conns *c, struct MHD_Connection *conn, ab_stream_slot **out);
void ab_stream_slot_release(ab_stream_slot *s);

/* ---- credentials ------------------------------------------------------------ */

/* Binds conn's current request, and whatever it becomes (a stream, an
 * upgraded WebSocket or port relay), to the store API key key_id (copied):
 * when the key is revoked, the connection is shut down. A key revoked
 * already (among the latest few hundred) shuts it at once, so a request
 * that authenticated just before the revocation does not slip through. The
 * next request on the connection starts unbound. Any thread, while conn's
 * request is being handled. */
void ab_conns_bind_key(ab_conns *c, struct MHD_Connection *conn, const char *key_id);
/* Revokes key_id: shuts down every connection bound to it (a parked stream
 * wakes on the hang-up, an upgraded connection's relay reads its end) and
 * remembers it for ab_conns_bind_key. Returns how many connections it shut
 * down. Any thread. */
size_t ab_conns_revoke_key(ab_conns *c, const char *key_id);

/* ---- parked streaming readers ------------------------------------------ */

typedef struct ab_park ab_park;

/* A parking place for the response of conn (made by the handler; freed
 * by the response's free callback with ab_park_free). */
ab_park *ab_park_new(ab_conns *c, struct MHD_Connection *conn);
void ab_park_free(ab_park *p);

typedef enum {
        AB_PARK_SUSPENDED, /* the connection is suspended: the reader returns 0 */
        AB_PARK_RETRY,     /* ready() said data is there: read again */
        AB_PARK_GONE,      /* the client hung up or the server is stopping: end the stream */
} ab_park_result;

/* Called by a content-reader callback (on MHD's thread) that has nothing to
 * send. Suspends the connection until fd (>= 0) is readable, the event bus
 * has news (on_events), the client hangs up, deadline_ms (monotonic, 0 =
 * none) passes, or ab_park_wake. ready(arg), when given, is asked under the
 * lock that wakers take, so news that came just before is not missed. */
ab_park_result ab_park_suspend(ab_park *p, int fd, bool on_events, int64_t deadline_ms,
                               bool (*ready)(void *arg), void *arg);
/* The same, waiting for fd to take more bytes (the port proxy's request
 * body, written to a box's server); may also be called by the access
 * handler while it takes a request's body. */
ab_park_result ab_park_suspend_write(ab_park *p, int fd, int64_t deadline_ms);
/* Wakes p's reader if it is parked (any thread; p must be alive). */
void ab_park_wake(ab_park *p);

/* Server stop: parked readers are woken and parking is refused from now on. */
void ab_conns_stop_streams(ab_conns *c);

/* ---- figures ------------------------------------------------------------- */

/* Appends the connection gauges and counters as Prometheus text:
 * agentbox_http_connections, agentbox_http_streams,
 * agentbox_http_head_deadline_closed_total, agentbox_http_refused_total{reason}. */
void ab_conns_metrics(ab_conns *c, ab_buf *b);
/* Counts a request refused because max_requests are in flight. */
void ab_conns_count_busy(ab_conns *c);

#endif

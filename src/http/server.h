/* server.h - the event-driven HTTP server, below every route: one
 * libmicrohttpd polling thread (epoll) for every connection, the connection
 * table with its caps, deadlines and parked streams (http/conn.h), and the
 * pool of threads that run handlers (http/workers.h).
 *
 * It knows no route, no front and no credential: its user hands it MHD's
 * access handler and request-completed callback, and the limits, in an
 * ab_http_opts. The access handler runs on the polling thread and must never
 * block; it suspends the connection and hands blocking work to the workers
 * (ab_workers_reserve, ab_workers_run). Includes only base. */
#ifndef AB_HTTP_SERVER_H
#define AB_HTTP_SERVER_H

#include "base/buf.h"
#include "base/err.h"
#include "base/events.h"
#include "http/conn.h"
#include "http/workers.h"

#include <microhttpd.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct ab_http_opts {
        const char *listen;      /* HOST:PORT or [V6]:PORT (ab_http_start only) */
        int64_t head_timeout_ms; /* http/conn.h's ab_conns_opts says what each limit does */
        int64_t max_connections;
        int64_t max_connections_per_address;
        int64_t max_streams;
        int64_t max_streams_per_address;
        int64_t max_requests; /* handlers in flight: the workers' cap */
        ab_events *events;    /* parked event streams wake on its news; may be NULL */
        /* The check of keys bound to connections (ab_conns_opts.keys_gone), or NULL. */
        int (*keys_gone)(void *arg, const char *const *keys, size_t n, bool *gone);
        void *key_arg;
        /* MHD's callbacks, with cls as their closure. */
        MHD_AccessHandlerCallback on_request;
        MHD_RequestCompletedCallback on_completed;
        void *cls;
} ab_http_opts;

/* A running server. Its fields are read by its user (the connection table
 * for parking and stream slots, the workers for dispatch); only these
 * functions change them. */
typedef struct ab_http {
        struct MHD_Daemon *mhd; /* NULL when not running */
        ab_conns *conns;
        ab_workers *workers;
        uint16_t port; /* the port actually bound (ab_http_start) */
} ab_http;

/* Listens on o->listen and starts the polling thread. 0, or -1 with *err:
 * AB_E_INVALID a bad or unresolvable address, AB_E_CONFLICT the address is
 * in use, AB_E_UNAVAILABLE it cannot be listened on, AB_E_INTERNAL a thread
 * or the daemon cannot start. h is left stopped on failure. */
int ab_http_start(ab_http *h, const ab_http_opts *o, ab_err **err);
/* The same request path with no listening socket and no thread of its own
 * (the HTTP fuzz target): the caller hands it connections with
 * MHD_add_connection(h->mhd, ...) and drives it with MHD_run(h->mhd). */
int ab_http_start_external(ab_http *h, const ab_http_opts *o, ab_err **err);

/* Stopping, in three steps so the user can end its own relays between
 * them: ab_http_quiesce stops accepting (requests in progress go on);
 * ab_http_drain ends parked streams and waits for every handler in flight;
 * ab_http_stop stops the daemon (every connection closed) and frees the
 * tables. Each does nothing on a server that is not running. */
void ab_http_quiesce(ab_http *h);
void ab_http_drain(ab_http *h);
void ab_http_stop(ab_http *h);

/* Appends the HTTP gauges and counters (connections, streams, requests in
 * flight, closed at the head deadline, refused by a cap) as Prometheus text. */
void ab_http_counts(ab_http *h, ab_buf *b);

#endif

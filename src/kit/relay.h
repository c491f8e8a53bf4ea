/* relay.h - a request passed on to another HTTP server (kit/relay.c): the
 * relay to a server in a box (REST's ports, rest/routes_ports.c) and to the
 * fleet node that owns a box (kit/forward.c). The opener (a worker)
 * connects, builds the head with relay_head, sends it and calls
 * relay_connected; from then on the server's life cycle drives it:
 * relay_body (MHD's thread) passes body bytes on as they arrive without
 * blocking, relay_answer (MHD's thread, after the body; every call that
 * parks calls it again) streams the answer back, and an answer 101 gets a
 * thread that relays the upgraded connection byte for byte. relay_free
 * releases it with the request; relay_shutdown ends every upgraded relay
 * at the server's stop. */
#ifndef AB_KIT_RELAY_H
#define AB_KIT_RELAY_H

#include "kit/server.h"

struct upgraded;

struct ab_proxy {
        char *peer;              /* the other server, for messages ("fleet node n2") */
        int64_t timeout_ms;      /* it must take each BODY_BUF of the body within this */
        int64_t head_timeout_ms; /* and send its answer's head within this after the body */
        int fd;                  /* the connection to it, or -1 */
        bool chunked;            /* the request body is re-framed as chunks */
        bool upgrade;            /* the client asked for an upgrade */
        bool failed;             /* writing the body failed: the answer decides */
        bool timed_out;
        int64_t write_deadline; /* monotonic ms, 0 = none */
        size_t progress;        /* body bytes taken since the deadline was set */
        bool end_queued;        /* a chunked body's last chunk is in out */
        int64_t head_deadline;  /* monotonic ms by which the answer's head must be in */
        ab_buf in;              /* the answer's head as it arrives */
        ab_buf out;             /* request body bytes not yet taken */
        ab_park *park;
        ab_stream_slot *slot;   /* an upgraded connection's stream slot */
        struct upgraded *relay; /* its relay, until the upgrade hands it to a thread */
        bool relay_started;
        void *user; /* the opener's own state, freed with user_free */
        void (*user_free)(void *user);
};

/* A relay to peer (copied; named in error answers). */
ab_proxy *relay_new(const char *peer, int64_t timeout_ms, int64_t head_timeout_ms);

/* Says what becomes of the client's header k: v: true when hdr dealt with
 * it (dropped it, or wrote its own form into b as "K: V\r\n"); false passes
 * it on as it is. */
typedef bool (*relay_hdr_fn)(ab_req *r, void *arg, ab_buf *b, const char *k, const char *v);

/* The head for the other server into b: r's method and target, the
 * client's headers but the connection's own (relay_hop_header) and what hdr
 * takes, X-Forwarded-For/-Proto/-Host, the body's framing, extra (whole
 * "K: V\r\n" lines, or NULL) and Connection: close (or Upgrade). -1 with an
 * answer in *ret when the request cannot be passed on safely (a line break
 * in a header, conflicting framing). */
int relay_head(ab_req *r, ab_proxy *px, const char *target, relay_hdr_fn hdr, void *arg,
               const char *extra, ab_buf *b, enum MHD_Result *ret);
/* The connection fd (owned by px from now on) has the head: the request's
 * body and answer follow through the server's life cycle. */
void relay_connected(ab_req *r, ab_proxy *px, int fd);

enum MHD_Result relay_body(ab_req *r, const char *data, size_t *size);
enum MHD_Result relay_answer(ab_req *r);
void relay_free(ab_proxy *px);
void relay_shutdown(void);

/* Headers never passed on: the connection's own (RFC 9110 7.6.1), framing,
 * X-Forwarded-*, Expect. */
bool relay_hop_header(const char *n);
/* A method token a relay may pass on. */
bool relay_method_ok(const char *m);

#endif

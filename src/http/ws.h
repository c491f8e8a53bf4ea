/* ws.h - a small WebSocket (RFC 6455) layer for the connections that
 * libmicrohttpd hands over after a 101 (MHD_create_response_for_upgrade):
 * the opening handshake's key, subprotocol offers, and framing (server
 * side: unmasked frames out, masked frames in, fragments reassembled,
 * control frames, size limits). No extensions (permessage-deflate is never
 * offered back). docs/api.md says why this and not libwebsockets. */
#ifndef AB_WS_H
#define AB_WS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define WS_PROTOCOL   "agentbox.terminal.v1" /* the subprotocol of terminals */
#define WS_ACCEPT_LEN 28                     /* base64 of a SHA-1 */

enum { WS_CONT = 0, WS_TEXT = 1, WS_BINARY = 2, WS_CLOSE = 8, WS_PING = 9, WS_PONG = 10 };

/* Close codes we send. */
enum {
        WS_CLOSE_NORMAL = 1000,
        WS_CLOSE_GOING_AWAY = 1001,
        WS_CLOSE_PROTOCOL = 1002,
        WS_CLOSE_BAD_DATA = 1007,
        WS_CLOSE_TOO_BIG = 1009,
        WS_CLOSE_ERROR = 1011,
};

/* True when key is a valid Sec-WebSocket-Key (base64 of 16 bytes). */
bool ws_key_valid(const char *key);
/* Sec-WebSocket-Accept for key: base64(SHA-1(key + the RFC's GUID)). */
void ws_accept(const char *key, char out[WS_ACCEPT_LEN + 1]);
/* True when the comma-separated list `offer` (may be NULL) holds `name`
 * (token compare, case-sensitive as RFC 6455 says). */
bool ws_offers(const char *offer, const char *name);
/* "Bearer TOKEN" when the request is a WebSocket upgrade (upgrade header
 * "websocket") whose Sec-WebSocket-Protocol offers "bearer.TOKEN" next to
 * WS_PROTOCOL (browsers cannot set Authorization on a WebSocket), else NULL.
 * Free with free(). */
char *ws_auth_from_protocols(const char *upgrade, const char *protocols);

/* One server-side WebSocket connection. Not thread-safe. */
typedef struct ws_conn {
        int fd;
        size_t max_msg; /* largest message accepted (bytes after reassembly) */
        uint8_t *in;    /* bytes received and not yet parsed: in[start..end) */
        size_t start, end, cap;
        uint8_t *msg; /* a fragmented message being reassembled */
        size_t msg_len;
        int msg_op; /* its opcode, or -1 when none is open */
} ws_conn;

void ws_init(ws_conn *c, int fd, size_t max_msg);
void ws_free(ws_conn *c);

typedef struct ws_msg {
        int op;              /* WS_TEXT, WS_BINARY (whole messages), WS_CLOSE, WS_PING, WS_PONG */
        const uint8_t *data; /* valid until the next ws_feed / ws_read / ws_next */
        size_t len;
        uint16_t close_code; /* WS_CLOSE: the peer's code, or 1005 when none */
} ws_msg;

/* Appends bytes read elsewhere (libmicrohttpd's extra_in). */
void ws_feed(ws_conn *c, const void *p, size_t n);
/* One read(2) from the socket: >0 bytes, 0 at EOF, -errno (-EAGAIN). */
long ws_read(ws_conn *c);
/* The next message: 1 = *m, 0 = incomplete (read more), -1 = the peer broke
 * the protocol (*code: the close code to answer with). */
int ws_next(ws_conn *c, ws_msg *m, uint16_t *code);

/* Sends one frame (FIN, unmasked), waiting up to timeout_ms for the peer to
 * take it (-1 = forever). 0 or -errno (-ETIMEDOUT). */
int ws_send(ws_conn *c, int op, const void *p, size_t n, int timeout_ms);
/* Sends a close frame with code and a short reason. */
int ws_send_close(ws_conn *c, uint16_t code, const char *reason, int timeout_ms);

/* True when p[0..n) is valid UTF-8. */
bool ws_utf8_ok(const uint8_t *p, size_t n);

#endif

/* ws.c - WebSocket framing (RFC 6455) on a socket libmicrohttpd handed
 * over after an upgrade; see ws.h. */
#include "http/ws.h"
#include "base/util.h"

#include <errno.h>
#include <openssl/evp.h>
#include <poll.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

static const char ws_guid[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

bool ws_key_valid(const char *key)
{
        if (!key || strlen(key) != 24 || strcmp(key + 22, "==") != 0)
                return false;
        unsigned char out[24];
        return EVP_DecodeBlock(out, (const unsigned char *)key, 24) == 18;
}

void ws_accept(const char *key, char out[WS_ACCEPT_LEN + 1])
{
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned int len = 0;
        _cleanup_free_ char *s = xasprintf("%s%s", key, ws_guid);
        if (!EVP_Digest(s, strlen(s), md, &len, EVP_sha1(), NULL) || len != 20)
                abort();
        EVP_EncodeBlock((unsigned char *)out, md, 20);
        out[WS_ACCEPT_LEN] = 0;
}

/* Calls fn on each trimmed token of a comma-separated list until it returns true. */
static bool each_token(const char *list, bool (*fn)(const char *t, size_t n, void *ud), void *ud)
{
        const char *p = list;
        while (p && *p) {
                while (*p == ' ' || *p == '\t' || *p == ',')
                        p++;
                const char *e = p;
                while (*e && *e != ',')
                        e++;
                const char *t = e;
                while (t > p && (t[-1] == ' ' || t[-1] == '\t'))
                        t--;
                if (t > p && fn(p, (size_t)(t - p), ud))
                        return true;
                p = e;
        }
        return false;
}

static bool tok_eq(const char *t, size_t n, void *ud)
{
        const char *name = ud;
        return strlen(name) == n && memcmp(t, name, n) == 0;
}

bool ws_offers(const char *offer, const char *name)
{
        return each_token(offer, tok_eq, (void *)name);
}

static bool tok_bearer(const char *t, size_t n, void *ud)
{
        char **out = ud;
        if (n <= 7 || memcmp(t, "bearer.", 7) != 0)
                return false;
        *out = xasprintf("Bearer %.*s", (int)(n - 7), t + 7);
        return true;
}

char *ws_auth_from_protocols(const char *upgrade, const char *protocols)
{
        char *out = NULL;
        if (!upgrade || strcasecmp(upgrade, "websocket") != 0 || !ws_offers(protocols, WS_PROTOCOL))
                return NULL;
        each_token(protocols, tok_bearer, &out);
        return out;
}

/* ---- framing ---- */

void ws_init(ws_conn *c, int fd, size_t max_msg)
{
        *c = (ws_conn){.fd = fd, .max_msg = max_msg, .msg_op = -1};
}

void ws_free(ws_conn *c)
{
        free(c->in);
        free(c->msg);
        *c = (ws_conn){.fd = -1, .msg_op = -1};
}

/* Room for n more bytes at the end of in. */
static void room(ws_conn *c, size_t n)
{
        if (c->start > 0 && c->start == c->end)
                c->start = c->end = 0;
        if (c->end + n <= c->cap)
                return;
        if (c->start > 0) {
                memmove(c->in, c->in + c->start, c->end - c->start);
                c->end -= c->start;
                c->start = 0;
        }
        if (c->end + n > c->cap) {
                c->cap = xadd(c->end, n) < 16384 ? 16384 : xmul(xadd(c->end, n), 2);
                c->in = xrealloc(c->in, c->cap);
        }
}

void ws_feed(ws_conn *c, const void *p, size_t n)
{
        if (!n)
                return;
        room(c, n);
        memcpy(c->in + c->end, p, n);
        c->end += n;
}

long ws_read(ws_conn *c)
{
        room(c, 16384);
        for (;;) {
                ssize_t n = recv(c->fd, c->in + c->end, c->cap - c->end, MSG_DONTWAIT);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                c->end += (size_t)n;
                return (long)n;
        }
}

bool ws_utf8_ok(const uint8_t *s, size_t n)
{
        static const uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
        size_t i = 0;
        while (i < n) {
                uint8_t b = s[i];
                size_t len;
                uint32_t cp;
                if (b < 0x80) {
                        i++;
                        continue;
                } else if ((b & 0xe0) == 0xc0) {
                        len = 2;
                        cp = b & 0x1f;
                } else if ((b & 0xf0) == 0xe0) {
                        len = 3;
                        cp = b & 0x0f;
                } else if ((b & 0xf8) == 0xf0) {
                        len = 4;
                        cp = b & 0x07;
                } else {
                        return false;
                }
                if (i + len > n)
                        return false;
                for (size_t k = 1; k < len; k++) {
                        if ((s[i + k] & 0xc0) != 0x80)
                                return false;
                        cp = cp << 6 | (s[i + k] & 0x3f);
                }
                if (cp < min[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
                        return false;
                i += len;
        }
        return true;
}

static int fail(uint16_t *code, uint16_t v)
{
        *code = v;
        return -1;
}

int ws_next(ws_conn *c, ws_msg *m, uint16_t *code)
{
        *m = (ws_msg){0};
        for (;;) {
                size_t avail = c->end - c->start;
                if (avail < 2)
                        return 0;
                const uint8_t *p = c->in + c->start;
                bool fin = p[0] & 0x80, masked = p[1] & 0x80;
                int op = p[0] & 0x0f;
                uint64_t len = p[1] & 0x7f;
                size_t hdr = 2;
                if (p[0] & 0x70)
                        return fail(code, WS_CLOSE_PROTOCOL); /* no extension was agreed */
                if (!masked)
                        return fail(code, WS_CLOSE_PROTOCOL); /* clients must mask */
                if (len == 126) {
                        if (avail < 4)
                                return 0;
                        len = (uint64_t)p[2] << 8 | p[3];
                        hdr = 4;
                } else if (len == 127) {
                        if (avail < 10)
                                return 0;
                        len = 0;
                        for (int i = 0; i < 8; i++)
                                len = len << 8 | p[2 + i];
                        hdr = 10;
                        if (len >> 63)
                                return fail(code, WS_CLOSE_PROTOCOL);
                }
                bool control = op & 0x8;
                if (control && (!fin || len > 125))
                        return fail(code, WS_CLOSE_PROTOCOL);
                if (op != WS_CONT && op != WS_TEXT && op != WS_BINARY && op != WS_CLOSE &&
                    op != WS_PING && op != WS_PONG)
                        return fail(code, WS_CLOSE_PROTOCOL);
                /* Checked before the payload arrives: nothing is buffered for it. */
                uint64_t total = control ? len : (uint64_t)c->msg_len + len;
                if (total > c->max_msg)
                        return fail(code, WS_CLOSE_TOO_BIG);
                if (avail < hdr + 4 + len)
                        return 0;
                uint8_t *data = c->in + c->start + hdr + 4;
                const uint8_t *mask = data - 4;
                for (uint64_t i = 0; i < len; i++)
                        data[i] ^= mask[i & 3];
                c->start += hdr + 4 + (size_t)len;

                if (control) {
                        m->op = op;
                        m->data = data;
                        m->len = (size_t)len;
                        if (op == WS_CLOSE) {
                                m->close_code = 1005;
                                if (len == 1)
                                        return fail(code, WS_CLOSE_PROTOCOL);
                                if (len >= 2) {
                                        m->close_code = (uint16_t)(data[0] << 8 | data[1]);
                                        m->data += 2;
                                        m->len -= 2;
                                }
                        }
                        return 1;
                }
                if (op == WS_CONT && c->msg_op < 0)
                        return fail(code, WS_CLOSE_PROTOCOL); /* nothing to continue */
                if (op != WS_CONT && c->msg_op >= 0)
                        return fail(code, WS_CLOSE_PROTOCOL); /* the last one is unfinished */
                if (op != WS_CONT && fin) {
                        if (op == WS_TEXT && !ws_utf8_ok(data, (size_t)len))
                                return fail(code, WS_CLOSE_BAD_DATA);
                        *m = (ws_msg){.op = op, .data = data, .len = (size_t)len};
                        return 1;
                }
                if (op != WS_CONT)
                        c->msg_op = op;
                c->msg = xrealloc(c->msg, xadd(c->msg_len, (size_t)len) + 1);
                memcpy(c->msg + c->msg_len, data, (size_t)len);
                c->msg_len += (size_t)len;
                if (!fin)
                        continue;
                if (c->msg_op == WS_TEXT && !ws_utf8_ok(c->msg, c->msg_len))
                        return fail(code, WS_CLOSE_BAD_DATA);
                *m = (ws_msg){.op = c->msg_op, .data = c->msg, .len = c->msg_len};
                c->msg_op = -1;
                c->msg_len = 0; /* the bytes stay in msg until the next fragment */
                return 1;
        }
}

int ws_send(ws_conn *c, int op, const void *p, size_t n, int timeout_ms)
{
        uint8_t hdr[10];
        size_t h = 2;
        hdr[0] = (uint8_t)(0x80 | op);
        if (n < 126) {
                hdr[1] = (uint8_t)n;
        } else if (n <= 0xffff) {
                hdr[1] = 126;
                hdr[2] = (uint8_t)(n >> 8);
                hdr[3] = (uint8_t)n;
                h = 4;
        } else {
                hdr[1] = 127;
                for (int i = 0; i < 8; i++)
                        hdr[2 + i] = (uint8_t)((uint64_t)n >> (56 - 8 * i));
                h = 10;
        }
        /* One send when it fits: a header sent apart from its payload waits
         * for the peer's delayed ACK under Nagle's algorithm. */
        if (n <= 16384) {
                uint8_t one[10 + 16384];
                memcpy(one, hdr, h);
                if (n)
                        memcpy(one + h, p, n);
                return ab_send_all(c->fd, one, h + n, timeout_ms);
        }
        int r = ab_send_all(c->fd, hdr, h, timeout_ms);
        return r < 0 ? r : ab_send_all(c->fd, p, n, timeout_ms);
}

int ws_send_close(ws_conn *c, uint16_t code, const char *reason, int timeout_ms)
{
        uint8_t b[125];
        size_t n = reason ? strlen(reason) : 0;
        if (n > sizeof(b) - 2)
                n = sizeof(b) - 2;
        b[0] = (uint8_t)(code >> 8);
        b[1] = (uint8_t)code;
        if (n)
                memcpy(b + 2, reason, n);
        return ws_send(c, WS_CLOSE, b, n + 2, timeout_ms);
}

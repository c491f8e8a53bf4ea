/* handshake.c - the TCP handshake of agentbox-init (handshake.h). */
#include "proto/handshake.h"
#include "base/id.h"
#include "base/util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

int abh_parse_addr(const char *s, struct sockaddr_storage *ss, unsigned *len)
{
        const char *colon = strrchr(s, ':');
        char host[64];
        if (!colon || colon == s)
                return -EINVAL;
        const char *h = s;
        size_t hl = (size_t)(colon - s);
        bool v6 = s[0] == '[';
        if (v6) {
                if (hl < 3 || s[hl - 1] != ']')
                        return -EINVAL;
                h++, hl -= 2;
        }
        if (hl >= sizeof(host))
                return -EINVAL;
        memcpy(host, h, hl);
        host[hl] = 0;
        unsigned long port = 0;
        const char *p = colon + 1;
        if (!*p || strlen(p) > 5)
                return -EINVAL;
        for (; *p; p++) {
                if (*p < '0' || *p > '9')
                        return -EINVAL;
                port = port * 10 + (unsigned long)(*p - '0');
        }
        if (port == 0 || port > 65535)
                return -EINVAL;
        memset(ss, 0, sizeof(*ss));
        if (v6) {
                struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;
                a->sin6_family = AF_INET6;
                a->sin6_port = htons((uint16_t)port);
                if (inet_pton(AF_INET6, host, &a->sin6_addr) != 1)
                        return -EINVAL;
                *len = sizeof(*a);
        } else {
                struct sockaddr_in *a = (struct sockaddr_in *)ss;
                a->sin_family = AF_INET;
                a->sin_port = htons((uint16_t)port);
                if (inet_pton(AF_INET, host, &a->sin_addr) != 1)
                        return -EINVAL;
                *len = sizeof(*a);
        }
        return 0;
}

static const char label_init[] = "agentbox-init tcp v1 init";
static const char label_client[] = "agentbox-init tcp v1 client";

void abh_mac(const uint8_t secret[ABH_SECRET_LEN], abh_role role, const uint8_t nc[ABH_NONCE_LEN],
             const uint8_t ns[ABH_NONCE_LEN], uint8_t out[ABH_MAC_LEN])
{
        const char *label = role == ABH_ROLE_INIT ? label_init : label_client;
        /* the label with its NUL: no label is a prefix of another's input */
        const void *parts[3] = {label, nc, ns};
        size_t lens[3] = {strlen(label) + 1, ABH_NONCE_LEN, ABH_NONCE_LEN};
        ab_hmac_sha256(secret, ABH_SECRET_LEN, parts, lens, 3, out);
}

int abh_parse_hello(const void *buf, size_t len, uint8_t nc[ABH_NONCE_LEN])
{
        if (len != ABH_HELLO_LEN || memcmp(buf, ABH_MAGIC, 4) != 0)
                return -EBADMSG;
        memcpy(nc, (const uint8_t *)buf + 4, ABH_NONCE_LEN);
        return 0;
}

int abh_parse_challenge(const void *buf, size_t len, const uint8_t secret[ABH_SECRET_LEN],
                        const uint8_t nc[ABH_NONCE_LEN], uint8_t ns[ABH_NONCE_LEN])
{
        const uint8_t *p = buf;
        uint8_t want[ABH_MAC_LEN];
        if (len != ABH_CHALLENGE_LEN || memcmp(p, ABH_MAGIC, 4) != 0)
                return -EBADMSG;
        abh_mac(secret, ABH_ROLE_INIT, nc, p + 4, want);
        bool ok = ab_ct_equal(want, p + 4 + ABH_NONCE_LEN, ABH_MAC_LEN);
        ab_wipe(want, sizeof(want));
        if (!ok)
                return -EACCES;
        memcpy(ns, p + 4, ABH_NONCE_LEN);
        return 0;
}

int abh_check_proof(const void *buf, size_t len, const uint8_t secret[ABH_SECRET_LEN],
                    const uint8_t nc[ABH_NONCE_LEN], const uint8_t ns[ABH_NONCE_LEN])
{
        uint8_t want[ABH_MAC_LEN];
        if (len != ABH_PROOF_LEN)
                return -EBADMSG;
        abh_mac(secret, ABH_ROLE_CLIENT, nc, ns, want);
        bool ok = ab_ct_equal(want, buf, ABH_MAC_LEN);
        ab_wipe(want, sizeof(want));
        return ok ? 0 : -EACCES;
}

static int hexval(unsigned char c)
{
        if (c >= '0' && c <= '9')
                return c - '0';
        if (c >= 'a' && c <= 'f')
                return c - 'a' + 10;
        if (c >= 'A' && c <= 'F')
                return c - 'A' + 10;
        return -1;
}

int abh_secret_parse(const void *buf, size_t len, uint8_t out[ABH_SECRET_LEN])
{
        const unsigned char *p = buf;
        if (len == ABH_SECRET_LEN) {
                memcpy(out, p, ABH_SECRET_LEN);
                return 0;
        }
        if (len == 2 * ABH_SECRET_LEN + 1 && p[len - 1] == '\n')
                len--;
        if (len != 2 * ABH_SECRET_LEN)
                return -EINVAL;
        uint8_t tmp[ABH_SECRET_LEN];
        for (size_t i = 0; i < ABH_SECRET_LEN; i++) {
                int hi = hexval(p[2 * i]), lo = hexval(p[2 * i + 1]);
                if (hi < 0 || lo < 0) {
                        ab_wipe(tmp, sizeof(tmp));
                        return -EINVAL;
                }
                tmp[i] = (uint8_t)(hi << 4 | lo);
        }
        memcpy(out, tmp, ABH_SECRET_LEN);
        ab_wipe(tmp, sizeof(tmp));
        return 0;
}

int abh_secret_load(const char *path, uint8_t out[ABH_SECRET_LEN])
{
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return -errno;
        uint8_t buf[4097];
        ssize_t n = ab_read_full(fd, buf, sizeof(buf));
        if (n < 0)
                return (int)n;
        int r = (size_t)n >= sizeof(buf) ? -EINVAL : abh_secret_parse(buf, (size_t)n, out);
        ab_wipe(buf, sizeof(buf));
        return r;
}

/* Waits for fd until the monotonic deadline: 0, -ETIMEDOUT or -errno. */
static int wait_until(int fd, short events, uint64_t deadline_ms)
{
        for (;;) {
                uint64_t now = ab_now_ms();
                if (now >= deadline_ms)
                        return -ETIMEDOUT;
                struct pollfd p = {.fd = fd, .events = events};
                int n = poll(&p, 1, (int)(deadline_ms - now));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                if (n > 0)
                        return 0;
        }
}

/* Reads exactly len bytes by the deadline; -ECONNRESET at an early EOF. */
static int recv_exact(int fd, void *buf, size_t len, uint64_t deadline_ms)
{
        size_t off = 0;
        while (off < len) {
                ssize_t n = recv(fd, (char *)buf + off, len - off, MSG_DONTWAIT);
                if (n > 0) {
                        off += (size_t)n;
                        continue;
                }
                if (n == 0)
                        return -ECONNRESET;
                if (errno == EINTR)
                        continue;
                if (errno != EAGAIN)
                        return -errno;
                int r = wait_until(fd, POLLIN, deadline_ms);
                if (r < 0)
                        return r;
        }
        return 0;
}

static int send_by(int fd, const void *buf, size_t len, uint64_t deadline_ms)
{
        uint64_t now = ab_now_ms();
        if (now >= deadline_ms)
                return -ETIMEDOUT;
        return ab_send_all(fd, buf, len, (int)(deadline_ms - now));
}

int abh_serve(int fd, const uint8_t secret[ABH_SECRET_LEN], uint64_t deadline_ms)
{
        uint8_t hello[ABH_HELLO_LEN], nc[ABH_NONCE_LEN], ch[ABH_CHALLENGE_LEN];
        uint8_t proof[ABH_PROOF_LEN];
        int r = recv_exact(fd, hello, sizeof(hello), deadline_ms);
        if (r < 0)
                return r;
        r = abh_parse_hello(hello, sizeof(hello), nc);
        if (r < 0)
                return r;
        memcpy(ch, ABH_MAGIC, 4);
        ab_random_bytes(ch + 4, ABH_NONCE_LEN);
        abh_mac(secret, ABH_ROLE_INIT, nc, ch + 4, ch + 4 + ABH_NONCE_LEN);
        r = send_by(fd, ch, sizeof(ch), deadline_ms);
        if (r < 0)
                return r;
        r = recv_exact(fd, proof, sizeof(proof), deadline_ms);
        if (r < 0)
                return r;
        r = abh_check_proof(proof, sizeof(proof), secret, nc, ch + 4);
        if (r < 0)
                return r;
        return send_by(fd, ABH_ACCEPT, ABH_ACCEPT_LEN, deadline_ms);
}

static int client_fail(int r, ab_err **err)
{
        switch (r) {
        case -EACCES:
                return ab_err_set(err, AB_E_PERMISSION, 0,
                                  "box init does not hold this box's secret (a different box at "
                                  "that address?)");
        case -ETIMEDOUT:
                return ab_err_set(err, AB_E_TIMEOUT, 0, "box init did not finish the handshake");
        case -EBADMSG:
                return ab_err_set(err, AB_E_UNAVAILABLE, 0,
                                  "box init answered the handshake with something else");
        default:
                return ab_err_set(err, AB_E_UNAVAILABLE, -r,
                                  "box init closed the connection during the handshake");
        }
}

int abh_client(int fd, const uint8_t secret[ABH_SECRET_LEN], int timeout_ms, ab_err **err)
{
        uint64_t deadline = ab_now_ms() + (uint64_t)(timeout_ms > 0 ? timeout_ms : ABH_DEADLINE_MS);
        uint8_t hello[ABH_HELLO_LEN], ch[ABH_CHALLENGE_LEN], ns[ABH_NONCE_LEN];
        uint8_t proof[ABH_PROOF_LEN], acc[ABH_ACCEPT_LEN];
        memcpy(hello, ABH_MAGIC, 4);
        ab_random_bytes(hello + 4, ABH_NONCE_LEN);
        int r = send_by(fd, hello, sizeof(hello), deadline);
        if (r == 0)
                r = recv_exact(fd, ch, sizeof(ch), deadline);
        if (r == 0)
                r = abh_parse_challenge(ch, sizeof(ch), secret, hello + 4, ns);
        if (r < 0)
                return client_fail(r, err);
        abh_mac(secret, ABH_ROLE_CLIENT, hello + 4, ns, proof);
        r = send_by(fd, proof, sizeof(proof), deadline);
        if (r == 0)
                r = recv_exact(fd, acc, sizeof(acc), deadline);
        if (r == -ECONNRESET || r == -EPIPE)
                r = -EACCES; /* init hangs up on a proof it rejects */
        if (r == 0 && memcmp(acc, ABH_ACCEPT, ABH_ACCEPT_LEN) != 0)
                r = -EBADMSG;
        return r < 0 ? client_fail(r, err) : 0;
}

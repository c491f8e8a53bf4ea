/* port.c - PORT: a TCP connection to a port on the box's own loopback,
 * relayed over the client's connection.
 *
 * The server reaches a server running in a native or Docker box by opening a
 * socket inside the box's network namespace; a pod's namespace is on another
 * machine, so there the server asks init, which connects to 127.0.0.1:PORT
 * (then [::1]:PORT) and, after OK, copies bytes both ways until both sides
 * have ended. Only loopback: the request names a port, never an address, so
 * it opens no way out of the box's network mode. Runs in the session
 * process; the copy ends when either side fails. */
#include "init/init_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>

#define PORT_CONNECT_DEFAULT_MS (10 * 1000)
#define PORT_BUF                (64 * 1024)

/* Waits for a non-blocking connect on fd. 0 or -errno (-ETIMEDOUT). */
static int connect_wait(int fd, uint64_t deadline)
{
        uint64_t now = ab_now_ms();
        int r = now >= deadline ? -ETIMEDOUT : abp_wait_fd(fd, POLLOUT, (int)(deadline - now));
        if (r < 0)
                return r;
        int so = 0;
        socklen_t sl = sizeof(so);
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &sl) < 0)
                return -errno;
        return so ? -so : 0;
}

/* A connected non-blocking socket to 127.0.0.1:port, else [::1]:port.
 * -errno: the first address's error unless only it was refused. */
static int connect_loopback(uint16_t port, uint64_t deadline)
{
        struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_port = htons(port)};
        a4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons(port)};
        a6.sin6_addr = in6addr_loopback;
        const struct sockaddr *addrs[] = {(struct sockaddr *)&a4, (struct sockaddr *)&a6};
        const socklen_t lens[] = {sizeof(a4), sizeof(a6)};
        int err = -ECONNREFUSED;
        for (int i = 0; i < 2; i++) {
                _cleanup_close_ int fd =
                    socket(addrs[i]->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
                if (fd < 0) {
                        if (i == 0)
                                err = -errno;
                        continue;
                }
                int r = connect(fd, addrs[i], lens[i]) == 0 ? 0 : -errno;
                if (r == -EINPROGRESS || r == -EINTR)
                        r = connect_wait(fd, deadline);
                if (r == 0)
                        return steal_fd(&fd);
                /* [::1] matters only when 127.0.0.1 was refused */
                if (i == 0)
                        err = r;
                if (r != -ECONNREFUSED && r != -EADDRNOTAVAIL && r != -EAFNOSUPPORT)
                        break;
        }
        return err;
}

/* One direction of the copy: bytes read from `from`, waiting to go to `to`. */
typedef struct half {
        int from, to;
        uint8_t buf[PORT_BUF];
        size_t off, len;
        bool eof;  /* `from` ended: `to` gets a half-close once buf is empty */
        bool done; /* ... and it got it */
} half;

/* Moves what it can; 0, or -errno when a side failed. */
static int half_step(half *h, short rev_from, short rev_to)
{
        if (!h->eof && h->len == 0 && (rev_from & (POLLIN | POLLHUP | POLLERR))) {
                ssize_t n = read(h->from, h->buf, sizeof(h->buf));
                if (n > 0) {
                        h->off = 0;
                        h->len = (size_t)n;
                } else if (n == 0) {
                        h->eof = true;
                } else if (errno != EAGAIN && errno != EINTR) {
                        return -errno;
                }
        }
        if (h->len > 0 && (rev_to & (POLLOUT | POLLERR | POLLHUP) || h->off == 0)) {
                ssize_t n = send(h->to, h->buf + h->off, h->len, MSG_NOSIGNAL);
                if (n > 0) {
                        h->off += (size_t)n;
                        h->len -= (size_t)n;
                } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
                        return -errno;
                }
        }
        if (h->eof && h->len == 0 && !h->done) {
                shutdown(h->to, SHUT_WR);
                h->done = true;
        }
        return 0;
}

/* Copies both ways between a and b until both directions ended. */
static void relay(int a, int b, const void *pre, size_t pre_len)
{
        _cleanup_free_ half *ab = xzalloc(sizeof(*ab));
        _cleanup_free_ half *ba = xzalloc(sizeof(*ba));
        *ab = (half){.from = a, .to = b};
        *ba = (half){.from = b, .to = a};
        if (pre_len) { /* what the client sent after its request (at most a frame's worth) */
                size_t n = pre_len < sizeof(ab->buf) ? pre_len : sizeof(ab->buf);
                memcpy(ab->buf, pre, n);
                ab->len = n;
        }
        while (!ab->done || !ba->done) {
                struct pollfd p[2] = {{.fd = a}, {.fd = b}};
                /* read a side only while its direction's buffer is empty;
                 * wait for the other side to take bytes otherwise */
                if (!ab->eof && ab->len == 0)
                        p[0].events |= POLLIN;
                if (!ba->eof && ba->len == 0)
                        p[1].events |= POLLIN;
                if (ab->len)
                        p[1].events |= POLLOUT;
                if (ba->len)
                        p[0].events |= POLLOUT;
                if (poll(p, 2, -1) < 0) {
                        if (errno == EINTR)
                                continue;
                        return;
                }
                if ((p[0].revents | p[1].revents) & (POLLERR | POLLNVAL))
                        return; /* a reset ends both ways, as it would without the relay */
                if (half_step(ab, p[0].revents, p[1].revents) < 0 ||
                    half_step(ba, p[1].revents, p[0].revents) < 0)
                        return;
        }
}

void init_port(init_conn *c, const abp_frame *f)
{
        uint32_t port, timeout_ms;
        if (abp_dec_port(f, &port, &timeout_ms) < 0) {
                init_send_error(c, "invalid_argument", "PORT needs a PORT in 1..65535");
                return;
        }
        uint64_t deadline = ab_now_ms() + (timeout_ms ? timeout_ms : PORT_CONNECT_DEFAULT_MS);
        _cleanup_close_ int fd = connect_loopback((uint16_t)port, deadline);
        if (fd == -ETIMEDOUT) {
                init_send_error(c, "timeout", "port %u does not answer", port);
                return;
        }
        if (fd == -ECONNREFUSED || fd == -EADDRNOTAVAIL) {
                init_send_error(c, "unavailable", "nothing listens on port %u", port);
                return;
        }
        if (fd < 0) {
                init_send_error(c, "unavailable", "cannot reach port %u: %s", port, strerror(-fd));
                return;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        abp_buf b = {0};
        if (abp_enc_empty(&b, ABP_OK) < 0 || init_send(c, &b) < 0) {
                abp_buf_free(&b);
                return;
        }
        abp_buf_free(&b);
        int fl = fcntl(c->fd, F_GETFL);
        if (fl < 0 || fcntl(c->fd, F_SETFL, fl | O_NONBLOCK) < 0)
                return;
        relay(c->fd, fd, c->rd.p ? c->rd.p + c->rd.start : NULL, c->rd.end - c->rd.start);
        if (fl >= 0)
                fcntl(c->fd, F_SETFL, fl);
}

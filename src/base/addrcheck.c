/* addrcheck.c - which addresses and names egress may never reach
 * (addrcheck.h). */
#include "base/addrcheck.h"
#include "base/util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <strings.h>
#include <unistd.h>

static uint32_t be32(const uint8_t *p)
{
        return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Why an IPv4 address (host order) is internal, or NULL when it may be reached. */
static const char *v4_reason(uint32_t a)
{
        static const struct {
                uint32_t net;
                int bits;
                const char *why;
        } nets[] = {
            /* most specific first: they sit inside wider ranges below */
            {0xA9FEA9FE, 32, "cloud metadata"},
            {0xFFFFFFFF, 32, "broadcast"},
            {0x00000000, 8, "unspecified"},
            {0x0A000000, 8, "private"},
            {0x64400000, 10, "carrier-grade NAT"},
            {0x7F000000, 8, "loopback"},
            {0xA9FE0000, 16, "link-local"},
            {0xAC100000, 12, "private"},
            {0xC0000000, 24, "IETF protocol assignments"},
            {0xC0A80000, 16, "private"},
            {0xC6120000, 15, "benchmarking"},
            {0xE0000000, 4, "multicast"},
            {0xF0000000, 4, "reserved"},
        };
        for (size_t i = 0; i < AB_ARRAY_LEN(nets); i++) {
                uint32_t mask = (uint32_t)(~0ull << (32 - nets[i].bits));
                if ((a & mask) == nets[i].net)
                        return nets[i].why;
        }
        return NULL;
}

static const char *v6_reason(const uint8_t *b)
{
        static const uint8_t zero[16];
        static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        static const uint8_t nat64[12] = {0, 0x64, 0xff, 0x9b};
        static const uint8_t nat64_local[6] = {0, 0x64, 0xff, 0x9b, 0, 0x01};

        if (memcmp(b, zero, 15) == 0 && b[15] <= 1)
                return b[15] ? "loopback" : "unspecified";
        if (memcmp(b, zero, 12) == 0)
                return "IPv4-compatible (deprecated)";
        if (memcmp(b, mapped, 12) == 0)
                return v4_reason(be32(b + 12));
        if ((b[0] & 0xfe) == 0xfc)
                return "unique local";
        if (b[0] == 0xfe && (b[1] & 0xc0) == 0x80)
                return "link-local";
        if (b[0] == 0xfe && (b[1] & 0xc0) == 0xc0)
                return "site-local";
        if (b[0] == 0xff)
                return "multicast";
        /* Translation prefixes reach the IPv4 address embedded in them. */
        if (memcmp(b, nat64, 12) == 0 || memcmp(b, nat64_local, 6) == 0)
                return v4_reason(be32(b + 12));
        if (b[0] == 0x20 && b[1] == 0x02) /* 6to4 */
                return v4_reason(be32(b + 2));
        if (b[0] == 0x20 && b[1] == 0x01 && b[2] == 0 && b[3] == 0) { /* Teredo */
                const char *r = v4_reason(be32(b + 4));
                return r ? r : v4_reason(~be32(b + 12));
        }
        return NULL;
}

const char *ab_addr_fixed_reason(const struct sockaddr *sa)
{
        if (!sa)
                return "no address";
        if (sa->sa_family == AF_INET)
                return v4_reason(ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr));
        if (sa->sa_family == AF_INET6)
                return v6_reason(((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr);
        return "not an IP address";
}

/* ---- this host's own addresses ---- */

/* Read again at least this often, even when no change notice came (a lost
 * notice, or no rtnetlink socket at all: then on every check). */
#define HOST_REREAD_MS 5000
#define MAX_LISTEN     16

typedef struct {
        int family; /* AF_INET or AF_INET6 */
        uint8_t a[16];
} host_addr;

static pthread_mutex_t host_lock = PTHREAD_MUTEX_INITIALIZER;
static host_addr *host_ifs; /* the interfaces' addresses, as last read */
static size_t n_host_ifs;
static host_addr host_listen[MAX_LISTEN];
static size_t n_host_listen;
static int host_notices = -2; /* rtnetlink socket; -2 not tried yet, -1 none */
static uint64_t host_read_ms;
static bool host_known;

static void v4_addr(const uint8_t *p, host_addr *out)
{
        memset(out, 0, sizeof(*out));
        out->family = AF_INET;
        memcpy(out->a, p, 4);
}

/* The addresses sa names: itself, and for IPv6 any IPv4 address embedded in
 * it (v4-mapped, NAT64, 6to4, Teredo server and client), as v6_reason reads
 * them. Returns how many were stored in out (at most 3). */
static size_t addr_forms(const struct sockaddr *sa, host_addr out[3])
{
        static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        static const uint8_t nat64[12] = {0, 0x64, 0xff, 0x9b};
        static const uint8_t nat64_local[6] = {0, 0x64, 0xff, 0x9b, 0, 0x01};
        if (sa->sa_family == AF_INET) {
                v4_addr((const uint8_t *)&((const struct sockaddr_in *)sa)->sin_addr, &out[0]);
                return 1;
        }
        if (sa->sa_family != AF_INET6)
                return 0;
        const uint8_t *b = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
        if (memcmp(b, mapped, 12) == 0 || memcmp(b, nat64, 12) == 0 ||
            memcmp(b, nat64_local, 6) == 0) {
                v4_addr(b + 12, &out[0]);
                return 1;
        }
        memset(&out[0], 0, sizeof(out[0]));
        out[0].family = AF_INET6;
        memcpy(out[0].a, b, 16);
        if (b[0] == 0x20 && b[1] == 0x02) { /* 6to4 */
                v4_addr(b + 2, &out[1]);
                return 2;
        }
        if (b[0] == 0x20 && b[1] == 0x01 && b[2] == 0 && b[3] == 0) { /* Teredo */
                uint8_t client[4];
                for (int i = 0; i < 4; i++)
                        client[i] = (uint8_t)~b[12 + i];
                v4_addr(b + 4, &out[1]);
                v4_addr(client, &out[2]);
                return 3;
        }
        return 1;
}

/* A socket that hears of every address added or removed in this network
 * namespace, or -1. Opened before the first read, so no change slips
 * between the read and the subscription. */
static int open_notices(void)
{
        int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_ROUTE);
        if (fd < 0)
                return -1;
        struct sockaddr_nl nl = {.nl_family = AF_NETLINK,
                                 .nl_groups = RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR};
        if (bind(fd, (struct sockaddr *)&nl, sizeof(nl)) < 0) {
                close(fd);
                return -1;
        }
        return fd;
}

/* Empties the notice socket; true when anything had come (or was lost). */
static bool drain_notices(int fd)
{
        char buf[8192];
        bool changed = false;
        for (;;) {
                ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
                if (n > 0 || (n < 0 && errno == ENOBUFS))
                        changed = true;
                else if (!(n < 0 && errno == EINTR))
                        return changed;
        }
}

/* Reads the interfaces' addresses into host_ifs. Returns 0 or -errno (the
 * old list is kept). Called with host_lock held. */
static int read_host_ifs(void)
{
        struct ifaddrs *ifs = NULL;
        if (getifaddrs(&ifs) < 0)
                return -errno;
        size_t n = 0, cap = 0;
        host_addr *v = NULL;
        for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
                host_addr forms[3];
                if (!i->ifa_addr || addr_forms(i->ifa_addr, forms) == 0)
                        continue;
                if (n == cap) {
                        cap = cap ? xmul(cap, 2) : 16;
                        v = xrealloc(v, xmul(cap, sizeof(*v)));
                }
                v[n++] = forms[0];
        }
        freeifaddrs(ifs);
        free(host_ifs);
        host_ifs = v;
        n_host_ifs = n;
        return 0;
}

static bool held(const host_addr *list, size_t n, const host_addr *a)
{
        size_t len = a->family == AF_INET ? 4 : 16;
        for (size_t i = 0; i < n; i++)
                if (list[i].family == a->family && memcmp(list[i].a, a->a, len) == 0)
                        return true;
        return false;
}

/* "this host's address" when sa (or an address embedded in it) is one of
 * this host's, NULL when not. */
static const char *host_reason(const struct sockaddr *sa)
{
        host_addr forms[3];
        size_t nf = addr_forms(sa, forms);
        const char *why = NULL;
        pthread_mutex_lock(&host_lock);
        if (host_notices == -2)
                host_notices = open_notices();
        uint64_t now = ab_now_ms();
        bool stale = !host_known || host_notices < 0 || now - host_read_ms >= HOST_REREAD_MS;
        if (host_notices >= 0 && drain_notices(host_notices))
                stale = true;
        if (stale && read_host_ifs() == 0) {
                host_known = true;
                host_read_ms = now;
        }
        if (!host_known)
                why = "this host's addresses cannot be read";
        for (size_t i = 0; i < nf && !why; i++)
                if (held(host_ifs, n_host_ifs, &forms[i]) ||
                    held(host_listen, n_host_listen, &forms[i]))
                        why = "this host's address";
        pthread_mutex_unlock(&host_lock);
        return why;
}

const char *ab_addr_reason(const struct sockaddr *sa)
{
        const char *why = ab_addr_fixed_reason(sa);
        return why ? why : host_reason(sa);
}

int ab_addr_note_listen(const struct sockaddr *sa)
{
        host_addr forms[3];
        if (!sa || ab_addr_fixed_reason(sa) || addr_forms(sa, forms) == 0)
                return 0;
        int r = 0;
        pthread_mutex_lock(&host_lock);
        if (!held(host_listen, n_host_listen, &forms[0])) {
                if (n_host_listen < MAX_LISTEN)
                        host_listen[n_host_listen++] = forms[0];
                else
                        r = -ENOSPC;
        }
        pthread_mutex_unlock(&host_lock);
        return r;
}

/* Names refused before any lookup: cloud metadata services, which need not
 * look internal in DNS, and localhost names (RFC 6761), which a resolver may
 * send to the network when /etc/hosts does not match them exactly. */
const char *ab_name_reason(const char *host)
{
        static const char *const metadata[] = {"metadata.google.internal", "metadata"};
        size_t n = strlen(host);
        while (n > 0 && host[n - 1] == '.')
                n--;
        for (size_t i = 0; i < AB_ARRAY_LEN(metadata); i++)
                if (strlen(metadata[i]) == n && strncasecmp(host, metadata[i], n) == 0)
                        return "cloud metadata service";
        if ((n == 9 && strncasecmp(host, "localhost", 9) == 0) ||
            (n > 10 && strncasecmp(host + n - 10, ".localhost", 10) == 0))
                return "loopback name";
        return NULL;
}

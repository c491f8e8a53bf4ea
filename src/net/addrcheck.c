/* addrcheck.c - which addresses and names egress may never reach
 * (addrcheck.h). */
#include "net/addrcheck.h"
#include "base/util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <strings.h>

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

const char *ab_addr_reason(const struct sockaddr *sa)
{
        if (!sa)
                return "no address";
        if (sa->sa_family == AF_INET)
                return v4_reason(ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr));
        if (sa->sa_family == AF_INET6)
                return v6_reason(((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr);
        return "not an IP address";
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

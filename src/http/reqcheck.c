/* reqcheck.c - checks of a request's head before routing; see reqcheck.h. */
#include "http/reqcheck.h"
#include "base/codec.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define NAME_MAX_LEN 255

static bool ctl(unsigned v)
{
        return v < 0x20 || v == 0x7f;
}

bool ab_req_target_clean(const char *raw)
{
        if (!raw)
                return false;
        for (const char *p = raw; *p; p++) {
                if (ctl((unsigned char)*p))
                        return false;
                if (*p != '%')
                        continue;
                int hi = ab_hexval(p[1]), lo = hi < 0 ? -1 : ab_hexval(p[2]);
                if (hi >= 0 && lo >= 0 && ctl((unsigned)(hi * 16 + lo)))
                        return false;
        }
        return true;
}

/* A Host-like "name[:port]" split: the name lowercased without brackets or
 * a trailing dot into name, the port (-1 when absent). false when
 * malformed. */
static bool split_host(const char *s, size_t n, char name[NAME_MAX_LEN + 1], long *port)
{
        *port = -1;
        const char *end = s + n, *nb = s, *ne;
        if (n && *s == '[') {
                const char *rb = memchr(s, ']', n);
                if (!rb)
                        return false;
                nb = s + 1;
                ne = rb;
                s = rb + 1;
        } else {
                ne = memchr(s, ':', n);
                if (!ne)
                        ne = end;
                s = ne;
        }
        if (s < end) {
                if (*s != ':' || s + 1 == end || end - s > 6)
                        return false;
                long v = 0;
                for (const char *p = s + 1; p < end; p++) {
                        if (!isdigit((unsigned char)*p))
                                return false;
                        v = v * 10 + (*p - '0');
                }
                if (v < 1 || v > 65535)
                        return false;
                *port = v;
        }
        size_t nl = (size_t)(ne - nb);
        if (nl && nb[nl - 1] == '.')
                nl--;
        if (nl == 0 || nl > NAME_MAX_LEN)
                return false;
        for (size_t i = 0; i < nl; i++) {
                unsigned char c = (unsigned char)nb[i];
                if (!isalnum(c) && !strchr(".-_:", c))
                        return false;
                name[i] = (char)tolower(c);
        }
        name[nl] = 0;
        return true;
}

bool ab_req_host_loopback(const char *host)
{
        char name[NAME_MAX_LEN + 1];
        long port;
        if (!host || !split_host(host, strlen(host), name, &port))
                return false;
        size_t n = strlen(name);
        if (!strcmp(name, "localhost") || (n > 10 && !strcmp(name + n - 10, ".localhost")))
                return true;
        struct in_addr a4;
        if (host[0] != '[' && inet_pton(AF_INET, name, &a4) == 1)
                return (ntohl(a4.s_addr) >> 24) == 127;
        struct in6_addr a6;
        if (host[0] == '[' && inet_pton(AF_INET6, name, &a6) == 1)
                return IN6_IS_ADDR_LOOPBACK(&a6) ||
                       (IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127);
        return false;
}

bool ab_req_host_is(const char *host, const char *entry)
{
        char hn[NAME_MAX_LEN + 1], en[NAME_MAX_LEN + 1];
        long hp, ep;
        if (!host || !entry || !split_host(host, strlen(host), hn, &hp) ||
            !split_host(entry, strlen(entry), en, &ep))
                return false;
        return !strcmp(hn, en) && (ep < 0 || ep == hp);
}

/* Length of a Host-like s without its ":N" and a trailing dot. */
static size_t host_name_len(const char *s)
{
        size_t n = strcspn(s, ":");
        if (n > 0 && s[n - 1] == '.') /* a fully qualified name */
                n--;
        return n;
}

bool ab_req_host_box(const char *host, const char *domain, char port[AB_HOST_PORT_MAX + 1],
                     char box[AB_HOST_BOX_MAX + 1])
{
        if (!host || !domain || !*domain)
                return false;
        size_t hl = host_name_len(host), dl = host_name_len(domain);
        if (dl == 0 || hl < dl + 4 || host[hl - dl - 1] != '.' ||
            strncasecmp(host + hl - dl, domain, dl))
                return false;
        size_t pl = 0;
        while (pl < hl && isdigit((unsigned char)host[pl]))
                pl++;
        if (pl == 0 || pl > AB_HOST_PORT_MAX || host[pl] != '-')
                return false;
        size_t il = hl - dl - 1 - pl - 1;
        if (il == 0 || il > AB_HOST_BOX_MAX)
                return false;
        memcpy(port, host, pl);
        port[pl] = 0;
        for (size_t i = 0; i < il; i++)
                box[i] = (char)tolower((unsigned char)host[pl + 1 + i]);
        box[il] = 0;
        return true;
}

bool ab_req_origin_same(const char *origin, const char *host)
{
        if (!origin || !host)
                return false;
        long def;
        const char *a;
        if (!strncasecmp(origin, "http://", 7)) {
                def = 80;
                a = origin + 7;
        } else if (!strncasecmp(origin, "https://", 8)) {
                def = 443;
                a = origin + 8;
        } else {
                return false;
        }
        size_t an = strlen(a);
        if (an && a[an - 1] == '/') /* not sent by browsers, but harmless */
                an--;
        if (memchr(a, '/', an) || memchr(a, '@', an) || memchr(a, '?', an))
                return false;
        char on[NAME_MAX_LEN + 1], hn[NAME_MAX_LEN + 1];
        long op, hp;
        if (!split_host(a, an, on, &op) || !split_host(host, strlen(host), hn, &hp))
                return false;
        if (op < 0)
                op = def;
        if (hp < 0)
                hp = def;
        return !strcmp(on, hn) && op == hp;
}

bool ab_req_ctype_simple(const char *ctype)
{
        if (!ctype)
                return false;
        while (*ctype == ' ' || *ctype == '\t')
                ctype++;
        size_t n = strcspn(ctype, ";");
        while (n && (ctype[n - 1] == ' ' || ctype[n - 1] == '\t'))
                n--;
        static const char *const simple[] = {"text/plain", "application/x-www-form-urlencoded",
                                             "multipart/form-data"};
        for (size_t i = 0; i < sizeof(simple) / sizeof(simple[0]); i++)
                if (strlen(simple[i]) == n && !strncasecmp(ctype, simple[i], n))
                        return true;
        return false;
}

/* ref.c - parsing image references with Docker's defaulting rules (ref.h). */
#include "image/ref.h"

#include <arpa/inet.h>
#include <strings.h>

#define DOCKER_HUB     "docker.io"
#define DOCKER_HUB_API "registry-1.docker.io"
#define PATH_MAX_LEN   255 /* as Docker's name length limit */
#define TAG_MAX_LEN    128

static bool is_lower_alnum(char c)
{
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

static bool is_alnum(char c)
{
        return is_lower_alnum(c) || (c >= 'A' && c <= 'Z');
}

bool ab_digest_valid(const char *digest)
{
        if (!digest || strncmp(digest, "sha256:", 7) != 0)
                return false;
        const char *h = digest + 7;
        size_t n = 0;
        for (; h[n]; n++)
                if (!((h[n] >= '0' && h[n] <= '9') || (h[n] >= 'a' && h[n] <= 'f')))
                        return false;
        return n == 64;
}

/* [a-z0-9]+ joined by '.', '_', '__' or '-'+. */
static bool component_valid(const char *s, size_t n)
{
        size_t i = 0;
        for (;;) {
                size_t start = i;
                while (i < n && is_lower_alnum(s[i]))
                        i++;
                if (i == start)
                        return false;
                if (i == n)
                        return true;
                if (s[i] == '.')
                        i++;
                else if (s[i] == '_')
                        i += (i + 1 < n && s[i + 1] == '_') ? 2 : 1;
                else if (s[i] == '-')
                        while (i < n && s[i] == '-')
                                i++;
                else
                        return false;
        }
}

/* Components joined by '/' (the length is checked once "library/" is added). */
static bool path_valid(const char *s)
{
        for (const char *p = s;;) {
                size_t n = strcspn(p, "/");
                if (!component_valid(p, n))
                        return false;
                if (!p[n])
                        return true;
                p += n + 1;
        }
}

static bool tag_valid(const char *s)
{
        size_t n = strlen(s);
        if (n == 0 || n > TAG_MAX_LEN || !(is_alnum(s[0]) || s[0] == '_'))
                return false;
        for (size_t i = 1; i < n; i++)
                if (!(is_alnum(s[i]) || s[i] == '_' || s[i] == '.' || s[i] == '-'))
                        return false;
        return true;
}

/* A port: 1 to 5 digits, 1..65535. */
static bool port_valid(const char *s)
{
        size_t n = strlen(s);
        if (n == 0 || n > 5 || strspn(s, "0123456789") != n)
                return false;
        long v = strtol(s, NULL, 10);
        return v >= 1 && v <= 65535;
}

/* host[:port]: DNS labels of [A-Za-z0-9-] (not starting or ending with '-')
 * joined by '.', or a bracketed IPv6 address. */
static bool domain_valid(const char *d)
{
        const char *port = NULL;
        _cleanup_free_ char *host = NULL;
        if (d[0] == '[') {
                const char *close = strchr(d, ']');
                if (!close)
                        return false;
                host = xstrndup(d + 1, (size_t)(close - d - 1));
                struct in6_addr a6;
                if (inet_pton(AF_INET6, host, &a6) != 1)
                        return false;
                if (close[1] == ':')
                        port = close + 2;
                else if (close[1])
                        return false;
                return !port || port_valid(port);
        }
        const char *colon = strchr(d, ':');
        host = colon ? xstrndup(d, (size_t)(colon - d)) : xstrdup(d);
        if (colon && !port_valid(colon + 1))
                return false;
        if (!host[0] || strlen(host) > 253)
                return false;
        for (const char *p = host;;) {
                size_t n = strcspn(p, ".");
                if (n == 0 || n > 63 || p[0] == '-' || p[n - 1] == '-')
                        return false;
                for (size_t i = 0; i < n; i++)
                        if (!is_alnum(p[i]) && p[i] != '-')
                                return false;
                if (!p[n])
                        return true;
                p += n + 1;
        }
}

void ab_image_ref_clear(ab_image_ref *r)
{
        free(r->domain);
        free(r->path);
        free(r->tag);
        free(r->digest);
        memset(r, 0, sizeof(*r));
}

/* Splits name (no tag, no digest) into domain and path, Docker's way. */
static int split_name(const char *s, const char *name, ab_image_ref *out, ab_err **err)
{
        const char *slash = strchr(name, '/');
        size_t first = slash ? (size_t)(slash - name) : strlen(name);
        bool has_domain = slash && (memchr(name, '.', first) || memchr(name, ':', first) ||
                                    (first == 9 && strncmp(name, "localhost", 9) == 0));
        if (has_domain) {
                out->domain = xstrndup(name, first);
                if (!domain_valid(out->domain))
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "image reference '%s': registry '%s' is not a valid "
                                          "host[:port]",
                                          s, out->domain);
                if (strcmp(out->domain, "index.docker.io") == 0) {
                        free(out->domain);
                        out->domain = xstrdup(DOCKER_HUB);
                }
                name = slash + 1;
        } else {
                out->domain = xstrdup(DOCKER_HUB);
        }
        if (!path_valid(name))
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "image reference '%s': repository '%s' is invalid (lower-case "
                                  "letters, digits and separators '.', '_', '__', '-' between "
                                  "them, components joined by '/')",
                                  s, name);
        if (strcmp(out->domain, DOCKER_HUB) == 0 && !strchr(name, '/'))
                out->path = xasprintf("library/%s", name);
        else
                out->path = xstrdup(name);
        if (strlen(out->path) > PATH_MAX_LEN)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "image reference '%s': repository '%s' is longer than %d "
                                  "characters",
                                  s, out->path, PATH_MAX_LEN);
        return 0;
}

static int parse(const char *s, ab_image_ref *out, ab_err **err)
{
        if (!s || !*s)
                return ab_err_set(err, AB_E_INVALID, 0, "image reference is empty");
        size_t len = strlen(s);
        if (len > AB_IMAGE_REF_MAX)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "image reference is too long (%zu bytes, at most %d)", len,
                                  AB_IMAGE_REF_MAX);
        _cleanup_free_ char *name = xstrdup(s);
        char *at = strchr(name, '@');
        if (at) {
                *at = '\0';
                if (!ab_digest_valid(at + 1))
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "image reference '%s': digest '%s' is invalid (want "
                                          "sha256: and 64 lower-case hex digits)",
                                          s, at + 1);
                out->digest = xstrdup(at + 1);
        }
        char *slash = strrchr(name, '/');
        char *colon = strrchr(slash ? slash : name, ':');
        if (colon) {
                *colon = '\0';
                if (!tag_valid(colon + 1))
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "image reference '%s': tag '%s' is invalid (at most "
                                          "128 of A-Z a-z 0-9 _ . -, not starting with . or -)",
                                          s, colon + 1);
                out->tag = xstrdup(colon + 1);
        }
        if (!name[0])
                return ab_err_set(err, AB_E_INVALID, 0, "image reference '%s' has no repository",
                                  s);
        if (split_name(s, name, out, err) < 0)
                return -1;
        if (!out->tag && !out->digest)
                out->tag = xstrdup("latest");
        return 0;
}

int ab_image_ref_parse(const char *s, ab_image_ref *out, ab_err **err)
{
        memset(out, 0, sizeof(*out));
        if (parse(s, out, err) < 0) {
                ab_image_ref_clear(out);
                return -1;
        }
        return 0;
}

char *ab_image_ref_str(const ab_image_ref *r)
{
        return xasprintf("%s/%s%s%s%s%s", r->domain, r->path, r->tag ? ":" : "",
                         r->tag ? r->tag : "", r->digest ? "@" : "", r->digest ? r->digest : "");
}

const char *ab_image_ref_reference(const ab_image_ref *r)
{
        return r->digest ? r->digest : r->tag;
}

const char *ab_image_ref_api_host(const ab_image_ref *r)
{
        return strcmp(r->domain, DOCKER_HUB) == 0 ? DOCKER_HUB_API : r->domain;
}

bool ab_image_ref_is_loopback(const char *domain)
{
        if (!domain)
                return false;
        _cleanup_free_ char *host = NULL;
        if (domain[0] == '[') {
                const char *close = strchr(domain, ']');
                if (!close)
                        return false;
                host = xstrndup(domain + 1, (size_t)(close - domain - 1));
                struct in6_addr a6;
                return inet_pton(AF_INET6, host, &a6) == 1 &&
                       memcmp(&a6, &in6addr_loopback, sizeof(a6)) == 0;
        }
        host = xstrndup(domain, strcspn(domain, ":"));
        if (strcasecmp(host, "localhost") == 0)
                return true;
        struct in_addr a4;
        return inet_pton(AF_INET, host, &a4) == 1 && (ntohl(a4.s_addr) >> 24) == 127;
}

/* TEMP stand-in (dropped at merge): a minimal reference parser. */
#include "image/ref.h"

#include <ctype.h>
#include <string.h>

bool ab_digest_valid(const char *d)
{
        if (!d || strncmp(d, "sha256:", 7) || strlen(d) != 71)
                return false;
        for (const char *p = d + 7; *p; p++)
                if (!isdigit((unsigned char)*p) && !(*p >= 'a' && *p <= 'f'))
                        return false;
        return true;
}

void ab_image_ref_clear(ab_image_ref *r)
{
        free(r->domain);
        free(r->path);
        free(r->tag);
        free(r->digest);
        memset(r, 0, sizeof(*r));
}

int ab_image_ref_parse(const char *s, ab_image_ref *out, ab_err **err)
{
        memset(out, 0, sizeof(*out));
        if (!s || !*s || strlen(s) > AB_IMAGE_REF_MAX)
                return ab_err_set(err, AB_E_INVALID, 0, "invalid image reference");
        _cleanup_free_ char *t = xstrdup(s);
        char *at = strchr(t, '@');
        if (at) {
                *at = 0;
                if (!ab_digest_valid(at + 1))
                        return ab_err_set(err, AB_E_INVALID, 0, "invalid digest in \"%s\"", s);
                out->digest = xstrdup(at + 1);
        }
        char *slash = strrchr(t, '/');
        char *colon = strrchr(slash ? slash : t, ':');
        if (colon) {
                *colon = 0;
                out->tag = xstrdup(colon + 1);
        } else if (!at) {
                out->tag = xstrdup("latest");
        }
        char *first = strchr(t, '/');
        if (first && (memchr(t, '.', (size_t)(first - t)) || memchr(t, ':', (size_t)(first - t)) ||
                      !strncmp(t, "localhost/", 10))) {
                out->domain = xstrndup(t, (size_t)(first - t));
                out->path = xstrdup(first + 1);
        } else {
                out->domain = xstrdup("docker.io");
                out->path = first ? xstrdup(t) : xasprintf("library/%s", t);
        }
        for (const char *p = out->path; *p; p++)
                if (!(islower((unsigned char)*p) || isdigit((unsigned char)*p) ||
                      strchr("._-/", *p))) {
                        ab_image_ref_clear(out);
                        return ab_err_set(err, AB_E_INVALID, 0, "invalid repository in \"%s\"", s);
                }
        if (!*out->path || (out->tag && !*out->tag)) {
                ab_image_ref_clear(out);
                return ab_err_set(err, AB_E_INVALID, 0, "invalid image reference \"%s\"", s);
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
        return strcmp(r->domain, "docker.io") ? r->domain : "registry-1.docker.io";
}

bool ab_image_ref_is_loopback(const char *domain)
{
        return !strncmp(domain, "localhost", 9) || !strncmp(domain, "127.", 4);
}

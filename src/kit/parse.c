/* parse.c - argv and the list's metadata filter (kit/parse.h). */
#include "kit/parse.h"
#include "base/codec.h"

int kit_parse_argv(json_t *obj, const char *name, char ***out, ab_err **err)
{
        json_t *a = json_object_get(obj, name);
        *out = NULL;
        if (!a || json_is_null(a))
                return 0;
        if (!json_is_array(a) || json_array_size(a) == 0)
                return ab_err_set(err, AB_E_INVALID, 0, "%s: must be a non-empty array of strings",
                                  name);
        size_t i;
        json_t *w;
        json_array_foreach(a, i, w)
        {
                /* (a NUL inside is refused by the JSON parser already) */
                if (!json_is_string(w))
                        return ab_err_set(err, AB_E_INVALID, 0, "%s[%zu]: must be a string", name,
                                          i);
        }
        if (json_string_length(json_array_get(a, 0)) == 0)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "%s[0]: must not be empty (it names the program)", name);
        char **v = xcalloc(xadd(json_array_size(a), 1), sizeof(*v));
        json_array_foreach(a, i, w)
        {
                v[i] = xstrdup(json_string_value(w));
        }
        *out = v;
        return 0;
}

bool kit_meta_match(json_t *metadata, const char *filter, const char *reserved)
{
        if (!filter)
                return true;
        for (const char *p = filter; *p;) {
                size_t n = strcspn(p, "&");
                const char *eq = memchr(p, '=', n);
                if (n) {
                        size_t kn = eq ? (size_t)(eq - p) : n;
                        _cleanup_free_ char *k = ab_pct_decode(p, kn);
                        _cleanup_free_ char *v =
                            eq ? ab_pct_decode(eq + 1, n - kn - 1) : xstrdup("");
                        const char *have = json_string_value(json_object_get(metadata, k));
                        if ((reserved && !strncmp(k, reserved, strlen(reserved))) || !have ||
                            strcmp(have, v))
                                return false;
                }
                p += n;
                if (*p == '&')
                        p++;
        }
        return true;
}

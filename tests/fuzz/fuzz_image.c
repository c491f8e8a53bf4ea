/* fuzz_image - libFuzzer target for the image documents and references
 * (image/ref.c, image/manifest.c), all read from registries and archives.
 * The first byte picks the parser; the rest is its input. Checks what the
 * image store relies on: a parsed manifest has valid digests and a bounded
 * layer count, a parsed config NULL-terminated arrays of valid diff ids, a
 * parsed reference a canonical name that parses to itself. Build and run
 * with scripts/fuzz.sh. */
#include "image/manifest.h"
#include "image/ref.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* abort() names the broken promise */
#define check(cond) ((cond) ? (void)0 : (fprintf(stderr, "check failed: %s\n", #cond), abort()))

static void fuzz_ref(const char *s)
{
        ab_image_ref r, again;
        ab_err *e = NULL;
        if (ab_image_ref_parse(s, &r, &e) < 0) {
                check(e && e->code == AB_E_INVALID);
                ab_err_free(&e);
                return;
        }
        check(r.domain && r.path && (r.tag || r.digest));
        check(!r.digest || ab_digest_valid(r.digest));
        char *c = ab_image_ref_str(&r);
        check(ab_image_ref_parse(c, &again, &e) == 0);
        char *c2 = ab_image_ref_str(&again);
        check(strcmp(c, c2) == 0);
        (void)ab_image_ref_is_loopback(r.domain);
        free(c);
        free(c2);
        ab_image_ref_clear(&again);
        ab_image_ref_clear(&r);
}

static void fuzz_manifest(const char *s, size_t n)
{
        ab_manifest m;
        ab_err *e = NULL;
        (void)ab_manifest_is_index(s, n, NULL);
        if (ab_manifest_parse(s, n, &m, &e) == 0) {
                check(ab_digest_valid(m.config_digest));
                check(m.n_layers <= AB_MANIFEST_MAX_LAYERS);
                for (size_t i = 0; i < m.n_layers; i++)
                        check(ab_digest_valid(m.layers[i].digest));
                ab_manifest_clear(&m);
        } else {
                check(e && (e->code == AB_E_INVALID || e->code == AB_E_UNSUPPORTED));
                ab_err_free(&e);
        }
        char *d = NULL;
        if (ab_index_pick(s, n, "linux", "amd64", &d, &e) == 0) {
                check(ab_digest_valid(d));
                free(d);
        } else {
                check(e && (e->code == AB_E_INVALID || e->code == AB_E_NOT_FOUND) && !d);
                ab_err_free(&e);
        }
}

static void fuzz_config(const char *s, size_t n)
{
        ab_image_config c;
        ab_err *e = NULL;
        if (ab_image_config_parse(s, n, &c, &e) < 0) {
                check(e && e->code == AB_E_INVALID && !c.os);
                ab_err_free(&e);
                return;
        }
        check(c.os && c.arch && c.diff_ids);
        for (char **p = c.diff_ids; *p; p++)
                check(ab_digest_valid(*p));
        for (char **p = c.env; p && *p; p++)
                check(strchr(*p, '='));
        ab_image_config_clear(&c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size < 1)
                return 0;
        /* an exact-size copy, so any read past the end is caught; NUL-terminated for refs */
        size_t n = size - 1;
        char *text = xmalloc(n + 1);
        memcpy(text, data + 1, n);
        text[n] = '\0';
        switch (data[0] % 3) {
        case 0:
                fuzz_ref(text);
                break;
        case 1:
                fuzz_manifest(text, n);
                break;
        default:
                fuzz_config(text, n);
                break;
        }
        free(text);
        return 0;
}

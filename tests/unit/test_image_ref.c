/* Unit tests: image references with Docker's defaulting (ref.h), and the
 * image documents (manifest.h): index platform pick, OCI and Docker
 * manifests, layer compressions, foreign layers, malformed documents, config
 * blobs. */
#include "base/buf.h"
#include "image/manifest.h"
#include "image/ref.h"
#include "tap.h"

#define D1 "sha256:1111111111111111111111111111111111111111111111111111111111111111"
#define D2 "sha256:2222222222222222222222222222222222222222222222222222222222222222"
#define D3 "sha256:3333333333333333333333333333333333333333333333333333333333333333"
#define DC "sha256:cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"

static void ref_ok(const char *s, const char *canon, const char *domain, const char *path,
                   const char *tag, const char *digest)
{
        ab_image_ref r;
        ab_err *err = NULL;
        int rc = ab_image_ref_parse(s, &r, &err);
        tap_ok(rc == 0, "'%s' parses", s);
        if (rc < 0) {
                tap_diag("  %s", err->msg);
                ab_err_free(&err);
                return;
        }
        char *c = ab_image_ref_str(&r);
        TAP_IS_STR(c, canon, "  canonical name");
        free(c);
        TAP_IS_STR(r.domain, domain, "  domain");
        TAP_IS_STR(r.path, path, "  path");
        TAP_IS_STR(r.tag, tag, "  tag");
        TAP_IS_STR(r.digest, digest, "  digest");
        TAP_IS_STR(ab_image_ref_reference(&r), digest ? digest : tag, "  reference asked for");
        ab_image_ref_clear(&r);
}

static void ref_bad(const char *s, const char *part, const char *why)
{
        ab_image_ref r;
        ab_err *err = NULL;
        int rc = ab_image_ref_parse(s, &r, &err);
        tap_ok(rc < 0 && err && err->code == AB_E_INVALID, "%s is rejected as invalid", why);
        if (err && part) {
                tap_ok(strstr(err->msg, part) != NULL, "  the message names '%s'", part);
                if (!strstr(err->msg, part))
                        tap_diag("  message: %s", err->msg);
        }
        tap_ok(r.domain == NULL && r.path == NULL && r.tag == NULL && r.digest == NULL,
               "  nothing is left in the output");
        if (rc == 0)
                ab_image_ref_clear(&r);
        ab_err_free(&err);
}

static void test_refs(void)
{
        ref_ok("busybox", "docker.io/library/busybox:latest", "docker.io", "library/busybox",
               "latest", NULL);
        ref_ok("library/busybox", "docker.io/library/busybox:latest", "docker.io",
               "library/busybox", "latest", NULL);
        ref_ok("docker.io/busybox", "docker.io/library/busybox:latest", "docker.io",
               "library/busybox", "latest", NULL);
        ref_ok("index.docker.io/busybox:1.36", "docker.io/library/busybox:1.36", "docker.io",
               "library/busybox", "1.36", NULL);
        ref_ok("me/tool:1", "docker.io/me/tool:1", "docker.io", "me/tool", "1", NULL);
        ref_ok("localhost:5000/a/b", "localhost:5000/a/b:latest", "localhost:5000", "a/b", "latest",
               NULL);
        ref_ok("localhost/x", "localhost/x:latest", "localhost", "x", "latest", NULL);
        ref_ok("ghcr.io/o/r@" D1, "ghcr.io/o/r@" D1, "ghcr.io", "o/r", NULL, D1);
        ref_ok("127.0.0.1:5000/x@" D1, "127.0.0.1:5000/x@" D1, "127.0.0.1:5000", "x", NULL, D1);
        ref_ok("r:1@" D2, "docker.io/library/r:1@" D2, "docker.io", "library/r", "1", D2);
        ref_ok("[::1]:5000/a:V_1.2-rc", "[::1]:5000/a:V_1.2-rc", "[::1]:5000", "a", "V_1.2-rc",
               NULL);
        ref_ok("quay.io/a-b__c.d/e---f", "quay.io/a-b__c.d/e---f:latest", "quay.io",
               "a-b__c.d/e---f", "latest", NULL);
        /* As Docker: a name alone with a port-like tag is a Hub image tagged so. */
        ref_ok("localhost:5000", "docker.io/library/localhost:5000", "docker.io",
               "library/localhost", "5000", NULL);

        ab_image_ref r;
        ab_err *err = NULL;
        tap_ok(ab_image_ref_parse("busybox", &r, &err) == 0, "busybox parses (api host)");
        TAP_IS_STR(ab_image_ref_api_host(&r), "registry-1.docker.io", "docker.io's API host");
        ab_image_ref_clear(&r);
        tap_ok(ab_image_ref_parse("localhost:5000/a", &r, &err) == 0, "localhost:5000/a parses");
        TAP_IS_STR(ab_image_ref_api_host(&r), "localhost:5000", "another registry's API host");
        ab_image_ref_clear(&r);

        ref_bad("", NULL, "an empty reference");
        ref_bad("Busybox", "Busybox", "an upper-case repository");
        ref_bad("me/Tool:1", "Tool", "an upper-case path component");
        ref_bad("busybox:-x", "-x", "a tag starting with '-'");
        ref_bad("busybox:a/b", NULL, "a tag with '/'");
        ref_bad("busybox:", "tag", "an empty tag");
        char longtag[200];
        memset(longtag, 'a', sizeof(longtag));
        memcpy(longtag, "busybox:", 8);
        longtag[8 + 129] = '\0';
        ref_bad(longtag, "tag", "a 129-character tag");
        ref_bad("busybox@sha256:abc", "sha256:abc", "a short digest");
        ref_bad("busybox@sha256:"
                "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
                "digest", "an upper-case digest");
        ref_bad("busybox@md5:0123456789abcdef0123456789abcdef", "digest", "a non-sha256 digest");
        ref_bad("busybox@", "digest", "an empty digest");
        char big[AB_IMAGE_REF_MAX + 10];
        memset(big, 'a', sizeof(big) - 1);
        big[sizeof(big) - 1] = '\0';
        ref_bad(big, "too long", "a reference over AB_IMAGE_REF_MAX");
        char longpath[251];
        memset(longpath, 'a', sizeof(longpath) - 1);
        longpath[sizeof(longpath) - 1] = '\0';
        ref_bad(longpath, "longer than 255", "a repository over 255 characters with library/");
        ref_bad("a//b", "a//b", "an empty path component");
        ref_bad(":tag", "repository", "a tag without a name");
        ref_bad("@" D1, "repository", "a digest without a name");
        ref_bad("/a", NULL, "a leading '/'");
        ref_bad("a/", NULL, "a trailing '/'");
        ref_bad("a..b", NULL, "two dots in a component");
        ref_bad("a_-b", NULL, "mixed separators");
        ref_bad("-a", NULL, "a leading separator");
        ref_bad(":5000/a", "registry", "a port without a host name");
        ref_bad("localhost:/a", "registry", "an empty port");
        ref_bad("localhost:abc/a", "registry", "a port that is not a number");
        ref_bad("localhost:99999/a", "registry", "a port above 65535");
        ref_bad("localhost:5000/", NULL, "a registry without a repository");
        ref_bad("exa_mple.com/a", "registry", "a '_' in a host name");
        ref_bad("[::1/a", "registry", "an unclosed IPv6 bracket");
        ref_bad("busy box", NULL, "a blank");
        ref_bad("a/b\n", NULL, "a newline");

        tap_ok(ab_image_ref_is_loopback("localhost:5000"), "localhost:5000 is loopback");
        tap_ok(ab_image_ref_is_loopback("LOCALHOST"), "LOCALHOST is loopback");
        tap_ok(ab_image_ref_is_loopback("127.0.0.1:5000"), "127.0.0.1:5000 is loopback");
        tap_ok(ab_image_ref_is_loopback("127.3.2.1"), "127.3.2.1 is loopback");
        tap_ok(ab_image_ref_is_loopback("[::1]:443"), "[::1]:443 is loopback");
        tap_ok(!ab_image_ref_is_loopback("docker.io"), "docker.io is not loopback");
        tap_ok(!ab_image_ref_is_loopback("127.0.0.1.evil.com"),
               "127.0.0.1.evil.com is not loopback");
        tap_ok(!ab_image_ref_is_loopback("localhost.evil.com:5000"),
               "localhost.evil.com is not loopback");
        tap_ok(!ab_image_ref_is_loopback("128.0.0.1"), "128.0.0.1 is not loopback");
        tap_ok(!ab_image_ref_is_loopback("[::2]"), "[::2] is not loopback");
        tap_ok(ab_digest_valid(D1), "a sha256 digest is valid");
        tap_ok(!ab_digest_valid(D1 "0"), "65 hex digits are not");
        tap_ok(!ab_digest_valid(NULL), "NULL is not");
}

#define INDEX(entries)                                                                             \
        "{\"schemaVersion\":2,\"mediaType\":\"" AB_MT_OCI_INDEX "\",\"manifests\":[" entries "]}"
#define ENTRY(d, os, arch)                                                                         \
        "{\"mediaType\":\"" AB_MT_OCI_MANIFEST "\",\"digest\":\"" d "\",\"size\":500,"             \
        "\"platform\":{\"os\":\"" os "\",\"architecture\":\"" arch "\"}}"

static void pick(const char *json, const char *want, int code, const char *name)
{
        char *d = NULL;
        ab_err *err = NULL;
        int rc = ab_index_pick(json, strlen(json), "linux", "amd64", &d, &err);
        if (want) {
                tap_ok(rc == 0, "%s", name);
                TAP_IS_STR(d, want, "  the linux/amd64 digest");
        } else {
                tap_ok(rc < 0 && err && err->code == (ab_code)code && !d, "%s", name);
                if (err)
                        tap_diag("  %s: %s", ab_code_name(err->code), err->msg);
        }
        if (err && code == AB_E_NOT_FOUND && strstr(json, "arm64"))
                tap_ok(strstr(err->msg, "linux/arm64") && strstr(err->msg, "linux/amd64"),
                       "  the message names what the index has and what was wanted");
        free(d);
        ab_err_free(&err);
}

static void test_index(void)
{
        const char *idx = INDEX(ENTRY(D1, "linux", "arm64") "," ENTRY(D2, "linux", "amd64"));
        tap_ok(ab_manifest_is_index(idx, strlen(idx), NULL), "an OCI index is an index");
        pick(idx, D2, 0, "linux/amd64 is picked among arm64 and amd64");
        const char *list = "{\"schemaVersion\":2,\"mediaType\":\"" AB_MT_DOCKER_LIST
                           "\",\"manifests\":[{\"mediaType\":\"" AB_MT_DOCKER_MANIFEST
                           "\",\"digest\":\"" D3 "\",\"size\":1,\"platform\":{\"os\":\"linux\","
                           "\"architecture\":\"amd64\",\"variant\":\"v3\"}}]}";
        tap_ok(ab_manifest_is_index(list, strlen(list), NULL), "a Docker list is an index");
        pick(list, D3, 0, "a Docker manifest list's amd64 (variant ignored)");
        pick(INDEX(ENTRY(D1, "linux", "arm64")), NULL, AB_E_NOT_FOUND,
             "an index with only linux/arm64 is not_found");
        pick(INDEX("{\"mediaType\":\"application/vnd.in-toto+json\",\"digest\":\"" D1
                   "\",\"size\":1,\"platform\":{\"os\":\"linux\",\"architecture\":\"amd64\"}}"),
             NULL, AB_E_NOT_FOUND, "an attestation entry is never picked");
        pick(INDEX("{\"digest\":\"sha256:12\",\"platform\":{\"os\":\"linux\","
                   "\"architecture\":\"amd64\"}}"),
             NULL, AB_E_INVALID, "a bad digest in an index is invalid");
        pick("{\"manifests\":{}}", NULL, AB_E_INVALID, "manifests not an array is invalid");
        pick("[1,2]", NULL, AB_E_INVALID, "a JSON array is invalid");
        pick("{\"manifests\":[", NULL, AB_E_INVALID, "truncated JSON is invalid");
        pick(INDEX("7"), NULL, AB_E_INVALID, "an entry that is not an object is invalid");
        pick(INDEX("{\"digest\":\"" D1 "\",\"platform\":\"linux/amd64\"}"), NULL, AB_E_INVALID,
             "a platform that is not an object is invalid");

        const char *m = "{\"schemaVersion\":2,\"layers\":[]}";
        tap_ok(!ab_manifest_is_index(m, strlen(m), NULL),
               "an unlabelled body with layers is no index");
        tap_ok(!ab_manifest_is_index("{}", 2, AB_MT_OCI_MANIFEST "; charset=utf-8"),
               "an unlabelled body served as a manifest is no index");
        tap_ok(ab_manifest_is_index("{}", 2, AB_MT_DOCKER_LIST), "the Content-Type decides next");
        tap_ok(ab_manifest_is_index("{\"manifests\":[]}", 16, NULL), "then the shape");
}

#define CONFIG_DESC                                                                                \
        "\"config\":{\"mediaType\":\"application/vnd.oci.image.config.v1+json\",\"digest\":\"" DC  \
        "\",\"size\":123}"
#define LAYER(mt, d, size) "{\"mediaType\":\"" mt "\",\"digest\":\"" d "\",\"size\":" size "}"

static void manifest_bad(const char *json, int code, const char *name, const char *part)
{
        ab_manifest m;
        ab_err *err = NULL;
        int rc = ab_manifest_parse(json, strlen(json), &m, &err);
        tap_ok(rc < 0 && err && err->code == (ab_code)code, "%s", name);
        if (err)
                tap_diag("  %s: %s", ab_code_name(err->code), err->msg);
        if (part && err)
                tap_ok(strstr(err->msg, part) != NULL, "  the message names '%s'", part);
        tap_ok(m.layers == NULL && m.config_digest == NULL, "  nothing is left in the output");
        if (rc == 0)
                ab_manifest_clear(&m);
        ab_err_free(&err);
}

static void test_manifest(void)
{
        const char *docker =
            "{\"schemaVersion\":2,\"mediaType\":\"" AB_MT_DOCKER_MANIFEST "\","
            "\"config\":{\"mediaType\":\"application/vnd.docker.container.image.v1+json\","
            "\"digest\":\"" DC "\",\"size\":7023},\"layers\":[" LAYER(
                "application/vnd.docker.image.rootfs.diff.tar.gzip", D1,
                "32654") "," LAYER("application/vnd.docker.image.rootfs.diff.tar.gzip", D2,
                                   "16724") "]}";
        ab_manifest m;
        ab_err *err = NULL;
        tap_ok(!ab_manifest_is_index(docker, strlen(docker), AB_MT_DOCKER_LIST),
               "a Docker manifest is no index (its mediaType wins over the header)");
        int rc = ab_manifest_parse(docker, strlen(docker), &m, &err);
        tap_ok(rc == 0, "a Docker schema 2 manifest parses");
        if (rc == 0) {
                TAP_IS_STR(m.config_digest, DC, "  config digest");
                TAP_IS_INT(m.config_size, 7023, "  config size");
                TAP_IS_INT(m.n_layers, 2, "  two layers");
                TAP_IS_STR(m.layers[0].digest, D1, "  bottom layer first");
                TAP_IS_INT(m.layers[0].size, 32654, "  its size");
                TAP_IS_INT(m.layers[1].compression, AB_LAYER_GZIP, "  gzip");
                ab_manifest_clear(&m);
        }
        ab_err_free(&err);

        const char *oci = "{\"schemaVersion\":2,\"mediaType\":\"" AB_MT_OCI_MANIFEST
                          "\"," CONFIG_DESC ",\"layers\":[" LAYER(
                              "application/vnd.oci.image.layer.v1.tar+zstd", D1,
                              "10") "," LAYER("application/vnd.oci.image.layer.v1.tar", D2,
                                              "20") "," LAYER("application/vnd.oci.image.layer.v1."
                                                              "tar+gzip",
                                                              D3, "30") "]}";
        rc = ab_manifest_parse(oci, strlen(oci), &m, &err);
        tap_ok(rc == 0, "an OCI manifest with zstd, plain and gzip layers parses");
        if (rc == 0) {
                TAP_IS_INT(m.n_layers, 3, "  three layers");
                TAP_IS_INT(m.layers[0].compression, AB_LAYER_ZSTD, "  zstd");
                TAP_IS_INT(m.layers[1].compression, AB_LAYER_TAR, "  uncompressed");
                TAP_IS_INT(m.layers[2].compression, AB_LAYER_GZIP, "  gzip");
                ab_manifest_clear(&m);
        }
        ab_err_free(&err);

        manifest_bad("{\"schemaVersion\":2," CONFIG_DESC ",\"layers\":[" LAYER(
                         "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip", D1, "1") "]}",
                     AB_E_UNSUPPORTED, "a foreign layer is unsupported", "foreign");
        manifest_bad(
            "{\"schemaVersion\":2," CONFIG_DESC ",\"layers\":[" LAYER(
                "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip", D1, "1") "]}",
            AB_E_UNSUPPORTED, "a non-distributable layer is unsupported", "foreign");
        manifest_bad("{\"schemaVersion\":2," CONFIG_DESC
                     ",\"layers\":[" LAYER("application/x-weird", D1, "1") "]}",
                     AB_E_UNSUPPORTED, "an unknown layer type is unsupported",
                     "application/x-weird");
        manifest_bad("{\"schemaVersion\":2,\"config\":{\"mediaType\":\"application/"
                     "vnd.cncf.helm.config.v1+json\",\"digest\":\"" DC "\",\"size\":1},"
                     "\"layers\":[]}",
                     AB_E_UNSUPPORTED, "an artifact (helm chart) is unsupported", "helm");
        manifest_bad("not json", AB_E_INVALID, "non-JSON is invalid", "JSON");
        manifest_bad("", AB_E_INVALID, "an empty document is invalid", NULL);
        manifest_bad("[]", AB_E_INVALID, "an array is invalid", NULL);
        manifest_bad("{\"schemaVersion\":1," CONFIG_DESC ",\"layers\":[]}", AB_E_INVALID,
                     "schema version 1 is invalid", "schemaVersion");
        manifest_bad("{\"schemaVersion\":2,\"layers\":[]}", AB_E_INVALID, "no config is invalid",
                     "config");
        manifest_bad("{\"schemaVersion\":2," CONFIG_DESC "}", AB_E_INVALID, "no layers is invalid",
                     "layers");
        manifest_bad("{\"schemaVersion\":2," CONFIG_DESC ",\"layers\":[" LAYER(
                         "application/vnd.oci.image.layer.v1.tar", "sha256:xyz", "1") "]}",
                     AB_E_INVALID, "a bad layer digest is invalid", "layers[0]");
        manifest_bad("{\"schemaVersion\":2," CONFIG_DESC
                     ",\"layers\":[" LAYER("application/vnd.oci.image.layer.v1.tar", D1, "-1") "]}",
                     AB_E_INVALID, "a negative size is invalid", "size");
        manifest_bad("{\"schemaVersion\":2," CONFIG_DESC ",\"layers\":[" LAYER(
                         "application/vnd.oci.image.layer.v1.tar", D1, "\"1\"") "]}",
                     AB_E_INVALID, "a string size is invalid", "size");
        manifest_bad("{\"schemaVersion\":2," CONFIG_DESC ",\"layers\":[{\"mediaType\":7}]}",
                     AB_E_INVALID, "a numeric media type is invalid", "mediaType");
        manifest_bad("{\"schemaVersion\":2,\"schemaVersion\":2," CONFIG_DESC ",\"layers\":[]}",
                     AB_E_INVALID, "duplicate keys are invalid", NULL);
        manifest_bad(INDEX(ENTRY(D1, "linux", "amd64")), AB_E_INVALID,
                     "an index given as a manifest is invalid", NULL);

        /* 128 layers: one over the bound. */
        ab_buf b = {0};
        ab_buf_puts(&b, "{\"schemaVersion\":2," CONFIG_DESC ",\"layers\":[");
        for (int i = 0; i <= AB_MANIFEST_MAX_LAYERS; i++)
                ab_buf_printf(&b, "%s" LAYER("application/vnd.oci.image.layer.v1.tar", D1, "1"),
                              i ? "," : "");
        ab_buf_puts(&b, "]}");
        manifest_bad(b.p, AB_E_INVALID, "128 layers are too many", "layers");
        ab_buf_free(&b);
}

static void test_config(void)
{
        const char *cfg =
            "{\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":{\"Env\":[\"PATH=/usr/bin:/"
            "bin\",\"A=b=c\"],\"WorkingDir\":\"/srv\",\"User\":\"1000:1000\",\"Entrypoint\":["
            "\"/bin/sh\",\"-c\"],\"Cmd\":[\"echo hi\"],\"Labels\":{\"x\":\"y\"}},\"rootfs\":{"
            "\"type\":\"layers\",\"diff_ids\":[\"" D1 "\",\"" D2 "\"]},\"history\":[]}";
        ab_image_config c;
        ab_err *err = NULL;
        int rc = ab_image_config_parse(cfg, strlen(cfg), &c, &err);
        tap_ok(rc == 0, "an image config parses");
        if (rc == 0) {
                TAP_IS_STR(c.os, "linux", "  os");
                TAP_IS_STR(c.arch, "amd64", "  architecture");
                TAP_IS_STR(c.env[0], "PATH=/usr/bin:/bin", "  Env[0]");
                TAP_IS_STR(c.env[1], "A=b=c", "  Env[1]");
                tap_ok(c.env[2] == NULL, "  Env is NULL-terminated");
                TAP_IS_STR(c.workdir, "/srv", "  WorkingDir");
                TAP_IS_STR(c.user, "1000:1000", "  User");
                TAP_IS_STR(c.entrypoint[0], "/bin/sh", "  Entrypoint[0]");
                TAP_IS_STR(c.entrypoint[1], "-c", "  Entrypoint[1]");
                tap_ok(c.entrypoint[2] == NULL, "  Entrypoint is NULL-terminated");
                TAP_IS_STR(c.cmd[0], "echo hi", "  Cmd");
                TAP_IS_STR(c.diff_ids[0], D1, "  diff_ids[0]");
                TAP_IS_STR(c.diff_ids[1], D2, "  diff_ids[1]");
                tap_ok(c.diff_ids[2] == NULL, "  diff_ids is NULL-terminated");
                ab_image_config_clear(&c);
        }
        ab_err_free(&err);

        const char *bare = "{\"architecture\":\"arm64\",\"os\":\"linux\",\"config\":{\"Cmd\":null,"
                           "\"WorkingDir\":\"\"},\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[]}}";
        rc = ab_image_config_parse(bare, strlen(bare), &c, &err);
        tap_ok(rc == 0, "a config without Env, User, Entrypoint parses");
        if (rc == 0) {
                tap_ok(!c.env && !c.user && !c.entrypoint && !c.cmd && !c.workdir,
                       "  absent, null and empty fields are NULL");
                TAP_IS_STR(c.arch, "arm64", "  architecture");
                tap_ok(c.diff_ids && !c.diff_ids[0], "  no diff_ids");
                ab_image_config_clear(&c);
        }
        ab_err_free(&err);

        static const struct {
                const char *json, *why;
        } bad[] = {
            {"{\"os\":\"linux\",\"rootfs\":{\"diff_ids\":[]}}", "no architecture"},
            {"{\"architecture\":\"amd64\",\"os\":\"linux\"}", "no rootfs"},
            {"{\"architecture\":\"amd64\",\"os\":\"linux\",\"rootfs\":{\"diff_ids\":[\"x\"]}}",
             "a bad diff id"},
            {"{\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":{\"Env\":\"A=1\"},"
             "\"rootfs\":{\"diff_ids\":[]}}",
             "Env as a string"},
            {"{\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":{\"Env\":[\"NOEQUALS\"]},"
             "\"rootfs\":{\"diff_ids\":[]}}",
             "an Env entry without '='"},
            {"{\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":{\"Cmd\":[1]},"
             "\"rootfs\":{\"diff_ids\":[]}}",
             "a number in Cmd"},
            {"{\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":{\"User\":0},"
             "\"rootfs\":{\"diff_ids\":[]}}",
             "a numeric User"},
            {"{\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":[],"
             "\"rootfs\":{\"diff_ids\":[]}}",
             "config as an array"},
            {"{\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":{\"Env\":[\"A=\\u0000\"]},"
             "\"rootfs\":{\"diff_ids\":[]}}",
             "a NUL in a string"},
            {"{\"architecture\":\"amd64\",\"os\":\"linux\",\"rootfs\":{\"type\":\"other\","
             "\"diff_ids\":[]}}",
             "a rootfs type other than layers"},
        };
        for (size_t i = 0; i < AB_ARRAY_LEN(bad); i++) {
                rc = ab_image_config_parse(bad[i].json, strlen(bad[i].json), &c, &err);
                tap_ok(rc < 0 && err && err->code == AB_E_INVALID && !c.os && !c.env,
                       "a config with %s is invalid", bad[i].why);
                if (err)
                        tap_diag("  %s", err->msg);
                if (rc == 0)
                        ab_image_config_clear(&c);
                ab_err_free(&err);
        }
}

int main(void)
{
        test_refs();
        test_index();
        test_manifest();
        test_config();
        return tap_done();
}

/* Unit tests: the checks of a request's head before routing (http/reqcheck.h):
 * control characters in a target (bytes and escapes), loopback Host names,
 * allowed_hosts entries, same-origin Origins and the content types a page
 * may send to another site without asking. */
#include "http/reqcheck.h"
#include "tap.h"

static void test_target(void)
{
        tap_ok(ab_req_target_clean("/v1/sandboxes/abc/files?path=/a%20b&x=%2F"),
               "plain escapes are clean");
        tap_ok(ab_req_target_clean("/v1/sandboxes?app_id=%2500"),
               "an escaped '%%' then 00 is clean");
        tap_ok(ab_req_target_clean("/a%"), "a lone '%%' at the end");
        tap_ok(ab_req_target_clean("/a%0"), "a cut escape");
        tap_ok(ab_req_target_clean("/a%zz"), "not an escape");
        tap_ok(!ab_req_target_clean("/v1/sandboxes/abc%00/files"), "%%00 in the path");
        tap_ok(!ab_req_target_clean("/x?path=a%0a"), "%%0a in the query");
        tap_ok(!ab_req_target_clean("/x?path=a%0D"), "%%0D in any case");
        tap_ok(!ab_req_target_clean("/x%1f"), "%%1f");
        tap_ok(!ab_req_target_clean("/x%7f"), "%%7f (DEL)");
        tap_ok(!ab_req_target_clean("/x%09y"), "%%09 (tab)");
        tap_ok(!ab_req_target_clean("/x\ty"), "a raw tab");
        tap_ok(!ab_req_target_clean("/x\x7fy"), "a raw DEL");
        tap_ok(!ab_req_target_clean(NULL), "NULL is not clean");
}

static void test_loopback(void)
{
        const char *yes[] = {"localhost",  "LOCALHOST:8080",       "localhost.",  "app.localhost:1",
                             "127.0.0.1",  "127.0.0.1:8080",       "127.9.8.7:1", "[::1]",
                             "[::1]:8080", "[::ffff:127.0.0.1]:80"};
        for (size_t i = 0; i < sizeof(yes) / sizeof(*yes); i++)
                tap_ok(ab_req_host_loopback(yes[i]), "loopback: %s", yes[i]);
        const char *no[] = {"evil.test",
                            "127.0.0.1.evil.test",
                            "localhost.evil.test",
                            "evillocalhost",
                            "128.0.0.1",
                            "0.0.0.0:8080",
                            "[::2]:80",
                            "::1",
                            "127.1",
                            "localhost:0",
                            "localhost:99999",
                            "localhost:",
                            "[::1",
                            "",
                            "local host",
                            "localhost:80:80",
                            "[::1]x"};
        for (size_t i = 0; i < sizeof(no) / sizeof(*no); i++)
                tap_ok(!ab_req_host_loopback(no[i]), "not loopback: \"%s\"", no[i]);
        tap_ok(!ab_req_host_loopback(NULL), "NULL is not loopback");
}

static void test_host_is(void)
{
        tap_ok(ab_req_host_is("DevBox.lan:8080", "devbox.lan"), "any port, any case");
        tap_ok(ab_req_host_is("devbox.lan.", "devbox.lan"), "a trailing dot");
        tap_ok(ab_req_host_is("devbox.lan:9999", "devbox.lan:9999"), "an entry's port");
        tap_ok(!ab_req_host_is("devbox.lan:8080", "devbox.lan:9999"), "another port");
        tap_ok(!ab_req_host_is("devbox.lan", "devbox.lan:9999"), "no port where one is named");
        tap_ok(!ab_req_host_is("x.devbox.lan", "devbox.lan"), "a name under the entry");
        tap_ok(ab_req_host_is("[fd00::1]:80", "[fd00::1]"), "an IPv6 entry");
        tap_ok(!ab_req_host_is(NULL, "a"), "NULL host");
}

static void test_origin(void)
{
        tap_ok(ab_req_origin_same("http://127.0.0.1:8080", "127.0.0.1:8080"), "same origin");
        tap_ok(ab_req_origin_same("http://LOCALHOST:8080", "localhost:8080"), "any case");
        tap_ok(ab_req_origin_same("http://devbox.lan", "devbox.lan:80"), "http's default port");
        tap_ok(ab_req_origin_same("https://devbox.lan", "devbox.lan"),
               "https behind a proxy: Host without a port");
        tap_ok(!ab_req_origin_same("http://devbox.lan", "devbox.lan:8080"), "another port");
        tap_ok(!ab_req_origin_same("http://evil.test", "127.0.0.1:8080"), "another host");
        tap_ok(!ab_req_origin_same("null", "127.0.0.1:8080"), "null");
        tap_ok(!ab_req_origin_same("file://", "127.0.0.1:8080"), "another scheme");
        tap_ok(!ab_req_origin_same("http://127.0.0.1:8080.evil.test", "127.0.0.1:8080"),
               "a host that starts like ours");
        tap_ok(!ab_req_origin_same("http://127.0.0.1:8080@evil.test", "127.0.0.1:8080"),
               "userinfo");
        tap_ok(!ab_req_origin_same("http://127.0.0.1:8080/x", "127.0.0.1:8080"), "a path");
        tap_ok(!ab_req_origin_same("http://localhost:3000", "localhost:8080"),
               "another local port");
        tap_ok(!ab_req_origin_same(NULL, "a"), "NULL origin");
}

static void test_ctype(void)
{
        tap_ok(ab_req_ctype_simple("text/plain"), "text/plain");
        tap_ok(ab_req_ctype_simple(" Text/Plain ; charset=UTF-8"), "any case, parameters");
        tap_ok(ab_req_ctype_simple("application/x-www-form-urlencoded"), "a form");
        tap_ok(ab_req_ctype_simple("multipart/form-data; boundary=x"), "multipart");
        tap_ok(!ab_req_ctype_simple("application/json"), "JSON");
        tap_ok(!ab_req_ctype_simple("application/json; charset=utf-8"), "JSON with a charset");
        tap_ok(!ab_req_ctype_simple("text/plainx"), "a longer type");
        tap_ok(!ab_req_ctype_simple(NULL), "none");
}

/* A box's host name: PORT-ID.DOMAIN, the domain maybe with a port. */
static void test_host_box(void)
{
        char port[AB_HOST_PORT_MAX + 1], box[AB_HOST_BOX_MAX + 1];
        tap_ok(ab_req_host_box("49983-AbC12.sbx.example.com", "sbx.example.com", port, box) &&
                   !strcmp(port, "49983") && !strcmp(box, "abc12"),
               "PORT-ID.DOMAIN: port and id, the id lowercased (%s, %s)", port, box);
        tap_ok(ab_req_host_box("3000-x.SBX.example.com.:8443", "sbx.example.com", port, box) &&
                   !strcmp(port, "3000") && !strcmp(box, "x"),
               "any case, a trailing dot and a port of the host");
        tap_ok(ab_req_host_box("49983-x.sbx.test:8443", "sbx.test:8443", port, box),
               "a domain with a port (where a TLS proxy listens)");
        tap_ok(ab_req_host_box("49983-x.sbx.test", "sbx.test:8443", port, box),
               "... whose port is not compared");
        tap_ok(!ab_req_host_box("49983-x.other.test", "sbx.test", port, box), "another domain");
        tap_ok(!ab_req_host_box("49983-x.evilsbx.test", "sbx.test", port, box),
               "a name that only ends like the domain");
        tap_ok(!ab_req_host_box("sbx.test", "sbx.test", port, box), "the domain itself");
        tap_ok(!ab_req_host_box("x-49983.sbx.test", "sbx.test", port, box), "no port first");
        tap_ok(!ab_req_host_box("123456-x.sbx.test", "sbx.test", port, box), "a port of 6 digits");
        tap_ok(!ab_req_host_box("49983-.sbx.test", "sbx.test", port, box), "no id");
        char longer[128];
        snprintf(longer, sizeof(longer), "1-%064d.sbx.test", 0);
        tap_ok(!ab_req_host_box(longer, "sbx.test", port, box), "an id of 64 characters");
        tap_ok(!ab_req_host_box("1-x.sbx.test", NULL, port, box) &&
                   !ab_req_host_box("1-x.sbx.test", "", port, box) &&
                   !ab_req_host_box(NULL, "sbx.test", port, box),
               "no domain, no host");
}

int main(void)
{
        test_target();
        test_loopback();
        test_host_is();
        test_origin();
        test_ctype();
        test_host_box();
        return tap_done();
}

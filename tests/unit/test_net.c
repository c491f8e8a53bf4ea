/* Unit tests: network modes (issue 6).
 *
 * - ab_netpol_parse / _json / _equal / _copy: every mode and alias, seed
 *   001's field names, normalisation, and each malformed input refused with
 *   AB_E_INVALID and a message naming the field;
 * - ab_netpol_allows: deny beats allow, wildcard edges (the apex, look-alike
 *   suffixes), ports, case, IPv4 rules, mode none, the reason text;
 * - ab_net_host_normalize, ab_proxy_parse (CONNECT, absolute-form rewrite,
 *   domain fronting through Host, hop-by-hop headers, malformed heads),
 *   ab_net_env, ab_addr_reason / ab_name_reason;
 * - as root: sockets and rtnetlink in another network namespace
 *   (ab_netns_socket, ab_nl_*), and the egress proxy end to end against an
 *   upstream in a child namespace behind a veth pair.
 * No packet can leave the machine: as root the test first moves itself into a
 * network namespace of its own (only lo and the veth it makes, with
 * documentation addresses), so even a broken proxy or a stray DNS lookup goes
 * nowhere. Without root those parts are skipped with the reason. */
#include "base/util.h"
#include "base/events.h"
#include "base/addrcheck.h"
#include "net/net.h"
#include "net/netns.h"
#include "net/policy.h"
#include "net/proxy.h"
#include "tap.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#define IO_TIMEOUT_MS 20000 /* only against hangs, never a timed assertion */

/* ---- policy parsing ---- */

static int parse_pol(const char *js, ab_netpol *p, ab_err **err)
{
        json_error_t je;
        json_t *j = json_loads(js, JSON_DECODE_ANY, &je);
        if (!j) {
                tap_diag("bad test JSON: %s", js);
                abort();
        }
        int r = ab_netpol_parse(j, p, err);
        json_decref(j);
        return r;
}

/* The policy must be refused with AB_E_INVALID and a message containing `field`. */
static void refused_pol(const char *js, const char *field)
{
        ab_netpol p;
        _cleanup_err_ ab_err *err = NULL;
        int r = parse_pol(js, &p, &err);
        bool ok = r < 0 && err && err->code == AB_E_INVALID && err->msg && strstr(err->msg, field);
        tap_ok(ok, "refused %s (names %s)", js, field);
        if (!ok)
                tap_diag("  r=%d msg=%s", r, err && err->msg ? err->msg : "(none)");
        if (r == 0)
                ab_netpol_clear(&p);
        else
                tap_ok(p.n_allow == 0 && p.n_deny == 0 && !p.allow && !p.deny,
                       "nothing left in the policy after refusing %s", js);
}

static bool rule_is(const ab_net_rule *r, size_t n, size_t i, const char *host, int port)
{
        return i < n && !strcmp(r[i].host, host) && r[i].port == port;
}

static void test_parse(void)
{
        ab_netpol p;
        _cleanup_err_ ab_err *err = NULL;

        TAP_IS_INT(ab_netpol_parse(NULL, &p, &err), 0, "NULL network parses");
        TAP_IS_INT(p.mode, AB_NET_NONE, "NULL network is mode none");
        ab_netpol_clear(&p);
        TAP_IS_INT(parse_pol("null", &p, &err), 0, "JSON null parses");
        TAP_IS_INT(p.mode, AB_NET_NONE, "JSON null is mode none");
        ab_netpol_clear(&p);
        TAP_IS_INT(parse_pol("{}", &p, &err), 0, "{} parses");
        TAP_IS_INT(p.mode, AB_NET_NONE, "{} is mode none");
        ab_netpol_clear(&p);

        static const struct {
                const char *mode;
                ab_net_mode want;
        } modes[] = {{"none", AB_NET_NONE},
                     {"allowlist", AB_NET_ALLOWLIST},
                     {"restricted", AB_NET_ALLOWLIST},
                     {"full", AB_NET_FULL}};
        for (size_t i = 0; i < AB_ARRAY_LEN(modes); i++) {
                _cleanup_free_ char *js = xasprintf("{\"mode\": \"%s\"}", modes[i].mode);
                int r = parse_pol(js, &p, &err);
                tap_ok(r == 0 && p.mode == modes[i].want, "mode \"%s\" parses as %s", modes[i].mode,
                       ab_net_mode_name(modes[i].want));
                tap_ok(p.n_allow == 0 && p.n_deny == 0, "mode \"%s\" alone has no rules",
                       modes[i].mode);
                ab_netpol_clear(&p);
        }
        TAP_IS_STR(ab_net_mode_name(AB_NET_NONE), "none", "mode name none");
        TAP_IS_STR(ab_net_mode_name(AB_NET_ALLOWLIST), "allowlist", "mode name allowlist");
        TAP_IS_STR(ab_net_mode_name(AB_NET_FULL), "full", "mode name full");

        /* rules without a mode mean the proxy */
        TAP_IS_INT(parse_pol("{\"allow\": [\"example.com\"]}", &p, &err), 0, "allow without mode");
        TAP_IS_INT(p.mode, AB_NET_ALLOWLIST, "rules without a mode -> allowlist");
        ab_netpol_clear(&p);
        TAP_IS_INT(parse_pol("{\"deny\": [\"example.com\"]}", &p, &err), 0, "deny without mode");
        TAP_IS_INT(p.mode, AB_NET_ALLOWLIST, "deny rules without a mode -> allowlist");
        ab_netpol_clear(&p);
        TAP_IS_INT(parse_pol("{\"allow\": []}", &p, &err), 0, "empty allow without mode");
        TAP_IS_INT(p.mode, AB_NET_NONE, "no rules and no mode -> none");
        ab_netpol_clear(&p);
        TAP_IS_INT(parse_pol("{\"mode\": \"full\", \"allow\": [\"a.com\"]}", &p, &err), 0,
                   "full with rules");
        TAP_IS_INT(p.mode, AB_NET_FULL, "an explicit mode wins over the rules' default");
        ab_netpol_clear(&p);

        /* seed 001's names */
        TAP_IS_INT(parse_pol("{\"mode\": \"restricted\", \"allowed_domains\": [\"a.com\", "
                             "\"*.b.org\"], \"blocked_domains\": [\"x.b.org\"]}",
                             &p, &err),
                   0, "seed 001 aliases parse");
        tap_ok(p.mode == AB_NET_ALLOWLIST && p.n_allow == 2 && p.n_deny == 1 &&
                   rule_is(p.allow, p.n_allow, 0, "a.com", 0) &&
                   rule_is(p.allow, p.n_allow, 1, "*.b.org", 0) &&
                   rule_is(p.deny, p.n_deny, 0, "x.b.org", 0),
               "allowed_domains -> allow, blocked_domains -> deny");
        ab_netpol_clear(&p);

        /* normalisation */
        TAP_IS_INT(parse_pol("{\"allow\": [\"Example.COM.\", \"*.API.Example.com:443\", \"*\", "
                             "\"*:8080\", \"203.0.113.5\", \"198.51.100.7:22\", \"a_b-c.d\"]}",
                             &p, &err),
                   0, "rules to normalise parse");
        tap_ok(p.n_allow == 7, "seven rules kept");
        tap_ok(rule_is(p.allow, p.n_allow, 0, "example.com", 0),
               "upper case and trailing dot normalised");
        tap_ok(rule_is(p.allow, p.n_allow, 1, "*.api.example.com", 443), "wildcard with port");
        tap_ok(rule_is(p.allow, p.n_allow, 2, "*", 0), "\"*\"");
        tap_ok(rule_is(p.allow, p.n_allow, 3, "*", 8080), "\"*:8080\"");
        tap_ok(rule_is(p.allow, p.n_allow, 4, "203.0.113.5", 0), "IPv4 rule");
        tap_ok(rule_is(p.allow, p.n_allow, 5, "198.51.100.7", 22), "IPv4 rule with port");
        tap_ok(rule_is(p.allow, p.n_allow, 6, "a_b-c.d", 0), "underscore and hyphen kept");

        /* JSON round trip */
        json_t *j = ab_netpol_json(&p);
        _cleanup_free_ char *dump = j ? json_dumps(j, JSON_COMPACT) : NULL;
        TAP_IS_STR(dump,
                   "{\"mode\":\"allowlist\",\"allow\":[\"example.com\",\"*.api.example.com:443\","
                   "\"*\",\"*:8080\",\"203.0.113.5\",\"198.51.100.7:22\",\"a_b-c.d\"],\"deny\":[]}",
                   "canonical JSON");
        ab_netpol back;
        TAP_IS_INT(ab_netpol_parse(j, &back, &err), 0, "canonical JSON parses back");
        tap_ok(ab_netpol_equal(&p, &back), "round trip is equal");
        ab_netpol_clear(&back);
        json_decref(j);

        /* copy and equality */
        ab_netpol c;
        ab_netpol_copy(&p, &c);
        tap_ok(ab_netpol_equal(&p, &c), "a copy is equal");
        tap_ok(c.allow != p.allow && c.allow[0].host != p.allow[0].host, "a copy is deep");
        c.allow[1].port = 444;
        tap_ok(!ab_netpol_equal(&p, &c), "a different port is not equal");
        c.allow[1].port = 443;
        c.mode = AB_NET_FULL;
        tap_ok(!ab_netpol_equal(&p, &c), "a different mode is not equal");
        c.mode = AB_NET_ALLOWLIST;
        free(c.allow[0].host);
        c.allow[0].host = xstrdup("example.org");
        tap_ok(!ab_netpol_equal(&p, &c), "a different host is not equal");
        ab_netpol_clear(&c);
        TAP_IS_STR(p.allow[0].host, "example.com", "clearing the copy leaves the original");
        ab_netpol d;
        TAP_IS_INT(parse_pol("{\"allow\": [\"Example.COM.\", \"*.API.Example.com:443\", \"*\", "
                             "\"*:8080\", \"203.0.113.5\", \"198.51.100.7:22\"]}",
                             &d, &err),
                   0, "shorter list parses");
        tap_ok(!ab_netpol_equal(&p, &d), "a rule fewer is not equal");
        ab_netpol_clear(&d);
        TAP_IS_INT(parse_pol("{\"allow\": [\"example.com\", \"*.api.example.com:443\", \"*\", "
                             "\"*:8080\", \"203.0.113.5\", \"198.51.100.7:22\", \"a_b-c.d\"], "
                             "\"deny\": [\"x.com\"]}",
                             &d, &err),
                   0, "list with a deny rule parses");
        tap_ok(!ab_netpol_equal(&p, &d), "an extra deny rule is not equal");
        ab_netpol_clear(&d);
        ab_netpol_clear(&p);
        ab_netpol e1 = {0}, e2;
        ab_netpol_copy(&e1, &e2);
        tap_ok(ab_netpol_equal(&e1, &e2) && e2.n_allow == 0, "copy of an empty policy");
        ab_netpol_clear(&e2);

        /* 256 rules is the limit, 257 is refused */
        json_t *many = json_array();
        for (int i = 0; i < AB_NET_MAX_RULES; i++)
                json_array_append_new(many, json_sprintf("h%d.example.com", i));
        json_t *nw = json_pack("{s:O}", "allow", many);
        TAP_IS_INT(ab_netpol_parse(nw, &p, &err), 0, "256 rules parse");
        TAP_IS_INT(p.n_allow, AB_NET_MAX_RULES, "256 rules kept");
        ab_netpol_clear(&p);
        json_array_append_new(many, json_string("one-too-many.example.com"));
        ab_err_free(&err);
        int r = ab_netpol_parse(nw, &p, &err);
        tap_ok(r < 0 && err && err->code == AB_E_INVALID && strstr(err->msg, "network.allow"),
               "257 rules refused, naming network.allow");
        if (r == 0)
                ab_netpol_clear(&p);
        ab_err_free(&err);
        json_decref(nw);
        json_decref(many);

        /* malformed input */
        refused_pol("[]", "network");
        refused_pol("\"allowlist\"", "network");
        refused_pol("3", "network");
        refused_pol("{\"mode\": \"allowlist\", \"allow_list\": []}", "network.allow_list");
        refused_pol("{\"Mode\": \"full\"}", "network.Mode");
        refused_pol("{\"mode\": \"open\"}", "network.mode");
        refused_pol("{\"mode\": \"\"}", "network.mode");
        refused_pol("{\"mode\": \"ALLOWLIST\"}", "network.mode");
        refused_pol("{\"mode\": 1}", "network.mode");
        refused_pol("{\"mode\": true}", "network.mode");
        refused_pol("{\"allow\": \"example.com\"}", "network.allow");
        refused_pol("{\"allow\": {}}", "network.allow");
        refused_pol("{\"deny\": 5}", "network.deny");
        refused_pol("{\"allowed_domains\": \"a.com\"}", "network.allowed_domains");
        refused_pol("{\"blocked_domains\": [1]}", "network.blocked_domains[0]");
        refused_pol("{\"allow\": [\"a.com\", 1]}", "network.allow[1]");
        refused_pol("{\"allow\": [null]}", "network.allow[0]");
        refused_pol("{\"allow\": [[\"a.com\"]]}", "network.allow[0]");
        refused_pol("{\"allow\": [\"\"]}", "network.allow[0]");
        refused_pol("{\"deny\": [\"ok.com\", \"\"]}", "network.deny[1]");
        refused_pol("{\"allow\": [\"*.*.x\"]}", "network.allow[0]");
        refused_pol("{\"allow\": [\"a*b.com\"]}", "network.allow[0]");
        refused_pol("{\"allow\": [\"*example.com\"]}", "network.allow[0]");
        refused_pol("{\"allow\": [\"example.*\"]}", "network.allow[0]");
        refused_pol("{\"allow\": [\"**\"]}", "network.allow[0]");
        refused_pol("{\"allow\": [\"*.\"]}", "network.allow[0]");
        refused_pol("{\"allow\": [\"a..b.com\"]}", "network.allow[0]");
        refused_pol("{\"allow\": [\".a.com\"]}", "network.allow[0]");
        refused_pol("{\"allow\": [\"a b.com\"]}", "network.allow[0]");
        refused_pol("{\"allow\": [\"a/b.com\"]}", "network.allow[0]");
        refused_pol("{\"allow\": [\"http://a.com\"]}", "network.allow[0]");
        refused_pol("{\"allow\": [\"a.com:0\"]}", "network.allow[0]");
        refused_pol("{\"allow\": [\"a.com:65536\"]}", "network.allow[0]");
        refused_pol("{\"allow\": [\"a.com:x\"]}", "network.allow[0]");
        refused_pol("{\"allow\": [\"a.com:\"]}", "network.allow[0]");
        refused_pol("{\"allow\": [\"a.com:-1\"]}", "network.allow[0]");
        refused_pol("{\"allow\": [\"a.com:80x\"]}", "network.allow[0]");
        refused_pol("{\"allow\": [\":80\"]}", "network.allow[0]");
        refused_pol("{\"allow\": [\"::1\"]}", "network.allow[0]");
        refused_pol("{\"allow\": [\"2001:db8::1\"]}", "network.allow[0]");
        refused_pol("{\"allow\": [\"[2001:db8::1]\"]}", "network.allow[0]");
        refused_pol("{\"allow\": [\"[2001:db8::1]:443\"]}", "network.allow[0]");
        refused_pol("{\"deny\": [\"fe80::1\"]}", "network.deny[0]");
        char long_rule[400];
        memset(long_rule, 'a', sizeof(long_rule) - 1);
        long_rule[sizeof(long_rule) - 1] = '\0';
        _cleanup_free_ char *js = xasprintf("{\"allow\": [\"%s\"]}", long_rule);
        refused_pol(js, "network.allow[0]");
}

/* ---- policy decisions ---- */

static bool allows(const ab_netpol *p, const char *host, int port)
{
        return ab_netpol_allows(p, host, port, NULL, 0);
}

static void test_allows(void)
{
        ab_netpol p;
        _cleanup_err_ ab_err *err = NULL;
        char why[128];

        TAP_IS_INT(parse_pol("{\"mode\": \"allowlist\"}", &p, &err), 0, "allowlist, no rules");
        strcpy(why, "");
        tap_ok(!ab_netpol_allows(&p, "example.com", 443, why, sizeof(why)), "no rules -> deny");
        TAP_IS_STR(why, "no rules", "why: no rules");
        ab_netpol_clear(&p);

        TAP_IS_INT(parse_pol("{\"mode\": \"allowlist\", \"allow\": [\"*.example.com\", "
                             "\"exact.org\", \"api.test:443\", \"203.0.113.5\"], "
                             "\"deny\": [\"bad.example.com\", \"*.evil.example.com\", "
                             "\"exact.org:25\"]}",
                             &p, &err),
                   0, "a policy with allow and deny rules");
        tap_ok(allows(&p, "a.example.com", 443), "*.example.com allows a.example.com");
        tap_ok(allows(&p, "a.b.example.com", 80), "*.example.com allows a.b.example.com");
        tap_ok(!allows(&p, "example.com", 443), "*.example.com does not allow example.com");
        tap_ok(!allows(&p, "badexample.com", 443), "*.example.com does not allow badexample.com");
        tap_ok(!allows(&p, "example.com.evil.org", 443),
               "*.example.com does not allow example.com.evil.org");
        tap_ok(!allows(&p, "aexample.com", 443), "*.example.com does not allow aexample.com");
        tap_ok(!allows(&p, ".example.com", 443), "*.example.com does not allow .example.com");
        tap_ok(allows(&p, "A.Example.COM", 443), "matching is case-insensitive");
        tap_ok(allows(&p, "exact.org", 80), "exact name allowed");
        tap_ok(!allows(&p, "www.exact.org", 80), "exact name does not allow its subdomains");
        tap_ok(!allows(&p, "exact.org.evil", 80), "exact name is not a prefix match");
        tap_ok(!allows(&p, "xexact.org", 80), "exact name is not a suffix match");
        tap_ok(allows(&p, "api.test", 443), "port rule allows its port");
        tap_ok(!allows(&p, "api.test", 80), "port rule denies another port");
        tap_ok(allows(&p, "203.0.113.5", 8443), "IPv4 rule allows the address");
        tap_ok(!allows(&p, "203.0.113.50", 8443), "IPv4 rule is exact");
        tap_ok(!allows(&p, "203.0.113.6", 8443), "IPv4 rule does not allow a neighbour");

        strcpy(why, "");
        tap_ok(!ab_netpol_allows(&p, "bad.example.com", 443, why, sizeof(why)),
               "deny beats a matching allow wildcard");
        TAP_IS_STR(why, "deny rule \"bad.example.com\"", "why names the deny rule");
        strcpy(why, "");
        tap_ok(!ab_netpol_allows(&p, "x.evil.example.com", 443, why, sizeof(why)),
               "wildcard deny beats wildcard allow");
        TAP_IS_STR(why, "deny rule \"*.evil.example.com\"", "why names the wildcard deny rule");
        tap_ok(allows(&p, "evil.example.com", 443), "the deny wildcard spares its apex");
        strcpy(why, "");
        tap_ok(!ab_netpol_allows(&p, "exact.org", 25, why, sizeof(why)), "port deny rule");
        TAP_IS_STR(why, "deny rule \"exact.org:25\"", "why names the deny rule's port");
        tap_ok(allows(&p, "exact.org", 26), "a port deny rule spares other ports");
        strcpy(why, "");
        tap_ok(!ab_netpol_allows(&p, "other.net", 443, why, sizeof(why)), "unlisted -> deny");
        TAP_IS_STR(why, "no allow rule matches", "why: no allow rule matches");
        char tiny[4] = "zzz";
        tap_ok(!ab_netpol_allows(&p, "other.net", 443, tiny, sizeof(tiny)) && !strcmp(tiny, "no "),
               "why is truncated to its buffer");
        ab_netpol_clear(&p);

        TAP_IS_INT(parse_pol("{\"allow\": [\"*\"], \"deny\": [\"*.internal.corp\"]}", &p, &err), 0,
                   "allow * parses");
        tap_ok(allows(&p, "anything.at.all", 1), "\"*\" allows every host");
        tap_ok(allows(&p, "203.0.113.9", 65535), "\"*\" allows addresses");
        tap_ok(!allows(&p, "db.internal.corp", 5432), "deny still beats \"*\"");
        ab_netpol_clear(&p);

        TAP_IS_INT(parse_pol("{\"allow\": [\"*:443\"]}", &p, &err), 0, "allow *:443 parses");
        tap_ok(allows(&p, "x.org", 443) && !allows(&p, "x.org", 80), "\"*:443\" is port-only");
        ab_netpol_clear(&p);

        TAP_IS_INT(parse_pol("{\"deny\": [\"evil.com\"]}", &p, &err), 0, "deny-only parses");
        tap_ok(!allows(&p, "good.com", 443), "deny rules alone allow nothing");
        ab_netpol_clear(&p);

        TAP_IS_INT(parse_pol("{\"mode\": \"none\", \"allow\": [\"*\"]}", &p, &err), 0,
                   "none with rules parses");
        strcpy(why, "");
        tap_ok(!ab_netpol_allows(&p, "example.com", 443, why, sizeof(why)),
               "mode none denies even with \"*\"");
        tap_ok(strstr(why, "none") != NULL, "why says mode none (%s)", why);
        ab_netpol_clear(&p);

        TAP_IS_INT(parse_pol("{\"mode\": \"full\", \"allow\": [\"a.com\"]}", &p, &err), 0,
                   "full with rules parses");
        tap_ok(allows(&p, "a.com", 80) && !allows(&p, "b.com", 80), "full mode decides by rules");
        ab_netpol_clear(&p);
}

/* ---- host normalisation ---- */

static void norm_ok(const char *in, const char *want)
{
        char out[256] = "";
        bool ok = ab_net_host_normalize(in, out, sizeof(out));
        tap_ok(ok && !strcmp(out, want), "normalize \"%s\" -> \"%s\"", in, want);
        if (!ok || strcmp(out, want))
                tap_diag("  ok=%d got \"%s\"", ok, out);
}

static void norm_bad(const char *in, const char *name)
{
        char out[256];
        tap_ok(!ab_net_host_normalize(in, out, sizeof(out)), "normalize refuses %s", name);
}

static void test_normalize(void)
{
        norm_ok("Example.COM", "example.com");
        norm_ok("example.com.", "example.com");
        norm_ok("example.com..", "example.com");
        norm_ok("[2001:DB8::1]", "2001:db8::1");
        norm_ok("2001:db8::1", "2001:db8::1");
        norm_ok("[::1]", "::1");
        norm_ok("203.0.113.5", "203.0.113.5");
        norm_ok("a_b-c", "a_b-c");
        norm_bad("a..b", "\"a..b\"");
        norm_bad("[1.2.3.4]", "brackets around an IPv4 address");
        norm_bad("[example.com]", "brackets around a name");
        norm_bad(".a", "\".a\"");
        norm_bad("a b", "\"a b\"");
        norm_bad("%", "\"%\"");
        norm_bad("a%b.com", "\"a%b.com\"");
        norm_bad("fe80::1%eth0", "an IPv6 zone");
        norm_bad("", "empty");
        norm_bad(".", "\".\"");
        norm_bad("[]", "\"[]\"");
        norm_bad("[2001:db8::1", "an unclosed bracket");
        norm_bad("2001:db8:::1", "a bad IPv6 literal");
        norm_bad("a:b", "a colon that is not IPv6");
        norm_bad("a/b", "a slash");
        norm_bad("a@b", "an at sign");
        norm_bad("a\tb", "a tab");
        norm_bad("*.a.com", "a wildcard");
        norm_bad("\xc3\xa9.com", "non-ASCII");

        char name[300];
        memset(name, 'a', 253);
        name[253] = '\0';
        char out[256];
        tap_ok(ab_net_host_normalize(name, out, sizeof(out)) && strlen(out) == 253,
               "253 characters are allowed");
        strcat(name, ".");
        tap_ok(ab_net_host_normalize(name, out, sizeof(out)) && strlen(out) == 253,
               "253 characters and a trailing dot are allowed");
        memset(name, 'a', 254);
        name[254] = '\0';
        tap_ok(!ab_net_host_normalize(name, out, sizeof(out)), "254 characters are refused");
        memset(name, 'b', 299);
        name[299] = '\0';
        tap_ok(!ab_net_host_normalize(name, out, sizeof(out)), "299 characters are refused");
        char small[4] = "zzz";
        tap_ok(!ab_net_host_normalize("abcd", small, sizeof(small)),
               "refused when the output buffer is too small");
        tap_ok(ab_net_host_normalize("abc", small, sizeof(small)) && !strcmp(small, "abc"),
               "fits exactly with its NUL");
}

/* ---- the proxy's request parser ---- */

/* Parses s from an exact-size heap copy, so a sanitizer sees any overread. */
static int pparse(const char *s, ab_proxy_req *r, const char **why)
{
        size_t n = strlen(s);
        char *buf = xmalloc(n ? n : 1);
        memcpy(buf, s, n);
        *why = NULL;
        int st = ab_proxy_parse(buf, n, r, why);
        free(buf);
        return st;
}

static void parse_bad(const char *req, const char *name)
{
        ab_proxy_req r;
        const char *why = NULL;
        int st = pparse(req, &r, &why);
        tap_ok(st == 400 && why && !r.head, "400: %s", name);
        if (st != 400)
                tap_diag("  got %d (%s)", st, why ? why : "no reason");
        free(r.head);
}

/* A plain request must rewrite to exactly `want` for host:port. */
static void parse_rewrite(const char *req, const char *host, int port, const char *want,
                          const char *name)
{
        ab_proxy_req r;
        const char *why = NULL;
        int st = pparse(req, &r, &why);
        tap_ok(st == 0 && !r.connect && !strcmp(r.host, host) && r.port == port,
               "%s: host %s port %d", name, host, port);
        if (st)
                tap_diag("  status %d: %s", st, why ? why : "?");
        else if (strcmp(r.host, host) || r.port != port)
                tap_diag("  got host %s port %d", r.host, r.port);
        bool same =
            st == 0 && r.head && r.head_len == strlen(want) && !memcmp(r.head, want, r.head_len);
        tap_ok(same, "%s: rewritten head", name);
        if (!same && st == 0 && r.head)
                tap_diag("  got  \"%.*s\"\n#   want \"%s\"", (int)r.head_len, r.head, want);
        free(r.head);
}

static void test_proxy_parse(void)
{
        ab_proxy_req r;
        const char *why;

        /* CONNECT */
        int st =
            pparse("CONNECT Example.COM:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", &r, &why);
        tap_ok(st == 0 && r.connect && !strcmp(r.method, "CONNECT") &&
                   !strcmp(r.host, "example.com") && r.port == 443 && !r.head,
               "CONNECT host:port");
        st = pparse("CONNECT [2001:DB8::1]:8443 HTTP/1.1\r\n\r\n", &r, &why);
        tap_ok(st == 0 && r.connect && !strcmp(r.host, "2001:db8::1") && r.port == 8443,
               "CONNECT [v6]:port");
        st = pparse("CONNECT example.com.:22 HTTP/1.0\r\n\r\n", &r, &why);
        tap_ok(st == 0 && !strcmp(r.host, "example.com") && r.port == 22,
               "CONNECT over HTTP/1.0, trailing dot dropped");
        parse_bad("CONNECT example.com HTTP/1.1\r\n\r\n", "CONNECT without a port");
        parse_bad("CONNECT [2001:db8::1] HTTP/1.1\r\n\r\n", "CONNECT [v6] without a port");
        parse_bad("CONNECT example.com: HTTP/1.1\r\n\r\n", "CONNECT with an empty port");
        parse_bad("CONNECT example.com:0 HTTP/1.1\r\n\r\n", "CONNECT to port 0");
        parse_bad("CONNECT example.com:65536 HTTP/1.1\r\n\r\n", "CONNECT to port 65536");
        parse_bad("CONNECT example.com:44x HTTP/1.1\r\n\r\n", "CONNECT with a bad port");
        parse_bad("CONNECT example.com:-1 HTTP/1.1\r\n\r\n", "CONNECT with a negative port");
        parse_bad("CONNECT [2001:db8::1]x:443 HTTP/1.1\r\n\r\n", "CONNECT [v6] junk");
        parse_bad("CONNECT :443 HTTP/1.1\r\n\r\n", "CONNECT with no host");
        parse_bad("CONNECT user@example.com:443 HTTP/1.1\r\n\r\n", "CONNECT with userinfo");
        parse_bad("CONNECT a..b:443 HTTP/1.1\r\n\r\n", "CONNECT to a bad name");
        parse_bad("CONNECT http://example.com:443 HTTP/1.1\r\n\r\n", "CONNECT to a URL");

        /* absolute-form plain HTTP */
        parse_rewrite("GET http://Example.COM./a/b?c=d HTTP/1.1\r\n"
                      "Host: evil.com\r\n"
                      "X-A: 1\r\n"
                      "Proxy-Authorization: Basic Zm9vOmJhcg==\r\n"
                      "Proxy-Connection: keep-alive\r\n"
                      "Connection: keep-alive\r\n"
                      "Keep-Alive: 300\r\n"
                      "User-Agent: t/1\r\n"
                      "X-B: 2\r\n"
                      "\r\n",
                      "example.com", 80,
                      "GET /a/b?c=d HTTP/1.1\r\n"
                      "Host: example.com\r\n"
                      "X-A: 1\r\n"
                      "User-Agent: t/1\r\n"
                      "X-B: 2\r\n"
                      "Connection: close\r\n"
                      "\r\n",
                      "absolute URL");
        parse_rewrite("POST http://h:8080/p HTTP/1.0\r\n"
                      "host: evil.com:8080\r\n"
                      "PROXY-AUTHORIZATION: x\r\n"
                      "CONNECTION: Upgrade\r\n"
                      "Upgrade: websocket\r\n"
                      "TE: trailers\r\n"
                      "Hostile: 1\r\n"
                      "Connection-Id: 7\r\n"
                      "Content-Length: 3\r\n"
                      "\r\n",
                      "h", 8080,
                      "POST /p HTTP/1.1\r\n"
                      "Host: h:8080\r\n"
                      "Hostile: 1\r\n"
                      "Connection-Id: 7\r\n"
                      "Content-Length: 3\r\n"
                      "Connection: close\r\n"
                      "\r\n",
                      "port kept in Host, hop-by-hop dropped whatever their case");
        parse_rewrite("GET http://h?x=1 HTTP/1.1\r\n\r\n", "h", 80,
                      "GET /?x=1 HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
                      "query-only URL");
        parse_rewrite("GET http://h HTTP/1.1\r\n\r\n", "h", 80,
                      "GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n", "URL without path");
        parse_rewrite("GET HTTP://h:80/ HTTP/1.1\r\n\r\n", "h", 80,
                      "GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
                      "scheme in upper case, explicit port 80");
        parse_rewrite("GET http://[2001:DB8::1]:8080/x HTTP/1.1\r\n\r\n", "2001:db8::1", 8080,
                      "GET /x HTTP/1.1\r\nHost: [2001:db8::1]:8080\r\nConnection: close\r\n\r\n",
                      "IPv6 URL");
        parse_rewrite("GET http://[2001:db8::1]/ HTTP/1.1\r\n\r\n", "2001:db8::1", 80,
                      "GET / HTTP/1.1\r\nHost: [2001:db8::1]\r\nConnection: close\r\n\r\n",
                      "IPv6 URL, default port");
        parse_rewrite("DELETE http://a.b/c/d?e#f HTTP/1.1\r\nHost: a.b\r\n\r\n", "a.b", 80,
                      "DELETE /c/d?e#f HTTP/1.1\r\nHost: a.b\r\nConnection: close\r\n\r\n",
                      "path, query and fragment kept");
        /* bytes after the head are not part of it */
        st = pparse("GET http://h/ HTTP/1.1\r\nContent-Length: 4\r\n\r\nbody", &r, &why);
        tap_ok(st == 0 && r.head && r.head_len >= 4 && !memmem(r.head, r.head_len, "body", 4),
               "the body is not copied into the head");
        free(r.head);

        parse_bad("GET https://example.com/ HTTP/1.1\r\n\r\n", "https:// absolute URL");
        parse_bad("GET /x HTTP/1.1\r\nHost: example.com\r\n\r\n", "origin-form target");
        parse_bad("GET * HTTP/1.1\r\n\r\n", "asterisk-form target");
        parse_bad("GET ftp://example.com/ HTTP/1.1\r\n\r\n", "ftp URL");
        parse_bad("GET http:// HTTP/1.1\r\n\r\n", "URL without host");
        parse_bad("GET http:///x HTTP/1.1\r\n\r\n", "URL with an empty host");
        parse_bad("GET http://user@example.com/ HTTP/1.1\r\n\r\n", "userinfo");
        parse_bad("GET http://user:pw@example.com/ HTTP/1.1\r\n\r\n", "userinfo with password");
        parse_bad("GET http://@example.com/ HTTP/1.1\r\n\r\n", "empty userinfo");
        parse_bad("GET http://example.com:99999/ HTTP/1.1\r\n\r\n", "port out of range");
        /* two framings of one body: request smuggling */
        parse_bad("POST http://example.com/ HTTP/1.1\r\nContent-Length: 5\r\n"
                  "Transfer-Encoding: chunked\r\n\r\n",
                  "Content-Length with Transfer-Encoding");
        parse_bad("POST http://example.com/ HTTP/1.1\r\ntransfer-encoding: chunked\r\n"
                  "content-length: 0\r\n\r\n",
                  "Transfer-Encoding then Content-Length (any case)");
        parse_bad("POST http://example.com/ HTTP/1.1\r\nContent-Length: 5\r\n"
                  "Content-Length: 6\r\n\r\n",
                  "two Content-Lengths");
        parse_bad("POST http://example.com/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n"
                  "Transfer-Encoding: identity\r\n\r\n",
                  "two Transfer-Encodings");
        parse_bad("GET http://example.com:/ HTTP/1.1\r\n\r\n", "empty port");
        parse_bad("GET http://exa mple.com/ HTTP/1.1\r\n\r\n", "space in the host");
        parse_bad("GET http://example.com/ HTTP/2.0\r\n\r\n", "HTTP/2.0");
        parse_bad("GET http://example.com/ HTTP/1.Z\r\n\r\n", "HTTP/1.Z");
        /* smuggling hardening: no bare CR/LF or other control characters */
        parse_bad("GET http://allowed.test/ HTTP/1.1\r\nX-A: 1\nHost: evil.com\r\n\r\n",
                  "bare LF inside a header");
        parse_bad("GET http://allowed.test/x\nHost:evil.com\nX: HTTP/1.1\r\n\r\n",
                  "bare LF inside the request line");
        parse_bad("GET http://allowed.test/ HTTP/1.1\r\nX-A: 1\rHost: evil.com\r\n\r\n",
                  "bare CR inside a header");
        parse_bad("GET http://allowed.test/ HTTP/1.1\r\nX-A: a\x01b\r\n\r\n", "control byte");
        parse_bad("GET http://allowed.test/ HTTP/1.1\r\nHost\t: evil.com\r\n\r\n",
                  "tab before the colon");
        parse_bad("CONNECT [allowed.test]:443 HTTP/1.1\r\n\r\n", "brackets around a name");
        parse_bad("GET http://example.com/ HTTP/1.10\r\n\r\n", "HTTP/1.10");
        parse_bad("GET http://example.com/ http/1.1\r\n\r\n", "lower-case version");
        parse_bad("GET http://example.com/\r\n\r\n", "HTTP/0.9 (no version)");
        parse_bad("GET http://example.com/ HTTP/1.1 x\r\n\r\n", "extra field in the request line");
        parse_bad("GET  http://example.com/ HTTP/1.1\r\n\r\n", "double space");
        parse_bad(" GET http://example.com/ HTTP/1.1\r\n\r\n", "leading space");
        parse_bad("GARBAGE\r\n\r\n", "garbage request line");
        parse_bad("\r\n\r\n", "empty request line");
        parse_bad("", "empty input");
        parse_bad("GET http://example.com/ HTTP/1.1", "no CRLF at all");
        parse_bad("get http://example.com/ HTTP/1.1\r\n\r\n", "lower-case method");
        parse_bad("Get http://example.com/ HTTP/1.1\r\n\r\n", "mixed-case method");
        parse_bad("G3T http://example.com/ HTTP/1.1\r\n\r\n", "digit in the method");
        parse_bad("connect example.com:443 HTTP/1.1\r\n\r\n", "lower-case CONNECT");
        parse_bad("ABCDEFGHIJKLMNOPQRSTU http://example.com/ HTTP/1.1\r\n\r\n", "method too long");
        parse_bad("GET http://example.com/ HTTP/1.1\r\nNoColon\r\n\r\n", "header without colon");
        parse_bad("GET http://example.com/ HTTP/1.1\r\n: value\r\n\r\n", "header without name");
        parse_bad("GET http://example.com/ HTTP/1.1\r\nHost : evil.com\r\n\r\n",
                  "space before the colon");
        parse_bad("GET http://example.com/ HTTP/1.1\r\nX-A: 1\r\n", "unterminated headers");
        parse_bad("GET http://example.com/ HTTP/1.1\r\nX-A: 1", "headers cut mid-line");
        parse_bad("GET http://example.com/ HTTP/1.1\r\n", "no blank line");
}

/* ---- environment and address checks ---- */

static bool env_has(char **v, const char *kv)
{
        for (; v && *v; v++)
                if (!strcmp(*v, kv))
                        return true;
        return false;
}

static size_t env_len(char **v)
{
        size_t n = 0;
        while (v && v[n])
                n++;
        return n;
}

static void test_env(void)
{
        ab_netpol p = {.mode = AB_NET_ALLOWLIST};
        _cleanup_strv_ char **v = ab_net_env(&p);
        static const char *const want[] = {
            "HTTP_PROXY=http://127.0.0.1:3128",  "http_proxy=http://127.0.0.1:3128",
            "HTTPS_PROXY=http://127.0.0.1:3128", "https_proxy=http://127.0.0.1:3128",
            "ALL_PROXY=http://127.0.0.1:3128",   "all_proxy=http://127.0.0.1:3128",
            "NO_PROXY=localhost,127.0.0.1,::1",  "no_proxy=localhost,127.0.0.1,::1"};
        for (size_t i = 0; i < AB_ARRAY_LEN(want); i++)
                tap_ok(env_has(v, want[i]), "allowlist env has %s", want[i]);
        TAP_IS_INT(env_len(v), AB_ARRAY_LEN(want), "allowlist env has nothing else");

        p.mode = AB_NET_NONE;
        _cleanup_strv_ char **none = ab_net_env(&p);
        tap_ok(none && env_len(none) == 0, "mode none: empty env");
        p.mode = AB_NET_FULL;
        _cleanup_strv_ char **full = ab_net_env(&p);
        tap_ok(full && env_len(full) == 0, "mode full: empty env");
}

static const char *reason_of(const char *ip)
{
        struct sockaddr_storage ss = {0};
        struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
        if (inet_pton(AF_INET, ip, &s4->sin_addr) == 1)
                ss.ss_family = AF_INET;
        else if (inet_pton(AF_INET6, ip, &s6->sin6_addr) == 1)
                ss.ss_family = AF_INET6;
        else
                abort(); /* a typo below */
        return ab_addr_reason((struct sockaddr *)&ss);
}

static void test_addrcheck(void)
{
        static const struct {
                const char *ip, *why; /* why NULL: reachable */
        } cases[] = {
            {"127.0.0.1", "loopback"},
            {"127.255.0.9", "loopback"},
            {"10.1.2.3", "private"},
            {"172.16.0.1", "private"},
            {"192.168.1.1", "private"},
            {"169.254.169.254", "cloud metadata"},
            {"169.254.1.1", "link-local"},
            {"0.0.0.0", "unspecified"},
            {"100.64.0.1", "carrier-grade NAT"},
            {"::1", "loopback"},
            {"::", "unspecified"},
            {"::ffff:127.0.0.1", "loopback"},
            {"::ffff:10.0.0.1", "private"},
            {"::ffff:169.254.169.254", "cloud metadata"},
            {"64:ff9b::7f00:1", "loopback"},
            {"fd00::1", "unique local"},
            {"fe80::1", "link-local"},
            {"203.0.113.10", NULL},
            {"198.51.100.2", NULL},
            {"192.0.2.1", NULL},
            {"2001:db8::1", NULL},
            {"::ffff:203.0.113.10", NULL},
        };
        for (size_t i = 0; i < AB_ARRAY_LEN(cases); i++) {
                const char *got = reason_of(cases[i].ip);
                if (cases[i].why)
                        tap_ok(got && !strcmp(got, cases[i].why), "%s refused: %s", cases[i].ip,
                               cases[i].why);
                else
                        tap_ok(!got, "%s reachable", cases[i].ip);
                if (cases[i].why ? !got || strcmp(got, cases[i].why) : got != NULL)
                        tap_diag("  got %s", got ? got : "(reachable)");
        }
        struct sockaddr_storage un = {.ss_family = AF_UNIX};
        tap_ok(ab_addr_reason((struct sockaddr *)&un) != NULL, "a non-IP address is refused");

        /* the server's listen address, in every form that reaches it */
        tap_ok(reason_of("203.0.113.77") == NULL, "control: 203.0.113.77 reachable before");
        struct sockaddr_in lst = {.sin_family = AF_INET, .sin_port = htons(8080)};
        inet_pton(AF_INET, "203.0.113.77", &lst.sin_addr);
        tap_ok(ab_addr_note_listen((struct sockaddr *)&lst) == 0, "a listen address is noted");
        static const char *const forms[] = {"203.0.113.77", "::ffff:203.0.113.77",
                                            "64:ff9b::cb00:714d", "2002:cb00:714d::1"};
        for (size_t i = 0; i < AB_ARRAY_LEN(forms); i++) {
                const char *got = reason_of(forms[i]);
                tap_ok(got && !strcmp(got, "this host's address"),
                       "the listen address as %s is refused", forms[i]);
        }
        tap_ok(reason_of("203.0.113.78") == NULL, "its neighbour is not");
        struct sockaddr_in lo = {.sin_family = AF_INET};
        inet_pton(AF_INET, "127.0.0.1", &lo.sin_addr);
        tap_ok(ab_addr_note_listen((struct sockaddr *)&lo) == 0 &&
                   ab_addr_fixed_reason((struct sockaddr *)&lst) == NULL,
               "a loopback listen address is ignored; the fixed check does not look at the host");
        /* every address of this host's interfaces is refused */
        struct ifaddrs *ifs = NULL;
        int seen = 0, refused = 0;
        if (getifaddrs(&ifs) == 0) {
                for (struct ifaddrs *i = ifs; i; i = i->ifa_next)
                        if (i->ifa_addr && (i->ifa_addr->sa_family == AF_INET ||
                                            i->ifa_addr->sa_family == AF_INET6)) {
                                seen++;
                                refused += ab_addr_reason(i->ifa_addr) != NULL;
                        }
                freeifaddrs(ifs);
        }
        tap_ok(seen > 0 && refused == seen, "each of this host's %d interface addresses is refused",
               seen);

        tap_ok(ab_name_reason("localhost") != NULL, "name localhost refused");
        tap_ok(ab_name_reason("LocalHost.") != NULL, "name LocalHost. refused");
        tap_ok(ab_name_reason("a.localhost") != NULL, "name a.localhost refused");
        tap_ok(ab_name_reason("metadata.google.internal") != NULL,
               "name metadata.google.internal refused");
        tap_ok(ab_name_reason("metadata.google.internal.") != NULL,
               "name metadata.google.internal. refused");
        tap_ok(ab_name_reason("metadata") != NULL, "name metadata refused");
        tap_ok(ab_name_reason("example.com") == NULL, "name example.com allowed");
        tap_ok(ab_name_reason("notlocalhost") == NULL, "name notlocalhost allowed");
        tap_ok(ab_name_reason("metadata.example.com") == NULL, "name metadata.example.com allowed");
}

/* ---- root only: network namespaces ---- */

#define HTTP_PORT 80 /* the upstream's, in the child's namespace */
#define ECHO_PORT 7

static struct sockaddr_in sin4(const char *ip, int port)
{
        struct sockaddr_in s = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        if (inet_pton(AF_INET, ip, &s.sin_addr) != 1)
                abort();
        return s;
}

static struct in_addr in4(const char *ip)
{
        return sin4(ip, 0).sin_addr;
}

/* Connects to ip:port; the fd, or -errno. The timeout only prevents a hang. */
static int tcp_connect(const char *ip, int port)
{
        struct sockaddr_in s = sin4(ip, port);
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        struct timeval tv = {.tv_sec = IO_TIMEOUT_MS / 1000};
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        if (connect(fd, (struct sockaddr *)&s, sizeof(s)) < 0) {
                int e = errno;
                close(fd);
                return -e;
        }
        return fd;
}

static int tcp_listen(const char *ip, int *port)
{
        struct sockaddr_in s = sin4(ip, *port);
        socklen_t len = sizeof(s);
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int one = 1;
        if (fd < 0)
                return -1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, (struct sockaddr *)&s, len) < 0 || listen(fd, 64) < 0 ||
            getsockname(fd, (struct sockaddr *)&s, &len) < 0) {
                close(fd);
                return -1;
        }
        *port = ntohs(s.sin_port);
        return fd;
}

/* Reads until EOF (or error, or a long quiet spell); NUL-terminates. */
static size_t read_to_eof(int fd, char *buf, size_t cap)
{
        size_t n = 0;
        while (n + 1 < cap) {
                struct pollfd pf = {.fd = fd, .events = POLLIN};
                if (poll(&pf, 1, IO_TIMEOUT_MS) != 1)
                        break;
                ssize_t k = read(fd, buf + n, cap - 1 - n);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0)
                        break;
                n += (size_t)k;
        }
        buf[n] = '\0';
        return n;
}

/* Reads exactly n bytes (short at EOF or error); returns how many. */
static size_t read_n(int fd, char *buf, size_t n)
{
        size_t got = 0;
        while (got < n) {
                struct pollfd pf = {.fd = fd, .events = POLLIN};
                if (poll(&pf, 1, IO_TIMEOUT_MS) != 1)
                        break;
                ssize_t k = read(fd, buf + got, n - got);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0)
                        break;
                got += (size_t)k;
        }
        return got;
}

/* Reads up to and including the blank line, one byte at a time so nothing after it is taken. */
static size_t read_head(int fd, char *buf, size_t cap)
{
        size_t n = 0;
        while (n + 1 < cap && read_n(fd, buf + n, 1) == 1) {
                n++;
                if (n >= 4 && !memcmp(buf + n - 4, "\r\n\r\n", 4))
                        break;
        }
        buf[n] = '\0';
        return n;
}

/* -- the child: a network namespace of its own with an HTTP responder and an echo server -- */

typedef struct {
        char op; /* 'c': connect to addr:port, send "x", report 0 or errno */
        struct in_addr addr;
        uint16_t port;
} child_cmd;

static void serve_http(int c)
{
        char head[8192];
        size_t n = read_head(c, head, sizeof(head));
        char *body = xasprintf("upstream saw:\n%.*s", (int)n, head);
        char *resp =
            xasprintf("HTTP/1.1 200 OK\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n%s",
                      strlen(body), body);
        (void)!ab_write_all(c, resp, strlen(resp));
}

static void serve_echo(int c)
{
        char buf[4096];
        for (;;) {
                ssize_t k = read(c, buf, sizeof(buf));
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0 || ab_write_all(c, buf, (size_t)k) < 0)
                        return;
        }
}

/* Forks a server on lfd that forks a handler per connection; all die with their parent. */
static void spawn_server(int lfd, void (*handler)(int))
{
        if (fork() != 0)
                return;
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        for (;;) {
                int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
                if (c < 0) {
                        if (errno == EINTR || errno == ECONNABORTED)
                                continue;
                        _exit(1);
                }
                if (fork() == 0) {
                        prctl(PR_SET_PDEATHSIG, SIGKILL);
                        close(lfd);
                        struct timeval tv = {.tv_sec = IO_TIMEOUT_MS / 1000};
                        setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
                        setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
                        handler(c);
                        _exit(0);
                }
                close(c);
        }
}

static void child_main(int ctl)
{
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        signal(SIGCHLD, SIG_IGN); /* handlers reap themselves */
        int st = unshare(CLONE_NEWNET) < 0 ? errno : 0;
        int hp = HTTP_PORT, ep = ECHO_PORT;
        int http = st ? -1 : tcp_listen("0.0.0.0", &hp);
        int echo = st ? -1 : tcp_listen("0.0.0.0", &ep);
        if (!st && (http < 0 || echo < 0))
                st = EADDRNOTAVAIL;
        if (write(ctl, &st, sizeof(st)) != sizeof(st) || st)
                _exit(1);
        spawn_server(http, serve_http);
        spawn_server(echo, serve_echo);
        close(http);
        close(echo);
        child_cmd c;
        while (ab_read_full(ctl, &c, sizeof(c)) == (ssize_t)sizeof(c)) {
                int r = 0;
                if (c.op == 'c') {
                        char ip[INET_ADDRSTRLEN];
                        inet_ntop(AF_INET, &c.addr, ip, sizeof(ip));
                        int fd = tcp_connect(ip, c.port);
                        if (fd < 0)
                                r = -fd;
                        else {
                                (void)!write(fd, "x", 1);
                                close(fd);
                        }
                } else {
                        r = EINVAL;
                }
                if (write(ctl, &r, sizeof(r)) != sizeof(r))
                        break;
        }
        _exit(0);
}

static struct {
        pid_t pid;
        int ctl;      /* commands to the child */
        int nsfd;     /* its network namespace */
        int nl;       /* rtnetlink in its namespace */
        int nl_host;  /* rtnetlink in ours */
        char hif[16]; /* veth end in our namespace */
        char cif[16]; /* veth end in the child's */
        bool veth_up;
} kid = {.pid = -1, .ctl = -1, .nsfd = -1, .nl = -1, .nl_host = -1};

static void kid_teardown(void)
{
        if (kid.hif[0] && kid.nl_host >= 0)
                (void)ab_nl_link_del(kid.nl_host, kid.hif);
        kid.hif[0] = '\0';
        if (kid.pid > 0) {
                kill(kid.pid, SIGKILL);
                waitpid(kid.pid, NULL, 0);
                kid.pid = -1;
        }
        int *fds[] = {&kid.ctl, &kid.nsfd, &kid.nl, &kid.nl_host};
        for (size_t i = 0; i < AB_ARRAY_LEN(fds); i++)
                if (*fds[i] >= 0) {
                        close(*fds[i]);
                        *fds[i] = -1;
                }
}

/* Asks the child to connect to ip:port; 0 or the errno it got (-1: the child is gone). */
static int kid_connect(const char *ip, int port)
{
        child_cmd c = {.op = 'c', .addr = in4(ip), .port = (uint16_t)port};
        int r;
        if (ab_write_all(kid.ctl, &c, sizeof(c)) < 0 ||
            read_n(kid.ctl, (char *)&r, sizeof(r)) != sizeof(r))
                return -1;
        return r;
}

/* Moves this test into a network namespace of its own with only lo up. */
static const char *isolate(void)
{
        if (geteuid() != 0)
                return "not root: cannot create network namespaces";
        if (unshare(CLONE_NEWNET) < 0)
                return "unshare(CLONE_NEWNET) failed";
        int nl = ab_nl_open();
        if (nl < 0)
                return "no rtnetlink socket";
        int lo = ab_nl_link_index(nl, "lo");
        int r = lo > 0 ? ab_nl_link_up(nl, lo) : lo;
        close(nl);
        return r < 0 ? "cannot bring lo up in the private namespace" : NULL;
}

static const char *kid_setup(void)
{
        int sp[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0)
                return "socketpair failed";
        fflush(stdout);
        kid.pid = fork();
        if (kid.pid == 0) {
                close(sp[0]);
                child_main(sp[1]);
        }
        close(sp[1]);
        kid.ctl = sp[0];
        if (kid.pid < 0)
                return "fork failed";
        int st = -1;
        if (read_n(kid.ctl, (char *)&st, sizeof(st)) != sizeof(st) || st != 0)
                return "the child could not make its namespace and servers";
        kid.nl_host = ab_nl_open();
        if (kid.nl_host < 0)
                return "no rtnetlink socket";
        return NULL;
}

static void test_netns(void)
{
        kid.nsfd = ab_netns_open(kid.pid);
        tap_ok(kid.nsfd >= 0, "ab_netns_open(child) (%d)", kid.nsfd);
        TAP_IS_INT(ab_netns_open(0x3ffffff0), -ENOENT, "ab_netns_open of no process is -ENOENT");
        if (kid.nsfd < 0)
                return;

        kid.nl = ab_netns_socket(kid.nsfd, AF_NETLINK, SOCK_RAW, NETLINK_ROUTE, NULL, 0, 0);
        tap_ok(kid.nl >= 0, "rtnetlink socket in the child's namespace (%d)", kid.nl);
        if (kid.nl < 0)
                return;
        int lo = ab_nl_link_index(kid.nl, "lo");
        tap_ok(lo > 0, "ab_nl_link_index(lo) in the child's namespace (%d)", lo);
        TAP_IS_INT(ab_nl_link_index(kid.nl, "abnomatch0"), -ENODEV,
                   "ab_nl_link_index of a missing name is -ENODEV");
        TAP_IS_INT(ab_nl_link_up(kid.nl, lo), 0, "lo up in the child's namespace");

        /* a port nothing in our namespace listens on */
        int port = 0;
        int probe = tcp_listen("127.0.0.1", &port);
        tap_ok(probe >= 0, "probe port %d", port);
        if (probe < 0)
                return;
        close(probe);
        TAP_IS_INT(tcp_connect("127.0.0.1", port), -ECONNREFUSED, "nothing on the probe port yet");

        struct sockaddr_in a = sin4("127.0.0.1", port);
        _cleanup_close_ int lfd =
            ab_netns_socket(kid.nsfd, AF_INET, SOCK_STREAM, 0, (struct sockaddr *)&a, sizeof(a), 8);
        tap_ok(lfd >= 0, "ab_netns_socket listener in the child's namespace (%d)", lfd);
        if (lfd < 0)
                return;
        struct sockaddr_in got;
        socklen_t gl = sizeof(got);
        tap_ok(getsockname(lfd, (struct sockaddr *)&got, &gl) == 0 && ntohs(got.sin_port) == port,
               "the listener is bound to the port");
        tap_ok(fcntl(lfd, F_GETFD) & FD_CLOEXEC, "the listener is close-on-exec");
        int fd = tcp_connect("127.0.0.1", port);
        TAP_IS_INT(fd, -ECONNREFUSED, "our namespace does not reach the child's listener");
        if (fd >= 0)
                close(fd);
        TAP_IS_INT(kid_connect("127.0.0.1", port), 0, "the child's namespace reaches it");
        struct pollfd pf = {.fd = lfd, .events = POLLIN};
        int c = poll(&pf, 1, IO_TIMEOUT_MS) == 1 ? accept4(lfd, NULL, NULL, SOCK_CLOEXEC) : -1;
        char ch = 0;
        tap_ok(c >= 0 && read_n(c, &ch, 1) == 1 && ch == 'x',
               "the child's connection arrives on our listener fd");
        if (c >= 0)
                close(c);

        /* positive control: the same call for our own namespace is reachable from here */
        _cleanup_close_ int self = ab_netns_open(getpid());
        int port2 = 0;
        probe = tcp_listen("127.0.0.1", &port2);
        if (probe >= 0)
                close(probe);
        struct sockaddr_in a2 = sin4("127.0.0.1", port2);
        _cleanup_close_ int lfd2 = self >= 0
                                       ? ab_netns_socket(self, AF_INET, SOCK_STREAM, 0,
                                                         (struct sockaddr *)&a2, sizeof(a2), 8)
                                       : -1;
        fd = lfd2 >= 0 ? tcp_connect("127.0.0.1", port2) : -1;
        tap_ok(fd >= 0, "a listener made for our own namespace is reachable from here");
        if (fd >= 0)
                close(fd);
        tap_ok(ab_netns_socket(-1, AF_INET, SOCK_STREAM, 0, NULL, 0, 0) < 0,
               "ab_netns_socket with a bad namespace fd fails");
        tap_ok(ab_netns_socket(kid.nsfd, AF_INET, SOCK_STREAM, 0, (struct sockaddr *)&a, sizeof(a),
                               8) == -EADDRINUSE,
               "a second listener on the same port in the child's namespace is -EADDRINUSE");
}

/* A veth pair, our end 198.51.100.1/30, the child's 198.51.100.2/30, default routes both ways. */
static void test_veth(void)
{
        if (kid.nl < 0) {
                tap_ok(1, "veth pair # SKIP no rtnetlink socket in the child's namespace");
                return;
        }
        uint16_t rnd = 0;
        if (getrandom(&rnd, sizeof(rnd), 0) != sizeof(rnd))
                rnd = (uint16_t)getpid();
        snprintf(kid.hif, sizeof(kid.hif), "abtH%04x", rnd);
        snprintf(kid.cif, sizeof(kid.cif), "abtC%04x", rnd);
        int r = ab_nl_veth_add(kid.nl_host, kid.hif, kid.cif, kid.nsfd);
        TAP_IS_INT(r, 0, "ab_nl_veth_add");
        if (r < 0) {
                kid.hif[0] = '\0';
                return;
        }
        TAP_IS_INT(ab_nl_veth_add(kid.nl_host, kid.hif, kid.cif, kid.nsfd), -EEXIST,
                   "adding it again is -EEXIST");
        int hidx = ab_nl_link_index(kid.nl_host, kid.hif);
        int cidx = ab_nl_link_index(kid.nl, kid.cif);
        tap_ok(hidx > 0, "our end is in our namespace (%d)", hidx);
        tap_ok(cidx > 0, "the peer is in the child's namespace (%d)", cidx);
        TAP_IS_INT(ab_nl_link_index(kid.nl_host, kid.cif), -ENODEV, "the peer is not in ours");
        TAP_IS_INT(ab_nl_link_index(kid.nl, kid.hif), -ENODEV, "our end is not in the child's");
        if (hidx <= 0 || cidx <= 0)
                return;
        int lo = ab_nl_link_index(kid.nl_host, "lo");
        int klo = ab_nl_link_index(kid.nl, "lo");
        TAP_IS_INT(ab_nl_addr4_add(kid.nl_host, hidx, in4("198.51.100.1"), 30), 0,
                   "address on our end");
        TAP_IS_INT(ab_nl_addr4_add(kid.nl, cidx, in4("198.51.100.2"), 30), 0,
                   "address on the peer");
        TAP_IS_INT(ab_nl_link_up(kid.nl_host, hidx), 0, "our end up");
        TAP_IS_INT(ab_nl_link_up(kid.nl, cidx), 0, "the peer up");
        /* addresses reached only through the default routes */
        TAP_IS_INT(ab_nl_addr4_add(kid.nl_host, lo, in4("192.0.2.1"), 32), 0,
                   "192.0.2.1/32 on our lo");
        TAP_IS_INT(ab_nl_addr4_add(kid.nl, klo, in4("192.0.2.2"), 32), 0,
                   "192.0.2.2/32 on the child's lo");
        TAP_IS_INT(kid_connect("192.0.2.1", 9), ENETUNREACH,
                   "without a default route the child cannot reach 192.0.2.1");
        TAP_IS_INT(ab_nl_route4_default(kid.nl, in4("198.51.100.1")), 0,
                   "default route in the child's namespace");
        TAP_IS_INT(ab_nl_route4_default(kid.nl_host, in4("198.51.100.2")), 0,
                   "default route in ours (a private namespace)");

        int fd = tcp_connect("198.51.100.2", ECHO_PORT);
        tap_ok(fd >= 0, "TCP connect to the child's address over the veth (%d)", fd);
        char buf[8] = "";
        tap_ok(fd >= 0 && ab_write_all(fd, "ping", 4) == 0 && read_n(fd, buf, 4) == 4 &&
                   !memcmp(buf, "ping", 4),
               "the child's echo server answers over the veth");
        if (fd >= 0)
                close(fd);
        fd = tcp_connect("192.0.2.2", ECHO_PORT);
        tap_ok(fd >= 0, "our default route reaches the child's 192.0.2.2 (%d)", fd);
        if (fd >= 0)
                close(fd);
        int port = 0;
        _cleanup_close_ int l = tcp_listen("192.0.2.1", &port);
        TAP_IS_INT(l >= 0 ? kid_connect("192.0.2.1", port) : -2, 0,
                   "the child's default route reaches our 192.0.2.1");
        kid.veth_up = true;
}

static void test_link_del(void)
{
        if (!kid.hif[0]) {
                tap_ok(1, "ab_nl_link_del # SKIP no veth pair");
                return;
        }
        TAP_IS_INT(ab_nl_link_del(kid.nl_host, kid.hif), 0, "ab_nl_link_del");
        TAP_IS_INT(ab_nl_link_index(kid.nl_host, kid.hif), -ENODEV, "our end is gone");
        TAP_IS_INT(ab_nl_link_index(kid.nl, kid.cif), -ENODEV, "the peer went with it");
        TAP_IS_INT(ab_nl_link_del(kid.nl_host, kid.hif), -ENODEV, "deleting it again is -ENODEV");
        kid.hif[0] = '\0';
        kid.veth_up = false;
        int fd = tcp_connect("198.51.100.2", ECHO_PORT);
        tap_ok(fd < 0, "the child's address is unreachable without the veth (%d)", fd);
        if (fd >= 0)
                close(fd);
}

/* ---- root only: the proxy end to end ---- */

/* Sends req through the proxy on port and reads the whole answer. */
static size_t via_proxy(int port, const char *req, char *resp, size_t cap)
{
        resp[0] = '\0';
        int fd = tcp_connect("127.0.0.1", port);
        if (fd < 0)
                return 0;
        size_t n = ab_write_all(fd, req, strlen(req)) == 0 ? read_to_eof(fd, resp, cap) : 0;
        close(fd);
        return n;
}

/* Opens a CONNECT tunnel; the fd after a 200, else -1. */
static int tunnel(int port, const char *target, char *head, size_t cap)
{
        head[0] = '\0';
        int fd = tcp_connect("127.0.0.1", port);
        if (fd < 0)
                return -1;
        char *req = xasprintf("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target);
        int w = ab_write_all(fd, req, strlen(req));
        free(req);
        if (w < 0 || !read_head(fd, head, cap) ||
            strcmp(head, "HTTP/1.1 200 Connection established\r\n\r\n")) {
                close(fd);
                return -1;
        }
        return fd;
}

static bool echoes(int fd, const char *msg)
{
        char buf[64] = "";
        size_t n = strlen(msg);
        return ab_write_all(fd, msg, n) == 0 && read_n(fd, buf, n) == n && !memcmp(buf, msg, n);
}

/* True once the peer has closed (EOF or reset), waiting at most the I/O timeout. */
static bool sees_eof(int fd)
{
        char buf[64];
        for (;;) {
                struct pollfd pf = {.fd = fd, .events = POLLIN};
                if (poll(&pf, 1, IO_TIMEOUT_MS) != 1)
                        return false;
                ssize_t k = read(fd, buf, sizeof(buf));
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0)
                        return true;
        }
}

/* Finds a network.denied event for host:port of box box1 after seq `after`; its reason in why. */
static bool denied_event(ab_events *ev, uint64_t after, const char *host, int port, char *why,
                         size_t wl)
{
        ab_event_view *v = NULL;
        size_t n = 0;
        bool dropped = false, found = false;
        if (ab_events_wait(ev, after, 64, 0, &v, &n, &dropped) < 0)
                return false;
        for (size_t i = 0; i < n && !found; i++) {
                if (strcmp(v[i].type, "network.denied"))
                        continue;
                json_t *j = json_loads(v[i].json, 0, NULL);
                json_t *d = json_object_get(j, "data");
                const char *h = json_string_value(json_object_get(d, "host"));
                const char *b = json_string_value(json_object_get(j, "box_id"));
                const char *a = json_string_value(json_object_get(j, "app_id"));
                if (h && !strcmp(h, host) &&
                    json_integer_value(json_object_get(d, "port")) == port && b &&
                    !strcmp(b, "box1") && a && !strcmp(a, "app1")) {
                        found = true;
                        const char *r = json_string_value(json_object_get(d, "reason"));
                        snprintf(why, wl, "%s", r ? r : "");
                }
                json_decref(j);
        }
        ab_event_views_free(v, n);
        return found;
}

/* A box at its connection cap: more connections wait in the backlog (not
 * refused, not answered) until one ends, and the acceptor does not spin
 * on the level-triggered listener meanwhile. Needs no upstream: the waiting
 * request is one the policy denies. */
static void test_proxy_cap(void)
{
        ab_proxy_opts o = {.max_conns_per_box = 2};
        ab_proxy *px = NULL;
        _cleanup_err_ ab_err *err = NULL;
        TAP_IS_INT(ab_proxy_new(&o, &px, &err), 0, "ab_proxy_new with 2 connections a box");
        if (!px)
                return;
        ab_netpol pol;
        TAP_IS_INT(parse_pol("{\"mode\": \"allowlist\", \"allow\": [\"up.test\"]}", &pol, &err), 0,
                   "cap policy parses");
        int port = 0;
        int lfd = tcp_listen("127.0.0.1", &port);
        ab_proxy_attach(px, "capbox", NULL, 1, lfd, &pol);
        int idle1 = tcp_connect("127.0.0.1", port), idle2 = tcp_connect("127.0.0.1", port);
        size_t nb = 0, nc = 0;
        for (int i = 0; i < 200 && nc < 2; i++) {
                usleep(10000);
                ab_proxy_counts(px, &nb, &nc);
        }
        TAP_IS_INT(nc, 2, "two idle connections take both slots");
        int third = tcp_connect("127.0.0.1", port);
        static const char req[] = "GET http://denied.test/ HTTP/1.1\r\n\r\n";
        tap_ok(third >= 0 && write(third, req, sizeof(req) - 1) == (ssize_t)sizeof(req) - 1,
               "a third connection is queued by the kernel and sends its request");
        struct rusage r0, r1;
        getrusage(RUSAGE_SELF, &r0);
        struct pollfd pf = {.fd = third, .events = POLLIN};
        tap_ok(poll(&pf, 1, 1000) == 0, "... and gets no answer while the box is at its cap");
        getrusage(RUSAGE_SELF, &r1);
        double cpu = (double)(r1.ru_utime.tv_sec - r0.ru_utime.tv_sec + r1.ru_stime.tv_sec -
                              r0.ru_stime.tv_sec) +
                     (double)(r1.ru_utime.tv_usec - r0.ru_utime.tv_usec + r1.ru_stime.tv_usec -
                              r0.ru_stime.tv_usec) /
                         1e6;
        /* a spinning acceptor burns a whole core: ~1 s in this second */
        tap_ok(cpu < 0.5, "the acceptor does not spin meanwhile (%.3f s of CPU in 1 s)", cpu);
        close(idle1);
        char buf[512] = "";
        ssize_t k = third >= 0 ? read(third, buf, sizeof(buf) - 1) : -1;
        tap_ok(k > 12 && !strncmp(buf, "HTTP/1.1 403 ", 13),
               "when a slot frees, the queued connection is served (403 for the denied host)");
        if (idle2 >= 0)
                close(idle2);
        if (third >= 0)
                close(third);
        ab_proxy_free(px);
        ab_netpol_clear(&pol);
}

/* Sends a request the policy denies on fd; true when the proxy answers 403
 * within ms (it served the connection), false when nothing comes. */
static bool answered_403(int fd, int ms)
{
        static const char req[] = "GET http://denied.test/ HTTP/1.1\r\n\r\n";
        if (fd < 0 || write(fd, req, sizeof(req) - 1) != (ssize_t)sizeof(req) - 1)
                return false;
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        if (poll(&pf, 1, ms) != 1)
                return false;
        char buf[64] = "";
        return read(fd, buf, sizeof(buf) - 1) > 12 && !strncmp(buf, "HTTP/1.1 403 ", 13);
}

/* One app's boxes together at the app's cap: its further connections wait
 * (on any of its boxes) while another app's box is served at once; a slot
 * freed by the app lets its waiting connection in. */
static void test_proxy_app_cap(void)
{
        ab_proxy_opts o = {.max_conns_per_box = 3, .max_conns_per_app = 4};
        ab_proxy *px = NULL;
        _cleanup_err_ ab_err *err = NULL;
        TAP_IS_INT(ab_proxy_new(&o, &px, &err), 0, "ab_proxy_new with 3 a box, 4 an app");
        if (!px)
                return;
        ab_netpol pol;
        TAP_IS_INT(parse_pol("{\"mode\": \"allowlist\", \"allow\": [\"up.test\"]}", &pol, &err), 0,
                   "app cap policy parses");
        int pa1 = 0, pa2 = 0, pb = 0;
        ab_proxy_attach(px, "a1", "appa", 1, tcp_listen("127.0.0.1", &pa1), &pol);
        ab_proxy_attach(px, "a2", "appa", 2, tcp_listen("127.0.0.1", &pa2), &pol);
        ab_proxy_attach(px, "b1", "appb", 3, tcp_listen("127.0.0.1", &pb), &pol);
        int idle[4];
        for (int i = 0; i < 4; i++) /* 3 on a1 (its cap), 1 on a2: appa's 4 */
                idle[i] = tcp_connect("127.0.0.1", i < 3 ? pa1 : pa2);
        size_t nb = 0, nc = 0;
        for (int i = 0; i < 200 && nc < 4; i++) {
                usleep(10000);
                ab_proxy_counts(px, &nb, &nc);
        }
        TAP_IS_INT(nc, 4, "appa's idle connections take its 4 slots");
        int waiting = tcp_connect("127.0.0.1", pa2);
        tap_ok(!answered_403(waiting, 700),
               "appa at its cap: a connection to its box under that box's own cap waits");
        int other = tcp_connect("127.0.0.1", pb);
        tap_ok(answered_403(other, 2000), "appb's box is served at once meanwhile");
        ab_proxy_counts(px, &nb, &nc);
        /* appb's may already be closed after its answer: 4 or 5, never more */
        tap_ok(nc == 4 || nc == 5, "appa's 4 and at most appb's 1 (none of appa's beyond its cap)");
        if (nc != 4 && nc != 5)
                tap_diag("got %zu connections", nc);
        close(idle[0]);
        char buf[64] = "";
        struct pollfd pf = {.fd = waiting, .events = POLLIN};
        ssize_t k =
            waiting >= 0 && poll(&pf, 1, 2000) == 1 ? read(waiting, buf, sizeof(buf) - 1) : -1;
        tap_ok(k > 12 && !strncmp(buf, "HTTP/1.1 403 ", 13),
               "a slot freed by appa lets its waiting connection in (on its other box)");
        for (int i = 1; i < 4; i++)
                if (idle[i] >= 0)
                        close(idle[i]);
        if (waiting >= 0)
                close(waiting);
        if (other >= 0)
                close(other);
        ab_proxy_free(px);
        ab_netpol_clear(&pol);
}

static void test_proxy(void)
{
        if (!kid.veth_up) {
                tap_ok(1, "proxy end to end # SKIP no veth pair to the upstream");
                return;
        }
        char dir[] = "/tmp/abtest-net-XXXXXX";
        if (!mkdtemp(dir)) {
                tap_ok(0, "mkdtemp");
                return;
        }
        _cleanup_free_ char *hosts = xasprintf("%s/hosts", dir);
        static const char hosts_text[] = "# test names\n"
                                         "198.51.100.2 up.test up2.test\n"
                                         "127.0.0.1 rebind.test\n"
                                         "10.9.8.7 private.test\n";
        FILE *f = fopen(hosts, "we");
        tap_ok(f && fputs(hosts_text, f) >= 0 && fclose(f) == 0, "hosts file written");

        ab_events *ev = ab_events_new(256);
        ab_proxy_opts o = {.events = ev, .hosts_file = hosts, .connect_timeout_ms = 10000};
        ab_proxy *px = NULL;
        _cleanup_err_ ab_err *err = NULL;
        TAP_IS_INT(ab_proxy_new(&o, &px, &err), 0, "ab_proxy_new");
        if (!px) {
                ab_events_free(ev);
                unlink(hosts);
                rmdir(dir);
                return;
        }
        ab_netpol pol, strict;
        TAP_IS_INT(parse_pol("{\"mode\": \"allowlist\", \"allow\": [\"up.test\", \"rebind.test\", "
                             "\"private.test\", \"localhost\"]}",
                             &pol, &err),
                   0, "proxy policy parses");
        TAP_IS_INT(
            parse_pol("{\"mode\": \"allowlist\", \"allow\": [\"up.test:80\"]}", &strict, &err), 0,
            "stricter policy parses");

        int port = 0;
        int lfd = tcp_listen("127.0.0.1", &port);
        tap_ok(lfd >= 0, "proxy listener on 127.0.0.1:%d", port);
        if (lfd < 0)
                goto out;
        ab_proxy_attach(px, "box1", "app1", 4242, lfd, &pol);
        TAP_IS_INT(ab_proxy_pid(px, "box1"), 4242, "ab_proxy_pid after attach");
        TAP_IS_INT(ab_proxy_pid(px, "nobox"), 0, "ab_proxy_pid of an unknown box");
        size_t nb = 0, nc = 0;
        ab_proxy_counts(px, &nb, &nc);
        TAP_IS_INT(nb, 1, "one box served");
        tap_ok(!ab_proxy_update(px, "nobox", &pol), "ab_proxy_update of an unknown box is false");

        char resp[16384];
        /* an allowed GET: the upstream sees the rewritten request */
        via_proxy(port,
                  "GET http://UP.test/echo?x=1 HTTP/1.1\r\n"
                  "Host: evil.com\r\n"
                  "Proxy-Authorization: Basic c2VjcmV0\r\n"
                  "Proxy-Connection: keep-alive\r\n"
                  "Connection: keep-alive\r\n"
                  "X-Test: 1\r\n"
                  "\r\n",
                  resp, sizeof(resp));
        tap_ok(!strncmp(resp, "HTTP/1.1 200 OK\r\n", 17), "allowed GET answers 200");
        const char *saw = strstr(resp, "upstream saw:\n");
        tap_ok(saw != NULL, "the upstream's body came through");
        if (saw) {
                saw += strlen("upstream saw:\n");
                TAP_IS_STR(saw,
                           "GET /echo?x=1 HTTP/1.1\r\nHost: up.test\r\nX-Test: 1\r\n"
                           "Connection: close\r\n\r\n",
                           "the upstream saw origin-form, its own Host, Connection: close");
                tap_ok(!strstr(saw, "evil.com"), "the client's Host never reached the upstream");
                tap_ok(!strstr(saw, "c2VjcmV0"), "Proxy-Authorization never reached the upstream");
        } else {
                tap_diag("  got: %s", resp);
        }

        /* a CONNECT tunnel to the echo server */
        char head[1024];
        int t1 = tunnel(port, "up2.test:7", head, sizeof(head));
        tap_ok(t1 < 0 && strstr(head, " 403 "),
               "a name no rule allows -> 403, whatever it resolves to");
        if (t1 >= 0)
                close(t1);
        t1 = tunnel(port, "up.test:7", head, sizeof(head));
        tap_ok(t1 >= 0, "CONNECT up.test:7 -> 200 Connection established");
        if (t1 < 0)
                tap_diag("  got \"%s\"", head);
        tap_ok(t1 >= 0 && echoes(t1, "hello through the tunnel"), "bytes echo through the tunnel");

        /* denied: not in the rules */
        uint64_t seq0 = ab_events_last_seq(ev);
        char why[256] = "";
        via_proxy(port, "GET http://other.test/ HTTP/1.1\r\n\r\n", resp, sizeof(resp));
        tap_ok(!strncmp(resp, "HTTP/1.1 403 ", 13), "unlisted host -> 403");
        tap_ok(strstr(resp, "X-Agentbox-Proxy: denied") != NULL,
               "the 403 says the proxy denied it");
        tap_ok(denied_event(ev, seq0, "other.test", 80, why, sizeof(why)),
               "network.denied event with box, app, host and port 80");
        seq0 = ab_events_last_seq(ev);
        int t = tunnel(port, "other.test:443", head, sizeof(head));
        tap_ok(t < 0 && strstr(head, " 403 "), "CONNECT to an unlisted host -> 403");
        if (t >= 0)
                close(t);
        tap_ok(denied_event(ev, seq0, "other.test", 443, why, sizeof(why)),
               "network.denied event for the CONNECT, port 443");

        /* allowed names that resolve inside */
        seq0 = ab_events_last_seq(ev);
        via_proxy(port, "GET http://rebind.test/ HTTP/1.1\r\n\r\n", resp, sizeof(resp));
        tap_ok(!strncmp(resp, "HTTP/1.1 403 ", 13) && strstr(resp, "loopback"),
               "a name resolving to 127.0.0.1 -> 403 naming loopback");
        tap_ok(denied_event(ev, seq0, "rebind.test", 80, why, sizeof(why)) &&
                   strstr(why, "loopback"),
               "network.denied event for the rebinding (%s)", why);
        via_proxy(port, "GET http://private.test:8080/ HTTP/1.1\r\n\r\n", resp, sizeof(resp));
        tap_ok(!strncmp(resp, "HTTP/1.1 403 ", 13) && strstr(resp, "private"),
               "a name resolving to 10.9.8.7 -> 403 naming private");
        via_proxy(port, "GET http://localhost/ HTTP/1.1\r\n\r\n", resp, sizeof(resp));
        tap_ok(!strncmp(resp, "HTTP/1.1 403 ", 13),
               "localhost is refused even when a rule allows it");
        via_proxy(port, "GET http://127.0.0.1/ HTTP/1.1\r\n\r\n", resp, sizeof(resp));
        tap_ok(!strncmp(resp, "HTTP/1.1 403 ", 13), "an unlisted address literal -> 403");

        /* malformed over the wire */
        via_proxy(port, "GET /x HTTP/1.1\r\nHost: up.test\r\n\r\n", resp, sizeof(resp));
        tap_ok(!strncmp(resp, "HTTP/1.1 400 ", 13), "origin-form request -> 400");

        /* the same rules again: the tunnel stays */
        ab_netpol same;
        ab_netpol_copy(&pol, &same);
        tap_ok(ab_proxy_update(px, "box1", &same), "ab_proxy_update with equal rules");
        ab_netpol_clear(&same);
        tap_ok(t1 >= 0 && echoes(t1, "still here"), "equal rules leave the tunnel open");

        /* stricter rules cut it, and decide new connections */
        tap_ok(ab_proxy_update(px, "box1", &strict), "ab_proxy_update with stricter rules");
        tap_ok(t1 >= 0 && sees_eof(t1), "the open tunnel is cut (the client sees EOF)");
        if (t1 >= 0)
                close(t1);
        t = tunnel(port, "up.test:7", head, sizeof(head));
        tap_ok(t < 0 && strstr(head, " 403 "), "CONNECT up.test:7 is now denied");
        if (t >= 0)
                close(t);
        via_proxy(port, "GET http://up.test/ HTTP/1.1\r\n\r\n", resp, sizeof(resp));
        tap_ok(!strncmp(resp, "HTTP/1.1 200 OK\r\n", 17), "GET up.test:80 is still allowed");

        /* detach closes the listener */
        ab_proxy_detach(px, "box1");
        TAP_IS_INT(tcp_connect("127.0.0.1", port), -ECONNREFUSED,
                   "after ab_proxy_detach the listener is closed");
        TAP_IS_INT(ab_proxy_pid(px, "box1"), 0, "ab_proxy_pid after detach");
        ab_proxy_counts(px, &nb, &nc);
        TAP_IS_INT(nb, 0, "no box served after detach");
        tap_ok(!ab_proxy_update(px, "box1", &pol), "ab_proxy_update after detach is false");

out:
        ab_netpol_clear(&pol);
        ab_netpol_clear(&strict);
        ab_proxy_free(px);
        ab_events_free(ev);
        unlink(hosts);
        rmdir(dir);
}

int main(void)
{
        signal(SIGPIPE, SIG_IGN);
        test_parse();
        test_allows();
        test_normalize();
        test_proxy_parse();
        test_env();
        test_addrcheck();

        const char *why = isolate();
        if (!why)
                why = kid_setup();
        if (why) {
                tap_diag("namespaces: %s", why);
                tap_ok(1, "ab_netns_socket and rtnetlink in another namespace # SKIP %s", why);
                tap_ok(1, "veth pair # SKIP %s", why);
                tap_ok(1, "proxy end to end # SKIP %s", why);
        } else {
                test_netns();
                test_veth();
                test_proxy();
                test_proxy_cap();
                test_proxy_app_cap();
                test_link_del();
        }
        kid_teardown();
        return tap_done();
}

/* policy.c - parsing and matching of a box's network policy (policy.h). */
#include "net/policy.h"
#include "base/util.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdio.h>
#include <strings.h>

const char *ab_net_mode_name(ab_net_mode m)
{
        switch (m) {
        case AB_NET_ALLOWLIST:
                return "allowlist";
        case AB_NET_FULL:
                return "full";
        default:
                return "none";
        }
}

void ab_netpol_clear(ab_netpol *p)
{
        for (size_t i = 0; i < p->n_allow; i++)
                free(p->allow[i].host);
        for (size_t i = 0; i < p->n_deny; i++)
                free(p->deny[i].host);
        free(p->allow);
        free(p->deny);
        memset(p, 0, sizeof(*p));
}

bool ab_net_host_normalize(const char *host, char *out, size_t len)
{
        size_t n = strlen(host);
        bool bracketed = false;
        if (n >= 2 && host[0] == '[' && host[n - 1] == ']') {
                host++;
                n -= 2;
                bracketed = true; /* only ever around an IPv6 literal */
        }
        while (n > 0 && host[n - 1] == '.')
                n--;
        if (n == 0 || n > 253 || n >= len)
                return false;
        bool colon = false;
        for (size_t i = 0; i < n; i++) {
                unsigned char c = (unsigned char)host[i];
                if (c == ':')
                        colon = true;
                else if (!isalnum(c) && c != '-' && c != '.' && c != '_' && c != '%')
                        return false;
                out[i] = (char)tolower(c);
        }
        out[n] = '\0';
        if (colon || bracketed) { /* an IPv6 literal: only as a real address */
                struct in6_addr a;
                return inet_pton(AF_INET6, out, &a) == 1;
        }
        return !strchr(out, '%') && !strstr(out, "..") && out[0] != '.';
}

/* Reads one rule string: host pattern [":" port]. */
static int parse_rule(const char *s, const char *field, size_t idx, ab_net_rule *r, ab_err **err)
{
        char buf[300];
        size_t n = strlen(s);
        if (n == 0 || n >= sizeof(buf))
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "network.%s[%zu]: must be a host name, "
                                  "\"*.domain\", \"*\" or an IPv4 address, optionally with :PORT",
                                  field, idx);
        memcpy(buf, s, n + 1);
        int port = 0;
        char *colon = strrchr(buf, ':');
        if (colon) {
                char *end;
                long v = strtol(colon + 1, &end, 10);
                if (colon[1] == '\0' || *end || v < 1 || v > 65535)
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "network.%s[%zu]: \"%s\": the port must be 1..65535",
                                          field, idx, s);
                port = (int)v;
                *colon = '\0';
        }
        const char *host = buf;
        bool wild = false;
        if (!strcmp(host, "*")) {
                r->host = xstrdup("*");
                r->port = port;
                return 0;
        }
        if (!strncmp(host, "*.", 2)) {
                wild = true;
                host += 2;
        }
        char norm[256];
        if (strchr(host, '*') || strchr(host, ':') ||
            !ab_net_host_normalize(host, norm, sizeof(norm)))
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "network.%s[%zu]: \"%s\" is not a host name, \"*.domain\", \"*\" "
                                  "or an IPv4 address",
                                  field, idx, s);
        r->host = wild ? xasprintf("*.%s", norm) : xstrdup(norm);
        r->port = port;
        return 0;
}

static int parse_rules(json_t *arr, const char *field, ab_net_rule **out, size_t *n, ab_err **err)
{
        *out = NULL;
        *n = 0;
        if (!arr || json_is_null(arr))
                return 0;
        if (!json_is_array(arr))
                return ab_err_set(err, AB_E_INVALID, 0, "network.%s: must be an array of strings",
                                  field);
        size_t len = json_array_size(arr);
        if (len > AB_NET_MAX_RULES)
                return ab_err_set(err, AB_E_INVALID, 0, "network.%s: at most %d rules", field,
                                  AB_NET_MAX_RULES);
        *out = xcalloc(len ? len : 1, sizeof(**out));
        for (size_t i = 0; i < len; i++) {
                json_t *v = json_array_get(arr, i);
                if (!json_is_string(v))
                        return ab_err_set(err, AB_E_INVALID, 0, "network.%s[%zu]: must be a string",
                                          field, i);
                if (parse_rule(json_string_value(v), field, i, &(*out)[i], err) < 0)
                        return -1;
                (*n)++;
        }
        return 0;
}

int ab_netpol_parse(json_t *nw, ab_netpol *out, ab_err **err)
{
        memset(out, 0, sizeof(*out));
        if (!nw || json_is_null(nw))
                return 0;
        if (!json_is_object(nw))
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "network: must be {\"mode\": \"none\"|\"allowlist\"|\"full\", "
                                  "\"allow\": [...], \"deny\": [...]}");
        static const char *const known[] = {
            "mode", "allow", "deny", "allowed_domains", "blocked_domains", NULL};
        const char *k;
        json_t *v;
        json_object_foreach(nw, k, v)
        {
                bool ok = false;
                for (size_t i = 0; known[i]; i++)
                        ok = ok || !strcmp(k, known[i]);
                if (!ok)
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "network.%s: unknown field (known: mode, allow, deny)",
                                          k);
        }
        json_t *mode = json_object_get(nw, "mode");
        if (mode && !json_is_null(mode)) {
                const char *mv = json_string_value(mode);
                if (!mv)
                        return ab_err_set(err, AB_E_INVALID, 0, "network.mode: must be a string");
                if (!strcmp(mv, "none"))
                        out->mode = AB_NET_NONE;
                else if (!strcmp(mv, "allowlist") || !strcmp(mv, "restricted"))
                        out->mode = AB_NET_ALLOWLIST;
                else if (!strcmp(mv, "full"))
                        out->mode = AB_NET_FULL;
                else
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "network.mode: \"%s\" is not one of none, allowlist "
                                          "(or restricted), full",
                                          mv);
        }
        json_t *allow = json_object_get(nw, "allow"), *deny = json_object_get(nw, "deny");
        const char *af = "allow", *df = "deny";
        if (!allow) {
                allow = json_object_get(nw, "allowed_domains");
                af = "allowed_domains";
        }
        if (!deny) {
                deny = json_object_get(nw, "blocked_domains");
                df = "blocked_domains";
        }
        if (parse_rules(allow, af, &out->allow, &out->n_allow, err) < 0 ||
            parse_rules(deny, df, &out->deny, &out->n_deny, err) < 0) {
                ab_netpol_clear(out);
                return -1;
        }
        if (!mode && (out->n_allow || out->n_deny))
                out->mode = AB_NET_ALLOWLIST; /* rules without a mode mean the proxy */
        return 0;
}

static json_t *rules_json(const ab_net_rule *r, size_t n)
{
        json_t *a = json_array();
        for (size_t i = 0; i < n; i++)
                json_array_append_new(a, r[i].port ? json_sprintf("%s:%d", r[i].host, r[i].port)
                                                   : json_string(r[i].host));
        return a;
}

json_t *ab_netpol_json(const ab_netpol *p)
{
        return json_pack("{s:s,s:o,s:o}", "mode", ab_net_mode_name(p->mode), "allow",
                         rules_json(p->allow, p->n_allow), "deny", rules_json(p->deny, p->n_deny));
}

static bool rules_equal(const ab_net_rule *a, size_t na, const ab_net_rule *b, size_t nb)
{
        if (na != nb)
                return false;
        for (size_t i = 0; i < na; i++)
                if (a[i].port != b[i].port || strcmp(a[i].host, b[i].host))
                        return false;
        return true;
}

bool ab_netpol_equal(const ab_netpol *a, const ab_netpol *b)
{
        return a->mode == b->mode && rules_equal(a->allow, a->n_allow, b->allow, b->n_allow) &&
               rules_equal(a->deny, a->n_deny, b->deny, b->n_deny);
}

static ab_net_rule *rules_copy(const ab_net_rule *r, size_t n)
{
        ab_net_rule *c = xcalloc(n ? n : 1, sizeof(*c));
        for (size_t i = 0; i < n; i++)
                c[i] = (ab_net_rule){.host = xstrdup(r[i].host), .port = r[i].port};
        return c;
}

void ab_netpol_copy(const ab_netpol *src, ab_netpol *dst)
{
        dst->mode = src->mode;
        dst->allow = rules_copy(src->allow, src->n_allow);
        dst->n_allow = src->n_allow;
        dst->deny = rules_copy(src->deny, src->n_deny);
        dst->n_deny = src->n_deny;
}

static bool rule_matches(const ab_net_rule *r, const char *host, int port)
{
        if (r->port && r->port != port)
                return false;
        if (!strcmp(r->host, "*"))
                return true;
        if (!strncmp(r->host, "*.", 2)) {
                const char *dom = r->host + 1; /* ".example.com" */
                size_t hl = strlen(host), dl = strlen(dom);
                return hl > dl && !strcasecmp(host + hl - dl, dom);
        }
        return !strcasecmp(r->host, host);
}

bool ab_netpol_allows(const ab_netpol *p, const char *host, int port, char *why, size_t why_len)
{
        const char *reason = NULL;
        const ab_net_rule *hit = NULL;
        if (p->mode != AB_NET_ALLOWLIST && p->mode != AB_NET_FULL)
                reason = "the box's network mode is none";
        else if (p->n_allow == 0 && p->n_deny == 0)
                reason = "no rules";
        for (size_t i = 0; !reason && i < p->n_deny; i++)
                if (rule_matches(&p->deny[i], host, port)) {
                        hit = &p->deny[i];
                        reason = "deny rule";
                }
        bool allowed = false;
        for (size_t i = 0; !reason && i < p->n_allow && !allowed; i++)
                allowed = rule_matches(&p->allow[i], host, port);
        if (!reason && !allowed)
                reason = "no allow rule matches";
        if (!reason)
                return true;
        if (why && why_len) {
                if (hit && hit->port)
                        snprintf(why, why_len, "deny rule \"%s:%d\"", hit->host, hit->port);
                else if (hit)
                        snprintf(why, why_len, "deny rule \"%s\"", hit->host);
                else
                        snprintf(why, why_len, "%s", reason);
        }
        return false;
}

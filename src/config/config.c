/* config.c - defaults, then the YAML file, then AGENTBOX_* variables. Every
 * field is described once in a table (its YAML key, its variable, its kind),
 * so the file and the environment parse values the same way. Loading works on
 * a copy: on error the configuration passed in is left as it was. */
#include "config/config.h"
#include "backend/backend.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <strings.h>
#include <yaml.h>

void ab_config_default(ab_config *c)
{
        *c = (ab_config){
            .listen = xstrdup("127.0.0.1:8080"),
            .llm = {.max_steps = 20, .temperature = -1, .timeout_ms = 600000},
            .data_dir = xstrdup("./data"),
            .idle_pause_s = 60,
            .idle_stop_s = 300,
            .memory_pressure_pct = 10,
            .reaper_interval_ms = 5000,
            .sample_interval_ms = 10000,
            .max_body = 1024 * 1024,
            .fleet = {.heartbeat_ms = 2000, .down_after_ms = 10000},
            .max_upload = 1024 * 1024 * 1024,
            .tmp_max = 4ull << 30,
            .max_connections = 10000,
            .max_connections_per_address = 256,
            .head_timeout_ms = 10000,
            .max_streams = 1000,
            .max_streams_per_address = 128,
            .max_requests = 512,
            .ports_timeout_ms = 60000,
            .network_full = true,
            .network_proxy_max_per_app = 1024, /* net/proxy.h AB_PROXY_MAX_CONNS_PER_APP */
            .disk_overcommit_ratio = 10,
            .disk_reserve = 256 * 1024 * 1024,
            .disk_watch_interval_ms = 1000,
            .image_max_layer = 16ull << 30,
            .skills_disk = 1ull << 30,
        };
        ab_limits_default(&c->limits);
        ab_quota_none(&c->quotas);
        /* Ceilings fit the host (the manager measures it) and apps get no
         * full network unless the config grants it. */
        c->quotas.max_limits =
            (ab_limit_caps){AB_QUOTA_INHERIT, AB_QUOTA_INHERIT, AB_QUOTA_INHERIT, AB_QUOTA_INHERIT};
        c->quotas.allowed_network = AB_QUOTA_NET_NONE | AB_QUOTA_NET_ALLOWLIST;
}

static char *dup_or_null(const char *s)
{
        return s ? xstrdup(s) : NULL;
}

/* A copy of the n strings of v (NULL-terminated), or NULL when v is. */
static char **strv_copy(char *const *v, size_t n)
{
        if (!v)
                return NULL;
        char **c = xcalloc(n + 1, sizeof(char *));
        for (size_t i = 0; i < n; i++)
                c[i] = xstrdup(v[i]);
        return c;
}

static void llm_copy(ab_config_llm *dst, const ab_config_llm *src)
{
        *dst = *src;
        dst->base_url = dup_or_null(src->base_url);
        dst->api_key = dup_or_null(src->api_key);
        dst->model = dup_or_null(src->model);
}

static void llm_free(ab_config_llm *l)
{
        free(l->base_url);
        if (l->api_key) /* a secret: no copy left in freed memory */
                explicit_bzero(l->api_key, strlen(l->api_key));
        free(l->api_key);
        free(l->model);
}

static void app_llm_free(ab_config_app_llm *a, size_t n)
{
        for (size_t i = 0; i < n; i++) {
                free(a[i].app_id);
                llm_free(&a[i].llm);
        }
        free(a);
}

static void config_copy(ab_config *dst, const ab_config *src)
{
        *dst = *src;
        dst->listen = dup_or_null(src->listen);
        dst->data_dir = dup_or_null(src->data_dir);
        dst->store_url = dup_or_null(src->store_url);
        dst->token = dup_or_null(src->token);
        dst->init_path = dup_or_null(src->init_path);
        dst->webhook_url = dup_or_null(src->webhook_url);
        dst->network_hosts_file = dup_or_null(src->network_hosts_file);
        dst->ports_domain = dup_or_null(src->ports_domain);
        dst->deerflow_prefix = dup_or_null(src->deerflow_prefix);
        dst->network_subnet = dup_or_null(src->network_subnet);
        dst->backend = dup_or_null(src->backend);
        dst->docker_host = dup_or_null(src->docker_host);
        dst->docker_runtime = dup_or_null(src->docker_runtime);
        dst->docker_image = dup_or_null(src->docker_image);
        dst->mock_expect = dup_or_null(src->mock_expect);
        dst->mock_log = dup_or_null(src->mock_log);
        dst->fleet.node = dup_or_null(src->fleet.node);
        dst->fleet.url = dup_or_null(src->fleet.url);
        dst->fleet.secret_file = dup_or_null(src->fleet.secret_file);
        dst->fleet.placement = dup_or_null(src->fleet.placement);
        dst->kubernetes = dup_or_null(src->kubernetes);
        dst->keys = src->n_keys ? xcalloc(src->n_keys, sizeof(*dst->keys)) : NULL;
        for (size_t i = 0; i < src->n_keys; i++) {
                dst->keys[i].key = dup_or_null(src->keys[i].key);
                dst->keys[i].app_id = dup_or_null(src->keys[i].app_id);
        }
        dst->registries =
            src->n_registries ? xcalloc(src->n_registries, sizeof(*dst->registries)) : NULL;
        for (size_t i = 0; i < src->n_registries; i++) {
                dst->registries[i] = src->registries[i];
                dst->registries[i].host = dup_or_null(src->registries[i].host);
                dst->registries[i].username = dup_or_null(src->registries[i].username);
                dst->registries[i].password = dup_or_null(src->registries[i].password);
        }
        dst->host_mount_prefixes = strv_copy(src->host_mount_prefixes, src->n_host_mount_prefixes);
        dst->app_registries = strv_copy(src->app_registries, src->n_app_registries);
        dst->allowed_hosts = strv_copy(src->allowed_hosts, src->n_allowed_hosts);
        dst->app_quotas =
            src->n_app_quotas ? xcalloc(src->n_app_quotas, sizeof(*dst->app_quotas)) : NULL;
        for (size_t i = 0; i < src->n_app_quotas; i++) {
                dst->app_quotas[i] = src->app_quotas[i];
                dst->app_quotas[i].app_id = dup_or_null(src->app_quotas[i].app_id);
        }
        llm_copy(&dst->llm, &src->llm);
        dst->app_llm = src->n_app_llm ? xcalloc(src->n_app_llm, sizeof(*dst->app_llm)) : NULL;
        for (size_t i = 0; i < src->n_app_llm; i++) {
                dst->app_llm[i].app_id = xstrdup(src->app_llm[i].app_id);
                llm_copy(&dst->app_llm[i].llm, &src->app_llm[i].llm);
        }
}

static void app_quotas_free(ab_app_quota *a, size_t n)
{
        for (size_t i = 0; i < n; i++)
                free(a[i].app_id);
        free(a);
}

static void registries_free(ab_config_registry *r, size_t n)
{
        for (size_t i = 0; i < n; i++) {
                free(r[i].host);
                free(r[i].username);
                free(r[i].password);
        }
        free(r);
}

static void keys_free(ab_config_key *k, size_t n)
{
        for (size_t i = 0; i < n; i++) {
                free(k[i].key);
                free(k[i].app_id);
        }
        free(k);
}

void ab_config_release(ab_config *c)
{
        free(c->listen);
        free(c->data_dir);
        free(c->store_url);
        free(c->token);
        free(c->init_path);
        free(c->runners_dir);
        free(c->webhook_url);
        free(c->network_hosts_file);
        free(c->ports_domain);
        free(c->deerflow_prefix);
        free(c->network_subnet);
        free(c->backend);
        free(c->docker_host);
        free(c->docker_runtime);
        free(c->docker_image);
        free(c->mock_expect);
        free(c->mock_log);
        free(c->fleet.node);
        free(c->fleet.url);
        free(c->fleet.secret_file);
        free(c->fleet.placement);
        free(c->kubernetes);
        keys_free(c->keys, c->n_keys);
        registries_free(c->registries, c->n_registries);
        app_quotas_free(c->app_quotas, c->n_app_quotas);
        llm_free(&c->llm);
        app_llm_free(c->app_llm, c->n_app_llm);
        ab_strvfreep(&c->host_mount_prefixes);
        ab_strvfreep(&c->app_registries);
        ab_strvfreep(&c->allowed_hosts);
        *c = (ab_config){0};
}

/* --- checks shared by the loaders (which add the line or variable) and validate --- */

/* Message of a failed check: malloc'd, or NULL when the value is fine. */
typedef char *why_t;

static why_t why(const char *fmt, ...) AB_PRINTF(1, 2);
static why_t why(const char *fmt, ...)
{
        va_list ap;
        char *m = NULL;
        va_start(ap, fmt);
        if (vasprintf(&m, fmt, ap) < 0)
                abort();
        va_end(ap);
        return m;
}

static why_t why_from_err(ab_err **e)
{
        why_t w = xstrdup(*e ? (*e)->msg : "invalid value");
        ab_err_free(e);
        return w;
}

static bool is_hostname(const char *h)
{
        size_t n = strlen(h);
        if (n == 0 || n > 253)
                return false;
        for (const char *p = h; *p; p++)
                if (!(isalnum((unsigned char)*p) || *p == '.' || *p == '-' || *p == '_'))
                        return false;
        return true;
}

/* Parses HOST:PORT ([V6]:PORT for IPv6) and tells whether HOST is loopback. */
static why_t check_listen(const char *s, bool *loopback)
{
        *loopback = false;
        if (!s || !*s)
                return why("is empty: give HOST:PORT, e.g. 127.0.0.1:8080");
        char host[256];
        const char *port;
        bool v6 = false;
        if (s[0] == '[') {
                const char *close = strchr(s, ']');
                if (!close || close[1] != ':')
                        return why("'%s' is not [IPV6]:PORT, e.g. [::1]:8080", s);
                if ((size_t)(close - s - 1) >= sizeof(host))
                        return why("'%s': the host is too long", s);
                memcpy(host, s + 1, (size_t)(close - s - 1));
                host[close - s - 1] = '\0';
                port = close + 2;
                v6 = true;
        } else {
                const char *colon = strrchr(s, ':');
                if (!colon)
                        return why("'%s' has no port: give HOST:PORT, e.g. 127.0.0.1:8080", s);
                if ((size_t)(colon - s) >= sizeof(host))
                        return why("'%s': the host is too long", s);
                memcpy(host, s, (size_t)(colon - s));
                host[colon - s] = '\0';
                port = colon + 1;
                if (strchr(host, ':'))
                        return why("'%s': put an IPv6 address in brackets, e.g. [::1]:8080", s);
        }
        if (!host[0])
                return why("'%s' has no host: use e.g. 0.0.0.0%s to listen on every interface", s,
                           s);
        size_t pl = strlen(port);
        if (pl == 0 || pl > 5 || strspn(port, "0123456789") != pl || atoi(port) < 1 ||
            atoi(port) > 65535)
                return why("'%s': the port must be a number from 1 to 65535", s);

        unsigned char a[16];
        if (v6) {
                if (inet_pton(AF_INET6, host, a) != 1)
                        return why("'%s': '%s' is not an IPv6 address", s, host);
                static const unsigned char lo[16] = {[15] = 1};
                static const unsigned char mapped[12] = {[10] = 0xff, [11] = 0xff};
                *loopback = memcmp(a, lo, 16) == 0 || (memcmp(a, mapped, 12) == 0 && a[12] == 127);
        } else if (inet_pton(AF_INET, host, a) == 1) {
                *loopback = a[0] == 127;
        } else if (is_hostname(host)) {
                *loopback =
                    strcasecmp(host, "localhost") == 0 || strcasecmp(host, "localhost.") == 0;
        } else {
                return why("'%s': '%s' is not a host name or an IP address", s, host);
        }
        return NULL;
}

static why_t check_http_url(const char *s)
{
        if (s && *s && strncasecmp(s, "http://", 7) != 0 && strncasecmp(s, "https://", 8) != 0)
                return why("'%s' is not an http:// or https:// URL", s);
        return NULL;
}

static why_t check_pct(double v)
{
        if (isnan(v) || v < 0 || v > 100)
                return why("must be a percentage from 0 to 100 (0 = off), got %g", v);
        return NULL;
}

static why_t check_api_key(const char *key, const char *app_id)
{
        if (!key || strlen(key) < 16)
                return why("an API key secret must be at least 16 characters long");
        if (!app_id || !*app_id)
                return why("an API key needs a non-empty app_id");
        return NULL;
}

/* --- values --- */

typedef enum {
        K_STR,     /* a string that must be given */
        K_OPT_STR, /* a string; null or "" clears it */
        K_LISTEN,  /* K_STR checked as HOST:PORT */
        K_URL,     /* K_OPT_STR that must be http(s) */
        K_SECS,    /* duration stored as int64 seconds (rounded up) */
        K_MS,      /* duration stored as int64 milliseconds */
        K_COUNT,   /* integer >= 0 as int64 */
        K_PCT,     /* percentage as double */
        K_BYTES,   /* size in bytes as uint64 */
        K_BOOL,    /* true/false, yes/no, on/off, 1/0 as bool */
        K_RATIO,   /* a number >= 0 as double */
} kind;

typedef struct field {
        const char *name, *alias, *env;
        kind kind;
        size_t off;
} field;

#define F(name, alias, env, kind, member)                                                          \
        {                                                                                          \
                name, alias, env, kind, offsetof(ab_config, member)                                \
        }
static const field fields[] = {
    F("listen", NULL, "AGENTBOX_LISTEN", K_LISTEN, listen),
    F("data_dir", "data", "AGENTBOX_DATA", K_STR, data_dir),
    F("store", "store_url", "AGENTBOX_STORE", K_OPT_STR, store_url),
    F("token", NULL, "AGENTBOX_TOKEN", K_OPT_STR, token),
    F("init_path", NULL, "AGENTBOX_INIT", K_OPT_STR, init_path),
    F("runners_dir", NULL, "AGENTBOX_RUNNERS", K_OPT_STR, runners_dir),
    F("idle_pause", NULL, "AGENTBOX_IDLE_PAUSE", K_SECS, idle_pause_s),
    F("idle_stop", NULL, "AGENTBOX_IDLE_STOP", K_SECS, idle_stop_s),
    F("memory_pressure_pct", NULL, "AGENTBOX_MEMORY_PRESSURE_PCT", K_PCT, memory_pressure_pct),
    F("ttl", NULL, NULL, K_SECS, ttl_s),
    F("pool_size", NULL, "AGENTBOX_POOL_SIZE", K_COUNT, pool_size),
    F("max_running", NULL, "AGENTBOX_MAX_RUNNING", K_COUNT, max_running),
    F("reaper_interval", NULL, NULL, K_MS, reaper_interval_ms),
    F("sample_interval", NULL, NULL, K_MS, sample_interval_ms),
    F("alert_memory_pct", NULL, NULL, K_PCT, alert_memory_pct),
    F("alert_cpu_pct", NULL, NULL, K_PCT, alert_cpu_pct),
    F("alert_disk_pct", NULL, NULL, K_PCT, alert_disk_pct),
    F("webhook_url", NULL, "AGENTBOX_WEBHOOK_URL", K_URL, webhook_url),
    F("max_body", NULL, NULL, K_BYTES, max_body),
    F("max_upload", NULL, NULL, K_BYTES, max_upload),
    F("tmp_max", NULL, NULL, K_BYTES, tmp_max),
    F("max_connections", NULL, "AGENTBOX_MAX_CONNECTIONS", K_COUNT, max_connections),
    F("max_connections_per_address", NULL, "AGENTBOX_MAX_CONNECTIONS_PER_ADDRESS", K_COUNT,
      max_connections_per_address),
    F("head_timeout", NULL, "AGENTBOX_HEAD_TIMEOUT", K_MS, head_timeout_ms),
    F("max_streams", NULL, "AGENTBOX_MAX_STREAMS", K_COUNT, max_streams),
    F("max_streams_per_address", NULL, "AGENTBOX_MAX_STREAMS_PER_ADDRESS", K_COUNT,
      max_streams_per_address),
    F("max_requests", NULL, "AGENTBOX_MAX_REQUESTS", K_COUNT, max_requests),
    F("ports_domain", NULL, "AGENTBOX_PORTS_DOMAIN", K_OPT_STR, ports_domain),
    F("deerflow_prefix", NULL, "AGENTBOX_DEERFLOW_PREFIX", K_OPT_STR, deerflow_prefix),
    F("ports_timeout", NULL, "AGENTBOX_PORTS_TIMEOUT", K_MS, ports_timeout_ms),
    F("network_hosts_file", NULL, "AGENTBOX_NETWORK_HOSTS_FILE", K_OPT_STR, network_hosts_file),
    F("network_subnet", NULL, "AGENTBOX_NETWORK_SUBNET", K_OPT_STR, network_subnet),
    F("network_full", NULL, "AGENTBOX_NETWORK_FULL", K_BOOL, network_full),
    F("network_proxy_max_per_app", NULL, "AGENTBOX_NETWORK_PROXY_MAX_PER_APP", K_COUNT,
      network_proxy_max_per_app),
    F("disk_overcommit_ratio", NULL, "AGENTBOX_DISK_OVERCOMMIT_RATIO", K_RATIO,
      disk_overcommit_ratio),
    F("disk_reserve", NULL, "AGENTBOX_DISK_RESERVE", K_BYTES, disk_reserve),
    F("disk_watch_interval", NULL, NULL, K_MS, disk_watch_interval_ms),
    F("image_max_layer", NULL, NULL, K_BYTES, image_max_layer),
    F("app_registries_loopback", NULL, NULL, K_BOOL, app_registries_loopback),
    F("skills_disk", NULL, "AGENTBOX_SKILLS_DISK", K_BYTES, skills_disk),
    F("backend", NULL, "AGENTBOX_BACKEND", K_OPT_STR, backend),
    F("docker_host", NULL, "AGENTBOX_DOCKER_HOST", K_OPT_STR, docker_host),
    F("docker_runtime", NULL, "AGENTBOX_DOCKER_RUNTIME", K_OPT_STR, docker_runtime),
    F("docker_image", NULL, "AGENTBOX_DOCKER_IMAGE", K_OPT_STR, docker_image),
    F("mock_expect", NULL, "AGENTBOX_MOCK_EXPECT", K_OPT_STR, mock_expect),
    F("mock_log", NULL, "AGENTBOX_MOCK_LOG", K_OPT_STR, mock_log),
    /* the fleet: section's keys (fleet_pair) */
    F("fleet.node", NULL, "AGENTBOX_FLEET_NODE", K_OPT_STR, fleet.node),
    F("fleet.url", NULL, "AGENTBOX_FLEET_URL", K_URL, fleet.url),
    F("fleet.secret_file", NULL, "AGENTBOX_FLEET_SECRET_FILE", K_OPT_STR, fleet.secret_file),
    F("fleet.heartbeat", NULL, NULL, K_MS, fleet.heartbeat_ms),
    F("fleet.down_after", NULL, NULL, K_MS, fleet.down_after_ms),
    F("fleet.placement", NULL, "AGENTBOX_FLEET_PLACEMENT", K_OPT_STR, fleet.placement),
};
#undef F

static why_t parse_count(const char *s, int64_t *out)
{
        char *end = NULL;
        errno = 0;
        long long v = strtoll(s, &end, 10);
        if (errno || end == s || *end || v < 0)
                return why("'%s' is not a whole number >= 0", s);
        *out = v;
        return NULL;
}

static why_t parse_double(const char *s, bool pct, double *out)
{
        char *end = NULL;
        errno = 0;
        double v = strtod(s, &end);
        if (pct && end != s && *end == '%')
                end++;
        if (errno || end == s || *end || !isfinite(v))
                return why("'%s' is not a number", s);
        *out = v;
        return NULL;
}

static why_t parse_secs(const char *s, int64_t *out)
{
        ab_err *e = NULL;
        uint64_t ms;
        if (ab_parse_duration_ms(s, &ms, &e) < 0)
                return why_from_err(&e);
        *out = (int64_t)((ms + 999) / 1000);
        return NULL;
}

/* Sets field f from the text v; null = an explicit YAML null or empty value. */
static why_t set_field(ab_config *c, const field *f, const char *v, bool null)
{
        void *p = (char *)c + f->off;
        if (null && (f->kind == K_OPT_STR || f->kind == K_URL)) {
                free(*(char **)p);
                *(char **)p = NULL;
                return NULL;
        }
        if (null)
                return why("needs a value");
        ab_err *e = NULL;
        why_t w = NULL;
        switch (f->kind) {
        case K_LISTEN: {
                bool lo;
                if ((w = check_listen(v, &lo)))
                        return w;
        }
                /* fallthrough */
        case K_STR:
        case K_OPT_STR:
        case K_URL:
                if (f->kind == K_STR && !*v)
                        return why("must not be empty");
                if (f->kind == K_URL && (w = check_http_url(v)))
                        return w;
                free(*(char **)p);
                *(char **)p = xstrdup(v);
                return NULL;
        case K_SECS:
                return parse_secs(v, (int64_t *)p);
        case K_MS: {
                uint64_t ms;
                if (ab_parse_duration_ms(v, &ms, &e) < 0)
                        return why_from_err(&e);
                *(int64_t *)p = (int64_t)ms;
                return NULL;
        }
        case K_COUNT:
                return parse_count(v, (int64_t *)p);
        case K_PCT: {
                double d;
                if ((w = parse_double(v, true, &d)) || (w = check_pct(d)))
                        return w;
                *(double *)p = d;
                return NULL;
        }
        case K_RATIO: {
                double d;
                if ((w = parse_double(v, false, &d)))
                        return w;
                if (d < 0 || d > 1e6)
                        return why("must be a number from 0 to 1000000 (0 = off), got %g", d);
                *(double *)p = d;
                return NULL;
        }
        case K_BOOL:
                if (!strcmp(v, "true") || !strcmp(v, "yes") || !strcmp(v, "on") || !strcmp(v, "1"))
                        *(bool *)p = true;
                else if (!strcmp(v, "false") || !strcmp(v, "no") || !strcmp(v, "off") ||
                         !strcmp(v, "0"))
                        *(bool *)p = false;
                else
                        return why("'%s' is not true or false", v);
                return NULL;
        case K_BYTES: {
                uint64_t b;
                if (ab_parse_bytes(v, &b, &e) < 0)
                        return why_from_err(&e);
                if (b == 0)
                        return why("must be more than 0 bytes");
                *(uint64_t *)p = b;
                return NULL;
        }
        }
        return why("unhandled kind"); /* not reached */
}

static const char *const limit_names[] = {"cpus",    "memory",     "pids",  "disk",
                                          "timeout", "output_cap", "nofile"};

/* Sets limit number i (an index into limit_names) of *l from v. */
static why_t set_limit(ab_limits *l, size_t i, const char *v)
{
        ab_err *e = NULL;
        why_t w = NULL;
        int64_t n = 0;
        uint64_t u = 0;
        switch (i) {
        case 0:
                return parse_double(v, false, &l->cpus);
        case 1:
                return ab_parse_mib(v, &l->memory_mib, &e) < 0 ? why_from_err(&e) : NULL;
        case 2:
                if ((w = parse_count(v, &n)))
                        return w;
                l->pids = (uint64_t)n;
                return NULL;
        case 3:
                return ab_parse_mib(v, &l->disk_mib, &e) < 0 ? why_from_err(&e) : NULL;
        case 4:
                if ((w = parse_secs(v, &n)))
                        return w;
                l->timeout_s = n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
                return NULL;
        case 5:
                if (ab_parse_bytes(v, &u, &e) < 0)
                        return why_from_err(&e);
                l->output_cap = u;
                return NULL;
        default:
                if ((w = parse_count(v, &n)))
                        return w;
                l->nofile = (uint64_t)n;
                return NULL;
        }
}

/* --- the YAML file --- */

typedef struct yctx {
        yaml_document_t *doc;
        const char *path;
        ab_err **err;
} yctx;

static int fail_at(yctx *y, const yaml_node_t *n, const char *key, why_t w)
{
        int r = ab_err_set(y->err, AB_E_INVALID, 0, "%s, line %zu: %s%s%s", y->path,
                           n->start_mark.line + 1, key ? key : "", key ? ": " : "", w);
        free(w);
        return r;
}

static yaml_node_t *node(yctx *y, int id)
{
        return yaml_document_get_node(y->doc, id);
}

static bool is_null(const yaml_node_t *n)
{
        if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
                return false;
        const char *v = (const char *)n->data.scalar.value;
        return !*v || strcmp(v, "~") == 0 || strcmp(v, "null") == 0 || strcmp(v, "Null") == 0 ||
               strcmp(v, "NULL") == 0;
}

/* The text of a scalar node, or NULL after setting the error. */
static const char *scalar(yctx *y, const yaml_node_t *n, const char *key)
{
        if (n->type != YAML_SCALAR_NODE) {
                fail_at(y, n, key, why("expected a single value, not a list or a mapping"));
                return NULL;
        }
        const char *v = (const char *)n->data.scalar.value;
        if (strlen(v) != n->data.scalar.length) {
                fail_at(y, n, key, why("contains a NUL character"));
                return NULL;
        }
        return v;
}

/* Checks that the mapping n has no key twice; fills *dup with the offender. */
static bool has_duplicate(yctx *y, const yaml_node_t *n, const yaml_node_t **dup)
{
        for (yaml_node_pair_t *a = n->data.mapping.pairs.start; a < n->data.mapping.pairs.top; a++)
                for (yaml_node_pair_t *b = a + 1; b < n->data.mapping.pairs.top; b++) {
                        yaml_node_t *ka = node(y, a->key), *kb = node(y, b->key);
                        if (ka->type == YAML_SCALAR_NODE && kb->type == YAML_SCALAR_NODE &&
                            strcmp((char *)ka->data.scalar.value, (char *)kb->data.scalar.value) ==
                                0) {
                                *dup = kb;
                                return true;
                        }
                }
        return false;
}

/* Walks a mapping: for each pair calls fn(y, key text, key node, value node, arg). */
typedef int (*pair_fn)(yctx *y, const char *k, yaml_node_t *kn, yaml_node_t *vn, void *arg);
static int each_pair(yctx *y, yaml_node_t *n, const char *what, pair_fn fn, void *arg)
{
        if (n->type != YAML_MAPPING_NODE)
                return fail_at(y, n, what, why("expected a mapping of key: value"));
        const yaml_node_t *dup;
        if (has_duplicate(y, n, &dup))
                return fail_at(y, dup, (const char *)dup->data.scalar.value, why("given twice"));
        for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top;
             p++) {
                yaml_node_t *kn = node(y, p->key), *vn = node(y, p->value);
                const char *k = scalar(y, kn, what);
                if (!k)
                        return -1;
                if (fn(y, k, kn, vn, arg) < 0)
                        return -1;
        }
        return 0;
}

static int limit_pair(yctx *y, const char *k, yaml_node_t *kn, yaml_node_t *vn, void *arg)
{
        ab_limits *l = arg;
        char key[64];
        snprintf(key, sizeof(key), "limits.%s", k);
        size_t i;
        for (i = 0; i < AB_ARRAY_LEN(limit_names); i++)
                if (strcmp(k, limit_names[i]) == 0)
                        break;
        if (i == AB_ARRAY_LEN(limit_names))
                return fail_at(y, kn, key,
                               why("unknown key (known: cpus, memory, pids, disk, timeout, "
                                   "output_cap, nofile)"));
        if (is_null(vn))
                return fail_at(y, vn, key, why("needs a value"));
        const char *v = scalar(y, vn, key);
        if (!v)
                return -1;
        /* The value alone against the bounds (so the error points at its line). */
        ab_limits probe;
        ab_limits_default(&probe);
        why_t w = set_limit(&probe, i, v);
        ab_err *e = NULL;
        if (!w && ab_limits_validate(&probe, &e) < 0)
                w = why_from_err(&e);
        if (w)
                return fail_at(y, vn, key, w);
        free(set_limit(l, i, v)); /* parsed above: cannot fail */
        return 0;
}

typedef struct key_ctx {
        ab_config_key k;
        yaml_node_t *key_node;
} key_ctx;

static int api_key_pair(yctx *y, const char *k, yaml_node_t *kn, yaml_node_t *vn, void *arg)
{
        key_ctx *kc = arg;
        char key[64];
        snprintf(key, sizeof(key), "api_keys.%s", k);
        char **dst;
        if (strcmp(k, "key") == 0) {
                dst = &kc->k.key;
                kc->key_node = vn;
        } else if (strcmp(k, "app_id") == 0) {
                dst = &kc->k.app_id;
        } else {
                return fail_at(y, kn, key, why("unknown key (known: key, app_id)"));
        }
        const char *v = is_null(vn) ? "" : scalar(y, vn, key);
        if (!v)
                return -1;
        free(*dst);
        *dst = xstrdup(v);
        return 0;
}

static int load_api_keys(yctx *y, ab_config *c, yaml_node_t *seq)
{
        keys_free(c->keys, c->n_keys);
        c->keys = NULL;
        c->n_keys = 0;
        if (is_null(seq))
                return 0;
        if (seq->type != YAML_SEQUENCE_NODE)
                return fail_at(y, seq, "api_keys",
                               why("expected a list of {key: SECRET, app_id: APP}"));
        size_t n = (size_t)(seq->data.sequence.items.top - seq->data.sequence.items.start);
        c->keys = n ? xcalloc(n, sizeof(*c->keys)) : NULL;
        for (yaml_node_item_t *it = seq->data.sequence.items.start;
             it < seq->data.sequence.items.top; it++) {
                yaml_node_t *item = node(y, *it);
                key_ctx kc = {0};
                int r = each_pair(y, item, "api_keys", api_key_pair, &kc);
                /* Owned by *c from here on, so an error frees it with the rest. */
                c->keys[c->n_keys++] = kc.k;
                if (r < 0)
                        return -1;
                why_t w = check_api_key(kc.k.key, kc.k.app_id);
                if (w)
                        return fail_at(y, kc.key_node ? kc.key_node : item, "api_keys", w);
                for (size_t j = 0; j + 1 < c->n_keys; j++)
                        if (strcmp(c->keys[j].key, kc.k.key) == 0)
                                return fail_at(y, kc.key_node, "api_keys",
                                               why("the same key secret is listed twice"));
        }
        return 0;
}

typedef struct registry_ctx {
        ab_config_registry r;
        yaml_node_t *node;
} registry_ctx;

static int registry_pair(yctx *y, const char *k, yaml_node_t *kn, yaml_node_t *vn, void *arg)
{
        registry_ctx *rc = arg;
        char key[64];
        snprintf(key, sizeof(key), "registries.%s", k);
        const char *v = is_null(vn) ? "" : scalar(y, vn, key);
        if (!v)
                return -1;
        char **dst = NULL;
        if (strcmp(k, "host") == 0) {
                dst = &rc->r.host;
        } else if (strcmp(k, "username") == 0) {
                dst = &rc->r.username;
        } else if (strcmp(k, "password") == 0) {
                dst = &rc->r.password;
        } else if (strcmp(k, "insecure") == 0) {
                if (!strcmp(v, "true") || !strcmp(v, "yes") || !strcmp(v, "on") || !strcmp(v, "1"))
                        rc->r.insecure = true;
                else if (!strcmp(v, "false") || !strcmp(v, "no") || !strcmp(v, "off") ||
                         !strcmp(v, "0"))
                        rc->r.insecure = false;
                else
                        return fail_at(y, vn, key, why("'%s' is not true or false", v));
                return 0;
        } else {
                return fail_at(y, kn, key,
                               why("unknown key (known: host, username, password, insecure)"));
        }
        free(*dst);
        *dst = xstrdup(v);
        return 0;
}

static int load_registries(yctx *y, ab_config *c, yaml_node_t *seq)
{
        registries_free(c->registries, c->n_registries);
        c->registries = NULL;
        c->n_registries = 0;
        if (is_null(seq))
                return 0;
        if (seq->type != YAML_SEQUENCE_NODE)
                return fail_at(y, seq, "registries",
                               why("expected a list of {host, username, password, insecure}"));
        size_t n = (size_t)(seq->data.sequence.items.top - seq->data.sequence.items.start);
        c->registries = n ? xcalloc(n, sizeof(*c->registries)) : NULL;
        for (yaml_node_item_t *it = seq->data.sequence.items.start;
             it < seq->data.sequence.items.top; it++) {
                yaml_node_t *item = node(y, *it);
                registry_ctx rc = {0};
                int r = each_pair(y, item, "registries", registry_pair, &rc);
                c->registries[c->n_registries++] = rc.r;
                if (r < 0)
                        return -1;
                if (!rc.r.host || !*rc.r.host || strchr(rc.r.host, '/'))
                        return fail_at(y, item, "registries",
                                       why("each entry needs a host (a registry as in an image "
                                           "reference, e.g. localhost:5000)"));
                if (!rc.r.username != !rc.r.password)
                        return fail_at(y, item, "registries",
                                       why("username and password go together"));
        }
        return 0;
}

/* A list of strings under key into *out (NULL-terminated) and *n, replacing
 * what was there; each item passes check (NULL) or fails the load with its
 * message. expected names what the list holds, for a value of another kind. */
static int load_str_list(yctx *y, yaml_node_t *seq, const char *key, const char *expected,
                         why_t (*check)(const char *v), char ***out, size_t *n)
{
        ab_strvfreep(out);
        *n = 0;
        if (is_null(seq))
                return 0;
        if (seq->type != YAML_SEQUENCE_NODE)
                return fail_at(y, seq, key, why("expected a list of %s", expected));
        size_t cap = (size_t)(seq->data.sequence.items.top - seq->data.sequence.items.start);
        *out = xcalloc(cap + 1, sizeof(char *));
        for (yaml_node_item_t *it = seq->data.sequence.items.start;
             it < seq->data.sequence.items.top; it++) {
                yaml_node_t *item = node(y, *it);
                const char *v = scalar(y, item, key);
                if (!v)
                        return -1;
                why_t w = check(v);
                if (w)
                        return fail_at(y, item, key, w);
                (*out)[(*n)++] = xstrdup(v);
        }
        return 0;
}

/* app_registries: registries as in an image reference ("ghcr.io",
 * "reg.example.com:5000") or "*.domain"; [] = none. */
static why_t app_registry_check(const char *v)
{
        const char *host = strncmp(v, "*.", 2) ? v : v + 2;
        bool ok = *host && strlen(v) < 256;
        for (const char *p = host; *p && ok; p++)
                ok = isalnum((unsigned char)*p) || strchr(".-:[]", *p);
        if (!ok)
                return why("'%s' is not a registry host (as in an image reference) or *.domain", v);
        return NULL;
}

/* host_mount_prefixes: absolute folders, never "/" alone. */
static why_t host_prefix_check(const char *v)
{
        if (v[0] != '/' || !strcmp(v, "/"))
                return why("'%s': must be an absolute folder other than /", v);
        return NULL;
}

/* allowed_hosts: host names or addresses as a Host header spells them (an
 * IPv6 address in brackets), optionally with ":PORT". */
static why_t allowed_host_check(const char *v)
{
        bool ok = *v && strlen(v) < 256;
        for (const char *p = v; ok && *p; p++)
                ok = isalnum((unsigned char)*p) || strchr(".-_:[]", *p);
        if (!ok)
                return why("'%s': expected a host name or address, optionally with :PORT "
                           "(no scheme, no path)",
                           v);
        return NULL;
}

/* Aliases of one field set the same member: a file giving both is an error. */
static const field *find_field(const char *k)
{
        for (size_t i = 0; i < AB_ARRAY_LEN(fields); i++)
                if (strcmp(k, fields[i].name) == 0 ||
                    (fields[i].alias && strcmp(k, fields[i].alias) == 0))
                        return &fields[i];
        return NULL;
}

static const char *const tool_names[] = {"bash_output_max", "read_file_max", "ls_output_max",
                                         "write_file_max",  "bash_timeout",  "shell_max_lines",
                                         "shell_max_bytes", "grep_file_max", "grep_timeout"};

/* Sets tool limit number i (an index into tool_names) of *t from v. */
static why_t set_tool_limit(ab_tool_limits *t, size_t i, const char *v)
{
        int64_t n = 0;
        uint64_t u = 0;
        ab_err *e = NULL;
        why_t w = NULL;
        switch (i) {
        case 4:
        case 8:
                if ((w = parse_secs(v, &n)))
                        return w;
                if (n < 1 || n > AB_MAX_TIMEOUT_S)
                        return why("must be 1s..%us", AB_MAX_TIMEOUT_S);
                *(i == 4 ? &t->bash_timeout_s : &t->grep_timeout_s) = (uint32_t)n;
                return NULL;
        case 3:
        case 6:
        case 7:
                if (ab_parse_bytes(v, &u, &e) < 0)
                        return why_from_err(&e);
                if (u == 0)
                        return why("must be more than 0 bytes");
                if (i == 3)
                        t->write_file_max = (size_t)u;
                else if (i == 6)
                        t->shell_max_bytes = (size_t)u;
                else
                        t->grep_file_max = u;
                return NULL;
        default:
                if ((w = parse_count(v, &n)))
                        return w;
                if (n < 1)
                        return why("must be at least 1");
                *(i == 0   ? &t->bash_output_max
                  : i == 1 ? &t->read_file_max
                  : i == 2 ? &t->ls_output_max
                           : &t->shell_max_lines) = (size_t)n;
                return NULL;
        }
}

static int tool_pair(yctx *y, const char *k, yaml_node_t *kn, yaml_node_t *vn, void *arg)
{
        ab_tool_limits *t = arg;
        char key[64];
        snprintf(key, sizeof(key), "tools.%s", k);
        size_t i;
        for (i = 0; i < AB_ARRAY_LEN(tool_names); i++)
                if (strcmp(k, tool_names[i]) == 0)
                        break;
        if (i == AB_ARRAY_LEN(tool_names))
                return fail_at(
                    y, kn, key,
                    why("unknown key (known: bash_output_max, read_file_max, "
                        "ls_output_max, write_file_max, bash_timeout, "
                        "shell_max_lines, shell_max_bytes, grep_file_max, grep_timeout)"));
        if (is_null(vn))
                return fail_at(y, vn, key, why("needs a value"));
        const char *v = scalar(y, vn, key);
        if (!v)
                return -1;
        why_t w = set_tool_limit(t, i, v);
        return w ? fail_at(y, vn, key, w) : 0;
}

/* --- llm: {base_url, api_key, api_key_file, model, max_steps, max_tokens,
 * temperature, timeout, apps: {APP: {...}}} --- */

typedef struct llm_ctx {
        ab_config *c; /* the server's section (apps allowed), or NULL */
        ab_config_llm *l;
        const char *where; /* "llm" or "llm.apps.APP" */
        const char *dir;   /* the config file's folder, for a relative api_key_file */
} llm_ctx;

/* The first line of the file at path (relative to dir), without its end. */
static why_t read_key_file(const char *dir, const char *path, char **out)
{
        _cleanup_free_ char *full =
            path[0] == '/' || !dir ? xstrdup(path) : xasprintf("%s/%s", dir, path);
        FILE *f = fopen(full, "re");
        if (!f)
                return why("cannot read '%s': %s", full, strerror(errno));
        char buf[4096];
        size_t n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = 0;
        buf[strcspn(buf, "\r\n")] = 0;
        if (!*buf)
                return why("'%s' holds no key", full);
        *out = xstrdup(buf);
        explicit_bzero(buf, sizeof(buf));
        return NULL;
}

static why_t set_llm(llm_ctx *lc, const char *k, const char *v)
{
        ab_config_llm *l = lc->l;
        int64_t n = 0;
        why_t w = NULL;
        if (!strcmp(k, "base_url")) {
                if (!*v)
                        return why("must not be empty");
                if ((w = check_http_url(v)))
                        return w;
                free(l->base_url);
                l->base_url = xstrdup(v);
        } else if (!strcmp(k, "api_key") || !strcmp(k, "api_key_file")) {
                char *key = NULL;
                if (!strcmp(k, "api_key"))
                        key = xstrdup(v);
                else if ((w = read_key_file(lc->dir, v, &key)))
                        return w;
                if (l->api_key) {
                        explicit_bzero(l->api_key, strlen(l->api_key));
                        free(l->api_key);
                }
                l->api_key = key;
        } else if (!strcmp(k, "model")) {
                free(l->model);
                l->model = xstrdup(v);
        } else if (!strcmp(k, "max_steps") || !strcmp(k, "max_tokens")) {
                if ((w = parse_count(v, &n)))
                        return w;
                if (!strcmp(k, "max_steps") && (n < 1 || n > 1000))
                        return why("must be 1..1000");
                *(!strcmp(k, "max_steps") ? &l->max_steps : &l->max_tokens) = n;
        } else if (!strcmp(k, "temperature")) {
                double d;
                if ((w = parse_double(v, false, &d)))
                        return w;
                if (d < 0 || d > 2)
                        return why("must be 0..2");
                l->temperature = d;
        } else if (!strcmp(k, "timeout")) {
                if ((w = parse_secs(v, &n)))
                        return w;
                if (n < 1 || n > 86400)
                        return why("must be 1s..24h");
                l->timeout_ms = n * 1000;
        } else {
                return why("unknown key (known: base_url, api_key, api_key_file, model, "
                           "max_steps, max_tokens, temperature, timeout%s)",
                           lc->c ? ", apps" : "");
        }
        return NULL;
}

static int load_app_llm(yctx *y, ab_config *c, yaml_node_t *map, const char *dir);

static int llm_pair(yctx *y, const char *k, yaml_node_t *kn, yaml_node_t *vn, void *arg)
{
        llm_ctx *lc = arg;
        _cleanup_free_ char *key = xasprintf("%s.%s", lc->where, k);
        if (lc->c && !strcmp(k, "apps"))
                return load_app_llm(y, lc->c, vn, lc->dir);
        static const char *const known[] = {"base_url",    "api_key",   "api_key_file",
                                            "model",       "max_steps", "max_tokens",
                                            "temperature", "timeout",   NULL};
        const char *const *p = known;
        while (*p && strcmp(*p, k))
                p++;
        if (!*p)
                return fail_at(y, kn, key, set_llm(lc, k, ""));
        if (is_null(vn))
                return fail_at(y, vn, key, why("needs a value"));
        const char *v = scalar(y, vn, key);
        if (!v)
                return -1;
        why_t w = set_llm(lc, k, v);
        return w ? fail_at(y, !strcmp(k, "api_key") ? kn : vn, key, w) : 0;
}

static int app_llm_pair(yctx *y, const char *k, yaml_node_t *kn, yaml_node_t *vn, void *arg)
{
        llm_ctx *parent = arg;
        ab_config *c = parent->c;
        if (!*k)
                return fail_at(y, kn, "llm.apps", why("an app id must not be empty"));
        c->app_llm = xrealloc(c->app_llm, (c->n_app_llm + 1) * sizeof(*c->app_llm));
        ab_config_app_llm *a = &c->app_llm[c->n_app_llm++];
        *a = (ab_config_app_llm){
            .app_id = xstrdup(k),
            .llm = {.max_steps = -1, .max_tokens = -1, .temperature = -1, .timeout_ms = -1}};
        if (is_null(vn))
                return 0;
        _cleanup_free_ char *where = xasprintf("llm.apps.%s", k);
        llm_ctx lc = {.c = NULL, .l = &a->llm, .where = where, .dir = parent->dir};
        return each_pair(y, vn, where, llm_pair, &lc);
}

static int load_app_llm(yctx *y, ab_config *c, yaml_node_t *map, const char *dir)
{
        app_llm_free(c->app_llm, c->n_app_llm);
        c->app_llm = NULL;
        c->n_app_llm = 0;
        if (is_null(map))
                return 0;
        llm_ctx lc = {.c = c, .dir = dir};
        return each_pair(y, map, "llm.apps", app_llm_pair, &lc);
}

static int load_llm(yctx *y, ab_config *c, yaml_node_t *map)
{
        if (is_null(map))
                return 0;
        _cleanup_free_ char *copy = xstrdup(y->path);
        char *slash = strrchr(copy, '/');
        if (slash)
                *slash = 0;
        llm_ctx lc = {.c = c, .l = &c->llm, .where = "llm", .dir = slash ? copy : NULL};
        return each_pair(y, map, "llm", llm_pair, &lc);
}

void ab_config_llm_for(const ab_config *c, const char *app, ab_config_llm *out)
{
        *out = c->llm;
        for (size_t i = 0; app && i < c->n_app_llm; i++) {
                const ab_config_llm *o = &c->app_llm[i].llm;
                if (strcmp(c->app_llm[i].app_id, app))
                        continue;
                if (o->base_url)
                        out->base_url = o->base_url;
                if (o->api_key)
                        out->api_key = o->api_key;
                if (o->model)
                        out->model = o->model;
                if (o->max_steps >= 0)
                        out->max_steps = o->max_steps;
                if (o->max_tokens >= 0)
                        out->max_tokens = o->max_tokens;
                if (o->temperature >= 0)
                        out->temperature = o->temperature;
                if (o->timeout_ms >= 0)
                        out->timeout_ms = o->timeout_ms;
        }
}

/* --- quotas: {max_boxes, max_running, max_disk, max_execs, exec_rate,
 * exec_burst, apps: {APP: {...}}} --- */

typedef struct quota_ctx {
        ab_config *c;
        ab_quota *q;
        const char *where; /* "quotas" or "quotas.apps.APP" */
} quota_ctx;

static int load_app_quotas(yctx *y, ab_config *c, yaml_node_t *map);
static int caps_pair(yctx *y, const char *k, yaml_node_t *kn, yaml_node_t *vn, void *arg);
static int load_allowed_network(yctx *y, quota_ctx *qc, yaml_node_t *seq);

static int quota_pair(yctx *y, const char *k, yaml_node_t *kn, yaml_node_t *vn, void *arg)
{
        quota_ctx *qc = arg;
        char key[256];
        snprintf(key, sizeof(key), "%s.%s", qc->where, k);
        if (!strcmp(k, "apps") && qc->c)
                return load_app_quotas(y, qc->c, vn);
        if (!strcmp(k, "max_limits"))
                return is_null(vn) ? 0 : each_pair(y, vn, key, caps_pair, qc);
        if (!strcmp(k, "allowed_network"))
                return is_null(vn) ? 0 : load_allowed_network(y, qc, vn);
        static const char *const known[] = {"max_boxes", "max_running", "max_disk",  "max_disk_mib",
                                            "max_execs", "exec_rate",   "exec_burst"};
        size_t i;
        for (i = 0; i < AB_ARRAY_LEN(known); i++)
                if (!strcmp(k, known[i]))
                        break;
        if (i == AB_ARRAY_LEN(known))
                return fail_at(y, kn, key,
                               why("unknown key (known: max_boxes, max_running, max_disk, "
                                   "max_execs, exec_rate, exec_burst, max_limits, "
                                   "allowed_network%s)",
                                   qc->c ? ", apps" : ""));
        if (is_null(vn))
                return fail_at(y, vn, key, why("needs a value (0 = no limit)"));
        const char *v = scalar(y, vn, key);
        if (!v)
                return -1;
        ab_quota *q = qc->q;
        why_t w = NULL;
        ab_err *e = NULL;
        uint64_t mib;
        double d;
        switch (i) {
        case 2:
                if (!strcmp(v, "0"))
                        q->max_disk_mib = 0;
                else if (ab_parse_mib(v, &mib, &e) < 0)
                        w = why_from_err(&e);
                else
                        q->max_disk_mib = mib > INT64_MAX ? INT64_MAX : (int64_t)mib;
                break;
        case 5:
        case 6:
                if ((w = parse_double(v, false, &d)))
                        break;
                if (d < 0 || d > 1e9)
                        w = why("must be a number from 0 to 1e9, got %g", d);
                else
                        *(i == 5 ? &q->exec_rate : &q->exec_burst) = d;
                break;
        default:
                w = parse_count(v, i == 0   ? &q->max_boxes
                                   : i == 1 ? &q->max_running
                                   : i == 3 ? &q->max_disk_mib
                                            : &q->max_execs);
        }
        return w ? fail_at(y, vn, key, w) : 0;
}

/* quotas.max_limits: {cpus, memory, pids, disk}: a box's ceilings; "auto"
 * (the server's default) fits the host, 0 = no ceiling. */
static int caps_pair(yctx *y, const char *k, yaml_node_t *kn, yaml_node_t *vn, void *arg)
{
        quota_ctx *qc = arg;
        char key[300];
        snprintf(key, sizeof(key), "%s.max_limits.%s", qc->where, k);
        ab_limit_caps *c = &qc->q->max_limits;
        static const char *const known[] = {"cpus", "memory", "memory_mib",
                                            "pids", "disk",   "disk_mib"};
        size_t i;
        for (i = 0; i < AB_ARRAY_LEN(known); i++)
                if (!strcmp(k, known[i]))
                        break;
        if (i == AB_ARRAY_LEN(known))
                return fail_at(y, kn, key, why("unknown key (known: cpus, memory, pids, disk)"));
        if (is_null(vn))
                return fail_at(y, vn, key, why("needs a value (0 = no ceiling)"));
        const char *v = scalar(y, vn, key);
        if (!v)
                return -1;
        if (!strcmp(v, "auto")) { /* in an app's entry: the server's ceiling */
                if (i == 0)
                        c->cpus = AB_QUOTA_INHERIT;
                else
                        *(i == 3   ? &c->pids
                          : i <= 2 ? &c->memory_mib
                                   : &c->disk_mib) = AB_QUOTA_INHERIT;
                return 0;
        }
        why_t w = NULL;
        ab_err *e = NULL;
        uint64_t mib;
        switch (i) {
        case 0:
                if (!(w = parse_double(v, false, &c->cpus)) && (c->cpus < 0 || c->cpus > 1e6))
                        w = why("must be a number of CPUs >= 0, got %g", c->cpus);
                break;
        case 3:
                w = parse_count(v, &c->pids);
                break;
        default:
                if (!strcmp(v, "0"))
                        mib = 0;
                else if (ab_parse_mib(v, &mib, &e) < 0) {
                        w = why_from_err(&e);
                        break;
                }
                *(i <= 2 ? &c->memory_mib : &c->disk_mib) =
                    mib > INT64_MAX ? INT64_MAX : (int64_t)mib;
        }
        return w ? fail_at(y, vn, key, w) : 0;
}

/* quotas.allowed_network: [none, allowlist, full]. */
static int load_allowed_network(yctx *y, quota_ctx *qc, yaml_node_t *seq)
{
        char key[300];
        snprintf(key, sizeof(key), "%s.allowed_network", qc->where);
        if (seq->type != YAML_SEQUENCE_NODE)
                return fail_at(y, seq, key,
                               why("expected a list of network modes (none, allowlist, full)"));
        int64_t bits = AB_QUOTA_NET_NONE;
        for (yaml_node_item_t *it = seq->data.sequence.items.start;
             it < seq->data.sequence.items.top; it++) {
                yaml_node_t *item = node(y, *it);
                const char *v = scalar(y, item, key);
                if (!v)
                        return -1;
                int b = ab_quota_net_bit(v);
                if (!b)
                        return fail_at(
                            y, item, key,
                            why("'%s' is not a network mode (none, allowlist, full)", v));
                bits |= b;
        }
        qc->q->allowed_network = bits;
        return 0;
}

static int app_quota_pair(yctx *y, const char *k, yaml_node_t *kn, yaml_node_t *vn, void *arg)
{
        ab_config *c = arg;
        if (!*k)
                return fail_at(y, kn, "quotas.apps", why("an app id must not be empty"));
        c->app_quotas = xrealloc(c->app_quotas, (c->n_app_quotas + 1) * sizeof(*c->app_quotas));
        ab_app_quota *a = &c->app_quotas[c->n_app_quotas++];
        a->app_id = xstrdup(k);
        ab_quota_unset(&a->q);
        if (is_null(vn))
                return 0;
        _cleanup_free_ char *where = xasprintf("quotas.apps.%s", k);
        quota_ctx qc = {.c = NULL, .q = &a->q, .where = where};
        return each_pair(y, vn, where, quota_pair, &qc);
}

static int load_app_quotas(yctx *y, ab_config *c, yaml_node_t *map)
{
        app_quotas_free(c->app_quotas, c->n_app_quotas);
        c->app_quotas = NULL;
        c->n_app_quotas = 0;
        if (is_null(map))
                return 0;
        return each_pair(y, map, "quotas.apps", app_quota_pair, c);
}

/* fleet: {node, url, secret_file, heartbeat, down_after}: the fields named
 * "fleet.KEY" in the table above. */
static int fleet_pair(yctx *y, const char *k, yaml_node_t *kn, yaml_node_t *vn, void *arg)
{
        _cleanup_free_ char *key = xasprintf("fleet.%s", k);
        const field *f = find_field(key);
        if (!f)
                return fail_at(
                    y, kn, key,
                    why("unknown key (known: node, url, secret_file, heartbeat, down_after, "
                        "placement)"));
        const char *v = "";
        bool null = is_null(vn);
        if (!null && !(v = scalar(y, vn, key)))
                return -1;
        why_t w = set_field(arg, f, v, null);
        return w ? fail_at(y, vn, key, w) : 0;
}

/* The kubernetes: section, checked by the backend's rules and kept as JSON
 * text for it (backend/backend.h, ab_k8s_settings_check). */
static int load_kubernetes(yctx *y, ab_config *c, yaml_node_t *kn, yaml_node_t *vn)
{
        if (is_null(vn))
                return 0;
        if (vn->type != YAML_MAPPING_NODE)
                return fail_at(y, vn, "kubernetes", why("expected a mapping of settings"));
        ab_err *e = NULL;
        char *j = NULL;
        if (ab_k8s_settings_yaml(y->doc, vn, &j, &e) < 0) {
                int r = fail_at(y, kn, "kubernetes", why("%s", e->msg));
                ab_err_free(&e);
                return r;
        }
        free(c->kubernetes);
        c->kubernetes = j;
        return 0;
}

typedef struct top_ctx {
        ab_config *c;
        bool seen[AB_ARRAY_LEN(fields)];
} top_ctx;

static int top_pair(yctx *y, const char *k, yaml_node_t *kn, yaml_node_t *vn, void *arg)
{
        top_ctx *t = arg;
        if (strcmp(k, "limits") == 0) {
                if (is_null(vn))
                        return 0;
                return each_pair(y, vn, "limits", limit_pair, &t->c->limits);
        }
        if (strcmp(k, "tools") == 0) {
                if (is_null(vn))
                        return 0;
                return each_pair(y, vn, "tools", tool_pair, &t->c->tools);
        }
        if (strcmp(k, "api_keys") == 0)
                return load_api_keys(y, t->c, vn);
        if (strcmp(k, "registries") == 0)
                return load_registries(y, t->c, vn);
        if (strcmp(k, "host_mount_prefixes") == 0)
                return load_str_list(y, vn, k, "absolute folders", host_prefix_check,
                                     &t->c->host_mount_prefixes, &t->c->n_host_mount_prefixes);
        if (strcmp(k, "allowed_hosts") == 0)
                return load_str_list(y, vn, k, "host names", allowed_host_check,
                                     &t->c->allowed_hosts, &t->c->n_allowed_hosts);
        if (strcmp(k, "app_registries") == 0)
                return load_str_list(y, vn, k, "registry hosts (\"ghcr.io\", \"*.example.com\")",
                                     app_registry_check, &t->c->app_registries,
                                     &t->c->n_app_registries);
        if (strcmp(k, "llm") == 0)
                return load_llm(y, t->c, vn);
        if (strcmp(k, "fleet") == 0)
                return is_null(vn) ? 0 : each_pair(y, vn, "fleet", fleet_pair, t->c);
        if (strcmp(k, "kubernetes") == 0)
                return load_kubernetes(y, t->c, kn, vn);
        if (strcmp(k, "quotas") == 0) {
                if (is_null(vn))
                        return 0;
                quota_ctx qc = {.c = t->c, .q = &t->c->quotas, .where = "quotas"};
                return each_pair(y, vn, "quotas", quota_pair, &qc);
        }
        const field *f = strchr(k, '.') ? NULL : find_field(k);
        if (!f) {
                _cleanup_free_ char *known = xstrdup(
                    "limits, tools, api_keys, quotas, llm, registries, host_mount_prefixes, "
                    "app_registries, allowed_hosts, fleet, kubernetes");
                for (size_t i = 0; i < AB_ARRAY_LEN(fields); i++) {
                        if (strchr(fields[i].name, '.'))
                                continue; /* a section's key (fleet.node) */
                        char *more = xasprintf("%s, %s", known, fields[i].name);
                        free(known);
                        known = more;
                }
                return fail_at(y, kn, k, why("unknown key (known: %s)", known));
        }
        if (t->seen[f - fields])
                return fail_at(y, kn, k,
                               why("given twice (also as '%s')",
                                   strcmp(k, f->name) == 0 ? f->alias : f->name));
        t->seen[f - fields] = true;
        const char *v = "";
        bool null = is_null(vn);
        if (!null && !(v = scalar(y, vn, k)))
                return -1;
        why_t w = set_field(t->c, f, v, null);
        return w ? fail_at(y, vn, k, w) : 0;
}

static int apply_yaml(ab_config *c, const char *path, const char *text, size_t len, ab_err **err)
{
        yaml_parser_t parser;
        yaml_document_t doc;
        if (!yaml_parser_initialize(&parser))
                abort();
        yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
        if (!yaml_parser_load(&parser, &doc)) {
                int r = ab_err_set(err, AB_E_INVALID, 0,
                                   "%s, line %zu column %zu: YAML syntax error: %s%s%s", path,
                                   parser.problem_mark.line + 1, parser.problem_mark.column + 1,
                                   parser.problem ? parser.problem : "unknown",
                                   parser.context ? " " : "", parser.context ? parser.context : "");
                yaml_parser_delete(&parser);
                return r;
        }
        yctx y = {.doc = &doc, .path = path, .err = err};
        int r = 0;
        yaml_node_t *root = yaml_document_get_root_node(&doc);
        if (root && !is_null(root)) {
                top_ctx t = {.c = c};
                r = each_pair(&y, root, NULL, top_pair, &t);
        }
        yaml_document_delete(&doc);
        yaml_parser_delete(&parser);
        return r;
}

int ab_config_load_file(ab_config *c, const char *path, ab_err **err)
{
        _cleanup_free_ char *text = NULL;
        size_t len = 0;
        int r = ab_read_file(AT_FDCWD, path, &text, &len);
        if (r < 0)
                return ab_err_set(err, r == -ENOENT ? AB_E_NOT_FOUND : AB_E_INVALID, -r,
                                  "cannot read config file '%s'", path);
        ab_config tmp;
        config_copy(&tmp, c);
        if (apply_yaml(&tmp, path, text, len, err) < 0) {
                ab_config_release(&tmp);
                return -1;
        }
        ab_config_release(c);
        *c = tmp;
        return 0;
}

int ab_config_load_env(ab_config *c, ab_err **err)
{
        ab_config tmp;
        config_copy(&tmp, c);
        for (size_t i = 0; i < AB_ARRAY_LEN(fields); i++) {
                const field *f = &fields[i];
                const char *v = f->env ? getenv(f->env) : NULL;
                if (!v || !*v) /* empty counts as unset */
                        continue;
                why_t w = set_field(&tmp, f, v, false);
                if (w) {
                        ab_err_set(err, AB_E_INVALID, 0, "%s: %s", f->env, w);
                        free(w);
                        ab_config_release(&tmp);
                        return -1;
                }
        }
        /* The chat's model: llm.base_url, api_key, api_key_file, model. */
        static const char *const llm_env[][2] = {{"AGENTBOX_LLM_BASE_URL", "base_url"},
                                                 {"AGENTBOX_LLM_API_KEY", "api_key"},
                                                 {"AGENTBOX_LLM_API_KEY_FILE", "api_key_file"},
                                                 {"AGENTBOX_LLM_MODEL", "model"}};
        llm_ctx lc = {.c = &tmp, .l = &tmp.llm, .where = "llm"};
        for (size_t i = 0; i < AB_ARRAY_LEN(llm_env); i++) {
                const char *v = getenv(llm_env[i][0]);
                why_t w = v && *v ? set_llm(&lc, llm_env[i][1], v) : NULL;
                if (w) {
                        ab_err_set(err, AB_E_INVALID, 0, "%s: %s", llm_env[i][0], w);
                        free(w);
                        ab_config_release(&tmp);
                        return -1;
                }
        }
        /* the kubernetes: section as one JSON object (for containers and tests) */
        const char *kv = getenv("AGENTBOX_KUBERNETES");
        if (kv && *kv) {
                json_t *j = json_loads(kv, 0, NULL);
                ab_err *e = NULL;
                if (!json_is_object(j) || ab_k8s_settings_check(j, &e) < 0) {
                        ab_err_set(err, AB_E_INVALID, 0, "AGENTBOX_KUBERNETES: %s",
                                   e ? e->msg : "not a JSON object of settings");
                        ab_err_free(&e);
                        json_decref(j);
                        ab_config_release(&tmp);
                        return -1;
                }
                free(tmp.kubernetes);
                tmp.kubernetes = json_dumps(j, JSON_COMPACT);
                json_decref(j);
        }
        ab_config_release(c);
        *c = tmp;
        return 0;
}

static int invalid(ab_err **err, const char *key, why_t w)
{
        int r = ab_err_set(err, AB_E_INVALID, 0, "%s: %s", key, w);
        free(w);
        return r;
}

/* A host name to match Host headers against: labels of letters, digits and '-'. */
static bool domain_ok(const char *d)
{
        size_t n = strlen(d);
        if (n == 0 || n > 253 || d[0] == '.' || d[0] == '-' || d[n - 1] == '.')
                return false;
        for (const char *p = d; *p; p++)
                if (!isalnum((unsigned char)*p) && *p != '-' && *p != '.')
                        return false;
        return !strstr(d, "..");
}

/* ports_domain: a domain name, maybe with ":PORT" (where clients reach it,
 * e.g. a TLS proxy's port: E2B's SDK builds its envd URLs from it). */
static bool ports_domain_ok(const char *d)
{
        const char *colon = strchr(d, ':');
        if (!colon)
                return domain_ok(d);
        char *end = NULL;
        long port = strtol(colon + 1, &end, 10);
        if (colon[1] < '1' || colon[1] > '9' || *end || port > 65535)
                return false;
        _cleanup_free_ char *name = xstrndup(d, (size_t)(colon - d));
        return domain_ok(name);
}

/* A fleet node needs an id the others can name in URLs and headers, a URL
 * they reach it at, a secret, and the store they share. */
static why_t check_fleet(const ab_config *c)
{
        const ab_config_fleet *f = &c->fleet;
        if (!f->node || !*f->node)
                return f->url || f->secret_file
                           ? why("node: is needed with url and secret_file (the node's id)")
                           : NULL;
        size_t n = strlen(f->node);
        bool ok = n <= 63;
        for (const char *p = f->node; ok && *p; p++)
                ok = isalnum((unsigned char)*p) || *p == '-' || *p == '_' || *p == '.';
        if (!ok)
                return why("node: '%s' is not a node id (up to 63 letters, digits, '-', '_', '.')",
                           f->node);
        if (!f->url || !*f->url)
                return why("url: is needed (the http://HOST:PORT other nodes reach this one at)");
        if (!f->secret_file || !*f->secret_file)
                return why("secret_file: is needed (a file holding the fleet's shared secret)");
        if (!c->store_url || (strncmp(c->store_url, "postgres://", 11) != 0 &&
                              strncmp(c->store_url, "postgresql://", 13) != 0))
                return why("a fleet shares one PostgreSQL store: set store: postgres://...");
        if (f->placement && strcmp(f->placement, "spread") && strcmp(f->placement, "local"))
                return why("placement: '%s' is not spread or local", f->placement);
        if (strncasecmp(f->url, "http://", 7) != 0)
                return why("url: nodes speak plain http:// to each other (put TLS in front "
                           "of the fleet, not between its nodes)");
        if (f->heartbeat_ms < 100)
                return why("heartbeat: must be at least 100ms");
        if (f->down_after_ms < 2 * f->heartbeat_ms)
                return why("down_after: must be at least twice the heartbeat");
        return NULL;
}

int ab_config_validate(const ab_config *c, ab_err **err)
{
        bool loopback;
        why_t w = check_listen(c->listen, &loopback);
        if (w)
                return invalid(err, "listen", w);
        bool open = !c->token || !*c->token;
        if (open && !loopback)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "listen: %s is not a loopback address and no admin token is "
                                  "set: set AGENTBOX_TOKEN (or token: in the config file), or "
                                  "listen on 127.0.0.1",
                                  c->listen);
        if (!c->data_dir || !*c->data_dir)
                return invalid(err, "data_dir", why("must not be empty"));
        if (c->skills_disk < (16ull << 20))
                return invalid(err, "skills_disk", why("must be at least 16M"));
        if ((w = check_http_url(c->webhook_url)))
                return invalid(err, "webhook_url", w);
        if (c->backend && strcmp(c->backend, "native") != 0 && strcmp(c->backend, "docker") != 0 &&
            strcmp(c->backend, "mock") != 0 && strcmp(c->backend, "kubernetes") != 0)
                return invalid(
                    err, "backend",
                    why("'%s' is not a backend (native, docker, mock or kubernetes)", c->backend));
        if (c->docker_host && strncmp(c->docker_host, "unix://", 7) != 0)
                return invalid(err, "docker_host",
                               why("'%s': only unix:// sockets are supported", c->docker_host));
        if (c->ports_domain && !ports_domain_ok(c->ports_domain))
                return invalid(err, "ports_domain",
                               why("'%s' is not a domain name (letters, digits, '-' and '.') "
                                   "with maybe a :PORT",
                                   c->ports_domain));

        const struct {
                const char *key;
                int64_t v, min;
        } ints[] = {
            {"idle_pause", c->idle_pause_s, 0},
            {"idle_stop", c->idle_stop_s, 0},
            {"ttl", c->ttl_s, 0},
            {"pool_size", c->pool_size, 0},
            {"max_running", c->max_running, 0},
            {"reaper_interval", c->reaper_interval_ms, 1},
            {"sample_interval", c->sample_interval_ms, 0},
            {"max_connections", c->max_connections, 1},
            {"max_connections_per_address", c->max_connections_per_address, 1},
            {"head_timeout", c->head_timeout_ms, 100},
            {"max_streams", c->max_streams, 1},
            {"max_streams_per_address", c->max_streams_per_address, 1},
            {"max_requests", c->max_requests, 1},
            {"ports_timeout", c->ports_timeout_ms, 100},
            {"network_proxy_max_per_app", c->network_proxy_max_per_app, 1},
        };
        for (size_t i = 0; i < AB_ARRAY_LEN(ints); i++)
                if (ints[i].v < ints[i].min)
                        return invalid(err, ints[i].key,
                                       why("must be at least %lld (got %lld)",
                                           (long long)ints[i].min, (long long)ints[i].v));
        const struct {
                const char *key;
                double v;
        } pcts[] = {
            {"alert_memory_pct", c->alert_memory_pct},
            {"alert_cpu_pct", c->alert_cpu_pct},
            {"alert_disk_pct", c->alert_disk_pct},
            {"memory_pressure_pct", c->memory_pressure_pct},
        };
        for (size_t i = 0; i < AB_ARRAY_LEN(pcts); i++)
                if ((w = check_pct(pcts[i].v)))
                        return invalid(err, pcts[i].key, w);
        if (c->max_body == 0)
                return invalid(err, "max_body", why("must be more than 0 bytes"));
        if (c->max_upload == 0)
                return invalid(err, "max_upload", why("must be more than 0 bytes"));
        if (c->tmp_max < c->max_upload)
                return invalid(err, "tmp_max",
                               why("must be at least max_upload (%" PRIu64 " bytes), got %" PRIu64,
                                   c->max_upload, c->tmp_max));

        if (ab_limits_validate(&c->limits, err) < 0)
                return ab_err_wrap(err, "limits");
        if (ab_quota_validate(&c->quotas, false, err) < 0)
                return -1;
        /* the server's own default limits must fit its ceilings */
        const ab_limit_caps *mc = &c->quotas.max_limits;
        if ((mc->cpus > 0 && c->limits.cpus > mc->cpus) ||
            (mc->memory_mib > 0 && c->limits.memory_mib > (uint64_t)mc->memory_mib) ||
            (mc->pids > 0 && c->limits.pids > (uint64_t)mc->pids) ||
            (mc->disk_mib > 0 && c->limits.disk_mib > (uint64_t)mc->disk_mib))
                return invalid(err, "quotas.max_limits",
                               why("the default limits (limits:) must fit under the server's "
                                   "ceilings: lower limits or raise max_limits"));
        for (size_t i = 0; i < c->n_app_quotas; i++)
                if (ab_quota_validate(&c->app_quotas[i].q, true, err) < 0)
                        return ab_err_wrap(err, "quotas.apps.%s", c->app_quotas[i].app_id);
        if (!(c->disk_overcommit_ratio >= 0))
                return invalid(err, "disk_overcommit_ratio", why("must be >= 0 (0 = off)"));
        if (c->disk_watch_interval_ms < 0)
                return invalid(err, "disk_watch_interval", why("must be >= 0 (0 = off)"));

        if ((w = check_fleet(c)))
                return invalid(err, "fleet", w);
        for (size_t i = 0; i < c->n_keys; i++) {
                if ((w = check_api_key(c->keys[i].key, c->keys[i].app_id)))
                        return invalid(err, "api_keys", w);
                for (size_t j = 0; j < i; j++)
                        if (strcmp(c->keys[j].key, c->keys[i].key) == 0)
                                return invalid(err, "api_keys",
                                               why("the same key secret is listed twice"));
                if (!open && strcmp(c->keys[i].key, c->token) == 0)
                        return invalid(err, "api_keys",
                                       why("an API key must differ from the admin token"));
        }
        return 0;
}

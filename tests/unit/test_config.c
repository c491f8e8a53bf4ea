/* Unit tests: configuration defaults, a full YAML file, bad values and
 * unknown keys refused with the key and the line, environment over file,
 * and the validation rules (listen address, token on non-loopback, keys). */
#include "config/config.h"
#include "tap.h"

#include <dirent.h>
#include <fcntl.h>
#include <math.h>

static char dir[] = "/tmp/ab-config-XXXXXX";

static char *write_conf(const char *text)
{
        static int n;
        char *path = xasprintf("%s/c%d.yaml", dir, n++);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0 || ab_write_all(fd, text, strlen(text)) < 0)
                tap_ok(0, "write %s", path);
        if (fd >= 0)
                close(fd);
        return path;
}

/* Loads text over the defaults; returns the error message (malloc'd) or NULL. */
static char *load_err(const char *text)
{
        _cleanup_free_ char *path = write_conf(text);
        ab_config c;
        ab_config_default(&c);
        ab_err *e = NULL;
        int r = ab_config_load_file(&c, path, &e);
        char *msg = NULL;
        if (r < 0 && e && e->code == AB_E_INVALID)
                msg = xstrdup(e->msg);
        else if (r < 0)
                msg = xstrdup("(wrong error)");
        ab_err_free(&e);
        ab_config_release(&c);
        return msg;
}

/* A bad file is refused with a message naming all of `parts`. */
static void refused(const char *text, const char *what, const char *part1, const char *part2)
{
        _cleanup_free_ char *m = load_err(text);
        bool ok = m && strstr(m, part1) && (!part2 || strstr(m, part2));
        tap_ok(ok, "%s is refused, naming '%s'%s%s", what, part1, part2 ? " and " : "",
               part2 ? part2 : "");
        if (!ok)
                tap_diag("  message: %s", m ? m : "(accepted)");
}

static char *validate_err(const ab_config *c)
{
        ab_err *e = NULL;
        char *msg = NULL;
        if (ab_config_validate(c, &e) < 0)
                msg = xstrdup(e ? e->msg : "(no message)");
        ab_err_free(&e);
        return msg;
}

static void test_defaults(void)
{
        ab_config c;
        ab_config_default(&c);
        TAP_IS_STR(c.listen, "127.0.0.1:8080", "default listen");
        TAP_IS_STR(c.data_dir, "./data", "default data_dir");
        tap_ok(!c.store_url && !c.token && !c.init_path && !c.webhook_url,
               "store, token, init, webhook unset");
        TAP_IS_INT(c.idle_stop_s, 300, "default idle_stop");
        TAP_IS_INT(c.ttl_s, 0, "default ttl");
        TAP_IS_INT(c.pool_size, 0, "default pool_size");
        TAP_IS_INT(c.max_running, 0, "default max_running");
        TAP_IS_INT(c.reaper_interval_ms, 5000, "default reaper_interval");
        TAP_IS_INT(c.sample_interval_ms, 10000, "default sample_interval");
        tap_ok(c.alert_memory_pct == 0 && c.alert_cpu_pct == 0 && c.alert_disk_pct == 0,
               "alerts off");
        TAP_IS_INT(c.max_body, 1 << 20, "default max_body 1 MiB");
        TAP_IS_INT(c.max_upload, 1 << 30, "default max_upload 1 GiB");
        TAP_IS_INT(c.max_connections, 10000, "default max_connections");
        TAP_IS_INT(c.max_connections_per_address, 256, "default max_connections_per_address");
        TAP_IS_INT(c.head_timeout_ms, 10000, "default head_timeout 10 s");
        TAP_IS_INT(c.max_streams, 1000, "default max_streams");
        TAP_IS_INT(c.max_streams_per_address, 128, "default max_streams_per_address");
        TAP_IS_INT(c.max_requests, 512, "default max_requests");
        TAP_IS_INT(c.network_proxy_max_per_app, 1024, "default network_proxy_max_per_app");
        TAP_IS_INT(c.limits.memory_mib, AB_DEFAULT_MEMORY_MIB, "default limits");
        tap_ok(c.n_keys == 0 && !c.keys, "no API keys");
        _cleanup_free_ char *m = validate_err(&c);
        tap_ok(!m, "the defaults validate (%s)", m ? m : "ok");
        ab_config_release(&c);
        tap_ok(!c.listen && !c.data_dir, "release zeroes");
}

static const char full[] = "# agentbox config\n"
                           "listen: \"0.0.0.0:9000\"\n"
                           "data: /var/lib/agentbox\n"
                           "store: postgres://u@db/agentbox\n"
                           "token: s3cret-admin-token\n"
                           "init_path: /usr/libexec/agentbox/agentbox-init\n"
                           "idle_stop: 5m\n"
                           "ttl: 2h\n"
                           "pool_size: 3\n"
                           "max_running: 50\n"
                           "reaper_interval: 250ms\n"
                           "sample_interval: 0\n"
                           "alert_memory_pct: 90\n"
                           "alert_cpu_pct: 85.5\n"
                           "alert_disk_pct: 95%\n"
                           "webhook_url: https://hooks.example.com/x\n"
                           "max_body: 2M\n"
                           "max_upload: 4G\n"
                           "max_connections: 200\n"
                           "max_connections_per_address: 20\n"
                           "head_timeout: 1500ms\n"
                           "max_streams: 30\n"
                           "max_streams_per_address: 3\n"
                           "max_requests: 40\n"
                           "network_proxy_max_per_app: 64\n"
                           "limits:\n"
                           "  cpus: 2.5\n"
                           "  memory: 2G\n"
                           "  pids: 1000\n"
                           "  disk: 512M\n"
                           "  timeout: 90s\n"
                           "  output_cap: 64K\n"
                           "api_keys:\n"
                           "  - key: key-for-app-one-0001\n"
                           "    app_id: app1\n"
                           "  - {key: key-for-app-two-0002, app_id: app2}\n";

static void test_full_file(void)
{
        _cleanup_free_ char *path = write_conf(full);
        ab_config c;
        ab_config_default(&c);
        ab_err *e = NULL;
        int r = ab_config_load_file(&c, path, &e);
        TAP_IS_INT(r, 0, "full config loads");
        if (e)
                tap_diag("  %s", e->msg);
        ab_err_free(&e);
        TAP_IS_STR(c.listen, "0.0.0.0:9000", "listen");
        TAP_IS_STR(c.data_dir, "/var/lib/agentbox", "data (alias of data_dir)");
        TAP_IS_STR(c.store_url, "postgres://u@db/agentbox", "store");
        TAP_IS_STR(c.token, "s3cret-admin-token", "token");
        TAP_IS_STR(c.init_path, "/usr/libexec/agentbox/agentbox-init", "init_path");
        TAP_IS_INT(c.idle_stop_s, 300, "idle_stop 5m = 300 s");
        TAP_IS_INT(c.ttl_s, 7200, "ttl 2h");
        TAP_IS_INT(c.pool_size, 3, "pool_size");
        TAP_IS_INT(c.max_running, 50, "max_running");
        TAP_IS_INT(c.reaper_interval_ms, 250, "reaper_interval 250ms");
        TAP_IS_INT(c.sample_interval_ms, 0, "sample_interval 0 = off");
        tap_ok(c.alert_memory_pct == 90 && c.alert_cpu_pct == 85.5 && c.alert_disk_pct == 95,
               "alert thresholds (with and without %%)");
        TAP_IS_STR(c.webhook_url, "https://hooks.example.com/x", "webhook_url");
        TAP_IS_INT(c.max_body, 2 << 20, "max_body 2M");
        TAP_IS_INT(c.max_upload, 4ull << 30, "max_upload 4G");
        TAP_IS_INT(c.max_connections, 200, "max_connections");
        TAP_IS_INT(c.max_connections_per_address, 20, "max_connections_per_address");
        TAP_IS_INT(c.head_timeout_ms, 1500, "head_timeout 1500ms");
        TAP_IS_INT(c.max_streams, 30, "max_streams");
        TAP_IS_INT(c.max_streams_per_address, 3, "max_streams_per_address");
        TAP_IS_INT(c.max_requests, 40, "max_requests");
        TAP_IS_INT(c.network_proxy_max_per_app, 64, "network_proxy_max_per_app");
        tap_ok(c.limits.cpus == 2.5, "limits.cpus");
        TAP_IS_INT(c.limits.memory_mib, 2048, "limits.memory 2G");
        TAP_IS_INT(c.limits.pids, 1000, "limits.pids");
        TAP_IS_INT(c.limits.disk_mib, 512, "limits.disk 512M");
        TAP_IS_INT(c.limits.timeout_s, 90, "limits.timeout 90s");
        TAP_IS_INT(c.limits.output_cap, 65536, "limits.output_cap 64K");
        TAP_IS_INT(c.limits.nofile, AB_DEFAULT_NOFILE, "limits.nofile keeps its default");
        TAP_IS_INT(c.n_keys, 2, "two API keys");
        if (c.n_keys == 2) {
                TAP_IS_STR(c.keys[0].key, "key-for-app-one-0001", "key 1 secret");
                TAP_IS_STR(c.keys[0].app_id, "app1", "key 1 app");
                TAP_IS_STR(c.keys[1].key, "key-for-app-two-0002", "key 2 secret (flow style)");
                TAP_IS_STR(c.keys[1].app_id, "app2", "key 2 app");
        }
        _cleanup_free_ char *m = validate_err(&c);
        tap_ok(!m, "the full config validates (%s)", m ? m : "ok");

        /* A second file applies over the first; unspecified fields stay. */
        _cleanup_free_ char *p2 = write_conf("pool_size: 7\nstore: ~\napi_keys: []\n");
        TAP_IS_INT(ab_config_load_file(&c, p2, NULL), 0, "a second file loads over it");
        TAP_IS_INT(c.pool_size, 7, "overridden value");
        tap_ok(c.store_url == NULL, "null clears an optional string");
        tap_ok(c.n_keys == 0, "an empty api_keys list clears the keys");
        TAP_IS_INT(c.max_running, 50, "other values kept");

        /* A failed load leaves the configuration as it was. */
        _cleanup_free_ char *p3 = write_conf("pool_size: 9\nmax_running: lots\n");
        tap_ok(ab_config_load_file(&c, p3, &e) < 0, "a bad file fails");
        ab_err_free(&e);
        TAP_IS_INT(c.pool_size, 7, "and changes nothing, not even the good keys before it");

        _cleanup_free_ char *p4 = write_conf("");
        TAP_IS_INT(ab_config_load_file(&c, p4, NULL), 0, "an empty file is fine");
        _cleanup_free_ char *p5 = write_conf("# only comments\n");
        TAP_IS_INT(ab_config_load_file(&c, p5, NULL), 0, "a file of comments is fine");
        TAP_IS_INT(c.pool_size, 7, "and changes nothing");
        ab_config_release(&c);

        ab_config_default(&c);
        tap_ok(ab_config_load_file(&c, "/nonexistent/agentbox.yaml", &e) < 0 && e &&
                   e->code == AB_E_NOT_FOUND && strstr(e->msg, "/nonexistent/agentbox.yaml"),
               "a missing file is not_found, naming it");
        ab_err_free(&e);
        ab_config_release(&c);
}

/* ports_domain must be a host name (maybe with :PORT); ports_timeout at least 100 ms. */
static void test_ports(void)
{
        const struct {
                const char *domain;
                int64_t timeout_ms;
                const char *want; /* NULL = valid */
        } cases[] = {
            {"boxes.example.com", 60000, NULL},
            {"http://boxes.example.com", 60000, "ports_domain"},
            {"a..b", 60000, "ports_domain"},
            {".example.com", 60000, "ports_domain"},
            /* with the port clients reach it at (a TLS proxy's) */
            {"boxes.example.com:8443", 60000, NULL},
            {"boxes.example.com:", 60000, "ports_domain"},
            {"boxes.example.com:0", 60000, "ports_domain"},
            {"boxes.example.com:65536", 60000, "ports_domain"},
            {"boxes.example.com:80x", 60000, "ports_domain"},
            {"a..b:80", 60000, "ports_domain"},
            {"boxes.example.com", 10, "ports_timeout"},
        };
        for (size_t i = 0; i < AB_ARRAY_LEN(cases); i++) {
                ab_config c;
                ab_config_default(&c);
                c.ports_domain = xstrdup(cases[i].domain);
                c.ports_timeout_ms = cases[i].timeout_ms;
                _cleanup_free_ char *m = validate_err(&c);
                if (cases[i].want)
                        tap_ok(m && strstr(m, cases[i].want), "%s / %lld ms: refused, naming %s",
                               cases[i].domain, (long long)cases[i].timeout_ms, cases[i].want);
                else
                        tap_ok(!m, "%s: valid (%s)", cases[i].domain, m ? m : "ok");
                ab_config_release(&c);
        }
        /* the egress proxy's cap per app: 0 would let no app's box out */
        ab_config c;
        ab_config_default(&c);
        c.network_proxy_max_per_app = 0;
        _cleanup_free_ char *m = validate_err(&c);
        tap_ok(m && strstr(m, "network_proxy_max_per_app"),
               "network_proxy_max_per_app 0: refused (%s)", m ? m : "accepted");
        ab_config_release(&c);
}

/* allowed_hosts: a list of host names (":PORT" allowed), copied with the
 * config; anything with a scheme, a path or spaces is refused. */
static void test_allowed_hosts(void)
{
        _cleanup_free_ char *path =
            write_conf("allowed_hosts:\n  - devbox.lan\n  - \"[fd00::1]:8080\"\n");
        ab_config c;
        ab_config_default(&c);
        ab_err *e = NULL;
        TAP_IS_INT(ab_config_load_file(&c, path, &e), 0, "allowed_hosts loads");
        ab_err_free(&e);
        tap_ok(c.n_allowed_hosts == 2 && !strcmp(c.allowed_hosts[0], "devbox.lan") &&
                   !strcmp(c.allowed_hosts[1], "[fd00::1]:8080") && !c.allowed_hosts[2],
               "... both entries, NULL-terminated");
        TAP_IS_INT(ab_config_load_file(&c, path, NULL), 0, "a second load over the first");
        tap_ok(c.n_allowed_hosts == 2, "... holds the list once");
        ab_config_release(&c);
        refused("allowed_hosts:\n  - http://devbox.lan\n", "a scheme", "allowed_hosts",
                "no scheme");
        refused("allowed_hosts:\n  - devbox.lan/x\n", "a path", "allowed_hosts", NULL);
        refused("allowed_hosts: devbox.lan\n", "a scalar", "allowed_hosts", "list");
        refused("allowed_hosts:\n  - \"\"\n", "an empty name", "allowed_hosts", NULL);
}

/* backend names one of the two; docker_host is a unix:// socket; both
 * come from the file and the environment. */
static void test_backend(void)
{
        ab_config c;
        ab_config_default(&c);
        tap_ok(!c.backend && !c.docker_host && !c.docker_runtime && !c.docker_image,
               "backend and docker_* default to unset (native only)");
        _cleanup_free_ char *p = write_conf("backend: docker\ndocker_host: unix:///run/d.sock\n"
                                            "docker_runtime: runsc\ndocker_image: debian:12\n");
        ab_err *e = NULL;
        tap_ok(ab_config_load_file(&c, p, &e) == 0 && ab_config_validate(&c, &e) == 0,
               "backend, docker_host, docker_runtime, docker_image load (%s)", e ? e->msg : "ok");
        ab_err_free(&e);
        TAP_IS_STR(c.backend, "docker", "backend");
        TAP_IS_STR(c.docker_host, "unix:///run/d.sock", "docker_host");
        TAP_IS_STR(c.docker_runtime, "runsc", "docker_runtime");
        TAP_IS_STR(c.docker_image, "debian:12", "docker_image");
        setenv("AGENTBOX_BACKEND", "native", 1);
        setenv("AGENTBOX_DOCKER_HOST", "unix:///x.sock", 1);
        tap_ok(ab_config_load_env(&c, &e) == 0, "the environment loads");
        ab_err_free(&e);
        TAP_IS_STR(c.backend, "native", "AGENTBOX_BACKEND overrides the file");
        TAP_IS_STR(c.docker_host, "unix:///x.sock", "AGENTBOX_DOCKER_HOST overrides the file");
        unsetenv("AGENTBOX_BACKEND");
        unsetenv("AGENTBOX_DOCKER_HOST");
        ab_config_release(&c);

        ab_config_default(&c);
        _cleanup_free_ char *pm = write_conf("backend: mock\nmock_expect: /t/expect.json\n");
        setenv("AGENTBOX_MOCK_LOG", "/t/calls.jsonl", 1);
        tap_ok(ab_config_load_file(&c, pm, &e) == 0 && ab_config_load_env(&c, &e) == 0 &&
                   ab_config_validate(&c, &e) == 0,
               "backend: mock with mock_expect and AGENTBOX_MOCK_LOG loads (%s)",
               e ? e->msg : "ok");
        ab_err_free(&e);
        unsetenv("AGENTBOX_MOCK_LOG");
        TAP_IS_STR(c.backend, "mock", "backend mock");
        TAP_IS_STR(c.mock_expect, "/t/expect.json", "mock_expect");
        TAP_IS_STR(c.mock_log, "/t/calls.jsonl", "mock_log from the environment");
        ab_config_release(&c);

        /* the kubernetes section: kept as JSON, YAML's string numbers made
         * numbers where the API wants them; bad keys named */
        ab_config_default(&c);
        _cleanup_free_ char *pk =
            write_conf("backend: kubernetes\nkubernetes:\n  init_image: agentbox/init:1\n"
                       "  node_selector: {pool: boxes}\n"
                       "  tolerations:\n  - {key: k, operator: Exists, tolerationSeconds: 30}\n"
                       "  ready_timeout: 90s\n");
        tap_ok(ab_config_load_file(&c, pk, &e) == 0 && ab_config_validate(&c, &e) == 0,
               "backend: kubernetes with a kubernetes: section loads (%s)", e ? e->msg : "ok");
        ab_err_free(&e);
        tap_ok(c.kubernetes && strstr(c.kubernetes, "\"init_image\":\"agentbox/init:1\"") &&
                   strstr(c.kubernetes, "\"tolerationSeconds\":30") &&
                   strstr(c.kubernetes, "\"pool\":\"boxes\""),
               "the section is kept as JSON, tolerationSeconds a number (%s)",
               c.kubernetes ? c.kubernetes : "(none)");
        setenv("AGENTBOX_KUBERNETES", "{\"init_image\":\"x\",\"namespace\":\"boxes\"}", 1);
        tap_ok(ab_config_load_env(&c, &e) == 0 && strstr(c.kubernetes, "\"namespace\":\"boxes\""),
               "AGENTBOX_KUBERNETES replaces it");
        ab_err_free(&e);
        setenv("AGENTBOX_KUBERNETES", "{\"nope\":1}", 1);
        tap_ok(ab_config_load_env(&c, &e) < 0 && e && strstr(e->msg, "kubernetes.nope"),
               "an unknown key in AGENTBOX_KUBERNETES is named (%s)", e ? e->msg : "accepted");
        ab_err_free(&e);
        unsetenv("AGENTBOX_KUBERNETES");
        ab_config_release(&c);
        ab_config_default(&c);
        _cleanup_free_ char *pk2 = write_conf("kubernetes:\n  workspace_size: lots\n");
        tap_ok(ab_config_load_file(&c, pk2, &e) < 0 && e && strstr(e->msg, "workspace_size"),
               "a bad workspace_size is refused, named (%s)", e ? e->msg : "accepted");
        ab_err_free(&e);
        ab_config_release(&c);

        const struct {
                const char *backend, *host, *want;
        } bad[] = {
            {"podman", NULL, "backend"},
            {"Docker", NULL, "backend"},
            {NULL, "tcp://127.0.0.1:2375", "docker_host"},
            {NULL, "/run/docker.sock", "docker_host"},
        };
        for (size_t i = 0; i < AB_ARRAY_LEN(bad); i++) {
                ab_config_default(&c);
                c.backend = bad[i].backend ? xstrdup(bad[i].backend) : NULL;
                c.docker_host = bad[i].host ? xstrdup(bad[i].host) : NULL;
                _cleanup_free_ char *m = validate_err(&c);
                tap_ok(m && strstr(m, bad[i].want), "backend %s, docker_host %s: refused naming %s",
                       bad[i].backend ? bad[i].backend : "-", bad[i].host ? bad[i].host : "-",
                       bad[i].want);
                ab_config_release(&c);
        }
}

static void test_bad_values(void)
{
        refused("listen: 127.0.0.1:8080\nttl: soon\n", "a bad duration", "ttl", "line 2");
        refused("idle_stop: -5\n", "a negative duration", "idle_stop", "line 1");
        refused("pool_size: 2.5\n", "a fractional count", "pool_size", "line 1");
        refused("pool_size: -1\n", "a negative count", "pool_size", "line 1");
        refused("\n\nmax_body: huge\n", "a bad size", "max_body", "line 3");
        refused("max_upload: 0\n", "a zero size", "max_upload", "line 1");
        refused("alert_cpu_pct: 150\n", "a threshold over 100", "alert_cpu_pct", "line 1");
        refused("alert_disk_pct: -1\n", "a negative threshold", "alert_disk_pct", "line 1");
        refused("alert_memory_pct: high\n", "a threshold that is no number", "alert_memory_pct",
                NULL);
        refused("listen: 8080\n", "listen without a host", "listen", "line 1");
        refused("listen: \"127.0.0.1:99999\"\n", "a port out of range", "listen", "65535");
        refused("listen: \"127.0.0.1:0\"\n", "port 0", "listen", "line 1");
        refused("listen: \"::1:8080\"\n", "IPv6 without brackets", "listen", "brackets");
        refused("listen: \"[::1:8080\"\n", "an unclosed bracket", "listen", "line 1");
        refused("webhook_url: ftp://x/y\n", "a non-http webhook", "webhook_url", "line 1");
        refused("data_dir: \"\"\n", "an empty data_dir", "data_dir", "line 1");
        refused("listen:\n", "a missing listen value", "listen", "needs a value");
        refused("listen: [a, b]\n", "a list where a value belongs", "listen", "line 1");
        refused("limits:\n  memory: 1M\n", "a memory limit under the minimum", "limits.memory",
                "line 2");
        refused("limits:\n  cpus: 0\n", "zero cpus", "limits.cpus", "line 2");
        refused("limits:\n  pids: many\n", "bad pids", "limits.pids", "line 2");
        refused("limits:\n  timeout: 3d\n", "a bad timeout", "limits.timeout", "line 2");
        refused("limits:\n  timeout: 2h\n  disk: 20T\n", "too much disk", "limits.disk", "line 3");
        refused("limits: 5\n", "limits that are not a mapping", "limits", "line 1");
        refused("api_keys:\n  - key: short\n    app_id: a\n", "a short API key", "api_keys", "16");
        refused("api_keys:\n  - key: long-enough-key-0001\n", "an API key without app_id",
                "api_keys", "app_id");
        refused("api_keys:\n  - key: long-enough-key-0001\n    app_id: \"\"\n", "an empty app_id",
                "api_keys", "app_id");
        refused("api_keys:\n  - key: long-enough-key-0001\n    app_id: a\n"
                "  - key: long-enough-key-0001\n    app_id: b\n",
                "the same key twice", "api_keys", "line 4");
        refused("api_keys:\n  - key: long-enough-key-0001\n    app: a\n",
                "a typo inside an API key", "api_keys.app", "line 3");
        refused("api_keys: secret\n", "api_keys that are no list", "api_keys", "line 1");
        refused("pool_size: 1\npool_size: 2\n", "a key given twice", "pool_size", "line 2");
        refused("data: /a\ndata_dir: /b\n", "a key and its alias", "data_dir", "line 2");
        refused("pool_size: \"3\\0\"\n", "a value with a NUL", "pool_size", "NUL");
        refused("- a\n- b\n", "a file that is a list", "mapping", "line 1");
        refused("listen: \"unterminated\n", "a YAML syntax error", "line", "YAML");
}

static void test_unknown_keys(void)
{
        refused("listen: 127.0.0.1:8080\nidle_stp: 5m\n", "a typo at the top level", "idle_stp",
                "line 2");
        refused("limits:\n  memroy: 1G\n", "a typo inside limits", "limits.memroy", "line 2");
        refused("Listen: 127.0.0.1:8080\n", "a key in the wrong case", "Listen", "unknown");
}

static void test_env(void)
{
        _cleanup_free_ char *path =
            write_conf("listen: 127.0.0.1:7000\npool_size: 2\ntoken: from-file\n");
        ab_config c;
        ab_config_default(&c);
        ab_err *e = NULL;
        TAP_IS_INT(ab_config_load_file(&c, path, &e), 0, "file for the env test");
        setenv("AGENTBOX_LISTEN", "0.0.0.0:7001", 1);
        setenv("AGENTBOX_DATA", "/srv/data", 1);
        setenv("AGENTBOX_STORE", "postgres://db/x", 1);
        setenv("AGENTBOX_TOKEN", "from-env", 1);
        setenv("AGENTBOX_INIT", "/opt/init", 1);
        setenv("AGENTBOX_IDLE_STOP", "90s", 1);
        setenv("AGENTBOX_POOL_SIZE", "5", 1);
        setenv("AGENTBOX_MAX_RUNNING", "12", 1);
        setenv("AGENTBOX_WEBHOOK_URL", "http://127.0.0.1:9/hook", 1);
        TAP_IS_INT(ab_config_load_env(&c, &e), 0, "env loads");
        ab_err_free(&e);
        TAP_IS_STR(c.listen, "0.0.0.0:7001", "AGENTBOX_LISTEN overrides the file");
        TAP_IS_STR(c.data_dir, "/srv/data", "AGENTBOX_DATA");
        TAP_IS_STR(c.store_url, "postgres://db/x", "AGENTBOX_STORE");
        TAP_IS_STR(c.token, "from-env", "AGENTBOX_TOKEN overrides the file");
        TAP_IS_STR(c.init_path, "/opt/init", "AGENTBOX_INIT");
        TAP_IS_INT(c.idle_stop_s, 90, "AGENTBOX_IDLE_STOP");
        TAP_IS_INT(c.pool_size, 5, "AGENTBOX_POOL_SIZE overrides the file");
        TAP_IS_INT(c.max_running, 12, "AGENTBOX_MAX_RUNNING");
        TAP_IS_STR(c.webhook_url, "http://127.0.0.1:9/hook", "AGENTBOX_WEBHOOK_URL");

        setenv("AGENTBOX_POOL_SIZE", "", 1);
        setenv("AGENTBOX_MAX_RUNNING", "99", 1);
        TAP_IS_INT(ab_config_load_env(&c, NULL), 0, "env again");
        TAP_IS_INT(c.pool_size, 5, "an empty variable counts as unset");
        TAP_IS_INT(c.max_running, 99, "a set one applies");

        setenv("AGENTBOX_IDLE_STOP", "forever", 1);
        setenv("AGENTBOX_MAX_RUNNING", "1", 1);
        tap_ok(ab_config_load_env(&c, &e) < 0 && e && e->code == AB_E_INVALID &&
                   strstr(e->msg, "AGENTBOX_IDLE_STOP"),
               "a bad variable is refused, naming it");
        ab_err_free(&e);
        TAP_IS_INT(c.max_running, 99, "a refused env load changes nothing");
        unsetenv("AGENTBOX_IDLE_STOP");
        setenv("AGENTBOX_LISTEN", "nohost", 1);
        tap_ok(ab_config_load_env(&c, &e) < 0 && e && strstr(e->msg, "AGENTBOX_LISTEN"),
               "a bad AGENTBOX_LISTEN is refused");
        ab_err_free(&e);
        ab_config_release(&c);
        static const char *const vars[] = {
            "AGENTBOX_LISTEN",    "AGENTBOX_DATA",        "AGENTBOX_STORE",
            "AGENTBOX_TOKEN",     "AGENTBOX_INIT",        "AGENTBOX_IDLE_STOP",
            "AGENTBOX_POOL_SIZE", "AGENTBOX_MAX_RUNNING", "AGENTBOX_WEBHOOK_URL"};
        for (size_t i = 0; i < AB_ARRAY_LEN(vars); i++)
                unsetenv(vars[i]);
}

/* validate with listen = l and token = t; returns the message or NULL. */
static char *try_listen(const char *l, const char *t)
{
        ab_config c;
        ab_config_default(&c);
        free(c.listen);
        c.listen = xstrdup(l);
        c.token = t ? xstrdup(t) : NULL;
        char *m = validate_err(&c);
        ab_config_release(&c);
        return m;
}

static void listen_ok(const char *l, const char *t)
{
        _cleanup_free_ char *m = try_listen(l, t);
        tap_ok(!m, "listen %s with token %s is accepted", l, t ? t : "(none)");
        if (m)
                tap_diag("  %s", m);
}

static void listen_refused(const char *l, const char *t, const char *part)
{
        _cleanup_free_ char *m = try_listen(l, t);
        tap_ok(m && strstr(m, part), "listen %s with token %s is refused (%s)", l, t ? t : "(none)",
               part);
        if (m && !strstr(m, part))
                tap_diag("  %s", m);
}

static void test_validate(void)
{
        listen_ok("127.0.0.1:8080", NULL);
        listen_ok("127.1.2.3:1", NULL);
        listen_ok("localhost:65535", NULL);
        listen_ok("[::1]:8080", NULL);
        listen_ok("[::ffff:127.0.0.1]:8080", NULL);
        listen_refused("0.0.0.0:8080", NULL, "AGENTBOX_TOKEN");
        listen_refused("0.0.0.0:8080", "", "AGENTBOX_TOKEN");
        listen_refused("[::]:8080", NULL, "AGENTBOX_TOKEN");
        listen_refused("192.168.1.5:8080", NULL, "AGENTBOX_TOKEN");
        listen_refused("example.com:8080", NULL, "AGENTBOX_TOKEN");
        listen_ok("0.0.0.0:8080", "admin-token");
        listen_ok("[::]:8080", "admin-token");
        listen_ok("example.com:443", "admin-token");
        listen_refused("127.0.0.1", NULL, "listen");
        listen_refused("127.0.0.1:", NULL, "port");
        listen_refused("127.0.0.1:65536", NULL, "port");
        listen_refused("127.0.0.1:80a", NULL, "port");
        listen_refused("[::1]8080", NULL, "listen");
        listen_refused("[nothex]:8080", NULL, "IPv6");
        listen_refused("bad host:8080", "t", "listen");
        listen_refused(":8080", "t", "host");

        ab_config c;
        ab_config_default(&c);
        c.alert_cpu_pct = 101;
        _cleanup_free_ char *m1 = validate_err(&c);
        tap_ok(m1 && strstr(m1, "alert_cpu_pct"), "validate: threshold over 100 names the key");
        c.alert_cpu_pct = NAN;
        _cleanup_free_ char *m1b = validate_err(&c);
        tap_ok(m1b && strstr(m1b, "alert_cpu_pct"), "validate: NaN threshold refused");
        c.alert_cpu_pct = 50;
        c.limits.pids = 1;
        _cleanup_free_ char *m2 = validate_err(&c);
        tap_ok(m2 && strstr(m2, "limits") && strstr(m2, "pids"),
               "validate: limits checked with ab_limits_validate");
        c.limits.pids = AB_DEFAULT_PIDS;
        c.reaper_interval_ms = 0;
        _cleanup_free_ char *m3 = validate_err(&c);
        tap_ok(m3 && strstr(m3, "reaper_interval"), "validate: reaper_interval 0 refused");
        c.reaper_interval_ms = 1000;
        c.max_connections = 0;
        _cleanup_free_ char *m4 = validate_err(&c);
        tap_ok(m4 && strstr(m4, "max_connections"), "validate: max_connections 0 refused");
        c.max_connections = 10;
        c.keys = xcalloc(1, sizeof(*c.keys));
        c.n_keys = 1;
        c.keys[0].key = xstrdup("too-short");
        c.keys[0].app_id = xstrdup("a");
        _cleanup_free_ char *m5 = validate_err(&c);
        tap_ok(m5 && strstr(m5, "api_keys") && strstr(m5, "16"), "validate: short key refused");
        free(c.keys[0].key);
        c.keys[0].key = xstrdup("0123456789abcdef");
        free(c.keys[0].app_id);
        c.keys[0].app_id = xstrdup("");
        _cleanup_free_ char *m6 = validate_err(&c);
        tap_ok(m6 && strstr(m6, "app_id"), "validate: empty app_id refused");
        free(c.keys[0].app_id);
        c.keys[0].app_id = xstrdup("app");
        _cleanup_free_ char *m7 = validate_err(&c);
        tap_ok(!m7, "validate: a 16-character key is accepted (%s)", m7 ? m7 : "ok");
        c.token = xstrdup("0123456789abcdef");
        _cleanup_free_ char *m8 = validate_err(&c);
        tap_ok(m8 && strstr(m8, "api_keys"), "validate: a key equal to the admin token refused");
        ab_config_release(&c);

        /* The file-level rule and validate together: a public listen from the file. */
        _cleanup_free_ char *p = write_conf("listen: 0.0.0.0:8080\n");
        ab_config_default(&c);
        TAP_IS_INT(ab_config_load_file(&c, p, NULL), 0, "public listen loads (token may follow)");
        _cleanup_free_ char *m9 = validate_err(&c);
        tap_ok(m9 && strstr(m9, "AGENTBOX_TOKEN"), "but does not validate without a token");
        setenv("AGENTBOX_TOKEN", "now-there-is-one", 1);
        TAP_IS_INT(ab_config_load_env(&c, NULL), 0, "token from the environment");
        unsetenv("AGENTBOX_TOKEN");
        _cleanup_free_ char *m10 = validate_err(&c);
        tap_ok(!m10, "then it validates (%s)", m10 ? m10 : "ok");
        ab_config_release(&c);
}

static void test_tools(void)
{
        _cleanup_free_ char *path = write_conf("tools:\n"
                                               "  bash_output_max: 1000\n"
                                               "  read_file_max: 2000\n"
                                               "  ls_output_max: 3000\n"
                                               "  write_file_max: 4K\n"
                                               "  bash_timeout: 2m\n"
                                               "  shell_max_lines: 50\n"
                                               "  shell_max_bytes: 8K\n"
                                               "  grep_file_max: 2M\n");
        ab_config c;
        ab_config_default(&c);
        ab_err *e = NULL;
        tap_ok(ab_config_load_file(&c, path, &e) == 0, "a tools: section loads");
        ab_err_free(&e);
        TAP_IS_INT(c.tools.bash_output_max, 1000, "tools.bash_output_max");
        TAP_IS_INT(c.tools.read_file_max, 2000, "tools.read_file_max");
        TAP_IS_INT(c.tools.ls_output_max, 3000, "tools.ls_output_max");
        TAP_IS_INT(c.tools.write_file_max, 4096, "tools.write_file_max (a size)");
        TAP_IS_INT(c.tools.bash_timeout_s, 120, "tools.bash_timeout (a duration)");
        TAP_IS_INT(c.tools.shell_max_lines, 50, "tools.shell_max_lines");
        TAP_IS_INT(c.tools.shell_max_bytes, 8192, "tools.shell_max_bytes");
        TAP_IS_INT(c.tools.grep_file_max, 2 * 1024 * 1024, "tools.grep_file_max");
        ab_config_release(&c);
        refused("tools:\n  bash_output_max: 0\n", "tools.bash_output_max 0",
                "tools.bash_output_max", "line 2");
        refused("tools:\n  bash_timeout: 0s\n", "tools.bash_timeout 0", "tools.bash_timeout", NULL);
        refused("tools:\n  bash_out: 5\n", "an unknown tools key", "tools.bash_out", "unknown");
}

static void test_llm(void)
{
        _cleanup_free_ char *keyfile = write_conf("sk-from-file\nsecond line\n");
        _cleanup_free_ char *text = xasprintf("llm:\n"
                                              "  base_url: http://127.0.0.1:9/v1\n"
                                              "  api_key: sk-inline\n"
                                              "  model: m1\n"
                                              "  max_steps: 7\n"
                                              "  max_tokens: 100\n"
                                              "  temperature: 0.5\n"
                                              "  timeout: 90s\n"
                                              "  apps:\n"
                                              "    app2:\n"
                                              "      model: m2\n"
                                              "      api_key_file: %s\n"
                                              "      max_steps: 3\n",
                                              keyfile);
        _cleanup_free_ char *path = write_conf(text);
        ab_config c;
        ab_config_default(&c);
        TAP_IS_INT(c.llm.max_steps, 20, "llm.max_steps defaults to 20");
        TAP_IS_INT(c.llm.timeout_ms, 600000, "llm.timeout defaults to 10 minutes");
        tap_ok(!c.llm.base_url && c.llm.temperature < 0, "no model and no temperature by default");
        ab_err *e = NULL;
        tap_ok(ab_config_load_file(&c, path, &e) == 0, "an llm: section loads");
        if (e)
                tap_diag("%s", e->msg);
        ab_err_free(&e);
        ab_config_llm l;
        ab_config_llm_for(&c, "app1", &l);
        tap_ok(l.base_url && !strcmp(l.base_url, "http://127.0.0.1:9/v1") &&
                   !strcmp(l.api_key, "sk-inline") && !strcmp(l.model, "m1") && l.max_steps == 7 &&
                   l.max_tokens == 100 && l.temperature == 0.5 && l.timeout_ms == 90000,
               "an app without an override gets the server's settings");
        ab_config_llm_for(&c, "app2", &l);
        tap_ok(!strcmp(l.model, "m2") && !strcmp(l.api_key, "sk-from-file") && l.max_steps == 3 &&
                   l.max_tokens == 100 && !strcmp(l.base_url, "http://127.0.0.1:9/v1"),
               "app2's override replaces only what it names; api_key_file's first line");
        ab_config_llm_for(&c, NULL, &l);
        tap_ok(!strcmp(l.model, "m1"), "the admin gets the server's settings");
        ab_config copy;
        ab_config_default(&copy);
        ab_config_release(&copy);
        ab_config_release(&c);
        refused("llm:\n  base_url: ftp://x\n", "an llm.base_url that is not http", "llm.base_url",
                "line 2");
        refused("llm:\n  max_steps: 0\n", "llm.max_steps 0", "llm.max_steps", "1..1000");
        refused("llm:\n  temperature: 3\n", "llm.temperature 3", "llm.temperature", NULL);
        refused("llm:\n  api_key_file: /nonexistent/key\n", "a missing api_key_file",
                "llm.api_key_file", "/nonexistent/key");
        refused("llm:\n  modle: x\n", "an unknown llm key", "llm.modle", "unknown");
        refused("llm:\n  apps:\n    a:\n      apps: {}\n", "apps inside an app's override",
                "llm.apps.a.apps", "unknown");
        ab_config_default(&c);
        setenv("AGENTBOX_LLM_BASE_URL", "http://127.0.0.1:7/v1", 1);
        setenv("AGENTBOX_LLM_API_KEY", "sk-env", 1);
        setenv("AGENTBOX_LLM_MODEL", "m-env", 1);
        tap_ok(ab_config_load_env(&c, &e) == 0 && c.llm.base_url &&
                   !strcmp(c.llm.base_url, "http://127.0.0.1:7/v1") &&
                   !strcmp(c.llm.api_key, "sk-env") && !strcmp(c.llm.model, "m-env"),
               "AGENTBOX_LLM_BASE_URL, _API_KEY and _MODEL set llm");
        ab_err_free(&e);
        setenv("AGENTBOX_LLM_BASE_URL", "gopher://x", 1);
        tap_ok(ab_config_load_env(&c, &e) < 0 && e && strstr(e->msg, "AGENTBOX_LLM_BASE_URL"),
               "a bad AGENTBOX_LLM_BASE_URL is refused, named");
        ab_err_free(&e);
        unsetenv("AGENTBOX_LLM_BASE_URL");
        unsetenv("AGENTBOX_LLM_API_KEY");
        unsetenv("AGENTBOX_LLM_MODEL");
        ab_config_release(&c);
        _cleanup_free_ char *m = load_err("llm:\n  api_key: [sk-secret-list]\n");
        tap_ok(m && !strstr(m, "sk-secret"), "a bad api_key's message does not show it (%s)",
               m ? m : "accepted");
}

static void test_quotas(void)
{
        ab_config c;
        ab_config_default(&c);
        tap_ok(c.quotas.max_boxes == 0 && c.quotas.exec_rate == 0 && c.n_app_quotas == 0,
               "no quotas by default");
        tap_ok(c.disk_overcommit_ratio == 10 && c.disk_reserve == 256u * 1024 * 1024 &&
                   c.disk_watch_interval_ms == 1000,
               "disk defaults: ratio 10, reserve 256 MiB, guard every second");
        ab_config_release(&c);
        _cleanup_free_ char *path = write_conf("quotas:\n"
                                               "  max_boxes: 100\n"
                                               "  max_running: 20\n"
                                               "  max_disk: 2G\n"
                                               "  max_execs: 16\n"
                                               "  exec_rate: 2.5\n"
                                               "  apps:\n"
                                               "    app1: {max_boxes: 5, exec_burst: 7}\n"
                                               "    app2:\n"
                                               "disk_overcommit_ratio: 1.5\n"
                                               "disk_reserve: 1G\n"
                                               "disk_watch_interval: 250ms\n");
        ab_config_default(&c);
        ab_err *e = NULL;
        tap_ok(ab_config_load_file(&c, path, &e) == 0 && ab_config_validate(&c, &e) == 0,
               "a quotas: section loads");
        ab_err_free(&e);
        TAP_IS_INT(c.quotas.max_boxes, 100, "quotas.max_boxes");
        TAP_IS_INT(c.quotas.max_running, 20, "quotas.max_running");
        TAP_IS_INT(c.quotas.max_disk_mib, 2048, "quotas.max_disk (a size) in MiB");
        TAP_IS_INT(c.quotas.max_execs, 16, "quotas.max_execs");
        tap_ok(c.quotas.exec_rate == 2.5, "quotas.exec_rate");
        TAP_IS_INT(c.n_app_quotas, 2, "two apps");
        tap_ok(c.n_app_quotas == 2 && !strcmp(c.app_quotas[0].app_id, "app1") &&
                   c.app_quotas[0].q.max_boxes == 5 && c.app_quotas[0].q.exec_burst == 7 &&
                   c.app_quotas[0].q.max_running == AB_QUOTA_INHERIT,
               "app1 overrides max_boxes and exec_burst only");
        tap_ok(c.n_app_quotas == 2 && ab_quota_is_unset(&c.app_quotas[1].q),
               "app2 with no value overrides nothing");
        tap_ok(c.disk_overcommit_ratio == 1.5 && c.disk_reserve == 1024u * 1024 * 1024 &&
                   c.disk_watch_interval_ms == 250,
               "disk settings");
        tap_ok(ab_config_load_env(&c, &e) == 0 && c.n_app_quotas == 2 &&
                   !strcmp(c.app_quotas[1].app_id, "app2"),
               "the apps' quotas survive the environment's copy of the config");
        ab_err_free(&e);
        ab_config_release(&c);
        refused("quotas:\n  max_boxes: -1\n", "a negative quota", "quotas.max_boxes", "line 2");
        refused("quotas:\n  max_boxez: 1\n", "an unknown quota", "quotas.max_boxez", "unknown");
        refused("quotas:\n  apps:\n    a1: {exec_rate: fast}\n", "a bad rate of an app",
                "quotas.apps.a1.exec_rate", "line 3");
        refused("quotas:\n  apps:\n    a1: {apps: {}}\n", "apps inside an app",
                "quotas.apps.a1.apps", NULL);
        refused("quotas:\n  apps:\n    a1: {max_boxes: 1}\n    a1: {max_boxes: 2}\n",
                "an app given twice", "a1", "twice");
        refused("disk_overcommit_ratio: -2\n", "a negative ratio", "disk_overcommit_ratio", NULL);
        refused("quotas:\n  max_limits: {memory: lots}\n", "a bad memory ceiling",
                "quotas.max_limits.memory", "line 2");
        refused("quotas:\n  max_limits: {gpus: 1}\n", "an unknown ceiling",
                "quotas.max_limits.gpus", "unknown");
        refused("quotas:\n  apps:\n    a1: {allowed_network: [internet]}\n",
                "an unknown network mode of an app", "quotas.apps.a1.allowed_network", "internet");
        refused("quotas:\n  allowed_network: full\n", "allowed_network not a list",
                "quotas.allowed_network", "list");
}

static void test_ceilings(void)
{
        ab_config c;
        ab_config_default(&c);
        tap_ok(c.quotas.max_limits.cpus == AB_QUOTA_INHERIT &&
                   c.quotas.max_limits.memory_mib == AB_QUOTA_INHERIT &&
                   c.quotas.max_limits.pids == AB_QUOTA_INHERIT &&
                   c.quotas.max_limits.disk_mib == AB_QUOTA_INHERIT,
               "ceilings default to auto (fit the host)");
        TAP_IS_INT(c.quotas.allowed_network, AB_QUOTA_NET_NONE | AB_QUOTA_NET_ALLOWLIST,
                   "apps get none and allowlist by default, not full");
        ab_err *e = NULL;
        tap_ok(ab_config_validate(&c, &e) == 0, "the defaults validate");
        ab_err_free(&e);
        tap_ok(c.tmp_max == 4ull << 30 && c.tmp_max >= c.max_upload,
               "tmp_max: 4 GiB by default, at least max_upload");
        c.tmp_max = c.max_upload - 1;
        _cleanup_free_ char *m = validate_err(&c);
        tap_ok(m && strstr(m, "tmp_max") && strstr(m, "max_upload"),
               "a tmp_max below max_upload is refused, naming both");
        c.tmp_max = c.max_upload;
        c.quotas.max_limits.memory_mib = (int64_t)c.limits.memory_mib - 1;
        _cleanup_free_ char *m2 = validate_err(&c);
        tap_ok(m2 && strstr(m2, "max_limits"),
               "a server ceiling below the default limits is refused, naming max_limits");
        ab_config_release(&c);
        _cleanup_free_ char *path = write_conf("quotas:\n"
                                               "  max_limits: {cpus: 4, memory: 8G, pids: 2048,"
                                               " disk: auto}\n"
                                               "  allowed_network: [none]\n"
                                               "  apps:\n"
                                               "    big:\n"
                                               "      max_limits: {memory: 16G, cpus: auto}\n"
                                               "      allowed_network: [allowlist, full]\n");
        ab_config_default(&c);
        tap_ok(ab_config_load_file(&c, path, &e) == 0 && ab_config_validate(&c, &e) == 0,
               "max_limits and allowed_network load");
        ab_err_free(&e);
        tap_ok(c.quotas.max_limits.cpus == 4 && c.quotas.max_limits.memory_mib == 8192 &&
                   c.quotas.max_limits.pids == 2048 &&
                   c.quotas.max_limits.disk_mib == AB_QUOTA_INHERIT,
               "the server's ceilings (memory a size in MiB, disk auto)");
        TAP_IS_INT(c.quotas.allowed_network, AB_QUOTA_NET_NONE, "allowed_network: [none]");
        tap_ok(c.n_app_quotas == 1 && c.app_quotas[0].q.max_limits.memory_mib == 16384 &&
                   c.app_quotas[0].q.max_limits.cpus == AB_QUOTA_INHERIT &&
                   c.app_quotas[0].q.max_limits.pids == AB_QUOTA_INHERIT &&
                   c.app_quotas[0].q.allowed_network == AB_QUOTA_NET_ALL,
               "an app's own ceilings and network modes (none always among them)");
        ab_config_release(&c);
}

/* app_registries and app_registries_loopback: where API keys may pull from. */
static void test_app_registries(void)
{
        ab_config c;
        ab_config_default(&c);
        tap_ok(!c.app_registries && !c.app_registries_loopback,
               "app_registries defaults to unset (the image store's public list), loopback off");
        _cleanup_free_ char *p = write_conf("app_registries: [ghcr.io, \"*.example.com\", "
                                            "\"reg.example.com:5000\"]\n"
                                            "app_registries_loopback: true\n");
        ab_err *e = NULL;
        tap_ok(ab_config_load_file(&c, p, &e) == 0, "app_registries loads (%s)", e ? e->msg : "ok");
        ab_err_free(&e);
        tap_ok(c.n_app_registries == 3 && c.app_registries && !c.app_registries[3] &&
                   !strcmp(c.app_registries[1], "*.example.com") && c.app_registries_loopback,
               "... three hosts, NULL-terminated, and loopback on");
        ab_config_release(&c);
        ab_config_default(&c);
        _cleanup_free_ char *q = write_conf("app_registries: []\n");
        tap_ok(ab_config_load_file(&c, q, &e) == 0 && c.app_registries && !c.app_registries[0],
               "app_registries: [] is an empty list (no registry), not unset");
        ab_err_free(&e);
        ab_config_release(&c);
        refused("app_registries: ghcr.io\n", "app_registries not a list", "app_registries", NULL);
        refused("app_registries: [\"bad host\"]\n", "a registry with a space", "app_registries",
                "bad host");
        refused("app_registries: [\"*.\"]\n", "a bare *.", "app_registries", NULL);
        refused("app_registries: [\"a/b\"]\n", "a registry with a path", "app_registries", NULL);
}

/* fleet: a section of its own; validated as a whole (docs/fleet.md). */
static void test_fleet(void)
{
        ab_config c;
        ab_config_default(&c);
        tap_ok(!c.fleet.node && c.fleet.heartbeat_ms == 2000 && c.fleet.down_after_ms == 10000,
               "no fleet by default; heartbeat 2s, down_after 10s");
        _cleanup_free_ char *vm = validate_err(&c);
        tap_ok(!vm, "the default validates (no fleet needs no PostgreSQL)");
        _cleanup_free_ char *p =
            write_conf("store: postgres://u@db/agentbox\nfleet:\n  node: n-1.a_b\n"
                       "  url: http://10.0.0.1:8080\n  secret_file: /etc/s\n  heartbeat: 500ms\n"
                       "  down_after: 3s\n  placement: local\n");
        ab_err *e = NULL;
        tap_ok(ab_config_load_file(&c, p, &e) == 0 && ab_config_validate(&c, &e) == 0,
               "a fleet section loads and validates (%s)", e ? e->msg : "ok");
        ab_err_free(&e);
        TAP_IS_STR(c.fleet.node, "n-1.a_b", "fleet.node");
        TAP_IS_STR(c.fleet.url, "http://10.0.0.1:8080", "fleet.url");
        TAP_IS_STR(c.fleet.secret_file, "/etc/s", "fleet.secret_file");
        TAP_IS_STR(c.fleet.placement, "local", "fleet.placement");
        tap_ok(c.fleet.heartbeat_ms == 500 && c.fleet.down_after_ms == 3000,
               "fleet.heartbeat and down_after");
        setenv("AGENTBOX_FLEET_NODE", "n9", 1);
        tap_ok(ab_config_load_env(&c, &e) == 0, "the environment loads");
        ab_err_free(&e);
        TAP_IS_STR(c.fleet.node, "n9", "AGENTBOX_FLEET_NODE overrides the file");
        unsetenv("AGENTBOX_FLEET_NODE");
        static const struct {
                const char *text, *why;
        } bad[] = {
            {"fleet:\n  node: n1\n  url: http://h:1\n  secret_file: /s\n", "postgres"},
            {"store: postgres://db/x\nfleet:\n  node: n1\n  secret_file: /s\n", "url"},
            {"store: postgres://db/x\nfleet:\n  node: n1\n  url: http://h:1\n", "secret_file"},
            {"store: postgres://db/x\nfleet:\n  node: \"n 1\"\n  url: http://h:1\n"
             "  secret_file: /s\n",
             "not a node id"},
            {"store: postgres://db/x\nfleet:\n  node: n1\n  url: https://h:1\n"
             "  secret_file: /s\n",
             "plain http"},
            {"store: postgres://db/x\nfleet:\n  node: n1\n  url: http://h:1\n"
             "  secret_file: /s\n  placement: far\n",
             "placement"},
            {"store: postgres://db/x\nfleet:\n  node: n1\n  url: http://h:1\n"
             "  secret_file: /s\n  heartbeat: 5s\n  down_after: 6s\n",
             "twice"},
            {"fleet:\n  url: http://h:1\n", "node"},
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                ab_config b;
                ab_config_default(&b);
                _cleanup_free_ char *bp = write_conf(bad[i].text);
                ab_err *be = NULL;
                int r = ab_config_load_file(&b, bp, &be);
                _cleanup_free_ char *m = r < 0 ? xstrdup(be->msg) : validate_err(&b);
                ab_err_free(&be);
                tap_ok(m && strstr(m, "fleet") && strstr(m, bad[i].why),
                       "bad fleet settings refused, naming '%s'", bad[i].why);
                if (!(m && strstr(m, bad[i].why)))
                        tap_diag("  message: %s", m ? m : "(accepted)");
                ab_config_release(&b);
        }
        refused("fleet:\n  nodes: n1\n", "an unknown fleet key", "fleet.nodes", "unknown");
        refused("fleet.node: n1\n", "a dotted top-level key", "fleet.node", "unknown");
        ab_config_release(&c);
}

int main(void)
{
        /* meson sets AGENTBOX_INIT for other tests; start from a clean slate. */
        unsetenv("AGENTBOX_INIT");
        if (!mkdtemp(dir))
                tap_skip_all("mkdtemp failed");
        test_defaults();
        test_full_file();
        test_bad_values();
        test_ports();
        test_allowed_hosts();
        test_backend();
        test_unknown_keys();
        test_env();
        test_validate();
        test_tools();
        test_quotas();
        test_ceilings();
        test_app_registries();
        test_llm();
        test_fleet();
        DIR *d = opendir(dir);
        for (struct dirent *de; d && (de = readdir(d));)
                if (de->d_name[0] != '.')
                        unlinkat(dirfd(d), de->d_name, 0);
        if (d)
                closedir(d);
        rmdir(dir);
        return tap_done();
}

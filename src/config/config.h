/* config.h - the server's settings: defaults, then a YAML config file
 * (--config FILE), then environment variables, then command-line flags, each
 * overriding the one before. */
#ifndef AB_CONFIG_H
#define AB_CONFIG_H

#include "base/err.h"
#include "base/limits.h"
#include "base/quota.h"
#include "tools/tools.h"
#include <stdbool.h>
#include <stdint.h>

typedef struct ab_config_key {
        char *key; /* the bearer secret */
        char *app_id;
} ab_config_key;

/* An image registry's settings (config: registries: [{host, username,
 * password, insecure}]). */
typedef struct ab_config_registry {
        char *host;     /* as in an image reference: "docker.io", "localhost:5000" */
        char *username; /* or NULL */
        char *password; /* or NULL */
        bool insecure;  /* plain HTTP allowed (loopback registries always are) */
} ab_config_registry;

/* The model of the agent loop (POST /api/chat; config: llm: {base_url,
 * api_key or api_key_file, model, max_steps, max_tokens, temperature,
 * timeout, apps: {APP: {...}}}). Unset fields (NULL, < 0) of an app's
 * override take the server's. api_key_file is read when the config loads
 * (its first line); the key is never printed. */
typedef struct ab_config_llm {
        char *base_url;     /* an OpenAI-compatible API ("http://host/v1"); NULL = no chat */
        char *api_key;      /* sent as "Authorization: Bearer KEY", or NULL */
        char *model;        /* the "model" of each request */
        int64_t max_steps;  /* model calls per message; default 20 */
        int64_t max_tokens; /* the request's max_tokens; 0 = not sent (default) */
        double temperature; /* < 0 = not sent (default) */
        int64_t timeout_ms; /* one message's deadline, every step included; default 10 min */
} ab_config_llm;

typedef struct ab_config_app_llm {
        char *app_id;
        ab_config_llm llm;
} ab_config_app_llm;
/* Several servers as one service on a shared PostgreSQL store (config:
 * fleet: {node, url, secret_file, heartbeat, down_after}; docs/fleet.md).
 * Off while node is NULL. */
typedef struct ab_config_fleet {
        char *node;            /* this server's node id (env AGENTBOX_FLEET_NODE) */
        char *url;             /* http(s)://HOST:PORT the other nodes reach it at
                                * (env AGENTBOX_FLEET_URL) */
        char *secret_file;     /* file holding the fleet secret, at least 32 bytes
                                * (env AGENTBOX_FLEET_SECRET_FILE); never logged */
        int64_t heartbeat_ms;  /* how often the node records its heartbeat; default 2 s */
        int64_t down_after_ms; /* a node without a heartbeat this long is down; default 10 s */
        char *placement;       /* where new boxes go: NULL/"spread" = a live node with room,
                                * the best of two sampled; "local" = the node asked */
} ab_config_fleet;

typedef struct ab_config {
        char *listen;    /* HOST:PORT; default "127.0.0.1:8080" (env AGENTBOX_LISTEN) */
        char *data_dir;  /* default "./data" (env AGENTBOX_DATA) */
        char *store_url; /* NULL = SQLite under data_dir (env AGENTBOX_STORE) */
        char *token; /* admin bearer token; NULL/"" = open, loopback only (env AGENTBOX_TOKEN) */
        char *init_path;      /* agentbox-init; NULL = next to the binary (env AGENTBOX_INIT) */
        char *runners_dir;    /* the code runner's runners/ folder; NULL = found from the
                                 binary's place (env AGENTBOX_RUNNERS) */
        ab_limits limits;     /* defaults for new boxes (config: limits: {cpus, memory, pids, disk,
                                 timeout}) */
        int64_t idle_pause_s; /* default 60; 0 disables idle pause */
        int64_t idle_stop_s;  /* default 300; 0 disables idle stop */
        /* paused boxes are stopped while MemAvailable is below this percentage
         * of MemTotal; default 10; 0 = never */
        double memory_pressure_pct;
        int64_t ttl_s;              /* default TTL of new boxes; 0 = none */
        int64_t pool_size;          /* warm pool target; default 0 */
        int64_t max_running;        /* cap on running boxes (LRU stop); 0 = no cap */
        int64_t reaper_interval_ms; /* how often idle/TTL/LRU/pool jobs run; default 5000 */
        int64_t sample_interval_ms; /* resource samples on /v1/events; default 10000; 0 = off */
        double alert_memory_pct;    /* alert thresholds in percent of the limit; 0 = off */
        double alert_cpu_pct;       /* percent of the cpu limit over the last sample */
        double alert_disk_pct;
        char *webhook_url;       /* alerts are POSTed here when set */
        uint64_t max_body;       /* largest JSON request body; default 1 MiB */
        uint64_t max_upload;     /* largest PUT file body; default 1 GiB */
        uint64_t tmp_max;        /* bytes of uploads spooled in DATA/tmp at once, over all
                                  * requests (503 past it); default 4 GiB, >= max_upload */
        int64_t max_connections; /* open HTTP connections; default 10000 */
        int64_t max_connections_per_address; /* from one client address; default 256 */
        int64_t head_timeout_ms; /* a request head must be complete in this time; default 10 s */
        int64_t max_streams;     /* long-lived streams (SSE, exec streams, terminals); 1000 */
        int64_t max_streams_per_address; /* ... from one client address; default 128 */
        int64_t max_requests;            /* requests handled at once (worker threads); 512 */
        /* Ports of boxes by host name: a request whose Host is PORT-ID.DOMAIN
         * goes to that port of box ID (docs/api.md, "Ports"); NULL = off. */
        char *ports_domain;
        char *deerflow_prefix;    /* DeerFlow's front's path prefix, or NULL = "deerflow"
                                   * (env AGENTBOX_DEERFLOW_PREFIX; docs/compat-deerflow.md) */
        int64_t ports_timeout_ms; /* a box's server must answer a proxied request's head
                                   * in this time (504 after); default 60 s */
        /* egress proxy tunnels of all the boxes of one app at once; default 1024 */
        int64_t network_proxy_max_per_app;
        char *network_hosts_file; /* names the egress proxy resolves before DNS (hosts format) */
        char *network_subnet;     /* full mode's IPv4 range; NULL = 10.88.0.0/16 */
        bool network_full;        /* full network mode allowed; default true */
        ab_tool_limits tools;     /* agent tool limits (config: tools: {...}); 0 = default */
        ab_config_key *keys; /* API keys scoped to an app (config: api_keys: [{key, app_id}]) */
        size_t n_keys;
        /* Per-app quotas (config: quotas: {max_boxes, ..., apps: {APP: {...}}}):
         * the default of every app (0 = no limit, the default) and overrides. */
        ab_quota quotas;
        ab_app_quota *app_quotas;
        size_t n_app_quotas;
        /* Disk admission: a create is refused when the space boxes were promised
         * but do not use yet, plus the new box's, passes this many times the data
         * folder's free space; default 10; 0 = off. */
        double disk_overcommit_ratio;
        uint64_t disk_reserve;          /* free space boxes may never take; default 256 MiB */
        int64_t disk_watch_interval_ms; /* full-disk guard's period; default 1000; 0 = off */
        ab_config_registry *registries; /* image registries' credentials and HTTP permission */
        size_t n_registries;
        uint64_t image_max_layer; /* most bytes one image layer may unpack to; default 16 GiB */
        /* Registries pulls made with an API key may use (config:
         * app_registries: [HOST, ...], "*.domain" for subdomains), NULL-terminated;
         * NULL (not set) = the image store's default public registries, empty = none. */
        char **app_registries;
        size_t n_app_registries;
        bool app_registries_loopback; /* API keys may pull from loopback too; default false */
        /* Size of the skills folder's own disk (DATA/skills.img) when it is
         * made; an existing one keeps its size. Default 1 GiB. */
        uint64_t skills_disk;
        /* Host folders boxes may mount directories of (config:
         * host_mount_prefixes: [DIR, ...], absolute); none = host mounts refused. */
        char **host_mount_prefixes; /* NULL-terminated, or NULL */
        size_t n_host_mount_prefixes;
        /* Host names (or addresses, with ":PORT" to name one port only) a
         * server without a token answers besides the loopback ones (config:
         * allowed_hosts: [NAME, ...]); every other Host is refused (DNS
         * rebinding). NULL-terminated, or NULL. */
        char **allowed_hosts;
        size_t n_allowed_hosts;
        /* The backend of boxes created without "backend": "native" (default)
         * "docker" or "mock" (env AGENTBOX_BACKEND, --backend). The Docker backend is
         * open when it is the default or docker_host is set. */
        char *backend;
        char *docker_host;    /* DOCKER_HOST form, "unix:///run/docker.sock"; NULL =
                               * $DOCKER_HOST, else /var/run/docker.sock (env
                               * AGENTBOX_DOCKER_HOST) */
        char *docker_runtime; /* OCI runtime of Docker boxes ("runsc"); NULL = the engine's */
        char *docker_image;   /* image of Docker boxes created without one */
        /* The mock backend (backend.h, ab_mock_open): its expectations file
         * and calls log (env AGENTBOX_MOCK_EXPECT, AGENTBOX_MOCK_LOG; the log
         * defaults to DATA/mock-calls.jsonl). With backend "mock" it is the
         * only backend (no root needed); with another default and
         * mock_expect set it is open beside it, for boxes created with
         * "backend": "mock". */
        char *mock_expect;
        char *mock_log;
        ab_config_llm llm;          /* the agent loop's model */
        ab_config_app_llm *app_llm; /* per-app overrides */
        size_t n_app_llm;
        ab_config_fleet fleet;
        /* The kubernetes backend's settings (config: kubernetes: {...},
         * docs/kubernetes.md), checked at load and kept as JSON text for
         * ab_k8s_open; NULL = none (env AGENTBOX_KUBERNETES: the section
         * as a JSON object). The backend is open when it is the default or
         * this is set. */
        char *kubernetes;
} ab_config;

/* The model settings of app (NULL: the admin's = the server's): the app's
 * override over the server's, fields borrowed from c. */
void ab_config_llm_for(const ab_config *c, const char *app, ab_config_llm *out);

/* Fills *c with the defaults. */
void ab_config_default(ab_config *c);
/* Applies the YAML file at path over *c. Unknown keys and bad values are
 * AB_E_INVALID naming the key (and the line). */
int ab_config_load_file(ab_config *c, const char *path, ab_err **err);
/* Applies AGENTBOX_* environment variables over *c. */
int ab_config_load_env(ab_config *c, ab_err **err);
/* Checks the whole configuration (listen address parses, non-loopback listen
 * needs a token, limits valid, ...). */
int ab_config_validate(const ab_config *c, ab_err **err);
/* Frees what *c owns and zeroes it. */
void ab_config_release(ab_config *c);

#endif

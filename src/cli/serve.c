/* agentbox serve: the sandbox service. Wires the pieces together (config,
 * backend, store, events, metrics, webhook, manager, HTTP server), then waits
 * for SIGINT/SIGTERM. Boxes keep running when the server stops; a restart
 * (even after kill -9) finds them again. The pieces without the HTTP server
 * (cli_service_open) also serve `agentbox mcp`. */
#include "kit/server.h"
#include "fronts/aio/aio.h"
#include "fronts/e2b/e2b.h"
#include "fronts/opensandbox/opensandbox.h"
#include "fronts/sessions/sessions.h"
#include "rest/rest.h"
#include "runners/runner.h"
#include "cli/cli.h"
#include "base/selfpath.h"
#include "net/net.h"
#include "base/log.h"
#include "fleet/fleet.h"

#include <fcntl.h>

#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>

static const char *serve_usage =
    "Usage: agentbox serve [--listen HOST:PORT] [--data DIR] [--config FILE] [--store URL]\n"
    "                      [--backend native|docker|mock|kubernetes]\n"
    "\n"
    "Runs the sandbox service: the REST API of docs/api.md, server-sent events\n"
    "and Prometheus metrics. Boxes live on after the server stops; a restart\n"
    "finds them again.\n"
    "\n"
    "Options (each overrides the environment, which overrides the config file):\n"
    "  --listen HOST:PORT  address to listen on (env AGENTBOX_LISTEN, default 127.0.0.1:8080)\n"
    "  --data DIR          data folder: boxes, database, caches (env AGENTBOX_DATA, default "
    "./data)\n"
    "  --config FILE       YAML settings: idle_pause, idle_stop, memory_pressure_pct,\n"
    "                      pool_size, max_running, ttl, limits, api_keys, quotas, alert\n"
    "                      thresholds, disk_overcommit_ratio, disk_reserve, tmp_max,\n"
    "                      webhook_url, network_full, network_subnet, network_hosts_file,\n"
    "                      ... (docs/configuration.md)\n"
    "  --store URL         sqlite:PATH or postgres://USER@HOST:PORT/DB (env AGENTBOX_STORE;\n"
    "                      default SQLite at DATA/agentbox.db)\n"
    "  --backend NAME      where boxes created without \"backend\" run: native (default:\n"
    "                      this kernel's namespaces) or docker (a Docker engine at\n"
    "                      docker_host / $DOCKER_HOST; env AGENTBOX_BACKEND). Setting\n"
    "                      docker_host offers Docker boxes beside native ones\n"
    "                      (docs/backends.md). mock: boxes in memory answering\n"
    "                      commands from mock_expect (AGENTBOX_MOCK_EXPECT), for\n"
    "                      your own tests; needs no root. kubernetes: each box a pod of\n"
    "                      a cluster, set under kubernetes: in the config (or env\n"
    "                      AGENTBOX_KUBERNETES, the section as JSON): kubeconfig (else\n"
    "                      the pod's service account), context, namespace, image,\n"
    "                      init_image (required: scripts/k8s-images.sh), image_pull_policy,\n"
    "                      storage_class, workspace_size, node_selector, tolerations,\n"
    "                      runtime_class, labels, annotations, ready_timeout,\n"
    "                      egress_proxy (docs/kubernetes.md)\n"
    "\n"
    "Environment: AGENTBOX_TOKEN is the admin bearer token. Without it the server\n"
    "is open to everyone on this machine and refuses a non-loopback --listen; it\n"
    "then answers only a Host that is a loopback name or an allowed_hosts entry\n"
    "(config: allowed_hosts: [NAME, ...]), and no other site's pages (Origin,\n"
    "Sec-Fetch-Site; JSON routes refuse text/plain and form bodies).\n"
    "AGENTBOX_LOG=debug|info|warn|error sets the log level (default info).\n"
    "\n"
    "Chat (POST /api/chat): the model is any OpenAI-compatible API, config llm:\n"
    "{base_url, api_key or api_key_file, model, max_steps, max_tokens, temperature,\n"
    "timeout, apps: {APP: {...}}} or env AGENTBOX_LLM_BASE_URL, AGENTBOX_LLM_API_KEY\n"
    "(_FILE), AGENTBOX_LLM_MODEL (docs/configuration.md); without a base_url the\n"
    "chat answers 503.\n"
    "Several servers as one service: with a postgres:// store and fleet: {node, url,\n"
    "secret_file} (AGENTBOX_FLEET_NODE, _URL, _SECRET_FILE) the server is a node of\n"
    "a fleet: any node answers for any box (docs/fleet.md; `agentbox nodes`).\n"
    "\n"
    "Idle boxes: paused after idle_pause (env AGENTBOX_IDLE_PAUSE, default 60s; their\n"
    "processes are kept, frozen, and any use resumes them), stopped after idle_stop\n"
    "(env AGENTBOX_IDLE_STOP, default 5m; files kept), both counted from the last\n"
    "use; 0 turns either off. Paused boxes do not count against max_running and are\n"
    "stopped first, least recently used first, while the host's available memory is\n"
    "below memory_pressure_pct of its total (env AGENTBOX_MEMORY_PRESSURE_PCT,\n"
    "default 10; 0 = never).\n"
    "\n"
    "Boxes' network (docs/api.md#network): none by default; per box, allowlist\n"
    "(egress only through this server's proxy, by host name) or full (veth + NAT,\n"
    "needs iptables; network_full: false turns it off). An app's boxes get only the\n"
    "modes of quotas.allowed_network (default none and allowlist), and every box's\n"
    "limits stay under quotas.max_limits (default: the host's CPUs, RAM, 32768 pids\n"
    "and the data folder's disk); over either, 400 naming the ceiling.\n"
    "\n"
    "Connections: a request head must be complete within head_timeout (env\n"
    "AGENTBOX_HEAD_TIMEOUT, default 10s) or the connection is closed; one client\n"
    "address may hold max_connections_per_address connections (default 256) and\n"
    "max_streams_per_address event or exec streams (default 128); see\n"
    "docs/configuration.md for max_connections, max_streams and max_requests.\n";

static int mkdir_p(const char *dir, mode_t mode)
{
        _cleanup_free_ char *p = xstrdup(dir);
        for (char *s = p + 1; *s; s++) {
                if (*s != '/')
                        continue;
                *s = 0;
                if (mkdir(p, mode) < 0 && errno != EEXIST)
                        return -errno;
                *s = '/';
        }
        if (mkdir(p, mode) < 0 && errno != EEXIST)
                return -errno;
        return 0;
}

static void *watchdog(void *arg)
{
        struct timespec ts = {10, 0};
        nanosleep(&ts, NULL);
        ab_log(AB_LOG_WARN, "requests still running after 10 s; exiting anyway", NULL);
        _exit(0);
        return NULL;
}

int cli_service_parse(int argc, char **argv, const char *cmd, const char *usage, bool with_listen,
                      cli_service_args *a)
{
        for (int i = 1; i < argc; i++) {
                const char *arg = argv[i];
                const char **dst = !strcmp(arg, "--listen") && with_listen ? &a->listen
                                   : !strcmp(arg, "--data")                ? &a->data
                                   : !strcmp(arg, "--config")              ? &a->config
                                   : !strcmp(arg, "--store")               ? &a->store
                                   : !strcmp(arg, "--backend")             ? &a->backend
                                                                           : NULL;
                if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
                        fputs(usage, stdout);
                        return 0;
                }
                if (dst && i + 1 < argc) {
                        *dst = argv[++i];
                        continue;
                }
                const char *eq = strchr(arg, '=');
                if (eq && !strncmp(arg, "--", 2)) {
                        size_t n = (size_t)(eq - arg);
                        dst = !strncmp(arg, "--listen", n) && n == 8 && with_listen ? &a->listen
                              : !strncmp(arg, "--data", n) && n == 6                ? &a->data
                              : !strncmp(arg, "--config", n) && n == 8              ? &a->config
                              : !strncmp(arg, "--store", n) && n == 7               ? &a->store
                              : !strncmp(arg, "--backend", n) && n == 9             ? &a->backend
                                                                                    : NULL;
                        if (dst) {
                                *dst = eq + 1;
                                continue;
                        }
                }
                fprintf(stderr, "agentbox %s: unknown or incomplete option '%s'\n\n%s", cmd, arg,
                        usage);
                return EXIT_USAGE;
        }
        return -1;
}

static void replace(char **dst, const char *v)
{
        if (!v)
                return;
        free(*dst);
        *dst = xstrdup(v);
}

/* The code runner's files (the runners/ folder): runners_dir in the config
 * (or AGENTBOX_RUNNERS), else the source tree's from a build tree
 * (BUILD/../runners), else the installed copy in share/agentbox from
 * bin/agentbox or from libexec/agentbox/agentbox-full, else the build
 * prefix's. NULL when none holds python/runner.py, with *looked naming
 * where it looked. */
static char *find_runtime_dir(const char *given, char **looked)
{
        if (given && *given) {
                _cleanup_free_ char *probe = xasprintf("%s/python/runner.py", given);
                if (access(probe, R_OK) == 0)
                        return xstrdup(given);
                *looked = xasprintf("%s (runners_dir, AGENTBOX_RUNNERS)", probe);
                return NULL;
        }
        static const char *const dirs[] = {"../runners", "../share/agentbox/runners",
                                           "../../share/agentbox/runners",
#ifdef AGENTBOX_DATADIR
                                           AGENTBOX_DATADIR "/runners",
#endif
                                           NULL};
        return ab_find_beside_self(dirs, "python/runner.py", R_OK, looked);
}

/* A SANDBOX_* variable of seed 003 as a number, or def. */
static int64_t env_num(const char *name, int64_t def, ab_err **err, bool *bad)
{
        const char *v = getenv(name);
        if (!v || !*v)
                return def;
        char *end;
        errno = 0;
        long long n = strtoll(v, &end, 10);
        if (errno || *end || n <= 0) {
                ab_err_set(err, AB_E_INVALID, 0, "%s: must be a positive integer, not \"%s\"", name,
                           v);
                *bad = true;
        }
        return n;
}

static int open_runners(cli_service *s, ab_err **err)
{
        bool bad = false;
        _cleanup_free_ char *looked = NULL;
        _cleanup_free_ char *dir = find_runtime_dir(s->cfg.runners_dir, &looked);
        _cleanup_free_ char *missing = NULL;
        if (!dir) {
                missing = xasprintf("the code runner's files were not found: looked at %s (set "
                                    "runners_dir in the config or AGENTBOX_RUNNERS)",
                                    looked);
                ab_log(AB_LOG_WARN, "runner: disabled", "reason", missing, NULL);
        }
        ab_runners_opts ro = {
            .manager = s->mgr,
            .runtime_dir = dir,
            .runtime_missing = missing,
            .timeout_ms = env_num("SANDBOX_TIMEOUT", 0, err, &bad),
            .max_timeout_ms = env_num("SANDBOX_MAX_TIMEOUT", 0, err, &bad),
            .memory_mb = env_num("SANDBOX_MEMORY_MB", 0, err, &bad),
            .max_memory_mb = env_num("SANDBOX_MAX_MEMORY_MB", 0, err, &bad),
            .disk_mb = env_num("SANDBOX_DISK_MB", 0, err, &bad),
            .max_disk_mb = env_num("SANDBOX_MAX_DISK_MB", 0, err, &bad),
            .max_concurrency = (int)env_num("SANDBOX_MAX_CONCURRENCY", 0, err, &bad),
            .max_requests = (int)env_num("SANDBOX_MAX_REQUESTS", 0, err, &bad),
            .warm = (int)env_num("AGENTBOX_RUNNER_WARM", 0, err, &bad),
            .max_runs = (int)env_num("AGENTBOX_RUNNER_MAX_RUNS", 0, err, &bad),
            .idle_s = (int)env_num("AGENTBOX_RUNNER_IDLE_S", 0, err, &bad),
        };
        if (bad)
                return -1;
        const char *tok = getenv("SANDBOX_TOKEN");
        s->srv.sandbox_token = tok && *tok ? xstrdup(tok) : NULL;
        if (ab_runners_new(&ro, &s->srv.runners, err) < 0)
                return -1;
        return 0;
}

int cli_service_open(cli_service *s, const cli_service_args *a, ab_err **err)
{
        memset(s, 0, sizeof(*s));
        ab_config *cfg = &s->cfg;
        ab_config_default(cfg);
        if ((a->config && ab_config_load_file(cfg, a->config, err) < 0) ||
            ab_config_load_env(cfg, err) < 0)
                goto fail;
        replace(&cfg->listen, a->listen);
        replace(&cfg->data_dir, a->data);
        replace(&cfg->store_url, a->store);
        replace(&cfg->backend, a->backend);
        if (ab_config_validate(cfg, err) < 0)
                goto fail;
        signal(SIGPIPE, SIG_IGN);

        int mr = mkdir_p(cfg->data_dir, 0700);
        if (mr < 0) {
                ab_err_set(err, AB_E_UNAVAILABLE, -mr, "cannot create the data folder %s",
                           cfg->data_dir);
                goto fail;
        }
        if ((s->server_lock = cli_server_lock(cfg->data_dir, err)) < 0)
                goto fail;
        ab_native_opts no = {.data_dir = cfg->data_dir,
                             .init_path = cfg->init_path,
                             .keep_spares = true,
                             .watch_host = true,
                             .skills_disk_mib = cfg->skills_disk >> 20};
        if (cli_backend_open(cfg, &no, &s->backend, err) < 0 ||
            ab_store_open(cfg->store_url, cfg->data_dir, &s->store, err) < 0)
                goto fail;
        s->srv.tmp_dir = xasprintf("%s/tmp", cfg->data_dir);
        if ((mr = mkdir_p(s->srv.tmp_dir, 0700)) < 0) {
                ab_err_set(err, AB_E_UNAVAILABLE, -mr, "cannot create %s", s->srv.tmp_dir);
                goto fail;
        }
        if (cli_images_open(cfg, cfg->data_dir, &s->images, err) < 0)
                goto fail;
        s->events = ab_events_new(4096);
        s->metrics = ab_metrics_new();
        if (cfg->webhook_url && *cfg->webhook_url &&
            ab_webhook_new(cfg->webhook_url, 5000, 1024, &s->webhook, err) < 0)
                goto fail;
        ab_net_opts nopts = {.events = s->events,
                             .metrics = s->metrics,
                             .hosts_file = cfg->network_hosts_file,
                             .subnet = cfg->network_subnet,
                             .full_disabled = !cfg->network_full,
                             .proxy_max_per_app = cfg->network_proxy_max_per_app};
        if (ab_net_new(&nopts, &s->net, err) < 0)
                goto fail;
        ab_manager_opts mo = {
            .backend = s->backend,
            .net = s->net,
            .images = s->images,
            .store = s->store,
            .events = s->events,
            .metrics = s->metrics,
            .webhook = s->webhook,
            .limits = cfg->limits,
            .idle_pause_s = cfg->idle_pause_s,
            .idle_stop_s = cfg->idle_stop_s,
            .memory_pressure_pct = cfg->memory_pressure_pct,
            .ttl_s = cfg->ttl_s,
            .pool_size = cfg->pool_size,
            .max_running = cfg->max_running,
            .host_mount_prefixes = (const char *const *)cfg->host_mount_prefixes,
            .n_host_mount_prefixes = cfg->n_host_mount_prefixes,
            .reaper_interval_ms = cfg->reaper_interval_ms,
            .sample_interval_ms = cfg->sample_interval_ms,
            .alert_memory_pct = cfg->alert_memory_pct,
            .alert_cpu_pct = cfg->alert_cpu_pct,
            .alert_disk_pct = cfg->alert_disk_pct,
            .quotas = cfg->quotas,
            .app_quotas = cfg->app_quotas,
            .n_app_quotas = cfg->n_app_quotas,
            .disk_dir = cfg->data_dir,
            .disk_overcommit_ratio = cfg->disk_overcommit_ratio,
            .disk_reserve = cfg->disk_reserve,
            .disk_watch_interval_ms = cfg->disk_watch_interval_ms,
            .node_id = cfg->fleet.node,
        };
        if (ab_manager_open(&mo, &s->mgr, err) < 0)
                goto fail;
        s->srv.cfg = cfg;
        s->srv.mgr = s->mgr;
        s->srv.store = s->store;
        s->srv.events = s->events;
        s->srv.metrics = s->metrics;
        s->srv.backend = s->backend;
        s->srv.images = s->images;
        s->srv.started_ns = ab_now_ns();
        if (open_runners(s, err) < 0)
                goto fail;
        return 0;
fail:
        cli_service_close(s);
        return -1;
}

void cli_service_close(cli_service *s)
{
        ab_fleet_stop(s->srv.fleet);
        ab_runners_free(s->srv.runners);
        free(s->srv.sandbox_token);
        ab_manager_free(s->mgr);
        ab_net_free(s->net);
        if (s->webhook)
                ab_webhook_free(s->webhook);
        if (s->metrics)
                ab_metrics_free(s->metrics);
        if (s->events)
                ab_events_free(s->events);
        if (s->store)
                ab_store_close(s->store);
        if (s->images)
                ab_image_store_free(s->images);
        cli_service_release(s);
        if (s->backend)
                s->backend->ops->free(s->backend);
        if (s->server_lock > 0)
                close(s->server_lock);
        free(s->srv.tmp_dir);
        ab_config_release(&s->cfg);
        memset(s, 0, sizeof(*s));
}

/* The fleet's secret from fleet.secret_file: its first line, at least 32
 * bytes, in a file other users cannot read. Never logged. */
static int read_fleet_secret(const char *path, char **out, ab_err **err)
{
        *out = NULL;
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0)
                return ab_err_set(err, AB_E_INVALID, errno, "fleet.secret_file: cannot read %s",
                                  path);
        if (st.st_mode & 0007)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "fleet.secret_file: %s is readable by every user: chmod o-rwx",
                                  path);
        char buf[1024];
        ssize_t n = ab_read_full(fd, buf, sizeof(buf) - 1);
        if (n < 0)
                return ab_err_set(err, AB_E_INVALID, (int)-n, "fleet.secret_file: cannot read %s",
                                  path);
        buf[n] = 0;
        buf[strcspn(buf, "\r\n")] = 0;
        size_t len = strlen(buf);
        int rc = 0;
        if (len < 32)
                rc = ab_err_set(err, AB_E_INVALID, 0,
                                "fleet.secret_file: the secret in %s must be at least 32 bytes "
                                "(e.g. openssl rand -hex 32)",
                                path);
        else
                *out = xstrdup(buf);
        explicit_bzero(buf, sizeof(buf));
        return rc;
}

/* Joins the fleet when fleet: is set: registers this node and starts its
 * heartbeat (docs/fleet.md). */
static int fleet_join(cli_service *s, ab_err **err)
{
        const ab_config_fleet *fc = &s->cfg.fleet;
        if (!fc->node)
                return 0;
        char *secret = NULL;
        if (read_fleet_secret(fc->secret_file, &secret, err) < 0)
                return -1;
        ab_fleet_opts fo = {.store = s->store,
                            .mgr = s->mgr,
                            .node = fc->node,
                            .url = fc->url,
                            .data_dir = s->cfg.data_dir,
                            .secret = secret,
                            .heartbeat_ms = fc->heartbeat_ms,
                            .down_after_ms = fc->down_after_ms,
                            .events = s->events,
                            .store_url = s->cfg.store_url};
        int rc = ab_fleet_start(&fo, &s->srv.fleet, err);
        explicit_bzero(secret, strlen(secret));
        free(secret);
        return rc;
}

int cli_serve(int argc, char **argv, const char *data_flag)
{
        cli_service_args a = {.data = data_flag};
        int rc = cli_service_parse(argc, argv, "serve", serve_usage, true, &a);
        if (rc >= 0)
                return rc;
        if (!getenv("AGENTBOX_LOG"))
                ab_log_set_level(AB_LOG_INFO);

        /* Signals are taken by sigwait below; block them before any thread starts. */
        sigset_t sigs;
        sigemptyset(&sigs);
        sigaddset(&sigs, SIGINT);
        sigaddset(&sigs, SIGTERM);
        pthread_sigmask(SIG_BLOCK, &sigs, NULL);

        _cleanup_err_ ab_err *e = NULL;
        cli_service svc;
        if (cli_service_open(&svc, &a, &e) < 0) {
                cli_error(e);
                return EXIT_AGENTBOX;
        }
        ab_server *srv = &svc.srv;
        const ab_config *cfg = &svc.cfg;
        if (fleet_join(&svc, &e) < 0) {
                cli_error(e);
                cli_service_close(&svc);
                return EXIT_AGENTBOX;
        }
        /* agentbox's own API, then the fronts (docs/architecture.md) */
        ab_server_add_routes(srv, &ab_rest_routes);
        ab_server_add_routes(srv, &ab_e2b_routes);
        ab_server_add_routes(srv, &ab_osb_routes);
        ab_server_add_routes(srv, &ab_sessions_routes);
        const ab_route_table *aio = ab_aio_routes(cfg->deerflow_prefix, &e);
        if (aio)
                ab_server_add_routes(srv, aio);
        if (!aio || ab_server_start(srv, &e) < 0) {
                cli_error(e);
                cli_service_close(&svc);
                return EXIT_AGENTBOX;
        }
        char port[16], pool[24], idle[24], pause[24];
        snprintf(port, sizeof(port), "%u", srv->http.port);
        snprintf(pool, sizeof(pool), "%" PRId64, cfg->pool_size);
        snprintf(idle, sizeof(idle), "%" PRId64, cfg->idle_stop_s);
        snprintf(pause, sizeof(pause), "%" PRId64, cfg->idle_pause_s);
        ab_log(AB_LOG_INFO, "agentbox serving", "listen", cfg->listen, "port", port, "data",
               cfg->data_dir, "store", ab_store_kind(svc.store), "version", AGENTBOX_VERSION,
               "pool_size", pool, "idle_pause_s", pause, "idle_stop_s", idle, NULL);
        if (!cfg->token || !*cfg->token)
                ab_log(AB_LOG_WARN,
                       "no AGENTBOX_TOKEN: the API is open to every process on this machine "
                       "(loopback only); set AGENTBOX_TOKEN to require a bearer token",
                       NULL);

        int sig = 0;
        while (sigwait(&sigs, &sig) != 0)
                ;
        ab_log(AB_LOG_INFO, "stopping (boxes keep running)", "signal", strsignal(sig), NULL);
        pthread_t wd;
        pthread_create(&wd, NULL, watchdog, NULL);
        pthread_detach(wd);
        ab_server_stop(srv);
        cli_service_close(&svc);
        return 0;
}

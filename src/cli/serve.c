/* agentbox serve: the sandbox service. Wires the pieces together (config,
 * backend, store, events, metrics, webhook, manager, HTTP server), then waits
 * for SIGINT/SIGTERM. Boxes keep running when the server stops; a restart
 * (even after kill -9) finds them again. */
#include "api/server.h"
#include "cli/cli.h"
#include "common/log.h"

#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>

static const char *serve_usage =
    "Usage: agentbox serve [--listen HOST:PORT] [--data DIR] [--config FILE] [--store URL]\n"
    "\n"
    "Runs the sandbox service: the REST API of docs/api.md, server-sent events\n"
    "and Prometheus metrics. Boxes live on after the server stops; a restart\n"
    "finds them again.\n"
    "\n"
    "Options (each overrides the environment, which overrides the config file):\n"
    "  --listen HOST:PORT  address to listen on (env AGENTBOX_LISTEN, default 127.0.0.1:8080)\n"
    "  --data DIR          data folder: boxes, database, caches (env AGENTBOX_DATA, default "
    "./data)\n"
    "  --config FILE       YAML settings: idle_stop, pool_size, max_running, ttl, limits,\n"
    "                      api_keys, alert thresholds, webhook_url, ... (docs/configuration.md)\n"
    "  --store URL         sqlite:PATH or postgres://USER@HOST:PORT/DB (env AGENTBOX_STORE;\n"
    "                      default SQLite at DATA/agentbox.db)\n"
    "\n"
    "Environment: AGENTBOX_TOKEN is the admin bearer token. Without it the server\n"
    "is open to everyone on this machine and refuses a non-loopback --listen.\n"
    "AGENTBOX_LOG=debug|info|warn|error sets the log level (default info).\n";

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

int cli_serve(int argc, char **argv, const char *data_flag)
{
        const char *listen = NULL, *config = NULL, *store = NULL, *data = data_flag;
        for (int i = 1; i < argc; i++) {
                const char *a = argv[i];
                const char **dst = !strcmp(a, "--listen")   ? &listen
                                   : !strcmp(a, "--data")   ? &data
                                   : !strcmp(a, "--config") ? &config
                                   : !strcmp(a, "--store")  ? &store
                                                            : NULL;
                if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
                        fputs(serve_usage, stdout);
                        return 0;
                }
                if (dst && i + 1 < argc) {
                        *dst = argv[++i];
                        continue;
                }
                const char *eq = strchr(a, '=');
                if (eq && !strncmp(a, "--", 2)) {
                        size_t n = (size_t)(eq - a);
                        dst = !strncmp(a, "--listen", n) && n == 8   ? &listen
                              : !strncmp(a, "--data", n) && n == 6   ? &data
                              : !strncmp(a, "--config", n) && n == 8 ? &config
                              : !strncmp(a, "--store", n) && n == 7  ? &store
                                                                     : NULL;
                        if (dst) {
                                *dst = eq + 1;
                                continue;
                        }
                }
                fprintf(stderr, "agentbox serve: unknown or incomplete option '%s'\n\n%s", a,
                        serve_usage);
                return EXIT_USAGE;
        }
        if (!getenv("AGENTBOX_LOG"))
                ab_log_set_level(AB_LOG_INFO);

        _cleanup_err_ ab_err *e = NULL;
        ab_config cfg;
        ab_config_default(&cfg);
        int rc = EXIT_AGENTBOX;
        ab_backend *backend = NULL;
        ab_store *st = NULL;
        ab_events *ev = NULL;
        ab_metrics *metrics = NULL;
        ab_webhook *wh = NULL;
        ab_manager *mgr = NULL;
        ab_server srv = {0};
        if ((config && ab_config_load_file(&cfg, config, &e) < 0) ||
            ab_config_load_env(&cfg, &e) < 0)
                goto fail;
        if (listen) {
                free(cfg.listen);
                cfg.listen = xstrdup(listen);
        }
        if (data) {
                free(cfg.data_dir);
                cfg.data_dir = xstrdup(data);
        }
        if (store) {
                free(cfg.store_url);
                cfg.store_url = xstrdup(store);
        }
        if (ab_config_validate(&cfg, &e) < 0)
                goto fail;

        /* Signals are taken by sigwait below; block them before any thread starts. */
        sigset_t sigs;
        sigemptyset(&sigs);
        sigaddset(&sigs, SIGINT);
        sigaddset(&sigs, SIGTERM);
        pthread_sigmask(SIG_BLOCK, &sigs, NULL);
        signal(SIGPIPE, SIG_IGN);

        int mr = mkdir_p(cfg.data_dir, 0700);
        if (mr < 0) {
                ab_err_set(&e, AB_E_UNAVAILABLE, -mr, "cannot create the data folder %s",
                           cfg.data_dir);
                goto fail;
        }
        ab_native_opts no = {.data_dir = cfg.data_dir, .init_path = cfg.init_path};
        if (ab_native_open(&no, &backend, &e) < 0 ||
            ab_store_open(cfg.store_url, cfg.data_dir, &st, &e) < 0)
                goto fail;
        srv.tmp_dir = xasprintf("%s/tmp", cfg.data_dir);
        if ((mr = mkdir_p(srv.tmp_dir, 0700)) < 0) {
                ab_err_set(&e, AB_E_UNAVAILABLE, -mr, "cannot create %s", srv.tmp_dir);
                goto fail;
        }
        ev = ab_events_new(4096);
        metrics = ab_metrics_new();
        if (cfg.webhook_url && *cfg.webhook_url &&
            ab_webhook_new(cfg.webhook_url, 5000, 1024, &wh, &e) < 0)
                goto fail;
        ab_manager_opts mo = {
            .backend = backend,
            .store = st,
            .events = ev,
            .metrics = metrics,
            .webhook = wh,
            .limits = cfg.limits,
            .idle_stop_s = cfg.idle_stop_s,
            .ttl_s = cfg.ttl_s,
            .pool_size = cfg.pool_size,
            .max_running = cfg.max_running,
            .reaper_interval_ms = cfg.reaper_interval_ms,
            .sample_interval_ms = cfg.sample_interval_ms,
            .alert_memory_pct = cfg.alert_memory_pct,
            .alert_cpu_pct = cfg.alert_cpu_pct,
            .alert_disk_pct = cfg.alert_disk_pct,
        };
        if (ab_manager_open(&mo, &mgr, &e) < 0)
                goto fail;
        srv.cfg = &cfg;
        srv.mgr = mgr;
        srv.store = st;
        srv.events = ev;
        srv.metrics = metrics;
        srv.backend = backend;
        srv.started_ns = ab_now_ns();
        if (ab_server_start(&srv, &e) < 0)
                goto fail;
        char port[16], pool[24], idle[24];
        snprintf(port, sizeof(port), "%u", srv.port);
        snprintf(pool, sizeof(pool), "%" PRId64, cfg.pool_size);
        snprintf(idle, sizeof(idle), "%" PRId64, cfg.idle_stop_s);
        ab_log(AB_LOG_INFO, "agentbox serving", "listen", cfg.listen, "port", port, "data",
               cfg.data_dir, "store", ab_store_kind(st), "version", AGENTBOX_VERSION, "pool_size",
               pool, "idle_stop_s", idle, NULL);
        if (!cfg.token || !*cfg.token)
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
        ab_server_stop(&srv);
        rc = 0;
        goto out;
fail:
        cli_error(e);
        ab_err_free(&e);
out:
        ab_manager_free(mgr);
        if (wh)
                ab_webhook_free(wh);
        if (metrics)
                ab_metrics_free(metrics);
        if (ev)
                ab_events_free(ev);
        if (st)
                ab_store_close(st);
        if (backend)
                backend->ops->free(backend);
        free(srv.tmp_dir);
        ab_config_release(&cfg);
        return rc;
}

/* agentbox: the command line's front door. `agentbox exec` runs here, in a
 * binary that loads only libc, jansson, SQLite and libseccomp.
 * An exec is what people and scripts run in loops, and the dynamic loader
 * spends most of a CLI exec on the ~50 shared libraries of the whole
 * service (libcurl, libpq, libmicrohttpd, libarchive and theirs): ~15 of
 * ~17 ms on the host of docs/benchmarks.md. Every other command (serve, mcp,
 * create, ls, cp, tool, ...), `exec --help` and an exec with a PostgreSQL
 * store, the Docker backend or the mock backend are handed on to
 * agentbox-full, the same command line with every library, by execv with
 * the same arguments (light.c stands in for what those need). */
#include "cli/cli.h"
#include "base/log.h"
#include "base/selfpath.h"

#ifndef AGENTBOX_LIBEXECDIR
#define AGENTBOX_LIBEXECDIR "/usr/local/libexec/agentbox"
#endif

/* agentbox-full: next to this binary (a build tree), else in
 * ../libexec/agentbox from it (installed), else in the build prefix's. NULL
 * when none is there, with *looked naming where it looked. */
static char *find_full(char **looked)
{
        static const char *const dirs[] = {".", "../libexec/agentbox", AGENTBOX_LIBEXECDIR, NULL};
        _cleanup_free_ char *dir = ab_find_beside_self(dirs, "agentbox-full", X_OK, looked);
        return dir ? xasprintf("%s/agentbox-full", dir) : NULL;
}

/* True when argv (the exec verb's) asks for help before the command. */
static bool wants_help(int argc, char **argv)
{
        for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
                if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))
                        return true;
        return false;
}

/* True when the environment's config (cli_backend_open and the store's
 * open read it) needs only what this binary links: a SQLite store and the
 * native backend (not PostgreSQL, Docker, mock or Kubernetes). */
static bool light_enough(void)
{
        const char *store = getenv("AGENTBOX_STORE");
        const char *backend = getenv("AGENTBOX_BACKEND");
        const char *docker = getenv("AGENTBOX_DOCKER_HOST");
        const char *mock = getenv("AGENTBOX_MOCK_EXPECT");
        const char *k8s = getenv("AGENTBOX_KUBERNETES");
        return (!store || !*store || !strncmp(store, "sqlite:", 7)) &&
               (!backend || !*backend || !strcmp(backend, "native")) && (!docker || !*docker) &&
               (!mock || !*mock) && (!k8s || !*k8s);
}

int main(int argc, char **argv)
{
        const char *data = getenv("AGENTBOX_DATA");
        int i = 1;
        for (; i < argc; i++) {
                if (!strcmp(argv[i], "--data") && i + 1 < argc)
                        data = argv[++i];
                else if (!strncmp(argv[i], "--data=", 7))
                        data = argv[i] + 7;
                else
                        break;
        }
        if (i < argc && !strcmp(argv[i], "exec") && light_enough() &&
            !wants_help(argc - i, argv + i)) {
                ab_log_init_from_env();
                return cli_exec(argc - i, argv + i, data);
        }
        _cleanup_free_ char *looked = NULL;
        _cleanup_free_ char *full = find_full(&looked);
        if (!full) {
                fprintf(stderr, "agentbox: agentbox-full not found: looked at %s\n", looked);
                return EXIT_AGENTBOX;
        }
        execv(full, argv);
        fprintf(stderr, "agentbox: cannot run %s: %s\n", full, strerror(errno));
        return EXIT_AGENTBOX;
}

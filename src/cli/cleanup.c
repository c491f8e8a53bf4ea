/* What a server leaves on the host for its data folder, and taking it away:
 * at a clean stop of `agentbox serve` (or `agentbox mcp`) and with
 * `agentbox cleanup` after a server was killed. A server's system boxes
 * (the code runner's) are the server's own: nothing else uses them once it
 * is gone. The skills disk (DATA/skills, a loop mount) is shared by every
 * box: it is unmounted only when no other box runs, is paused or is being
 * made. Users' boxes are never touched (they outlive the server by design).
 *
 * DATA/.server.lock tells whether a server runs on the folder: each server
 * holds a shared flock on it for its life (the kernel drops it when the
 * process dies, kill -9 included); `cleanup` takes it exclusively and
 * refuses when it cannot, and a server that stops releases only when it is
 * the last one (it can take the lock exclusively). */
#include "cli/cli.h"
#include "base/log.h"
#include "core/manager.h"
#include "native/skillsfs.h"

#include <fcntl.h>
#include <getopt.h>
#include <sys/file.h>

#define SERVER_LOCK ".server.lock"

static const char cleanup_usage[] =
    "Usage: agentbox [--data DIR] cleanup\n"
    "\n"
    "Removes what a server that was killed (kill -9, a crash, a power cut) left\n"
    "on this host for the data folder DIR (default ./data, or AGENTBOX_DATA): it\n"
    "stops the server's system boxes (the code runner's: their processes,\n"
    "cgroups and disk mounts go) and, when no box runs, is paused or is being\n"
    "made, unmounts the skills disk DIR/skills (its loop device goes with it).\n"
    "Users' boxes are left as they are. A clean stop of `agentbox serve` does\n"
    "the same by itself. Refuses (exit 125) while a server runs on DIR; the\n"
    "next `agentbox serve` takes everything up again.\n";

int cli_server_lock(const char *data, ab_err **err)
{
        _cleanup_free_ char *path = xasprintf("%s/" SERVER_LOCK, data);
        int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0)
                return ab_err_set(err, AB_E_UNAVAILABLE, errno, "open %s", path);
        while (flock(fd, LOCK_SH) < 0) {
                if (errno != EINTR) {
                        int e = errno;
                        close(fd);
                        return ab_err_set(err, AB_E_UNAVAILABLE, e, "lock %s", path);
                }
        }
        return fd;
}

int cli_data_release(ab_backend *b, const char *data, cli_released *out, ab_err **err)
{
        memset(out, 0, sizeof(*out));
        _cleanup_free_ char *abs = realpath(data, NULL);
        if (!abs)
                return errno == ENOENT ? 0 : ab_err_set(err, AB_E_INTERNAL, errno, "%s", data);
        if (ab_sysboxes_stop(b, &out->sysboxes, &out->boxes_live, err) < 0)
                return -1;
        if (out->boxes_live)
                return 0;
        int r = ab_skillsfs_unmount(abs, err);
        if (r < 0)
                return -1;
        out->skills_unmounted = r > 0;
        return 0;
}

void cli_service_release(cli_service *s)
{
        if (s->server_lock <= 0 || !s->backend)
                return;
        /* Another server on this folder (a second serve, an mcp) still uses them. */
        if (flock(s->server_lock, LOCK_EX | LOCK_NB) < 0)
                return;
        cli_released rel;
        _cleanup_err_ ab_err *e = NULL;
        if (cli_data_release(s->backend, s->cfg.data_dir, &rel, &e) < 0) {
                ab_log(AB_LOG_WARN, "left on the host at stop", "error", e->msg, NULL);
                return;
        }
        if (rel.skills_unmounted)
                ab_log(AB_LOG_INFO, "skills disk unmounted", "folder", s->cfg.data_dir, NULL);
        else if (rel.boxes_live)
                ab_log(AB_LOG_INFO, "skills disk kept mounted: boxes still run", "folder",
                       s->cfg.data_dir, NULL);
}

int cli_cleanup(int argc, char **argv, const char *data)
{
        static const struct option opts[] = {{"help", no_argument, NULL, 'h'}, {0}};
        int c;
        optind = 1;
        while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
                if (c == 'h') {
                        fputs(cleanup_usage, stdout);
                        return 0;
                }
                fputs(cleanup_usage, stderr);
                return EXIT_USAGE;
        }
        if (optind < argc)
                return cli_usage_error("cleanup: unexpected argument '%s'", argv[optind]);
        if (!data || !*data)
                data = "./data";
        _cleanup_err_ ab_err *e = NULL;
        _cleanup_close_ int dfd = open(data, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0) {
                if (errno == ENOENT) {
                        printf("%s: no data folder, nothing to clean up\n", data);
                        return 0;
                }
                ab_err_set(&e, AB_E_INVALID, errno, "data folder %s", data);
                return cli_fail(&e);
        }
        _cleanup_close_ int lock =
            openat(dfd, SERVER_LOCK, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (lock < 0) {
                ab_err_set(&e, AB_E_INTERNAL, errno, "open %s/" SERVER_LOCK, data);
                return cli_fail(&e);
        }
        if (flock(lock, LOCK_EX | LOCK_NB) < 0) {
                ab_err_set(&e, AB_E_CONFLICT, 0,
                           "a server is running on %s: stop it (it cleans up after itself) "
                           "before `agentbox cleanup`",
                           data);
                return cli_fail(&e);
        }
        _cleanup_backend_ ab_backend *b = NULL;
        if (cli_backend_open_env(data, false, &b, &e) < 0)
                return cli_fail(&e);
        cli_released rel;
        if (cli_data_release(b, data, &rel, &e) < 0)
                return cli_fail(&e);
        printf("%s: %zu system box%s stopped; ", data, rel.sysboxes, rel.sysboxes == 1 ? "" : "es");
        if (rel.boxes_live)
                printf("skills disk kept: %zu box%s still run%s\n", rel.boxes_live,
                       rel.boxes_live == 1 ? "" : "es", rel.boxes_live == 1 ? "s" : "");
        else
                printf("skills disk %s\n", rel.skills_unmounted ? "unmounted" : "not mounted");
        return 0;
}

/* probe.c - agentbox-init --image-probe PATH: what the box's image says its
 * commands run as, told by the container runtime itself.
 *
 * On Kubernetes the server cannot read a box image's configuration (the
 * cluster pulls it), so the pod runs this in an init container of the box's
 * image with no user and no working directory of its own: the runtime starts
 * it as the image's User in the image's WorkingDir, as it would start the
 * image's entrypoint. It writes {"workdir"?, "user"?} to PATH (JSON, 0644,
 * through a temporary name and a rename): workdir the directory it started
 * in unless "/" (the runtime's default: an image without WorkingDir),
 * user the image's user as Docker's USER spells it - the passwd name when
 * the uid has one and its primary group is the gid, else "name:gid" or
 * "uid:gid" - unless root. A probe that cannot write says so on stderr and
 * still exits 0: the box then runs with the defaults, never fails to start. */
#include "base/buf.h"
#include "init/init_int.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Appends s as a JSON string. */
static void json_str(ab_buf *b, const char *s)
{
        ab_buf_putc(b, '"');
        for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
                if (*p == '"' || *p == '\\')
                        ab_buf_printf(b, "\\%c", *p);
                else if (*p < 0x20)
                        ab_buf_printf(b, "\\u%04x", *p);
                else
                        ab_buf_putc(b, (char)*p);
        }
        ab_buf_putc(b, '"');
}

/* The user as an image's USER would say it, or NULL for root. */
static char *probe_user(const init_conf *conf)
{
        uid_t uid = getuid();
        gid_t gid = getgid();
        if (uid == 0 && gid == 0)
                return NULL;
        char *name = NULL, *group = NULL;
        init_id_names(conf, uid, gid, &name, &group);
        free(group);
        if (!name)
                return xasprintf("%u:%u", (unsigned)uid, (unsigned)gid);
        init_user u = {0};
        char *why = NULL;
        bool primary = init_user_resolve(conf, name, &u, &why) == 0 && u.uid == uid && u.gid == gid;
        init_user_free(&u);
        free(why);
        char *out = primary ? xstrdup(name) : xasprintf("%s:%u", name, (unsigned)gid);
        free(name);
        return out;
}

int init_image_probe(const char *path)
{
        init_conf conf = {.workdir = "/", .workdir_fd = -1};
        char cwd[4096];
        bool have_cwd = getcwd(cwd, sizeof(cwd)) != NULL && strcmp(cwd, "/") != 0;
        _cleanup_free_ char *user = probe_user(&conf);
        _cleanup_buf_ ab_buf b = {0};
        ab_buf_putc(&b, '{');
        if (have_cwd) {
                ab_buf_puts(&b, "\"workdir\":");
                json_str(&b, cwd);
        }
        if (user) {
                ab_buf_puts(&b, have_cwd ? ",\"user\":" : "\"user\":");
                json_str(&b, user);
        }
        ab_buf_puts(&b, "}\n");
        _cleanup_free_ char *tmp = xasprintf("%s.tmp", path);
        _cleanup_close_ int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0 || ab_write_all(fd, b.p, b.n) < 0 || fchmod(fd, 0644) < 0 ||
            rename(tmp, path) < 0) {
                fprintf(stderr, "agentbox-init: --image-probe %s: %s\n", path, strerror(errno));
                unlink(tmp);
        }
        return 0;
}

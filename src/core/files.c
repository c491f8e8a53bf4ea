/* File doors: every file operation on a box (REST, MCP, the E2B and
 * OpenSandbox fronts) goes through one of these, on a use of the box.
 *
 * The rule (docs/architecture.md "File operations"): a file operation is
 * never an exec. It opens one connection to the box's init (starting the
 * box again when it stopped under the use), counts as activity through its
 * use, adds one to agentbox_file_ops_total{op, result}, and takes nothing
 * from the app's exec quotas, writes no exec audit row and publishes no
 * "exec" event. */
#include "core/manager_int.h"

#include <unistd.h>

/* Ends a door: counts it, passes its result on. */
static int done(ab_manager *m, const char *op, int rc)
{
        ab_metrics_file(m->o.metrics, op, rc == 0);
        return rc < 0 ? -1 : 0;
}

int ab_manager_file_stat(ab_manager *m, ab_use *u, const char *path, bool names, abc_stat *st,
                         ab_err **err)
{
        *st = (abc_stat){0};
        _cleanup_close_ int fd = ab_manager_use_connect(m, u, err);
        int rc = fd < 0  ? -1
                 : names ? abc_stat_names(fd, path, st, err)
                         : abc_stat_path(fd, path, st, err);
        return done(m, "stat", rc);
}

int ab_manager_file_list(ab_manager *m, ab_use *u, const char *path, int depth, abc_dirent **out,
                         size_t *n, ab_err **err)
{
        *out = NULL;
        *n = 0;
        _cleanup_close_ int fd = ab_manager_use_connect(m, u, err);
        int rc = fd < 0 ? -1 : abc_list(fd, path, depth, out, n, err);
        return done(m, "list", rc);
}

/* A connection to box id's init while it runs (a peek: no use, no wake). */
static int peek_connect(ab_manager *m, const char *id, const char *scope, ab_err **err)
{
        ab_box_rec r = {0};
        if (mgr_get_scoped(m, id, scope, &r, err) < 0)
                return -1;
        bool running = r.status == AB_BOX_RUNNING;
        ab_backend *b = m->o.backend;
        ab_err *e = NULL;
        int fd = running ? b->ops->connect(b, r.backend_id, &e) : -1;
        ab_err_free(&e);
        ab_box_rec_clear(&r);
        if (fd < 0)
                return ab_err_set(err, AB_E_CONFLICT, 0, "box %s is not running", id);
        return fd;
}

int ab_manager_file_peek_list(ab_manager *m, const char *id, const char *scope, const char *path,
                              int depth, abc_dirent **out, size_t *n, ab_err **err)
{
        *out = NULL;
        *n = 0;
        int fd = peek_connect(m, id, scope, err);
        if (fd < 0)
                return -1;
        int rc = abc_list(fd, path, depth, out, n, err);
        close(fd);
        return done(m, "list", rc);
}

int ab_manager_file_watch_open(ab_manager *m, const char *id, const char *scope, const char *path,
                               bool recursive, int *fd, ab_err **err)
{
        *fd = -1;
        _cleanup_close_ int c = peek_connect(m, id, scope, err);
        if (c < 0)
                return -1;
        int rc = abc_watch_open(c, path, recursive, err);
        if (rc == 0)
                *fd = steal_fd(&c);
        return done(m, "watch", rc);
}

int ab_manager_file_read(ab_manager *m, ab_use *u, const char *path, uint64_t offset,
                         uint64_t length, abc_output_fn out, void *ud, ab_err **err)
{
        _cleanup_close_ int fd = ab_manager_use_connect(m, u, err);
        int rc = fd < 0 ? -1 : abc_read(fd, path, offset, length, out, ud, err);
        return done(m, "read", rc);
}

int ab_manager_file_read_beneath(ab_manager *m, ab_use *u, const char *dir, const char *rel,
                                 uint64_t length, abc_output_fn out, void *ud, ab_err **err)
{
        _cleanup_close_ int fd = ab_manager_use_connect(m, u, err);
        int rc = fd < 0 ? -1 : abc_read_beneath(fd, dir, rel, length, out, ud, err);
        return done(m, "read", rc);
}

int ab_manager_file_grep(ab_manager *m, ab_use *u, const abc_grep_req *q, abc_match_fn fn, void *ud,
                         abc_grep_res *res, ab_err **err)
{
        *res = (abc_grep_res){0};
        _cleanup_close_ int fd = ab_manager_use_connect(m, u, err);
        int rc = fd < 0 ? -1 : abc_grep(fd, q, fn, ud, res, err);
        return done(m, "grep", rc);
}

int ab_manager_file_write(ab_manager *m, ab_use *u, const char *path, const void *data, size_t len,
                          int src_fd, uint32_t flags, uint32_t mode, ab_err **err)
{
        _cleanup_close_ int fd = ab_manager_use_connect(m, u, err);
        int rc = fd < 0 ? -1 : abc_write(fd, path, data, len, src_fd, flags, mode, err);
        return done(m, "write", rc);
}

int ab_manager_file_mkdir(ab_manager *m, ab_use *u, const char *path, bool parents, uint32_t mode,
                          ab_err **err)
{
        _cleanup_close_ int fd = ab_manager_use_connect(m, u, err);
        int rc = fd < 0 ? -1 : abc_mkdir(fd, path, parents, mode, err);
        return done(m, "mkdir", rc);
}

int ab_manager_file_rename(ab_manager *m, ab_use *u, const char *from, const char *to, ab_err **err)
{
        _cleanup_close_ int fd = ab_manager_use_connect(m, u, err);
        int rc = fd < 0 ? -1 : abc_rename(fd, from, to, err);
        return done(m, "rename", rc);
}

int ab_manager_file_delete(ab_manager *m, ab_use *u, const char *path, bool recursive, ab_err **err)
{
        _cleanup_close_ int fd = ab_manager_use_connect(m, u, err);
        int rc = fd < 0 ? -1 : abc_delete(fd, path, recursive, err);
        return done(m, "delete", rc);
}

int ab_manager_file_symlink(ab_manager *m, ab_use *u, const char *path, const char *target,
                            ab_err **err)
{
        _cleanup_close_ int fd = ab_manager_use_connect(m, u, err);
        int rc = fd < 0 ? -1 : abc_symlink(fd, path, target, err);
        return done(m, "symlink", rc);
}

int ab_manager_file_chmod(ab_manager *m, ab_use *u, const char *path, uint32_t mode, ab_err **err)
{
        _cleanup_close_ int fd = ab_manager_use_connect(m, u, err);
        int rc = fd < 0 ? -1 : abc_chmod(fd, path, mode, err);
        return done(m, "chmod", rc);
}

int ab_manager_file_chown(ab_manager *m, ab_use *u, const char *path, const char *owner,
                          const char *group, ab_err **err)
{
        _cleanup_close_ int fd = ab_manager_use_connect(m, u, err);
        int rc = fd < 0 ? -1 : abc_chown(fd, path, owner, group, err);
        return done(m, "chown", rc);
}

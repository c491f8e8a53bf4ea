/* boxfile.c - a box's file as a response body (resp_box_file, kit/resp.h):
 * a thread reads it through the manager's file door (init's READ) into a
 * pipe the response streams, so the client's pace never holds a worker. */
#include "kit/server_int.h"
#include "base/log.h"
#include "base/util.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

typedef struct read_job {
        ab_server *srv;
        ab_use use;
        char *path;
        uint64_t offset, length; /* length 0: to the end */
        int fd;                  /* write end of the pipe */
} read_job;

static void read_job_free(read_job *j)
{
        ab_manager_use_end(j->srv->mgr, &j->use);
        free(j->path);
        if (j->fd >= 0)
                close(j->fd);
        free(j);
}

static int pipe_out(void *ud, int stream, const void *buf, size_t len)
{
        read_job *j = ud;
        return ab_write_all(j->fd, buf, len) < 0 ? -1 : 0;
}

static void *read_main(void *arg)
{
        read_job *j = arg;
        ab_err *e = NULL;
        if (ab_manager_file_read(j->srv->mgr, &j->use, j->path, j->offset, j->length, pipe_out, j,
                                 &e) < 0)
                ab_log(AB_LOG_WARN, "download cut short", "box", j->use.rec.id, "path", j->path,
                       "error", e->msg, NULL);
        ab_err_free(&e);
        read_job_free(j); /* closes the pipe: the client sees the end */
        return NULL;
}

enum MHD_Result resp_box_file(ab_req *r, ab_use *use, const char *path, uint64_t offset,
                              uint64_t length, unsigned status, const char *const *headers)
{
        read_job *j = xzalloc(sizeof(*j));
        j->srv = r->srv;
        j->use = *use;
        j->path = xstrdup(path);
        j->offset = offset;
        j->length = length;
        j->fd = -1;
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0) {
                int e = errno;
                read_job_free(j);
                return resp_error(r, 500, "internal", "pipe: %s", strerror(e));
        }
        j->fd = p[1];
        if (spawn_detached(read_main, j) < 0) {
                close(p[0]);
                read_job_free(j);
                return resp_error(r, 503, "unavailable", "cannot start a thread");
        }
        return resp_stream(r, status, "application/octet-stream", p[0], headers);
}

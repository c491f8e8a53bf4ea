/* Archive uploads into a box. Two passes over the spooled archive: the first
 * reads it all (names, entry types, sizes, checksums) and writes nothing; the
 * second streams each entry through a pipe into the box's init (abc_mkdir /
 * abc_write), so paths resolve in the box's own mount namespace, a zip-slip
 * name never reaches a write, and the decompressed bytes land only on the
 * box's own disk (counted against its quota), never on the host's: the
 * upload costs the host no more disk than its own spooled bytes. */
#include "rest/upload.h"
#include "kit/status.h"
#include "skills/archive.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>

#define EXTRACT_MAX_ENTRIES 10000

bool upload_wants_extract(ab_req *r)
{
        const char *x = req_query(r, "extract");
        if (x && strcmp(x, "0") && strcmp(x, "false"))
                return true;
        return req_query(r, "format") != NULL;
}

typedef struct box_extract {
        ab_server *srv;
        ab_use *use;
        const char *dir;
} box_extract;

/* The thread that decompresses one entry into the pipe abc_write reads. */
typedef struct feeder {
        ab_archive_reader *rd;
        int out;  /* the pipe's write end; closed by the feeder */
        int conn; /* the init connection of the write */
        ab_err *err;
} feeder;

static void *feed_main(void *arg)
{
        feeder *f = arg;
        if (ab_archive_data(f->rd, f->out, &f->err) < 0)
                /* Before the pipe's EOF: the init sees the hang-up mid-write and
                 * throws the partial file away, so a cut entry is never kept. */
                shutdown(f->conn, SHUT_RDWR);
        close(f->out);
        return NULL;
}

/* Streams the current entry's data into the file `path` of the box. */
static int put_file(int conn, const char *path, uint32_t mode, ab_archive_reader *rd, ab_err **err)
{
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "pipe");
        feeder f = {.rd = rd, .out = p[1], .conn = conn};
        pthread_t t;
        int pe = pthread_create(&t, NULL, feed_main, &f);
        if (pe) {
                close(p[0]);
                close(p[1]);
                return ab_err_set(err, AB_E_INTERNAL, pe, "start the entry's feeder");
        }
        ab_err *we = NULL;
        int r =
            abc_write(conn, path, NULL, 0, p[0], ABC_W_MKPARENTS, (mode & 0111) ? 0755 : 0644, &we);
        close(p[0]); /* a feeder still writing gets EPIPE and stops */
        pthread_join(t, NULL);
        /* The feeder's EPIPE only echoes the write's own failure; any other
         * feeder error (the archive's) is the cause and names the entry. */
        bool echo = f.err && f.err->errnum == EPIPE && r < 0;
        if (f.err && !echo) {
                ab_err_free(&we);
                *err = f.err;
                return -1;
        }
        ab_err_free(&f.err);
        if (r < 0)
                *err = we;
        return r;
}

static char *join(const char *dir, const char *rel)
{
        size_t n = strlen(dir);
        while (n > 1 && dir[n - 1] == '/')
                n--;
        if (n == 1 && dir[0] == '/')
                return xasprintf("/%s", rel);
        return xasprintf("%.*s/%s", (int)n, dir, rel);
}

static int put_entry(void *ud, const char *path, bool is_dir, uint32_t mode, ab_archive_reader *rd,
                     ab_err **err)
{
        box_extract *x = ud;
        _cleanup_free_ char *full = join(x->dir, path);
        if (is_dir) {
                if (ab_manager_file_mkdir(x->srv->mgr, x->use, full, true, 0755, err) < 0)
                        return ab_err_wrap(err, "%s", full);
                return 0;
        }
        /* A file is written on a connection of this use's own (not through
         * the write door): a cut archive entry must abort the write mid-way
         * (shutdown), so init never keeps a partial file. */
        _cleanup_close_ int fd = ab_manager_use_connect(x->srv->mgr, x->use, err);
        if (fd < 0)
                return -1;
        int r = put_file(fd, full, mode, rd, err);
        if (r < 0)
                return ab_err_wrap(err, "%s", full);
        return 0;
}

static char *display_dir(const char *p)
{
        char *s = p[0] == '/' ? xstrdup(p) : xasprintf("/workspace/%s", p);
        size_t n = strlen(s);
        while (n > 1 && s[n - 1] == '/')
                s[--n] = 0;
        return s;
}

enum MHD_Result upload_extract(ab_req *r, const char *id, const char *dir)
{
        const char *x = req_query(r, "extract");
        if (x && strcmp(x, "1") && strcmp(x, "true") && strcmp(x, "0") && strcmp(x, "false"))
                return resp_error(r, 400, "invalid_argument",
                                  "extract: must be 1/true (or 0/false with format)");
        int fmt = ab_archive_format_parse(req_query(r, "format"));
        if (fmt < 0)
                return resp_error(r, 400, "invalid_argument",
                                  "format: must be \"zip\", \"tar\" or \"auto\"");
        if (!req_query(r, "format") || fmt == AB_ARCHIVE_ANY)
                fmt = ab_archive_format_of_type(req_header(r, "Content-Type"));
        const ab_config *c = r->srv->cfg;
        ab_archive_limits lim = {.max_entries = EXTRACT_MAX_ENTRIES,
                                 .max_entry_bytes = c->max_upload,
                                 .max_total_bytes = c->max_upload};
        ab_err *e = NULL;
        ab_use u;
        if (ab_manager_use_begin(r->srv->mgr, id, r->scope, &u, &e) < 0)
                return resp_err(r, e);
        ab_archive_stats st = {0};
        int rc = ab_archive_walk(r->upload_fd, (ab_archive_format)fmt, &lim, NULL, NULL, &st, &e);
        if (rc < 0) { /* nothing was written: 400 / 413 */
                ab_manager_use_end(r->srv->mgr, &u);
                return resp_err(r, e);
        }
        rc = ab_manager_file_mkdir(r->srv->mgr, &u, dir, true, 0755, &e);
        box_extract bx = {.srv = r->srv, .use = &u, .dir = dir};
        if (rc == 0)
                rc = ab_archive_walk(r->upload_fd, (ab_archive_format)fmt, &lim, put_entry, &bx,
                                     &st, &e);
        ab_manager_use_end(r->srv->mgr, &u);
        if (rc < 0)
                return kit_file_err(r, e);
        _cleanup_free_ char *shown = display_dir(dir);
        return resp_json(r, 201,
                         json_pack("{s:o,s:I,s:I,s:I}", "path", json_bytes(shown, strlen(shown)),
                                   "files", (json_int_t)st.files, "dirs", (json_int_t)st.dirs,
                                   "size", (json_int_t)st.bytes));
}

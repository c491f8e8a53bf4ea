/* gunzip.c - gzip-encoded uploads inflated into the spool (gunzip.h). */
#include "kit/gunzip.h"
#include "base/util.h"

#include <fcntl.h>
#include <inttypes.h>
#include <zlib.h>

#define GZ_CHUNK (64u << 10)

/* Writes n bytes of p to fd, taking them from the cap first. */
static int spool_out(kit_gz_take take, void *ud, int fd, const unsigned char *p, size_t n,
                     ab_err **err)
{
        if (take && !take(ud, n))
                return ab_err_set(err, AB_E_UNAVAILABLE, 0,
                                  "the server's upload spool is full (tmp_max); try again later");
        int rc = ab_write_all(fd, p, n);
        return rc < 0 ? ab_err_set(err, AB_E_INTERNAL, -rc, "write the inflated upload") : 0;
}

/* Runs z over what src holds, writing what it inflates to dst: 0 at the
 * end of the last member, -1 with *err. */
static int inflate_all(z_stream *z, int src, int dst, uint64_t max, kit_gz_take take, void *ud,
                       ab_err **err)
{
        _cleanup_free_ unsigned char *in = xmalloc(GZ_CHUNK);
        _cleanup_free_ unsigned char *out = xmalloc(GZ_CHUNK);
        uint64_t total = 0;
        bool ended = false; /* the last member read to its end */
        for (;;) {
                if (z->avail_in == 0) {
                        ssize_t n = read(src, in, GZ_CHUNK);
                        if (n < 0 && errno == EINTR)
                                continue;
                        if (n < 0)
                                return ab_err_set(err, AB_E_INTERNAL, errno, "read the upload");
                        if (n == 0)
                                break;
                        z->next_in = in;
                        z->avail_in = (uInt)n;
                }
                if (ended) { /* more bytes after a member: the next member */
                        if (inflateReset(z) != Z_OK)
                                return ab_err_set(err, AB_E_INTERNAL, 0, "inflateReset");
                        ended = false;
                }
                z->next_out = out;
                z->avail_out = GZ_CHUNK;
                int zr = inflate(z, Z_NO_FLUSH);
                if (zr != Z_OK && zr != Z_STREAM_END && zr != Z_BUF_ERROR)
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "Content-Encoding: gzip: the body is not valid gzip (%s)",
                                          z->msg ? z->msg : "corrupt");
                size_t got = GZ_CHUNK - z->avail_out;
                if (got > max - total)
                        return ab_err_set(err, AB_E_LIMIT, 0,
                                          "Content-Encoding: gzip: the upload inflates past "
                                          "%" PRIu64 " bytes (max_upload)",
                                          max);
                total += got;
                if (got && spool_out(take, ud, dst, out, got, err) < 0)
                        return -1;
                if (zr == Z_STREAM_END)
                        ended = true;
                else if (zr == Z_BUF_ERROR && z->avail_in == 0 && got == 0)
                        continue; /* wants more input */
        }
        if (!ended)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "Content-Encoding: gzip: the body is cut short");
        return 0;
}

int kit_gunzip_fd(int src, int dst, uint64_t max, kit_gz_take take, void *ud, ab_err **err)
{
        z_stream z = {0};
        if (inflateInit2(&z, 15 + 16) != Z_OK) /* 15 + 16: a gzip header, not zlib's */
                return ab_err_set(err, AB_E_INTERNAL, 0, "inflateInit2");
        int rc = inflate_all(&z, src, dst, max, take, ud, err);
        inflateEnd(&z);
        return rc;
}

static bool take_spool(void *ud, uint64_t n)
{
        return kit_tmp_take(ud, n);
}

int kit_gunzip_upload(ab_req *r, uint64_t max, int *out, ab_err **err)
{
        *out = -1;
        if (r->upload_fd < 0 || lseek(r->upload_fd, 0, SEEK_SET) != 0)
                return ab_err_set(err, AB_E_INVALID, 0, "Content-Encoding: gzip: an empty body");
        _cleanup_close_ int fd = open(r->srv->tmp_dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
        if (fd < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "open a spool file");
        if (kit_gunzip_fd(r->upload_fd, fd, max, take_spool, r, err) < 0)
                return -1;
        if (lseek(fd, 0, SEEK_SET) != 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "rewind the inflated upload");
        *out = steal_fd(&fd);
        return 0;
}

/* fuzz_mock - libFuzzer target for the mock backend's init-protocol server
 * (backend/mock_serve.c): the requests the manager, the tools and the fronts
 * send a mock box, with paths, file data and grep patterns that come from
 * API users. The input is a byte stream of frames; each request frame
 * (with the DATA and EOF frames after it) goes on a connection of its own,
 * as the client library sends them, against one box made anew per input.
 * Build and run with scripts/fuzz.sh (clang -fsanitize=fuzzer,address,undefined). */
#include "backend/backend.h"
#include "base/util.h"
#include "proto/proto.h"

#include <endian.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static ab_backend *mock_backend(void)
{
        static ab_backend *b;
        if (b)
                return b;
        signal(SIGPIPE, SIG_IGN); /* the server may hang up before it read a request */
        char dir[] = "/tmp/ab-fuzz-mock-XXXXXX";
        if (!mkdtemp(dir))
                abort();
        char *exp = xasprintf("%s/expect.json", dir);
        FILE *f = fopen(exp, "w");
        if (!f)
                abort();
        fputs("{\"commands\": [{\"command\": \"ls\", \"stdout\": \"a\\n\"},"
              "{\"regex\": \"^echo \", \"stdout\": \"x\", \"stderr\": \"y\", \"exit_code\": 3}]}",
              f);
        fclose(f);
        ab_mock_opts o = {.expect_path = exp};
        ab_err *e = NULL;
        if (ab_mock_open(&o, &b, &e) < 0)
                abort();
        free(exp);
        return b;
}

/* Sends one request's bytes, then reads every answer until the server
 * hangs up. */
static void one(ab_backend *b, const uint8_t *p, size_t n)
{
        ab_err *e = NULL;
        int fd = b->ops->connect(b, "fz", &e);
        if (fd < 0)
                abort(); /* the box is running: connect must work */
        if (n && ab_write_all(fd, p, n) < 0) {
                /* the server may answer (and hang up) before it read it all */
        }
        shutdown(fd, SHUT_WR);
        uint8_t buf[65536];
        uint64_t end = ab_now_ms() + 20000;
        for (;;) {
                struct pollfd pf = {.fd = fd, .events = POLLIN};
                int pr = poll(&pf, 1, 1000);
                if (pr < 0 && errno == EINTR) /* libFuzzer's timer */
                        continue;
                if (pr <= 0 && ab_now_ms() > end)
                        abort(); /* a hang: the server must answer or hang up */
                if (pr <= 0)
                        continue;
                ssize_t r = read(fd, buf, sizeof(buf));
                if (r < 0 && errno == EINTR)
                        continue;
                if (r <= 0)
                        break;
        }
        close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        ab_backend *b = mock_backend();
        ab_err *e = NULL;
        ab_box_spec s = {.id = "fz", .limits = {.disk_mib = 1}};
        if (b->ops->create(b, &s, &e) < 0)
                abort();
        /* cut the stream at request frames */
        size_t start = 0, off = 0;
        while (off + ABP_HDR_SIZE <= size) {
                uint32_t type, len;
                memcpy(&type, data + off, 4);
                memcpy(&len, data + off + 4, 4);
                type = le32toh(type);
                len = le32toh(len);
                if (len > ABP_MAX_PAYLOAD || off + ABP_HDR_SIZE + len > size)
                        break;
                if (off > start && abp_is_request(type)) {
                        one(b, data + start, off - start);
                        start = off;
                }
                off += ABP_HDR_SIZE + len;
        }
        one(b, data + start, size - start);
        if (b->ops->destroy(b, "fz", &e) < 0)
                abort();
        return 0;
}

/* fuzz_sudo - libFuzzer target for the messages of a box's sudo socket
 * (proto/sudo.h): what any process in a box may send to its init. The
 * input is parsed as a REQUEST and as a short message; a REQUEST that
 * parses is encoded again and must parse to the same fields. */
#include "proto/sudo.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int same(const char *a, const char *b)
{
        return (!a && !b) || (a && b && !strcmp(a, b));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        const char *buf = (const char *)data, *why, *val;
        char kind;
        int v;
        if (abs_msg_parse(buf, size, &kind, &val) == 0)
                (void)!abs_msg_int(val, 0, 255, &v);
        abs_req q;
        if (abs_req_parse(buf, size, &q, &why) < 0)
                return 0;
        ab_buf b = {0};
        if (abs_req_encode(&q, &b) == 0) {
                abs_req back;
                if (abs_req_parse(b.p, b.n, &back, &why) < 0 || back.flags != q.flags ||
                    !same(back.user, q.user) || !same(back.cwd, q.cwd) || back.argc != q.argc ||
                    back.envc != q.envc)
                        abort();
                for (size_t i = 0; i < q.argc; i++)
                        if (strcmp(back.argv[i], q.argv[i]))
                                abort();
                abs_req_free(&back);
        }
        ab_buf_free(&b);
        abs_req_free(&q);
        return 0;
}

/* sudo.c - the sudo socket's messages (proto/sudo.h). */
#include "proto/sudo.h"

#include "base/util.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

static void put_field(ab_buf *out, char kind, const char *val)
{
        ab_buf_putc(out, kind);
        ab_buf_add(out, val, strlen(val) + 1);
}

int abs_req_encode(const abs_req *q, ab_buf *out)
{
        if (q->argc > ABS_ARGS_MAX || q->envc > ABS_ENV_MAX)
                return -E2BIG;
        if (!q->cwd || q->cwd[0] != '/' || strlen(q->cwd) > ABS_PATH_MAX ||
            (q->user && (!*q->user || strlen(q->user) > ABS_SPEC_MAX)))
                return -EINVAL;
        size_t start = out->n;
        ab_buf_add(out, ABS_MAGIC, sizeof(ABS_MAGIC));
        char flags[5] = {0};
        size_t nf = 0;
        if (q->flags & ABS_F_PRESERVE_ENV)
                flags[nf++] = 'E';
        if (q->flags & ABS_F_LOGIN)
                flags[nf++] = 'i';
        if (q->flags & ABS_F_SHELL)
                flags[nf++] = 's';
        if (q->flags & ABS_F_TTY)
                flags[nf++] = 'T';
        put_field(out, 'f', flags);
        if (q->user)
                put_field(out, 'u', q->user);
        put_field(out, 'd', q->cwd);
        for (size_t i = 0; i < q->argc; i++)
                put_field(out, 'a', q->argv[i]);
        for (size_t i = 0; i < q->envc; i++) {
                if (!strchr(q->env[i], '=') || q->env[i][0] == '=')
                        continue; /* not NAME=VALUE: no program could read it */
                put_field(out, 'e', q->env[i]);
        }
        if (out->n - start > ABS_REQ_MAX) {
                out->n = start;
                return -E2BIG;
        }
        return 0;
}

void abs_req_free(abs_req *q)
{
        free(q->argv);
        free(q->env);
        *q = (abs_req){0};
}

static int bad(abs_req *q, const char **why, const char *what)
{
        abs_req_free(q);
        *why = what;
        return -1;
}

/* Appends s to the NULL-terminated *v of *n entries (at most max). */
static int push(const char ***v, size_t *n, size_t max, const char *s)
{
        if (*n == max)
                return -1;
        *v = xrealloc(*v, xmul(*n + 2, sizeof(**v)));
        (*v)[(*n)++] = s;
        (*v)[*n] = NULL;
        return 0;
}

int abs_req_parse(const char *buf, size_t len, abs_req *q, const char **why)
{
        *q = (abs_req){0};
        *why = NULL;
        if (len > ABS_REQ_MAX)
                return bad(q, why, "request too large");
        if (len < sizeof(ABS_MAGIC) || memcmp(buf, ABS_MAGIC, sizeof(ABS_MAGIC)))
                return bad(q, why, "not a sudo request of this version");
        if (buf[len - 1] != 0)
                return bad(q, why, "truncated request");
        bool has_flags = false;
        for (size_t at = sizeof(ABS_MAGIC); at < len;) {
                char kind = buf[at];
                const char *val = buf + at + 1;
                if (kind == 0 || at + 1 >= len)
                        return bad(q, why, "empty field");
                size_t vlen = strlen(val); /* ends at the final NUL at worst */
                at += 2 + vlen;
                switch (kind) {
                case 'f':
                        if (has_flags)
                                return bad(q, why, "flags given twice");
                        has_flags = true;
                        for (const char *c = val; *c; c++) {
                                uint32_t bit = *c == 'E'   ? ABS_F_PRESERVE_ENV
                                               : *c == 'i' ? ABS_F_LOGIN
                                               : *c == 's' ? ABS_F_SHELL
                                               : *c == 'T' ? ABS_F_TTY
                                                           : 0;
                                if (!bit || (q->flags & bit))
                                        return bad(q, why, "unknown or repeated flag");
                                q->flags |= bit;
                        }
                        break;
                case 'u':
                        if (q->user || vlen == 0 || vlen > ABS_SPEC_MAX)
                                return bad(q, why, "bad or repeated user");
                        q->user = val;
                        break;
                case 'd':
                        if (q->cwd || val[0] != '/' || vlen > ABS_PATH_MAX)
                                return bad(q, why, "bad or repeated cwd");
                        q->cwd = val;
                        break;
                case 'a':
                        if (push(&q->argv, &q->argc, ABS_ARGS_MAX, val) < 0)
                                return bad(q, why, "too many arguments");
                        break;
                case 'e':
                        if (val[0] == '=' || !strchr(val, '='))
                                return bad(q, why, "an environment entry is not NAME=VALUE");
                        if (push(&q->env, &q->envc, ABS_ENV_MAX, val) < 0)
                                return bad(q, why, "too many environment entries");
                        break;
                default:
                        return bad(q, why, "unknown field");
                }
        }
        if (!q->cwd)
                return bad(q, why, "no cwd");
        if ((q->flags & ABS_F_LOGIN) && (q->flags & ABS_F_SHELL))
                return bad(q, why, "-i and -s together");
        if (!q->argc && !(q->flags & (ABS_F_LOGIN | ABS_F_SHELL)))
                return bad(q, why, "no command");
        if (!q->argv)
                q->argv = xcalloc(1, sizeof(*q->argv));
        if (!q->env)
                q->env = xcalloc(1, sizeof(*q->env));
        return 0;
}

int abs_msg_parse(const char *buf, size_t len, char *kind, const char **val)
{
        if (len < 2 || len > ABS_MSG_MAX || buf[len - 1] != 0 || buf[0] == 0 ||
            memchr(buf, 0, len - 1))
                return -1;
        *kind = buf[0];
        *val = buf + 1;
        return 0;
}

int abs_msg_int(const char *val, int lo, int hi, int *out)
{
        char *end;
        errno = 0;
        long v = strtol(val, &end, 10);
        if (errno || end == val || *end || v < lo || v > hi)
                return -1;
        *out = (int)v;
        return 0;
}

int abs_send(int sock, const void *buf, size_t len, const int *fds, size_t nfds)
{
        union {
                char b[CMSG_SPACE(3 * sizeof(int))];
                struct cmsghdr align;
        } cm = {0};
        if (nfds > 3)
                return -EINVAL;
        struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
        if (nfds) {
                mh.msg_control = cm.b;
                mh.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
                struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
                c->cmsg_level = SOL_SOCKET;
                c->cmsg_type = SCM_RIGHTS;
                c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
                memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
        }
        ssize_t n;
        do
                n = sendmsg(sock, &mh, MSG_NOSIGNAL);
        while (n < 0 && errno == EINTR);
        return n < 0 ? -errno : 0;
}

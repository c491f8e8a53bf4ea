/* sudo.h - what a box's `sudo` (agentbox-init run under the name sudo) and
 * the box's init say to each other over the box's sudo socket, an abstract
 * AF_UNIX SOCK_SEQPACKET socket (reachable only from the box's own network
 * namespace). One message each way per step (docs/protocol.md, "sudo"):
 *
 *   client -> init  REQUEST (below) with SCM_RIGHTS: its stdin, stdout,
 *                   stderr, exactly three fds
 *   client -> init  "s<signo>\0"  a signal the client got, for the command
 *   init -> client  "t\0"          with SCM_RIGHTS: the master of the terminal
 *                                  init made for the command (flag T), which
 *                                  the client relays to and from its own
 *   init -> client  "x<code>\0"   the command exited with code
 *                   "k<signo>\0"  the command was killed by signo
 *                   "m<text>\0"   refused or failed: sudo prints "sudo: text"
 *
 * A REQUEST is the magic "absudo1\0" then fields, each a kind letter, its
 * value and a NUL: 'f' flags (letters E i s T, at most once), 'u' the target
 * user (init's USER spec: name, uid, name:group, uid:gid; at most once),
 * 'd' the caller's cwd (absolute; exactly once), 'a' one argument
 * (repeated, in order), 'e' one NAME=VALUE of the caller's environment
 * (repeated). Nothing else. */
#ifndef AB_PROTO_SUDO_H
#define AB_PROTO_SUDO_H

#include "base/buf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ABS_SOCKET_NAME "agentbox-sudo" /* abstract: a leading NUL, no file */
#define ABS_MAGIC       "absudo1"
#define ABS_REQ_MAX     (160u << 10) /* largest REQUEST: below a socket's default send buffer */
#define ABS_ARGS_MAX    4096         /* arguments in a REQUEST */
#define ABS_ENV_MAX     4096         /* environment entries in a REQUEST */
#define ABS_SPEC_MAX    256          /* longest target user */
#define ABS_PATH_MAX    4096         /* longest cwd */
#define ABS_MSG_MAX     1024         /* largest message but a REQUEST */

/* E keep the environment, i a login shell, s a shell, T the client's
 * stdin, stdout and stderr are terminals: the command gets a terminal of its
 * own (its controlling one, with job control), relayed by the client. */
enum { ABS_F_PRESERVE_ENV = 1, ABS_F_LOGIN = 2, ABS_F_SHELL = 4, ABS_F_TTY = 8 };

/* A REQUEST. Parsed: the strings point into the parsed buffer (which must
 * outlive it), the arrays are the request's own (abs_req_free). */
typedef struct abs_req {
        uint32_t flags;
        const char *user; /* NULL = root */
        const char *cwd;
        const char **argv; /* argc entries, then NULL */
        size_t argc;
        const char **env; /* envc entries, then NULL */
        size_t envc;
} abs_req;

/* Appends q as a REQUEST to out. 0, or -E2BIG when it would be larger than
 * ABS_REQ_MAX or hold more than ABS_ARGS_MAX arguments or ABS_ENV_MAX
 * entries, -EINVAL when a field breaks the rules above. */
int abs_req_encode(const abs_req *q, ab_buf *out) __attribute__((warn_unused_result));
/* Parses buf[0..len) (untrusted) into *q. 0, or -1 with *why (static text)
 * saying what is wrong; *q is then empty. */
int abs_req_parse(const char *buf, size_t len, abs_req *q, const char **why)
    __attribute__((warn_unused_result));
void abs_req_free(abs_req *q);

/* Sends one message of len bytes with the nfds (at most 3) fds as
 * SCM_RIGHTS. 0 or -errno. */
int abs_send(int sock, const void *buf, size_t len, const int *fds, size_t nfds);

/* Parses a short message ("x12\0"): *kind its letter, *val its text (in
 * buf). 0, or -1 when it is not one letter, text and a single final NUL. */
int abs_msg_parse(const char *buf, size_t len, char *kind, const char **val);
/* A decimal int of a message ("12", "-3") in [lo, hi]. 0 or -1. */
int abs_msg_int(const char *val, int lo, int hi, int *out);

#endif

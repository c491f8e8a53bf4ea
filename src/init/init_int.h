/* init_int.h - shared by the pieces of agentbox-init: init.c (PID 1, accept
 * loop, session dispatch), exec.c (EXEC) and fileops.c (file requests).
 * Everything here runs in a forked session child unless said otherwise. */
#ifndef AB_INIT_INT_H
#define AB_INIT_INT_H

#include "base/util.h"
#include "proto/proto.h"

#include <sys/types.h>

/* How long a session waits for the client to send or take a frame outside of
 * an exec (an exec has its own timeout). */
#define INIT_IO_TIMEOUT_MS (120 * 1000)
/* How long a session kept after an exec (EXIT's AGAIN) waits for the next
 * request; a client keeping the connection must give it up well before. */
#define SESSION_IDLE_MS (30 * 1000)

/* RLIMIT_NPROC of every command (0 = inherited): kept below the box's pids
 * limit, so processes a command leaves behind can never take the last pids
 * and init can always start the next exec. Set by --max-procs. */
extern unsigned long init_max_procs;

typedef struct init_conf {
        const char *workdir; /* default cwd, HOME, base of relative paths */
        int workdir_fd;      /* O_PATH fd of workdir in the session, or -1 */
} init_conf;

/* The connection to the client, with its frame reader. */
typedef struct init_conn {
        int fd;
        abp_reader rd;
} init_conn;

/* Closes a client connection. Over TCP the answer is flushed first and what
 * the client still sends (stdin a command did not read) is read and dropped
 * until it hangs up (at most 2 s): closing with unread data would reset the
 * connection, and the client could lose the answer. */
void init_hangup(int fd);

/* Sends ERROR{code, message}. Returns -1 (the request failed) or -errno when
 * the client is gone. */
int init_send_error(init_conn *c, const char *code, const char *fmt, ...) AB_PRINTF(3, 4);
/* Maps errno `e` about `path` to an error code and message and sends it
 * (see docs/protocol.md for the mapping). Returns -1. */
int init_send_errno(init_conn *c, int e, const char *path);
/* Sends one frame already encoded in b. 0 or -errno. */
int init_send(init_conn *c, abp_buf *b);

/* Handles an EXEC request frame. True when the command left nothing behind
 * and EXIT told the client (AGAIN) that the connection may carry another
 * request; the connection is then still open. */
bool init_exec(init_conn *c, const abp_frame *f, const init_conf *conf);
/* Captures and caches the login environment now (in a child of init made for
 * it), so the first exec finds it ready. */
void init_exec_prewarm(const init_conf *conf);
/* Handles a WATCH request frame (watch.c): streams the directory's
 * changes until the client hangs up. */
void init_watch(init_conn *c, const abp_frame *f, const init_conf *conf);
/* Handles a STATS request frame (stats.c): init's own cgroup's usage. */
void init_stats(init_conn *c, const abp_frame *f);
/* Handles a PORT request frame (port.c): connects to the port on the box's
 * loopback and, after OK, relays the connection's bytes both ways. */
void init_port(init_conn *c, const abp_frame *f);
/* Handles a GREP request frame (grep.c). */
void init_grep(init_conn *c, const abp_frame *f, const init_conf *conf);
/* Handles READ WRITE LIST STAT DELETE MKDIR RENAME request frames. */
void init_fileop(init_conn *c, const abp_frame *f, const init_conf *conf);

/* --image-probe PATH (probe.c): writes the image's workdir and user as the
 * container runtime started this process; always 0 (the exit status). */
int init_image_probe(const char *path);

/* ---- users (user.c) ---- */

/* Who a command runs as. Zeroed (set false): init's own user, root. */
typedef struct init_user {
        bool set;
        uid_t uid;
        gid_t gid;
        gid_t *groups; /* the groups setgroups gets: gid, then supplementary ones */
        size_t n_groups;
        char *name;  /* of its /etc/passwd entry, or NULL (a uid without one) */
        char *home;  /* from the same entry, or NULL */
        char *shell; /* from the same entry, or NULL */
} init_user;

/* Resolves a request's USER ("name", "uid", "uid:gid", "name:group",
 * "uid:group", as Docker's) with the box's /etc/passwd and /etc/group into
 * *u (release with init_user_free). 0, or -1 with *why (malloc'd) saying
 * what is wrong for an ERROR invalid_argument: a bad spec, an unknown name,
 * an unreadable file, an id the box's user namespace does not map. */
int init_user_resolve(const init_conf *conf, const char *spec, init_user *u, char **why);
void init_user_free(init_user *u);
/* CHOWN's ids: owner (a name of the box's /etc/passwd or a uid) and group (a
 * name of its /etc/group or a gid), either NULL = unchanged ((uid_t)-1 /
 * (gid_t)-1). 0, or -1 with *why (malloc'd) for an unknown name, a bad
 * number or an id the box's user namespace does not map. */
int init_owner_resolve(const init_conf *conf, const char *owner, const char *group, uid_t *uid,
                       gid_t *gid, char **why);
/* The names of uid and gid in the box's /etc/passwd and /etc/group (each
 * malloc'd, or NULL when it has no entry or the file is unreadable). */
void init_id_names(const init_conf *conf, uint32_t uid, uint32_t gid, char **owner, char **group);
/* In a child before exec: setgroups, setgid, setuid to u (nothing when u is
 * NULL or not set). 0 or -errno. */
int init_user_apply(const init_user *u);

/* ---- sudo (sudo.c, sudo_client.c) ---- */

/* The box's sudo socket (proto/sudo.h), listening, non-blocking: made by
 * init when it is the box's PID 1. fd or -errno. */
int init_sudo_listen(void);
/* Serves one sudo connection cfd (in a forked child of init, after the
 * session's preparation): checks who asks, runs the command, answers its
 * status. Returns when done; the caller exits. */
void init_sudo_serve(int cfd, const char *workdir);
/* agentbox-init run under the name "sudo": the box's sudo command. Returns
 * its exit status (or does not return: the command's signal). */
int init_sudo_main(int argc, char **argv);

/* ---- shells and environments (exec.c) ---- */

#define INIT_NO_SHELL                                                                              \
        "this box's image has no shell (/bin/bash or /bin/sh): run a program with argv instead"

/* The shell that runs COMMANDs and login terminals, looked for at every call
 * (a box may install bash): "/bin/bash" when executable, else "/bin/sh",
 * else NULL (a COMMAND is then ERROR unsupported INIT_NO_SHELL). */
const char *init_shell(void);

/* The base environment of an ARGV exec (PATH, HOME, LANG, USER, LOGNAME,
 * SHELL, TERM=dumb) with env[0..n) on top, later entries winning (each
 * NAME=VALUE, checked by the caller). For root (u NULL or not set), HOME is
 * the workdir and USER root; for a user, HOME is its passwd home (else /),
 * USER and LOGNAME its name (unset without an entry). SHELL is `shell`, unset
 * when NULL. A strv. */
char **init_base_env(const char *const *env, size_t n, const char *workdir, const init_user *u,
                     const char *shell);

/* ---- terminals (term.c) ---- */

/* The session's end of the socketpair to the terminal keeper, the keeper's
 * end (init keeps both; sessions close this one), and the pipe on which a
 * session asks init to start a keeper (writes pid 0). -1 when absent. */
extern int init_term_sock, init_term_keeper_end, init_notify_fd;
/* Hands the connection of c, with the request frame f and whatever else was
 * read, to the keeper; or answers ERROR. The caller closes its copy of c->fd. */
void init_term_forward(init_conn *c, const abp_frame *f);
/* The keeper's body (in a child of init): serves terminals on the
 * connections that arrive on ks. Never returns. */
__attribute__((noreturn)) void init_term_keeper(int ks, const char *workdir);

/* Opens a user path inside the box: relative paths are relative to the
 * workdir, magic links (/proc/PID/fd/...) are never followed. fd or -errno. */
int init_open(const init_conf *conf, const char *path, int flags, mode_t mode);

/* SIGKILLs every descendant of the calling process (found through /proc
 * ppid chains, plus process group `pgrp` when > 0) until none is left, and
 * reaps its children. `reaped` (may be NULL) sees each reaped child.
 * Also used by PID 1 on SIGTERM. */
void init_kill_tree(pid_t pgrp, void (*reaped)(pid_t pid, int status, void *ud), void *ud);
/* In a child after fork, before exec: its own session, default signals, an
 * empty mask, the box's process limit (exec.c). */
void init_child_common(void);

#endif

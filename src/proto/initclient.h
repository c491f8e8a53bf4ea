/* initclient.h - the host side of the agentbox-init protocol (src/init/proto.h).
 * Every backend reaches a box's processes and files through this: native boxes
 * via the unix socket under the box's directory, Docker/Kubernetes later via a
 * socket that the container's init serves. One request per connection.
 *
 * All calls take a connected stream socket `fd` (the caller connects and
 * closes it) and report failures through `err`: AB_E_NOT_FOUND for a missing
 * path, AB_E_INVALID for bad arguments, AB_E_PERMISSION for a read-only path,
 * AB_E_LIMIT for a full disk, AB_E_UNAVAILABLE when init is gone or speaks
 * garbage. Paths are paths inside the box; relative ones are relative to
 * /workspace. */
#ifndef AB_INITCLIENT_H
#define AB_INITCLIENT_H

#include "base/err.h"
#include "proto/proto.h"
#include <stdbool.h>
#include <sys/types.h>

/* Connects to a unix socket at dirfd/name (works for paths longer than
 * sun_path). Returns the fd or a negative value with *err set. */
int abc_connect(int dirfd, const char *name, ab_err **err);

/* Connects to a box's init over TCP at addr ("IP:PORT" or "[IPv6]:PORT")
 * and runs the mutual handshake (proto/handshake.h) with the box's 32-byte
 * secret, all within timeout_ms (<= 0: 5 s). Returns a blocking fd that
 * carries the framed protocol as abc_connect's does, or -1 with *err:
 * AB_E_UNAVAILABLE (nothing listens, or it went away), AB_E_PERMISSION (the
 * peer does not hold the secret, or refused ours), AB_E_TIMEOUT. */
int abc_connect_tcp(const char *addr, const uint8_t secret[32], int timeout_ms, ab_err **err);

/* Exactly one of command and argv (else AB_E_INVALID). */
typedef struct abc_exec_req {
        const char *command;     /* run as bash -lc COMMAND would, or sh -lc in a box without
                                  * bash (docs/protocol.md), or NULL */
        const char *const *argv; /* or the program and its arguments, NULL-terminated, run with
                                  * no shell: argv[0] is looked up in the exec's PATH; at least
                                  * argv[0], which must not be empty */
        const char *const *env;  /* extra "K=V" strings, NULL-terminated; may be NULL */
        const char *cwd;         /* NULL = /workspace; must exist */
        const char *user;        /* NULL or "" = root; else as Docker's USER: "name", "uid",
                                  * "uid:gid", "name:group" or "uid:group", resolved with the
                                  * box's /etc/passwd and /etc/group (an unknown name is
                                  * AB_E_INVALID); HOME, USER, LOGNAME then follow the user */
        const void *stdin_data;  /* may be NULL */
        size_t stdin_len;
        int stdin_fd;        /* or -1; when >= 0, stdin is streamed from it until EOF */
        uint32_t timeout_ms; /* 0 = no timeout */
        uint64_t output_cap; /* bytes kept per stream; 0 = 1 MiB */
        bool has_cancel;     /* when set, cancel_fd reporting a hang-up (a socket whose peer */
        int cancel_fd;       /* closed, the write end of a pipe nobody reads any more) aborts
                              * the exec: its process tree is killed, AB_E_UNAVAILABLE */
} abc_exec_req;

typedef struct abc_exec_res {
        int exit_code;  /* 128+N when killed by signal N (as a shell reports it) */
        bool timed_out; /* the timeout fired and the exec's process tree was killed */
        bool truncated; /* some output was dropped at output_cap */
        uint64_t duration_ms;
        uint64_t stdout_bytes, stderr_bytes; /* produced, including dropped bytes */
        /* init's session waits for another request on the connection: the
         * command left nothing running, no stdin stream was sent and nothing
         * follows EXIT. The caller may keep the connection for its next
         * request (a backend's release), or close it. */
        bool again;
} abc_exec_res;

/* Output callback: stream 1 = stdout, 2 = stderr. Return 0 to go on, <0 to
 * abort the exec (its process tree is then killed). When output exceeds the
 * cap, the last chunk delivered for that stream is the truncation marker
 * "\n[agentbox: output truncated after N bytes]\n". */
typedef int (*abc_output_fn)(void *ud, int stream, const void *buf, size_t len);

int abc_exec(int fd, const abc_exec_req *req, abc_output_fn out, void *ud, abc_exec_res *res,
             ab_err **err);

/* Checks that req names exactly one of command and a non-empty argv (with a
 * non-empty argv[0]): 0, or -1 with AB_E_INVALID in *err. abc_exec checks it too. */
int abc_exec_req_check(const abc_exec_req *req, ab_err **err);

/* req's command as one line for people (audit rows, events, logs): the
 * command itself, or argv quoted as a POSIX shell would need it (words of
 * plain characters as they are, others in single quotes). Free with free(). */
char *abc_exec_req_text(const abc_exec_req *req);

typedef enum { ABC_FILE = 1, ABC_DIR, ABC_SYMLINK, ABC_OTHER } abc_ftype;

typedef struct abc_stat {
        abc_ftype type;
        uint64_t size;
        uint32_t mode; /* permission bits */
        int64_t mtime; /* seconds since the epoch */
        char *link;    /* symlink target, or NULL */
        bool has_ids;  /* uid and gid are known (an init before proto 3 sends neither) */
        uint32_t uid, gid;
        char *owner, *group; /* names (abc_stat_names only), or NULL */
} abc_stat;

/* Frees st's strings and zeroes it. */
void abc_stat_clear(abc_stat *st);

typedef struct abc_dirent {
        char *path; /* path relative to the listed directory, e.g. "src/main.c" */
        abc_stat st;
} abc_dirent;

/* Reads up to `length` bytes (0 = to the end) from `offset`, delivering them
 * through `out` (stream 1) in chunks. Directories are AB_E_INVALID. */
int abc_read(int fd, const char *path, uint64_t offset, uint64_t length, abc_output_fn out,
             void *ud, ab_err **err);
/* abc_read of dir/rel (up to `length` bytes, 0 = to the end) where no
 * component of rel is followed when it is a symlink (a link there is
 * AB_E_INVALID, "symlink not followed"), so an entry listed as a file and
 * swapped for a link since is not read through the link; dir resolves as
 * abc_read resolves a path. rel must pass abc_path_is_safe (else AB_E_INVALID,
 * nothing sent). An init that predates this follows rel's links as abc_read
 * does. */
int abc_read_beneath(int fd, const char *dir, const char *rel, uint64_t length, abc_output_fn out,
                     void *ud, ab_err **err);

enum { ABC_W_MKPARENTS = 1, ABC_W_APPEND = 2, ABC_W_EXCL = 4 };
/* Writes `len` bytes of `data` (or, when src_fd >= 0, everything read from
 * src_fd) to path, creating it with `mode` (0 = 0644). Flags ABC_W_*.
 * The write is atomic for non-append writes (temp file + rename). */
int abc_write(int fd, const char *path, const void *data, size_t len, int src_fd, uint32_t flags,
              uint32_t mode, ab_err **err);

/* True when p is a relative path with no empty, "." or ".." component: what a
 * listing entry must look like. Anything else comes from a misbehaving box. */
bool abc_path_is_safe(const char *p);

/* Lists a directory `depth` levels deep (1 = its entries only), sorted by path.
 * Entry paths are checked with abc_path_is_safe (else AB_E_UNAVAILABLE): a box
 * can never make a caller build a path outside the listed directory.
 * *out is an array of *n entries; free with abc_dirents_free. */
int abc_list(int fd, const char *path, int depth, abc_dirent **out, size_t *n, ab_err **err);
void abc_dirents_free(abc_dirent *d, size_t n);

/* lstat of a path inside the box. Release *st with abc_stat_clear. */
int abc_stat_path(int fd, const char *path, abc_stat *st, ab_err **err);
/* abc_stat_path, with st->owner and st->group named from the box's
 * /etc/passwd and /etc/group (NULL where it has no entry). */
int abc_stat_names(int fd, const char *path, abc_stat *st, ab_err **err);

/* Sets the permission bits (07777) of path, following a final symlink.
 * AB_E_INVALID from an init that predates it ("unknown request type"). */
int abc_chmod(int fd, const char *path, uint32_t mode, ab_err **err);
/* Sets path's owner and/or group (a name of the box's /etc/passwd or
 * /etc/group, or a number; NULL = unchanged, not both), following a final
 * symlink. AB_E_INVALID for an unknown name or an unmapped id. */
int abc_chown(int fd, const char *path, const char *owner, const char *group, ab_err **err);

/* RESERVE: has the box's init hold a balloon of `want` bytes on its workdir's
 * filesystem (UINT64_MAX = leave it as it is). *res gets what it holds and
 * the bytes the box could write without it. AB_E_UNSUPPORTED when the init
 * has no balloon (an older init, or no O_TMPFILE there). */
typedef struct abc_reserve_res {
        uint64_t held, free;
} abc_reserve_res;
int abc_reserve(int fd, uint64_t want, abc_reserve_res *res, ab_err **err);

/* STATS: the usage of the box init's own cgroup, as init sees it (where the
 * host cannot read the box's cgroup: a Kubernetes pod). A counter init
 * could not read has its has_* false. AB_E_UNAVAILABLE when init can read
 * no memory usage; AB_E_INVALID from an init that predates STATS. */
int abc_stats(int fd, abp_stats *out, ab_err **err);

/* PORT: asks init to connect to `port` on the box's own loopback (127.0.0.1,
 * then [::1]) within timeout_ms; on 0 the connection fd (which the caller
 * keeps owning) then carries that TCP stream's bytes both ways, nothing of
 * it read ahead. Errors: AB_E_UNAVAILABLE with errnum ECONNREFUSED when
 * nothing listens there, AB_E_TIMEOUT (errnum ETIMEDOUT) when it did not
 * answer in time, AB_E_UNSUPPORTED from an init older than proto 4,
 * AB_E_UNAVAILABLE when init does not answer. */
int abc_port(int fd, uint16_t port, int timeout_ms, ab_err **err);

/* GREP (docs/protocol.md): init searches the files `paths` (box paths, in
 * that order) for lines matching `pattern`, in the box. */
typedef struct abc_grep_req {
        const char *pattern; /* PCRE2; may hold NULs */
        size_t pattern_len;
        bool literal, case_sensitive;
        const char *const *paths; /* together at most ABP_MAX_PAYLOAD bytes of fields */
        size_t n_paths;
        uint64_t size_max;   /* larger files are skipped */
        uint32_t count;      /* most matches to deliver; one more sets truncated */
        uint32_t timeout_ms; /* for the whole search (0 = 30 s) */
        /* When set, asked every 100 ms while init searches: true (the caller's
         * client went away) stops the search, AB_E_TIMEOUT "cancelled". */
        bool (*gone)(void *ud);
        void *gone_ud;
} abc_grep_req;
typedef struct abc_grep_res {
        bool truncated, timed_out;
} abc_grep_res;
/* A match: paths[index], line number (1-based), the line as init shows it. */
typedef int (*abc_match_fn)(void *ud, size_t index, uint64_t line, const char *text, size_t len);
/* Runs GREP, calling `match` for each match in order. A bad pattern is
 * AB_E_INVALID with init's message ("Invalid regex pattern: ..."). */
int abc_grep(int fd, const abc_grep_req *req, abc_match_fn match, void *ud, abc_grep_res *res,
             ab_err **err);
/* WATCH (docs/protocol.md): asks init to watch directory path (recursive:
 * its subdirectories too) and waits for its OK. 0, or -1 with *err (init's
 * error: not_found, a non-directory is invalid; an init that predates WATCH
 * answers AB_E_INVALID "unknown request type"). After it, fd carries only
 * events: read them with abc_watch_next; close fd to stop the watch. */
int abc_watch_open(int fd, const char *path, bool recursive, ab_err **err);
/* The next event of a watch opened on fd: 1 with *kind (ABP_WATCH_*) and
 * *name (relative to the watched directory; free it), 0 when none came
 * within timeout_ms, -1 with *err when the watch ended (the box stopped,
 * the directory went: AB_E_UNAVAILABLE). rd is the watch's frame reader
 * (zeroed before the first call; abp_reader_free it at the end). */
struct abp_reader;
int abc_watch_next(int fd, struct abp_reader *rd, int timeout_ms, uint32_t *kind, char **name,
                   ab_err **err);

/* The bytes one path adds to a GREP request (to cut the paths into requests). */
size_t abc_grep_path_cost(const char *path);

/* Deletes a file, a symlink, or (when recursive) a directory tree. */
int abc_delete(int fd, const char *path, bool recursive, ab_err **err);

/* Creates a directory (and its parents when `parents`). */
int abc_mkdir(int fd, const char *path, bool parents, uint32_t mode, ab_err **err);

/* Makes path a symlink to target (stored as given, never resolved).
 * AB_E_CONFLICT when path exists; AB_E_INVALID from an init before proto 3. */
int abc_symlink(int fd, const char *path, const char *target, ab_err **err);

/* Renames within the box. */
int abc_rename(int fd, const char *from, const char *to, ab_err **err);

/* Liveness probe: init answers with its version. */
int abc_ping(int fd, char **version, ab_err **err);

/* ---- terminals: programs on a pseudo-terminal in the box that outlive the
 * connection that made them (init's keeper holds them; docs/protocol.md) ---- */

typedef struct abc_term_info {
        char *id;    /* "t_" + hex */
        char **argv; /* strv */
        uint32_t cols, rows;
        int64_t created_ms; /* unix milliseconds */
        bool running;       /* false once the process exited (exit_code is then set) */
        int exit_code;      /* 128+N when killed by signal N */
        uint32_t pid;       /* its process, in the box's pid namespace */
        bool pipes;         /* a background process (stdout and stderr apart, no pty) */
        bool timed_out;     /* it was killed at its timeout (exit_code 124) */
        int64_t ended_ms;   /* when it ended (unix ms), 0 while it runs */
        uint64_t lines;     /* a process: newlines it wrote to stdout in all */
        char *tag;          /* the label given at open, or NULL */
} abc_term_info;

#define ABC_TERM_TAG_MAX (8u * 1024) /* longest tag (ABP_TERM_TAG_MAX) */

void abc_term_info_clear(abc_term_info *t);
void abc_term_infos_free(abc_term_info *v, size_t n);

typedef struct abc_term_req {
        const char *const *argv; /* NULL-terminated, or NULL = the box's login shell */
        const char *const *env;  /* extra "K=V", NULL-terminated; may be NULL */
        const char *cwd;         /* NULL = /workspace; must exist */
        const char *user;        /* NULL or "" = root; else as abc_exec_req's */
        uint32_t cols, rows;     /* 0 = 80 x 24; at most 1000 */
        bool pipes;              /* a background process: stdin, stdout, stderr are pipes */
        bool close_stdin;        /* pipes: its stdin is closed from the start */
        const char *tag;         /* kept with it and listed (at most 8 KiB), or NULL */
        uint32_t timeout_ms;     /* pipes: init kills it (its session) after this; 0 = never */
        const char *command;     /* pipes, instead of argv: run by the box's shell (-c) */
        bool merge;              /* pipes: its stderr goes to its stdout */
} abc_term_req;

/* Starts a terminal. AB_E_CONFLICT when the box has as many terminals as it
 * may (16 running), AB_E_NOT_FOUND for a missing cwd. */
int abc_term_open(int fd, const abc_term_req *req, abc_term_info *out, ab_err **err);
/* Every terminal of the box (running, and exited ones not yet closed). */
int abc_term_list(int fd, abc_term_info **out, size_t *n, ab_err **err);
/* The same for the box's background processes (pipes true) or terminals. */
int abc_term_list_kind(int fd, bool pipes, abc_term_info **out, size_t *n, ab_err **err);
/* Kills the terminal's session (every process on it) and forgets it;
 * attached clients see it end. AB_E_NOT_FOUND for an unknown id. */
int abc_term_close(int fd, const char *tid, ab_err **err);
int abc_term_resize(int fd, const char *tid, uint32_t cols, uint32_t rows, ab_err **err);
/* Sends sig to the terminal's foreground process group. */
int abc_term_signal(int fd, const char *tid, int sig, ab_err **err);
/* Sends input to the terminal without attaching (at most 60 KiB a call).
 * AB_E_CONFLICT when its program has exited or it has 256 KiB of input
 * waiting already. */
int abc_term_write(int fd, const char *tid, const void *data, size_t len, ab_err **err);
/* The same for a background process, closing its stdin after data when
 * close_stdin (AB_E_CONFLICT when it is closed already). */
int abc_proc_write(int fd, const char *tid, const void *data, size_t len, bool close_stdin,
                   ab_err **err);

/* An attached terminal: the connection fd (borrowed, set non-blocking by
 * abc_term_attach) carries its output one way and input, resize and signal
 * the other. Not thread-safe: one reader; sends are serialised by the caller. */
typedef struct abc_term_stream abc_term_stream;

typedef enum {
        ABC_TERM_OUTPUT = 1, /* data, len, stream: output bytes (the ring buffer's first) */
        ABC_TERM_EXIT,       /* exit_code: the process exited; the stream ends */
        ABC_TERM_CLOSED,     /* the terminal was closed; the stream ends */
} abc_term_event_kind;

typedef struct abc_term_event {
        abc_term_event_kind kind;
        const void *data; /* valid until the next abc_term_next */
        size_t len;
        int stream; /* OUTPUT: 1 (a terminal's, a process's stdout) or 2 (stderr) */
        int exit_code;
        bool timed_out; /* EXIT: killed at its timeout */
} abc_term_event;

/* Attaches to terminal tid: *info gets it; then *out streams it. */
int abc_term_attach(int fd, const char *tid, abc_term_info *info, abc_term_stream **out,
                    ab_err **err);
/* What terminal or process tid kept of its output, as it is now: *info,
 * then *out gives OUTPUT events and ends with ABC_TERM_CLOSED (or -1). */
int abc_term_snapshot(int fd, const char *tid, abc_term_info *info, abc_term_stream **out,
                      ab_err **err);
/* The next event: 1 = *ev filled, 0 = nothing complete yet (poll the fd for
 * POLLIN and call again), -1 = the stream ended without a word (the box
 * stopped, init went away) or init broke the protocol. Call until it
 * returns 0 before polling: frames may be buffered. */
int abc_term_next(abc_term_stream *s, abc_term_event *ev);
/* Sends input, a new window size, or a signal. 0 or -errno (-ETIMEDOUT when
 * init took nothing for two minutes, -EPIPE when it is gone). */
int abc_term_input(abc_term_stream *s, const void *data, size_t len);
int abc_term_send_resize(abc_term_stream *s, uint32_t cols, uint32_t rows);
int abc_term_send_signal(abc_term_stream *s, int sig);
/* Closes an attached background process's stdin (once its input is written). */
int abc_term_send_eof(abc_term_stream *s);
int abc_term_stream_fd(const abc_term_stream *s);
/* Frees the stream (not the fd: closing it detaches). */
void abc_term_stream_free(abc_term_stream *s);

#endif

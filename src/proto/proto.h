/* proto.h - the agentbox-init wire protocol, shared by agentbox-init (src/init)
 * and its host-side client (src/backend/initclient.c). libc only. The full
 * description with message flows is docs/protocol.md.
 *
 * Transport: a unix stream socket, ONE request per connection.
 *
 * Frame:   u32 type | u32 length | payload[length]
 * Field:   u32 tag  | u32 length | value[length]      (the payload is a sequence of fields)
 *
 * Every integer is little-endian. length <= ABP_MAX_PAYLOAD (1 MiB); a larger
 * length is a protocol error, never an allocation. Values by tag:
 *   u32 (4 bytes), u64 (8 bytes), str (the bytes then exactly one NUL, no NUL
 *   inside), bytes (raw). A known tag with a wrong length is an error; an
 *   unknown tag is skipped, so fields can be added later. A field given twice
 *   keeps the last value, except ENV and ARGV which repeat.
 *
 * Flows (C = client, I = init):
 *   PING:    C: PING                          I: OK{VERSION,PROTO}
 *   EXEC:    C: EXEC [DATA(0)* EOF]           I: DATA(1|2)* EXIT   or ERROR
 *            stdin frames only when EXEC has STDIN_STREAM=1; the client keeps
 *            the connection open until EXIT: closing it kills the exec.
 *            EXIT with AGAIN=1 (proto 4): the command left nothing behind
 *            and the session waits for another request on the connection
 *            (any type, as on a new one) for a while; without it the
 *            session hangs up after EXIT.
 *   READ:    C: READ                          I: DATA(1)* OK       or ERROR
 *   WRITE:   C: WRITE DATA(0)* EOF            I: OK                or ERROR (maybe early)
 *   LIST:    C: LIST                          I: ENTRY* OK         or ERROR
 *   STAT:    C: STAT                          I: ENTRY             or ERROR
 *   DELETE, MKDIR, RENAME, CHMOD, CHOWN, SYMLINK: I: OK           or ERROR
 *            CHMOD sets PATH's MODE (07777 bits); CHOWN sets its owner
 *            (OWNER) and/or group (GROUP), each a name of the box's
 *            /etc/passwd or /etc/group or a number; both follow a final
 *            symlink, as chmod(1) and chown(1) do. SYMLINK makes PATH a
 *            link to TO (stored as given). STAT with FLAGS
 *            ABP_S_NAMES adds OWNER and GROUP (names from the box's
 *            databases, absent for ids without an entry); every ENTRY
 *            carries UID and GID (an init before proto 3 sends neither).
 *   TERM_OPEN:   C: TERM_OPEN                 I: TERM              or ERROR
 *   TERM_LIST:   C: TERM_LIST                 I: TERM* OK          or ERROR
 *   TERM_CLOSE, TERM_RESIZE, TERM_SIGNAL, TERM_INPUT: I: OK        or ERROR
 *   TERM_ATTACH: C: TERM_ATTACH (DATA(0) | TERM_RESIZE | TERM_SIGNAL)*
 *                I: TERM DATA(1)* [EXIT] then hang-up, or ERROR
 *            the first DATA frames replay the terminal's ring buffer; EOF
 *            instead of EXIT: the terminal was closed. Closing the
 *            connection detaches; the terminal lives on.
 *            A background process (TERM_OPEN with PIPES=1) is the same but
 *            for its pipes: DATA(1) stdout, DATA(2) stderr (a ring each),
 *            TERM_INPUT may close its stdin, no RESIZE.
 *   RESERVE: C: RESERVE[SIZE]                 I: OK{SIZE,FREE}     or ERROR
 *            the balloon: init holds an unlinked file on the workdir's
 *            filesystem, allocated (fallocate, no data written) to SIZE
 *            bytes, so the box's own filesystem says ENOSPC before the host's
 *            does (core/diskguard.c); no SIZE = leave it as it is. OK's SIZE is
 *            what it holds, FREE what the box could write without it.
 *   GREP:    C: GREP                          I: MATCH* OK{TRUNCATED,TIMED_OUT} or ERROR
 *            searches the files named by GREP's repeated PATH fields (in
 *            that order; files only, no walk: the client lists and filters)
 *            for lines that match PATTERN (FLAGS: ABP_G_*), inside the box,
 *            so the box's cgroup pays for the regex. Skips a file that is no
 *            regular file, larger than SIZE, unreadable, or binary (a NUL in
 *            its first 8 KiB), and lines over 2,000 code points. A MATCH is
 *            {INDEX, LINE, DATA: the line without its break, invalid UTF-8
 *            replaced, cut to 200 code points ("..." ending a cut one)}. At
 *            most COUNT MATCHes: one more match ends the search with
 *            TRUNCATED=1. TIMEOUT_MS bounds the whole search, checked at
 *            every line (TIMED_OUT=1: what was found was sent); the search
 *            also stops when the client hangs up. A bad PATTERN is ERROR
 *            invalid_argument "Invalid regex pattern: MSG at position N".
 *   STATS:   C: STATS                         I: OK{MEMORY,MEMORY_MAX,PIDS,CPU_NS,OOM_KILLS}
 *            or ERROR: the usage of init's own cgroup (the pod's container
 *            on Kubernetes), v1 or v2, read from /proc/self/cgroup and
 *            /sys/fs/cgroup as init sees them; a counter it cannot read is
 *            absent; ERROR unavailable when it can read no memory usage.
 *   PORT:    C: PORT{PORT,TIMEOUT_MS}         I: OK, then raw bytes both ways; or ERROR
 *            init connects to 127.0.0.1:PORT, then [::1]:PORT, inside the box
 *            (never another address: it is no way out of the box's network
 *            mode), within TIMEOUT_MS (0 = 10 s); after OK the connection
 *            carries the TCP stream's bytes as they are, no frames, each
 *            side's end of input passed on as a half-close, until both
 *            ended. ERROR unavailable: nothing listens there (refused);
 *            timeout: no answer within TIMEOUT_MS. For a backend whose host
 *            cannot enter the box's network namespace (a pod).
 * Either side treats the other as untrusted: every decoder bounds-checks and
 * returns -EBADMSG on anything malformed. */
#ifndef AB_PROTO_H
#define AB_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* PING's PROTO. 2: EXEC and TERM_OPEN take USER; an init answering 1
 * ignores it (an unknown tag) and runs the command as root. 3: CHMOD,
 * CHOWN, and UID/GID (and on request OWNER/GROUP) in ENTRY; an older init
 * answers CHMOD and CHOWN with ERROR invalid_argument "unknown request". 4:
 * EXIT's AGAIN (a connection may carry several requests; an older init
 * never sends it) and PORT (an older init answers it as CHMOD above). */
#define ABP_PROTO_VERSION 4
#define ABP_HDR_SIZE      8
#define ABP_MAX_PAYLOAD   (1u << 20)    /* hard limit on one frame's payload */
#define ABP_CHUNK         (64u * 1024)  /* data bytes per DATA frame a sender emits */
#define ABP_MAX_ENTRIES   100000        /* most ENTRY frames one LIST answers */
#define ABP_DEFAULT_CAP   (1024 * 1024) /* default exec output cap per stream */
#define ABP_TIMEOUT_EXIT  124           /* exit_code reported when the timeout fired */

/* Frame types. */
enum {
        /* requests, client -> init */
        ABP_PING = 1,
        ABP_EXEC = 2,
        ABP_READ = 3,
        ABP_WRITE = 4,
        ABP_LIST = 5,
        ABP_STAT = 6,
        ABP_DELETE = 7,
        ABP_MKDIR = 8,
        ABP_RENAME = 9,
        ABP_CHMOD = 17, /* file operations too (after the terminals' range) */
        ABP_CHOWN = 18,
        ABP_SYMLINK = 19,
        ABP_TERM_OPEN = 10,
        ABP_TERM_LIST = 11,
        ABP_TERM_CLOSE = 12,
        ABP_TERM_RESIZE = 13,
        ABP_TERM_SIGNAL = 14,
        ABP_TERM_ATTACH = 15,
        ABP_TERM_INPUT = 16,
        ABP_RESERVE = 40, /* apart from the file operations' range */
        ABP_GREP = 41,
        ABP_WATCH = 42, /* a directory's changes, streamed (ABP_WATCH_EVENT) */
        ABP_STATS = 43, /* init's own cgroup's usage (abp_stats) */
        ABP_PORT = 44,  /* a TCP connection to the box's loopback (abp_dec_port) */
        /* streams, both ways */
        ABP_DATA = 0x100,
        ABP_EOF = 0x101,
        /* answers, init -> client */
        ABP_OK = 0x200,
        ABP_ERROR = 0x201,
        ABP_EXIT = 0x202,
        ABP_ENTRY = 0x203,
        ABP_TERM = 0x204,
        ABP_MATCH = 0x205,
        ABP_WATCH_EVENT = 0x206,
};

/* Field tags. */
enum {
        ABP_F_COMMAND = 1,       /* str */
        ABP_F_ENV = 2,           /* str "K=V", repeated */
        ABP_F_CWD = 3,           /* str */
        ABP_F_STDIN = 4,         /* bytes: inline stdin */
        ABP_F_STDIN_STREAM = 5,  /* u32 bool: DATA(0)... EOF frames follow */
        ABP_F_TIMEOUT_MS = 6,    /* u32, 0 = none */
        ABP_F_OUTPUT_CAP = 7,    /* u64, 0 = ABP_DEFAULT_CAP */
        ABP_F_ARGV = 8,          /* str, repeated: argv[0], argv[1], ... (instead of COMMAND) */
        ABP_F_USER = 9,          /* str: EXEC, TERM_OPEN: who runs it, as Docker's USER ("name",
                                  * "uid", "uid:gid", "name:group", "uid:group"); absent or
                                  * empty = root, as before */
        ABP_F_PATH = 16,         /* str */
        ABP_F_OFFSET = 17,       /* u64 */
        ABP_F_LENGTH = 18,       /* u64, 0 = to the end */
        ABP_F_FLAGS = 19,        /* u32, ABP_W_* / ABP_RECURSIVE / ABP_PARENTS */
        ABP_F_MODE = 20,         /* u32 permission bits */
        ABP_F_DEPTH = 21,        /* u32 */
        ABP_F_TO = 22,           /* str: RENAME target, SYMLINK's link target */
        ABP_F_PATTERN = 23,      /* str: GREP's regular expression (PCRE2) */
        ABP_F_INDEX = 24,        /* u32: MATCH: which of GREP's PATHs (0-based) */
        ABP_F_LINE = 25,         /* u64: MATCH: line number (1-based) */
        ABP_F_COUNT = 26,        /* u32: GREP: most MATCH frames to send */
        ABP_F_STREAM = 32,       /* u32: 0 stdin/upload, 1 stdout, 2 stderr */
        ABP_F_DATA = 33,         /* bytes */
        ABP_F_CODE = 48,         /* str: error code name, see ab_code_name() */
        ABP_F_MESSAGE = 49,      /* str */
        ABP_F_VERSION = 50,      /* str */
        ABP_F_PROTO = 51,        /* u32 */
        ABP_F_EXIT_CODE = 64,    /* u32 holding an int32 */
        ABP_F_TIMED_OUT = 65,    /* u32 bool */
        ABP_F_TRUNCATED = 66,    /* u32 bool */
        ABP_F_DURATION_MS = 67,  /* u64 */
        ABP_F_STDOUT_BYTES = 68, /* u64 */
        ABP_F_STDERR_BYTES = 69, /* u64 */
        ABP_F_AGAIN = 70,        /* u32 bool: EXIT: the session takes another request here */
        ABP_F_TYPE = 80,         /* u32 ABP_T_* */
        ABP_F_SIZE = 81,         /* u64 */
        ABP_F_MTIME = 82,        /* u64 holding an int64, seconds */
        ABP_F_LINK = 83,         /* str: symlink target */
        ABP_F_UID = 84,          /* u32: ENTRY: owner's uid (in the box) */
        ABP_F_GID = 85,          /* u32: ENTRY: group's gid (in the box) */
        ABP_F_OWNER = 86,        /* str: CHOWN's new owner; STAT's answer: the owner's name */
        ABP_F_GROUP = 87,        /* str: CHOWN's new group; STAT's answer: the group's name */
        ABP_F_TERM_ID = 96,      /* str: "t_" + hex */
        ABP_F_COLS = 97,         /* u32 */
        ABP_F_ROWS = 98,         /* u32 */
        ABP_F_SIGNAL = 99,       /* u32 signal number */
        ABP_F_CREATED_MS = 100,  /* u64 unix milliseconds */
        ABP_F_RUNNING = 101,     /* u32 bool */
        ABP_F_PID = 102,         /* u32: the terminal's process (in the box's pid namespace) */
        ABP_F_PIPES = 103,       /* u32 bool: TERM_OPEN, TERM: a background process (pipes, no
                                  * pty); TERM_LIST: list those instead of terminals */
        ABP_F_TAG = 104,         /* str: TERM_OPEN, TERM: the client's label, kept with it */
        ABP_F_CLOSE_STDIN = 105, /* u32 bool: TERM_OPEN, TERM_INPUT of a process: close its
                                  * stdin (after DATA) */
        ABP_F_ENDED_MS = 106,    /* u64: TERM: when it ended (unix ms) */
        ABP_F_SNAPSHOT = 107,    /* u32 bool: TERM_ATTACH: the kept output, then EOF */
        ABP_F_MERGE = 108,       /* u32 bool: TERM_OPEN of a process: stderr into stdout */
        ABP_F_LINES = 109,       /* u64: TERM: newlines a process wrote to stdout in all */
        ABP_F_PORT = 110,        /* u32: PORT: the TCP port (1..65535) on the box's loopback */
        ABP_F_FREE = 90,         /* u64: RESERVE's answer, bytes the box could write */
        ABP_F_MEMORY = 91,       /* u64: STATS' answer: memory in use (bytes) */
        ABP_F_MEMORY_MAX = 92,   /* u64: STATS' answer: memory limit (bytes; absent = none) */
        ABP_F_PIDS = 93,         /* u64: STATS' answer: tasks in the cgroup */
        ABP_F_CPU_NS = 94,       /* u64: STATS' answer: CPU time used (ns) */
        ABP_F_OOM_KILLS = 95,    /* u64: STATS' answer: OOM kills in the cgroup */
};

#define ABP_TERM_ID_MAX  40           /* longest terminal id ("t_" + hex) */
#define ABP_TERM_DIM_MAX 1000         /* most columns or rows of a terminal */
#define ABP_TERM_REQ_MAX (60u * 1024) /* most bytes of one terminal request frame */
#define ABP_TERM_TAG_MAX (8u * 1024)  /* longest TAG of a terminal or process */

/* FLAGS bits: WRITE uses ABP_W_*, DELETE uses ABP_RECURSIVE, MKDIR ABP_PARENTS,
 * READ ABP_R_NOFOLLOW: none of the last DEPTH components of PATH is followed
 * when it is a symlink (the read fails with ELOOP), so a file swapped for a
 * link after it was listed is not read through it. An init that predates the
 * flag ignores it and follows as a plain READ does. */
enum { ABP_W_MKPARENTS = 1, ABP_W_APPEND = 2, ABP_W_EXCL = 4 };
enum { ABP_RECURSIVE = 1, ABP_PARENTS = 1 };
enum { ABP_R_NOFOLLOW = 1 };
/* WATCH: PATH (a directory), FLAGS ABP_RECURSIVE (its subdirectories too,
 * those made later included, down to ABP_WATCH_DEPTH_MAX levels and at most
 * ABP_WATCH_DIRS_MAX directories). init answers OK once it watches, then a
 * WATCH_EVENT per change, PATH the name relative to the watched directory
 * and FLAGS one of ABP_WATCH_*, until the client hangs up. */
enum {
        ABP_WATCH_CREATE = 1, /* made, or moved in */
        ABP_WATCH_WRITE = 2,
        ABP_WATCH_REMOVE = 3,
        ABP_WATCH_RENAME = 4, /* moved away (its new name, if watched, is a CREATE) */
        ABP_WATCH_CHMOD = 5,  /* attributes changed */
};
#define ABP_WATCH_DEPTH_MAX 16
#define ABP_WATCH_DIRS_MAX  4096
/* STAT's FLAGS: ABP_S_NAMES asks for OWNER and GROUP names in the answer. */
enum { ABP_S_NAMES = 1 };
/* GREP's FLAGS. */
enum { ABP_G_LITERAL = 1, ABP_G_CASE_SENSITIVE = 2 };
/* GREP's fixed bounds (see the flow above). */
#define ABP_GREP_LINE_SUMMARY 200     /* code points of a matching line shown */
#define ABP_GREP_LINE_MAX     2000    /* longer lines are skipped (ReDoS, minified files) */
#define ABP_GREP_BINARY_SNIFF 8192    /* a NUL in these first bytes: a binary file */
#define ABP_GREP_MATCH_LIMIT  1000000 /* PCRE2 backtracking budget per line: over it, no match */

/* ENTRY types (same values as abc_ftype). */
enum { ABP_T_FILE = 1, ABP_T_DIR = 2, ABP_T_SYMLINK = 3, ABP_T_OTHER = 4 };

/* ---- decoded messages; pointers point into the frame they came from ---- */

typedef struct abp_frame {
        uint32_t type;
        uint32_t len;
        const uint8_t *payload; /* valid until the next abp_reader call */
} abp_frame;

/* Exactly one of command and argv: a request with both or neither does not
 * decode (an empty argv cannot be sent: it is no ARGV field at all). */
typedef struct abp_exec_req {
        const char *command; /* run by the box's shell (bash, else sh), or NULL */
        const char **argv;   /* or n_argv >= 1 words, NULL-terminated; owned like env */
        size_t n_argv;
        const char **env; /* n_env entries, NULL-terminated; owned: abp_exec_req_clear() */
        size_t n_env;
        const char *cwd;  /* or NULL */
        const char *user; /* ABP_F_USER, or NULL */
        const void *stdin_data;
        size_t stdin_len;
        bool stdin_stream;
        uint32_t timeout_ms;
        uint64_t output_cap;
} abp_exec_req;

/* READ WRITE LIST STAT DELETE MKDIR RENAME CHMOD CHOWN SYMLINK: the fields each one
 * uses. */
typedef struct abp_file_req {
        const char *path;
        const char *to;
        const char *owner, *group; /* CHOWN: at least one */
        uint64_t offset, length;
        uint32_t flags, mode, depth;
} abp_file_req;

typedef struct abp_data {
        uint32_t stream;
        const void *data;
        size_t len;
} abp_data;

typedef struct abp_ok {
        const char *version; /* or NULL */
        uint32_t proto;
} abp_ok;

/* STATS' answer (an OK frame): the usage of init's own cgroup, as init sees
 * it (v1 or v2). A counter the cgroup does not have is absent: its has_*
 * is false. */
typedef struct abp_stats {
        uint64_t memory, memory_max, pids, cpu_ns, oom_kills;
        bool has_memory, has_memory_max, has_pids, has_cpu_ns, has_oom_kills;
} abp_stats;

typedef struct abp_error {
        const char *code;
        const char *message;
} abp_error;

typedef struct abp_exit {
        int32_t exit_code;
        bool timed_out, truncated;
        uint64_t duration_ms, stdout_bytes, stderr_bytes;
        bool again; /* the session reads another request on this connection */
} abp_exit;

typedef struct abp_entry {
        const char *path;
        uint32_t type, mode;
        uint64_t size;
        int64_t mtime;
        const char *link; /* or NULL */
        bool has_ids;     /* UID and GID were sent */
        uint32_t uid, gid;
        const char *owner, *group; /* names, or NULL */
} abp_entry;

/* GREP. Decoded: pattern and paths point into the frame; the paths array is
 * allocated by the decoder (abp_grep_req_clear). */
typedef struct abp_grep_req {
        const char *pattern; /* its bytes; may hold NULs */
        size_t pattern_len;
        uint32_t flags, count, timeout_ms; /* flags: ABP_G_* */
        uint64_t size_max;
        const char **paths;
        size_t n_paths;
} abp_grep_req;

/* MATCH: one matching line of GREP. */
typedef struct abp_match {
        uint32_t index; /* into the request's paths */
        uint64_t line;  /* 1-based */
        const void *text;
        size_t len;
} abp_match;

/* TERM_OPEN LIST CLOSE RESIZE SIGNAL ATTACH INPUT: the fields each one uses
 * (OPEN: argv, env, cwd, user, cols, rows; RESIZE: id, cols, rows; SIGNAL: id,
 * signal; CLOSE, ATTACH: id; INPUT: id, data). argv and env are allocated by the decoder
 * (release with abp_term_req_clear); n_argv 0 = the box's login shell. */
typedef struct abp_term_req {
        const char *id;
        const char **argv;
        size_t n_argv;
        const char **env;
        size_t n_env;
        const char *cwd;
        const char *user; /* ABP_F_USER, or NULL */
        uint32_t cols, rows, signal;
        const void *data; /* INPUT: bytes for the terminal (ABP_F_DATA) */
        size_t data_len;
        bool pipes;          /* OPEN: a background process; LIST: list processes */
        const char *command; /* OPEN of a process: run by the box's shell (-c), not argv */
        bool merge;          /* OPEN of a process: its stderr goes to stdout */
        bool snapshot;       /* ATTACH: the kept output, then EOF (not attached) */
        uint32_t timeout_ms; /* OPEN of a process: killed (its session) after this; 0 = never */
        bool close_stdin;    /* OPEN, INPUT of a process: its stdin is closed */
        const char *tag;     /* OPEN: ABP_F_TAG, at most ABP_TERM_TAG_MAX bytes, or NULL */
} abp_term_req;

/* A terminal, as TERM answers describe it. argv allocated by the decoder
 * (abp_term_info_clear). */
typedef struct abp_term_info {
        const char *id;
        const char **argv;
        size_t n_argv;
        uint32_t cols, rows, pid;
        uint64_t created_ms;
        bool running;
        bool has_exit; /* exit_code is known (the process exited) */
        int32_t exit_code;
        bool pipes;        /* a background process (DATA(1) stdout, DATA(2) stderr) */
        bool timed_out;    /* killed at its timeout (exit_code 124) */
        uint64_t ended_ms; /* when it ended (unix ms), 0 while it runs */
        uint64_t lines;    /* a process: newlines written to stdout since it started */
        const char *tag;   /* ABP_F_TAG, or NULL */
} abp_term_info;

/* ---- encoding ---- */

/* A growable byte buffer holding zero or more complete frames (an output
 * queue). Zero-initialise it; release with abp_buf_free. */
typedef struct abp_buf {
        uint8_t *p;
        size_t len, cap;
        size_t frame;  /* offset of the frame being built */
        bool overflow; /* the frame being built went over ABP_MAX_PAYLOAD */
} abp_buf;

void abp_buf_free(abp_buf *b);
/* Drops the first n bytes (those sent). */
void abp_buf_consume(abp_buf *b, size_t n);

/* Starts a frame at the end of b; add fields; abp_frame_end closes it.
 * abp_frame_end returns 0, or -EMSGSIZE (and removes the frame) when the
 * payload went over ABP_MAX_PAYLOAD. */
void abp_frame_begin(abp_buf *b, uint32_t type);
int abp_frame_end(abp_buf *b) __attribute__((warn_unused_result));
void abp_put_u32(abp_buf *b, uint32_t tag, uint32_t v);
void abp_put_u64(abp_buf *b, uint32_t tag, uint64_t v);
void abp_put_str(abp_buf *b, uint32_t tag, const char *s);
void abp_put_bytes(abp_buf *b, uint32_t tag, const void *p, size_t n);

/* Whole-message encoders: append one frame to b. 0 or -EMSGSIZE. */
int abp_enc_empty(abp_buf *b, uint32_t type); /* PING, EOF, OK without fields */
int abp_enc_exec(abp_buf *b, const abp_exec_req *m);
int abp_enc_file(abp_buf *b, uint32_t type, const abp_file_req *m);
int abp_enc_data(abp_buf *b, uint32_t stream, const void *data, size_t len);
int abp_enc_ok(abp_buf *b, const abp_ok *m);
int abp_enc_error(abp_buf *b, const char *code, const char *message);
int abp_enc_exit(abp_buf *b, const abp_exit *m);
int abp_enc_entry(abp_buf *b, const abp_entry *m);
int abp_enc_term_req(abp_buf *b, uint32_t type, const abp_term_req *m);
int abp_enc_term(abp_buf *b, const abp_term_info *m);
int abp_enc_grep(abp_buf *b, const abp_grep_req *m);
int abp_enc_match(abp_buf *b, const abp_match *m);

/* ---- decoding: 0, or -EBADMSG (wrong type, malformed, required field missing) ---- */

typedef struct abp_field {
        uint32_t tag;
        uint32_t len;
        const uint8_t *val;
} abp_field;

/* Iterates over the fields of f: 1 = *out filled, 0 = end, -EBADMSG. *off starts at 0. */
int abp_field_next(const abp_frame *f, size_t *off, abp_field *out);

/* abp_dec_exec allocates m->env and m->argv: release with abp_exec_req_clear. */
int abp_dec_exec(const abp_frame *f, abp_exec_req *m) __attribute__((warn_unused_result));
void abp_exec_req_clear(abp_exec_req *m);
int abp_dec_file(const abp_frame *f, abp_file_req *m) __attribute__((warn_unused_result));
int abp_dec_data(const abp_frame *f, abp_data *m) __attribute__((warn_unused_result));
int abp_dec_ok(const abp_frame *f, abp_ok *m) __attribute__((warn_unused_result));
int abp_dec_error(const abp_frame *f, abp_error *m) __attribute__((warn_unused_result));
/* PORT: PORT in 1..65535 is required; TIMEOUT_MS (0 when absent). */
int abp_dec_port(const abp_frame *f, uint32_t *port, uint32_t *timeout_ms)
    __attribute__((warn_unused_result));
/* STATS' answer: an OK frame with ABP_F_MEMORY... (any may be absent). */
int abp_dec_stats(const abp_frame *f, abp_stats *m) __attribute__((warn_unused_result));
int abp_dec_exit(const abp_frame *f, abp_exit *m) __attribute__((warn_unused_result));
int abp_dec_entry(const abp_frame *f, abp_entry *m) __attribute__((warn_unused_result));
/* Checks what the type needs: an id (all but OPEN and LIST), cols and rows in
 * 1..ABP_TERM_DIM_MAX (RESIZE; OPEN when given), a signal (SIGNAL). */
int abp_dec_term_req(const abp_frame *f, abp_term_req *m) __attribute__((warn_unused_result));
void abp_term_req_clear(abp_term_req *m);
int abp_dec_term(const abp_frame *f, abp_term_info *m) __attribute__((warn_unused_result));
void abp_term_info_clear(abp_term_info *m);
/* GREP needs a PATTERN; abp_dec_grep allocates m->paths (abp_grep_req_clear). */
int abp_dec_grep(const abp_frame *f, abp_grep_req *m) __attribute__((warn_unused_result));
void abp_grep_req_clear(abp_grep_req *m);
/* MATCH needs INDEX, LINE and DATA. */
int abp_dec_match(const abp_frame *f, abp_match *m) __attribute__((warn_unused_result));
/* True for a terminal request type (TERM_OPEN..TERM_INPUT). */
bool abp_is_term_request(uint32_t type);

/* True for a request type (PING..TERM_INPUT, RESERVE, GREP, WATCH, STATS, PORT). */
bool abp_is_request(uint32_t type);

/* ---- reading frames from a byte stream ---- */

/* Accumulates bytes and cuts them into frames; holds at most one maximal
 * frame (ABP_HDR_SIZE + ABP_MAX_PAYLOAD bytes). Zero-initialise; release with
 * abp_reader_free. */
typedef struct abp_reader {
        uint8_t *p;
        size_t start, end, cap;
} abp_reader;

void abp_reader_free(abp_reader *r);
/* One read(2) from fd into free space: >0 bytes read, 0 at EOF, -errno
 * (-EAGAIN on a non-blocking fd, -ENOBUFS when a whole frame is already
 * buffered: call abp_reader_next first). */
ssize_t abp_reader_fill(abp_reader *r, int fd);
/* Appends bytes (for tests and non-fd transports). -ENOBUFS when full. */
int abp_reader_feed(abp_reader *r, const void *data, size_t len);
/* 1 = *f is the next frame (valid until the next call on r), 0 = need more
 * bytes, -EBADMSG = the stream is corrupt (oversize length). */
int abp_reader_next(abp_reader *r, abp_frame *f);
/* True when bytes of an incomplete frame are buffered. */
bool abp_reader_partial(const abp_reader *r);

/* ---- blocking helpers (poll-based, so they also work on O_NONBLOCK fds) ---- */

/* poll(2) for events on fd, EINTR retried: 0, -ETIMEDOUT after timeout_ms
 * (-1 = forever), -errno. */
int abp_wait_fd(int fd, short events, int timeout_ms);
/* Sends every byte queued in b (MSG_NOSIGNAL) and empties it. timeout_ms
 * bounds each wait for the peer (-1 = forever). 0 or -errno, -ETIMEDOUT. */
int abp_send(int fd, abp_buf *b, int timeout_ms) __attribute__((warn_unused_result));
/* Receives the next frame into *f. 0, -ECONNRESET at EOF, -EBADMSG,
 * -ETIMEDOUT when nothing arrived for timeout_ms (-1 = forever), -errno. */
int abp_recv(int fd, abp_reader *r, abp_frame *f, int timeout_ms)
    __attribute__((warn_unused_result));

#endif

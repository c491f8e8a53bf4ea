/* mock_int.h - what the files of the mock backend share (mock.c: the
 * backend ops and the kept state; mock_rules.c: the expectations file;
 * mock_files.c: boxes' file trees and the calls log; mock_serve.c: the init
 * protocol answered in-process). Not for callers of backends. Everything
 * marked "under mu" needs the backend's lock held. */
#ifndef AB_BACKEND_MOCK_INT_H
#define AB_BACKEND_MOCK_INT_H

#include "backend/backend.h"

#include <pthread.h>
#include <regex.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#define MOCK_PATH_MAX         4096
#define MOCK_FILES_MAX        10000 /* files and folders of one box (lookups are linear) */
#define MOCK_IO_MS            30000 /* longest wait for the client between frames */
#define MOCK_GREP_PATTERN_MAX 1000  /* bytes of a GREP pattern (the search runs in the server) */
#define MOCK_UNMATCHED        127   /* a command no rule matches: as a shell's "not found" */
/* File bytes it holds in the server's memory: per box (under its disk
 * limit) and for all boxes together, so boxes that are only a test's
 * fixtures cannot grow the server without bound. */
#define MOCK_BOX_BYTES   (64ull << 20)
#define MOCK_TOTAL_BYTES (512ull << 20)

/* ---- expectations ---- */

typedef struct rule {
        char *command; /* exact text, or NULL */
        regex_t re;    /* else this (has_re) */
        bool has_re;
        char *out, *err;
        size_t out_len, err_len;
        int exit_code;
        uint32_t delay_ms;
} rule;

typedef struct rules {
        rule *v;
        size_t n;
        struct timespec mtime; /* of the file they were read from */
        off_t size;
} rules;

/* ---- boxes ---- */

typedef struct node {
        char *path; /* absolute, normalised: "/", "/workspace/a.txt" */
        bool dir;
        uint8_t *data;
        size_t len;
        uint32_t mode;
        int64_t mtime;
} node;

/* ---- background processes (mock_serve.c) ---- */

#define MOCK_PROCS_RUNNING 64            /* as init's keeper: running at once */
#define MOCK_PROCS_KEPT    96            /* with the exited ones */
#define MOCK_PROC_RING     (128u * 1024) /* bytes kept per stream, as init's rings */

/* The last MOCK_PROC_RING bytes written to a stream, and how many were. */
typedef struct mring {
        char *p;
        size_t len;
        uint64_t total;
} mring;

/* A background process answered from the expectations: it "runs" until
 * end_ms (the rule's delay, or the request's timeout), then its output
 * enters the rings and it exits with the rule's code; a signal or a close
 * ends it sooner (128+N, no output). */
typedef struct mproc {
        char id[48];
        char **argv; /* as init reports it: [shell, "-c", command] or the argv */
        char *tag;   /* or NULL */
        uint32_t pid;
        uint64_t created_ms, end_ms, ended_ms;
        bool ended, timed_out, stdin_closed, merge, will_time_out;
        int code, exit_code; /* the rule's; the one reported once ended */
        char *out, *err;     /* what it writes at its end (the tails a ring keeps) */
        size_t out_len, err_len;
        uint64_t out_lines; /* newlines in all of out (and err when merged) */
        mring ring[2];      /* stdout, stderr */
        uint64_t lines, stdin_bytes;
        unsigned clients; /* attached sessions */
} mproc;

typedef struct mbox {
        char *id;
        ab_box_status status;
        ab_limits limits;
        int64_t created_at, started_at;
        node *nodes;
        size_t n_nodes, cap_nodes;
        uint64_t bytes;  /* file data held, against disk_cap() */
        uint64_t *total; /* the backend's count of every box's bytes */
        mproc **procs;   /* background processes, oldest first */
        size_t n_procs;
        uint32_t next_pid;
} mbox;

typedef struct conn {
        struct conn *next;
        int fd;
} conn;

typedef struct mock {
        ab_backend base;
        pthread_mutex_t mu; /* boxes, their files, rules, conns */
        pthread_cond_t idle;
        mbox *boxes;
        size_t n_boxes, cap_boxes;
        char *expect_path;
        rules rules;
        int log_fd;
        conn *conns; /* being served */
        size_t n_conns;
        uint64_t bytes; /* file data of every box */
        char *state_path;
        bool closing;
} mock;

/* What a session thread is given (mk_connect); freed by the thread. */
typedef struct serve_arg {
        mock *m;
        conn c;
        char box[AB_ID_MAX + 1];
} serve_arg;

/* ---- mock_rules.c ---- */

/* Reads the expectations file ({"commands": [rule, ...]}, backend.h) into
 * *out. AB_E_INVALID naming the file and the rule. */
int mock_rules_load(const char *path, rules *out, ab_err **err);
void mock_rules_clear(rules *r);
/* Rereads m's file when it changed; a broken new version keeps the old
 * rules (and is logged). Under mu. */
void mock_rules_refresh(mock *m);

/* ---- mock_files.c ---- */

/* Appends {"time_ms", "box", "op", ...fields} to the calls log. Steals fields. */
void mock_log_call(mock *m, const char *box, const char *op, json_t *fields);
/* The box, or NULL. Under mu. */
mbox *mock_box_get(mock *m, const char *id);
void mock_box_clear(mbox *x);
/* The node at a normalised path, or NULL; add one (dir or file); drop the
 * i-th (its bytes leave the counts). Under mu. */
node *mock_node_get(mbox *x, const char *path);
node *mock_node_add(mbox *x, const char *path, bool dir, uint32_t mode);
void mock_node_drop(mbox *x, size_t i);
/* A box path as the box's init resolves it: relative to /workspace, "."
 * and ".." resolved, ".." at the root staying there. 0 or -EINVAL,
 * -ENAMETOOLONG. */
int mock_path_norm(const char *in, char out[MOCK_PATH_MAX]);
/* p is dir or lies below it (both normalised). */
bool mock_path_under(const char *p, const char *dir);
/* 0 when path's folder exists (made, with its parents, when mkparents),
 * else -ENOENT, -ENOTDIR, -ENOSPC. Under mu. */
int mock_ensure_parent(mbox *x, const char *path, bool mkparents);
/* The bytes box x may hold. */
uint64_t mock_disk_cap(const mbox *x);

/* ---- mock_serve.c ---- */

/* Ends and forgets every background process of x (its stop or delete:
 * attached sessions see the box gone and hang up). Under mu. */
void mock_procs_clear(mbox *x);
/* x's processes for the state file ({"next_pid", "list": [...]}, output in
 * base64), and back: 0, or -1 for a malformed one (x may then hold some:
 * the caller drops the box). NULL j: none kept. Under mu, or before the
 * backend serves. */
json_t *mock_procs_save(const mbox *x);
int mock_procs_load(mbox *x, const json_t *j);

/* Thread body: answers one init-protocol request on a->c.fd for box
 * a->box, then unlinks a->c from m->conns, closes the fd and frees a. */
void *mock_serve_main(void *arg);

#endif

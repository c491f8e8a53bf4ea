/* toolcall.h - an agent tool run in a box as the caller (kit/toolcall.c):
 * the box kept in use (running, not idle-stopped) for the call, its file
 * operations and execs through the manager's doors. One door for REST's
 * tool routes, MCP and the chat's agent loop. */
#ifndef AB_KIT_TOOLCALL_H
#define AB_KIT_TOOLCALL_H

#include "kit/server.h"

/* How a caller bounds a tool call; a zeroed struct (with cancel_fd -1) or
 * NULL: no bounds but the tools' own. */
typedef struct kit_tool_opts {
        bool (*gone)(void *ud); /* or NULL: true when nobody waits any more (a grep stops) */
        void *gone_ud;
        int64_t deadline_ms; /* CLOCK_MONOTONIC ms, or 0: an exec's timeout is cut to what is
                              * left (at least a second) */
        int cancel_fd;       /* or -1: an exec ends when this fd reports a hang-up
                              * (abc_exec_req's cancel_fd: the write end of a pipe whose
                              * reader is gone) */
} kit_tool_opts;

/* Runs tool `name` with args (borrowed) in box id of scope, bounded by o
 * (may be NULL). Errors as ab_tool_run's, plus the manager's for the box
 * (AB_E_NOT_FOUND for a box of another app). */
int kit_tool_call(ab_server *s, const char *scope, const char *id, const char *name, json_t *args,
                  const kit_tool_opts *o, ab_tool_result *out, ab_err **err);

#endif

/* toolcall.h - an agent tool run in a box as the caller (kit/toolcall.c):
 * the box kept in use (running, not idle-stopped) for the call, its file
 * operations and execs through the manager's doors. One door for REST's
 * tool routes, MCP and the chat's agent loop. */
#ifndef AB_KIT_TOOLCALL_H
#define AB_KIT_TOOLCALL_H

#include "kit/server.h"

/* Runs tool `name` with args (borrowed) in box id of scope. gone (may be
 * NULL) tells a long tool that nobody waits any more. Errors as
 * ab_tool_run's, plus the manager's for the box (AB_E_NOT_FOUND for a box
 * of another app). */
int kit_tool_call(ab_server *s, const char *scope, const char *id, const char *name, json_t *args,
                  bool (*gone)(void *ud), void *gone_ud, ab_tool_result *out, ab_err **err);

#endif

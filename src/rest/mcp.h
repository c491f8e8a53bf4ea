/* mcp.h - the Model Context Protocol server: JSON-RPC 2.0 with initialize,
 * ping, tools/list and tools/call. One dispatcher for both transports: POST
 * /mcp (Streamable HTTP, with its sessions, in mcp.c) and `agentbox mcp` on
 * stdio (cli/mcp_stdio.c). The tools are the box lifecycle (sandbox_create,
 * sandbox_list, sandbox_stop, sandbox_delete) and every agent tool of
 * tools/tools.h, each with arguments that pick its box (sandbox_id, or keys
 * to acquire one). See docs/api.md "MCP". Thread-safe. */
#ifndef AB_MCP_H
#define AB_MCP_H

#include "rest/rest.h"

/* Protocol versions spoken, newest first. */
#define AB_MCP_VERSION_LATEST "2025-06-18"

/* One client connection: a stdio session, or one HTTP request of a session. */
typedef struct ab_mcp_conn {
        ab_server *srv;    /* the service pieces (its HTTP daemon need not run) */
        const char *scope; /* NULL = admin; else the app_id every call is confined to */
        char version[16];  /* set by a successful initialize */
        ab_req *req;       /* the HTTP request carrying the message (POST /mcp), or NULL (stdio):
                            * in a fleet, calls about another node's box go to it as its caller */
} ab_mcp_conn;

/* True when v is a protocol version this server speaks. */
bool ab_mcp_version_supported(const char *v);

/* Handles one JSON-RPC message or batch (borrowed). Returns the answer to
 * send (a new reference), or NULL when there is none (notifications, and
 * responses from the client). Errors are JSON-RPC error answers. */
json_t *ab_mcp_handle(ab_mcp_conn *c, json_t *msg);

/* Same from text (one stdio line, one HTTP body); bad JSON is answered with
 * a -32700 error. */
json_t *ab_mcp_handle_text(ab_mcp_conn *c, const char *buf, size_t len);

/* A JSON-RPC error answer; id is borrowed (NULL = null). */
json_t *ab_mcp_error(json_t *id, int code, const char *fmt, ...) AB_PRINTF(3, 4);

#endif

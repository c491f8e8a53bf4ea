/* docker_api.h - a small client of the Docker Engine API (libcurl on the
 * engine's unix socket, JSON with jansson), for the Docker backend.
 *
 * Requests go to the versioned API (/v1.41, Docker 20.10 and later), so
 * the answers keep one shape whatever the engine's version. Thread-safety:
 * one ab_dapi serves every thread; it keeps a few idle curl handles (each
 * with its open connection to the engine) and hands one to each call, so a
 * call costs no new connection. */
#ifndef AB_DOCKER_API_H
#define AB_DOCKER_API_H

#include "base/buf.h"
#include "base/err.h"

#include <jansson.h>
#include <stdint.h>

#define AB_DAPI_VERSION "v1.41"

typedef struct ab_dapi ab_dapi;

/* Opens a client of the engine at `host`, spelled as DOCKER_HOST is
 * ("unix:///path"); NULL or "" = $DOCKER_HOST, else
 * unix:///var/run/docker.sock. AB_E_UNSUPPORTED for tcp:// and other
 * schemes (the backend needs the engine on this host). Does not connect. */
int ab_dapi_open(const char *host, ab_dapi **out, ab_err **err);
void ab_dapi_free(ab_dapi *d);

/* The engine's socket path. */
const char *ab_dapi_socket(const ab_dapi *d);

typedef struct ab_dapi_res {
        long status;  /* HTTP status */
        json_t *json; /* the body parsed as JSON, or NULL (empty, or not JSON) */
        ab_buf body;  /* the raw body */
} ab_dapi_res;

void ab_dapi_res_clear(ab_dapi_res *r);

/* One request: method ("GET", "POST", "DELETE", "PUT"), path below the API
 * version with its query (e.g. "/containers/json?all=1"), an optional JSON
 * body (not consumed). timeout_ms 0 = 60 s. Returns 0 when the engine
 * answered, whatever the status (res then holds the answer; clear it);
 * -1 with AB_E_UNAVAILABLE when it could not be reached or did not answer
 * in time. */
int ab_dapi_call(ab_dapi *d, const char *method, const char *path, const json_t *body,
                 uint32_t timeout_ms, ab_dapi_res *res, ab_err **err);

/* The engine's explanation of an error answer: the body's "message", else
 * the body's text, else "HTTP <status>". Valid while res is. */
const char *ab_dapi_message(const ab_dapi_res *res);

/* s escaped for a URL's query or path (caller frees). */
char *ab_dapi_escape(const char *s);

#endif

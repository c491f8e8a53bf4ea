/* connectrpc.h - the Connect protocol (connectrpc.com/docs/protocol) with its
 * JSON codec, as E2B's envd speaks it to its SDK: unary calls are a POST of
 * application/json answered with JSON (an error: a non-2xx status and
 * {"code","message"}); streaming calls carry envelopes (application/
 * connect+json): one flag byte, a 4-byte big-endian length, the JSON
 * message; a stream ends with an envelope flagged 0x02 holding {} or
 * {"error":{"code","message"}}. Pure functions, no I/O: the fronts write
 * the bytes. */
#ifndef AB_CONNECTRPC_H
#define AB_CONNECTRPC_H

#include "base/buf.h"
#include "base/err.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#define CRPC_FLAG_END        0x02
#define CRPC_FLAG_COMPRESSED 0x01
/* The largest message accepted in a request envelope. */
#define CRPC_MAX_MESSAGE (16u << 20)

/* Connect's error code name for an agentbox error code ("not_found", ...). */
const char *crpc_code_of(ab_code c);
/* The HTTP status of a unary error with Connect code name `code`. */
unsigned crpc_http_status(const char *code);

/* Appends one envelope of j (compact JSON) to b with flags. Steals j. */
void crpc_envelope(ab_buf *b, unsigned flags, json_t *j);
/* Appends the end-of-stream envelope: {} when code is NULL, else
 * {"error":{"code","message"}}. */
void crpc_end(ab_buf *b, const char *code, const char *message);

/* Parses the request message of a call: a bare JSON object (unary) or, when
 * `enveloped`, the first envelope of body (a server-streaming call's only
 * message). An empty body is {}. AB_E_INVALID for anything else (a
 * compressed envelope, truncated frames, not an object). */
int crpc_parse_request(const char *body, size_t len, bool enveloped, json_t **out, ab_err **err);
/* Splits a client stream (a sequence of envelopes) into its messages:
 * *out is a JSON array of the objects, the end-of-stream envelope (if any)
 * ends it. AB_E_INVALID as above. */
int crpc_parse_stream(const char *body, size_t len, json_t **out, ab_err **err);

/* Base64 (RFC 4648, with padding), as protobuf's JSON mapping writes bytes.
 * crpc_b64_decode accepts the URL-safe alphabet and missing padding too;
 * -1 for anything else. *out is NUL-terminated for convenience. */
char *crpc_b64_encode(const void *data, size_t len);
int crpc_b64_decode(const char *s, char **out, size_t *len);

#endif

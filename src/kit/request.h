/* request.h - reading a request (kit/request.c): its query, headers and
 * JSON body, typed fields, and the JSON views every front shows (a box). */
#ifndef AB_KIT_REQUEST_H
#define AB_KIT_REQUEST_H

#include "kit/server.h"

/* A query-string parameter, or NULL. */
const char *req_query(ab_req *r, const char *key);
/* A request header, or NULL. */
const char *req_header(ab_req *r, const char *key);

/* Parses the JSON body: NULL body = {}; not an object or bad JSON = AB_E_INVALID. */
int req_json(ab_req *r, json_t **out, ab_err **err);

/* Field readers: absent fields leave *out unchanged and return 0; a wrong
 * type is AB_E_INVALID naming the field. */
int field_str(json_t *o, const char *name, const char **out, ab_err **err);
int field_int(json_t *o, const char *name, int64_t *out, bool *present, ab_err **err);
int field_num(json_t *o, const char *name, double *out, bool *present, ab_err **err);
int field_obj(json_t *o, const char *name, json_t **out, ab_err **err);
/* AB_E_INVALID naming the first key of o not in the NULL-terminated list. */
int fields_known(json_t *o, const char *const *known, const char *where, ab_err **err);

/* A JSON string from bytes that may not be UTF-8: invalid sequences become U+FFFD. */
json_t *json_bytes(const char *buf, size_t len);

/* The box as the API shows it (docs/api.md). */
json_t *box_json(const ab_server *s, const ab_box_rec *r);

#endif

/* parse.h - request fields every front reads the same way: a command's
 * argv and a list's metadata filter. Pure (no I/O, no server state): each
 * can be unit-tested and fuzzed on its own. */
#ifndef AB_KIT_PARSE_H
#define AB_KIT_PARSE_H

#include "base/err.h"

#include <jansson.h>

/* The field `name` of obj as a program and its arguments: a non-empty array
 * of strings whose first (the program) is not empty. *out gets a new
 * NULL-terminated strv (free it with ab_strvfreep or _cleanup_strv_), or NULL
 * when the field is absent or null. AB_E_INVALID naming the field
 * otherwise. */
int kit_parse_argv(json_t *obj, const char *name, char ***out, ab_err **err) AB_WUR;

/* Whether metadata (an object of strings; NULL is empty) matches filter, a
 * list's "k1=v1&k2=v2" with each key and value %XX-encoded (as the E2B and
 * OpenSandbox SDKs send it, ab_pct_decode): every pair must be in metadata
 * with that exact value. A key without '=' asks for an empty value; empty
 * pairs ("a=1&&b=2") are skipped; a NULL or empty filter matches all. A key
 * starting with reserved (when not NULL: a front's own metadata, hidden from
 * its users) never matches. */
bool kit_meta_match(json_t *metadata, const char *filter, const char *reserved);

#endif

/* gunzip.h - gzip-encoded uploads (Content-Encoding: gzip, as E2B's SDK
 * sends with `gzip: true`), inflated into the server's upload spool under the
 * bounds a plain upload has: at most max_upload bytes once inflated, and the
 * spool's global cap (tmp_max) counted as they grow. A gzip bomb stops at
 * the first bound it meets. */
#ifndef AB_KIT_GUNZIP_H
#define AB_KIT_GUNZIP_H

#include "kit/server.h"

/* Takes n more bytes of a cap for what is being inflated; false: no room. */
typedef bool (*kit_gz_take)(void *ud, uint64_t n);

/* Inflates the gzip stream (one or more members, RFC 1952) read from src
 * (to its end) into dst, at most max bytes, each write first taken from
 * take (NULL: no cap besides max). 0, or -1 with *err as for
 * kit_gunzip_upload; dst then holds part of the output. Fuzzed by
 * tests/fuzz/fuzz_gunzip.c. */
int kit_gunzip_fd(int src, int dst, uint64_t max, kit_gz_take take, void *ud, ab_err **err);

/* Inflates the gzip stream (one or more members, RFC 1952) of r's spooled
 * upload (r->upload_fd, from its start) into a new unnamed file of the
 * spool: *out gets it (read from its start; close it), its bytes counted
 * against tmp_max as r's (released with r). At most max bytes inflated.
 * 0, or -1 with *err: AB_E_INVALID (not gzip, corrupt or cut short),
 * AB_E_LIMIT (more than max bytes inflated: the message names the bound),
 * AB_E_UNAVAILABLE (the spool is full: tmp_max), AB_E_INTERNAL (I/O).
 * Blocking: call it on a worker. */
int kit_gunzip_upload(ab_req *r, uint64_t max, int *out, ab_err **err);

#endif

/* movestream.h - the byte stream that carries a box's disk from one fleet
 * node to another when the box moves (docs/fleet.md, "Moving a box"):
 * sparse (only the disk's data extents travel, holes stay holes) and
 * checked (a SHA-256 of everything before it ends the stream).
 *
 *   "ABMOVE1\n"  u64 size              the disk's size in bytes
 *   { u64 offset  u64 length  bytes }  data extents, in increasing offsets,
 *                                      each within size, at most
 *                                      AB_MOVESTREAM_MAX_EXTENT bytes
 *   u64 ~0  u64 0                      the end
 *   32 bytes                           SHA-256 of all the bytes before
 *
 * Integers are big-endian. The decoder reads network input from another
 * node: it checks every field before it is used. Not thread-safe per
 * stream. */
#ifndef AB_FLEET_MOVESTREAM_H
#define AB_FLEET_MOVESTREAM_H

#include "base/sha256.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define AB_MOVESTREAM_MAGIC      "ABMOVE1\n"
#define AB_MOVESTREAM_MAX_EXTENT (16u << 20)
#define AB_MOVESTREAM_HEAD       16 /* the magic and size; an extent's header; the end */

/* The 16 bytes of a stream's head (size), an extent's header (offset,
 * length) or the end (ab_movestream_rec(out, UINT64_MAX, 0)). */
void ab_movestream_head(uint8_t out[AB_MOVESTREAM_HEAD], uint64_t size);
void ab_movestream_rec(uint8_t out[AB_MOVESTREAM_HEAD], uint64_t offset, uint64_t length);

/* Where the decoder puts an extent's bytes: 0, or -errno to stop. */
typedef int (*ab_movestream_write)(void *ud, uint64_t offset, const void *data, size_t len);

typedef struct ab_movestream {
        int state;
        uint8_t buf[AB_MOVESTREAM_HEAD + AB_SHA256_LEN];
        size_t have;        /* bytes of buf filled */
        uint64_t size;      /* the disk's size (after the head) */
        uint64_t offset;    /* where the current extent's next byte goes */
        uint64_t left;      /* bytes of the current extent still to come */
        uint64_t end;       /* the end of the last extent */
        uint64_t data;      /* data bytes so far */
        ab_sha256_ctx hash; /* of the bytes before the digest */
} ab_movestream;

void ab_movestream_init(ab_movestream *m);
/* Takes n bytes of the stream. 0: more is wanted; 1: the stream ended and
 * its digest matched (bytes after the end are an error: -EPROTO); -EPROTO
 * for a malformed stream (a bad magic, an extent out of order or beyond
 * the size, too long); -EBADMSG when the digest does not match; a
 * negative errno from write. */
int ab_movestream_feed(ab_movestream *m, const void *data, size_t n, ab_movestream_write write,
                       void *ud);

#endif

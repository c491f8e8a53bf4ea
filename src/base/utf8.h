/* utf8.h - UTF-8 text: cleaning and counting code points. libc only (the
 * box's init links it too). */
#ifndef AB_UTF8_H
#define AB_UTF8_H

#include <stddef.h>

/* Valid UTF-8 copy of buf (malloc'd): invalid bytes and NULs become U+FFFD.
 * *outlen (when not NULL) gets its length. */
char *ab_utf8_clean(const void *buf, size_t len, size_t *outlen);
/* Code points in valid UTF-8 text s of n bytes. */
size_t ab_utf8_count(const char *s, size_t n);
/* Byte offset of the k-th code point of s (n when k is past the end). */
size_t ab_utf8_offset(const char *s, size_t n, size_t k);

#endif

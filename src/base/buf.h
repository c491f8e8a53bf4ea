/* buf.h - the one growable byte buffer. p is NUL-terminated whenever it is
 * non-NULL (so text can be used as a string), n bytes are used, cap are
 * allocated. A zeroed ab_buf is empty and valid. Growth is overflow-checked
 * and aborts on OOM, like every allocator here. libc only: agentbox-init
 * links it too. */
#ifndef AB_BUF_H
#define AB_BUF_H

#include "base/util.h"

#include <stdarg.h>
#include <stddef.h>

typedef struct ab_buf {
        char *p;
        size_t n, cap;
} ab_buf;

/* Makes room for `more` bytes after the used ones (plus the NUL) and returns
 * where they go; the caller writes them and then calls ab_buf_commit. */
char *ab_buf_reserve(ab_buf *b, size_t more);
/* Marks `k` reserved bytes as used. */
void ab_buf_commit(ab_buf *b, size_t k);
void ab_buf_add(ab_buf *b, const void *s, size_t n);
void ab_buf_puts(ab_buf *b, const char *s);
void ab_buf_putc(ab_buf *b, char c);
void ab_buf_printf(ab_buf *b, const char *fmt, ...) AB_PRINTF(2, 3);
void ab_buf_vprintf(ab_buf *b, const char *fmt, va_list ap) AB_PRINTF(2, 0);
/* Removes the first k bytes (k <= n): what a line reader has consumed. */
void ab_buf_drop(ab_buf *b, size_t k);
/* The contents (NUL-terminated, never NULL: "" when empty); b is reset. */
char *ab_buf_steal(ab_buf *b);
/* Frees the contents; b is reset. */
void ab_buf_free(ab_buf *b);
#define _cleanup_buf_ __attribute__((cleanup(ab_buf_free)))

#endif

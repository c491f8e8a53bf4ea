/* util.h - small helpers every module uses: ownership cleanup, allocation that
 * aborts on OOM, overflow-checked sizes, EINTR loops. libc only, so the
 * in-box agentbox-init can use it too. */
#ifndef AB_UTIL_H
#define AB_UTIL_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define AB_UNUSED       __attribute__((unused))
#define AB_WUR          __attribute__((warn_unused_result))
#define AB_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define AB_NONNULL(...) __attribute__((nonnull(__VA_ARGS__)))
#define AB_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

static inline void ab_freep(void *p)
{
        free(*(void **)p);
}
static inline void ab_closep(int *fd)
{
        if (*fd >= 0) {
                int saved = errno;
                close(*fd);
                errno = saved;
        }
}
static inline void ab_fclosep(FILE **f)
{
        if (*f) {
                int saved = errno;
                fclose(*f);
                errno = saved;
        }
}
static inline void ab_strvfreep(char ***v)
{
        if (*v) {
                for (char **p = *v; *p; p++)
                        free(*p);
                free(*v);
        }
}

#define _cleanup_free_   __attribute__((cleanup(ab_freep)))
#define _cleanup_close_  __attribute__((cleanup(ab_closep)))
#define _cleanup_fclose_ __attribute__((cleanup(ab_fclosep)))
#define _cleanup_strv_   __attribute__((cleanup(ab_strvfreep)))

/* Hands ownership of *pp to the caller and leaves NULL behind. */
#define steal_pointer(pp)                                                                          \
        ({                                                                                         \
                __typeof__(*(pp)) _p = *(pp);                                                      \
                *(pp) = NULL;                                                                      \
                _p;                                                                                \
        })
/* Hands ownership of an fd to the caller and leaves -1 behind. */
static inline int steal_fd(int *fd)
{
        int r = *fd;
        *fd = -1;
        return r;
}

/* Allocators: abort on out-of-memory, so callers never test for NULL. */
void *xmalloc(size_t n);
void *xzalloc(size_t n);
void *xrealloc(void *p, size_t n);
void *xcalloc(size_t n, size_t size);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);
char *xasprintf(const char *fmt, ...) AB_PRINTF(1, 2);

/* Overflow-checked arithmetic for sizes; aborts on overflow (a bug, not input). */
size_t xadd(size_t a, size_t b);
size_t xmul(size_t a, size_t b);

/* write()/read() the whole buffer, retrying on EINTR and short counts.
 * Return 0 or -errno; ab_read_full returns the byte count read (short only at EOF). */
int ab_write_all(int fd, const void *buf, size_t len) AB_WUR;
ssize_t ab_read_full(int fd, void *buf, size_t len) AB_WUR;

/* Sends all of buf on socket fd (blocking or not), never raising SIGPIPE;
 * gives up when the peer takes nothing for timeout_ms (-1: waits forever). 0, -ETIMEDOUT, or -errno
 * (EPIPE, ECONNRESET: the peer is gone). */
int ab_send_all(int fd, const void *buf, size_t len, int timeout_ms);

/* Removes dfd/name, a file or a whole tree, never following a symlink and
 * never entering another mount (-EBUSY for a mount point in it: a bind
 * or a disk must never be emptied through its mount). 0 (also when name does
 * not exist) or the first -errno met; what could be removed is removed. */
int ab_rm_tree_at(int dfd, const char *name);

/* Reads a whole (small) file into a NUL-terminated malloc'd buffer. 0 or -errno. */
int ab_read_file(int dirfd, const char *path, char **out, size_t *len) AB_WUR;

/* Writes a file atomically: temp file in the same directory, fsync, rename,
 * fsync of the directory. 0 or -errno. */
int ab_write_file_atomic(int dirfd, const char *path, const void *data, size_t len,
                         mode_t mode) AB_WUR;

/* A copy of a file name (or a relative path) that is safe to show on a
 * terminal and to unpack on any system: each byte that is a C0 control
 * (newline, ESC, ...), DEL, a backslash (a path separator on Windows), not
 * part of valid UTF-8, or part of a C1 control (U+0080..U+009F: CSI and
 * friends) or a bidirectional-text control (U+202A..U+202E, U+2066..U+2069)
 * becomes "%XX" (its value, upper-case hex); everything else, '%' and '/'
 * included, stays. *changed (may be NULL) says whether anything did. The
 * caller frees the result. */
char *ab_name_escape(const char *name, bool *changed);

/* Whether the comma-separated list ("cpu,cpuacct") has item as one of its
 * entries. */
bool ab_csv_has(const char *list, const char *item);

/* From a /proc/PID/cgroup file, the path of the process's cgroup in the
 * hierarchy that has controller ctrl ("N:cpu,cpuacct:PATH"), or in the v2
 * one ("0::PATH") when ctrl is NULL. *ctrls (may be NULL) gets that line's
 * controller list ("" for v2). Both malloc'd; NULL when the file cannot be
 * read or has no such line. */
char *ab_proc_cgroup_path(const char *file, const char *ctrl, char **ctrls);

/* Monotonic clock in nanoseconds / milliseconds. */
uint64_t ab_now_ns(void);
static inline uint64_t ab_now_ms(void)
{
        return ab_now_ns() / 1000000u;
}

/* Unmaps the stack of a child made with clone(CLONE_VM). Under ASan its
 * frames' shadow (never unwound: the child ends in _exit) is cleared first, or
 * a thread stack mapped there later would be reported as overflowing. */
#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/asan_interface.h>
#endif
#include <sys/mman.h>
static inline void ab_clone_stack_free(void *stack, size_t size)
{
#ifdef __SANITIZE_ADDRESS__
        ASAN_UNPOISON_MEMORY_REGION(stack, size);
#endif
        munmap(stack, size);
}

#endif

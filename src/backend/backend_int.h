/* backend_int.h - helpers the backends share (backend.c); not for callers
 * of backends. */
#ifndef AB_BACKEND_INT_H
#define AB_BACKEND_INT_H

#include "base/err.h"
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* mkdir -p: parents 0755, the last one `mode`; 0 or -errno. */
int ab_backend_mkdir_p(const char *path, mode_t mode);
/* path equals dir or lies below it (both canonical). */
bool ab_backend_path_within(const char *path, const char *dir);

/* A box's port reached inside its network namespace through its init's
 * host pid (native, Docker: ab_backend_ops.port_connect): the fd, or -1
 * with *err as port_connect documents. */
int ab_backend_port_netns(pid_t init_pid, const char *id, uint16_t port, int timeout_ms,
                          ab_err **err);

#endif

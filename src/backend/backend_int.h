/* backend_int.h - helpers the backends share (backend.c); not for callers
 * of backends. */
#ifndef AB_BACKEND_INT_H
#define AB_BACKEND_INT_H

#include "base/err.h"
#include <stdbool.h>
#include <sys/types.h>

/* mkdir -p: parents 0755, the last one `mode`; 0 or -errno. */
int ab_backend_mkdir_p(const char *path, mode_t mode);
/* path equals dir or lies below it (both canonical). */
bool ab_backend_path_within(const char *path, const char *dir);

#endif

/* seccomp.h - the box's system-call filter, built once on the host side with
 * libseccomp and exported as classic BPF, so the box's stage-1 child can
 * install it after its mounts without needing libseccomp (see docs/security.md). */
#ifndef AB_SECCOMP_H
#define AB_SECCOMP_H

#include "base/err.h"
#include <linux/filter.h>

typedef struct ab_bpf {
        struct sock_filter *insns;
        unsigned short len;
} ab_bpf;

/* Builds the filter (default allow; listed calls fail with EPERM; clone3 with
 * ENOSYS so libc falls back to clone whose flags we can inspect; non-native
 * architectures are killed). Caller frees with ab_bpf_free. */
int ab_seccomp_build(ab_bpf *out, ab_err **err);
void ab_bpf_free(ab_bpf *b);

/* Installs the filter on the calling thread (sets no_new_privs first).
 * Async-signal-safe: usable between fork and exec. 0 or -errno. */
int ab_seccomp_install(const ab_bpf *b);

#endif

/* box.h - starting and stopping one native box (the namespaces, the rootfs,
 * limits and hardening around agentbox-init). The backend (backend/native.c)
 * decides when; this file knows how. */
#ifndef AB_BOX_H
#define AB_BOX_H

#include "base/err.h"
#include "base/limits.h"
#include "native/cgroup.h"
#include "native/seccomp.h"
#include <sys/types.h>

typedef struct ab_spawn_spec {
        const char *id;
        const char *box_dir;     /* absolute; holds disk.img, init.sock, ... */
        const char *base;        /* "/" or a rootfs directory */
        const char *skills_dir;  /* may be NULL */
        const char *const *hide; /* host paths to hide, NULL-terminated */
        uid_t uid_base;
        const ab_limits *limits;
        const ab_cg *cg;   /* the box's cgroup already exists */
        const ab_bpf *bpf; /* seccomp filter to install */
        int init_exe_fd;   /* read-only fd of the agentbox-init binary */
} ab_spawn_spec;

/* Starts the box: returns its init's host pid and the init's start time (the
 * 22nd field of /proc/PID/stat, to recognise pid reuse). The init serves on
 * BOX_DIR/init.sock when this returns. The box outlives the caller. */
int ab_box_spawn(const ab_spawn_spec *s, pid_t *init_pid, uint64_t *init_start, ab_err **err);

/* Reads the start time of pid; 0 when the process does not exist. */
uint64_t ab_proc_start_time(pid_t pid);

/* True when pid is alive and still the process that started at start_time. */
bool ab_init_alive(pid_t pid, uint64_t start_time);

/* Kills the box's init (and so its whole pid namespace) and waits until it
 * has exited, which releases the box's mounts and disk. Bounded (~5 s). */
int ab_box_kill(pid_t pid, uint64_t start_time, ab_err **err);

#endif

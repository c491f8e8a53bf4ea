/* box.h - starting and stopping one native box (the namespaces, the rootfs,
 * limits and hardening around agentbox-init). The backend (backend/native.c)
 * decides when; this file knows how. */
#ifndef AB_BOX_H
#define AB_BOX_H

#include "base/err.h"
#include "base/limits.h"
#include "native/binds.h"
#include "native/cgroup.h"
#include "native/hide.h"
#include "native/seccomp.h"
#include <sys/types.h>

typedef struct ab_spawn_spec {
        const char *id;
        const char *box_dir;       /* absolute; holds disk.img, init.sock, ... */
        const char *base;          /* "/" or a rootfs directory (unused with layers) */
        const char *const *layers; /* an image's layer trees, bottom first, or NULL */
        const char *skills_dir;    /* may be NULL */
        const char *const *hide;   /* host paths to hide, NULL-terminated */
        uid_t uid_base;
        uid_t disk_uid_base; /* rootfs.h */
        const ab_limits *limits;
        const ab_cg *cg;                /* where the box's cgroup goes */
        const ab_cg_limits *cg_limits;  /* its limits (it is made, or updated) */
        const ab_bpf *bpf;              /* seccomp filter to install */
        int init_memfd;                 /* the agentbox-init binary, from ab_box_seal_init() */
        const ab_hide_list *unreadable; /* host base: what the shared layers hide (hide.h) */
        const ab_bind *binds;           /* volumes, host dirs, read-only and hidden paths */
        size_t n_binds;
} ab_spawn_spec;

/* Copies the agentbox-init binary (exe: a readable fd) into a sealed memfd
 * (O_CLOEXEC) that boxes exec their pid 1 from: a box can never change it.
 * One memfd serves every box of a process (sealed, so sharing is safe, and
 * its pages are in memory once). Returns the fd or -errno. */
int ab_box_seal_init(int exe);

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

/* cgroup.h - per-box control groups: memory, pids, cpu, with usage stats and
 * kill-all. Works on cgroup v1 (one hierarchy per controller, as on this
 * build host) and v2 (unified). Every path is relative to a root directory
 * so tests can point it at a fake cgroupfs tree. */
#ifndef AB_CGROUP_H
#define AB_CGROUP_H

#include "base/err.h"
#include <sys/types.h>

typedef enum { AB_CG_V1 = 1, AB_CG_V2 = 2 } ab_cg_version;

typedef struct ab_cg {
        ab_cg_version version;
        char *root;   /* e.g. "/sys/fs/cgroup" */
        char *parent; /* our sub-tree under each hierarchy, e.g. "agentbox" */
        /* v1: directory of each controller's hierarchy under root ("memory", "pids",
         * "cpu", "cpuacct", "freezer"), NULL when missing; v2: unused. */
        char *v1_memory, *v1_pids, *v1_cpu, *v1_cpuacct, *v1_freezer;
} ab_cg;

typedef struct ab_cg_limits {
        uint64_t memory_bytes; /* 0 = no limit */
        uint64_t pids;         /* 0 = no limit */
        double cpus;           /* 0 = no limit; quota = cpus * period */
} ab_cg_limits;

typedef struct ab_cg_stats {
        uint64_t memory_bytes; /* current usage */
        uint64_t memory_limit; /* 0 = none */
        uint64_t pids;         /* current tasks */
        uint64_t cpu_usage_ns; /* total CPU time consumed */
        uint64_t oom_kills;    /* OOM kills inside the box, when the kernel reports it */
} ab_cg_stats;

/* Detects the cgroup layout under `root` (normally "/sys/fs/cgroup"): v2 when
 * root/cgroup.controllers lists memory and pids; otherwise v1 when root/memory
 * and root/pids hierarchies exist. `parent` names our sub-tree ("agentbox").
 * Fills *cg (free with ab_cg_free). AB_E_UNSUPPORTED when neither works. */
int ab_cg_open(const char *root, const char *parent, ab_cg *cg, ab_err **err);
void ab_cg_free(ab_cg *cg);

/* Creates the box's cgroup (root/[ctrl/]parent/box_id), enabling controllers
 * on the way for v2, and writes the limits. Idempotent: an existing cgroup is
 * reused and its limits rewritten. */
int ab_cg_create(const ab_cg *cg, const char *box_id, const ab_cg_limits *l, ab_err **err);

/* Moves pid into the box's cgroup (every hierarchy for v1). */
int ab_cg_attach(const ab_cg *cg, const char *box_id, pid_t pid, ab_err **err);

/* Reads usage of the box's cgroup. */
int ab_cg_stats_read(const ab_cg *cg, const char *box_id, ab_cg_stats *out, ab_err **err);

/* Kills every process in the box's cgroup and waits (bounded, ~2 s) until it
 * is empty: v2 cgroup.kill when present, else freeze + SIGKILL each pid in
 * cgroup.procs + thaw, repeated until empty. A frozen (paused) box works
 * too: its processes die at the thaw; the box ends thawed. */
int ab_cg_kill_all(const ab_cg *cg, const char *box_id, ab_err **err);

/* Removes the box's cgroup directories (and any sub-cgroups below them);
 * missing ones are fine, the parent is kept. Processes still inside are
 * killed first (ab_cg_kill_all). */
int ab_cg_destroy(const ab_cg *cg, const char *box_id, ab_err **err);

/* ---- freezer: pausing a box with its processes kept ----------------------
 * v1 uses the freezer controller (freezer.state), v2 cgroup.freeze and the
 * "frozen" key of cgroup.events. Freezing the box's cgroup covers every
 * process in it and in its sub-cgroups (on v1 those exist in memory and pids
 * only, so their processes are still in the box's freezer cgroup). A frozen
 * process keeps its memory, files and sockets and gets no CPU. On v1 it
 * cannot even die until thawed (a SIGKILL stays pending); on v2 it can. */
typedef enum {
        AB_CG_THAWED = 0,
        AB_CG_FREEZING, /* asked to freeze; some task has not stopped yet */
        AB_CG_FROZEN,
} ab_cg_freezer;

/* Freezes the box's cgroup and waits until the kernel reports every task
 * stopped, at most timeout_ms. All or nothing: on timeout (AB_E_TIMEOUT) or
 * error the box is thawed again. Freezing a frozen box is a no-op.
 * AB_E_UNSUPPORTED on v1 without a freezer hierarchy; AB_E_NOT_FOUND when
 * the box has no cgroup. */
int ab_cg_freeze(const ab_cg *cg, const char *box_id, unsigned timeout_ms, ab_err **err);

/* Thaws the box's cgroup; its processes may run when this returns. Thawing a
 * thawed box is a no-op. Errors as ab_cg_freeze. */
int ab_cg_thaw(const ab_cg *cg, const char *box_id, ab_err **err);

/* Reads the box's freezer state. Errors as ab_cg_freeze. */
int ab_cg_freezer_state(const ab_cg *cg, const char *box_id, ab_cg_freezer *out, ab_err **err);

/* v1: keeps one empty cgroup of the freezer hierarchy, AB_CG_FREEZE_ANCHOR
 * under its root, frozen for good (made if missing; shared by every agentbox
 * on the host). The v1 freezer switches a kernel static key on when a first
 * cgroup starts freezing and off when the last one thaws - code patching on
 * every CPU, ~1.5 ms each way on the build host - so a freeze or thaw of the
 * only paused box, and the freeze + thaw of every v1 kill_all, paid it. With
 * the anchor frozen the key stays on and they cost tens of microseconds. Best
 * effort, 0 or -errno; a no-op on v2 (no such switch) and without a freezer. */
#define AB_CG_FREEZE_ANCHOR "agentbox-freeze-anchor"
int ab_cg_freeze_anchor(const ab_cg *cg);

/* ---- sub-cgroups: limits on one process tree inside a box ----------------
 * A sub-cgroup is one path component `sub` below the box's cgroup
 * (root/[hier/]parent/box_id/sub), with its own memory and pids limits inside
 * the box's (the code runner puts each run in one). The box's stats, kill-all
 * and destroy cover its sub-cgroups. On v2 the box's cgroup may then hold no
 * processes of its own ("no internal processes"): the first sub-cgroup moves
 * them into the leaf AB_CG_BOX_LEAF below it, and new processes follow their
 * parents there. */
#define AB_CG_BOX_LEAF "box"

/* Creates (idempotent) the sub-cgroup with memory and pids limits (cpus is
 * ignored: the box's CPU limit covers it; on v1 a sub-cgroup exists in the
 * memory and pids hierarchies only). */
int ab_cg_sub_create(const ab_cg *cg, const char *box_id, const char *sub, const ab_cg_limits *l,
                     ab_err **err);
/* Moves pid (a host pid) into the sub-cgroup. */
int ab_cg_sub_attach(const ab_cg *cg, const char *box_id, const char *sub, pid_t pid, ab_err **err);
/* Rewrites the sub-cgroup's memory limit (0 = none). AB_E_CONFLICT when the
 * usage is already above it. */
int ab_cg_sub_set_memory(const ab_cg *cg, const char *box_id, const char *sub, uint64_t bytes,
                         ab_err **err);
/* Usage of the sub-cgroup (oom_kills: OOM kills inside it). */
int ab_cg_sub_stats(const ab_cg *cg, const char *box_id, const char *sub, ab_cg_stats *out,
                    ab_err **err);
/* Kills every process in the sub-cgroup (it stays). */
int ab_cg_sub_kill(const ab_cg *cg, const char *box_id, const char *sub, ab_err **err);
/* Kills every process in the sub-cgroup and removes it; a missing one is fine. */
int ab_cg_sub_destroy(const ab_cg *cg, const char *box_id, const char *sub, ab_err **err);

/* Path of the box's cgroup in one controller ("memory", "pids", "cpu",
 * "cpuacct", "freezer" for v1; ignored for v2); box_id NULL gives the parent
 * directory instead. NULL when that v1 controller has no hierarchy. Caller
 * frees. For tests and diagnostics. */
char *ab_cg_path(const ab_cg *cg, const char *controller, const char *box_id);

#endif

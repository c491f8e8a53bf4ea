/* exec.h - an exec streamed from a thread of its own (agentbox's SSE
 * exec, OpenSandbox's commands, E2B's processes): the thread outlives the
 * request, yet its exec must count against the request's API key (the
 * key's own quotas, ab_manager_set_caller), so the caller is copied into the
 * job and entered on the thread. */
#ifndef AB_KIT_EXEC_H
#define AB_KIT_EXEC_H

#include "kit/resp.h"

/* A request's caller, owned by a job that outlives the request. */
typedef struct kit_caller {
        char *key_id;    /* a copy of the request's API key id, or NULL (no key) */
        ab_quota quotas; /* the key's own quotas (a copy) */
        ab_caller caller;
} kit_caller;

/* Starts fn(arg) on a detached thread that runs as r's caller: r's key is
 * copied into *c, which must live until fn returns (it belongs to arg's job,
 * whose free calls kit_caller_clear). 0, or -errno when no thread could be
 * started (then *c holds the copy: the job's free clears it). */
int kit_exec_spawn(const ab_req *r, kit_caller *c, void *(*fn)(void *), void *arg) AB_WUR;

/* kit_exec_spawn through spawn instead of spawn_detached: for a front that
 * counts its own threads (its shutdown waits for them). spawn's result is
 * returned; it must start fn(arg) on a new thread or fail with -errno. */
int kit_exec_spawn_via(int (*spawn)(void *(*)(void *), void *), const ab_req *r, kit_caller *c,
                       void *(*fn)(void *), void *arg) AB_WUR;

/* Frees c's copy (a zeroed or cleared c is fine). */
void kit_caller_clear(kit_caller *c);

#endif

/* exec.c - an exec streamed from a thread of its own, as the request's
 * caller (kit/exec.h). */
#include "kit/exec.h"

typedef struct trampoline {
        const kit_caller *c;
        void *(*fn)(void *);
        void *arg;
} trampoline;

static void *as_caller(void *p)
{
        trampoline t = *(trampoline *)p;
        free(p);
        if (t.c->key_id)
                ab_manager_set_caller(&t.c->caller);
        t.fn(t.arg); /* may free the job, and *t.c with it */
        ab_manager_set_caller(NULL);
        return NULL;
}

int kit_exec_spawn(const ab_req *r, kit_caller *c, void *(*fn)(void *), void *arg)
{
        return kit_exec_spawn_via(spawn_detached, r, c, fn, arg);
}

int kit_exec_spawn_via(int (*spawn)(void *(*)(void *), void *), const ab_req *r, kit_caller *c,
                       void *(*fn)(void *), void *arg)
{
        kit_caller_clear(c);
        if (r->key_id) {
                c->key_id = xstrdup(r->key_id);
                c->quotas = r->key_quotas;
                c->caller = (ab_caller){.key_id = c->key_id,
                                        .quotas = r->caller.quotas ? &c->quotas : NULL};
        }
        trampoline *t = xmalloc(sizeof(*t));
        *t = (trampoline){.c = c, .fn = fn, .arg = arg};
        int rc = spawn(as_caller, t);
        if (rc < 0)
                free(t);
        return rc;
}

void kit_caller_clear(kit_caller *c)
{
        free(c->key_id);
        *c = (kit_caller){0};
}

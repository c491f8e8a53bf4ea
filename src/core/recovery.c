/* Recovery: who is creating a box (a process identity that survives pid
 * reuse), creates whose creator died, and the reconciliation of the store
 * with the backend when the manager opens. */
#include "core/manager_int.h"
#include "net/net.h"

static char boot_id[64];

static void read_boot(void)
{
        FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");
        if (f) {
                if (!fgets(boot_id, sizeof(boot_id), f))
                        boot_id[0] = 0;
                fclose(f);
        }
        boot_id[strcspn(boot_id, "\n")] = 0;
}

/* "BOOT_ID:PID:STARTTIME" of a process: unique on this machine across pid reuse and reboots. */
bool mgr_process_identity(pid_t pid, char *out, size_t len)
{
        static pthread_once_t once = PTHREAD_ONCE_INIT;
        pthread_once(&once, read_boot);
        char path[64], buf[1024];
        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
        FILE *f = fopen(path, "re");
        if (!f)
                return false;
        size_t n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = 0;
        char *p = strrchr(buf, ')');
        unsigned long long start = 0;
        /* after ") ": state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
         * utime stime cutime cstime priority nice threads itrealvalue starttime */
        if (!p || sscanf(p + 2,
                         "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d "
                         "%*d %*d %*d %*d %llu",
                         &start) != 1)
                return false;
        snprintf(out, len, "%s:%d:%llu", boot_id, (int)pid, start);
        return true;
}

/* True when the process named by `creator` (process_identity) surely no
 * longer runs: same machine and boot, and that pid is gone or is another
 * process. A creator on another machine is never declared dead. */
bool mgr_creator_dead(const char *creator)
{
        if (!creator)
                return false;
        char cur[160];
        unsigned long long start;
        int pid;
        const char *c1 = strchr(creator, ':');
        if (!c1 || sscanf(c1 + 1, "%d:%llu", &pid, &start) != 2 || pid <= 0)
                return false;
        if (!mgr_process_identity(getpid(), cur, sizeof(cur)) ||
            strncmp(cur, creator, (size_t)(c1 - creator) + 1) != 0)
                return false; /* another boot or machine: cannot tell */
        if (!mgr_process_identity(pid, cur, sizeof(cur)))
                return true;
        return strcmp(cur, creator) != 0;
}

const char *mgr_rec_creator(const ab_box_rec *r)
{
        return json_string_value(json_object_get(r->spec, "creator"));
}

/* A "creating" row whose creator died: keeps the box if the backend finished
 * making it, else drops the row. Returns true when something changed. */
bool mgr_recover_creating(ab_manager *m, ab_box_rec *r)
{
        ab_backend *b = m->o.backend;
        ab_box_info info;
        ab_err *e = NULL;
        int ir = b->ops->info(b, r->backend_id, &info, &e);
        bool missing = ir < 0 && e->code == AB_E_NOT_FOUND;
        ab_err_free(&e);
        if (ir < 0 && !missing)
                return false;
        /* A box the backend never finished (native: no config yet; Docker:
         * a volume or a container never started, reported as error) was
         * never handed to anyone: it goes with its record. */
        if (missing || info.status == AB_BOX_CREATING || info.status == AB_BOX_ERROR) {
                if (!missing)
                        b->ops->destroy(b, r->backend_id, NULL);
                if (mgr_rec_image(r))
                        mgr_image_release(m, r->backend_id);
                ab_store_box_delete(m->o.store, m->provider, r->id, NULL);
                ab_log(AB_LOG_INFO, "dropped a create that never finished", "box", r->id, NULL);
        } else {
                mgr_set_status(m, r,
                               info.status == AB_BOX_RUNNING || info.status == AB_BOX_PAUSED
                                   ? info.status
                                   : AB_BOX_STOPPED,
                               NULL);
                ab_log(AB_LOG_INFO, "kept a box whose creator died after making it", "box", r->id,
                       NULL);
        }
        if (!missing)
                ab_box_info_clear(&info);
        return true;
}

static bool referenced(const ab_box_rec *rs, size_t n, const char *backend_id)
{
        for (size_t i = 0; i < n; i++)
                if (rs[i].backend_id && !strcmp(rs[i].backend_id, backend_id))
                        return true;
        return false;
}

/* Records a backend box no record knows (made by `agentbox create`, or
 * whose record was lost) as a session box of no app. 0, or -1 with *err
 * (AB_E_CONFLICT when a record appeared meanwhile). */
static int adopt(ab_manager *m, const ab_box_info *bi, ab_err **err)
{
        ab_acquire_req q = {.mode = "session"};
        ab_box_rec r = {0};
        mgr_fill_new_rec(m, &q, NULL, bi->id, &bi->limits, &r);
        ab_image img = {0};
        /* a box `agentbox create --image` made: its image's env and workdir */
        ab_backend *engine = bi->backend ? mgr_engine_images(m, bi->backend) : NULL;
        bool eng = engine != NULL;
        if (!eng && bi->image && m->o.images &&
            ab_image_get(m->o.images, bi->image, &img, NULL) == 0)
                json_object_set_new(r.spec, "image", mgr_image_spec(NULL, &img));
        ab_image_clear(&img);
        /* a box of an engine with images of its own (Docker): its image's config from the engine
         * (by id) */
        json_t *dimg = NULL;
        if (eng && bi->image && engine->ops->image_config(engine, bi->image, &dimg, NULL) == 0)
                json_object_set_new(r.spec, "image", dimg);
        if (bi->backend)
                json_object_set_new(r.spec, "backend", json_string(bi->backend));
        r.status = bi->status == AB_BOX_RUNNING || bi->status == AB_BOX_PAUSED ? bi->status
                                                                               : AB_BOX_STOPPED;
        if (bi->created_at > 0)
                r.created_at = bi->created_at * 1000;
        int rc = ab_store_box_insert(m->o.store, &r, err);
        if (rc == 0)
                ab_log(AB_LOG_INFO, "adopted a box the store did not know", "box", r.id, NULL);
        ab_box_rec_clear(&r);
        return rc;
}

int ab_manager_adopt(ab_manager *m, const char *id, ab_err **err)
{
        ab_box_rec r = {0};
        if (ab_store_box_get(m->o.store, m->provider, id, &r, NULL) == 0) {
                ab_box_rec_clear(&r);
                return 0;
        }
        if (!strncmp(id, POOL_PREFIX, strlen(POOL_PREFIX)) ||
            !strncmp(id, SYSTEM_PREFIX, strlen(SYSTEM_PREFIX)))
                return ab_err_set(err, AB_E_NOT_FOUND, 0, "no box %s", id);
        ab_backend *b = m->o.backend;
        ab_box_info bi;
        if (b->ops->info(b, id, &bi, err) < 0)
                return -1;
        int rc = 0;
        ab_err *e = NULL;
        if (bi.status == AB_BOX_CREATING || bi.status == AB_BOX_DELETING)
                rc = ab_err_set(err, AB_E_UNAVAILABLE, 0, "box %s is being %s", id,
                                bi.status == AB_BOX_CREATING ? "created" : "deleted");
        else if (adopt(m, &bi, &e) < 0 && e->code != AB_E_CONFLICT) /* CONFLICT: recorded by */
                rc = ab_err_set(err, e->code, 0, "%s", e->msg);     /* another process: fine */
        ab_err_free(&e);
        ab_box_info_clear(&bi);
        return rc;
}

static bool backend_has(void *ud, const char *holder)
{
        ab_manager *m = ud;
        ab_box_info info;
        ab_err *e = NULL;
        if (m->o.backend->ops->info(m->o.backend, holder, &info, &e) == 0) {
                ab_box_info_clear(&info);
                return true;
        }
        bool gone = e->code == AB_E_NOT_FOUND;
        ab_err_free(&e);
        return !gone;
}

/* Image holds of boxes that are gone (a delete killed between the box and
 * its hold) end, and what nothing uses any more is collected. */
static void reconcile_images(ab_manager *m)
{
        if (!m->o.images)
                return;
        _cleanup_err_ ab_err *e = NULL;
        if (ab_image_prune_holds(m->o.images, backend_has, m, &e) < 0 ||
            ab_image_gc(m->o.images, NULL, &e) < 0)
                ab_log(AB_LOG_WARN, "images: cannot collect unused images", "error", e->msg, NULL);
}

/* Brings the store in line with the backend after a restart or a crash. */
int mgr_reconcile(ab_manager *m, ab_err **err)
{
        ab_box_filter f = {.provider = m->provider, .node = m->o.node_id};
        ab_box_rec *rs = NULL;
        size_t n = 0;
        if (ab_store_box_list(m->o.store, &f, &rs, &n, err) < 0)
                return -1;
        ab_backend *b = m->o.backend;
        int64_t now = mgr_wall_ms();
        size_t found = 0, fixed = 0;
        for (size_t i = 0; i < n; i++) {
                ab_box_rec *r = &rs[i];
                if (r->status == AB_BOX_DELETING) {
                        mgr_queue_delete(m, r->id);
                        continue;
                }
                ab_box_info info;
                ab_err *e = NULL;
                int ir = b->ops->info(b, r->backend_id, &info, &e);
                bool missing = ir < 0 && e->code == AB_E_NOT_FOUND;
                ab_err_free(&e);
                if (r->status == AB_BOX_CREATING) {
                        const char *who = mgr_rec_creator(r);
                        if (!mgr_creator_dead(who) && now - r->created_at < STALE_CREATE_MS)
                                goto next; /* another process may be creating it now */
                        if (missing || (ir == 0 && (info.status == AB_BOX_CREATING ||
                                                    info.status == AB_BOX_ERROR))) {
                                /* The create never finished (Docker reports a
                                 * half-made box as error): nothing to keep. */
                                if (ir == 0)
                                        b->ops->destroy(b, r->backend_id, NULL);
                                ab_store_box_delete(m->o.store, m->provider, r->id, NULL);
                                fixed++;
                                goto next;
                        }
                }
                if (missing) {
                        if (r->status != AB_BOX_ERROR) {
                                mgr_set_status(m, r, AB_BOX_ERROR,
                                               "the backend has no such box any more (its disk is "
                                               "gone)");
                                fixed++;
                        }
                        continue;
                }
                if (ir < 0)
                        continue;
                found++;
                /* A paused box stays paused: its processes wait for a use. */
                bool alive = info.status == AB_BOX_RUNNING || info.status == AB_BOX_PAUSED;
                ab_box_status truth = alive || info.status == AB_BOX_STOPPED ? info.status : 0;
                if (truth && r->status != truth && r->status != AB_BOX_ERROR) {
                        mgr_set_status(m, r, truth, NULL);
                        fixed++;
                } else if (truth && r->status == AB_BOX_ERROR && alive) {
                        mgr_set_status(m, r, truth, NULL);
                        fixed++;
                }
                if (alive && r->status != AB_BOX_CREATING) {
                        ab_err *ne = NULL;
                        /* after a restart: the proxy listener is gone, a veth may be left */
                        mgr_net_sync(m, r, info.init_pid, true, &ne);
                        ab_err_free(&ne);
                }
        next:
                if (ir == 0)
                        ab_box_info_clear(&info);
        }
        /* Backend boxes no record knows: half-made pool boxes go, others are adopted. */
        ab_box_info *bi = NULL;
        size_t bn = 0;
        if (b->ops->list(b, &bi, &bn, NULL) == 0) {
                for (size_t i = 0; i < bn; i++) {
                        if (referenced(rs, n, bi[i].id) || bi[i].status == AB_BOX_CREATING ||
                            bi[i].status == AB_BOX_DELETING ||
                            !strncmp(bi[i].id, SYSTEM_PREFIX, strlen(SYSTEM_PREFIX)))
                                continue;
                        if (!strncmp(bi[i].id, POOL_PREFIX, strlen(POOL_PREFIX))) {
                                b->ops->destroy(b, bi[i].id, NULL);
                                fixed++;
                                continue;
                        }
                        if (bi[i].moved_away) {
                                /* its move to another node was recorded, and the
                                 * box deleted there since: an old copy */
                                ab_log(AB_LOG_INFO,
                                       "removed the old copy of a moved box deleted since", "box",
                                       bi[i].id, NULL);
                                b->ops->destroy(b, bi[i].id, NULL);
                                fixed++;
                                continue;
                        }
                        if (adopt(m, &bi[i], NULL) == 0)
                                fixed++;
                }
                for (size_t i = 0; i < bn; i++)
                        ab_box_info_clear(&bi[i]);
                free(bi);
        }
        ab_box_recs_free(rs, n);
        reconcile_images(m);
        char a[32], c[32];
        snprintf(a, sizeof(a), "%zu", found);
        snprintf(c, sizeof(c), "%zu", fixed);
        ab_log(AB_LOG_INFO, "recovered boxes", "found", a, "fixed", c, NULL);
        return 0;
}

/* manager_int.h - what the files of the sandbox manager share (the .c files of src/core;
 * the public interface is manager.h). Internal names carry the prefix mgr_.
 *
 * The files, one job each: manager.c (the handle, per-box slots, record
 * helpers, counts), acquire.c (ids of keys, find-or-make a box), lifecycle.c (start, stop,
 * pause, resume, network changes), use.c (exec, file and tool uses), delete.c (the deletion
 * queue and its threads), jobs.c (the reaper: idle pause and stop, memory
 * pressure, TTL, drift, the running-box cap), pool.c (the warm pool), sampler.c (resource samples
 * and alerts), recovery.c (reconciling the store with the backend after a restart or crash),
 * netglue.c (a box's network policy applied to it).
 *
 * Locking: a box's lifecycle changes happen under its slot lock
 * (mgr_slot_get + slot->lock); "caller holds the slot lock" below means that
 * lock. m->lock guards the deletion queue, the wake-ups and `stopping`. */
#ifndef AB_MANAGER_INT_H
#define AB_MANAGER_INT_H

#include "core/manager.h"
#include "base/id.h"
#include "base/log.h"

#include <pthread.h>
#include <stdatomic.h>

#define N_BUCKETS        256
#define N_DELETERS       2
#define WAIT_OTHER_MS    60000 /* how long an acquire waits for another process' create/delete */
#define STALE_CREATE_MS  60000 /* a "creating" row this old with no box is a crashed create */
#define POOL_BACKOFF_MS  5000
#define POOL_PREFIX      "pool-"
#define SYSTEM_PREFIX    "sys-" /* the server's own boxes (code runners): not managed here */
#define EVENT_CMD_MAX    1000
#define PROVIDER_DEFAULT "native"

typedef struct slot {
        struct slot *next;
        char *id;
        pthread_mutex_t lock; /* serialises lifecycle operations on the box */
        int refs;             /* under m->slots_lock */
        atomic_int inflight;  /* uses in progress */
        atomic_int held;      /* of them, held by long-lived processes (ab_manager_use_hold) */
} slot;

typedef struct del_job {
        struct del_job *next;
        char *id;
} del_job;

struct ab_manager {
        ab_manager_opts o;
        const char *provider;
        pthread_mutex_t slots_lock;
        slot *buckets[N_BUCKETS];
        atomic_int_fast64_t inflight_total;

        pthread_mutex_t lock; /* guards the queues and `stopping` */
        pthread_cond_t wake;  /* reaper, pool and sampler sleep on it */
        pthread_cond_t del_wake;
        del_job *del_head, *del_tail;
        bool stopping;
        bool pool_wanted;
        /* The earliest TTL end the reaper knows of (wall ms; 0 = none) and
         * a wake-up for it: a box's timeout ends on time, not at the next
         * scan (ab_manager_set_ttl moves it earlier). Under lock. */
        int64_t ttl_next_ms;
        bool ttl_wanted;

        pthread_t reaper, pooler, sampler, deleters[N_DELETERS];
        bool have_reaper, have_pooler, have_sampler;
        int n_deleters;

        atomic_bool no_pause; /* the backend cannot pause here: idle boxes are stopped instead */
        pthread_mutex_t counts_lock;
        pthread_mutex_t cap_lock; /* one enforcement of the running-box cap at a time */
        uint64_t counts_at_ns;
        ab_manager_counts counts_cache;
        struct mgr_quota *quota;   /* core/quota.c */
        struct mgr_disk *disk;     /* core/diskguard.c */
        pthread_mutex_t reap_lock; /* one reaper round at a time (tests call it too) */
        char *drift_cursor;        /* core/jobs.c: the last id of the drift walk's page */
};

typedef int (*locked_op)(ab_manager *m, ab_box_rec *r, ab_err **err);

/* Wall-clock time in unix milliseconds. */
int64_t mgr_wall_ms(void);
/* "BOOT_ID:PID:STARTTIME" of a process: unique on this machine across pid reuse and reboots. */
bool mgr_process_identity(pid_t pid, char *out, size_t len);
/* True when the process named by `creator` (process_identity) surely no
 * longer runs: same machine and boot, and that pid is gone or is another
 * process. A creator on another machine is never declared dead. */
bool mgr_creator_dead(const char *creator);
/* The creator identity recorded in the box's spec (borrowed), or NULL. */
const char *mgr_rec_creator(const ab_box_rec *r);
/* The per-box slot of id, made on first use; counted: release with mgr_slot_put. */
slot *mgr_slot_get(ab_manager *m, const char *id);
void mgr_slot_put(ab_manager *m, slot *s);
/* Publishes an event about r (NULL = about the server); takes data. */
void mgr_emit(ab_manager *m, const char *type, const ab_box_rec *r, json_t *data);
/* The box's limits: its own, or the server's defaults. Output cap and
 * open-file limit are the server's (not stored per box). */
void mgr_limits_from_rec(const ab_manager *m, const ab_box_rec *r, ab_limits *l);
/* Compact JSON text of j (sorted keys); the caller frees it. */
char *mgr_dump(json_t *j);
/* Mode tests and the API-key scope test (scope NULL = admin). */
bool mgr_is_pool(const ab_box_rec *r);
/* r runs on this server: no fleet, or r's node is this node. */
bool mgr_owns(const ab_manager *m, const ab_box_rec *r);
bool mgr_is_task(const ab_box_rec *r);
bool mgr_scope_ok(const ab_box_rec *r, const char *scope);
/* Reads a box the caller may see: pool boxes and other apps' boxes are
 * AB_E_NOT_FOUND. */
int mgr_get_scoped(ab_manager *m, const char *id, const char *scope, ab_box_rec *out, ab_err **err);
/* Hands e to the caller's err (or frees it); returns -1. */
int mgr_propagate(ab_err **err, ab_err *e);
/* Makes a system box run again after its init died under a use (takes its
 * slot lock). */
int mgr_sys_restart(ab_manager *m, ab_use *u, ab_err **err);
/* Records a new status (store) and tells subscribers. */
void mgr_set_status(ab_manager *m, ab_box_rec *r, ab_box_status status, const char *error);
/* Makes the running box's network match its recorded policy. init_pid 0 =
 * ask the backend. Caller holds the slot lock. */
int mgr_net_sync(ab_manager *m, const ab_box_rec *r, pid_t init_pid, bool thorough, ab_err **err);
/* Makes the box's backend run it (a paused box is resumed). Caller holds the
 * slot lock. Returns 1 when it had to start or resume the box, 0 when it ran
 * already, -1 on failure. */
int mgr_ensure_running(ab_manager *m, ab_box_rec *r, ab_err **err);
/* Freezes the running box (caller holds the slot lock); reason "api",
 * "idle" or "lru" names the metric and goes into the "box.paused" event. */
int mgr_pause_locked(ab_manager *m, ab_box_rec *r, const char *reason, ab_err **err);
/* Stops the box (caller holds the slot lock). */
/* The TTL of r ran out and its spec says "pause" (ab_manager_set_ttl):
 * pauses it (stops it when it cannot be paused) and clears its TTL. Caller
 * holds the slot lock. */
void mgr_ttl_pause_locked(ab_manager *m, ab_box_rec *r);
int mgr_stop_locked(ab_manager *m, ab_box_rec *r, const char *reason, ab_err **err);
/* Queues the box for the deleter threads. */
void mgr_queue_delete(ab_manager *m, const char *id);
/* Marks r deleting and queues it (caller holds the slot lock). */
void mgr_delete_locked(ab_manager *m, ab_box_rec *r);
/* Thread bodies: deleter, reaper (idle, TTL, drift, LRU), pool filler,
 * resource sampler. Each takes the manager. */
void *mgr_deleter_main(void *arg);
/* Stops least-recently-active idle boxes while more than max_running run. */
void mgr_enforce_cap(ab_manager *m, const char *keep);
/* A "creating" row whose creator died: keeps the box if the backend finished
 * making it, else drops the row. Returns true when something changed. */
bool mgr_recover_creating(ab_manager *m, ab_box_rec *r);
/* Sleeps ms milliseconds (EINTR-safe). */
void mgr_sleep_ms(int ms);
/* Tells the pool filler a pooled box was taken. */
void mgr_wake_pool(ab_manager *m);
/* A box's TTL now ends at end_ms (wall ms): wakes the reaper when that is
 * before the earliest end it sleeps towards. */
void mgr_ttl_wake(ab_manager *m, int64_t end_ms);
/* A new record for req (status creating), owned by r. */
/* Starts the box's entrypoint (spec.entrypoint) on a terminal of its own,
 * after a create or a start of the box (caller holds the slot lock). A
 * failure is logged and published as "box.error", not returned: the box runs. */
void mgr_entrypoint_start(ab_manager *m, const ab_box_rec *r);
/* True when running box r's init holds a running background process (a
 * user's command that runs on: core/term.c), which keeps the box from
 * idling out as an exec in flight does. */
bool mgr_procs_running(ab_manager *m, const ab_box_rec *r);

/* ---- volumes and mounts (core/volumes.c) ---- */

/* A new box's mounts, parsed from the request and owned. */
typedef struct mgr_mounts {
        ab_box_mount *v;
        size_t n;
} mgr_mounts;
/* Parses and checks q's volumes, mounts, readonly_paths and blocked_paths:
 * paths, volume names, host directories only for admin and under
 * host_mount_prefixes (their source made canonical). Clear *mm also after a
 * failure. */
int mgr_mounts_parse(ab_manager *m, const ab_acquire_req *q, const char *scope, mgr_mounts *mm,
                     ab_err **err);
/* For a new box: its volumes exist and scope may use them (AB_E_NOT_FOUND). */
int mgr_mounts_volumes_check(ab_manager *m, const mgr_mounts *mm, const char *scope, ab_err **err);
void mgr_mounts_clear(mgr_mounts *mm);
/* What a box's record shows of them: {volumes, mounts, readonly_paths, blocked_paths}. */
json_t *mgr_mounts_spec(const ab_box_mount *mt, size_t n);

/* ---- images (core/images.c) ---- */

/* The image for a new box: found in the store, else pulled. AB_E_UNSUPPORTED
 * when the manager has no image store. */
int mgr_image_resolve(ab_manager *m, const char *scope, const char *ref, ab_image *out,
                      ab_err **err);
/* What a box's record keeps of its image (spec.image): ref, id, env,
 * workdir, user. */
json_t *mgr_image_spec(const char *ref, const ab_image *img);
/* Holds the image for backend box bid (before the backend creates it). */
int mgr_image_hold(ab_manager *m, const char *bid, const ab_image *img, ab_err **err);
/* Gives /workspace and the upload/output folders to the image's User when
 * it is not root (once, at create). */
void mgr_image_own_folders(ab_manager *m, const ab_box_rec *r);
/* After the create of a box of an engine's image whose backend learns the
 * image's WorkingDir and User only by running it (ab_box_info.image_workdir,
 * image_user: kubernetes): they join r's image record (and the store), as
 * image_config gives them on the other backends, and the box's folders go
 * to that user. Best effort: logged. */
void mgr_image_learn(ab_manager *m, ab_box_rec *r);
/* Ends bid's hold and collects what no image or box uses any more. */
void mgr_image_release(ab_manager *m, const char *bid);
/* The image fields of r's record, or NULL: spec.image.{env (array),
 * workdir, user}. */
const json_t *mgr_rec_image(const ab_box_rec *r);

/* True when id has the shape of an id derived from keys: 16 hex digits. */
bool mgr_id_derived_shape(const char *id);
/* Whether q may make a new box at its explicit id: an API key (scope) may not
 * take an id of the derived shape (it could be another app's keys'). 0, or
 * AB_E_INVALID. */
int mgr_new_id_check(const ab_acquire_req *q, const char *scope, ab_err **err);
/* Whether r is the box q asks for: scope may see it, and for keys or a
 * thread id, r's app, user, chat and thread are the request's (app as
 * check_keys resolved it). */
bool mgr_rec_is_requested(const ab_box_rec *r, const ab_acquire_req *q, const char *app,
                          const char *scope);
/* Checks an acquire request (keys, mode, limits, network, env, ...);
 * idbuf gets the box id it names, *app its app (scope wins). */
int mgr_check_keys(ab_manager *m, const ab_acquire_req *q, const char *scope, const char **app,
                   char idbuf[64], ab_err **err);
void mgr_fill_new_rec(ab_manager *m, const ab_acquire_req *q, const char *app, const char *id,
                      const ab_limits *lim, ab_box_rec *r);
/* Runs op on the box under its slot lock; AB_E_CONFLICT while it is being
 * deleted. Returns op's result: -1, or 0 or a positive value op chose (then
 * *out gets the record, when out is non-NULL). */
int mgr_with_box(ab_manager *m, const char *id, const char *scope, locked_op op, ab_box_rec *out,
                 ab_err **err);
/* Sleeps up to ms or until woken; returns false when stopping. */
bool mgr_nap(ab_manager *m, int64_t ms, bool *flag);
void *mgr_reaper_main(void *arg);
void *mgr_pooler_main(void *arg);
void *mgr_sampler_main(void *arg);
/* Brings the store in line with the backend after a restart or a crash. */
int mgr_reconcile(ab_manager *m, ab_err **err);

/* Quotas (quota.c). A ticket holds a reservation of an app's quotas from
 * the check until the store's records count what it reserved; it is
 * released by mgr_quota_end (idempotent). Boxes of no app (only the admin
 * makes them) and system and pool boxes are never counted. */
typedef struct mgr_ticket {
        void *app; /* internal */
        int64_t boxes, running, disk_mib;
        char *fleet_lock; /* in a fleet: the app's lock in the store, held until the end */
} mgr_ticket;
void mgr_quota_init(ab_manager *m);
void mgr_quota_free(ab_manager *m);
/* A new box of app with this disk: max_boxes, max_running, max_disk_mib.
 * AB_E_QUOTA naming the quota, its limit and the use. */
int mgr_quota_create_begin(ab_manager *m, const char *app, uint64_t disk_mib, mgr_ticket *t,
                           ab_err **err);
/* The ceilings of app (NULL = a box of no app) for a box with limits lim
 * (or NULL: not checked) and network policy network (a "network" object;
 * NULL = not checked, as is mode none): max_limits for everyone,
 * allowed_network for the boxes of an app. AB_E_INVALID naming the field
 * and the ceiling (or the policy's own error). */
int mgr_caps_check(ab_manager *m, const char *app, const ab_limits *lim, json_t *network,
                   ab_err **err);
/* The same ceiling for a new volume of app (a disk on the host too):
 * max_limits.disk_mib, AB_E_INVALID naming it. */
int mgr_caps_check_volume(ab_manager *m, const char *app, uint64_t size_mib, ab_err **err);
/* An image pull of app: *budget gets the bytes of max_disk_mib left (0: no
 * quota, no bound), all of which the ticket holds until mgr_quota_end.
 * AB_E_QUOTA when nothing is left. */
int mgr_quota_image_begin(ab_manager *m, const char *app, uint64_t *budget, mgr_ticket *t,
                          ab_err **err);
/* Starting the stopped box r: max_running. */
int mgr_quota_start_begin(ab_manager *m, const ab_box_rec *r, mgr_ticket *t, ab_err **err);
void mgr_quota_end(ab_manager *m, mgr_ticket *t);
/* mgr_quota_end after fn(arg) - the write that makes the store count what the
 * ticket reserved (a record inserted, a status set) - as one step for the
 * app's counts: another reservation never sees both the record and the
 * reservation (which would count the box twice). Returns fn's result. */
int mgr_quota_commit(ab_manager *m, mgr_ticket *t, int (*fn)(void *arg), void *arg);
/* mgr_quota_commit of the insert of the new record r. */
int mgr_quota_insert(ab_manager *m, mgr_ticket *t, const ab_box_rec *r, ab_err **err);
/* An exec in box r begins: max_execs and exec_rate (a token is taken).
 * 0 when admitted (then mgr_quota_exec_end once it is over). */
int mgr_quota_exec_begin(ab_manager *m, const ab_box_rec *r, ab_err **err);
void mgr_quota_exec_end(ab_manager *m, const ab_box_rec *r);

/* Disk admission and the full-disk guard (diskguard.c). */
typedef struct mgr_disk_ticket {
        uint64_t bytes;
} mgr_disk_ticket;
void mgr_disk_init(ab_manager *m);
void mgr_disk_free(ab_manager *m);
/* Admits a new disk of disk_mib: AB_E_STORAGE when the promised space would
 * pass the overcommit ratio of the free space (or the free space is below
 * the reserve). Release with mgr_disk_end once the disk exists or failed. */
int mgr_disk_admit(ab_manager *m, uint64_t disk_mib, mgr_disk_ticket *t, ab_err **err);
void mgr_disk_end(ab_manager *m, mgr_disk_ticket *t);
/* Starts the guard thread (when disk_watch_interval_ms > 0). */
void mgr_disk_start(ab_manager *m);

/* The backend a record's box runs on (its spec's "backend"; NULL for
 * records older than the field: the default at their time, native). */
const char *mgr_rec_backend(const ab_box_rec *r);
/* The backend a box of `backend` (a request's or a record's; NULL = the
 * default) goes to when that backend's engine keeps images of its own
 * (ops->image_config: Docker), else NULL (images come from agentbox's own
 * store, or the backend is unknown). */
ab_backend *mgr_engine_images(ab_manager *m, const char *backend);

#endif

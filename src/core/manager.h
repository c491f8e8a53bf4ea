/* manager.h - the sandbox manager: turns requests ("a box for these keys",
 * "run this in box X") into backend operations and store records, and runs
 * the lifecycle jobs (idle pause, idle stop, memory pressure, TTL, LRU cap on
 * running boxes, warm pool, asynchronous deletion, resource sampling and
 * alerts).
 *
 * The store is the registry of boxes (who owns them, keys, activity); the
 * backend is the truth about whether a box runs. Operations on one box are
 * serialised by a per-box lock in this process; across processes, the
 * store's unique (provider, id) decides who creates a box.
 *
 * `scope` arguments: NULL = admin (every box); else the app_id of an API key,
 * and boxes of other apps are reported as AB_E_NOT_FOUND. Thread-safe. */
#ifndef AB_MANAGER_H
#define AB_MANAGER_H

#include "backend/backend.h"
#include "base/events.h"
#include "base/metrics.h"
#include "base/quota.h"
#include "core/webhook.h"
#include "image/store.h"
#include "store/store.h"
#include <jansson.h>

typedef struct ab_manager ab_manager;

typedef struct ab_manager_opts {
        ab_backend *backend;    /* borrowed */
        ab_store *store;        /* borrowed */
        ab_events *events;      /* borrowed */
        ab_metrics *metrics;    /* borrowed */
        ab_webhook *webhook;    /* borrowed; NULL = no webhook */
        struct ab_net *net;     /* borrowed; NULL = every box has network mode none */
        ab_image_store *images; /* borrowed; NULL = boxes from images are refused */
        ab_limits limits;       /* defaults of new boxes */
        int64_t idle_pause_s;   /* default of boxes; 0 = no idle pause */
        int64_t idle_stop_s;    /* default of boxes; 0 = no idle stop */
        /* Stop paused boxes (oldest activity first) while the host's
         * MemAvailable is below this percentage of MemTotal; 0 = never. */
        double memory_pressure_pct;
        const char *meminfo_path; /* NULL = /proc/meminfo (tests point it at a file) */
        int64_t ttl_s;            /* default TTL; 0 = none */
        int64_t pool_size;
        int64_t max_running; /* 0 = no cap */
        int64_t reaper_interval_ms;
        int64_t sample_interval_ms; /* 0 = no resource samples */
        double alert_memory_pct, alert_cpu_pct, alert_disk_pct;
        /* Per-app quotas (core/quota.c): the default of every app and
         * overrides by app (borrowed; fields not set inherit). */
        ab_quota quotas;
        const ab_app_quota *app_quotas;
        size_t n_app_quotas;
        /* Disk admission and the full-disk guard (core/diskguard.c): the folder
         * whose filesystem holds the boxes' disks (NULL = neither), the
         * overcommit ratio (0 = no admission control), the space boxes may never
         * take, and the guard's period (0 = no guard). */
        const char *disk_dir;
        double disk_overcommit_ratio;
        uint64_t disk_reserve;
        int64_t disk_watch_interval_ms;
        /* Host directories boxes may mount (canonical folders; a host_path
         * must lie under one after realpath); none = host mounts refused. */
        const char *const *host_mount_prefixes;
        size_t n_host_mount_prefixes;
        /* In a fleet (docs/fleet.md): this node's id. The boxes it makes are
         * its own (the record's node); recovery and the background jobs touch
         * only its own boxes; lists and quotas count every node's. NULL = a
         * single server (records without a node). Borrowed. */
        const char *node_id;
        bool no_jobs; /* a short-lived user (the CLI): no recovery at open and no
                       * background jobs (reaper, pool, sampler, deleters); a
                       * box it deletes stays "deleting" until a server runs */
} ab_manager_opts;

/* Opens the manager: reconciles the store with the backend (recovery after a
 * crash), resumes pending deletions, then starts the background jobs (all
 * skipped with no_jobs). */
int ab_manager_open(const ab_manager_opts *o, ab_manager **out, ab_err **err);
/* Stops the background jobs (waits for running ones) and frees. Boxes keep running. */
void ab_manager_free(ab_manager *m);

/* Derives a box id from keys: the first 16 hex digits of sha256 over the
 * keys as netstrings after a tag ("agentbox-keys-v2,<len>:<app>,<len>:<user>,
 * <len>:<chat>,"; a thread: "agentbox-thread-v2,<len>:<app>,<len>:<thread>,",
 * or "agentbox-thread-v2-admin,<len>:<thread>," with no app). Injective
 * before the cut; docs/api.md gives the scheme. out holds 17 bytes. */
void ab_manager_key_id(const char *app_id, const char *user_id, const char *chat_id, char out[17]);
void ab_manager_thread_id(const char *app_id, const char *thread_id, char out[17]);

typedef struct ab_acquire_req {
        const char *id; /* explicit id, or NULL */
        const char *app_id, *user_id, *chat_id;
        const char *thread_id;
        const char *mode;        /* "session" (NULL) or "task" */
        const ab_limits *limits; /* NULL = defaults */
        json_t *env;             /* object of strings, or NULL (borrowed) */
        json_t *network;         /* or NULL (borrowed) */
        json_t *metadata;        /* or NULL (borrowed) */
        const char *image;       /* a reference or id of the image store; NULL = host base.
                                  * Pulled first when not in the store. */
        const char *backend;     /* "native", "docker" (backend.h); NULL = the server's
                                  * default. On the Docker backend, image is a Docker
                                  * image reference its engine pulls. */
        json_t *entrypoint;      /* array of strings: a long-lived program the box runs on a
                                  * terminal of its own from every start; or NULL (borrowed) */
        int64_t idle_pause_s;    /* 0 = server default, -1 = never */
        int64_t idle_stop_s;     /* 0 = server default, -1 = never */
        bool has_ttl;
        int64_t ttl_s;
        /* A new box's mounts, applied at every start (base/mounts.h), all
         * borrowed or NULL: volumes [{name, path, read_only?}] (AB_E_NOT_FOUND
         * for a volume that does not exist or belongs to another app); mounts
         * [{host_path, path, read_only?}] (host directories: admin only, under
         * host_mount_prefixes, else AB_E_PERMISSION); readonly_paths and
         * blocked_paths [path, ...]. */
        json_t *volumes, *mounts, *readonly_paths, *blocked_paths;
} ab_acquire_req;

/* Makes a new box (id or keys from req, as a create takes them; all
 * optional: a random id in the source's app) with a copy of box src's
 * files (its whole disk), its image (held anew) or host base, limits, env,
 * network policy and entrypoint (req's win where given; req->image is
 * AB_E_INVALID), a uid range of its own; running when this returns. The
 * source keeps running (frozen while its disk is copied). Quotas and disk
 * admission as for a create; publishes "box.created" with "forked_from".
 * AB_E_NOT_FOUND: no src; AB_E_CONFLICT: src is being deleted or the new
 * id exists; AB_E_UNSUPPORTED: the backend cannot fork. */
int ab_manager_fork(ab_manager *m, const char *src, const ab_acquire_req *req, const char *scope,
                    ab_box_rec *out, ab_err **err);

/* Makes a new image in the image store of box id's image plus one layer of
 * what the box changed (its root layer and its /workspace), named `name`
 * (canonicalised as Docker does: "myenv:1" -> docker.io/library/myenv:1).
 * The box is frozen while its disk is copied and goes on. With scope (an
 * API key's app) the image is that app's private image, `name` one of its
 * own names (store.h, ab_image_commit); the admin's is shared. AB_E_INVALID
 * for a bad name; AB_E_UNSUPPORTED for a box on the host base or a backend
 * or server without snapshots. Publishes "box.snapshot". */
int ab_manager_snapshot(ab_manager *m, const char *id, const char *scope, const char *name,
                        ab_image *out, ab_err **err);

/* Finds or makes the box for req and makes sure it runs. *created tells
 * whether it was made by this call. AB_E_INVALID for bad keys, AB_E_CONFLICT
 * when the id belongs to another app or is being deleted for too long,
 * AB_E_UNAVAILABLE when it cannot be started. */
int ab_manager_acquire(ab_manager *m, const ab_acquire_req *req, const char *scope, ab_box_rec *out,
                       bool *created, ab_err **err);

int ab_manager_get(ab_manager *m, const char *id, const char *scope, ab_box_rec *out, ab_err **err);

/* Runs fn(m, ud, err) under box id's lifecycle lock in this process: no
 * create, start, stop, pause or delete of the box runs meanwhile (a fleet
 * node takes a moved box up this way, so a delete comes before or after,
 * never between its look at the record and its rename). Returns fn's. */
typedef int (*ab_locked_fn)(ab_manager *m, void *ud, ab_err **err);
int ab_manager_box_locked(ab_manager *m, const char *id, ab_locked_fn fn, void *ud, ab_err **err);
/* Lists non-pool boxes matching f (f->app_id is forced to scope). */
int ab_manager_list(ab_manager *m, const ab_box_filter *f, const char *scope, ab_box_rec **out,
                    size_t *n, ab_err **err);
int ab_manager_stop(ab_manager *m, const char *id, const char *scope, ab_box_rec *out,
                    ab_err **err);
int ab_manager_start(ab_manager *m, const char *id, const char *scope, ab_box_rec *out,
                     ab_err **err);
/* Freezes every process of a running box (they keep their memory and state;
 * any use of the box resumes it). Pausing a paused box is a no-op.
 * AB_E_CONFLICT when the box is not running or an exec, file or tool call is
 * in flight; AB_E_TIMEOUT when its processes would not stop (it stays
 * running). Records "paused" and publishes "box.paused". */
int ab_manager_pause(ab_manager *m, const char *id, const char *scope, ab_box_rec *out,
                     ab_err **err);
/* Thaws a paused box; counts as activity. Resuming a running box is a no-op;
 * AB_E_CONFLICT when it is stopped (start it). Publishes "box.resumed". */
int ab_manager_resume(ab_manager *m, const char *id, const char *scope, ab_box_rec *out,
                      ab_err **err);
/* Makes box id run, deciding under its lock (no status read before it can
 * change): a paused box is thawed (as ab_manager_resume), a stopped or
 * failed one started (as ab_manager_start), a running one left alone.
 * *woke (when not NULL) says whether it had to be thawed or started; *out
 * (when not NULL) gets the record after. AB_E_CONFLICT while the box is
 * being deleted, AB_E_UNAVAILABLE when it cannot start. For the fronts'
 * "resume" and "connect", which take either state. */
int ab_manager_ensure_running(ab_manager *m, const char *id, const char *scope, bool *woke,
                              ab_box_rec *out, ab_err **err);
/* Makes box id end `secs` seconds from now (E2B's setTimeout): its ttl_s
 * becomes its age plus secs (secs <= 0: no TTL). on_expiry says what the
 * reaper does then: "delete" (the default of every box) or "pause" (the box
 * is paused, its processes kept, or stopped when it cannot be paused, and
 * its TTL cleared); NULL leaves it as it is. Kept in the record (ttl_s,
 * spec.ttl_action). AB_E_CONFLICT for a box being deleted. */
int ab_manager_set_ttl(ab_manager *m, const char *id, const char *scope, int64_t secs,
                       const char *on_expiry, ab_box_rec *out, ab_err **err);
/* Marks the box deleting and queues its destruction; returns at once. */
int ab_manager_delete(ab_manager *m, const char *id, const char *scope, ab_err **err);
/* Deletes every box matching f (app_id, user_id, chat_id or thread_id);
 * *ids gets the ids queued (NULL-terminated; free with the strv cleanup). */
int ab_manager_delete_where(ab_manager *m, const ab_box_filter *f, const char *scope, char ***ids,
                            ab_err **err);
/* Replaces the box's network policy ({"mode", "allow", "deny"}, as at
 * create) and applies it at once when the box runs (else at its next
 * start). Changed rules cut the box's open proxy connections. */
int ab_manager_set_network(ab_manager *m, const char *id, const char *scope, json_t *network,
                           ab_box_rec *out, ab_err **err);
/* Replaces the box's metadata with a copy of `metadata` (an object). */
int ab_manager_set_metadata(ab_manager *m, const char *id, const char *scope, json_t *metadata,
                            ab_box_rec *out, ab_err **err);
/* Makes port (1..65535) of the box public (reachable through the server's
 * port proxy without auth) or private again; kept in the record's
 * spec.public_ports. Idempotent; AB_E_INVALID for a bad port. Publishes
 * "box.port_public" / "box.port_private" when it changes. */
int ab_manager_set_port_public(ab_manager *m, const char *id, const char *scope, int port,
                               bool public, ab_box_rec *out, ab_err **err);
/* True when the record makes port public. */
bool ab_box_port_public(const ab_box_rec *r, int port);
/* Resource usage of a running box (AB_E_CONFLICT when not running). */
int ab_manager_stats(ab_manager *m, const ab_box_rec *r, ab_box_stats *out, ab_err **err);

/* A use of a box by an exec, file or tool call: the box is running and
 * counted busy (idle stop and the LRU cap leave it alone) until
 * ab_manager_use_end, which marks activity and, for a task box, deletes it. */
typedef struct ab_use {
        ab_box_rec rec;
        void *slot;   /* internal */
        void *audit;  /* internal: the exec audit row, written by use_end */
        bool touched; /* internal: an exec recorded the activity already */
        bool held;    /* internal: ab_manager_use_hold */
        void *event;  /* internal: the exec's event, published by use_end when late */
        /* Set by a caller that ends the use right after it answers, before
         * it reads its next request (the REST exec: the HTTP thread ends it
         * once the answer is sent): an exec's activity and event are then
         * recorded by use_end, off the answer's path, yet before anything
         * the client asks next. */
        bool late;
} ab_use;

int ab_manager_use_begin(ab_manager *m, const char *id, const char *scope, ab_use *u, ab_err **err);
/* A new connection to the box's init (the caller closes it). */
int ab_manager_use_connect(ab_manager *m, ab_use *u, ab_err **err);
void ab_manager_use_end(ab_manager *m, ab_use *u);
/* Marks u as held by a long-lived process (an E2B background command or
 * PTY): the box still counts busy for idle stop and the running-box cap, but
 * a pause no longer refuses it: the process is frozen with the box and goes
 * on at the resume, as E2B's pause keeps processes. Idempotent. */
void ab_manager_use_hold(ab_manager *m, ab_use *u);

/* File doors: every file operation on a box goes through one of these, on
 * a use (ab_manager_use_begin; u stays the caller's). Each opens its own
 * connection to the box's init (ab_manager_use_connect: a box stopped under
 * the use is started again), counts in agentbox_file_ops_total{op,result}
 * and as the use's activity, and is never an exec: no exec quota, no exec
 * audit row, no "exec" event. Paths are the box's (relative ones under
 * /workspace); errors are initclient.h's (AB_E_NOT_FOUND a missing path,
 * AB_E_INVALID bad arguments, AB_E_PERMISSION read-only, AB_E_LIMIT a full
 * disk, AB_E_UNAVAILABLE the box cannot be reached). Outputs as the abc_
 * call's: release a stat with abc_stat_clear, a listing with
 * abc_dirents_free. Thread-safe; a use may be shared by one thread only. */
int ab_manager_file_stat(ab_manager *m, ab_use *u, const char *path, bool names, abc_stat *st,
                         ab_err **err);
int ab_manager_file_list(ab_manager *m, ab_use *u, const char *path, int depth, abc_dirent **out,
                         size_t *n, ab_err **err);
/* ab_manager_file_list of box id (scope as everywhere) without a use: only
 * while the box runs (else AB_E_CONFLICT; AB_E_NOT_FOUND when it is gone),
 * never starting or resuming it, and not counted as its activity: a
 * watcher's poll must not keep a box awake. */
int ab_manager_file_peek_list(ab_manager *m, const char *id, const char *scope, const char *path,
                              int depth, abc_dirent **out, size_t *n, ab_err **err);
/* A watch of directory path of box id (abc_watch_open), like
 * ab_manager_file_peek_list without a use: only while the box runs, never
 * waking it, not its activity. *fd (close it to end the watch) carries the
 * events (abc_watch_next); the watch ends with the box. */
int ab_manager_file_watch_open(ab_manager *m, const char *id, const char *scope, const char *path,
                               bool recursive, int *fd, ab_err **err);
int ab_manager_file_read(ab_manager *m, ab_use *u, const char *path, uint64_t offset,
                         uint64_t length, abc_output_fn out, void *ud, ab_err **err);
/* abc_read_beneath: no component of rel is followed when it is a symlink. */
int ab_manager_file_read_beneath(ab_manager *m, ab_use *u, const char *dir, const char *rel,
                                 uint64_t length, abc_output_fn out, void *ud, ab_err **err);
/* abc_grep: init searches the files q->paths for q->pattern in the box. */
int ab_manager_file_grep(ab_manager *m, ab_use *u, const abc_grep_req *q, abc_match_fn fn, void *ud,
                         abc_grep_res *res, ab_err **err);
int ab_manager_file_write(ab_manager *m, ab_use *u, const char *path, const void *data, size_t len,
                          int src_fd, uint32_t flags, uint32_t mode, ab_err **err);
int ab_manager_file_mkdir(ab_manager *m, ab_use *u, const char *path, bool parents, uint32_t mode,
                          ab_err **err);
int ab_manager_file_rename(ab_manager *m, ab_use *u, const char *from, const char *to,
                           ab_err **err);
int ab_manager_file_delete(ab_manager *m, ab_use *u, const char *path, bool recursive,
                           ab_err **err);
/* A symlink at path to target (stored as given). */
int ab_manager_file_symlink(ab_manager *m, ab_use *u, const char *path, const char *target,
                            ab_err **err);
int ab_manager_file_chmod(ab_manager *m, ab_use *u, const char *path, uint32_t mode, ab_err **err);
/* owner, group: names of the box's /etc/passwd and /etc/group or numbers;
 * NULL = unchanged (not both). */
int ab_manager_file_chown(ab_manager *m, ab_use *u, const char *path, const char *owner,
                          const char *group, ab_err **err);

/* Gives a box the backend has but the store does not know (one made by
 * `agentbox create`) a record, as a restart of the server would: a session
 * box of no app. 0 also when it had one; AB_E_NOT_FOUND when the backend has
 * no such box either. */
int ab_manager_adopt(ab_manager *m, const char *id, ab_err **err);

/* System boxes: the server's own boxes (ids start with "sys-"; the code
 * runner's is one). The manager makes one on first use (and again when a
 * crash left it half-made) and starts it when it is not running; it has no
 * store record, so no API call lists, stops, deletes or scopes it, and the
 * reaper, the running-box cap and the pool leave it alone. */
typedef struct ab_sysbox_spec {
        const char *id; /* "sys-..." */
        ab_limits limits;
} ab_sysbox_spec;

/* Begins a use of the system box (making and starting it as needed); then
 * ab_manager_use_connect, ab_manager_exec and ab_manager_use_end work as for
 * any box (an exec in it is counted, audited and published like any exec).
 * Its execs get no default timeout: the caller sets one or none. */
int ab_manager_sys_use_begin(ab_manager *m, const ab_sysbox_spec *spec, ab_use *u, ab_err **err);

/* For a server's clean stop and `agentbox cleanup` (no manager then: the
 * system boxes' users are gone): stops every running or paused system box
 * of b and counts into *stopped those it stopped and into *others_live the
 * other boxes that run, are paused or are being made (they hold what all
 * boxes share, as the skills disk). -1 with err (the first failure) when a
 * list or a stop failed; the others are still tried. */
int ab_sysboxes_stop(ab_backend *b, size_t *stopped, size_t *others_live, ab_err **err);

/* Named volumes (backend.h's ab_volume_ops). A volume made with an API key
 * belongs to its app: scope (an app id) sees and uses only its app's
 * volumes, admin (NULL) every volume. AB_E_UNSUPPORTED when the backend has
 * no volumes. create: size_mib 0 = the default box disk size; AB_E_CONFLICT
 * when the name exists. delete: AB_E_CONFLICT naming the boxes while a box
 * that still exists uses it. */
int ab_manager_volume_create(ab_manager *m, const char *name, uint64_t size_mib, const char *scope,
                             ab_volume_info *out, ab_err **err);
int ab_manager_volume_get(ab_manager *m, const char *name, const char *scope, ab_volume_info *out,
                          ab_err **err);
int ab_manager_volume_list(ab_manager *m, const char *scope, ab_volume_info **out, size_t *n,
                           ab_err **err);
int ab_manager_volume_delete(ab_manager *m, const char *name, const char *scope, ab_err **err);

/* The backend, for operations only it has (ab_backend.subcg, connect_unix). */
ab_backend *ab_manager_backend(ab_manager *m);

/* The box's own environment (the "env" given when it was made) as a
 * NULL-terminated strv of "K=V" (free each and the array). */
char **ab_manager_box_env(const ab_box_rec *r);

/* Runs one command in a box being used: the one door every exec of a user's
 * command goes through (REST and SSE exec, the agent tools of REST, MCP and
 * the CLI, `agentbox exec`). Box env (with the network's proxy variables)
 * merged under req env, the box's timeout and the output cap when req has
 * none; then the exec metric, an "exec" event and an audit row (written by
 * ab_manager_use_end). AB_E_INVALID for a req that is neither one command
 * nor one argv (nothing is recorded then). */
int ab_manager_exec(ab_manager *m, ab_use *u, const abc_exec_req *req, abc_output_fn out, void *ud,
                    abc_exec_res *res, ab_err **err);

typedef struct ab_manager_counts {
        int64_t pool_size, pool_target, execs_in_flight;
        char **states; /* status names (free each + the array) */
        int64_t *counts;
        size_t n_states;
} ab_manager_counts;
int ab_manager_counts_get(ab_manager *m, ab_manager_counts *out, ab_err **err);
void ab_manager_counts_clear(ab_manager_counts *c);

/* ---- quotas (core/quota.c) ---- */

/* Who the calling thread acts for: the HTTP layer sets it around a request
 * made with an API key, so that the key's own quotas apply to what the
 * manager does for that request (quotas are counted per app; a key's quotas
 * only change the limits). NULL (the default) = the app's quotas. The
 * struct must outlive the call that set it; cleared with NULL. */
typedef struct ab_caller {
        const char *key_id;
        const ab_quota *quotas; /* the key's overrides, or NULL */
} ab_caller;
void ab_manager_set_caller(const ab_caller *c);

/* The quotas that apply to app for the calling thread: the server's default,
 * then the app's entry in the config, then key (an API key's own quotas;
 * NULL = the calling thread's caller). */
void ab_manager_quota_of(ab_manager *m, const char *app, const ab_quota *key, ab_quota *out);

/* What an app uses now. */
typedef struct ab_app_usage {
        char *app_id;
        int64_t boxes, running, disk_mib, execs;
        int64_t image_mib;        /* the images the app pulled or made (part of disk_mib) */
        int64_t rejected[AB_Q_N]; /* requests refused by each quota since the server started */
} ab_app_usage;
/* One app's use (AB_E_UNAVAILABLE when the store cannot be read). */
int ab_manager_app_usage(ab_manager *m, const char *app, ab_app_usage *out, ab_err **err);
/* Every app with boxes, execs or refusals, sorted by app id (free with ab_app_usages_free). */
int ab_manager_app_usages(ab_manager *m, ab_app_usage **out, size_t *n, ab_err **err);
void ab_app_usage_clear(ab_app_usage *u);
void ab_app_usages_free(ab_app_usage *u, size_t n);
/* Would an exec of app be admitted now (max_execs, exec_rate)? Checked
 * before a call that would first make a box (POST /v1/exec) so that a
 * refused exec leaves nothing behind. AB_E_QUOTA when not; app NULL = yes. */
int ab_manager_quota_exec_check(ab_manager *m, const char *app, ab_err **err);

/* Pulls ref into the image store for scope (an API key's app; NULL: the
 * admin), as ab_image_pull_as: an app pulls only from allowed registries
 * and addresses, and what the image holds counts against its max_disk_mib
 * (the whole quota left is held for the pull while it runs, so concurrent
 * creates and pulls of the app cannot pass it together; an image over it
 * is AB_E_QUOTA). fn may be NULL; it runs in the calling thread. */
int ab_manager_image_pull(ab_manager *m, const char *scope, const char *ref,
                          ab_image_progress_fn fn, void *ud, ab_image *out, ab_err **err);

/* Image doors: the image store as scope (an API key's app; NULL: the admin)
 * sees it. Every one is AB_E_UNSUPPORTED on a server without an image
 * store; pull, remove and import count in agentbox_lifecycle_ops_total
 * (image_pull, image_remove, image_import). list: the images scope may
 * use (its own private ones and the shared ones), sorted by id; free with
 * ab_image_list_free. get: as ab_image_get_as (AB_E_NOT_FOUND for an image
 * scope cannot see); release *out with ab_image_clear. remove: a name (or,
 * given an id or digest, every name of the image) as ab_image_remove, then
 * a GC (*freed: its bytes; may be NULL); with scope, only a ref the app
 * can see (else AB_E_NOT_FOUND). import: a `docker save` or OCI layout
 * tarball read from fd (the admin's: a route makes sure), as
 * ab_image_import. */
int ab_manager_image_list(ab_manager *m, const char *scope, ab_image **out, size_t *n,
                          ab_err **err);
int ab_manager_image_get(ab_manager *m, const char *scope, const char *ref, ab_image *out,
                         ab_err **err);
int ab_manager_image_remove(ab_manager *m, const char *scope, const char *ref, uint64_t *freed,
                            ab_err **err);
int ab_manager_image_import(ab_manager *m, int fd, const char *name, ab_image **out, size_t *n,
                            ab_err **err);

/* ---- disk (core/diskguard.c) ---- */

typedef struct ab_disk_usage {
        uint64_t free_bytes, total_bytes; /* of the data folder's filesystem */
        uint64_t promised_bytes;          /* sum over boxes of disk limit minus what it holds */
        uint64_t balloon_bytes;           /* space held back from running boxes by the guard */
        int64_t boxes_ballooned;
        int64_t refused;      /* creates refused for space */
        int64_t guard_rounds; /* rounds of the full-disk guard so far */
} ab_disk_usage;
int ab_manager_disk_usage(ab_manager *m, ab_disk_usage *out, ab_err **err);
/* Runs the full-disk guard once now (tests; the guard thread calls it). */
void ab_manager_disk_balance(ab_manager *m);

/* Runs the reaper jobs once now (idle stop, idle pause, memory pressure, TTL,
 * drift, LRU cap); tests and the background thread call it. */
void ab_manager_reap(ab_manager *m);

/* ---- terminals (core/term.c): programs on a pseudo-terminal in a box,
 * kept by the box's init until they exit, are closed, or the box stops ---- */

/* Starts a terminal in a box being used (the box's env under req's env, as
 * an exec gets it). Publishes "terminal.opened". */
int ab_manager_term_open(ab_manager *m, ab_use *u, const abc_term_req *req, abc_term_info *out,
                         ab_err **err);

/* An attached terminal: holds a use of the box (it counts busy: idle stop,
 * idle pause and the running-box cap leave it alone) until detached. */
typedef struct ab_term_attach {
        ab_use use;
        int fd;                  /* the connection to init: poll it for output */
        abc_term_stream *stream; /* abc_term_next / abc_term_input on it */
        abc_term_info info;
        bool own_use; /* ab_manager_term_detach ends the use */
} ab_term_attach;

/* Attaches to terminal tid of a box being used (u is copied into a and
 * ended by detach when own_use; the CLI keeps its own). AB_E_NOT_FOUND for
 * an unknown terminal. */
int ab_manager_term_attach_use(ab_manager *m, ab_use *u, const char *tid, ab_term_attach *a,
                               ab_err **err);
/* The same for box id as the API sees it: a stopped box has no terminals
 * (AB_E_NOT_FOUND, the box is not started); a paused one is resumed. */
int ab_manager_term_attach(ab_manager *m, const char *id, const char *scope, const char *tid,
                           ab_term_attach *a, ab_err **err);
void ab_manager_term_detach(ab_manager *m, ab_term_attach *a);

/* Records a terminal session run as a command (`agentbox exec -t`) in the
 * exec audit, as ab_manager_exec records an exec: argv (NULL = the login
 * shell), its exit code, its start (unix ms). Written by use_end. */
void ab_manager_term_audit(ab_manager *m, ab_use *u, const char *const *argv, int exit_code,
                           int64_t started_ms);

/* Terminal operations by box id (scope as everywhere). A stopped box has no
 * terminals: list is empty and the others are AB_E_NOT_FOUND, without
 * starting it. open starts (or resumes) the box like an exec. */
int ab_manager_term_open_id(ab_manager *m, const char *id, const char *scope,
                            const abc_term_req *req, abc_term_info *out, ab_err **err);
int ab_manager_term_list(ab_manager *m, const char *id, const char *scope, abc_term_info **out,
                         size_t *n, ab_err **err);
int ab_manager_term_get(ab_manager *m, const char *id, const char *scope, const char *tid,
                        abc_term_info *out, ab_err **err);
int ab_manager_term_close(ab_manager *m, const char *id, const char *scope, const char *tid,
                          ab_err **err);
int ab_manager_term_resize(ab_manager *m, const char *id, const char *scope, const char *tid,
                           uint32_t cols, uint32_t rows, ab_err **err);
int ab_manager_term_signal(ab_manager *m, const char *id, const char *scope, const char *tid,
                           int sig, ab_err **err);
/* Input without attaching (for fronts whose clients send keystrokes apart
 * from the output stream); at most 60 KiB a call. */
int ab_manager_term_input(ab_manager *m, const char *id, const char *scope, const char *tid,
                          const void *data, size_t len, ab_err **err);

/* ---- users' commands held by the box's init (core/term.c): background
 * processes (pipes, no pty) and commands on a terminal that a front starts
 * for a user (E2B processes and PTYs, OpenSandbox commands). They outlive
 * the server: list, attach (ab_manager_term_attach), signal and close them
 * by id after a restart. The exec door's rule, as ab_manager_exec applies
 * it to a command it runs to its end: admitted by the app's exec quota
 * (max_execs, exec_rate) at its start (then it runs on its own, bounded by
 * init: 64 processes per box); an exec audit row at its start (exit_code
 * -1, duration 0: it runs on); an "exec" event with "background": true and
 * its "process_id". No exec metric: the server does not see it finish. ---- */

/* Starts req (argv, or for a process command; pipes: a background process, else a terminal)
 * in a box being used, with the box's env under req's, the image's user and
 * workdir unless req names them. AB_E_QUOTA when the app may not exec now,
 * AB_E_CONFLICT when the box holds as many as init keeps. */
int ab_manager_cmd_start(ab_manager *m, ab_use *u, const abc_term_req *req, abc_term_info *out,
                         ab_err **err);
/* The same by box id (starts or resumes it, as an exec). */
int ab_manager_cmd_start_id(ab_manager *m, const char *id, const char *scope,
                            const abc_term_req *req, abc_term_info *out, ab_err **err);
/* Admits and records a user's command that a front runs in a shell it keeps
 * (an OpenSandbox session's run): the quota, audit row and event of
 * ab_manager_cmd_start, for `command` typed into terminal tid. */
int ab_manager_cmd_record(ab_manager *m, ab_use *u, const char *command, const char *tid,
                          ab_err **err);
/* The box's background processes (a stopped box has none: empty). */
int ab_manager_proc_list(ab_manager *m, const char *id, const char *scope, abc_term_info **out,
                         size_t *n, ab_err **err);
/* Writes a background process's stdin (at most 60 KiB a call), then closes
 * it when close_stdin. AB_E_CONFLICT when its stdin is closed. */
int ab_manager_proc_input(ab_manager *m, const char *id, const char *scope, const char *tid,
                          const void *data, size_t len, bool close_stdin, ab_err **err);

#endif

/* backend.h - the one interface every box backend implements: native
 * (Linux namespaces on this host), Docker (containers of an engine), mock
 * (in memory, for users' own tests) and, next, Kubernetes (pods). A backend
 * owns boxes' runtime: it creates them, starts and stops their init,
 * destroys them, and hands out a connection to a box's agentbox-init. Exec
 * and file operations then go through the init protocol (initclient.h),
 * identical on every backend.
 *
 * Which ops a backend must have (ab_backend_ops, op by op below):
 *   required  name create start stop pause resume destroy info list connect
 *             stats free - every backend, Kubernetes too; callers call them
 *             without checking.
 *   optional  connect_unix release disk_alloc fork snapshot image_config set_network
 *             port_connect, and the
 *             subcg and vol tables - NULL where a backend has no such thing;
 *             every caller checks for NULL first and answers AB_E_UNSUPPORTED
 *             (501 over HTTP) naming the backend.
 *                      native  docker  mock  kubernetes
 *   connect_unix       yes     yes     -     -
 *   release            yes     -       -     -
 *   disk_alloc         yes     -       -     -
 *   fork, snapshot     yes     -       -     -
 *   image_config       -       yes     -     yes (the cluster pulls images)
 *   set_network        -       -       -     yes (a NetworkPolicy)
 *   port_connect       yes     yes     -     yes (init relays: proto 4)
 *   subcg, vol         yes     -       -     -
 *
 * Thread-safety: every op may be called concurrently from several threads and
 * several processes; backends serialise per box themselves. */
#ifndef AB_BACKEND_H
#define AB_BACKEND_H

#include "proto/initclient.h"
#include "base/box.h"
#include "base/err.h"
#include "base/limits.h"
#include "base/mounts.h"

#include <jansson.h>

#define AB_ID_MAX 63

typedef struct ab_box_spec {
        const char *id; /* validated with ab_id_valid */
        ab_limits limits;
        const char *rootfs; /* NULL = curated host base; else a directory tree */
        /* Or an image: its unpacked layer trees (absolute paths, bottom
         * first, NULL-terminated; they must stay until the box is deleted)
         * and its id, recorded with the box. Not with rootfs. */
        const char *const *layers;
        const char *image;
        /* Volumes (by name: they must exist), host directories (canonical
         * paths; whether one is allowed is the caller's decision), read-only
         * and hidden paths, checked with ab_box_mounts_check; recorded with
         * the box and applied at every start. AB_E_NOT_FOUND for a volume
         * that does not exist (and nothing is created). */
        const ab_box_mount *mounts;
        size_t n_mounts;
        /* Which backend makes the box, by its ops->name ("native", "docker", "mock"),
         * for the multiplexing backend (ab_multi_open); NULL = its default.
         * A single backend ignores it. On a backend with image_config
         * (Docker), `image` is a reference its engine pulls (layers is NULL). */
        const char *backend;
        /* The box's network mode ("none", "allowlist", "full"; NULL =
         * "none"), for a backend that enforces it itself at create
         * (kubernetes: a NetworkPolicy); the others ignore it. */
        const char *network;
} ab_box_spec;

typedef struct ab_box_info {
        char *id;
        ab_box_status status;
        ab_limits limits;
        int64_t created_at; /* unix seconds */
        int64_t started_at; /* unix seconds of the last start, 0 if stopped */
        pid_t init_pid;     /* host pid of the box's init (running or paused), else 0 */
        char *rootfs;       /* NULL = host base */
        char *image;        /* the image's id for a box made from one, else NULL */
        char *error;        /* why the box is in AB_BOX_ERROR, else NULL */
        /* The image's WorkingDir and User as the box runs them, for a backend
         * that learns them only by running the image (kubernetes: its pod's
         * image probe); NULL where the image has none or the backend does not
         * tell (the others: image_config says). */
        char *image_workdir, *image_user;
        const char *backend; /* static: the ops->name of the backend that runs it */
        /* Its move to another host was being recorded (ab_move_ops.send_mark):
         * with no store record it is a moved box deleted since, not a box to
         * adopt. */
        bool moved_away;
} ab_box_info;

void ab_box_info_clear(ab_box_info *i);

typedef struct ab_box_stats {
        uint64_t memory_bytes, memory_limit;
        uint64_t pids;
        uint64_t cpu_usage_ns;
        uint64_t disk_used_bytes, disk_limit_bytes;
        uint64_t oom_kills;
} ab_box_stats;

typedef struct ab_backend ab_backend;

typedef struct ab_backend_ops {
        /* Required: a static name, what ab_box_spec.backend and the config's
         * `backend` call it. */
        const char *name;
        /* Required. Creates the box's persistent disk and starts it. AB_E_CONFLICT if the id
         * exists. */
        int (*create)(ab_backend *b, const ab_box_spec *spec, ab_err **err);
        /* Required. Starts a stopped box over its existing disk. Starting a running box is a
         * no-op; starting a paused box resumes it. */
        int (*start)(ab_backend *b, const char *id, ab_err **err);
        /* Required. Ends every process of the box and releases its mounts; the disk stays.
         * Stopping a stopped box is a no-op; a paused box is stopped too. */
        int (*stop)(ab_backend *b, const char *id, ab_err **err);
        /* Required (a backend that cannot freeze answers AB_E_UNSUPPORTED). Freezes every process
         * of a running box: they keep their memory, files and sockets but get no CPU until resume.
         * The state lives with the box (its cgroup on the native backend), so another process sees
         * it paused. Pausing a paused box is a no-op. AB_E_CONFLICT when the box is not running;
         * AB_E_TIMEOUT when its processes did not all stop in time (the box is then left running).
         * connect refuses a paused box. */
        int (*pause)(ab_backend *b, const char *id, ab_err **err);
        /* Required. Thaws a paused box: its processes go on where they were. Resuming a
         * running box is a no-op; AB_E_CONFLICT when the box is not running. */
        int (*resume)(ab_backend *b, const char *id, ab_err **err);
        /* Required. Stops the box if needed and removes everything of it. */
        int (*destroy)(ab_backend *b, const char *id, ab_err **err);
        /* Required. Current state; AB_E_NOT_FOUND for no such box; a box whose init died is
         * reported (and recorded) as stopped, a box whose processes are frozen as paused. */
        int (*info)(ab_backend *b, const char *id, ab_box_info *out, ab_err **err);
        /* Required. Every box, sorted by id. Free each with ab_box_info_clear, then the array. */
        int (*list)(ab_backend *b, ab_box_info **out, size_t *n, ab_err **err);
        /* Required. A new connection to the running box's init, speaking the
         * init protocol (a socket; caller closes).
         * AB_E_CONFLICT when the box is not running (paused included: resume it). */
        int (*connect)(ab_backend *b, const char *id, ab_err **err);
        /* Optional (NULL: the caller closes the connection). Takes fd, a
         * connection from connect on which an exec answered with AGAIN
         * (abc_exec_res.again): connect may hand it out again for box id
         * while its init's session waits on it. Never fails (it may close fd). */
        void (*release)(ab_backend *b, const char *id, int fd);
        /* Required. Resource usage of a running or paused box (zeros where
         * the backend measures nothing). */
        int (*stats)(ab_backend *b, const char *id, ab_box_stats *out, ab_err **err);
        /* Optional (NULL: the code runner, its only user, is unavailable on
         * the backend's boxes). A connection to the unix stream socket at `path` (absolute, as the
         * box sees it; resolved inside the box, no symlinks) of a running box.
         * Caller closes. The code runner reaches its zygote this way. */
        int (*connect_unix)(ab_backend *b, const char *id, const char *path, ab_err **err);
        /* Required. Frees the backend (boxes keep running where they run
         * outside this process). */
        void (*free)(ab_backend *b);
        /* Optional (NULL where a backend has no disks of its own on this host):
         * the bytes the box's disk takes on the host's filesystem now (a sparse
         * image: what it holds, not its size). AB_E_NOT_FOUND for no such box. */
        int (*disk_alloc)(ab_backend *b, const char *id, uint64_t *bytes, ab_err **err);
        /* Optional (NULL: the backend cannot; the API answers 501): makes box
         * spec->id a copy of box src - its whole disk (writable layers,
         * workspace, uploads, outputs) and its base (host base, rootfs or an
         * image's layers: src's; spec's are ignored) - with a uid range of
         * its own and spec->limits (a disk smaller than src's is src's size),
         * and starts it. A running src is frozen while its disk is copied
         * and thawed after: it keeps running, untouched; a paused or stopped
         * one is copied as it is. AB_E_NOT_FOUND: no src; AB_E_CONFLICT:
         * spec->id exists. */
        int (*fork)(ab_backend *b, const char *src, const ab_box_spec *spec, ab_err **err);
        /* Optional (NULL: 501): writes what the box changed of its image -
         * its writable root layer, and its /workspace as "workspace/..." -
         * as an uncompressed OCI layer tar (whiteouts as ".wh." entries,
         * owners box-side) to out_fd, read from a consistent copy of its
         * disk (a running box is frozen while the copy is made).
         * AB_E_UNSUPPORTED for a box not made from an image. */
        int (*snapshot)(ab_backend *b, const char *id, int out_fd, ab_err **err);
        /* Optional: set on a backend whose engine keeps images of its own
         * (Docker; Kubernetes), NULL on one that runs images of agentbox's
         * own store (spec->layers, which core resolves). The configuration of
         * image `ref` (NULL = the backend's default image), pulled first
         * where the engine lacks it, shaped as the manager records an image
         * of a box: {"ref", "id", "env": ["K=V", ...], "workdir"?, "user"?}.
         * A box of such a backend is created with spec->image = the reference
         * (layers NULL); the image's Env, WorkingDir and User reach the box's
         * commands only through the manager, which passes them with every
         * exec. AB_E_INVALID for no ref and no default image, AB_E_NOT_FOUND
         * for an image the engine cannot find. Caller decrefs *out. */
        int (*image_config)(ab_backend *b, const char *ref, json_t **out, ab_err **err);
        /* Optional: set on a backend that enforces a box's network mode itself
         * (kubernetes: a NetworkPolicy), NULL where the server's network code
         * applies it to the box's netns (native, Docker). Makes box id's
         * enforcement match mode ("none", "allowlist", "full"); AB_E_NOT_FOUND
         * for no such box. */
        int (*set_network)(ab_backend *b, const char *id, const char *mode, ab_err **err);
        /* Optional (NULL: ports of the backend's boxes answer 501). A TCP
         * connection to `port` on the running box's own loopback (127.0.0.1,
         * then [::1]), as a process of the box would open it - so a server
         * listening on 127.0.0.1 in the box is reached, and a box without
         * network too: native and Docker connect inside the box's network
         * namespace; kubernetes asks the pod's init to connect and relay
         * (init's PORT, docs/protocol.md). Connected, O_NONBLOCK, caller
         * closes; timeout_ms bounds the connect. AB_E_NOT_FOUND for no such
         * box; AB_E_CONFLICT when it is not running (paused included);
         * AB_E_UNAVAILABLE with errnum ECONNREFUSED when nothing listens
         * there; AB_E_TIMEOUT (errnum ETIMEDOUT) when it does not answer. */
        int (*port_connect)(ab_backend *b, const char *id, uint16_t port, int timeout_ms,
                            ab_err **err);
} ab_backend_ops;

/* Sub-cgroups of a running box: limits on one process tree inside it
 * (native/cgroup.h; the code runner puts each run in one). Not every backend
 * has them: ab_backend.subcg is NULL where it has none. sub is one name
 * component. create makes it with a memory limit (bytes) and a pids limit and
 * moves host_pid (a pid in the server's pid namespace) into it; set_memory
 * rewrites the memory limit; end kills whatever is inside, reports its OOM
 * kills (oom_kills may be NULL) and removes it. */
typedef struct ab_subcg_ops {
        int (*create)(ab_backend *b, const char *id, const char *sub, uint64_t memory_bytes,
                      uint64_t pids, pid_t host_pid, ab_err **err);
        int (*set_memory)(ab_backend *b, const char *id, const char *sub, uint64_t bytes,
                          ab_err **err);
        int (*end)(ab_backend *b, const char *id, const char *sub, uint64_t *oom_kills,
                   ab_err **err);
} ab_subcg_ops;

/* Named volumes: disks that outlive boxes, used by several at once (by
 * name in ab_box_spec.mounts). Not every backend has them: ab_backend.vol
 * is NULL where it has none. */
typedef struct ab_volume_info {
        char *name;
        uint64_t size_mib;
        uint64_t used_bytes;
        int64_t created_at; /* unix seconds */
        char *owner;        /* what create was given (an app id), or NULL */
        char **boxes;       /* ids of the boxes that use it, NULL-terminated */
} ab_volume_info;

void ab_volume_info_clear(ab_volume_info *v);

typedef struct ab_volume_ops {
        /* AB_E_CONFLICT when it exists, AB_E_INVALID for a bad name or size. */
        int (*create)(ab_backend *b, const char *name, uint64_t size_mib, const char *owner,
                      ab_err **err);
        /* AB_E_NOT_FOUND when absent. */
        int (*get)(ab_backend *b, const char *name, ab_volume_info *out, ab_err **err);
        /* Sorted by name; free each with ab_volume_info_clear, then the array. */
        int (*list)(ab_backend *b, ab_volume_info **out, size_t *n, ab_err **err);
        /* Unmounts and removes it with its data. AB_E_CONFLICT naming the boxes
         * while a box that still exists uses it. */
        int (*remove)(ab_backend *b, const char *name, ab_err **err);
} ab_volume_ops;

/* Moving a stopped box's files to another host (a fleet's move,
 * docs/fleet.md): the sending side opens the box, the receiving side stages
 * a copy under its own data folder and adopts it once the store names it
 * the owner. `id` is the backend's id of the box. A backend that cannot
 * (every one but native) has ab_backend.move NULL. Thread-safe. */
typedef struct ab_move_ops {
        /* Locks the stopped box id (its start and delete wait until *lockfd
         * is closed), opens its disk read-only (*disk) and reads its
         * settings as JSON text (*config; the caller frees). AB_E_CONFLICT
         * while it runs or is paused, or when it uses named volumes or host
         * folders (they stay on this host). */
        int (*send_open)(ab_backend *b, const char *id, int *lockfd, int *disk, char **config,
                         ab_err **err);
        /* Marks the box id as leaving (away: before the store names the
         * other host its owner, so a crash after that switch leaves a folder
         * that says so) or not (the move did not happen). Synced. */
        int (*send_mark)(ab_backend *b, const char *id, bool away, ab_err **err);
        /* Stages a copy of box id from another host: a folder of the data
         * folder's incoming/, locked (*lockfd) while it is received, with
         * config (send_open's text) written and an empty disk (*disk,
         * read-write). AB_E_CONFLICT when the box exists here or a copy of
         * it is being received, or when config names a rootfs or image
         * layers this host does not have; AB_E_INVALID for a config that is
         * no box's or another box's. */
        int (*recv_open)(ab_backend *b, const char *id, const char *config, int *lockfd, int *disk,
                         ab_err **err);
        /* Records the staged copy of id as complete (its disk received,
         * verified and synced); the caller still holds its lock. */
        int (*recv_complete)(ab_backend *b, const char *id, ab_err **err);
        /* Makes the complete staged copy of id a box of this host: a uid
         * range of its own (the disk's files are given to it at its first
         * start), the folder renamed into boxes/. 0 when the box is here
         * already; AB_E_NOT_FOUND when no complete copy is staged;
         * AB_E_CONFLICT while it is being received. */
        int (*adopt)(ab_backend *b, const char *id, ab_err **err);
        /* Removes the staged copy of id (0 when there is none);
         * AB_E_CONFLICT while it is being received. */
        int (*drop)(ab_backend *b, const char *id, ab_err **err);
        /* The staged copies nobody is receiving: ids (NULL-terminated; the
         * caller frees each and the array), whether each is complete, and
         * its age in seconds (the arrays are the caller's too). */
        int (*staged)(ab_backend *b, char ***ids, bool **complete, int64_t **age_s, ab_err **err);
} ab_move_ops;

struct ab_backend {
        const ab_backend_ops *ops;
        const ab_subcg_ops *subcg; /* NULL: no sub-cgroups */
        const ab_volume_ops *vol;  /* NULL: no volumes */
        const ab_move_ops *move;   /* NULL: its boxes cannot move to another host */
};

typedef struct ab_native_opts {
        const char *data_dir;  /* created if missing */
        const char *init_path; /* agentbox-init binary; NULL = search next to the running binary */
        /* Keep formatted disk images ready for the next creates, made by a
         * background thread (for long-running processes: the server). */
        bool keep_spares;
        /* Keep what boxes must not see of the host current with inotify
         * (native/hide.h; for long-running processes: the server). Without
         * it each start re-checks the walk persisted in DATA/hide.cache. */
        bool watch_host;
        /* Size of the skills folder's own disk when it is made (DATA/skills.img,
         * native/skillsfs.h); 0 = AB_SKILLS_DISK_MIB. */
        uint64_t skills_disk_mib;
        /* Leave the sweeps of what crashed creates and deletes left (trash,
         * stale uid-range claims, the disk template cache) to the next
         * opener without it: for a short-lived process that only uses boxes
         * (the CLI's exec), which would otherwise read every claim on the
         * host on each run. */
        bool no_sweeps;
        /* Set up DATA/skills (mount its disk) only before a box starts, not
         * at open: for short-lived processes (the CLI), which would otherwise
         * leave it mounted after an `ls`. The server mounts it at open (its
         * skills routes write there). */
        bool lazy_skills;
        /* Find agentbox-init (init_path, AGENTBOX_INIT, or beside this
         * binary) before the first start of a box, not at open: for a
         * process that only uses boxes (the CLI's exec); a missing one is
         * then that start's error. */
        bool lazy_init;
} ab_native_opts;

#define AB_SKILLS_DISK_MIB 1024

/* The native backend: Linux namespaces, overlay rootfs, cgroups, seccomp. */
int ab_native_open(const ab_native_opts *opts, ab_backend **out, ab_err **err);

/* The Docker backend (backend/docker.c): each box is a container of a Docker
 * engine, reached over its Engine API (libcurl on the unix socket), running
 * agentbox-init as PID 1. Containers carry labels (agentbox.box=ID,
 * agentbox.data=<hash of data_dir>) that tie them to boxes and to this data
 * folder, so list/info/recovery need no state of their own besides
 * DATA/docker/ID/ (the init socket's folder, bind-mounted into the box). */
typedef struct ab_docker_opts {
        /* The engine's address as DOCKER_HOST spells it ("unix:///path");
         * NULL = $DOCKER_HOST, else unix:///var/run/docker.sock. */
        const char *host;
        const char *data_dir;  /* agentbox's data folder (created if missing) */
        const char *init_path; /* static agentbox-init; NULL = next to the running binary */
        const char *runtime;   /* OCI runtime name (e.g. "runsc"); NULL = the engine's default */
        const char *default_image; /* image of a box created without one; NULL = refuse */
        const char *skills_dir;    /* host folder shown read-only at /mnt/skills; NULL = none */
} ab_docker_opts;

int ab_docker_open(const ab_docker_opts *opts, ab_backend **out, ab_err **err);

/* The mock backend (backend/mock.c, docs/backends.md): boxes in this
 * process's memory, for users' own tests - no kernel features, no root.
 * Files live in memory (bounded by the box's disk limit); EXEC runs nothing
 * and answers from the expectations file, a JSON object {"commands": [{
 * "command": exact text | "regex": POSIX extended, "stdout"?, "stderr"?,
 * "exit_code"? (0), "delay_ms"? (0)}, ...]} read again whenever it changes
 * (the first rule that matches wins; an argv ending in "-c CMD" - a shell
 * given a command line, as the fronts wrap commands - is matched as CMD,
 * other argv as the words joined by spaces); a command no rule matches exits 127 with
 * "agentbox mock: no expectation matches this command: ..." on stderr.
 * Terminals are AB_E_UNSUPPORTED. A box holds at most 64 MiB of files
 * (less under a smaller disk limit), all boxes 512 MiB. Every call is
 * appended to the calls log as one JSON line {"time_ms", "box", "op", ...}.
 * AB_E_INVALID for an unreadable or malformed expectations file or log
 * path. */
typedef struct ab_mock_opts {
        const char *expect_path; /* NULL = no rules: every command is unmatched */
        const char *log_path;    /* appended to (created 0600); NULL = no log */
        /* Where the boxes and their files are kept across a clean restart:
         * written at free, read (then removed) at open, so a box deleted
         * after a start never comes back after a crash. NULL = memory only.
         * AB_E_INVALID at open for a file that does not read back. */
        const char *state_path;
} ab_mock_opts;

int ab_mock_open(const ab_mock_opts *opts, ab_backend **out, ab_err **err);

/* The kubernetes backend (backend/kubernetes.c, docs/kubernetes.md): each
 * box is a pod of a cluster (a Secret as its record, a PVC for its files,
 * a NetworkPolicy for its network mode), its init reached over TCP on the
 * pod's IP with the box's secret (proto/handshake.h). pause is a stop.
 * settings_json is the config's `kubernetes:` section as JSON text (see
 * ab_k8s_settings_check); init_image is required. Connects to the API at
 * open (AB_E_UNAVAILABLE or AB_E_PERMISSION when it cannot list pods) and
 * removes boxes a create left half made. */
typedef struct ab_k8s_opts {
        const char *settings_json;
        const char *data_dir; /* tells this server's boxes from others' in one namespace */
} ab_k8s_opts;

int ab_k8s_open(const ab_k8s_opts *opts, ab_backend **out, ab_err **err);
/* Checks the settings s (a JSON object: kubeconfig, context, namespace,
 * image, init_image, image_pull_policy, storage_class, workspace_size,
 * node_selector, tolerations, runtime_class, labels, annotations,
 * ready_timeout, egress_proxy), turning YAML's string numbers into numbers
 * where the API wants them. 0, or AB_E_INVALID naming the setting. */
int ab_k8s_settings_check(json_t *s, ab_err **err);
/* The settings as the config file gives them (a YAML mapping node of doc),
 * checked as ab_k8s_settings_check does, into *json (JSON text for
 * ab_k8s_opts.settings_json; caller frees). 0 or AB_E_INVALID. */
typedef struct yaml_document_s yaml_document_t;
typedef struct yaml_node_s yaml_node_t;
int ab_k8s_settings_yaml(yaml_document_t *doc, yaml_node_t *n, char **json, ab_err **err);

/* A backend over several (backend/multi.c): create goes to the one
 * spec->backend names (AB_E_INVALID naming the choices for an unknown name;
 * NULL = the one named default_name); every other op to the one that has
 * the box (asked in order, the answer cached); an optional op the owner
 * lacks is AB_E_UNSUPPORTED. image_config goes to the default backend (ask
 * ab_backend_pick for another one's). list merges. subcg and vol are
 * backends[0]'s (the native one). Takes ownership of the backends
 * (freed with it, also on failure). Its ops->name is backends[0]'s, so the
 * store's records keep their provider whichever backend is the default. */
int ab_multi_open(ab_backend **backends, size_t n, const char *default_name, ab_backend **out,
                  ab_err **err);
/* The name of the backend creates go to when a spec names none: the
 * default of a multi backend, else b's own name. */
const char *ab_backend_default(ab_backend *b);
/* The backend named `name` inside b (b itself when it is not a multi one
 * and has that name), or NULL. */
ab_backend *ab_backend_find(ab_backend *b, const char *name);
/* The backend a box of spec->backend `name` goes to: ab_backend_find(b,
 * name), or for NULL the default one. NULL for an unknown name. To ask
 * whether that backend has an optional op, test its ops (a multi backend's
 * own table routes every op). */
ab_backend *ab_backend_pick(ab_backend *b, const char *name);
/* The names of b's backends, ", "-separated, into buf (cut to size). */
void ab_backend_names(ab_backend *b, char *buf, size_t size);

static inline void ab_backend_freep(ab_backend **b)
{
        if (*b)
                (*b)->ops->free(*b);
}
#define _cleanup_backend_ __attribute__((cleanup(ab_backend_freep)))

/* agentbox-init: `given` (init_path, AGENTBOX_INIT) made canonical and
 * checked executable, else found next to the running binary (or in the
 * libexec folders of an install). Also what a front copies into a box as
 * its sudo (init run under that name). Caller frees; NULL with *err naming
 * where it looked. */
char *ab_backend_find_init(const char *given, ab_err **err);

#endif

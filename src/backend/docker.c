/* The Docker backend: each box is a container of a Docker engine on this
 * host, reached over the Engine API (docker_api.h), with agentbox-init as
 * its PID 1. Exec, files, tools and terminals then go through the init
 * protocol exactly as on the native backend.
 *
 * What a box is made of (NAME = agentbox-<data hash>-<id>):
 *   container NAME    labels agentbox.box=ID, agentbox.data=<data hash>
 *                     (so two data folders on one engine never see each
 *                     other's boxes), agentbox.created, agentbox.limits,
 *                     agentbox.image, agentbox.disk; network "none" (the
 *                     server's network code sets up its netns through
 *                     /proc/PID, as on the native backend); init bound
 *                     read-only at /.agentbox-init
 *   volume NAME       the box's files: workspace/, uploads/, outputs/,
 *                     bound at /workspace and /mnt/user-data/{workspace,
 *                     uploads,outputs}; kept by stop, removed by destroy
 *   DATA/docker/ID/   lock (flock: one operation on a box at a time, across
 *                     threads and processes), paused (marker, see
 *                     mark_paused), run/ (a small tmpfs mounted here, bound
 *                     at /.agentbox in the box; init listens on
 *                     /.agentbox/init.sock). A tmpfs of its own so that the
 *                     box's mount table names no path of the data folder.
 *
 * The engine is the record: list and info read containers and volumes by
 * label; a crash at any point leaves a box that list shows and destroy
 * removes (a volume without a container, or a container never started, is
 * a create that did not finish). */
#include "backend/backend_int.h"
#include "backend/backend.h"
#include "backend/docker_api.h"
#include "base/id.h"
#include "base/codec.h"
#include "base/log.h"
#include "base/selfpath.h"

#include <dirent.h>
#include <elf.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <math.h>
#include <pthread.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>

#define IN_INIT         "/.agentbox-init" /* the init binary, inside the box */
#define IN_RUN          "/.agentbox"      /* the socket's folder, inside the box */
#define START_WAIT_MS   15000u            /* for the init to answer after a start */
#define PULL_TIMEOUT_MS (30u * 60u * 1000u)
#define RUN_TMPFS_OPTS  "size=1m,mode=0700"

typedef struct dk {
        ab_backend base;
        ab_dapi *api;
        char *data; /* canonical */
        char *root; /* DATA/docker */
        int root_fd;
        char *init_path;
        char *runtime, *default_image, *skills_dir;
        char hash[17]; /* of data: the agentbox.data label */
        pthread_mutex_t mu;
        int disk_quota; /* 0: not tried yet; 1: the engine takes StorageOpt size; -1: it refuses */
        char *disk_why; /* why it refuses */
        bool disk_warned;
} dk;

static dk *D(ab_backend *b)
{
        return (dk *)b;
}

static char *obj_name(const dk *d, const char *id)
{
        return xasprintf("agentbox-%s-%s", d->hash, id);
}

static const char *jstr(const json_t *o, const char *k)
{
        return json_string_value(json_object_get(o, k));
}

/* ---- locking ------------------------------------------------------------- */

/* Opens DATA/docker/ID (made when `make`) and locks its lock file; the
 * directory is checked to still be the live one once locked (destroy
 * removes it while holding the lock). *made says whether it was made now.
 * AB_E_NOT_FOUND when absent and !make. */
static int lock_box(dk *d, const char *id, bool make, bool *made, int *lockfd, ab_err **err)
{
        if (ab_id_check(id, err) < 0)
                return -1;
        for (int tries = 0; tries < 5; tries++) {
                bool mk = false;
                if (make) {
                        if (mkdirat(d->root_fd, id, 0700) == 0)
                                mk = true;
                        else if (errno != EEXIST)
                                return ab_err_set(err, AB_E_INTERNAL, errno, "create %s/%s",
                                                  d->root, id);
                }
                _cleanup_close_ int bfd =
                    openat(d->root_fd, id, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
                if (bfd < 0 && errno == ENOENT && make)
                        continue;
                if (bfd < 0)
                        return ab_err_set(err, AB_E_NOT_FOUND, 0, "no box with id '%s'", id);
                _cleanup_close_ int lfd =
                    openat(bfd, "lock", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
                if (lfd < 0)
                        return ab_err_set(err, AB_E_INTERNAL, errno, "open lock of box %s", id);
                while (flock(lfd, LOCK_EX) < 0)
                        if (errno != EINTR)
                                return ab_err_set(err, AB_E_INTERNAL, errno, "lock box %s", id);
                struct stat a, b;
                if (fstat(bfd, &a) < 0 || fstatat(d->root_fd, id, &b, AT_SYMLINK_NOFOLLOW) < 0 ||
                    a.st_ino != b.st_ino || a.st_dev != b.st_dev) {
                        if (make)
                                continue; /* destroyed meanwhile: make it again */
                        return ab_err_set(err, AB_E_NOT_FOUND, 0, "no box with id '%s'", id);
                }
                if (made)
                        *made = mk;
                *lockfd = steal_fd(&lfd);
                return steal_fd(&bfd);
        }
        return ab_err_set(err, AB_E_INTERNAL, 0, "box %s: its folder keeps disappearing", id);
}

static int inspect(dk *d, const char *id, json_t **out, ab_err **err);
static int volume_get(dk *d, const char *id, char **mountpoint, ab_err **err);

/* lock_box for an operation on a box that must exist: its folder is made
 * when missing (the engine may have a box whose folder was lost), and
 * taken back when the engine has nothing of it either (AB_E_NOT_FOUND). */
static int lock_existing(dk *d, const char *id, int *lockfd, ab_err **err)
{
        bool made;
        _cleanup_close_ int lfd = -1;
        _cleanup_close_ int bfd = lock_box(d, id, true, &made, &lfd, err);
        if (bfd < 0)
                return -1;
        if (made) {
                json_t *j = NULL;
                int r = inspect(d, id, &j, err);
                json_decref(j);
                int v = r > 0 ? volume_get(d, id, NULL, err) : 0;
                if (r < 0 || v < 0 || (r > 0 && v > 0)) {
                        ab_rm_tree_at(d->root_fd, id);
                        if (r < 0 || v < 0)
                                return -1;
                        return ab_err_set(err, AB_E_NOT_FOUND, 0, "no box with id '%s'", id);
                }
        }
        *lockfd = steal_fd(&lfd);
        return steal_fd(&bfd);
}

/* True when someone holds the box's lock now (an operation in flight). */
static bool box_busy(dk *d, const char *id)
{
        char p[AB_ID_MAX + 8];
        snprintf(p, sizeof(p), "%s/lock", id);
        _cleanup_close_ int lfd = openat(d->root_fd, p, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
        if (lfd < 0)
                return false;
        if (flock(lfd, LOCK_EX | LOCK_NB) < 0)
                return errno == EWOULDBLOCK;
        return false;
}

/* DATA/docker/ID/paused exists while the box is (being) paused, so the
 * connect hot path knows without asking the engine; the engine stays the
 * record (a marker on a box the engine says runs is ignored). */
static void mark_paused(int bfd, bool on)
{
        if (!on) {
                unlinkat(bfd, "paused", 0);
                return;
        }
        int fd = openat(bfd, "paused", O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd >= 0)
                close(fd);
}

/* ---- the engine's objects ------------------------------------------------ */

/* inspect and volume_get: the object is this data folder's, there is
 * none, or one of that name carries another folder's label (made by hand:
 * never touched). */
enum { OURS = 0, ABSENT = 1, FOREIGN = 2 };

/* GET /containers/NAME/json: OURS with *out, ABSENT, FOREIGN, or -1. */
static int inspect(dk *d, const char *id, json_t **out, ab_err **err)
{
        *out = NULL;
        _cleanup_free_ char *name = obj_name(d, id);
        _cleanup_free_ char *path = xasprintf("/containers/%s/json", name);
        ab_dapi_res r;
        if (ab_dapi_call(d->api, "GET", path, NULL, 0, &r, err) < 0)
                return -1;
        int rc = 0;
        if (r.status == 404) {
                rc = 1;
        } else if (r.status != 200 || !json_is_object(r.json)) {
                rc = ab_err_set(err, AB_E_UNAVAILABLE, 0, "docker: inspect %s: %s", name,
                                ab_dapi_message(&r));
        } else {
                const json_t *labels = json_object_get(json_object_get(r.json, "Config"), "Labels");
                const char *h = jstr(labels, "agentbox.data");
                if (!h || strcmp(h, d->hash))
                        rc = FOREIGN;
                else
                        *out = json_incref(r.json);
        }
        ab_dapi_res_clear(&r);
        return rc;
}

/* GET /volumes/NAME: OURS with *mountpoint (may be NULL), ABSENT, FOREIGN, or -1. */
static int volume_get(dk *d, const char *id, char **mountpoint, ab_err **err)
{
        if (mountpoint)
                *mountpoint = NULL;
        _cleanup_free_ char *name = obj_name(d, id);
        _cleanup_free_ char *path = xasprintf("/volumes/%s", name);
        ab_dapi_res r;
        if (ab_dapi_call(d->api, "GET", path, NULL, 0, &r, err) < 0)
                return -1;
        int rc = 0;
        if (r.status == 404)
                rc = 1;
        else if (r.status != 200)
                rc = ab_err_set(err, AB_E_UNAVAILABLE, 0, "docker: volume %s: %s", name,
                                ab_dapi_message(&r));
        else if (!jstr(json_object_get(r.json, "Labels"), "agentbox.data") ||
                 strcmp(jstr(json_object_get(r.json, "Labels"), "agentbox.data"), d->hash))
                rc = FOREIGN;
        else if (mountpoint && jstr(r.json, "Mountpoint"))
                *mountpoint = xstrdup(jstr(r.json, "Mountpoint"));
        ab_dapi_res_clear(&r);
        return rc;
}

/* A call that must answer one of the `ok` statuses (0-terminated). */
static int call_ok(dk *d, const char *method, const char *path, const json_t *body,
                   uint32_t timeout_ms, const long *ok, json_t **out, ab_err **err)
{
        if (out)
                *out = NULL;
        ab_dapi_res r;
        if (ab_dapi_call(d->api, method, path, body, timeout_ms, &r, err) < 0)
                return -1;
        for (const long *s = ok; *s; s++) {
                if (r.status == *s) {
                        if (out)
                                *out = r.json ? json_incref(r.json) : NULL;
                        long st = r.status;
                        ab_dapi_res_clear(&r);
                        return (int)st;
                }
        }
        ab_code code = r.status == 404   ? AB_E_NOT_FOUND
                       : r.status == 409 ? AB_E_CONFLICT
                       : r.status == 400 ? AB_E_INVALID
                                         : AB_E_UNAVAILABLE;
        ab_err_set(err, code, 0, "docker: %s %s: %s", method, path, ab_dapi_message(&r));
        ab_dapi_res_clear(&r);
        return -1;
}

/* ---- images -------------------------------------------------------------- */

/* ref with ":latest" when it names neither a tag nor a digest: a pull
 * without a tag would fetch every tag of the repository. */
static char *with_tag(const char *ref)
{
        if (strchr(ref, '@') || !strncmp(ref, "sha256:", 7))
                return xstrdup(ref);
        const char *slash = strrchr(ref, '/');
        if (strchr(slash ? slash : ref, ':'))
                return xstrdup(ref);
        return xasprintf("%s:latest", ref);
}

/* Pulls ref (POST /images/create). The answer is a stream of JSON progress
 * lines with HTTP 200 even when the pull fails: an "error" line says so. */
static int pull(dk *d, const char *ref, ab_err **err)
{
        _cleanup_free_ char *tagged = with_tag(ref);
        _cleanup_free_ char *q = ab_dapi_escape(tagged);
        _cleanup_free_ char *path = xasprintf("/images/create?fromImage=%s", q);
        ab_log(AB_LOG_INFO, "docker: pulling an image", "image", ref, NULL);
        ab_dapi_res r;
        if (ab_dapi_call(d->api, "POST", path, NULL, PULL_TIMEOUT_MS, &r, err) < 0)
                return -1;
        int rc = 0;
        if (r.status != 200) {
                rc = ab_err_set(err, r.status == 404 ? AB_E_NOT_FOUND : AB_E_INVALID, 0,
                                "image '%s': %s", ref, ab_dapi_message(&r));
        } else {
                for (char *line = r.body.p; line && *line;) {
                        char *nl = strchr(line, '\n');
                        size_t len = nl ? (size_t)(nl - line) : strlen(line);
                        json_t *j = json_loadb(line, len, 0, NULL);
                        const char *e = jstr(j, "error");
                        if (e) {
                                bool missing = strstr(e, "not found") || strstr(e, "unknown") ||
                                               strstr(e, "does not exist") ||
                                               strstr(e, "access denied");
                                rc = ab_err_set(err, missing ? AB_E_NOT_FOUND : AB_E_UNAVAILABLE, 0,
                                                "image '%s': %s", ref, e);
                                json_decref(j);
                                break;
                        }
                        json_decref(j);
                        line = nl ? nl + 1 : NULL;
                }
        }
        ab_dapi_res_clear(&r);
        return rc;
}

/* The image's inspect answer, pulled first when the engine lacks it. */
static int image_get(dk *d, const char *ref, json_t **out, ab_err **err)
{
        *out = NULL;
        if (!*ref || strlen(ref) > 1024 || strpbrk(ref, " \t\n\r"))
                return ab_err_set(err, AB_E_INVALID, 0, "image '%s': not an image reference", ref);
        _cleanup_free_ char *q = ab_dapi_escape(ref);
        _cleanup_free_ char *path = xasprintf("/images/%s/json", q);
        for (int round = 0; round < 2; round++) {
                ab_dapi_res r;
                if (ab_dapi_call(d->api, "GET", path, NULL, 0, &r, err) < 0)
                        return -1;
                if (r.status == 200 && json_is_object(r.json)) {
                        *out = json_incref(r.json);
                        ab_dapi_res_clear(&r);
                        return 0;
                }
                long st = r.status;
                if (st != 404) {
                        ab_err_set(err, st == 400 ? AB_E_INVALID : AB_E_UNAVAILABLE, 0,
                                   "image '%s': %s", ref, ab_dapi_message(&r));
                        ab_dapi_res_clear(&r);
                        return -1;
                }
                ab_dapi_res_clear(&r);
                if (round == 0 && pull(d, ref, err) < 0)
                        return -1;
        }
        return ab_err_set(err, AB_E_NOT_FOUND, 0, "image '%s': not found after a pull", ref);
}

/* ---- the socket folder ---------------------------------------------------- */

/* Mounts a small tmpfs on DATA/docker/ID/run unless one is there already
 * (it stays across stop and start, and a host reboot takes it away). */
static int ensure_run(dk *d, int bfd, const char *id, ab_err **err)
{
        if (mkdirat(bfd, "run", 0700) < 0 && errno != EEXIST)
                return ab_err_set(err, AB_E_INTERNAL, errno, "create %s/%s/run", d->root, id);
        _cleanup_close_ int rfd =
            openat(bfd, "run", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        struct statfs sf;
        if (rfd < 0 || fstatfs(rfd, &sf) < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "open %s/%s/run", d->root, id);
        if (sf.f_type == TMPFS_MAGIC)
                return 0;
        _cleanup_free_ char *p = xasprintf("%s/%s/run", d->root, id);
        if (mount("tmpfs", p, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, RUN_TMPFS_OPTS) < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "mount a tmpfs on %s", p);
        return 0;
}

static void drop_run(dk *d, const char *id)
{
        _cleanup_free_ char *p = xasprintf("%s/%s/run", d->root, id);
        while (umount2(p, MNT_DETACH) == 0)
                ;
}

/* Connects to the init's socket in run/ without following a link the box
 * may have put there (the folder is the box's to write): the socket is
 * opened O_PATH|O_NOFOLLOW and reached through its /proc/self/fd link. */
static int connect_init(int bfd, ab_err **err)
{
        _cleanup_close_ int sfd = openat(bfd, "run/init.sock", O_PATH | O_NOFOLLOW | O_CLOEXEC);
        struct stat st;
        if (sfd < 0 || fstat(sfd, &st) < 0 || !S_ISSOCK(st.st_mode))
                return ab_err_set(err, AB_E_UNAVAILABLE, sfd < 0 ? errno : 0,
                                  "box init is not responding (no socket)");
        _cleanup_close_ int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (s < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "socket");
        struct sockaddr_un a = {.sun_family = AF_UNIX};
        snprintf(a.sun_path, sizeof(a.sun_path), "/proc/self/fd/%d", sfd);
        while (connect(s, (struct sockaddr *)&a, sizeof(a)) < 0) {
                if (errno == EINTR)
                        continue;
                return ab_err_set(err, AB_E_UNAVAILABLE, errno, "box init is not responding");
        }
        return steal_fd(&s);
}

/* The last lines the container wrote to stderr (its init's complaints),
 * on one line, or NULL. The answer is Docker's multiplexed stream: frames
 * of an 8-byte header (stream, 0, 0, 0, length big-endian) and the bytes. */
static char *log_tail(dk *d, const char *id)
{
        _cleanup_free_ char *name = obj_name(d, id);
        _cleanup_free_ char *path = xasprintf("/containers/%s/logs?stderr=1&tail=5", name);
        ab_dapi_res r;
        if (ab_dapi_call(d->api, "GET", path, NULL, 5000, &r, NULL) < 0)
                return NULL;
        ab_buf out = {0};
        const unsigned char *p = (const unsigned char *)r.body.p;
        size_t n = r.status == 200 ? r.body.n : 0;
        while (n >= 8) {
                size_t len = (size_t)p[4] << 24 | (size_t)p[5] << 16 | (size_t)p[6] << 8 | p[7];
                if (len > n - 8)
                        break;
                for (size_t i = 0; i < len; i++)
                        ab_buf_putc(&out, p[8 + i] == '\n' ? ' ' : (char)p[8 + i]);
                p += 8 + len;
                n -= 8 + len;
        }
        ab_dapi_res_clear(&r);
        return out.p ? ab_buf_steal(&out) : NULL;
}

/* Waits until the box's init answers a ping. */
static int wait_init(dk *d, int bfd, const char *id, ab_err **err)
{
        uint64_t end = ab_now_ms() + START_WAIT_MS;
        for (unsigned i = 0;; i++) {
                _cleanup_close_ int fd = connect_init(bfd, NULL);
                _cleanup_free_ char *v = NULL;
                if (fd >= 0 && abc_ping(fd, &v, NULL) == 0)
                        return 0;
                if (ab_now_ms() > end)
                        break;
                /* A container that exited will not answer: say why now. */
                if (i % 20 == 19) {
                        json_t *j = NULL;
                        if (inspect(d, id, &j, NULL) == 0 &&
                            !json_is_true(
                                json_object_get(json_object_get(j, "State"), "Running"))) {
                                const char *e = jstr(json_object_get(j, "State"), "Error");
                                _cleanup_free_ char *tail = log_tail(d, id);
                                ab_err_set(err, AB_E_UNAVAILABLE, 0,
                                           "box %s: its container exited at start (status "
                                           "%lld)%s%s%s%s",
                                           id,
                                           (long long)json_integer_value(json_object_get(
                                               json_object_get(j, "State"), "ExitCode")),
                                           e && *e ? ": " : "", e ? e : "", tail ? ": " : "",
                                           tail ? tail : "");
                                json_decref(j);
                                return -1;
                        }
                        json_decref(j);
                }
                struct timespec ts = {0, (i < 20 ? 2 : 20) * 1000000L};
                nanosleep(&ts, NULL);
        }
        return ab_err_set(err, AB_E_TIMEOUT, 0,
                          "box %s: its init did not answer on %s/%s/run/init.sock within %u ms "
                          "(does the engine see this host's mounts?)",
                          id, d->root, id, START_WAIT_MS);
}

/* ---- create ----------------------------------------------------------------- */

static json_t *limits_label(const ab_limits *l)
{
        json_t *j = ab_limits_json(l);
        json_object_set_new(j, "output_cap", json_integer((json_int_t)l->output_cap));
        json_object_set_new(j, "nofile", json_integer((json_int_t)l->nofile));
        return j;
}

static void limits_parse(const char *s, ab_limits *l)
{
        json_t *j = s ? json_loads(s, 0, NULL) : NULL;
        ab_limits_from_json(j, l);
        json_decref(j);
}

static json_t *bind_mount(const char *src, const char *dst, bool ro)
{
        return json_pack("{s:s,s:s,s:s,s:b}", "Type", "bind", "Source", src, "Target", dst,
                         "ReadOnly", ro);
}

/* The body of POST /containers/create. */
static json_t *container_body(dk *d, const ab_box_spec *spec, const char *ref, const char *mp,
                              const char *image_id, bool disk_opt, const char *disk_note,
                              ab_err **err)
{
        const char *id = spec->id;
        const ab_limits *l = &spec->limits;
        _cleanup_free_ char *run = xasprintf("%s/%s/run", d->root, id);
        _cleanup_free_ char *ws = xasprintf("%s/workspace", mp);
        _cleanup_free_ char *up = xasprintf("%s/uploads", mp);
        _cleanup_free_ char *out = xasprintf("%s/outputs", mp);
        json_t *mounts = json_array();
        json_array_append_new(mounts, bind_mount(d->init_path, IN_INIT, true));
        json_array_append_new(mounts, bind_mount(run, IN_RUN, false));
        json_array_append_new(mounts, bind_mount(ws, "/workspace", false));
        json_array_append_new(mounts, bind_mount(ws, "/mnt/user-data/workspace", false));
        json_array_append_new(mounts, bind_mount(up, "/mnt/user-data/uploads", false));
        json_array_append_new(mounts, bind_mount(out, "/mnt/user-data/outputs", false));
        if (d->skills_dir) {
                json_array_append_new(mounts, bind_mount(d->skills_dir, "/mnt/skills", true));
                json_array_append_new(mounts, bind_mount(d->skills_dir, "/skills", true));
        }
        json_t *tmpfs = json_object();
        char o[96];
        snprintf(o, sizeof(o), "rw,nosuid,nodev,mode=1777,size=%llum",
                 (unsigned long long)(l->memory_mib / 2 ? l->memory_mib / 2 : 1));
        json_object_set_new(tmpfs, "/tmp", json_string(o));
        for (size_t i = 0; i < spec->n_mounts; i++) {
                const ab_box_mount *m = &spec->mounts[i];
                if ((m->kind == AB_MOUNT_READONLY || m->kind == AB_MOUNT_BLOCKED) &&
                    ab_box_path_noop(m->path))
                        continue;
                if (m->kind == AB_MOUNT_HOST) {
                        json_array_append_new(mounts, bind_mount(m->source, m->path, m->read_only));
                } else if (m->kind == AB_MOUNT_BLOCKED) {
                        json_object_set_new(tmpfs, m->path, json_string("ro,size=4k,mode=0555"));
                } else {
                        json_decref(mounts);
                        json_decref(tmpfs);
                        ab_err_set(err, AB_E_UNSUPPORTED, 0,
                                   "mounts: %s mounts (at %s) are not supported by the Docker "
                                   "backend (host directories and hidden paths are)",
                                   ab_mount_kind_name(m->kind), m->path);
                        return NULL;
                }
        }
        char mp_s[24], created[24];
        uint64_t mprocs = l->pids > 32 ? l->pids - 16 : l->pids / 2;
        snprintf(mp_s, sizeof(mp_s), "%llu", (unsigned long long)(mprocs ? mprocs : 1));
        snprintf(created, sizeof(created), "%lld", (long long)time(NULL));
        json_t *lj = limits_label(l);
        _cleanup_free_ char *ls = json_dumps(lj, JSON_COMPACT | JSON_SORT_KEYS);
        json_decref(lj);
        json_t *labels = json_pack(
            "{s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s}", "agentbox.box", id, "agentbox.data", d->hash,
            "agentbox.data_dir", d->data, "agentbox.created", created, "agentbox.limits", ls,
            "agentbox.image", ref, "agentbox.image_id", image_id, "agentbox.disk", disk_note);
        /* Host names have no '_'. */
        char host[AB_ID_MAX + 1];
        snprintf(host, sizeof(host), "%s", id);
        for (char *p = host; *p; p++)
                if (*p == '_')
                        *p = '-';
        uint64_t mem = l->memory_mib * 1024 * 1024;
        json_t *hc = json_pack(
            "{s:s,s:o,s:o,s:I,s:I,s:I,s:I,s:[{s:s,s:I,s:I},{s:s,s:i,s:i}],s:[s],s:{s:s},"
            "s:{s:s,s:{s:s,s:s}}}",
            "NetworkMode", "none", "Mounts", mounts, "Tmpfs", tmpfs, "NanoCpus",
            (json_int_t)llround(l->cpus * 1e9), "Memory", (json_int_t)mem, "MemorySwap",
            (json_int_t)mem, "PidsLimit", (json_int_t)l->pids, "Ulimits", "Name", "nofile", "Soft",
            (json_int_t)l->nofile, "Hard", (json_int_t)l->nofile, "Name", "core", "Soft", 0, "Hard",
            0, "SecurityOpt", "no-new-privileges", "RestartPolicy", "Name", "no", "LogConfig",
            "Type", "json-file", "Config", "max-size", "1m", "max-file", "1");
        /* our init is PID 1, even where the engine's default adds its own */
        json_object_set_new(hc, "Init", json_false());
        /* Docker's default capabilities less MKNOD: no device nodes in a box,
         * as on the native backend (Landlock there) */
        json_object_set_new(hc, "CapDrop", json_pack("[s]", "MKNOD"));
        if (d->runtime)
                json_object_set_new(hc, "Runtime", json_string(d->runtime));
        if (disk_opt) {
                char sz[32];
                snprintf(sz, sizeof(sz), "%llum", (unsigned long long)l->disk_mib);
                json_object_set_new(hc, "StorageOpt", json_pack("{s:s}", "size", sz));
        }
        /* The init is PID 1 as root whatever the image says; the image's
         * Env, WorkingDir and User are for the commands (docker.h). */
        return json_pack("{s:s,s:s,s:s,s:s,s:[s],s:[s,s,s,s,s],s:[s,s],s:o,s:o,s:s}", "Image", ref,
                         "Hostname", host, "User", "0:0", "WorkingDir", "/", "Entrypoint", IN_INIT,
                         "Cmd", "--listen", IN_RUN "/init.sock", "--max-procs", mp_s, "--prewarm",
                         "Env", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                         "container=docker", "Labels", labels, "HostConfig", hc, "StopSignal",
                         "SIGTERM");
}

/* Whether the engine's storage driver takes a disk size per container: on
 * overlay2 only over xfs with project quotas, which the engine checks at
 * create. Learnt once from the first create that asks for one. */
static bool engine_refuses_size(const char *msg)
{
        return strstr(msg, "storage-opt") || strstr(msg, "StorageOpt") ||
               strstr(msg, "storage opt") || strstr(msg, "pquota") || strstr(msg, "quota");
}

/* POST /containers/create, without StorageOpt when the engine refuses it. */
static int create_container(dk *d, const ab_box_spec *spec, const char *ref, const char *mp,
                            const char *image_id, ab_err **err)
{
        _cleanup_free_ char *name = obj_name(d, spec->id);
        _cleanup_free_ char *path = xasprintf("/containers/create?name=%s", name);
        pthread_mutex_lock(&d->mu);
        int dq = d->disk_quota;
        _cleanup_free_ char *why = d->disk_why ? xstrdup(d->disk_why) : NULL;
        pthread_mutex_unlock(&d->mu);
        for (int round = 0; round < 2; round++) {
                bool want = spec->limits.disk_mib > 0 && dq >= 0;
                _cleanup_free_ char *note =
                    want
                        ? xstrdup("enforced on the root layer (StorageOpt size), not on /workspace")
                        : xasprintf("not enforced: %s", why ? why : "no size asked");
                json_t *body = container_body(d, spec, ref, mp, image_id, want, note, err);
                if (!body)
                        return err && *err
                                   ? -1
                                   : ab_err_set(err, AB_E_INVALID, 0,
                                                "box %s: a path or name is not UTF-8", spec->id);
                ab_dapi_res r;
                int rc = ab_dapi_call(d->api, "POST", path, body, 0, &r, err);
                json_decref(body);
                if (rc < 0)
                        return -1;
                if (r.status == 201) {
                        ab_dapi_res_clear(&r);
                        if (want && dq == 0) {
                                pthread_mutex_lock(&d->mu);
                                d->disk_quota = 1;
                                pthread_mutex_unlock(&d->mu);
                        }
                        if (!want && spec->limits.disk_mib) {
                                /* loud once, then quietly for every box */
                                pthread_mutex_lock(&d->mu);
                                bool first = !d->disk_warned;
                                d->disk_warned = true;
                                pthread_mutex_unlock(&d->mu);
                                ab_log(first ? AB_LOG_WARN : AB_LOG_INFO,
                                       "docker: the box's disk limit is not enforced", "box",
                                       spec->id, "why", why ? why : "", NULL);
                        }
                        return 0;
                }
                const char *msg = ab_dapi_message(&r);
                if (want && r.status >= 400 && engine_refuses_size(msg)) {
                        free(why);
                        why = xasprintf("the engine's storage driver cannot limit a container's "
                                        "disk (%s)",
                                        msg);
                        pthread_mutex_lock(&d->mu);
                        d->disk_quota = -1;
                        free(d->disk_why);
                        d->disk_why = xstrdup(why);
                        pthread_mutex_unlock(&d->mu);
                        dq = -1;
                        ab_dapi_res_clear(&r);
                        continue;
                }
                ab_code code = r.status == 409   ? AB_E_CONFLICT
                               : r.status == 400 ? AB_E_INVALID
                               : r.status == 404 ? AB_E_NOT_FOUND
                                                 : AB_E_UNAVAILABLE;
                ab_err_set(err, code, 0, "docker: create container %s: %s", name, msg);
                ab_dapi_res_clear(&r);
                return -1;
        }
        return ab_err_set(err, AB_E_INTERNAL, 0, "docker: create container %s failed", name);
}

/* Removes the box's container, volume and socket folder's tmpfs (each may
 * be missing); the caller holds the lock and removes the folder. */
static int remove_objects(dk *d, const char *id, ab_err **err)
{
        _cleanup_free_ char *name = obj_name(d, id);
        static const long ok[] = {204, 404, 0};
        json_t *j = NULL;
        int r = inspect(d, id, &j, err);
        json_decref(j);
        if (r < 0)
                return ab_err_wrap(err, "box %s", id);
        _cleanup_free_ char *cpath = xasprintf("/containers/%s?force=1&v=1", name);
        if (r == OURS && call_ok(d, "DELETE", cpath, NULL, 0, ok, NULL, err) < 0)
                return ab_err_wrap(err, "box %s", id);
        if ((r = volume_get(d, id, NULL, err)) < 0)
                return ab_err_wrap(err, "box %s", id);
        _cleanup_free_ char *vpath = xasprintf("/volumes/%s?force=1", name);
        if (r == OURS && call_ok(d, "DELETE", vpath, NULL, 0, ok, NULL, err) < 0)
                return ab_err_wrap(err, "box %s", id);
        drop_run(d, id);
        return 0;
}

/* Makes the volume (or finds the one a crashed create left) and its three
 * folders; *mp gets its path on this host. */
static int make_volume(dk *d, const char *id, char **mp, ab_err **err)
{
        _cleanup_free_ char *name = obj_name(d, id);
        json_t *body = json_pack("{s:s,s:{s:s,s:s,s:s}}", "Name", name, "Labels", "agentbox.box",
                                 id, "agentbox.data", d->hash, "agentbox.data_dir", d->data);
        json_t *v = NULL;
        static const long ok[] = {201, 200, 0};
        int rc = call_ok(d, "POST", "/volumes/create", body, 0, ok, &v, err);
        json_decref(body);
        if (rc < 0)
                return ab_err_wrap(err, "box %s", id);
        const char *m = jstr(v, "Mountpoint");
        if (!m || m[0] != '/') {
                json_decref(v);
                return ab_err_set(err, AB_E_UNAVAILABLE, 0,
                                  "docker: volume %s has no mount point on this host", name);
        }
        *mp = xstrdup(m);
        json_decref(v);
        _cleanup_close_ int vfd = open(*mp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (vfd < 0)
                return ab_err_set(err, AB_E_UNAVAILABLE, errno,
                                  "docker: volume %s: its folder %s is not on this host", name,
                                  *mp);
        static const char *const sub[] = {"workspace", "uploads", "outputs"};
        for (size_t i = 0; i < AB_ARRAY_LEN(sub); i++)
                if (mkdirat(vfd, sub[i], 0755) < 0 && errno != EEXIST)
                        return ab_err_set(err, AB_E_INTERNAL, errno, "create %s/%s", *mp, sub[i]);
        return 0;
}

/* Starts the container and waits for its init; the caller holds the lock. */
static int start_container(dk *d, int bfd, const char *id, ab_err **err)
{
        if (ensure_run(d, bfd, id, err) < 0)
                return -1;
        mark_paused(bfd, false);
        _cleanup_free_ char *name = obj_name(d, id);
        _cleanup_free_ char *path = xasprintf("/containers/%s/start", name);
        static const long ok[] = {204, 304, 0};
        if (call_ok(d, "POST", path, NULL, 0, ok, NULL, err) < 0)
                return ab_err_wrap(err, "box %s", id);
        if (wait_init(d, bfd, id, err) < 0)
                return -1;
        ab_log(AB_LOG_INFO, "box started", "box", id, "backend", "docker", NULL);
        return 0;
}

/* A new box's mounts: paths, kinds this backend has, host folders that are
 * folders and have nothing to do with the data folder (it holds every
 * box's socket folder), as on the native backend. */
static int check_mounts(dk *d, const ab_box_spec *spec, ab_err **err)
{
        if (ab_box_mounts_check(spec->mounts, spec->n_mounts, err) < 0)
                return -1;
        for (size_t i = 0; i < spec->n_mounts; i++) {
                const ab_box_mount *m = &spec->mounts[i];
                if (m->kind == AB_MOUNT_VOLUME ||
                    (m->kind == AB_MOUNT_READONLY && !ab_box_path_noop(m->path)))
                        return ab_err_set(err, AB_E_UNSUPPORTED, 0,
                                          "mounts: %s mounts (at %s) are not supported by the "
                                          "Docker backend (host directories and hidden paths "
                                          "are)",
                                          ab_mount_kind_name(m->kind), m->path);
                if (m->kind != AB_MOUNT_HOST)
                        continue;
                struct stat st;
                if (stat(m->source, &st) < 0 || !S_ISDIR(st.st_mode))
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "mounts: host_path '%s' is not a directory", m->source);
                if (ab_backend_path_within(m->source, d->data) ||
                    ab_backend_path_within(d->data, m->source))
                        return ab_err_set(err, AB_E_PERMISSION, 0,
                                          "mounts: host_path '%s' is, holds or lies in the "
                                          "server's data folder",
                                          m->source);
        }
        return 0;
}

static int k_create(ab_backend *b, const ab_box_spec *spec, ab_err **err)
{
        dk *d = D(b);
        if (ab_id_check(spec->id, err) < 0 || ab_limits_validate(&spec->limits, err) < 0)
                return -1;
        if (spec->rootfs || spec->layers)
                return ab_err_set(err, AB_E_UNSUPPORTED, 0,
                                  "the Docker backend makes boxes from Docker images (\"image\"), "
                                  "not from a rootfs or agentbox's own image store");
        if (check_mounts(d, spec, err) < 0)
                return -1;
        const char *ref = spec->image && *spec->image ? spec->image : d->default_image;
        if (!ref)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "the Docker backend needs an image: give \"image\" or configure "
                                  "a default image");
        bool made;
        _cleanup_close_ int lockfd = -1;
        _cleanup_close_ int bfd = lock_box(d, spec->id, true, &made, &lockfd, err);
        if (bfd < 0)
                return -1;
        json_t *j = NULL;
        int r = inspect(d, spec->id, &j, err);
        json_decref(j);
        if (r != ABSENT && made)
                ab_rm_tree_at(d->root_fd, spec->id); /* not ours to keep */
        if (r < 0)
                return -1;
        if (r == OURS)
                return ab_err_set(err, AB_E_CONFLICT, 0, "box '%s' already exists", spec->id);
        if (r == FOREIGN)
                return ab_err_set(err, AB_E_CONFLICT, 0,
                                  "box '%s': the engine has a container of its name that is not "
                                  "this data folder's",
                                  spec->id);
        /* No container: whatever is there is a create that did not finish. */
        if (!made && remove_objects(d, spec->id, err) < 0)
                return -1;
        json_t *img = NULL;
        _cleanup_free_ char *mp = NULL;
        r = image_get(d, ref, &img, err);
        if (r == 0)
                r = make_volume(d, spec->id, &mp, err);
        if (r == 0)
                r = ensure_run(d, bfd, spec->id, err);
        if (r == 0)
                r = create_container(d, spec, ref, mp, jstr(img, "Id") ? jstr(img, "Id") : "", err);
        json_decref(img);
        if (r == 0)
                r = start_container(d, bfd, spec->id, err);
        if (r < 0) {
                /* A box that cannot start is not created: take it back. */
                remove_objects(d, spec->id, NULL);
                ab_rm_tree_at(d->root_fd, spec->id);
                return -1;
        }
        return 0;
}

/* ---- state ---------------------------------------------------------------- */

static int64_t parse_time(const char *s)
{
        if (!s || !*s || !strncmp(s, "0001-", 5))
                return 0;
        int64_t ms;
        return ab_time_parse_rfc3339(s, &ms) < 0 ? 0 : ms / 1000;
}

/* Fills *out from an inspect answer. */
static void info_from(dk *d, const char *id, const json_t *j, ab_box_info *out)
{
        memset(out, 0, sizeof(*out));
        const json_t *cfg = json_object_get(j, "Config");
        const json_t *labels = json_object_get(cfg, "Labels");
        const json_t *st = json_object_get(j, "State");
        out->id = xstrdup(id);
        out->backend = "docker";
        limits_parse(jstr(labels, "agentbox.limits"), &out->limits);
        const char *disk = jstr(labels, "agentbox.disk");
        if (disk && strncmp(disk, "enforced", 8))
                out->limits.disk_mib = 0; /* not enforced: say so, do not pretend */
        const char *c = jstr(labels, "agentbox.created");
        out->created_at = c ? strtoll(c, NULL, 10) : parse_time(jstr(j, "Created"));
        const char *iid = jstr(labels, "agentbox.image_id");
        if (!iid || !*iid)
                iid = jstr(j, "Image");
        out->image = iid ? xstrdup(iid) : NULL;
        const char *s = jstr(st, "Status");
        bool running = json_is_true(json_object_get(st, "Running"));
        bool paused = json_is_true(json_object_get(st, "Paused"));
        if (running || (s && !strcmp(s, "paused"))) {
                out->status =
                    paused || (s && !strcmp(s, "paused")) ? AB_BOX_PAUSED : AB_BOX_RUNNING;
                out->init_pid = (pid_t)json_integer_value(json_object_get(st, "Pid"));
                out->started_at = parse_time(jstr(st, "StartedAt"));
        } else if (s && !strcmp(s, "created")) {
                if (box_busy(d, id)) {
                        out->status = AB_BOX_CREATING;
                } else {
                        out->status = AB_BOX_ERROR;
                        out->error = xstrdup("its container was made but never started (a create "
                                             "that did not finish): delete the box");
                }
        } else if (s && !strcmp(s, "removing")) {
                out->status = AB_BOX_DELETING;
        } else if (s && !strcmp(s, "restarting")) {
                out->status = AB_BOX_ERROR;
                out->error = xstrdup("its container is being restarted by the engine");
        } else {
                /* exited or dead: stopped by us, or its init died (OOM,
                 * killed from outside, host reboot): stopped either way. */
                out->status = AB_BOX_STOPPED;
        }
}

/* A box that has no container: a create that did not finish (its volume
 * or folder is there), else none. */
static int info_partial(dk *d, const char *id, ab_box_info *out, ab_err **err)
{
        memset(out, 0, sizeof(*out));
        int v = volume_get(d, id, NULL, err);
        if (v < 0)
                return -1;
        bool busy = box_busy(d, id);
        if (v != OURS && !busy)
                return ab_err_set(err, AB_E_NOT_FOUND, 0, "no box with id '%s'", id);
        out->id = xstrdup(id);
        out->backend = "docker";
        ab_limits_default(&out->limits);
        if (busy) {
                out->status = AB_BOX_CREATING;
        } else {
                out->status = AB_BOX_ERROR;
                out->error = xstrdup("it has a volume but no container (a create that did not "
                                     "finish): delete the box");
        }
        return 0;
}

static int k_info(ab_backend *b, const char *id, ab_box_info *out, ab_err **err)
{
        dk *d = D(b);
        memset(out, 0, sizeof(*out));
        if (ab_id_check(id, err) < 0)
                return -1;
        json_t *j = NULL;
        int r = inspect(d, id, &j, err);
        if (r < 0)
                return -1;
        if (r != OURS)
                return info_partial(d, id, out, err);
        info_from(d, id, j, out);
        json_decref(j);
        return 0;
}

/* The box's state (and its init's pid when pid is not NULL). */
static int box_status(dk *d, const char *id, ab_box_status *s, pid_t *pid, ab_err **err)
{
        ab_box_info i;
        if (k_info(&d->base, id, &i, err) < 0)
                return -1;
        *s = i.status;
        if (pid)
                *pid = i.init_pid;
        ab_box_info_clear(&i);
        return 0;
}

static int cmp_info(const void *a, const void *b)
{
        return strcmp(((const ab_box_info *)a)->id, ((const ab_box_info *)b)->id);
}

static char *label_filter(dk *d)
{
        _cleanup_free_ char *f = xasprintf("{\"label\":[\"agentbox.data=%s\"]}", d->hash);
        return ab_dapi_escape(f);
}

static bool listed(const ab_box_info *v, size_t n, const char *id)
{
        for (size_t i = 0; i < n; i++)
                if (!strcmp(v[i].id, id))
                        return true;
        return false;
}

static int k_list(ab_backend *b, ab_box_info **out, size_t *count, ab_err **err)
{
        dk *d = D(b);
        *out = NULL;
        *count = 0;
        _cleanup_free_ char *f = label_filter(d);
        _cleanup_free_ char *cpath = xasprintf("/containers/json?all=1&filters=%s", f);
        _cleanup_free_ char *vpath = xasprintf("/volumes?filters=%s", f);
        json_t *cs = NULL, *vs = NULL;
        static const long ok[] = {200, 0};
        if (call_ok(d, "GET", cpath, NULL, 0, ok, &cs, err) < 0)
                return -1;
        if (call_ok(d, "GET", vpath, NULL, 0, ok, &vs, err) < 0) {
                json_decref(cs);
                return -1;
        }
        const json_t *vols = json_object_get(vs, "Volumes");
        size_t cap = json_array_size(cs) + json_array_size(vols) + 1, n = 0;
        ab_box_info *v = xcalloc(cap, sizeof(*v));
        size_t i;
        json_t *c;
        json_array_foreach(cs, i, c)
        {
                const char *id = jstr(json_object_get(c, "Labels"), "agentbox.box");
                if (!id || !ab_id_valid(id) || listed(v, n, id))
                        continue;
                const char *st = jstr(c, "State");
                if (!st || !strcmp(st, "running") || !strcmp(st, "paused")) {
                        /* The summary has no pid: ask for the whole state. */
                        if (k_info(b, id, &v[n], NULL) == 0)
                                n++;
                        else
                                ab_box_info_clear(&v[n]);
                        continue;
                }
                /* Not running: the summary says all info needs (most boxes
                 * of a server are stopped: one call for all of them). */
                json_t *j = json_pack("{s:{s:O},s:{s:s},s:s?}", "Config", "Labels",
                                      json_object_get(c, "Labels"), "State", "Status", st, "Image",
                                      jstr(c, "ImageID"));
                if (j)
                        info_from(d, id, j, &v[n++]);
                json_decref(j);
        }
        json_array_foreach(vols, i, c)
        {
                const char *id = jstr(json_object_get(c, "Labels"), "agentbox.box");
                if (!id || !ab_id_valid(id) || listed(v, n, id))
                        continue;
                if (k_info(b, id, &v[n], NULL) == 0)
                        n++;
                else
                        ab_box_info_clear(&v[n]);
        }
        json_decref(cs);
        json_decref(vs);
        qsort(v, n, sizeof(*v), cmp_info);
        *out = v;
        *count = n;
        return 0;
}

/* ---- life cycle ------------------------------------------------------------- */

static int k_start(ab_backend *b, const char *id, ab_err **err)
{
        dk *d = D(b);
        _cleanup_close_ int lockfd = -1;
        _cleanup_close_ int bfd = lock_existing(d, id, &lockfd, err);
        if (bfd < 0)
                return -1;
        ab_box_status s;
        if (box_status(D(b), id, &s, NULL, err) < 0)
                return -1;
        _cleanup_free_ char *name = obj_name(d, id);
        if (s == AB_BOX_RUNNING) {
                mark_paused(bfd, false);
                return 0;
        }
        if (s == AB_BOX_PAUSED) {
                _cleanup_free_ char *p = xasprintf("/containers/%s/unpause", name);
                static const long ok[] = {204, 0};
                if (call_ok(d, "POST", p, NULL, 0, ok, NULL, err) < 0)
                        return ab_err_wrap(err, "box %s", id);
                mark_paused(bfd, false);
                return 0;
        }
        /* We hold the lock: "creating" here is a create that was cut short. */
        if (s == AB_BOX_CREATING || s == AB_BOX_ERROR)
                return ab_err_set(err, AB_E_CONFLICT, 0,
                                  "box '%s' was never fully made (its create was interrupted): "
                                  "delete it",
                                  id);
        if (s != AB_BOX_STOPPED)
                return ab_err_set(err, AB_E_CONFLICT, 0, "box '%s' is %s: it cannot be started", id,
                                  ab_box_status_name(s));
        return start_container(d, bfd, id, err);
}

static int stop_locked(dk *d, int bfd, const char *id, ab_err **err)
{
        ab_box_status s;
        if (box_status(d, id, &s, NULL, err) < 0)
                return -1;
        _cleanup_free_ char *name = obj_name(d, id);
        static const long ok[] = {204, 304, 409, 0};
        if (s == AB_BOX_PAUSED) {
                /* Frozen processes die only once thawed: kill, then thaw. */
                _cleanup_free_ char *k = xasprintf("/containers/%s/kill?signal=KILL", name);
                _cleanup_free_ char *u = xasprintf("/containers/%s/unpause", name);
                if (call_ok(d, "POST", k, NULL, 0, ok, NULL, err) < 0)
                        return ab_err_wrap(err, "stopping paused box %s", id);
                /* the engine may have thawed it itself to deliver the kill */
                call_ok(d, "POST", u, NULL, 0, ok, NULL, NULL);
        }
        if (s == AB_BOX_RUNNING || s == AB_BOX_PAUSED) {
                /* init ends every process of the box on SIGTERM */
                _cleanup_free_ char *p = xasprintf("/containers/%s/stop?t=5", name);
                if (call_ok(d, "POST", p, NULL, 30000, ok, NULL, err) < 0)
                        return ab_err_wrap(err, "box %s", id);
                _cleanup_free_ char *w =
                    xasprintf("/containers/%s/wait?condition=not-running", name);
                static const long wok[] = {200, 404, 0};
                if (call_ok(d, "POST", w, NULL, 30000, wok, NULL, err) < 0)
                        return ab_err_wrap(err, "box %s", id);
                ab_log(AB_LOG_INFO, "box stopped", "box", id, "backend", "docker", NULL);
        }
        mark_paused(bfd, false);
        unlinkat(bfd, "run/init.sock", 0);
        return 0;
}

static int k_stop(ab_backend *b, const char *id, ab_err **err)
{
        dk *d = D(b);
        _cleanup_close_ int lockfd = -1;
        _cleanup_close_ int bfd = lock_existing(d, id, &lockfd, err);
        if (bfd < 0)
                return -1;
        return stop_locked(d, bfd, id, err);
}

static int k_pause(ab_backend *b, const char *id, ab_err **err)
{
        dk *d = D(b);
        _cleanup_close_ int lockfd = -1;
        _cleanup_close_ int bfd = lock_existing(d, id, &lockfd, err);
        if (bfd < 0)
                return -1;
        ab_box_status s;
        if (box_status(D(b), id, &s, NULL, err) < 0)
                return -1;
        if (s == AB_BOX_PAUSED) {
                mark_paused(bfd, true);
                return 0;
        }
        if (s != AB_BOX_RUNNING)
                return ab_err_set(err, AB_E_CONFLICT, 0,
                                  "box '%s' is not running: only a running box can be paused", id);
        mark_paused(bfd, true);
        _cleanup_free_ char *name = obj_name(d, id);
        _cleanup_free_ char *p = xasprintf("/containers/%s/pause", name);
        static const long ok[] = {204, 0};
        ab_err *e = NULL;
        if (call_ok(d, "POST", p, NULL, 0, ok, NULL, &e) < 0) {
                mark_paused(bfd, false);
                int rc = ab_err_set(err, e->code, 0, "pausing box %s: %s", id, e->msg);
                ab_err_free(&e);
                return rc;
        }
        ab_log(AB_LOG_INFO, "box paused", "box", id, "backend", "docker", NULL);
        return 0;
}

static int k_resume(ab_backend *b, const char *id, ab_err **err)
{
        dk *d = D(b);
        _cleanup_close_ int lockfd = -1;
        _cleanup_close_ int bfd = lock_existing(d, id, &lockfd, err);
        if (bfd < 0)
                return -1;
        ab_box_status s;
        if (box_status(D(b), id, &s, NULL, err) < 0)
                return -1;
        if (s == AB_BOX_RUNNING) {
                mark_paused(bfd, false);
                return 0;
        }
        if (s != AB_BOX_PAUSED)
                return ab_err_set(err, AB_E_CONFLICT, 0,
                                  "box '%s' is not running: start it (a stopped box has no "
                                  "processes to resume)",
                                  id);
        _cleanup_free_ char *name = obj_name(d, id);
        _cleanup_free_ char *p = xasprintf("/containers/%s/unpause", name);
        static const long ok[] = {204, 0};
        if (call_ok(d, "POST", p, NULL, 0, ok, NULL, err) < 0)
                return ab_err_wrap(err, "resuming box %s", id);
        mark_paused(bfd, false);
        return 0;
}

static int k_destroy(ab_backend *b, const char *id, ab_err **err)
{
        dk *d = D(b);
        _cleanup_close_ int lockfd = -1;
        _cleanup_close_ int bfd = lock_existing(d, id, &lockfd, err);
        if (bfd < 0)
                return -1;
        if (remove_objects(d, id, err) < 0)
                return -1;
        int r = ab_rm_tree_at(d->root_fd, id);
        if (r < 0)
                ab_log(AB_LOG_WARN, "docker: leftovers of a box's folder", "box", id, "error",
                       strerror(-r), NULL);
        ab_log(AB_LOG_INFO, "box destroyed", "box", id, "backend", "docker", NULL);
        return 0;
}

/* ---- connections -------------------------------------------------------------- */

static int k_connect(ab_backend *b, const char *id, ab_err **err)
{
        dk *d = D(b);
        if (ab_id_valid(id)) {
                /* Hot path: a live init accepts (a dead one's socket refuses);
                 * a frozen one would accept and never answer: the marker. */
                _cleanup_close_ int bfd =
                    openat(d->root_fd, id, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
                if (bfd >= 0 && faccessat(bfd, "paused", F_OK, AT_SYMLINK_NOFOLLOW) < 0) {
                        int fd = connect_init(bfd, NULL);
                        if (fd >= 0)
                                return fd;
                }
        }
        ab_box_status s;
        if (box_status(D(b), id, &s, NULL, err) < 0)
                return -1;
        if (s == AB_BOX_PAUSED)
                return ab_err_set(err, AB_E_CONFLICT, 0, "box '%s' is paused: resume it first", id);
        if (s != AB_BOX_RUNNING)
                return ab_err_set(err, AB_E_CONFLICT, 0, "box '%s' is %s: start it first", id,
                                  ab_box_status_name(s));
        _cleanup_close_ int bfd =
            openat(d->root_fd, id, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        if (bfd < 0)
                return ab_err_set(err, AB_E_UNAVAILABLE, errno, "box '%s': no folder %s/%s", id,
                                  d->root, id);
        /* Running, though a marker said paused: a pause a crash cut short
         * (start, resume or stop clears it; clearing it here, without the
         * lock, could race a pause in flight). */
        return connect_init(bfd, err);
}

/* The host pid of the running box's init: AB_E_CONFLICT when it is not
 * running or paused. */
static int running_init(dk *d, const char *id, pid_t *pid, ab_err **err)
{
        ab_box_status s;
        if (box_status(d, id, &s, pid, err) < 0)
                return -1;
        if (s == AB_BOX_PAUSED)
                return ab_err_set(err, AB_E_CONFLICT, 0, "box '%s' is paused: resume it first", id);
        if (s != AB_BOX_RUNNING || *pid <= 0)
                return ab_err_set(err, AB_E_CONFLICT, 0, "box '%s' is not running", id);
        return 0;
}

static int k_port_connect(ab_backend *b, const char *id, uint16_t port, int timeout_ms,
                          ab_err **err)
{
        pid_t pid;
        if (running_init(D(b), id, &pid, err) < 0)
                return -1;
        return ab_backend_port_netns(pid, id, port, timeout_ms, err);
}

static int k_connect_unix(ab_backend *b, const char *id, const char *path, ab_err **err)
{
        if (!path || path[0] != '/' || strlen(path) >= PATH_MAX)
                return ab_err_set(err, AB_E_INVALID, 0, "connect: a socket path must be absolute");
        pid_t pid;
        if (running_init(D(b), id, &pid, err) < 0)
                return -1;
        /* The box's root is its init's; the path is resolved inside it. */
        char rp[64];
        snprintf(rp, sizeof(rp), "/proc/%d/root", (int)pid);
        _cleanup_close_ int rfd = open(rp, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (rfd < 0)
                return ab_err_set(err, AB_E_CONFLICT, errno, "box '%s' is not running", id);
        _cleanup_free_ char *dir = xstrdup(path);
        char *slash = strrchr(dir, '/');
        *slash = '\0';
        const char *name = slash + 1;
        if (!*name || strlen(name) > 64)
                return ab_err_set(err, AB_E_INVALID, 0, "connect: bad socket name in %s", path);
        struct open_how how = {.flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
                               .resolve =
                                   RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
        _cleanup_close_ int dfd =
            (int)syscall(SYS_openat2, rfd, dir[0] ? dir + 1 : ".", &how, sizeof(how));
        if (dfd < 0)
                return ab_err_set(err, AB_E_NOT_FOUND, errno, "box '%s': cannot open %s", id,
                                  dir[0] ? dir : "/");
        _cleanup_close_ int sfd = openat(dfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
        struct stat st;
        if (sfd < 0 || fstat(sfd, &st) < 0 || !S_ISSOCK(st.st_mode))
                return ab_err_set(err, AB_E_UNAVAILABLE, sfd < 0 ? errno : 0,
                                  "box '%s': no socket at %s", id, path);
        _cleanup_close_ int so = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (so < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "socket");
        struct sockaddr_un a = {.sun_family = AF_UNIX};
        snprintf(a.sun_path, sizeof(a.sun_path), "/proc/self/fd/%d", sfd);
        if (connect(so, (struct sockaddr *)&a, sizeof(a)) < 0)
                return ab_err_set(err, AB_E_UNAVAILABLE, errno, "box '%s': cannot connect to %s",
                                  id, path);
        return steal_fd(&so);
}

/* ---- stats: the container's cgroup, found through its init ---------------- */

static bool read_u64(const char *dir, const char *file, const char *key, uint64_t *out)
{
        _cleanup_free_ char *p = xasprintf("%s/%s", dir, file);
        FILE *f = fopen(p, "re");
        if (!f)
                return false;
        char line[256];
        bool ok = false;
        while (fgets(line, sizeof(line), f)) {
                char *v = line;
                if (key) {
                        size_t kl = strlen(key);
                        if (strncmp(line, key, kl) || line[kl] != ' ')
                                continue;
                        v = line + kl + 1;
                }
                if (!strncmp(v, "max", 3)) {
                        *out = UINT64_MAX;
                } else {
                        char *end;
                        errno = 0;
                        unsigned long long x = strtoull(v, &end, 10);
                        if (errno || end == v)
                                break;
                        *out = x;
                }
                ok = true;
                break;
        }
        fclose(f);
        return ok;
}

/* The cgroup folder of controller `ctrl` (NULL: the v2 one) of pid. */
static char *cg_dir(pid_t pid, const char *ctrl)
{
        char p[64];
        snprintf(p, sizeof(p), "/proc/%d/cgroup", (int)pid);
        _cleanup_free_ char *ctrls = NULL;
        _cleanup_free_ char *path = ab_proc_cgroup_path(p, ctrl, &ctrls);
        if (!path)
                return NULL;
        return ctrl ? xasprintf("/sys/fs/cgroup/%s%s", ctrls, path)
                    : xasprintf("/sys/fs/cgroup%s", path);
}

/* The engine's own numbers (GET /containers/NAME/stats, one sample), for
 * when the container's cgroup cannot be read here (a cgroup namespace of
 * the server's own, say). No OOM kill count there. */
static int engine_stats(dk *d, const char *id, ab_box_stats *out, ab_err **err)
{
        _cleanup_free_ char *name = obj_name(d, id);
        _cleanup_free_ char *p = xasprintf("/containers/%s/stats?stream=false&one-shot=true", name);
        json_t *j = NULL;
        static const long ok[] = {200, 0};
        if (call_ok(d, "GET", p, NULL, 10000, ok, &j, err) < 0)
                return ab_err_wrap(err, "box '%s': stats", id);
        const json_t *mem = json_object_get(j, "memory_stats");
        out->memory_bytes = (uint64_t)json_integer_value(json_object_get(mem, "usage"));
        out->memory_limit = (uint64_t)json_integer_value(json_object_get(mem, "limit"));
        out->pids = (uint64_t)json_integer_value(
            json_object_get(json_object_get(j, "pids_stats"), "current"));
        out->cpu_usage_ns = (uint64_t)json_integer_value(json_object_get(
            json_object_get(json_object_get(j, "cpu_stats"), "cpu_usage"), "total_usage"));
        json_decref(j);
        return 0;
}

static int k_stats(ab_backend *b, const char *id, ab_box_stats *out, ab_err **err)
{
        memset(out, 0, sizeof(*out));
        ab_box_info i;
        if (k_info(b, id, &i, err) < 0)
                return -1;
        ab_box_status s = i.status;
        pid_t pid = i.init_pid;
        uint64_t disk = i.limits.disk_mib;
        ab_box_info_clear(&i);
        if ((s != AB_BOX_RUNNING && s != AB_BOX_PAUSED) || pid <= 0)
                return ab_err_set(err, AB_E_CONFLICT, 0, "box '%s' is %s", id,
                                  ab_box_status_name(s));
        _cleanup_free_ char *mem = cg_dir(pid, "memory");
        _cleanup_free_ char *pids = cg_dir(pid, "pids");
        _cleanup_free_ char *cpu = cg_dir(pid, "cpuacct");
        _cleanup_free_ char *v2 = cg_dir(pid, NULL);
        bool ok;
        if (mem) { /* v1 */
                ok = read_u64(mem, "memory.usage_in_bytes", NULL, &out->memory_bytes);
                read_u64(mem, "memory.limit_in_bytes", NULL, &out->memory_limit);
                read_u64(mem, "memory.oom_control", "oom_kill", &out->oom_kills);
                if (pids)
                        read_u64(pids, "pids.current", NULL, &out->pids);
                if (cpu)
                        read_u64(cpu, "cpuacct.usage", NULL, &out->cpu_usage_ns);
        } else if (v2) {
                ok = read_u64(v2, "memory.current", NULL, &out->memory_bytes);
                read_u64(v2, "memory.max", NULL, &out->memory_limit);
                read_u64(v2, "memory.events", "oom_kill", &out->oom_kills);
                read_u64(v2, "pids.current", NULL, &out->pids);
                uint64_t us = 0;
                if (read_u64(v2, "cpu.stat", "usage_usec", &us))
                        out->cpu_usage_ns = us * 1000;
        } else {
                ok = false;
        }
        if (!ok && engine_stats(D(b), id, out, err) < 0)
                return -1;
        /* A disk limit is shown only where the engine enforces one. */
        out->disk_limit_bytes = disk * 1024 * 1024;
        return 0;
}

/* ---- the image a box was made from ---------------------------------------- */

static int k_image_config(ab_backend *b, const char *ref, json_t **out, ab_err **err)
{
        *out = NULL;
        dk *d = D(b);
        if (!ref || !*ref)
                ref = d->default_image;
        if (!ref)
                return ab_err_set(err, AB_E_INVALID, 0, "no image given and no default image");
        json_t *img = NULL;
        if (image_get(d, ref, &img, err) < 0)
                return -1;
        const json_t *cfg = json_object_get(img, "Config");
        json_t *env = json_array();
        size_t i;
        json_t *e;
        json_array_foreach(json_object_get(cfg, "Env"), i, e) if (json_is_string(e))
            json_array_append(env, e);
        json_t *j = json_pack("{s:s,s:s,s:o}", "ref", ref, "id",
                              jstr(img, "Id") ? jstr(img, "Id") : "", "env", env);
        const char *wd = jstr(cfg, "WorkingDir"), *user = jstr(cfg, "User");
        if (wd && *wd)
                json_object_set_new(j, "workdir", json_string(wd));
        if (user && *user)
                json_object_set_new(j, "user", json_string(user));
        json_decref(img);
        *out = j;
        return 0;
}

/* ---- open ----------------------------------------------------------------------- */

/* Removes the folders that crashed creates and destroys left in
 * DATA/docker: those whose lock nobody holds and of whose box the engine
 * has neither a container nor a volume (asked again under the lock, so a
 * box made meanwhile is never touched). Best effort. */
static void sweep(dk *d)
{
        int fd = openat(d->root_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
        if (!dir) {
                if (fd >= 0)
                        close(fd);
                return;
        }
        struct dirent *e;
        while ((e = readdir(dir))) {
                if (!ab_id_valid(e->d_name) || strlen(e->d_name) > AB_ID_MAX)
                        continue;
                char p[AB_ID_MAX + 16];
                snprintf(p, sizeof(p), "%s/lock", e->d_name);
                _cleanup_close_ int lfd = openat(d->root_fd, p, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
                if (lfd >= 0 && flock(lfd, LOCK_EX | LOCK_NB) < 0)
                        continue;
                json_t *j = NULL;
                int c = inspect(d, e->d_name, &j, NULL);
                json_decref(j);
                if (c < 0 || c == OURS)
                        continue;
                int v = volume_get(d, e->d_name, NULL, NULL);
                if (v < 0 || v == OURS)
                        continue;
                ab_log(AB_LOG_INFO, "docker: removing what an interrupted create left", "box",
                       e->d_name, NULL);
                drop_run(d, e->d_name);
                ab_rm_tree_at(d->root_fd, e->d_name);
        }
        closedir(dir);
}

static void k_free(ab_backend *b)
{
        dk *d = D(b);
        ab_dapi_free(d->api);
        if (d->root_fd >= 0)
                close(d->root_fd);
        pthread_mutex_destroy(&d->mu);
        free(d->data);
        free(d->root);
        free(d->init_path);
        free(d->runtime);
        free(d->default_image);
        free(d->skills_dir);
        free(d->disk_why);
        free(d);
}

static const ab_backend_ops docker_ops = {
    .name = "docker",
    .create = k_create,
    .start = k_start,
    .stop = k_stop,
    .pause = k_pause,
    .resume = k_resume,
    .destroy = k_destroy,
    .info = k_info,
    .list = k_list,
    .connect = k_connect,
    .stats = k_stats,
    .connect_unix = k_connect_unix,
    .port_connect = k_port_connect,
    .free = k_free,
    .image_config = k_image_config,
    /* disk_alloc, fork, snapshot: none (the API answers 501) */
};

/* The init runs in images without a C library: it must be static (no
 * PT_INTERP). A sanitized build's is not. */
static int check_static(const char *path, ab_err **err)
{
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        Elf64_Ehdr eh;
        if (fd < 0 || pread(fd, &eh, sizeof(eh), 0) != (ssize_t)sizeof(eh))
                return ab_err_set(err, AB_E_INTERNAL, errno, "cannot read agentbox-init at %s",
                                  path);
        if (memcmp(eh.e_ident, ELFMAG, SELFMAG) || eh.e_ident[EI_CLASS] != ELFCLASS64)
                return ab_err_set(err, AB_E_INTERNAL, 0, "agentbox-init at %s is not a 64-bit ELF",
                                  path);
        for (unsigned i = 0; i < eh.e_phnum; i++) {
                Elf64_Phdr ph;
                off_t off = (off_t)eh.e_phoff + (off_t)i * eh.e_phentsize;
                if (pread(fd, &ph, sizeof(ph), off) != (ssize_t)sizeof(ph))
                        break;
                if (ph.p_type == PT_INTERP)
                        return ab_err_set(err, AB_E_UNSUPPORTED, 0,
                                          "agentbox-init at %s is dynamically linked: the Docker "
                                          "backend needs a static one (it runs in any image)",
                                          path);
        }
        return 0;
}

int ab_docker_open(const ab_docker_opts *opts, ab_backend **out, ab_err **err)
{
        *out = NULL;
        if (geteuid() != 0)
                return ab_err_set(err, AB_E_PERMISSION, 0,
                                  "the Docker backend needs root (it mounts each box's socket "
                                  "folder and reaches boxes through /proc): run as root");
        if (!opts->data_dir)
                return ab_err_set(err, AB_E_INVALID, 0, "the Docker backend needs a data folder");
        int r = ab_backend_mkdir_p(opts->data_dir, 0700);
        if (r < 0)
                return ab_err_set(err, AB_E_INTERNAL, -r, "cannot create data folder %s",
                                  opts->data_dir);
        dk *d = xzalloc(sizeof(*d));
        d->base.ops = &docker_ops;
        d->root_fd = -1;
        pthread_mutex_init(&d->mu, NULL);
        _cleanup_backend_ ab_backend *guard = &d->base;
        d->data = realpath(opts->data_dir, NULL);
        if (!d->data)
                return ab_err_set(err, AB_E_INTERNAL, errno, "realpath %s", opts->data_dir);
        uint64_t h = 1469598103934665603ull;
        for (const char *p = d->data; *p; p++)
                h = (h ^ (unsigned char)*p) * 1099511628211ull;
        snprintf(d->hash, sizeof(d->hash), "%016llx", (unsigned long long)h);
        d->root = xasprintf("%s/docker", d->data);
        if (mkdir(d->root, 0700) < 0 && errno != EEXIST)
                return ab_err_set(err, AB_E_INTERNAL, errno, "create %s", d->root);
        d->root_fd = open(d->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (d->root_fd < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "open %s", d->root);
        if (ab_dapi_open(opts->host, &d->api, err) < 0)
                return -1;
        d->init_path = ab_backend_find_init(opts->init_path, err);
        if (!d->init_path || check_static(d->init_path, err) < 0)
                return -1;
        if (opts->skills_dir && *opts->skills_dir) {
                d->skills_dir = realpath(opts->skills_dir, NULL);
                if (!d->skills_dir)
                        return ab_err_set(err, AB_E_INVALID, errno, "skills folder %s",
                                          opts->skills_dir);
        }
        d->runtime = opts->runtime && *opts->runtime ? xstrdup(opts->runtime) : NULL;
        d->default_image =
            opts->default_image && *opts->default_image ? xstrdup(opts->default_image) : NULL;
        /* Is the engine there? A clear error now beats one at first create. */
        static const long ok[] = {200, 0};
        if (call_ok(d, "GET", "/_ping", NULL, 5000, ok, NULL, err) < 0)
                return ab_err_wrap(err, "the Docker engine does not answer");
        sweep(d);
        *out = steal_pointer(&guard);
        return 0;
}

/* The native backend: boxes as Linux namespaces on this machine.
 *
 * DATA/boxes/ID/      one directory per box (config.json, state.json, disk.img,
 *                     init.sock, lock, paused while paused, and mount points
 *                     used only inside the box's own mount namespace)
 * DATA/skills/        shown read-only in every box: a mount of DATA/skills.img,
 *                     a file system of its own (native/skillsfs.h)
 * DATA/cache/         formatted disk templates, one per size
 * DATA/trash/         boxes being deleted (renamed here first, so a crash
 *                     mid-delete never leaves half a box under boxes/)
 * /var/lib/agentbox/uid-ranges/SLOT   host-wide claims of uid ranges
 *
 * Per-box operations hold an exclusive flock on boxes/ID/lock, so CLI
 * processes and server threads can act on the same data folder at once. */
#include "backend/backend.h"
#include "backend/backend_int.h"
#include "backend/initpool.h"
#include "base/buf.h"
#include "base/log.h"
#include "base/id.h"
#include "base/selfpath.h"
#include "native/box.h"
#include "native/boxfs.h"
#include "native/cgroup.h"
#include "native/hide.h"
#include "native/loopdisk.h"
#include "native/rootfs.h"
#include "native/seccomp.h"
#include "native/skillsfs.h"
#include "native/state.h"
#include "native/volume.h"

#include <dirent.h>
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <stdatomic.h>
#include <linux/openat2.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <sched.h>
#include <time.h>

#define UID_FIRST 0x100000u /* 1048576: far above any regular host user */
#define UID_STEP  0x10000u
#define UID_SLOTS 60000u

typedef struct native {
        ab_backend base;
        char *data;       /* absolute */
        char *boxes;      /* DATA/boxes */
        char *skills;     /* DATA/skills */
        char *init_path;  /* found: at open, or by init_memfd (opts.lazy_init) */
        char *init_given; /* opts.init_path, kept until then; NULL = none */
        int boxes_fd;
        int data_fd;
        int cache_fd; /* DATA/cache: formatted disk templates */
        ab_cg cg;
        bool cg_ok;
        bool cg_tried;       /* cgroups and the seccomp filter are set up on first */
        bool bpf_ready;      /* use, so short CLI calls (ls, exec) skip them */
        bool skills_ready;   /* DATA/skills set up (ab_skillsfs_open), under lazy */
        uint64_t skills_mib; /* the size of its disk when it is made */
        pthread_mutex_t lazy;
        char *cg_error;
        atomic_uint uid_hint; /* next uid slot to probe; >= UID_SLOTS: pick one at random */
        ab_bpf bpf;
        int init_fd;               /* sealed memfd of agentbox-init, -1 until first start */
        struct stat init_st;       /* the binary it was copied from */
        ab_hide_watch *hide_watch; /* what boxes must not see of /etc; NULL until first start */
        bool watch_host;           /* opts.watch_host: keep hide_watch current with inotify */
        /* The spare-disk thread (opts.keep_spares): makes spares of the size
         * the last create used (native/loopdisk.h). */
        bool keep_spares;
        bool spare_running, spare_stop;
        uint64_t spare_want; /* MiB; 0: nothing to do */
        pthread_t spare_thread;
        pthread_mutex_t spare_mu;
        pthread_cond_t spare_cv;
        ab_initpool pool; /* connections to inits kept after an exec (release) */
        const char *hide[4];
        ab_vols *vols; /* DATA/volumes */
} native;

static native *N(ab_backend *b)
{
        return (native *)b;
}

/* Opens and exclusively locks boxes/ID; verifies the directory is still the
 * live one after the lock (destroy renames it away while holding the lock). */
static int lock_box(native *n, const char *id, int *lockfd, ab_err **err)
{
        if (ab_id_check(id, err) < 0)
                return -1;
        _cleanup_close_ int bfd =
            openat(n->boxes_fd, id, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
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
        if (fstat(bfd, &a) < 0 || fstatat(n->boxes_fd, id, &b, AT_SYMLINK_NOFOLLOW) < 0 ||
            a.st_ino != b.st_ino || a.st_dev != b.st_dev)
                return ab_err_set(err, AB_E_NOT_FOUND, 0, "no box with id '%s'", id);
        *lockfd = steal_fd(&lfd);
        return steal_fd(&bfd);
}

static char *box_dir(native *n, const char *id)
{
        return xasprintf("%s/%s", n->boxes, id);
}

static bool cg_ready(native *n)
{
        pthread_mutex_lock(&n->lazy);
        if (!n->cg_tried) {
                n->cg_tried = true;
                /* Box ids are unique per data folder only: the cgroup parent
                 * carries a hash of the folder, so two folders never share a
                 * box's cgroup. */
                uint64_t h = 1469598103934665603ull;
                for (const char *p = n->data; *p; p++)
                        h = (h ^ (unsigned char)*p) * 1099511628211ull;
                char parent[64];
                snprintf(parent, sizeof(parent), "agentbox-%08x", (unsigned)(h ^ (h >> 32)));
                ab_err *cge = NULL;
                if (ab_cg_open("/sys/fs/cgroup", parent, &n->cg, &cge) == 0) {
                        n->cg_ok = true;
                        /* Pause, resume and kill-all freeze: keep them cheap on v1. */
                        ab_cg_freeze_anchor(&n->cg);
                } else {
                        n->cg_error = xstrdup(cge->msg);
                        ab_err_free(&cge);
                }
        }
        pthread_mutex_unlock(&n->lazy);
        return n->cg_ok;
}

static int need_bpf(native *n, ab_err **err)
{
        pthread_mutex_lock(&n->lazy);
        int r = 0;
        if (!n->bpf_ready) {
                r = ab_seccomp_build(&n->bpf, err);
                n->bpf_ready = r == 0;
        }
        pthread_mutex_unlock(&n->lazy);
        return r;
}

/* A dup of the sealed copy of agentbox-init every box execs. Made once and
 * made again only when the binary on disk changes (an upgrade), so a start
 * costs a stat instead of a 1 MiB copy, and the pages are shared. */
static int init_memfd(native *n, ab_err **err)
{
        pthread_mutex_lock(&n->lazy);
        if (!n->init_path)
                n->init_path = ab_backend_find_init(n->init_given, err);
        pthread_mutex_unlock(&n->lazy);
        if (!n->init_path)
                return -1;
        struct stat st;
        if (stat(n->init_path, &st) < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "cannot open agentbox-init at %s",
                                  n->init_path);
        pthread_mutex_lock(&n->lazy);
        if (n->init_fd >= 0 &&
            (st.st_dev != n->init_st.st_dev || st.st_ino != n->init_st.st_ino ||
             st.st_size != n->init_st.st_size || st.st_mtim.tv_sec != n->init_st.st_mtim.tv_sec ||
             st.st_mtim.tv_nsec != n->init_st.st_mtim.tv_nsec)) {
                close(n->init_fd);
                n->init_fd = -1;
        }
        int r = 0;
        if (n->init_fd < 0) {
                _cleanup_close_ int exe = open(n->init_path, O_RDONLY | O_CLOEXEC);
                if (exe < 0 || fstat(exe, &n->init_st) < 0)
                        r = ab_err_set(err, AB_E_INTERNAL, errno, "cannot open agentbox-init at %s",
                                       n->init_path);
                else if ((n->init_fd = ab_box_seal_init(exe)) < 0)
                        r = ab_err_set(err, AB_E_INTERNAL, -n->init_fd,
                                       "cannot load agentbox-init");
        }
        int fd = r < 0 ? -1 : fcntl(n->init_fd, F_DUPFD_CLOEXEC, 3);
        if (r == 0 && fd < 0)
                r = ab_err_set(err, AB_E_INTERNAL, errno, "dup agentbox-init");
        pthread_mutex_unlock(&n->lazy);
        return r < 0 ? -1 : fd;
}

/* What the shared layers of a box on the host base hide, walked again
 * only when one of them or the mount table changed (native/hide.h). */
static ab_hide_list *shared_unreadable(native *n, ab_err **err)
{
        pthread_mutex_lock(&n->lazy);
        if (!n->hide_watch) {
                n->hide_watch = ab_hide_watch_new_dirs("/", ab_rootfs_shared(), "etc");
                _cleanup_free_ char *cache = xasprintf("%s/hide.cache", n->data);
                ab_hide_watch_persist(n->hide_watch, cache, AB_HIDE_CACHE_MAX_AGE_S);
                if (!n->watch_host)
                        ab_hide_watch_one_shot(n->hide_watch);
        }
        pthread_mutex_unlock(&n->lazy);
        return ab_hide_get(n->hide_watch, err);
}

/* DATA/skills as boxes bind it (native/skillsfs.h): at open, or (opts.lazy_skills)
 * before the first start of a box. */
static int need_skills(native *n, ab_err **err)
{
        pthread_mutex_lock(&n->lazy);
        int r = 0;
        if (!n->skills_ready) {
                ab_skillsfs_kind sk;
                r = ab_skillsfs_open(n->data_fd, n->data, n->cache_fd, n->skills_mib, &sk, err);
                n->skills_ready = r == 0;
        }
        pthread_mutex_unlock(&n->lazy);
        return r;
}

static int need_cgroups(native *n, ab_err **err)
{
        if (cg_ready(n))
                return 0;
        return ab_err_set(err, AB_E_UNSUPPORTED, 0, "cgroups are not usable: %s",
                          n->cg_error ? n->cg_error : "unknown");
}

/* How long a pause waits for every process of a box to stop. */
#define PAUSE_TIMEOUT_MS 2000u

/* True when the box's processes are frozen, or being frozen (a pause that a
 * crash interrupted): either way they do not answer. The freezer state of the
 * box's cgroup is the record, so every process sees the same. */
static bool box_frozen(native *n, const char *id)
{
        ab_cg_freezer fs;
        return cg_ready(n) && ab_cg_freezer_state(&n->cg, id, &fs, NULL) == 0 && fs != AB_CG_THAWED;
}

/* boxes/ID/paused exists while the box is (being) paused: made before the
 * freeze, removed after the thaw, so a frozen box always has it. It spares
 * the connect hot path a read of the cgroup (~10-20 us); the cgroup stays the
 * record (a marker without a frozen cgroup is a pause or resume a crash cut
 * short, and is ignored). */
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

/* box_frozen, asked only when the marker says it may be. */
static bool maybe_paused(native *n, int bfd, const char *id)
{
        return faccessat(bfd, "paused", F_OK, AT_SYMLINK_NOFOLLOW) == 0 && box_frozen(n, id);
}

/* Whether the box's init (from state.json) is alive; the caller holds the lock. */
static int init_alive_locked(int bfd, bool *alive, ab_err **err)
{
        ab_box_state st;
        int r = ab_state_read(bfd, &st, err);
        if (r < 0)
                return -1;
        *alive = r == 0 && !st.error && ab_init_alive(st.init_pid, st.init_start);
        ab_state_clear(&st);
        return 0;
}

static void binds_free(ab_bind *b, size_t n)
{
        for (size_t i = 0; b && i < n; i++)
                if (b[i].kind == AB_MOUNT_VOLUME)
                        free((char *)b[i].host);
        free(b);
}

/* The host side of each of the box's mounts: a volume is mounted on the
 * host first (once, under its lock), a host directory must still be one. */
static int resolve_binds(native *n, const ab_box_config *c, ab_bind **out, ab_err **err)
{
        *out = NULL;
        if (!c->n_mounts)
                return 0;
        ab_bind *b = xcalloc(c->n_mounts, sizeof(*b));
        *out = b;
        for (size_t i = 0; i < c->n_mounts; i++) {
                const ab_box_mount *m = &c->mounts[i];
                b[i] = (ab_bind){
                    .kind = m->kind, .path = m->path, .read_only = m->read_only, .sub = m->sub};
                if (m->kind == AB_MOUNT_HOST)
                        b[i].host = m->source;
                if (m->kind != AB_MOUNT_VOLUME)
                        continue;
                _cleanup_close_ int lfd = ab_vol_lock(n->vols, m->source, err);
                if (lfd < 0)
                        return -1;
                char *mnt = ab_vol_mount_locked(n->vols, m->source, err);
                if (!mnt)
                        return -1;
                b[i].host = mnt;
        }
        return 0;
}

/* Starts the box; the caller holds its lock. */
static int start_locked(native *n, int bfd, const char *id, ab_err **err)
{
        ab_box_state st;
        int r = ab_state_read(bfd, &st, err);
        if (r < 0)
                return -1;
        if (r == 0 && !st.error && ab_init_alive(st.init_pid, st.init_start)) {
                ab_state_clear(&st);
                /* Running: nothing to do; paused: go on. */
                if (box_frozen(n, id) && ab_cg_thaw(&n->cg, id, err) < 0)
                        return -1;
                mark_paused(bfd, false);
                return 0;
        }
        mark_paused(bfd, false);
        ab_state_clear(&st);
        if (need_cgroups(n, err) < 0 || need_bpf(n, err) < 0 || need_skills(n, err) < 0)
                return -1;
        ab_box_config c;
        if (ab_box_config_read(bfd, &c, err) < 0)
                return ab_err_wrap(err, "box %s", id);
        _cleanup_free_ char *dir = box_dir(n, id);
        _cleanup_close_ int exe = init_memfd(n, err);
        if (exe < 0) {
                ab_box_config_clear(&c);
                return -1;
        }
        ab_cg_limits cl = {
            .memory_bytes = c.limits.memory_mib * 1024 * 1024,
            .pids = c.limits.pids,
            .cpus = c.limits.cpus,
        };
        /* Leftovers of a crashed start are cleared before the new one (and
         * before its disk is mounted again). The cgroup itself is made by
         * ab_box_spawn while the setup process builds the rootfs. */
        ab_cg_kill_all(&n->cg, id, NULL);
        ab_hide_list *hidden = NULL;
        ab_bind *binds = NULL;
        if (resolve_binds(n, &c, &binds, err) < 0 ||
            (!c.rootfs && !c.layers && !(hidden = shared_unreadable(n, err)))) {
                binds_free(binds, c.n_mounts);
                ab_box_config_clear(&c);
                return ab_err_wrap(err, "box %s", id);
        }
        ab_spawn_spec s = {
            .id = id,
            .box_dir = dir,
            .base = c.rootfs ? c.rootfs : "/",
            .layers = (const char *const *)c.layers,
            .skills_dir = n->skills,
            .hide = n->hide,
            .uid_base = c.uid_base,
            .disk_uid_base = c.disk_uid_base,
            .limits = &c.limits,
            .cg = &n->cg,
            .cg_limits = &cl,
            .bpf = &n->bpf,
            .init_memfd = exe,
            .unreadable = hidden,
            .binds = binds,
            .n_binds = c.n_mounts,
        };
        pid_t pid;
        uint64_t start;
        r = ab_box_spawn(&s, &pid, &start, err);
        ab_hide_list_unref(hidden);
        binds_free(binds, c.n_mounts);
        ab_box_config_clear(&c);
        if (r < 0) {
                ab_box_state es = {.error = (*err) ? (*err)->msg : "start failed"};
                ab_state_write(bfd, &es, NULL);
                ab_cg_kill_all(&n->cg, id, NULL);
                return -1;
        }
        ab_box_state ns = {.init_pid = pid, .init_start = start, .started_at = time(NULL)};
        if (ab_state_write(bfd, &ns, err) < 0) {
                ab_box_kill(pid, start, NULL);
                return -1;
        }
        char pidbuf[16];
        snprintf(pidbuf, sizeof(pidbuf), "%d", (int)pid);
        ab_log(AB_LOG_INFO, "box started", "box", id, "init_pid", pidbuf, NULL);
        return 0;
}

static int stop_locked(native *n, int bfd, const char *id, ab_err **err)
{
        ab_initpool_drop(&n->pool, id);
        ab_box_state st;
        int r = ab_state_read(bfd, &st, err);
        if (r < 0)
                return -1;
        /* A frozen process cannot die before it is thawed (v1): kill them all
         * frozen, then thaw (kill_all does both), so none runs in between. */
        if (r == 0 && !st.error && box_frozen(n, id) && ab_cg_kill_all(&n->cg, id, err) < 0) {
                ab_state_clear(&st);
                return ab_err_wrap(err, "stopping paused box %s", id);
        }
        if (r == 0 && !st.error && ab_box_kill(st.init_pid, st.init_start, err) < 0) {
                ab_state_clear(&st);
                return -1;
        }
        ab_state_clear(&st);
        if (cg_ready(n)) {
                if (ab_cg_kill_all(&n->cg, id, err) < 0)
                        return -1;
                ab_cg_destroy(&n->cg, id, NULL);
        }
        if ((r = ab_state_remove(bfd)) < 0)
                return ab_err_set(err, AB_E_INTERNAL, -r, "remove state of box %s", id);
        unlinkat(bfd, "init.sock", 0);
        mark_paused(bfd, false);
        ab_log(AB_LOG_INFO, "box stopped", "box", id, NULL);
        return 0;
}

/* uid ranges are unique on the whole host, not per data folder: two
 * agentbox instances must never run boxes as the same host uids. A range is
 * claimed by creating REGISTRY/SLOT exclusively; the file names its box. */
static const char *uid_registry(void)
{
        const char *r = getenv("AGENTBOX_UID_REGISTRY");
        return r && *r ? r : "/var/lib/agentbox/uid-ranges";
}

/* A claim whose box no longer exists (its data folder was deleted without
 * `rm`) is stale; claims younger than min_age seconds may belong to a create
 * in progress. The claim is judged from one open file, whose inode is
 * returned in *ino. prefix (may be NULL): only claims of boxes under it. */
static bool claim_is_stale(int regfd, const char *slot, uid_t base, int min_age, const char *prefix,
                           ino_t *ino)
{
        _cleanup_close_ int fd = openat(regfd, slot, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0 || st.st_mtime > time(NULL) - min_age)
                return false;
        *ino = st.st_ino;
        char owner[4096];
        ssize_t len = pread(fd, owner, sizeof(owner) - 1, 0);
        if (len <= 0)
                return false; /* claims are written before they appear: never empty */
        owner[len] = '\0';
        owner[strcspn(owner, "\n")] = '\0';
        if (prefix && (strncmp(owner, prefix, strlen(prefix)) || owner[strlen(prefix)] != '/'))
                return false;
        _cleanup_close_ int bfd = open(owner, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (bfd < 0)
                return errno == ENOENT;
        ab_box_config c;
        if (ab_box_config_read(bfd, &c, NULL) < 0)
                return false;
        bool stale = c.uid_base != base;
        ab_box_config_clear(&c);
        return stale;
}

/* Creates REGISTRY/SLOT holding `owner`, atomically: the content is written
 * to a private file first and linked into place, so a claim is never seen
 * empty. 0, -EEXIST when the slot is taken, or -errno. */
static int claim_slot(int regfd, const char *slot, const char *owner)
{
        char tmp[96];
        static atomic_uint seq;
        snprintf(tmp, sizeof(tmp), ".claim.%s.%d.%u", slot, (int)getpid(),
                 atomic_fetch_add(&seq, 1));
        _cleanup_close_ int fd =
            openat(regfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0)
                return -errno;
        int r = ab_write_all(fd, owner, strlen(owner));
        if (r == 0 && linkat(regfd, tmp, regfd, slot, 0) < 0)
                r = -errno;
        unlinkat(regfd, tmp, 0);
        return r;
}

static int alloc_uid_base(native *n, const char *id, uid_t *out, ab_err **err)
{
        const char *reg = uid_registry();
        int r = ab_backend_mkdir_p(reg, 0700);
        if (r < 0)
                return ab_err_set(err, AB_E_INTERNAL, -r, "cannot create uid registry %s", reg);
        _cleanup_close_ int regfd = open(reg, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (regfd < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "open uid registry %s", reg);
        _cleanup_free_ char *owner = xasprintf("%s/%s\n", n->boxes, id);
        /* Probing from slot 0 would step over every taken slot (a claim
         * attempt each) and cost O(boxes) per create. Start after the slot
         * this process claimed last, or at a random one: with slots far
         * more numerous than boxes, the first probe is almost always free. */
        uint32_t first = atomic_load(&n->uid_hint);
        if (first >= UID_SLOTS) {
                char rnd[17];
                ab_id_random(rnd);
                first = (uint32_t)(strtoull(rnd + 8, NULL, 16) % UID_SLOTS);
        }
        for (uint32_t k = 0; k < UID_SLOTS; k++) {
                uint32_t i = (first + k) % UID_SLOTS;
                char slot[16];
                snprintf(slot, sizeof(slot), "%u", i);
                uid_t base = UID_FIRST + i * UID_STEP;
                r = claim_slot(regfd, slot, owner);
                ino_t ino = 0;
                if (r == -EEXIST && claim_is_stale(regfd, slot, base, 600, NULL, &ino)) {
                        /* Take it over: move the judged file aside, and put it
                         * back if a fresh claim replaced it meanwhile. */
                        char tmp[64];
                        snprintf(tmp, sizeof(tmp), ".stale.%s.%d", slot, (int)getpid());
                        struct stat st;
                        if (renameat(regfd, slot, regfd, tmp) == 0) {
                                if (fstatat(regfd, tmp, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                                    st.st_ino == ino) {
                                        unlinkat(regfd, tmp, 0);
                                        r = claim_slot(regfd, slot, owner);
                                } else {
                                        renameat2(regfd, tmp, regfd, slot, RENAME_NOREPLACE);
                                        unlinkat(regfd, tmp, 0);
                                }
                        }
                }
                if (r == -EEXIST)
                        continue;
                if (r < 0)
                        return ab_err_set(err, AB_E_INTERNAL, -r, "claim uid range %s/%s", reg,
                                          slot);
                atomic_store(&n->uid_hint, (i + 1) % UID_SLOTS);
                *out = base;
                return 0;
        }
        return ab_err_set(err, AB_E_LIMIT, 0, "no free uid range: too many boxes on this host");
}

/* Gives back the claims of this data folder's boxes that no longer exist
 * (a create killed between claiming a range and writing config.json leaves
 * one nothing else names). A minute old at least: younger ones may be a
 * create in progress. */
static void sweep_claims(native *n)
{
        int regfd = open(uid_registry(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        DIR *d = regfd >= 0 ? fdopendir(regfd) : NULL;
        if (!d) {
                if (regfd >= 0)
                        close(regfd);
                return;
        }
        struct dirent *e;
        while ((e = readdir(d))) {
                char *end;
                unsigned long i = strtoul(e->d_name, &end, 10);
                if (e->d_name[0] < '0' || e->d_name[0] > '9' || *end || i >= UID_SLOTS)
                        continue;
                ino_t ino = 0;
                if (!claim_is_stale(dirfd(d), e->d_name, (uid_t)(UID_FIRST + i * UID_STEP), 60,
                                    n->boxes, &ino))
                        continue;
                /* unlink only the file judged (a new claim may have replaced it) */
                char tmp[64];
                snprintf(tmp, sizeof(tmp), ".sweep.%lu.%d", i, (int)getpid());
                struct stat st;
                if (renameat(dirfd(d), e->d_name, dirfd(d), tmp) < 0)
                        continue;
                if (fstatat(dirfd(d), tmp, &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_ino != ino)
                        renameat2(dirfd(d), tmp, dirfd(d), e->d_name, RENAME_NOREPLACE);
                unlinkat(dirfd(d), tmp, 0);
        }
        closedir(d);
}

/* Gives a box's uid range back (only if the claim is still this box's). */
static void release_uid_base(native *n, const char *id, uid_t base)
{
        if (base < UID_FIRST || (base - UID_FIRST) % UID_STEP)
                return;
        _cleanup_close_ int regfd = open(uid_registry(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (regfd < 0)
                return;
        char slot[16];
        snprintf(slot, sizeof(slot), "%u", (unsigned)((base - UID_FIRST) / UID_STEP));
        _cleanup_free_ char *owner = NULL;
        _cleanup_free_ char *mine = xasprintf("%s/%s", n->boxes, id);
        if (ab_read_file(regfd, slot, &owner, NULL) < 0)
                return;
        owner[strcspn(owner, "\n")] = '\0';
        if (strcmp(owner, mine) == 0)
                unlinkat(regfd, slot, 0);
}

static void *spare_main(void *arg)
{
        native *n = arg;
        pthread_mutex_lock(&n->spare_mu);
        while (!n->spare_stop) {
                uint64_t mib = n->spare_want;
                if (!mib) {
                        pthread_cond_wait(&n->spare_cv, &n->spare_mu);
                        continue;
                }
                n->spare_want = 0;
                pthread_mutex_unlock(&n->spare_mu);
                ab_err *e = NULL;
                if (ab_disk_make_spares(n->cache_fd, mib, &e) < 0) {
                        ab_log(AB_LOG_WARN, "cannot make spare disks", "error", e->msg, NULL);
                        ab_err_free(&e);
                }
                pthread_mutex_lock(&n->spare_mu);
        }
        pthread_mutex_unlock(&n->spare_mu);
        return NULL;
}

/* Asks the spare thread (started on first use) for spares of this size. */
static void want_spares(native *n, uint64_t mib)
{
        if (!n->keep_spares)
                return;
        pthread_mutex_lock(&n->spare_mu);
        if (!n->spare_running && !n->spare_stop)
                n->spare_running = pthread_create(&n->spare_thread, NULL, spare_main, n) == 0;
        n->spare_want = mib;
        pthread_cond_signal(&n->spare_cv);
        pthread_mutex_unlock(&n->spare_mu);
}

typedef struct vol_locks {
        int fd[AB_MOUNTS_MAX];
        size_t n;
} vol_locks;

static void vol_locks_release(vol_locks *l)
{
        for (size_t i = 0; i < l->n; i++)
                close(l->fd[i]);
        l->n = 0;
}

static int cmp_cstr(const void *a, const void *b)
{
        return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Checks a new box's mounts: paths, volumes that exist (locked, in name
 * order so two creates never wait for each other), host directories. */
static int check_mounts(native *n, const ab_box_spec *spec, vol_locks *locks, ab_err **err)
{
        if (ab_box_mounts_check(spec->mounts, spec->n_mounts, err) < 0)
                return -1;
        const char *names[AB_MOUNTS_MAX];
        size_t nn = 0;
        for (size_t i = 0; i < spec->n_mounts; i++) {
                const ab_box_mount *m = &spec->mounts[i];
                if (m->kind == AB_MOUNT_VOLUME)
                        names[nn++] = m->source;
                if (m->kind != AB_MOUNT_HOST)
                        continue;
                struct stat st;
                if (stat(m->source, &st) < 0 || !S_ISDIR(st.st_mode))
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "mounts: host_path '%s' is not a directory", m->source);
                /* the data folder holds every box's disk and the volumes */
                if (ab_backend_path_within(m->source, n->data) ||
                    ab_backend_path_within(n->data, m->source))
                        return ab_err_set(err, AB_E_PERMISSION, 0,
                                          "mounts: host_path '%s' is, holds or lies in the "
                                          "server's data folder",
                                          m->source);
        }
        qsort(names, nn, sizeof(names[0]), cmp_cstr);
        for (size_t i = 0; i < nn; i++) {
                if (i > 0 && !strcmp(names[i], names[i - 1]))
                        continue;
                int fd = ab_vol_lock(n->vols, names[i], err);
                if (fd < 0)
                        return -1;
                locks->fd[locks->n++] = fd;
        }
        return 0;
}

/* Creating is atomic: the box is assembled under trash/ (locked, so the
 * trash sweeper leaves it alone) and renamed into boxes/ only when its disk
 * and config.json exist. A crash mid-create leaves nothing under boxes/. */
static int n_create(ab_backend *b, const ab_box_spec *spec, ab_err **err)
{
        native *n = N(b);
        if (ab_id_check(spec->id, err) < 0 || ab_limits_validate(&spec->limits, err) < 0)
                return -1;
        if (need_cgroups(n, err) < 0)
                return -1;
        if (spec->rootfs && spec->layers)
                return ab_err_set(err, AB_E_INVALID, 0, "a box has a rootfs or an image, not both");
        for (const char *const *l = spec->layers; l && *l; l++) {
                struct stat st;
                if ((*l)[0] != '/' || stat(*l, &st) < 0 || !S_ISDIR(st.st_mode))
                        return ab_err_set(
                            err, AB_E_INVALID, 0,
                            "image layer '%s' must be an absolute path to a directory", *l);
        }
        if (spec->rootfs) {
                struct stat st;
                if (spec->rootfs[0] != '/' || stat(spec->rootfs, &st) < 0 || !S_ISDIR(st.st_mode))
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "rootfs '%s' must be an absolute path to a directory",
                                          spec->rootfs);
        }
        if (faccessat(n->boxes_fd, spec->id, F_OK, AT_SYMLINK_NOFOLLOW) == 0)
                return ab_err_set(err, AB_E_CONFLICT, 0, "box '%s' already exists", spec->id);
        /* The volumes stay locked until the box is in boxes/: a delete of
         * one waits, then sees the box using it. */
        vol_locks locks __attribute__((cleanup(vol_locks_release))) = {0};
        if (check_mounts(n, spec, &locks, err) < 0)
                return -1;
        _cleanup_close_ int tfd = openat(n->data_fd, "trash", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (tfd < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "open trash dir");
        char rnd[17], tmp[128];
        ab_id_random(rnd);
        snprintf(tmp, sizeof(tmp), "new.%s.%s", spec->id, rnd);
        if (mkdirat(tfd, tmp, 0700) < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "create box directory");
        _cleanup_close_ int bfd = openat(tfd, tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        _cleanup_close_ int lockfd =
            bfd < 0 ? -1 : openat(bfd, "lock", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (lockfd < 0 || flock(lockfd, LOCK_EX) < 0) {
                int e = errno;
                unlinkat(tfd, tmp, AT_REMOVEDIR);
                return ab_err_set(err, AB_E_INTERNAL, e, "lock new box");
        }
        ab_box_config c = {.limits = spec->limits, .created_at = time(NULL)};
        snprintf(c.id, sizeof(c.id), "%s", spec->id);
        c.rootfs = (char *)spec->rootfs;
        c.layers = (char **)spec->layers;
        c.image = (char *)spec->image;
        c.mounts = (ab_box_mount *)spec->mounts;
        c.n_mounts = spec->n_mounts;
        int r = alloc_uid_base(n, spec->id, &c.uid_base, err);
        /* config.json first: a create killed from here on leaves the claim
         * written down in trash/, where sweep_trash gives it back */
        if (r == 0)
                r = ab_box_config_write(bfd, &c, err);
        if (r == 0)
                r = ab_disk_create(n->cache_fd, bfd, "disk.img", spec->limits.disk_mib, err);
        if (r == 0)
                want_spares(n, spec->limits.disk_mib);
        if (r == 0 && renameat2(tfd, tmp, n->boxes_fd, spec->id, RENAME_NOREPLACE) < 0) {
                if (errno == EEXIST)
                        r = ab_err_set(err, AB_E_CONFLICT, 0, "box '%s' already exists", spec->id);
                else
                        r = ab_err_set(err, AB_E_INTERNAL, errno, "publish box %s", spec->id);
        }
        vol_locks_release(&locks);
        if (r < 0)
                goto fail;
        if (start_locked(n, bfd, spec->id, err) < 0) {
                /* A box that cannot start is not created: take it back. */
                ab_cg_destroy(&n->cg, spec->id, NULL);
                if (renameat(n->boxes_fd, spec->id, tfd, tmp) < 0)
                        return -1;
                r = -1;
                goto fail;
        }
        return 0;
fail:;
        release_uid_base(n, spec->id, c.uid_base);
        ab_rm_tree_at(tfd, tmp);
        return r;
}

/* A box in trash/ (a killed create or delete) may still hold its uid range:
 * give it back, unless a box of that id in boxes/ uses the same range (then
 * the claim is that box's). */
static void release_trashed_claim(native *n, int bfd)
{
        ab_box_config c = {0};
        if (ab_box_config_read(bfd, &c, NULL) < 0)
                return;
        bool live = false;
        _cleanup_close_ int lfd =
            openat(n->boxes_fd, c.id, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        ab_box_config lc = {0};
        if (lfd >= 0 && ab_box_config_read(lfd, &lc, NULL) == 0) {
                live = lc.uid_base == c.uid_base;
                ab_box_config_clear(&lc);
        }
        if (!live && ab_id_check(c.id, NULL) == 0)
                release_uid_base(n, c.id, c.uid_base);
        ab_box_config_clear(&c);
}

/* Removes what crashed creates and deletes left in trash/: entries whose
 * lock nobody holds (creates: older than a minute), giving back the uid
 * ranges they still claim. */
static void sweep_trash(native *n)
{
        int dfd = openat(n->data_fd, "trash", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
        if (!d) {
                if (dfd >= 0)
                        close(dfd);
                return;
        }
        struct dirent *e;
        while ((e = readdir(d))) {
                if (e->d_name[0] == '.')
                        continue;
                /* Young new.* entries may be a create between its mkdir and
                 * its flock; a delete renames a box it holds locked. */
                struct stat es;
                if (fstatat(dirfd(d), e->d_name, &es, AT_SYMLINK_NOFOLLOW) < 0 ||
                    (!strncmp(e->d_name, "new.", 4) && es.st_mtime > time(NULL) - 60))
                        continue;
                _cleanup_close_ int bfd =
                    openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
                _cleanup_close_ int lfd =
                    bfd < 0 ? -1 : openat(bfd, "lock", O_RDWR | O_CLOEXEC | O_NOFOLLOW);
                if (lfd >= 0 && flock(lfd, LOCK_EX | LOCK_NB) < 0)
                        continue; /* a create in progress */
                if (bfd >= 0)
                        release_trashed_claim(n, bfd);
                ab_rm_tree_at(dirfd(d), e->d_name);
        }
        closedir(d);
}

static int n_start(ab_backend *b, const char *id, ab_err **err)
{
        native *n = N(b);
        _cleanup_close_ int lockfd = -1;
        _cleanup_close_ int bfd = lock_box(n, id, &lockfd, err);
        if (bfd < 0)
                return -1;
        return start_locked(n, bfd, id, err);
}

static int n_stop(ab_backend *b, const char *id, ab_err **err)
{
        native *n = N(b);
        _cleanup_close_ int lockfd = -1;
        _cleanup_close_ int bfd = lock_box(n, id, &lockfd, err);
        if (bfd < 0)
                return -1;
        return stop_locked(n, bfd, id, err);
}

static int n_pause(ab_backend *b, const char *id, ab_err **err)
{
        native *n = N(b);
        _cleanup_close_ int lockfd = -1;
        _cleanup_close_ int bfd = lock_box(n, id, &lockfd, err);
        bool alive = false;
        if (bfd < 0 || init_alive_locked(bfd, &alive, err) < 0)
                return -1;
        if (!alive)
                return ab_err_set(err, AB_E_CONFLICT, 0,
                                  "box '%s' is not running: only a running box can be paused", id);
        if (need_cgroups(n, err) < 0)
                return -1;
        ab_initpool_drop(&n->pool, id);
        mark_paused(bfd, true);
        if (ab_cg_freeze(&n->cg, id, PAUSE_TIMEOUT_MS, err) < 0) {
                mark_paused(bfd, false);
                return ab_err_wrap(err, "pausing box %s", id);
        }
        ab_log(AB_LOG_INFO, "box paused", "box", id, NULL);
        return 0;
}

static int n_resume(ab_backend *b, const char *id, ab_err **err)
{
        native *n = N(b);
        _cleanup_close_ int lockfd = -1;
        _cleanup_close_ int bfd = lock_box(n, id, &lockfd, err);
        bool alive = false;
        if (bfd < 0 || init_alive_locked(bfd, &alive, err) < 0)
                return -1;
        if (!alive)
                return ab_err_set(err, AB_E_CONFLICT, 0,
                                  "box '%s' is not running: start it (a stopped box has no "
                                  "processes to resume)",
                                  id);
        if (need_cgroups(n, err) < 0 || ab_cg_thaw(&n->cg, id, err) < 0)
                return ab_err_wrap(err, "resuming box %s", id);
        mark_paused(bfd, false);
        return 0;
}

/* Removes this data folder's cgroup parent once no box cgroup is left in it
 * (rmdir of a non-empty cgroup fails, which is the check). */
static void remove_cg_parent(native *n)
{
        static const char *const ctrls[] = {"memory", "pids", "cpu", "cpuacct", "freezer"};
        for (size_t i = 0; i < AB_ARRAY_LEN(ctrls); i++) {
                _cleanup_free_ char *p =
                    ab_cg_path(&n->cg, n->cg.version == AB_CG_V2 ? NULL : ctrls[i], NULL);
                if (p)
                        rmdir(p);
                if (n->cg.version == AB_CG_V2)
                        break;
        }
}

static int n_destroy(ab_backend *b, const char *id, ab_err **err)
{
        native *n = N(b);
        _cleanup_close_ int lockfd = -1;
        _cleanup_close_ int bfd = lock_box(n, id, &lockfd, err);
        if (bfd < 0)
                return -1;
        if (stop_locked(n, bfd, id, err) < 0)
                return -1;
        ab_box_config c = {0};
        bool have_config = ab_box_config_read(bfd, &c, NULL) == 0;
        char ridbuf[17], trash[128];
        ab_id_random(ridbuf);
        snprintf(trash, sizeof(trash), "%s.%s", id, ridbuf);
        _cleanup_close_ int tfd = openat(n->data_fd, "trash", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (tfd < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "open trash dir");
        if (renameat(n->boxes_fd, id, tfd, trash) < 0) {
                int e = errno;
                ab_box_config_clear(&c);
                return ab_err_set(err, AB_E_INTERNAL, e, "move box %s to trash", id);
        }
        /* The box is out of boxes/ and has no process: its uid range is free.
         * Given back before the tree goes, so a kill during the removal
         * cannot leak it (and one before this line leaves config.json in
         * trash/ for sweep_trash). */
        if (have_config) {
                release_uid_base(n, id, c.uid_base);
                ab_box_config_clear(&c);
        }
        int r = ab_rm_tree_at(tfd, trash);
        if (r < 0)
                ab_log(AB_LOG_WARN, "leftovers in trash", "box", id, "error", strerror(-r), NULL);
        if (cg_ready(n))
                remove_cg_parent(n);
        ab_log(AB_LOG_INFO, "box destroyed", "box", id, NULL);
        return 0;
}

/* A box without state.json has no processes - unless a start was killed
 * between spawning init and recording it. Such orphans (found through the
 * box's cgroup, when nobody holds the box's lock) are ended, so every running
 * box is one the records know about. */
/* True when the box's cgroup exists in any hierarchy (a clean stop removes it). */
static bool cg_exists(native *n, const char *id)
{
        static const char *const ctrls[] = {"memory", "pids", "cpu", "cpuacct", "freezer"};
        for (size_t i = 0; i < AB_ARRAY_LEN(ctrls); i++) {
                _cleanup_free_ char *p =
                    ab_cg_path(&n->cg, n->cg.version == AB_CG_V2 ? NULL : ctrls[i], id);
                struct stat st;
                if (p && stat(p, &st) == 0)
                        return true;
                if (n->cg.version == AB_CG_V2)
                        break;
        }
        return false;
}

static ab_box_status reap_orphans(native *n, int bfd, const char *id)
{
        if (!cg_ready(n) || !cg_exists(n, id))
                return AB_BOX_STOPPED;
        _cleanup_close_ int lfd = openat(bfd, "lock", O_RDWR | O_CLOEXEC | O_NOFOLLOW);
        if (lfd < 0 || flock(lfd, LOCK_EX | LOCK_NB) < 0)
                return AB_BOX_CREATING; /* a start is in flight */
        if (faccessat(bfd, "state.json", F_OK, 0) == 0)
                return AB_BOX_STOPPED;
        ab_log(AB_LOG_WARN, "ending processes of an interrupted start", "box", id, NULL);
        ab_cg_kill_all(&n->cg, id, NULL);
        ab_cg_destroy(&n->cg, id, NULL);
        return AB_BOX_STOPPED;
}

/* In a box's own folder on the host it leaves: its move was about to be
 * recorded (n_send_mark). Such a box with no record is a deleted moved box,
 * never one to adopt (ab_box_info.moved_away). */
#define MOVED_AWAY "moved-away"

/* Fills info from the box files; a box whose init died is recorded as stopped. */
static int info_at(native *n, const char *id, ab_box_info *out, ab_err **err)
{
        memset(out, 0, sizeof(*out));
        _cleanup_close_ int bfd =
            openat(n->boxes_fd, id, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        if (bfd < 0)
                return ab_err_set(err, AB_E_NOT_FOUND, 0, "no box with id '%s'", id);
        out->id = xstrdup(id);
        out->backend = "native";
        ab_box_config c;
        ab_err *e = NULL;
        if (ab_box_config_read(bfd, &c, &e) < 0) {
                /* No config yet: create is in progress (or crashed before it). */
                out->status = e->code == AB_E_NOT_FOUND ? AB_BOX_CREATING : AB_BOX_ERROR;
                if (out->status == AB_BOX_ERROR)
                        out->error = xstrdup(e->msg);
                ab_err_free(&e);
                return 0;
        }
        out->moved_away = faccessat(bfd, MOVED_AWAY, F_OK, AT_SYMLINK_NOFOLLOW) == 0;
        out->limits = c.limits;
        out->created_at = c.created_at;
        out->rootfs = c.rootfs ? xstrdup(c.rootfs) : NULL;
        out->image = c.image ? xstrdup(c.image) : NULL;
        ab_box_config_clear(&c);
        ab_box_state st;
        int r = ab_state_read(bfd, &st, err);
        if (r < 0)
                return -1;
        if (r == 1) {
                out->status = reap_orphans(n, bfd, id);
        } else if (st.error) {
                out->status = AB_BOX_ERROR;
                out->error = xstrdup(st.error);
        } else if (ab_init_alive(st.init_pid, st.init_start)) {
                /* A frozen init is alive (it just does not run). The cgroup
                 * is read only when the marker says the box may be frozen, as
                 * on connect: a look at a running box opens no cgroup. */
                out->status = maybe_paused(n, bfd, id) ? AB_BOX_PAUSED : AB_BOX_RUNNING;
                out->init_pid = st.init_pid;
                out->started_at = st.started_at;
        } else {
                /* Its init died (crash, OOM, host reboot): record it as stopped,
                 * unless someone holds the lock (a start/stop in flight). */
                out->status = AB_BOX_STOPPED;
                _cleanup_close_ int lfd = openat(bfd, "lock", O_RDWR | O_CLOEXEC | O_NOFOLLOW);
                if (lfd >= 0 && flock(lfd, LOCK_EX | LOCK_NB) == 0) {
                        ab_box_state again;
                        if (ab_state_read(bfd, &again, NULL) == 0 && !again.error &&
                            !ab_init_alive(again.init_pid, again.init_start)) {
                                ab_state_remove(bfd);
                                if (cg_ready(n)) {
                                        ab_cg_kill_all(&n->cg, id, NULL);
                                        ab_cg_destroy(&n->cg, id, NULL);
                                }
                        }
                        ab_state_clear(&again);
                }
        }
        ab_state_clear(&st);
        return 0;
}

static int n_info(ab_backend *b, const char *id, ab_box_info *out, ab_err **err)
{
        if (ab_id_check(id, err) < 0)
                return -1;
        int r = info_at(N(b), id, out, err);
        if (r < 0)
                ab_box_info_clear(out);
        return r;
}

static int cmp_info(const void *a, const void *b)
{
        return strcmp(((const ab_box_info *)a)->id, ((const ab_box_info *)b)->id);
}

static int n_list(ab_backend *b, ab_box_info **out, size_t *count, ab_err **err)
{
        native *n = N(b);
        int dfd = openat(n->boxes_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
        if (!d) {
                if (dfd >= 0)
                        close(dfd);
                return ab_err_set(err, AB_E_INTERNAL, errno, "read %s", n->boxes);
        }
        size_t cap = 16, len = 0;
        ab_box_info *v = xcalloc(cap, sizeof(*v));
        struct dirent *e;
        while ((e = readdir(d))) {
                if (!ab_id_valid(e->d_name))
                        continue;
                if (len == cap) {
                        cap = xmul(cap, 2);
                        v = xrealloc(v, xmul(cap, sizeof(*v)));
                }
                if (info_at(n, e->d_name, &v[len], NULL) == 0)
                        len++;
                else
                        ab_box_info_clear(&v[len]);
        }
        closedir(d);
        qsort(v, len, sizeof(*v), cmp_info);
        *out = v;
        *count = len;
        return 0;
}

static int n_connect(ab_backend *b, const char *id, ab_err **err)
{
        native *n = N(b);
        if (ab_id_valid(id)) {
                /* Hottest path: a kept session of a box with no pause marker
                 * (one syscall, from the boxes folder, whose entries only the
                 * engine makes; the folder was opened before for this, two
                 * more). A kept session of a frozen box would not answer. */
                int fd = ab_initpool_take(&n->pool, id);
                if (fd >= 0) {
                        char marker[80]; /* an id is at most 63 characters */
                        snprintf(marker, sizeof(marker), "%s/paused", id);
                        int r = faccessat(n->boxes_fd, marker, F_OK, AT_SYMLINK_NOFOLLOW);
                        if ((r < 0 && errno == ENOENT) || (r == 0 && !box_frozen(n, id)))
                                return fd;
                        close(fd);
                }
                /* Hot path: a live init accepts on its socket (a dead one's
                 * socket refuses), so a successful connect needs no records. */
                _cleanup_close_ int bfd =
                    openat(n->boxes_fd, id, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
                if (bfd >= 0) {
                        fd = abc_connect(bfd, "init.sock", NULL);
                        /* A frozen init still accepts (the kernel queues the
                         * connection) but would never answer. */
                        if (fd >= 0 && !maybe_paused(n, bfd, id))
                                return fd;
                        if (fd >= 0)
                                close(fd);
                }
        }
        ab_box_info i;
        if (n_info(b, id, &i, err) < 0)
                return -1;
        ab_box_status s = i.status;
        ab_box_info_clear(&i);
        if (s == AB_BOX_PAUSED)
                return ab_err_set(err, AB_E_CONFLICT, 0, "box '%s' is paused: resume it first", id);
        if (s != AB_BOX_RUNNING)
                return ab_err_set(err, AB_E_CONFLICT, 0, "box '%s' is %s: start it first", id,
                                  ab_box_status_name(s));
        _cleanup_close_ int bfd = openat(n->boxes_fd, id, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (bfd < 0)
                return ab_err_set(err, AB_E_NOT_FOUND, 0, "no box with id '%s'", id);
        return abc_connect(bfd, "init.sock", err);
}

static void n_release(ab_backend *b, const char *id, int fd)
{
        ab_initpool_put(&N(b)->pool, id, fd);
}

static int n_stats(ab_backend *b, const char *id, ab_box_stats *out, ab_err **err)
{
        native *n = N(b);
        ab_box_info i;
        if (n_info(b, id, &i, err) < 0)
                return -1;
        memset(out, 0, sizeof(*out));
        int r = 0;
        if (i.status != AB_BOX_RUNNING && i.status != AB_BOX_PAUSED) {
                r = ab_err_set(err, AB_E_CONFLICT, 0, "box '%s' is %s", id,
                               ab_box_status_name(i.status));
                goto out;
        }
        ab_cg_stats cs;
        if ((r = need_cgroups(n, err)) < 0 || (r = ab_cg_stats_read(&n->cg, id, &cs, err)) < 0)
                goto out;
        out->memory_bytes = cs.memory_bytes;
        out->memory_limit = cs.memory_limit;
        out->pids = cs.pids;
        out->cpu_usage_ns = cs.cpu_usage_ns;
        out->oom_kills = cs.oom_kills;
        /* The disk is mounted only inside the box: look through its init's root. */
        char p[64];
        snprintf(p, sizeof(p), "/proc/%d/root/workspace", (int)i.init_pid);
        struct statfs sf;
        if (statfs(p, &sf) == 0) {
                out->disk_limit_bytes = (uint64_t)sf.f_blocks * (uint64_t)sf.f_bsize;
                out->disk_used_bytes = (uint64_t)(sf.f_blocks - sf.f_bfree) * (uint64_t)sf.f_bsize;
        }
out:
        ab_box_info_clear(&i);
        return r;
}

static int n_disk_alloc(ab_backend *b, const char *id, uint64_t *bytes, ab_err **err)
{
        native *n = N(b);
        *bytes = 0;
        if (!ab_id_valid(id))
                return ab_err_set(err, AB_E_NOT_FOUND, 0, "no box with id '%s'", id);
        char p[AB_ID_MAX + 16];
        snprintf(p, sizeof(p), "%s/disk.img", id);
        struct stat st;
        if (fstatat(n->boxes_fd, p, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return ab_err_set(err, errno == ENOENT ? AB_E_NOT_FOUND : AB_E_INTERNAL, errno,
                                  "disk of box '%s'", id);
        *bytes = (uint64_t)st.st_blocks * 512u;
        return 0;
}

/* The host pid of the running box's init: AB_E_NOT_FOUND for no such box,
 * AB_E_CONFLICT when it is not running or paused. */
static int running_init(native *n, const char *id, pid_t *pid, ab_err **err)
{
        if (!ab_id_valid(id))
                return ab_err_set(err, AB_E_NOT_FOUND, 0, "no box with id '%s'", id);
        _cleanup_close_ int bfd =
            openat(n->boxes_fd, id, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        if (bfd < 0)
                return ab_err_set(err, AB_E_NOT_FOUND, 0, "no box with id '%s'", id);
        ab_box_state st;
        if (ab_state_read(bfd, &st, err) < 0)
                return -1;
        *pid = st.error ? 0 : st.init_pid;
        ab_state_clear(&st);
        if (*pid <= 0)
                return ab_err_set(err, AB_E_CONFLICT, 0, "box '%s' is not running", id);
        if (maybe_paused(n, bfd, id))
                return ab_err_set(err, AB_E_CONFLICT, 0, "box '%s' is paused: resume it first", id);
        return 0;
}

static int n_port_connect(ab_backend *b, const char *id, uint16_t port, int timeout_ms,
                          ab_err **err)
{
        pid_t pid;
        if (running_init(N(b), id, &pid, err) < 0)
                return -1;
        return ab_backend_port_netns(pid, id, port, timeout_ms, err);
}

static int n_connect_unix(ab_backend *b, const char *id, const char *path, ab_err **err)
{
        if (!ab_id_valid(id))
                return ab_err_set(err, AB_E_NOT_FOUND, 0, "no box with id '%s'", id);
        if (!path || path[0] != '/' || strlen(path) >= PATH_MAX)
                return ab_err_set(err, AB_E_INVALID, 0, "connect: a socket path must be absolute");
        pid_t pid;
        if (running_init(N(b), id, &pid, err) < 0)
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
        struct open_how how = {.flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
                               .resolve =
                                   RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
        _cleanup_close_ int dfd =
            (int)syscall(SYS_openat2, rfd, dir[0] ? dir + 1 : ".", &how, sizeof(how));
        if (dfd < 0)
                return ab_err_set(err, AB_E_NOT_FOUND, errno, "box '%s': cannot open %s", id,
                                  dir[0] ? dir : "/");
        if (!*name || strchr(name, '/') || strlen(name) > 64)
                return ab_err_set(err, AB_E_INVALID, 0, "connect: bad socket name in %s", path);
        _cleanup_close_ int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (s < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "socket");
        struct sockaddr_un a = {.sun_family = AF_UNIX};
        snprintf(a.sun_path, sizeof(a.sun_path), "/proc/self/fd/%d/%s", dfd, name);
        if (connect(s, (struct sockaddr *)&a, sizeof(a)) < 0)
                return ab_err_set(err, AB_E_UNAVAILABLE, errno, "box '%s': cannot connect to %s",
                                  id, path);
        return steal_fd(&s);
}

static int n_sub_create(ab_backend *b, const char *id, const char *sub, uint64_t memory_bytes,
                        uint64_t pids, pid_t host_pid, ab_err **err)
{
        native *n = N(b);
        if (need_cgroups(n, err) < 0)
                return -1;
        ab_cg_limits l = {.memory_bytes = memory_bytes, .pids = pids};
        if (ab_cg_sub_create(&n->cg, id, sub, &l, err) < 0)
                return -1;
        if (ab_cg_sub_attach(&n->cg, id, sub, host_pid, err) < 0) {
                ab_cg_sub_destroy(&n->cg, id, sub, NULL);
                return -1;
        }
        return 0;
}

static int n_sub_set_memory(ab_backend *b, const char *id, const char *sub, uint64_t bytes,
                            ab_err **err)
{
        native *n = N(b);
        if (need_cgroups(n, err) < 0)
                return -1;
        return ab_cg_sub_set_memory(&n->cg, id, sub, bytes, err);
}

static int n_sub_end(ab_backend *b, const char *id, const char *sub, uint64_t *oom_kills,
                     ab_err **err)
{
        native *n = N(b);
        if (need_cgroups(n, err) < 0)
                return -1;
        int r = ab_cg_sub_kill(&n->cg, id, sub, err);
        if (oom_kills) {
                ab_cg_stats st;
                *oom_kills = ab_cg_sub_stats(&n->cg, id, sub, &st, NULL) == 0 ? st.oom_kills : 0;
        }
        if (ab_cg_sub_destroy(&n->cg, id, sub, r < 0 ? NULL : err) < 0)
                return -1;
        return r;
}

/* ---- fork and snapshot: copies of a box's disk ---------------------------- */

/* Freezes a running box for a consistent copy of its disk (the pause
 * machinery's freezer) and flushes the disk's filesystem. *thaw says
 * whether the caller thaws it after: a paused box stays paused, a stopped
 * one has nothing to freeze or flush. Caller holds the box's lock. */
static int freeze_for_copy(native *n, int bfd, const char *id, bool *thaw, ab_err **err)
{
        *thaw = false;
        ab_box_state st;
        int r = ab_state_read(bfd, &st, err);
        if (r < 0)
                return -1;
        bool alive = r == 0 && !st.error && ab_init_alive(st.init_pid, st.init_start);
        pid_t pid = st.init_pid;
        ab_state_clear(&st);
        if (!alive)
                return 0;
        if (need_cgroups(n, err) < 0)
                return -1;
        if (!box_frozen(n, id)) {
                if (ab_cg_freeze(&n->cg, id, PAUSE_TIMEOUT_MS, err) < 0)
                        return ab_err_wrap(err, "freezing box %s to copy its disk", id);
                *thaw = true;
        }
        /* The disk is mounted only in the box: reach it through its init. */
        char p[64];
        snprintf(p, sizeof(p), "/proc/%d/root/workspace", (int)pid);
        _cleanup_close_ int fd = open(p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0 || syncfs(fd) < 0) {
                int e = errno;
                if (*thaw)
                        ab_cg_thaw(&n->cg, id, NULL);
                *thaw = false;
                return ab_err_set(err, AB_E_INTERNAL, e, "flushing the disk of box %s", id);
        }
        return 0;
}

/* Copies box bfd's disk.img into dst with the box frozen meanwhile;
 * *frozen_ns (may be NULL) gets how long it was. */
static int copy_disk(native *n, int bfd, const char *id, int dst, bool durable, bool *cloned,
                     uint64_t *frozen_ns, ab_err **err)
{
        _cleanup_close_ int src = openat(bfd, "disk.img", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (src < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "open the disk of box %s", id);
        bool thaw;
        uint64_t t0 = ab_now_ns();
        if (freeze_for_copy(n, bfd, id, &thaw, err) < 0)
                return -1;
        /* the copy need not be on disk before the source goes on */
        int r = ab_disk_clone(src, dst, false, cloned, err);
        if (thaw)
                ab_cg_thaw(&n->cg, id, NULL);
        if (frozen_ns)
                *frozen_ns = ab_now_ns() - t0;
        if (r == 0 && durable && fsync(dst) < 0)
                r = ab_err_set(err, errno == ENOSPC ? AB_E_STORAGE : AB_E_INTERNAL, errno,
                               "cannot sync the copy of the disk");
        return r;
}

static int n_fork(ab_backend *b, const char *src, const ab_box_spec *spec, ab_err **err)
{
        native *n = N(b);
        if (ab_id_check(spec->id, err) < 0 || ab_limits_validate(&spec->limits, err) < 0)
                return -1;
        if (need_cgroups(n, err) < 0)
                return -1;
        _cleanup_close_ int slock = -1;
        _cleanup_close_ int sbfd = lock_box(n, src, &slock, err);
        if (sbfd < 0)
                return -1;
        ab_box_config sc;
        if (ab_box_config_read(sbfd, &sc, err) < 0)
                return ab_err_wrap(err, "box %s", src);
        ab_box_config c = {.limits = spec->limits,
                           .created_at = time(NULL),
                           .rootfs = sc.rootfs,
                           .layers = sc.layers,
                           .image = sc.image,
                           .disk_uid_base = sc.disk_uid_base ? sc.disk_uid_base : sc.uid_base};
        snprintf(c.id, sizeof(c.id), "%s", spec->id);
        if (c.limits.disk_mib < sc.limits.disk_mib)
                c.limits.disk_mib = sc.limits.disk_mib;
        int r = -1;
        char rnd[17], tmp[128];
        ab_id_random(rnd);
        snprintf(tmp, sizeof(tmp), "new.%s.%s", spec->id, rnd);
        _cleanup_close_ int tfd = openat(n->data_fd, "trash", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        _cleanup_close_ int bfd = -1, lockfd = -1, disk = -1;
        if (faccessat(n->boxes_fd, spec->id, F_OK, AT_SYMLINK_NOFOLLOW) == 0) {
                ab_err_set(err, AB_E_CONFLICT, 0, "box '%s' already exists", spec->id);
                goto out;
        }
        if (tfd < 0 || mkdirat(tfd, tmp, 0700) < 0) {
                ab_err_set(err, AB_E_INTERNAL, errno, "create box directory");
                goto out;
        }
        bfd = openat(tfd, tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        lockfd =
            bfd < 0 ? -1 : openat(bfd, "lock", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (lockfd < 0 || flock(lockfd, LOCK_EX) < 0) {
                ab_err_set(err, AB_E_INTERNAL, errno, "lock new box");
                unlinkat(tfd, tmp, AT_REMOVEDIR);
                goto out;
        }
        c.uid_base = 0;
        r = alloc_uid_base(n, spec->id, &c.uid_base, err);
        if (r == 0)
                r = ab_box_config_write(bfd, &c, err);
        if (r == 0 &&
            (disk = openat(bfd, "disk.img", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
                           0600)) < 0)
                r = ab_err_set(err, AB_E_INTERNAL, errno, "create the disk of box %s", spec->id);
        bool cloned = false;
        uint64_t t0 = ab_now_ns(), frozen = 0;
        if (r == 0)
                r = copy_disk(n, sbfd, src, disk, true, &cloned, &frozen, err);
        /* the source is copied: it goes on, whatever happens to the copy */
        close(steal_fd(&slock));
        if (r == 0 && c.limits.disk_mib > sc.limits.disk_mib)
                r = ab_disk_resize(bfd, "disk.img", c.limits.disk_mib, err);
        if (r == 0) {
                char ms[32], fms[32];
                snprintf(ms, sizeof(ms), "%.1f", (double)(ab_now_ns() - t0) / 1e6);
                snprintf(fms, sizeof(fms), "%.1f", (double)frozen / 1e6);
                ab_log(AB_LOG_INFO, "box disk copied", "box", spec->id, "from", src, "how",
                       cloned ? "reflink" : "copy", "ms", ms, "frozen_ms", fms, NULL);
        }
        if (r == 0 && renameat2(tfd, tmp, n->boxes_fd, spec->id, RENAME_NOREPLACE) < 0)
                r = ab_err_set(err, errno == EEXIST ? AB_E_CONFLICT : AB_E_INTERNAL, errno,
                               "publish box %s", spec->id);
        if (r == 0 && start_locked(n, bfd, spec->id, err) < 0) {
                ab_cg_destroy(&n->cg, spec->id, NULL);
                r = -1;
                if (renameat(n->boxes_fd, spec->id, tfd, tmp) < 0)
                        goto out;
        }
        if (r < 0) {
                if (c.uid_base)
                        release_uid_base(n, spec->id, c.uid_base);
                ab_rm_tree_at(tfd, tmp);
        }
out:
        ab_box_config_clear(&sc);
        return r < 0 ? -1 : 0;
}

/* The snapshot's reader: a child in a mount namespace of its own mounts
 * the copy of the disk (img: an fd) and writes the layer tar to out_fd.
 * Its error comes back over a pipe. */
/* Closes every fd from 3 up but the three in keep: a forked child must not
 * hold the server's descriptions (a box's lock fd another thread closes
 * would stay locked until the child exits). */
static void close_all_but(int keep[3])
{
        for (int i = 0; i < 3; i++)
                for (int j = i + 1; j < 3; j++)
                        if (keep[j] < keep[i]) {
                                int t = keep[i];
                                keep[i] = keep[j];
                                keep[j] = t;
                        }
        unsigned lo = 3;
        for (int i = 0; i < 3; i++) {
                if ((unsigned)keep[i] > lo)
                        close_range(lo, (unsigned)keep[i] - 1, 0);
                if ((unsigned)keep[i] + 1 > lo)
                        lo = (unsigned)keep[i] + 1;
        }
        close_range(lo, ~0u, 0);
}

static void snapshot_child(native *n, int img, const ab_box_config *c, int out_fd, int pw)
{
        int keep[3] = {img, out_fd, pw};
        close_all_but(keep);
        ab_err *e = NULL;
        char target[4200];
        snprintf(target, sizeof(target), "%s/trash", n->data);
        _cleanup_close_ int dfd = -1, up = -1, ws = -1;
        _cleanup_free_ char *rec = NULL;
        if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
            mount("snap", target, "tmpfs", MS_NOSUID | MS_NODEV, "mode=700,size=64k") < 0) {
                ab_err_set(&e, AB_E_INTERNAL, errno, "a mount namespace to read the disk");
                goto out;
        }
        snprintf(target + strlen(target), sizeof(target) - strlen(target), "/disk");
        if (mkdir(target, 0700) < 0) {
                ab_err_set(&e, AB_E_INTERNAL, errno, "mkdir %s", target);
                goto out;
        }
        if (ab_disk_mount(img, NULL, target, &e) < 0)
                goto out;
        dfd = open(target, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        up = dfd < 0 ? -1
                     : openat(dfd, "layers/root/upper",
                              O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (up < 0) {
                ab_err_set(&e, AB_E_INTERNAL, errno, "the box's root layer");
                goto out;
        }
        ws = openat(dfd, "workspace", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        /* the owners the disk's files have (a fork not started yet: another range) */
        uid_t base = c->disk_uid_base ? c->disk_uid_base : c->uid_base;
        if (ab_read_file(dfd, ".uid_base", &rec, NULL) == 0)
                base = (uid_t)strtoul(rec, NULL, 10);
        ab_boxfs_export_layer(up, ws, base, out_fd, &e);
out:
        if (e) {
                if (ab_write_all(pw, e->msg, strlen(e->msg)) < 0)
                        _exit(1);
                _exit(e->code == AB_E_STORAGE ? 3 : 1);
        }
        _exit(0);
}

static int n_snapshot(ab_backend *b, const char *id, int out_fd, ab_err **err)
{
        native *n = N(b);
        ab_box_config c;
        _cleanup_close_ int img = -1;
        {
                _cleanup_close_ int lockfd = -1;
                _cleanup_close_ int bfd = lock_box(n, id, &lockfd, err);
                if (bfd < 0)
                        return -1;
                if (ab_box_config_read(bfd, &c, err) < 0)
                        return ab_err_wrap(err, "box %s", id);
                if (!c.layers) {
                        ab_box_config_clear(&c);
                        return ab_err_set(err, AB_E_UNSUPPORTED, 0,
                                          "snapshot needs a box made from an image (box '%s' "
                                          "runs on the host base); fork works for every box",
                                          id);
                }
                /* an unnamed file: nothing to clean up after a crash */
                img = openat(n->data_fd, "trash", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
                bool cloned;
                if (img < 0)
                        ab_err_set(err, AB_E_INTERNAL, errno, "a file for a copy of the disk");
                if (img < 0 || copy_disk(n, bfd, id, img, false, &cloned, NULL, err) < 0) {
                        ab_box_config_clear(&c);
                        return -1;
                }
        }
        int pfd[2];
        if (pipe2(pfd, O_CLOEXEC) < 0) {
                ab_box_config_clear(&c);
                return ab_err_set(err, AB_E_INTERNAL, errno, "pipe");
        }
        pid_t pid = fork();
        if (pid == 0) {
                close(pfd[0]);
                snapshot_child(n, img, &c, out_fd, pfd[1]);
        }
        close(pfd[1]);
        ab_box_config_clear(&c);
        if (pid < 0) {
                close(pfd[0]);
                return ab_err_set(err, AB_E_INTERNAL, errno, "fork");
        }
        char msg[1024];
        ssize_t len = ab_read_full(pfd[0], msg, sizeof(msg) - 1);
        close(pfd[0]);
        msg[len > 0 ? len : 0] = 0;
        int st = 0;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
                ;
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
                return 0;
        return ab_err_set(err, WIFEXITED(st) && WEXITSTATUS(st) == 3 ? AB_E_STORAGE : AB_E_INTERNAL,
                          0, "snapshot of box %s: %s", id, *msg ? msg : "the reader failed");
}

static void n_free(ab_backend *b)
{
        native *n = N(b);
        pthread_mutex_lock(&n->spare_mu);
        n->spare_stop = true;
        pthread_cond_signal(&n->spare_cv);
        bool joined = n->spare_running;
        pthread_mutex_unlock(&n->spare_mu);
        if (joined)
                pthread_join(n->spare_thread, NULL);
        pthread_mutex_destroy(&n->spare_mu);
        pthread_cond_destroy(&n->spare_cv);
        ab_initpool_clear(&n->pool);
        pthread_mutex_destroy(&n->pool.mu);
        if (n->boxes_fd >= 0)
                close(n->boxes_fd);
        if (n->data_fd >= 0)
                close(n->data_fd);
        if (n->cache_fd >= 0)
                close(n->cache_fd);
        if (n->init_fd >= 0)
                close(n->init_fd);
        ab_hide_watch_free(n->hide_watch);
        ab_vols_free(n->vols);
        ab_cg_free(&n->cg);
        ab_bpf_free(&n->bpf);
        pthread_mutex_destroy(&n->lazy);
        free(n->cg_error);
        free(n->data);
        free(n->boxes);
        free(n->skills);
        free(n->init_path);
        free(n->init_given);
        free(n);
}

static const ab_backend_ops native_ops = {
    .name = "native",
    .create = n_create,
    .start = n_start,
    .stop = n_stop,
    .pause = n_pause,
    .resume = n_resume,
    .destroy = n_destroy,
    .info = n_info,
    .list = n_list,
    .connect = n_connect,
    .release = n_release,
    .stats = n_stats,
    .connect_unix = n_connect_unix,
    .port_connect = n_port_connect,
    .disk_alloc = n_disk_alloc,
    .fork = n_fork,
    .snapshot = n_snapshot,
    .free = n_free,
};

/* ---- volumes (native/volume.h) ---- */

/* Every (box, volume) pair of the boxes in boxes/: what uses which volume. */
typedef struct vol_use {
        char box[64];
        char *vol;
} vol_use;

/* ---- moves to another host (backend.h's ab_move_ops, docs/fleet.md) ------ */

/* A copy being received lives in DATA/incoming/ID (lock, config.json,
 * disk.img, and `complete` once verified): never under boxes/, so nothing
 * takes it for a box before the store names this host its owner. */
#define MOVE_COMPLETE "complete"

static int incoming_fd(native *n, ab_err **err)
{
        if (mkdirat(n->data_fd, "incoming", 0700) < 0 && errno != EEXIST)
                return ab_err_set(err, AB_E_INTERNAL, errno, "create %s/incoming", n->data);
        int fd = openat(n->data_fd, "incoming", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "open %s/incoming", n->data);
        return fd;
}

static int n_send_open(ab_backend *b, const char *id, int *lockfd, int *disk, char **config,
                       ab_err **err)
{
        native *n = N(b);
        _cleanup_close_ int lfd = -1;
        _cleanup_close_ int bfd = lock_box(n, id, &lfd, err);
        bool alive = false;
        if (bfd < 0 || init_alive_locked(bfd, &alive, err) < 0)
                return -1;
        if (alive)
                return ab_err_set(err, AB_E_CONFLICT, 0, "box %s is running: stop it first", id);
        ab_box_config c;
        if (ab_box_config_read(bfd, &c, err) < 0)
                return ab_err_wrap(err, "box %s", id);
        size_t mounts = c.n_mounts;
        ab_box_config_clear(&c);
        if (mounts)
                return ab_err_set(err, AB_E_CONFLICT, 0,
                                  "box %s uses named volumes or host folders, which stay on "
                                  "this host: it cannot move",
                                  id);
        _cleanup_free_ char *text = NULL;
        if (ab_read_file(bfd, "config.json", &text, NULL) < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "read the settings of box %s", id);
        int dfd = openat(bfd, "disk.img", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (dfd < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "open the disk of box %s", id);
        *disk = dfd;
        *config = steal_pointer(&text);
        *lockfd = steal_fd(&lfd);
        return 0;
}

static int n_send_mark(ab_backend *b, const char *id, bool away, ab_err **err)
{
        native *n = N(b);
        if (ab_id_check(id, err) < 0)
                return -1;
        _cleanup_close_ int bfd =
            openat(n->boxes_fd, id, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        if (bfd < 0)
                return ab_err_set(err, AB_E_NOT_FOUND, errno, "no box with id '%s'", id);
        if (away) {
                int rc = ab_write_file_atomic(bfd, MOVED_AWAY, "1\n", 2, 0600);
                return rc < 0 ? ab_err_set(err, AB_E_INTERNAL, -rc, "mark box %s as moving", id)
                              : 0;
        }
        if (unlinkat(bfd, MOVED_AWAY, 0) < 0 && errno != ENOENT)
                return ab_err_set(err, AB_E_INTERNAL, errno, "unmark box %s", id);
        fsync(bfd);
        return 0;
}

/* The paths a config names that must exist on this host as folders. */
static int check_paths(const ab_box_config *c, ab_err **err)
{
        struct stat st;
        if (c->rootfs && (stat(c->rootfs, &st) < 0 || !S_ISDIR(st.st_mode)))
                return ab_err_set(err, AB_E_CONFLICT, 0,
                                  "the box's root file system %s is not on this host", c->rootfs);
        for (char **l = c->layers; l && *l; l++)
                if ((*l)[0] != '/' || stat(*l, &st) < 0 || !S_ISDIR(st.st_mode))
                        return ab_err_set(err, AB_E_CONFLICT, 0,
                                          "the box's image %s is not on this host (its layer %s "
                                          "is missing): pull it here first",
                                          c->image ? c->image : "?", *l);
        if (c->n_mounts)
                return ab_err_set(err, AB_E_CONFLICT, 0,
                                  "the box uses named volumes or host folders: it cannot move");
        return 0;
}

/* Locks incoming/ID without waiting: *lfd, and the folder's fd. */
static int lock_staged(int inc, const char *id, int *lfd, ab_err **err)
{
        _cleanup_close_ int sfd = openat(inc, id, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        if (sfd < 0)
                return ab_err_set(err, AB_E_NOT_FOUND, errno, "no copy of box %s is staged", id);
        _cleanup_close_ int l =
            openat(sfd, "lock", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (l < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "lock the copy of box %s", id);
        if (flock(l, LOCK_EX | LOCK_NB) < 0)
                return ab_err_set(err, AB_E_CONFLICT, 0, "a copy of box %s is being received", id);
        *lfd = steal_fd(&l);
        return steal_fd(&sfd);
}

static int n_recv_open(ab_backend *b, const char *id, const char *config, int *lockfd, int *disk,
                       ab_err **err)
{
        native *n = N(b);
        if (ab_id_check(id, err) < 0)
                return -1;
        if (faccessat(n->boxes_fd, id, F_OK, AT_SYMLINK_NOFOLLOW) == 0)
                return ab_err_set(err, AB_E_CONFLICT, 0, "box %s exists on this host already", id);
        _cleanup_close_ int inc = incoming_fd(n, err);
        if (inc < 0)
                return -1;
        /* an older copy nobody receives (a move that failed) gives way */
        _cleanup_close_ int old_l = -1;
        _cleanup_close_ int old = lock_staged(inc, id, &old_l, NULL);
        if (old >= 0)
                ab_rm_tree_at(inc, id);
        else if (faccessat(inc, id, F_OK, AT_SYMLINK_NOFOLLOW) == 0)
                return ab_err_set(err, AB_E_CONFLICT, 0, "a copy of box %s is being received", id);
        if (mkdirat(inc, id, 0700) < 0)
                return ab_err_set(err, errno == EEXIST ? AB_E_CONFLICT : AB_E_INTERNAL, errno,
                                  "stage a copy of box %s", id);
        _cleanup_close_ int l = -1;
        _cleanup_close_ int sfd = lock_staged(inc, id, &l, err);
        if (sfd < 0)
                return -1;
        int r = ab_write_file_atomic(sfd, "config.json", config, strlen(config), 0600);
        ab_box_config c = {0};
        if (r < 0)
                ab_err_set(err, AB_E_INTERNAL, -r, "write the settings of box %s", id);
        else if ((r = ab_box_config_read(sfd, &c, err)) < 0)
                (*err)->code = AB_E_INVALID; /* what the other node sent */
        else {
                if (strcmp(c.id, id) != 0)
                        r = ab_err_set(err, AB_E_INVALID, 0,
                                       "the settings sent are box %s's, not box %s's", c.id, id);
                else
                        r = check_paths(&c, err);
                ab_box_config_clear(&c);
        }
        int d = r < 0 ? -1
                      : openat(sfd, "disk.img", O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                               0600);
        if (r == 0 && d < 0)
                r = ab_err_set(err, AB_E_INTERNAL, errno, "create the disk of box %s", id);
        if (r < 0) {
                ab_rm_tree_at(inc, id);
                return -1;
        }
        *disk = d;
        *lockfd = steal_fd(&l);
        return 0;
}

static int n_recv_complete(ab_backend *b, const char *id, ab_err **err)
{
        native *n = N(b);
        _cleanup_close_ int inc = incoming_fd(n, err);
        _cleanup_close_ int sfd =
            inc < 0 ? -1 : openat(inc, id, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        if (sfd < 0)
                return ab_err_set(err, AB_E_NOT_FOUND, errno, "no copy of box %s is staged", id);
        int r = ab_write_file_atomic(sfd, MOVE_COMPLETE, "1\n", 2, 0600);
        if (r == 0 && fsync(sfd) < 0)
                r = -errno;
        if (r == 0 && fsync(inc) < 0)
                r = -errno;
        return r < 0 ? ab_err_set(err, AB_E_INTERNAL, -r, "record the copy of box %s", id) : 0;
}

/* The staged copy of id, locked (*l): its folder's fd, or -1 with *err
 * (AB_E_NOT_FOUND when none is staged; AB_E_CONFLICT while received). */
static int staged_open(native *n, const char *id, int *inc, int *l, ab_err **err)
{
        if (ab_id_check(id, err) < 0)
                return -1;
        *inc = incoming_fd(n, err);
        if (*inc < 0)
                return -1;
        return lock_staged(*inc, id, l, err);
}

static int n_adopt(ab_backend *b, const char *id, ab_err **err)
{
        native *n = N(b);
        _cleanup_close_ int inc = -1, l = -1;
        ab_err *le = NULL;
        _cleanup_close_ int sfd = staged_open(n, id, &inc, &l, &le);
        if (sfd < 0 && le->code == AB_E_NOT_FOUND &&
            faccessat(n->boxes_fd, id, F_OK, AT_SYMLINK_NOFOLLOW) == 0) {
                ab_err_free(&le);
                return 0; /* adopted already */
        }
        if (sfd < 0) {
                *err = le;
                return -1;
        }
        if (faccessat(sfd, MOVE_COMPLETE, F_OK, AT_SYMLINK_NOFOLLOW) < 0)
                return ab_err_set(err, AB_E_NOT_FOUND, 0,
                                  "the copy of box %s was not received whole", id);
        ab_box_config c;
        if (ab_box_config_read(sfd, &c, err) < 0)
                return ab_err_wrap(err, "the copy of box %s", id);
        /* the disk's files keep the sending host's owners until the first
         * start shifts them (native/rootfs.c reads the disk's own record) */
        if (!c.disk_uid_base)
                c.disk_uid_base = c.uid_base;
        int r = alloc_uid_base(n, id, &c.uid_base, err);
        if (r == 0)
                r = ab_box_config_write(sfd, &c, err);
        if (r == 0 && renameat2(inc, id, n->boxes_fd, id, RENAME_NOREPLACE) < 0)
                r = ab_err_set(err, errno == EEXIST ? AB_E_CONFLICT : AB_E_INTERNAL, errno,
                               "put box %s in place", id);
        if (r < 0)
                release_uid_base(n, id, c.uid_base);
        ab_box_config_clear(&c);
        if (r < 0)
                return -1;
        unlinkat(sfd, MOVE_COMPLETE, 0);
        fsync(n->boxes_fd);
        ab_log(AB_LOG_INFO, "moved box adopted", "box", id, NULL);
        return 0;
}

static int n_drop(ab_backend *b, const char *id, ab_err **err)
{
        native *n = N(b);
        _cleanup_close_ int inc = -1, l = -1;
        ab_err *le = NULL;
        _cleanup_close_ int sfd = staged_open(n, id, &inc, &l, &le);
        if (sfd < 0 && le->code == AB_E_NOT_FOUND && inc >= 0) {
                ab_err_free(&le);
                return 0;
        }
        if (sfd < 0) {
                if (err) /* the sweep passes none */
                        *err = le;
                else
                        ab_err_free(&le);
                return -1;
        }
        int r = ab_rm_tree_at(inc, id);
        return r < 0 ? ab_err_set(err, AB_E_INTERNAL, -r, "remove the copy of box %s", id) : 0;
}

static int n_staged(ab_backend *b, char ***ids, bool **complete, int64_t **age_s, ab_err **err)
{
        native *n = N(b);
        int inc = incoming_fd(n, err);
        DIR *d = inc >= 0 ? fdopendir(inc) : NULL;
        if (!d) {
                if (inc >= 0)
                        close(inc);
                return inc < 0 ? -1 : ab_err_set(err, AB_E_INTERNAL, errno, "list incoming/");
        }
        size_t k = 0, cap = 8;
        char **out = xcalloc(cap + 1, sizeof(char *));
        bool *cmp = xcalloc(cap, sizeof(bool));
        int64_t *age = xcalloc(cap, sizeof(int64_t));
        struct dirent *e;
        while ((e = readdir(d))) {
                if (e->d_name[0] == '.' || ab_id_check(e->d_name, NULL) < 0)
                        continue;
                _cleanup_close_ int l = -1;
                _cleanup_close_ int sfd = lock_staged(dirfd(d), e->d_name, &l, NULL);
                struct stat st;
                if (sfd < 0 || fstat(sfd, &st) < 0)
                        continue;
                if (k == cap) {
                        cap *= 2;
                        out = xrealloc(out, (cap + 1) * sizeof(char *));
                        cmp = xrealloc(cmp, cap * sizeof(bool));
                        age = xrealloc(age, cap * sizeof(int64_t));
                }
                cmp[k] = faccessat(sfd, MOVE_COMPLETE, F_OK, AT_SYMLINK_NOFOLLOW) == 0;
                age[k] = (int64_t)(time(NULL) - st.st_mtime);
                out[k++] = xstrdup(e->d_name);
        }
        closedir(d);
        out[k] = NULL;
        *ids = out;
        *complete = cmp;
        *age_s = age;
        return 0;
}

static const ab_move_ops native_move = {
    .send_open = n_send_open,
    .send_mark = n_send_mark,
    .recv_open = n_recv_open,
    .recv_complete = n_recv_complete,
    .adopt = n_adopt,
    .drop = n_drop,
    .staged = n_staged,
};

static void uses_free(vol_use *u, size_t n)
{
        for (size_t i = 0; i < n; i++)
                free(u[i].vol);
        free(u);
}

static vol_use *volume_uses(native *n, size_t *count)
{
        *count = 0;
        int fd = openat(n->boxes_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        DIR *d = fd < 0 ? NULL : fdopendir(fd);
        if (!d) {
                if (fd >= 0)
                        close(fd);
                return NULL;
        }
        size_t cap = 0;
        vol_use *u = NULL;
        struct dirent *e;
        while ((e = readdir(d))) {
                if (e->d_name[0] == '.' || strlen(e->d_name) > AB_ID_MAX)
                        continue;
                _cleanup_close_ int bfd =
                    openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
                ab_box_config c;
                if (bfd < 0 || ab_box_config_read(bfd, &c, NULL) < 0)
                        continue;
                for (size_t i = 0; i < c.n_mounts; i++) {
                        if (c.mounts[i].kind != AB_MOUNT_VOLUME)
                                continue;
                        if (*count == cap) {
                                cap = cap ? cap * 2 : 16;
                                u = xrealloc(u, cap * sizeof(*u));
                        }
                        memcpy(u[*count].box, e->d_name, strlen(e->d_name) + 1);
                        u[(*count)++].vol = xstrdup(c.mounts[i].source);
                }
                ab_box_config_clear(&c);
        }
        closedir(d);
        return u;
}

/* The boxes of uses that use vol, sorted, without repeats. */
static char **users_of(const vol_use *u, size_t n, const char *vol)
{
        char **out = xcalloc(n + 1, sizeof(char *));
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
                if (!strcmp(u[i].vol, vol))
                        out[k++] = xstrdup(u[i].box);
        qsort(out, k, sizeof(char *), cmp_cstr);
        size_t w = 0;
        for (size_t i = 0; i < k; i++) {
                if (w && !strcmp(out[w - 1], out[i])) {
                        free(out[i]);
                        continue;
                }
                out[w++] = out[i];
        }
        out[w] = NULL;
        return out;
}

static int vol_info(native *n, const char *name, const vol_use *u, size_t nu, ab_volume_info *out,
                    ab_err **err)
{
        memset(out, 0, sizeof(*out));
        ab_vol_rec r;
        if (ab_vol_get(n->vols, name, &r, err) < 0)
                return -1;
        out->name = xstrdup(r.name);
        out->size_mib = r.size_mib;
        out->used_bytes = r.used_bytes;
        out->created_at = r.created_at;
        out->owner = steal_pointer(&r.owner);
        out->boxes = users_of(u, nu, name);
        return 0;
}

static int n_vol_create(ab_backend *b, const char *name, uint64_t size_mib, const char *owner,
                        ab_err **err)
{
        return ab_vol_create(N(b)->vols, name, size_mib, owner, err);
}

static int n_vol_get(ab_backend *b, const char *name, ab_volume_info *out, ab_err **err)
{
        size_t nu;
        vol_use *u = volume_uses(N(b), &nu);
        int r = vol_info(N(b), name, u, nu, out, err);
        uses_free(u, nu);
        return r;
}

static int n_vol_list(ab_backend *b, ab_volume_info **out, size_t *count, ab_err **err)
{
        native *n = N(b);
        _cleanup_strv_ char **names = NULL;
        if (ab_vol_names(n->vols, &names, err) < 0)
                return -1;
        size_t nu, k = 0, len = 0;
        while (names[len])
                len++;
        vol_use *u = volume_uses(n, &nu);
        ab_volume_info *v = xcalloc(len + 1, sizeof(*v));
        for (size_t i = 0; i < len; i++)
                if (vol_info(n, names[i], u, nu, &v[k], NULL) == 0)
                        k++; /* one removed meanwhile is skipped */
        uses_free(u, nu);
        *out = v;
        *count = k;
        return 0;
}

static int n_vol_remove(ab_backend *b, const char *name, ab_err **err)
{
        native *n = N(b);
        _cleanup_close_ int lfd = ab_vol_lock(n->vols, name, err);
        if (lfd < 0)
                return -1;
        size_t nu;
        vol_use *u = volume_uses(n, &nu);
        _cleanup_strv_ char **users = users_of(u, nu, name);
        uses_free(u, nu);
        if (users[0]) {
                ab_buf list = {0};
                for (char **p = users; *p; p++)
                        ab_buf_printf(&list, "%s%s", p == users ? "" : ", ", *p);
                _cleanup_free_ char *l = ab_buf_steal(&list);
                return ab_err_set(err, AB_E_CONFLICT, 0,
                                  "volume '%s' is used by box%s %s: delete %s first", name,
                                  users[1] ? "es" : "", l, users[1] ? "them" : "it");
        }
        return ab_vol_remove_locked(n->vols, name, err);
}

static const ab_volume_ops native_vol = {
    .create = n_vol_create,
    .get = n_vol_get,
    .list = n_vol_list,
    .remove = n_vol_remove,
};

static const ab_subcg_ops native_subcg = {
    .create = n_sub_create,
    .set_memory = n_sub_set_memory,
    .end = n_sub_end,
};

int ab_native_open(const ab_native_opts *opts, ab_backend **out, ab_err **err)
{
        if (geteuid() != 0)
                return ab_err_set(err, AB_E_PERMISSION, 0,
                                  "the native backend needs root (it creates namespaces, cgroups "
                                  "and loop devices): run as root");
        const char *data = opts->data_dir;
        int r = ab_backend_mkdir_p(data, 0700);
        if (r < 0)
                return ab_err_set(err, AB_E_INTERNAL, -r, "cannot create data folder %s", data);
        native *n = xzalloc(sizeof(*n));
        n->base.ops = &native_ops;
        n->base.subcg = &native_subcg;
        n->base.vol = &native_vol;
        n->base.move = &native_move;
        n->boxes_fd = n->data_fd = n->cache_fd = n->init_fd = -1;
        atomic_init(&n->uid_hint, UID_SLOTS);
        pthread_mutex_init(&n->lazy, NULL);
        ab_initpool_init(&n->pool);
        pthread_mutex_init(&n->spare_mu, NULL);
        pthread_cond_init(&n->spare_cv, NULL);
        n->keep_spares = opts->keep_spares;
        n->watch_host = opts->watch_host;
        _cleanup_backend_ ab_backend *guard = &n->base;
        n->data = realpath(data, NULL);
        if (!n->data)
                return ab_err_set(err, AB_E_INTERNAL, errno, "realpath %s", data);
        n->boxes = xasprintf("%s/boxes", n->data);
        n->skills = xasprintf("%s/skills", n->data);
        char *trash = xasprintf("%s/trash", n->data);
        r = 0;
        if (mkdir(n->boxes, 0700) < 0 && errno != EEXIST)
                r = -errno;
        if (!r && mkdir(trash, 0700) < 0 && errno != EEXIST)
                r = -errno;
        free(trash);
        if (r < 0)
                return ab_err_set(err, AB_E_INTERNAL, -r, "cannot set up data folder %s", n->data);
        chmod(n->data, 0700);
        n->data_fd = open(n->data, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        n->boxes_fd = open(n->boxes, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (n->data_fd < 0 || n->boxes_fd < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "open data folder %s", n->data);
        if (mkdirat(n->data_fd, "cache", 0700) < 0 && errno != EEXIST)
                return ab_err_set(err, AB_E_INTERNAL, errno, "create %s/cache", n->data);
        n->cache_fd = openat(n->data_fd, "cache", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (n->cache_fd < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "open %s/cache", n->data);
        if (ab_vols_open(n->data, n->cache_fd, &n->vols, err) < 0)
                return -1;
        n->skills_mib = opts->skills_disk_mib ? opts->skills_disk_mib : AB_SKILLS_DISK_MIB;
        if (!opts->lazy_skills && need_skills(n, err) < 0)
                return -1;
        n->hide[0] = n->data;
        if (opts->lazy_init)
                n->init_given = opts->init_path ? xstrdup(opts->init_path) : NULL;
        else if (!(n->init_path = ab_backend_find_init(opts->init_path, err)))
                return -1;
        if (!opts->no_sweeps) {
                sweep_trash(n);
                sweep_claims(n);
                ab_disk_sweep_cache(n->cache_fd);
        }
        *out = steal_pointer(&guard);
        return 0;
}

/* The host's disk: admission control of new box disks and the full-disk
 * guard (docs/disk.md says why it works this way).
 *
 * Box disks are sparse images: a box of 4 GiB takes only what it holds, so
 * the boxes together may be promised far more than the host has.
 * Admission: a create is refused (AB_E_STORAGE) when the promised-but-unused
 * space - over every box, its disk limit minus what its image holds, plus
 * the new disk - passes disk_overcommit_ratio times the free space above
 * the reserve. The promised sum comes from a scan of the backend's disks,
 * plus what was admitted since: the guard's thread scans again at most every
 * SCAN_NS when boxes changed, and a create scans only when there has been no
 * scan yet or before it would refuse - never as a matter of course, so a
 * create's cost does not grow with the number of boxes.
 *
 * The guard: when a box's ext4 writes into its image and the host's
 * filesystem is full, the loop device fails the write, ext4 aborts its
 * journal and the box's disk turns read-only (with lost writes). So the
 * guard keeps the space running boxes can still write below what the host
 * has: every period it compares the sum of the boxes' free space with the
 * host's free space minus the reserve, and where the boxes could write more,
 * it has each box's init hold a balloon - an unlinked, fallocated file on
 * the box's disk - so that the box's own filesystem answers ENOSPC first.
 * A write in a box lowers both sides alike, so between two rounds the
 * balance holds by itself. Balloons shrink again when space comes back,
 * and die with the box's init. */
#include "core/manager_int.h"

#include <inttypes.h>
#include <stdarg.h>
#include "proto/initclient.h"

#include <sys/statfs.h>
#include <sys/statvfs.h>

#define SCAN_NS      (30ull * 1000 * 1000 * 1000)
#define MIB          (1024ull * 1024)
#define BALLOON_STEP (8 * MIB) /* balloons change by at least this much (or to 0) */

/* What the guard knows of a box's balloon between rounds: the init it asked
 * and the size that init holds (an init outlives a restart of the server:
 * a box seen for the first time, or under a new init, is asked). */
typedef struct known_balloon {
        char *id;
        pid_t pid;
        uint64_t held;
        bool fixed; /* the init has no balloon */
} known_balloon;

typedef struct guard_box {
        char *id, *backend_id;
        uint64_t free;    /* what the box can still write, balloon not counted */
        uint64_t balloon; /* held back now */
        uint64_t target;
        bool fixed; /* its init holds no balloon (an older init): its free space is spoken for */
} guard_box;

struct mgr_disk {
        pthread_mutex_t lock;
        uint64_t promised;   /* of the last scan */
        uint64_t since_scan; /* admitted since */
        uint64_t pending;    /* admitted, disk not made yet */
        uint64_t scan_ns;
        uint64_t scan_gen; /* the store's box generation before the last scan */
        int64_t refused;
        int64_t rounds; /* of the guard */
        uint64_t balloon_bytes;
        int64_t ballooned;
        pthread_t thread;
        bool have_thread;
        pthread_mutex_t round; /* one guard round at a time; guards known */
        known_balloon *known;
        size_t n_known;
        int64_t opened_s; /* inits started later than this hold no balloon we do not know */
        /* What the last round saw, for guard_due (under `round`). */
        uint64_t round_avail; /* the host's space above the reserve */
        uint64_t round_slack; /* round_avail less what the boxes could still write */
        uint64_t round_ns;
};

static void known_free(known_balloon *k, size_t n)
{
        for (size_t i = 0; i < n; i++)
                free(k[i].id);
        free(k);
}

void mgr_disk_init(ab_manager *m)
{
        m->disk = xzalloc(sizeof(*m->disk));
        m->disk->opened_s = (int64_t)time(NULL);
        pthread_mutex_init(&m->disk->lock, NULL);
        pthread_mutex_init(&m->disk->round, NULL);
}

void mgr_disk_free(ab_manager *m)
{
        if (!m->disk)
                return;
        if (m->disk->have_thread)
                pthread_join(m->disk->thread, NULL);
        known_free(m->disk->known, m->disk->n_known);
        pthread_mutex_destroy(&m->disk->lock);
        pthread_mutex_destroy(&m->disk->round);
        free(m->disk);
        m->disk = NULL;
}

/* Free bytes above nothing, and the total, of the disks' filesystem. */
static int host_space(ab_manager *m, uint64_t *free_b, uint64_t *total)
{
        struct statvfs sv;
        if (!m->o.disk_dir || statvfs(m->o.disk_dir, &sv) < 0)
                return -1;
        *free_b = (uint64_t)sv.f_bavail * sv.f_frsize;
        *total = (uint64_t)sv.f_blocks * sv.f_frsize;
        return 0;
}

/* Sum over the backend's boxes of disk limit minus what the image holds. */
static int scan_promised(ab_manager *m, uint64_t *out)
{
        ab_backend *b = m->o.backend;
        ab_box_info *bs = NULL;
        size_t n = 0;
        *out = 0;
        if (b->ops->list(b, &bs, &n, NULL) < 0)
                return -1;
        for (size_t i = 0; i < n; i++) {
                uint64_t alloc = 0, limit = bs[i].limits.disk_mib * MIB;
                if (b->ops->disk_alloc(b, bs[i].id, &alloc, NULL) == 0 && alloc < limit)
                        *out += limit - alloc;
                ab_box_info_clear(&bs[i]);
        }
        free(bs);
        return 0;
}

static bool admission_on(ab_manager *m)
{
        return m->o.disk_dir && m->o.disk_overcommit_ratio > 0 && m->o.backend->ops->disk_alloc;
}

int mgr_disk_admit(ab_manager *m, uint64_t disk_mib, mgr_disk_ticket *t, ab_err **err)
{
        t->bytes = 0;
        if (!admission_on(m))
                return 0;
        uint64_t free_b, total, want = disk_mib * MIB;
        if (host_space(m, &free_b, &total) < 0)
                return 0; /* cannot tell: the create finds out itself */
        struct mgr_disk *d = m->disk;
        pthread_mutex_lock(&d->lock);
        uint64_t now = ab_now_ns();
        uint64_t usable = free_b > m->o.disk_reserve ? free_b - m->o.disk_reserve : 0;
        double allowed = m->o.disk_overcommit_ratio * (double)usable;
        /* Scan when there was none, and before any refusal (boxes deleted
         * since give their promises back; refusals are rare). */
        if (!d->scan_ns || (double)(d->promised + d->since_scan + d->pending + want) > allowed) {
                uint64_t p;
                uint64_t gen = ab_store_box_gen(m->o.store);
                if (scan_promised(m, &p) == 0) {
                        d->promised = p;
                        d->since_scan = 0;
                        d->scan_ns = now;
                        d->scan_gen = gen;
                } else {
                        ab_log(AB_LOG_WARN, "disk admission: cannot list the boxes' disks", NULL);
                }
        }
        uint64_t promised = d->promised + d->since_scan + d->pending;
        if ((double)(promised + want) > allowed) {
                d->refused++;
                pthread_mutex_unlock(&d->lock);
                ab_log(AB_LOG_WARN, "create refused: disk space", NULL);
                return ab_err_set(err, AB_E_STORAGE, 0,
                                  "not enough disk space for a new box of %" PRIu64
                                  " MiB: boxes were promised %" PRIu64
                                  " MiB they do not use yet and the data folder's filesystem "
                                  "has %" PRIu64 " MiB free (%" PRIu64
                                  " MiB of it kept in reserve); this server promises at most %g "
                                  "times the free space (disk_overcommit_ratio): free space on "
                                  "the host, delete boxes, or ask for a smaller disk",
                                  disk_mib, (uint64_t)(promised / MIB), (uint64_t)(free_b / MIB),
                                  (uint64_t)(m->o.disk_reserve / MIB), m->o.disk_overcommit_ratio);
        }
        d->pending += want;
        t->bytes = want;
        pthread_mutex_unlock(&d->lock);
        return 0;
}

void mgr_disk_end(ab_manager *m, mgr_disk_ticket *t)
{
        if (!t->bytes)
                return;
        struct mgr_disk *d = m->disk;
        pthread_mutex_lock(&d->lock);
        d->pending -= t->bytes;
        d->since_scan += t->bytes;
        pthread_mutex_unlock(&d->lock);
        t->bytes = 0;
}

int ab_manager_disk_usage(ab_manager *m, ab_disk_usage *out, ab_err **err)
{
        memset(out, 0, sizeof(*out));
        if (!m->o.disk_dir)
                return ab_err_set(err, AB_E_UNSUPPORTED, 0, "no data folder");
        if (host_space(m, &out->free_bytes, &out->total_bytes) < 0)
                return ab_err_set(err, AB_E_UNAVAILABLE, errno, "statvfs %s", m->o.disk_dir);
        struct mgr_disk *d = m->disk;
        pthread_mutex_lock(&d->lock);
        out->promised_bytes = d->promised + d->since_scan + d->pending;
        out->refused = d->refused;
        out->balloon_bytes = d->balloon_bytes;
        out->boxes_ballooned = d->ballooned;
        out->guard_rounds = d->rounds;
        pthread_mutex_unlock(&d->lock);
        return 0;
}

/* ---- the guard ---- */

/* Asks the box's init to hold a balloon of `want` bytes (UINT64_MAX = keep
 * it as it is) and reads back the balloon and the box's free space. */
static int balloon_set(ab_manager *m, guard_box *g, uint64_t want)
{
        ab_backend *b = m->o.backend;
        _cleanup_close_ int fd = b->ops->connect(b, g->backend_id, NULL);
        if (fd < 0)
                return -1;
        abc_reserve_res res;
        if (abc_reserve(fd, want, &res, NULL) < 0)
                return -1;
        g->balloon = res.held;
        g->free = res.free; /* without the balloon */
        return 0;
}

/* The box's free space without its balloon, cheaply: statfs of its disk
 * through its init's root (no round trip to the init) plus the balloon the
 * guard knows; the init is asked only when the guard does not know it. */
static int box_free(ab_manager *m, guard_box *g, const known_balloon *old, size_t n_old, pid_t *pid)
{
        ab_backend *b = m->o.backend;
        ab_box_info info;
        if (b->ops->info(b, g->backend_id, &info, NULL) < 0)
                return -1;
        *pid = info.init_pid;
        /* Only boxes with a disk of their own (the native backend's): a
         * Docker box's free space is the host's, and a balloon sized from
         * it would take the host's whole disk. */
        bool own_disk = !info.backend || strcmp(info.backend, "native") == 0;
        bool running = info.status == AB_BOX_RUNNING && own_disk;
        bool fresh = info.started_at > m->disk->opened_s;
        ab_box_info_clear(&info);
        if (!running || *pid <= 0)
                return -1;
        char p[64];
        snprintf(p, sizeof(p), "/proc/%d/root/workspace", (int)*pid);
        struct statfs sf;
        for (size_t i = 0; i < n_old; i++) {
                if (strcmp(old[i].id, g->id) || old[i].pid != *pid)
                        continue;
                if (statfs(p, &sf) < 0)
                        break;
                g->balloon = old[i].held;
                g->fixed = old[i].fixed;
                g->free = (uint64_t)sf.f_bavail * (uint64_t)sf.f_bsize + g->balloon;
                return 0;
        }
        /* An init started after this server opened has no balloon but ours:
         * no need to ask it (which would cost it a session). */
        if (!fresh && balloon_set(m, g, UINT64_MAX) == 0)
                return 0;
        if (statfs(p, &sf) < 0)
                return -1;
        g->fixed = !fresh;
        g->balloon = 0;
        g->free = (uint64_t)sf.f_bavail * (uint64_t)sf.f_bsize;
        return 0;
}

/* Water-filling: each box may keep at most `share` free; shares of boxes
 * with less free go to the others. */
static void set_targets(guard_box *gs, size_t n, uint64_t avail)
{
        uint64_t total = 0;
        for (size_t i = 0; i < n; i++)
                total += gs[i].free;
        if (total <= avail) {
                for (size_t i = 0; i < n; i++)
                        gs[i].target = 0;
                return;
        }
        /* find the level L with sum(min(free_i, L)) <= avail */
        uint64_t lo = 0, hi = 0;
        for (size_t i = 0; i < n; i++)
                if (gs[i].free > hi)
                        hi = gs[i].free;
        while (lo < hi) {
                uint64_t mid = lo + (hi - lo + 1) / 2, s = 0;
                for (size_t i = 0; i < n; i++)
                        s += gs[i].free < mid ? gs[i].free : mid;
                if (s <= avail)
                        lo = mid;
                else
                        hi = mid - 1;
        }
        for (size_t i = 0; i < n; i++)
                gs[i].target = gs[i].free > lo ? gs[i].free - lo : 0;
}

void ab_manager_disk_balance(ab_manager *m)
{
        uint64_t free_b, total;
        if (host_space(m, &free_b, &total) < 0)
                return;
        struct mgr_disk *d = m->disk;
        pthread_mutex_lock(&d->round);
        ab_box_filter f = {.provider = m->provider, .status = AB_BOX_RUNNING, .node = m->o.node_id};
        ab_box_rec *rs = NULL;
        size_t n = 0;
        if (ab_store_box_list(m->o.store, &f, &rs, &n, NULL) < 0) {
                pthread_mutex_unlock(&d->round);
                return;
        }
        guard_box *gs = n ? xcalloc(n, sizeof(*gs)) : NULL;
        pid_t *pids = n ? xcalloc(n, sizeof(*pids)) : NULL;
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
                /* (box_free leaves out boxes without a disk of their own) */
                const char *be = mgr_rec_backend(&rs[i]);
                if (be && strcmp(be, "native") != 0)
                        continue;
                guard_box *g = &gs[k];
                g->id = rs[i].id;
                g->backend_id = rs[i].backend_id;
                if (box_free(m, g, d->known, d->n_known, &pids[k]) == 0)
                        k++;
        }
        /* The space boxes can write must fit in what the host has, less the
         * reserve; space a balloon holds is not taken from the host. */
        uint64_t avail = free_b > m->o.disk_reserve ? free_b - m->o.disk_reserve : 0;
        /* Boxes that cannot hold a balloon keep what they have: the others
         * share what is left. They are moved to the end of the array. */
        size_t nb = 0;
        for (size_t i = 0; i < k; i++) {
                if (gs[i].fixed) {
                        avail = avail > gs[i].free ? avail - gs[i].free : 0;
                        continue;
                }
                if (i != nb) {
                        guard_box t = gs[nb];
                        pid_t tp = pids[nb];
                        gs[nb] = gs[i];
                        pids[nb] = pids[i];
                        gs[i] = t;
                        pids[i] = tp;
                }
                nb++;
        }
        uint64_t could_write = 0;
        for (size_t i = 0; i < k; i++)
                could_write += gs[i].free;
        d->round_avail = free_b > m->o.disk_reserve ? free_b - m->o.disk_reserve : 0;
        d->round_slack = d->round_avail > could_write ? d->round_avail - could_write : 0;
        d->round_ns = ab_now_ns();
        set_targets(gs, nb, avail);
        uint64_t held = 0;
        int64_t ballooned = 0;
        known_balloon *kn = k ? xcalloc(k, sizeof(*kn)) : NULL;
        for (size_t i = 0; i < k; i++) {
                guard_box *g = &gs[i];
                uint64_t diff =
                    g->target > g->balloon ? g->target - g->balloon : g->balloon - g->target;
                /* grow at once; shrink in steps worth a round trip, or to 0 */
                if (!g->fixed && diff &&
                    (g->target > g->balloon || diff >= BALLOON_STEP || g->target == 0) &&
                    balloon_set(m, g, g->target) < 0)
                        g->fixed = true; /* its init cannot: leave it be from now on */
                held += g->balloon;
                ballooned += g->balloon > 0;
                kn[i] = (known_balloon){
                    .id = xstrdup(g->id), .pid = pids[i], .held = g->balloon, .fixed = g->fixed};
        }
        known_free(d->known, d->n_known);
        d->known = kn;
        d->n_known = k;
        pthread_mutex_lock(&d->lock);
        if (ballooned && !d->ballooned)
                ab_log(AB_LOG_WARN,
                       "the host's disk is short: boxes see less free space than their limits",
                       NULL);
        d->balloon_bytes = held;
        d->ballooned = ballooned;
        d->rounds++;
        pthread_mutex_unlock(&d->lock);
        free(pids);
        free(gs);
        ab_box_recs_free(rs, n);
        pthread_mutex_unlock(&d->round);
}

/* A round looks at every running box; between rounds the balance holds by
 * itself (a box's write lowers both sides alike), so a round is due only
 * when something may have moved it: the host's free space fell by half the
 * slack the last round left (writes outside the boxes, or writes by boxes
 * started since the round, which it did not count: a box that does not
 * write takes nothing from the host, and once such writes have used half
 * the slack the next round counts the box, with the other half left),
 * balloons are held (the disk is short: every period, as before), or a
 * minute passed. An idle server costs one statvfs a period, and a create
 * does not set off a walk over every box. */
#define GUARD_FULL_NS (60ull * 1000 * 1000 * 1000)
static bool guard_due(ab_manager *m)
{
        struct mgr_disk *d = m->disk;
        uint64_t free_b, total;
        if (host_space(m, &free_b, &total) < 0)
                return true;
        uint64_t avail = free_b > m->o.disk_reserve ? free_b - m->o.disk_reserve : 0;
        pthread_mutex_lock(&d->round);
        bool due = !d->round_ns || ab_now_ns() - d->round_ns > GUARD_FULL_NS ||
                   avail + d->round_slack / 2 < d->round_avail;
        pthread_mutex_unlock(&d->round);
        pthread_mutex_lock(&d->lock);
        due = due || d->ballooned;
        pthread_mutex_unlock(&d->lock);
        return due;
}

/* Admission's promised sum, scanned again in the background (not under a
 * create) when it is older than SCAN_NS and boxes changed since. Creates
 * admitted while the scan ran stay counted (a box may be counted twice for a
 * while: on the safe side). */
static void refresh_promised(ab_manager *m)
{
        if (!admission_on(m))
                return;
        struct mgr_disk *d = m->disk;
        uint64_t gen = ab_store_box_gen(m->o.store), now = ab_now_ns();
        pthread_mutex_lock(&d->lock);
        bool due = d->scan_ns && now - d->scan_ns > SCAN_NS && gen != d->scan_gen;
        uint64_t before = d->since_scan;
        pthread_mutex_unlock(&d->lock);
        uint64_t p;
        if (!due || scan_promised(m, &p) < 0)
                return;
        pthread_mutex_lock(&d->lock);
        d->promised = p;
        d->since_scan = d->since_scan > before ? d->since_scan - before : 0;
        d->scan_ns = now;
        d->scan_gen = gen;
        pthread_mutex_unlock(&d->lock);
}

static void *guard_main(void *arg)
{
        ab_manager *m = arg;
        bool flag = false;
        while (mgr_nap(m, m->o.disk_watch_interval_ms, &flag)) {
                if (guard_due(m))
                        ab_manager_disk_balance(m);
                refresh_promised(m);
        }
        return NULL;
}

void mgr_disk_start(ab_manager *m)
{
        if (!m->o.disk_dir || m->o.disk_watch_interval_ms <= 0)
                return;
        m->disk->have_thread = pthread_create(&m->disk->thread, NULL, guard_main, m) == 0;
}

/* The sandbox manager against an in-memory fake backend and a real SQLite
 * store: acquire by keys, idempotence under threads, pool claims, idle stop,
 * the running-box cap, TTL, asynchronous deletion, pause and resume with the
 * idle and memory-pressure policy, and recovery of every kind of leftover a
 * crash can leave. */
#include "core/manager.h"
#include "tap.h"
#include <openssl/evp.h>

#define ok(c, ...)         tap_ok(!!(c), __VA_ARGS__)
#define is_str(g, w, name) TAP_IS_STR(g, w, name)
#define diag(...)          tap_diag(__VA_ARGS__)
#define bail_out(...)      (printf("Bail out! "), printf(__VA_ARGS__), printf("\n"), exit(1))

#include <pthread.h>
#include <sys/stat.h>
#include <time.h>

/* ---- fake backend ----------------------------------------------------- */

#define MAX_FAKE 64

typedef struct fbox {
        char id[64];
        ab_box_status status;
        bool used;
} fbox;

typedef struct fake {
        ab_backend base;
        pthread_mutex_t lock;
        fbox boxes[MAX_FAKE];
        int creates, starts, stops, destroys, pauses, resumes;
        bool fail_start;
        bool no_freezer;    /* pause answers AB_E_UNSUPPORTED */
        int pause_tries;    /* pauses answered so */
        char stop_log[512]; /* ids stopped, in order, comma-separated */
} fake;

static fake *F(ab_backend *b)
{
        return (fake *)b;
}

static fbox *find(fake *f, const char *id)
{
        for (int i = 0; i < MAX_FAKE; i++)
                if (f->boxes[i].used && !strcmp(f->boxes[i].id, id))
                        return &f->boxes[i];
        return NULL;
}

static int f_create(ab_backend *b, const ab_box_spec *spec, ab_err **err)
{
        fake *f = F(b);
        pthread_mutex_lock(&f->lock);
        int rc = 0;
        if (find(f, spec->id)) {
                rc = ab_err_set(err, AB_E_CONFLICT, 0, "exists");
        } else {
                for (int i = 0; i < MAX_FAKE; i++)
                        if (!f->boxes[i].used) {
                                f->boxes[i].used = true;
                                snprintf(f->boxes[i].id, 64, "%s", spec->id);
                                f->boxes[i].status = AB_BOX_RUNNING;
                                break;
                        }
                f->creates++;
        }
        pthread_mutex_unlock(&f->lock);
        struct timespec ts = {0, 2000000}; /* a create takes time: races get a chance */
        nanosleep(&ts, NULL);
        return rc;
}

static int f_start(ab_backend *b, const char *id, ab_err **err)
{
        fake *f = F(b);
        pthread_mutex_lock(&f->lock);
        fbox *x = find(f, id);
        int rc = 0;
        if (!x)
                rc = ab_err_set(err, AB_E_NOT_FOUND, 0, "no box");
        else if (f->fail_start)
                rc = ab_err_set(err, AB_E_INTERNAL, 0, "start failed on purpose");
        else if (x->status != AB_BOX_RUNNING) {
                x->status = AB_BOX_RUNNING;
                f->starts++;
        }
        pthread_mutex_unlock(&f->lock);
        return rc;
}

static int f_stop(ab_backend *b, const char *id, ab_err **err)
{
        fake *f = F(b);
        pthread_mutex_lock(&f->lock);
        fbox *x = find(f, id);
        int rc = 0;
        if (!x)
                rc = ab_err_set(err, AB_E_NOT_FOUND, 0, "no box");
        else if (x->status == AB_BOX_RUNNING || x->status == AB_BOX_PAUSED) {
                x->status = AB_BOX_STOPPED;
                f->stops++;
                size_t l = strlen(f->stop_log);
                snprintf(f->stop_log + l, sizeof(f->stop_log) - l, "%s%s", l ? "," : "", id);
        }
        pthread_mutex_unlock(&f->lock);
        return rc;
}

/* Pause and resume as the native backend does them: no-ops when already
 * there, AB_E_CONFLICT when the box does not run. */
static int f_pause_resume(ab_backend *b, const char *id, bool pause, ab_err **err)
{
        fake *f = F(b);
        pthread_mutex_lock(&f->lock);
        fbox *x = find(f, id);
        int rc = 0;
        ab_box_status from = pause ? AB_BOX_RUNNING : AB_BOX_PAUSED;
        if (!x)
                rc = ab_err_set(err, AB_E_NOT_FOUND, 0, "no box");
        else if (pause && f->no_freezer && ++f->pause_tries)
                rc = ab_err_set(err, AB_E_UNSUPPORTED, 0, "no freezer here");
        else if (x->status != AB_BOX_RUNNING && x->status != AB_BOX_PAUSED)
                rc = ab_err_set(err, AB_E_CONFLICT, 0, "box '%s' is not running", id);
        else if (x->status == from) {
                x->status = pause ? AB_BOX_PAUSED : AB_BOX_RUNNING;
                (*(pause ? &f->pauses : &f->resumes))++;
        }
        pthread_mutex_unlock(&f->lock);
        return rc;
}

static int f_pause(ab_backend *b, const char *id, ab_err **err)
{
        return f_pause_resume(b, id, true, err);
}

static int f_resume(ab_backend *b, const char *id, ab_err **err)
{
        return f_pause_resume(b, id, false, err);
}

static int f_destroy(ab_backend *b, const char *id, ab_err **err)
{
        fake *f = F(b);
        pthread_mutex_lock(&f->lock);
        fbox *x = find(f, id);
        int rc = 0;
        if (!x)
                rc = ab_err_set(err, AB_E_NOT_FOUND, 0, "no box");
        else {
                x->used = false;
                f->destroys++;
        }
        pthread_mutex_unlock(&f->lock);
        return rc;
}

static int f_info(ab_backend *b, const char *id, ab_box_info *out, ab_err **err)
{
        fake *f = F(b);
        memset(out, 0, sizeof(*out));
        pthread_mutex_lock(&f->lock);
        fbox *x = find(f, id);
        int rc = 0;
        if (!x) {
                rc = ab_err_set(err, AB_E_NOT_FOUND, 0, "no box");
        } else {
                out->id = xstrdup(id);
                out->status = x->status;
                ab_limits_default(&out->limits);
        }
        pthread_mutex_unlock(&f->lock);
        return rc;
}

static int f_list(ab_backend *b, ab_box_info **out, size_t *n, ab_err **err)
{
        fake *f = F(b);
        pthread_mutex_lock(&f->lock);
        *out = xcalloc(MAX_FAKE, sizeof(ab_box_info));
        *n = 0;
        for (int i = 0; i < MAX_FAKE; i++)
                if (f->boxes[i].used) {
                        ab_box_info *o = &(*out)[(*n)++];
                        o->id = xstrdup(f->boxes[i].id);
                        o->status = f->boxes[i].status;
                        ab_limits_default(&o->limits);
                }
        pthread_mutex_unlock(&f->lock);
        return 0;
}

static int f_connect(ab_backend *b, const char *id, ab_err **err)
{
        return ab_err_set(err, AB_E_UNSUPPORTED, 0, "the fake has no init");
}

static int f_stats(ab_backend *b, const char *id, ab_box_stats *out, ab_err **err)
{
        memset(out, 0, sizeof(*out));
        out->memory_limit = 100;
        out->memory_bytes = 95;
        return 0;
}

static void f_free(ab_backend *b)
{
}

static const ab_backend_ops fake_ops = {
    .name = "native",
    .create = f_create,
    .start = f_start,
    .stop = f_stop,
    .pause = f_pause,
    .resume = f_resume,
    .destroy = f_destroy,
    .info = f_info,
    .list = f_list,
    .connect = f_connect,
    .stats = f_stats,
    .free = f_free,
};

static fake FB = {.base = {.ops = &fake_ops}, .lock = PTHREAD_MUTEX_INITIALIZER};

/* ---- helpers ---------------------------------------------------------- */

static char dir[64];
static ab_store *st;
static ab_events *ev;
static ab_metrics *mt;

static char meminfo[96];

/* A manager with idle pause after `pause` s (0 = none) and memory pressure
 * below `pressure` percent (read from the file `meminfo`). */
static ab_manager *open_mgr_p(int64_t idle, int64_t pool, int64_t cap, int64_t pause,
                              double pressure)
{
        ab_manager_opts o = {
            .backend = &FB.base,
            .store = st,
            .events = ev,
            .metrics = mt,
            .idle_stop_s = idle,
            .idle_pause_s = pause,
            .memory_pressure_pct = pressure,
            .meminfo_path = meminfo,
            .pool_size = pool,
            .max_running = cap,
            .reaper_interval_ms = 3600 * 1000, /* tests call ab_manager_reap themselves */
        };
        ab_limits_default(&o.limits);
        ab_manager *m = NULL;
        ab_err *e = NULL;
        if (ab_manager_open(&o, &m, &e) < 0) {
                diag("manager open: %s", e->msg);
                ab_err_free(&e);
        }
        return m;
}

static ab_manager *open_mgr(int64_t idle, int64_t pool, int64_t cap)
{
        return open_mgr_p(idle, pool, cap, 0, 0);
}

static int64_t now_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static const char *status_of_id(const char *id)
{
        static char buf[32];
        ab_box_rec r = {0};
        if (ab_store_box_get(st, "native", id, &r, NULL) < 0)
                return "gone";
        snprintf(buf, sizeof(buf), "%s", ab_box_status_name(r.status));
        ab_box_rec_clear(&r);
        return buf;
}

static bool wait_gone(const char *id)
{
        for (int i = 0; i < 200; i++) {
                if (!strcmp(status_of_id(id), "gone"))
                        return true;
                struct timespec ts = {0, 10000000};
                nanosleep(&ts, NULL);
        }
        return false;
}

/* Makes the box look idle for `ago_s` seconds. */
static void set_idle(const char *id, int64_t ago_s)
{
        ab_box_rec cur = {0};
        if (ab_store_box_get(st, "native", id, &cur, NULL) < 0)
                bail_out("no record %s", id);
        cur.last_active_at = now_ms() - ago_s * 1000;
        ab_store_box_update(st, &cur, NULL);
        ab_box_rec_clear(&cur);
}

static ab_box_status fake_status(const char *id)
{
        pthread_mutex_lock(&FB.lock);
        fbox *x = find(&FB, id);
        ab_box_status s = x ? x->status : 0;
        pthread_mutex_unlock(&FB.lock);
        return s;
}

static void set_meminfo(unsigned long long total_kb, unsigned long long avail_kb)
{
        FILE *f = fopen(meminfo, "w");
        if (!f)
                bail_out("cannot write %s", meminfo);
        fprintf(f, "MemTotal:       %llu kB\nMemFree:        1 kB\nMemAvailable:   %llu kB\n",
                total_kb, avail_kb);
        fclose(f);
}

/* Types of the events published after `after`, comma-separated, for box id. */
static const char *events_of(uint64_t after, const char *id)
{
        static char buf[512];
        buf[0] = 0;
        ab_event_view *v = NULL;
        size_t n = 0;
        bool dropped = false;
        ab_events_wait(ev, after, 256, 0, &v, &n, &dropped);
        for (size_t i = 0; i < n; i++) {
                if (!v[i].box_id || strcmp(v[i].box_id, id))
                        continue;
                size_t l = strlen(buf);
                snprintf(buf + l, sizeof(buf) - l, "%s%s", l ? "," : "", v[i].type);
        }
        ab_event_views_free(v, n);
        return buf;
}

/* The first scheme's id of a string: 16 hex of its sha256. */
static void legacy_key_id_for_test(const char *s, char out[17])
{
        unsigned char md[32];
        unsigned int len = 0;
        EVP_Digest(s, strlen(s), md, &len, EVP_sha256(), NULL);
        for (int i = 0; i < 8; i++)
                snprintf(out + 2 * i, 3, "%02x", md[i]);
}

static ab_box_rec acquire_id(ab_manager *m, const char *id, int64_t idle_pause_s)
{
        ab_acquire_req q = {.id = id, .idle_pause_s = idle_pause_s};
        ab_box_rec r = {0};
        bool created;
        ab_err *e = NULL;
        if (ab_manager_acquire(m, &q, NULL, &r, &created, &e) < 0) {
                diag("acquire %s: %s", id, e->msg);
                ab_err_free(&e);
        }
        return r;
}

/* Pause and resume, by hand and by the idle policy; uses resume; a paused
 * box idles out to stopped; the cap counts paused boxes as cheap; memory
 * pressure stops paused boxes, oldest first; recovery keeps them paused. */
static void test_pause(void)
{
        ab_err *e = NULL;
        ab_box_rec r;
        set_meminfo(1000000, 900000);
        ab_manager *m = open_mgr_p(300, 0, 0, 60, 10);
        ok(m != NULL, "pause: a manager with idle_pause 60 s, idle_stop 300 s");
        /* A clean slate: the boxes of the tests before would count for the cap. */
        ab_box_filter all = {0};
        ab_box_rec *left = NULL;
        size_t nleft = 0;
        ab_manager_list(m, &all, NULL, &left, &nleft, NULL);
        bool clean = true;
        for (size_t i = 0; i < nleft; i++)
                ab_manager_delete(m, left[i].id, NULL, NULL);
        for (size_t i = 0; i < nleft; i++)
                clean &= wait_gone(left[i].id);
        ab_box_recs_free(left, nleft);
        ok(clean, "pause: the boxes of earlier tests are deleted first");
        r = acquire_id(m, "pz1", 0);
        ab_box_rec_clear(&r);

        /* idle pause */
        set_idle("pz1", 30);
        ab_manager_reap(m);
        is_str(status_of_id("pz1"), "running", "idle 30 s (pause at 60 s): still running");
        uint64_t seq = ab_events_last_seq(ev);
        set_idle("pz1", 90);
        int pauses = FB.pauses;
        ab_manager_reap(m);
        is_str(status_of_id("pz1"), "paused", "idle 90 s: paused");
        ok(FB.pauses == pauses + 1 && fake_status("pz1") == AB_BOX_PAUSED,
           "... through the backend");
        is_str(events_of(seq, "pz1"), "box.paused", "... with a box.paused event");
        ab_manager_reap(m);
        ok(FB.pauses == pauses + 1, "reaping again does not pause again");

        /* any use resumes, and counts as activity */
        seq = ab_events_last_seq(ev);
        int resumes = FB.resumes, starts = FB.starts;
        ab_use u;
        ok(ab_manager_use_begin(m, "pz1", NULL, &u, &e) == 0, "use_begin on a paused box");
        ok(FB.resumes == resumes + 1 && FB.starts == starts, "... resumes it (no new start)");
        ok(u.rec.status == AB_BOX_RUNNING, "... the use sees it running");
        is_str(status_of_id("pz1"), "running", "... recorded running");
        is_str(events_of(seq, "pz1"), "box.resumed", "... with a box.resumed event");

        /* an explicit pause waits for uses to end */
        ok(ab_manager_pause(m, "pz1", NULL, &r, &e) < 0 && e && e->code == AB_E_CONFLICT,
           "pause while a use is in flight is a conflict");
        ok(e && strstr(e->msg, "in use"), "... saying the box is in use");
        ab_err_free(&e);
        ab_manager_use_end(m, &u);
        ab_manager_reap(m);
        is_str(status_of_id("pz1"), "running", "used just now: not paused by the reaper");

        /* a use held by a long-lived process (E2B's background commands) is
         * frozen with the box rather than refusing the pause */
        ok(ab_manager_use_begin(m, "pz1", NULL, &u, &e) == 0, "a use to hold");
        ab_manager_use_hold(m, &u);
        ab_manager_use_hold(m, &u);
        ok(ab_manager_pause(m, "pz1", NULL, &r, &e) == 0 && r.status == AB_BOX_PAUSED,
           "pause with only a held use in flight: paused");
        ab_box_rec_clear(&r);
        ab_use u2;
        ok(ab_manager_use_begin(m, "pz1", NULL, &u2, &e) == 0, "another use resumes it");
        ok(ab_manager_pause(m, "pz1", NULL, &r, &e) < 0 && e && e->code == AB_E_CONFLICT,
           "a held use plus one not held: the pause is refused");
        ab_err_free(&e);
        ab_manager_use_end(m, &u2);
        ab_manager_use_end(m, &u);
        ok(ab_manager_resume(m, "pz1", NULL, &r, &e) == 0, "resumed");
        ab_box_rec_clear(&r);

        ok(ab_manager_pause(m, "pz1", NULL, &r, &e) == 0 && r.status == AB_BOX_PAUSED,
           "explicit pause");
        ab_box_rec_clear(&r);
        pauses = FB.pauses;
        ok(ab_manager_pause(m, "pz1", NULL, &r, &e) == 0 && r.status == AB_BOX_PAUSED,
           "pausing a paused box is fine");
        ab_box_rec_clear(&r);
        ok(FB.pauses == pauses, "... and a no-op");
        set_idle("pz1", 200);
        ok(ab_manager_resume(m, "pz1", NULL, &r, &e) == 0 && r.status == AB_BOX_RUNNING,
           "explicit resume");
        ok(r.last_active_at > now_ms() - 10000, "... counts as activity");
        ab_box_rec_clear(&r);
        ok(ab_manager_resume(m, "pz1", NULL, &r, &e) == 0 && r.status == AB_BOX_RUNNING,
           "resuming a running box is fine");
        ab_box_rec_clear(&r);

        /* acquire resumes too */
        ab_manager_pause(m, "pz1", NULL, &r, NULL);
        ab_box_rec_clear(&r);
        r = acquire_id(m, "pz1", 0);
        ok(r.status == AB_BOX_RUNNING && fake_status("pz1") == AB_BOX_RUNNING,
           "acquire of a paused box resumes it");
        ab_box_rec_clear(&r);

        /* a paused box idles out to stopped, from its last activity */
        ab_manager_pause(m, "pz1", NULL, &r, NULL);
        ab_box_rec_clear(&r);
        set_idle("pz1", 400);
        ab_manager_reap(m);
        is_str(status_of_id("pz1"), "stopped",
               "a paused box idle 400 s (idle_stop 300) is stopped");
        ok(fake_status("pz1") == AB_BOX_STOPPED, "... in the backend too");
        ok(ab_manager_resume(m, "pz1", NULL, &r, &e) < 0 && e && e->code == AB_E_CONFLICT,
           "resume of a stopped box is a conflict");
        ab_err_free(&e);
        ok(ab_manager_pause(m, "pz1", NULL, &r, &e) < 0 && e && e->code == AB_E_CONFLICT,
           "pause of a stopped box is a conflict");
        ab_err_free(&e);
        ok(ab_manager_use_begin(m, "pz1", NULL, &u, &e) == 0, "a use starts the stopped box");
        ab_manager_use_end(m, &u);

        /* one door for "resume if paused, start if stopped", decided under
         * the box's lock (the fronts' connect and resume) */
        bool woke = true;
        resumes = FB.resumes;
        starts = FB.starts;
        ok(ab_manager_ensure_running(m, "pz1", NULL, &woke, &r, &e) == 0 && !woke &&
               r.status == AB_BOX_RUNNING && FB.resumes == resumes && FB.starts == starts,
           "ensure_running of a running box: nothing to do");
        ab_box_rec_clear(&r);
        ab_manager_pause(m, "pz1", NULL, &r, NULL);
        ab_box_rec_clear(&r);
        ok(ab_manager_ensure_running(m, "pz1", NULL, &woke, &r, &e) == 0 && woke &&
               r.status == AB_BOX_RUNNING && FB.resumes == resumes + 1 && FB.starts == starts,
           "ensure_running of a paused box resumes it");
        ab_box_rec_clear(&r);
        ab_manager_stop(m, "pz1", NULL, &r, NULL);
        ab_box_rec_clear(&r);
        ok(ab_manager_ensure_running(m, "pz1", NULL, &woke, NULL, &e) == 0 && woke &&
               FB.starts == starts + 1 && fake_status("pz1") == AB_BOX_RUNNING,
           "ensure_running of a stopped box starts it");
        is_str(status_of_id("pz1"), "running", "... recorded running");
        ok(ab_manager_ensure_running(m, "no-such-box", NULL, &woke, NULL, &e) < 0 && e &&
               e->code == AB_E_NOT_FOUND,
           "ensure_running of no box: not found");
        ab_err_free(&e);

        /* per-box settings */
        r = acquire_id(m, "pz-never", -1);
        ab_box_rec_clear(&r);
        r = acquire_id(m, "pz-quick", 10);
        ab_box_rec_clear(&r);
        ok(ab_manager_acquire(m, &(ab_acquire_req){.id = "pz-bad", .idle_pause_s = -2}, NULL, &r,
                              &(bool){false}, &e) < 0 &&
               e && e->code == AB_E_INVALID,
           "idle_pause_s -2 is invalid");
        ab_err_free(&e);
        set_idle("pz-never", 200);
        set_idle("pz-quick", 20);
        ab_manager_reap(m);
        is_str(status_of_id("pz-never"), "running", "idle_pause_s -1: never paused");
        is_str(status_of_id("pz-quick"), "paused", "idle_pause_s 10: paused after 20 s idle");

        /* counts */
        ab_manager_counts c;
        int64_t npaused = -1;
        if (ab_manager_counts_get(m, &c, NULL) == 0) {
                for (size_t i = 0; i < c.n_states; i++)
                        if (!strcmp(c.states[i], "paused"))
                                npaused = c.counts[i];
                ab_manager_counts_clear(&c);
        }
        ok(npaused >= 1, "counts list paused boxes (%lld)", (long long)npaused);

        /* drift: paused or resumed behind the manager's back (the CLI) */
        f_resume(&FB.base, "pz-quick", NULL);
        f_pause(&FB.base, "pz-never", NULL);
        ab_manager_reap(m);
        is_str(status_of_id("pz-quick"), "running", "resumed by someone else: recorded running");
        is_str(status_of_id("pz-never"), "paused", "paused by someone else: recorded paused");
        ab_manager_delete(m, "pz-never", NULL, NULL);
        ab_manager_delete(m, "pz-quick", NULL, NULL);
        ab_manager_delete(m, "pz1", NULL, NULL);
        ok(wait_gone("pz-never") && wait_gone("pz-quick") && wait_gone("pz1"),
           "a paused box is deleted like any other");
        ab_manager_free(m);

        /* the cap: paused boxes do not count, and the least recent box over
         * the cap is paused rather than stopped */
        m = open_mgr_p(300, 0, 2, 60, 10);
        const char *cap[] = {"pc0", "pc1", "pc2"};
        for (int i = 0; i < 3; i++) {
                r = acquire_id(m, cap[i], 0);
                ab_box_rec_clear(&r);
                set_idle(cap[i], 30 - i);
        }
        is_str(status_of_id("pc0"), "paused", "cap 2: the least recently active box is paused");
        ok(fake_status("pc0") == AB_BOX_PAUSED, "... not stopped");
        is_str(status_of_id("pc1"), "running", "the second runs");
        is_str(status_of_id("pc2"), "running", "the newest runs");
        r = acquire_id(m, "pc3", -1);
        ab_box_rec_clear(&r);
        is_str(status_of_id("pc1"), "paused", "a fourth box: the next least recent is paused");
        is_str(status_of_id("pc0"), "paused", "... and the paused one stays paused");
        set_idle("pc3", 100);
        ok(ab_manager_use_begin(m, "pc0", NULL, &u, &e) == 0, "using the oldest paused box");
        ab_manager_use_end(m, &u);
        is_str(status_of_id("pc0"), "running", "... resumes it");
        is_str(status_of_id("pc3"), "stopped",
               "... and the cap then stops the least recent running box that may not pause");

        /* memory pressure: paused boxes are stopped, oldest activity first */
        set_idle("pc1", 50);
        r = acquire_id(m, "pc4", 0);
        ab_box_rec_clear(&r);
        is_str(status_of_id("pc2"), "paused", "a fifth box: the cap pauses the least recent (pc2)");
        ab_manager_pause(m, "pc4", NULL, &r, NULL);
        ab_box_rec_clear(&r);
        set_idle("pc4", 40);
        is_str(status_of_id("pc4"), "paused", "pressure: a second paused box (less idle)");
        ab_manager_reap(m);
        is_str(status_of_id("pc1"), "paused",
               "plenty of memory (90%% available): paused boxes stay");
        FB.stop_log[0] = 0;
        set_meminfo(1000000, 50000);
        ab_manager_reap(m);
        is_str(status_of_id("pc1"), "stopped", "memory short (5%% available): paused boxes stop");
        is_str(status_of_id("pc4"), "stopped", "... all of them while it stays short");
        is_str(FB.stop_log, "pc1,pc4,pc2", "... oldest activity first");
        is_str(status_of_id("pc0"), "running", "... running boxes are left alone");
        set_meminfo(1000000, 900000);
        ab_manager_free(m);

        /* recovery: a restart keeps paused boxes paused */
        r = (ab_box_rec){.provider = "native",
                         .id = "rp-paused",
                         .backend_id = "rp-paused",
                         .status = AB_BOX_PAUSED,
                         .mode = AB_MODE_SESSION,
                         .created_at = now_ms(),
                         .last_active_at = now_ms()};
        ab_store_box_insert(st, &r, NULL);
        ab_box_spec sp = {.id = "rp-paused"};
        f_create(&FB.base, &sp, NULL);
        f_pause(&FB.base, "rp-paused", NULL);
        r.id = r.backend_id = "rp-cli";
        r.status = AB_BOX_RUNNING;
        ab_store_box_insert(st, &r, NULL);
        sp.id = "rp-cli";
        f_create(&FB.base, &sp, NULL);
        f_pause(&FB.base, "rp-cli", NULL);
        sp.id = "rp-adopt";
        f_create(&FB.base, &sp, NULL);
        f_pause(&FB.base, "rp-adopt", NULL);
        resumes = FB.resumes;
        m = open_mgr_p(300, 0, 0, 60, 10);
        is_str(status_of_id("rp-paused"), "paused", "recovery: a paused box stays paused");
        is_str(status_of_id("rp-cli"), "paused",
               "recovery: a box recorded running that is paused is recorded paused");
        is_str(status_of_id("rp-adopt"), "paused", "recovery: an adopted paused box is paused");
        ok(FB.resumes == resumes && fake_status("rp-paused") == AB_BOX_PAUSED,
           "recovery resumes nothing");
        ok(ab_manager_use_begin(m, "rp-paused", NULL, &u, &e) == 0 &&
               fake_status("rp-paused") == AB_BOX_RUNNING,
           "after the restart a use resumes it");
        ab_manager_use_end(m, &u);
        ab_manager_free(m);

        /* A host that cannot pause: idle boxes are stopped as before, and the
         * cap stops too. */
        FB.no_freezer = true;
        m = open_mgr_p(300, 0, 1, 60, 10);
        r = acquire_id(m, "np1", 0);
        ab_box_rec_clear(&r);
        set_idle("np1", 90);
        ab_manager_reap(m);
        is_str(status_of_id("np1"), "running", "no freezer: the idle pause fails, the box runs on");
        ab_manager_reap(m);
        ok(FB.pause_tries == 1 && !strcmp(status_of_id("np1"), "running"),
           "... and it is not tried again every round (%d tries)", FB.pause_tries);
        r = acquire_id(m, "np2", 0);
        ab_box_rec_clear(&r);
        is_str(status_of_id("np1"), "stopped", "no freezer: the cap stops instead of pausing");
        set_idle("np2", 400);
        ab_manager_reap(m);
        is_str(status_of_id("np2"), "stopped", "no freezer: idle stop still works");
        FB.no_freezer = false;
        const char *rp[] = {"rp-paused", "rp-cli", "rp-adopt", "pc0", "pc1",
                            "pc2",       "pc3",    "pc4",      "np1", "np2"};
        bool gone = true;
        for (size_t i = 0; i < AB_ARRAY_LEN(rp); i++)
                ab_manager_delete(m, rp[i], NULL, NULL);
        for (size_t i = 0; i < AB_ARRAY_LEN(rp); i++)
                gone &= wait_gone(rp[i]);
        ok(gone, "pause test boxes deleted");
        ab_manager_free(m);
}

typedef struct race {
        ab_manager *m;
        int created;
        int failed;
        pthread_mutex_t lock;
} race;

static void *racer(void *arg)
{
        race *r = arg;
        ab_acquire_req q = {.app_id = "app", .user_id = "u", .chat_id = "race"};
        ab_box_rec rec;
        bool created;
        ab_err *e = NULL;
        int rc = ab_manager_acquire(r->m, &q, NULL, &rec, &created, &e);
        pthread_mutex_lock(&r->lock);
        if (rc < 0)
                r->failed++;
        else if (created)
                r->created++;
        pthread_mutex_unlock(&r->lock);
        if (rc == 0)
                ab_box_rec_clear(&rec);
        ab_err_free(&e);
        return NULL;
}

/* The door of a user's command that a front runs in a shell it keeps
 * (ab_manager_cmd_record): admitted by the app's exec quota, recorded at
 * its start (audit row, "exec" event), once per command. */
static void test_cmd_record(void)
{
        ab_manager_opts o = {.backend = &FB.base,
                             .store = st,
                             .events = ev,
                             .metrics = mt,
                             .reaper_interval_ms = 3600 * 1000};
        ab_limits_default(&o.limits);
        o.quotas.exec_rate = 0.001; /* one exec, then none for a long while */
        o.quotas.exec_burst = 1;
        ab_manager *m = NULL;
        ab_err *e = NULL;
        if (ab_manager_open(&o, &m, &e) < 0) {
                ok(false, "manager with an exec rate: %s", e->msg);
                ab_err_free(&e);
                return;
        }
        ab_acquire_req q = {.app_id = "mk", .user_id = "u", .chat_id = "c"};
        ab_box_rec r = {0};
        bool created = false;
        ok(ab_manager_acquire(m, &q, "mk", &r, &created, &e) == 0, "a box of app mk");
        ab_use u;
        ok(ab_manager_use_begin(m, r.id, "mk", &u, &e) == 0, "a use of it");
        uint64_t seq = ab_events_last_seq(ev);
        ok(ab_manager_cmd_record(m, &u, "typed into a terminal", "t1", &e) == 0,
           "cmd_record admits the app's one exec");
        ok(ab_manager_cmd_record(m, &u, "and another", "t1", &e) < 0 && e && e->code == AB_E_QUOTA,
           "a second one is over the app's exec rate (AB_E_QUOTA)");
        ab_err_free(&e);
        ab_manager_use_end(m, &u);
        ab_exec_audit *a = NULL;
        size_t n = 0;
        ok(ab_store_audit_list(st, "native", r.id, 5, &a, &n, &e) == 0 && n == 1 &&
               !strcmp(a[0].command, "typed into a terminal") && a[0].exit_code == -1,
           "the admitted command is one audit row (exit_code -1: it runs on)");
        ab_exec_audits_free(a, n);
        const char *evs = events_of(seq, r.id);
        const char *x = strstr(evs, "exec");
        ok(x != NULL && strstr(x + 4, "exec") == NULL,
           "... and one exec event: the refused one is neither");
        ab_err_free(&e);
        ab_box_rec_clear(&r);
        ab_manager_free(m);
}

int main(void)
{
        snprintf(dir, sizeof(dir), "/tmp/ab-mgr-XXXXXX");
        if (!mkdtemp(dir))
                bail_out("mkdtemp");
        ab_err *e = NULL;
        if (ab_store_open(NULL, dir, &st, &e) < 0)
                bail_out("store: %s", e->msg);
        ev = ab_events_new(256);
        mt = ab_metrics_new();
        snprintf(meminfo, sizeof(meminfo), "%s/meminfo", dir);
        set_meminfo(1000000, 900000);

        /* ids */
        char id[17];
        ab_manager_key_id("app1", "u1", "c1", id);
        is_str(id, "483119b62f4bcb95",
               "id = first 16 hex of sha256(\"agentbox-keys-v2,4:app1,2:u1,2:c1,\")");
        char id2[17];
        ab_manager_key_id("app1", "u1", "c2", id2);
        ok(strcmp(id, id2) != 0, "other chat, other id");
        ab_manager_thread_id(NULL, "thread-1", id2);
        is_str(
            id2, "95e95f9852ee6b95",
            "admin thread id = first 16 hex of sha256(\"agentbox-thread-v2-admin,8:thread-1,\")");
        ab_manager_thread_id("app1", "thread-1", id2);
        is_str(id2, "7d1ec025a28367ff",
               "app thread id = first 16 hex of sha256(\"agentbox-thread-v2,4:app1,8:thread-1,\")");
        {
                char a[17], b[17];
                ab_manager_key_id("a", "x-y", "c", a);
                ab_manager_key_id("a-x", "y", "c", b);
                ok(strcmp(a, b) != 0, "(a, x-y, c) and (a-x, y, c) give two ids");
                ab_manager_thread_id("app1", "t", a);
                ab_manager_thread_id("app2", "t", b);
                ok(strcmp(a, b) != 0, "one thread id of two apps gives two ids");
        }

        ab_manager *m = open_mgr(300, 0, 0);
        ok(m != NULL, "manager opens on an empty store");

        /* acquire: create, then the same box */
        ab_acquire_req q = {.app_id = "app1", .user_id = "u1", .chat_id = "c1"};
        ab_box_rec r;
        bool created = false;
        ok(ab_manager_acquire(m, &q, NULL, &r, &created, &e) == 0 && created,
           "first acquire creates");
        is_str(r.id, id, "the box has the derived id");
        ok(r.status == AB_BOX_RUNNING, "and runs");
        ab_box_rec_clear(&r);
        ok(ab_manager_acquire(m, &q, NULL, &r, &created, &e) == 0 && !created,
           "second acquire finds it");
        ab_box_rec_clear(&r);
        ok(FB.creates == 1, "one backend create");

        /* bad input changes nothing */
        ab_acquire_req bad = {.app_id = "app1", .user_id = "u1"};
        ok(ab_manager_acquire(m, &bad, NULL, &r, &created, &e) < 0 && e->code == AB_E_INVALID,
           "missing chat_id is invalid");
        ok(e && strstr(e->msg, "chat_id"), "the message names chat_id");
        ab_err_free(&e);
        ab_acquire_req two = {.id = "x1", .thread_id = "t"};
        ok(ab_manager_acquire(m, &two, NULL, &r, &created, &e) < 0 && e->code == AB_E_INVALID,
           "two kinds of keys are invalid");
        ab_err_free(&e);
        ab_acquire_req pool_id = {.id = "pool-abc"};
        ok(ab_manager_acquire(m, &pool_id, NULL, &r, &created, &e) < 0 && e->code == AB_E_INVALID,
           "pool- ids are reserved");
        ab_err_free(&e);
        ok(FB.creates == 1, "no create for bad input");

        /* scope */
        ab_acquire_req other = {.app_id = "app2", .user_id = "u1", .chat_id = "c1"};
        ok(ab_manager_acquire(m, &other, "app1", &r, &created, &e) < 0 &&
               e->code == AB_E_PERMISSION,
           "a key of app1 cannot acquire for app2");
        ab_err_free(&e);
        ok(ab_manager_get(m, id, "app2", &r, &e) < 0 && e->code == AB_E_NOT_FOUND,
           "a key of app2 does not see app1's box");
        ab_err_free(&e);
        ok(ab_manager_get(m, id, "app1", &r, &e) == 0, "a key of app1 does");
        ab_box_rec_clear(&r);

        /* ids between apps (docs/security.md "Box ids") */
        {
                /* A box the first scheme made: a row at sha256("app1-lu-lc")[:16] */
                ab_acquire_req lk = {.app_id = "app1", .user_id = "lu2", .chat_id = "lc2"};
                char v1[17];
                legacy_key_id_for_test("app1-lu2-lc2", v1);
                ab_acquire_req byid = {.id = v1};
                ok(ab_manager_acquire(m, &byid, NULL, &r, &created, &e) == 0 && created,
                   "a box at the first scheme's id of (app1, lu2, lc2)");
                ab_box_rec_clear(&r);
                ab_box_rec cur0 = {0};
                ab_store_box_get(st, "native", v1, &cur0, NULL);
                cur0.app_id = xstrdup("app1");
                cur0.user_id = xstrdup("lu2");
                cur0.chat_id = xstrdup("lc2");
                ab_store_box_update(st, &cur0, NULL);
                ab_box_rec_clear(&cur0);
                int cr = FB.creates;
                ok(ab_manager_acquire(m, &lk, "app1", &r, &created, &e) == 0 && !created &&
                       !strcmp(r.id, v1),
                   "its keys still acquire it, by its old id");
                ab_box_rec_clear(&r);
                ok(FB.creates == cr, "and make no new box");
                /* another app's keys that led to the same old id get their own box */
                legacy_key_id_for_test("app1-lu3-lc3", v1);
                ab_acquire_req squat = {.id = v1};
                ok(ab_manager_acquire(m, &squat, "app9", &r, &created, &e) < 0 &&
                       e->code == AB_E_INVALID,
                   "an API key cannot make a box at an id of 16 hex digits");
                ab_err_free(&e);
                ok(ab_manager_acquire(m, &squat, NULL, &r, &created, &e) == 0 && created,
                   "the admin can (the row has no keys)");
                ab_box_rec_clear(&r);
                ab_acquire_req k3 = {.app_id = "app1", .user_id = "lu3", .chat_id = "lc3"};
                ok(ab_manager_acquire(m, &k3, "app1", &r, &created, &e) == 0 && created &&
                       strcmp(r.id, v1) != 0 && !strcmp(r.app_id, "app1"),
                   "keys whose old id holds a box of other keys get a new box at the new id");
                ab_box_rec_clear(&r);
                /* a derived id taken by a box of other keys is refused, never handed out */
                char nid[17];
                ab_manager_key_id("app1", "lu4", "lc4", nid);
                ab_acquire_req at = {.id = nid};
                ok(ab_manager_acquire(m, &at, NULL, &r, &created, &e) == 0 && created,
                   "the admin names a box by the id of (app1, lu4, lc4)");
                ab_box_rec_clear(&r);
                ab_acquire_req k4 = {.app_id = "app1", .user_id = "lu4", .chat_id = "lc4"};
                ok(ab_manager_acquire(m, &k4, "app1", &r, &created, &e) < 0 &&
                       e->code == AB_E_CONFLICT,
                   "those keys get a conflict, not the admin's box");
                ab_err_free(&e);
                /* a box of the keys at an id of neither scheme: refused, no loop */
                ab_acquire_req odd = {.id = "odd-id"};
                ok(ab_manager_acquire(m, &odd, NULL, &r, &created, &e) == 0, "a box odd-id");
                ab_box_rec_clear(&r);
                ab_store_box_get(st, "native", "odd-id", &cur0, NULL);
                cur0.app_id = xstrdup("app1");
                cur0.user_id = xstrdup("zu");
                cur0.chat_id = xstrdup("zc");
                ab_store_box_update(st, &cur0, NULL);
                ab_box_rec_clear(&cur0);
                ab_acquire_req kz = {.app_id = "app1", .user_id = "zu", .chat_id = "zc"};
                ok(ab_manager_acquire(m, &kz, "app1", &r, &created, &e) < 0 &&
                       e->code == AB_E_CONFLICT && strstr(e->msg, "another id"),
                   "keys whose box is at another id: a conflict (the store keeps one per keys)");
                ab_err_free(&e);
                /* thread ids are per app */
                ab_acquire_req t = {.thread_id = "shared-thread"};
                ok(ab_manager_acquire(m, &t, "app1", &r, &created, &e) == 0 && created,
                   "app1 makes its thread");
                _cleanup_free_ char *t1 = xstrdup(r.id);
                ab_box_rec_clear(&r);
                ok(ab_manager_acquire(m, &t, "app2", &r, &created, &e) == 0 && created &&
                       strcmp(r.id, t1) != 0 && !strcmp(r.app_id, "app2"),
                   "app2's thread of the same name is another box");
                ab_box_rec_clear(&r);
                /* an old thread box: only its own app reaches it by the thread id */
                legacy_key_id_for_test("old-thread", v1);
                ab_acquire_req ot = {.id = v1};
                ok(ab_manager_acquire(m, &ot, NULL, &r, &created, &e) == 0 && created,
                   "a box at the first scheme's id of thread old-thread");
                ab_box_rec_clear(&r);
                ab_store_box_get(st, "native", v1, &cur0, NULL);
                cur0.app_id = xstrdup("app1");
                cur0.thread_id = xstrdup("old-thread");
                ab_store_box_update(st, &cur0, NULL);
                ab_box_rec_clear(&cur0);
                ab_acquire_req otq = {.thread_id = "old-thread"};
                ok(ab_manager_acquire(m, &otq, "app1", &r, &created, &e) == 0 && !created &&
                       !strcmp(r.id, v1),
                   "app1 still gets its old thread box");
                ab_box_rec_clear(&r);
                ok(ab_manager_acquire(m, &otq, "app2", &r, &created, &e) == 0 && created &&
                       strcmp(r.id, v1) != 0 && !strcmp(r.app_id, "app2"),
                   "app2 gets a box of its own for that thread id");
                ab_box_rec_clear(&r);
                /* the old box goes: its keys get a new box at the new id */
                ok(ab_manager_delete(m, v1, NULL, &e) == 0 && wait_gone(v1),
                   "the old thread box is deleted");
                ab_manager_thread_id("app1", "old-thread", nid);
                ok(ab_manager_acquire(m, &otq, "app1", &r, &created, &e) == 0 && created &&
                       !strcmp(r.id, nid),
                   "then app1's thread id makes a box at the new id");
                ab_box_rec_clear(&r);
        }

        /* a box the CLI made while the server runs is the admin's */
        {
                ab_box_spec cs = {.id = "cli-made"};
                ab_limits_default(&cs.limits);
                ok(FB.base.ops->create(&FB.base, &cs, &e) == 0, "the CLI makes box cli-made");
                ab_acquire_req cq = {.id = "cli-made"};
                ok(ab_manager_acquire(m, &cq, "app1", &r, &created, &e) < 0 &&
                       e->code == AB_E_CONFLICT,
                   "an API key's create by its id does not adopt it");
                ab_err_free(&e);
                ok(ab_manager_get(m, "cli-made", "app1", &r, &e) < 0 && e->code == AB_E_NOT_FOUND,
                   "nor sees it afterwards");
                ab_err_free(&e);
                ok(ab_manager_get(m, "cli-made", NULL, &r, &e) == 0 && !r.app_id,
                   "the admin sees it, a box of no app");
                ab_box_rec_clear(&r);
                ok(find(&FB, "cli-made") != NULL, "the box is still there");
        }

        /* concurrent acquires: one box */
        race rc = {.m = m, .lock = PTHREAD_MUTEX_INITIALIZER};
        pthread_t th[16];
        int creates_before = FB.creates;
        for (int i = 0; i < 16; i++)
                pthread_create(&th[i], NULL, racer, &rc);
        for (int i = 0; i < 16; i++)
                pthread_join(th[i], NULL);
        ok(rc.created == 1 && rc.failed == 0, "16 concurrent acquires: one creates, none fail");
        ok(FB.creates == creates_before + 1, "one backend create for 16 acquires");

        /* a second manager on the same store (another server process) */
        ab_manager *m2 = open_mgr(300, 0, 0);
        ok(m2 && ab_manager_acquire(m2, &q, NULL, &r, &created, &e) == 0 && !created,
           "a second manager finds the box");
        ab_box_rec_clear(&r);
        ab_manager_free(m2);

        /* idle stop */
        ab_box_rec cur = {0};
        ab_store_box_get(st, "native", id, &cur, NULL);
        cur.last_active_at = now_ms() - 400 * 1000;
        ab_store_box_update(st, &cur, NULL);
        ab_box_rec_clear(&cur);
        int stops = FB.stops;
        ab_manager_reap(m);
        is_str(status_of_id(id), "stopped", "a box idle for 400 s (idle_stop 300) is stopped");
        ok(FB.stops == stops + 1, "through the backend");
        ok(ab_manager_acquire(m, &q, NULL, &r, &created, &e) == 0 && !created &&
               r.status == AB_BOX_RUNNING,
           "acquire resumes the stopped box");
        ab_box_rec_clear(&r);
        ab_manager_reap(m);
        is_str(status_of_id(id), "running", "a box just used is not stopped");

        /* a box in use is never idle-stopped */
        ab_use u;
        ok(ab_manager_use_begin(m, id, NULL, &u, &e) == 0, "use begins");
        ab_store_box_get(st, "native", id, &cur, NULL);
        cur.last_active_at = now_ms() - 400 * 1000;
        ab_store_box_update(st, &cur, NULL);
        ab_box_rec_clear(&cur);
        ab_manager_reap(m);
        is_str(status_of_id(id), "running",
               "a box in use is not stopped even when its activity is old");
        ab_manager_use_end(m, &u);
        ab_manager_reap(m);
        is_str(status_of_id(id), "running", "use_end marks activity");

        /* start failure: the box stays stopped with the reason, the caller gets unavailable */
        ab_manager_stop(m, id, NULL, &r, NULL);
        ab_box_rec_clear(&r);
        FB.fail_start = true;
        ok(ab_manager_acquire(m, &q, NULL, &r, &created, &e) < 0 && e->code == AB_E_UNAVAILABLE,
           "a box that cannot start is unavailable");
        ab_err_free(&e);
        FB.fail_start = false;
        is_str(status_of_id(id), "stopped", "and is recorded stopped");

        /* delete: asynchronous, then gone from store and backend */
        ok(ab_manager_delete(m, id, NULL, &e) == 0, "delete returns");
        ok(wait_gone(id), "the record goes");
        ok(find(&FB, id) == NULL, "the backend box goes");
        ok(ab_manager_delete(m, id, NULL, &e) < 0 && e->code == AB_E_NOT_FOUND,
           "deleting it again is not_found");
        ab_err_free(&e);

        /* delete by app */
        for (int i = 0; i < 3; i++) {
                char chat[8];
                snprintf(chat, sizeof(chat), "d%d", i);
                ab_acquire_req d = {.app_id = "del", .user_id = "u", .chat_id = chat};
                ab_manager_acquire(m, &d, NULL, &r, &created, NULL);
                ab_box_rec_clear(&r);
        }
        char **ids = NULL;
        ab_box_filter df = {.app_id = "del"};
        ok(ab_manager_delete_where(m, &df, NULL, &ids, &e) == 0, "delete by app");
        int nids = 0;
        for (char **p = ids; p && *p; p++)
                nids++;
        ok(nids == 3, "three boxes queued");
        bool all = true;
        for (char **p = ids; p && *p; p++)
                all &= wait_gone(*p);
        ok(all, "all three are gone");
        ab_strvfreep(&ids);

        /* the running-box cap */
        ab_manager_free(m);
        m = open_mgr(300, 0, 2);
        char cids[3][17];
        for (int i = 0; i < 3; i++) {
                char chat[8];
                snprintf(chat, sizeof(chat), "cap%d", i);
                ab_acquire_req c = {.app_id = "cap", .user_id = "u", .chat_id = chat};
                ab_manager_acquire(m, &c, NULL, &r, &created, NULL);
                snprintf(cids[i], 17, "%s", r.id);
                ab_box_rec_clear(&r);
                struct timespec ts = {0, 20000000};
                nanosleep(&ts, NULL);
        }
        is_str(status_of_id(cids[0]), "stopped", "cap 2: the least recently active box is stopped");
        is_str(status_of_id(cids[1]), "running", "the second runs");
        is_str(status_of_id(cids[2]), "running", "the newest runs");

        /* TTL */
        ab_acquire_req t = {.id = "ttlbox", .has_ttl = true, .ttl_s = 1};
        ok(ab_manager_acquire(m, &t, NULL, &r, &created, &e) == 0, "a box with ttl_s 1");
        ab_box_rec_clear(&r);
        ab_store_box_get(st, "native", "ttlbox", &cur, NULL);
        cur.created_at -= 5000;
        ab_store_box_update(st, &cur, NULL);
        ab_box_rec_clear(&cur);
        ab_manager_reap(m);
        ok(wait_gone("ttlbox"), "is deleted after its TTL");

        /* set_ttl: from now; "pause" at the end instead of a delete */
        ok(ab_manager_acquire(m, &(ab_acquire_req){.id = "ttl2"}, NULL, &r, &created, &e) == 0,
           "a box without a TTL");
        ab_box_rec_clear(&r);
        ab_store_box_get(st, "native", "ttl2", &cur, NULL);
        cur.created_at -= 100000;
        ab_store_box_update(st, &cur, NULL);
        ab_box_rec_clear(&cur);
        ok(ab_manager_set_ttl(m, "ttl2", NULL, 60, "pause", &r, &e) == 0 && r.ttl_s >= 160 &&
               r.ttl_s <= 162,
           "set_ttl 60 on a box 100 s old: ttl_s is its age + 60");
        is_str(json_string_value(json_object_get(r.spec, "ttl_action")), "pause",
               "... and spec.ttl_action pause");
        ab_box_rec_clear(&r);
        ok(ab_manager_set_ttl(m, "ttl2", NULL, 1, "sometimes", &r, &e) < 0 && e &&
               e->code == AB_E_INVALID,
           "set_ttl with an unknown action: invalid");
        ab_err_free(&e);
        ok(ab_manager_set_ttl(m, "nosuchbox", NULL, 1, NULL, &r, &e) < 0 && e &&
               e->code == AB_E_NOT_FOUND,
           "set_ttl of an unknown box: not found");
        ab_err_free(&e);
        ab_store_box_get(st, "native", "ttl2", &cur, NULL);
        cur.created_at -= 100000;
        ab_store_box_update(st, &cur, NULL);
        ab_box_rec_clear(&cur);
        ab_manager_reap(m);
        is_str(status_of_id("ttl2"), "paused", "at its TTL a box with ttl_action pause is paused");
        ab_store_box_get(st, "native", "ttl2", &cur, NULL);
        ok(cur.ttl_s == 0, "... and its TTL cleared");
        ab_box_rec_clear(&cur);
        ab_manager_reap(m);
        is_str(status_of_id("ttl2"), "paused", "... not deleted by the next round");
        ok(ab_manager_set_ttl(m, "ttl2", NULL, 0, "delete", &r, &e) == 0 && r.ttl_s == 0 &&
               !json_object_get(r.spec, "ttl_action"),
           "set_ttl 0 delete: no TTL, the action cleared");
        ab_box_rec_clear(&r);
        ab_manager_delete(m, "ttl2", NULL, NULL);
        ok(wait_gone("ttl2"), "deleted");

        /* the warm pool */
        ab_manager_free(m);
        m = open_mgr(300, 2, 0);
        bool filled = false;
        for (int i = 0; i < 300 && !filled; i++) {
                ab_manager_counts c;
                ab_manager_counts_get(m, &c, NULL);
                filled = c.pool_size == 2;
                ab_manager_counts_clear(&c);
                struct timespec ts = {0, 10000000};
                nanosleep(&ts, NULL);
        }
        ok(filled, "the pool fills to 2");
        ab_acquire_req p = {.thread_id = "pooled"};
        ok(ab_manager_acquire(m, &p, NULL, &r, &created, &e) == 0 && created,
           "acquire from the pool");
        ok(r.backend_id && !strncmp(r.backend_id, "pool-", 5), "the box is a pool box");
        ok(strcmp(r.id, r.backend_id) != 0, "with its own public id");
        ab_box_rec_clear(&r);
        ab_limits big;
        ab_limits_default(&big);
        big.memory_mib = 2048;
        ab_acquire_req p2 = {.thread_id = "not-pooled", .limits = &big};
        ok(ab_manager_acquire(m, &p2, NULL, &r, &created, &e) == 0 && created &&
               !strncmp(r.backend_id, r.id, 16),
           "other limits: a new box, not a pool box");
        ab_box_rec_clear(&r);
        ab_box_filter lf = {0};
        ab_box_rec *rs = NULL;
        size_t n = 0;
        ab_manager_list(m, &lf, NULL, &rs, &n, NULL);
        bool pool_listed = false;
        for (size_t i = 0; i < n; i++)
                pool_listed |= rs[i].mode == AB_MODE_POOL;
        ok(!pool_listed, "pool boxes are not listed");
        ab_box_recs_free(rs, n);
        ab_manager_free(m);

        test_pause();

        /* recovery: leftovers of a crash */
        ab_box_rec stale = {
            .provider = "native",
            .id = "stale",
            .backend_id = "stale",
            .status = AB_BOX_CREATING,
            .mode = AB_MODE_SESSION,
            .created_at = now_ms() - 600 * 1000,
        };
        ab_store_box_insert(st, &stale, NULL);
        ab_box_rec fresh = stale;
        fresh.id = fresh.backend_id = "fresh";
        fresh.created_at = now_ms();
        ab_store_box_insert(st, &fresh, NULL);
        /* a fresh "creating" row whose creator process is gone (same boot) */
        char boot[64] = "", spec[256];
        FILE *bf = fopen("/proc/sys/kernel/random/boot_id", "r");
        if (bf) {
                if (!fgets(boot, sizeof(boot), bf))
                        boot[0] = 0;
                fclose(bf);
        }
        boot[strcspn(boot, "\n")] = 0;
        snprintf(spec, sizeof(spec), "{\"creator\":\"%s:%d:1\"}", boot, 4194300);
        ab_box_rec orphan = fresh;
        orphan.id = orphan.backend_id = "orphan";
        orphan.spec = json_loads(spec, 0, NULL);
        ab_store_box_insert(st, &orphan, NULL);
        json_decref(orphan.spec);
        ab_box_rec lying = stale;
        lying.id = lying.backend_id = "lying";
        lying.status = AB_BOX_RUNNING;
        ab_store_box_insert(st, &lying, NULL);
        ab_box_spec sp = {.id = "lying"};
        f_create(&FB.base, &sp, NULL);
        f_stop(&FB.base, "lying", NULL);
        ab_box_rec lost = stale;
        lost.id = lost.backend_id = "lost";
        lost.status = AB_BOX_STOPPED;
        ab_store_box_insert(st, &lost, NULL);
        ab_box_rec dying = stale;
        dying.id = dying.backend_id = "dying";
        dying.status = AB_BOX_DELETING;
        ab_store_box_insert(st, &dying, NULL);
        sp.id = "dying";
        f_create(&FB.base, &sp, NULL);
        sp.id = "pool-orphan";
        f_create(&FB.base, &sp, NULL);
        sp.id = "cli-made";
        f_create(&FB.base, &sp, NULL);
        m = open_mgr(300, 0, 0);
        is_str(status_of_id("stale"), "gone", "a create that never finished is dropped");
        is_str(status_of_id("orphan"), "gone",
               "a fresh create whose creator process is gone is dropped at once");
        is_str(status_of_id("fresh"), "creating",
               "a create that may be in progress elsewhere is left");
        is_str(status_of_id("lying"), "stopped",
               "a box recorded running whose init died is stopped");
        is_str(status_of_id("lost"), "error",
               "a record whose box is gone is an error, not silence");
        ok(wait_gone("dying") && !find(&FB, "dying"), "a pending deletion is finished");
        ok(!find(&FB, "pool-orphan"), "a pool box no record knows is destroyed");
        is_str(status_of_id("cli-made"), "running", "a box made outside the server is adopted");

        /* system boxes: the manager's own, never in the store */
        ab_sysbox_spec sys = {.id = "sys-test"};
        ab_limits_default(&sys.limits);
        ab_sysbox_spec bad_sys = {.id = "runner"};
        ok(ab_manager_sys_use_begin(m, &bad_sys, &u, &e) < 0 && e->code == AB_E_INVALID,
           "a system box id must start with sys-");
        ab_err_free(&e);
        int creates = FB.creates;
        ok(ab_manager_sys_use_begin(m, &sys, &u, &e) == 0, "a system box use begins");
        ok(FB.creates == creates + 1 && find(&FB, "sys-test") &&
               find(&FB, "sys-test")->status == AB_BOX_RUNNING,
           "the system box is made on first use and runs");
        ok(u.rec.mode == AB_MODE_SYSTEM && u.rec.status == AB_BOX_RUNNING,
           "its use has a system record");
        ab_manager_counts mc;
        ab_manager_counts_get(m, &mc, NULL);
        ok(mc.execs_in_flight == 0, "a system use is not counted as an exec in flight");
        ab_manager_counts_clear(&mc);
        ab_manager_use_end(m, &u);
        is_str(status_of_id("sys-test"), "gone", "it has no store record, even after a use");
        ok(ab_manager_get(m, "sys-test", NULL, &r, &e) < 0 && e->code == AB_E_NOT_FOUND,
           "the API cannot get it");
        ab_err_free(&e);
        ab_manager_list(m, &lf, NULL, &rs, &n, NULL);
        bool sys_listed = false;
        for (size_t i = 0; i < n; i++)
                sys_listed |= !strcmp(rs[i].id, "sys-test");
        ab_box_recs_free(rs, n);
        ok(!sys_listed, "nor list it");
        f_stop(&FB.base, "sys-test", NULL);
        int starts = FB.starts;
        ok(ab_manager_sys_use_begin(m, &sys, &u, &e) == 0 && FB.starts == starts + 1,
           "a stopped system box is started by its next use");
        ab_manager_use_end(m, &u);
        find(&FB, "sys-test")->status = AB_BOX_CREATING; /* a create cut short by a crash */
        int destroys = FB.destroys;
        creates = FB.creates;
        ok(ab_manager_sys_use_begin(m, &sys, &u, &e) == 0 && FB.destroys == destroys + 1 &&
               FB.creates == creates + 1 && find(&FB, "sys-test")->status == AB_BOX_RUNNING,
           "a half-made system box is made again");
        ab_manager_use_end(m, &u);
        ab_manager_reap(m);
        ok(find(&FB, "sys-test") && find(&FB, "sys-test")->status == AB_BOX_RUNNING,
           "the reaper leaves it alone");
        ab_manager_free(m);
        m = open_mgr(300, 0, 0);
        ok(find(&FB, "sys-test") && find(&FB, "sys-test")->status == AB_BOX_RUNNING,
           "recovery keeps it");
        is_str(status_of_id("sys-test"), "gone", "and does not adopt it as a user's box");
        ab_manager_free(m);

        test_cmd_record();

        ab_metrics_free(mt);
        ab_events_free(ev);
        ab_store_close(st);
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
        if (system(cmd) != 0)
                diag("cannot remove %s", dir);
        return tap_done();
}

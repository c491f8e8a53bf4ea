/* Unit tests: the event bus numbers events in order, keeps the newest in its
 * ring (and says when a subscriber fell behind), times out, wakes waiters on
 * emit and on shutdown, and loses nothing under many producers. */
#include "base/events.h"
#include "base/util.h"
#include "tap.h"

#include <errno.h>
#include <pthread.h>

static void test_order(void)
{
        ab_events *ev = ab_events_new(8);
        TAP_IS_INT(ab_events_last_seq(ev), 0, "a new bus has seq 0");
        TAP_IS_INT(ab_events_emit(ev, "box.created", "b1", "app1", NULL), 1, "first seq is 1");
        TAP_IS_INT(ab_events_emit(ev, "box.started", "b1", "app1", NULL), 2, "second seq is 2");
        TAP_IS_INT(ab_events_emit(ev, "alert", NULL, NULL, json_pack("{s:i}", "pct", 91)), 3,
                   "third seq is 3");
        TAP_IS_INT(ab_events_last_seq(ev), 3, "last_seq");

        ab_event_view *v = NULL;
        size_t n = 0;
        bool dropped = true;
        TAP_IS_INT(ab_events_wait(ev, 0, 10, 0, &v, &n, &dropped), 0, "wait returns 0");
        TAP_IS_INT(n, 3, "three events after 0");
        tap_ok(!dropped, "nothing dropped");
        tap_ok(n == 3 && v[0].seq == 1 && v[1].seq == 2 && v[2].seq == 3, "oldest first");
        TAP_IS_STR(n == 3 ? v[1].type : NULL, "box.started", "type copied");
        TAP_IS_STR(n == 3 ? v[0].box_id : NULL, "b1", "box_id copied");
        TAP_IS_STR(n == 3 ? v[0].app_id : NULL, "app1", "app_id copied");
        tap_ok(n == 3 && v[2].box_id == NULL && v[2].app_id == NULL, "NULL ids stay NULL");
        ab_event_views_free(v, n);

        TAP_IS_INT(ab_events_wait(ev, 1, 1, 0, &v, &n, &dropped), 0, "wait after 1, max 1");
        tap_ok(n == 1 && v[0].seq == 2, "max honoured and starts after `after`");
        ab_event_views_free(v, n);

        /* The JSON shape, parsed back. */
        TAP_IS_INT(ab_events_wait(ev, 2, 10, 0, &v, &n, &dropped), 0, "wait after 2");
        json_error_t je;
        json_t *j = n == 1 ? json_loads(v[0].json, 0, &je) : NULL;
        tap_ok(j && json_is_object(j), "event JSON parses");
        tap_ok(n == 1 && !strchr(v[0].json, '\n'), "event JSON is one line");
        TAP_IS_INT(json_integer_value(json_object_get(j, "seq")), 3, "json seq");
        TAP_IS_STR(json_string_value(json_object_get(j, "type")), "alert", "json type");
        tap_ok(json_is_null(json_object_get(j, "box_id")) &&
                   json_is_null(json_object_get(j, "app_id")),
               "json box_id and app_id are null");
        TAP_IS_INT(json_integer_value(json_object_get(json_object_get(j, "data"), "pct")), 91,
                   "json data kept");
        int64_t t = json_integer_value(json_object_get(j, "time"));
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        int64_t now_ms = (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
        tap_ok(t > now_ms - 10000 && t <= now_ms, "json time is unix ms (%lld vs %lld)",
               (long long)t, (long long)now_ms);
        json_decref(j);
        ab_event_views_free(v, n);

        /* NULL data becomes {} and ids appear as strings. */
        ab_events_emit(ev, "exec", "b2", "app2", NULL);
        TAP_IS_INT(ab_events_wait(ev, 3, 10, 0, &v, &n, &dropped), 0, "wait after 3");
        j = n == 1 ? json_loads(v[0].json, 0, &je) : NULL;
        tap_ok(j && json_is_object(json_object_get(j, "data")) &&
                   json_object_size(json_object_get(j, "data")) == 0,
               "NULL data is {}");
        TAP_IS_STR(json_string_value(json_object_get(j, "box_id")), "b2", "json box_id");
        TAP_IS_STR(json_string_value(json_object_get(j, "app_id")), "app2", "json app_id");
        json_decref(j);
        ab_event_views_free(v, n);
        ab_events_free(ev);
}

static void test_overflow(void)
{
        ab_events *ev = ab_events_new(4);
        for (int i = 0; i < 10; i++)
                ab_events_emit(ev, "exec", NULL, NULL, json_pack("{s:i}", "i", i));
        ab_event_view *v = NULL;
        size_t n = 0;
        bool dropped = false;
        TAP_IS_INT(ab_events_wait(ev, 2, 100, 0, &v, &n, &dropped), 0, "wait behind the ring");
        tap_ok(dropped, "falling behind sets dropped");
        TAP_IS_INT(n, 4, "only the ring's 4 events");
        tap_ok(n == 4 && v[0].seq == 7 && v[3].seq == 10, "the newest 4 (7..10)");
        ab_event_views_free(v, n);
        TAP_IS_INT(ab_events_wait(ev, 6, 100, 0, &v, &n, &dropped), 0, "wait at the ring edge");
        tap_ok(!dropped && n == 4, "exactly at the oldest: not dropped");
        ab_event_views_free(v, n);
        ab_events_free(ev);
}

static void test_timeout(void)
{
        ab_events *ev = ab_events_new(4);
        ab_events_emit(ev, "x", NULL, NULL, NULL);
        ab_event_view *v = (ab_event_view *)1;
        size_t n = 99;
        bool dropped = true;
        uint64_t t0 = ab_now_ms();
        TAP_IS_INT(ab_events_wait(ev, 1, 10, 300, &v, &n, &dropped), 0, "timed wait returns 0");
        uint64_t dt = ab_now_ms() - t0;
        TAP_IS_INT(n, 0, "no events after a timeout");
        tap_ok(v == NULL && !dropped, "out cleared");
        tap_ok(dt >= 290 && dt < 2000, "waited about the timeout (%llu ms)",
               (unsigned long long)dt);
        t0 = ab_now_ms();
        TAP_IS_INT(ab_events_wait(ev, 1, 10, 0, &v, &n, &dropped), 0, "timeout 0");
        tap_ok(n == 0 && ab_now_ms() - t0 < 100, "timeout 0 does not wait");
        ab_events_free(ev);
}

typedef struct waiter {
        ab_events *ev;
        uint64_t after;
        int timeout_ms;
        int rc;
        size_t n;
        uint64_t first_seq;
        uint64_t waited_ms;
} waiter;

static void *wait_thread(void *arg)
{
        waiter *w = arg;
        ab_event_view *v = NULL;
        bool dropped;
        uint64_t t0 = ab_now_ms();
        w->rc = ab_events_wait(w->ev, w->after, 10, w->timeout_ms, &v, &w->n, &dropped);
        w->waited_ms = ab_now_ms() - t0;
        w->first_seq = w->n ? v[0].seq : 0;
        ab_event_views_free(v, w->n);
        return NULL;
}

static void test_wakeups(void)
{
        ab_events *ev = ab_events_new(16);
        waiter w = {.ev = ev, .after = 0, .timeout_ms = 10000};
        pthread_t th;
        pthread_create(&th, NULL, wait_thread, &w);
        usleep(150 * 1000);
        ab_events_emit(ev, "box.created", "b", NULL, NULL);
        pthread_join(th, NULL);
        TAP_IS_INT(w.rc, 0, "woken waiter returns 0");
        tap_ok(w.n == 1 && w.first_seq == 1, "woken waiter got the event");
        tap_ok(w.waited_ms >= 100 && w.waited_ms < 5000, "woken by emit, not by the timeout (%llu)",
               (unsigned long long)w.waited_ms);

        /* Forever-waiters are released by shutdown. */
        waiter ws[3];
        pthread_t ths[3];
        for (int i = 0; i < 3; i++) {
                ws[i] = (waiter){.ev = ev, .after = 1, .timeout_ms = -1};
                pthread_create(&ths[i], NULL, wait_thread, &ws[i]);
        }
        usleep(150 * 1000);
        ab_events_shutdown(ev);
        for (int i = 0; i < 3; i++)
                pthread_join(ths[i], NULL);
        tap_ok(ws[0].rc == -ESHUTDOWN && ws[1].rc == -ESHUTDOWN && ws[2].rc == -ESHUTDOWN,
               "shutdown wakes every waiter with -ESHUTDOWN");
        tap_ok(ws[0].n == 0 && ws[1].n == 0 && ws[2].n == 0, "and they got nothing");
        ab_event_view *v;
        size_t n;
        bool dropped;
        TAP_IS_INT(ab_events_wait(ev, 0, 10, 1000, &v, &n, &dropped), -ESHUTDOWN,
                   "a wait after shutdown fails at once");
        ab_events_free(ev);

        /* ab_events_free itself releases a waiter before freeing. */
        ev = ab_events_new(4);
        w = (waiter){.ev = ev, .after = 0, .timeout_ms = -1};
        pthread_create(&th, NULL, wait_thread, &w);
        usleep(200 * 1000); /* let it block inside wait: the API has no way to tell */
        ab_events_free(ev);
        pthread_join(th, NULL);
        TAP_IS_INT(w.rc, -ESHUTDOWN, "free wakes a waiter");
}

#define PRODUCERS 8
#define PER       2000

static void *produce(void *arg)
{
        ab_events *ev = arg;
        for (int i = 0; i < PER; i++)
                ab_events_emit(ev, "exec", NULL, NULL, NULL);
        return NULL;
}

typedef struct consumer {
        ab_events *ev;
        size_t got;
        bool ordered, dropped;
} consumer;

static void *consume(void *arg)
{
        consumer *c = arg;
        uint64_t last = 0;
        c->ordered = true;
        while (last < (uint64_t)PRODUCERS * PER) {
                ab_event_view *v;
                size_t n;
                bool dropped;
                if (ab_events_wait(c->ev, last, 64, 5000, &v, &n, &dropped) < 0 || n == 0)
                        break;
                c->dropped |= dropped;
                for (size_t i = 0; i < n; i++) {
                        if (v[i].seq != last + 1)
                                c->ordered = false;
                        last = v[i].seq;
                        c->got++;
                }
                ab_event_views_free(v, n);
        }
        return NULL;
}

static void test_concurrency(void)
{
        /* A ring big enough to hold everything: no drops, every seq exactly once. */
        ab_events *ev = ab_events_new(PRODUCERS * PER);
        consumer c = {.ev = ev};
        pthread_t cth, th[PRODUCERS];
        pthread_create(&cth, NULL, consume, &c);
        for (int i = 0; i < PRODUCERS; i++)
                pthread_create(&th[i], NULL, produce, ev);
        for (int i = 0; i < PRODUCERS; i++)
                pthread_join(th[i], NULL);
        pthread_join(cth, NULL);
        TAP_IS_INT(ab_events_last_seq(ev), PRODUCERS * PER, "every emit got a seq");
        TAP_IS_INT(c.got, PRODUCERS * PER, "the consumer saw every event");
        tap_ok(c.ordered && !c.dropped, "contiguous seqs, nothing lost or duplicated");

        ab_event_view *v;
        size_t n;
        bool dropped;
        ab_events_wait(ev, 0, PRODUCERS * PER, 0, &v, &n, &dropped);
        bool ok = n == PRODUCERS * PER;
        for (size_t i = 0; ok && i < n; i++) {
                json_t *j = json_loads(v[i].json, 0, NULL);
                ok = v[i].seq == i + 1 &&
                     json_integer_value(json_object_get(j, "seq")) == (json_int_t)(i + 1);
                json_decref(j);
        }
        tap_ok(ok, "each stored JSON carries its own seq");
        ab_event_views_free(v, n);
        ab_events_free(ev);
}

int main(void)
{
        test_order();
        test_overflow();
        test_timeout();
        test_wakeups();
        test_concurrency();
        return tap_done();
}

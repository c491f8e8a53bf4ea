/* Unit tests: the handler pool runs jobs at once up to its cap (making
 * threads on demand: a job that blocks never queues another behind it),
 * refuses a reservation past the cap, counts jobs in flight, and drains. And
 * the event bus calls its notify hook after each emit and at shutdown. */
#include "http/workers.h"
#include "base/events.h"
#include "base/util.h"
#include "tap.h"

#include <pthread.h>
#include <stdatomic.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int running, release;

static void blocking_job(void *arg)
{
        atomic_int *done = arg;
        pthread_mutex_lock(&mu);
        running++;
        pthread_cond_broadcast(&cv);
        while (!release)
                pthread_cond_wait(&cv, &mu);
        pthread_mutex_unlock(&mu);
        atomic_fetch_add(done, 1);
}

static bool wait_running(int n)
{
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 10;
        pthread_mutex_lock(&mu);
        while (running < n)
                if (pthread_cond_timedwait(&cv, &mu, &until) != 0)
                        break;
        bool ok = running >= n;
        pthread_mutex_unlock(&mu);
        return ok;
}

static void test_cap(void)
{
        ab_workers *w = ab_workers_new(4, 1);
        atomic_int done = 0;
        for (int i = 0; i < 4; i++) {
                tap_ok(ab_workers_reserve(w), "reserve %d of 4", i + 1);
                ab_workers_run(w, blocking_job, &done);
        }
        tap_ok(wait_running(4), "four blocking jobs run at once (a thread each, made on demand)");
        TAP_IS_INT(ab_workers_in_flight(w), 4, "four in flight");
        tap_ok(!ab_workers_reserve(w), "a fifth reservation is refused (the cap)");
        pthread_mutex_lock(&mu);
        release = 1;
        pthread_cond_broadcast(&cv);
        pthread_mutex_unlock(&mu);
        ab_workers_drain(w);
        TAP_IS_INT(atomic_load(&done), 4, "drain waits for every job");
        TAP_IS_INT(ab_workers_in_flight(w), 0, "nothing in flight after the drain");
        tap_ok(!ab_workers_reserve(w), "a drained pool refuses reservations");
        ab_workers_free(w);
}

static void quick_job(void *arg)
{
        atomic_fetch_add((atomic_int *)arg, 1);
}

static void test_many(void)
{
        ab_workers *w = ab_workers_new(8, 2);
        atomic_int done = 0;
        int refused = 0;
        for (int i = 0; i < 2000; i++) {
                if (ab_workers_reserve(w))
                        ab_workers_run(w, quick_job, &done);
                else
                        refused++;
        }
        ab_workers_drain(w);
        TAP_IS_INT(atomic_load(&done) + refused, 2000, "every job ran or was refused");
        tap_ok(atomic_load(&done) > 0, "jobs ran (%d; %d refused at the cap)", atomic_load(&done),
               refused);
        ab_workers_free(w);
}

static void count_notify(void *arg)
{
        atomic_fetch_add((atomic_int *)arg, 1);
}

static void test_events_notify(void)
{
        ab_events *ev = ab_events_new(8);
        atomic_int n = 0;
        ab_events_emit(ev, "before", NULL, NULL, NULL);
        ab_events_set_notify(ev, count_notify, &n);
        ab_events_emit(ev, "a", NULL, NULL, NULL);
        ab_events_emit(ev, "b", NULL, NULL, NULL);
        TAP_IS_INT(atomic_load(&n), 2, "notify runs after each emit");
        ab_events_shutdown(ev);
        TAP_IS_INT(atomic_load(&n), 3, "... and at shutdown");
        ab_events_set_notify(ev, NULL, NULL);
        ab_events_emit(ev, "c", NULL, NULL, NULL);
        TAP_IS_INT(atomic_load(&n), 3, "a cleared hook is not called");
        ab_events_free(ev);
}

int main(void)
{
        test_cap();
        test_many();
        test_events_notify();
        return tap_done();
}

/* workers.c - handler threads made on demand, bounded by the in-flight cap. */
#include "http/workers.h"
#include "base/log.h"
#include "base/util.h"

#include <pthread.h>
#include <time.h>

#define IDLE_EXIT_S 30 /* an idle thread beyond keep_idle leaves after this */

typedef struct job {
        struct job *next;
        void (*fn)(void *arg);
        void *arg;
} job;

struct ab_workers {
        pthread_mutex_t mu;
        pthread_cond_t work; /* a job was queued, or draining */
        pthread_cond_t idle; /* in_flight fell, or a thread left */
        job *head, *tail;
        size_t max, keep_idle;
        size_t in_flight; /* reserved + queued + running */
        size_t threads, waiting;
        bool draining;
};

ab_workers *ab_workers_new(size_t max, size_t keep_idle)
{
        ab_workers *w = xzalloc(sizeof(*w));
        w->max = max ? max : 1;
        w->keep_idle = keep_idle;
        pthread_mutex_init(&w->mu, NULL);
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&w->work, &ca);
        pthread_cond_init(&w->idle, &ca);
        pthread_condattr_destroy(&ca);
        return w;
}

static job *take(ab_workers *w)
{
        job *j = w->head;
        if (j) {
                w->head = j->next;
                if (!w->head)
                        w->tail = NULL;
        }
        return j;
}

static void *worker_main(void *arg)
{
        ab_workers *w = arg;
        pthread_mutex_lock(&w->mu);
        for (;;) {
                job *j = take(w);
                if (j) {
                        pthread_mutex_unlock(&w->mu);
                        j->fn(j->arg);
                        free(j);
                        pthread_mutex_lock(&w->mu);
                        w->in_flight--;
                        pthread_cond_broadcast(&w->idle);
                        continue;
                }
                if (w->draining)
                        break;
                struct timespec until;
                clock_gettime(CLOCK_MONOTONIC, &until);
                until.tv_sec += IDLE_EXIT_S;
                w->waiting++;
                int rc = pthread_cond_timedwait(&w->work, &w->mu, &until);
                w->waiting--;
                if (rc == ETIMEDOUT && !w->head && w->threads > w->keep_idle)
                        break;
        }
        w->threads--;
        pthread_cond_broadcast(&w->idle);
        pthread_mutex_unlock(&w->mu);
        return NULL;
}

bool ab_workers_reserve(ab_workers *w)
{
        pthread_mutex_lock(&w->mu);
        bool ok = !w->draining && w->in_flight < w->max;
        if (ok)
                w->in_flight++;
        pthread_mutex_unlock(&w->mu);
        return ok;
}

void ab_workers_run(ab_workers *w, void (*fn)(void *arg), void *arg)
{
        job *j = xzalloc(sizeof(*j));
        j->fn = fn;
        j->arg = arg;
        pthread_mutex_lock(&w->mu);
        if (w->tail)
                w->tail->next = j;
        else
                w->head = j;
        w->tail = j;
        size_t queued = 0;
        for (job *q = w->head; q; q = q->next)
                queued++;
        if (w->waiting >= queued) {
                /* Signalled once the lock is dropped: a thread woken under
                 * it would only block again on the mutex (a second switch
                 * on every request). */
                pthread_mutex_unlock(&w->mu);
                pthread_cond_signal(&w->work);
                return;
        } else {
                pthread_attr_t a;
                pthread_attr_init(&a);
                pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
                pthread_t t;
                int rc = pthread_create(&t, &a, worker_main, w);
                pthread_attr_destroy(&a);
                if (rc == 0)
                        w->threads++;
                else if (w->threads == 0)
                        ab_log(AB_LOG_ERROR, "cannot start a request thread; retrying", "error",
                               strerror(rc), NULL);
                if (rc != 0)
                        pthread_cond_signal(&w->work);
                /* With no thread at all the job waits for the next run's
                 * attempt: in_flight stays counted, so the cap still holds. */
        }
        pthread_mutex_unlock(&w->mu);
}

size_t ab_workers_in_flight(ab_workers *w)
{
        pthread_mutex_lock(&w->mu);
        size_t n = w->in_flight;
        pthread_mutex_unlock(&w->mu);
        return n;
}

void ab_workers_drain(ab_workers *w)
{
        pthread_mutex_lock(&w->mu);
        w->draining = true;
        pthread_cond_broadcast(&w->work);
        while (w->in_flight > 0 || w->threads > 0)
                pthread_cond_wait(&w->idle, &w->mu);
        pthread_mutex_unlock(&w->mu);
}

void ab_workers_free(ab_workers *w)
{
        if (!w)
                return;
        ab_workers_drain(w);
        pthread_cond_destroy(&w->work);
        pthread_cond_destroy(&w->idle);
        pthread_mutex_destroy(&w->mu);
        free(w);
}

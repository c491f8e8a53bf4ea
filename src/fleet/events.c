/* events.c - the fleet's events on every node's GET /v1/events
 * (docs/fleet.md): each node sends the events it emits to the others
 * through the shared store (PostgreSQL NOTIFY, from a thread of its own so
 * that no emitter waits for the database) and takes theirs (LISTEN) into its
 * own bus. An event names its node. */
#include "fleet/fleet_int.h"
#include "base/log.h"

#include <time.h>

#define CHANNEL     "agentbox_events"
#define QUEUE_MAX   4096 /* events waiting to be sent; the oldest go first when full */
#define PAYLOAD_MAX 7900 /* NOTIFY takes less than 8000 bytes */

typedef struct qitem {
        struct qitem *next;
        char *json;
} qitem;

struct fleet_events {
        ab_events *ev;
        ab_store *store;
        char *url, *node;
        pthread_mutex_t lock;
        pthread_cond_t wake;
        qitem *head, *tail;
        size_t queued;
        bool stopping;
        bool dropped; /* logged once per overflow */
        pthread_t pub, sub;
};

/* The tap: this node's events, queued for the publisher. */
static void tap(void *arg, const char *json)
{
        fleet_events *fe = arg;
        qitem *q = xzalloc(sizeof(*q));
        q->json = xstrdup(json);
        qitem *old = NULL;
        pthread_mutex_lock(&fe->lock);
        if (fe->queued >= QUEUE_MAX) {
                old = fe->head;
                fe->head = old->next;
                fe->queued--;
                if (!fe->head)
                        fe->tail = NULL;
        }
        if (fe->tail)
                fe->tail->next = q;
        else
                fe->head = q;
        fe->tail = q;
        fe->queued++;
        bool warn = old && !fe->dropped;
        fe->dropped = fe->dropped || old;
        pthread_cond_signal(&fe->wake);
        pthread_mutex_unlock(&fe->lock);
        if (old) {
                free(old->json);
                free(old);
        }
        if (warn)
                ab_log(AB_LOG_WARN,
                       "fleet: events are sent slower than they come; dropping the "
                       "oldest",
                       NULL);
}

/* An event's line as NOTIFY takes it: a large one without its data. */
static char *payload_of(const char *json)
{
        if (strlen(json) <= PAYLOAD_MAX)
                return xstrdup(json);
        json_t *j = json_loads(json, 0, NULL);
        if (!j)
                return NULL;
        json_object_set_new(j, "data", json_pack("{s:b}", "truncated", 1));
        char *t = json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII);
        json_decref(j);
        return t;
}

static void *publisher_main(void *arg)
{
        fleet_events *fe = arg;
        pthread_mutex_lock(&fe->lock);
        for (;;) {
                while (!fe->head && !fe->stopping)
                        pthread_cond_wait(&fe->wake, &fe->lock);
                if (fe->stopping)
                        break;
                qitem *q = fe->head;
                fe->head = q->next;
                if (!fe->head)
                        fe->tail = NULL;
                fe->queued--;
                fe->dropped = fe->dropped && fe->queued > 0;
                pthread_mutex_unlock(&fe->lock);
                _cleanup_free_ char *p = payload_of(q->json);
                _cleanup_err_ ab_err *e = NULL;
                if (p && ab_store_notify(fe->store, CHANNEL, p, &e) < 0)
                        ab_log(AB_LOG_WARN, "fleet: cannot send an event to the other nodes",
                               "error", e->msg, NULL);
                free(q->json);
                free(q);
                pthread_mutex_lock(&fe->lock);
        }
        pthread_mutex_unlock(&fe->lock);
        return NULL;
}

static void take(void *arg, const char *payload)
{
        fleet_events *fe = arg;
        json_t *j = json_loads(payload, 0, NULL);
        const char *node = json_string_value(json_object_get(j, "node"));
        bool other = node && strcmp(node, fe->node) != 0;
        json_decref(j);
        if (other) /* our own come back too: the bus has them already */
                ab_events_inject(fe->ev, payload);
}

static bool stopping(fleet_events *fe)
{
        pthread_mutex_lock(&fe->lock);
        bool s = fe->stopping;
        pthread_mutex_unlock(&fe->lock);
        return s;
}

static void *subscriber_main(void *arg)
{
        fleet_events *fe = arg;
        ab_store_listener *l = NULL;
        bool warned = false;
        while (!stopping(fe)) {
                _cleanup_err_ ab_err *e = NULL;
                if (!l && ab_store_listen(fe->url, CHANNEL, &l, &e) < 0) {
                        if (!warned)
                                ab_log(AB_LOG_WARN,
                                       "fleet: cannot listen to the other nodes' "
                                       "events; retrying",
                                       "error", e->msg, NULL);
                        warned = true;
                        struct timespec ts = {1, 0};
                        nanosleep(&ts, NULL);
                        continue;
                }
                warned = false;
                if (ab_store_listen_wait(l, 300, take, fe, &e) < 0) {
                        ab_log(AB_LOG_WARN, "fleet: the events' connection broke; again", "error",
                               e->msg, NULL);
                        ab_store_listen_close(l);
                        l = NULL;
                }
        }
        ab_store_listen_close(l);
        return NULL;
}

fleet_events *fleet_events_start(ab_events *ev, ab_store *store, const char *url, const char *node)
{
        fleet_events *fe = xzalloc(sizeof(*fe));
        fe->ev = ev;
        fe->store = store;
        fe->url = xstrdup(url);
        fe->node = xstrdup(node);
        pthread_mutex_init(&fe->lock, NULL);
        pthread_cond_init(&fe->wake, NULL);
        ab_events_set_node(ev, node);
        if (pthread_create(&fe->pub, NULL, publisher_main, fe) != 0 ||
            pthread_create(&fe->sub, NULL, subscriber_main, fe) != 0)
                abort(); /* no thread for a core job: out of resources at startup */
        ab_events_set_tap(ev, tap, fe);
        return fe;
}

void fleet_events_stop(fleet_events *fe)
{
        if (!fe)
                return;
        ab_events_set_tap(fe->ev, NULL, NULL);
        pthread_mutex_lock(&fe->lock);
        fe->stopping = true;
        pthread_cond_broadcast(&fe->wake);
        pthread_mutex_unlock(&fe->lock);
        pthread_join(fe->pub, NULL);
        pthread_join(fe->sub, NULL);
        for (qitem *q = fe->head, *n; q; q = n) {
                n = q->next;
                free(q->json);
                free(q);
        }
        pthread_mutex_destroy(&fe->lock);
        pthread_cond_destroy(&fe->wake);
        free(fe->url);
        free(fe->node);
        free(fe);
}

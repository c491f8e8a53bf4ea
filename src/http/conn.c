/* conn.c - the connection table, head deadlines, per-address caps, stream
 * slots and parked streaming readers (conn.h). One mutex guards it all; one
 * timer thread watches deadlines and parked fds.
 *
 * Closing a connection from the timer thread: MHD owns the socket, so the
 * timer only shutdown(2)s it, under the table's lock, and only while the
 * connection is in the table. MHD's notify-closed callback removes the entry
 * under the same lock before MHD closes the fd, so the fd shut down is
 * always still this connection's (never a reused number). MHD then sees the
 * end of the stream and closes the connection itself. */
#include "http/conn.h"
#include "base/log.h"
#include "base/util.h"

#include <arpa/inet.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#define TICK_MS      250 /* deadline resolution */
#define ADDR_BUCKETS 4096
/* Revoked keys remembered, for a request that authenticated with a key just
 * before its revocation and binds just after: that takes microseconds, so a
 * few hundred later revocations cannot overtake it. */
#define REVOKED_KEEP 256

/* A peer address: IPv4 as v4-mapped IPv6, so both share one key space. */
typedef struct addr_key {
        uint8_t b[16];
} addr_key;

typedef struct addr_ent {
        struct addr_ent *next;
        addr_key key;
        int64_t conns, streams;
} addr_ent;

typedef struct conn_ent {
        struct conn_ent *prev, *next;
        int fd;
        addr_ent *addr;
        int64_t deadline_ms; /* 0 = none (head complete, request in progress) */
        bool shut;
        char *uri;    /* the current request's target as sent (MHD's thread only) */
        char *key_id; /* the store key that authenticated the current request, or NULL */
} conn_ent;

struct ab_stream_slot {
        ab_conns *c;
        addr_ent *addr;
};

/* Where an epoll event points: the park and which of its fds. Parks are
 * freed only by the timer thread between epoll_waits (the graveyard), so a
 * batch of events never points at freed memory. */
enum { W_DATA = 0, W_CLIENT = 1 };

struct ab_park {
        ab_conns *c;
        struct MHD_Connection *conn;
        int client_fd;
        int fd; /* the data fd watched while parked, or -1 */
        int64_t deadline_ms;
        bool parked, on_events, hup, dead;
        struct ab_park *prev, *next; /* parked list, or graveyard (next only) */
        uint8_t tag[2];              /* epoll data points at tag[W_DATA] / tag[W_CLIENT] */
};

struct ab_conns {
        ab_conns_opts o;
        pthread_mutex_t mu;
        conn_ent *conns; /* open connections */
        addr_ent *addrs[ADDR_BUCKETS];
        int64_t open, streams;
        ab_park *parked; /* parked readers */
        /* Parked readers waiting on the event bus: events_news wakes the
         * timer thread only when there is one (an exec emits an event, and
         * a wake-up per exec that nobody waits for costs a switch). */
        atomic_int event_parks;
        ab_park *graveyard; /* parks freed by their responses, for the timer to free */
        bool stopping;
        /* counters */
        uint64_t deadline_closed, refused_addr, refused_total, refused_streams,
            refused_streams_addr, refused_busy;
        /* timer thread */
        int ep, evfd;
        bool quit;
        pthread_t timer;
        /* revoked keys: the latest REVOKED_KEEP, a ring (see ab_conns_bind_key) */
        char *revoked[REVOKED_KEEP];
        size_t revoked_next;
        uint64_t key_closed; /* connections ended because their key was revoked */
        /* the key checker thread (o.keys_gone), when there is one */
        pthread_cond_t key_cond;
        bool key_thread;
        pthread_t key_checker;
};

static int64_t mono_ms(void)
{
        return (int64_t)ab_now_ms();
}

/* ---- addresses ---------------------------------------------------------- */

static bool key_of(const struct sockaddr *sa, addr_key *k)
{
        memset(k, 0, sizeof(*k));
        if (!sa)
                return false;
        if (sa->sa_family == AF_INET) {
                k->b[10] = k->b[11] = 0xff;
                memcpy(k->b + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
                return true;
        }
        if (sa->sa_family == AF_INET6) {
                memcpy(k->b, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
                return true;
        }
        return true; /* other families (unix) share the all-zero key */
}

static size_t bucket_of(const addr_key *k)
{
        uint64_t h = 1469598103934665603ull;
        for (size_t i = 0; i < sizeof(k->b); i++)
                h = (h ^ k->b[i]) * 1099511628211ull;
        return (size_t)(h % ADDR_BUCKETS);
}

static addr_ent *addr_find(ab_conns *c, const addr_key *k, bool make)
{
        addr_ent **head = &c->addrs[bucket_of(k)];
        for (addr_ent *a = *head; a; a = a->next)
                if (!memcmp(a->key.b, k->b, sizeof(k->b)))
                        return a;
        if (!make)
                return NULL;
        addr_ent *a = xzalloc(sizeof(*a));
        a->key = *k;
        a->next = *head;
        *head = a;
        return a;
}

static void addr_unref(ab_conns *c, addr_ent *a)
{
        if (a->conns > 0 || a->streams > 0)
                return;
        for (addr_ent **pp = &c->addrs[bucket_of(&a->key)]; *pp; pp = &(*pp)->next)
                if (*pp == a) {
                        *pp = a->next;
                        free(a);
                        return;
                }
}

static const struct sockaddr *peer_of(struct MHD_Connection *conn)
{
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        return ci ? ci->client_addr : NULL;
}

static int fd_of(struct MHD_Connection *conn)
{
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        return ci ? ci->connect_fd : -1;
}

static conn_ent *ent_of(struct MHD_Connection *conn)
{
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        return ci ? ci->socket_context : NULL;
}

/* ---- MHD callbacks ------------------------------------------------------ */

enum MHD_Result ab_conns_accept(void *cls, const struct sockaddr *addr, socklen_t len)
{
        ab_conns *c = cls;
        (void)len;
        addr_key k;
        key_of(addr, &k);
        enum MHD_Result ok = MHD_YES;
        pthread_mutex_lock(&c->mu);
        addr_ent *a = addr_find(c, &k, false);
        if (c->stopping) {
                ok = MHD_NO;
        } else if (c->open >= c->o.max_connections) {
                c->refused_total++;
                ok = MHD_NO;
        } else if (a && a->conns >= c->o.max_per_address) {
                c->refused_addr++;
                ok = MHD_NO;
        }
        pthread_mutex_unlock(&c->mu);
        return ok;
}

static void list_remove(conn_ent **head, conn_ent *e)
{
        if (e->prev)
                e->prev->next = e->next;
        else
                *head = e->next;
        if (e->next)
                e->next->prev = e->prev;
        e->prev = e->next = NULL;
}

void ab_conns_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                     enum MHD_ConnectionNotificationCode code)
{
        ab_conns *c = cls;
        if (code == MHD_CONNECTION_NOTIFY_STARTED) {
                conn_ent *e = xzalloc(sizeof(*e));
                e->fd = fd_of(conn);
                addr_key k;
                key_of(peer_of(conn), &k);
                pthread_mutex_lock(&c->mu);
                e->addr = addr_find(c, &k, true);
                e->addr->conns++;
                e->deadline_ms = mono_ms() + c->o.head_timeout_ms;
                e->next = c->conns;
                if (c->conns)
                        c->conns->prev = e;
                c->conns = e;
                c->open++;
                pthread_mutex_unlock(&c->mu);
                *socket_context = e;
                return;
        }
        conn_ent *e = *socket_context;
        if (!e)
                return;
        pthread_mutex_lock(&c->mu);
        list_remove(&c->conns, e);
        e->addr->conns--;
        addr_unref(c, e->addr);
        c->open--;
        pthread_mutex_unlock(&c->mu);
        free(e->uri);
        free(e->key_id);
        free(e);
        *socket_context = NULL;
}

void *ab_conns_uri_seen(void *cls, const char *uri, struct MHD_Connection *conn)
{
        ab_conns *c = cls;
        conn_ent *e = ent_of(conn);
        if (!e)
                return NULL;
        free(e->uri);
        e->uri = xstrdup(uri);
        pthread_mutex_lock(&c->mu);
        free(steal_pointer(&e->key_id)); /* a new request: its own credential */
        int64_t d = mono_ms() + c->o.head_timeout_ms;
        if (e->deadline_ms == 0 || d < e->deadline_ms)
                e->deadline_ms = d;
        pthread_mutex_unlock(&c->mu);
        return NULL; /* the access handler makes its own request context */
}

const char *ab_conns_raw_uri(struct MHD_Connection *conn)
{
        conn_ent *e = ent_of(conn);
        return e ? e->uri : NULL;
}

void ab_conns_head_done(ab_conns *c, struct MHD_Connection *conn)
{
        conn_ent *e = ent_of(conn);
        if (!e)
                return;
        pthread_mutex_lock(&c->mu);
        e->deadline_ms = 0;
        pthread_mutex_unlock(&c->mu);
}

void ab_conns_request_done(ab_conns *c, struct MHD_Connection *conn)
{
        conn_ent *e = ent_of(conn);
        if (!e)
                return;
        pthread_mutex_lock(&c->mu);
        e->deadline_ms = mono_ms() + c->o.keepalive_ms;
        pthread_mutex_unlock(&c->mu);
}

/* ---- streams ------------------------------------------------------------ */

ab_slot_result ab_stream_slot_take(ab_conns *c, struct MHD_Connection *conn, ab_stream_slot **out)
{
        *out = NULL;
        addr_key k;
        key_of(peer_of(conn), &k);
        ab_slot_result res = AB_SLOT_OK;
        pthread_mutex_lock(&c->mu);
        addr_ent *a = addr_find(c, &k, true);
        if (c->streams >= c->o.max_streams) {
                c->refused_streams++;
                res = AB_SLOT_FULL;
        } else if (a->streams >= c->o.max_streams_addr) {
                c->refused_streams_addr++;
                res = AB_SLOT_ADDRESS_FULL;
        } else {
                c->streams++;
                a->streams++;
                ab_stream_slot *s = xzalloc(sizeof(*s));
                s->c = c;
                s->addr = a;
                *out = s;
        }
        addr_unref(c, a);
        pthread_mutex_unlock(&c->mu);
        return res;
}

void ab_stream_slot_release(ab_stream_slot *s)
{
        if (!s)
                return;
        ab_conns *c = s->c;
        pthread_mutex_lock(&c->mu);
        c->streams--;
        s->addr->streams--;
        addr_unref(c, s->addr);
        pthread_mutex_unlock(&c->mu);
        free(s);
}

/* ---- credentials ---------------------------------------------------------- */

/* Locked. */
static bool key_revoked(ab_conns *c, const char *key_id)
{
        for (size_t i = 0; i < REVOKED_KEEP; i++)
                if (c->revoked[i] && !strcmp(c->revoked[i], key_id))
                        return true;
        return false;
}

/* Locked: ends e's connection (MHD sees its end and closes it; a parked
 * reader wakes on the hang-up, an upgraded relay reads its end). */
static void shut_ent(ab_conns *c, conn_ent *e)
{
        if (e->shut || e->fd < 0)
                return;
        shutdown(e->fd, SHUT_RDWR);
        e->shut = true;
        c->key_closed++;
}

void ab_conns_bind_key(ab_conns *c, struct MHD_Connection *conn, const char *key_id)
{
        conn_ent *e = ent_of(conn);
        if (!e || !key_id)
                return;
        pthread_mutex_lock(&c->mu);
        free(e->key_id);
        e->key_id = xstrdup(key_id);
        if (key_revoked(c, key_id))
                shut_ent(c, e);
        pthread_mutex_unlock(&c->mu);
}

size_t ab_conns_revoke_key(ab_conns *c, const char *key_id)
{
        size_t n = 0;
        pthread_mutex_lock(&c->mu);
        if (!key_revoked(c, key_id)) {
                free(c->revoked[c->revoked_next]);
                c->revoked[c->revoked_next] = xstrdup(key_id);
                c->revoked_next = (c->revoked_next + 1) % REVOKED_KEEP;
        }
        for (conn_ent *e = c->conns; e; e = e->next)
                if (e->key_id && !e->shut && !strcmp(e->key_id, key_id)) {
                        shut_ent(c, e);
                        n++;
                }
        pthread_mutex_unlock(&c->mu);
        if (n)
                ab_log(AB_LOG_INFO, "connections of a revoked API key ended", "key_id", key_id,
                       NULL);
        return n;
}

static int cmp_str(const void *a, const void *b)
{
        return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The distinct keys bound to open connections, sorted (NULL-terminated;
 * free with ab_strvfreep). Copied under the lock, sorted outside it. */
static char **bound_keys(ab_conns *c, size_t *n_out)
{
        size_t n = 0, cap = 8;
        char **v = xcalloc(cap, sizeof(char *));
        pthread_mutex_lock(&c->mu);
        for (conn_ent *e = c->conns; e; e = e->next) {
                if (!e->key_id || e->shut)
                        continue;
                if (n + 1 >= cap)
                        v = xrealloc(v, (cap = xmul(cap, 2)) * sizeof(char *));
                v[n++] = xstrdup(e->key_id);
        }
        pthread_mutex_unlock(&c->mu);
        v[n] = NULL;
        qsort(v, n, sizeof(char *), cmp_str);
        size_t m = 0;
        for (size_t i = 0; i < n; i++) {
                if (m && !strcmp(v[m - 1], v[i]))
                        free(v[i]);
                else
                        v[m++] = v[i];
        }
        v[m] = NULL;
        *n_out = m;
        return v;
}

/* Every key_check_ms: asks o.keys_gone about the keys bound to open
 * connections and revokes those gone (deleted through another server on the
 * same store). */
static void *key_checker_main(void *arg)
{
        ab_conns *c = arg;
        for (;;) {
                pthread_mutex_lock(&c->mu);
                struct timespec ts;
                clock_gettime(CLOCK_MONOTONIC, &ts);
                int64_t ns = ts.tv_nsec + (c->o.key_check_ms % 1000) * 1000000;
                ts.tv_sec += c->o.key_check_ms / 1000 + ns / 1000000000;
                ts.tv_nsec = ns % 1000000000;
                while (!c->quit && pthread_cond_timedwait(&c->key_cond, &c->mu, &ts) == 0)
                        ;
                bool quit = c->quit;
                pthread_mutex_unlock(&c->mu);
                if (quit)
                        return NULL;
                size_t n = 0;
                _cleanup_strv_ char **keys = bound_keys(c, &n);
                if (!n)
                        continue;
                _cleanup_free_ bool *gone = xcalloc(n, sizeof(bool));
                if (c->o.keys_gone(c->o.key_arg, (const char *const *)keys, n, gone) < 0)
                        continue; /* no answer is no proof */
                for (size_t i = 0; i < n; i++)
                        if (gone[i])
                                ab_conns_revoke_key(c, keys[i]);
        }
}

/* ---- parking ------------------------------------------------------------ */

ab_park *ab_park_new(ab_conns *c, struct MHD_Connection *conn)
{
        ab_park *p = xzalloc(sizeof(*p));
        p->c = c;
        p->conn = conn;
        p->client_fd = fd_of(conn);
        p->fd = -1;
        p->tag[W_DATA] = W_DATA;
        p->tag[W_CLIENT] = W_CLIENT;
        return p;
}

static ab_park *park_of(void *ptr)
{
        uint8_t *tag = ptr;
        return (ab_park *)((char *)(tag - *tag) - offsetof(ab_park, tag));
}

/* Takes p out of the parked set; returns its connection to resume (after
 * the lock is dropped), or NULL when p was not parked. Locked. */
static struct MHD_Connection *unpark(ab_conns *c, ab_park *p)
{
        if (!p->parked)
                return NULL;
        if (p->fd >= 0)
                epoll_ctl(c->ep, EPOLL_CTL_DEL, p->fd, NULL);
        if (p->client_fd >= 0)
                epoll_ctl(c->ep, EPOLL_CTL_DEL, p->client_fd, NULL);
        if (p->prev)
                p->prev->next = p->next;
        else
                c->parked = p->next;
        if (p->next)
                p->next->prev = p->prev;
        p->prev = p->next = NULL;
        p->parked = false;
        p->fd = -1;
        if (p->on_events)
                atomic_fetch_sub(&c->event_parks, 1);
        return p->conn;
}

void ab_park_free(ab_park *p)
{
        if (!p)
                return;
        ab_conns *c = p->c;
        pthread_mutex_lock(&c->mu);
        unpark(c, p); /* not parked in practice: a suspended response is not freed */
        p->dead = true;
        p->next = c->graveyard;
        c->graveyard = p;
        pthread_mutex_unlock(&c->mu);
}

/* park's work under c->mu, which it leaves held. */
static ab_park_result park_locked(ab_park *p, int fd, uint32_t fd_events, bool on_events,
                                  int64_t deadline_ms, bool (*ready)(void *arg), void *arg)
{
        ab_conns *c = p->c;
        if (c->stopping || p->hup)
                return AB_PARK_GONE;
        if (ready && ready(arg))
                return AB_PARK_RETRY;
        struct epoll_event ev = {.events = fd_events, .data.ptr = &p->tag[W_DATA]};
        if (fd >= 0 && epoll_ctl(c->ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
                int e = errno;
                ab_log(AB_LOG_WARN, "cannot watch a stream's fd", "error", strerror(e), NULL);
                return AB_PARK_GONE;
        }
        /* The client's hang-up only (not its data: a pipelined request must
         * not wake the reader again and again). */
        struct epoll_event cev = {.events = EPOLLRDHUP, .data.ptr = &p->tag[W_CLIENT]};
        if (p->client_fd >= 0 && epoll_ctl(c->ep, EPOLL_CTL_ADD, p->client_fd, &cev) < 0) {
                int e = errno;
                if (fd >= 0)
                        epoll_ctl(c->ep, EPOLL_CTL_DEL, fd, NULL);
                ab_log(AB_LOG_WARN, "cannot watch a stream's client", "error", strerror(e), NULL);
                return AB_PARK_GONE;
        }
        p->fd = fd;
        p->on_events = on_events;
        p->deadline_ms = deadline_ms;
        p->parked = true;
        p->next = c->parked;
        if (c->parked)
                c->parked->prev = p;
        c->parked = p;
        MHD_suspend_connection(p->conn);
        return AB_PARK_SUSPENDED;
}

static ab_park_result park(ab_park *p, int fd, uint32_t fd_events, bool on_events,
                           int64_t deadline_ms, bool (*ready)(void *arg), void *arg)
{
        ab_conns *c = p->c;
        pthread_mutex_lock(&c->mu);
        /* Counted before ready() looks at the bus: an event published after
         * that look then sees the count and wakes us (the bus's lock orders
         * the two). */
        if (on_events)
                atomic_fetch_add(&c->event_parks, 1);
        ab_park_result r = park_locked(p, fd, fd_events, on_events, deadline_ms, ready, arg);
        if (on_events && r != AB_PARK_SUSPENDED)
                atomic_fetch_sub(&c->event_parks, 1);
        pthread_mutex_unlock(&c->mu);
        return r;
}

ab_park_result ab_park_suspend(ab_park *p, int fd, bool on_events, int64_t deadline_ms,
                               bool (*ready)(void *arg), void *arg)
{
        return park(p, fd, EPOLLIN, on_events, deadline_ms, ready, arg);
}

ab_park_result ab_park_suspend_write(ab_park *p, int fd, int64_t deadline_ms)
{
        return park(p, fd, EPOLLOUT, false, deadline_ms, NULL, NULL);
}

void ab_park_wake(ab_park *p)
{
        ab_conns *c = p->c;
        pthread_mutex_lock(&c->mu);
        struct MHD_Connection *conn = unpark(c, p);
        pthread_mutex_unlock(&c->mu);
        if (conn)
                MHD_resume_connection(conn);
}

typedef struct conn_vec {
        struct MHD_Connection **v;
        size_t n, cap;
} conn_vec;

static void vec_add(conn_vec *cv, struct MHD_Connection *conn)
{
        if (!conn)
                return;
        if (cv->n == cv->cap) {
                cv->cap = cv->cap ? cv->cap * 2 : 16;
                cv->v = xrealloc(cv->v, cv->cap * sizeof(*cv->v));
        }
        cv->v[cv->n++] = conn;
}

static void resume_all(conn_vec *cv)
{
        for (size_t i = 0; i < cv->n; i++)
                MHD_resume_connection(cv->v[i]);
        cv->n = 0;
}

void ab_conns_stop_streams(ab_conns *c)
{
        conn_vec cv = {0};
        pthread_mutex_lock(&c->mu);
        c->stopping = true;
        while (c->parked)
                vec_add(&cv, unpark(c, c->parked));
        pthread_mutex_unlock(&c->mu);
        resume_all(&cv);
        free(cv.v);
}

/* ---- the timer thread ----------------------------------------------------- */

static void events_news(void *arg)
{
        ab_conns *c = arg;
        if (atomic_load(&c->event_parks) == 0 && !c->quit)
                return;
        uint64_t one = 1;
        ssize_t n = write(c->evfd, &one, sizeof(one));
        (void)n; /* a full counter already means "news" */
}

/* Locked: shuts down connections past their head deadline, wakes parked
 * readers past theirs. */
static void scan(ab_conns *c, int64_t now, conn_vec *cv)
{
        for (conn_ent *e = c->conns; e; e = e->next) {
                /* '<=': ms are truncated, so a close is never early by a fraction */
                if (e->shut || e->deadline_ms == 0 || now <= e->deadline_ms || e->fd < 0)
                        continue;
                shutdown(e->fd, SHUT_RDWR);
                e->shut = true;
                c->deadline_closed++;
        }
        for (ab_park *p = c->parked, *next; p; p = next) {
                next = p->next;
                if (p->deadline_ms && now >= p->deadline_ms)
                        vec_add(cv, unpark(c, p));
        }
}

static void *timer_main(void *arg)
{
        ab_conns *c = arg;
        conn_vec cv = {0};
        int64_t next_scan = 0;
        for (;;) {
                pthread_mutex_lock(&c->mu);
                ab_park *dead = c->graveyard;
                c->graveyard = NULL;
                bool quit = c->quit;
                pthread_mutex_unlock(&c->mu);
                while (dead) {
                        ab_park *n = dead->next;
                        free(dead);
                        dead = n;
                }
                if (quit)
                        break;
                struct epoll_event evs[64];
                int n = epoll_wait(c->ep, evs, 64, TICK_MS);
                pthread_mutex_lock(&c->mu);
                for (int i = 0; i < n; i++) {
                        if (evs[i].data.ptr == NULL) { /* the event bus has news */
                                uint64_t v;
                                ssize_t r = read(c->evfd, &v, sizeof(v));
                                (void)r;
                                for (ab_park *p = c->parked, *next; p; p = next) {
                                        next = p->next;
                                        if (p->on_events)
                                                vec_add(&cv, unpark(c, p));
                                }
                                continue;
                        }
                        uint8_t *tag = evs[i].data.ptr;
                        ab_park *p = park_of(tag);
                        if (p->dead || !p->parked)
                                continue;
                        if (*tag == W_CLIENT)
                                p->hup = true;
                        vec_add(&cv, unpark(c, p));
                }
                int64_t now = mono_ms();
                if (now >= next_scan) {
                        scan(c, now, &cv);
                        next_scan = now + TICK_MS;
                }
                pthread_mutex_unlock(&c->mu);
                resume_all(&cv);
        }
        free(cv.v);
        return NULL;
}

ab_conns *ab_conns_new(const ab_conns_opts *o)
{
        ab_conns *c = xzalloc(sizeof(*c));
        c->o = *o;
        pthread_mutex_init(&c->mu, NULL);
        c->ep = epoll_create1(EPOLL_CLOEXEC);
        c->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        int e = 0;
        if (c->ep < 0 || c->evfd < 0) {
                e = errno;
                goto fail;
        }
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
        if (epoll_ctl(c->ep, EPOLL_CTL_ADD, c->evfd, &ev) < 0) {
                e = errno;
                goto fail;
        }
        if ((e = pthread_create(&c->timer, NULL, timer_main, c)) != 0)
                goto fail;
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&c->key_cond, &ca);
        pthread_condattr_destroy(&ca);
        if (c->o.keys_gone) {
                if (c->o.key_check_ms <= 0)
                        c->o.key_check_ms = AB_KEY_CHECK_MS;
                /* without it, keys deleted elsewhere end streams only here */
                c->key_thread = pthread_create(&c->key_checker, NULL, key_checker_main, c) == 0;
                if (!c->key_thread)
                        ab_log(AB_LOG_WARN, "cannot start the API key checker", NULL);
        }
        if (c->o.events)
                ab_events_set_notify(c->o.events, events_news, c);
        return c;
fail:
        if (c->ep >= 0)
                close(c->ep);
        if (c->evfd >= 0)
                close(c->evfd);
        pthread_mutex_destroy(&c->mu);
        free(c);
        errno = e;
        return NULL;
}

void ab_conns_free(ab_conns *c)
{
        if (!c)
                return;
        if (c->o.events)
                ab_events_set_notify(c->o.events, NULL, NULL);
        pthread_mutex_lock(&c->mu);
        c->quit = true;
        pthread_cond_broadcast(&c->key_cond);
        pthread_mutex_unlock(&c->mu);
        events_news(c);
        pthread_join(c->timer, NULL);
        if (c->key_thread)
                pthread_join(c->key_checker, NULL);
        pthread_cond_destroy(&c->key_cond);
        for (size_t i = 0; i < REVOKED_KEEP; i++)
                free(c->revoked[i]);
        while (c->graveyard) {
                ab_park *n = c->graveyard->next;
                free(c->graveyard);
                c->graveyard = n;
        }
        while (c->conns) { /* none after MHD_stop_daemon; just in case */
                conn_ent *e = c->conns;
                list_remove(&c->conns, e);
                free(e->uri);
                free(e->key_id);
                free(e);
        }
        for (size_t i = 0; i < ADDR_BUCKETS; i++)
                while (c->addrs[i]) {
                        addr_ent *a = c->addrs[i];
                        c->addrs[i] = a->next;
                        free(a);
                }
        close(c->ep);
        close(c->evfd);
        pthread_mutex_destroy(&c->mu);
        free(c);
}

/* ---- figures ------------------------------------------------------------- */

void ab_conns_count_busy(ab_conns *c)
{
        pthread_mutex_lock(&c->mu);
        c->refused_busy++;
        pthread_mutex_unlock(&c->mu);
}

void ab_conns_metrics(ab_conns *c, ab_buf *b)
{
        pthread_mutex_lock(&c->mu);
        int64_t open = c->open, streams = c->streams;
        uint64_t dl = c->deadline_closed, kc = c->key_closed;
        uint64_t r[5] = {c->refused_addr, c->refused_total, c->refused_streams_addr,
                         c->refused_streams, c->refused_busy};
        pthread_mutex_unlock(&c->mu);
        static const char *const reason[5] = {"connections_per_address", "connections",
                                              "streams_per_address", "streams", "requests"};
        ab_buf_printf(b,
                      "# HELP agentbox_http_connections Open HTTP connections.\n"
                      "# TYPE agentbox_http_connections gauge\n"
                      "agentbox_http_connections %lld\n"
                      "# HELP agentbox_http_streams Long-lived streams (event streams, exec "
                      "streams, terminals).\n"
                      "# TYPE agentbox_http_streams gauge\n"
                      "agentbox_http_streams %lld\n"
                      "# HELP agentbox_http_head_deadline_closed_total Connections closed "
                      "because their request head was not complete in time.\n"
                      "# TYPE agentbox_http_head_deadline_closed_total counter\n"
                      "agentbox_http_head_deadline_closed_total %llu\n"
                      "# HELP agentbox_http_refused_total Connections, streams and requests "
                      "refused by a cap.\n"
                      "# TYPE agentbox_http_refused_total counter\n",
                      (long long)open, (long long)streams, (unsigned long long)dl);
        for (size_t i = 0; i < 5; i++)
                ab_buf_printf(b, "agentbox_http_refused_total{reason=\"%s\"} %llu\n", reason[i],
                              (unsigned long long)r[i]);
        ab_buf_printf(b,
                      "# HELP agentbox_http_key_revoked_closed_total Connections (streams "
                      "included) ended because the API key that opened them was deleted.\n"
                      "# TYPE agentbox_http_key_revoked_closed_total counter\n"
                      "agentbox_http_key_revoked_closed_total %llu\n",
                      (unsigned long long)kc);
}

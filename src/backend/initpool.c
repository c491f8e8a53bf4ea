/* initpool.c - connections to boxes' inits kept for the next request (initpool.h). */
#include "backend/initpool.h"
#include "base/util.h"

#include <poll.h>
#include <string.h>
#include <unistd.h>

static void slot_close(ab_initpool_slot *s)
{
        if (s->id[0])
                close(s->fd);
        s->id[0] = 0;
        s->fd = -1;
}

void ab_initpool_init(ab_initpool *p)
{
        pthread_mutex_init(&p->mu, NULL);
        for (size_t i = 0; i < AB_INITPOOL_SLOTS; i++)
                p->s[i] = (ab_initpool_slot){.fd = -1};
}

void ab_initpool_clear(ab_initpool *p)
{
        pthread_mutex_lock(&p->mu);
        for (size_t i = 0; i < AB_INITPOOL_SLOTS; i++)
                slot_close(&p->s[i]);
        pthread_mutex_unlock(&p->mu);
}

/* An idle session sends nothing: anything readable, or a hang-up, means it
 * is gone (or broke the protocol). */
static bool still_idle(int fd)
{
        struct pollfd q = {.fd = fd, .events = POLLIN | POLLRDHUP};
        return poll(&q, 1, 0) == 0;
}

int ab_initpool_take(ab_initpool *p, const char *id)
{
        uint64_t now = ab_now_ms();
        int fd = -1;
        pthread_mutex_lock(&p->mu);
        for (size_t i = 0; i < AB_INITPOOL_SLOTS; i++) {
                ab_initpool_slot *s = &p->s[i];
                if (!s->id[0])
                        continue;
                if (now - s->since_ms >= AB_INITPOOL_IDLE_MS) {
                        slot_close(s);
                        continue;
                }
                if (fd >= 0 || strcmp(s->id, id) != 0)
                        continue;
                if (still_idle(s->fd)) {
                        fd = s->fd;
                        s->id[0] = 0;
                        s->fd = -1;
                } else {
                        slot_close(s);
                }
        }
        pthread_mutex_unlock(&p->mu);
        return fd;
}

void ab_initpool_put(ab_initpool *p, const char *id, int fd)
{
        if (strlen(id) >= sizeof(p->s[0].id)) {
                close(fd);
                return;
        }
        pthread_mutex_lock(&p->mu);
        ab_initpool_slot *free_slot = NULL, *oldest = NULL;
        size_t mine = 0;
        for (size_t i = 0; i < AB_INITPOOL_SLOTS; i++) {
                ab_initpool_slot *s = &p->s[i];
                if (!s->id[0]) {
                        free_slot = free_slot ? free_slot : s;
                        continue;
                }
                mine += strcmp(s->id, id) == 0;
                if (!oldest || s->since_ms < oldest->since_ms)
                        oldest = s;
        }
        if (mine >= AB_INITPOOL_PER_BOX) {
                pthread_mutex_unlock(&p->mu);
                close(fd);
                return;
        }
        ab_initpool_slot *s = free_slot;
        if (!s) {
                slot_close(oldest);
                s = oldest;
        }
        memcpy(s->id, id, strlen(id) + 1);
        s->fd = fd;
        s->since_ms = ab_now_ms();
        pthread_mutex_unlock(&p->mu);
}

void ab_initpool_drop(ab_initpool *p, const char *id)
{
        pthread_mutex_lock(&p->mu);
        for (size_t i = 0; i < AB_INITPOOL_SLOTS; i++)
                if (p->s[i].id[0] && strcmp(p->s[i].id, id) == 0)
                        slot_close(&p->s[i]);
        pthread_mutex_unlock(&p->mu);
}

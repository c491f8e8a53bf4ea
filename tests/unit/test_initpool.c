/* Unit tests: the pool of kept connections to boxes' inits hands a
 * connection back only for its own box, only while its peer waits quietly
 * (one that hung up, or sent anything, is closed instead), keeps at most
 * AB_INITPOOL_PER_BOX per box and AB_INITPOOL_SLOTS in all (the oldest makes
 * room), and closes a box's connections when told to. */
#include "backend/initpool.h"
#include "base/util.h"
#include "tap.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

/* A connected pair: *peer is the session's end. */
static int pair(int *peer)
{
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
                abort();
        *peer = sv[1];
        return sv[0];
}

static bool is_open(int fd)
{
        return fcntl(fd, F_GETFD) >= 0;
}

int main(void)
{
        ab_initpool p;
        ab_initpool_init(&p);

        int pa, a = pair(&pa);
        ab_initpool_put(&p, "box-a", a);
        TAP_IS_INT(ab_initpool_take(&p, "box-b"), -1, "another box's connection is not handed out");
        TAP_IS_INT(ab_initpool_take(&p, "box-a"), a, "the box's own connection comes back");
        TAP_IS_INT(ab_initpool_take(&p, "box-a"), -1, "... once");

        /* the session hung up (the box stopped): closed, not handed out */
        ab_initpool_put(&p, "box-a", a);
        close(pa);
        TAP_IS_INT(ab_initpool_take(&p, "box-a"), -1,
                   "a connection whose session hung up is dropped");
        tap_ok(!is_open(a), "... and closed");

        /* the session sent something unasked: never reused */
        int pb, b = pair(&pb);
        ab_initpool_put(&p, "box-a", b);
        (void)!write(pb, "x", 1);
        TAP_IS_INT(ab_initpool_take(&p, "box-a"), -1, "a connection with unread bytes is dropped");
        tap_ok(!is_open(b), "... and closed");
        close(pb);

        /* per box */
        int peers[AB_INITPOOL_PER_BOX + 1], fds[AB_INITPOOL_PER_BOX + 1];
        for (int i = 0; i <= AB_INITPOOL_PER_BOX; i++) {
                fds[i] = pair(&peers[i]);
                ab_initpool_put(&p, "box-c", fds[i]);
        }
        tap_ok(!is_open(fds[AB_INITPOOL_PER_BOX]), "a box keeps at most %d: the next is closed",
               AB_INITPOOL_PER_BOX);
        int got = 0;
        while (ab_initpool_take(&p, "box-c") >= 0)
                got++;
        TAP_IS_INT(got, AB_INITPOOL_PER_BOX, "... and that many come back");
        for (int i = 0; i < AB_INITPOOL_PER_BOX; i++) {
                close(fds[i]);
                close(peers[i]);
        }
        close(peers[AB_INITPOOL_PER_BOX]);

        /* in all: the oldest makes room */
        int all[AB_INITPOOL_SLOTS + 1], allp[AB_INITPOOL_SLOTS + 1];
        char id[32];
        for (int i = 0; i <= AB_INITPOOL_SLOTS; i++) {
                all[i] = pair(&allp[i]);
                snprintf(id, sizeof(id), "box-%d", i);
                ab_initpool_put(&p, id, all[i]);
                if (i == 0)
                        usleep(2000); /* box-0 is the oldest */
        }
        tap_ok(!is_open(all[0]), "a full pool closes its oldest connection for a new one");
        snprintf(id, sizeof(id), "box-%d", AB_INITPOOL_SLOTS);
        TAP_IS_INT(ab_initpool_take(&p, id), all[AB_INITPOOL_SLOTS], "... which is kept");

        /* drop */
        ab_initpool_drop(&p, "box-1");
        tap_ok(!is_open(all[1]), "drop closes the box's connections");
        TAP_IS_INT(ab_initpool_take(&p, "box-1"), -1, "... and none comes back");
        tap_ok(is_open(all[2]), "... leaving other boxes'");

        /* an id longer than a slot holds is not kept */
        int pl, l = pair(&pl);
        char longid[100];
        memset(longid, 'a', sizeof(longid) - 1);
        longid[sizeof(longid) - 1] = 0;
        ab_initpool_put(&p, longid, l);
        tap_ok(!is_open(l), "an over-long id: the connection is closed, not kept");
        close(pl);

        ab_initpool_clear(&p);
        tap_ok(!is_open(all[2]), "clear closes every kept connection");
        for (int i = 0; i <= AB_INITPOOL_SLOTS; i++)
                close(allp[i]);
        close(all[AB_INITPOOL_SLOTS]);
        pthread_mutex_destroy(&p.mu);
        return tap_done();
}

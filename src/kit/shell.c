/* shell.c - a front's shell on a terminal of a box, and what init kept of
 * a terminal's output (kit/shell.h). */
#include "kit/shell.h"

#include "base/util.h"

#include <poll.h>
#include <stdlib.h>
#include <string.h>

int kit_shell_open(ab_manager *m, const char *box, const char *scope, const char *tag,
                   const char *cwd, char **tid, ab_err **err)
{
        static const char *const argv[] = {"bash",        "--noprofile", "--norc",
                                           "--noediting", "-i",          NULL};
        /* The end mark comes from PROMPT_COMMAND, which runs when the line
         * is done, also when ^C made the shell drop the rest of it. */
        static const char *const env[] = {
            "PS1=",
            "PS2=",
            "PS0=",
            "TERM=dumb",
            "HISTFILE=/dev/null",
            "PROMPT_COMMAND=printf '\\036E%s:%d\\036' \"${__ab_nonce:-none}\" \"$?\"",
            NULL};
        abc_term_req q = {
            .argv = argv, .env = env, .cwd = cwd, .cols = 1000, .rows = 50, .tag = tag};
        abc_term_info info = {0};
        if (ab_manager_term_open_id(m, box, scope, &q, &info, err) < 0)
                return -1;
        static const char setup[] = "stty -echo -onlcr 2>/dev/null; set +m\n";
        int rc = ab_manager_term_input(m, box, scope, info.id, setup, sizeof(setup) - 1, err);
        if (rc == 0)
                *tid = steal_pointer(&info.id);
        else
                ab_manager_term_close(m, box, scope, info.id, NULL);
        abc_term_info_clear(&info);
        return rc;
}

int kit_term_kept(ab_manager *m, const char *box, const char *scope, const char *tid,
                  abc_term_info *t, ab_buf *out, ab_err **err)
{
        *t = (abc_term_info){0};
        ab_use u;
        if (ab_manager_use_begin(m, box, scope, &u, err) < 0)
                return -1;
        _cleanup_close_ int fd = ab_manager_use_connect(m, &u, err);
        abc_term_stream *st = NULL;
        int rc = fd < 0 ? -1 : abc_term_snapshot(fd, tid, t, &st, err);
        for (int waited = 0; rc == 0;) {
                abc_term_event ev;
                int k = abc_term_next(st, &ev);
                if (k > 0 && ev.kind == ABC_TERM_OUTPUT) {
                        ab_buf_add(out, ev.data, ev.len);
                        continue;
                }
                if (k != 0)
                        break; /* EOF: all of it */
                struct pollfd pf = {.fd = fd, .events = POLLIN};
                if (waited >= 10000 || poll(&pf, 1, 1000) < 0) {
                        rc = ab_err_set(err, AB_E_UNAVAILABLE, 0, "init did not answer");
                        break;
                }
                waited += 1000;
        }
        abc_term_stream_free(st);
        ab_manager_use_end(m, &u);
        return rc;
}

typedef struct kit_claim_entry {
        struct kit_claim_entry *next;
        char *box, *sid;
} kit_claim_entry;

bool kit_claim(kit_claims *c, const char *box, const char *sid)
{
        pthread_mutex_lock(&c->lock);
        bool busy = false;
        for (kit_claim_entry *k = c->head; k && !busy; k = k->next)
                busy = !strcmp(k->box, box) && !strcmp(k->sid, sid);
        if (!busy) {
                kit_claim_entry *k = xzalloc(sizeof(*k));
                k->box = xstrdup(box);
                k->sid = xstrdup(sid);
                k->next = c->head;
                c->head = k;
        }
        pthread_mutex_unlock(&c->lock);
        return !busy;
}

void kit_release(kit_claims *c, const char *box, const char *sid)
{
        pthread_mutex_lock(&c->lock);
        for (kit_claim_entry **l = &c->head; *l; l = &(*l)->next) {
                kit_claim_entry *k = *l;
                if (!strcmp(k->box, box) && !strcmp(k->sid, sid)) {
                        *l = k->next;
                        free(k->box);
                        free(k->sid);
                        free(k);
                        break;
                }
        }
        pthread_mutex_unlock(&c->lock);
}

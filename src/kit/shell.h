/* shell.h - what the fronts' shell sessions share (kit/shell.c): a bash
 * kept on a terminal of a box by its init (so it outlives requests and a
 * restart of the server), into which a front types one line per command
 * between marks of its own; and what init kept of a terminal's output.
 * OpenSandbox's bash sessions and AIO's shell sessions use both. */
#ifndef AB_KIT_SHELL_H
#define AB_KIT_SHELL_H

#include "base/buf.h"
#include "core/manager.h"

#include <pthread.h>
#include <stdbool.h>

/* Starts a bash on a terminal of box (scope as everywhere): no echo, no
 * prompt, no job control, no history file, TERM=dumb; after each line its
 * PROMPT_COMMAND prints the end mark "\036E<nonce>:<$?>\036", where nonce
 * is the shell's variable __ab_nonce (a front sets it in the line it
 * types). Tagged with tag (at most ABC_TERM_TAG_MAX bytes: how the front
 * finds it again), in cwd (NULL: /workspace). *tid gets the terminal's id
 * (free it). Errors as ab_manager_term_open_id's (AB_E_CONFLICT: the box
 * holds as many terminals as init keeps). */
int kit_shell_open(ab_manager *m, const char *box, const char *scope, const char *tag,
                   const char *cwd, char **tid, ab_err **err);

/* Appends to *out what the box's init kept of terminal or process tid's
 * output (its ring: a terminal's last 64 KiB), on a use of its own; *t
 * gets its info (release it with abc_term_info_clear). AB_E_UNAVAILABLE
 * when init does not answer within 10 s. */
int kit_term_kept(ab_manager *m, const char *box, const char *scope, const char *tid,
                  abc_term_info *t, ab_buf *out, ab_err **err);

/* Sessions in use by calls of this server (box and session id pairs):
 * what lets a front answer 409 to a second command in a session at once.
 * Static storage: `static kit_claims x = KIT_CLAIMS_INIT;`. Thread-safe. */
typedef struct kit_claims {
        pthread_mutex_t lock;
        struct kit_claim_entry *head;
} kit_claims;
#define KIT_CLAIMS_INIT                                                                            \
        {                                                                                          \
                PTHREAD_MUTEX_INITIALIZER, NULL                                                    \
        }

/* Claims session sid of box: false when it is claimed already. */
bool kit_claim(kit_claims *c, const char *box, const char *sid);
/* Releases a claim of kit_claim (none: nothing). */
void kit_release(kit_claims *c, const char *box, const char *sid);

#endif

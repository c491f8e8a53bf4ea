/* term.h - the loop that pumps an attached terminal (ab_term_attach)
 * into a front: E2B's PTY processes, OpenSandbox's session commands and
 * agentbox's terminal WebSocket each give it their callbacks, so how a
 * terminal's stream is drained, waited on and ended is written once. */
#ifndef AB_KIT_TERM_H
#define AB_KIT_TERM_H

#include "core/manager.h"

/* How a pump ended. */
typedef enum {
        KIT_TERM_EXITED = 1, /* the program exited (*exit_code) */
        KIT_TERM_TIMED_OUT,  /* init killed the program at its timeout (*exit_code) */
        KIT_TERM_CLOSED,     /* the terminal was closed */
        KIT_TERM_GONE,       /* the stream ended without a word: the box stopped, init went away */
        KIT_TERM_STOPPED,    /* a callback stopped it */
        KIT_TERM_FAILED,     /* poll failed */
} kit_term_end;

typedef struct kit_term_pump {
        /* Each chunk of output (valid during the call) and its stream (1: a
         * terminal's or stdout, 2: stderr); nonzero stops the pump.
         * Required. */
        int (*output)(void *ud, int stream, const void *data, size_t len);
        /* Called with nothing left to read, before each wait: polled is what
         * the last wait returned (-1 before the first, 0 when it timed out)
         * and extra_revents what it saw on extra_fd. Nonzero stops the pump.
         * Optional. */
        int (*idle)(void *ud, int polled, short extra_revents);
        int extra_fd;       /* waited on with the terminal (-1: none) */
        short extra_events; /* for extra_fd: POLLIN, POLLRDHUP, ... */
        int tick_ms;        /* the longest wait (-1: until something happens) */
} kit_term_pump;

/* Relays a's events to p's callbacks (ud is theirs) until one of
 * kit_term_end happens. *exit_code is set for KIT_TERM_EXITED and
 * KIT_TERM_TIMED_OUT only. Runs in
 * the caller's thread, blocking; does not detach a. */
kit_term_end kit_term_pump_run(ab_term_attach *a, const kit_term_pump *p, void *ud, int *exit_code);

#endif

/* term.c - the loop that pumps an attached terminal into a front
 * (kit/term.h). */
#include "kit/term.h"

#include <poll.h>

kit_term_end kit_term_pump_run(ab_term_attach *a, const kit_term_pump *p, void *ud, int *exit_code)
{
        int polled = -1;
        short extra = 0;
        for (;;) {
                abc_term_event ev;
                int k;
                /* frames may be buffered: drain before waiting */
                while ((k = abc_term_next(a->stream, &ev)) > 0) {
                        if (ev.kind == ABC_TERM_OUTPUT) {
                                if (p->output(ud, ev.stream, ev.data, ev.len))
                                        return KIT_TERM_STOPPED;
                                continue;
                        }
                        if (ev.kind != ABC_TERM_EXIT)
                                return KIT_TERM_CLOSED;
                        *exit_code = ev.exit_code;
                        return ev.timed_out ? KIT_TERM_TIMED_OUT : KIT_TERM_EXITED;
                }
                if (k < 0)
                        return KIT_TERM_GONE;
                if (p->idle && p->idle(ud, polled, extra))
                        return KIT_TERM_STOPPED;
                struct pollfd pf[2] = {{.fd = a->fd, .events = POLLIN},
                                       {.fd = p->extra_fd, .events = p->extra_events}};
                polled = poll(pf, p->extra_fd >= 0 ? 2 : 1, p->tick_ms);
                if (polled < 0 && errno != EINTR)
                        return KIT_TERM_FAILED;
                extra = polled > 0 && p->extra_fd >= 0 ? pf[1].revents : 0;
        }
}

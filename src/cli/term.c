/* Terminals from the command line: `agentbox exec -t` (a program on a
 * terminal in the box, relayed to this process's own terminal, as
 * `docker exec -it` does) and `agentbox attach ID TID` (an existing
 * terminal, as made by the API). The local terminal goes to raw mode while
 * input is relayed, window size changes follow on SIGWINCH, and the
 * program's exit code is ours. */
#include "cli/cli.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>

typedef enum { R_EXIT, R_CLOSED, R_GONE, R_DETACHED, R_TIMEOUT, R_SIGNAL, R_IO } relay_end;

static int sig_pipe[2] = {-1, -1};

static void on_sig(int sig)
{
        int e = errno;
        unsigned char c = (unsigned char)sig;
        (void)!write(sig_pipe[1], &c, 1);
        errno = e;
}

static void catch_signals(bool on)
{
        static const int sigs[] = {SIGWINCH, SIGINT, SIGTERM, SIGHUP};
        struct sigaction sa = {.sa_handler = on ? on_sig : SIG_DFL, .sa_flags = SA_RESTART};
        sigemptyset(&sa.sa_mask);
        for (size_t i = 0; i < AB_ARRAY_LEN(sigs); i++)
                sigaction(sigs[i], &sa, NULL);
}

/* The window size of our terminal (stdin, else stdout), or 80 x 24. */
static void window_size(uint32_t *cols, uint32_t *rows)
{
        struct winsize ws = {0};
        if ((ioctl(STDIN_FILENO, TIOCGWINSZ, &ws) < 0 || !ws.ws_col) &&
            (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) < 0 || !ws.ws_col))
                ws = (struct winsize){.ws_col = 80, .ws_row = 24};
        *cols = ws.ws_col > 1000 ? 1000 : ws.ws_col;
        *rows = !ws.ws_row ? 24 : ws.ws_row > 1000 ? 1000 : ws.ws_row;
}

typedef struct relay {
        ab_term_attach *a;
        bool input;        /* relay our stdin */
        bool detach_keys;  /* ctrl-p ctrl-q detaches */
        uint64_t deadline; /* monotonic ms, 0 = none */
        int exit_code;
        int signal;
        bool pending_p; /* a ctrl-p waits for the next byte */
} relay;

/* Our stdin bytes to the terminal, minus the detach keys. 1 when they came. */
static int relay_input(relay *r, const uint8_t *p, size_t n)
{
        uint8_t out[4096 + 1];
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
                if (r->detach_keys && r->pending_p) {
                        r->pending_p = false;
                        if (p[i] == 0x11) /* ctrl-q */
                                return 1;
                        out[k++] = 0x10;
                }
                if (r->detach_keys && p[i] == 0x10) {
                        r->pending_p = true;
                        continue;
                }
                out[k++] = p[i];
        }
        if (k && abc_term_input(r->a->stream, out, k) < 0)
                return -1;
        return 0;
}

static relay_end relay_run(relay *r)
{
        bool in_open = r->input;
        for (;;) {
                abc_term_event ev;
                int k;
                while ((k = abc_term_next(r->a->stream, &ev)) > 0) {
                        if (ev.kind == ABC_TERM_OUTPUT) {
                                if (ab_write_all(STDOUT_FILENO, ev.data, ev.len) < 0)
                                        return R_IO;
                        } else if (ev.kind == ABC_TERM_EXIT) {
                                r->exit_code = ev.exit_code;
                                return R_EXIT;
                        } else {
                                return R_CLOSED;
                        }
                }
                if (k < 0)
                        return R_GONE;
                int wait = -1;
                if (r->deadline) {
                        uint64_t now = ab_now_ms();
                        if (now >= r->deadline)
                                return R_TIMEOUT;
                        wait = (int)(r->deadline - now);
                }
                struct pollfd p[3] = {{.fd = r->a->fd, .events = POLLIN},
                                      {.fd = sig_pipe[0], .events = POLLIN},
                                      {.fd = in_open ? STDIN_FILENO : -1, .events = POLLIN}};
                if (poll(p, 3, wait) < 0 && errno != EINTR)
                        return R_IO;
                if (p[1].revents) {
                        unsigned char sigs[16];
                        ssize_t n = read(sig_pipe[0], sigs, sizeof(sigs));
                        for (ssize_t i = 0; i < n; i++) {
                                if (sigs[i] == SIGWINCH) {
                                        uint32_t c, rw;
                                        window_size(&c, &rw);
                                        (void)!abc_term_send_resize(r->a->stream, c, rw);
                                } else {
                                        r->signal = sigs[i];
                                        return R_SIGNAL;
                                }
                        }
                }
                if (p[2].revents) {
                        uint8_t buf[4096];
                        ssize_t n = read(STDIN_FILENO, buf, sizeof(buf));
                        if (n < 0 && (errno == EINTR || errno == EAGAIN))
                                continue;
                        if (n <= 0) {
                                /* Our input ended: for our own session, what a
                                 * terminal's ^D says; an attached terminal is
                                 * someone else's, left as it is. */
                                in_open = false;
                                if (!r->detach_keys)
                                        (void)!abc_term_input(r->a->stream, "\x04", 1);
                                continue;
                        }
                        int d = relay_input(r, buf, (size_t)n);
                        if (d > 0)
                                return R_DETACHED;
                        if (d < 0)
                                return R_GONE;
                }
        }
}

/* Relays the attached terminal with our terminal in raw mode (when input is
 * relayed and stdin is one). */
static relay_end relay_tty(relay *r)
{
        struct termios saved, raw;
        bool restore = false;
        if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
                return R_IO;
        if (r->input && isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &saved) == 0) {
                raw = saved;
                cfmakeraw(&raw);
                restore = tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0; /* keeps type-ahead */
        }
        catch_signals(true);
        signal(SIGPIPE, SIG_IGN);
        relay_end end = relay_run(r);
        catch_signals(false);
        if (restore)
                tcsetattr(STDIN_FILENO, TCSADRAIN, &saved);
        close(sig_pipe[0]);
        close(sig_pipe[1]);
        sig_pipe[0] = sig_pipe[1] = -1;
        return end;
}

int cli_term_exec(cli_local *l, ab_use *u, const abc_term_req *req, bool input, uint64_t timeout_ms)
{
        _cleanup_err_ ab_err *e = NULL;
        abc_term_req q = *req;
        window_size(&q.cols, &q.rows);
        abc_term_info t;
        if (ab_manager_term_open(l->mgr, u, &q, &t, &e) < 0)
                return cli_fail(&e);
        ab_term_attach a;
        if (ab_manager_term_attach_use(l->mgr, u, t.id, &a, &e) < 0) {
                (void)!ab_manager_term_close(l->mgr, u->rec.id, NULL, t.id, NULL);
                abc_term_info_clear(&t);
                return cli_fail(&e);
        }
        relay r = {.a = &a, .input = input, .deadline = timeout_ms ? ab_now_ms() + timeout_ms : 0};
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        int64_t started = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
        relay_end end = relay_tty(&r);
        ab_manager_term_detach(l->mgr, &a);
        /* The terminal was this command's: it goes with it. */
        (void)!ab_manager_term_close(l->mgr, u->rec.id, NULL, t.id, NULL);
        abc_term_info_clear(&t);
        int code = end == R_EXIT ? r.exit_code : end == R_TIMEOUT ? 124 : -1;
        ab_manager_term_audit(l->mgr, u, q.argv, code, started);
        switch (end) {
        case R_EXIT:
                return r.exit_code;
        case R_TIMEOUT:
                fprintf(stderr,
                        "agentbox: command timed out after %llu ms; its processes were killed\n",
                        (unsigned long long)timeout_ms);
                return 124;
        case R_SIGNAL:
                return 128 + r.signal;
        case R_CLOSED:
                fprintf(stderr, "agentbox: the terminal was closed\n");
                return 137;
        default:
                fprintf(stderr, "agentbox: the terminal ended without an exit code (the box "
                                "stopped?)\n");
                return EXIT_AGENTBOX;
        }
}

static const char attach_help[] =
    "Usage: agentbox attach ID TID\n"
    "Attaches this terminal to terminal TID of box ID (one made through the API,\n"
    "POST /v1/sandboxes/ID/terminals): its recent output first, then live; what you\n"
    "type goes to it. Ctrl-P Ctrl-Q detaches (the terminal goes on). Exits with the\n"
    "terminal's exit code when its program exits, 0 when detached.\n";

int cli_attach(int argc, char **argv, const char *data)
{
        if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
                fputs(attach_help, stdout);
                return 0;
        }
        if (argc != 3)
                return cli_usage_error("attach needs a box id and a terminal id%s", "");
        const char *id = argv[1], *tid = argv[2];
        _cleanup_err_ ab_err *e = NULL;
        cli_local l;
        if (cli_local_open(&l, data, id, &e) < 0)
                return cli_fail(&e);
        ab_use u;
        if (cli_local_use(&l, id, &u, NULL, &e) < 0) {
                cli_local_close(&l);
                return cli_fail(&e);
        }
        ab_term_attach a;
        if (ab_manager_term_attach_use(l.mgr, &u, tid, &a, &e) < 0) {
                ab_manager_use_end(l.mgr, &u);
                cli_local_close(&l);
                return cli_fail(&e);
        }
        uint32_t c, rw;
        window_size(&c, &rw);
        if (isatty(STDIN_FILENO))
                (void)!abc_term_send_resize(a.stream, c, rw);
        relay r = {.a = &a, .input = true, .detach_keys = true};
        relay_end end = relay_tty(&r);
        ab_manager_term_detach(l.mgr, &a);
        ab_manager_use_end(l.mgr, &u);
        cli_local_close(&l);
        switch (end) {
        case R_EXIT:
                return r.exit_code;
        case R_DETACHED:
                fprintf(stderr, "\r\nagentbox: detached from %s (it goes on)\n", tid);
                return 0;
        case R_SIGNAL:
                return 128 + r.signal;
        case R_CLOSED:
                fprintf(stderr, "\r\nagentbox: the terminal was closed\n");
                return 0;
        default:
                fprintf(stderr, "\r\nagentbox: the terminal ended (the box stopped?)\n");
                return EXIT_AGENTBOX;
        }
}

/* grep.c - GREP (docs/protocol.md): the regex search of the grep tool, run
 * here in the box's session process so that the box's cgroup pays for it,
 * its deadline holds at every line, and it ends when the client hangs up.
 * The client (src/tools/grep.c) lists and filters the tree; this file only
 * reads the files it is given and matches their lines with PCRE2. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "init_int.h"

#include "base/buf.h"
#include "base/utf8.h"

#include <errno.h>
#include <fcntl.h>
#include <pcre2.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* How often the search looks whether the client is still there. */
#define HANGUP_CHECK_NS (50 * 1000000ull)

typedef struct grep_run {
        init_conn *c;
        pcre2_code *re;
        pcre2_match_data *md;
        pcre2_match_context *mc;
        uint64_t deadline_ns, checked_ns;
        uint32_t sent, count;
        bool truncated, timed_out, gone;
} grep_run;

/* True when the client hung up (or its socket broke): the search stops. */
static bool client_gone(grep_run *g)
{
        struct pollfd p = {.fd = g->c->fd, .events = POLLRDHUP};
        if (poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)))
                g->gone = true;
        return g->gone;
}

/* Sends one MATCH: the line without its break, at most
 * ABP_GREP_LINE_SUMMARY code points ("..." ending a cut one). */
static int send_match(grep_run *g, uint32_t index, uint64_t line, const char *s, size_t n)
{
        while (n && (s[n - 1] == '\n' || s[n - 1] == '\r'))
                n--;
        _cleanup_buf_ ab_buf t = {0};
        if (ab_utf8_count(s, n) <= ABP_GREP_LINE_SUMMARY) {
                ab_buf_add(&t, s, n);
        } else {
                ab_buf_add(&t, s, ab_utf8_offset(s, n, ABP_GREP_LINE_SUMMARY - 3));
                ab_buf_puts(&t, "...");
        }
        abp_buf b = {0};
        abp_match m = {.index = index, .line = line, .text = t.p, .len = t.n};
        int r = abp_enc_match(&b, &m);
        if (r == 0)
                r = init_send(g->c, &b);
        abp_buf_free(&b);
        if (r < 0)
                g->gone = true;
        return r;
}

/* Searches one file's text; false once the search must stop (cap, time,
 * client gone). */
static bool grep_text(grep_run *g, uint32_t index, const char *buf, size_t len)
{
        size_t clean_len;
        _cleanup_free_ char *text = ab_utf8_clean(buf, len, &clean_len);
        size_t i = 0;
        uint64_t ln = 0;
        while (i < clean_len) {
                uint64_t now = ab_now_ns();
                if (now > g->deadline_ns) {
                        g->timed_out = true;
                        return false;
                }
                if (now - g->checked_ns > HANGUP_CHECK_NS) {
                        g->checked_ns = now;
                        if (client_gone(g))
                                return false;
                }
                const char *nl = memchr(text + i, '\n', clean_len - i);
                size_t end = nl ? (size_t)(nl - text) + 1 : clean_len; /* with its "\n" */
                ln++;
                const char *line = text + i;
                size_t n = end - i;
                i = end;
                if (ab_utf8_count(line, n) > ABP_GREP_LINE_MAX)
                        continue;
                int rc = pcre2_match(g->re, (PCRE2_SPTR)line, n, 0, 0, g->md, g->mc);
                if (rc < 0)
                        continue; /* no match, or over the match limit: not a match */
                if (g->sent >= g->count) {
                        g->truncated = true;
                        return false;
                }
                if (send_match(g, index, ln, line, n) < 0)
                        return false;
                g->sent++;
        }
        return true;
}

/* Reads one file whole (when it is a regular file of at most max bytes and
 * not binary) and searches it; false once the search must stop. */
static bool grep_file(grep_run *g, const init_conf *conf, uint32_t index, const char *path,
                      uint64_t max)
{
        /* O_NONBLOCK: a FIFO put where a file was listed must not block. */
        int fd = init_open(conf, path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0);
        if (fd < 0)
                return true; /* unreadable: skipped */
        _cleanup_close_ int cfd = fd;
        struct stat st;
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size > max)
                return true;
        size_t cap = (size_t)st.st_size + 1;
        _cleanup_free_ char *buf = xmalloc(cap);
        size_t len = 0;
        while (len < cap) {
                ssize_t k = read(fd, buf + len, cap - len);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0)
                        return true;
                if (k == 0)
                        break;
                len += (size_t)k;
        }
        if (len > max) /* it grew since fstat */
                return true;
        if (memchr(buf, 0, len < ABP_GREP_BINARY_SNIFF ? len : ABP_GREP_BINARY_SNIFF))
                return true;
        return grep_text(g, index, buf, len);
}

static void grep_run_free(grep_run *g)
{
        pcre2_match_context_free(g->mc);
        pcre2_match_data_free(g->md);
        pcre2_code_free(g->re);
}

void init_grep(init_conn *c, const abp_frame *f, const init_conf *conf)
{
        __attribute__((cleanup(abp_grep_req_clear))) abp_grep_req q;
        if (abp_dec_grep(f, &q) < 0) {
                init_send_error(c, "invalid_argument", "malformed GREP");
                return;
        }
        __attribute__((cleanup(grep_run_free))) grep_run g = {.c = c, .count = q.count};
        uint32_t opts = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF;
        opts |= (q.flags & ABP_G_LITERAL) ? PCRE2_LITERAL : PCRE2_UCP; /* Unicode \w, \d, ... */
        if (!(q.flags & ABP_G_CASE_SENSITIVE))
                opts |= PCRE2_CASELESS;
        int ecode;
        PCRE2_SIZE eoff;
        g.re = pcre2_compile((PCRE2_SPTR)q.pattern, q.pattern_len, opts, &ecode, &eoff, NULL);
        if (!g.re) {
                PCRE2_UCHAR msg[256];
                pcre2_get_error_message(ecode, msg, sizeof(msg));
                init_send_error(c, "invalid_argument", "Invalid regex pattern: %s at position %zu",
                                (char *)msg, (size_t)eoff);
                return;
        }
        g.md = pcre2_match_data_create_from_pattern(g.re, NULL);
        g.mc = pcre2_match_context_create(NULL);
        if (!g.md || !g.mc) {
                init_send_error(c, "internal", "out of memory");
                return;
        }
        pcre2_set_match_limit(g.mc, ABP_GREP_MATCH_LIMIT);
        uint32_t ms = q.timeout_ms ? q.timeout_ms : 30000;
        g.deadline_ns = ab_now_ns() + (uint64_t)ms * 1000000u;
        /* A backstop should one call outlast the checks: the session dies,
         * the client sees the connection end. */
        signal(SIGALRM, SIG_DFL);
        alarm(ms / 1000 + 10);

        for (size_t i = 0; i < q.n_paths && i < UINT32_MAX; i++) {
                if (ab_now_ns() > g.deadline_ns) {
                        g.timed_out = true;
                        break;
                }
                if (client_gone(&g) || !grep_file(&g, conf, (uint32_t)i, q.paths[i], q.size_max))
                        break;
        }
        alarm(0);
        if (g.gone)
                return;
        abp_buf b = {0};
        abp_frame_begin(&b, ABP_OK);
        abp_put_u32(&b, ABP_F_TRUNCATED, g.truncated);
        abp_put_u32(&b, ABP_F_TIMED_OUT, g.timed_out);
        if (abp_frame_end(&b) == 0)
                (void)!init_send(c, &b);
        abp_buf_free(&b);
}

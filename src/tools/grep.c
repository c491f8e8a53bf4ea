/* grep.c - DeerFlow's grep (sandbox/search.py find_grep_matches): PCRE2 on
 * the host over file contents read through the box's init. The regex runs
 * here, not in the box, but only ever sees bytes init handed over. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tools/tools_int.h"

#include <pcre2.h>

#define LINE_SUMMARY   200                 /* chars shown of a matching line */
#define LINE_MAX_CHARS (LINE_SUMMARY * 10) /* longer lines are skipped (ReDoS, minified files) */
#define BINARY_SNIFF   8192
#define MATCH_LIMIT    1000000 /* backtracking budget per line: over it, no match */
/* A search reads one file per round trip to the box's init: a whole
 * distribution's tree takes minutes. It stops after this long with what it
 * found, saying so, rather than outliving its caller. */
#define GREP_TIME_MAX_S 30

typedef struct grep_state {
        pcre2_code *re;
        pcre2_match_data *md;
        pcre2_match_context *mc;
        ab_buf lines;
        size_t found, max;
        bool truncated;
} grep_state;

/* truncate_line: the line without its break, at most LINE_SUMMARY chars. */
static void add_line(ab_buf *b, const char *s, size_t n)
{
        while (n && (s[n - 1] == '\n' || s[n - 1] == '\r'))
                n--;
        if (utf8_count(s, n) <= LINE_SUMMARY) {
                ab_buf_add(b, s, n);
                return;
        }
        ab_buf_add(b, s, utf8_offset(s, n, LINE_SUMMARY - 3));
        ab_buf_puts(b, "...");
}

/* Searches one file's text; false once the result cap is passed. */
static bool grep_text(grep_state *g, const char *display, const char *buf, size_t len)
{
        size_t clean_len;
        _cleanup_free_ char *text = utf8_clean(buf, len, &clean_len);
        size_t i = 0, ln = 0;
        while (i < clean_len) {
                const char *nl = memchr(text + i, '\n', clean_len - i);
                size_t end = nl ? (size_t)(nl - text) + 1 : clean_len; /* with its "\n" */
                ln++;
                const char *line = text + i;
                size_t n = end - i;
                i = end;
                if (utf8_count(line, n) > LINE_MAX_CHARS)
                        continue;
                int rc = pcre2_match(g->re, (PCRE2_SPTR)line, n, 0, 0, g->md, g->mc);
                if (rc < 0)
                        continue; /* no match, or a match limit: not a match */
                if (g->found == g->max) {
                        g->truncated = true;
                        return false;
                }
                g->found++;
                ab_buf_printf(&g->lines, "\n%s:%zu: ", display, ln);
                add_line(&g->lines, line, n);
        }
        return true;
}

/* Whether dir is /proc, /sys or /dev or below: kernel pseudo-files, where a
 * search from above them would read thousands of files that hold no text of
 * the agent's (a container shows the host's whole sysfs) and some of which
 * block. Searched only when named. */
static bool pseudo_dir(const char *dir)
{
        static const char *const roots[] = {"/proc", "/sys", "/dev"};
        for (size_t i = 0; i < AB_ARRAY_LEN(roots); i++) {
                size_t n = strlen(roots[i]);
                if (strncmp(dir, roots[i], n) == 0 && (dir[n] == '/' || dir[n] == '\0'))
                        return true;
        }
        return false;
}

/* Reads and searches one file; -1 only when the box is gone. */
static int grep_file(tool_ctx *c, grep_state *g, const char *send, const char *display,
                     ab_err **err)
{
        _cleanup_err_ ab_err *e = NULL;
        _cleanup_free_ char *buf = NULL;
        size_t len;
        bool over;
        if (read_whole(c, send, c->lim.grep_file_max, &buf, &len, &over, &e) < 0) {
                if (tool_err_is_fatal(e)) {
                        if (err && !*err)
                                *err = steal_pointer(&e);
                        return -1;
                }
                return 0; /* unreadable: skipped, as DeerFlow skips OSError */
        }
        if (over || memchr(buf, 0, len < BINARY_SNIFF ? len : BINARY_SNIFF))
                return 0;
        grep_text(g, display, buf, len);
        return 0;
}

static void grep_free(grep_state *g)
{
        pcre2_match_context_free(g->mc);
        pcre2_match_data_free(g->md);
        pcre2_code_free(g->re);
        free(g->lines.p);
}

int tool_grep(tool_ctx *c, json_t *args, ab_tool_result *out, ab_err **err)
{
        const char *pattern, *path, *glob = NULL;
        size_t plen;
        bool literal = false, case_sensitive = false;
        int64_t max = 100;
        if (arg_str(args, "pattern", true, &pattern, &plen, err) < 0 ||
            arg_path(args, "path", &path, err) < 0 ||
            arg_str(args, "glob", false, &glob, NULL, err) < 0 ||
            arg_bool(args, "literal", &literal, err) < 0 ||
            arg_bool(args, "case_sensitive", &case_sensitive, err) < 0 ||
            arg_int(args, "max_results", false, &max, err) < 0)
                return -1;
        if (max <= 0)
                max = 100;
        if (max > 500)
                max = 500;
        if (glob && !glob[0])
                glob = NULL;

        __attribute__((cleanup(grep_free))) grep_state g = {.max = (size_t)max};
        uint32_t opts = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF;
        opts |= literal ? PCRE2_LITERAL : PCRE2_UCP; /* UCP: Unicode \w, \d, ... as Python's re */
        if (!case_sensitive)
                opts |= PCRE2_CASELESS;
        int ecode;
        PCRE2_SIZE eoff;
        g.re = pcre2_compile((PCRE2_SPTR)pattern, plen, opts, &ecode, &eoff, NULL);
        if (!g.re) {
                PCRE2_UCHAR msg[256];
                pcre2_get_error_message(ecode, msg, sizeof(msg));
                result_errorf(out, "Error: Invalid regex pattern: %s at position %zu", (char *)msg,
                              (size_t)eoff);
                return 0;
        }
        g.md = pcre2_match_data_create_from_pattern(g.re, NULL);
        g.mc = pcre2_match_context_create(NULL);
        if (!g.md || !g.mc)
                abort(); /* out of memory, as xmalloc */
        pcre2_set_match_limit(g.mc, MATCH_LIMIT);

        _cleanup_free_ char *root = path_display(path);
        const char *send = path_for_box(path);
        _cleanup_err_ ab_err *e = NULL;
        abc_dirent *d = NULL;
        size_t n = 0;
        if (list_tree(c, send, &d, &n, &e) < 0) {
                if (tool_err_is_fatal(e)) {
                        if (err && !*err)
                                *err = steal_pointer(&e);
                        return -1;
                }
                if (tool_err_is(e, AB_E_INVALID, "not a directory")) {
                        /* A single file; the glob filter sees its name. */
                        const char *base = strrchr(root, '/');
                        if ((!glob || glob_path_matches(glob, base ? base + 1 : root)) &&
                            grep_file(c, &g, send, root, err) < 0)
                                return -1;
                } else if (e->code == AB_E_NOT_FOUND) {
                        result_errorf(out, "Error: Directory not found: %s", path);
                        return 0;
                } else if (e->code == AB_E_PERMISSION) {
                        result_errorf(out, "Error: Permission denied: %s", path);
                        return 0;
                } else {
                        result_errorf(out, "Error: Unexpected error searching file contents: %s",
                                      e->msg);
                        return 0;
                }
        }
        int r = 0;
        bool in_pseudo = pseudo_dir(send);
        uint64_t deadline = ab_now_ns() + (uint64_t)GREP_TIME_MAX_S * 1000000000ull;
        bool out_of_time = false;
        for (size_t i = 0; i < n && !g.truncated; i++) {
                if ((i & 63) == 0 && ab_now_ns() > deadline) {
                        out_of_time = true;
                        break;
                }
                /* Symlinks are skipped (as DeerFlow), so a link never leads the
                 * search elsewhere; so are the ignore list and huge files. */
                if (d[i].st.type != ABC_FILE || ignored_path(d[i].path) ||
                    d[i].st.size > c->lim.grep_file_max)
                        continue;
                if (glob && !glob_path_matches(glob, d[i].path))
                        continue;
                _cleanup_free_ char *sendp = path_join(send, d[i].path);
                if (!in_pseudo && pseudo_dir(sendp))
                        continue;
                _cleanup_free_ char *disp = path_join(root, d[i].path);
                if ((r = grep_file(c, &g, sendp, disp, err)) < 0)
                        break;
        }
        abc_dirents_free(d, n);
        if (r < 0)
                return -1;
        if (g.found == 0) {
                result_set(out,
                           out_of_time ? xasprintf("No matches found under %s (the search stopped "
                                                   "after %d s: narrow the path or add a glob "
                                                   "filter)",
                                                   path, GREP_TIME_MAX_S)
                                       : xasprintf("No matches found under %s", path),
                           false);
                return 0;
        }
        _cleanup_buf_ ab_buf b = {0};
        ab_buf_printf(&b, "Found %zu matches under %s", g.found, path);
        if (g.truncated)
                ab_buf_printf(&b, " (showing first %zu)", g.found);
        ab_buf_add(&b, g.lines.p, g.lines.n);
        if (g.truncated)
                ab_buf_puts(&b, "\nResults truncated. Narrow the path or add a glob filter.");
        else if (out_of_time)
                ab_buf_printf(&b,
                              "\nThe search stopped after %d s. Narrow the path or add a glob "
                              "filter.",
                              GREP_TIME_MAX_S);
        result_set(out, ab_buf_steal(&b), false);
        return 0;
}

/* grep.c - DeerFlow's grep (sandbox/search.py find_grep_matches). The tree
 * is listed and filtered here (ignore list, glob, sizes, symlinks skipped);
 * the regex runs in the box (init's GREP, src/init/grep.c), so the box's
 * cgroup pays for it, its deadline holds inside a file, and it stops when
 * the caller's client goes away. */
#include "tools/tools_int.h"

/* Bytes of paths per GREP request (below the protocol's 1 MiB frame). */
#define GREP_BATCH_BYTES (768u * 1024)

typedef struct grep_state {
        ab_buf lines;
        size_t found, max;
        bool truncated, out_of_time;
        char **display; /* the current request's paths as shown */
} grep_state;

static void grep_free(grep_state *g)
{
        free(g->lines.p);
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

static int on_match(void *ud, size_t index, uint64_t line, const char *text, size_t len)
{
        grep_state *g = ud;
        g->found++;
        ab_buf_printf(&g->lines, "\n%s:%llu: ", g->display[index], (unsigned long long)line);
        ab_buf_add(&g->lines, text, len);
        return 0;
}

/* One GREP request over paths[0..n) (send forms; display forms alongside).
 * -1 with *err only when the box is gone or the caller left; an invalid
 * pattern is a result for the model (*bad set). */
static int grep_batch(tool_ctx *c, grep_state *g, const char *pattern, size_t plen, bool literal,
                      bool case_sensitive, char **send, char **display, size_t n,
                      uint64_t deadline_ms, ab_tool_result *out, bool *bad, ab_err **err)
{
        uint64_t now = ab_now_ms();
        if (now >= deadline_ms) {
                g->out_of_time = true;
                return 0;
        }
        g->display = display;
        abc_grep_req q = {
            .pattern = pattern,
            .pattern_len = plen,
            .literal = literal,
            .case_sensitive = case_sensitive,
            .paths = (const char *const *)send,
            .n_paths = n,
            .size_max = c->lim.grep_file_max,
            .count = (uint32_t)(g->max - g->found),
            .timeout_ms = (uint32_t)(deadline_ms - now),
            .gone = c->box->gone,
            .gone_ud = c->box->ud,
        };
        abc_grep_res res;
        _cleanup_err_ ab_err *e = NULL;
        if (tool_search(c, &q, on_match, g, &res, &e) < 0) {
                if (tool_err_is(e, AB_E_INVALID, "unknown request type")) {
                        /* a box started before init learnt GREP */
                        result_errorf(out, "Error: this box's agentbox-init is older than the "
                                           "server and cannot search; stop and start the box");
                        *bad = true;
                        return 0;
                }
                if (e->code == AB_E_INVALID) {
                        result_errorf(out, "Error: %s", e->msg);
                        *bad = true;
                        return 0;
                }
                if (err && !*err)
                        *err = steal_pointer(&e);
                return -1;
        }
        g->truncated = res.truncated;
        if (res.timed_out)
                g->out_of_time = true;
        return 0;
}

/* The files under path that grep searches, in listing order: regular
 * files only (symlinks are skipped, as DeerFlow does, so a link never leads
 * the search elsewhere), not on the ignore list, not over the size limit,
 * matching the glob, and not kernel pseudo-files unless the search starts
 * there. 0 with the lists; 1 with a result for the model (nothing to
 * search: not found, ...); -1 with *err when the box is gone. */
static int grep_candidates(tool_ctx *c, const char *path, const char *root, const char *send,
                           const char *glob, char ***sends, char ***shows, size_t *nf,
                           ab_tool_result *out, ab_err **err)
{
        _cleanup_err_ ab_err *e = NULL;
        abc_dirent *d = NULL;
        size_t n = 0;
        *nf = 0;
        if (list_tree(c, send, &d, &n, &e) < 0) {
                if (tool_err_is_fatal(e)) {
                        if (err && !*err)
                                *err = steal_pointer(&e);
                        return -1;
                }
                if (tool_err_is(e, AB_E_INVALID, "not a directory")) {
                        /* A single file; the glob filter sees its name. */
                        const char *base = strrchr(root, '/');
                        *sends = xcalloc(2, sizeof(char *));
                        *shows = xcalloc(2, sizeof(char *));
                        if (!glob || glob_path_matches(glob, base ? base + 1 : root)) {
                                (*sends)[0] = xstrdup(send);
                                (*shows)[0] = xstrdup(root);
                                *nf = 1;
                        }
                        return 0;
                }
                if (e->code == AB_E_NOT_FOUND)
                        result_errorf(out, "Error: Directory not found: %s", path);
                else if (e->code == AB_E_PERMISSION)
                        result_errorf(out, "Error: Permission denied: %s", path);
                else
                        result_errorf(out, "Error: Unexpected error searching file contents: %s",
                                      e->msg);
                return 1;
        }
        bool in_pseudo = pseudo_dir(send);
        *sends = xcalloc(n + 1, sizeof(char *));
        *shows = xcalloc(n + 1, sizeof(char *));
        for (size_t i = 0; i < n; i++) {
                if (d[i].st.type != ABC_FILE || ignored_path(d[i].path) ||
                    d[i].st.size > c->lim.grep_file_max)
                        continue;
                if (glob && !glob_path_matches(glob, d[i].path))
                        continue;
                char *sendp = path_join(send, d[i].path);
                if (!in_pseudo && pseudo_dir(sendp)) {
                        free(sendp);
                        continue;
                }
                (*sends)[*nf] = sendp;
                (*shows)[(*nf)++] = path_join(root, d[i].path);
        }
        abc_dirents_free(d, n);
        return 0;
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
        /* A search of a whole distribution's tree takes long: it stops after
         * grep_timeout_s with what it found, saying so, rather than outliving
         * its caller. */
        uint64_t deadline = ab_now_ms() + (uint64_t)c->lim.grep_timeout_s * 1000u;
        _cleanup_free_ char *root = path_display(path);
        const char *send = path_for_box(path);
        /* The files to search, as sent to init and as shown. */
        _cleanup_strv_ char **sends = NULL, **shows = NULL;
        size_t nf = 0;
        bool bad = false;
        int r = grep_candidates(c, path, root, send, glob, &sends, &shows, &nf, out, err);
        if (r < 0)
                return -1;
        if (r > 0) {
                /* No tree to search: the pattern's error still comes first. */
                ab_tool_result msg = *out;
                *out = (ab_tool_result){0};
                if (grep_batch(c, &g, pattern, plen, literal, case_sensitive, NULL, NULL, 0,
                               deadline, out, &bad, err) < 0) {
                        ab_tool_result_clear(&msg);
                        return -1;
                }
                if (bad)
                        ab_tool_result_clear(&msg);
                else
                        *out = msg;
                return 0;
        }
        size_t i = 0;
        do {
                size_t j = i, bytes = 0;
                while (j < nf &&
                       (j == i || bytes + abc_grep_path_cost(sends[j]) <= GREP_BATCH_BYTES))
                        bytes += abc_grep_path_cost(sends[j++]);
                if (grep_batch(c, &g, pattern, plen, literal, case_sensitive, sends + i, shows + i,
                               j - i, deadline, out, &bad, err) < 0)
                        return -1;
                if (bad)
                        return 0;
                i = j;
        } while (i < nf && !g.truncated && !g.out_of_time);
        bool out_of_time = g.out_of_time;
        if (g.found == 0) {
                result_set(out,
                           out_of_time ? xasprintf("No matches found under %s (the search stopped "
                                                   "after %d s: narrow the path or add a glob "
                                                   "filter)",
                                                   path, (int)c->lim.grep_timeout_s)
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
                              (int)c->lim.grep_timeout_s);
        result_set(out, ab_buf_steal(&b), false);
        return 0;
}

/* mock_rules.c - the mock backend's expectations file (backend.h,
 * ab_mock_opts): rules read, checked and reread when the file changes. */
#include "backend/mock_int.h"
#include "base/log.h"
#include "base/util.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

void mock_rules_clear(rules *r)
{
        for (size_t i = 0; i < r->n; i++) {
                free(r->v[i].command);
                if (r->v[i].has_re)
                        regfree(&r->v[i].re);
                free(r->v[i].out);
                free(r->v[i].err);
        }
        free(r->v);
        *r = (rules){0};
}

static char *json_bytes(const json_t *j, size_t *len)
{
        const char *s = json_string_value(j);
        *len = s ? json_string_length(j) : 0;
        char *p = xmalloc(*len + 1);
        if (s)
                memcpy(p, s, *len);
        p[*len] = '\0';
        return p;
}

static int rule_parse(const json_t *o, size_t i, rule *r, ab_err **err)
{
        const json_t *cmd = json_object_get(o, "command"), *re = json_object_get(o, "regex");
        const json_t *code = json_object_get(o, "exit_code"),
                     *delay = json_object_get(o, "delay_ms");
        if (!json_is_object(o))
                return ab_err_set(err, AB_E_INVALID, 0, "commands[%zu]: must be an object", i);
        if (!!cmd == !!re || (cmd && !json_is_string(cmd)) || (re && !json_is_string(re)))
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "commands[%zu]: give exactly one of \"command\" (exact text) "
                                  "and \"regex\" (POSIX extended), as a string",
                                  i);
        const char *keys[] = {"stdout", "stderr"};
        for (size_t k = 0; k < 2; k++) {
                const json_t *v = json_object_get(o, keys[k]);
                if (v && !json_is_string(v))
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "commands[%zu].%s: must be a string", i, keys[k]);
        }
        if (code && (!json_is_integer(code) || json_integer_value(code) < 0 ||
                     json_integer_value(code) > 255))
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "commands[%zu].exit_code: must be an integer 0..255", i);
        if (delay && (!json_is_integer(delay) || json_integer_value(delay) < 0 ||
                      json_integer_value(delay) > 3600000))
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "commands[%zu].delay_ms: must be an integer 0..3600000", i);
        if (re) {
                int rc = regcomp(&r->re, json_string_value(re), REG_EXTENDED | REG_NOSUB);
                if (rc != 0) {
                        char msg[160];
                        regerror(rc, &r->re, msg, sizeof(msg));
                        return ab_err_set(err, AB_E_INVALID, 0, "commands[%zu].regex: %s", i, msg);
                }
                r->has_re = true;
        } else {
                r->command = xstrdup(json_string_value(cmd));
        }
        r->out = json_bytes(json_object_get(o, "stdout"), &r->out_len);
        r->err = json_bytes(json_object_get(o, "stderr"), &r->err_len);
        r->exit_code = code ? (int)json_integer_value(code) : 0;
        r->delay_ms = delay ? (uint32_t)json_integer_value(delay) : 0;
        return 0;
}

/* Reads the expectations file: {"commands": [rule, ...]}. */
int mock_rules_load(const char *path, rules *out, ab_err **err)
{
        *out = (rules){0};
        struct stat st;
        if (stat(path, &st) < 0)
                return ab_err_set(err, AB_E_INVALID, errno, "mock expectations %s", path);
        json_error_t je;
        json_t *j = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
        if (!j)
                return ab_err_set(err, AB_E_INVALID, 0, "mock expectations %s: line %d: %s", path,
                                  je.line, je.text);
        const json_t *cmds = json_object_get(j, "commands");
        if (!json_is_object(j) || (cmds && !json_is_array(cmds))) {
                json_decref(j);
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "mock expectations %s: must be {\"commands\": [...]}", path);
        }
        size_t n = json_array_size(cmds);
        out->v = xcalloc(n ? n : 1, sizeof(*out->v));
        for (size_t i = 0; i < n; i++) {
                if (rule_parse(json_array_get(cmds, i), i, &out->v[i], err) < 0) {
                        out->n = i + 1;
                        mock_rules_clear(out);
                        json_decref(j);
                        return ab_err_wrap(err, "mock expectations %s", path);
                }
        }
        out->n = n;
        out->mtime = st.st_mtim;
        out->size = st.st_size;
        json_decref(j);
        return 0;
}

/* Rereads the file when it changed since it was read (tests rewrite it
 * between cases); a broken new version keeps the old rules. Under mu. */
void mock_rules_refresh(mock *m)
{
        struct stat st;
        if (!m->expect_path || stat(m->expect_path, &st) < 0)
                return;
        if (st.st_mtim.tv_sec == m->rules.mtime.tv_sec &&
            st.st_mtim.tv_nsec == m->rules.mtime.tv_nsec && st.st_size == m->rules.size)
                return;
        rules fresh;
        ab_err *e = NULL;
        if (mock_rules_load(m->expect_path, &fresh, &e) < 0) {
                ab_log(AB_LOG_WARN, "mock: expectations not reloaded", "error", e->msg, NULL);
                ab_err_free(&e);
                m->rules.mtime = st.st_mtim; /* warn once per version */
                m->rules.size = st.st_size;
                return;
        }
        mock_rules_clear(&m->rules);
        m->rules = fresh;
}

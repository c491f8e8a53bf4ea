/* toolcall.c - a tool call in a box through the manager's doors (toolcall.h). */
#include "kit/toolcall.h"

typedef struct use_conn {
        ab_manager *mgr;
        ab_use *use;
        const kit_tool_opts *o; /* or NULL */
} use_conn;

static int use_connect(void *ud, ab_err **err)
{
        use_conn *c = ud;
        return ab_manager_use_connect(c->mgr, c->use, err);
}

static int use_list(void *ud, const char *path, int depth, abc_dirent **out, size_t *n,
                    ab_err **err)
{
        use_conn *c = ud;
        return ab_manager_file_list(c->mgr, c->use, path, depth, out, n, err);
}

static int use_read(void *ud, const char *path, uint64_t length, abc_output_fn out, void *out_ud,
                    ab_err **err)
{
        use_conn *c = ud;
        return ab_manager_file_read(c->mgr, c->use, path, 0, length, out, out_ud, err);
}

static int use_write(void *ud, const char *path, const void *data, size_t len, uint32_t flags,
                     ab_err **err)
{
        use_conn *c = ud;
        return ab_manager_file_write(c->mgr, c->use, path, data, len, -1, flags, 0, err);
}

static int use_grep(void *ud, const abc_grep_req *q, abc_match_fn fn, void *fn_ud,
                    abc_grep_res *res, ab_err **err)
{
        use_conn *c = ud;
        return ab_manager_file_grep(c->mgr, c->use, q, fn, fn_ud, res, err);
}

static int use_exec(void *ud, const abc_exec_req *req, abc_output_fn out, void *out_ud,
                    abc_exec_res *res, ab_err **err)
{
        use_conn *c = ud;
        abc_exec_req q = *req;
        if (c->o && c->o->deadline_ms > 0) {
                int64_t left = c->o->deadline_ms - (int64_t)ab_now_ms();
                uint32_t cap = left < 1000 ? 1000 : left > UINT32_MAX ? UINT32_MAX : (uint32_t)left;
                if (!q.timeout_ms || q.timeout_ms > cap)
                        q.timeout_ms = cap;
        }
        if (c->o && c->o->cancel_fd >= 0 && !q.has_cancel) {
                q.has_cancel = true;
                q.cancel_fd = c->o->cancel_fd;
        }
        return ab_manager_exec(c->mgr, c->use, &q, out, out_ud, res, err);
}

static bool use_gone(void *ud)
{
        use_conn *c = ud;
        return c->o && c->o->gone && c->o->gone(c->o->gone_ud);
}

int kit_tool_call(ab_server *s, const char *scope, const char *id, const char *name, json_t *args,
                  const kit_tool_opts *o, ab_tool_result *out, ab_err **err)
{
        *out = (ab_tool_result){0};
        /* Before the box is touched: an unknown tool must not resume it. */
        if (!ab_tool_exists(name))
                return ab_err_set(err, AB_E_NOT_FOUND, 0, "unknown tool \"%s\"", name);
        ab_use u;
        if (ab_manager_use_begin(s->mgr, id, scope, &u, err) < 0)
                return -1;
        use_conn c = {.mgr = s->mgr, .use = &u, .o = o};
        ab_tool_box box = {
            .box_id = u.rec.id,
            .connect = use_connect,
            .exec = use_exec,
            .gone = use_gone,
            .list = use_list,
            .read = use_read,
            .write = use_write,
            .grep = use_grep,
            .ud = &c,
        };
        ab_tool_limits lim = s->cfg->tools;
        int rc = ab_tool_run(&box, &lim, name, args, out, err);
        ab_manager_use_end(s->mgr, &u);
        return rc;
}

/* Skills over HTTP (docs/api.md "Skills", docs/skills.md): list, get, the
 * progressive-loading prompt, validate (installed or uploaded), and the
 * admin-only install (PUT of a zip/tar) and delete. The work is in
 * src/skills; this file maps it to JSON and statuses. */
#include "rest/rest.h"
#include "skills/skills.h"

static int open_skills(ab_req *r, ab_skills *s, ab_err **err)
{
        return ab_skills_open(r->srv->cfg->data_dir, s, err);
}

static json_t *info_json(const ab_skill_info *i, bool flags)
{
        json_t *j = json_pack("{s:s,s:o,s:o}", "name", i->name, "description",
                              i->description ? json_bytes(i->description, strlen(i->description))
                                             : json_string(""),
                              "path", json_sprintf("/mnt/skills/%s/SKILL.md", i->name));
        if (flags) {
                json_object_set_new(j, "has_scripts", json_boolean(i->has_scripts));
                json_object_set_new(j, "has_templates", json_boolean(i->has_templates));
                json_object_set_new(j, "has_references", json_boolean(i->has_references));
        }
        return j;
}

/* Lists the skills; answers the error itself when it fails. */
static bool list(ab_req *r, ab_skill_info **v, size_t *n, enum MHD_Result *ret)
{
        ab_err *e = NULL;
        ab_skills s;
        if (open_skills(r, &s, &e) < 0 || ab_skills_list(&s, v, n, &e) < 0) {
                ab_skills_close(&s);
                *ret = resp_err(r, e);
                return false;
        }
        ab_skills_close(&s);
        return true;
}

enum MHD_Result route_skills_list(ab_req *r, const char *id)
{
        ab_skill_info *v;
        size_t n;
        enum MHD_Result ret;
        if (!list(r, &v, &n, &ret))
                return ret;
        json_t *a = json_array();
        for (size_t i = 0; i < n; i++)
                json_array_append_new(a, info_json(&v[i], true));
        ab_skill_infos_free(v, n);
        return resp_json(r, 200, json_pack("{s:o}", "skills", a));
}

enum MHD_Result route_skills_prompt(ab_req *r, const char *id)
{
        ab_skill_info *v;
        size_t n;
        enum MHD_Result ret;
        if (!list(r, &v, &n, &ret))
                return ret;
        _cleanup_free_ char *text = ab_skills_prompt(v, n);
        json_t *a = json_array();
        for (size_t i = 0; i < n; i++)
                json_array_append_new(a, info_json(&v[i], false));
        ab_skill_infos_free(v, n);
        return resp_json(
            r, 200, json_pack("{s:o,s:o}", "prompt", json_bytes(text, strlen(text)), "skills", a));
}

enum MHD_Result route_skill_get(ab_req *r, const char *name)
{
        ab_err *e = NULL;
        ab_skills s;
        json_t *j = NULL;
        if (open_skills(r, &s, &e) < 0 || ab_skill_get(&s, name, &j, &e) < 0) {
                ab_skills_close(&s);
                return resp_err(r, e);
        }
        ab_skills_close(&s);
        return resp_json(r, 200, j);
}

/* The archive format: ?format=zip|tar|auto, else the Content-Type, else sniffed. */
static bool archive_format(ab_req *r, ab_archive_format *fmt, enum MHD_Result *ret)
{
        const char *q = req_query(r, "format");
        int f = ab_archive_format_parse(q);
        if (f < 0) {
                *ret = resp_error(r, 400, "invalid_argument",
                                  "format: must be \"zip\", \"tar\" or \"auto\"");
                return false;
        }
        *fmt = q && f != AB_ARCHIVE_ANY ? (ab_archive_format)f
                                        : ab_archive_format_of_type(req_header(r, "Content-Type"));
        return true;
}

/* 400 with the validation report next to the error. */
static enum MHD_Result resp_invalid(ab_req *r, ab_err *e, const ab_skill_report *rep)
{
        ab_metrics_error(r->srv->metrics, "invalid_argument");
        json_t *j = ab_skill_report_json(rep);
        json_object_set_new(j, "error",
                            json_pack("{s:s,s:o}", "code", "invalid_argument", "message",
                                      json_bytes(e->msg, strlen(e->msg))));
        ab_err_free(&e);
        return resp_json(r, 400, j);
}

enum MHD_Result route_skill_put(ab_req *r, const char *name)
{
        if (!strcmp(name, "prompt"))
                return resp_error(r, 400, "invalid_argument",
                                  "the skill name \"prompt\" is reserved (GET /v1/skills/prompt)");
        if (!ab_skill_name_ok(name))
                return resp_error(r, 400, "invalid_argument",
                                  "invalid skill name: " AB_SKILL_E_NAME_CHARS
                                  " (at most %d characters)",
                                  AB_SKILL_NAME_MAX);
        if (r->upload_len == 0)
                return resp_error(r, 400, "invalid_argument",
                                  "the body must be a zip or tar archive of the skill folder");
        enum MHD_Result ret;
        ab_archive_format fmt;
        if (!archive_format(r, &fmt, &ret))
                return ret;
        ab_err *e = NULL;
        ab_skills s;
        if (open_skills(r, &s, &e) < 0) {
                ab_skills_close(&s);
                return resp_err(r, e);
        }
        ab_skill_report rep;
        bool replaced = false;
        int rc = ab_skill_install(&s, name, r->upload_fd, fmt, &ab_skill_limits, false, &rep,
                                  &replaced, &e);
        ab_skills_close(&s);
        if (rc < 0) {
                ret = rep.n_errors ? resp_invalid(r, e, &rep) : resp_err(r, e);
                ab_skill_report_clear(&rep);
                return ret;
        }
        json_t *j = ab_skill_report_json(&rep);
        ab_skill_report_clear(&rep);
        json_object_set_new(j, "name", json_string(name));
        json_object_set_new(j, "replaced", json_boolean(replaced));
        json_object_set_new(j, "path", json_sprintf("/mnt/skills/%s/SKILL.md", name));
        return resp_json(r, replaced ? 200 : 201, j);
}

enum MHD_Result route_skill_validate(ab_req *r, const char *name)
{
        ab_err *e = NULL;
        ab_skills s;
        if (open_skills(r, &s, &e) < 0) {
                ab_skills_close(&s);
                return resp_err(r, e);
        }
        ab_skill_report rep = {0};
        int rc;
        enum MHD_Result ret;
        if (r->upload_len > 0) { /* an archive: checked in the staging area, not installed */
                ab_archive_format fmt;
                if (!archive_format(r, &fmt, &ret)) {
                        ab_skills_close(&s);
                        return ret;
                }
                rc = ab_skill_install(&s, name, r->upload_fd, fmt, &ab_skill_limits, true, &rep,
                                      NULL, &e);
                if (rc < 0 && rep.n_errors) { /* the skill is invalid: a report, not an error */
                        ab_err_free(&e);
                        rc = 0;
                }
        } else {
                rc = ab_skill_validate(&s, name, &rep, &e);
        }
        ab_skills_close(&s);
        if (rc < 0) {
                ab_skill_report_clear(&rep);
                return resp_err(r, e);
        }
        json_t *j = ab_skill_report_json(&rep);
        ab_skill_report_clear(&rep);
        json_object_set_new(j, "name", json_string(name));
        return resp_json(r, 200, j);
}

enum MHD_Result route_skill_delete(ab_req *r, const char *name)
{
        ab_err *e = NULL;
        ab_skills s;
        if (open_skills(r, &s, &e) < 0 || ab_skill_delete(&s, name, &e) < 0) {
                ab_skills_close(&s);
                return resp_err(r, e);
        }
        ab_skills_close(&s);
        return resp_json(r, 200, json_pack("{s:s}", "deleted", name));
}

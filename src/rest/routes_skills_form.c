/* POST /api/admin/skills: a skill uploaded as multipart/form-data, as the
 * skills administration of the sessions API takes it: a "skill_name" field
 * (or ?skill_name=) and one part per file of the skill, its filename the
 * file's path inside the skill ("SKILL.md", "scripts/helper.py"). The parts
 * become a tar archive in memory, installed as PUT /v1/skills/{name}
 * installs one: the same checks of every path (no "..", no absolute path),
 * the same validation and the same limits. Admin only. */
#include "kit/multipart.h"
#include "rest/rest.h"
#include "skills/skills.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define FORM_PARTS_MAX 1000

/* Writes the file parts into fd as a tar archive. */
static int parts_tar(const kit_part *parts, size_t n, int fd, size_t *files, ab_err **err)
{
        struct archive *a = archive_write_new();
        int rc = archive_write_set_format_pax_restricted(a) == ARCHIVE_OK &&
                         archive_write_open_fd(a, fd) == ARCHIVE_OK
                     ? 0
                     : ab_err_set(err, AB_E_INTERNAL, 0, "tar: %s", archive_error_string(a));
        *files = 0;
        for (size_t i = 0; i < n && rc == 0; i++) {
                if (!parts[i].filename)
                        continue;
                if (!*parts[i].filename) {
                        rc = ab_err_set(err, AB_E_INVALID, 0, "part %zu: empty filename", i + 1);
                        break;
                }
                struct archive_entry *e = archive_entry_new();
                archive_entry_set_pathname(e, parts[i].filename);
                archive_entry_set_filetype(e, AE_IFREG);
                archive_entry_set_perm(e, 0644);
                archive_entry_set_size(e, (la_int64_t)parts[i].len);
                if (archive_write_header(a, e) != ARCHIVE_OK ||
                    (parts[i].len && archive_write_data(a, parts[i].data, parts[i].len) < 0))
                        rc = ab_err_set(err, AB_E_INTERNAL, 0, "tar: %s", archive_error_string(a));
                archive_entry_free(e);
                (*files)++;
        }
        if (archive_write_close(a) != ARCHIVE_OK && rc == 0)
                rc = ab_err_set(err, AB_E_INTERNAL, 0, "tar: %s", archive_error_string(a));
        archive_write_free(a);
        if (rc == 0 && *files == 0)
                rc = ab_err_set(err, AB_E_INVALID, 0,
                                "no file part (each file of the skill is a part with a filename)");
        return rc;
}

/* The skill's name: the "skill_name" part, else ?skill_name=. */
static char *form_name(ab_req *r, const kit_part *parts, size_t n)
{
        for (size_t i = 0; i < n; i++)
                if (!parts[i].filename && parts[i].name && !strcmp(parts[i].name, "skill_name"))
                        return xasprintf("%.*s", (int)parts[i].len, parts[i].data);
        const char *q = req_query(r, "skill_name");
        return q ? xstrdup(q) : NULL;
}

/* Installs the tar in fd as skill name and answers. */
static enum MHD_Result install(ab_req *r, const char *name, int fd, size_t files)
{
        ab_err *e = NULL;
        ab_skills s;
        if (ab_skills_open(r->srv->cfg->data_dir, &s, &e) < 0) {
                ab_skills_close(&s);
                return resp_err(r, e);
        }
        ab_skill_report rep;
        bool replaced = false;
        int rc = ab_skill_install(&s, name, fd, AB_ARCHIVE_TAR, &ab_skill_limits, false, &rep,
                                  &replaced, &e);
        ab_skills_close(&s);
        json_t *j = ab_skill_report_json(&rep);
        ab_skill_report_clear(&rep);
        if (rc < 0) {
                unsigned st = status_of(e->code);
                json_object_set_new(j, "error",
                                    json_pack("{s:s,s:o}", "code", ab_code_name(e->code), "message",
                                              json_bytes(e->msg, strlen(e->msg))));
                ab_err_free(&e);
                return resp_json(r, st, j);
        }
        json_object_set_new(j, "skill", json_string(name));
        json_object_set_new(j, "status", json_string(replaced ? "replaced" : "created"));
        json_object_set_new(j, "files", json_integer((json_int_t)files));
        json_object_set_new(j, "path", json_sprintf("/mnt/skills/%s/SKILL.md", name));
        return resp_json(r, replaced ? 200 : 201, j);
}

enum MHD_Result route_skill_form(ab_req *r, const char *unused)
{
        if (r->upload_failed)
                return resp_error(r, 500, "internal", "the upload could not be spooled");
        _cleanup_free_ char *delim = kit_multipart_delim(req_header(r, "Content-Type"));
        if (!delim || !r->upload_len)
                return resp_error(r, 400, "invalid_argument",
                                  "expected multipart/form-data: a skill_name field and the "
                                  "skill's files");
        void *map = mmap(NULL, r->upload_len, PROT_READ, MAP_PRIVATE, r->upload_fd, 0);
        if (map == MAP_FAILED)
                return resp_error(r, 500, "internal", "mmap: %s", strerror(errno));
        ab_err *e = NULL;
        kit_part *parts = NULL;
        size_t n = 0, files = 0;
        _cleanup_free_ char *name = NULL;
        int fd = -1;
        int rc = kit_multipart_split(map, r->upload_len, delim, FORM_PARTS_MAX, &parts, &n, &e);
        if (rc == 0) {
                name = form_name(r, parts, n);
                if (!name || !ab_skill_name_ok(name))
                        rc = ab_err_set(&e, AB_E_INVALID, 0,
                                        "skill_name: required; " AB_SKILL_E_NAME_CHARS
                                        " (at most %d characters)",
                                        AB_SKILL_NAME_MAX);
        }
        if (rc == 0 && (fd = memfd_create("skill-form", MFD_CLOEXEC)) < 0)
                rc = ab_err_set(&e, AB_E_INTERNAL, errno, "memfd_create");
        if (rc == 0)
                rc = parts_tar(parts, n, fd, &files, &e);
        kit_parts_free(parts, n);
        munmap(map, r->upload_len);
        if (rc == 0 && lseek(fd, 0, SEEK_SET) < 0)
                rc = ab_err_set(&e, AB_E_INTERNAL, errno, "lseek");
        if (rc < 0) {
                if (fd >= 0)
                        close(fd);
                return resp_err(r, e);
        }
        enum MHD_Result ret = install(r, name, fd, files);
        close(fd);
        return ret;
}

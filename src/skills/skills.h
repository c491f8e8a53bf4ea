/* skills.h - the server's skills folder (seed 004; docs/skills.md).
 *
 * DATA/skills/NAME/ is one skill: SKILL.md (YAML frontmatter between "---"
 * lines with `name` and `description`, then Markdown), plus optional
 * scripts/, templates/, references/. The native backend binds DATA/skills
 * read-only at /mnt/skills and /skills in every box, so a skill installed
 * here shows up at once in running boxes.
 *
 * Installs extract the uploaded archive into DATA/skills/.staging/ (on the
 * folder's file system; never listed, hidden from boxes), validate it there, then rename it into
 * DATA/skills/NAME in one step (RENAME_EXCHANGE over an older version), so a
 * box sees the old skill or the new one, never a mix. Deletes rename the
 * skill out first, then remove it.
 *
 * Errors: AB_E_NOT_FOUND for an unknown skill, AB_E_INVALID for a bad name,
 * archive or skill, AB_E_LIMIT for an archive over the limits, AB_E_STORAGE
 * when the skills disk is full (the installed version stays). */
#ifndef AB_SKILLS_H
#define AB_SKILLS_H

#include "base/err.h"
#include "skills/archive.h"

#include <jansson.h>
#include <stdbool.h>

#define AB_SKILL_DESC_MAX 1024 /* characters (code points) of description */
#define AB_SKILL_NAME_MAX 64
#define AB_SKILL_MD_MAX   (1024 * 1024) /* SKILL.md is read up to this size */

/* The seed's validation messages (seed 004, validate_skill). */
#define AB_SKILL_E_NO_MD      "SKILL.md not found"
#define AB_SKILL_E_NO_FRONT   "Invalid SKILL.md format: missing frontmatter"
#define AB_SKILL_E_NAME_REQ   "Skill name is required in frontmatter"
#define AB_SKILL_E_NAME_CHARS "Skill name should only contain letters, numbers, - and _"
#define AB_SKILL_W_DESC       "Skill description is recommended"
#define AB_SKILL_E_DESC_LONG  "Description exceeds 1024 characters"

/* A parsed SKILL.md. */
typedef struct ab_skill_md {
        json_t *front;     /* the frontmatter as a JSON object (owned) */
        char *name;        /* front's `name` when it is a scalar, else NULL */
        char *description; /* front's `description` when it is a scalar, else NULL */
        char *body;        /* the Markdown after the frontmatter */
} ab_skill_md;

/* Parses SKILL.md text: the first line is "---", the frontmatter ends at the
 * next "---" line; it must be a YAML mapping (anchors/aliases refused).
 * AB_E_INVALID with a message starting "Invalid SKILL.md format: ". Release
 * *out with ab_skill_md_clear. */
int ab_skill_md_parse(const char *text, size_t len, ab_skill_md *out, ab_err **err);
void ab_skill_md_clear(ab_skill_md *md);

/* The seed's name rule: non-empty, only ASCII letters, digits, '-' and '_',
 * at least one letter or digit, at most AB_SKILL_NAME_MAX bytes. */
bool ab_skill_name_ok(const char *name);

/* The result of a validation: messages as malloc'd NULL-terminated arrays. */
typedef struct ab_skill_report {
        char **errors;
        size_t n_errors;
        char **warnings;
        size_t n_warnings;
} ab_skill_report;

void ab_skill_report_clear(ab_skill_report *rep);
/* {"valid": bool, "errors": [...], "warnings": [...]} */
json_t *ab_skill_report_json(const ab_skill_report *rep);

/* Validates the skill directory dirfd, whose name should be `name`:
 * errors (missing SKILL.md, missing/bad frontmatter, bad name, name not the
 * directory's, description over 1024 characters) and warnings (no
 * description, dangerous patterns in scripts/: "rm -rf", "sudo", "eval(",
 * "exec(", a download piped to a shell). Fills rep; returns 0 (also for an
 * invalid skill), or -1 with *err for a system failure. */
int ab_skill_validate_at(int dirfd, const char *name, ab_skill_report *rep, ab_err **err);

/* An open skills folder. */
typedef struct ab_skills {
        int dir_fd;     /* DATA/skills */
        int staging_fd; /* DATA/skills/.staging */
        char *dir;      /* DATA/skills, for messages */
} ab_skills;

/* Opens (creating when missing) DATA/skills and DATA/skills/.staging. */
int ab_skills_open(const char *data_dir, ab_skills *s, ab_err **err);
void ab_skills_close(ab_skills *s);

typedef struct ab_skill_info {
        char *name; /* the directory's name (what paths in boxes use) */
        char *description;
        bool has_scripts, has_templates, has_references;
} ab_skill_info;

/* Lists the skills (directories with a SKILL.md whose frontmatter parses),
 * sorted by name; directories whose name breaks the name rule (hidden ones,
 * ...) are skipped. Free with ab_skill_infos_free. */
int ab_skills_list(ab_skills *s, ab_skill_info **out, size_t *n, ab_err **err);
void ab_skill_infos_free(ab_skill_info *v, size_t n);

/* One skill: {"name", "description", "has_scripts", "has_templates",
 * "has_references", "frontmatter", "body", "files": [{"path", "type", "size"}]}.
 * A SKILL.md that does not parse still answers, with "frontmatter": null and
 * the raw text as body. AB_E_NOT_FOUND when there is no such skill. */
int ab_skill_get(ab_skills *s, const char *name, json_t **out, ab_err **err);

/* Validates the installed skill `name` (AB_E_NOT_FOUND when missing). */
int ab_skill_validate(ab_skills *s, const char *name, ab_skill_report *rep, ab_err **err);

/* Installs the zip or tar archive read from archive_fd as skill `name`.
 * The archive holds the skill's files at its top level, or in one top-level
 * directory. Entries are checked by ab_archive_walk (no absolute paths, no
 * "..", no links or special files, lim's bounds). When the skill has
 * validation errors, nothing is installed: AB_E_INVALID, with rep filled.
 * With dry_run, the archive is only validated (rep filled, returns 0) and
 * nothing is installed. *replaced tells whether an older version was replaced. */
int ab_skill_install(ab_skills *s, const char *name, int archive_fd, ab_archive_format fmt,
                     const ab_archive_limits *lim, bool dry_run, ab_skill_report *rep,
                     bool *replaced, ab_err **err);

/* Removes skill `name` (AB_E_NOT_FOUND when missing). */
int ab_skill_delete(ab_skills *s, const char *name, ab_err **err);

/* The progressive-loading prompt fragment for the listed skills (malloc'd):
 * names, descriptions and /mnt/skills/NAME/SKILL.md paths. */
char *ab_skills_prompt(const ab_skill_info *v, size_t n);

/* Default limits for skill archives: 1000 entries, 16 MiB a file, 64 MiB in all. */
extern const ab_archive_limits ab_skill_limits;

#endif

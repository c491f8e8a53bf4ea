/* Unit tests: SKILL.md frontmatter parsing, every validation error and
 * warning with seed 004's message, installs from zip and tar archives made
 * here with libarchive (a good skill; evil archives refused leaving nothing
 * in DATA/skills or the staging dir), atomic replace, delete, list, get and
 * the prompt. */
#include "skills/skills.h"
#include "tap.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

static char data[] = "/tmp/ab-skills-XXXXXX";
static char skills_dir[256], staging_dir[256];

/* ---- helpers ---------------------------------------------------------- */

static void write_at(const char *path, const char *text)
{
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0 || ab_write_all(fd, text, strlen(text)) < 0)
                tap_ok(0, "write %s", path);
        if (fd >= 0)
                close(fd);
}

static char *read_at(const char *path)
{
        char *s = NULL;
        size_t n;
        if (ab_read_file(AT_FDCWD, path, &s, &n) < 0)
                return NULL;
        return s;
}

static int count_entries(const char *dir)
{
        DIR *d = opendir(dir);
        if (!d)
                return -1;
        int n = 0;
        struct dirent *de;
        while ((de = readdir(d)))
                if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
                        n++;
        closedir(d);
        return n;
}

static bool exists(const char *path)
{
        struct stat st;
        return lstat(path, &st) == 0;
}

static void rm_rf(const char *path)
{
        _cleanup_free_ char *cmd = xasprintf("rm -rf '%s'", path);
        if (system(cmd) != 0)
                tap_ok(0, "rm -rf %s", path);
}

/* Makes DATA/skills/NAME with SKILL.md = md (NULL: none) and files "rel=text". */
static void make_skill(const char *name, const char *md, const char *const *files)
{
        _cleanup_free_ char *dir = xasprintf("%s/%s", skills_dir, name);
        rm_rf(dir);
        mkdir(dir, 0755);
        if (md) {
                _cleanup_free_ char *p = xasprintf("%s/SKILL.md", dir);
                write_at(p, md);
        }
        for (const char *const *f = files; f && *f; f++) {
                const char *eq = strchr(*f, '=');
                _cleanup_free_ char *rel = xstrndup(*f, (size_t)(eq - *f));
                _cleanup_free_ char *p = xasprintf("%s/%s", dir, rel);
                for (char *s = strchr(p + strlen(dir) + 1, '/'); s; s = strchr(s + 1, '/')) {
                        *s = 0;
                        mkdir(p, 0755);
                        *s = '/';
                }
                write_at(p, eq + 1);
        }
}

static bool has_msg(char **v, size_t n, const char *msg)
{
        for (size_t i = 0; i < n; i++)
                if (!strcmp(v[i], msg))
                        return true;
        return false;
}

static bool has_prefix(char **v, size_t n, const char *prefix)
{
        for (size_t i = 0; i < n; i++)
                if (!strncmp(v[i], prefix, strlen(prefix)))
                        return true;
        return false;
}

static void dump(const ab_skill_report *rep)
{
        for (size_t i = 0; i < rep->n_errors; i++)
                tap_diag("  error: %s", rep->errors[i]);
        for (size_t i = 0; i < rep->n_warnings; i++)
                tap_diag("  warning: %s", rep->warnings[i]);
}

/* Validates DATA/skills/NAME. */
static void validate(ab_skills *s, const char *name, ab_skill_report *rep)
{
        ab_err *e = NULL;
        if (ab_skill_validate(s, name, rep, &e) < 0) {
                tap_ok(0, "validate %s: %s", name, e->msg);
                ab_err_free(&e);
        }
}

static void expect_error(ab_skills *s, const char *name, const char *msg, bool prefix)
{
        ab_skill_report rep;
        validate(s, name, &rep);
        bool ok = prefix ? has_prefix(rep.errors, rep.n_errors, msg)
                         : has_msg(rep.errors, rep.n_errors, msg);
        tap_ok(ok, "%s: error \"%s\"", name, msg);
        if (!ok)
                dump(&rep);
        ab_skill_report_clear(&rep);
}

static void expect_warning(ab_skills *s, const char *name, const char *msg)
{
        ab_skill_report rep;
        validate(s, name, &rep);
        bool ok = has_msg(rep.warnings, rep.n_warnings, msg);
        tap_ok(ok, "%s: warning \"%s\"", name, msg);
        if (!ok)
                dump(&rep);
        ab_skill_report_clear(&rep);
}

/* An archive entry to write: type 'f' file, 'd' dir, 'l' symlink, 'h' hard
 * link, 'c' character device. */
typedef struct ent {
        const char *name;
        char type;
        const char *data; /* file content, or the link target */
        size_t size;      /* 0 = strlen(data) */
} ent;

/* Writes entries as a zip or tar to an unlinked temp file; returns its fd. */
static int make_archive(bool zip, const ent *ents, size_t n)
{
        char path[] = "/tmp/ab-skills-ar-XXXXXX";
        int fd = mkstemp(path);
        unlink(path);
        struct archive *a = archive_write_new();
        if (zip)
                archive_write_set_format_zip(a);
        else
                archive_write_set_format_pax_restricted(a);
        archive_write_open_fd(a, fd);
        for (size_t i = 0; i < n; i++) {
                struct archive_entry *e = archive_entry_new();
                archive_entry_set_pathname(e, ents[i].name);
                archive_entry_set_perm(e, ents[i].type == 'd' ? 0755 : 0644);
                size_t size = 0;
                switch (ents[i].type) {
                case 'd':
                        archive_entry_set_filetype(e, AE_IFDIR);
                        break;
                case 'l':
                        archive_entry_set_filetype(e, AE_IFLNK);
                        archive_entry_set_symlink(e, ents[i].data);
                        break;
                case 'h':
                        archive_entry_set_filetype(e, AE_IFREG);
                        archive_entry_set_hardlink(e, ents[i].data);
                        break;
                case 'c':
                        archive_entry_set_filetype(e, AE_IFCHR);
                        archive_entry_set_rdev(e, makedev(1, 3));
                        break;
                case 'x':
                        archive_entry_set_filetype(e, AE_IFREG);
                        archive_entry_set_perm(e, 0755);
                        size = strlen(ents[i].data);
                        archive_entry_set_size(e, (la_int64_t)size);
                        break;
                default:
                        archive_entry_set_filetype(e, AE_IFREG);
                        size = ents[i].size ? ents[i].size : strlen(ents[i].data);
                        archive_entry_set_size(e, (la_int64_t)size);
                }
                if (archive_write_header(a, e) != ARCHIVE_OK)
                        tap_ok(0, "archive header %s: %s", ents[i].name, archive_error_string(a));
                if (size) {
                        if (ents[i].size) {
                                char *buf = xzalloc(size);
                                archive_write_data(a, buf, size);
                                free(buf);
                        } else {
                                archive_write_data(a, ents[i].data, size);
                        }
                }
                archive_entry_free(e);
        }
        archive_write_close(a);
        archive_write_free(a);
        return fd;
}

static const char good_md[] = "---\n"
                              "name: demo\n"
                              "description: A demo skill. Use it when testing.\n"
                              "---\n"
                              "# Demo\n\nRun scripts/run.sh.\n";

/* Installs an archive as `name`; returns the error code (0 = installed). */
static int install(ab_skills *s, const char *name, int fd, const ab_archive_limits *lim,
                   bool *replaced, char **msg)
{
        ab_skill_report rep;
        ab_err *e = NULL;
        int r = ab_skill_install(s, name, fd, AB_ARCHIVE_ANY, lim ? lim : &ab_skill_limits, false,
                                 &rep, replaced, &e);
        int code = r < 0 ? (e ? (int)e->code : -1) : 0;
        if (msg)
                *msg = e ? xstrdup(e->msg) : NULL;
        ab_err_free(&e);
        ab_skill_report_clear(&rep);
        return code;
}

/* ---- tests ------------------------------------------------------------ */

static void test_parse(void)
{
        ab_skill_md md;
        ab_err *e = NULL;
        const char *text = "---\nname: pdf\ndescription: \"Make PDFs: reports, invoices\"\n"
                           "version: 3\nbeta: true\nlicense: ~\ntags: [a, b]\n"
                           "metadata:\n  author: me\n---\n# PDF\nbody line\n";
        int r = ab_skill_md_parse(text, strlen(text), &md, &e);
        TAP_IS_INT(r, 0, "a good SKILL.md parses");
        if (r == 0) {
                TAP_IS_STR(md.name, "pdf", "name");
                TAP_IS_STR(md.description, "Make PDFs: reports, invoices", "quoted description");
                TAP_IS_STR(md.body, "# PDF\nbody line\n", "the body follows the closing ---");
                tap_ok(json_integer_value(json_object_get(md.front, "version")) == 3,
                       "a plain integer is a JSON integer");
                tap_ok(json_is_true(json_object_get(md.front, "beta")), "true is a JSON bool");
                tap_ok(json_is_null(json_object_get(md.front, "license")), "~ is null");
                tap_ok(json_array_size(json_object_get(md.front, "tags")) == 2,
                       "a flow sequence is an array");
                TAP_IS_STR(json_string_value(
                               json_object_get(json_object_get(md.front, "metadata"), "author")),
                           "me", "a nested mapping is an object");
                ab_skill_md_clear(&md);
        }
        ab_err_free(&e);

        const char *crlf = "\xef\xbb\xbf---\r\nname: x\r\ndescription: d\r\n---\r\nbody\r\n";
        r = ab_skill_md_parse(crlf, strlen(crlf), &md, &e);
        tap_ok(r == 0 && md.name && !strcmp(md.name, "x") && !strcmp(md.body, "body\r\n"),
               "a BOM and CRLF line ends are accepted");
        if (r == 0)
                ab_skill_md_clear(&md);
        ab_err_free(&e);

        const char *end_eof = "---\nname: x\n---";
        r = ab_skill_md_parse(end_eof, strlen(end_eof), &md, &e);
        tap_ok(r == 0 && md.body && !*md.body, "a closing --- at the end of the file: empty body");
        if (r == 0)
                ab_skill_md_clear(&md);
        ab_err_free(&e);

        static const struct {
                const char *text, *msg, *what;
        } bad[] = {
            {"# no frontmatter\n", AB_SKILL_E_NO_FRONT, "no opening ---"},
            {"---\nname: x\ndescription: y\n", AB_SKILL_E_NO_FRONT, "no closing ---"},
            {"--- \n---\nbody", AB_SKILL_E_NO_FRONT, "an empty frontmatter"},
            {"\n---\nname: x\n---\n", AB_SKILL_E_NO_FRONT, "--- not on the first line"},
            {"---\nname: [unclosed\n---\n",
             "Invalid SKILL.md format: the frontmatter is not valid "
             "YAML",
             "bad YAML"},
            {"---\n- a\n- b\n---\n",
             "Invalid SKILL.md format: the frontmatter must be a YAML "
             "mapping",
             "a YAML list"},
            {"---\na: &a [x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a]\n"
             "c: &c [*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c]\n"
             "e: &e [*d,*d,*d,*d,*d,*d,*d,*d]\nf: [*e,*e,*e,*e,*e,*e,*e,*e]\n---\n",
             "Invalid SKILL.md format: the frontmatter is too large", "an alias bomb"},
            /* found by fuzz_skillmd: the checks read the first `name`, the
             * frontmatter shown kept the last */
            {"---\nname: good\nname: [a, b]\n---\n",
             "Invalid SKILL.md format: the frontmatter is too large", "a repeated key"},
        };
        for (size_t i = 0; i < AB_ARRAY_LEN(bad); i++) {
                r = ab_skill_md_parse(bad[i].text, strlen(bad[i].text), &md, &e);
                bool ok = r < 0 && e && e->code == AB_E_INVALID &&
                          !strncmp(e->msg, bad[i].msg, strlen(bad[i].msg));
                tap_ok(ok, "%s is refused: \"%s\"", bad[i].what, bad[i].msg);
                if (!ok)
                        tap_diag("  got: %s", r < 0 && e ? e->msg : "(parsed)");
                if (r == 0)
                        ab_skill_md_clear(&md);
                ab_err_free(&e);
        }

        tap_ok(ab_skill_name_ok("pdf-gen_2") && ab_skill_name_ok("PDF") && !ab_skill_name_ok("") &&
                   !ab_skill_name_ok("-_") && !ab_skill_name_ok("a b") && !ab_skill_name_ok("..") &&
                   !ab_skill_name_ok("a/b") && !ab_skill_name_ok("caf\xc3\xa9"),
               "the name rule: letters, digits, - and _ (ASCII), at least one letter or digit");
        char long_name[66];
        memset(long_name, 'a', 65);
        long_name[65] = 0;
        tap_ok(!ab_skill_name_ok(long_name) && ab_skill_name_ok(long_name + 1),
               "names are at most 64 characters");
}

static void test_validate(ab_skills *s)
{
        make_skill("good", "---\nname: good\ndescription: fine\n---\nbody\n",
                   (const char *const[]){"scripts/ok.sh=echo hi\n", "templates/t.html=<p>", NULL});
        ab_skill_report rep;
        validate(s, "good", &rep);
        tap_ok(rep.n_errors == 0 && rep.n_warnings == 0, "a good skill: no errors, no warnings");
        if (rep.n_errors || rep.n_warnings)
                dump(&rep);
        json_t *j = ab_skill_report_json(&rep);
        tap_ok(json_is_true(json_object_get(j, "valid")), "... its report says valid");
        json_decref(j);
        ab_skill_report_clear(&rep);

        make_skill("nomd", NULL, NULL);
        expect_error(s, "nomd", "SKILL.md not found", false);
        make_skill("nofront", "# just markdown\n", NULL);
        expect_error(s, "nofront", "Invalid SKILL.md format: missing frontmatter", false);
        make_skill("badyaml", "---\nname: [x\n---\n", NULL);
        expect_error(s, "badyaml", "Invalid SKILL.md format: ", true);
        make_skill("noname", "---\ndescription: d\n---\n", NULL);
        expect_error(s, "noname", "Skill name is required in frontmatter", false);
        make_skill("badname", "---\nname: bad name!\ndescription: d\n---\n", NULL);
        expect_error(s, "badname", "Skill name should only contain letters, numbers, - and _",
                     false);
        char md[400];
        snprintf(md, sizeof(md), "---\nname: %0*d\ndescription: d\n---\n", 65, 0);
        make_skill("longname", md, NULL);
        expect_error(s, "longname", "Skill name must be at most 64 characters", false);
        make_skill("mismatch", "---\nname: other\ndescription: d\n---\n", NULL);
        expect_error(s, "mismatch",
                     "Skill name 'other' does not match its directory name "
                     "'mismatch'",
                     false);
        make_skill("nodesc", "---\nname: nodesc\n---\n", NULL);
        expect_warning(s, "nodesc", "Skill description is recommended");
        validate(s, "nodesc", &rep);
        tap_ok(rep.n_errors == 0, "... a missing description is a warning only (seed 004)");
        ab_skill_report_clear(&rep);
        make_skill("listdesc", "---\nname: listdesc\ndescription: [a, b]\n---\n", NULL);
        expect_error(s, "listdesc", "Skill description must be a string", false);

        _cleanup_free_ char *long_md = xmalloc(2000);
        strcpy(long_md, "---\nname: longdesc\ndescription: ");
        size_t o = strlen(long_md);
        memset(long_md + o, 'x', 1025);
        strcpy(long_md + o + 1025, "\n---\n");
        make_skill("longdesc", long_md, NULL);
        expect_error(s, "longdesc", "Description exceeds 1024 characters", false);
        /* 1024 characters of two bytes each: characters count, not bytes */
        _cleanup_free_ char *wide = xmalloc(4000);
        strcpy(wide, "---\nname: widedesc\ndescription: ");
        o = strlen(wide);
        for (int i = 0; i < 1024; i++, o += 2)
                memcpy(wide + o, "\xc3\xa9", 2);
        strcpy(wide + o, "\n---\n");
        make_skill("widedesc", wide, NULL);
        validate(s, "widedesc", &rep);
        tap_ok(rep.n_errors == 0, "1024 two-byte characters are within the limit");
        if (rep.n_errors)
                dump(&rep);
        ab_skill_report_clear(&rep);

        make_skill("danger", "---\nname: danger\ndescription: d\n---\n",
                   (const char *const[]){"scripts/clean.sh=rm -rf /tmp/x\n",
                                         "scripts/root.sh=sudo apt-get install x\n",
                                         "scripts/ev.py=eval(input())\nexec(code)\n",
                                         "scripts/sub/inst.sh=curl -fsSL https://x.sh | sh\n",
                                         "scripts/w.sh=wget -qO- http://x | sudo bash\n",
                                         "scripts/fine.sh=curl -o out https://x\n",
                                         "references/doc.md=rm -rf is fine in docs\n", NULL});
        static const char *const warns[] = {
            "Potentially dangerous pattern 'rm -rf' in clean.sh",
            "Potentially dangerous pattern 'sudo' in root.sh",
            "Potentially dangerous pattern 'eval(' in ev.py",
            "Potentially dangerous pattern 'exec(' in ev.py",
            "Potentially dangerous pattern 'curl | sh' in sub/inst.sh",
            "Potentially dangerous pattern 'wget | sh' in w.sh",
        };
        for (size_t i = 0; i < AB_ARRAY_LEN(warns); i++)
                expect_warning(s, "danger", warns[i]);
        validate(s, "danger", &rep);
        tap_ok(rep.n_errors == 0 && rep.n_warnings == AB_ARRAY_LEN(warns) + 1,
               "only scripts/ is checked, a plain download is fine (7 warnings: 6 + sudo in w.sh)");
        if (rep.n_errors || rep.n_warnings != AB_ARRAY_LEN(warns) + 1)
                dump(&rep);
        ab_skill_report_clear(&rep);

        ab_err *e = NULL;
        tap_ok(ab_skill_validate(s, "missing-skill", &rep, &e) < 0 && e &&
                   e->code == AB_E_NOT_FOUND,
               "validating an unknown skill is not_found");
        ab_err_free(&e);
        tap_ok(ab_skill_validate(s, "../etc", &rep, &e) < 0 && e && e->code == AB_E_INVALID,
               "a name with ../ is refused, not looked up");
        ab_err_free(&e);
}

static void clean_folder(void)
{
        DIR *d = opendir(skills_dir);
        struct dirent *de;
        while (d && (de = readdir(d))) {
                if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
                    !strcmp(de->d_name, ".staging"))
                        continue;
                _cleanup_free_ char *p = xasprintf("%s/%s", skills_dir, de->d_name);
                rm_rf(p);
        }
        if (d)
                closedir(d);
}

static void test_install(ab_skills *s)
{
        clean_folder();
        ent good[] = {
            {"SKILL.md", 'f', good_md, 0},
            {"scripts/", 'd', NULL, 0},
            {"scripts/run.sh", 'x', "#!/bin/sh\necho run\n", 0},
            {"./templates/report.html", 'f', "<html></html>", 0},
            {"references/a//b.md", 'f', "ref", 0},
        };
        int fd = make_archive(true, good, AB_ARRAY_LEN(good));
        bool replaced = true;
        _cleanup_free_ char *msg = NULL;
        int code = install(s, "demo", fd, NULL, &replaced, &msg);
        close(fd);
        TAP_IS_INT(code, 0, "a good zip installs");
        if (code)
                tap_diag("  %s", msg);
        tap_ok(!replaced, "... as a new skill");
        _cleanup_free_ char *p = xasprintf("%s/demo/SKILL.md", skills_dir);
        _cleanup_free_ char *got = read_at(p);
        TAP_IS_STR(got, good_md, "SKILL.md is in DATA/skills/demo");
        _cleanup_free_ char *b = xasprintf("%s/demo/references/a/b.md", skills_dir);
        tap_ok(exists(b), "entry names are normalised (./, //)");
        struct stat st;
        _cleanup_free_ char *sh = xasprintf("%s/demo/scripts/run.sh", skills_dir);
        _cleanup_free_ char *dd = xasprintf("%s/demo", skills_dir);
        tap_ok(stat(sh, &st) == 0 && (st.st_mode & 07777) == 0755, "an executable stays 0755");
        tap_ok(stat(p, &st) == 0 && (st.st_mode & 07777) == 0644, "a file is 0644");
        tap_ok(stat(dd, &st) == 0 && (st.st_mode & 07777) == 0755,
               "the skill directory is 0755 (boxes can read it)");
        TAP_IS_INT(count_entries(staging_dir), 0, "the staging dir is empty afterwards");

        /* tar with the skill in one top-level directory, gzip-free */
        ent wrapped[] = {
            {"tool/", 'd', NULL, 0},
            {"tool/SKILL.md", 'f', "---\nname: tool\ndescription: wrapped\n---\nT\n", 0},
            {"tool/scripts/x.py", 'f', "print(1)\n", 0},
            {"__MACOSX/._SKILL.md", 'f', "junk", 0},
        };
        fd = make_archive(false, wrapped, AB_ARRAY_LEN(wrapped));
        free(msg);
        code = install(s, "tool", fd, NULL, NULL, &msg);
        close(fd);
        TAP_IS_INT(code, 0, "a tar whose skill is in one top-level directory installs");
        if (code)
                tap_diag("  %s", msg);
        _cleanup_free_ char *tp = xasprintf("%s/tool/scripts/x.py", skills_dir);
        tap_ok(exists(tp), "... its files are at the skill's top level");
        _cleanup_free_ char *mac = xasprintf("%s/tool/__MACOSX", skills_dir);
        _cleanup_free_ char *mac2 = xasprintf("%s/__MACOSX", skills_dir);
        tap_ok(!exists(mac) && !exists(mac2), "__MACOSX junk is dropped");

        /* evil archives: each refused, nothing left anywhere */
        const char *marker = "ab-skills-evil";
        _cleanup_free_ char *outside = xasprintf("%s/%s", data, marker);
        ab_archive_limits small = {
            .max_entries = 5, .max_entry_bytes = 1000, .max_total_bytes = 1500};
        static const char *const etc_x = "/etc/ab-skills-evil-x";
        struct {
                const char *what;
                bool zip;
                ent e[8];
                size_t n;
                int code;
                const char *mention;
                const ab_archive_limits *lim;
        } evil[] = {
            {"../x (zip)",
             true,
             {{"SKILL.md", 'f', good_md, 0}, {"../ab-skills-evil", 'f', "x", 0}},
             2,
             AB_E_INVALID,
             "\"..\"",
             NULL},
            {"a/../../x (tar)",
             false,
             {{"SKILL.md", 'f', good_md, 0}, {"a/../../ab-skills-evil", 'f', "x", 0}},
             2,
             AB_E_INVALID,
             "\"..\"",
             NULL},
            {"/etc/x (tar)",
             false,
             {{"SKILL.md", 'f', good_md, 0}, {etc_x, 'f', "x", 0}},
             2,
             AB_E_INVALID,
             "absolute",
             NULL},
            {"a symlink to /etc/passwd (tar)",
             false,
             {{"SKILL.md", 'f', good_md, 0}, {"passwd", 'l', "/etc/passwd", 0}},
             2,
             AB_E_INVALID,
             "symbolic link",
             NULL},
            {"a symlink to /etc/passwd (zip)",
             true,
             {{"SKILL.md", 'f', good_md, 0}, {"passwd", 'l', "/etc/passwd", 0}},
             2,
             AB_E_INVALID,
             "symbolic link",
             NULL},
            {"a symlink dir then a file through it (tar)",
             false,
             {{"SKILL.md", 'f', good_md, 0},
              {"d", 'l', "/tmp", 0},
              {"d/ab-skills-evil", 'f', "x", 0}},
             3,
             AB_E_INVALID,
             "symbolic link",
             NULL},
            {"a hard link outside (tar)",
             false,
             {{"SKILL.md", 'f', good_md, 0}, {"pw", 'h', "/etc/passwd", 0}},
             2,
             AB_E_INVALID,
             "hard link",
             NULL},
            {"a hard link to ../x (tar)",
             false,
             {{"SKILL.md", 'f', good_md, 0}, {"pw", 'h', "../../ab-skills-evil", 0}},
             2,
             AB_E_INVALID,
             "hard link",
             NULL},
            {"a device file (tar)",
             false,
             {{"SKILL.md", 'f', good_md, 0}, {"null", 'c', NULL, 0}},
             2,
             AB_E_INVALID,
             "device",
             NULL},
            {"too many entries",
             true,
             {{"SKILL.md", 'f', good_md, 0},
              {"1", 'f', "1", 0},
              {"2", 'f', "2", 0},
              {"3", 'f', "3", 0},
              {"4", 'f', "4", 0},
              {"5", 'f', "5", 0}},
             6,
             AB_E_LIMIT,
             "more than 5 entries",
             &small},
            {"a huge entry (zip)",
             true,
             {{"SKILL.md", 'f', good_md, 0}, {"big.bin", 'f', "", 5000}},
             2,
             AB_E_LIMIT,
             "big.bin",
             &small},
            {"a huge entry (tar)",
             false,
             {{"SKILL.md", 'f', good_md, 0}, {"big.bin", 'f', "", 5000}},
             2,
             AB_E_LIMIT,
             "big.bin",
             &small},
            {"files over the total",
             true,
             {{"SKILL.md", 'f', good_md, 0}, {"a.bin", 'f', "", 900}, {"b.bin", 'f', "", 900}},
             3,
             AB_E_LIMIT,
             "add up",
             &small},
            {"a duplicate entry",
             false,
             {{"SKILL.md", 'f', good_md, 0}, {"SKILL.md", 'f', good_md, 0}},
             2,
             AB_E_INVALID,
             "twice",
             NULL},
            {"an invalid skill (name mismatch)",
             true,
             {{"SKILL.md", 'f', "---\nname: other\ndescription: d\n---\n", 0}},
             1,
             AB_E_INVALID,
             "does not match",
             NULL},
            {"no SKILL.md",
             true,
             {{"README.md", 'f', "hi", 0}},
             1,
             AB_E_INVALID,
             "SKILL.md not found",
             NULL},
        };
        for (size_t i = 0; i < AB_ARRAY_LEN(evil); i++) {
                fd = make_archive(evil[i].zip, evil[i].e, evil[i].n);
                free(msg);
                code = install(s, "demo2", fd, evil[i].lim, NULL, &msg);
                close(fd);
                bool ok = code == evil[i].code && msg && strstr(msg, evil[i].mention);
                tap_ok(ok, "%s is refused (%s), naming %s", evil[i].what,
                       ab_code_name((ab_code)evil[i].code), evil[i].mention);
                if (!ok)
                        tap_diag("  code %d: %s", code, msg ? msg : "(none)");
                _cleanup_free_ char *d2 = xasprintf("%s/demo2", skills_dir);
                tap_ok(!exists(d2) && count_entries(staging_dir) == 0 && !exists(outside) &&
                           !exists(etc_x) && !exists("/tmp/ab-skills-evil") &&
                           count_entries(skills_dir) == 2 + 1 /* .staging */,
                       "... nothing left in DATA/skills, the staging dir or outside");
        }
        (void)marker;
        fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        free(msg);
        code = install(s, "demo2", fd, NULL, NULL, &msg);
        close(fd);
        tap_ok(code == AB_E_INVALID && msg && strstr(msg, "not a zip or tar"),
               "an empty body is not an archive");
        fd = make_archive(true, good, 1);
        free(msg);
        code = install(s, "../demo", fd, NULL, NULL, &msg);
        close(fd);
        tap_ok(code == AB_E_INVALID && count_entries(data) == 1 /* skills */,
               "a name with ../ is refused before anything is written");

        /* dry run */
        fd = make_archive(true, good, AB_ARRAY_LEN(good));
        ab_skill_report rep;
        ab_err *e = NULL;
        _cleanup_free_ char *demo3 = xasprintf("%s/demo3", skills_dir);
        ent g3[] = {{"SKILL.md", 'f', "---\nname: demo3\n---\n", 0}};
        close(fd);
        fd = make_archive(true, g3, 1);
        int r = ab_skill_install(s, "demo3", fd, AB_ARCHIVE_ANY, &ab_skill_limits, true, &rep, NULL,
                                 &e);
        close(fd);
        tap_ok(r == 0 && rep.n_errors == 0 &&
                   has_msg(rep.warnings, rep.n_warnings, AB_SKILL_W_DESC) && !exists(demo3) &&
                   count_entries(staging_dir) == 0,
               "a dry run validates (warning reported) and installs nothing");
        ab_skill_report_clear(&rep);
        ab_err_free(&e);
}

static void test_replace(ab_skills *s)
{
        _cleanup_free_ char *dir = xasprintf("%s/demo", skills_dir);
        int old = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        const char *v2 = "---\nname: demo\ndescription: version two\n---\nv2\n";
        ent e2[] = {{"SKILL.md", 'f', v2, 0}, {"new.txt", 'f', "n", 0}};
        int fd = make_archive(false, e2, 2);
        bool replaced = false;
        _cleanup_free_ char *msg = NULL;
        int code = install(s, "demo", fd, NULL, &replaced, &msg);
        close(fd);
        tap_ok(code == 0 && replaced, "installing over an existing skill replaces it");
        _cleanup_free_ char *p = xasprintf("%s/SKILL.md", dir);
        _cleanup_free_ char *got = read_at(p);
        TAP_IS_STR(got, v2, "... the new SKILL.md is in place");
        _cleanup_free_ char *sc = xasprintf("%s/scripts", dir);
        tap_ok(!exists(sc), "... with none of the old version's files");
        struct stat st;
        tap_ok(fstatat(old, "SKILL.md", &st, 0) < 0 && errno == ENOENT,
               "... the old directory was swapped out whole and removed (not edited in place)");
        close(old);
        TAP_IS_INT(count_entries(staging_dir), 0, "... and the staging dir is empty");

        /* a bad new version leaves the old one untouched */
        ent bad[] = {{"SKILL.md", 'f', v2, 0}, {"../x", 'f', "x", 0}};
        fd = make_archive(true, bad, 2);
        free(msg);
        code = install(s, "demo", fd, NULL, NULL, &msg);
        close(fd);
        free(got);
        got = read_at(p);
        tap_ok(code == AB_E_INVALID && got && !strcmp(got, v2),
               "a refused new version leaves the installed one as it was");
}

static void test_list_get_delete(ab_skills *s)
{
        _cleanup_free_ char *hidden = xasprintf("%s/.hidden", skills_dir);
        mkdir(hidden, 0755);
        _cleanup_free_ char *empty = xasprintf("%s/empty", skills_dir);
        mkdir(empty, 0755);
        ab_skill_info *v = NULL;
        size_t n = 0;
        ab_err *e = NULL;
        int r = ab_skills_list(s, &v, &n, &e);
        tap_ok(r == 0 && n == 2, "list: two skills (hidden and SKILL.md-less dirs skipped)");
        if (r == 0 && n == 2) {
                TAP_IS_STR(v[0].name, "demo", "sorted: demo first");
                TAP_IS_STR(v[0].description, "version two", "... with its description");
                TAP_IS_STR(v[1].name, "tool", "then tool");
                tap_ok(v[1].has_scripts && !v[1].has_templates && !v[0].has_scripts,
                       "has_scripts / has_templates");
                _cleanup_free_ char *prompt = ab_skills_prompt(v, n);
                tap_ok(strstr(prompt, "<name>demo</name>") &&
                           strstr(prompt, "<description>version two</description>") &&
                           strstr(prompt, "/mnt/skills/tool/SKILL.md") &&
                           strstr(prompt, "read-only"),
                       "the prompt lists names, descriptions and SKILL.md paths");
        }
        ab_skill_infos_free(v, n);
        ab_err_free(&e);

        json_t *j = NULL;
        r = ab_skill_get(s, "tool", &j, &e);
        tap_ok(r == 0 && !strcmp(json_string_value(json_object_get(j, "body")), "T\n") &&
                   !strcmp(json_string_value(
                               json_object_get(json_object_get(j, "frontmatter"), "description")),
                           "wrapped"),
               "get: frontmatter and body");
        json_t *files = json_object_get(j, "files");
        bool found = false;
        size_t i;
        json_t *f;
        json_array_foreach(files, i, f) found |=
            !strcmp(json_string_value(json_object_get(f, "path")), "scripts/x.py");
        tap_ok(found, "get: the file list has scripts/x.py");
        json_decref(j);
        ab_err_free(&e);
        tap_ok(ab_skill_get(s, "nope", &j, &e) < 0 && e->code == AB_E_NOT_FOUND,
               "get of an unknown skill: not_found");
        ab_err_free(&e);

        r = ab_skill_delete(s, "tool", &e);
        _cleanup_free_ char *t = xasprintf("%s/tool", skills_dir);
        tap_ok(r == 0 && !exists(t) && count_entries(staging_dir) == 0,
               "delete removes the skill and leaves nothing in staging");
        ab_err_free(&e);
        tap_ok(ab_skill_delete(s, "tool", &e) < 0 && e->code == AB_E_NOT_FOUND,
               "deleting it again: not_found");
        ab_err_free(&e);
        tap_ok(ab_skill_delete(s, "..", &e) < 0 && e->code == AB_E_INVALID && exists(skills_dir),
               "delete of \"..\" is refused");
        ab_err_free(&e);
}

int main(void)
{
        if (!mkdtemp(data)) {
                tap_skip_all("mkdtemp failed");
        }
        snprintf(skills_dir, sizeof(skills_dir), "%s/skills", data);
        snprintf(staging_dir, sizeof(staging_dir), "%s/skills/.staging", data);
        ab_skills s;
        ab_err *e = NULL;
        if (ab_skills_open(data, &s, &e) < 0) {
                tap_ok(0, "open: %s", e->msg);
                return tap_done();
        }
        tap_ok(exists(skills_dir) && exists(staging_dir),
               "open makes skills/ and skills/.staging/");
        test_parse();
        test_validate(&s);
        test_install(&s);
        test_replace(&s);
        test_list_get_delete(&s);
        ab_skills_close(&s);
        rm_rf(data);
        return tap_done();
}

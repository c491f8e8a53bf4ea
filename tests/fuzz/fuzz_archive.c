/* fuzz_archive - libFuzzer target for archive uploads (skills/archive.c,
 * used by PUT .../files?extract=1 in rest/upload.c and by skill installs).
 * The first byte picks the format (auto, zip, tar) and small or large
 * limits; the rest is the archive. Every entry the walk hands out is checked
 * against the walk's promise (a relative, normalised path without "..", a
 * file or directory) and its data is read, counted against the limits; a
 * second walk (the upload's writing pass) sees the same entries. On one
 * input in eight (bits 3-5 of the first byte set) the archive is also
 * installed as a skill (bit 6: a dry run) (extraction into a
 * staging folder, validation, rename) under a scratch data folder in
 * /dev/shm, and removed again. Build and run with scripts/fuzz.sh. */
#include "skills/archive.h"
#include "skills/skills.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
const char *__asan_default_options(void);

/* libarchive's buffers are large allocations: with ASan's default 256 MiB
 * quarantine each input mapped and filled fresh pages (half the CPU). */
const char *__asan_default_options(void)
{
        return "quarantine_size_mb=16";
}

/* abort() names the broken promise */
#define check(cond) ((cond) ? (void)0 : (fprintf(stderr, "check failed: %s\n", #cond), abort()))

static ab_skills skills;
static bool have_skills;

static void open_skills(void)
{
        char tmpl[] = "/dev/shm/ab-fuzz-archive.XXXXXX";
        const char *dir = mkdtemp(tmpl);
        if (!dir)
                dir = mkdtemp(strcpy(tmpl, "/tmp/ab-fuzz-archive.XXXXXX"));
        check(dir != NULL);
        ab_err *e = NULL;
        check(ab_skills_open(dir, &skills, &e) == 0);
        have_skills = true;
}

static int on_entry(void *ud, const char *path, bool is_dir, uint32_t mode, ab_archive_reader *rd,
                    ab_err **err)
{
        (void)ud;
        (void)mode;
        size_t n = strlen(path);
        check(n > 0 && path[0] != '/' && path[n - 1] != '/');
        check(!strstr(path, "//"));
        /* no "." or ".." component */
        for (const char *p = path; p;) {
                const char *s = strchr(p, '/');
                size_t l = s ? (size_t)(s - p) : strlen(p);
                check(!(l == 1 && p[0] == '.') && !(l == 2 && p[0] == '.' && p[1] == '.'));
                p = s ? s + 1 : NULL;
        }
        if (!is_dir)
                return ab_archive_data(rd, -1, err);
        return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size < 1)
                return 0;
        if (!have_skills)
                open_skills();
        uint8_t sel = data[0];
        ab_archive_format fmt = (ab_archive_format)(sel % 3);
        ab_archive_limits small = {.max_entries = 8, .max_entry_bytes = 64, .max_total_bytes = 256};
        ab_archive_limits big = {
            .max_entries = 10000, .max_entry_bytes = 1 << 20, .max_total_bytes = 4 << 20};
        const ab_archive_limits *lim = (sel & 4) ? &small : &big;
        int fd = memfd_create("upload", MFD_CLOEXEC);
        check(fd >= 0);
        check(ab_write_all(fd, data + 1, size - 1) == 0);
        ab_archive_stats st = {0};
        ab_err *e = NULL;
        if (ab_archive_walk(fd, fmt, lim, on_entry, NULL, &st, &e) < 0) {
                check(e && (e->code == AB_E_INVALID || e->code == AB_E_LIMIT));
                ab_err_free(&e);
        } else {
                check(st.bytes <= lim->max_total_bytes && st.files + st.dirs <= lim->max_entries);
                /* a second walk, as the upload's writing pass does, agrees */
                ab_archive_stats st2 = {0};
                check(ab_archive_walk(fd, fmt, lim, NULL, NULL, &st2, &e) == 0);
                check(st2.files == st.files && st2.dirs == st.dirs);
        }
        if ((sel & 0x38) == 0x38) { /* one input in 8: installs cost a folder tree each */
                ab_skill_report rep = {0};
                bool replaced = false;
                bool dry = sel & 64;
                int rc = ab_skill_install(&skills, "fz", fd, fmt, lim, dry, &rep, &replaced, &e);
                if (rc < 0) {
                        check(e != NULL);
                        ab_err_free(&e);
                } else if (!dry) {
                        check(ab_skill_delete(&skills, "fz", &e) == 0);
                }
                ab_skill_report_clear(&rep);
        }
        close(fd);
        return 0;
}

/* fuzz_layer - libFuzzer target for image layers (image/layer.c): the input
 * is the layer (plain, gzip or zstd tar), unpacked with small limits into a
 * fresh folder dest beside an empty sentinel folder "outside", both in a
 * scratch folder in /dev/shm. After each input: the limits held, a failure
 * is a layer's fault (invalid, limit) or a full disk, never internal, nothing
 * appeared beside dest or in outside; then dest is removed (without
 * following a symlink). The same input's diff id (ab_layer_diff_id, which
 * reads the whole decompressed stream) is either a sha256 digest or a
 * layer's fault, never more than its bound read. Build and run with
 * scripts/fuzz.sh. */
#include "image/layer.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
const char *__asan_default_options(void);

/* libarchive's buffers are large allocations: a smaller quarantine keeps
 * each input from mapping fresh pages. */
const char *__asan_default_options(void)
{
        return "quarantine_size_mb=16";
}

/* abort() names the broken promise */
#define check(cond) ((cond) ? (void)0 : (fprintf(stderr, "check failed: %s\n", #cond), abort()))

static char *scratch, *dest, *outside;

static void remove_scratch(void)
{
        rmdir(outside);
        rmdir(scratch);
}

static void make_scratch(void)
{
        char tmpl[] = "/dev/shm/ab-fuzz-layer.XXXXXX";
        const char *dir = mkdtemp(tmpl);
        if (!dir)
                dir = mkdtemp(strcpy(tmpl, "/tmp/ab-fuzz-layer.XXXXXX"));
        check(dir != NULL);
        scratch = xstrdup(dir);
        dest = xasprintf("%s/dest", scratch);
        outside = xasprintf("%s/outside", scratch);
        check(mkdir(outside, 0755) == 0);
        atexit(remove_scratch);
}

static int count_entries(const char *dir)
{
        DIR *d = opendir(dir);
        check(d != NULL);
        int n = 0;
        struct dirent *de;
        while ((de = readdir(d)))
                if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
                        n++;
        closedir(d);
        return n;
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
        (void)st;
        (void)ftw;
        int r = flag == FTW_DP ? rmdir(path) : unlink(path);
        if (r < 0)
                fprintf(stderr, "remove %s: %m\n", path);
        return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (!scratch)
                make_scratch();
        check(mkdir(dest, 0755) == 0);
        int dfd = open(dest, O_PATH | O_DIRECTORY | O_CLOEXEC);
        check(dfd >= 0);
        int fd = memfd_create("layer", MFD_CLOEXEC);
        check(fd >= 0);
        check(ab_write_all(fd, data, size) == 0);
        check(lseek(fd, 0, SEEK_SET) == 0);

        ab_layer_opts o = {.max_bytes = 1 << 20, .max_entries = 256};
        ab_layer_stats st = {0};
        ab_err *e = NULL;
        if (ab_layer_unpack(fd, dfd, &o, &st, &e) < 0) {
                check(e != NULL);
                if (e->code != AB_E_INVALID && e->code != AB_E_LIMIT && e->code != AB_E_STORAGE)
                        fprintf(stderr, "unexpected error: %s\n", e->msg);
                check(e->code == AB_E_INVALID || e->code == AB_E_LIMIT || e->code == AB_E_STORAGE);
                ab_err_free(&e);
        }
        check(st.bytes <= o.max_bytes && st.entries <= o.max_entries + 1);

        char *diff = NULL;
        check(lseek(fd, 0, SEEK_SET) == 0);
        if (ab_layer_diff_id(fd, &o, &diff, &e) < 0) {
                check(e != NULL && diff == NULL);
                check(e->code == AB_E_INVALID || e->code == AB_E_LIMIT);
                ab_err_free(&e);
        } else {
                check(diff != NULL && strlen(diff) == 71 && !strncmp(diff, "sha256:", 7));
                free(diff);
        }
        check(count_entries(scratch) == 2 && count_entries(outside) == 0);
        close(fd);
        close(dfd);
        check(nftw(dest, remove_one, 32, FTW_DEPTH | FTW_PHYS | FTW_MOUNT) == 0);
        return 0;
}

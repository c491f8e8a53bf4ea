/* Unit tests: the image store. Archives come from tests/lib/imagelib.py
 * (--write-example): `docker save` (legacy and blobs/ layouts, plain and gzip
 * layers) and OCI layouts are imported (one through a pipe), looked up every
 * way, removed, held, released and collected; bad archives (not a tar, no
 * manifest, a wrong digest, arm64, "../x" and "/x" members) are refused
 * leaving the store as it was; leftovers of a crash in tmp/ go at open. */
#include "image/store.h"
#include "tap.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <jansson.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

static char tmp[] = "/tmp/ab-imgstore-XXXXXX";
static char ex[256], dir[256];
static json_t *ids;    /* ids.json of the example */
static bool writer_ok; /* the last import through a pipe took the writer's whole stream */
#define NOT_FOUND ab_code_name(AB_E_NOT_FOUND)

/* ---- helpers ---------------------------------------------------------- */

static const char *id_of(const char *key)
{
        return json_string_value(json_object_get(ids, key));
}

static int count_entries(const char *sub)
{
        _cleanup_free_ char *p = xasprintf("%s/%s", dir, sub);
        DIR *d = opendir(p);
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

static size_t strv_len(char **v)
{
        size_t n = 0;
        while (v && v[n])
                n++;
        return n;
}

static bool strv_has(char **v, const char *s)
{
        for (; v && *v; v++)
                if (!strcmp(*v, s))
                        return true;
        return false;
}

typedef struct seen {
        int resolve, unpack_start, unpack_end, exists, done, other;
        bool done_last;
} seen;

static void on_progress(void *ud, const char *phase, const char *digest, uint64_t done,
                        uint64_t total)
{
        seen *s = ud;
        s->done_last = false;
        if (!strcmp(phase, "resolve"))
                s->resolve++;
        else if (!strcmp(phase, "unpack") && done == 0)
                s->unpack_start++;
        else if (!strcmp(phase, "unpack") && done == total)
                s->unpack_end++;
        else if (!strcmp(phase, "exists"))
                s->exists++;
        else if (!strcmp(phase, "done"))
                s->done++, s->done_last = true;
        else
                s->other++;
        if (strcmp(phase, "resolve") && strcmp(phase, "done") && !ab_digest_valid(digest))
                s->other++;
}

/* Imports example archive `file`; through a pipe when pipe_it. */
static int import(ab_image_store *s, const char *file, const char *name, bool pipe_it, seen *sn,
                  ab_image **out, size_t *n, ab_err **err)
{
        _cleanup_free_ char *p = xasprintf("%s/%s", ex, file);
        int fd = open(p, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
                tap_ok(0, "open %s", p);
                return -1;
        }
        pid_t pid = -1;
        if (pipe_it) {
                int pfd[2];
                if (pipe2(pfd, O_CLOEXEC) < 0)
                        abort();
                pid = fork();
                if (pid == 0) {
                        signal(SIGPIPE, SIG_IGN);
                        close(pfd[0]);
                        char buf[65536];
                        ssize_t k;
                        while ((k = read(fd, buf, sizeof(buf))) > 0)
                                if (ab_write_all(pfd[1], buf, (size_t)k) < 0)
                                        _exit(1);
                        /* zeros after the tar's end, as a padding writer sends */
                        memset(buf, 0, sizeof(buf));
                        for (int i = 0; i < 4; i++)
                                if (ab_write_all(pfd[1], buf, sizeof(buf)) < 0)
                                        _exit(1);
                        _exit(0);
                }
                close(fd);
                close(pfd[1]);
                fd = pfd[0];
        }
        seen dummy = {0};
        int r = ab_image_import(s, fd, name, on_progress, sn ? sn : &dummy, out, n, err);
        close(fd);
        if (pid > 0) {
                int st = -1;
                waitpid(pid, &st, 0);
                writer_ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
        }
        return r;
}

/* An import that must fail with code; nothing may be added to the store. */
static void import_fails(ab_image_store *s, const char *file, const char *name, ab_code code,
                         const char *msg_part)
{
        int layers = count_entries("layers"), images = count_entries("images");
        ab_image *imgs = NULL;
        size_t n = 0;
        ab_err *e = NULL;
        int r = import(s, file, name, false, NULL, &imgs, &n, &e);
        tap_ok(r < 0 && e && e->code == code, "%s%s%s: refused (%s)", file, name ? " as " : "",
               name ? name : "", ab_code_name(code));
        if (e) {
                tap_diag("  %s", e->msg);
                if (msg_part)
                        tap_ok(strstr(e->msg, msg_part) != NULL, "%s: message names \"%s\"", file,
                               msg_part);
        }
        tap_ok(count_entries("layers") == layers && count_entries("images") == images &&
                   count_entries("tmp") == 0,
               "%s: nothing added to the store, tmp/ empty", file);
        ab_err_free(&e);
        ab_image_list_free(imgs, n);
}

static ab_image *find(ab_image *v, size_t n, const char *id)
{
        for (size_t i = 0; i < n; i++)
                if (v[i].id && !strcmp(v[i].id, id))
                        return &v[i];
        return NULL;
}

/* Looks q up; returns the id found (static buffer) or the error code name. */
static const char *get_as(ab_image_store *s, const char *app, const char *q);

static const char *get(ab_image_store *s, const char *q)
{
        return get_as(s, NULL, q);
}

static char *layer_path(const char *digest)
{
        return xasprintf("%s/layers/%s", dir, digest + 7);
}

/* ---- tests ------------------------------------------------------------ */

static void test_open(ab_image_store **s)
{
        /* what a crash mid-unpack leaves: a half layer in tmp/ (and never in layers/) */
        _cleanup_free_ char *t = xasprintf("%s/tmp", dir);
        _cleanup_free_ char *half = xasprintf("%s/tmp/layer.1.2.3/fs/bin", dir);
        _cleanup_free_ char *cmd = xasprintf("mkdir -p '%s' && touch '%s/.ab-tmp.x'", half, t);
        if (system(cmd) != 0)
                tap_ok(0, "make leftovers");
        ab_image_store_opts o = {.dir = dir};
        ab_err *e = NULL;
        int r = ab_image_store_open(&o, s, &e);
        tap_ok(r == 0, "open %s", dir);
        if (r < 0) {
                tap_diag("  %s", e->msg);
                exit(tap_done());
        }
        static const char *const subs[] = {"images", "layers", "holds", "tmp"};
        bool all = true;
        for (size_t i = 0; i < AB_ARRAY_LEN(subs); i++) {
                _cleanup_free_ char *p = xasprintf("%s/%s", dir, subs[i]);
                all &= exists(p);
        }
        tap_ok(all, "open makes images/, layers/, holds/, tmp/");
        TAP_IS_INT(count_entries("tmp"), 0, "open empties tmp/ (a crashed unpack's leftovers)");
}

static void check_app(ab_image *app)
{
        TAP_IS_INT(app->n_layers, 3, "app: 3 layers");
        json_t *ld = json_object_get(ids, "app-layers");
        for (size_t i = 0; i < 3 && i < app->n_layers; i++) {
                _cleanup_free_ char *lp = layer_path(json_string_value(json_array_get(ld, i)));
                _cleanup_free_ char *want = xasprintf("%s/fs", lp);
                TAP_IS_STR(app->layers[i], want, "app: layer path (blob digest)");
        }
        tap_ok(app->names && strv_has(app->names, "docker.io/example/app:1"),
               "app: named docker.io/example/app:1");
        TAP_IS_STR(app->config.os, "linux", "app: os");
        TAP_IS_STR(app->config.arch, "amd64", "app: arch");
        TAP_IS_STR(app->config.workdir, "/data", "app: workdir");
        TAP_IS_STR(app->config.user, "app", "app: user");
        tap_ok(app->config.env && strv_has(app->config.env, "GREETING=hi"), "app: env");
        tap_ok(app->config.entrypoint && !strcmp(app->config.entrypoint[0], "/bin/sh") &&
                   !strcmp(app->config.entrypoint[1], "-c") && !app->config.entrypoint[2],
               "app: entrypoint");
        tap_ok(app->config.cmd && !strcmp(app->config.cmd[0], "cat /etc/motd"), "app: cmd");
        TAP_IS_STR(app->source, "import", "app: source");
        tap_ok(app->size > 1000000, "app: size counts the file data (%llu)",
               (unsigned long long)app->size);
        tap_ok(app->created > 1700000000, "app: created");
        if (app->n_layers < 3)
                return;
        _cleanup_free_ char *bb = xasprintf("%s/bin/busybox", app->layers[0]);
        _cleanup_free_ char *sh = xasprintf("%s/bin/sh", app->layers[0]);
        _cleanup_free_ char *wa = xasprintf("%s/data/a", app->layers[2]);
        _cleanup_free_ char *tool = xasprintf("%s/opt/tool", app->layers[2]);
        _cleanup_free_ char *y = xasprintf("%s/opt/tool/y", app->layers[2]);
        _cleanup_free_ char *meta = xasprintf("%s/../layer.json", app->layers[0]);
        struct stat st;
        tap_ok(stat(bb, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0111),
               "layer 1: /bin/busybox unpacked");
        char target[64] = {0};
        tap_ok(readlink(sh, target, sizeof(target) - 1) > 0 && !strcmp(target, "busybox"),
               "layer 1: /bin/sh -> busybox");
        tap_ok(lstat(wa, &st) == 0 && S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0),
               "layer 3: /data/a is a whiteout");
        char v[4] = {0};
        tap_ok(getxattr(tool, "trusted.overlay.opaque", v, sizeof(v)) == 1 && v[0] == 'y',
               "layer 3: /opt/tool is opaque");
        tap_ok(exists(y), "layer 3: /opt/tool/y");
        _cleanup_free_ char *link = xasprintf("%s/etc/motd.link", app->layers[1]);
        _cleanup_free_ char *b = xasprintf("%s/data/b", app->layers[1]);
        tap_ok(stat(link, &st) == 0 && st.st_nlink == 2, "layer 2: a hard link");
        tap_ok(stat(b, &st) == 0 && st.st_uid == 1000 && (st.st_mode & 07777) == 0600,
               "layer 2: owner and mode kept");
        tap_ok(exists(meta), "layer.json next to fs/");
}

static void test_import_docker(ab_image_store *s)
{
        ab_image *imgs = NULL;
        size_t n = 0;
        ab_err *e = NULL;
        seen sn = {0};
        int r = import(s, "docker.tar", NULL, true, &sn, &imgs, &n, &e);
        tap_ok(r == 0, "import docker save through a pipe");
        if (r < 0) {
                tap_diag("  %s", e->msg);
                ab_err_free(&e);
                return;
        }
        TAP_IS_INT(n, 2, "two images");
        tap_ok(writer_ok, "the writer on the pipe could write its whole stream");
        ab_image *app = find(imgs, n, id_of("app")), *bb = find(imgs, n, id_of("busybox"));
        tap_ok(app && bb, "ids are the config digests");
        if (app)
                check_app(app);
        if (bb) {
                tap_ok(strv_has(bb->names, "docker.io/library/busybox:latest") &&
                           strv_has(bb->names, "docker.io/library/busybox:1.36") &&
                           strcmp(bb->names[0], bb->names[1]) < 0,
                       "busybox: both RepoTags, canonical and sorted");
                TAP_IS_INT(bb->n_layers, 1, "busybox: one layer");
                tap_ok(app && bb->n_layers && !strcmp(bb->layers[0], app->layers[0]),
                       "the shared base layer is the same directory");
                TAP_IS_STR(bb->config.cmd ? bb->config.cmd[0] : NULL, "sh", "busybox: cmd");
        }
        TAP_IS_INT(count_entries("layers"), 3, "the shared layer is stored once");
        TAP_IS_INT(sn.resolve, 1, "progress: resolve");
        TAP_IS_INT(sn.unpack_start, 3, "progress: unpack started for 3 layers");
        TAP_IS_INT(sn.unpack_end, 3, "progress: unpack ended for 3 layers");
        TAP_IS_INT(sn.exists, 1, "progress: the shared layer exists for the second image");
        tap_ok(sn.done == 1 && sn.done_last && !sn.other, "progress: done, last");
        TAP_IS_INT(count_entries("tmp"), 0, "tmp/ empty after the import");
        ab_image_list_free(imgs, n);

        /* again: nothing unpacked, the record's creation time kept */
        ab_image before;
        if (ab_image_get(s, "example/app:1", &before, &e) < 0) {
                tap_ok(0, "get app: %s", e->msg);
                ab_err_free(&e);
                return;
        }
        memset(&sn, 0, sizeof(sn));
        r = import(s, "docker.tar", NULL, false, &sn, &imgs, &n, &e);
        tap_ok(r == 0 && n == 2 && sn.exists == 4 && sn.unpack_start == 0,
               "import again: every layer exists");
        if (e)
                ab_err_free(&e);
        app = find(imgs, n, id_of("app"));
        tap_ok(app && app->created == before.created, "import again: created kept");
        ab_image_clear(&before);
        ab_image_list_free(imgs, n);
}

static void test_import_more(ab_image_store *s)
{
        ab_image *imgs = NULL;
        size_t n = 0;
        ab_err *e = NULL;
        int r = import(s, "docker-gz.tar", NULL, false, NULL, &imgs, &n, &e);
        tap_ok(r == 0 && n == 1, "import docker save with gzip layers (blobs/ paths)");
        if (r == 0) {
                TAP_IS_STR(imgs[0].id, id_of("gz"), "gz: id");
                TAP_IS_INT(imgs[0].n_layers, 2, "gz: 2 layers");
                tap_ok(imgs[0].names[0] && !strcmp(imgs[0].names[0], "docker.io/gz/app:1"),
                       "gz: named");
                _cleanup_free_ char *motd = xasprintf("%s/bin/busybox", imgs[0].layers[0]);
                tap_ok(exists(motd), "gz: compressed layer unpacked");
        } else {
                tap_diag("  %s", e->msg);
                ab_err_free(&e);
        }
        ab_image_list_free(imgs, n);

        /* the same image with other (compressed) layer blobs: the layers it has stay */
        seen sn = {0};
        int layers = count_entries("layers");
        r = import(s, "app-gz.tar", NULL, false, &sn, &imgs, &n, &e);
        tap_ok(r == 0 && n == 1 && sn.exists == 3 && sn.unpack_start == 0 &&
                   count_entries("layers") == layers,
               "the same image with gzip layers: its stored layers are kept, none unpacked");
        if (r == 0) {
                TAP_IS_STR(imgs[0].id, id_of("app"), "app-gz: the app's id");
                tap_ok(strv_has(imgs[0].names, "docker.io/example/app:gz") &&
                           strv_has(imgs[0].names, "docker.io/example/app:1"),
                       "app-gz: one more name for the app");
        } else {
                tap_diag("  %s", e->msg);
                ab_err_free(&e);
        }
        ab_image_list_free(imgs, n);

        memset(&sn, 0, sizeof(sn));
        r = import(s, "oci.tar", NULL, true, &sn, &imgs, &n, &e);
        tap_ok(r == 0 && n == 1, "import an OCI layout through a pipe");
        if (r == 0) {
                TAP_IS_STR(imgs[0].id, id_of("oci"), "oci: id");
                tap_ok(imgs[0].names[0] &&
                           !strcmp(imgs[0].names[0], "localhost:5000/tools/oci:2") &&
                           !imgs[0].names[1],
                       "oci: named by its ref.name");
                tap_ok(imgs[0].digests[0] && ab_digest_valid(imgs[0].digests[0]),
                       "oci: its manifest digest is recorded");
                TAP_IS_INT(sn.exists, 1, "oci: the base layer shared with docker save exists");
                TAP_IS_INT(sn.unpack_start, 1, "oci: one layer unpacked");
                if (imgs[0].digests[0])
                        TAP_IS_STR(get(s, imgs[0].digests[0]), id_of("oci"),
                                   "get by manifest digest");
        } else {
                tap_diag("  %s", e->msg);
                ab_err_free(&e);
        }
        ab_image_list_free(imgs, n);

        r = import(s, "oci-multi.tar", NULL, false, NULL, &imgs, &n, &e);
        tap_ok(r == 0 && n == 1, "import an OCI layout of a multi-platform image");
        if (r == 0) {
                TAP_IS_STR(imgs[0].id, id_of("multi"), "multi: the amd64 image is picked");
                tap_ok(imgs[0].names[0] && !strcmp(imgs[0].names[0], "docker.io/multi/app:1"),
                       "multi: named by the index's ref.name");
                tap_ok(imgs[0].digests[0] && imgs[0].digests[1] && !imgs[0].digests[2],
                       "multi: the index's and the manifest's digests are recorded");
                for (int i = 0; i < 2 && imgs[0].digests[i]; i++)
                        TAP_IS_STR(get(s, imgs[0].digests[i]), id_of("multi"),
                                   "multi: get by either digest");
        } else {
                tap_diag("  %s", e->msg);
                ab_err_free(&e);
        }
        ab_image_list_free(imgs, n);
        import_fails(s, "oci-arm-only.tar", NULL, AB_E_UNSUPPORTED, "linux/amd64");
        tap_ok(ab_image_remove(s, "multi/app:1", &e) == 0 && ab_image_gc(s, NULL, &e) == 0,
               "remove multi/app:1, gc");
        TAP_IS_STR(get(s, id_of("multi")), NOT_FOUND, "gc: the unnamed image is gone");
        _cleanup_free_ char *base = layer_path(id_of("base-layer"));
        tap_ok(exists(base), "gc: its layer shared with other images stays");

        import_fails(s, "oci-tag.tar", NULL, AB_E_INVALID, "give it a name");
        r = import(s, "oci-tag.tar", "mytool", false, NULL, &imgs, &n, &e);
        tap_ok(r == 0 && n == 1 && imgs[0].names[0] &&
                   !strcmp(imgs[0].names[0], "docker.io/library/mytool:latest"),
               "an OCI layout named only by a tag is imported with a name");
        if (e) {
                tap_diag("  %s", e->msg);
                ab_err_free(&e);
        }
        ab_image_list_free(imgs, n);
        import_fails(s, "docker.tar", "one/name", AB_E_INVALID, "2 images");
}

static void test_bad(ab_image_store *s)
{
        import_fails(s, "not-a-tar", NULL, AB_E_INVALID, "not a tar");
        import_fails(s, "no-manifest.tar", NULL, AB_E_INVALID, "manifest.json");
        import_fails(s, "bad-diffid.tar", NULL, AB_E_INVALID, "config says");
        import_fails(s, "bad-blob.tar", NULL, AB_E_INVALID, "has digest");
        import_fails(s, "arm64.tar", NULL, AB_E_UNSUPPORTED,
                     "image is for linux/arm64, this host runs linux/amd64");
        import_fails(s, "dotdot.tar", NULL, AB_E_INVALID, "\"..\"");
        import_fails(s, "absolute.tar", NULL, AB_E_INVALID, "absolute");
        unlink("/tmp/ab-imgstore-evil");
        import_fails(s, "link-parent.tar", NULL, AB_E_INVALID, "blobs/ab-imgstore-evil");
        tap_ok(!exists("/tmp/ab-imgstore-evil"), "nothing written through a symlink");
        import_fails(s, "link-file.tar", NULL, AB_E_INVALID, "manifest.json");
}

static void test_get_list(ab_image_store *s)
{
        const char *app = id_of("app"), *bb = id_of("busybox");
        TAP_IS_STR(get(s, "busybox"), bb, "get busybox (short name)");
        TAP_IS_STR(get(s, "busybox:1.36"), bb, "get busybox:1.36");
        TAP_IS_STR(get(s, "docker.io/library/busybox:latest"), bb, "get by canonical name");
        TAP_IS_STR(get(s, "example/app:1"), app, "get example/app:1");
        TAP_IS_STR(get(s, app), app, "get by id");
        _cleanup_free_ char *p12 = xstrndup(app + 7, 12), *p11 = xstrndup(app + 7, 11);
        _cleanup_free_ char *sp12 = xasprintf("sha256:%s", p12);
        TAP_IS_STR(get(s, p12), app, "get by a 12-hex id prefix");
        TAP_IS_STR(get(s, sp12), app, "get by sha256: + a 12-hex id prefix");
        TAP_IS_STR(get(s, p11), NOT_FOUND, "an 11-hex prefix is not an id");
        TAP_IS_STR(get(s, "example/app:2"), NOT_FOUND, "an unknown tag");
        TAP_IS_STR(get(s, "Not A Name"), ab_code_name(AB_E_INVALID), "a malformed reference");
        _cleanup_free_ char *unknown = xasprintf("sha256:%064d", 0);
        TAP_IS_STR(get(s, unknown), NOT_FOUND, "an unknown id");

        ab_image *v = NULL;
        size_t n = 0;
        ab_err *e = NULL;
        int r = ab_image_list(s, &v, &n, &e);
        tap_ok(r == 0 && n == 5, "list: 5 images (got %zu)", n);
        bool sorted = true;
        for (size_t i = 1; i < n; i++)
                sorted &= strcmp(v[i - 1].id, v[i].id) < 0;
        tap_ok(sorted, "list: sorted by id");
        ab_image_list_free(v, n);
        ab_err_free(&e);
}

/* ---- commit (snapshots) ------------------------------------------------- */

/* A layer as a box's snapshot writes it: a new file, a whiteout of the
 * image's /data/b, a workspace entry. */
static char snap_byte = 'x'; /* the new layer's files hold it: another byte, another image */

static int write_snap_layer(void *ud, int fd, ab_err **err)
{
        int *calls = ud;
        (*calls)++;
        struct archive *a = archive_write_new();
        struct archive_entry *en = archive_entry_new();
        archive_write_set_format_pax_restricted(a);
        archive_write_open_fd(a, fd);
        static const char *const names[] = {"new", "new/file", "data/.wh.b", "workspace",
                                            "workspace/w"};
        for (size_t i = 0; i < AB_ARRAY_LEN(names); i++) {
                bool isdir = !strchr(names[i], '/');
                archive_entry_clear(en);
                archive_entry_set_pathname(en, names[i]);
                archive_entry_set_filetype(en, isdir ? AE_IFDIR : AE_IFREG);
                archive_entry_set_perm(en, isdir ? 0755 : 0644);
                archive_entry_set_uid(en, 1000);
                archive_entry_set_size(en, isdir || strstr(names[i], ".wh.") ? 0 : 2);
                archive_write_header(a, en);
                if (!isdir && !strstr(names[i], ".wh."))
                        archive_write_data(a, (char[]){snap_byte, '\n'}, 2);
        }
        archive_write_close(a);
        archive_write_free(a);
        archive_entry_free(en);
        return 0;
}

static void test_commit(ab_image_store *s)
{
        const char *app = id_of("app");
        ab_image img = {0}, base = {0};
        ab_err *e = NULL;
        int calls = 0;
        int r = ab_image_commit(s, app, "Bad Name", NULL, write_snap_layer, &calls, &img, &e);
        tap_ok(r < 0 && e && e->code == AB_E_INVALID && calls == 0,
               "commit: a bad name is AB_E_INVALID, before any layer is written");
        ab_err_free(&e);
        int layers = count_entries("layers");
        r = ab_image_commit(s, app, "snap:1", NULL, write_snap_layer, &calls, &img, &e);
        tap_ok(r == 0 && calls == 1, "commit app + a layer as snap:1 (%s)", e ? e->msg : "ok");
        ab_err_free(&e);
        if (r < 0)
                return;
        (void)ab_image_get(s, app, &base, NULL);
        tap_ok(strv_has(img.names, "docker.io/library/snap:1"), "... named by Docker's rules");
        TAP_IS_INT((int)img.n_layers, (int)base.n_layers + 1, "... the base's layers plus one");
        for (size_t i = 0; i < base.n_layers; i++)
                tap_ok(!strcmp(img.layers[i], base.layers[i]), "... layer %zu shared", i);
        TAP_IS_STR(img.source, "snapshot", "... source snapshot");
        TAP_IS_INT((int)strv_len(img.config.diff_ids), (int)strv_len(base.config.diff_ids) + 1,
                   "... one more diff id");
        TAP_IS_INT(count_entries("layers"), layers + 1, "... one new layer directory");
        _cleanup_free_ char *f = xasprintf("%s/new/file", img.layers[img.n_layers - 1]);
        _cleanup_free_ char *wh = xasprintf("%s/data/b", img.layers[img.n_layers - 1]);
        struct stat st;
        tap_ok(exists(f) && lstat(wh, &st) == 0 && S_ISCHR(st.st_mode) && st.st_rdev == 0,
               "... unpacked as any layer: files, an OCI whiteout made an overlayfs one");
        TAP_IS_STR(get(s, "snap:1"), img.id, "get snap:1");
        tap_ok(ab_image_remove(s, "snap:1", &e) == 0 && ab_image_gc(s, NULL, &e) == 0,
               "remove snap:1, collect");
        ab_err_free(&e);
        TAP_IS_INT(count_entries("layers"), layers, "... its layer is gone, the base's stay");
        ab_image_clear(&img);
        ab_image_clear(&base);
}

/* The id app gets for q, or the error's code name. */
static const char *get_as(ab_image_store *s, const char *app, const char *q)
{
        static char got[128];
        ab_image img;
        ab_err *e = NULL;
        if (ab_image_get_as(s, app, q, &img, &e) < 0) {
                snprintf(got, sizeof(got), "%s", ab_code_name(e->code));
                ab_err_free(&e);
                return got;
        }
        snprintf(got, sizeof(got), "%s", img.id);
        ab_image_clear(&img);
        return got;
}

/* A snapshot made with an API key is its app's private image: named in the
 * app's own names, seen and used by that app (and the admin) only. */
static void test_commit_private(ab_image_store *s)
{
        const char *app = id_of("app");
        ab_image mine = {0}, shared = {0};
        ab_err *e = NULL;
        int calls = 0, layers = count_entries("layers");
        snap_byte = 'p';
        int r = ab_image_commit(s, app, "snap:1", "acme", write_snap_layer, &calls, &mine, &e);
        tap_ok(r == 0, "commit snap:1 for app acme (%s)", e ? e->msg : "ok");
        ab_err_free(&e);
        if (r < 0)
                return;
        tap_ok(strv_len(mine.names) == 1 &&
                   !strcmp(mine.names[0], "@acme/docker.io/library/snap:1"),
               "... named in acme's own names");
        tap_ok(mine.apps && strv_len(mine.apps) == 1 && !strcmp(mine.apps[0], "acme"),
               "... private to acme");
        tap_ok(ab_image_visible(&mine, "acme") && ab_image_visible(&mine, NULL) &&
                   !ab_image_visible(&mine, "other"),
               "... visible to acme and the admin, not to app other");
        TAP_IS_STR(get_as(s, "acme", "snap:1"), mine.id, "acme gets snap:1");
        TAP_IS_STR(get_as(s, "acme", mine.id), mine.id, "... and its id");
        TAP_IS_STR(get_as(s, "other", "snap:1"), NOT_FOUND, "app other does not find snap:1");
        TAP_IS_STR(get_as(s, "other", mine.id), NOT_FOUND, "... nor its id");
        TAP_IS_STR(get_as(s, "other", "@acme/docker.io/library/snap:1"), NOT_FOUND,
                   "... nor its name as stored");
        TAP_IS_STR(get(s, "snap:1"), NOT_FOUND, "the shared name snap:1 stays free");
        TAP_IS_STR(get(s, "@acme/docker.io/library/snap:1"), mine.id,
                   "the admin finds it by its name as stored");
        TAP_IS_STR(ab_image_name_shown(mine.names[0], "acme"), "docker.io/library/snap:1",
                   "acme sees the name without its prefix");
        tap_ok(!ab_image_name_shown(mine.names[0], "other") &&
                   !ab_image_name_shown(mine.names[0], "acm") &&
                   !strcmp(ab_image_name_shown(mine.names[0], NULL), mine.names[0]) &&
                   !strcmp(ab_image_name_shown("docker.io/library/x:1", "other"),
                           "docker.io/library/x:1"),
               "another app does not see it, the admin sees it as stored, shared names are shown");

        snap_byte = 's';
        r = ab_image_commit(s, app, "snap:1", NULL, write_snap_layer, &calls, &shared, &e);
        tap_ok(r == 0 && !shared.apps && strcmp(shared.id, mine.id),
               "the admin's snap:1 is another image, shared (%s)", e ? e->msg : "ok");
        ab_err_free(&e);
        TAP_IS_STR(get_as(s, "acme", "snap:1"), mine.id, "acme still gets its own snap:1 first");
        TAP_IS_STR(get_as(s, "other", "snap:1"), shared.id, "app other gets the shared one");

        /* the same box files on the same base from two apps: one image when
         * made within one second (a config holds its time), private to both;
         * else two. Either way each app gets its own and not the other's. */
        time_t t0 = time(NULL);
        while (time(NULL) == t0)
                usleep(10000);
        snap_byte = 't';
        ab_image ta = {0}, tb = {0};
        r = ab_image_commit(s, app, "twin:1", "acme", write_snap_layer, &calls, &ta, &e);
        if (r == 0)
                r = ab_image_commit(s, app, "twin:1", "other", write_snap_layer, &calls, &tb, &e);
        tap_ok(r == 0, "acme and other make the same image twin:1 (%s)", e ? e->msg : "ok");
        ab_err_free(&e);
        if (r == 0 && !strcmp(ta.id, tb.id)) {
                tap_ok(strv_len(tb.apps) == 2, "... in one second: one image, private to both");
        } else if (r == 0) {
                _cleanup_free_ char *a_id = xstrdup(ta.id);
                tap_ok(strcmp(get_as(s, "other", a_id), a_id) &&
                           strcmp(get_as(s, "acme", tb.id), tb.id),
                       "... in two seconds: two images, neither app gets the other's");
        }
        TAP_IS_STR(get_as(s, "acme", "twin:1"), ta.id ? ta.id : "-",
                   "... acme gets its own twin:1");
        TAP_IS_STR(get_as(s, "other", "twin:1"), tb.id ? tb.id : "-", "... other gets its own");
        ab_image_clear(&ta);
        ab_image_clear(&tb);

        tap_ok(ab_image_remove(s, "@acme/docker.io/library/snap:1", &e) == 0 &&
                   ab_image_remove(s, "@acme/docker.io/library/twin:1", &e) == 0 &&
                   ab_image_remove(s, "@other/docker.io/library/twin:1", &e) == 0 &&
                   ab_image_remove(s, "snap:1", &e) == 0 && ab_image_gc(s, NULL, &e) == 0,
               "the admin removes them by their names as stored; collect");
        ab_err_free(&e);
        TAP_IS_INT(count_entries("layers"), layers, "... their layers are gone");
        snap_byte = 'x';
        ab_image_clear(&mine);
        ab_image_clear(&shared);
}

static int64_t layer_bytes(const char *digest)
{
        _cleanup_free_ char *p = xasprintf("%s/layers/%s/layer.json", dir, digest + 7);
        json_t *j = json_load_file(p, 0, NULL);
        int64_t b = (int64_t)json_integer_value(json_object_get(j, "bytes"));
        json_decref(j);
        return b;
}

static bool live_a(void *ud, const char *holder)
{
        return !strcmp(holder, "box-a");
}

static void test_remove_hold_gc(ab_image_store *s)
{
        const char *app = id_of("app"), *bb = id_of("busybox");
        ab_err *e = NULL;
        tap_ok(ab_image_remove(s, "busybox:1.36", &e) == 0, "remove busybox:1.36");
        TAP_IS_STR(get(s, "busybox:1.36"), NOT_FOUND, "busybox:1.36 is gone");
        TAP_IS_STR(get(s, "busybox"), bb, "busybox:latest stays");
        tap_ok(ab_image_remove(s, bb, &e) == 0, "remove busybox by id");
        TAP_IS_STR(get(s, "busybox"), NOT_FOUND, "every name of it went");
        TAP_IS_STR(get(s, bb), bb, "its record stays until gc");
        tap_ok(ab_image_remove(s, "nope:1", &e) < 0 && e && e->code == AB_E_NOT_FOUND,
               "remove an unknown name: not_found");
        ab_err_free(&e);

        tap_ok(ab_image_hold(s, "box1", bb, &e) == 0, "hold busybox (unnamed) for box1");
        tap_ok(ab_image_hold(s, "box1", "sha256:0000", &e) < 0 && e->code == AB_E_INVALID,
               "hold a malformed id: invalid");
        ab_err_free(&e);
        _cleanup_free_ char *none = xasprintf("sha256:%064d", 0);
        tap_ok(ab_image_hold(s, "box9", none, &e) < 0 && e->code == AB_E_NOT_FOUND,
               "hold an unknown image: not_found");
        ab_err_free(&e);
        tap_ok(ab_image_hold(s, "../x", bb, &e) < 0 && e->code == AB_E_INVALID,
               "a holder that is a path: invalid");
        ab_err_free(&e);

        /* app: unnamed and held; its layers 2 and 3 are its own, layer 1 shared */
        tap_ok(ab_image_remove(s, "example/app:1", &e) == 0 &&
                   ab_image_remove(s, "example/app:gz", &e) == 0,
               "remove example/app:1 and example/app:gz");
        tap_ok(ab_image_hold(s, "box2", app, &e) == 0, "hold app for box2");
        uint64_t freed = 1;
        tap_ok(ab_image_gc(s, &freed, &e) == 0 && freed == 0, "gc: held images stay");
        TAP_IS_STR(get(s, bb), bb, "gc: held busybox kept");
        TAP_IS_STR(get(s, app), app, "gc: held app kept");

        json_t *ld = json_object_get(ids, "app-layers");
        const char *l1 = json_string_value(json_array_get(ld, 0));
        const char *l2 = json_string_value(json_array_get(ld, 1));
        const char *l3 = json_string_value(json_array_get(ld, 2));
        int64_t unique = layer_bytes(l2) + layer_bytes(l3);
        tap_ok(ab_image_release(s, "box1", &e) == 0 && ab_image_release(s, "box2", &e) == 0 &&
                   ab_image_release(s, "never", &e) == 0,
               "release box1, box2 (and a holder that never held)");

        /* a pull or import running (gc.lock shared): gc skips the round */
        _cleanup_free_ char *gl = xasprintf("%s/gc.lock", dir);
        int gfd = open(gl, O_RDWR | O_CLOEXEC);
        tap_ok(gfd >= 0 && flock(gfd, LOCK_SH) == 0, "take gc.lock shared (a pull running)");
        tap_ok(ab_image_gc(s, &freed, &e) == 0 && freed == 0, "gc: skipped while it is held");
        TAP_IS_STR(get(s, app), app, "gc skipped: app still there");
        if (gfd >= 0)
                close(gfd);

        tap_ok(ab_image_gc(s, &freed, &e) == 0, "gc");
        TAP_IS_STR(get(s, app), NOT_FOUND, "gc: unnamed, released app removed");
        TAP_IS_STR(get(s, bb), NOT_FOUND, "gc: unnamed, released busybox removed");
        _cleanup_free_ char *p1 = layer_path(l1), *p2 = layer_path(l2), *p3 = layer_path(l3);
        tap_ok(!exists(p2) && !exists(p3), "gc: app's own layers removed");
        tap_ok(exists(p1), "gc: the base layer, still used by other images, kept");
        TAP_IS_INT(freed, unique, "gc: freed = the removed layers' bytes");
        TAP_IS_INT(count_entries("tmp"), 0, "gc: tmp/ empty");
        TAP_IS_STR(get(s, "localhost:5000/tools/oci:2"), id_of("oci"), "gc: named images kept");

        /* holds of boxes that are gone */
        tap_ok(ab_image_hold(s, "box-a", id_of("oci"), &e) == 0 &&
                   ab_image_hold(s, "box-b", id_of("oci"), &e) == 0,
               "hold oci for box-a and box-b");
        tap_ok(ab_image_prune_holds(s, live_a, NULL, &e) == 0, "prune holds");
        _cleanup_free_ char *ha = xasprintf("%s/holds/box-a", dir);
        _cleanup_free_ char *hb = xasprintf("%s/holds/box-b", dir);
        tap_ok(exists(ha) && !exists(hb), "prune: only the live holder's hold stays");
        ab_err_free(&e);
}

static void test_reopen(void)
{
        ab_image_store *s2 = NULL;
        ab_image_store_opts o = {.dir = dir};
        ab_err *e = NULL;
        ab_image *v = NULL;
        size_t n = 0;
        tap_ok(ab_image_store_open(&o, &s2, &e) == 0 && ab_image_list(s2, &v, &n, &e) == 0 &&
                   n == 3,
               "a second open sees the 3 remaining images (got %zu)", n);
        ab_image_list_free(v, n);
        ab_image_store_free(s2);
        ab_err_free(&e);
}

/* Which registries an app may pull from: the default public list, an
 * admin's list (exact, *.domain for subdomains), loopback only when allowed;
 * a refused app pull sends nothing (AB_E_PERMISSION before any connect). */
static void test_app_registries(void)
{
        ab_image_store *d = NULL, *l = NULL;
        ab_image_store_opts o = {.dir = dir};
        tap_ok(ab_image_store_open(&o, &d, NULL) == 0, "open with the default app registries");
        tap_ok(ab_image_app_registry_allowed(d, "docker.io") &&
                   ab_image_app_registry_allowed(d, "ghcr.io") &&
                   !ab_image_app_registry_allowed(d, "localhost:5000") &&
                   !ab_image_app_registry_allowed(d, "127.0.0.1:5000") &&
                   !ab_image_app_registry_allowed(d, "registry.internal"),
               "default: public registries yes, loopback and others no");
        ab_image out;
        ab_err *e = NULL;
        int r = ab_image_pull_as(d, "appx", 0, "127.0.0.1:1/a/b:1", NULL, NULL, &out, &e);
        tap_ok(r < 0 && e && e->code == AB_E_PERMISSION && strstr(e->msg, "app_registries"),
               "an app's pull from a loopback registry is refused before any connect (%s)",
               e ? e->msg : "pulled");
        ab_err_free(&e);
        r = ab_image_pull_as(d, NULL, 0, "127.0.0.1:1/a/b:1", NULL, NULL, &out, &e);
        tap_ok(r < 0 && e && e->code == AB_E_UNAVAILABLE,
               "the admin's pull of the same goes to the registry (nothing listens: unavailable)");
        ab_err_free(&e);
        ab_image_store_free(d);
        static const char *const mine[] = {"reg.example.com:5000", "*.corp.example", NULL};
        ab_image_store_opts lo = {.dir = dir, .app_registries = mine, .app_loopback = true};
        tap_ok(ab_image_store_open(&lo, &l, NULL) == 0, "open with an admin's list");
        tap_ok(ab_image_app_registry_allowed(l, "reg.example.com:5000") &&
                   ab_image_app_registry_allowed(l, "A.Corp.Example") &&
                   !ab_image_app_registry_allowed(l, "corp.example") &&
                   !ab_image_app_registry_allowed(l, "reg.example.com") &&
                   !ab_image_app_registry_allowed(l, "docker.io") &&
                   ab_image_app_registry_allowed(l, "localhost:5000") &&
                   ab_image_app_registry_allowed(l, "[::1]:5000"),
               "a list: exact hosts, *.domain for subdomains only, loopback when allowed");
        ab_image_store_free(l);
}

/* Two processes import the same archive into a new store at once. */
static void test_concurrent(void)
{
        _cleanup_free_ char *cdir = xasprintf("%s/conc", tmp);
        pid_t pids[2];
        for (int i = 0; i < 2; i++) {
                pids[i] = fork();
                if (pids[i] == 0) {
                        ab_image_store *cs = NULL;
                        ab_image_store_opts o = {.dir = cdir};
                        ab_image *v = NULL;
                        size_t n = 0;
                        _cleanup_free_ char *p = xasprintf("%s/docker.tar", ex);
                        int fd = open(p, O_RDONLY | O_CLOEXEC);
                        if (fd < 0 || ab_image_store_open(&o, &cs, NULL) < 0 ||
                            ab_image_import(cs, fd, NULL, NULL, NULL, &v, &n, NULL) < 0 || n != 2)
                                _exit(1);
                        _exit(0);
                }
        }
        int ok = 0;
        for (int i = 0; i < 2; i++) {
                int st = -1;
                waitpid(pids[i], &st, 0);
                ok += WIFEXITED(st) && WEXITSTATUS(st) == 0;
        }
        TAP_IS_INT(ok, 2, "two processes import the same archive at once");
        char saved[256];
        snprintf(saved, sizeof(saved), "%s", dir);
        snprintf(dir, sizeof(dir), "%s", cdir);
        TAP_IS_INT(count_entries("layers"), 3, "concurrent imports: each layer once");
        TAP_IS_INT(count_entries("images"), 2, "concurrent imports: two records");
        TAP_IS_INT(count_entries("tmp"), 0, "concurrent imports: tmp/ empty");
        snprintf(dir, sizeof(dir), "%s", saved);
}

/* kill -9 of an import while it works in tmp/: no half layer ever shows in
 * layers/, and the next open clears tmp/. */
static void test_killed(void)
{
        _cleanup_free_ char *kdir = xasprintf("%s/killed", tmp);
        char saved[256];
        snprintf(saved, sizeof(saved), "%s", dir);
        snprintf(dir, sizeof(dir), "%s", kdir);
        bool whole = true;
        int killed_in_tmp = 0;
        for (int round = 0; round < 5; round++) {
                pid_t pid = fork();
                if (pid == 0) {
                        ab_image_store *ks = NULL;
                        ab_image_store_opts o = {.dir = kdir};
                        ab_image *v = NULL;
                        size_t n = 0;
                        _cleanup_free_ char *p = xasprintf("%s/docker.tar", ex);
                        int fd = open(p, O_RDONLY | O_CLOEXEC);
                        if (fd < 0 || ab_image_store_open(&o, &ks, NULL) < 0)
                                _exit(1);
                        /* each round a fresh store content, so there is work to kill */
                        ab_image_remove(ks, "busybox", NULL);
                        ab_image_remove(ks, "busybox:1.36", NULL);
                        ab_image_remove(ks, "example/app:1", NULL);
                        ab_image_gc(ks, NULL, NULL);
                        _exit(ab_image_import(ks, fd, NULL, NULL, NULL, &v, &n, NULL) < 0);
                }
                /* wait for a layer being unpacked (or the import's end), then kill */
                for (int i = 0; i < 20000; i++) {
                        _cleanup_free_ char *t = xasprintf("%s/tmp", kdir);
                        DIR *d = opendir(t);
                        bool busy = false;
                        struct dirent *de;
                        while (d && (de = readdir(d)))
                                busy |= !strncmp(de->d_name, "layer.", 6);
                        if (d)
                                closedir(d);
                        if (busy) {
                                killed_in_tmp++;
                                break;
                        }
                        if (waitpid(pid, NULL, WNOHANG) == pid) {
                                pid = -1;
                                break;
                        }
                        usleep(50);
                }
                if (pid > 0) {
                        kill(pid, SIGKILL);
                        waitpid(pid, NULL, 0);
                }
                _cleanup_free_ char *ld = xasprintf("%s/layers", kdir);
                DIR *d = opendir(ld);
                struct dirent *de;
                while (d && (de = readdir(d))) {
                        if (de->d_name[0] == '.')
                                continue;
                        _cleanup_free_ char *m = xasprintf("%s/%s/layer.json", ld, de->d_name);
                        whole &= exists(m);
                }
                if (d)
                        closedir(d);
        }
        tap_diag("killed while unpacking a layer in %d of 5 rounds", killed_in_tmp);
        tap_ok(whole, "kill -9 mid-import: every directory in layers/ is a whole layer");
        ab_image_store *ks = NULL;
        ab_image_store_opts o = {.dir = kdir};
        ab_image *v = NULL;
        size_t n = 0;
        ab_err *e = NULL;
        tap_ok(ab_image_store_open(&o, &ks, &e) == 0 && count_entries("tmp") == 0,
               "kill -9 mid-import: the next open clears tmp/");
        tap_ok(ks && import(ks, "docker.tar", NULL, false, NULL, &v, &n, &e) == 0 && n == 2,
               "kill -9 mid-import: importing again works");
        TAP_IS_INT(count_entries("layers"), 3, "kill -9 mid-import: 3 layers in the end");
        ab_image_list_free(v, n);
        ab_image_store_free(ks);
        ab_err_free(&e);
        snprintf(dir, sizeof(dir), "%s", saved);
}

int main(void)
{
        if (!mkdtemp(tmp))
                tap_skip_all("mkdtemp failed");
        if (geteuid() != 0)
                tap_skip_all("needs root (layers keep owners and get whiteout devices)");
        snprintf(ex, sizeof(ex), "%s/ex", tmp);
        snprintf(dir, sizeof(dir), "%s/images", tmp);
        const char *root = getenv("AB_SOURCE_ROOT");
        _cleanup_free_ char *cmd = xasprintf(
            "python3 '%s/tests/lib/imagelib.py' --write-example '%s'", root ? root : ".", ex);
        if (system(cmd) != 0) {
                tap_ok(0, "imagelib.py --write-example");
                return tap_done();
        }
        _cleanup_free_ char *idp = xasprintf("%s/ids.json", ex);
        ids = json_load_file(idp, 0, NULL);
        _cleanup_free_ char *t = xasprintf("%s/tmp", dir);
        if (mkdir(dir, 0700) < 0 || mkdir(t, 0700) < 0)
                tap_ok(0, "mkdir %s", t);
        ab_image_store *s = NULL;
        test_open(&s);
        test_import_docker(s);
        test_import_more(s);
        test_bad(s);
        test_get_list(s);
        test_commit(s);
        test_commit_private(s);
        test_remove_hold_gc(s);
        test_reopen();
        test_app_registries();
        test_concurrent();
        test_killed();
        ab_image_store_free(s);
        json_decref(ids);
        rm_rf(tmp);
        return tap_done();
}

/* Unit tests: the files of a box's disk (native/boxfs.h) - the uid shift of
 * a forked disk (owners in range moved, others kept, symlinks' own owners,
 * setuid bits kept, a second run a no-op), the tree copy (owners, modes,
 * hard links, symlinks), and a box's writes as an OCI layer (overlayfs
 * whiteouts and opaque directories back to ".wh." entries, owners
 * box-side, the workspace under workspace/, hard links). Needs root. */
#include "native/boxfs.h"
#include "tap.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>

#define A 0x200000u /* old range */
#define B 0x300000u /* new range */

static void put(int dfd, const char *name, const char *data, uid_t u, mode_t mode)
{
        int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0 || ab_write_all(fd, data, strlen(data)) < 0 || fchown(fd, u, u) < 0 ||
            fchmod(fd, mode) < 0)
                abort();
        close(fd);
}

static uid_t owner(int dfd, const char *name)
{
        struct stat st;
        return fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 ? st.st_uid : (uid_t)-1;
}

static int sub(int dfd, const char *name, uid_t u)
{
        if (mkdirat(dfd, name, 0755) < 0 || fchownat(dfd, name, u, u, 0) < 0)
                abort();
        return openat(dfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

static void test_shift(int root)
{
        _cleanup_close_ int d = sub(root, "shift", A);
        _cleanup_close_ int e = sub(d, "e", A + 1000);
        put(d, "f", "x", A + 1234, 0644);
        put(d, "suid", "x", A, 04755);
        put(d, "host", "x", 0, 0644);
        put(e, "deep", "x", A + 5, 0600);
        if (linkat(d, "f", e, "link", 0) < 0 || symlinkat("/nowhere", d, "sym") < 0 ||
            fchownat(d, "sym", A + 7, A + 7, AT_SYMLINK_NOFOLLOW) < 0)
                abort();
        TAP_IS_INT(ab_boxfs_shift(d, A, B), 0, "shift runs");
        TAP_IS_INT(owner(root, "shift"), B, "the top directory is shifted");
        TAP_IS_INT(owner(d, "f"), B + 1234, "a file keeps its offset in the new range");
        TAP_IS_INT(owner(e, "deep"), B + 5, "a file two levels down");
        TAP_IS_INT(owner(e, "link"), B + 1234, "a hard link (the same inode) once");
        TAP_IS_INT(owner(d, "sym"), B + 7, "a symlink's own owner (never followed)");
        TAP_IS_INT(owner(d, "host"), 0, "an owner outside the old range is kept");
        struct stat st;
        tap_ok(fstatat(d, "suid", &st, 0) == 0 && (st.st_mode & 07777) == 04755,
               "a setuid bit survives the chown");
        TAP_IS_INT(ab_boxfs_shift(d, A, B), 0, "a second shift");
        TAP_IS_INT(owner(d, "f"), B + 1234, "... changes nothing");
}

static void test_copy(int root)
{
        _cleanup_close_ int s = sub(root, "csrc", B);
        _cleanup_close_ int t = sub(root, "cdst", 0);
        _cleanup_close_ int e = sub(s, "e", B + 3);
        put(e, "f", "data", B + 1000, 0600);
        if (linkat(e, "f", s, "hl", 0) < 0 || symlinkat("e/f", s, "sym") < 0)
                abort();
        TAP_IS_INT(ab_boxfs_copy_tree(s, t), 0, "copy a tree");
        _cleanup_close_ int te = openat(t, "e", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        struct stat a, b;
        tap_ok(fstatat(te, "f", &a, 0) == 0 && a.st_uid == B + 1000 && (a.st_mode & 0777) == 0600 &&
                   a.st_size == 4,
               "a file: owner, mode and bytes");
        tap_ok(fstatat(t, "hl", &b, 0) == 0 && b.st_ino == a.st_ino, "a hard link stays one inode");
        TAP_IS_INT(owner(t, "e"), B + 3, "a directory's owner");
        char l[16] = {0};
        tap_ok(readlinkat(t, "sym", l, sizeof(l) - 1) == 3 && !strcmp(l, "e/f"), "a symlink");
}

typedef struct seen {
        char names[32][64];
        int64_t uids[32];
        bool link[32];
        int n;
} seen;

static int find(const seen *s, const char *name)
{
        for (int i = 0; i < s->n; i++)
                if (!strcmp(s->names[i], name))
                        return i;
        return -1;
}

static void test_export(int root)
{
        _cleanup_close_ int up = sub(root, "upper", B);
        _cleanup_close_ int ws = sub(root, "ws", B);
        _cleanup_close_ int od = sub(up, "opq", B);
        _cleanup_close_ int dd = sub(up, "d", B);
        put(up, "file", "hello", B + 1000, 0644);
        put(ws, "w", "ws", B, 0644);
        if (mknodat(dd, "gone", S_IFCHR | 0, makedev(0, 0)) < 0 ||
            fsetxattr(od, "trusted.overlay.opaque", "y", 1, 0) < 0 ||
            linkat(up, "file", up, "hl", 0))
                abort();
        _cleanup_close_ int out = openat(root, "layer.tar", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        ab_err *e = NULL;
        TAP_IS_INT(ab_boxfs_export_layer(up, ws, B, out, &e), 0, "export a layer");
        ab_err_free(&e);
        lseek(out, 0, SEEK_SET);
        struct archive *a = archive_read_new();
        archive_read_support_format_tar(a);
        seen s = {0};
        struct archive_entry *en;
        if (archive_read_open_fd(a, out, 4096) == ARCHIVE_OK)
                while (s.n < 32 && archive_read_next_header(a, &en) == ARCHIVE_OK) {
                        snprintf(s.names[s.n], 64, "%s", archive_entry_pathname(en));
                        s.uids[s.n] = archive_entry_uid(en);
                        s.link[s.n++] = archive_entry_hardlink(en) != NULL;
                }
        archive_read_free(a);
        tap_ok(find(&s, "d/.wh.gone") >= 0 && find(&s, "d/gone") < 0,
               "a whiteout becomes d/.wh.gone");
        tap_ok(find(&s, "opq/.wh..wh..opq") >= 0, "an opaque directory gets .wh..wh..opq");
        int f = find(&s, "file"), h = find(&s, "hl");
        tap_ok(f >= 0 && s.uids[f] == 1000, "owners are box-side (host uid - base)");
        tap_ok(h >= 0 && (s.link[h] || s.link[f]), "a hard link is a link entry");
        tap_ok((find(&s, "workspace") >= 0 || find(&s, "workspace/") >= 0) &&
                   find(&s, "workspace/w") >= 0,
               "the workspace under workspace/");
}

int main(void)
{
        if (geteuid() != 0)
                tap_skip_all("needs root (owners, device nodes, trusted xattrs)");
        char dir[] = "/var/tmp/ab-boxfs.XXXXXX";
        if (!mkdtemp(dir))
                abort();
        _cleanup_close_ int root = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        test_shift(root);
        test_copy(root);
        test_export(root);
        char *slash = strrchr(dir, '/');
        *slash = 0;
        _cleanup_close_ int parent = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        TAP_IS_INT(ab_boxfs_rm_tree(parent, slash + 1), 0, "remove the tree");
        return tap_done();
}

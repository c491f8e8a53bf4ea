/* agentbox cp: copies files and directory trees between the host and a box.
 * Every read and write inside the box goes through the box's init, so paths
 * (and symlinks in them) resolve inside the box, never on the host. */
#include "cli/cli.h"
#include "base/id.h"

#include <dirent.h>
#include <fcntl.h>
#include <libgen.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>

typedef struct side {
        char *id; /* NULL for a host path */
        char *path;
} side;

static void parse_side(const char *arg, side *s)
{
        const char *colon = strchr(arg, ':');
        s->id = NULL;
        if (colon && colon > arg && arg[0] != '/' && arg[0] != '.') {
                char *id = xstrndup(arg, (size_t)(colon - arg));
                if (ab_id_valid(id)) {
                        s->id = id;
                        s->path = xstrdup(colon[1] ? colon + 1 : ".");
                        return;
                }
                free(id);
        }
        s->path = xstrdup(arg);
}

static const char *base_name(const char *p)
{
        const char *s = strrchr(p, '/');
        while (s && !s[1] && s > p) {
                /* trailing slash: look further back */
                const char *q = s - 1;
                while (q > p && *q != '/')
                        q--;
                return *q == '/' ? q + 1 : q;
        }
        return s ? s + 1 : p;
}

static int box_stat(ab_backend *b, const char *id, const char *path, abc_stat *st, ab_err **e)
{
        _cleanup_close_ int fd = b->ops->connect(b, id, e);
        if (fd < 0)
                return -1;
        return abc_stat_path(fd, path, st, e);
}

static int put_file(ab_backend *b, const char *id, const char *host, const char *dst, mode_t mode,
                    ab_err **e)
{
        _cleanup_close_ int src = open(host, O_RDONLY | O_CLOEXEC);
        if (src < 0)
                return ab_err_set(e, AB_E_NOT_FOUND, errno, "cannot read %s", host);
        _cleanup_close_ int fd = b->ops->connect(b, id, e);
        if (fd < 0)
                return -1;
        return abc_write(fd, dst, NULL, 0, src, ABC_W_MKPARENTS, mode & 07777, e);
}

static int put_tree(ab_backend *b, const char *id, const char *host, const char *dst, ab_err **e)
{
        struct stat st;
        if (lstat(host, &st) < 0)
                return ab_err_set(e, AB_E_NOT_FOUND, errno, "cannot read %s", host);
        if (S_ISREG(st.st_mode))
                return put_file(b, id, host, dst, st.st_mode, e);
        if (!S_ISDIR(st.st_mode))
                return 0; /* symlinks, devices, sockets are not copied */
        {
                _cleanup_close_ int fd = b->ops->connect(b, id, e);
                if (fd < 0 || abc_mkdir(fd, dst, true, st.st_mode & 07777, e) < 0)
                        return -1;
        }
        DIR *d = opendir(host);
        if (!d)
                return ab_err_set(e, AB_E_INTERNAL, errno, "cannot list %s", host);
        int r = 0;
        struct dirent *de;
        while (r == 0 && (de = readdir(d))) {
                if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
                        continue;
                _cleanup_free_ char *h = xasprintf("%s/%s", host, de->d_name);
                _cleanup_free_ char *t = xasprintf("%s/%s", dst, de->d_name);
                r = put_tree(b, id, h, t, e);
        }
        closedir(d);
        return r;
}

static int write_fd(void *ud, int stream, const void *buf, size_t len)
{
        (void)stream;
        return ab_write_all(*(int *)ud, buf, len);
}

/* Opens rel beneath the directory rootfd, never following a symlink and never
 * leaving rootfd: names in a listing come from the box. */
static int open_beneath(int rootfd, const char *rel, int flags, mode_t mode)
{
        struct open_how how = {
            .flags = (uint64_t)(flags | O_CLOEXEC),
            .mode = (flags & O_CREAT) ? mode : 0,
            .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
        };
        return (int)syscall(SYS_openat2, rootfd, rel, &how, sizeof(how));
}

/* Splits rel into its parent directory (opened beneath rootfd) and leaf. */
static int parent_beneath(int rootfd, const char *rel, const char **leaf)
{
        const char *slash = strrchr(rel, '/');
        if (!slash) {
                *leaf = rel;
                return fcntl(rootfd, F_DUPFD_CLOEXEC, 0);
        }
        _cleanup_free_ char *dir = xstrndup(rel, (size_t)(slash - rel));
        *leaf = slash + 1;
        return open_beneath(rootfd, dir, O_RDONLY | O_DIRECTORY, 0);
}

static int read_into(ab_backend *b, const char *id, const char *src, int out, ab_err **e)
{
        _cleanup_close_ int fd = b->ops->connect(b, id, e);
        if (fd < 0)
                return -1;
        return abc_read(fd, src, 0, 0, write_fd, &out, e);
}

static int get_file(ab_backend *b, const char *id, const char *src, const char *host, uint32_t mode,
                    ab_err **e)
{
        _cleanup_close_ int out =
            open(host, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode ? mode : 0644);
        if (out < 0)
                return ab_err_set(e, AB_E_INTERNAL, errno, "cannot write %s", host);
        return read_into(b, id, src, out, e);
}

static int get_tree(ab_backend *b, const char *id, const char *src, const char *host, ab_err **e)
{
        abc_stat st;
        if (box_stat(b, id, src, &st, e) < 0)
                return -1;
        free(st.link);
        if (st.type == ABC_FILE)
                return get_file(b, id, src, host, st.mode, e);
        if (st.type != ABC_DIR)
                return ab_err_set(e, AB_E_INVALID, 0, "%s:%s is not a file or directory", id, src);
        if (mkdir(host, 0755) < 0 && errno != EEXIST)
                return ab_err_set(e, AB_E_INTERNAL, errno, "cannot create %s", host);
        _cleanup_close_ int root = open(host, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        if (root < 0)
                return ab_err_set(e, AB_E_INTERNAL, errno, "cannot open %s", host);
        abc_dirent *ents;
        size_t n;
        {
                _cleanup_close_ int fd = b->ops->connect(b, id, e);
                if (fd < 0 || abc_list(fd, src, 64, &ents, &n, e) < 0)
                        return -1;
        }
        int r = 0;
        /* Sorted by path, so a directory comes before what it holds. Every
         * host path is resolved beneath `root` without following links. */
        for (size_t i = 0; i < n && r == 0; i++) {
                const char *rel = ents[i].path, *leaf;
                _cleanup_close_ int pfd = parent_beneath(root, rel, &leaf);
                if (pfd < 0) {
                        r = ab_err_set(e, AB_E_INVALID, errno, "cannot place %s under %s", rel,
                                       host);
                        break;
                }
                if (ents[i].st.type == ABC_DIR) {
                        if (mkdirat(pfd, leaf, 0755) < 0 && errno != EEXIST)
                                r = ab_err_set(e, AB_E_INTERNAL, errno, "cannot create %s/%s", host,
                                               rel);
                } else if (ents[i].st.type == ABC_FILE) {
                        _cleanup_close_ int out =
                            openat(pfd, leaf, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW,
                                   ents[i].st.mode ? ents[i].st.mode & 0777 : 0644);
                        if (out < 0) {
                                r = ab_err_set(e, AB_E_INTERNAL, errno, "cannot write %s/%s", host,
                                               rel);
                                break;
                        }
                        _cleanup_free_ char *s = xasprintf("%s/%s", src, rel);
                        r = read_into(b, id, s, out, e);
                } else if (ents[i].st.type == ABC_SYMLINK && ents[i].st.link) {
                        /* Recreated as a link; never followed by this copy. */
                        if (symlinkat(ents[i].st.link, pfd, leaf) < 0 && errno != EEXIST)
                                r = ab_err_set(e, AB_E_INTERNAL, errno, "cannot create %s/%s", host,
                                               rel);
                }
        }
        abc_dirents_free(ents, n);
        return r;
}

int cli_cp(ab_backend *b, int argc, char **argv)
{
        if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
                fputs("Usage: agentbox cp SRC DST\n"
                      "  agentbox cp ./file.txt ID:dir/      copy into the box (relative to "
                      "/workspace)\n"
                      "  agentbox cp ID:/workspace/out ./out copy a file or directory out\n",
                      stdout);
                return 0;
        }
        if (argc != 3) {
                fprintf(stderr, "agentbox: cp needs SRC and DST, one of them ID:PATH\n");
                return EXIT_USAGE;
        }
        side s, d;
        parse_side(argv[1], &s);
        parse_side(argv[2], &d);
        _cleanup_err_ ab_err *e = NULL;
        int r = 0;
        if ((s.id == NULL) == (d.id == NULL)) {
                fprintf(stderr, "agentbox: exactly one of SRC and DST must be ID:PATH\n");
                r = EXIT_USAGE;
                goto out;
        }
        if (cli_wake(b, d.id ? d.id : s.id, &e) < 0) {
                cli_error(e);
                r = EXIT_AGENTBOX;
                goto out;
        }
        if (d.id) {
                /* Into an existing directory: keep the source's name, like cp. */
                abc_stat st;
                _cleanup_free_ char *dst = NULL;
                ab_err *se = NULL;
                size_t dl = strlen(d.path);
                if (dl > 0 && d.path[dl - 1] == '/')
                        /* "DIR/" names a directory, made if missing, like cp -t. */
                        dst = xasprintf("%s%s", d.path, base_name(s.path));
                else if (box_stat(b, d.id, d.path, &st, &se) == 0 && st.type == ABC_DIR)
                        dst = xasprintf("%s/%s", d.path, base_name(s.path));
                else
                        dst = xstrdup(d.path);
                if (se == NULL)
                        free(st.link);
                else if (se->code != AB_E_NOT_FOUND) {
                        cli_error(se);
                        ab_err_free(&se);
                        r = EXIT_AGENTBOX;
                        goto out;
                }
                ab_err_free(&se);
                r = put_tree(b, d.id, s.path, dst, &e) < 0 ? EXIT_AGENTBOX : 0;
        } else {
                struct stat st;
                _cleanup_free_ char *src_copy = xstrdup(s.path);
                _cleanup_free_ char *dst = NULL;
                if (stat(d.path, &st) == 0 && S_ISDIR(st.st_mode))
                        dst = xasprintf("%s/%s", d.path, base_name(src_copy));
                else
                        dst = xstrdup(d.path);
                r = get_tree(b, s.id, s.path, dst, &e) < 0 ? EXIT_AGENTBOX : 0;
        }
        if (r == EXIT_AGENTBOX && e)
                cli_error(e);
out:
        free(s.id);
        free(s.path);
        free(d.id);
        free(d.path);
        return r;
}

/* user.c - who an exec or a terminal runs as.
 *
 * A request's USER is Docker's: "name", "uid", "uid:gid", "name:group" or
 * "uid:group", resolved with the box's own /etc/passwd and /etc/group. init
 * is a static binary (no NSS), and these files belong to the box, which may
 * have written anything there: they are read here by hand, as regular files
 * of at most USER_FILE_MAX bytes, lines of exactly the fields their format
 * has, anything else on a line skipped.
 *
 * The rules are Docker's (and runc's): a numeric user is a uid, found in
 * /etc/passwd or not (without an entry: gid 0, no name, HOME /); a name must
 * be there. A group given is a gid or a group name, found in /etc/group or
 * numeric; without one, the gid is the passwd entry's and the supplementary
 * groups are those that list the user's name. */
#include "base/buf.h"
#include "init/init_int.h"

#include <fcntl.h>
#include <grp.h>
#include <stdarg.h>
#include <sys/stat.h>

#define USER_FILE_MAX   (4u << 20) /* largest /etc/passwd or /etc/group read */
#define USER_SPEC_MAX   256        /* longest USER accepted */
#define USER_GROUPS_MAX 1024       /* supplementary groups kept */

/* A piece of a line: not NUL-terminated. */
typedef struct span {
        const char *p;
        size_t n;
} span;

static bool span_is(span s, const char *str)
{
        return strlen(str) == s.n && memcmp(s.p, str, s.n) == 0;
}

/* A decimal id below UINT32_MAX ((uid_t)-1 means "leave unchanged" to the
 * set*id calls). 0 or -EINVAL. */
static int parse_id(span s, uint32_t *out)
{
        uint64_t v = 0;
        if (s.n == 0 || s.n > 10)
                return -EINVAL;
        for (size_t i = 0; i < s.n; i++) {
                if (s.p[i] < '0' || s.p[i] > '9')
                        return -EINVAL;
                v = v * 10 + (uint64_t)(s.p[i] - '0');
        }
        if (v >= UINT32_MAX)
                return -EINVAL;
        *out = (uint32_t)v;
        return 0;
}

/* Reads the box's file at path (absolute): a regular file (a FIFO or a
 * device never blocks or feeds us forever) of at most USER_FILE_MAX bytes,
 * /proc files included (they say size 0). *out is NUL-terminated. 0 or
 * -errno, -EFBIG when larger, -EINVAL when not a regular file. */
static int read_db(const init_conf *conf, const char *path, char **out, size_t *len)
{
        _cleanup_close_ int fd =
            init_open(conf, path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY, 0);
        if (fd < 0)
                return fd;
        struct stat st;
        if (fstat(fd, &st) < 0)
                return -errno;
        if (!S_ISREG(st.st_mode))
                return -EINVAL;
        _cleanup_buf_ ab_buf b = {0};
        for (;;) {
                char *at = ab_buf_reserve(&b, 64u << 10);
                ssize_t n = read(fd, at, 64u << 10);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                if (n == 0)
                        break;
                ab_buf_commit(&b, (size_t)n);
                if (b.n > USER_FILE_MAX)
                        return -EFBIG;
        }
        *len = b.n;
        *out = ab_buf_steal(&b);
        return 0;
}

/* Cuts the next line off [*at, end) into exactly nf ':'-separated fields.
 * 1 = f[] filled, 0 = a line to skip (blank, a comment, a NUL inside, another
 * number of fields, NIS's "+" and "-" entries), -1 = no lines left. */
static int next_entry(const char **at, const char *end, span *f, size_t nf)
{
        if (*at >= end)
                return -1;
        const char *line = *at, *nl = memchr(line, '\n', (size_t)(end - line));
        const char *le = nl ? nl : end;
        *at = nl ? nl + 1 : end;
        if (le == line || *line == '#' || *line == '+' || *line == '-' ||
            memchr(line, 0, (size_t)(le - line)))
                return 0;
        size_t k = 0;
        for (const char *p = line;; k++) {
                const char *colon = memchr(p, ':', (size_t)(le - p));
                if (k == nf)
                        return 0;
                f[k] = (span){p, (size_t)((colon ? colon : le) - p)};
                if (!colon)
                        break;
                p = colon + 1;
        }
        return k + 1 == nf && f[0].n > 0 ? 1 : 0;
}

enum { PW_NAME, PW_PASSWD, PW_UID, PW_GID, PW_GECOS, PW_HOME, PW_SHELL, PW_FIELDS };
enum { GR_NAME, GR_PASSWD, GR_GID, GR_MEMBERS, GR_FIELDS };

/* Finds the first passwd entry whose uid is *id (want_id) or whose name is
 * name, and fills u from it. 1 found, 0 not. */
static int find_passwd(const char *db, size_t len, const char *name, bool want_id, uint32_t id,
                       init_user *u)
{
        const char *at = db, *end = db + len;
        span f[PW_FIELDS];
        int k;
        while ((k = next_entry(&at, end, f, PW_FIELDS)) >= 0) {
                uint32_t uid, gid;
                if (k == 0 || parse_id(f[PW_UID], &uid) < 0 || parse_id(f[PW_GID], &gid) < 0)
                        continue;
                if (want_id ? uid != id : !span_is(f[PW_NAME], name))
                        continue;
                u->uid = uid;
                u->gid = gid;
                u->name = xstrndup(f[PW_NAME].p, f[PW_NAME].n);
                u->home = f[PW_HOME].n ? xstrndup(f[PW_HOME].p, f[PW_HOME].n) : NULL;
                u->shell = f[PW_SHELL].n ? xstrndup(f[PW_SHELL].p, f[PW_SHELL].n) : NULL;
                return 1;
        }
        return 0;
}

/* The gid of the first group entry named name, or with gid id (want_id).
 * 1 found, 0 not. */
static int find_group(const char *db, size_t len, const char *name, bool want_id, uint32_t id,
                      gid_t *gid)
{
        const char *at = db, *end = db + len;
        span f[GR_FIELDS];
        int k;
        while ((k = next_entry(&at, end, f, GR_FIELDS)) >= 0) {
                uint32_t g;
                if (k == 0 || parse_id(f[GR_GID], &g) < 0)
                        continue;
                if (want_id ? g == id : span_is(f[GR_NAME], name)) {
                        *gid = g;
                        return 1;
                }
        }
        return 0;
}

static void add_group(init_user *u, gid_t g)
{
        for (size_t i = 0; i < u->n_groups; i++)
                if (u->groups[i] == g)
                        return;
        if (u->n_groups == USER_GROUPS_MAX)
                return;
        u->groups = xrealloc(u->groups, xmul(u->n_groups + 1, sizeof(*u->groups)));
        u->groups[u->n_groups++] = g;
}

/* The primary gid, then every group whose member list names u->name. */
static void member_groups(const char *db, size_t len, init_user *u)
{
        const char *at = db, *end = db + len;
        span f[GR_FIELDS];
        int k;
        add_group(u, u->gid);
        while ((k = next_entry(&at, end, f, GR_FIELDS)) >= 0) {
                uint32_t g;
                if (k == 0 || parse_id(f[GR_GID], &g) < 0)
                        continue;
                const char *p = f[GR_MEMBERS].p, *mend = p + f[GR_MEMBERS].n;
                while (p < mend) {
                        const char *comma = memchr(p, ',', (size_t)(mend - p));
                        span m = {p, (size_t)((comma ? comma : mend) - p)};
                        if (span_is(m, u->name)) {
                                add_group(u, g);
                                break;
                        }
                        p = comma ? comma + 1 : mend;
                }
        }
}

/* Sets *why (malloc'd) and returns -1. */
static int fail(char **why, const char *fmt, ...) AB_PRINTF(2, 3);
static int fail(char **why, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        if (vasprintf(why, fmt, ap) < 0)
                abort();
        va_end(ap);
        return -1;
}

/* True when id is inside a range of map, the text of /proc/self/uid_map or
 * gid_map ("inside outside count" lines), or when there is no map to read
 * (set*id will then say). */
static bool id_mapped(const char *map, uint32_t id)
{
        if (!map)
                return true;
        for (const char *line = map; *line;) {
                unsigned long inside, outside, count;
                if (sscanf(line, "%lu %lu %lu", &inside, &outside, &count) == 3 && id >= inside &&
                    id - inside < count)
                        return true;
                line = strchrnul(line, '\n');
                line += *line != 0;
        }
        return false;
}

/* The box's user namespace must map u's ids, or set*id fails with EINVAL
 * in the child: said here, before anything runs. Unmapped supplementary
 * groups are dropped. 0 or -1 with *why. */
static int check_mapped(const init_conf *conf, init_user *u, char **why)
{
        _cleanup_free_ char *um = NULL, *gm = NULL;
        size_t len;
        if (read_db(conf, "/proc/self/uid_map", &um, &len) < 0)
                um = NULL;
        if (read_db(conf, "/proc/self/gid_map", &gm, &len) < 0)
                gm = NULL;
        if (!id_mapped(um, u->uid))
                return fail(why, "uid %u is not mapped in this box's user namespace", u->uid);
        if (!id_mapped(gm, u->gid))
                return fail(why, "gid %u is not mapped in this box's user namespace", u->gid);
        size_t k = 0;
        for (size_t i = 0; i < u->n_groups; i++)
                if (id_mapped(gm, u->groups[i]))
                        u->groups[k++] = u->groups[i];
        u->n_groups = k;
        return 0;
}

void init_user_free(init_user *u)
{
        free(u->groups);
        free(u->name);
        free(u->home);
        free(u->shell);
        *u = (init_user){0};
}

/* A database that cannot be read, in words. */
static int db_failed(char **why, const char *path, int r)
{
        if (r == -EFBIG)
                return fail(why, "this box's %s is larger than %u MiB", path, USER_FILE_MAX >> 20);
        if (r == -EINVAL)
                return fail(why, "this box's %s is not a regular file", path);
        return fail(why, "cannot read this box's %s: %s", path, strerror(-r));
}

int init_user_resolve(const init_conf *conf, const char *spec, init_user *u, char **why)
{
        *u = (init_user){0};
        *why = NULL;
        size_t slen = strnlen(spec, USER_SPEC_MAX + 1);
        const char *colon = memchr(spec, ':', slen);
        span us = {spec, colon ? (size_t)(colon - spec) : slen};
        span gs = {colon ? colon + 1 : spec + slen, colon ? slen - us.n - 1 : 0};
        if (slen > USER_SPEC_MAX || us.n == 0 || (colon && gs.n == 0) || memchr(gs.p, ':', gs.n))
                return fail(why,
                            "user must be NAME, UID, NAME:GROUP or UID:GID, at most %d "
                            "bytes: '%.*s'",
                            USER_SPEC_MAX, (int)(slen > 64 ? 64 : slen), spec);
        _cleanup_free_ char *uname = xstrndup(us.p, us.n), *gname = xstrndup(gs.p, gs.n);
        uint32_t uid = 0, gid = 0;
        bool uid_num = parse_id(us, &uid) == 0, gid_num = colon && parse_id(gs, &gid) == 0;

        _cleanup_free_ char *pw = NULL, *gr = NULL;
        size_t pwlen = 0, grlen = 0;
        int r = read_db(conf, "/etc/passwd", &pw, &pwlen);
        if (r < 0 && r != -ENOENT)
                return db_failed(why, "/etc/passwd", r);
        r = read_db(conf, "/etc/group", &gr, &grlen);
        if (r < 0 && r != -ENOENT)
                return db_failed(why, "/etc/group", r);

        u->set = true;
        if (!find_passwd(pw ? pw : "", pwlen, uname, uid_num, uid, u)) {
                if (!uid_num) {
                        init_user_free(u);
                        if (!pw)
                                return fail(why, "no user '%s': this box has no /etc/passwd",
                                            uname);
                        return fail(why, "no user '%s' in this box's /etc/passwd", uname);
                }
                u->uid = uid; /* a uid without an entry: gid 0, as Docker */
                u->gid = 0;
        }
        if (colon) {
                gid_t g;
                if (find_group(gr ? gr : "", grlen, gname, gid_num, gid, &g))
                        u->gid = g;
                else if (gid_num)
                        u->gid = gid;
                else {
                        init_user_free(u);
                        return fail(why, "no group '%s' in this box's /etc/group", gname);
                }
                add_group(u, u->gid);
        } else if (u->name) {
                member_groups(gr ? gr : "", grlen, u);
        } else {
                add_group(u, u->gid);
        }

        if (check_mapped(conf, u, why) < 0) {
                init_user_free(u);
                return -1;
        }
        return 0;
}

/* The name of the first group entry with gid id, malloc'd, or NULL. */
static char *group_name(const char *db, size_t len, uint32_t id)
{
        const char *at = db, *end = db + len;
        span f[GR_FIELDS];
        int k;
        while ((k = next_entry(&at, end, f, GR_FIELDS)) >= 0) {
                uint32_t g;
                if (k == 1 && parse_id(f[GR_GID], &g) == 0 && g == id)
                        return xstrndup(f[GR_NAME].p, f[GR_NAME].n);
        }
        return NULL;
}

void init_id_names(const init_conf *conf, uint32_t uid, uint32_t gid, char **owner, char **group)
{
        *owner = *group = NULL;
        _cleanup_free_ char *pw = NULL, *gr = NULL;
        size_t pwlen = 0, grlen = 0;
        if (read_db(conf, "/etc/passwd", &pw, &pwlen) == 0) {
                init_user u = {0};
                if (find_passwd(pw, pwlen, NULL, true, uid, &u))
                        *owner = steal_pointer(&u.name);
                init_user_free(&u);
        }
        if (read_db(conf, "/etc/group", &gr, &grlen) == 0)
                *group = group_name(gr, grlen, gid);
}

int init_owner_resolve(const init_conf *conf, const char *owner, const char *group, uid_t *uid,
                       gid_t *gid, char **why)
{
        *uid = (uid_t)-1;
        *gid = (gid_t)-1;
        *why = NULL;
        if ((owner && (!*owner || strlen(owner) > USER_SPEC_MAX)) ||
            (group && (!*group || strlen(group) > USER_SPEC_MAX)))
                return fail(why, "owner and group must be 1..%d bytes", USER_SPEC_MAX);
        init_user u = {.set = true};
        if (owner) {
                _cleanup_free_ char *pw = NULL;
                size_t pwlen = 0;
                int r = read_db(conf, "/etc/passwd", &pw, &pwlen);
                if (r < 0 && r != -ENOENT)
                        return db_failed(why, "/etc/passwd", r);
                uint32_t id = 0;
                bool num = parse_id((span){owner, strlen(owner)}, &id) == 0;
                init_user f = {0};
                if (find_passwd(pw ? pw : "", pwlen, owner, num, id, &f))
                        id = f.uid;
                else if (!num)
                        return fail(why, "no user '%s' in this box's /etc/passwd", owner);
                init_user_free(&f);
                u.uid = *uid = id;
        }
        if (group) {
                _cleanup_free_ char *gr = NULL;
                size_t grlen = 0;
                int r = read_db(conf, "/etc/group", &gr, &grlen);
                if (r < 0 && r != -ENOENT)
                        return db_failed(why, "/etc/group", r);
                uint32_t id = 0;
                bool num = parse_id((span){group, strlen(group)}, &id) == 0;
                gid_t g;
                if (find_group(gr ? gr : "", grlen, group, num, id, &g))
                        id = g;
                else if (!num)
                        return fail(why, "no group '%s' in this box's /etc/group", group);
                u.gid = *gid = id;
        }
        /* Ids left unchanged are checked as root's, which is always mapped. */
        int r = check_mapped(conf, &u, why);
        init_user_free(&u);
        return r;
}

int init_user_apply(const init_user *u)
{
        if (!u || !u->set)
                return 0;
        if (setgroups(u->n_groups, u->groups) < 0 || setresgid(u->gid, u->gid, u->gid) < 0 ||
            setresuid(u->uid, u->uid, u->uid) < 0)
                return -errno;
        return 0;
}

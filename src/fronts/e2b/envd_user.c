/* envd_user.c - E2B's account `user` (docs/compat-e2b.md, "Users"): made
 * in a sandbox at create, the default user of its commands and file calls,
 * root on request, and sudo for it.
 *
 * A box made through the E2B front gets, unless its image has them: the
 * account `user` (uid 1000 or the first free uid from 1000, its own group,
 * home /home/user, bash when the image has it) in /etc/passwd and
 * /etc/group, /home/user a real folder of its own, and /usr/local/bin/sudo
 * (agentbox-init, which is the box's sudo under that name: init/sudo.c).
 * All through the manager's file doors: no exec of the user's.
 *
 * A box is "of user" when /home/user is a folder owned by `user`: those
 * made here, and images that bring E2B's layout. Boxes made before this (a
 * /home/user link to /workspace) or through agentbox's own API run their
 * E2B calls as root, as they always did. What each box is is looked up once
 * and kept in memory (a fact of the box, found again after a restart). */
#include "backend/backend.h"
#include "fronts/e2b/envd_int.h"
#include "base/log.h"

#include <fcntl.h>
#include <pthread.h>

#define E2B_USER       "user"
#define USER_UID_FIRST 1000u
#define USER_UID_LAST  60000u /* Debian's last uid for people */
#define SUDO_PATH      "/usr/local/bin/sudo"

/* ---- which boxes have the account -------------------------------------- */

#define KNOWN_MAX 4096 /* boxes remembered; forgotten all at once when full */

static pthread_mutex_t known_mu = PTHREAD_MUTEX_INITIALIZER;
static struct known {
        char id[64];
        bool has;
} known[KNOWN_MAX];
static size_t n_known;

static int known_get(const char *id)
{
        int r = -1;
        pthread_mutex_lock(&known_mu);
        for (size_t i = 0; i < n_known && r < 0; i++)
                if (!strcmp(known[i].id, id))
                        r = known[i].has;
        pthread_mutex_unlock(&known_mu);
        return r;
}

static void known_set(const char *id, bool has)
{
        if (strlen(id) >= sizeof(known[0].id))
                return;
        pthread_mutex_lock(&known_mu);
        size_t i = 0;
        while (i < n_known && strcmp(known[i].id, id))
                i++;
        if (i == n_known) {
                if (n_known == KNOWN_MAX)
                        n_known = i = 0;
                n_known++;
        }
        snprintf(known[i].id, sizeof(known[i].id), "%s", id);
        known[i].has = has;
        pthread_mutex_unlock(&known_mu);
}

/* True when /home/user is a folder owned by `user` (the box has E2B's
 * account); false for a link, another owner, or no such path. */
static int home_of_user(ab_manager *m, ab_use *u, void *ud, ab_err **err)
{
        bool *has = ud;
        abc_stat st = {0};
        if (ab_manager_file_stat(m, u, E2B_HOME, true, &st, err) < 0) {
                if ((*err)->code != AB_E_NOT_FOUND)
                        return -1;
                ab_err_free(err);
                return 0;
        }
        *has = st.type == ABC_DIR && st.owner && !strcmp(st.owner, E2B_USER);
        abc_stat_clear(&st);
        return 0;
}

static bool box_has_user(ab_server *s, const char *box, const char *scope)
{
        int k = known_get(box);
        if (k >= 0)
                return k;
        bool has = false;
        ab_err *e = NULL;
        if (envd_with_box(s, box, scope, home_of_user, &has, &e) < 0) {
                ab_err_free(&e); /* not known: asked again next time */
                return false;
        }
        known_set(box, has);
        return has;
}

/* ---- who a call is ------------------------------------------------------ */

/* The name of a call's user: Authorization: Basic base64("name:") (the
 * SDK's commands and filesystem RPCs), else the username query parameter
 * (its /files), else NULL (E2B's default). Free it. */
static char *call_name(ab_req *r)
{
        const char *h = req_header(r, "Authorization");
        if (h && !strncasecmp(h, "Basic ", 6)) {
                char *dec = NULL;
                size_t n = 0;
                if (crpc_b64_decode(h + 6, &dec, &n) == 0) {
                        char *colon = strchr(dec, ':');
                        if (colon)
                                *colon = 0;
                        if (*dec)
                                return dec;
                }
                free(dec);
        }
        const char *q = req_query(r, "username");
        return q && *q ? xstrdup(q) : NULL;
}

void envd_who_clear(envd_who *w)
{
        free(w->user);
        free(w->name);
        *w = (envd_who){0};
}

void envd_who_of(ab_req *r, const char *box, envd_who *w)
{
        *w = (envd_who){0};
        _cleanup_free_ char *name = call_name(r);
        bool has = box_has_user(r->srv, box, r->scope);
        if (!name)
                name = xstrdup(E2B_USER);
        if (!strcmp(name, "root")) {
                if (has) { /* E2B's root: its own home */
                        w->name = xstrdup("root");
                        w->home = "/root";
                }
                return;
        }
        if (!strcmp(name, E2B_USER) && !has)
                return; /* an older box: root, as it always was */
        w->user = xstrdup(name);
        w->name = steal_pointer(&name);
        if (has && !strcmp(w->name, E2B_USER))
                w->home = E2B_HOME;
}

/* ---- ownership of what a call makes ------------------------------------- */

int envd_missing_parents(ab_manager *m, ab_use *u, const char *path, char ***out, ab_err **err)
{
        _cleanup_strv_ char **v = xcalloc(1, sizeof(char *));
        size_t n = 0;
        _cleanup_free_ char *cur = xstrdup(path);
        for (;;) {
                char *slash = strrchr(cur, '/');
                if (!slash || slash == cur)
                        break;
                *slash = 0;
                abc_stat st = {0};
                int rc = ab_manager_file_stat(m, u, cur, false, &st, err);
                abc_stat_clear(&st);
                if (rc == 0)
                        break;
                if ((*err)->code != AB_E_NOT_FOUND)
                        return -1;
                ab_err_free(err);
                v = xrealloc(v, xmul(n + 2, sizeof(char *)));
                v[n++] = xstrdup(cur);
                v[n] = NULL;
        }
        *out = steal_pointer(&v);
        return 0;
}

int envd_give(ab_manager *m, ab_use *u, const char *owner, const char *path, char **made,
              ab_err **err)
{
        if (!owner)
                return 0;
        /* E2B's user gets its group too; another account keeps root's */
        const char *group = !strcmp(owner, E2B_USER) ? E2B_USER : NULL;
        for (size_t i = 0; made && made[i]; i++)
                if (ab_manager_file_chown(m, u, made[i], owner, group, err) < 0)
                        return -1;
        return path ? ab_manager_file_chown(m, u, path, owner, group, err) : 0;
}

/* ---- the account, made at create ---------------------------------------- */

static int grow(void *ud, int stream, const void *buf, size_t len)
{
        (void)stream;
        ab_buf_add(ud, buf, len);
        return 0;
}

/* The text of a box's small file (a missing one: empty). */
static int read_small(ab_manager *m, ab_use *u, const char *path, ab_buf *b, ab_err **err)
{
        if (ab_manager_file_read(m, u, path, 0, 4u << 20, grow, b, err) == 0)
                return 0;
        if ((*err)->code != AB_E_NOT_FOUND)
                return -1;
        ab_err_free(err);
        return 0;
}

/* True when a line of db (passwd or group) has field 0 = name, or field
 * 2 = id (when id is not 0). */
static bool db_has(const ab_buf *db, const char *name, unsigned id)
{
        size_t nl = name ? strlen(name) : 0;
        for (const char *line = db->p, *end = db->p + db->n; line && line < end;) {
                const char *eol = memchr(line, '\n', (size_t)(end - line));
                size_t len = eol ? (size_t)(eol - line) : (size_t)(end - line);
                if (name && len > nl && !strncmp(line, name, nl) && line[nl] == ':')
                        return true;
                const char *c1 = memchr(line, ':', len);
                const char *c2 = c1 ? memchr(c1 + 1, ':', len - (size_t)(c1 + 1 - line)) : NULL;
                if (id && c2 && (size_t)(c2 + 1 - line) < len && strtoul(c2 + 1, NULL, 10) == id &&
                    c2[1] >= '0' && c2[1] <= '9')
                        return true;
                line = eol ? eol + 1 : end;
        }
        return false;
}

int envd_owner_check(ab_manager *m, ab_use *u, const char *owner, ab_err **err)
{
        if (!owner || !strcmp(owner, E2B_USER) || strspn(owner, "0123456789") == strlen(owner))
                return 0; /* none, E2B's (made at create), or a uid */
        _cleanup_buf_ ab_buf pw = {0};
        if (read_small(m, u, "/etc/passwd", &pw, err) < 0)
                return -1;
        if (!db_has(&pw, owner, 0))
                return ab_err_set(err, AB_E_INVALID, 0, "no user '%s' in this box's /etc/passwd",
                                  owner);
        return 0;
}

/* The first id from USER_UID_FIRST free in both passwd and group. */
static unsigned free_id(const ab_buf *pw, const ab_buf *gr)
{
        for (unsigned id = USER_UID_FIRST; id < USER_UID_LAST; id++)
                if (!db_has(pw, NULL, id) && !db_has(gr, NULL, id))
                        return id;
        return 0;
}

/* Appends line to the box's path (made when missing), after a newline
 * when the file does not end with one. */
static int append_line(ab_manager *m, ab_use *u, const char *path, const ab_buf *old,
                       const char *line, ab_err **err)
{
        _cleanup_free_ char *text =
            xasprintf("%s%s\n", old->n && old->p[old->n - 1] != '\n' ? "\n" : "", line);
        return ab_manager_file_write(m, u, path, text, strlen(text), -1,
                                     ABC_W_APPEND | ABC_W_MKPARENTS, 0644, err);
}

static int has_path(ab_manager *m, ab_use *u, const char *path, bool *has, ab_err **err)
{
        abc_stat st = {0};
        int rc = ab_manager_file_stat(m, u, path, false, &st, err);
        abc_stat_clear(&st);
        *has = rc == 0;
        if (rc < 0 && (*err)->code == AB_E_NOT_FOUND) {
                ab_err_free(err);
                return 0;
        }
        return rc;
}

static int make_account(ab_manager *m, ab_use *u, ab_err **err)
{
        _cleanup_buf_ ab_buf pw = {0}, gr = {0};
        if (read_small(m, u, "/etc/passwd", &pw, err) < 0 ||
            read_small(m, u, "/etc/group", &gr, err) < 0)
                return -1;
        if (db_has(&pw, E2B_USER, 0))
                return 0;
        unsigned id = free_id(&pw, &gr);
        if (!id)
                return ab_err_set(err, AB_E_CONFLICT, 0, "no free uid from %u", USER_UID_FIRST);
        bool bash;
        if (has_path(m, u, "/bin/bash", &bash, err) < 0)
                return -1;
        _cleanup_free_ char *pl =
            xasprintf(E2B_USER ":x:%u:%u::" E2B_HOME ":%s", id, id, bash ? "/bin/bash" : "/bin/sh");
        _cleanup_free_ char *gl = xasprintf(E2B_USER ":x:%u:", id);
        if (!db_has(&gr, E2B_USER, 0) && append_line(m, u, "/etc/group", &gr, gl, err) < 0)
                return -1;
        if (append_line(m, u, "/etc/passwd", &pw, pl, err) < 0)
                return -1;
        bool home;
        if (has_path(m, u, E2B_HOME, &home, err) < 0)
                return -1;
        if (home)
                return 0; /* the image's: left as it is */
        if (ab_manager_file_mkdir(m, u, E2B_HOME, true, 0755, err) < 0)
                return -1;
        return ab_manager_file_chown(m, u, E2B_HOME, E2B_USER, E2B_USER, err);
}

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static char *init_bin; /* agentbox-init, or NULL when not found */
static const ab_config *init_cfg;

static void find_init(void)
{
        ab_err *e = NULL;
        init_bin = ab_backend_find_init(init_cfg->init_path, &e);
        if (!init_bin)
                ab_log(AB_LOG_WARN, "e2b: no sudo for sandboxes", "error", e->msg, NULL);
        ab_err_free(&e);
}

static int install_sudo(ab_server *s, ab_use *u, ab_err **err)
{
        bool has;
        if (has_path(s->mgr, u, SUDO_PATH, &has, err) < 0 || has)
                return has ? 0 : -1;
        init_cfg = s->cfg;
        pthread_once(&init_once, find_init);
        if (!init_bin)
                return 0;
        _cleanup_close_ int fd = open(init_bin, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "open %s", init_bin);
        return ab_manager_file_write(s->mgr, u, SUDO_PATH, NULL, 0, fd, ABC_W_MKPARENTS, 0755, err);
}

void e2b_user_setup(ab_server *s, const char *id)
{
        ab_use u;
        ab_err *e = NULL;
        if (ab_manager_use_begin(s->mgr, id, NULL, &u, &e) < 0) {
                ab_err_free(&e);
                return;
        }
        if (make_account(s->mgr, &u, &e) < 0) {
                ab_log(AB_LOG_WARN, "e2b: no account 'user' in the sandbox", "box", id, "error",
                       e->msg, NULL);
                ab_err_free(&e);
        }
        bool has = false;
        if (home_of_user(s->mgr, &u, &has, &e) < 0)
                ab_err_free(&e);
        known_set(id, has);
        if (install_sudo(s, &u, &e) < 0) {
                ab_log(AB_LOG_WARN, "e2b: no sudo in the sandbox", "box", id, "error", e->msg,
                       NULL);
                ab_err_free(&e);
        }
        ab_manager_use_end(s->mgr, &u);
}

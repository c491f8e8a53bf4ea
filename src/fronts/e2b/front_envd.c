/* envd, the in-sandbox API of E2B's SDK, served by the server under
 * /e2b/envd for every box and on each box's host name 49983-ID.ports_domain
 * (docs/compat-e2b.md): Connect RPC with JSON for
 * process.Process (envd_proc.c) and filesystem.Filesystem (here; watches in
 * envd_watch.c), /files (envd_files.c; signed URLs: envd_sign.c) and /health
 * (here). A call names its box by its host name or E2b-Sandbox-Id and
 * proves it with X-Access-Token, an HMAC with the
 * server's E2B secret of the box's id, its creation and its app: it opens
 * that box only, while it exists, as its app. This file: the tokens, what
 * the envd files share (envd_int.h), the filesystem calls, /health, the
 * shutdown. */
#include "fronts/e2b/envd_int.h"
#include "kit/files.h"
#include "base/log.h"
#include "base/codec.h"
#include "base/id.h"
#include "store/store.h"
#include "fleet/fleet.h"

#include <ctype.h>
#include <fcntl.h>
#include <openssl/hmac.h>
#include <time.h>

/* ---- access tokens ---------------------------------------------------- */

static pthread_mutex_t secret_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned char secret[32];
static bool secret_ok;

/* In a fleet (docs/fleet.md) every node makes and checks the same tokens:
 * their key is derived from the fleet's secret, not kept in one node's data
 * folder. */
static void fleet_secret(ab_server *s)
{
        static const char label[] = "agentbox e2b envd access token key";
        const char *f = ab_fleet_secret(s->fleet);
        unsigned int n = 0;
        HMAC(EVP_sha256(), f, (int)strlen(f), (const unsigned char *)label, sizeof(label) - 1,
             secret, &n);
}

static int load_secret(const char *data_dir, ab_err **err)
{
        _cleanup_free_ char *path = xasprintf("%s/e2b.secret", data_dir);
        _cleanup_free_ char *txt = NULL;
        size_t len = 0;
        if (ab_read_file(AT_FDCWD, path, &txt, &len) == 0 && len == sizeof(secret)) {
                memcpy(secret, txt, sizeof(secret));
                return 0;
        }
        unsigned char fresh[sizeof(secret)];
        ab_random_bytes(fresh, sizeof(fresh));
        /* Made once: a second process racing here reads the winner's. */
        _cleanup_free_ char *tmp = xasprintf("%s/.e2b.secret.%d", data_dir, (int)getpid());
        int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "create %s", tmp);
        int rc = ab_write_all(fd, fresh, sizeof(fresh));
        if (rc == 0 && fsync(fd) < 0)
                rc = -errno;
        close(fd);
        if (rc < 0 || (link(tmp, path) < 0 && errno != EEXIST)) {
                unlink(tmp);
                return ab_err_set(err, AB_E_INTERNAL, rc < 0 ? -rc : errno, "write %s", path);
        }
        unlink(tmp);
        free(txt);
        txt = NULL;
        if (ab_read_file(AT_FDCWD, path, &txt, &len) < 0 || len != sizeof(secret))
                return ab_err_set(err, AB_E_INTERNAL, 0, "%s: not a secret of %zu bytes", path,
                                  sizeof(secret));
        memcpy(secret, txt, sizeof(secret));
        return 0;
}

/* What a token is bound to: the box's id, its creation (a random value
 * stored with the box; a box from before it had one: its creation time and
 * backend name), its owner's app and, for a token handed to a caller that a
 * store API key authenticated, that key's id, each ended by a NUL so that no
 * two tuples make the same bytes. The two kinds have tags of their own: no
 * key-bound token's MAC is a key-less one's, so dropping the key id from a
 * token does not make a token that outlives the key. */
static void token_input(ab_buf *b, const ab_box_rec *rec, const char *key_id)
{
        static const char tag[] = "agentbox e2b envd access token v2";
        static const char tag_key[] = "agentbox e2b envd access token v3 key-bound";
        if (key_id)
                ab_buf_add(b, tag_key, sizeof(tag_key));
        else
                ab_buf_add(b, tag, sizeof(tag));
        ab_buf_add(b, rec->id, strlen(rec->id) + 1);
        const char *app = rec->app_id ? rec->app_id : "";
        ab_buf_add(b, app, strlen(app) + 1);
        const char *creation = json_string_value(json_object_get(rec->spec, "creation"));
        if (creation)
                ab_buf_printf(b, "creation=%s", creation);
        else
                ab_buf_printf(b, "created_at=%lld backend_id=%s", (long long)rec->created_at,
                              rec->backend_id ? rec->backend_id : "");
        ab_buf_add(b, "", 1);
        if (key_id)
                ab_buf_add(b, key_id, strlen(key_id) + 1);
}

/* A key id a token may carry: what POST /v1/keys makes ("k_" and hex), and
 * nothing that could hold the separator. */
static bool token_key_id_ok(const char *k, size_t n)
{
        if (n == 0 || n > E2B_TOKEN_KEY_MAX)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!isalnum((unsigned char)k[i]) && k[i] != '_' && k[i] != '-')
                        return false;
        return true;
}

int e2b_access_token(ab_server *s, const ab_box_rec *rec, const char *key_id,
                     char out[E2B_TOKEN_MAX + 1], ab_err **err)
{
        if (key_id && !token_key_id_ok(key_id, strlen(key_id)))
                return ab_err_set(err, AB_E_INVALID, 0, "key id %s cannot be bound to a token",
                                  key_id);
        pthread_mutex_lock(&secret_lock);
        int rc = 0;
        if (!secret_ok && s->fleet)
                fleet_secret(s);
        else if (!secret_ok)
                rc = load_secret(s->cfg->data_dir, err);
        if (rc == 0)
                secret_ok = true;
        pthread_mutex_unlock(&secret_lock);
        if (rc < 0)
                return -1;
        _cleanup_buf_ ab_buf in = {0};
        token_input(&in, rec, key_id);
        unsigned char mac[32];
        unsigned int n = 0;
        HMAC(EVP_sha256(), secret, sizeof(secret), (const unsigned char *)in.p, in.n, mac, &n);
        size_t off = 0;
        if (key_id) {
                size_t kl = strlen(key_id);
                memcpy(out, key_id, kl);
                out[kl] = '.';
                off = kl + 1;
        }
        ab_hex_encode(mac, 32, out + off);
        return 0;
}

/* envd's calls answer errors in Connect's shape; /files in envd's own. */
static bool envd_is_rpc(ab_req *r)
{
        return strncmp(r->path, "e2b/envd/files", 14) != 0;
}

static enum MHD_Result envd_deny(ab_req *r, unsigned status, const char *msg)
{
        if (envd_is_rpc(r))
                return resp_json(r, status,
                                 json_pack("{s:s,s:s}", "code",
                                           status == 400 ? "invalid_argument" : "unauthenticated",
                                           "message", msg));
        return resp_json(r, status, json_pack("{s:i,s:s}", "code", (int)status, "message", msg));
}

bool e2b_token_parse(const char *tok, char **key_id)
{
        *key_id = NULL;
        if (!tok)
                return false;
        size_t n = strlen(tok);
        if (n == E2B_TOKEN_LEN)
                return true;
        if (n <= E2B_TOKEN_LEN + 1 || n > E2B_TOKEN_MAX || tok[n - E2B_TOKEN_LEN - 1] != '.')
                return false;
        size_t kl = n - E2B_TOKEN_LEN - 1;
        if (!token_key_id_ok(tok, kl))
                return false;
        *key_id = xstrndup(tok, kl);
        return true;
}

bool envd_same_app(const char *a, const char *b)
{
        return a == b || (a && b && !strcmp(a, b));
}

/* Box id's record when tok is its access token: 1 (*rec filled: clear it;
 * *key_id, when key_id is not NULL, the store API key the token is bound to
 * or NULL: free it); 0 when it is not (no such box, one being deleted,
 * another creation of the id or another app: no record this token was made
 * for; a malformed token; the key it is bound to deleted or of another app);
 * -1 with *err (err must not be NULL) when the store or the secret fails.
 * The MAC covers the key id, so a token of one key is no token of another. */
static int token_box(ab_server *s, const char *id, const char *tok, ab_box_rec *rec, char **key_id,
                     ab_err **err)
{
        if (key_id)
                *key_id = NULL;
        _cleanup_free_ char *kid = NULL;
        if (!e2b_token_parse(tok, &kid))
                return 0;
        if (ab_manager_get(s->mgr, id, NULL, rec, err) < 0) {
                if ((*err)->code != AB_E_NOT_FOUND)
                        return -1;
                ab_err_free(err);
                return 0;
        }
        char want[E2B_TOKEN_MAX + 1];
        if (rec->status == AB_BOX_DELETING || e2b_access_token(s, rec, kid, want, err) < 0 ||
            !req_secret_eq(tok, want))
                goto no;
        if (kid) { /* the key must still exist, for the box's app */
                ab_api_key k = {0};
                if (ab_store_key_get(s->store, kid, &k, err) < 0) {
                        if ((*err)->code == AB_E_NOT_FOUND) /* deleted: the token with it */
                                ab_err_free(err);
                        goto no;
                }
                bool ok = envd_same_app(k.app_id, rec->app_id);
                ab_api_key_clear(&k);
                if (!ok)
                        goto no;
        }
        if (key_id)
                *key_id = steal_pointer(&kid);
        return 1;
no:
        ab_box_rec_clear(rec);
        return *err ? -1 : 0;
}

/* The box a call names: its host name's (49983-ID.ports_domain), else its
 * E2b-Sandbox-Id header's. NULL (answered 400) when neither names one, or
 * when both do and not the same. */
static const char *named_box(ab_req *r, enum MHD_Result *ret)
{
        const char *hdr = req_header(r, "E2b-Sandbox-Id");
        if (r->host_box) {
                if (hdr && strcasecmp(hdr, r->host_box)) {
                        *ret = envd_deny(r, 400,
                                         "E2b-Sandbox-Id names another sandbox than the host name");
                        return NULL;
                }
                return r->host_box;
        }
        if (!hdr || !*hdr || strlen(hdr) > 64) {
                *ret = envd_deny(r, 400, "missing E2b-Sandbox-Id header");
                return NULL;
        }
        return hdr;
}

enum MHD_Result envd_authenticate(ab_req *r, bool *ok)
{
        *ok = false;
        enum MHD_Result ret;
        const char *id = named_box(r, &ret);
        if (!id)
                return ret;
        const char *tok = req_header(r, "X-Access-Token");
        ab_box_rec rec;
        ab_err *e = NULL;
        char *key_id = NULL;
        unsigned status = 401;
        const char *why = "invalid or missing X-Access-Token for this sandbox";
        /* a signed URL (uploadUrl, downloadUrl); an empty token is none, as in envd */
        int rc = (!tok || !*tok) && envd_sign_asked(r)
                     ? envd_sign_box(r, id, &rec, &key_id, &status, &why, &e)
                     : token_box(r->srv, id, tok, &rec, &key_id, &e);
        if (rc < 0)
                return resp_err(r, e);
        if (rc == 0)
                return envd_deny(r, status, why);
        if (key_id) { /* deleting the key ends this call and its stream */
                free(r->key_id);
                r->key_id = key_id;
                ab_conns_bind_key(r->srv->http.conns, r->conn, r->key_id);
        }
        /* the call acts as the box's owner: its app (none: the admin's box) */
        r->scope_buf = steal_pointer(&rec.app_id);
        r->scope = r->scope_buf;
        r->front_box = xstrdup(rec.id);
        ab_box_rec_clear(&rec);
        *ok = true;
        return MHD_YES;
}

/* The box a call is for: the one its access token was checked for (from
 * the head, before the body: envd_authenticate). */
const char *envd_box(ab_req *r, enum MHD_Result *ret)
{
        if (!r->front_box) { /* a route not behind envd_authenticate: a bug */
                *ret = envd_deny(r, 401, "invalid or missing X-Access-Token for this sandbox");
                return NULL;
        }
        return r->front_box;
}

/* A unary Connect error (frees e). */
enum MHD_Result envd_rpc_err(ab_req *r, ab_err *e)
{
        const char *code = crpc_code_of(e->code);
        if (e->code == AB_E_CONFLICT && strstr(e->msg, "exists"))
                code = "already_exists";
        enum MHD_Result ret = resp_json(
            r, crpc_http_status(code),
            json_pack("{s:s,s:o}", "code", code, "message", json_bytes(e->msg, strlen(e->msg))));
        ab_err_free(&e);
        return ret;
}

enum MHD_Result envd_rpc_error(ab_req *r, const char *code, const char *msg)
{
        return resp_json(r, crpc_http_status(code),
                         json_pack("{s:s,s:s}", "code", code, "message", msg));
}

bool envd_enveloped(ab_req *r)
{
        const char *ct = req_header(r, "Content-Type");
        return ct && !strncasecmp(ct, "application/connect+json", 24);
}

/* A stream that is over at once: an end envelope with an error. */
enum MHD_Result envd_stream_error(ab_req *r, const char *code, const char *msg)
{
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0)
                return resp_error(r, 500, "internal", "pipe: %s", strerror(errno));
        _cleanup_buf_ ab_buf b = {0};
        crpc_end(&b, code, msg);
        if (ab_write_all(p[1], b.p, b.n) < 0) {
                /* an empty stream: the client reports a missing end */
        }
        close(p[1]);
        return resp_stream(r, 200, "application/connect+json", p[0], NULL);
}

/* ---- entries ------------------------------------------------------------ */

/* p (absolute) with "." and ".." resolved by name and no doubled or
 * trailing slashes, as Go's filepath.Clean (E2B's envd) makes it. Free it. */
static char *path_clean(const char *p)
{
        _cleanup_free_ char *work = xstrdup(p);
        char *out = xmalloc(strlen(p) + 2);
        size_t n = 0;
        char *save = NULL;
        for (char *part = strtok_r(work, "/", &save); part; part = strtok_r(NULL, "/", &save)) {
                if (!strcmp(part, "."))
                        continue;
                if (!strcmp(part, "..")) {
                        while (n > 0 && out[n - 1] != '/')
                                n--;
                        if (n > 0)
                                n--; /* the slash before the dropped name */
                        continue;
                }
                out[n++] = '/';
                size_t l = strlen(part);
                memcpy(out + n, part, l);
                n += l;
        }
        if (n == 0)
                out[n++] = '/';
        out[n] = 0;
        return out;
}

/* "/a/b" + "c" -> "/a/b/c", cleaned; a relative path is relative to
 * /home/user, E2B's home (a link to /workspace, the box's, made at create). */
char *envd_abs_path(const char *base, const char *rel)
{
        _cleanup_free_ char *joined = NULL;
        if (base[0] == '/')
                joined = rel && *rel ? xasprintf("%s/%s", base, rel) : xstrdup(base);
        else
                joined = rel && *rel ? xasprintf(E2B_HOME "/%s/%s", base, rel)
                                     : xasprintf(E2B_HOME "/%s", base);
        return path_clean(joined);
}

char *envd_call_path(const char *home, const char *path, ab_err **err)
{
        if (!home)
                home = E2B_HOME;
        if (path[0] == '~') {
                if (path[1] && path[1] != '/') {
                        ab_err_set(err, AB_E_INVALID, 0,
                                   "%s: another user's home (~name) cannot be expanded", path);
                        return NULL;
                }
                return envd_abs_path(home, path[1] ? path + 2 : NULL);
        }
        return path[0] == '/' ? envd_abs_path(path, NULL) : envd_abs_path(home, path);
}

const char *envd_call_home(ab_req *r, const char *box)
{
        __attribute__((cleanup(envd_who_clear))) envd_who who;
        envd_who_of(r, box, &who);
        /* who.home is a literal ("/root" or E2B_HOME) or NULL */
        return who.home ? who.home : E2B_HOME;
}

static void perm_string(char out[11], abc_ftype t, uint32_t mode)
{
        out[0] = t == ABC_DIR ? 'd' : t == ABC_SYMLINK ? 'l' : '-';
        const char *rwx = "rwxrwxrwx";
        for (int i = 0; i < 9; i++)
                out[1 + i] = mode & (1u << (8 - i)) ? rwx[i] : '-';
        out[10] = 0;
}

static json_t *rfc3339(int64_t secs)
{
        char buf[AB_TIME_LEN];
        ab_time_rfc3339(secs * 1000, false, buf);
        return json_string(buf);
}

/* The absolute, cleaned path a link at path (absolute) pointing to link
 * names, as E2B's envd reports a symlink's target: a relative link is taken
 * from the link's folder. Free it. */
static char *link_target(const char *path, const char *link)
{
        if (link[0] == '/')
                return envd_abs_path(link, NULL);
        _cleanup_free_ char *dir = xstrdup(path);
        char *slash = strrchr(dir, '/');
        if (slash)
                *slash = 0;
        return envd_abs_path(*dir ? dir : "/", link);
}

/* The owner or group envd shows: the box's name for it when known, root
 * for id 0, else the number (a listing carries ids, not names). */
static json_t *id_name(const char *name, bool has_ids, uint32_t id)
{
        if (name)
                return json_string(name);
        if (!has_ids || id == 0)
                return json_string("root");
        char num[16];
        snprintf(num, sizeof(num), "%" PRIu32, id);
        return json_string(num);
}

/* filesystem.EntryInfo of path (absolute) with st. */
json_t *envd_entry_info(const char *path, const abc_stat *st)
{
        const char *name = kit_base_name(path);
        char perms[11];
        perm_string(perms, st->type, st->mode);
        json_t *j = json_pack(
            "{s:o,s:s,s:o,s:s,s:i,s:s,s:s,s:s,s:o}", "name", json_bytes(name, strlen(name)), "type",
            kit_ftype_name(&kit_ftypes_envd, st->type), "path", json_bytes(path, strlen(path)),
            "size", "0", "mode", (int)(st->mode & 07777), "permissions", perms, "owner", "",
            "group", "", "modifiedTime", rfc3339(st->mtime));
        json_object_set_new(j, "owner", id_name(st->owner, st->has_ids, st->uid));
        json_object_set_new(j, "group", id_name(st->group, st->has_ids, st->gid));
        char sz[32];
        snprintf(sz, sizeof(sz), "%" PRIu64, st->size);
        json_object_set_new(j, "size", json_string(sz));
        if (st->link) {
                _cleanup_free_ char *target = link_target(path, st->link);
                json_object_set_new(j, "symlinkTarget", json_bytes(target, strlen(target)));
        }
        return j;
}

/* ---- box connections ------------------------------------------------- */

int envd_with_box(ab_server *s, const char *id, const char *scope, box_fn fn, void *ud,
                  ab_err **err)
{
        ab_use u;
        if (ab_manager_use_begin(s->mgr, id, scope, &u, err) < 0)
                return -1;
        int rc = fn(s->mgr, &u, ud, err);
        ab_manager_use_end(s->mgr, &u);
        return rc;
}

/* ---- filesystem.Filesystem ------------------------------------------- */

typedef struct fs_call {
        const char *path, *path2;
        const char *owner; /* MakeDir: the call's user, who gets the folders; NULL = root */
        int depth;
        abc_stat st;
        abc_dirent *ents;
        size_t n;
} fs_call;

/* A stat with the owner's and group's names (envd shows them). */
static int fs_stat(ab_manager *m, ab_use *u, void *ud, ab_err **err)
{
        fs_call *c = ud;
        return ab_manager_file_stat(m, u, c->path, true, &c->st, err);
}

static int fs_list(ab_manager *m, ab_use *u, void *ud, ab_err **err)
{
        fs_call *c = ud;
        return ab_manager_file_list(m, u, c->path, c->depth, &c->ents, &c->n, err);
}

/* ---- owner names of a listing ---- */

#define NAMES_FILE_MAX (1u << 20) /* most bytes of /etc/passwd or /etc/group read */

typedef struct names_read {
        const char *path;
        ab_buf b;
} names_read;

static int names_chunk(void *ud, int stream, const void *buf, size_t len)
{
        names_read *n = ud;
        if (n->b.n + len > NAMES_FILE_MAX)
                return -1; /* too large: no names from it */
        ab_buf_add(&n->b, buf, len);
        return 0;
}

static int names_file(ab_manager *m, ab_use *u, void *ud, ab_err **err)
{
        names_read *n = ud;
        return ab_manager_file_read(m, u, n->path, 0, NAMES_FILE_MAX + 1, names_chunk, n, err);
}

/* id -> name of the box's /etc/passwd or /etc/group ("name:x:id:..."
 * lines; the first name of an id wins), as an object keyed by the id in
 * decimal; {} when the file cannot be read. */
static json_t *names_of(ab_req *r, const char *box, const char *path)
{
        names_read n = {.path = path};
        json_t *o = json_object();
        ab_err *e = NULL;
        if (envd_with_box(r->srv, box, r->scope, names_file, &n, &e) < 0) {
                ab_err_free(&e);
                ab_buf_free(&n.b);
                return o;
        }
        ab_buf_add(&n.b, "", 1);
        char *save = NULL;
        for (char *line = strtok_r(n.b.p, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                char *name = line, *c1 = strchr(line, ':');
                char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
                char *c3 = c2 ? strchr(c2 + 1, ':') : NULL;
                if (!c1 || !c2 || !c3 || c1 == name || c3 == c2 + 1)
                        continue;
                *c1 = *c3 = 0;
                char *end = NULL;
                unsigned long id = strtoul(c2 + 1, &end, 10);
                if (*end || id > UINT32_MAX)
                        continue;
                char key[16];
                snprintf(key, sizeof(key), "%lu", id);
                if (!json_object_get(o, key))
                        json_object_set_new(o, key, json_bytes(name, strlen(name)));
        }
        ab_buf_free(&n.b);
        return o;
}

/* Fills the owner and group names of a listing's entries from the box's
 * databases: read only when an entry has an id other than root's. */
static void name_entries(ab_req *r, const char *box, abc_dirent *ents, size_t n)
{
        bool others = false;
        for (size_t i = 0; i < n && !others; i++)
                others = ents[i].st.has_ids && (ents[i].st.uid || ents[i].st.gid);
        if (!others)
                return;
        json_t *users = names_of(r, box, "/etc/passwd");
        json_t *groups = names_of(r, box, "/etc/group");
        for (size_t i = 0; i < n; i++) {
                abc_stat *st = &ents[i].st;
                char key[16];
                snprintf(key, sizeof(key), "%" PRIu32, st->uid);
                const char *u = json_string_value(json_object_get(users, key));
                snprintf(key, sizeof(key), "%" PRIu32, st->gid);
                const char *g = json_string_value(json_object_get(groups, key));
                if (st->has_ids && u && !st->owner)
                        st->owner = xstrdup(u);
                if (st->has_ids && g && !st->group)
                        st->group = xstrdup(g);
        }
        json_decref(users);
        json_decref(groups);
}

/* Stats path following symlinks (E2B's /home/user is one): *st is the
 * target's, with the first link's target in st->link; *real (when given)
 * the path it resolved to. */
int envd_stat_follow(ab_server *s, const char *box, const char *scope, const char *path,
                     abc_stat *st, char **real, ab_err **err)
{
        char *cur = envd_abs_path(path, NULL);
        char *first_link = NULL;
        for (int hop = 0;; hop++) {
                fs_call c = {.path = cur};
                if (envd_with_box(s, box, scope, fs_stat, &c, err) < 0) {
                        free(cur);
                        free(first_link);
                        return -1;
                }
                if (c.st.type != ABC_SYMLINK || !c.st.link || hop == 8) {
                        *st = c.st;
                        if (first_link) {
                                free(st->link);
                                st->link = first_link;
                        }
                        if (real)
                                *real = cur;
                        else
                                free(cur);
                        return 0;
                }
                char *next;
                if (c.st.link[0] == '/') {
                        next = xstrdup(c.st.link);
                } else {
                        char *slash = strrchr(cur, '/');
                        *slash = 0;
                        next = xasprintf("%s/%s", *cur ? cur : "", c.st.link);
                }
                if (!first_link)
                        first_link = steal_pointer(&c.st.link);
                abc_stat_clear(&c.st); /* the link was taken, the names go */
                free(cur);
                cur = next;
        }
}

static int fs_mkdir(ab_manager *m, ab_use *u, void *ud, ab_err **err)
{
        fs_call *c = ud;
        _cleanup_strv_ char **made = NULL;
        if (c->owner && (envd_owner_check(m, u, c->owner, err) < 0 ||
                         envd_missing_parents(m, u, c->path, &made, err) < 0))
                return -1;
        if (ab_manager_file_mkdir(m, u, c->path, true, 0755, err) < 0)
                return -1;
        return envd_give(m, u, c->owner, c->path, made, err);
}

static int fs_move(ab_manager *m, ab_use *u, void *ud, ab_err **err)
{
        fs_call *c = ud;
        return ab_manager_file_rename(m, u, c->path, c->path2, err);
}

/* Removing what is not there succeeds, as E2B's envd does (the box is). */
static int fs_remove(ab_manager *m, ab_use *u, void *ud, ab_err **err)
{
        fs_call *c = ud;
        if (ab_manager_file_delete(m, u, c->path, true, err) == 0)
                return 0;
        if ((*err)->code != AB_E_NOT_FOUND)
                return -1;
        ab_err_free(err);
        return 0;
}

/* Stats c->path on a fresh connection (after an operation). */
static int fs_stat_after(ab_req *r, const char *box, fs_call *c, ab_err **err)
{
        return envd_with_box(r->srv, box, r->scope, fs_stat, c, err);
}

static enum MHD_Result fs_entry_answer(ab_req *r, const char *box, const char *path, fs_call *c)
{
        _cleanup_free_ char *shown = envd_abs_path(path, NULL);
        json_t *entry = envd_entry_info(shown, &c->st);
        json_t *meta = envd_meta_under(r, box, shown);
        envd_entry_meta(entry, meta);
        json_decref(meta);
        abc_stat_clear(&c->st);
        return resp_json(r, 200, json_pack("{s:o}", "entry", entry));
}

static enum MHD_Result fs_unary(ab_req *r, const char *box, const char *method, json_t *msg)
{
        ab_err *e = NULL;
        fs_call c = {0};
        /* relative paths and ~ are the call's user's home's, as in E2B (not
         * the manager's /workspace) */
        const char *home = envd_call_home(r, box);
        _cleanup_free_ char *abs1 = NULL, *abs2 = NULL;
        c.path = json_string_value(json_object_get(msg, "path"));
        if (c.path && *c.path && !(c.path = abs1 = envd_call_path(home, c.path, &e)))
                return envd_rpc_err(r, e);
        if (!strcmp(method, "Move")) {
                c.path = json_string_value(json_object_get(msg, "source"));
                c.path2 = json_string_value(json_object_get(msg, "destination"));
                if (!c.path || !c.path2 || !*c.path || !*c.path2)
                        return envd_rpc_error(r, "invalid_argument",
                                              "source and destination: required");
                free(abs1);
                c.path = abs1 = envd_call_path(home, c.path, &e);
                if (!abs1 || !(c.path2 = abs2 = envd_call_path(home, c.path2, &e)))
                        return envd_rpc_err(r, e);
                if (envd_with_box(r->srv, box, r->scope, fs_move, &c, &e) < 0)
                        return envd_rpc_err(r, e);
                _cleanup_free_ char *from = envd_abs_path(c.path, NULL);
                _cleanup_free_ char *to = envd_abs_path(c.path2, NULL);
                envd_meta_moved(r, box, from, to);
                c.path = c.path2;
                if (fs_stat_after(r, box, &c, &e) < 0)
                        return envd_rpc_err(r, e);
                return fs_entry_answer(r, box, c.path2, &c);
        }
        if (!c.path || !*c.path)
                return envd_rpc_error(r, "invalid_argument", "path: required");
        if (!strcmp(method, "Stat")) {
                if (envd_stat_follow(r->srv, box, r->scope, c.path, &c.st, NULL, &e) < 0)
                        return envd_rpc_err(r, e);
                return fs_entry_answer(r, box, c.path, &c);
        }
        if (!strcmp(method, "MakeDir")) {
                /* envd answers already_exists for an existing path (the SDK's false) */
                if (envd_with_box(r->srv, box, r->scope, fs_stat, &c, &e) == 0) {
                        abc_stat_clear(&c.st);
                        return envd_rpc_error(r, "already_exists", "the path exists already");
                }
                ab_err_free(&e);
                __attribute__((cleanup(envd_who_clear))) envd_who who;
                envd_who_of(r, box, &who);
                c.owner = who.user;
                if (envd_with_box(r->srv, box, r->scope, fs_mkdir, &c, &e) < 0)
                        return envd_rpc_err(r, e);
                if (fs_stat_after(r, box, &c, &e) < 0)
                        return envd_rpc_err(r, e);
                return fs_entry_answer(r, box, c.path, &c);
        }
        if (!strcmp(method, "Remove")) {
                _cleanup_free_ char *shown = envd_abs_path(c.path, NULL);
                if (!strcmp(shown, "/") || !strcmp(shown, "/workspace") || !strcmp(shown, E2B_HOME))
                        return envd_rpc_error(r, "invalid_argument", "refusing to remove it");
                if (envd_with_box(r->srv, box, r->scope, fs_remove, &c, &e) < 0)
                        return envd_rpc_err(r, e);
                envd_meta_removed(r, box, shown);
                return resp_json(r, 200, json_object());
        }
        if (!strcmp(method, "ListDir")) {
                json_t *dj = json_object_get(msg, "depth");
                c.depth = json_is_integer(dj) ? (int)json_integer_value(dj) : 1;
                if (c.depth < 1)
                        c.depth = 1;
                if (c.depth > 32)
                        c.depth = 32;
                _cleanup_free_ char *real = NULL;
                if (envd_stat_follow(r->srv, box, r->scope, c.path, &c.st, &real, &e) < 0)
                        return envd_rpc_err(r, e);
                bool dir = c.st.type == ABC_DIR;
                abc_stat_clear(&c.st);
                if (!dir)
                        return envd_rpc_error(r, "invalid_argument", "not a directory");
                const char *shown_path = c.path;
                c.path = real;
                if (envd_with_box(r->srv, box, r->scope, fs_list, &c, &e) < 0)
                        return envd_rpc_err(r, e);
                _cleanup_free_ char *base = envd_abs_path(shown_path, NULL);
                json_t *meta = envd_meta_under(r, box, base);
                name_entries(r, box, c.ents, c.n);
                json_t *a = json_array();
                for (size_t i = 0; i < c.n; i++) {
                        _cleanup_free_ char *full = envd_abs_path(base, c.ents[i].path);
                        json_t *entry = envd_entry_info(full, &c.ents[i].st);
                        envd_entry_meta(entry, meta);
                        json_array_append_new(a, entry);
                }
                json_decref(meta);
                abc_dirents_free(c.ents, c.n);
                return resp_json(r, 200, json_pack("{s:o}", "entries", a));
        }
        return envd_rpc_error(r, "unimplemented", "no such method of filesystem.Filesystem");
}

enum MHD_Result envd_filesystem_rpc(ab_req *r, const char *method)
{
        enum MHD_Result ret;
        const char *box = envd_box(r, &ret);
        if (!box)
                return ret;
        bool streaming = !strcmp(method, "WatchDir");
        json_t *msg;
        ab_err *e = NULL;
        if (crpc_parse_request(r->body, r->body_len, envd_enveloped(r), &msg, &e) < 0) {
                if (streaming) {
                        ret = envd_stream_error(r, "invalid_argument", e->msg);
                        ab_err_free(&e);
                        return ret;
                }
                return envd_rpc_err(r, e);
        }
        if (streaming)
                ret = envd_watch_dir(r, box, msg);
        else if (!strcmp(method, "CreateWatcher") || !strcmp(method, "GetWatcherEvents") ||
                 !strcmp(method, "RemoveWatcher"))
                ret = envd_watcher_rpc(r, box, method, msg);
        else
                ret = fs_unary(r, box, method, msg);
        json_decref(msg);
        return ret;
}

/* ---- /health ----------------------------------------------------------- */

/* GET /health: 204 while the server is up. With E2b-Sandbox-Id (or on the
 * box's host name), 204 only
 * while that box runs (not paused: E2B's envd is frozen with its sandbox and
 * answers nothing) and X-Access-Token is its token, else
 * 502 (the SDK's "not running"): a caller without the token learns nothing,
 * not even whether the box exists. */
enum MHD_Result envd_health(ab_req *r, const char *id)
{
        if (r->host_box || req_header(r, "E2b-Sandbox-Id")) {
                enum MHD_Result ret;
                const char *box = named_box(r, &ret);
                if (!box)
                        return ret;
                ab_box_rec rec;
                ab_err *e = NULL;
                int rc = token_box(r->srv, box, req_header(r, "X-Access-Token"), &rec, NULL, &e);
                ab_err_free(&e);
                if (rc <= 0)
                        return resp_json(r, 502,
                                         json_pack("{s:i,s:s}", "code", 502, "message",
                                                   "the sandbox is not running"));
                /* a paused sandbox is not running (the SDK's isRunning) */
                bool up = rec.status == AB_BOX_RUNNING;
                ab_box_rec_clear(&rec);
                if (!up)
                        return resp_json(r, 502,
                                         json_pack("{s:i,s:s}", "code", 502, "message",
                                                   "the sandbox is not running"));
        }
        struct MHD_Response *resp = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
        return resp_send(r, 204, resp);
}

/* ---- shutdown ------------------------------------------------------------ */

void envd_shutdown(void)
{
        envd_procs_stop();
        envd_watches_stop();
}

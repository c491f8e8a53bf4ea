/* test_k8s_api.c - the Kubernetes API client (backend/k8s_api.h): kubeconfig
 * reading (YAML, relative paths, refusals), the watch-line and Status
 * parsers, and, when the stand-in API server tests/k8s/apiserver.py is
 * there (or $AB_K8S_APISERVER names it), calls against it: create, get,
 * patch, delete, errors as Status objects, a client certificate, and a
 * list-then-watch that sees an object made while it waits. */
#include "backend/k8s_api.h"
#include "base/util.h"
#include "tap.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

static char tmp[256];

static char *at(const char *rel)
{
        static char buf[4][512];
        static int i;
        i = (i + 1) % 4;
        snprintf(buf[i], sizeof(buf[i]), "%s/%s", tmp, rel);
        return buf[i];
}

static void put(const char *path, const char *s)
{
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0 || ab_write_all(fd, s, strlen(s)) < 0)
                abort();
        close(fd);
}

static const char *open_err(const char *yaml)
{
        static char msg[1024];
        put(at("kc"), yaml);
        ab_kapi_opts o = {.kubeconfig = at("kc")};
        ab_kapi *k = NULL;
        ab_err *e = NULL;
        if (ab_kapi_open(&o, &k, &e) == 0) {
                ab_kapi_free(k);
                return NULL;
        }
        snprintf(msg, sizeof(msg), "%s", e->msg);
        ab_err_free(&e);
        return msg;
}

static void test_kubeconfig(void)
{
        put(at("ca.crt"), "not really a CA\n");
        put(at("kc"), "apiVersion: v1\n"
                      "kind: Config\n"
                      "current-context: two\n"
                      "clusters:\n"
                      "- name: c1\n"
                      "  cluster:\n"
                      "    server: https://10.0.0.1:6443/\n"
                      "    certificate-authority: ca.crt\n"
                      "users:\n"
                      "- name: u1\n"
                      "  user:\n"
                      "    token: abc\n"
                      "contexts:\n"
                      "- name: one\n"
                      "  context: {cluster: c1, user: u1}\n"
                      "- name: two\n"
                      "  context:\n"
                      "    cluster: c1\n"
                      "    user: u1\n"
                      "    namespace: boxes\n");
        ab_kapi_opts o = {.kubeconfig = at("kc")};
        ab_kapi *k = NULL;
        ab_err *e = NULL;
        int r = ab_kapi_open(&o, &k, &e);
        tap_ok(r == 0, "a YAML kubeconfig with a token and a relative CA path opens");
        if (r == 0) {
                TAP_IS_STR(ab_kapi_server(k), "https://10.0.0.1:6443",
                           "the server comes from the current context's cluster");
                TAP_IS_STR(ab_kapi_namespace(k), "boxes", "so does the namespace");
                ab_kapi_free(k);
        } else {
                tap_diag("%s", e->msg);
                ab_err_free(&e);
        }
        o.context = "one";
        o.namespace_ = "override";
        r = ab_kapi_open(&o, &k, &e);
        tap_ok(r == 0 && !strcmp(ab_kapi_namespace(k), "override"),
               "a named context opens, and a namespace given wins");
        if (r == 0)
                ab_kapi_free(k);
        ab_err_free(&e);

        const char *m = open_err("current-context: nope\ncontexts: []\n");
        tap_ok(m && strstr(m, "no context nope"), "a missing context is named");
        m = open_err("current-context: a\ncontexts: [{name: a, context: {cluster: c, user: u}}]\n"
                     "clusters: [{name: c, cluster: {server: 'https://x', "
                     "insecure-skip-tls-verify: true}}]\nusers: [{name: u, user: {token: t}}]\n");
        tap_ok(m && strstr(m, "insecure-skip-tls-verify"), "insecure-skip-tls-verify is refused");
        m = open_err("current-context: a\ncontexts: [{name: a, context: {cluster: c, user: u}}]\n"
                     "clusters: [{name: c, cluster: {server: 'https://x'}}]\n"
                     "users: [{name: u, user: {exec: {command: aws}}}]\n");
        tap_ok(m && strstr(m, "neither a token nor a client certificate"),
               "a user with only an exec plugin is refused, saying why");
        m = open_err("current-context: a\ncontexts: [{name: a, context: {cluster: c, user: u}}]\n"
                     "clusters: [{name: c, cluster: {server: 'http://x'}}]\n"
                     "users: [{name: u, user: {token: t}}]\n");
        tap_ok(m && strstr(m, "not https://"), "a plain-HTTP server is refused");
        m = open_err("- just\n- a list\n");
        tap_ok(m && strstr(m, "not a YAML mapping"), "a file that is no mapping is refused");

        ab_kapi_opts ic = {.sa_dir = tmp};
        unsetenv("KUBERNETES_SERVICE_HOST");
        r = ab_kapi_open(&ic, &k, &e);
        tap_ok(r < 0 && e->code == AB_E_UNAVAILABLE && strstr(e->msg, "kubeconfig"),
               "outside a pod without a kubeconfig: unavailable, naming the setting");
        ab_err_free(&e);
        put(at("token"), "tok\n");
        put(at("namespace"), "sa-ns\n");
        setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
        setenv("KUBERNETES_SERVICE_PORT", "443", 1);
        r = ab_kapi_open(&ic, &k, &e);
        tap_ok(r == 0 && !strcmp(ab_kapi_server(k), "https://10.96.0.1:443") &&
                   !strcmp(ab_kapi_namespace(k), "sa-ns"),
               "in a pod: the service's address and the service account's namespace");
        if (r == 0)
                ab_kapi_free(k);
        ab_err_free(&e);
        unsetenv("KUBERNETES_SERVICE_HOST");
}

static void test_parsers(void)
{
        json_t *ev, *obj;
        const char *type;
        const char *line = "{\"type\":\"MODIFIED\",\"object\":{\"kind\":\"Pod\"}}";
        tap_ok(ab_kapi_watch_line(line, strlen(line), &ev, &type, &obj) == 0 &&
                   !strcmp(type, "MODIFIED") &&
                   !strcmp(json_string_value(json_object_get(obj, "kind")), "Pod"),
               "a watch line parses into its type and object");
        json_decref(ev);
        const char *bad[] = {"",
                             "{}",
                             "{\"type\":\"ADDED\"}",
                             "{\"type\":1,\"object\":{}}",
                             "{\"type\":\"ADDED\",\"object\":[]}",
                             "nonsense"};
        bool all = true;
        for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++)
                all = all && ab_kapi_watch_line(bad[i], strlen(bad[i]), &ev, &type, &obj) < 0;
        tap_ok(all, "lines that are no watch event are refused");
        json_t *st = json_pack("{s:s,s:i,s:s,s:s}", "kind", "Status", "code", 410, "reason",
                               "Expired", "message", "too old resource version");
        long code;
        const char *reason, *msg;
        tap_ok(ab_kapi_status_parse(st, &code, &reason, &msg) == 0 && code == 410 &&
                   !strcmp(reason, "Expired"),
               "a Status object parses");
        ab_kapi_res res = {.status = 409, .json = st};
        ab_err *e = NULL;
        ab_kapi_status_err(&res, "create pods/x", &e);
        tap_ok(e && e->code == AB_E_CONFLICT && strstr(e->msg, "create pods/x: Expired: too old"),
               "a failed answer becomes an error quoting its Status");
        ab_err_free(&e);
        json_decref(st);
        char *b = ab_kapi_base64("\x01\x02\x03\x04", 4);
        TAP_IS_STR(b, "AQIDBA==", "base64 as a Secret's data wants it");
        free(b);
}

/* ---- against the stand-in API server ---- */

static pid_t api_pid = -1;

static bool start_standin(char *url, size_t cap)
{
        const char *script = getenv("AB_K8S_APISERVER");
        char def[512];
        if (!script || !*script) {
                snprintf(def, sizeof(def), "%s/tests/k8s/apiserver.py",
                         getenv("AB_SOURCE_ROOT") ? getenv("AB_SOURCE_ROOT") : ".");
                script = def;
        }
        if (access(script, R_OK) < 0)
                return false;
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0)
                return false;
        api_pid = fork();
        if (api_pid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                dup2(p[1], 1);
                execlp("python3", "python3", script, "--state-dir", at("standin"), "--port", "0",
                       (char *)NULL);
                _exit(127);
        }
        close(p[1]);
        FILE *f = fdopen(p[0], "r");
        char line[256] = "";
        /* certificates are made on the first start: give it time */
        bool ok = fgets(line, sizeof(line), f) && !strncmp(line, "READY ", 6);
        fclose(f);
        if (ok) {
                line[strcspn(line, "\n")] = 0;
                snprintf(url, cap, "%s", line + 6);
        }
        return ok;
}

static bool seen;

static int wait_for_b(void *ud, const char *type, json_t *obj, bool sync, ab_err **err)
{
        const char *name =
            json_string_value(json_object_get(json_object_get(obj, "metadata"), "name"));
        if (name && !strcmp(name, "cm-b") && !strcmp(type, "ADDED") && !sync) {
                seen = true;
                return 1;
        }
        return 0;
}

static void *make_b(void *arg)
{
        ab_kapi *k = arg;
        struct timespec ts = {0, 300 * 1000000};
        nanosleep(&ts, NULL);
        json_t *cm = json_pack("{s:s,s:s,s:{s:s,s:{s:s}}}", "apiVersion", "v1", "kind", "ConfigMap",
                               "metadata", "name", "cm-b", "labels", "t", "w");
        ab_err *e = NULL;
        ab_kapi_create(k, "/api/v1/namespaces/default/configmaps", cm, NULL, &e);
        ab_err_free(&e);
        json_decref(cm);
        return NULL;
}

static void test_standin(void)
{
        char url[256];
        if (!start_standin(url, sizeof(url))) {
                tap_diag("no stand-in API server (tests/k8s/apiserver.py): calls not tried");
                return;
        }
        ab_kapi_opts o = {.kubeconfig = at("standin/kubeconfig")};
        ab_kapi *k = NULL;
        ab_err *e = NULL;
        tap_ok(ab_kapi_open(&o, &k, &e) == 0, "the stand-in's kubeconfig opens");
        if (!k) {
                tap_diag("%s", e->msg);
                ab_err_free(&e);
                return;
        }
        const char *cms = "/api/v1/namespaces/default/configmaps";
        json_t *cm =
            json_pack("{s:s,s:s,s:{s:s,s:{s:s}},s:{s:s}}", "apiVersion", "v1", "kind", "ConfigMap",
                      "metadata", "name", "cm-a", "labels", "t", "w", "data", "k", "v");
        json_t *out = NULL;
        tap_ok(ab_kapi_create(k, cms, cm, &out, &e) == 0 &&
                   json_string_value(json_object_get(json_object_get(out, "metadata"), "uid")),
               "create answers the object with its uid");
        json_decref(out);
        tap_ok(ab_kapi_create(k, cms, cm, NULL, &e) < 0 && e->code == AB_E_CONFLICT &&
                   strstr(e->msg, "AlreadyExists"),
               "creating it again: conflict, quoting the Status's reason");
        ab_err_free(&e);
        json_decref(cm);
        tap_ok(ab_kapi_get(k, "/api/v1/namespaces/default/configmaps/nope", NULL, &e) < 0 &&
                   e->code == AB_E_NOT_FOUND,
               "a missing object: not found");
        ab_err_free(&e);
        json_t *patch = json_pack("{s:{s:s}}", "data", "k", "v2");
        tap_ok(ab_kapi_patch(k, "/api/v1/namespaces/default/configmaps/cm-a", patch, &out, &e) ==
                       0 &&
                   !strcmp(json_string_value(json_object_get(json_object_get(out, "data"), "k")),
                           "v2"),
               "a merge patch changes the object");
        json_decref(out);
        json_decref(patch);
        json_t *noname =
            json_pack("{s:s,s:s,s:{}}", "apiVersion", "v1", "kind", "ConfigMap", "metadata");
        tap_ok(ab_kapi_create(k, cms, noname, NULL, &e) < 0 && e->code == AB_E_INVALID,
               "an object without a name: invalid");
        ab_err_free(&e);
        json_decref(noname);

        pthread_t t;
        pthread_create(&t, NULL, make_b, k);
        seen = false;
        int r = ab_kapi_list_watch(k, cms, "labelSelector=t%3Dw", ab_now_ms() + 10000,
                                   "waiting for cm-b", wait_for_b, NULL, &e);
        pthread_join(t, NULL);
        tap_ok(r == 0 && seen, "list then watch sees an object made while it waits");
        if (e)
                tap_diag("%s", e->msg);
        ab_err_free(&e);
        r = ab_kapi_list_watch(k, cms, "labelSelector=t%3Dnone", ab_now_ms() + 1500, "waiting",
                               wait_for_b, NULL, &e);
        tap_ok(r < 0 && e && e->code == AB_E_TIMEOUT, "a watch that sees nothing times out");
        ab_err_free(&e);
        tap_ok(ab_kapi_delete(k, "/api/v1/namespaces/default/configmaps/cm-a", &e) == 0 &&
                   ab_kapi_delete(k, "/api/v1/namespaces/default/configmaps/cm-a", &e) == 0,
               "delete, and delete of what is gone, succeed");
        ab_kapi_free(k);

        o.kubeconfig = at("standin/kubeconfig-cert");
        r = ab_kapi_open(&o, &k, &e);
        tap_ok(r == 0 &&
                   ab_kapi_get(k, "/api/v1/namespaces/default/configmaps/cm-b", NULL, &e) == 0,
               "a client certificate from the kubeconfig authenticates");
        if (e)
                tap_diag("%s", e->msg);
        ab_err_free(&e);
        ab_kapi_free(k);
}

int main(void)
{
        snprintf(tmp, sizeof(tmp), "/tmp/ab-kapi-XXXXXX");
        if (!mkdtemp(tmp))
                abort();
        test_kubeconfig();
        test_parsers();
        test_standin();
        if (api_pid > 0) {
                kill(api_pid, SIGTERM);
                waitpid(api_pid, NULL, 0);
        }
        (void)!ab_rm_tree_at(AT_FDCWD, tmp);
        return tap_done();
}

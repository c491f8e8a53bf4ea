/* The kubernetes backend: each box is a pod of a Kubernetes cluster, reached
 * over the Kubernetes API (k8s_api.h), with agentbox-init as its main
 * container's command, serving the init protocol over TCP on the pod's IP
 * after the mutual handshake (proto/handshake.h). Exec, files, tools and
 * terminals then go through the init protocol exactly as on the other
 * backends. docs/kubernetes.md is the user's view.
 *
 * What a box is made of (NAME = ab-<id>, '_' as '-', with a hash suffix
 * when that changed it; all with labels agentbox.dev/box=<box label>,
 * agentbox.dev/server=<hash of the data folder>,
 * app.kubernetes.io/managed-by=agentbox):
 *   Secret NAME         the box's record and the root of its objects: the
 *                       init secret (32 random bytes, key init-secret), and
 *                       annotations agentbox.dev/{id,created,limits,image,
 *                       network,state,creator}; state "creating" until the
 *                       first pod is Ready, then "ready" ("paused" from a
 *                       pause, which deletes the pod, until the next start
 *                       or stop: the box reads as paused); creator names the
 *                       process making it (a "creating" box whose creator
 *                       died on this machine reads as half made at once)
 *   PVC NAME            the box's files (workspace/, uploads/, outputs/ as
 *                       subPaths), sized from disk_mib; kept by stop
 *   NetworkPolicy NAME  for network modes none and allowlist
 *   Pod NAME            init container "agentbox-init" (the carrier image)
 *                       copies init into the emptyDir "agentbox-bin"; the
 *                       container "box" runs the box's image with that init
 *                       as its command; made by start, deleted by stop
 * The PVC, the policy and the pod have the Secret as owner, so deleting the
 * Secret removes them (the cluster's garbage collector); destroy deletes
 * each anyway. The cluster is the record: list and info read these objects. */
#include "backend/backend.h"
#include "backend/k8s_api.h"
#include "base/codec.h"
#include "base/id.h"
#include "base/log.h"
#include "base/sha256.h"
#include "proto/handshake.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <time.h>

#define LABEL_BOX       "agentbox.dev/box"
#define LABEL_SERVER    "agentbox.dev/server"
#define ANN_ID          "agentbox.dev/id"
#define ANN_CREATED     "agentbox.dev/created"
#define ANN_LIMITS      "agentbox.dev/limits"
#define ANN_IMAGE       "agentbox.dev/image"
#define ANN_STATE       "agentbox.dev/state"
#define ANN_CREATOR     "agentbox.dev/creator"
#define ANN_IMAGE_RUN   "agentbox.dev/image-run"
#define IMAGE_PROBE     IN_BIN "/image.json"
#define IMAGE_PROBE_MAX 8192
#define SECRET_KEY      "init-secret"
#define IN_BIN          "/.agentbox/bin"
#define IN_SECRET       "/.agentbox/secret"
#define DEFAULT_READY   120000u
#define GONE_WAIT_MS    60000u
#define CONNECT_MS      5000
#define HALF_MADE_SECS  600 /* a "creating" box older than this, at open, is half made */

typedef struct k8s_cache {
        char *id;
        char addr[64]; /* pod IP:port */
        uint8_t secret[ABH_SECRET_LEN];
        bool has_secret;
        struct k8s_cache *next;
} k8s_cache;

typedef struct kb {
        ab_backend base;
        ab_kapi *api;
        char *ns;
        char hash[17];
        json_t *s; /* the settings */
        uint64_t ready_ms;
        uint64_t workspace_mib;
        pthread_mutex_t mu;
        k8s_cache *cache; /* pod addresses and secrets of boxes met */
} kb;

static kb *K(ab_backend *b)
{
        return (kb *)b;
}

static const char *sget(const kb *k, const char *key)
{
        const char *v = json_string_value(json_object_get(k->s, key));
        return v && *v ? v : NULL;
}

/* ---- names ---- */

static uint64_t fnv(const char *s)
{
        uint64_t h = 1469598103934665603ull;
        for (; *s; s++)
                h = (h ^ (unsigned char)*s) * 1099511628211ull;
        return h;
}

/* The objects' name: DNS-1123 (lower-case alphanumerics and '-'). */
static char *obj_name(const char *id)
{
        _cleanup_free_ char *n = xasprintf("ab-%s", id);
        bool changed = false;
        for (char *p = n; *p; p++)
                if (*p == '_')
                        *p = '-', changed = true;
        size_t l = strlen(n);
        if (n[l - 1] == '-')
                changed = true;
        if (!changed)
                return steal_pointer(&n);
        return xasprintf("%s%s%08llx", n, n[l - 1] == '-' ? "" : "-",
                         (unsigned long long)(fnv(id) & 0xffffffffu));
}

/* The box label's value: the id where it is a valid label value, else a
 * hash of it ("h" + 16 hex digits). */
static char *box_label(const char *id)
{
        size_t l = strlen(id);
        bool ok = l <= 63 && id[l - 1] != '-' && id[l - 1] != '_';
        if (ok)
                return xstrdup(id);
        return xasprintf("h%016llx", (unsigned long long)fnv(id));
}

static char *path_of(kb *k, const char *kind, const char *name)
{
        const char *group =
            !strcmp(kind, "networkpolicies") ? "/apis/networking.k8s.io/v1" : "/api/v1";
        return name ? xasprintf("%s/namespaces/%s/%s/%s", group, k->ns, kind, name)
                    : xasprintf("%s/namespaces/%s/%s", group, k->ns, kind);
}

static json_t *labels_of(kb *k, const char *id)
{
        _cleanup_free_ char *bl = box_label(id);
        return json_pack("{s:s,s:s,s:s}", LABEL_BOX, bl, LABEL_SERVER, k->hash,
                         "app.kubernetes.io/managed-by", "agentbox");
}

static const char *jstr(const json_t *o, const char *key)
{
        return json_string_value(json_object_get(o, key));
}

static const char *meta_str(const json_t *obj, const char *key)
{
        return jstr(json_object_get(obj, "metadata"), key);
}

static const char *ann(const json_t *obj, const char *key)
{
        return jstr(json_object_get(json_object_get(obj, "metadata"), "annotations"), key);
}

/* ---- the cache of pod addresses and secrets ---- */

static k8s_cache *cache_find(kb *k, const char *id)
{
        for (k8s_cache *c = k->cache; c; c = c->next)
                if (!strcmp(c->id, id))
                        return c;
        return NULL;
}

static void cache_set(kb *k, const char *id, const char *addr, const uint8_t *secret)
{
        pthread_mutex_lock(&k->mu);
        k8s_cache *c = cache_find(k, id);
        if (!c) {
                c = xzalloc(sizeof(*c));
                c->id = xstrdup(id);
                c->next = k->cache;
                k->cache = c;
        }
        if (addr)
                snprintf(c->addr, sizeof(c->addr), "%s", addr);
        if (secret) {
                memcpy(c->secret, secret, ABH_SECRET_LEN);
                c->has_secret = true;
        }
        pthread_mutex_unlock(&k->mu);
}

static void cache_forget_addr(kb *k, const char *id, bool all)
{
        pthread_mutex_lock(&k->mu);
        for (k8s_cache **pp = &k->cache; *pp; pp = &(*pp)->next) {
                if (strcmp((*pp)->id, id))
                        continue;
                k8s_cache *c = *pp;
                c->addr[0] = 0;
                if (all) {
                        *pp = c->next;
                        ab_wipe(c->secret, sizeof(c->secret));
                        free(c->id);
                        free(c);
                }
                break;
        }
        pthread_mutex_unlock(&k->mu);
}

/* ---- reading the objects ---- */

/* GET of one object: 1 found (*out), 0 absent, -1 error. */
static int get_obj(kb *k, const char *kind, const char *name, json_t **out, ab_err **err)
{
        _cleanup_free_ char *p = path_of(k, kind, name);
        ab_err *e = NULL;
        if (ab_kapi_get(k->api, p, out, &e) == 0)
                return 1;
        if (e->code == AB_E_NOT_FOUND) {
                ab_err_free(&e);
                return 0;
        }
        if (err && !*err)
                *err = e;
        else
                ab_err_free(&e);
        return -1;
}

/* The box's Secret, checked to be this server's box: 1, 0 (no such box), -1. */
static int get_record(kb *k, const char *id, json_t **out, ab_err **err)
{
        _cleanup_free_ char *name = obj_name(id);
        int r = get_obj(k, "secrets", name, out, err);
        if (r <= 0)
                return r;
        const char *srv =
            jstr(json_object_get(json_object_get(*out, "metadata"), "labels"), LABEL_SERVER);
        const char *rid = ann(*out, ANN_ID);
        if (!srv || strcmp(srv, k->hash) || !rid || strcmp(rid, id)) {
                json_decref(*out);
                *out = NULL;
                return 0;
        }
        return 1;
}

static bool secret_of(const json_t *sec, uint8_t out[ABH_SECRET_LEN])
{
        const char *b64 = jstr(json_object_get(sec, "data"), SECRET_KEY);
        if (!b64)
                return false;
        unsigned char buf[64];
        size_t n = strlen(b64);
        if (n != 44)
                return false;
        int len = EVP_DecodeBlock(buf, (const unsigned char *)b64, (int)n);
        bool ok = len == 33 && b64[43] == '=' && b64[42] != '=';
        if (ok)
                memcpy(out, buf, ABH_SECRET_LEN);
        ab_wipe(buf, sizeof(buf));
        return ok;
}

static bool pod_ready(const json_t *pod)
{
        size_t i;
        json_t *c;
        json_array_foreach(json_object_get(json_object_get(pod, "status"), "conditions"), i, c)
        {
                const char *t = jstr(c, "type"), *s = jstr(c, "status");
                if (t && s && !strcmp(t, "Ready"))
                        return !strcmp(s, "True");
        }
        return false;
}

static bool pod_gone_or_going(const json_t *pod)
{
        const char *phase = jstr(json_object_get(pod, "status"), "phase");
        return meta_str(pod, "deletionTimestamp") ||
               (phase && (!strcmp(phase, "Failed") || !strcmp(phase, "Succeeded")));
}

/* ---- the objects a box is made of ---- */

static json_t *meta(kb *k, const char *id, const char *name, const json_t *owner)
{
        json_t *m = json_pack("{s:s,s:s,s:o}", "name", name, "namespace", k->ns, "labels",
                              labels_of(k, id));
        if (owner) {
                json_t *ref = json_pack("{s:s,s:s,s:s,s:s,s:b}", "apiVersion", "v1", "kind",
                                        "Secret", "name", meta_str(owner, "name"), "uid",
                                        meta_str(owner, "uid"), "blockOwnerDeletion", 1);
                json_object_set_new(m, "ownerReferences", json_pack("[o]", ref));
        }
        return m;
}

/* The start time (clock ticks after boot) of process pid, or 0. */
static unsigned long long proc_start(pid_t pid)
{
        char p[64], buf[1024];
        snprintf(p, sizeof(p), "/proc/%d/stat", (int)pid);
        FILE *f = fopen(p, "re");
        if (!f)
                return 0;
        size_t n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = '\0';
        const char *c = strrchr(buf, ')'); /* after the command's name, which may hold spaces */
        unsigned long long t = 0;
        /* fields 3.. follow; the start time is field 22 */
        for (int field = 2; c && field < 22; field++)
                c = strchr(c + 1, ' ');
        if (c)
                t = strtoull(c + 1, NULL, 10);
        return t;
}

static char *boot_id(void)
{
        char buf[64] = "";
        FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");
        if (f) {
                if (!fgets(buf, sizeof(buf), f))
                        buf[0] = '\0';
                fclose(f);
        }
        buf[strcspn(buf, "\n")] = '\0';
        return xstrdup(buf);
}

/* Who is making a box: "BOOT_ID/PID/START" of this process, so that a
 * create whose process died (a CLI killed midway) reads as half made at
 * once on this machine rather than after HALF_MADE_SECS. */
static char *creator_mark(void)
{
        _cleanup_free_ char *b = boot_id();
        return xasprintf("%s/%d/%llu", b, (int)getpid(), proc_start(getpid()));
}

/* Whether the creator that mark names is known to be gone: it ran on this
 * machine since its boot and no process of that pid and start time is
 * left. false when it cannot tell (another machine, no mark). */
static bool creator_gone(const char *mark)
{
        int pid = 0;
        unsigned long long start = 0;
        char b[64];
        if (!mark || sscanf(mark, "%63[^/]/%d/%llu", b, &pid, &start) != 3 || pid <= 0)
                return false;
        _cleanup_free_ char *mine = boot_id();
        if (!*mine || strcmp(mine, b) != 0)
                return false;
        return proc_start(pid) != start;
}

static json_t *secret_body(kb *k, const ab_box_spec *spec, const char *name, const uint8_t *key)
{
        _cleanup_free_ char *b64 = ab_kapi_base64(key, ABH_SECRET_LEN);
        json_t *lim = ab_limits_json(&spec->limits);
        json_object_set_new(lim, "output_cap", json_integer((json_int_t)spec->limits.output_cap));
        json_object_set_new(lim, "nofile", json_integer((json_int_t)spec->limits.nofile));
        _cleanup_free_ char *lims = json_dumps(lim, JSON_COMPACT);
        json_decref(lim);
        _cleanup_free_ char *now = xasprintf("%lld", (long long)time(NULL));
        _cleanup_free_ char *creator = creator_mark();
        json_t *m = meta(k, spec->id, name, NULL);
        json_object_set_new(m, "annotations",
                            json_pack("{s:s,s:s,s:s,s:s,s:s,s:s}", ANN_ID, spec->id, ANN_CREATED,
                                      now, ANN_LIMITS, lims, ANN_IMAGE,
                                      spec->image ? spec->image : sget(k, "image"), ANN_STATE,
                                      "creating", ANN_CREATOR, creator));
        json_t *j = json_pack("{s:s,s:s,s:o,s:s,s:{s:s}}", "apiVersion", "v1", "kind", "Secret",
                              "metadata", m, "type", "Opaque", "data", SECRET_KEY, b64);
        ab_wipe(b64, strlen(b64));
        return j;
}

static json_t *pvc_body(kb *k, const ab_box_spec *spec, const char *name, const json_t *owner)
{
        uint64_t mib = spec->limits.disk_mib ? spec->limits.disk_mib : k->workspace_mib;
        _cleanup_free_ char *size = xasprintf("%lluMi", (unsigned long long)mib);
        json_t *sp = json_pack("{s:[s],s:{s:{s:s}}}", "accessModes", "ReadWriteOnce", "resources",
                               "requests", "storage", size);
        if (sget(k, "storage_class"))
                json_object_set_new(sp, "storageClassName", json_string(sget(k, "storage_class")));
        return json_pack("{s:s,s:s,s:o,s:o}", "apiVersion", "v1", "kind", "PersistentVolumeClaim",
                         "metadata", meta(k, spec->id, name, owner), "spec", sp);
}

/* The policy of a network mode: NULL for full (no policy). */
static json_t *policy_body(kb *k, const char *id, const char *mode, const char *name,
                           const json_t *owner)
{
        if (mode && !strcmp(mode, "full"))
                return NULL;
        _cleanup_free_ char *bl = box_label(id);
        json_t *egress = json_array();
        json_t *proxy = json_object_get(k->s, "egress_proxy");
        if (mode && !strcmp(mode, "allowlist") && json_is_object(proxy)) {
                json_t *to = json_pack("{s:{s:O}}", "podSelector", "matchLabels",
                                       json_object_get(proxy, "selector"));
                if (jstr(proxy, "namespace"))
                        json_object_set_new(to, "namespaceSelector",
                                            json_pack("{s:{s:s}}", "matchLabels",
                                                      "kubernetes.io/metadata.name",
                                                      jstr(proxy, "namespace")));
                json_t *rule = json_pack("{s:[o]}", "to", to);
                json_t *port = json_object_get(proxy, "port");
                if (json_is_integer(port))
                        json_object_set_new(
                            rule, "ports",
                            json_pack("[{s:s,s:O}]", "protocol", "TCP", "port", port));
                json_array_append_new(egress, rule);
        }
        return json_pack("{s:s,s:s,s:o,s:{s:{s:{s:s}},s:[s],s:o}}", "apiVersion",
                         "networking.k8s.io/v1", "kind", "NetworkPolicy", "metadata",
                         meta(k, id, name, owner), "spec", "podSelector", "matchLabels", LABEL_BOX,
                         bl, "policyTypes", "Egress", "egress", egress);
}

static void merge_into(json_t *dst, const json_t *src)
{
        if (json_is_object(src))
                json_object_update(dst, (json_t *)src);
}

static json_t *resources(const ab_limits *l, uint64_t disk_mib)
{
        _cleanup_free_ char *cpu = xasprintf("%lldm", (long long)(l->cpus * 1000 + 0.5));
        _cleanup_free_ char *mem = xasprintf("%lluMi", (unsigned long long)l->memory_mib);
        json_t *lim = json_pack("{s:s,s:s}", "cpu", cpu, "memory", mem);
        if (disk_mib) {
                /* the root filesystem's writes and logs: the disk limit again */
                _cleanup_free_ char *eph = xasprintf("%lluMi", (unsigned long long)disk_mib);
                json_object_set_new(lim, "ephemeral-storage", json_string(eph));
        }
        return json_pack("{s:o,s:O}", "limits", lim, "requests", lim);
}

static json_t *pod_body(kb *k, const char *id, const json_t *rec, const char *name)
{
        ab_limits l;
        ab_limits_default(&l);
        json_t *lj = json_loads(ann(rec, ANN_LIMITS) ? ann(rec, ANN_LIMITS) : "{}", 0, NULL);
        ab_limits_from_json(lj, &l);
        json_decref(lj);
        const char *image = ann(rec, ANN_IMAGE);
        _cleanup_free_ char *listen = xasprintf("$(AGENTBOX_POD_IP):%d", ABH_DEFAULT_PORT);
        const char *pull =
            sget(k, "image_pull_policy") ? sget(k, "image_pull_policy") : "IfNotPresent";
        json_t *mounts = json_pack(
            "[{s:s,s:s,s:b},{s:s,s:s,s:b},{s:s,s:s,s:s},{s:s,s:s,s:s},{s:s,s:s,s:s},{s:s,s:s,s:s}]",
            "name", "agentbox-bin", "mountPath", IN_BIN, "readOnly", 1, "name", "agentbox-secret",
            "mountPath", IN_SECRET, "readOnly", 1, "name", "files", "mountPath", "/workspace",
            "subPath", "workspace", "name", "files", "mountPath", "/mnt/user-data/workspace",
            "subPath", "workspace", "name", "files", "mountPath", "/mnt/user-data/uploads",
            "subPath", "uploads", "name", "files", "mountPath", "/mnt/user-data/outputs", "subPath",
            "outputs");
        /* as on the Docker backend: init caps the box's processes itself (a
         * pod has no pids limit of its own) and captures the login
         * environment ahead of the first exec */
        _cleanup_free_ char *mp = xasprintf("%llu", (unsigned long long)l.pids);
        json_t *box = json_pack(
            "{s:s,s:s,s:s,s:[s,s,s,s,s,s,s,s,s,s],s:[{s:s,s:{s:{s:s}}}],s:o,s:o,"
            "s:{s:{s:i},s:i,s:i,s:i}}",
            "name", "box", "image", image, "imagePullPolicy", pull, "command",
            IN_BIN "/agentbox-init", "--listen-tcp", listen, "--secret-file",
            IN_SECRET "/" SECRET_KEY, "--workdir", "/workspace", "--max-procs", mp, "--prewarm",
            "env", "name", "AGENTBOX_POD_IP", "valueFrom", "fieldRef", "fieldPath", "status.podIP",
            "volumeMounts", mounts, "resources", resources(&l, l.disk_mib), "readinessProbe",
            "tcpSocket", "port", ABH_DEFAULT_PORT, "periodSeconds", 1, "timeoutSeconds", 1,
            "failureThreshold", 3);
        /* as on the Docker backend: no device nodes (the device cgroup would
         * refuse them anyway; the capability is not needed) */
        json_object_set_new(box, "securityContext",
                            json_pack("{s:i,s:i,s:{s:[s]}}", "runAsUser", 0, "runAsGroup", 0,
                                      "capabilities", "drop", "MKNOD"));
        json_object_set_new(box, "workingDir", json_string("/"));
        json_t *carrier =
            json_pack("{s:s,s:s,s:s,s:[s,s,s],s:[{s:s,s:s}]}", "name", "agentbox-init", "image",
                      sget(k, "init_image"), "imagePullPolicy", pull, "command", "/agentbox-init",
                      "--install", IN_BIN "/agentbox-init", "volumeMounts", "name", "agentbox-bin",
                      "mountPath", IN_BIN);
        /* the image's User and WorkingDir, as the runtime starts the image
         * (no user, no working directory of our own, no capabilities): what
         * the server cannot read of an image the cluster pulls (init's
         * --image-probe); read back once the pod is Ready, and left out of
         * the pods after that (the image stays the box's) */
        json_t *probe =
            ann(rec, ANN_IMAGE_RUN)
                ? NULL
                : json_pack("{s:s,s:s,s:s,s:[s,s,s],s:[{s:s,s:s}],s:{s:b,s:{s:[s]}}}", "name",
                            "agentbox-image", "image", image, "imagePullPolicy", pull, "command",
                            IN_BIN "/agentbox-init", "--image-probe", IMAGE_PROBE, "volumeMounts",
                            "name", "agentbox-bin", "mountPath", IN_BIN, "securityContext",
                            "allowPrivilegeEscalation", 0, "capabilities", "drop", "ALL");
        _cleanup_free_ char *pvc = xstrdup(name);
        json_t *vols = json_pack("[{s:s,s:{}},{s:s,s:{s:s,s:i}},{s:s,s:{s:s}}]", "name",
                                 "agentbox-bin", "emptyDir", "name", "agentbox-secret", "secret",
                                 "secretName", name, "defaultMode", 0400, "name", "files",
                                 "persistentVolumeClaim", "claimName", pvc);
        json_t *inits = json_pack("[o]", carrier);
        if (probe)
                json_array_append_new(inits, probe);
        json_t *spec = json_pack("{s:s,s:b,s:b,s:i,s:o,s:[o],s:o}", "restartPolicy", "Never",
                                 "automountServiceAccountToken", 0, "enableServiceLinks", 0,
                                 "terminationGracePeriodSeconds", 5, "initContainers", inits,
                                 "containers", box, "volumes", vols);
        /* the box's id as its host name where it is a DNS label, as on
         * the other backends */
        if (!strchr(id, '_') && strlen(id) <= 63 && id[strlen(id) - 1] != '-')
                json_object_set_new(spec, "hostname", json_string(id));
        if (sget(k, "runtime_class"))
                json_object_set_new(spec, "runtimeClassName",
                                    json_string(sget(k, "runtime_class")));
        if (json_object_size(json_object_get(k->s, "node_selector")))
                json_object_set(spec, "nodeSelector", json_object_get(k->s, "node_selector"));
        if (json_array_size(json_object_get(k->s, "tolerations")))
                json_object_set(spec, "tolerations", json_object_get(k->s, "tolerations"));
        json_t *m = meta(k, id, name, rec);
        json_t *labels = json_object_get(m, "labels");
        json_t *extra = json_deep_copy(json_object_get(k->s, "labels"));
        merge_into(extra, labels); /* ours win */
        if (extra)
                json_object_set_new(m, "labels", extra);
        if (json_object_size(json_object_get(k->s, "annotations")))
                json_object_set(m, "annotations", json_object_get(k->s, "annotations"));
        return json_pack("{s:s,s:s,s:o,s:o}", "apiVersion", "v1", "kind", "Pod", "metadata", m,
                         "spec", spec);
}

/* ---- waiting ---- */

typedef struct pod_wait {
        const char *name;
        bool want_gone;
        char ip[48];
        char *why; /* a failure the pod reports (image pull, crash) */
} pod_wait;

/* The first reason a pod cannot become ready that will not go away by
 * itself, or NULL. */
static char *pod_failure(const json_t *pod)
{
        const json_t *st = json_object_get(pod, "status");
        const char *phase = jstr(st, "phase");
        static const char *const fatal[] = {"ErrImagePull",
                                            "ImagePullBackOff",
                                            "InvalidImageName",
                                            "ErrImageNeverPull",
                                            "CreateContainerConfigError",
                                            "CreateContainerError",
                                            NULL};
        const char *lists[] = {"initContainerStatuses", "containerStatuses"};
        for (size_t l = 0; l < 2; l++) {
                size_t i;
                json_t *c;
                json_array_foreach(json_object_get(st, lists[l]), i, c)
                {
                        const json_t *w = json_object_get(json_object_get(c, "state"), "waiting");
                        const json_t *t =
                            json_object_get(json_object_get(c, "state"), "terminated");
                        const char *reason = jstr(w, "reason");
                        for (size_t f = 0; reason && fatal[f]; f++)
                                if (!strcmp(reason, fatal[f]))
                                        return xasprintf(
                                            "container %s: %s: %s", jstr(c, "name"), reason,
                                            jstr(w, "message") ? jstr(w, "message") : "");
                        if (t && l == 1)
                                return xasprintf(
                                    "container %s ended: %s (exit code %lld)", jstr(c, "name"),
                                    jstr(t, "reason") ? jstr(t, "reason") : "",
                                    (long long)json_integer_value(json_object_get(t, "exitCode")));
                }
        }
        if (phase && (!strcmp(phase, "Failed") || !strcmp(phase, "Succeeded")))
                return xasprintf("the pod is %s%s%s", phase, jstr(st, "message") ? ": " : "",
                                 jstr(st, "message") ? jstr(st, "message") : "");
        return NULL;
}

static int on_pod(void *ud, const char *type, json_t *obj, bool sync, ab_err **err)
{
        pod_wait *w = ud;
        if (!strcmp(type, "SYNCED"))
                return w->want_gone && !w->ip[0] ? 1 : 0;
        const char *name = meta_str(obj, "name");
        if (!name || strcmp(name, w->name))
                return 0;
        if (w->want_gone) {
                if (!strcmp(type, "DELETED"))
                        return 1;
                if (sync)
                        w->ip[0] = 1; /* seen: not gone yet (a marker, not an address) */
                return 0;
        }
        if (!strcmp(type, "DELETED")) {
                w->why = xstrdup("the pod was deleted while it started");
                return 1;
        }
        free(w->why);
        w->why = pod_failure(obj);
        if (w->why)
                return 1;
        const char *ip = jstr(json_object_get(obj, "status"), "podIP");
        if (pod_ready(obj) && ip && *ip) {
                snprintf(w->ip, sizeof(w->ip), "%s", ip);
                return 1;
        }
        return 0;
}

/* The events of object name, oldest first, as "reason: message; ...". */
static char *events_of(kb *k, const char *name)
{
        _cleanup_free_ char *sel = xasprintf("involvedObject.name=%s", name);
        _cleanup_free_ char *esc = ab_kapi_escape(sel);
        _cleanup_free_ char *base = path_of(k, "events", NULL);
        _cleanup_free_ char *p = xasprintf("%s?fieldSelector=%s", base, esc);
        json_t *list = NULL;
        ab_err *e = NULL;
        if (ab_kapi_get(k->api, p, &list, &e) < 0) {
                ab_err_free(&e);
                return xstrdup("");
        }
        ab_buf b = {0};
        size_t i;
        json_t *ev;
        json_array_foreach(json_object_get(list, "items"), i, ev)
        {
                const char *kind = jstr(json_object_get(ev, "involvedObject"), "kind");
                ab_buf_printf(&b, "%s%s %s: %s", b.n ? "; " : "", kind ? kind : "",
                              jstr(ev, "reason") ? jstr(ev, "reason") : "",
                              jstr(ev, "message") ? jstr(ev, "message") : "");
                if (b.n > 4000)
                        break;
        }
        json_decref(list);
        return b.p ? ab_buf_steal(&b) : xstrdup("");
}

/* Why a pod that did not become ready in time did not: its PVC's phase and
 * the events of both. */
static char *why_not_ready(kb *k, const char *name)
{
        json_t *pvc = NULL;
        const char *phase = NULL;
        if (get_obj(k, "persistentvolumeclaims", name, &pvc, NULL) == 1)
                phase = jstr(json_object_get(pvc, "status"), "phase");
        _cleanup_free_ char *ev = events_of(k, name);
        char *s =
            xasprintf("%s%s%s%s", phase && strcmp(phase, "Bound") ? "its volume claim is " : "",
                      phase && strcmp(phase, "Bound") ? phase : "",
                      phase && strcmp(phase, "Bound") && *ev ? "; " : "",
                      *ev ? ev : (phase && strcmp(phase, "Bound") ? "" : "no events"));
        json_decref(pvc);
        return s;
}

/* Waits for pod name to be Ready: 0 with *addr "IP:PORT", or -1 with *err
 * quoting why not. */
static int wait_ready(kb *k, const char *id, const char *name, char *addr, size_t cap, ab_err **err)
{
        pod_wait w = {.name = name};
        _cleanup_free_ char *sel = xasprintf("metadata.name=%s", name);
        _cleanup_free_ char *esc = ab_kapi_escape(sel);
        _cleanup_free_ char *q = xasprintf("fieldSelector=%s", esc);
        _cleanup_free_ char *pods = path_of(k, "pods", NULL);
        _cleanup_free_ char *what = xasprintf("box '%s': waiting for pod %s", id, name);
        ab_err *e = NULL;
        int r =
            ab_kapi_list_watch(k->api, pods, q, ab_now_ms() + k->ready_ms, what, on_pod, &w, &e);
        if (r == 0 && !w.why) {
                snprintf(addr, cap, "%s:%d", w.ip, ABH_DEFAULT_PORT);
                return 0;
        }
        _cleanup_free_ char *why = why_not_ready(k, name);
        if (w.why) {
                r = ab_err_set(err, AB_E_UNAVAILABLE, 0, "box '%s': pod %s cannot run: %s (%s)", id,
                               name, w.why, why);
        } else if (e && e->code == AB_E_TIMEOUT) {
                r = ab_err_set(err, AB_E_TIMEOUT, 0,
                               "box '%s': pod %s was not ready within %llu s: %s", id, name,
                               (unsigned long long)(k->ready_ms / 1000), why);
        } else {
                r = ab_err_set(err, e ? e->code : AB_E_UNAVAILABLE, 0, "%s", e ? e->msg : what);
        }
        free(w.why);
        ab_err_free(&e);
        return r;
}

/* Deletes pod name and waits until it is gone (the name is then free). */
static int delete_pod(kb *k, const char *id, const char *name, ab_err **err)
{
        _cleanup_free_ char *p = path_of(k, "pods", name);
        if (ab_kapi_delete(k->api, p, err) < 0)
                return -1;
        pod_wait w = {.name = name, .want_gone = true};
        _cleanup_free_ char *sel = xasprintf("metadata.name=%s", name);
        _cleanup_free_ char *esc = ab_kapi_escape(sel);
        _cleanup_free_ char *q = xasprintf("fieldSelector=%s", esc);
        _cleanup_free_ char *pods = path_of(k, "pods", NULL);
        _cleanup_free_ char *what = xasprintf("box '%s': waiting for pod %s to go", id, name);
        return ab_kapi_list_watch(k->api, pods, q, ab_now_ms() + GONE_WAIT_MS, what, on_pod, &w,
                                  err);
}

/* Checks that init answers over TCP with the secret. */
static int ping(const char *addr, const uint8_t *secret, ab_err **err)
{
        int fd = abc_connect_tcp(addr, secret, CONNECT_MS, err);
        if (fd < 0)
                return -1;
        char *v = NULL;
        int r = abc_ping(fd, &v, err);
        free(v);
        close(fd);
        return r;
}

/* Makes the pod of the box recorded by rec and waits for it. */
static int run_pod(kb *k, const char *id, const json_t *rec, ab_err **err)
{
        _cleanup_free_ char *name = obj_name(id);
        _cleanup_free_ char *pods = path_of(k, "pods", NULL);
        uint8_t secret[ABH_SECRET_LEN];
        if (!secret_of(rec, secret))
                return ab_err_set(err, AB_E_UNAVAILABLE, 0,
                                  "box '%s': its Secret holds no init "
                                  "secret",
                                  id);
        json_t *pod = pod_body(k, id, rec, name);
        int r = ab_kapi_create(k->api, pods, pod, NULL, err);
        json_decref(pod);
        if (r < 0)
                return ab_err_wrap(err, "box '%s': pod", id);
        char addr[64];
        if (wait_ready(k, id, name, addr, sizeof(addr), err) < 0 || ping(addr, secret, err) < 0) {
                ab_err *e = NULL;
                delete_pod(k, id, name, &e);
                ab_err_free(&e);
                ab_wipe(secret, sizeof(secret));
                return -1;
        }
        cache_set(k, id, addr, secret);
        ab_wipe(secret, sizeof(secret));
        return 0;
}

/* ---- the operations ---- */

static int remove_all(kb *k, const char *id, ab_err **err)
{
        _cleanup_free_ char *name = obj_name(id);
        cache_forget_addr(k, id, true);
        ab_err *e = NULL;
        int r = delete_pod(k, id, name, &e);
        const char *kinds[] = {"networkpolicies", "persistentvolumeclaims", "secrets"};
        for (size_t i = 0; i < 3; i++) {
                _cleanup_free_ char *p = path_of(k, kinds[i], name);
                if (ab_kapi_delete(k->api, p, e ? NULL : &e) < 0)
                        r = -1;
        }
        if (r < 0 && err && !*err)
                *err = e;
        else
                ab_err_free(&e);
        return r < 0 ? -1 : 0;
}

static int k_connect(ab_backend *b, const char *id, ab_err **err);

static int probe_out(void *ud, int stream, const void *buf, size_t len)
{
        ab_buf *o = ud;
        if (o->n + len > IMAGE_PROBE_MAX)
                return -1;
        ab_buf_add(o, buf, len);
        return 0;
}

/* What the pod's image probe found (IMAGE_PROBE, read through the running
 * pod's init), checked and rewritten: {"workdir"?, "user"?} as JSON text,
 * or NULL (logged) when it wrote nothing usable. The box's own processes
 * have not run yet; the values only ever become its own commands'
 * defaults. */
static char *image_run(ab_backend *b, const char *id)
{
        ab_err *e = NULL;
        _cleanup_buf_ ab_buf o = {0};
        _cleanup_close_ int fd = k_connect(b, id, &e);
        if (fd < 0 || abc_read(fd, IMAGE_PROBE, 0, IMAGE_PROBE_MAX, probe_out, &o, &e) < 0) {
                ab_log(AB_LOG_WARN,
                       "kubernetes: the image's user and working directory are unknown", "box", id,
                       "error", e ? e->msg : "read failed", NULL);
                ab_err_free(&e);
                return NULL;
        }
        json_t *j = json_loadb(o.p ? o.p : "", o.n, 0, NULL);
        const char *wd = json_string_value(json_object_get(j, "workdir"));
        const char *user = json_string_value(json_object_get(j, "user"));
        json_t *out = json_object();
        if (wd && wd[0] == '/' && strlen(wd) < 4096)
                json_object_set_new(out, "workdir", json_string(wd));
        if (user && *user && strlen(user) <= 256)
                json_object_set_new(out, "user", json_string(user));
        json_decref(j);
        char *text = json_dumps(out, JSON_COMPACT);
        json_decref(out);
        return text;
}

static int k_create(ab_backend *b, const ab_box_spec *spec, ab_err **err)
{
        kb *k = K(b);
        if (ab_id_check(spec->id, err) < 0)
                return -1;
        if (spec->rootfs || spec->layers)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "the kubernetes backend runs images by "
                                  "reference only (no rootfs or unpacked layers)");
        if (spec->n_mounts)
                return ab_err_set(err, AB_E_UNSUPPORTED, 0,
                                  "volumes and host folders are not "
                                  "supported on the kubernetes backend");
        if (!spec->image && !sget(k, "image"))
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "no image given and no kubernetes.image "
                                  "default");
        _cleanup_free_ char *name = obj_name(spec->id);
        uint8_t key[ABH_SECRET_LEN];
        ab_random_bytes(key, sizeof(key));
        json_t *sec = secret_body(k, spec, name, key);
        ab_wipe(key, sizeof(key));
        _cleanup_free_ char *secrets = path_of(k, "secrets", NULL);
        json_t *rec = NULL;
        ab_err *e = NULL;
        int r = ab_kapi_create(k->api, secrets, sec, &rec, &e);
        json_decref(sec);
        if (r < 0) {
                if (e->code == AB_E_CONFLICT) {
                        ab_err_free(&e);
                        return ab_err_set(err, AB_E_CONFLICT, 0, "box '%s' exists", spec->id);
                }
                *err ? ab_err_free(&e) : (void)(*err = e);
                return -1;
        }
        _cleanup_free_ char *pvcs = path_of(k, "persistentvolumeclaims", NULL);
        json_t *pvc = pvc_body(k, spec, name, rec);
        r = ab_kapi_create(k->api, pvcs, pvc, NULL, err);
        json_decref(pvc);
        json_t *pol = r == 0 ? policy_body(k, spec->id, spec->network, name, rec) : NULL;
        if (pol) {
                _cleanup_free_ char *pols = path_of(k, "networkpolicies", NULL);
                r = ab_kapi_create(k->api, pols, pol, NULL, err);
                json_decref(pol);
        }
        if (r == 0)
                r = run_pod(k, spec->id, rec, err);
        if (r == 0) {
                json_t *patch =
                    json_pack("{s:{s:{s:s}}}", "metadata", "annotations", ANN_STATE, "ready");
                _cleanup_free_ char *run = image_run(b, spec->id);
                if (run)
                        json_object_set_new(
                            json_object_get(json_object_get(patch, "metadata"), "annotations"),
                            ANN_IMAGE_RUN, json_string(run));
                _cleanup_free_ char *p = path_of(k, "secrets", name);
                r = ab_kapi_patch(k->api, p, patch, NULL, err);
                json_decref(patch);
        }
        json_decref(rec);
        if (r < 0) {
                ab_err *ce = NULL;
                remove_all(k, spec->id, &ce); /* nothing is left behind */
                ab_err_free(&ce);
                return -1;
        }
        return 0;
}

static void limits_from(const json_t *rec, ab_limits *l)
{
        ab_limits_default(l);
        json_t *j = ann(rec, ANN_LIMITS) ? json_loads(ann(rec, ANN_LIMITS), 0, NULL) : NULL;
        ab_limits_from_json(j, l);
        json_decref(j);
}

/* info from the record and the pod (may be NULL). */
static void info_from(const char *id, const json_t *rec, const json_t *pod, ab_box_info *out)
{
        memset(out, 0, sizeof(*out));
        out->id = xstrdup(id);
        out->backend = "kubernetes";
        limits_from(rec, &out->limits);
        const char *c = ann(rec, ANN_CREATED);
        out->created_at = c ? strtoll(c, NULL, 10) : 0;
        out->image = ann(rec, ANN_IMAGE) ? xstrdup(ann(rec, ANN_IMAGE)) : NULL;
        json_t *run = ann(rec, ANN_IMAGE_RUN) ? json_loads(ann(rec, ANN_IMAGE_RUN), 0, NULL) : NULL;
        const char *wd = json_string_value(json_object_get(run, "workdir"));
        const char *user = json_string_value(json_object_get(run, "user"));
        out->image_workdir = wd ? xstrdup(wd) : NULL;
        out->image_user = user ? xstrdup(user) : NULL;
        json_decref(run);
        const char *state = ann(rec, ANN_STATE);
        if (state && !strcmp(state, "creating") && !(pod && pod_ready(pod))) {
                /* a create that died with no pod that may still get Ready
                 * will not finish: no need to wait out HALF_MADE_SECS */
                bool old =
                    time(NULL) - out->created_at > HALF_MADE_SECS ||
                    ((!pod || pod_gone_or_going(pod)) && creator_gone(ann(rec, ANN_CREATOR)));
                out->status = old ? AB_BOX_ERROR : AB_BOX_CREATING;
                if (old)
                        out->error = xstrdup("a create that did not finish: delete the box");
                return;
        }
        if (!pod || pod_gone_or_going(pod)) {
                out->status = state && !strcmp(state, "paused") ? AB_BOX_PAUSED : AB_BOX_STOPPED;
                return;
        }
        out->status = pod_ready(pod) ? AB_BOX_RUNNING : AB_BOX_CREATING;
        int64_t t = 0;
        const char *st = jstr(json_object_get(pod, "status"), "startTime");
        if (st && ab_time_parse_rfc3339(st, &t) == 0)
                out->started_at = t / 1000;
}

static int k_info(ab_backend *b, const char *id, ab_box_info *out, ab_err **err)
{
        kb *k = K(b);
        memset(out, 0, sizeof(*out));
        if (ab_id_check(id, err) < 0)
                return -1;
        json_t *rec = NULL, *pod = NULL;
        int r = get_record(k, id, &rec, err);
        if (r == 0)
                return ab_err_set(err, AB_E_NOT_FOUND, 0, "no box with id '%s'", id);
        if (r < 0)
                return -1;
        _cleanup_free_ char *name = obj_name(id);
        r = get_obj(k, "pods", name, &pod, err);
        if (r >= 0)
                info_from(id, rec, r ? pod : NULL, out);
        json_decref(rec);
        json_decref(pod);
        return r < 0 ? -1 : 0;
}

static int cmp_info(const void *a, const void *b)
{
        return strcmp(((const ab_box_info *)a)->id, ((const ab_box_info *)b)->id);
}

static json_t *list_of(kb *k, const char *kind, ab_err **err)
{
        _cleanup_free_ char *sel = xasprintf(LABEL_SERVER "=%s", k->hash);
        _cleanup_free_ char *esc = ab_kapi_escape(sel);
        _cleanup_free_ char *base = path_of(k, kind, NULL);
        _cleanup_free_ char *p = xasprintf("%s?labelSelector=%s", base, esc);
        json_t *list = NULL;
        if (ab_kapi_get(k->api, p, &list, err) < 0)
                return NULL;
        return list;
}

static int k_list(ab_backend *b, ab_box_info **out, size_t *count, ab_err **err)
{
        kb *k = K(b);
        *out = NULL;
        *count = 0;
        json_t *recs = list_of(k, "secrets", err);
        if (!recs)
                return -1;
        json_t *pods = list_of(k, "pods", err);
        if (!pods) {
                json_decref(recs);
                return -1;
        }
        json_t *items = json_object_get(recs, "items");
        ab_box_info *v = xcalloc(json_array_size(items) + 1, sizeof(*v));
        size_t n = 0, i, j;
        json_t *rec, *pod;
        json_array_foreach(items, i, rec)
        {
                const char *id = ann(rec, ANN_ID);
                if (!id || !ab_id_valid(id))
                        continue;
                _cleanup_free_ char *name = obj_name(id);
                json_t *found = NULL;
                json_array_foreach(json_object_get(pods, "items"), j, pod)
                {
                        const char *pn = meta_str(pod, "name");
                        if (pn && !strcmp(pn, name))
                                found = pod;
                }
                info_from(id, rec, found, &v[n++]);
        }
        json_decref(recs);
        json_decref(pods);
        qsort(v, n, sizeof(*v), cmp_info);
        *out = v;
        *count = n;
        return 0;
}

/* Writes an annotation of the box's record. */
static int set_annotation(kb *k, const char *id, const char *key, const char *value, ab_err **err)
{
        json_t *patch = json_pack("{s:{s:{s:s}}}", "metadata", "annotations", key, value);
        _cleanup_free_ char *name = obj_name(id);
        _cleanup_free_ char *p = path_of(k, "secrets", name);
        int r = ab_kapi_patch(k->api, p, patch, NULL, err);
        json_decref(patch);
        return r;
}

/* Writes the record's state annotation ("ready", "paused"). */
static int set_state(kb *k, const char *id, const char *state, ab_err **err)
{
        return set_annotation(k, id, ANN_STATE, state, err);
}

static bool rec_paused(const json_t *rec)
{
        const char *state = ann(rec, ANN_STATE);
        return state && !strcmp(state, "paused");
}

static int k_start(ab_backend *b, const char *id, ab_err **err)
{
        kb *k = K(b);
        json_t *rec = NULL, *pod = NULL;
        int r = get_record(k, id, &rec, err);
        if (r == 0)
                return ab_err_set(err, AB_E_NOT_FOUND, 0, "no box with id '%s'", id);
        if (r < 0)
                return -1;
        _cleanup_free_ char *name = obj_name(id);
        r = get_obj(k, "pods", name, &pod, err);
        if (r == 1 && !pod_gone_or_going(pod)) {
                /* there: running, or on its way (wait for it) */
                char addr[64];
                uint8_t secret[ABH_SECRET_LEN];
                r = wait_ready(k, id, name, addr, sizeof(addr), err);
                if (r == 0 && secret_of(rec, secret)) {
                        cache_set(k, id, addr, secret);
                        ab_wipe(secret, sizeof(secret));
                }
        } else if (r >= 0) {
                /* absent, or ended (killed, evicted, OOM): a new pod on the same claim;
                 * a paused box is no longer paused once asked to start (a failed
                 * start leaves it stopped) */
                cache_forget_addr(k, id, false);
                r = rec_paused(rec) ? set_state(k, id, "ready", err) : 0;
                if (r == 0 && pod)
                        r = delete_pod(k, id, name, err);
                if (r == 0)
                        r = run_pod(k, id, rec, err);
                /* a box whose image was not told yet (made before the probe,
                 * or its probe unread): this pod ran it */
                _cleanup_free_ char *run =
                    r == 0 && !ann(rec, ANN_IMAGE_RUN) ? image_run(b, id) : NULL;
                if (run)
                        set_annotation(k, id, ANN_IMAGE_RUN, run, NULL);
        }
        json_decref(rec);
        json_decref(pod);
        return r < 0 ? -1 : 0;
}

/* Deletes the pod; the record's state becomes `state` ("ready" for a stop,
 * "paused" for a pause) once the pod is gone. */
static int end_pod(kb *k, const char *id, const char *state, ab_err **err)
{
        json_t *rec = NULL;
        int r = get_record(k, id, &rec, err);
        bool paused = r == 1 && rec_paused(rec);
        json_decref(rec);
        if (r == 0)
                return ab_err_set(err, AB_E_NOT_FOUND, 0, "no box with id '%s'", id);
        if (r < 0)
                return -1;
        cache_forget_addr(k, id, false);
        _cleanup_free_ char *name = obj_name(id);
        if (delete_pod(k, id, name, err) < 0)
                return -1;
        if (paused != !strcmp(state, "paused") && set_state(k, id, state, err) < 0)
                return -1;
        return 0;
}

static int k_stop(ab_backend *b, const char *id, ab_err **err)
{
        return end_pod(K(b), id, "ready", err);
}

static int k_destroy(ab_backend *b, const char *id, ab_err **err)
{
        kb *k = K(b);
        if (ab_id_check(id, err) < 0)
                return -1;
        json_t *rec = NULL;
        int r = get_record(k, id, &rec, err);
        json_decref(rec);
        if (r < 0)
                return -1;
        if (r == 0)
                return ab_err_set(err, AB_E_NOT_FOUND, 0, "no box with id '%s'", id);
        return remove_all(k, id, err);
}

/* The box's pod address and secret: from the cache, else from the cluster. */
static int reach(kb *k, const char *id, char *addr, size_t cap, uint8_t *secret, ab_err **err)
{
        pthread_mutex_lock(&k->mu);
        k8s_cache *c = cache_find(k, id);
        bool hit = c && c->addr[0] && c->has_secret;
        if (hit) {
                snprintf(addr, cap, "%s", c->addr);
                memcpy(secret, c->secret, ABH_SECRET_LEN);
        }
        pthread_mutex_unlock(&k->mu);
        if (hit)
                return 0;
        json_t *rec = NULL, *pod = NULL;
        int r = get_record(k, id, &rec, err);
        if (r == 0)
                return ab_err_set(err, AB_E_NOT_FOUND, 0, "no box with id '%s'", id);
        if (r < 0)
                return -1;
        _cleanup_free_ char *name = obj_name(id);
        r = get_obj(k, "pods", name, &pod, err);
        const char *ip = r == 1 ? jstr(json_object_get(pod, "status"), "podIP") : NULL;
        if (r >= 0 && (r == 0 || pod_gone_or_going(pod) || !pod_ready(pod) || !ip || !*ip))
                r = ab_err_set(err, AB_E_CONFLICT, 0, "box '%s' is stopped: start it first", id);
        else if (r >= 0 && !secret_of(rec, secret))
                r = ab_err_set(err, AB_E_UNAVAILABLE, 0,
                               "box '%s': its Secret holds no init "
                               "secret",
                               id);
        if (r >= 0) {
                snprintf(addr, cap, "%s:%d", ip, ABH_DEFAULT_PORT);
                cache_set(k, id, addr, secret);
                r = 0;
        }
        json_decref(rec);
        json_decref(pod);
        return r;
}

static int k_connect(ab_backend *b, const char *id, ab_err **err)
{
        kb *k = K(b);
        char addr[64];
        uint8_t secret[ABH_SECRET_LEN];
        if (reach(k, id, addr, sizeof(addr), secret, err) < 0)
                return -1;
        ab_err *e = NULL;
        int fd = abc_connect_tcp(addr, secret, CONNECT_MS, &e);
        if (fd < 0) {
                /* the pod may have gone (or been replaced): ask the cluster once */
                ab_err_free(&e);
                cache_forget_addr(k, id, false);
                if (reach(k, id, addr, sizeof(addr), secret, err) == 0)
                        fd = abc_connect_tcp(addr, secret, CONNECT_MS, err);
        }
        ab_wipe(secret, sizeof(secret));
        return fd;
}

/* A port of the pod: its init connects to the port on the pod's loopback
 * and relays (init's PORT), so what listens on 127.0.0.1 in the box is
 * reached as on the other backends, and only init's port need be open
 * between the server and the pods. */
static int k_port_connect(ab_backend *b, const char *id, uint16_t port, int timeout_ms,
                          ab_err **err)
{
        _cleanup_close_ int fd = k_connect(b, id, err);
        if (fd < 0)
                return -1;
        if (abc_port(fd, port, timeout_ms, err) < 0)
                return ab_err_wrap(err, "box '%s'", id);
        int fl = fcntl(fd, F_GETFL);
        if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "fcntl");
        return steal_fd(&fd);
}

/* The box's status, AB_E_CONFLICT unless it is `want` or `done` (then *is_done). */
static int status_is(ab_backend *b, const char *id, ab_box_status want, ab_box_status done,
                     bool *is_done, const char *what, ab_err **err)
{
        ab_box_info i;
        if (k_info(b, id, &i, err) < 0)
                return -1;
        ab_box_status st = i.status;
        ab_box_info_clear(&i);
        *is_done = st == done;
        if (st != want && st != done)
                return ab_err_set(err, AB_E_CONFLICT, 0, "box '%s' is %s: %s", id,
                                  ab_box_status_name(st), what);
        return 0;
}

static int k_pause(ab_backend *b, const char *id, ab_err **err)
{
        /* A pod cannot be frozen through the API: pause is a stop (the
         * files stay on the claim; the processes end), as agent-sandbox's
         * Suspended mode. The record remembers it, so the box reads as
         * paused (to the server after a restart, to the CLI) until a
         * resume, a start or a stop. */
        bool done;
        if (status_is(b, id, AB_BOX_RUNNING, AB_BOX_PAUSED, &done, "only a running box pauses",
                      err) < 0)
                return -1;
        return done ? 0 : end_pod(K(b), id, "paused", err);
}

static int k_resume(ab_backend *b, const char *id, ab_err **err)
{
        bool done;
        if (status_is(b, id, AB_BOX_PAUSED, AB_BOX_RUNNING, &done, "only a paused box resumes",
                      err) < 0)
                return -1;
        return done ? 0 : k_start(b, id, err);
}

/* The pod's usage, from its init (the container's cgroup as init sees
 * it: the host here cannot read a node's cgroups); the limits are the
 * box's. No disk use: the claim's filesystem is the cluster's business. */
static int k_stats(ab_backend *b, const char *id, ab_box_stats *out, ab_err **err)
{
        memset(out, 0, sizeof(*out));
        ab_box_info i;
        if (k_info(b, id, &i, err) < 0)
                return -1;
        ab_box_status st = i.status;
        uint64_t mem_mib = i.limits.memory_mib, disk_mib = i.limits.disk_mib;
        ab_box_info_clear(&i);
        if (st != AB_BOX_RUNNING)
                return ab_err_set(err, AB_E_CONFLICT, 0, "box '%s' is %s", id,
                                  ab_box_status_name(st));
        int fd = k_connect(b, id, err);
        if (fd < 0)
                return ab_err_wrap(err, "box '%s': stats", id);
        abp_stats s;
        int r = abc_stats(fd, &s, err);
        close(fd);
        if (r < 0)
                return ab_err_wrap(err, "box '%s': stats", id);
        out->memory_bytes = s.memory;
        out->memory_limit = s.has_memory_max ? s.memory_max : mem_mib * 1024 * 1024;
        out->pids = s.pids;
        out->cpu_usage_ns = s.cpu_ns;
        out->oom_kills = s.oom_kills;
        out->disk_limit_bytes = disk_mib * 1024 * 1024;
        return 0;
}

static int k_image_config(ab_backend *b, const char *ref, json_t **out, ab_err **err)
{
        kb *k = K(b);
        *out = NULL;
        if (!ref || !*ref)
                ref = sget(k, "image");
        if (!ref)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "no image given and no kubernetes.image "
                                  "default");
        /* The cluster pulls the image on its nodes; its Env reaches init's
         * environment there (and so every command), not through this record. */
        *out = json_pack("{s:s,s:s,s:[]}", "ref", ref, "id", ref, "env");
        return 0;
}

static int k_set_network(ab_backend *b, const char *id, const char *mode, ab_err **err)
{
        kb *k = K(b);
        json_t *rec = NULL, *cur = NULL;
        int r = get_record(k, id, &rec, err);
        if (r == 0)
                return ab_err_set(err, AB_E_NOT_FOUND, 0, "no box with id '%s'", id);
        if (r < 0)
                return -1;
        _cleanup_free_ char *name = obj_name(id);
        _cleanup_free_ char *p = path_of(k, "networkpolicies", name);
        json_t *want = policy_body(k, id, mode, name, rec);
        r = get_obj(k, "networkpolicies", name, &cur, err);
        if (r >= 0 && !want) {
                r = r ? ab_kapi_delete(k->api, p, err) : 0; /* full: no policy */
        } else if (r == 0) {
                _cleanup_free_ char *pols = path_of(k, "networkpolicies", NULL);
                r = ab_kapi_create(k->api, pols, want, NULL, err);
        } else if (r > 0 &&
                   !json_equal(json_object_get(cur, "spec"), json_object_get(want, "spec"))) {
                /* changed in place (a merge patch replaces the egress list
                 * whole): never a moment without a policy */
                json_t *patch = json_pack("{s:O}", "spec", json_object_get(want, "spec"));
                r = ab_kapi_patch(k->api, p, patch, NULL, err);
                json_decref(patch);
        }
        json_decref(want);
        json_decref(cur);
        json_decref(rec);
        return r < 0 ? -1 : 0;
}

static void k_free(ab_backend *b)
{
        kb *k = K(b);
        ab_kapi_free(k->api);
        json_decref(k->s);
        free(k->ns);
        while (k->cache) {
                k8s_cache *c = k->cache;
                k->cache = c->next;
                ab_wipe(c->secret, sizeof(c->secret));
                free(c->id);
                free(c);
        }
        pthread_mutex_destroy(&k->mu);
        free(k);
}

static const ab_backend_ops k8s_ops = {
    .name = "kubernetes",
    .create = k_create,
    .start = k_start,
    .stop = k_stop,
    .pause = k_pause,
    .resume = k_resume,
    .destroy = k_destroy,
    .info = k_info,
    .list = k_list,
    .connect = k_connect,
    .stats = k_stats,
    .free = k_free,
    .image_config = k_image_config,
    .set_network = k_set_network,
    .port_connect = k_port_connect,
    /* connect_unix, disk_alloc, fork, snapshot, subcg, vol: none (501) */
};

/* Removes boxes a create left half made (state "creating", older than a
 * create may take) and says what it assumes of network policies. */
static void recover(kb *k)
{
        ab_err *e = NULL;
        json_t *recs = list_of(k, "secrets", &e);
        size_t i, n = 0;
        json_t *rec;
        json_array_foreach(json_object_get(recs, "items"), i, rec)
        {
                const char *id = ann(rec, ANN_ID), *state = ann(rec, ANN_STATE);
                const char *c = ann(rec, ANN_CREATED);
                int64_t age = time(NULL) - (c ? strtoll(c, NULL, 10) : 0);
                if (!id || !ab_id_valid(id))
                        continue;
                n++;
                if (state && !strcmp(state, "creating") &&
                    age > (int64_t)(k->ready_ms / 1000) + 60) {
                        ab_log(AB_LOG_WARN, "kubernetes: removing a half-made box", "box", id,
                               NULL);
                        ab_err *re = NULL;
                        remove_all(k, id, &re);
                        ab_err_free(&re);
                }
        }
        if (!recs) {
                ab_log(AB_LOG_WARN, "kubernetes: cannot list boxes at start", "error", e->msg,
                       NULL);
                ab_err_free(&e);
        }
        json_decref(recs);
        char nb[32];
        snprintf(nb, sizeof(nb), "%zu", n);
        ab_log(AB_LOG_INFO, "kubernetes backend ready", "server", ab_kapi_server(k->api),
               "namespace", k->ns, "boxes", nb, "network_policies",
               "assumed enforced: network modes none and allowlist rely on the cluster's "
               "NetworkPolicy controller (a cluster without one lets every box reach everything)",
               NULL);
}

int ab_k8s_open(const ab_k8s_opts *o, ab_backend **out, ab_err **err)
{
        *out = NULL;
        json_t *s = o->settings_json && *o->settings_json ? json_loads(o->settings_json, 0, NULL)
                                                          : json_object();
        if (!json_is_object(s)) {
                json_decref(s);
                return ab_err_set(err, AB_E_INVALID, 0, "kubernetes: settings are not a mapping");
        }
        if (ab_k8s_settings_check(s, err) < 0) {
                json_decref(s);
                return -1;
        }
        kb *k = xzalloc(sizeof(*k));
        k->base.ops = &k8s_ops;
        k->s = s;
        pthread_mutex_init(&k->mu, NULL);
        _cleanup_backend_ ab_backend *guard = &k->base;
        if (!sget(k, "init_image"))
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "kubernetes.init_image: the image that carries agentbox-init "
                                  "is required (scripts/k8s-images.sh builds it)");
        ab_kapi_opts ko = {.kubeconfig = sget(k, "kubeconfig"),
                           .context = sget(k, "context"),
                           .namespace_ = sget(k, "namespace")};
        if (ab_kapi_open(&ko, &k->api, err) < 0)
                return ab_err_wrap(err, "kubernetes");
        k->ns = xstrdup(ab_kapi_namespace(k->api));
        k->ready_ms = DEFAULT_READY;
        if (sget(k, "ready_timeout"))
                (void)!ab_parse_duration_ms(sget(k, "ready_timeout"), &k->ready_ms, NULL);
        k->workspace_mib = AB_DEFAULT_DISK_MIB;
        if (sget(k, "workspace_size"))
                (void)!ab_parse_mib(sget(k, "workspace_size"), &k->workspace_mib, NULL);
        snprintf(k->hash, sizeof(k->hash), "%016llx",
                 (unsigned long long)fnv(o->data_dir ? o->data_dir : ""));
        /* Is the API there, and may we read our namespace's pods? */
        _cleanup_free_ char *p = path_of(k, "pods", NULL);
        _cleanup_free_ char *q = xasprintf("%s?limit=1", p);
        if (ab_kapi_get(k->api, q, NULL, err) < 0)
                return ab_err_wrap(err, "kubernetes API %s", ab_kapi_server(k->api));
        recover(k);
        *out = steal_pointer(&guard);
        return 0;
}

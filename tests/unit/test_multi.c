/* test_multi - the multiplexing backend (backend/multi.c) over two
 * in-memory backends that record which ops reach them: creates go where the
 * spec (or the default) says, every other op to the backend that has the
 * box (also one made behind the multiplexer's back), an id is one box across
 * backends, an unknown backend is refused naming the choices, list merges
 * sorted, destroy forgets, and ab_backend_find / ab_backend_default answer. */
#include "backend/backend.h"
#include "tap.h"

#define FAKE_MAX 16

typedef struct fake {
        ab_backend base;
        ab_backend_ops ops;
        char *ids[FAKE_MAX];
        int calls; /* ops other than info/list that reached this backend */
        bool freed;
} fake;

static fake *F(ab_backend *b)
{
        return (fake *)b;
}

static int find(fake *f, const char *id)
{
        for (int i = 0; i < FAKE_MAX; i++)
                if (f->ids[i] && strcmp(f->ids[i], id) == 0)
                        return i;
        return -1;
}

static int f_create(ab_backend *b, const ab_box_spec *s, ab_err **err)
{
        fake *f = F(b);
        f->calls++;
        if (find(f, s->id) >= 0)
                return ab_err_set(err, AB_E_CONFLICT, 0, "exists");
        for (int i = 0; i < FAKE_MAX; i++) {
                if (!f->ids[i]) {
                        f->ids[i] = xstrdup(s->id);
                        return 0;
                }
        }
        return ab_err_set(err, AB_E_LIMIT, 0, "full");
}

static int f_op(ab_backend *b, const char *id, ab_err **err)
{
        F(b)->calls++;
        return find(F(b), id) >= 0 ? 0 : ab_err_set(err, AB_E_NOT_FOUND, 0, "no box %s", id);
}

static int f_destroy(ab_backend *b, const char *id, ab_err **err)
{
        fake *f = F(b);
        f->calls++;
        int i = find(f, id);
        if (i < 0)
                return ab_err_set(err, AB_E_NOT_FOUND, 0, "no box %s", id);
        free(f->ids[i]);
        f->ids[i] = NULL;
        return 0;
}

static int f_info(ab_backend *b, const char *id, ab_box_info *out, ab_err **err)
{
        memset(out, 0, sizeof(*out));
        if (find(F(b), id) < 0)
                return ab_err_set(err, AB_E_NOT_FOUND, 0, "no box %s", id);
        out->id = xstrdup(id);
        out->status = AB_BOX_RUNNING;
        out->backend = b->ops->name;
        return 0;
}

static int f_list(ab_backend *b, ab_box_info **out, size_t *n, ab_err **err)
{
        (void)err;
        fake *f = F(b);
        *out = xcalloc(FAKE_MAX, sizeof(**out));
        *n = 0;
        for (int i = 0; i < FAKE_MAX; i++)
                if (f->ids[i])
                        f_info(b, f->ids[i], &(*out)[(*n)++], NULL);
        return 0;
}

static int f_connect(ab_backend *b, const char *id, ab_err **err)
{
        return f_op(b, id, err) < 0 ? -1 : 100;
}

static int f_stats(ab_backend *b, const char *id, ab_box_stats *out, ab_err **err)
{
        memset(out, 0, sizeof(*out));
        return f_op(b, id, err);
}

static int f_connect_unix(ab_backend *b, const char *id, const char *path, ab_err **err)
{
        (void)path;
        return f_connect(b, id, err);
}

static int f_image_config(ab_backend *b, const char *ref, json_t **out, ab_err **err)
{
        F(b)->calls++;
        if (!ref)
                return ab_err_set(err, AB_E_INVALID, 0, "no image given and no default image");
        *out = json_pack("{s:s,s:s,s:[]}", "ref", ref, "id", "sha256:1", "env");
        return 0;
}

static void f_free(ab_backend *b)
{
        fake *f = F(b);
        for (int i = 0; i < FAKE_MAX; i++)
                free(f->ids[i]);
        memset(f->ids, 0, sizeof(f->ids));
        f->freed = true;
}

static void fake_init(fake *f, const char *name)
{
        memset(f, 0, sizeof(*f));
        f->ops = (ab_backend_ops){.name = name,
                                  .create = f_create,
                                  .start = f_op,
                                  .stop = f_op,
                                  .pause = f_op,
                                  .resume = f_op,
                                  .destroy = f_destroy,
                                  .info = f_info,
                                  .list = f_list,
                                  .connect = f_connect,
                                  .stats = f_stats,
                                  .connect_unix = f_connect_unix,
                                  .free = f_free};
        f->base.ops = &f->ops;
}

int main(void)
{
        static fake nat, dock;
        fake_init(&nat, "native");
        fake_init(&dock, "docker");
        /* as the real ones: only docker's engine keeps images; native here
         * lacks connect_unix, as the mock backend does */
        dock.ops.image_config = f_image_config;
        nat.ops.connect_unix = NULL;
        ab_backend *v[2] = {&nat.base, &dock.base};
        ab_backend *m = NULL;
        ab_err *e = NULL;
        tap_ok(ab_multi_open(v, 2, "native", &m, &e) == 0, "open over native and docker");
        TAP_IS_STR(m->ops->name, "native",
                   "its name is the first backend's (the store's provider)");
        TAP_IS_STR(ab_backend_default(m), "native", "creates go to native by default");
        tap_ok(ab_backend_find(m, "docker") == &dock.base, "find docker");
        tap_ok(ab_backend_find(m, "podman") == NULL, "find podman: none");
        tap_ok(ab_backend_find(&nat.base, "native") == &nat.base &&
                   ab_backend_find(&nat.base, "docker") == NULL,
               "find on a single backend: itself by its own name only");

        ab_box_spec s = {.id = "a"};
        tap_ok(m->ops->create(m, &s, &e) == 0 && find(&nat, "a") >= 0 && find(&dock, "a") < 0,
               "a spec without backend: made on native");
        s = (ab_box_spec){.id = "b", .backend = "docker"};
        tap_ok(m->ops->create(m, &s, &e) == 0 && find(&dock, "b") >= 0 && find(&nat, "b") < 0,
               "backend docker: made on docker");
        s = (ab_box_spec){.id = "b", .backend = "native"};
        tap_ok(m->ops->create(m, &s, &e) < 0 && e && e->code == AB_E_CONFLICT &&
                   strstr(e->msg, "docker") && find(&nat, "b") < 0,
               "the same id on the other backend: conflict naming where it is (%s)",
               e ? e->msg : "no error");
        ab_err_free(&e);
        s = (ab_box_spec){.id = "c", .backend = "podman"};
        tap_ok(m->ops->create(m, &s, &e) < 0 && e && e->code == AB_E_INVALID &&
                   strstr(e->msg, "native, docker"),
               "an unknown backend: invalid, naming the choices (%s)", e ? e->msg : "no error");
        ab_err_free(&e);

        char names[64];
        ab_backend_names(m, names, sizeof(names));
        TAP_IS_STR(names, "native, docker", "names lists both");
        ab_backend_names(&nat.base, names, sizeof(names));
        TAP_IS_STR(names, "native", "... a single backend's is its own");
        tap_ok(ab_backend_pick(m, NULL) == &nat.base &&
                   ab_backend_pick(m, "docker") == &dock.base &&
                   ab_backend_pick(m, "podman") == NULL,
               "pick: the default for NULL, else by name");
        tap_ok(ab_backend_pick(m, "docker")->ops->image_config &&
                   !ab_backend_pick(m, NULL)->ops->image_config,
               "... and tells which backend's engine keeps images");
        json_t *ic = NULL;
        tap_ok(m->ops->image_config(m, "alpine", &ic, &e) < 0 && !ic && e &&
                   e->code == AB_E_UNSUPPORTED && strstr(e->msg, "native"),
               "image_config routes to the default (native: unsupported, %s)",
               e ? e->msg : "no error");
        ab_err_free(&e);
        tap_ok(m->ops->connect_unix(m, "a", "/x.sock", &e) < 0 && e &&
                   e->code == AB_E_UNSUPPORTED && strstr(e->msg, "native"),
               "connect_unix on a box of a backend without it: unsupported (%s)",
               e ? e->msg : "no error");
        ab_err_free(&e);
        tap_ok(m->ops->connect_unix(m, "b", "/x.sock", &e) == 100,
               "connect_unix on a box of a backend with it: routed there");

        int before_n = nat.calls, before_d = dock.calls;
        tap_ok(m->ops->stop(m, "b", &e) == 0 && m->ops->start(m, "b", &e) == 0 &&
                   m->ops->pause(m, "b", &e) == 0 && m->ops->resume(m, "b", &e) == 0 &&
                   m->ops->connect(m, "b", &e) == 100,
               "ops on the docker box succeed");
        TAP_IS_INT(dock.calls - before_d, 5, "... and all reached docker");
        TAP_IS_INT(nat.calls - before_n, 0, "... none reached native");

        /* a box the docker backend has that the multiplexer never saw made
         * (a restart: the cache is empty then) */
        dock.ids[FAKE_MAX - 1] = xstrdup("z");
        ab_box_info bi;
        tap_ok(m->ops->info(m, "z", &bi, &e) == 0 && bi.backend && !strcmp(bi.backend, "docker"),
               "info of a box made behind its back: found on docker");
        ab_box_info_clear(&bi);
        before_d = dock.calls;
        tap_ok(m->ops->stop(m, "z", &e) == 0 && dock.calls == before_d + 1, "... and routed there");
        tap_ok(m->ops->info(m, "nope", &bi, &e) < 0 && e && e->code == AB_E_NOT_FOUND,
               "an id no backend has: not found");
        ab_err_free(&e);

        ab_box_info *l = NULL;
        size_t n = 0;
        tap_ok(m->ops->list(m, &l, &n, &e) == 0, "list");
        TAP_IS_INT(n, 3, "... has the boxes of both");
        tap_ok(n == 3 && !strcmp(l[0].id, "a") && !strcmp(l[1].id, "b") && !strcmp(l[2].id, "z") &&
                   !strcmp(l[0].backend, "native") && !strcmp(l[1].backend, "docker"),
               "... sorted by id, each with its backend");
        for (size_t i = 0; i < n; i++)
                ab_box_info_clear(&l[i]);
        free(l);

        tap_ok(m->ops->destroy(m, "b", &e) == 0 && find(&dock, "b") < 0, "destroy the docker box");
        s = (ab_box_spec){.id = "b"};
        tap_ok(m->ops->create(m, &s, &e) == 0 && find(&nat, "b") >= 0,
               "its id is free again: made anew on native");
        before_n = nat.calls;
        tap_ok(m->ops->stop(m, "b", &e) == 0 && nat.calls == before_n + 1,
               "... and ops on it now reach native (the old route was forgotten)");
        tap_ok(m->ops->disk_alloc(m, "b", &(uint64_t){0}, &e) < 0 && e &&
                   e->code == AB_E_UNSUPPORTED,
               "an optional op the owner lacks: unsupported");
        ab_err_free(&e);
        tap_ok(m->ops->fork(m, "b", &(ab_box_spec){.id = "f"}, &e) < 0 && e &&
                   e->code == AB_E_UNSUPPORTED,
               "fork where the owner cannot: unsupported");
        ab_err_free(&e);

        m->ops->free(m);
        tap_ok(nat.freed && dock.freed, "freeing it frees both backends");

        fake_init(&nat, "native");
        fake_init(&dock, "docker");
        v[0] = &nat.base;
        v[1] = &dock.base;
        dock.ops.image_config = f_image_config;
        tap_ok(ab_multi_open(v, 2, "docker", &m, &e) == 0, "open with docker as the default");
        tap_ok(m->ops->image_config(m, "alpine", &ic, &e) == 0 &&
                   !strcmp(json_string_value(json_object_get(ic, "ref")), "alpine"),
               "image_config routes to the default (docker)");
        json_decref(ic);
        TAP_IS_STR(ab_backend_default(m), "docker", "... creates go to docker");
        TAP_IS_STR(m->ops->name, "native", "... and its name is still native");
        s = (ab_box_spec){.id = "d"};
        tap_ok(m->ops->create(m, &s, &e) == 0 && find(&dock, "d") >= 0,
               "a spec without backend: docker");
        m->ops->free(m);

        fake_init(&nat, "native");
        fake_init(&dock, "docker");
        v[0] = &nat.base;
        v[1] = &dock.base;
        tap_ok(ab_multi_open(v, 2, "lxc", &m, &e) < 0 && e && e->code == AB_E_INVALID,
               "an unknown default: invalid");
        ab_err_free(&e);
        tap_ok(nat.freed && dock.freed, "... and the backends are freed");
        return tap_done();
}

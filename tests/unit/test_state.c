/* Unit tests: a box's records (config.json, state.json) round-trip, and
 * missing or corrupt files give clear errors, never a crash. */
#include "native/state.h"
#include "tap.h"

#include <fcntl.h>
#include <sys/stat.h>

static void put(int dfd, const char *name, const char *text)
{
        int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        tap_ok(fd >= 0 && ab_write_all(fd, text, strlen(text)) == 0, "write %s", name);
        if (fd >= 0)
                close(fd);
}

int main(void)
{
        char dir[] = "/tmp/ab-state-XXXXXX";
        tap_ok(mkdtemp(dir) != NULL, "mkdtemp");
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ab_err *e = NULL;

        ab_box_config c = {.uid_base = 1048576 + 3 * 65536, .created_at = 1795259045};
        snprintf(c.id, sizeof(c.id), "box-1");
        ab_limits_default(&c.limits);
        c.limits.cpus = 1.5;
        c.limits.memory_mib = 256;
        c.limits.disk_mib = 64;
        c.rootfs = "/srv/rootfs";
        TAP_IS_INT(ab_box_config_write(dfd, &c, &e), 0, "config written");
        ab_box_config r;
        TAP_IS_INT(ab_box_config_read(dfd, &r, &e), 0, "config read");
        TAP_IS_STR(r.id, "box-1", "id");
        TAP_IS_INT(r.uid_base, c.uid_base, "uid base");
        TAP_IS_INT(r.created_at, c.created_at, "created_at");
        tap_ok(r.limits.cpus == 1.5, "cpus");
        TAP_IS_INT(r.limits.memory_mib, 256, "memory");
        TAP_IS_INT(r.limits.disk_mib, 64, "disk");
        TAP_IS_INT(r.limits.pids, AB_DEFAULT_PIDS, "pids default kept");
        TAP_IS_STR(r.rootfs, "/srv/rootfs", "rootfs");
        ab_box_config_clear(&r);
        struct stat st;
        fstatat(dfd, "config.json", &st, 0);
        TAP_IS_INT(st.st_mode & 0777, 0600, "config.json is private");

        /* A field missing from an older file falls back to the default. */
        put(dfd, "config.json",
            "{\"id\":\"old\",\"uid_base\":1048576,\"limits\":{\"memory_mib\":512}}");
        TAP_IS_INT(ab_box_config_read(dfd, &r, &e), 0, "older config read");
        tap_ok(r.limits.memory_mib == 512 && r.limits.disk_mib == AB_DEFAULT_DISK_MIB &&
                   r.rootfs == NULL,
               "missing fields take defaults");
        ab_box_config_clear(&r);

        put(dfd, "config.json", "{\"id\": \"x\", ");
        tap_ok(ab_box_config_read(dfd, &r, &e) < 0 && e && e->code == AB_E_INTERNAL &&
                   strstr(e->msg, "corrupt"),
               "a truncated config is reported as corrupt");
        ab_err_free(&e);
        put(dfd, "config.json", "[1,2,3]");
        tap_ok(ab_box_config_read(dfd, &r, &e) < 0 && e,
               "a config that is not an object is refused");
        ab_err_free(&e);
        put(dfd, "config.json", "{\"limits\":{}}");
        tap_ok(ab_box_config_read(dfd, &r, &e) < 0 && e && strstr(e->msg, "uid_base"),
               "a config without id or uid_base is refused");
        ab_box_config_clear(&r);
        ab_err_free(&e);
        unlinkat(dfd, "config.json", 0);
        tap_ok(ab_box_config_read(dfd, &r, &e) < 0 && e && e->code == AB_E_NOT_FOUND,
               "a missing config is not_found (a box still being created)");
        ab_err_free(&e);

        ab_box_state s = {.init_pid = 4242, .init_start = 123456789, .started_at = 1795259046};
        TAP_IS_INT(ab_state_write(dfd, &s, &e), 0, "state written");
        ab_box_state t;
        TAP_IS_INT(ab_state_read(dfd, &t, &e), 0, "state read");
        tap_ok(t.init_pid == 4242 && t.init_start == 123456789 && t.started_at == 1795259046 &&
                   !t.error,
               "state round-trips");
        ab_state_clear(&t);
        ab_box_state es = {.error = "mount failed"};
        TAP_IS_INT(ab_state_write(dfd, &es, &e), 0, "error state written");
        TAP_IS_INT(ab_state_read(dfd, &t, &e), 0, "error state read");
        TAP_IS_STR(t.error, "mount failed", "error kept");
        ab_state_clear(&t);
        TAP_IS_INT(ab_state_remove(dfd), 0, "state removed");
        TAP_IS_INT(ab_state_read(dfd, &t, &e), 1, "no state file = stopped");
        TAP_IS_INT(ab_state_remove(dfd), 0, "removing twice is fine");
        /* What a host crash can leave of a state.json written without fsync. */
        put(dfd, "state.json", "");
        TAP_IS_INT(ab_state_read(dfd, &t, &e), 1, "an empty state file = stopped");
        put(dfd, "state.json", "garbage");
        tap_ok(ab_state_read(dfd, &t, &e) < 0 && e, "corrupt state is an error");
        ab_err_free(&e);

        unlinkat(dfd, "state.json", 0);
        close(dfd);
        rmdir(dir);
        return tap_done();
}

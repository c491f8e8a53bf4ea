/* stats.c - STATS: the usage of init's own cgroup, as init sees it.
 *
 * Where the host cannot read a box's cgroup (a Kubernetes pod on another
 * machine), the backend asks init. Init finds its cgroup through
 * /proc/self/cgroup and the cgroup mounts of /proc/self/mountinfo (v2, or
 * the v1 memory, pids and cpuacct hierarchies; a container's own cgroup is
 * usually what is mounted at /sys/fs/cgroup, with or without a cgroup
 * namespace) and answers OK{MEMORY, MEMORY_MAX, PIDS, CPU_NS, OOM_KILLS}; a
 * counter it cannot read is left out. ERROR unavailable when not even the
 * memory in use can be read. Read-only; runs in the session process. */
#include "init/init_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A v1 limit at or over this is "no limit" (the kernel's page-rounded
 * LONG_MAX). */
#define V1_NO_LIMIT (1ULL << 62)

/* The first number of file dir/name, or the number after "key " on one of
 * its lines. "max" reads as UINT64_MAX. */
static bool cg_read(const char *dir, const char *name, const char *key, uint64_t *out)
{
        _cleanup_free_ char *p = xasprintf("%s/%s", dir, name);
        FILE *f = fopen(p, "re");
        if (!f)
                return false;
        char line[256];
        bool found = false;
        size_t kl = key ? strlen(key) : 0;
        while (!found && fgets(line, sizeof(line), f)) {
                const char *v = line;
                if (key) {
                        if (strncmp(line, key, kl) != 0 || line[kl] != ' ')
                                continue;
                        v += kl + 1;
                }
                if (strncmp(v, "max", 3) == 0) {
                        *out = UINT64_MAX;
                        found = true;
                        break;
                }
                char *end;
                errno = 0;
                unsigned long long x = strtoull(v, &end, 10);
                if (errno || end == v)
                        break;
                *out = x;
                found = true;
        }
        fclose(f);
        return found;
}

/* The folder of init's cgroup in the hierarchy of ctrl (NULL: v2): the
 * mount of that hierarchy (fstype cgroup2, or cgroup with ctrl among its
 * options) plus the part of init's path below the mount's root. */
static char *cg_folder(const char *ctrl)
{
        _cleanup_free_ char *self = ab_proc_cgroup_path("/proc/self/cgroup", ctrl, NULL);
        if (!self)
                return NULL;
        FILE *f = fopen("/proc/self/mountinfo", "re");
        if (!f)
                return NULL;
        char line[4096];
        char *out = NULL;
        while (!out && fgets(line, sizeof(line), f)) {
                line[strcspn(line, "\n")] = '\0';
                /* id parent maj:min root mountpoint opts [optional...] - fstype source superopts */
                char *sep = strstr(line, " - ");
                if (!sep)
                        continue;
                *sep = '\0';
                char *save = NULL, *root = NULL, *mnt = NULL;
                char *t = strtok_r(line, " ", &save);
                for (int i = 0; t && i < 5; i++, t = strtok_r(NULL, " ", &save))
                        if (i == 3)
                                root = t;
                        else if (i == 4)
                                mnt = t;
                char *save2 = NULL;
                char *fstype = strtok_r(sep + 3, " ", &save2);
                (void)strtok_r(NULL, " ", &save2);
                char *super = strtok_r(NULL, " ", &save2);
                if (!root || !mnt || !fstype)
                        continue;
                bool match = ctrl
                                 ? strcmp(fstype, "cgroup") == 0 && super && ab_csv_has(super, ctrl)
                                 : strcmp(fstype, "cgroup2") == 0;
                if (!match)
                        continue;
                size_t rl = strcmp(root, "/") == 0 ? 0 : strlen(root);
                const char *below = "";
                if (strncmp(self, root, rl) == 0 && (self[rl] == '/' || self[rl] == '\0'))
                        below = self + rl;
                out = xasprintf("%s%s", mnt, strcmp(below, "/") == 0 ? "" : below);
        }
        fclose(f);
        return out;
}

void init_stats(init_conn *c, const abp_frame *f)
{
        size_t off = 0;
        abp_field fl;
        int r;
        while ((r = abp_field_next(f, &off, &fl)) == 1)
                ;
        if (r < 0) {
                init_send_error(c, "invalid_argument", "malformed STATS");
                return;
        }
        abp_stats s = {0};
        _cleanup_free_ char *mem = cg_folder("memory");
        if (mem) { /* v1 */
                s.has_memory = cg_read(mem, "memory.usage_in_bytes", NULL, &s.memory);
                s.has_memory_max = cg_read(mem, "memory.limit_in_bytes", NULL, &s.memory_max) &&
                                   s.memory_max < V1_NO_LIMIT;
                s.has_oom_kills = cg_read(mem, "memory.oom_control", "oom_kill", &s.oom_kills);
                _cleanup_free_ char *pids = cg_folder("pids");
                _cleanup_free_ char *cpu = cg_folder("cpuacct");
                s.has_pids = pids && cg_read(pids, "pids.current", NULL, &s.pids);
                s.has_cpu_ns = cpu && cg_read(cpu, "cpuacct.usage", NULL, &s.cpu_ns);
        } else {
                _cleanup_free_ char *v2 = cg_folder(NULL);
                if (v2) {
                        s.has_memory = cg_read(v2, "memory.current", NULL, &s.memory);
                        s.has_memory_max = cg_read(v2, "memory.max", NULL, &s.memory_max) &&
                                           s.memory_max != UINT64_MAX;
                        s.has_oom_kills = cg_read(v2, "memory.events", "oom_kill", &s.oom_kills);
                        s.has_pids = cg_read(v2, "pids.current", NULL, &s.pids);
                        uint64_t us = 0;
                        s.has_cpu_ns = cg_read(v2, "cpu.stat", "usage_usec", &us);
                        s.cpu_ns = us * 1000;
                }
        }
        if (!s.has_memory) {
                init_send_error(c, "unavailable", "init cannot read its cgroup's memory usage");
                return;
        }
        abp_buf b = {0};
        abp_frame_begin(&b, ABP_OK);
        abp_put_u64(&b, ABP_F_MEMORY, s.memory);
        if (s.has_memory_max)
                abp_put_u64(&b, ABP_F_MEMORY_MAX, s.memory_max);
        if (s.has_pids)
                abp_put_u64(&b, ABP_F_PIDS, s.pids);
        if (s.has_cpu_ns)
                abp_put_u64(&b, ABP_F_CPU_NS, s.cpu_ns);
        if (s.has_oom_kills)
                abp_put_u64(&b, ABP_F_OOM_KILLS, s.oom_kills);
        if (abp_frame_end(&b) == 0)
                (void)!init_send(c, &b);
        abp_buf_free(&b);
}

/* agentbox - command line. Docker-like verbs acting directly on this machine's
 * boxes (native backend); the server (`agentbox serve`) uses the same library. */
#include "cli/cli.h"
#include "tools/tools.h"
#include "base/log.h"
#include "base/id.h"

#include <getopt.h>
#include <jansson.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

static const char *usage_text =
    "agentbox - isolated, persistent Linux boxes for AI agents\n"
    "\n"
    "Usage: agentbox [--data DIR] COMMAND [ARGS...]\n"
    "\n"
    "Commands:\n"
    "  serve [--listen HOST:PORT] [--config FILE]\n"
    "                                 run the HTTP service (docs/api.md); see serve --help\n"
    "  mcp [--config FILE]            serve the Model Context Protocol on stdin/stdout\n"
    "  create [--id ID] [LIMITS...]   create and start a box; prints its id\n"
    "  fork ID [--id NEW]             a new box with a copy of box ID's files (its whole\n"
    "                                 disk), its image or base and limits; prints its id\n"
    "  exec [OPTIONS] ID -- CMD [ARG...]\n"
    "                                 run a command in the box, stream its output, exit\n"
    "                                 with its exit code: one word CMD is a shell command\n"
    "                                 line (bash -lc); two or more run as a program and\n"
    "                                 its arguments with no shell\n"
    "  start ID...                    start stopped boxes (files are kept); resume paused\n"
    "                                 ones\n"
    "  stop ID...                     stop boxes: end every process, keep the disk\n"
    "  pause ID...                    pause boxes: freeze every process (kept with its\n"
    "                                 memory, no CPU); exec, cp and tool resume a box\n"
    "  resume ID...                   resume paused boxes: their processes go on\n"
    "  rm ID...                       stop and delete boxes with all their files\n"
    "  ls [--json]                    list boxes with their status (creating, running,\n"
    "                                 paused, stopped, error)\n"
    "  inspect ID                     show a box as JSON (state, limits, usage)\n"
    "  attach ID TID                  attach to terminal TID of the box (made through the\n"
    "                                 API); Ctrl-P Ctrl-Q detaches\n"
    "  cp SRC DST                     copy files or directories in or out of a box;\n"
    "                                 one side is ID:PATH (relative to /workspace)\n"
    "  tool ID NAME [JSON-ARGS]       run an agent tool (bash, ls, glob, grep, read_file,\n"
    "                                 write_file, str_replace, sandbox_shell; docs/tools.md);\n"
    "                                 args as a JSON object, or `-` to read them from stdin;\n"
    "                                 exits 1 when the tool reports an error\n"
    "  image pull|ls|rm|import|gc     the image store (`agentbox image --help`)\n"
    "  volume create NAME [--size MIB] | ls [--json] | rm NAME\n"
    "                                 named volumes: disks boxes share and that outlive them\n"
    "  cleanup                        remove what a killed server left for the data\n"
    "                                 folder: its system boxes, the skills disk mount\n"
    "                                 (`agentbox cleanup --help`)\n"
    "  nodes [--json]                 the nodes of a fleet sharing a PostgreSQL store\n"
    "                                 (docs/fleet.md; `agentbox nodes --help`)\n"
    "  move ID --node N               move a stopped box to another fleet node\n"
    "                                 (a server does it; `agentbox move --help`)\n"
    "  version                        print the version\n"
    "\n"
    "Limits for create (defaults in brackets):\n"
    "  --cpus N [1]  --memory SIZE [1G]  --pids N [512]  --disk SIZE [4G]\n"
    "  --timeout DURATION [600s] (per exec)  --output-cap SIZE [1M] (per stream)\n"
    "  --rootfs DIR  use DIR as the read-only base instead of the curated host base\n"
    "  --image REF   make the box from an image of the store (pulled when missing;\n"
    "                `agentbox image --help`)\n"
    "  --volume NAME:PATH[:ro]  mount volume NAME at PATH in the box (repeatable)\n"
    "\n"
    "Options for exec:\n"
    "  --timeout DURATION       kill the command's process tree after this (default: the\n"
    "                           box's timeout)\n"
    "  -e, --env K=V            set an environment variable (repeatable)\n"
    "  -w, --cwd DIR            working directory inside the box (default /workspace)\n"
    "  -i, --stdin              pass this process's standard input to the command\n"
    "  -t, --tty                run it on a terminal in the box; -it: interactive, as in\n"
    "                           docker exec -it\n"
    "\n"
    "Global options:\n"
    "  --data DIR   data folder (env AGENTBOX_DATA, default ./data)\n"
    "  -h, --help   this help; `agentbox COMMAND --help` for one command\n"
    "\n"
    "Exit codes: 0 success; 2 bad usage; 125 agentbox failed (the message says why);\n"
    "exec returns the command's own exit code (124 when it timed out).\n"
    "Sizes take K, M, G, T suffixes (1024-based); durations ms, s, m, h.\n"
    "Needs root: boxes are Linux namespaces, cgroups and loop-mounted disks.\n";

int cli_wake(ab_backend *b, const char *id, ab_err **err)
{
        ab_box_info i;
        if (b->ops->info(b, id, &i, NULL) < 0)
                return 0;
        ab_box_status st = i.status;
        ab_box_info_clear(&i);
        return st == AB_BOX_PAUSED ? b->ops->resume(b, id, err) : 0;
}

/* create --image: the image (found, else pulled) held for the box before
 * the backend makes it, released again if it could not. */
static int create_from_image(ab_backend *b, const char *data, ab_box_spec *spec, const char *ref,
                             ab_err **err)
{
        ab_image_store *s = NULL;
        if (cli_images_open(NULL, data, &s, err) < 0)
                return -1;
        ab_image img = {0};
        ab_err *e = NULL;
        int r = ab_image_get(s, ref, &img, &e);
        if (r < 0 && e->code == AB_E_NOT_FOUND) {
                ab_err_free(&e);
                fprintf(stderr, "pulling %s\n", ref);
                r = ab_image_pull(s, ref, NULL, NULL, &img, err);
        } else if (r < 0) {
                *err = e;
        }
        if (r == 0)
                r = ab_image_hold(s, spec->id, img.id, err);
        if (r == 0) {
                spec->layers = (const char *const *)img.layers;
                spec->image = img.id;
                r = b->ops->create(b, spec, err);
                if (r < 0 && (*err)->code != AB_E_CONFLICT)
                        ab_image_release(s, spec->id, NULL);
        }
        ab_image_clear(&img);
        ab_image_store_free(s);
        spec->layers = NULL;
        spec->image = NULL;
        return r;
}

/* --volume NAME:PATH[:ro] into *m (pointing into *copy, which the caller frees). */
static int parse_volume_arg(const char *arg, ab_box_mount *m, char **copy)
{
        char *s = xstrdup(arg);
        char *path = strchr(s, ':');
        char *ro = path ? strchr(path + 1, ':') : NULL;
        if (!path || (ro && strcmp(ro, ":ro"))) {
                free(s);
                return -1;
        }
        *path++ = '\0';
        if (ro)
                *ro = '\0';
        *m = (ab_box_mount){.kind = AB_MOUNT_VOLUME, .source = s, .path = path, .read_only = !!ro};
        *copy = s;
        return 0;
}

static void free_volume_args(char **v, size_t n)
{
        for (size_t i = 0; i < n; i++)
                free(v[i]);
}

static int cmd_create(ab_backend *b, const char *data, int argc, char **argv)
{
        static const struct option opts[] = {
            {"id", required_argument, NULL, 'n'},
            {"cpus", required_argument, NULL, 'c'},
            {"memory", required_argument, NULL, 'm'},
            {"pids", required_argument, NULL, 'p'},
            {"disk", required_argument, NULL, 'd'},
            {"timeout", required_argument, NULL, 't'},
            {"output-cap", required_argument, NULL, 'o'},
            {"rootfs", required_argument, NULL, 'r'},
            {"image", required_argument, NULL, 'i'},
            {"volume", required_argument, NULL, 'V'},
            {"backend", required_argument, NULL, 'B'},
            {"help", no_argument, NULL, 'h'},
            {0},
        };
        ab_box_spec spec = {0};
        ab_box_mount vols[AB_MOUNTS_MAX];
        char *vol_args[AB_MOUNTS_MAX];
        size_t nv = 0;
        const char *image = NULL;
        ab_limits_default(&spec.limits);
        char rid[17];
        _cleanup_err_ ab_err *e = NULL;
        int c;
        optind = 1;
        while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
                uint64_t v;
                char *end;
                switch (c) {
                case 'n':
                        spec.id = optarg;
                        break;
                case 'c':
                        spec.limits.cpus = strtod(optarg, &end);
                        if (*end || end == optarg)
                                return cli_usage_error("--cpus wants a number, got '%s'", optarg);
                        break;
                case 'm':
                        if (ab_parse_mib(optarg, &spec.limits.memory_mib, &e) < 0)
                                return cli_bad_option(&e, "--memory");
                        break;
                case 'd':
                        if (ab_parse_mib(optarg, &spec.limits.disk_mib, &e) < 0)
                                return cli_bad_option(&e, "--disk");
                        break;
                case 'p':
                        spec.limits.pids = strtoull(optarg, &end, 10);
                        if (*end || end == optarg)
                                return cli_usage_error("--pids wants a number, got '%s'", optarg);
                        break;
                case 't':
                        if (ab_parse_duration_ms(optarg, &v, &e) < 0)
                                return cli_bad_option(&e, "--timeout");
                        spec.limits.timeout_s = (uint32_t)((v + 999) / 1000);
                        break;
                case 'o':
                        if (ab_parse_bytes(optarg, &spec.limits.output_cap, &e) < 0)
                                return cli_bad_option(&e, "--output-cap");
                        break;
                case 'r':
                        spec.rootfs = optarg;
                        break;
                case 'i':
                        image = optarg;
                        break;
                case 'B':
                        spec.backend = optarg;
                        break;
                case 'V':
                        if (nv == AB_MOUNTS_MAX)
                                return cli_usage_error("%s: too many --volume", "create");
                        if (parse_volume_arg(optarg, &vols[nv], &vol_args[nv]) < 0) {
                                free_volume_args(vol_args, nv);
                                return cli_usage_error("--volume wants NAME:PATH[:ro], got '%s'",
                                                       optarg);
                        }
                        nv++;
                        break;
                case 'h':
                        fputs("Usage: agentbox create [--id ID] [--cpus N] [--memory SIZE] "
                              "[--pids N] [--disk SIZE] [--timeout DURATION] [--output-cap SIZE] "
                              "[--rootfs DIR | --image REF] [--volume NAME:PATH[:ro]]... "
                              "[--backend native|docker]\n"
                              "Creates a box and starts it; prints its id. --backend docker "
                              "needs a Docker engine (AGENTBOX_DOCKER_HOST or $DOCKER_HOST) and "
                              "takes --image as a Docker image reference.\n",
                              stdout);
                        return 0;
                default:
                        return EXIT_USAGE;
                }
        }
        if (optind < argc)
                return cli_usage_error("create takes no positional arguments (got '%s'); use --id",
                                       argv[optind]);
        if (!spec.id) {
                ab_id_random(rid);
                spec.id = rid;
        }
        if (image && spec.rootfs) {
                free_volume_args(vol_args, nv);
                return cli_usage_error("%s: give --rootfs or --image, not both", "create");
        }
        spec.mounts = vols;
        spec.n_mounts = nv;
        ab_backend *target = ab_backend_pick(b, spec.backend);
        bool docker = target && target->ops->image_config; /* the engine pulls images */
        if (spec.backend && !ab_backend_find(b, spec.backend)) {
                free_volume_args(vol_args, nv);
                ab_err_set(&e, AB_E_INVALID, 0,
                           "--backend %s: not available (docker needs AGENTBOX_DOCKER_HOST or "
                           "AGENTBOX_BACKEND=docker)",
                           spec.backend);
                return cli_fail(&e);
        }
        if (docker)
                spec.image = image;
        int r = image && !docker ? create_from_image(b, data, &spec, image, &e)
                                 : b->ops->create(b, &spec, &e);
        free_volume_args(vol_args, nv);
        if (r < 0)
                return cli_fail(&e);
        printf("%s\n", spec.id);
        return 0;
}

static void volume_print(const ab_volume_info *v, bool json)
{
        if (json) {
                json_t *boxes = json_array();
                for (char **p = v->boxes; p && *p; p++)
                        json_array_append_new(boxes, json_string(*p));
                json_t *j =
                    json_pack("{s:s,s:I,s:I,s:I,s:o}", "name", v->name, "size_mib",
                              (json_int_t)v->size_mib, "used_bytes", (json_int_t)v->used_bytes,
                              "created_at", (json_int_t)v->created_at, "boxes", boxes);
                char *txt = json_dumps(j, JSON_COMPACT);
                printf("%s\n", txt);
                free(txt);
                json_decref(j);
                return;
        }
        printf("%-24s %8llu MiB %10llu used  boxes:", v->name, (unsigned long long)v->size_mib,
               (unsigned long long)v->used_bytes);
        for (char **p = v->boxes; p && *p; p++)
                printf(" %s", *p);
        printf("\n");
}

/* agentbox volume create NAME [--size MIB] | ls [--json] | rm NAME */
static int cmd_volume(ab_backend *b, int argc, char **argv)
{
        static const char usage[] =
            "Usage: agentbox volume create NAME [--size MIB] | ls [--json] | "
            "rm NAME...\nNamed volumes: disks boxes share (create --volume "
            "NAME:PATH[:ro]) and that outlive them.\n";
        if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
                fputs(usage, argc < 2 ? stderr : stdout);
                return argc < 2 ? EXIT_USAGE : 0;
        }
        _cleanup_err_ ab_err *e = NULL;
        if (!b->vol) {
                ab_err_set(&e, AB_E_UNSUPPORTED, 0, "this backend has no volumes");
                return cli_fail(&e);
        }
        const char *verb = argv[1];
        if (!strcmp(verb, "create")) {
                uint64_t size = AB_DEFAULT_DISK_MIB;
                const char *name = NULL;
                for (int i = 2; i < argc; i++) {
                        if (!strcmp(argv[i], "--size") && i + 1 < argc) {
                                if (ab_parse_mib(argv[++i], &size, &e) < 0)
                                        return cli_bad_option(&e, "--size");
                        } else if (!name && argv[i][0] != '-') {
                                name = argv[i];
                        } else {
                                return cli_usage_error("volume create: unexpected '%s'", argv[i]);
                        }
                }
                if (!name)
                        return cli_usage_error("%s: give a NAME", "volume create");
                if (b->vol->create(b, name, size, NULL, &e) < 0)
                        return cli_fail(&e);
                printf("%s\n", name);
                return 0;
        }
        if (!strcmp(verb, "ls")) {
                bool json = argc > 2 && !strcmp(argv[2], "--json");
                ab_volume_info *v = NULL;
                size_t n = 0;
                if (b->vol->list(b, &v, &n, &e) < 0)
                        return cli_fail(&e);
                for (size_t i = 0; i < n; i++) {
                        volume_print(&v[i], json);
                        ab_volume_info_clear(&v[i]);
                }
                free(v);
                return 0;
        }
        if (!strcmp(verb, "rm")) {
                if (argc < 3)
                        return cli_usage_error("%s: give a NAME", "volume rm");
                int rc = 0;
                for (int i = 2; i < argc; i++) {
                        if (b->vol->remove(b, argv[i], &e) < 0) {
                                rc = cli_fail(&e);
                                continue;
                        }
                        printf("%s\n", argv[i]);
                }
                return rc;
        }
        return cli_usage_error("volume: unknown verb '%s' (create, ls, rm)", verb);
}

/* fork: the backend's copy of a box, holding the source's image for the
 * new box as create --image does. */
static int cmd_fork(ab_backend *b, const char *data, int argc, char **argv)
{
        static const struct option opts[] = {
            {"id", required_argument, NULL, 'n'}, {"help", no_argument, NULL, 'h'}, {0}};
        const char *nid = NULL;
        int c;
        optind = 1;
        while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
                if (c == 'n') {
                        nid = optarg;
                } else if (c == 'h') {
                        puts("Usage: agentbox fork ID [--id NEW]\nMakes a new box with a copy of "
                             "box ID's files (the box goes on running); prints the new id.");
                        return 0;
                } else {
                        return EXIT_USAGE;
                }
        }
        if (optind != argc - 1)
                return cli_usage_error("fork needs exactly one box id%s", "");
        const char *src = argv[optind];
        _cleanup_err_ ab_err *e = NULL;
        if (!b->ops->fork) {
                ab_err_set(&e, AB_E_UNSUPPORTED, 0, "the %s backend cannot fork", b->ops->name);
                return cli_fail(&e);
        }
        ab_box_info i;
        if (b->ops->info(b, src, &i, &e) < 0)
                return cli_fail(&e);
        char rid[17];
        if (!nid)
                ab_id_random(rid);
        ab_box_spec spec = {.id = nid ? nid : rid, .limits = i.limits};
        ab_image_store *images = NULL;
        int r = 0;
        if (i.image && (r = cli_images_open(NULL, data, &images, &e)) == 0)
                r = ab_image_hold(images, spec.id, i.image, &e);
        if (r == 0 && b->ops->fork(b, src, &spec, &e) < 0) {
                if (images && e->code != AB_E_CONFLICT)
                        ab_image_release(images, spec.id, NULL);
                r = -1;
        }
        if (images)
                ab_image_store_free(images);
        ab_box_info_clear(&i);
        if (r < 0)
                return cli_fail(&e);
        printf("%s\n", spec.id);
        return 0;
}

typedef int (*box_op)(ab_backend *, const char *, ab_err **);

static int cmd_each(ab_backend *b, int argc, char **argv, box_op op, const char *verb)
{
        if (argc < 2)
                return cli_usage_error("%s needs at least one box id", verb);
        if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
                printf("Usage: agentbox %s ID...\n", verb);
                return 0;
        }
        int rc = 0;
        for (int i = 1; i < argc; i++) {
                _cleanup_err_ ab_err *e = NULL;
                if (op(b, argv[i], &e) < 0) {
                        cli_error(e);
                        rc = EXIT_AGENTBOX;
                } else if (strcmp(verb, "start") != 0 || argc > 2) {
                        printf("%s\n", argv[i]);
                }
        }
        return rc;
}

/* rm: the box and its record in the store (which a CLI exec may have made). */
static int cmd_rm(const char *data, int argc, char **argv)
{
        if (argc < 2)
                return cli_usage_error("%s needs at least one box id", "rm");
        _cleanup_err_ ab_err *e = NULL;
        cli_local l;
        if (cli_local_open(&l, data, NULL, &e) < 0)
                return cli_fail(&e);
        /* Boxes made from an image hold it: their holds end with them. */
        ab_image_store *images = NULL;
        _cleanup_free_ char *idir = xasprintf("%s/images", data && *data ? data : "./data");
        if (access(idir, F_OK) == 0 && cli_images_open(NULL, data, &images, NULL) < 0)
                images = NULL;
        bool gc = false;
        int rc = 0;
        for (int i = 1; i < argc; i++) {
                if (l.backend->ops->destroy(l.backend, argv[i], &e) < 0) {
                        cli_error(e);
                        ab_err_free(&e);
                        rc = EXIT_AGENTBOX;
                        continue;
                }
                if (l.store)
                        ab_store_box_delete(l.store,
                                            l.backend->ops->name ? l.backend->ops->name : "native",
                                            argv[i], NULL);
                if (images) {
                        ab_image_release(images, argv[i], NULL);
                        gc = true;
                }
                printf("%s\n", argv[i]);
        }
        if (gc)
                ab_image_gc(images, NULL, NULL);
        if (images)
                ab_image_store_free(images);
        cli_local_close(&l);
        return rc;
}

static json_t *limits_json(const ab_limits *l)
{
        return json_pack("{s:f,s:I,s:I,s:I,s:I,s:I}", "cpus", l->cpus, "memory_mib",
                         (json_int_t)l->memory_mib, "pids", (json_int_t)l->pids, "disk_mib",
                         (json_int_t)l->disk_mib, "timeout_s", (json_int_t)l->timeout_s,
                         "output_cap", (json_int_t)l->output_cap);
}

static json_t *info_json(const ab_box_info *i)
{
        json_t *j =
            json_pack("{s:s,s:s,s:I,s:o}", "id", i->id, "status", ab_box_status_name(i->status),
                      "created_at", (json_int_t)i->created_at, "limits", limits_json(&i->limits));
        if (i->status == AB_BOX_RUNNING || i->status == AB_BOX_PAUSED) {
                json_object_set_new(j, "init_pid", json_integer(i->init_pid));
                json_object_set_new(j, "started_at", json_integer(i->started_at));
        }
        json_object_set_new(j, "rootfs", i->rootfs ? json_string(i->rootfs) : json_null());
        json_object_set_new(j, "image", i->image ? json_string(i->image) : json_null());
        if (i->error)
                json_object_set_new(j, "error", json_string(i->error));
        return j;
}

static int cmd_ls(ab_backend *b, int argc, char **argv)
{
        bool as_json = argc > 1 && !strcmp(argv[1], "--json");
        if (argc > 1 && !as_json) {
                if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
                        puts("Usage: agentbox ls [--json]");
                        return 0;
                }
                return cli_usage_error("unknown option for ls: %s", argv[1]);
        }
        _cleanup_err_ ab_err *e = NULL;
        ab_box_info *v;
        size_t n;
        if (b->ops->list(b, &v, &n, &e) < 0)
                return cli_fail(&e);
        json_t *arr = json_array();
        if (!as_json)
                printf("%-24s %-9s %5s %8s %8s %6s  %s\n", "ID", "STATUS", "CPUS", "MEMORY", "DISK",
                       "PIDS", "CREATED");
        for (size_t i = 0; i < n; i++) {
                if (as_json) {
                        json_array_append_new(arr, info_json(&v[i]));
                } else {
                        char when[32] = "-";
                        time_t t = (time_t)v[i].created_at;
                        struct tm tm;
                        if (t && localtime_r(&t, &tm))
                                strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm);
                        printf("%-24s %-9s %5g %7lluM %7lluM %6llu  %s\n", v[i].id,
                               ab_box_status_name(v[i].status), v[i].limits.cpus,
                               (unsigned long long)v[i].limits.memory_mib,
                               (unsigned long long)v[i].limits.disk_mib,
                               (unsigned long long)v[i].limits.pids, when);
                }
                ab_box_info_clear(&v[i]);
        }
        free(v);
        if (as_json) {
                char *s = json_dumps(arr, JSON_INDENT(2));
                puts(s);
                free(s);
        }
        json_decref(arr);
        return 0;
}

static int cmd_inspect(ab_backend *b, int argc, char **argv)
{
        if (argc != 2)
                return cli_usage_error("inspect needs exactly one box id%s", NULL);
        _cleanup_err_ ab_err *e = NULL;
        ab_box_info i;
        if (b->ops->info(b, argv[1], &i, &e) < 0)
                return cli_fail(&e);
        json_t *j = info_json(&i);
        ab_box_stats st;
        if ((i.status == AB_BOX_RUNNING || i.status == AB_BOX_PAUSED) &&
            b->ops->stats(b, argv[1], &st, NULL) == 0) {
                json_object_set_new(j, "usage",
                                    json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "memory_bytes",
                                              (json_int_t)st.memory_bytes, "memory_limit_bytes",
                                              (json_int_t)st.memory_limit, "pids",
                                              (json_int_t)st.pids, "cpu_usage_ns",
                                              (json_int_t)st.cpu_usage_ns, "disk_used_bytes",
                                              (json_int_t)st.disk_used_bytes, "disk_limit_bytes",
                                              (json_int_t)st.disk_limit_bytes, "oom_kills",
                                              (json_int_t)st.oom_kills));
        }
        ab_box_info_clear(&i);
        char *s = json_dumps(j, JSON_INDENT(2));
        puts(s);
        free(s);
        json_decref(j);
        return 0;
}

typedef struct tool_conn {
        cli_local *l;
        ab_use *u;
} tool_conn;

static int tool_connect(void *ud, ab_err **err)
{
        tool_conn *c = ud;
        return ab_manager_use_connect(c->l->mgr, c->u, err);
}

static int tool_list(void *ud, const char *path, int depth, abc_dirent **out, size_t *n,
                     ab_err **err)
{
        tool_conn *c = ud;
        return ab_manager_file_list(c->l->mgr, c->u, path, depth, out, n, err);
}

static int tool_read(void *ud, const char *path, uint64_t length, abc_output_fn out, void *out_ud,
                     ab_err **err)
{
        tool_conn *c = ud;
        return ab_manager_file_read(c->l->mgr, c->u, path, 0, length, out, out_ud, err);
}

static int tool_write(void *ud, const char *path, const void *data, size_t len, uint32_t flags,
                      ab_err **err)
{
        tool_conn *c = ud;
        return ab_manager_file_write(c->l->mgr, c->u, path, data, len, -1, flags, 0, err);
}

static int tool_grep(void *ud, const abc_grep_req *q, abc_match_fn fn, void *fn_ud,
                     abc_grep_res *res, ab_err **err)
{
        tool_conn *c = ud;
        return ab_manager_file_grep(c->l->mgr, c->u, q, fn, fn_ud, res, err);
}

static int tool_exec(void *ud, const abc_exec_req *req, abc_output_fn out, void *out_ud,
                     abc_exec_res *res, ab_err **err)
{
        tool_conn *c = ud;
        return ab_manager_exec(c->l->mgr, c->u, req, out, out_ud, res, err);
}

/* agentbox tool ID NAME [JSON|-]: the same tool code REST and MCP use. */
static int cmd_tool(const char *data, bool help, int argc, char **argv)
{
        if (help || argc < 3 || argc > 4) {
                FILE *f = help ? stdout : stderr;
                fputs("Usage: agentbox tool ID NAME [JSON-ARGS | -]\n"
                      "Runs an agent tool in a running box, e.g.\n"
                      "  agentbox tool demo bash '{\"command\": \"ls -la\"}'\n"
                      "  agentbox tool demo read_file '{\"path\": \"notes.txt\"}'\n"
                      "Prints the tool's output; exits 1 when the tool reports an error.\n",
                      f);
                return help ? 0 : EXIT_USAGE;
        }
        const char *id = argv[1], *name = argv[2];
        json_error_t je;
        json_t *args = argc == 4 && strcmp(argv[3], "-") ? json_loads(argv[3], 0, &je)
                       : argc == 4                       ? json_loadf(stdin, 0, &je)
                                                         : json_object();
        if (!args || !json_is_object(args)) {
                fprintf(stderr, "agentbox: tool arguments must be a JSON object%s%s\n",
                        args ? "" : ": ", args ? "" : je.text);
                json_decref(args);
                return EXIT_USAGE;
        }
        _cleanup_err_ ab_err *e = NULL;
        if (!ab_tool_exists(name)) {
                json_decref(args);
                ab_err_set(&e, AB_E_NOT_FOUND, 0, "unknown tool \"%s\"", name);
                return cli_fail(&e);
        }
        cli_local l;
        ab_use u;
        if (cli_local_open(&l, data, id, &e) < 0 || cli_local_use(&l, id, &u, NULL, &e) < 0) {
                json_decref(args);
                cli_local_close(&l);
                return cli_fail(&e);
        }
        /* Bash and sandbox_shell run through the manager's exec, as over REST and MCP. */
        tool_conn c = {.l = &l, .u = &u};
        ab_tool_box box = {.box_id = u.rec.id,
                           .connect = tool_connect,
                           .exec = tool_exec,
                           .list = tool_list,
                           .read = tool_read,
                           .write = tool_write,
                           .grep = tool_grep,
                           .ud = &c};
        ab_tool_limits lim = {0};
        ab_tool_result res = {0};
        int r = ab_tool_run(&box, &lim, name, args, &res, &e);
        json_decref(args);
        ab_manager_use_end(l.mgr, &u);
        cli_local_close(&l);
        if (r < 0)
                return cli_fail(&e);
        fputs(res.output ? res.output : "", stdout);
        if (res.output && *res.output && res.output[strlen(res.output) - 1] != '\n')
                fputc('\n', stdout);
        int rc = res.is_error ? 1 : 0;
        ab_tool_result_clear(&res);
        return rc;
}

int main(int argc, char **argv)
{
        ab_log_init_from_env();
        const char *data = getenv("AGENTBOX_DATA");
        int i = 1;
        for (; i < argc && argv[i][0] == '-'; i++) {
                if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
                        fputs(usage_text, stdout);
                        return 0;
                } else if (!strcmp(argv[i], "--version")) {
                        printf("agentbox %s\n", AGENTBOX_VERSION);
                        return 0;
                } else if (!strcmp(argv[i], "--data") && i + 1 < argc) {
                        data = argv[++i];
                } else if (!strncmp(argv[i], "--data=", 7)) {
                        data = argv[i] + 7;
                } else {
                        return cli_usage_error("unknown option '%s'", argv[i]);
                }
        }
        if (i >= argc) {
                fputs(usage_text, stderr);
                return EXIT_USAGE;
        }
        const char *cmd = argv[i];
        int sub_argc = argc - i;
        char **sub_argv = argv + i;
        if (!strcmp(cmd, "help")) {
                fputs(usage_text, stdout);
                return 0;
        }
        if (!strcmp(cmd, "serve"))
                return cli_serve(sub_argc, sub_argv, data);
        if (!strcmp(cmd, "mcp"))
                return cli_mcp(sub_argc, sub_argv, data);
        if (!strcmp(cmd, "image"))
                return cli_image(sub_argc, sub_argv, data);
        if (!strcmp(cmd, "cleanup"))
                return cli_cleanup(sub_argc, sub_argv, data);
        if (!strcmp(cmd, "nodes"))
                return cli_nodes(sub_argc, sub_argv, data);
        if (!strcmp(cmd, "move"))
                return cli_move(sub_argc, sub_argv);
        if (!strcmp(cmd, "version")) {
                printf("agentbox %s\n", AGENTBOX_VERSION);
                return 0;
        }
        static const char *const known[] = {"create", "exec",   "start",  "stop",    "pause",
                                            "resume", "rm",     "ls",     "inspect", "cp",
                                            "tool",   "attach", "volume", "fork"};
        bool ok = false;
        for (size_t k = 0; k < AB_ARRAY_LEN(known); k++)
                ok |= !strcmp(cmd, known[k]);
        if (!ok)
                return cli_usage_error("unknown command '%s'", cmd);
        for (int k = 1; k < sub_argc; k++) {
                if (!strcmp(sub_argv[k], "--"))
                        break;
                if (!strcmp(sub_argv[k], "--help") || !strcmp(sub_argv[k], "-h")) {
                        if (!strcmp(cmd, "create"))
                                return cmd_create(NULL, data, sub_argc, sub_argv);
                        if (!strcmp(cmd, "fork"))
                                return cmd_fork(NULL, data, sub_argc, sub_argv);
                        if (!strcmp(cmd, "exec")) {
                                char *help[] = {"exec", "--help", NULL};
                                return cli_exec(2, help, NULL);
                        }
                        if (!strcmp(cmd, "cp"))
                                return cli_cp(NULL, sub_argc, sub_argv);
                        if (!strcmp(cmd, "attach"))
                                return cli_attach(sub_argc, sub_argv, data);
                        if (!strcmp(cmd, "tool"))
                                return cmd_tool(NULL, true, sub_argc, sub_argv);
                        if (!strcmp(cmd, "volume"))
                                break; /* its own usage, below */
                        printf("Usage: agentbox %s%s\n", cmd,
                               !strcmp(cmd, "ls") ? " [--json]" : " ID...");
                        return 0;
                }
        }
        if (!strcmp(cmd, "exec"))
                return cli_exec(sub_argc, sub_argv, data);
        if (!strcmp(cmd, "attach"))
                return cli_attach(sub_argc, sub_argv, data);
        if (!strcmp(cmd, "tool"))
                return cmd_tool(data, false, sub_argc, sub_argv);
        if (!strcmp(cmd, "rm"))
                return cmd_rm(data, sub_argc, sub_argv);
        _cleanup_err_ ab_err *e = NULL;
        _cleanup_backend_ ab_backend *b = NULL;
        if (cli_backend_open_env(data, false, &b, &e) < 0)
                return cli_fail(&e);
        if (!strcmp(cmd, "create"))
                return cmd_create(b, data, sub_argc, sub_argv);
        if (!strcmp(cmd, "fork"))
                return cmd_fork(b, data, sub_argc, sub_argv);
        if (!strcmp(cmd, "start"))
                return cmd_each(b, sub_argc, sub_argv, b->ops->start, "start");
        if (!strcmp(cmd, "stop"))
                return cmd_each(b, sub_argc, sub_argv, b->ops->stop, "stop");
        if (!strcmp(cmd, "pause"))
                return cmd_each(b, sub_argc, sub_argv, b->ops->pause, "pause");
        if (!strcmp(cmd, "resume"))
                return cmd_each(b, sub_argc, sub_argv, b->ops->resume, "resume");
        if (!strcmp(cmd, "ls"))
                return cmd_ls(b, sub_argc, sub_argv);
        if (!strcmp(cmd, "inspect"))
                return cmd_inspect(b, sub_argc, sub_argv);
        if (!strcmp(cmd, "volume"))
                return cmd_volume(b, sub_argc, sub_argv);
        return cli_cp(b, sub_argc, sub_argv);
}

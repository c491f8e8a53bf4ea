/* agentbox image ...: the image store from the command line (image/store.h),
 * and the store's opener shared with `serve`. */
#include "cli/cli.h"
#include "base/log.h"
#include "base/codec.h"

#include <fcntl.h>
#include <getopt.h>
#include <time.h>
#include <unistd.h>

static const char image_usage[] =
    "Usage: agentbox image COMMAND [ARGS]\n"
    "The image store in the data folder (DATA/images): boxes are made from its images\n"
    "with `agentbox create --image REF` or \"image\" at POST /v1/sandboxes.\n"
    "\n"
    "Commands:\n"
    "  pull REF            pull an image from its registry (REF as Docker spells it:\n"
    "                      busybox, me/tool:1, localhost:5000/a/b@sha256:...)\n"
    "  ls [--json]         list the images\n"
    "  rm REF|ID...        remove names (an id removes all of its names); an image\n"
    "                      is deleted once no name and no box uses it\n"
    "  import FILE [--name REF]\n"
    "                      import a `docker save` or OCI image-layout tarball\n"
    "                      (FILE - reads standard input)\n"
    "  gc                  delete images no name or box uses, and unused layers\n"
    "\n"
    "Registries: HTTPS, or plain HTTP for loopback ones and those marked insecure\n"
    "in the config file named by AGENTBOX_CONFIG (registries: [{host, username,\n"
    "password, insecure}]; docs/images.md).\n";

int cli_images_open(const ab_config *cfg, const char *data, ab_image_store **out, ab_err **err)
{
        ab_config own;
        bool loaded = false;
        const char *file = getenv("AGENTBOX_CONFIG");
        if (!cfg && file && *file) {
                ab_config_default(&own);
                if (ab_config_load_file(&own, file, err) < 0) {
                        ab_config_release(&own);
                        return -1;
                }
                cfg = &own;
                loaded = true;
        }
        size_t n = cfg ? cfg->n_registries : 0;
        _cleanup_free_ ab_registry_cred *creds = n ? xcalloc(n, sizeof(*creds)) : NULL;
        _cleanup_free_ const char **insecure = xcalloc(n + 1, sizeof(char *));
        size_t nc = 0, ni = 0;
        for (size_t i = 0; i < n; i++) {
                const ab_config_registry *r = &cfg->registries[i];
                if (r->insecure)
                        insecure[ni++] = r->host;
                if (r->username)
                        creds[nc++] = (ab_registry_cred){r->host, r->username, r->password};
        }
        _cleanup_free_ char *dir = xasprintf("%s/images", data && *data ? data : "./data");
        ab_image_store_opts o = {
            .dir = dir,
            .registry = {.insecure = insecure, .creds = creds, .n_creds = nc},
            .layer = {.max_bytes = cfg ? cfg->image_max_layer : 0},
            .app_registries = cfg ? (const char *const *)cfg->app_registries : NULL,
            .app_loopback = cfg && cfg->app_registries_loopback,
        };
        int r = ab_image_store_open(&o, out, err);
        if (loaded)
                ab_config_release(&own);
        return r;
}

/* Progress on stderr, one line a layer phase (and every 10% of a download
 * when stderr is a terminal). */
typedef struct progress {
        bool tty;
        int last_pct;
} progress;

static void show_progress(void *ud, const char *phase, const char *digest, uint64_t done,
                          uint64_t total)
{
        progress *p = ud;
        char shortd[20] = "";
        if (digest && !strncmp(digest, "sha256:", 7))
                snprintf(shortd, sizeof(shortd), "%.12s", digest + 7);
        if (!strcmp(phase, "download") && total) {
                int pct = (int)(done * 100 / total);
                if (done != total && (!p->tty || pct / 10 == p->last_pct / 10))
                        return;
                p->last_pct = pct;
                fprintf(stderr, "%s: download %d%% (%llu of %llu bytes)\n", shortd, pct,
                        (unsigned long long)done, (unsigned long long)total);
                return;
        }
        if (!strcmp(phase, "download") || (!strcmp(phase, "unpack") && done))
                return;
        if (!strcmp(phase, "resolve") || !strcmp(phase, "done"))
                fprintf(stderr, "%s\n", phase);
        else
                fprintf(stderr, "%s: %s\n", shortd, phase);
}

static void print_image(const ab_image *img)
{
        char when[AB_TIME_LEN];
        ab_time_rfc3339(img->created * 1000, false, when);
        const char *name = img->names && img->names[0] ? img->names[0] : "<none>";
        printf("%-50s %.19s %3zu %10.1f MiB %s\n", name, img->id, img->n_layers,
               (double)img->size / (1024.0 * 1024.0), when);
        for (size_t i = 1; img->names && img->names[i]; i++)
                printf("%-50s %.19s\n", img->names[i], img->id);
}

static int image_pull(ab_image_store *s, int argc, char **argv)
{
        if (argc != 2)
                return cli_usage_error("%s needs one image reference", "image pull");
        _cleanup_err_ ab_err *e = NULL;
        progress p = {.tty = isatty(2)};
        ab_image img = {0};
        if (ab_image_pull(s, argv[1], show_progress, &p, &img, &e) < 0)
                return cli_fail(&e);
        printf("%s\n", img.id);
        ab_image_clear(&img);
        return 0;
}

static int image_ls(ab_image_store *s, int argc, char **argv)
{
        bool as_json = argc == 2 && !strcmp(argv[1], "--json");
        if (argc > 2 || (argc == 2 && !as_json))
                return cli_usage_error("%s takes only --json", "image ls");
        _cleanup_err_ ab_err *e = NULL;
        ab_image *imgs = NULL;
        size_t n = 0;
        if (ab_image_list(s, &imgs, &n, &e) < 0)
                return cli_fail(&e);
        if (as_json) {
                json_t *a = json_array();
                for (size_t i = 0; i < n; i++)
                        json_array_append_new(a, ab_image_json(&imgs[i], NULL));
                char *txt = json_dumps(a, JSON_INDENT(2));
                printf("%s\n", txt);
                free(txt);
                json_decref(a);
        } else {
                printf("%-50s %-19s %3s %14s %s\n", "NAME", "ID", "LAYERS", "SIZE", "CREATED");
                for (size_t i = 0; i < n; i++)
                        print_image(&imgs[i]);
        }
        ab_image_list_free(imgs, n);
        return 0;
}

static int image_rm(ab_image_store *s, int argc, char **argv)
{
        if (argc < 2)
                return cli_usage_error("%s needs at least one image", "image rm");
        int rc = 0;
        for (int i = 1; i < argc; i++) {
                _cleanup_err_ ab_err *e = NULL;
                if (ab_image_remove(s, argv[i], &e) < 0) {
                        cli_error(e);
                        rc = EXIT_AGENTBOX;
                        continue;
                }
                printf("%s\n", argv[i]);
        }
        _cleanup_err_ ab_err *e = NULL;
        if (ab_image_gc(s, NULL, &e) < 0)
                return cli_fail(&e);
        return rc;
}

static int image_import(ab_image_store *s, int argc, char **argv)
{
        static const struct option opts[] = {{"name", required_argument, NULL, 'n'}, {0}};
        const char *name = NULL;
        int c;
        optind = 1;
        while ((c = getopt_long(argc, argv, "+", opts, NULL)) != -1) {
                if (c != 'n')
                        return EXIT_USAGE;
                name = optarg;
        }
        if (optind + 1 != argc)
                return cli_usage_error("%s needs one FILE (- for standard input)", "image import");
        const char *file = argv[optind];
        _cleanup_close_ int fd = strcmp(file, "-") ? open(file, O_RDONLY | O_CLOEXEC) : dup(0);
        _cleanup_err_ ab_err *e = NULL;
        if (fd < 0) {
                ab_err_set(&e, AB_E_NOT_FOUND, errno, "cannot open %s", file);
                return cli_fail(&e);
        }
        progress p = {.tty = isatty(2)};
        ab_image *imgs = NULL;
        size_t n = 0;
        if (ab_image_import(s, fd, name, show_progress, &p, &imgs, &n, &e) < 0)
                return cli_fail(&e);
        for (size_t i = 0; i < n; i++)
                printf("%s %s\n", imgs[i].id,
                       imgs[i].names && imgs[i].names[0] ? imgs[i].names[0] : "<none>");
        ab_image_list_free(imgs, n);
        return 0;
}

static int image_gc(ab_image_store *s)
{
        _cleanup_err_ ab_err *e = NULL;
        uint64_t freed = 0;
        if (ab_image_gc(s, &freed, &e) < 0)
                return cli_fail(&e);
        printf("freed %.1f MiB\n", (double)freed / (1024.0 * 1024.0));
        return 0;
}

int cli_image(int argc, char **argv, const char *data)
{
        if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
                fputs(image_usage, argc < 2 ? stderr : stdout);
                return argc < 2 ? EXIT_USAGE : 0;
        }
        const char *verb = argv[1];
        static const char *const verbs[] = {"pull", "ls", "rm", "import", "gc"};
        bool known = false;
        for (size_t i = 0; i < AB_ARRAY_LEN(verbs); i++)
                known |= !strcmp(verb, verbs[i]);
        if (!known)
                return cli_usage_error("unknown image command '%s'", verb);
        for (int i = 2; i < argc; i++)
                if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
                        fputs(image_usage, stdout);
                        return 0;
                }
        _cleanup_err_ ab_err *e = NULL;
        ab_image_store *s = NULL;
        if (cli_images_open(NULL, data, &s, &e) < 0)
                return cli_fail(&e);
        int rc;
        if (!strcmp(verb, "pull"))
                rc = image_pull(s, argc - 1, argv + 1);
        else if (!strcmp(verb, "ls"))
                rc = image_ls(s, argc - 1, argv + 1);
        else if (!strcmp(verb, "rm"))
                rc = image_rm(s, argc - 1, argv + 1);
        else if (!strcmp(verb, "import"))
                rc = image_import(s, argc - 1, argv + 1);
        else
                rc = image_gc(s);
        ab_image_store_free(s);
        return rc;
}

/* agentbox exec (and the CLI's local manager): the CLI runs commands through
 * the same door as the server, ab_manager_exec, so a CLI exec gets the box's
 * env, its timeout and an audit row in the store like a REST exec. What it
 * opens is only what that needs: the backend, the store and a manager with
 * no recovery and no background jobs (no_jobs). */
#include "cli/cli.h"

#include <getopt.h>
#include <signal.h>

int cli_local_open(cli_local *l, const char *data, const char *id, ab_err **err)
{
        memset(l, 0, sizeof(*l));
        ab_native_opts no = {.data_dir = data && *data ? data : "./data"};
        if (cli_backend_open_env(no.data_dir, true, &l->backend, err) < 0)
                goto fail;
        const char *url = getenv("AGENTBOX_STORE");
        if (!url || !*url) {
                /* A data folder without a store has no records: unless the box is
                 * there (made by `agentbox create`), leave the folder as it is. */
                _cleanup_free_ char *db = xasprintf("%s/agentbox.db", no.data_dir);
                if (access(db, F_OK) < 0) {
                        ab_box_info bi;
                        if (!id)
                                return 0;
                        if (l->backend->ops->info(l->backend, id, &bi, err) < 0)
                                goto fail;
                        ab_box_info_clear(&bi);
                }
        }
        if (ab_store_open_brief(url, no.data_dir, &l->store, err) < 0)
                goto fail;
        l->events = ab_events_new(16);
        l->metrics = ab_metrics_new();
        ab_manager_opts mo = {
            .backend = l->backend,
            .store = l->store,
            .events = l->events,
            .metrics = l->metrics,
            .no_jobs = true,
        };
        ab_limits_default(&mo.limits);
        if (ab_manager_open(&mo, &l->mgr, err) < 0)
                goto fail;
        return 0;
fail:
        cli_local_close(l);
        return -1;
}

void cli_local_close(cli_local *l)
{
        ab_manager_free(l->mgr);
        if (l->metrics)
                ab_metrics_free(l->metrics);
        if (l->events)
                ab_events_free(l->events);
        if (l->store)
                ab_store_close(l->store);
        if (l->backend)
                l->backend->ops->free(l->backend);
        memset(l, 0, sizeof(*l));
}

int cli_local_use(cli_local *l, const char *id, ab_use *u, ab_limits *limits, ab_err **err)
{
        /* As `docker exec`: the CLI does not start a stopped box behind its
         * user's back (`agentbox start` does); a paused one it resumes, as
         * any use does. */
        ab_box_rec r = {0};
        bool known = ab_manager_get(l->mgr, id, NULL, &r, NULL) == 0;
        ab_box_info bi;
        int rc = l->backend->ops->info(l->backend, known ? r.backend_id : id, &bi, err);
        if (rc == 0) {
                if (bi.status == AB_BOX_STOPPED)
                        rc = ab_err_set(err, AB_E_CONFLICT, 0,
                                        "box %s is stopped: start it with `agentbox start %s`", id,
                                        id);
                else if (limits)
                        *limits = bi.limits;
                ab_box_info_clear(&bi);
        }
        ab_box_rec_clear(&r);
        if (rc < 0)
                return -1;
        if (!known && ab_manager_adopt(l->mgr, id, err) < 0)
                return -1; /* a box of `agentbox create` that no server has seen yet */
        return ab_manager_use_begin(l->mgr, id, NULL, u, err);
}

static int write_out(void *ud, int stream, const void *buf, size_t len)
{
        (void)ud;
        int r = ab_write_all(stream == 2 ? STDERR_FILENO : STDOUT_FILENO, buf, len);
        return r == -EPIPE ? r : 0;
}

static const char exec_help[] =
    "Usage: agentbox exec [-i] [-t] [--timeout DURATION] [-e K=V]... [-w DIR] ID [--] CMD "
    "[ARG...]\n"
    "Runs a command in the box and exits with its exit code (124 when it timed out).\n"
    "  agentbox exec ID -- 'ls -la | wc -l'   one word: a shell command line, run as\n"
    "                                         bash -lc would (pipes, $VARS, the login\n"
    "                                         environment)\n"
    "  agentbox exec ID -- ls -la /tmp        two or more words: the program and its\n"
    "                                         arguments, run directly with no shell (each\n"
    "                                         word reaches it as is; PATH lookup; the\n"
    "                                         box's base environment, no profile)\n"
    "A program that is not found exits 127, one that cannot run 126, as in a shell.\n"
    "Options:\n"
    "  --timeout DURATION       kill the command's process tree after this (default: the\n"
    "                           box's timeout)\n"
    "  -e, --env K=V            set an environment variable (repeatable)\n"
    "  -w, --cwd DIR            working directory inside the box (default /workspace)\n"
    "  -i, --stdin              pass this process's standard input to the command\n"
    "  -t, --tty                run the command on a terminal in the box (a pty), as\n"
    "                           docker exec -t does; with -i (-it) an interactive session:\n"
    "                           this terminal goes to raw mode, window size changes\n"
    "                           follow; one word CMD runs as bash -lc CMD; the box's\n"
    "                           timeout does not apply (only --timeout)\n"
    "The exec is recorded in the store's audit table like one of the API.\n";

int cli_exec(int argc, char **argv, const char *data)
{
        static const struct option opts[] = {
            {"timeout", required_argument, NULL, 'T'},
            {"env", required_argument, NULL, 'e'},
            {"cwd", required_argument, NULL, 'w'},
            {"stdin", no_argument, NULL, 'i'},
            {"tty", no_argument, NULL, 't'},
            {"help", no_argument, NULL, 'h'},
            {0},
        };
        _cleanup_err_ ab_err *e = NULL;
        _cleanup_free_ const char **env = xcalloc((size_t)argc + 1, sizeof(char *));
        size_t nenv = 0;
        abc_exec_req req = {.stdin_fd = -1};
        uint64_t timeout_ms = 0;
        bool tty = false;
        int c;
        optind = 1;
        while ((c = getopt_long(argc, argv, "+e:w:ith", opts, NULL)) != -1) {
                switch (c) {
                case 't':
                        tty = true;
                        break;
                case 'T':
                        if (ab_parse_duration_ms(optarg, &timeout_ms, &e) < 0)
                                return cli_bad_option(&e, "--timeout");
                        if (timeout_ms == 0 || timeout_ms > (uint64_t)AB_MAX_TIMEOUT_S * 1000)
                                return cli_usage_error(
                                    "--timeout must be between 1ms and 24h (got %s)", optarg);
                        break;
                case 'e':
                        if (!strchr(optarg, '=') || optarg[0] == '=')
                                return cli_usage_error("--env wants K=V, got '%s'", optarg);
                        env[nenv++] = optarg;
                        break;
                case 'w':
                        req.cwd = optarg;
                        break;
                case 'i':
                        req.stdin_fd = STDIN_FILENO;
                        break;
                case 'h':
                        fputs(exec_help, stdout);
                        return 0;
                default:
                        return EXIT_USAGE;
                }
        }
        if (optind >= argc)
                return cli_usage_error("exec needs a box id and a command%s", NULL);
        const char *id = argv[optind++];
        if (optind < argc && strcmp(argv[optind], "--") == 0)
                optind++;
        if (optind >= argc)
                return cli_usage_error(
                    "exec needs a command after the box id (agentbox exec %s -- CMD)", id);
        if (argc - optind == 1)
                req.command = argv[optind];
        else
                req.argv = (const char *const *)argv + optind;
        if (req.argv && !req.argv[0][0])
                return cli_usage_error("exec: the program name is empty%s", NULL);
        req.env = nenv ? env : NULL;
        req.timeout_ms = (uint32_t)timeout_ms;

        cli_local l;
        if (cli_local_open(&l, data, id, &e) < 0)
                return cli_fail(&e);
        ab_use u;
        ab_limits box_limits;
        if (cli_local_use(&l, id, &u, &box_limits, &e) < 0) {
                cli_local_close(&l);
                return cli_fail(&e);
        }
        /* An interactive session is not a command with a run time: the box's
         * timeout does not apply to it (as with docker exec -t), --timeout does. */
        if (!timeout_ms && u.rec.has_limits && !tty)
                timeout_ms = (uint64_t)u.rec.limits.timeout_s * 1000;
        /* The box's own output cap (agentbox create --output-cap). */
        req.output_cap = box_limits.output_cap;
        if (tty) {
                /* One word is a shell command line, as without -t. */
                const char *shell[] = {"bash", "-lc", req.command, NULL};
                abc_term_req tq = {
                    .argv = req.command ? shell : req.argv, .env = req.env, .cwd = req.cwd};
                int code = cli_term_exec(&l, &u, &tq, req.stdin_fd >= 0, timeout_ms);
                ab_manager_use_end(l.mgr, &u);
                cli_local_close(&l);
                return code;
        }
        abc_exec_res res;
        signal(SIGPIPE, SIG_IGN);
        /* The use ends right after the exec: its activity, audit row and
         * event are written then, in one store transaction (not two). */
        u.late = true;
        int rc = ab_manager_exec(l.mgr, &u, &req, write_out, NULL, &res, &e);
        ab_manager_use_end(l.mgr, &u);
        cli_local_close(&l);
        if (rc < 0)
                return cli_fail(&e);
        if (res.timed_out && timeout_ms)
                fprintf(stderr,
                        "agentbox: command timed out after %llu ms; its processes were "
                        "killed\n",
                        (unsigned long long)timeout_ms);
        else if (res.timed_out)
                fprintf(stderr, "agentbox: command timed out; its processes were killed\n");
        if (res.truncated)
                fprintf(
                    stderr, "agentbox: output was truncated at %llu bytes per stream\n",
                    (unsigned long long)(req.output_cap ? req.output_cap : AB_DEFAULT_OUTPUT_CAP));
        return res.timed_out ? 124 : res.exit_code;
}

/* agentbox move ID --node N: asks a fleet's server to move a stopped native
 * box to another node (POST /v1/sandboxes/{id}/move, docs/fleet.md). The
 * copy runs between the servers; this verb only asks and reports. */
#include "cli/cli.h"
#include "base/buf.h"

#include <curl/curl.h>
#include <jansson.h>

static const char *move_usage =
    "Usage: agentbox move ID --node NODE [--url URL] [--json]\n"
    "\n"
    "Moves the stopped box ID to the fleet node NODE (docs/fleet.md, \"Moving a\n"
    "box\"): its disk is copied to NODE, checked, and the box is owned there; the\n"
    "node it leaves keeps no copy. Only native boxes move; stop the box first.\n"
    "Any node of the fleet takes the request.\n"
    "\n"
    "  --node NODE   the node to move the box to (`agentbox nodes` lists them)\n"
    "  --url URL     a server of the fleet (default $AGENTBOX_URL, else\n"
    "                http://127.0.0.1:8080); the token is $AGENTBOX_TOKEN\n"
    "  --json        print the server's answer (the box, \"moved\", \"from\")\n"
    "\n"
    "To empty a node before maintenance: `POST /v1/nodes/NODE/drain`, stop its\n"
    "boxes, and move each to another node.\n";

static size_t take(char *p, size_t size, size_t n, void *ud)
{
        ab_buf_add(ud, p, size * n);
        return size * n;
}

/* POST body to url; the answer's status and body. -1 when it cannot be sent. */
static int post(const char *url, const char *token, const char *body, long *status, ab_buf *out,
                char *why, size_t why_len)
{
        CURL *c = curl_easy_init();
        if (!c) {
                snprintf(why, why_len, "cannot start libcurl");
                return -1;
        }
        struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
        _cleanup_free_ char *auth =
            token && *token ? xasprintf("Authorization: Bearer %s", token) : NULL;
        if (auth)
                h = curl_slist_append(h, auth);
        curl_easy_setopt(c, CURLOPT_URL, url);
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, take);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, out);
        curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
        CURLcode rc = curl_easy_perform(c);
        if (rc == CURLE_OK)
                curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
        else
                snprintf(why, why_len, "%s", curl_easy_strerror(rc));
        if (auth)
                explicit_bzero(auth, strlen(auth));
        curl_slist_free_all(h);
        curl_easy_cleanup(c);
        return rc == CURLE_OK ? 0 : -1;
}

int cli_move(int argc, char **argv)
{
        const char *id = NULL, *node = NULL, *url = getenv("AGENTBOX_URL");
        bool as_json = false;
        for (int i = 1; i < argc; i++) {
                const char *a = argv[i];
                if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
                        fputs(move_usage, stdout);
                        return 0;
                } else if (!strcmp(a, "--node") && i + 1 < argc) {
                        node = argv[++i];
                } else if (!strncmp(a, "--node=", 7)) {
                        node = a + 7;
                } else if (!strcmp(a, "--url") && i + 1 < argc) {
                        url = argv[++i];
                } else if (!strncmp(a, "--url=", 6)) {
                        url = a + 6;
                } else if (!strcmp(a, "--json")) {
                        as_json = true;
                } else if (a[0] == '-' || id) {
                        fputs(move_usage, stderr);
                        return cli_usage_error("unexpected argument '%s'", a);
                } else {
                        id = a;
                }
        }
        if (!id || !node || !*node) {
                fputs(move_usage, stderr);
                return cli_usage_error("%s", !id ? "no box ID" : "no --node");
        }
        if (!url || !*url)
                url = "http://127.0.0.1:8080";
        _cleanup_free_ char *base = xstrdup(url);
        for (size_t n = strlen(base); n && base[n - 1] == '/'; n--)
                base[n - 1] = 0;
        char *esc = curl_easy_escape(NULL, id, 0);
        _cleanup_free_ char *target = xasprintf("%s/v1/sandboxes/%s/move", base, esc ? esc : id);
        curl_free(esc);
        json_t *body = json_pack("{s:s}", "node", node);
        _cleanup_free_ char *text = json_dumps(body, JSON_COMPACT);
        json_decref(body);
        _cleanup_buf_ ab_buf out = {0};
        long status = 0;
        char why[256] = "";
        if (post(target, getenv("AGENTBOX_TOKEN"), text, &status, &out, why, sizeof(why)) < 0) {
                fprintf(stderr, "agentbox move: cannot reach %s: %s\n", url, why);
                return 1;
        }
        json_t *ans = out.n ? json_loadb(out.p, out.n, 0, NULL) : NULL;
        int rc = status == 200 ? 0 : 1;
        if (as_json) {
                fwrite(out.p ? out.p : "", 1, out.n, stdout);
                putchar('\n');
        } else if (rc == 0) {
                bool moved = json_is_true(json_object_get(ans, "moved"));
                if (moved)
                        printf("box %s moved from node %s to node %s\n", id,
                               json_string_value(json_object_get(ans, "from")), node);
                else
                        printf("box %s is on node %s already: nothing to do\n", id, node);
        } else {
                json_t *err = json_object_get(ans, "error");
                const char *msg = json_string_value(json_object_get(err, "message"));
                fprintf(stderr, "agentbox move: HTTP %ld: %s\n", status,
                        msg ? msg : (out.p ? out.p : "no answer"));
        }
        json_decref(ans);
        return rc;
}

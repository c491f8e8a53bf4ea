/* The web console (docs/console.md): static files embedded into the binary
 * (console_assets.h), served at / (index.html) and /console/NAME, with a
 * strict Content-Security-Policy, ETag revalidation and no other server. */
#include "rest/console_assets.h"
#include "rest/rest.h"

/* Scripts, styles, fonts and images only from this origin, no inline script
 * or style, no plugins, no framing; fetch and the terminal's WebSocket go to
 * this origin only ('self' covers ws: of the same host). blob: images are the
 * file previews (fetched with the token in a header, shown from a blob URL). */
#define CONSOLE_CSP                                                                                \
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' blob:; "          \
        "font-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; "                \
        "form-action 'self'; frame-ancestors 'none'"

static const ab_console_asset *find_asset(const char *name)
{
        for (size_t i = 0; i < ab_console_n_assets; i++)
                if (!strcmp(ab_console_assets[i].name, name))
                        return &ab_console_assets[i];
        return NULL;
}

/* True when If-None-Match names etag (a list of ETags, or "*"). */
static bool etag_matches(const char *inm, const char *etag)
{
        if (!inm)
                return false;
        size_t n = strlen(etag);
        for (const char *p = inm; *p;) {
                while (*p == ' ' || *p == ',')
                        p++;
                if (*p == '*')
                        return true;
                if (!strncmp(p, "W/", 2))
                        p += 2;
                if (!strncmp(p, etag, n) && (p[n] == 0 || p[n] == ',' || p[n] == ' '))
                        return true;
                while (*p && *p != ',')
                        p++;
        }
        return false;
}

static void console_headers(struct MHD_Response *resp, const ab_console_asset *a)
{
        /* Revalidate every time: a new binary may bring new files under the
         * same names, and a 304 costs a round trip on the same connection. */
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        MHD_add_response_header(resp, "ETag", a->etag);
        MHD_add_response_header(resp, "Content-Security-Policy", CONSOLE_CSP);
        MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
        MHD_add_response_header(resp, "X-Frame-Options", "DENY");
        MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
        MHD_add_response_header(resp, "Cross-Origin-Opener-Policy", "same-origin");
        MHD_add_response_header(resp, "Cross-Origin-Resource-Policy", "same-origin");
}

static enum MHD_Result send_asset(ab_req *r, const ab_console_asset *a)
{
        unsigned status = 200;
        struct MHD_Response *resp;
        if (etag_matches(req_header(r, "If-None-Match"), a->etag)) {
                status = 304;
                resp = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
        } else {
                resp = MHD_create_response_from_buffer(a->len, (void *)a->data,
                                                       MHD_RESPMEM_PERSISTENT);
                MHD_add_response_header(resp, "Content-Type", a->content_type);
        }
        console_headers(resp, a);
        /* through resp_send: on a worker the answer is queued by MHD's thread */
        return resp_send(r, status, resp);
}

enum MHD_Result route_console(ab_req *r, const char *name)
{
        const ab_console_asset *a = find_asset(name ? name : "index.html");
        if (!a && !ab_console_has_xterm && name &&
            (strstr(name, "xterm") || !strcmp(name, "addon-fit.mjs")))
                return resp_error(r, 404, "not_found",
                                  "xterm.js was not installed when this server was built: run "
                                  "scripts/npm-deps.sh, then rebuild");
        if (!a)
                return resp_error(r, 404, "not_found", "no console file \"%s\"", name);
        return send_asset(r, a);
}

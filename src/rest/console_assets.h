/* console_assets.h - the web console's files, embedded into the binary at
 * build time by console/embed.py (the generated console_assets.c defines
 * these), served by routes_console.c. */
#ifndef AB_CONSOLE_ASSETS_H
#define AB_CONSOLE_ASSETS_H

#include <stdbool.h>
#include <stddef.h>

typedef struct ab_console_asset {
        const char *name;         /* as served under /console/: "app.mjs", "xterm.mjs" */
        const char *content_type; /* e.g. "text/javascript; charset=utf-8" */
        const unsigned char *data;
        size_t len;
        const char *etag; /* strong ETag, quoted: "\"<16 hex digits of sha256>\"" */
} ab_console_asset;

extern const ab_console_asset ab_console_assets[];
extern const size_t ab_console_n_assets;
/* False when xterm.js was not installed at build time (the console then
 * shows how to install it in place of the terminal). */
extern const bool ab_console_has_xterm;

#endif

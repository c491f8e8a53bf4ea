/* cli.h - shared pieces of the agentbox command line. */
#ifndef AB_CLI_H
#define AB_CLI_H

#include "backend/backend.h"

/* Exit codes (documented in `agentbox --help`). */
#define EXIT_USAGE    2   /* bad command line */
#define EXIT_AGENTBOX 125 /* agentbox itself failed (box missing, not running, ...) */

/* Prints "agentbox: MESSAGE" (and a hint for the error's code) to stderr. */
void cli_error(const ab_err *e);

/* agentbox cp SRC DST: one side is ID:PATH. Returns an exit code. */
int cli_cp(ab_backend *b, int argc, char **argv);

/* agentbox serve [...]: runs the HTTP service until SIGINT/SIGTERM.
 * data_flag is the global --data value (or NULL). Returns an exit code. */
int cli_serve(int argc, char **argv, const char *data_flag);

#endif

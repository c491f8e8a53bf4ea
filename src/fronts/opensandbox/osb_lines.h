/* osb_lines.h - a command's output as OpenSandbox's execd sends it: one
 * stdout or stderr event per line, without the line's end. A foreground
 * command's lines end at \n or \r (\r\n is one end; an empty line is sent
 * as "\n"); a session run's at \n only (a \r before it dropped, empty lines
 * not sent), as execd's bash sessions scan them. A last line without an end
 * goes out when the command ends (osb_lines_flush). execd holds a line of
 * any length; here a line longer than OSB_LINE_MAX goes out in pieces of
 * at most that size, cut between characters, so a box that never prints a
 * newline cannot make the server hold its output. Bytes that are not UTF-8
 * become U+FFFD, as in execd's JSON; a character split between two chunks
 * arrives whole. Not thread-safe: one feeder per osb_lines. */
#ifndef AB_OSB_LINES_H
#define AB_OSB_LINES_H

#include "base/buf.h"

#include <jansson.h>
#include <stdbool.h>

#define OSB_LINE_MAX 65536

typedef struct osb_lines {
        ab_buf b;         /* the line so far */
        bool cr;          /* the last byte was a \r that ended a line */
        bool session;     /* a session run's rules */
        const char *type; /* the events' type: "stdout" or "stderr" (static) */
        /* the events of the lines the last feeds ended ("data: {...}\n\n"
         * each), for the caller to send at once and empty */
        ab_buf frames;
} osb_lines;

/* Appends event ev (taken), stamped with the time ("timestamp", unix ms),
 * to f as a server-sent event. */
void osb_sse_frame(ab_buf *f, json_t *ev);
/* Takes the next n bytes of output; the lines they end go to l->frames. */
void osb_lines_feed(osb_lines *l, const char *p, size_t n);
/* The command ended: a last line without its end goes to l->frames. */
void osb_lines_flush(osb_lines *l);
/* Frees l's buffers (l may be fed again: it starts empty). */
void osb_lines_free(osb_lines *l);

#endif
